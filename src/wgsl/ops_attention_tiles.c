/* The fused causal attention kernels in 64 x 64 blocks (FlashAttention-2's
 * scheme, in plain WGSL: no matrix units; subgroup shuffles for the row
 * sums where a row's invocations share a subgroup).
 *
 * A workgroup of 256 invocations owns a block of 64 rows of one (b, h):
 * query rows in the forward and dq kernels, key rows in the dk/dv kernel.
 * It walks the other side in tiles of 64. Invocation (ty, tx), ty and tx in
 * 0..15, holds:
 *   - a 4 x 4 block of the [64, 64] scores: rows 4 ty.., columns 4 tx..,
 *     computed like a matmul tile over the head dimension in chunks that the
 *     workgroup loads into workgroup memory;
 *   - 4 rows x vec4 tx of its [64, Dh] accumulator (Dh <= 64: one vec4).
 * The scores go through workgroup memory once more, transposed, to be
 * multiplied with the tile's V (or dout, or q, or k) rows.
 *
 *   forward  s = c q.k, online softmax per row: the tile's row maximum is
 *            reduced over the 16 invocations of a row through workgroup
 *            memory; each keeps its own partial sum l, added up at the end;
 *            o = acc / l, the row's log-sum-exp L = m + log l kept
 *   dq       D = rowsum(p dp) = dout.o (o: the forward's result);
 *            p = exp(s - L), dp = dout.v, dq = sum ds k with ds = p (dp - D) c'
 *   dk, dv   over query tiles i >= j: s^T, dp^T, then dv = sum p^T dout,
 *            dk = sum ds^T q
 *
 * A warp is 2 rows of 16 invocations, so a step of the score loop or of
 * accumulate reads 16 distinct vec4s of one operand (two 128-byte
 * wavefronts) and 2 of the other. Squarer warps (4 rows of 8) and more rows
 * an invocation were slower: neither workgroup memory's wavefronts nor the
 * multiply-adds bound these loops, and fewer invocations, each holding more
 * registers, hide less latency. The NVIDIA driver's own statistics
 * (VK_KHR_pipeline_executable_properties on the SPIR-V Dawn generates)
 * say how far: on gpt_small's shapes the forward takes 113 registers an
 * invocation, so two workgroups share a multiprocessor, but dq and dk/dv
 * take 165, so each runs alone there (8 warps). Getting those two to 128
 * would double their warps; the score loop's chunks loaded ahead (8
 * vec4s) and the two score blocks (8 more) are the largest live sets.
 *
 * Workgroup memory is used without bank conflicts: a chunk's rows are
 * loaded as vec4s and stored transposed, an element at a time, so the 4
 * (or 8) invocations that hold one row's vec4s would all store to one bank;
 * within each head dimension's 16 vec4s of rows, vec4 v therefore sits at
 * v ^ swz(d), which spreads them over different banks (the reads undo it
 * with the same XOR). Likewise the transposed scores: column j's vec4 ty
 * sits at ty ^ ((j / 4) & 7), so the 8 invocations of a quarter warp
 * storing their columns' vec4 ty hit 8 different banks, where in plain
 * order they hit one. Chunks of 32 head dimensions halve the barriers of
 * the score loop where they fit workgroup memory (the backward's four
 * operands need 48 KiB: a large GPU's, not lavapipe's 32). The chunks are
 * stored transposed (by rows, read 4 head dimensions at a time, they took
 * more registers and ran slower).
 *
 * The score loop's global loads are issued a step before their use, into
 * registers; the staged rows are loaded at their stage (see walk below).
 * The loops stay loops: written out step by step (which helps the matmul)
 * they ran slower. Every figure behind this file's rules is in
 * docs/performance.md, "Fused attention".
 *
 * Workgroup memory (vec4s): region A, the score chunks / the row reductions
 * / a [64, Dh] tile, then region B, the [64, 64] transposed scores: 2048
 * vec4s (32 KiB) for Dh <= 64 in chunks of 16, 3072 (48 KiB) for the
 * backward's in chunks of 32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_kernels.h"

#define ROWS 64

static const char *op_tag[N_OP] = {"Q", "K", "V", "O", "G", "DQ", "DK", "DV"};

/* Head dimensions per score chunk: 32 where wide, else 16, or the largest
 * of 8 and 4 that divides Dh. The whole head in one chunk took more
 * registers for the chunk loaded ahead, chunks of 16 everywhere twice the
 * barriers: both ran slower. */
