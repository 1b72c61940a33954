/* Max pooling 2x2, stride 2, no padding, over planes the windows tile
 * exactly (H = 2*Ho, W = 2*Wo): the CNN case, on AVX-512 (16 lanes, as
 * described here) and AVX2 (the same in 8 lanes).
 *
 * The index-table path gathers each tap and, backward, zeroes dx and then
 * scatters into it; gathers and scatters cost about one load per lane.
 * Here 16 outputs read a window of 64 inputs in four plain loads, and each
 * tap is a fixed two-source permutation of those four vectors:
 *   - Wo divides 16: the planes stacked are one tall image whose output row
 *     R reads input rows 2R and 2R+1, so 16 consecutive outputs (16/Wo
 *     whole rows) read 64 consecutive inputs;
 *   - 16 divides Wo: 16 outputs of one row read 32 inputs of each of the
 *     two input rows.
 * Backward, the four taps' gradients are permuted back into the window and
 * stored whole, zeros included, so dx needs no zero-fill. The rule and its
 * ties and NaNs are those of kernels_conv.c's pooling, bit for bit. */
#include <math.h>

#include "cpu.h"
#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

typedef struct {
    const float *x, *y, *gy; /* x [planes*H*W]; y, gy [planes*Ho*Wo] (backward) */
    float *out;
    int64_t n_out, Wo, W, row_blocks; /* row_blocks: blocks per output row (L | Wo), else 0 */
    int64_t L;                        /* outputs per block: the lanes, 16 (AVX-512) or 8 (AVX2) */
    bool relu;                        /* backward: x is a relu's output, whose gradient rides along */
    int32_t tap[4][16];               /* window offset (0..4L) of each lane's tap (i, j), tap = 2i + j */
    int32_t inv[4][16];               /* window offset Lk + l <- lane (L * tap + p) of the four taps */
} pool2_job;

/* Block b: the window's start, the distance of its second half (the two
 * input rows' halves), and how many of its L outputs exist. */
static void block_at(const pool2_job *j, int64_t b, int64_t *x0, int64_t *d, int64_t *valid) {
    int64_t L = j->L;
    if (j->row_blocks) {
        int64_t R = b / j->row_blocks, c = b % j->row_blocks * L;
        *x0 = 2 * R * j->W + 2 * c, *d = j->W, *valid = L;
    } else {
        *x0 = b * 4 * L, *d = 2 * L, *valid = j->n_out - b * L < L ? j->n_out - b * L : L;
    }
}

static int64_t out_at(const pool2_job *j, int64_t b) {
    return j->row_blocks ? b / j->row_blocks * j->Wo + b % j->row_blocks * j->L : b * j->L;
}

