/* Public builders of the nn ops: losses, norms, embedding, heads,
 * rope, and the random ops. Like ops.c, each records the caller's file:line
 * and its own name, then goes through tg_ir_add and the op's shape rule. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"

static tg_tensor fail(tg_graph *g, tg_opcode op, const char *api, const char *file, int line, const char *fmt, ...)
    TG_PRINTF(6, 7);
static tg_tensor fail(tg_graph *g, tg_opcode op, const char *api, const char *file, int line, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tg_node n = tg_ir_proto(op, api, file, line);
    tg_ir_fail(g, &n, "%s", msg);
    return (tg_tensor){g, -1};
}

/* The graph every operand belongs to, or NULL after recording why not. An
 * operand that is already invalid yields its graph, and tg_ir_add passes the
 * earlier error along. */
static tg_graph *graph_of(const char *api, tg_opcode op, const tg_tensor *t, int n, const char *file, int line) {
    tg_graph *g = NULL;
    for (int i = 0; i < n; i++) {
        if (!t[i].g) continue;
        if (g && t[i].g != g) {
            fail(g, op, api, file, line, "operands come from different graphs");
            return NULL;
        }
        g = t[i].g;
    }
    return g;
}

static bool ok(tg_tensor t) { return ir_live(t); }
static const tg_node *nd(tg_tensor t) { return &t.g->nodes[t.id]; }

/* ---- losses ---- */

/* Per-position loss [...] reduced as asked: SUM and MEAN over every position. */
static tg_tensor reduce_loss(tg_graph *g, int loss, tg_reduction r, const char *file, int line) {
    if (loss < 0 || r == TG_REDUCTION_NONE) return (tg_tensor){g, loss};
    const tg_node *l = &g->nodes[loss];
    int64_t count = tg_ir_numel(l);
    unsigned mask = l->shape.ndim ? (1u << l->shape.ndim) - 1 : 0;
    int s = mask ? tg_ir_reduce_sum(g, loss, mask, file, line) : loss;
    s = tg_ir_reshape(g, s, (tg_shape){0, {0}}, file, line);
    if (r == TG_REDUCTION_MEAN && count > 1)
        s = tg_ir_binary(g, TG_OP_MUL, s, tg_ir_scalar(g, (float)(1.0 / (double)count), file, line), file, line);
    return (tg_tensor){g, s};
}

static tg_tensor loss_op(tg_opcode op, const char *api, tg_tensor x, tg_tensor targets, tg_reduction r,
                         const char *file, int line) {
    tg_tensor ts[2] = {x, targets};
    tg_graph *g = graph_of(api, op, ts, 2, file, line);
    if (!g) return (tg_tensor){NULL, -1};
    if ((unsigned)r > TG_REDUCTION_NONE) return fail(g, op, api, file, line, "unknown reduction %d", (int)r);
    tg_node n = tg_ir_proto(op, api, file, line);
    n.in[0] = x.id;
    n.in[1] = targets.id;
    return reduce_loss(g, tg_ir_add(g, &n), r, file, line);
}

tg_tensor tg_cross_entropy_at(tg_tensor logits, tg_tensor targets, tg_reduction r, const char *file, int line) {
    return loss_op(TG_OP_CROSS_ENTROPY, "cross_entropy", logits, targets, r, file, line);
}

tg_tensor tg_nll_loss_at(tg_tensor logprobs, tg_tensor targets, tg_reduction r, const char *file, int line) {
    return loss_op(TG_OP_NLL_LOSS, "nll_loss", logprobs, targets, r, file, line);
}

/* ---- norms ---- */

static tg_tensor norm_op(tg_opcode op, const char *api, const tg_tensor *t, int nin, float eps, const char *file,
                         int line) {
    tg_graph *g = graph_of(api, op, t, nin, file, line);
    if (!g) return (tg_tensor){NULL, -1};
    tg_node n = tg_ir_proto(op, api, file, line);
    for (int k = 0; k < nin; k++) n.in[k] = t[k].id;
    n.at.norm.eps = eps;
    return (tg_tensor){g, tg_ir_add(g, &n)};
}

tg_tensor tg_layer_norm_at(tg_tensor x, tg_tensor g, tg_tensor b, float eps, const char *file, int line) {
    tg_tensor t[3] = {x, g, b};
    return norm_op(TG_OP_LAYER_NORM, "layer_norm", t, 3, eps, file, line);
}

tg_tensor tg_rms_norm_at(tg_tensor x, tg_tensor g, float eps, const char *file, int line) {
    tg_tensor t[2] = {x, g};
    return norm_op(TG_OP_RMS_NORM, "rms_norm", t, 2, eps, file, line);
}

