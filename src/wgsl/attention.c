/* The WebGPU backend's fusion pass: which causal attentions run as the
 * fused kernels of ops_attention.c (see attention.h for the rule).
 *
 * A forward and its backward are fused together or not at all: the fused
 * backward never reads the softmax from memory, so once the forward keeps
 * it in registers every reader of the softmax must be a fused kernel. */
#include <stdlib.h>
#include <string.h>

#include "attention.h"

typedef struct {
    const tg_graph *g;
    const bool *pinned;
    const tg_wgsl_limits *lim;
    tg_fusion *f;
    tg_wgsl_attns *at;
    int *rd0, *rd; /* readers of node i: rd[rd0[i] .. rd0[i + 1]) */
} actx;

static const tg_node *nd(const actx *x, int id) { return &x->g->nodes[id]; }
static int n_readers(const actx *x, int id) { return x->rd0[id + 1] - x->rd0[id]; }
static bool is_free(const actx *x, int id) { return x->f->group[id] < 0 && x->f->role[id] == TG_FUSE_NONE; }
/* read only by one node, not from outside, in no group yet */
static bool private1(const actx *x, int id) { return n_readers(x, id) == 1 && !x->pinned[id] && is_free(x, id); }
static int only_reader(const actx *x, int id) { return x->rd[x->rd0[id]]; }

static bool f32_4d(const actx *x, int id) { return nd(x, id)->dtype == TG_F32 && nd(x, id)->shape.ndim == 4; }

static bool matmul_of(const actx *x, int id, bool ta, bool tb) {
    const tg_node *n = nd(x, id);
    return n->op == TG_OP_MATMUL && n->at.matmul.ta == ta && n->at.matmul.tb == tb && f32_4d(x, id) && f32_4d(x, n->in[0]) &&
           f32_4d(x, n->in[1]) && n->in[0] != n->in[1];
}

static bool scalar_const(const actx *x, int id) {
    return nd(x, id)->op == TG_OP_CONST && nd(x, id)->dtype == TG_F32 && tg_ir_numel(nd(x, id)) == 1;
}

/* permute (0, 2, 1, 3): split_heads, merge_heads and their gradients */
static bool heads_permute(const actx *x, int id) {
    return tg_ir_heads_permute(nd(x, id)) && f32_4d(x, id);
}

static bool bhtd(const tg_shape *s, const tg_wgsl_attn *a) {
    return s->ndim == 4 && s->d[0] == a->B && s->d[1] == a->H && s->d[2] == a->T && s->d[3] == a->Dh;
}

/* A product's destination: the merge_heads permute that is its only reader
 * (the kernel then writes [B, T, H, Dh] with strides), or the product. */
static int result_of(const actx *x, int mm, int *abs, int *n_abs) {
    if (private1(x, mm) && heads_permute(x, only_reader(x, mm)) && is_free(x, only_reader(x, mm))) {
        abs[(*n_abs)++] = mm;
        return only_reader(x, mm);
    }
    return mm;
}

/* The turn at which node id's value exists (through views and permutes the
 * kernels read with strides). */
static int ready_at(const actx *x, int id) {
    while ((tg_ops[nd(x, id)->op].flags & TG_OPF_VIEW) || x->f->role[id] == TG_FUSE_VIEW) id = nd(x, id)->in[0];
    return tg_fusion_at(x->f, id);
}

static bool fits(const actx *x, const tg_wgsl_attn *a) {
    if (a->Dh % 4 || a->Dh < 4 || a->Dh > TG_WGSL_ATTN_MAX_DH || a->T < 1) return false;
    uint64_t row = (uint64_t)a->Dh * 4, rows = (uint64_t)(a->B * a->H * a->T);
    /* two key (or query) tiles of at least 4 rows each, plus their statistics */
    if (4 * (2 * row + 8) > x->lim->max_workgroup_storage_size) return false;
    return rows * row <= x->lim->max_storage_buffer_binding_size && rows * 4 <= x->lim->max_storage_buffer_binding_size;
}

