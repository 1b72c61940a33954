/* Non-finite numbers never pass silently: a NaN or Inf in an input, in the
 * loss or in a gradient fails the step with TG_ERR_NUMERIC and the step's
 * updates are not applied (params and optimizer state as before), on every
 * backend, with spec.check_numerics (every kernel checked, the op named) and
 * without (the loss and the global gradient norm checked). */
/* setenv, unsetenv */
#define _POSIX_C_SOURCE 200112L
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "util/util.h"

enum {
    PLAIN,
    ROOT,  /* sqrt(square(.)): finite forward, Inf in the backward at 0 */
    FWD,   /* sqrt of the pre-activations: NaN in the forward; the loss is the mean output, so
            * l2.b's gradient is a constant and l2.W's is the first that reads the NaN */
    GRAD   /* plus sum(sqrt(p)) for a param p of zeros: Inf in p's gradient only */
};

typedef struct {
    tg_linear l1, l2;
    tg_param p;
    int kind, line;
} net;

static tg_tensor loss_fn(tg_graph *g, void *u) {
    net *n = u;
    tg_tensor h = tg_linear_fwd(g, &n->l1, tg_input(g, "x"));
    n->line = __LINE__ + 1;
    h = n->kind == FWD ? tg_sqrt(h) : tg_relu(h);
    n->line = n->kind == ROOT ? __LINE__ + 1 : n->line;
    if (n->kind == ROOT) h = tg_sqrt(tg_square(h));
    tg_tensor out = tg_linear_fwd(g, &n->l2, h);
    if (n->kind == FWD) return tg_mean(out, TG_ALL, false);
    tg_tensor loss = tg_mse(out, tg_input(g, "y"));
    n->line = n->kind == GRAD ? __LINE__ + 1 : n->line;
    return n->kind == GRAD ? tg_add(loss, tg_sum(tg_sqrt(tg_use(g, n->p)), TG_ALL, false)) : loss;
}

static tg_status make(tg_backend b, bool check, int kind, net *n, tg_model **m, tg_session **s) {
    *m = tg_model_new();
    n->l1 = tg_linear_new(*m, "l1", 2, 4, true);
    n->l2 = tg_linear_new(*m, "l2", 4, 1, true);
    if (kind == GRAD) n->p = tg_model_param(*m, "p", TG_SHAPE(4), tg_init_zeros());
    n->kind = kind;
    static const tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 2)}, {"y", TG_F32, TG_SHAPE(8, 1)}};
    tg_train_spec spec = {.model = *m, .loss = loss_fn, .user = n, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 5, .backend = b, .check_numerics = check};
    return tg_session_new(&spec, s);
}

static float X[16], Y[8];

static tg_status step(tg_session *s, const float *x, const float *y, float *loss) {
    tg_feed f[] = {TG_FEED("x", x, 16), TG_FEED("y", y, 8)};
    return tg_session_step(s, f, 2, loss);
}

/* The reference takes only the clean steps; the other session also meets
 * every bad one. After each refusal both must agree bitwise. */
static void same_state(tg_session *a, tg_session *b, const char *what) {
    const char *names[] = {"l1.W", "l1.b", "l2.W", "l2.b"};
    int64_t sizes[] = {8, 4, 4, 1};
    for (int k = 0; k < 4; k++) {
        float pa[8], pb[8];
        CHECK_OK(tg_session_get_param(a, names[k], pa, sizes[k]));
        CHECK_OK(tg_session_get_param(b, names[k], pb, sizes[k]));
        CHECK(memcmp(pa, pb, (size_t)sizes[k] * 4) == 0, "%s: param %s changed", what, names[k]);
    }
    CHECK(tg_session_step_count(a) == tg_session_step_count(b), "%s: step count %lld vs %lld", what,
          (long long)tg_session_step_count(a), (long long)tg_session_step_count(b));
    /* The optimizer state shows in the next clean step's params. */
    float la, lb;
    CHECK_OK(step(a, X, Y, &la));
    CHECK_OK(step(b, X, Y, &lb));
    float pa[8], pb[8];
    CHECK_OK(tg_session_get_param(a, "l1.W", pa, 8));
    CHECK_OK(tg_session_get_param(b, "l1.W", pb, 8));
    CHECK(la == lb && memcmp(pa, pb, sizeof pa) == 0, "%s: the next step differs (loss %g vs %g)", what, la, lb);
}

