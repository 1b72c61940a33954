/* Gradient rules, one per differentiable op. Each receives the node id and
 * its output cotangent gy and writes one cotangent per input (-1 = none).
 * Broadcasting ops sum their cotangents back to the operand's shape. */
#include "rules.h"

#define N(id) (&g->nodes[id])
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

void tg_grad_add(tg_graph *g, int id, int gy, int *gx) {
    gx[0] = STS(gy, 0);
    gx[1] = STS(gy, 1);
}

void tg_grad_sub(tg_graph *g, int id, int gy, int *gx) {
    gx[0] = STS(gy, 0);
    gx[1] = STS(tg_ir_unary(g, TG_OP_NEG, gy, IR_HERE), 1);
}

void tg_grad_mul(tg_graph *g, int id, int gy, int *gx) {
    gx[0] = STS(tg_ir_binary(g, TG_OP_MUL, gy, X(1), IR_HERE), 0);
    gx[1] = STS(tg_ir_binary(g, TG_OP_MUL, gy, X(0), IR_HERE), 1);
}

/* y = a / b: da = gy / b, db = -gy * y / b */
void tg_grad_div(tg_graph *g, int id, int gy, int *gx) {
    gx[0] = STS(tg_ir_binary(g, TG_OP_DIV, gy, X(1), IR_HERE), 0);
    int b = X(1); /* read before the next builder can move the node array */
    int t = tg_ir_binary(g, TG_OP_DIV, tg_ir_binary(g, TG_OP_MUL, gy, id, IR_HERE), b, IR_HERE);
    gx[1] = STS(tg_ir_unary(g, TG_OP_NEG, t, IR_HERE), 1);
}

/* where(c, a, b): da = where(c, gy, 0), db = where(c, 0, gy) */
void tg_grad_where(tg_graph *g, int id, int gy, int *gx) {
    int zero = tg_ir_scalar(g, 0.0f, IR_HERE);
    tg_node n = {0};
    n.op = TG_OP_WHERE;
    n.nin = 3;
    n.file = __FILE__;
    n.line = __LINE__;
    n.in[0] = X(0);
    n.in[1] = gy;
    n.in[2] = zero;
    gx[1] = STS(tg_ir_add(g, &n), 1);
    n.in[1] = zero;
    n.in[2] = gy;
    gx[2] = STS(tg_ir_add(g, &n), 2);
    gx[0] = -1;
}

/* gy has the kept-dims shape; broadcast it back. */
void tg_grad_sum(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = {0};
    n.op = TG_OP_BROADCAST;
    n.nin = 1;
    n.in[0] = gy;
    n.shape = SHAPE(X(0));
    n.file = __FILE__;
    n.line = __LINE__;
    gx[0] = tg_ir_add(g, &n);
}

void tg_grad_reshape(tg_graph *g, int id, int gy, int *gx) { gx[0] = tg_ir_reshape(g, gy, SHAPE(X(0)), IR_HERE); }

void tg_grad_permute(tg_graph *g, int id, int gy, int *gx) {
    const tg_node *n = N(id);
    tg_shape inv = {n->at.permute.perm.ndim, {0}};
    for (int i = 0; i < inv.ndim; i++) inv.d[n->at.permute.perm.d[i]] = i;
    gx[0] = tg_ir_permute(g, gy, inv, IR_HERE);
}

void tg_grad_broadcast(tg_graph *g, int id, int gy, int *gx) { gx[0] = STS(gy, 0); }

/* C = op(A) op(B), op = optional transpose of the last two axes.
 * d op(A) = dC op(B)^T, d op(B) = op(A)^T dC. A 2-d B shared across A's batch
 * gets its gradient as one 2-d product over all rows ([R,K]^T x [R,N]), never
 * a per-batch intermediate. */
void tg_grad_matmul(tg_graph *g, int id, int gy, int *gx) {
    const tg_node *n = N(id);
    int a = X(0), b = X(1);
    bool ta = n->at.matmul.ta, tb = n->at.matmul.tb;
    tg_shape as = SHAPE(a), bs = SHAPE(b);
    bool b_batched = bs.ndim > 2, a_batched = as.ndim > 2;

    /* dB */
    if (b_batched) {
        gx[1] = tb ? tg_ir_matmul(g, gy, a, true, ta, IR_HERE) : tg_ir_matmul(g, a, gy, !ta, false, IR_HERE);
    } else {
        int a2 = a, dc2 = gy;
        bool ta2 = ta;
        if (a_batched) {
            if (ta) { /* make A row-major [..., M, K] so batch rows can be flattened */
                tg_shape perm = {as.ndim, {0}};
                for (int i = 0; i < as.ndim; i++) perm.d[i] = i;
                perm.d[as.ndim - 2] = as.ndim - 1;
                perm.d[as.ndim - 1] = as.ndim - 2;
                a2 = tg_ir_permute(g, a, perm, IR_HERE);
                ta2 = false;
            }
            int64_t K = as.d[as.ndim - (ta ? 2 : 1)];
            tg_shape ys = SHAPE(gy);
            a2 = tg_ir_reshape(g, a2, (tg_shape){2, {-1, K}}, IR_HERE);
            dc2 = tg_ir_reshape(g, gy, (tg_shape){2, {-1, ys.d[ys.ndim - 1]}}, IR_HERE);
        }
        /* op(A)2 is [R, K] stored as a2 (transposed if ta2); dC2 is [R, N]. */
        gx[1] = tb ? tg_ir_matmul(g, dc2, a2, true, ta2, IR_HERE) : tg_ir_matmul(g, a2, dc2, !ta2, false, IR_HERE);
    }

    /* dA */
    if (!ta) {
        gx[0] = tg_ir_matmul(g, gy, b, false, !tb, IR_HERE);
    } else if (b_batched) {
        gx[0] = tg_ir_matmul(g, b, gy, tb, true, IR_HERE);
    } else {
        /* A is [..., K, M] with a shared B: (dC op(B)^T)^T per batch. */
        int t = tg_ir_matmul(g, gy, b, false, !tb, IR_HERE); /* [..., M, K] */
        tg_shape perm = {as.ndim, {0}};
        for (int i = 0; i < as.ndim; i++) perm.d[i] = i;
        perm.d[as.ndim - 2] = as.ndim - 1;
        perm.d[as.ndim - 1] = as.ndim - 2;
        gx[0] = tg_ir_permute(g, t, perm, IR_HERE);
    }
}

void tg_grad_log_softmax(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_LOG_SOFTMAX_GRAD, NULL, IR_HERE);
    n.in[0] = id;
    n.in[1] = gy;
    n.at.axis.axis = N(id)->at.axis.axis;
    gx[0] = tg_ir_add(g, &n);
}

void tg_grad_softmax_causal(tg_graph *g, int id, int gy, int *gx) {
    tg_node n = tg_ir_proto(TG_OP_SOFTMAX_GRAD, NULL, IR_HERE);
    n.in[0] = id;
    n.in[1] = gy;
    n.at.axis.axis = SHAPE(id).ndim - 1;
    gx[0] = tg_ir_add(g, &n);
}

void tg_grad_where_causal(tg_graph *g, int id, int gy, int *gx) {
    (void)id;
    tg_node n = tg_ir_proto(TG_OP_WHERE_CAUSAL, NULL, IR_HERE);
    n.in[0] = gy;
    n.at.fill.value = 0.0f;
    gx[0] = tg_ir_add(g, &n);
}
