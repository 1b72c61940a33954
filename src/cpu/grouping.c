/* The CPU fusion pass (see groups.h). A chain of nodes becomes one group only
 * when that cannot change what any other kernel or the caller sees:
 *  - every member whose value the group keeps to itself (absorbed) has all
 *    its readers inside the group and is not a result, capture, gradient or
 *    writeback source;
 *  - the group's kernel runs at its output's turn, after every value it
 *    reads from outside has been written;
 *  - its kernel does the same float operations as the separate kernels, so
 *    results are bitwise the same with or without fusion.
 * The planner then keeps the group's inputs live until its turn and lets an
 * output share an input's memory only where the group allows it. */
#include <stdint.h>
#include <stdlib.h>

#include "fused_attention.h"
#include "cpu.h"
#include "groups.h"
#include "../fuse/fuse.h"
#include "kernels.h"

typedef struct {
    const tg_program *p;
    const tg_graph *g;
    tg_fusion *f;
    cpu_groups *cg;
    tg_fuse_graph fg; /* readers, pinned nodes (fuse/fuse.h) */
} fuse_ctx;

static const tg_node *node(const fuse_ctx *x, int id) { return &x->g->nodes[id]; }
static bool f32(const fuse_ctx *x, int id) { return node(x, id)->dtype == TG_F32; }
static bool free_node(const fuse_ctx *x, int id) { return tg_fuse_free(&x->fg, id); }
static bool absorbable(const fuse_ctx *x, int id) { return tg_fuse_private(&x->fg, id); }
static int uses(const fuse_ctx *x, int id) { return tg_fuse_uses(&x->fg, id); }
static int reader(const fuse_ctx *x, int id) { return tg_fuse_reader(&x->fg, id); }
static int ready_at(const fuse_ctx *x, int id) { return tg_fuse_ready_at(&x->fg, id); }
/* Records group members: absorbed[] first, then the output. */
static int add_group(fuse_ctx *x, const int *absorbed, int n_abs, int out, bool inplace, const cpu_group *desc) {
    int gid = x->f->n_groups++;
    for (int k = 0; k < n_abs; k++) x->f->group[absorbed[k]] = gid, x->f->role[absorbed[k]] = TG_FUSE_ABSORBED;
    x->f->group[out] = gid;
    x->f->role[out] = TG_FUSE_OUTPUT;
    x->f->turn[gid] = out;
    x->f->inplace[out] = inplace;
    x->cg->g[x->cg->n++] = *desc;
    return gid;
}

/* ---- attention ---- */

/* Records an attention group: absorbed members, then its outputs (the
 * earliest one is its turn). Refused unless every value it reads from
 * outside is there by then. */
static void add_attention(fuse_ctx *x, const int *absorbed, int n_abs, const int *outs, int n_outs, const int *reads,
                          int n_reads, cpu_group *d) {
    int turn = outs[0];
    for (int k = 1; k < n_outs; k++) turn = outs[k] < turn ? outs[k] : turn;
    for (int k = 0; k < n_reads; k++)
        if (reads[k] >= 0 && ready_at(x, reads[k]) >= turn) return;
    d->out = turn;
    int gid = add_group(x, absorbed, n_abs, turn, false, d);
    for (int k = 0; k < n_outs; k++) x->f->group[outs[k]] = gid, x->f->role[outs[k]] = TG_FUSE_OUTPUT;
}

static bool attn_sizes_ok(int64_t T, int64_t Dh) { return T >= 2 && T <= ATTN_MAX_T && Dh >= 2 && Dh <= ATTN_MAX_DH; }

/* The forward group of match m, from its softmax a: the scores and the
 * scale's multiply absorbed, the softmax an output when kept (else
 * absorbed), the product with v (or the merge_heads permute taking it)
 * the result. */
typedef struct {
    int absorbed[6], n_abs, outs[2], n_outs, reads[4];
    cpu_group d;
} attn_fwd_group;

