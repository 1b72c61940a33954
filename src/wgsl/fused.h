/* The fused groups, all chosen before planning (prefuse.c, recorded per
 * group as fz_pregroup) and lowered to kernels after it (fuse.c), and the
 * emitters of the two kinds that are not an ordinary kernel with inline
 * parts (ops_fused.c). */
#ifndef TG_WGSL_FUSED_H
#define TG_WGSL_FUSED_H

#include "../fuse/fuse.h"
#include "wgsl.h"

typedef enum {
    FZ_FUSED, /* a kernel with inline producers and an epilogue (tg_wgsl_fused) */
    FZ_OPTIM, /* the optimizer updates of many params */
    FZ_SUMSQ, /* sums of squares of many tensors (the clip norm's terms) and their total */
    FZ_ATTN,  /* a fused attention, chosen before planning (attention.h) */
    FZ_MMGROUP, /* products of one A (the q, k and v projections): one dispatch, two with K split */
    FZ_MMSUM    /* products summed by a tree of adds (their input gradient): one product */
} fz_kind;

#define FZ_MM_MAX 4 /* products per group: 1 + 2 x 4 bindings fit the 10 a stage may have */

/* One param's update. Adam: m2 = adam_m(m, g), v2 = adam_v(v, g), p2 =
 * adam_p(p, m2, v2, hyper). SGD: v2 = sgd_v(v, g, p, hyper) (momentum only),
 * p2 = sgd_p(p, g, v2 or p, hyper). g (node gx) is grad * scale when the
 * planner computes the clip factor's multiply inline (scale >= 0), else grad
 * itself. Each update is written over the state or param it replaces. */
typedef struct {
    int p, m, v, m2, v2, p2, hyper, gx, grad, scale; /* -1 for none */
    bool decay, nesterov, momentum;
    float hp[3]; /* adam: beta1, beta2, eps; sgd: momentum, weight decay */
} fz_seg;

/* sum = sum over every axis of sq = mul(x, x); stored if something other than the total reads it */
typedef tg_sumsq_term fz_term;

typedef struct {
    fz_kind kind;
    int turn; /* the node position at which the group's kernels run */
    tg_wgsl_fused f;
    /* FZ_OPTIM, FZ_SUMSQ: borrowed from the group's fz_pregroup */
    const fz_seg *seg;
    int n_seg;
    const fz_term *term;
    int n_term;
    const int *tree; /* the adds totalling the terms (any order) */
    int n_tree;
    int total;         /* their root, stored; -1 for none */
    const int *tail;   /* scalar arithmetic after the total, in node order (fuse/sumsq.c) */
    int n_tail;
    const bool *tail_st; /* which of them are stored (read outside the kernel) */
    const struct tg_wgsl_attn_s *attn; /* FZ_ATTN */
    int mm[FZ_MM_MAX], n_mm;           /* FZ_MMGROUP, FZ_MMSUM: the products, in node order / summation order */
    int mm_sum;                        /* FZ_MMSUM: the tree's root add, which stores the sum */
    int mm_split;                      /* FZ_MMGROUP: K-ranges (tg_wgsl_matmul_group_split), 1 for none */
} fz_group;

/* A group chosen before planning (prefuse.c), by fusion group id. */
typedef struct {
    fz_kind kind;
    int mm[FZ_MM_MAX], n_mm; /* the products, in node order (a group) or summation order (a sum) */
    int root;                /* FZ_MMSUM: the root add, which stores the sum */
    int split;               /* FZ_MMGROUP: K-ranges (tg_wgsl_matmul_group_split), 1 for none */
    tg_ew_group ew;          /* FZ_FUSED: the kernel, its sibling, producers and epilogue */
    fz_seg *seg;             /* FZ_OPTIM: the updates, in node order (owned) */
    int n_seg;
    tg_sumsq_match sq;       /* FZ_SUMSQ: the terms and the tree of adds totalling them (owned) */
    int *tail, n_tail;       /* FZ_SUMSQ: the scalars after the total, in node order (owned) */
    bool *tail_st;           /* which of them are stored */
} fz_pregroup;

/* The elementwise groups of the fusion before planning (prefuse_ew.c):
 * inline producers and epilogues, new groups or grown pre-planned kernel
 * groups, recorded in f and pre (by group id). cut: the end of the
 * backward, which no group spans. */
tg_status tg_wgsl_fuse_elementwise(const tg_fuse_graph *x, tg_fusion *f, const tg_wgsl_limits *lim, int cut,
                                   fz_pregroup *pre);

typedef tg_status (*fz_push)(tg_wgsl_program *out, int *cap, tg_kernel_spec **slot);
/* Appends the kernel specs of an FZ_OPTIM or FZ_SUMSQ group to out (through
 * push, which hands out the next spec; the caller counts it in out->n). */
tg_status tg_fz_emit_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                        tg_wgsl_program *out, int *cap, fz_push push);
#endif
