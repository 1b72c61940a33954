/* The nn ops beyond their gradients (test_grad checks those): forward values
 * against double-precision references, thread-count independence, the random
 * ops' reproducibility, exact hash formulas and statistics, shape errors, and
 * the LayerNorm / RMSNorm / Embedding modules. */
#include <math.h>

#include "check.h"
#include "ir/model.h"
#include "ir/ir.h"
#include "session.h"

static uint64_t lcg = 99;
static float urand(void) { /* [0, 1) */
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(lcg >> 40) * (1.0f / 16777216.0f);
}

/* A session with no optimizer around `fn` (which returns a scalar loss and
 * captures what the test reads); grads stay readable. */
static tg_session *open_fn(tg_model *m, tg_trace_fn fn, void *u, const tg_input_decl *in, int n_in, uint64_t seed,
                           int threads) {
    tg_train_spec spec = {.model = m, .loss = fn, .user = u, .inputs = in, .n_inputs = n_in,
                          .optim = {.kind = TG_OPT_NONE}, .seed = seed, .threads = threads};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    CHECK(st == TG_OK, "session: %s", tg_last_error());
    return s;
}

static int64_t count_close(const float *a, const double *ref, int64_t n, double atol, double rtol, const char *what) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(a[i] - ref[i]) > atol + rtol * fabs(ref[i])) {
            if (bad < 3) fprintf(stderr, "  %s[%lld]: %.8g vs reference %.8g\n", what, (long long)i, a[i], ref[i]);
            bad++;
        }
    }
    return bad;
}

/* ---- cross-entropy and NLL ---- */

/* 37 rows (not a multiple of the kernel's 16-row blocks); 13 and 16 classes
 * take the vector kernel, 40 and 131 the row-at-a-time one (131: its four
 * accumulators, then a tail of full and partial vectors). */
enum { CE_R = 37, CE_VMAX = 131 };
static int CE_V;
static float ce_x[CE_R * CE_VMAX];
static int32_t ce_t[CE_R];

static tg_tensor ce_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x"), t = tg_input(g, "t");
    tg_capture(tg_cross_entropy(x, t, TG_REDUCTION_NONE), "none");
    tg_tensor mean = tg_capture(tg_cross_entropy(x, t, TG_REDUCTION_MEAN), "mean");
    tg_capture(tg_cross_entropy(x, t, TG_REDUCTION_SUM), "sum");
    tg_capture(tg_nll_loss(tg_log_softmax(x, -1), t, TG_REDUCTION_NONE), "nll");
    return mean;
}

static void cross_entropy_values(int classes) {
    CE_V = classes;
    for (int r = 0; r < CE_R; r++) {
        /* Rows near +-100 overflow exp() without the max shift. */
        float off = r % 3 == 0 ? 100.0f : r % 3 == 1 ? -100.0f : 0.0f;
        for (int v = 0; v < CE_V; v++) ce_x[r * CE_V + v] = off + 8.0f * urand() - 4.0f;
        ce_t[r] = r % 11 == 5 ? -1 : r % 11 == 7 ? CE_V : r % 11 == 9 ? -100 : (r * 7) % CE_V;
    }
    double ref[CE_R], sum = 0;
    for (int r = 0; r < CE_R; r++) {
        const float *x = ce_x + r * CE_V;
        double m = -INFINITY, z = 0;
        for (int v = 0; v < CE_V; v++) m = x[v] > m ? x[v] : m;
        for (int v = 0; v < CE_V; v++) z += exp(x[v] - m);
        ref[r] = ce_t[r] >= 0 && ce_t[r] < CE_V ? m + log(z) - x[ce_t[r]] : 0.0;
        sum += ref[r];
    }
    tg_model *m = tg_model_new();
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(CE_R, CE_V)}, {"t", TG_I32, TG_SHAPE(CE_R)}};
    tg_session *s = open_fn(m, ce_fn, NULL, in, 2, 1, 2);
    float none[CE_R], nll[CE_R], mean = NAN, total = NAN;
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", ce_x, CE_R * CE_V), TG_FEED("t", ce_t, CE_R)}, 2, NULL));
    CHECK_OK(tg_session_read(s, "none", none, CE_R));
    CHECK_OK(tg_session_read(s, "nll", nll, CE_R));
    CHECK_OK(tg_session_read(s, "mean", &mean, 1));
    CHECK_OK(tg_session_read(s, "sum", &total, 1));
    CHECK(count_close(none, ref, CE_R, 2e-5, 2e-6, "cross_entropy") == 0, "cross_entropy (none) values");
    CHECK(count_close(nll, ref, CE_R, 2e-5, 2e-6, "nll(log_softmax)") == 0, "nll_loss(log_softmax) values");
    CHECK(fabs(total - sum) < 1e-4 + 1e-6 * fabs(sum), "cross_entropy sum %.8g vs %.8g", total, sum);
    /* out-of-range targets add nothing but still count in the mean's denominator */
    CHECK(fabs(mean - sum / CE_R) < 1e-5 + 1e-6 * fabs(sum), "cross_entropy mean %.8g vs %.8g", mean, sum / CE_R);
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- layer norm, RMS norm ---- */

enum { LN_R = 33, LN_D = 64 };
static float ln_x[LN_R * LN_D], ln_g[LN_D], ln_b[LN_D];

static tg_tensor norm_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x"), gain = tg_input(g, "g"), bias = tg_input(g, "b");
    tg_capture(tg_layer_norm(x, gain, bias, 1e-5f), "ln");
    tg_capture(tg_rms_norm(x, gain, 1e-6f), "rms");
    return tg_sum(tg_capture(tg_layer_norm(x, gain, bias, 0.5f), "ln_eps"), TG_ALL, false);
}

/* Layer norm (eps given) and RMS norm (eps 1e-6) of the rows of scale * x
 * [LN_R, LN_D] with ln_g and ln_b, in double. */
static void norm_refs(const float *X, double scale, double eps, double *ln, double *rms) {
    for (int r = 0; r < LN_R; r++) {
        double x[LN_D], mu = 0, var = 0, ms = 0;
        for (int i = 0; i < LN_D; i++) x[i] = scale * X[r * LN_D + i], mu += x[i], ms += x[i] * x[i];
        mu /= LN_D, ms /= LN_D;
        for (int i = 0; i < LN_D; i++) var += (x[i] - mu) * (x[i] - mu);
        var /= LN_D;
        for (int i = 0; i < LN_D; i++) {
            ln[r * LN_D + i] = (x[i] - mu) / sqrt(var + eps) * ln_g[i] + ln_b[i];
            if (rms) rms[r * LN_D + i] = x[i] / sqrt(ms + 1e-6) * ln_g[i];
        }
    }
}

