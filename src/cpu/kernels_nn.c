/* CPU kernels of the nn ops: cross-entropy and NLL, layer/RMS norm,
 * embedding, rope, and the random ops.
 *
 * Work is split across threads by rows (or, for the column sums dgain and
 * the embedding scatter-add, by column blocks), and every sum runs in a fixed
 * order inside one task, so results are bitwise the same for any thread
 * count. Random ops draw element e (or row r) from the counter-based hash
 * tg_rng_* keyed by (per-step seed, the op's salt), so they are also
 * independent of how the work is split, and reproducible on the GPU. */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "isa.h"
#include "vmath.h"

#define GRAIN 16384 /* elements per task, below which threads cost more than they save */

static int64_t grain_rows(int64_t width) {
    int64_t g = GRAIN / (width > 0 ? width : 1);
    return g > 0 ? g : 1;
}

/* The per-step seed leaf: i32 [2], the low then the high 32 bits. */
static uint64_t read_seed(const void *p) {
    const uint32_t *s = p;
    return (uint64_t)s[0] | (uint64_t)s[1] << 32;
}

static inline float row_max(const float *x, int64_t n) {
    float acc[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    float m = -INFINITY;
    for (int k = 0; k < 8; k++) m = acc[k] > m ? acc[k] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* Elementwise loops below go in blocks of eight that are computed into a
 * local array and then stored: outputs may alias inputs (in-place), so the
 * compiler may not reorder a plain loop's loads and stores, but it does
 * vectorize such a block, even at -O2, and in-place use stays correct. */

typedef struct {
    const tg_node *n;
    void *const *in;
    void *out;
    int64_t rows, width; /* the row view of the op's main operand */
    int64_t T;           /* rope: positions per sequence */
    uint32_t key;        /* random ops: tg_rng_key(seed, salt) */
} nn_job;

static void run_rows(cpu_ctx *c, nn_job *j, tg_range_fn fn) {
    tg_cpu_parallel(c, j->rows, grain_rows(j->width), fn, j);
}

static nn_job row_job(const tg_node *n, void *const *in, void *out, tg_shape main) {
    nn_job j = {n, in, out, 0, 0, 0, 0};
    j.width = main.ndim ? main.d[main.ndim - 1] : 1;
    j.rows = j.width ? tg_shape_numel(main) / j.width : 0;
    return j;
}

/* ---- cross-entropy and NLL: logits [R, V] (leading axes flattened), targets i32 [R] ---- */

/* The 16 lanes added in a fixed tree, in registers: s[k] = a[k] + a[k + 8],
 * then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). */
VINLINE float lanes16(vf a) {
    vf t = a + VSHUF(a, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    vf u = t + VSHUF(t, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    vf w = u + VSHUF(u, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    return w[0] + w[4];
}

/* x[i .. i + n) for n <= VL; lanes past n are 0. */
VINLINE vf vload_tail(const float *x, int64_t n) { return n == VL ? vload(x) : vload_n(x, n); }
VINLINE void vstore_tail(float *y, vf v, int64_t n) {
    if (n == VL) vstore(y, v);
    else vstore_n(y, v, n);
}

/* Rows longer than 16 classes (a vocabulary), one at a time on 16-lane
 * vectors: the max (exact in any order), then e^(x - max) by vexp and its
 * sum over four vector accumulators (class v goes to lane v % 16 of
 * accumulator v / 16 % 4), added in a fixed tree: the same bits on every
 * instruction set and thread count. With e set, the exps are stored there
 * (e may be x itself: each vector is read before it is written). */
VINLINE float xent_long_max(const float *x, int64_t V) {
    vf m = vsplat(-INFINITY);
    int64_t v = 0;
    for (; v + VL <= V; v += VL) {
        vf a = vload(x + v);
        m = vsel(a > m, a, m);
    }
    float r = -INFINITY;
    for (int k = 0; k < VL; k++) r = m[k] > r ? m[k] : r;
    for (; v < V; v++) r = x[v] > r ? x[v] : r;
    return r;
}

VINLINE float xent_long_sum(const float *x, int64_t V, float max, float *e) {
    vf acc[4] = {vsplat(0.0f), vsplat(0.0f), vsplat(0.0f), vsplat(0.0f)}, m = vsplat(max);
    int64_t v = 0;
    for (; v + 4 * VL <= V; v += 4 * VL)
        for (int k = 0; k < 4; k++) {
            vf t = vexp(vload(x + v + k * VL) - m);
            if (e) vstore(e + v + k * VL, t);
            acc[k] += t;
        }
    for (int k = 0; v < V; v += VL, k++) {
        int64_t n = V - v < VL ? V - v : VL;
        vf t = vexp(vload_tail(x + v, n) - m);
        t = vsel(__builtin_convertvector((vf){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, vi) <
                     (vi){0} + (int32_t)n,
                 t, vsplat(0.0f));
        if (e) vstore_tail(e + v, t, n);
        acc[k] += t;
    }
    return lanes16((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

/* Cross-entropy over at most 16 classes, 16 rows at a time: the rows are
 * transposed so that a lane is a row and each class one vector; the max,
 * the exps (vmath.h) and their sum (in class order) are then vertical
 * operations, the same for every row wherever it falls. Longer rows go one
 * at a time (xent_long_max, xent_long_sum). */

/* The 16 x 16 transpose by block swaps (8, 4, 2, 1 wide): rows i and i + b
 * (i & b == 0) trade their b-wide blocks; VT_LO/VT_HI pick the lanes. */
#define VT_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define VT_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define VT_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define VT_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define VT_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define VT_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define VT_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define VT_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define VT_SWAP(b)                                        \
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) \
        if (!(i & b)) {                                   \
            vf a = r[i], c = r[i + b];                    \
            r[i] = VSHUF2(a, c, VT_LO##b);                \
            r[i + b] = VSHUF2(a, c, VT_HI##b);            \
        }
VINLINE void vtranspose16(vf r[16]) {
    VT_SWAP(8) VT_SWAP(4) VT_SWAP(2) VT_SWAP(1)
}

#define XENT_ROWS 16
#define XENT_MAX_V 16

/* Rows [r0, r0 + n) (n <= 16): cls[v] = the class-v logits of the rows, m
 * their max, e[v] = exp(cls[v] - m), s = their sum in class order. */
VINLINE void xent_block(const float *X, int64_t V, int64_t r0, int64_t n, vf e[XENT_MAX_V], vf *mx, vf *sum,
                        vf cls[XENT_MAX_V]) {
    vf r[16];
    for (int i = 0; i < 16; i++) r[i] = i < n ? vload_n(X + (r0 + i) * V, V) : vsplat(0.0f);
    vtranspose16(r);
    vf m = vsplat(-INFINITY), z = vsplat(0.0f);
    for (int64_t v = 0; v < V; v++) m = vsel(r[v] > m, r[v], m);
    for (int64_t v = 0; v < V; v++) e[v] = vexp(r[v] - m), z += e[v];
    for (int64_t v = 0; v < V; v++) cls[v] = r[v];
    *mx = m, *sum = z;
}

/* loss[r] = -log_softmax(x[r])[t[r]] = -((x[r, t] - max) - log(sum exp(x[r] - max))),
 * or 0 when t[r] is outside [0, V). */
TG_MULTI(static, xent_rows, (void *arg, int64_t lo, int64_t hi), (arg, lo, hi)) {
    nn_job *j = arg;
    const float *X = j->in[0];
    const int32_t *t = j->in[1];
    float *y = j->out;
    int64_t V = j->width;
    if (V > XENT_MAX_V) {
        for (int64_t r = lo; r < hi; r++) {
            const float *x = X + r * V;
            if (t[r] < 0 || t[r] >= V) {
                y[r] = 0.0f;
                continue;
            }
            float m = xent_long_max(x, V), s = xent_long_sum(x, V, m, NULL);
            y[r] = -((x[t[r]] - m) - logf(s)); /* PyTorch's order: no large m + small log(s) rounding */
        }
        return;
    }
    for (int64_t r0 = lo; r0 < hi; r0 += XENT_ROWS) {
        int64_t n = hi - r0 < XENT_ROWS ? hi - r0 : XENT_ROWS;
        vf e[XENT_MAX_V], cls[XENT_MAX_V], m, z;
        xent_block(X, V, r0, n, e, &m, &z, cls);
        vi tv = {0};
        for (int i = 0; i < n; i++) tv[i] = t[r0 + i];
        vf xt = vsplat(0.0f);
        for (int64_t v = 0; v < V; v++) xt = vsel(tv == (int32_t)v, cls[v], xt);
        vf loss = -((xt - m) - vlog_pos(z)); /* PyTorch's order, as above */
        loss = vsel((tv >= 0) & (tv < (int32_t)V), loss, vsplat(0.0f));
        vstore_n(y + r0, loss, n);
    }
}

static int64_t xent_grain(int64_t V) { return 1 + 4096 / (V > 0 ? V : 1); }

TG_CPU_KERNEL(tg_cpu_cross_entropy) {
    nn_job j = row_job(ir_node(g, id), in, out, ir_node(g, ir_node(g, id)->in[0])->shape);
    tg_cpu_parallel(c, j.rows, xent_grain(j.width), xent_rows, &j);
}

/* gx[r] = (softmax(x[r]) - onehot(t[r])) * gy[r]; 0 for an out-of-range
 * target. gx may alias x (a block's rows are read before any is written). */
TG_MULTI(static, xent_grad_rows, (void *arg, int64_t lo, int64_t hi), (arg, lo, hi)) {
    nn_job *j = arg;
    const float *X = j->in[0], *gy = j->in[2];
    const int32_t *t = j->in[1];
    float *GX = j->out;
    int64_t V = j->width;
    if (V > XENT_MAX_V) {
        for (int64_t r = lo; r < hi; r++) {
            const float *x = X + r * V;
            float *gx = GX + r * V;
            if (t[r] < 0 || t[r] >= V) {
                memset(gx, 0, (size_t)V * sizeof(float));
                continue;
            }
            float m = xent_long_max(x, V), s = xent_long_sum(x, V, m, gx);
            vf k = vsplat(gy[r] / s);
            int64_t v = 0;
            for (; v + VL <= V; v += VL) vstore(gx + v, vload(gx + v) * k);
            for (; v < V; v++) gx[v] *= k[0];
            gx[t[r]] -= gy[r];
        }
        return;
    }
    for (int64_t r0 = lo; r0 < hi; r0 += XENT_ROWS) {
        int64_t n = hi - r0 < XENT_ROWS ? hi - r0 : XENT_ROWS;
        vf e[XENT_MAX_V], cls[XENT_MAX_V], m, z;
        xent_block(X, V, r0, n, e, &m, &z, cls);
        vi tv = {0};
        vf g = vsplat(0.0f);
        for (int i = 0; i < n; i++) tv[i] = t[r0 + i], g[i] = gy[r0 + i];
        vi ok = (tv >= 0) & (tv < (int32_t)V);
        vf k = g / z;
        vf r[16];
        for (int64_t v = 0; v < 16; v++)
            r[v] = v < V ? vsel(ok, vsel(tv == (int32_t)v, e[v] * k - g, e[v] * k), vsplat(0.0f)) : vsplat(0.0f);
        vtranspose16(r);
        for (int i = 0; i < n; i++) vstore_n(GX + (r0 + i) * V, r[i], V);
    }
}

TG_CPU_KERNEL(tg_cpu_cross_entropy_grad) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, n->shape);
    tg_cpu_parallel(c, j.rows, xent_grain(j.width), xent_grad_rows, &j);
}

/* loss[r] = -lp[r, t[r]], or 0 when t[r] is outside [0, V). */
TG_CPU_KERNEL(tg_cpu_nll_loss) {
    (void)c;
    const tg_node *n = ir_node(g, id);
    tg_shape xs = ir_node(g, n->in[0])->shape;
    int64_t V = xs.d[xs.ndim - 1], R = tg_ir_numel(n);
    const float *lp = in[0];
    const int32_t *t = in[1];
    float *y = out;
    for (int64_t r = 0; r < R; r++) y[r] = t[r] >= 0 && t[r] < V ? -lp[r * V + t[r]] : 0.0f;
}

/* gx [R, V]: -gy[r] at the target, 0 elsewhere. */
TG_CPU_KERNEL(tg_cpu_nll_loss_grad) {
    (void)c;
    const tg_node *n = ir_node(g, id);
    int64_t V = n->at.classes.v, R = tg_ir_numel(n) / V;
    const int32_t *t = in[0];
    const float *gy = in[1];
    float *gx = out;
    memset(gx, 0, (size_t)(R * V) * sizeof(float));
    for (int64_t r = 0; r < R; r++)
        if (t[r] >= 0 && t[r] < V) gx[r * V + t[r]] = -gy[r];
}

/* ---- layer / RMS norm over the last axis: x [R, D], g [D], b [D], stats [R, 2] ---- */

/* The norms run on 16-lane vectors (vmath.h) in functions compiled for
 * several instruction sets (TG_MULTI): a row's sums go lane by lane, then
 * across the lanes in a fixed tree, so every row is reduced the same way
 * whatever the CPU or the thread that takes it. */

/* One definition of the row statistics for the forward and the backward, so
 * the backward differentiates exactly what the forward computed. Layer norm:
 * two passes (mean, then the biased variance), as accurate as Welford here.
 * RMS norm: mean 0 and rstd = 1 / sqrt(mean(x^2) + eps). */
VINLINE void norm_stats_row(const float *x, int64_t D, bool rms, float eps, float *mean, float *rstd) {
    float m = 0.0f;
    if (!rms) {
        vf acc = vsplat(0.0f);
        for (int64_t i = 0; i < D; i += VL) acc += vload_tail(x + i, D - i < VL ? D - i : VL);
        m = lanes16(acc) / (float)D;
    }
    vf acc = vsplat(0.0f), vm = vsplat(m);
    for (int64_t i = 0; i < D; i += VL) {
        int64_t n = D - i < VL ? D - i : VL;
        vf d = vload_tail(x + i, n) - vm;
        if (n < VL) d = vsel(__builtin_convertvector((vf){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, vi) <
                                 (vi){0} + (int32_t)n,
                             d, vsplat(0.0f));
        acc += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(lanes16(acc) / (float)D + eps);
}

/* y = (x - mean) * rstd * g (+ b); y may alias x (a row's statistics are
 * taken before the row is written). */
TG_MULTI(static, norm_rows, (void *arg, int64_t lo, int64_t hi), (arg, lo, hi)) {
    nn_job *j = arg;
    const tg_node *n = j->n;
    const float *X = j->in[0], *gain = j->in[1], *bias = n->nin > 2 ? j->in[2] : NULL;
    float *Y = j->out;
    int64_t D = j->width;
    bool rms = n->op == TG_OP_RMS_NORM;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = X + r * D;
        float *y = Y + r * D, mean, rstd;
        norm_stats_row(x, D, rms, n->at.norm.eps, &mean, &rstd);
        vf vm = vsplat(mean), vr = vsplat(rstd);
        for (int64_t i = 0; i < D; i += VL) {
            int64_t k = D - i < VL ? D - i : VL;
            vf t = (vload_tail(x + i, k) - vm) * vr * vload_tail(gain + i, k);
            if (bias) t += vload_tail(bias + i, k);
            vstore_tail(y + i, t, k);
        }
    }
}

TG_CPU_KERNEL(tg_cpu_norm) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, n->shape);
    tg_range_fn avx2 = tg_cpu_isa() == CPU_AVX2 ? tg_cpu_norm_rows_avx2(false) : NULL;
    if (avx2) {
        cpu_norm_bwd a = {.R = j.rows, .D = j.width, .rms = n->op == TG_OP_RMS_NORM, .eps = n->at.norm.eps, .x = in[0],
                          .gain = in[1], .bias = n->nin > 2 ? in[2] : NULL, .y = out};
        tg_cpu_parallel(c, a.R, grain_rows(a.D), avx2, &a);
        return;
    }
    run_rows(c, &j, norm_rows);
}

TG_MULTI(static, norm_stats_rows, (void *arg, int64_t lo, int64_t hi), (arg, lo, hi)) {
    nn_job *j = arg;
    const float *X = j->in[0];
    float *st = j->out;
    for (int64_t r = lo; r < hi; r++)
        norm_stats_row(X + r * j->width, j->width, j->n->at.norm.rms, j->n->at.norm.eps, &st[2 * r], &st[2 * r + 1]);
}

TG_CPU_KERNEL(tg_cpu_norm_stats) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, ir_node(g, n->in[0])->shape);
    run_rows(c, &j, norm_stats_rows);
}

/* With xh = (x - mean) * rstd and d = gy * g:
 *   layer norm  dx = rstd * (d - mean(d) - xh * mean(d * xh))
 *   RMS norm    dx = rstd * (d - xh * mean(d * xh))
 * dx may alias x or gy: the second pass reads element i before writing it. */
TG_MULTI(static, norm_dx_rows, (void *arg, int64_t lo, int64_t hi), (arg, lo, hi)) {
    nn_job *j = arg;
    const float *X = j->in[0], *gain = j->in[1], *GY = j->in[2], *st = j->in[3];
    float *DX = j->out;
    int64_t D = j->width;
    bool rms = j->n->at.norm.rms;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = X + r * D, *gy = GY + r * D;
        float *dx = DX + r * D;
        vf vm = vsplat(st[2 * r]), vr = vsplat(st[2 * r + 1]);
        vf sa = vsplat(0.0f), sb = vsplat(0.0f);
        for (int64_t i = 0; i < D; i += VL) { /* lanes past D load 0: they add 0 * whatever = 0 */
            int64_t k = D - i < VL ? D - i : VL;
            vf d = vload_tail(gy + i, k) * vload_tail(gain + i, k);
            sa += d;
            sb += d * ((vload_tail(x + i, k) - vm) * vr);
        }
        vf va = vsplat(rms ? 0.0f : lanes16(sa) / (float)D), vb = vsplat(lanes16(sb) / (float)D);
        for (int64_t i = 0; i < D; i += VL) {
            int64_t k = D - i < VL ? D - i : VL;
            vf t = vr * (vload_tail(gy + i, k) * vload_tail(gain + i, k) - va -
                         (vload_tail(x + i, k) - vm) * vr * vb);
            vstore_tail(dx + i, t, k);
        }
    }
}

TG_CPU_KERNEL(tg_cpu_norm_dx) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, n->shape);
    run_rows(c, &j, norm_dx_rows);
}

/* dgain[i] = sum over rows r of gy[r, i] * xh[r, i], in row order within
 * each of tg_cpu_reduce_rows' blocks. */
TG_MULTI(static, norm_dgain_block, (void *arg, int64_t r0, int64_t r1, float *dg), (arg, r0, r1, dg)) {
    nn_job *j = arg;
    const float *X = j->in[0], *GY = j->in[1], *st = j->in[2];
    int64_t D = j->width;
    if (tg_cpu_isa() == CPU_AVX2 && tg_cpu_norm_cols_avx2(D, r0, r1, X, GY, st, dg, NULL)) return;
    for (int64_t i = 0; i < D; i += 4 * VL) {
        int64_t w = D - i < 4 * VL ? D - i : 4 * VL;
        vf acc[4] = {vsplat(0.0f), vsplat(0.0f), vsplat(0.0f), vsplat(0.0f)};
        for (int64_t r = r0; r < r1; r++) {
            const float *x = X + r * D + i, *gy = GY + r * D + i;
            vf vm = vsplat(st[2 * r]), vr = vsplat(st[2 * r + 1]);
            for (int q = 0; q < 4 && q * VL < w; q++) {
                int64_t k = w - q * VL < VL ? w - q * VL : VL;
                acc[q] += vload_tail(gy + q * VL, k) * ((vload_tail(x + q * VL, k) - vm) * vr);
            }
        }
        for (int q = 0; q < 4 && q * VL < w; q++) vstore_tail(dg + i + q * VL, acc[q], w - q * VL < VL ? w - q * VL : VL);
    }
}

TG_CPU_KERNEL(tg_cpu_norm_dgain) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, ir_node(g, n->in[0])->shape);
    tg_cpu_reduce_rows(c, j.rows, j.width, norm_dgain_block, &j, out);
}

