/* The fused groups, all chosen before planning (grouping.c, recorded per
 * group as chosen_group) and lowered to kernels after it (program.c), and the
 * emitters of the two kinds that are not an ordinary kernel with inline
 * parts (ops_fused.c). */
#ifndef TG_WGSL_GROUPS_H
#define TG_WGSL_GROUPS_H

#include "../fuse/fuse.h"
#include "wgsl.h"

typedef enum {
    GROUP_FUSED, /* a kernel with inline producers and an epilogue (tg_wgsl_fused_kernel) */
    GROUP_OPTIM, /* the optimizer updates of many params */
    GROUP_SUMSQ, /* sums of squares of many tensors (the clip norm's terms) and their total */
    GROUP_ATTENTION,  /* a fused attention, chosen before planning (fused_attention.h) */
    GROUP_PRODUCTS, /* products of one A (the q, k and v projections): one dispatch, two with K split */
    GROUP_PRODUCT_SUM    /* products summed by a tree of adds (their input gradient): one product */
} group_kind;

#define GROUP_PRODUCTS_MAX 4 /* products per group: 1 + 2 x 4 bindings fit the 10 a stage may have */

/* One param's update. Adam: m2 = adam_m(m, g), v2 = adam_v(v, g), p2 =
 * adam_p(p, m2, v2, hyper). SGD: v2 = sgd_v(v, g, p, hyper) (momentum only),
 * p2 = sgd_p(p, g, v2 or p, hyper). g (node gx) is grad * scale when the
 * planner computes the clip factor's multiply inline (scale >= 0), else grad
 * itself. Each update is written over the state or param it replaces. */
typedef struct {
    int p, m, v, m2, v2, p2, hyper, gx, grad, scale; /* -1 for none */
    bool decay, nesterov, momentum;
    float hp[3]; /* adam: beta1, beta2, eps; sgd: momentum, weight decay */
} optim_update;

/* sum = sum over every axis of sq = mul(x, x); stored if something other than the total reads it */

typedef struct {
    group_kind kind;
    int turn; /* the node position at which the group's kernels run */
    tg_wgsl_fused_kernel f;
    /* GROUP_OPTIM, GROUP_SUMSQ: borrowed from the group's chosen_group */
    const optim_update *seg;
    int n_seg;
    const tg_sumsq_term *term;
    int n_term;
    const int *tree; /* the adds totalling the terms (any order) */
    int n_tree;
    int total;         /* their root, stored; -1 for none */
    const int *tail;   /* scalar arithmetic after the total, in node order (fuse/sumsq.c) */
    int n_tail;
    const bool *tail_st; /* which of them are stored (read outside the kernel) */
    const struct tg_wgsl_attn_s *attn; /* GROUP_ATTENTION */
    int mm[GROUP_PRODUCTS_MAX], n_mm;           /* GROUP_PRODUCTS, GROUP_PRODUCT_SUM: the products, in node order / summation order */
    int mm_sum;                        /* GROUP_PRODUCT_SUM: the tree's root add, which stores the sum */
    int mm_split;                      /* GROUP_PRODUCTS: K-ranges (tg_wgsl_matmul_group_split), 1 for none */
} program_group;

/* A group chosen before planning (grouping.c), by fusion group id. */
typedef struct {
    group_kind kind;
    int mm[GROUP_PRODUCTS_MAX], n_mm; /* the products, in node order (a group) or summation order (a sum) */
    int root;                /* GROUP_PRODUCT_SUM: the root add, which stores the sum */
    int split;               /* GROUP_PRODUCTS: K-ranges (tg_wgsl_matmul_group_split), 1 for none */
    tg_ew_group ew;          /* GROUP_FUSED: the kernel, its sibling, producers and epilogue */
    optim_update *seg;             /* GROUP_OPTIM: the updates, in node order (owned) */
    int n_seg;
    tg_sumsq_match sq;       /* GROUP_SUMSQ: the terms and the tree of adds totalling them (owned) */
    int *tail, n_tail;       /* GROUP_SUMSQ: the scalars after the total, in node order (owned) */
    bool *tail_st;           /* which of them are stored */
} chosen_group;

/* What the fusion before planning chose (grouping.c): the attentions, the
 * first n_attn groups, and every group's description. */
typedef struct {
    struct tg_wgsl_attn_s *attn;
    int n_attn;
    int64_t work_bytes;   /* the attention workspace: statistics of every group */
    chosen_group *chosen; /* per group (the node count bounds them) */
    int n_chosen;         /* entries of chosen */
} tg_wgsl_chosen_groups;

/* The elementwise groups of the fusion before planning (grouping_elementwise.c):
 * inline producers and epilogues, new groups or grown pre-planned kernel
 * groups, recorded in f and chosen (by group id). cut: the end of the
 * backward, which no group spans. */
tg_status tg_wgsl_choose_elementwise(const tg_fuse_graph *x, tg_fusion *f, const tg_wgsl_limits *lim, int cut,
                                   chosen_group *chosen);

typedef tg_status (*spec_push_fn)(tg_wgsl_program *out, int *cap, tg_kernel_spec **slot);
/* Appends the kernel specs of an GROUP_OPTIM or GROUP_SUMSQ group to out (through
 * push, which hands out the next spec; the caller counts it in out->n). */
tg_status tg_wgsl_emit_span_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                        tg_wgsl_program *out, int *cap, spec_push_fn push);
#endif
