/* The two session types: a forward session compiled from a model alone,
 * constructors that report trace errors at once, and the feed checks
 * (dtype, names, sizes) both kinds of session share; and a data-parallel
 * session over a communicator of one rank (tests/test_dp.sh runs several
 * ranks over MPI). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <unistd.h>

#include "check.h"

static tg_linear L1, L2;

static tg_tensor mlp(tg_graph *g, tg_tensor x) { return tg_linear_fwd(g, &L2, tg_relu(tg_linear_fwd(g, &L1, x))); }

static tg_tensor loss_fn(tg_graph *g, void *u) {
    (void)u;
    return tg_cross_entropy(mlp(g, tg_input(g, "x")), tg_input(g, "t"), TG_REDUCTION_MEAN);
}

static tg_tensor predict(tg_graph *g, void *u) {
    (void)u;
    return mlp(g, tg_input(g, "x"));
}

/* [N, 2] @ [3, 1]: a shape error recorded while tracing. */
static tg_tensor bad_shapes(tg_graph *g, void *u) {
    (void)u;
    return tg_matmul(tg_input(g, "x"), tg_full(g, TG_SHAPE(3, 1), 1.0f));
}

static const float X[8] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f, 1, 1};
static const int32_t T[4] = {0, 2, 1, 2};

/* Inputs x [4, 2] f32 and t [4] i32, Adam; seed as given. */
static tg_session *open_train(tg_model *m, uint64_t seed) {
    tg_input_decl tin[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"t", TG_I32, TG_SHAPE(4)}};
    tg_train_spec ts = {.model = m, .loss = loss_fn, .inputs = tin, .n_inputs = 2,
                        .optim = tg_adam(tg_lr_constant(0.05f)), .seed = seed, .threads = 1};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&ts, &s));
    return s;
}

/* Alone: no training session, no loss; params as tg_session_new draws them
 * from the same seed, weights through upload and load_params. */
static void forward_alone(tg_model *m) {
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    tg_forward_spec fs = {.fn = predict, .inputs = fin, .n_inputs = 1, .model = m, .seed = 5, .threads = 1};
    tg_forward *f = NULL, *g = NULL;
    CHECK_OK(tg_forward_new(&fs, &f));
    tg_session *s = open_train(m, 5);
    if (!f || !s) return;
    float w[16], v[16];
    CHECK_OK(tg_forward_get_param(f, "l1.W", w, 16));
    CHECK_OK(tg_session_get_param(s, "l1.W", v, 16));
    CHECK(memcmp(w, v, sizeof w) == 0, "tg_forward_new drew other params than tg_session_new from the same seed");

    /* Train, then hand the weights over: an attached forward and the lone one agree. */
    float loss0 = 0, loss = 0;
    for (int k = 0; k < 30; k++)
        CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", X, 8), TG_FEED("t", T, 4)}, 2, k ? &loss : &loss0));
    CHECK(loss < loss0, "training did not lower the loss (%g -> %g)", loss0, loss);
    fs.model = NULL;
    CHECK_OK(tg_forward_attach(s, &fs, &g));
    const char *path = "/tmp/tg_test_sessions.safetensors";
    CHECK_OK(tg_session_save_params(s, path));
    CHECK_OK(tg_forward_load_params(f, path));
    remove(path);
    float ya[12], yb[12];
    CHECK_OK(tg_forward_run(f, 4, (tg_feed[]){TG_FEED("x", X, 8)}, 1));
    CHECK_OK(tg_forward_output(f, ya, 12));
    if (g) CHECK_OK(tg_forward_run(g, 4, (tg_feed[]){TG_FEED("x", X, 8)}, 1));
    if (g) CHECK_OK(tg_forward_output(g, yb, 12));
    CHECK(memcmp(ya, yb, sizeof ya) == 0, "a lone forward with the trained weights differs from the attached one");

    /* upload: every param, all f32. */
    float b1[8] = {0}, w2[24] = {0}, b2[3] = {1, 2, 3};
    tg_feed up[] = {TG_FEED("l1.W", w, 16), TG_FEED("l1.b", b1, 8), TG_FEED("l2.W", w2, 24), TG_FEED("l2.b", b2, 3)};
    CHECK_OK(tg_forward_upload(f, up, 4));
    CHECK_OK(tg_forward_run(f, 1, (tg_feed[]){TG_FEED("x", X, 2)}, 1));
    CHECK_OK(tg_forward_output(f, ya, 3));
    CHECK(ya[0] == 1 && ya[1] == 2 && ya[2] == 3, "uploaded params not used: %g %g %g", ya[0], ya[1], ya[2]);
    up[1].dtype = TG_I32;
    CHECK_ERR(tg_forward_upload(f, up, 4), TG_ERR_ARG, "tg_forward_upload: param 'l1.b' is f32, the feed is i32");
    tg_forward *h = (tg_forward *)&fs; /* must come back NULL */
    CHECK_ERR(tg_forward_new(&fs, &h), TG_ERR_ARG, "spec->model is required");
    CHECK(h == NULL, "a failed tg_forward_new left a session");
    tg_model *other = tg_model_new();
    fs.model = other;
    CHECK_ERR(tg_forward_attach(s, &fs, &h), TG_ERR_ARG, "not the training session's model");
    tg_model_free(other);
    tg_forward_free(f);
    tg_session_free(s); /* before the forward attached to it: it holds the device */
    tg_forward_free(g);
}

