/* The op table: one row per op, read by every stage. A row names the op (as
 * the public builder tg_<name> spells it), its arity and flags, its shape rule
 * (ir/shape.c), gradient rule (grad/rules.c) and CPU kernel (cpu/kernels*.c).
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
#include "ir.h"
#include "shape.h"
#include "../grad/rules.h"
#include "../cpu/kernels.h"

#define LEAF TG_OPF_LEAF
#define EW TG_OPF_ELEMWISE
#define EWI (TG_OPF_ELEMWISE | TG_OPF_INPLACE)

const tg_opinfo tg_ops[TG_OP_COUNT] = {
    [TG_OP_PARAM]   = {"param",   0, LEAF, tg_shape_leaf, NULL, NULL},
    [TG_OP_INPUT]   = {"input",   0, LEAF, tg_shape_leaf, NULL, NULL},
    [TG_OP_STATE]   = {"state",   0, LEAF, tg_shape_leaf, NULL, NULL},
    [TG_OP_CONST]   = {"constant", 0, LEAF | TG_OPF_CONSTANT, tg_shape_leaf, NULL, tg_cpu_const},
    [TG_OP_ARANGE]  = {"arange",  0, LEAF | TG_OPF_CONSTANT, tg_shape_arange, NULL, tg_cpu_arange},

    [TG_OP_ADD]     = {"add",     2, EWI, tg_shape_binary, tg_grad_add, tg_cpu_binary},
    [TG_OP_SUB]     = {"sub",     2, EWI, tg_shape_binary, tg_grad_sub, tg_cpu_binary},
    [TG_OP_MUL]     = {"mul",     2, EWI, tg_shape_binary, tg_grad_mul, tg_cpu_binary},
    [TG_OP_DIV]     = {"div",     2, EWI, tg_shape_binary, tg_grad_div, tg_cpu_binary},
    [TG_OP_LESS]    = {"less",    2, EWI, tg_shape_binary, NULL, tg_cpu_binary},
    [TG_OP_GREATER] = {"greater", 2, EWI, tg_shape_binary, NULL, tg_cpu_binary},

    [TG_OP_NEG]     = {"neg",     1, EWI, tg_shape_unary_f32, tg_grad_neg, tg_cpu_unary},
    [TG_OP_SQRT]    = {"sqrt",    1, EWI, tg_shape_unary_f32, tg_grad_sqrt, tg_cpu_unary},
    [TG_OP_RSQRT]   = {"rsqrt",   1, EWI, tg_shape_unary_f32, tg_grad_rsqrt, tg_cpu_unary},
    [TG_OP_LOG]     = {"log",     1, EWI, tg_shape_unary_f32, tg_grad_log, tg_cpu_unary},
    [TG_OP_EXP]     = {"exp",     1, EWI, tg_shape_unary_f32, tg_grad_exp, tg_cpu_unary},
    [TG_OP_RELU]    = {"relu",    1, EWI, tg_shape_unary_f32, tg_grad_relu, tg_cpu_unary},
    [TG_OP_CAST]    = {"cast",    1, EWI, tg_shape_cast, NULL, tg_cpu_cast},

    [TG_OP_WHERE]   = {"where",   3, EW, tg_shape_where, tg_grad_where, tg_cpu_where},

    [TG_OP_SUM]     = {"sum",     1, 0, tg_shape_sum, tg_grad_sum, tg_cpu_sum},

    [TG_OP_RESHAPE]   = {"reshape",   1, TG_OPF_VIEW, tg_shape_reshape, tg_grad_reshape, NULL},
    [TG_OP_PERMUTE]   = {"permute",   1, 0, tg_shape_permute, tg_grad_permute, tg_cpu_permute},
    [TG_OP_BROADCAST] = {"broadcast_to", 1, 0, tg_shape_broadcast_to, tg_grad_broadcast, tg_cpu_broadcast},

    [TG_OP_MATMUL]  = {"matmul",  2, 0, tg_shape_matmul, tg_grad_matmul, tg_cpu_matmul},

    [TG_OP_ONE_HOT] = {"one_hot", 1, 0, tg_shape_one_hot, NULL, tg_cpu_one_hot},

    [TG_OP_LOG_SOFTMAX]    = {"log_softmax",    1, 0, tg_shape_axis_f32, tg_grad_log_softmax, tg_cpu_log_softmax},
    [TG_OP_SOFTMAX_CAUSAL] = {"softmax_causal", 1, 0, tg_shape_causal, tg_grad_softmax_causal, tg_cpu_softmax_causal},
    [TG_OP_WHERE_CAUSAL]   = {"where_causal",   1, TG_OPF_INPLACE, tg_shape_causal, tg_grad_where_causal, tg_cpu_where_causal},

    /* math and shape ops. Attributes:
     *   min / max            NumPy broadcasting, f32 or i32; NaN propagates
     *   clamp                fa[0] lo, fa[1] hi: max with lo first, then min with hi
     *   gelu                 ia[0] 1 = the tanh approximation, 0 = exact (erf)
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
     *   unary_grad           in = (s, gy); ia[0] the forward op, ia[1] and fa[0..1] its ia[0], fa[0..1];
     *                        s = the forward output for tanh, sigmoid, softplus and leaky_relu with
     *                        alpha >= 0, the forward input otherwise
     *   narrow_grad          ia[0] axis, ia[1] start; the node's shape is the input's (zeros outside)
     *   take_along_axis_grad in = (gy, idx); ia[0] axis; the node's shape is x's */
    [TG_OP_MIN]        = {"min",        2, EWI, tg_shape_binary, tg_grad_minmax, tg_cpu_minmax},
    [TG_OP_MAX]        = {"max",        2, EWI, tg_shape_binary, tg_grad_minmax, tg_cpu_minmax},
    [TG_OP_CLAMP]      = {"clamp",      1, EWI, tg_shape_unary_num, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_ABS]        = {"abs",        1, EWI, tg_shape_unary_num, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_SQUARE]     = {"square",     1, EWI, tg_shape_unary_num, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_SIN]        = {"sin",        1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_COS]        = {"cos",        1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_TANH]       = {"tanh",       1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_SIGMOID]    = {"sigmoid",    1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_ERF]        = {"erf",        1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_GELU]       = {"gelu",       1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_SILU]       = {"silu",       1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_SOFTPLUS]   = {"softplus",   1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_LEAKY_RELU] = {"leaky_relu", 1, EWI, tg_shape_unary_f32, tg_grad_unary_math, tg_cpu_unary_math},
    [TG_OP_SOFTMAX]    = {"softmax",    1, TG_OPF_INPLACE, tg_shape_axis_f32, tg_grad_softmax, tg_cpu_softmax},
    [TG_OP_ARGMAX]     = {"argmax",     1, 0, tg_shape_arg, NULL, tg_cpu_argmax},
    [TG_OP_ARGMIN]     = {"argmin",     1, 0, tg_shape_arg, NULL, tg_cpu_argmax},
    [TG_OP_STOP_GRADIENT] = {"stop_gradient", 1, TG_OPF_VIEW, tg_shape_identity, NULL, NULL},
    [TG_OP_NARROW]     = {"narrow",     1, 0, tg_shape_narrow, tg_grad_narrow, tg_cpu_narrow},
    [TG_OP_CONCAT]     = {"concat",     TG_MAX_IN, 0, tg_shape_concat, tg_grad_concat, tg_cpu_concat},
    [TG_OP_TAKE_ALONG_AXIS] = {"take_along_axis", 2, 0, tg_shape_take_along_axis, tg_grad_take_along_axis,
                               tg_cpu_take_along_axis},
    [TG_OP_MINMAX_GRAD] = {"minmax_grad", 3, EWI, tg_shape_minmax_grad, NULL, tg_cpu_minmax_grad},
    [TG_OP_UNARY_GRAD]  = {"unary_grad",  2, EWI, tg_shape_same, NULL, tg_cpu_unary_grad},
    [TG_OP_NARROW_GRAD] = {"narrow_grad", 1, 0, tg_shape_narrow_grad, NULL, tg_cpu_narrow_grad},
    [TG_OP_TAKE_ALONG_AXIS_GRAD] = {"take_along_axis_grad", 2, 0, tg_shape_take_along_axis_grad, NULL,
                                    tg_cpu_take_along_axis_grad},

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
    [TG_OP_CROSS_ENTROPY] = {"cross_entropy", 2, 0, tg_shape_xent, tg_grad_cross_entropy, tg_cpu_cross_entropy},
    [TG_OP_NLL_LOSS]      = {"nll_loss",      2, 0, tg_shape_xent, tg_grad_nll_loss, tg_cpu_nll_loss},
    [TG_OP_LAYER_NORM]    = {"layer_norm",    3, TG_OPF_INPLACE, tg_shape_norm, tg_grad_norm, tg_cpu_norm},
    [TG_OP_RMS_NORM]      = {"rms_norm",      2, TG_OPF_INPLACE, tg_shape_norm, tg_grad_norm, tg_cpu_norm},
    [TG_OP_EMBEDDING]     = {"embedding",     2, 0, tg_shape_embedding, tg_grad_embedding, tg_cpu_embedding},
    [TG_OP_ROPE]          = {"rope",          2, TG_OPF_INPLACE, tg_shape_rope, tg_grad_rope, tg_cpu_rope},
    [TG_OP_DROPOUT]       = {"dropout",       2, TG_OPF_INPLACE, tg_shape_dropout, tg_grad_dropout, tg_cpu_dropout},
    [TG_OP_RANDN]         = {"randn",         1, 0, tg_shape_randn, NULL, tg_cpu_randn},
    [TG_OP_CATEGORICAL]   = {"categorical",   2, 0, tg_shape_categorical, NULL, tg_cpu_categorical},
    [TG_OP_CROSS_ENTROPY_GRAD] = {"cross_entropy_grad", 3, TG_OPF_INPLACE, tg_shape_xent_grad, NULL, tg_cpu_cross_entropy_grad},
    [TG_OP_NLL_LOSS_GRAD] = {"nll_loss_grad", 2, 0, tg_shape_xent_grad, NULL, tg_cpu_nll_loss_grad},
    [TG_OP_NORM_STATS]    = {"norm_stats",    1, 0, tg_shape_norm_grad, NULL, tg_cpu_norm_stats},
    [TG_OP_NORM_DX]       = {"norm_dx",       4, TG_OPF_INPLACE, tg_shape_norm_grad, NULL, tg_cpu_norm_dx},
    [TG_OP_NORM_DGAIN]    = {"norm_dgain",    3, 0, tg_shape_norm_grad, NULL, tg_cpu_norm_dgain},
    [TG_OP_EMBEDDING_GRAD] = {"embedding_grad", 2, 0, tg_shape_embedding, NULL, tg_cpu_embedding_grad},

    /* convolution ops, NCHW f32.
     *   conv2d (x, w[, b])           ia[0] stride_h [1] stride_w [2] pad_h [3] pad_w [4] groups;
     *                                nin 2, or 3 with a bias b [O] added to every output plane
     *   conv2d_grad_input (gy, w)    the same, and ia[5], ia[6] = H, W of the input
     *   conv2d_grad_weight (x, gy)   the same, and ia[5], ia[6] = kH, kW
     *   max_pool2d (x), max_pool2d_grad (x, y, gy)   ia[0..3] as conv2d, ia[5], ia[6] = kH, kW;
     *       y is the forward's output: the gradient goes to the first window element equal to it
     *   nearest_upsample2d (x), upsample2d_grad (gy)   ia[0] factor */
    [TG_OP_CONV2D]             = {"conv2d",             3, 0, tg_shape_conv2d, tg_grad_conv2d, tg_cpu_conv2d},
    [TG_OP_CONV2D_GRAD_INPUT]  = {"conv2d_grad_input",  2, 0, tg_shape_conv2d_grad_input, NULL, tg_cpu_conv2d_grad_input},
    [TG_OP_CONV2D_GRAD_WEIGHT] = {"conv2d_grad_weight", 2, 0, tg_shape_conv2d_grad_weight, NULL, tg_cpu_conv2d_grad_weight},
    [TG_OP_MAX_POOL2D]         = {"max_pool2d",         1, 0, tg_shape_max_pool2d, tg_grad_max_pool2d, tg_cpu_max_pool2d},
    [TG_OP_MAX_POOL2D_GRAD]    = {"max_pool2d_grad",    3, 0, tg_shape_max_pool2d, NULL, tg_cpu_max_pool2d_grad},
    [TG_OP_UPSAMPLE2D]         = {"nearest_upsample2d", 1, 0, tg_shape_upsample2d, tg_grad_upsample2d, tg_cpu_upsample2d},
    [TG_OP_UPSAMPLE2D_GRAD]    = {"upsample2d_grad",    1, 0, tg_shape_upsample2d, NULL, tg_cpu_upsample2d_grad},

    [TG_OP_RELU_GRAD]        = {"relu_grad",        2, EWI, tg_shape_same, NULL, tg_cpu_relu_grad},
    [TG_OP_LOG_SOFTMAX_GRAD] = {"log_softmax_grad", 2, 0, tg_shape_axis_f32, NULL, tg_cpu_log_softmax_grad},
    [TG_OP_SOFTMAX_GRAD]     = {"softmax_grad",     2, 0, tg_shape_axis_f32, NULL, tg_cpu_softmax_grad},

    [TG_OP_ADAM_M]  = {"adam_m",  2, EWI, tg_shape_same, NULL, tg_cpu_adam_m},
    [TG_OP_ADAM_V]  = {"adam_v",  2, EWI, tg_shape_same, NULL, tg_cpu_adam_v},
    [TG_OP_ADAM_P]  = {"adam_p",  4, EWI, tg_shape_same, NULL, tg_cpu_adam_p},
    [TG_OP_SGD_V]   = {"sgd_v",   4, EWI, tg_shape_same, NULL, tg_cpu_sgd_v},
    [TG_OP_SGD_P]   = {"sgd_p",   4, EWI, tg_shape_same, NULL, tg_cpu_sgd_p},
};
