/* Forward values (against double libm or by hand) and exact gradients of the
 * math and shape ops (ops_math.c), where finite differences cannot reach: ties,
 * i32 forms, argmax/argmin, stop_gradient, extreme inputs, scatter-add with
 * repeated indices; the errors bad axes, shapes and dtypes give; and
 * results that must not depend on the thread count. */
#include <float.h>
#include <math.h>

#include "check.h"

/* ---- running one function of a param x ---- */

typedef tg_tensor (*xfn)(tg_graph *g, tg_tensor x, const void *u);

typedef struct {
    xfn fn;
    const void *u;
    tg_param p;
    const float *w; /* loss weights (NULL: all ones) */
    tg_shape out_shape;
    tg_dtype out_dtype;
    int err_line;   /* set by builders that expect to fail */
} run_ctx;

static tg_tensor run_loss(tg_graph *g, void *u) {
    run_ctx *r = u;
    tg_tensor y = r->fn(g, tg_use(g, r->p), r->u);
    if (!tg_tensor_ok(y)) return y;
    tg_capture(y, "out");
    r->out_shape = tg_tensor_shape(y);
    r->out_dtype = tg_tensor_dtype(y);
    tg_tensor yf = tg_cast(y, TG_F32);
    if (r->w) yf = tg_mul(yf, tg_constant(g, r->out_shape, r->w));
    return tg_sum(yf, TG_ALL, false);
}

/* y = fn(x) for x of shape xs; reads y (its own dtype) into out[n_out] and,
 * when grad is not NULL, d sum(w * y) / dx into grad. Returns the status of
 * compile, step or read. */