static void norm_values(void) {
    for (int i = 0; i < LN_R * LN_D; i++) ln_x[i] = 5.0f + 6.0f * urand() - 3.0f; /* mean far from 0 */
    for (int i = 0; i < LN_D; i++) ln_g[i] = 2.0f * urand() - 1.0f, ln_b[i] = 2.0f * urand() - 1.0f;
    static double ref_ln[LN_R * LN_D], ref_rms[LN_R * LN_D], ref_eps[LN_R * LN_D];
    norm_refs(ln_x, 1.0, 1e-5, ref_ln, ref_rms);
    norm_refs(ln_x, 1.0, 0.5, ref_eps, NULL);
    tg_model *m = tg_model_new();
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(LN_R, LN_D)}, {"g", TG_F32, TG_SHAPE(LN_D)},
                          {"b", TG_F32, TG_SHAPE(LN_D)}};
    tg_session *s = open_fn(m, norm_fn, NULL, in, 3, 1, 2);
    static float ln[LN_R * LN_D], rms[LN_R * LN_D], eps[LN_R * LN_D];
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", ln_x, LN_R * LN_D), TG_FEED("g", ln_g, LN_D), TG_FEED("b", ln_b, LN_D)}, 3, NULL));
    CHECK_OK(tg_session_read(s, "ln", ln, LN_R * LN_D));
    CHECK_OK(tg_session_read(s, "rms", rms, LN_R * LN_D));
    CHECK_OK(tg_session_read(s, "ln_eps", eps, LN_R * LN_D));
    CHECK(count_close(ln, ref_ln, LN_R * LN_D, 1e-5, 1e-5, "layer_norm") == 0, "layer_norm values");
    CHECK(count_close(rms, ref_rms, LN_R * LN_D, 1e-5, 1e-5, "rms_norm") == 0, "rms_norm values");
    CHECK(count_close(eps, ref_eps, LN_R * LN_D, 1e-5, 1e-5, "layer_norm eps") == 0, "layer_norm honours eps");
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- embedding: exact gather, zero rows, exact scatter-add ---- */

enum { EM_V = 9, EM_D = 5, EM_N = 40 };
static tg_param em_table;
static int32_t em_idx[EM_N];
static float em_w[EM_N * EM_D];

static tg_tensor embedding_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor y = tg_capture(tg_embedding(tg_use(g, em_table), tg_input(g, "idx")), "y");
    return tg_sum(tg_mul(y, tg_constant(g, TG_SHAPE(EM_N, EM_D), em_w)), TG_ALL, false);
}

static void embedding_values(void) {
    static float table[EM_V * EM_D];
    for (int i = 0; i < EM_V * EM_D; i++) table[i] = 2.0f * urand() - 1.0f;
    for (int i = 0; i < EM_N * EM_D; i++) em_w[i] = 2.0f * urand() - 1.0f;
    for (int r = 0; r < EM_N; r++) em_idx[r] = r % 13 == 4 ? -3 : r % 13 == 8 ? EM_V : (r * r) % EM_V;
    tg_model *m = tg_model_new();
    em_table = tg_model_param(m, "table", TG_SHAPE(EM_V, EM_D), tg_init_values(table));
    tg_input_decl in[] = {{"idx", TG_I32, TG_SHAPE(EM_N)}};
    tg_session *s = open_fn(m, embedding_fn, NULL, in, 1, 1, 3);
    float y[EM_N * EM_D], grad[EM_V * EM_D], want[EM_V * EM_D] = {0};
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("idx", em_idx, EM_N)}, 1, NULL));
    CHECK_OK(tg_session_read(s, "y", y, EM_N * EM_D));
    CHECK_OK(tg_session_get_grad(s, "table", grad, EM_V * EM_D));
    int bad = 0;
    for (int r = 0; r < EM_N; r++) {
        bool in_range = em_idx[r] >= 0 && em_idx[r] < EM_V;
        for (int c = 0; c < EM_D; c++) {
            float w = in_range ? table[em_idx[r] * EM_D + c] : 0.0f;
            bad += y[r * EM_D + c] != w;
            if (in_range) want[em_idx[r] * EM_D + c] += em_w[r * EM_D + c]; /* index order, as documented */
        }
    }
    CHECK(bad == 0, "embedding: %d elements differ from the gathered rows (zero rows out of range)", bad);
    CHECK(memcmp(grad, want, sizeof grad) == 0, "embedding gradient is not the in-order scatter-add");
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- split / merge heads, rope ---- */

static tg_tensor heads_rope_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x");                          /* [2, 3, 8] */
    tg_tensor h = tg_capture(tg_split_heads(x, 4), "split"); /* [2, 4, 3, 2] */
    tg_capture(tg_merge_heads(h), "merged");
    tg_capture(tg_rope(x, 0.0f), "rope");
    tg_capture(tg_rope(x, 3.0f), "rope3");
    return tg_sum(h, TG_ALL, false);
}

static void heads_and_rope(void) {
    float x[48];
    for (int i = 0; i < 48; i++) x[i] = 2.0f * urand() - 1.0f;
    tg_model *m = tg_model_new();
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(2, 3, 8)}};
    tg_session *s = open_fn(m, heads_rope_fn, NULL, in, 1, 1, 1);
    float split[48], merged[48], rope[48], rope3[48];
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 48)}, 1, NULL));
    tg_shape sh;
    tg_dtype dt;
    CHECK_OK(tg_session_capture_info(s, "split", &sh, &dt));
    CHECK(tg_shape_eq(sh, TG_SHAPE(2, 4, 3, 2)), "split_heads shape");
    CHECK_OK(tg_session_read(s, "split", split, 48));
    CHECK_OK(tg_session_read(s, "merged", merged, 48));
    CHECK_OK(tg_session_read(s, "rope", rope, 48));
    CHECK_OK(tg_session_read(s, "rope3", rope3, 48));
    int bad = 0;
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 4; h++)
            for (int t = 0; t < 3; t++)
                for (int d = 0; d < 2; d++) bad += split[((b * 4 + h) * 3 + t) * 2 + d] != x[(b * 3 + t) * 8 + h * 2 + d];
    CHECK(bad == 0, "split_heads: %d elements misplaced", bad);
    CHECK(memcmp(merged, x, sizeof x) == 0, "merge_heads(split_heads(x)) != x");
    double ref[48], ref3[48];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < 4; i++) {
                const float *r = x + (b * 3 + t) * 8;
                for (int k = 0; k < 2; k++) {
                    double ang = t * pow(k ? 3.0 : 10000.0, -2.0 * i / 8.0);
                    double *o = (k ? ref3 : ref) + (b * 3 + t) * 8;
                    o[i] = r[i] * cos(ang) - r[i + 4] * sin(ang);
                    o[i + 4] = r[i + 4] * cos(ang) + r[i] * sin(ang);
                }
            }
    CHECK(count_close(rope, ref, 48, 1e-6, 1e-6, "rope") == 0, "rope values (base 10000)");
    CHECK(count_close(rope3, ref3, 48, 1e-6, 1e-6, "rope3") == 0, "rope values (base 3)");
    tg_session_free(s);
    tg_model_free(m);
}

