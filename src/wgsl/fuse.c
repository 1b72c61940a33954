/* Which nodes of a planned graph run as one kernel, and the kernel specs of
 * the whole program in order (tg_wgsl_emit_program).
 *
 * Every dispatch costs the GPU a barrier and the CPU an encode, about as
 * much as a small kernel's work, so the program is cut into fewer, larger
 * kernels:
 *   - the optimizer update of every param in one kernel (adam_m, adam_v and
 *     adam_p of all params, or SGD's two), with the clip factor's multiply of
 *     the gradient computed inline (ops_fused.c);
 *   - the clip norm's sums of squares of every gradient, and the adds that
 *     total them, in two kernels (ops_fused.c), the second also computing
 *     the scalars after the total (the clip factor, the step check);
 *   - a layer norm's bias gradient summed in its gain gradient's kernel
 *     (a sibling: the same rows of gy read once; prefuse.c pairs a layer
 *     norm with its backward's row statistics the same way), and a small
 *     linear's bias gradient in its split weight gradient's kernels (the
 *     column sums of dY over the K-ranges the product already walks);
 *   - products of one A in one kernel (the q, k and v projections, and
 *     their weight gradients, split K or not);
 *   - an elementwise node computed inline where its only reader loads it
 *     (a producer), or applied to a kernel's values as it stores them (an
 *     epilogue: the bias add and relu after a matmul), never stored.
 *
 * The plan was made for one kernel per node, so a fused kernel may not go
 * where the plan gave its memory to something else: a group runs at one
 * position (its turn), reads its inputs and writes its outputs then, and is
 * accepted only if no other kernel between its members' own positions and
 * its turn writes what it reads, or reads or writes what it writes (the
 * memory each node's slot names), and if inside the kernel no output shares
 * bytes with an input except where each invocation reads an element before
 * writing that same element. Values a group keeps to itself still have
 * their planned bytes; they are just never written. The groups the fusion
 * pass chose before planning (prefuse.c: attention, a product with its
 * epilogue) come in as they are, their kept values without memory; a
 * product's epilogue may still grow here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "emit.h"
#include "fused.h"

enum { R_NONE, R_KERNEL, R_INL, R_EPI, R_MEMBER };

typedef struct {
    const tg_graph *g;
    const tg_plan *plan;
    const tg_fusion *fu; /* the groups chosen before planning (prefuse.c), NULL for none */
    const tg_wgsl_limits *lim;
    int n;
    int *coff, *cons;  /* consumers of node i: cons[coff[i] .. coff[i+1]) */
    bool *must_store;  /* read after the step or by a writeback: never kept inside a kernel */
    tg_fuse_graph fg;  /* readers as the neutral matchers see them (fuse/fuse.h), must_store pinned */
    int *grp;          /* group per node, -1 for none */
    uint8_t *role;
    int *at;           /* position at which the node's kernel runs */
    bool *kept;        /* computed inside a fused kernel and never stored */
    fz_group *gr;
    int n_gr, cap_gr;
    int64_t work_most; /* the largest workspace of the kernels of single nodes */
    bool oom;
} fz;

static bool is_view(const tg_graph *g, int i) { return tg_ops[g->nodes[i].op].flags & TG_OPF_VIEW; }
static bool runs(const fz *z, int i) { return tg_plan_runs(z->g, i); }