static tg_status run_fn(xfn fn, const void *u, tg_shape xs, const float *x, const float *w, void *out, int64_t n_out,
                        float *grad, int threads, run_ctx *info) {
    run_ctx r = {fn, u, -1, w, {0, {0}}, TG_F32, 0};
    tg_model *m = tg_model_new();
    r.p = tg_model_param(m, "x", xs, tg_init_values(x));
    tg_train_spec spec = {.model = m, .loss = run_loss, .user = &r, .optim = {.kind = TG_OPT_NONE},
                          .threads = threads ? threads : 1};
    tg_session *s = NULL;
    float loss;
    tg_status st = tg_session_new(&spec, &s);
    if (st == TG_OK) st = tg_session_step(s, NULL, 0, &loss);
    if (st == TG_OK && out) st = tg_session_read(s, "out", out, n_out);
    if (st == TG_OK && grad) st = tg_session_get_grad(s, "x", grad, tg_shape_numel(xs));
    if (info) *info = r;
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

static bool near(double got, double want, double atol, double rtol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* ---- unary math against double references ---- */

typedef struct {
    const char *name;
    tg_tensor (*op)(tg_tensor x);
    double (*f)(double), (*df)(double);
    double atol, rtol, gatol, grtol;
} unary_ref;

#define PI 3.14159265358979323846

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double phi_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double phi_pdf(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * PI); }
static double gelu_t_u(double x) { return sqrt(2.0 / PI) * (x + 0.044715 * x * x * x); }

static double r_tanh(double x) { return tanh(x); }
static double d_tanh(double x) { return 1.0 - tanh(x) * tanh(x); }
static double d_sigm(double x) { return sigm(x) * (1.0 - sigm(x)); }
static double r_erf(double x) { return erf(x); }
static double d_erf(double x) { return 2.0 / sqrt(PI) * exp(-x * x); }
static double r_gelu(double x) { return x * phi_cdf(x); }
static double d_gelu(double x) { return phi_cdf(x) + x * phi_pdf(x); }
static double r_gelu_t(double x) { return 0.5 * x * (1.0 + tanh(gelu_t_u(x))); }
static double d_gelu_t(double x) {
    double t = tanh(gelu_t_u(x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * sqrt(2.0 / PI) * (1.0 + 3.0 * 0.044715 * x * x);
}
static double r_silu(double x) { return x * sigm(x); }
static double d_silu(double x) { return sigm(x) * (1.0 + x * (1.0 - sigm(x))); }
static double r_softplus(double x) { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }
static double r_sin(double x) { return sin(x); }
static double r_cos(double x) { return cos(x); }
static double d_cos(double x) { return -sin(x); }
static double r_abs(double x) { return fabs(x); }
static double d_abs(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
static double r_square(double x) { return x * x; }
static double d_square(double x) { return 2.0 * x; }
static double r_log1p(double x) { return log1p(x); }
static double d_log1p(double x) { return 1.0 / (1.0 + x); }
static double r_expm1(double x) { return expm1(x); }
static double d_expm1(double x) { return exp(x); }
static double r_hardtanh(double x) { return x < -1.0 ? -1.0 : x > 1.0 ? 1.0 : x; }
static double d_hardtanh(double x) { return x > -1.0 && x < 1.0 ? 1.0 : 0.0; }
static double r_neg(double x) { return -x; }
static double d_neg(double x) { (void)x; return -1.0; }
static double r_sqrt(double x) { return sqrt(x); }
static double d_sqrt(double x) { return 0.5 / sqrt(x); }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double d_rsqrt(double x) { double y = 1.0 / sqrt(x); return -0.5 * y * y * y; } /* from y, as PyTorch (-0: +inf) */
static double r_log(double x) { return log(x); }
static double d_log(double x) { return 1.0 / x; }
static double r_exp(double x) { return exp(x); }
static double r_relu(double x) { return x > 0 ? x : 0.0; }
static double d_relu(double x) { return x > 0 ? 1.0 : 0.0; }
static double r_leaky2(double x) { return x > 0 ? x : 2.0 * x; }
static double d_leaky2(double x) { return x > 0 ? 1.0 : 2.0; }

#define OP1(name) \
    static tg_tensor o_##name(tg_tensor x) { return tg_##name(x); }
OP1(tanh) OP1(sigmoid) OP1(erf) OP1(gelu) OP1(gelu_tanh) OP1(silu) OP1(softplus) OP1(sin) OP1(cos) OP1(abs)
OP1(square) OP1(log1p) OP1(expm1) OP1(hardtanh) OP1(neg) OP1(sqrt) OP1(rsqrt) OP1(log) OP1(exp) OP1(relu)
static tg_tensor o_leaky2(tg_tensor x) { return tg_leaky_relu(x, 2.0f); }

static tg_tensor apply_unary(tg_graph *g, tg_tensor x, const void *u) {
    (void)g;
    return ((const unary_ref *)u)->op(x);
}

static void unary_values(void) {
    static const unary_ref refs[] = {
        {"tanh", o_tanh, r_tanh, d_tanh, 1e-6, 1e-6, 2e-6, 1e-5},
        {"sigmoid", o_sigmoid, sigm, d_sigm, 1e-7, 1e-6, 1e-7, 1e-5},
        {"erf", o_erf, r_erf, d_erf, 1e-6, 1e-6, 1e-7, 1e-5},
        {"gelu", o_gelu, r_gelu, d_gelu, 1e-6, 2e-6, 1e-6, 1e-5},
        {"gelu_tanh", o_gelu_tanh, r_gelu_t, d_gelu_t, 1e-6, 2e-6, 2e-6, 1e-5},
        {"silu", o_silu, r_silu, d_silu, 1e-6, 2e-6, 1e-6, 1e-5},
        {"softplus", o_softplus, r_softplus, sigm, 1e-7, 1e-6, 1e-7, 1e-5},
        {"sin", o_sin, r_sin, r_cos, 1e-6, 1e-6, 1e-6, 1e-6},
        {"cos", o_cos, r_cos, d_cos, 1e-6, 1e-6, 1e-6, 1e-6},
        {"abs", o_abs, r_abs, d_abs, 0, 0, 0, 0},
        {"square", o_square, r_square, d_square, 1e-38, 1e-7, 0, 1e-7},
        {"leaky_relu(2)", o_leaky2, r_leaky2, d_leaky2, 0, 0, 0, 0},
        {"log1p", o_log1p, r_log1p, d_log1p, 1e-38, 1e-6, 1e-38, 1e-6},
        {"expm1", o_expm1, r_expm1, d_expm1, 1e-38, 2e-6, 1e-38, 2e-6},
        {"hardtanh", o_hardtanh, r_hardtanh, d_hardtanh, 0, 0, 0, 0},
        {"neg", o_neg, r_neg, d_neg, 0, 0, 0, 0},
        {"sqrt", o_sqrt, r_sqrt, d_sqrt, 1e-38, 1e-7, 1e-38, 2e-7},
        {"rsqrt", o_rsqrt, r_rsqrt, d_rsqrt, 1e-38, 2e-7, 1e-38, 1e-6},
        {"log", o_log, r_log, d_log, 1e-38, 1e-7, 1e-38, 1e-7},
        {"exp", o_exp, r_exp, r_exp, 1e-38, 1e-6, 1e-38, 1e-6},
        {"relu", o_relu, r_relu, d_relu, 0, 0, 0, 0},
    };
    enum { N = 4003 };
    static float x[N], y[N], gx[N];
    for (int i = 0; i < N - 3; i++) x[i] = -10.0f + 20.0f * (float)i / (float)(N - 4);
    x[N - 3] = 0.0f, x[N - 2] = -0.0f, x[N - 1] = 1e-20f;
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++) {
        const unary_ref *r = &refs[k];
        tg_status st = run_fn(apply_unary, r, TG_SHAPE(N), x, NULL, y, N, gx, 1, NULL);
        CHECK(st == TG_OK, "%s: %s", r->name, tg_last_error());
        if (st != TG_OK) continue;
        int bad = 0, gbad = 0;
        for (int i = 0; i < N; i++) {
            if (!near(y[i], r->f(x[i]), r->atol, r->rtol) && bad++ < 3)
                fprintf(stderr, "  %s(%.9g) = %.9g, want %.9g\n", r->name, x[i], y[i], r->f(x[i]));
            if (!near(gx[i], r->df(x[i]), r->gatol, r->grtol) && gbad++ < 3)
                fprintf(stderr, "  %s'(%.9g) = %.9g, want %.9g\n", r->name, x[i], gx[i], r->df(x[i]));
        }
        CHECK(bad == 0, "%s: %d values off", r->name, bad);
        CHECK(gbad == 0, "%s: %d gradients off", r->name, gbad);
    }
}

/* Relative accuracy where the values are tiny or huge, and no overflow.
 * The CPU backend flushes subnormal results to zero (src/cpu/cpu.h), so a
 * true value below FLT_MIN may come out as 0: hence atol FLT_MIN. */
static void unary_extremes(void) {
    static const float x[] = {-1000, -100, -88.8f, -30, -20, -8, 0, 8, 20, 30, 88.8f, 100, 1000};
    enum { N = sizeof x / sizeof x[0] };
    float y[N], gx[N];
    static const unary_ref sp = {"softplus", o_softplus, r_softplus, sigm, 0, 0, 0, 0};
    CHECK_OK(run_fn(apply_unary, &sp, TG_SHAPE(N), x, NULL, y, N, gx, 1, NULL));
    for (int i = 0; i < N; i++) {
        CHECK(isfinite(y[i]) && near(y[i], r_softplus(x[i]), FLT_MIN, 1e-6), "softplus(%g) = %g, want %g", x[i], y[i],
              r_softplus(x[i]));
        CHECK(isfinite(gx[i]) && near(gx[i], sigm(x[i]), FLT_MIN, 1e-5), "softplus'(%g) = %g, want %g", x[i], gx[i],
              sigm(x[i]));
    }
    static const unary_ref sg = {"sigmoid", o_sigmoid, sigm, d_sigm, 0, 0, 0, 0};
    CHECK_OK(run_fn(apply_unary, &sg, TG_SHAPE(N), x, NULL, y, N, gx, 1, NULL));
    for (int i = 0; i < N; i++) {
        CHECK(near(y[i], sigm(x[i]), FLT_MIN, 1e-5), "sigmoid(%g) = %g, want %g", x[i], y[i], sigm(x[i]));
        CHECK(isfinite(gx[i]), "sigmoid'(%g) = %g", x[i], gx[i]);
    }
    /* gelu's left tail keeps its relative accuracy (the erfc side) */
    float xt[40], yt[40];
    for (int i = 0; i < 40; i++) xt[i] = -3.0f - 0.25f * (float)i;
    static const unary_ref ge = {"gelu", o_gelu, r_gelu, d_gelu, 0, 0, 0, 0};
    CHECK_OK(run_fn(apply_unary, &ge, TG_SHAPE(40), xt, NULL, yt, 40, NULL, 1, NULL));
    for (int i = 0; i < 40; i++)
        CHECK(near(yt[i], r_gelu(xt[i]), 1e-44, 3e-5), "gelu(%g) = %g, want %g", xt[i], yt[i], r_gelu(xt[i]));
    /* sin / cos far from 0, past the vector range (libm lanes), and specials */
    enum { NW = 2000 };
    static float xw[NW], yw[NW], gw[NW];
    for (int i = 0; i < NW; i++) xw[i] = (i % 2 ? 1.0f : -1.0f) * (float)i * (i < NW - 100 ? 4.1f : 1e4f);
    xw[NW - 1] = INFINITY, xw[NW - 2] = NAN, xw[NW - 3] = -0.0f;
    static const unary_ref sn = {"sin", o_sin, r_sin, r_cos, 0, 0, 0, 0};
    CHECK_OK(run_fn(apply_unary, &sn, TG_SHAPE(NW), xw, NULL, yw, NW, gw, 1, NULL));
    int bad = 0;
    for (int i = 0; i < NW - 3; i++)
        bad += !near(yw[i], sin(xw[i]), 2e-7, 0) || !near(gw[i], cos(xw[i]), 2e-7, 0);
    CHECK(bad == 0, "sin/cos over a wide range: %d off", bad);
    CHECK(isnan(yw[NW - 1]) && isnan(yw[NW - 2]) && yw[NW - 3] == 0 && signbit(yw[NW - 3]), "sin(inf, nan, -0)");

    static const unary_ref th = {"tanh", o_tanh, r_tanh, d_tanh, 0, 0, 0, 0};
    static const float xs[] = {NAN, INFINITY, -INFINITY, 1e-30f, -1e-30f};
    float ys[5];
    CHECK_OK(run_fn(apply_unary, &th, TG_SHAPE(5), xs, NULL, ys, 5, NULL, 1, NULL));
    CHECK(isnan(ys[0]) && ys[1] == 1.0f && ys[2] == -1.0f && ys[3] == 1e-30f && ys[4] == -1e-30f,
          "tanh specials: %g %g %g %g %g", ys[0], ys[1], ys[2], ys[3], ys[4]);
}

/* ---- min, max, clamp: ties, i32, NaN ---- */

static const float tie_b[] = {1, 5, 3, 0};
static tg_tensor f_max_tie(tg_graph *g, tg_tensor x, const void *u) {
    (void)u;
    return tg_max(x, tg_constant(g, TG_SHAPE(4), tie_b));
}
static tg_tensor f_min_tie(tg_graph *g, tg_tensor x, const void *u) {
    (void)u;
    return tg_min(tg_constant(g, TG_SHAPE(4), tie_b), x);
}
static tg_tensor f_max_s(tg_graph *g, tg_tensor x, const void *u) {
    (void)g, (void)u;
    return tg_max_s(x, 2.0f);
}
static tg_tensor f_clamp(tg_graph *g, tg_tensor x, const void *u) {
    (void)g;
    const float *b = u;
    return tg_clamp(x, b[0], b[1]);
}
static tg_tensor f_i32_mix(tg_graph *g, tg_tensor x, const void *u) {
    (void)g, (void)u;
    tg_tensor i = tg_cast(x, TG_I32);
    /* [max(i, 0), min(i, -1), abs(i), square(i), clamp(i, -2.5, 3.7)] stacked */
    tg_tensor parts[] = {tg_max_s(i, 0.0f), tg_min(i, tg_cast(tg_full(g, TG_SCALAR, -1.0f), TG_I32)), tg_abs(i),
                         tg_square(i), tg_clamp(i, -2.5f, 3.7f)};
    return tg_stack(parts, 5, 0);
}

static void min_max_clamp(void) {
    static const float x[] = {1, 2, 3, 4};
    float y[4], gx[4];
    CHECK_OK(run_fn(f_max_tie, NULL, TG_SHAPE(4), x, NULL, y, 4, gx, 1, NULL));
    CHECK(y[0] == 1 && y[1] == 5 && y[2] == 3 && y[3] == 4, "max: %g %g %g %g", y[0], y[1], y[2], y[3]);
    CHECK(gx[0] == 0.5f && gx[1] == 0 && gx[2] == 0.5f && gx[3] == 1, "max ties split: %g %g %g %g", gx[0], gx[1],
          gx[2], gx[3]);
    CHECK_OK(run_fn(f_min_tie, NULL, TG_SHAPE(4), x, NULL, y, 4, gx, 1, NULL));
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 0, "min: %g %g %g %g", y[0], y[1], y[2], y[3]);
    CHECK(gx[0] == 0.5f && gx[1] == 1 && gx[2] == 0.5f && gx[3] == 0, "min ties split: %g %g %g %g", gx[0], gx[1],
          gx[2], gx[3]);
    CHECK_OK(run_fn(f_max_s, NULL, TG_SHAPE(4), x, NULL, y, 4, gx, 1, NULL));
    CHECK(y[0] == 2 && y[1] == 2 && y[2] == 3 && gx[0] == 0 && gx[1] == 0.5f && gx[2] == 1 && gx[3] == 1,
          "max_s: %g %g %g / %g %g %g %g", y[0], y[1], y[2], gx[0], gx[1], gx[2], gx[3]);

    static const float xn[] = {NAN, 1, -1, 7};
    float yn[4];
    CHECK_OK(run_fn(f_max_tie, NULL, TG_SHAPE(4), xn, NULL, yn, 4, NULL, 1, NULL));
    CHECK(isnan(yn[0]), "max(NaN, 1) = %g", yn[0]);

    /* clamp: boundaries pass the gradient; lo > hi gives hi; NaN passes */
    static const float xc[] = {-1, -0.5f, 0, 0.5f, 1, NAN};
    static const float b1[] = {-0.5f, 0.5f}, b2[] = {2.0f, -3.0f};
    float yc[6], gc[6];
    CHECK_OK(run_fn(f_clamp, b1, TG_SHAPE(6), xc, NULL, yc, 6, gc, 1, NULL));
    CHECK(yc[0] == -0.5f && yc[1] == -0.5f && yc[2] == 0 && yc[3] == 0.5f && yc[4] == 0.5f && isnan(yc[5]),
          "clamp values %g %g %g %g %g %g", yc[0], yc[1], yc[2], yc[3], yc[4], yc[5]);
    CHECK(gc[0] == 0 && gc[1] == 1 && gc[2] == 1 && gc[3] == 1 && gc[4] == 0, "clamp grads %g %g %g %g %g", gc[0],
          gc[1], gc[2], gc[3], gc[4]);
    CHECK_OK(run_fn(f_clamp, b2, TG_SHAPE(6), xc, NULL, yc, 6, NULL, 1, NULL));
    CHECK(yc[0] == -3 && yc[2] == -3 && yc[4] == -3, "clamp with lo > hi gives hi: %g %g %g", yc[0], yc[2], yc[4]);

    /* i32 forms, no casts in between */
    static const float xi[] = {-5, -2, 0, 3, 4, 100};
    int32_t yi[30];
    run_ctx info;
    CHECK_OK(run_fn(f_i32_mix, NULL, TG_SHAPE(6), xi, NULL, yi, 30, NULL, 1, &info));
    CHECK(info.out_dtype == TG_I32, "i32 ops give %d", (int)info.out_dtype);
    static const int32_t want[30] = {0,  0,  0, 3, 4, 100,  -5, -2, -1, -1, -1, -1, 5, 2, 0, 3, 4, 100,
                                     25, 4,  0, 9, 16, 10000, -2, -2, 0, 3, 3, 3};
    CHECK(memcmp(yi, want, sizeof want) == 0, "i32 max/min/abs/square/clamp: %d %d %d %d %d %d ...", yi[0], yi[1],
          yi[2], yi[6], yi[24], yi[29]);
}

/* ---- argmax / argmin ---- */

typedef struct {
    bool is_min;
    int axis;
    bool keep;
} arg_spec;

static tg_tensor f_arg(tg_graph *g, tg_tensor x, const void *u) {
    (void)g;
    const arg_spec *a = u;
    return a->is_min ? tg_argmin(x, a->axis, a->keep) : tg_argmax(x, a->axis, a->keep);
}
static tg_tensor f_arg_i32(tg_graph *g, tg_tensor x, const void *u) {
    return f_arg(g, tg_cast(x, TG_I32), u);
}

static void argmax_argmin(void) {
    /* x [2, 3, 4] with ties */
    static const float x[24] = {1, 5, 5, 0,   2, 5, -1, 0,  1, 0, 7, 0,
                                3, 3, 3, 3,   -2, 9, 9, -2, 0, 1, 2, 3};
    int32_t y[24];
    run_ctx info;
    static const arg_spec last = {false, -1, false};
    CHECK_OK(run_fn(f_arg, &last, TG_SHAPE(2, 3, 4), x, NULL, y, 6, NULL, 1, &info));
    CHECK(info.out_dtype == TG_I32 && info.out_shape.ndim == 2 && info.out_shape.d[1] == 3, "argmax shape/dtype");
    CHECK(y[0] == 1 && y[1] == 1 && y[2] == 2 && y[3] == 0 && y[4] == 1 && y[5] == 3,
          "argmax last axis, first index on ties: %d %d %d %d %d %d", y[0], y[1], y[2], y[3], y[4], y[5]);
    static const arg_spec mid = {true, 1, true};
    CHECK_OK(run_fn(f_arg, &mid, TG_SHAPE(2, 3, 4), x, NULL, y, 8, NULL, 1, &info));
    CHECK(info.out_shape.ndim == 3 && info.out_shape.d[1] == 1, "argmin keepdims shape");
    static const int32_t wmid[8] = {0, 2, 1, 0, 1, 2, 2, 1};
    CHECK(memcmp(y, wmid, sizeof wmid) == 0, "argmin axis 1: %d %d %d %d %d %d %d %d", y[0], y[1], y[2], y[3], y[4],
          y[5], y[6], y[7]);
    static const arg_spec first = {false, 0, false};
    CHECK_OK(run_fn(f_arg_i32, &first, TG_SHAPE(2, 3, 4), x, NULL, y, 12, NULL, 1, NULL));
    static const int32_t wfirst[12] = {1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1};
    CHECK(memcmp(y, wfirst, sizeof wfirst) == 0, "argmax axis 0 on i32: %d %d %d %d ...", y[0], y[1], y[2], y[3]);
    static const arg_spec all = {false, TG_ALL, false}, allk = {true, TG_ALL, true};
    CHECK_OK(run_fn(f_arg, &all, TG_SHAPE(2, 3, 4), x, NULL, y, 1, NULL, 1, &info));
    CHECK(y[0] == 17 && info.out_shape.ndim == 0, "argmax over all: %d (ndim %d)", y[0], info.out_shape.ndim);
    CHECK_OK(run_fn(f_arg, &allk, TG_SHAPE(2, 3, 4), x, NULL, y, 1, NULL, 1, &info));
    CHECK(y[0] == 16 && info.out_shape.ndim == 3 && info.out_shape.d[2] == 1, "argmin over all, kept: %d", y[0]);
    static const float xn[6] = {1, NAN, 3, NAN, 0, 5};
    CHECK_OK(run_fn(f_arg, &last, TG_SHAPE(2, 3), xn, NULL, y, 2, NULL, 1, NULL));
    CHECK(y[0] == 1 && y[1] == 0, "argmax picks the first NaN: %d %d", y[0], y[1]);
    static const arg_spec lastmin = {true, -1, false};
    CHECK_OK(run_fn(f_arg, &lastmin, TG_SHAPE(2, 3), xn, NULL, y, 2, NULL, 1, NULL));
    CHECK(y[0] == 1 && y[1] == 0, "argmin picks the first NaN: %d %d", y[0], y[1]);
}

/* ---- amax / amin: values, ties split the gradient, NaN, i32 ---- */

static tg_tensor f_amax(tg_graph *g, tg_tensor x, const void *u) {
    (void)g;
    const arg_spec *a = u;
    return a->is_min ? tg_amin(x, a->axis, a->keep) : tg_amax(x, a->axis, a->keep);
}
static tg_tensor f_amax_i32(tg_graph *g, tg_tensor x, const void *u) { return f_amax(g, tg_cast(x, TG_I32), u); }

static void amax_amin(void) {
    /* x [2, 3, 4]: rows with two, three and four equal extremes */
    static const float x[24] = {1, 5, 5, 0,   2, 5, -1, 0,  1, 0, 7, 0,
                                3, 3, 3, 3,   -2, 9, 9, -2, 0, 1, 2, 3};
    static const float w[6] = {1, 2, 3, 4, 5, 6}; /* the loss weights, one per output */
    float y[24], gx[24];
    run_ctx info;
    static const arg_spec last = {false, -1, false};
    CHECK_OK(run_fn(f_amax, &last, TG_SHAPE(2, 3, 4), x, w, y, 6, gx, 1, &info));
    CHECK(info.out_dtype == TG_F32 && info.out_shape.ndim == 2 && info.out_shape.d[1] == 3, "amax shape/dtype");
    CHECK(y[0] == 5 && y[1] == 5 && y[2] == 7 && y[3] == 3 && y[4] == 9 && y[5] == 3, "amax values: %g %g %g %g %g %g",
          y[0], y[1], y[2], y[3], y[4], y[5]);
    /* each row's weight, split evenly among the elements equal to its max */
    static const float want[24] = {0, 0.5f, 0.5f, 0,    0, 2, 0, 0,    0, 0, 3, 0,
                                   1, 1, 1, 1,          0, 2.5f, 2.5f, 0, 0, 0, 0, 6};
    CHECK(memcmp(gx, want, sizeof want) == 0, "amax gradient, ties split: %g %g %g %g / %g %g %g %g", gx[0], gx[1],
          gx[2], gx[3], gx[12], gx[13], gx[14], gx[15]);
    static const arg_spec mid = {true, 1, true};
    CHECK_OK(run_fn(f_amax, &mid, TG_SHAPE(2, 3, 4), x, NULL, y, 8, gx, 1, &info));
    static const float wmin[8] = {1, 0, -1, 0, -2, 1, 2, -2};
    CHECK(info.out_shape.ndim == 3 && info.out_shape.d[1] == 1 && memcmp(y, wmin, sizeof wmin) == 0,
          "amin axis 1 kept: %g %g %g %g", y[0], y[1], y[2], y[3]);
    /* batch 0: column 0 has its min 1 twice, column 3 its 0 three times */
    CHECK(gx[0] == 0.5f && gx[8] == 0.5f && gx[4] == 0 && gx[9] == 1 && gx[6] == 1 && gx[3] == gx[7] &&
              gx[7] == gx[11] && fabsf(gx[3] + gx[7] + gx[11] - 1) < 1e-6f && gx[12] == 0 && gx[16] == 1 && gx[19] == 1,
          "amin gradient, each column's 1 shared among its minima: %g %g %g / %g %g %g", gx[0], gx[4], gx[8], gx[3],
          gx[7], gx[11]);
    static const arg_spec all = {false, TG_ALL, false};
    CHECK_OK(run_fn(f_amax, &all, TG_SHAPE(2, 3, 4), x, NULL, y, 1, gx, 1, &info));
    CHECK(y[0] == 9 && info.out_shape.ndim == 0 && gx[17] == 0.5f && gx[18] == 0.5f && gx[10] == 0,
          "amax over all: %g, grads %g %g", y[0], gx[17], gx[18]);
    int32_t yi[12];
    static const arg_spec first = {true, 0, false};
    CHECK_OK(run_fn(f_amax_i32, &first, TG_SHAPE(2, 3, 4), x, NULL, yi, 12, NULL, 1, &info));
    static const int32_t wfirst[12] = {1, 3, 3, 0, -2, 5, -1, -2, 0, 0, 2, 0};
    CHECK(info.out_dtype == TG_I32 && memcmp(yi, wfirst, sizeof wfirst) == 0, "amin axis 0 on i32: %d %d %d %d ...",
          yi[0], yi[1], yi[2], yi[3]);
    static const float xn[6] = {1, NAN, 3, -4, 0, 5};
    CHECK_OK(run_fn(f_amax, &last, TG_SHAPE(2, 3), xn, NULL, y, 2, NULL, 1, NULL));
    CHECK(isnan(y[0]) && y[1] == 5, "amax with a NaN: %g %g", y[0], y[1]);
}

/* ---- axis and dtype arguments: categorical_axis, softmax_causal_axis, the _dt constants ---- */

static tg_tensor f_cat_axis0(tg_graph *g, tg_tensor x, const void *u) { return tg_categorical_axis(x, 0); }
static tg_tensor f_causal_axis0(tg_graph *g, tg_tensor x, const void *u) { return tg_softmax_causal_axis(x, 0); }
static tg_tensor f_dt_consts(tg_graph *g, tg_tensor x, const void *u) {
    const tg_dtype *dt = u;
    static const float v[3] = {1, 3, -1};
    tg_tensor idx = tg_cast(tg_constant(g, TG_SHAPE(3), v), TG_I32);
    /* [one_hot_dt (3 x 4), ones_dt (1 x 4), zeros_dt (1 x 4)], x unused but for the graph */
    tg_tensor parts[] = {tg_one_hot_dt(idx, 4, *dt), tg_ones_dt(g, TG_SHAPE(1, 4), *dt), tg_zeros_dt(g, TG_SHAPE(1, 4), *dt)};
    tg_tensor y = tg_concat(parts, 3, 0);
    return *dt == TG_F32 ? tg_add(y, tg_mul_s(tg_sum(x, TG_ALL, false), 0.0f)) : y;
}

static void axis_dtype_args(void) {
    /* x [5, 3], column j all but certain to draw row target[j] */
    static const int32_t target[3] = {4, 0, 2};
    float x[15] = {0};
    for (int j = 0; j < 3; j++) x[target[j] * 3 + j] = 50;
    int32_t yi[20];
    run_ctx info;
    CHECK_OK(run_fn(f_cat_axis0, NULL, TG_SHAPE(5, 3), x, NULL, yi, 3, NULL, 1, &info));
    CHECK(info.out_dtype == TG_I32 && info.out_shape.ndim == 1 && info.out_shape.d[0] == 3 && yi[0] == 4 && yi[1] == 0 &&
              yi[2] == 2,
          "categorical over axis 0: %d %d %d", yi[0], yi[1], yi[2]);
    /* softmax_causal over axis 0 of zeros [3, 3]: column j is uniform over rows 0..j */
    float z[9] = {0}, y[20];
    CHECK_OK(run_fn(f_causal_axis0, NULL, TG_SHAPE(3, 3), z, NULL, y, 9, NULL, 1, NULL));
    static const float want[9] = {1, 0.5f, 1.0f / 3, 0, 0.5f, 1.0f / 3, 0, 0, 1.0f / 3};
    bool ok = true;
    for (int i = 0; i < 9; i++) ok &= fabsf(y[i] - want[i]) < 1e-6f;
    CHECK(ok, "softmax_causal over axis 0: %g %g %g / %g %g %g / %g %g %g", y[0], y[1], y[2], y[3], y[4], y[5], y[6],
          y[7], y[8]);
    /* one_hot_dt, ones_dt, zeros_dt: 1 at column idx (none for -1), then a row of ones and one of zeros */
    static const int32_t wi[20] = {0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
    static const tg_dtype i32 = TG_I32, b = TG_BOOL, f = TG_F32;
    CHECK_OK(run_fn(f_dt_consts, &i32, TG_SHAPE(1), z, NULL, yi, 20, NULL, 1, &info));
    CHECK(info.out_dtype == TG_I32 && memcmp(yi, wi, sizeof wi) == 0, "i32 one_hot / ones / zeros: %d %d ... %d %d",
          yi[0], yi[1], yi[12], yi[16]);
    CHECK_OK(run_fn(f_dt_consts, &b, TG_SHAPE(1), z, NULL, yi, 20, NULL, 1, &info));
    CHECK(info.out_dtype == TG_BOOL && memcmp(yi, wi, sizeof wi) == 0, "bool one_hot / ones / zeros");
    CHECK_OK(run_fn(f_dt_consts, &f, TG_SHAPE(1), z, NULL, y, 20, NULL, 1, &info));
    ok = info.out_dtype == TG_F32;
    for (int i = 0; i < 20; i++) ok &= y[i] == (float)wi[i];
    CHECK(ok, "f32 one_hot_dt / ones_dt / zeros_dt");
}

/* ---- stop_gradient, zeros, ones ---- */

static tg_tensor f_stop(tg_graph *g, tg_tensor x, const void *u) {
    (void)g, (void)u;
    return tg_mul(x, tg_stop_gradient(x));
}
static tg_tensor f_zeros_ones(tg_graph *g, tg_tensor x, const void *u) {
    (void)u;
    return tg_add(tg_mul(x, tg_zeros(g, TG_SHAPE(2, 3))), tg_ones(g, TG_SHAPE(3)));
}

static void stop_gradient_constants(void) {
    static const float x[] = {1, -2, 3};
    float y[6], gx[6];
    CHECK_OK(run_fn(f_stop, NULL, TG_SHAPE(3), x, NULL, y, 3, gx, 1, NULL));
    CHECK(y[0] == 1 && y[1] == 4 && y[2] == 9, "x * stop_gradient(x): %g %g %g", y[0], y[1], y[2]);
    CHECK(gx[0] == 1 && gx[1] == -2 && gx[2] == 3, "gradient through one factor only: %g %g %g", gx[0], gx[1], gx[2]);
    static const float x6[] = {1, 2, 3, 4, 5, 6};
    CHECK_OK(run_fn(f_zeros_ones, NULL, TG_SHAPE(2, 3), x6, NULL, y, 6, gx, 1, NULL));
    bool ok = true;
    for (int i = 0; i < 6; i++) ok &= y[i] == 1.0f && gx[i] == 0.0f;
    CHECK(ok, "x * zeros + ones");
}

/* ---- narrow, concat, stack, split ---- */

static tg_tensor f_narrow(tg_graph *g, tg_tensor x, const void *u) {
    (void)g, (void)u;
    return tg_concat(((tg_tensor[]){tg_narrow(x, 1, 1, 2), tg_narrow(x, -1, -1, 1)}), 2, 1);
}
/* x [2, 9] cut into 9 columns and joined back in reverse */
static tg_tensor f_reverse(tg_graph *g, tg_tensor x, const void *u) {
    (void)g, (void)u;
    tg_tensor cols[9], rev[9];
    tg_split(x, -1, ((int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}), 9, cols);
    for (int k = 0; k < 9; k++) rev[k] = cols[8 - k];
    return tg_concat(rev, 9, 1);
}
static tg_tensor f_stack(tg_graph *g, tg_tensor x, const void *u) {
    (void)g;
    int axis = *(const int *)u;
    return tg_stack(((tg_tensor[]){x, tg_mul_s(x, 10.0f), tg_neg(x)}), 3, axis);
}

static void slicing(void) {
    static const float x[6] = {0, 1, 2, 3, 4, 5};
    static const float w[6] = {1, 2, 3, 4, 5, 6};
    float y[18], gx[18];
    run_ctx info;
    CHECK_OK(run_fn(f_narrow, NULL, TG_SHAPE(2, 3), x, w, y, 6, gx, 1, &info));
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 2 && y[3] == 4 && y[4] == 5 && y[5] == 5, "narrow values %g %g %g %g %g %g",
          y[0], y[1], y[2], y[3], y[4], y[5]);
    /* d/dx: columns 1..2 get w, column 2 also gets the second narrow's w */
    CHECK(gx[0] == 0 && gx[1] == 1 && gx[2] == 2 + 3 && gx[3] == 0 && gx[4] == 4 && gx[5] == 5 + 6,
          "narrow grads %g %g %g %g %g %g", gx[0], gx[1], gx[2], gx[3], gx[4], gx[5]);

    float x18[18], w18[18];
    for (int i = 0; i < 18; i++) x18[i] = (float)i, w18[i] = (float)(i + 1);
    CHECK_OK(run_fn(f_reverse, NULL, TG_SHAPE(2, 9), x18, w18, y, 18, gx, 1, NULL));
    bool ok = true;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 9; c++) ok &= y[r * 9 + c] == x18[r * 9 + 8 - c] && gx[r * 9 + 8 - c] == w18[r * 9 + c];
    CHECK(ok, "split into 9 and concat reversed (a tree of concat nodes)");

    for (int axis = -3; axis <= 2; axis++) {
        CHECK_OK(run_fn(f_stack, &axis, TG_SHAPE(2, 3), x, NULL, y, 18, gx, 1, &info));
        int a = axis < 0 ? axis + 3 : axis;
        CHECK(info.out_shape.ndim == 3 && info.out_shape.d[a] == 3, "stack axis %d: shape", axis);
        int64_t st[3] = {info.out_shape.d[1] * info.out_shape.d[2], info.out_shape.d[2], 1};
        ok = true;
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++) {
                    int64_t at[3];
                    int64_t rest[2] = {i, j};
                    for (int d = 0, q = 0; d < 3; d++) at[d] = d == a ? k : rest[q++];
                    float want = k == 0 ? x[i * 3 + j] : k == 1 ? 10 * x[i * 3 + j] : -x[i * 3 + j];
                    ok &= y[at[0] * st[0] + at[1] * st[1] + at[2]] == want;
                }
        for (int i = 0; i < 6; i++) ok &= gx[i] == 1 + 10 - 1;
        CHECK(ok, "stack axis %d: values and grads", axis);
    }
}

