/* Public builders of the math and shape ops. Each records the
 * caller's file:line and its own name, so an error reads
 * "tg_narrow: range [3, 5) is outside axis 1 of [4,4] (model.c:12)".
 * Composites (zeros, ones, swap_axes, stack, split, argmax over every axis)
 * are spelled out here in terms of IR ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ir.h"
#include "api.h"

static const tg_tensor BAD = {NULL, -1};

static tg_tensor add_node(tg_graph *g, tg_node *n) { return (tg_tensor){g, tg_ir_add(g, n)}; }

static tg_tensor fail(tg_graph *g, tg_opcode op, const char *api, const char *file, int line, const char *msg) {
    tg_node n = tg_ir_proto(op, api, file, line);
    tg_ir_fail(g, &n, "%s", msg);
    return (tg_tensor){g, -1};
}

static bool live(tg_tensor x) { return x.g && x.id >= 0 && x.id < x.g->n; }
static tg_shape shape_of(tg_tensor x) { return x.g->nodes[x.id].shape; }

/* An axis counted from the end when negative, against rank nd; false (and
 * the error recorded) when out of range. */
static bool norm_axis(tg_graph *g, tg_opcode op, const char *api, const char *file, int line, int axis, int nd,
                      tg_shape s, int *out) {
    int a = axis < 0 ? axis + nd : axis;
    if (a < 0 || a >= nd) {
        tg_node n = tg_ir_proto(op, api, file, line);
        char b[96];
        tg_ir_fail(g, &n, "axis %d out of range for %s", axis, tg_shape_str(s, b, sizeof b));
        return false;
    }
    *out = a;
    return true;
}

static tg_tensor unary(tg_opcode op, const char *api, tg_tensor x, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(op, api, file, line);
    n.in[0] = x.id;
    return add_node(x.g, &n);
}

static tg_tensor binary(tg_opcode op, const char *api, tg_tensor a, tg_tensor b, const char *file, int line) {
    if (!a.g || !b.g) return (tg_tensor){a.g ? a.g : b.g, -1};
    if (a.g != b.g) return fail(a.g, op, api, file, line, "operands come from different graphs");
    tg_node n = tg_ir_proto(op, api, file, line);
    n.in[0] = a.id;
    n.in[1] = b.id;
    return add_node(a.g, &n);
}

/* ---- elementwise ---- */

tg_tensor tg_min_at(tg_tensor a, tg_tensor b, const char *file, int line) {
    return binary(TG_OP_MIN, "min", a, b, file, line);
}
tg_tensor tg_max_at(tg_tensor a, tg_tensor b, const char *file, int line) {
    return binary(TG_OP_MAX, "max", a, b, file, line);
}
tg_tensor tg_min_s_at(tg_tensor a, float s, const char *file, int line) {
    return binary(TG_OP_MIN, "min_s", a, tg_api_scalar_like(a, s, file, line), file, line);
}
tg_tensor tg_max_s_at(tg_tensor a, float s, const char *file, int line) {
    return binary(TG_OP_MAX, "max_s", a, tg_api_scalar_like(a, s, file, line), file, line);
}

tg_tensor tg_clamp_at(tg_tensor x, float lo, float hi, const char *file, int line) {
    if (!x.g) return BAD;
    if (lo != lo || hi != hi) return fail(x.g, TG_OP_CLAMP, "clamp", file, line, "a bound is NaN");
    tg_node n = tg_ir_proto(TG_OP_CLAMP, "clamp", file, line);
    n.in[0] = x.id;
    n.at.unary.p0 = lo;
    n.at.unary.p1 = hi;
    return add_node(x.g, &n);
}

/* tg_<name>_at for each attribute-free unary math row of ops.def, and for
 * each binary math row tg_<name>_at(a, b) and tg_<name>_s_at(a, s) */
#define TG_UNARY_MATH_ATTR(...)
#define TG_UNARY_MATH(OP, name, flags, save, fwd, bwd, i32) \
    tg_tensor tg_##name##_at(tg_tensor x, const char *file, int line) { return unary(TG_OP_##OP, #name, x, file, line); }
