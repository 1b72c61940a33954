/* The two session types: a forward session compiled from a model alone,
 * constructors that report trace errors at once, and the feed checks
 * (dtype, names, sizes) both kinds of session share. Starting over: reset
 * and replace_model against fresh sessions with the same seed, on the CPU
 * and (when there is an adapter) WebGPU. And a data-parallel session over a
 * communicator of one rank (tests/test_dp.sh runs several ranks over MPI). */
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
static tg_status fail_as = TG_ERR_BACKEND;
static tg_status one_sum(tg_comm *c, float *data, int64_t n) {
    (void)data, (void)n;
    if (fail_after >= 0 && comm_calls++ >= fail_after) {
        if (fail_as == TG_ERR_TIMEOUT) /* as tg_mpi_comm words it */
            snprintf(c->error, sizeof c->error, "timed out after %g s in MPI_Iallgather: rank 1 of 2 did not arrive",
                     c->timeout_s);
        else
            snprintf(c->error, sizeof c->error, "the link is down");
        return fail_as;
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
    tg_comm comm = {0, 1, one_sum, one_bcast, true, "", NULL, 0, 0};
    tg_input_decl tin[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"t", TG_I32, TG_SHAPE(4)}};
    tg_train_spec ts = {.model = m, .loss = loss_fn, .inputs = tin, .n_inputs = 2,
                        .optim = tg_adamw(tg_lr_constant(0.05f), 0.01f), .seed = 3, .threads = 1};
    ts.optim.clip_grad_norm = 0.5f;
    tg_session *a = NULL, *b = NULL;
    CHECK_OK(tg_session_new(&ts, &a));
    ts.comm = &comm;
    CHECK_OK(tg_session_new(&ts, &b));
    CHECK(comm_calls > 0, "the compile's agreement made no comm call");
    for (int k = 0; k < 3; k++) { /* a timeout that is no number of seconds */
        tg_comm bad = comm;
        bad.timeout_s = k == 0 ? -1 : k == 1 ? NAN : 1e10;
        ts.comm = &bad;
        tg_session *z = NULL;
        CHECK_ERR(tg_session_new(&ts, &z), TG_ERR_ARG, "spec.comm: timeout_s is");
    }
    ts.comm = &comm;
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
        /* comm.bucket_bytes: buckets of 4 bytes hold one gradient each (more buckets than the default's), the
         * same bits; a negative size is refused */
        tg_comm small = comm;
        small.bucket_bytes = 4;
        ts.comm = &small;
        tg_session *c = NULL;
        float lc = 0, pc[16];
        CHECK_OK(tg_session_new(&ts, &c));
        for (int step = 0; c && step < 5; step++) CHECK_OK(tg_session_step(c, f, 2, &lc));
        tg_comm_stats cc = {0};
        if (c) CHECK_OK(tg_session_comm_stats(c, &cc));
        if (c) CHECK_OK(tg_session_get_param(c, "l1.W", pc, 16));
        CHECK(c && cc.buckets > cs.buckets && memcmp(&lc, &lb, sizeof lc) == 0 && memcmp(pc, pb, sizeof pc) == 0,
              "bucket_bytes 4: %d buckets (the default's %d), loss %.9g (%.9g)", cc.buckets, cs.buckets, lc, lb);
        tg_session_free(c);
        small.bucket_bytes = -1;
        CHECK_ERR(tg_session_new(&ts, &c), TG_ERR_ARG, "spec.comm: bucket_bytes is -1");
        ts.comm = &comm;
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
        /* one that times out: the step's error names the collective, the step and the comm's words */
        fail_after = comm_calls;
        fail_as = TG_ERR_TIMEOUT;
        comm.timeout_s = 1.5;
        char want[200];
        snprintf(want, sizeof want, "tg_session_step: step %lld: data-parallel: the all-reduce of ", (long long)steps + 1);
        CHECK_ERR(tg_session_step(b, f, 2, &lb), TG_ERR_TIMEOUT, want);
        CHECK(strstr(tg_last_error(), "floats) timed out after 1.5 s in MPI_Iallgather: rank 1 of 2 did not arrive"),
              "a timeout's message: %s", tg_last_error());
        fail_as = TG_ERR_BACKEND;
        fail_after = -1;
        CHECK_OK(tg_session_get_param(b, "l1.W", pa, 16));
        CHECK(tg_session_step_count(b) == steps && memcmp(pa, pb, sizeof pa) == 0, "a failed exchange applied the step");
        /* starting over goes through the ranks' agreement and rank 0's params */
        int before = comm_calls;
        CHECK_OK(tg_session_reset(b, NULL));
        CHECK_OK(tg_session_replace_model(b, &(tg_replace_spec){.model = m}));
        CHECK(comm_calls > before + 2 && tg_session_step_count(b) == 0, "reset and replace_model made no comm call");
        CHECK_OK(tg_session_step(b, f, 2, &lb));
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

/* ---- reset and replace_model ----
 * A net through a user pointer (so a replace can hand the loss a new one),
 * with dropout in the loss so the random ops' per-step seed is covered. */
typedef struct {
    tg_linear l1, l2;
} net;

static net net_new(tg_model *m, int64_t hidden) {
    return (net){tg_linear_new(m, "l1", 2, hidden, true), tg_linear_new(m, "l2", hidden, 3, true)};
}

static tg_tensor net_fwd(tg_graph *g, const net *n, tg_tensor x) {
    return tg_linear_fwd(g, &n->l2, tg_dropout(tg_relu(tg_linear_fwd(g, &n->l1, x)), 0.25f));
}

static tg_tensor net_loss(tg_graph *g, void *u) {
    return tg_cross_entropy(net_fwd(g, u, tg_input(g, "x")), tg_input(g, "t"), TG_REDUCTION_MEAN);
}

static tg_tensor net_predict(tg_graph *g, void *u) {
    const net *n = u;
    return tg_linear_fwd(g, &n->l2, tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x"))));
}

/* A forward that reads a third layer: only a model that has one fits it. */
static tg_linear L3;
static tg_tensor needs_l3(tg_graph *g, void *u) { return tg_linear_fwd(g, &L3, net_predict(g, u)); }

static const tg_input_decl NET_IN[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"t", TG_I32, TG_SHAPE(4)}};

static tg_session *net_session(tg_model *m, net *n, uint64_t seed, tg_backend be) {
    tg_train_spec ts = {.model = m, .loss = net_loss, .user = n, .inputs = NET_IN, .n_inputs = 2, .seed = seed,
                        .optim = tg_adamw(tg_lr_linear(0.05f, 0.005f, 6), 0.1f), .backend = be, .threads = 1};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&ts, &s));
    return s;
}

