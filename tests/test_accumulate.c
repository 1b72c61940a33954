/* Gradient accumulation and the parameter average (EMA), on each backend.
 *
 * K micro-batches with spec.accumulate = K update the params as one step
 * over the whole batch does (to float rounding: 1e-5 of the params'
 * scale), with Adam, clipping and the average; and the accumulating
 * session's plan is that of one micro-batch plus the gradient sums, one
 * buffer of the params' size. */
#define _POSIX_C_SOURCE 200112L /* getpid */
#include <math.h>
#include <unistd.h>

#include "check.h"

enum { IN = 16, HID = 64, OUT = 4, BATCH = 64, K = 4, MICRO = BATCH / K, UPDATES = 3 };

typedef struct {
    tg_linear l1, l2;
} mlp;

static tg_tensor loss_fn(tg_graph *g, void *u) {
    mlp *m = u;
    tg_tensor h = tg_tanh(tg_linear_fwd(g, &m->l1, tg_input(g, "x")));
    return tg_cross_entropy(tg_linear_fwd(g, &m->l2, h), tg_input(g, "y"), TG_REDUCTION_MEAN);
}

static float X[UPDATES][BATCH][IN];
static int32_t Y[UPDATES][BATCH];

static void make_data(void) {
    uint64_t s = 99;
    for (int u = 0; u < UPDATES; u++)
        for (int b = 0; b < BATCH; b++) {
            for (int i = 0; i < IN; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                X[u][b][i] = (float)((s >> 40) % 2001) / 1000.0f - 1.0f;
            }
            Y[u][b] = (int32_t)((s >> 20) % OUT);
        }
}

static tg_session *open_session(tg_backend be, tg_model *m, mlp *net, int batch, int accumulate, bool ema) {
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(batch, IN)}, {"y", TG_I32, TG_SHAPE(batch)}};
    tg_optim o = tg_adamw(tg_lr_constant(0.01f), 0.01f);
    o.clip_grad_norm = 0.5f; /* binding: the clip sees the whole batch's gradient */
    o.ema_decay = ema ? 0.9f : 0.0f;
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = net, .inputs = in, .n_inputs = 2, .optim = o,
                          .seed = 7, .backend = be, .threads = 2, .accumulate = accumulate};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    CHECK(st == TG_OK, "session (batch %d, accumulate %d): %s", batch, accumulate, tg_last_error());
    return s;
}

/* max |a - b| over max |b| of every param */
static double param_diff(tg_session *a, tg_session *b, tg_model *m) {
    double err = 0, scale = 0;
    float va[HID * HID], vb[HID * HID];
    for (int p = 0; p < tg_model_param_count(m); p++) {
        const char *name = tg_model_param_name(m, p);
        int64_t n = tg_shape_numel(tg_model_param_shape(m, p));
        CHECK_OK(tg_session_get_param(a, name, va, n));
        CHECK_OK(tg_session_get_param(b, name, vb, n));
        for (int64_t i = 0; i < n; i++) err = fmax(err, fabs((double)va[i] - vb[i])), scale = fmax(scale, fabs(vb[i]));
    }
    return err / scale;
}

