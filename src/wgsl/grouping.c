/* The WebGPU backend's fusion pass, before buffer planning: the groups
 * whose values in between must get no memory at all.
 *
 *   - causal attention (attention_groups.c): the scores and softmax, [B, H, T, T],
 *     never exist in memory;
 *   - a product with an epilogue of bias add, relu or relu's gradient
 *     (fuse/fuse.h): the product's value lives only in the kernel's
 *     registers. In gpt_small's backward the product before relu's
 *     gradient is [16384, 1536], 100 MB live at the step's memory peak.
 *
 *   - a layer norm's row statistics for its backward (norm_stats) written
 *     by the layer norm of the same x that runs last before them (the
 *     planner's recomputation in the backward): one dispatch fewer per
 *     norm, and the statistics live from that layer norm on;
 *   - a column sum beside the kernel that reads the same rows (a bias
 *     gradient beside its layer norm's gain gradient, or beside its split
 *     weight gradient).
 *
 *   - a tree of adds over products of one geometry (the input gradient of
 *     the q, k and v projections, dq Wq^T + dk Wk^T + dv Wv^T) as one
 *     product walking each term's K in turn: the terms and the inner adds
 *     get no memory;
 *   - products of one A with Bs of one shape (the q, k and v projections
 *     and their weight gradients) as one kernel at the last one's turn.
 *     Chosen here, the plan keeps every member's operands until that turn;
 *     chosen after planning, a plan that reuses an earlier member's operand
 *     memory (as discarded gradients do) forbade the group.
 *
 *   - then elementwise chains (grouping_elementwise.c): a node computed inline where
 *     its readers load it, or applied to a kernel's values as it stores
 *     them (a residual add after a product, a chain after any kernel, a
 *     product's epilogue grown further), the links in between kept in
 *     registers. A product that would take such an epilogue is left to it
 *     by the groups of products; one that took a column sum beside it is
 *     a sibling already, so no group of products takes it.
 *
 *   - before those, the optimizer's updates of every param (the clip
 *     factor's multiply of each gradient kept inside) and the clip norm's
 *     sums of squares with their total and the scalars after it: kernels
 *     over many tensors, each binding its arenas' spans, so how many
 *     dispatches they take is decided after planning (ops_fused.c). */
#include <stdlib.h>
#include <string.h>

#include "fused_attention.h"
#include "emit.h"

static void chosen_groups_free(void *p) {
    tg_wgsl_chosen_groups *a = p;
    for (int gi = 0; a && a->chosen && gi < a->n_chosen; gi++) {
        chosen_group *pg = &a->chosen[gi];
        free(pg->seg), free(pg->tail), free(pg->tail_st);
        tg_sumsq_match_free(&pg->sq);
    }
    if (a) free(a->attn), free(a->chosen);
    free(a);
}

/* Records group gid as node kernel's, with its epilogue and sibling (-1
 * for none), at turn: what the emitters are given after planning. */
static void kernel_group(chosen_group *chosen, int gid, int kernel, const int *epi, int n_epi, int sib, int turn) {
    chosen[gid] = (chosen_group){.kind = GROUP_FUSED, .split = 1,
                             .ew = {.kernel = kernel, .sib = sib, .sib2 = -1, .turn = turn, .gid = gid}};
    if (n_epi > 0) memcpy(chosen[gid].ew.epi, epi, sizeof(int) * (size_t)n_epi); /* epi may be NULL when empty */
    chosen[gid].ew.n_epi = n_epi;
}

/* Every product with an epilogue that has no residual add, as one group
 * at the epilogue's last node: the product and the inner links absorbed. */
static void products(const tg_fuse_graph *x, tg_fusion *f, chosen_group *chosen) {
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
        kernel_group(chosen, gid, i, m.chain + 1, m.len - 1, -1, out);
    }
}

/* Every norm_stats with a free layer norm (or RMS norm) of the same x, eps
 * and form before it: one group of both outputs at the layer norm's turn. */