#define TG_BINARY_MATH(OP, name, flags, fwd, da, db, i32)                                                     \
    tg_tensor tg_##name##_at(tg_tensor a, tg_tensor b, const char *file, int line) {                           \
        return binary(TG_OP_##OP, #name, a, b, file, line);                                                    \
    }                                                                                                          \
    tg_tensor tg_##name##_s_at(tg_tensor a, float s, const char *file, int line) {                            \
        return binary(TG_OP_##OP, #name "_s", a, tg_api_scalar_like(a, s, file, line), file, line);            \
    }
#include "../ir/ops.def"

tg_tensor tg_leaky_relu_at(tg_tensor x, float alpha, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_LEAKY_RELU, "leaky_relu", file, line);
    n.in[0] = x.id;
    n.at.unary.p0 = alpha;
    return add_node(x.g, &n);
}

tg_tensor tg_stop_gradient_at(tg_tensor x, const char *file, int line) {
    return unary(TG_OP_STOP_GRADIENT, "stop_gradient", x, file, line);
}

/* ---- softmax, argmax, argmin ---- */

tg_tensor tg_softmax_at(tg_tensor x, int axis, const char *file, int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    int a;
    if (!norm_axis(x.g, TG_OP_SOFTMAX, "softmax", file, line, axis, s.ndim, s, &a)) return (tg_tensor){x.g, -1};
    tg_node n = tg_ir_proto(TG_OP_SOFTMAX, "softmax", file, line);
    n.in[0] = x.id;
    n.at.axis.axis = a;
    return add_node(x.g, &n);
}

static tg_tensor arg(tg_opcode op, const char *api, tg_tensor x, int axis, bool keep, const char *file, int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    if (axis == TG_ALL) { /* over every element: of the flattened tensor */
        tg_tensor r = arg(op, api, (tg_tensor){x.g, tg_ir_reshape(x.g, x.id, (tg_shape){1, {tg_shape_numel(s)}}, file, line)},
                          0, false, file, line);
        tg_shape k = s;
        for (int i = 0; i < k.ndim; i++) k.d[i] = 1;
        return keep && live(r) ? (tg_tensor){x.g, tg_ir_reshape(x.g, r.id, k, file, line)} : r;
    }
    int a;
    if (!norm_axis(x.g, op, api, file, line, axis, s.ndim, s, &a)) return (tg_tensor){x.g, -1};
    tg_node n = tg_ir_proto(op, api, file, line);
    n.in[0] = x.id;
    n.at.axis.axis = a;
    tg_tensor r = add_node(x.g, &n);
    if (keep || !live(r)) return r;
    tg_shape d = {0, {0}};
    for (int i = 0; i < s.ndim; i++)
        if (i != a) d.d[d.ndim++] = s.d[i];
    return (tg_tensor){x.g, tg_ir_reshape(x.g, r.id, d, file, line)};
}

tg_tensor tg_argmax_at(tg_tensor x, int axis, bool keepdims, const char *file, int line) {
    return arg(TG_OP_ARGMAX, "argmax", x, axis, keepdims, file, line);
}
tg_tensor tg_argmin_at(tg_tensor x, int axis, bool keepdims, const char *file, int line) {
    return arg(TG_OP_ARGMIN, "argmin", x, axis, keepdims, file, line);
}
tg_tensor tg_amax_at(tg_tensor x, int axis, bool keepdims, const char *file, int line) {
    return arg(TG_OP_AMAX, "amax", x, axis, keepdims, file, line);
}
tg_tensor tg_amin_at(tg_tensor x, int axis, bool keepdims, const char *file, int line) {
    return arg(TG_OP_AMIN, "amin", x, axis, keepdims, file, line);
}

/* ---- ops over a chosen axis: the axis moved last, the op, and back ---- */

/* The permutation of rank nd that moves axis a last (back: its inverse). */
static tg_shape move_last(int a, int nd, bool back) {
    tg_shape p = {nd, {0}};
    for (int i = 0, k = 0; i < nd; i++)
        if (i != a) p.d[k++] = i;
    p.d[nd - 1] = a;
    if (!back) return p;
    tg_shape inv = {nd, {0}};
    for (int i = 0; i < nd; i++) inv.d[p.d[i]] = i;
    return inv;
}

