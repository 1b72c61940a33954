/* Adam, AdamW and SGD as graph ops, plus global gradient clipping and
 * per-param gradient normalization. Semantics follow upstream tensorgrad
 * (see the brief): the bias correction is folded into lrt on the host, so
 * eps is not bias-corrected. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "../ir/model.h"

tg_optim tg_adam(tg_lr lr) {
    tg_optim o = {0};
    o.kind = TG_OPT_ADAM;
    o.lr = lr;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    return o;
}

tg_optim tg_adamw(tg_lr lr, float wd) {
    tg_optim o = tg_adam(lr);
    o.kind = TG_OPT_ADAMW;
    o.weight_decay = wd;
    return o;
}

tg_optim tg_sgd(tg_lr lr, float momentum, bool nesterov, float wd) {
    tg_optim o = {0};
    o.kind = TG_OPT_SGD;
    o.lr = lr;
    o.momentum = momentum;
    o.nesterov = nesterov;
    o.weight_decay = wd;
    return o;
}

tg_status tg_optim_check(const tg_optim *o, const char *api) {
    if ((unsigned)o->kind > TG_OPT_SGD) return tg_fail(TG_ERR_ARG, "%s: optimizer: unknown kind %d", api, (int)o->kind);
    if (o->kind == TG_OPT_NONE) return TG_OK;
    float f[] = {o->beta1, o->beta2, o->eps, o->weight_decay, o->momentum, o->clip_grad_norm};
    const char *names[] = {"beta1", "beta2", "eps", "weight_decay", "momentum", "clip_grad_norm"};
    for (int i = 0; i < 6; i++)
        if (!isfinite(f[i])) return tg_fail(TG_ERR_ARG, "%s: optimizer %s is %g", api, names[i], f[i]);
    if (o->normalize_filter && !o->normalize_grads)
        return tg_fail(TG_ERR_ARG, "%s: optimizer normalize_filter is set but normalize_grads is false", api);
    if (!(o->ema_decay >= 0 && o->ema_decay < 1))
        return tg_fail(TG_ERR_ARG, "%s: optimizer ema_decay is %g, want 0 (none) or in (0, 1)", api, o->ema_decay);
    if (o->kind != TG_OPT_SGD && (o->beta1 < 0 || o->beta1 >= 1 || o->beta2 < 0 || o->beta2 >= 1 || o->eps < 0))
        return tg_fail(TG_ERR_ARG, "%s: Adam needs 0 <= beta1, beta2 < 1 and eps >= 0 (got %g, %g, %g)", api,
                       o->beta1, o->beta2, o->eps);
    return tg_lr_check(&o->lr, api);
}

bool tg_optim_is_carried(const tg_node *n) {
    return n->op == TG_OP_STATE && n->name && strcmp(n->name, TG_HYPER_NAME) != 0 &&
           strcmp(n->name, TG_RNG_SEED_NAME) != 0;
}

/* An update node's inputs; the caller sets its attributes and adds it. */
static tg_node update(tg_opcode op, int a, int b, int c, int d) {
    tg_node n = tg_ir_proto(op, NULL, IR_HERE);
    n.in[0] = a;
    n.in[1] = b;
    n.in[2] = c;
    n.in[3] = d;
    return n;
}

static int state(tg_graph *g, const char *param, const char *what, tg_shape s) {
    /* The whole name, at any length: cut to a fixed buffer, a long param
     * name gave its states (and those of params sharing the cut prefix) one
     * name, and every full checkpoint failed as a duplicate tensor. */
    size_t n = strlen(param) + strlen(what) + 6;
    char *name = malloc(n);
    if (!name) {
        if (g->err == TG_OK) {
            g->err = TG_ERR_NOMEM;
            snprintf(g->errmsg, sizeof g->errmsg, "out of memory naming the state of param '%.64s'", param);
        }
        return -1;
    }
    snprintf(name, n, "opt.%s.%s", param, what);
    int id = tg_ir_leaf(g, TG_OP_STATE, name, TG_F32, s, IR_HERE); /* the graph keeps a copy */
    free(name);
    return id;
}

