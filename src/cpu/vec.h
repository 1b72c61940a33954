/* Vector loops for the hottest elementwise work of a training step, with an
 * AVX-512 version picked at run time and a plain C one. Both do the same
 * float operations in the same order as the op-table kernels (no FMA
 * contraction), so a step gives the same bits whichever runs. */
#ifndef TG_CPU_VEC_H
#define TG_CPU_VEC_H
#include <stdbool.h>
#include <stdint.h>

typedef enum { VEC_ADD, VEC_SUB, VEC_MUL, VEC_DIV } vec_op;

typedef struct {
    /* o[i] = a[i * sa] (op) b[i * sb], sa and sb 0 or 1 */
    void (*binary)(vec_op op, int64_t n, float *o, const float *a, int64_t sa, const float *b, int64_t sb);
    /* o[r, j] = a[r, j] (op) row[j], or row[j] (op) a[r, j] with row_left */
    void (*binary_row)(vec_op op, int64_t rows, int64_t cols, float *o, const float *a, const float *row,
                       bool row_left);
    void (*relu)(int64_t n, float *o, const float *x);
    /* o = y > 0 ? gy : 0 */
    void (*relu_grad)(int64_t n, float *o, const float *y, const float *gy);
    /* y[j] = sum over r of x[r * cols + j], rows in order, for j in [j0, j1) */
    void (*colsum)(int64_t rows, int64_t cols, int64_t j0, int64_t j1, const float *x, float *y);
    /* Adam's three updates in one pass (the formulas of optim/update.h), of the
     * gradient g * gs (the clip factor's multiply, rounded as the mul kernel) */
    void (*adam)(int64_t n, float *mo, float *vo, float *po, const float *m, const float *v, const float *g,
                 const float *p, float gs, float b1, float b2, float lrt, float shrink, float eps);
} vec_kernels;

const vec_kernels *tg_vec_best(void);
const vec_kernels *tg_vec_generic(void);
#endif
