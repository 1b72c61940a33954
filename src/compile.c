/* The compile pipeline: trace -> grad -> optimizer -> passes (DCE, then
 * rematerialization) -> the backend's fusion pass -> plan. Each step is a
 * function of the previous one's data; the backend takes the resulting
 * program (program/program.h) from there. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "ir/model.h"
#include "grad/grad.h"
#include "passes/passes.h"

void tg_program_free(tg_program *p) {
    if (!p) return;
    if (p->dp) p->dp->free(p->dp);
    tg_graph_free(p->g);
    tg_plan_free(&p->plan);
    tg_fusion_free(p->fusion);
    free(p->param_grad);
    free(p->wb);
    free(p->in);
    free(p);
}

/* Reads the final graph (after the passes renumbered it), so the node ids
 * are the plan's: a step then finds each feed's buffer without a scan. */
static tg_status input_table(tg_program *p) {
    const tg_graph *g = p->g;
    for (int i = 0; i < g->n; i++) p->n_in += g->nodes[i].op == TG_OP_INPUT;
    if (!(p->in = tg_calloc((size_t)p->n_in + 1, sizeof *p->in)))
        return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    for (int i = 0, k = 0; i < g->n; i++)
        if (g->nodes[i].op == TG_OP_INPUT) p->in[k++] = (tg_program_input){g->nodes[i].name, i, 0};
    return TG_OK;
}

static tg_status trace(const tg_compile_req *req, tg_program *p) {
    tg_graph *g = p->g;
    for (int i = 0; i < req->n_inputs; i++) {
        const tg_input_decl *d = &req->inputs[i];
        if (!d->name) return tg_fail(TG_ERR_ARG, "compile: input %d has no name", i);
        tg_input_new_at(g, d->name, d->dtype, d->shape, "input declaration", i);
    }
    if (g->err != TG_OK) return tg_fail(g->err, "%s", g->errmsg);
    tg_graph *prev = tg_ir_trace_begin(g);
    tg_tensor r = req->fn(g, req->user);
    tg_ir_trace_end(prev);
    /* The params arena was laid out for the params the model had: one the
     * function declared has no place in it (a session's init would write it
     * past the arena's end). */
    if (tg_model_param_count(req->model) != p->n_params)
        return tg_fail(TG_ERR_STATE, "compile: the traced function declared params (the model had %d, now %d): "
                       "declare every param before making the session", p->n_params,
                       tg_model_param_count(req->model));
    if (g->err != TG_OK) return tg_fail(g->err, "%s", g->errmsg);
    if (r.g != g || r.id < 0 || r.id >= g->n)
        return tg_fail(TG_ERR_ARG, "compile: the traced function returned a tensor that is not from its graph");
    p->result = r.id;
    return tg_ir_build_tables(g);
}

/* The writebacks of a training program: the values the trace asked to
 * carry to the next step (running statistics) and the gradient sums of an
 * accumulation, computed before the cut, then the optimizer's (already in
 * p->wb). A forward program computes the values and keeps nothing. */
static tg_status writebacks(tg_program *p, const tg_writeback *acc, int n_acc) {
    tg_graph *g = p->g;
    int n_pre = g->n_upd + n_acc;
    if (!n_pre) return TG_OK;
    tg_writeback *wb = tg_calloc((size_t)(n_pre + p->n_wb) + 1, sizeof *wb);
    if (!wb) return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    for (int i = 0; i < g->n_upd; i++) wb[i] = (tg_writeback){g->upd[i].src, g->upd[i].dst};
    for (int i = 0; i < n_acc; i++) wb[g->n_upd + i] = acc[i];
    for (int w = 0; w < p->n_wb; w++) {
        for (int i = 0; i < g->n_upd; i++)
            if (p->wb[w].dst == g->upd[i].dst) {
                free(wb);
                return tg_fail(TG_ERR_ARG, "compile: param '%s' is both trained and updated by the trace (freeze it: "
                               "tg_model_freeze)", g->nodes[g->upd[i].dst].name);
            }
        wb[n_pre + w] = p->wb[w];
    }
    free(p->wb);
    p->wb = wb;
    p->n_wb += n_pre;
    return TG_OK;
}

/* Node ids the program holds, after a pass renumbered the graph. */
static void remap_program(tg_program *p, const int *remap) {
    p->result = remap[p->result];
    if (p->check >= 0) p->check = remap[p->check];
    for (int w = 0; w < p->n_wb; w++) p->wb[w] = (tg_writeback){remap[p->wb[w].src], remap[p->wb[w].dst]};
    for (int i = 0; i < p->n_params; i++)
        if (p->param_grad[i] >= 0) p->param_grad[i] = remap[p->param_grad[i]];
}

