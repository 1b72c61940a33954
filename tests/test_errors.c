/* Bad input gets a clear error, never a crash: shape errors name the op, the
 * shapes and the caller's file:line; uploads and feeds are strict. */
/* setenv, unsetenv */
#define _POSIX_C_SOURCE 200112L
#include <limits.h>

#include "check.h"

static int bad_line;
static int which;
static tg_param W, B1;

static tg_tensor bad_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x");
    tg_tensor y;
    switch (which) {
    case 0: /* [256,64] x [32,1] */
        bad_line = __LINE__ + 1;
        y = tg_matmul(x, tg_use(g, W));
        break;
    case 1:
        bad_line = __LINE__ + 1;
        y = tg_add(x, tg_full(g, TG_SHAPE(3), 1.0f));
        break;
    case 2:
        bad_line = __LINE__ + 1;
        y = tg_reshape(x, TG_SHAPE(-1, 7));
        break;
    case 3:
        bad_line = __LINE__ + 1;
        y = tg_permute(x, TG_SHAPE(0, 0));
        break;
    case 4:
        bad_line = __LINE__ + 1;
        y = tg_sum(x, 5, false);
        break;
    case 5:
        bad_line = __LINE__ + 1;
        y = tg_input(g, "nope");
        break;
    case 6:
        bad_line = __LINE__ + 1;
        y = tg_add(x, tg_cast(x, TG_I32));
        break;
    case 7: /* not a scalar loss */
        bad_line = __LINE__ + 1;
        return tg_mul_s(x, 2.0f);
    case 8: /* one value, but i32 */
        bad_line = __LINE__ + 1;
        return tg_cast(tg_sum(x, TG_ALL, false), TG_I32);
    default:
        y = x;
    }
    /* Ops after the failure keep going quietly and the first error wins. */
    return tg_sum(tg_relu(tg_add_s(y, 1.0f)), TG_ALL, false);
}

static void shape_errors(void) {
    static const struct {
        tg_status st;
        const char *want;
    } cases[] = {
        {TG_ERR_SHAPE, "tg_matmul: inner dims differ, [256,64] x [32,1] (test_errors.c:%d)"},
        {TG_ERR_SHAPE, "tg_add: cannot broadcast [256,64] and [3] (test_errors.c:%d)"},
        {TG_ERR_SHAPE, "tg_reshape: cannot reshape [256,64] to [-1,7] (test_errors.c:%d)"},
        {TG_ERR_SHAPE, "tg_permute: not a permutation of the 2 axes of [256,64] (test_errors.c:%d)"},
        {TG_ERR_SHAPE, "tg_sum: axis 5 out of range for [256,64] (test_errors.c:%d)"},
        {TG_ERR_NAME, "tg_input: no input named 'nope' (declared: 'x') (test_errors.c:%d)"},
        {TG_ERR_SHAPE, "tg_add: operands must both be f32 or both i32, got f32 [256,64] and i32 [256,64] (test_errors.c:%d)"},
        {TG_ERR_SHAPE, "the loss must be a single f32 value, got f32 [256,64] from tg_mul_s (test_errors.c:%d); reduce it "
                       "to one value, e.g. tg_mean(loss, TG_ALL, false) or tg_sum(loss, TG_ALL, false)"},
        {TG_ERR_SHAPE, "the loss must be a single f32 value, got i32 [] from tg_cast (test_errors.c:%d); make it f32 "
                       "with tg_cast(loss, TG_F32)"},
    };
    for (which = 0; which < (int)(sizeof cases / sizeof cases[0]); which++) {
        tg_model *m = tg_model_new();
        W = tg_model_param(m, "W", TG_SHAPE(32, 1), tg_init_randn(0.02f));
        tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(256, 64)}};
        tg_train_spec spec = {.model = m, .loss = bad_loss, .inputs = in, .n_inputs = 1,
                              .optim = tg_adam(tg_lr_constant(1e-3f))};
        tg_session *s = (tg_session *)&spec; /* must be set to NULL on failure */
        tg_status st = tg_session_new(&spec, &s);
        char want[256]; /* the line is known once the trace has run */
        snprintf(want, sizeof want, cases[which].want, bad_line);
        CHECK_ERR(st, cases[which].st, want);
        CHECK(s == NULL, "case %d: session not NULL after failure", which);
        tg_model_free(m);
    }
}

