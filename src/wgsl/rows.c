/* Kernels over rows ("lines": the elements along one axis, A of them, at
 * stride `inner`) and over columns. Long rows get a workgroup each with tree
 * reductions in workgroup memory; short rows get a thread each, looping in
 * the CPU's order. Column sums give each workgroup 8 adjacent columns (so
 * reads fill whole sectors) and 32 interleaved row sets (128 for tall sums),
 * combined at the end; tall sums over few columns run in two phases, the
 * rows split into chunks. */
#include <stdlib.h>
#include <string.h>

#include "emit.h"

#define SHORT_ROW 32 /* rows this long or shorter: one thread per row */

/* A long row's workgroup: at most 64 invocations, each looping over several
 * elements, so its tree reductions take 6 barrier steps instead of 8 and more
 * rows are in flight per multiprocessor. What bounds a layer norm over
 * [16384, 384] is its walk of memory, not its sums; no other workgroup size,
 * grouping of elements or load width walked it faster (docs/performance.md,
 * "Row kernels and column sums", with every figure behind this file's rules). */
#define ROW_WG_MAX 64

/* tg_wgsl_forms.row_workgroup (a power of two from 32 to 1024, within the
 * device's limit) raises or lowers ROW_WG_MAX: larger workgroups run a lone
 * kernel faster but made gpt_small's step slower. */
uint32_t tg_kernel_row_wg(const wgsl_kernel *k, int64_t len) {
    uint32_t max = tg_wgsl_forced()->row_workgroup ? tg_wgsl_forced()->row_workgroup : ROW_WG_MAX;
    if (max < 32 || max > 1024 || (max & (max - 1))) max = ROW_WG_MAX;
    while (max > 64 && max > k->lim->max_invocations_per_workgroup) max /= 2;
    uint32_t wg = 32;
    while (wg < max && wg < len) wg *= 2;
    return wg;
}

void tg_kernel_red_decl(wgsl_kernel *k, uint32_t wg, const char *type) {
    tg_kernel_shared(k, "red", type, wg);
}

/* The barriers are in uniform control flow: the loop bound is a literal. */
void tg_kernel_reduce(wgsl_kernel *k, uint32_t wg, const char *val, bool is_max, const char *out) {
    tg_source_printf(&k->source,
               "    red[lid] = %s;\n    workgroupBarrier();\n"
               "    for (var s = %uu; s > 0u; s = s >> 1u) {\n"
               "        if (lid < s) { red[lid] = %s; }\n"
               "        workgroupBarrier();\n    }\n"
               "    let %s = red[0];\n    workgroupBarrier();\n",
               val, wg / 2, is_max ? "max(red[lid], red[lid + s])" : "red[lid] + red[lid + s]", out);
}

/* How a long row's workgroup walks its row (tg_wgsl_forms.rows forces one):
 *   regs (the default): when the row fits in registers (at most REG_MAX
 *     elements per invocation: 512 with 64 invocations), each invocation
 *     reads its elements of the row's inputs once, into named variables,
 *     and every pass reuses them, so a layer norm reads x once instead of
 *     three times (gpt_small's rows of 384: 6 per invocation);
 *   loop: every pass reads the row again from memory (the form before). */
enum { ROWS_LOOP, ROWS_REGS };
#define REG_MAX 8

static int rows_form(void) { return tg_wgsl_forced()->rows == TG_WGSL_ROWS_LOOP ? ROWS_LOOP : ROWS_REGS; }

static bool use_subgroups(const wgsl_kernel *k);
static int reduce_form(void);
enum { REDUCE_TREE, REDUCE_SUBGROUP, REDUCE_ROWS };

/* A row per subgroup: on a device whose subgroups all have one size S, in
 * the register form, a row of at most S * SG_REG_MAX elements gets one
 * subgroup, and a workgroup holds up to SG_ROWS_WG / S rows (as many as
 * divide the row count, so that no subgroup of a workgroup is idle and the
 * early return stays uniform). Its sums are single subgroup sums: no
 * workgroup memory, no barrier. The default only for kernels that write a
 * few values per row (tg_kernel_rows_open_stats), where it is faster;
 * everywhere (the row per subgroup reduction forced, below) it is slower
 * where the kernel writes the row back. tg_wgsl_forms.row_workgroup sets
 * the workgroup's invocations too. */