static inline __mmask16 first(int64_t n) { return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* 16 of the 64 floats v[0..3] (each 16) picked by idx (0..63). */
AVX512 static inline __m512 pick64(const __m512 v[4], __m512i idx) {
    __mmask16 hi = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
    return _mm512_mask_blend_ps(hi, _mm512_permutex2var_ps(v[0], idx, v[1]), _mm512_permutex2var_ps(v[2], idx, v[3]));
}

/* The window of block b: rows [x0, x0+32) and [x0+d, x0+d+32), 4*valid floats in all. */
AVX512 static void load_window(const float *x, int64_t x0, int64_t d, int64_t valid, __m512 v[4]) {
    int64_t n = 4 * valid; /* a partial block is whole rows, contiguous (d = 32) */
    for (int k = 0; k < 4; k++) v[k] = _mm512_maskz_loadu_ps(first(n - 16 * k), x + x0 + (k >> 1) * d + (k & 1) * 16);
}

AVX512 static void fwd_blocks(void *arg, int64_t lo, int64_t hi) {
    const pool2_job *j = arg;
    for (int64_t b = lo; b < hi; b++) {
        int64_t x0, d, valid;
        block_at(j, b, &x0, &d, &valid);
        __m512 v[4];
        load_window(j->x, x0, d, valid, v);
        __m512 m = pick64(v, _mm512_loadu_si512(j->tap[0]));
        __mmask16 nan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
        for (int t = 1; t < 4; t++) {
            __m512 e = pick64(v, _mm512_loadu_si512(j->tap[t]));
            m = _mm512_max_ps(e, m); /* e > m ? e : m: ties keep the earlier tap */
            nan |= _mm512_cmp_ps_mask(e, e, _CMP_UNORD_Q);
        }
        int64_t o = out_at(j, b);
        _mm512_mask_storeu_ps(j->out + o, first(valid), _mm512_mask_mov_ps(m, nan, _mm512_set1_ps(NAN)));
    }
}

AVX512 static void grad_blocks(void *arg, int64_t lo, int64_t hi) {
    const pool2_job *j = arg;
    for (int64_t b = lo; b < hi; b++) {
        int64_t x0, d, valid;
        block_at(j, b, &x0, &d, &valid);
        int64_t o = out_at(j, b);
        __mmask16 k = first(valid);
        __m512 v[4], g[4];
        load_window(j->x, x0, d, valid, v);
        __m512 m = _mm512_maskz_loadu_ps(k, j->y + o);
        __m512 gy = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, j->gy + o));
        /* relu_grad(x, dx) = dx where x > 0: the winner equals the max */
        if (j->relu) gy = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_GT_OQ), gy);
        __mmask16 mnan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q), found = 0;
        for (int t = 0; t < 4; t++) { /* the first tap equal to the max (the first NaN for a NaN max) */
            __m512 e = pick64(v, _mm512_loadu_si512(j->tap[t]));
            __mmask16 hit = ~found & (_mm512_cmp_ps_mask(e, m, _CMP_EQ_OQ) | (_mm512_cmp_ps_mask(e, e, _CMP_UNORD_Q) & mnan));
            g[t] = _mm512_maskz_mov_ps(hit, gy);
            found |= hit;
        }
        int64_t n = 4 * valid;
        for (int q = 0; q < 4; q++)
            _mm512_mask_storeu_ps(j->out + x0 + (q >> 1) * d + (q & 1) * 16, first(n - 16 * q),
                                  pick64(g, _mm512_loadu_si512(j->inv[q])));
    }
}

/* The same blocks in 8 lanes for AVX2: a window of 32 inputs in four
 * loads, each tap picked from them by four in-register permutes and three
 * blends (AVX2 has no two-source permute). */
#define AVX2 __attribute__((target("avx2")))

AVX2 static inline __m256 first8(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/* 8 of the 32 floats v[0..3] (each 8) picked by idx (0..31). */
AVX2 static inline __m256 pick32(const __m256 v[4], __m256i idx) {
    __m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)), b4 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 27));
    __m256 lo = _mm256_blendv_ps(_mm256_permutevar8x32_ps(v[0], idx), _mm256_permutevar8x32_ps(v[1], idx), b3);
    __m256 hi = _mm256_blendv_ps(_mm256_permutevar8x32_ps(v[2], idx), _mm256_permutevar8x32_ps(v[3], idx), b3);
    return _mm256_blendv_ps(lo, hi, b4);
}

AVX2 static void load_window8(const float *x, int64_t x0, int64_t d, int64_t valid, __m256 v[4]) {
    int64_t n = 4 * valid;
    for (int k = 0; k < 4; k++)
        v[k] = _mm256_maskload_ps(x + x0 + (k >> 1) * d + (k & 1) * 8, _mm256_castps_si256(first8(n - 8 * k)));
}

AVX2 static void fwd_blocks8(void *arg, int64_t lo, int64_t hi) {
    const pool2_job *j = arg;
    for (int64_t b = lo; b < hi; b++) {
        int64_t x0, d, valid;
        block_at(j, b, &x0, &d, &valid);
        __m256 v[4];
        load_window8(j->x, x0, d, valid, v);
        __m256 m = pick32(v, _mm256_loadu_si256((const __m256i *)j->tap[0]));
        __m256 nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
        for (int t = 1; t < 4; t++) {
            __m256 e = pick32(v, _mm256_loadu_si256((const __m256i *)j->tap[t]));
            m = _mm256_max_ps(e, m); /* e > m ? e : m: ties keep the earlier tap */
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(e, e, _CMP_UNORD_Q));
        }
        _mm256_maskstore_ps(j->out + out_at(j, b), _mm256_castps_si256(first8(valid)),
                            _mm256_blendv_ps(m, _mm256_set1_ps(NAN), nan));
    }
}