static bool overlap(const tg_slot *a, const tg_slot *b) {
    return a->arena == b->arena && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* Whether node i's value is in memory (not kept inside a fused kernel). */
static bool in_memory(const fz *z, int i) {
    if (is_view(z->g, i)) return in_memory(z, z->g->nodes[i].in[0]);
    return !z->kept[i];
}

/* The position from which node i's value can be read: its producer's turn
 * (a view's: its input's); -1 for leaves and constants. */
static int ready_at(const fz *z, int i) {
    const tg_node *n = &z->g->nodes[i];
    if (is_view(z->g, i)) return ready_at(z, n->in[0]);
    if (tg_ops[n->op].flags & (TG_OPF_LEAF | TG_OPF_CONSTANT)) return -1;
    return z->at[i];
}

/* The readers of node i that are not views: views of i are looked through
 * (their readers count as i's, and the views are listed in *views). */
static int readers(const fz *z, int i, int *out, int cap, int *views, int *n_views) {
    int n = 0;
    for (int c = z->coff[i]; c < z->coff[i + 1]; c++) {
        int r = z->cons[c];
        if (is_view(z->g, r)) {
            if (views && *n_views < cap) views[(*n_views)++] = r;
            int m = readers(z, r, out ? out + n : NULL, cap - n, views, n_views);
            n += m;
        } else {
            if (out && n < cap) out[n] = r;
            n++;
        }
    }
    return n;
}

/* ---- the move check (see the top of this file) ---- */

typedef struct {
    int *mem;   /* every member (kept inside or stored) */
    int nm;
    int *st;    /* members whose value is written */
    int ns;
    int *rd;    /* nodes the group reads from memory */
    int nr;
    int turn;
} gview;

static bool in_list(const int *l, int n, int x) {
    for (int i = 0; i < n; i++)
        if (l[i] == x) return true;
    return false;
}

/* Whether some kernel other than the group's members, running strictly
 * between positions a and b, writes memory overlapping x's slot (or, with
 * reads, also reads it). */
static bool touched_between(const fz *z, const gview *v, int a, int b, int x, bool reads) {
    if (a > b) {
        int t = a;
        a = b, b = t;
    }
    const tg_slot *sx = &z->plan->slot[x];
    for (int j = 0; j < z->n; j++) {
        if (!runs(z, j) || z->at[j] <= a || z->at[j] >= b || in_list(v->mem, v->nm, j)) continue;
        if (in_memory(z, j) && overlap(&z->plan->slot[j], sx)) return true;
        if (!reads) continue;
        const tg_node *nj = &z->g->nodes[j];
        for (int k = 0; k < nj->nin; k++)
            if (in_memory(z, nj->in[k]) && overlap(&z->plan->slot[nj->in[k]], sx)) return true;
    }
    return false;
}

/* Every member reads its inputs and writes its value at the group's turn
 * instead of at its own position (its node id). */
static bool move_ok(const fz *z, const gview *v) {
    for (int r = 0; r < v->nr; r++)
        if (!in_memory(z, v->rd[r]) || ready_at(z, v->rd[r]) >= v->turn) return false;
    /* Readers of what the group writes come after its turn. */
    int *rbuf = tg_calloc((size_t)z->n + 1, sizeof(int));
    if (!rbuf) return false;
    bool ok = true;
    for (int s = 0; s < v->ns && ok; s++) {
        int nr = readers(z, v->st[s], rbuf, z->n, NULL, &(int){0});
        for (int q = 0; q < nr && q < z->n && ok; q++)
            if (!in_list(v->mem, v->nm, rbuf[q]) && z->at[rbuf[q]] <= v->turn) ok = false;
    }
    free(rbuf);
    for (int m = 0; m < v->nm && ok; m++) {
        int pos = v->mem[m];
        if (pos == v->turn || is_view(z->g, pos)) continue;
        /* a read delayed past a kernel that overwrites it (an earlier read is
         * safe: the value is ready, and nothing rewrites a value in its life) */
        const tg_node *n = &z->g->nodes[pos];
        for (int k = 0; k < n->nin && ok && pos < v->turn; k++)
            if (!in_list(v->mem, v->nm, n->in[k]) && touched_between(z, v, pos, v->turn, n->in[k], false)) ok = false;
        /* a write moved across a kernel that uses the same bytes */
        if (ok && in_list(v->st, v->ns, pos) && touched_between(z, v, pos, v->turn, pos, pos > v->turn)) ok = false;
    }
    return ok;
}

/* ---- groups ---- */

static fz_group *new_group(fz *z, int kind) {
    if (z->n_gr == z->cap_gr) {
        int cap = z->cap_gr ? 2 * z->cap_gr : 16;
        fz_group *g = realloc(z->gr, sizeof *g * (size_t)cap);
        if (!g) {
            z->oom = true;
            return NULL;
        }
        z->gr = g;
        z->cap_gr = cap;
    }
    fz_group *g = &z->gr[z->n_gr++];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    return g;
}

static void free_group(fz_group *g) {
    free(g->f.inl), free(g->f.epi), free(g->seg), free(g->term), free(g->tree), free(g->tail), free(g->tail_st);
}

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

static void gview_free(gview *v) { free(v->mem), free(v->st), free(v->rd); }

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
    for (int c = z->coff[m]; c < z->coff[m + 1]; c++) {
        int r = z->cons[c];
        if (d_member(z ? d : d, r) && !same_element(z, d, r, m)) return false;
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
    ok = ok && alias_ok(z, d, &v) && move_ok(z, &v);
    gview_free(&v);
    return ok;
}

/* Whether the kernel node reads each element of its inputs once per stored
 * element (elementwise), so that an inline producer costs nothing extra. */
static bool reads_once(const fz *z, const draft *d, int m) {
    if (in_list(d->epi, d->n_epi, m)) return true;
    const tg_node *n = &z->g->nodes[m];
    if (m == d->kernel) return tg_ops[n->op].flags & TG_OPF_ELEMWISE;
    for (int c = z->coff[m]; c < z->coff[m + 1]; c++)
        if (d_member(d, z->cons[c]) && !reads_once(z, d, z->cons[c])) return false;
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
    int nr = readers(z, x, rd, 64, views, &nv);
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
        if (readers(z, cur, rd, 2, views, &nv) != 1 || nv > 8) return;
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
    fz_group *g = new_group(z, FZ_FUSED);
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
static void plan_elementwise(fz *z) {
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

static void plan_optimizer(fz *z, const tg_writeback *wb, int n_wb) {
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
        fz_group *gr = new_group(z, FZ_OPTIM);
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
            gview_free(&v);
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
        bool ok = move_ok(z, &v);
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
        gview_free(&v);
        if (!ok) { /* leave these updates to one kernel per node */
            free_group(gr);
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

static void plan_sumsq(fz *z) {
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
            if (readers(z, t, rd, 2, NULL, &nv) != 1) break;
            const tg_node *r = &g->nodes[rd[0]];
            if (r->op != TG_OP_ADD || tg_ir_numel(r) != 1 || z->grp[rd[0]] >= 0 || z->must_store[t]) break;
            t = rd[0];
        }
        if (t != terms[0].sum && tree_of_terms(z, t, is_term, inner, &n_inner, z->n)) {
            root = t;
            for (int q = 0; q < n_inner && root >= 0; q++) /* inner adds: read only inside the tree */
                if (inner[q] != t && (z->must_store[inner[q]] || readers(z, inner[q], NULL, 0, NULL, &(int){0}) != 1)) root = -1;
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
        terms[q].store = !in_tree || z->must_store[terms[q].sum] || readers(z, terms[q].sum, NULL, 0, NULL, &(int){0}) != 1;
    }
    /* one small sum is as well served by one kernel per node */
    if (nt == 0 || (nt == 1 && tg_ir_numel(&g->nodes[terms[0].x]) < 65536)) {
        free(is_term), free(inner), free(terms);
        return;
    }
    fz_group *gr = new_group(z, FZ_SUMSQ);
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
        for (int c = z->coff[terms[q].sum]; c < z->coff[terms[q].sum + 1]; c++)
            if (is_view(g, z->cons[c]) && n_inner) v.mem[v.nm++] = z->cons[c];
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
    ok = ok && move_ok(z, &v);
    gr->turn = v.turn;
    if (ok) {
        int id = (int)(gr - z->gr);
        for (int m = 0; m < v.nm; m++) {
            int x = v.mem[m];
            z->grp[x] = id, z->role[x] = R_MEMBER, z->at[x] = gr->turn;
            z->kept[x] = !in_list(v.st, v.ns, x);
        }
    }
    gview_free(&v);
    free(is_term);
    if (!ok) {
        free_group(gr);
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
        int nr = readers(z, i, rbuf, n, NULL, &(int){0});
        bool only = nr > 0 && !z->must_store[i];
        for (int q = 0; q < nr && only; q++) only = mark[rbuf[q]] == 2;
        mark[i] = only ? 2 : 0;
    }
    int nt = 0, ns = 0, nr = 0;
    for (int i = total + 1; i < n; i++) {
        if (mark[i] != 2) continue;
        tl[nt++] = i;
        int c = readers(z, i, rbuf, n, NULL, &(int){0});
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
    if (ok && move_ok(z, &v)) {
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

/* ---- siblings: two nodes over the same rows, one kernel ---- */

/* A node computed by another's kernel from that kernel's own inputs
 * (tg_wgsl_fused.sib), so the rows are read once and one dispatch (two
 * for a split sum) is saved: a layer norm's bias gradient (a column sum of
 * gy) beside its gain gradient (norm_dgain reads the same gy), or a bias
 * gradient beside its weight gradient X^T dY when that product's K is
 * split (tg_wgsl_matmul_colsum_ok). Returns the kernel node that can take
 * node s as its sibling, or -1. */
static int sibling_of(const fz *z, int s) {
    const tg_node *n = &z->g->nodes[s];
    int64_t R, C, R2, C2;
    if (n->op == TG_OP_SUM && n->dtype == TG_F32 && tg_wgsl_colsum_dims(z->g, n, &R, &C)) {
        for (int c = z->coff[n->in[0]]; c < z->coff[n->in[0] + 1]; c++) {
            int j = z->cons[c];
            const tg_node *m = &z->g->nodes[j];
            if (tg_fuse_norm_sums_pair(&z->fg, j, s) && tg_wgsl_colsum_dims(z->g, m, &R2, &C2) && R2 == R && C2 == C)
                return j;
        }
        /* a split weight gradient over the same rows (through a reshape of them) */
        int rd[16], nr = readers(z, n->in[0], rd, 16, NULL, &(int){0});
        for (int r = 0; r < nr && r < 16; r++)
            if (tg_wgsl_matmul_colsum_ok(z->g, rd[r], s, R, C)) return rd[r];
    }
    return -1;
}

static void plan_siblings(fz *z) {
    for (int s = 0; s < z->n && !z->oom; s++) {
        if (z->grp[s] >= 0 || !runs(z, s)) continue;
        int j = sibling_of(z, s);
        if (j < 0 || z->grp[j] >= 0 || !runs(z, j)) continue;
        const tg_node *kn = &z->g->nodes[j];
        int mem[2] = {j, s}, rd[TG_MAX_IN], nr = 0, ops[2 + TG_MAX_IN];
        for (int k = 0; k < kn->nin; k++)
            if (!in_list(rd, nr, kn->in[k])) rd[nr++] = kn->in[k];
        bool ok = !overlap(&z->plan->slot[j], &z->plan->slot[s]);
        for (int r = 0; r < nr; r++)
            ok &= !overlap(&z->plan->slot[j], &z->plan->slot[rd[r]]) && !overlap(&z->plan->slot[s], &z->plan->slot[rd[r]]);
        memcpy(ops, mem, sizeof mem);
        memcpy(ops + 2, rd, sizeof(int) * (size_t)nr);
        int nb = tg_wgsl_count_bindings(z->plan, ops, 2 + nr) + (kn->op == TG_OP_MATMUL); /* its workspace */
        ok = ok && nb <= TG_WGSL_MAX_BINDINGS && (uint32_t)nb <= z->lim->max_storage_buffers_per_stage;
        gview v = {mem, 2, mem, 2, rd, nr, j > s ? j : s};
        if (!ok || !move_ok(z, &v)) continue;
        fz_group *gr = new_group(z, FZ_FUSED);
        if (!gr) return;
        int id = z->n_gr - 1;
        gr->f.kernel = j;
        gr->f.sib = s;
        gr->turn = v.turn;
        z->grp[j] = id, z->role[j] = R_KERNEL, z->at[j] = v.turn;
        z->grp[s] = id, z->role[s] = R_MEMBER, z->at[s] = v.turn;
    }
}

/* ---- products of one A: one dispatch ---- */

/* Products that read the same A with Bs of one shape (the q, k and v
 * projections of one input, and their weight gradients) run as one kernel
 * at the last one's turn: one dispatch instead of three, and 3x the
 * workgroups, so a [16384, 384] output fills the GPU's last wave better
 * (on the H200 gpt_small's step measured the same either way, 41.8
 * against 41.6 ms: the gain is the dispatches, which small models pay
 * for). A group whose K is split runs in two dispatches instead of two
 * per member, with fewer K-ranges per member (the members fill the GPU
 * together) and never more workspace than the program's largest
 * otherwise. Only plain products (no fused producer or epilogue) are
 * grouped, and only where the move check allows running the earlier ones
 * late. */
static bool mm_group_ok(const fz *z, const int *mm, int n) {
    int mem[FZ_MM_MAX], rd[FZ_MM_MAX + 1];
    int64_t work;
    int split = tg_wgsl_matmul_group_split(z->g, mm, n, z->work_most, &work);
    if (split < 1) return false;
    if (split > 1) { /* the workspace is one binding more */
        uint32_t most = z->lim->max_storage_buffers_per_stage;
        if (2 * n + 2 > TG_WGSL_MAX_BINDINGS || (uint32_t)(2 * n + 2) > most ||
            (uint64_t)work > z->lim->max_storage_buffer_binding_size)
            return false;
    }
    for (int q = 0; q < n; q++) mem[q] = mm[q], rd[q + 1] = z->g->nodes[mm[q]].in[1];
    rd[0] = z->g->nodes[mm[0]].in[0];
    gview v = {mem, n, mem, n, rd, n + 1, mm[n - 1]};
    for (int q = 0; q < n; q++) /* no output shares bytes with another or with an input */
        for (int r = 0; r < n + 1; r++)
            if ((r < n && r != q && overlap(&z->plan->slot[mm[q]], &z->plan->slot[mm[r]])) ||
                overlap(&z->plan->slot[mm[q]], &z->plan->slot[rd[r]]))
                return false;
    return move_ok(z, &v);
}

static void plan_matmul_groups(fz *z) {
    int cap = ((int)z->lim->max_storage_buffers_per_stage - 1) / 2;
    if (cap > FZ_MM_MAX) cap = FZ_MM_MAX;
    for (int i = 0; i < z->n; i++) {
        int64_t w = 0;
        if (runs(z, i) && tg_wgsl_phases(z->g, i, &w) > 1 && w > z->work_most) z->work_most = w;
    }
    for (int i = 0; i < z->n && cap >= 2; i++) {
        if (z->grp[i] >= 0 || z->g->nodes[i].op != TG_OP_MATMUL || !runs(z, i)) continue;
        int mm[FZ_MM_MAX] = {i}, n = 1;
        for (int j = i + 1; j < z->n && n < cap; j++) {
            if (z->grp[j] >= 0 || !runs(z, j) || !tg_wgsl_matmul_groupable(z->g, i, j)) continue;
            mm[n] = j;
            if (mm_group_ok(z, mm, n + 1)) n++;
        }
        if (n < 2) continue;
        fz_group *gr = new_group(z, FZ_MMGROUP);
        if (!gr) return;
        int id = z->n_gr - 1;
        memcpy(gr->mm, mm, sizeof mm);
        gr->n_mm = n;
        int64_t work;
        gr->mm_split = tg_wgsl_matmul_group_split(z->g, mm, n, z->work_most, &work);
        gr->turn = mm[n - 1];
        for (int q = 0; q < n; q++) z->grp[mm[q]] = id, z->role[mm[q]] = R_MEMBER, z->at[mm[q]] = gr->turn;
    }
}

/* An add tree over products of one geometry (the input gradient of the q,
 * k and v projections: dq Wq^T + dk Wk^T + dv Wv^T) runs as one product
 * that walks each term's K in turn into the same accumulators, stored once
 * by the root add: one dispatch for the products and the adds, and one
 * long K loop instead of several short ones (gpt_small's terms have K =
 * 384). Every product and inner add must be read only by the tree, and
 * the move check must allow running the products at the root's turn. */
typedef struct {
    int leaf[FZ_MM_MAX], nl, add[FZ_MM_MAX], na;
    bool bad;
} sum_tree;

static void sum_walk(const fz *z, int r, int x, sum_tree *t, int cap) {
    const tg_node *n = &z->g->nodes[x];
    if (t->bad) return;
    if (z->grp[x] >= 0 || !runs(z, x) || z->must_store[x] || z->coff[x + 1] - z->coff[x] != 1 || z->cons[z->coff[x]] != r) {
        t->bad = true;
    } else if (n->op == TG_OP_MATMUL) {
        if (t->nl == cap || (t->nl && !tg_wgsl_matmul_summable(z->g, t->leaf[0], x))) t->bad = true;
        else t->leaf[t->nl++] = x;
    } else if (n->op == TG_OP_ADD && t->na < FZ_MM_MAX && tg_shape_eq(n->shape, z->g->nodes[n->in[0]].shape) &&
               tg_shape_eq(n->shape, z->g->nodes[n->in[1]].shape)) {
        t->add[t->na++] = x;
        sum_walk(z, x, n->in[0], t, cap);
        sum_walk(z, x, n->in[1], t, cap);
    } else {
        t->bad = true;
    }
}

static void plan_matmul_sums(fz *z) {
    int cap = ((int)z->lim->max_storage_buffers_per_stage - 1) / 2;
    if (cap > FZ_MM_MAX) cap = FZ_MM_MAX;
    for (int r = z->n - 1; r >= 0 && cap >= 2; r--) { /* roots last first: a whole tree before its subtrees */
        const tg_node *n = &z->g->nodes[r];
        if (n->op != TG_OP_ADD || n->dtype != TG_F32 || z->grp[r] >= 0 || !runs(z, r) ||
            !tg_shape_eq(n->shape, z->g->nodes[n->in[0]].shape) || !tg_shape_eq(n->shape, z->g->nodes[n->in[1]].shape))
            continue;
        sum_tree t = {.nl = 0};
        sum_walk(z, r, n->in[0], &t, cap);
        sum_walk(z, r, n->in[1], &t, cap);
        if (t.bad || t.nl < 2 || !tg_wgsl_matmul_whole(z->g, t.leaf[0])) continue;
        int mem[2 * FZ_MM_MAX + 1], rd[2 * FZ_MM_MAX], nm = 0;
        for (int q = 0; q < t.nl; q++) {
            mem[nm++] = t.leaf[q];
            rd[2 * q] = z->g->nodes[t.leaf[q]].in[0], rd[2 * q + 1] = z->g->nodes[t.leaf[q]].in[1];
        }
        for (int q = 0; q < t.na; q++) mem[nm++] = t.add[q];
        mem[nm++] = r;
        bool ok = true; /* the sum's bytes are apart from every operand's */
        for (int q = 0; q < 2 * t.nl; q++) ok &= !overlap(&z->plan->slot[r], &z->plan->slot[rd[q]]);
        gview v = {mem, nm, &r, 1, rd, 2 * t.nl, r};
        if (!ok || !move_ok(z, &v)) continue;
        fz_group *gr = new_group(z, FZ_MMSUM);
        if (!gr) return;
        int id = z->n_gr - 1;
        memcpy(gr->mm, t.leaf, sizeof t.leaf);
        gr->n_mm = t.nl;
        gr->mm_sum = r;
        gr->turn = r;
        for (int q = 0; q < nm; q++) z->grp[mem[q]] = id, z->role[mem[q]] = R_MEMBER, z->at[mem[q]] = r, z->kept[mem[q]] = mem[q] != r;
    }
}

static tg_status emit_matmul_sum(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                                 tg_kernel_spec *sp, tg_wgsl_program *out) {
    wk k;
    tg_wk_open(&k, g, plan, lim, gr->turn, sp);
    tg_wgsl_matmul_sum(&k, gr->mm, gr->n_mm, gr->mm_sum);
    return tg_wk_close(&k, out);
}

/* One dispatch, or two sharing the workspace when the group's K is split. */
static tg_status emit_matmul_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                                   tg_wgsl_program *out, int *cap, fz_push push) {
    int phases = gr->mm_split > 1 ? 2 : 1;
    tg_status st = TG_OK;
    for (int p = 0; p < phases && st == TG_OK; p++) {
        tg_kernel_spec *sp;
        if ((st = push(out, cap, &sp)) != TG_OK) break;
        wk k;
        tg_wk_open(&k, g, plan, lim, gr->turn, sp);
        k.phase = phases > 1 ? p + 1 : 0;
        tg_wgsl_matmul_group(&k, gr->mm, gr->n_mm, gr->mm_split);
        if (k.st == TG_OK && sp->workspace > out->workspace_bytes) out->workspace_bytes = sp->workspace;
        st = tg_wk_close(&k, out);
    }
    return st;
}

/* ---- the program ---- */

static int g_fusion = -1; /* -1: from TG_WGSL_FUSE (default on) */

/* TG_WGSL_MM_GROUP=0 turns the matmul groups and sums off, for measuring. */
static bool mm_groups_on(void) { return tg_wgsl_knob("TG_WGSL_MM_GROUP", (const char *const[]){"0", NULL}, 1) != 0; }

void tg_wgsl_set_fusion(int on) { g_fusion = on; }

static bool fusion_on(void) {
    return g_fusion >= 0 ? g_fusion != 0 : tg_wgsl_knob("TG_WGSL_FUSE", (const char *const[]){"0", NULL}, 1) != 0;
}

/* The groups the plan was made with (prefuse.c): their members run at the
 * group's turn, the values they keep have no memory, and a permute the
 * attention kernels read with strides runs no kernel (it joins its first
 * reader's group). An attention is an FZ_ATTN group; a product with its
 * epilogue an FZ_FUSED one, which the elementwise fusion may still give
 * inline producers. */
static tg_status pre_planned(fz *z) {
    if (!z->fu) return TG_OK;
    const tg_wgsl_attns *at = z->fu->impl;
    int base = z->n_gr;
    for (int gi = 0; gi < z->fu->n_groups; gi++) {
        fz_group *gr = new_group(z, gi < at->n ? FZ_ATTN : FZ_FUSED);
        if (!gr) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
        gr->turn = z->fu->turn[gi];
        if (gi < at->n) {
            gr->attn = &at->a[gi];
            continue;
        }
        gr->f.kernel = -1;
        gr->f.inl = tg_calloc(1, sizeof(int));
        gr->f.epi = tg_calloc(4, sizeof(int));
        if (!gr->f.inl || !gr->f.epi) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    for (int i = 0; i < z->n; i++) {
        int gi = z->fu->group[i];
        uint8_t role = z->fu->role[i];
        if (role == TG_FUSE_VIEW)
            for (int c = z->coff[i]; c < z->coff[i + 1] && gi < 0; c++) gi = z->fu->group[z->cons[c]];
        if (gi < 0) continue;
        fz_group *gr = &z->gr[base + gi];
        z->grp[i] = base + gi;
        z->role[i] = R_MEMBER;
        z->at[i] = z->fu->turn[gi];
        z->kept[i] = role != TG_FUSE_OUTPUT;
        if (gr->kind != FZ_FUSED) continue;
        tg_opcode op = z->g->nodes[i].op;
        if ((op == TG_OP_MATMUL || op == TG_OP_LAYER_NORM || op == TG_OP_RMS_NORM) && gr->f.kernel < 0) {
            /* the product, then its epilogue in node order; or a norm */
            gr->f.kernel = i;
            z->role[i] = R_KERNEL;
        } else if (op == TG_OP_NORM_STATS) { /* the norm's statistics, its sibling (prefuse.c) */
            gr->f.sib = i;
        } else if (gr->f.n_epi < 4) {
            gr->f.epi[gr->f.n_epi++] = i;
            z->role[i] = R_EPI;
        }
    }
    return TG_OK;
}

bool tg_wgsl_fusion_enabled(void) { return fusion_on(); }

static tg_status fz_init(fz *z, const tg_graph *g, const tg_plan *plan, const tg_fusion *fu, const tg_writeback *wb,
                         int n_wb, const tg_wgsl_limits *lim) {
    memset(z, 0, sizeof *z);
    z->g = g, z->plan = plan, z->lim = lim, z->n = g->n, z->fu = fu && fu->n == g->n ? fu : NULL;
    int n = g->n;
    z->coff = tg_calloc((size_t)n + 2, sizeof(int));
    z->must_store = tg_calloc((size_t)n + 1, sizeof(bool));
    z->grp = tg_calloc((size_t)n + 1, sizeof(int));
    z->role = tg_calloc((size_t)n + 1, 1);
    z->at = tg_calloc((size_t)n + 1, sizeof(int));
    z->kept = tg_calloc((size_t)n + 1, sizeof(bool));
    if (!z->coff || !z->must_store || !z->grp || !z->role || !z->at || !z->kept)
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    int total = 0;
    for (int i = 0; i < n; i++) total += g->nodes[i].nin;
    z->cons = tg_calloc((size_t)total + 1, sizeof(int));
    if (!z->cons) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) z->coff[g->nodes[i].in[k] + 1]++;
    for (int i = 0; i < n; i++) z->coff[i + 1] += z->coff[i];
    int *fill = tg_calloc((size_t)n + 1, sizeof(int));
    if (!fill) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int x = g->nodes[i].in[k];
            /* a node reading x twice counts once */
            bool dup = false;
            for (int q = 0; q < k; q++) dup |= g->nodes[i].in[q] == x;
            if (!dup) z->cons[z->coff[x] + fill[x]++] = i;
        }
    for (int i = 0; i < n; i++) { /* compact the duplicates' gaps */
        int dst = z->coff[i];
        for (int q = 0; q < fill[i]; q++) z->cons[dst + q] = z->cons[z->coff[i] + q];
    }
    /* coff must describe the compacted lists: rebuild as prefix sums of fill */
    int *cons2 = tg_calloc((size_t)total + 1, sizeof(int));
    if (!cons2) {
        free(fill);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    int at = 0;
    for (int i = 0; i < n; i++) {
        int start = z->coff[i];
        z->coff[i] = at;
        for (int q = 0; q < fill[i]; q++) cons2[at++] = z->cons[start + q];
    }
    z->coff[n] = at;
    free(z->cons);
    z->cons = cons2;
    free(fill);
    for (int i = 0; i < n; i++) {
        z->grp[i] = -1;
        z->at[i] = i;
        z->must_store[i] = plan->slot[i].kind != TG_BUF_SCRATCH && plan->slot[i].kind != TG_BUF_NONE;
    }
    for (int w = 0; w < n_wb; w++) z->must_store[wb[w].src] = true;
    /* a view's value is its input's: what must be kept of one must be of the other */
    for (int i = n - 1; i >= 0; i--)
        if (is_view(g, i) && z->must_store[i]) z->must_store[g->nodes[i].in[0]] = true;
    tg_status st = tg_fuse_graph_init(&z->fg, g, z->fu, z->must_store);
    return st == TG_OK ? pre_planned(z) : st;
}

static void fz_free(fz *z) {
    for (int i = 0; i < z->n_gr; i++) free_group(&z->gr[i]);
    tg_fuse_graph_free(&z->fg);
    free(z->gr), free(z->coff), free(z->cons), free(z->must_store), free(z->grp), free(z->role), free(z->at), free(z->kept);
}

static tg_status push_spec(tg_wgsl_program *out, int *cap, tg_kernel_spec **slot) {
    if (out->n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        tg_kernel_spec *k = realloc(out->k, sizeof *k * (size_t)c);
        if (!k) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
        out->k = k;
        *cap = c;
    }
    *slot = &out->k[out->n];
    memset(*slot, 0, sizeof **slot);
    return TG_OK;
}

/* The attention kernels' statistics come first in the workspace; the
 * scratch the other kernels share (bound from 0) is moved past them. */
static void place_workspace(tg_wgsl_program *out, int64_t attn_bytes) {
    if (attn_bytes == 0) return;
    int64_t base = (attn_bytes + 255) / 256 * 256;
    for (int s = 0; s < out->n; s++)
        for (int b = 0; b < out->k[s].n_bindings && !out->k[s].attention_work; b++)
            if (out->k[s].bind[b].arena == TG_WGSL_WORKSPACE) out->k[s].bind[b].offset += base;
    out->workspace_bytes = out->workspace_bytes ? base + out->workspace_bytes : attn_bytes;
}

tg_status tg_wgsl_emit_program(const tg_graph *g, const tg_plan *plan, const tg_fusion *fu, const tg_writeback *wb,
                               int n_wb, const tg_wgsl_limits *lim, tg_wgsl_program *out) {
    memset(out, 0, sizeof *out);
    tg_status st = tg_wgsl_check_arenas(g, plan, lim);
    if (st != TG_OK) return st;
    fz z;
    st = fz_init(&z, g, plan, fu, wb, n_wb, lim);
    int64_t attn_bytes = z.fu ? ((const tg_wgsl_attns *)z.fu->impl)->work_bytes : 0;
    if (st == TG_OK && fusion_on() && !lim->one_kernel_per_node) {
        plan_optimizer(&z, wb, n_wb);
        plan_sumsq(&z);
        if (mm_groups_on()) plan_matmul_sums(&z); /* before the epilogues, which would take the adds */
        plan_elementwise(&z);
        plan_siblings(&z);
        if (mm_groups_on()) plan_matmul_groups(&z);
        if (z.oom) st = tg_fail(TG_ERR_NOMEM, "webgpu: out of memory planning fused kernels");
    }
    int cap = 0;
    for (int i = 0; i < g->n && st == TG_OK; i++) {
        int gi = z.grp[i];
        if (gi >= 0 && z.gr[gi].turn != i) continue; /* runs at its group's turn */
        if (gi >= 0 && z.gr[gi].kind == FZ_ATTN) {
            st = tg_wgsl_emit_attention(g, plan, z.fu, z.gr[gi].attn, lim, attn_bytes, out, &cap, push_spec);
            continue;
        }
        int64_t work = 0;
        int kn = gi < 0 ? i : z.gr[gi].kind == FZ_FUSED ? z.gr[gi].f.kernel : -1;
        if (kn >= 0 && tg_wgsl_phases(g, kn, &work) > 1) { /* two dispatches sharing the workspace */
            tg_wgsl_fused one = {kn, NULL, 0, NULL, 0, false, 0};
            const tg_wgsl_fused *f = gi < 0 ? &one : &z.gr[gi].f;
            if (f->sib) /* the sibling's partials follow the kernel's */
                work = g->nodes[kn].op == TG_OP_MATMUL ? tg_wgsl_matmul_colsum_work(g, kn) : 2 * work;
            for (int phase = 1; phase <= 2 && st == TG_OK; phase++) {
                tg_kernel_spec *k;
                if ((st = push_spec(out, &cap, &k)) != TG_OK) break;
                if ((st = tg_wgsl_emit_phase(g, plan, f, phase, work, lim, k)) == TG_OK) out->n++;
            }
            if (work > out->workspace_bytes) out->workspace_bytes = work;
            continue;
        }
        if (gi < 0) {
            tg_kernel_spec *k;
            if ((st = push_spec(out, &cap, &k)) != TG_OK) break;
            if ((st = tg_wgsl_emit(g, plan, i, lim, k)) == TG_OK && (k->source || k->upload)) out->n++;
            continue;
        }
        fz_group *gr = &z.gr[gi];
        if (gr->kind == FZ_MMGROUP) {
            st = emit_matmul_group(g, plan, lim, gr, out, &cap, push_spec);
        } else if (gr->kind == FZ_MMSUM) {
            tg_kernel_spec *k;
            if ((st = push_spec(out, &cap, &k)) == TG_OK) st = emit_matmul_sum(g, plan, lim, gr, k, out);
        } else if (gr->kind == FZ_FUSED) {
            tg_kernel_spec *k;
            if ((st = push_spec(out, &cap, &k)) != TG_OK) break;
            if ((st = tg_wgsl_emit_fused(g, plan, &gr->f, lim, k)) == TG_OK) out->n++;
        } else {
            st = tg_fz_emit_group(g, plan, lim, gr, out, &cap, push_spec);
        }
    }
    for (int w = 0; w < n_wb && st == TG_OK; w++) {
        if (plan->wb_free[w]) continue;
        tg_kernel_spec *k;
        if ((st = push_spec(out, &cap, &k)) != TG_OK) break;
        if ((st = tg_wgsl_emit_writeback(g, plan, wb[w].src, wb[w].dst, lim, k)) == TG_OK) out->n++;
    }
    place_workspace(out, attn_bytes);
    out->n_groups = z.n_gr;
    fz_free(&z);
    if (st != TG_OK) tg_wgsl_program_free(out);
    return st;
}

void tg_wgsl_program_free(tg_wgsl_program *p) {
    for (int i = 0; i < p->n; i++) tg_kernel_spec_free(&p->k[i]);
    free(p->k);
    memset(p, 0, sizeof *p);
}
