/* The layer / RMS norm rows on the AVX2 path, in 8-lane registers. The
 * 16-lane bodies of kernels_nn.c keep a loop's vector accumulators on the
 * stack there (GCC has no 16-lane registers to give them without AVX-512),
 * which made a row of 64 several times slower than its arithmetic. Each
 * 16-lane vector is a pair of registers (lanes 0-7, 8-15) and every
 * operation, the cross-lane sums' tree included, is the one kernels_nn.c
 * does, so results are bitwise those of its kernels. x [R, D], stats [R, 2]. */
#include <math.h>

#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* A 16-lane vector as two halves. */
typedef struct {
    __m256 lo, hi;
} v16;

AVX2_INLINE __m256i lanes8(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* x[0 .. n), n <= 16; lanes past n are 0 (vload_tail) */
AVX2_INLINE v16 load16(const float *x, int64_t n) {
    if (n == 16) return (v16){_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)};
    return (v16){_mm256_maskload_ps(x, lanes8(n)), _mm256_maskload_ps(x + 8, lanes8(n - 8))};
}
AVX2_INLINE void store16(float *y, v16 v, int64_t n) {
    if (n == 16) {
        _mm256_storeu_ps(y, v.lo);
        _mm256_storeu_ps(y + 8, v.hi);
    } else {
        _mm256_maskstore_ps(y, lanes8(n), v.lo);
        _mm256_maskstore_ps(y + 8, lanes8(n - 8), v.hi);
    }
}
#define OP16(name, f)                                                                     \
    AVX2_INLINE v16 name(v16 a, v16 b) { return (v16){f(a.lo, b.lo), f(a.hi, b.hi)}; }
OP16(add16, _mm256_add_ps)
OP16(sub16, _mm256_sub_ps)
OP16(mul16, _mm256_mul_ps)
AVX2_INLINE v16 splat16(float s) { return (v16){_mm256_set1_ps(s), _mm256_set1_ps(s)}; }

