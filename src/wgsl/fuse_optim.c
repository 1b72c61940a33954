/* The optimizer update of every param in one kernel, and the clip norm's
 * sums of squares with their total in two (fuse.h; emitted by ops_fused.c). */
#include <stdio.h>
#include "fuse.h"

/* ---- the optimizer ---- */

static bool wb_free_to(const fz *z, const tg_writeback *wb, int n_wb, int src, int dst) {
    for (int w = 0; w < n_wb; w++)
        if (wb[w].src == src && wb[w].dst == dst) return z->plan->wb_free[w];
    return false;
}

/* One update of one param (fuse/optim.c), if the plan computed each update
 * over the state or param it replaces. */
static bool match_update(const fz *z, int p2, const tg_writeback *wb, int n_wb, fz_seg *s) {
    tg_update_match u;
    memset(s, 0, sizeof *s);
    if (z->grp[p2] >= 0 || !tg_fuse_match_update(&z->fg, p2, &u)) return false;
    int upd[3] = {u.m2, u.v2, u.p2}, old[3] = {u.m, u.v, u.p};
    for (int k = 0; k < 3; k++)
        if (upd[k] >= 0 && (z->grp[upd[k]] >= 0 || !wb_free_to(z, wb, n_wb, upd[k], old[k]))) return false;
    const tg_node *pn = &z->g->nodes[p2];
    *s = (fz_seg){.p = u.p, .m = u.m, .v = u.v, .m2 = u.m2, .v2 = u.v2, .p2 = u.p2,
                  .hyper = u.hyper, .gx = u.gx, .grad = u.grad, .scale = u.scale};
    if (pn->op == TG_OP_ADAM_P) {
        s->decay = pn->at.adam.decay;
        s->hp[0] = z->g->nodes[u.m2].at.adam.beta, s->hp[1] = z->g->nodes[u.v2].at.adam.beta, s->hp[2] = pn->at.adam.eps;
    } else {
        s->hp[0] = pn->at.sgd.momentum, s->hp[1] = pn->at.sgd.weight_decay;
        s->nesterov = pn->at.sgd.nesterov, s->momentum = pn->at.sgd.has_momentum;
    }
    return true;
}

static bool same_kind(const fz *z, const fz_seg *a, const fz_seg *b) {
    const tg_plan *p = z->plan;
#define AR(x) ((x) >= 0 ? p->slot[x].arena : -1)
    return z->g->nodes[a->p2].op == z->g->nodes[b->p2].op && a->hyper == b->hyper && a->scale == b->scale &&
           memcmp(a->hp, b->hp, sizeof a->hp) == 0 && a->nesterov == b->nesterov && a->momentum == b->momentum &&
           AR(a->p) == AR(b->p) && AR(a->m) == AR(b->m) && AR(a->v) == AR(b->v) && AR(a->grad) == AR(b->grad);
#undef AR
}

/* Whether one param's fused update can bind what it touches: the fused
 * kernel binds each arena's span whole (state, gradient, clip scale and
 * hyperparameters included), and a single param's update is never split. */
static bool seg_fits(const fz *z, const fz_seg *q) {
    int nodes[] = {q->p, q->p2, q->m, q->m2, q->v, q->v2, q->grad, q->scale, q->hyper};
    int64_t lo[TG_N_ARENAS], hi[TG_N_ARENAS];
    for (int a = 0; a < TG_N_ARENAS; a++) lo[a] = INT64_MAX, hi[a] = -1;
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        if (nodes[i] < 0) continue;
        const tg_slot *sl = &z->plan->slot[nodes[i]];
        if (sl->arena < 0) continue;
        if (sl->offset < lo[sl->arena]) lo[sl->arena] = sl->offset;
        if (sl->offset + sl->bytes > hi[sl->arena]) hi[sl->arena] = sl->offset + sl->bytes;
    }
    for (int a = 0; a < TG_N_ARENAS; a++)
        if (hi[a] >= 0 && (uint64_t)(hi[a] - lo[a]) > z->lim->max_storage_buffer_binding_size) return false;
    return true;
}

