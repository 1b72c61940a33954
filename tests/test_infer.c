/* Forward-only sessions: shared params, parametric batch, outputs in their
 * own dtype, captures after a run. */
#include <math.h>

#include "check.h"
#include "session.h"

static tg_linear L1, L2;

static tg_tensor mlp(tg_graph *g, tg_tensor x) {
    return tg_linear_fwd(g, &L2, tg_capture(tg_relu(tg_linear_fwd(g, &L1, x)), "hidden"));
}

static tg_tensor loss_fn(tg_graph *g, void *u) {
    (void)u;
    return tg_mse(mlp(g, tg_input(g, "x")), tg_input(g, "y"));
}

static tg_tensor predict(tg_graph *g, void *u) {
    (void)u;
    return mlp(g, tg_input(g, "x"));
}

static tg_tensor sign(tg_graph *g, void *u) {
    (void)u;
    return tg_cast(tg_greater_s(mlp(g, tg_input(g, "x")), 0.0f), TG_I32);
}

/* y = relu(x W1 + b1) W2 + b2 on the host, from downloaded params; x [n, 2]. */
static void reference(tg_session *s, const float *x, int n, float *y) {
    float W1[2 * 8], b1[8], W2[8], b2[1];
    tg_session_get_param(s, "l1.W", W1, 16);
    tg_session_get_param(s, "l1.b", b1, 8);
    tg_session_get_param(s, "l2.W", W2, 8);
    tg_session_get_param(s, "l2.b", b2, 1);
    for (int i = 0; i < n; i++) {
        double acc = b2[0];
        for (int j = 0; j < 8; j++) {
            double h = b1[j] + x[2 * i] * W1[j] + x[2 * i + 1] * W1[8 + j];
            acc += (h > 0 ? h : 0) * W2[j];
        }
        y[i] = (float)acc;
    }
}