static void net_steps(tg_session *s, int n, float *losses) {
    for (int k = 0; k < n; k++) {
        losses[k] = NAN;
        CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", X, 8), TG_FEED("t", T, 4)}, 2, &losses[k]));
    }
}

static bool same(const float *a, const float *b, int n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

/* Training after a reset is bitwise a fresh session's with the same seed (or
 * the new one); the keep_ flags leave their part alone. */
static void reset_checks(tg_backend be, const char *bn) {
    tg_model *m = tg_model_new();
    net n = net_new(m, 8);
    tg_session *s = net_session(m, &n, 3, be), *fresh = net_session(m, &n, 3, be), *fresh9 = net_session(m, &n, 9, be);
    if (!s || !fresh || !fresh9) goto done;
    float a[6], b[6], c[6], w0[16], w1[16];
    net_steps(fresh, 6, a);
    net_steps(fresh9, 6, c);
    CHECK_OK(tg_session_get_param(s, "l1.W", w0, 16));
    net_steps(s, 4, b);
    CHECK(same(a, b, 4), "%s: two sessions with one seed trained apart (%.9g vs %.9g)", bn, a[0], b[0]);
    CHECK_OK(tg_session_reset(s, NULL));
    CHECK(tg_session_step_count(s) == 0, "%s: reset left step count %lld", bn, (long long)tg_session_step_count(s));
    CHECK_OK(tg_session_get_param(s, "l1.W", w1, 16));
    CHECK(same(w0, w1, 16), "%s: reset did not draw the params again from the seed", bn);
    net_steps(s, 6, b);
    CHECK(same(a, b, 6), "%s: after reset the losses differ from a fresh session's (step 6: %.9g vs %.9g)", bn, b[5], a[5]);
    CHECK_OK(tg_session_reset(s, &(tg_reset_opts){.new_seed = true, .seed = 9}));
    CHECK(tg_session_seed(s) == 9, "%s: reset to seed 9, the session says %llu", bn, (unsigned long long)tg_session_seed(s));
    net_steps(s, 6, b);
    CHECK(same(c, b, 6), "%s: after a reset to seed 9 the losses differ from a fresh seed-9 session's", bn);

    /* keep_optimizer: params drawn again, the step count (and Adam's state) kept. */
    CHECK_OK(tg_session_reset(s, &(tg_reset_opts){.keep_optimizer = true}));
    CHECK_OK(tg_session_get_param(s, "l1.W", w1, 16));
    CHECK(tg_session_step_count(s) == 6, "%s: keep_optimizer reset the step count", bn);
    tg_session_free(fresh9);
    fresh9 = net_session(m, &n, 9, be);
    if (!fresh9) goto done;
    CHECK_OK(tg_session_get_param(fresh9, "l1.W", w0, 16));
    CHECK(same(w0, w1, 16), "%s: keep_optimizer did not draw the params again", bn);
    net_steps(s, 1, b);
    net_steps(fresh9, 1, c);
    CHECK(!same(b, c, 1), "%s: keep_optimizer's next step equals a fresh one: the state was not kept", bn);
    /* keep_params: optimizer state zeroed, params as they were. */
    CHECK_OK(tg_session_get_param(s, "l1.W", w0, 16));
    CHECK_OK(tg_session_reset(s, &(tg_reset_opts){.keep_params = true}));
    CHECK_OK(tg_session_get_param(s, "l1.W", w1, 16));
    CHECK(same(w0, w1, 16) && tg_session_step_count(s) == 0, "%s: keep_params moved the params or kept the step", bn);
    CHECK_ERR(tg_session_reset(NULL, NULL), TG_ERR_ARG, "tg_session_reset: session is NULL");
done:
    tg_session_free(s);
    tg_session_free(fresh);
    tg_session_free(fresh9);
    tg_model_free(m);
}

/* replace_model: the next steps are a fresh session's on the new model; an
 * attached forward runs the new params; one that no longer fits fails with
 * why; a replace that fails leaves the session as it was. */
static void replace_checks(tg_backend be, const char *bn) {
    tg_model *m1 = tg_model_new(), *m2 = tg_model_new(), *m3 = tg_model_new();
    net n = net_new(m1, 8);
    L3 = tg_linear_new(m1, "l3", 3, 2, true);
    net n2 = net_new(m2, 16);
    tg_session *s = net_session(m1, &n, 3, be), *fresh = net_session(m2, &n2, 4, be);
    tg_forward *f = NULL, *g = NULL, *h = NULL;
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    if (s) CHECK_OK(tg_forward_attach(s, &(tg_forward_spec){.fn = net_predict, .user = &n, .inputs = fin, .n_inputs = 1}, &f));
    if (s) CHECK_OK(tg_forward_attach(s, &(tg_forward_spec){.fn = needs_l3, .user = &n, .inputs = fin, .n_inputs = 1}, &h));
    if (!s || !fresh || !f || !h) goto done;
    float a[5], b[5], y0[12], y1[12];
    net_steps(s, 3, b);
    net_steps(fresh, 5, a);

    /* A replace whose loss does not trace: an error, and the session trains on as before. */
    net bad = net_new(m3, 5);
    bad.l2 = tg_linear_new(m3, "l2x", 6, 3, true); /* [4,5] @ [6,3] */
    float w0[16], w1[16];
    CHECK_OK(tg_session_get_param(s, "l1.W", w0, 16));
    CHECK_ERR(tg_session_replace_model(s, &(tg_replace_spec){.model = m3, .user = &bad}), TG_ERR_SHAPE, "tg_matmul");
    CHECK_OK(tg_session_get_param(s, "l1.W", w1, 16));
    CHECK(same(w0, w1, 16) && tg_session_step_count(s) == 3, "%s: a failed replace changed the session", bn);
    CHECK_OK(tg_forward_run(f, 4, (tg_feed[]){TG_FEED("x", X, 8)}, 1));
    CHECK_ERR(tg_session_replace_model(s, &(tg_replace_spec){.model = NULL}), TG_ERR_ARG, "spec->model are required");

    /* The real one: n is rewritten in place (the forward's user pointer). */
    n = n2;
    CHECK_OK(tg_session_replace_model(s, &(tg_replace_spec){.model = m2, .new_seed = true, .seed = 4}));
    tg_model_free(m1); /* the session holds no reference to the old model */
    m1 = NULL;
    CHECK(tg_session_step_count(s) == 0 && tg_session_seed(s) == 4, "%s: replace left step %lld, seed %llu", bn,
          (long long)tg_session_step_count(s), (unsigned long long)tg_session_seed(s));
    float big[32];
    CHECK_ERR(tg_session_get_param(s, "l1.W", w0, 16), TG_ERR_SIZE, "has 32 elements");
    CHECK_OK(tg_session_get_param(s, "l1.W", big, 32));
    net_steps(s, 5, b);
    CHECK(same(a, b, 5), "%s: after replace the losses differ from a fresh session on the new model (%.9g vs %.9g)",
          bn, b[0], a[0]);
    /* The forward attached before runs the new params, as one attached now does. */
    CHECK_OK(tg_forward_attach(s, &(tg_forward_spec){.fn = net_predict, .user = &n, .inputs = fin, .n_inputs = 1}, &g));
    CHECK_OK(tg_forward_run(f, 4, (tg_feed[]){TG_FEED("x", X, 8)}, 1));
    CHECK_OK(tg_forward_output(f, y0, 12));
    if (g) CHECK_OK(tg_forward_run(g, 4, (tg_feed[]){TG_FEED("x", X, 8)}, 1));
    if (g) CHECK_OK(tg_forward_output(g, y1, 12));
    CHECK(same(y0, y1, 12), "%s: a forward attached before the replace does not run the new params", bn);
    /* The forward that needs l3 no longer fits: every call says why. */
    CHECK_ERR(tg_forward_run(h, 4, (tg_feed[]){TG_FEED("x", X, 8)}, 1), TG_ERR_STATE,
              "tg_forward_run: tg_session_replace_model left this attached forward session unable to compile");
    CHECK(strstr(tg_last_error(), "param 4 is not in this graph's model") != NULL, "%s: broken forward's reason: %s", bn,
          tg_last_error());
    CHECK_ERR(tg_forward_get_param(h, "l1.W", big, 32), TG_ERR_STATE, "unable to compile");
    CHECK_ERR(tg_forward_output(h, y0, 12), TG_ERR_STATE, "unable to compile");
    /* A new optimizer of another kind: its own state from zero. */
    tg_optim sgd = tg_sgd(tg_lr_constant(0.1f), 0.9f, true, 0);
    CHECK_OK(tg_session_replace_model(s, &(tg_replace_spec){.model = m2, .optim = &sgd}));
    net_steps(s, 2, b);
    CHECK(isfinite(b[1]) && tg_session_step_count(s) == 2, "%s: training after a replace with SGD", bn);
done:
    tg_forward_free(h);
    tg_forward_free(f);
    tg_session_free(s); /* before g: it holds the engine too */
    tg_forward_free(g);
    tg_session_free(fresh);
    tg_model_free(m1);
    tg_model_free(m2);
    tg_model_free(m3);
}

/* ---- every param in one call; the captures a session has ---- */

static tg_tensor captured_loss(tg_graph *g, void *u) {
    const net *n = u;
    tg_tensor h = tg_capture(tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x"))), "hidden");
    tg_tensor y = tg_capture(tg_linear_fwd(g, &n->l2, h), "logits");
    return tg_cross_entropy(y, tg_input(g, "t"), TG_REDUCTION_MEAN);
}

static void download_and_captures(tg_backend be) {
    tg_model *m = tg_model_new();
    net n = net_new(m, 8);
    tg_train_spec ts = {.model = m, .loss = captured_loss, .user = &n, .inputs = NET_IN, .n_inputs = 2, .seed = 2,
                        .optim = tg_adam(tg_lr_constant(0.05f)), .backend = be};
    tg_session *s = NULL, *t = NULL;
    tg_forward *f = NULL;
    tg_safetensors *d = NULL, *e = NULL;
    CHECK_OK(tg_session_new(&ts, &s));
    ts.seed = 11;
    CHECK_OK(tg_session_new(&ts, &t));
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(4, 2)}};
    if (s) CHECK_OK(tg_forward_attach(s, &(tg_forward_spec){.fn = net_predict, .user = &n, .inputs = fin, .n_inputs = 1}, &f));
    if (!s || !t || !f) goto done;
    float loss;
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", X, 8), TG_FEED("t", T, 4)}, 2, &loss));
    CHECK_OK(tg_session_download(s, &d));
    CHECK_OK(tg_forward_download(f, &e));
    if (!d || !e) goto done;
    const char *names[] = {"l1.W", "l1.b", "l2.W", "l2.b"};
    const int64_t sizes[] = {16, 8, 24, 3};
    CHECK(tg_safetensors_count(d) == 4, "download: %d tensors", tg_safetensors_count(d));
    for (int i = 0; i < 4 && tg_safetensors_count(d) == 4; i++) {
        const tg_st_tensor *a = tg_safetensors_tensor(d, i), *b = tg_safetensors_find(e, names[i]);
        float v[24];
        CHECK_OK(tg_session_get_param(s, names[i], v, sizes[i]));
        CHECK(strcmp(a->name, names[i]) == 0 && a->dtype == TG_F32 && tg_shape_numel(a->shape) == sizes[i] &&
                  memcmp(a->data, v, sizeof(float) * (size_t)sizes[i]) == 0,
              "download: tensor %d is not param '%s' with its values", i, names[i]);
        CHECK(b && memcmp(a->data, b->data, sizeof(float) * (size_t)sizes[i]) == 0,
              "an attached forward's download differs from its session's at '%s'", names[i]);
    }
    CHECK(tg_safetensors_find(d, "l2.W")->shape.d[0] == 8 && tg_safetensors_find(d, "l2.W")->shape.d[1] == 3,
          "download: l2.W's shape");
    /* it round-trips: written as a file and loaded into another session */
    const char *path = "/tmp/tg_test_sessions_download.safetensors";
    CHECK_OK(tg_safetensors_write(path, tg_safetensors_tensor(d, 0), tg_safetensors_count(d), NULL, 0));
    CHECK_OK(tg_session_load_params(t, path));
    remove(path);
    tg_safetensors_free(e);
    e = NULL;
    CHECK_OK(tg_session_download(t, &e));
    for (int i = 0; e && i < 4; i++)
        CHECK(memcmp(tg_safetensors_tensor(d, i)->data, tg_safetensors_tensor(e, i)->data,
                     sizeof(float) * (size_t)sizes[i]) == 0,
              "download -> write -> load_params changed '%s'", names[i]);
    tg_safetensors *none = (tg_safetensors *)d;
    CHECK_ERR(tg_session_download(NULL, &none), TG_ERR_ARG, "tg_session_download: session is NULL");
    CHECK(none == NULL, "a failed download left a pointer");

    /* captures: the loss function's two, in order; the forward has none */
    CHECK(tg_session_capture_count(s) == 2, "capture count %d", tg_session_capture_count(s));
    const char *c0 = tg_session_capture_name(s, 0), *c1 = tg_session_capture_name(s, 1);
    CHECK(c0 && c1 && strcmp(c0, "hidden") == 0 && strcmp(c1, "logits") == 0, "capture names %s, %s", c0 ? c0 : "NULL",
          c1 ? c1 : "NULL");
    CHECK(!tg_session_capture_name(s, 2) && !tg_session_capture_name(s, -1) && !tg_session_capture_name(NULL, 0),
          "capture names past the end");
    CHECK(tg_forward_capture_count(f) == 0 && tg_session_capture_count(NULL) == 0, "a forward without captures");
done:
    tg_safetensors_free(d);
    tg_safetensors_free(e);
    tg_forward_free(f);
    tg_session_free(s);
    tg_session_free(t);
    tg_model_free(m);
}

