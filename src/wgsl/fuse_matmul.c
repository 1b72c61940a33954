/* The kernels of products of one A and of products summed by a tree of
 * adds, which the fusion before planning chose (prefuse.c). */
#include "fuse.h"

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

