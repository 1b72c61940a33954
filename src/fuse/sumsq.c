/* A clip norm's total and the scalars after it (see fuse.h): which nodes
 * one kernel computing every sum of squares can take, decided from the
 * graph alone. */
#include <stdlib.h>

#include "fuse.h"

static int unview(const tg_fuse_graph *x, int v) {
    while (tg_fuse_is_view(x, v)) v = tg_fuse_node(x, v)->in[0];
    return v;
}

static bool taken(const tg_fuse_hooks *h, int v) { return h && h->taken && h->taken(v, h->ctx); }

/* Whether t (through views) is a term, or a one-element add of such trees;
 * its adds appended to tree[*n]. */
static bool tree_of_terms(const tg_fuse_graph *x, const tg_fuse_hooks *h, int t, const bool *is_term, int *tree, int *n) {
    t = unview(x, t);
    if (is_term[t]) return true;
    const tg_node *a = tg_fuse_node(x, t);
    if (a->op != TG_OP_ADD || tg_ir_numel(a) != 1 || !tg_fuse_free(x, t) || taken(h, t) || *n >= x->g->n) return false;
    tree[(*n)++] = t;
    return tree_of_terms(x, h, a->in[0], is_term, tree, n) && tree_of_terms(x, h, a->in[1], is_term, tree, n);
}

/* The largest tree above term s: climbing its chain of one-element adds,
 * stopping below an add that also takes something else (the step check
 * adds the loss times zero to the total). Its root, or -1. */
static int climb(const tg_fuse_graph *x, const tg_fuse_hooks *h, int s, const bool *is_term, int *tree, int *n) {
    int t = s, rd[2];
    for (;;) {
        if (x->pinned[t] || tg_fuse_readers_once(x, t, rd, 2, NULL, NULL, 0) != 1) break;
        *n = 0;
        if (!tree_of_terms(x, h, rd[0], is_term, tree, n)) break;
        t = rd[0];
    }
    *n = 0;
    if (t == s || !tree_of_terms(x, h, t, is_term, tree, n)) return -1;
    for (int q = 0; q < *n; q++) /* inner adds: read only inside the tree */
        if (tree[q] != t && (x->pinned[tree[q]] || tg_fuse_readers_once(x, tree[q], NULL, 0, NULL, NULL, 0) != 1)) return -1;
    return t;
}

tg_status tg_fuse_match_sumsq_total(const tg_fuse_graph *x, const tg_fuse_hooks *h, tg_sumsq_match *m) {
    int n = x->g->n;
    *m = (tg_sumsq_match){tg_calloc((size_t)n + 1, sizeof(tg_sumsq_term)), 0, tg_calloc((size_t)n + 1, sizeof(int)), 0, -1, -1};
    bool *is_term = tg_calloc((size_t)n + 1, sizeof(bool));
    if (!m->term || !m->tree || !is_term) {
        free(is_term);
        tg_sumsq_match_free(m);
        return tg_fail(TG_ERR_NOMEM, "fuse: out of memory");
    }
    for (int s = 0; s < n; s++) {
        int sq = tg_fuse_match_sumsq(x, s);
        if (sq < 0 || taken(h, s) || taken(h, sq)) continue;
        is_term[s] = true;
        m->term[m->n_term++] = (tg_sumsq_term){s, sq, tg_fuse_node(x, sq)->in[0], true};
    }
    for (int q = 0; q < m->n_term && m->n_term > 1 && m->total < 0; q++)
        m->total = climb(x, h, m->term[q].sum, is_term, m->tree, &m->n_tree);
    if (m->total < 0) m->n_tree = 0;
    int nt = 0;
    for (int q = 0; q < m->n_term; q++) { /* with a tree, only its terms */
        bool in_tree = m->total < 0;
        for (int i = 0; i < m->n_tree && !in_tree; i++)
            for (int k = 0; k < 2; k++) in_tree |= unview(x, tg_fuse_node(x, m->tree[i])->in[k]) == m->term[q].sum;
        if (!in_tree) continue;
        tg_sumsq_term t = m->term[q];
        /* a term is stored if anything outside the tree reads it */
        t.store = m->total < 0 || x->pinned[t.sum] || tg_fuse_readers_once(x, t.sum, NULL, 0, NULL, NULL, 0) != 1;
        m->term[nt++] = t;
    }
    m->n_term = nt;
    /* one small sum is as well served by one kernel per node */
    if (nt == 1 && tg_ir_numel(tg_fuse_node(x, m->term[0].x)) < 65536) m->n_term = 0;
    m->turn = m->total;
    for (int q = 0; q < m->n_term; q++)
        if (m->term[q].sum > m->turn) m->turn = m->term[q].sum;
    free(is_term);
    return TG_OK;
}

