/* tensorgrad: reverse-mode autograd for static-shape models, compiled to
 * kernels and trained on the CPU or (through WebGPU) on a GPU.
 *
 * The whole public API is in this header. Every name starts with tg_ (types,
 * functions) or TG_ (enum values, macros).
 *
 * The flow, in five calls:
 *
 *   tg_model *m = tg_model_new();                      declare params by name
 *   tg_linear l1 = tg_linear_new(m, "l1", 1, 64, true);
 *   tg_train_spec spec = {...loss function, inputs, optimizer...};
 *   tg_session_new(&spec, &s);                         trace, grad, plan, compile
 *   tg_session_step(s, feeds, n, &loss);               one training step
 *
 * Errors: every function that can fail returns a tg_status; the message of the
 * last failure on the calling thread is tg_last_error(). The library never
 * aborts or exits. Op builders (tg_add, tg_matmul, ...) cannot return a status,
 * so a bad call records the error in its graph, with the caller's file:line,
 * and returns an invalid tensor that every later op passes along; the error
 * surfaces from tg_session_new. */
#ifndef TENSORGRAD_H
#define TENSORGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* The library is built with hidden visibility; what this header declares is
 * its public API. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---- version ------------------------------------------------------------ */

/* The version of this header. Before 1.0 a new minor version may change the
 * API and ABI (the shared library's soname carries major.minor). */
#define TG_VERSION_MAJOR 0
#define TG_VERSION_MINOR 7
#define TG_VERSION_PATCH 0
#define TG_VERSION_STRING "0.7.0"

/* The version of the library linked at run time, "MAJOR.MINOR.PATCH"; it
 * differs from TG_VERSION_STRING only when a program runs against a shared
 * library other than the one it was built with. */
const char *tg_version(void);

/* ---- status ------------------------------------------------------------- */

typedef enum {
    TG_OK = 0,
    TG_ERR_SHAPE,       /* shapes of an op's operands do not fit */
    TG_ERR_ARG,         /* a bad argument (NULL, out of range, wrong dtype) */
    TG_ERR_NAME,        /* a missing, unknown or duplicate name */
    TG_ERR_SIZE,        /* a buffer of the wrong size */
    TG_ERR_IO,          /* a file could not be read or written */
    TG_ERR_FORMAT,      /* a malformed file */
    TG_ERR_BACKEND,     /* the backend is unavailable or failed */
    TG_ERR_LIMIT,       /* a size over a device limit */
    TG_ERR_NOMEM,       /* out of memory */
    TG_ERR_STATE,       /* a call that does not fit the object's state */
    TG_ERR_NUMERIC,     /* a step or run met a NaN or Inf (its updates were not applied) */
    TG_ERR_TIMEOUT      /* data parallel: another rank did not arrive within the comm's timeout_s */
} tg_status;

const char *tg_status_name(tg_status s);
/* Message of the last failed call on this thread ("" if none). */
const char *tg_last_error(void);

/* ---- shapes and dtypes -------------------------------------------------- */

typedef enum { TG_F32 = 0, TG_I32 = 1, TG_BOOL = 2 } tg_dtype;

#define TG_MAX_DIMS 6
typedef struct {
    int ndim;
    int64_t d[TG_MAX_DIMS];
} tg_shape;

/* TG_SHAPE(256, 64) builds a tg_shape; TG_SCALAR is the 0-d shape.
 * Permutations and axis lists are also passed as tg_shape. */
#ifndef __cplusplus
#define TG__NARGS(...) TG__NARGS_(__VA_ARGS__, 6, 5, 4, 3, 2, 1, 0)
#define TG__NARGS_(a, b, c, d, e, f, n, ...) n
#define TG_SHAPE(...) ((tg_shape){TG__NARGS(__VA_ARGS__), {__VA_ARGS__}})
#define TG_SCALAR ((tg_shape){0, {0}})
#else
/* C++ (11 and later) has no compound literals: TG_SHAPE is a constexpr call
 * that takes dims of any integer type and refuses more than TG_MAX_DIMS. */
extern "C++" {
template <class... Dims>
constexpr tg_shape
tg_shape_of(Dims... dims) {
    static_assert(sizeof...(Dims) <= TG_MAX_DIMS, "TG_SHAPE: at most TG_MAX_DIMS dims");
    return tg_shape{static_cast<int>(sizeof...(Dims)), {static_cast<int64_t>(dims)...}};
}
}
#define TG_SHAPE(...) tg_shape_of(__VA_ARGS__)
#define TG_SCALAR (tg_shape{})
#endif

/* The element count; -1 for a bad shape (a negative dim, more than
 * TG_MAX_DIMS dims, or a count that overflows int64). */
int64_t tg_shape_numel(tg_shape s);
/* The most elements one tensor or param may have (4 TiB of f32): larger
 * shapes are TG_ERR_LIMIT, so no byte size or offset can overflow. */
#define TG_MAX_NUMEL ((int64_t)1 << 40)
/* Writes "[256,64]" into buf; returns buf. */
char *tg_shape_str(tg_shape s, char *buf, size_t n);

/* ---- model: named params ------------------------------------------------ */

typedef struct tg_model tg_model;
typedef int32_t tg_param; /* index of a param in its model; -1 = none */

typedef enum {
    TG_INIT_RANDN = 0, /* normal(0, scale); scale 0 means 0.02 */
    TG_INIT_ZEROS,
    TG_INIT_ONES,
    TG_INIT_KAIMING,   /* normal(0, gain/sqrt(fan_in)), gain = scale or sqrt(2) */
    TG_INIT_VALUES     /* copies values[0..numel) */
} tg_init_kind;

typedef struct {
    tg_init_kind kind;
    float scale;          /* randn std / kaiming gain; 0 = default */
    int64_t fan_in;       /* kaiming; 0 = shape[0] for 2-d, prod(shape[1:]) else (the true
                           * fan-in of a conv weight; upstream takes shape[0]: docs/upstream.md) */
    const float *values;  /* TG_INIT_VALUES: copied at declaration */
    int decay;            /* weight decay (AdamW's decoupled, SGD's L2): -1 default (on for
                           * randn/kaiming/values, off for zeros/ones), 0 off, 1 on */
} tg_init;

tg_init tg_init_randn(float std);
tg_init tg_init_zeros(void);
tg_init tg_init_ones(void);
tg_init tg_init_kaiming(void);
tg_init tg_init_values(const float *values);

tg_model *tg_model_new(void);
void tg_model_free(tg_model *m);
/* Declares a param. Names are paths ("layers.0.attn.q.W"). On a duplicate
 * name or bad shape it returns -1 and the error surfaces at session compile
 * (and from tg_model_status). */
tg_param tg_model_param(tg_model *m, const char *name, tg_shape shape, tg_init init);
/* A param of another dtype: TG_I32 holds integers (indices, counts, a
 * table read with tg_embedding or tg_take_along_axis), is never trained (no
 * gradient, no update) and takes zeros, ones or values (whole numbers an
 * int32 holds) as init. Move its values with tg_session_upload (a TG_I32
 * feed), set_tensor / upload_tensors or download; set_param / get_param
 * take f32 params only. TG_F32 is tg_model_param. */
tg_param tg_model_param_dt(tg_model *m, const char *name, tg_shape shape, tg_dtype dtype, tg_init init);
/* Excludes a param from training: no gradient, no update (DCE removes the work). */
tg_status tg_model_freeze(tg_model *m, tg_param p);
tg_status tg_model_status(const tg_model *m);
int tg_model_param_count(const tg_model *m);
const char *tg_model_param_name(const tg_model *m, tg_param p);
tg_shape tg_model_param_shape(const tg_model *m, tg_param p);
tg_dtype tg_model_param_dtype(const tg_model *m, tg_param p);
tg_param tg_model_find(const tg_model *m, const char *name); /* -1 if absent */
int64_t tg_model_numel(const tg_model *m);                 /* sum over params */

/* ---- tracing: graphs and tensors ---------------------------------------- */

typedef struct tg_graph tg_graph;
/* A handle to a tensor in a graph; id < 0 means invalid (an earlier error). */
typedef struct {
    tg_graph *g;
    int32_t id;
} tg_tensor;

tg_shape tg_tensor_shape(tg_tensor t);
tg_dtype tg_tensor_dtype(tg_tensor t);
bool tg_tensor_ok(tg_tensor t);

/* A loss (or forward) function: builds the graph, returns the result. */
typedef tg_tensor (*tg_trace_fn)(tg_graph *g, void *user);

/* Graphs are normally made by tg_session_new; tests and tools can build one
 * directly. tg_graph_status returns the first error recorded while tracing. */
tg_graph *tg_graph_new(tg_model *m);
void tg_graph_free(tg_graph *g);
tg_status tg_graph_status(const tg_graph *g);
const char *tg_graph_error(const tg_graph *g);
int tg_graph_node_count(const tg_graph *g);
/* Prints one line per node (id, op, dtype, shape, inputs, name). */
void tg_graph_print(const tg_graph *g, void *file /* FILE* */);
/* Writes the graph as Graphviz DOT: one node per op with its shape and dtype;
 * params, inputs, optimizer state and constants as leaves of their own
 * shapes; forward, backward and optimizer nodes in their own colours;
 * captures with a double border. Works on a traced graph and on
 * tg_session_graph's. TG_ERR_ARG for a NULL graph or file, TG_ERR_IO when
 * the write fails. Render with `dot -Tsvg`. */
tg_status tg_graph_dot(const tg_graph *g, void *file /* FILE* */);

/* Leaves. Op builders are macros that record the caller's file:line; the
 * _at functions take them explicitly. */
#define TG_AT const char *file, int line
tg_tensor tg_use_at(tg_graph *g, tg_param p, TG_AT);
tg_tensor tg_input_at(tg_graph *g, const char *name, TG_AT);
tg_tensor tg_input_new_at(tg_graph *g, const char *name, tg_dtype dt, tg_shape s, TG_AT);
tg_tensor tg_scalar_at(tg_graph *g, float v, TG_AT);
tg_tensor tg_full_at(tg_graph *g, tg_shape s, float v, TG_AT);
tg_tensor tg_constant_at(tg_graph *g, tg_shape s, const float *data, TG_AT);
tg_tensor tg_arange_at(tg_graph *g, int64_t n, tg_dtype dt, TG_AT);
#define tg_use(g, p) tg_use_at(g, p, __FILE__, __LINE__)
#define tg_input(g, name) tg_input_at(g, name, __FILE__, __LINE__)
#define tg_input_new(g, name, dt, s) tg_input_new_at(g, name, dt, s, __FILE__, __LINE__)
#define tg_scalar(g, v) tg_scalar_at(g, v, __FILE__, __LINE__)
#define tg_full(g, s, v) tg_full_at(g, s, v, __FILE__, __LINE__)
#define tg_constant(g, s, data) tg_constant_at(g, s, data, __FILE__, __LINE__)
#define tg_arange(g, n, dt) tg_arange_at(g, n, dt, __FILE__, __LINE__)

/* Elementwise with NumPy broadcasting. The _s forms take a float on the
 * right (x - s); the r forms put it on the left (s - x, s / x). */