static int64_t chunk_dims(int64_t Dh, bool wide) {
    if (wide && Dh % 32 == 0) return 32;
    return Dh % 16 == 0 ? 16 : Dh % 8 == 0 ? 8 : 4;
}

/* Region A's size in vec4s for a kernel whose score loop loads `chunks` operand chunks. */
static int64_t region_a(const tg_wgsl_attn *a, int chunks, bool wide) {
    int64_t c = chunks * chunk_dims(a->Dh, wide) * (ROWS / 4), t = ROWS * (a->Dh / 4), r = ROWS * 4;
    int64_t m = c > t ? c : t;
    return m > r ? m : r;
}

bool tg_wgsl_attn_tiles_fit(const tg_wgsl_attn *a, const tg_wgsl_limits *lim) {
    if (a->Dh > 64 || a->Dh % 4) return false;
    return (uint64_t)(region_a(a, 4, false) + ROWS * ROWS / 4) * 16 <= lim->max_workgroup_storage_size;
}

/* Opens the kernel: the scale strings (sc: the scores', dsc: the
 * gradient's, 64 bytes each), workgroup memory (for a score loop of
 * `chunks` operands; 0: the row reductions' alone), the entry point over
 * B * H * blocks workgroups, and b, h, bh, blk, tx, ty, r0 and dv (the
 * invocation's vec4 of the head dimension, clamped).
 * Workgroups go head by head, a head's blocks together (which may let
 * them share its rows in the GPU's cache); launching the blocks that walk
 * the most tiles first ran slower. */
static bool open_tiles(attn_kernel *K, int chunks, const char *what, char *sc, char *dsc) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    bool wide = (uint64_t)(region_a(a, chunks, true) + ROWS * ROWS / 4) * 16 <= k->lim->max_workgroup_storage_size;
    K->chunk = chunk_dims(a->Dh, wide);
    tg_wgsl_attn_scale(K, a->scale, sc);
    tg_wgsl_attn_scale(K, a->dscale, dsc);
    tg_source_printf(&k->source, "// node %d: attention %s [%lld,%lld,%lld,%lld] (64 x 64 blocks)\n", k->id, what, (long long)a->B,
               (long long)a->H, (long long)a->T, (long long)a->Dh);
    if (!tg_wgsl_attn_declare(K)) return false;
    K->dh4 = a->Dh / 4;
    K->nblk = (a->T + ROWS - 1) / ROWS;
    K->wg = 256;
    int64_t asz = chunks ? region_a(a, chunks, wide) : ROWS * 4, bsz = chunks ? ROWS * ROWS / 4 : 0;
    tg_source_printf(&k->source, "const AB = %lldu;\n", (long long)asz);
    tg_kernel_shared(k, "sh", "vec4<f32>", asz + bsz);
    int64_t groups = a->B * a->H * K->nblk;
    k->spec->threads = groups * 256;
    if (!tg_kernel_main(k, groups, 256)) return false;
    tg_source_printf(&k->source,
               "    if (gid >= %lldu) { return; }\n    let bh = gid / %lldu;\n    let blk = gid - bh * %lldu;\n"
               "    let b = bh / %lldu;\n    let h = bh - b * %lldu;\n    let tx = lid %% 16u;\n    let ty = lid / 16u;\n"
               "    let r0 = blk * 64u + 4u * ty;\n    let dv = min(tx, %lldu);\n",
               (long long)groups, (long long)K->nblk, (long long)K->nblk, (long long)a->H, (long long)a->H,
               (long long)(K->dh4 - 1));
    return true;
}

/* The XOR of head dimension d's 16 vec4s of rows in a chunk of `per` vec4s a
 * row (see the top): the invocations storing one row's vec4s (q4 = d / 4
 * apart) are then 8 / per vec4s apart, a bank group each. */
static void swz(const attn_kernel *K, const char *d, char *buf, size_t n) {
    int64_t per = K->chunk / 4;
    if (per == 1) snprintf(buf, n, "0u");
    else snprintf(buf, n, "((%s / 4u) * %lldu)", d, (long long)(8 / per));
}