/* ---- the fused norm backward (see kernels.h) ---- */

TG_MULTI(static, norm_bwd_rows, (void *arg, int64_t lo, int64_t hi), (arg, lo, hi)) {
    const cpu_norm_bwd *a = arg;
    int64_t D = a->D;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = a->x + r * D, *gy = a->gy + r * D;
        float mean, rstd;
        norm_stats_row(x, D, a->rms, a->eps, &mean, &rstd);
        if (a->stats) a->stats[2 * r] = mean, a->stats[2 * r + 1] = rstd;
        vf vm = vsplat(mean), vr = vsplat(rstd);
        if (a->y) { /* norm_rows */
            float *y = a->y + r * D;
            for (int64_t i = 0; i < D; i += VL) {
                int64_t k = D - i < VL ? D - i : VL;
                vf t = (vload_tail(x + i, k) - vm) * vr * vload_tail(a->gain + i, k);
                if (a->bias) t += vload_tail(a->bias + i, k);
                vstore_tail(y + i, t, k);
            }
        }
        vf sa = vsplat(0.0f), sb = vsplat(0.0f); /* norm_dx_rows */
        for (int64_t i = 0; i < D; i += VL) {
            int64_t k = D - i < VL ? D - i : VL;
            vf d = vload_tail(gy + i, k) * vload_tail(a->gain + i, k);
            sa += d;
            sb += d * ((vload_tail(x + i, k) - vm) * vr);
        }
        vf ma = vsplat(a->rms ? 0.0f : lanes16(sa) / (float)D), mb = vsplat(lanes16(sb) / (float)D);
        float *out = a->out + r * D;
        const float *res = a->resid ? a->resid + r * D : NULL;
        for (int64_t i = 0; i < D; i += VL) {
            int64_t k = D - i < VL ? D - i : VL;
            vf t = vr * (vload_tail(gy + i, k) * vload_tail(a->gain + i, k) - ma -
                         (vload_tail(x + i, k) - vm) * vr * mb);
            if (res) t = vload_tail(res + i, k) + t; /* the add kernel: resid + dx */
            vstore_tail(out + i, t, k);
        }
    }
}

