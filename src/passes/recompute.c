/* Rematerialization: a cheap forward value that the backward reads again
 * (a layer norm's output, read by the weight gradient of the matmul it
 * feeds) is computed a second time just before its first backward reader,
 * instead of being kept in memory across the whole forward and backward.
 *
 * Cost rule: only ops that cost one pass over their output (ops.def's REMAT:
 * layer and RMS norms, embedding lookups, adds: a transformer's token plus
 * position embedding), and only when every input is live at that point anyway (a
 * leaf, or a value the backward also reads there or later, as a norm's own
 * gradient reads x) or is itself computed again there. Then the
 * copies add kernels but never extend what the plan keeps, and each value
 * they replace stops being live after its last forward reader. A copy is
 * the same op on the same inputs, so it gives the same bits, and losses and
 * gradients do not change at all. */
#include <stdlib.h>
#include <stdatomic.h>

#include "passes.h"

static atomic_bool disabled;
void tg_pass_recompute_enable(bool on) { atomic_store(&disabled, !on); }

/* ops.def's REMAT ops, computed from other nodes (not a named or literal leaf) */
static bool cheap(const tg_node *n) { return (tg_ops[n->op].flags & TG_OPF_REMAT) && !n->name && !n->data; }

typedef struct {
    const tg_graph *g;
    int n;
    int *at;     /* per node: the turn by which its copy must be ready (its first backward reader,
                  * or an earlier copy that reads it), n for none */
    int *lastr;  /* per node: its last reader, -1 for none */
    bool *again; /* per node: computed again */
} remat;

static bool leaf(const remat *r, int x) { return tg_ops[r->g->nodes[x].op].flags & TG_OPF_LEAF; }

/* Copy x (computed again) is needed by turn t: so are the copies it reads. */
static void need_by(remat *r, int x, int t) {
    if (!r->again[x] || r->at[x] <= t) return;
    r->at[x] = t;
    for (int k = 0; k < r->g->nodes[x].nin; k++) need_by(r, r->g->nodes[x].in[k], t);
}

/* Whether node x can be had at turn t without keeping anything longer: a
 * leaf, live there anyway (its own backward readers keep it), computed
 * again already, or cheap and MAP with inputs that can (then, when `mark`,
 * it is computed again by t). Ops over whole rows (norms) are not chained:
 * their inputs are the residual stream, which the backward keeps. */
static bool available(remat *r, int x, int t, bool mark) {
    if (leaf(r, x) || r->lastr[x] >= t) {
        if (mark && r->at[x] > t && !leaf(r, x)) r->at[x] = t; /* if x is computed again, its copy is read from t */
        return true;
    }
    if (r->again[x]) {
        if (mark) need_by(r, x, t);
        return true;
    }
    const tg_node *nd = &r->g->nodes[x];
    if (!cheap(nd) || !(tg_ops[nd->op].flags & TG_OPF_MAP)) return false;
    for (int k = 0; k < nd->nin; k++)
        if (!available(r, nd->in[k], t, false)) return false;
    if (mark) { /* by t, or by its own first backward reader if that is earlier */
        r->again[x] = true;
        if (r->at[x] > t) r->at[x] = t;
        for (int k = 0; k < nd->nin; k++) available(r, nd->in[k], r->at[x], true);
    }
    return true;
}

/* Decides which forward nodes are computed again and by when (r->again,
 * r->at). Readers come before their inputs, so when an input is decided it
 * knows the earliest copy that reads it. */
static int choose(remat *r, int first_bwd) {
    const tg_graph *g = r->g;
    int n_new = 0;
    for (int c = first_bwd - 1; c >= 0; c--) {
        const tg_node *nd = &g->nodes[c];
        if (r->again[c] || !cheap(nd) || r->at[c] == r->n) continue;
        bool ok = true;
        for (int k = 0; k < nd->nin && ok; k++) ok = available(r, nd->in[k], r->at[c], false);
        if (!ok) continue;
        r->again[c] = true;
        for (int k = 0; k < nd->nin; k++) available(r, nd->in[k], r->at[c], true);
    }
    for (int c = 0; c < first_bwd; c++) n_new += r->again[c];
    return n_new;
}

tg_status tg_pass_recompute(tg_graph *g, int first_bwd, int *remap, int *n_copies) {
    int n = g->n;
    *n_copies = 0;
    for (int i = 0; i < n; i++) remap[i] = i;
    if (atomic_load(&disabled) || first_bwd <= 0 || first_bwd >= n) return TG_OK;
    remat r = {g, n, tg_calloc((size_t)n + 1, sizeof(int)), tg_calloc((size_t)n + 1, sizeof(int)),
               tg_calloc((size_t)n + 1, sizeof(bool))};
    int *copy = tg_calloc((size_t)n + 1, sizeof(int)); /* per recomputed node: its copy's new id */
    if (!r.at || !r.lastr || !r.again || !copy) {
        free(r.at), free(r.lastr), free(r.again), free(copy);
        return tg_fail(TG_ERR_NOMEM, "recompute: out of memory");
    }
    for (int i = 0; i < n; i++) r.at[i] = n, r.lastr[i] = -1, copy[i] = -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int x = g->nodes[i].in[k];
            r.lastr[x] = i;
            if (i >= first_bwd && r.at[x] > i) r.at[x] = i;
        }
    int n_new = choose(&r, first_bwd);
    tg_node *nodes = n_new ? tg_calloc((size_t)(n + n_new), sizeof(tg_node)) : NULL;
    if (n_new && !nodes) {
        free(r.at), free(r.lastr), free(r.again), free(copy);
        return tg_fail(TG_ERR_NOMEM, "recompute: out of memory");
    }
    int m = 0;
    for (int i = 0; i < n && n_new; i++) {
        /* Copies go just before the turn they are needed by, inputs first. */
        for (int c = 0; c < first_bwd; c++)
            if (r.again[c] && r.at[c] == i) {
                tg_node cp = g->nodes[c];
                for (int k = 0; k < cp.nin; k++) cp.in[k] = copy[cp.in[k]] >= 0 ? copy[cp.in[k]] : remap[cp.in[k]];
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
    free(r.at), free(r.lastr), free(r.again), free(copy);
    if (!n_new) return TG_OK;
    free(g->nodes);
    g->nodes = nodes;
    g->n = g->cap = m;
    for (int c = 0; c < g->n_caps; c++) g->caps[c].id = remap[g->caps[c].id];
    if (g->rng_seed >= 0) g->rng_seed = remap[g->rng_seed];
    for (int p = 0; p < g->n_param_node; p++)
        if (g->param_node[p] >= 0) g->param_node[p] = remap[g->param_node[p]];
    *n_copies = n_new;
    return TG_OK;
}