/* ---- an i32 param: a permutation read with tg_embedding, never trained ---- */

static tg_param PERM, TABLE;
static tg_tensor perm_loss(tg_graph *g, void *u) {
    tg_tensor rows = tg_capture(tg_embedding(tg_use(g, TABLE), tg_use(g, PERM)), "rows"); /* [4, 3] */
    return tg_sum(tg_mul(rows, tg_input(g, "w")), TG_ALL, false);
}

static void i32_params(tg_backend be, const char *bn) {
    tg_model *m = tg_model_new();
    static const float perm0[4] = {2, 0, 3, 1}, table0[12] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
    PERM = tg_model_param_dt(m, "perm", TG_SHAPE(4), TG_I32, tg_init_values(perm0));
    TABLE = tg_model_param(m, "table", TG_SHAPE(4, 3), tg_init_values(table0));
    CHECK(tg_model_param_dtype(m, PERM) == TG_I32 && tg_model_param_dtype(m, TABLE) == TG_F32, "%s: param dtypes", bn);
    tg_input_decl in[] = {{"w", TG_F32, TG_SHAPE(4, 3)}};
    tg_train_spec ts = {.model = m, .loss = perm_loss, .inputs = in, .n_inputs = 1,
                        .optim = tg_sgd(tg_lr_constant(0.5f), 0, false, 0.1f), .backend = be, .threads = 1};
    tg_session *s = NULL;
    tg_safetensors *d = NULL;
    CHECK_OK(tg_session_new(&ts, &s));
    if (!s) goto done;
    float w[12], rows[12], loss, t[12];
    for (int i = 0; i < 12; i++) w[i] = 1;
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("w", w, 12)}, 1, &loss));
    CHECK_OK(tg_session_read(s, "rows", rows, 12));
    CHECK(rows[0] == 20 && rows[3] == 0 && rows[6] == 30 && rows[9] == 10, "%s: rows picked by the i32 param: %g %g %g %g",
          bn, rows[0], rows[3], rows[6], rows[9]);
    CHECK_OK(tg_session_get_param(s, "table", t, 12));
    CHECK(t[0] == 0 - 0.5f * (1 + 0.1f * 0) && t[3] == 10 - 0.5f * (1 + 0.1f * 10), "%s: the table trained: %g %g", bn,
          t[0], t[3]);
    CHECK_ERR(tg_session_get_grad(s, "perm", t, 4), TG_ERR_ARG, "param 'perm' is i32");
    CHECK_ERR(tg_session_set_param(s, "perm", t, 4), TG_ERR_ARG, "param 'perm' is i32: move it with a TG_I32 feed");
    CHECK_OK(tg_session_download(s, &d));
    const tg_st_tensor *p = d ? tg_safetensors_find(d, "perm") : NULL;
    CHECK(p && p->dtype == TG_I32 && memcmp(p->data, (int32_t[]){2, 0, 3, 1}, 16) == 0, "%s: the i32 param trained or "
          "came back wrong", bn);
    /* upload takes it as an i32 feed, with every f32 param */
    int32_t perm1[4] = {3, 3, 0, 1};
    CHECK_ERR(tg_session_upload(s, (tg_feed[]){{"perm", perm1, 4, TG_F32}, TG_FEED("table", table0, 12)}, 2), TG_ERR_ARG,
              "param 'perm' is i32, the feed is f32");
    CHECK_OK(tg_session_upload(s, (tg_feed[]){TG_FEED("perm", perm1, 4), TG_FEED("table", table0, 12)}, 2));
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("w", w, 12)}, 1, &loss));
    CHECK_OK(tg_session_read(s, "rows", rows, 12));
    CHECK(rows[0] == 30 && rows[3] == 30 && rows[6] == 0 && rows[9] == 10, "%s: the uploaded i32 param: %g %g %g %g", bn,
          rows[0], rows[3], rows[6], rows[9]);
    /* weights files carry it as I32; reset draws it again from its values */
    const char *path = "/tmp/tg_test_sessions_i32.safetensors";
    CHECK_OK(tg_session_save_params(s, path));
    CHECK_OK(tg_session_reset(s, NULL));
    tg_safetensors_free(d);
    d = NULL;
    CHECK_OK(tg_session_download(s, &d));
    p = d ? tg_safetensors_find(d, "perm") : NULL;
    CHECK(p && memcmp(p->data, (int32_t[]){2, 0, 3, 1}, 16) == 0, "%s: reset did not restore the i32 param", bn);
    CHECK_OK(tg_session_load_params(s, path));
    tg_safetensors_free(d);
    d = NULL;
    CHECK_OK(tg_session_download(s, &d));
    p = d ? tg_safetensors_find(d, "perm") : NULL;
    CHECK(p && memcmp(p->data, perm1, 16) == 0, "%s: the i32 param did not survive a weights file", bn);
    remove(path);
