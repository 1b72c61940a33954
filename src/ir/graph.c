/* Graph storage, node creation (every node passes its op's shape rule), error
 * recording, shape helpers and the printer. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "model.h"

size_t tg_dtype_size(tg_dtype dt) { (void)dt; return 4; }

const char *tg_dtype_name(tg_dtype dt) {
    switch (dt) {
    case TG_F32: return "f32";
    case TG_I32: return "i32";
    case TG_BOOL: return "bool";
    }
    return "?";
}

int64_t tg_shape_numel(tg_shape s) {
    if (s.ndim < 0 || s.ndim > TG_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++)
        if (s.d[i] < 0 || __builtin_mul_overflow(n, s.d[i], &n)) return -1;
    return n;
}

bool tg_ir_numel_ok(tg_shape s) {
    int64_t n = tg_shape_numel(s);
    return n >= 0 && n <= TG_MAX_NUMEL && tg_ir_span(s) <= TG_MAX_NUMEL;
}

int64_t tg_ir_span(tg_shape s) {
    int64_t n = 1;
    for (int i = 0; i < s.ndim && i < TG_MAX_DIMS; i++)
        if (s.d[i] > 0 && __builtin_mul_overflow(n, s.d[i], &n)) return INT64_MAX;
    return n;
}

int64_t tg_ir_numel(const tg_node *n) { return tg_shape_numel(n->shape); }

char *tg_shape_str(tg_shape s, char *buf, size_t n) {
    /* Error messages print the caller's shapes as given: a bad dim count has
     * no dims to show (d holds TG_MAX_DIMS). */
    if (s.ndim < 0 || s.ndim > TG_MAX_DIMS) {
        snprintf(buf, n, "[%d dims]", s.ndim);
        return buf;
    }
    /* Once the text is cut, k is past the buffer: stop there (buf + k would point outside it). */
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s.ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)s.d[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

bool tg_shape_eq(tg_shape a, tg_shape b) {
    if (a.ndim != b.ndim) return false;
    for (int i = 0; i < a.ndim; i++)
        if (a.d[i] != b.d[i]) return false;
    return true;
}

bool tg_shape_broadcast(tg_shape a, tg_shape b, tg_shape *out) {
    tg_shape r = {a.ndim > b.ndim ? a.ndim : b.ndim, {0}};
    for (int i = 0; i < r.ndim; i++) {
        int ia = a.ndim - r.ndim + i, ib = b.ndim - r.ndim + i;
        int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        r.d[i] = da == 1 ? db : da;
    }
    *out = r;
    return true;
}

void tg_shape_strides(tg_shape s, int64_t *st) {
    int64_t acc = 1;
    for (int i = s.ndim - 1; i >= 0; i--) {
        st[i] = acc;
        acc *= s.d[i];
    }
}

void tg_shape_bcast_strides(tg_shape in, tg_shape out, int64_t *st) {
    int64_t own[TG_MAX_DIMS];
    tg_shape_strides(in, own);
    for (int i = 0; i < out.ndim; i++) {
        int j = in.ndim - out.ndim + i;
        st[i] = (j < 0 || in.d[j] == 1) ? 0 : own[j];
    }
}

tg_graph *tg_ir_graph_new(tg_model *m) {
    tg_graph *g = tg_calloc(1, sizeof *g);
    if (!g) return NULL;
    g->model = m;
    g->rng_seed = -1;
    g->n_param_node = m ? tg_model_param_count(m) : 0;
    g->param_node = tg_calloc((size_t)g->n_param_node + 1, sizeof(int));
    if (!g->param_node) {
        free(g);
        return NULL;
    }
    for (int i = 0; i < g->n_param_node; i++) g->param_node[i] = -1;
    return g;
}

tg_graph *tg_graph_new(tg_model *m) { return tg_ir_graph_new(m); }

void tg_graph_free(tg_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].data);
    }
    for (int i = 0; i < g->n_caps; i++) free(g->caps[i].name);
    free(g->caps);
    free(g->upd);
    free(g->nodes);
    free(g->param_node);
    free(g);
}

