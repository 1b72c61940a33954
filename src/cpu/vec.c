/* Elementwise loops: plain C, the same over 16-lane vectors compiled per
 * path (TG_MULTI: AVX2, NEON, the baseline), and AVX-512 with masked tails. */
#include <math.h>

#include "isa.h"
#include "../optim/update.h"
#include "vec.h"
#include "vmath.h"

/* ---- plain C ---- */

static inline float apply(vec_op op, float a, float b) {
    switch (op) {
    case VEC_ADD: return a + b;
    case VEC_SUB: return a - b;
    case VEC_MUL: return a * b;
    default: return a / b;
    }
}

static void binary_c(vec_op op, int64_t n, float *o, const float *a, int64_t sa, const float *b, int64_t sb) {
    for (int64_t i = 0; i < n; i++) o[i] = apply(op, a[i * sa], b[i * sb]);
}

static void binary_row_c(vec_op op, int64_t rows, int64_t cols, float *o, const float *a, const float *row,
                         bool row_left) {
    for (int64_t r = 0; r < rows; r++, o += cols, a += cols)
        for (int64_t j = 0; j < cols; j++) o[j] = row_left ? apply(op, row[j], a[j]) : apply(op, a[j], row[j]);
}

static void relu_c(int64_t n, float *o, const float *x) {
    for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_grad_c(int64_t n, float *o, const float *y, const float *gy) {
    for (int64_t i = 0; i < n; i++) o[i] = y[i] > 0.0f ? gy[i] : 0.0f;
}

static void colsum_c(int64_t rows, int64_t cols, int64_t j0, int64_t j1, const float *x, float *y) {
    for (int64_t j = j0; j < j1; j++) y[j] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = j0; j < j1; j++) y[j] += x[r * cols + j];
}

static void adam_c(int64_t n, float *mo, float *vo, float *po, const float *m, const float *v, const float *g,
                   const float *p, float gs, float b1, float b2, float lrt, float shrink, float eps) {
    float ob1 = 1.0f - b1, ob2 = 1.0f - b2;
    for (int64_t i = 0; i < n; i++) {
        float gi = TG_OPT_GRAD(tg_s, g[i], gs), pi = p[i];
        float mi = TG_ADAM_M(tg_s, b1, ob1, m[i], gi), vi = TG_ADAM_V(tg_s, b2, ob2, v[i], gi);
        mo[i] = mi, vo[i] = vi;
        po[i] = TG_ADAM_P(tg_s, shrink, lrt, eps, pi, mi, vi);
    }
}

static const vec_kernels k_c = {binary_c, binary_row_c, relu_c, relu_grad_c, colsum_c, adam_c};
const vec_kernels *tg_vec_generic(void) { return &k_c; }

/* ---- vectors: the plain C loops VL elements at a time (the same float
 * operations, so the same bits), the tail through vload_n / vstore_n ---- */

