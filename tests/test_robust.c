/* Hostile input: sizes that overflow, handles that are stale, forged or NULL,
 * shapes of too many dims, schedules and optimizers set by hand out of
 * range. Each must be a clear error (status and message), never a crash,
 * and a failed trace must leave nothing behind in a compiled program. */
/* mkdtemp */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

typedef struct {
    int which;
    tg_linear l;
    tg_tensor kept; /* a tensor saved during the training trace */
    int line;
} ctx;

static tg_tensor mlp_loss(tg_graph *g, void *u) {
    ctx *c = u;
    c->kept = tg_relu(tg_linear_fwd(g, &c->l, tg_input(g, "x")));
    return tg_mse(c->kept, tg_input(g, "y"));
}

static tg_tensor forged(tg_graph *g, int id) { return (tg_tensor){g, id}; }

/* Builds one bad op per case, then carries on as a model would. */
static tg_tensor bad_trace(tg_graph *g, void *u) {
    ctx *c = u;
    tg_tensor x = tg_input(g, "x"), y = x;
    c->line = __LINE__ + 2;
    switch (c->which) {
    case 0: y = tg_add(x, tg_full(g, TG_SHAPE((int64_t)1 << 31, (int64_t)1 << 31, 4), 1.0f)); break;
    case 1: y = tg_reshape(x, TG_SHAPE((int64_t)1 << 62, (int64_t)1 << 62, 0, -1)); break;
    case 2: y = tg_nearest_upsample2d(tg_reshape(x, TG_SHAPE(1, 1, 4, 2)), INT_MAX); break;
    case 3: y = tg_relu(forged(g, 100000)); break;
    case 4: y = tg_add(x, forged(g, -7)); break;
    case 5: y = tg_full(g, ((tg_shape){7, {1, 1, 1, 1, 1, 1}}), 1.0f); break;
    case 6: y = tg_sum_axes(x, ((tg_shape){9, {0}}), false); break;
    case 7: y = tg_linear_fwd(g, NULL, x); break;
    case 8: y = tg_narrow(x, 1, INT64_MAX, INT64_MAX); break;
    case 9: y = tg_full(g, TG_SHAPE(0, INT64_MAX, 16), 1.0f); break; /* empty, but its strides overflow */
    case 10: y = tg_relu(c->kept); break; /* a tensor of the (compiled) training graph */
    }
    return tg_mse(y, tg_input(g, "y"));
}

static tg_train_spec spec_for(tg_model *m, tg_trace_fn fn, ctx *c, const tg_input_decl *in) {
    return (tg_train_spec){.model = m, .loss = fn, .user = c, .inputs = in, .n_inputs = 2,
                           .optim = tg_adam(tg_lr_constant(1e-2f))};
}

static void trace_errors(void) {
    static const struct {
        tg_status st;
        const char *want;
    } cases[] = {
        {TG_ERR_LIMIT, "tg_full: shape [2147483648,2147483648,4] has more than 1099511627776 elements"},
        {TG_ERR_SHAPE, "tg_reshape: cannot reshape [4,2] to [4611686018427387904,4611686018427387904,0,-1]"},
        {TG_ERR_LIMIT, "tg_nearest_upsample2d: factor 2147483647 makes [1,1,4,2] more than"},
        {TG_ERR_ARG, "tg_relu: operand 0 is tensor id 100000, not a tensor of this graph"},
        {TG_ERR_ARG, "tg_add: operand 1 is tensor id -7, not a tensor of this graph"},
        {TG_ERR_SHAPE, "tg_full: shape has 7 dims (at most 6)"},
        {TG_ERR_SHAPE, "tg_sum_axes: an axis list of 9 entries (at most 6)"},
        {TG_ERR_ARG, "tg_linear_fwd: the module is NULL"},
        {TG_ERR_SHAPE, "tg_narrow: range [9223372036854775807, 9223372036854775807) is outside axis 1"},
        {TG_ERR_LIMIT, "tg_full: shape [0,9223372036854775807,16] spans more than 1099511627776 elements"},
    };
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        tg_model *m = tg_model_new();
        ctx c = {.which = k, .l = tg_linear_new(m, "l", 2, 2, true)};
        tg_train_spec spec = spec_for(m, bad_trace, &c, in);
        tg_session *s = NULL;
        char want[300];
        snprintf(want, sizeof want, "%s", cases[k].want);
        tg_status st = tg_session_new(&spec, &s);
        CHECK_ERR(st, cases[k].st, want);
        char at[64];
        snprintf(at, sizeof at, "(test_robust.c:%d)", c.line + k); /* one case a line */
        CHECK(strstr(tg_last_error(), at), "case %d: '%s' lacks the call site %s", k, tg_last_error(), at);
        CHECK(s == NULL, "case %d: a session after failure", k);
        tg_session_free(s);
        tg_model_free(m);
    }
}

