/* The op registry: one row per op of ops.def, read by every stage: the op's
 * name (as the public builder tg_<name> spells it), arity, flags and shape
 * rule (ir/shape*.c). The gradient rules (grad/grad.c) and each backend's
 * kernels keep their own tables, expanded from the same list: the IR knows
 * no gradient or backend.
 *
 * Attributes are in tg_node.at, one struct per family (attr.h says which
 * op reads which field). Inputs and semantics, per op, where the row does
 * not say it all:
 *   param/input/state    name; const: data[] literal values, or at.fill
 *   reshape/broadcast    the target shape is the node's shape
 *   adam_p               in = (p, m_new, v_new, hyper [lr, lrt, shrink])
 *   sgd_v                in = (v, g, p, hyper)
 *   sgd_p                in = (p, g, v_new or p, hyper)
 *   min / max            NumPy broadcasting, f32 or i32; NaN propagates
 *   argmax / argmin      i32 out; the first index wins ties, NaN is extreme
 *   amax / amin          the extreme value itself, the input's dtype
 *   stop_gradient        a view of its input with no gradient rule
 *   concat               nin = 2..TG_MAX_IN inputs (arity is the maximum)
 *   take_along_axis      in = (x, idx i32); a negative idx counts from the end, one still
 *                        out of range reads 0
 *   minmax_grad          in = (a, b, gy)
 *   binary_grad          in = (a, b, gy): one operand's cotangent (at.binary_grad.side), over gy's shape
 *   unary_grad           in = (s, gy); s = the forward's output or input, as its save
 *                        column in ops.def says (gy again when it saves nothing)
 *   narrow_grad          the node's shape is the input's (zeros outside)
 *   take_along_axis_grad in = (gy, idx); the node's shape is x's
 *   cross_entropy, nll_loss   in = (logits or logprobs [..., V], targets i32 [...]) -> f32 [...]
 *   cross_entropy_grad        in = (logits, targets, gy [...]) -> [..., V]
 *   nll_loss_grad             in = (targets, gy)
 *   layer_norm / rms_norm     in = (x, g[, b])
 *   norm_stats                in = (x) -> [..., 2] (mean, rstd; mean 0 for rms)
 *   norm_dx                   in = (x, g, gy, stats)
 *   norm_dgain                in = (x, gy, stats) -> [D]
 *   embedding                 in = (table [V, D], idx i32 [...]) -> [..., D]
 *   embedding_grad            in = (idx, gy [..., D]) -> [V, D]
 *   rope                      in = (x [..., T, D], table [T, D] = cos | sin halves)
 *   dropout                   in = (x, seed)
 *   randn                     in = (seed); shape from the builder; y[e] = tg_rng_normal(seed, salt, e)
 *   categorical               in = (logits [..., V], seed) -> i32 [...]; row r draws
 *                             u = tg_rng_uniform(seed, salt, r), inverse CDF (tg_cpu_categorical says how)
 *   (seed = the i32 [2] leaf read as low | high << 32)
 *   conv2d (x, w[, b])        NCHW f32; nin 2, or 3 with a bias b [O] added to every output plane
 *   conv2d_grad_input (gy, w), conv2d_grad_weight (x, gy)
 *   max_pool2d (x), max_pool2d_grad (x, y, gy)   y is the forward's output: the gradient goes
 *                             to the first window element equal to it
 *   nearest_upsample2d (x), upsample2d_grad (gy)
 *   conv2d_grad_input         also conv_transpose2d's forward (gy = its x), with a gradient
 *   upsample2d_grad           also avg_pool2d's block sums (gy = its x), with a gradient
 *   cumsum (x)                at.scan; reverse sums from the end (cumsum's gradient)
 *   topk (x) -> i32           at.topk: the indices; the values are a take_along_axis of them
 *   pad (x), pad_grad (gy)    at.pad: one axis each (tg_pad chains them) */

#include "ir.h"
#include "shape.h"

#define LEAF TG_OPF_LEAF
#define EW TG_OPF_ELEMWISE
#define VIEW TG_OPF_VIEW
#define CONST TG_OPF_CONSTANT
#define INPLACE TG_OPF_INPLACE
#define MAP TG_OPF_MAP
#define CHEAP TG_OPF_CHEAP
#define UPDATE TG_OPF_UPDATE
#define REMAT TG_OPF_REMAT
#define MATH TG_OPF_MATH

const tg_opinfo tg_ops[TG_OP_COUNT] = {
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) \
    [TG_OP_##OP] = {#name, arity, flags, tg_shape_##shape},
#include "ops.def"
};
