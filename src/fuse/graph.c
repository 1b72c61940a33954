/* The reader lists every fusion pass walks (see fuse.h). */
#include <stdlib.h>

#include "fuse.h"

tg_status tg_fuse_graph_init(tg_fuse_graph *x, const tg_graph *g, const tg_fusion *f, const bool *pinned) {
    int n_edges = 0;
    for (int i = 0; i < g->n; i++) n_edges += g->nodes[i].nin;
    *x = (tg_fuse_graph){g, f, pinned, tg_calloc((size_t)g->n + 2, sizeof(int)), tg_calloc((size_t)n_edges + 1, sizeof(int))};
    int *fill = tg_calloc((size_t)g->n + 1, sizeof(int));
    if (!x->rd0 || !x->rd || !fill) {
        free(fill);
        tg_fuse_graph_free(x);
        return tg_fail(TG_ERR_NOMEM, "fuse: out of memory");
    }
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) x->rd0[g->nodes[i].in[k] + 1]++;
    for (int i = 0; i < g->n; i++) x->rd0[i + 1] += x->rd0[i], fill[i] = x->rd0[i];
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) x->rd[fill[g->nodes[i].in[k]]++] = i;
    free(fill);
    return TG_OK;
}

void tg_fuse_graph_free(tg_fuse_graph *x) {
    free(x->rd0), free(x->rd);
    x->rd0 = x->rd = NULL;
}

int tg_fuse_ready_at(const tg_fuse_graph *x, int id) {
    while (tg_fuse_is_view(x, id)) id = tg_fuse_node(x, id)->in[0];
    return tg_fusion_at(x->f, id);
}

/* The readers of v's value through views: every read (once), or each
 * reader once; the views passed through counted in *nv, the first vcap
 * listed in views. */
static int readers_of(const tg_fuse_graph *x, int v, bool once, int *out, int cap, int *views, int *nv, int vcap) {
    int n = 0;
    for (int r = x->rd0[v]; r < x->rd0[v + 1]; r++) {
        int j = x->rd[r];
        if (once && r > x->rd0[v] && j == x->rd[r - 1]) continue; /* the lists are in node order */
        if (tg_fuse_is_view(x, j)) {
            if (views && *nv < vcap) views[*nv] = j;
            if (nv) ++*nv;
            n += readers_of(x, j, once, out ? out + n : NULL, cap > n ? cap - n : 0, views, nv, vcap);
        } else {
            if (out && n < cap) out[n] = j;
            n++;
        }
    }
    return n;
}

bool tg_fuse_ready_before(const tg_fuse_graph *x, int v, int t) {
    while (tg_fuse_is_view(x, v)) v = tg_fuse_node(x, v)->in[0];
    return (tg_ops[tg_fuse_node(x, v)->op].flags & (TG_OPF_LEAF | TG_OPF_CONSTANT)) || tg_fusion_at(x->f, v) < t;
}

int tg_fuse_value_readers(const tg_fuse_graph *x, int v, int *out, int cap) {
    return readers_of(x, v, false, out, cap, NULL, NULL, 0);
}

int tg_fuse_readers_once(const tg_fuse_graph *x, int v, int *out, int cap, int *views, int *n_views, int vcap) {
    int nv = 0, n = readers_of(x, v, true, out, cap, views, &nv, vcap);
    if (n_views) *n_views = nv;
    return n;
}