/* A per-channel vector v [C] shaped to broadcast against x [N, C, ...]. */
static tg_tensor per_channel(tg_tensor v, tg_shape xs, const char *file, int line) {
    tg_shape s = {xs.ndim, {0}};
    for (int i = 0; i < xs.ndim; i++) s.d[i] = i == 1 ? xs.d[1] : 1;
    return tg_reshape_at(v, s, file, line);
}

/* x [N, C, ...] and the per-channel operands [C], all f32; the graph, or NULL. */
static tg_graph *channel_operands(const char *api, const tg_tensor *t, int n, const char *file, int line) {
    tg_graph *g = graph_of(api, TG_OP_LAYER_NORM, t, n, file, line);
    if (!g) return NULL;
    for (int i = 0; i < n; i++)
        if (!ok(t[i])) return NULL;
    tg_shape xs = nd(t[0])->shape;
    char a[96], b[96];
    if (nd(t[0])->dtype != TG_F32 || xs.ndim < 2) {
        fail(g, TG_OP_LAYER_NORM, api, file, line, "input must be f32 [N, C, ...], got %s %s",
             tg_dtype_name(nd(t[0])->dtype), tg_shape_str(xs, a, sizeof a));
        return NULL;
    }
    for (int i = 1; i < n; i++) {
        const tg_node *v = nd(t[i]);
        if (v->dtype != TG_F32 || v->shape.ndim != 1 || v->shape.d[0] != xs.d[1]) {
            fail(g, TG_OP_LAYER_NORM, api, file, line, "operand %d must be f32 [%lld] for input %s, got %s", i,
                 (long long)xs.d[1], tg_shape_str(xs, a, sizeof a), tg_shape_str(v->shape, b, sizeof b));
            return NULL;
        }
    }
    return g;
}

/* The rows of the layer_norm kernel, one per (image, group), with a unit
 * gain and no bias, then the per-channel affine. */
tg_tensor tg_group_norm_at(tg_tensor x, int64_t groups, tg_tensor gain, tg_tensor bias, float eps, const char *file,
                           int line) {
    const char *api = "group_norm";
    tg_tensor t[3] = {x, gain, bias};
    tg_graph *g = channel_operands(api, t, 3, file, line);
    if (!g) return (tg_tensor){x.g ? x.g : gain.g, -1};
    tg_shape xs = nd(x)->shape;
    char a[96];
    if (groups < 1 || xs.d[1] % groups)
        return fail(g, TG_OP_LAYER_NORM, api, file, line, "groups %lld must divide the channels of %s",
                    (long long)groups, tg_shape_str(xs, a, sizeof a));
    int64_t row = xs.d[1] / groups;
    for (int i = 2; i < xs.ndim; i++) row *= xs.d[i];
    tg_tensor rows = tg_reshape_at(x, (tg_shape){2, {xs.d[0] * groups, row}}, file, line);
    tg_tensor ones = tg_ones_at(g, (tg_shape){1, {row}}, file, line), zeros = tg_zeros_at(g, (tg_shape){1, {row}}, file, line);
    tg_tensor y = tg_reshape_at(tg_layer_norm_at(rows, ones, zeros, eps, file, line), xs, file, line);
    return tg_add_at(tg_mul_at(y, per_channel(gain, xs, file, line), file, line), per_channel(bias, xs, file, line),
                     file, line);
}

/* Training: the statistics over every axis but the channels', spelled out
 * in elementwise ops and sums (the backward comes from theirs), and the
 * running statistics' new values given to the step's writebacks. */
