/* The kernel specs of a planned graph's whole program, in order
 * (tg_wgsl_emit_program).
 *
 * Every dispatch costs the GPU a barrier and the CPU an encode, about as
 * much as a small kernel's work, so the program is cut into fewer, larger
 * kernels. The groups are all chosen before planning (grouping.c:
 * attention, products with their epilogue, siblings, sums and groups of
 * products, the optimizer's updates, the clip norm's sums, elementwise
 * chains), and the plan was made with them: they come in as they are,
 * their kept values without memory, each member running at its group's
 * turn. What only the plan's offsets decide is left to the emitters: how
 * many dispatches the optimizer and the clip norm take, their kernels
 * binding each arena's span of what they touch (ops_fused.c), and where
 * the split kernels' partial sums go (workspace_in_scratch below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "fused_attention.h"
#include "groups.h"

/* The lowering's state: the groups the plan was made with, by node. */
typedef struct {
    const tg_graph *g;
    const tg_plan *plan;
    const tg_fusion *fu; /* the groups chosen before planning (grouping.c), NULL for none */
    const tg_wgsl_limits *lim;
    int n;
    int *group_of;       /* group per node, -1 for none */
    program_group *groups;
    int n_groups, cap_groups;
} lowering;

/* ---- groups ---- */

static program_group *new_group(lowering *z, int kind) {
    if (z->n_groups == z->cap_groups) {
        int cap = z->cap_groups ? 2 * z->cap_groups : 16;
        program_group *g = realloc(z->groups, sizeof *g * (size_t)cap);
        if (!g) return NULL;
        z->groups = g;
        z->cap_groups = cap;
    }
    program_group *g = &z->groups[z->n_groups++];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    return g;
}

static void free_group(program_group *g) { free(g->f.inlined), free(g->f.epilogue); }

/* ---- the kernels of the sums and groups of products chosen before
 * planning (grouping.c) ---- */

static tg_status emit_product_sum(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                                 tg_kernel_spec *sp, tg_wgsl_program *out) {
    wgsl_kernel k;
    tg_kernel_open(&k, g, plan, lim, gr->turn, sp);
    tg_wgsl_matmul_sum(&k, gr->mm, gr->n_mm, gr->mm_sum);
    return tg_kernel_close(&k, out);
}

/* One dispatch, or two sharing the workspace when the group's K is split. */
static tg_status emit_product_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                                   tg_wgsl_program *out, int *cap, spec_push_fn push) {
    int phases = gr->mm_split > 1 ? 2 : 1;
    tg_status st = TG_OK;
    for (int p = 0; p < phases && st == TG_OK; p++) {
        tg_kernel_spec *sp;
        if ((st = push(out, cap, &sp)) != TG_OK) break;
        wgsl_kernel k;
        tg_kernel_open(&k, g, plan, lim, gr->turn, sp);
        k.phase = phases > 1 ? p + 1 : 0;
        tg_wgsl_matmul_group(&k, gr->mm, gr->n_mm, gr->mm_split);
        if (k.status == TG_OK && sp->workspace > out->workspace_bytes) out->workspace_bytes = sp->workspace;
        st = tg_kernel_close(&k, out);
    }
    return st;
}

/* ---- the program ---- */

/* The groups the plan was made with (grouping.c): their members run at the
 * group's turn, the values they keep have no memory, and a permute the
 * attention kernels read with strides runs no kernel (it joins its first
 * reader's group). A kernel group (GROUP_FUSED) comes with its description:
 * the kernel node, its sibling, inline producers and epilogue. */
static tg_status pre_planned(lowering *z) {
    if (!z->fu) return TG_OK;
    const tg_wgsl_chosen_groups *at = z->fu->impl;
    int base = z->n_groups;
    for (int gi = 0; gi < z->fu->n_groups; gi++) {
        const chosen_group *pg = &at->chosen[gi];
        program_group *gr = new_group(z, pg->kind);
        if (!gr) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
        gr->turn = z->fu->turn[gi];
        if (pg->kind == GROUP_ATTENTION) {
            gr->attn = &at->attn[gi];
        } else if (pg->kind == GROUP_OPTIM) {
            gr->seg = pg->seg, gr->n_seg = pg->n_seg;
        } else if (pg->kind == GROUP_SUMSQ) {
            gr->term = pg->sq.term, gr->n_term = pg->sq.n_term, gr->tree = pg->sq.tree, gr->n_tree = pg->sq.n_tree;
            gr->tail = pg->tail, gr->n_tail = pg->n_tail, gr->tail_st = pg->tail_st, gr->total = pg->sq.total;
        } else if (pg->kind != GROUP_FUSED) {
            memcpy(gr->mm, pg->mm, sizeof gr->mm);
            gr->n_mm = pg->n_mm;
            gr->mm_sum = pg->root;
            gr->mm_split = pg->split;
        } else {
            const tg_ew_group *d = &pg->ew;
            gr->f = (tg_wgsl_fused_kernel){d->kernel, tg_calloc((size_t)d->n_inl + 1, sizeof(int)), d->n_inl,
                                    tg_calloc((size_t)d->n_epi + 1, sizeof(int)), d->n_epi, d->sib < 0 ? 0 : d->sib,
                                    d->sib2 < 0 ? 0 : d->sib2};
            if (!gr->f.inlined || !gr->f.epilogue) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
            memcpy(gr->f.inlined, d->inl, sizeof(int) * (size_t)d->n_inl);
            memcpy(gr->f.epilogue, d->epi, sizeof(int) * (size_t)d->n_epi);
        }
    }
    for (int i = 0; i < z->n; i++)
        if (z->fu->group[i] >= 0) z->group_of[i] = base + z->fu->group[i];
    for (int j = 0; j < z->n; j++) /* a view permute joins its first reader's group */
        for (int k = 0; k < z->g->nodes[j].nin && z->fu->group[j] >= 0; k++) {
            int v = z->g->nodes[j].in[k];
            if (z->fu->role[v] == TG_FUSE_VIEW && z->group_of[v] < 0) z->group_of[v] = base + z->fu->group[j];
        }
    return TG_OK;
}

