/* Float math on 16 lanes at a time (GCC/Clang vector extensions), for the
 * elementwise kernels: exp, tanh, erfc, erf and the normal CDF without a libm
 * call per element, so loops over them compile to SIMD at -O2 on any target.
 *
 * Every function is a fixed sequence of IEEE operations with no
 * data-dependent branches and (under -std=c11, which turns FP contraction
 * off) no fused multiply-adds, so a lane gives the same bits whichever
 * instruction set runs it and whichever chunk of a tensor it falls in:
 * results do not depend on the thread count or on the CPU's vector width.
 *
 * Accuracy (checked against double libm in tests/test_math_ops.c): exp and
 * tanh within a few ulp; erf/erfc/Phi within about 3e-7 absolute and 1e-6
 * relative where the result is not tiny. */
#ifndef TG_VMATH_H
#define TG_VMATH_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Every helper is forced inline: the kernels calling them are compiled for
 * several targets (TG_MULTI, isa.h), and an out-of-line call would pass
 * 64-byte vectors under two different ABIs. */
#define VINLINE static inline __attribute__((always_inline))

#define VL 16
typedef float vf __attribute__((vector_size(4 * VL)));
typedef int32_t vi __attribute__((vector_size(4 * VL)));
typedef uint32_t vu __attribute__((vector_size(4 * VL)));

VINLINE vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
VINLINE void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* The first n < VL lanes; the rest are zero (harmless to every function here). */
VINLINE vf vload_n(const float *p, int64_t n) {
    vf v = {0};
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}
VINLINE void vstore_n(float *p, vf v, int64_t n) { memcpy(p, &v, (size_t)n * sizeof(float)); }

/* m <= VL lanes of p[k * st]: stride 1 loads, stride 0 (a broadcast operand)
 * splats, anything else gathers. */
VINLINE vf vload_st(const float *p, int64_t st, int64_t m) {
    if (st == 1) {
        if (m == VL) return vload(p);
        return vload_n(p, m);
    }
    vf v = {0};
    if (st == 0) return v + p[0];
    for (int64_t k = 0; k < m; k++) v[k] = p[k * st];
    return v;
}
/* Lane shuffles of one vector or two (indices 0..2*VL-1 pick from a then b),
 * constant indices only: GCC spells it __builtin_shuffle with a mask
 * vector, Clang __builtin_shufflevector with the indices as arguments. */
#if defined(__clang__)
#define VSHUF(a, ...) __builtin_shufflevector(a, a, __VA_ARGS__)
#define VSHUF2(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define VSHUF(a, ...) __builtin_shuffle(a, (vi){__VA_ARGS__})
#define VSHUF2(a, b, ...) __builtin_shuffle(a, b, (vi){__VA_ARGS__})
#endif

/* c + a * b rounded once, lane by lane: inside a kernel compiled for a
 * target with FMA (TG_MULTI) each is one fused instruction. */
VINLINE vf vfma(vf a, vf b, vf c) {
    vf r;
    for (int i = 0; i < VL; i++) r[i] = __builtin_fmaf(a[i], b[i], c[i]);
    return r;
}

/* 0 + v in every lane (so -0 comes out +0, as it always has). Written as a
 * loop, which GCC turns into one broadcast: the vector-scalar form (and so
 * any `x * s` with a scalar s) goes through the stack lane by lane on AVX2,
 * so hot loops hoist their scalars into vsplat()s. Clang for WebAssembly
 * does the opposite: the loop goes through the stack, the vector-scalar
 * form is one splat. */