static void equal_to_full_batch(tg_backend be, const char *bn) {
    tg_model *m = tg_model_new();
    mlp net = {tg_linear_new(m, "l1", IN, HID, true), tg_linear_new(m, "l2", HID, OUT, true)};
    tg_session *full = open_session(be, m, &net, BATCH, 0, true), *acc = open_session(be, m, &net, MICRO, K, true);
    if (!full || !acc) goto done;
    double worst = 0, moved = 0;
    float before[IN * HID];
    CHECK_OK(tg_session_get_param(acc, "l1.W", before, IN * HID));
    for (int u = 0; u < UPDATES; u++) {
        float lf, lm[K];
        tg_feed f[] = {TG_FEED("x", &X[u][0][0], BATCH * IN), TG_FEED("y", Y[u], BATCH)};
        CHECK_OK(tg_session_step(full, f, 2, &lf));
        for (int k = 0; k < K; k++) {
            CHECK(tg_session_pending(acc) == k, "%s: %d micro-batches pending, want %d", bn, tg_session_pending(acc), k);
            tg_feed fm[] = {TG_FEED("x", &X[u][k * MICRO][0], MICRO * IN), TG_FEED("y", &Y[u][k * MICRO], MICRO)};
            CHECK_OK(tg_session_step(acc, fm, 2, &lm[k]));
            if (k == 0 && u == 0) { /* a micro-step updates nothing */
                float now[IN * HID];
                CHECK_OK(tg_session_get_param(acc, "l1.W", now, IN * HID));
                CHECK(memcmp(now, before, sizeof now) == 0, "%s: a micro-step changed the params", bn);
            }
        }
        if (u == 0) { /* the gradient a session reads: the round's sum, K times the whole batch's mean */
            float ga[IN * HID], gf[IN * HID];
            CHECK_OK(tg_session_get_grad(acc, "l1.W", ga, IN * HID));
            CHECK_OK(tg_session_get_grad(full, "l1.W", gf, IN * HID));
            double err = 0, scale = 0;
            for (int i = 0; i < IN * HID; i++) err = fmax(err, fabs(ga[i] / K - gf[i])), scale = fmax(scale, fabs(gf[i]));
            CHECK(err < 1e-5 * scale, "%s: the summed gradient over K differs from the full batch's by %.3g", bn,
                  err / scale);
        }
        CHECK(tg_session_step_count(acc) == u + 1, "%s: %lld updates after %d rounds", bn,
              (long long)tg_session_step_count(acc), u + 1);
        float mean = (lm[0] + lm[1] + lm[2] + lm[3]) / K;
        CHECK(fabsf(mean - lf) <= 1e-5f * fabsf(lf), "%s: update %d: mean micro loss %.7g, full batch %.7g", bn, u,
              mean, lf);
        double d = param_diff(acc, full, m);
        worst = fmax(worst, d);
        CHECK(d < 1e-5, "%s: after update %d the params differ from the full batch's by %.3g", bn, u + 1, d);
    }
    /* the average too: the same in both */
    tg_safetensors *ea = NULL, *ef = NULL;
    CHECK_OK(tg_session_download_ema(acc, &ea));
    CHECK_OK(tg_session_download_ema(full, &ef));
    if (ea && ef) {
        const tg_st_tensor *a = tg_safetensors_find(ea, "l1.W"), *b = tg_safetensors_find(ef, "l1.W");
        double err = 0, scale = 0;
        for (int i = 0; i < IN * HID; i++) {
            float x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
            err = fmax(err, fabs((double)x - y)), scale = fmax(scale, fabs(y));
            moved = fmax(moved, fabs((double)x - before[i]));
        }
        CHECK(err / scale < 1e-5, "%s: the averages differ by %.3g", bn, err / scale);
        CHECK(moved > 1e-3, "%s: the average never moved", bn);
    }
    tg_safetensors_free(ea);
    tg_safetensors_free(ef);
    /* The comparison must be able to fail: K micro-batches without the
     * accumulation (each stepping on its own) do not give the full batch's
     * params (once, on the CPU: lavapipe compiles slowly). */
    if (be == TG_BACKEND_CPU) {
        tg_session *each = open_session(be, m, &net, MICRO, 0, false);
        for (int u = 0; each && u < UPDATES; u++)
            for (int k = 0; k < K; k++) {
                tg_feed fm[] = {TG_FEED("x", &X[u][k * MICRO][0], MICRO * IN), TG_FEED("y", &Y[u][k * MICRO], MICRO)};
                CHECK_OK(tg_session_step(each, fm, 2, NULL));
            }
        if (each) CHECK(param_diff(each, full, m) > 1e-3, "%s: the check cannot tell micro-steps from accumulation", bn);
        tg_session_free(each);
    }
    printf("%s: %d updates of %d micro-batches of %d: params within %.2g of one step over %d\n", bn, UPDATES, K, MICRO,
           worst, BATCH);
done:
    tg_session_free(full);
    tg_session_free(acc);
    tg_model_free(m);
}

/* The plan: the activations (scratch) of one micro-batch, and one buffer
 * of the params' size for the sums (what PyTorch keeps as .grad), on each
 * backend (on lavapipe its three sessions compile for about 20 s with a
 * cold shader cache). */
