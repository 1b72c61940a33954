/* Matmul in WGSL: C[b] = op(A[b]) @ op(B[b]) (CPU: tg_cpu_matmul).
 *
 * A workgroup of 256 invocations computes a BM x BN tile of C, each
 * invocation a TM x TN block of it in registers (vec4 rows), with K
 * advancing BK at a time through workgroup memory:
 *   large   128 x 128 tiles, 8 x 8 per invocation;
 *   tall    128 x 64, 8 x 4 (for N = 64, and where 128 x 128 tiles are too
 *           few to fill the GPU);
 *   small   64 x 64, 4 x 4.
 * An invocation's rows are 4-row groups half a tile apart (rows 4 ty .. and
 * BM/2 + 4 ty ..), likewise its columns, so the vec4 reads of a k-slice from
 * workgroup memory by neighbouring invocations are neighbouring vec4s (no
 * bank conflicts) and each of them feeds 16 multiply-adds. The register
 * block is written out as named variables (no arrays indexed in loops,
 * which a shader compiler may leave in local memory). The next K-slice is
 * loaded into registers before the current one is computed, hiding the
 * global load latency behind the arithmetic. Loads walk each operand's
 * contiguous axis across neighbouring invocations (coalesced); workgroup
 * rows are padded by a vec4 where that walk would hit one bank.
 *
 * The transposed-operand flags only change the index arithmetic of the
 * loads, so no transpose kernel ever runs. When the output has too few tiles
 * to fill the GPU and K is long (the weight gradients: [384 x 16384] x
 * [16384 x 1536]), K is split: phase 1 writes one partial product per
 * K-range into the workspace, phase 2 adds them in order and stores.
 *
 * Slices of 16 (BK), one buffer per tile and tiles of at most 128 x 128
 * keep a large-tile kernel at 128 registers an invocation, two workgroups a
 * multiprocessor on NVIDIA's GPUs: deeper slices, double buffers and larger
 * tiles each ran slower in gpt_small's step (docs/performance.md,
 * "Products", with every figure behind this file's rules). */
#include <stdio.h>
#include <stdlib.h>

#include "emit.h"

typedef struct {
    long long M, N, K, batch, sa, sb, sc;
    bool ta, tb;
} mm_geom;

typedef struct {
    int bm, bn, tm, tn, bk;
} mm_cfg;

static const mm_cfg LARGE = {128, 128, 8, 8, 16}, TALL = {128, 64, 8, 4, 16}, SMALL = {64, 64, 4, 4, 16};

/* The product as a batch of [M, K] x [K, N]; a shared B with a row-major A
 * folds the batch into M (one large product). */
static mm_geom geometry(const tg_graph *gr, const tg_node *n) {
    const tg_node *a = &gr->nodes[n->in[0]], *b = &gr->nodes[n->in[1]];
    int na = a->shape.ndim, nb = b->shape.ndim;
    mm_geom g = {n->shape.d[na - 2], n->shape.d[na - 1], 0, 1, 0, 0, 0, n->at.matmul.ta, n->at.matmul.tb};
    g.K = a->shape.d[na - (g.ta ? 2 : 1)];
    for (int i = 0; i < na - 2; i++) g.batch *= a->shape.d[i];
    g.sa = g.M * g.K;
    g.sb = nb > 2 ? g.K * g.N : 0;
    g.sc = g.M * g.N;
    if (nb == 2 && !g.ta) {
        g.M *= g.batch;
        g.batch = 1;
    }
    return g;
}

static long long tiles(const mm_geom *g, const mm_cfg *c) {
    return ((g->M + c->bm - 1) / c->bm) * ((g->N + c->bn - 1) / c->bn) * g->batch;
}

/* Workgroups that make a GPU of about 132 multiprocessors busy, about
 * three a multiprocessor; below that, smaller tiles or a split K give more
 * workgroups. A product takes as long as its most loaded multiprocessor's
 * tiles, and 384 made gpt_small's step the fastest of the counts tried
 * (docs/performance.md, "Products"). */
#define FILL 384

/* How a warp's 32 invocations (consecutive lid) sit in the grid of 16 x 16
 * register blocks: 16 column blocks of 2 rows (lid % 16, lid / 16), or a
 * square of 8 column blocks of 4 rows. In a k-step the square reads 8
 * distinct vec4s of Bs and 4 of As (one 128-byte wavefront each) instead
 * of 16 and 2, which is faster wherever the kernel only stores its result
 * or walks K of 2048 or more; an epilogue that reads memory beside each
 * element stored one at a time is faster with the rows, but with the
 * result stored 4 columns at a time (vec4_store) it gains from the square
 * too (docs/performance.md, "A warp's register blocks"). */
static bool square_warps(long long kc, bool epilogue, bool st4) {
    int forced = tg_wgsl_forced()->matmul_warps;
    if (forced == TG_WGSL_WARPS_ROWS || forced == TG_WGSL_WARPS_SQUARE) return forced == TG_WGSL_WARPS_SQUARE;
    return kc >= 2048 || !epilogue || st4;
}

/* A test's K-ranges (tg_wgsl_forms.matmul_split) instead of split_of's rule. */
static bool split_forced(void) { return tg_wgsl_forced()->matmul_split > 0; }

static mm_cfg choose(const mm_geom *g) {
    int tile = tg_wgsl_forced()->matmul_tile;
    if (tile == TG_WGSL_TILE_LARGE || tile == TG_WGSL_TILE_TALL || tile == TG_WGSL_TILE_SMALL)
        return tile == TG_WGSL_TILE_LARGE ? LARGE : tile == TG_WGSL_TILE_TALL ? TALL : SMALL;
    bool big = g->M >= 128 && g->N >= 128;
    if (big && (tiles(g, &LARGE) >= FILL || g->K >= 2048)) return LARGE; /* a long K is split to fill the GPU */
    if (g->M >= 128 && g->N >= 64 && tiles(g, &TALL) >= FILL / 2) return TALL;
    return SMALL;
}

/* How many K-ranges: enough workgroups to fill the GPU, each range at least
 * 256 long (a multiple of BK), for products of fewer than FILL / 2 tiles
 * (above that the partials' extra pass costs more than the fuller GPU
 * gains). 1 = no split. Fewer ranges (for two workgroups a
 * multiprocessor, or capped so that a range reaches K 2048 and loads 4 at
 * a time) were no faster (docs/performance.md, "K-ranges"). */
static int split_of(const mm_geom *g, const mm_cfg *c, int members) {
    if (split_forced()) return tg_wgsl_forced()->matmul_split;
    long long t = tiles(g, c) * members; /* a group's members fill the GPU together */
    if (t >= FILL / 2 || g->K < 1024) return 1;
    long long s = (FILL + t - 1) / t;
    if (s > g->K / 256) s = g->K / 256;
    if (s > 64) s = 64;
    return s < 2 ? 1 : (int)s;
}