#if defined(__wasm__)
VINLINE vf vsplat(float v) { return (vf){0} + v; }
#else
VINLINE vf vsplat(float v) {
    vf r;
    float s = 0.0f + v;
    for (int i = 0; i < VL; i++) r[i] = s;
    return r;
}
#endif
VINLINE vf vsel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
VINLINE vf vabs(vf x) { return (vf)((vi)x & 0x7fffffff); }
/* sign bit of x copied onto |y| */
VINLINE vf vcopysign(vf y, vf x) { return (vf)(((vi)y & 0x7fffffff) | ((vi)x & (int32_t)0x80000000)); }
/* Clamps with NaN passing through (comparisons with NaN are false). */
VINLINE vf vclamp(vf x, float lo, float hi) {
    x = vsel(x < lo, vsplat(lo), x);
    return vsel(x > hi, vsplat(hi), x);
}
/* floor for |x| < 2^31 */
VINLINE vf vfloor(vf x) {
    vf t = __builtin_convertvector(__builtin_convertvector(x, vi), vf);
    return vsel(t > x, t - 1.0f, t);
}
/* 2^n for integer n in [-126, 127] */
VINLINE vf vpow2i(vi n) { return (vf)((vu)(n + 127) << 23); }

/* e^x. Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a degree-7
 * polynomial (Cephes' coefficients) for e^r, then 2^n applied in two halves
 * so results down to the denormals and up to overflow come out right. */
VINLINE vf vexp(vf x) {
    x = vclamp(x, -104.0f, 89.0f);
    vf n = vfloor(x * 1.44269504088896341f + 0.5f);
    vf r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vf p = vsplat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    vi k = __builtin_convertvector(n, vi);
    vi k1 = k >> 1;
    return p * vpow2i(k1) * vpow2i(k - k1);
}

/* vexp through a pointer, for kernels that carry a target attribute: Clang
 * rejects passing a 64-byte vector by value between functions compiled for
 * different targets (an ABI change), even when the call is inlined. */
VINLINE void vexp_at(vf *x) { *x = vexp(*x); }

/* log x for positive normal x (the callers guarantee it): x = m 2^e with
 * m in [sqrt(1/2), sqrt 2), a degree-9 polynomial in m - 1 (Cephes'). */
VINLINE vf vlog_pos(vf x) {
    vi bits = (vi)x;
    vf e = __builtin_convertvector(((bits >> 23) & 0xff) - 126, vf);
    vf m = (vf)((bits & 0x807fffff) | 0x3f000000); /* in [0.5, 1) */
    vi small = m < 0.707106781186547524f;
    e = vsel(small, e - 1.0f, e);
    m = vsel(small, m + m, m) - 1.0f;
    vf z = m * m;
    vf p = vsplat(7.0376836292e-2f);
    p = p * m + -1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m + -1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m + -1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m + -2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    vf y = p * m * z;
    y = y + e * -2.12194440e-4f;
    y = y + -0.5f * z;
    return m + y + e * 0.693359375f;
}

/* log(1 + a) for a in [0, 1]: log(u) a / (u - 1) with u = 1 + a rounded,
 * which cancels u's rounding error (u - 1 is exact); a itself when u = 1. */
VINLINE vf vlog1p_unit(vf a) {
    vf u = 1.0f + a, d = u - 1.0f;
    vf r = vlog_pos(u) * (a / vsel(d == 0.0f, vsplat(1.0f), d));
    return vsel(d == 0.0f, a, r);
}

/* 1 - e^-y for y >= 0. Where that is below 1/2, (1 - u) y / -log u with
 * u = e^-y rounded (Kahan's expm1 trick) cancels u's rounding error, so
 * tiny y keep their digits; y itself when u rounds to 1. */
VINLINE vf vone_minus_exp_neg(vf y) {
    vf u = vexp(-y), d = 1.0f - u;
    vi near1 = u > 0.5f;
    vf k = d * (y / -vlog_pos(vsel(near1, u, vsplat(0.75f))));
    return vsel(near1, vsel(d == 0.0f, y, k), d);
}

/* sin and cos (cos when want_cos): Cody-Waite reduction by pi/4 in three
 * parts, then Cephes' polynomials on [-pi/4, pi/4]. Accurate to a few ulp
 * for |x| <= 8192; callers send larger or non-finite lanes to libm
 * (vsincos_ok says which lanes are in range). */