void tg_sumsq_match_free(tg_sumsq_match *m) {
    free(m->term), free(m->tree);
    m->term = NULL, m->tree = NULL;
}

/* A one-element f32 or bool add, sub, mul, div, less, greater or where,
 * or an f32 math row of ops.def (MATH: whose expressions a kernel can
 * compute anywhere), on operands of the dtypes it computes in. */
static bool tail_op(const tg_fuse_graph *x, const tg_fuse_hooks *h, int i) {
    const tg_node *n = tg_fuse_node(x, i);
    if (!tg_plan_runs(x->g, i) || !tg_fuse_free(x, i) || taken(h, i) || tg_ir_numel(n) != 1 ||
        (n->dtype != TG_F32 && n->dtype != TG_BOOL))
        return false;
    switch (n->op) {
    case TG_OP_ADD: case TG_OP_SUB: case TG_OP_MUL: case TG_OP_DIV: case TG_OP_LESS: case TG_OP_GREATER:
    case TG_OP_WHERE: break;
    default:
        if (!(tg_ops[n->op].flags & TG_OPF_MATH)) return false;
    }
    for (int k = 0; k < n->nin; k++) /* f32 operands; where's condition a bool */
        if (tg_fuse_node(x, n->in[k])->dtype != (n->op == TG_OP_WHERE && k == 0 ? TG_BOOL : TG_F32)) return false;
    return (n->op == TG_OP_LESS || n->op == TG_OP_GREATER) == (n->dtype == TG_BOOL);
}

int tg_fuse_match_sumsq_tails(const tg_fuse_graph *x, const tg_fuse_hooks *h, int total, int turn, int *tail,
                              bool *stored) {
    int n = x->g->n, nt = 0;
    uint8_t *mark = tg_calloc((size_t)n + 1, 1); /* 1: candidate, 2: taken */
    int *rbuf = tg_calloc((size_t)n + 1, sizeof(int));
    if (!mark || !rbuf || total < 0) {
        free(mark), free(rbuf);
        return total < 0 ? 0 : -1;
    }
    for (int i = total + 1; i < n; i++) {
        if (!tail_op(x, h, i)) continue;
        const tg_node *nd = tg_fuse_node(x, i);
        bool ok = true, uses = false;
        for (int k = 0; k < nd->nin && ok; k++) {
            int v = unview(x, nd->in[k]);
            if (v == total || mark[v] == 2) uses = true;
            else if (!mark[v]) ok = h->readable(v, turn, h->ctx);
        }
        if (ok) mark[i] = uses ? 2 : 1;
    }
    for (int i = n - 1; i > total; i--) { /* a candidate only taken tails read */
        if (mark[i] != 1) continue;
        int nr = tg_fuse_readers_once(x, i, rbuf, n, NULL, NULL, 0);
        bool only = nr > 0 && !x->pinned[i];
        for (int q = 0; q < nr && only; q++) only = mark[rbuf[q]] == 2;
        mark[i] = only ? 2 : 0;
    }
    for (int i = total + 1; i < n; i++) {
        if (mark[i] != 2) continue;
        int c = tg_fuse_readers_once(x, i, rbuf, n, NULL, NULL, 0);
        bool out = x->pinned[i];
        for (int q = 0; q < c && !out; q++) out = mark[rbuf[q]] != 2;
        stored[nt] = out;
        tail[nt++] = i;
    }
    free(mark), free(rbuf);
    return nt;
}
