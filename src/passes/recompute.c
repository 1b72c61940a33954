/* Rematerialization: a cheap forward value that the backward reads again
 * (a layer norm's output, read by the weight gradient of the matmul it
 * feeds) is computed a second time just before its first backward reader,
 * instead of being kept in memory across the whole forward and backward.
 *
 * Cost rule: only ops that cost one pass over their input (layer and RMS
 * norm), and only when every input is live at that point anyway (a param, or
 * a value the backward also reads there or later, as the norm's own
 * gradient reads x): then the copy adds a kernel but never extends what the
 * plan keeps, and the value it replaces stops being live after its last
 * forward reader. The copy is the same op on the same inputs, so it gives
 * the same bits, and losses and gradients do not change at all. */
#include <stdlib.h>
#include <stdatomic.h>

#include "passes.h"

static atomic_bool disabled;
void tg_pass_recompute_enable(bool on) { atomic_store(&disabled, !on); }

static bool cheap(const tg_node *n) {
    return (n->op == TG_OP_LAYER_NORM || n->op == TG_OP_RMS_NORM) && !n->name && !n->data;
}

tg_status tg_pass_recompute(tg_graph *g, int first_bwd, int *remap, int *n_copies) {
    int n = g->n;
    *n_copies = 0;
    for (int i = 0; i < n; i++) remap[i] = i;
    if (atomic_load(&disabled) || first_bwd <= 0 || first_bwd >= n) return TG_OK;
    int *at = tg_calloc((size_t)n + 1, sizeof(int));   /* per node: first backward reader, or n */
    int *lastr = tg_calloc((size_t)n + 1, sizeof(int)); /* per node: last reader, or -1 */
    int *copy = tg_calloc((size_t)n + 1, sizeof(int));  /* per recomputed node: its copy's new id */
    if (!at || !lastr || !copy) {
        free(at), free(lastr), free(copy);
        return tg_fail(TG_ERR_NOMEM, "recompute: out of memory");
    }
    for (int i = 0; i < n; i++) at[i] = n, lastr[i] = -1, copy[i] = -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int x = g->nodes[i].in[k];
            lastr[x] = i;
            if (i >= first_bwd && at[x] > i) at[x] = i;
        }
    int n_new = 0;
    for (int c = 0; c < first_bwd; c++) {
        const tg_node *nd = &g->nodes[c];
        if (!cheap(nd) || at[c] == n) {
            at[c] = n;
            continue;
        }
        bool live = true;
        for (int k = 0; k < nd->nin; k++) {
            int x = nd->in[k];
            live &= (tg_ops[g->nodes[x].op].flags & TG_OPF_LEAF) || lastr[x] >= at[c];
        }
        if (live) n_new++;
        else at[c] = n;
    }
    if (n_new == 0) {
        free(at), free(lastr), free(copy);
        return TG_OK;
    }
    tg_node *nodes = tg_calloc((size_t)(n + n_new), sizeof(tg_node));
    if (!nodes) {
        free(at), free(lastr), free(copy);
        return tg_fail(TG_ERR_NOMEM, "recompute: out of memory");
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < first_bwd; c++) /* copies go just before their first backward reader */
            if (at[c] == i) {
                tg_node cp = g->nodes[c];
                for (int k = 0; k < cp.nin; k++) cp.in[k] = remap[cp.in[k]];
                copy[c] = m;
                nodes[m++] = cp;
            }
        tg_node nd = g->nodes[i];
        for (int k = 0; k < nd.nin; k++) {
            int x = nd.in[k];
            nd.in[k] = i >= first_bwd && copy[x] >= 0 ? copy[x] : remap[x];
        }
        remap[i] = m;
        nodes[m++] = nd;
    }
    free(g->nodes);
    g->nodes = nodes;
    g->n = g->cap = m;
    for (int c = 0; c < g->n_caps; c++) g->caps[c].id = remap[g->caps[c].id];
    if (g->rng_seed >= 0) g->rng_seed = remap[g->rng_seed];
    for (int p = 0; p < g->n_param_node; p++)
        if (g->param_node[p] >= 0) g->param_node[p] = remap[g->param_node[p]];
    *n_copies = n_new;
    free(at), free(lastr), free(copy);
    return TG_OK;
}