void tg_fz_plan_optimizer(fz *z, const tg_writeback *wb, int n_wb) {
    const tg_graph *g = z->g;
    fz_seg *segs = tg_calloc((size_t)z->n + 1, sizeof *segs);
    bool *used = tg_calloc((size_t)z->n + 1, sizeof(bool));
    int ns = 0;
    if (!segs || !used) {
        free(segs), free(used);
        z->oom = true;
        return;
    }
    for (int i = 0; i < z->n; i++)
        if ((g->nodes[i].op == TG_OP_ADAM_P || g->nodes[i].op == TG_OP_SGD_P) && match_update(z, i, wb, n_wb, &segs[ns]) &&
            seg_fits(z, &segs[ns]))
            ns++;
    for (int a = 0; a < ns && !z->oom; a++) {
        if (used[a]) continue;
        /* all updates of the same kind, in node order */
        int cnt = 0;
        for (int b = a; b < ns; b++)
            if (!used[b] && same_kind(z, &segs[a], &segs[b])) cnt++;
        fz_group *gr = tg_fz_new_group(z, FZ_OPTIM);
        if (!gr) break;
        gr->seg = tg_calloc((size_t)cnt, sizeof(fz_seg));
        if (!gr->seg) {
            z->oom = true;
            break;
        }
        for (int b = a; b < ns; b++)
            if (!used[b] && same_kind(z, &segs[a], &segs[b])) gr->seg[gr->n_seg++] = segs[b], used[b] = true;
        /* members: the updates (stored) and the scaled gradients (inside) */
        int cap = 4 * gr->n_seg + 1;
        gview v = {tg_calloc((size_t)cap, sizeof(int)), 0, tg_calloc((size_t)cap, sizeof(int)), 0,
                   tg_calloc((size_t)(6 * gr->n_seg + 2), sizeof(int)), 0, 0};
        if (!v.mem || !v.st || !v.rd) {
            tg_fz_gview_free(&v);
            z->oom = true;
            break;
        }
        for (int s = 0; s < gr->n_seg; s++) {
            fz_seg *q = &gr->seg[s];
            int upd[3] = {q->m2, q->v2, q->p2};
            for (int u = 0; u < 3; u++)
                if (upd[u] >= 0 && !in_list(v.mem, v.nm, upd[u])) v.mem[v.nm++] = upd[u], v.st[v.ns++] = upd[u];
            if (q->scale >= 0) v.mem[v.nm++] = q->gx;
            int rd[6] = {q->p, q->m, q->v, q->grad, q->scale, q->hyper};
            for (int r = 0; r < 6; r++)
                if (rd[r] >= 0 && !in_list(v.rd, v.nr, rd[r])) v.rd[v.nr++] = rd[r];
            if (q->p2 > v.turn) v.turn = q->p2;
        }
        bool ok = tg_fz_move_ok(z, &v);
        /* only the state and param each update replaces may share bytes with what it writes */
        for (int s = 0; s < gr->n_seg && ok; s++)
            for (int r = 0; r < v.nr && ok; r++)
                for (int w = 0; w < v.ns && ok; w++) {
                    const fz_seg *q = &gr->seg[s];
                    int x = v.rd[r], y = v.st[w];
                    if (!overlap(&z->plan->slot[x], &z->plan->slot[y])) continue;
                    bool own = (x == q->m && y == q->m2) || (x == q->v && y == q->v2) || (x == q->p && y == q->p2);
                    bool mine = y == q->m2 || y == q->v2 || y == q->p2;
                    if (mine && !own) ok = false;
                }
        tg_fz_gview_free(&v);
        if (!ok) { /* leave these updates to one kernel per node */
            tg_fz_free_group(gr);
            z->n_gr--;
            continue;
        }
        gr->turn = 0;
        for (int s = 0; s < gr->n_seg; s++)
            if (gr->seg[s].p2 > gr->turn) gr->turn = gr->seg[s].p2;
        int id = (int)(gr - z->gr);
        for (int s = 0; s < gr->n_seg; s++) {
            fz_seg *q = &gr->seg[s];
            int mem[4] = {q->m2, q->v2, q->p2, q->scale >= 0 ? q->gx : -1};
            for (int u = 0; u < 4; u++)
                if (mem[u] >= 0) z->grp[mem[u]] = id, z->role[mem[u]] = R_MEMBER, z->at[mem[u]] = gr->turn;
            if (q->scale >= 0) z->kept[q->gx] = true;
        }
    }
    free(segs);
    free(used);
}