#define SG_REG_MAX 16
#define SG_ROWS_WG 64

/* Which kernels take a row per subgroup under the default reduction. */
enum { SG_NONE, SG_STATS, SG_NORM };

/* The layer norm's forward (tg_kernel_rows_open_norm) takes a row per
 * subgroup in workgroups of SG_NORM_WG: the other row kernels read rows a
 * kernel just wrote (in the GPU's cache), a norm's forward often reads rows
 * from memory, where this form reaches a larger fraction of a copy's
 * bandwidth than a workgroup per row (inside gpt_small the two tie). */
#define SG_NORM_WG 256

static bool norm_sgrow(void) { return tg_wgsl_forced()->norm != TG_WGSL_NORM_WORKGROUP; }

static uint32_t sg_rows_wg(const wgsl_kernel *k, uint32_t dflt) {
    uint32_t n = tg_wgsl_forced()->row_workgroup ? tg_wgsl_forced()->row_workgroup : dflt;
    if (n < 32 || n > 1024 || (n & (n - 1))) n = dflt;
    while (n > 64 && n > k->lim->max_invocations_per_workgroup) n /= 2;
    return n;
}

static uint32_t row_subgroup(const wgsl_kernel *k, int64_t lines, int64_t A, int pref) {
    uint32_t S = k->lim->subgroup_min_size;
    int form = reduce_form();
    bool preferred = pref == SG_STATS || (pref == SG_NORM && norm_sgrow());
    if (rows_form() != ROWS_REGS || !use_subgroups(k) || !(form == REDUCE_ROWS || (preferred && form == REDUCE_SUBGROUP)) ||
        S < 4 || S != k->lim->subgroup_max_size)
        return 0;
    return A > SHORT_ROW && A <= (int64_t)S * SG_REG_MAX && lines > 0 ? S : 0;
}

static bool rows_open(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t inner, int pref) {
    *L = (row_kernel){.k = k, .wide = A > SHORT_ROW, .wg = tg_kernel_row_wg(k, A), .lines = lines, .A = A, .inner = inner};
    L->step = L->wg, L->me = "lid";
    L->regs = tg_kernel_rows_regs(k->lim, A);
    if ((L->sg = row_subgroup(k, lines, A, pref))) {
        uint32_t P = sg_rows_wg(k, pref == SG_NORM ? SG_NORM_WG : SG_ROWS_WG) / L->sg; /* rows per workgroup */
        if (P == 0) P = 1;
        while (P > 1 && lines % P) P /= 2;
        L->wg = P * L->sg, L->step = L->sg, L->me = "lane";
        L->regs = (int)((A + L->sg - 1) / L->sg);
        if (!tg_kernel_main(k, lines / P, L->wg)) return false;
        k->spec->threads = lines * L->sg;
        k->subgroups = true;
        tg_source_printf(&k->source, "    if (gid >= %lldu) { return; }\n    let l = gid * %uu + lid / %uu;\n    let lane = lid %% %uu;\n",
                      (long long)(lines / P), P, L->sg, L->sg);
    } else if (L->wide) {
        tg_kernel_red_decl(k, L->wg, "f32");
        if (!tg_kernel_main(k, lines, L->wg)) return false;
        k->spec->threads = lines * L->wg;
        /* gid is uniform, so returning here keeps later barriers uniform. */
        tg_source_printf(&k->source, "    let l = gid;\n    if (l >= %lldu) { return; }\n", (long long)lines);
    } else {
        if (!tg_kernel_flat(k, lines)) return false;
        tg_source_printf(&k->source, "    let l = i;\n");
    }
    if (inner == 1) tg_source_printf(&k->source, "    let base = l * %lldu;\n", (long long)A);
    else
        tg_source_printf(&k->source, "    let base = (l / %lldu) * %lldu + l %% %lldu;\n", (long long)inner, (long long)(A * inner),
                   (long long)inner);
    return true;
}

int tg_kernel_rows_regs(const tg_wgsl_limits *lim, int64_t A) {
    wgsl_kernel k = {.lim = lim};
    uint32_t wg = tg_kernel_row_wg(&k, A);
    return A > SHORT_ROW && rows_form() == ROWS_REGS && A <= (int64_t)wg * REG_MAX ? (int)((A + wg - 1) / wg) : 0;
}