tg_tensor tg_categorical_axis_at(tg_tensor logits, int axis, const char *file, int line) {
    if (!live(logits)) return (tg_tensor){logits.g, -1};
    tg_shape s = shape_of(logits);
    int a;
    if (!norm_axis(logits.g, TG_OP_CATEGORICAL, "categorical_axis", file, line, axis, s.ndim, s, &a))
        return (tg_tensor){logits.g, -1};
    if (a == s.ndim - 1) return tg_categorical_at(logits, file, line);
    return tg_categorical_at(tg_permute_at(logits, move_last(a, s.ndim, false), file, line), file, line);
}

tg_tensor tg_softmax_causal_axis_at(tg_tensor x, int axis, const char *file, int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    int a;
    if (!norm_axis(x.g, TG_OP_SOFTMAX_CAUSAL, "softmax_causal_axis", file, line, axis, s.ndim, s, &a))
        return (tg_tensor){x.g, -1};
    if (a == s.ndim - 1) return tg_softmax_causal_at(x, file, line);
    tg_tensor y = tg_softmax_causal_at(tg_permute_at(x, move_last(a, s.ndim, false), file, line), file, line);
    return tg_permute_at(y, move_last(a, s.ndim, true), file, line);
}

/* ---- constants ---- */

static tg_tensor filled(tg_graph *g, tg_shape s, float v, tg_dtype dt, const char *api, const char *file, int line) {
    if (!g) return BAD;
    if (s.ndim < 0 || s.ndim > TG_MAX_DIMS) return fail(g, TG_OP_CONST, api, file, line, "bad number of dims");
    if ((unsigned)dt > TG_BOOL) return fail(g, TG_OP_CONST, api, file, line, "unknown dtype");
    tg_node n = tg_ir_proto(TG_OP_CONST, api, file, line);
    n.dtype = dt;
    n.shape = s;
    n.at.fill.value = v;
    return add_node(g, &n);
}

tg_tensor tg_zeros_at(tg_graph *g, tg_shape s, const char *file, int line) {
    return filled(g, s, 0.0f, TG_F32, "zeros", file, line);
}
tg_tensor tg_ones_at(tg_graph *g, tg_shape s, const char *file, int line) {
    return filled(g, s, 1.0f, TG_F32, "ones", file, line);
}
tg_tensor tg_zeros_dt_at(tg_graph *g, tg_shape s, tg_dtype dt, const char *file, int line) {
    return filled(g, s, 0.0f, dt, "zeros_dt", file, line);
}
tg_tensor tg_ones_dt_at(tg_graph *g, tg_shape s, tg_dtype dt, const char *file, int line) {
    return filled(g, s, 1.0f, dt, "ones_dt", file, line);
}

/* one_hot in f32, then cast: the cast is a cheap map a backend computes where it is read */
tg_tensor tg_one_hot_dt_at(tg_tensor idx, int64_t depth, tg_dtype dt, const char *file, int line) {
    if (!idx.g) return BAD;
    if ((unsigned)dt > TG_BOOL) return fail(idx.g, TG_OP_ONE_HOT, "one_hot_dt", file, line, "unknown dtype");
    tg_tensor y = tg_one_hot_at(idx, depth, file, line);
    return dt == TG_F32 ? y : tg_cast_at(y, dt, file, line);
}

/* ---- layout: swap_axes, narrow, concat, stack, split ---- */

tg_tensor tg_swap_axes_at(tg_tensor x, int a, int b, const char *file, int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    int i, j;
    if (!norm_axis(x.g, TG_OP_PERMUTE, "swap_axes", file, line, a, s.ndim, s, &i) ||
        !norm_axis(x.g, TG_OP_PERMUTE, "swap_axes", file, line, b, s.ndim, s, &j))
        return (tg_tensor){x.g, -1};
    if (i == j) return x;
    tg_node n = tg_ir_proto(TG_OP_PERMUTE, "swap_axes", file, line);
    n.in[0] = x.id;
    n.at.permute.perm.ndim = s.ndim;
    for (int k = 0; k < s.ndim; k++) n.at.permute.perm.d[k] = k;
    n.at.permute.perm.d[i] = j;
    n.at.permute.perm.d[j] = i;
    return add_node(x.g, &n);
}

