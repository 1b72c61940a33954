/* Causal attention's forward and backward patterns (see fuse.h). */
#include "fuse.h"

static bool f32(const tg_fuse_graph *x, int id) { return tg_fuse_node(x, id)->dtype == TG_F32; }

/* A 4-d f32 product with these transposes, of f32 operands. */
static bool matmul4(const tg_fuse_graph *x, int id, bool ta, bool tb) {
    const tg_node *n = tg_fuse_node(x, id);
    return n->op == TG_OP_MATMUL && n->at.matmul.ta == ta && n->at.matmul.tb == tb && n->shape.ndim == 4 && f32(x, id) &&
           f32(x, n->in[0]) && f32(x, n->in[1]);
}

/* A one-element f32 constant (what tg_mul_s multiplies by). */
static bool scalar_const(const tg_fuse_graph *x, int id) {
    return tg_fuse_node(x, id)->op == TG_OP_CONST && f32(x, id) && tg_ir_numel(tg_fuse_node(x, id)) == 1;
}

/* f32 [B, H, T, Dh], B, H and T those of the attention matrix att. */
static bool bhtd(const tg_fuse_graph *x, int id, const tg_shape *att, int64_t Dh) {
    const tg_shape *s = &tg_fuse_node(x, id)->shape;
    return s->ndim == 4 && s->d[0] == att->d[0] && s->d[1] == att->d[1] && s->d[2] == att->d[2] && s->d[3] == Dh &&
           f32(x, id);
}

int tg_fuse_result_of(const tg_fuse_graph *x, int mm, int *abs, int *n_abs) {
    int r = tg_fuse_uses(x, mm) == 1 ? tg_fuse_reader(x, mm) : -1;
    if (r >= 0 && !x->pinned[mm] && tg_ir_heads_permute(tg_fuse_node(x, r)) && f32(x, r) && tg_fuse_free(x, r)) {
        abs[(*n_abs)++] = mm;
        return r;
    }
    return mm;
}

void tg_fuse_view_permutes(const tg_fuse_graph *x, tg_fusion *f, bool (*strided)(int group, const void *ctx),
                           const void *ctx) {
    for (int i = 0; i < x->g->n; i++) {
        if (!tg_ir_heads_permute(tg_fuse_node(x, i)) || !f32(x, i) || !tg_fuse_free(x, i) || x->pinned[i] ||
            tg_fuse_uses(x, i) == 0)
            continue;
        bool all = true;
        for (int r = x->rd0[i]; r < x->rd0[i + 1]; r++) {
            int gid = f->group[x->rd[r]];
            all &= gid >= 0 && (!strided || strided(gid, ctx));
        }
        if (all) f->role[i] = TG_FUSE_VIEW;
    }
}

bool tg_fuse_match_attn_fwd(const tg_fuse_graph *x, int a, tg_attn_fwd_match *m) {
    const tg_node *an = tg_fuse_node(x, a);
    if (an->op != TG_OP_SOFTMAX_CAUSAL || !tg_fuse_free(x, a) || !f32(x, a) || an->shape.ndim != 4 ||
        an->shape.d[2] != an->shape.d[3])
        return false;
    *m = (tg_attn_fwd_match){.att = a, .scale_mul = -1, .scale = -1};
    int s = an->in[0];
    if (tg_fuse_node(x, s)->op == TG_OP_MUL && tg_fuse_private(x, s)) {
        const tg_node *mn = tg_fuse_node(x, s);
        int c = scalar_const(x, mn->in[1]) ? 1 : scalar_const(x, mn->in[0]) ? 0 : -1;
        if (c < 0) return false;
        m->scale_mul = s, m->scale = mn->in[c], s = mn->in[1 - c];
    }
    if (!matmul4(x, s, false, true) || !tg_fuse_private(x, s) || !tg_shape_eq(tg_fuse_node(x, s)->shape, an->shape))
        return false;
    m->scores = s;
    m->q = tg_fuse_node(x, s)->in[0], m->k = tg_fuse_node(x, s)->in[1];
    m->Dh = tg_fuse_node(x, m->q)->shape.d[3];
    if (!bhtd(x, m->q, &an->shape, m->Dh) || !bhtd(x, m->k, &an->shape, m->Dh)) return false;
    m->B = an->shape.d[0], m->H = an->shape.d[1], m->T = an->shape.d[2];
    m->o = -1;
    for (int r = x->rd0[a]; r < x->rd0[a + 1] && m->o < 0; r++) {
        int p = x->rd[r];
        const tg_node *pn = tg_fuse_node(x, p);
        if (matmul4(x, p, false, false) && pn->in[0] == a && pn->in[1] != a && tg_fuse_free(x, p) &&
            bhtd(x, pn->in[1], &an->shape, m->Dh))
            m->o = p;
    }
    if (m->o < 0) return false;
    m->v = tg_fuse_node(x, m->o)->in[1];
    return true;
}