/* A tensor kept from the training trace and used in a later trace: an error
 * in the later trace; the compiled training graph gains nothing, so the
 * session still steps and frees cleanly. */
static void stale_handle(void) {
    tg_model *m = tg_model_new();
    ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    tg_train_spec spec = spec_for(m, mlp_loss, &c, in);
    tg_session *s = NULL;
    tg_forward *f = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (!s) return;
    int nodes = tg_graph_node_count(tg_session_graph(s));
    c.which = 10;
    tg_forward_spec is = {.fn = bad_trace, .user = &c, .inputs = in, .n_inputs = 2};
    /* attach traces at once: the error comes back from it, with no session. */
    CHECK_ERR(tg_forward_attach(s, &is, &f), TG_ERR_ARG, "tg_relu: an operand comes from another graph");
    CHECK(f == NULL, "a failed attach left a session");
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0};
    tg_feed feeds[] = {TG_FEED("x", x, 8), TG_FEED("y", y, 8)};
    CHECK(tg_graph_node_count(tg_session_graph(s)) == nodes, "the training graph grew from %d to %d nodes", nodes,
          tg_graph_node_count(tg_session_graph(s)));
    /* Outside any trace, an op on a compiled graph's tensor is refused too. */
    CHECK(!tg_tensor_ok(tg_relu(c.kept)), "an op appended to a compiled graph");
    CHECK(tg_graph_node_count(tg_session_graph(s)) == nodes, "the training graph grew");
    float loss;
    CHECK_OK(tg_session_step(s, feeds, 2, &loss));
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
}

static tg_tensor mlp_out(tg_graph *g, void *u) {
    ctx *c = u;
    return tg_linear_fwd(g, &c->l, tg_input(g, "x"));
}

/* A param declared after the session was made has no place in its params
 * arena: every call that looks params up or lays them out refuses, and none
 * writes past the arena; a step (its program is whole) still runs, and
 * replace_model compiles for the model as it is now. */
static void late_param(void) {
    tg_model *m = tg_model_new();
    ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    tg_train_spec spec = spec_for(m, mlp_loss, &c, in);
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (!s) return;
    static float big[1000];
    CHECK(tg_model_param(m, "late", TG_SHAPE(1000), tg_init_ones()) == 2, "the late param was refused");
    const char *want = "the model has 3 params, but the session was made for its first 2";
    CHECK_ERR(tg_session_set_param(s, "late", big, 1000), TG_ERR_STATE, want);
    CHECK_ERR(tg_session_get_param(s, "l.W", big, 4), TG_ERR_STATE, want);
    CHECK_ERR(tg_session_reset(s, NULL), TG_ERR_STATE, want);
    tg_safetensors *d = NULL;
    CHECK_ERR(tg_session_download(s, &d), TG_ERR_STATE, want);
    CHECK_ERR(tg_session_save_params(s, "/nonexistent-dir/late.safetensors"), TG_ERR_STATE, want);
    tg_forward *f = NULL;
    tg_forward_spec fs = {.fn = mlp_out, .user = &c, .inputs = in, .n_inputs = 1};
    CHECK_ERR(tg_forward_attach(s, &fs, &f), TG_ERR_STATE, want);
    CHECK(f == NULL, "a refused attach left a session");
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0}, loss;
    tg_feed feeds[] = {TG_FEED("x", x, 8), TG_FEED("y", y, 8)};
    CHECK_OK(tg_session_step(s, feeds, 2, &loss));
    CHECK_OK(tg_session_replace_model(s, &(tg_replace_spec){.model = m}));
    CHECK_OK(tg_session_set_param(s, "late", big, 1000));
    CHECK_OK(tg_forward_attach(s, &fs, &f));
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
}

static tg_model *lazy_model;

