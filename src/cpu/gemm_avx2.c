/* The AVX2+FMA GEMM micro-kernel (gemm_kernels.h): 6 rows x 16 columns, 12
 * accumulators, 2 B vectors and a broadcast in the 16 ymm registers. Each C
 * element is one FMA chain over k from zero, then the epilogue, as the
 * AVX-512 kernel computes it, so the two give the same bits. Compiled for
 * that target alone (function attributes) and chosen at run time. */
#include "gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* Lanes [0, n) of 8 set (n clipped to 0..8), for maskload/maskstore, which
 * neither read nor fault on the lanes left out. */
AVX2_INLINE __m256i lanes8(int n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* MR, RS1 and COLS are constants at every call site (see the AVX-512
 * kernel): RS1 says which A stride is 1; COLS 16 = a full tile, 15 = 9..15
 * columns, masked, 8 = at most 8 columns. */
AVX2_INLINE void tile_6x16(const tg_tile *t, const int MR, const bool RS1, const int COLS) {
    const int64_t kc = t->kc, rs = RS1 ? 1 : t->rs_a, cs = RS1 ? t->cs_a : 1, ldb = t->ldb, ldc = t->ldc;
    const int nr = t->nr;
    const __m256i m0 = lanes8(COLS == 16 ? 8 : nr), m1 = lanes8(COLS == 16 ? 8 : COLS == 8 ? 0 : nr - 8);
    float *c = t->c;
    const float *a = t->a, *b = t->b;
    __m256 c0[6], c1[6];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) c0[r] = c1[r] = _mm256_setzero_ps();
    if (t->c_next)
        for (int r = 0; r < 6; r++) _mm_prefetch((const char *)(t->c_next + r * ldc), _MM_HINT_T1);
    for (int64_t k = 0; k < kc; k++, a += cs, b += ldb) {
        __m256 b0, b1 = _mm256_setzero_ps();
        if (COLS == 16) {
            b0 = _mm256_loadu_ps(b);
            b1 = _mm256_loadu_ps(b + 8);
        } else {
            b0 = _mm256_maskload_ps(b, m0);
            if (COLS > 8) b1 = _mm256_maskload_ps(b + 8, m1);
        }
        _mm_prefetch((const char *)(b + 16 * ldb), _MM_HINT_T0);
        if (RS1) _mm_prefetch((const char *)(a + 16 * cs), _MM_HINT_T0);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 x = _mm256_broadcast_ss(a + r * rs);
            c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
            if (COLS > 8) c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
        }
    }
    const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        __m256 v0 = c0[r], v1 = c1[r];
        float *cr = c + r * ldc;
        if (t->acc) {
            v0 = _mm256_add_ps(v0, _mm256_maskload_ps(cr, m0));
            if (COLS > 8) v1 = _mm256_add_ps(v1, _mm256_maskload_ps(cr + 8, m1));
        }
        if (t->bias) {
            v0 = _mm256_add_ps(v0, _mm256_maskload_ps(t->bias, m0));
            if (COLS > 8) v1 = _mm256_add_ps(v1, _mm256_maskload_ps(t->bias + 8, m1));
        }
        if (t->resid) {
            const float *rr = t->resid + r * t->ldr;
            v0 = _mm256_add_ps(v0, _mm256_maskload_ps(rr, m0));
            if (COLS > 8) v1 = _mm256_add_ps(v1, _mm256_maskload_ps(rr + 8, m1));
        }
        if (t->relu) { /* max returns its second operand for NaN: relu(NaN) = 0, as the relu kernel */
            v0 = _mm256_max_ps(v0, zero);
            v1 = _mm256_max_ps(v1, zero);
        }
        if (t->gate) {
            const float *g = t->gate + r * t->ldg;
            v0 = _mm256_and_ps(v0, _mm256_cmp_ps(_mm256_maskload_ps(g, m0), zero, _CMP_GT_OQ));
            if (COLS > 8) v1 = _mm256_and_ps(v1, _mm256_cmp_ps(_mm256_maskload_ps(g + 8, m1), zero, _CMP_GT_OQ));
        }
        if (COLS == 16) {
            _mm256_storeu_ps(cr, v0);
            _mm256_storeu_ps(cr + 8, v1);
        } else {
            _mm256_maskstore_ps(cr, m0, v0);
            if (COLS > 8) _mm256_maskstore_ps(cr + 8, m1, v1);
        }
    }
}

