/* Optimizer and schedule math against values computed by hand (in double
 * precision, written out independently of the library's code) for the first
 * three steps.
 *
 * The model is one param p of 3 elements with loss = sum(c * p * p) / 2, so
 * the gradient is c * p: it changes every step, which exercises the state. */
#include <math.h>

#include "check.h"

static const float P0[3] = {0.5f, -1.0f, 2.0f};
static const float C[3] = {1.0f, 2.0f, -0.5f};
static tg_param P, Q; /* Q: a second param with zeros init (no AdamW decay by default) */

static tg_tensor loss_fn(tg_graph *g, void *u) {
    (void)u;
    tg_tensor p = tg_use(g, P), q = tg_use(g, Q);
    tg_tensor c = tg_constant(g, TG_SHAPE(3), C);
    tg_tensor l = tg_mul_s(tg_sum(tg_mul(c, tg_mul(p, p)), TG_ALL, false), 0.5f);
    /* q's gradient is 3 * q + 1: nonzero from q = 0 */
    tg_tensor lq = tg_sum(tg_add(tg_mul_s(tg_mul(q, q), 1.5f), q), TG_ALL, false);
    return tg_add(l, lq);
}

static tg_session *open_session(tg_model **m, tg_optim o) {
    *m = tg_model_new();
    P = tg_model_param(*m, "p", TG_SHAPE(3), tg_init_values(P0));
    Q = tg_model_param(*m, "q", TG_SHAPE(2), tg_init_zeros());
    tg_train_spec spec = {.model = *m, .loss = loss_fn, .optim = o, .threads = 1};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    return s;
}

/* Reference: the gradient of p and q at the current values. */
static void ref_grads(const double *p, const double *q, double *gp, double *gq) {
    for (int i = 0; i < 3; i++) gp[i] = C[i] * p[i];
    for (int i = 0; i < 2; i++) gq[i] = 3.0 * q[i] + 1.0;
}

static void check_params(tg_session *s, const double *p, const double *q, const char *what, int step) {
    float fp[3], fq[2];
    CHECK_OK(tg_session_get_param(s, "p", fp, 3));
    CHECK_OK(tg_session_get_param(s, "q", fq, 2));
    for (int i = 0; i < 3; i++)
        CHECK(fabs(fp[i] - p[i]) <= 1e-5 * (1 + fabs(p[i])), "%s step %d: p[%d] = %.7f, want %.7f", what, step, i,
              fp[i], p[i]);
    for (int i = 0; i < 2; i++)
        CHECK(fabs(fq[i] - q[i]) <= 1e-5 * (1 + fabs(q[i])), "%s step %d: q[%d] = %.7f, want %.7f", what, step, i,
              fq[i], q[i]);
}

/* Filters by name: "not p" (so AdamW leaves p undecayed), "only q" (so
 * normalize_grads leaves p's gradient alone), "none" (an error). */
static bool not_p(const char *name, void *u) { return strcmp(name, u ? (const char *)u : "p") != 0; }
static bool only_q(const char *name, void *u) { return strcmp(name, "q") == 0; }
static bool none(const char *name, void *u) { return false; }

/* Adam / AdamW as the brief states it: lrt = lr * sqrt(1 - b2^t) / (1 - b1^t),
 * p = shrink * p - lrt * m / (sqrt(v) + eps), shrink = 1 - lr * wd on decayed
 * params. filters: AdamW's decay_filter skips p, normalize_filter takes only q. */
