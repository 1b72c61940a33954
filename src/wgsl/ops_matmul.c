/* Matmul in WGSL: C[b] = op(A[b]) @ op(B[b]) (CPU: cpu_matmul).
 *
 * A workgroup of 16 x 16 invocations computes one tile of C, each invocation
 * a block of it in registers, with K advancing through workgroup memory:
 *   small: 64 x 64 tiles, 4 x 4 per invocation (rows ty + 16 r, columns
 *          tx + 16 c, so stores are coalesced), K 16 at a time;
 *   large: 128 x 128 tiles, 8 x 8 per invocation (rows 8 ty.., columns
 *          8 tx..) kept as vec4s, K 8 at a time: four times the arithmetic
 *          per workgroup-memory read, for products with both M and N >= 128.
 * The transposed-operand flags only change how a tile is loaded (each load
 * walks the operand's contiguous axis across neighbouring invocations), so no
 * transpose kernel ever runs. Rows of the shared tiles are padded so that
 * loads along K do not all land in one memory bank. */
#include <stdio.h>

#include "emit.h"

typedef struct {
    long long M, N, K, batch, sa, sb, sc;
    bool ta, tb;
} mm_geom;

/* The product as a batch of [M, K] x [K, N]; a shared B with a row-major A
 * folds the batch into M (one large product). */
