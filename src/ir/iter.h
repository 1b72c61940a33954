/* Strided iteration over a shape, shared by the backends (the CPU's loops,
 * WGSL's index arithmetic): the output and up to 3 inputs (broadcast
 * strides), with size-1 axes dropped and contiguous axes merged, so most
 * loops end up as one long inner row. */
#ifndef TG_IR_ITER_H
#define TG_IR_ITER_H
#include "ir.h"

typedef struct {
    int nd;
    int64_t d[TG_MAX_DIMS];
    int64_t st[4][TG_MAX_DIMS]; /* [0] the output, [1..] the inputs, in elements */
    int nops;
    int64_t rows, inner;        /* prod(d[0..nd-1)), d[nd-1] */
} tg_iter;
/* st_in[k] are the inputs' strides over `out` (e.g. from tg_shape_bcast_strides). */
void tg_iter_init(tg_iter *it, tg_shape out, int nin, int64_t st_in[][TG_MAX_DIMS]);
/* Element offsets of row r's first element for every operand, and its index
 * over the outer axes; tg_iter_next steps both to the next row (no
 * divisions, which cost more than a short row's work). */
void tg_iter_row(const tg_iter *it, int64_t r, int64_t *idx, int64_t *off);
void tg_iter_next(const tg_iter *it, int64_t *idx, int64_t *off);
#endif
