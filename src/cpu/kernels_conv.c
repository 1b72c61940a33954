/* CPU kernels of the convolution family (issue 4), all NCHW f32.
 *
 * conv2d and its two backward ops go through tg_gemm on im2col panels. A
 * chunk of `nb` images is unfolded, one group at a time, into
 *     col [Kc, nb*P]    Kc = C/G * kH * kW rows, column nl*P + p = image nl, output pixel p
 * and then
 *     forward       Y  [Og, nb*P] = W_g [Og, Kc] @ col            (Y scattered into out)
 *     input grad    dcol [Kc, nb*P] = W_g^T @ gyP [Og, nb*P]      (dcol folded back: col2im)
 *     weight grad   dW_g [Og, Kc] += gyP @ col^T                  (contracts over every pixel of the chunk)
 * where gyP is gy's group rows gathered image after image. The chunk size
 * depends on the shapes only (a fixed scratch budget), never on the thread
 * count, and every phase either runs in tg_gemm (bitwise independent of the
 * thread count) or gives each thread whole output planes to itself, so
 * results are the same for any TG_THREADS. The weight gradient never has a
 * per-image intermediate: chunks add into dW in image order.
 *
 * Depthwise convolutions (one input channel per group) would need one thin
 * GEMM per channel; they run direct loops over output planes instead (also
 * the fallback when the scratch buffer cannot grow). */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"

#define GRAIN 16384 /* elements per parallel task */

/* The im2col budget per chunk (1 MB: the unfolded panel stays in L2 between
 * being written and being multiplied); tests shrink it to force many chunks. */
int64_t cpu_conv_scratch_floats = (int64_t)1 << 18;

void *cpu_scratch(cpu_ctx *c, size_t bytes) {
    if (c->scratch_bytes < bytes) {
        tg_afree(c->scratch);
        c->scratch = tg_aalloc(bytes);
        c->scratch_bytes = c->scratch ? bytes : 0;
    }
    return c->scratch;
}

/* Tests flip this to run the direct loops on every shape. */
bool cpu_conv_force_direct = false;

typedef struct {
    int64_t N, C, H, W, O, G, Cg, Og, kh, kw, sh, sw, ph, pw, Ho, Wo, P, Kc;
} conv_geom;

static conv_geom geom(const tg_node *n, tg_shape xs, tg_shape ws, tg_shape ys) {
    conv_geom q;
    q.N = xs.d[0], q.C = xs.d[1], q.H = xs.d[2], q.W = xs.d[3];
    q.O = ws.d[0], q.kh = ws.d[2], q.kw = ws.d[3];
    q.G = n->ia[4], q.Cg = q.C / q.G, q.Og = q.O / q.G;
    q.sh = n->ia[0], q.sw = n->ia[1], q.ph = n->ia[2], q.pw = n->ia[3];
    q.Ho = ys.d[2], q.Wo = ys.d[3], q.P = q.Ho * q.Wo;
    q.Kc = q.Cg * q.kh * q.kw;
    return q;
}

/* Output columns ox whose input column ox*s - p + j lies in [0, W): [*lo, *hi). */
static void valid_cols(int64_t W, int64_t Wo, int64_t s, int64_t p, int64_t j, int64_t *lo, int64_t *hi) {
    int64_t a = p - j; /* ox*s >= a */
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t b = W - 1 + p - j; /* ox*s <= b */
    *hi = b < 0 ? 0 : b / s + 1;
    if (*hi > Wo) *hi = Wo;
    if (*lo > *hi) *lo = *hi;
}

/* ---- the im2col path ---- */

typedef struct {
    const conv_geom *q;
    const float *x, *w, *gy;
    float *out;
    float *col, *y; /* col [Kc, nb*P], y [Og, nb*P] (Y, gyP) */
    int64_t n0, nb, gi;
} chunk_job;

/* Planes (nl, c): image n0+nl, input channel gi*Cg + c, unfolded into the
 * kH*kW rows of col that read it (one per tap (i, j)). */
