/* CPU kernels of the convolution family, all NCHW f32.
 *
 * conv2d and its two backward ops are GEMMs on im2col panels. A chunk of
 * `nb` images is unfolded, one group at a time, into
 *     col [Kc, nb*P]    Kc = C/G * kH * kW rows, column nl*P + p = image nl, output pixel p
 * and then
 *     forward       Y  [Og, nb*P] = W_g [Og, Kc] @ col            (Y scattered into out)
 *     input grad    dcol [Kc, nb*P] = W_g^T @ gyP [Og, nb*P]      (dcol folded back: col2im)
 *     weight grad   dW_g [Og, Kc] += gyP @ col^T                  (contracts over every pixel of the chunk)
 * where gyP is gy's group rows gathered image after image. A chunk runs
 * whole on one thread (unfold, tg_gemm_serial, fold back), and the threads
 * share out the chunks (see conv_run). The chunk size depends on the
 * shapes only (a fixed per-thread budget), never on the thread count, so
 * results are the same for any TG_THREADS. The weight gradient never has a
 * per-image intermediate: a fixed number of blocks of images (at most
 * DW_BLOCKS) each sum their chunks in image order, and dW adds the blocks
 * in order.
 *
 * Unfolding (im2col) and folding back (col2im) go through index tables
 * built once per call, shared by every plane, 16 lanes at a time (AVX-512
 * gathers when the CPU has them); planes too large for a table go row by
 * row. A bias rides along in the forward, added as output planes are
 * written.
 *
 * Depthwise convolutions (one input channel per group) would need one thin
 * GEMM per channel; they run direct loops over output planes instead (also
 * the fallback when the scratch buffer cannot grow). */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "vec.h"

#define GRAIN 16384 /* elements per parallel task */
static int64_t grain_rows(int64_t row_len) { return 1 + GRAIN / (row_len > 0 ? row_len : 1); }

/* The panels' budget per chunk (128 KB: col and Y stay in the core's L2,
 * and the digits CNN's batch of 64 makes four to six chunks, enough to keep
 * two threads even; 1 MB chunks left one thread idle). Tests shrink it to
 * force many chunks. */
int64_t tg_cpu_conv_scratch_floats = (int64_t)1 << 15;

void *tg_cpu_scratch(cpu_ctx *c, size_t bytes) {
    if (c->scratch_bytes < bytes) {
        tg_afree(c->scratch);
        c->scratch = tg_aalloc(bytes);
        c->scratch_bytes = c->scratch ? bytes : 0;
    }
    return c->scratch;
}

/* Tests flip this to run the direct loops on every shape. */
bool tg_cpu_conv_force_direct = false;

typedef struct {
    int64_t N, C, H, W, O, G, Cg, Og, kh, kw, sh, sw, ph, pw, Ho, Wo, P, Kc;
} conv_geom;

