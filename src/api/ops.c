/* Public op builders: thin wrappers that record the caller's file:line and
 * the builder's name, then go through the IR (ir/builders.c). Composites
 * (mean, mse, the scalar forms) are spelled out here in terms of IR ops. */
#include <stdio.h>
#include <string.h>

#include "../ir/ir.h"
#include "api.h"
#include "../ir/model.h"

static const tg_tensor BAD = {NULL, -1};


static tg_tensor add_node(tg_graph *g, tg_node *n) {
    int id = tg_ir_add(g, n);
    return (tg_tensor){g, id};
}

/* The graph two operands share, or NULL after recording why not. */
static tg_graph *graph_of(const char *api, tg_tensor a, tg_tensor b, const char *file, int line) {
    if (!a.g || !b.g) return a.g ? a.g : b.g;
    if (a.g != b.g) {
        tg_node n = tg_ir_proto(TG_OP_ADD, api, file, line);
        tg_ir_fail(a.g, &n, "operands come from different graphs");
        return NULL;
    }
    return a.g;
}

/* ---- leaves ---- */

tg_tensor tg_use_at(tg_graph *g, tg_param p, const char *file, int line) {
    if (!g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_PARAM, "use", file, line);
    if (!g->model || p < 0 || p >= g->n_param_node) {
        tg_ir_fail(g, &n, "param %d is not in this graph's model", p);
        return (tg_tensor){g, -1};
    }
    if (g->param_node[p] >= 0) return (tg_tensor){g, g->param_node[p]};
    const tg_param_decl *d = &g->model->params[p];
    n.name = d->name;
    n.dtype = d->dtype;
    n.shape = d->shape;
    n.param = p;
    tg_tensor t = add_node(g, &n);
    if (t.id >= 0) g->param_node[p] = t.id;
    return t;
}

tg_tensor tg_input_at(tg_graph *g, const char *name, const char *file, int line) {
    if (!g) return BAD;
    for (int i = 0; name && i < g->n; i++)
        if (g->nodes[i].op == TG_OP_INPUT && strcmp(g->nodes[i].name, name) == 0) return (tg_tensor){g, i};
    tg_node n = tg_ir_proto(TG_OP_INPUT, "input", file, line);
    char known[256] = "";
    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].op != TG_OP_INPUT) continue;
        size_t k = strlen(known);
        snprintf(known + k, sizeof known - k, "%s'%s'", k ? ", " : "", g->nodes[i].name);
    }
    tg_ir_fail(g, &n, "no input named '%s' (declared: %s)", name ? name : "(null)", known[0] ? known : "none");
    g->err = TG_ERR_NAME;
    return (tg_tensor){g, -1};
}

tg_tensor tg_input_new_at(tg_graph *g, const char *name, tg_dtype dt, tg_shape s, const char *file, int line) {
    if (!g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_INPUT, "input_new", file, line);
    if (!name || !*name || (unsigned)dt > TG_BOOL || s.ndim < 0 || s.ndim > TG_MAX_DIMS) {
        tg_ir_fail(g, &n, "bad input declaration '%s'", name ? name : "(null)");
        return (tg_tensor){g, -1};
    }
    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].op == TG_OP_INPUT && strcmp(g->nodes[i].name, name) == 0) {
            tg_ir_fail(g, &n, "input '%s' declared twice", name);
            g->err = TG_ERR_NAME;
            return (tg_tensor){g, -1};
        }
    }
    n.name = (char *)name;
    n.dtype = dt;
    n.shape = s;
    return add_node(g, &n);
}

tg_tensor tg_scalar_at(tg_graph *g, float v, const char *file, int line) {
    return tg_full_at(g, (tg_shape){0, {0}}, v, file, line);
}

tg_tensor tg_full_at(tg_graph *g, tg_shape s, float v, const char *file, int line) {
    if (!g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_CONST, "full", file, line);
    n.dtype = TG_F32;
    n.shape = s;
    n.at.fill.value = v;
    return add_node(g, &n);
}

tg_tensor tg_constant_at(tg_graph *g, tg_shape s, const float *data, const char *file, int line) {
    if (!g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_CONST, "constant", file, line);
    if (!data) {
        tg_ir_fail(g, &n, "data is NULL");
        return (tg_tensor){g, -1};
    }
    n.dtype = TG_F32;
    n.shape = s;
    n.data = (float *)data;
    return add_node(g, &n);
}

