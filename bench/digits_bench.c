/* The digits CNN training step (examples/digits.c: two conv + pool stages
 * and a linear head, batch 64, Adam) timed on the CPU. Prints one JSON line:
 *   {"bench": "digits_cnn", "impl": "tensorgrad", "threads": T, "steps": N,
 *    "min_step_ms": ..., "median_step_ms": ...}
 * Usage: digits_bench [steps]   (threads: TG_THREADS, else every CPU)
 * bench/digits.sh runs it alternately with the PyTorch peer (digits_torch.py). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tensorgrad.h"
#include "../examples/digits_cnn.h"

#define B 64

static tg_tensor loss_fn(tg_graph *g, void *u) {
    tg_tensor logits = digits_cnn_logits(g, u, tg_input(g, "x"));
    return tg_cross_entropy(logits, tg_input(g, "y"), TG_REDUCTION_MEAN);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 200;
    if (steps < 1) steps = 1;
    tg_model *m = tg_model_new();
    digits_cnn net = digits_cnn_new(m);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(B, 1, 8, 8)}, {"y", TG_I32, TG_SHAPE(B)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(1e-3f)), .seed = 1};
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) {
        fprintf(stderr, "digits_bench: %s\n", tg_last_error());
        return 1;
    }
    static float x[B * 64];
    static int32_t y[B];
    unsigned r = 12345;
    for (int i = 0; i < B * 64; i++) x[i] = (float)((r = r * 1103515245u + 12345u) >> 8 & 0xffff) / 65536.0f;
    for (int i = 0; i < B; i++) y[i] = (int32_t)((r = r * 1103515245u + 12345u) >> 16) % 10;
    tg_feed feeds[] = {TG_FEED("x", x, B * 64), TG_FEED("y", y, B)};
    float loss;
    for (int i = 0; i < 20; i++) tg_session_step(s, feeds, 2, &loss); /* warm up: first-touch, pool spin-up */
    double *t = malloc(sizeof(double) * (size_t)steps);
    for (int i = 0; i < steps; i++) {
        double t0 = now();
        /* The loss is read back every step, as a training loop that prints it would. */
        if (tg_session_step(s, feeds, 2, &loss) != TG_OK) {
            fprintf(stderr, "digits_bench: %s\n", tg_last_error());
            return 1;
        }
        t[i] = (now() - t0) * 1e3;
    }
    qsort(t, (size_t)steps, sizeof(double), cmp);
    const char *th = getenv("TG_THREADS");
    printf("{\"bench\": \"digits_cnn\", \"impl\": \"tensorgrad\", \"threads\": %s, \"steps\": %d, "
           "\"min_step_ms\": %.4f, \"median_step_ms\": %.4f, \"loss\": %.4f}\n",
           th && *th ? th : "0", steps, t[0], t[steps / 2], loss);
    free(t);
    tg_session_free(s);
    tg_model_free(m);
    return 0;
}
