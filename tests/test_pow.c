/* tg_pow and tg_pow_s against PyTorch on their edge cases (0^0, x^0 and 1^y
 * for NaN, 0 to negative powers, negative bases with integer and fractional
 * exponents, infinities), values and both gradients, on the CPU and on
 * WebGPU (tests/fixtures/pow_torch.h, from make_pow_fixture.py); and pow
 * inline in a fused WebGPU kernel. Finite differences and CPU-against-WebGPU
 * parity on ordinary inputs are the op-case table's (tests/op_cases.h). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "fixtures/pow_torch.h"

static float f32_of(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* NaN matches NaN, an infinity itself, a finite value within rtol. */
static bool same_value(float got, float want, float rtol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabsf(got - want) <= rtol * fmaxf(1.0f, fabsf(want));
}

static int compare(const char *what, const char *backend, const float *got, const uint32_t *want, int n, float rtol) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (same_value(got[i], f32_of(want[i]), rtol)) continue;
        if (bad++ < 4) fprintf(stderr, "  %s %s[%d]: got %.9g, torch %.9g\n", backend, what, i, got[i], f32_of(want[i]));
    }
    CHECK(bad == 0, "%s on %s: %d of %d elements differ from PyTorch", what, backend, bad, n);
    return bad;
}

typedef struct {
    tg_param a, b, x[POW_SS];
    float w[POW_N], sw[POW_SS][POW_SN];
} pow_net;

/* loss = sum(w * a^b) + sum over s of sum(w_s * x_s^s), with y and each
 * x_s^s captured */
static tg_tensor pow_loss(tg_graph *g, void *u) {
    pow_net *n = u;
    tg_tensor y = tg_pow(tg_use(g, n->a), tg_use(g, n->b));
    tg_capture(y, "y");
    tg_tensor loss = tg_sum(tg_mul(y, tg_constant(g, TG_SHAPE(POW_N), n->w)), TG_ALL, false);
    for (int s = 0; s < POW_SS; s++) {
        char name[16];
        snprintf(name, sizeof name, "y%d", s);
        tg_tensor ys = tg_pow_s(tg_use(g, n->x[s]), pow_s[s]);
        tg_capture(ys, name);
        loss = tg_add(loss, tg_sum(tg_mul(ys, tg_constant(g, TG_SHAPE(POW_SN), n->sw[s])), TG_ALL, false));
    }
    return loss;
}

/* false when the backend cannot be had (WebGPU without an adapter) */
static bool check_backend(tg_backend backend, float rtol) {
    const char *bk = backend == TG_BACKEND_WEBGPU ? "webgpu" : "cpu";
    float a[POW_N], b[POW_N], x[POW_SN];
    pow_net net;
    for (int i = 0; i < POW_N; i++) a[i] = f32_of(pow_a[i]), b[i] = f32_of(pow_b[i]), net.w[i] = f32_of(pow_w[i]);
    for (int i = 0; i < POW_SN; i++) x[i] = f32_of(pow_sx[i]);
    for (int s = 0; s < POW_SS; s++)
        for (int i = 0; i < POW_SN; i++) net.sw[s][i] = f32_of(pow_sw[s][i]);
    tg_model *m = tg_model_new();
    net.a = tg_model_param(m, "a", TG_SHAPE(POW_N), tg_init_values(a));
    net.b = tg_model_param(m, "b", TG_SHAPE(POW_N), tg_init_values(b));
    for (int s = 0; s < POW_SS; s++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", s);
        net.x[s] = tg_model_param(m, name, TG_SHAPE(POW_SN), tg_init_values(x));
    }
    tg_train_spec spec = {.model = m, .loss = pow_loss, .user = &net, .optim = {.kind = TG_OPT_NONE},
                          .backend = backend, .threads = 1};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    if (st != TG_OK && backend == TG_BACKEND_WEBGPU && strstr(tg_last_error(), "unavailable")) {
        tg_model_free(m);
        return false;
    }
    CHECK_OK(st);
    float loss, got[POW_N], sgot[POW_SN];
    if (st == TG_OK) {
        CHECK_OK(tg_session_step(s, NULL, 0, &loss));
        CHECK_OK(tg_session_read(s, "y", got, POW_N));
        compare("a^b", bk, got, pow_y, POW_N, rtol);
        CHECK_OK(tg_session_get_grad(s, "a", got, POW_N));
        compare("d/da", bk, got, pow_da, POW_N, rtol);
        CHECK_OK(tg_session_get_grad(s, "b", got, POW_N));
        compare("d/db", bk, got, pow_db, POW_N, rtol);
        for (int k = 0; k < POW_SS; k++) {
            char name[16], what[40];
            snprintf(name, sizeof name, "y%d", k);
            CHECK_OK(tg_session_read(s, name, sgot, POW_SN));
            snprintf(what, sizeof what, "x^%g", (double)pow_s[k]);
            compare(what, bk, sgot, pow_sy[k], POW_SN, rtol);
            snprintf(name, sizeof name, "x%d", k);
            CHECK_OK(tg_session_get_grad(s, name, sgot, POW_SN));
            snprintf(what, sizeof what, "d/dx x^%g", (double)pow_s[k]);
            compare(what, bk, sgot, pow_sdx[k], POW_SN, rtol);
        }
    }
    tg_session_free(s);
    tg_model_free(m);
    return true;
}

