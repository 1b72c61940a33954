/* CPU kernels, one per kernel family of ops.def (tg_cpu_<kernel>), listed
 * per op in tg_cpu_kernels (ops.c). Signature: (ctx, graph, node id, output
 * memory, input memories). */
#ifndef TG_CPU_KERNELS_H
#define TG_CPU_KERNELS_H
#include "../ir/ir.h"
#include "../ir/iter.h"
#include "cpu.h"

#define TG_CPU_KERNEL(name) void name(cpu_ctx *c, const tg_graph *g, int id, void *out, void *const *in)
/* Runs node `id`: out is the output's memory, in[i] the inputs'. */
typedef void (*tg_cpu_fn)(cpu_ctx *c, const tg_graph *g, int id, void *out, void *const *in);
/* Each op's kernel; NULL for leaves and views. */
extern const tg_cpu_fn tg_cpu_kernels[TG_OP_COUNT];

/* Each kernel family of ops.def, tg_cpu_<kernel>, declared from its kernel
 * column (`none` is declared and never defined: the table reads NULL). The
 * files that define them: kernels_ew.c (elementwise, broadcasting,
 * constants), kernels_reduce.c (reductions, the softmax family),
 * kernels_misc.c (matmul, indexing, optimizer updates), kernels_math.c
 * (math and shape ops), kernels_nn.c (losses, norms, embedding, rope,
 * random ops), kernels_conv.c (convolution, pooling, upsampling). Below
 * them, the helpers that lowering and the fused groups call. */
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) TG_CPU_KERNEL(tg_cpu_##kernel);
#include "../ir/ops.def"

/* kernels_math.c: softmax_grad's row, gx = y (gy - sum(gy y)) over A
 * (the fused attention's backward computes its rows with it too). */
void tg_cpu_softmax_grad_row(const float *y, const float *gy, float *gx, int64_t A);

/* kernels_reduce.c */
/* A sum that keeps the trailing axes and drops the leading ones: column
 * sums of x [rows, cols] (tg_cpu_reduce_rows' blocks); the lowering's
 * specialized step and the op-table kernel both run tg_cpu_colsum. */
bool tg_cpu_colsum_shape(const tg_node *n, const tg_node *x, int64_t *rows, int64_t *cols);
/* *out = sum over all of x[i] * x[i], as mul then a sum over every axis make
 * it, for each term; terms spread over the threads (each whole on one). */
typedef struct {
    const float *x;
    int64_t n;
    float *out;
} cpu_sumsq_term;
void tg_cpu_sumsq(cpu_ctx *c, const cpu_sumsq_term *t, int n);
void tg_cpu_colsum(cpu_ctx *c, const float *x, int64_t rows, int64_t cols, float *y);

/* kernels_misc.c */
struct tg_gemm_args;
/* The tg_gemm arguments of matmul node `id` (no epilogue). */
void tg_cpu_matmul_args(const tg_graph *g, int id, void *out, void *const *in, struct tg_gemm_args *ga);

/* kernels_nn.c */
/* A norm's backward rows in one pass (grouping.c's norm groups): per row of x
 * [R, D], its statistics (stats, may be NULL), the forward output y again
 * (NULL: not wanted), and dx (into out, plus resid when not NULL: the add
 * of the residual's gradient); each computed as its own kernel does. */
typedef struct {
    int64_t R, D;
    bool rms;
    float eps;
    const float *x, *gain, *bias, *gy, *resid; /* bias NULL for none (or RMS) */
    float *stats, *y, *out;
} cpu_norm_bwd;
void tg_cpu_norm_backward(cpu_ctx *c, const cpu_norm_bwd *a);
/* The AVX2 path's row functions over a cpu_norm_bwd (norm_avx2.c): the
 * forward (x, gain, bias, y and optionally stats; gy unused) or the fused
 * backward; NULL where the build has no AVX2 code. */
tg_range_fn tg_cpu_norm_rows_avx2(bool backward);
/* Rows [r0, r1) of norm_dgain (into dg) and of gy's column sums (into db,
 * NULL: not wanted) on AVX2; false where the build has no AVX2 code. */
bool tg_cpu_norm_cols_avx2(int64_t D, int64_t r0, int64_t r1, const float *x, const float *gy, const float *st,
                        float *dg, float *db);
/* norm_dgain and the column sum of gy (a bias gradient) in one pass over
 * the rows: each as its own kernel sums. D <= CPU_NORM_SUMS_MAX_D. */
#define CPU_NORM_SUMS_MAX_D 1024
void tg_cpu_norm_sums(cpu_ctx *c, int64_t R, int64_t D, const float *x, const float *gy, const float *stats,
                   float *dgain, float *dbias);

/* kernels_conv.c */
/* pool2x2.c: 2x2 / stride 2 pooling over planes it tiles, on AVX-512; false when it does not apply */
bool tg_cpu_pool2x2(cpu_ctx *c, const tg_node *n, tg_shape xs, const float *x, const float *y, const float *gy,
                 bool relu, float *out);
/* relu_grad(x, max_pool2d_grad(x, y, gy)) for pooling node `pg`'s gradient,
 * x being a relu's output: one pass where pool2x2.c applies, else the two
 * kernels (the second in place). in: x, y, gy. */
void tg_cpu_max_pool2d_grad_relu(cpu_ctx *c, const tg_graph *g, int pg, void *out, void *const *in);
/* Tests: run conv2d and its gradients through the direct loops on every
 * shape; use the plain C loops where AVX-512 would run; shrink the im2col
 * budget (floats) to force one image per chunk; set the index-table limit
 * to 0 to run the row-by-row loops that large planes take. */
extern bool tg_cpu_conv_force_direct;
extern bool tg_cpu_conv_force_generic;
extern int64_t tg_cpu_conv_scratch_floats;
extern int64_t tg_cpu_conv_table_max;

/* An iteration that merged into one long row (same-shape operands) cut into
 * rows of a few thousand elements, so that it spreads over threads. */
void tg_iter_split_long_row(tg_iter *it);
#endif
