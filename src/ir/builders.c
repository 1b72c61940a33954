/* Internal node builders shared by the public op builders, the gradient
 * rules and the optimizer. Each fills a proto node and goes through tg_ir_add,
 * so every node, forward or backward, passes its shape rule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

tg_node tg_ir_proto(tg_opcode op, const char *api, const char *file, int line) {
    tg_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.nin = tg_ops[op].arity;
    n.api = api;
    n.file = file;
    n.line = line;
    n.param = -1;
    return n;
}

static tg_node proto(tg_opcode op, const char *file, int line) { return tg_ir_proto(op, NULL, file, line); }

bool tg_ir_module_ok(tg_graph *g, const void *module, const char *api, const char *file, int line) {
    if (!g) return false;
    if (module) return true;
    tg_node n = tg_ir_proto(TG_OP_PARAM, api, file, line);
    tg_ir_fail_status(g, TG_ERR_ARG, &n, "the module is NULL");
    return false;
}

int tg_ir_leaf(tg_graph *g, tg_opcode op, const char *name, tg_dtype dt, tg_shape s, const char *file, int line) {
    tg_node n = proto(op, file, line);
    n.name = (char *)name;
    n.dtype = dt;
    n.shape = s;
    return tg_ir_add(g, &n);
}

int tg_ir_rng_seed(tg_graph *g) {
    if (g->rng_seed < 0) g->rng_seed = tg_ir_leaf(g, TG_OP_STATE, TG_RNG_SEED_NAME, TG_I32, (tg_shape){1, {2}}, IR_HERE);
    return g->rng_seed;
}

uint32_t tg_ir_rng_salt(tg_graph *g) { return tg_hash32(0x5eed0000u + g->n_random_ops++); }

int tg_ir_unary(tg_graph *g, tg_opcode op, int x, const char *file, int line) {
    tg_node n = proto(op, file, line);
    n.in[0] = x;
    return tg_ir_add(g, &n);
}

/* A fill constant of f32: its value, else NAN as "not one". */
static float fill_value(const tg_graph *g, int x) {
    const tg_node *n = x >= 0 && x < g->n ? &g->nodes[x] : NULL;
    return n && n->op == TG_OP_CONST && !n->data && !n->at.fill.table && n->dtype == TG_F32 ? n->at.fill.value : NAN;
}

int tg_ir_binary(tg_graph *g, tg_opcode op, int a, int b, const char *file, int line) {
    /* The product of two fill constants of one shape is a constant (the
     * loss's seed gradient times a mean's scale): folded here so that no
     * kernel computes it again every step. One f32 multiply, as every
     * backend's kernel would do it, so the bits are the same. */
    float va = fill_value(g, a), vb = fill_value(g, b);
    if (op == TG_OP_MUL && va == va && vb == vb && tg_shape_eq(g->nodes[a].shape, g->nodes[b].shape)) {
        tg_node c = proto(TG_OP_CONST, file, line);
        c.dtype = TG_F32;
        c.shape = g->nodes[a].shape;
        c.at.fill.value = va * vb;
        return tg_ir_add(g, &c);
    }
    tg_node n = proto(op, file, line);
    n.in[0] = a;
    n.in[1] = b;
    return tg_ir_add(g, &n);
}

int tg_ir_scalar(tg_graph *g, float v, const char *file, int line) {
    tg_node n = proto(TG_OP_CONST, file, line);
    n.dtype = TG_F32;
    n.shape = (tg_shape){0, {0}};
    n.at.fill.value = v;
    return tg_ir_add(g, &n);
}

int tg_ir_reduce_sum(tg_graph *g, int x, unsigned axes_mask, const char *file, int line) {
    tg_node n = proto(TG_OP_SUM, file, line);
    n.in[0] = x;
    n.at.sum.axes = axes_mask;
    return tg_ir_add(g, &n);
}

int tg_ir_reshape(tg_graph *g, int x, tg_shape s, const char *file, int line) {
    if (x < 0 || x >= g->n || s.ndim < 0 || s.ndim > TG_MAX_DIMS) {
        tg_node n = proto(TG_OP_RESHAPE, file, line);
        n.in[0] = x; /* tg_ir_add reports the bad id or rank */
        n.shape = s;
        return tg_ir_add(g, &n);
    }
    if (tg_shape_eq(g->nodes[x].shape, s)) return x;
    tg_node n = proto(TG_OP_RESHAPE, file, line);
    n.in[0] = x;
    n.shape = s;
    return tg_ir_add(g, &n);
}

int tg_ir_permute(tg_graph *g, int x, tg_shape perm, const char *file, int line) {
    tg_node n = proto(TG_OP_PERMUTE, file, line);
    n.in[0] = x;
    n.at.permute.perm.ndim = perm.ndim;
    for (int i = 0; i < perm.ndim && i < TG_MAX_DIMS; i++) n.at.permute.perm.d[i] = perm.d[i];
    return tg_ir_add(g, &n);
}

/* Sums the axes that broadcasting added or stretched so x gets shape s. */
int tg_ir_sum_to_shape(tg_graph *g, int x, tg_shape s, const char *file, int line) {
    if (x < 0 || x >= g->n || s.ndim < 0 || s.ndim > TG_MAX_DIMS) return tg_ir_reshape(g, x, s, file, line);
    tg_shape xs = g->nodes[x].shape;
    if (tg_shape_eq(xs, s)) return x;
    tg_node err = proto(TG_OP_SUM, file, line);
    err.api = "sum_to_shape";
    tg_shape r;
    if (s.ndim > xs.ndim || !tg_shape_broadcast(s, xs, &r) || !tg_shape_eq(r, xs)) {
        char a[96], b[96];
        tg_ir_fail(g, &err, "cannot sum %s down to %s", tg_shape_str(xs, a, sizeof a), tg_shape_str(s, b, sizeof b));
        return -1;
    }
    unsigned mask = 0;
    for (int i = 0; i < xs.ndim; i++) {
        int j = s.ndim - xs.ndim + i;
        if (j < 0 || (s.d[j] == 1 && xs.d[i] != 1)) mask |= 1u << i;
    }
    int r_id = mask ? tg_ir_reduce_sum(g, x, mask, file, line) : x;
    return tg_ir_reshape(g, r_id, s, file, line);
}

int tg_ir_matmul(tg_graph *g, int a, int b, bool ta, bool tb, const char *file, int line) {
    tg_node n = proto(TG_OP_MATMUL, file, line);
    n.in[0] = a;
    n.in[1] = b;
    n.at.matmul.ta = ta;
    n.at.matmul.tb = tb;
    return tg_ir_add(g, &n);
}

/* rope's cos | sin table [T, D]: row t holds cos(t f_i) for i < D/2, then
 * sin(t f_i), with f_i = base^(-2i/D). In double precision (long sequences
 * keep accurate angles); position t + 1's rotation is position t's times
 * one step's, with exact cos and sin every ANCHOR positions: the drift
 * between anchors (at most 1.5e-11 at T = 2^17, D = 128) is as small as
 * the rounding of t * f_i itself, 1 float in 30000 ends one ulp apart from
 * cos(t * f_i), and the table costs a few multiplies per element instead
 * of two trigonometric calls. */
#define ANCHOR 256
static void rope_table(float *tab, int64_t T, int64_t D, double base) {
    int64_t h = D / 2;
    if (T * D == 0) return; /* the cap is on T * D: with no positions, D may be 2^40 */
    for (int64_t i = 0; i < h; i++) {
        double f = pow(base, -2.0 * (double)i / (double)D), c1 = cos(f), s1 = sin(f), c = 1, sn = 0;
        for (int64_t t = 0; t < T; t++) {
            if (t % ANCHOR == 0) c = cos((double)t * f), sn = sin((double)t * f);
            tab[t * D + i] = (float)c;
            tab[t * D + h + i] = (float)sn;
            double next = c * c1 - sn * s1;
            sn = sn * c1 + c * s1;
            c = next;
        }
    }
}

tg_status tg_ir_build_tables(tg_graph *g) {
    for (int i = 0; i < g->n; i++) {
        tg_node *n = &g->nodes[i];
        if (n->op != TG_OP_CONST || n->at.fill.table != 1 || n->data) continue;
        int64_t T = n->shape.d[0], D = n->shape.d[1];
        if (!(n->data = malloc((size_t)(T * D > 0 ? T * D : 1) * sizeof(float)))) {
            char s[96];
            return tg_fail(TG_ERR_NOMEM, "compile: out of memory for rope's angle table %s (%s:%d)",
                           tg_shape_str(n->shape, s, sizeof s), n->file ? n->file : "?", n->line);
        }
        rope_table(n->data, T, D, (double)n->at.fill.value);
    }
    return TG_OK;
}
