/* The digits CNN (examples/digits.c) against PyTorch: logits, loss and every
 * param gradient for the fixed weights and batch that
 * tests/fixtures/make_digits_fixture.py wrote with PyTorch 1.13 (the file is
 * committed; CI has no torch). Each tensor must match to 1e-4 of its largest
 * magnitude, on 1 and 2 threads. */
#include <math.h>

#include "check.h"
#include "../examples/digits_cnn.h"

#define B 64

static const char *fixture(const char *name) {
    static char buf[256];
    const char *slash = strrchr(__FILE__, '/');
    int n = slash ? (int)(slash - __FILE__) : 0;
    snprintf(buf, sizeof buf, "%.*s%sfixtures/%s", n, __FILE__, slash ? "/" : "", name);
    return buf;
}

static const char *PARAMS[] = {"conv1.W", "conv1.b", "conv2.W", "conv2.b", "fc.W", "fc.b"};

static tg_tensor loss_fn(tg_graph *g, void *u) {
    tg_tensor logits = tg_capture(digits_cnn_logits(g, u, tg_input(g, "x")), "logits");
    return tg_cross_entropy(logits, tg_input(g, "y"), TG_REDUCTION_MEAN);
}

static double worst; /* the largest relative error seen, printed at the end */

/* max |a - ref| / max |ref| */
static double rel_err(const float *a, const float *ref, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)a[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    double e = err / (scale > 0 ? scale : 1);
    worst = fmax(worst, e);
    return e;
}

static const tg_st_tensor *need(const tg_safetensors *f, const char *name) {
    const tg_st_tensor *t = tg_safetensors_find(f, name);
    CHECK(t != NULL, "fixture has no tensor '%s'", name);
    return t;
}

static void run(const tg_safetensors *f, int threads) {
    tg_model *m = tg_model_new();
    digits_cnn net = digits_cnn_new(m);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(B, 1, 8, 8)}, {"y", TG_I32, TG_SHAPE(B)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = {.kind = TG_OPT_NONE}, .threads = threads};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    const tg_st_tensor *x = need(f, "input.x"), *y = need(f, "input.y"), *lg = need(f, "out.logits"),
                       *ls = need(f, "out.loss");
    if (!s || !x || !y || !lg || !ls) goto done;
    for (int i = 0; i < 6; i++) {
        const tg_st_tensor *t = need(f, PARAMS[i]);
        if (t) CHECK_OK(tg_session_set_param(s, PARAMS[i], t->data, tg_shape_numel(t->shape)));
    }
    float loss = NAN, logits[B * 10];
    tg_feed feeds[] = {{"x", x->data, B * 64, x->dtype}, {"y", y->data, B, y->dtype}};
    CHECK_OK(tg_session_step(s, feeds, 2, &loss));
    CHECK_OK(tg_session_read(s, "logits", logits, B * 10));
    double e = rel_err(logits, lg->data, B * 10);
    CHECK(e < 1e-4, "%d threads: logits differ from PyTorch by %.3g relative", threads, e);
    e = rel_err(&loss, ls->data, 1);
    CHECK(e < 1e-4, "%d threads: loss %.7f, PyTorch %.7f", threads, loss, *(const float *)ls->data);
    for (int i = 0; i < 6; i++) {
        char gname[64];
        snprintf(gname, sizeof gname, "grad.%s", PARAMS[i]);
        const tg_st_tensor *t = need(f, gname);
        if (!t) continue;
        int64_t n = tg_shape_numel(t->shape);
        float *gv = calloc((size_t)n, sizeof(float));
        CHECK_OK(tg_session_get_grad(s, PARAMS[i], gv, n));
        e = rel_err(gv, t->data, n);
        CHECK(e < 1e-4, "%d threads: d loss / d %s differs from PyTorch by %.3g relative", threads, PARAMS[i], e);
        free(gv);
    }
done:
    tg_session_free(s);
    tg_model_free(m);
}

int main(void) {
    tg_safetensors *f = NULL;
    tg_status st = tg_safetensors_read(fixture("digits_parity.safetensors"), &f);
    CHECK(st == TG_OK, "reading the fixture: %s", tg_last_error());
    if (f) {
        run(f, 1);
        run(f, 2);
        tg_safetensors_free(f);
    }
    printf("digits CNN vs the PyTorch fixture: largest relative error %.2g\n", worst);
    return check_summary("test_digits_parity");
}
