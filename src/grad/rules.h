/* Gradient rules (rules*.c), one per op, referenced by grad.c's table. */
#ifndef TG_GRAD_RULES_H
#define TG_GRAD_RULES_H
#include "../ir/ir.h"

void tg_grad_add(tg_graph *g, int id, int gy, int *gx);
void tg_grad_sub(tg_graph *g, int id, int gy, int *gx);
void tg_grad_mul(tg_graph *g, int id, int gy, int *gx);
void tg_grad_div(tg_graph *g, int id, int gy, int *gx);
void tg_grad_neg(tg_graph *g, int id, int gy, int *gx);
void tg_grad_sqrt(tg_graph *g, int id, int gy, int *gx);
void tg_grad_rsqrt(tg_graph *g, int id, int gy, int *gx);
void tg_grad_log(tg_graph *g, int id, int gy, int *gx);
void tg_grad_exp(tg_graph *g, int id, int gy, int *gx);
void tg_grad_relu(tg_graph *g, int id, int gy, int *gx);
void tg_grad_where(tg_graph *g, int id, int gy, int *gx);
void tg_grad_sum(tg_graph *g, int id, int gy, int *gx);
void tg_grad_reshape(tg_graph *g, int id, int gy, int *gx);
void tg_grad_permute(tg_graph *g, int id, int gy, int *gx);
void tg_grad_broadcast(tg_graph *g, int id, int gy, int *gx);
void tg_grad_matmul(tg_graph *g, int id, int gy, int *gx);
void tg_grad_log_softmax(tg_graph *g, int id, int gy, int *gx);
void tg_grad_softmax_causal(tg_graph *g, int id, int gy, int *gx);
void tg_grad_where_causal(tg_graph *g, int id, int gy, int *gx);
/* nn ops (rules_nn.c) */
void tg_grad_cross_entropy(tg_graph *g, int id, int gy, int *gx);
void tg_grad_nll_loss(tg_graph *g, int id, int gy, int *gx);
void tg_grad_norm(tg_graph *g, int id, int gy, int *gx);
void tg_grad_embedding(tg_graph *g, int id, int gy, int *gx);
void tg_grad_rope(tg_graph *g, int id, int gy, int *gx);
void tg_grad_dropout(tg_graph *g, int id, int gy, int *gx);

/* rules_math.c: math and shape ops */
void tg_grad_minmax(tg_graph *g, int id, int gy, int *gx);
void tg_grad_unary_math(tg_graph *g, int id, int gy, int *gx);
void tg_grad_softmax(tg_graph *g, int id, int gy, int *gx);
void tg_grad_amax(tg_graph *g, int id, int gy, int *gx);
void tg_grad_narrow(tg_graph *g, int id, int gy, int *gx);
void tg_grad_concat(tg_graph *g, int id, int gy, int *gx);
void tg_grad_take_along_axis(tg_graph *g, int id, int gy, int *gx);

/* convolution ops (rules_conv.c) */
void tg_grad_conv2d(tg_graph *g, int id, int gy, int *gx);
void tg_grad_max_pool2d(tg_graph *g, int id, int gy, int *gx);
void tg_grad_upsample2d(tg_graph *g, int id, int gy, int *gx);
#endif