static void im2col_planes(void *arg, int64_t lo, int64_t hi) {
    const chunk_job *j = arg;
    const conv_geom *q = j->q;
    int64_t ld = j->nb * q->P;
    for (int64_t t = lo; t < hi; t++) {
        int64_t nl = t / q->Cg, c = t % q->Cg;
        const float *xp = j->x + ((j->n0 + nl) * q->C + j->gi * q->Cg + c) * q->H * q->W;
        for (int64_t jj = 0; jj < q->kw; jj++) {
            int64_t lo_x, hi_x;
            valid_cols(q->W, q->Wo, q->sw, q->pw, jj, &lo_x, &hi_x);
            for (int64_t i = 0; i < q->kh; i++) {
                float *d = j->col + ((c * q->kh + i) * q->kw + jj) * ld + nl * q->P;
                for (int64_t oy = 0; oy < q->Ho; oy++, d += q->Wo) {
                    int64_t iy = oy * q->sh - q->ph + i;
                    if (iy < 0 || iy >= q->H) {
                        for (int64_t ox = 0; ox < q->Wo; ox++) d[ox] = 0.0f;
                        continue;
                    }
                    const float *row = xp + iy * q->W + jj - q->pw;
                    for (int64_t ox = 0; ox < lo_x; ox++) d[ox] = 0.0f;
                    if (q->sw == 1)
                        for (int64_t ox = lo_x; ox < hi_x; ox++) d[ox] = row[ox];
                    else
                        for (int64_t ox = lo_x; ox < hi_x; ox++) d[ox] = row[ox * q->sw];
                    for (int64_t ox = hi_x; ox < q->Wo; ox++) d[ox] = 0.0f;
                }
            }
        }
    }
}

/* Rows (nl, o): Y[o, nl*P ..] -> out[n0+nl, gi*Og + o, ..] */
static void scatter_rows(void *arg, int64_t lo, int64_t hi) {
    const chunk_job *j = arg;
    const conv_geom *q = j->q;
    for (int64_t t = lo; t < hi; t++) {
        int64_t nl = t / q->Og, o = t % q->Og;
        memcpy(j->out + ((j->n0 + nl) * q->O + j->gi * q->Og + o) * q->P, j->y + o * j->nb * q->P + nl * q->P,
               sizeof(float) * (size_t)q->P);
    }
}

/* Rows (nl, o): gy[n0+nl, gi*Og + o, ..] -> gyP[o, nl*P ..] */
static void gather_rows(void *arg, int64_t lo, int64_t hi) {
    const chunk_job *j = arg;
    const conv_geom *q = j->q;
    for (int64_t t = lo; t < hi; t++) {
        int64_t nl = t / q->Og, o = t % q->Og;
        memcpy(j->y + o * j->nb * q->P + nl * q->P, j->gy + ((j->n0 + nl) * q->O + j->gi * q->Og + o) * q->P,
               sizeof(float) * (size_t)q->P);
    }
}

/* Planes (nl, c) of dx: zeroed, then every tap of dcol added in (i, j, oy, ox) order. */
static void col2im_planes(void *arg, int64_t lo, int64_t hi) {
    const chunk_job *j = arg;
    const conv_geom *q = j->q;
    int64_t ld = j->nb * q->P;
    for (int64_t t = lo; t < hi; t++) {
        int64_t nl = t / q->Cg, c = t % q->Cg;
        float *dx = j->out + ((j->n0 + nl) * q->C + j->gi * q->Cg + c) * q->H * q->W;
        memset(dx, 0, sizeof(float) * (size_t)(q->H * q->W));
        for (int64_t i = 0; i < q->kh; i++) {
            for (int64_t jj = 0; jj < q->kw; jj++) {
                const float *s = j->col + ((c * q->kh + i) * q->kw + jj) * ld + nl * q->P;
                int64_t lo_x, hi_x;
                valid_cols(q->W, q->Wo, q->sw, q->pw, jj, &lo_x, &hi_x);
                for (int64_t oy = 0; oy < q->Ho; oy++) {
                    int64_t iy = oy * q->sh - q->ph + i;
                    if (iy < 0 || iy >= q->H) continue;
                    float *row = dx + iy * q->W + jj - q->pw;
                    const float *sr = s + oy * q->Wo;
                    for (int64_t ox = lo_x; ox < hi_x; ox++) row[ox * q->sw] += sr[ox];
                }
            }
        }
    }
}

