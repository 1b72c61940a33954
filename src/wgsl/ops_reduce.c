/* Reductions and the softmax family in WGSL (CPU: kernels_reduce.c), on
 * the row and column kernels of rows.c. Long sums are tree-reduced, so they
 * are close to the CPU's, not bit-identical. */
#include <stdio.h>

#include "emit.h"
#include "../ir/iter.h"

/* A sum's axes: x's (after merging) split into kept ones (kd, ks: sizes and
 * x's strides) and reduced ones (rd, rs), R elements summed per output. */
typedef struct {
    int64_t kd[TG_MAX_DIMS], ks[TG_MAX_DIMS], rd[TG_MAX_DIMS], rs[TG_MAX_DIMS];
    int nk, nr;
    int64_t n_out, R;
} sum_geom;

static sum_geom sum_geometry(const tg_node *n, const tg_node *x) {
    int64_t ost[1][TG_MAX_DIMS];
    tg_shape_bcast_strides(n->shape, x->shape, ost[0]);
    tg_iter it;
    tg_iter_init(&it, x->shape, 1, ost); /* operand 0: x's strides, 1: the output's (0 on reduced axes) */
    sum_geom q = {.nk = 0};
    for (int a = 0; a < it.nd; a++) {
        if (it.st[1][a]) q.kd[q.nk] = it.d[a], q.ks[q.nk++] = it.st[0][a];
        else if (it.d[a] > 1) q.rd[q.nr] = it.d[a], q.rs[q.nr++] = it.st[0][a];
    }
    q.n_out = tg_ir_numel(n);
    q.R = q.n_out ? tg_ir_numel(x) / q.n_out : 0;
    return q;
}

/* [R, C] -> [C] (a bias gradient): a column sum. */
static bool sum_by_columns(const sum_geom *q) {
    return q->nk == 1 && q->ks[0] == 1 && q->nr == 1 && q->rs[0] == q->kd[0] && q->R > 8;
}

bool tg_wgsl_colsum_dims(const tg_graph *g, const tg_node *n, int64_t *R, int64_t *C) {
    const tg_node *x = n->nin ? &g->nodes[n->in[0]] : NULL;
    switch (n->op) {
    case TG_OP_SUM: {
        sum_geom q = sum_geometry(n, x);
        if (!sum_by_columns(&q)) return false;
        *R = q.R, *C = q.kd[0];
        return true;
    }
    case TG_OP_NORM_DGAIN: /* x [R, D] -> [D] */
        *C = x->shape.ndim ? x->shape.d[x->shape.ndim - 1] : 1;
        *R = *C ? tg_ir_numel(x) / *C : 0;
        return true;
    case TG_OP_CONV2D_GRAD_WEIGHT: return tg_wgsl_conv2d_dw_dims(g, n, R, C);
    default: return false;
    }
}

int tg_wgsl_phases(const tg_graph *g, int id, const tg_wgsl_limits *lim, int64_t *work_bytes) {
    const tg_node *n = &g->nodes[id];
    int64_t R, C;
    tg_wgsl_emb_split e;
    *work_bytes = 0;
    if (n->op == TG_OP_MATMUL) return tg_wgsl_matmul_split(g, id, work_bytes) > 1 ? 2 : 1;
    if (n->op == TG_OP_EMBEDDING_GRAD && tg_wgsl_embedding_grad_split(g, n, lim, &e)) {
        if (e.S > 1) *work_bytes = (int64_t)e.S * e.V * e.D * 4;
        return e.S > 1 ? 2 : 1;
    }
    if (n->op == TG_OP_EMBEDDING_GRAD) { /* sorted (scatter.c) */
        *work_bytes = tg_wgsl_sort_work(tg_ir_numel(&g->nodes[n->in[0]]), n->at.classes.v);
        return 2;
    }
    if (tg_wgsl_take_grad_sorted(g, n, lim, work_bytes)) return 2;
    if (!tg_wgsl_colsum_dims(g, n, &R, &C)) return 1;
    int S = tg_kernel_colsum_chunks(R, C);
    if (S > 1) *work_bytes = (int64_t)S * C * 4;
    return S > 1 ? 2 : 1;
}

