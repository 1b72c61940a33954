/* Learning-rate schedules, evaluated on the host once per step; the value
 * reaches the graph through the optimizer's hyperparameter vector, so
 * changing the schedule never recompiles. Steps count from 1. */
#include <math.h>

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
    tg_lr r = {.kind = TG_LR_MULTISTEP, .peak = peak, .gamma = gamma};
    if (n > TG_LR_MAX_MILESTONES) n = TG_LR_MAX_MILESTONES;
    for (int i = 0; i < n && milestones; i++) r.milestones[r.n_milestones++] = milestones[i];
    return r;
}

static double frac(int64_t s, int64_t steps) {
    if (steps <= 0) return 1.0;
    double f = (double)s / (double)steps;
    return f < 1.0 ? f : 1.0;
}

tg_status tg_lr_check(const tg_lr *lr, const char *api) {
    for (int depth = 0; lr; depth++) {
        if (depth >= TG_MAX_LR_CHAIN)
            return tg_fail(TG_ERR_ARG, "%s: the warmup chain is longer than %d schedules", api, TG_MAX_LR_CHAIN);
        if ((unsigned)lr->kind > TG_LR_MULTISTEP)
            return tg_fail(TG_ERR_ARG, "%s: unknown schedule kind %d", api, (int)lr->kind);
        if (!isfinite(lr->peak) || !isfinite(lr->final_lr) || !isfinite(lr->gamma))
            return tg_fail(TG_ERR_ARG, "%s: schedule %d has a non-finite peak, final_lr or gamma (%g, %g, %g)", api,
                           depth, lr->peak, lr->final_lr, lr->gamma);
        if (lr->steps < 0 || lr->every < 0)
            return tg_fail(TG_ERR_ARG, "%s: schedule %d has negative steps or every (%lld, %lld)", api, depth,
                           (long long)lr->steps, (long long)lr->every);
        if (lr->n_milestones < 0 || lr->n_milestones > TG_LR_MAX_MILESTONES)
            return tg_fail(TG_ERR_ARG, "%s: schedule %d has %d milestones (0 to %d)", api, depth, lr->n_milestones,
                           TG_LR_MAX_MILESTONES);
        lr = lr->kind == TG_LR_WARMUP ? lr->then : NULL;
    }
    return TG_OK;
}

float tg_lr_at(const tg_lr *lr, int64_t s) {
    for (int depth = 0; lr && depth < 16; depth++) {
        switch (lr->kind) {
        case TG_LR_CONSTANT: return lr->peak;
        case TG_LR_LINEAR: return (float)(lr->peak + (lr->final_lr - lr->peak) * frac(s, lr->steps));
        case TG_LR_COSINE:
            return (float)(lr->final_lr + (lr->peak - lr->final_lr) / 2.0 * (1.0 + cos(3.14159265358979323846 * frac(s, lr->steps))));
        case TG_LR_WARMUP:
            if (s <= lr->steps || lr->steps < 0 || !lr->then) return (float)(lr->peak * frac(s, lr->steps));
            s -= lr->steps;
            lr = lr->then;
            continue;
        case TG_LR_STAIRCASE:
            return (float)(lr->peak * pow(lr->gamma, (double)((s - 1) / (lr->every > 0 ? lr->every : 1))));
        case TG_LR_MULTISTEP: {
            int k = 0;
            for (int i = 0; i < lr->n_milestones && i < TG_LR_MAX_MILESTONES; i++) k += lr->milestones[i] <= s;
            return (float)(lr->peak * pow(lr->gamma, k));
        }
        }
        return lr->peak;
    }
    return 0.0f;
}
