/* Scatter-adds in WGSL by sorting the indices (CPU: kernels_nn.c's
 * embedding gradient and kernels_math.c's take_along_axis gradient): the
 * embedding gradient of a table too big for the warps form (ops_nn.c), and
 * take_along_axis's gradient over many indices a line.
 *
 * WGSL has no f32 atomics, and float sums in the order threads happen to
 * arrive would change bits from run to run. So the indices are sorted
 * first, stably (a counting sort: per-index counts, their prefix sum, each
 * index's rank among the equal ones before it), and then every table row
 * sums its own segment of the sorted indices in index order, starting from
 * 0, as the CPU does: the same bits every run, the same as the CPU's
 * in-order sums, and a cost of O(indices x D + table) however the indices
 * repeat, where a loop over every index for each table element costs
 * O(indices x table). The sort runs in one workgroup: the counts live in
 * the workspace (the table's indices do not fit workgroup memory), and
 * with no atomics on the workspace each chunk of indices ranks its equal
 * entries in workgroup memory, then the last of them adds the chunk's
 * count, chunk after chunk.
 *
 * The workspace of a sort over R indices into V slots, as u32:
 *   start [V + 1]  counts, then their exclusive prefix sums (start[V]: the total)
 *   rank  [R]      each index's rank among the equal ones before it
 *   order [R]      the positions of the valid indices, sorted by index, stably */
#include <stdio.h>

#include "emit.h"

#define SORT_WG 256u /* the sorting workgroup: a chunk of indices ranked at a time */

int64_t tg_wgsl_sort_work(int64_t R, int64_t V) { return (V + 1 + 2 * R) * 4; }

/* The body of a sort, in one workgroup (lid < SORT_WG, uniform control flow
 * around it), of the R indices `index(r)` (an i32 expression in r: negative
 * or >= V for none) into V slots, over the workspace at u32 offset `base`
 * (an expression). Declares nothing; needs `ids` (array<i32, SORT_WG>) and
 * `part` (array<u32, SORT_WG>) in workgroup memory. */
static void sort_body(wgsl_kernel *k, int64_t R, int64_t V, const char *base, const char *index) {
    long long Rl = R, Vl = V, W = SORT_WG;
    long long per = (V + W - 1) / W; /* slots an invocation scans */
    tg_source_printf(&k->source,
                  "    let s_start = %s;\n    let s_rank = s_start + %lldu;\n    let s_order = s_rank + %lldu;\n"
                  "    for (var v = lid; v < %lldu; v += %lluu) { work[s_start + v] = 0u; }\n"
                  "    storageBarrier();\n",
                  base, Vl + 1, Rl, Vl, W);
    /* Chunk after chunk: rank each index among the chunk's equal ones
     * before it, add the count of the chunks before (read by all, then
     * written by the chunk's last equal one), so rank = the equal indices
     * before it in the whole list. */
    tg_source_printf(&k->source,
                  "    for (var c0 = 0u; c0 < %lldu; c0 += %lluu) {\n"
                  "        let r = c0 + lid;\n"
                  "        var t = -1;\n"
                  "        if (r < %lldu) {\n"
                  "            let x = %s;\n"
                  "            if (x >= 0 && x < %lldi) { t = x; }\n"
                  "        }\n"
                  "        ids[lid] = t;\n"
                  "        workgroupBarrier();\n"
                  "        let n = min(%lluu, %lldu - c0);\n"
                  "        var before = 0u;\n        var after = 0u;\n"
                  "        for (var j = 0u; j < n; j++) {\n"
                  "            let same = ids[j] == t;\n"
                  "            before += select(0u, 1u, same && j < lid);\n"
                  "            after += select(0u, 1u, same && j > lid);\n"
                  "        }\n"
                  "        var prior = 0u;\n"
                  "        if (t >= 0) { prior = work[s_start + u32(t)]; }\n"
                  "        storageBarrier();\n"
                  "        if (t >= 0) {\n"
                  "            work[s_rank + r] = prior + before;\n"
                  "            if (after == 0u) { work[s_start + u32(t)] = prior + before + 1u; }\n"
                  "        }\n"
                  "        storageBarrier();\n"
                  "    }\n",
                  Rl, W, Rl, index, Vl, W, Rl);
    /* The counts' exclusive prefix sums: each invocation sums a run of
     * slots, the runs' totals are summed in workgroup memory by one
     * invocation (SORT_WG of them), then each run is rewritten. */
    tg_source_printf(&k->source,
                  "    let lo = min(lid * %lldu, %lldu);\n    let hi = min(lo + %lldu, %lldu);\n"
                  "    var run = 0u;\n"
                  "    for (var v = lo; v < hi; v++) { run += work[s_start + v]; }\n"
                  "    part[lid] = run;\n"
                  "    workgroupBarrier();\n"
                  "    if (lid == 0u) {\n"
                  "        var acc = 0u;\n"
                  "        for (var q = 0u; q < %lluu; q++) { let x = part[q]; part[q] = acc; acc += x; }\n"
                  "        work[s_start + %lldu] = acc;\n"
                  "    }\n"
                  "    workgroupBarrier();\n"
                  "    var at = part[lid];\n"
                  "    for (var v = lo; v < hi; v++) { let x = work[s_start + v]; work[s_start + v] = at; at += x; }\n"
                  "    storageBarrier();\n",
                  per, Vl, per, Vl, W, Vl);
    /* Each valid index to its place: its slot's start plus its rank. */
    tg_source_printf(&k->source,
                  "    for (var r = lid; r < %lldu; r += %lluu) {\n"
                  "        let x = %s;\n"
                  "        if (x >= 0 && x < %lldi) { work[s_order + work[s_start + u32(x)] + work[s_rank + r]] = r; }\n"
                  "    }\n",
                  Rl, W, index, Vl);
}

