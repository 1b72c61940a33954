/* Reductions and the softmax family on the CPU. Each output element is
 * summed in a fixed order whatever the thread count, so results do not
 * depend on TG_THREADS. */
#include <math.h>
#include <string.h>

#include "fused_attention.h"
#include "cpu.h"
#include "kernels.h"
#include "vec.h"

/* ---- sum over an axis mask (keepdims) ---- */

typedef struct {
    tg_iter it;        /* over the input; operand 1 = the output (stride 0 on reduced axes) */
    const float *x;
    float *y;
    bool i32;
} sum_job;

static float block_sum(const float *x, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += x[i];
    return s;
}

/* block_sum of x[i] * x[i] (each square rounded, as the mul kernel makes it). */
static float block_sumsq(const float *x, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + k] * x[i + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

/* A sum longer than SUM_BLOCK elements is the sum, in order, of its blocks
 * of SUM_BLOCK (the last one shorter), each summed as above: so the threads
 * can share one long sum (a vocabulary's embedding gradient in the clip
 * norm) and give the bits one thread does. */
#define SUM_BLOCK 65536
static int64_t sum_blocks(int64_t n) { return n <= SUM_BLOCK ? 1 : (n + SUM_BLOCK - 1) / SUM_BLOCK; }
static float block_of(const float *x, int64_t n, int64_t b, bool sq) {
    int64_t lo = b * SUM_BLOCK, len = n - lo < SUM_BLOCK ? n - lo : SUM_BLOCK;
    return sq ? block_sumsq(x + lo, len) : block_sum(x + lo, len);
}
static float fold_blocks(const float *part, int64_t nb) {
    float s = part[0];
    for (int64_t b = 1; b < nb; b++) s += part[b];
    return s;
}

static float long_sum(const float *x, int64_t n, bool sq) {
    if (n <= SUM_BLOCK) return sq ? block_sumsq(x, n) : block_sum(x, n);
    float s = block_of(x, n, 0, sq);
    for (int64_t b = 1; b < sum_blocks(n); b++) s += block_of(x, n, b, sq);
    return s;
}
static float row_sum(const float *x, int64_t n) { return long_sum(x, n, false); }

/* long_sum of n arrays (t[i].x, t[i].n elements; with or without the
 * squares), their blocks spread over the threads: part[u] = block u,
 * counting the arrays' blocks end to end. */
typedef struct {
    const cpu_sumsq_term *t;
    int n;
    bool sq;
    float *part;
} blocks_job;

static void blocks_range(void *arg, int64_t lo, int64_t hi) {
    const blocks_job *j = arg;
    int64_t first = 0; /* the first unit of array i */
    int i = 0;
    while (i < j->n && first + sum_blocks(j->t[i].n) <= lo) first += sum_blocks(j->t[i++].n);
    for (int64_t u = lo; u < hi && i < j->n; u++) {
        while (i < j->n && u - first == sum_blocks(j->t[i].n)) first += sum_blocks(j->t[i++].n);
        if (i < j->n) j->part[u] = block_of(j->t[i].x, j->t[i].n, u - first, j->sq);
    }
}

/* *t[i].out = 0 + long_sum(t[i].x, t[i].n, sq) for each array: the blocks
 * on the threads, then each array's folded in order. False (nothing
 * written) when the partials' buffer cannot be had. */
static bool long_sums(cpu_ctx *c, const cpu_sumsq_term *t, int n, bool sq) {
    int64_t units = 0;
    for (int i = 0; i < n; i++) units += sum_blocks(t[i].n);
    float *part = c && c->threads > 1 ? tg_pool_shared(c->pool, sizeof(float) * (size_t)units) : NULL;
    if (!part) return false;
    blocks_job j = {t, n, sq, part};
    tg_cpu_parallel(c, units, 1, blocks_range, &j);
    for (int i = 0; i < n; part += sum_blocks(t[i++].n)) *t[i].out = 0.0f + fold_blocks(part, sum_blocks(t[i].n));
    return true;
}

void tg_cpu_sumsq(cpu_ctx *c, const cpu_sumsq_term *t, int n) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += t[i].n;
    if (total >= 32768 && long_sums(c, t, n, true)) return;
    for (int i = 0; i < n; i++) *t[i].out = 0.0f + long_sum(t[i].x, t[i].n, true); /* as tg_cpu_sum: 0, plus the sum */
}

/* Rows [lo, hi) of the iteration; for a kept last axis, columns [c0, c1). */
static void sum_rows(sum_job *j, int64_t lo, int64_t hi, int64_t c0, int64_t c1) {
    int64_t off[2], idx[TG_MAX_DIMS], k = j->it.nd - 1, so = j->it.st[1][k];
    tg_iter_row(&j->it, lo, idx, off);
    for (int64_t r = lo; r < hi; r++, tg_iter_next(&j->it, idx, off)) {
        if (j->i32) {
            const int32_t *x = (const int32_t *)j->x + off[0];
            int32_t *y = (int32_t *)j->y + off[1];
            /* wraps like i32 add (and WGSL), instead of signed-overflow UB */
            for (int64_t i = c0; i < c1; i++) y[i * so] = (int32_t)((uint32_t)y[i * so] + (uint32_t)x[i]);
        } else if (so == 0) {
            j->y[off[1]] += row_sum(j->x + off[0] + c0, c1 - c0);
        } else {
            const float *x = j->x + off[0];
            float *y = j->y + off[1];
            for (int64_t i = c0; i < c1; i++) y[i] += x[i];
        }
    }
}

