/* GEMM micro-kernels. The AVX-512 kernel (and the AVX2 one, gemm_avx2.c) is
 * compiled for that target only (function attributes) and chosen at run
 * time by the CPU path (isa.h), so the library still runs on CPUs without it. */
#include "gemm_kernels.h"
#include "isa.h"

/* ---- portable: 8 x 16, plain C ---- */

#define GMR 8
#define GNR 16

void tg_tile_generic(const tg_tile *t) {
    float acc[GMR][GNR] = {{0}};
    const float *a = t->a, *b = t->b;
    for (int64_t k = 0; k < t->kc; k++, a += t->cs_a, b += t->ldb)
        for (int r = 0; r < t->mr; r++) {
            float x = a[r * t->rs_a];
            for (int q = 0; q < t->nr; q++) acc[r][q] += x * b[q];
        }
    for (int r = 0; r < t->mr; r++)
        for (int q = 0; q < t->nr; q++) t->c[r * t->ldc + q] = tg_tile_epilogue(t, r, q, acc[r][q]);
}

static void gemv_generic(int64_t m, int64_t k, const float *A, int64_t lda, const float *x, float *y, int64_t incy) {
    for (int64_t i = 0; i < m; i++) {
        float s = 0.0f;
        for (int64_t j = 0; j < k; j++) s += A[i * lda + j] * x[j];
        y[i * incy] = s;
    }
}

void tg_pack_t_generic(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst) {
    for (int r = 0; r < w; r++) {
        if (r < rows)
            for (int64_t k = 0; k < kc; k++) dst[k * w + r] = src[r * ld + k];
        else
            for (int64_t k = 0; k < kc; k++) dst[k * w + r] = 0.0f;
    }
}

static void pack_n_generic(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst) {
    for (int64_t k = 0; k < kc; k++)
        for (int r = 0; r < w; r++) dst[k * w + r] = r < rows ? src[k * ld + r] : 0.0f;
}

static const tg_ukernel k_generic = {"generic 8x16",    GMR,           GNR, false, tg_tile_generic, gemv_generic,
                                     tg_pack_t_generic, pack_n_generic};
const tg_ukernel *tg_ukernel_generic(void) { return &k_generic; }

#if defined(__x86_64__) && defined(__GNUC__)
#include "avx512.h"

/* 12 rows x 32 columns: 24 accumulators, 2 B vectors, 1 broadcast. MR, RS1
 * and COLS are constants at every call site, so the row loops unroll and the
 * accumulators stay in registers. RS1 says which A stride is 1 (packed or
 * transposed A have rs_a = 1, row-major A has cs_a = 1). COLS: 32 = a full
 * tile, no masks in the loop; 31 = 17..31 columns, masked; 16 = at most 16
 * columns, half the work. */
