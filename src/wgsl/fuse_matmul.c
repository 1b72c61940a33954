/* Siblings (two nodes over the same rows in one kernel), and the kernels of
 * products of one A and of products summed by a tree of adds, which the
 * fusion before planning chose (prefuse.c). */
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

/* ---- the kernels of the sums and groups of products chosen before
 * planning (prefuse.c) ---- */

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