void tg_cpu_norm_backward(cpu_ctx *c, const cpu_norm_bwd *a) {
    tg_range_fn avx2 = tg_cpu_isa() == CPU_AVX2 ? tg_cpu_norm_rows_avx2(true) : NULL;
    tg_cpu_parallel(c, a->R, grain_rows(a->D), avx2 ? avx2 : norm_bwd_rows, (void *)a);
}

typedef struct {
    int64_t D;
    const float *x, *gy, *st;
} sums_job;

/* Per block: dgain's partial (norm_dgain_block) and gy's column sums
 * (colsum_512: each column summed down the rows from 0). */
TG_MULTI(static, norm_sums_block, (void *arg, int64_t r0, int64_t r1, float *part), (arg, r0, r1, part)) {
    const sums_job *j = arg;
    int64_t D = j->D;
    if (tg_cpu_isa() == CPU_AVX2 && tg_cpu_norm_cols_avx2(D, r0, r1, j->x, j->gy, j->st, part, part + D)) return;
    for (int64_t i = 0; i < D; i += 4 * VL) {
        int64_t w = D - i < 4 * VL ? D - i : 4 * VL;
        vf acc[4] = {vsplat(0.0f), vsplat(0.0f), vsplat(0.0f), vsplat(0.0f)};
        vf col[4] = {vsplat(0.0f), vsplat(0.0f), vsplat(0.0f), vsplat(0.0f)};
        for (int64_t r = r0; r < r1; r++) {
            const float *x = j->x + r * D + i, *gy = j->gy + r * D + i;
            vf vm = vsplat(j->st[2 * r]), vr = vsplat(j->st[2 * r + 1]);
            for (int q = 0; q < 4 && q * VL < w; q++) {
                int64_t k = w - q * VL < VL ? w - q * VL : VL;
                vf g = vload_tail(gy + q * VL, k);
                acc[q] += g * ((vload_tail(x + q * VL, k) - vm) * vr);
                col[q] += g;
            }
        }
        for (int q = 0; q < 4 && q * VL < w; q++) {
            int64_t k = w - q * VL < VL ? w - q * VL : VL;
            vstore_tail(part + i + q * VL, acc[q], k);
            vstore_tail(part + D + i + q * VL, col[q], k);
        }
    }
}