static conv_geom geom(const tg_node *n, tg_shape xs, tg_shape ws, tg_shape ys) {
    conv_geom q;
    q.N = xs.d[0], q.C = xs.d[1], q.H = xs.d[2], q.W = xs.d[3];
    q.O = ws.d[0], q.kh = ws.d[2], q.kw = ws.d[3];
    q.G = n->at.conv.groups, q.Cg = q.C / q.G, q.Og = q.O / q.G;
    q.sh = n->at.conv.stride_h, q.sw = n->at.conv.stride_w, q.ph = n->at.conv.pad_h, q.pw = n->at.conv.pad_w;
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

/* ---- row kernels: plain C, and AVX-512 (masked loads and stores) picked at
 * run time. Both do the same float operations on every element, so which one
 * runs never changes a bit of the results. ---- */

typedef struct {
    /* d[ox] = row[ox * s] for ox in [lo, hi), 0 for the rest of [0, n) */
    void (*gather_row)(float *d, const float *row, int64_t s, int64_t lo, int64_t hi, int64_t n);
    /* dst[ox * s] += src[ox] for ox in [lo, hi) */
    void (*add_row)(float *dst, const float *src, int64_t s, int64_t lo, int64_t hi);
    /* Max pooling through an index table idx [taps][n] (-1: padding): y[p] is
     * NaN if a window element is, else the running v > m ? v : m over its
     * elements in tap order, for p < n */
    void (*pool)(float *y, const float *x, const int32_t *idx, int64_t taps, int64_t n);
    /* its backward for windows that do not overlap, into a zeroed dx:
     * dx[idx[k][p]] = 0 + gy[p] for the first tap k whose element equals y[p]
     * (is NaN when y[p] is) */
    void (*pool_grad)(float *dx, const float *x, const float *y, const float *gy, const int32_t *idx, int64_t taps,
                      int64_t n);
    /* d[i] = s[i] + b for i < n (d may be s) */
    void (*add_scalar)(float *d, const float *s, float b, int64_t n);
    /* d[r * n + p] = src[r * stride + idx[p]], or 0 where idx[p] < 0, for
     * r < count, p < n; indices < m (one tap of im2col over `count` images) */
    void (*gather)(float *d, const float *src, int64_t stride, int64_t m, const int32_t *idx, int64_t n,
                   int64_t count);
    /* d[q] = sum over t < taps, in order from 0.0f, of src[t * ld + idx[t * n + q]]
     * (0 where that index < 0), for q < n; indices < m */
    void (*gather_sum)(float *d, const float *src, int64_t ld, int64_t m, const int32_t *idx, int64_t taps,
                       int64_t n);
} conv_rows;

static void gather_row_c(float *d, const float *row, int64_t s, int64_t lo, int64_t hi, int64_t n) {
    for (int64_t ox = 0; ox < lo; ox++) d[ox] = 0.0f;
    if (s == 1)
        for (int64_t ox = lo; ox < hi; ox++) d[ox] = row[ox];
    else
        for (int64_t ox = lo; ox < hi; ox++) d[ox] = row[ox * s];
    for (int64_t ox = hi; ox < n; ox++) d[ox] = 0.0f;
}

static void add_row_c(float *dst, const float *src, int64_t s, int64_t lo, int64_t hi) {
    for (int64_t ox = lo; ox < hi; ox++) dst[ox * s] += src[ox];
}

static void pool_c(float *y, const float *x, const int32_t *idx, int64_t taps, int64_t n) {
    for (int64_t p = 0; p < n; p++) {
        float m = -INFINITY;
        int nan = 0;
        for (int64_t k = 0; k < taps; k++) {
            int32_t i = idx[k * n + p];
            float v = i < 0 ? -INFINITY : x[i]; /* padding never wins */
            m = v > m ? v : m;
            nan |= v != v;
        }
        y[p] = nan ? NAN : m;
    }
}

static void pool_grad_c(float *dx, const float *x, const float *y, const float *gy, const int32_t *idx, int64_t taps,
                        int64_t n) {
    for (int64_t p = 0; p < n; p++) {
        float m = y[p];
        int mnan = m != m, found = 0;
        int32_t at = -1;
        for (int64_t k = 0; k < taps; k++) { /* masks, not branches: the winner is data-dependent */
            int32_t i = idx[k * n + p];
            float v = x[i < 0 ? 0 : i];
            int hit = (i >= 0) & ((v == m) | ((v != v) & mnan)) & !found;
            found |= hit;
            at = hit ? i : at;
        }
        if (at >= 0) dx[at] = 0.0f + gy[p];
    }
}

static void add_scalar_c(float *d, const float *s, float b, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = s[i] + b;
}

static void gather_c(float *d, const float *src, int64_t stride, int64_t m, const int32_t *idx, int64_t n,
                     int64_t count) {
    (void)m;
    for (int64_t r = 0; r < count; r++, d += n, src += stride)
        for (int64_t p = 0; p < n; p++) {
            float v = src[idx[p] < 0 ? 0 : idx[p]];
            d[p] = idx[p] < 0 ? 0.0f : v;
        }
}

static void gather_sum_c(float *d, const float *src, int64_t ld, int64_t m, const int32_t *idx, int64_t taps,
                         int64_t n) {
    (void)m;
    for (int64_t q = 0; q < n; q++) {
        float acc = 0.0f;
        for (int64_t t = 0; t < taps; t++) {
            int32_t i = idx[t * n + q];
            float v = src[t * ld + (i < 0 ? 0 : i)];
            acc += i < 0 ? 0.0f : v;
        }
        d[q] = acc;
    }
}

static const conv_rows rows_c = {gather_row_c, add_row_c, pool_c, pool_grad_c, add_scalar_c, gather_c, gather_sum_c};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

static inline __mmask16 lanes(int64_t from, int64_t to) { /* bits [from, to) of 16, clipped */
    if (from < 0) from = 0;
    if (to > 16) to = 16;
    return to <= from ? 0 : (__mmask16)(((1u << to) - 1) & ~((1u << from) - 1));
}

AVX512 static void gather_row_512(float *d, const float *row, int64_t s, int64_t lo, int64_t hi, int64_t n) {
    if (s != 1) {
        gather_row_c(d, row, s, lo, hi, n);
        return;
    }
    /* Lanes outside [lo, hi) are neither read nor faulted on, and load as 0. */
    for (int64_t o = 0; o < n; o += 16)
        _mm512_mask_storeu_ps(d + o, lanes(0, n - o), _mm512_maskz_loadu_ps(lanes(lo - o, hi - o), row + o));
}

AVX512 static void add_row_512(float *dst, const float *src, int64_t s, int64_t lo, int64_t hi) {
    if (s != 1) {
        add_row_c(dst, src, s, lo, hi);
        return;
    }
    for (int64_t o = lo; o < hi; o += 16) {
        __mmask16 k = lanes(0, hi - o);
        _mm512_mask_storeu_ps(dst + o, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, dst + o), _mm512_maskz_loadu_ps(k, src + o)));
    }
}

AVX512 static void pool_512(float *y, const float *x, const int32_t *idx, int64_t taps, int64_t n) {
    for (int64_t p = 0; p < n; p += 16) {
        __mmask16 k = lanes(0, n - p), nan = 0;
        __m512 m = _mm512_set1_ps(-INFINITY);
        for (int64_t t = 0; t < taps; t++) {
            __m512i ix = _mm512_maskz_loadu_epi32(k, idx + t * n + p);
            __mmask16 valid = k & _mm512_cmpge_epi32_mask(ix, _mm512_setzero_si512());
            __m512 v = _mm512_mask_i32gather_ps(_mm512_set1_ps(-INFINITY), valid, ix, x, 4);
            m = _mm512_max_ps(v, m); /* v > m ? v : m, the scalar step exactly */
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        }
        _mm512_mask_storeu_ps(y + p, k, _mm512_mask_mov_ps(m, nan, _mm512_set1_ps(NAN)));
    }
}

AVX512 static void pool_grad_512(float *dx, const float *x, const float *y, const float *gy, const int32_t *idx,
                                 int64_t taps, int64_t n) {
    for (int64_t p = 0; p < n; p += 16) {
        __mmask16 k = lanes(0, n - p);
        __m512 m = _mm512_maskz_loadu_ps(k, y + p);
        __m512 g = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, gy + p));
        __mmask16 mnan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q), found = 0;
        for (int64_t t = 0; t < taps && found != k; t++) {
            __m512i ix = _mm512_maskz_loadu_epi32(k, idx + t * n + p);
            __mmask16 valid = k & ~found & _mm512_cmpge_epi32_mask(ix, _mm512_setzero_si512());
            __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, ix, x, 4);
            __mmask16 hit = valid & (_mm512_cmp_ps_mask(v, m, _CMP_EQ_OQ) | (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & mnan));
            _mm512_mask_i32scatter_ps(dx, hit, ix, g, 4); /* windows do not overlap: no two lanes share an index */
            found |= hit;
        }
    }
}

AVX512 static void add_scalar_512(float *d, const float *s, float b, int64_t n) {
    __m512 bv = _mm512_set1_ps(b);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes(0, n - i);
        _mm512_mask_storeu_ps(d + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, s + i), bv));
    }
}

/* A source of at most 16 floats (a 4x4 plane, a short col row) is loaded
 * whole and permuted: a fraction of a gather's cost. */