/* Images per chunk: as many as fit the scratch budget, at least one. */
static int64_t chunk_images(const conv_geom *q, int64_t *col_floats) {
    int64_t per = (q->Kc + q->Og) * q->P;
    int64_t nb = cpu_conv_scratch_floats / (per > 0 ? per : 1);
    if (nb < 1) nb = 1;
    if (nb > q->N) nb = q->N;
    *col_floats = (q->Kc * nb * q->P + 15) & ~(int64_t)15;
    return nb;
}

static int64_t grain_rows(int64_t row_len) { return 1 + GRAIN / (row_len > 0 ? row_len : 1); }

/* Returns false when the scratch cannot be had (the caller runs the direct loops). */
static bool conv_fwd_gemm(cpu_ctx *c, const conv_geom *q, const float *x, const float *w, float *out) {
    int64_t col_n, nb = chunk_images(q, &col_n);
    float *buf = cpu_scratch(c, sizeof(float) * (size_t)(col_n + q->Og * nb * q->P + q->Og * q->Kc + 16));
    if (!buf) return false;
    chunk_job j = {q, x, w, NULL, out, buf, buf + col_n, 0, 0, 0};
    for (j.n0 = 0; j.n0 < q->N; j.n0 += j.nb) {
        j.nb = q->N - j.n0 < nb ? q->N - j.n0 : nb;
        for (j.gi = 0; j.gi < q->G; j.gi++) {
            cpu_parallel(c, j.nb * q->Cg, grain_rows(q->P * q->kh * q->kw), im2col_planes, &j);
            /* One image: Y's rows are out's rows, so the product lands in place. */
            bool direct_out = j.nb == 1;
            tg_gemm_args ga = {.batch = 1, .M = q->Og, .N = j.nb * q->P, .K = q->Kc, .A = w + j.gi * q->Og * q->Kc,
                               .B = j.col, .C = direct_out ? out + (j.n0 * q->O + j.gi * q->Og) * q->P : j.y,
                               .lda = q->Kc, .ldb = j.nb * q->P, .ldc = j.nb * q->P};
            tg_gemm(c->pool, &ga);
            if (!direct_out) cpu_parallel(c, j.nb * q->Og, grain_rows(q->P), scatter_rows, &j);
        }
    }
    return true;
}

static bool conv_dx_gemm(cpu_ctx *c, const conv_geom *q, const float *gy, const float *w, float *dx) {
    int64_t col_n, nb = chunk_images(q, &col_n);
    float *buf = cpu_scratch(c, sizeof(float) * (size_t)(col_n + q->Og * nb * q->P + q->Og * q->Kc + 16));
    if (!buf) return false;
    chunk_job j = {q, NULL, w, gy, dx, buf, buf + col_n, 0, 0, 0};
    for (j.n0 = 0; j.n0 < q->N; j.n0 += j.nb) {
        j.nb = q->N - j.n0 < nb ? q->N - j.n0 : nb;
        for (j.gi = 0; j.gi < q->G; j.gi++) {
            const float *b = gy + (j.n0 * q->O + j.gi * q->Og) * q->P; /* one image: gy's rows as they lie */
            if (j.nb > 1) {
                cpu_parallel(c, j.nb * q->Og, grain_rows(q->P), gather_rows, &j);
                b = j.y;
            }
            tg_gemm_args ga = {.batch = 1, .M = q->Kc, .N = j.nb * q->P, .K = q->Og, .A = w + j.gi * q->Og * q->Kc,
                               .B = b, .C = j.col, .lda = q->Kc, .ldb = j.nb * q->P, .ldc = j.nb * q->P,
                               .ta = true};
            tg_gemm(c->pool, &ga);
            cpu_parallel(c, j.nb * q->Cg, grain_rows(q->H * q->W * q->kh * q->kw), col2im_planes, &j);
        }
    }
    return true;
}

