/* A Kolmogorov-Arnold network fitting y = sin(pi x) on [-1, 1] (upstream's
 * KAN sample): every edge of the network is a learned function of one
 * variable, a cubic B-spline on a uniform grid plus a SiLU residual, and a
 * node adds its incoming edges. Two layers, 1 -> HIDDEN -> 1.
 *
 *   layer (I -> O): C [O, I, KNOTS] spline coefficients, Wres [I, O]
 *     u[b, i, k]  = (x[b, i] + 1) * (KNOTS - 1) / 2 - k     the grid position of x from knot k
 *     y[b, o]     = sum_{i,k} C[o, i, k] N(u[b, i, k]) + sum_i silu(x[b, i]) Wres[i, o]
 *   N is the uniform cubic B-spline: 2/3 - u^2 + |u|^3 / 2 on |u| < 1,
 *   (2 - |u|)^3 / 6 on 1 <= |u| < 2, 0 beyond; knot k sits at
 *   x = -1 + 2k / (KNOTS - 1), so the KNOTS bumps tile [-1, 1].
 *
 * Batch 256 of fresh uniform x per step, MSE, Adam with a cosine decay.
 * Ends with `mse=<value>` on 1001 evenly spaced points (exits 2 above
 * 1e-4); with --out FILE it writes a PNG of the fit and of every edge's
 * function. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define B 256
#define HIDDEN 4
#define KNOTS 10 /* spline basis functions per edge */
#define N_EVAL 1001
#define TARGET_MSE 1e-4

typedef struct {
    tg_param C, Wres;
    int64_t in, out;
} kan_layer;

typedef struct {
    kan_layer l1, l2;
} kan_net;

static kan_layer kan_layer_new(tg_model *m, const char *name, int64_t in, int64_t out) {
    char buf[64];
    kan_layer l = {.in = in, .out = out};
    snprintf(buf, sizeof buf, "%s.C", name);
    l.C = tg_model_param(m, buf, TG_SHAPE(out, in, KNOTS), tg_init_randn(0.1f));
    snprintf(buf, sizeof buf, "%s.Wres", name);
    l.Wres = tg_model_param(m, buf, TG_SHAPE(in, out), tg_init_randn(0.02f));
    return l;
}

/* The cubic B-spline N(u), elementwise. */
static tg_tensor bspline(tg_tensor u) {
    tg_tensor a = tg_abs(u), u2 = tg_square(u);
    tg_tensor inner = tg_add_s(tg_sub(tg_mul_s(tg_mul(a, u2), 0.5f), u2), 2.0f / 3.0f);
    tg_tensor r = tg_max_s(tg_rsub_s(2.0f, a), 0.0f);
    tg_tensor outer = tg_mul_s(tg_mul(r, tg_square(r)), 1.0f / 6.0f);
    return tg_where(tg_less_s(a, 1.0f), inner, outer);
}

/* x [n, in] -> [n, out] */
static tg_tensor kan_layer_fwd(tg_graph *g, const kan_layer *l, tg_tensor x) {
    int64_t n = tg_tensor_shape(x).d[0];
    tg_tensor pos = tg_mul_s(tg_add_s(x, 1.0f), (KNOTS - 1) / 2.0f);
    tg_tensor knots = tg_reshape(tg_arange(g, KNOTS, TG_F32), TG_SHAPE(1, 1, KNOTS));
    tg_tensor basis = bspline(tg_sub(tg_reshape(pos, TG_SHAPE(n, l->in, 1)), knots)); /* [n, in, KNOTS] */
    tg_tensor C = tg_reshape(tg_use(g, l->C), TG_SHAPE(l->out, l->in * KNOTS));
    tg_tensor spline = tg_matmul_t(tg_reshape(basis, TG_SHAPE(n, l->in * KNOTS)), C, false, true);
    return tg_add(spline, tg_matmul(tg_silu(x), tg_use(g, l->Wres)));
}