static void norm_stats(const tg_fuse_graph *x, tg_fusion *f, chosen_group *chosen) {
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
        kernel_group(chosen, gid, best, NULL, 0, s, best);
    }
}

/* ---- siblings: two nodes over the same rows, one kernel ---- */

static bool operand_ok(const tg_fuse_graph *x, int v, int t);

/* The kernel node that can compute column sum s beside its own output from
 * its own inputs (so the rows are read once, and one dispatch, two for a
 * split sum, is saved): a layer norm's gain gradient (norm_dgain reads the
 * same gy as its bias gradient), or a weight gradient X^T dY whose K is
 * split, beside the bias gradient (tg_wgsl_matmul_colsum_ok). -1 for none. */
static int sibling_of(const tg_fuse_graph *x, int s) {
    const tg_node *n = tg_fuse_node(x, s);
    int64_t R, C, R2, C2;
    if (n->op != TG_OP_SUM || n->dtype != TG_F32 || !tg_wgsl_colsum_dims(x->g, n, &R, &C)) return -1;
    int in = n->in[0], rd[16];
    for (int r = x->rd0[in]; r < x->rd0[in + 1]; r++) {
        int j = x->rd[r];
        if (tg_fuse_norm_sums_pair(x, j, s) && tg_wgsl_colsum_dims(x->g, tg_fuse_node(x, j), &R2, &C2) && R2 == R &&
            C2 == C)
            return j;
    }
    int nr = tg_fuse_value_readers(x, in, rd, 16); /* a weight gradient reads the rows through a reshape */
    for (int r = 0; r < nr && r < 16; r++)
        if (tg_wgsl_matmul_colsum_ok(x->g, rd[r], s, R, C)) return rd[r];
    return -1;
}

/* Every column sum with a free sibling kernel, as one group at the later
 * of the two turns: the plan then keeps the kernel's inputs until that
 * turn and writes both values there. (After planning, a plan that reused
 * memory between the two turns forbade it: gpt_small with discarded
 * gradients lost twelve.) */
static void siblings(const tg_fuse_graph *x, tg_fusion *f, const tg_wgsl_limits *lim, chosen_group *chosen) {
    for (int s = 0; s < x->g->n; s++) {
        if (!tg_fuse_free(x, s) || !tg_plan_runs(x->g, s)) continue;
        int j = sibling_of(x, s);
        if (j < 0 || !tg_fuse_free(x, j) || !tg_plan_runs(x->g, j)) continue;
        const tg_node *kn = tg_fuse_node(x, j);
        int turn = j > s ? j : s, rd[8];
        /* both values, the kernel's inputs, and a split product's workspace */
        int nb = 2 + kn->nin + (kn->op == TG_OP_MATMUL);
        bool ok = nb <= TG_WGSL_MAX_BINDINGS && (uint32_t)nb <= lim->max_storage_buffers_per_stage;
        for (int k = 0; k < kn->nin && ok; k++) ok = operand_ok(x, kn->in[k], turn);
        for (int m = 0; m < 2 && ok; m++) { /* nothing reads either value before the turn */
            int v = m ? s : j, nr = tg_fuse_value_readers(x, v, rd, 8);
            ok = nr <= 8;
            for (int r = 0; r < nr && r < 8 && ok; r++) ok = tg_fusion_at(f, rd[r]) > turn;
        }
        if (!ok) continue;
        int gid = f->n_groups++;
        f->group[j] = f->group[s] = gid;
        f->role[j] = f->role[s] = TG_FUSE_OUTPUT;
        f->turn[gid] = turn;
        kernel_group(chosen, gid, j, NULL, 0, s, turn);
    }
}

/* Unless a test forces it off: every norm_dx with its norm_dgain (the same
 * x, gy and statistics) and, where there is one, the bias sum of that gy
 * (tg_fuse_norm_sums_pair) as one group at the last of their turns, norm_dx
 * the kernel, which sums the other two over its rows (norm_bwd.c): x and
 * gy read once. Before the siblings, which would pair the two sums; an
 * epilogue after dx (a residual gradient's add) still grows on it. */