/* ---- take_along_axis ---- */

static tg_tensor f_take(tg_graph *g, tg_tensor x, const void *u) {
    (void)u;
    static const float idx[] = {3, 0, -1, 5, 1, 1};
    return tg_take_along_axis(x, tg_cast(tg_constant(g, TG_SHAPE(2, 3), idx), TG_I32), 1);
}
static tg_tensor f_take_i32(tg_graph *g, tg_tensor x, const void *u) { return f_take(g, tg_cast(x, TG_I32), u); }

static void take_along(void) {
    static const float x[8] = {10, 11, 12, 13, 20, 21, 22, 23};
    float y[6], gx[8];
    CHECK_OK(run_fn(f_take, NULL, TG_SHAPE(2, 4), x, NULL, y, 6, gx, 1, NULL));
    CHECK(y[0] == 13 && y[1] == 10 && y[2] == 13 && y[3] == 0 && y[4] == 21 && y[5] == 21,
          "take_along_axis values %g %g %g %g %g %g", y[0], y[1], y[2], y[3], y[4], y[5]);
    static const float want[8] = {1, 0, 0, 2, 0, 2, 0, 0};
    CHECK(memcmp(gx, want, sizeof want) == 0, "scatter-add with repeats and a dropped index: %g %g %g %g %g %g %g %g",
          gx[0], gx[1], gx[2], gx[3], gx[4], gx[5], gx[6], gx[7]);
    int32_t yi[6];
    CHECK_OK(run_fn(f_take_i32, NULL, TG_SHAPE(2, 4), x, NULL, yi, 6, NULL, 1, NULL));
    CHECK(yi[0] == 13 && yi[3] == 0 && yi[5] == 21, "take_along_axis on i32: %d %d %d", yi[0], yi[3], yi[5]);
}