static tg_tensor hint_loss(tg_graph *g, void *u) { /* x [8,4] -> l1 -> mean */
    return tg_mean(tg_linear_fwd(g, (tg_linear *)u, tg_input(g, "x")), TG_ALL, false);
}

static tg_tensor good_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x"), t = tg_input(g, "t");
    tg_tensor y = tg_add(tg_matmul(x, tg_use(g, W)), tg_use(g, B1));
    return tg_mse(y, t);
}

static void strict_io(void) {
    tg_model *m = tg_model_new();
    W = tg_model_param(m, "W", TG_SHAPE(4, 2), tg_init_randn(0.5f));
    B1 = tg_model_param(m, "b", TG_SHAPE(2), tg_init_zeros());
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"t", TG_F32, TG_SHAPE(8, 2)}};
    tg_train_spec spec = {.model = m, .loss = good_loss, .inputs = in, .n_inputs = 2,
                          .optim = tg_sgd(tg_lr_constant(0.1f), 0, false, 0)};
    tg_session *s;
    CHECK_OK(tg_session_new(&spec, &s));
    if (!s) return;
    float x[32] = {0}, t[16] = {0}, w[8], b[2] = {1, 2}, w0[8], loss;

    /* feeds */
    CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 32), TG_FEED("t", t, 16)}, 2, &loss));
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 31), TG_FEED("t", t, 16)}, 2, &loss), TG_ERR_SIZE,
              "input 'x' needs 32 elements ([8,4]), got 31");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 32), TG_FEED("y", t, 16)}, 2, &loss), TG_ERR_NAME, "unknown input 'y'");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 32)}, 1, &loss), TG_ERR_NAME, "input 't' was not fed");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 32), TG_FEED("x", x, 32)}, 2, &loss), TG_ERR_NAME, "fed twice");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){{"x", NULL, 32, TG_F32}, TG_FEED("t", t, 16)}, 2, &loss), TG_ERR_ARG, "has no data");
    CHECK_ERR(tg_session_step(s, (tg_feed[]){TG_FEED(NULL, x, 32)}, 1, &loss), TG_ERR_NAME, "no name");
    CHECK_ERR(tg_session_step(NULL, NULL, 0, &loss), TG_ERR_ARG, "NULL");
    CHECK(tg_session_step_count(s) == 1, "failed steps must not count: %lld", (long long)tg_session_step_count(s));

    /* params */
    CHECK_OK(tg_session_get_param(s, "W", w0, 8));
    CHECK_ERR(tg_session_get_param(s, "W", w, 7), TG_ERR_SIZE, "param 'W' has 8 elements ([4,2]), got 7");
    CHECK_ERR(tg_session_set_param(s, "V", w, 8), TG_ERR_NAME, "no param named 'V'");
    for (int i = 0; i < 8; i++) w[i] = (float)i;
    CHECK_ERR(tg_session_upload(s, (tg_feed[]){TG_FEED("W", w, 8)}, 1), TG_ERR_NAME, "param 'b' is missing");
    CHECK_ERR(tg_session_upload(s, (tg_feed[]){TG_FEED("W", w, 8), TG_FEED("b", b, 2), TG_FEED("c", b, 2)}, 3), TG_ERR_NAME,
              "no param named 'c'");
    CHECK_ERR(tg_session_upload(s, (tg_feed[]){TG_FEED("W", w, 8), TG_FEED("W", w, 8)}, 2), TG_ERR_NAME, "given twice");
    CHECK_ERR(tg_session_upload(s, (tg_feed[]){TG_FEED("W", w, 8), TG_FEED("b", b, 3)}, 2), TG_ERR_SIZE, "has 2 elements, got 3");
    float w1[8];
    CHECK_OK(tg_session_get_param(s, "W", w1, 8));
    CHECK(memcmp(w0, w1, sizeof w0) == 0, "a failed upload changed a param");
    CHECK_OK(tg_session_upload(s, (tg_feed[]){TG_FEED("b", b, 2), TG_FEED("W", w, 8)}, 2));
    CHECK_OK(tg_session_get_param(s, "W", w1, 8));
    CHECK(memcmp(w, w1, sizeof w) == 0, "upload did not write W");
    CHECK_ERR(tg_session_read(s, "nothing", w, 1), TG_ERR_NAME, "no capture named 'nothing'");
    tg_session_free(s);
    tg_model_free(m);
}

