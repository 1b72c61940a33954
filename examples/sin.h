/* The sin MLP (examples/sin.c; the tests and the benchmark train it too):
 * x [SIN_B, 1] -> 64 -> 64 -> 1, relu between, mse against y [SIN_B, 1]. */
#ifndef TG_EXAMPLE_SIN_H
#define TG_EXAMPLE_SIN_H
#include "tensorgrad.h"

#define SIN_B 256

typedef struct {
    tg_linear l1, l2, l3;
} sin_net;

/* The layers in model m, named l1, l2, l3: 1 -> width -> width -> 1 (the example's width is 64). */
static inline sin_net sin_net_new(tg_model *m, int64_t width) {
    return (sin_net){tg_linear_new(m, "l1", 1, width, true), tg_linear_new(m, "l2", width, width, true),
                     tg_linear_new(m, "l3", width, 1, true)};
}

/* x [B,1] -> y [B,1]; loss = mse(y, target) */
static tg_tensor sin_loss(tg_graph *g, void *user) {
    sin_net *net = user;
    tg_tensor x = tg_input(g, "x"), y = tg_input(g, "y");
    tg_tensor h = tg_relu(tg_linear_fwd(g, &net->l1, x));
    h = tg_relu(tg_linear_fwd(g, &net->l2, h));
    return tg_mse(tg_linear_fwd(g, &net->l3, h), y);
}
#endif