VINLINE vf vtail(const float *p, int64_t m) { return m == VL ? vload(p) : vload_n(p, m); }
VINLINE vf vapply_v(vec_op op, vf a, vf b) {
    switch (op) {
    case VEC_ADD: return a + b;
    case VEC_SUB: return a - b;
    case VEC_MUL: return a * b;
    default: return a / b;
    }
}
/* OP is a constant in each call below, so the switch folds away. */
VINLINE void binary_op_v(const vec_op OP, int64_t n, float *o, const float *a, int64_t sa, const float *b,
                         int64_t sb) {
    vf as = vsplat(a[0]), bs = vsplat(b[0]);
    for (int64_t i = 0; i < n; i += VL) {
        int64_t m = n - i < VL ? n - i : VL;
        vstore_n(o + i, vapply_v(OP, sa ? vtail(a + i, m) : as, sb ? vtail(b + i, m) : bs), m);
    }
}
TG_MULTI(static, binary_v, (vec_op op, int64_t n, float *o, const float *a, int64_t sa, const float *b, int64_t sb),
         (op, n, o, a, sa, b, sb)) {
    if (n <= 0) return;
    switch (op) {
    case VEC_ADD: binary_op_v(VEC_ADD, n, o, a, sa, b, sb); break;
    case VEC_SUB: binary_op_v(VEC_SUB, n, o, a, sa, b, sb); break;
    case VEC_MUL: binary_op_v(VEC_MUL, n, o, a, sa, b, sb); break;
    default: binary_op_v(VEC_DIV, n, o, a, sa, b, sb); break;
    }
}
TG_MULTI(static, binary_row_v,
         (vec_op op, int64_t rows, int64_t cols, float *o, const float *a, const float *row, bool row_left),
         (op, rows, cols, o, a, row, row_left)) {
    for (int64_t r = 0; r < rows; r++, o += cols, a += cols)
        for (int64_t j = 0; j < cols; j += VL) {
            int64_t m = cols - j < VL ? cols - j : VL;
            vf x = vtail(a + j, m), w = vtail(row + j, m);
            vstore_n(o + j, row_left ? vapply_v(op, w, x) : vapply_v(op, x, w), m);
        }
}
TG_MULTI(static, relu_v, (int64_t n, float *o, const float *x), (n, o, x)) {
    for (int64_t i = 0; i < n; i += VL) {
        int64_t m = n - i < VL ? n - i : VL;
        vf v = vtail(x + i, m);
        vstore_n(o + i, vsel(v > 0.0f, v, vsplat(0.0f)), m);
    }
}
TG_MULTI(static, relu_grad_v, (int64_t n, float *o, const float *y, const float *gy), (n, o, y, gy)) {
    for (int64_t i = 0; i < n; i += VL) {
        int64_t m = n - i < VL ? n - i : VL;
        vstore_n(o + i, vsel(vtail(y + i, m) > 0.0f, vtail(gy + i, m), vsplat(0.0f)), m);
    }
}
/* 4 VL columns at a time, in registers, down all the rows. */
TG_MULTI(static, colsum_v, (int64_t rows, int64_t cols, int64_t j0, int64_t j1, const float *x, float *y),
         (rows, cols, j0, j1, x, y)) {
    for (int64_t j = j0; j < j1; j += 4 * VL) {
        int64_t m[4];
        vf s[4];
        for (int q = 0; q < 4; q++) {
            int64_t left = j1 - j - q * VL;
            m[q] = left <= 0 ? 0 : left < VL ? left : VL;
            s[q] = vsplat(0.0f);
        }
        for (int64_t r = 0; r < rows; r++)
            for (int q = 0; q < 4; q++)
                if (m[q]) s[q] += vtail(x + r * cols + j + q * VL, m[q]);
        for (int q = 0; q < 4; q++)
            if (m[q]) vstore_n(y + j + q * VL, s[q], m[q]);
    }
}

/* Adam stays plain C: a vector sqrt has no portable spelling. */
static const vec_kernels k_v = {binary_v, binary_row_v, relu_v, relu_grad_v, colsum_v, adam_c};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define AVX512_INLINE __attribute__((target("avx512f"), always_inline)) static inline

static inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

AVX512_INLINE __m512 vapply(vec_op op, __m512 a, __m512 b) {
    switch (op) {
    case VEC_ADD: return _mm512_add_ps(a, b);
    case VEC_SUB: return _mm512_sub_ps(a, b);
    case VEC_MUL: return _mm512_mul_ps(a, b);
    default: return _mm512_div_ps(a, b);
    }
}

/* OP is a constant in each instance below, so the switch folds away. */
AVX512_INLINE void binary_body(const vec_op OP, int64_t n, float *o, const float *a, int64_t sa, const float *b,
                               int64_t sb) {
    __m512 as = _mm512_set1_ps(a[0]), bs = _mm512_set1_ps(b[0]);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 x = sa ? _mm512_maskz_loadu_ps(k, a + i) : as, y = sb ? _mm512_maskz_loadu_ps(k, b + i) : bs;
        _mm512_mask_storeu_ps(o + i, k, vapply(OP, x, y));
    }
}