/* The walk over the other side's tiles, and what its loop loads: the
 * tile variable (j0 or i0), its first value and its bound; the score
 * loop's operand pairs (rows ra.. and rb.., each the fixed block's rows or
 * the tile variable). */
typedef struct {
    const char *var, *start, *end;
    int n, opa[2], opb[2];
    const char *ra, *rb;
    const char *extra; /* more loads of the tile at w->var for after the scores ("": none) */
} walk;

/* The score loop's loads are issued one step ahead of their use, into
 * registers, so their latency hides behind the arithmetic before them (as
 * the matmul's next k-slice): a score chunk's loads while the chunk before
 * it is multiplied, the next tile's first chunk while the tile's last
 * chunk is. The staged rows (V, K, dout, q: [64, Dh] after the scores) are
 * loaded at their stage instead: held through the tile's last chunk they
 * would cost each invocation 4 more live vec4s. Loading the next tile's
 * first chunk later, or the backward's two score blocks in two loops, took
 * more registers or more barriers and ran slower. */

/* The rows an operand of the score loop reads: its pair's row base, the
 * tile variable taken as `tile` where it is the variable. */
static void rows_of(const walk *w, const char *base, const char *tile, char *buf, size_t n) {
    if (strcmp(base, w->var) == 0) snprintf(buf, n, "%s", tile);
    else snprintf(buf, n, "%s", base);
}

/* Rows base.. of operand op, per vec4s a row from vec4 dc4 on, [64, per]
 * in all, into registers <reg>_q: element e = lid + 256 q. */
static void fetch_block(attn_kernel *K, int op, const char *base, int64_t per, const char *dc4, const char *reg) {
    int64_t n = ROWS * per;
    const char *t = op_tag[op];
    char in[48] = "";
    if (n % 256) snprintf(in, sizeof in, "e < %lldu && ", (long long)n);
    for (int64_t q = 0; q * 256 < n; q++)
        tg_source_printf(&K->k.source,
                   "            { let e = lid + %lldu; let t = %s + e / %lldu; %s_%lld = vec4<f32>(0.0f);"
                   " if (%st < %lldu) { %s_%lld = b%s(i%s(b, h, t) + %s + e %% %lldu); } }\n",
                   (long long)(256 * q), base, (long long)per, reg, (long long)q, in, (long long)K->a->T, reg,
                   (long long)q, t, t, dc4, (long long)per);
}

/* A score chunk (head dims [dc4, dc4 + chunk / 4) in vec4s) into registers c<slot>_q. */
static void fetch_chunk(attn_kernel *K, int slot, int op, const char *base, const char *dc4) {
    char reg[16];
    snprintf(reg, sizeof reg, "c%d", slot);
    fetch_block(K, op, base, K->chunk / 4, dc4, reg);
}

/* Registers c<slot>_q into region A at vec4 `at`, transposed: [d][row / 4]
 * vec4 of 4 rows (at position (row / 4) ^ swz(d)). */
static void put_chunk(attn_kernel *K, int slot, int64_t at) {
    int64_t per = K->chunk / 4, n = ROWS * per;
    char sw[48];
    swz(K, "(4u * q4)", sw, sizeof sw);
    for (int64_t q = 0; q * 256 < n; q++)
        tg_source_printf(&K->k.source,
                   "        if (lid + %lldu < %lldu) {\n            let e = lid + %lldu;\n            let rr = e / %lldu;\n"
                   "            let q4 = e %% %lldu;\n            let o = %lldu + 4u * q4 * 16u + ((rr / 4u) ^ %s);\n"
                   "            let c = rr %% 4u;\n            let x = c%d_%lld;\n"
                   "            sh[o][c] = x.x;\n            sh[o + 16u][c] = x.y;\n"
                   "            sh[o + 32u][c] = x.z;\n            sh[o + 48u][c] = x.w;\n        }\n",
                   (long long)(256 * q), (long long)n, (long long)(256 * q), (long long)per, (long long)per, (long long)at,
                   sw, slot, (long long)q);
}