AVX512 static void gather_512(float *d, const float *src, int64_t stride, int64_t m, const int32_t *idx, int64_t n,
                              int64_t count) {
    for (int64_t r = 0; r < count; r++, d += n, src += stride) {
        __m512 v = _mm512_maskz_loadu_ps(lanes(0, m), src);
        for (int64_t p = 0; p < n; p += 16) {
            __mmask16 k = lanes(0, n - p);
            __m512i ix = _mm512_maskz_loadu_epi32(k, idx + p);
            __mmask16 valid = k & _mm512_cmpge_epi32_mask(ix, _mm512_setzero_si512());
            __m512 out = m <= 16 ? _mm512_maskz_permutexvar_ps(valid, ix, v)
                                 : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, ix, src, 4);
            _mm512_mask_storeu_ps(d + p, k, out);
        }
    }
}

AVX512 static void gather_sum_512(float *d, const float *src, int64_t ld, int64_t m, const int32_t *idx,
                                  int64_t taps, int64_t n) {
    for (int64_t q = 0; q < n; q += 16) {
        __mmask16 k = lanes(0, n - q);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t t = 0; t < taps; t++) {
            __m512i ix = _mm512_maskz_loadu_epi32(k, idx + t * n + q);
            __mmask16 valid = k & _mm512_cmpge_epi32_mask(ix, _mm512_setzero_si512());
            __m512 v = m <= 16 ? _mm512_maskz_permutexvar_ps(valid, ix, _mm512_maskz_loadu_ps(lanes(0, m), src + t * ld))
                               : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, ix, src + t * ld, 4);
            acc = _mm512_add_ps(acc, v);
        }
        _mm512_mask_storeu_ps(d + q, k, acc);
    }
}

static const conv_rows rows_512 = {gather_row_512, add_row_512, pool_512,      pool_grad_512,
                                   add_scalar_512, gather_512,  gather_sum_512};

/* The same rows in 8 lanes for AVX2, masks as vectors: the same float
 * operations per element as the plain C, so the same bits. AVX2 has no
 * scatter: a pooling gradient stores its winners one by one. */
#define AVX2 __attribute__((target("avx2")))

AVX2 static inline __m256i lanes8(int64_t from, int64_t to) { /* lanes [from, to) of 8, clipped */
    from = from < 0 ? 0 : from > 8 ? 8 : from;
    to = to < 0 ? 0 : to > 8 ? 8 : to;
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32((int)from - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)to), i));
}

/* The lanes of k whose index is a real element (>= 0; padding is -1). */
AVX2 static inline __m256i valid8(__m256i k, __m256i ix) {
    return _mm256_and_si256(k, _mm256_cmpgt_epi32(ix, _mm256_set1_epi32(-1)));
}

AVX2 static void gather_row_avx2(float *d, const float *row, int64_t s, int64_t lo, int64_t hi, int64_t n) {
    if (s != 1) {
        gather_row_c(d, row, s, lo, hi, n);
        return;
    }
    for (int64_t o = 0; o < n; o += 8)
        _mm256_maskstore_ps(d + o, lanes8(0, n - o), _mm256_maskload_ps(row + o, lanes8(lo - o, hi - o)));
}

AVX2 static void add_row_avx2(float *dst, const float *src, int64_t s, int64_t lo, int64_t hi) {
    if (s != 1) {
        add_row_c(dst, src, s, lo, hi);
        return;
    }
    for (int64_t o = lo; o < hi; o += 8) {
        __m256i k = lanes8(0, hi - o);
        _mm256_maskstore_ps(dst + o, k, _mm256_add_ps(_mm256_maskload_ps(dst + o, k), _mm256_maskload_ps(src + o, k)));
    }
}

AVX2 static void pool_avx2(float *y, const float *x, const int32_t *idx, int64_t taps, int64_t n) {
    for (int64_t p = 0; p < n; p += 8) {
        __m256i k = lanes8(0, n - p);
        __m256 m = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
        for (int64_t t = 0; t < taps; t++) {
            __m256i ix = _mm256_maskload_epi32(idx + t * n + p, k);
            __m256 v = _mm256_mask_i32gather_ps(_mm256_set1_ps(-INFINITY), x, ix, _mm256_castsi256_ps(valid8(k, ix)), 4);
            m = _mm256_max_ps(v, m); /* v > m ? v : m, the scalar step exactly */
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        _mm256_maskstore_ps(y + p, k, _mm256_blendv_ps(m, _mm256_set1_ps(NAN), nan));
    }
}

AVX2 static void pool_grad_avx2(float *dx, const float *x, const float *y, const float *gy, const int32_t *idx,
                                int64_t taps, int64_t n) {
    for (int64_t p = 0; p < n; p += 8) {
        __m256i k = lanes8(0, n - p);
        __m256 m = _mm256_maskload_ps(y + p, k);
        __m256 g = _mm256_add_ps(_mm256_setzero_ps(), _mm256_maskload_ps(gy + p, k));
        __m256 mnan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
        int all = _mm256_movemask_ps(_mm256_castsi256_ps(k)), found = 0;
        for (int64_t t = 0; t < taps && found != all; t++) {
            __m256i ix = _mm256_maskload_epi32(idx + t * n + p, k), ok = valid8(k, ix);
            __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), x, ix, _mm256_castsi256_ps(ok), 4);
            __m256 eq = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_EQ_OQ), _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), mnan));
            int hit = _mm256_movemask_ps(_mm256_and_ps(eq, _mm256_castsi256_ps(ok))) & ~found;
            if (hit) {
                int32_t at[8];
                float gv[8];
                _mm256_storeu_si256((__m256i *)at, ix);
                _mm256_storeu_ps(gv, g);
                for (int l = 0; l < 8; l++)
                    if (hit >> l & 1) dx[at[l]] = gv[l];
            }
            found |= hit;
        }
    }
}

AVX2 static void add_scalar_avx2(float *d, const float *s, float b, int64_t n) {
    __m256 bv = _mm256_set1_ps(b);
    for (int64_t i = 0; i < n; i += 8) {
        __m256i k = lanes8(0, n - i);
        _mm256_maskstore_ps(d + i, k, _mm256_add_ps(_mm256_maskload_ps(s + i, k), bv));
    }
}