int tg_wgsl_fused_phases(const tg_graph *g, const tg_wgsl_fused_kernel *f, const tg_wgsl_limits *lim, int64_t *work_bytes) {
    const tg_node *n = &g->nodes[f->kernel];
    if (n->op == TG_OP_NORM_DX && f->sibling) return tg_wgsl_norm_bwd_phases(g, f->kernel, f->second_sibling > 0, lim, work_bytes);
    int phases = tg_wgsl_phases(g, f->kernel, lim, work_bytes);
    if (phases > 1 && f->sibling) /* the sibling's partials follow the kernel's */
        *work_bytes = n->op == TG_OP_MATMUL ? tg_wgsl_matmul_colsum_work(g, f->kernel) : 2 * *work_bytes;
    return phases;
}

/* sum over an axis mask, keepdims: x [...] -> [...] with reduced axes of size 1. */
bool tg_wgsl_sum(wgsl_kernel *k) {
    const tg_node *n = k->n;
    sum_geom q = sum_geometry(n, tg_kernel_in(k, 0));
    int nk = q.nk, nr = q.nr;
    const int64_t *ks = q.ks, *rs = q.rs;
    int64_t n_out = q.n_out, R = q.R;
    bool contiguous = nr == 1 && rs[0] == 1 && (nk == 0 || ks[nk - 1] == R);
    const char *t = tg_kernel_type(n->dtype);
    tg_kernel_index_fn(k, "obase", nk, q.kd, ks);
    tg_kernel_index_fn(k, "roff", nr, q.rd, rs);
    if (sum_by_columns(&q)) {
        char e[64];
        snprintf(e, sizeof e, "ld0(r * %lldu + c)", (long long)q.kd[0]);
        return tg_kernel_colsum(k, e, t);
    }
    bool by_thread = (!contiguous || R < 64) && (n_out >= 1024 || R < 64);
    if (by_thread) {
        if (!tg_kernel_flat(k, n_out)) return false;
        tg_source_printf(&k->source,
                   "    let base = obase(i);\n    var acc = %s(0);\n"
                   "    for (var r = 0u; r < %lldu; r++) { acc += ld0(base + roff(r)); }\n"
                   "    st(i, acc);\n",
                   t, (long long)R);
        tg_kernel_end(k);
        return true;
    }
    /* Few outputs (a total): the widest workgroup, as nothing runs beside
     * them; many rows: tg_kernel_row_wg's narrow one. */
    uint32_t wg = tg_kernel_row_wg(k, R);
    if (n_out < 1024)
        while (wg < 256 && wg < R) wg *= 2;
    tg_kernel_red_decl(k, wg, t);
    if (!tg_kernel_main(k, n_out, wg)) return false;
    k->spec->threads = n_out * wg;
    tg_source_printf(&k->source,
               "    if (gid >= %lldu) { return; }\n    let base = obase(gid);\n    var acc = %s(0);\n"
               "    for (var r = lid; r < %lldu; r += %uu) { acc += ld0(base + roff(r)); }\n",
               (long long)n_out, t, (long long)R, wg);
    tg_kernel_reduce(k, wg, "acc", false, "total");
    tg_source_printf(&k->source, "    if (lid == 0u) { st(gid, total); }\n");
    tg_kernel_end(k);
    return true;
}

/* ---- ops along one axis: the tensor viewed as [outer, A, inner] ---- */

static bool open_axis(row_kernel *L, wgsl_kernel *k, int axis) {
    const tg_node *n = k->n;
    int64_t lines = 1, inner = 1;
    for (int i = 0; i < n->shape.ndim; i++)
        if (i < axis) lines *= n->shape.d[i];
        else if (i > axis) inner *= n->shape.d[i];
    return tg_kernel_rows_open(L, k, lines * inner, n->shape.d[axis], inner);
}

