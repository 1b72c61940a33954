/* Causal attention on the GPU as fused kernels (FlashAttention's scheme):
 * the [T, T] scores and softmax are never stored.
 *
 *   forward   o = softmax_causal(q k^T [* c]) v, one kernel: online softmax
 *             over key tiles, the row's log-sum-exp kept for the backward
 *   backward  from softmax_grad(att, dout v^T) [* c']: one kernel over query
 *             rows (D = rowsum(att * dA), which is rowsum(dout * o), then
 *             dq) and one over key rows (dk, dv), both computing att again
 *             from q, k and the kept log-sum-exp; the plan keeps o alive
 *             until the backward (tg_fusion.also_reads)
 *
 * The groups are chosen before buffer planning (tg_wgsl_choose_attention, in
 * the WebGPU backend's fusion pass tg_wgsl_choose_groups), so the plan gives the
 * scores, the softmax and their gradients no memory, and a split_heads /
 * merge_heads permute
 * next to them is read or written with strides instead of run as a kernel.
 * The statistics (log-sum-exp per forward row, D per backward row) live in
 * the program's workspace, one region per group.
 *
 * Rule: fused when q, k, v are f32 [B, H, T, Dh] with Dh a multiple of 4 up
 * to 128 (the kernels hold rows as vec4 registers), every reader of the
 * softmax is one of the group's products, and nothing outside reads the
 * scores; anything else runs as separate kernels. T is any size. */
#ifndef TG_WGSL_FUSED_ATTENTION_H
#define TG_WGSL_FUSED_ATTENTION_H

#include "../fuse/fuse.h"
#include "groups.h"
#include "wgsl.h"

#define TG_WGSL_ATTN_MAX_DH 128

typedef struct tg_wgsl_attn_s {
    bool bwd;
    int64_t B, H, T, Dh;
    int q, k, v;         /* operands [B, H, T, Dh]; a heads permute planned as a view is read with strides */
    int scale;           /* one-element constant multiplying the scores, -1 for none */
    int att;             /* the softmax (absorbed: computed again where read) */
    int o;               /* where the forward's result goes (the product or its merge_heads permute);
                          * the backward reads it for D */
    int dout, dscale;    /* backward: the gradient of o; the constant multiplying softmax_grad (-1 none) */
    int dq, dk, dv;      /* backward: where each gradient goes (product or permute), -1 for none */
    int64_t lse_at;      /* byte offset of the forward's log-sum-exp in the attention workspace */
    int64_t d_at;        /* backward: byte offset of its D rows */
} tg_wgsl_attn;

/* Appends to f the attention groups of fg's graph that fit the device
 * limits, their descriptions to at (at->attn holds one per node), then
 * makes the heads permutes only they read views. Attention groups come
 * first in f: group i < at->n_attn is at->attn[i]. */
void tg_wgsl_choose_attention(const tg_fuse_graph *fg, tg_fusion *f, const tg_wgsl_limits *lim, tg_wgsl_chosen_groups *at);

/* Whether node x is a heads permute read with strides ([B, T, H, Dh] in memory). */
bool tg_wgsl_attn_strided(const tg_fusion *f, const tg_graph *g, int x);

/* Appends the group's kernels (1 forward, 2 backward) to out through push.
 * The attention workspace is the first work_bytes of the program's
 * workspace (the other kernels' scratch follows it). */
tg_status tg_wgsl_emit_attention(const tg_graph *g, const tg_plan *plan, const tg_fusion *f, const tg_wgsl_attn *a,
                                 const tg_wgsl_limits *lim, int64_t work_bytes, tg_wgsl_program *out, int *cap,
                                 tg_status (*push)(tg_wgsl_program *, int *, tg_kernel_spec **));
#endif