AVX512_INLINE void tile_12x32(const tg_tile *t, const int MR, const bool RS1, const int COLS) {
    const int64_t kc = t->kc, rs = RS1 ? 1 : t->rs_a, cs = RS1 ? t->cs_a : 1, ldb = t->ldb, ldc = t->ldc;
    const int nr = t->nr;
    const __mmask16 m0 = COLS == 32 || nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = COLS == 32 ? 0xffff : COLS == 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    float *c = t->c;
    const float *a = t->a, *b = t->b;
    __m512 c0[12], c1[12];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        c0[r] = c1[r] = _mm512_setzero_ps();
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
        if (COLS > 16) _mm_prefetch((const char *)(c + r * ldc + 16), _MM_HINT_T0);
    }
    if (t->c_next)
        for (int r = 0; r < 12; r++) {
            _mm_prefetch((const char *)(t->c_next + r * ldc), _MM_HINT_T1);
            _mm_prefetch((const char *)(t->c_next + r * ldc + 16), _MM_HINT_T1);
        }
    for (int64_t k = 0; k < kc; k++, a += cs, b += ldb) {
        __m512 b0, b1 = _mm512_setzero_ps();
        if (COLS == 32) {
            b0 = _mm512_loadu_ps(b);
            b1 = _mm512_loadu_ps(b + 16);
        } else {
            b0 = _mm512_maskz_loadu_ps(m0, b);
            if (COLS > 16) b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        }
        _mm_prefetch((const char *)(b + 16 * ldb), _MM_HINT_T0);
        /* A read in place with its k rows far apart (a transposed operand,
         * a weight gradient's X^T): the hardware prefetcher loses such a
         * stride at every page, and the operand often comes from far away. */
        if (RS1) _mm_prefetch((const char *)(a + 16 * cs), _MM_HINT_T0);
        if (COLS > 16) _mm_prefetch((const char *)(b + 16 * ldb + 16), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            __m512 x = _mm512_set1_ps(a[r * rs]);
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
            if (COLS > 16) c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
        }
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        __m512 v0 = c0[r], v1 = c1[r];
        float *cr = c + r * ldc;
        if (t->acc) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
            if (COLS > 16) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
        }
        if (t->bias) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, t->bias));
            if (COLS > 16) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, t->bias + 16));
        }
        if (t->resid) {
            const float *rr = t->resid + r * t->ldr;
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, rr));
            if (COLS > 16) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, rr + 16));
        }
        if (t->relu) { /* max returns its second operand for NaN: relu(NaN) = 0, as the relu kernel */
            v0 = _mm512_max_ps(v0, zero);
            v1 = _mm512_max_ps(v1, zero);
        }
        if (t->gate) {
            const float *g = t->gate + r * t->ldg;
            v0 = _mm512_maskz_mov_ps(_mm512_mask_cmp_ps_mask(m0, _mm512_maskz_loadu_ps(m0, g), zero, _CMP_GT_OQ), v0);
            if (COLS > 16)
                v1 = _mm512_maskz_mov_ps(
                    _mm512_mask_cmp_ps_mask(m1, _mm512_maskz_loadu_ps(m1, g + 16), zero, _CMP_GT_OQ), v1);
        }
        _mm512_mask_storeu_ps(cr, m0, v0);
        if (COLS > 16) _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
}

#define ROWS_CASES(RS1, COLS)                                                              \
    switch (t->mr) {                                                                       \
    case 12: tile_12x32(t, 12, RS1, COLS); break;                                          \
    case 11: tile_12x32(t, 11, RS1, COLS); break;                                          \
    case 10: tile_12x32(t, 10, RS1, COLS); break;                                          \
    case 9: tile_12x32(t, 9, RS1, COLS); break;                                            \
    case 8: tile_12x32(t, 8, RS1, COLS); break;                                            \
    case 7: tile_12x32(t, 7, RS1, COLS); break;                                            \
    case 6: tile_12x32(t, 6, RS1, COLS); break;                                            \
    case 5: tile_12x32(t, 5, RS1, COLS); break;                                            \
    case 4: tile_12x32(t, 4, RS1, COLS); break;                                            \
    case 3: tile_12x32(t, 3, RS1, COLS); break;                                            \
    case 2: tile_12x32(t, 2, RS1, COLS); break;                                            \
    default: tile_12x32(t, 1, RS1, COLS); break;                                           \
    }

/* One function per (A layout, column case), each switching on the rows. */
#define TILE_FN(name, RS1, COLS) \
    AVX512 static void name(const tg_tile *t) { ROWS_CASES(RS1, COLS) }
TILE_FN(tile_p32, true, 32)
TILE_FN(tile_p31, true, 31)
TILE_FN(tile_p16, true, 16)
TILE_FN(tile_r32, false, 32)
TILE_FN(tile_r31, false, 31)
TILE_FN(tile_r16, false, 16)

static void tile_avx512(const tg_tile *t) {
    if (t->rs_a == 1) (t->nr == 32 ? tile_p32 : t->nr > 16 ? tile_p31 : tile_p16)(t);
    else (t->nr == 32 ? tile_r32 : t->nr > 16 ? tile_r31 : tile_r16)(t);
}

/* Four rows at a time, 16 k per step; every row is reduced the same way
 * whichever group it falls in. */