static void run(tg_backend b, const char *bname, bool check) {
    for (int i = 0; i < 8; i++) X[2 * i] = (float)i / 4 - 1, X[2 * i + 1] = (float)(i % 3), Y[i] = (float)i / 8;
    net na, nb;
    tg_model *ma, *mb;
    tg_session *a = NULL, *s = NULL;
    /* The same kernels on both sides: check_numerics runs every op as its own
     * kernel, and a GPU may round a fused kernel differently (the H200 does). */
    CHECK_OK(make(b, check, PLAIN, &na, &ma, &a));
    CHECK_OK(make(b, check, PLAIN, &nb, &mb, &s));
    if (!a || !s) return;
    float loss;
    char what[96];
    CHECK_OK(step(a, X, Y, &loss));
    CHECK_OK(step(s, X, Y, &loss));

    float x[16], y[8];
    memcpy(x, X, sizeof x);
    x[5] = NAN;
    snprintf(what, sizeof what, "%s, check_numerics %d, NaN in x", bname, check);
    CHECK_ERR(step(s, x, Y, &loss), TG_ERR_NUMERIC,
              check ? "NaN at element 5 of input 'x' [8,2]" : "the loss or the global gradient norm is not finite");
    CHECK(strstr(tg_last_error(), "tg_session_step: ") && strstr(tg_last_error(), "the step's updates were not applied"),
          "%s: '%s'", what, tg_last_error());
    same_state(a, s, what);

    memcpy(y, Y, sizeof y);
    y[2] = 1e30f;
    snprintf(what, sizeof what, "%s, check_numerics %d, y = 1e30", bname, check);
    CHECK_ERR(step(s, X, y, &loss), TG_ERR_NUMERIC,
              check ? "+Inf at element " : "the loss or the global gradient norm is not finite");
    /* The CPU fuses mse's square into its sum, so it names the [1,1] sum, WebGPU the [8,1] square. */
    CHECK(!check || strstr(tg_last_error(), "of tg_mse ["), "%s: '%s'", what, tg_last_error());
    /* The square feeds only the loss: no gradient reads it. */
    CHECK(!strstr(tg_last_error(), "tg_mse [8,1]") || strstr(tg_last_error(), "; it reaches the loss;"), "%s: '%s'",
          what, tg_last_error());
    CHECK(check || !isfinite(loss), "%s: the failed step's loss %g", what, loss);
    /* The gradients share memory with the activations: stopped in the
     * forward, the step leaves none to read; failed at its check, after the
     * backward, it leaves its own. A clean step makes them readable again. */
    float gw[8];
    if (check) CHECK_ERR(tg_session_get_grad(s, "l1.W", gw, 8), TG_ERR_STATE, "failed before its backward wrote every gradient");
    else CHECK_OK(tg_session_get_grad(s, "l1.W", gw, 8));
    same_state(a, s, what);
    CHECK_OK(tg_session_get_grad(s, "l1.W", gw, 8));

    x[5] = INFINITY;
    snprintf(what, sizeof what, "%s, check_numerics %d, Inf in x", bname, check);
    CHECK_ERR(step(s, x, Y, &loss), TG_ERR_NUMERIC, check ? "+Inf at element 5 of input 'x'" : "the loss or the global gradient norm is not finite");
    same_state(a, s, what);
    tg_session_free(a);
    tg_session_free(s);
    tg_model_free(ma);
    tg_model_free(mb);

    /* A finite forward whose backward is not: sqrt's gradient at 0 is Inf,
     * times 0 from square's is NaN; relu's gradient (a select) then drops
     * it, so the params' gradients are finite. Only check_numerics sees it. */
    CHECK_OK(make(b, check, ROOT, &nb, &mb, &s));
    if (!s) return;
    memset(x, 0, sizeof x); /* every pre-activation is the zero bias */
    char want[160];
    /* Relu's gradient drops it, but only by value: in the graph it reaches l1's gradients, never l2's. */
    snprintf(want, sizeof want, "in the gradient of tg_sqrt (test_numerics.c:%d); it reaches the gradient of param 'l1.",
             nb.line);
    snprintf(what, sizeof what, "%s, check_numerics %d, sqrt at 0", bname, check);
    if (check) CHECK_ERR(step(s, x, Y, &loss), TG_ERR_NUMERIC, want);
    else CHECK_OK(step(s, x, Y, &loss));
    CHECK(tg_session_step_count(s) == (check ? 0 : 1), "%s: step count %lld", what,
          (long long)tg_session_step_count(s));
    tg_session_free(s);
    tg_model_free(mb);
}

static tg_tensor forward_fn(tg_graph *g, void *u) {
    net *n = u;
    n->line = __LINE__ + 1;
    tg_tensor h = tg_sqrt(tg_linear_fwd(g, &n->l1, tg_input(g, "x")));
    return tg_linear_fwd(g, &n->l2, h);
}

/* check_numerics names what the bad value reaches: the first param gradient
 * (in the order the step computes them) that reads it, else the result. */
