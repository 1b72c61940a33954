/* The WGSL emitter of every op, one row per op in the order of ir.h. Adding
 * an op = one row here + one emitter in ops_*.c (tests/test_webgpu.c checks
 * that every op with a CPU kernel has a row). Leaves other than constants
 * and views (reshape) have no kernel. The flags after the emitter: whether
 * it can write the node as an inline function (emit.h), and whether that
 * function is cheap enough to recompute where a kernel reads an element
 * more than once (fuse.c). */
#include "emit.h"

const tg_wgsl_op tg_wgsl_ops[TG_OP_COUNT] = {
    [TG_OP_CONST]  = {tg_wgsl_const},
    [TG_OP_ARANGE] = {tg_wgsl_arange},

    [TG_OP_ADD]     = {tg_wgsl_binary, true, true},
    [TG_OP_SUB]     = {tg_wgsl_binary, true, true},
    [TG_OP_MUL]     = {tg_wgsl_binary, true, true},
    [TG_OP_DIV]     = {tg_wgsl_binary, true, true},
    [TG_OP_LESS]    = {tg_wgsl_binary, true, true},
    [TG_OP_GREATER] = {tg_wgsl_binary, true, true},

    [TG_OP_NEG]   = {tg_wgsl_unary, true, true},
    [TG_OP_SQRT]  = {tg_wgsl_unary, true, false},
    [TG_OP_RSQRT] = {tg_wgsl_unary, true, false},
    [TG_OP_LOG]   = {tg_wgsl_unary, true, false},
    [TG_OP_EXP]   = {tg_wgsl_unary, true, false},
    [TG_OP_RELU]  = {tg_wgsl_unary, true, true},
    [TG_OP_CAST]  = {tg_wgsl_cast, true, true},

    [TG_OP_WHERE] = {tg_wgsl_where, true, true},

    [TG_OP_SUM] = {tg_wgsl_sum},

    [TG_OP_PERMUTE]   = {tg_wgsl_copy, true, true},
    [TG_OP_BROADCAST] = {tg_wgsl_copy, true, true},

    [TG_OP_MATMUL] = {tg_wgsl_matmul},

    [TG_OP_ONE_HOT] = {tg_wgsl_one_hot, true, true},

    [TG_OP_LOG_SOFTMAX]    = {tg_wgsl_softmax_lines},
    [TG_OP_SOFTMAX_CAUSAL] = {tg_wgsl_softmax_causal},
    [TG_OP_WHERE_CAUSAL]   = {tg_wgsl_where_causal, true, true},

    [TG_OP_MIN]             = {tg_wgsl_minmax, true, true},
    [TG_OP_MAX]             = {tg_wgsl_minmax, true, true},
    [TG_OP_CLAMP]           = {tg_wgsl_unary_math, true, true},
    [TG_OP_ABS]             = {tg_wgsl_unary_math, true, true},
    [TG_OP_SQUARE]          = {tg_wgsl_unary_math, true, true},
    [TG_OP_SIN]             = {tg_wgsl_unary_math, true, false},
    [TG_OP_COS]             = {tg_wgsl_unary_math, true, false},
    [TG_OP_TANH]            = {tg_wgsl_unary_math, true, false},
    [TG_OP_SIGMOID]         = {tg_wgsl_unary_math, true, false},
    [TG_OP_ERF]             = {tg_wgsl_unary_math, true, false},
    [TG_OP_GELU]            = {tg_wgsl_unary_math, true, false},
    [TG_OP_SILU]            = {tg_wgsl_unary_math, true, false},
    [TG_OP_SOFTPLUS]        = {tg_wgsl_unary_math, true, false},
    [TG_OP_LEAKY_RELU]      = {tg_wgsl_unary_math, true, true},
    [TG_OP_SOFTMAX]         = {tg_wgsl_softmax},
    [TG_OP_ARGMAX]          = {tg_wgsl_argmax},
    [TG_OP_ARGMIN]          = {tg_wgsl_argmax},
    [TG_OP_NARROW]          = {tg_wgsl_narrow, true, true},
    [TG_OP_CONCAT]          = {tg_wgsl_concat, true, true},
    [TG_OP_TAKE_ALONG_AXIS] = {tg_wgsl_take_along_axis, true, true},
    [TG_OP_MINMAX_GRAD]     = {tg_wgsl_minmax_grad, true, true},
    [TG_OP_UNARY_GRAD]      = {tg_wgsl_unary_grad, true, false},
    [TG_OP_NARROW_GRAD]     = {tg_wgsl_narrow_grad, true, true},
    [TG_OP_TAKE_ALONG_AXIS_GRAD] = {tg_wgsl_take_along_axis_grad},

    [TG_OP_CROSS_ENTROPY]      = {tg_wgsl_cross_entropy},
    [TG_OP_NLL_LOSS]           = {tg_wgsl_nll_loss},
    [TG_OP_LAYER_NORM]         = {tg_wgsl_norm},
    [TG_OP_RMS_NORM]           = {tg_wgsl_norm},
    [TG_OP_EMBEDDING]          = {tg_wgsl_embedding, true, true},
    [TG_OP_ROPE]               = {tg_wgsl_rope},
    [TG_OP_DROPOUT]            = {tg_wgsl_dropout, true, false},
    [TG_OP_RANDN]              = {tg_wgsl_randn, true, false},
    [TG_OP_CATEGORICAL]        = {tg_wgsl_categorical},
    [TG_OP_CROSS_ENTROPY_GRAD] = {tg_wgsl_cross_entropy_grad},
    [TG_OP_NLL_LOSS_GRAD]      = {tg_wgsl_nll_loss_grad, true, true},
    [TG_OP_NORM_STATS]         = {tg_wgsl_norm_stats},
    [TG_OP_NORM_DX]            = {tg_wgsl_norm_dx},
    [TG_OP_NORM_DGAIN]         = {tg_wgsl_norm_dgain},
    [TG_OP_EMBEDDING_GRAD]     = {tg_wgsl_embedding_grad},

    [TG_OP_CONV2D]             = {tg_wgsl_conv2d},
    [TG_OP_CONV2D_GRAD_INPUT]  = {tg_wgsl_conv2d_grad_input},
    [TG_OP_CONV2D_GRAD_WEIGHT] = {tg_wgsl_conv2d_grad_weight},
    [TG_OP_MAX_POOL2D]         = {tg_wgsl_max_pool2d},
    [TG_OP_MAX_POOL2D_GRAD]    = {tg_wgsl_max_pool2d_grad},
    [TG_OP_UPSAMPLE2D]         = {tg_wgsl_upsample2d},
    [TG_OP_UPSAMPLE2D_GRAD]    = {tg_wgsl_upsample2d_grad},

    [TG_OP_RELU_GRAD]        = {tg_wgsl_relu_grad, true, true},
    [TG_OP_LOG_SOFTMAX_GRAD] = {tg_wgsl_softmax_lines},
    [TG_OP_SOFTMAX_GRAD]     = {tg_wgsl_softmax_lines},

    [TG_OP_ADAM_M] = {tg_wgsl_optim},
    [TG_OP_ADAM_V] = {tg_wgsl_optim},
    [TG_OP_ADAM_P] = {tg_wgsl_optim},
    [TG_OP_SGD_V]  = {tg_wgsl_optim},
    [TG_OP_SGD_P]  = {tg_wgsl_optim},
};