/* The score loop's chunk registers, declared once per kernel. */
static void declare_chunks(attn_kernel *K, const walk *w) {
    int64_t n = ROWS * (K->chunk / 4);
    for (int slot = 0; slot < 2 * w->n; slot++)
        for (int64_t q = 0; q * 256 < n; q++) tg_source_printf(&K->k.source, "    var c%d_%lld = vec4<f32>(0.0f);\n", slot, (long long)q);
}

/* Every operand's chunk at vec4 dc4 of the tile at `tile`. */
static void fetch_chunks(attn_kernel *K, const walk *w, const char *tile, const char *dc4) {
    char ra[64], rb[64];
    rows_of(w, w->ra, tile, ra, sizeof ra);
    rows_of(w, w->rb, tile, rb, sizeof rb);
    for (int p = 0; p < w->n; p++) {
        fetch_chunk(K, 2 * p, w->opa[p], ra, dc4);
        fetch_chunk(K, 2 * p + 1, w->opb[p], rb, dc4);
    }
}

/* Before the walk: the first tile's first chunk. */
static void walk_begin(attn_kernel *K, const walk *w) {
    declare_chunks(K, w);
    fetch_chunks(K, w, w->start, "0u");
}

/* The score blocks of the tile at w->var: for each pair p, sP_r (vec4
 * over 4 columns, r = 0..3) = sum over the head dims of row op a times
 * column op b, chunk by chunk through region A, each chunk's successor
 * (or the next tile's first chunk and the first staged rows) loaded as it
 * is multiplied. */
static void score_blocks(attn_kernel *K, const walk *w, const char *const *pfx) {
    wgsl_source *s = &K->k.source;
    int64_t dc = K->chunk, cs = dc * 16;
    char sw[48], next[64], dnext[48];
    swz(K, "d", sw, sizeof sw);
    snprintf(next, sizeof next, "(%s + 64u)", w->var);
    snprintf(dnext, sizeof dnext, "dc4 + %lldu", (long long)(dc / 4));
    for (int p = 0; p < w->n; p++)
        for (int r = 0; r < 4; r++) tg_source_printf(s, "        var %s%d = vec4<f32>(0.0f);\n", pfx[p], r);
    tg_source_printf(s, "        for (var dc4 = 0u; dc4 < %lldu; dc4 += %lldu) {\n        workgroupBarrier();\n",
               (long long)K->dh4, (long long)(dc / 4));
    for (int slot = 0; slot < 2 * w->n; slot++) put_chunk(K, slot, slot * cs);
    tg_source_printf(s, "        workgroupBarrier();\n        if (dc4 + %lldu < %lldu) {\n", (long long)(dc / 4), (long long)K->dh4);
    fetch_chunks(K, w, w->var, dnext);
    tg_source_printf(s, "        } else {\n            if (%s < %s) {\n", next, w->end);
    fetch_chunks(K, w, next, "0u");
    tg_source_printf(s, "            }\n");
    tg_source_printf(s, "%s", w->extra);
    tg_source_printf(s, "        }\n        for (var d = 0u; d < %lldu; d++) {\n            let sw = %s;\n", (long long)dc, sw);
    for (int p = 0; p < w->n; p++) {
        tg_source_printf(s, "            let x%d = sh[%lldu + d * 16u + (ty ^ sw)];\n            let y%d = sh[%lldu + d * 16u + (tx ^ sw)];\n",
                   p, (long long)(2 * p * cs), p, (long long)((2 * p + 1) * cs));
        static const char comp[4] = {'x', 'y', 'z', 'w'};
        for (int r = 0; r < 4; r++)
            tg_source_printf(s, "            %s%d = fma(vec4<f32>(x%d.%c), y%d, %s%d);\n", pfx[p], r, p, comp[r], p, pfx[p], r);
    }
    tg_source_printf(s, "        }\n        }\n");
}

/* Rows base.. of operand op, [64, Dh / 4] vec4s, through registers v_q
 * (local to the staging) into region A, then the barrier that closes it. */
static void put_rows(attn_kernel *K, int op, const char *base) {
    tg_source_printf(&K->k.source, "        {\n");
    for (int64_t q = 0; q * 256 < ROWS * K->dh4; q++) tg_source_printf(&K->k.source, "        var v_%lld: vec4<f32>;\n", (long long)q);
    fetch_block(K, op, base, K->dh4, "0u", "v");
    for (int64_t q = 0; q * 256 < ROWS * K->dh4; q++)
        tg_source_printf(&K->k.source, "        if (lid + %lldu < %lldu) { sh[lid + %lldu] = v_%lld; }\n", (long long)(256 * q),
                      (long long)(ROWS * K->dh4), (long long)(256 * q), (long long)q);
    tg_source_printf(&K->k.source, "        }\n        workgroupBarrier();\n");
}