tg_tensor tg_add_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_sub_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_mul_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_div_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_less_at(tg_tensor a, tg_tensor b, TG_AT);    /* bool */
tg_tensor tg_greater_at(tg_tensor a, tg_tensor b, TG_AT); /* bool */
tg_tensor tg_add_s_at(tg_tensor a, float s, TG_AT);
tg_tensor tg_sub_s_at(tg_tensor a, float s, TG_AT);
tg_tensor tg_rsub_s_at(float s, tg_tensor a, TG_AT);
tg_tensor tg_mul_s_at(tg_tensor a, float s, TG_AT);
tg_tensor tg_div_s_at(tg_tensor a, float s, TG_AT);
tg_tensor tg_rdiv_s_at(float s, tg_tensor a, TG_AT);
tg_tensor tg_less_s_at(tg_tensor a, float s, TG_AT);
tg_tensor tg_greater_s_at(tg_tensor a, float s, TG_AT);
#define tg_add(a, b) tg_add_at(a, b, __FILE__, __LINE__)
#define tg_sub(a, b) tg_sub_at(a, b, __FILE__, __LINE__)
#define tg_mul(a, b) tg_mul_at(a, b, __FILE__, __LINE__)
#define tg_div(a, b) tg_div_at(a, b, __FILE__, __LINE__)
#define tg_less(a, b) tg_less_at(a, b, __FILE__, __LINE__)
#define tg_greater(a, b) tg_greater_at(a, b, __FILE__, __LINE__)
#define tg_add_s(a, s) tg_add_s_at(a, s, __FILE__, __LINE__)
#define tg_sub_s(a, s) tg_sub_s_at(a, s, __FILE__, __LINE__)
#define tg_rsub_s(s, a) tg_rsub_s_at(s, a, __FILE__, __LINE__)
#define tg_mul_s(a, s) tg_mul_s_at(a, s, __FILE__, __LINE__)
#define tg_div_s(a, s) tg_div_s_at(a, s, __FILE__, __LINE__)
#define tg_rdiv_s(s, a) tg_rdiv_s_at(s, a, __FILE__, __LINE__)
#define tg_less_s(a, s) tg_less_s_at(a, s, __FILE__, __LINE__)
#define tg_greater_s(a, s) tg_greater_s_at(a, s, __FILE__, __LINE__)

tg_tensor tg_neg_at(tg_tensor x, TG_AT);
tg_tensor tg_sqrt_at(tg_tensor x, TG_AT);
tg_tensor tg_rsqrt_at(tg_tensor x, TG_AT);
tg_tensor tg_log_at(tg_tensor x, TG_AT);
tg_tensor tg_exp_at(tg_tensor x, TG_AT);
tg_tensor tg_relu_at(tg_tensor x, TG_AT);
tg_tensor tg_cast_at(tg_tensor x, tg_dtype dt, TG_AT);
tg_tensor tg_where_at(tg_tensor cond, tg_tensor a, tg_tensor b, TG_AT);
#define tg_neg(x) tg_neg_at(x, __FILE__, __LINE__)
#define tg_sqrt(x) tg_sqrt_at(x, __FILE__, __LINE__)
#define tg_rsqrt(x) tg_rsqrt_at(x, __FILE__, __LINE__)
#define tg_log(x) tg_log_at(x, __FILE__, __LINE__)
#define tg_exp(x) tg_exp_at(x, __FILE__, __LINE__)
#define tg_relu(x) tg_relu_at(x, __FILE__, __LINE__)
#define tg_cast(x, dt) tg_cast_at(x, dt, __FILE__, __LINE__)
#define tg_where(c, a, b) tg_where_at(c, a, b, __FILE__, __LINE__)

/* Reductions. axis may be negative; TG_ALL reduces every axis. */
#define TG_ALL (-1000)
tg_tensor tg_sum_at(tg_tensor x, int axis, bool keepdims, TG_AT);
tg_tensor tg_mean_at(tg_tensor x, int axis, bool keepdims, TG_AT);
/* Several axes at once, given as a tg_shape of axis numbers. */
tg_tensor tg_sum_axes_at(tg_tensor x, tg_shape axes, bool keepdims, TG_AT);
tg_tensor tg_mean_axes_at(tg_tensor x, tg_shape axes, bool keepdims, TG_AT);
#define tg_sum(x, axis, keep) tg_sum_at(x, axis, keep, __FILE__, __LINE__)
#define tg_mean(x, axis, keep) tg_mean_at(x, axis, keep, __FILE__, __LINE__)
#define tg_sum_axes(x, axes, keep) tg_sum_axes_at(x, axes, keep, __FILE__, __LINE__)
#define tg_mean_axes(x, axes, keep) tg_mean_axes_at(x, axes, keep, __FILE__, __LINE__)

/* Shapes. reshape is a view (no copy) and accepts one -1. perm is a tg_shape
 * of axis numbers. sum_to_shape sums broadcast axes away (broadcast_to's
 * adjoint). */
tg_tensor tg_reshape_at(tg_tensor x, tg_shape s, TG_AT);
tg_tensor tg_permute_at(tg_tensor x, tg_shape perm, TG_AT);
tg_tensor tg_broadcast_to_at(tg_tensor x, tg_shape s, TG_AT);
tg_tensor tg_sum_to_shape_at(tg_tensor x, tg_shape s, TG_AT);
#define tg_reshape(x, s) tg_reshape_at(x, s, __FILE__, __LINE__)
#define tg_permute(x, perm) tg_permute_at(x, perm, __FILE__, __LINE__)
#define tg_broadcast_to(x, s) tg_broadcast_to_at(x, s, __FILE__, __LINE__)
#define tg_sum_to_shape(x, s) tg_sum_to_shape_at(x, s, __FILE__, __LINE__)

/* matmul: a [..., M, K] x b [K, N] -> [..., M, N], or batched when b is
 * [..., K, N] with the same batch dims as a. ta / tb take a or b transposed
 * (a given as [..., K, M], b as [N, K]) without a copy. */
tg_tensor tg_matmul_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_matmul_t_at(tg_tensor a, tg_tensor b, bool ta, bool tb, TG_AT);
#define tg_matmul(a, b) tg_matmul_at(a, b, __FILE__, __LINE__)
#define tg_matmul_t(a, b, ta, tb) tg_matmul_t_at(a, b, ta, tb, __FILE__, __LINE__)

/* one_hot: i32 [...] -> f32 [..., depth] (out-of-range indices give zeros);
 * one_hot_dt gives dtype dt (TG_F32, TG_I32 or TG_BOOL) instead.
 * tg_matmul(tg_one_hot(idx, V), table [V, D]) compiles as
 * tg_embedding(table, idx): a gather, not a product over V. */
tg_tensor tg_one_hot_at(tg_tensor idx, int64_t depth, TG_AT);
tg_tensor tg_one_hot_dt_at(tg_tensor idx, int64_t depth, tg_dtype dt, TG_AT);
/* log_softmax over `axis`. */
tg_tensor tg_log_softmax_at(tg_tensor x, int axis, TG_AT);
/* softmax over the last axis with position j > i masked out, where i, j
 * index the last two axes ([..., T, T] attention scores). The _axis form
 * takes the softmax over `axis` instead: with that axis moved last, the
 * last two axes must be square (upstream's softmaxCausal(x, axis)). */
tg_tensor tg_softmax_causal_at(tg_tensor x, TG_AT);
tg_tensor tg_softmax_causal_axis_at(tg_tensor x, int axis, TG_AT);
/* x with entries j > i of the last two axes replaced by `value`. */
tg_tensor tg_where_causal_at(tg_tensor x, float value, TG_AT);
/* Marks x as a named capture: its value stays readable after each step or
 * run (tg_session_read). Returns x. */
tg_tensor tg_capture_at(tg_tensor x, const char *name, TG_AT);
#define tg_capture(x, name) tg_capture_at(x, name, __FILE__, __LINE__)
/* mean((a - b)^2) over every element: a scalar. */
tg_tensor tg_mse_at(tg_tensor a, tg_tensor b, TG_AT);
#define tg_one_hot(idx, depth) tg_one_hot_at(idx, depth, __FILE__, __LINE__)
#define tg_one_hot_dt(idx, depth, dt) tg_one_hot_dt_at(idx, depth, dt, __FILE__, __LINE__)
#define tg_log_softmax(x, axis) tg_log_softmax_at(x, axis, __FILE__, __LINE__)
#define tg_softmax_causal(x) tg_softmax_causal_at(x, __FILE__, __LINE__)
#define tg_softmax_causal_axis(x, axis) tg_softmax_causal_axis_at(x, axis, __FILE__, __LINE__)
#define tg_where_causal(x, v) tg_where_causal_at(x, v, __FILE__, __LINE__)
#define tg_mse(a, b) tg_mse_at(a, b, __FILE__, __LINE__)

/* ---- math and shape ops ---------------------------------------- */

/* min / max with NumPy broadcasting, f32 or i32 (no cast needed for
 * indices); the _s forms take a float on the right, converted to x's dtype.
 * NaN propagates. Gradient: all of it to the operand that wins; at a tie,
 * half to each (as torch.maximum / torch.minimum). */
tg_tensor tg_min_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_max_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_min_s_at(tg_tensor a, float s, TG_AT);
tg_tensor tg_max_s_at(tg_tensor a, float s, TG_AT);
/* clamp(x, lo, hi) = min(max(x, lo), hi), so lo > hi gives hi (as PyTorch);
 * +-INFINITY leaves a side open. f32 or i32 (bounds rounded inward). The
 * gradient passes where lo <= x <= hi, boundaries included (as PyTorch). */
tg_tensor tg_clamp_at(tg_tensor x, float lo, float hi, TG_AT);
#define tg_min(a, b) tg_min_at(a, b, __FILE__, __LINE__)
#define tg_max(a, b) tg_max_at(a, b, __FILE__, __LINE__)
#define tg_min_s(a, s) tg_min_s_at(a, s, __FILE__, __LINE__)
#define tg_max_s(a, s) tg_max_s_at(a, s, __FILE__, __LINE__)
#define tg_clamp(x, lo, hi) tg_clamp_at(x, lo, hi, __FILE__, __LINE__)

/* Unary math, elementwise. abs and square also take i32 (no gradient);
 * the rest are f32. abs' gradient is sign(x), 0 at 0. gelu is the exact
 * x * Phi(x) (erf form); gelu_tanh is the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). silu is x * sigmoid(x).
 * softplus is log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|), so it
 * neither overflows nor loses digits for large |x|. leaky_relu is
 * x > 0 ? x : alpha * x for any alpha (not max(x, alpha x), which is wrong
 * for alpha > 1); its gradient at 0 is alpha, as PyTorch. log1p is log(1 + x)
 * and expm1 e^x - 1, both accurate for tiny x. hardtanh clamps to [-1, 1]
 * (gradient 1 strictly inside, 0 elsewhere). */