/* The barriers and subgroup sums of the row loop stay in uniform control
 * flow: l0 and l1 derive from gid alone. */
bool tg_kernel_rows_open_chunks(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t S, int64_t chunk) {
    *L = (row_kernel){.k = k, .wide = true, .wg = tg_kernel_row_wg(k, A), .lines = lines, .A = A, .inner = 1};
    L->step = L->wg, L->me = "lid", L->regs = tg_kernel_rows_regs(k->lim, A);
    if (!L->regs) return tg_kernel_fail(k, TG_ERR_BACKEND, "rows of %lld in chunks: not in the register form", (long long)A);
    tg_kernel_red_decl(k, L->wg, "f32");
    if (!tg_kernel_main(k, S, L->wg)) return false;
    k->spec->threads = S * L->wg;
    tg_source_printf(&k->source,
                  "    if (gid >= %lldu) { return; }\n    let l0 = gid * %lldu;\n    let l1 = min(l0 + %lldu, %lldu);\n",
                  (long long)S, (long long)chunk, (long long)chunk, (long long)lines);
    return true;
}

void tg_kernel_rows_chunk_row(row_kernel *L) {
    tg_source_printf(&L->k->source, "    for (var l = l0; l < l1; l++) {\n    let base = l * %lldu;\n", (long long)L->A);
}

bool tg_kernel_rows_open(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t inner) {
    return rows_open(L, k, lines, A, inner, SG_NONE);
}

bool tg_kernel_rows_open_stats(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t inner) {
    return rows_open(L, k, lines, A, inner, SG_STATS);
}

bool tg_kernel_rows_open_norm(row_kernel *L, wgsl_kernel *k, int64_t lines, int64_t A, int64_t inner) {
    return rows_open(L, k, lines, A, inner, SG_NORM);
}

/* Slot j of an invocation in the register form: element lid + j * wg; the
 * last slot may lie past the row. */
static bool slot_full(const row_kernel *L, int j) { return (int64_t)(j + 1) * L->step <= L->A; }

void tg_kernel_rows_cache(row_kernel *L, unsigned by_row, unsigned by_col) {
    wgsl_kernel *k = L->k;
    L->by_row = by_row, L->by_col = by_col;
    if (!L->regs) return;
    for (int K = 0; K < TG_MAX_IN; K++) {
        if (!((by_row | by_col) >> K & 1)) continue;
        const char *t = tg_kernel_type(tg_kernel_in(k, K)->dtype);
        for (int j = 0; j < L->regs; j++) {
            char at[64];
            if (by_row >> K & 1) snprintf(at, sizeof at, "base + (%s + %du) * %lldu", L->me, j * L->step, (long long)L->inner);
            else snprintf(at, sizeof at, "%s + %du", L->me, j * L->step);
            if (slot_full(L, j)) tg_source_printf(&k->source, "    let r%d_%d = ld%d(%s);\n", K, j, K, at);
            else
                tg_source_printf(&k->source, "    var r%d_%d = %s(0);\n    if (%s + %du < %lldu) { r%d_%d = ld%d(%s); }\n", K, j, t,
                           L->me, j * L->step, (long long)L->A, K, j, K, at);
        }
    }
}

/* the cached inputs' values at the element: vK = ldK(p) or ldK(a), or its register */
static void cached_lets(row_kernel *L, int j) {
    for (int K = 0; K < TG_MAX_IN; K++) {
        if (!((L->by_row | L->by_col) >> K & 1)) continue;
        if (j >= 0) tg_source_printf(&L->k->source, "        let v%d = r%d_%d;\n", K, K, j);
        else tg_source_printf(&L->k->source, "        let v%d = ld%d(%s);\n", K, K, L->by_row >> K & 1 ? "p" : "a");
    }
}

