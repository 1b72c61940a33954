/* The IR: a graph is an array of nodes in topological order; node i produces
 * tensor i. Each node names its op, inputs, output shape/dtype and attributes.
 * Every stage of the pipeline reads the op table (optable.c) for what it
 * needs to know about an op. */
#ifndef TG_IR_H
#define TG_IR_H

#include "tensorgrad.h"
#include "../util/util.h"

#define TG_MAX_IN 4

typedef enum {
    /* leaves */
    TG_OP_PARAM, TG_OP_INPUT, TG_OP_STATE, TG_OP_CONST, TG_OP_ARANGE,
    /* elementwise binary, NumPy broadcasting */
    TG_OP_ADD, TG_OP_SUB, TG_OP_MUL, TG_OP_DIV, TG_OP_LESS, TG_OP_GREATER,
    /* elementwise unary */
    TG_OP_NEG, TG_OP_SQRT, TG_OP_RSQRT, TG_OP_LOG, TG_OP_EXP, TG_OP_RELU, TG_OP_CAST,
    /* elementwise ternary */
    TG_OP_WHERE,
    /* reductions (keepdims in the IR; builders reshape) */
    TG_OP_SUM,
    /* layout */
    TG_OP_RESHAPE, TG_OP_PERMUTE, TG_OP_BROADCAST,
    /* contraction */
    TG_OP_MATMUL,
    /* indexing */
    TG_OP_ONE_HOT,
    /* softmax family */
    TG_OP_LOG_SOFTMAX, TG_OP_SOFTMAX_CAUSAL, TG_OP_WHERE_CAUSAL,
    /* math and shape ops */
    TG_OP_MIN, TG_OP_MAX, TG_OP_CLAMP, TG_OP_ABS, TG_OP_SQUARE, TG_OP_SIN, TG_OP_COS, TG_OP_TANH,
    TG_OP_SIGMOID, TG_OP_ERF, TG_OP_GELU, TG_OP_SILU, TG_OP_SOFTPLUS, TG_OP_LEAKY_RELU,
    TG_OP_SOFTMAX, TG_OP_ARGMAX, TG_OP_ARGMIN, TG_OP_STOP_GRADIENT,
    TG_OP_NARROW, TG_OP_CONCAT, TG_OP_TAKE_ALONG_AXIS,
    TG_OP_MINMAX_GRAD, TG_OP_UNARY_GRAD, TG_OP_NARROW_GRAD, TG_OP_TAKE_ALONG_AXIS_GRAD,
    /* nn ops */
    TG_OP_CROSS_ENTROPY, TG_OP_NLL_LOSS, TG_OP_LAYER_NORM, TG_OP_RMS_NORM, TG_OP_EMBEDDING, TG_OP_ROPE,
    TG_OP_DROPOUT, TG_OP_RANDN, TG_OP_CATEGORICAL,
    TG_OP_CROSS_ENTROPY_GRAD, TG_OP_NLL_LOSS_GRAD, TG_OP_NORM_STATS, TG_OP_NORM_DX, TG_OP_NORM_DGAIN,
    TG_OP_EMBEDDING_GRAD,
    /* convolution ops */
    TG_OP_CONV2D, TG_OP_CONV2D_GRAD_INPUT, TG_OP_CONV2D_GRAD_WEIGHT,
    TG_OP_MAX_POOL2D, TG_OP_MAX_POOL2D_GRAD, TG_OP_UPSAMPLE2D, TG_OP_UPSAMPLE2D_GRAD,
    /* backward helpers */
    TG_OP_RELU_GRAD, TG_OP_LOG_SOFTMAX_GRAD, TG_OP_SOFTMAX_GRAD,
    /* optimizer updates */
    TG_OP_ADAM_M, TG_OP_ADAM_V, TG_OP_ADAM_P, TG_OP_SGD_V, TG_OP_SGD_P,
    TG_OP_COUNT
} tg_opcode;

