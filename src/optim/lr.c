/* Learning-rate schedules, evaluated on the host once per step; the value
 * reaches the graph through the optimizer's hyperparameter vector, so
 * changing the schedule never recompiles. Steps count from 1. A schedule is
 * a chain (warmup -> then -> ...) of any length; sessions keep a copy of
 * the chain and its milestones in one allocation (tg_lr_copy). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"

tg_lr tg_lr_constant(float lr) { return (tg_lr){.kind = TG_LR_CONSTANT, .peak = lr}; }
tg_lr tg_lr_linear(float peak, float final_lr, int64_t steps) {
    return (tg_lr){.kind = TG_LR_LINEAR, .peak = peak, .final_lr = final_lr, .steps = steps};
}
tg_lr tg_lr_cosine(float peak, float final_lr, int64_t steps) {
    return (tg_lr){.kind = TG_LR_COSINE, .peak = peak, .final_lr = final_lr, .steps = steps};
}
tg_lr tg_lr_warmup(float peak, int64_t steps, const tg_lr *then) {
    return (tg_lr){.kind = TG_LR_WARMUP, .peak = peak, .steps = steps, .then = then};
}
tg_lr tg_lr_staircase(float peak, float gamma, int64_t every) {
    return (tg_lr){.kind = TG_LR_STAIRCASE, .peak = peak, .gamma = gamma, .every = every};
}
tg_lr tg_lr_multistep(float peak, float gamma, int n, const int64_t *milestones) {
    return (tg_lr){.kind = TG_LR_MULTISTEP, .peak = peak, .gamma = gamma, .n_milestones = n, .milestones = milestones};
}

static const tg_lr *next(const tg_lr *l) { return l->kind == TG_LR_WARMUP ? l->then : NULL; }

/* The links of a chain, or -1 when it loops back on itself (Floyd: a
 * pointer at twice the pace meets the slow one only inside a loop). */
static int64_t chain_length(const tg_lr *lr) {
    for (const tg_lr *slow = lr, *fast = lr; fast && next(fast);) {
        slow = next(slow);
        fast = next(next(fast));
        if (slow == fast) return -1;
    }
    int64_t n = 0;
    for (; lr; lr = next(lr)) n++;
    return n;
}

static double frac(int64_t s, int64_t steps) {
    if (steps <= 0) return 1.0;
    double f = (double)s / (double)steps;
    return f < 1.0 ? f : 1.0;
}

tg_status tg_lr_check(const tg_lr *lr, const char *api) {
    if (chain_length(lr) < 0) return tg_fail(TG_ERR_ARG, "%s: the warmup chain loops back on itself", api);
    for (int64_t depth = 0; lr; depth++, lr = next(lr)) {
        if ((unsigned)lr->kind > TG_LR_MULTISTEP)
            return tg_fail(TG_ERR_ARG, "%s: unknown schedule kind %d", api, (int)lr->kind);
        if (!isfinite(lr->peak) || !isfinite(lr->final_lr) || !isfinite(lr->gamma))
            return tg_fail(TG_ERR_ARG, "%s: schedule %lld has a non-finite peak, final_lr or gamma (%g, %g, %g)", api,
                           (long long)depth, lr->peak, lr->final_lr, lr->gamma);
        if (lr->steps < 0 || lr->every < 0 || lr->start_step < 0)
            return tg_fail(TG_ERR_ARG, "%s: schedule %lld has negative steps, every or start_step (%lld, %lld, %lld)",
                           api, (long long)depth, (long long)lr->steps, (long long)lr->every,
                           (long long)lr->start_step);
        if (lr->kind == TG_LR_MULTISTEP && (lr->n_milestones < 0 || (lr->n_milestones > 0 && !lr->milestones)))
            return tg_fail(TG_ERR_ARG, "%s: schedule %lld has %d milestones and %s milestone array", api,
                           (long long)depth, lr->n_milestones, lr->milestones ? "a" : "no");
    }
    return TG_OK;
}

tg_status tg_lr_copy(const tg_lr *src, tg_lr **out, const char *api) {
    *out = NULL;
    tg_status st = tg_lr_check(src, api);
    if (st != TG_OK) return st;
    int64_t n = chain_length(src), nm = 0;
    for (const tg_lr *l = src; l; l = next(l)) nm += l->kind == TG_LR_MULTISTEP ? l->n_milestones : 0;
    if (n > (INT64_MAX / 2 - nm * 8) / (int64_t)sizeof(tg_lr))
        return tg_fail(TG_ERR_NOMEM, "%s: the schedule is too large", api);
    tg_lr *c = malloc((size_t)n * sizeof(tg_lr) + (size_t)nm * sizeof(int64_t) + 1);
    if (!c) return tg_fail(TG_ERR_NOMEM, "%s: out of memory for the schedule", api);
    int64_t *ms = (int64_t *)(c + n); /* tg_lr is 8-byte aligned, so the milestones after it are too */
    int64_t k = 0;
    for (const tg_lr *l = src; l; l = next(l), k++) {
        c[k] = *l;
        c[k].then = k + 1 < n ? &c[k + 1] : NULL;
        if (l->kind == TG_LR_MULTISTEP) {
            if (l->n_milestones) memcpy(ms, l->milestones, sizeof(int64_t) * (size_t)l->n_milestones);
            c[k].milestones = ms;
            ms += l->n_milestones;
        } else {
            c[k].n_milestones = 0;
            c[k].milestones = NULL;
        }
    }
    *out = c;
    return TG_OK;
}

float tg_lr_at(const tg_lr *lr, int64_t s) {
    if (chain_length(lr) < 0) return NAN;
    for (; lr; lr = lr->then) {
        /* s - start_step > 1, spelled so that no s (INT64_MIN included) overflows */
        if (lr->start_step > 0) s = s > 1 && s - 1 > lr->start_step ? s - lr->start_step : 1;
        switch (lr->kind) {
        case TG_LR_CONSTANT: return lr->peak;
        case TG_LR_LINEAR: return (float)(lr->peak + (lr->final_lr - lr->peak) * frac(s, lr->steps));
        case TG_LR_COSINE:
            return (float)(lr->final_lr + (lr->peak - lr->final_lr) / 2.0 * (1.0 + cos(3.14159265358979323846 * frac(s, lr->steps))));
        case TG_LR_WARMUP:
            if (s <= lr->steps || lr->steps < 0 || !lr->then) return (float)(lr->peak * frac(s, lr->steps));
            s -= lr->steps;
            continue;
        case TG_LR_STAIRCASE:
            /* Steps before the first (s < 1) are the first: s - 1 never overflows. */
            return (float)(lr->peak * pow(lr->gamma, (double)(s > 1 ? (s - 1) / (lr->every > 0 ? lr->every : 1) : 0)));
        case TG_LR_MULTISTEP: {
            int64_t k = 0;
            for (int i = 0; i < lr->n_milestones && lr->milestones; i++) k += lr->milestones[i] <= s;
            return (float)(lr->peak * pow(lr->gamma, (double)k));
        }
        }
        return lr->peak;
    }
    return 0.0f;
}
