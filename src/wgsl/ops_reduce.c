/* Reductions and the softmax family in WGSL (CPU: kernels_reduce.c), on
 * the row and column kernels of rows.c. Long sums are tree-reduced, so they
 * are close to the CPU's, not bit-identical. */
#include <stdio.h>

#include "emit.h"
#include "../ir/iter.h"

/* sum over an axis mask, keepdims: x [...] -> [...] with reduced axes of size 1. */
bool tg_wgsl_sum(wk *k) {
    const tg_node *n = k->n, *x = tg_wk_in(k, 0);
    int64_t ost[1][TG_MAX_DIMS];
    tg_shape_bcast_strides(n->shape, x->shape, ost[0]);
    tg_iter it;
    tg_iter_init(&it, x->shape, 1, ost); /* operand 0: x's strides, 1: the output's (0 on reduced axes) */
    int64_t kd[TG_MAX_DIMS], ks[TG_MAX_DIMS], rd[TG_MAX_DIMS], rs[TG_MAX_DIMS];
    int nk = 0, nr = 0;
    for (int a = 0; a < it.nd; a++) {
        if (it.st[1][a]) kd[nk] = it.d[a], ks[nk++] = it.st[0][a];
        else if (it.d[a] > 1) rd[nr] = it.d[a], rs[nr++] = it.st[0][a];
    }
    int64_t n_out = tg_ir_numel(n), R = n_out ? tg_ir_numel(x) / n_out : 0;
    bool contiguous = nr == 1 && rs[0] == 1 && (nk == 0 || ks[nk - 1] == R);
    const char *t = tg_wk_type(n->dtype);
    tg_wk_index_fn(k, "obase", nk, kd, ks);
    tg_wk_index_fn(k, "roff", nr, rd, rs);
    if (nk == 1 && ks[0] == 1 && nr == 1 && rs[0] == kd[0] && R > 8) { /* [R, C] -> [C]: a bias gradient */
        char e[64];
        snprintf(e, sizeof e, "ld0(r * %lldu + c)", (long long)kd[0]);
        return tg_wk_colsum(k, R, kd[0], e, t);
    }
    bool by_thread = (!contiguous || R < 64) && (n_out >= 1024 || R < 64);
    if (by_thread) {
        if (!tg_wk_flat(k, n_out)) return false;
        tg_wsb_printf(&k->s,
                   "    let base = obase(i);\n    var acc = %s(0);\n"
                   "    for (var r = 0u; r < %lldu; r++) { acc += ld0(base + roff(r)); }\n"
                   "    st(i, acc);\n",
                   t, (long long)R);
        tg_wk_end(k);
        return true;
    }
    /* Few outputs (a total): the widest workgroup, as nothing runs beside
     * them; many rows: tg_wk_row_wg's narrow one. */
    uint32_t wg = tg_wk_row_wg(R);
    if (n_out < 1024)
        while (wg < 256 && wg < R) wg *= 2;
    tg_wk_red_decl(k, wg, t);
    if (!tg_wk_main(k, n_out, wg)) return false;
    k->spec->threads = n_out * wg;
    tg_wsb_printf(&k->s,
               "    if (gid >= %lldu) { return; }\n    let base = obase(gid);\n    var acc = %s(0);\n"
               "    for (var r = lid; r < %lldu; r += %uu) { acc += ld0(base + roff(r)); }\n",
               (long long)n_out, t, (long long)R, wg);
    tg_wk_reduce(k, wg, "acc", false, "total");
    tg_wsb_printf(&k->s, "    if (lid == 0u) { st(gid, total); }\n");
    tg_wk_end(k);
    return true;
}

/* ---- ops along one axis: the tensor viewed as [outer, A, inner] ---- */

static bool open_axis(wk_rows *L, wk *k, int axis) {
    const tg_node *n = k->n;
    int64_t lines = 1, inner = 1;
    for (int i = 0; i < n->shape.ndim; i++)
        if (i < axis) lines *= n->shape.d[i];
        else if (i > axis) inner *= n->shape.d[i];
    return tg_wk_rows_open(L, k, lines * inner, n->shape.d[axis], inner);
}

#define NEG_INF "f32_bits(0xff800000u)"

