/* AVX-512 helpers shared by the CPU kernels that have an AVX-512 path (the
 * GEMM micro-kernels, fused attention). Include only under
 * `#if defined(__x86_64__) && defined(__GNUC__)`: the functions carry their
 * own target attribute, so the rest of the file builds for the baseline ISA
 * and the caller picks the path at run time. */
#ifndef TG_CPU_AVX512_H
#define TG_CPU_AVX512_H

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,fma")))
#define AVX512_INLINE __attribute__((target("avx512f,fma"), always_inline)) static inline

/* 16 x 16 transpose in registers: 32-bit then 64-bit interleaves within
 * 128-bit lanes, then two rounds of lane shuffles. */
AVX512_INLINE void transpose16(__m512 v[16]) {
    __m512 a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        a[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a0 = _mm512_castps_pd(a[i]), a1 = _mm512_castps_pd(a[i + 1]), a2 = _mm512_castps_pd(a[i + 2]),
                a3 = _mm512_castps_pd(a[i + 3]);
        b[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        b[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        b[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        b[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    /* b[4g + c], 128-bit lane L: column 4L + c of rows 4g..4g+3 */
    for (int c = 0; c < 4; c++) {
        __m512 s0 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44), s1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xee);
        __m512 s2 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
        __m512 s3 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xee);
        v[c] = _mm512_shuffle_f32x4(s0, s2, 0x88);
        v[4 + c] = _mm512_shuffle_f32x4(s0, s2, 0xdd);
        v[8 + c] = _mm512_shuffle_f32x4(s1, s3, 0x88);
        v[12 + c] = _mm512_shuffle_f32x4(s1, s3, 0xdd);
    }
}

#endif