tg_tensor tg_abs_at(tg_tensor x, TG_AT);
tg_tensor tg_square_at(tg_tensor x, TG_AT);
tg_tensor tg_sin_at(tg_tensor x, TG_AT);
tg_tensor tg_cos_at(tg_tensor x, TG_AT);
tg_tensor tg_tanh_at(tg_tensor x, TG_AT);
tg_tensor tg_sigmoid_at(tg_tensor x, TG_AT);
tg_tensor tg_erf_at(tg_tensor x, TG_AT);
tg_tensor tg_gelu_at(tg_tensor x, TG_AT);
tg_tensor tg_gelu_tanh_at(tg_tensor x, TG_AT);
tg_tensor tg_silu_at(tg_tensor x, TG_AT);
tg_tensor tg_softplus_at(tg_tensor x, TG_AT);
tg_tensor tg_leaky_relu_at(tg_tensor x, float alpha, TG_AT);
tg_tensor tg_log1p_at(tg_tensor x, TG_AT);
tg_tensor tg_expm1_at(tg_tensor x, TG_AT);
tg_tensor tg_hardtanh_at(tg_tensor x, TG_AT);
#define tg_abs(x) tg_abs_at(x, __FILE__, __LINE__)
#define tg_square(x) tg_square_at(x, __FILE__, __LINE__)
#define tg_sin(x) tg_sin_at(x, __FILE__, __LINE__)
#define tg_cos(x) tg_cos_at(x, __FILE__, __LINE__)
#define tg_tanh(x) tg_tanh_at(x, __FILE__, __LINE__)
#define tg_sigmoid(x) tg_sigmoid_at(x, __FILE__, __LINE__)
#define tg_erf(x) tg_erf_at(x, __FILE__, __LINE__)
#define tg_gelu(x) tg_gelu_at(x, __FILE__, __LINE__)
#define tg_gelu_tanh(x) tg_gelu_tanh_at(x, __FILE__, __LINE__)
#define tg_silu(x) tg_silu_at(x, __FILE__, __LINE__)
#define tg_softplus(x) tg_softplus_at(x, __FILE__, __LINE__)
#define tg_leaky_relu(x, alpha) tg_leaky_relu_at(x, alpha, __FILE__, __LINE__)
#define tg_log1p(x) tg_log1p_at(x, __FILE__, __LINE__)
#define tg_expm1(x) tg_expm1_at(x, __FILE__, __LINE__)
#define tg_hardtanh(x) tg_hardtanh_at(x, __FILE__, __LINE__)

/* a^b elementwise with NumPy broadcasting, f32; tg_pow_s takes a float
 * exponent. As PyTorch (C's pow): x^0 = 1 for every x (0^0 and NaN^0
 * included), 1^y = 1, 0^y is 0 for y > 0 and +inf for y < 0, a negative
 * base gives a real result for an integer exponent (its sign from the
 * exponent's parity) and NaN otherwise; a base of -0 counts as +0.
 * Gradients as PyTorch's: d/da = b a^(b-1) (0 where b = 0), d/db = a^b log a
 * (0 where a = 0 and b >= 0, NaN for a negative base). */
tg_tensor tg_pow_at(tg_tensor a, tg_tensor b, TG_AT);
tg_tensor tg_pow_s_at(tg_tensor a, float b, TG_AT);
#define tg_pow(a, b) tg_pow_at(a, b, __FILE__, __LINE__)
#define tg_pow_s(a, b) tg_pow_s_at(a, b, __FILE__, __LINE__)

/* softmax over `axis` (negative counts from the end), fused with its own
 * backward. argmax / argmin over `axis`: i32, the first index on ties, NaN
 * counts as the extreme; keepdims keeps the axis as size 1; TG_ALL takes
 * the flattened tensor (a 0-d result, or all ones with keepdims). f32 or
 * i32 input; no gradient. */
tg_tensor tg_softmax_at(tg_tensor x, int axis, TG_AT);
tg_tensor tg_argmax_at(tg_tensor x, int axis, bool keepdims, TG_AT);
tg_tensor tg_argmin_at(tg_tensor x, int axis, bool keepdims, TG_AT);
#define tg_softmax(x, axis) tg_softmax_at(x, axis, __FILE__, __LINE__)
#define tg_argmax(x, axis, keep) tg_argmax_at(x, axis, keep, __FILE__, __LINE__)
#define tg_argmin(x, axis, keep) tg_argmin_at(x, axis, keep, __FILE__, __LINE__)
/* amax / amin: the largest / smallest value over `axis` (TG_ALL: every
 * element), keepdims as argmax; f32 or i32, in x's dtype; a NaN on the axis
 * gives NaN. Gradient: to the elements equal to the result, split evenly
 * among ties (as tg_max splits a tie, and torch.amax). */
tg_tensor tg_amax_at(tg_tensor x, int axis, bool keepdims, TG_AT);
tg_tensor tg_amin_at(tg_tensor x, int axis, bool keepdims, TG_AT);
#define tg_amax(x, axis, keep) tg_amax_at(x, axis, keep, __FILE__, __LINE__)
#define tg_amin(x, axis, keep) tg_amin_at(x, axis, keep, __FILE__, __LINE__)

/* stop_gradient: x itself in the forward (no copy), a constant to autograd.
 * zeros / ones: f32 constants of shape s; the _dt forms in another dtype
 * (TG_F32, TG_I32 or TG_BOOL). */
tg_tensor tg_stop_gradient_at(tg_tensor x, TG_AT);
tg_tensor tg_zeros_at(tg_graph *g, tg_shape s, TG_AT);
tg_tensor tg_ones_at(tg_graph *g, tg_shape s, TG_AT);
tg_tensor tg_zeros_dt_at(tg_graph *g, tg_shape s, tg_dtype dt, TG_AT);
tg_tensor tg_ones_dt_at(tg_graph *g, tg_shape s, tg_dtype dt, TG_AT);
#define tg_stop_gradient(x) tg_stop_gradient_at(x, __FILE__, __LINE__)
#define tg_zeros(g, s) tg_zeros_at(g, s, __FILE__, __LINE__)
#define tg_ones(g, s) tg_ones_at(g, s, __FILE__, __LINE__)
#define tg_zeros_dt(g, s, dt) tg_zeros_dt_at(g, s, dt, __FILE__, __LINE__)
#define tg_ones_dt(g, s, dt) tg_ones_dt_at(g, s, dt, __FILE__, __LINE__)

/* Slicing and joining; axes may be negative. swap_axes is a permute.
 * narrow takes `length` entries from `start` (negative: from the end) along
 * `axis`; its gradient pads with zeros. concat joins n >= 1 tensors of one
 * dtype along an existing axis; stack along a new axis at `axis`
 * (0..rank). Lists are C arrays with a count; a compound literal needs
 * parentheses inside the macro: tg_concat(((tg_tensor[]){a, b}), 2, -1).
 * split cuts x along `axis` into n >= 1 pieces of sizes[0..n) (which must
 * sum to the axis) and writes them to out[0..n); on an error every piece is
 * invalid (out NULL or n < 1: a graph error, nothing written). */
tg_tensor tg_swap_axes_at(tg_tensor x, int a, int b, TG_AT);
tg_tensor tg_narrow_at(tg_tensor x, int axis, int64_t start, int64_t length, TG_AT);
tg_tensor tg_concat_at(const tg_tensor *xs, int n, int axis, TG_AT);
tg_tensor tg_stack_at(const tg_tensor *xs, int n, int axis, TG_AT);
void tg_split_at(tg_tensor x, int axis, const int64_t *sizes, int n, tg_tensor *out, TG_AT);
#define tg_swap_axes(x, a, b) tg_swap_axes_at(x, a, b, __FILE__, __LINE__)
#define tg_narrow(x, axis, start, len) tg_narrow_at(x, axis, start, len, __FILE__, __LINE__)
#define tg_concat(xs, n, axis) tg_concat_at(xs, n, axis, __FILE__, __LINE__)
#define tg_stack(xs, n, axis) tg_stack_at(xs, n, axis, __FILE__, __LINE__)
#define tg_split(x, axis, sizes, n, out) tg_split_at(x, axis, sizes, n, out, __FILE__, __LINE__)

/* take_along_axis(x, idx, axis) as numpy.take_along_axis: idx is i32 with
 * x's rank and x's sizes on every other axis; the result has idx's shape,
 * out[..., k, ...] = x[..., idx[..., k, ...], ...]. A negative index counts
 * from the end; one still out of range gives 0. The gradient is a
 * deterministic scatter-add into zeros of x's shape. */
tg_tensor tg_take_along_axis_at(tg_tensor x, tg_tensor idx, int axis, TG_AT);
#define tg_take_along_axis(x, idx, axis) tg_take_along_axis_at(x, idx, axis, __FILE__, __LINE__)

/* cumsum: running sums along `axis`, y[.., a, ..] = x[.., 0, ..] + ... +
 * x[.., a, ..] added in that order; f32, or i32 (wrapping, no gradient).
 * The gradient is the running sum of gy taken from the other end. */
tg_tensor tg_cumsum_at(tg_tensor x, int axis, TG_AT);
/* logsumexp: log(sum(exp(x))) over `axis` (TG_ALL: every element),
 * keepdims as tg_sum; computed as m + log(sum(exp(x - m))) with m the max
 * (stop_gradient), so it neither overflows nor underflows; its gradient
 * is softmax(x) * gy. A composite of amax, exp, sum and log. */
tg_tensor tg_logsumexp_at(tg_tensor x, int axis, bool keepdims, TG_AT);
/* topk: the k largest entries of x along `axis` (the k smallest when
 * largest is false), in order (largest first, or smallest first), as a
 * tensor of x's shape with that axis k long; with indices not NULL, also
 * their positions along the axis (i32) into *indices. Ties go to the lower
 * index, and NaN ranks above every number (as PyTorch's); 1 <= k <= the
 * axis' size. f32 or i32 x; the gradient of f32 values goes to the chosen
 * entries (the indices have none). */
tg_tensor tg_topk_at(tg_tensor x, int64_t k, int axis, bool largest, tg_tensor *indices, TG_AT);
/* pad: x with before.d[i] entries added before and after.d[i] after along
 * each axis i (before and after have x's rank; TG_SHAPE(0, 0, 1, 1) pads
 * the last two axes of a 4-d tensor by one). CONSTANT fills with value;
 * REFLECT mirrors x about its edge entry, which is not repeated (needs
 * padding smaller than the axis); REPLICATE repeats the edge entry: the
 * modes of PyTorch's F.pad. f32 or i32 (value converted); the gradient of
 * each entry of x sums the outputs that copy it. */
typedef enum { TG_PAD_CONSTANT = 0, TG_PAD_REFLECT, TG_PAD_REPLICATE } tg_pad_mode;
tg_tensor tg_pad_at(tg_tensor x, tg_shape before, tg_shape after, tg_pad_mode mode, float value, TG_AT);
#define tg_cumsum(x, axis) tg_cumsum_at(x, axis, __FILE__, __LINE__)
#define tg_logsumexp(x, axis, keep) tg_logsumexp_at(x, axis, keep, __FILE__, __LINE__)
#define tg_topk(x, k, axis, largest, indices) tg_topk_at(x, k, axis, largest, indices, __FILE__, __LINE__)
#define tg_pad(x, before, after, mode, value) tg_pad_at(x, before, after, mode, value, __FILE__, __LINE__)

/* ---- nn ops: losses, norms, embedding, attention helpers, random ops ----- */

/* How a loss reduces over its positions (every axis but the class axis):
 * MEAN and SUM give a scalar, NONE the per-position losses [...]. */
typedef enum { TG_REDUCTION_MEAN = 0, TG_REDUCTION_SUM, TG_REDUCTION_NONE } tg_reduction;

/* cross_entropy: raw logits [..., V] against i32 targets [...], log-softmax
 * and NLL fused and stable (log-sum-exp); pass logits, not log-softmax
 * output. nll_loss takes log-probabilities [..., V] instead. A target outside
 * [0, V) (padding such as -1 or -100) adds 0 loss and gets 0 gradient, and
 * MEAN still divides by the number of positions (upstream's rule; PyTorch's
 * ignore_index divides by the kept positions). */