/* softmax_causal(q k^T [* c]) v from the softmax node a. */
static bool match_fwd(const actx *x, int a, tg_wgsl_attn *d, int *abs, int *n_abs) {
    const tg_node *an = nd(x, a);
    if (!f32_4d(x, a) || x->pinned[a] || !is_free(x, a) || an->shape.d[2] != an->shape.d[3]) return false;
    int s = an->in[0];
    d->scale = -1;
    if (nd(x, s)->op == TG_OP_MUL && private1(x, s)) {
        const tg_node *m = nd(x, s);
        int c = scalar_const(x, m->in[1]) ? 1 : scalar_const(x, m->in[0]) ? 0 : -1;
        if (c < 0 || m->in[0] == m->in[1]) return false;
        abs[(*n_abs)++] = s;
        d->scale = m->in[c];
        s = m->in[1 - c];
    }
    if (!matmul_of(x, s, false, true) || !private1(x, s) || !tg_shape_eq(nd(x, s)->shape, an->shape)) return false;
    abs[(*n_abs)++] = s;
    d->q = nd(x, s)->in[0], d->k = nd(x, s)->in[1];
    const tg_shape *qs = &nd(x, d->q)->shape;
    d->B = qs->d[0], d->H = qs->d[1], d->T = qs->d[2], d->Dh = qs->d[3];
    if (!bhtd(qs, d) || !bhtd(&nd(x, d->k)->shape, d) || an->shape.d[2] != d->T || !fits(x, d)) return false;
    int o = -1;
    for (int r = x->rd0[a]; r < x->rd0[a + 1]; r++) {
        int m = x->rd[r];
        if (o < 0 && matmul_of(x, m, false, false) && nd(x, m)->in[0] == a && is_free(x, m) &&
            bhtd(&nd(x, nd(x, m)->in[1])->shape, d))
            o = m;
    }
    if (o < 0) return false;
    d->v = nd(x, o)->in[1];
    abs[(*n_abs)++] = a;
    d->o = result_of(x, o, abs, n_abs);
    d->att = a;
    return true;
}

/* The backward of forward f, from softmax_grad node sg:
 *   dA = dout v^T, dS = softmax_grad(att, dA) [* c'], dq = dS k, dk = dS^T q,
 *   dv = att^T dout. It must take every reader of the softmax but o. */
static bool match_bwd(const actx *x, const tg_wgsl_attn *f, int o_mm, int sg, tg_wgsl_attn *d, int *abs, int *n_abs) {
    const tg_node *gn = nd(x, sg);
    if (gn->op != TG_OP_SOFTMAX_GRAD || gn->at.axis.axis != 3 || gn->in[0] != f->att || !f32_4d(x, sg) || !is_free(x, sg))
        return false;
    *d = *f;
    d->bwd = true;
    d->dq = d->dk = d->dv = -1;
    d->dscale = -1;
    int dA = gn->in[1];
    if (!matmul_of(x, dA, false, true) || !private1(x, dA) || nd(x, dA)->in[1] != f->v) return false;
    d->dout = nd(x, dA)->in[0];
    if (!bhtd(&nd(x, d->dout)->shape, d)) return false;
    abs[(*n_abs)++] = dA;
    int ds = sg;
    if (private1(x, sg) && nd(x, only_reader(x, sg))->op == TG_OP_MUL) {
        const tg_node *m = nd(x, only_reader(x, sg));
        int other = m->in[0] == sg ? m->in[1] : m->in[0];
        if (scalar_const(x, other) && m->in[0] != m->in[1] && is_free(x, only_reader(x, sg)))
            abs[(*n_abs)++] = sg, ds = only_reader(x, sg), d->dscale = other;
    }
    if (x->pinned[ds] || !is_free(x, ds)) return false;
    abs[(*n_abs)++] = ds;
    int dq = -1, dk = -1, dv = -1;
    for (int r = x->rd0[ds]; r < x->rd0[ds + 1]; r++) {
        int m = x->rd[r];
        const tg_node *mn = nd(x, m);
        if (!is_free(x, m) || mn->in[0] != ds) return false;
        if (dq < 0 && matmul_of(x, m, false, false) && mn->in[1] == f->k) dq = m;
        else if (dk < 0 && matmul_of(x, m, true, false) && mn->in[1] == f->q) dk = m;
        else return false;
    }
    for (int r = x->rd0[f->att]; r < x->rd0[f->att + 1]; r++) {
        int m = x->rd[r];
        if (m == o_mm || m == sg) continue;
        if (dv < 0 && matmul_of(x, m, true, false) && nd(x, m)->in[0] == f->att && nd(x, m)->in[1] == d->dout &&
            is_free(x, m))
            dv = m;
        else return false; /* another reader of the softmax: it would need the stored values */
    }
    if (dq >= 0) d->dq = result_of(x, dq, abs, n_abs);
    if (dk >= 0) d->dk = result_of(x, dk, abs, n_abs);
    if (dv >= 0) d->dv = result_of(x, dv, abs, n_abs);
    return d->dq >= 0 || d->dk >= 0 || d->dv >= 0;
}