static tg_tensor lazy_loss(tg_graph *g, void *u) {
    ctx *c = u;
    tg_model_param(lazy_model, "lazy", TG_SHAPE(1000), tg_init_ones()); /* declared while tracing, never used */
    return mlp_loss(g, c);
}

/* A param the loss function declares while it is traced: the params arena
 * was laid out before it, so the compile fails instead of initializing it
 * past the arena's end. */
static void param_in_trace(void) {
    tg_model *m = lazy_model = tg_model_new();
    ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    tg_train_spec spec = spec_for(m, lazy_loss, &c, in);
    tg_session *s = NULL;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_STATE,
              "compile: the traced function declared params (the model had 2, now 3)");
    CHECK(s == NULL, "a session after failure");
    tg_session_free(s);
    tg_model_free(m);
}

/* An attached forward whose function no longer fits after a replace_model
 * has no program: its graph is NULL, and printing that prints nothing. */
static void broken_forward(void) {
    tg_model *m = tg_model_new();
    ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    tg_train_spec spec = spec_for(m, mlp_loss, &c, in);
    tg_session *s = NULL;
    tg_forward *f = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (!s) return;
    ctx fc = c; /* the forward's layer keeps its bias, which the new model lacks */
    tg_forward_spec fs = {.fn = mlp_out, .user = &fc, .inputs = in, .n_inputs = 1};
    CHECK_OK(tg_forward_attach(s, &fs, &f));
    tg_model *m2 = tg_model_new();
    ctx c2 = {.l = tg_linear_new(m2, "l", 2, 2, false)};
    CHECK_OK(tg_session_replace_model(s, &(tg_replace_spec){.model = m2, .user = &c2}));
    float x[8] = {0};
    CHECK_ERR(tg_forward_run(f, 0, (tg_feed[]){TG_FEED("x", x, 8)}, 1), TG_ERR_STATE, "unable to compile");
    CHECK(tg_forward_graph(f) == NULL, "a broken forward has a graph");
    FILE *out = tmpfile();
    if (out) {
        tg_graph_print(tg_forward_graph(f), out);
        tg_graph_print(NULL, out);
        CHECK(ftell(out) == 0, "printing no graph wrote %ld bytes", ftell(out));
        fclose(out);
    }
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m2);
    tg_model_free(m);
}

static int split_case, split_line;

static tg_tensor split_loss(tg_graph *g, void *u) {
    tg_tensor x = tg_input(g, "x"), out[2] = {x, x};
    split_line = __LINE__ + 2;
    switch (split_case) {
    case 0: tg_split(x, 0, ((int64_t[]){2, 2}), 2, NULL); break;
    case 1: tg_split(x, 0, ((int64_t[]){2, 2}), 0, out); break;
    case 2: tg_split(x, 0, ((int64_t[]){2, 2}), -3, out); break;
    }
    return tg_mse(out[0], tg_input(g, "y"));
}

/* tg_split with nowhere to write or no pieces: a graph error naming the
 * call site, not a trace that goes on as if nothing was asked. */
static void split_args(void) {
    static const char *want[] = {"tg_split: out is NULL", "tg_split: n is 0, want at least 1 piece",
                                 "tg_split: n is -3, want at least 1 piece"};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    for (split_case = 0; split_case < 3; split_case++) {
        tg_model *m = tg_model_new();
        ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
        tg_train_spec spec = spec_for(m, split_loss, &c, in);
        tg_session *s = NULL;
        tg_status st = tg_session_new(&spec, &s);
        char at[64];
        snprintf(at, sizeof at, "(test_robust.c:%d)", split_line + split_case);
        CHECK_ERR(st, TG_ERR_ARG, want[split_case]);
        CHECK(strstr(tg_last_error(), at), "case %d: '%s' lacks the call site %s", split_case, tg_last_error(), at);
        tg_session_free(s);
        tg_model_free(m);
    }
}

/* A user's comm that fills its error message to the last byte, with no
 * NUL; 'A's after it (padding, impl, the next field) show an over-read. */
static struct {
    tg_comm c;
    char after[16];
} loud;
static bool loud_fails;

static tg_status loud_sum(tg_comm *c, float *data, int64_t n) {
    (void)data, (void)n;
    if (!loud_fails) return TG_OK;
    memset(c->error, 'x', sizeof c->error);
    return TG_ERR_BACKEND;
}

