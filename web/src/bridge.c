/* The C side of the JavaScript API (web/index.js), compiled into the
 * WebAssembly build only: the library's calls with arguments JavaScript can
 * pass, numbers and pointers into the WebAssembly memory. Sizes travel as
 * doubles (exact to 2^53), shapes as int32 arrays, tensors as their ids in
 * the graph being traced. A model's loss or forward function is JavaScript:
 * the trace function here calls tgjs_trace with the token it was registered
 * under (web/src/js_host.js), and that function builds the graph through the
 * op calls below. Every function that can fail returns a tg_status; the
 * message is tg_last_error(). */
#include <emscripten.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorgrad.h"

#define API EMSCRIPTEN_KEEPALIVE

/* Implemented in JavaScript (web/src/js_host.js). */
extern int tgjs_trace(int token, tg_graph *g);
extern int tgjs_filter(int token, int which, const char *name);

/* ---- small conversions ---- */

/* dims[0..n) as a shape; n outside 0..TG_MAX_DIMS gives a shape every op refuses. */
static tg_shape shape_of(const int32_t *dims, int n) {
    tg_shape s = {0, {0}};
    if (n < 0 || n > TG_MAX_DIMS) {
        s.ndim = TG_MAX_DIMS + 1;
        return s;
    }
    s.ndim = n;
    for (int i = 0; i < n; i++) s.d[i] = dims[i];
    return s;
}

/* A shape into out[0..TG_MAX_DIMS); returns its rank. */
static int put_shape(tg_shape s, int32_t *out) {
    for (int i = 0; i < s.ndim && i < TG_MAX_DIMS; i++) out[i] = (int32_t)s.d[i];
    return s.ndim;
}

#define T(g, id) ((tg_tensor){(g), (id)})

/* Call sites: JavaScript file names, kept for the life of the process (a
 * graph keeps the pointer, as it keeps __FILE__). */
API const char *tgw_site(const char *file) {
    static char **sites;
    static int n, cap;
    for (int i = 0; i < n; i++)
        if (strcmp(sites[i], file) == 0) return sites[i];
    if (n == cap) {
        int c = cap ? 2 * cap : 16;
        char **s = realloc(sites, sizeof *s * (size_t)c);
        if (!s) return "?";
        sites = s, cap = c;
    }
    size_t len = strlen(file) + 1;
    char *copy = malloc(len);
    if (!copy) return "?";
    memcpy(copy, file, len);
    sites[n++] = copy;
    return copy;
}

/* ---- params ---- */

/* init: 0 randn (scale), 1 zeros, 2 ones, 3 kaiming (scale = gain, 0 default), 4 values.
 * decay: -1 the init's rule, 0 off, 1 on. */
API int tgw_param(tg_model *m, const char *name, const int32_t *dims, int ndim, int dtype, int init, float scale,
                  const float *values, int decay) {
    tg_init in = {.kind = (tg_init_kind)init, .scale = scale, .values = values, .decay = decay};
    return tg_model_param_dt(m, name, shape_of(dims, ndim), (tg_dtype)dtype, in);
}

/* ---- ops: one function per signature, the op chosen by number ---- */

enum { U_NEG, U_SQRT, U_RSQRT, U_LOG, U_EXP, U_RELU, U_ABS, U_SQUARE, U_SIN, U_COS, U_TANH, U_SIGMOID, U_ERF, U_GELU,
       U_GELU_TANH, U_SILU, U_SOFTPLUS, U_LOG1P, U_EXPM1, U_HARDTANH, U_STOP_GRADIENT, U_SOFTMAX_CAUSAL, U_MERGE_HEADS,
       U_CATEGORICAL };