bool tg_fuse_match_attn_bwd(const tg_fuse_graph *x, int sg, tg_attn_bwd_match *m) {
    const tg_node *gn = tg_fuse_node(x, sg);
    if (gn->op != TG_OP_SOFTMAX_GRAD || !tg_fuse_free(x, sg) || !f32(x, sg) || gn->shape.ndim != 4 ||
        gn->at.axis.axis != 3 || gn->shape.d[2] != gn->shape.d[3])
        return false;
    *m = (tg_attn_bwd_match){.sg = sg, .att = gn->in[0], .dA = gn->in[1], .dscale = -1, .dq = -1, .k = -1, .dk = -1,
                             .q = -1, .dv = -1};
    if (!matmul4(x, m->dA, false, true) || !tg_fuse_private(x, m->dA) || m->dA == m->att) return false;
    m->dout = tg_fuse_node(x, m->dA)->in[0], m->v = tg_fuse_node(x, m->dA)->in[1];
    m->Dh = tg_fuse_node(x, m->dout)->shape.d[3];
    if (!bhtd(x, m->dout, &gn->shape, m->Dh) || !bhtd(x, m->v, &gn->shape, m->Dh) ||
        !tg_shape_eq(tg_fuse_node(x, m->att)->shape, gn->shape) || !f32(x, m->att))
        return false;
    m->ds = sg;
    int r0 = tg_fuse_reader(x, sg);
    if (tg_fuse_private(x, sg) && tg_fuse_node(x, r0)->op == TG_OP_MUL && tg_fuse_free(x, r0)) {
        const tg_node *mn = tg_fuse_node(x, r0);
        int other = mn->in[0] == sg ? mn->in[1] : mn->in[0];
        if (scalar_const(x, other) && mn->in[0] != mn->in[1]) m->ds = r0, m->dscale = other;
    }
    if (x->pinned[m->ds] || !tg_fuse_free(x, m->ds)) return false;
    for (int r = x->rd0[m->ds]; r < x->rd0[m->ds + 1]; r++) {
        int p = x->rd[r];
        const tg_node *pn = tg_fuse_node(x, p);
        if (!tg_fuse_free(x, p) || pn->in[0] != m->ds || pn->in[1] == m->ds) return false;
        if (matmul4(x, p, false, false) && m->dq < 0 && bhtd(x, pn->in[1], &gn->shape, m->Dh)) m->dq = p, m->k = pn->in[1];
        else if (matmul4(x, p, true, false) && m->dk < 0 && bhtd(x, pn->in[1], &gn->shape, m->Dh)) m->dk = p, m->q = pn->in[1];
        else return false; /* some other reader of dS */
    }
    for (int r = x->rd0[m->att]; r < x->rd0[m->att + 1] && m->dv < 0; r++) {
        int p = x->rd[r];
        if (matmul4(x, p, true, false) && tg_fuse_node(x, p)->in[0] == m->att && tg_fuse_node(x, p)->in[1] == m->dout &&
            tg_fuse_free(x, p))
            m->dv = p;
    }
    return true;
}