/* Block pP_r into region B transposed ([column][row / 4], column j's vec4
 * ty at ty ^ ((j / 4) & 7): for the columns 4 tx + c, ty ^ (tx & 7)), then
 * rows base.. of operand op into region A ([row][Dh / 4]); the barriers
 * around them order these writes after every read of A and B before and
 * before every read after. */
static void stage(attn_kernel *K, const char *p, int op, const char *base) {
    tg_source_printf(&K->k.source,
               "        workgroupBarrier();\n"
               "        sh[AB + (4u * tx) * 16u + (ty ^ (tx & 7u))] = vec4<f32>(%s0.x, %s1.x, %s2.x, %s3.x);\n"
               "        sh[AB + (4u * tx + 1u) * 16u + (ty ^ (tx & 7u))] = vec4<f32>(%s0.y, %s1.y, %s2.y, %s3.y);\n"
               "        sh[AB + (4u * tx + 2u) * 16u + (ty ^ (tx & 7u))] = vec4<f32>(%s0.z, %s1.z, %s2.z, %s3.z);\n"
               "        sh[AB + (4u * tx + 3u) * 16u + (ty ^ (tx & 7u))] = vec4<f32>(%s0.w, %s1.w, %s2.w, %s3.w);\n",
               p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p);
    put_rows(K, op, base);
}

/* accR += sum over the tile's 64 columns j of B[j] (row r) times A's row j.
 * On the diagonal tile the causal mask zeroes up to half of B, yet
 * skipping those columns (a loop bound that varies, or groups of 8 columns
 * behind a warp-uniform test) ran slower. */
static void accumulate(attn_kernel *K, const char *acc) {
    tg_source_printf(&K->k.source,
               "        for (var j = 0u; j < 64u; j++) {\n            let p = sh[AB + j * 16u + (ty ^ ((j / 4u) & 7u))];\n"
               "            let x = sh[j * %lldu + dv];\n"
               "            %s0 = fma(vec4<f32>(p.x), x, %s0);\n            %s1 = fma(vec4<f32>(p.y), x, %s1);\n"
               "            %s2 = fma(vec4<f32>(p.z), x, %s2);\n            %s3 = fma(vec4<f32>(p.w), x, %s3);\n        }\n",
               (long long)K->dh4, acc, acc, acc, acc, acc, acc, acc, acc);
}

/* Whether a row's 16 invocations (lid 16 ty .. 16 ty + 15) lie in one
 * subgroup, as on a device whose subgroups have 16 or more (subgroups are
 * runs of consecutive invocations, rows.c), so that row_reduce exchanges
 * their values by shuffles: no workgroup memory, none of its 3 barriers. */
static bool shuffles(const attn_kernel *K) {
    return K->k.lim->subgroup_min_size >= 16 && tg_wgsl_forced()->attention_shuffles != TG_WGSL_OFF;
}

/* out_r = the max (or sum) of in_r over the 16 invocations of row 4 ty + r,
 * through region A (free on entry and on exit), or by shuffles. The
 * shuffles pair lanes tx ^ 4, then ^ 8, ^ 1 and ^ 2: the same adds as the
 * workgroup-memory form's ((x_c + x_c+4) + (x_c+8 + x_c+12) for c = tx % 4,
 * then (c0 + c1) + (c2 + c3)), up to their operands' order, so a sum has
 * the same bits either way. */
