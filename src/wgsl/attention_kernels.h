/* Internals shared by the two forms of the fused attention kernels:
 * ops_attention.c (one invocation per row; any head size up to 128) and
 * ops_attention_tiles.c (64 x 64 blocks over a workgroup; head sizes up to
 * 64). Both read and write the operands through the accessors that
 * tg_wgsl_attn_declare writes: iX(b, h, t) the vec4 index of row t of
 * operand X, bX(i) its vec4 i, sX(i, v) a store (outputs only). */
#ifndef TG_WGSL_ATTENTION_KERNELS_H
#define TG_WGSL_ATTENTION_KERNELS_H

#include "fused_attention.h"
#include "emit.h"

enum { OP_Q, OP_K, OP_V, OP_O, OP_DOUT, OP_DQ, OP_DK, OP_DV, N_OP };

typedef struct {
    wgsl_kernel k;
    const tg_wgsl_attn *a;
    const tg_fusion *f;
    int node[N_OP];   /* -1: not in this kernel */
    uint32_t wg;      /* invocations per workgroup */
    bool unroll;      /* row form: rows as named registers (see expand) */
    int64_t work;     /* bytes of the attention workspace (every group's statistics) */
    int64_t dh4, nblk;
    int64_t chunk;    /* tiled form: head dimensions per score chunk */
} attn_kernel;

/* The bindings of the operands in use, their accessors, and the
 * statistics' workspace binding `work` (f32). */
bool tg_wgsl_attn_declare(attn_kernel *K);
/* " * c" for the one-element constant node (the scores' or the gradient's
 * scale), "" for node -1. buf holds 64 bytes. */
void tg_wgsl_attn_scale(attn_kernel *K, int node, char *buf);

/* The tiled form: whether it fits (head size, workgroup memory), and its
 * three kernels. */
bool tg_wgsl_attn_tiles_fit(const tg_wgsl_attn *a, const tg_wgsl_limits *lim);
tg_status tg_wgsl_attn_tiles_forward(attn_kernel *K, tg_wgsl_program *out);
tg_status tg_wgsl_attn_tiles_dq(attn_kernel *K, tg_wgsl_program *out);
tg_status tg_wgsl_attn_tiles_dkdv(attn_kernel *K, tg_wgsl_program *out);
#endif
