/* Reductions and the softmax family in WGSL (CPU: kernels_reduce.c).
 * Long rows get a workgroup each with a tree reduction in workgroup memory;
 * short rows (and many small outputs) get a thread each, looping in the
 * CPU's order. Sums are therefore not bit-identical to the CPU's, only close. */
#include <stdio.h>

#include "emit.h"
#include "../cpu/kernels.h"

#define SHORT_ROW 32 /* rows this long or shorter: one thread per row */

static uint32_t row_wg(int64_t len) {
    uint32_t wg = 32;
    while (wg < 256 && wg < len) wg *= 2;
    return wg;
}

static void red_decl(wk *k, uint32_t wg, const char *type) {
    wsb_printf(&k->s, "var<workgroup> red: array<%s, %u>;\n", type, wg);
}

/* All invocations contribute `val`; afterwards every one holds the result in
 * `out`. The barriers are in uniform control flow (the loop bound is a literal). */
static void reduce(wk *k, uint32_t wg, const char *val, bool is_max, const char *out) {
    wsb_printf(&k->s,
               "    red[lid] = %s;\n    workgroupBarrier();\n"
               "    for (var s = %uu; s > 0u; s = s >> 1u) {\n"
               "        if (lid < s) { red[lid] = %s; }\n"
               "        workgroupBarrier();\n    }\n"
               "    let %s = red[0];\n    workgroupBarrier();\n",
               val, wg / 2, is_max ? "max(red[lid], red[lid + s])" : "red[lid] + red[lid + s]", out);
}

/* sum over an axis mask, keepdims: x [...] -> [...] with reduced axes of size 1. */
bool wgsl_sum(wk *k) {
    const tg_node *n = k->n, *x = wk_in(k, 0);
    int64_t ost[1][TG_MAX_DIMS];
    shape_bcast_strides(n->shape, x->shape, ost[0]);
    tg_iter it;
    tg_iter_init(&it, x->shape, 1, ost); /* operand 0: x's strides, 1: the output's (0 on reduced axes) */
    int64_t kd[TG_MAX_DIMS], ks[TG_MAX_DIMS], rd[TG_MAX_DIMS], rs[TG_MAX_DIMS];
    int nk = 0, nr = 0;
    for (int a = 0; a < it.nd; a++) {
        if (it.st[1][a]) kd[nk] = it.d[a], ks[nk++] = it.st[0][a];
        else if (it.d[a] > 1) rd[nr] = it.d[a], rs[nr++] = it.st[0][a];
    }
    int64_t n_out = ir_numel(n), R = n_out ? ir_numel(x) / n_out : 0;
    bool contiguous = nr == 1 && rs[0] == 1 && (nk == 0 || ks[nk - 1] == R);
    const char *t = wk_type(n->dtype);
    wk_index_fn(k, "obase", nk, kd, ks);
    wk_index_fn(k, "roff", nr, rd, rs);
    bool by_thread = (!contiguous || R < 64) && (n_out >= 1024 || R < 64);
    if (by_thread) {
        if (!wk_flat(k, n_out)) return false;
        wsb_printf(&k->s,
                   "    let base = obase(i);\n    var acc = %s(0);\n"
                   "    for (var r = 0u; r < %lldu; r++) { acc += ld0(base + roff(r)); }\n"
                   "    st(i, acc);\n",
                   t, (long long)R);
        wk_end(k);
        return true;
    }
    uint32_t wg = row_wg(R);
    red_decl(k, wg, t);
    if (!wk_main(k, n_out, wg)) return false;
    k->spec->threads = n_out * wg;
    wsb_printf(&k->s,
               "    if (gid >= %lldu) { return; }\n    let base = obase(gid);\n    var acc = %s(0);\n"
               "    for (var r = lid; r < %lldu; r += %uu) { acc += ld0(base + roff(r)); }\n",
               (long long)n_out, t, (long long)R, wg);
    reduce(k, wg, "acc", false, "total");
    wsb_printf(&k->s, "    if (lid == 0u) { st(gid, total); }\n");
    wk_end(k);
    return true;
}

/* ---- ops along one axis: the tensor viewed as [outer, A, inner] ---- */

typedef struct {
    int64_t lines, A, inner;
} axis_view;

static axis_view view_of(const tg_node *n, int axis) {
    axis_view v = {1, n->shape.d[axis], 1};
    for (int i = 0; i < n->shape.ndim; i++)
        if (i < axis) v.lines *= n->shape.d[i];
        else if (i > axis) v.inner *= n->shape.d[i];
    v.lines *= v.inner;
    return v;
}

/* Per-line loops in the body: `for (a ...)` over the line's elements, with
 * `p` the element index. One thread per line runs them in order; a
 * workgroup strides them over its invocations. */
typedef struct {
    wk *k;
    bool wide;
    uint32_t wg;
    axis_view v;
} lines;

static void loop_open(lines *L, const char *len) {
    if (L->wide) wsb_printf(&L->k->s, "    for (var a = lid; a < %s; a += %uu) {\n", len, L->wg);
    else wsb_printf(&L->k->s, "    for (var a = 0u; a < %s; a++) {\n", len);
    wsb_printf(&L->k->s, "        let p = base + a * %lldu;\n", (long long)L->v.inner);
}