static tg_status loud_bcast(tg_comm *c, void *data, int64_t bytes, int root) {
    (void)c, (void)data, (void)bytes, (void)root;
    return TG_OK;
}

/* The comm's message is read within its array, terminated or not. */
static void comm_error_bounded(void) {
    memset(&loud, 'A', sizeof loud);
    loud.after[sizeof loud.after - 1] = 0;
    loud.c.rank = 0, loud.c.size = 1, loud.c.concurrent = false;
    loud.c.allreduce_sum_f32 = loud_sum, loud.c.broadcast = loud_bcast;
    tg_model *m = tg_model_new();
    ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    tg_train_spec spec = spec_for(m, mlp_loss, &c, in);
    spec.comm = &loud.c;
    tg_session *s = NULL;
    char xs[sizeof loud.c.error + 1];
    memset(xs, 'x', sizeof xs - 1);
    xs[sizeof xs - 1] = 0;
    loud_fails = true;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_BACKEND, xs);
    CHECK(!strchr(tg_last_error(), 'A'), "read past the comm's error: '%s'", tg_last_error());
    loud_fails = false;
    CHECK_OK(tg_session_new(&spec, &s));
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0}, loss;
    tg_feed feeds[] = {TG_FEED("x", x, 8), TG_FEED("y", y, 8)};
    loud_fails = true;
    if (s) CHECK_ERR(tg_session_step(s, feeds, 2, &loss), TG_ERR_BACKEND, xs);
    CHECK(!strchr(tg_last_error(), 'A'), "read past the comm's error: '%s'", tg_last_error());
    tg_session_free(s);
    tg_model_free(m);
}

static tg_tensor sqrt_out(tg_graph *g, void *u) {
    (void)u;
    return tg_mul_s(tg_capture(tg_sqrt(tg_input(g, "x")), "root"), 2.0f);
}

/* A run that failed leaves an earlier run's output behind: reading it is
 * an error until a run succeeds, not that output passed off as this one's;
 * captures stay readable, for debugging. */
static void failed_run(void) {
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    tg_forward_spec fs = {.fn = sqrt_out, .inputs = in, .n_inputs = 1, .check_numerics = true, .model = tg_model_new()};
    tg_forward *f = NULL;
    CHECK_OK(tg_forward_new(&fs, &f));
    if (!f) return;
    float x[4] = {1, 4, 9, 16}, neg[4] = {1, -4, 9, 16}, y[4], r[4];
    CHECK_OK(tg_forward_run(f, 2, (tg_feed[]){TG_FEED("x", x, 4)}, 1));
    CHECK_OK(tg_forward_output(f, y, 4));
    const char *want = "the last run failed";
    CHECK_ERR(tg_forward_run(f, 2, (tg_feed[]){TG_FEED("x", neg, 4)}, 1), TG_ERR_NUMERIC, "");
    CHECK_ERR(tg_forward_output(f, y, 4), TG_ERR_STATE, want);
    CHECK_ERR(tg_forward_output_info(f, NULL, NULL), TG_ERR_STATE, want);
    CHECK_OK(tg_forward_read(f, "root", r, 4));
    CHECK(r[0] == 1 && isnan(r[1]), "the capture after a stopped run: %g %g", r[0], r[1]);
    CHECK_OK(tg_forward_run(f, 2, (tg_feed[]){TG_FEED("x", x, 4)}, 1));
    CHECK_OK(tg_forward_output(f, y, 4));
    /* A bad feed and a bad batch are failed runs too; a run of another batch
     * size that check_numerics stops leaves its own captures to read. */
    CHECK_ERR(tg_forward_run(f, 2, (tg_feed[]){TG_FEED("x", x, 3)}, 1), TG_ERR_SIZE, "");
    CHECK_ERR(tg_forward_output(f, y, 4), TG_ERR_STATE, want);
    CHECK_OK(tg_forward_run(f, 2, (tg_feed[]){TG_FEED("x", x, 4)}, 1));
    CHECK_ERR(tg_forward_run(f, -1, (tg_feed[]){TG_FEED("x", x, 4)}, 1), TG_ERR_ARG, "");
    CHECK_ERR(tg_forward_output(f, y, 4), TG_ERR_STATE, want);
    CHECK_ERR(tg_forward_run(f, 1, (tg_feed[]){TG_FEED("x", neg + 1, 2)}, 1), TG_ERR_NUMERIC, "");
    CHECK_ERR(tg_forward_read(f, "root", r, 4), TG_ERR_SIZE, "has 2 elements");
    CHECK_OK(tg_forward_read(f, "root", r, 2));
    CHECK(isnan(r[0]) && r[1] == 3, "the capture of the stopped batch-1 run: %g %g", r[0], r[1]);
    tg_forward_free(f);
    tg_model_free(fs.model);
}