/* `acc` = the sum, in order, of term(j) over the sources j =
 * work[s_order + q] for q in [s, e): term is a format with one %s for the
 * u32 source position. Four sources' loads are issued before their adds. */
static void segment_sum(wgsl_kernel *k, const char *term) {
    char t[160], j[8];
    tg_source_printf(&k->source, "    var acc = 0.0f;\n    var q = s;\n    while (q + 4u <= e) {\n");
    for (int u = 0; u < 4; u++) tg_source_printf(&k->source, "        let j%d = work[s_order + q + %du];\n", u, u);
    for (int u = 0; u < 4; u++) {
        snprintf(j, sizeof j, "j%d", u);
        snprintf(t, sizeof t, term, j);
        tg_source_printf(&k->source, "        let g%d = %s;\n", u, t);
    }
    snprintf(t, sizeof t, term, "work[s_order + q]");
    tg_source_printf(&k->source, "        acc += g0;\n        acc += g1;\n        acc += g2;\n        acc += g3;\n"
                         "        q += 4u;\n    }\n    for (; q < e; q++) { acc += %s; }\n",
                  t);
}

/* Phase 1 of a sorted scatter-add: `lines` workgroups, each sorting its
 * line's R indices into V slots in its own part of the workspace. */
static bool sort_phase(wgsl_kernel *k, int64_t lines, int64_t R, int64_t V, const char *index) {
    tg_kernel_shared(k, "ids", "i32", SORT_WG);
    tg_kernel_shared(k, "part", "u32", SORT_WG);
    if (!tg_kernel_main(k, lines, SORT_WG)) return false;
    k->spec->threads = lines * SORT_WG;
    char base[48];
    snprintf(base, sizeof base, "gid * %lldu", (long long)(tg_wgsl_sort_work(R, V) / 4));
    tg_source_printf(&k->source, "    if (gid >= %lldu) { return; }\n", (long long)lines);
    sort_body(k, R, V, base, index);
    tg_kernel_end(k);
    return true;
}

/* embedding_grad (idx [R], gy [R, D]) -> [V, D]: phase 1 sorts the indices
 * in one workgroup, phase 2 gives each table element (an invocation each)
 * the sum of its row's segment. */
