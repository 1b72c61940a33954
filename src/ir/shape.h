/* The shape rules (shape*.c), declared from ops.def's shape column: op OP
 * with shape R gets its output's shape and dtype from tg_shape_R, which
 * records an error on g (tg_ir_fail) and returns false when the inputs do
 * not fit. The op table (optable.c) reads them. */
#ifndef TG_SHAPE_H
#define TG_SHAPE_H
#include "ir.h"

#define TG_OP(OP, name, arity, flags, shape, grad, kernel) bool tg_shape_##shape(tg_graph *g, tg_node *n);
#include "ops.def"

/* Rules the others share: f32 in, the same shape out; f32 or i32 in. */
bool tg_shape_unary_f32(tg_graph *g, tg_node *n);
bool tg_shape_unary_num(tg_graph *g, tg_node *n);
#endif
