/* Ops against PyTorch: cumsum, logsumexp, topk, pad (constant, reflect,
 * replicate, on any axis), avg_pool2d, batch_norm (training, with its
 * running statistics, and evaluation), group_norm and conv_transpose2d,
 * forward and backward, against the values tests/fixtures/make_ops_fixture.py
 * wrote with PyTorch 1.13 (the file is committed; CI has no torch).
 *
 * Every case runs in one session per backend: its operands are params
 * "<case>.x<i>", the loss adds sum(out * R) over the cases (R from the
 * fixture), so each param's gradient is its own case's. Each output and
 * gradient must match to 1e-4 of its largest magnitude; topk's indices
 * exactly. The WebGPU half runs once, not again under each TG_CPU path. */
#include <math.h>

#include "check.h"

#define S TG_SHAPE
#define MAX_X 5

typedef struct {
    const char *name;
    int n;            /* operands */
    unsigned frozen;  /* bit i: operand i has no gradient (batch_norm's running statistics) */
    tg_tensor (*fn)(tg_graph *g, const tg_tensor *x, tg_tensor *idx);
} torch_case;

#define FN(name) static tg_tensor name(tg_graph *g, const tg_tensor *x, tg_tensor *idx)

FN(f_cumsum) { (void)g, (void)idx; return tg_cumsum(x[0], 1); }
FN(f_logsumexp) { (void)g, (void)idx; return tg_logsumexp(tg_mul_s(x[0], 3.0f), -1, false); }
FN(f_logsumexp_keep) { (void)g, (void)idx; return tg_logsumexp(x[0], 0, true); }
FN(f_topk_largest) { (void)g; return tg_topk(x[0], 3, -1, true, idx); }
FN(f_topk_smallest) { (void)g; return tg_topk(x[0], 2, 0, false, idx); }
/* F.pad's (left, right, top, bottom) of the fixture as before / after per axis */
FN(f_pad_constant) { (void)g, (void)idx; return tg_pad(x[0], S(0, 0, 0, 1), S(0, 0, 1, 2), TG_PAD_CONSTANT, 0.7f); }
FN(f_pad_reflect) { (void)g, (void)idx; return tg_pad(x[0], S(0, 0, 1, 2), S(0, 0, 3, 1), TG_PAD_REFLECT, 0); }
FN(f_pad_replicate) { (void)g, (void)idx; return tg_pad(x[0], S(0, 0, 3, 1), S(0, 0, 0, 2), TG_PAD_REPLICATE, 0); }
FN(f_pad_reflect_axis1) { (void)g, (void)idx; return tg_pad(x[0], S(0, 2, 0), S(0, 3, 0), TG_PAD_REFLECT, 0); }
FN(f_pad_constant_axis0) { (void)g, (void)idx; return tg_pad(x[0], S(3, 0), S(1, 0), TG_PAD_CONSTANT, -2.0f); }
FN(f_avg_pool_k2) { (void)g, (void)idx; return tg_avg_pool2d(x[0], 2, 0, 0); }
FN(f_avg_pool_k3) { (void)g, (void)idx; return tg_avg_pool2d(x[0], 3, 2, 1); }
FN(f_group_norm) { (void)g, (void)idx; return tg_group_norm(x[0], 3, x[1], x[2], 1e-5f); }
FN(f_batch_norm_train) { (void)g, (void)idx; return tg_batch_norm(x[0], x[1], x[2], x[3], x[4], true, 0.1f, 1e-5f); }
FN(f_batch_norm_eval) { (void)g, (void)idx; return tg_batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1f, 1e-5f); }
FN(f_convt_s2) { (void)g, (void)idx; return tg_conv_transpose2d(x[0], x[1], 2, 1, 1, 1); }
FN(f_convt_groups2) { (void)g, (void)idx; return tg_conv_transpose2d(x[0], x[1], 2, 0, 1, 2); }