/* An unknown param name gets the nearest names: PyTorch's suffixes for
 * upstream's, a typo, a sibling; nothing when none is near. */
static void name_hints(void) {
    tg_model *m = tg_model_new();
    tg_linear l1 = tg_linear_new(m, "l1", 4, 2, true), l2 = tg_linear_new(m, "l2", 2, 2, true);
    tg_layernorm ln = tg_layernorm_new(m, "ln", 2);
    (void)l1, (void)l2, (void)ln;
    tg_session *s = NULL;
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 4)}};
    tg_train_spec ts = {.model = m, .loss = hint_loss, .user = &l1, .inputs = in, .n_inputs = 1,
                        .optim = tg_adam(tg_lr_constant(1e-3f))};
    CHECK_OK(tg_session_new(&ts, &s));
    if (!s) {
        tg_model_free(m);
        return;
    }
    float w[8] = {0};
    CHECK_ERR(tg_session_set_param(s, "l1.weight", w, 8), TG_ERR_NAME, "no param named 'l1.weight'; did you mean 'l1.W'?");
    CHECK_ERR(tg_session_get_param(s, "ln.weight", w, 2), TG_ERR_NAME, "no param named 'ln.weight'; did you mean 'ln.g'?");
    CHECK_ERR(tg_session_get_param(s, "l2.bais", w, 2), TG_ERR_NAME, "no param named 'l2.bais'; did you mean 'l2.b'?");
    CHECK_ERR(tg_session_get_param(s, "l3.W", w, 2), TG_ERR_NAME, "no param named 'l3.W'; did you mean 'l1.W' or 'l2.W'?");
    CHECK_ERR(tg_session_upload(s, (tg_feed[]){{"l2.bias", w, 2, TG_F32}}, 1), TG_ERR_NAME,
              "no param named 'l2.bias'; did you mean 'l2.b'?");
    tg_st_tensor t = {"encoder.layers.0.attn", TG_F32, TG_SHAPE(2), w};
    CHECK_ERR(tg_session_set_tensor(s, &t), TG_ERR_NAME, "no param named 'encoder.layers.0.attn'");
    CHECK(!strstr(tg_last_error(), "did you mean"), "no hint when nothing is near: %s", tg_last_error());
    tg_session_free(s);
    tg_model_free(m);
}

/* A model of many params: each found by its name, a duplicate refused
 * after the name table has grown, the element count summed, the limit on
 * the total kept (the table and the sum are kept as params are declared). */