void tg_cpu_norm_sums(cpu_ctx *c, int64_t R, int64_t D, const float *x, const float *gy, const float *stats,
                   float *dgain, float *dbias) {
    sums_job j = {D, x, gy, stats};
    float out[2 * CPU_NORM_SUMS_MAX_D];
    tg_cpu_reduce_rows(c, R, 2 * D, norm_sums_block, &j, out);
    memcpy(dgain, out, (size_t)D * sizeof(float));
    memcpy(dbias, out + D, (size_t)D * sizeof(float));
}

/* ---- embedding: table [V, D], idx i32 [R] (leading axes flattened), out [R, D] ---- */

/* An index outside [0, V) gives a zero row (and gets no gradient). */
static void embedding_rows(void *arg, int64_t lo, int64_t hi) {
    nn_job *j = arg;
    const float *table = j->in[0];
    const int32_t *idx = j->in[1];
    float *y = j->out;
    int64_t D = j->width, V = j->T;
    for (int64_t r = lo; r < hi; r++) {
        if (idx[r] >= 0 && idx[r] < V) memcpy(y + r * D, table + idx[r] * D, (size_t)D * sizeof(float));
        else memset(y + r * D, 0, (size_t)D * sizeof(float));
    }
}

TG_CPU_KERNEL(tg_cpu_embedding) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, n->shape);
    j.T = ir_node(g, n->in[0])->shape.d[0]; /* V */
    run_rows(c, &j, embedding_rows);
}