static bool conv_dw_gemm(cpu_ctx *c, const conv_geom *q, const float *x, const float *gy, float *dw) {
    int64_t col_n, nb = chunk_images(q, &col_n);
    float *buf = cpu_scratch(c, sizeof(float) * (size_t)(col_n + q->Og * nb * q->P + q->Og * q->Kc + 16));
    if (!buf) return false;
    float *tmp = buf + col_n + q->Og * nb * q->P; /* a later chunk's product, added into dw */
    chunk_job j = {q, x, NULL, gy, NULL, buf, buf + col_n, 0, 0, 0};
    for (j.n0 = 0; j.n0 < q->N; j.n0 += j.nb) {
        j.nb = q->N - j.n0 < nb ? q->N - j.n0 : nb;
        for (j.gi = 0; j.gi < q->G; j.gi++) {
            cpu_parallel(c, j.nb * q->Cg, grain_rows(q->P * q->kh * q->kw), im2col_planes, &j);
            const float *a = gy + (j.n0 * q->O + j.gi * q->Og) * q->P;
            if (j.nb > 1) {
                cpu_parallel(c, j.nb * q->Og, grain_rows(q->P), gather_rows, &j);
                a = j.y;
            }
            float *dst = dw + j.gi * q->Og * q->Kc;
            tg_gemm_args ga = {.batch = 1, .M = q->Og, .N = q->Kc, .K = j.nb * q->P, .A = a, .B = j.col,
                               .C = j.n0 == 0 ? dst : tmp, .lda = j.nb * q->P, .ldb = j.nb * q->P, .ldc = q->Kc,
                               .tb = true};
            tg_gemm(c->pool, &ga);
            if (j.n0 > 0)
                for (int64_t e = 0; e < q->Og * q->Kc; e++) dst[e] += tmp[e];
        }
    }
    return true;
}

/* ---- direct loops over output planes ---- */

typedef struct {
    const conv_geom *q;
    const float *a, *b; /* forward: x, w; dx: gy, w; dw: x, gy */
    float *out;
} direct_job;

/* Planes (n, o) of y: sum over the group's channels and taps, in (c, i, j) order. */
static void fwd_planes(void *arg, int64_t lo, int64_t hi) {
    const direct_job *j = arg;
    const conv_geom *q = j->q;
    for (int64_t t = lo; t < hi; t++) {
        int64_t n = t / q->O, o = t % q->O, gi = o / q->Og;
        float *y = j->out + t * q->P;
        memset(y, 0, sizeof(float) * (size_t)q->P);
        for (int64_t c = 0; c < q->Cg; c++) {
            const float *xp = j->a + (n * q->C + gi * q->Cg + c) * q->H * q->W;
            const float *wp = j->b + (o * q->Cg + c) * q->kh * q->kw;
            for (int64_t i = 0; i < q->kh; i++) {
                for (int64_t jj = 0; jj < q->kw; jj++) {
                    float wv = wp[i * q->kw + jj];
                    int64_t lo_x, hi_x;
                    valid_cols(q->W, q->Wo, q->sw, q->pw, jj, &lo_x, &hi_x);
                    for (int64_t oy = 0; oy < q->Ho; oy++) {
                        int64_t iy = oy * q->sh - q->ph + i;
                        if (iy < 0 || iy >= q->H) continue;
                        const float *row = xp + iy * q->W + jj - q->pw;
                        float *yr = y + oy * q->Wo;
                        for (int64_t ox = lo_x; ox < hi_x; ox++) yr[ox] += wv * row[ox * q->sw];
                    }
                }
            }
        }
    }
}

