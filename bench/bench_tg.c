/* Our side of `make bench`: the sin MLP and the addition transformer
 * training steps through the public API, and tg_gemm at a few square sizes.
 * Prints one JSON object per line; the driver (bench/run.sh) pairs them with
 * the peers' lines.
 *
 *   bench_tg [--steps N] [--graph] [--sin | --addition | --gemm [sizes...]]
 *   bench_tg --gemm-webgpu sizes...   (square GEMM on WebGPU, a chain of 8 products per step)
 *   bench_tg --gemm-shapes-webgpu [names...]  (gpt_small's own products on WebGPU, 4 per step;
 *                                     names: qkv up down dx.up dW.up dW.down, default all,
 *                                     or MxKxN for any product of row-major operands)
 *   bench_tg --rows-webgpu [R D [KERNEL]]  (bandwidth-bound kernels on WebGPU over [R, D], default 16384 x 384;
 *                                      KERNEL: layer_norm, norm_stats, norm_dx, norm_dgain or colsum alone, beside the copy)
 *   (threads: TG_THREADS, else all cores) */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorgrad.h"
#include "cpu/cpu.h"
#include "ir/ir.h"
#include "wgsl/wgsl.h"
#include "../examples/gpt.h"
#include "../examples/sin.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs warm + steps training steps on one batch; t[0..steps) gets the timed
 * steps' durations in seconds, sorted. Returns 0, or 1 after printing the
 * error (t is then incomplete). */
static int time_steps(tg_session *s, const tg_feed *feeds, int n_feeds, int warm, int steps, double *t, float *loss) {
    if (!t) {
        fprintf(stderr, "bench_tg: out of memory\n");
        return 1;
    }
    for (int i = 0; i < warm + steps; i++) {
        double t0 = now();
        if (tg_session_step(s, feeds, n_feeds, loss) != TG_OK) {
            fprintf(stderr, "bench_tg: %s\n", tg_last_error());
            return 1;
        }
        if (i >= warm) t[i - warm] = now() - t0;
    }
    qsort(t, (size_t)steps, sizeof *t, cmp_double);
    return 0;
}

/* Runs warm steps, then `batches` batches of `per` steps back to back, only
 * the last step of each reading the loss (so waiting for the GPU); t[0..batches)
 * gets each batch's time per step in seconds, sorted. A GPU left idle
 * between short steps lowers its clocks: on the H200 the products of
 * --gemm-shapes-webgpu, timed one waited-for step at a time, ran at about
 * 6.5 TFLOP/s in most steps against 30+ inside gpt_small's step, and a
 * layer norm over [16384, 384] took 75 - 84 us against 24 us there (the
 * step's GPU timestamps, TG_PROFILE). Returns 0, or 1 after printing
 * the error. */
static int time_batches(tg_session *s, int warm, int batches, int per, double *t, float *loss) {
    if (!t) {
        fprintf(stderr, "bench_tg: out of memory\n");
        return 1;
    }
    tg_status st = TG_OK;
    for (int i = 0; i < warm && st == TG_OK; i++) st = tg_session_step(s, NULL, 0, loss);
    for (int b = 0; b < batches && st == TG_OK; b++) {
        double t0 = now();
        for (int k = 0; k < per && st == TG_OK; k++) st = tg_session_step(s, NULL, 0, k == per - 1 ? loss : NULL);
        t[b] = (now() - t0) / per;
    }
    if (st != TG_OK) {
        fprintf(stderr, "bench_tg: %s\n", tg_last_error());
        return 1;
    }
    qsort(t, (size_t)batches, sizeof *t, cmp_double);
    return 0;
}

/* ---- the sin MLP, as in examples/sin.c: SIN_B=256, 1-64-64-1 ReLU, MSE, Adam 5e-3 ---- */