static attn_fwd_group forward_group(fuse_ctx *x, int a, const tg_attn_fwd_match *m, bool keep_att) {
    attn_fwd_group f = {.n_abs = 0, .n_outs = 0, .reads = {m->q, m->k, m->v, m->scale}};
    f.absorbed[f.n_abs++] = m->scores;
    if (m->scale_mul >= 0) f.absorbed[f.n_abs++] = m->scale_mul;
    if (keep_att) f.outs[f.n_outs++] = a;
    else f.absorbed[f.n_abs++] = a;
    int res = tg_fuse_result_of(&x->fg, m->o, f.absorbed, &f.n_abs);
    f.outs[f.n_outs++] = res;
    f.d = (cpu_group){CPU_GROUP_ATTN_FWD, -1, -1, -1, -1, false, -1, m->q, m->k, m->v, -1, keep_att ? a : -1, m->scale,
                      res, -1, -1, -1, false, -1, -1, -1, -1, -1, {-1, -1, -1, -1, -1, -1, -1, -1, -1, false}, -1};
    return f;
}

/* More than ATTN_MAX_T keys (fused_attention_long.c): a forward and its
 * backward, which computes the softmax again from q and k, so the softmax
 * gets no memory; or a forward alone (no gradient), a captured softmax
 * written out. Nothing is fused when the softmax has another reader, or is
 * captured and has a backward. */
static void fuse_attention_long(fuse_ctx *x, int a) {
    tg_attn_fwd_match m;
    tg_attn_bwd_match bm;
    if (!tg_fuse_match_attn_fwd(&x->fg, a, &m) || m.T <= ATTN_MAX_T || m.Dh < 2 || m.Dh > ATTN_MAX_DH || m.q == m.k)
        return;
    int sg = -1;
    for (int r = x->fg.rd0[a]; r < x->fg.rd0[a + 1]; r++)
        if (node(x, x->fg.rd[r])->op == TG_OP_SOFTMAX_GRAD) sg = x->fg.rd[r];
    bool bwd = sg >= 0;
    /* with dq and dk both wanted, their products keep q and k until the backward, which reads them */
    if (bwd && (x->fg.pinned[a] || !tg_fuse_match_attn_bwd(&x->fg, sg, &bm) || bm.att != a || bm.v != m.v ||
                bm.dout == m.v || bm.dq < 0 || bm.dk < 0 || bm.k != m.k || bm.q != m.q))
        return;
    for (int r = x->fg.rd0[a]; r < x->fg.rd0[a + 1]; r++) { /* the product with v, and the backward's */
        int p = x->fg.rd[r];
        if (p != m.o && !(bwd && (p == sg || p == bm.dv))) return;
    }
    attn_fwd_group f = forward_group(x, a, &m, !bwd && x->fg.pinned[a]);
    if (!bwd) {
        add_attention(x, f.absorbed, f.n_abs, f.outs, f.n_outs, f.reads, 4, &f.d);
        return;
    }
    int babs[8], n_babs = 0, bouts[3], n_bouts = 0;
    babs[n_babs++] = bm.dA;
    if (bm.ds != sg) babs[n_babs++] = sg;
    babs[n_babs++] = bm.ds;
    cpu_group e = {CPU_GROUP_ATTN_BWD, -1, -1, -1, -1, false, -1, m.q, m.k, m.v, bm.dout, -1, bm.dscale, -1, -1, -1, -1,
                   false, -1, -1, -1, -1, -1, {-1, -1, -1, -1, -1, -1, -1, -1, -1, false}, m.scale};
    bouts[n_bouts++] = e.dq = tg_fuse_result_of(&x->fg, bm.dq, babs, &n_babs); /* dq and dk: wanted (above) */
    bouts[n_bouts++] = e.dk = tg_fuse_result_of(&x->fg, bm.dk, babs, &n_babs);
    if (bm.dv >= 0) bouts[n_bouts++] = e.dv = tg_fuse_result_of(&x->fg, bm.dv, babs, &n_babs);
    int breads[6] = {m.q, m.k, m.v, bm.dout, bm.dscale, m.scale};
    /* both or neither: each must find what it reads ready by its turn, the backward after the forward */
    int fturn = f.d.o, bturn = INT32_MAX;
    for (int k = 0; k < n_bouts; k++) bturn = bouts[k] < bturn ? bouts[k] : bturn;
    if (bturn <= fturn) return;
    for (int k = 0; k < 4; k++)
        if (f.reads[k] >= 0 && ready_at(x, f.reads[k]) >= fturn) return;
    for (int k = 0; k < 6; k++)
        if (breads[k] >= 0 && ready_at(x, breads[k]) >= bturn) return;
    add_attention(x, f.absorbed, f.n_abs, f.outs, f.n_outs, f.reads, 4, &f.d);
    add_attention(x, babs, n_babs, bouts, n_bouts, breads, 6, &e);
    x->f->role[a] = TG_FUSE_REMAT; /* computed again by the backward, from q and k */
}