/* Planes (n, ch) of dx: every output channel of the group and tap scattered in, in (o, i, j) order. */
static void dx_planes(void *arg, int64_t lo, int64_t hi) {
    const direct_job *j = arg;
    const conv_geom *q = j->q;
    for (int64_t t = lo; t < hi; t++) {
        int64_t n = t / q->C, ch = t % q->C, gi = ch / q->Cg, c = ch % q->Cg;
        float *dx = j->out + t * q->H * q->W;
        memset(dx, 0, sizeof(float) * (size_t)(q->H * q->W));
        for (int64_t o = gi * q->Og; o < (gi + 1) * q->Og; o++) {
            const float *gp = j->a + (n * q->O + o) * q->P;
            const float *wp = j->b + (o * q->Cg + c) * q->kh * q->kw;
            for (int64_t i = 0; i < q->kh; i++) {
                for (int64_t jj = 0; jj < q->kw; jj++) {
                    float wv = wp[i * q->kw + jj];
                    int64_t lo_x, hi_x;
                    valid_cols(q->W, q->Wo, q->sw, q->pw, jj, &lo_x, &hi_x);
                    for (int64_t oy = 0; oy < q->Ho; oy++) {
                        int64_t iy = oy * q->sh - q->ph + i;
                        if (iy < 0 || iy >= q->H) continue;
                        float *row = dx + iy * q->W + jj - q->pw;
                        const float *gr = gp + oy * q->Wo;
                        for (int64_t ox = lo_x; ox < hi_x; ox++) row[ox * q->sw] += wv * gr[ox];
                    }
                }
            }
        }
    }
}

/* Weight rows (o, c): each tap sums gy * x over images and output pixels in
 * order, in double (the sums run over N*Ho*Wo terms). */
static void dw_rows(void *arg, int64_t lo, int64_t hi) {
    const direct_job *j = arg;
    const conv_geom *q = j->q;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o = t / q->Cg, c = t % q->Cg, gi = o / q->Og;
        for (int64_t i = 0; i < q->kh; i++) {
            for (int64_t jj = 0; jj < q->kw; jj++) {
                double acc = 0;
                int64_t lo_x, hi_x;
                valid_cols(q->W, q->Wo, q->sw, q->pw, jj, &lo_x, &hi_x);
                for (int64_t n = 0; n < q->N; n++) {
                    const float *xp = j->a + (n * q->C + gi * q->Cg + c) * q->H * q->W;
                    const float *gp = j->b + (n * q->O + o) * q->P;
                    for (int64_t oy = 0; oy < q->Ho; oy++) {
                        int64_t iy = oy * q->sh - q->ph + i;
                        if (iy < 0 || iy >= q->H) continue;
                        const float *row = xp + iy * q->W + jj - q->pw;
                        const float *gr = gp + oy * q->Wo;
                        for (int64_t ox = lo_x; ox < hi_x; ox++) acc += (double)gr[ox] * row[ox * q->sw];
                    }
                }
                j->out[t * q->kh * q->kw + i * q->kw + jj] = (float)acc;
            }
        }
    }
}

/* Depthwise-like convs (one input channel per group, several groups) would
 * run one thin GEMM per channel; direct loops over planes are cheaper. */
static bool use_direct(const conv_geom *q) { return cpu_conv_force_direct || (q->Cg == 1 && q->G > 1); }

/* x [N, C, H, W], w [O, C/G, kH, kW] -> y [N, O, Ho, Wo] */
TG_CPU_KERNEL(cpu_conv2d) {
    const tg_node *n = ir_node(g, id);
    conv_geom q = geom(n, ir_node(g, n->in[0])->shape, ir_node(g, n->in[1])->shape, n->shape);
    if (!use_direct(&q) && conv_fwd_gemm(c, &q, in[0], in[1], out)) return;
    direct_job j = {&q, in[0], in[1], out};
    cpu_parallel(c, q.N * q.O, grain_rows(q.P * q.Kc), fwd_planes, &j);
}

/* gy [N, O, Ho, Wo], w [O, C/G, kH, kW] -> dx [N, C, H, W] */
TG_CPU_KERNEL(cpu_conv2d_grad_input) {
    const tg_node *n = ir_node(g, id);
    conv_geom q = geom(n, n->shape, ir_node(g, n->in[1])->shape, ir_node(g, n->in[0])->shape);
    if (!use_direct(&q) && conv_dx_gemm(c, &q, in[0], in[1], out)) return;
    direct_job j = {&q, in[0], in[1], out};
    cpu_parallel(c, q.N * q.C, grain_rows(q.P * q.Og * q.kh * q.kw), dx_planes, &j);
}