/* The K a workgroup walks: all of it, or with s ranges a range (a multiple of BK). */
static long long k_per_split(const mm_geom *g, const mm_cfg *c, int s) {
    if (s < 2) return g->K;
    long long kc = (g->K + s - 1) / s;
    return (kc + c->bk - 1) / c->bk * c->bk;
}

/* M, N, K and the K-ranges multiples of the tile, every range non-empty:
 * no bounds checks (a last, shorter range still ends on a slice), which
 * the split weight gradients need most (their K = 16384 in 11 ranges). */
static bool exact_tiles(const mm_geom *g, const mm_cfg *c, int split) {
    long long kc = k_per_split(g, c, split);
    return g->M % c->bm == 0 && g->N % c->bn == 0 && g->K % c->bk == 0 && kc % c->bk == 0 && (split - 1) * kc < g->K;
}

int tg_wgsl_matmul_split(const tg_graph *gr, int id, int64_t *work_bytes) {
    const tg_node *n = &gr->nodes[id];
    *work_bytes = 0;
    if (n->op != TG_OP_MATMUL) return 1;
    mm_geom g = geometry(gr, n);
    mm_cfg c = choose(&g);
    int s = split_of(&g, &c, 1);
    if (s > 1) *work_bytes = (int64_t)s * g.batch * g.M * g.N * 4;
    return s;
}

int tg_wgsl_matmul_group_split(const tg_graph *gr, const int *mm, int n, int64_t most, int64_t *work_bytes) {
    mm_geom g = geometry(gr, &gr->nodes[mm[0]]);
    mm_cfg c = choose(&g);
    int s = split_of(&g, &c, n);
    bool forced = split_forced();
    int64_t one = (int64_t)n * g.batch * g.M * g.N * 4; /* the group's partials of one K-range */
    if (s > 1 && !forced) {
        int want = s;
        while (s > 1 && one * s > most) s--; /* no more workspace than the program has anyway */
        if (s < 2) s = want > 1 ? 0 : 1;
    }
    *work_bytes = s > 1 ? one * s : 0;
    return s;
}

static bool same_bytes(const tg_graph *gr, int a, int b);

/* The column sums of a split product's B ride along: a weight gradient
 * dW = X^T dY (K = the rows) and its bias gradient, the column sums of dY
 * over the same rows (the sum's R and C are K and N). */
/* With the column sums beside it a split product takes one K-range fewer,
 * so that its partial products and sums together need no more workspace
 * than its partial products alone did (s - 1 <= M). Only products that leave
 * the GPU mostly idle either way (under FILL / 2 workgroups) take a
 * sibling: for them a range fewer costs nothing measurable, while for the
 * others it cost more than the dispatch it saves. */
static int split_sib(const mm_geom *g, const mm_cfg *c, bool sib) {
    int s = split_of(g, c, 1);
    return sib && s > 2 && !split_forced() ? s - 1 : s;
}

bool tg_wgsl_matmul_colsum_ok(const tg_graph *gr, int mm, int sum, int64_t R, int64_t C) {
    const tg_node *n = &gr->nodes[mm], *s = &gr->nodes[sum];
    if (n->op != TG_OP_MATMUL || n->dtype != TG_F32 || s->dtype != TG_F32) return false;
    mm_geom g = geometry(gr, n);
    mm_cfg c = choose(&g);
    int s0 = split_of(&g, &c, 1);
    if (s0 < 2 || (!split_forced() && (s0 < 3 || tiles(&g, &c) * s0 >= FILL / 2 || s0 - 1 > g.M))) return false;
    return !g.tb && g.batch == 1 && g.K == R && g.N == C && same_bytes(gr, n->in[1], s->in[0]);
}

int64_t tg_wgsl_matmul_colsum_work(const tg_graph *gr, int mm) {
    mm_geom g = geometry(gr, &gr->nodes[mm]);
    mm_cfg c = choose(&g);
    return (int64_t)split_sib(&g, &c, true) * (g.M * g.N + g.N) * 4;
}

/* Element (row, col) of op(A) / op(B) relative to the batch base, as u32 expressions. */
static void a_index(const mm_geom *g, const char *row, const char *col, char *buf, size_t n) {
    if (!g->ta) snprintf(buf, n, "abase + (%s) * %lldu + %s", row, g->K, col);
    else snprintf(buf, n, "abase + (%s) * %lldu + %s", col, g->M, row);
}
static void b_index(const mm_geom *g, const char *row, const char *col, char *buf, size_t n) {
    if (!g->tb) snprintf(buf, n, "bbase + (%s) * %lldu + %s", row, g->N, col);
    else snprintf(buf, n, "bbase + (%s) * %lldu + %s", col, g->K, row);
}

/* Loads of one K-slice of A (rows m0.., k0..) and B into registers paQ and
 * pbQ, or their stores into workgroup memory. Slot q of an invocation is
 * element e = lid + 256 q of the slice, walked along the operand's
 * contiguous axis. */
typedef struct {
    const mm_geom *g;
    const mm_cfg *c;
    bool exact; /* M, N, K multiples of the tile: no bounds checks */
    int apad, bpad; /* vec4s per k-row of As / Bs */
    const char *sfx; /* the accessors' suffix: "" (any member, through mq), or "_q" (member q's own) */
    bool st4;        /* the result goes out 4 columns at a time, through st4 (vec4_store) */
    bool ld4a, ld4b; /* A / B loaded 4 elements at a time, through ld0v / ld1v (vec4_load) */
} mm_ctx;

/* Slot q's coordinates along an operand's contiguous axis (of len in the
 * slice) and the other, w elements a load (1, or 4 with ld4). */
static void slot(int q, int len, int w, char *contig, char *other, size_t n) {
    int e0 = 256 * q;
    if (w == 1) snprintf(contig, n, "(%du + lid) %% %du", e0, len);
    else snprintf(contig, n, "%du * ((%du + lid) %% %du)", w, e0, len / w);
    snprintf(other, n, "(%du + lid) / %du", e0, len / w);
}
static void a_slot(const mm_ctx *x, int q, char *m, char *k, size_t n) {
    int w = x->ld4a ? 4 : 1;
    if (!x->g->ta) slot(q, x->c->bk, w, k, m, n); /* contiguous along k */
    else slot(q, x->c->bm, w, m, k, n);
}
static void b_slot(const mm_ctx *x, int q, char *k, char *nn, size_t n) {
    int w = x->ld4b ? 4 : 1;
    if (!x->g->tb) slot(q, x->c->bn, w, nn, k, n); /* contiguous along n */
    else slot(q, x->c->bk, w, k, nn, n);
}