static tg_tensor narrow(tg_tensor x, int axis, int64_t start, int64_t length, const char *api, const char *file,
                        int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    int a;
    if (!norm_axis(x.g, TG_OP_NARROW, api, file, line, axis, s.ndim, s, &a)) return (tg_tensor){x.g, -1};
    if (start < 0) start += s.d[a];
    if (start == 0 && length == s.d[a]) return x;
    tg_node n = tg_ir_proto(TG_OP_NARROW, api, file, line);
    n.in[0] = x.id;
    n.at.axis.axis = a;
    n.at.axis.start = start;
    n.at.axis.len = length;
    return add_node(x.g, &n);
}

tg_tensor tg_narrow_at(tg_tensor x, int axis, int64_t start, int64_t length, const char *file, int line) {
    return narrow(x, axis, start, length, "narrow", file, line);
}

/* One concat node takes up to TG_MAX_IN inputs; a longer list is joined in
 * TG_MAX_IN groups, recursively, and the groups joined again. */
static tg_tensor concat(const tg_tensor *xs, int n, int axis, const char *api, const char *file, int line) {
    tg_graph *g = xs[0].g;
    for (int k = 0; k < n; k++) {
        if (!xs[k].g) return (tg_tensor){g, -1};
        if (xs[k].g != g) return fail(g, TG_OP_CONCAT, api, file, line, "inputs come from different graphs");
        if (!live(xs[k])) return (tg_tensor){g, -1};
    }
    if (n == 1) return xs[0];
    tg_shape s = shape_of(xs[0]);
    int a;
    if (!norm_axis(g, TG_OP_CONCAT, api, file, line, axis, s.ndim, s, &a)) return (tg_tensor){g, -1};
    if (n > TG_MAX_IN) {
        tg_tensor part[TG_MAX_IN];
        for (int p = 0, at = 0; p < TG_MAX_IN; p++) {
            int cnt = n / TG_MAX_IN + (p < n % TG_MAX_IN);
            part[p] = concat(xs + at, cnt, a, api, file, line);
            if (!live(part[p])) return (tg_tensor){g, -1};
            at += cnt;
        }
        return concat(part, TG_MAX_IN, a, api, file, line);
    }
    tg_node nd = tg_ir_proto(TG_OP_CONCAT, api, file, line);
    nd.nin = n;
    nd.at.axis.axis = a;
    for (int k = 0; k < n; k++) nd.in[k] = xs[k].id;
    return add_node(g, &nd);
}

tg_tensor tg_concat_at(const tg_tensor *xs, int n, int axis, const char *file, int line) {
    if (!xs || n <= 0) return BAD;
    return concat(xs, n, axis, "concat", file, line);
}

tg_tensor tg_stack_at(const tg_tensor *xs, int n, int axis, const char *file, int line) {
    if (!xs || n <= 0 || !xs[0].g) return BAD;
    tg_graph *g = xs[0].g;
    for (int k = 0; k < n; k++)
        if (!live(xs[k])) return (tg_tensor){g, -1};
    tg_shape s = shape_of(xs[0]);
    char b0[96], bk[96];
    for (int k = 1; k < n; k++) {
        if (xs[k].g != g) return fail(g, TG_OP_CONCAT, "stack", file, line, "inputs come from different graphs");
        if (!tg_shape_eq(shape_of(xs[k]), s)) {
            tg_node e = tg_ir_proto(TG_OP_CONCAT, "stack", file, line);
            tg_ir_fail(g, &e, "input %d has shape %s, input 0 has %s", k, tg_shape_str(shape_of(xs[k]), bk, sizeof bk),
                    tg_shape_str(s, b0, sizeof b0));
            return (tg_tensor){g, -1};
        }
    }
    if (s.ndim >= TG_MAX_DIMS) return fail(g, TG_OP_CONCAT, "stack", file, line, "the result would have too many dims");
    int a;
    if (!norm_axis(g, TG_OP_CONCAT, "stack", file, line, axis, s.ndim + 1, s, &a)) return (tg_tensor){g, -1};
    tg_shape e = {s.ndim + 1, {0}};
    for (int i = 0, j = 0; i < e.ndim; i++) e.d[i] = i == a ? 1 : s.d[j++];
    tg_tensor stackbuf[16], *ys = n <= 16 ? stackbuf : tg_calloc((size_t)n, sizeof(tg_tensor));
    if (!ys) return fail(g, TG_OP_CONCAT, "stack", file, line, "out of memory");
    for (int k = 0; k < n; k++) ys[k] = (tg_tensor){g, tg_ir_reshape(g, xs[k].id, e, file, line)};
    tg_tensor r = concat(ys, n, a, "stack", file, line);
    if (ys != stackbuf) free(ys);
    return r;
}

