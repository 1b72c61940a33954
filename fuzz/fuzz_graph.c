/* libFuzzer: the graph API as a hostile caller uses it. The input is a
 * program for a small stack machine of op builders with dims, axes and ids
 * drawn from edge values (0, -1, 2^31, 2^40, INT64_MAX, forged ids). It is
 * traced once into a plain graph; when every tensor is small it is also
 * compiled and stepped on the CPU. Every outcome must be a status, in
 * bounded time: an input that takes more than SLOW_CPU_SECONDS of this
 * thread's CPU time aborts, so libFuzzer keeps it as a reproducer. CPU time,
 * not libFuzzer's wall-clock -timeout, because make test fuzzes beside the
 * other suites: on a loaded machine the wall clock says how busy the machine
 * is, not how slow the input. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorgrad.h"

typedef struct {
    const uint8_t *p;
    size_t n, at;
    tg_param w;
} prog;

static unsigned byte(prog *q) { return q->at < q->n ? q->p[q->at++] : 0; }

static int64_t dim(prog *q) {
    static const int64_t v[] = {1, 2, 3, 4, 0, -1, 8, 16, 5, 7, (int64_t)1 << 31, (int64_t)1 << 40, INT64_MAX,
                                -2, 64, INT_MAX};
    return v[byte(q) % 16];
}

static tg_shape shape(prog *q) {
    tg_shape s = {(int)(byte(q) % 9) - 1, {0}}; /* -1 .. 7 dims: out of range both ways */
    for (int i = 0; i < s.ndim && i < TG_MAX_DIMS; i++) s.d[i] = dim(q);
    return s;
}

static void push(tg_tensor *st, int *sp, tg_tensor t) {
    if (*sp < 8) st[(*sp)++] = t;
    else st[7] = t;
}

static tg_tensor run(tg_graph *g, void *u) {
    prog *q = u;
    q->at = 0;
    tg_tensor st[8];
    int sp = 0;
    st[sp++] = tg_input(g, "x");
#define TOP st[sp - 1]
#define SECOND st[sp > 1 ? sp - 2 : 0]
#define PUSH(t) push(st, &sp, t)
    for (int ops = 0; ops < 24 && q->at < q->n; ops++) {
        switch (byte(q) % 20) {
        case 0: PUSH(tg_relu(TOP)); break;
        case 1: PUSH(tg_add(TOP, SECOND)); break;
        case 2: PUSH(tg_matmul(TOP, SECOND)); break;
        case 3: PUSH(tg_reshape(TOP, shape(q))); break;
        case 4: PUSH(tg_sum(TOP, (int)dim(q), byte(q) & 1)); break;
        case 5: PUSH(tg_permute(TOP, shape(q))); break;
        case 6: PUSH(tg_full(g, shape(q), 1.5f)); break;
        case 7: { int64_t a = dim(q), b = dim(q); PUSH(tg_narrow(TOP, (int)dim(q), a, b)); } break;
        case 8: {
            tg_tensor two[2] = {TOP, SECOND};
            PUSH(tg_concat(two, 2, (int)dim(q)));
        } break;
        case 9: PUSH(tg_nearest_upsample2d(TOP, (int)dim(q))); break;
        case 10: PUSH(((tg_tensor){g, (int32_t)(dim(q) - 3)})); break; /* forged ids */
        case 11: PUSH(tg_use(g, q->w)); break;
        case 12: PUSH(tg_one_hot(tg_cast(TOP, TG_I32), dim(q))); break;
        case 13: PUSH(tg_softmax(TOP, (int)dim(q))); break;
        case 14: PUSH(tg_log(tg_exp(TOP))); break;
        case 15: PUSH(tg_broadcast_to(TOP, shape(q))); break;
        case 16: PUSH(tg_sum_axes(TOP, shape(q), byte(q) & 1)); break;
        case 17: PUSH(tg_max_pool2d(TOP, (int)dim(q), (int)dim(q), (int)dim(q))); break;
        case 18: PUSH(tg_conv2d(TOP, SECOND, (int)dim(q), (int)dim(q), (int)dim(q))); break;
        case 19: if (sp > 1) sp--; break;
        }
    }
    return tg_mean(TOP, TG_ALL, false);
}

#define SLOW_CPU_SECONDS 5.0 /* the slowest input of 2 million took 0.16 s here */

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    double t0 = cpu_seconds();
    tg_model *m = tg_model_new();
    prog q = {data, size, 0, tg_model_param(m, "w", TG_SHAPE(4, 4), tg_init_randn(0.1f))};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 4)}};
    tg_graph *g = tg_graph_new(m);
    tg_input_new(g, "x", TG_F32, TG_SHAPE(4, 4));
    run(g, &q);
    /* Compile and step only programs whose tensors are all small. */
    bool small = tg_graph_status(g) == TG_OK;
    for (int i = 0; small && i < tg_graph_node_count(g); i++)
        small = tg_shape_numel(tg_tensor_shape((tg_tensor){g, i})) <= 4096;
    tg_graph_free(g);
    if (small) {
        tg_train_spec spec = {.model = m, .loss = run, .user = &q, .inputs = in, .n_inputs = 1,
                              .optim = tg_adam(tg_lr_constant(1e-2f)), .threads = 1};
        tg_session *s = NULL;
        if (tg_session_new(&spec, &s) == TG_OK) {
            float x[16] = {0}, loss;
            tg_feed f[] = {TG_FEED("x", x, 16)};
            tg_session_step(s, f, 1, &loss);
        }
        tg_session_free(s);
    }
    tg_model_free(m);
    double used = cpu_seconds() - t0;
    if (used > SLOW_CPU_SECONDS) {
        fprintf(stderr, "fuzz_graph: one input took %.1f s of CPU (limit %.0f s)\n", used, SLOW_CPU_SECONDS);
        abort();
    }
    return 0;
}
