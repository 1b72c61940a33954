/* Shape rules, one per op family: each fills n->shape / n->dtype from the
 * inputs and attributes, or records a message naming the shapes involved.
 * The builder's name and call site are added by tg_ir_fail. */
#include <string.h>

#include "ir.h"
#include "shape.h"

#define IN(k) (&g->nodes[n->in[k]])
#define S(t, buf) tg_shape_str((t), buf, sizeof buf)

/* Leaves keep the shape and dtype the builder put in the proto. */
bool tg_shape_leaf(tg_graph *g, tg_node *n) {
    (void)g;
    (void)n;
    return true;
}

bool tg_shape_arange(tg_graph *g, tg_node *n) {
    if (n->at.arange.len < 0) {
        tg_ir_fail(g, n, "length %lld is negative", (long long)n->at.arange.len);
        return false;
    }
    n->shape = (tg_shape){1, {n->at.arange.len}};
    return true;
}

static bool need_dtype(tg_graph *g, tg_node *n, int k, tg_dtype dt) {
    if (IN(k)->dtype == dt) return true;
    tg_ir_fail(g, n, "operand %d is %s, expected %s", k, tg_dtype_name(IN(k)->dtype), tg_dtype_name(dt));
    return false;
}

bool tg_shape_binary(tg_graph *g, tg_node *n) {
    const tg_node *a = IN(0), *b = IN(1);
    char sa[96], sb[96];
    if (a->dtype != b->dtype || a->dtype == TG_BOOL) {
        tg_ir_fail(g, n, "operands must both be f32 or both i32, got %s %s and %s %s",
                tg_dtype_name(a->dtype), S(a->shape, sa), tg_dtype_name(b->dtype), S(b->shape, sb));
        return false;
    }
    if (!tg_shape_broadcast(a->shape, b->shape, &n->shape)) {
        tg_ir_fail(g, n, "cannot broadcast %s and %s", S(a->shape, sa), S(b->shape, sb));
        return false;
    }
    n->dtype = (n->op == TG_OP_LESS || n->op == TG_OP_GREATER) ? TG_BOOL : a->dtype;
    return true;
}

bool tg_shape_unary_f32(tg_graph *g, tg_node *n) {
    if (!need_dtype(g, n, 0, TG_F32)) return false;
    n->shape = IN(0)->shape;
    n->dtype = TG_F32;
    return true;
}

/* Same shape as operand 0; every operand the same shape (backward helpers,
 * optimizer updates; the optimizer's hyperparameter vector is exempt). */
bool tg_shape_same(tg_graph *g, tg_node *n) {
    char s0[96], sk[96];
    int check = n->nin;
    if (n->op == TG_OP_ADAM_P || n->op == TG_OP_SGD_P || n->op == TG_OP_SGD_V) check = n->nin - 1;
    for (int k = 1; k < check; k++) {
        if (!tg_shape_eq(IN(k)->shape, IN(0)->shape)) {
            tg_ir_fail(g, n, "operand %d has shape %s, expected %s", k, S(IN(k)->shape, sk), S(IN(0)->shape, s0));
            return false;
        }
    }
    for (int k = 0; k < n->nin; k++)
        if (!need_dtype(g, n, k, TG_F32)) return false;
    n->shape = IN(0)->shape;
    n->dtype = TG_F32;
    return true;
}

bool tg_shape_cast(tg_graph *g, tg_node *n) {
    n->shape = IN(0)->shape;
    n->dtype = n->at.cast.to;
    (void)g;
    return true;
}

bool tg_shape_where(tg_graph *g, tg_node *n) {
    const tg_node *c = IN(0), *a = IN(1), *b = IN(2);
    char sc[96], sa[96], sb[96];
    if (c->dtype != TG_BOOL) {
        tg_ir_fail(g, n, "condition must be bool, got %s", tg_dtype_name(c->dtype));
        return false;
    }
    if (a->dtype != b->dtype) {
        tg_ir_fail(g, n, "branches differ in dtype, %s and %s", tg_dtype_name(a->dtype), tg_dtype_name(b->dtype));
        return false;
    }
    tg_shape ab;
    if (!tg_shape_broadcast(a->shape, b->shape, &ab) || !tg_shape_broadcast(c->shape, ab, &n->shape)) {
        tg_ir_fail(g, n, "cannot broadcast %s, %s and %s", S(c->shape, sc), S(a->shape, sa), S(b->shape, sb));
        return false;
    }
    n->dtype = a->dtype;
    return true;
}

bool tg_shape_sum(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    unsigned mask = n->at.sum.axes;
    if (x->dtype == TG_BOOL) {
        tg_ir_fail(g, n, "cannot reduce a bool tensor; cast it first");
        return false;
    }
    if (mask >> x->shape.ndim) {
        char s[96];
        tg_ir_fail(g, n, "axis out of range for %s", S(x->shape, s));
        return false;
    }
    n->shape = x->shape;
    for (int i = 0; i < x->shape.ndim; i++)
        if (mask & (1u << i)) n->shape.d[i] = 1;
    n->dtype = x->dtype;
    return true;
}