#define NEG_INF "f32_bits(0xff800000u)"

/* log_softmax (x), log_softmax_grad (y, gy), softmax_grad (y, gy): each
 * operand and the result [outer, A, inner], along A. */
bool tg_wgsl_softmax_lines(wgsl_kernel *k) {
    row_kernel L;
    if (!open_axis(&L, k, (int)k->n->at.axis.axis)) return false;
    switch (k->n->op) {
    case TG_OP_LOG_SOFTMAX:
        tg_kernel_rows_cache(&L, 1u, 0u);
        tg_source_printf(&k->source, "    var m = " NEG_INF ";\n");
        tg_kernel_rows_each(&L, NULL, "        m = max(m, v0);\n");
        tg_kernel_rows_combine(&L, "m", true, "mx");
        tg_source_printf(&k->source, "    var z = 0.0f;\n");
        tg_kernel_rows_each(&L, NULL, "        z += exp(v0 - mx);\n");
        tg_kernel_rows_combine(&L, "z", false, "zs");
        tg_source_printf(&k->source, "    let lz = mx + log(zs);\n");
        tg_kernel_rows_each(&L, NULL, "        st(p, v0 - lz);\n");
        break;
    case TG_OP_LOG_SOFTMAX_GRAD: /* gx = gy - exp(y) * sum(gy) */
        tg_kernel_rows_cache(&L, 3u, 0u);
        tg_source_printf(&k->source, "    var sg = 0.0f;\n");
        tg_kernel_rows_each(&L, NULL, "        sg += v1;\n");
        tg_kernel_rows_combine(&L, "sg", false, "sgs");
        tg_kernel_rows_each(&L, NULL, "        st(p, v1 - exp(v0) * sgs);\n");
        break;
    case TG_OP_SOFTMAX_GRAD: /* gx = y * (gy - sum(gy * y)) */
        tg_kernel_rows_cache(&L, 3u, 0u);
        tg_source_printf(&k->source, "    var d = 0.0f;\n");
        tg_kernel_rows_each(&L, NULL, "        d += v1 * v0;\n");
        tg_kernel_rows_combine(&L, "d", false, "ds");
        tg_kernel_rows_each(&L, NULL, "        st(p, v0 * (v1 - ds));\n");
        break;
    default: return tg_kernel_fail(k, TG_ERR_BACKEND, "not a softmax-family op");
    }
    tg_kernel_end(k);
    return true;
}

/* softmax over the last axis of [..., Tq, Tk], keys j > query i masked to 0. */
bool tg_wgsl_softmax_causal(wgsl_kernel *k) {
    const tg_shape *s = &k->n->shape;
    int64_t Tk = s->d[s->ndim - 1], Tq = s->d[s->ndim - 2];
    row_kernel L;
    if (!tg_kernel_rows_open(&L, k, Tk ? tg_ir_numel(k->n) / Tk : 0, Tk, 1)) return false;
    tg_kernel_rows_cache(&L, 1u, 0u);
    tg_source_printf(&k->source, "    let valid = min(l %% %lldu + 1u, %lldu);\n    var m = " NEG_INF ";\n", (long long)Tq,
               (long long)Tk);
    tg_kernel_rows_each(&L, "valid", "        m = max(m, v0);\n");
    tg_kernel_rows_combine(&L, "m", true, "mx");
    tg_source_printf(&k->source, "    var z = 0.0f;\n");
    tg_kernel_rows_each(&L, "valid", "        z += exp(v0 - mx);\n");
    tg_kernel_rows_combine(&L, "z", false, "zs");
    tg_source_printf(&k->source, "    let inv = 1.0f / zs;\n");
    tg_kernel_rows_each(&L, NULL, "        st(p, select(0.0f, exp(v0 - mx) * inv, a < valid));\n");
    tg_kernel_end(k);
    return true;
}