/* rope over 1000 positions: the table's rotations step from one exact anchor
 * to the next (every 256 positions); every angle stays within a float's
 * rounding of cos and sin in double. x = (1, 0.5, 0, 0) per position. */
static tg_tensor long_rope_fn(tg_graph *g, void *u) {
    (void)u;
    tg_capture(tg_rope(tg_input(g, "x"), 0.0f), "rope");
    return tg_sum(tg_input(g, "x"), TG_ALL, false);
}

static void long_rope(void) {
    enum { T = 1000 };
    static float x[T * 4], y[T * 4];
    for (int t = 0; t < T; t++) x[4 * t] = 1.0f, x[4 * t + 1] = 0.5f;
    tg_model *m = tg_model_new();
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(T, 4)}};
    tg_session *s = open_fn(m, long_rope_fn, NULL, in, 1, 1, 1);
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, T * 4)}, 1, NULL));
    CHECK_OK(tg_session_read(s, "rope", y, T * 4));
    static double ref[T * 4];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < 2; i++) {
            double ang = t * pow(10000.0, -2.0 * i / 4.0), a = i ? 0.5 : 1.0;
            ref[4 * t + i] = a * cos(ang), ref[4 * t + 2 + i] = a * sin(ang);
        }
    CHECK(count_close(y, ref, T * 4, 2e-7, 1e-6, "long rope") == 0, "rope over %d positions", T);
    tg_session_free(s);
    /* one table per (T, D, base): x, its table, two ropes, a relu; a new base, a new table and rope */
    tg_graph *g = tg_graph_new(m);
    tg_tensor x6 = tg_input_new(g, "x", TG_F32, TG_SHAPE(6, 8));
    tg_rope(x6, 0.0f);
    tg_rope(tg_relu(x6), 10000.0f);
    CHECK(tg_graph_node_count(g) == 5, "two ropes of one shape and base: %d nodes, want 5", tg_graph_node_count(g));
    tg_rope(x6, 3.0f);
    CHECK(tg_graph_node_count(g) == 7, "a rope of another base: %d nodes, want 7", tg_graph_node_count(g));
    tg_graph_free(g);
    tg_model_free(m);
}

/* ---- in place: outputs written over an input that dies with the op ---- */

static tg_tensor inplace_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x"), gain = tg_input(g, "g"), bias = tg_input(g, "b");
    /* captures live in their own buffers, so each op feeds one more (+ 0) */
    tg_capture(tg_add_s(tg_layer_norm(tg_mul_s(x, 1.5f), gain, bias, 1e-5f), 0.0f), "ln");
    tg_capture(tg_add_s(tg_rms_norm(tg_mul_s(x, 1.5f), gain, 1e-6f), 0.0f), "rms");
    tg_capture(tg_add_s(tg_rope(tg_mul_s(x, 1.5f), 0.0f), 0.0f), "rope");
    tg_capture(tg_add_s(tg_dropout(tg_mul_s(x, 1.5f), 0.5f), 0.0f), "drop");
    return tg_sum(x, TG_ALL, false);
}

static void in_place(void) {
    tg_model *m = tg_model_new();
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(LN_R, LN_D)}, {"g", TG_F32, TG_SHAPE(LN_D)},
                          {"b", TG_F32, TG_SHAPE(LN_D)}};
    tg_session *s = open_fn(m, inplace_fn, NULL, in, 3, 1, 2);
    if (!s) return;
    /* The planner did put each op over its (dying, same-shaped) input. */
    const tg_graph *g = s->b.prog->g;
    const tg_plan *pl = &s->b.prog->plan;
    int shared = 0;
    for (int i = 0; i < g->n; i++) {
        tg_opcode op = g->nodes[i].op;
        if (op != TG_OP_LAYER_NORM && op != TG_OP_RMS_NORM && op != TG_OP_ROPE && op != TG_OP_DROPOUT) continue;
        int x = g->nodes[i].in[0];
        shared += pl->slot[i].arena == pl->slot[x].arena && pl->slot[i].offset == pl->slot[x].offset;
    }
    CHECK(shared == 4, "only %d of 4 ops were planned in place", shared);
    static float x[LN_R * LN_D], ln[LN_R * LN_D], rms[LN_R * LN_D], rope[LN_R * LN_D], drop[LN_R * LN_D];
    static double ref_ln[LN_R * LN_D], ref_rms[LN_R * LN_D], ref_rope[LN_R * LN_D];
    for (int i = 0; i < LN_R * LN_D; i++) x[i] = 4.0f * urand() - 2.0f;
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, LN_R * LN_D), TG_FEED("g", ln_g, LN_D), TG_FEED("b", ln_b, LN_D)}, 3, NULL));
    CHECK_OK(tg_session_read(s, "ln", ln, LN_R * LN_D));
    CHECK_OK(tg_session_read(s, "rms", rms, LN_R * LN_D));
    CHECK_OK(tg_session_read(s, "rope", rope, LN_R * LN_D));
    CHECK_OK(tg_session_read(s, "drop", drop, LN_R * LN_D));
    norm_refs(x, 1.5, 1e-5, ref_ln, ref_rms);
    int64_t bad_drop = 0;
    for (int i = 0; i < LN_R * LN_D; i++) bad_drop += drop[i] != 0.0f && drop[i] != 1.5f * x[i] * 2.0f;
    for (int r = 0; r < LN_R; r++) { /* rows are positions 0..LN_R-1 of one sequence */
        const float *xr = x + r * LN_D;
        for (int i = 0; i < LN_D / 2; i++) {
            double ang = r * pow(10000.0, -2.0 * i / LN_D), a = 1.5 * xr[i], b = 1.5 * xr[i + LN_D / 2];
            ref_rope[r * LN_D + i] = a * cos(ang) - b * sin(ang);
            ref_rope[r * LN_D + i + LN_D / 2] = b * cos(ang) + a * sin(ang);
        }
    }
    CHECK(count_close(ln, ref_ln, LN_R * LN_D, 1e-5, 1e-5, "layer_norm in place") == 0, "layer_norm in place");
    CHECK(count_close(rms, ref_rms, LN_R * LN_D, 1e-5, 1e-5, "rms_norm in place") == 0, "rms_norm in place");
    CHECK(count_close(rope, ref_rope, LN_R * LN_D, 1e-5, 1e-5, "rope in place") == 0, "rope in place");
    CHECK(bad_drop == 0, "dropout in place: %lld elements neither 0 nor x / (1 - p)", (long long)bad_drop);
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- one_hot @ table is compiled as a gather ---- */