static tg_status lowering_init(lowering *z, const tg_graph *g, const tg_plan *plan, const tg_fusion *fu, const tg_wgsl_limits *lim) {
    memset(z, 0, sizeof *z);
    z->g = g, z->plan = plan, z->lim = lim, z->n = g->n, z->fu = fu && fu->n == g->n ? fu : NULL;
    z->group_of = tg_calloc((size_t)g->n + 1, sizeof(int));
    if (!z->group_of) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    for (int i = 0; i < g->n; i++) z->group_of[i] = -1;
    return pre_planned(z);
}

static void lowering_free(lowering *z) {
    for (int i = 0; i < z->n_groups; i++) free_group(&z->groups[i]);
    free(z->groups), free(z->group_of);
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

/* Kernels k[from, to) share the workspace's contents (a split product's two
 * phases, the clip norm's partial sums and their total) over turns
 * [t0, t1]: they bind `bytes` of the scratch arena instead, at the lowest
 * offset where no value the plan keeps over those turns lies and none of
 * their own bindings of the arena reaches (WebGPU forbids a writable
 * binding that overlaps another of the same dispatch). That may be past
 * the arena's end: *end grows to cover it. */
static void move_to_scratch(const tg_plan *plan, int64_t align, tg_wgsl_program *out, int from, int to, int t0,
                            int t1, int64_t bytes, int64_t *end) {
    int64_t at = 0;
    for (bool moved = true; moved;) { /* first fit: past every range in the way until none is */
        moved = false;
        for (int i = 0; i < plan->n && !moved; i++) {
            const tg_slot *sl = &plan->slot[i];
            if (sl->root != i || sl->arena != TG_ARENA_SCRATCH || sl->first > t1 || sl->last < t0) continue;
            if (sl->offset < at + bytes && at < sl->offset + sl->bytes)
                at = (sl->offset + sl->bytes + align - 1) / align * align, moved = true;
        }
        for (int s = from; s < to && !moved; s++)
            for (int b = 0; b < out->k[s].n_bindings && !moved; b++) {
                const tg_wgsl_binding *bd = &out->k[s].bind[b];
                if (bd->arena == TG_ARENA_SCRATCH && bd->offset < at + bytes && at < bd->offset + bd->size)
                    at = (bd->offset + bd->size + align - 1) / align * align, moved = true;
            }
    }
    for (int s = from; s < to; s++)
        for (int b = 0; b < out->k[s].n_bindings; b++)
            if (out->k[s].bind[b].arena == TG_WGSL_WORKSPACE) out->k[s].bind[b] = (tg_wgsl_binding){TG_ARENA_SCRATCH, at, bytes};
    if (at + bytes > *end) *end = at + bytes;
}

/* The workspace the kernels other than attention share is live only
 * within one use (one node's kernels in a row that bind it; turn[s] is
 * kernel s's turn), so each use goes into the scratch arena where it is
 * free over the use's turns, growing the arena only where none is (what
 * it grows by is reported as workspace). fashion_cnn and digits then need
 * no workspace, nerf and pokeformer less; the transformers' MLP weight
 * gradients split K at turns where the arena is full (gpt_small's by their
 * 26 MB of partial sums), so there it gains nothing. */
static tg_status workspace_in_scratch(const tg_plan *plan, const tg_wgsl_limits *lim, const int *first_kernel,
                                      int n_turns, tg_wgsl_program *out) {
    int *turn = tg_calloc((size_t)out->n + 1, sizeof(int));
    if (!turn) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    for (int i = 0, s = 0; s < out->n; s++) { /* the writebacks count as the last turn's */
        while (i < n_turns && first_kernel[i] <= s) i++;
        turn[s] = i > 0 ? i - 1 : 0;
    }
    int64_t align = lim->min_storage_buffer_offset_alignment > 0 ? lim->min_storage_buffer_offset_alignment : 256;
    int64_t end = plan->arena_bytes[TG_ARENA_SCRATCH];
    for (int s = 0; s < out->n;) {
        if (!out->k[s].workspace || out->k[s].attention_work) {
            s++;
            continue;
        }
        int e = s;
        int64_t bytes = 0;
        for (; e < out->n && out->k[e].workspace && !out->k[e].attention_work && out->k[e].node == out->k[s].node; e++)
            if (out->k[e].workspace > bytes) bytes = out->k[e].workspace;
        move_to_scratch(plan, align, out, s, e, turn[s], turn[e - 1], (bytes + 15) / 16 * 16, &end);
        s = e;
    }
    free(turn);
    out->workspace_bytes = 0; /* what is left is attention's (place_workspace) */
    out->scratch_bytes = end > plan->arena_bytes[TG_ARENA_SCRATCH] ? (end + align - 1) / align * align : end;
    if ((uint64_t)out->scratch_bytes > lim->max_buffer_size)
        return tg_fail(TG_ERR_LIMIT, "webgpu: the scratch arena with the kernels' partial sums needs %lld bytes, over "
                       "maxBufferSize %llu", (long long)out->scratch_bytes, (unsigned long long)lim->max_buffer_size);
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
    lowering z;
    st = lowering_init(&z, g, plan, fu, lim);
    int64_t attn_bytes = z.fu ? ((const tg_wgsl_chosen_groups *)z.fu->impl)->work_bytes : 0;
    int cap = 0;
    int *first_kernel = tg_calloc((size_t)g->n + 1, sizeof(int)); /* per turn: its first kernel */
    if (!first_kernel && st == TG_OK) st = tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    for (int i = 0; i < g->n && st == TG_OK; i++) {
        first_kernel[i] = out->n;
        int gi = z.group_of[i];
        if (gi >= 0 && z.groups[gi].turn != i) continue; /* runs at its group's turn */
        if (gi >= 0 && z.groups[gi].kind == GROUP_ATTENTION) {
            st = tg_wgsl_emit_attention(g, plan, z.fu, z.groups[gi].attn, lim, attn_bytes, out, &cap, push_spec);
            continue;
        }
        int64_t work = 0;
        int kn = gi < 0 ? i : z.groups[gi].kind == GROUP_FUSED ? z.groups[gi].f.kernel : -1;
        tg_wgsl_fused_kernel one = {kn, NULL, 0, NULL, 0, 0, 0};
        const tg_wgsl_fused_kernel *f = gi < 0 ? &one : &z.groups[gi].f;
        if (kn >= 0 && tg_wgsl_fused_phases(g, f, lim, &work) > 1) { /* two dispatches sharing the workspace */
            for (int phase = 1; phase <= 2 && st == TG_OK; phase++) {
                tg_kernel_spec *k;
                if ((st = push_spec(out, &cap, &k)) != TG_OK) break;
                if ((st = tg_wgsl_emit_phase(g, plan, f, phase, work, lim, k)) == TG_OK && k->source) out->n++;
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
        program_group *gr = &z.groups[gi];
        if (gr->kind == GROUP_PRODUCTS) {
            st = emit_product_group(g, plan, lim, gr, out, &cap, push_spec);
        } else if (gr->kind == GROUP_PRODUCT_SUM) {
            tg_kernel_spec *k;
            if ((st = push_spec(out, &cap, &k)) == TG_OK) st = emit_product_sum(g, plan, lim, gr, k, out);
        } else if (gr->kind == GROUP_FUSED) {
            tg_kernel_spec *k;
            if ((st = push_spec(out, &cap, &k)) != TG_OK) break;
            if ((st = tg_wgsl_emit_fused(g, plan, &gr->f, lim, k)) == TG_OK && k->source) out->n++;
        } else {
            st = tg_wgsl_emit_span_group(g, plan, lim, gr, out, &cap, push_spec);
        }
    }
    for (int w = 0; w < n_wb && st == TG_OK; w++) {
        if (plan->wb_free[w]) continue;
        tg_kernel_spec *k;
        if ((st = push_spec(out, &cap, &k)) != TG_OK) break;
        if ((st = tg_wgsl_emit_writeback(g, plan, wb[w].src, wb[w].dst, lim, k)) == TG_OK) out->n++;
    }
    if (st == TG_OK) st = workspace_in_scratch(plan, lim, first_kernel, g->n, out);
    free(first_kernel);
    place_workspace(out, attn_bytes);
    out->n_groups = z.n_groups;
    lowering_free(&z);
    if (st != TG_OK) tg_wgsl_program_free(out);
    return st;
}

void tg_wgsl_program_free(tg_wgsl_program *p) {
    for (int i = 0; i < p->n; i++) tg_kernel_spec_free(&p->k[i]);
    free(p->k);
    memset(p, 0, sizeof *p);
}