/* x [N, C, H, W], gy [N, O, Ho, Wo] -> dw [O, C/G, kH, kW] */
TG_CPU_KERNEL(cpu_conv2d_grad_weight) {
    const tg_node *n = ir_node(g, id);
    conv_geom q = geom(n, ir_node(g, n->in[0])->shape, n->shape, ir_node(g, n->in[1])->shape);
    if (!use_direct(&q) && conv_dw_gemm(c, &q, in[0], in[1], out)) return;
    direct_job j = {&q, in[0], in[1], out};
    cpu_parallel(c, q.O * q.Cg, grain_rows(q.N * q.P * q.kh * q.kw), dw_rows, &j);
}

/* ---- max pooling ----
 * Each window is clipped to the plane first (padding is never a candidate;
 * padding <= kernel/2 leaves a real element in every window), then scanned
 * without bounds tests. The backward gets the forward's output and sends
 * each window's gradient to the first element in row-major window order
 * that equals it (or is NaN when the max is NaN): the element the
 * forward's strict '>' kept, so ties go to the first element. Which element
 * wins is data-dependent, so both scans use selects and integer masks, not
 * branches (which mispredict about half the time on real data). */

typedef struct {
    int64_t H, W, Ho, Wo, kh, kw, sh, sw, ph, pw;
    const float *x, *y, *gy;
    float *out;
} pool_job;

/* Window (oy, ox) clipped: rows [*i0, *i1), columns [*c0, *c1) of the plane. */
static inline void pool_window(const pool_job *j, int64_t oy, int64_t ox, int64_t *i0, int64_t *i1, int64_t *c0,
                               int64_t *c1) {
    int64_t y0 = oy * j->sh - j->ph, x0 = ox * j->sw - j->pw;
    *i0 = y0 < 0 ? 0 : y0;
    *i1 = y0 + j->kh > j->H ? j->H : y0 + j->kh;
    *c0 = x0 < 0 ? 0 : x0;
    *c1 = x0 + j->kw > j->W ? j->W : x0 + j->kw;
}

static void pool_planes(void *arg, int64_t lo, int64_t hi) {
    const pool_job *j = arg;
    for (int64_t t = lo; t < hi; t++) {
        const float *xp = j->x + t * j->H * j->W;
        float *y = j->out + t * j->Ho * j->Wo;
        for (int64_t oy = 0; oy < j->Ho; oy++)
            for (int64_t ox = 0; ox < j->Wo; ox++) {
                int64_t i0, i1, c0, c1;
                pool_window(j, oy, ox, &i0, &i1, &c0, &c1);
                float m = -INFINITY;
                int nan = 0;
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t c = c0; c < c1; c++) {
                        float v = xp[i * j->W + c];
                        m = v > m ? v : m; /* maxss */
                        nan |= v != v;
                    }
                y[oy * j->Wo + ox] = nan ? NAN : m;
            }
    }
}

static void pool_grad_planes(void *arg, int64_t lo, int64_t hi) {
    const pool_job *j = arg;
    for (int64_t t = lo; t < hi; t++) {
        const float *xp = j->x + t * j->H * j->W, *y = j->y + t * j->Ho * j->Wo, *gy = j->gy + t * j->Ho * j->Wo;
        float *dx = j->out + t * j->H * j->W;
        memset(dx, 0, sizeof(float) * (size_t)(j->H * j->W));
        for (int64_t oy = 0; oy < j->Ho; oy++)
            for (int64_t ox = 0; ox < j->Wo; ox++) {
                int64_t i0, i1, c0, c1;
                pool_window(j, oy, ox, &i0, &i1, &c0, &c1);
                float m = y[oy * j->Wo + ox];
                int mnan = m != m;
                int64_t idx = i0 * j->W + c0, found = 0; /* found: 0 or all ones */
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t c = c0; c < c1; c++) {
                        float v = xp[i * j->W + c];
                        int64_t hit = -(int64_t)((v == m) | ((v != v) & mnan));
                        int64_t take = hit & ~found;
                        idx = (idx & ~take) | ((i * j->W + c) & take);
                        found |= hit;
                    }
                dx[idx] += gy[oy * j->Wo + ox];
            }
    }
}