static tg_tensor kan_fwd(tg_graph *g, const kan_net *net, tg_tensor x) {
    return kan_layer_fwd(g, &net->l2, kan_layer_fwd(g, &net->l1, x));
}

static tg_tensor kan_loss(tg_graph *g, void *user) { return tg_mse(kan_fwd(g, user, tg_input(g, "x")), tg_input(g, "y")); }
static tg_tensor kan_predict(tg_graph *g, void *user) { return kan_fwd(g, user, tg_input(g, "x")); }

/* ---- the picture: the fit, then one panel per edge -------------------- */

/* The edge (i -> o) of a layer with coefficients C and Wres, at x (the host's copy of the forward). */
static float edge_at(const float *C, const float *Wres, int64_t in, int64_t out, int o, int i, float x) {
    float pos = (x + 1.0f) * (KNOTS - 1) / 2.0f, y = 0;
    for (int k = 0; k < KNOTS; k++) {
        float a = fabsf(pos - (float)k);
        float n = a < 1 ? 2.0f / 3.0f - a * a + 0.5f * a * a * a : a < 2 ? (2 - a) * (2 - a) * (2 - a) / 6.0f : 0;
        y += C[((int64_t)o * in + i) * KNOTS + k] * n;
    }
    return y + x / (1.0f + expf(-x)) * Wres[(int64_t)i * out + o];
}

#define PW 120 /* panel size */
#define PH 80
/* Draws n samples ys (over x in [-1, 1]) into the panel at (px, py), scaled to their own range
 * (at least [-0.2, 0.2]), as a polyline of grey level `ink`. */
static void draw_curve(uint8_t *img, int w, int px, int py, const float *ys, int n, float lo, float hi, uint8_t ink) {
    int prev = -1;
    for (int s = 0; s < n; s++) {
        int x = px + 4 + (int)((float)s / (float)(n - 1) * (PW - 9));
        int y = py + PH - 5 - (int)lrintf((ys[s] - lo) / (hi - lo) * (PH - 10));
        int a = prev < 0 ? y : prev;
        for (int yy = a < y ? a : y; yy <= (a < y ? y : a); yy++) img[(size_t)yy * w + x] = ink;
        prev = y;
    }
}

static void panel(uint8_t *img, int w, int px, int py, const float *a, const float *b, int n) {
    float lo = a[0], hi = a[0];
    for (int s = 0; s < n; s++) {
        lo = fminf(lo, fminf(a[s], b ? b[s] : a[s]));
        hi = fmaxf(hi, fmaxf(a[s], b ? b[s] : a[s]));
    }
    float mid = (lo + hi) / 2, half = fmaxf((hi - lo) / 2, 0.2f);
    for (int y = 0; y < PH - 2; y++) memset(img + (size_t)(py + y) * w + px, 255, PW - 2);
    if (b) draw_curve(img, w, px, py, b, n, mid - half, mid + half, 170);
    draw_curve(img, w, px, py, a, n, mid - half, mid + half, 0);
}

/* Row 0: the fit (black) over sin(pi x) (grey); row 1: the edges of layer 1
 * (x -> hidden o); row 2: the edges of layer 2 (hidden i -> y). */