API int tgw_unary(tg_graph *g, int op, int x, const char *f, int l) {
    tg_tensor t = T(g, x), r;
    switch (op) {
    case U_NEG: r = tg_neg_at(t, f, l); break;
    case U_SQRT: r = tg_sqrt_at(t, f, l); break;
    case U_RSQRT: r = tg_rsqrt_at(t, f, l); break;
    case U_LOG: r = tg_log_at(t, f, l); break;
    case U_EXP: r = tg_exp_at(t, f, l); break;
    case U_RELU: r = tg_relu_at(t, f, l); break;
    case U_ABS: r = tg_abs_at(t, f, l); break;
    case U_SQUARE: r = tg_square_at(t, f, l); break;
    case U_SIN: r = tg_sin_at(t, f, l); break;
    case U_COS: r = tg_cos_at(t, f, l); break;
    case U_TANH: r = tg_tanh_at(t, f, l); break;
    case U_SIGMOID: r = tg_sigmoid_at(t, f, l); break;
    case U_ERF: r = tg_erf_at(t, f, l); break;
    case U_GELU: r = tg_gelu_at(t, f, l); break;
    case U_GELU_TANH: r = tg_gelu_tanh_at(t, f, l); break;
    case U_SILU: r = tg_silu_at(t, f, l); break;
    case U_SOFTPLUS: r = tg_softplus_at(t, f, l); break;
    case U_LOG1P: r = tg_log1p_at(t, f, l); break;
    case U_EXPM1: r = tg_expm1_at(t, f, l); break;
    case U_HARDTANH: r = tg_hardtanh_at(t, f, l); break;
    case U_STOP_GRADIENT: r = tg_stop_gradient_at(t, f, l); break;
    case U_SOFTMAX_CAUSAL: r = tg_softmax_causal_at(t, f, l); break;
    case U_MERGE_HEADS: r = tg_merge_heads_at(t, f, l); break;
    case U_CATEGORICAL: r = tg_categorical_at(t, f, l); break;
    default: return -1;
    }
    return r.id;
}

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_LESS, B_GREATER, B_MIN, B_MAX, B_MATMUL, B_MSE, B_EMBEDDING };

API int tgw_binary(tg_graph *g, int op, int a, int b, const char *f, int l) {
    tg_tensor x = T(g, a), y = T(g, b), r;
    switch (op) {
    case B_ADD: r = tg_add_at(x, y, f, l); break;
    case B_SUB: r = tg_sub_at(x, y, f, l); break;
    case B_MUL: r = tg_mul_at(x, y, f, l); break;
    case B_DIV: r = tg_div_at(x, y, f, l); break;
    case B_LESS: r = tg_less_at(x, y, f, l); break;
    case B_GREATER: r = tg_greater_at(x, y, f, l); break;
    case B_MIN: r = tg_min_at(x, y, f, l); break;
    case B_MAX: r = tg_max_at(x, y, f, l); break;
    case B_MATMUL: r = tg_matmul_at(x, y, f, l); break;
    case B_MSE: r = tg_mse_at(x, y, f, l); break;
    case B_EMBEDDING: r = tg_embedding_at(x, y, f, l); break;
    default: return -1;
    }
    return r.id;
}

enum { S_ADD, S_SUB, S_RSUB, S_MUL, S_DIV, S_RDIV, S_LESS, S_GREATER, S_MIN, S_MAX, S_LEAKY_RELU, S_DROPOUT,
       S_WHERE_CAUSAL, S_ROPE };

API int tgw_scalar_op(tg_graph *g, int op, int x, float s, const char *f, int l) {
    tg_tensor t = T(g, x), r;
    switch (op) {
    case S_ADD: r = tg_add_s_at(t, s, f, l); break;
    case S_SUB: r = tg_sub_s_at(t, s, f, l); break;
    case S_RSUB: r = tg_rsub_s_at(s, t, f, l); break;
    case S_MUL: r = tg_mul_s_at(t, s, f, l); break;
    case S_DIV: r = tg_div_s_at(t, s, f, l); break;
    case S_RDIV: r = tg_rdiv_s_at(s, t, f, l); break;
    case S_LESS: r = tg_less_s_at(t, s, f, l); break;
    case S_GREATER: r = tg_greater_s_at(t, s, f, l); break;
    case S_MIN: r = tg_min_s_at(t, s, f, l); break;
    case S_MAX: r = tg_max_s_at(t, s, f, l); break;
    case S_LEAKY_RELU: r = tg_leaky_relu_at(t, s, f, l); break;
    case S_DROPOUT: r = tg_dropout_at(t, s, f, l); break;
    case S_WHERE_CAUSAL: r = tg_where_causal_at(t, s, f, l); break;
    case S_ROPE: r = tg_rope_at(t, s, f, l); break;
    default: return -1;
    }
    return r.id;
}

