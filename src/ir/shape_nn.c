/* Shape rules of the nn ops: losses, norms, embedding, rope and the
 * random ops, with their backward helpers. Messages name the operands and
 * their shapes; tg_ir_fail adds the builder's name and call site. */
#include <math.h>
#include <string.h>

#include "ir.h"
#include "shape.h"

#define IN(k) (&g->nodes[n->in[k]])
#define S(t, buf) tg_shape_str((t), buf, sizeof buf)

static bool need(tg_graph *g, tg_node *n, int k, const char *what, tg_dtype dt) {
    if (IN(k)->dtype == dt) return true;
    char s[96];
    tg_ir_fail(g, n, "%s must be %s, got %s %s", what, tg_dtype_name(dt), tg_dtype_name(IN(k)->dtype),
            S(IN(k)->shape, s));
    return false;
}

/* x's shape without its last axis. */
static tg_shape lead_of(tg_shape x) {
    tg_shape s = x;
    s.ndim = x.ndim > 0 ? x.ndim - 1 : 0;
    return s;
}

static bool need_seed(tg_graph *g, tg_node *n, int k) {
    const tg_node *s = IN(k);
    if (s->dtype == TG_I32 && s->shape.ndim == 1 && s->shape.d[0] == 2) return true;
    tg_ir_fail(g, n, "operand %d must be the i32 [2] seed leaf", k);
    return false;
}

/* logits / log-probabilities [..., V] and targets i32 [...] -> f32 [...] */
bool tg_shape_xent(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0), *t = IN(1);
    const char *what = n->op == TG_OP_CROSS_ENTROPY ? "logits" : "log-probabilities";
    char sx[96], st[96];
    if (!need(g, n, 0, what, TG_F32) || !need(g, n, 1, "targets", TG_I32)) return false;
    if (x->shape.ndim < 1 || x->shape.d[x->shape.ndim - 1] < 1) {
        tg_ir_fail(g, n, "%s %s need a non-empty last (class) axis", what, S(x->shape, sx));
        return false;
    }
    if (!tg_shape_eq(lead_of(x->shape), t->shape)) {
        tg_ir_fail(g, n, "targets %s must have the shape of %s %s without the class axis", S(t->shape, st), what,
                S(x->shape, sx));
        return false;
    }
    n->shape = t->shape;
    n->dtype = TG_F32;
    return true;
}

/* cross_entropy_grad (logits, targets, gy) -> logits' shape;
 * nll_loss_grad (targets, gy) -> [..., V] */
bool tg_shape_xent_grad(tg_graph *g, tg_node *n) {
    char s0[96], s1[96];
    int t = n->op == TG_OP_CROSS_ENTROPY_GRAD ? 1 : 0;
    if (!need(g, n, t, "targets", TG_I32) || !need(g, n, t + 1, "the cotangent", TG_F32)) return false;
    if (!tg_shape_eq(IN(t)->shape, IN(t + 1)->shape)) {
        tg_ir_fail(g, n, "cotangent %s does not match targets %s", S(IN(t + 1)->shape, s1), S(IN(t)->shape, s0));
        return false;
    }
    if (n->op == TG_OP_CROSS_ENTROPY_GRAD) {
        if (!need(g, n, 0, "logits", TG_F32)) return false;
        if (IN(0)->shape.ndim < 1 || !tg_shape_eq(lead_of(IN(0)->shape), IN(1)->shape)) {
            tg_ir_fail(g, n, "targets %s do not fit logits %s", S(IN(1)->shape, s1), S(IN(0)->shape, s0));
            return false;
        }
        n->shape = IN(0)->shape;
    } else {
        if (IN(0)->shape.ndim >= TG_MAX_DIMS || n->at.classes.v < 1) {
            tg_ir_fail(g, n, "bad class count %lld for targets %s", (long long)n->at.classes.v, S(IN(0)->shape, s0));
            return false;
        }
        n->shape = IN(0)->shape;
        n->shape.d[n->shape.ndim++] = n->at.classes.v;
    }
    n->dtype = TG_F32;
    return true;
}

/* layer_norm (x [..., D], g [D], b [D]) and rms_norm (x, g) -> x's shape */
bool tg_shape_norm(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    char sx[96], sp[96];
    if (!need(g, n, 0, "x", TG_F32)) return false;
    if (x->shape.ndim < 1 || x->shape.d[x->shape.ndim - 1] < 1) {
        tg_ir_fail(g, n, "x %s needs a non-empty last axis to normalize over", S(x->shape, sx));
        return false;
    }
    int64_t D = x->shape.d[x->shape.ndim - 1];
    for (int k = 1; k < n->nin; k++) {
        const char *what = k == 1 ? "gain" : "bias";
        if (!need(g, n, k, what, TG_F32)) return false;
        if (IN(k)->shape.ndim != 1 || IN(k)->shape.d[0] != D) {
            tg_ir_fail(g, n, "%s %s must be [%lld] for x %s", what, S(IN(k)->shape, sp), (long long)D, S(x->shape, sx));
            return false;
        }
    }
    if (!(n->at.norm.eps >= 0.0f) || !isfinite(n->at.norm.eps)) {
        tg_ir_fail(g, n, "eps %g must be finite and >= 0", (double)n->at.norm.eps);
        return false;
    }
    n->shape = x->shape;
    n->dtype = TG_F32;
    return true;
}

/* Backward helpers of the norms, built by tg_grad_norm only:
 *   norm_stats (x [..., D]) -> [..., 2]
 *   norm_dx (x, g, gy, stats) -> x's shape
 *   norm_dgain (x, gy, stats) -> [D] */
