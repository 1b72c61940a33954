/* Shape rules (shape.c), referenced by the op table. */
#ifndef TG_SHAPE_H
#define TG_SHAPE_H
#include "ir.h"

bool tg_shape_leaf(tg_graph *g, tg_node *n);
bool tg_shape_arange(tg_graph *g, tg_node *n);
bool tg_shape_binary(tg_graph *g, tg_node *n);
bool tg_shape_unary_f32(tg_graph *g, tg_node *n);
bool tg_shape_unary_math(tg_graph *g, tg_node *n);
bool tg_shape_same(tg_graph *g, tg_node *n);
bool tg_shape_cast(tg_graph *g, tg_node *n);
bool tg_shape_where(tg_graph *g, tg_node *n);
bool tg_shape_sum(tg_graph *g, tg_node *n);
bool tg_shape_reshape(tg_graph *g, tg_node *n);
bool tg_shape_permute(tg_graph *g, tg_node *n);
bool tg_shape_broadcast_to(tg_graph *g, tg_node *n);
bool tg_shape_matmul(tg_graph *g, tg_node *n);
bool tg_shape_one_hot(tg_graph *g, tg_node *n);
bool tg_shape_axis_f32(tg_graph *g, tg_node *n);
bool tg_shape_causal(tg_graph *g, tg_node *n);

/* shape_math.c: math and shape ops */
bool tg_shape_unary_num(tg_graph *g, tg_node *n);
bool tg_shape_identity(tg_graph *g, tg_node *n);
bool tg_shape_arg(tg_graph *g, tg_node *n);
bool tg_shape_narrow(tg_graph *g, tg_node *n);
bool tg_shape_narrow_grad(tg_graph *g, tg_node *n);
bool tg_shape_concat(tg_graph *g, tg_node *n);
bool tg_shape_take_along_axis(tg_graph *g, tg_node *n);
bool tg_shape_take_along_axis_grad(tg_graph *g, tg_node *n);
bool tg_shape_minmax_grad(tg_graph *g, tg_node *n);

/* nn ops (shape_nn.c) */
bool tg_shape_xent(tg_graph *g, tg_node *n);
bool tg_shape_xent_grad(tg_graph *g, tg_node *n);
bool tg_shape_norm(tg_graph *g, tg_node *n);
bool tg_shape_norm_grad(tg_graph *g, tg_node *n);
bool tg_shape_embedding(tg_graph *g, tg_node *n);
bool tg_shape_rope(tg_graph *g, tg_node *n);
bool tg_shape_dropout(tg_graph *g, tg_node *n);
bool tg_shape_randn(tg_graph *g, tg_node *n);
bool tg_shape_categorical(tg_graph *g, tg_node *n);

/* convolution ops (shape_conv.c) */
bool tg_shape_conv2d(tg_graph *g, tg_node *n);
bool tg_shape_conv2d_grad_input(tg_graph *g, tg_node *n);
bool tg_shape_conv2d_grad_weight(tg_graph *g, tg_node *n);
bool tg_shape_max_pool2d(tg_graph *g, tg_node *n);
bool tg_shape_upsample2d(tg_graph *g, tg_node *n);
#endif