/* out = exp(x)^b * c: on WebGPU the product's kernel computes exp and pow
 * inline (one dispatch); the CPU runs a kernel per node. */
typedef struct {
    tg_param x, b, c;
} chain_net;

static tg_tensor chain_fwd(tg_graph *g, void *u) {
    chain_net *n = u;
    return tg_mul(tg_pow(tg_exp(tg_use(g, n->x)), tg_use(g, n->b)), tg_use(g, n->c));
}

static void check_fused(void) {
    tg_model *m = tg_model_new();
    chain_net n = {tg_model_param(m, "x", TG_SHAPE(64, 33), tg_init_randn(0.5f)),
                   tg_model_param(m, "b", TG_SHAPE(33), tg_init_randn(1.0f)),
                   tg_model_param(m, "c", TG_SHAPE(64, 33), tg_init_randn(1.0f))};
    float out[2][64 * 33];
    int dispatches[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        tg_forward *f = NULL;
        tg_forward_spec spec = {.fn = chain_fwd, .user = &n, .model = m, .seed = 5,
                                .backend = k ? TG_BACKEND_WEBGPU : TG_BACKEND_CPU, .threads = 1};
        CHECK_OK(tg_forward_new(&spec, &f));
        if (!f) break;
        tg_plan_stats ps;
        CHECK_OK(tg_forward_run(f, 0, NULL, 0));
        CHECK_OK(tg_forward_output(f, out[k], 64 * 33));
        CHECK_OK(tg_forward_plan_stats(f, &ps));
        dispatches[k] = ps.n_dispatches;
        tg_forward_free(f);
    }
    CHECK(dispatches[0] == 3 && dispatches[1] == 1, "exp -> pow -> mul: %d dispatches on the CPU (want 3), %d on WebGPU (want 1)",
          dispatches[0], dispatches[1]);
    int bad = 0;
    for (int i = 0; i < 64 * 33; i++) bad += !same_value(out[1][i], out[0][i], 1e-5f);
    CHECK(bad == 0, "the fused chain differs from the CPU's at %d elements", bad);
    tg_model_free(m);
}

/* x^3 over a grid of every sign and x^0.37, |x|^-1.5 of its magnitudes,
 * against double pow: each within an ulp or two of the true value. */
typedef struct {
    tg_param x;
} grid_net;

static tg_tensor grid_fwd(tg_graph *g, void *u) {
    tg_tensor x = tg_use(g, ((grid_net *)u)->x), ax = tg_abs(x);
    tg_tensor parts[3] = {tg_pow_s(x, 3.0f), tg_pow_s(ax, 0.37f), tg_pow_s(ax, -1.5f)};
    return tg_stack(parts, 3, 0);
}

static void check_grid(void) {
    enum { N = 2001 };
    static float x[N], y[3 * N];
    for (int i = 0; i < N; i++) x[i] = -40.0f + 80.0f * (float)i / (float)(N - 1);
    tg_model *m = tg_model_new();
    grid_net n = {tg_model_param(m, "x", TG_SHAPE(N), tg_init_values(x))};
    tg_forward *f = NULL;
    CHECK_OK(tg_forward_new(&(tg_forward_spec){.fn = grid_fwd, .user = &n, .model = m, .threads = 1}, &f));
    if (f) {
        CHECK_OK(tg_forward_run(f, 0, NULL, 0));
        CHECK_OK(tg_forward_output(f, y, 3 * N));
        int bad = 0;
        for (int i = 0; i < N; i++) {
            double ax = fabs((double)x[i]), want[3] = {pow(x[i], 3.0), pow(ax, 0.37), pow(ax, -1.5)};
            for (int k = 0; k < 3; k++) {
                float got = y[k * N + i];
                bool ok = isinf(want[k]) ? got == (float)want[k] : fabs(got - want[k]) <= 2.5e-7 * fabs(want[k]);
                if (!ok && bad++ < 4) fprintf(stderr, "  pow #%d at x = %.9g: %.9g, want %.9g\n", k, x[i], got, want[k]);
            }
        }
        CHECK(bad == 0, "pow against double pow: %d values off", bad);
    }
    tg_forward_free(f);
    tg_model_free(m);
}

int main(void) {
    check_grid();
    check_backend(TG_BACKEND_CPU, 2e-6f);
    if (check_backend(TG_BACKEND_WEBGPU, 2e-5f)) check_fused();
    else check_webgpu_missing("test_pow");
    return check_summary("test_pow");
}
