/* A product and its epilogue (see fuse.h). */
#include "fuse.h"

/* A group runs at its last node's turn, so the product's operands stay live
 * until then: a reader far down the graph (a weight gradient added into
 * another gradient at the end of the backward) would keep them across the
 * step's memory peak. Only nearby readers join a product's chain. */
#define CHAIN_REACH 8

static bool f32(const tg_fuse_graph *x, int id) { return tg_fuse_node(x, id)->dtype == TG_F32; }

/* The next link after id: its only reader, if the chain may keep id. */
static int next_link(const tg_fuse_graph *x, int mm, int id) {
    if (!tg_fuse_private(x, id)) return -1;
    int r = tg_fuse_reader(x, id);
    return r - mm <= CHAIN_REACH && tg_fuse_free(x, r) ? r : -1;
}

/* The operand of binary node n that is not id, -1 when n is not binary or
 * reads id twice. */
static int other_of(const tg_node *n, int id) {
    if (n->nin != 2) return -1;
    int o = n->in[0] == id ? n->in[1] : n->in[0];
    return o == id ? -1 : o;
}

bool tg_fuse_match_matmul_epi(const tg_fuse_graph *x, int mm, tg_matmul_epi_match *m) {
    const tg_node *mn = tg_fuse_node(x, mm);
    *m = (tg_matmul_epi_match){.mm = mm, .bias = -1, .resid = -1, .gate = -1, .chain = {mm}, .len = 1};
    if (mn->op != TG_OP_MATMUL || !tg_fuse_free(x, mm) || !f32(x, mm)) return false;
    int last = mm, k = next_link(x, mm, last);
    if (k >= 0) { /* a bias: [N] (any leading ones) added to every row */
        const tg_node *n = tg_fuse_node(x, k);
        int b = other_of(n, last);
        int64_t N = mn->shape.d[mn->shape.ndim - 1];
        if (n->op == TG_OP_ADD && b >= 0 && f32(x, b) && tg_shape_eq(n->shape, mn->shape)) {
            const tg_node *bn = tg_fuse_node(x, b);
            if (tg_ir_numel(bn) == N && bn->shape.ndim >= 1 && bn->shape.d[bn->shape.ndim - 1] == N)
                m->bias = b, last = m->chain[m->len++] = k;
        }
    }
    k = next_link(x, mm, last);
    if (k >= 0) { /* a residual of the product's shape: nothing after it */
        const tg_node *n = tg_fuse_node(x, k);
        int r = other_of(n, last);
        if (n->op == TG_OP_ADD && r >= 0 && f32(x, r) && tg_shape_eq(tg_fuse_node(x, r)->shape, mn->shape) &&
            tg_shape_eq(n->shape, mn->shape)) {
            m->resid = r, m->chain[m->len++] = k;
            return true;
        }
    }
    k = next_link(x, mm, last);
    if (k >= 0) {
        const tg_node *n = tg_fuse_node(x, k);
        if (n->op == TG_OP_RELU && n->in[0] == last) m->relu = true, m->chain[m->len++] = k;
        else if (tg_ir_is_relu_grad(n) && n->in[1] == last && n->in[0] != last && f32(x, n->in[0]))
            m->gate = n->in[0], m->chain[m->len++] = k;
    }
    return m->len > 1;
}