typedef struct tg_node {
    tg_opcode op;
    tg_dtype dtype;
    int nin;
    int32_t in[TG_MAX_IN];
    tg_shape shape;
    int64_t ia[8];     /* integer attributes; meaning per op (see optable.c) */
    float fa[4];       /* float attributes */
    char *name;        /* leaves: param/input/state name */
    float *data;       /* TG_OP_CONST with literal values (owned), else NULL */
    const char *api;   /* public builder name for messages ("mean" for a sum built by tg_mean) */
    const char *file;  /* call site that built the node */
    int line;
    int param;         /* TG_OP_PARAM: model param index */
    /* Backward nodes: the forward op whose gradient they compute, for
     * messages ("gradient of tg_matmul (model.c:41)"); of_file NULL otherwise. */
    const char *of_api, *of_file;
    int of_line;
} tg_node;

/* Op table row. */
typedef struct tg_graph tg_graph;
typedef struct cpu_ctx cpu_ctx;

/* Computes n->shape and n->dtype from the inputs and attributes, or records
 * an error on g (via tg_ir_fail) and returns false. */
typedef bool (*tg_shape_fn)(tg_graph *g, tg_node *n);
/* Appends the backward of node `id` given its output cotangent `gy`; writes
 * the cotangent of each input to gx[i] (-1 for none). */
typedef void (*tg_grad_fn)(tg_graph *g, int id, int gy, int *gx);
/* Runs node `id`: out is the output's memory, in[i] the inputs'. */
typedef void (*tg_cpu_fn)(cpu_ctx *c, const tg_graph *g, int id, void *out, void *const *in);

enum {
    TG_OPF_LEAF = 1 << 0,     /* no inputs; value comes from outside or compile time */
    TG_OPF_ELEMWISE = 1 << 1, /* out[i] depends on inputs at i only (after broadcast) */
    TG_OPF_VIEW = 1 << 2,     /* output aliases input 0's memory */
    TG_OPF_CONSTANT = 1 << 3, /* computed once at compile time */
    TG_OPF_INPLACE = 1 << 4   /* output may overwrite input 0 (same size, same order) */
};

typedef struct {
    const char *name;
    int arity;          /* number of inputs */
    unsigned flags;
    tg_shape_fn shape;
    tg_grad_fn grad;    /* NULL: not differentiable (zero gradient) */
    tg_cpu_fn cpu;      /* NULL for leaves and views */
} tg_opinfo;

extern const tg_opinfo tg_ops[TG_OP_COUNT];

struct tg_graph {
    tg_node *nodes;
    int n, cap;
    tg_model *model;
    int *param_node;          /* model param index -> node id, -1 if unused */
    int n_param_node;
    tg_status err;
    char errmsg[512];
    struct tg_capture { char *name; int id; } *caps; /* named intermediates kept readable */
    int n_caps, cap_caps;
    int rng_seed;           /* the TG_RNG_SEED_NAME leaf, -1 until a random op asks */
    uint32_t n_random_ops;  /* salts handed out */
    bool sealed;            /* compiled: nothing may be appended any more */
};

/* Appends a node built from `proto` (op, inputs, attributes); computes and
 * checks its shape with the op's shape rule. Returns the new id, or -1 after
 * recording an error. Inputs that are invalid (< 0) propagate silently. */
int tg_ir_add(tg_graph *g, const tg_node *proto);
/* Records the first error of the graph: "<op>: <message> (<file>:<line>)". */
void tg_ir_fail(tg_graph *g, const tg_node *n, const char *fmt, ...) TG_PRINTF(3, 4);
void tg_ir_fail_status(tg_graph *g, tg_status st, const tg_node *n, const char *fmt, ...) TG_PRINTF(4, 5);
tg_graph *tg_ir_graph_new(tg_model *m);
/* Marks g as the graph this thread traces until tg_ir_trace_end(previous);
 * ops on any other graph meanwhile fail and record the error in g. */