static void test_adam_f(bool adamw, double clip, bool normalize, bool filters) {
    const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = adamw && !filters ? 0.05 : 0;
    tg_optim o = adamw ? tg_adamw(tg_lr_constant((float)lr), 0.05f) : tg_adam(tg_lr_constant((float)lr));
    o.clip_grad_norm = (float)clip;
    o.normalize_grads = normalize;
    if (filters) o.decay_filter = not_p, o.normalize_filter = normalize ? only_q : NULL;
    tg_model *m;
    tg_session *s = open_session(&m, o);
    double p[3] = {P0[0], P0[1], P0[2]}, q[2] = {0, 0}, mp[3] = {0}, vp[3] = {0}, mq[2] = {0}, vq[2] = {0};
    char what[64];
    snprintf(what, sizeof what, "%s clip=%g norm=%d filters=%d", adamw ? "adamw" : "adam", clip, normalize, filters);
    for (int t = 1; t <= 3; t++) {
        double gp[3], gq[2];
        ref_grads(p, q, gp, gq);
        if (normalize) {
            double np = 0, nq = 0;
            for (int i = 0; i < 3; i++) np += gp[i] * gp[i];
            for (int i = 0; i < 2; i++) nq += gq[i] * gq[i];
            for (int i = 0; i < 3 && !filters; i++) gp[i] /= sqrt(np) + 1e-8;
            for (int i = 0; i < 2; i++) gq[i] /= sqrt(nq) + 1e-8;
        }
        if (clip > 0) {
            double n2 = 0;
            for (int i = 0; i < 3; i++) n2 += gp[i] * gp[i];
            for (int i = 0; i < 2; i++) n2 += gq[i] * gq[i];
            double scale = clip / (sqrt(n2) + 1e-6);
            if (scale > 1) scale = 1;
            for (int i = 0; i < 3; i++) gp[i] *= scale;
            for (int i = 0; i < 2; i++) gq[i] *= scale;
        }
        double lrt = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
        for (int i = 0; i < 3; i++) {
            mp[i] = b1 * mp[i] + (1 - b1) * gp[i];
            vp[i] = b2 * vp[i] + (1 - b2) * gp[i] * gp[i];
            p[i] = (1 - lr * wd) * p[i] - lrt * mp[i] / (sqrt(vp[i]) + eps); /* p: randn-like init, decays */
        }
        for (int i = 0; i < 2; i++) { /* q: zeros init, no decay */
            mq[i] = b1 * mq[i] + (1 - b1) * gq[i];
            vq[i] = b2 * vq[i] + (1 - b2) * gq[i] * gq[i];
            q[i] = q[i] - lrt * mq[i] / (sqrt(vq[i]) + eps);
        }
        CHECK_OK(tg_session_step(s, NULL, 0, NULL));
        check_params(s, p, q, what, t);
    }
    tg_session_free(s);
    tg_model_free(m);
}

static void test_adam(bool adamw, double clip, bool normalize) { test_adam_f(adamw, clip, normalize, false); }

/* Filters that cannot be right are errors at compile: one that accepts none
 * of the params (a typo in a name), one set without normalize_grads. */
static void test_filter_errors(void) {
    tg_model *m;
    tg_optim o = tg_adam(tg_lr_constant(0.1f));
    o.normalize_grads = true;
    o.normalize_filter = none;
    m = tg_model_new();
    P = tg_model_param(m, "p", TG_SHAPE(3), tg_init_values(P0));
    Q = tg_model_param(m, "q", TG_SHAPE(2), tg_init_zeros());
    tg_train_spec spec = {.model = m, .loss = loss_fn, .optim = o, .threads = 1};
    tg_session *s = NULL;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "normalize_filter accepted none of the trained params ('p', 'q')");
    spec.optim.normalize_grads = false;
    CHECK_ERR(tg_session_new(&spec, &s), TG_ERR_ARG, "normalize_filter is set but normalize_grads is false");
    CHECK(s == NULL, "a failed tg_session_new left a session");
    tg_model_free(m);
}

/* SGD: g' = g + wd p; v = mu v + g'; update = nesterov ? g' + mu v : v (g' without momentum).
 * The decay follows the per-param flag: p (values init) decays, q (zeros init) does not. */
