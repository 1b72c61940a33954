/* The sin MLP of examples/sin.c, for the tests and the benchmark that train it: x [SIN_B, 1]
 * -> 64 -> 64 -> 1, relu between, mse against y [SIN_B, 1]. */
#ifndef TG_TESTS_SIN_NET_H
#define TG_TESTS_SIN_NET_H

#include "tensorgrad.h"

#define SIN_B 256
typedef struct {
    tg_linear l1, l2, l3;
} sin_net;

static tg_tensor sin_loss(tg_graph *g, void *user) {
    sin_net *n = user;
    tg_tensor h = tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x")));
    h = tg_relu(tg_linear_fwd(g, &n->l2, h));
    return tg_mse(tg_linear_fwd(g, &n->l3, h), tg_input(g, "y"));
}

#endif
