/* The IR: a graph is an array of nodes in topological order; node i produces
 * tensor i. Each node names its op, inputs, output shape/dtype and attributes.
 * Every stage of the pipeline reads the op table (optable.c) for what it
 * needs to know about an op. */
#ifndef TG_IR_H
#define TG_IR_H

#include "tensorgrad.h"
#include "../util/util.h"

#define TG_MAX_IN 4

/* One opcode per row of ops.def. */
typedef enum {
#define TG_OP(OP, ...) TG_OP_##OP,
#include "ops.def"
    TG_OP_COUNT
} tg_opcode;

#include "attr.h"

typedef struct tg_node {
    tg_opcode op;
    tg_dtype dtype;
    int nin;
    int32_t in[TG_MAX_IN];
    tg_shape shape;
    tg_attrs at;       /* the op's attributes (attr.h) */
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

/* Op registry row. */
typedef struct tg_graph tg_graph;

/* Computes n->shape and n->dtype from the inputs and attributes, or records
 * an error on g (via tg_ir_fail) and returns false. */
typedef bool (*tg_shape_fn)(tg_graph *g, tg_node *n);

enum {
    TG_OPF_LEAF = 1 << 0,     /* no inputs; value comes from outside or compile time */
    TG_OPF_ELEMWISE = 1 << 1, /* out[i] depends on inputs at i only (after broadcast) */
    TG_OPF_VIEW = 1 << 2,     /* output aliases input 0's memory */
    TG_OPF_CONSTANT = 1 << 3, /* computed once at compile time */
    TG_OPF_INPLACE = 1 << 4,  /* output may overwrite input 0 (same size, same order) */
    TG_OPF_MAP = 1 << 5,      /* each output element computed on its own from a few input elements */
    TG_OPF_CHEAP = 1 << 6,    /* a few ALU operations per element: fine to recompute */
    TG_OPF_I32 = 1 << 7,      /* unary math: takes i32 operands too */
    TG_OPF_UPDATE = 1 << 8,   /* an optimizer update */
    TG_OPF_REMAT = 1 << 9,    /* one pass over its output: may be computed again for the backward */
    TG_OPF_MATH = 1 << 10     /* a unary or binary math row: its math is an expression of ops.def */
};

typedef struct {
    const char *name;
    int arity;          /* number of inputs */
    unsigned flags;
    tg_shape_fn shape;
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
    /* Values the trace asked to carry to the next step (batch_norm's running
     * statistics): after a training step, param leaf dst takes node src's
     * value. Read once, by the compiler, before any pass renumbers nodes. */
    struct tg_leaf_update { int src, dst; } *upd;
    int n_upd, cap_upd;
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
/* permute (0, 2, 1, 3) of a 4-d tensor: split_heads, merge_heads and their
 * gradients, which the attention matchers look for. */
static inline bool tg_ir_heads_permute(const tg_node *n) {
    const int64_t *p = n->at.permute.perm.d;
    return n->op == TG_OP_PERMUTE && n->at.permute.perm.ndim == 4 && p[0] == 0 && p[1] == 2 && p[2] == 1 && p[3] == 3;
}

/* relu's gradient, unary_grad(y, gy) of the relu row: gy where y > 0, else
 * 0. The products' epilogues and the CPU's pooling fuse it. */
static inline bool tg_ir_is_relu_grad(const tg_node *n) {
    return n->op == TG_OP_UNARY_GRAD && n->at.unary_grad.op == TG_OP_RELU;
}

/* f32 -> i32 as tg_cast defines it on every backend: toward zero,
 * saturating, NaN -> 0, so that no input is undefined behaviour. An integer
 * constant keeps its value as a float (at.fill.value) and every backend
 * converts it through this. */
static inline int32_t tg_ir_f2i(float x) {
    if (!(x == x)) return 0;
    if (x >= 2147483647.0f) return INT32_MAX;
    if (x <= -2147483648.0f) return INT32_MIN;
    return (int32_t)x;
}

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

/* The integer range inside [u->p0, u->p1] (ceil p0, floor p1, saturated to
 * i32): what ops.def's i0, i1 name for the i32 forms of unary math. */
void tg_attr_unary_int_range(const tg_attr_unary *u, int32_t *i0, int32_t *i1);

/* A node of op `op` with its table arity, no inputs or attributes yet; api
 * names the public builder in messages (NULL: the op's own name). */
tg_node tg_ir_proto(tg_opcode op, const char *api, const char *file, int line);

/* Internal builders used by grad rules and the optimizer: same checks as the
 * public ones, call site = the rule's file:line. */
int tg_ir_leaf(tg_graph *g, tg_opcode op, const char *name, tg_dtype dt, tg_shape s, const char *file, int line);
int tg_ir_unary(tg_graph *g, tg_opcode op, int x, const char *file, int line);
int tg_ir_binary(tg_graph *g, tg_opcode op, int a, int b, const char *file, int line);
int tg_ir_scalar(tg_graph *g, float v, const char *file, int line);
/* Computes the data of every constant that is built at compile time (rope's
 * angle tables, at.fill.table): TG_ERR_NOMEM when it cannot. */
tg_status tg_ir_build_tables(tg_graph *g);
int tg_ir_reduce_sum(tg_graph *g, int x, unsigned axes_mask, const char *file, int line);
int tg_ir_reshape(tg_graph *g, int x, tg_shape s, const char *file, int line);
int tg_ir_sum_to_shape(tg_graph *g, int x, tg_shape s, const char *file, int line);
int tg_ir_matmul(tg_graph *g, int a, int b, bool ta, bool tb, const char *file, int line);
int tg_ir_permute(tg_graph *g, int x, tg_shape perm, const char *file, int line);
#define IR_HERE __FILE__, __LINE__
/* A module's _fwd: false (error recorded in g) for a NULL module or graph. */
bool tg_ir_module_ok(tg_graph *g, const void *module, const char *api, const char *file, int line);

/* Asks that param leaf `dst` take node src's value (same shape, f32) at the
 * end of each training step; an error naming `site` (the builder's node)
 * when dst is not a param or is updated twice. */
void tg_ir_leaf_update(tg_graph *g, int dst, int src, const tg_node *site);

/* Random ops read the per-step seed from one state leaf, i32 [2] (the low
 * and high 32 bits of a 64-bit seed), that the session rewrites before every
 * step or run: hash of (session seed, step). Each random op also carries its
 * own salt (at.rand.salt), so two dropout layers draw different
 * masks. Element e of a random op draws tg_rng_u32(seed, salt, e). */
#define TG_RNG_SEED_NAME "rng.seed"
int tg_ir_rng_seed(tg_graph *g);
/* A fresh salt for the next random op of this graph (its creation order). */
uint32_t tg_ir_rng_salt(tg_graph *g);

#endif