/* ---- i32 edges: INT32_MIN / -1 (a trap in C) and i32 scalars from NaN and the infinities ---- */

static tg_tensor f_int_edges(tg_graph *g, tg_tensor x, const void *u) {
    (void)u;
    static const float a[] = {-2147483648.0f, 7, -7, 5, 3e9f, -3e9f}, b[] = {-1, -1, 2, 0, 1, -1};
    tg_tensor q = tg_div(tg_cast(tg_constant(g, TG_SHAPE(6), a), TG_I32), tg_cast(tg_constant(g, TG_SHAPE(6), b), TG_I32));
    tg_tensor zero = tg_mul_s(tg_cast(x, TG_I32), 0.0f);
    tg_tensor edges[4] = {tg_add(q, zero), tg_add_s(zero, NAN), tg_add_s(zero, INFINITY), tg_add_s(zero, -INFINITY)};
    return tg_concat(edges, 4, 0);
}

static void int_edges(void) {
    static const float x[6] = {0};
    int32_t y[24];
    CHECK_OK(run_fn(f_int_edges, NULL, TG_SHAPE(6), x, NULL, y, 24, NULL, 1, NULL));
    static const int32_t want[8] = {INT32_MIN, -7, -4, 0, INT32_MAX, INT32_MIN};
    CHECK(memcmp(y, want, 6 * sizeof *y) == 0, "i32 floor division: %d %d %d %d %d %d", y[0], y[1], y[2], y[3], y[4], y[5]);
    CHECK(y[6] == 0 && y[11] == 0 && y[12] == INT32_MAX && y[17] == INT32_MAX && y[18] == INT32_MIN && y[23] == INT32_MIN,
          "i32 scalars from NaN, inf, -inf: %d %d %d (want 0, INT32_MAX, INT32_MIN, as tg_cast)", y[6], y[12], y[18]);
}

