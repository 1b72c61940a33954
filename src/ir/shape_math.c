/* Shape rules of the math and shape ops. Axes arrive already
 * made non-negative by the builders; every rule still checks its range, so
 * a node built some other way cannot index out of bounds. */
#include <math.h>
#include <string.h>

#include "ir.h"
#include "shape.h"

#define IN(k) (&g->nodes[n->in[k]])
#define S(t, buf) tg_shape_str((t), buf, sizeof buf)

static bool axis_ok(tg_graph *g, tg_node *n, tg_shape s, int64_t axis) {
    if (axis >= 0 && axis < s.ndim) return true;
    char b[96];
    tg_ir_fail(g, n, "axis %lld out of range for %s", (long long)axis, S(s, b));
    return false;
}

/* abs, square, clamp: f32, or i32 (forward only) */
bool tg_shape_unary_num(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    if (x->dtype != TG_F32 && x->dtype != TG_I32) {
        tg_ir_fail(g, n, "operand is %s, expected f32 or i32", tg_dtype_name(x->dtype));
        return false;
    }
    n->shape = x->shape;
    n->dtype = x->dtype;
    return true;
}

/* The unary math rows of ops.def: f32, or i32 for those with an i32 form */
bool tg_shape_unary_math(tg_graph *g, tg_node *n) {
    return (tg_ops[n->op].flags & TG_OPF_I32) ? tg_shape_unary_num(g, n) : tg_shape_unary_f32(g, n);
}

/* The binary math rows: a and b broadcast (NumPy), both f32, or both i32
 * for those with an i32 form; the result in their dtype. */
bool tg_shape_binary_math(tg_graph *g, tg_node *n) {
    const tg_node *a = IN(0), *b = IN(1);
    bool i32 = (tg_ops[n->op].flags & TG_OPF_I32) && a->dtype == TG_I32;
    char sa[96], sb[96];
    if (a->dtype != b->dtype || (a->dtype != TG_F32 && !i32)) {
        tg_ir_fail(g, n, "operands must both be f32%s, got %s %s and %s %s",
                   (tg_ops[n->op].flags & TG_OPF_I32) ? " or both i32" : "", tg_dtype_name(a->dtype), S(a->shape, sa),
                   tg_dtype_name(b->dtype), S(b->shape, sb));
        return false;
    }
    if (!tg_shape_broadcast(a->shape, b->shape, &n->shape)) {
        tg_ir_fail(g, n, "cannot broadcast %s and %s", S(a->shape, sa), S(b->shape, sb));
        return false;
    }
    n->dtype = a->dtype;
    return true;
}

static int32_t sat_i32(double v) { return v <= -2147483648.0 ? INT32_MIN : v >= 2147483647.0 ? INT32_MAX : (int32_t)v; }
void tg_attr_unary_int_range(const tg_attr_unary *u, int32_t *i0, int32_t *i1) {
    *i0 = sat_i32(ceil(u->p0));
    *i1 = sat_i32(floor(u->p1));
}

/* stop_gradient: the input as it is, any dtype */
bool tg_shape_identity(tg_graph *g, tg_node *n) {
    (void)g;
    n->shape = IN(0)->shape;
    n->dtype = IN(0)->dtype;
    return true;
}

/* argmax / argmin over the axis: f32 or i32 in, i32 out, the axis kept as 1;
 * amax / amin: the same with the input's dtype out */
bool tg_shape_arg(tg_graph *g, tg_node *n) {
    const int64_t ax = n->at.axis.axis;
    const tg_node *x = IN(0);
    char b[96];
    if (x->dtype != TG_F32 && x->dtype != TG_I32) {
        tg_ir_fail(g, n, "operand is %s, expected f32 or i32", tg_dtype_name(x->dtype));
        return false;
    }
    if (!axis_ok(g, n, x->shape, ax)) return false;
    if (x->shape.d[ax] == 0) {
        tg_ir_fail(g, n, "axis %lld of %s is empty", (long long)ax, S(x->shape, b));
        return false;
    }
    n->shape = x->shape;
    n->shape.d[ax] = 1;
    n->dtype = n->op == TG_OP_AMAX || n->op == TG_OP_AMIN ? x->dtype : TG_I32;
    return true;
}

/* narrow: [start, start + len) of the axis */
bool tg_shape_narrow(tg_graph *g, tg_node *n) {
    const int64_t ax = n->at.axis.axis, start = n->at.axis.start, len = n->at.axis.len;
    const tg_node *x = IN(0);
    char b[96];
    if (!axis_ok(g, n, x->shape, ax)) return false;
    int64_t dim = x->shape.d[ax];
    if (start < 0 || len < 0 || start > dim || len > dim - start) {
        int64_t end;
        if (__builtin_add_overflow(start, len, &end)) end = INT64_MAX;
        tg_ir_fail(g, n, "range [%lld, %lld) is outside axis %lld of %s (size %lld)", (long long)start,
                (long long)end, (long long)ax, S(x->shape, b), (long long)dim);
        return false;
    }
    n->shape = x->shape;
    n->shape.d[ax] = len;
    n->dtype = x->dtype;
    return true;
}