/* x [A, C, B] summed over A and B (a conv's bias gradient: gy [N, C, H*W]):
 * y[c] += row_sum(x[a, c, :]) for a in order, as sum_rows adds them, without
 * its per-row iterator steps, which cost more than a 16-float row. (Split
 * over channels between two threads it ran slower: each thread then reads
 * rows the other core wrote.) */
static void sum_outer_inner(const float *x, float *y, int64_t A, int64_t C, int64_t B) {
    for (int64_t a = 0; a < A; a++, x += C * B)
        for (int64_t c = 0; c < C; c++) y[c] += row_sum(x + c * B, B);
}

static void sum_by_rows(void *arg, int64_t lo, int64_t hi) {
    sum_job *j = arg;
    sum_rows(j, lo, hi, 0, j->it.inner);
}

static void sum_by_cols(void *arg, int64_t lo, int64_t hi) {
    sum_job *j = arg;
    sum_rows(j, 0, j->it.rows, lo, hi);
}

bool tg_cpu_colsum_shape(const tg_node *n, const tg_node *x, int64_t *rows, int64_t *cols) {
    if (n->dtype != TG_F32 || n->shape.ndim != x->shape.ndim) return false;
    int k = 0;
    while (k < n->shape.ndim && n->shape.d[k] == 1) k++;
    for (int i = k; i < n->shape.ndim; i++)
        if (n->shape.d[i] != x->shape.d[i]) return false;
    *cols = tg_ir_numel(n);
    *rows = *cols ? tg_ir_numel(x) / *cols : 0;
    return *cols >= 16; /* a few long sums: sum_rows adds them in a better order */
}

typedef struct {
    const float *x;
    int64_t cols;
} colsum_job;

static void colsum_block(void *arg, int64_t r0, int64_t r1, float *partial) {
    const colsum_job *j = arg;
    tg_vec_best()->colsum(r1 - r0, j->cols, 0, j->cols, j->x + r0 * j->cols, partial);
}

void tg_cpu_colsum(cpu_ctx *c, const float *x, int64_t rows, int64_t cols, float *y) {
    colsum_job j = {x, cols};
    tg_cpu_reduce_rows(c, rows, cols, colsum_block, &j, y);
}

TG_CPU_KERNEL(tg_cpu_sum) {
    const tg_node *n = ir_node(g, id), *x = ir_node(g, n->in[0]);
    int64_t rows, cols;
    if (tg_cpu_colsum_shape(n, x, &rows, &cols)) {
        tg_cpu_colsum(c, in[0], rows, cols, out);
        return;
    }
    sum_job j = {{0}, in[0], out, n->dtype == TG_I32};
    memset(out, 0, (size_t)tg_ir_numel(n) * 4);
    int64_t st[1][TG_MAX_DIMS];
    tg_shape_bcast_strides(n->shape, x->shape, st[0]);
    tg_iter_init(&j.it, x->shape, 1, st);
    int k = j.it.nd - 1;
    bool outer_kept = true; /* every axis but the last is kept: rows own disjoint outputs */
    for (int i = 0; i < k; i++) outer_kept &= j.it.st[1][i] != 0;
    int64_t total = j.it.rows * j.it.inner;
    if (total == 0) return; /* nothing to add (sum_outer_inner would walk [2^31, C, 0] row by empty row) */
    if (!j.i32 && j.it.nd == 3 && j.it.st[1][0] == 0 && j.it.st[1][1] == 1 && j.it.st[1][2] == 0 &&
        j.it.st[0][2] == 1 && j.it.st[0][1] == j.it.d[2] && j.it.st[0][0] == j.it.d[1] * j.it.d[2])
        sum_outer_inner(j.x, j.y, j.it.d[0], j.it.d[1], j.it.d[2]);
    else if (total < 32768 || c->threads <= 1) sum_by_rows(&j, 0, j.it.rows);
    else if (!j.i32 && j.it.rows == 1 && j.it.st[1][k] == 0) { /* one long sum: its blocks on the threads */
        cpu_sumsq_term t = {j.x, j.it.inner, j.y};
        if (!long_sums(c, &t, 1, false)) sum_by_rows(&j, 0, 1);
    }
    else if (j.it.st[1][k] != 0) tg_cpu_parallel(c, j.it.inner, 64, sum_by_cols, &j);
    else if (outer_kept) tg_cpu_parallel(c, j.it.rows, 1 + 16384 / (j.it.inner + 1), sum_by_rows, &j);
    else sum_by_rows(&j, 0, j.it.rows);
}

/* ---- ops over one axis: the tensor viewed as [outer, A, inner] ---- */