/* The hyper vector's leaf: the one the graph has, or a new one. */
static int hyper_leaf(tg_graph *g) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == TG_OP_STATE && strcmp(g->nodes[i].name, TG_HYPER_NAME) == 0) return i;
    return tg_ir_leaf(g, TG_OP_STATE, TG_HYPER_NAME, TG_F32, (tg_shape){1, {TG_HYPER_N}}, IR_HERE);
}

/* Entry `slot` of the hyper vector as a 0-d tensor. */
static int hyper_at(tg_graph *g, int hyper, int slot) {
    tg_node n = tg_ir_proto(TG_OP_NARROW, NULL, IR_HERE);
    n.in[0] = hyper;
    n.at.axis.axis = 0;
    n.at.axis.start = slot;
    n.at.axis.len = 1;
    return tg_ir_reshape(g, tg_ir_add(g, &n), (tg_shape){0, {0}}, IR_HERE);
}

tg_status tg_optim_accumulate(tg_graph *g, int *param_grad, tg_writeback **wb_out, int *n_wb) {
    int np = g->n_param_node, n = 0;
    tg_writeback *wb = tg_calloc((size_t)np + 1, sizeof *wb);
    if (!wb) return tg_fail(TG_ERR_NOMEM, "optimizer: out of memory");
    int hyper = hyper_leaf(g);
    /* where, not a product: a sum left infinite by a failed round must not
     * leak into the next one as 0 * inf */
    int carry = tg_ir_binary(g, TG_OP_GREATER, hyper_at(g, hyper, TG_HYPER_ACC_KEEP), tg_ir_scalar(g, 0.5f, IR_HERE),
                             IR_HERE);
    int zero = tg_ir_scalar(g, 0.0f, IR_HERE);
    for (int p = 0; p < np && g->err == TG_OK; p++) {
        if (param_grad[p] < 0) continue;
        const tg_param_decl *d = &g->model->params[p];
        int acc = state(g, d->name, "acc", d->shape);
        tg_node w = tg_ir_proto(TG_OP_WHERE, NULL, IR_HERE);
        w.in[0] = carry;
        w.in[1] = acc;
        w.in[2] = zero;
        int sum = tg_ir_binary(g, TG_OP_ADD, param_grad[p], tg_ir_add(g, &w), IR_HERE);
        wb[n++] = (tg_writeback){sum, acc};
        param_grad[p] = sum;
    }
    if (g->err != TG_OK) {
        free(wb);
        return tg_fail(g->err, "optimizer: %s", g->errmsg);
    }
    *wb_out = wb;
    *n_wb = n;
    return TG_OK;
}

int tg_optim_sumsq(tg_graph *g, int x) {
    int sq = tg_ir_binary(g, TG_OP_MUL, x, x, IR_HERE);
    unsigned mask = (1u << g->nodes[x].shape.ndim) - 1;
    int s = mask ? tg_ir_reduce_sum(g, sq, mask, IR_HERE) : sq;
    return tg_ir_reshape(g, s, (tg_shape){0, {0}}, IR_HERE);
}

/* The sum of every gradient squared, as a scalar; -1 when none has one. */
static int total_sumsq(tg_graph *g, const int *grad, int np) {
    int total = -1;
    for (int p = 0; p < np; p++) {
        if (grad[p] < 0) continue;
        int s = tg_optim_sumsq(g, grad[p]);
        total = total < 0 ? s : tg_ir_binary(g, TG_OP_ADD, total, s, IR_HERE);
    }
    return total;
}

/* The moving average of param d after its update p2: keep * ema + take * p2. */
static tg_writeback ema(tg_graph *g, const tg_param_decl *d, int p2, int keep, int take) {
    int e = state(g, d->name, "ema", d->shape);
    int old = tg_ir_binary(g, TG_OP_MUL, e, keep, IR_HERE);
    return (tg_writeback){tg_ir_binary(g, TG_OP_ADD, old, tg_ir_binary(g, TG_OP_MUL, p2, take, IR_HERE), IR_HERE), e};
}