/* ---- errors name the op, the shapes and the caller's line ---- */

static int err_line;
static tg_tensor f_bad(tg_graph *g, tg_tensor x, const void *u) {
    int which = *(const int *)u;
    tg_tensor i = tg_cast(x, TG_I32), p[3];
    switch (which) {
    case 0: err_line = __LINE__; return tg_softmax(x, 2);
    case 1: err_line = __LINE__; return tg_narrow(x, 1, 2, 5);
    case 2: err_line = __LINE__; return tg_sin(i);
    case 3: err_line = __LINE__; return tg_take_along_axis(x, x, 0);
    case 4: err_line = __LINE__; return tg_concat(((tg_tensor[]){x, tg_full(g, TG_SHAPE(3, 3), 0)}), 2, 1);
    case 5:
        err_line = __LINE__ + 1;
        tg_split(x, 1, ((int64_t[]){1, 3}), 2, p);
        return p[1];
    case 6: err_line = __LINE__; return tg_stack(((tg_tensor[]){x, tg_full(g, TG_SHAPE(3, 2), 0)}), 2, 0);
    case 7: err_line = __LINE__; return tg_argmax(x, -3, false);
    case 8: err_line = __LINE__; return tg_max(x, i);
    case 9: err_line = __LINE__; return tg_swap_axes(x, 0, 5);
    case 10: err_line = __LINE__; return tg_clamp(x, NAN, 1.0f);
    case 11: {
        static const float idx[] = {0, 1, 2};
        err_line = __LINE__ + 1;
        return tg_take_along_axis(x, tg_cast(tg_constant(g, TG_SHAPE(3, 1), idx), TG_I32), 1);
    }
    case 12: err_line = __LINE__; return tg_leaky_relu(tg_cast(x, TG_BOOL), 0.1f);
    case 13: err_line = __LINE__; return tg_stack(((tg_tensor[]){x, x}), 2, 3);
    case 14:
        err_line = __LINE__ + 1;
        tg_split(x, 1, ((int64_t[]){64, INT64_MAX}), 2, p);
        return p[0];
    case 15:
        err_line = __LINE__ + 1;
        tg_split(x, 1, ((int64_t[]){4, -1}), 2, p);
        return p[0];
    }
    return x;
}