tg_status tg_program_build(const tg_compile_req *req, tg_program **out) {
    *out = NULL;
    if (!req->model || !req->fn) return tg_fail(TG_ERR_ARG, "compile: model and function are required");
    if (tg_model_status(req->model) != TG_OK) return req->model->err;
    tg_program *p = tg_calloc(1, sizeof *p);
    if (!p) return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    p->n_params = tg_model_param_count(req->model);
    p->hyper = -1;
    p->check = -1;
    p->g = tg_ir_graph_new(req->model);
    p->param_grad = tg_calloc((size_t)p->n_params + 1, sizeof(int));
    if (!p->g || !p->param_grad) {
        tg_program_free(p);
        return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    }
    for (int i = 0; i < p->n_params; i++) p->param_grad[i] = -1;
    bool train = req->optim && req->optim->kind != TG_OPT_NONE;
    p->discard_grads = req->discard_grads && train;
    p->check_each = req->check_each;
    tg_status s = trace(req, p);
    if (s == TG_OK) tg_pass_one_hot_products(p->g);
    int n_fwd = p->g->n;
    if (s == TG_OK && (train || req->grads)) s = tg_grad_append(p->g, p->result, p->param_grad);
    tg_writeback *acc = NULL;
    int n_acc = 0;
    if (s == TG_OK && train && req->accumulate > 1) s = tg_optim_accumulate(p->g, p->param_grad, &acc, &n_acc);
    int n_bwd = p->g->n; /* the optimizer's nodes come after this */
    if (s == TG_OK && train)
        s = tg_optim_append(p->g, req->optim, p->param_grad, req->accumulate, p->result, &p->wb, &p->n_wb, &p->check);
    if (s == TG_OK && req->optim) s = writebacks(p, acc, n_acc);
    free(acc);
    if (s != TG_OK) {
        tg_program_free(p);
        return s;
    }

    /* Roots: the result, writeback sources, and (with no optimizer to consume
     * them) the grads the caller asked for. */
    int n_roots = 0, *roots = tg_calloc((size_t)(2 + p->n_wb + p->n_params), sizeof(int));
    int *remap = tg_calloc((size_t)p->g->n + 1, sizeof(int));
    if (!roots || !remap) {
        free(roots), free(remap), tg_program_free(p);
        return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    }
    roots[n_roots++] = p->result;
    if (p->check >= 0) roots[n_roots++] = p->check;
    for (int w = 0; w < p->n_wb; w++) roots[n_roots++] = p->wb[w].src;
    if (!train)
        for (int i = 0; i < p->n_params; i++) roots[n_roots++] = p->param_grad[i];
    s = tg_pass_dce(p->g, roots, n_roots, remap);
    if (s == TG_OK) {
        remap_program(p, remap);
        /* The forward is what survived of the traced nodes: they come first. */
        int first_bwd = 0, cut = 0, n_old = p->g->n;
        for (int i = 0; i < n_fwd; i++) first_bwd += remap[i] >= 0;
        for (int i = 0; i < n_bwd; i++) cut += remap[i] >= 0;
        p->first_bwd = first_bwd;
        int n_copies = 0;
        if (train || req->grads) s = tg_pass_recompute(p->g, first_bwd, remap, &n_copies);
        if (s == TG_OK && n_copies) remap_program(p, remap);
        /* Copies go just before their first reader: before the cut when that
         * reader is before it. */
        p->cut = !train ? p->g->n : n_copies && cut < n_old ? remap[cut] : cut < n_old ? cut : p->g->n;
    }
    p->first_update = p->g->n;
    for (int i = 0; s == TG_OK && i < p->g->n; i++) {
        if (p->g->nodes[i].op == TG_OP_STATE && strcmp(p->g->nodes[i].name, TG_HYPER_NAME) == 0) p->hyper = i;
        if (tg_program_is_update(p->g->nodes[i].op) && i < p->first_update) p->first_update = i;
    }
    free(roots);
    free(remap);

    if (s == TG_OK && req->fuse) s = req->fuse(p, &p->fusion);
    if (s == TG_OK) {
        int *outs = tg_calloc((size_t)p->g->n_caps + 2, sizeof(int));
        if (!outs) {
            tg_program_free(p);
            return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
        }
        int n_outs = 0;
        outs[n_outs++] = p->result;
        if (p->check >= 0) outs[n_outs++] = p->check;
        for (int c = 0; c < p->g->n_caps; c++) outs[n_outs++] = p->g->caps[c].id;
        tg_plan_req pr = {p->param_grad, p->n_params, outs, n_outs, p->wb, p->n_wb, req->align,
                          req->param_offset, false, p->fusion, p->discard_grads};
        s = tg_plan_build(p->g, &pr, &p->plan);
        free(outs);
    }
    if (s == TG_OK) s = input_table(p);
    if (s != TG_OK) {
        tg_program_free(p);
        return s;
    }
    tg_ir_seal(p->g);
    *out = p;
    return TG_OK;
}
