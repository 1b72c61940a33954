/* The elementwise fusion after planning (fuse.h): an elementwise node
 * computed inline where its only reader loads it, or applied to a kernel's
 * values as it stores them. */
#include "fuse.h"

/* ---- elementwise fusion: producers inline, epilogues ---- */

/* A fused group under construction: kernel node, inline producers (any
 * order; sorted before emission), epilogue chain (the views passed through
 * are kept in inl too: they cost nothing). */
typedef struct {
    int kernel;
    int inl[256], n_inl;
    int epi[32], n_epi;
    int turn; /* where it runs: the kernel node's position, or its last epilogue node's */
} draft;

static bool d_member(const draft *d, int x) {
    return x == d->kernel || in_list(d->inl, d->n_inl, x) || in_list(d->epi, d->n_epi, x);
}

/* Members, stored members and memory reads of a draft. */
static bool d_view(const fz *z, const draft *d, gview *v) {
    int cap = 2 + d->n_inl + d->n_epi;
    v->mem = tg_calloc((size_t)cap, sizeof(int));
    v->st = tg_calloc(2, sizeof(int));
    int rcap = TG_MAX_IN * cap;
    v->rd = tg_calloc((size_t)rcap, sizeof(int));
    if (!v->mem || !v->st || !v->rd) return false;
    v->nm = v->ns = v->nr = 0;
    v->mem[v->nm++] = d->kernel;
    for (int i = 0; i < d->n_inl; i++) v->mem[v->nm++] = d->inl[i];
    for (int i = 0; i < d->n_epi; i++) v->mem[v->nm++] = d->epi[i];
    if (d->n_epi == 0 || z->must_store[d->kernel]) v->st[v->ns++] = d->kernel;
    if (d->n_epi) v->st[v->ns++] = d->epi[d->n_epi - 1];
    for (int m = 0; m < v->nm; m++) {
        const tg_node *n = &z->g->nodes[v->mem[m]];
        if (is_view(z->g, v->mem[m])) continue;
        for (int k = 0; k < n->nin; k++) {
            int x = n->in[k];
            if (d_member(d, x) || in_list(v->rd, v->nr, x)) continue;
            v->rd[v->nr++] = x;
        }
    }
    v->turn = d->turn;
    return true;
}

/* Whether member m reads x at the element being stored: an elementwise op
 * whose operand has its own shape, or the kernel itself when it runs in
 * place over that operand (kernel emitters read element p before writing p,
 * every other element only in an earlier pass). Views keep the flat index. */
static bool same_element(const fz *z, const draft *d, int m, int x) {
    const tg_node *n = &z->g->nodes[m], *xn = &z->g->nodes[x];
    if (tg_ir_numel(xn) != tg_ir_numel(&z->g->nodes[d->kernel])) return false;
    if (m == d->kernel) return (tg_ops[n->op].flags & TG_OPF_INPLACE) && tg_shape_eq(xn->shape, n->shape);
    if (!(tg_ops[n->op].flags & (TG_OPF_ELEMWISE | TG_OPF_VIEW)) || !(is_view(z->g, m) || tg_shape_eq(xn->shape, n->shape)))
        return false;
    if (in_list(d->epi, d->n_epi, m)) return true;
    /* an inline producer: every reader of m in the draft reads it in step too */
    for (int c = z->fg.rd0[m]; c < z->fg.rd0[m + 1]; c++) {
        int r = z->fg.rd[c];
        if (d_member(d, r) && !same_element(z, d, r, m)) return false;
    }
    return true;
}

/* Inside the kernel: an output may share bytes with an input only as the
 * very same elements, each read by the invocation that writes it. */
static bool alias_ok(const fz *z, const draft *d, const gview *v) {
    const tg_plan *p = z->plan;
    for (int s = 0; s < v->ns; s++)
        for (int s2 = s + 1; s2 < v->ns; s2++)
            if (overlap(&p->slot[v->st[s]], &p->slot[v->st[s2]])) return false;
    for (int r = 0; r < v->nr; r++) {
        int x = v->rd[r];
        for (int s = 0; s < v->ns; s++) {
            const tg_slot *a = &p->slot[x], *b = &p->slot[v->st[s]];
            if (!overlap(a, b)) continue;
            if (a->offset != b->offset || a->bytes != b->bytes) return false;
            for (int m = 0; m < v->nm; m++) {
                const tg_node *n = &z->g->nodes[v->mem[m]];
                if (is_view(z->g, v->mem[m])) continue;
                for (int k = 0; k < n->nin; k++)
                    if (n->in[k] == x && !same_element(z, d, v->mem[m], x)) return false;
            }
        }
    }
    return true;
}