/* axis: TG_ALL (see tensorgrad.h) reduces every axis where the op allows it. */
enum { A_SUM, A_MEAN, A_ARGMAX, A_ARGMIN, A_AMAX, A_AMIN, A_SOFTMAX, A_LOG_SOFTMAX, A_SOFTMAX_CAUSAL, A_CATEGORICAL };

API int tgw_axis_op(tg_graph *g, int op, int x, int axis, int keepdims, const char *f, int l) {
    tg_tensor t = T(g, x), r;
    switch (op) {
    case A_SUM: r = tg_sum_at(t, axis, keepdims, f, l); break;
    case A_MEAN: r = tg_mean_at(t, axis, keepdims, f, l); break;
    case A_ARGMAX: r = tg_argmax_at(t, axis, keepdims, f, l); break;
    case A_ARGMIN: r = tg_argmin_at(t, axis, keepdims, f, l); break;
    case A_AMAX: r = tg_amax_at(t, axis, keepdims, f, l); break;
    case A_AMIN: r = tg_amin_at(t, axis, keepdims, f, l); break;
    case A_SOFTMAX: r = tg_softmax_at(t, axis, f, l); break;
    case A_LOG_SOFTMAX: r = tg_log_softmax_at(t, axis, f, l); break;
    case A_SOFTMAX_CAUSAL: r = tg_softmax_causal_axis_at(t, axis, f, l); break;
    case A_CATEGORICAL: r = tg_categorical_axis_at(t, axis, f, l); break;
    default: return -1;
    }
    return r.id;
}

/* TG_ALL, for the JavaScript side. */
API int tgw_all_axes(void) { return TG_ALL; }

enum { SH_RESHAPE, SH_PERMUTE, SH_BROADCAST_TO, SH_SUM_TO_SHAPE, SH_SUM_AXES, SH_MEAN_AXES };

API int tgw_shape_op(tg_graph *g, int op, int x, const int32_t *dims, int ndim, int keepdims, const char *f, int l) {
    tg_tensor t = T(g, x), r;
    tg_shape s = shape_of(dims, ndim);
    switch (op) {
    case SH_RESHAPE: r = tg_reshape_at(t, s, f, l); break;
    case SH_PERMUTE: r = tg_permute_at(t, s, f, l); break;
    case SH_BROADCAST_TO: r = tg_broadcast_to_at(t, s, f, l); break;
    case SH_SUM_TO_SHAPE: r = tg_sum_to_shape_at(t, s, f, l); break;
    case SH_SUM_AXES: r = tg_sum_axes_at(t, s, keepdims, f, l); break;
    case SH_MEAN_AXES: r = tg_mean_axes_at(t, s, keepdims, f, l); break;
    default: return -1;
    }
    return r.id;
}

/* Leaves. */
enum { L_FULL, L_ZEROS, L_ONES, L_RANDN };

API int tgw_leaf(tg_graph *g, int op, const int32_t *dims, int ndim, int dtype, float v, const char *f, int l) {
    tg_shape s = shape_of(dims, ndim);
    tg_tensor r;
    switch (op) {
    case L_FULL: r = tg_full_at(g, s, v, f, l); break;
    case L_ZEROS: r = tg_zeros_dt_at(g, s, (tg_dtype)dtype, f, l); break;
    case L_ONES: r = tg_ones_dt_at(g, s, (tg_dtype)dtype, f, l); break;
    case L_RANDN: r = tg_randn_at(g, s, f, l); break;
    default: return -1;
    }
    return r.id;
}