static void test_sgd(double mu, bool nesterov, double wd) {
    const double lr = 0.05;
    tg_model *m;
    tg_session *s = open_session(&m, tg_sgd(tg_lr_constant((float)lr), (float)mu, nesterov, (float)wd));
    double p[3] = {P0[0], P0[1], P0[2]}, q[2] = {0, 0}, vp[3] = {0}, vq[2] = {0};
    char what[64];
    snprintf(what, sizeof what, "sgd mu=%g nesterov=%d wd=%g", mu, nesterov, wd);
    for (int t = 1; t <= 3; t++) {
        double gp[3], gq[2];
        ref_grads(p, q, gp, gq);
        for (int i = 0; i < 5; i++) {
            double *x = i < 3 ? &p[i] : &q[i - 3], *v = i < 3 ? &vp[i] : &vq[i - 3];
            double g2 = (i < 3 ? gp[i] : gq[i - 3]) + (i < 3 ? wd : 0) * *x;
            *v = mu * *v + g2;
            double u = mu > 0 ? (nesterov ? g2 + mu * *v : *v) : g2;
            *x -= lr * u;
        }
        CHECK_OK(tg_session_step(s, NULL, 0, NULL));
        check_params(s, p, q, what, t);
    }
    tg_session_free(s);
    tg_model_free(m);
}

/* SGD's L2 decay by hand with mixed flags and a zero gradient (loss = 0 * sum of
 * every param): lr 0.1, wd 0.5, so a decayed param goes 1 -> 0.95 -> 0.9025 and
 * an undecayed one stays. ones: default off; ones_on: ones with decay forced on;
 * w: randn-like values, default on; w_off: values with decay forced off. */
static tg_param MIX[4];
static tg_tensor zero_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor t = tg_scalar(g, 0);
    for (int i = 0; i < 4; i++) t = tg_add(t, tg_sum(tg_use(g, MIX[i]), TG_ALL, false));
    return tg_mul_s(t, 0.0f);
}

static void test_sgd_decay_flags(float mu, bool filter, tg_backend be) {
    tg_model *m = tg_model_new();
    static const float V[2] = {1, 1};
    tg_init ones_on = tg_init_ones(), w_off = tg_init_values(V);
    ones_on.decay = 1;
    w_off.decay = 0;
    MIX[0] = tg_model_param(m, "ones", TG_SHAPE(2), tg_init_ones());
    MIX[1] = tg_model_param(m, "ones_on", TG_SHAPE(2), ones_on);
    MIX[2] = tg_model_param(m, "w", TG_SHAPE(2), tg_init_values(V));
    MIX[3] = tg_model_param(m, "w_off", TG_SHAPE(2), w_off);
    tg_train_spec spec = {.model = m, .loss = zero_loss, .optim = tg_sgd(tg_lr_constant(0.1f), mu, false, 0.5f),
                          .backend = be, .threads = 1};
    /* the filter turns w's decay off; it cannot turn ones' on */
    if (filter) spec.optim.decay_filter = not_p, spec.optim.filter_user = "w";
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    const char *names[4] = {"ones", "ones_on", "w", "w_off"};
    const bool decayed[4] = {false, true, !filter, false};
    double x = 1, v = 0; /* a decayed param by hand: g' = 0 + 0.5 x, v = mu v + g', x -= 0.1 v */
    for (int t = 1; t <= 2 && s; t++) {
        CHECK_OK(tg_session_step(s, NULL, 0, NULL));
        v = mu * v + 0.5 * x;
        x -= 0.1 * v;
        for (int i = 0; i < 4; i++) {
            float got[2];
            CHECK_OK(tg_session_get_param(s, names[i], got, 2));
            double want = decayed[i] ? x : 1.0;
            CHECK(fabs(got[0] - want) < 1e-6 && got[0] == got[1],
                  "%s: sgd mu=%g filter=%d decay flags: '%s' after step %d is %.7f, want %.7f",
                  be == TG_BACKEND_CPU ? "cpu" : "webgpu", mu, filter, names[i], t, got[0], want);
        }
    }
    tg_session_free(s);
    tg_model_free(m);
}