static bool d_ok(const fz *z, const draft *d) {
    gview v = {0};
    bool ok = d_view(z, d, &v);
    if (ok) {
        int *ops = tg_calloc((size_t)(v.ns + v.nr) + 1, sizeof(int));
        ok = ops != NULL;
        if (ok) {
            memcpy(ops, v.st, sizeof(int) * (size_t)v.ns);
            memcpy(ops + v.ns, v.rd, sizeof(int) * (size_t)v.nr);
            int nb = tg_wgsl_count_bindings(z->plan, ops, v.ns + v.nr);
            ok = nb <= TG_WGSL_MAX_BINDINGS && (uint32_t)nb <= z->lim->max_storage_buffers_per_stage;
        }
        free(ops);
    }
    ok = ok && alias_ok(z, d, &v) && tg_fz_move_ok(z, &v);
    tg_fz_gview_free(&v);
    return ok;
}

/* Whether the kernel node reads each element of its inputs once per stored
 * element (elementwise), so that an inline producer costs nothing extra. */
static bool reads_once(const fz *z, const draft *d, int m) {
    if (in_list(d->epi, d->n_epi, m)) return true;
    const tg_node *n = &z->g->nodes[m];
    if (m == d->kernel) return tg_ops[n->op].flags & TG_OPF_ELEMWISE;
    for (int c = z->fg.rd0[m]; c < z->fg.rd0[m + 1]; c++)
        if (d_member(d, z->fg.rd[c]) && !reads_once(z, d, z->fg.rd[c])) return false;
    return true;
}

static bool fusable_ew(const fz *z, int x) {
    const tg_node *n = &z->g->nodes[x];
    return runs(z, x) && tg_wgsl_inline_ok(n->op) && z->grp[x] < 0 && !z->must_store[x];
}

/* Tries to take producer x (an input of a member) into the draft, then its own inputs. */
static void try_inline(fz *z, draft *d, int x) {
    if (d_member(d, x) || !fusable_ew(z, x) || d->n_inl + 8 > (int)(sizeof d->inl / sizeof d->inl[0])) return;
    int rd[64], views[16], nv = 0;
    int nr = tg_fz_readers(z, x, rd, 64, views, &nv);
    if (nr > 64 || nv >= 16) return;
    int save = d->n_inl;
    for (int v = 0; v < nv; v++)
        if (!in_list(d->inl, d->n_inl, views[v])) d->inl[d->n_inl++] = views[v];
    for (int r = 0; r < nr; r++)
        if (!d_member(d, rd[r])) {
            d->n_inl = save;
            return;
        }
    d->inl[d->n_inl++] = x;
    bool cheap = (tg_ops[z->g->nodes[x].op].flags & TG_OPF_CHEAP) != 0;
    bool ok = true;
    for (int r = 0; r < nr && ok && !cheap; r++) ok = reads_once(z, d, rd[r]);
    if (!ok || !d_ok(z, d)) {
        d->n_inl = save;
        return;
    }
    const tg_node *n = &z->g->nodes[x];
    for (int k = 0; k < n->nin; k++) try_inline(z, d, n->in[k]);
}

/* Extends the epilogue of the draft's kernel while its last value has one
 * reader, an elementwise op that reads it at the same element. */
