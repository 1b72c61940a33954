/* The stack machine shared by the graph fuzzers: the input is a program of
 * op builders whose dims, axes, scalars and ids are drawn from edge values
 * (0, -1, 2^31, 2^40, INT64_MAX, NaN, forged ids). Each target supplies its
 * op set as a loss function (trace_fn) over a `prog`; fuzz_program traces it
 * once into a plain graph and, when every tensor is small, compiles and
 * steps it on the CPU. Every outcome must be a status, in bounded time: an
 * input that takes more than SLOW_CPU_SECONDS of this thread's CPU time
 * aborts, so libFuzzer keeps it as a reproducer. CPU time, not libFuzzer's
 * wall-clock -timeout, because make test fuzzes beside the other suites: on
 * a loaded machine the wall clock says how busy the machine is, not how slow
 * the input. */
#ifndef FUZZ_PROG_H
#define FUZZ_PROG_H
#define _POSIX_C_SOURCE 200809L /* clock_gettime; macOS declares snprintf from 200112L */
#include <limits.h>
#include <math.h>
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
    bool x_is_param; /* x is param xp, not the input "x" (so that every op on its path has a gradient) */
    tg_param xp;
} prog;

static unsigned byte(prog *q) { return q->at < q->n ? q->p[q->at++] : 0; }

static int64_t dim(prog *q) {
    static const int64_t v[] = {1, 2, 3, 4, 0, -1, 8, 16, 5, 7, (int64_t)1 << 31, (int64_t)1 << 40, INT64_MAX,
                                -2, 64, INT_MAX};
    return v[byte(q) % 16];
}

static inline float scalar(prog *q) { /* inline: not every target uses it */
    static const float v[] = {0.0f, 1.0f, -1.0f, 0.5f, 1e-5f, 2.0f, 1e30f, -0.0f};
    unsigned b = byte(q) % 11;
    return b < 8 ? v[b] : b == 8 ? NAN : b == 9 ? INFINITY : -INFINITY;
}

static tg_shape shape(prog *q) {
    tg_shape s = {(int)(byte(q) % 9) - 1, {0}}; /* -1 .. 7 dims: out of range both ways */
    for (int i = 0; i < s.ndim && i < TG_MAX_DIMS; i++) s.d[i] = dim(q);
    return s;
}

/* The stack holds 8 tensors; a push onto a full stack replaces the top. */
static void push(tg_tensor *st, int *sp, tg_tensor t) {
    if (*sp < 8) st[(*sp)++] = t;
    else st[7] = t;
}

/* What an op of a target's step reads and writes (st, sp: the stack and its depth). */
#define TOP st[*sp - 1]
#define SECOND st[*sp > 1 ? *sp - 2 : 0]
#define THIRD st[*sp > 2 ? *sp - 3 : 0]
#define PUSH(t) push(st, sp, t)
#define POP() (*sp > 1 ? (void)(*sp)-- : (void)0)

/* One op of a target: reads its opcode and arguments from q. */
typedef void (*step_fn)(tg_graph *g, prog *q, tg_tensor *st, int *sp);

/* The program as a loss: x on the stack, up to 24 ops, the mean of the top;
 * with x a param, a weighted sum of every element of every value left on
 * the stack (weights sin(0.7 i + 1 + k) for element i of value k), so that
 * a wrong element anywhere changes it. */
static tg_tensor program(tg_graph *g, prog *q, step_fn step) {
    q->at = 0;
    tg_tensor st[8];
    int sp = 1;
    st[0] = q->x_is_param ? tg_use(g, q->xp) : tg_input(g, "x");
    for (int ops = 0; ops < 24 && q->at < q->n; ops++) step(g, q, st, &sp);
    if (!q->x_is_param) return tg_mean(tg_cast(st[sp - 1], TG_F32), TG_ALL, false);
    tg_tensor loss = tg_scalar(g, 0.0f);
    for (int k = 0; k < sp; k++) {
        tg_tensor v = tg_cast(st[k], TG_F32);
        tg_shape s = tg_tensor_shape(v);
        tg_tensor i = tg_arange(g, tg_shape_numel(s), TG_F32);
        tg_tensor w = tg_sin(tg_add(tg_mul(i, tg_scalar(g, 0.7f)), tg_scalar(g, 1.0f + (float)k)));
        loss = tg_add(loss, tg_sum(tg_mul(v, tg_reshape(w, s)), TG_ALL, false));
    }
    return loss;
}

#define SLOW_CPU_SECONDS 5.0 /* the slowest input of 2 million took 0.16 s here */

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Traces program q of model m once into a plain graph: whether it traces
 * without error and every tensor is small enough to compile and step; and,
 * where all_f32 is not NULL, whether every value is f32. */
static bool fuzz_small(tg_model *m, prog *q, tg_trace_fn run, bool *all_f32) {
    tg_graph *g = tg_graph_new(m);
    tg_input_new(g, "x", TG_F32, TG_SHAPE(4, 4));
    run(g, q);
    bool small = tg_graph_status(g) == TG_OK, f32 = small;
    for (int i = 0; small && i < tg_graph_node_count(g); i++) {
        small = tg_shape_numel(tg_tensor_shape((tg_tensor){g, i})) <= 4096;
        f32 = f32 && tg_tensor_dtype((tg_tensor){g, i}) == TG_F32;
    }
    tg_graph_free(g);
    if (all_f32) *all_f32 = small && f32;
    return small;
}

/* The model has one parameter "w" [4, 4]; the program's input "x" is [4, 4]. */
static inline int fuzz_program(const char *target, const uint8_t *data, size_t size, tg_trace_fn run) {
    double t0 = cpu_seconds();
    tg_model *m = tg_model_new();
    prog q = {.p = data, .n = size, .w = tg_model_param(m, "w", TG_SHAPE(4, 4), tg_init_randn(0.1f))};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 4)}};
    if (fuzz_small(m, &q, run, NULL)) {
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
        fprintf(stderr, "%s: one input took %.1f s of CPU (limit %.0f s)\n", target, used, SLOW_CPU_SECONDS);
        abort();
    }
    return 0;
}
#endif