tg_tensor tg_cross_entropy_at(tg_tensor logits, tg_tensor targets, tg_reduction r, TG_AT);
tg_tensor tg_nll_loss_at(tg_tensor logprobs, tg_tensor targets, tg_reduction r, TG_AT);
/* Normalization over the last axis D, g and b of shape [D]:
 *   layer_norm  (x - mean) / sqrt(var + eps) * g + b   (biased variance; PyTorch's eps is 1e-5)
 *   rms_norm    x / sqrt(mean(x^2) + eps) * g           (Llama's eps is 1e-6) */
tg_tensor tg_layer_norm_at(tg_tensor x, tg_tensor g, tg_tensor b, float eps, TG_AT);
tg_tensor tg_rms_norm_at(tg_tensor x, tg_tensor g, float eps, TG_AT);
/* Rows of table [V, D] picked by i32 idx [...] -> [..., D]. An index outside
 * [0, V) gives a zero row and sends no gradient. The table's gradient is a
 * deterministic scatter-add (not one_hot @ table). */
tg_tensor tg_embedding_at(tg_tensor table, tg_tensor idx, TG_AT);
/* split_heads: x [..., T, H*Dh] -> [..., H, T, Dh]; merge_heads is its
 * inverse, [..., H, T, Dh] -> [..., T, H*Dh]. */
tg_tensor tg_split_heads_at(tg_tensor x, int64_t heads, TG_AT);
tg_tensor tg_merge_heads_at(tg_tensor x, TG_AT);
/* Rotary position embedding, rotate-half convention (RoFormer, Llama): x is
 * [..., T, D] with D even; at position t (0..T-1) the pair (x[i], x[i+D/2])
 * is rotated by the angle t * base^(-2i/D). base 0 means 10000. Upstream's
 * rope(q, k) is tg_rope(q, base) and tg_rope(k, base). The angles are a
 * [T, D] constant of the graph, at most 2^26 elements. */
tg_tensor tg_rope_at(tg_tensor x, float base, TG_AT);
/* Random ops. Each draws from one counter-based hash of (the per-step seed,
 * the op's salt, the element or row), the same function on every backend:
 * the draws change every step, repeat for the same session seed and step,
 * and do not depend on the thread count.
 * dropout: training-time inverted dropout; each element is zeroed with
 *   probability p, the rest are scaled by 1 / (1 - p). p = 0 returns x.
 *   Leave it out of forward-only (inference) functions.
 * randn: a tensor of the given shape drawn from N(0, 1); no gradient.
 * categorical: one class index per row of logits [..., V] -> i32 [...],
 *   drawn from softmax(logits) (pass raw logits; divide by a temperature
 *   first if wanted); no gradient. categorical_axis draws along `axis`
 *   instead of the last (the result drops that axis). */
tg_tensor tg_dropout_at(tg_tensor x, float p, TG_AT);
tg_tensor tg_randn_at(tg_graph *g, tg_shape s, TG_AT);
tg_tensor tg_categorical_at(tg_tensor logits, TG_AT);
tg_tensor tg_categorical_axis_at(tg_tensor logits, int axis, TG_AT);
/* group_norm: x [N, C, ...] (at least 2-d) normalized over each group of
 * C/groups channels together with every position after them, then scaled
 * and shifted per channel by g and b [C]: (x - mean) / sqrt(var + eps) * g
 * + b with the biased variance, as PyTorch's (whose eps is 1e-5). Built on
 * the layer_norm kernel, one row per image and group.
 * batch_norm: x [N, C, ...] normalized per channel, scaled and shifted by
 * g and b [C]. training: with the statistics over the batch and every
 * position (biased variance), and at the end of each training step the
 * running statistics, f32 [C] params that nothing else trains (freeze them:
 * tg_model_freeze; tg_batchnorm_new does), take r = (1 - momentum) r +
 * momentum s, the variance unbiased (PyTorch's rule; its momentum is 0.1,
 * eps 1e-5); a forward session computes with the batch's statistics and
 * updates nothing. Not training: with running_mean and running_var. */
tg_tensor tg_group_norm_at(tg_tensor x, int64_t groups, tg_tensor g, tg_tensor b, float eps, TG_AT);
tg_tensor tg_batch_norm_at(tg_tensor x, tg_tensor g, tg_tensor b, tg_tensor running_mean, tg_tensor running_var,
                           bool training, float momentum, float eps, TG_AT);
#define tg_group_norm(x, groups, g, b, eps) tg_group_norm_at(x, groups, g, b, eps, __FILE__, __LINE__)
#define tg_batch_norm(x, g, b, rm, rv, training, momentum, eps) \
    tg_batch_norm_at(x, g, b, rm, rv, training, momentum, eps, __FILE__, __LINE__)
#define tg_cross_entropy(logits, t, r) tg_cross_entropy_at(logits, t, r, __FILE__, __LINE__)
#define tg_nll_loss(logprobs, t, r) tg_nll_loss_at(logprobs, t, r, __FILE__, __LINE__)
#define tg_layer_norm(x, g, b, eps) tg_layer_norm_at(x, g, b, eps, __FILE__, __LINE__)
#define tg_rms_norm(x, g, eps) tg_rms_norm_at(x, g, eps, __FILE__, __LINE__)
#define tg_embedding(table, idx) tg_embedding_at(table, idx, __FILE__, __LINE__)
#define tg_split_heads(x, heads) tg_split_heads_at(x, heads, __FILE__, __LINE__)
#define tg_merge_heads(x) tg_merge_heads_at(x, __FILE__, __LINE__)
#define tg_rope(x, base) tg_rope_at(x, base, __FILE__, __LINE__)
#define tg_dropout(x, p) tg_dropout_at(x, p, __FILE__, __LINE__)
#define tg_randn(g, s) tg_randn_at(g, s, __FILE__, __LINE__)
#define tg_categorical(logits) tg_categorical_at(logits, __FILE__, __LINE__)
#define tg_categorical_axis(logits, axis) tg_categorical_axis_at(logits, axis, __FILE__, __LINE__)

/* ---- convolution, pooling, upsampling (NCHW, f32) ------------------------
 * Output sizes follow PyTorch: floor((H + 2*pad - k) / stride) + 1, with
 * zero padding on both sides of each spatial axis. */

/* conv2d: x [N, C, H, W] with w [O, C/groups, kH, kW] -> [N, O, Ho, Wo].
 * groups splits C and O into that many independent convolutions; groups = C
 * (w [C*m, 1, kH, kW]) is depthwise. The _hw form takes stride and padding
 * per axis; _bias also adds b [O] to every output plane (in the same kernel;
 * tg_conv2d_fwd uses it). */
tg_tensor tg_conv2d_at(tg_tensor x, tg_tensor w, int stride, int padding, int groups, TG_AT);
tg_tensor tg_conv2d_hw_at(tg_tensor x, tg_tensor w, int stride_h, int stride_w, int pad_h, int pad_w, int groups,
                          TG_AT);
tg_tensor tg_conv2d_bias_at(tg_tensor x, tg_tensor w, tg_tensor b, int stride_h, int stride_w, int pad_h, int pad_w,
                            int groups, TG_AT);
/* max over k x k windows: [N, C, H, W] -> [N, C, Ho, Wo]. stride 0 means k.
 * Padding (at most k/2) never wins; a NaN in a window makes its max NaN (as
 * PyTorch); ties go to the first element in row-major window order, and so
 * does the gradient. */
tg_tensor tg_max_pool2d_at(tg_tensor x, int k, int stride, int padding, TG_AT);
tg_tensor tg_max_pool2d_hw_at(tg_tensor x, int kh, int kw, int stride_h, int stride_w, int pad_h, int pad_w, TG_AT);
/* each pixel repeated into a factor x factor block: [N, C, H, W] -> [N, C, H*f, W*f]. */
tg_tensor tg_nearest_upsample2d_at(tg_tensor x, int factor, TG_AT);
#define tg_conv2d(x, w, stride, padding, groups) tg_conv2d_at(x, w, stride, padding, groups, __FILE__, __LINE__)
#define tg_conv2d_hw(x, w, sh, sw, ph, pw, groups) tg_conv2d_hw_at(x, w, sh, sw, ph, pw, groups, __FILE__, __LINE__)
#define tg_conv2d_bias(x, w, b, sh, sw, ph, pw, groups) \
    tg_conv2d_bias_at(x, w, b, sh, sw, ph, pw, groups, __FILE__, __LINE__)
#define tg_max_pool2d(x, k, stride, padding) tg_max_pool2d_at(x, k, stride, padding, __FILE__, __LINE__)
#define tg_max_pool2d_hw(x, kh, kw, sh, sw, ph, pw) tg_max_pool2d_hw_at(x, kh, kw, sh, sw, ph, pw, __FILE__, __LINE__)
#define tg_nearest_upsample2d(x, factor) tg_nearest_upsample2d_at(x, factor, __FILE__, __LINE__)
/* conv_transpose2d: x [N, C, H, W] with w [C, O/groups, kH, kW] (PyTorch's
 * ConvTranspose2d layout) -> [N, O, Ho, Wo], Ho = (H - 1) * stride -
 * 2 * padding + kH + output_padding (0 <= output_padding < stride): the
 * adjoint of conv2d with that stride, padding and groups (its input
 * gradient, run forward), so it inverts a strided conv2d's shape. */
tg_tensor tg_conv_transpose2d_at(tg_tensor x, tg_tensor w, int stride, int padding, int output_padding, int groups,
                                 TG_AT);
/* mean over k x k windows: [N, C, H, W] -> [N, C, Ho, Wo], sizes as max_pool2d
 * (stride 0 means k, padding at most k/2); padding counts as zeros in the
 * mean (PyTorch's default count_include_pad). Windows that tile the input
 * (stride k, no padding) are summed by the kernel of nearest_upsample2d's
 * gradient and scaled; others are a depthwise conv2d with a constant
 * 1/k^2 kernel. */
tg_tensor tg_avg_pool2d_at(tg_tensor x, int k, int stride, int padding, TG_AT);
#define tg_conv_transpose2d(x, w, stride, padding, output_padding, groups) \
    tg_conv_transpose2d_at(x, w, stride, padding, output_padding, groups, __FILE__, __LINE__)
#define tg_avg_pool2d(x, k, stride, padding) tg_avg_pool2d_at(x, k, stride, padding, __FILE__, __LINE__)

/* ---- modules ------------------------------------------------------------ */

/* Weight decay of a layer's weight, over its init's own rule. */
typedef enum { TG_DECAY_DEFAULT = 0, TG_DECAY_OFF, TG_DECAY_ON } tg_decay;

/* Options of the Linear and Embedding _opts constructors; {0} is every
 * default (upstream's layer options init and decay). Biases stay zeros,
 * undecayed. */
typedef struct {
    const tg_init *init; /* the weight's init; NULL: randn 0.02 */
    tg_decay decay;      /* the weight's decay; DEFAULT: the init's rule (on for randn/kaiming/values) */
} tg_layer_opts;

/* Linear: y = x @ W + b, W is [in, out] (randn 0.02), b is [out] (zeros). */
typedef struct {
    tg_param W, b; /* b = -1 without bias */
    int64_t in, out;
} tg_linear;
tg_linear tg_linear_new(tg_model *m, const char *name, int64_t in, int64_t out, bool bias);
tg_linear tg_linear_new_opts(tg_model *m, const char *name, int64_t in, int64_t out, bool bias, tg_layer_opts o);
tg_tensor tg_linear_fwd_at(tg_graph *g, const tg_linear *l, tg_tensor x, TG_AT);
#define tg_linear_fwd(g, l, x) tg_linear_fwd_at(g, l, x, __FILE__, __LINE__)