/* Lane l of v[ix[l]] for a source of at most 8 floats (loaded whole and
 * permuted), else gathered; 0 where the index is padding. */
AVX2 static inline __m256 pick8(const float *src, int64_t m, __m256i ix, __m256i ok) {
    __m256 v = m <= 8 ? _mm256_permutevar8x32_ps(_mm256_maskload_ps(src, lanes8(0, m)), ix)
                      : _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src, ix, _mm256_castsi256_ps(ok), 4);
    return _mm256_and_ps(v, _mm256_castsi256_ps(ok));
}

AVX2 static void gather_avx2(float *d, const float *src, int64_t stride, int64_t m, const int32_t *idx, int64_t n,
                             int64_t count) {
    for (int64_t r = 0; r < count; r++, d += n, src += stride)
        for (int64_t p = 0; p < n; p += 8) {
            __m256i k = lanes8(0, n - p), ix = _mm256_maskload_epi32(idx + p, k);
            _mm256_maskstore_ps(d + p, k, pick8(src, m, ix, valid8(k, ix)));
        }
}

AVX2 static void gather_sum_avx2(float *d, const float *src, int64_t ld, int64_t m, const int32_t *idx,
                                 int64_t taps, int64_t n) {
    for (int64_t q = 0; q < n; q += 8) {
        __m256i k = lanes8(0, n - q);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t t = 0; t < taps; t++) {
            __m256i ix = _mm256_maskload_epi32(idx + t * n + q, k);
            acc = _mm256_add_ps(acc, pick8(src + t * ld, m, ix, valid8(k, ix)));
        }
        _mm256_maskstore_ps(d + q, k, acc);
    }
}

static const conv_rows rows_avx2 = {gather_row_avx2, add_row_avx2, pool_avx2,      pool_grad_avx2,
                                    add_scalar_avx2, gather_avx2,  gather_sum_avx2};
#endif

/* Tests flip this to run the plain C rows on a machine with AVX-512 or AVX2. */
bool tg_cpu_conv_force_generic = false;

static const conv_rows *rows_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (!tg_cpu_conv_force_generic && tg_cpu_isa() == CPU_AVX512) return &rows_512;
    if (!tg_cpu_conv_force_generic && tg_cpu_isa() == CPU_AVX2) return &rows_avx2;
#endif
    return &rows_c;
}

/* ---- the im2col path ---- */

typedef struct {
    const conv_geom *q;
    const float *x, *w, *gy, *bias; /* bias [O] or NULL */
    float *out;
    float *col, *y; /* col [Kc, nb*P], y [Og, nb*P] (Y, gyP) */
    int64_t n0, nb, gi;
    const conv_rows *rows;
    /* Index tables, shared by every plane (NULL when too big: the row loops run):
     * unfold [kH*kW][P], which input element of the plane each col entry reads;
     * fold [kH*kW][H*W], which col entry of each tap lands on each input element. */
    const int32_t *unfold, *fold;
} chunk_job;

/* Rows r = (c, tap) of col through the unfold table, image after image:
 * each row is written front to back. (Going plane by plane wrote kH*kW lines
 * 4 KB apart per plane, and each line came back from L2 once per image.) */
static void im2col_table_rows(void *arg, int64_t lo, int64_t hi) {
    const chunk_job *j = arg;
    const conv_geom *q = j->q;
    int64_t kk = q->kh * q->kw, HW = q->H * q->W;
    for (int64_t r = lo; r < hi; r++) {
        int64_t c = r / kk, tap = r % kk;
        const float *xp = j->x + (j->n0 * q->C + j->gi * q->Cg + c) * HW;
        j->rows->gather(j->col + r * j->nb * q->P, xp, q->C * HW, HW, j->unfold + tap * q->P, q->P, j->nb);
    }
}

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
                    bool in = iy >= 0 && iy < q->H; /* a padding row: all zeros */
                    j->rows->gather_row(d, xp + (in ? iy * q->W : 0) + jj - q->pw, q->sw, in ? lo_x : 0, in ? hi_x : 0,
                                        q->Wo);
                }
            }
        }
    }
}

/* Rows (nl, o): Y[o, nl*P ..] (+ bias[gi*Og + o]) -> out[n0+nl, gi*Og + o, ..] */
static void scatter_rows(void *arg, int64_t lo, int64_t hi) {
    const chunk_job *j = arg;
    const conv_geom *q = j->q;
    for (int64_t t = lo; t < hi; t++) {
        int64_t nl = t / q->Og, o = t % q->Og;
        float *d = j->out + ((j->n0 + nl) * q->O + j->gi * q->Og + o) * q->P;
        const float *src = j->y + o * j->nb * q->P + nl * q->P;
        if (j->bias) j->rows->add_scalar(d, src, j->bias[j->gi * q->Og + o], q->P);
        else memcpy(d, src, sizeof(float) * (size_t)q->P);
    }
}

/* One image (the product landed in out): rows o of the group get their bias. */
static void bias_rows(void *arg, int64_t lo, int64_t hi) {
    const chunk_job *j = arg;
    const conv_geom *q = j->q;
    for (int64_t o = lo; o < hi; o++) {
        float *d = j->out + (j->n0 * q->O + j->gi * q->Og + o) * q->P;
        j->rows->add_scalar(d, d, j->bias[j->gi * q->Og + o], q->P);
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
        if (j->fold) {
            j->rows->gather_sum(dx, j->col + c * q->kh * q->kw * ld + nl * q->P, ld, q->P, j->fold, q->kh * q->kw,
                                q->H * q->W);
            continue;
        }
        memset(dx, 0, sizeof(float) * (size_t)(q->H * q->W));
        for (int64_t i = 0; i < q->kh; i++) {
            for (int64_t jj = 0; jj < q->kw; jj++) {
                const float *s = j->col + ((c * q->kh + i) * q->kw + jj) * ld + nl * q->P;
                int64_t lo_x, hi_x;
                valid_cols(q->W, q->Wo, q->sw, q->pw, jj, &lo_x, &hi_x);
                for (int64_t oy = 0; oy < q->Ho; oy++) {
                    int64_t iy = oy * q->sh - q->ph + i;
                    if (iy < 0 || iy >= q->H) continue;
                    j->rows->add_row(dx + iy * q->W + jj - q->pw, s + oy * q->Wo, q->sw, lo_x, hi_x);
                }
            }
        }
    }
}

