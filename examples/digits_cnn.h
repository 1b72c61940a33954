/* The digits CNN, shared by the example (digits.c), its PyTorch parity test
 * (tests/test_digits_parity.c) and its benchmark (bench/digits_bench.c), so
 * the three cannot drift apart:
 *
 *   x [B, 1, 8, 8] -> conv 3x3 (16) -> relu -> pool 2 -> [B, 16, 4, 4]
 *                  -> conv 3x3 (32) -> relu -> pool 2 -> [B, 32, 2, 2]
 *                  -> flatten 128 -> linear 10 (logits) */
#ifndef TG_EXAMPLES_DIGITS_CNN_H
#define TG_EXAMPLES_DIGITS_CNN_H

#include "tensorgrad.h"

#define DIGITS_CLASSES 10

typedef struct {
    tg_conv2d c1, c2;
    tg_linear fc;
} digits_cnn;

/* Params conv1.W [16,1,3,3], conv1.b, conv2.W [32,16,3,3], conv2.b, fc.W [128,10], fc.b.
 * The convs start from kaiming (over their true fan-in), not the layer's
 * randn(0.02) default: a CNN this shallow trains faster and further from it
 * (test accuracy 0.99 against 0.975 after the default run). */
static inline digits_cnn digits_cnn_new(tg_model *m) {
    tg_init kaiming = tg_init_kaiming();
    digits_cnn net = {tg_conv2d_new_opts(m, "conv1", 1, 16, (tg_conv2d_opts){.kh = 3, .pad_h = 1, .pad_w = 1, .init = &kaiming}),
                      tg_conv2d_new_opts(m, "conv2", 16, 32, (tg_conv2d_opts){.kh = 3, .pad_h = 1, .pad_w = 1, .init = &kaiming}),
                      tg_linear_new(m, "fc", 32 * 2 * 2, DIGITS_CLASSES, true)};
    return net;
}

/* x [B, 1, 8, 8] -> logits [B, 10] */
static inline tg_tensor digits_cnn_logits(tg_graph *g, const digits_cnn *m, tg_tensor x) {
    tg_tensor h = tg_max_pool2d(tg_relu(tg_conv2d_fwd(g, &m->c1, x)), 2, 0, 0);
    h = tg_max_pool2d(tg_relu(tg_conv2d_fwd(g, &m->c2, h)), 2, 0, 0);
    return tg_linear_fwd(g, &m->fc, tg_reshape(h, TG_SHAPE(-1, 32 * 2 * 2)));
}

#endif