/* LayerNorm over the last axis: "<name>.g" [dim] (ones), "<name>.b" [dim]
 * (zeros; b = -1 without one), eps 1e-5 (set .eps before tracing to change
 * it). Neither is decayed unless asked. */
typedef struct {
    tg_param g, b;
    int64_t dim;
    float eps;
} tg_layernorm;
typedef struct {
    bool no_bias;   /* the gain alone (GPT-3 and nanoGPT's LayerNorm) */
    float eps;      /* 0: 1e-5 */
    tg_decay decay; /* the gain's and bias's; DEFAULT: off */
} tg_layernorm_opts;
tg_layernorm tg_layernorm_new(tg_model *m, const char *name, int64_t dim);
tg_layernorm tg_layernorm_new_opts(tg_model *m, const char *name, int64_t dim, tg_layernorm_opts o);
tg_tensor tg_layernorm_fwd_at(tg_graph *g, const tg_layernorm *l, tg_tensor x, TG_AT);
#define tg_layernorm_fwd(g, l, x) tg_layernorm_fwd_at(g, l, x, __FILE__, __LINE__)

/* RMSNorm over the last axis: "<name>.g" [dim] (ones), eps 1e-6. */
typedef struct {
    tg_param g;
    int64_t dim;
    float eps;
} tg_rmsnorm;
tg_rmsnorm tg_rmsnorm_new(tg_model *m, const char *name, int64_t dim);
tg_tensor tg_rmsnorm_fwd_at(tg_graph *g, const tg_rmsnorm *l, tg_tensor x, TG_AT);
#define tg_rmsnorm_fwd(g, l, x) tg_rmsnorm_fwd_at(g, l, x, __FILE__, __LINE__)

/* GroupNorm over [N, channels, ...]: "<name>.g" [channels] (ones), "<name>.b"
 * (zeros), eps 1e-5 (set .eps before tracing to change it). */
typedef struct {
    tg_param g, b;
    int64_t groups, channels;
    float eps;
} tg_groupnorm;
tg_groupnorm tg_groupnorm_new(tg_model *m, const char *name, int64_t groups, int64_t channels);
tg_tensor tg_groupnorm_fwd_at(tg_graph *g, const tg_groupnorm *l, tg_tensor x, TG_AT);
#define tg_groupnorm_fwd(g, l, x) tg_groupnorm_fwd_at(g, l, x, __FILE__, __LINE__)

/* BatchNorm over [N, channels, ...]: "<name>.g" [channels] (ones), "<name>.b"
 * (zeros), and the running statistics "<name>.running_mean" (zeros) and
 * "<name>.running_var" (ones), frozen params the training steps update (see
 * tg_batch_norm); momentum 0.1, eps 1e-5 (set before tracing to change
 * them). training picks the statistics: the batch's (a training loss) or
 * the running ones (evaluation, inference). */
typedef struct {
    tg_param g, b, running_mean, running_var;
    int64_t channels;
    float momentum, eps;
} tg_batchnorm;
tg_batchnorm tg_batchnorm_new(tg_model *m, const char *name, int64_t channels);
tg_tensor tg_batchnorm_fwd_at(tg_graph *g, const tg_batchnorm *l, tg_tensor x, bool training, TG_AT);
#define tg_batchnorm_fwd(g, l, x, training) tg_batchnorm_fwd_at(g, l, x, training, __FILE__, __LINE__)

/* Embedding: "<name>.W" [vocab, dim] (randn 0.02); idx i32 [...] -> [..., dim].
 * (The type shares its name with the tg_embedding() op; the op is a
 * function-like macro, so the two do not collide.) */
typedef struct {
    tg_param W;
    int64_t vocab, dim;
} tg_embedding;
tg_embedding tg_embedding_new(tg_model *m, const char *name, int64_t vocab, int64_t dim);
tg_embedding tg_embedding_new_opts(tg_model *m, const char *name, int64_t vocab, int64_t dim, tg_layer_opts o);
tg_tensor tg_embedding_fwd_at(tg_graph *g, const tg_embedding *e, tg_tensor idx, TG_AT);
#define tg_embedding_fwd(g, e, idx) tg_embedding_fwd_at(g, e, idx, __FILE__, __LINE__)

/* Conv2d (PyTorch's layout, as upstream): "<name>.W" [out, in/groups, kh, kw]
 * (randn 0.02, upstream's default), "<name>.b" [out] (zeros). Forward:
 * conv2d_bias(x, W, b, stride_h, stride_w, pad_h, pad_w, groups). (The type
 * shares its name with the tg_conv2d() op, as tg_embedding does; the op is
 * a function-like macro.) tg_conv2d_new is the square case: k x k, one
 * stride and padding for both axes. */
typedef struct {
    tg_param W, b; /* b = -1 without bias */
    int64_t in, out, kh, kw, stride_h, stride_w, pad_h, pad_w, groups;
} tg_conv2d;
/* Options of tg_conv2d_new_opts; {.kh = 3} is a 3x3 conv with every other default. */
typedef struct {
    int64_t kh, kw;             /* the kernel; kw 0 = kh */
    int64_t stride_h, stride_w; /* 0 = 1 */
    int64_t pad_h, pad_w;
    int64_t groups;             /* 0 = 1 */
    bool no_bias;
    const tg_init *init;        /* the weight's; NULL: randn 0.02 */
    tg_decay decay;             /* the weight's; DEFAULT: the init's rule */
} tg_conv2d_opts;
tg_conv2d tg_conv2d_new(tg_model *m, const char *name, int64_t in, int64_t out, int64_t k, int64_t stride,
                        int64_t padding, int64_t groups, bool bias);
tg_conv2d tg_conv2d_new_opts(tg_model *m, const char *name, int64_t in, int64_t out, tg_conv2d_opts o);
tg_tensor tg_conv2d_fwd_at(tg_graph *g, const tg_conv2d *l, tg_tensor x, TG_AT);
#define tg_conv2d_fwd(g, l, x) tg_conv2d_fwd_at(g, l, x, __FILE__, __LINE__)

/* ConvTranspose2d (PyTorch's layout): "<name>.W" [in, out/groups, k, k]
 * (randn 0.02), "<name>.b" [out] (zeros). Forward: conv_transpose2d(x, W,
 * stride, padding, output_padding, groups) + b. (The type shares its name
 * with the op, as tg_conv2d does.) */
typedef struct {
    tg_param W, b; /* b = -1 without bias */
    int64_t in, out, k, stride, padding, output_padding, groups;
} tg_conv_transpose2d;
tg_conv_transpose2d tg_conv_transpose2d_new(tg_model *m, const char *name, int64_t in, int64_t out, int64_t k,
                                            int64_t stride, int64_t padding, int64_t output_padding, int64_t groups,
                                            bool bias);
tg_tensor tg_conv_transpose2d_fwd_at(tg_graph *g, const tg_conv_transpose2d *l, tg_tensor x, TG_AT);
#define tg_conv_transpose2d_fwd(g, l, x) tg_conv_transpose2d_fwd_at(g, l, x, __FILE__, __LINE__)

/* ---- optimizers and learning-rate schedules ----------------------------- */

/* s is the schedule's step, counted from 1: the session's step (from
 * tg_session_new, or from the last set_lr, reset or replace_model), less
 * start_step, and never below 1. */
typedef enum {
    TG_LR_CONSTANT = 0, /* peak */
    TG_LR_LINEAR,       /* peak + (final - peak) * min(s / steps, 1) */
    TG_LR_COSINE,       /* final + (peak - final) / 2 * (1 + cos(pi * min(s / steps, 1))) */
    TG_LR_WARMUP,       /* peak * s / steps, then `then` at s - steps */
    TG_LR_STAIRCASE,    /* peak * gamma ^ floor((s - 1) / every) */
    TG_LR_MULTISTEP     /* peak * gamma ^ (number of milestones <= s) */
} tg_lr_kind;

/* A schedule refers to its milestones and its `then` schedule; a session
 * copies the whole chain (any length, any number of milestones) when it
 * takes the schedule (tg_session_new, set_lr, replace_model), so they need
 * to live only until then. */
typedef struct tg_lr {
    tg_lr_kind kind;
    float peak, final_lr, gamma;
    int64_t steps, every;
    int n_milestones;
    const int64_t *milestones; /* TG_LR_MULTISTEP: n_milestones steps */
    const struct tg_lr *then;  /* TG_LR_WARMUP: the schedule after the warmup, at s - steps */
    int64_t start_step;        /* >= 0: the schedule starts that many steps late (upstream's startStep) */
} tg_lr;

tg_lr tg_lr_constant(float lr);
tg_lr tg_lr_linear(float peak, float final_lr, int64_t steps);
tg_lr tg_lr_cosine(float peak, float final_lr, int64_t steps);
tg_lr tg_lr_warmup(float peak, int64_t steps, const tg_lr *then);
tg_lr tg_lr_staircase(float peak, float gamma, int64_t every);
tg_lr tg_lr_multistep(float peak, float gamma, int n, const int64_t *milestones);
/* The learning rate at step s (counted from 1); NaN for a chain that loops. */
float tg_lr_at(const tg_lr *lr, int64_t s);

typedef enum { TG_OPT_NONE = 0, TG_OPT_ADAM, TG_OPT_ADAMW, TG_OPT_SGD } tg_opt_kind;

typedef struct {
    tg_opt_kind kind;
    tg_lr lr;
    float beta1, beta2, eps;  /* Adam/AdamW: 0.9, 0.999, 1e-8 */
    float weight_decay;       /* AdamW: decoupled; SGD: L2 added to the gradient */
    float momentum;           /* SGD */
    bool nesterov;            /* SGD */
    float clip_grad_norm;     /* > 0: scale all grads so their global norm <= this */
    bool normalize_grads;     /* g / (||g|| + 1e-8) per param, before clipping */
    /* Per-name filters (upstream's decayFilter and normalizeGrads filter),
     * called with each trained param's name and filter_user while the
     * session compiles (again at a replace_model that keeps the optimizer,
     * so filter_user must live as long as the session). decay_filter: a param is decayed when its decay flag
     * is on and the filter accepts it (NULL: the flag alone).
     * normalize_filter: with normalize_grads, only the params it accepts are
     * normalized (NULL: all); one that accepts none is an error. */
    bool (*decay_filter)(const char *name, void *user);
    bool (*normalize_filter)(const char *name, void *user);
    void *filter_user;
    /* > 0 (below 1): an exponential moving average of every trained param,
     * kept in the graph beside the optimizer's state: after each update
     * ema = ema_decay * ema + (1 - ema_decay) * param, the first update
     * copying the param. tg_session_download_ema reads it. */
    float ema_decay;
} tg_optim;

tg_optim tg_adam(tg_lr lr);
tg_optim tg_adamw(tg_lr lr, float weight_decay);
tg_optim tg_sgd(tg_lr lr, float momentum, bool nesterov, float weight_decay);

/* ---- data parallelism: communicators ---------------------------------------
 * One model trained by several processes (ranks) at once, each on its own
 * share of every batch (docs/distributed.md). A communicator is what the
 * library needs from the transport, and all it knows of it: the MPI one is
 * in libtensorgrad_mpi (tensorgrad_mpi.h, tg_mpi_comm), and any other
 * (NCCL, Gloo, threads of one process) plugs in by filling this struct.
 * Every rank makes the same calls in the same order; a call that fails
 * returns an error status and may leave a message in `error`. */