static tg_tensor one_hot_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor y = tg_matmul(tg_one_hot(tg_input(g, "idx"), EM_V), tg_use(g, em_table)); /* [EM_N, EM_D] */
    tg_capture(y, "y");
    return tg_sum(tg_mul(y, tg_constant(g, TG_SHAPE(EM_N, EM_D), em_w)), TG_ALL, false);
}

/* The product of a one_hot and a table is the table's rows (zero rows out
 * of range) and its gradient the embedding's in-order scatter-add: the
 * compiled graph holds an embedding and its gradient, no product over the
 * vocabulary (embedding_values set up the table, indices and weights). */
static void one_hot_products(void) {
    static float table[EM_V * EM_D];
    for (int i = 0; i < EM_V * EM_D; i++) table[i] = 2.0f * urand() - 1.0f;
    tg_model *m = tg_model_new();
    em_table = tg_model_param(m, "table", TG_SHAPE(EM_V, EM_D), tg_init_values(table));
    tg_input_decl in[] = {{"idx", TG_I32, TG_SHAPE(EM_N)}};
    tg_session *s = open_fn(m, one_hot_fn, NULL, in, 1, 1, 3);
    float y[EM_N * EM_D], grad[EM_V * EM_D], want[EM_V * EM_D] = {0};
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("idx", em_idx, EM_N)}, 1, NULL));
    CHECK_OK(tg_session_read(s, "y", y, EM_N * EM_D));
    CHECK_OK(tg_session_get_grad(s, "table", grad, EM_V * EM_D));
    int bad = 0;
    for (int r = 0; r < EM_N; r++) {
        bool in_range = em_idx[r] >= 0 && em_idx[r] < EM_V;
        for (int c = 0; c < EM_D; c++) {
            bad += y[r * EM_D + c] != (in_range ? table[em_idx[r] * EM_D + c] : 0.0f);
            if (in_range) want[em_idx[r] * EM_D + c] += em_w[r * EM_D + c];
        }
    }
    CHECK(bad == 0, "one_hot @ table: %d elements differ from the gathered rows", bad);
    CHECK(memcmp(grad, want, sizeof grad) == 0, "one_hot @ table: the gradient is not the in-order scatter-add");
    const tg_graph *g = tg_session_graph(s);
    int products = 0, gathers = 0, scatters = 0;
    for (int i = 0; i < g->n; i++) {
        products += g->nodes[i].op == TG_OP_MATMUL;
        gathers += g->nodes[i].op == TG_OP_EMBEDDING;
        scatters += g->nodes[i].op == TG_OP_EMBEDDING_GRAD;
    }
    CHECK(products == 0 && gathers == 1 && scatters == 1, "one_hot @ table compiled to %d products, %d gathers, %d scatters",
          products, gathers, scatters);
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- results do not depend on the thread count ---- */

/* A tiny tied-embedding model over the three modules: next-token
 * cross-entropy of tok -> embedding -> RMS norm -> layer norm -> W^T. */
typedef struct {
    tg_embedding emb;
    tg_layernorm ln;
    tg_rmsnorm rms;
} tiny;

static tg_tensor tiny_fn(tg_graph *g, void *u) {
    tiny *p = u;
    tg_tensor h = tg_embedding_fwd(g, &p->emb, tg_input(g, "tok"));
    h = tg_layernorm_fwd(g, &p->ln, tg_rmsnorm_fwd(g, &p->rms, h));
    tg_tensor logits = tg_matmul_t(h, tg_use(g, p->emb.W), false, true);
    return tg_cross_entropy(logits, tg_input(g, "next"), TG_REDUCTION_MEAN);
}

enum { TH_V = 50, TH_D = 64, TH_N = 1024 };

static void thread_independence(void) {
    static int32_t idx[TH_N], t[TH_N];
    for (int i = 0; i < TH_N; i++) idx[i] = (int32_t)(urand() * urand() * TH_V), t[i] = (int32_t)(urand() * TH_V);
    static float ref[3][TH_V * TH_D], got[3][TH_V * TH_D];
    const char *names[3] = {"emb.W", "ln.g", "rms.g"};
    int64_t sizes[3] = {TH_V * TH_D, TH_D, TH_D};
    float loss0 = 0;
    for (int threads = 1; threads <= 4; threads++) {
        tg_model *m = tg_model_new();
        tiny p = {tg_embedding_new(m, "emb", TH_V, TH_D), tg_layernorm_new(m, "ln", TH_D),
                  tg_rmsnorm_new(m, "rms", TH_D)};
        tg_input_decl in[] = {{"tok", TG_I32, TG_SHAPE(TH_N)}, {"next", TG_I32, TG_SHAPE(TH_N)}};
        tg_session *s = open_fn(m, tiny_fn, &p, in, 2, 5, threads);
        float loss = NAN;
        CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("tok", idx, TH_N), TG_FEED("next", t, TH_N)}, 2, &loss));
        for (int k = 0; k < 3; k++) CHECK_OK(tg_session_get_grad(s, names[k], threads == 1 ? ref[k] : got[k], sizes[k]));
        if (threads == 1) loss0 = loss;
        else {
            CHECK(loss == loss0, "loss with %d threads %.9g differs from 1 thread %.9g", threads, loss, loss0);
            for (int k = 0; k < 3; k++)
                CHECK(memcmp(ref[k], got[k], (size_t)sizes[k] * 4) == 0, "%s grad with %d threads differs from 1 thread",
                      names[k], threads);
        }
        tg_session_free(s);
        tg_model_free(m);
    }
}

/* ---- random ops ---- */

enum { RN = 200000, CAT_R = 20000, CAT_V = 5 };
static const float cat_logits[CAT_V] = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f};
static tg_param drop_x;

static tg_tensor random_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_use(g, drop_x);
    tg_tensor d = tg_capture(tg_dropout(x, 0.3f), "drop");
    tg_capture(tg_dropout(x, 0.3f), "drop2"); /* a second site: its own salt, its own mask */
    tg_capture(tg_randn(g, TG_SHAPE(RN)), "randn");
    static float logits[CAT_R * CAT_V];
    for (int r = 0; r < CAT_R; r++) memcpy(logits + r * CAT_V, cat_logits, sizeof cat_logits);
    tg_capture(tg_categorical(tg_constant(g, TG_SHAPE(CAT_R, CAT_V), logits)), "cat");
    tg_tensor seed = {g, tg_ir_rng_seed(g)};
    tg_capture(seed, "seed");
    CHECK(tg_dropout(x, 0.0f).id == x.id, "dropout with p = 0 is not x itself");
    /* loss = sum(dropout(x) * w) with w[e] = e % 7 - 3: d loss / dx = w * mask / (1 - p) */
    static float w[RN];
    for (int e = 0; e < RN; e++) w[e] = (float)(e % 7 - 3);
    return tg_sum(tg_mul(d, tg_constant(g, TG_SHAPE(RN), w)), TG_ALL, false);
}

typedef struct {
    float *drop, *drop2, *randn, *grad;
    int32_t *cat, seed[2];
} draws;

static void take(tg_session *s, draws *d) {
    CHECK_OK(tg_session_step(s, NULL, 0, NULL));
    CHECK_OK(tg_session_read(s, "drop", d->drop, RN));
    CHECK_OK(tg_session_read(s, "drop2", d->drop2, RN));
    CHECK_OK(tg_session_read(s, "randn", d->randn, RN));
    CHECK_OK(tg_session_read(s, "cat", d->cat, CAT_R));
    CHECK_OK(tg_session_read(s, "seed", d->seed, 2));
    CHECK_OK(tg_session_get_grad(s, "x", d->grad, RN));
}

static draws new_draws(void) {
    draws d = {malloc(RN * 4), malloc(RN * 4), malloc(RN * 4), malloc(RN * 4), malloc(CAT_R * 4), {0, 0}};
    return d;
}
static void free_draws(draws *d) { free(d->drop), free(d->drop2), free(d->randn), free(d->grad), free(d->cat); }

static int64_t n_differ(const void *a, const void *b, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += ((const uint32_t *)a)[i] != ((const uint32_t *)b)[i];
    return k;
}

/* The documented method, restated: the GPU must reproduce these exactly. */
static int32_t categorical_ref(const float *x, int V, float u) {
    float m = -INFINITY, z = 0.0f, run = 0.0f;
    for (int v = 0; v < V; v++) m = x[v] > m ? x[v] : m;
    for (int v = 0; v < V; v++) z += expf(x[v] - m);
    for (int v = 0; v < V; v++) {
        run += expf(x[v] - m);
        if (u * z < run) return v;
    }
    return V - 1;
}