static void many_params(void) {
    tg_model *m = tg_model_new();
    char name[32];
    enum { N = 5000 };
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "layers.%d.W", i);
        CHECK(tg_model_param(m, name, TG_SHAPE(i % 7 + 1, 3), tg_init_zeros()) == i, "param %d not declared", i);
    }
    int64_t numel = 0;
    for (int i = 0; i < N; i++) numel += (i % 7 + 1) * 3;
    CHECK(tg_model_numel(m) == numel, "numel %lld, expected %lld", (long long)tg_model_numel(m), (long long)numel);
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "layers.%d.W", i);
        wrong += tg_model_find(m, name) != i;
    }
    CHECK(wrong == 0, "%d of %d params not found by name", wrong, N);
    CHECK(tg_model_find(m, "layers.5000.W") == -1 && tg_model_find(m, "layers.1.w") == -1, "an absent name was found");
    CHECK(tg_model_param(m, "layers.4321.W", TG_SHAPE(1), tg_init_zeros()) == -1, "a duplicate accepted after growth");
    CHECK(strstr(tg_last_error(), "duplicate name 'layers.4321.W'") != NULL, "error: %s", tg_last_error());
    tg_model_free(m);
    m = tg_model_new();
    CHECK(tg_model_find(m, "W") == -1 && tg_model_numel(m) == 0, "an empty model finds a name or counts elements");
    CHECK(tg_model_param(m, "W", TG_SHAPE(TG_MAX_NUMEL - 5), tg_init_zeros()) == 0, "a param of TG_MAX_NUMEL - 5 refused");
    CHECK(tg_model_param(m, "b", TG_SHAPE(5), tg_init_zeros()) == 1, "a param up to TG_MAX_NUMEL in total refused");
    CHECK(tg_model_param(m, "c", TG_SHAPE(1), tg_init_zeros()) == -1, "a param past TG_MAX_NUMEL in total accepted");
    CHECK(strstr(tg_last_error(), "'c' takes the model past TG_MAX_NUMEL") != NULL, "error: %s", tg_last_error());
    tg_model_free(m);
}

static void bad_specs(void) {
    tg_session *s;
    CHECK_ERR(tg_session_new(NULL, &s), TG_ERR_ARG, "required");
    CHECK_ERR(tg_session_new(&(tg_train_spec){0}, NULL), TG_ERR_ARG, "out is NULL");
    tg_model *m = tg_model_new();
    W = tg_model_param(m, "W", TG_SHAPE(4, 2), tg_init_zeros());
    CHECK(tg_model_param(m, "W", TG_SHAPE(3), tg_init_zeros()) == -1, "duplicate param accepted");
    CHECK(tg_model_param(m, "Z", TG_SHAPE(3, 0), tg_init_zeros()) == -1, "zero-sized param accepted");
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"t", TG_F32, TG_SHAPE(8, 2)}};
    tg_train_spec spec = {.model = m, .loss = good_loss, .inputs = in, .n_inputs = 2};
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_NAME, "duplicate name 'W'");
    tg_model_free(m);

    m = tg_model_new();
    W = tg_model_param(m, "W", TG_SHAPE(4, 2), tg_init_zeros());
    B1 = tg_model_param(m, "b", TG_SHAPE(2), tg_init_zeros());
    spec.model = m;
    spec.backend = (tg_backend)42;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "unknown backend");
    spec.backend = TG_BACKEND_CPU;
    tg_input_decl dup[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"x", TG_F32, TG_SHAPE(8, 2)}};
    spec.inputs = dup;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_NAME, "input 'x' declared twice");
    /* A declaration's mistakes are named as such, not as a shape error at
     * no call site. */
    tg_input_decl bad_dt[] = {{"x", (tg_dtype)7, TG_SHAPE(8, 4)}, {"t", TG_F32, TG_SHAPE(8, 2)}};
    spec.inputs = bad_dt;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "tg_session_new: input 0 ('x') has dtype 7 (not TG_F32, TG_I32 or TG_BOOL)");
    tg_forward *bf = NULL;
    CHECK_ERR(tg_forward_new(&(tg_forward_spec){.fn = good_loss, .inputs = bad_dt, .n_inputs = 2, .model = m}, &bf),
              TG_ERR_ARG, "tg_forward_new: input 0 ('x') has dtype 7");
    tg_forward_free(bf);
    tg_input_decl batch[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"t", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    spec.inputs = batch;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG,
              "tg_session_new: input 1 ('t') uses TG_BATCH, which only forward sessions take");
    spec.inputs = in;
    spec.optim.kind = (tg_opt_kind)9;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "unknown kind");
    spec.optim.kind = TG_OPT_NONE;
    /* A thread count no machine has is refused before any thread starts. */
    spec.threads = INT_MAX;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "cpu: 2147483647 threads asked for");
    tg_forward_spec fs = {.fn = good_loss, .inputs = in, .n_inputs = 2, .model = m, .threads = 2000};
    tg_forward *f = NULL;
    CHECK_ERR(tg_forward_new(&fs, &f), TG_ERR_ARG, "at most 1024");
    CHECK(f == NULL, "a forward session after failure");
    tg_forward_free(f);
    /* TG_THREADS is a whole number from 1 to 1024 or an error: not atoi's
     * 1 for 2^32 + 1, nor all cores for a typo. */
    spec.threads = 0;
    static const char *bad_env[] = {"4294967297", "99999999999999999999", "abc", "8x", "0", "-2", "1025"};
    for (int k = 0; k < (int)(sizeof bad_env / sizeof *bad_env); k++) {
        char want[80];
        snprintf(want, sizeof want, "cpu: TG_THREADS=%s is not a whole number from 1 to 1024", bad_env[k]);
        setenv("TG_THREADS", bad_env[k], 1);
        CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, want);
    }
    setenv("TG_THREADS", "", 1); /* empty: unset */
    CHECK_OK(tg_session_new(&spec, &s));
    tg_session_free(s);
    setenv("TG_THREADS", "2", 1);
    CHECK_OK(tg_session_new(&spec, &s));
    tg_session_free(s);
    unsetenv("TG_THREADS");
    tg_model_free(m);
}