static void norm_backward(const tg_fuse_graph *x, tg_fusion *f, const tg_wgsl_limits *lim, chosen_group *chosen) {
    for (int i = 0; i < x->g->n; i++) {
        const tg_node *n = tg_fuse_node(x, i);
        if (n->op != TG_OP_NORM_DX || !tg_fuse_free(x, i) || !tg_plan_runs(x->g, i)) continue;
        int dg = -1, sb = -1, gy = n->in[2], rd[8];
        for (int r = x->rd0[gy]; r < x->rd0[gy + 1] && dg < 0; r++) {
            int j = x->rd[r];
            const tg_node *m = tg_fuse_node(x, j);
            if (m->op == TG_OP_NORM_DGAIN && m->in[0] == n->in[0] && m->in[1] == gy && m->in[2] == n->in[3] &&
                m->dtype == TG_F32 && tg_fuse_free(x, j) && tg_plan_runs(x->g, j))
                dg = j;
        }
        for (int r = x->rd0[gy]; dg >= 0 && r < x->rd0[gy + 1] && sb < 0; r++)
            if (tg_fuse_norm_sums_pair(x, dg, x->rd[r]) && tg_plan_runs(x->g, x->rd[r])) sb = x->rd[r];
        if (dg < 0 || !tg_wgsl_norm_bwd_chunks(x->g, i, sb >= 0, lim)) continue;
        int turn = i > dg ? i : dg, out[3] = {i, dg, sb};
        turn = sb > turn ? sb : turn;
        /* the three values, norm_dx's inputs and the workspace */
        int nb = 3 + (sb >= 0) + n->nin;
        bool ok = nb <= TG_WGSL_MAX_BINDINGS && (uint32_t)nb <= lim->max_storage_buffers_per_stage;
        for (int k = 0; k < n->nin && ok; k++) ok = operand_ok(x, n->in[k], turn);
        for (int m = 0; m < 3 && ok; m++) { /* nothing reads them before the turn */
            int nr = out[m] < 0 ? 0 : tg_fuse_value_readers(x, out[m], rd, 8);
            ok = nr <= 8;
            for (int r = 0; r < nr && r < 8 && ok; r++) ok = tg_fusion_at(f, rd[r]) > turn;
        }
        if (!ok) continue;
        int gid = f->n_groups++;
        for (int m = 0; m < 3; m++)
            if (out[m] >= 0) f->group[out[m]] = gid, f->role[out[m]] = TG_FUSE_OUTPUT;
        /* an element of a row is read before it is written, as unfused, and
         * the sums add the row's x and gy from registers: dx may go over gy */
        f->inplace[i] = true;
        f->in_step[dg] = true;
        if (sb >= 0) f->in_step[sb] = true;
        f->turn[gid] = turn;
        kernel_group(chosen, gid, i, NULL, 0, dg, turn);
        chosen[gid].ew.sib2 = sb;
    }
}

/* ---- groups of products ---- */

/* Whether the elementwise fusion (grouping_elementwise.c) may give product mm an
 * epilogue (its value's one reader elementwise, of its size). A group saves
 * a dispatch per member but the first, so it goes before a cheap producer
 * the product could compute inline. */
static bool wanted_after(const tg_fuse_graph *x, int mm) {
    int rd[2];
    return !x->pinned[mm] && tg_fuse_value_readers(x, mm, rd, 2) == 1 &&
           (tg_ops[tg_fuse_node(x, rd[0])->op].flags & TG_OPF_ELEMWISE) && tg_fuse_free(x, rd[0]) &&
           tg_ir_numel(tg_fuse_node(x, rd[0])) == tg_ir_numel(tg_fuse_node(x, mm));
}

/* Whether node v can be read from memory by a group at turn t. */
static bool operand_ok(const tg_fuse_graph *x, int v, int t) {
    return tg_fuse_ready_at(x, v) < t && x->f->role[v] != TG_FUSE_ABSORBED && x->f->role[v] != TG_FUSE_REMAT;
}