static int bench_sin(int steps, int warm, bool print_graph, bool check) {
    tg_model *m = tg_model_new();
    sin_net net = sin_net_new(m, 64);
    tg_input_decl inputs[] = {{"x", TG_F32, TG_SHAPE(SIN_B, 1)}, {"y", TG_F32, TG_SHAPE(SIN_B, 1)}};
    tg_train_spec spec = {.model = m, .loss = sin_loss, .user = &net, .inputs = inputs, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(5e-3f)), .seed = 1, .check_numerics = check};
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) {
        fprintf(stderr, "bench_tg: %s\n", tg_last_error());
        tg_model_free(m);
        return 1;
    }
    if (print_graph) {
        tg_graph_print(tg_session_graph(s), stderr);
        tg_session_print_plan(s, stderr);
    }
    /* One fixed batch, as the PyTorch peer does. */
    static float xs[SIN_B], ys[SIN_B];
    for (int i = 0; i < SIN_B; i++) {
        xs[i] = (float)(((i * 0.618034) - floor(i * 0.618034)) * 2.0 * 3.14159265358979 - 3.14159265358979);
        ys[i] = sinf(xs[i]);
    }
    tg_feed feeds[] = {TG_FEED("x", xs, SIN_B), TG_FEED("y", ys, SIN_B)};
    double *t = malloc(sizeof(double) * (size_t)steps);
    float loss = 0;
    int rc = time_steps(s, feeds, 2, warm, steps, t, &loss);
    if (rc == 0) {
        printf("{\"bench\": \"sin_mlp\", \"impl\": \"%s\", \"median_step_ms\": %.4f, \"min_step_ms\": %.4f, "
               "\"steps\": %d, \"loss\": %.6g, \"threads\": %d}\n",
               check ? "tensorgrad_checked" : "tensorgrad", t[steps / 2] * 1e3, t[0] * 1e3, steps, loss, tg_default_threads());
    }
    free(t);
    tg_session_free(s);
    tg_model_free(m);
    return rc;
}

/* ---- the addition transformer, as in examples/addition.c and the peer's
 * "addition": V=12, D=64, 3 pre-LN blocks, 4 heads, T=8, B=128, AdamW with
 * clip 1.0, loss on the 3 result digits; one fixed batch, as the peer does ---- */

enum { AV = 12, AT = 8, AB = 128 };
static gpt_model add_net;

static tg_tensor add_loss(tg_graph *g, void *user) {
    (void)user;
    static const float mask[AT] = {0, 0, 0, 0, 0, 1, 1, 1};
    tg_tensor logits = gpt_forward(g, &add_net, tg_input(g, "tokens"), false);
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE);
    tg_tensor masked = tg_mul(ce, tg_constant(g, TG_SHAPE(AT), mask));
    return tg_mul_s(tg_sum(masked, TG_ALL, false), 1.0f / (AB * 3));
}

static int bench_addition(int steps, int warm, bool print_graph, bool check) {
    tg_model *m = tg_model_new();
    gpt_declare(&add_net, m, (gpt_config){AV, 64, 3, 4, AT + 1});
    tg_input_decl inputs[] = {{"tokens", TG_I32, TG_SHAPE(AB, AT)}, {"targets", TG_I32, TG_SHAPE(AB, AT)}};
    tg_optim opt = tg_adamw(tg_lr_linear(5e-3f, 5e-4f, 1500), 0.01f);
    opt.clip_grad_norm = 1.0f;
    tg_train_spec spec = {.model = m, .loss = add_loss, .inputs = inputs, .n_inputs = 2, .optim = opt, .seed = 1,
                          .check_numerics = check};
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) {
        fprintf(stderr, "bench_tg: %s\n", tg_last_error());
        tg_model_free(m);
        return 1;
    }
    if (print_graph) {
        tg_graph_print(tg_session_graph(s), stderr);
        tg_session_print_plan(s, stderr);
    }
    tg_plan_stats ps;
    tg_session_plan_stats(s, &ps);
    static int32_t tokens[AB * AT], targets[AB * AT];
    uint64_t rng = 12345;
    for (int i = 0; i < AB; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int a = (int)((rng >> 33) % 100);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int b = (int)((rng >> 33) % 100), sum = a + b;
        int32_t seq[AT + 1] = {a / 10, a % 10, 10, b / 10, b % 10, 11, sum % 10, (sum / 10) % 10, sum / 100};
        for (int t = 0; t < AT; t++) tokens[i * AT + t] = seq[t], targets[i * AT + t] = seq[t + 1];
    }
    tg_feed feeds[] = {TG_FEED("tokens", tokens, AB * AT), TG_FEED("targets", targets, AB * AT)};
    double *t = malloc(sizeof(double) * (size_t)steps);
    float loss = 0;
    int rc = time_steps(s, feeds, 2, warm, steps, t, &loss);
    if (rc == 0) {
        printf("{\"bench\": \"addition\", \"impl\": \"%s\", \"median_step_ms\": %.4f, \"min_step_ms\": %.4f, "
               "\"steps\": %d, \"loss\": %.6g, \"threads\": %d, \"kernels\": %d, \"planned_bytes\": %lld, "
               "\"naive_bytes\": %lld, \"param_bytes\": %lld, \"grad_bytes\": %lld, \"state_bytes\": %lld, "
               "\"scratch_bytes\": %lld}\n",
               check ? "tensorgrad_checked" : "tensorgrad", t[steps / 2] * 1e3, t[0] * 1e3, steps, loss,
               tg_default_threads(), ps.n_kernels,
               (long long)ps.planned_bytes, (long long)ps.naive_bytes, (long long)ps.param_bytes,
               (long long)ps.grad_bytes, (long long)ps.state_bytes, (long long)ps.scratch_bytes);
    }
    free(t);
    tg_session_free(s);
    tg_model_free(m);
    return rc;
}