bool tg_shape_reshape(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    tg_shape s = n->shape;
    char sx[96], ss[96];
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < s.ndim; i++) {
        if (s.d[i] == -1) {
            if (infer >= 0) {
                tg_ir_fail(g, n, "more than one -1 in %s", S(s, ss));
                return false;
            }
            infer = i;
        } else if (s.d[i] < 0) {
            tg_ir_fail(g, n, "bad dimension in %s", S(s, ss));
            return false;
        } else if (__builtin_mul_overflow(known, s.d[i], &known)) {
            tg_ir_fail(g, n, "cannot reshape %s to %s", S(x->shape, sx), S(s, ss));
            return false;
        }
    }
    int64_t total = tg_ir_numel(x);
    if (infer >= 0) {
        if (known == 0 || total % known) {
            tg_ir_fail(g, n, "cannot reshape %s to %s", S(x->shape, sx), S(s, ss));
            return false;
        }
        s.d[infer] = total / known;
    }
    if (tg_shape_numel(s) != total) {
        tg_ir_fail(g, n, "cannot reshape %s (%lld elements) to %s", S(x->shape, sx), (long long)total, S(s, ss));
        return false;
    }
    n->shape = s;
    n->dtype = x->dtype;
    return true;
}

bool tg_shape_permute(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    int nd = x->shape.ndim;
    unsigned seen = 0;
    char sx[96];
    if (n->at.permute.perm.ndim != nd) {
        tg_ir_fail(g, n, "permutation has %d axes, tensor %s has %d", n->at.permute.perm.ndim, S(x->shape, sx), nd);
        return false;
    }
    for (int i = 0; i < nd; i++) {
        int64_t p = n->at.permute.perm.d[i];
        if (p < 0 || p >= nd || (seen & (1u << p))) {
            tg_ir_fail(g, n, "not a permutation of the %d axes of %s", nd, S(x->shape, sx));
            return false;
        }
        seen |= 1u << p;
        n->shape.d[i] = x->shape.d[p];
    }
    n->shape.ndim = nd;
    n->dtype = x->dtype;
    return true;
}

bool tg_shape_broadcast_to(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    tg_shape t = n->shape, r;
    char sx[96], st[96];
    if (x->shape.ndim > t.ndim || !tg_shape_broadcast(x->shape, t, &r) || !tg_shape_eq(r, t)) {
        tg_ir_fail(g, n, "cannot broadcast %s to %s", S(x->shape, sx), S(t, st));
        return false;
    }
    n->dtype = x->dtype;
    return true;
}

/* a [..., M, K] (or [..., K, M] with ta) x b [K, N] (or [N, K] with tb), b
 * either 2-d or with a's batch dims. */
bool tg_shape_matmul(tg_graph *g, tg_node *n) {
    const tg_node *a = IN(0), *b = IN(1);
    char sa[96], sb[96];
    bool ta = n->at.matmul.ta, tb = n->at.matmul.tb;
    if (a->dtype != TG_F32 || b->dtype != TG_F32) {
        tg_ir_fail(g, n, "operands must be f32, got %s and %s", tg_dtype_name(a->dtype), tg_dtype_name(b->dtype));
        return false;
    }
    if (a->shape.ndim < 2 || b->shape.ndim < 2) {
        tg_ir_fail(g, n, "operands need at least 2 dims, got %s x %s", S(a->shape, sa), S(b->shape, sb));
        return false;
    }
    int na = a->shape.ndim, nb = b->shape.ndim;
    int64_t M = a->shape.d[na - (ta ? 1 : 2)], K = a->shape.d[na - (ta ? 2 : 1)];
    int64_t Kb = b->shape.d[nb - (tb ? 1 : 2)], N = b->shape.d[nb - (tb ? 2 : 1)];
    if (K != Kb) {
        tg_ir_fail(g, n, "inner dims differ, %s%s x %s%s", S(a->shape, sa), ta ? "^T" : "", S(b->shape, sb),
                tb ? "^T" : "");
        return false;
    }
    if (nb > 2) {
        bool same = nb == na;
        for (int i = 0; same && i < na - 2; i++) same = a->shape.d[i] == b->shape.d[i];
        if (!same) {
            tg_ir_fail(g, n, "batch dims differ, %s x %s (b must be 2-d or share a's batch dims)", S(a->shape, sa),
                    S(b->shape, sb));
            return false;
        }
    }
    n->shape = a->shape;
    n->shape.d[na - 2] = M;
    n->shape.d[na - 1] = N;
    n->dtype = TG_F32;
    return true;
}

bool tg_shape_one_hot(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    int64_t depth = n->at.one_hot.depth;
    if (!need_dtype(g, n, 0, TG_I32)) return false;
    if (x->shape.ndim >= TG_MAX_DIMS || depth <= 0) {
        tg_ir_fail(g, n, "depth %lld must be > 0 and the result at most %d dims", (long long)depth, TG_MAX_DIMS);
        return false;
    }
    n->shape = x->shape;
    n->shape.d[n->shape.ndim++] = depth;
    n->dtype = TG_F32;
    return true;
}

/* Ops over one axis (already made non-negative by the builder). */
bool tg_shape_axis_f32(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    char sx[96];
    if (!need_dtype(g, n, 0, TG_F32)) return false;
    if (n->at.axis.axis < 0 || n->at.axis.axis >= x->shape.ndim) {
        tg_ir_fail(g, n, "axis %lld out of range for %s", (long long)n->at.axis.axis, S(x->shape, sx));
        return false;
    }
    if (n->nin > 1 && !tg_shape_eq(IN(1)->shape, x->shape)) return tg_shape_same(g, n);
    n->shape = x->shape;
    n->dtype = TG_F32;
    return true;
}

bool tg_shape_causal(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    char sx[96];
    if (!need_dtype(g, n, 0, TG_F32)) return false;
    if (x->shape.ndim < 2) {
        tg_ir_fail(g, n, "needs at least 2 dims [..., T, T], got %s", S(x->shape, sx));
        return false;
    }
    n->shape = x->shape;
    n->dtype = TG_F32;
    return true;
}