/* Loads (slots) of A and B an invocation makes per K-slice. */
static int a_loads(const mm_ctx *x) { return x->c->bm * x->c->bk / 256 / (x->ld4a ? 4 : 1); }
static int b_loads(const mm_ctx *x) { return x->c->bk * x->c->bn / 256 / (x->ld4b ? 4 : 1); }

static void emit_loads(wgsl_kernel *k, const mm_ctx *x, const char *k0) {
    int la = a_loads(x), lb = b_loads(x);
    char r[64], col[64], rr[96], cc[96], idx[320];
    for (int q = 0; q < la; q++) {
        a_slot(x, q, r, col, sizeof r);
        snprintf(rr, sizeof rr, "m0 + %s", r);
        snprintf(cc, sizeof cc, "%s + %s", k0, col);
        a_index(x->g, rr, cc, idx, sizeof idx);
        if (x->exact) tg_source_printf(&k->source, "        pa%d = ld0%s%s(%s);\n", q, x->ld4a ? "v" : "", x->sfx, idx);
        else
            tg_source_printf(&k->source, "        pa%d = 0.0f;\n        if (%s < %lldu && %s < kend) { pa%d = ld0%s(%s); }\n", q, rr,
                       x->g->M, cc, q, x->sfx, idx);
    }
    for (int q = 0; q < lb; q++) {
        b_slot(x, q, r, col, sizeof r);
        snprintf(rr, sizeof rr, "%s + %s", k0, r);
        snprintf(cc, sizeof cc, "n0 + %s", col);
        b_index(x->g, rr, cc, idx, sizeof idx);
        if (x->exact) tg_source_printf(&k->source, "        pb%d = ld1%s%s(%s);\n", q, x->ld4b ? "v" : "", x->sfx, idx);
        else
            tg_source_printf(&k->source, "        pb%d = 0.0f;\n        if (%s < kend && %s < %lldu) { pb%d = ld1%s(%s); }\n", q, rr, cc,
                       x->g->N, q, x->sfx, idx);
    }
}

/* A vec4 loaded along the axis that workgroup memory holds as vec4s (A
 * transposed, B not) is stored whole; otherwise component by component,
 * as 4 consecutive k. */
static void emit_stores(wgsl_kernel *k, const mm_ctx *x) {
    static const char comp[4] = {'x', 'y', 'z', 'w'};
    char r[64], col[64];
    for (int q = 0; q < a_loads(x); q++) {
        a_slot(x, q, r, col, sizeof r);
        if (!x->ld4a) tg_source_printf(&k->source, "        { let am = %s; As[(%s) * %du + am / 4u][am %% 4u] = pa%d; }\n", r, col, x->apad, q);
        else if (x->g->ta) tg_source_printf(&k->source, "        As[(%s) * %du + (%s) / 4u] = pa%d;\n", col, x->apad, r, q);
        else
            for (int j = 0; j < 4; j++)
                tg_source_printf(&k->source, "        { let am = %s; As[(%s + %du) * %du + am / 4u][am %% 4u] = pa%d.%c; }\n", r, col, j,
                              x->apad, q, comp[j]);
    }
    for (int q = 0; q < b_loads(x); q++) {
        b_slot(x, q, r, col, sizeof r);
        if (!x->ld4b) tg_source_printf(&k->source, "        { let bn = %s; Bs[(%s) * %du + bn / 4u][bn %% 4u] = pb%d; }\n", col, r, x->bpad, q);
        else if (!x->g->tb) tg_source_printf(&k->source, "        Bs[(%s) * %du + (%s) / 4u] = pb%d;\n", r, x->bpad, col, q);
        else
            for (int j = 0; j < 4; j++)
                tg_source_printf(&k->source, "        { let bn = %s; Bs[(%s + %du) * %du + bn / 4u][bn %% 4u] = pb%d.%c; }\n", col, r, j,
                              x->bpad, q, comp[j]);
    }
}

/* Row (r) / column group (h) of an invocation's block. */
static void block_row(const mm_cfg *c, int r, char *buf, size_t n) {
    snprintf(buf, n, "%du + 4u * ty + %du", (r / 4) * (c->bm / 2), r % 4);
}
static void block_col(const mm_cfg *c, int h, char *buf, size_t n) {
    snprintf(buf, n, "%du + 4u * tx", h * (c->bn / 2));
}

static bool grid(wgsl_kernel *k, const mm_geom *g, const mm_cfg *c, int split, int members, int shared_bytes) {
    long long gx = members * ((g->N + c->bn - 1) / c->bn), gy = (g->M + c->bm - 1) / c->bm, gz = g->batch * split;
    uint32_t lim = k->lim->max_workgroups_per_dimension;
    if (gx > lim || gy > lim || gz > lim)
        return tg_kernel_fail(k, TG_ERR_LIMIT, "matmul grid %lld x %lld x %lld exceeds maxComputeWorkgroupsPerDimension %u", gx,
                       gy, gz, lim);
    if (shared_bytes > (int64_t)k->lim->max_workgroup_storage_size)
        return tg_kernel_fail(k, TG_ERR_LIMIT, "matmul tiles need %d bytes of workgroup storage, over maxComputeWorkgroupStorageSize %u", shared_bytes,
                       k->lim->max_workgroup_storage_size);
    if (256 > k->lim->max_invocations_per_workgroup)
        return tg_kernel_fail(k, TG_ERR_LIMIT, "matmul needs 256 invocations per workgroup, over maxComputeInvocationsPerWorkgroup %u",
                       k->lim->max_invocations_per_workgroup);
    k->spec->workgroup_size = 256;
    k->spec->dispatch[0] = (uint32_t)(gx ? gx : 1);
    k->spec->dispatch[1] = (uint32_t)(gy ? gy : 1);
    k->spec->dispatch[2] = (uint32_t)(gz ? gz : 1);
    k->spec->threads = gx * gy * gz * 256;
    return true;
}

/* The K loop of tiled(): the first k-slice loaded, then each slice
 * stored into workgroup memory, the next one loaded, and this one
 * multiplied (with a sibling's column sums of B). */