typedef struct tg_comm {
    int rank, size; /* 0 <= rank < size */
    /* data[0..n) summed over every rank, in place. Every rank must get
     * bitwise the same result, and the same inputs must always give the
     * same result (a fixed order of addition): params stay identical on
     * every rank only if the averaged gradients are. */
    tg_status (*allreduce_sum_f32)(struct tg_comm *c, float *data, int64_t n);
    /* bytes at data copied from rank root to every other rank. */
    tg_status (*broadcast)(struct tg_comm *c, void *data, int64_t bytes, int root);
    /* true: the library may call the two functions from a thread of its own
     * while the session's caller is inside a step (never two calls at once),
     * which lets the CPU backend overlap the all-reduce with the backward.
     * false: only from the thread that called the session function. */
    bool concurrent;
    char error[256]; /* set by a call that failed: what went wrong ("" if nothing) */
    void *impl;      /* the implementation's own */
    /* The longest one call may wait for the other ranks, in seconds; 0 is
     * 600 (ten minutes, NCCL's default). A call that waits longer returns
     * TG_ERR_TIMEOUT and names in error the ranks that did not arrive; the
     * session's message adds the collective and the step. A stalled rank
     * (a hung driver, a swapped-out node, a network partition) then ends
     * the job instead of hanging it. tg_mpi_comm honours it, waiting
     * without spinning a core; a comm of your own should. */
    double timeout_s;
    /* The gradients are averaged in buckets of about this many bytes, one
     * all-reduce each (one gradient larger than it is a bucket of its
     * own); 0 is 2 MiB. Larger buckets cost fewer calls; smaller ones let
     * the first start earlier in the backward. Every rank must give the
     * same size. */
    int64_t bucket_bytes;
} tg_comm;

/* ---- sessions ------------------------------------------------------------ */

/* The CPU backend runs each step or run with subnormal floats flushed to
 * zero (as GPUs do), saving and restoring the caller's floating-point mode
 * around it; results are bitwise the same for any thread count. */
typedef enum { TG_BACKEND_CPU = 0, TG_BACKEND_WEBGPU } tg_backend;

typedef struct {
    const char *name;
    tg_dtype dtype;
    tg_shape shape;
} tg_input_decl;

/* Compile progress: called on the thread that compiles (tg_session_new,
 * tg_session_replace_model, tg_forward_new and a forward session's first
 * run of a batch size) as the backend compiles a program's kernels: `what`
 * ("kernels": the WebGPU pipelines, the distinct ones) and done of total,
 * from 0 to total. The CPU backend reports nothing (it compiles nothing
 * that takes time). docs/webgpu.md says what to expect. */
typedef void (*tg_compile_progress_fn)(void *user, const char *what, int64_t done, int64_t total);

typedef struct {
    tg_model *model;
    tg_trace_fn loss;          /* returns a scalar f32 */
    void *user;                /* passed to loss */
    const tg_input_decl *inputs;
    int n_inputs;
    tg_optim optim;
    uint64_t seed;             /* param init and random ops; 0 is a seed like any other */
    bool random_seed;          /* draw a fresh seed instead (seed must be 0); tg_session_seed reads it */
    tg_backend backend;
    int threads;               /* CPU threads (at most 1024); 0 = TG_THREADS or all cores */
    /* Check every kernel's output (also TG_CHECK_NUMERICS=1): the first NaN
     * or Inf fails the step with TG_ERR_NUMERIC naming the op, its call
     * site and the first param gradient that depends on it (else the loss
     * or the result). Off, a step still fails (updates not applied) when
     * the loss or the global gradient norm is not finite. */
    bool check_numerics;
    /* Data parallel (docs/distributed.md): NULL trains in this process alone.
     * Set, every rank of comm makes a session from the same spec (each fed
     * its own share of the batch); tg_session_new broadcasts rank 0's params
     * and optimizer state, and each step averages the gradients and the loss
     * over the ranks before the optimizer, so every rank applies the same
     * update. The comm must outlive the session; its timeout_s bounds every
     * wait for the other ranks (default ten minutes). */
    tg_comm *comm;
    /* Gradients live only from the backward that computes them to the
     * update that reads them, and may be computed over an operand that
     * dies with them; tg_session_get_grad refuses. Needs an optimizer;
     * not with comm. It saves little: kept gradients, too, take memory
     * only from the backward on, in the memory the plan reuses (as
     * PyTorch's after zero_grad(set_to_none=True)); gpt_small plans 1700
     * MB against 1702. Kept, they lie close together, so that one binding
     * spans them for the optimizer's kernel; discarded they spread out, and
     * on a device with small storage bindings (lavapipe's 128 MiB) the
     * optimizer and the clip norm's sums then take more dispatches
     * (gpt_small 229 against 219; the H200 runs 219 either way). */
    bool discard_grads;
    /* The most memory the session may plan (params, optimizer state,
     * activations), checked before anything is allocated; a plan larger is
     * TG_ERR_NOMEM naming both figures and the largest part. 0: on the CPU,
     * the memory this process can have (the smallest of the machine's
     * physical memory, its cgroup's limit and what RLIMIT_AS leaves), as
     * Linux's overcommit would otherwise accept the allocation and its
     * out-of-memory killer end the process as the params are first
     * written; on WebGPU no total (each buffer is checked against the
     * adapter's maxBufferSize). > 0: this many bytes, instead (below the
     * machine's to keep a session small; above it when you know better,
     * with swap). TG_MEMORY_UNCHECKED: no check. */
    int64_t memory_limit;
    /* Gradient accumulation: K > 1 micro-batches per update. Each
     * tg_session_step runs one micro-batch's forward and backward and adds
     * its gradients to a sum; every K-th applies the update with the mean
     * of the K (so K micro-batches of a mean loss update the params as one
     * step over all of them would), memory that of one micro-batch plus the
     * sums. tg_session_step_count counts updates; tg_session_pending the
     * micro-batches since the last; tg_session_get_grad gives the sum of
     * the round's gradients so far. Needs an optimizer; not with comm.
     * 0 or 1: every step updates. */
    int accumulate;
    /* Told how the compile goes (NULL: nothing reported), with
     * compile_progress_user. */
    tg_compile_progress_fn compile_progress;
    void *compile_progress_user;
} tg_train_spec;

#define TG_MEMORY_UNCHECKED (-1)

/* Two kinds of session, two types: a training session (tg_session: a loss,
 * gradients, an optimizer, steps) and a forward session (tg_forward: a
 * function of the params, run for outputs). A training-only call on a
 * forward session does not compile. Both hold their params on a device;
 * a forward session either has its own (tg_forward_new) or shares a
 * training session's (tg_forward_attach). */
typedef struct tg_session tg_session;
typedef struct tg_forward tg_forward;
/* A named tensor in memory: a param, or one of a safetensors file. */
typedef struct {
    const char *name;
    tg_dtype dtype;    /* TG_F32 or TG_I32 */
    tg_shape shape;    /* up to TG_MAX_DIMS dims */
    const void *data;  /* numel little-endian elements; 4-byte aligned in files read */
} tg_st_tensor;
/* A set of named tensors in memory: a safetensors file read, or params
 * downloaded (the safetensors section below). */
typedef struct tg_safetensors tg_safetensors;

/* Traces, differentiates, appends the optimizer, plans and compiles. */
tg_status tg_session_new(const tg_train_spec *spec, tg_session **out);
void tg_session_free(tg_session *s);

/* Feeds for step/run, and params for upload: `count` elements of `dtype`
 * at `data`. The dtype must be the input's (TG_ERR_ARG otherwise).
 * TG_F32 is 0, so {"x", x, n} feeds an f32 input; an i32 input takes
 * {"tokens", tok, n, TG_I32}, or TG_FEED below. */
typedef struct {
    const char *name;
    const void *data;
    int64_t count;
    tg_dtype dtype;
} tg_feed;

/* A feed whose dtype follows the element type of data, float (TG_F32) or
 * int32_t (TG_I32); a pointer to anything else does not compile. In C it is
 * an initializer: (tg_feed[]){TG_FEED("tokens", tok, n), TG_FEED("x", x, m)};
 * in C++ a value: tg_feed feeds[] = {TG_FEED("tokens", tok, n), ...}, with
 * any integer type for count (a vector's size()). */
#ifndef __cplusplus
#define TG_FEED(name, data, count) {(name), (data), (count), TG_DTYPE_OF(data)}
#define TG_DTYPE_OF(p) \
    _Generic(&*(p), float *: TG_F32, const float *: TG_F32, int32_t *: TG_I32, const int32_t *: TG_I32)
#else
/* Each return type stands on a line of its own: the Makefile exports the
 * functions declared on lines that start with one, and these are inline. */
extern "C++" {
constexpr tg_dtype
tg_dtype_of(const float *) { return TG_F32; }
constexpr tg_dtype
tg_dtype_of(const int32_t *) { return TG_I32; }
template <class Count>
inline tg_feed
tg_feed_of(const char *name, const float *data, Count count) {
    return tg_feed{name, data, static_cast<int64_t>(count), TG_F32};
}
template <class Count>
inline tg_feed
tg_feed_of(const char *name, const int32_t *data, Count count) {
    return tg_feed{name, data, static_cast<int64_t>(count), TG_I32};
}
}
#define TG_FEED(name, data, count) tg_feed_of((name), (data), (count))
#define TG_DTYPE_OF(p) tg_dtype_of(p)
#endif

/* One step: write inputs, forward, backward, update, writebacks. Every
 * declared input must be fed exactly once. loss may be NULL. */
tg_status tg_session_step(tg_session *s, const tg_feed *feeds, int n_feeds, float *loss);
/* Replaces the schedule; it restarts from the next step. */
tg_status tg_session_set_lr(tg_session *s, tg_lr lr);
int64_t tg_session_step_count(const tg_session *s);
/* With spec.accumulate = K: the micro-batches stepped since the last update
 * (0 .. K-1; 0 right after one). A step that fails drops the round's
 * gradients: the next step starts a new round. 0 without accumulation. */
int tg_session_pending(const tg_session *s);
/* With optim.ema_decay: every param under its name, as tg_session_download
 * gives them, the trained ones holding their moving average (before the
 * first update, the params themselves). Upload it into a forward session
 * (tg_forward_upload_tensors) or write it (tg_safetensors_write) to run or
 * keep the averaged model. TG_ERR_STATE without ema_decay. */
tg_status tg_session_download_ema(tg_session *s, tg_safetensors **out);

/* Params by name. set/get take one f32 param (count must match); upload
 * takes every param exactly once (strict: missing, unknown, duplicate,
 * wrong-sized feeds and feeds of another dtype than the param's are errors,
 * and nothing is written then). */
tg_status tg_session_set_param(tg_session *s, const char *name, const float *data, int64_t count);
tg_status tg_session_get_param(tg_session *s, const char *name, float *data, int64_t count);
tg_status tg_session_upload(tg_session *s, const tg_feed *params, int n);
/* The gradient of a param from the last step: zeros before the first; after
 * a step that failed at its check (a loss or gradient norm not finite),
 * that step's; TG_ERR_STATE after one that failed before its backward wrote
 * every gradient (check_numerics stopped it, or the device failed), until a
 * step succeeds. */
tg_status tg_session_get_grad(tg_session *s, const char *name, float *data, int64_t count);

/* Params from named tensors, checked by name, dtype and exact shape (a
 * transposed [out, in] weight of the right size is TG_ERR_SHAPE, where
 * set_param / upload, which check the count, would take it): one param, or
 * every param exactly once (missing, unknown or duplicate names are
 * TG_ERR_NAME, and nothing is written unless all pass). A file read with
 * tg_safetensors_read gives such an array. */
