/* Sparse transcoders in place of a transformer's MLPs (upstream's
 * replacement-model sample). Four phases:
 *
 * 1. A character model over the word list (upstream's: 2 layers, D = 64,
 *    4 heads, RMSNorm, RoPE, a ReLU MLP 64-256-64 with biases, tied
 *    embeddings; AdamW, linear decay 5e-3 -> 5e-4, weight decay 0.01, clip
 *    1.0, batch 32, 1500 steps).
 * 2. Harvest: a forward session of the trained model captures each block's
 *    MLP input and output (tg_capture, read with tg_forward_read) at every
 *    letter of HARVEST_WORDS training words; each of the four streams is
 *    scaled to unit RMS.
 * 3. One transcoder per block, 8x overcomplete (F = 512): h = relu(x We +
 *    be), y = h Wd + bd, trained to predict the MLP's output from its input
 *    with an L1 penalty on h: loss = mse(y, out) + l1 * mean over rows of
 *    sum over features |h|, l1 = 2e-3 (upstream's), Adam 1e-3, batch 256,
 *    2500 steps (5/3 of the character model's: --steps sets those). The second block's transcoder is a fresh model swapped
 *    into the same session (tg_session_replace_model).
 * 4. Splice: a forward session of the character model whose blocks keep
 *    their attention but run the transcoder (its weights fed as inputs, the
 *    RMS scales undone) in place of the MLP. The same session with all
 *    transcoder weights zero is the model with its MLPs ablated.
 *
 * Reports the validation loss of the original, spliced and ablated models,
 * each transcoder's L0 (features active per letter) and normalized error,
 * and ends with `loss_recovered=<value>`: (ablated - spliced) / (ablated -
 * original), 1 when the transcoders replace the MLPs perfectly; exits 2
 * below 0.8. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

enum { V = 27, D = 64, LAYERS = 2, HEADS = 4, FF = 4 * D, T = 16, B = 32, EVAL_B = 512 };
enum { F = 8 * D, TC_B = 256, HARVEST_WORDS = 4096, HARVEST_B = 256 };
#define LM_STEPS 1500
#define TC_STEPS(lm_steps) ((lm_steps) * 5 / 3) /* upstream's 2500 for its 1500 */
#define L1 2e-3f
#define TARGET 0.8

typedef struct {
    tg_rmsnorm n1, n2;
    tg_linear q, k, v, o, up, down;
} block;

typedef struct {
    tg_param tok_emb;
    block layers[LAYERS];
    tg_rmsnorm nf;
} lm;

static void declare(tg_model *m, lm *net) {
    char name[64];
    net->tok_emb = tg_model_param(m, "tok_emb", TG_SHAPE(V, D), tg_init_randn(0.02f));
    for (int i = 0; i < LAYERS; i++) {
        block *b = &net->layers[i];
#define NAME(fmt) (snprintf(name, sizeof name, "layers.%d." fmt, i), name)
        b->n1 = tg_rmsnorm_new(m, NAME("n1"), D);
        b->q = tg_linear_new(m, NAME("attn.q"), D, D, false);
        b->k = tg_linear_new(m, NAME("attn.k"), D, D, false);
        b->v = tg_linear_new(m, NAME("attn.v"), D, D, false);
        b->o = tg_linear_new(m, NAME("attn.o"), D, D, false);
        b->n2 = tg_rmsnorm_new(m, NAME("n2"), D);
        b->up = tg_linear_new(m, NAME("mlp.up"), D, FF, true);
        b->down = tg_linear_new(m, NAME("mlp.down"), FF, D, true);
#undef NAME
    }
    net->nf = tg_rmsnorm_new(m, "nf", D);
}

/* x [n, T, D] -> [n, T, D] */
static tg_tensor attention(tg_graph *g, const block *b, tg_tensor x) {
    tg_tensor q = tg_rope(tg_split_heads(tg_linear_fwd(g, &b->q, x), HEADS), 0);
    tg_tensor k = tg_rope(tg_split_heads(tg_linear_fwd(g, &b->k, x), HEADS), 0);
    tg_tensor v = tg_split_heads(tg_linear_fwd(g, &b->v, x), HEADS);
    tg_tensor scores = tg_mul_s(tg_matmul_t(q, k, false, true), 1.0f / sqrtf((float)(D / HEADS)));
    return tg_linear_fwd(g, &b->o, tg_merge_heads(tg_matmul(tg_softmax_causal(scores), v)));
}

