/* Non-finite numbers never pass silently: a NaN or Inf in an input, in the
 * loss or in a gradient fails the step with TG_ERR_NUMERIC and the step's
 * updates are not applied (params and optimizer state as before), on every
 * backend, with spec.check_numerics (every kernel checked, the op named) and
 * without (the loss and the global gradient norm checked). */
#include <math.h>

#include "check.h"

typedef struct {
    tg_linear l1, l2;
    bool root; /* sqrt(square(.)): finite forward, Inf in the backward at 0 */
    int line;
} net;

static tg_tensor loss_fn(tg_graph *g, void *u) {
    net *n = u;
    tg_tensor h = tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x")));
    n->line = __LINE__ + 1;
    if (n->root) h = tg_sqrt(tg_square(h));
    return tg_mse(tg_linear_fwd(g, &n->l2, h), tg_input(g, "y"));
}

static tg_status make(tg_backend b, bool check, bool root, net *n, tg_model **m, tg_session **s) {
    *m = tg_model_new();
    n->l1 = tg_linear_new(*m, "l1", 2, 4, true);
    n->l2 = tg_linear_new(*m, "l2", 4, 1, true);
    n->root = root;
    static const tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 2)}, {"y", TG_F32, TG_SHAPE(8, 1)}};
    tg_train_spec spec = {.model = *m, .loss = loss_fn, .user = n, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 5, .backend = b, .check_numerics = check};
    return tg_session_new(&spec, s);
}

static float X[16], Y[8];

static tg_status step(tg_session *s, const float *x, const float *y, float *loss) {
    tg_feed f[] = {{"x", x, 16}, {"y", y, 8}};
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
    CHECK_OK(make(b, check, false, &na, &ma, &a));
    CHECK_OK(make(b, check, false, &nb, &mb, &s));
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
    CHECK(check || !isfinite(loss), "%s: the failed step's loss %g", what, loss);
    same_state(a, s, what);

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
    CHECK_OK(make(b, check, true, &nb, &mb, &s));
    if (!s) return;
    memset(x, 0, sizeof x); /* every pre-activation is the zero bias */
    char want[160];
    snprintf(want, sizeof want, "in the gradient of tg_sqrt (test_numerics.c:%d)", nb.line);
    snprintf(what, sizeof what, "%s, check_numerics %d, sqrt at 0", bname, check);
    if (check) CHECK_ERR(step(s, x, Y, &loss), TG_ERR_NUMERIC, want);
    else CHECK_OK(step(s, x, Y, &loss));
    CHECK(tg_session_step_count(s) == (check ? 0 : 1), "%s: step count %lld", what,
          (long long)tg_session_step_count(s));
    tg_session_free(s);
    tg_model_free(mb);
}

int main(void) {
    run(TG_BACKEND_CPU, "cpu", false);
    run(TG_BACKEND_CPU, "cpu", true);
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) == TG_OK) {
        run(TG_BACKEND_WEBGPU, "webgpu", false);
        run(TG_BACKEND_WEBGPU, "webgpu", true);
    } else {
        check_webgpu_missing("test_numerics");
    }
    return check_summary("test_numerics");
}
