/* The CPU backend's fusion pass (tg_fuse_fn): decided on the graph before
 * planning, so the plan gives the values a fused kernel keeps to itself no
 * memory, and lowering (lower.c) runs exactly these groups. */
#ifndef TG_CPU_GROUPS_H
#define TG_CPU_GROUPS_H
#include "../engine.h"

typedef enum {
    CPU_GROUP_MATMUL,   /* a matmul and its epilogue: bias add, residual add, relu or relu's gradient */
    CPU_GROUP_ATTN_FWD, /* softmax_causal(q k^T [* c]) v [-> merge_heads] */
    CPU_GROUP_ATTN_BWD, /* its backward: dq, dk, dv from the softmax, dout, q, k, v */
    CPU_GROUP_ADAM,     /* adam_m, adam_v, adam_p of one param, with the gradient's clip scale */
    CPU_GROUP_NORM_BWD, /* norm_stats, norm_dx [+ the residual gradient's add] [+ the recomputed norm] */
    CPU_GROUP_NORM_SUMS, /* norm_dgain and the bias gradient's column sum of the same gy */
    CPU_GROUP_SUMSQ,     /* every sum(g * g) over all axes (the clip norm's terms): cpu_groups.sq */
    CPU_GROUP_POOL_RELU, /* relu_grad(x, max_pool2d_grad(x, y, gy)): mm = the pooling gradient */
    CPU_GROUP_KINDS
} cpu_group_kind;

/* What TG_PROFILE calls a group's step: its kind, since its last node's op
 * (the relu after a fused product, say) would hide where the time goes. */
extern const char *const tg_cpu_group_names[CPU_GROUP_KINDS];

typedef struct {
    cpu_group_kind kind;
    int out;          /* the node at whose turn the group's kernel runs */
    /* CPU_GROUP_MATMUL */
    int mm, bias, gate; /* bias and gate: -1 for none */
    bool relu;
    int resid;          /* a residual added to the product (after the bias): -1 for none */
    /* attention: [B, H, T, Dh] operands (a permute view is read with strides)
     * and where each result goes (a merge_heads permute, or the product
     * itself); -1 for none */
    int q, k, v, dout, att, scale; /* scale: a one-element constant */
    int o, dq, dk, dv;
    bool att_cols; /* the softmax is private to the attention kernels: stored by keys */
    /* CPU_GROUP_ADAM: the three updates; grad and its scale (the clip
     * factor, a one-element tensor; -1 for none) */
    int am, av, ap, grad, gscale;
    /* norm groups: the nodes (-1 for none); stats is written only when
     * something outside reads it */
    struct {
        int x, gy, stats, dx, add, resid, ln, dgain, dbias;
        bool keep_stats;
    } nb;
    /* an attention backward without att (more than ATTN_MAX_T keys): the
     * forward's scale (-1 for none), read only then */
    int fwd_scale;
} cpu_group;

typedef struct {
    cpu_group *g;
    int n;
    struct { int x, sum; } *sq; /* CPU_GROUP_SUMSQ's terms (one such group at most) */
    int n_sq;
} cpu_groups;

tg_status tg_cpu_fuse(const tg_program *p, tg_fusion **out);
#endif