/* softmax_causal(q k^T [* c]) v, from its softmax node. The product sizes
 * are at least 2 in every direction, so tg_gemm would run its tile kernel
 * on them (whose rounding the fused kernel follows). The softmax is kept
 * (an output) when something else reads it. */
static void fuse_attention_fwd(fuse_ctx *x, int a) {
    tg_attn_fwd_match m;
    if (!tg_fuse_match_attn_fwd(&x->fg, a, &m) || !attn_sizes_ok(m.T, m.Dh)) return;
    attn_fwd_group f = forward_group(x, a, &m, x->fg.pinned[a] || uses(x, a) > 1);
    add_attention(x, f.absorbed, f.n_abs, f.outs, f.n_outs, f.reads, 4, &f.d);
}

/* The backward of the above, from its softmax_grad node (each product
 * optional but dA). */
static void fuse_attention_bwd(fuse_ctx *x, int sg) {
    tg_attn_bwd_match m;
    if (!tg_fuse_match_attn_bwd(&x->fg, sg, &m) || !attn_sizes_ok(node(x, sg)->shape.d[2], m.Dh)) return;
    int absorbed[8], n_abs = 0, outs[3], n_outs = 0;
    absorbed[n_abs++] = m.dA;
    if (m.ds != sg) absorbed[n_abs++] = sg;
    absorbed[n_abs++] = m.ds;
    cpu_group d = {CPU_GROUP_ATTN_BWD, -1, -1, -1, -1, false, -1, m.q, m.k, m.v, m.dout, m.att, m.dscale, -1, -1, -1, -1, false,
                   -1, -1, -1, -1, -1, {-1, -1, -1, -1, -1, -1, -1, -1, -1, false}, -1};
    if (m.dq >= 0) outs[n_outs++] = d.dq = tg_fuse_result_of(&x->fg, m.dq, absorbed, &n_abs);
    if (m.dk >= 0) outs[n_outs++] = d.dk = tg_fuse_result_of(&x->fg, m.dk, absorbed, &n_abs);
    if (m.dv >= 0) outs[n_outs++] = d.dv = tg_fuse_result_of(&x->fg, m.dv, absorbed, &n_abs);
    if (n_outs == 0) return;
    int reads[6] = {m.att, m.dout, m.v, m.q, m.k, m.dscale};
    add_attention(x, absorbed, n_abs, outs, n_outs, reads, 6, &d);
}

/* ---- Adam ---- */

/* One param's Adam update (fuse/optim.c), the gradient's clip factor
 * multiplied inline: one pass over the param, each element read and its
 * three updates written in place (the planner computes them into m, v and
 * p). SGD runs a kernel per node. */
static void fuse_adam(fuse_ctx *x, int ip) {
    tg_update_match u;
    if (!tg_fuse_match_update(&x->fg, ip, &u) || u.m2 < 0) return;
    int absorbed[1] = {u.gx}, n_abs = u.scale >= 0 ? 1 : 0; /* gx = grad * scale, computed inline */
    cpu_group d = {CPU_GROUP_ADAM, u.m2, -1, -1, -1, false, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, false,
                   u.m2, u.v2, ip, u.grad, u.scale, {-1, -1, -1, -1, -1, -1, -1, -1, -1, false}, -1};
    int gid = add_group(x, absorbed, n_abs, u.m2, true, &d);
    x->f->group[u.v2] = x->f->group[ip] = gid;
    x->f->role[u.v2] = x->f->role[ip] = TG_FUSE_OUTPUT;
    x->f->inplace[u.v2] = x->f->inplace[ip] = true;
}

/* ---- layer / RMS norm backward ---- */

#define FUSE_NORM_WITH_Y 0

static bool norm_stats_of(const fuse_ctx *x, int st, int xin, bool rms) {
    const tg_node *n = node(x, st);
    return n->op == TG_OP_NORM_STATS && n->in[0] == xin && n->at.norm.rms == rms && free_node(x, st);
}

/* norm_stats(x), norm_dx(x, g, gy, stats) and, when it is the only reader,
 * the add of dx into the residual stream's gradient, in one pass over the
 * rows; with them the norm's forward output computed again for the
 * backward (the rematerialized copy) when gy is ready by its turn, so x is
 * read once for all three. */