static mm_geom geometry(const wk *k) {
    const tg_node *n = k->n, *a = wk_in(k, 0), *b = wk_in(k, 1);
    int na = a->shape.ndim, nb = b->shape.ndim;
    mm_geom g = {n->shape.d[na - 2], n->shape.d[na - 1], 0, 1, 0, 0, 0, n->ia[0], n->ia[1]};
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

/* Grid of (N / tile) x (M / tile) x batch workgroups of 256, within limits. */
static bool grid(wk *k, const mm_geom *g, int tile, int shared_bytes) {
    long long gx = (g->N + tile - 1) / tile, gy = (g->M + tile - 1) / tile;
    uint32_t lim = k->lim->max_workgroups_per_dimension;
    if (gx > lim || gy > lim || g->batch > lim)
        return wk_fail(k, TG_ERR_LIMIT, "matmul grid %lld x %lld x %lld exceeds maxComputeWorkgroupsPerDimension %u",
                       gx, gy, g->batch, lim);
    if (shared_bytes > (int64_t)k->lim->max_workgroup_storage_size)
        return wk_fail(k, TG_ERR_LIMIT, "matmul tiles need %d bytes of workgroup storage, over %u", shared_bytes,
                       k->lim->max_workgroup_storage_size);
    if (256 > k->lim->max_invocations_per_workgroup)
        return wk_fail(k, TG_ERR_LIMIT, "matmul needs 256 invocations per workgroup, over %u",
                       k->lim->max_invocations_per_workgroup);
    k->spec->workgroup_size = 256;
    k->spec->dispatch[0] = (uint32_t)(gx ? gx : 1);
    k->spec->dispatch[1] = (uint32_t)(gy ? gy : 1);
    k->spec->dispatch[2] = (uint32_t)(g->batch ? g->batch : 1);
    k->spec->threads = gx * gy * g->batch * 256;
    return true;
}

/* Index expressions of op(A)[m0 + am, k0 + ak] and op(B)[k0 + bk, n0 + bn]
 * (relative to the batch bases), and how invocation slot e maps to them:
 * neighbouring e walk the stored contiguous axis. */
static void operand_exprs(const mm_geom *g, int tile, int tk, char *ai, char *bi, size_t n, const char **amap,
                          const char **bmap) {
    static char am_buf[128], bm_buf[128];
    if (!g->ta) {
        snprintf(ai, n, "(m0 + am) * %lldu + k0 + ak", g->K);
        snprintf(am_buf, sizeof am_buf, "let am = e / %du;\n            let ak = e %% %du;\n", tk, tk);
    } else {
        snprintf(ai, n, "(k0 + ak) * %lldu + m0 + am", g->M);
        snprintf(am_buf, sizeof am_buf, "let ak = e / %du;\n            let am = e %% %du;\n", tile, tile);
    }
    if (!g->tb) {
        snprintf(bi, n, "(k0 + bk) * %lldu + n0 + bn", g->N);
        snprintf(bm_buf, sizeof bm_buf, "let bk = e / %du;\n            let bn = e %% %du;\n", tile, tile);
    } else {
        snprintf(bi, n, "(n0 + bn) * %lldu + k0 + bk", g->K);
        snprintf(bm_buf, sizeof bm_buf, "let bn = e / %du;\n            let bk = e %% %du;\n", tk, tk);
    }
    *amap = am_buf;
    *bmap = bm_buf;
}

/* The shared prologue and the tile loads (each invocation loads `per`
 * elements of each tile); `store_a` / `store_b` store av / bv at (ak, am) /
 * (bk, bn). */
static void loads(wk *k, const mm_geom *g, int tile, int tk, int per, const char *store_a, const char *store_b) {
    char ai[96], bi[96];
    const char *amap, *bmap;
    operand_exprs(g, tile, tk, ai, bi, sizeof ai, &amap, &bmap);
    wsb_printf(&k->s,
               "@compute @workgroup_size(256)\n"
               "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
               "    let tx = lid %% 16u;\n    let ty = lid / 16u;\n"
               "    let n0 = wid.x * %du;\n    let m0 = wid.y * %du;\n"
               "    let abase = wid.z * %lldu;\n    let bbase = wid.z * %lldu;\n    let cbase = wid.z * %lldu;\n",
               tile, tile, g->sa, g->sb, g->sc);
    wsb_printf(&k->s, "%s", tile == 64 ? "    var acc: array<array<f32, 4>, 4>;\n" : "    var acc: array<vec4<f32>, 16>;\n");
    wsb_printf(&k->s,
               "    for (var k0 = 0u; k0 < %lldu; k0 += %du) {\n"
               "        for (var q = 0u; q < %du; q++) {\n"
               "            let e = lid + q * 256u;\n"
               "            %s"
               "            var av = 0.0f;\n"
               "            if (m0 + am < %lldu && k0 + ak < %lldu) { av = ld0(abase + %s); }\n"
               "            %s\n"
               "            %s"
               "            var bv = 0.0f;\n"
               "            if (n0 + bn < %lldu && k0 + bk < %lldu) { bv = ld1(bbase + %s); }\n"
               "            %s\n"
               "        }\n"
               "        workgroupBarrier();\n",
               g->K, tk, per, amap, g->M, g->K, ai, store_a, bmap, g->N, g->K, bi, store_b);
}

#define S_TILE 64
#define S_TK 16
#define S_PAD (S_TILE + 1)

static bool small_tiles(wk *k, const mm_geom *g) {
    if (!grid(k, g, S_TILE, 2 * S_TK * S_PAD * 4)) return false;
    wsb_printf(&k->s, "var<workgroup> As: array<f32, %d>;\nvar<workgroup> Bs: array<f32, %d>;\n", S_TK * S_PAD,
               S_TK * S_PAD);
    loads(k, g, S_TILE, S_TK, 4, "As[ak * 65u + am] = av;", "Bs[bk * 65u + bn] = bv;");
    wsb_printf(&k->s,
               "        for (var kk = 0u; kk < %du; kk++) {\n"
               "            var ar: array<f32, 4>;\n            var br: array<f32, 4>;\n"
               "            for (var r = 0u; r < 4u; r++) { ar[r] = As[kk * %du + ty + 16u * r]; }\n"
               "            for (var c = 0u; c < 4u; c++) { br[c] = Bs[kk * %du + tx + 16u * c]; }\n"
               "            for (var r = 0u; r < 4u; r++) {\n"
               "                for (var c = 0u; c < 4u; c++) { acc[r][c] = acc[r][c] + ar[r] * br[c]; }\n"
               "            }\n"
               "        }\n"
               "        workgroupBarrier();\n"
               "    }\n"
               "    for (var r = 0u; r < 4u; r++) {\n"
               "        let m = m0 + ty + 16u * r;\n"
               "        for (var c = 0u; c < 4u; c++) {\n"
               "            let nn = n0 + tx + 16u * c;\n"
               "            if (m < %lldu && nn < %lldu) { st(cbase + m * %lldu + nn, acc[r][c]); }\n"
               "        }\n"
               "    }\n"
               "}\n",
               S_TK, S_PAD, S_PAD, g->M, g->N, g->N);
    return true;
}

#define L_TILE 128
#define L_TK 8
#define L_ROW 33 /* vec4s per padded tile row: 32 + 1 */

static bool large_tiles(wk *k, const mm_geom *g) {
    if (!grid(k, g, L_TILE, 2 * L_TK * L_ROW * 16)) return false;
    wsb_printf(&k->s, "var<workgroup> As: array<vec4<f32>, %d>;\nvar<workgroup> Bs: array<vec4<f32>, %d>;\n",
               L_TK * L_ROW, L_TK * L_ROW);
    loads(k, g, L_TILE, L_TK, 4, "As[ak * 33u + am / 4u][am % 4u] = av;", "Bs[bk * 33u + bn / 4u][bn % 4u] = bv;");
    /* acc[2 r + h] holds row 8 ty + r, columns 8 tx + 4 h .. + 3. */
    wsb_printf(&k->s,
               "        for (var kk = 0u; kk < %du; kk++) {\n"
               "            let a0 = As[kk * 33u + 2u * ty];\n            let a1 = As[kk * 33u + 2u * ty + 1u];\n"
               "            let b0 = Bs[kk * 33u + 2u * tx];\n            let b1 = Bs[kk * 33u + 2u * tx + 1u];\n"
               "            for (var r = 0u; r < 4u; r++) {\n"
               "                acc[2u * r] += a0[r] * b0;\n                acc[2u * r + 1u] += a0[r] * b1;\n"
               "                acc[2u * r + 8u] += a1[r] * b0;\n                acc[2u * r + 9u] += a1[r] * b1;\n"
               "            }\n"
               "        }\n"
               "        workgroupBarrier();\n"
               "    }\n"
               "    for (var r = 0u; r < 8u; r++) {\n"
               "        let m = m0 + 8u * ty + r;\n"
               "        if (m >= %lldu) { break; }\n"
               "        for (var c = 0u; c < 8u; c++) {\n"
               "            let nn = n0 + 8u * tx + c;\n"
               "            if (nn < %lldu) { st(cbase + m * %lldu + nn, acc[2u * r + c / 4u][c %% 4u]); }\n"
               "        }\n"
               "    }\n"
               "}\n",
               L_TK, g->M, g->N, g->N);
    return true;
}

bool wgsl_matmul(wk *k) {
    mm_geom g = geometry(k);
    return g.M >= L_TILE && g.N >= L_TILE ? large_tiles(k, &g) : small_tiles(k, &g);
}