/* Combines the per-thread partial `var` across the workgroup (wide only). */
static void combine(lines *L, const char *var, bool is_max, const char *out) {
    if (L->wide) reduce(L->k, L->wg, var, is_max, out);
    else wsb_printf(&L->k->s, "    let %s = %s;\n", out, var);
}

static bool lines_open(lines *L) {
    wk *k = L->k;
    L->wide = L->v.A > SHORT_ROW;
    L->wg = row_wg(L->v.A);
    if (L->wide) {
        red_decl(k, L->wg, "f32");
        if (!wk_main(k, L->v.lines, L->wg)) return false;
        k->spec->threads = L->v.lines * L->wg;
        wsb_printf(&k->s, "    let l = gid;\n    if (l >= %lldu) { return; }\n", (long long)L->v.lines);
    } else {
        if (!wk_flat(k, L->v.lines)) return false;
        wsb_printf(&k->s, "    let l = i;\n");
    }
    if (L->v.inner == 1) wsb_printf(&k->s, "    let base = l * %lldu;\n", (long long)L->v.A);
    else
        wsb_printf(&k->s, "    let base = (l / %lldu) * %lldu + l %% %lldu;\n", (long long)L->v.inner,
                   (long long)(L->v.A * L->v.inner), (long long)L->v.inner);
    return true;
}

#define NEG_INF "f32_bits(0xff800000u)"

/* log_softmax(x), log_softmax_grad(y, gy), softmax_grad(y, gy) along ia[0]. */
bool wgsl_softmax_lines(wk *k) {
    lines L = {k, false, 0, view_of(k->n, (int)k->n->ia[0])};
    char A[32];
    snprintf(A, sizeof A, "%lldu", (long long)L.v.A);
    if (!lines_open(&L)) return false;
    switch (k->n->op) {
    case TG_OP_LOG_SOFTMAX:
        wsb_printf(&k->s, "    var m = " NEG_INF ";\n");
        loop_open(&L, A);
        wsb_printf(&k->s, "        m = max(m, ld0(p));\n    }\n");
        combine(&L, "m", true, "mx");
        wsb_printf(&k->s, "    var z = 0.0f;\n");
        loop_open(&L, A);
        wsb_printf(&k->s, "        z += exp(ld0(p) - mx);\n    }\n");
        combine(&L, "z", false, "zs");
        wsb_printf(&k->s, "    let lz = mx + log(zs);\n");
        loop_open(&L, A);
        wsb_printf(&k->s, "        st(p, ld0(p) - lz);\n    }\n");
        break;
    case TG_OP_LOG_SOFTMAX_GRAD: /* gx = gy - exp(y) * sum(gy) */
        wsb_printf(&k->s, "    var sg = 0.0f;\n");
        loop_open(&L, A);
        wsb_printf(&k->s, "        sg += ld1(p);\n    }\n");
        combine(&L, "sg", false, "sgs");
        loop_open(&L, A);
        wsb_printf(&k->s, "        st(p, ld1(p) - exp(ld0(p)) * sgs);\n    }\n");
        break;
    case TG_OP_SOFTMAX_GRAD: /* gx = y * (gy - sum(gy * y)) */
        wsb_printf(&k->s, "    var d = 0.0f;\n");
        loop_open(&L, A);
        wsb_printf(&k->s, "        d += ld1(p) * ld0(p);\n    }\n");
        combine(&L, "d", false, "ds");
        loop_open(&L, A);
        wsb_printf(&k->s, "        st(p, ld0(p) * (ld1(p) - ds));\n    }\n");
        break;
    default: return wk_fail(k, TG_ERR_BACKEND, "not a softmax-family op");
    }
    wk_end(k);
    return true;
}

/* softmax over the last axis of [..., Tq, Tk], keys j > query i masked to 0. */
bool wgsl_softmax_causal(wk *k) {
    const tg_shape *s = &k->n->shape;
    int64_t Tk = s->d[s->ndim - 1], Tq = s->d[s->ndim - 2];
    lines L = {k, false, 0, {Tk ? ir_numel(k->n) / Tk : 0, Tk, 1}};
    char A[32];
    snprintf(A, sizeof A, "%lldu", (long long)Tk);
    if (!lines_open(&L)) return false;
    wsb_printf(&k->s, "    let valid = min(l %% %lldu + 1u, %lldu);\n    var m = " NEG_INF ";\n", (long long)Tq,
               (long long)Tk);
    loop_open(&L, "valid");
    wsb_printf(&k->s, "        m = max(m, ld0(p));\n    }\n");
    combine(&L, "m", true, "mx");
    wsb_printf(&k->s, "    var z = 0.0f;\n");
    loop_open(&L, "valid");
    wsb_printf(&k->s, "        z += exp(ld0(p) - mx);\n    }\n");
    combine(&L, "z", false, "zs");
    wsb_printf(&k->s, "    let inv = 1.0f / zs;\n");
    loop_open(&L, A);
    wsb_printf(&k->s, "        st(p, select(0.0f, exp(ld0(p) - mx) * inv, a < valid));\n    }\n");
    wk_end(k);
    return true;
}
