/* Gradient rules of the convolution family. Each backward is its
 * own op with its own kernel: the weight gradient contracts over every
 * image and output pixel inside one kernel, so no [batch, ...] intermediate
 * of per-image weight gradients ever exists (upstream's overflow bug). */
#include "rules.h"

/* The forward's stride, padding and groups; h, w: what the backward's shape
 * rule cannot recover (grad_input: the input's H, W; grad_weight: kH, kW). */
static int conv_backward(tg_graph *g, tg_opcode op, int id, int a, int b, int64_t h, int64_t w, int line) {
    tg_node n = tg_ir_proto(op, NULL, __FILE__, line);
    n.in[0] = a;
    n.in[1] = b;
    n.at.conv = g->nodes[id].at.conv;
    if (op == TG_OP_CONV2D_GRAD_INPUT) n.at.conv.in_h = h, n.at.conv.in_w = w;
    else n.at.conv.kh = h, n.at.conv.kw = w;
    return tg_ir_add(g, &n);
}

/* y = conv2d(x, w[, b]): dx = conv2d_grad_input(gy, w), dw = conv2d_grad_weight(x, gy),
 * db = gy summed over images and pixels. */
void tg_grad_conv2d(tg_graph *g, int id, int gy, int *gx) {
    int x = g->nodes[id].in[0], w = g->nodes[id].in[1];
    tg_shape xs = g->nodes[x].shape, ws = g->nodes[w].shape;
    bool bias = g->nodes[id].nin > 2;
    gx[0] = conv_backward(g, TG_OP_CONV2D_GRAD_INPUT, id, gy, w, xs.d[2], xs.d[3], __LINE__);
    gx[1] = conv_backward(g, TG_OP_CONV2D_GRAD_WEIGHT, id, x, gy, ws.d[2], ws.d[3], __LINE__);
    if (bias) gx[2] = tg_ir_reshape(g, tg_ir_reduce_sum(g, gy, 1u | 4u | 8u, IR_HERE), (tg_shape){1, {ws.d[0]}}, IR_HERE);
}

/* The backward reads the forward's output y to find each window's winner
 * (the first element equal to y), so no index tensor is kept and no float
 * max has to be recomputed. */
void tg_grad_max_pool2d(tg_graph *g, int id, int gy, int *gx) {
    const tg_node *y = &g->nodes[id];
    tg_node n = tg_ir_proto(TG_OP_MAX_POOL2D_GRAD, NULL, IR_HERE);
    n.in[0] = y->in[0];
    n.in[1] = id;
    n.in[2] = gy;
    n.at.conv = y->at.conv;
    gx[0] = tg_ir_add(g, &n);
}

void tg_grad_upsample2d(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_UPSAMPLE2D_GRAD, NULL, IR_HERE);
    n.in[0] = gy;
    n.at.upsample = g->nodes[id].at.upsample;
    gx[0] = tg_ir_add(g, &n);
}

/* y = conv2d_grad_input(x, w) run forward (tg_conv_transpose2d): its
 * adjoint in x is conv2d of gy with the same stride, padding and groups,
 * and in w the conv2d weight gradient with gy as the image and x as the
 * output's cotangent. */
void tg_grad_conv_transpose2d(tg_graph *g, int id, int gy, int *gx) {
    int x = g->nodes[id].in[0], w = g->nodes[id].in[1];
    tg_shape ws = g->nodes[w].shape;
    tg_node c = tg_ir_proto(TG_OP_CONV2D, NULL, IR_HERE);
    c.nin = 2;
    c.in[0] = gy;
    c.in[1] = w;
    c.at.conv.stride_h = g->nodes[id].at.conv.stride_h;
    c.at.conv.stride_w = g->nodes[id].at.conv.stride_w;
    c.at.conv.pad_h = g->nodes[id].at.conv.pad_h;
    c.at.conv.pad_w = g->nodes[id].at.conv.pad_w;
    c.at.conv.groups = g->nodes[id].at.conv.groups;
    gx[0] = tg_ir_add(g, &c);
    tg_node d = tg_ir_proto(TG_OP_CONV2D_GRAD_WEIGHT, NULL, IR_HERE);
    d.in[0] = gy;
    d.in[1] = x;
    d.at.conv = c.at.conv;
    d.at.conv.kh = ws.d[2];
    d.at.conv.kw = ws.d[3];
    gx[1] = tg_ir_add(g, &d);
}

/* y = upsample2d_grad(x) run forward, each f x f block of x summed
 * (tg_avg_pool2d's tiling windows): every element of a block gets the
 * block's gy, a nearest upsampling. */
void tg_grad_sum_pool2d(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_UPSAMPLE2D, NULL, IR_HERE);
    n.in[0] = gy;
    n.at.upsample = g->nodes[id].at.upsample;
    gx[0] = tg_ir_add(g, &n);
}