/* A progress line for a run of INT64_MAX steps at a slow rate: the ETA is
 * capped, not a double converted outside long's range. */
static void progress_eta(void) {
    FILE *f = tmpfile();
    if (!f) return;
    tg_progress p = {.total = INT64_MAX, .file = f};
    tg_progress_start(&p);
    p.t0_ -= 10.0; /* ten seconds for the first step */
    tg_progress_update(&p, 1, 1.0f, NULL);
    char line[256] = "";
    rewind(f);
    CHECK(fgets(line, sizeof line, f) && strstr(line, "ETA 277777:46:40"), "ETA of INT64_MAX steps: %s", line);
    fclose(f);
}

static tg_tensor long_loss(tg_graph *g, void *u) {
    const tg_param *p = u;
    return tg_add(tg_sum(tg_square(tg_use(g, p[0])), TG_ALL, false), tg_sum(tg_square(tg_use(g, p[1])), TG_ALL, false));
}

/* Param names of any length: two params whose 330-character names differ
 * only at the end keep optimizer states of their own, so a full checkpoint
 * writes and loads. */
static void long_names(void) {
    char a[340], b[340];
    memset(a, 'p', 330);
    a[330] = 0;
    memcpy(b, a, sizeof a);
    a[329] = 'a', b[329] = 'b';
    tg_model *m = tg_model_new();
    tg_param p[2] = {tg_model_param(m, a, TG_SHAPE(3), tg_init_ones()), tg_model_param(m, b, TG_SHAPE(2), tg_init_ones())};
    tg_train_spec spec = {.model = m, .loss = long_loss, .user = p, .optim = tg_adam(tg_lr_constant(0.1f))};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    char dir[] = "/tmp/tg_robust_XXXXXX", path[64];
    if (s && mkdtemp(dir)) {
        snprintf(path, sizeof path, "%s/ck.safetensors", dir);
        CHECK_OK(tg_session_step(s, NULL, 0, NULL));
        CHECK_OK(tg_session_save(s, path));
        CHECK_OK(tg_session_load(s, path));
        remove(path);
        rmdir(dir);
    }
    tg_session_free(s);
    tg_model_free(m);
    /* A layer's params are "<name>.W" and "<name>.b" whatever the name's length. */
    char w[350], bias[350];
    snprintf(w, sizeof w, "%s.W", a);
    snprintf(bias, sizeof bias, "%s.b", a);
    m = tg_model_new();
    tg_linear l = tg_linear_new(m, a, 2, 2, true);
    tg_conv2d cv = tg_conv2d_new(m, b, 1, 1, 3, 1, 0, 1, false);
    CHECK_OK(tg_model_status(m));
    CHECK(l.W >= 0 && tg_model_find(m, w) == l.W, "the weight of a long-named layer is not '<name>.W'");
    CHECK(l.b >= 0 && tg_model_find(m, bias) == l.b, "the bias of a long-named layer is not '<name>.b'");
    snprintf(w, sizeof w, "%s.W", b);
    CHECK(cv.W >= 0 && tg_model_find(m, w) == cv.W, "the weight of a long-named conv is not '<name>.W'");
    tg_model_free(m);
}

