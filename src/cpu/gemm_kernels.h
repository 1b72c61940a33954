/* GEMM micro-kernels: C[MR x NR] (=|+=) sum over kc of a[k] (x) b[k], where a
 * is an MR-row packed panel and b an NR-column packed panel. */
#ifndef TG_GEMM_KERNELS_H
#define TG_GEMM_KERNELS_H
#include <stdint.h>

typedef struct {
    const char *name;
    int mr, nr;
    void (*run)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int accumulate);
} tg_ukernel;

/* The fastest kernel this CPU supports (checked at run time). */
const tg_ukernel *tg_ukernel_best(void);
#endif
