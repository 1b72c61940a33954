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
                if (mem[u] >= 0) z->grp[mem[u]] = id, z->at[mem[u]] = gr->turn;
            if (q->scale >= 0) z->kept[q->gx] = true;
        }
    }
    free(segs);
    free(used);
}

/* ---- the clip norm: sums of squares and their total ---- */

/* What the fusion after planning has grouped, and what a kernel at turn t
 * can read from memory (fuse/fuse.h's hooks). */
static bool fz_taken(int i, const void *ctx) { return ((const fz *)ctx)->grp[i] >= 0; }
static bool fz_readable(int v, int t, const void *ctx) { return in_memory(ctx, v) && ready_at(ctx, v) < t; }

static void plan_sumsq_tails(fz *z, int gid);

/* The terms and their total (fuse/sumsq.c) as one group at the last of
 * them, if the plan lets them move there. */
void tg_fz_plan_sumsq(fz *z) {
    tg_fuse_hooks h = {fz_taken, fz_readable, z};
    tg_sumsq_match m;
    if (tg_fuse_match_sumsq_total(&z->fg, &h, &m) != TG_OK) {
        z->oom = true;
        return;
    }
    fz_group *gr = m.n_term ? tg_fz_new_group(z, FZ_SUMSQ) : NULL;
    if (!gr) {
        tg_sumsq_match_free(&m);
        return;
    }
    int nt = m.n_term, n_inner = m.n_tree;
    gr->term = m.term, gr->n_term = nt;
    gr->tree = m.tree, gr->n_tree = n_inner, gr->total = m.total;
    /* members: muls, sums, tree adds and the views between */
    int cap = 3 * nt + n_inner + 4;
    gview v = {tg_calloc((size_t)cap * 2, sizeof(int)), 0, tg_calloc((size_t)cap, sizeof(int)), 0,
               tg_calloc((size_t)cap, sizeof(int)), 0, m.turn};
    bool ok = v.mem && v.st && v.rd;
    for (int q = 0; q < nt && ok; q++) {
        const tg_sumsq_term *t = &m.term[q];
        v.mem[v.nm++] = t->sum, v.mem[v.nm++] = t->sq;
        for (int c = z->fg.rd0[t->sum]; c < z->fg.rd0[t->sum + 1]; c++)
            if (is_view(z->g, z->fg.rd[c]) && n_inner) v.mem[v.nm++] = z->fg.rd[c];
        if (t->store) v.st[v.ns++] = t->sum;
        if (!in_list(v.rd, v.nr, t->x)) v.rd[v.nr++] = t->x;
    }
    for (int i = 0; i < n_inner && ok; i++) v.mem[v.nm++] = m.tree[i];
    if (m.total >= 0 && ok) v.st[v.ns++] = m.total;
    for (int r = 0; r < v.nr && ok; r++) /* what it writes is never what it reads */
        for (int s = 0; s < v.ns && ok; s++) ok = !overlap(&z->plan->slot[v.rd[r]], &z->plan->slot[v.st[s]]);
    ok = ok && tg_fz_move_ok(z, &v);
    gr->turn = v.turn;
    if (ok) {
        int id = (int)(gr - z->gr);
        for (int q = 0; q < v.nm; q++) {
            int x = v.mem[q];
            z->grp[x] = id, z->at[x] = gr->turn;
            z->kept[x] = !in_list(v.st, v.ns, x);
        }
    }
    tg_fz_gview_free(&v);
    if (!ok) {
        tg_fz_free_group(gr);
        z->n_gr--;
        return;
    }
    plan_sumsq_tails(z, (int)(gr - z->gr));
}

static int unview(const fz *z, int x) {
    while (is_view(z->g, x)) x = z->g->nodes[x].in[0];
    return x;
}

/* The scalars after the total (fuse/sumsq.c), done by the totals kernel
 * once it has the total: each would otherwise be a dispatch of its own for
 * one invocation's work. */
static void plan_sumsq_tails(fz *z, int gid) {
    int total = z->gr[gid].total, turn = z->gr[gid].turn, n = z->n;
    if (total < 0) return;
    int *tl = tg_calloc((size_t)n + 1, sizeof(int)), *rd = tg_calloc((size_t)n + 1, sizeof(int));
    int *st = tg_calloc((size_t)n + 1, sizeof(int));
    bool *stored = tg_calloc((size_t)n + 1, sizeof(bool));
    tg_fuse_hooks h = {fz_taken, fz_readable, z};
    int nt = tl && rd && st && stored ? tg_fuse_match_sumsq_tails(&z->fg, &h, total, turn, tl, stored) : -1;
    if (nt < 0) {
        free(tl), free(rd), free(st), free(stored);
        z->oom = true;
        return;
    }
    int ns = 0, nr = 0;
    for (int q = 0; q < nt; q++) {
        if (stored[q]) st[ns++] = tl[q];
        const tg_node *nd = &z->g->nodes[tl[q]];
        for (int k = 0; k < nd->nin; k++) {
            int x = unview(z, nd->in[k]);
            if (x != total && !in_list(tl, nt, x) && !in_list(rd, nr, x)) rd[nr++] = x;
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
                g->tail_st[q] = stored[q];
                z->grp[x] = gid, z->at[x] = turn, z->kept[x] = !stored[q];
            }
        }
    }
    free(tl), free(rd), free(st), free(stored);
}
