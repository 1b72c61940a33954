/* The model and data classifier.c trains and infer.c runs: an MLP sorting
 * the points of two interleaved spirals, 2 -> 64 -> 64 -> 2 with tanh. */
#ifndef SPIRALS_H
#define SPIRALS_H
#include <math.h>
#include <stdint.h>

#include <tensorgrad.h>

#define SPIRAL_POINTS 512 /* 256 per arm */

typedef struct {
    tg_linear l1, l2, l3;
} spiral_net;

/* The layers in model m, named l1, l2, l3 (the checkpoint's names). */
static inline spiral_net spiral_net_new(tg_model *m) {
    spiral_net n = {tg_linear_new(m, "l1", 2, 64, true), tg_linear_new(m, "l2", 64, 64, true),
                    tg_linear_new(m, "l3", 64, 2, true)};
    return n;
}

/* x [B, 2] -> logits [B, 2] */
static inline tg_tensor spiral_logits(tg_graph *g, spiral_net *n) {
    tg_tensor h = tg_tanh(tg_linear_fwd(g, &n->l1, tg_input(g, "x")));
    h = tg_tanh(tg_linear_fwd(g, &n->l2, h));
    return tg_linear_fwd(g, &n->l3, h);
}

/* Training: mean cross-entropy against the i32 labels [B]. */
static inline tg_tensor spiral_loss(tg_graph *g, void *user) {
    return tg_cross_entropy(spiral_logits(g, user), tg_input(g, "label"), TG_REDUCTION_MEAN);
}

/* Inference: the class of each point, i32 [B]. */
static inline tg_tensor spiral_class(tg_graph *g, void *user) {
    return tg_argmax(spiral_logits(g, user), -1, false);
}

/* Point i of the two spirals (arm i % 2, 1.5 turns out to radius 2) and its arm. */
static inline void spiral_point(int i, float *x, float *y, int32_t *label) {
    int arm = i % 2, k = i / 2;
    double r = (k + 8) / (double)(SPIRAL_POINTS / 2 + 8), a = 3.0 * 3.14159265 * r + arm * 3.14159265;
    *x = (float)(2 * r * cos(a)), *y = (float)(2 * r * sin(a)), *label = arm;
}

/* The training spec classifier.c uses (infer.c needs only the model: a
 * forward session loads the checkpoint's params and leaves the rest). */
static inline tg_train_spec spiral_spec(tg_model *m, spiral_net *net, const tg_input_decl *inputs, int64_t steps) {
    tg_train_spec spec = {.model = m, .loss = spiral_loss, .user = net, .inputs = inputs, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_cosine(3e-2f, 1e-4f, steps), 1e-4f)};
    return spec;
}
#endif