/* Both constructors trace at once: the function's error, and no session. */
static void trace_errors(tg_model *m) {
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    tg_session *s = open_train(m, 1);
    if (!s) return;
    tg_forward_spec bad = {.fn = bad_shapes, .inputs = fin, .n_inputs = 1};
    tg_forward *f = (tg_forward *)&bad; /* must come back NULL */
    CHECK_ERR(tg_forward_attach(s, &bad, &f), TG_ERR_SHAPE, "tg_matmul");
    CHECK(f == NULL, "a failed attach left a session");
    bad.model = m;
    f = (tg_forward *)&bad;
    CHECK_ERR(tg_forward_new(&bad, &f), TG_ERR_SHAPE, "tg_matmul");
    CHECK(f == NULL, "a failed tg_forward_new left a session");
    /* An input the function does not declare: also at attach. */
    tg_forward_spec none = {.fn = predict, .inputs = NULL, .n_inputs = 0};
    CHECK_ERR(tg_forward_attach(s, &none, &f), TG_ERR_NAME, "'x'");
    tg_session_free(s);
}

/* The feed checks, training and forward alike; a failed step changes nothing. */
static void feed_checks(tg_model *m) {
    tg_session *s = open_train(m, 1);
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    tg_forward *f = NULL;
    if (s) CHECK_OK(tg_forward_attach(s, &(tg_forward_spec){.fn = predict, .inputs = fin, .n_inputs = 1}, &f));
    if (!s || !f) return;
    float tf[4] = {0, 2, 1, 2}, loss = 0;
    float w0[16], w1[16];
    CHECK_OK(tg_session_get_param(s, "l1.W", w0, 16));
    /* A float buffer for the i32 labels: an error, not a silent step on garbage labels. */
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", X, 8), TG_FEED("t", tf, 4)}, 2, &loss), TG_ERR_ARG,
              "tg_session_step: input 't' [4] is i32, the feed is f32 (set the feed's .dtype to TG_I32)");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){{"x", X, 8, TG_I32}, TG_FEED("t", T, 4)}, 2, &loss), TG_ERR_ARG,
              "tg_session_step: input 'x' [4,2] is f32, the feed is i32");
    CHECK_ERR(tg_forward_run(f, 4, (tg_feed[]){{"x", X, 8, TG_I32}}, 1), TG_ERR_ARG,
              "tg_forward_run: input 'x' [4,2] is f32, the feed is i32");
    CHECK_ERR(tg_forward_run(f, 4, (tg_feed[]){{"x", X, 8, TG_BOOL}}, 1), TG_ERR_ARG, "the feed is bool");
    /* Names and sizes. */
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", X, 8), TG_FEED("u", T, 4)}, 2, &loss), TG_ERR_NAME,
              "tg_session_step: unknown input 'u'");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("t", T, 4)}, 1, &loss), TG_ERR_NAME, "input 'x' was not fed");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("t", T, 4), TG_FEED("t", T, 4)}, 2, &loss), TG_ERR_NAME,
              "input 't' fed twice");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", X, 8), TG_FEED("t", T, 3)}, 2, &loss), TG_ERR_SIZE,
              "input 't' needs 4 elements ([4]), got 3");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", X, 8), TG_FEED("t", T, 4), TG_FEED("x", X, 8)}, 3, &loss),
              TG_ERR_NAME, "input 'x' fed twice");
    CHECK_ERR(tg_forward_run(f, 3, (tg_feed[]){TG_FEED("y", X, 6)}, 1), TG_ERR_NAME, "tg_forward_run: unknown input 'y'");
    CHECK_ERR(tg_forward_run(f, 3, NULL, 0), TG_ERR_NAME, "tg_forward_run: input 'x' was not fed");
    CHECK_ERR(tg_forward_run(f, 3, (tg_feed[]){TG_FEED("x", X, 6), TG_FEED("x", X, 6)}, 2), TG_ERR_NAME, "fed twice");
    CHECK_ERR(tg_forward_run(f, 3, (tg_feed[]){TG_FEED("x", X, 8)}, 1), TG_ERR_SIZE, "needs 6 elements ([3,2]), got 8");
    CHECK(tg_session_step_count(s) == 0, "a failed step counted");
    CHECK_OK(tg_session_get_param(s, "l1.W", w1, 16));
    CHECK(memcmp(w0, w1, sizeof w0) == 0, "a failed step moved the params");
    /* After failed rounds (some entries marked, some not) good feeds pass, in any order. */
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("t", T, 4), TG_FEED("x", X, 8)}, 2, &loss));
    CHECK(tg_session_step_count(s) == 1 && isfinite(loss), "the good step after the bad ones");
    CHECK_OK(tg_forward_run(f, 3, (tg_feed[]){TG_FEED("x", X, 6)}, 1));
    tg_forward_free(f);
    tg_session_free(s);
}

