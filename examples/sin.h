/* The sin MLP (examples/sin.c; the tests and the benchmark train it too):
 * x [SIN_B, 1] -> 64 -> 64 -> 1, relu between, mse against y [SIN_B, 1]. */
#ifndef TG_EXAMPLE_SIN_H
#define TG_EXAMPLE_SIN_H
#include "tensorgrad.h"

#define SIN_B 256

typedef struct {
    tg_linear l1, l2, l3;
} sin_net;

/* x [B,1] -> y [B,1]; loss = mse(y, target) */
static tg_tensor sin_loss(tg_graph *g, void *user) {
    sin_net *net = user;
    tg_tensor x = tg_input(g, "x"), y = tg_input(g, "y");
    tg_tensor h = tg_relu(tg_linear_fwd(g, &net->l1, x));
    h = tg_relu(tg_linear_fwd(g, &net->l2, h));
    return tg_mse(tg_linear_fwd(g, &net->l3, h), y);
}
#endif