/* ---- GEMM: C = A @ B, square, row-major ---- */

static void bench_gemm(int n, tg_pool *pool) {
    size_t sz = (size_t)n * (size_t)n;
    float *A = malloc(sz * 4), *Bm = malloc(sz * 4), *C = malloc(sz * 4);
    for (size_t i = 0; i < sz; i++) {
        A[i] = (float)((i * 7 + 3) % 13) * 0.1f - 0.6f;
        Bm[i] = (float)((i * 5 + 1) % 11) * 0.1f - 0.5f;
    }
    tg_gemm_args g = {1, n, n, n, A, Bm, C, n, n, n, 0, 0, 0, false, false, NULL, false};
    double flop = 2.0 * n * (double)n * n;
    /* Enough repetitions for ~0.5 s, at least 5, each timed on its own. */
    int reps = (int)(0.5 * 150e9 / flop);
    if (reps < 5) reps = 5;
    if (reps > 2000) reps = 2000;
    for (int i = 0; i < 2; i++) tg_gemm(pool, &g);
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        tg_gemm(pool, &g);
        t[i] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    printf("{\"bench\": \"gemm\", \"impl\": \"tensorgrad\", \"n\": %d, \"gflops\": %.2f, \"best_gflops\": %.2f, "
           "\"reps\": %d, \"threads\": %d, \"kernel\": \"%s\"}\n",
           n, flop / t[reps / 2] * 1e-9, flop / t[0] * 1e-9, reps, tg_pool_threads(pool), tg_gemm_kernel_name());
    fflush(stdout);
    free(t);
    free(A);
    free(Bm);
    free(C);
}

/* ---- GEMM on a session's backend: a chain of CHAIN products [n,n]x[n,n] ---- */

enum { CHAIN = 8, BATCH = 8 /* steps back to back per timed batch (time_batches) */ };

/* C_1 = A @ B, C_k = C_{k-1} @ B (B scaled by 1/sqrt(n) keeps the values
 * bounded); gradients stopped, so a step is the CHAIN products and the sum
 * of one row.
 * The chain spreads the step's fixed cost (submit, loss read-back) over
 * CHAIN products, as the peer's loop of torch.mm calls does. */
static tg_tensor gemm_chain(tg_graph *g, void *user) {
    (void)user;
    tg_tensor b = tg_stop_gradient(tg_use(g, 1)), c = tg_matmul(tg_stop_gradient(tg_use(g, 0)), b);
    for (int k = 1; k < CHAIN; k++) c = tg_matmul(c, b);
    return tg_sum(tg_narrow(c, 0, 0, 1), TG_ALL, false); /* one row: the products are the step */
}

