/* Gradient rules of the math and shape ops. Elementwise ops
 * append one fused backward node each (unary_grad, minmax_grad) instead of a
 * chain of primitive ops; shape ops append their adjoint copy. */
#include "rules.h"

#define SHAPE(id) (g->nodes[id].shape)
#define X(k) (g->nodes[id].in[k])
/* A function, not a macro over tg_ir_sum_to_shape: v is built (and the node
 * array possibly moved by realloc) before the operand's shape is read. As a
 * macro, the compiler was free to read g->nodes first and use it after
 * tg_ir_add had freed it (ASan caught it in the VAE's tg_grad_mul). */
static int sts(tg_graph *g, int id, int v, int k, const char *file, int line) {
    return tg_ir_sum_to_shape(g, v, g->nodes[g->nodes[id].in[k]].shape, file, line);
}
#define STS(v, k) sts(g, id, v, k, IR_HERE)

/* A backward node of op `op`, attributed to this file (the rules'). */
#define bw(op) tg_ir_proto(op, NULL, __FILE__, __LINE__)

/* d min/max: one minmax_grad per operand (ties split evenly), summed back to
 * the operand's shape. The scalar operand of the _s forms is a constant, so
 * its share is dropped by DCE. */
void tg_grad_minmax(tg_graph *g, int id, int gy, int *gx) {
    for (int side = 0; side < 2; side++) {
        tg_node n = bw(TG_OP_MINMAX_GRAD);
        n.in[0] = X(0);
        n.in[1] = X(1);
        n.in[2] = gy;
        n.at.minmax_grad.op = g->nodes[id].op;
        n.at.minmax_grad.side = side;
        gx[side] = STS(tg_ir_add(g, &n), side);
    }
}

/* What the backward of unary math node f reads as s (ops.def's save
 * column): 1 its output (then the input need not stay alive for the
 * backward), 0 its input, -1 nothing. */
static int saved(const tg_node *f) {
    const float p0 = f->at.unary.p0, p1 = f->at.unary.p1;
    (void)p0, (void)p1;
    switch (f->op) {
#define TG_UNARY_MATH(OP, name, flags, save, fwd, bwd, i32) case TG_OP_##OP: return save;
#include "../ir/ops.def"
    default: return 0;
    }
}

/* Unary math: gx = unary_grad(s, gy) with the forward's op and attributes,
 * s the forward's output or input as `saved` says (gy itself when it reads
 * neither, so nothing is kept for it). */
void tg_grad_unary_math(tg_graph *g, int id, int gy, int *gx) {
    const tg_node *f = &g->nodes[id];
    int sv = saved(f);
    tg_node n = bw(TG_OP_UNARY_GRAD);
    n.in[0] = sv < 0 ? gy : sv ? id : X(0);
    n.in[1] = gy;
    n.at.unary_grad.op = f->op;
    n.at.unary_grad.fwd = f->at.unary;
    gx[0] = tg_ir_add(g, &n);
}

/* Binary math: one binary_grad(a, b, gy) per operand (side 0 = a, 1 = b),
 * over gy's shape, summed back to the operand's shape. An operand that
 * needs no gradient (the constant of a _s form) has its share dropped by
 * DCE. */
void tg_grad_binary_math(tg_graph *g, int id, int gy, int *gx) {
    for (int side = 0; side < 2; side++) {
        tg_node n = bw(TG_OP_BINARY_GRAD);
        n.in[0] = X(0);
        n.in[1] = X(1);
        n.in[2] = gy;
        n.at.binary_grad.op = g->nodes[id].op;
        n.at.binary_grad.side = side;
        gx[side] = STS(tg_ir_add(g, &n), side);
    }
}

/* softmax: gx = y (gy - sum(gy y)) along the axis, one fused node */
void tg_grad_softmax(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = bw(TG_OP_SOFTMAX_GRAD);
    n.in[0] = id;
    n.in[1] = gy;
    n.at.axis.axis = g->nodes[id].at.axis.axis;
    gx[0] = tg_ir_add(g, &n);
}

/* amax / amin: the gradient goes to the elements equal to the extreme y,
 * split evenly among ties (as tg_max splits a tie between its operands):
 * gx = hit * gy / count, hit = (x == y) in f32, count = sum(hit) along the
 * axis. x never lies beyond y, so "not short of y" is "equal to y". */
void tg_grad_amax(tg_graph *g, int id, int gy, int *gx) {
    int x = X(0);
    unsigned axis = 1u << g->nodes[id].at.axis.axis;
    tg_node hit = bw(TG_OP_WHERE);
    hit.in[0] = tg_ir_binary(g, g->nodes[id].op == TG_OP_AMAX ? TG_OP_LESS : TG_OP_GREATER, x, id, IR_HERE);
    hit.in[1] = tg_ir_scalar(g, 0.0f, IR_HERE);
    hit.in[2] = tg_ir_scalar(g, 1.0f, IR_HERE);
    int h = tg_ir_add(g, &hit);
    int share = tg_ir_binary(g, TG_OP_DIV, gy, tg_ir_reduce_sum(g, h, axis, IR_HERE), IR_HERE);
    gx[0] = tg_ir_binary(g, TG_OP_MUL, h, share, IR_HERE);
}

/* narrow: gy padded back to the input's shape with zeros */
void tg_grad_narrow(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = bw(TG_OP_NARROW_GRAD);
    n.in[0] = gy;
    n.at.axis.axis = g->nodes[id].at.axis.axis;
    n.at.axis.start = g->nodes[id].at.axis.start;
    n.shape = SHAPE(X(0));
    gx[0] = tg_ir_add(g, &n);
}

/* concat: each input gets its slice of gy */
void tg_grad_concat(tg_graph *g, int id, int gy, int *gx) {
    int64_t axis = g->nodes[id].at.axis.axis, at = 0;
    int nin = g->nodes[id].nin;
    for (int k = 0; k < nin; k++) {
        int64_t len = SHAPE(X(k)).d[axis];
        tg_node n = bw(TG_OP_NARROW);
        n.in[0] = gy;
        n.at.axis.axis = axis;
        n.at.axis.start = at;
        n.at.axis.len = len;
        gx[k] = tg_ir_add(g, &n);
        at += len;
    }
}

/* take_along_axis: gy scatter-added into zeros of x's shape; none for idx */
void tg_grad_take_along_axis(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = bw(TG_OP_TAKE_ALONG_AXIS_GRAD);
    n.in[0] = gy;
    n.in[1] = X(1);
    n.at.axis.axis = g->nodes[id].at.axis.axis;
    n.shape = SHAPE(X(0));
    gx[0] = tg_ir_add(g, &n);
    gx[1] = -1;
}

/* cumsum: each x[a] reaches every y[b] with b at or past a, so gx is the
 * running sum of gy taken from the other end */
void tg_grad_cumsum(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = bw(TG_OP_CUMSUM);
    n.in[0] = gy;
    n.at.scan.axis = g->nodes[id].at.scan.axis;
    n.at.scan.reverse = !g->nodes[id].at.scan.reverse;
    gx[0] = tg_ir_add(g, &n);
}

/* pad: each entry of x gathers the cotangents of the outputs that copy it */
void tg_grad_pad(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = bw(TG_OP_PAD_GRAD);
    n.in[0] = gy;
    n.at.pad = g->nodes[id].at.pad;
    gx[0] = tg_ir_add(g, &n);
}