AVX512 static void binary_512(vec_op op, int64_t n, float *o, const float *a, int64_t sa, const float *b, int64_t sb) {
    if (n <= 0) return;
    switch (op) {
    case VEC_ADD: binary_body(VEC_ADD, n, o, a, sa, b, sb); break;
    case VEC_SUB: binary_body(VEC_SUB, n, o, a, sa, b, sb); break;
    case VEC_MUL: binary_body(VEC_MUL, n, o, a, sa, b, sb); break;
    default: binary_body(VEC_DIV, n, o, a, sa, b, sb); break;
    }
}

AVX512 static void binary_row_512(vec_op op, int64_t rows, int64_t cols, float *o, const float *a, const float *row,
                                  bool row_left) {
    for (int64_t r = 0; r < rows; r++, o += cols, a += cols)
        for (int64_t j = 0; j < cols; j += 16) {
            __mmask16 k = tail_mask(cols - j);
            __m512 x = _mm512_maskz_loadu_ps(k, a + j), w = _mm512_maskz_loadu_ps(k, row + j);
            _mm512_mask_storeu_ps(o + j, k, row_left ? vapply(op, w, x) : vapply(op, x, w));
        }
}

/* max returns its second operand when either is NaN, and +0 for -0: the
 * same as x > 0 ? x : 0. */
AVX512 static void relu_512(int64_t n, float *o, const float *x) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(o + i, k, _mm512_max_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_setzero_ps()));
    }
}

AVX512 static void relu_grad_512(int64_t n, float *o, const float *y, const float *gy) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __mmask16 pos = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, y + i), _mm512_setzero_ps(), _CMP_GT_OQ);
        _mm512_mask_storeu_ps(o + i, k, _mm512_maskz_loadu_ps(pos, gy + i));
    }
}

/* 64 columns at a time, in registers, down all the rows. */
AVX512 static void colsum_512(int64_t rows, int64_t cols, int64_t j0, int64_t j1, const float *x, float *y) {
    for (int64_t j = j0; j < j1; j += 64) {
        __mmask16 k[4];
        __m512 s[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) k[q] = j + 16 * q < j1 ? tail_mask(j1 - j - 16 * q) : 0, s[q] = _mm512_setzero_ps();
        for (int64_t r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
                s[q] = _mm512_add_ps(s[q], _mm512_maskz_loadu_ps(k[q], x + r * cols + j + 16 * q));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) _mm512_mask_storeu_ps(y + j + 16 * q, k[q], s[q]);
    }
}

/* AVX-512 as a backend of optim/update.h */
#define tg_z_add _mm512_add_ps
#define tg_z_sub _mm512_sub_ps
#define tg_z_mul _mm512_mul_ps
#define tg_z_div _mm512_div_ps
#define tg_z_sqrt _mm512_sqrt_ps

AVX512 static void adam_512(int64_t n, float *mo, float *vo, float *po, const float *m, const float *v,
                            const float *g, const float *p, float gs, float b1, float b2, float lrt, float shrink,
                            float eps) {
    const __m512 vb1 = _mm512_set1_ps(b1), vc1 = _mm512_set1_ps(1.0f - b1), vb2 = _mm512_set1_ps(b2),
                 vc2 = _mm512_set1_ps(1.0f - b2), vlrt = _mm512_set1_ps(lrt), vsh = _mm512_set1_ps(shrink),
                 veps = _mm512_set1_ps(eps), vgs = _mm512_set1_ps(gs);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 gi = TG_OPT_GRAD(tg_z, _mm512_maskz_loadu_ps(k, g + i), vgs), pi = _mm512_maskz_loadu_ps(k, p + i);
        __m512 mi = TG_ADAM_M(tg_z, vb1, vc1, _mm512_maskz_loadu_ps(k, m + i), gi);
        __m512 vi = TG_ADAM_V(tg_z, vb2, vc2, _mm512_maskz_loadu_ps(k, v + i), gi);
        _mm512_mask_storeu_ps(mo + i, k, mi);
        _mm512_mask_storeu_ps(vo + i, k, vi);
        _mm512_mask_storeu_ps(po + i, k, TG_ADAM_P(tg_z, vsh, vlrt, veps, pi, mi, vi));
    }
}