tg_status tg_session_set_tensor(tg_session *s, const tg_st_tensor *t);
tg_status tg_session_upload_tensors(tg_session *s, const tg_st_tensor *t, int n);
/* Every param in one call, in model order: name, dtype, shape and a copy of
 * its values, as a tg_safetensors collection (read it with
 * tg_safetensors_count / tensor / find, write it with tg_safetensors_write,
 * free it with tg_safetensors_free). */
tg_status tg_session_download(tg_session *s, tg_safetensors **out);

/* A capture by name, `count` elements of its own dtype (i32 stays i32). */
tg_status tg_session_read(tg_session *s, const char *name, void *dst, int64_t count);
/* The captures the loss function made, in the order it made them (NULL
 * past the end); the names stay valid until the next replace_model. */
int tg_session_capture_count(const tg_session *s);
const char *tg_session_capture_name(const tg_session *s, int i);
/* Shape and dtype of a capture. */
tg_status tg_session_capture_info(const tg_session *s, const char *name, tg_shape *shape, tg_dtype *dtype);

/* The buffer plan: prints it (one line per buffer, totals at the end) and
 * returns its totals. */
typedef struct {
    int64_t planned_bytes;     /* everything the plan allocates */
    int64_t naive_bytes;       /* one buffer per tensor, no reuse, no views */
    /* scratch_bytes: the memory pooled by liveness, intermediates and the gradients (grad_bytes of
     * it, each live from the backward that writes it to the end of the step) */
    int64_t param_bytes, grad_bytes, state_bytes, input_bytes, scratch_bytes, other_bytes;
    int n_nodes, n_kernels;        /* graph nodes; nodes that run a kernel */
    int n_dispatches;              /* kernel launches per step on this backend (after fusion, with writebacks) */
    int n_writebacks, n_writeback_copies; /* end-of-step updates; copies = those not computed in place */
    int64_t workspace_bytes;       /* the backend's own scratch beyond the plan (WebGPU: attention statistics,
                                    * and split kernels' partial sums where the scratch arena had no room free
                                    * over their turns); counted in planned_bytes */
} tg_plan_stats;
tg_status tg_session_plan_stats(const tg_session *s, tg_plan_stats *out);
void tg_session_print_plan(const tg_session *s, void *file /* FILE* */);
/* The graph after grad, optimizer and passes. */
const tg_graph *tg_session_graph(const tg_session *s);
/* tg_graph_dot of that graph, with the nodes the backend fuses into one
 * kernel drawn as one cluster each. TG_ERR_ARG for NULL, TG_ERR_IO when
 * the write fails. */
tg_status tg_session_dot(const tg_session *s, void *file /* FILE* */);
/* The seed random ops (sampling, dropout) draw from; each step then uses a
 * hash of (seed, step number). */
tg_status tg_session_set_seed(tg_session *s, uint64_t seed);
/* The session's seed: the spec's, the one random_seed drew, or the last one
 * set, reset or replaced with (0 for NULL). */
uint64_t tg_session_seed(const tg_session *s);

/* Starts training over without recompiling. {0} (or NULL) resets
 * everything: params drawn again from the session's seed, optimizer state
 * zeroed, the step count 0 and the schedule restarted from step 1, so the
 * steps that follow are, on the CPU, bitwise those of a new session made
 * with the same spec and seed. The schedule is the one in use (the spec's or
 * set_lr's). */
typedef struct {
    bool keep_params;    /* leave the params as they are */
    bool keep_optimizer; /* leave optimizer state, step count and schedule position as they are */
    bool new_seed;       /* draw from `seed`, which becomes the session's seed (random ops too) */
    uint64_t seed;
} tg_reset_opts;
tg_status tg_session_reset(tg_session *s, const tg_reset_opts *opts);

/* Swaps in a new model (new params, any shapes) and recompiles the same
 * loss function and inputs for it, optionally with a new optimizer; the
 * optimizer state starts at zero and the step count at 0. The new program
 * is built before anything is dropped: when it fails (a trace error, a
 * device limit) the session is unchanged and the error comes back. The
 * session never owns a model: free the old one after the call.
 * Attached forward sessions are recompiled for the new model at once
 * (their function traced again with their own user pointer, so update what
 * it points to first); one whose function no longer fits is left broken:
 * every later call on it fails with TG_ERR_STATE and the reason, and it
 * can only be freed. Pointers into the old program (tg_session_graph, the
 * capture names) are stale after it. Every call on a training session and its attached
 * forwards holds one lock, so a step or run on another thread happens
 * wholly before or wholly after a replace (or a reset). */
typedef struct {
    tg_model *model;      /* required */
    void *user;           /* the loss function's user pointer; NULL keeps the session's */
    const tg_optim *optim; /* NULL keeps the session's optimizer and schedule */
    bool new_seed;        /* draw the new params from `seed` (it becomes the session's); else the session's seed */
    uint64_t seed;
} tg_replace_spec;
tg_status tg_session_replace_model(tg_session *s, const tg_replace_spec *spec);

/* Data-parallel sessions: what the gradient exchange cost, summed over the
 * steps since the session was made (tg_session_comm_stats fills zeros for a
 * session without a comm). On the CPU the all-reduce of each bucket of
 * gradients runs beside the rest of the backward when the comm is
 * concurrent; exposed_s is the part the steps waited for. */
typedef struct {
    int ranks;
    int buckets;       /* all-reduces per step: gradient buckets, then one for the loss and every rank's status */
    int64_t bytes;     /* bytes each rank all-reduces per step */
    int64_t steps;     /* steps measured */
    double step_s;     /* seconds inside tg_session_step */
    double allreduce_s; /* seconds inside the communicator's all-reduce */
    double exposed_s;  /* seconds the steps waited for the exchange (the rest ran beside the backward;
                        * on WebGPU all of it, the gradients' read-back and write-back included) */
} tg_comm_stats;
tg_status tg_session_comm_stats(const tg_session *s, tg_comm_stats *out);

/* ---- forward sessions ---------------------------------------------------
 * Input shapes may use TG_BATCH for the batch dimension: the program is
 * compiled for each batch size on first use and cached (the 8 most recently
 * used sizes; another is compiled again when it returns). Both constructors
 * trace and plan at once, for batch 1 when an input uses TG_BATCH, so an
 * error in the function comes back from them; its kernels are compiled at
 * once without TG_BATCH, else on the first run of each batch size. */

#define TG_BATCH (-1)

typedef struct {
    tg_trace_fn fn;            /* returns the output: any shape, any dtype */
    void *user;
    const tg_input_decl *inputs;
    int n_inputs;
    bool check_numerics;       /* as tg_train_spec's: every run checks every kernel's output */
    /* tg_forward_new only: tg_forward_attach takes the model (which may be
     * left NULL or must be the same), the device and the params from the
     * training session, and leaves seed, backend and threads alone. */
    tg_model *model;
    uint64_t seed;             /* param init: the same seed gives the params tg_session_new would */
    tg_backend backend;
    int threads;               /* CPU threads (at most 1024); 0 = TG_THREADS or all cores */
    int64_t memory_limit;      /* both constructors: as tg_train_spec's, for the params and every batch size kept */
    tg_compile_progress_fn compile_progress; /* as tg_train_spec's */
    void *compile_progress_user;
} tg_forward_spec;

/* A forward session with params of its own, initialized from spec->seed
 * (load weights with tg_forward_load_params or tg_forward_upload). */
tg_status tg_forward_new(const tg_forward_spec *spec, tg_forward **out);
/* A forward session sharing the params (and the device) of a training
 * session: its updates are visible at once, and a checkpoint loaded into
 * either is loaded for both. Either may be freed first. */
tg_status tg_forward_attach(tg_session *train, const tg_forward_spec *spec, tg_forward **out);
void tg_forward_free(tg_forward *f);
/* Runs the forward program for `batch` (ignored when no input uses TG_BATCH). */
tg_status tg_forward_run(tg_forward *f, int64_t batch, const tg_feed *feeds, int n_feeds);
/* The output of the last run, `count` elements of its own dtype (i32 stays
 * i32); TG_ERR_STATE before a run and after a failed one, until a run
 * succeeds. */
tg_status tg_forward_output(tg_forward *f, void *dst, int64_t count);
tg_status tg_forward_output_info(const tg_forward *f, tg_shape *shape, tg_dtype *dtype);
/* A capture of the last run, as tg_session_read / capture_info; after a
 * failed run, for debugging, what that run left. */
tg_status tg_forward_read(tg_forward *f, const char *name, void *dst, int64_t count);
/* The captures of the last run's program (before a run: the first one
 * traced), as tg_session_capture_count / name. */
int tg_forward_capture_count(const tg_forward *f);
const char *tg_forward_capture_name(const tg_forward *f, int i);
tg_status tg_forward_capture_info(const tg_forward *f, const char *name, tg_shape *shape, tg_dtype *dtype);
/* Params, as tg_session's (attached: the training session's params). */
tg_status tg_forward_set_param(tg_forward *f, const char *name, const float *data, int64_t count);
tg_status tg_forward_get_param(tg_forward *f, const char *name, float *data, int64_t count);
tg_status tg_forward_upload(tg_forward *f, const tg_feed *params, int n);
tg_status tg_forward_download(tg_forward *f, tg_safetensors **out);
tg_status tg_forward_set_tensor(tg_forward *f, const tg_st_tensor *t);
tg_status tg_forward_upload_tensors(tg_forward *f, const tg_st_tensor *t, int n);
/* The plan and graph of the last run's program (before a run: the first
 * one traced, whose n_dispatches is 0 until its kernels are compiled), as
 * tg_session_plan_stats / print_plan / graph / dot. */
tg_status tg_forward_plan_stats(const tg_forward *f, tg_plan_stats *out);
void tg_forward_print_plan(const tg_forward *f, void *file /* FILE* */);
const tg_graph *tg_forward_graph(const tg_forward *f);
tg_status tg_forward_dot(const tg_forward *f, void *file /* FILE* */);
/* The seed random ops (sampling) draw from; each run then uses a hash of
 * (seed, run number). */
tg_status tg_forward_set_seed(tg_forward *f, uint64_t seed);

/* The compile progress of sessions whose spec leaves compile_progress NULL
 * (NULL: none, the default); `tg` prints it when a compile takes over a
 * second. Set it before making sessions, not while another thread compiles. */
void tg_set_default_compile_progress(tg_compile_progress_fn fn, void *user);

/* CPU threads used by new sessions when the spec says 0 (else TG_THREADS, else all cores).
 * A TG_THREADS that is not a whole number from 1 to 1024 fails such a session (TG_ERR_ARG). */
void tg_set_default_threads(int n);

/* The CPU backend's instruction-set path: the best this CPU supports, or a
 * lower one named by the environment variable TG_CPU (avx512, avx2 or
 * generic; neon or generic on aarch64; simd128 or generic in the
 * WebAssembly build), read once per process. CPU sessions
 * fail to start when TG_CPU names an unknown path or one above the CPU's. */
typedef struct {
    const char *path;  /* in use */
    const char *best;  /* the best this CPU supports */
    char kernels[320]; /* the code the path runs, kernel family by family */
} tg_cpu_path_info;
/* Fills *out; TG_ERR_ARG (and out describes the best path) when TG_CPU is bad. */
tg_status tg_cpu_info(tg_cpu_path_info *out);