static void random_ops(void) {
    static float ones[RN];
    for (int e = 0; e < RN; e++) ones[e] = 1.0f;
    tg_model *m = tg_model_new();
    drop_x = tg_model_param(m, "x", TG_SHAPE(RN), tg_init_values(ones));
    tg_session *a = open_fn(m, random_fn, NULL, NULL, 0, 7, 2);
    tg_session *b = open_fn(m, random_fn, NULL, NULL, 0, 7, 1);
    tg_session *c = open_fn(m, random_fn, NULL, NULL, 0, 8, 2);
    if (!a || !b || !c) return;
    draws a1 = new_draws(), a2 = new_draws(), b1 = new_draws(), c1 = new_draws();
    take(a, &a1);
    take(a, &a2);
    take(b, &b1);
    take(c, &c1);

    /* Same session seed and step: the same draws, whatever the thread count. */
    CHECK(n_differ(a1.drop, b1.drop, RN) == 0 && n_differ(a1.randn, b1.randn, RN) == 0 &&
              n_differ(a1.cat, b1.cat, CAT_R) == 0,
          "same seed and step gave different draws");
    /* Another step, or another session seed: different draws. */
    CHECK(n_differ(a1.randn, a2.randn, RN) > RN * 99 / 100, "step 2 repeats step 1's normals");
    CHECK(n_differ(a1.drop, a2.drop, RN) > RN / 4, "step 2 repeats step 1's dropout mask");
    CHECK(n_differ(a1.cat, a2.cat, CAT_R) > CAT_R / 4, "step 2 repeats step 1's samples");
    CHECK(n_differ(a1.randn, c1.randn, RN) > RN * 99 / 100, "another session seed repeats the normals");
    CHECK(n_differ(a1.drop, a1.drop2, RN) > RN / 4, "two dropout sites share a mask");

    /* The exact formulas, from the seed leaf and each op's salt. */
    const tg_graph *g = tg_session_graph(a);
    uint32_t salt_drop = 0, salt_randn = 0, salt_cat = 0;
    for (int i = 0; i < g->n; i++) {
        const tg_node *n = &g->nodes[i];
        if (n->op == TG_OP_DROPOUT && !salt_drop) salt_drop = n->at.rand.salt;
        if (n->op == TG_OP_RANDN) salt_randn = n->at.rand.salt;
        if (n->op == TG_OP_CATEGORICAL) salt_cat = n->at.rand.salt;
    }
    uint64_t seed = (uint64_t)(uint32_t)a2.seed[0] | (uint64_t)(uint32_t)a2.seed[1] << 32;
    int64_t bad_drop = 0, bad_randn = 0, bad_cat = 0, bad_grad = 0;
    float scale = (float)(1.0 / (1.0 - 0.3));
    for (int e = 0; e < RN; e++) {
        float want = tg_rng_uniform(seed, salt_drop, (uint32_t)e) < 0.3f ? 0.0f : 1.0f * scale;
        bad_drop += a2.drop[e] != want;
        bad_randn += a2.randn[e] != tg_rng_normal(seed, salt_randn, (uint32_t)e);
        bad_grad += a2.grad[e] != (float)(e % 7 - 3) * (a2.drop[e] != 0.0f ? scale : 0.0f);
    }
    for (int r = 0; r < CAT_R; r++)
        bad_cat += a2.cat[r] != categorical_ref(cat_logits, CAT_V, tg_rng_uniform(seed, salt_cat, (uint32_t)r));
    CHECK(bad_drop == 0, "dropout: %lld elements differ from uniform(seed, salt, e) < p", (long long)bad_drop);
    CHECK(bad_randn == 0, "randn: %lld elements differ from tg_rng_normal(seed, salt, e)", (long long)bad_randn);
    CHECK(bad_cat == 0, "categorical: %lld rows differ from the inverse-CDF rule", (long long)bad_cat);
    CHECK(bad_grad == 0, "dropout: %lld gradient elements do not use the forward's mask", (long long)bad_grad);

    /* Statistics. */
    double mean = 0, var = 0, kept = 0, dmean = 0;
    for (int e = 0; e < RN; e++) mean += a1.randn[e], dmean += a1.drop[e], kept += a1.drop[e] != 0.0f;
    mean /= RN, dmean /= RN;
    for (int e = 0; e < RN; e++) var += (a1.randn[e] - mean) * (a1.randn[e] - mean);
    var /= RN - 1;
    /* standard errors: mean 0.0022, var 0.0032, kept 0.001, dropout mean 0.0015 */
    CHECK(fabs(mean) < 0.01, "randn mean %.4f", mean);
    CHECK(fabs(var - 1.0) < 0.015, "randn variance %.4f", var);
    CHECK(fabs(kept / RN - 0.7) < 0.005, "dropout kept %.4f of the elements, want 0.7", kept / RN);
    CHECK(fabs(dmean - 1.0) < 0.007, "dropout changed the mean to %.4f", dmean);
    double z = 0, p[CAT_V], chi2 = 0;
    int64_t count[CAT_V] = {0};
    for (int v = 0; v < CAT_V; v++) z += exp(cat_logits[v]);
    for (int r = 0; r < CAT_R; r++)
        if (a1.cat[r] >= 0 && a1.cat[r] < CAT_V) count[a1.cat[r]]++;
    for (int v = 0; v < CAT_V; v++) {
        p[v] = exp(cat_logits[v]) / z;
        chi2 += (count[v] - CAT_R * p[v]) * (count[v] - CAT_R * p[v]) / (CAT_R * p[v]);
    }
    /* 4 degrees of freedom: P(chi2 > 18.5) = 0.001 */
    CHECK(chi2 < 18.5, "categorical frequencies are off the softmax probabilities (chi2 %.2f)", chi2);

    free_draws(&a1), free_draws(&a2), free_draws(&b1), free_draws(&c1);
    tg_session_free(a), tg_session_free(b), tg_session_free(c);
    tg_model_free(m);
}

/* ---- shape and dtype errors name the op, the shapes and the call site ---- */

static void errors(void) {
    int n = 0;
    tg_model *m = tg_model_new();
    for (int k = 0;; k++) {
        tg_graph *g = tg_graph_new(m);
        tg_tensor f = tg_input_new(g, "f", TG_F32, TG_SHAPE(4, 6));
        tg_tensor i = tg_input_new(g, "i", TG_I32, TG_SHAPE(4));
        tg_tensor i3 = tg_input_new(g, "i3", TG_I32, TG_SHAPE(3));
        tg_tensor v5 = tg_input_new(g, "v5", TG_F32, TG_SHAPE(5));
        tg_tensor f3 = tg_input_new(g, "f3", TG_F32, TG_SHAPE(2, 3, 5));
        tg_tensor big = tg_input_new(g, "big", TG_F32, TG_SHAPE(1 << 20, 128));
        const char *want = NULL;
        int line = 0;
#define CASE(K, EXPR, W)           \
    if (k == K) {                  \
        want = W, line = __LINE__; \
        (void)(EXPR);              \
    }
        CASE(0, tg_cross_entropy(f, f, TG_REDUCTION_MEAN), "tg_cross_entropy: targets must be i32, got f32 [4,6]")
        /* one line: compilers differ on __LINE__ in an invocation spread over several */
        static const char ce_shape[] = "tg_cross_entropy: targets [3] must have the shape of logits [4,6] without the class axis";
        CASE(1, tg_cross_entropy(f, i3, TG_REDUCTION_SUM), ce_shape)
        CASE(2, tg_nll_loss(f, i, (tg_reduction)7), "tg_nll_loss: unknown reduction 7")
        CASE(3, tg_layer_norm(f, v5, v5, 1e-5f), "tg_layer_norm: gain [5] must be [6] for x [4,6]")
        CASE(4, tg_rms_norm(v5, v5, -1.0f), "tg_rms_norm: eps -1 must be finite and >= 0")
        CASE(5, tg_embedding(f3, i), "tg_embedding: table [2,3,5] must be 2-d [vocab, dim]")
        CASE(6, tg_embedding(f, v5), "tg_embedding: indices must be i32, got f32 [5]")
        CASE(7, tg_split_heads(f, 4), "tg_split_heads: last dim 6 of x [4,6] is not divisible by 4 heads")
        CASE(8, tg_merge_heads(f), "tg_merge_heads: x [4,6] must be [..., H, T, Dh]")
        CASE(9, tg_rope(f3, 0.0f), "tg_rope: x [2,3,5] must be [..., T, D] with D even")
        CASE(10, tg_dropout(f, 1.0f), "tg_dropout: p 1 must be in [0, 1) (x [4,6])")
        CASE(11, tg_randn(g, TG_SHAPE(3, 0)), "tg_randn: shape [3,0] has a dim < 1")
        CASE(12, tg_categorical(i), "tg_categorical: logits must be f32, got i32 [4]")
        CASE(13, tg_layer_norm(i, v5, v5, 1e-5f), "tg_layer_norm: x must be f32, got i32 [4]")
        static const char rope_big[] = "tg_rope: x [1048576,128] needs a T x D angle table of 134217728 elements, over the 2^26 a graph holds";
        CASE(14, tg_rope(big, 0.0f), rope_big)
#undef CASE
        if (!want) {
            tg_graph_free(g);
            break;
        }
        char full[300];
        snprintf(full, sizeof full, "%s (test_nn.c:%d)", want, line);
        CHECK(tg_graph_status(g) == TG_ERR_SHAPE && strcmp(tg_graph_error(g), full) == 0,
              "case %d: got '%s', want '%s'", k, tg_graph_error(g), full);
        /* later ops pass the invalid tensor along quietly; the first error stays */
        tg_tensor bad = {g, -1};
        tg_layer_norm(bad, v5, v5, 1e-5f);
        CHECK(strcmp(tg_graph_error(g), full) == 0, "case %d: a later op replaced the first error", k);
        tg_graph_free(g);
        n++;
    }
    CHECK(n == 15, "ran %d error cases", n);
    tg_model_free(m);
}