API int tgw_use(tg_graph *g, int p, const char *f, int l) { return tg_use_at(g, p, f, l).id; }
API int tgw_input(tg_graph *g, const char *name, const char *f, int l) { return tg_input_at(g, name, f, l).id; }
API int tgw_scalar(tg_graph *g, float v, const char *f, int l) { return tg_scalar_at(g, v, f, l).id; }
API int tgw_constant(tg_graph *g, const int32_t *dims, int ndim, const float *data, const char *f, int l) {
    return tg_constant_at(g, shape_of(dims, ndim), data, f, l).id;
}
API int tgw_arange(tg_graph *g, double n, int dtype, const char *f, int l) {
    return tg_arange_at(g, (int64_t)n, (tg_dtype)dtype, f, l).id;
}

/* The rest, one function each. */
API int tgw_cast(tg_graph *g, int x, int dtype, const char *f, int l) { return tg_cast_at(T(g, x), (tg_dtype)dtype, f, l).id; }
API int tgw_where(tg_graph *g, int c, int a, int b, const char *f, int l) {
    return tg_where_at(T(g, c), T(g, a), T(g, b), f, l).id;
}
API int tgw_matmul_t(tg_graph *g, int a, int b, int ta, int tb, const char *f, int l) {
    return tg_matmul_t_at(T(g, a), T(g, b), ta, tb, f, l).id;
}
API int tgw_one_hot(tg_graph *g, int idx, double depth, int dtype, const char *f, int l) {
    return tg_one_hot_dt_at(T(g, idx), (int64_t)depth, (tg_dtype)dtype, f, l).id;
}
API int tgw_capture(tg_graph *g, int x, const char *name, const char *f, int l) { return tg_capture_at(T(g, x), name, f, l).id; }
API int tgw_clamp(tg_graph *g, int x, float lo, float hi, const char *f, int l) { return tg_clamp_at(T(g, x), lo, hi, f, l).id; }
API int tgw_swap_axes(tg_graph *g, int x, int a, int b, const char *f, int l) { return tg_swap_axes_at(T(g, x), a, b, f, l).id; }
API int tgw_narrow(tg_graph *g, int x, int axis, double start, double length, const char *f, int l) {
    return tg_narrow_at(T(g, x), axis, (int64_t)start, (int64_t)length, f, l).id;
}
/* ids[0..n) joined (stack: 1) along axis. */
API int tgw_join(tg_graph *g, int stack, const int32_t *ids, int n, int axis, const char *f, int l) {
    tg_tensor xs[64];
    if (n < 1 || n > 64) {
        tg_tensor bad = {g, -1};
        return (stack ? tg_stack_at : tg_concat_at)(&bad, 1, axis, f, l).id;
    }
    for (int i = 0; i < n; i++) xs[i] = T(g, ids[i]);
    return (stack ? tg_stack_at(xs, n, axis, f, l) : tg_concat_at(xs, n, axis, f, l)).id;
}
/* The n pieces' ids into out[0..n). */
API void tgw_split(tg_graph *g, int x, int axis, const double *sizes, int n, int32_t *out, const char *f, int l) {
    int64_t sz[64];
    tg_tensor pieces[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) sz[i] = (int64_t)sizes[i];
    tg_split_at(T(g, x), axis, sz, n, pieces, f, l);
    for (int i = 0; i < n; i++) out[i] = pieces[i].id;
}
API int tgw_take_along_axis(tg_graph *g, int x, int idx, int axis, const char *f, int l) {
    return tg_take_along_axis_at(T(g, x), T(g, idx), axis, f, l).id;
}
/* nll: 0 cross-entropy from logits, 1 NLL from log-probabilities; reduction as tg_reduction. */
API int tgw_loss(tg_graph *g, int nll, int x, int targets, int reduction, const char *f, int l) {
    return (nll ? tg_nll_loss_at : tg_cross_entropy_at)(T(g, x), T(g, targets), (tg_reduction)reduction, f, l).id;
}
API int tgw_layer_norm(tg_graph *g, int x, int gain, int bias, float eps, const char *f, int l) {
    return tg_layer_norm_at(T(g, x), T(g, gain), T(g, bias), eps, f, l).id;
}
API int tgw_rms_norm(tg_graph *g, int x, int gain, float eps, const char *f, int l) {
    return tg_rms_norm_at(T(g, x), T(g, gain), eps, f, l).id;
}
API int tgw_split_heads(tg_graph *g, int x, double heads, const char *f, int l) {
    return tg_split_heads_at(T(g, x), (int64_t)heads, f, l).id;
}
/* bias < 0: none. */
API int tgw_conv2d(tg_graph *g, int x, int w, int bias, int sh, int sw, int ph, int pw, int groups, const char *f, int l) {
    if (bias < 0) return tg_conv2d_hw_at(T(g, x), T(g, w), sh, sw, ph, pw, groups, f, l).id;
    return tg_conv2d_bias_at(T(g, x), T(g, w), T(g, bias), sh, sw, ph, pw, groups, f, l).id;
}
API int tgw_max_pool2d(tg_graph *g, int x, int kh, int kw, int sh, int sw, int ph, int pw, const char *f, int l) {
    return tg_max_pool2d_hw_at(T(g, x), kh, kw, sh, sw, ph, pw, f, l).id;
}
API int tgw_upsample2d(tg_graph *g, int x, int factor, const char *f, int l) {
    return tg_nearest_upsample2d_at(T(g, x), factor, f, l).id;
}

