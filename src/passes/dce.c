/* Dead-code elimination. Graph order is topological, so one backward sweep
 * marks everything the roots need and one forward sweep compacts. */
#include <stdlib.h>

#include "passes.h"

tg_status tg_pass_dce(tg_graph *g, const int *roots, int n_roots, int *remap) {
    bool *live = tg_calloc((size_t)g->n + 1, sizeof(bool));
    if (!live) return tg_fail(TG_ERR_NOMEM, "dce: out of memory");
    for (int r = 0; r < n_roots; r++)
        if (roots[r] >= 0 && roots[r] < g->n) live[roots[r]] = true;
    for (int c = 0; c < g->n_caps; c++) live[g->caps[c].id] = true;
    for (int i = g->n - 1; i >= 0; i--) {
        tg_node *n = &g->nodes[i];
        if (n->op == TG_OP_PARAM || n->op == TG_OP_INPUT || n->op == TG_OP_STATE) live[i] = true;
        if (!live[i]) continue;
        for (int k = 0; k < n->nin; k++) live[n->in[k]] = true;
    }
    int m = 0;
    for (int i = 0; i < g->n; i++) {
        if (!live[i]) {
            remap[i] = -1;
            free(g->nodes[i].name);
            free(g->nodes[i].data);
            continue;
        }
        tg_node n = g->nodes[i];
        for (int k = 0; k < n.nin; k++) n.in[k] = remap[n.in[k]];
        remap[i] = m;
        g->nodes[m++] = n;
    }
    g->n = m;
    for (int c = 0; c < g->n_caps; c++) g->caps[c].id = remap[g->caps[c].id];
    if (g->rng_seed >= 0) g->rng_seed = remap[g->rng_seed];
    for (int p = 0; p < g->n_param_node; p++)
        if (g->param_node[p] >= 0) g->param_node[p] = remap[g->param_node[p]];
    free(live);
    return TG_OK;
}