/* gtable [V, D] = sum over r of gy[r] into row idx[r], in index order. A
 * small table takes tg_cpu_reduce_rows' blocks of rows, each added into its
 * own partial table; a big one is split by column blocks of every table
 * row instead (partial tables would cost more than the sums), each task
 * adding the cotangent rows in index order. Either way the sums are the
 * same whatever the thread count, with no atomics. */
#define EMBED_PARTIAL_MAX (64 * 1024) /* table elements up to which the rows are blocked */

static void embed_add(const int32_t *idx, const float *gy, int64_t r0, int64_t r1, int64_t V, int64_t D, int64_t c0,
                      int64_t c1, float *gt) {
    for (int64_t v = 0; v < V; v++) memset(gt + v * D + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int64_t r = r0; r < r1; r++) {
        if (idx[r] < 0 || idx[r] >= V) continue;
        float *dst = gt + idx[r] * D;
        const float *src = gy + r * D;
        int64_t i = c0;
        for (; i + 8 <= c1; i += 8) {
            float t[8];
            for (int k = 0; k < 8; k++) t[k] = dst[i + k] + src[i + k];
            memcpy(dst + i, t, sizeof t);
        }
        for (; i < c1; i++) dst[i] += src[i];
    }
}

static void embedding_grad_cols(void *arg, int64_t c0, int64_t c1) {
    nn_job *j = arg;
    embed_add(j->in[0], j->in[1], 0, j->rows, j->T, j->width, c0, c1, j->out);
}