/* A tensor's dtype and shape: the rank, dims into out[0..TG_MAX_DIMS); -1 for an invalid tensor. */
API int tgw_tensor_info(tg_graph *g, int x, int32_t *out, int32_t *dtype) {
    tg_tensor t = T(g, x);
    if (!tg_tensor_ok(t)) return -1;
    *dtype = (int32_t)tg_tensor_dtype(t);
    return put_shape(tg_tensor_shape(t), out);
}
API const char *tgw_graph_error(tg_graph *g) { return tg_graph_error(g); }

/* ---- optimizers and schedules ----
 * A schedule is a list of doubles: kind, peak, final, gamma, steps, every,
 * start_step, milestone count, the milestones; a warmup's
 * schedule follows it. */

#define MAX_LR_CHAIN 8
#define MAX_MILESTONES 256
typedef struct {
    tg_lr chain[MAX_LR_CHAIN];
    int64_t milestones[MAX_LR_CHAIN][MAX_MILESTONES];
} lr_parse;

/* Parses d[0..n) from link k of p on; returns the number of doubles used, -1 when malformed. */
static int parse_lr(const double *d, int n, lr_parse *p, int k) {
    if (k >= MAX_LR_CHAIN || n < 8) return -1;
    int nm = (int)d[7];
    if (nm < 0 || nm > MAX_MILESTONES || n < 8 + nm) return -1;
    tg_lr *r = &p->chain[k];
    memset(r, 0, sizeof *r);
    r->kind = (tg_lr_kind)d[0];
    r->peak = (float)d[1], r->final_lr = (float)d[2], r->gamma = (float)d[3];
    r->steps = (int64_t)d[4], r->every = (int64_t)d[5], r->start_step = (int64_t)d[6];
    r->n_milestones = nm;
    for (int i = 0; i < nm; i++) p->milestones[k][i] = (int64_t)d[8 + i];
    r->milestones = nm ? p->milestones[k] : NULL;
    int used = 8 + nm;
    if (r->kind == TG_LR_WARMUP) {
        int more = parse_lr(d + used, n - used, p, k + 1);
        if (more < 0) return -1;
        r->then = &p->chain[k + 1];
        used += more;
    }
    return used;
}

static bool decay_filter(const char *name, void *user) { return tgjs_filter((int)(intptr_t)user, 0, name) != 0; }
static bool normalize_filter(const char *name, void *user) { return tgjs_filter((int)(intptr_t)user, 1, name) != 0; }