/* Index-table entries at most (256 KB): beyond this (large planes) the row
 * loops run. Tests set 0 to run them on every shape. */
int64_t tg_cpu_conv_table_max = 65536;

/* Images per chunk: as many as fit the per-thread budget (at least one),
 * evened out so the chunks are the same size but for the last. */
static int64_t chunk_images(const conv_geom *q) {
    int64_t per = (q->Kc + q->Og) * q->P;
    int64_t nb = tg_cpu_conv_scratch_floats / (per > 0 ? per : 1);
    if (nb > q->N) nb = q->N;
    if (nb < 1) return 1; /* also for an empty batch: no chunks */
    int64_t chunks = (q->N + nb - 1) / nb;
    return (q->N + chunks - 1) / chunks;
}

/* The weight gradient's partial sums: at most this many [Kc, Og] blocks,
 * whatever the batch. */
#define DW_BLOCKS 8

/* One conv kernel call split by images over the pool: each task takes
 * whole chunks and runs unfold, product and fold-back on its own thread,
 * in its own slice of the scratch, so a chunk's panels never leave the
 * core that wrote them and the call has one barrier. (Splitting each phase
 * over the threads instead cost a barrier per phase and sent the panels
 * across cores, which cost what a second thread saved.)
 * Chunks depend on the shape alone and each runs the same serial product,
 * so results do not depend on the thread count. */
typedef struct {
    const conv_geom *q;
    const float *x, *w, *gy, *bias;
    float *out;
    const int32_t *unfold, *fold;
    float *buf;            /* per thread: col, y, tmp [Kc, Og], the product's packing */
    int64_t per_thread;    /* floats of each thread's slice */
    int64_t nb, chunks;    /* images per chunk; chunks, or (weight gradient) blocks of images */
    float *part;           /* weight gradient: the blocks' sums, [chunks][Kc * Og] */
    const conv_rows *rows;
} conv_run;

static int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* The chunk job of images [n0, n0 + nb) on thread `thread`'s slice. */
static chunk_job chunk_at(const conv_run *r, int thread, int64_t n0, int64_t nb, float **tmp, float **gbuf) {
    const conv_geom *q = r->q;
    float *b = r->buf + thread * r->per_thread;
    int64_t col_n = pad16(q->Kc * r->nb * q->P), y_n = pad16(q->Og * r->nb * q->P);
    chunk_job j = {q, r->x, r->w, r->gy, r->bias, r->out, b, b + col_n, n0, nb, 0, r->rows, r->unfold, r->fold};
    *tmp = b + col_n + y_n;
    *gbuf = *tmp + pad16(q->Kc * q->Og);
    return j;
}

static void unfold_chunk(const chunk_job *j) {
    const conv_geom *q = j->q;
    if (j->unfold) im2col_table_rows((void *)j, 0, q->Cg * q->kh * q->kw);
    else im2col_planes((void *)j, 0, j->nb * q->Cg);
}

/* Chunk `task`: y [nb, O, Ho, Wo] = conv(x [nb, C, H, W]) (+ bias), group by group. */
static void fwd_chunk(void *arg, int task, int thread) {
    const conv_run *r = arg;
    const conv_geom *q = r->q;
    int64_t n0 = task * r->nb, nb = q->N - n0 < r->nb ? q->N - n0 : r->nb;
    float *tmp, *gbuf;
    chunk_job j = chunk_at(r, thread, n0, nb, &tmp, &gbuf);
    for (j.gi = 0; j.gi < q->G; j.gi++) {
        unfold_chunk(&j);
        bool direct_out = nb == 1; /* one image: Y's rows are out's rows, the product lands in place */
        tg_gemm_args ga = {.batch = 1, .M = q->Og, .N = nb * q->P, .K = q->Kc, .A = r->w + j.gi * q->Og * q->Kc,
                           .B = j.col, .C = direct_out ? r->out + (n0 * q->O + j.gi * q->Og) * q->P : j.y,
                           .lda = q->Kc, .ldb = nb * q->P, .ldc = nb * q->P};
        tg_gemm_serial(&ga, gbuf);
        if (!direct_out) scatter_rows(&j, 0, nb * q->Og);
        else if (j.bias) bias_rows(&j, 0, q->Og);
    }
}

/* Chunk `task`: dx [nb, C, H, W] from gy [nb, O, Ho, Wo], group by group. */
static void dx_chunk(void *arg, int task, int thread) {
    const conv_run *r = arg;
    const conv_geom *q = r->q;
    int64_t n0 = task * r->nb, nb = q->N - n0 < r->nb ? q->N - n0 : r->nb;
    float *tmp, *gbuf;
    chunk_job j = chunk_at(r, thread, n0, nb, &tmp, &gbuf);
    for (j.gi = 0; j.gi < q->G; j.gi++) {
        const float *b = r->gy + (n0 * q->O + j.gi * q->Og) * q->P; /* one image: gy's rows as they lie */
        if (nb > 1) {
            gather_rows(&j, 0, nb * q->Og);
            b = j.y;
        }
        tg_gemm_args ga = {.batch = 1, .M = q->Kc, .N = nb * q->P, .K = q->Og, .A = r->w + j.gi * q->Og * q->Kc,
                           .B = b, .C = j.col, .lda = q->Kc, .ldb = nb * q->P, .ldc = nb * q->P, .ta = true};
        tg_gemm_serial(&ga, gbuf);
        col2im_planes(&j, 0, nb * q->Cg);
    }
}

/* Block `task` of images: part[task] [G][Kc, Og] = the sum over its chunks,
 * in image order, of col [Kc, K] @ gyP^T (K = the chunk's pixels). The
 * product with the long K as the streamed dimension and gyP read as B^T
 * runs markedly faster in the GEMM than gyP @ col^T. */