/* kernels_nn.c's lanes16: s[k] = a[k] + a[k + 8], then pairs, then quads. */
AVX2_INLINE float lanes16(v16 a) {
    __m256 t = _mm256_add_ps(a.lo, a.hi);
    __m256 u = _mm256_add_ps(t, _mm256_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
    __m256 w = _mm256_add_ps(u, _mm256_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_cvtss_f32(w) + _mm_cvtss_f32(_mm256_extractf128_ps(w, 1));
}

/* norm_stats_row: the mean, then the biased variance around it (lanes past
 * D masked to 0). */
AVX2_INLINE void stats_row(const float *x, int64_t D, bool rms, float eps, float *mean, float *rstd) {
    float m = 0.0f;
    if (!rms) {
        v16 acc = splat16(0.0f);
        for (int64_t i = 0; i < D; i += 16) acc = add16(acc, load16(x + i, D - i < 16 ? D - i : 16));
        m = lanes16(acc) / (float)D;
    }
    v16 acc = splat16(0.0f), vm = splat16(m);
    for (int64_t i = 0; i < D; i += 16) {
        int64_t n = D - i < 16 ? D - i : 16;
        v16 d = sub16(load16(x + i, n), vm);
        if (n < 16) {
            d.lo = _mm256_and_ps(d.lo, _mm256_castsi256_ps(lanes8(n)));
            d.hi = _mm256_and_ps(d.hi, _mm256_castsi256_ps(lanes8(n - 8)));
        }
        acc = add16(acc, mul16(d, d));
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(lanes16(acc) / (float)D + eps);
}

/* Row r of y = (x - mean) * rstd * g (+ b). */
AVX2_INLINE void y_row(const cpu_norm_bwd *a, int64_t r, v16 vm, v16 vr) {
    const int64_t D = a->D;
    const float *x = a->x + r * D;
    float *y = a->y + r * D;
    for (int64_t i = 0; i < D; i += 16) {
        int64_t k = D - i < 16 ? D - i : 16;
        v16 t = mul16(mul16(sub16(load16(x + i, k), vm), vr), load16(a->gain + i, k));
        if (a->bias) t = add16(t, load16(a->bias + i, k));
        store16(y + i, t, k);
    }
}

/* y, and the statistics when a->stats. */
AVX2 static void fwd_rows(void *arg, int64_t lo, int64_t hi) {
    const cpu_norm_bwd *a = arg;
    for (int64_t r = lo; r < hi; r++) {
        float mean, rstd;
        stats_row(a->x + r * a->D, a->D, a->rms, a->eps, &mean, &rstd);
        if (a->stats) a->stats[2 * r] = mean, a->stats[2 * r + 1] = rstd;
        y_row(a, r, splat16(mean), splat16(rstd));
    }
}

/* kernels_nn.c's norm_bwd_rows: statistics, y again when wanted, then
 * dx = rstd * (gy g - mean(gy g) - xh mean(gy g xh)) (+ resid). */
AVX2 static void bwd_rows(void *arg, int64_t lo, int64_t hi) {
    const cpu_norm_bwd *a = arg;
    const int64_t D = a->D;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = a->x + r * D, *gy = a->gy + r * D;
        float mean, rstd;
        stats_row(x, D, a->rms, a->eps, &mean, &rstd);
        if (a->stats) a->stats[2 * r] = mean, a->stats[2 * r + 1] = rstd;
        v16 vm = splat16(mean), vr = splat16(rstd);
        if (a->y) y_row(a, r, vm, vr);
        v16 sa = splat16(0.0f), sb = splat16(0.0f);
        for (int64_t i = 0; i < D; i += 16) {
            int64_t k = D - i < 16 ? D - i : 16;
            v16 d = mul16(load16(gy + i, k), load16(a->gain + i, k));
            sa = add16(sa, d);
            sb = add16(sb, mul16(d, mul16(sub16(load16(x + i, k), vm), vr)));
        }
        v16 ma = splat16(a->rms ? 0.0f : lanes16(sa) / (float)D), mb = splat16(lanes16(sb) / (float)D);
        float *out = a->out + r * D;
        const float *res = a->resid ? a->resid + r * D : NULL;
        for (int64_t i = 0; i < D; i += 16) {
            int64_t k = D - i < 16 ? D - i : 16;
            v16 xh = mul16(sub16(load16(x + i, k), vm), vr);
            v16 t = mul16(vr, sub16(sub16(mul16(load16(gy + i, k), load16(a->gain + i, k)), ma), mul16(xh, mb)));
            if (res) t = add16(load16(res + i, k), t);
            store16(out + i, t, k);
        }
    }
}

tg_range_fn tg_cpu_norm_rows_avx2(bool backward) { return backward ? bwd_rows : fwd_rows; }

/* norm_dgain_block and norm_sums_block: 32 columns at a time, rows in order. */
AVX2 static void cols(int64_t D, int64_t r0, int64_t r1, const float *X, const float *GY, const float *st, float *dg,
                      float *db) {
    for (int64_t i = 0; i < D; i += 32) {
        __m256i k[4];
        __m256 acc[4], col[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) k[q] = lanes8(D - i - 8 * q), acc[q] = col[q] = _mm256_setzero_ps();
        for (int64_t r = r0; r < r1; r++) {
            const float *x = X + r * D + i, *gy = GY + r * D + i;
            __m256 vm = _mm256_set1_ps(st[2 * r]), vr = _mm256_set1_ps(st[2 * r + 1]);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                __m256 g = _mm256_maskload_ps(gy + 8 * q, k[q]);
                __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + 8 * q, k[q]), vm), vr);
                acc[q] = _mm256_add_ps(acc[q], _mm256_mul_ps(g, xh));
                if (db) col[q] = _mm256_add_ps(col[q], g);
            }
        }
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            _mm256_maskstore_ps(dg + i + 8 * q, k[q], acc[q]);
            if (db) _mm256_maskstore_ps(db + i + 8 * q, k[q], col[q]);
        }
    }
}

bool tg_cpu_norm_cols_avx2(int64_t D, int64_t r0, int64_t r1, const float *x, const float *gy, const float *st,
                        float *dg, float *db) {
    cols(D, r0, r1, x, gy, st, dg, db);
    return true;
}
#else
tg_range_fn tg_cpu_norm_rows_avx2(bool backward) { return (void)backward, NULL; }
bool tg_cpu_norm_cols_avx2(int64_t D, int64_t r0, int64_t r1, const float *x, const float *gy, const float *st,
                        float *dg, float *db) {
    return false;
}
#endif