void tg_split_at(tg_tensor x, int axis, const int64_t *sizes, int n, tg_tensor *out, const char *file, int line) {
    if (!out || n <= 0) {
        /* No piece comes back to carry the error on: the graph must fail. */
        tg_node e = tg_ir_proto(TG_OP_NARROW, "split", file, line);
        if (!out && x.g) tg_ir_fail_status(x.g, TG_ERR_ARG, &e, "out is NULL");
        else if (x.g) tg_ir_fail_status(x.g, TG_ERR_ARG, &e, "n is %d, want at least 1 piece", n);
        return;
    }
    for (int k = 0; k < n; k++) out[k] = (tg_tensor){x.g, -1};
    if (!live(x)) return;
    tg_shape s = shape_of(x);
    int a;
    if (!sizes) {
        fail(x.g, TG_OP_NARROW, "split", file, line, "sizes is NULL");
        return;
    }
    if (!norm_axis(x.g, TG_OP_NARROW, "split", file, line, axis, s.ndim, s, &a)) return;
    int64_t total = 0;
    bool neg = false, over = false;
    for (int k = 0; k < n; k++) {
        neg |= sizes[k] < 0;
        if (!neg && !over) over = __builtin_add_overflow(total, sizes[k], &total);
    }
    if (neg || over || total != s.d[a]) {
        tg_node e = tg_ir_proto(TG_OP_NARROW, "split", file, line);
        char b[96], t[48];
        if (neg) snprintf(t, sizeof t, "include a negative one");
        else if (over) snprintf(t, sizeof t, "sum past 2^63");
        else snprintf(t, sizeof t, "sum to %lld", (long long)total);
        tg_ir_fail(x.g, &e, "sizes %s, but axis %d of %s has %lld", t, a, tg_shape_str(s, b, sizeof b), (long long)s.d[a]);
        return;
    }
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        out[k] = narrow(x, a, at, sizes[k], "split", file, line);
        at += sizes[k];
    }
}

/* ---- gathering ---- */