typedef struct {
    const tg_node *n;
    int64_t outer, A, inner;
    const float *x, *gy;
    float *y;
    int64_t Tq; /* causal: rows per matrix */
} axis_job;

static void axis_view(const tg_node *n, int axis, axis_job *j) {
    j->outer = 1;
    j->inner = 1;
    for (int i = 0; i < axis; i++) j->outer *= n->shape.d[i];
    for (int i = axis + 1; i < n->shape.ndim; i++) j->inner *= n->shape.d[i];
    j->A = n->shape.d[axis];
}

/* Lines are indexed l in [0, outer*inner); element a of line l is at base + a*inner. */
#define LINE_BASE(j, l) (((l) / (j)->inner) * (j)->A * (j)->inner + (l) % (j)->inner)

static void log_softmax_lines(void *arg, int64_t lo, int64_t hi) {
    axis_job *j = arg;
    int64_t s = j->inner;
    for (int64_t l = lo; l < hi; l++) {
        const float *x = j->x + LINE_BASE(j, l);
        float *y = j->y + LINE_BASE(j, l);
        float m = -INFINITY;
        for (int64_t a = 0; a < j->A; a++) m = x[a * s] > m ? x[a * s] : m;
        float z = 0.0f;
        for (int64_t a = 0; a < j->A; a++) z += expf(x[a * s] - m);
        float lz = m + logf(z);
        for (int64_t a = 0; a < j->A; a++) y[a * s] = x[a * s] - lz;
    }
}

TG_CPU_KERNEL(tg_cpu_log_softmax) {
    const tg_node *n = ir_node(g, id);
    axis_job j = {n, 0, 0, 0, in[0], NULL, out, 0};
    axis_view(n, (int)n->at.axis.axis, &j);
    tg_cpu_parallel(c, j.outer * j.inner, 1 + 8192 / (j.A + 1), log_softmax_lines, &j);
}

/* gx = gy - exp(y) * sum(gy) along the axis */
static void log_softmax_grad_lines(void *arg, int64_t lo, int64_t hi) {
    axis_job *j = arg;
    int64_t s = j->inner;
    for (int64_t l = lo; l < hi; l++) {
        const float *y = j->x + LINE_BASE(j, l), *gy = j->gy + LINE_BASE(j, l);
        float *gx = j->y + LINE_BASE(j, l);
        float sg = 0.0f;
        for (int64_t a = 0; a < j->A; a++) sg += gy[a * s];
        for (int64_t a = 0; a < j->A; a++) gx[a * s] = gy[a * s] - expf(y[a * s]) * sg;
    }
}

TG_CPU_KERNEL(tg_cpu_log_softmax_grad) {
    const tg_node *n = ir_node(g, id);
    axis_job j = {n, 0, 0, 0, in[0], in[1], out, 0};
    axis_view(n, (int)n->at.axis.axis, &j);
    tg_cpu_parallel(c, j.outer * j.inner, 1 + 8192 / (j.A + 1), log_softmax_grad_lines, &j);
}

/* softmax_grad (gx = y (gy - sum(gy y)) along the axis) is in kernels_math.c,
 * vectorized and tiled for strided axes. */

/* Rows of [..., Tq, Tk]: row r is query i = r % Tq; keys j > i get 0. The
 * row itself is fused_attention.c's, which the fused attention kernel also uses. */
static void softmax_causal_rows(void *arg, int64_t lo, int64_t hi) {
    axis_job *j = arg;
    int64_t Tk = j->A;
    for (int64_t r = lo; r < hi; r++) {
        int64_t valid = r % j->Tq + 1;
        tg_attn_softmax_causal_row(j->x + r * Tk, j->y + r * Tk, valid > Tk ? Tk : valid, Tk);
    }
}

TG_CPU_KERNEL(tg_cpu_softmax_causal) {
    const tg_node *n = ir_node(g, id);
    axis_job j = {n, 0, 0, 0, in[0], NULL, out, 0};
    j.A = n->shape.d[n->shape.ndim - 1];
    j.Tq = n->shape.d[n->shape.ndim - 2];
    tg_cpu_parallel(c, tg_ir_numel(n) / (j.A ? j.A : 1), 1 + 8192 / (j.A + 1), softmax_causal_rows, &j);
}

static void where_causal_rows(void *arg, int64_t lo, int64_t hi) {
    axis_job *j = arg;
    float v = j->n->at.fill.value;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * j->A;
        float *y = j->y + r * j->A;
        int64_t i = r % j->Tq;
        for (int64_t a = 0; a < j->A; a++) y[a] = a > i ? v : x[a];
    }
}

TG_CPU_KERNEL(tg_cpu_where_causal) {
    const tg_node *n = ir_node(g, id);
    axis_job j = {n, 0, 0, 0, in[0], NULL, out, 0};
    j.A = n->shape.d[n->shape.ndim - 1];
    j.Tq = n->shape.d[n->shape.ndim - 2];
    tg_cpu_parallel(c, tg_ir_numel(n) / (j.A ? j.A : 1), 1 + 8192 / (j.A + 1), where_causal_rows, &j);
}