/* narrow_grad: gy placed at [start, start + len) of the axis of the
 * builder-given shape, zeros elsewhere */
bool tg_shape_narrow_grad(tg_graph *g, tg_node *n) {
    const int64_t ax = n->at.axis.axis, start = n->at.axis.start;
    const tg_node *gy = IN(0);
    tg_shape t = n->shape;
    char a[96], b[96];
    bool ok = t.ndim == gy->shape.ndim && ax >= 0 && ax < t.ndim && start >= 0;
    for (int i = 0; ok && i < t.ndim; i++)
        ok = i == ax ? start + gy->shape.d[i] <= t.d[i] : gy->shape.d[i] == t.d[i];
    if (!ok) {
        tg_ir_fail(g, n, "cannot place %s at %lld along axis %lld of %s", S(gy->shape, a), (long long)start,
                (long long)ax, S(t, b));
        return false;
    }
    n->dtype = gy->dtype;
    return true;
}

/* concat along the axis: nin inputs of one dtype and rank, equal but on the axis */
bool tg_shape_concat(tg_graph *g, tg_node *n) {
    const int64_t ax = n->at.axis.axis;
    const tg_node *x0 = IN(0);
    char a[96], b[96];
    if (!axis_ok(g, n, x0->shape, ax)) return false;
    n->shape = x0->shape;
    n->dtype = x0->dtype;
    for (int k = 1; k < n->nin; k++) {
        const tg_node *xk = IN(k);
        if (xk->dtype != x0->dtype) {
            tg_ir_fail(g, n, "inputs differ in dtype, %s and %s", tg_dtype_name(x0->dtype), tg_dtype_name(xk->dtype));
            return false;
        }
        bool ok = xk->shape.ndim == x0->shape.ndim;
        for (int i = 0; ok && i < x0->shape.ndim; i++) ok = i == ax || xk->shape.d[i] == x0->shape.d[i];
        if (!ok) {
            tg_ir_fail(g, n, "shapes %s and %s differ outside axis %lld", S(x0->shape, a), S(xk->shape, b),
                    (long long)ax);
            return false;
        }
        n->shape.d[ax] += xk->shape.d[ax];
    }
    return true;
}

/* take_along_axis(x, idx i32, axis): same rank, equal but on the
 * axis; the result has idx's shape and x's dtype */
bool tg_shape_take_along_axis(tg_graph *g, tg_node *n) {
    const int64_t ax = n->at.axis.axis;
    const tg_node *x = IN(0), *ix = IN(1);
    char a[96], b[96];
    if (x->dtype != TG_F32 && x->dtype != TG_I32) {
        tg_ir_fail(g, n, "values are %s, expected f32 or i32", tg_dtype_name(x->dtype));
        return false;
    }
    if (ix->dtype != TG_I32) {
        tg_ir_fail(g, n, "indices are %s, expected i32", tg_dtype_name(ix->dtype));
        return false;
    }
    if (!axis_ok(g, n, x->shape, ax)) return false;
    bool ok = ix->shape.ndim == x->shape.ndim;
    for (int i = 0; ok && i < x->shape.ndim; i++) ok = i == ax || ix->shape.d[i] == x->shape.d[i];
    if (!ok) {
        tg_ir_fail(g, n, "indices %s must match values %s on every axis but %lld", S(ix->shape, a), S(x->shape, b),
                (long long)ax);
        return false;
    }
    n->shape = ix->shape;
    n->dtype = x->dtype;
    return true;
}

/* take_along_axis_grad(gy, idx): scatter-add into the builder-given shape */
bool tg_shape_take_along_axis_grad(tg_graph *g, tg_node *n) {
    const int64_t ax = n->at.axis.axis;
    const tg_node *gy = IN(0), *ix = IN(1);
    tg_shape t = n->shape;
    char a[96], b[96];
    bool ok = gy->dtype == TG_F32 && ix->dtype == TG_I32 && tg_shape_eq(gy->shape, ix->shape) &&
              t.ndim == ix->shape.ndim && ax >= 0 && ax < t.ndim;
    for (int i = 0; ok && i < t.ndim; i++) ok = i == ax || ix->shape.d[i] == t.d[i];
    if (!ok) {
        tg_ir_fail(g, n, "cannot scatter %s into %s along axis %lld", S(gy->shape, a), S(t, b), (long long)ax);
        return false;
    }
    n->dtype = TG_F32;
    return true;
}

/* minmax_grad(a, b, gy), binary_grad(a, b, gy): gy's shape, which a and b
 * broadcast to */
bool tg_shape_side_grad(tg_graph *g, tg_node *n) {
    const tg_node *a = IN(0), *b = IN(1), *gy = IN(2);
    tg_shape ab;
    char sa[96], sb[96], sg[96];
    if (a->dtype != TG_F32 || b->dtype != TG_F32 || gy->dtype != TG_F32 || !tg_shape_broadcast(a->shape, b->shape, &ab) ||
        !tg_shape_eq(ab, gy->shape)) {
        tg_ir_fail(g, n, "operands %s and %s do not broadcast to the cotangent %s", S(a->shape, sa), S(b->shape, sb),
                S(gy->shape, sg));
        return false;
    }
    n->shape = gy->shape;
    n->dtype = TG_F32;
    return true;
}

