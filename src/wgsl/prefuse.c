/* The WebGPU backend's fusion pass, before buffer planning: the groups
 * whose values in between must get no memory at all.
 *
 *   - causal attention (attention.c): the scores and softmax, [B, H, T, T],
 *     never exist in memory;
 *   - a product with an epilogue of bias add, relu or relu's gradient
 *     (fuse/fuse.h): the product's value lives only in the kernel's
 *     registers. In gpt_small's backward the product before relu's
 *     gradient is [16384, 1536], 100 MB live at the step's memory peak.
 *
 *   - a layer norm's row statistics for its backward (norm_stats) written
 *     by the layer norm of the same x that runs last before them (the
 *     planner's recomputation in the backward): one dispatch fewer per
 *     norm, and the statistics live from that layer norm on.
 *
 * A chain ending in a residual add stays with the fusion after planning
 * (fuse.c): the add may instead total a sum of products (FZ_MMSUM), which
 * that fusion weighs first. Everything else is fused after planning too,
 * where the plan's memory decides what may move. */
#include <stdlib.h>

#include "attention.h"

static void attns_free(void *p) {
    tg_wgsl_attns *a = p;
    if (a) free(a->a);
    free(a);
}

/* Every product with an epilogue that has no residual add, as one group
 * at the epilogue's last node: the product and the inner links absorbed. */
static void products(const tg_fuse_graph *x, tg_fusion *f) {
    for (int i = 0; i < x->g->n; i++) {
        tg_matmul_epi_match m;
        if (x->g->nodes[i].op != TG_OP_MATMUL || !tg_fuse_match_matmul_epi(x, i, &m) || m.resid >= 0) continue;
        int out = m.chain[m.len - 1];
        const tg_node *mn = &x->g->nodes[i];
        int reads[4] = {mn->in[0], mn->in[1], m.bias, m.gate};
        bool ready = true;
        for (int k = 0; k < 4; k++)
            ready &= reads[k] < 0 || (tg_fuse_ready_at(x, reads[k]) < out && f->role[reads[k]] != TG_FUSE_ABSORBED &&
                                      f->role[reads[k]] != TG_FUSE_REMAT);
        if (!ready) continue;
        int gid = f->n_groups++;
        for (int k = 0; k < m.len - 1; k++) f->group[m.chain[k]] = gid, f->role[m.chain[k]] = TG_FUSE_ABSORBED;
        f->group[out] = gid, f->role[out] = TG_FUSE_OUTPUT;
        f->turn[gid] = out;
        /* relu's gradient reads the gate at the element it writes, once per
         * element (a split product's second phase as well) */
        f->inplace[out] = m.gate >= 0;
    }
}

/* Every norm_stats with a free layer norm (or RMS norm) of the same x, eps
 * and form before it: one group of both outputs at the layer norm's turn. */
static void norm_stats(const tg_fuse_graph *x, tg_fusion *f) {
    for (int s = 0; s < x->g->n; s++) {
        const tg_node *n = tg_fuse_node(x, s);
        if (n->op != TG_OP_NORM_STATS || !tg_fuse_free(x, s)) continue;
        int best = -1, in = n->in[0];
        for (int r = x->rd0[in]; r < x->rd0[in + 1]; r++) {
            int j = x->rd[r];
            const tg_node *m = tg_fuse_node(x, j);
            if (j < s && j > best && tg_fuse_free(x, j) && m->in[0] == in && m->dtype == TG_F32 &&
                m->op == (n->at.norm.rms ? TG_OP_RMS_NORM : TG_OP_LAYER_NORM) && m->at.norm.eps == n->at.norm.eps)
                best = j;
        }
        if (best < 0) continue;
        int gid = f->n_groups++;
        f->group[best] = f->group[s] = gid;
        f->role[best] = f->role[s] = TG_FUSE_OUTPUT;
        f->turn[gid] = best;
    }
}

tg_status tg_wgsl_fuse(const tg_graph *g, const bool *pinned, const tg_wgsl_limits *lim, tg_fusion **out) {
    *out = NULL;
    tg_fusion *f = tg_fusion_new(g->n);
    tg_wgsl_attns *at = tg_calloc(1, sizeof *at);
    if (at) at->a = tg_calloc((size_t)g->n + 1, sizeof(tg_wgsl_attn));
    tg_fuse_graph fg;
    tg_status st = f && at && at->a ? tg_fuse_graph_init(&fg, g, f, pinned) : tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    if (st != TG_OK) {
        tg_fusion_free(f), attns_free(at);
        return st;
    }
    f->impl = at;
    f->impl_free = attns_free;
    tg_wgsl_fuse_attention(&fg, f, lim, at);
    products(&fg, f);
    norm_stats(&fg, f);
    tg_fuse_graph_free(&fg);
    if (f->n_groups == 0) {
        tg_fusion_free(f);
        return TG_OK;
    }
    *out = f;
    return TG_OK;
}
