/* GEMM micro-kernels. The AVX-512 kernel is compiled for that target only
 * (function attribute) and chosen at run time, so the library still runs on
 * CPUs without it. */
#include "gemm_kernels.h"

#define GMR 8
#define GNR 16
static void ukr_generic(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int accumulate) {
    float t[GMR][GNR] = {{0}};
    for (int64_t k = 0; k < kc; k++, a += GMR, b += GNR)
        for (int r = 0; r < GMR; r++)
            for (int q = 0; q < GNR; q++) t[r][q] += a[r] * b[q];
    for (int r = 0; r < GMR; r++)
        for (int q = 0; q < GNR; q++) c[r * ldc + q] = accumulate ? c[r * ldc + q] + t[r][q] : t[r][q];
}
static const tg_ukernel k_generic = {"generic 8x16", GMR, GNR, ukr_generic};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* 12 rows x 32 columns: 24 accumulators, 2 B vectors, 1 broadcast. */
__attribute__((target("avx512f,fma"))) static void ukr_avx512(int64_t kc, const float *a, const float *b, float *c,
                                                                 int64_t ldc, int accumulate) {
    __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a, c3b = c0a,
           c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a, c7a = c0a, c7b = c0a, c8a = c0a,
           c8b = c0a, c9a = c0a, c9b = c0a, cAa = c0a, cAb = c0a, cBa = c0a, cBb = c0a;
    for (int64_t k = 0; k < kc; k++, a += 12, b += 32) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16), x;
        _mm_prefetch((const char *)(b + 32 * 8), _MM_HINT_T0);
#define ROW(r, ca, cb)                      \
    x = _mm512_set1_ps(a[r]);               \
    ca = _mm512_fmadd_ps(x, b0, ca);        \
    cb = _mm512_fmadd_ps(x, b1, cb);
        ROW(0, c0a, c0b) ROW(1, c1a, c1b) ROW(2, c2a, c2b) ROW(3, c3a, c3b) ROW(4, c4a, c4b) ROW(5, c5a, c5b)
        ROW(6, c6a, c6b) ROW(7, c7a, c7b) ROW(8, c8a, c8b) ROW(9, c9a, c9b) ROW(10, cAa, cAb) ROW(11, cBa, cBb)
#undef ROW
    }
#define OUT(r, ca, cb)                                                              \
    if (accumulate) {                                                               \
        ca = _mm512_add_ps(ca, _mm512_loadu_ps(c + (r) * ldc));                     \
        cb = _mm512_add_ps(cb, _mm512_loadu_ps(c + (r) * ldc + 16));                \
    }                                                                               \
    _mm512_storeu_ps(c + (r) * ldc, ca);                                            \
    _mm512_storeu_ps(c + (r) * ldc + 16, cb);
    OUT(0, c0a, c0b) OUT(1, c1a, c1b) OUT(2, c2a, c2b) OUT(3, c3a, c3b) OUT(4, c4a, c4b) OUT(5, c5a, c5b)
    OUT(6, c6a, c6b) OUT(7, c7a, c7b) OUT(8, c8a, c8b) OUT(9, c9a, c9b) OUT(10, cAa, cAb) OUT(11, cBa, cBb)
#undef OUT
}
static const tg_ukernel k_avx512 = {"avx512 12x32", 12, 32, ukr_avx512};
#endif

const tg_ukernel *tg_ukernel_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return &k_avx512;
#endif
    return &k_generic;
}