done:
    tg_safetensors_free(d);
    tg_session_free(s);
    tg_model_free(m);
    if (be != TG_BACKEND_CPU) return;
    /* what an i32 param cannot be */
    m = tg_model_new();
    tg_model_param_dt(m, "r", TG_SHAPE(2), TG_I32, tg_init_randn(1));
    CHECK_ERR(tg_model_status(m), TG_ERR_ARG, "'r' is i32: its init must be zeros, ones or values");
    tg_model_free(m);
    m = tg_model_new();
    tg_model_param_dt(m, "v", TG_SHAPE(2), TG_I32, tg_init_values((float[]){1, 2.5f}));
    CHECK_ERR(tg_model_status(m), TG_ERR_ARG, "'v' is i32, but value 1 (2.5) is not an int32");
    tg_model_free(m);
    m = tg_model_new();
    tg_model_param_dt(m, "b", TG_SHAPE(2), TG_BOOL, tg_init_zeros());
    CHECK_ERR(tg_model_status(m), TG_ERR_ARG, "'b': a param is f32 or i32");
    tg_model_free(m);
}

/* spec.discard_grads: the same steps bit for bit, grads planned as
 * intermediates (no bytes of their own), tg_session_get_grad refused; and
 * the two specs it does not go with. */
static void discard_grads_checks(tg_backend be, const char *name) {
    tg_model *m = tg_model_new();
    net n = net_new(m, 64);
    tg_train_spec ts = {.model = m, .loss = net_loss, .user = &n, .inputs = NET_IN, .n_inputs = 2, .seed = 7,
                        .optim = tg_adamw(tg_lr_constant(0.02f), 0.1f), .backend = be, .threads = 1};
    ts.optim.clip_grad_norm = 0.5f; /* the clip norm's sums of squares read every gradient too */
    tg_session *keep = NULL, *drop = NULL, *z = NULL;
    CHECK_OK(tg_session_new(&ts, &keep));
    ts.discard_grads = true;
    CHECK_OK(tg_session_new(&ts, &drop));
    if (keep && drop) {
        tg_feed f[] = {TG_FEED("x", X, 8), TG_FEED("t", T, 4)};
        float la = 0, lb = 0, pa[128], pb[128], g[128];
        bool same = true;
        for (int step = 0; step < 8 && same; step++) {
            CHECK_OK(tg_session_step(keep, f, 2, &la));
            CHECK_OK(tg_session_step(drop, f, 2, &lb));
            same = memcmp(&la, &lb, sizeof la) == 0;
        }
        CHECK(same, "%s: discard_grads changed a loss (%.9g vs %.9g)", name, lb, la);
        CHECK_OK(tg_session_get_param(keep, "l1.W", pa, 128));
        CHECK_OK(tg_session_get_param(drop, "l1.W", pb, 128));
        CHECK(memcmp(pa, pb, sizeof pa) == 0, "%s: discard_grads changed the trained params", name);
        CHECK_OK(tg_session_get_grad(keep, "l1.W", g, 128));
        CHECK_ERR(tg_session_get_grad(drop, "l1.W", g, 128), TG_ERR_STATE, "discards its gradients");
        tg_plan_stats a, b;
        CHECK_OK(tg_session_plan_stats(keep, &a));
        CHECK_OK(tg_session_plan_stats(drop, &b));
        CHECK(a.grad_bytes > 0 && b.grad_bytes == 0 && b.planned_bytes <= a.planned_bytes,
              "%s: discard_grads planned %lld bytes (%lld of grads), keeping them %lld (%lld)", name,
              (long long)b.planned_bytes, (long long)b.grad_bytes, (long long)a.planned_bytes, (long long)a.grad_bytes);
        CHECK(b.n_dispatches <= a.n_dispatches, "%s: discard_grads runs %d dispatches a step, keeping them %d", name,
              b.n_dispatches, a.n_dispatches);
    }
    ts.optim = tg_adam(tg_lr_constant(0.01f));
    ts.optim.kind = TG_OPT_NONE;
    CHECK_ERR(tg_session_new(&ts, &z), TG_ERR_ARG, "discard_grads without an optimizer");
    tg_comm comm = {0, 1, one_sum, one_bcast, true, "", NULL, 0, 0};
    ts.optim = tg_adam(tg_lr_constant(0.01f));
    ts.comm = &comm;
    CHECK_ERR(tg_session_new(&ts, &z), TG_ERR_ARG, "discard_grads is not supported with spec->comm");
    tg_session_free(keep);
    tg_session_free(drop);
    tg_model_free(m);
}