/* ---- the clip norm: sums of squares and their total ---- */

/* node s = sum over every axis of mul(x, x), the mul read by nothing else (fuse/optim.c) */
static int sumsq_term(const fz *z, int s) {
    int sq = z->grp[s] >= 0 ? -1 : tg_fuse_match_sumsq(&z->fg, s);
    return sq >= 0 && z->grp[sq] < 0 ? sq : -1;
}

/* The total: the largest tree of scalar adds over terms (through views)
 * whose inner nodes nothing else reads. Returns its root or -1. */
static bool tree_of_terms(const fz *z, int t, const bool *is_term, int *inner, int *n_inner, int cap) {
    if (is_view(z->g, t)) return tree_of_terms(z, z->g->nodes[t].in[0], is_term, inner, n_inner, cap);
    if (is_term[t]) return true;
    const tg_node *n = &z->g->nodes[t];
    if (n->op != TG_OP_ADD || tg_ir_numel(n) != 1 || z->grp[t] >= 0 || *n_inner >= cap) return false;
    inner[(*n_inner)++] = t;
    return tree_of_terms(z, n->in[0], is_term, inner, n_inner, cap) &&
           tree_of_terms(z, n->in[1], is_term, inner, n_inner, cap);
}

static void plan_sumsq_tails(fz *z, int gid);

void tg_fz_plan_sumsq(fz *z) {
    const tg_graph *g = z->g;
    bool *is_term = tg_calloc((size_t)z->n + 1, sizeof(bool));
    int *inner = tg_calloc((size_t)z->n + 1, sizeof(int));
    fz_term *terms = tg_calloc((size_t)z->n + 1, sizeof(fz_term));
    if (!is_term || !inner || !terms) {
        free(is_term), free(inner), free(terms);
        z->oom = true;
        return;
    }
    int nt = 0;
    for (int i = 0; i < z->n; i++) {
        int x2 = sumsq_term(z, i);
        if (x2 < 0) continue;
        is_term[i] = true;
        terms[nt++] = (fz_term){i, x2, g->nodes[x2].in[0], false};
    }
    /* climb from the first term to the top of its chain of adds */
    int root = -1, n_inner = 0;
    if (nt > 1) {
        int t = terms[0].sum;
        for (;;) {
            int rd[2], nv = 0;
            if (tg_fz_readers(z, t, rd, 2, NULL, &nv) != 1) break;
            const tg_node *r = &g->nodes[rd[0]];
            if (r->op != TG_OP_ADD || tg_ir_numel(r) != 1 || z->grp[rd[0]] >= 0 || z->must_store[t]) break;
            t = rd[0];
        }
        if (t != terms[0].sum && tree_of_terms(z, t, is_term, inner, &n_inner, z->n)) {
            root = t;
            for (int q = 0; q < n_inner && root >= 0; q++) /* inner adds: read only inside the tree */
                if (inner[q] != t && (z->must_store[inner[q]] || tg_fz_readers(z, inner[q], NULL, 0, NULL, &(int){0}) != 1)) root = -1;
        } else {
            n_inner = 0;
        }
    }
    if (root < 0) n_inner = 0;
    for (int q = 0; q < nt; q++) {
        bool in_tree = false;
        for (int i = 0; i < n_inner && !in_tree; i++) {
            const tg_node *a = &g->nodes[inner[i]];
            for (int k = 0; k < 2; k++) {
                int x = a->in[k];
                while (is_view(g, x)) x = g->nodes[x].in[0];
                in_tree |= x == terms[q].sum;
            }
        }
        /* a term is stored if anything outside the tree reads it */
        terms[q].store = !in_tree || z->must_store[terms[q].sum] || tg_fz_readers(z, terms[q].sum, NULL, 0, NULL, &(int){0}) != 1;
    }
    /* one small sum is as well served by one kernel per node */
    if (nt == 0 || (nt == 1 && tg_ir_numel(&g->nodes[terms[0].x]) < 65536)) {
        free(is_term), free(inner), free(terms);
        return;
    }
    fz_group *gr = tg_fz_new_group(z, FZ_SUMSQ);
    if (!gr) {
        free(is_term), free(inner), free(terms);
        return;
    }
    gr->term = terms, gr->n_term = nt;
    gr->tree = inner, gr->n_tree = n_inner, gr->total = root;
    /* members: muls, sums, tree adds and the views between */
    int cap = 3 * nt + n_inner + 4;
    gview v = {tg_calloc((size_t)cap * 2, sizeof(int)), 0, tg_calloc((size_t)cap, sizeof(int)), 0,
               tg_calloc((size_t)cap, sizeof(int)), 0, 0};
    bool ok = v.mem && v.st && v.rd;
    for (int q = 0; q < nt && ok; q++) {
        v.mem[v.nm++] = terms[q].sum, v.mem[v.nm++] = terms[q].sq;
        for (int c = z->fg.rd0[terms[q].sum]; c < z->fg.rd0[terms[q].sum + 1]; c++)
            if (is_view(g, z->fg.rd[c]) && n_inner) v.mem[v.nm++] = z->fg.rd[c];
        if (terms[q].store) v.st[v.ns++] = terms[q].sum;
        if (!in_list(v.rd, v.nr, terms[q].x)) v.rd[v.nr++] = terms[q].x;
        if (terms[q].sum > v.turn) v.turn = terms[q].sum;
    }
    for (int i = 0; i < n_inner && ok; i++) {
        v.mem[v.nm++] = inner[i];
        if (inner[i] > v.turn) v.turn = inner[i];
    }
    if (root >= 0 && ok) v.st[v.ns++] = root;
    for (int r = 0; r < v.nr && ok; r++) /* what it writes is never what it reads */
        for (int s = 0; s < v.ns && ok; s++) ok = !overlap(&z->plan->slot[v.rd[r]], &z->plan->slot[v.st[s]]);
    ok = ok && tg_fz_move_ok(z, &v);
    gr->turn = v.turn;
    if (ok) {
        int id = (int)(gr - z->gr);
        for (int m = 0; m < v.nm; m++) {
            int x = v.mem[m];
            z->grp[x] = id, z->role[x] = R_MEMBER, z->at[x] = gr->turn;
            z->kept[x] = !in_list(v.st, v.ns, x);
        }
    }
    tg_fz_gview_free(&v);
    free(is_term);
    if (!ok) {
        tg_fz_free_group(gr);
        z->n_gr--;
        return;
    }
    plan_sumsq_tails(z, (int)(gr - z->gr));
}