static int write_splines(const char *path, tg_session *s, tg_forward *f) {
    enum { N = PW - 8 };
    float xs[N], fit[N], target[N], c1[HIDDEN * KNOTS], w1[HIDDEN], c2[HIDDEN * KNOTS], w2[HIDDEN], ys[N];
    for (int i = 0; i < N; i++) xs[i] = -1.0f + 2.0f * i / (N - 1), target[i] = sinf((float)EX_PI * xs[i]);
    tg_feed fx = TG_FEED("x", xs, N);
    if (tg_forward_run(f, N, &fx, 1) || tg_forward_output(f, fit, N) || tg_session_get_param(s, "l1.C", c1, HIDDEN * KNOTS) ||
        tg_session_get_param(s, "l1.Wres", w1, HIDDEN) || tg_session_get_param(s, "l2.C", c2, HIDDEN * KNOTS) ||
        tg_session_get_param(s, "l2.Wres", w2, HIDDEN)) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 1;
    }
    int w = HIDDEN * PW, h = 3 * PH;
    uint8_t *img = malloc((size_t)w * h);
    if (!img) return 1;
    memset(img, 60, (size_t)w * h);
    panel(img, w, 0, 0, fit, target, N);
    for (int o = 0; o < HIDDEN; o++) {
        for (int i = 0; i < N; i++) ys[i] = edge_at(c1, w1, 1, HIDDEN, o, 0, xs[i]);
        panel(img, w, o * PW, PH, ys, NULL, N);
        for (int i = 0; i < N; i++) ys[i] = edge_at(c2, w2, HIDDEN, 1, 0, o, xs[i]);
        panel(img, w, o * PW, 2 * PH, ys, NULL, N);
    }
    int rc = ex_write_png_gray(path, img, w, h);
    if (rc) fprintf(stderr, "kan: cannot write %s\n", path);
    free(img);
    return rc;
}

int example_kan(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 3000, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    tg_model *m = tg_model_new();
    kan_net net = {kan_layer_new(m, "l1", 1, HIDDEN), kan_layer_new(m, "l2", HIDDEN, 1)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(rows, 1)}, {"y", TG_F32, TG_SHAPE(rows, 1)}};
    tg_input_decl pin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1)}};
    tg_train_spec spec = {.model = m, .loss = kan_loss, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_cosine(1e-2f, 1e-4f, steps)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    tg_forward_spec pspec = {.fn = kan_predict, .user = &net, .inputs = pin, .n_inputs = 1};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    int rc = 0;
    if (tg_session_new(&spec, &s) != TG_OK || tg_forward_attach(s, &pspec, &f) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "kan", &spec, s, &rc)) goto done;
    if (!o->quiet)
        printf("kan: 1-%d-1, %d cubic B-splines per edge, %lld params, batch %d, %lld steps\n", HIDDEN, KNOTS,
               (long long)tg_model_numel(m), B, (long long)steps);
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "mse")) {
        rc = 1;
        goto done;
    }
    static float xs[B], ys[B];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 3;
    float loss = 0;
    for (int64_t step = 1; step <= steps && rc == 0; step++) {
        for (int i = 0; i < B; i++) xs[i] = ex_uniform(&rng) * 2.0f - 1.0f, ys[i] = sinf((float)EX_PI * xs[i]);
        tg_feed feeds[] = {TG_FEED("x", xs + first, rows), TG_FEED("y", ys + first, rows)};
        if (tg_session_step(s, feeds, 2, &loss) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            rc = 1;
        } else if (ex_run_due(&run, step) && step < steps) {
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
        }
    }
    if (rc == 0) ex_final_loss(o, &run, s, loss);
    /* The fit on an even grid, beyond the batches it was trained on. */
    static float gx[N_EVAL], gy[N_EVAL];
    for (int i = 0; i < N_EVAL; i++) gx[i] = -1.0f + 2.0f * i / (N_EVAL - 1);
    tg_feed fx = TG_FEED("x", gx, N_EVAL);
    if (rc == 0 && (tg_forward_run(f, N_EVAL, &fx, 1) != TG_OK || tg_forward_output(f, gy, N_EVAL) != TG_OK)) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
    }
    double mse = 0;
    for (int i = 0; i < N_EVAL; i++) mse += (gy[i] - sin(EX_PI * gx[i])) * (gy[i] - sin(EX_PI * gx[i])) / N_EVAL;
    if (rc == 0) ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &mse);
    if (ex_run_end(&run)) rc = 1;
    if (rc == 0 && o->out && write_splines(o->out, s, f)) rc = 1;
    if (rc == 0) {
        if (o->out) printf("wrote %s: the fit over sin(pi x), then the edges of layer 1 and layer 2\n", o->out);
        printf("mse=%.3g\n", mse);
        rc = ex_target("mse", mse, "<=", TARGET_MSE);
    }
done:
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    return rc;
}