tg_tensor tg_batch_norm_at(tg_tensor x, tg_tensor gain, tg_tensor bias, tg_tensor running_mean, tg_tensor running_var,
                           bool training, float momentum, float eps, const char *file, int line) {
    const char *api = "batch_norm";
    tg_tensor t[5] = {x, gain, bias, running_mean, running_var};
    tg_graph *g = channel_operands(api, t, 5, file, line);
    if (!g) return (tg_tensor){x.g ? x.g : gain.g, -1};
    tg_shape xs = nd(x)->shape;
    char a[96];
    if (!(momentum >= 0 && momentum <= 1) || !(eps >= 0))
        return fail(g, TG_OP_LAYER_NORM, api, file, line, "momentum %g must be in [0, 1] and eps %g at least 0",
                    momentum, eps);
    tg_tensor g4 = per_channel(gain, xs, file, line), b4 = per_channel(bias, xs, file, line);
    if (!training) {
        tg_tensor xc = tg_sub_at(x, per_channel(running_mean, xs, file, line), file, line);
        tg_tensor r = tg_rsqrt_at(tg_add_s_at(per_channel(running_var, xs, file, line), eps, file, line), file, line);
        return tg_add_at(tg_mul_at(tg_mul_at(xc, r, file, line), g4, file, line), b4, file, line);
    }
    tg_shape axes = {0, {0}};
    for (int i = 0; i < xs.ndim; i++)
        if (i != 1) axes.d[axes.ndim++] = i;
    int64_t n = xs.d[1] ? tg_shape_numel(xs) / xs.d[1] : 0;
    if (n < 2)
        return fail(g, TG_OP_LAYER_NORM, api, file, line, "training needs more than one value per channel, got %s",
                    tg_shape_str(xs, a, sizeof a));
    tg_tensor mean = tg_mean_axes_at(x, axes, true, file, line);
    tg_tensor xc = tg_sub_at(x, mean, file, line);
    tg_tensor var = tg_mean_axes_at(tg_mul_at(xc, xc, file, line), axes, true, file, line);
    tg_tensor r = tg_rsqrt_at(tg_add_s_at(var, eps, file, line), file, line);
    tg_tensor y = tg_add_at(tg_mul_at(tg_mul_at(xc, r, file, line), g4, file, line), b4, file, line);
    tg_shape c = {1, {xs.d[1]}};
    tg_tensor m_new = tg_add_at(tg_mul_s_at(running_mean, 1.0f - momentum, file, line),
                                tg_mul_s_at(tg_reshape_at(mean, c, file, line), momentum, file, line), file, line);
    tg_tensor v_new = tg_add_at(tg_mul_s_at(running_var, 1.0f - momentum, file, line),
                                tg_mul_s_at(tg_reshape_at(var, c, file, line),
                                            (float)((double)momentum * (double)n / (double)(n - 1)), file, line),
                                file, line);
    tg_node site = tg_ir_proto(TG_OP_LAYER_NORM, api, file, line);
    if (ok(m_new) && ok(v_new)) {
        tg_ir_leaf_update(g, running_mean.id, m_new.id, &site);
        tg_ir_leaf_update(g, running_var.id, v_new.id, &site);
    }
    return y;
}

/* ---- embedding ---- */

tg_tensor tg_embedding_at(tg_tensor table, tg_tensor idx, const char *file, int line) {
    tg_tensor t[2] = {table, idx};
    tg_graph *g = graph_of("embedding", TG_OP_EMBEDDING, t, 2, file, line);
    if (!g) return (tg_tensor){NULL, -1};
    tg_node n = tg_ir_proto(TG_OP_EMBEDDING, "embedding", file, line);
    n.in[0] = table.id;
    n.in[1] = idx.id;
    return (tg_tensor){g, tg_ir_add(g, &n)};
}

/* ---- attention heads: a reshape (a view) and one transposing copy ---- */

/* [..., T, H*Dh] -> [..., T, H, Dh] -> [..., H, T, Dh] */
tg_tensor tg_split_heads_at(tg_tensor x, int64_t heads, const char *file, int line) {
    if (!ok(x)) return x;
    tg_graph *g = x.g;
    tg_shape s = nd(x)->shape;
    char sx[96];
    tg_shape_str(s, sx, sizeof sx);
    if (s.ndim < 2 || s.ndim + 1 > TG_MAX_DIMS)
        return fail(g, TG_OP_PERMUTE, "split_heads", file, line, "x %s must be [..., T, D] with at most 5 dims", sx);
    int64_t D = s.d[s.ndim - 1];
    if (heads < 1 || D % heads != 0)
        return fail(g, TG_OP_PERMUTE, "split_heads", file, line, "last dim %lld of x %s is not divisible by %lld heads",
                    (long long)D, sx, (long long)heads);
    tg_shape r = s, perm = {s.ndim + 1, {0}};
    r.ndim = s.ndim + 1;
    r.d[s.ndim - 1] = heads;
    r.d[s.ndim] = D / heads;
    for (int i = 0; i < perm.ndim; i++) perm.d[i] = i;
    perm.d[s.ndim - 2] = s.ndim - 1;
    perm.d[s.ndim - 1] = s.ndim - 2;
    return (tg_tensor){g, tg_ir_permute(g, tg_ir_reshape(g, x.id, r, file, line), perm, file, line)};
}

/* [..., H, T, Dh] -> [..., T, H, Dh] -> [..., T, H*Dh] */
tg_tensor tg_merge_heads_at(tg_tensor x, const char *file, int line) {
    if (!ok(x)) return x;
    tg_graph *g = x.g;
    tg_shape s = nd(x)->shape;
    char sx[96];
    tg_shape_str(s, sx, sizeof sx);
    if (s.ndim < 3) return fail(g, TG_OP_PERMUTE, "merge_heads", file, line, "x %s must be [..., H, T, Dh]", sx);
    tg_shape perm = {s.ndim, {0}}, r = s;
    for (int i = 0; i < perm.ndim; i++) perm.d[i] = i;
    perm.d[s.ndim - 3] = s.ndim - 2;
    perm.d[s.ndim - 2] = s.ndim - 3;
    r.ndim = s.ndim - 1;
    r.d[s.ndim - 3] = s.d[s.ndim - 2];
    r.d[s.ndim - 2] = s.d[s.ndim - 3] * s.d[s.ndim - 1];
    return (tg_tensor){g, tg_ir_reshape(g, tg_ir_permute(g, x.id, perm, file, line), r, file, line)};
}