tg_tensor tg_arange_at(tg_graph *g, int64_t len, tg_dtype dt, const char *file, int line) {
    if (!g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_ARANGE, "arange", file, line);
    n.dtype = dt == TG_F32 ? TG_F32 : TG_I32;
    n.at.arange.len = len;
    return add_node(g, &n);
}

/* ---- elementwise ---- */

static tg_tensor bin(tg_opcode op, const char *api, tg_tensor a, tg_tensor b, const char *file, int line) {
    tg_graph *g = graph_of(api, a, b, file, line);
    if (!g) return (tg_tensor){a.g, -1};
    tg_node n = tg_ir_proto(op, api, file, line);
    n.in[0] = a.id;
    n.in[1] = b.id;
    return add_node(g, &n);
}

/* A 0-d constant of x's dtype, for the tensor-scalar forms (i32 stays i32:
 * min/max on indices need no cast). */
tg_tensor tg_api_scalar_like(tg_tensor x, float v, const char *file, int line) {
    if (!ir_live(x)) return (tg_tensor){x.g, -1};
    tg_node n = tg_ir_proto(TG_OP_CONST, "scalar", file, line);
    n.dtype = x.g->nodes[x.id].dtype == TG_I32 ? TG_I32 : TG_F32;
    n.at.fill.value = v;
    return add_node(x.g, &n);
}

#define BINARY(fn, OP)                                                                 \
    tg_tensor tg_##fn##_at(tg_tensor a, tg_tensor b, const char *file, int line) {     \
        return bin(OP, #fn, a, b, file, line);                                         \
    }                                                                                  \
    tg_tensor tg_##fn##_s_at(tg_tensor a, float s, const char *file, int line) {       \
        return bin(OP, #fn "_s", a, tg_api_scalar_like(a, s, file, line), file, line);        \
    }
BINARY(add, TG_OP_ADD)
BINARY(sub, TG_OP_SUB)
BINARY(mul, TG_OP_MUL)
BINARY(div, TG_OP_DIV)
BINARY(less, TG_OP_LESS)
BINARY(greater, TG_OP_GREATER)

tg_tensor tg_rsub_s_at(float s, tg_tensor a, const char *file, int line) {
    return bin(TG_OP_SUB, "rsub_s", tg_api_scalar_like(a, s, file, line), a, file, line);
}
tg_tensor tg_rdiv_s_at(float s, tg_tensor a, const char *file, int line) {
    return bin(TG_OP_DIV, "rdiv_s", tg_api_scalar_like(a, s, file, line), a, file, line);
}

static tg_tensor un(tg_opcode op, const char *api, tg_tensor x, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(op, api, file, line);
    n.in[0] = x.id;
    return add_node(x.g, &n);
}

tg_tensor tg_cast_at(tg_tensor x, tg_dtype dt, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_CAST, "cast", file, line);
    if ((unsigned)dt > TG_BOOL) {
        tg_ir_fail(x.g, &n, "unknown dtype %d", (int)dt);
        return (tg_tensor){x.g, -1};
    }
    if (ir_live(x) && x.g->nodes[x.id].dtype == dt) return x;
    n.in[0] = x.id;
    n.at.cast.to = dt;
    return add_node(x.g, &n);
}

tg_tensor tg_where_at(tg_tensor c, tg_tensor a, tg_tensor b, const char *file, int line) {
    tg_graph *g = graph_of("where", c, a, file, line);
    if (g) g = graph_of("where", a, b, file, line);
    if (!g) return (tg_tensor){c.g, -1};
    tg_node n = tg_ir_proto(TG_OP_WHERE, "where", file, line);
    n.in[0] = c.id;
    n.in[1] = a.id;
    n.in[2] = b.id;
    return add_node(g, &n);
}

/* ---- reductions ---- */