static void row_reduce(attn_kernel *K, const char *in, const char *out, bool max) {
    wgsl_source *s = &K->k.source;
    if (shuffles(K)) {
        K->k.subgroups = true;
        static const unsigned lane[4] = {4, 8, 1, 2};
        for (int r = 0; r < 4; r++) {
            tg_source_printf(s, "        let x%s%d_0 = %s%d;\n", out, r, in, r);
            for (int q = 0; q < 4; q++)
                tg_source_printf(s, max ? "        let x%s%d_%d = max(x%s%d_%d, subgroupShuffleXor(x%s%d_%d, %uu));\n"
                                     : "        let x%s%d_%d = x%s%d_%d + subgroupShuffleXor(x%s%d_%d, %uu);\n",
                              out, r, q + 1, out, r, q, out, r, q, lane[q]);
            tg_source_printf(s, "        let %s%d = x%s%d_4;\n", out, r, out, r);
        }
        return;
    }
    tg_source_printf(s, "        workgroupBarrier();\n");
    for (int r = 0; r < 4; r++) tg_source_printf(s, "        sh[(4u * ty + %du) * 4u + tx / 4u][tx %% 4u] = %s%d;\n", r, in, r);
    tg_source_printf(s, "        workgroupBarrier();\n");
    for (int r = 0; r < 4; r++) {
        tg_source_printf(s, "        let w%s%d = sh[(4u * ty + %du) * 4u];\n", out, r, r);
        for (int q = 1; q < 4; q++)
            tg_source_printf(s, "        let w%s%d_%d = sh[(4u * ty + %du) * 4u + %du];\n", out, r, q, r, q);
        if (max)
            tg_source_printf(s,
                       "        let v%s%d = max(max(w%s%d, w%s%d_1), max(w%s%d_2, w%s%d_3));\n"
                       "        let %s%d = max(max(v%s%d.x, v%s%d.y), max(v%s%d.z, v%s%d.w));\n",
                       out, r, out, r, out, r, out, r, out, r, out, r, out, r, out, r, out, r, out, r);
        else
            tg_source_printf(s,
                       "        let v%s%d = (w%s%d + w%s%d_1) + (w%s%d_2 + w%s%d_3);\n"
                       "        let %s%d = (v%s%d.x + v%s%d.y) + (v%s%d.z + v%s%d.w);\n",
                       out, r, out, r, out, r, out, r, out, r, out, r, out, r, out, r, out, r, out, r);
    }
    tg_source_printf(s, "        workgroupBarrier();\n");
}

/* The 4 x 4 causal mask of the block: `vec4 ok_r`, row 4 ty + r of the
 * block against the tile's columns; queries attend to keys j <= i. */
static void mask(attn_kernel *K, bool rows_are_queries, const char *col0) {
    wgsl_source *s = &K->k.source;
    tg_source_printf(s, "        let cv = vec4<u32>(%s + 4u * tx) + vec4<u32>(0u, 1u, 2u, 3u);\n", col0);
    for (int r = 0; r < 4; r++) {
        if (rows_are_queries)
            tg_source_printf(s, "        let ok%d = (cv <= vec4<u32>(r0 + %du)) & (cv < vec4<u32>(%lldu));\n", r, r,
                       (long long)K->a->T);
        else
            tg_source_printf(s, "        let ok%d = (cv >= vec4<u32>(r0 + %du)) & (cv < vec4<u32>(%lldu));\n", r, r,
                       (long long)K->a->T);
    }
}

static void declare_acc(attn_kernel *K, const char *acc) {
    for (int r = 0; r < 4; r++) tg_source_printf(&K->k.source, "    var %s%d = vec4<f32>(0.0f);\n", acc, r);
}

/* Stores accR (scaled by `scale_r`, or as is) into rows r0 + r of operand op. */
static void store_rows(attn_kernel *K, int op, const char *acc, const char *scale) {
    for (int r = 0; r < 4; r++) {
        tg_source_printf(&K->k.source, "    if (r0 + %du < %lldu && tx < %lldu) { s%s(i%s(b, h, r0 + %du) + tx, %s%d", r,
                   (long long)K->a->T, (long long)K->dh4, op_tag[op], op_tag[op], r, acc, r);
        if (scale) tg_source_printf(&K->k.source, " * %s%d", scale, r);
        tg_source_printf(&K->k.source, "); }\n");
    }
}

/* Row statistic v_r of rows r0 + r into the workspace at float offset `at`. */
static void store_stat(attn_kernel *K, int64_t at, const char *v) {
    for (int r = 0; r < 4; r++)
        tg_source_printf(&K->k.source, "    if (tx == 0u && r0 + %du < %lldu) { work[%lldu + bh * %lldu + r0 + %du] = %s%d; }\n", r,
                   (long long)K->a->T, (long long)at, (long long)K->a->T, r, v, r);
}