int main(void) {
    tg_model *m = tg_model_new();
    L1 = tg_linear_new(m, "l1", 2, 8, true);
    L2 = tg_linear_new(m, "l2", 8, 1, true);
    tg_input_decl tin[] = {{"x", TG_F32, TG_SHAPE(16, 2)}, {"y", TG_F32, TG_SHAPE(16, 1)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = tin, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 3, .threads = 1};
    tg_session *train;
    tg_forward *fwd, *cls;
    CHECK_OK(tg_session_new(&spec, &train));
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    CHECK_OK(tg_forward_attach(train, &(tg_forward_spec){.fn = predict, .inputs = fin, .n_inputs = 1}, &fwd));
    CHECK_OK(tg_forward_attach(train, &(tg_forward_spec){.fn = sign, .inputs = fin, .n_inputs = 1}, &cls));

    float x[2 * 300], t[16], y[300], want[300], loss;
    for (int i = 0; i < 600; i++) x[i] = sinf((float)i * 0.37f) * 2.0f;
    for (int i = 0; i < 16; i++) t[i] = x[2 * i] * x[2 * i + 1];
    float before[3];
    CHECK_OK(tg_forward_run(fwd, 3, (tg_feed[]){TG_FEED("x", x, 6)}, 1));
    CHECK_OK(tg_forward_output(fwd, before, 3));
    for (int step = 0; step < 20; step++)
        CHECK_OK(tg_session_step(train, (tg_feed[]){TG_FEED("x", x, 32), TG_FEED("y", t, 16)}, 2, &loss));

    int sizes[] = {1, 7, 300, 7};
    for (int k = 0; k < 4; k++) {
        int n = sizes[k];
        CHECK_OK(tg_forward_run(fwd, n, (tg_feed[]){TG_FEED("x", x, 2 * n)}, 1));
        tg_shape sh;
        tg_dtype dt;
        CHECK_OK(tg_forward_output_info(fwd, &sh, &dt));
        CHECK(sh.ndim == 2 && sh.d[0] == n && sh.d[1] == 1 && dt == TG_F32, "batch %d: output shape", n);
        CHECK_OK(tg_forward_output(fwd, y, n));
        reference(train, x, n, want);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += fabsf(y[i] - want[i]) > 1e-5f * (1 + fabsf(want[i]));
        CHECK(bad == 0, "batch %d: %d outputs differ from the host reference", n, bad);
        float hidden[300 * 8];
        CHECK_OK(tg_forward_read(fwd, "hidden", hidden, 8 * n));
    }
    /* Twelve batch sizes: the most recently used stay compiled (8), the
     * others are compiled again when they come back, with the same results. */
    float first[12];
    for (int n = 1; n <= 12; n++) {
        CHECK_OK(tg_forward_run(fwd, n, (tg_feed[]){TG_FEED("x", x, 2 * n)}, 1));
        CHECK_OK(tg_forward_output(fwd, y, n));
        first[n - 1] = y[n - 1];
    }
    CHECK(fwd->n_progs == 8, "%d batch sizes compiled after 12, want the 8 most recent", fwd->n_progs);
    for (int n = 1; n <= 12; n++) {
        CHECK_OK(tg_forward_run(fwd, n, (tg_feed[]){TG_FEED("x", x, 2 * n)}, 1));
        CHECK_OK(tg_forward_output(fwd, y, n));
        reference(train, x, n, want);
        bool same = memcmp(&y[n - 1], &first[n - 1], sizeof *y) == 0;
        CHECK(same && fabsf(y[n - 1] - want[n - 1]) <= 1e-5f * (1 + fabsf(want[n - 1])),
              "batch %d compiled again: %g, first %g, host %g", n, y[n - 1], first[n - 1], want[n - 1]);
    }
    CHECK(fwd->n_progs == 8, "%d batch sizes compiled, want 8", fwd->n_progs);
    CHECK_OK(tg_forward_run(fwd, 7, (tg_feed[]){TG_FEED("x", x, 14)}, 1)); /* the last run, as the loop above left it */
    /* Training moved the params; the attached session saw it. */
    CHECK(fabsf(before[0] - y[0]) > 1e-6f, "forward output did not change after training");

    int32_t cls_out[7];
    CHECK_OK(tg_forward_run(cls, 7, (tg_feed[]){TG_FEED("x", x, 14)}, 1));
    tg_dtype dt;
    CHECK_OK(tg_forward_output_info(cls, NULL, &dt));
    CHECK(dt == TG_I32, "i32 output reported as %d", (int)dt);
    CHECK_OK(tg_forward_output(cls, cls_out, 7));
    reference(train, x, 7, want);
    for (int i = 0; i < 7; i++) CHECK(cls_out[i] == (want[i] > 0), "class %d: %d for %f", i, cls_out[i], want[i]);

    /* Misuse is an error, not a crash (training calls on a forward session
     * do not compile: tests/test_session_types.sh). */
    CHECK_ERR(tg_forward_output(fwd, y, 3), TG_ERR_SIZE, "has 7 elements");
    CHECK_ERR(tg_forward_run(fwd, 0, (tg_feed[]){TG_FEED("x", x, 0)}, 1), TG_ERR_ARG, "must be > 0");
    CHECK_ERR(tg_forward_run(fwd, 5, (tg_feed[]){TG_FEED("x", x, 9)}, 1), TG_ERR_SIZE, "needs 10 elements ([5,2]), got 9");
    tg_forward *never;
    CHECK_OK(tg_forward_attach(train, &(tg_forward_spec){.fn = predict, .inputs = fin, .n_inputs = 1}, &never));
    CHECK_ERR(tg_forward_output(never, y, 1), TG_ERR_STATE, "has not run yet");
    tg_forward_free(never);

    /* The forward session outlives the training session it shares params with. */
    tg_session_free(train);
    CHECK_OK(tg_forward_run(fwd, 7, (tg_feed[]){TG_FEED("x", x, 14)}, 1));
    float y2[7];
    CHECK_OK(tg_forward_output(fwd, y2, 7));
    CHECK(memcmp(y2, want, sizeof y2) == 0 || fabsf(y2[0] - want[0]) < 1e-5f, "output changed after freeing the base");
    tg_forward_free(fwd);
    tg_forward_free(cls);
    tg_model_free(m);
    return check_summary("test_infer");
}