static void check_lr(const char *what, const tg_lr *lr, const double *want, int n) {
    for (int s = 1; s <= n; s++) {
        float got = tg_lr_at(lr, s);
        CHECK(fabs(got - want[s - 1]) <= 1e-6 * (1 + fabs(want[s - 1])), "%s at step %d: %.8f, want %.8f", what, s,
              got, want[s - 1]);
    }
}

static void test_schedules(void) {
    tg_lr c = tg_lr_constant(0.3f);
    check_lr("constant", &c, (double[]){0.3, 0.3, 0.3}, 3);
    tg_lr lin = tg_lr_linear(1.0f, 0.5f, 4); /* 1 + (0.5 - 1) * min(s/4, 1) */
    check_lr("linear", &lin, (double[]){0.875, 0.75, 0.625, 0.5, 0.5}, 5);
    tg_lr cos = tg_lr_cosine(1.0f, 0.0f, 4); /* (1 + cos(pi s / 4)) / 2 */
    check_lr("cosine", &cos, (double[]){0.85355339, 0.5, 0.14644661, 0.0, 0.0}, 5);
    tg_lr warm = tg_lr_warmup(0.4f, 2, &lin); /* 0.2, 0.4, then linear at s - 2 */
    check_lr("warmup", &warm, (double[]){0.2, 0.4, 0.875, 0.75}, 4);
    tg_lr stair = tg_lr_staircase(1.0f, 0.5f, 2); /* 0.5 ^ floor((s - 1) / 2) */
    check_lr("staircase", &stair, (double[]){1, 1, 0.5, 0.5, 0.25}, 5);
    tg_lr ms = tg_lr_multistep(1.0f, 0.1f, 2, (int64_t[]){2, 4}); /* 0.1 ^ #{milestones <= s} */
    check_lr("multistep", &ms, (double[]){1, 0.1, 0.1, 0.01, 0.01}, 5);
}

/* start_step, and chains and milestone lists longer than the 8 links and 8
 * milestones 0.6 kept; a loop in a chain gives NaN. */
static void test_schedule_sizes(void) {
    tg_lr late = tg_lr_linear(1.0f, 0.5f, 4); /* s' = max(1, s - 2) */
    late.start_step = 2;
    check_lr("linear start_step 2", &late, (double[]){0.875, 0.875, 0.875, 0.75, 0.625, 0.5}, 6);
    tg_lr inner = tg_lr_constant(0.5f), chain[12];
    for (int k = 11; k >= 0; k--) chain[k] = tg_lr_warmup(1.0f + k, 1, k == 11 ? &inner : &chain[k + 1]);
    /* each link lasts one step at its peak (s / 1), then the constant */
    double want[14];
    for (int k = 0; k < 12; k++) want[k] = 1.0 + k;
    want[12] = want[13] = 0.5;
    check_lr("12 warmup links", &chain[0], want, 14);
    int64_t ms[20];
    for (int k = 0; k < 20; k++) ms[k] = k + 1;
    tg_lr many = tg_lr_multistep(1.0f, 0.5f, 20, ms); /* 0.5 ^ s while s <= 20 */
    check_lr("20 milestones", &many, (double[]){0.5, 0.25, 0.125, 0.0625}, 4);
    CHECK(fabs(tg_lr_at(&many, 30) - pow(0.5, 20)) < 1e-12, "20 milestones at step 30: %g", tg_lr_at(&many, 30));
    tg_lr warm_late = tg_lr_warmup(0.4f, 2, &late); /* the inner start_step counts from the warmup's end */
    check_lr("warmup then a late linear", &warm_late, (double[]){0.2, 0.4, 0.875, 0.875, 0.875, 0.75}, 6);
}

/* A session copies its schedule: the caller's chain and milestones may change
 * or go away after tg_session_new and set_lr. */