static void errors(void) {
    static const char *want[] = {
        "tg_softmax: axis 2 out of range for [2,3] (test_math_ops.c:%d)",
        "tg_narrow: range [2, 7) is outside axis 1 of [2,3] (size 3) (test_math_ops.c:%d)",
        "tg_sin: operand 0 is i32, expected f32 (test_math_ops.c:%d)",
        "tg_take_along_axis: indices are f32, expected i32 (test_math_ops.c:%d)",
        "tg_concat: shapes [2,3] and [3,3] differ outside axis 1 (test_math_ops.c:%d)",
        "tg_split: sizes sum to 4, but axis 1 of [2,3] has 3 (test_math_ops.c:%d)",
        "tg_stack: input 1 has shape [3,2], input 0 has [2,3] (test_math_ops.c:%d)",
        "tg_argmax: axis -3 out of range for [2,3] (test_math_ops.c:%d)",
        "tg_max: operands must both be f32 or both i32, got f32 [2,3] and i32 [2,3] (test_math_ops.c:%d)",
        "tg_swap_axes: axis 5 out of range for [2,3] (test_math_ops.c:%d)",
        "tg_clamp: a bound is NaN (test_math_ops.c:%d)",
        "tg_take_along_axis: indices [3,1] must match values [2,3] on every axis but 1 (test_math_ops.c:%d)",
        "tg_leaky_relu: operand 0 is bool, expected f32 (test_math_ops.c:%d)",
        "tg_stack: axis 3 out of range for [2,3] (test_math_ops.c:%d)",
        "tg_split: sizes sum past 2^63, but axis 1 of [2,3] has 3 (test_math_ops.c:%d)",
        "tg_split: sizes include a negative one, but axis 1 of [2,3] has 3 (test_math_ops.c:%d)",
    };
    static const float x[6] = {0};
    for (int k = 0; k < (int)(sizeof want / sizeof want[0]); k++) {
        tg_status st = run_fn(f_bad, &k, TG_SHAPE(2, 3), x, NULL, NULL, 0, NULL, 1, NULL);
        char msg[256];
        snprintf(msg, sizeof msg, want[k], err_line);
        CHECK_ERR(st, TG_ERR_SHAPE, msg);
    }
}