/* spec.random_seed: a seed nobody chose, readable; 0 stays a seed like any other. */
static void seed_checks(void) {
    tg_model *m = tg_model_new();
    net n = net_new(m, 4);
    tg_train_spec ts = {.model = m, .loss = net_loss, .user = &n, .inputs = NET_IN, .n_inputs = 2,
                        .optim = tg_adam(tg_lr_constant(0.01f)), .random_seed = true};
    tg_session *a = NULL, *b = NULL, *z = NULL;
    CHECK_OK(tg_session_new(&ts, &a));
    CHECK_OK(tg_session_new(&ts, &b));
    if (a && b)
        CHECK(tg_session_seed(a) != tg_session_seed(b), "two random seeds are the same: %llu",
              (unsigned long long)tg_session_seed(a));
    ts.seed = 5;
    CHECK_ERR(tg_session_new(&ts, &z), TG_ERR_ARG, "random_seed asks for a fresh seed, but spec->seed is 5");
    ts.random_seed = false;
    ts.seed = 0;
    CHECK_OK(tg_session_new(&ts, &z));
    CHECK(z && tg_session_seed(z) == 0, "seed 0 did not stay 0");
    tg_session_free(a);
    tg_session_free(b);
    tg_session_free(z);
    tg_model_free(m);
}