bool tg_shape_norm_grad(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    char sx[96], so[96], ss[96];
    for (int k = 0; k < n->nin; k++)
        if (!need(g, n, k, "operand", TG_F32)) return false;
    if (x->shape.ndim < 1) {
        tg_ir_fail(g, n, "x %s has no axis to normalize over", S(x->shape, sx));
        return false;
    }
    tg_shape stats = x->shape;
    stats.d[stats.ndim - 1] = 2;
    if (n->op != TG_OP_NORM_STATS) {
        int gy = n->op == TG_OP_NORM_DX ? 2 : 1, st = gy + 1;
        if (!tg_shape_eq(IN(gy)->shape, x->shape) || !tg_shape_eq(IN(st)->shape, stats)) {
            tg_ir_fail(g, n, "cotangent %s or stats %s do not fit x %s", S(IN(gy)->shape, so), S(IN(st)->shape, ss),
                    S(x->shape, sx));
            return false;
        }
    }
    switch (n->op) {
    case TG_OP_NORM_STATS: n->shape = stats; break;
    case TG_OP_NORM_DX: n->shape = x->shape; break;
    default: n->shape = (tg_shape){1, {x->shape.d[x->shape.ndim - 1]}}; break;
    }
    n->dtype = TG_F32;
    return true;
}

/* embedding (table [V, D], idx i32 [...]) -> [..., D];
 * embedding_grad (idx, gy [..., D]) -> [V, D] */
bool tg_shape_embedding(tg_graph *g, tg_node *n) {
    char s0[96], s1[96];
    if (n->op == TG_OP_EMBEDDING) {
        const tg_node *t = IN(0), *idx = IN(1);
        if (!need(g, n, 0, "table", TG_F32) || !need(g, n, 1, "indices", TG_I32)) return false;
        if (t->shape.ndim != 2) {
            tg_ir_fail(g, n, "table %s must be 2-d [vocab, dim]", S(t->shape, s0));
            return false;
        }
        if (idx->shape.ndim >= TG_MAX_DIMS) {
            tg_ir_fail(g, n, "indices %s leave no room for the embedding axis (at most %d dims)", S(idx->shape, s1),
                    TG_MAX_DIMS);
            return false;
        }
        n->shape = idx->shape;
        n->shape.d[n->shape.ndim++] = t->shape.d[1];
    } else {
        const tg_node *idx = IN(0), *gy = IN(1);
        if (!need(g, n, 0, "indices", TG_I32) || !need(g, n, 1, "the cotangent", TG_F32)) return false;
        int64_t V = n->at.classes.v;
        if (gy->shape.ndim != idx->shape.ndim + 1 || !tg_shape_eq(lead_of(gy->shape), idx->shape) || V < 1) {
            tg_ir_fail(g, n, "cotangent %s does not fit indices %s", S(gy->shape, s1), S(idx->shape, s0));
            return false;
        }
        n->shape = (tg_shape){2, {V, gy->shape.d[gy->shape.ndim - 1]}};
    }
    n->dtype = TG_F32;
    return true;
}

/* rope (x [..., T, D], table [T, D]) -> x's shape; D even */
bool tg_shape_rope(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0), *t = IN(1);
    char sx[96], st[96];
    if (!need(g, n, 0, "x", TG_F32)) return false;
    int nd = x->shape.ndim;
    if (nd < 2 || x->shape.d[nd - 1] % 2 != 0) {
        tg_ir_fail(g, n, "x %s must be [..., T, D] with D even (dims are rotated in pairs)", S(x->shape, sx));
        return false;
    }
    if (t->shape.ndim != 2 || t->shape.d[0] != x->shape.d[nd - 2] || t->shape.d[1] != x->shape.d[nd - 1]) {
        tg_ir_fail(g, n, "angle table %s does not fit x %s", S(t->shape, st), S(x->shape, sx));
        return false;
    }
    n->shape = x->shape;
    n->dtype = TG_F32;
    return true;
}

bool tg_shape_dropout(tg_graph *g, tg_node *n) {
    if (!need(g, n, 0, "x", TG_F32) || !need_seed(g, n, 1)) return false;
    if (!(n->at.rand.p >= 0.0f && n->at.rand.p < 1.0f)) {
        tg_ir_fail(g, n, "p %g must be in [0, 1)", (double)n->at.rand.p);
        return false;
    }
    n->shape = IN(0)->shape;
    n->dtype = TG_F32;
    return true;
}

/* The shape comes from the builder (the node proto). */
bool tg_shape_randn(tg_graph *g, tg_node *n) {
    char s[96];
    if (!need_seed(g, n, 0)) return false;
    if (n->shape.ndim < 0 || n->shape.ndim > TG_MAX_DIMS) {
        tg_ir_fail(g, n, "a shape of %d dims (at most %d)", n->shape.ndim, TG_MAX_DIMS);
        return false;
    }
    for (int i = 0; i < n->shape.ndim; i++) {
        if (n->shape.d[i] < 1) {
            tg_ir_fail(g, n, "shape %s has a dim < 1", S(n->shape, s));
            return false;
        }
    }
    n->dtype = TG_F32;
    return true;
}

/* logits [..., V] -> i32 [...] */
bool tg_shape_categorical(tg_graph *g, tg_node *n) {
    const tg_node *x = IN(0);
    char sx[96];
    if (!need(g, n, 0, "logits", TG_F32) || !need_seed(g, n, 1)) return false;
    if (x->shape.ndim < 1 || x->shape.d[x->shape.ndim - 1] < 1) {
        tg_ir_fail(g, n, "logits %s need a non-empty last (class) axis", S(x->shape, sx));
        return false;
    }
    n->shape = lead_of(x->shape);
    n->dtype = TG_I32;
    return true;
}