bool tg_wgsl_embedding_grad_sorted(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t V = n->at.classes.v, D = n->shape.d[1], R = tg_ir_numel(tg_kernel_in(k, 0));
    if (k->phase == 1) return sort_phase(k, 1, R, V, "ld0(r)");
    if (k->phase != 2) return tg_kernel_fail(k, TG_ERR_BACKEND, "a sorted scatter-add runs in two phases");
    if (!tg_kernel_flat(k, V * D)) return false;
    char term[64];
    snprintf(term, sizeof term, "ld1(%%s * %lldu + c)", (long long)D);
    tg_source_printf(&k->source,
                  "    let s_order = %lldu;\n    let v = i / %lldu;\n    let c = i %% %lldu;\n"
                  "    let s = work[v];\n    let e = work[v + 1u];\n",
                  (long long)(V + 1 + R), (long long)D, (long long)D);
    segment_sum(k, term);
    tg_source_printf(&k->source, "    st(i, acc);\n");
    tg_kernel_end(k);
    return true;
}

/* take_along_axis_grad over K indices a line of [outer, K, inner] into A
 * slots: the direct form (ops_math.c) reads the line's K indices for every
 * gx element, which costs little while K is small; from TAKE_SORT_K
 * indices a line, each line is sorted instead, where the workspace fits. */
#define TAKE_SORT_K 16

static void take_dims(const tg_graph *g, const tg_node *n, int64_t *outer, int64_t *A, int64_t *inner, int64_t *K) {
    int axis = (int)n->at.axis.axis;
    *outer = *inner = 1;
    for (int i = 0; i < n->shape.ndim; i++)
        if (i < axis) *outer *= n->shape.d[i];
        else if (i > axis) *inner *= n->shape.d[i];
    *A = n->shape.d[axis];
    *K = g->nodes[n->in[1]].shape.d[axis];
}

bool tg_wgsl_take_grad_sorted(const tg_graph *g, const tg_node *n, const tg_wgsl_limits *lim, int64_t *work_bytes) {
    int64_t outer, A, inner, K;
    if (n->op != TG_OP_TAKE_ALONG_AXIS_GRAD) return false;
    take_dims(g, n, &outer, &A, &inner, &K);
    if (K < TAKE_SORT_K || A < 1 || outer * inner < 1) return false;
    int64_t w = outer * inner * tg_wgsl_sort_work(K, A);
    if ((uint64_t)w > lim->max_storage_buffer_binding_size || outer * inner > (int64_t)UINT32_MAX / 4) return false;
    *work_bytes = w;
    return true;
}

/* (gy [outer, K, inner], idx) -> gx [outer, A, inner]: phase 1 sorts each
 * line (o, q)'s indices (a negative one counts from the end, as the
 * forward reads it) in a workgroup of its own, phase 2 gives each gx
 * element the sum of its slot's segment. */
bool tg_wgsl_take_along_axis_grad_sorted(wgsl_kernel *k) {
    int64_t outer, A, inner, K;
    take_dims(k->g, k->n, &outer, &A, &inner, &K);
    long long in = inner, lw = tg_wgsl_sort_work(K, A) / 4;
    if (k->phase == 1) {
        char index[200];
        snprintf(index, sizeof index,
                 "tg_take_index(ld1((gid / %lldu) * %lldu + gid %% %lldu + r * %lldu))", in, K * in, in, in);
        tg_source_printf(&k->source, "fn tg_take_index(t: i32) -> i32 { return select(t, t + %lldi, t < 0); }\n", (long long)A);
        return sort_phase(k, outer * inner, K, A, index);
    }
    if (k->phase != 2) return tg_kernel_fail(k, TG_ERR_BACKEND, "a sorted scatter-add runs in two phases");
    if (!tg_kernel_flat(k, outer * A * inner)) return false;
    char term[64];
    snprintf(term, sizeof term, "ld0(src + %%s * %lldu)", in);
    tg_source_printf(&k->source,
                  "    let o = i / %lldu;\n    let a = (i / %lldu) %% %lldu;\n    let q_in = i %% %lldu;\n"
                  "    let l = o * %lldu + q_in;\n    let src = o * %lldu + q_in;\n"
                  "    let s_start = l * %lldu;\n    let s_order = s_start + %lldu;\n"
                  "    let s = work[s_start + a];\n    let e = work[s_start + a + 1u];\n",
                  (long long)(A * in), in, (long long)A, in, in, (long long)K * in, lw, (long long)(A + 1 + K));
    segment_sum(k, term);
    tg_source_printf(&k->source, "    st(i, acc);\n");
    tg_kernel_end(k);
    return true;
}