/* A walk over the key tiles a query block sees (the forward, dq). */
static walk key_walk(attn_kernel *K, char *end, size_t n) {
    snprintf(end, n, "min(blk * 64u + 64u, %lldu)", (long long)K->a->T);
    return (walk){"j0", "0u", end, 0, {0}, {0}, "blk * 64u", "j0", ""};
}

static void walk_loop(attn_kernel *K, const walk *w) {
    tg_source_printf(&K->k.source, "    for (var %s = %s; %s < %s; %s += 64u) {\n", w->var, w->start, w->var, w->end, w->var);
}

tg_status tg_wgsl_attn_tiles_forward(attn_kernel *K, tg_wgsl_program *out) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    char sc[64], dsc[64];
    if (!open_tiles(K, 2, "forward", sc, dsc)) return tg_kernel_close(k, out);
    wgsl_source *s = &k->source;
    declare_acc(K, "o");
    for (int r = 0; r < 4; r++) tg_source_printf(s, "    var m%d = -3.0e38f;\n    var l%d = 0.0f;\n", r, r);
    char end[64];
    walk w = key_walk(K, end, sizeof end);
    w.n = 1, w.opa[0] = OP_Q, w.opb[0] = OP_K;
    walk_begin(K, &w);
    walk_loop(K, &w);
    static const char *const pf[1] = {"s"};
    score_blocks(K, &w, pf);
    mask(K, true, "j0");
    for (int r = 0; r < 4; r++) {
        tg_source_printf(s, "        let z%d = select(vec4<f32>(-3.0e38f), s%d%s, ok%d);\n", r, r, sc, r);
        tg_source_printf(s, "        let mx%d = max(max(z%d.x, z%d.y), max(z%d.z, z%d.w));\n", r, r, r, r, r);
    }
    row_reduce(K, "mx", "mt", true);
    for (int r = 0; r < 4; r++)
        tg_source_printf(s,
                   "        let mn%d = max(m%d, mt%d);\n        let al%d = exp(m%d - mn%d);\n        m%d = mn%d;\n"
                   "        let p%d = exp(z%d - vec4<f32>(mn%d));\n"
                   "        l%d = l%d * al%d + ((p%d.x + p%d.y) + (p%d.z + p%d.w));\n        o%d = o%d * al%d;\n",
                   r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r);
    stage(K, "p", OP_V, "j0");
    accumulate(K, "o");
    tg_source_printf(s, "    }\n    {\n");
    row_reduce(K, "l", "lt", false);
    for (int r = 0; r < 4; r++) tg_source_printf(s, "    let inv%d = 1.0f / lt%d;\n    let lse%d = m%d + log(lt%d);\n", r, r, r, r, r);
    store_rows(K, OP_O, "o", "inv");
    store_stat(K, a->lse_at / 4, "lse");
    tg_source_printf(s, "    }\n");
    tg_kernel_end(k);
    return tg_kernel_close(k, out);
}

/* p_r and dp_r of a query block against key tile j0, from the kept log-sum-exp lse_r. */
static void probabilities(attn_kernel *K, const walk *w, const char *sc) {
    wgsl_source *s = &K->k.source;
    static const char *const pf[2] = {"s", "g"};
    score_blocks(K, w, pf);
    mask(K, true, "j0");
    for (int r = 0; r < 4; r++)
        tg_source_printf(s, "        let p%d = select(vec4<f32>(0.0f), exp(s%d%s - vec4<f32>(lse%d)), ok%d);\n", r, r, sc, r, r);
}

