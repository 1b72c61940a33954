/* The elementwise part of the WebGPU fusion before planning (grouping.c):
 * an elementwise node computed inline where its only readers load it (an
 * inline producer), or applied to a kernel's values as it stores them (an
 * epilogue: a bias add, relu, or a residual add after a product, the
 * scale after a sum). The matching is backend-neutral (fuse/ew.c); this
 * file adds what WGSL needs and records the groups, each a tg_fusion group
 * whose kept values are absorbed and so get no memory.
 *
 * Bindings, decided before any offset exists. A kernel binds each value it
 * stores or reads from memory as one range of its arena, merging ranges
 * that overlap (emit.c). Two values the same kernel touches overlap only
 * when the plan put one in place over the other or one is a view of the
 * other, and then their ranges are the same. So the bindings are at most
 * the distinct values the group stores or reads (a view counted as its
 * source), plus one for a split kernel's workspace, and each is one
 * value's bytes: a group is taken only while that count fits
 * max_storage_buffers_per_stage (and TG_WGSL_MAX_BINDINGS) and every such
 * value fits max_storage_buffer_binding_size.
 *
 * The optimizer's updates and the clip norm's sums are grouped before
 * this pass (grouping.c): their nodes are no longer free here. */
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "groups.h"

typedef struct {
    const tg_wgsl_limits *lim;
    int cut; /* the end of the backward: a group never spans it (a data-parallel step exchanges gradients there) */
} ew_ctx;

static int unview(const tg_fuse_graph *x, int v) {
    while (tg_fuse_is_view(x, v)) v = tg_fuse_node(x, v)->in[0];
    return v;
}

/* The bindings rule above, and no member across the cut. */
static bool fits(const tg_fuse_graph *x, const tg_ew_group *d, const void *ctx) {
    const ew_ctx *c = ctx;
    int mem[TG_EW_MAX_INL + TG_EW_MAX_EPI + 3], nm = tg_fuse_ew_members(x, d, mem);
    for (int q = 0; q < nm; q++)
        if ((mem[q] < c->cut) != (d->kernel < c->cut)) return false;
    int vals[TG_WGSL_MAX_BINDINGS + 1], n = 0, rd[64];
    int nr = tg_fuse_ew_reads(x, d, rd, 64), st[3] = {tg_fuse_ew_stored(d), d->sib, d->sib2};
    if (nr > 64) return false;
    for (int q = -3; q < nr; q++) {
        int v = q < 0 ? st[q + 3] : unview(x, rd[q]), k = 0;
        if (v < 0) continue;
        if ((uint64_t)tg_ir_numel(tg_fuse_node(x, v)) * 4 > c->lim->max_storage_buffer_binding_size) return false;
        while (k < n && vals[k] != v) k++;
        if (k < n) continue;
        if (n == TG_WGSL_MAX_BINDINGS) return false;
        vals[n++] = v;
    }
    int64_t work;
    tg_wgsl_fused_kernel f = {d->kernel, NULL, 0, NULL, 0, d->sib < 0 ? 0 : d->sib, d->sib2 < 0 ? 0 : d->sib2};
    n += tg_wgsl_fused_phases(x->g, &f, c->lim, &work) > 1;
    return n <= TG_WGSL_MAX_BINDINGS && (uint32_t)n <= c->lim->max_storage_buffers_per_stage;
}

static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Records d as its group (a new one when it has none): the value it
 * stores and its sibling are outputs, every other member is kept inside,
 * and which of them read in step with the output says where the plan may
 * put the output over what they read. */
static void commit(const tg_fuse_graph *x, tg_fusion *f, chosen_group *chosen, tg_ew_group *d) {
    if (d->gid < 0) d->gid = f->n_groups++;
    qsort(d->inl, (size_t)d->n_inl, sizeof(int), by_id); /* the emitter defines them inputs first */
    int mem[TG_EW_MAX_INL + TG_EW_MAX_EPI + 3], nm = tg_fuse_ew_members(x, d, mem), out = tg_fuse_ew_stored(d);
    for (int q = 0; q < nm; q++) {
        int m = mem[q];
        unsigned fl = tg_ops[tg_fuse_node(x, m)->op].flags;
        f->group[m] = d->gid;
        if (m == out || m == d->sib || m == d->sib2) {
            f->role[m] = TG_FUSE_OUTPUT;
            /* a link reads its operands at the element it writes; a kernel
             * that may run in place reads an element before writing it */
            f->inplace[m] = m == out && (m == d->kernel ? (fl & TG_OPF_INPLACE) : (fl & TG_OPF_ELEMWISE)) != 0;
        } else {
            f->role[m] = TG_FUSE_ABSORBED;
            f->inplace[m] = tg_fuse_ew_in_step(x, d, m);
        }
    }
    f->turn[d->gid] = d->turn;
    chosen[d->gid] = (chosen_group){.kind = GROUP_FUSED, .split = 1, .ew = *d};
}

/* The group node i runs as, to grow: a new one when i is free, the kernel
 * group it is the kernel of, else none (false). */
static bool draft_of(const tg_fuse_graph *x, const chosen_group *chosen, int i, tg_ew_group *d) {
    int gid = x->f->group[i];
    if (!tg_plan_runs(x->g, i)) return false;
    if (gid < 0) {
        *d = (tg_ew_group){.kernel = i, .sib = -1, .sib2 = -1, .turn = i, .gid = -1};
        return tg_fuse_free(x, i);
    }
    *d = chosen[gid].ew;
    return chosen[gid].kind == GROUP_FUSED && d->kernel == i;
}

tg_status tg_wgsl_choose_elementwise(const tg_fuse_graph *x, tg_fusion *f, const tg_wgsl_limits *lim, int cut,
                                   chosen_group *chosen) {
    tg_status st = TG_OK;
    ew_ctx c = {lim, cut};
    tg_ew_rules r = {fits, &c};
    tg_ew_group d;
    /* Epilogues first: a kernel that is not itself elementwise takes the
     * elementwise chain after it. */
    for (int i = 0; i < x->g->n && st == TG_OK; i++)
        if (!(tg_ops[tg_fuse_node(x, i)->op].flags & TG_OPF_MAP) && draft_of(x, chosen, i, &d) &&
            tg_fuse_ew_grow_epilogue(x, &d, &r))
            commit(x, f, chosen, &d);
    /* Then producers inline into every kernel, last reader first so that a
     * chain folds into its end. */
    for (int i = x->g->n - 1; i >= 0 && st == TG_OK; i--)
        if (draft_of(x, chosen, i, &d) && tg_fuse_ew_take_producers(x, &d, &r)) commit(x, f, chosen, &d);
    return st;
}