static void dw_block(void *arg, int task, int thread) {
    const conv_run *r = arg;
    const conv_geom *q = r->q;
    int64_t b0 = q->N * task / r->chunks, b1 = q->N * (task + 1) / r->chunks;
    int64_t sub = (b1 - b0 + r->nb - 1) / r->nb, nb = sub ? (b1 - b0 + sub - 1) / sub : 1;
    float *part = r->part + task * q->G * q->Kc * q->Og;
    for (int64_t n0 = b0; n0 < b1; n0 += nb) {
        float *tmp, *gbuf;
        chunk_job j = chunk_at(r, thread, n0, b1 - n0 < nb ? b1 - n0 : nb, &tmp, &gbuf);
        for (j.gi = 0; j.gi < q->G; j.gi++) {
            unfold_chunk(&j);
            const float *b = r->gy + (n0 * q->O + j.gi * q->Og) * q->P;
            if (j.nb > 1) {
                gather_rows(&j, 0, j.nb * q->Og);
                b = j.y;
            }
            float *dst = part + j.gi * q->Kc * q->Og;
            tg_gemm_args ga = {.batch = 1, .M = q->Kc, .N = q->Og, .K = j.nb * q->P, .A = j.col, .B = b,
                               .C = n0 == b0 ? dst : tmp, .lda = j.nb * q->P, .ldb = j.nb * q->P, .ldc = q->Og,
                               .tb = true};
            tg_gemm_serial(&ga, gbuf);
            for (int64_t i = 0; n0 > b0 && i < q->Kc * q->Og; i++) dst[i] += tmp[i];
        }
    }
}

/* Sets up r for a call: the index tables (shared, built here) and every
 * thread's slice, in c's scratch, sized for the largest chunk's product
 * `ga` (its pointers unset). False when the scratch cannot grow. */
static bool conv_setup(cpu_ctx *c, const conv_geom *q, bool fold, int64_t part_floats, const tg_gemm_args *ga,
                       conv_run *r) {
    int64_t kk = q->kh * q->kw, th = tg_pool_threads(c->pool);
    int64_t tab_n = pad16(fold ? kk * q->H * q->W : kk * q->P);
    if (tab_n > tg_cpu_conv_table_max) tab_n = 0;
    r->per_thread = pad16(q->Kc * r->nb * q->P) + pad16(q->Og * r->nb * q->P) + pad16(q->Kc * q->Og) +
                    pad16((int64_t)tg_gemm_serial_floats(ga));
    float *buf = tg_cpu_scratch(c, sizeof(float) * (size_t)(th * r->per_thread + pad16(part_floats) + tab_n));
    if (!buf) return false;
    r->buf = buf, r->part = buf + th * r->per_thread, r->rows = rows_best();
    int32_t *tab = tab_n ? (int32_t *)(r->part + pad16(part_floats)) : NULL;
    r->unfold = r->fold = NULL;
    if (!tab) return true;
    for (int64_t i = 0; i < q->kh; i++)
        for (int64_t jj = 0; jj < q->kw; jj++) {
            int32_t *row = tab + (i * q->kw + jj) * (fold ? q->H * q->W : q->P);
            if (!fold) { /* col entry (oy, ox) of tap (i, jj) reads input (oy*s - p + i, ox*s - p + jj) */
                for (int64_t oy = 0; oy < q->Ho; oy++)
                    for (int64_t ox = 0; ox < q->Wo; ox++) {
                        int64_t iy = oy * q->sh - q->ph + i, ix = ox * q->sw - q->pw + jj;
                        row[oy * q->Wo + ox] =
                            iy >= 0 && iy < q->H && ix >= 0 && ix < q->W ? (int32_t)(iy * q->W + ix) : -1;
                    }
            } else { /* input (iy, ix) receives col entry ((iy + p - i) / s, (ix + p - jj) / s) when exact */
                for (int64_t iy = 0; iy < q->H; iy++)
                    for (int64_t ix = 0; ix < q->W; ix++) {
                        int64_t ny = iy + q->ph - i, nx = ix + q->pw - jj;
                        bool ok = ny >= 0 && nx >= 0 && ny % q->sh == 0 && nx % q->sw == 0 && ny / q->sh < q->Ho &&
                                  nx / q->sw < q->Wo;
                        row[iy * q->W + ix] = ok ? (int32_t)(ny / q->sh * q->Wo + nx / q->sw) : -1;
                    }
            }
        }
    if (fold) r->fold = tab;
    else r->unfold = tab;
    return true;
}

/* Returns false when the scratch cannot be had (the caller runs the direct loops). */
static bool conv_fwd_gemm(cpu_ctx *c, const conv_geom *q, const float *x, const float *w, const float *bias,
                          float *out) {
    conv_run r = {.q = q, .x = x, .w = w, .bias = bias, .out = out, .nb = chunk_images(q)};
    tg_gemm_args ga = {.batch = 1, .M = q->Og, .N = r.nb * q->P, .K = q->Kc, .lda = q->Kc, .ldb = r.nb * q->P,
                       .ldc = r.nb * q->P};
    if (!conv_setup(c, q, false, 0, &ga, &r)) return false;
    tg_pool_run(c->pool, (int)((q->N + r.nb - 1) / r.nb), fwd_chunk, &r);
    return true;
}

static bool conv_dx_gemm(cpu_ctx *c, const conv_geom *q, const float *gy, const float *w, float *dx) {
    conv_run r = {.q = q, .w = w, .gy = gy, .out = dx, .nb = chunk_images(q)};
    tg_gemm_args ga = {.batch = 1, .M = q->Kc, .N = r.nb * q->P, .K = q->Og, .lda = q->Kc, .ldb = r.nb * q->P,
                       .ldc = r.nb * q->P, .ta = true};
    if (!conv_setup(c, q, true, 0, &ga, &r)) return false;
    tg_pool_run(c->pool, (int)((q->N + r.nb - 1) / r.nb), dx_chunk, &r);
    return true;
}

/* dW from the blocks' partial sums, added in block order and transposed:
 * dW_g [Og, Kc] = sum over blocks of part [Kc, Og]. */