static void k_loop(wgsl_kernel *k, const mm_ctx *x, int split, int members, int terms, bool unroll, const char *kb,
                   const char *ke) {
    const mm_geom *g = x->g;
    const mm_cfg *c = x->c;
    int th = c->tn / 4;
    tg_source_printf(&k->source, "    {\n");
    emit_loads(k, x, kb);
    tg_source_printf(&k->source, "    }\n    for (var k0 = %s; k0 < %s; k0 += %du) {\n        workgroupBarrier();\n", kb, ke, c->bk);
    emit_stores(k, x);
    tg_source_printf(&k->source, "        workgroupBarrier();\n        if (k0 + %du < %s) {\n", c->bk, ke);
    char knext[32];
    snprintf(knext, sizeof knext, "(k0 + %du)", c->bk);
    emit_loads(k, x, knext);
    tg_source_printf(&k->source, "        }\n");
    /* The k-slice is written out step by step for a GPU, whose compiler
     * leaves a loop unrolled no further and runs slower; a CPU adapter gets
     * the loop, its shader compiler being slow on long code. */
    if (!unroll) tg_source_printf(&k->source, "        for (var kk = 0u; kk < %du; kk++) {\n", c->bk);
    for (int step = 0; step < (unroll ? c->bk : 1); step++) {
        if (unroll) tg_source_printf(&k->source, "        {\n            let kk = %du;\n", step);
        for (int ag = 0; ag < c->tm / 4; ag++)
            tg_source_printf(&k->source, "            let a%d = As[kk * %du + ty + %du];\n", ag, x->apad, ag * (c->bm / 8));
        for (int h = 0; h < th; h++)
            tg_source_printf(&k->source, "            let b%d = Bs[kk * %du + tx + %du];\n", h, x->bpad, h * (c->bn / 8));
        static const char comp[4] = {'x', 'y', 'z', 'w'};
        for (int r = 0; r < c->tm; r++)
            for (int h = 0; h < th; h++)
                tg_source_printf(&k->source, "            c%d_%d = fma(vec4<f32>(a%d.%c), b%d, c%d_%d);\n", r, h, r / 4, comp[r % 4], h,
                           r, h);
        tg_source_printf(&k->source, "        }\n");
    }
    /* the sibling's column sums of B: the workgroups of the first row of
     * tiles, one invocation per column of the slice in workgroup memory */
    bool cs = k->sibling > 0 && split > 1 && members == 1 && terms == 1 && !g->tb;
    if (cs)
        tg_source_printf(&k->source, "        if (wid.y == 0u && lid < %du) {\n"
                             "            for (var kk = 0u; kk < %du; kk++) { csum += Bs[kk * %du + lid / 4u][lid %% 4u]; }\n"
                             "        }\n",
                      c->bn, c->bk, x->bpad);
    tg_source_printf(&k->source, "    }\n");
}

/* Whether a product's result is stored 4 columns at a time (st4: one
 * 16-byte store for four 4-byte ones, through a vec4<u32> view of the
 * output's binding), where its tiles cover the output exactly in one
 * K-range and each 4-column group starts on a multiple of 4. `single`: one
 * product, not a group or a sum (multi). Where it applies it is faster
 * (with the square warps), except in lone products of B transposed with no
 * epilogue and products of K 2048 or more (their stores under 1% of the
 * work), which keep one store an element (docs/performance.md, "Results
 * stored 4 columns at a time"). */
static bool vec4_store(const mm_geom *g, const mm_cfg *c, int split, bool epilogue, bool single) {
    int mode = tg_wgsl_forced()->matmul_store4;
    if (mode == TG_WGSL_OFF || (mode != TG_WGSL_ON && ((single && g->tb && !epilogue) || g->K >= 2048))) return false;
    return split == 1 && g->M % c->bm == 0 && g->N % c->bn == 0 && g->K % c->bk == 0 && g->N % 4 == 0 && g->sc % 4 == 0;
}

/* Whether operand j (0: A, 1: B) of a product is loaded 4 elements at a
 * time (ld4: one 16-byte load for four 4-byte ones, through a vec4<u32>
 * view of its binding) along its contiguous axis, where rows of that axis
 * and the batch's stride are multiples of 4 and every invocation loads
 * whole vec4s of the slice: where a workgroup walks K of 2048 or more, where
 * B is transposed and no epilogue follows (`epi`), and in the groups of
 * split products (`split_group`: the q, k and v weight gradients). There
 * it is faster; in every other product, single split products included,
 * it ran slower, kernel by kernel (docs/performance.md, "Operands
 * loaded 4 elements at a time"). */
static bool vec4_load(const mm_geom *g, const mm_cfg *c, int j, int split, int members, bool epi) {
    int mode = tg_wgsl_forced()->matmul_load4;
    long long kc = k_per_split(g, c, split);
    bool split_group = split > 1 && members > 1;
    if (mode == TG_WGSL_OFF || !exact_tiles(g, c, split)) return false;
    if (mode != TG_WGSL_ON && kc < 2048 && !(g->tb && !epi) && !split_group) return false;
    if (j == 0) return c->bm * c->bk % 1024 == 0 && (g->ta ? g->M : g->K) % 4 == 0 && g->sa % 4 == 0;
    return c->bk * c->bn % 1024 == 0 && (g->tb ? g->K : g->N) % 4 == 0 && g->sb % 4 == 0;
}

bool tg_wgsl_matmul_vec4_load(const tg_graph *gr, int id, int j, bool epilogue) {
    const tg_node *n = &gr->nodes[id];
    if (n->op != TG_OP_MATMUL || n->dtype != TG_F32) return false;
    mm_geom g = geometry(gr, n);
    mm_cfg c = choose(&g);
    return vec4_load(&g, &c, j, split_of(&g, &c, 1), 1, epilogue);
}

/* The vec4 views of a product kernel's bindings (one product, a group or a
 * sum): its outputs nodes[first[0] ..+ cnt[0]) take st4 where `st4` and
 * every one of them allows it, its As and Bs (first[1], first[2]) ld4
 * where the rule and every one of them allow it (none where cnt is 0). */
static void views(wgsl_kernel *k, const mm_geom *g, const mm_cfg *c, int split, int members, bool st4, const int *nodes, int n,
                  const int *bind_of, const int64_t *off, const int first[3], const int cnt[3]) {
    for (int a = 0; a < 3; a++) {
        bool ok = cnt[a] > 0 && (a == 0 ? st4 : vec4_load(g, c, a - 1, split, members, k->epilogue));
        for (int q = 0; q < cnt[a] && ok; q++) ok = tg_kernel_vec4_ok(k, nodes, n, bind_of, off, first[a] + q);
        for (int q = 0; q < cnt[a] && ok; q++) k->vec4_bind |= 1u << bind_of[first[a] + q];
        if (ok && a == 0) k->st4 = true;
        if (ok && a > 0) k->ld4 |= 1u << (a - 1);
    }
}

void tg_wgsl_matmul_views(wgsl_kernel *k, const int *nodes, int n, const int *bind_of, const int64_t *elem_off, const int at[2]) {
    const tg_node *x = &k->g->nodes[k->id];
    if (x->op != TG_OP_MATMUL || x->dtype != TG_F32 || k->phase == 2) return;
    mm_geom g = geometry(k->g, x);
    mm_cfg c = choose(&g);
    int s = split_of(&g, &c, 1);
    bool st4 = k->phase == 0 && vec4_store(&g, &c, s, k->epilogue, true);
    views(k, &g, &c, s, 1, st4, nodes, n, bind_of, elem_off,
          (const int[3]){0, at[0], at[1]}, (const int[3]){1, at[0] >= 0, at[1] >= 0});
}