static int add_group(actx *x, const tg_wgsl_attn *d, const int *abs, int n_abs, const int *outs, int n_outs) {
    int gid = x->f->n_groups++;
    int turn = outs[0];
    for (int k = 1; k < n_outs; k++) turn = outs[k] < turn ? outs[k] : turn;
    for (int k = 0; k < n_abs; k++) x->f->group[abs[k]] = gid, x->f->role[abs[k]] = TG_FUSE_ABSORBED;
    for (int k = 0; k < n_outs; k++) x->f->group[outs[k]] = gid, x->f->role[outs[k]] = TG_FUSE_OUTPUT;
    x->f->turn[gid] = turn;
    x->at->a[x->at->n++] = *d;
    return gid;
}

static void undo_group(actx *x, int gid) {
    for (int i = 0; i < x->g->n; i++)
        if (x->f->group[i] == gid) x->f->group[i] = -1, x->f->role[i] = TG_FUSE_NONE;
    x->f->also_reads[gid] = -1;
    x->f->n_groups--;
    x->at->n--;
}

/* Every value the group reads is there by its turn. */
static bool reads_ready(const actx *x, int gid, const int *reads, int n) {
    for (int k = 0; k < n; k++)
        if (reads[k] >= 0 && ready_at(x, reads[k]) >= x->f->turn[gid]) return false;
    return true;
}

static int64_t align256(int64_t v) { return (v + 255) / 256 * 256; }