static bool conv_dw_gemm(cpu_ctx *c, const conv_geom *q, const float *x, const float *gy, float *dw) {
    conv_run r = {.q = q, .x = x, .gy = gy, .nb = chunk_images(q)};
    r.chunks = (q->N + r.nb - 1) / r.nb;
    if (r.chunks > DW_BLOCKS) r.chunks = DW_BLOCKS;
    int64_t KO = q->Kc * q->Og;
    tg_gemm_args ga = {.batch = 1, .M = q->Kc, .N = q->Og, .K = r.nb * q->P, .lda = r.nb * q->P,
                       .ldb = r.nb * q->P, .ldc = q->Og, .tb = true};
    if (!conv_setup(c, q, false, (r.chunks ? r.chunks : 1) * q->G * KO, &ga, &r)) return false;
    if (r.chunks == 0) memset(r.part, 0, sizeof(float) * (size_t)(q->G * KO)); /* an empty batch: dW = 0 */
    tg_pool_run(c->pool, (int)r.chunks, dw_block, &r);
    /* Blocks added into the first along contiguous rows (vectorized), then
     * transposed: summing down the strided columns cost a tenth of the step. */
    int64_t all = q->G * KO;
    for (int64_t b = 1; b < r.chunks; b++) {
        const float *src = r.part + b * all;
        for (int64_t i = 0; i < all; i++) r.part[i] += src[i];
    }
    for (int64_t gi = 0; gi < q->G; gi++) {
        float *dst = dw + gi * KO;
        const float *p = r.part + gi * KO;
        for (int64_t o = 0; o < q->Og; o++)
            for (int64_t k = 0; k < q->Kc; k++) dst[o * q->Kc + k] = p[k * q->Og + o];
    }
    return true;
}

/* ---- direct loops over output planes ---- */