void tg_kernel_rows_each(row_kernel *L, const char *len, const char *body) {
    wgsl_kernel *k = L->k;
    char full[32];
    snprintf(full, sizeof full, "%lldu", (long long)L->A);
    if (!L->regs) {
        tg_kernel_rows_loop(L, len ? len : full);
        cached_lets(L, -1);
        tg_source_printf(&k->source, "%s    }\n", body);
        return;
    }
    for (int j = 0; j < L->regs; j++) {
        tg_source_printf(&k->source, "    {\n        let a = %s + %du;\n        let p = base + a * %lldu;\n", L->me, j * L->step,
                   (long long)L->inner);
        bool guard = len || !slot_full(L, j);
        if (guard) tg_source_printf(&k->source, "        if (a < %s) {\n", len ? len : full);
        cached_lets(L, j);
        tg_source_printf(&k->source, "%s%s    }\n", body, guard ? "        }\n" : "");
    }
}

void tg_kernel_rows_loop(row_kernel *L, const char *len) {
    if (L->wide) tg_source_printf(&L->k->source, "    for (var a = %s; a < %s; a += %uu) {\n", L->me, len, L->step);
    else tg_source_printf(&L->k->source, "    for (var a = 0u; a < %s; a++) {\n", len);
    tg_source_printf(&L->k->source, "        let p = base + a * %lldu;\n", (long long)L->inner);
}

/* How a long row's values are combined (tg_wgsl_forms.reduce forces one):
 *   subgroup (the default where the device was created with subgroups):
 *     a workgroup per row, a subgroup sum (or max), one value per subgroup
 *     into workgroup memory, then every invocation adds those few: 2
 *     barriers instead of the tree's 8 for 64 invocations (2 values per
 *     row on NVIDIA's subgroups of 32, 8 on lavapipe's 8);
 *   rows: a row per subgroup where row_subgroup allows it, its sums single
 *     subgroup sums; elsewhere as "subgroup" (which takes this form itself
 *     for tg_kernel_rows_open_stats);
 *   tree: the workgroup tree of tg_kernel_reduce.
 * Subgroups are taken to be runs of consecutive local invocation indices
 * (as GPUs and lavapipe form them). The subgroup forms are faster where a
 * kernel sums rows, the register form where it reads a row more than
 * once. */
static int reduce_form(void) {
    int f = tg_wgsl_forced()->reduce;
    return f == TG_WGSL_REDUCE_TREE ? REDUCE_TREE : f == TG_WGSL_REDUCE_ROW_PER_SUBGROUP ? REDUCE_ROWS : REDUCE_SUBGROUP;
}

static bool use_subgroups(const wgsl_kernel *k) { return k->lim->subgroup_min_size && reduce_form() != REDUCE_TREE; }

/* Slots of red one subgroup reduction needs: one per subgroup of the smallest size. */
static uint32_t sg_slots(const row_kernel *L) {
    return (L->wg + L->k->lim->subgroup_min_size - 1) / L->k->lim->subgroup_min_size;
}

/* n values var[i] -> out[i] (all sums, or n = 1 and a max), their slots
 * side by side in red (n * sg_slots <= wg). sg_n: invocations in this one's
 * subgroup (all are active here: the only early return is the whole
 * workgroup's); sg_slot: the subgroup's index, sg_lead: its first
 * invocation. Declared once, at the first reduction. */
static void subgroup_combine(row_kernel *L, int n, const char *const *var, bool is_max, const char *const *out) {
    wgsl_kernel *k = L->k;
    uint32_t nq = sg_slots(L);
    k->subgroups = true;
    if (!L->sg_named)
        tg_source_printf(&k->source,
                   "    let sg_n = subgroupAdd(1u);\n    let sg_first = subgroupBroadcastFirst(lid);\n"
                   "    let sg_slot = sg_first / sg_n;\n    let sg_lead = lid == sg_first;\n");
    L->sg_named = true;
    for (int i = 0; i < n; i++)
        tg_source_printf(&k->source, "    let %s_sg = %s(%s);\n    if (sg_lead) { red[%uu + sg_slot] = %s_sg; }\n", out[i],
                   is_max ? "subgroupMax" : "subgroupAdd", var[i], i * nq, out[i]);
    tg_source_printf(&k->source, "    workgroupBarrier();\n");
    for (int i = 0; i < n; i++) {
        tg_source_printf(&k->source, "    var %s_all = red[%uu];\n", out[i], i * nq);
        if (nq > 1) { /* the bound is a literal (the smallest subgroup): uniform */
            char acc[96];
            if (is_max) snprintf(acc, sizeof acc, "max(%s_all, red[%uu + q])", out[i], i * nq);
            else snprintf(acc, sizeof acc, "%s_all + red[%uu + q]", out[i], i * nq);
            tg_source_printf(&k->source, "    for (var q = 1u; q < %uu; q++) { if (q * sg_n < %uu) { %s_all = %s; } }\n", nq,
                       L->wg, out[i], acc);
        }
        tg_source_printf(&k->source, "    let %s = %s_all;\n", out[i], out[i]);
    }
    tg_source_printf(&k->source, "    workgroupBarrier();\n");
}