/* ---- rope ---- */

/* The cos | sin table [T, D] is a constant of the graph, one per (T, D,
 * base): every layer's rope of q and k reads the same one. Its values are
 * computed when the graph is compiled (tg_ir_build_tables), so tracing
 * costs nothing however large x is; and they are bounded, a mistaken x of
 * 2^31 positions being refused here rather than filling gigabytes. */
#define ROPE_TABLE_MAX ((int64_t)1 << 26)

tg_tensor tg_rope_at(tg_tensor x, float base, const char *file, int line) {
    if (!ok(x)) return x;
    tg_graph *g = x.g;
    tg_shape s = nd(x)->shape;
    char sx[96];
    tg_shape_str(s, sx, sizeof sx);
    if (base == 0.0f) base = 10000.0f;
    if (!(base > 0.0f) || !isfinite(base)) return fail(g, TG_OP_ROPE, "rope", file, line, "base must be > 0 (x %s)", sx);
    if (s.ndim < 2 || s.d[s.ndim - 1] % 2 != 0)
        return fail(g, TG_OP_ROPE, "rope", file, line, "x %s must be [..., T, D] with D even", sx);
    int64_t T = s.d[s.ndim - 2], D = s.d[s.ndim - 1];
    if (T * D > ROPE_TABLE_MAX) /* T * D <= numel(x) <= TG_MAX_NUMEL: no overflow */
        return fail(g, TG_OP_ROPE, "rope", file, line,
                    "x %s needs a T x D angle table of %lld elements, over the 2^26 a graph holds", sx,
                    (long long)(T * D));
    tg_node c = tg_ir_proto(TG_OP_CONST, "rope", file, line);
    c.dtype = TG_F32;
    c.shape = (tg_shape){2, {T, D}};
    c.at.fill.value = base;
    c.at.fill.table = 1;
    int table = -1;
    for (int i = 0; i < g->n && table < 0; i++) {
        const tg_node *t = &g->nodes[i];
        if (t->op == TG_OP_CONST && t->at.fill.table == 1 && t->at.fill.value == base && tg_shape_eq(t->shape, c.shape))
            table = i;
    }
    if (table < 0 && (table = tg_ir_add(g, &c)) < 0) return (tg_tensor){g, -1};
    tg_node n = tg_ir_proto(TG_OP_ROPE, "rope", file, line);
    n.in[0] = x.id;
    n.in[1] = table;
    return (tg_tensor){g, tg_ir_add(g, &n)};
}

/* ---- random ops ---- */

tg_tensor tg_dropout_at(tg_tensor x, float p, const char *file, int line) {
    if (!ok(x) || p == 0.0f) return x;
    tg_graph *g = x.g;
    if (!(p > 0.0f && p < 1.0f)) {
        char sx[96];
        return fail(g, TG_OP_DROPOUT, "dropout", file, line, "p %g must be in [0, 1) (x %s)", (double)p,
                    tg_shape_str(nd(x)->shape, sx, sizeof sx));
    }
    tg_node n = tg_ir_proto(TG_OP_DROPOUT, "dropout", file, line);
    n.in[0] = x.id;
    n.in[1] = tg_ir_rng_seed(g);
    n.at.rand.salt = tg_ir_rng_salt(g);
    n.at.rand.p = p;
    n.at.rand.scale = (float)(1.0 / (1.0 - (double)p));
    return (tg_tensor){g, tg_ir_add(g, &n)};
}

tg_tensor tg_randn_at(tg_graph *g, tg_shape s, const char *file, int line) {
    if (!g) return (tg_tensor){NULL, -1};
    tg_node n = tg_ir_proto(TG_OP_RANDN, "randn", file, line);
    n.in[0] = tg_ir_rng_seed(g);
    n.at.rand.salt = tg_ir_rng_salt(g);
    n.shape = s;
    return (tg_tensor){g, tg_ir_add(g, &n)};
}

tg_tensor tg_categorical_at(tg_tensor logits, const char *file, int line) {
    if (!ok(logits)) return logits;
    tg_graph *g = logits.g;
    tg_node n = tg_ir_proto(TG_OP_CATEGORICAL, "categorical", file, line);
    n.in[0] = logits.id;
    n.in[1] = tg_ir_rng_seed(g);
    n.at.rand.salt = tg_ir_rng_salt(g);
    return (tg_tensor){g, tg_ir_add(g, &n)};
}