typedef struct {
    const conv_geom *q;
    const float *a, *b; /* forward: x, w; dx: gy, w; dw: x, gy */
    float *out;
    const float *bias;  /* forward: [O] or NULL */
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
        if (j->bias) add_scalar_c(y, y, j->bias[o], q->P);
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
static bool use_direct(const conv_geom *q) { return tg_cpu_conv_force_direct || (q->Cg == 1 && q->G > 1); }

/* x [N, C, H, W], w [O, C/G, kH, kW], optional bias [O] -> y [N, O, Ho, Wo] */
TG_CPU_KERNEL(tg_cpu_conv2d) {
    const tg_node *n = ir_node(g, id);
    conv_geom q = geom(n, ir_node(g, n->in[0])->shape, ir_node(g, n->in[1])->shape, n->shape);
    const float *bias = n->nin > 2 ? in[2] : NULL;
    if (!use_direct(&q) && conv_fwd_gemm(c, &q, in[0], in[1], bias, out)) return;
    direct_job j = {&q, in[0], in[1], out, bias};
    tg_cpu_parallel(c, q.N * q.O, grain_rows(q.P * q.Kc), fwd_planes, &j);
}

/* gy [N, O, Ho, Wo], w [O, C/G, kH, kW] -> dx [N, C, H, W] */
TG_CPU_KERNEL(tg_cpu_conv2d_grad_input) {
    const tg_node *n = ir_node(g, id);
    conv_geom q = geom(n, n->shape, ir_node(g, n->in[1])->shape, ir_node(g, n->in[0])->shape);
    if (!use_direct(&q) && conv_dx_gemm(c, &q, in[0], in[1], out)) return;
    direct_job j = {&q, in[0], in[1], out, NULL};
    tg_cpu_parallel(c, q.N * q.C, grain_rows(q.P * q.Og * q.kh * q.kw), dx_planes, &j);
}

/* x [N, C, H, W], gy [N, O, Ho, Wo] -> dw [O, C/G, kH, kW] */
TG_CPU_KERNEL(tg_cpu_conv2d_grad_weight) {
    const tg_node *n = ir_node(g, id);
    conv_geom q = geom(n, ir_node(g, n->in[0])->shape, n->shape, ir_node(g, n->in[1])->shape);
    if (!use_direct(&q) && conv_dw_gemm(c, &q, in[0], in[1], out)) return;
    direct_job j = {&q, in[0], in[1], out, NULL};
    tg_cpu_parallel(c, q.O * q.Cg, grain_rows(q.N * q.P * q.kh * q.kw), dw_rows, &j);
}

/* ---- max pooling ----
 * The rule: padding is never a candidate (padding <= kernel/2 leaves a real
 * element in every window); the max is NaN if the window holds one, else
 * the running v > m ? v : m in row-major window order; the backward gets
 * the forward's output and sends each window's gradient to the first
 * element in that order that equals it (the first NaN for a NaN max): the
 * element the strict '>' kept, so ties go to the first element.
 *
 * Non-overlapping windows (stride >= kernel, the usual case) run through an
 * index table for a group of planes, [taps][planes in a group * Ho * Wo],
 * 16 windows at a time whatever the plane size. Overlapping windows scan
 * each window, with selects and integer masks rather than branches (which
 * element wins is data-dependent and would mispredict half the time). */

typedef struct {
    int64_t H, W, Ho, Wo, kh, kw, sh, sw, ph, pw;
    const float *x, *y, *gy;
    float *out;
    const conv_rows *rows;
    const int32_t *idx; /* the table, or NULL for the window scan */
    int64_t group;      /* planes per table */
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

/* Groups [lo, hi) of j->group planes through the table. */
static void pool_groups(void *arg, int64_t lo, int64_t hi) {
    const pool_job *j = arg;
    int64_t HW = j->H * j->W, P = j->Ho * j->Wo, n = j->group * P;
    for (int64_t t = lo; t < hi; t++) {
        const float *x = j->x + t * j->group * HW;
        if (j->gy) {
            float *dx = j->out + t * j->group * HW;
            memset(dx, 0, sizeof(float) * (size_t)(j->group * HW));
            j->rows->pool_grad(dx, x, j->y + t * n, j->gy + t * n, j->idx, j->kh * j->kw, n);
        } else {
            j->rows->pool(j->out + t * n, x, j->idx, j->kh * j->kw, n);
        }
    }
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

/* Sets up the job and, for non-overlapping windows whose table fits, builds
 * the table in c's scratch: planes per group so a group holds at least 64
 * windows (four 16-wide blocks) and divides the plane count. */
static pool_job pool_setup(cpu_ctx *c, const tg_node *n, tg_shape xs, tg_shape ys, void *const *in, void *out) {
    const tg_attr_conv *a = &n->at.conv;
    pool_job j = {xs.d[2], xs.d[3], ys.d[2], ys.d[3], a->kh, a->kw, a->stride_h, a->stride_w, a->pad_h, a->pad_w,
                  in[0], NULL, NULL, out, rows_best(), NULL, 1};
    if (n->op == TG_OP_MAX_POOL2D_GRAD) j.y = in[1], j.gy = in[2];
    int64_t planes = xs.d[0] * xs.d[1], P = j.Ho * j.Wo, kk = j.kh * j.kw;
    if (j.sh < j.kh || j.sw < j.kw || planes == 0) return j;
    while (j.group * P < 64 && planes % (2 * j.group) == 0) j.group *= 2;
    if (kk * j.group * P > tg_cpu_conv_table_max || j.group * j.H * j.W > INT32_MAX) return j;
    int32_t *idx = tg_cpu_scratch(c, sizeof(int32_t) * (size_t)(kk * j.group * P));
    if (!idx) return j;
    int64_t n_all = j.group * P;
    for (int64_t l = 0; l < j.group; l++)
        for (int64_t oy = 0; oy < j.Ho; oy++)
            for (int64_t ox = 0; ox < j.Wo; ox++)
                for (int64_t i = 0; i < j.kh; i++)
                    for (int64_t cc = 0; cc < j.kw; cc++) {
                        int64_t iy = oy * j.sh - j.ph + i, ix = ox * j.sw - j.pw + cc;
                        bool in_plane = iy >= 0 && iy < j.H && ix >= 0 && ix < j.W;
                        idx[(i * j.kw + cc) * n_all + l * P + oy * j.Wo + ox] =
                            in_plane ? (int32_t)(l * j.H * j.W + iy * j.W + ix) : -1;
                    }
    j.idx = idx;
    return j;
}

/* The 2x2 path (pool2x2.c) stands in for the index table, so the tests'
 * switches that turn the table or AVX-512 off turn it off too. */
static bool pool2x2_ok(void) { return !tg_cpu_conv_force_generic && tg_cpu_conv_table_max > 0; }

/* x [N, C, H, W] -> y [N, C, Ho, Wo] */
TG_CPU_KERNEL(tg_cpu_max_pool2d) {
    const tg_node *n = ir_node(g, id);
    tg_shape xs = ir_node(g, n->in[0])->shape;
    if (pool2x2_ok() && tg_cpu_pool2x2(c, n, xs, in[0], NULL, NULL, false, out)) return;
    pool_job j = pool_setup(c, n, xs, n->shape, in, out);
    int64_t planes = xs.d[0] * xs.d[1], work = j.Ho * j.Wo * j.kh * j.kw;
    if (j.idx) tg_cpu_parallel(c, planes / j.group, grain_rows(work * j.group), pool_groups, &j);
    else tg_cpu_parallel(c, planes, grain_rows(work), pool_planes, &j);
}

/* x [N, C, H, W], y [N, C, Ho, Wo] (the forward's output), gy [N, C, Ho, Wo] -> dx [N, C, H, W] */
TG_CPU_KERNEL(tg_cpu_max_pool2d_grad) {
    const tg_node *n = ir_node(g, id);
    tg_shape ys = ir_node(g, n->in[1])->shape;
    if (pool2x2_ok() && tg_cpu_pool2x2(c, n, n->shape, in[0], in[1], in[2], false, out)) return;
    pool_job j = pool_setup(c, n, n->shape, ys, in, out);
    int64_t planes = ys.d[0] * ys.d[1], work = j.Ho * j.Wo * j.kh * j.kw;
    if (j.idx) tg_cpu_parallel(c, planes / j.group, grain_rows(work * j.group), pool_groups, &j);
    else tg_cpu_parallel(c, planes, grain_rows(work), pool_grad_planes, &j);
}

typedef struct {
    const float *x;
    float *dx;
} relu_pass;

static void relu_grad_inplace(void *arg, int64_t lo, int64_t hi) {
    const relu_pass *j = arg;
    tg_vec_best()->relu_grad(hi - lo, j->dx + lo, j->x + lo, j->dx + lo);
}

/* x [N, C, H, W] (a relu's output), y, gy [N, C, Ho, Wo] -> dx [N, C, H, W] */
void tg_cpu_max_pool2d_grad_relu(cpu_ctx *c, const tg_graph *g, int pg, void *out, void *const *in) {
    const tg_node *n = ir_node(g, pg);
    if (pool2x2_ok() && tg_cpu_pool2x2(c, n, n->shape, in[0], in[1], in[2], true, out)) return;
    tg_cpu_max_pool2d_grad(c, g, pg, out, in);
    relu_pass j = {in[0], out};
    tg_cpu_parallel(c, tg_ir_numel(n), GRAIN, relu_grad_inplace, &j);
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
TG_CPU_KERNEL(tg_cpu_upsample2d) {
    const tg_node *n = ir_node(g, id);
    tg_shape xs = ir_node(g, n->in[0])->shape;
    up_job j = {xs.d[2], xs.d[3], n->at.upsample.factor, in[0], out};
    tg_cpu_parallel(c, xs.d[0] * xs.d[1], grain_rows(tg_ir_numel(n) / (xs.d[0] * xs.d[1] + 1)), up_planes, &j);
}

/* gy [N, C, H*f, W*f] -> dx [N, C, H, W] */
TG_CPU_KERNEL(tg_cpu_upsample2d_grad) {
    const tg_node *n = ir_node(g, id);
    up_job j = {n->shape.d[2], n->shape.d[3], n->at.upsample.factor, in[0], out};
    int64_t planes = n->shape.d[0] * n->shape.d[1];
    tg_cpu_parallel(c, planes, grain_rows(j.H * j.W * j.f * j.f), up_grad_planes, &j);
}