void tg_kernel_rows_combine(row_kernel *L, const char *var, bool is_max, const char *out) {
    if (L->sg) tg_source_printf(&L->k->source, "    let %s = %s(%s);\n", out, is_max ? "subgroupMax" : "subgroupAdd", var);
    else if (L->wide && use_subgroups(L->k)) subgroup_combine(L, 1, &var, is_max, &out);
    else if (L->wide) tg_kernel_reduce(L->k, L->wg, var, is_max, out);
    else tg_source_printf(&L->k->source, "    let %s = %s;\n", out, var);
}

void tg_kernel_rows_combine2(row_kernel *L, const char *va, const char *vb, const char *oa, const char *ob) {
    const char *var[2] = {va, vb}, *out[2] = {oa, ob};
    if (!L->sg && L->wide && use_subgroups(L->k) && 2 * sg_slots(L) <= L->wg) subgroup_combine(L, 2, var, false, out);
    else tg_kernel_rows_combine(L, va, false, oa), tg_kernel_rows_combine(L, vb, false, ob);
}

void tg_kernel_rows_once(row_kernel *L) {
    tg_source_printf(&L->k->source, L->sg ? "    if (lane == 0u) {\n" : L->wide ? "    if (lid == 0u) {\n" : "    {\n");
}

/* Columns per workgroup of a column sum (colsum_width): CW, where a warp
 * reads one 32-byte sector from each of 4 rows, or WIDE, where it reads
 * 128 contiguous bytes of one row, the faster of the widths tried for split
 * sums. */
#define CW 8
#define WIDE 32
#define TALL_R 16384 /* rows from which a column sum takes the tall shape below (gpt_small: B x T) */

/* Two-phase column sums. The one-kernel form has ceil(C / CW) workgroups:
 * a bias of 384 gives 48, which leaves most of a big GPU's 132
 * multiprocessors idle however the rows are interleaved (gpt_small's bias
 * sums reached a tenth of the copy bandwidth that way). With fewer than COLSUM_FILL column workgroups and at least SPLIT_R rows, phase 1
 * splits the rows into S contiguous chunks, a workgroup per (column group,
 * chunk) writing one partial sum per column into the workspace, and phase 2
 * adds each column's S partials in chunk order and stores them (through st,
 * so an epilogue still applies). COLSUM_FILL is the matmul's FILL (about
 * three workgroups a multiprocessor of a large GPU); a chunk keeps at least
 * SPLIT_CHUNK rows so the partials stay a small part of the traffic. */
#define COLSUM_FILL 384
#define SPLIT_R 4096
#define SPLIT_CHUNK 256
#define SPLIT_MAX 64

/* Row chunks of a sum of R rows whose C columns make `groups` workgroups
 * (tg_wgsl_forms.colsum_chunks: one kernel, or N chunks at any size). */
static int chunks(int64_t R, int64_t C, int64_t groups) {
    int forced = tg_wgsl_forced()->colsum_chunks;
    if (forced == TG_WGSL_OFF || R < 2 || C < 1) return 1;
    if (forced > 0) return (int64_t)forced > R ? (int)R : forced;
    if (R < SPLIT_R) return 1;
    if (groups >= COLSUM_FILL) return 1;
    int64_t s = (COLSUM_FILL + groups - 1) / groups;
    if (s > R / SPLIT_CHUNK) s = R / SPLIT_CHUNK;
    if (s > SPLIT_MAX) s = SPLIT_MAX;
    return s < 2 ? 1 : (int)s;
}

/* tg_wgsl_forms.colsum_width sets the columns per workgroup (8, 32, 64 or
 * 128). By default a sum that splits in CW's form takes WIDE columns
 * (and as many more chunks as that needs to fill the GPU), where there are
 * that many; every other sum keeps CW, where few columns must fill the GPU
 * with workgroups alone. */