AVX512 static void gemv_avx512(int64_t m, int64_t k, const float *A, int64_t lda, const float *x, float *y,
                               int64_t incy) {
    const int64_t kv = k & ~(int64_t)15;
    const __mmask16 tail = (__mmask16)((1u << (k & 15)) - 1);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const float *a0 = A + i * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int64_t j = 0; j < kv; j += 16) {
            __m512 xv = _mm512_loadu_ps(x + j);
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a0 + j), xv, s0);
            s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a1 + j), xv, s1);
            s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a2 + j), xv, s2);
            s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a3 + j), xv, s3);
        }
        if (tail) {
            __m512 xv = _mm512_maskz_loadu_ps(tail, x + kv);
            s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a0 + kv), xv, s0);
            s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a1 + kv), xv, s1);
            s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a2 + kv), xv, s2);
            s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a3 + kv), xv, s3);
        }
        y[i * incy] = _mm512_reduce_add_ps(s0);
        y[(i + 1) * incy] = _mm512_reduce_add_ps(s1);
        y[(i + 2) * incy] = _mm512_reduce_add_ps(s2);
        y[(i + 3) * incy] = _mm512_reduce_add_ps(s3);
    }
    for (; i < m; i++) {
        const float *a0 = A + i * lda;
        __m512 s0 = _mm512_setzero_ps();
        for (int64_t j = 0; j < kv; j += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a0 + j), _mm512_loadu_ps(x + j), s0);
        if (tail) s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a0 + kv), _mm512_maskz_loadu_ps(tail, x + kv), s0);
        y[i * incy] = _mm512_reduce_add_ps(s0);
    }
}


/* 16 source rows x 16 k at a time through transpose16; stores of w - r0
 * lanes (12 for A panels) overlap the next row's, in order. */
AVX512 static void pack_t_avx512(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst) {
    for (int r0 = 0; r0 < w; r0 += 16) {
        int lanes = w - r0 < 16 ? w - r0 : 16;
        __mmask16 store = (__mmask16)((1u << lanes) - 1);
        for (int64_t k = 0; k < kc; k += 16) {
            int64_t left = kc - k < 16 ? kc - k : 16;
            __mmask16 load = (__mmask16)((1u << left) - 1);
            __m512 v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                v[i] = r0 + i < rows ? _mm512_maskz_loadu_ps(load, src + (r0 + i) * ld + k) : _mm512_setzero_ps();
            transpose16(v);
            for (int64_t q = 0; q < left; q++) _mm512_mask_storeu_ps(dst + (k + q) * w + r0, store, v[q]);
        }
    }
}

AVX512 static void pack_n_avx512(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst) {
    const __mmask16 l0 = rows >= 16 ? 0xffff : (__mmask16)((1u << rows) - 1);
    const __mmask16 l1 = rows >= 32 ? 0xffff : rows <= 16 ? 0 : (__mmask16)((1u << (rows - 16)) - 1);
    const __mmask16 s0 = w >= 16 ? 0xffff : (__mmask16)((1u << w) - 1);
    const __mmask16 s1 = w >= 32 ? 0xffff : w <= 16 ? 0 : (__mmask16)((1u << (w - 16)) - 1);
    for (int64_t k = 0; k < kc; k++, src += ld, dst += w) {
        _mm512_mask_storeu_ps(dst, s0, _mm512_maskz_loadu_ps(l0, src));
        if (s1) _mm512_mask_storeu_ps(dst + 16, s1, _mm512_maskz_loadu_ps(l1, src + 16));
    }
}

static const tg_ukernel k_avx512 = {"avx512 12x32", 12,           32,           true,
                                    tile_avx512,    gemv_avx512, pack_t_avx512, pack_n_avx512};
#endif

const tg_ukernel *tg_ukernel_best(void) {
    switch (tg_cpu_isa()) {
#if defined(__x86_64__) && defined(__GNUC__)
    case CPU_AVX512: return &k_avx512;
    case CPU_AVX2: return tg_ukernel_avx2();
#endif
#if defined(__aarch64__)
    case CPU_NEON: return tg_ukernel_neon();
#endif
#if defined(__wasm_simd128__)
    case CPU_SIMD128: return tg_ukernel_simd128();
#endif
    default: return &k_generic;
    }
}