static int products_cap(const tg_wgsl_limits *lim) {
    int cap = ((int)lim->max_storage_buffers_per_stage - 1) / 2;
    return cap > GROUP_PRODUCTS_MAX ? GROUP_PRODUCTS_MAX : cap;
}

typedef struct {
    int leaf[GROUP_PRODUCTS_MAX], nl, add[GROUP_PRODUCTS_MAX], na;
    bool bad;
} sum_tree;

/* The tree under add r through node v: v read by its parent p alone. */
static void sum_walk(const tg_fuse_graph *x, int p, int v, sum_tree *t, int cap) {
    const tg_node *n = tg_fuse_node(x, v);
    if (t->bad) return;
    if (!tg_plan_runs(x->g, v) || !tg_fuse_private(x, v) || tg_fuse_reader(x, v) != p) {
        t->bad = true;
    } else if (n->op == TG_OP_MATMUL) {
        if (t->nl == cap || (t->nl && !tg_wgsl_matmul_summable(x->g, t->leaf[0], v))) t->bad = true;
        else t->leaf[t->nl++] = v;
    } else if (n->op == TG_OP_ADD && t->na < GROUP_PRODUCTS_MAX && tg_shape_eq(n->shape, tg_fuse_node(x, n->in[0])->shape) &&
               tg_shape_eq(n->shape, tg_fuse_node(x, n->in[1])->shape)) {
        t->add[t->na++] = v;
        sum_walk(x, v, n->in[0], t, cap);
        sum_walk(x, v, n->in[1], t, cap);
    } else {
        t->bad = true;
    }
}

/* Every tree of adds over at least two summable products that nothing
 * else reads: one group at the root, which alone is stored. Its kernel
 * walks each term's K in turn into the same accumulators: one dispatch,
 * and one long K loop instead of several short ones (gpt_small's terms
 * have K = 384). Roots last
 * first, so a whole tree goes before its subtrees. */
static void product_sums(const tg_fuse_graph *x, tg_fusion *f, const tg_wgsl_limits *lim, chosen_group *chosen) {
    int cap = products_cap(lim);
    for (int r = x->g->n - 1; r >= 0 && cap >= 2; r--) {
        const tg_node *n = tg_fuse_node(x, r);
        if (n->op != TG_OP_ADD || n->dtype != TG_F32 || !tg_fuse_free(x, r) || !tg_plan_runs(x->g, r) ||
            !tg_shape_eq(n->shape, tg_fuse_node(x, n->in[0])->shape) || !tg_shape_eq(n->shape, tg_fuse_node(x, n->in[1])->shape))
            continue;
        sum_tree t = {.nl = 0};
        sum_walk(x, r, n->in[0], &t, cap);
        sum_walk(x, r, n->in[1], &t, cap);
        if (t.bad || t.nl < 2 || !tg_wgsl_matmul_whole(x->g, t.leaf[0])) continue;
        bool ok = true;
        for (int q = 0; q < t.nl && ok; q++)
            for (int k = 0; k < 2; k++) ok &= operand_ok(x, tg_fuse_node(x, t.leaf[q])->in[k], r);
        if (!ok) continue;
        int gid = f->n_groups++;
        for (int q = 0; q < t.nl; q++) f->group[t.leaf[q]] = gid, f->role[t.leaf[q]] = TG_FUSE_ABSORBED;
        for (int q = 0; q < t.na; q++) f->group[t.add[q]] = gid, f->role[t.add[q]] = TG_FUSE_ABSORBED;
        f->group[r] = gid, f->role[r] = TG_FUSE_OUTPUT;
        f->turn[gid] = r;
        chosen[gid] = (chosen_group){.kind = GROUP_PRODUCT_SUM, .n_mm = t.nl, .root = r, .split = 1};
        for (int q = 0; q < t.nl; q++) chosen[gid].mm[q] = t.leaf[q];
    }
}

/* Whether products mm[0..n) can run as one kernel at mm[n - 1]'s turn:
 * the bindings fit, each member's operands exist by then and nothing
 * reads a member before it. *split: the K-ranges. */