static void memory(tg_backend be, const char *bn) {
    enum { WIDE = 256, ROWS = 512, K8 = 8 };
    tg_model *m = tg_model_new();
    mlp net = {tg_linear_new(m, "l1", IN, WIDE, true), tg_linear_new(m, "l2", WIDE, OUT, true)};
    tg_plan_stats full = {0}, micro = {0}, acc = {0};
    tg_session *s = open_session(be, m, &net, ROWS, 0, false);
    if (s) CHECK_OK(tg_session_plan_stats(s, &full));
    tg_session_free(s);
    s = open_session(be, m, &net, ROWS / K8, 0, false);
    if (s) CHECK_OK(tg_session_plan_stats(s, &micro));
    tg_session_free(s);
    s = open_session(be, m, &net, ROWS / K8, K8, false);
    if (s) CHECK_OK(tg_session_plan_stats(s, &acc));
    tg_session_free(s);
    int64_t sums = acc.state_bytes - micro.state_bytes; /* the gradient sums */
    printf("%s: planned bytes: batch %d %lld, batch %d %lld, %d x %d accumulated %lld (scratch %lld, %lld, %lld; sums %lld)\n",
           bn, ROWS, (long long)full.planned_bytes, ROWS / K8, (long long)micro.planned_bytes, K8, ROWS / K8,
           (long long)acc.planned_bytes, (long long)full.scratch_bytes, (long long)micro.scratch_bytes,
           (long long)acc.scratch_bytes, (long long)sums);
    CHECK(sums == micro.param_bytes, "%s: the sums take %lld bytes, the params %lld", bn, (long long)sums,
          (long long)micro.param_bytes);
    CHECK(acc.scratch_bytes <= micro.scratch_bytes, "%s: accumulating takes %lld bytes of scratch, a micro-batch %lld",
          bn, (long long)acc.scratch_bytes, (long long)micro.scratch_bytes);
    /* beyond that, only the sums' alignment (256 bytes a param at most) */
    CHECK(acc.planned_bytes <= micro.planned_bytes + sums + 256 * tg_model_param_count(m),
          "%s: accumulating plans %lld bytes, a micro-batch %lld and the sums %lld", bn, (long long)acc.planned_bytes,
          (long long)micro.planned_bytes, (long long)sums);
    CHECK(acc.planned_bytes < full.planned_bytes / 2, "%s: accumulating plans %lld bytes, the whole batch %lld", bn,
          (long long)acc.planned_bytes, (long long)full.planned_bytes);
    tg_model_free(m);
}

/* A full checkpoint saved between micro-steps resumes the round: the same
 * params as a run that never stopped, bit for bit (CPU). */
static void resume(void) {
    tg_model *m = tg_model_new();
    mlp net = {tg_linear_new(m, "l1", IN, HID, true), tg_linear_new(m, "l2", HID, OUT, true)};
    tg_session *a = open_session(TG_BACKEND_CPU, m, &net, MICRO, K, true), *b = open_session(TG_BACKEND_CPU, m, &net, MICRO, K, true);
    char path[64];
    snprintf(path, sizeof path, "/tmp/tg_accumulate_%d.safetensors", (int)getpid());
    for (int k = 0; a && b && k < 2 * K; k++) {
        tg_feed fm[] = {TG_FEED("x", &X[0][(k % K) * MICRO][0], MICRO * IN), TG_FEED("y", &Y[0][(k % K) * MICRO], MICRO)};
        CHECK_OK(tg_session_step(a, fm, 2, NULL));
        if (k == K + 1) {
            CHECK_OK(tg_session_save(a, path));
            CHECK_OK(tg_session_load(b, path));
            CHECK(tg_session_pending(b) == 2 && tg_session_step_count(b) == 1, "loaded: %d pending, %lld updates",
                  tg_session_pending(b), (long long)tg_session_step_count(b));
        }
        if (k > K + 1) CHECK_OK(tg_session_step(b, fm, 2, NULL));
    }
    if (a && b) CHECK(param_diff(a, b, m) == 0, "a resumed round differs from one that never stopped");
    remove(path);
    tg_session_free(a);
    tg_session_free(b);
    tg_model_free(m);
}

static void errors(void) {
    tg_model *m = tg_model_new();
    mlp net = {tg_linear_new(m, "l1", IN, HID, true), tg_linear_new(m, "l2", HID, OUT, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(MICRO, IN)}, {"y", TG_I32, TG_SHAPE(MICRO)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &net, .inputs = in, .n_inputs = 2, .accumulate = 4};
    tg_session *s = NULL;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "spec->accumulate is 4");
    spec.optim = tg_adam(tg_lr_constant(0.01f));
    spec.accumulate = -1;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "spec->accumulate is -1");
    spec.accumulate = 0;
    spec.optim.ema_decay = 1.0f;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "ema_decay is 1");
    spec.optim.ema_decay = 0;
    CHECK_OK(tg_session_new(&spec, &s));
    tg_safetensors *e = NULL;
    CHECK_ERR(tg_session_download_ema(s, &e), TG_ERR_STATE, "keeps no average");
    tg_session_free(s);
    tg_model_free(m);
}

int main(void) {
    make_data();
    errors();
    resume();
    equal_to_full_batch(TG_BACKEND_CPU, "cpu");
    memory(TG_BACKEND_CPU, "cpu");
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) check_webgpu_missing("test_accumulate");
    else {
        equal_to_full_batch(TG_BACKEND_WEBGPU, "webgpu");
        memory(TG_BACKEND_WEBGPU, "webgpu");
    }
    return check_summary("test_accumulate");
}