static void model_errors(void) {
    tg_model *m = tg_model_new();
    int64_t big = (int64_t)1 << 40;
    CHECK(tg_model_param(m, "huge", TG_SHAPE(big, big), tg_init_zeros()) < 0, "a [2^40, 2^40] param was accepted");
    CHECK_ERR(tg_model_status(m), TG_ERR_LIMIT, "tg_model_param: 'huge' takes the model past TG_MAX_NUMEL");
    tg_model_free(m);
    m = tg_model_new();
    CHECK(tg_model_param(m, "deep", ((tg_shape){7, {1, 1, 1, 1, 1, 1}}), tg_init_zeros()) < 0, "a 7-dim param");
    CHECK_ERR(tg_model_status(m), TG_ERR_SHAPE, "bad number of dims");
    tg_model_free(m);
    m = tg_model_new();
    CHECK(tg_model_param(m, "inf", TG_SHAPE(3), tg_init_randn(INFINITY)) < 0, "an init scale of inf was accepted");
    CHECK_ERR(tg_model_status(m), TG_ERR_ARG, "tg_model_param: 'inf' has a non-finite init scale");
    tg_init nan_gain = tg_init_kaiming();
    nan_gain.scale = NAN;
    CHECK(tg_model_param(m, "nan", TG_SHAPE(3, 3), nan_gain) < 0, "an init gain of NaN was accepted");
    tg_model_free(m);
    CHECK(tg_shape_numel(TG_SHAPE(INT64_MAX, 2)) == -1, "numel overflow not reported");
    CHECK(tg_shape_numel(TG_SHAPE(3, -1)) == -1, "numel of a negative dim");
    CHECK(tg_shape_numel(((tg_shape){9, {1}})) == -1, "numel of 9 dims");
    /* A shape of too many dims is printed without reading past its 6 dims. */
    char sb[32];
    CHECK(strcmp(tg_shape_str(((tg_shape){9, {1, 2, 3, 4, 5, 6}}), sb, sizeof sb), "[9 dims]") == 0, "%s", sb);
    CHECK(strcmp(tg_shape_str(((tg_shape){-3, {0}}), sb, sizeof sb), "[-3 dims]") == 0, "%s", sb);
    CHECK(strcmp(tg_shape_str(TG_SHAPE(256, 64), sb, 5), "[256") == 0, "cut: %s", sb);
    float v[4] = {0};
    CHECK_ERR(tg_safetensors_write("/nonexistent-dir/deep.safetensors", &(tg_st_tensor){"t", TG_F32, {9, {1}}, v}, 1,
                                   NULL, 0),
              TG_ERR_SHAPE, "tensor 't': bad shape [9 dims]");
    /* The same for a tensor given to a session. */
    m = tg_model_new();
    ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    tg_train_spec spec = spec_for(m, mlp_loss, &c, in);
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    CHECK_ERR(tg_session_set_tensor(s, &(tg_st_tensor){"l.W", TG_F32, {9, {2, 2}}, v}), TG_ERR_SHAPE,
              "param 'l.W' is [2,2], the tensor is [9 dims]");
    tg_session_free(s);
    tg_model_free(m);
}

