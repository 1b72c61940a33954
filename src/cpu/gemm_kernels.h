/* GEMM micro-kernels: one register tile of C, up to MR x NR, computed over
 * kc steps of k. The A side is read through two strides (packed panels,
 * row-major A and transposed A all fit), the B side one row of up to NR
 * contiguous floats per k (a packed panel, or row-major B read in place).
 * Edge tiles (mr < MR, nr < NR) run in the same kernel, with fewer rows and
 * masked columns, so no element's arithmetic depends on where the tile
 * boundaries fall: that keeps results independent of the thread split. */
#ifndef TG_GEMM_KERNELS_H
#define TG_GEMM_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t kc;
    const float *a;
    int64_t rs_a, cs_a; /* a[r * rs_a + k * cs_a]; one of them is 1 */
    const float *b;
    int64_t ldb;        /* b[k * ldb + j], j < nr */
    float *c;
    int64_t ldc;
    int mr, nr;
    bool acc;           /* C += product (else C = product) */
    /* Epilogue, applied after the product (the caller passes it with the
     * last k block only): C += bias[j]; C += resid[i,j]; C = max(C, 0);
     * C = gate[i,j] > 0 ? C : 0. */
    const float *bias;
    bool relu;
    const float *gate;
    int64_t ldg;
    const float *c_next; /* the next tile's C, to prefetch into L2 (NULL: none) */
    const float *resid;
    int64_t ldr;
} tg_tile;

typedef struct {
    const char *name;
    int mr, nr;
    bool fma; /* products chained with FMAs (else multiply, then add) */
    void (*tile)(const tg_tile *t);
    /* y[i * incy] = dot(A[i, 0:k], x) for i < m, A rows contiguous (lda apart). */
    void (*gemv)(int64_t m, int64_t k, const float *A, int64_t lda, const float *x, float *y, int64_t incy);
    /* Packs `rows` rows (ld apart) of kc floats transposed: dst[k * w + r] =
     * src[r * ld + k], rows..w-1 zero. Row-major A into MR-row panels and
     * B^T into NR-column panels. */
    void (*pack_t)(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst);
    /* The same without the transpose: dst[k * w + r] = src[k * ld + r]
     * (transposed A, row-major B); w <= 32. */
    void (*pack_n)(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst);
} tg_ukernel;

/* Element (r, q) of C after the epilogue, v being its product: the order
 * of the scalar kernels (the vector ones keep it too). */
static inline float tg_tile_epilogue(const tg_tile *t, int r, int q, float v) {
    const float *c = &t->c[r * t->ldc + q];
    if (t->acc) v += *c;
    if (t->bias) v += t->bias[q];
    if (t->resid) v += t->resid[r * t->ldr + q];
    if (t->relu) v = v > 0.0f ? v : 0.0f;
    if (t->gate && !(t->gate[r * t->ldg + q] > 0.0f)) v = 0.0f;
    return v;
}

/* The kernel of the CPU path in use (isa.h). */
const tg_ukernel *tg_ukernel_best(void);
/* AVX2+FMA (gemm_avx2.c), NEON (gemm_neon.c), WebAssembly SIMD (gemm_wasm.c); NULL where not compiled in. */
const tg_ukernel *tg_ukernel_avx2(void);
const tg_ukernel *tg_ukernel_neon(void);
const tg_ukernel *tg_ukernel_simd128(void);
/* The portable packing of row-major A and B^T, for kernels without their own. */
void tg_pack_t_generic(int64_t kc, int rows, const float *src, int64_t ld, int w, float *dst);
/* The portable tile, any size up to 8 x 16: a multiply then an add per
 * product, over k from zero, then the epilogue (vector kernels without FMA
 * run their edge tiles through it). */
void tg_tile_generic(const tg_tile *t);
/* The portable kernel, whatever the CPU. */
const tg_ukernel *tg_ukernel_generic(void);
#endif
