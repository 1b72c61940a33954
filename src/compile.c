/* The compile pipeline: trace -> grad -> optimizer -> passes (DCE, then
 * rematerialization) -> the backend's fusion pass -> plan. Each step is a
 * function of the previous one's data; the backend takes the resulting
 * program from there. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "build/model.h"
#include "grad/rules.h"
#include "passes/passes.h"

void program_free(tg_program *p) {
    if (!p) return;
    tg_graph_free(p->g);
    plan_free(&p->plan);
    tg_fusion_free(p->fusion);
    free(p->param_grad);
    free(p->wb);
    free(p);
}

static tg_status trace(const tg_compile_req *req, tg_program *p) {
    tg_graph *g = p->g;
    for (int i = 0; i < req->n_inputs; i++) {
        const tg_input_decl *d = &req->inputs[i];
        if (!d->name) return tg_fail(TG_ERR_ARG, "compile: input %d has no name", i);
        tg_input_new_at(g, d->name, d->dtype, d->shape, "input declaration", i);
    }
    if (g->err != TG_OK) return tg_fail(g->err, "%s", g->errmsg);
    tg_graph *prev = ir_trace_begin(g);
    tg_tensor r = req->fn(g, req->user);
    ir_trace_end(prev);
    if (g->err != TG_OK) return tg_fail(g->err, "%s", g->errmsg);
    if (r.g != g || r.id < 0 || r.id >= g->n)
        return tg_fail(TG_ERR_ARG, "compile: the traced function returned a tensor that is not from its graph");
    p->result = r.id;
    return TG_OK;
}

/* Node ids the program holds, after a pass renumbered the graph. */
static void remap_program(tg_program *p, const int *remap) {
    p->result = remap[p->result];
    for (int w = 0; w < p->n_wb; w++) p->wb[w] = (tg_writeback){remap[p->wb[w].src], remap[p->wb[w].dst]};
    for (int i = 0; i < p->n_params; i++)
        if (p->param_grad[i] >= 0) p->param_grad[i] = remap[p->param_grad[i]];
}

tg_status program_build(const tg_compile_req *req, tg_program **out) {
    *out = NULL;
    if (!req->model || !req->fn) return tg_fail(TG_ERR_ARG, "compile: model and function are required");
    if (tg_model_status(req->model) != TG_OK) return req->model->err;
    tg_program *p = tg_calloc(1, sizeof *p);
    if (!p) return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    p->n_params = tg_model_param_count(req->model);
    p->hyper = -1;
    p->g = ir_graph_new(req->model);
    p->param_grad = tg_calloc((size_t)p->n_params + 1, sizeof(int));
    if (!p->g || !p->param_grad) {
        program_free(p);
        return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    }
    for (int i = 0; i < p->n_params; i++) p->param_grad[i] = -1;
    tg_status s = trace(req, p);
    int n_fwd = p->g->n;
    bool train = req->optim && req->optim->kind != TG_OPT_NONE;
    if (s == TG_OK && (train || req->grads)) s = grad_append(p->g, p->result, p->param_grad);
    if (s == TG_OK && train) s = optim_append(p->g, req->optim, p->param_grad, &p->wb, &p->n_wb);
    if (s != TG_OK) {
        program_free(p);
        return s;
    }

    /* Roots: the result, writeback sources, and (with no optimizer to consume
     * them) the grads the caller asked for. */
    int n_roots = 0, *roots = tg_calloc((size_t)(1 + p->n_wb + p->n_params), sizeof(int));
    int *remap = tg_calloc((size_t)p->g->n + 1, sizeof(int));
    if (!roots || !remap) {
        free(roots), free(remap), program_free(p);
        return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
    }
    roots[n_roots++] = p->result;
    for (int w = 0; w < p->n_wb; w++) roots[n_roots++] = p->wb[w].src;
    if (!train)
        for (int i = 0; i < p->n_params; i++) roots[n_roots++] = p->param_grad[i];
    s = pass_dce(p->g, roots, n_roots, remap);
    if (s == TG_OK) {
        remap_program(p, remap);
        /* The forward is what survived of the traced nodes: they come first. */
        int first_bwd = 0;
        for (int i = 0; i < n_fwd; i++) first_bwd += remap[i] >= 0;
        int n_copies = 0;
        if (train || req->grads) s = pass_recompute(p->g, first_bwd, remap, &n_copies);
        if (s == TG_OK && n_copies) remap_program(p, remap);
    }
    for (int i = 0; s == TG_OK && i < p->g->n; i++)
        if (p->g->nodes[i].op == TG_OP_STATE && strcmp(p->g->nodes[i].name, TG_HYPER_NAME) == 0) p->hyper = i;
    free(roots);
    free(remap);

    if (s == TG_OK && req->fuse) s = req->fuse(p, &p->fusion);
    if (s == TG_OK) {
        int *outs = tg_calloc((size_t)p->g->n_caps + 1, sizeof(int));
        if (!outs) {
            program_free(p);
            return tg_fail(TG_ERR_NOMEM, "compile: out of memory");
        }
        outs[0] = p->result;
        for (int c = 0; c < p->g->n_caps; c++) outs[c + 1] = p->g->caps[c].id;
        tg_plan_req pr = {p->param_grad, p->n_params, outs, 1 + p->g->n_caps, p->wb, p->n_wb, req->align,
                          req->param_offset, false, p->fusion};
        s = plan_build(p->g, &pr, &p->plan);
        free(outs);
    }
    if (s != TG_OK) {
        program_free(p);
        return s;
    }
    ir_seal(p->g);
    *out = p;
    return TG_OK;
}