static bool group_ok(const tg_fuse_graph *x, const int *mm, int n, const tg_wgsl_limits *lim, int64_t most, int *split) {
    int64_t work;
    int turn = mm[n - 1], rd[64];
    *split = tg_wgsl_matmul_group_split(x->g, mm, n, most, &work);
    if (*split < 1) return false;
    /* bindings: outputs, As and Bs in one dispatch; split, the As, the Bs
     * and the workspace in the first, the workspace and outputs in the second */
    int na = tg_wgsl_matmul_group_inputs(x->g, mm, n), most_bind = *split > 1 ? na + n + 1 : 2 * n + na;
    if (most_bind > TG_WGSL_MAX_BINDINGS || (uint32_t)most_bind > lim->max_storage_buffers_per_stage ||
        (*split > 1 && (uint64_t)work > lim->max_storage_buffer_binding_size))
        return false;
    for (int q = 0; q < n; q++) {
        const tg_node *m = tg_fuse_node(x, mm[q]);
        if (!operand_ok(x, m->in[0], turn) || !operand_ok(x, m->in[1], turn)) return false;
        int nr = tg_fuse_value_readers(x, mm[q], rd, 64);
        if (nr > 64) return false;
        for (int r = 0; r < nr; r++)
            if (tg_fusion_at(x->f, rd[r]) <= turn) return false;
    }
    return true;
}

/* One dispatch instead of one per product, with 3x the workgroups (the
 * gain is the dispatches, which small models pay for; gpt_small's step is
 * the same either way); a split K gives each member fewer K-ranges, never
 * more workspace than the program's largest otherwise.
 * Products of one A with Bs of one shape, none of them wanted by an
 * elementwise epilogue: greedily, in node order, up to the bindings. With
 * tg_wgsl_matmul_groups_led, the first may have an A of its own (the
 * others still share one, so a group never reaches past them into
 * another layer's products). */
static void product_groups(const tg_fuse_graph *x, tg_fusion *f, const tg_wgsl_limits *lim, chosen_group *chosen) {
    int cap = products_cap(lim);
    int64_t most = 0; /* the largest workspace of a product or sum alone */
    for (int i = 0; i < x->g->n; i++) {
        int64_t w = 0;
        if (tg_plan_runs(x->g, i) && tg_wgsl_phases(x->g, i, lim, &w) > 1 && w > most) most = w;
    }
    bool lead = tg_wgsl_matmul_groups_led();
    for (int i = 0; i < x->g->n && cap >= 2; i++) {
        if (tg_fuse_node(x, i)->op != TG_OP_MATMUL || !tg_fuse_free(x, i) || !tg_plan_runs(x->g, i) || wanted_after(x, i))
            continue;
        int mm[GROUP_PRODUCTS_MAX] = {i}, n = 1, split = 1, s;
        for (int j = i + 1; j < x->g->n && n < cap; j++) {
            /* led: the second member sets the A the rest share */
            bool ok = n == 1 ? tg_wgsl_matmul_groupable(x->g, i, j, !lead) : tg_wgsl_matmul_groupable(x->g, mm[1], j, true);
            if (!tg_fuse_free(x, j) || !tg_plan_runs(x->g, j) || !ok || wanted_after(x, j)) continue;
            mm[n] = j;
            if (group_ok(x, mm, n + 1, lim, most, &s)) n++, split = s;
        }
        if (n < 2 || (n < 3 && tg_wgsl_matmul_group_inputs(x->g, mm, n) > 1)) continue; /* a leader joins a group */
        int gid = f->n_groups++;
        for (int q = 0; q < n; q++) f->group[mm[q]] = gid, f->role[mm[q]] = TG_FUSE_OUTPUT;
        f->turn[gid] = mm[n - 1];
        chosen[gid] = (chosen_group){.kind = GROUP_PRODUCTS, .n_mm = n, .root = -1, .split = split};
        memcpy(chosen[gid].mm, mm, sizeof mm);
    }
}