/* The result of tiled(): stored through st (phase 0) or as partial products
 * into the workspace (phase 1), with a sibling's column sums. */
static void k_store(wgsl_kernel *k, const mm_ctx *x, int split, int members, int terms) {
    const mm_geom *g = x->g;
    const mm_cfg *c = x->c;
    int th = c->tn / 4;
    static const char comp[4] = {'x', 'y', 'z', 'w'};
    char row[64], col[64];
    bool cs = k->sibling > 0 && split > 1 && members == 1 && terms == 1 && !g->tb;
    if (cs)
        tg_source_printf(&k->source, "    if (wid.y == 0u && lid < %du && n0 + lid < %lldu) { work[%lluu + wid.z * %lldu + n0 + lid] = bitcast<u32>(csum); }\n",
                      c->bn, g->N, (unsigned long long)(split * g->M * g->N), g->N);
    if (x->st4) {
        for (int r = 0; r < c->tm; r++) {
            block_row(c, r, row, sizeof row);
            tg_source_printf(&k->source, "    {\n        let i = b * %lldu + (m0 + %s) * %lldu + n0;\n", g->sc, row, g->N);
            for (int h = 0; h < th; h++) {
                block_col(c, h, col, sizeof col);
                tg_source_printf(&k->source, "        st4%s(i + %s, c%d_%d);\n", x->sfx, col, r, h);
            }
            tg_source_printf(&k->source, "    }\n");
        }
        return;
    }
    for (int r = 0; r < c->tm; r++) {
        block_row(c, r, row, sizeof row);
        tg_source_printf(&k->source, "    {\n        let m = m0 + %s;\n", row);
        if (!x->exact) tg_source_printf(&k->source, "        if (m < %lldu) {\n", g->M);
        for (int h = 0; h < th; h++) {
            block_col(c, h, col, sizeof col);
            for (int e = 0; e < 4; e++) {
                tg_source_printf(&k->source, "        { let nn = n0 + %s + %du;", col, e);
                if (!x->exact) tg_source_printf(&k->source, " if (nn < %lldu) {", g->N);
                if (split > 1 && members > 1) /* member q's partials after those of the q before it */
                    tg_source_printf(&k->source, " work[(mq * %lldu + wid.z) * %lluu + m * %lldu + nn] = bitcast<u32>(c%d_%d.%c);",
                               g->batch * split, (unsigned long long)(g->M * g->N), g->N, r, h, comp[e]);
                else if (split > 1)
                    tg_source_printf(&k->source, " work[wid.z * %lluu + m * %lldu + nn] = bitcast<u32>(c%d_%d.%c);",
                               (unsigned long long)(g->M * g->N), g->N, r, h, comp[e]);
                else tg_source_printf(&k->source, " st%s(b * %lldu + m * %lldu + nn, c%d_%d.%c);", x->sfx, g->sc, g->N, r, h, comp[e]);
                tg_source_printf(&k->source, "%s }\n", x->exact ? "" : " }");
            }
        }
        if (!x->exact) tg_source_printf(&k->source, "        }\n");
        tg_source_printf(&k->source, "    }\n");
    }
}

/* The work of the product kernel k emits, for TG_PROFILE. */
static void note_work(wgsl_kernel *k, const mm_geom *g, double flops) {
    k->spec->mm_mnk[0] = g->M, k->spec->mm_mnk[1] = g->N, k->spec->mm_mnk[2] = g->K;
    k->spec->flops = flops;
}

/* A single product whose tiles do not all cover its output (M or N not a
 * multiple of the tile, as a vocabulary of 50257 columns) runs the
 * unchecked code in the tiles inside the output and the bounds-checked
 * code only in its edge tiles, chosen per workgroup (uniform). Where K is
 * not a multiple of the slice either (the head's input gradient walks K =
 * 50257), the inside tiles walk the whole slices unchecked and only the
 * last, partial one checked. With K-ranges, only where every range ends
 * on a slice. */
static bool interior_path(const mm_ctx *x, int split, int members, int terms) {
    const mm_geom *g = x->g;
    const mm_cfg *c = x->c;
    long long kc = k_per_split(g, c, split);
    if (x->exact || members != 1 || terms != 1 || g->M < c->bm || g->N < c->bn) return false;
    if (g->K % c->bk == 0) return kc % c->bk == 0 && (split - 1) * kc < g->K;
    return split == 1; /* K past a multiple of the slice: the whole slices unchecked, the last one checked */
}

/* Phase 0: the product, stored through st. Phase 1: partial products of
 * the K-ranges into the workspace. With members > 1, a group of products
 * of one A (tg_wgsl_matmul_group): the column tiles of member q come q-th
 * along x, and mq tells ld1 and st which member's B and C they touch.
 * With terms > 1, a sum of products (tg_wgsl_matmul_sum): every workgroup
 * walks the K loop once per term into the same accumulators, mq telling
 * ld0 and ld1 whose A and B they read. */
