/* Which causal attentions run as the fused kernels of ops_attention.c (see
 * fused_attention.h for the rule), chosen in the fusion pass before planning
 * (grouping.c).
 *
 * A forward and its backward are fused together or not at all: the fused
 * backward never reads the softmax from memory, so once the forward keeps
 * it in registers every reader of the softmax must be a fused kernel. */
#include "fused_attention.h"
#include "../fuse/fuse.h"

typedef struct {
    const tg_graph *g;
    const tg_wgsl_limits *lim;
    tg_fusion *f;
    tg_wgsl_chosen_groups *at;
    tg_fuse_graph fg; /* readers, pinned nodes (fuse/fuse.h) */
} attn_search;

static const tg_node *nd(const attn_search *x, int id) { return &x->g->nodes[id]; }
static int n_readers(const attn_search *x, int id) { return tg_fuse_uses(&x->fg, id); }

static bool fits(const attn_search *x, const tg_wgsl_attn *a) {
    if (a->Dh % 4 || a->Dh < 4 || a->Dh > TG_WGSL_ATTN_MAX_DH || a->T < 1) return false;
    uint64_t row = (uint64_t)a->Dh * 4, rows = (uint64_t)(a->B * a->H * a->T);
    /* two key (or query) tiles of at least 4 rows each, plus their statistics */
    if (4 * (2 * row + 8) > x->lim->max_workgroup_storage_size) return false;
    return rows * row <= x->lim->max_storage_buffer_binding_size && rows * 4 <= x->lim->max_storage_buffer_binding_size;
}

/* softmax_causal(q k^T [* c]) v from the softmax node a, the softmax read
 * by nothing outside (the kernels never store it) and q and k distinct. */
static bool match_fwd(const attn_search *x, int a, tg_wgsl_attn *d, int *abs, int *n_abs) {
    tg_attn_fwd_match m;
    if (!tg_fuse_match_attn_fwd(&x->fg, a, &m) || x->fg.pinned[a] || m.q == m.k) return false;
    *d = (tg_wgsl_attn){.q = m.q, .k = m.k, .v = m.v, .scale = m.scale, .att = a, .B = m.B, .H = m.H, .T = m.T, .Dh = m.Dh};
    if (!fits(x, d)) return false;
    if (m.scale_mul >= 0) abs[(*n_abs)++] = m.scale_mul;
    abs[(*n_abs)++] = m.scores;
    abs[(*n_abs)++] = a;
    d->o = tg_fuse_result_of(&x->fg, m.o, abs, n_abs);
    return true;
}

/* The backward of forward f, from softmax_grad node sg, on f's own operands.
 * It must take every reader of the softmax but o. */
static bool match_bwd(const attn_search *x, const tg_wgsl_attn *f, int o_mm, int sg, tg_wgsl_attn *d, int *abs, int *n_abs) {
    tg_attn_bwd_match m;
    if (!tg_fuse_match_attn_bwd(&x->fg, sg, &m) || m.att != f->att || m.v != f->v || m.dout == m.v ||
        (m.dq >= 0 && m.k != f->k) || (m.dk >= 0 && m.q != f->q))
        return false;
    for (int r = x->fg.rd0[f->att]; r < x->fg.rd0[f->att + 1]; r++) {
        int p = x->fg.rd[r];
        if (p != o_mm && p != sg && p != m.dv) return false; /* another reader: it would need the stored values */
    }
    *d = *f;
    d->bwd = true;
    d->dout = m.dout;
    d->dscale = m.dscale;
    abs[(*n_abs)++] = m.dA;
    if (m.ds != sg) abs[(*n_abs)++] = sg;
    abs[(*n_abs)++] = m.ds;
    d->dq = m.dq >= 0 ? tg_fuse_result_of(&x->fg, m.dq, abs, n_abs) : -1;
    d->dk = m.dk >= 0 ? tg_fuse_result_of(&x->fg, m.dk, abs, n_abs) : -1;
    d->dv = m.dv >= 0 ? tg_fuse_result_of(&x->fg, m.dv, abs, n_abs) : -1;
    return d->dq >= 0 || d->dk >= 0 || d->dv >= 0;
}

static int add_group(attn_search *x, const tg_wgsl_attn *d, const int *abs, int n_abs, const int *outs, int n_outs) {
    int gid = x->f->n_groups++;
    int turn = outs[0];
    for (int k = 1; k < n_outs; k++) turn = outs[k] < turn ? outs[k] : turn;
    for (int k = 0; k < n_abs; k++) x->f->group[abs[k]] = gid, x->f->role[abs[k]] = TG_FUSE_ABSORBED;
    for (int k = 0; k < n_outs; k++) x->f->group[outs[k]] = gid, x->f->role[outs[k]] = TG_FUSE_OUTPUT;
    x->f->turn[gid] = turn;
    x->at->attn[x->at->n_attn++] = *d;
    return gid;
}

static void undo_group(attn_search *x, int gid) {
    for (int i = 0; i < x->g->n; i++)
        if (x->f->group[i] == gid) x->f->group[i] = -1, x->f->role[i] = TG_FUSE_NONE;
    x->f->also_reads[gid] = -1;
    x->f->n_groups--;
    x->at->n_attn--;
}

/* Every value the group reads is there by its turn. */
static bool reads_ready(const attn_search *x, int gid, const int *reads, int n) {
    for (int k = 0; k < n; k++)
        if (reads[k] >= 0 && tg_fuse_ready_at(&x->fg, reads[k]) >= x->f->turn[gid]) return false;
    return true;
}

static int64_t align256(int64_t v) { return (v + 255) / 256 * 256; }

static void fuse_one(attn_search *x, int a) {
    int abs[16], n_abs = 0, babs[16], n_babs = 0;
    tg_wgsl_attn f = {0}, b = {0};
    if (!match_fwd(x, a, &f, abs, &n_abs)) return;
    int o_mm = n_abs && nd(x, f.o)->op == TG_OP_PERMUTE ? nd(x, f.o)->in[0] : f.o;
    bool has_bwd = n_readers(x, a) > 1;
    int sg = -1;
    for (int r = x->fg.rd0[a]; r < x->fg.rd0[a + 1] && has_bwd; r++)
        if (nd(x, x->fg.rd[r])->op == TG_OP_SOFTMAX_GRAD) sg = x->fg.rd[r];
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
        if (sg < 0 || !match_bwd(x, &x->at->attn[x->at->n_attn - 1], o_mm, sg, &b, babs, &n_babs)) {
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

void tg_wgsl_choose_attention(const tg_fuse_graph *fg, tg_fusion *f, const tg_wgsl_limits *lim, tg_wgsl_chosen_groups *at) {
    attn_search x = {fg->g, lim, f, at, *fg};
    for (int i = 0; i < fg->g->n; i++)
        if (fg->g->nodes[i].op == TG_OP_SOFTMAX_CAUSAL) fuse_one(&x, i);
    tg_fuse_view_permutes(fg, f, NULL, NULL); /* the groups so far are attention's, which read with strides */
}
bool tg_wgsl_attn_strided(const tg_fusion *f, const tg_graph *g, int x) {
    const tg_node *n = &g->nodes[x];
    return n->op == TG_OP_PERMUTE && (f->role[x] == TG_FUSE_VIEW || f->role[x] == TG_FUSE_OUTPUT);
}
