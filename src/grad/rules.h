/* Gradient rules (rules.c), referenced by the op table. */
#ifndef TG_GRAD_RULES_H
#define TG_GRAD_RULES_H
#include "../ir/ir.h"

void grad_add(tg_graph *g, int id, int gy, int *gx);
void grad_sub(tg_graph *g, int id, int gy, int *gx);
void grad_mul(tg_graph *g, int id, int gy, int *gx);
void grad_div(tg_graph *g, int id, int gy, int *gx);
void grad_neg(tg_graph *g, int id, int gy, int *gx);
void grad_sqrt(tg_graph *g, int id, int gy, int *gx);
void grad_rsqrt(tg_graph *g, int id, int gy, int *gx);
void grad_log(tg_graph *g, int id, int gy, int *gx);
void grad_exp(tg_graph *g, int id, int gy, int *gx);
void grad_relu(tg_graph *g, int id, int gy, int *gx);
void grad_where(tg_graph *g, int id, int gy, int *gx);
void grad_sum(tg_graph *g, int id, int gy, int *gx);
void grad_reshape(tg_graph *g, int id, int gy, int *gx);
void grad_permute(tg_graph *g, int id, int gy, int *gx);
void grad_broadcast(tg_graph *g, int id, int gy, int *gx);
void grad_matmul(tg_graph *g, int id, int gy, int *gx);
void grad_log_softmax(tg_graph *g, int id, int gy, int *gx);
void grad_softmax_causal(tg_graph *g, int id, int gy, int *gx);
void grad_where_causal(tg_graph *g, int id, int gy, int *gx);
/* nn ops (rules_nn.c) */
void grad_cross_entropy(tg_graph *g, int id, int gy, int *gx);
void grad_nll_loss(tg_graph *g, int id, int gy, int *gx);
void grad_norm(tg_graph *g, int id, int gy, int *gx);
void grad_embedding(tg_graph *g, int id, int gy, int *gx);
void grad_rope(tg_graph *g, int id, int gy, int *gx);
void grad_dropout(tg_graph *g, int id, int gy, int *gx);

/* rules_math.c: math and shape ops */
void grad_minmax(tg_graph *g, int id, int gy, int *gx);
void grad_unary_math(tg_graph *g, int id, int gy, int *gx);
void grad_softmax(tg_graph *g, int id, int gy, int *gx);
void grad_narrow(tg_graph *g, int id, int gy, int *gx);
void grad_concat(tg_graph *g, int id, int gy, int *gx);
void grad_take_along_axis(tg_graph *g, int id, int gy, int *gx);

/* convolution ops (rules_conv.c) */
void grad_conv2d(tg_graph *g, int id, int gy, int *gx);
void grad_max_pool2d(tg_graph *g, int id, int gy, int *gx);
void grad_upsample2d(tg_graph *g, int id, int gy, int *gx);

/* Appends the backward pass of scalar `loss` to g. param_grad[p] receives
 * the node holding d loss / d param p (-1 if p is frozen or unused). */
tg_status grad_append(tg_graph *g, int loss, int *param_grad);
#endif
