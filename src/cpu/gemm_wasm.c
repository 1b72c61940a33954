/* The WebAssembly SIMD GEMM micro-kernel (gemm_kernels.h), 128-bit lanes:
 * 6 rows x 8 columns, 12 accumulators, two B vectors and one broadcast of A
 * (15 vector values: the 16 x86 registers a browser engine maps them to).
 * WebAssembly SIMD has no fused multiply-add, so each product is a
 * multiply then an add, over k from zero, as the portable kernel does:
 * every element comes out bitwise equal to the portable kernel's, edge
 * tiles included (they run the portable steps one element at a time). */
#include "gemm_kernels.h"

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>

#define WMR 6
#define WNR 8

/* A full 6 x 8 tile: per k, one B row of 8 (two vectors) and each A value
 * broadcast; two k a turn (the same order of additions). */
static void tile_full(const tg_tile *t) {
    v128_t c[WMR][2];
    for (int r = 0; r < WMR; r++) c[r][0] = c[r][1] = wasm_f32x4_splat(0.0f);
    const float *a = t->a, *b = t->b;
    const int64_t rs = t->rs_a, cs = t->cs_a, ldb = t->ldb;
    int64_t k = 0;
#define ROW(r, ak, b0, b1)                                               \
    {                                                                    \
        v128_t x = wasm_v128_load32_splat((ak) + (r) * rs);              \
        c[r][0] = wasm_f32x4_add(c[r][0], wasm_f32x4_mul(x, b0));        \
        c[r][1] = wasm_f32x4_add(c[r][1], wasm_f32x4_mul(x, b1));        \
    }
    for (; k + 1 < t->kc; k += 2, a += 2 * cs, b += 2 * ldb) {
        v128_t b0 = wasm_v128_load(b), b1 = wasm_v128_load(b + 4);
        ROW(0, a, b0, b1) ROW(1, a, b0, b1) ROW(2, a, b0, b1) ROW(3, a, b0, b1) ROW(4, a, b0, b1) ROW(5, a, b0, b1)
        b0 = wasm_v128_load(b + ldb), b1 = wasm_v128_load(b + ldb + 4);
        ROW(0, a + cs, b0, b1) ROW(1, a + cs, b0, b1) ROW(2, a + cs, b0, b1)
        ROW(3, a + cs, b0, b1) ROW(4, a + cs, b0, b1) ROW(5, a + cs, b0, b1)
    }
    for (; k < t->kc; k++, a += cs, b += ldb) {
        v128_t b0 = wasm_v128_load(b), b1 = wasm_v128_load(b + 4);
        ROW(0, a, b0, b1) ROW(1, a, b0, b1) ROW(2, a, b0, b1) ROW(3, a, b0, b1) ROW(4, a, b0, b1) ROW(5, a, b0, b1)
    }
#undef ROW
    for (int r = 0; r < WMR; r++) {
        float v[WNR];
        wasm_v128_store(v, c[r][0]);
        wasm_v128_store(v + 4, c[r][1]);
        for (int q = 0; q < WNR; q++) t->c[r * t->ldc + q] = tg_tile_epilogue(t, r, q, v[q]);
    }
}

static void tile_simd128(const tg_tile *t) { (t->mr == WMR && t->nr == WNR ? tile_full : tg_tile_generic)(t); }

/* Four lanes per row, lane l summing the k = 4i + l, added in a fixed order
 * at the end; the tail k one at a time after. */
static void gemv_simd128(int64_t m, int64_t k, const float *A, int64_t lda, const float *x, float *y, int64_t incy) {
    const int64_t kv = k & ~(int64_t)3;
    for (int64_t i = 0; i < m; i++) {
        const float *a = A + i * lda;
        v128_t s = wasm_f32x4_splat(0.0f);
        for (int64_t j = 0; j < kv; j += 4) s = wasm_f32x4_add(s, wasm_f32x4_mul(wasm_v128_load(a + j), wasm_v128_load(x + j)));
        float r = (wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 2)) +
                  (wasm_f32x4_extract_lane(s, 1) + wasm_f32x4_extract_lane(s, 3));
        for (int64_t j = kv; j < k; j++) r += a[j] * x[j];
        y[i * incy] = r;
    }
}

static void pack_n_simd128(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst) {
    for (int64_t k = 0; k < kc; k++, src += ld, dst += w)
        for (int r = 0; r < w; r++) dst[r] = r < rows ? src[r] : 0.0f;
}

const tg_ukernel *tg_ukernel_simd128(void) {
    static const tg_ukernel k = {"simd128 6x8", WMR, WNR, false, tile_simd128, gemv_simd128, tg_pack_t_generic,
                                 pack_n_simd128};
    return &k;
}
#else
const tg_ukernel *tg_ukernel_simd128(void) { return 0; }
#endif