/* Schedules and optimizers filled in by hand. */
static void optim_errors(void) {
    tg_lr many = tg_lr_constant(1e-3f);
    many.kind = TG_LR_MULTISTEP;
    many.n_milestones = 12;
    tg_lr neg = tg_lr_linear(1e-3f, 0, INT64_MIN);
    tg_lr nan_peak = tg_lr_cosine(NAN, 0, 10);
    tg_lr kind = tg_lr_constant(1e-3f);
    kind.kind = (tg_lr_kind)99;
    tg_lr inner = tg_lr_warmup(1e-3f, 5, &nan_peak);
    tg_lr loop_a = tg_lr_warmup(1e-3f, 5, NULL), loop_b = tg_lr_warmup(1e-3f, 5, &loop_a);
    loop_a.then = &loop_b; /* a -> b -> a -> ... */
    tg_lr late = tg_lr_constant(1e-3f);
    late.start_step = -1;
    struct {
        tg_optim o;
        const char *want;
    } cases[] = {
        {tg_adam(many), "tg_session_new: schedule 0 has 12 milestones and no milestone array"},
        {tg_adam(neg), "tg_session_new: schedule 0 has negative steps, every or start_step"},
        {tg_adam(late), "tg_session_new: schedule 0 has negative steps, every or start_step (0, 0, -1)"},
        {tg_adam(loop_b), "tg_session_new: the warmup chain loops back on itself"},
        {tg_sgd(nan_peak, 0.9f, false, 0), "tg_session_new: schedule 0 has a non-finite peak"},
        {tg_adamw(inner, 0.01f), "tg_session_new: schedule 1 has a non-finite peak"},
        {tg_adam(kind), "tg_session_new: unknown schedule kind 99"},
        {tg_adam(tg_lr_constant(1e-3f)), "tg_session_new: Adam needs 0 <= beta1, beta2 < 1"},
        {tg_sgd(tg_lr_constant(1e-3f), INFINITY, false, 0), "tg_session_new: optimizer momentum is inf"},
        {{.kind = (tg_opt_kind)7}, "tg_session_new: optimizer: unknown kind 7"},
    };
    cases[7].o.beta2 = 1.5f;
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 2)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        tg_model *m = tg_model_new();
        ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
        tg_train_spec spec = spec_for(m, mlp_loss, &c, in);
        spec.optim = cases[k].o;
        tg_session *s = NULL;
        CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, cases[k].want);
        tg_session_free(s);
        tg_model_free(m);
    }
    /* set_lr checks the same way and keeps the old schedule. */
    tg_model *m = tg_model_new();
    ctx c = {.l = tg_linear_new(m, "l", 2, 2, true)};
    tg_train_spec spec = spec_for(m, mlp_loss, &c, in);
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    CHECK_ERR(tg_session_set_lr(s, many), TG_ERR_ARG, "tg_session_set_lr: schedule 0 has 12 milestones");
    CHECK_ERR(tg_session_set_lr(s, loop_a), TG_ERR_ARG, "tg_session_set_lr: the warmup chain loops back on itself");
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0}, loss;
    tg_feed feeds[] = {TG_FEED("x", x, 8), TG_FEED("y", y, 8)};
    CHECK_OK(tg_session_step(s, feeds, 2, &loss));
    CHECK(isfinite(loss), "loss %g after a refused set_lr", loss);
    tg_session_free(s);
    tg_model_free(m);
    /* A schedule of finite settings whose rate overflows float at step 3:
     * that step fails and leaves the params as they were. */
    m = tg_model_new();
    c = (ctx){.l = tg_linear_new(m, "l", 2, 2, true)};
    spec = spec_for(m, mlp_loss, &c, in);
    spec.optim = tg_sgd(tg_lr_staircase(1e-3f, 1e30f, 1), 0, false, 0);
    CHECK_OK(tg_session_new(&spec, &s));
    float w[4], w2[4];
    for (int k = 0; s && k < 2; k++) CHECK_OK(tg_session_step(s, feeds, 2, &loss));
    CHECK_OK(tg_session_get_param(s, "l.W", w, 4));
    CHECK_ERR(tg_session_step(s, feeds, 2, &loss), TG_ERR_NUMERIC,
              "at step 3 the schedule's learning rate is inf and the optimizer's factors");
    CHECK_OK(tg_session_get_param(s, "l.W", w2, 4));
    CHECK(memcmp(w, w2, sizeof w) == 0 && isfinite(w2[0]), "a step at an infinite rate changed the params (%g)", w2[0]);
    CHECK(tg_session_step_count(s) == 2, "a refused step counted");
    tg_session_free(s);
    tg_model_free(m);
    /* tg_lr_at itself never reads a missing milestone array nor loops forever. */
    CHECK(isfinite(tg_lr_at(&many, 5)), "tg_lr_at of 12 milestones and no array");
    CHECK(isnan(tg_lr_at(&loop_a, 50)), "tg_lr_at of a chain that loops: %g", tg_lr_at(&loop_a, 50));
    /* Nor overflows for a step far below 1: steps before the first are the first. */
    tg_lr stairs = tg_lr_staircase(1.0f, 0.5f, 3), start = tg_lr_constant(2.0f);
    start.start_step = 5;
    CHECK(tg_lr_at(&stairs, INT64_MIN) == 1.0f, "staircase at INT64_MIN: %g", tg_lr_at(&stairs, INT64_MIN));
    CHECK(tg_lr_at(&start, INT64_MIN) == 2.0f, "start_step at INT64_MIN: %g", tg_lr_at(&start, INT64_MIN));
    CHECK(tg_lr_at(&stairs, 7) == 0.25f, "staircase at 7: %g", tg_lr_at(&stairs, 7));
}

int main(void) {
    trace_errors();
    stale_handle();
    late_param();
    param_in_trace();
    broken_forward();
    failed_run();
    split_args();
    comm_error_bounded();
    progress_eta();
    long_names();
    model_errors();
    optim_errors();
    return check_summary("test_robust");
}