/* Scalar arithmetic after the total of the sums of squares (the clip
 * factor min(c / (sqrt(total) + eps), 1), the step check loss * 0 +
 * total) done by the totals kernel once it has the total: each would
 * otherwise be a dispatch of its own for one invocation's work. A tail is
 * a one-element f32 or bool add, sub, mul, div, sqrt, less, greater or
 * where after the total, whose operands are the total, other tails, or
 * values in memory before the group's turn; only those that read the
 * total (through other tails or directly), or that only tails read, are
 * taken. */
static bool tail_node(const fz *z, int i) {
    const tg_node *n = &z->g->nodes[i];
    if (!runs(z, i) || z->grp[i] >= 0 || tg_ir_numel(n) != 1 || (n->dtype != TG_F32 && n->dtype != TG_BOOL)) return false;
    switch (n->op) {
    case TG_OP_ADD: case TG_OP_SUB: case TG_OP_MUL: case TG_OP_DIV: case TG_OP_SQRT: case TG_OP_LESS: case TG_OP_GREATER:
    case TG_OP_WHERE: break;
    default: return false;
    }
    for (int k = 0; k < n->nin; k++) /* f32 operands; where's condition a bool */
        if (z->g->nodes[n->in[k]].dtype != (n->op == TG_OP_WHERE && k == 0 ? TG_BOOL : TG_F32)) return false;
    return (n->op == TG_OP_LESS || n->op == TG_OP_GREATER) == (n->dtype == TG_BOOL);
}

static int unview(const fz *z, int x) {
    while (is_view(z->g, x)) x = z->g->nodes[x].in[0];
    return x;
}