static void fuse_norm_bwd(fuse_ctx *x, int nd) {
    const tg_node *n = node(x, nd);
    if (!free_node(x, nd) || !f32(x, nd)) return;
    int xin = n->in[0], gain = n->in[1], gy = n->in[2], st = n->in[3];
    bool rms = n->at.norm.rms;
    if (!norm_stats_of(x, st, xin, rms) || !f32(x, xin) || !f32(x, gy) || !tg_shape_eq(node(x, gy)->shape, n->shape))
        return;
    cpu_group d = {CPU_GROUP_NORM_BWD, -1, -1, -1, -1, false, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, false,
                   -1, -1, -1, -1, -1, {xin, gy, st, nd, -1, -1, -1, -1, -1, false}, -1};
    int absorbed[2], n_abs = 0, outs[3], n_outs = 0;
    for (int r = x->fg.rd0[st]; r < x->fg.rd0[st + 1]; r++) d.nb.keep_stats |= x->fg.rd[r] != nd;
    d.nb.keep_stats |= x->fg.pinned[st];
    int out = nd;
    if (uses(x, nd) == 1 && !x->fg.pinned[nd]) {
        int a = reader(x, nd);
        const tg_node *an = node(x, a);
        int other = an->in[0] == nd ? an->in[1] : an->in[0];
        if (an->op == TG_OP_ADD && other != nd && free_node(x, a) && f32(x, other) && tg_shape_eq(an->shape, n->shape) &&
            tg_shape_eq(node(x, other)->shape, n->shape))
            d.nb.add = out = a, d.nb.resid = other, absorbed[n_abs++] = nd;
    }
    /* The recomputed norm of the same x, if gy (and the residual) are ready by
     * then. (Off: dx would then be written at the norm's turn, before the
     * weight gradient that reads the norm, and live across the step's peak:
     * +0.26 MB for the addition transformer's final norm.) */
    for (int r = x->fg.rd0[xin]; FUSE_NORM_WITH_Y && r < x->fg.rd0[xin + 1] && d.nb.ln < 0; r++) {
        int ln = x->fg.rd[r];
        const tg_node *l = node(x, ln);
        if (l->op == (rms ? TG_OP_RMS_NORM : TG_OP_LAYER_NORM) && l->in[0] == xin && l->in[1] == gain &&
            l->at.norm.eps == node(x, st)->at.norm.eps && free_node(x, ln) && ln < st && ready_at(x, gy) < ln &&
            (d.nb.resid < 0 || ready_at(x, d.nb.resid) < ln) && f32(x, ln))
            d.nb.ln = ln;
    }
    if (d.nb.ln >= 0) outs[n_outs++] = d.nb.ln;
    if (d.nb.keep_stats) outs[n_outs++] = st;
    else absorbed[n_abs++] = st;
    outs[n_outs++] = out;
    int turn = outs[0];
    for (int k = 1; k < n_outs; k++) turn = outs[k] < turn ? outs[k] : turn;
    int reads[4] = {xin, gain, gy, d.nb.resid};
    for (int k = 0; k < 4; k++)
        if (reads[k] >= 0 && ready_at(x, reads[k]) >= turn) return;
    if (d.nb.ln >= 0 && node(x, d.nb.ln)->nin > 2 && ready_at(x, node(x, d.nb.ln)->in[2]) >= turn) return;
    d.out = turn;
    int gid = add_group(x, absorbed, n_abs, turn, false, &d);
    for (int k = 0; k < n_outs; k++) x->f->group[outs[k]] = gid, x->f->role[outs[k]] = TG_FUSE_OUTPUT;
    /* Each row is read whole (statistics, y, both sums) before its dx is
     * written: dx may take the residual's or gy's memory. */
    x->f->inplace[out] = true;
}

/* norm_dgain(x, gy, stats) and the column sum of gy (the norm's bias
 * gradient) in one pass over the rows. */