tg_status tg_wgsl_attn_tiles_dq(attn_kernel *K, tg_wgsl_program *out) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    char sc[64], dsc[64];
    if (!open_tiles(K, 4, "backward, dq", sc, dsc)) return tg_kernel_close(k, out);
    wgsl_source *s = &k->source;
    long long T = a->T;
    /* D = sum over keys of p dp = dout . o, from the forward's result: each
     * invocation's vec4 of the head dimension, summed over the row's 16 */
    for (int r = 0; r < 4; r++)
        tg_source_printf(s,
                   "    let lse%d = work[%lldu + bh * %lldu + min(r0 + %du, %lldu)];\n    var dp%d = 0.0f;\n"
                   "    if (r0 + %du < %lldu && tx < %lldu) { dp%d = dot(bG(iG(b, h, r0 + %du) + tx), bO(iO(b, h, r0 + %du) + tx)); }\n",
                   r, (long long)(a->lse_at / 4), T, r, T - 1, r, r, T, (long long)K->dh4, r, r, r);
    tg_source_printf(s, "    {\n");
    row_reduce(K, "dp", "D", false);
    store_stat(K, a->d_at / 4, "D");
    if (K->node[OP_DQ] >= 0) {
        declare_acc(K, "dq");
        char end[64];
        walk w = key_walk(K, end, sizeof end);
        w.n = 2, w.opa[0] = OP_Q, w.opa[1] = OP_DOUT, w.opb[0] = OP_K, w.opb[1] = OP_V;
        walk_begin(K, &w);
        walk_loop(K, &w);
        probabilities(K, &w, sc);
        for (int r = 0; r < 4; r++) tg_source_printf(s, "        let ds%d = p%d * (g%d - vec4<f32>(D%d))%s;\n", r, r, r, r, dsc);
        stage(K, "ds", OP_K, "j0");
        accumulate(K, "dq");
        tg_source_printf(s, "    }\n");
        store_rows(K, OP_DQ, "dq", NULL);
    }
    tg_source_printf(s, "    }\n");
    tg_kernel_end(k);
    return tg_kernel_close(k, out);
}

tg_status tg_wgsl_attn_tiles_dkdv(attn_kernel *K, tg_wgsl_program *out) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    char sc[64], dsc[64];
    if (!open_tiles(K, 4, "backward, dk dv", sc, dsc)) return tg_kernel_close(k, out);
    wgsl_source *s = &k->source;
    long long T = a->T;
    declare_acc(K, "gk");
    declare_acc(K, "gv");
    /* the query tile's statistics (log-sum-exp and D) by column, loaded with its rows */
    wgsl_source stats = {0};
    tg_source_printf(&stats, "            { let ci = min(vec4<u32>(i0 + 4u * tx) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(%lldu));\n", T - 1);
    static const char comp[4] = {'x', 'y', 'z', 'w'};
    for (int st = 0; st < 2; st++) {
        int64_t at = (st ? a->d_at : a->lse_at) / 4;
        tg_source_printf(&stats, "            %s = vec4<f32>(", st ? "dd" : "ll");
        for (int c = 0; c < 4; c++) tg_source_printf(&stats, "%swork[%lldu + bh * %lldu + ci.%c]", c ? ", " : "", (long long)at, T, comp[c]);
        tg_source_printf(&stats, ");\n");
    }
    tg_source_printf(&stats, "            }\n");
    char end[32];
    snprintf(end, sizeof end, "%lldu", T);
    walk w = {"i0", "blk * 64u", end, 2, {OP_K, OP_V}, {OP_Q, OP_DOUT}, "blk * 64u", "i0", stats.p ? stats.p : ""};
    s->oom |= stats.oom;
    tg_source_printf(s, "    var ll = vec4<f32>(0.0f);\n    var dd = vec4<f32>(0.0f);\n");
    walk_begin(K, &w);
    walk_loop(K, &w);
    static const char *const pf[2] = {"s", "g"};
    score_blocks(K, &w, pf);
    free(stats.p);
    mask(K, false, "i0");
    for (int r = 0; r < 4; r++)
        tg_source_printf(s,
                   "        let p%d = select(vec4<f32>(0.0f), exp(s%d%s - ll), ok%d);\n"
                   "        let ds%d = p%d * (g%d - dd)%s;\n",
                   r, r, sc, r, r, r, r, dsc);
    if (K->node[OP_DV] >= 0) {
        stage(K, "p", OP_DOUT, "i0");
        accumulate(K, "gv");
    }
    if (K->node[OP_DK] >= 0) {
        stage(K, "ds", OP_Q, "i0");
        accumulate(K, "gk");
    }
    tg_source_printf(s, "    }\n");
    if (K->node[OP_DK] >= 0) store_rows(K, OP_DK, "gk", NULL);
    if (K->node[OP_DV] >= 0) store_rows(K, OP_DV, "gv", NULL);
    tg_kernel_end(k);
    return tg_kernel_close(k, out);
}