/* ---- modules: names, layouts, inits, decay; a tiny model learns ---- */

enum { MV = 8, MD = 16, MB = 64 };

static void modules(void) {
    tg_model *m = tg_model_new();
    tiny p = {tg_embedding_new(m, "tok_emb", MV, MD), tg_layernorm_new(m, "ln", MD), tg_rmsnorm_new(m, "rms", MD)};
    const struct {
        const char *name;
        tg_shape shape;
        bool decay;
    } want[] = {{"tok_emb.W", TG_SHAPE(MV, MD), true}, {"ln.g", TG_SHAPE(MD), false},
                {"ln.b", TG_SHAPE(MD), false}, {"rms.g", TG_SHAPE(MD), false}};
    CHECK(tg_model_param_count(m) == 4, "%d params", tg_model_param_count(m));
    for (int k = 0; k < 4; k++) {
        tg_param q = tg_model_find(m, want[k].name);
        CHECK(q >= 0 && tg_shape_eq(tg_model_param_shape(m, q), want[k].shape), "param %s", want[k].name);
        CHECK(q >= 0 && m->params[q].decay == want[k].decay, "param %s: decay should be %d", want[k].name,
              want[k].decay);
    }
    CHECK(p.ln.eps == 1e-5f && p.rms.eps == 1e-6f && p.emb.vocab == MV && p.emb.dim == MD, "module defaults");

    tg_input_decl in[] = {{"tok", TG_I32, TG_SHAPE(MB)}, {"next", TG_I32, TG_SHAPE(MB)}};
    tg_train_spec spec = {.model = m, .loss = tiny_fn, .user = &p, .inputs = in, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_constant(2e-2f), 0.01f), .seed = 3};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (!s) return;
    float W[MV * MD], g1[MD], b1[MD];
    CHECK_OK(tg_session_get_param(s, "tok_emb.W", W, MV * MD));
    CHECK_OK(tg_session_get_param(s, "ln.g", g1, MD));
    CHECK_OK(tg_session_get_param(s, "ln.b", b1, MD));
    double ss = 0;
    for (int i = 0; i < MV * MD; i++) ss += (double)W[i] * W[i];
    CHECK(fabs(sqrt(ss / (MV * MD)) - 0.02) < 0.006, "tok_emb.W std %.4f, want 0.02", sqrt(ss / (MV * MD)));
    CHECK(g1[0] == 1.0f && g1[MD - 1] == 1.0f && b1[0] == 0.0f && b1[MD - 1] == 0.0f, "norm init ones / zeros");

    /* next token = (token + 3) mod V: learnable through the tied table */
    int32_t tok[MB], next[MB];
    for (int i = 0; i < MB; i++) tok[i] = i % MV, next[i] = (i % MV + 3) % MV;
    float first = NAN, loss = NAN;
    for (int step = 0; step < 150; step++) {
        CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("tok", tok, MB), TG_FEED("next", next, MB)}, 2, &loss));
        if (step == 0) first = loss;
    }
    /* near ln V: logits start small (the table is randn 0.02) */
    CHECK(fabs(first - logf(MV)) < 0.15, "initial loss %.4f, want about ln %d = %.4f", first, MV, logf(MV));
    CHECK(loss < 0.1f, "the tiny model did not learn: loss %.4f after 150 steps", loss);
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- layer options: init and decay on Linear and Embedding, LayerNorm without a bias ---- */

static tg_layernorm opt_ln;
static tg_tensor ln_nobias_fn(tg_graph *g, void *u) {
    tg_tensor y = tg_capture(tg_layernorm_fwd(g, &opt_ln, tg_input(g, "x")), "y");
    return tg_sum(tg_mul(y, y), TG_ALL, false);
}

