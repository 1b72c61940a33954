/* The optimizer's patterns (see fuse.h): one param's update, and a clip
 * norm's sums of squares. */
#include "fuse.h"

static bool f32(const tg_fuse_graph *x, int id) { return tg_fuse_node(x, id)->dtype == TG_F32; }

/* Node id is read by reader r alone (r reads it once). */
static bool only_read_by(const tg_fuse_graph *x, int id, int r) {
    return tg_fuse_uses(x, id) == 1 && tg_fuse_reader(x, id) == r;
}

/* gx = grad * scale, scale one f32 element: the scale is taken inline when
 * nothing but the updates reads gx. */
static void split_scale(const tg_fuse_graph *x, tg_update_match *m) {
    const tg_node *n = tg_fuse_node(x, m->gx);
    m->grad = m->gx, m->scale = -1;
    if (n->op != TG_OP_MUL || n->in[0] == n->in[1] || !tg_fuse_free(x, m->gx) || x->pinned[m->gx]) return;
    for (int r = x->rd0[m->gx]; r < x->rd0[m->gx + 1]; r++) {
        int u = x->rd[r];
        if (u != m->m2 && u != m->v2 && u != m->p2) return;
    }
    for (int k = 0; k < 2; k++) {
        int a = n->in[k], s = n->in[1 - k];
        if (tg_ir_numel(tg_fuse_node(x, s)) == 1 && f32(x, s) && f32(x, a) && tg_shape_eq(tg_fuse_node(x, a)->shape, n->shape)) {
            m->grad = a, m->scale = s;
            return;
        }
    }
}

bool tg_fuse_match_update(const tg_fuse_graph *x, int p2, tg_update_match *m) {
    const tg_node *pn = tg_fuse_node(x, p2);
    *m = (tg_update_match){.p2 = p2, .m2 = -1, .v2 = -1, .p = pn->in[0], .m = -1, .v = -1, .grad = -1, .scale = -1};
    if (!tg_fuse_free(x, p2)) return false;
    if (pn->op == TG_OP_ADAM_P) {
        int m2 = pn->in[1], v2 = pn->in[2];
        const tg_node *mn = tg_fuse_node(x, m2), *vn = tg_fuse_node(x, v2);
        if (mn->op != TG_OP_ADAM_M || vn->op != TG_OP_ADAM_V || mn->in[1] != vn->in[1] || m2 == v2) return false;
        if (!tg_fuse_free(x, m2) || !tg_fuse_free(x, v2) || !only_read_by(x, m2, p2) || !only_read_by(x, v2, p2))
            return false;
        m->m2 = m2, m->v2 = v2, m->m = mn->in[0], m->v = vn->in[0], m->gx = mn->in[1], m->hyper = pn->in[3];
        int same[4] = {m->p, m->m, m->v, m->gx};
        for (int k = 0; k < 4; k++)
            if (!f32(x, same[k]) || tg_ir_numel(tg_fuse_node(x, same[k])) != tg_ir_numel(pn)) return false;
    } else if (pn->op == TG_OP_SGD_P) {
        int vel = pn->in[2];
        m->gx = pn->in[1], m->hyper = pn->in[3];
        if (pn->at.sgd.has_momentum) {
            const tg_node *vn = tg_fuse_node(x, vel);
            if (vn->op != TG_OP_SGD_V || vn->in[1] != m->gx || vn->in[2] != m->p || vn->in[3] != m->hyper ||
                !tg_fuse_free(x, vel) || !only_read_by(x, vel, p2))
                return false;
            m->v2 = vel, m->v = vn->in[0];
        } else if (vel != m->p) {
            return false;
        }
    } else {
        return false;
    }
    split_scale(x, m);
    return true;
}

int tg_fuse_match_sumsq(const tg_fuse_graph *x, int s) {
    const tg_node *sn = tg_fuse_node(x, s);
    if (sn->op != TG_OP_SUM || !tg_fuse_free(x, s) || !f32(x, s) || tg_ir_numel(sn) != 1) return -1;
    int sq = sn->in[0];
    const tg_node *mn = tg_fuse_node(x, sq);
    if (mn->op != TG_OP_MUL || mn->in[0] != mn->in[1] || !tg_fuse_free(x, sq) || x->pinned[sq] ||
        !only_read_by(x, sq, s) || !f32(x, mn->in[0]) || tg_ir_numel(mn) != tg_ir_numel(tg_fuse_node(x, mn->in[0])))
        return -1;
    return sq;
}