static bool tiled(wgsl_kernel *k, const mm_geom *g, const mm_cfg *c, int split, int members, int terms) {
    mm_ctx x = {g, c, false, c->bm / 4 + 1, c->bn / 4, "", false, false, false};
    long long kc = k_per_split(g, c, split);
    x.exact = exact_tiles(g, c, split);
    x.st4 = k->st4 && x.exact && split == 1 && vec4_store(g, c, split, k->epilogue, members == 1 && terms == 1);
    x.ld4a = (k->ld4 & 1) != 0; /* views() decided, with this split and these members */
    x.ld4b = (k->ld4 & 2) != 0;
    if (g->tb) x.bpad = c->bn / 4 + 1; /* k-fastest stores into Bs */
    int shared = 16 * c->bk * (x.apad + x.bpad);
    if (!grid(k, g, c, split, members, shared)) return false;
    note_work(k, g, 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)(g->batch * members * terms));
    int tx_n = c->bn / c->tn, th = c->tn / 4;
    tg_kernel_shared(k, "As", "vec4<f32>", c->bk * x.apad);
    tg_kernel_shared(k, "Bs", "vec4<f32>", c->bk * x.bpad);
    tg_source_printf(&k->source,
               "@compute @workgroup_size(256)\n"
               "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n");
    tg_kernel_poison(k, 256);
    tg_source_printf(&k->source, "    let m0 = wid.y * %du;\n", c->bm);
    if (tx_n == 16 && square_warps(kc, k->epilogue, x.st4)) /* lane bits 0-2 -> tx, 3-4 -> ty; warp bit 0 -> tx, 1-2 -> ty */
        tg_source_printf(&k->source, "    let tx = (lid %% 8u) + 8u * ((lid / 32u) %% 2u);\n    let ty = (lid / 8u) %% 4u + 4u * (lid / 64u);\n");
    else tg_source_printf(&k->source, "    let tx = lid %% %du;\n    let ty = lid / %du;\n", tx_n, tx_n);
    long long gx = (g->N + c->bn - 1) / c->bn;
    if (members > 1) tg_source_printf(&k->source, "    mq = wid.x / %lldu;\n    let n0 = (wid.x %% %lldu) * %du;\n", gx, gx, c->bn);
    else tg_source_printf(&k->source, "    let n0 = wid.x * %du;\n", c->bn);
    if (split > 1)
        tg_source_printf(&k->source, "    let b = wid.z / %du;\n    let kbeg = (wid.z %% %du) * %lldu;\n    let kend = min(%lldu, kbeg + %lldu);\n",
                   split, split, kc, g->K, kc);
    else tg_source_printf(&k->source, "    let b = wid.z;\n    let kbeg = 0u;\n    let kend = %lldu;\n", g->K);
    tg_source_printf(&k->source, "    let abase = b * %lldu;\n    let bbase = b * %lldu;\n", g->sa, g->sb);
    for (int r = 0; r < c->tm; r++)
        for (int h = 0; h < th; h++) tg_source_printf(&k->source, "    var c%d_%d = vec4<f32>(0.0f);\n", r, h);
    if (k->sibling > 0 && split > 1) tg_source_printf(&k->source, "    var csum = 0.0f;\n");
    for (int q = 0; q < a_loads(&x); q++) tg_source_printf(&k->source, "    var pa%d = %s;\n", q, x.ld4a ? "vec4<f32>(0.0f)" : "0.0f");
    for (int q = 0; q < b_loads(&x); q++) tg_source_printf(&k->source, "    var pb%d = %s;\n", q, x.ld4b ? "vec4<f32>(0.0f)" : "0.0f");
    /* A group's members or a sum's terms each get their own copy of the
     * code where it is written out for a GPU (see `unroll` below), calling
     * that member's accessors (ld0_q, ld1_q, st_q) instead of those that
     * switch on mq at every load and store, which walked a group's or sum's
     * K measurably slower than one product of the same work. The loop form
     * keeps one copy. */
    int forced = tg_wgsl_forced()->matmul_unroll;
    bool unroll = forced == TG_WGSL_ON || (forced != TG_WGSL_OFF && !k->lim->cpu_adapter);
    int copies = unroll ? (members > 1 ? members : terms) : 1;
    if (copies > 1 && members > 1) tg_source_printf(&k->source, "    switch (wid.x / %lldu) {\n", gx);
    for (int q = 0; q < copies; q++) {
        char sfx[16] = "";
        if (copies > 1) snprintf(sfx, sizeof sfx, "_%d", q);
        x.sfx = sfx;
        if (copies > 1 && members > 1) tg_source_printf(&k->source, q < copies - 1 ? "    case %du: {\n" : "    default: {\n", q);
        if (terms > 1) /* a term's copy, or every term in turn */
            tg_source_printf(&k->source, copies > 1 ? "    {\n" : "    for (var mi = 0u; mi < %du; mi++) {\n    mq = mi;\n", terms);
        if (interior_path(&x, split, members, terms)) {
            /* the tiles inside the output: the unchecked code; the edge tiles: the checked code below */
            mm_ctx in = x;
            in.exact = true;
            tg_source_printf(&k->source, "    if (m0 + %du <= %lldu && n0 + %du <= %lldu) {\n", c->bm, g->M, c->bn, g->N);
            bool tail = g->K % c->bk != 0; /* the last, partial k-slice (one K-range only) */
            if (tail) tg_source_printf(&k->source, "    let kfull = %lldu;\n", g->K / c->bk * c->bk);
            if (g->K >= c->bk) k_loop(k, &in, split, members, terms, unroll, "kbeg", tail ? "kfull" : "kend");
            if (tail) k_loop(k, &x, split, members, terms, unroll, "kfull", "kend");
            k_store(k, &in, split, members, terms);
            tg_source_printf(&k->source, "    } else {\n");
            k_loop(k, &x, split, members, terms, unroll, "kbeg", "kend");
            k_store(k, &x, split, members, terms);
            tg_source_printf(&k->source, "    }\n");
            continue;
        }
        k_loop(k, &x, split, members, terms, unroll, "kbeg", "kend");
        if (terms > 1) tg_source_printf(&k->source, "    }\n");
        if (terms > 1 && q < copies - 1) continue; /* the terms' sum is stored once, after the last */
        x.sfx = terms > 1 ? "" : sfx;
        k_store(k, &x, split, members, terms);
        if (copies > 1 && members > 1) tg_source_printf(&k->source, "    }\n");
    }
    if (copies > 1 && members > 1) tg_source_printf(&k->source, "    }\n");
    tg_source_printf(&k->source, "}\n");
    return true;
}

/* Phase 2: each output element is the sum of its partial products, in K
 * order. A group's members follow each other (mq picks the output). */
static bool reduce(wgsl_kernel *k, const mm_geom *g, int split, int members) {
    long long mn = g->M * g->N;
    bool cs = k->sibling > 0 && members == 1;
    if (!tg_kernel_flat(k, members * g->batch * mn + (cs ? g->N : 0))) return false;
    note_work(k, g, 0);
    if (cs) /* the sibling's column sums follow the partial products */
        tg_source_printf(&k->source,
                   "    if (i >= %lldu) {\n        let c = i - %lldu;\n        var cacc = 0.0f;\n"
                   "        for (var s = 0u; s < %du; s++) { cacc += bitcast<f32>(work[%lluu + s * %lldu + c]); }\n"
                   "        st2(c, cacc);\n        return;\n    }\n",
                   mn, mn, split, (unsigned long long)(split * mn), g->N);
    tg_source_printf(&k->source,
               "    let b = i / %lldu;\n    let r = i %% %lldu;\n    var acc = 0.0f;\n"
               "    for (var s = 0u; s < %du; s++) { acc += bitcast<f32>(work[(b * %du + s) * %lldu + r]); }\n",
               mn, mn, split, split, mn);
    if (members > 1)
        tg_source_printf(&k->source, "    mq = b / %lldu;\n    st((b %% %lldu) * %lldu + r, acc);\n", g->batch, g->batch, mn);
    else tg_source_printf(&k->source, "    st(i, acc);\n");
    tg_kernel_end(k);
    return true;
}

/* matmul: (a [batch..., M, K] (or [K, M] transposed), b [K, N] or [batch...,
 * K, N] (or transposed)) -> c [batch..., M, N]: one kernel, or with K split
 * phase 1 (partial products [split, batch, M, N] into the workspace) and
 * phase 2 (their sums). With a sibling, the column sums [N] of b over K. */