static void grow_epilogue(fz *z, draft *d) {
    for (;;) {
        int cur = d->n_epi ? d->epi[d->n_epi - 1] : d->kernel;
        if (z->must_store[cur] || d->n_epi == (int)(sizeof d->epi / sizeof d->epi[0])) return;
        int rd[2], views[8], nv = 0;
        if (tg_fz_readers(z, cur, rd, 2, views, &nv) != 1 || nv > 8) return;
        int c = rd[0];
        const tg_node *cn = &z->g->nodes[c];
        if (!(tg_ops[cn->op].flags & TG_OPF_ELEMWISE) || !fusable_ew(z, c) || tg_ir_numel(cn) != tg_ir_numel(&z->g->nodes[cur]))
            if (!(tg_ops[cn->op].flags & TG_OPF_ELEMWISE) || !runs(z, c) || !tg_wgsl_inline_ok(cn->op) || z->grp[c] >= 0 ||
                tg_ir_numel(cn) != tg_ir_numel(&z->g->nodes[cur]))
                return;
        int save_inl = d->n_inl;
        for (int v = 0; v < nv; v++) d->inl[d->n_inl++] = views[v];
        /* every operand that is the chain value must be read in step */
        bool step = true;
        for (int k = 0; k < cn->nin; k++)
            if ((cn->in[k] == cur || in_list(views, nv, cn->in[k])) && !tg_shape_eq(z->g->nodes[cn->in[k]].shape, cn->shape))
                step = false;
        d->epi[d->n_epi++] = c;
        /* At the kernel's turn the epilogue's outputs are written early; at
         * the last node's the kernel's inputs are read late: either may
         * clash with the plan, so both are tried. */
        int turn = d->turn;
        bool ok = step && d_ok(z, d);
        if (!ok && step) {
            d->turn = c;
            ok = d_ok(z, d);
        }
        if (!ok) {
            d->n_epi--;
            d->n_inl = save_inl;
            d->turn = turn;
            return;
        }
    }
}

/* Orders the inline producers inputs-first (node order is topological). */
static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void commit_draft(fz *z, draft *d) {
    if (d->n_inl == 0 && d->n_epi == 0) return;
    fz_group *g = tg_fz_new_group(z, FZ_FUSED);
    if (!g) return;
    qsort(d->inl, (size_t)d->n_inl, sizeof(int), by_id);
    g->f.kernel = d->kernel;
    g->f.inl = tg_calloc((size_t)d->n_inl + 1, sizeof(int));
    g->f.epi = tg_calloc((size_t)d->n_epi + 1, sizeof(int));
    if (!g->f.inl || !g->f.epi) {
        z->oom = true;
        return;
    }
    memcpy(g->f.inl, d->inl, sizeof(int) * (size_t)d->n_inl);
    memcpy(g->f.epi, d->epi, sizeof(int) * (size_t)d->n_epi);
    g->f.n_inl = d->n_inl;
    g->f.n_epi = d->n_epi;
    g->f.store_kernel = d->n_epi && z->must_store[d->kernel];
    g->turn = d->turn;
    int id = (int)(g - z->gr);
    z->grp[d->kernel] = id;
    z->role[d->kernel] = R_KERNEL;
    z->kept[d->kernel] = d->n_epi && !g->f.store_kernel;
    for (int i = 0; i < d->n_inl; i++)
        z->grp[d->inl[i]] = id, z->role[d->inl[i]] = R_INL, z->at[d->inl[i]] = g->turn, z->kept[d->inl[i]] = true;
    for (int i = 0; i < d->n_epi; i++)
        z->grp[d->epi[i]] = id, z->role[d->epi[i]] = R_EPI, z->at[d->epi[i]] = g->turn, z->kept[d->epi[i]] = i < d->n_epi - 1;
}

/* Group gi (a product planned with its epilogue) takes the draft's longer
 * epilogue and turn: its former last node is kept inside from now on (its
 * planned bytes are never written). */
