/* The NEON GEMM micro-kernel (gemm_kernels.h) for aarch64: 6 rows x 16
 * columns, 24 accumulators, 4 B vectors and 2 of A in the 32 q registers
 * (16 columns: gemm.c's blocks are multiples of 16).
 * Each C element is one FMA chain over k from zero, then the epilogue;
 * edge tiles take the same steps one element at a time (fmaf rounds as
 * the vector FMA does), so no result depends on where a tile falls. */
#include "gemm_kernels.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#define NMR 6
#define NNR 16

static void tile_edge(const tg_tile *t) {
    float acc[NMR][NNR] = {{0}};
    const float *a = t->a, *b = t->b;
    for (int64_t k = 0; k < t->kc; k++, a += t->cs_a, b += t->ldb)
        for (int r = 0; r < t->mr; r++) {
            float x = a[r * t->rs_a];
            for (int q = 0; q < t->nr; q++) acc[r][q] = __builtin_fmaf(x, b[q], acc[r][q]);
        }
    for (int r = 0; r < t->mr; r++)
        for (int q = 0; q < t->nr; q++) t->c[r * t->ldc + q] = tg_tile_epilogue(t, r, q, acc[r][q]);
}

/* A full 6 x 16 tile: A's 6 values of a k step in a vector and a half
 * (packed or transposed A, rs_a = 1) or gathered (row-major A). */
static void tile_full(const tg_tile *t) {
    float32x4_t c[NMR][4];
    for (int r = 0; r < NMR; r++) c[r][0] = c[r][1] = c[r][2] = c[r][3] = vdupq_n_f32(0.0f);
    const float *a = t->a, *b = t->b;
    const int64_t rs = t->rs_a;
    for (int64_t k = 0; k < t->kc; k++, a += t->cs_a, b += t->ldb) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12), a0;
        float32x2_t a1;
        if (rs == 1) {
            a0 = vld1q_f32(a);
            a1 = vld1_f32(a + 4);
        } else {
            float g[6] = {a[0], a[rs], a[2 * rs], a[3 * rs], a[4 * rs], a[5 * rs]};
            a0 = vld1q_f32(g);
            a1 = vld1_f32(g + 4);
        }
#define ROW(r, FMA, av, l)                 \
    c[r][0] = FMA(c[r][0], b0, av, l);     \
    c[r][1] = FMA(c[r][1], b1, av, l);     \
    c[r][2] = FMA(c[r][2], b2, av, l);     \
    c[r][3] = FMA(c[r][3], b3, av, l);
        ROW(0, vfmaq_laneq_f32, a0, 0) ROW(1, vfmaq_laneq_f32, a0, 1) ROW(2, vfmaq_laneq_f32, a0, 2)
        ROW(3, vfmaq_laneq_f32, a0, 3) ROW(4, vfmaq_lane_f32, a1, 0) ROW(5, vfmaq_lane_f32, a1, 1)
#undef ROW
    }
    for (int r = 0; r < NMR; r++) {
        float v[NNR];
        for (int q = 0; q < 4; q++) vst1q_f32(v + 4 * q, c[r][q]);
        for (int q = 0; q < NNR; q++) t->c[r * t->ldc + q] = tg_tile_epilogue(t, r, q, v[q]);
    }
}

static void tile_neon(const tg_tile *t) { (t->mr == NMR && t->nr == NNR ? tile_full : tile_edge)(t); }

/* Four lanes per row, each an FMA chain over its k = 4i + lane, added in a
 * fixed order at the end; the tail k one at a time after. */
static void gemv_neon(int64_t m, int64_t k, const float *A, int64_t lda, const float *x, float *y, int64_t incy) {
    const int64_t kv = k & ~(int64_t)3;
    for (int64_t i = 0; i < m; i++) {
        const float *a = A + i * lda;
        float32x4_t s = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < kv; j += 4) s = vfmaq_f32(s, vld1q_f32(a + j), vld1q_f32(x + j));
        float r = (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 2)) + (vgetq_lane_f32(s, 1) + vgetq_lane_f32(s, 3));
        for (int64_t j = kv; j < k; j++) r = __builtin_fmaf(a[j], x[j], r);
        y[i * incy] = r;
    }
}

static void pack_n_neon(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst) {
    for (int64_t k = 0; k < kc; k++, src += ld, dst += w)
        for (int r = 0; r < w; r++) dst[r] = r < rows ? src[r] : 0.0f;
}

const tg_ukernel *tg_ukernel_neon(void) {
    static const tg_ukernel k = {"neon 6x16", NMR, NNR, true, tile_neon, gemv_neon, tg_pack_t_generic, pack_n_neon};
    return &k;
}
#else
const tg_ukernel *tg_ukernel_neon(void) { return 0; }
#endif