tg_status tg_optim_append(tg_graph *g, const tg_optim *o, const int *param_grad, int accumulate, int loss,
                       tg_writeback **wb_out, int *n_wb, int *check) {
    *wb_out = NULL;
    *n_wb = 0;
    *check = -1;
    if (o->kind == TG_OPT_NONE) return TG_OK;
    if ((unsigned)o->kind > TG_OPT_SGD) return tg_fail(TG_ERR_ARG, "optimizer: unknown kind %d", (int)o->kind);
    int np = g->n_param_node;
    int *grad = tg_calloc((size_t)np + 1, sizeof(int));
    tg_writeback *wb = tg_calloc((size_t)np * 4 + 1, sizeof *wb);
    if (!grad || !wb) {
        free(grad);
        free(wb);
        return tg_fail(TG_ERR_NOMEM, "optimizer: out of memory");
    }
    memcpy(grad, param_grad, sizeof(int) * (size_t)np);
    int inv = accumulate > 1 ? tg_ir_scalar(g, 1.0f / (float)accumulate, IR_HERE) : -1;
    for (int p = 0; p < np && inv >= 0; p++) /* the sums' mean: the whole batch's gradient */
        if (grad[p] >= 0) grad[p] = tg_ir_binary(g, TG_OP_MUL, grad[p], inv, IR_HERE);
    int hyper = hyper_leaf(g);
    int ema_keep = o->ema_decay > 0 ? hyper_at(g, hyper, TG_HYPER_EMA_KEEP) : -1;
    int ema_take = o->ema_decay > 0 ? hyper_at(g, hyper, TG_HYPER_EMA_TAKE) : -1;
    int raw_total = total_sumsq(g, grad, np), loss0 = tg_ir_binary(g, TG_OP_MUL, loss, tg_ir_scalar(g, 0, IR_HERE), IR_HERE);
    *check = raw_total < 0 ? loss0 : tg_ir_binary(g, TG_OP_ADD, loss0, raw_total, IR_HERE);

    if (o->normalize_grads) {
        int matched = 0, trained = 0;
        for (int p = 0; p < np; p++) {
            if (grad[p] < 0) continue;
            trained++;
            if (o->normalize_filter && !o->normalize_filter(g->model->params[p].name, o->filter_user)) continue;
            matched++;
            int norm = tg_ir_unary(g, TG_OP_SQRT, tg_optim_sumsq(g, grad[p]), IR_HERE);
            int den = tg_ir_binary(g, TG_OP_ADD, norm, tg_ir_scalar(g, 1e-8f, IR_HERE), IR_HERE);
            grad[p] = tg_ir_binary(g, TG_OP_DIV, grad[p], den, IR_HERE);
        }
        /* A filter that selects nothing is a typo in a name, not a recipe. */
        if (trained && !matched) {
            char names[300] = "";
            for (int p = 0, k = 0; p < np && k < (int)sizeof names - 1; p++)
                if (grad[p] >= 0)
                    k += snprintf(names + k, sizeof names - (size_t)k, "%s'%s'", k ? ", " : "",
                                  g->model->params[p].name);
            free(grad);
            free(wb);
            return tg_fail(TG_ERR_ARG, "optimizer: normalize_filter accepted none of the trained params (%s)", names);
        }
    }
    if (o->clip_grad_norm > 0) {
        int total = o->normalize_grads ? total_sumsq(g, grad, np) : raw_total;
        if (total >= 0) {
            /* scale = min(max_norm / (norm + 1e-6), 1) */
            int norm = tg_ir_unary(g, TG_OP_SQRT, total, IR_HERE);
            int den = tg_ir_binary(g, TG_OP_ADD, norm, tg_ir_scalar(g, 1e-6f, IR_HERE), IR_HERE);
            int r = tg_ir_binary(g, TG_OP_DIV, tg_ir_scalar(g, o->clip_grad_norm, IR_HERE), den, IR_HERE);
            int one = tg_ir_scalar(g, 1.0f, IR_HERE);
            tg_node w = {0};
            w.op = TG_OP_WHERE;
            w.nin = 3;
            w.in[0] = tg_ir_binary(g, TG_OP_LESS, r, one, IR_HERE);
            w.in[1] = r;
            w.in[2] = one;
            w.file = __FILE__;
            w.line = __LINE__;
            int scale = tg_ir_add(g, &w);
            for (int p = 0; p < np; p++)
                if (grad[p] >= 0) grad[p] = tg_ir_binary(g, TG_OP_MUL, grad[p], scale, IR_HERE);
        }
    }

    int k = 0;
    for (int p = 0; p < np && g->err == TG_OK; p++) {
        if (grad[p] < 0) continue;
        const tg_param_decl *d = &g->model->params[p];
        int pn = g->param_node[p];
        bool decayed = d->decay && (!o->decay_filter || o->decay_filter(d->name, o->filter_user));
        if (o->kind == TG_OPT_ADAM || o->kind == TG_OPT_ADAMW) {
            int m = state(g, d->name, "m", d->shape), v = state(g, d->name, "v", d->shape);
            tg_node u = update(TG_OP_ADAM_M, m, grad[p], -1, -1);
            u.at.adam.beta = o->beta1;
            int m2 = tg_ir_add(g, &u);
            u = update(TG_OP_ADAM_V, v, grad[p], -1, -1);
            u.at.adam.beta = o->beta2;
            int v2 = tg_ir_add(g, &u);
            u = update(TG_OP_ADAM_P, pn, m2, v2, hyper);
            u.at.adam.eps = o->eps;
            u.at.adam.decay = o->kind == TG_OPT_ADAMW && decayed;
            int p2 = tg_ir_add(g, &u);
            wb[k++] = (tg_writeback){m2, m};
            wb[k++] = (tg_writeback){v2, v};
            wb[k++] = (tg_writeback){p2, pn};
            if (ema_keep >= 0) wb[k++] = ema(g, d, p2, ema_keep, ema_take);
        } else {
            /* L2 decay follows the per-param flag, as AdamW's decoupled decay does */
            float wd = decayed ? o->weight_decay : 0.0f;
            int vel = pn;
            if (o->momentum > 0) {
                int v = state(g, d->name, "momentum", d->shape);
                tg_node u = update(TG_OP_SGD_V, v, grad[p], pn, hyper);
                u.at.sgd.momentum = o->momentum;
                u.at.sgd.weight_decay = wd;
                vel = tg_ir_add(g, &u);
                wb[k++] = (tg_writeback){vel, v};
            }
            tg_node u = update(TG_OP_SGD_P, pn, grad[p], vel, hyper);
            u.at.sgd.momentum = o->momentum;
            u.at.sgd.weight_decay = wd;
            u.at.sgd.nesterov = o->nesterov;
            u.at.sgd.has_momentum = o->momentum > 0;
            int p2 = tg_ir_add(g, &u);
            wb[k++] = (tg_writeback){p2, pn};
            if (ema_keep >= 0) wb[k++] = ema(g, d, p2, ema_keep, ema_take);
        }
    }
    free(grad);
    if (g->err != TG_OK) {
        free(wb);
        return tg_fail(g->err, "optimizer: %s", g->errmsg);
    }
    *wb_out = wb;
    *n_wb = k;
    return TG_OK;
}

void tg_optim_hyper(const tg_optim *o, const tg_lr *lr, int64_t t, int64_t s, float *h) {
    float lr_t = tg_lr_at(lr, s);
    memset(h, 0, sizeof(float) * TG_HYPER_N);
    h[TG_HYPER_LR] = lr_t;
    h[TG_HYPER_SHRINK] = 1.0f;
    h[TG_HYPER_EMA_KEEP] = t <= 1 ? 0.0f : o->ema_decay;
    h[TG_HYPER_EMA_TAKE] = t <= 1 ? 1.0f : 1.0f - o->ema_decay;
    if (o->kind == TG_OPT_ADAM || o->kind == TG_OPT_ADAMW) {
        double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
        h[TG_HYPER_LRT] = (float)(lr_t * sqrt(bc2) / bc1);
        if (o->kind == TG_OPT_ADAMW) h[TG_HYPER_SHRINK] = 1.0f - lr_t * o->weight_decay;
    }
}
