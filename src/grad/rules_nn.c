/* Gradient rules of the nn ops. Each backward is one or two fused
 * kernels rather than a chain of elementwise ops, so the backward costs
 * about what the forward does and keeps no extra activations alive. */
#include "rules.h"

#define N(id) (&g->nodes[id])
#define X(k) (g->nodes[id].in[k])

/* d logits = (softmax(logits) - onehot(target)) * gy, one kernel. */
void tg_grad_cross_entropy(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_CROSS_ENTROPY_GRAD, NULL, IR_HERE);
    n.in[0] = X(0);
    n.in[1] = X(1);
    n.in[2] = gy;
    gx[0] = tg_ir_add(g, &n);
}

/* d logprobs = -gy at the target, 0 elsewhere. */
void tg_grad_nll_loss(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_NLL_LOSS_GRAD, NULL, IR_HERE);
    tg_shape xs = N(X(0))->shape;
    n.in[0] = X(1);
    n.in[1] = gy;
    n.at.classes.v = xs.d[xs.ndim - 1];
    gx[0] = tg_ir_add(g, &n);
}

/* layer_norm / rms_norm: the row statistics are recomputed once (a [..., 2]
 * tensor) and shared by dx and dgain; dbias is a plain column sum. dx comes
 * last, so it may be written over gy or x, which die with it. */
void tg_grad_norm(tg_graph *g, int id, int gy, int *gx) {
    const tg_node *f = N(id);
    bool rms = f->op == TG_OP_RMS_NORM;
    int x = X(0), gain = X(1), nin = f->nin;
    float eps = f->at.norm.eps;
    int64_t D = N(x)->shape.d[N(x)->shape.ndim - 1];

    tg_node st = tg_ir_proto(TG_OP_NORM_STATS, NULL, IR_HERE);
    st.in[0] = x;
    st.at.norm.rms = rms;
    st.at.norm.eps = eps;
    int stats = tg_ir_add(g, &st);

    tg_node dg = tg_ir_proto(TG_OP_NORM_DGAIN, NULL, IR_HERE);
    dg.in[0] = x;
    dg.in[1] = gy;
    dg.in[2] = stats;
    gx[1] = tg_ir_add(g, &dg);

    if (nin == 3) gx[2] = tg_ir_sum_to_shape(g, gy, (tg_shape){1, {D}}, IR_HERE);

    tg_node dx = tg_ir_proto(TG_OP_NORM_DX, NULL, IR_HERE);
    dx.in[0] = x;
    dx.in[1] = gain;
    dx.in[2] = gy;
    dx.in[3] = stats;
    dx.at.norm.rms = rms;
    gx[0] = tg_ir_add(g, &dx);
}

/* Scatter-add of the cotangent rows into the table's rows. */
void tg_grad_embedding(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_EMBEDDING_GRAD, NULL, IR_HERE);
    n.in[0] = X(1);
    n.in[1] = gy;
    n.at.classes.v = N(X(0))->shape.d[0];
    gx[0] = tg_ir_add(g, &n);
}

/* A rotation's adjoint is the opposite rotation. */
void tg_grad_rope(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_ROPE, NULL, IR_HERE);
    n.in[0] = gy;
    n.in[1] = X(1);
    n.at.rope.inverse = !N(id)->at.rope.inverse;
    gx[0] = tg_ir_add(g, &n);
}

/* The same mask (same seed leaf, salt and p) applied to the cotangent. */
void tg_grad_dropout(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = *N(id);
    n.in[0] = gy;
    n.api = NULL;
    n.name = NULL;
    n.data = NULL;
    n.file = __FILE__;
    n.line = __LINE__;
    gx[0] = tg_ir_add(g, &n);
}