/* ---- the thread count changes nothing ---- */

static tg_tensor f_mix(tg_graph *g, tg_tensor x, const void *u) {
    (void)u;
    enum { R = 96, C = 300 };
    static float idx[R * 7];
    for (int i = 0; i < R * 7; i++) idx[i] = (float)((i * 37) % C);
    tg_tensor t = tg_take_along_axis(x, tg_cast(tg_constant(g, TG_SHAPE(R, 7), idx), TG_I32), 1);
    tg_tensor a = tg_softmax(tg_gelu(x), -1), b = tg_softmax(tg_tanh(x), 0);
    tg_tensor c = tg_erf(tg_silu(tg_max(a, b)));
    return tg_add(tg_narrow(c, 1, 0, 7), t);
}

static void thread_independence(void) {
    enum { R = 96, C = 300, N = R * C };
    static float x[N], y1[R * 7], y3[R * 7], g1[N], g3[N];
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f * 6.0f - 3.0f;
    }
    CHECK_OK(run_fn(f_mix, NULL, TG_SHAPE(R, C), x, NULL, y1, R * 7, g1, 1, NULL));
    CHECK_OK(run_fn(f_mix, NULL, TG_SHAPE(R, C), x, NULL, y3, R * 7, g3, 3, NULL));
    CHECK(memcmp(y1, y3, sizeof y1) == 0 && memcmp(g1, g3, sizeof g1) == 0,
          "1 and 3 threads give different bits");
}

/* ---- in a forward-only compile with a batch dimension ---- */

static tg_param fw_W;
static tg_tensor fw_loss(tg_graph *g, void *u) {
    (void)u;
    return tg_sum(tg_matmul(tg_input(g, "x"), tg_use(g, fw_W)), TG_ALL, false);
}
static tg_tensor fw_predict(tg_graph *g, void *u) {
    (void)u;
    tg_tensor p = tg_softmax(tg_matmul(tg_input(g, "x"), tg_use(g, fw_W)), -1);
    return tg_argmax(tg_take_along_axis(p, tg_cast(tg_full(g, TG_SHAPE(1, 5), 0), TG_I32), 0), -1, false);
}

static void forward_session(void) {
    static const float W[20] = {1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 4};
    tg_model *m = tg_model_new();
    fw_W = tg_model_param(m, "W", TG_SHAPE(4, 5), tg_init_values(W));
    tg_input_decl tin[] = {{"x", TG_F32, TG_SHAPE(2, 4)}};
    tg_train_spec spec = {.model = m, .loss = fw_loss, .inputs = tin, .n_inputs = 1, .optim = {.kind = TG_OPT_NONE},
                          .threads = 1};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 4)}};
    tg_forward_spec is = {.fn = fw_predict, .inputs = fin, .n_inputs = 1};
    CHECK_OK(tg_forward_attach(s, &is, &f));
    /* rows pick column 3, 1, 0: the row's largest scaled feature */
    static const float x[12] = {0, 0, 1, 0.1f, 0.2f, 1, 0, 0, 5, 1, 0, 0};
    int32_t out[3] = {-1, -1, -1};
    tg_shape os;
    tg_dtype odt;
    if (f) {
        CHECK_OK(tg_forward_run(f, 3, (tg_feed[]){TG_FEED("x", x, 12)}, 1));
        CHECK_OK(tg_forward_output_info(f, &os, &odt));
        CHECK_OK(tg_forward_output(f, out, 1));
        CHECK(odt == TG_I32 && os.ndim == 1 && os.d[0] == 1, "forward argmax output dtype %d", (int)odt);
        CHECK(out[0] == 3, "forward argmax of row 0 = %d", out[0]);
        CHECK_OK(tg_forward_run(f, 1, (tg_feed[]){TG_FEED("x", x + 4, 4)}, 1));
        CHECK_OK(tg_forward_output(f, out, 1));
        CHECK(out[0] == 1, "batch 1: argmax = %d", out[0]);
    }
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
}

int main(void) {
    unary_values();
    unary_extremes();
    min_max_clamp();
    argmax_argmin();
    amax_amin();
    axis_dtype_args();
    stop_gradient_constants();
    slicing();
    take_along();
    int_edges();
    errors();
    thread_independence();
    forward_session();
    return check_summary("test_math_ops");
}
