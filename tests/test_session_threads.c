/* A training session and its attached forward used from three threads at
 * once: one steps, one runs the forward and reads params, one replaces the
 * model (two sizes, back and forth) and resets. Every call must succeed and
 * see a whole session: losses and outputs finite, a param read matching one
 * of the two models' sizes. Built with -fsanitize=thread by `make tsan`,
 * where a data race fails the run. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>

#include "check.h"

#define ROUNDS 40

/* One struct serves both models: they declare the same params in the same
 * order (only the hidden width differs), so the handles agree. */
static tg_linear L1, L2;
static tg_tensor mlp(tg_graph *g, tg_tensor x) { return tg_linear_fwd(g, &L2, tg_relu(tg_linear_fwd(g, &L1, x))); }
static tg_tensor loss_fn(tg_graph *g, void *u) { return tg_mse(mlp(g, tg_input(g, "x")), tg_input(g, "y")); }
static tg_tensor predict(tg_graph *g, void *u) { return mlp(g, tg_input(g, "x")); }

static tg_model *models[2];
static tg_session *S;
static tg_forward *F;
static float X[16], Y[8];
static int failures; /* counted under its own lock: CHECK's counters are not atomic */
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

static void bad(const char *what) {
    pthread_mutex_lock(&fail_mu);
    if (failures++ < 5) fprintf(stderr, "FAIL %s: %s\n", what, tg_last_error());
    pthread_mutex_unlock(&fail_mu);
}

static void *stepper(void *u) {
    for (int i = 0; i < 3 * ROUNDS; i++) {
        float loss = NAN;
        if (tg_session_step(S, (tg_feed[]){TG_FEED("x", X, 16), TG_FEED("y", Y, 8)}, 2, &loss) != TG_OK || !isfinite(loss))
            bad("step");
        /* the getters take the lock too (what the graph pointer then points
         * to is the caller's to read only while no replace can come) */
        tg_comm_stats cs;
        if (tg_session_comm_stats(S, &cs) != TG_OK || !tg_session_graph(S) || !tg_forward_graph(F)) bad("getters");
    }
    return NULL;
}

static void *runner(void *u) {
    float y[8], w[2 * 16];
    for (int i = 0; i < 3 * ROUNDS; i++) {
        if (tg_forward_run(F, 8, (tg_feed[]){TG_FEED("x", X, 16)}, 1) != TG_OK) bad("run");
        /* run and output are two calls: a replace between them recompiles
         * the forward, which then has no run to read (TG_ERR_STATE, as
         * documented), never a torn one */
        tg_status st = tg_forward_output(F, y, 8);
        if (st != TG_OK && st != TG_ERR_STATE) bad("output");
        for (int k = 0; k < 8 && st == TG_OK; k++)
            if (!isfinite(y[k])) bad("output not finite");
        /* l1.W is [2, 8] or [2, 16]: a read of either size is whole or a
         * size error (a replace may come between the two reads) */
        for (int n = 16; n <= 32; n += 16) {
            tg_status p = tg_forward_get_param(F, "l1.W", w, n);
            if (p != TG_OK && p != TG_ERR_SIZE) bad("l1.W read");
            for (int k = 0; k < n && p == TG_OK; k++)
                if (!isfinite(w[k])) bad("l1.W not finite");
        }
    }
    return NULL;
}

static void *replacer(void *u) {
    for (int i = 1; i <= ROUNDS; i++) {
        if (tg_session_replace_model(S, &(tg_replace_spec){.model = models[i % 2], .new_seed = true, .seed = (uint64_t)i}) !=
            TG_OK)
            bad("replace");
        if (i % 4 == 0 && tg_session_reset(S, NULL) != TG_OK) bad("reset");
    }
    return NULL;
}

int main(void) {
    for (int k = 0; k < 2; k++) {
        models[k] = tg_model_new();
        L1 = tg_linear_new(models[k], "l1", 2, k ? 16 : 8, true);
        L2 = tg_linear_new(models[k], "l2", k ? 16 : 8, 1, true);
    }
    for (int i = 0; i < 16; i++) X[i] = (float)(i % 5) / 5 - 0.4f;
    for (int i = 0; i < 8; i++) Y[i] = X[2 * i] * X[2 * i + 1];
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 2)}, {"y", TG_F32, TG_SHAPE(8, 1)}};
    tg_train_spec spec = {.model = models[0], .loss = loss_fn, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(0.01f)), .threads = 2};
    CHECK_OK(tg_session_new(&spec, &S));
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    if (S) CHECK_OK(tg_forward_attach(S, &(tg_forward_spec){.fn = predict, .inputs = fin, .n_inputs = 1}, &F));
    if (S && F) {
        pthread_t t[3];
        void *(*fn[3])(void *) = {stepper, runner, replacer};
        for (int k = 0; k < 3; k++) CHECK(pthread_create(&t[k], NULL, fn[k], NULL) == 0, "pthread_create");
        for (int k = 0; k < 3; k++) pthread_join(t[k], NULL);
        CHECK(failures == 0, "%d calls failed or saw a torn session", failures);
        /* ROUNDS is even: the last replace put models[0] back */
        float w[16];
        CHECK_OK(tg_session_get_param(S, "l1.W", w, 16));
    }
    tg_forward_free(F);
    tg_session_free(S);
    tg_model_free(models[0]);
    tg_model_free(models[1]);
    return check_summary("test_session_threads");
}