/* Turns an axis list into a bitmask; TG_ALL means every axis. */
static bool axes_mask(tg_tensor x, tg_shape axes, const char *api, const char *file, int line, unsigned *mask) {
    int nd = x.g->nodes[x.id].shape.ndim;
    *mask = 0;
    if (axes.ndim < 0 || axes.ndim > TG_MAX_DIMS) {
        tg_node n = tg_ir_proto(TG_OP_SUM, api, file, line);
        tg_ir_fail(x.g, &n, "an axis list of %d entries (at most %d)", axes.ndim, TG_MAX_DIMS);
        return false;
    }
    for (int i = 0; i < axes.ndim; i++) {
        int64_t a = axes.d[i];
        if (a == TG_ALL) {
            *mask = nd ? (1u << nd) - 1 : 0;
            continue;
        }
        if (a < 0) a += nd;
        if (a < 0 || a >= nd) {
            tg_node n = tg_ir_proto(TG_OP_SUM, api, file, line);
            char s[96];
            tg_ir_fail(x.g, &n, "axis %lld out of range for %s", (long long)axes.d[i],
                    tg_shape_str(x.g->nodes[x.id].shape, s, sizeof s));
            return false;
        }
        *mask |= 1u << a;
    }
    return true;
}

static tg_tensor reduce(tg_tensor x, tg_shape axes, bool keep, bool mean, const char *api, const char *file,
                        int line) {
    if (!ir_live(x)) return (tg_tensor){x.g, -1};
    unsigned mask;
    if (!axes_mask(x, axes, api, file, line, &mask)) return (tg_tensor){x.g, -1};
    tg_shape xs = x.g->nodes[x.id].shape;
    tg_node n = tg_ir_proto(TG_OP_SUM, api, file, line);
    n.in[0] = x.id;
    n.at.sum.axes = mask;
    tg_tensor r = mask ? add_node(x.g, &n) : x;
    if (r.id < 0) return r;
    if (mean) {
        int64_t count = 1;
        for (int i = 0; i < xs.ndim; i++)
            if (mask & (1u << i)) count *= xs.d[i];
        r = bin(TG_OP_MUL, api, r, tg_api_scalar_like(r, 1.0f / (float)(count ? count : 1), file, line), file, line);
    }
    if (!keep) {
        tg_shape s = {0, {0}};
        for (int i = 0; i < xs.ndim; i++)
            if (!(mask & (1u << i))) s.d[s.ndim++] = xs.d[i];
        r.id = tg_ir_reshape(x.g, r.id, s, file, line);
    }
    return r;
}

tg_tensor tg_sum_at(tg_tensor x, int axis, bool keep, const char *file, int line) {
    return reduce(x, (tg_shape){1, {axis}}, keep, false, "sum", file, line);
}
tg_tensor tg_mean_at(tg_tensor x, int axis, bool keep, const char *file, int line) {
    return reduce(x, (tg_shape){1, {axis}}, keep, true, "mean", file, line);
}
tg_tensor tg_sum_axes_at(tg_tensor x, tg_shape axes, bool keep, const char *file, int line) {
    return reduce(x, axes, keep, false, "sum_axes", file, line);
}
tg_tensor tg_mean_axes_at(tg_tensor x, tg_shape axes, bool keep, const char *file, int line) {
    return reduce(x, axes, keep, true, "mean_axes", file, line);
}

/* ---- layout ---- */

tg_tensor tg_reshape_at(tg_tensor x, tg_shape s, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_RESHAPE, "reshape", file, line);
    n.in[0] = x.id;
    n.shape = s;
    if (s.ndim < 0 || s.ndim > TG_MAX_DIMS) {
        tg_ir_fail(x.g, &n, "bad number of dims %d", s.ndim);
        return (tg_tensor){x.g, -1};
    }
    return add_node(x.g, &n);
}

tg_tensor tg_permute_at(tg_tensor x, tg_shape perm, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_PERMUTE, "permute", file, line);
    n.in[0] = x.id;
    if (perm.ndim < 0 || perm.ndim > TG_MAX_DIMS) perm.ndim = 7; /* rejected by the rule */
    n.at.permute.perm.ndim = perm.ndim; /* only the axes used: the rest stays 0 */
    for (int i = 0; i < perm.ndim && i < TG_MAX_DIMS; i++) n.at.permute.perm.d[i] = perm.d[i];
    if (ir_live(x)) {
        int nd = x.g->nodes[x.id].shape.ndim;
        for (int i = 0; i < perm.ndim && i < TG_MAX_DIMS; i++)
            if (n.at.permute.perm.d[i] < 0) n.at.permute.perm.d[i] += nd;
    }
    return add_node(x.g, &n);
}