static pool_job pool_setup(const tg_node *n, tg_shape xs, tg_shape ys, void *const *in, void *out) {
    pool_job j = {xs.d[2], xs.d[3], ys.d[2], ys.d[3], n->ia[5], n->ia[6], n->ia[0], n->ia[1], n->ia[2], n->ia[3],
                  in[0], NULL, NULL, out};
    if (n->op == TG_OP_MAX_POOL2D_GRAD) j.y = in[1], j.gy = in[2];
    return j;
}

/* x [N, C, H, W] -> y [N, C, Ho, Wo] */
TG_CPU_KERNEL(cpu_max_pool2d) {
    const tg_node *n = ir_node(g, id);
    tg_shape xs = ir_node(g, n->in[0])->shape;
    pool_job j = pool_setup(n, xs, n->shape, in, out);
    cpu_parallel(c, xs.d[0] * xs.d[1], grain_rows(j.Ho * j.Wo * j.kh * j.kw), pool_planes, &j);
}

/* x [N, C, H, W], y [N, C, Ho, Wo] (the forward's output), gy [N, C, Ho, Wo] -> dx [N, C, H, W] */
TG_CPU_KERNEL(cpu_max_pool2d_grad) {
    const tg_node *n = ir_node(g, id);
    tg_shape ys = ir_node(g, n->in[1])->shape;
    pool_job j = pool_setup(n, n->shape, ys, in, out);
    cpu_parallel(c, ys.d[0] * ys.d[1], grain_rows(j.Ho * j.Wo * j.kh * j.kw), pool_grad_planes, &j);
}

/* ---- nearest upsampling ---- */

typedef struct {
    int64_t H, W, f; /* the small side */
    const float *src;
    float *dst;
} up_job;

static void up_planes(void *arg, int64_t lo, int64_t hi) {
    const up_job *j = arg;
    int64_t Wf = j->W * j->f;
    for (int64_t t = lo; t < hi; t++) {
        const float *s = j->src + t * j->H * j->W;
        float *d = j->dst + t * j->H * j->W * j->f * j->f;
        for (int64_t y = 0; y < j->H; y++) {
            float *row = d + y * j->f * Wf;
            for (int64_t x = 0; x < j->W; x++)
                for (int64_t b = 0; b < j->f; b++) row[x * j->f + b] = s[y * j->W + x];
            for (int64_t a = 1; a < j->f; a++) memcpy(row + a * Wf, row, sizeof(float) * (size_t)Wf);
        }
    }
}

/* Each f x f block of the gradient summed in row-major order. */
static void up_grad_planes(void *arg, int64_t lo, int64_t hi) {
    const up_job *j = arg;
    int64_t Wf = j->W * j->f;
    for (int64_t t = lo; t < hi; t++) {
        const float *s = j->src + t * j->H * j->W * j->f * j->f;
        float *d = j->dst + t * j->H * j->W;
        for (int64_t y = 0; y < j->H; y++)
            for (int64_t x = 0; x < j->W; x++) {
                float acc = 0;
                for (int64_t a = 0; a < j->f; a++)
                    for (int64_t b = 0; b < j->f; b++) acc += s[(y * j->f + a) * Wf + x * j->f + b];
                d[y * j->W + x] = acc;
            }
    }
}

/* x [N, C, H, W] -> y [N, C, H*f, W*f] */
TG_CPU_KERNEL(cpu_upsample2d) {
    const tg_node *n = ir_node(g, id);
    tg_shape xs = ir_node(g, n->in[0])->shape;
    up_job j = {xs.d[2], xs.d[3], n->ia[0], in[0], out};
    cpu_parallel(c, xs.d[0] * xs.d[1], grain_rows(ir_numel(n) / (xs.d[0] * xs.d[1] + 1)), up_planes, &j);
}

/* gy [N, C, H*f, W*f] -> dx [N, C, H, W] */
TG_CPU_KERNEL(cpu_upsample2d_grad) {
    const tg_node *n = ir_node(g, id);
    up_job j = {n->shape.d[2], n->shape.d[3], n->ia[0], in[0], out};
    int64_t planes = n->shape.d[0] * n->shape.d[1];
    cpu_parallel(c, planes, grain_rows(j.H * j.W * j.f * j.f), up_grad_planes, &j);
}
