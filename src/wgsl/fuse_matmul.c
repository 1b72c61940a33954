/* Siblings (two nodes over the same rows in one kernel), products of one
 * A in one dispatch, and products summed by a tree of adds (fuse.h). */
#include "fuse.h"

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
        int rd[16], nr = tg_fz_readers(z, n->in[0], rd, 16, NULL, &(int){0});
        for (int r = 0; r < nr && r < 16; r++)
            if (tg_wgsl_matmul_colsum_ok(z->g, rd[r], s, R, C)) return rd[r];
    }
    return -1;
}

void tg_fz_plan_siblings(fz *z) {
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
        if (!ok || !tg_fz_move_ok(z, &v)) continue;
        fz_group *gr = tg_fz_new_group(z, FZ_FUSED);
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
    return tg_fz_move_ok(z, &v);
}

void tg_fz_plan_matmul_groups(fz *z) {
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
        fz_group *gr = tg_fz_new_group(z, FZ_MMGROUP);
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

void tg_fz_plan_matmul_sums(fz *z) {
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
        if (!ok || !tg_fz_move_ok(z, &v)) continue;
        fz_group *gr = tg_fz_new_group(z, FZ_MMSUM);
        if (!gr) return;
        int id = z->n_gr - 1;
        memcpy(gr->mm, t.leaf, sizeof t.leaf);
        gr->n_mm = t.nl;
        gr->mm_sum = r;
        gr->turn = r;
        for (int q = 0; q < nm; q++) z->grp[mem[q]] = id, z->role[mem[q]] = R_MEMBER, z->at[mem[q]] = r, z->kept[mem[q]] = mem[q] != r;
    }
}

tg_status tg_fz_emit_matmul_sum(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                                 tg_kernel_spec *sp, tg_wgsl_program *out) {
    wk k;
    tg_wk_open(&k, g, plan, lim, gr->turn, sp);
    tg_wgsl_matmul_sum(&k, gr->mm, gr->n_mm, gr->mm_sum);
    return tg_wk_close(&k, out);
}

/* One dispatch, or two sharing the workspace when the group's K is split. */
tg_status tg_fz_emit_matmul_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
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