static void fuse_norm_sums(fuse_ctx *x, int dg) {
    const tg_node *n = node(x, dg);
    int gy = n->in[1];
    int64_t D = tg_ir_numel(n), rows, cols;
    if (D > CPU_NORM_SUMS_MAX_D) return;
    for (int r = x->fg.rd0[gy]; r < x->fg.rd0[gy + 1]; r++) {
        int sb = x->fg.rd[r];
        if (!tg_fuse_norm_sums_pair(&x->fg, dg, sb) || !tg_cpu_colsum_shape(node(x, sb), node(x, gy), &rows, &cols) ||
            cols != D || rows * D != tg_ir_numel(node(x, gy)))
            continue;
        int turn = dg < sb ? dg : sb;
        int reads[3] = {n->in[0], gy, n->in[2]};
        for (int k = 0; k < 3; k++)
            if (ready_at(x, reads[k]) >= turn) return;
        cpu_group d = {CPU_GROUP_NORM_SUMS, turn, -1, -1, -1, false, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, false,
                       -1, -1, -1, -1, -1, {n->in[0], gy, n->in[2], -1, -1, -1, -1, dg, sb, false}, -1};
        int gid = add_group(x, NULL, 0, turn, false, &d);
        int other = turn == dg ? sb : dg;
        x->f->group[other] = gid, x->f->role[other] = TG_FUSE_OUTPUT;
        return;
    }
}

/* ---- the clip norm's sums of squares ---- */

/* sum(x * x) over every axis, each x's square read only by its sum: all of
 * them in one job at the first one's turn (each sum whole on one thread,
 * squared and added as the mul and sum kernels do). */
static void fuse_sumsq(fuse_ctx *x) {
    const tg_graph *g = x->g;
    cpu_groups *cg = x->cg;
    int first = -1;
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < g->n; s++) {
            int m = tg_fuse_match_sumsq(&x->fg, s);
            if (m < 0) continue;
            const tg_node *mn = node(x, m);
            if (pass == 0) { /* the turn: the first such sum whose input is ready by then */
                if (first < 0 && ready_at(x, mn->in[0]) < s) first = s;
                continue;
            }
            /* s < first, or on the other side of the end of the backward (p->cut), would run at the wrong turn */
            if (ready_at(x, mn->in[0]) >= first || s < first || (s < x->p->cut) != (first < x->p->cut)) continue;
            if (cg->n_sq == 0) {
                cpu_group d = {CPU_GROUP_SUMSQ, first, -1, -1, -1, false, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, false,
                               -1, -1, -1, -1, -1, {-1, -1, -1, -1, -1, -1, -1, -1, -1, false}, -1};
                add_group(x, NULL, 0, first, false, &d);
            }
            int gid = x->f->group[first];
            x->f->group[m] = gid, x->f->role[m] = TG_FUSE_ABSORBED;
            x->f->group[s] = gid, x->f->role[s] = TG_FUSE_OUTPUT;
            cg->sq[cg->n_sq].x = mn->in[0], cg->sq[cg->n_sq].sum = s;
            cg->n_sq++;
        }
        if (first < 0) return;
    }
}

/* A kept softmax that only the attention backward reads is private to the
 * two kernels: stored by keys, as the forward computes it down the query
 * lanes, it needs no transpose on either side. */
static void private_softmax(fuse_ctx *x) {
    cpu_groups *cg = x->cg;
    for (int i = 0; i < cg->n; i++) {
        cpu_group *f = &cg->g[i];
        if (f->kind != CPU_GROUP_ATTN_FWD || f->att < 0 || x->fg.pinned[f->att]) continue;
        bool private = true;
        for (int r = x->fg.rd0[f->att]; r < x->fg.rd0[f->att + 1]; r++) { /* its own forward group, or a backward */
            int gid = x->f->group[x->fg.rd[r]];
            private &= gid >= 0 && (gid == x->f->group[f->att] ||
                                    (cg->g[gid].kind == CPU_GROUP_ATTN_BWD && cg->g[gid].att == f->att));
        }
        if (!private) continue;
        f->att_cols = true;
        for (int k = 0; k < cg->n; k++)
            if (cg->g[k].kind == CPU_GROUP_ATTN_BWD && cg->g[k].att == f->att) cg->g[k].att_cols = true;
    }
}

/* A heads permute read only by attention kernels is read in place, with
 * strides: it needs no memory and no copy. */
static bool reads_strided(int gid, const void *cg) { return ((const cpu_groups *)cg)->g[gid].kind != CPU_GROUP_MATMUL; }

/* ---- max pooling's gradient with the relu's before it ---- */

/* relu_grad(x, max_pool2d_grad(x, y, gy)), x being the relu's output that
 * was pooled: the pooling gradient's pass applies the relu's (each window
 * sends its gradient to one element, equal to the window's max), which
 * saves a pass over dx and dx's memory. */