/* o: kind (tg_opt_kind), beta1, beta2, eps, weight_decay, momentum, nesterov,
 * clip_grad_norm, normalize_grads (0 none, 1 all, 2 the filter), decay filter
 * (0 none, 1 the filter); filters call tgjs_filter with `token`. */
static tg_status optim_of(const double *o, const double *lr, int n_lr, int token, lr_parse *p, tg_optim *out) {
    if (parse_lr(lr, n_lr, p, 0) < 0) return TG_ERR_ARG;
    tg_optim r = {0};
    r.kind = (tg_opt_kind)o[0];
    r.lr = p->chain[0];
    r.beta1 = (float)o[1], r.beta2 = (float)o[2], r.eps = (float)o[3];
    r.weight_decay = (float)o[4], r.momentum = (float)o[5], r.nesterov = o[6] != 0;
    r.clip_grad_norm = (float)o[7];
    r.normalize_grads = o[8] != 0;
    if (o[8] == 2) r.normalize_filter = normalize_filter;
    if (o[9] != 0) r.decay_filter = decay_filter;
    r.filter_user = (void *)(intptr_t)token;
    *out = r;
    return TG_OK;
}

/* ---- sessions ---- */

static tg_tensor trace(tg_graph *g, void *user) { return (tg_tensor){g, tgjs_trace((int)(intptr_t)user, g)}; }

/* Inputs: names[i], dtypes[i], ranks[i], dims[6 i ..]. */
typedef struct {
    tg_input_decl d[64];
} input_list;

static int inputs_of(int n, const char *const *names, const int32_t *dtypes, const int32_t *ranks, const int32_t *dims,
                     input_list *out) {
    if (n < 0 || n > 64) return -1;
    for (int i = 0; i < n; i++)
        out->d[i] = (tg_input_decl){names[i], (tg_dtype)dtypes[i], shape_of(dims + TG_MAX_DIMS * i, ranks[i])};
    return n;
}

static uint64_t seed_of(double s) { return s < 0 ? 0 : (uint64_t)s; }

API tg_status tgw_session_new(tg_model *m, int token, int n_in, const char *const *names, const int32_t *dtypes,
                              const int32_t *ranks, const int32_t *dims, const double *o, const double *lr, int n_lr,
                              double seed, int backend, int check_numerics, tg_session **out) {
    static input_list in;
    static lr_parse p;
    tg_train_spec spec = {0};
    if (inputs_of(n_in, names, dtypes, ranks, dims, &in) < 0) return TG_ERR_ARG;
    if (optim_of(o, lr, n_lr, token, &p, &spec.optim) != TG_OK) return TG_ERR_ARG;
    spec.model = m;
    spec.loss = trace;
    spec.user = (void *)(intptr_t)token;
    spec.inputs = in.d;
    spec.n_inputs = n_in;
    spec.seed = seed_of(seed);
    spec.random_seed = seed < 0;
    spec.backend = (tg_backend)backend;
    spec.threads = 1;
    spec.check_numerics = check_numerics;
    return tg_session_new(&spec, out);
}

/* Feeds for the next step, run or upload, set one at a time. */
static tg_feed feeds[256];

API int tgw_feed(int i, const char *name, const void *data, double count, int dtype) {
    if (i < 0 || i >= 256) return TG_ERR_ARG;
    feeds[i] = (tg_feed){name, data, (int64_t)count, (tg_dtype)dtype};
    return TG_OK;
}

/* loss may be NULL (not read). */
API tg_status tgw_session_step(tg_session *s, int n, float *loss) { return tg_session_step(s, feeds, n, loss); }
API tg_status tgw_session_upload(tg_session *s, int n) { return tg_session_upload(s, feeds, n); }
API double tgw_session_step_count(tg_session *s) { return (double)tg_session_step_count(s); }
API double tgw_session_seed(tg_session *s) { return (double)tg_session_seed(s); }

