/* The gradient rules (rules*.c), one per differentiable op, declared from
 * ops.def's grad column: op OP with grad R appends its backward with
 * tg_grad_R. grad.c's table reads them; `none` is declared with the rest
 * and never defined (the table reads NULL there). */
#ifndef TG_GRAD_RULES_H
#define TG_GRAD_RULES_H
#include "../ir/ir.h"

/* Appends the backward of node `id` given its output cotangent `gy`; writes
 * the cotangent of each input to gx[i] (-1 for none). */
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) void tg_grad_##grad(tg_graph *g, int id, int gy, int *gx);
#include "../ir/ops.def"
#endif