static void module_options(void) {
    tg_model *m = tg_model_new();
    tg_init k = tg_init_kaiming(), r = tg_init_randn(0.25f);
    tg_linear a = tg_linear_new_opts(m, "a", 64, 32, false, (tg_layer_opts){.init = &k, .decay = TG_DECAY_OFF});
    tg_linear b = tg_linear_new_opts(m, "b", 4, 4, true, (tg_layer_opts){0});
    tg_embedding e = tg_embedding_new_opts(m, "e", 50, 40, (tg_layer_opts){.init = &r});
    tg_layernorm ln = tg_layernorm_new_opts(m, "ln", 8, (tg_layernorm_opts){.no_bias = true, .eps = 0.5f, .decay = TG_DECAY_ON});
    CHECK(a.b == -1 && b.b >= 0 && ln.b == -1 && ln.eps == 0.5f && tg_model_param_count(m) == 5,
          "layer options: biases and eps (%d params)", tg_model_param_count(m));
    const struct {
        tg_param p;
        tg_init_kind kind;
        bool decay;
    } want[] = {{a.W, TG_INIT_KAIMING, false}, {b.W, TG_INIT_RANDN, true}, {b.b, TG_INIT_ZEROS, false},
                {e.W, TG_INIT_RANDN, true}, {ln.g, TG_INIT_ONES, true}};
    for (int i = 0; i < 5 && tg_model_status(m) == TG_OK; i++)
        CHECK(m->params[want[i].p].init.kind == want[i].kind && m->params[want[i].p].decay == want[i].decay,
              "param %s: init %d decay %d, want %d %d", m->params[want[i].p].name, (int)m->params[want[i].p].init.kind,
              m->params[want[i].p].decay, (int)want[i].kind, want[i].decay);
    float *v = malloc(sizeof(float) * 64 * 32);
    extern void tg_model_init_param(const tg_model *m, int p, uint64_t seed, float *dst);
    tg_model_init_param(m, a.W, 1, v);
    double ss = 0;
    for (int i = 0; i < 64 * 32; i++) ss += (double)v[i] * v[i];
    CHECK(fabs(sqrt(ss / 2048) - sqrt(2.0 / 64)) < 0.1 * sqrt(2.0 / 64), "Linear kaiming option: std %.4f",
          sqrt(ss / 2048));
    tg_model_init_param(m, e.W, 1, v);
    ss = 0;
    for (int i = 0; i < 2000; i++) ss += (double)v[i] * v[i];
    CHECK(fabs(sqrt(ss / 2000) - 0.25) < 0.025, "Embedding randn(0.25) option: std %.4f", sqrt(ss / 2000));
    free(v);
    tg_model_free(m);
    /* an out-of-range decay is a declaration error, not a silent default */
    m = tg_model_new();
    tg_linear_new_opts(m, "bad", 2, 2, false, (tg_layer_opts){.decay = (tg_decay)7});
    CHECK_ERR(tg_model_status(m), TG_ERR_ARG, "'bad.W' has a decay other than -1 (default), 0 or 1");
    tg_model_free(m);

    /* LayerNorm without a bias: (x - mean) / sqrt(var + eps) * g, and it trains. */
    m = tg_model_new();
    opt_ln = tg_layernorm_new_opts(m, "ln", LN_D, (tg_layernorm_opts){.no_bias = true});
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(LN_R, LN_D)}};
    tg_train_spec spec = {.model = m, .loss = ln_nobias_fn, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_constant(0.01f))};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (s) {
        for (int i = 0; i < LN_R * LN_D; i++) ln_x[i] = 2.0f * urand() - 1.0f;
        for (int i = 0; i < LN_D; i++) ln_g[i] = 0.5f + urand(), ln_b[i] = 0;
        CHECK_OK(tg_session_set_param(s, "ln.g", ln_g, LN_D));
        static float y[LN_R * LN_D];
        static double ref[LN_R * LN_D];
        float l0 = 0, l1 = 0;
        CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", ln_x, LN_R * LN_D)}, 1, &l0));
        CHECK_OK(tg_session_read(s, "y", y, LN_R * LN_D));
        norm_refs(ln_x, 1.0, 1e-5, ref, NULL);
        double err = 0;
        for (int i = 0; i < LN_R * LN_D; i++) err = fmax(err, fabs(y[i] - ref[i]));
        CHECK(err < 1e-4, "LayerNorm without a bias differs from the reference by %.2g", err);
        for (int i = 0; i < 20; i++) CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", ln_x, LN_R * LN_D)}, 1, &l1));
        CHECK(l1 < l0, "LayerNorm without a bias: its gain did not train (%g -> %g)", l0, l1);
    }
    tg_session_free(s);
    tg_model_free(m);
}

/* A trivial training session for a forward session to attach to. */
static tg_tensor base_loss(tg_graph *g, void *u) {
    (void)u;
    return tg_sum(tg_mul(tg_use(g, 0), tg_input(g, "x")), TG_ALL, false);
}

/* ---- sampling in a forward-only session (the names example's use) ---- */

static tg_tensor sample_fn(tg_graph *g, void *u) {
    (void)u;
    return tg_categorical(tg_mul_s(tg_input(g, "logits"), 2.0f)); /* temperature 0.5 */
}

static void forward_sampling(void) {
    tg_model *m = tg_model_new();
    tg_model_param(m, "w", TG_SHAPE(1), tg_init_ones());
    tg_input_decl tin[] = {{"x", TG_F32, TG_SHAPE(1)}};
    tg_train_spec spec = {.model = m, .loss = base_loss, .inputs = tin, .n_inputs = 1, .optim = {.kind = TG_OPT_NONE}};
    tg_session *base = NULL;
    tg_forward *fw = NULL;
    CHECK_OK(tg_session_new(&spec, &base));
    tg_input_decl in[] = {{"logits", TG_F32, TG_SHAPE(TG_BATCH, 3)}};
    tg_forward_spec is = {.fn = sample_fn, .inputs = in, .n_inputs = 1};
    if (base) CHECK_OK(tg_forward_attach(base, &is, &fw));
    if (!fw) {
        tg_session_free(base);
        tg_model_free(m);
        return;
    }
    enum { NB = 3000 };
    static float logits[NB * 3];
    static int32_t a[NB], b[NB];
    for (int r = 0; r < NB; r++) logits[r * 3] = 0.0f, logits[r * 3 + 1] = logf(2.0f), logits[r * 3 + 2] = -50.0f;
    CHECK_OK(tg_forward_run(fw, NB, (tg_feed[]){TG_FEED("logits", logits, NB * 3)}, 1));
    tg_shape sh;
    tg_dtype dt;
    CHECK_OK(tg_forward_output_info(fw, &sh, &dt));
    CHECK(dt == TG_I32 && tg_shape_eq(sh, TG_SHAPE(NB)), "categorical output is %s", tg_dtype_name(dt));
    CHECK_OK(tg_forward_output(fw, a, NB));
    CHECK_OK(tg_forward_run(fw, NB, (tg_feed[]){TG_FEED("logits", logits, NB * 3)}, 1));
    CHECK_OK(tg_forward_output(fw, b, NB));
    int64_t ones = 0, bad = 0;
    for (int r = 0; r < NB; r++) ones += a[r] == 1, bad += a[r] < 0 || a[r] > 1;
    /* at temperature 0.5 the odds are 1 : 4 (class 2 is effectively never drawn) */
    CHECK(bad == 0, "%lld samples outside the classes with non-negligible probability", (long long)bad);
    CHECK(fabs((double)ones / NB - 0.8) < 0.03, "class 1 drawn %.3f of the time, want 0.8", (double)ones / NB);
    CHECK(n_differ(a, b, NB) > NB / 5, "two runs drew the same samples");
    tg_forward_free(fw);
    tg_session_free(base);
    tg_model_free(m);
}

int main(void) {
    for (int v = 0; v < 4; v++) cross_entropy_values((int[]){13, 16, 40, 131}[v]);
    norm_values();
    embedding_values();
    one_hot_products();
    heads_and_rope();
    long_rope();
    in_place();
    thread_independence();
    random_ops();
    errors();
    modules();
    module_options();
    forward_sampling();
    return check_summary("test_nn");
}