/* ---- the optimizer and the clip norm: many tensors in a kernel or two ---- */

/* Whether node v's value is in memory for a kernel at turn t: a leaf or
 * a constant wherever its node stands, or a value stored before t. */
static bool readable_at(const tg_fuse_graph *x, int v, int t) {
    while (tg_fuse_is_view(x, v)) v = tg_fuse_node(x, v)->in[0];
    return tg_fuse_ready_before(x, v, t) && x->f->role[v] != TG_FUSE_ABSORBED && x->f->role[v] != TG_FUSE_REMAT;
}

/* Whether every reader of v's value runs after turn (or is a member of
 * group gid); false when out of memory. */
static bool read_after(const tg_fuse_graph *x, int v, int turn, int gid) {
    int *rd = tg_calloc((size_t)x->g->n + 1, sizeof(int)), nr = rd ? tg_fuse_value_readers(x, v, rd, x->g->n) : 0;
    bool ok = rd != NULL && nr <= x->g->n;
    for (int r = 0; r < nr && ok; r++) ok = x->f->group[rd[r]] == gid || tg_fusion_at(x->f, rd[r]) > turn;
    free(rd);
    return ok;
}

/* One param's update as the kernel takes it: fuse/optim.c's match and the
 * hyperparameters baked into the kernel. */
static optim_update seg_of(const tg_graph *g, const tg_update_match *u) {
    const tg_node *pn = &g->nodes[u->p2];
    optim_update q = {.p = u->p, .m = u->m, .v = u->v, .m2 = u->m2, .v2 = u->v2, .p2 = u->p2, .hyper = u->hyper,
                .gx = u->gx, .grad = u->grad, .scale = u->scale};
    if (pn->op == TG_OP_ADAM_P) {
        q.decay = pn->at.adam.decay;
        q.hp[0] = g->nodes[u->m2].at.adam.beta, q.hp[1] = g->nodes[u->v2].at.adam.beta, q.hp[2] = pn->at.adam.eps;
    } else {
        q.hp[0] = pn->at.sgd.momentum, q.hp[1] = pn->at.sgd.weight_decay;
        q.nesterov = pn->at.sgd.nesterov, q.momentum = pn->at.sgd.has_momentum;
    }
    return q;
}

/* Updates one kernel computes with the same code: the op, hyperparameters and clip scale. */
static bool same_kind(const tg_graph *g, const optim_update *a, const optim_update *b) {
    return g->nodes[a->p2].op == g->nodes[b->p2].op && a->hyper == b->hyper && a->scale == b->scale &&
           memcmp(a->hp, b->hp, sizeof a->hp) == 0 && a->nesterov == b->nesterov && a->momentum == b->momentum;
}

/* Whether update q's kernel can read what it reads at turn, on turn's side of the cut. */
static bool seg_ok(const tg_fuse_graph *x, const optim_update *q, int turn, int cut) {
    int rd[6] = {q->p, q->m, q->v, q->grad, q->scale, q->hyper}, mem[4] = {q->m2, q->v2, q->p2, q->scale >= 0 ? q->gx : -1};
    for (int k = 0; k < 6; k++)
        if (rd[k] >= 0 && !readable_at(x, rd[k], turn)) return false;
    for (int k = 0; k < 4; k++)
        if (mem[k] >= 0 && (mem[k] < cut) != (turn < cut)) return false;
    return true;
}

/* The updates of every param, one group per kind at the last of them:
 * each update written over the state or param it replaces (the plan makes
 * its writeback free), the clip factor's multiply of the gradient computed
 * inline (no memory). Its kernel binds each arena's span of what the
 * updates touch, so the plan's offsets decide after planning how many
 * dispatches it takes (ops_fused.c). */