bool tg_wgsl_matmul(wgsl_kernel *k) {
    mm_geom g = geometry(k->g, k->n);
    mm_cfg c = choose(&g);
    int split = split_sib(&g, &c, k->sibling > 0);
    if (split > 1 && k->phase == 0) return tg_kernel_fail(k, TG_ERR_BACKEND, "a split matmul runs in two phases");
    if (k->phase == 2) return reduce(k, &g, split, 1);
    return tiled(k, &g, &c, k->phase == 1 ? split : 1, 1, 1);
}

bool tg_wgsl_matmul_whole(const tg_graph *gr, int a) {
    const tg_node *x = &gr->nodes[a];
    int64_t w;
    return x->op == TG_OP_MATMUL && x->dtype == TG_F32 && tg_wgsl_matmul_split(gr, a, &w) == 1;
}

/* Whether a and b are one value in memory, element for element: the same
 * node or reshapes of it (each weight gradient reshapes the layer norm's
 * output on its own; the callers compare the shapes they need). */
static bool same_bytes(const tg_graph *gr, int a, int b) {
    while (gr->nodes[a].op == TG_OP_RESHAPE) a = gr->nodes[a].in[0];
    while (gr->nodes[b].op == TG_OP_RESHAPE) b = gr->nodes[b].in[0];
    return a == b;
}

/* Same transposes, same output shape, same B shape, and the same A (or,
 * with !same_a, an A of the same shape); split or not, as a group decides
 * (tg_wgsl_matmul_group_split). */
bool tg_wgsl_matmul_groupable(const tg_graph *gr, int a, int b, bool same_a) {
    const tg_node *x = &gr->nodes[a], *y = &gr->nodes[b];
    if (x->op != TG_OP_MATMUL || y->op != TG_OP_MATMUL || x->dtype != TG_F32 || y->dtype != TG_F32 || x->in[1] == y->in[1])
        return false;
    if (same_a ? !same_bytes(gr, x->in[0], y->in[0]) : !tg_shape_eq(gr->nodes[x->in[0]].shape, gr->nodes[y->in[0]].shape))
        return false;
    if (x->at.matmul.ta != y->at.matmul.ta || x->at.matmul.tb != y->at.matmul.tb) return false;
    return tg_shape_eq(x->shape, y->shape) && tg_shape_eq(gr->nodes[x->in[1]].shape, gr->nodes[y->in[1]].shape);
}

/* A product may lead a group of products of one other A, as an attention
 * block's output projection does its q, k and v: one dispatch instead of
 * two. In gpt_small the four [384, 384] weight gradients then split K 11
 * ways together (the three alone took 14 ranges, the projection 43), which
 * is faster now that split groups load 4 at a time (docs/performance.md,
 * "Groups and sums of products"). */
bool tg_wgsl_matmul_groups_led(void) { return tg_wgsl_forced()->matmul_lead != TG_WGSL_OFF; }

int tg_wgsl_matmul_group_inputs(const tg_graph *gr, const int *mm, int n) {
    int d = 0;
    for (int q = 0; q < n; q++) {
        bool seen = false;
        for (int p = 0; p < q && !seen; p++) seen = same_bytes(gr, gr->nodes[mm[p]].in[0], gr->nodes[mm[q]].in[0]);
        d += !seen;
    }
    return d;
}

/* The body of accessor a (0 st, 1 ld0, 2 ld1, 3 st4, 4 ld0v, 5 ld1v) of
 * the operand at elem_off in binding b. */
static void accessor(const wgsl_kernel *k, int a, int b, int64_t elem_off, char *buf, size_t n) {
    char at[96];
    if (a >= 3) tg_kernel_elem4(b, elem_off, at, sizeof at);
    else tg_kernel_elem(k, b, elem_off, at, sizeof at);
    if (a == 0) snprintf(buf, n, "%s = bitcast<u32>(v);", at);
    else if (a == 3) snprintf(buf, n, "%s = bitcast<vec4<u32>>(v);", at);
    else if (a >= 4) snprintf(buf, n, "return bitcast<vec4<f32>>(%s);", at);
    else snprintf(buf, n, "return bitcast<f32>(%s);", at);
}

/* The one kernel of products mm[0..n) that differ only in some operands:
 * each of the accessors st, ld0 and ld1 reads or writes ops[a][0..cnt[a])
 * (st first, then A, then B), one node for all members or one per member
 * chosen by mq, which is uniform in a workgroup (one branch each). */