static void plan_sumsq_tails(fz *z, int gid) {
    int total = z->gr[gid].total, turn = z->gr[gid].turn, n = z->n;
    if (total < 0) return;
    int *tl = tg_calloc((size_t)n + 1, sizeof(int)), *rd = tg_calloc((size_t)n + 1, sizeof(int));
    int *st = tg_calloc((size_t)n + 1, sizeof(int)), *rbuf = tg_calloc((size_t)n + 1, sizeof(int));
    uint8_t *mark = tg_calloc((size_t)n + 1, 1); /* 1: candidate, 2: taken */
    if (!tl || !rd || !st || !rbuf || !mark) {
        free(tl), free(rd), free(st), free(rbuf), free(mark);
        z->oom = true;
        return;
    }
    for (int i = total + 1; i < n; i++) {
        if (!tail_node(z, i)) continue;
        const tg_node *nd = &z->g->nodes[i];
        bool ok = true, uses = false;
        for (int k = 0; k < nd->nin && ok; k++) {
            int x = unview(z, nd->in[k]);
            if (x == total || mark[x] == 2) uses = true;
            else if (!mark[x]) ok = in_memory(z, x) && ready_at(z, x) < turn;
        }
        if (ok) mark[i] = uses ? 2 : 1;
    }
    for (int i = n - 1; i > total; i--) { /* a candidate only taken tails read */
        if (mark[i] != 1) continue;
        int nr = tg_fz_readers(z, i, rbuf, n, NULL, &(int){0});
        bool only = nr > 0 && !z->must_store[i];
        for (int q = 0; q < nr && only; q++) only = mark[rbuf[q]] == 2;
        mark[i] = only ? 2 : 0;
    }
    int nt = 0, ns = 0, nr = 0;
    for (int i = total + 1; i < n; i++) {
        if (mark[i] != 2) continue;
        tl[nt++] = i;
        int c = tg_fz_readers(z, i, rbuf, n, NULL, &(int){0});
        bool out = z->must_store[i];
        for (int q = 0; q < c && !out; q++) out = mark[rbuf[q]] != 2;
        if (out) st[ns++] = i;
        const tg_node *nd = &z->g->nodes[i];
        for (int k = 0; k < nd->nin; k++) {
            int x = unview(z, nd->in[k]);
            if (x != total && mark[x] != 2 && !in_list(rd, nr, x)) rd[nr++] = x;
        }
    }
    /* what it writes is never what it reads, and the scalars it binds lie
     * within one binding per arena with the group's own */
    bool ok = nt > 0;
    for (int r = 0; r < nr && ok; r++)
        for (int q = 0; q < ns && ok; q++) ok = !overlap(&z->plan->slot[rd[r]], &z->plan->slot[st[q]]);
    int64_t lo[TG_N_ARENAS], hi[TG_N_ARENAS];
    for (int a = 0; a < TG_N_ARENAS; a++) lo[a] = INT64_MAX, hi[a] = -1;
    const fz_group *gr = &z->gr[gid];
    for (int q = 0; q < gr->n_term + 1 + ns + nr && ok; q++) {
        int x = q < gr->n_term ? (gr->term[q].store ? gr->term[q].sum : -1) : q == gr->n_term ? total
                : q < gr->n_term + 1 + ns ? st[q - gr->n_term - 1] : rd[q - gr->n_term - 1 - ns];
        if (x < 0) continue;
        const tg_slot *sl = &z->plan->slot[x];
        if (sl->offset < lo[sl->arena]) lo[sl->arena] = sl->offset;
        if (sl->offset + sl->bytes > hi[sl->arena]) hi[sl->arena] = sl->offset + sl->bytes;
    }
    for (int a = 0; a < TG_N_ARENAS && ok; a++)
        ok = hi[a] < 0 || (uint64_t)(hi[a] - lo[a]) <= z->lim->max_storage_buffer_binding_size;
    gview v = {tl, nt, st, ns, rd, nr, turn};
    if (ok && tg_fz_move_ok(z, &v)) {
        fz_group *g = &z->gr[gid];
        g->tail = tg_calloc((size_t)nt, sizeof(int));
        g->tail_st = tg_calloc((size_t)nt, sizeof(bool));
        if (!g->tail || !g->tail_st) {
            z->oom = true;
        } else {
            g->n_tail = nt;
            for (int q = 0; q < nt; q++) {
                int x = tl[q];
                g->tail[q] = x;
                g->tail_st[q] = in_list(st, ns, x);
                z->grp[x] = gid, z->role[x] = R_MEMBER, z->at[x] = turn, z->kept[x] = !g->tail_st[q];
            }
        }
    }
    free(tl), free(rd), free(st), free(rbuf), free(mark);
}

