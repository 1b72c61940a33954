/* The WGSL emitter of every op, one row per op in the order of ir.h. Adding
 * an op = one row here + one emitter in ops_*.c (tests/test_webgpu.c checks
 * that every op with a CPU kernel has a row). Leaves other than constants
 * and views (reshape) have no kernel. The flags after the emitter: whether
 * it can write the node as an inline function (emit.h), and whether that
 * function is cheap enough to recompute where a kernel reads an element
 * more than once (fuse.c). */
#include "emit.h"

const tg_wgsl_op tg_wgsl_ops[TG_OP_COUNT] = {
    [TG_OP_CONST]  = {wgsl_const},
    [TG_OP_ARANGE] = {wgsl_arange},

    [TG_OP_ADD]     = {wgsl_binary, true, true},
    [TG_OP_SUB]     = {wgsl_binary, true, true},
    [TG_OP_MUL]     = {wgsl_binary, true, true},
    [TG_OP_DIV]     = {wgsl_binary, true, true},
    [TG_OP_LESS]    = {wgsl_binary, true, true},
    [TG_OP_GREATER] = {wgsl_binary, true, true},

    [TG_OP_NEG]   = {wgsl_unary, true, true},
    [TG_OP_SQRT]  = {wgsl_unary, true, false},
    [TG_OP_RSQRT] = {wgsl_unary, true, false},
    [TG_OP_LOG]   = {wgsl_unary, true, false},
    [TG_OP_EXP]   = {wgsl_unary, true, false},
    [TG_OP_RELU]  = {wgsl_unary, true, true},
    [TG_OP_CAST]  = {wgsl_cast, true, true},

    [TG_OP_WHERE] = {wgsl_where, true, true},

    [TG_OP_SUM] = {wgsl_sum},

    [TG_OP_PERMUTE]   = {wgsl_copy, true, true},
    [TG_OP_BROADCAST] = {wgsl_copy, true, true},

    [TG_OP_MATMUL] = {wgsl_matmul},

    [TG_OP_ONE_HOT] = {wgsl_one_hot, true, true},

    [TG_OP_LOG_SOFTMAX]    = {wgsl_softmax_lines},
    [TG_OP_SOFTMAX_CAUSAL] = {wgsl_softmax_causal},
    [TG_OP_WHERE_CAUSAL]   = {wgsl_where_causal, true, true},

    [TG_OP_MIN]             = {wgsl_minmax, true, true},
    [TG_OP_MAX]             = {wgsl_minmax, true, true},
    [TG_OP_CLAMP]           = {wgsl_unary_math, true, true},
    [TG_OP_ABS]             = {wgsl_unary_math, true, true},
    [TG_OP_SQUARE]          = {wgsl_unary_math, true, true},
    [TG_OP_SIN]             = {wgsl_unary_math, true, false},
    [TG_OP_COS]             = {wgsl_unary_math, true, false},
    [TG_OP_TANH]            = {wgsl_unary_math, true, false},
    [TG_OP_SIGMOID]         = {wgsl_unary_math, true, false},
    [TG_OP_ERF]             = {wgsl_unary_math, true, false},
    [TG_OP_GELU]            = {wgsl_unary_math, true, false},
    [TG_OP_SILU]            = {wgsl_unary_math, true, false},
    [TG_OP_SOFTPLUS]        = {wgsl_unary_math, true, false},
    [TG_OP_LEAKY_RELU]      = {wgsl_unary_math, true, true},
    [TG_OP_SOFTMAX]         = {wgsl_softmax},
    [TG_OP_ARGMAX]          = {wgsl_argmax},
    [TG_OP_ARGMIN]          = {wgsl_argmax},
    [TG_OP_NARROW]          = {wgsl_narrow, true, true},
    [TG_OP_CONCAT]          = {wgsl_concat, true, true},
    [TG_OP_TAKE_ALONG_AXIS] = {wgsl_take_along_axis, true, true},
    [TG_OP_MINMAX_GRAD]     = {wgsl_minmax_grad, true, true},
    [TG_OP_UNARY_GRAD]      = {wgsl_unary_grad, true, false},
    [TG_OP_NARROW_GRAD]     = {wgsl_narrow_grad, true, true},
    [TG_OP_TAKE_ALONG_AXIS_GRAD] = {wgsl_take_along_axis_grad},

    [TG_OP_CROSS_ENTROPY]      = {wgsl_cross_entropy},
    [TG_OP_NLL_LOSS]           = {wgsl_nll_loss},
    [TG_OP_LAYER_NORM]         = {wgsl_norm},
    [TG_OP_RMS_NORM]           = {wgsl_norm},
    [TG_OP_EMBEDDING]          = {wgsl_embedding, true, true},
    [TG_OP_ROPE]               = {wgsl_rope},
    [TG_OP_DROPOUT]            = {wgsl_dropout, true, false},
    [TG_OP_RANDN]              = {wgsl_randn, true, false},
    [TG_OP_CATEGORICAL]        = {wgsl_categorical},
    [TG_OP_CROSS_ENTROPY_GRAD] = {wgsl_cross_entropy_grad},
    [TG_OP_NLL_LOSS_GRAD]      = {wgsl_nll_loss_grad, true, true},
    [TG_OP_NORM_STATS]         = {wgsl_norm_stats},
    [TG_OP_NORM_DX]            = {wgsl_norm_dx},
    [TG_OP_NORM_DGAIN]         = {wgsl_norm_dgain},
    [TG_OP_EMBEDDING_GRAD]     = {wgsl_embedding_grad},

    [TG_OP_CONV2D]             = {wgsl_conv2d},
    [TG_OP_CONV2D_GRAD_INPUT]  = {wgsl_conv2d_grad_input},
    [TG_OP_CONV2D_GRAD_WEIGHT] = {wgsl_conv2d_grad_weight},
    [TG_OP_MAX_POOL2D]         = {wgsl_max_pool2d},
    [TG_OP_MAX_POOL2D_GRAD]    = {wgsl_max_pool2d_grad},
    [TG_OP_UPSAMPLE2D]         = {wgsl_upsample2d},
    [TG_OP_UPSAMPLE2D_GRAD]    = {wgsl_upsample2d_grad},

    [TG_OP_RELU_GRAD]        = {wgsl_relu_grad, true, true},
    [TG_OP_LOG_SOFTMAX_GRAD] = {wgsl_softmax_lines},
    [TG_OP_SOFTMAX_GRAD]     = {wgsl_softmax_lines},

    [TG_OP_ADAM_M] = {wgsl_optim},
    [TG_OP_ADAM_V] = {wgsl_optim},
    [TG_OP_ADAM_P] = {wgsl_optim},
    [TG_OP_SGD_V]  = {wgsl_optim},
    [TG_OP_SGD_P]  = {wgsl_optim},
};