int main(int argc, char **argv) {
    tg_model *m = tg_model_new();
    L1 = tg_linear_new(m, "l1", 2, 8, true);
    L2 = tg_linear_new(m, "l2", 8, 3, true);
    forward_alone(m);
    trace_errors(m);
    feed_checks(m);
    one_rank(m);
    tg_model_free(m);
    reset_checks(TG_BACKEND_CPU, "cpu");
    replace_checks(TG_BACKEND_CPU, "cpu");
    seed_checks();
    discard_grads_checks(TG_BACKEND_CPU, "cpu");
    download_and_captures(TG_BACKEND_CPU);
    i32_params(TG_BACKEND_CPU, "cpu");
    tg_webgpu_adapter_info info;
    if (argc > 1 && strcmp(argv[1], "--cpu") == 0) {
        printf("test_sessions: webgpu left out (--cpu)\n");
    } else if (tg_webgpu_info(&info) == TG_OK) {
        reset_checks(TG_BACKEND_WEBGPU, "webgpu");
        replace_checks(TG_BACKEND_WEBGPU, "webgpu");
        i32_params(TG_BACKEND_WEBGPU, "webgpu");
        download_and_captures(TG_BACKEND_WEBGPU);
        discard_grads_checks(TG_BACKEND_WEBGPU, "webgpu");
    } else {
        check_webgpu_missing("test_sessions");
    }
    return check_summary("test_sessions");
}
