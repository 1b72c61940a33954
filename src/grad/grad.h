/* Reverse-mode autograd over the IR (grad.c). */
#ifndef TG_GRAD_H
#define TG_GRAD_H
#include "../ir/ir.h"

/* Appends the backward pass of scalar `loss` to g. param_grad[p] receives
 * the node holding d loss / d param p (-1 if p is frozen or unused). */
tg_status tg_grad_append(tg_graph *g, int loss, int *param_grad);
#endif