#define ROWS_CASES(RS1, COLS)                        \
    switch (t->mr) {                                 \
    case 6: tile_6x16(t, 6, RS1, COLS); break;       \
    case 5: tile_6x16(t, 5, RS1, COLS); break;       \
    case 4: tile_6x16(t, 4, RS1, COLS); break;       \
    case 3: tile_6x16(t, 3, RS1, COLS); break;       \
    case 2: tile_6x16(t, 2, RS1, COLS); break;       \
    default: tile_6x16(t, 1, RS1, COLS); break;      \
    }

#define TILE_FN(name, RS1, COLS) \
    AVX2 static void name(const tg_tile *t) { ROWS_CASES(RS1, COLS) }
TILE_FN(tile_p16, true, 16)
TILE_FN(tile_p15, true, 15)
TILE_FN(tile_p8, true, 8)
TILE_FN(tile_r16, false, 16)
TILE_FN(tile_r15, false, 15)
TILE_FN(tile_r8, false, 8)

static void tile_avx2(const tg_tile *t) {
    if (t->rs_a == 1) (t->nr == 16 ? tile_p16 : t->nr > 8 ? tile_p15 : tile_p8)(t);
    else (t->nr == 16 ? tile_r16 : t->nr > 8 ? tile_r15 : tile_r8)(t);
}

/* The 8 lanes added in a fixed tree: (0+4, 1+5, 2+6, 3+7), then pairs. */
AVX2_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Four rows at a time, 8 k per step; every row is reduced the same way
 * whichever group it falls in. */
AVX2 static void gemv_avx2(int64_t m, int64_t k, const float *A, int64_t lda, const float *x, float *y,
                           int64_t incy) {
    const int64_t kv = k & ~(int64_t)7;
    const __m256i tail = lanes8((int)(k & 7));
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const float *a0 = A + i * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int64_t j = 0; j < kv; j += 8) {
            __m256 xv = _mm256_loadu_ps(x + j);
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + j), xv, s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + j), xv, s1);
            s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + j), xv, s2);
            s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + j), xv, s3);
        }
        if (k & 7) {
            __m256 xv = _mm256_maskload_ps(x + kv, tail);
            s0 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + kv, tail), xv, s0);
            s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a1 + kv, tail), xv, s1);
            s2 = _mm256_fmadd_ps(_mm256_maskload_ps(a2 + kv, tail), xv, s2);
            s3 = _mm256_fmadd_ps(_mm256_maskload_ps(a3 + kv, tail), xv, s3);
        }
        y[i * incy] = hsum8(s0);
        y[(i + 1) * incy] = hsum8(s1);
        y[(i + 2) * incy] = hsum8(s2);
        y[(i + 3) * incy] = hsum8(s3);
    }
    for (; i < m; i++) {
        const float *a0 = A + i * lda;
        __m256 s0 = _mm256_setzero_ps();
        for (int64_t j = 0; j < kv; j += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + j), _mm256_loadu_ps(x + j), s0);
        if (k & 7) s0 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + kv, tail), _mm256_maskload_ps(x + kv, tail), s0);
        y[i * incy] = hsum8(s0);
    }
}

/* Row-major B or transposed A into panels w <= 16 wide: a k row at a time. */
AVX2 static void pack_n_avx2(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst) {
    const __m256i l0 = lanes8(rows), l1 = lanes8(rows - 8), s0 = lanes8(w), s1 = lanes8(w - 8);
    for (int64_t k = 0; k < kc; k++, src += ld, dst += w) {
        _mm256_maskstore_ps(dst, s0, _mm256_maskload_ps(src, l0));
        if (w > 8) _mm256_maskstore_ps(dst + 8, s1, _mm256_maskload_ps(src + 8, l1));
    }
}

const tg_ukernel *tg_ukernel_avx2(void) {
    static const tg_ukernel k = {"avx2 6x16", 6, 16, true, tile_avx2, gemv_avx2, tg_pack_t_generic, pack_n_avx2};
    return &k;
}
#else
const tg_ukernel *tg_ukernel_avx2(void) { return 0; }
#endif