/* TG_CPU names a path: unknown names and paths above the CPU's are errors
 * that say what the CPU has; the process keeps its path. */
static void cpu_path_errors(void) {
    tg_model *m = tg_model_new();
    W = tg_model_param(m, "W", TG_SHAPE(4, 2), tg_init_zeros());
    B1 = tg_model_param(m, "b", TG_SHAPE(2), tg_init_zeros());
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"t", TG_F32, TG_SHAPE(8, 2)}};
    tg_train_spec spec = {.model = m, .loss = good_loss, .inputs = in, .n_inputs = 2};
    const char *old = getenv("TG_CPU");
    char keep[32];
    snprintf(keep, sizeof keep, "%s", old ? old : "");
    tg_cpu_path_info ci;
    CHECK_OK(tg_cpu_info(&ci));
    tg_session *s = NULL;
    setenv("TG_CPU", "bogus", 1);
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "TG_CPU=bogus: unknown CPU path");
    CHECK_ERR(tg_cpu_info(&ci), TG_ERR_ARG, "unknown CPU path");
    /* A path this CPU lacks: above its best, or of the other family. */
    const char *lacks = !strcmp(ci.best, "avx2") ? "avx512" : !strcmp(ci.best, "avx512") ? "neon" : "avx2";
    setenv("TG_CPU", lacks, 1);
    char want[80];
    snprintf(want, sizeof want, "this CPU's best path is %s", ci.best);
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, want);
    setenv("TG_CPU", "generic", 1);
    CHECK_OK(tg_session_new(&spec, &s));
    tg_session_free(s);
    if (old) setenv("TG_CPU", keep, 1);
    else unsetenv("TG_CPU");
    CHECK_OK(tg_cpu_info(&ci));
    CHECK(strstr(ci.kernels, "gemm ") != NULL, "kernels: %s", ci.kernels);
    tg_model_free(m);
}

int main(void) {
    shape_errors();
    strict_io();
    name_hints();
    bad_specs();
    many_params();
    cpu_path_errors();
    return check_summary("test_errors");
}