API tg_status tgw_session_set_lr(tg_session *s, const double *lr, int n_lr) {
    static lr_parse p;
    if (parse_lr(lr, n_lr, &p, 0) < 0) return TG_ERR_ARG;
    return tg_session_set_lr(s, p.chain[0]);
}

API tg_status tgw_session_reset(tg_session *s, int keep_params, int keep_optimizer, double seed) {
    tg_reset_opts r = {keep_params != 0, keep_optimizer != 0, seed >= 0, seed_of(seed)};
    return tg_session_reset(s, &r);
}

/* o == NULL keeps the optimizer; seed < 0 keeps the session's. */
API tg_status tgw_session_replace(tg_session *s, tg_model *m, const double *o, const double *lr, int n_lr, int token,
                                  double seed) {
    static lr_parse p;
    tg_optim opt;
    tg_replace_spec r = {.model = m, .new_seed = seed >= 0, .seed = seed_of(seed)};
    if (o) {
        if (optim_of(o, lr, n_lr, token, &p, &opt) != TG_OK) return TG_ERR_ARG;
        r.optim = &opt;
    }
    return tg_session_replace_model(s, &r);
}

API tg_status tgw_session_read(tg_session *s, const char *name, void *dst, double count) {
    return tg_session_read(s, name, dst, (int64_t)count);
}
/* Capture i's name (NULL past the end), dtype and shape; returns the rank, -1 for none. */
API int tgw_session_capture(tg_session *s, int i, const char **name, int32_t *dims, int32_t *dtype) {
    tg_shape sh = {0, {0}};
    tg_dtype dt = TG_F32;
    *name = tg_session_capture_name(s, i);
    if (!*name || tg_session_capture_info(s, *name, &sh, &dt) != TG_OK) return -1;
    *dtype = (int32_t)dt;
    return put_shape(sh, dims);
}

/* Plan totals: planned, naive, param, grad, state, input, scratch, workspace
 * bytes, then nodes, kernels, dispatches, writebacks. */
static void put_stats(const tg_plan_stats *ps, double *out) {
    double v[] = {(double)ps->planned_bytes, (double)ps->naive_bytes, (double)ps->param_bytes, (double)ps->grad_bytes,
                  (double)ps->state_bytes, (double)ps->input_bytes, (double)ps->scratch_bytes,
                  (double)ps->workspace_bytes, ps->n_nodes, ps->n_kernels, ps->n_dispatches, ps->n_writebacks};
    memcpy(out, v, sizeof v);
}
API tg_status tgw_session_stats(tg_session *s, double *out) {
    tg_plan_stats ps;
    tg_status st = tg_session_plan_stats(s, &ps);
    if (st == TG_OK) put_stats(&ps, out);
    return st;
}

/* ---- forward sessions ---- */

/* train != NULL: attached to that session (model, seed, backend ignored). */
API tg_status tgw_forward_new(tg_session *train, tg_model *m, int token, int n_in, const char *const *names,
                              const int32_t *dtypes, const int32_t *ranks, const int32_t *dims, double seed, int backend,
                              tg_forward **out) {
    static input_list in;
    if (inputs_of(n_in, names, dtypes, ranks, dims, &in) < 0) return TG_ERR_ARG;
    tg_forward_spec spec = {.fn = trace, .user = (void *)(intptr_t)token, .inputs = in.d, .n_inputs = n_in,
                            .model = m, .seed = seed_of(seed), .backend = (tg_backend)backend, .threads = 1};
    return train ? tg_forward_attach(train, &spec, out) : tg_forward_new(&spec, out);
}