typedef enum { RUN_PLAIN, RUN_HARVEST, RUN_SPLICED } run_kind;

/* The transcoder of layer i from the inputs We<i>, be<i>, Wd<i>, bd<i> and
 * the scales si<i>, so<i> [1]: x [n, T, D] -> [n, T, D]. */
static tg_tensor transcoder_inputs(tg_graph *g, int i, tg_tensor x) {
    char n[6][8];
    const char *what[6] = {"We", "be", "Wd", "bd", "si", "so"};
    for (int k = 0; k < 6; k++) snprintf(n[k], sizeof n[k], "%s%d", what[k], i);
    tg_tensor h = tg_relu(tg_add(tg_matmul(tg_div(x, tg_input(g, n[4])), tg_input(g, n[0])), tg_input(g, n[1])));
    return tg_mul(tg_add(tg_matmul(h, tg_input(g, n[2])), tg_input(g, n[3])), tg_input(g, n[5]));
}

/* tokens i32 [n, T] -> logits [n, T, V]; RUN_HARVEST captures each MLP's
 * input and output ("in<i>", "out<i>"), RUN_SPLICED runs the transcoders
 * in their place. */
static tg_tensor logits(tg_graph *g, const lm *net, tg_tensor tokens, run_kind kind) {
    tg_tensor emb = tg_use(g, net->tok_emb);
    tg_tensor x = tg_embedding(emb, tokens);
    for (int i = 0; i < LAYERS; i++) {
        const block *b = &net->layers[i];
        x = tg_add(x, attention(g, b, tg_rmsnorm_fwd(g, &b->n1, x)));
        tg_tensor in = tg_rmsnorm_fwd(g, &b->n2, x), out;
        if (kind == RUN_SPLICED) {
            out = transcoder_inputs(g, i, in);
        } else {
            char name[8];
            snprintf(name, sizeof name, "in%d", i);
            if (kind == RUN_HARVEST) in = tg_capture(in, name);
            out = tg_linear_fwd(g, &b->down, tg_relu(tg_linear_fwd(g, &b->up, in)));
            snprintf(name, sizeof name, "out%d", i);
            if (kind == RUN_HARVEST) out = tg_capture(out, name);
        }
        x = tg_add(x, out);
    }
    return tg_matmul_t(tg_rmsnorm_fwd(g, &net->nf, x), emb, false, true);
}

/* The mask carries 1 / (predictions in the batch), so the sum is the mean. */
static tg_tensor masked_ce(tg_graph *g, tg_tensor lg) {
    tg_tensor ce = tg_cross_entropy(lg, tg_input(g, "targets"), TG_REDUCTION_NONE);
    return tg_sum(tg_mul(ce, tg_input(g, "mask")), TG_ALL, false);
}
static tg_tensor lm_loss(tg_graph *g, void *u) { return masked_ce(g, logits(g, u, tg_input(g, "tokens"), RUN_PLAIN)); }
static tg_tensor spliced_loss(tg_graph *g, void *u) { return masked_ce(g, logits(g, u, tg_input(g, "tokens"), RUN_SPLICED)); }
static tg_tensor harvest(tg_graph *g, void *u) { return logits(g, u, tg_input(g, "tokens"), RUN_HARVEST); }

/* ---- the transcoder ---- */

typedef struct {
    tg_param We, be, Wd, bd;
} transcoder;

static transcoder transcoder_new(tg_model *m) {
    return (transcoder){tg_model_param(m, "We", TG_SHAPE(D, F), tg_init_randn(0.02f)),
                        tg_model_param(m, "be", TG_SHAPE(F), tg_init_zeros()),
                        tg_model_param(m, "Wd", TG_SHAPE(F, D), tg_init_randn(0.02f)),
                        tg_model_param(m, "bd", TG_SHAPE(D), tg_init_zeros())};
}

