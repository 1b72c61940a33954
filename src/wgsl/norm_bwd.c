/* A layer or RMS norm's backward with x and gy read once. Unfused it is two
 * kernels over the same rows: norm_dx, and norm_dgain (the column sums of
 * gy * xh, with the bias's column sums of gy beside it, grouping.c's
 * siblings), which re-reads x and gy.
 * Fused (grouping.c's norm_backward groups norm_dx with both sums, stored
 * through st2 and st3), norm_dx's kernel sums them too:
 *
 *   phase 1: S workgroups, each walking a chunk of consecutive rows in
 *     turn (tg_kernel_rows_open_chunks), a row at a time exactly as norm_dx
 *     does (dx and its epilogue stored as unfused). In the register form an
 *     invocation owns the same columns (lid + j * wg) of every row, so it
 *     adds its rows' gy * xh (and gy) into registers with no reduction
 *     across invocations, and at the end writes them to the workspace as
 *     [S][D] (the bias's after the gain's);
 *   phase 2: the column sums of the [S, D] partials (tg_kernel_colsum_rows,
 *     the column sums' own kernel: a column's chunks spread over a
 *     workgroup's row sets, so that no invocation walks all S of them in
 *     turn), stored through st2 and st3.
 *
 * A single chunk stores its sums in phase 1: one dispatch. The sums are
 * deterministic (their order fixed by the shape) and differ from the
 * unfused kernels' only by rounding. Where rows are not in the register
 * form (32 or fewer, the loop form forced, longer than its registers hold)
 * the fusion pass leaves the two kernels as they are. */
#include <stdio.h>

#include "emit.h"

/* Chunks of NORM_CHUNK rows. A workgroup walks its rows one after
 * another, so what keeps loads in flight is the number of workgroups, not
 * the rows each takes: longer chunks (fewer workgroups) were slower than
 * the unfused kernels, chunks of 8 faster (docs/performance.md, "Row
 * kernels and column sums"). The partials (written once and read once, D
 * or 2 D floats a chunk) are then a sixth of the bytes phase 1 moves (x
 * and gy read, dx written). Few rows make few chunks, down to one
 * (R <= NORM_CHUNK). */
#define NORM_CHUNK 8

/* dx: [R, D] */
static void dims(const tg_node *n, int64_t *R, int64_t *D) {
    *D = n->shape.ndim ? n->shape.d[n->shape.ndim - 1] : 1;
    *R = *D ? tg_ir_numel(n) / *D : 0;
}

int tg_wgsl_norm_bwd_chunks(const tg_graph *g, int dx, bool bias, const tg_wgsl_limits *lim) {
    const tg_node *n = &g->nodes[dx];
    int64_t R, D;
    dims(n, &R, &D);
    if (n->op != TG_OP_NORM_DX || n->dtype != TG_F32 || R < 1 || !tg_kernel_rows_regs(lim, D)) return 0;
    int64_t S = tg_wgsl_forced()->norm_backward, room = (int64_t)(lim->max_storage_buffer_binding_size / ((uint64_t)D * 4 * (1 + bias)));
    if (S <= 0) S = (R + NORM_CHUNK - 1) / NORM_CHUNK;
    if (S > R) S = R;
    if (S > room) S = room; /* the partials within one binding */
    if (S < 1) return 0;
    int64_t chunk = (R + S - 1) / S;
    return (int)((R + chunk - 1) / chunk); /* no empty chunk */
}

int tg_wgsl_norm_bwd_phases(const tg_graph *g, int dx, bool bias, const tg_wgsl_limits *lim, int64_t *work_bytes) {
    int64_t R, D, S = tg_wgsl_norm_bwd_chunks(g, dx, bias, lim);
    dims(&g->nodes[dx], &R, &D);
    *work_bytes = S > 1 ? S * D * 4 * (1 + bias) : 0;
    return S > 1 ? 2 : 1;
}

/* norm_dx with its siblings: (x [R, D], gain [D], gy [R, D], stats [R, 2])
 * -> dx [R, D], dgain [D] (through st2) and, with a bias, dbias [D] (st3);
 * partials [S, D] (and [S, D] more) in the workspace over S > 1 chunks. */
bool tg_wgsl_norm_bwd(wgsl_kernel *k) {
    int64_t R, D;
    dims(k->n, &R, &D);
    bool bias = k->second_sibling > 0;
    int S = tg_wgsl_norm_bwd_chunks(k->g, k->id, bias, k->lim);
    if (S < 1) return tg_kernel_fail(k, TG_ERR_BACKEND, "the fused norm backward does not apply to rows of %lld", (long long)D);
    if (S > 1 && k->phase == 0) return tg_kernel_fail(k, TG_ERR_BACKEND, "a fused norm backward in chunks runs in two phases");
    if (S > 1 && k->phase == 2) { /* the partials' column sums, [S, D] -> [D] (and the bias's after them) */
        char a[96], b[96];
        snprintf(a, sizeof a, "bitcast<f32>(work[r * %lldu + c])", (long long)D);
        snprintf(b, sizeof b, "bitcast<f32>(work[%lldu + r * %lldu + c])", (long long)S * D, (long long)D);
        return tg_kernel_colsum_rows(k, S, D, 1, a, bias ? b : NULL, "f32", "st2", "st3");
    }
    row_kernel L;
    if (!tg_kernel_rows_open_chunks(&L, k, R, D, S, (R + S - 1) / S)) return false;
    tg_kernel_rows_cache(&L, 0u, 2u); /* the gain, read once */
    for (int j = 0; j < L.regs; j++) {
        tg_source_printf(&k->source, "    var pa%d = 0.0f;\n", j);
        if (bias) tg_source_printf(&k->source, "    var pb%d = 0.0f;\n", j);
    }
    tg_kernel_rows_chunk_row(&L);
    tg_kernel_rows_cache(&L, 1u | 4u, 0u); /* x and gy by element */
    L.by_col = 2u;                      /* and the gain's registers from before the loop */
    tg_wgsl_norm_dx_row(&L);
    /* as norm_dgain's sum: gy * ((x - mean) * rstd); a slot past the row adds zeros it never stores */
    for (int j = 0; j < L.regs; j++) {
        tg_source_printf(&k->source, "    pa%d += r2_%d * ((r0_%d - mean) * rstd);\n", j, j, j);
        if (bias) tg_source_printf(&k->source, "    pb%d += r2_%d;\n", j, j);
    }
    tg_source_printf(&k->source, "    }\n");
    for (int j = 0; j < L.regs; j++) {
        tg_source_printf(&k->source, "    if (lid + %uu < %lldu) {\n", j * L.step, (long long)D);
        for (int t = 0; t <= bias; t++) {
            if (S > 1)
                tg_source_printf(&k->source, "        work[%lldu + gid * %lldu + lid + %uu] = bitcast<u32>(p%c%d);\n",
                              (long long)(t * S * D), (long long)D, j * L.step, t ? 'b' : 'a', j);
            else tg_source_printf(&k->source, "        %s(lid + %uu, p%c%d);\n", t ? "st3" : "st2", j * L.step, t ? 'b' : 'a', j);
        }
        tg_source_printf(&k->source, "    }\n");
    }
    tg_kernel_end(k);
    return true;
}