API tg_status tgw_forward_run(tg_forward *f, double batch, int n) { return tg_forward_run(f, (int64_t)batch, feeds, n); }
API tg_status tgw_forward_upload(tg_forward *f, int n) { return tg_forward_upload(f, feeds, n); }
API int tgw_forward_output_info(tg_forward *f, int32_t *dims, int32_t *dtype) {
    tg_shape s;
    tg_dtype dt;
    if (tg_forward_output_info(f, &s, &dt) != TG_OK) return -1;
    *dtype = (int32_t)dt;
    return put_shape(s, dims);
}
API tg_status tgw_forward_output(tg_forward *f, void *dst, double count) { return tg_forward_output(f, dst, (int64_t)count); }
API tg_status tgw_forward_read(tg_forward *f, const char *name, void *dst, double count) {
    return tg_forward_read(f, name, dst, (int64_t)count);
}
API int tgw_forward_capture(tg_forward *f, int i, const char **name, int32_t *dims, int32_t *dtype) {
    tg_shape sh = {0, {0}};
    tg_dtype dt = TG_F32;
    *name = tg_forward_capture_name(f, i);
    if (!*name || tg_forward_capture_info(f, *name, &sh, &dt) != TG_OK) return -1;
    *dtype = (int32_t)dt;
    return put_shape(sh, dims);
}
API tg_status tgw_forward_stats(tg_forward *f, double *out) {
    tg_plan_stats ps;
    tg_status st = tg_forward_plan_stats(f, &ps);
    if (st == TG_OK) put_stats(&ps, out);
    return st;
}

/* ---- tensor collections: downloads and safetensors bytes ---- */

API tg_safetensors *tgw_session_download(tg_session *s) {
    tg_safetensors *st = NULL;
    return tg_session_download(s, &st) == TG_OK ? st : NULL;
}
API tg_safetensors *tgw_forward_download(tg_forward *f) {
    tg_safetensors *st = NULL;
    return tg_forward_download(f, &st) == TG_OK ? st : NULL;
}
API tg_safetensors *tgw_st_read(const void *buf, double size) {
    tg_safetensors *st = NULL;
    return tg_safetensors_read_mem(buf, (size_t)size, &st) == TG_OK ? st : NULL;
}
/* Tensor i: name (returned), dtype, rank, dims, data. */
API const char *tgw_st_tensor(const tg_safetensors *st, int i, int32_t *dtype, int32_t *rank, int32_t *dims,
                              const void **data) {
    const tg_st_tensor *t = tg_safetensors_tensor(st, i);
    if (!t) return NULL;
    *dtype = (int32_t)t->dtype;
    *rank = put_shape(t->shape, dims);
    *data = t->data;
    return t->name;
}

/* ---- the device ---- */

/* JSON-escapes s into the buffer (quotes, backslashes, control characters dropped). */
static void put_json(char *buf, size_t n, size_t *len, const char *key, const char *s, bool last) {
    size_t k = *len;
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "\"%s\":\"", key);
    for (; *s && k + 3 < n; s++) {
        if (*s == '"' || *s == '\\') buf[k++] = '\\';
        if ((unsigned char)*s >= 0x20) buf[k++] = *s;
    }
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "\"%s", last ? "}" : ",");
    *len = k < n ? k : n - 1;
}

/* The WebGPU adapter as JSON ({} and the status when there is none). */
API tg_status tgw_webgpu_info(char *buf, int n) {
    tg_webgpu_adapter_info a;
    tg_status st = tg_webgpu_info(&a);
    size_t len = 1;
    snprintf(buf, (size_t)n, "{");
    if (st != TG_OK) {
        snprintf(buf, (size_t)n, "{}");
        return st;
    }
    put_json(buf, (size_t)n, &len, "name", a.name, false);
    put_json(buf, (size_t)n, &len, "vendor", a.vendor, false);
    put_json(buf, (size_t)n, &len, "architecture", a.architecture, false);
    put_json(buf, (size_t)n, &len, "description", a.description, false);
    put_json(buf, (size_t)n, &len, "type", a.type, false);
    put_json(buf, (size_t)n, &len, "features", a.features, true);
    return TG_OK;
}

API const char *tgw_cpu_path(void) {
    static tg_cpu_path_info info;
    return tg_cpu_info(&info) == TG_OK ? info.path : "?";
}