static void fuse_pool_relu(fuse_ctx *x, int rg) {
    const tg_node *n = node(x, rg);
    int pg = n->in[1];
    if (!free_node(x, rg) || !f32(x, rg) || node(x, pg)->op != TG_OP_MAX_POOL2D_GRAD || !absorbable(x, pg) ||
        node(x, pg)->in[0] != n->in[0] || !f32(x, pg) || !tg_shape_eq(n->shape, node(x, pg)->shape))
        return;
    cpu_group d = {CPU_GROUP_POOL_RELU, rg, pg, -1, -1, false, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, false,
                   -1, -1, -1, -1, -1, {-1, -1, -1, -1, -1, -1, -1, -1, -1, false}, -1};
    add_group(x, &pg, 1, rg, false, &d);
}

/* ---- a matmul with its epilogue ---- */

/* A product and its epilogue (fuse/fuse.h), as tg_gemm_epi applies them. */
static void fuse_matmul(fuse_ctx *x, int mm_id) {
    tg_matmul_epi_match m;
    if (!tg_fuse_match_matmul_epi(&x->fg, mm_id, &m)) return;
    int last = m.chain[m.len - 1];
    cpu_group d = {CPU_GROUP_MATMUL, last, mm_id, m.bias, m.gate, m.relu, m.resid, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                   false, -1, -1, -1, -1, -1, {-1, -1, -1, -1, -1, -1, -1, -1, -1, false}, -1};
    /* The epilogue reads the gate or the residual element by element, just
     * before it writes that element of C: so C may overwrite it if each C
     * element is written once (no k blocks). */
    bool inplace = false;
    if (d.gate >= 0 || d.resid >= 0) {
        void *in[TG_MAX_IN] = {0};
        tg_gemm_args ga;
        tg_cpu_matmul_args(x->g, mm_id, NULL, in, &ga);
        inplace = tg_gemm_single_pass(&ga);
    }
    add_group(x, m.chain, m.len - 1, last, inplace, &d);
}

static void groups_free(void *p) {
    cpu_groups *cg = p;
    if (cg) free(cg->g), free(cg->sq);
    free(cg);
}

tg_status tg_cpu_fuse(const tg_program *p, tg_fusion **out) {
    *out = NULL;
    if (tg_cpu_generic_steps()) return TG_OK;
    const tg_graph *g = p->g;
    size_t n = (size_t)g->n + 1;
    fuse_ctx x = {p, g, tg_fusion_new(g->n), tg_calloc(1, sizeof(cpu_groups)), {0}};
    bool *pinned = tg_calloc(n, sizeof(bool));
    if (x.cg) x.cg->g = tg_calloc(n, sizeof(cpu_group)), x.cg->sq = tg_calloc(n, sizeof *x.cg->sq);
    tg_status st = x.f && x.cg && x.cg->g && x.cg->sq && pinned ? TG_OK : tg_fail(TG_ERR_NOMEM, "cpu: out of memory");
    if (st == TG_OK) tg_program_pinned(p, pinned);
    if (st == TG_OK) st = tg_fuse_graph_init(&x.fg, g, x.f, pinned);
    if (st != TG_OK) {
        tg_fusion_free(x.f);
        groups_free(x.cg);
        free(pinned);
        return st;
    }
    x.f->impl = x.cg;
    x.f->impl_free = groups_free;

    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].op == TG_OP_SOFTMAX_CAUSAL) fuse_attention_fwd(&x, i), fuse_attention_long(&x, i);
        if (g->nodes[i].op == TG_OP_SOFTMAX_GRAD) fuse_attention_bwd(&x, i);
    }
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == TG_OP_MATMUL) fuse_matmul(&x, i);
        else if (g->nodes[i].op == TG_OP_ADAM_P) fuse_adam(&x, i);
        else if (g->nodes[i].op == TG_OP_NORM_DX) fuse_norm_bwd(&x, i);
        else if (g->nodes[i].op == TG_OP_NORM_DGAIN) fuse_norm_sums(&x, i);
        else if (tg_ir_is_relu_grad(&g->nodes[i])) fuse_pool_relu(&x, i);
    fuse_sumsq(&x);
    tg_fuse_view_permutes(&x.fg, x.f, reads_strided, x.cg);
    private_softmax(&x);

    tg_fuse_graph_free(&x.fg);
    free(pinned);
    if (x.f->n_groups == 0) {
        tg_fusion_free(x.f);
        return TG_OK;
    }
    *out = x.f;
    return TG_OK;
}
