/* Shape rules (shape.c), referenced by the op table. */
#ifndef TG_SHAPE_H
#define TG_SHAPE_H
#include "ir.h"

bool shape_leaf(tg_graph *g, tg_node *n);
bool shape_arange(tg_graph *g, tg_node *n);
bool shape_binary(tg_graph *g, tg_node *n);
bool shape_unary_f32(tg_graph *g, tg_node *n);
bool shape_same(tg_graph *g, tg_node *n);
bool shape_cast(tg_graph *g, tg_node *n);
bool shape_where(tg_graph *g, tg_node *n);
bool shape_sum(tg_graph *g, tg_node *n);
bool shape_reshape(tg_graph *g, tg_node *n);
bool shape_permute(tg_graph *g, tg_node *n);
bool shape_broadcast_to(tg_graph *g, tg_node *n);
bool shape_matmul(tg_graph *g, tg_node *n);
bool shape_one_hot(tg_graph *g, tg_node *n);
bool shape_axis_f32(tg_graph *g, tg_node *n);
bool shape_causal(tg_graph *g, tg_node *n);

/* shape_math.c: math and shape ops */
bool shape_unary_num(tg_graph *g, tg_node *n);
bool shape_identity(tg_graph *g, tg_node *n);
bool shape_arg(tg_graph *g, tg_node *n);
bool shape_narrow(tg_graph *g, tg_node *n);
bool shape_narrow_grad(tg_graph *g, tg_node *n);
bool shape_concat(tg_graph *g, tg_node *n);
bool shape_take_along_axis(tg_graph *g, tg_node *n);
bool shape_take_along_axis_grad(tg_graph *g, tg_node *n);
bool shape_minmax_grad(tg_graph *g, tg_node *n);

/* nn ops (shape_nn.c) */
bool shape_xent(tg_graph *g, tg_node *n);
bool shape_xent_grad(tg_graph *g, tg_node *n);
bool shape_norm(tg_graph *g, tg_node *n);
bool shape_norm_grad(tg_graph *g, tg_node *n);
bool shape_embedding(tg_graph *g, tg_node *n);
bool shape_rope(tg_graph *g, tg_node *n);
bool shape_dropout(tg_graph *g, tg_node *n);
bool shape_randn(tg_graph *g, tg_node *n);
bool shape_categorical(tg_graph *g, tg_node *n);

/* convolution ops (shape_conv.c) */
bool shape_conv2d(tg_graph *g, tg_node *n);
bool shape_conv2d_grad_input(tg_graph *g, tg_node *n);
bool shape_conv2d_grad_weight(tg_graph *g, tg_node *n);
bool shape_max_pool2d(tg_graph *g, tg_node *n);
bool shape_upsample2d(tg_graph *g, tg_node *n);
#endif