static void regrow(fz *z, int gi, const draft *d) {
    fz_group *gr = &z->gr[gi];
    int *epi = realloc(gr->f.epi, sizeof(int) * (size_t)d->n_epi);
    if (!epi) {
        z->oom = true;
        return;
    }
    memcpy(epi, d->epi, sizeof(int) * (size_t)d->n_epi);
    gr->f.epi = epi;
    gr->f.n_epi = d->n_epi;
    gr->turn = d->turn;
    z->at[d->kernel] = d->turn;
    for (int i = 0; i < d->n_epi; i++)
        z->grp[d->epi[i]] = gi, z->role[d->epi[i]] = R_EPI, z->at[d->epi[i]] = d->turn, z->kept[d->epi[i]] = i < d->n_epi - 1;
    for (int i = 0; i < d->n_inl; i++) /* views passed through */
        z->grp[d->inl[i]] = gi, z->role[d->inl[i]] = R_INL, z->at[d->inl[i]] = d->turn, z->kept[d->inl[i]] = true;
    if (d->n_inl) {
        int *inl = realloc(gr->f.inl, sizeof(int) * (size_t)d->n_inl);
        if (!inl) {
            z->oom = true;
            return;
        }
        memcpy(inl, d->inl, sizeof(int) * (size_t)d->n_inl);
        qsort(inl, (size_t)d->n_inl, sizeof(int), by_id);
        gr->f.inl = inl;
        gr->f.n_inl = d->n_inl;
    }
}

/* Epilogues first (a kernel that is not itself elementwise takes the
 * elementwise chain after it), then producers inline into every kernel,
 * last reader first so a chain folds into its end. */
void tg_fz_plan_elementwise(fz *z) {
    draft *d = tg_calloc(1, sizeof *d);
    if (!d) {
        z->oom = true;
        return;
    }
    for (int i = 0; i < z->n && !z->oom; i++) {
        if (!runs(z, i) || tg_wgsl_inline_ok(z->g->nodes[i].op)) continue;
        int gi = z->grp[i];
        if (gi >= 0 && (z->role[i] != R_KERNEL || z->gr[gi].kind != FZ_FUSED)) continue;
        memset(d, 0, sizeof *d);
        d->kernel = i;
        d->turn = i;
        if (gi < 0) {
            grow_epilogue(z, d);
            commit_draft(z, d);
        } else { /* a product planned with its epilogue: the chain may go on */
            fz_group *gr = &z->gr[gi];
            memcpy(d->epi, gr->f.epi, sizeof(int) * (size_t)gr->f.n_epi);
            d->n_epi = gr->f.n_epi;
            d->turn = gr->turn;
            grow_epilogue(z, d);
            if (d->n_epi > gr->f.n_epi) regrow(z, gi, d);
        }
    }
    for (int i = z->n - 1; i >= 0 && !z->oom; i--) {
        if (!runs(z, i) || (z->grp[i] >= 0 && z->role[i] != R_KERNEL)) continue;
        memset(d, 0, sizeof *d);
        d->kernel = i;
        d->turn = i;
        int gi = z->grp[i];
        if (gi >= 0) { /* an epilogue group: grow it in place */
            memcpy(d->inl, z->gr[gi].f.inl, sizeof(int) * (size_t)z->gr[gi].f.n_inl);
            d->n_inl = z->gr[gi].f.n_inl;
            memcpy(d->epi, z->gr[gi].f.epi, sizeof(int) * (size_t)z->gr[gi].f.n_epi);
            d->n_epi = z->gr[gi].f.n_epi;
            d->turn = z->gr[gi].turn;
        }
        int before = d->n_inl;
        const tg_node *n = &z->g->nodes[i];
        for (int k = 0; k < n->nin; k++) try_inline(z, d, n->in[k]);
        for (int e = 0; e < d->n_epi; e++) {
            const tg_node *en = &z->g->nodes[d->epi[e]];
            for (int k = 0; k < en->nin; k++) try_inline(z, d, en->in[k]);
        }
        if (d->n_inl == before) continue;
        if (gi >= 0) { /* re-commit with the producers */
            for (int q = 0; q < d->n_inl; q++)
                z->grp[d->inl[q]] = gi, z->role[d->inl[q]] = R_INL, z->at[d->inl[q]] = z->gr[gi].turn, z->kept[d->inl[q]] = true;
            qsort(d->inl, (size_t)d->n_inl, sizeof(int), by_id);
            int *inl = realloc(z->gr[gi].f.inl, sizeof(int) * (size_t)d->n_inl);
            if (!inl) {
                z->oom = true;
                break;
            }
            memcpy(inl, d->inl, sizeof(int) * (size_t)d->n_inl);
            z->gr[gi].f.inl = inl;
            z->gr[gi].f.n_inl = d->n_inl;
        } else {
            commit_draft(z, d);
        }
    }
    free(d);
}