/* ---- checkpoints --------------------------------------------------------- */

/* Files are safetensors (docs/checkpoints.md) with a checksum of every
 * byte. Writes are atomic: a temporary "<path>.tmp.<pid>.<n>" is written,
 * synced and renamed over path (over its target when path is a symbolic
 * link), so path holds either the old file or the complete new one; "" is
 * TG_ERR_ARG. Loads are strict (a damaged file, missing, unknown or
 * wrong-shaped tensors, metadata out of range, NaN, Inf or a negative
 * Adam second moment are errors) and check the whole file before writing
 * anything into the session. */

/* Weights only: every model param under its name, F32 (I32 for an i32
 * param), its shape. This is the file upstream tensorgrad loads by param
 * name. tg_forward_load_params also takes a full checkpoint's params,
 * leaving its optimizer state out (inference from a training checkpoint);
 * tg_session_load_params refuses one (load it with tg_session_load). */
tg_status tg_session_save_params(tg_session *s, const char *path);
tg_status tg_session_load_params(tg_session *s, const char *path);
tg_status tg_forward_save_params(tg_forward *f, const char *path);
tg_status tg_forward_load_params(tg_forward *f, const char *path);
/* A full checkpoint: params, optimizer state, step count, LR schedule and
 * seed. Load it into a session made from the same spec (same params,
 * optimizer kind and state) and training continues exactly where it stopped:
 * on the CPU, bitwise the same losses as a run that never stopped. The
 * schedule and seed come from the file, not the spec; call
 * tg_session_set_lr after loading to change the schedule. */
tg_status tg_session_save(tg_session *s, const char *path);
tg_status tg_session_load(tg_session *s, const char *path);

/* ---- safetensors -------------------------------------------------------- */

/* The format the checkpoints above use. Reads check everything (a bad file
 * is TG_ERR_FORMAT naming the byte offset) and read F32 and I32 tensors as
 * they are and F16 and BF16 ones converted to F32 (exactly: every half is
 * an f32); tensors of any other dtype (I64 counters, F64, U8, FP8, ...) are
 * skipped, listed by tg_safetensors_skipped, and the rest of the file still
 * loads. Writes (F32 and I32) are atomic in the same way. A read set of
 * tensors is a tg_st_tensor array: tg_safetensors_tensor(f, 0) is the first
 * of tg_safetensors_count(f) in a row, ready for tg_session_upload_tensors. */
tg_status tg_safetensors_read(const char *path, tg_safetensors **out);
/* The same from a file image in memory (copied: buf may go at once). */
tg_status tg_safetensors_read_mem(const void *buf, size_t size, tg_safetensors **out);
void tg_safetensors_free(tg_safetensors *f);
int tg_safetensors_count(const tg_safetensors *f);
const tg_st_tensor *tg_safetensors_tensor(const tg_safetensors *f, int i); /* header order */
/* The tensors the reader skipped, in header order: the name (NULL past the
 * end), and in *dtype (if not NULL) the dtype as the file spells it. */
int tg_safetensors_skipped_count(const tg_safetensors *f);
const char *tg_safetensors_skipped(const tg_safetensors *f, int i, const char **dtype);
const tg_st_tensor *tg_safetensors_find(const tg_safetensors *f, const char *name); /* NULL if absent */
const char *tg_safetensors_meta(const tg_safetensors *f, const char *key);          /* NULL if absent */
/* Writes tensors in the given order; meta is n_meta (key, value) pairs laid
 * out flat: {"k1", "v1", "k2", "v2", ...}. The writer puts a checksum of
 * every byte of the file first in the metadata ("tensorgrad_checksum"),
 * which the readers check and do not list; a symbolic link at path is
 * written through (its target replaced, the link kept); "" is TG_ERR_ARG. */
tg_status tg_safetensors_write(const char *path, const tg_st_tensor *t, int n, const char *const *meta, int n_meta);

/* ---- WebGPU ------------------------------------------------------------- */

/* The WebGPU library is loaded at run time: $TG_WEBGPU_LIB if set, else
 * libwebgpu_dawn.so, libwgpu_native.so or libwebgpu_wrapper.so from the
 * library path, else the Dawn copy in the installed data directory
 * ($(LIBDIR)/tensorgrad/webgpu, filled by make install), else the one
 * scripts/fetch-webgpu.sh put in the source tree's .deps/ (docs/install.md).
 * Only an adapter of the platform's native backend is accepted (Vulkan on
 * Linux, Metal on macOS, D3D12 on Windows; Dawn's Null fallback computes
 * nothing). When one of those folders holds the fetched lavapipe driver and no
 * Vulkan driver variable (VK_DRIVER_FILES, VK_ICD_FILENAMES,
 * VK_ADD_DRIVER_FILES) is set, the library adds it with VK_ADD_DRIVER_FILES
 * before Vulkan starts, so a machine with no GPU still runs (slowly, on the
 * CPU) and one with a GPU still prefers the GPU. */
typedef struct {
    char name[128];         /* "NVIDIA H200", "llvmpipe (LLVM 15.0.7, 256 bits)" */
    char vendor[64], architecture[64], description[128];
    char backend[16];       /* "vulkan" */
    char type[16];          /* "discrete GPU", "integrated GPU", "CPU", "unknown" */
    char library[256];      /* the WebGPU library file that was loaded */
    uint32_t vendor_id, device_id;
    uint32_t subgroup_min_size, subgroup_max_size;
    uint64_t max_buffer_size, max_storage_buffer_binding_size;
    uint32_t max_storage_buffers_per_shader_stage;
    uint32_t max_compute_workgroup_storage_size;
    uint32_t max_compute_invocations_per_workgroup;
    uint32_t max_compute_workgroups_per_dimension;
    uint32_t min_storage_buffer_offset_alignment;
    char features[256];     /* the adapter's optional features, space-separated: "subgroups timestamp-query ..." */
    /* Dawn's guards: bounds clamps on every storage access and zeroing of
     * workgroup memory as each workgroup starts. Off by default (Dawn's
     * disable_robustness and disable_workgroup_init toggles: every index
     * our kernels compute is in range by construction, and every kernel
     * writes the workgroup memory it reads first); on with
     * TG_WEBGPU=robust, or when the library did not take both toggles. */
    bool robust;
} tg_webgpu_adapter_info;

/* Loads WebGPU (once per process) and describes the adapter sessions with
 * backend TG_BACKEND_WEBGPU use. TG_ERR_BACKEND "webgpu: unavailable: <why>"
 * when there is none. */
tg_status tg_webgpu_info(tg_webgpu_adapter_info *out);
/* The features the adapter offers beyond tg_webgpu_info's when the instance
 * and adapter are asked for with Dawn's allow_unsafe_apis toggle (a separate
 * instance, made and released here; sessions never use it), space-separated
 * into buf[n], then "; subgroup matrices: ..." saying whether a device
 * with all of them compiles f32 subgroup-matrix products (Dawn's
 * chromium_experimental_subgroup_matrix). */
tg_status tg_webgpu_unsafe_features(char *buf, size_t n);

/* ---- batches of an in-memory dataset --------------------------------------
 * An optional helper for training loops: the samples of arrays in memory,
 * a validation split held out once, and per epoch the training samples in
 * a shuffled order drawn from (seed, epoch) on the host, so every backend
 * and thread count sees the same batches. Each batch gathers its samples
 * into buffers of its own and hands them out as feeds named after the
 * fields, ready for tg_session_step or tg_forward_run. */
typedef struct {
    const char *name;   /* the input it feeds */
    const void *data;   /* n samples of `size` elements each, sample after sample; must outlive the set */
    tg_dtype dtype;     /* TG_F32 or TG_I32 */
    int64_t size;       /* elements per sample (784 for a 28x28 image, 1 for a label) */
} tg_data_field;

/* What becomes of an epoch's last batch when the samples do not divide
 * into batches: DROP leaves it out (a training session's shapes are
 * fixed); PARTIAL gives it with count < batch (a forward session with
 * TG_BATCH runs it); FILL completes it with the epoch's first samples again,
 * count saying how many are new (a fixed-shape evaluation that weighs only
 * those). */
typedef enum { TG_LAST_DROP = 0, TG_LAST_PARTIAL, TG_LAST_FILL } tg_last_batch;
typedef enum { TG_SPLIT_TRAIN = 0, TG_SPLIT_VAL } tg_split;

typedef struct {
    const tg_data_field *fields; /* copied (not the data) */
    int n_fields;
    int64_t n;            /* samples */
    int64_t batch;        /* samples per batch */
    int64_t n_val;        /* samples held out for validation, chosen by the seed once; 0: none */
    uint64_t seed;        /* the split and every epoch's order */
    bool no_shuffle;      /* training batches in the data's order */
    tg_last_batch last, last_val; /* the last partial batch of the training and the validation split */
} tg_data_spec;

typedef struct tg_data tg_data;
/* One batch: feeds[0 .. n_feeds) (one per field, the fields' names and
 * dtypes, count samples' elements each); the samples' positions in the
 * data; the epoch (from 0) and the batch's place in it. Valid until the
 * next call on the set. */
typedef struct {
    const tg_feed *feeds;
    int n_feeds;
    int64_t count;          /* samples in the batch: batch, or fewer for a PARTIAL last batch */
    int64_t fresh;          /* of them, the epoch's own (count, except in a FILL last batch) */
    const int64_t *samples; /* count positions in the data */
    int64_t epoch, index;
} tg_batch;

/* TG_ERR_ARG (naming the field) for NULL or unknown fields, a size, batch
 * or count out of range, or a split that leaves fewer samples than a batch
 * where the last batch is dropped. */
tg_status tg_data_new(const tg_data_spec *spec, tg_data **out);
void tg_data_free(tg_data *d);
/* The split's next batch into *out: true, or false at the end of an epoch
 * (nothing written), after which the split starts its next epoch. */
bool tg_data_next(tg_data *d, tg_split split, tg_batch *out);
/* The split's samples, and the batches an epoch gives. */
int64_t tg_data_count(const tg_data *d, tg_split split);
int64_t tg_data_batches(const tg_data *d, tg_split split);

/* ---- progress line --------------------------------------------------------
 * The line `tg train` prints: "step 200/2000  loss 0.0123  25600 ex/s  ETA 0:07".
 * On a terminal it is redrawn in place (a line is kept every `every` steps);
 * otherwise one line is printed every `every` steps. Fill the public fields,
 * call tg_progress_start, then per step: if tg_progress_due(p, step), read
 * the loss and call tg_progress_update. No allocation; nothing can fail. */
typedef struct {
    int64_t total;  /* steps in the run, for the ETA; 0 = unknown */
    int64_t batch;  /* examples per step, for examples/s; 0 = show steps/s */
    int64_t every;  /* steps between kept lines; 0 = total / 10 */
    void *file;     /* FILE* to write to; NULL = stdout */
    int64_t start;  /* steps done before this run (a resumed one): the rate and ETA count from it */
    /* set by tg_progress_start */
    double t0_;
    bool live_, drawn_;
} tg_progress;
void tg_progress_start(tg_progress *p);
bool tg_progress_due(const tg_progress *p, int64_t step);
/* extra: appended to the line (an eval result such as "val 1.93"), or NULL;
 * a line with extra is always kept. */
void tg_progress_update(tg_progress *p, int64_t step, float loss, const char *extra);
/* Ends a live line with a newline so later output starts on its own line. */
void tg_progress_end(tg_progress *p);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif
