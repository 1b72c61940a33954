/* Matmul in WGSL: C[b] = op(A[b]) @ op(B[b]) (CPU: cpu_matmul).
 *
 * A workgroup of 16 x 16 invocations computes a 64 x 64 tile of C; each
 * invocation keeps a 4 x 4 block of it in registers (rows ty + 16 r, columns
 * tx + 16 c, so stores are coalesced). K advances 16 at a time through
 * workgroup memory; the transposed-operand flags only change how a tile is
 * loaded, so no transpose kernel ever runs. Rows of the shared tiles are
 * padded to 65 floats so the column-wise stores of a transposed load do not
 * all hit one memory bank. */
#include <stdio.h>

#include "emit.h"

#define TM 64
#define TN 64
#define TK 16
#define PAD (TM + 1)

bool wgsl_matmul(wk *k) {
    const tg_node *n = k->n, *a = wk_in(k, 0), *b = wk_in(k, 1);
    int na = a->shape.ndim, nb = b->shape.ndim;
    bool ta = n->ia[0], tb = n->ia[1];
    long long M = n->shape.d[na - 2], N = n->shape.d[na - 1], K = a->shape.d[na - (ta ? 2 : 1)];
    long long batch = 1;
    for (int i = 0; i < na - 2; i++) batch *= a->shape.d[i];
    long long sa = M * K, sb = nb > 2 ? K * N : 0, sc = M * N;
    if (nb == 2 && !ta) { /* a shared B: the batch folds into the rows */
        M *= batch;
        batch = 1;
    }
    long long gx = (N + TN - 1) / TN, gy = (M + TM - 1) / TM;
    uint32_t lim = k->lim->max_workgroups_per_dimension;
    if (gx > lim || gy > lim || batch > lim)
        return wk_fail(k, TG_ERR_LIMIT, "matmul grid %lld x %lld x %lld exceeds maxComputeWorkgroupsPerDimension %u",
                       gx, gy, batch, lim);
    if (2 * TK * PAD * 4 > (int64_t)k->lim->max_workgroup_storage_size)
        return wk_fail(k, TG_ERR_LIMIT, "matmul tiles need %d bytes of workgroup storage, over %u", 2 * TK * PAD * 4,
                       k->lim->max_workgroup_storage_size);
    k->spec->workgroup_size = 256;
    k->spec->dispatch[0] = (uint32_t)(gx ? gx : 1);
    k->spec->dispatch[1] = (uint32_t)(gy ? gy : 1);
    k->spec->dispatch[2] = (uint32_t)(batch ? batch : 1);
    k->spec->threads = gx * gy * batch * 256;

    wsb *s = &k->s;
    wsb_printf(s, "var<workgroup> As: array<f32, %d>;\nvar<workgroup> Bs: array<f32, %d>;\n", TK * PAD, TK * PAD);
    wsb_printf(s,
               "@compute @workgroup_size(256)\n"
               "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
               "    let tx = lid %% 16u;\n    let ty = lid / 16u;\n"
               "    let n0 = wid.x * %du;\n    let m0 = wid.y * %du;\n"
               "    let abase = wid.z * %lldu;\n    let bbase = wid.z * %lldu;\n    let cbase = wid.z * %lldu;\n"
               "    var acc: array<array<f32, 4>, 4>;\n"
               "    for (var k0 = 0u; k0 < %lldu; k0 += %du) {\n"
               "        for (var q = 0u; q < 4u; q++) {\n"
               "            let e = lid + q * 256u;\n",
               TN, TM, sa, sb, sc, K, TK);
    /* A tile: element (kk, mm) of op(A) for rows m0.., depth k0.. */
    if (!ta)
        wsb_printf(s, "            let am = e / %du;\n            let ak = e %% %du;\n", TK, TK);
    else
        wsb_printf(s, "            let ak = e / %du;\n            let am = e %% %du;\n", TM, TM);
    char ai[64], bi[64];
    if (!ta) snprintf(ai, sizeof ai, "(m0 + am) * %lldu + k0 + ak", K);
    else snprintf(ai, sizeof ai, "(k0 + ak) * %lldu + m0 + am", M);
    if (!tb) snprintf(bi, sizeof bi, "(k0 + bk) * %lldu + n0 + bn", N);
    else snprintf(bi, sizeof bi, "(n0 + bn) * %lldu + k0 + bk", K);
    wsb_printf(s,
               "            var av = 0.0f;\n"
               "            if (m0 + am < %lldu && k0 + ak < %lldu) { av = ld0(abase + %s); }\n"
               "            As[ak * %du + am] = av;\n",
               M, K, ai, PAD);
    /* B tile: element (kk, nn) of op(B) for depth k0.., columns n0.. */
    if (!tb)
        wsb_printf(s, "            let bk = e / %du;\n            let bn = e %% %du;\n", TN, TN);
    else
        wsb_printf(s, "            let bn = e / %du;\n            let bk = e %% %du;\n", TK, TK);
    wsb_printf(s,
               "            var bv = 0.0f;\n"
               "            if (n0 + bn < %lldu && k0 + bk < %lldu) { bv = ld1(bbase + %s); }\n"
               "            Bs[bk * %du + bn] = bv;\n"
               "        }\n"
               "        workgroupBarrier();\n",
               N, K, bi, PAD);
    wsb_printf(s,
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
               TK, PAD, PAD, M, N, N);
    return true;
}
