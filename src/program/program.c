/* What every backend asks of a program (program.h): the nodes its fusion
 * pass must leave readable, and the error of a bad value found in a run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"
#include "../ir/model.h"

void tg_program_pinned(const tg_program *p, bool *pinned) {
    const tg_graph *g = p->g;
    if (p->result >= 0) pinned[p->result] = true;
    if (p->check >= 0) pinned[p->check] = true;
    for (int c = 0; c < g->n_caps; c++) pinned[g->caps[c].id] = true;
    for (int i = 0; i < p->n_params && !p->discard_grads; i++)
        if (p->param_grad[i] >= 0) pinned[p->param_grad[i]] = true;
    for (int w = 0; w < p->n_wb; w++) pinned[p->wb[w].src] = true;
}

bool tg_program_is_update(tg_opcode op) { return tg_ops[op].flags & TG_OPF_UPDATE; }

static const char *base_name(const char *path) {
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : (path ? path : "?");
}

void tg_program_node_site(const tg_program *p, int id, char *buf, size_t n) {
    const tg_node *nd = &p->g->nodes[id];
    if (nd->op == TG_OP_INPUT || nd->op == TG_OP_PARAM)
        snprintf(buf, n, "%s '%s'", nd->op == TG_OP_INPUT ? "input" : "param", nd->name ? nd->name : "?");
    else if (tg_program_is_update(nd->op))
        snprintf(buf, n, "the optimizer update");
    else if (nd->of_file)
        snprintf(buf, n, "the gradient of tg_%s (%s:%d)", nd->of_api, base_name(nd->of_file), nd->of_line);
    else /* the optimizer's own ops (clipping, the step check) and the backward's (gradient sums, recomputed values) */
        snprintf(buf, n, "%stg_%s (%s:%d)", p->cut < p->g->n && id >= p->cut ? "the optimizer: "
                                            : id >= p->first_bwd ? "the backward: " : "",
                 nd->api ? nd->api : tg_ops[nd->op].name, base_name(nd->file), nd->line);
}

tg_status tg_program_profile(tg_profile_setting *out) {
    *out = (tg_profile_setting){false, false, TG_PROFILE_RUN};
    const char *v = getenv("TG_PROFILE");
    if (!v || !*v || strcmp(v, "0") == 0) return TG_OK;
    tg_profile_setting s = {true, false, TG_PROFILE_RUN};
    for (const char *w = v; *w;) {
        size_t len = strcspn(w, ",");
        char *end = NULL;
        long run = len > 4 && strncmp(w, "run=", 4) == 0 ? strtol(w + 4, &end, 10) : 0;
        if (len == 1 && *w == '1') {
        } else if (len == 3 && strncmp(w, "all", 3) == 0) s.every = true;
        else if (run >= 1 && run <= 1000000000 && end == w + len) s.run = (int)run;
        else return tg_fail(TG_ERR_ARG, "TG_PROFILE=%.60s: '%.*s' is not one of its words: 1 (the slowest kernels), all "
                            "(every kernel), run=N (the run WebGPU times, from 1; default %d), comma-separated",
                            v, (int)(len < 40 ? len : 40), w, TG_PROFILE_RUN);
        w += len + (w[len] == ',');
    }
    *out = s;
    return TG_OK;
}

/* Where a bad value at node `id` goes: the first param gradient (lowest node
 * id, the order the step computes them) that depends on it, else the loss or
 * the result. Nodes are in topological order, so one forward sweep from id
 * marks everything downstream; run only when a step has already failed. */
static void numeric_reach(const tg_program *p, int id, char *out, size_t cap) {
    const tg_graph *g = p->g;
    bool *hit = tg_calloc((size_t)g->n, 1);
    out[0] = 0;
    if (!hit) return;
    hit[id] = true;
    for (int i = id + 1; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].nin && !hit[i]; j++) hit[i] = g->nodes[i].in[j] >= 0 && hit[g->nodes[i].in[j]];
    int best = -1;
    bool grads = false; /* a loss with gradients, not a forward-only result */
    for (int k = 0; k < p->n_params; k++) {
        int gid = p->param_grad[k];
        grads |= gid >= 0;
        if (gid >= 0 && hit[gid] && (best < 0 || gid < p->param_grad[best])) best = k;
    }
    const char *name = best >= 0 ? tg_model_param_name(g->model, best) : NULL;
    if (name)
        snprintf(out, cap, p->param_grad[best] == id ? "; it is the gradient of param '%s'"
                                                     : "; it reaches the gradient of param '%s' first", name);
    else if (p->result >= 0 && p->result != id && hit[p->result])
        snprintf(out, cap, "; it reaches the %s", grads ? "loss" : "result");
    free(hit);
}

tg_status tg_program_numeric_fail(const tg_program *p, int id, float v, int64_t at) {
    const tg_node *n = &p->g->nodes[id];
    char shape[96], what[300];
    tg_shape_str(n->shape, shape, sizeof shape);
    if (n->op == TG_OP_INPUT || n->op == TG_OP_PARAM)
        snprintf(what, sizeof what, "%s '%s' %s", n->op == TG_OP_INPUT ? "input" : "param", n->name, shape);
    else if (id == p->check)
        return tg_fail(TG_ERR_NUMERIC, "the loss or the global gradient norm is not finite (check_numerics names the "
                                       "op); the step's updates were not applied");
    else if (tg_program_is_update(n->op))
        snprintf(what, sizeof what, "the optimizer update %s %s", tg_ops[n->op].name, shape);
    else if (n->of_file)
        snprintf(what, sizeof what, "%s %s, in the gradient of tg_%s (%s:%d)", tg_ops[n->op].name, shape, n->of_api,
                 base_name(n->of_file), n->of_line);
    else
        snprintf(what, sizeof what, "tg_%s %s (%s:%d)", n->api ? n->api : tg_ops[n->op].name, shape,
                 base_name(n->file), n->line);
    char reach[200] = "";
    if (n->op != TG_OP_INPUT && n->op != TG_OP_PARAM && !tg_program_is_update(n->op))
        numeric_reach(p, id, reach, sizeof reach);
    return tg_fail(TG_ERR_NUMERIC, "%s at element %lld of %s%s; %s", v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf",
                   (long long)at, what, reach, p->n_wb ? "the step's updates were not applied" : "the run stopped there");
}