/* x, y [TC_B, D] at unit RMS: mse(prediction, y) + l1 * mean over rows of sum over features |h| */
static tg_tensor tc_loss(tg_graph *g, void *u) {
    const transcoder *t = u;
    tg_tensor h = tg_capture(tg_relu(tg_add(tg_matmul(tg_input(g, "x"), tg_use(g, t->We)), tg_use(g, t->be))), "h");
    tg_tensor pred = tg_add(tg_matmul(h, tg_use(g, t->Wd)), tg_use(g, t->bd));
    tg_tensor mse = tg_capture(tg_mse(pred, tg_input(g, "y")), "mse");
    return tg_add(mse, tg_mul_s(tg_mean(tg_abs(h), TG_ALL, false), L1 * F));
}

/* ---- the data ---- */

/* Word i as tokens '.' c1 .. cn, targets c1 .. cn '.', mask over those n + 1
 * predictions ('.' is 0, letters 1..26). Returns n + 1. */
static int encode(const ex_words *s, int i, int32_t *tok, int32_t *tgt, float *mask) {
    const char *w = s->w + (size_t)i * s->stride;
    int n = (int)strlen(w);
    for (int t = 0; t < T; t++) {
        tok[t] = t == 0 || t > n ? 0 : w[t - 1] - 'a' + 1;
        tgt[t] = t < n ? w[t] - 'a' + 1 : 0;
        mask[t] = t <= n;
    }
    return n + 1;
}

/* The mean loss over the validation words; extra: the transcoder feeds. */
static tg_status val_loss(tg_forward *ev, const ex_words *val, const tg_feed *extra, int n_extra, double *out) {
    static int32_t tok[EVAL_B * T], tgt[EVAL_B * T];
    static float mask[EVAL_B * T];
    tg_feed f[3 + 6 * LAYERS];
    double total = 0, count = 0;
    for (int i0 = 0; i0 < val->n; i0 += EVAL_B) {
        int nb = val->n - i0 < EVAL_B ? val->n - i0 : EVAL_B, preds = 0;
        for (int i = 0; i < nb; i++) preds += encode(val, i0 + i, tok + i * T, tgt + i * T, mask + i * T);
        for (int k = 0; k < nb * T; k++) mask[k] /= (float)preds;
        f[0] = (tg_feed)TG_FEED("tokens", tok, nb * T);
        f[1] = (tg_feed)TG_FEED("targets", tgt, nb * T);
        f[2] = (tg_feed)TG_FEED("mask", mask, nb * T);
        for (int k = 0; k < n_extra; k++) f[3 + k] = extra[k];
        float l;
        tg_status st = tg_forward_run(ev, nb, f, 3 + n_extra);
        if (st == TG_OK) st = tg_forward_output(ev, &l, 1);
        if (st != TG_OK) return st;
        total += (double)l * preds, count += preds;
    }
    *out = total / count;
    return TG_OK;
}

/* The four streams (in0, out0, in1, out1) at every predicted position of
 * the first HARVEST_WORDS training words, each scaled to unit RMS. */
typedef struct {
    float *rows[2 * LAYERS];
    float scale[2 * LAYERS];
    int n;
} harvested;

static tg_status harvest_rows(tg_forward *hv, const ex_words *train, harvested *h) {
    static int32_t tok[HARVEST_B * T], tgt[HARVEST_B * T];
    static float mask[HARVEST_B * T], cap[HARVEST_B * T * D];
    int words = train->n < HARVEST_WORDS ? train->n : HARVEST_WORDS;
    memset(h, 0, sizeof *h);
    for (int s = 0; s < 2 * LAYERS; s++)
        if (!(h->rows[s] = malloc(sizeof(float) * (size_t)words * T * D))) return TG_ERR_NOMEM;
    for (int i0 = 0; i0 < words; i0 += HARVEST_B) {
        int nb = words - i0 < HARVEST_B ? words - i0 : HARVEST_B, at = h->n;
        for (int i = 0; i < nb; i++) encode(train, i0 + i, tok + i * T, tgt + i * T, mask + i * T);
        tg_feed f = TG_FEED("tokens", tok, nb * T);
        tg_status st = tg_forward_run(hv, nb, &f, 1);
        for (int s = 0; s < 2 * LAYERS && st == TG_OK; s++) {
            char name[8];
            snprintf(name, sizeof name, "%s%d", s % 2 ? "out" : "in", s / 2);
            st = tg_forward_read(hv, name, cap, (int64_t)nb * T * D);
            int n = at;
            for (int k = 0; st == TG_OK && k < nb * T; k++)
                if (mask[k]) memcpy(h->rows[s] + (size_t)n++ * D, cap + (size_t)k * D, sizeof(float) * D);
            h->n = n;
        }
        if (st != TG_OK) return st;
    }
    for (int s = 0; s < 2 * LAYERS; s++) {
        double sq = 0;
        for (size_t k = 0; k < (size_t)h->n * D; k++) sq += (double)h->rows[s][k] * h->rows[s][k];
        h->scale[s] = (float)sqrt(sq / ((double)h->n * D));
        if (!(h->scale[s] > 0)) h->scale[s] = 1;
        for (size_t k = 0; k < (size_t)h->n * D; k++) h->rows[s][k] /= h->scale[s];
    }
    return TG_OK;
}

/* Trains the transcoder of layer `layer` in session s from its init; *l0:
 * the features active per row over the last 100 steps, *mse: the error,
 * *last_loss: the last step's loss. */
static tg_status train_transcoder(tg_session *s, const harvested *h, int layer, int64_t steps, uint64_t *rng, ex_run *run,
                                  int64_t at, double *l0, double *mse, float *last_loss) {
    static float x[TC_B * D], y[TC_B * D], hid[TC_B * F];
    tg_status st = TG_OK;
    float loss = 0, err = 0;
    double active = 0, errs = 0;
    int measured = 0;
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        for (int b = 0; b < TC_B; b++) {
            int r = (int)(ex_rand(rng) % (uint64_t)h->n);
            memcpy(x + b * D, h->rows[2 * layer] + (size_t)r * D, sizeof(float) * D);
            memcpy(y + b * D, h->rows[2 * layer + 1] + (size_t)r * D, sizeof(float) * D);
        }
        tg_feed f[] = {TG_FEED("x", x, TC_B * D), TG_FEED("y", y, TC_B * D)};
        st = tg_session_step(s, f, 2, &loss);
        if (st == TG_OK && step > steps - 100) {
            st = tg_session_read(s, "h", hid, TC_B * F);
            if (st == TG_OK) st = tg_session_read(s, "mse", &err, 1);
            for (int k = 0; st == TG_OK && k < TC_B * F; k++) active += hid[k] > 1e-6f;
            errs += err, measured++;
        }
        if (st == TG_OK && ex_run_due(run, at + step)) ex_run_step(run, at + step, loss, 1e-3f, NULL);
    }
    *last_loss = loss;
    *l0 = measured ? active / ((double)measured * TC_B) : 0;
    *mse = measured ? errs / measured : 0;
    return st;
}