/* cumsum: f32 or i32, the input's shape */
bool tg_shape_cumsum(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    if (!axis_ok(g, n, x->shape, n->at.scan.axis)) return false;
    return tg_shape_unary_num(g, n);
}

/* topk: f32 or i32 in, i32 indices out, k of the axis (1 <= k <= its size) */
bool tg_shape_topk(tg_graph *g, tg_node *n) {
    const int64_t ax = n->at.topk.axis, k = n->at.topk.k;
    const tg_node *x = IN(0);
    char b[96];
    if (x->dtype != TG_F32 && x->dtype != TG_I32) {
        tg_ir_fail(g, n, "operand is %s, expected f32 or i32", tg_dtype_name(x->dtype));
        return false;
    }
    if (!axis_ok(g, n, x->shape, ax)) return false;
    if (k < 1 || k > x->shape.d[ax]) {
        tg_ir_fail(g, n, "k = %lld is outside [1, %lld], the size of axis %lld of %s", (long long)k,
                   (long long)x->shape.d[ax], (long long)ax, S(x->shape, b));
        return false;
    }
    n->shape = x->shape;
    n->shape.d[ax] = k;
    n->dtype = TG_I32;
    return true;
}

/* The pad attributes against the axis size A they pad (pad) or restore (pad_grad). */
static bool pad_ok(tg_graph *g, tg_node *n, tg_shape s, int64_t A) {
    const int64_t ax = n->at.pad.axis, before = n->at.pad.before, after = n->at.pad.after;
    char b[96];
    if (before < 0 || after < 0 || n->at.pad.mode < TG_PAD_CONSTANT || n->at.pad.mode > TG_PAD_REPLICATE) {
        tg_ir_fail(g, n, "padding %lld before, %lld after (mode %d) along axis %lld of %s: padding must be >= 0 "
                   "and the mode one of tg_pad_mode", (long long)before, (long long)after, n->at.pad.mode,
                   (long long)ax, S(s, b));
        return false;
    }
    if (n->at.pad.mode == TG_PAD_REFLECT && (before >= A || after >= A)) {
        tg_ir_fail(g, n, "reflect padding %lld before, %lld after along axis %lld of %s: each must be smaller "
                   "than the axis (%lld)", (long long)before, (long long)after, (long long)ax, S(s, b), (long long)A);
        return false;
    }
    if (n->at.pad.mode == TG_PAD_REPLICATE && A == 0 && before + after > 0) {
        tg_ir_fail(g, n, "replicate padding along the empty axis %lld of %s", (long long)ax, S(s, b));
        return false;
    }
    return true;
}

/* pad: f32 or i32, the axis grown by before + after */
bool tg_shape_pad(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    const int64_t ax = n->at.pad.axis;
    char b[96];
    if (x->dtype != TG_F32 && x->dtype != TG_I32) {
        tg_ir_fail(g, n, "operand is %s, expected f32 or i32", tg_dtype_name(x->dtype));
        return false;
    }
    if (!axis_ok(g, n, x->shape, ax) || !pad_ok(g, n, x->shape, x->shape.d[ax])) return false;
    n->shape = x->shape;
    if (__builtin_add_overflow(x->shape.d[ax], n->at.pad.before, &n->shape.d[ax]) ||
        __builtin_add_overflow(n->shape.d[ax], n->at.pad.after, &n->shape.d[ax]) || !tg_ir_numel_ok(n->shape)) {
        tg_ir_fail_status(g, TG_ERR_LIMIT, n, "padding %s by %lld and %lld along axis %lld makes more than %lld "
                          "elements", S(x->shape, b), (long long)n->at.pad.before, (long long)n->at.pad.after,
                          (long long)ax, (long long)TG_MAX_NUMEL);
        return false;
    }
    n->dtype = x->dtype;
    return true;
}

/* pad_grad(gy): f32, the padded axis shrunk back by before + after */
bool tg_shape_pad_grad(tg_graph *g, tg_node *n) {
    const tg_node *gy = IN(0);
    const int64_t ax = n->at.pad.axis;
    char b[96];
    if (gy->dtype != TG_F32 || !axis_ok(g, n, gy->shape, ax)) {
        tg_ir_fail(g, n, "cotangent %s %s does not fit axis %lld", tg_dtype_name(gy->dtype), S(gy->shape, b),
                   (long long)ax);
        return false;
    }
    int64_t A = gy->shape.d[ax] - n->at.pad.before - n->at.pad.after;
    if (A < 0 || !pad_ok(g, n, gy->shape, A)) {
        if (A < 0) tg_ir_fail(g, n, "cotangent %s is shorter than its padding along axis %lld", S(gy->shape, b), (long long)ax);
        return false;
    }
    n->shape = gy->shape;
    n->shape.d[ax] = A;
    n->dtype = TG_F32;
    return true;
}