static int colsum_width(int64_t R, int64_t C) {
    int w = tg_wgsl_forced()->colsum_width;
    if (w == 8 || w == 32 || w == 64 || w == 128) return w;
    return C >= WIDE && chunks(R, C, (C + CW - 1) / CW) > 1 ? WIDE : CW;
}

int tg_kernel_colsum_chunks(int64_t R, int64_t C) {
    int w = colsum_width(R, C);
    return chunks(R, C, (C + w - 1) / w);
}

/* Phase 2 of a split column sum: output c is the sum of work[s * C + c]
 * over the S chunks, in order; a second sum's partials follow the first's
 * (at S * C), stored through st2. */
bool tg_kernel_colsum_combine(wgsl_kernel *k, int S, int64_t C, const char *type, bool two) {
    if (!tg_kernel_flat(k, C)) return false;
    for (int t = 0; t < 1 + two; t++)
        tg_source_printf(&k->source,
                   "    {\n        var acc = %s(0);\n"
                   "        for (var s = 0u; s < %du; s++) { acc += bitcast<%s>(work[%lldu + s * %lldu + i]); }\n"
                   "        %s(i, acc);\n    }\n",
                   type, S, type, (long long)(t * S * C), (long long)C, t ? "st2" : "st");
    tg_kernel_end(k);
    return true;
}

/* expr -> [C]: the sum over r < R of expr, an expression of (r, c).
 * Few columns (a bias of 384) over many rows (16384) is the common case:
 * 8 columns per workgroup gives 48 workgroups instead of 12, and each
 * invocation keeps `un` independent partial sums so their loads overlap.
 * With so few workgroups, what bounds the speed is the loads in flight per
 * multiprocessor, so tall sums (R >= TALL_R) interleave 128 row sets of 8
 * partials each (1024 invocations) instead of 32 of 4 (about three times
 * faster on gpt_small's bias and gain sums; 16 partials were slower).
 * Split in two phases (tg_kernel_colsum_chunks > 1), phase 1 runs this over
 * each chunk of rows, a grid of column groups x chunks, with 256 / width
 * row sets of 8 partials (enough workgroups now carry the loads in
 * flight). Split sums of 32 columns or more give a workgroup WIDE of
 * them (colsum_width), 8 row sets.
 * A second sum (expr2) keeps its own partials (bU) beside the first's
 * (aU) and its own half of red, so both share the loop and the barriers. */
bool tg_kernel_colsum2(wgsl_kernel *k, const char *expr, const char *expr2, const char *type) {
    int64_t R, C;
    if (!tg_wgsl_colsum_dims(k->g, k->n, &R, &C)) return tg_kernel_fail(k, TG_ERR_BACKEND, "not a column sum");
    int S = tg_kernel_colsum_chunks(R, C);
    if (S > 1 && k->phase == 0) return tg_kernel_fail(k, TG_ERR_BACKEND, "a split column sum runs in two phases");
    if (S > 1 && k->phase == 2) return tg_kernel_colsum_combine(k, S, C, type, expr2);
    return tg_kernel_colsum_rows(k, R, C, S, expr, expr2, type, "st", "st2");
}

