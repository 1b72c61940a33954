/* In-graph optimizers: the update ops are appended to the training graph and
 * their results written back to params and state at the end of each step. */
#ifndef TG_OPTIM_H
#define TG_OPTIM_H
#include "../ir/ir.h"

/* An end-of-step copy: node src's value becomes leaf dst's (a param or a
 * state) for the next step. The planner makes most of these free by
 * computing src in dst's memory. */
typedef struct {
    int src, dst;
} tg_writeback;

#define TG_HYPER_NAME "opt.hyper"
/* The step's scalars the host writes: the learning rate, Adam's rate with its
 * bias correction, AdamW's shrink, whether a gradient sum carries on (0 at a
 * round's first micro-step), the EMA's weights of the old average and of
 * the param (0 and 1 at the first update). */
enum {
    TG_HYPER_LR,
    TG_HYPER_LRT,
    TG_HYPER_SHRINK,
    TG_HYPER_ACC_KEEP,
    TG_HYPER_EMA_KEEP,
    TG_HYPER_EMA_TAKE,
    TG_HYPER_N = 8
};

/* Appends clipping/normalization and the update of every param that has a
 * gradient; accumulate > 1: param_grad holds sums over that many micro-steps,
 * each divided by it first. *wb receives a malloc'd writeback list. *check receives the step
 * check, loss * 0 + the sum of every raw gradient squared (not finite when
 * the loss or the gradient norm is not), appended before any update; it
 * shares the clip norm's sums when clipping sees the raw gradients. */
tg_status tg_optim_append(tg_graph *g, const tg_optim *o, const int *param_grad, int accumulate, int loss, tg_writeback **wb, int *n_wb,
                       int *check);

/* Gradient accumulation: each param's gradient is added to a sum kept in
 * state "opt.<param>.acc" (restarted where the hyper vector's ACC_KEEP is
 * 0), and param_grad[p] becomes the sum. *wb receives the sums' writebacks
 * (malloc'd), all computed before the cut. */
tg_status tg_optim_accumulate(tg_graph *g, int *param_grad, tg_writeback **wb, int *n_wb);

/* True for a state leaf that carries training from one step to the next
 * (the optimizer's "opt.<param>.m/.v/.momentum", and whatever persistent
 * state later ops add): what a full checkpoint saves and a reset zeroes.
 * The leaves a step rewrites before it runs (hyperparameters, the random
 * seed) are not. */
bool tg_optim_is_carried(const tg_node *n);

/* sum(x * x) over every element of x, as a scalar node. */
int tg_optim_sumsq(tg_graph *g, int x);

/* TG_OK, or TG_ERR_ARG naming api and the field, for a schedule or optimizer
 * set by hand out of range (kind, milestones missing, negative steps or
 * start, non-finite values, a warmup chain that loops). */
tg_status tg_lr_check(const tg_lr *lr, const char *api);
/* A checked copy of a schedule, its chain and milestones in one malloc'd
 * block (free it with free): what a session keeps. */
tg_status tg_lr_copy(const tg_lr *src, tg_lr **out, const char *api);
tg_status tg_optim_check(const tg_optim *o, const char *api);

/* The hyperparameter vector for global step t (from 1), with the schedule
 * evaluated at schedule step s. */
void tg_optim_hyper(const tg_optim *o, const tg_lr *lr, int64_t t, int64_t s, float *hyper);
#endif