static const torch_case cases[] = {
    {"cumsum", 1, 0, f_cumsum},
    {"logsumexp", 1, 0, f_logsumexp},
    {"logsumexp_keep", 1, 0, f_logsumexp_keep},
    {"topk_largest", 1, 0, f_topk_largest},
    {"topk_smallest_axis0", 1, 0, f_topk_smallest},
    {"pad_constant", 1, 0, f_pad_constant},
    {"pad_reflect", 1, 0, f_pad_reflect},
    {"pad_replicate", 1, 0, f_pad_replicate},
    {"pad_reflect_axis1", 1, 0, f_pad_reflect_axis1},
    {"pad_constant_axis0", 1, 0, f_pad_constant_axis0},
    {"avg_pool2d_k2", 1, 0, f_avg_pool_k2},
    {"avg_pool2d_k3_s2_p1", 1, 0, f_avg_pool_k3},
    {"group_norm", 3, 0, f_group_norm},
    {"batch_norm_train", 5, 3u << 3, f_batch_norm_train},
    {"batch_norm_eval", 5, 3u << 3, f_batch_norm_eval},
    {"conv_transpose2d_s2_p1_op1", 2, 0, f_convt_s2},
    {"conv_transpose2d_groups2_s2", 2, 0, f_convt_groups2},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static const char *fixture_path(void) {
    static char buf[256];
    const char *slash = strrchr(__FILE__, '/');
    int n = slash ? (int)(slash - __FILE__) : 0;
    snprintf(buf, sizeof buf, "%.*s%sfixtures/ops_torch.safetensors", n, __FILE__, slash ? "/" : "");
    return buf;
}

static const tg_safetensors *fx;

static const tg_st_tensor *ref(const char *c, const char *what) {
    char name[96];
    snprintf(name, sizeof name, "%s.%s", c, what);
    return tg_safetensors_find(fx, name);
}

typedef struct {
    tg_model *m;
    tg_param p[N_CASES][MAX_X];
} torch_model;

static tg_tensor loss_fn(tg_graph *g, void *u) {
    torch_model *tm = u;
    tg_tensor loss = tg_scalar(g, 0.0f);
    for (int c = 0; c < N_CASES; c++) {
        tg_tensor x[MAX_X], idx = {NULL, -1};
        for (int i = 0; i < cases[c].n; i++) x[i] = tg_use(g, tm->p[c][i]);
        tg_tensor y = cases[c].fn(g, x, &idx);
        char name[96];
        snprintf(name, sizeof name, "%s.out", cases[c].name);
        tg_capture(y, name);
        if (tg_tensor_ok(idx)) {
            snprintf(name, sizeof name, "%s.idx", cases[c].name);
            tg_capture(idx, name);
        }
        const tg_st_tensor *R = ref(cases[c].name, "R");
        tg_tensor w = tg_constant(g, R->shape, R->data);
        loss = tg_add(loss, tg_sum(tg_mul(y, w), TG_ALL, false));
    }
    return loss;
}

/* max |a - want| over max |want|; i32: the count of differing entries */
static double rel_err(const float *a, const float *want, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) err = fmax(err, fabs((double)a[i] - want[i])), scale = fmax(scale, fabs(want[i]));
    return err / (scale > 0 ? scale : 1);
}

static double worst[2];

/* got[0..n) against fixture tensor t; false (reported) past 1e-4 */
static bool matches(const char *be, const char *c, const char *what, const float *got, const tg_st_tensor *t,
                    double *w) {
    int64_t n = tg_shape_numel(t->shape);
    double e = rel_err(got, t->data, n);
    *w = fmax(*w, e);
    CHECK(e < 1e-4, "%s: %s: %s differs from PyTorch by %.3g relative", be, c, what, e);
    return e < 1e-4;
}

static void run(tg_backend be) {
    const char *bn = be == TG_BACKEND_CPU ? "cpu" : "webgpu";
    torch_model tm = {tg_model_new(), {{0}}};
    for (int c = 0; c < N_CASES; c++)
        for (int i = 0; i < cases[c].n; i++) {
            char what[16], name[96];
            snprintf(what, sizeof what, "x%d", i);
            const tg_st_tensor *t = ref(cases[c].name, what);
            CHECK(t != NULL, "fixture has no %s.%s", cases[c].name, what);
            if (!t) return;
            snprintf(name, sizeof name, "%s.%s", cases[c].name, what);
            tm.p[c][i] = tg_model_param(tm.m, name, t->shape, tg_init_values(t->data));
            if (cases[c].frozen >> i & 1) tg_model_freeze(tm.m, tm.p[c][i]);
        }
    tg_train_spec spec = {.model = tm.m, .loss = loss_fn, .user = &tm, .optim = {.kind = TG_OPT_NONE}, .backend = be};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    if (be == TG_BACKEND_WEBGPU && st == TG_ERR_BACKEND) {
        check_webgpu_missing("test_torch_ops");
        tg_model_free(tm.m);
        return;
    }
    CHECK(st == TG_OK, "%s: session: %s", bn, tg_last_error());
    if (st == TG_OK) CHECK_OK(tg_session_step(s, NULL, 0, NULL));
    for (int c = 0; c < N_CASES && st == TG_OK; c++) {
        const char *cn = cases[c].name;
        const tg_st_tensor *want = ref(cn, "out"), *wi = ref(cn, "idx");
        int64_t n = tg_shape_numel(want->shape);
        float *got = calloc((size_t)n + 1, sizeof(float));
        char name[96];
        snprintf(name, sizeof name, "%s.out", cn);
        CHECK_OK(tg_session_read(s, name, got, n));
        matches(bn, cn, "the output", got, want, &worst[be]);
        if (wi) {
            int32_t *gi = calloc((size_t)n + 1, sizeof(int32_t));
            snprintf(name, sizeof name, "%s.idx", cn);
            CHECK_OK(tg_session_read(s, name, gi, n));
            int64_t bad = 0;
            for (int64_t k = 0; k < n; k++) bad += gi[k] != ((const int32_t *)wi->data)[k];
            CHECK(bad == 0, "%s: %s: %lld indices differ from PyTorch's", bn, cn, (long long)bad);
            free(gi);
        }
        free(got);
        for (int i = 0; i < cases[c].n; i++) {
            char what[16];
            snprintf(what, sizeof what, "g%d", i);
            const tg_st_tensor *gw = ref(cn, what);
            if (!gw) continue;
            snprintf(name, sizeof name, "%s.x%d", cn, i);
            int64_t k = tg_shape_numel(gw->shape);
            float *gv = calloc((size_t)k + 1, sizeof(float));
            CHECK_OK(tg_session_get_grad(s, name, gv, k));
            snprintf(what, sizeof what, "d/dx%d", i);
            matches(bn, cn, what, gv, gw, &worst[be]);
            free(gv);
        }
        /* batch_norm in training: the running statistics after the step */
        const char *stat[2] = {"rm", "rv"};
        for (int r = 0; r < 2; r++) {
            const tg_st_tensor *sw = ref(cn, stat[r]);
            if (!sw) continue;
            int64_t k = tg_shape_numel(sw->shape);
            float v[64];
            snprintf(name, sizeof name, "%s.x%d", cn, 3 + r);
            CHECK(k <= 64, "%s: statistics too long", cn);
            if (k > 64) continue;
            CHECK_OK(tg_session_get_param(s, name, v, k));
            matches(bn, cn, stat[r], v, sw, &worst[be]);
        }
    }
    /* The comparison must be able to fail: one output entry off by 1%. */
    if (st == TG_OK && be == TG_BACKEND_CPU) {
        const tg_st_tensor *want = ref("group_norm", "out");
        int64_t n = tg_shape_numel(want->shape);
        float *got = calloc((size_t)n + 1, sizeof(float));
        CHECK_OK(tg_session_read(s, "group_norm.out", got, n));
        got[n / 2] += 0.01f * fabsf(got[n / 2]) + 0.01f;
        CHECK(rel_err(got, want->data, n) > 1e-4, "the comparison did not catch an output entry off by 1%%");
        free(got);
    }
    tg_session_free(s);
    tg_model_free(tm.m);
}