/* A communicator of one rank: the sum over one rank is the data itself.
 * Counts its calls; fail_after >= 0 makes the all-reduce fail from then on. */
static int comm_calls, fail_after = -1;
static tg_status one_sum(tg_comm *c, float *data, int64_t n) {
    (void)data, (void)n;
    if (fail_after >= 0 && comm_calls++ >= fail_after) {
        snprintf(c->error, sizeof c->error, "the link is down");
        return TG_ERR_BACKEND;
    }
    comm_calls++;
    return TG_OK;
}
static tg_status one_bcast(tg_comm *c, void *data, int64_t bytes, int root) {
    (void)c, (void)data, (void)bytes, (void)root;
    comm_calls++;
    return TG_OK;
}

/* Every data-parallel step's exchange runs, and changes no bit against
 * the same session without a comm; a comm that cannot work is refused; a
 * failing all-reduce fails the step before any update; checkpoints go
 * through the rank-0 paths. */
static void one_rank(tg_model *m) {
    tg_comm comm = {0, 1, one_sum, one_bcast, true, "", NULL};
    tg_input_decl tin[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"t", TG_I32, TG_SHAPE(4)}};
    tg_train_spec ts = {.model = m, .loss = loss_fn, .inputs = tin, .n_inputs = 2,
                        .optim = tg_adamw(tg_lr_constant(0.05f), 0.01f), .seed = 3, .threads = 1};
    ts.optim.clip_grad_norm = 0.5f;
    tg_session *a = NULL, *b = NULL;
    CHECK_OK(tg_session_new(&ts, &a));
    ts.comm = &comm;
    CHECK_OK(tg_session_new(&ts, &b));
    CHECK(comm_calls > 0, "the compile's agreement made no comm call");
    tg_feed f[] = {TG_FEED("x", X, 8), TG_FEED("t", T, 4)};
    float la = 0, lb = 0, pa[16], pb[16], ga[16], gb[16];
    bool same = a && b;
    for (int step = 0; same && step < 5; step++) {
        int before = comm_calls;
        CHECK_OK(tg_session_step(a, f, 2, &la));
        CHECK_OK(tg_session_step(b, f, 2, &lb));
        same = memcmp(&la, &lb, sizeof la) == 0 && comm_calls > before;
    }
    CHECK(same, "one rank's losses differ from no comm's (%.9g vs %.9g), or its step made no comm call", lb, la);
    if (a && b) {
        CHECK_OK(tg_session_get_param(a, "l1.W", pa, 16));
        CHECK_OK(tg_session_get_param(b, "l1.W", pb, 16));
        CHECK_OK(tg_session_get_grad(a, "l1.W", ga, 16));
        CHECK_OK(tg_session_get_grad(b, "l1.W", gb, 16));
        CHECK(memcmp(pa, pb, sizeof pa) == 0 && memcmp(ga, gb, sizeof ga) == 0, "one rank's params or grads differ");
        tg_comm_stats cs, none;
        CHECK_OK(tg_session_comm_stats(b, &cs));
        CHECK_OK(tg_session_comm_stats(a, &none));
        CHECK(cs.ranks == 1 && cs.steps == 5 && cs.buckets >= 2 && cs.bytes > 0 && cs.step_s > 0 && none.steps == 0,
              "comm stats: %d ranks, %lld steps, %d buckets, %lld bytes", cs.ranks, (long long)cs.steps, cs.buckets,
              (long long)cs.bytes);
        char path[64];
        snprintf(path, sizeof path, "/tmp/test_sessions_dp_%d.safetensors", (int)getpid());
        CHECK_OK(tg_session_save(b, path));
        CHECK_OK(tg_session_load(b, path));
        CHECK_ERR(tg_session_load_params(b, path), TG_ERR_NAME, "full checkpoint"); /* fails alike on every rank */
        CHECK_ERR(tg_session_load(b, "/nonexistent/x.safetensors"), TG_ERR_IO, "nonexistent");
        remove(path);
        /* an all-reduce that fails: the step fails with its message, nothing is applied */
        int64_t steps = tg_session_step_count(b);
        fail_after = comm_calls;
        CHECK_ERR(tg_session_step(b, f, 2, &lb), TG_ERR_BACKEND, "the link is down");
        fail_after = -1;
        CHECK_OK(tg_session_get_param(b, "l1.W", pa, 16));
        CHECK(tg_session_step_count(b) == steps && memcmp(pa, pb, sizeof pa) == 0, "a failed exchange applied the step");
    }
    tg_session_free(a);
    tg_session_free(b);
    tg_comm bad = comm;
    bad.rank = 1;
    ts.comm = &bad;
    CHECK_ERR(tg_session_new(&ts, &a), TG_ERR_ARG, "rank 1 of size 1");
    bad = comm, bad.allreduce_sum_f32 = NULL;
    CHECK_ERR(tg_session_new(&ts, &a), TG_ERR_ARG, "allreduce_sum_f32");
}

int main(void) {
    tg_model *m = tg_model_new();
    L1 = tg_linear_new(m, "l1", 2, 8, true);
    L2 = tg_linear_new(m, "l2", 8, 3, true);
    forward_alone(m);
    trace_errors(m);
    feed_checks(m);
    one_rank(m);
    tg_model_free(m);
    return check_summary("test_sessions");
}