AVX2 static void grad_blocks8(void *arg, int64_t lo, int64_t hi) {
    const pool2_job *j = arg;
    for (int64_t b = lo; b < hi; b++) {
        int64_t x0, d, valid;
        block_at(j, b, &x0, &d, &valid);
        int64_t o = out_at(j, b);
        __m256i k = _mm256_castps_si256(first8(valid));
        __m256 v[4], g[4];
        load_window8(j->x, x0, d, valid, v);
        __m256 m = _mm256_maskload_ps(j->y + o, k);
        __m256 gy = _mm256_add_ps(_mm256_setzero_ps(), _mm256_maskload_ps(j->gy + o, k));
        if (j->relu) gy = _mm256_and_ps(_mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GT_OQ), gy);
        __m256 mnan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q), found = _mm256_setzero_ps();
        for (int t = 0; t < 4; t++) {
            __m256 e = pick32(v, _mm256_loadu_si256((const __m256i *)j->tap[t]));
            __m256 eq = _mm256_or_ps(_mm256_cmp_ps(e, m, _CMP_EQ_OQ), _mm256_and_ps(_mm256_cmp_ps(e, e, _CMP_UNORD_Q), mnan));
            __m256 hit = _mm256_andnot_ps(found, eq);
            g[t] = _mm256_and_ps(hit, gy);
            found = _mm256_or_ps(found, hit);
        }
        int64_t n = 4 * valid;
        for (int q = 0; q < 4; q++)
            _mm256_maskstore_ps(j->out + x0 + (q >> 1) * d + (q & 1) * 8, _mm256_castps_si256(first8(n - 8 * q)),
                                pick32(g, _mm256_loadu_si256((const __m256i *)j->inv[q])));
    }
}

/* x [N, C, H, W] -> out: y [N, C, Ho, Wo], or with y and gy [N, C, Ho, Wo]
 * (the backward) dx [N, C, H, W], times relu's gradient if `relu` (x being
 * a relu's output). False when the shape or CPU does not fit. */
bool tg_cpu_pool2x2(cpu_ctx *c, const tg_node *n, tg_shape xs, const float *x, const float *y, const float *gy,
                 bool relu, float *out) {
    int64_t H = xs.d[2], W = xs.d[3], Ho = H / 2, Wo = W / 2, planes = xs.d[0] * xs.d[1];
    cpu_isa_t isa = tg_cpu_isa();
    int64_t L = isa == CPU_AVX512 ? 16 : isa == CPU_AVX2 ? 8 : 0;
    const tg_attr_conv *a = &n->at.conv;
    bool fits = a->kh == 2 && a->kw == 2 && a->stride_h == 2 && a->stride_w == 2 && a->pad_h == 0 && a->pad_w == 0 &&
                H % 2 == 0 && W % 2 == 0 && Wo > 0 && L && (L % Wo == 0 || Wo % L == 0);
    if (!fits) return false;
    pool2_job j = {x, y, gy, out, planes * Ho * Wo, Wo, W, Wo % L == 0 ? Wo / L : 0, L, relu, {{0}}, {{0}}};
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < L; p++) {
            int i = t >> 1, jj = t & 1;
            int32_t off = j.row_blocks ? (int32_t)(2 * L * i + 2 * p + jj)
                                       : (int32_t)(4 * Wo * (p / Wo) + 2 * Wo * i + 2 * (p % Wo) + jj);
            j.tap[t][p] = off;
            j.inv[off / L][off % L] = (int32_t)(L * t + p);
        }
    int64_t blocks = j.row_blocks ? planes * Ho * j.row_blocks : (j.n_out + L - 1) / L;
    if (L == 16) tg_cpu_parallel(c, blocks, 1 + 16384 / 64, gy ? grad_blocks : fwd_blocks, &j);
    else tg_cpu_parallel(c, blocks, 1 + 16384 / 32, gy ? grad_blocks8 : fwd_blocks8, &j);
    return true;
}
#else
bool tg_cpu_pool2x2(cpu_ctx *c, const tg_node *n, tg_shape xs, const float *x, const float *y, const float *gy,
                 bool relu, float *out) {
    return false;
}
#endif