/* log_softmax(x), log_softmax_grad(y, gy), softmax_grad(y, gy) along the axis. */
bool tg_wgsl_softmax_lines(wk *k) {
    wk_rows L;
    if (!open_axis(&L, k, (int)k->n->at.axis.axis)) return false;
    char A[32];
    snprintf(A, sizeof A, "%lldu", (long long)L.A);
    switch (k->n->op) {
    case TG_OP_LOG_SOFTMAX:
        tg_wsb_printf(&k->s, "    var m = " NEG_INF ";\n");
        tg_wk_rows_loop(&L, A);
        tg_wsb_printf(&k->s, "        m = max(m, ld0(p));\n    }\n");
        tg_wk_rows_combine(&L, "m", true, "mx");
        tg_wsb_printf(&k->s, "    var z = 0.0f;\n");
        tg_wk_rows_loop(&L, A);
        tg_wsb_printf(&k->s, "        z += exp(ld0(p) - mx);\n    }\n");
        tg_wk_rows_combine(&L, "z", false, "zs");
        tg_wsb_printf(&k->s, "    let lz = mx + log(zs);\n");
        tg_wk_rows_loop(&L, A);
        tg_wsb_printf(&k->s, "        st(p, ld0(p) - lz);\n    }\n");
        break;
    case TG_OP_LOG_SOFTMAX_GRAD: /* gx = gy - exp(y) * sum(gy) */
        tg_wsb_printf(&k->s, "    var sg = 0.0f;\n");
        tg_wk_rows_loop(&L, A);
        tg_wsb_printf(&k->s, "        sg += ld1(p);\n    }\n");
        tg_wk_rows_combine(&L, "sg", false, "sgs");
        tg_wk_rows_loop(&L, A);
        tg_wsb_printf(&k->s, "        st(p, ld1(p) - exp(ld0(p)) * sgs);\n    }\n");
        break;
    case TG_OP_SOFTMAX_GRAD: /* gx = y * (gy - sum(gy * y)) */
        tg_wsb_printf(&k->s, "    var d = 0.0f;\n");
        tg_wk_rows_loop(&L, A);
        tg_wsb_printf(&k->s, "        d += ld1(p) * ld0(p);\n    }\n");
        tg_wk_rows_combine(&L, "d", false, "ds");
        tg_wk_rows_loop(&L, A);
        tg_wsb_printf(&k->s, "        st(p, ld0(p) * (ld1(p) - ds));\n    }\n");
        break;
    default: return tg_wk_fail(k, TG_ERR_BACKEND, "not a softmax-family op");
    }
    tg_wk_end(k);
    return true;
}

/* softmax over the last axis of [..., Tq, Tk], keys j > query i masked to 0. */
bool tg_wgsl_softmax_causal(wk *k) {
    const tg_shape *s = &k->n->shape;
    int64_t Tk = s->d[s->ndim - 1], Tq = s->d[s->ndim - 2];
    wk_rows L;
    if (!tg_wk_rows_open(&L, k, Tk ? tg_ir_numel(k->n) / Tk : 0, Tk, 1)) return false;
    char A[32];
    snprintf(A, sizeof A, "%lldu", (long long)Tk);
    tg_wsb_printf(&k->s, "    let valid = min(l %% %lldu + 1u, %lldu);\n    var m = " NEG_INF ";\n", (long long)Tq,
               (long long)Tk);
    tg_wk_rows_loop(&L, "valid");
    tg_wsb_printf(&k->s, "        m = max(m, ld0(p));\n    }\n");
    tg_wk_rows_combine(&L, "m", true, "mx");
    tg_wsb_printf(&k->s, "    var z = 0.0f;\n");
    tg_wk_rows_loop(&L, "valid");
    tg_wsb_printf(&k->s, "        z += exp(ld0(p) - mx);\n    }\n");
    tg_wk_rows_combine(&L, "z", false, "zs");
    tg_wsb_printf(&k->s, "    let inv = 1.0f / zs;\n");
    tg_wk_rows_loop(&L, A);
    tg_wsb_printf(&k->s, "        st(p, select(0.0f, exp(ld0(p) - mx) * inv, a < valid));\n    }\n");
    tg_wk_end(k);
    return true;
}
