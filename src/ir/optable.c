/* The op registry: one row per op of ops.def, read by every stage: the op's
 * name (as the public builder tg_<name> spells it), arity, flags, shape rule
 * (ir/shape*.c) and gradient rule (grad/rules*.c). Backends keep their own
 * kernel tables, expanded from the same list.
 *
 * Attributes, per op (tg_node.ia / .fa):
 *   param/input/state  name; state: fa[0] initial value
 *   const              fa[0] fill value, or data[] literal values
 *   arange             ia[0] length
 *   cast               ia[0] target dtype
 *   sum                ia[0] bitmask of reduced axes (kept as size 1)
 *   permute            ia[0..nd) the permutation, ia[7] its length
 *   reshape/broadcast  the target shape is the node's shape
 *   matmul             ia[0] a transposed, ia[1] b transposed
 *   one_hot            ia[0] depth
 *   log_softmax(_grad), softmax_grad  ia[0] axis
 *   where_causal       fa[0] the fill value
 *   adam_m / adam_v    fa[0] beta1 / beta2
 *   adam_p             fa[0] eps, ia[0] apply weight decay; in[3] = hyper [lr, lrt, shrink]
 *   sgd_v              fa[0] momentum, fa[1] L2 decay; in = (v, g, p, hyper)
 *   sgd_p              fa[0] momentum, fa[1] L2 decay, ia[0] nesterov, ia[1] has momentum;
 *                      in = (p, g, v_new or p, hyper) */
/* math and shape ops. Attributes:
 *   min / max            NumPy broadcasting, f32 or i32; NaN propagates
 *   clamp                fa[0] lo, fa[1] hi: max with lo first, then min with hi
 *   leaky_relu           fa[0] alpha: x > 0 ? x : alpha * x
 *   softmax              ia[0] axis
 *   argmax / argmin      ia[0] axis (kept as size 1); i32 out; the first index wins ties, NaN is extreme
 *   stop_gradient        a view of its input with no gradient rule
 *   narrow               ia[0] axis, ia[1] start, ia[2] length
 *   concat               ia[0] axis; nin = 2..TG_MAX_IN inputs (arity is the maximum)
 *   take_along_axis      in = (x, idx i32); ia[0] axis; a negative idx counts from the end,
 *                        one still out of range reads 0
 *   minmax_grad          in = (a, b, gy); ia[0] TG_OP_MIN or TG_OP_MAX, ia[1] 0/1 = the share
 *                        of a/b: all of gy to the winner, half each at a tie
 *   unary_grad           in = (s, gy); ia[0] the forward op, fa[0..1] its fa[0..1]; s = the
 *                        forward's output or input, as its save column in ops.def says
 *   narrow_grad          ia[0] axis, ia[1] start; the node's shape is the input's (zeros outside)
 *   take_along_axis_grad in = (gy, idx); ia[0] axis; the node's shape is x's */
/* nn ops. Attributes:
 *   cross_entropy, nll_loss   in = (logits or logprobs [..., V], targets i32 [...]) -> f32 [...]
 *   cross_entropy_grad        in = (logits, targets, gy [...]) -> [..., V]
 *   nll_loss_grad             in = (targets, gy); ia[0] V
 *   layer_norm / rms_norm     in = (x, g[, b]); fa[0] eps
 *   norm_stats                in = (x); fa[0] eps, ia[0] rms -> [..., 2] (mean, rstd; mean 0 for rms)
 *   norm_dx                   in = (x, g, gy, stats); ia[0] rms
 *   norm_dgain                in = (x, gy, stats) -> [D]
 *   embedding                 in = (table [V, D], idx i32 [...]) -> [..., D]
 *   embedding_grad            in = (idx, gy [..., D]); ia[0] V -> [V, D]
 *   rope                      in = (x [..., T, D], table [T, D] = cos | sin halves); ia[0] inverse
 *   dropout                   in = (x, seed); fa[0] p, fa[1] 1/(1-p), ia[7] salt;
 *                             element e: tg_rng_uniform(seed, salt, e) < p ? 0 : x[e] * fa[1]
 *   randn                     in = (seed); ia[7] salt; shape from the builder; y[e] = tg_rng_normal(seed, salt, e)
 *   categorical               in = (logits [..., V], seed); ia[7] salt -> i32 [...]; row r draws
 *                             u = tg_rng_uniform(seed, salt, r), inverse CDF (tg_cpu_categorical says how)
 * (seed = the i32 [2] leaf read as low | high << 32) */
/* convolution ops, NCHW f32.
 *   conv2d (x, w[, b])           ia[0] stride_h [1] stride_w [2] pad_h [3] pad_w [4] groups;
 *                                nin 2, or 3 with a bias b [O] added to every output plane
 *   conv2d_grad_input (gy, w)    the same, and ia[5], ia[6] = H, W of the input
 *   conv2d_grad_weight (x, gy)   the same, and ia[5], ia[6] = kH, kW
 *   max_pool2d (x), max_pool2d_grad (x, y, gy)   ia[0..3] as conv2d, ia[5], ia[6] = kH, kW;
 *       y is the forward's output: the gradient goes to the first window element equal to it
 *   nearest_upsample2d (x), upsample2d_grad (gy)   ia[0] factor */

#include "ir.h"
#include "shape.h"
#include "../grad/rules.h"

#define LEAF TG_OPF_LEAF
#define EW TG_OPF_ELEMWISE
#define VIEW TG_OPF_VIEW
#define CONST TG_OPF_CONSTANT
#define INPLACE TG_OPF_INPLACE
#define MAP TG_OPF_MAP
#define CHEAP TG_OPF_CHEAP
#define tg_grad_none NULL

const tg_opinfo tg_ops[TG_OP_COUNT] = {
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) \
    [TG_OP_##OP] = {#name, arity, flags, tg_shape_##shape, tg_grad_##grad},
#include "ops.def"
};