static void reach(tg_backend b, const char *bname) {
    net n;
    tg_model *m;
    tg_session *s = NULL;
    tg_forward *f = NULL;
    float loss, p0[8], p1[8];
    char want[200];
    CHECK_OK(make(b, true, FWD, &n, &m, &s));
    if (!s) return;
    /* X has both signs and l1.W is random: some pre-activation is negative. */
    CHECK_OK(tg_session_get_param(s, "l1.W", p0, 8));
    snprintf(want, sizeof want, "of tg_sqrt [8,4] (test_numerics.c:%d); it reaches the gradient of param 'l2.W' first",
             n.line);
    CHECK_ERR(step(s, X, Y, &loss), TG_ERR_NUMERIC, want);
    CHECK(strstr(tg_last_error(), "NaN at element "), "%s, forward NaN: '%s'", bname, tg_last_error());
    CHECK_OK(tg_session_get_param(s, "l1.W", p1, 8));
    CHECK(memcmp(p0, p1, sizeof p0) == 0 && tg_session_step_count(s) == 0, "%s, forward NaN: updates applied", bname);

    /* Forward only: nothing has a gradient, so it names the result. */
    static const tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 2)}};
    tg_forward_spec fs = {.fn = forward_fn, .user = &n, .inputs = in, .n_inputs = 1};
    setenv("TG_CHECK_NUMERICS", "1", 1);
    CHECK_OK(tg_forward_attach(s, &fs, &f)); /* traces forward_fn: n.line is its sqrt's */
    tg_feed fx[] = {TG_FEED("x", X, 16)};
    tg_status st = f ? tg_forward_run(f, 0, fx, 1) : TG_ERR_ARG;
    snprintf(want, sizeof want, "of tg_sqrt [8,4] (test_numerics.c:%d); it reaches the result; the run stopped there",
             n.line);
    CHECK(st == TG_ERR_NUMERIC && strstr(tg_last_error(), want), "%s, forward only: status %d, '%s'", bname, st,
          tg_last_error());
    unsetenv("TG_CHECK_NUMERICS");
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);

    /* sqrt'(0) is Inf in the gradient of p alone. */
    CHECK_OK(make(b, true, GRAD, &n, &m, &s));
    if (!s) return;
    snprintf(want, sizeof want, "in the gradient of tg_sqrt (test_numerics.c:%d); it ", n.line);
    CHECK_ERR(step(s, X, Y, &loss), TG_ERR_NUMERIC, want);
    CHECK(strstr(tg_last_error(), "+Inf at element 0 of ") && strstr(tg_last_error(), " gradient of param 'p'"),
          "%s, gradient Inf: '%s'", bname, tg_last_error());
    CHECK(tg_session_step_count(s) == 0, "%s, gradient Inf: the step counted", bname);
    tg_session_free(s);
    tg_model_free(m);
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The scan every check_numerics check goes through finds the first NaN or
 * Inf, whatever its sign or payload, at any place relative to its blocks,
 * and passes every finite value: the largest, subnormals, signed zeros. */
static void scan(void) {
    static const int64_t lens[] = {0, 1, 3, 17, 1023, 1024, 1025, 3000, 4096};
    const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu, 0x7fbfffffu};
    const float good[] = {0.0f, -0.0f, 1.0f, -2.5f, FLT_MAX, -FLT_MAX, FLT_MIN, from_bits(1u), from_bits(0x807fffffu),
                          from_bits(0x7f7fffffu), 1e30f};
    float *x = malloc(4096 * sizeof *x);
    if (!x) return;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        int64_t n = lens[li];
        for (int64_t i = 0; i < n; i++) x[i] = good[(i * 7 + li) % (sizeof good / sizeof *good)];
        CHECK(tg_first_nonfinite(x, n) == -1, "n=%lld, all finite: %lld", (long long)n, (long long)tg_first_nonfinite(x, n));
        const int64_t at[] = {0, n / 2, 1023, 1024, n - 1};
        for (size_t ai = 0; ai < sizeof at / sizeof *at; ai++) {
            int64_t p = at[ai];
            if (p < 0 || p >= n) continue;
            for (size_t bi = 0; bi < sizeof bad / sizeof *bad; bi++) {
                float keep = x[p];
                x[p] = from_bits(bad[bi]);
                int64_t got = tg_first_nonfinite(x, n);
                CHECK(got == p, "n=%lld, 0x%08x at %lld: found at %lld", (long long)n, bad[bi], (long long)p, (long long)got);
                if (p + 1 < n) { /* a second one after it: still the first */
                    float keep2 = x[n - 1];
                    x[n - 1] = from_bits(bad[(bi + 1) % (sizeof bad / sizeof *bad)]);
                    got = tg_first_nonfinite(x, n);
                    CHECK(got == p, "n=%lld, hits at %lld and %lld: found at %lld", (long long)n, (long long)p,
                          (long long)(n - 1), (long long)got);
                    x[n - 1] = keep2;
                }
                x[p] = keep;
            }
        }
    }
    free(x);
}

int main(void) {
    scan();
    run(TG_BACKEND_CPU, "cpu", false);
    run(TG_BACKEND_CPU, "cpu", true);
    reach(TG_BACKEND_CPU, "cpu");
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) == TG_OK) {
        run(TG_BACKEND_WEBGPU, "webgpu", false);
        run(TG_BACKEND_WEBGPU, "webgpu", true);
        reach(TG_BACKEND_WEBGPU, "webgpu");
    } else {
        check_webgpu_missing("test_numerics");
    }
    return check_summary("test_numerics");
}