static int bench_gemm_session(int n, tg_backend be, int reps) {
    tg_model *m = tg_model_new();
    tg_model_param(m, "A", TG_SHAPE(n, n), tg_init_randn(1.0f));
    tg_model_param(m, "B", TG_SHAPE(n, n), tg_init_randn(1.0f / sqrtf((float)n)));
    tg_train_spec spec = {.model = m, .loss = gemm_chain, .optim = (tg_optim){0}, .seed = 1, .backend = be};
    tg_session *s = NULL;
    if (tg_session_new(&spec, &s) != TG_OK) {
        fprintf(stderr, "gemm %d: %s\n", n, tg_last_error());
        tg_model_free(m);
        return 1;
    }
    double *t = malloc(sizeof(double) * (size_t)reps);
    tg_status st = t ? TG_OK : TG_ERR_NOMEM;
    float loss;
    if (st == TG_OK && time_batches(s, 3, reps, BATCH, t, &loss)) st = TG_ERR_BACKEND;
    if (st == TG_OK) {
        double flop = CHAIN * 2.0 * n * (double)n * n;
        printf("{\"bench\": \"gemm\", \"impl\": \"tensorgrad\", \"backend\": \"%s\", \"n\": %d, "
               "\"tflops\": %.2f, \"best_tflops\": %.2f, \"reps\": %d, \"batch\": %d, \"chain\": %d}\n",
               be == TG_BACKEND_WEBGPU ? "webgpu" : "cpu", n, flop / t[reps / 2] * 1e-12, flop / t[0] * 1e-12, reps,
               BATCH, CHAIN);
    } else fprintf(stderr, "gemm %d: %s\n", n, tg_last_error());
    fflush(stdout);
    free(t);
    tg_session_free(s);
    tg_model_free(m);
    return st == TG_OK ? 0 : 1;
}

/* ---- gpt_small's own products on WebGPU ----
 *
 * The matmuls of gpt_small's step (B*T = 16384 rows, C = 384, 4C = 1536):
 * its forward products, a data gradient (B read transposed) and the weight
 * gradients (A read transposed, K = the 16384 rows). Each step runs SHAPE_N
 * independent products, each with its own operands (the weight gradients'
 * operands are 25-100 MB, so no product finds the last one's in cache), and
 * reads one element of each. bench/torch_gemm.py --shapes runs the same list.
 * Timed in batches (time_batches): one waited-for step at a time, these
 * products ran at about 6.5 TFLOP/s in most steps on the H200 (the GPU's
 * clocks drop while it waits for the host between short steps). */

enum { SHAPE_N = 4 };

typedef struct {
    const char *name;
    int64_t M, K, N;
    bool ta, tb; /* A stored [K, M], B stored [N, K] */
} shape_case;

static const shape_case gpt_shapes[] = {
    {"qkv", 16384, 384, 384, false, false},      {"up", 16384, 384, 1536, false, false},
    {"down", 16384, 1536, 384, false, false},    {"dx.up", 16384, 1536, 384, false, true},
    {"dW.up", 384, 16384, 1536, true, false},    {"dW.down", 1536, 16384, 384, true, false},
};

static tg_tensor shape_loss(tg_graph *g, void *user) {
    const shape_case *c = user;
    tg_tensor acc = {NULL, -1};
    for (int k = 0; k < SHAPE_N; k++) {
        tg_tensor a = tg_stop_gradient(tg_use(g, 2 * k)), b = tg_stop_gradient(tg_use(g, 2 * k + 1));
        tg_tensor y = tg_sum(tg_narrow(tg_narrow(tg_matmul_t(a, b, c->ta, c->tb), 0, 0, 1), 1, 0, 1), TG_ALL, false);
        acc = k ? tg_add(acc, y) : y;
    }
    return acc;
}