tg_tensor tg_take_along_axis_at(tg_tensor x, tg_tensor idx, int axis, const char *file, int line) {
    if (!x.g || !idx.g) return (tg_tensor){x.g ? x.g : idx.g, -1};
    if (x.g != idx.g) return fail(x.g, TG_OP_TAKE_ALONG_AXIS, "take_along_axis", file, line,
                                  "operands come from different graphs");
    if (!live(x) || !live(idx)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    int a;
    if (!norm_axis(x.g, TG_OP_TAKE_ALONG_AXIS, "take_along_axis", file, line, axis, s.ndim, s, &a))
        return (tg_tensor){x.g, -1};
    tg_node n = tg_ir_proto(TG_OP_TAKE_ALONG_AXIS, "take_along_axis", file, line);
    n.in[0] = x.id;
    n.in[1] = idx.id;
    n.at.axis.axis = a;
    return add_node(x.g, &n);
}

/* ---- scans, selection, padding ---- */

tg_tensor tg_cumsum_at(tg_tensor x, int axis, const char *file, int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    int a;
    if (!norm_axis(x.g, TG_OP_CUMSUM, "cumsum", file, line, axis, s.ndim, s, &a)) return (tg_tensor){x.g, -1};
    tg_node n = tg_ir_proto(TG_OP_CUMSUM, "cumsum", file, line);
    n.in[0] = x.id;
    n.at.scan.axis = a;
    return add_node(x.g, &n);
}

/* m + log(sum(exp(x - m))), m the max held constant; an infinite or NaN max
 * is replaced by 0, so a line of -inf gives -inf (not inf - inf) and one
 * holding +inf gives +inf, as torch.logsumexp. */
tg_tensor tg_logsumexp_at(tg_tensor x, int axis, bool keepdims, const char *file, int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    if (x.g->nodes[x.id].dtype != TG_F32) return fail(x.g, TG_OP_SUM, "logsumexp", file, line, "operand must be f32");
    int a = TG_ALL;
    if (axis != TG_ALL && !norm_axis(x.g, TG_OP_SUM, "logsumexp", file, line, axis, s.ndim, s, &a))
        return (tg_tensor){x.g, -1};
    tg_tensor m = tg_stop_gradient_at(tg_amax_at(x, a, true, file, line), file, line);
    tg_tensor finite = tg_less_s_at(tg_abs_at(m, file, line), INFINITY, file, line);
    m = tg_where_at(finite, m, tg_scalar_at(x.g, 0.0f, file, line), file, line);
    tg_tensor e = tg_exp_at(tg_sub_at(x, m, file, line), file, line);
    tg_tensor r = tg_add_at(tg_log_at(tg_sum_at(e, a, true, file, line), file, line), m, file, line);
    if (keepdims || !live(r)) return r;
    tg_shape d = {0, {0}};
    for (int i = 0; a != TG_ALL && i < s.ndim; i++)
        if (i != a) d.d[d.ndim++] = s.d[i];
    return tg_reshape_at(r, d, file, line);
}

/* The indices (a topk node), then the values gathered with take_along_axis,
 * whose gradient scatters gy back to the chosen entries. */
tg_tensor tg_topk_at(tg_tensor x, int64_t k, int axis, bool largest, tg_tensor *indices, const char *file, int line) {
    if (indices) *indices = (tg_tensor){x.g, -1};
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    int a;
    if (!norm_axis(x.g, TG_OP_TOPK, "topk", file, line, axis, s.ndim, s, &a)) return (tg_tensor){x.g, -1};
    tg_node n = tg_ir_proto(TG_OP_TOPK, "topk", file, line);
    n.in[0] = x.id;
    n.at.topk.axis = a;
    n.at.topk.k = k;
    n.at.topk.largest = largest;
    tg_tensor idx = add_node(x.g, &n);
    if (indices) *indices = idx;
    return tg_take_along_axis_at(x, idx, a, file, line);
}

/* One pad node per padded axis, the first axis first. */
tg_tensor tg_pad_at(tg_tensor x, tg_shape before, tg_shape after, tg_pad_mode mode, float value, const char *file,
                    int line) {
    if (!live(x)) return (tg_tensor){x.g, -1};
    tg_shape s = shape_of(x);
    if (before.ndim != s.ndim || after.ndim != s.ndim) {
        tg_node e = tg_ir_proto(TG_OP_PAD, "pad", file, line);
        char b[96], p[96], q[96];
        tg_ir_fail(x.g, &e, "before %s and after %s must each give one padding per axis of %s",
                   tg_shape_str(before, p, sizeof p), tg_shape_str(after, q, sizeof q), tg_shape_str(s, b, sizeof b));
        return (tg_tensor){x.g, -1};
    }
    tg_tensor y = x;
    for (int a = 0; a < s.ndim && live(y); a++) {
        if (before.d[a] == 0 && after.d[a] == 0 && (unsigned)mode <= TG_PAD_REPLICATE) continue;
        tg_node n = tg_ir_proto(TG_OP_PAD, "pad", file, line);
        n.in[0] = y.id;
        n.at.pad.axis = a;
        n.at.pad.before = before.d[a];
        n.at.pad.after = after.d[a];
        n.at.pad.mode = (int)mode;
        n.at.pad.value = value;
        y = add_node(x.g, &n);
    }
    return y;
}
