/* The lowering of the groups chosen before planning into a program's
 * kernels (fuse.c): its state, and the emitters of the groups of products
 * (fuse_matmul.c). Internal to the WGSL backend. */
#ifndef TG_WGSL_FUSE_H
#define TG_WGSL_FUSE_H

#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "emit.h"
#include "fused.h"

typedef struct {
    const tg_graph *g;
    const tg_plan *plan;
    const tg_fusion *fu; /* the groups chosen before planning (prefuse.c), NULL for none */
    const tg_wgsl_limits *lim;
    int n;
    int *grp;            /* group per node, -1 for none */
    fz_group *gr;
    int n_gr, cap_gr;
} fz;

fz_group *tg_fz_new_group(fz *z, int kind); /* NULL when out of memory */
void tg_fz_free_group(fz_group *g);

tg_status tg_fz_emit_matmul_sum(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                                tg_kernel_spec *k, tg_wgsl_program *out);
tg_status tg_fz_emit_matmul_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                                  tg_wgsl_program *out, int *cap, fz_push push);
#endif