static void fuse_one(actx *x, int a) {
    int abs[16], n_abs = 0, babs[16], n_babs = 0;
    tg_wgsl_attn f = {0}, b = {0};
    if (!match_fwd(x, a, &f, abs, &n_abs)) return;
    int o_mm = n_abs && nd(x, f.o)->op == TG_OP_PERMUTE ? nd(x, f.o)->in[0] : f.o;
    bool has_bwd = n_readers(x, a) > 1;
    int sg = -1;
    for (int r = x->rd0[a]; r < x->rd0[a + 1] && has_bwd; r++)
        if (nd(x, x->rd[r])->op == TG_OP_SOFTMAX_GRAD) sg = x->rd[r];
    int64_t rows = f.B * f.H * f.T * 4;
    f.lse_at = x->at->work_bytes;
    int fg = add_group(x, &f, abs, n_abs, &f.o, 1);
    int fr[3] = {f.q, f.k, f.v};
    if (!reads_ready(x, fg, fr, 3)) {
        undo_group(x, fg);
        return;
    }
    if (has_bwd) {
        b.lse_at = f.lse_at;
        if (sg < 0 || !match_bwd(x, &x->at->a[x->at->n - 1], o_mm, sg, &b, babs, &n_babs)) {
            undo_group(x, fg);
            return;
        }
        x->f->role[a] = TG_FUSE_REMAT;
        b.d_at = align256(f.lse_at + rows);
        int outs[3], n_outs = 0;
        if (b.dq >= 0) outs[n_outs++] = b.dq;
        if (b.dk >= 0) outs[n_outs++] = b.dk;
        if (b.dv >= 0) outs[n_outs++] = b.dv;
        int bg = add_group(x, &b, babs, n_babs, outs, n_outs);
        x->f->also_reads[bg] = b.o; /* D = rowsum(dout * o): the forward's result, kept until here */
        int br[4] = {b.q, b.k, b.v, b.dout};
        if (!reads_ready(x, bg, br, 4) || x->f->turn[bg] <= x->f->turn[fg]) {
            undo_group(x, bg);
            undo_group(x, fg);
            return;
        }
        x->at->work_bytes = align256(b.d_at + rows);
    } else {
        x->at->work_bytes = align256(f.lse_at + rows);
    }
}

/* A heads permute whose every reader is a fused attention kernel is read in
 * place with strides: no memory, no kernel. */
static void view_permutes(actx *x) {
    for (int i = 0; i < x->g->n; i++) {
        if (!heads_permute(x, i) || !is_free(x, i) || x->pinned[i] || n_readers(x, i) == 0) continue;
        bool all = true;
        for (int r = x->rd0[i]; r < x->rd0[i + 1]; r++) all &= x->f->group[x->rd[r]] >= 0;
        if (all) x->f->role[i] = TG_FUSE_VIEW;
    }
}

static void attns_free(void *p) {
    tg_wgsl_attns *a = p;
    if (a) free(a->a);
    free(a);
}

tg_status tg_wgsl_fuse_attention(const tg_graph *g, const bool *pinned, const tg_wgsl_limits *lim, tg_fusion **out) {
    *out = NULL;
    size_t n = (size_t)g->n + 1;
    int n_edges = 0;
    for (int i = 0; i < g->n; i++) n_edges += g->nodes[i].nin;
    actx x = {g, pinned, lim, tg_fusion_new(g->n), tg_calloc(1, sizeof(tg_wgsl_attns)), tg_calloc(n + 1, sizeof(int)),
              tg_calloc((size_t)n_edges + 1, sizeof(int))};
    int *fill = tg_calloc(n, sizeof(int));
    if (x.at) x.at->a = tg_calloc(n, sizeof(tg_wgsl_attn));
    if (!x.f || !x.at || !x.at->a || !x.rd0 || !x.rd || !fill) {
        tg_fusion_free(x.f), attns_free(x.at), free(x.rd0), free(x.rd), free(fill);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    x.f->impl = x.at;
    x.f->impl_free = attns_free;
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) x.rd0[g->nodes[i].in[k] + 1]++;
    for (int i = 0; i < g->n; i++) x.rd0[i + 1] += x.rd0[i], fill[i] = x.rd0[i];
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) x.rd[fill[g->nodes[i].in[k]]++] = i;
    free(fill);
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == TG_OP_SOFTMAX_CAUSAL) fuse_one(&x, i);
    view_permutes(&x);
    free(x.rd0), free(x.rd);
    if (x.f->n_groups == 0) {
        tg_fusion_free(x.f);
        return TG_OK;
    }
    *out = x.f;
    return TG_OK;
}

bool tg_wgsl_attn_strided(const tg_fusion *f, const tg_graph *g, int x) {
    const tg_node *n = &g->nodes[x];
    return n->op == TG_OP_PERMUTE && (f->role[x] == TG_FUSE_VIEW || f->role[x] == TG_FUSE_OUTPUT);
}