static void embedding_grad_block(void *arg, int64_t r0, int64_t r1, float *gt) {
    nn_job *j = arg;
    embed_add(j->in[0], j->in[1], r0, r1, j->T, j->width, 0, j->width, gt);
}

TG_CPU_KERNEL(tg_cpu_embedding_grad) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, ir_node(g, n->in[1])->shape);
    j.T = n->at.classes.v;
    if (j.T * j.width <= EMBED_PARTIAL_MAX) {
        tg_cpu_reduce_rows(c, j.rows, j.T * j.width, embedding_grad_block, &j, out);
        return;
    }
    int64_t grain = GRAIN / (j.rows ? j.rows : 1);
    tg_cpu_parallel(c, j.width, grain > 16 ? grain : 16, embedding_grad_cols, &j);
}

/* ---- rope: x [R, D] with R = (...) * T, table [T, D] = cos | sin, each [T, D/2] ---- */

/* For position t = r % T and pair (i, i + D/2), with c, s the table's cos and
 * sin of t * base^(-2i/D):
 *   y[i] = x[i] c - x[i + D/2] s,   y[i + D/2] = x[i + D/2] c + x[i] s
 * and the inverse rotation (s -> -s) for the backward. y may alias x. */
static void rope_rows(void *arg, int64_t lo, int64_t hi) {
    nn_job *j = arg;
    const float *X = j->in[0], *tab = j->in[1];
    float *Y = j->out;
    int64_t D = j->width, h = D / 2;
    float sign = j->n->at.rope.inverse ? -1.0f : 1.0f;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = X + r * D, *cs = tab + (r % j->T) * D, *sn = cs + h;
        float *y = Y + r * D;
        int64_t i = 0;
        for (; i + 8 <= h; i += 8) {
            float lo[8], hi[8];
            for (int k = 0; k < 8; k++) {
                float a = x[i + k], b = x[i + h + k], c = cs[i + k], s = sign * sn[i + k];
                lo[k] = a * c - b * s;
                hi[k] = b * c + a * s;
            }
            memcpy(y + i, lo, sizeof lo);
            memcpy(y + i + h, hi, sizeof hi);
        }
        for (; i < h; i++) {
            float a = x[i], b = x[i + h], c = cs[i], s = sign * sn[i];
            y[i] = a * c - b * s;
            y[i + h] = b * c + a * s;
        }
    }
}

