/* Reverse-mode autograd: walks the forward nodes from the loss back to the
 * leaves, calling each op's gradient rule and summing the cotangents of
 * tensors with several consumers. Backward ops are appended to the same
 * graph; work nobody needs (input gradients, frozen params) is left for DCE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad.h"
#include "rules.h"
#include "../ir/model.h"

/* Appends the backward of node `id` given its output cotangent `gy`; writes
 * the cotangent of each input to gx[i] (-1 for none). */
typedef void (*grad_rule)(tg_graph *g, int id, int gy, int *gx);

/* Each op's gradient rule, tg_grad_<grad> from its ops.def row; NULL (grad
 * none): not differentiable, a zero gradient. */
#define tg_grad_none NULL
static const grad_rule rules[TG_OP_COUNT] = {
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) [TG_OP_##OP] = tg_grad_##grad,
#include "../ir/ops.def"
};
_Static_assert(sizeof rules / sizeof rules[0] == TG_OP_COUNT, "one gradient rule per op");

/* The error for a loss L that is not one f32 value: where it was built
 * (the op and its caller's file:line, or the leaf's name) and what makes it
 * one (a reduction over every axis, or a cast). */
static tg_status loss_error(const tg_node *L) {
    char s[96], from[200];
    const char *file = L->file ? strrchr(L->file, '/') : NULL;
    file = file ? file + 1 : L->file ? L->file : "?";
    if (L->op == TG_OP_INPUT || L->op == TG_OP_PARAM)
        snprintf(from, sizeof from, "the %s '%s'", L->op == TG_OP_INPUT ? "input" : "param", L->name ? L->name : "?");
    else
        snprintf(from, sizeof from, "tg_%s (%s:%d)", L->api ? L->api : tg_ops[L->op].name, file, L->line);
    const char *fix = tg_ir_numel(L) != 1
                          ? "reduce it to one value, e.g. tg_mean(loss, TG_ALL, false) or tg_sum(loss, TG_ALL, false)"
                          : "make it f32 with tg_cast(loss, TG_F32)";
    return tg_fail(TG_ERR_SHAPE, "the loss must be a single f32 value, got %s %s from %s; %s", tg_dtype_name(L->dtype),
                   tg_shape_str(L->shape, s, sizeof s), from, fix);
}

tg_status tg_grad_append(tg_graph *g, int loss, int *param_grad) {
    int n_fwd = g->n;
    for (int p = 0; p < g->n_param_node; p++) param_grad[p] = -1;
    if (loss < 0 || loss >= n_fwd) return tg_fail(TG_ERR_ARG, "grad: the loss is not a tensor of this graph");
    const tg_node *L = &g->nodes[loss];
    if (L->dtype != TG_F32 || tg_ir_numel(L) != 1) return loss_error(L);

    /* needs[i]: node i depends on a trainable param, so its cotangent matters. */
    bool *needs = tg_calloc((size_t)n_fwd, sizeof(bool));
    int *cot = tg_calloc((size_t)n_fwd, sizeof(int));
    if (!needs || !cot) {
        free(needs);
        free(cot);
        return tg_fail(TG_ERR_NOMEM, "grad: out of memory");
    }
    for (int i = 0; i < n_fwd; i++) {
        const tg_node *n = &g->nodes[i];
        cot[i] = -1;
        if (n->op == TG_OP_PARAM) needs[i] = !g->model->params[n->param].frozen;
        for (int k = 0; k < n->nin; k++) needs[i] |= needs[n->in[k]];
        if (n->dtype != TG_F32) needs[i] = false;
    }

    tg_node one = tg_ir_proto(TG_OP_CONST, NULL, IR_HERE);
    one.dtype = TG_F32;
    one.shape = L->shape;
    one.at.fill.value = 1.0f;
    cot[loss] = tg_ir_add(g, &one);

    for (int i = loss; i >= 0 && g->err == TG_OK; i--) {
        const tg_node *n = &g->nodes[i];
        if (cot[i] < 0 || !needs[i] || !rules[n->op]) continue;
        int gx[TG_MAX_IN] = {-1, -1, -1, -1};
        int before = g->n;
        rules[n->op](g, i, cot[i], gx);
        for (int k = before; k < g->n; k++) {
            const tg_node *f = &g->nodes[i];
            g->nodes[k].of_api = f->api ? f->api : tg_ops[f->op].name;
            g->nodes[k].of_file = f->file;
            g->nodes[k].of_line = f->line;
        }
        /* The rule, and the adds below, may grow (move) the node array: copy
         * the inputs first. */
        int nin = g->nodes[i].nin;
        int32_t ins[TG_MAX_IN];
        memcpy(ins, g->nodes[i].in, sizeof ins);
        for (int k = 0; k < nin; k++) {
            int x = ins[k];
            if (gx[k] < 0 || !needs[x]) continue;
            cot[x] = cot[x] < 0 ? gx[k] : tg_ir_binary(g, TG_OP_ADD, cot[x], gx[k], IR_HERE);
        }
    }
    for (int i = 0; i < n_fwd; i++) {
        const tg_node *n = &g->nodes[i];
        if (n->op == TG_OP_PARAM && needs[i]) param_grad[n->param] = cot[i];
    }
    free(needs);
    free(cot);
    if (g->err != TG_OK) return tg_fail(g->err, "grad: %s", g->errmsg);
    return TG_OK;
}