tg_graph *tg_ir_trace_begin(tg_graph *g);
void tg_ir_trace_end(tg_graph *prev);
/* After compile: later ops on g's tensors are refused, g is never changed. */
void tg_ir_seal(tg_graph *g);
/* True when t names a node of its graph. */
static inline bool ir_live(tg_tensor t) { return t.g && t.id >= 0 && t.id < t.g->n; }
/* tg_graph_dot with fused groups drawn as clusters: group[i] is node i's
 * group in [0, n_groups), -1 for none (group NULL: no clusters). */
tg_status tg_ir_graph_dot(const tg_graph *g, const int *group, int n_groups, void *file);

static inline tg_node *ir_node(const tg_graph *g, int id) { return &g->nodes[id]; }
static inline tg_tensor ir_t(tg_graph *g, int id) { return (tg_tensor){g, id}; }

/* Small helpers every stage uses. */
int64_t tg_ir_numel(const tg_node *n);
/* Every dim >= 0, and both the element count and the span (the product of
 * the nonzero dims, which bounds every stride of an empty tensor too) at
 * most TG_MAX_NUMEL: no size or stride computed from s overflows. */
bool tg_ir_numel_ok(tg_shape s);
int64_t tg_ir_span(tg_shape s);
size_t tg_dtype_size(tg_dtype dt);
const char *tg_dtype_name(tg_dtype dt);
bool tg_shape_eq(tg_shape a, tg_shape b);
/* NumPy broadcast of a and b; false if incompatible. */
bool tg_shape_broadcast(tg_shape a, tg_shape b, tg_shape *out);
/* Row-major strides of s (in elements). */
void tg_shape_strides(tg_shape s, int64_t *st);
/* Strides of `in` read as if broadcast to `out` (0 on broadcast axes). */
void tg_shape_bcast_strides(tg_shape in, tg_shape out, int64_t *st);

/* A node of op `op` with its table arity, no inputs or attributes yet; api
 * names the public builder in messages (NULL: the op's own name). */
tg_node tg_ir_proto(tg_opcode op, const char *api, const char *file, int line);

/* Internal builders used by grad rules and the optimizer: same checks as the
 * public ones, call site = the rule's file:line. */
int tg_ir_leaf(tg_graph *g, tg_opcode op, const char *name, tg_dtype dt, tg_shape s, const char *file, int line);
int tg_ir_unary(tg_graph *g, tg_opcode op, int x, const char *file, int line);
int tg_ir_binary(tg_graph *g, tg_opcode op, int a, int b, const char *file, int line);
int tg_ir_scalar(tg_graph *g, float v, const char *file, int line);
int tg_ir_reduce_sum(tg_graph *g, int x, unsigned axes_mask, const char *file, int line);
int tg_ir_reshape(tg_graph *g, int x, tg_shape s, const char *file, int line);
int tg_ir_sum_to_shape(tg_graph *g, int x, tg_shape s, const char *file, int line);
int tg_ir_matmul(tg_graph *g, int a, int b, bool ta, bool tb, const char *file, int line);
int tg_ir_permute(tg_graph *g, int x, tg_shape perm, const char *file, int line);
#define IR_HERE __FILE__, __LINE__
/* A module's _fwd: false (error recorded in g) for a NULL module or graph. */
bool tg_ir_module_ok(tg_graph *g, const void *module, const char *api, const char *file, int line);

/* Random ops read the per-step seed from one state leaf, i32 [2] (the low
 * and high 32 bits of a 64-bit seed), that the session rewrites before every
 * step or run: hash of (session seed, step). Each random op also carries its
 * own salt (ia[7] by convention), so two dropout layers draw different
 * masks. Element e of a random op draws tg_rng_u32(seed, salt, e). */
#define TG_RNG_SEED_NAME "rng.seed"
int tg_ir_rng_seed(tg_graph *g);
/* A fresh salt for the next random op of this graph (its creation order). */
uint32_t tg_ir_rng_salt(tg_graph *g);

#endif