TG_CPU_KERNEL(tg_cpu_rope) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, n->shape);
    j.T = n->shape.d[n->shape.ndim - 2];
    run_rows(c, &j, rope_rows);
}

/* ---- random ops: in[last] is the seed leaf ---- */

/* Element e is dropped when tg_rng_uniform(seed, salt, e) < p, else scaled
 * by 1 / (1 - p). x and y are flat [N]; y may alias x. */
static void dropout_range(void *arg, int64_t lo, int64_t hi) {
    nn_job *j = arg;
    const float *x = j->in[0];
    float *y = j->out, p = j->n->at.rand.p, scale = j->n->at.rand.scale;
    for (int64_t e = lo; e < hi; e++) y[e] = tg_rng_key_uniform(j->key, (uint32_t)e) < p ? 0.0f : x[e] * scale;
}

TG_CPU_KERNEL(tg_cpu_dropout) {
    const tg_node *n = ir_node(g, id);
    nn_job j = {n, in, out, tg_ir_numel(n), 1, 0, tg_rng_key(read_seed(in[1]), n->at.rand.salt)};
    run_rows(c, &j, dropout_range);
}

/* y [N] flat: y[e] = tg_rng_normal(seed, salt, e). */
static void randn_range(void *arg, int64_t lo, int64_t hi) {
    nn_job *j = arg;
    float *y = j->out;
    for (int64_t e = lo; e < hi; e++) y[e] = tg_rng_key_normal(j->key, (uint32_t)e);
}