bool tg_kernel_colsum_rows(wgsl_kernel *k, int64_t R, int64_t C, int S, const char *expr, const char *expr2, const char *type,
                       const char *st, const char *st2) {
    int two = expr2 != NULL;
    int cw = colsum_width(R, C), rw = 256 / cw, un = 4; /* interleaved row sets, combined at the end; partials per invocation */
    if (S > 1) un = 8;
    /* the tall shape's red (4-byte elements) must fit too: with two sums it
     * takes 8 KiB, where the 256-invocation form takes 2 */
    else if (cw == CW && R >= TALL_R && CW * 128 <= k->lim->max_invocations_per_workgroup &&
             (uint64_t)CW * 128 * (1 + two) * 4 <= k->lim->max_workgroup_storage_size)
        rw = 128, un = 8;
    int64_t groups = (C + cw - 1) / cw, chunk = (R + S - 1) / S;
    static const char acc[2] = {'a', 'b'};
    tg_kernel_shared(k, "red", type, cw * rw * (1 + two));
    tg_source_printf(&k->source, "fn colv(r: u32, c: u32) -> %s { return %s; }\n", type, expr);
    if (two) tg_source_printf(&k->source, "fn colv2(r: u32, c: u32) -> %s { return %s; }\n", type, expr2);
    if (!tg_kernel_main(k, groups * S, cw * rw)) return false;
    k->spec->threads = groups * S * cw * rw;
    /* rows [r0, r1) of chunk gid / groups. A 2-D grid may have spare
     * workgroups past the last chunk; their partials (zeros) would land on
     * the second sum's or past the workspace. gid is uniform: the return
     * keeps the barriers uniform. */
    if (S > 1)
        tg_source_printf(&k->source,
                   "    if (gid >= %lldu) { return; }\n"
                   "    let chunk = gid / %lldu;\n    let cg = gid %% %lldu;\n"
                   "    let r0 = chunk * %lldu;\n    let r1 = min(r0 + %lldu, %lldu);\n",
                   (long long)(groups * S), (long long)groups, (long long)groups, (long long)chunk, (long long)chunk,
                   (long long)R);
    else tg_source_printf(&k->source, "    let cg = gid;\n    let r0 = 0u;\n    let r1 = %lldu;\n", (long long)R);
    tg_source_printf(&k->source, "    let tx = lid %% %du;\n    let ty = lid / %du;\n    let c = cg * %du + tx;\n", cw, cw, cw);
    for (int t = 0; t <= two; t++)
        for (int u = 0; u < un; u++) tg_source_printf(&k->source, "    var %c%d = %s(0);\n", acc[t], u, type);
    tg_source_printf(&k->source, "    if (c < %lldu) {\n        var r = r0 + ty;\n        while (r + %du < r1) {\n", (long long)C,
               (un - 1) * rw);
    for (int t = 0; t <= two; t++)
        for (int u = 0; u < un; u++)
            tg_source_printf(&k->source, "            %c%d += colv%s(r + %du, c);\n", acc[t], u, t ? "2" : "", u * rw);
    tg_source_printf(&k->source, "            r += %du;\n        }\n        while (r < r1) {\n", un * rw);
    for (int t = 0; t <= two; t++) tg_source_printf(&k->source, "            %c0 += colv%s(r, c);\n", acc[t], t ? "2" : "");
    tg_source_printf(&k->source, "            r += %du;\n        }\n    }\n", rw);
    /* the partials pairwise: (a0 + a1) + (a2 + a3), then those pairs */
    for (int t = 0; t <= two; t++)
        for (int w = 1; w < un; w *= 2)
            for (int u = 0; u + w < un; u += 2 * w) tg_source_printf(&k->source, "    %c%d = %c%d + %c%d;\n", acc[t], u, acc[t], u, acc[t], u + w);
    int half = cw * rw;
    tg_source_printf(&k->source, "    red[lid] = a0;\n");
    if (two) tg_source_printf(&k->source, "    red[%du + lid] = b0;\n", half);
    tg_source_printf(&k->source,
               "    workgroupBarrier();\n"
               "    for (var s = %du; s > 0u; s = s >> 1u) {\n"
               "        if (ty < s) {\n            red[lid] = red[lid] + red[lid + s * %du];\n",
               rw / 2, cw);
    if (two) tg_source_printf(&k->source, "            red[%du + lid] = red[%du + lid] + red[%du + lid + s * %du];\n", half, half, half, cw);
    tg_source_printf(&k->source, "        }\n        workgroupBarrier();\n    }\n");
    tg_source_printf(&k->source, "    if (ty == 0u && c < %lldu) {\n", (long long)C);
    for (int t = 0; t <= two; t++) {
        if (S > 1)
            tg_source_printf(&k->source, "        work[%lldu + chunk * %lldu + c] = bitcast<u32>(red[%du + tx]);\n",
                       (long long)(t * S * C), (long long)C, t * half);
        else tg_source_printf(&k->source, "        %s(c, red[%du + tx]);\n", t ? st2 : st, t * half);
    }
    tg_source_printf(&k->source, "    }\n}\n");
    return true;
}

bool tg_kernel_colsum(wgsl_kernel *k, const char *expr, const char *type) { return tg_kernel_colsum2(k, expr, NULL, type); }