static tg_status optimizer(const tg_fuse_graph *x, tg_fusion *f, chosen_group *chosen, int cut) {
    const tg_graph *g = x->g;
    optim_update *segs = tg_calloc((size_t)g->n + 1, sizeof *segs);
    bool *used = tg_calloc((size_t)g->n + 1, sizeof(bool));
    int ns = 0;
    if (!segs || !used) {
        free(segs), free(used);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    for (int i = 0; i < g->n; i++) {
        tg_update_match u;
        tg_opcode op = g->nodes[i].op;
        if ((op == TG_OP_ADAM_P || op == TG_OP_SGD_P) && tg_fuse_match_update(x, i, &u)) segs[ns++] = seg_of(g, &u);
    }
    for (int a = 0; a < ns; a++) {
        if (used[a]) continue;
        int turn = -1, n = 0;
        for (int b = a; b < ns; b++)
            if (!used[b] && same_kind(g, &segs[a], &segs[b]) && segs[b].p2 > turn) turn = segs[b].p2;
        int gid = f->n_groups;
        optim_update *mine = tg_calloc((size_t)ns + 1, sizeof *mine);
        if (!mine) {
            free(segs), free(used);
            return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
        }
        for (int b = a; b < ns; b++) {
            const optim_update *q = &segs[b];
            if (used[b] || !same_kind(g, &segs[a], q)) continue;
            used[b] = true;
            if (!seg_ok(x, q, turn, cut) || !read_after(x, q->p2, turn, gid)) continue; /* left to its own kernels */
            mine[n++] = *q;
        }
        if (n == 0) {
            free(mine);
            continue;
        }
        turn = -1;
        for (int b = 0; b < n; b++) turn = mine[b].p2 > turn ? mine[b].p2 : turn;
        f->n_groups++;
        for (int b = 0; b < n; b++) {
            const optim_update *q = &mine[b];
            int out[3] = {q->m2, q->v2, q->p2};
            for (int k = 0; k < 3; k++)
                if (out[k] >= 0) f->group[out[k]] = gid, f->role[out[k]] = TG_FUSE_OUTPUT, f->inplace[out[k]] = true;
            if (q->scale >= 0) f->group[q->gx] = gid, f->role[q->gx] = TG_FUSE_ABSORBED;
        }
        f->turn[gid] = turn;
        chosen[gid] = (chosen_group){.kind = GROUP_OPTIM, .split = 1, .seg = mine, .n_seg = n};
    }
    free(segs), free(used);
    return TG_OK;
}

/* What a kernel of the clip norm can read at turn t (fuse/sumsq.c's hook). */
static bool sumsq_readable(int v, int t, const void *ctx) { return readable_at(ctx, v, t); }

/* The clip norm's sums of squares of every gradient (fuse/sumsq.c), the
 * adds totalling them and the scalars after the total (the clip factor,
 * the step check) as one group at the last term: their kernels (a
 * dispatch of partial sums, one of totals) keep every square, unstored
 * sum and add inside. */
static tg_status clip_norm(const tg_fuse_graph *x, tg_fusion *f, chosen_group *chosen, int cut, const tg_wgsl_limits *lim) {
    tg_fuse_hooks h = {NULL, sumsq_readable, x};
    tg_sumsq_match m;
    tg_status st = tg_fuse_match_sumsq_total(x, &h, &m);
    if (st != TG_OK || m.n_term == 0) {
        tg_sumsq_match_free(&m);
        return st;
    }
    int n = x->g->n, turn = m.turn, gid = f->n_groups, nt = 0;
    int *tail = tg_calloc((size_t)n + 1, sizeof(int));
    bool *stored = tg_calloc((size_t)n + 1, sizeof(bool));
    if (tail && stored && m.total >= 0) nt = tg_fuse_match_sumsq_tails(x, &h, m.total, turn, tail, stored);
    if (!tail || !stored || nt < 0) {
        free(tail), free(stored), tg_sumsq_match_free(&m);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    /* what it reads exists then; nothing outside reads what it writes before then */
    /* its totals kernel keeps one f32 per term in workgroup memory; past
     * the device's, the sums stay unfused, which needs none */
    bool ok = (uint64_t)m.n_term * 4 <= lim->max_workgroup_storage_size;
    for (int q = 0; q < m.n_term && ok; q++) {
        const tg_sumsq_term *t = &m.term[q];
        ok = readable_at(x, t->x, turn) && (t->sum < cut) == (turn < cut) && (!t->store || read_after(x, t->sum, turn, gid));
    }
    for (int q = 0; q < m.n_tree && ok; q++) ok = (m.tree[q] < cut) == (turn < cut);
    ok = ok && (m.total < 0 || read_after(x, m.total, turn, gid));
    for (int q = 0; q < nt && ok; q++) ok = (tail[q] < cut) == (turn < cut) && (!stored[q] || read_after(x, tail[q], turn, gid));
    if (!ok) {
        free(tail), free(stored), tg_sumsq_match_free(&m);
        return TG_OK;
    }
    f->n_groups++;
    for (int q = 0; q < m.n_term; q++) {
        const tg_sumsq_term *t = &m.term[q];
        f->group[t->sq] = f->group[t->sum] = gid;
        f->role[t->sq] = TG_FUSE_ABSORBED;
        f->role[t->sum] = t->store ? TG_FUSE_OUTPUT : TG_FUSE_ABSORBED;
    }
    for (int q = 0; q < m.n_tree; q++) f->group[m.tree[q]] = gid, f->role[m.tree[q]] = TG_FUSE_ABSORBED;
    if (m.total >= 0) f->role[m.total] = TG_FUSE_OUTPUT;
    for (int q = 0; q < nt; q++) f->group[tail[q]] = gid, f->role[tail[q]] = stored[q] ? TG_FUSE_OUTPUT : TG_FUSE_ABSORBED;
    f->turn[gid] = turn;
    chosen[gid] = (chosen_group){.kind = GROUP_SUMSQ, .split = 1, .sq = m, .tail = tail, .n_tail = nt, .tail_st = stored};
    return TG_OK;
}

tg_status tg_wgsl_choose_groups(const tg_graph *g, const bool *pinned, int cut, const tg_wgsl_limits *lim, tg_fusion **out) {
    *out = NULL;
    tg_fusion *f = tg_fusion_new(g->n);
    tg_wgsl_chosen_groups *at = tg_calloc(1, sizeof *at);
    if (at) at->attn = tg_calloc((size_t)g->n + 1, sizeof(tg_wgsl_attn));
    if (at) at->chosen = tg_calloc((size_t)g->n + 1, sizeof(chosen_group)), at->n_chosen = at->chosen ? g->n + 1 : 0;
    tg_fuse_graph fg;
    tg_status st = f && at && at->attn && at->chosen ? tg_fuse_graph_init(&fg, g, f, pinned)
                                               : tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    if (st != TG_OK) {
        tg_fusion_free(f), chosen_groups_free(at);
        return st;
    }
    f->impl = at;
    f->impl_free = chosen_groups_free;
    tg_wgsl_choose_attention(&fg, f, lim, at);
    for (int gi = 0; gi < at->n_attn; gi++) at->chosen[gi].kind = GROUP_ATTENTION;
    products(&fg, f, at->chosen);
    norm_stats(&fg, f, at->chosen);
    if (!lim->one_kernel_per_node && tg_wgsl_forced()->norm_backward != TG_WGSL_OFF) norm_backward(&fg, f, lim, at->chosen);
    if (!lim->one_kernel_per_node) {
        siblings(&fg, f, lim, at->chosen);
        product_sums(&fg, f, lim, at->chosen);
        product_groups(&fg, f, lim, at->chosen);
        st = optimizer(&fg, f, at->chosen, cut);
        if (st == TG_OK) st = clip_norm(&fg, f, at->chosen, cut, lim);
        if (st == TG_OK) st = tg_wgsl_choose_elementwise(&fg, f, lim, cut, at->chosen);
    }
    tg_fuse_graph_free(&fg);
    if (st != TG_OK || f->n_groups == 0) {
        tg_fusion_free(f);
        return st;
    }
    *out = f;
    return TG_OK;
}