tg_status tg_graph_status(const tg_graph *g) { return g ? g->err : TG_ERR_ARG; }
const char *tg_graph_error(const tg_graph *g) { return g ? g->errmsg : "no graph"; }
int tg_graph_node_count(const tg_graph *g) { return g ? g->n : 0; }

static const char *base_name(const char *path) {
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : (path ? path : "?");
}

/* The graph this thread is tracing (the user's function is running), so an
 * op on a tensor kept from another trace is blamed on the trace that made
 * the mistake, and the other graph, maybe compiled already, is left as it is. */
static _Thread_local tg_graph *tracing;

tg_graph *tg_ir_trace_begin(tg_graph *g) {
    tg_graph *prev = tracing;
    tracing = g;
    return prev;
}

void tg_ir_trace_end(tg_graph *prev) { tracing = prev; }

void tg_ir_seal(tg_graph *g) { g->sealed = true; }

static void failv(tg_graph *g, tg_status st, const tg_node *n, const char *fmt, va_list ap) {
    if (tracing && tracing != g) g = tracing;
    if (g->sealed || g->err != TG_OK) return; /* keep the first error: later ones are consequences */
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    g->err = st;
    snprintf(g->errmsg, sizeof g->errmsg, "tg_%s: %s (%s:%d)", n->api ? n->api : tg_ops[n->op].name, msg,
             base_name(n->file), n->line);
}

void tg_ir_fail(tg_graph *g, const tg_node *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    failv(g, TG_ERR_SHAPE, n, fmt, ap);
    va_end(ap);
}

void tg_ir_fail_status(tg_graph *g, tg_status st, const tg_node *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    failv(g, st, n, fmt, ap);
    va_end(ap);
}

/* The checks that come before anything of proto is read or appended. */
static bool proto_ok(tg_graph *g, const tg_node *proto) {
    if ((unsigned)proto->op >= TG_OP_COUNT || proto->nin < 0 || proto->nin > TG_MAX_IN) return false;
    if ((tracing && tracing != g) || g->sealed) {
        tg_ir_fail_status(g, TG_ERR_ARG, proto,
                       "an operand comes from another graph (a tensor kept from an earlier trace?)");
        return false;
    }
    for (int i = 0; i < proto->nin; i++) {
        if (proto->in[i] == -1) return false; /* an earlier error, already recorded */
        if (proto->in[i] < 0 || proto->in[i] >= g->n) {
            tg_ir_fail_status(g, TG_ERR_ARG, proto, "operand %d is tensor id %d, not a tensor of this graph (%d nodes)",
                           i, (int)proto->in[i], g->n);
            return false;
        }
    }
    if (proto->shape.ndim < 0 || proto->shape.ndim > TG_MAX_DIMS) {
        tg_ir_fail(g, proto, "shape has %d dims (at most %d)", proto->shape.ndim, TG_MAX_DIMS);
        return false;
    }
    return true;
}

int tg_ir_add(tg_graph *g, const tg_node *proto) {
    if (!g || !proto_ok(g, proto)) return -1;
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 64;
        tg_node *nodes = tg_realloc(g->nodes, (size_t)cap * sizeof(tg_node));
        if (!nodes) {
            if (g->err == TG_OK) {
                g->err = TG_ERR_NOMEM;
                snprintf(g->errmsg, sizeof g->errmsg, "out of memory growing the graph");
            }
            return -1;
        }
        g->nodes = nodes;
        g->cap = cap;
    }
    tg_node n = *proto;
    n.name = NULL;
    n.data = NULL;
    if (!tg_ops[n.op].shape(g, &n)) return -1;
    for (int i = 0; i < n.shape.ndim; i++) {
        if (n.shape.d[i] < 0) {
            tg_ir_fail(g, &n, "negative dimension %lld", (long long)n.shape.d[i]);
            return -1;
        }
    }
    if (!tg_ir_numel_ok(n.shape)) {
        char b[160];
        tg_ir_fail_status(g, TG_ERR_LIMIT, &n, "shape %s %s more than %lld elements", tg_shape_str(n.shape, b, sizeof b),
                       tg_ir_numel(&n) >= 0 && tg_ir_numel(&n) <= TG_MAX_NUMEL ? "spans" : "has", (long long)TG_MAX_NUMEL);
        return -1;
    }
    if (proto->name && !(n.name = tg_strdup(proto->name))) return -1;
    if (proto->data) {
        size_t bytes = (size_t)tg_ir_numel(&n) * sizeof(float);
        if (!(n.data = malloc(bytes ? bytes : 4))) {
            free(n.name);
            return -1;
        }
        memcpy(n.data, proto->data, bytes);
    }
    g->nodes[g->n] = n;
    return g->n++;
}

void tg_graph_print(const tg_graph *g, void *file) {
    FILE *f = file ? file : stdout;
    char buf[96];
    /* No graph prints nothing, as tg_session_print_plan: tg_forward_graph is
     * NULL for a forward that a replace_model left without a program. */
    for (int i = 0; g && i < g->n; i++) {
        const tg_node *n = &g->nodes[i];
        fprintf(f, "%%%-4d = %-16s %-4s %-18s", i, tg_ops[n->op].name, tg_dtype_name(n->dtype),
                tg_shape_str(n->shape, buf, sizeof buf));
        for (int k = 0; k < n->nin; k++) fprintf(f, " %%%d", n->in[k]);
        if (n->name) fprintf(f, "  \"%s\"", n->name);
        fprintf(f, "\n");
    }
}

tg_shape tg_tensor_shape(tg_tensor t) {
    if (!t.g || t.id < 0 || t.id >= t.g->n) return (tg_shape){0, {0}};
    return t.g->nodes[t.id].shape;
}

tg_dtype tg_tensor_dtype(tg_tensor t) {
    if (!t.g || t.id < 0 || t.id >= t.g->n) return TG_F32;
    return t.g->nodes[t.id].dtype;
}

bool tg_tensor_ok(tg_tensor t) { return t.g && t.id >= 0 && t.id < t.g->n; }

void tg_ir_leaf_update(tg_graph *g, int dst, int src, const tg_node *site) {
    if (!g || dst < 0 || src < 0 || g->err != TG_OK) return;
    const tg_node *d = &g->nodes[dst], *v = &g->nodes[src];
    char a[96], b[96];
    if (d->op != TG_OP_PARAM || d->dtype != TG_F32) {
        tg_ir_fail(g, site, "the value to update must be an f32 param (tg_use), got a %s", tg_ops[d->op].name);
        return;
    }
    if (!tg_shape_eq(d->shape, v->shape) || v->dtype != TG_F32) {
        tg_ir_fail(g, site, "param '%s' %s cannot take a value of shape %s", d->name, tg_shape_str(d->shape, a, sizeof a),
                   tg_shape_str(v->shape, b, sizeof b));
        return;
    }
    for (int i = 0; i < g->n_upd; i++)
        if (g->upd[i].dst == dst) {
            tg_ir_fail(g, site, "param '%s' is updated twice in one step", d->name);
            return;
        }
    if (g->n_upd == g->cap_upd) {
        int cap = g->cap_upd ? 2 * g->cap_upd : 8;
        struct tg_leaf_update *u = tg_realloc(g->upd, (size_t)cap * sizeof *u);
        if (!u) {
            tg_ir_fail_status(g, TG_ERR_NOMEM, site, "out of memory");
            return;
        }
        g->upd = u;
        g->cap_upd = cap;
    }
    g->upd[g->n_upd++] = (struct tg_leaf_update){src, dst};
}