static bool multi(wgsl_kernel *k, const char *what, int label, const int *mm, int n, const int *const ops[3], const int cnt[3],
                  int members, int terms, int split, int64_t work) {
    const tg_graph *gr = k->g;
    int nodes[3 * TG_WGSL_MAX_BINDINGS], bind_of[3 * TG_WGSL_MAX_BINDINGS];
    int64_t off[3 * TG_WGSL_MAX_BINDINGS];
    if (n < 2 || n > TG_WGSL_MAX_BINDINGS) return tg_kernel_fail(k, TG_ERR_BACKEND, "a matmul %s of %d", what, n);
    /* split: phase 1 reads the operands into the workspace, phase 2 stores the outputs from it */
    bool use[3] = {split < 2 || k->phase == 2, split < 2 || k->phase != 2, split < 2 || k->phase != 2};
    int nn = 0, first[3];
    for (int a = 0; a < 3; a++) {
        first[a] = nn;
        for (int q = 0; q < cnt[a] && use[a]; q++) nodes[nn++] = ops[a][q];
    }
    tg_source_printf(&k->source, "// node %d: matmul %s of %d [", label, what, n);
    for (int q = 0; q < n; q++) tg_source_printf(&k->source, "%s%d", q ? " " : "", mm[q]);
    char sh[64];
    tg_source_printf(&k->source, "] %s", tg_shape_str(gr->nodes[mm[0]].shape, sh, sizeof sh));
    if (split > 1) tg_source_printf(&k->source, ", K in %d ranges: %s", split, k->phase == 1 ? "partial products" : "their sums");
    tg_source_printf(&k->source, "\n");
    if (!tg_kernel_bind_nodes(k, nodes, nn, bind_of, off)) return false;
    unsigned written = 0;
    for (int q = 0; q < cnt[0] && use[0]; q++) written |= 1u << bind_of[first[0] + q];
    mm_geom g = geometry(gr, &gr->nodes[mm[0]]);
    mm_cfg c = choose(&g);
    int used[3] = {use[0] ? cnt[0] : 0, use[1] ? cnt[1] : 0, use[2] ? cnt[2] : 0};
    views(k, &g, &c, split, members, split < 2 && vec4_store(&g, &c, 1, false, false), nodes, nn, bind_of, off, first,
          used);
    tg_kernel_declare(k, "u32", written, split > 1);
    if (split > 1) {
        tg_kernel_spec *sp = k->spec;
        if (sp->n_bindings == TG_WGSL_MAX_BINDINGS || (uint32_t)sp->n_bindings >= k->lim->max_storage_buffers_per_stage)
            return tg_kernel_fail(k, TG_ERR_LIMIT, "a matmul %s needs %d storage buffers with its workspace, over maxStorageBuffersPerShaderStage %u", what,
                              sp->n_bindings + 1, k->lim->max_storage_buffers_per_stage);
        if ((uint64_t)work > k->lim->max_storage_buffer_binding_size)
            return tg_kernel_fail(k, TG_ERR_LIMIT, "a matmul %s needs %lld bytes of workspace, over maxStorageBufferBindingSize %llu",
                              what, (long long)work, (unsigned long long)k->lim->max_storage_buffer_binding_size);
        sp->bind[sp->n_bindings] = (tg_wgsl_binding){TG_WGSL_WORKSPACE, 0, work};
        sp->workspace = work;
        tg_source_printf(&k->source, "@group(0) @binding(%d) var<storage, read_write> work: array<u32>;\n", sp->n_bindings++);
    }
    tg_source_printf(&k->source, "var<private> mq: u32;\n");
    /* the accessors (st4 where the outputs take stores of 4, ld0v and ld1v
     * where the operands take loads of 4), switching on mq where the members differ */
    static const char *const name[6] = {"st", "ld0", "ld1", "st4", "ld0v", "ld1v"};
    static const char *const args[6] = {"(i: u32, v: f32)", "(i: u32) -> f32",        "(i: u32) -> f32",
                                        "(i: u32, v: vec4<f32>)", "(i: u32) -> vec4<f32>", "(i: u32) -> vec4<f32>"};
    char lab[24], stmt[160];
    for (int a = 0; a < 6; a++) {
        int src = a == 3 ? 0 : a > 3 ? a - 3 : a;
        if (!use[src] || (a == 3 && !k->st4) || (a > 3 && !(k->ld4 >> (a - 4) & 1))) continue;
        for (int q = 0; q < cnt[src]; q++) {
            int w = first[src] + q;
            accessor(k, a, bind_of[w], off[w], stmt, sizeof stmt);
            if (q == 0) tg_source_printf(&k->source, "fn %s%s {\n%s", name[a], args[a], cnt[src] > 1 ? "    switch mq {\n" : "");
            snprintf(lab, sizeof lab, q < cnt[src] - 1 ? "case %du:" : "default:", q);
            if (cnt[src] > 1) tg_source_printf(&k->source, "        %s { %s }\n", lab, stmt);
            else tg_source_printf(&k->source, "    %s\n", stmt);
        }
        tg_source_printf(&k->source, cnt[src] > 1 ? "    }\n}\n" : "}\n");
        /* each member's own accessor, for the copies of tiled()'s code */
        for (int q = 0; q < n; q++) {
            int w = first[src] + (cnt[src] > 1 ? q : 0);
            accessor(k, a, bind_of[w], off[w], stmt, sizeof stmt);
            tg_source_printf(&k->source, "fn %s_%d%s { %s }\n", name[a], q, args[a], stmt);
        }
    }
    if (split > 1 && k->phase == 2) return reduce(k, &g, split, members);
    return tiled(k, &g, &c, split, members, terms);
}

/* C_q = op(A_q) op(B_q) for members mm[0..n), whose As are one (or, led
 * by a product of another A, two: tg_wgsl_matmul_groups_led): one
 * dispatch, or with K split (tg_wgsl_matmul_group_split > 1) phase
 * k->phase of two, the members' partial products one after another in the
 * workspace (the q, k and v weight gradients: two dispatches instead of
 * six). Bindings: the n outputs, the As, the n Bs (merged where the plan
 * overlaps them); split, phase 1 binds the As, the Bs and the workspace,
 * phase 2 the workspace and the outputs. */
bool tg_wgsl_matmul_group(wgsl_kernel *k, const int *mm, int n, int split) {
    int a[TG_WGSL_MAX_BINDINGS], b[TG_WGSL_MAX_BINDINGS];
    for (int q = 0; q < n && q < TG_WGSL_MAX_BINDINGS; q++) a[q] = k->g->nodes[mm[q]].in[0], b[q] = k->g->nodes[mm[q]].in[1];
    int na = n > 0 && tg_wgsl_matmul_group_inputs(k->g, mm, n) > 1 ? n : 1; /* one A for all, or each member's */
    if (n < 1 || split < 1) return tg_kernel_fail(k, TG_ERR_BACKEND, "a matmul group of %d in %d K-ranges", n, split);
    mm_geom g = geometry(k->g, &k->g->nodes[mm[0]]);
    int64_t work = split > 1 ? (int64_t)n * split * g.batch * g.M * g.N * 4 : 0;
    if (split > 1 && k->phase == 0) return tg_kernel_fail(k, TG_ERR_BACKEND, "a split matmul group runs in two phases");
    return multi(k, "group", n > 0 ? mm[n - 1] : -1, mm, n, (const int *const[3]){mm, a, b}, (int[3]){n, na, n}, n, 1,
                 split, work);
}

bool tg_wgsl_matmul_summable(const tg_graph *gr, int a, int b) {
    const tg_node *x = &gr->nodes[a], *y = &gr->nodes[b];
    if (!tg_wgsl_matmul_whole(gr, a) || !tg_wgsl_matmul_whole(gr, b)) return false;
    if (x->at.matmul.ta != y->at.matmul.ta || x->at.matmul.tb != y->at.matmul.tb || !tg_shape_eq(x->shape, y->shape))
        return false;
    for (int i = 0; i < 2; i++)
        if (!tg_shape_eq(gr->nodes[x->in[i]].shape, gr->nodes[y->in[i]].shape)) return false;
    return true;
}

/* out = sum of op(A_q) op(B_q) over the terms mm[0..n), which
 * tg_wgsl_matmul_summable pairs: one dispatch, the terms accumulated in
 * registers in order (the adds that total them, out among them, are never
 * stored apart). Bindings: out, the n As, the n Bs (merged where the plan
 * overlaps them). */
bool tg_wgsl_matmul_sum(wgsl_kernel *k, const int *mm, int n, int out) {
    int a[TG_WGSL_MAX_BINDINGS], b[TG_WGSL_MAX_BINDINGS];
    for (int q = 0; q < n && q < TG_WGSL_MAX_BINDINGS; q++) a[q] = k->g->nodes[mm[q]].in[0], b[q] = k->g->nodes[mm[q]].in[1];
    return multi(k, "sum", out, mm, n, (const int *const[3]){&out, a, b}, (int[3]){1, n, n}, 1, n, 1, 0);
}