int example_transcoder(const tg_example_opts *o) {
    int64_t lm_steps = o->steps > 0 ? o->steps : LM_STEPS, tc_steps = TC_STEPS(lm_steps), first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    ex_words train = {0}, val = {0};
    if (!o->graph && !o->plan && ex_words_load(T - 1, o->seed + 1, &train, &val)) return 1;
    tg_model *m = tg_model_new(), *tm = tg_model_new(), *tm2 = NULL;
    lm net;
    declare(m, &net);
    transcoder tc = transcoder_new(tm);
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(rows, T)}, {"targets", TG_I32, TG_SHAPE(rows, T)},
                          {"mask", TG_F32, TG_SHAPE(rows, T)}};
    tg_input_decl ev_in[3 + 6 * LAYERS] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)},
                                           {"targets", TG_I32, TG_SHAPE(TG_BATCH, T)},
                                           {"mask", TG_F32, TG_SHAPE(TG_BATCH, T)}};
    static char tc_names[6 * LAYERS][8];
    const char *what[6] = {"We", "be", "Wd", "bd", "si", "so"};
    const tg_shape tc_shapes[6] = {TG_SHAPE(D, F), TG_SHAPE(F), TG_SHAPE(F, D), TG_SHAPE(D), TG_SHAPE(1), TG_SHAPE(1)};
    for (int i = 0; i < LAYERS; i++)
        for (int k = 0; k < 6; k++) {
            snprintf(tc_names[i * 6 + k], sizeof tc_names[0], "%s%d", what[k], i);
            ev_in[3 + i * 6 + k] = (tg_input_decl){tc_names[i * 6 + k], TG_F32, tc_shapes[k]};
        }
    tg_input_decl hv_in[] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)}};
    tg_train_spec spec = {.model = m, .loss = lm_loss, .user = &net, .inputs = in, .n_inputs = 3,
                          .optim = tg_adamw(tg_lr_linear(5e-3f, 5e-4f, lm_steps), 0.01f), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    tg_input_decl tc_in[] = {{"x", TG_F32, TG_SHAPE(TC_B, D)}, {"y", TG_F32, TG_SHAPE(TC_B, D)}};
    tg_train_spec tc_spec = {.model = tm, .loss = tc_loss, .user = &tc, .inputs = tc_in, .n_inputs = 2,
                             .optim = tg_adam(tg_lr_constant(1e-3f)), .seed = o->seed + 1,
                             .backend = o->backend, .threads = o->threads};
    tg_forward_spec ev_spec = {.fn = lm_loss, .user = &net, .inputs = ev_in, .n_inputs = 3};
    tg_forward_spec sp_spec = {.fn = spliced_loss, .user = &net, .inputs = ev_in, .n_inputs = 3 + 6 * LAYERS};
    tg_forward_spec hv_spec = {.fn = harvest, .user = &net, .inputs = hv_in, .n_inputs = 1};
    tg_session *s = NULL, *ts = NULL;
    tg_forward *ev = NULL, *sp = NULL, *hv = NULL;
    harvested h = {0};
    float *tcw[LAYERS][4] = {{0}};
    int rc = 0;
    tg_status st = tg_session_new(&spec, &s);
    if (st == TG_OK) st = tg_forward_attach(s, &ev_spec, &ev);
    if (st == TG_OK) st = tg_forward_attach(s, &sp_spec, &sp);
    if (st == TG_OK) st = tg_forward_attach(s, &hv_spec, &hv);
    if (st == TG_OK) st = tg_session_new(&tc_spec, &ts);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "transcoder", &spec, s, &rc)) goto done;
    if (!o->quiet)
        printf("transcoder: a %lld-param character model (%d training words, %d validation), %lld steps; then a "
               "%d-feature transcoder per block, %lld steps each\n",
               (long long)tg_model_numel(m), train.n, val.n, (long long)lm_steps, F, (long long)tc_steps);
    ex_run run;
    int64_t total = lm_steps + LAYERS * tc_steps;
    if (ex_run_start(&run, o, total, B, NULL)) {
        rc = 1;
        goto done;
    }
    /* 1. the character model */
    static int32_t tok[B * T], tgt[B * T];
    static float mask[B * T];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 43;
    float loss = 0;
    for (int64_t step = 1; step <= lm_steps && st == TG_OK; step++) {
        int preds = 0;
        for (int i = 0; i < B; i++)
            preds += encode(&train, (int)(ex_rand(&rng) % (uint64_t)train.n), tok + i * T, tgt + i * T, mask + i * T);
        for (int k = 0; k < B * T; k++) mask[k] /= (float)preds / (float)(B / rows);
        tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first * T, rows * T),
                           TG_FEED("mask", mask + first * T, rows * T)};
        st = tg_session_step(s, feeds, 3, &loss);
        if (st == TG_OK && ex_run_due(&run, step)) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    /* 2. harvest, 3. a transcoder per block */
    if (st == TG_OK) st = harvest_rows(hv, &train, &h);
    double l0[LAYERS] = {0}, err[LAYERS] = {0};
    for (int i = 0; i < LAYERS && st == TG_OK; i++) {
        if (i > 0) { /* a fresh transcoder in the same session */
            tm2 = tg_model_new();
            tc = transcoder_new(tm2);
            st = tg_session_replace_model(ts, &(tg_replace_spec){.model = tm2});
            if (st != TG_OK) break;
            tg_model_free(tm);
            tm = tm2, tm2 = NULL;
        }
        st = train_transcoder(ts, &h, i, tc_steps, &rng, &run, lm_steps + i * tc_steps, &l0[i], &err[i], &loss);
        const char *pn[4] = {"We", "be", "Wd", "bd"};
        const int64_t pc[4] = {D * F, F, F * D, D};
        for (int k = 0; k < 4 && st == TG_OK; k++) {
            if (!(tcw[i][k] = malloc(sizeof(float) * (size_t)pc[k]))) st = TG_ERR_NOMEM;
            else st = tg_session_get_param(ts, pn[k], tcw[i][k], pc[k]);
        }
    }
    if (st == TG_OK) ex_final_loss(o, &run, ts, loss);
    if (ex_run_end(&run)) rc = 1;
    /* 4. the original, spliced and ablated models on the validation words */
    double orig = 0, spliced = 0, ablated = 0;
    if (st == TG_OK) st = val_loss(ev, &val, NULL, 0, &orig);
    tg_feed tf[6 * LAYERS];
    float *zeros = calloc(D * F, sizeof(float)), one = 1;
    for (int i = 0; i < LAYERS && zeros; i++) {
        const int64_t pc[4] = {D * F, F, F * D, D};
        for (int k = 0; k < 4; k++) tf[i * 6 + k] = (tg_feed){tc_names[i * 6 + k], tcw[i][k], pc[k], TG_F32};
        tf[i * 6 + 4] = (tg_feed){tc_names[i * 6 + 4], &h.scale[2 * i], 1, TG_F32};
        tf[i * 6 + 5] = (tg_feed){tc_names[i * 6 + 5], &h.scale[2 * i + 1], 1, TG_F32};
    }
    if (st == TG_OK) st = zeros ? val_loss(sp, &val, tf, 6 * LAYERS, &spliced) : TG_ERR_NOMEM;
    for (int i = 0; i < LAYERS && zeros; i++) {
        for (int k = 0; k < 4; k++) tf[i * 6 + k].data = zeros;
        tf[i * 6 + 4].data = &one, tf[i * 6 + 5].data = &one;
    }
    if (st == TG_OK) st = val_loss(sp, &val, tf, 6 * LAYERS, &ablated);
    free(zeros);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", st == TG_ERR_NOMEM ? "out of memory" : tg_last_error());
        rc = 1;
        goto done;
    }
    printf("harvested %d (input, output) rows per block; output RMS scales", h.n);
    for (int i = 0; i < LAYERS; i++) printf(" %.3f", h.scale[2 * i + 1]);
    printf("\n");
    for (int i = 0; i < LAYERS; i++)
        printf("transcoder %d: %.1f of %d features active per letter, normalized error %.4f\n", i, l0[i], F, err[i]);
    printf("validation loss: original %.4f, MLPs replaced by the transcoders %.4f, MLPs ablated %.4f\n", orig, spliced,
           ablated);
    double recovered = ablated > orig ? (ablated - spliced) / (ablated - orig) : 0;
    printf("loss_recovered=%.4f\n", recovered);
    if (rc == 0) rc = ex_target("loss_recovered", recovered, ">=", TARGET);
done:
    for (int i = 0; i < LAYERS; i++)
        for (int k = 0; k < 4; k++) free(tcw[i][k]);
    for (int s2 = 0; s2 < 2 * LAYERS; s2++) free(h.rows[s2]);
    tg_forward_free(hv);
    tg_forward_free(sp);
    tg_forward_free(ev);
    tg_session_free(ts);
    tg_session_free(s);
    tg_model_free(tm2);
    tg_model_free(tm);
    tg_model_free(m);
    ex_words_free(&train), ex_words_free(&val);
    return rc;
}