#define VSINCOS_MAX 8192.0f
VINLINE vi vsincos_ok(vf x) { return vabs(x) <= VSINCOS_MAX; }
VINLINE vf vsincos(vf x, bool want_cos) {
    vf a = vsel(vsincos_ok(x), vabs(x), vsplat(0.0f));
    vi j = __builtin_convertvector(a * 1.27323954473516f, vi); /* 4 / pi */
    j = (j + 1) & ~1;                                             /* even octant */
    vf q = __builtin_convertvector(j, vf);
    vf r = ((a - q * 0.78515625f) - q * 2.4187564849853515625e-4f) - q * 3.77489497744594108e-8f;
    vf z = r * r;
    vf ps = vsplat(-1.9515295891e-4f);
    ps = ps * z + 8.3321608736e-3f;
    ps = ps * z + -1.6666654611e-1f;
    ps = ps * z * r + r;
    vf pc = vsplat(2.443315711809948e-5f);
    pc = pc * z + -1.388731625493765e-3f;
    pc = pc * z + 4.166664568298827e-2f;
    pc = pc * z * z - 0.5f * z + 1.0f;
    /* octant j in {0, 2, 4, 6}: sin takes ps, pc, -ps, -pc; cos takes pc, -ps, -pc, ps */
    vi k = want_cos ? j + 2 : j;
    vf v = vsel((k & 2) != 0, pc, ps);
    vi neg = (k & 4) != 0;
    if (!want_cos) neg ^= (vi)x < 0; /* the sign bit, so sin(-0) = -0 */
    return (vf)((vi)v ^ (neg & (int32_t)0x80000000));
}

/* tanh: x P(x^2) / Q(x^2), a [13/6] rational minimax fit on |x| <= 7.9053
 * (beyond which tanh rounds to +-1 in float); tiny |x| returns x. */
VINLINE vf vtanh(vf x) {
    vf c = vclamp(x, -7.90531110763549805f, 7.90531110763549805f);
    vf x2 = c * c;
    vf p = vsplat(-2.76076847742355e-16f);
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * c;
    vf q = vsplat(1.19825839466702e-06f);
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return vsel(vabs(x) < 0.0004f, x, p / q);
}

/* 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below, so the exponential
 * never overflows and the left tail keeps its relative accuracy down to the
 * denormals. */
VINLINE vf vsigmoid(vf x) {
    vf e = vexp(-vabs(x)), r = 1.0f / (1.0f + e);
    return vsel(x < 0.0f, e * r, r);
}

/* erfc(z) for z >= 0: t exp(-z^2 + P(t)), t = 1 / (1 + z/2), the Chebyshev
 * fit of Numerical Recipes (relative error < 1.2e-7 over the whole range).
 * Relative accuracy in the tail is what makes gelu's left side right. */
VINLINE vf verfc_pos(vf z) {
    vf t = 1.0f / (1.0f + 0.5f * z);
    vf p = vsplat(0.17087277f);
    p = p * t + -0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t + -1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t + -0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t + -1.26551223f;
    return t * vexp(p - z * z);
}

/* erf: the odd Taylor series near 0 (where 1 - erfc would cancel), else
 * 1 - erfc(|x|) with x's sign. */
VINLINE vf verf(vf x) {
    vf a = vabs(x), x2 = x * x;
    vf s = vsplat(-1.0f / 75600.0f); /* 2/sqrt(pi) (x - x^3/3 + x^5/10 - ... - x^15/75600) */
    s = s * x2 + 1.0f / 9360.0f;
    s = s * x2 + -1.0f / 1320.0f;
    s = s * x2 + 1.0f / 216.0f;
    s = s * x2 + -1.0f / 42.0f;
    s = s * x2 + 1.0f / 10.0f;
    s = s * x2 + -1.0f / 3.0f;
    s = s * x2 + 1.0f;
    s = s * x * 1.12837916709551257f;
    vf big = vcopysign(1.0f - verfc_pos(a), x);
    return vsel(a < 0.5f, s, big);
}

/* The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, from the side
 * where erfc is small, so Phi keeps its relative accuracy for x << 0. */
VINLINE vf vphi(vf x) {
    vf e = 0.5f * verfc_pos(vabs(x) * 0.70710678118654752f);
    return vsel(x < 0.0f, e, 1.0f - e);
}
#endif
