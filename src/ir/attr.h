/* Node attributes: one struct per family of ops that share them, in a union
 * the node's op selects. tg_ir_proto zeroes the whole union, so the fields an
 * op does not use, and the padding, are 0: two nodes built alike are equal
 * byte for byte, and a node copied whole (recompute) keeps its meaning.
 * Inputs and their order are described beside the ops (optable.c). Only
 * ir.h includes this, after tg_opcode (tg_dtype, tg_shape: tensorgrad.h). */
#ifndef TG_ATTR_H
#define TG_ATTR_H

/* Unary math rows of ops.def. The expressions there call these p0, p1, and
 * i0, i1 for the integer range inside [p0, p1] (ceil(p0), floor(p1),
 * saturated). */
typedef struct {
    float p0; /* clamp: lo; leaky_relu: alpha */
    float p1; /* clamp: hi (lo > hi gives hi everywhere) */
} tg_attr_unary;

/* conv2d and its gradients, max_pool2d and its gradient. */
typedef struct {
    int64_t stride_h, stride_w, pad_h, pad_w;
    int64_t groups;     /* conv: channels split in this many groups */
    int64_t kh, kw;     /* conv2d_grad_weight, max_pool2d(_grad): the window */
    int64_t in_h, in_w; /* conv2d_grad_input: the input's H, W (a strided conv maps several to one output size) */
} tg_attr_conv;

typedef union {
    struct {
        /* const: every element (unless data[] holds literal values); state:
         * the initial value; where_causal: what replaces the entries above
         * the diagonal */
        float value;
        /* const: 1 = rope's cos | sin table [T, D] of base `value`, its data
         * built when the graph is compiled (tg_ir_build_tables) */
        int table;
    } fill;
    struct { int64_t len; } arange;
    struct { tg_dtype to; } cast;
    struct { unsigned axes; } sum; /* bitmask of the reduced axes, kept as size 1 */
    /* Output axis i is input axis perm.d[i]; perm.ndim is checked against the
     * input's rank (the builder stores an out-of-range length for the rule to
     * reject). */
    struct { tg_shape perm; } permute;
    struct { bool ta, tb; } matmul; /* a, b read transposed (last two dims) */
    struct { int64_t depth; } one_hot;
    /* nll_loss_grad: the class count V of the output [..., V];
     * embedding_grad: the table's rows V of the output [V, D] */
    struct { int64_t v; } classes;
    /* Ops along one axis, made non-negative by the builder: softmax,
     * log_softmax, softmax_grad, log_softmax_grad, argmax / argmin and
     * amax / amin (kept as size 1), concat, take_along_axis(_grad), narrow, narrow_grad. */
    struct {
        int64_t axis;
        int64_t start; /* narrow, narrow_grad: the first index taken / placed */
        int64_t len;   /* narrow: how many */
    } axis;
    /* cumsum: y[a] = x[0] + ... + x[a] along the axis; reverse: x[a] + ... + x[A-1] */
    struct {
        int64_t axis;
        bool reverse;
    } scan;
    /* topk: the indices of the k largest (smallest unless largest) along
     * the axis, in order, ties to the lower index, NaN above every number */
    struct {
        int64_t axis, k;
        bool largest;
    } topk;
    /* pad, pad_grad: along one axis, `before` and `after` entries added
     * (pad_grad: taken away); mode TG_PAD_CONSTANT fills with `value`,
     * REFLECT mirrors without the edge, REPLICATE repeats the edge */
    struct {
        int64_t axis, before, after;
        int mode;
        float value;
    } pad;
    tg_attr_unary unary;
    struct {
        tg_opcode op;      /* the forward unary math op */
        tg_attr_unary fwd; /* its attributes */
    } unary_grad;
    struct {
        tg_opcode op; /* TG_OP_MIN or TG_OP_MAX */
        int side;     /* 0: a's share, 1: b's (all of gy to the winner, half each at a tie) */
    } minmax_grad;
    struct {
        tg_opcode op; /* the forward binary math op */
        int side;     /* 0: a's cotangent, 1: b's (ops.def's da, db) */
    } binary_grad;
    struct {
        float eps; /* layer_norm, rms_norm, norm_stats: added to the variance */
        bool rms;  /* norm_stats, norm_dx: the rms_norm form (mean taken as 0) */
    } norm;
    struct { bool inverse; } rope; /* rotate by -angle (the gradient) */
    /* Random ops: dropout, randn, categorical. Element e (categorical: row r)
     * draws from tg_rng_*(seed, salt, e); each op gets its own salt
     * (tg_ir_rng_salt), so two dropout layers draw different masks. */
    struct {
        uint32_t salt;
        float p;     /* dropout: y[e] = tg_rng_uniform(seed, salt, e) < p ? 0 : x[e] * scale */
        float scale; /* dropout: 1 / (1 - p) */
    } rand;
    tg_attr_conv conv;
    struct { int64_t factor; } upsample; /* nearest_upsample2d, upsample2d_grad */
    struct {
        float beta;  /* adam_m: beta1; adam_v: beta2 */
        float eps;   /* adam_p */
        bool decay;  /* adam_p: apply the weight decay shrink (adamw) */
    } adam;
    struct {
        float momentum, weight_decay; /* sgd_v, sgd_p; weight_decay is L2, added to the gradient */
        bool nesterov, has_momentum;  /* sgd_p */
    } sgd;
} tg_attrs;

#endif