static void test_schedule_copied(void) {
    int64_t ms[10] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    tg_lr tail = tg_lr_multistep(0.1f, 0.5f, 10, ms), lr = tg_lr_warmup(0.1f, 1, &tail);
    tg_model *m;
    tg_session *s = open_session(&m, tg_sgd(lr, 0, false, 0));
    tail.peak = 100; /* neither reaches the session */
    ms[0] = 1000;
    double p[3] = {P0[0], P0[1], P0[2]}, q[2] = {0, 0};
    /* warmup step 1: 0.1; then the multistep at s = 1, 2, ...: 0.1 * 0.5^#{m <= s} */
    const double lrs[4] = {0.1, 0.1, 0.05, 0.025};
    for (int t = 1; t <= 4 && s; t++) {
        double gp[3], gq[2];
        ref_grads(p, q, gp, gq);
        for (int i = 0; i < 3; i++) p[i] -= lrs[t - 1] * gp[i];
        for (int i = 0; i < 2; i++) q[i] -= lrs[t - 1] * gq[i];
        CHECK_OK(tg_session_step(s, NULL, 0, NULL));
        check_params(s, p, q, "copied schedule", t);
    }
    tg_session_free(s);
    tg_model_free(m);
}

/* A schedule drives the update: SGD with a linear schedule, then set_lr
 * restarts a new schedule from the next step. */
static void test_schedule_in_session(void) {
    tg_model *m;
    tg_session *s = open_session(&m, tg_sgd(tg_lr_linear(0.1f, 0.0f, 4), 0, false, 0));
    double p[3] = {P0[0], P0[1], P0[2]}, q[2] = {0, 0};
    const double lrs[5] = {0.075, 0.05, 0.2, 0.2 * 0.5, 0.2 * 0.5}; /* steps 1-2 linear, then staircase(0.2, 0.5, 1) restarted */
    for (int t = 1; t <= 4; t++) {
        if (t == 3) CHECK_OK(tg_session_set_lr(s, tg_lr_staircase(0.2f, 0.5f, 1)));
        double gp[3], gq[2];
        ref_grads(p, q, gp, gq);
        for (int i = 0; i < 3; i++) p[i] -= lrs[t - 1] * gp[i];
        for (int i = 0; i < 2; i++) q[i] -= lrs[t - 1] * gq[i];
        CHECK_OK(tg_session_step(s, NULL, 0, NULL));
        check_params(s, p, q, "schedule+set_lr", t);
    }
    CHECK(tg_session_step_count(s) == 4, "step count %lld", (long long)tg_session_step_count(s));
    tg_session_free(s);
    tg_model_free(m);
}

int main(void) {
    test_adam(false, 0, false);
    test_adam(true, 0, false);
    test_adam(true, 0.5, false);  /* the clip is active: the raw norm is about 4.3 */
    test_adam(false, 0, true);
    test_adam(true, 0.5, true);
    test_sgd(0, false, 0);
    test_sgd(0.9, false, 0);
    test_sgd(0.9, true, 0);
    test_sgd(0.9, true, 0.1);
    test_sgd(0, false, 0.1);
    test_sgd_decay_flags(0, false, TG_BACKEND_CPU);
    test_sgd_decay_flags(0.9f, false, TG_BACKEND_CPU);
    test_sgd_decay_flags(0.9f, true, TG_BACKEND_CPU);
    test_adam_f(true, 0, false, true);
    test_adam_f(true, 0.5, true, true);
    test_filter_errors();
    test_schedules();
    test_schedule_sizes();
    test_schedule_copied();
    test_schedule_in_session();
    /* The decay flags reach the WebGPU update kernels too (two small sessions). */
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) == TG_OK) {
        test_sgd_decay_flags(0, false, TG_BACKEND_WEBGPU);
        test_sgd_decay_flags(0.9f, true, TG_BACKEND_WEBGPU);
    } else {
        check_webgpu_missing("test_optim");
    }
    return check_summary("test_optim");
}