static const vec_kernels k_512 = {binary_512, binary_row_512, relu_512, relu_grad_512, colsum_512, adam_512};

/* AVX2 in 8-lane registers where the 16-lane bodies carry vectors from one
 * iteration to the next (GCC keeps those on the stack without AVX-512);
 * the same operations in the same order as colsum_c and adam_c. */
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

AVX2_INLINE __m256i lanes8(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 32 columns at a time, in registers, down all the rows. */
AVX2 static void colsum_avx2(int64_t rows, int64_t cols, int64_t j0, int64_t j1, const float *x, float *y) {
    for (int64_t j = j0; j < j1; j += 32) {
        __m256i k[4];
        __m256 s[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) k[q] = lanes8(j1 - j - 8 * q), s[q] = _mm256_setzero_ps();
        if (j + 32 <= j1)
            for (int64_t r = 0; r < rows; r++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) s[q] = _mm256_add_ps(s[q], _mm256_loadu_ps(x + r * cols + j + 8 * q));
        else
            for (int64_t r = 0; r < rows; r++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    s[q] = _mm256_add_ps(s[q], _mm256_maskload_ps(x + r * cols + j + 8 * q, k[q]));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) _mm256_maskstore_ps(y + j + 8 * q, k[q], s[q]);
    }
}

/* AVX2 as a backend of optim/update.h */
#define tg_y_add _mm256_add_ps
#define tg_y_sub _mm256_sub_ps
#define tg_y_mul _mm256_mul_ps
#define tg_y_div _mm256_div_ps
#define tg_y_sqrt _mm256_sqrt_ps

AVX2 static void adam_avx2(int64_t n, float *mo, float *vo, float *po, const float *m, const float *v,
                           const float *g, const float *p, float gs, float b1, float b2, float lrt, float shrink,
                           float eps) {
    const __m256 vb1 = _mm256_set1_ps(b1), vc1 = _mm256_set1_ps(1.0f - b1), vb2 = _mm256_set1_ps(b2),
                 vc2 = _mm256_set1_ps(1.0f - b2), vlrt = _mm256_set1_ps(lrt), vsh = _mm256_set1_ps(shrink),
                 veps = _mm256_set1_ps(eps), vgs = _mm256_set1_ps(gs);
    for (int64_t i = 0; i < n; i += 8) {
        __m256i k = lanes8(n - i);
        __m256 gi = TG_OPT_GRAD(tg_y, _mm256_maskload_ps(g + i, k), vgs), pi = _mm256_maskload_ps(p + i, k);
        __m256 mi = TG_ADAM_M(tg_y, vb1, vc1, _mm256_maskload_ps(m + i, k), gi);
        __m256 vi = TG_ADAM_V(tg_y, vb2, vc2, _mm256_maskload_ps(v + i, k), gi);
        _mm256_maskstore_ps(mo + i, k, mi);
        _mm256_maskstore_ps(vo + i, k, vi);
        _mm256_maskstore_ps(po + i, k, TG_ADAM_P(tg_y, vsh, vlrt, veps, pi, mi, vi));
    }
}

static const vec_kernels k_avx2 = {binary_v, binary_row_v, relu_v, relu_grad_v, colsum_avx2, adam_avx2};
#endif

const vec_kernels *tg_vec_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (tg_cpu_isa() == CPU_AVX512) return &k_512;
    if (tg_cpu_isa() == CPU_AVX2) return &k_avx2;
#endif
    return tg_cpu_isa() == CPU_GENERIC ? &k_c : &k_v;
}