TG_CPU_KERNEL(tg_cpu_randn) {
    const tg_node *n = ir_node(g, id);
    nn_job j = {n, in, out, tg_ir_numel(n), 4, 0, tg_rng_key(read_seed(in[0]), n->at.rand.salt)};
    run_rows(c, &j, randn_range);
}

/* logits [R, V] -> i32 [R]: inverse-CDF sampling of softmax(x[r]) with one
 * uniform u = tg_rng_uniform(seed, salt, r) per row. With m = max x[r] and
 * w[v] = expf(x[v] - m), Z = sum of w in order v = 0..V-1, the pick is the
 * first v whose running sum (same order) exceeds u * Z. Classes with w = 0
 * are never picked; if rounding (or NaN logits) leaves no pick, the last
 * class with w > 0 is taken, else V - 1. */
static void categorical_rows(void *arg, int64_t lo, int64_t hi) {
    nn_job *j = arg;
    const float *X = j->in[0];
    int32_t *y = j->out;
    int64_t V = j->width;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = X + r * V;
        float m = row_max(x, V), z = 0.0f;
        for (int64_t v = 0; v < V; v++) z += expf(x[v] - m);
        float target = tg_rng_key_uniform(j->key, (uint32_t)r) * z, run = 0.0f;
        int64_t pick = -1, last = V - 1;
        for (int64_t v = 0; v < V; v++) {
            float w = expf(x[v] - m);
            if (w > 0.0f) last = v;
            run += w;
            if (target < run) {
                pick = v;
                break;
            }
        }
        y[r] = (int32_t)(pick >= 0 ? pick : last);
    }
}

TG_CPU_KERNEL(tg_cpu_categorical) {
    const tg_node *n = ir_node(g, id);
    nn_job j = row_job(n, in, out, ir_node(g, n->in[0])->shape);
    j.key = tg_rng_key(read_seed(in[1]), n->at.rand.salt);
    run_rows(c, &j, categorical_rows);
}
