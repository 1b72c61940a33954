/* Causal self-attention as one CPU kernel per direction, for the fused
 * groups of grouping.c. Operands are read and written where they lie,
 * through strides (a split_heads permute is never materialized).
 *
 * Up to ATTN_MAX_T keys, per (batch, head): the T x T scores, the causal
 * softmax and the products with V stay in L1 instead of going through five
 * kernels, two permute copies and 4 * B * H tiny GEMMs; the softmax is kept
 * for the backward. Longer (fused_attention_long.c): blocks of queries
 * through tg_gemm_serial, the scores of a block in a scratch row of keys;
 * nothing of T x T is kept, and the backward computes each block's softmax
 * again from q and k, the same way, so it needs no memory that grows as
 * T squared.
 *
 * The float operations are those of the separate kernels, in the same order
 * (each product an FMA chain over k from zero when the GEMM micro-kernel
 * chains FMAs, the AVX-512 and AVX2 ones, separate multiply and add with the
 * portable one; the
 * softmax and its gradient as kernels_reduce.c and kernels_math.c compute
 * them), so results are bitwise the same as without fusion. */
#ifndef TG_CPU_FUSED_ATTENTION_H
#define TG_CPU_FUSED_ATTENTION_H
#include "cpu.h"

#define ATTN_MAX_T 16   /* keys per row: one vector */
#define ATTN_MAX_DH 256 /* head width */

/* A [B, H, T, Dh] operand: element (b, h, t, d) at p[b*sb + h*sh + t*st + d]. */
typedef struct {
    float *p;
    int64_t sb, sh, st;
} attn_operand;

typedef struct {
    int64_t B, H, T, Dh;
    attn_operand q, k, v, o; /* o = softmax_causal(q k^T * scale) v */
    float *att;              /* the softmax, [B, H, T, T] contiguous; NULL: not kept */
    float scale;
    bool has_scale;          /* false: no multiply at all (not even by 1) */
    bool att_cols;           /* att stored by keys (element (i, j) at j * T + i): only the backward reads it */
} attn_fwd;

typedef struct {
    int64_t B, H, T, Dh;
    const float *att;           /* [B, H, T, T] contiguous; NULL (T > ATTN_MAX_T): computed again from q and k */
    attn_operand dout, q, k, v; /* inputs */
    attn_operand dq, dk, dv;    /* outputs; p = NULL: not wanted */
    float scale;                /* the gradient's scale (dS = softmax_grad * scale) */
    bool has_scale;
    bool att_cols;              /* att as the forward stored it by keys */
    float fwd_scale;            /* without att: the forward's scale of q k^T */
    bool has_fwd_scale;
} attn_bwd;

/* Unit (b, h) of an operand; NULL for an operand not bound (an input only
 * a gradient that is not wanted reads) or an output not wanted. */
static inline float *attn_atw(const attn_operand *o, int64_t b, int64_t h) {
    return o->p ? o->p + b * o->sb + h * o->sh : NULL;
}
static inline const float *attn_at(const attn_operand *o, int64_t b, int64_t h) { return attn_atw(o, b, h); }

/* Unit (b, h) for T <= 8 without AVX-512 (fused_attention8.c): qt / ot hold
 * 8 * Dh floats, ar / ds 64; fma as the GEMM micro-kernel rounds. */
void tg_attn_fwd8(const attn_fwd *a, int64_t b, int64_t h, float *qt, float *ar, bool fma);
void tg_attn_bwd8(const attn_bwd *a, int64_t b, int64_t h, float *ot, float *ds, bool fma);

void tg_cpu_attention_fwd(cpu_ctx *c, const attn_fwd *a);
void tg_cpu_attention_bwd(cpu_ctx *c, const attn_bwd *a);
/* The causal softmax of one row of x (valid = keys 0..valid-1, the rest of
 * the Tk outputs 0); shared with the softmax_causal kernel so both round
 * alike. */
void tg_attn_softmax_causal_row(const float *x, float *y, int64_t valid, int64_t Tk);

/* T > ATTN_MAX_T (fused_attention_long.c); the backward's att is NULL. */
void tg_attn_fwd_long(cpu_ctx *c, const attn_fwd *a);
void tg_attn_bwd_long(cpu_ctx *c, const attn_bwd *a);
#endif