static int bench_gemm_shape(const shape_case *c, int reps) {
    tg_model *m = tg_model_new();
    for (int k = 0; k < SHAPE_N; k++) {
        char na[8], nb[8];
        snprintf(na, sizeof na, "A%d", k);
        snprintf(nb, sizeof nb, "B%d", k);
        tg_model_param(m, na, c->ta ? TG_SHAPE(c->K, c->M) : TG_SHAPE(c->M, c->K), tg_init_randn(1.0f));
        tg_model_param(m, nb, c->tb ? TG_SHAPE(c->N, c->K) : TG_SHAPE(c->K, c->N), tg_init_randn(1.0f));
    }
    tg_train_spec spec = {.model = m, .loss = shape_loss, .user = (void *)c, .optim = (tg_optim){0}, .seed = 1,
                          .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    double *t = malloc(sizeof(double) * (size_t)reps);
    tg_status st = t ? tg_session_new(&spec, &s) : TG_ERR_NOMEM;
    float loss;
    if (st == TG_OK && time_batches(s, 3, reps, BATCH, t, &loss)) st = TG_ERR_BACKEND;
    if (st == TG_OK) {
        double flop = SHAPE_N * 2.0 * (double)c->M * (double)c->K * (double)c->N;
        printf("{\"bench\": \"gemm_shape\", \"impl\": \"tensorgrad\", \"shape\": \"%s\", \"m\": %lld, \"k\": %lld, "
               "\"n\": %lld, \"ta\": %d, \"tb\": %d, \"tflops\": %.2f, \"best_tflops\": %.2f, \"reps\": %d, "
               "\"batch\": %d}\n",
               c->name, (long long)c->M, (long long)c->K, (long long)c->N, c->ta, c->tb, flop / t[reps / 2] * 1e-12,
               flop / t[0] * 1e-12, reps, BATCH);
    } else fprintf(stderr, "gemm %s: %s\n", c->name, tg_last_error());
    fflush(stdout);
    free(t);
    tg_session_free(s);
    tg_model_free(m);
    return st == TG_OK ? 0 : 1;
}

/* ---- bandwidth-bound kernels on WebGPU: row kernels, column sums, a copy ----
 *
 * Each kernel's time is the difference between a forward running it on 1 +
 * RCHAIN tensors and one running it on 1, over RCHAIN: the run's fixed cost
 * (submit, output read-back) cancels. Every item reads its own [R, D] params,
 * so no item finds the previous one's data in cache (the H200's L2 holds 50
 * MB, two of these tensors). The loss reads one element of each output, so
 * the kernels under test are the step. The norm backward kernels are built
 * as graph nodes directly (their stats input a param), each alone. Each
 * variant of rows.c runs through its test hook: the row forms (loop, regs),
 * the reductions (workgroup tree, subgroup sums in a workgroup per row, a
 * row per subgroup: tree where the device has no subgroups, the second
 * where its subgroups vary in size) and the column sums in one phase or two (by shape, or 16 or 32
 * chunks; 8, 32 or 128 columns per workgroup). */

enum { RCHAIN = 8 };

typedef enum { RB_COPY, RB_LN, RB_STATS, RB_DX, RB_DGAIN, RB_COLSUM } rb_kind;
static const char *const rb_names[] = {"copy", "layer_norm", "norm_stats", "norm_dx", "norm_dgain", "colsum"};

typedef struct {
    rb_kind kind;
    int n; /* items */
    int64_t R, D;
} rb_case;

/* params: 0 gain [D], 1 bias [D], 2 stats [R, 2], then item k's x at 3 + 2k and gy at 4 + 2k */
static tg_tensor rb_node(tg_opcode op, const tg_tensor *in, int nin) {
    tg_node n = tg_ir_proto(op, NULL, __FILE__, __LINE__);
    for (int k = 0; k < nin; k++) n.in[k] = in[k].id;
    n.at.norm.rms = false;
    n.at.norm.eps = 1e-5f;
    return (tg_tensor){in[0].g, tg_ir_add(in[0].g, &n)};
}

static tg_tensor rb_loss(tg_graph *g, void *user) {
    const rb_case *c = user;
    static const char *const cap[] = {"y0", "y1", "y2", "y3", "y4", "y5", "y6", "y7", "y8", "y9"};
    tg_tensor gain = tg_use(g, 0), bias = tg_use(g, 1), stats = tg_use(g, 2), acc = {NULL, -1};
    for (int k = 0; k < c->n; k++) {
        tg_tensor x = tg_use(g, 3 + 2 * k), y;
        bool two = c->kind == RB_DX || c->kind == RB_DGAIN;
        tg_tensor gy = two ? tg_use(g, 4 + 2 * k) : x;
        switch (c->kind) {
        case RB_COPY: y = tg_capture(tg_neg(x), cap[k]); break; /* captured: stored, not inlined into the loss */
        case RB_LN: y = tg_layer_norm(x, gain, bias, 1e-5f); break;
        case RB_STATS: y = rb_node(TG_OP_NORM_STATS, &x, 1); break;
        case RB_DX: y = rb_node(TG_OP_NORM_DX, (tg_tensor[]){x, gain, gy, stats}, 4); break;
        case RB_DGAIN: y = rb_node(TG_OP_NORM_DGAIN, (tg_tensor[]){x, gy, stats}, 3); break;
        default: y = tg_sum(x, 0, false); break;
        }
        tg_tensor e = tg_narrow(tg_reshape(y, TG_SHAPE(-1)), 0, 0, 1);
        acc = k ? tg_add(acc, e) : e;
    }
    return tg_sum(acc, TG_ALL, false);
}

/* Median time per run (seconds) of case c's forward over batches of BATCH
 * runs back to back, each batch waiting for its last one-element output
 * (time_batches says why), or < 0 after printing the error. A forward
 * session: a training step would add the backward of every kernel under
 * test and an update of every param. */
static double rb_time(const rb_case *c, int reps) {
    tg_model *m = tg_model_new();
    tg_model_param(m, "gain", TG_SHAPE(c->D), tg_init_randn(1.0f));
    tg_model_param(m, "bias", TG_SHAPE(c->D), tg_init_randn(1.0f));
    tg_model_param(m, "stats", TG_SHAPE(c->R, 2), tg_init_randn(1.0f));
    for (int k = 0; k < c->n; k++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", k);
        tg_model_param(m, name, TG_SHAPE(c->R, c->D), tg_init_randn(1.0f));
        snprintf(name, sizeof name, "gy%d", k);
        tg_model_param(m, name, TG_SHAPE(c->kind == RB_DX || c->kind == RB_DGAIN ? c->R : 1, c->D), tg_init_randn(1.0f));
    }
    tg_forward_spec spec = {.fn = rb_loss, .user = (void *)c, .model = m, .seed = 1, .backend = TG_BACKEND_WEBGPU};
    tg_forward *f = NULL;
    double med = -1, *t = malloc(sizeof(double) * (size_t)reps);
    float out;
    tg_status st = t ? tg_forward_new(&spec, &f) : TG_ERR_NOMEM;
    for (int i = 0; i < 3 && st == TG_OK; i++) {
        st = tg_forward_run(f, 1, NULL, 0);
        if (st == TG_OK) st = tg_forward_output(f, &out, 1);
    }
    for (int i = 0; i < reps && st == TG_OK; i++) { /* BATCH runs back to back, then one read (time_batches) */
        double t0 = now();
        for (int k = 0; k < BATCH && st == TG_OK; k++) st = tg_forward_run(f, 1, NULL, 0);
        if (st == TG_OK) st = tg_forward_output(f, &out, 1);
        t[i] = (now() - t0) / BATCH;
    }
    if (st != TG_OK) fprintf(stderr, "rows %s: %s\n", rb_names[c->kind], tg_last_error());
    else {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        med = t[reps / 2];
    }
    free(t);
    tg_forward_free(f);
    tg_model_free(m);
    return med;
}

static int bench_rows_webgpu(int64_t R, int64_t D, int reps, const char *only) {
    typedef struct {
        rb_kind kind;
        const char *variant;
        tg_wgsl_forms forms;          /* the variant (all 0: the generator's choice) */
        double bytes;                /* per item */
    } rb_row;
    double x = (double)R * D * 4, st = (double)R * 8, d = (double)D * 4;
    enum { REGS = TG_WGSL_ROWS_REGISTERS, LOOP = TG_WGSL_ROWS_LOOP, TREE = TG_WGSL_REDUCE_TREE,
           SUBGROUP = TG_WGSL_REDUCE_SUBGROUP, SGROW = TG_WGSL_REDUCE_ROW_PER_SUBGROUP };
    const rb_row rows[] = {
        {RB_COPY, "-", {0}, 2 * x},
        {RB_LN, "regs+sgrow", {.rows = REGS, .reduce = SUBGROUP, .norm = TG_WGSL_NORM_ROW_PER_SUBGROUP}, 2 * x + 2 * d}, /* the default */
        {RB_LN, "regs+subgroup", {.rows = REGS, .reduce = SUBGROUP, .norm = TG_WGSL_NORM_WORKGROUP}, 2 * x + 2 * d},
        {RB_LN, "regs+tree", {.rows = REGS, .reduce = TREE}, 2 * x + 2 * d},
        {RB_LN, "loop+tree", {.rows = LOOP, .reduce = TREE}, 2 * x + 2 * d},
        {RB_STATS, "regs+sgrow", {.rows = REGS, .reduce = SGROW}, x + st}, /* the default (subgroup) takes this form for statistics */
        {RB_STATS, "regs+tree", {.rows = REGS, .reduce = TREE}, x + st},
        {RB_STATS, "loop+tree", {.rows = LOOP, .reduce = TREE}, x + st},
        {RB_DX, "regs+sgrow", {.rows = REGS, .reduce = SGROW}, 3 * x + st + d},
        {RB_DX, "regs+subgroup", {.rows = REGS, .reduce = SUBGROUP}, 3 * x + st + d},
        {RB_DX, "regs+tree", {.rows = REGS, .reduce = TREE}, 3 * x + st + d},
        {RB_DX, "loop+tree", {.rows = LOOP, .reduce = TREE}, 3 * x + st + d},
        {RB_DGAIN, "two", {0}, 2 * x + st + d},
        {RB_DGAIN, "two,w8", {.colsum_width = 8}, 2 * x + st + d},
        {RB_DGAIN, "two,w32", {.colsum_width = 32}, 2 * x + st + d},
        {RB_DGAIN, "two,w128", {.colsum_width = 128}, 2 * x + st + d},
        {RB_DGAIN, "one", {.colsum_chunks = TG_WGSL_OFF}, 2 * x + st + d},
        {RB_COLSUM, "two", {0}, x + d},
        {RB_COLSUM, "two,w8", {.colsum_width = 8}, x + d},
        {RB_COLSUM, "two,w32", {.colsum_width = 32}, x + d},
        {RB_COLSUM, "two,w128", {.colsum_width = 128}, x + d},
        {RB_COLSUM, "one", {.colsum_chunks = TG_WGSL_OFF}, x + d},
        {RB_COLSUM, "two:16", {.colsum_chunks = 16}, x + d},
        {RB_COLSUM, "two:32", {.colsum_chunks = 32}, x + d},
    };
    double copy_gbps = 0;
    int rc = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const rb_row *r = &rows[i];
        if (only && r->kind != RB_COPY && strcmp(only, rb_names[r->kind]) != 0) continue;
        tg_wgsl_force_forms(&r->forms);
        rb_case one = {r->kind, 1, R, D}, many = {r->kind, 1 + RCHAIN, R, D};
        double t1 = rb_time(&one, reps), tn = t1 >= 0 ? rb_time(&many, reps) : -1;
        tg_wgsl_force_forms(NULL);
        if (t1 < 0 || tn < 0) {
            rc = 1;
            continue;
        }
        double us = (tn - t1) / RCHAIN * 1e6, gbps = us > 0 ? r->bytes / us * 1e-3 : 0;
        if (r->kind == RB_COPY) copy_gbps = gbps;
        printf("{\"bench\": \"rows\", \"impl\": \"tensorgrad\", \"backend\": \"webgpu\", \"kernel\": \"%s\", "
               "\"variant\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"us\": %.2f, \"gbps\": %.1f, \"copy_gbps\": %.1f, "
               "\"ratio_to_copy\": %.3f, \"reps\": %d, \"chain\": %d}\n",
               rb_names[r->kind], r->variant, (long long)R, (long long)D, us, gbps, copy_gbps,
               copy_gbps > 0 ? gbps / copy_gbps : 0, reps, RCHAIN);
        fflush(stdout);
    }
    return rc;
}