tg_tensor tg_broadcast_to_at(tg_tensor x, tg_shape s, const char *file, int line) {
    if (!x.g) return BAD;
    if (ir_live(x) && tg_shape_eq(x.g->nodes[x.id].shape, s)) return x;
    tg_node n = tg_ir_proto(TG_OP_BROADCAST, "broadcast_to", file, line);
    n.in[0] = x.id;
    n.shape = s;
    return add_node(x.g, &n);
}

tg_tensor tg_sum_to_shape_at(tg_tensor x, tg_shape s, const char *file, int line) {
    if (!x.g) return BAD;
    return (tg_tensor){x.g, tg_ir_sum_to_shape(x.g, x.id, s, file, line)};
}

/* ---- contraction, indexing, softmax family ---- */

tg_tensor tg_matmul_t_at(tg_tensor a, tg_tensor b, bool ta, bool tb, const char *file, int line) {
    tg_graph *g = graph_of("matmul", a, b, file, line);
    if (!g) return (tg_tensor){a.g, -1};
    tg_node n = tg_ir_proto(TG_OP_MATMUL, "matmul", file, line);
    n.in[0] = a.id;
    n.in[1] = b.id;
    n.at.matmul.ta = ta;
    n.at.matmul.tb = tb;
    return add_node(g, &n);
}

tg_tensor tg_matmul_at(tg_tensor a, tg_tensor b, const char *file, int line) {
    return tg_matmul_t_at(a, b, false, false, file, line);
}

tg_tensor tg_one_hot_at(tg_tensor idx, int64_t depth, const char *file, int line) {
    if (!idx.g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_ONE_HOT, "one_hot", file, line);
    n.in[0] = idx.id;
    n.at.one_hot.depth = depth;
    return add_node(idx.g, &n);
}

tg_tensor tg_log_softmax_at(tg_tensor x, int axis, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_LOG_SOFTMAX, "log_softmax", file, line);
    n.in[0] = x.id;
    n.at.axis.axis = axis < 0 && ir_live(x) ? axis + x.g->nodes[x.id].shape.ndim : axis;
    return add_node(x.g, &n);
}

tg_tensor tg_softmax_causal_at(tg_tensor x, const char *file, int line) {
    return un(TG_OP_SOFTMAX_CAUSAL, "softmax_causal", x, file, line);
}

tg_tensor tg_where_causal_at(tg_tensor x, float value, const char *file, int line) {
    if (!x.g) return BAD;
    tg_node n = tg_ir_proto(TG_OP_WHERE_CAUSAL, "where_causal", file, line);
    n.in[0] = x.id;
    n.at.fill.value = value;
    return add_node(x.g, &n);
}

tg_tensor tg_capture_at(tg_tensor x, const char *name, const char *file, int line) {
    if (!ir_live(x)) return x;
    tg_graph *g = x.g;
    tg_node n = tg_ir_proto(TG_OP_INPUT, "capture", file, line);
    if (!name || !*name) {
        tg_ir_fail(g, &n, "a capture needs a name");
        return (tg_tensor){g, -1};
    }
    for (int i = 0; i < g->n_caps; i++) {
        if (strcmp(g->caps[i].name, name) == 0) {
            tg_ir_fail(g, &n, "capture '%s' defined twice", name);
            g->err = TG_ERR_NAME;
            return (tg_tensor){g, -1};
        }
    }
    if (g->n_caps == g->cap_caps) {
        int cap = g->cap_caps ? 2 * g->cap_caps : 8;
        struct tg_capture *c = tg_realloc(g->caps, (size_t)cap * sizeof *c);
        if (!c) {
            tg_ir_fail(g, &n, "out of memory");
            g->err = TG_ERR_NOMEM;
            return (tg_tensor){g, -1};
        }
        g->caps = c;
        g->cap_caps = cap;
    }
    char *copy = tg_strdup(name);
    if (!copy) {
        tg_ir_fail(g, &n, "out of memory");
        g->err = TG_ERR_NOMEM;
        return (tg_tensor){g, -1};
    }
    g->caps[g->n_caps++] = (struct tg_capture){copy, x.id};
    return x;
}

tg_tensor tg_mse_at(tg_tensor a, tg_tensor b, const char *file, int line) {
    tg_tensor d = bin(TG_OP_SUB, "mse", a, b, file, line);
    return reduce(bin(TG_OP_MUL, "mse", d, d, file, line), (tg_shape){1, {TG_ALL}}, false, true, "mse", file, line);
}