/* Bad arguments are graph errors naming the op, the shapes and this file's line. */
static void errors(void) {
    static const char *want[] = {
        "tg_topk: k = 5 is outside [1, 4]",
        "tg_pad: reflect padding 4 before, 0 after along axis 1 of [3,4]: each must be smaller",
        "tg_pad: before [1] and after [1] must each give one padding per axis of [3,4]",
        "tg_conv_transpose2d: stride 2, padding 0, output_padding 2, groups 1 (need",
        "tg_batch_norm: the value to update must be an f32 param",
        "tg_batch_norm: training needs more than one value per channel, got [1,2]",
        "tg_group_norm: groups 4 must divide the channels of [2,6,3]",
        "tg_avg_pool2d: kernel 2, stride 2, padding 2 do not fit",
    };
    for (int k = 0; k < (int)(sizeof want / sizeof want[0]); k++) {
        tg_model *m = tg_model_new();
        tg_param rm = tg_model_param(m, "rm", S(2), tg_init_zeros());
        tg_graph *g = tg_graph_new(m);
        tg_tensor x = tg_zeros(g, S(3, 4)), c2 = tg_ones(g, S(2));
        switch (k) {
        case 0: tg_topk(x, 5, 1, true, NULL); break;
        case 1: tg_pad(x, S(0, 4), S(0, 0), TG_PAD_REFLECT, 0); break;
        case 2: tg_pad(x, S(1), S(1), TG_PAD_CONSTANT, 0); break;
        case 3: tg_conv_transpose2d(tg_zeros(g, S(1, 2, 3, 3)), tg_zeros(g, S(2, 2, 3, 3)), 2, 0, 2, 1); break;
        case 4: tg_batch_norm(tg_zeros(g, S(4, 2)), c2, c2, c2, tg_use(g, rm), true, 0.1f, 1e-5f); break;
        case 5: tg_batch_norm(tg_zeros(g, S(1, 2)), c2, c2, tg_use(g, rm), tg_use(g, rm), true, 0.1f, 1e-5f); break;
        case 6: tg_group_norm(tg_zeros(g, S(2, 6, 3)), 4, tg_ones(g, S(6)), tg_ones(g, S(6)), 1e-5f); break;
        case 7: tg_avg_pool2d(tg_zeros(g, S(1, 1, 4, 4)), 2, 2, 2); break;
        }
        const char *e = tg_graph_error(g);
        CHECK(tg_graph_status(g) != TG_OK && strstr(e, want[k]) && strstr(e, "test_torch_ops.c:"),
              "error %d: got '%s', want '%s' at test_torch_ops.c", k, e, want[k]);
        tg_graph_free(g);
        tg_model_free(m);
    }
}

int main(void) {
    errors();
    tg_safetensors *f = NULL;
    tg_status st = tg_safetensors_read(fixture_path(), &f);
    CHECK(st == TG_OK, "reading the fixture: %s", tg_last_error());
    if (!f) return check_summary("test_torch_ops");
    fx = f;
    run(TG_BACKEND_CPU);
    if (!getenv("TG_CPU")) run(TG_BACKEND_WEBGPU);
    printf("ops vs the PyTorch fixture: largest relative error %.2g (cpu), %.2g (webgpu)\n", worst[0], worst[1]);
    tg_safetensors_free(f);
    return check_summary("test_torch_ops");
}