int main(int argc, char **argv) {
    int steps = 300, sizes[8] = {256, 1024, 2048}, n_sizes = 3;
    int add_steps = 0; /* 0: the default */
    bool graph = false, do_sin = true, do_add = true, do_gemm = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--graph")) graph = true;
        else if (!strcmp(argv[i], "--sin")) do_gemm = do_add = false;
        else if (!strcmp(argv[i], "--addition")) do_gemm = do_sin = false;
        else if (!strcmp(argv[i], "--addition-steps") && i + 1 < argc) add_steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gemm-webgpu")) { /* square GEMM on the WebGPU backend, then exit */
            int rc = 0;
            for (int k = 0; i + 1 < argc && atoi(argv[i + 1]) > 0; k++) rc |= bench_gemm_session(atoi(argv[++i]), TG_BACKEND_WEBGPU, 20);
            return rc;
        }
        else if (!strcmp(argv[i], "--gemm-shapes-webgpu")) { /* gpt_small's products on WebGPU, then exit */
            int rc = 0, named = 0;
            for (; i + 1 < argc && argv[i + 1][0] != '-'; named++) {
                const char *want = argv[++i];
                long long M, K, N;
                char tail;
                if (sscanf(want, "%lldx%lldx%lld%c", &M, &K, &N, &tail) == 3 && M > 0 && K > 0 && N > 0) {
                    shape_case any = {want, M, K, N, false, false}; /* M x K x N, both operands row-major */
                    rc |= bench_gemm_shape(&any, 20);
                    continue;
                }
                size_t k = 0;
                while (k < sizeof gpt_shapes / sizeof *gpt_shapes && strcmp(gpt_shapes[k].name, want)) k++;
                if (k == sizeof gpt_shapes / sizeof *gpt_shapes) {
                    fprintf(stderr, "bench_tg: no product named %s\n", want);
                    return 2;
                }
                rc |= bench_gemm_shape(&gpt_shapes[k], 20);
            }
            for (size_t k = 0; !named && k < sizeof gpt_shapes / sizeof *gpt_shapes; k++) rc |= bench_gemm_shape(&gpt_shapes[k], 20);
            return rc;
        }
        else if (!strcmp(argv[i], "--rows-webgpu")) { /* bandwidth-bound kernels on WebGPU, then exit */
            int64_t R = 16384, D = 384;
            const char *only = NULL; /* a kernel's rows alone (and the copy's, for the ratio) */
            if (i + 2 < argc && atoll(argv[i + 1]) > 0 && atoll(argv[i + 2]) > 0) R = atoll(argv[i + 1]), D = atoll(argv[i + 2]);
            if (i + 3 < argc && atoll(argv[i + 1]) > 0) only = argv[i + 3];
            return bench_rows_webgpu(R, D, 30, only);
        }
        else if (!strcmp(argv[i], "--gemm")) {
            do_sin = do_add = false;
            for (n_sizes = 0; i + 1 < argc && n_sizes < 8 && atoi(argv[i + 1]) > 0; n_sizes++)
                sizes[n_sizes] = atoi(argv[++i]);
            if (n_sizes == 0) n_sizes = 3;
        } else {
            fprintf(stderr, "usage: bench_tg [--steps N] [--addition-steps N] [--graph] "
                            "[--sin | --addition | --gemm [sizes...] | --gemm-webgpu sizes... | --gemm-shapes-webgpu | "
                            "--rows-webgpu [R D [KERNEL]]]\n");
            return 2;
        }
    }
    if (steps < 1) steps = 1;
    printf("{\"bench\": \"info\", \"impl\": \"tensorgrad\", \"kernel\": \"%s\", \"threads\": %d}\n",
           tg_gemm_kernel_name(), tg_default_threads());
    fflush(stdout);
    /* Each model again with spec.check_numerics (every kernel's output checked): its cost. */
    if (do_sin && (bench_sin(steps, 50, graph, false) != 0 || bench_sin(steps, 50, false, true) != 0)) return 1;
    fflush(stdout);
    int as = add_steps > 0 ? add_steps : 300;
    if (do_add && (bench_addition(as, 30, graph && !do_sin, false) != 0 || bench_addition(as, 30, false, true) != 0))
        return 1;
    fflush(stdout);
    if (do_gemm) {
        tg_pool *pool = tg_pool_new(tg_default_threads());
        for (int i = 0; i < n_sizes; i++) bench_gemm(sizes[i], pool);
        tg_pool_free(pool);
    }
    return 0;
}
