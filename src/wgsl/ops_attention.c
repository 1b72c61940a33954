/* The fused causal attention kernels (see fused_attention.h). Every kernel gives
 * one invocation a row (a query row, or a key row in the dk/dv kernel)
 * held in vec4 registers, and walks the other side in tiles that the
 * workgroup loads into workgroup memory together; row t attends to keys
 * 0..t. With s = c q.k (c the scores' constant) and L the row's
 * log-sum-exp:
 *
 *   forward   online softmax: m = max, l = sum exp(s - m), acc = sum
 *             exp(s - m) v, rescaled when m grows; o = acc / l, L = m + log l
 *   dq        p = exp(s - L), dp = dout.v; D = sum p dp (first pass);
 *             dq = sum p (dp - D) c' k (second pass)
 *   dk, dv    over the queries i >= j of key row j: dv = sum p dout,
 *             dk = sum p (dp - D) c' q
 *
 * c' is the constant multiplying softmax_grad in the graph (1 if none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_kernels.h"

static const char *op_name[N_OP] = {"Q", "K", "V", "O", "G", "DQ", "DK", "DV"};

static float const_value(const tg_graph *g, int id) {
    const tg_node *n = &g->nodes[id];
    return n->data ? ((const float *)n->data)[0] : n->at.fill.value;
}

/* Rows per tile: the largest power of two up to 64 (and up to T rounded up)
 * whose `per_row` bytes fit the workgroup memory. */
static int64_t tile_rows(const attn_kernel *K, int64_t per_row) {
    int64_t r = 64;
    while (r > 1 && r / 2 >= K->a->T) r /= 2; /* no longer than the rows there are */
    while (r > 1 && (uint64_t)(r * per_row) > K->k.lim->max_workgroup_storage_size) r /= 2;
    return r;
}

/* Bindings of the operands in use, their row index functions iX(b, h, t)
 * (in vec4s), and the statistics' workspace binding. */
bool tg_wgsl_attn_declare(attn_kernel *K) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    int nodes[N_OP], which[N_OP], n = 0, bind_of[N_OP];
    int64_t off[N_OP];
    static const int order[N_OP] = {OP_O, OP_DQ, OP_DK, OP_DV, OP_Q, OP_K, OP_V, OP_DOUT}; /* outputs first */
    for (int q = 0; q < N_OP; q++)
        if (K->node[order[q]] >= 0) which[n] = order[q], nodes[n++] = K->node[order[q]];
    if (!tg_kernel_bind_nodes(k, nodes, n, bind_of, off)) return false;
    tg_kernel_spec *sp = k->spec;
    if (sp->n_bindings + 1 > TG_WGSL_MAX_BINDINGS || (uint32_t)sp->n_bindings + 1 > k->lim->max_storage_buffers_per_stage)
        return tg_kernel_fail(k, TG_ERR_LIMIT, "attention needs %d storage buffers, over maxStorageBuffersPerShaderStage %u", sp->n_bindings + 1,
                       k->lim->max_storage_buffers_per_stage);
    unsigned written = 0; /* the forward stores o; the backward reads it and stores the gradients */
    bool stores[N_OP];
    for (int q = 0; q < n; q++)
        if ((stores[q] = a->bwd ? which[q] >= OP_DQ : which[q] == OP_O)) written |= 1u << bind_of[q];
    tg_kernel_declare(k, "vec4<f32>", written, false); /* the statistics have a buffer of their own */
    sp->bind[sp->n_bindings] = (tg_wgsl_binding){TG_WGSL_WORKSPACE, 0, K->work};
    sp->workspace = K->work;
    sp->attention_work = true;
    tg_source_printf(&k->source, "@group(0) @binding(%d) var<storage, read_write> work: array<f32>;\n", sp->n_bindings++);
    long long H = a->H, T = a->T;
    for (int q = 0; q < n; q++) {
        const char *nm = op_name[which[q]];
        bool strided = tg_wgsl_attn_strided(K->f, k->g, nodes[q]);
        tg_source_printf(&k->source, "fn i%s(b: u32, h: u32, t: u32) -> u32 { return %lldu + ((b * %lldu + %s) * %lldu + %s) * %lldu; }\n",
                   nm, (long long)(off[q] / 4), strided ? T : H, strided ? "t" : "h", strided ? H : T,
                   strided ? "h" : "t", (long long)K->dh4);
        tg_source_printf(&k->source, "fn b%s(i: u32) -> vec4<f32> { return b%d[i]; }\n", nm, bind_of[q]);
        if (stores[q]) tg_source_printf(&k->source, "fn s%s(i: u32, v: vec4<f32>) { b%d[i] = v; }\n", nm, bind_of[q]);
    }
    return true;
}

/* Opens the entry point: b, h and this invocation's row r (rq: clamped in range). */
static bool open_main(attn_kernel *K) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    K->nblk = (a->T + K->wg - 1) / K->wg;
    k->spec->threads = a->B * a->H * K->nblk * K->wg;
    if (!tg_kernel_main(k, a->B * a->H * K->nblk, K->wg)) return false;
    tg_source_printf(&k->source, "    if (gid >= %lldu) { return; }\n", (long long)(a->B * a->H * K->nblk));
    tg_source_printf(&k->source,
               "    let bh = gid / %lldu;\n    let blk = gid - bh * %lldu;\n    let b = bh / %lldu;\n"
               "    let h = bh - b * %lldu;\n    let r = blk * %uu + lid;\n    let rq = min(r, %lldu);\n",
               (long long)K->nblk, (long long)K->nblk, (long long)a->H, (long long)a->H, K->wg, (long long)(a->T - 1));
    return true;
}

/* Rows live in registers as Dh/4 vec4s: unrolled into named values
 * (r0, r1, ...; what the GPU's compiler gets) or, as generated for a CPU
 * adapter whose shader compiler is slow on long straight-line code, arrays
 * walked by loops. Statements are written once as templates: "$r" is vec4
 * number d of row r, "@" is d as an index. */
static void expand(attn_kernel *K, const char *t, int64_t d, wgsl_source *o) {
    for (const char *c = t; *c; c++) {
        if (*c == '@') {
            if (K->unroll) tg_source_printf(o, "%lldu", (long long)d);
            else tg_source_printf(o, "d");
        } else if (*c == '$') {
            size_t n = strspn(c + 1, "abcdefghijklmnopqrstuvwxyz");
            if (K->unroll) tg_source_printf(o, "%.*s%lld", (int)n, c + 1, (long long)d);
            else tg_source_printf(o, "%.*s[d]", (int)n, c + 1);
            c += n;
        } else {
            tg_source_printf(o, "%c", *c);
        }
    }
}

/* The statement template t for every d. */
static void each(attn_kernel *K, const char *indent, const char *t) {
    if (K->unroll) {
        for (int64_t d = 0; d < K->dh4; d++) {
            tg_source_printf(&K->k.source, "%s", indent);
            expand(K, t, d, &K->k.source);
            tg_source_printf(&K->k.source, "\n");
        }
        return;
    }
    tg_source_printf(&K->k.source, "%sfor (var d = 0u; d < %lldu; d++) { ", indent, (long long)K->dh4);
    expand(K, t, 0, &K->k.source);
    tg_source_printf(&K->k.source, " }\n");
}

/* Declares row r (zeros, or `src(base + d)` for each d). */
static void row(attn_kernel *K, const char *r, const char *src, const char *base) {
    char t[96];
    if (K->unroll) {
        if (src) snprintf(t, sizeof t, "let $%s = %s(%s + @);", r, src, base);
        else snprintf(t, sizeof t, "var $%s = vec4<f32>(0.0f);", r);
        each(K, "    ", t);
        return;
    }
    tg_source_printf(&K->k.source, "    var %s: array<vec4<f32>, %lld>;\n", r, (long long)K->dh4);
    if (!src) return;
    snprintf(t, sizeof t, "$%s = %s(%s + @);", r, src, base);
    each(K, "    ", t);
}

/* `name` = sum over d of dot(term): one expression, or an accumulating loop. */
static void dot_sum(attn_kernel *K, const char *indent, const char *name, const char *term, const char *tail) {
    if (K->unroll) {
        tg_source_printf(&K->k.source, "%slet %s = (", indent, name);
        for (int64_t d = 0; d < K->dh4; d++) {
            tg_source_printf(&K->k.source, "%s", d ? " + " : "");
            expand(K, term, d, &K->k.source);
        }
        tg_source_printf(&K->k.source, ")%s;\n", tail);
        return;
    }
    tg_source_printf(&K->k.source, "%svar %s_ = 0.0f;\n", indent, name);
    char t[128];
    snprintf(t, sizeof t, "%s_ = %s_ + %s;", name, name, term);
    each(K, indent, t);
    tg_source_printf(&K->k.source, "%slet %s = %s_%s;\n", indent, name, name, tail);
}

void tg_wgsl_attn_scale(attn_kernel *K, int node, char *buf) {
    char f[48];
    if (node < 0) strcpy(buf, "");
    else snprintf(buf, 64, " * %s", tg_kernel_f32(const_value(K->k.g, node), f));
}

/* A loop over key tiles of `rows` rows filling kt (and vt) with rows j0.. of
 * K (and V), up to the last key the workgroup's queries see. */
static void key_tiles(attn_kernel *K, int64_t rows, bool with_v) {
    tg_source_printf(&K->k.source,
               "    let kend = min(blk * %uu + %uu, %lldu);\n"
               "    for (var j0 = 0u; j0 < kend; j0 += %lldu) {\n        workgroupBarrier();\n"
               "        for (var e = lid; e < %lldu; e += %uu) {\n            let j = j0 + e / %lldu;\n"
               "            let c = e - (e / %lldu) * %lldu;\n"
               "            if (j < %lldu) { kt[e] = bK(iK(b, h, j) + c);%s }\n        }\n"
               "        workgroupBarrier();\n"
               "        let jn = select(0u, min(%lldu, rq + 1u - j0), rq >= j0);\n"
               "        for (var jj = 0u; jj < jn; jj++) {\n            let kb = jj * %lldu;\n",
               K->wg, K->wg, (long long)K->a->T, (long long)rows, (long long)(rows * K->dh4), K->wg, (long long)K->dh4,
               (long long)K->dh4, (long long)K->dh4, (long long)K->a->T, with_v ? " vt[e] = bV(iV(b, h, j) + c);" : "",
               (long long)rows, (long long)K->dh4);
}

static void tiles_decl(attn_kernel *K, int64_t rows, const char *a, const char *b) {
    tg_kernel_shared(&K->k, a, "vec4<f32>", rows * K->dh4);
    if (b) tg_kernel_shared(&K->k, b, "vec4<f32>", rows * K->dh4);
}

static tg_status emit_forward(attn_kernel *K, tg_wgsl_program *out) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    int64_t rows = tile_rows(K, a->Dh * 8);
    char sc[64];
    tg_wgsl_attn_scale(K, a->scale, sc);
    tg_source_printf(&k->source, "// node %d: attention forward [%lld,%lld,%lld,%lld] (online softmax, %lld-key tiles)\n", k->id,
               (long long)a->B, (long long)a->H, (long long)a->T, (long long)a->Dh, (long long)rows);
    if (!tg_wgsl_attn_declare(K)) return tg_kernel_close(k, out);
    tiles_decl(K, rows, "kt", "vt");
    if (!open_main(K)) return tg_kernel_close(k, out);
    tg_source_printf(&k->source, "    let qi = iQ(b, h, rq);\n");
    row(K, "q", "bQ", "qi");
    row(K, "acc", NULL, NULL);
    tg_source_printf(&k->source, "    var m = -3.0e38f;\n    var l = 0.0f;\n");
    key_tiles(K, rows, true);
    dot_sum(K, "            ", "s", "dot($q, kt[kb + @])", sc);
    tg_source_printf(&k->source, "            if (s > m) {\n                let c = exp(m - s);\n                l = l * c;\n");
    each(K, "                ", "$acc = $acc * c;");
    tg_source_printf(&k->source, "                m = s;\n            }\n            let p = exp(s - m);\n            l = l + p;\n");
    each(K, "            ", "$acc = $acc + p * vt[kb + @];");
    tg_source_printf(&k->source, "        }\n    }\n    if (r < %lldu) {\n        let inv = 1.0f / l;\n        let oi = iO(b, h, r);\n",
               (long long)a->T);
    each(K, "        ", "sO(oi + @, $acc * inv);");
    tg_source_printf(&k->source, "        work[%lldu + bh * %lldu + r] = m + log(l);\n    }\n", (long long)(a->lse_at / 4),
               (long long)a->T);
    tg_kernel_end(k);
    return tg_kernel_close(k, out);
}

/* dq (and D for the dk/dv kernel): one query row per invocation. */
static tg_status emit_dq(attn_kernel *K, tg_wgsl_program *out) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    int64_t rows = tile_rows(K, a->Dh * 8);
    char sc[64], dsc[64];
    tg_wgsl_attn_scale(K, a->scale, sc);
    tg_wgsl_attn_scale(K, a->dscale, dsc);
    tg_source_printf(&k->source, "// node %d: attention backward, dq [%lld,%lld,%lld,%lld] (%lld-key tiles)\n", k->id,
               (long long)a->B, (long long)a->H, (long long)a->T, (long long)a->Dh, (long long)rows);
    if (!tg_wgsl_attn_declare(K)) return tg_kernel_close(k, out);
    tiles_decl(K, rows, "kt", "vt");
    if (!open_main(K)) return tg_kernel_close(k, out);
    tg_source_printf(&k->source, "    let qi = iQ(b, h, rq);\n    let gi = iG(b, h, rq);\n    let oi = iO(b, h, rq);\n");
    row(K, "q", "bQ", "qi");
    row(K, "g", "bG", "gi");
    tg_source_printf(&k->source, "    let lse = work[%lldu + bh * %lldu + rq];\n", (long long)(a->lse_at / 4), (long long)a->T);
    /* D = sum over keys of p dp = dout . o: the forward's result, no pass over the keys */
    dot_sum(K, "    ", "D", "dot($g, bO(oi + @))", "");
    bool dq = K->node[OP_DQ] >= 0;
    if (dq) {
        row(K, "gq", NULL, NULL);
        tg_source_printf(&k->source, "    {\n");
        key_tiles(K, rows, true);
        dot_sum(K, "            ", "s", "dot($q, kt[kb + @])", sc);
        tg_source_printf(&k->source, "            let p = exp(s - lse);\n");
        dot_sum(K, "            ", "dp", "dot($g, vt[kb + @])", "");
        tg_source_printf(&k->source, "            let ds = p * (dp - D)%s;\n", dsc);
        each(K, "            ", "$gq = $gq + ds * kt[kb + @];");
        tg_source_printf(&k->source, "        }\n    }\n    }\n");
    }
    tg_source_printf(&k->source, "    if (r < %lldu) {\n        work[%lldu + bh * %lldu + r] = D;\n", (long long)a->T,
               (long long)(a->d_at / 4), (long long)a->T);
    if (dq) {
        tg_source_printf(&k->source, "        let di = iDQ(b, h, r);\n");
        each(K, "        ", "sDQ(di + @, $gq);");
    }
    tg_source_printf(&k->source, "    }\n");
    tg_kernel_end(k);
    return tg_kernel_close(k, out);
}

/* dk and dv: one key row j per invocation, over the query tiles i >= j. */
static tg_status emit_dkdv(attn_kernel *K, tg_wgsl_program *out) {
    wgsl_kernel *k = &K->k;
    const tg_wgsl_attn *a = K->a;
    int64_t rows = tile_rows(K, a->Dh * 8 + 8);
    char sc[64], dsc[64];
    tg_wgsl_attn_scale(K, a->scale, sc);
    tg_wgsl_attn_scale(K, a->dscale, dsc);
    long long T = a->T, dh4 = K->dh4;
    tg_source_printf(&k->source, "// node %d: attention backward, dk dv [%lld,%lld,%lld,%lld] (%lld-query tiles)\n", k->id,
               (long long)a->B, (long long)a->H, T, (long long)a->Dh, (long long)rows);
    if (!tg_wgsl_attn_declare(K)) return tg_kernel_close(k, out);
    tiles_decl(K, rows, "qt", "gt");
    tg_kernel_shared(k, "lt", "f32", rows);
    tg_kernel_shared(k, "dt", "f32", rows);
    if (!open_main(K)) return tg_kernel_close(k, out);
    tg_source_printf(&k->source, "    let ki = iK(b, h, rq);\n    let vi = iV(b, h, rq);\n");
    row(K, "k", "bK", "ki");
    row(K, "v", "bV", "vi");
    row(K, "gk", NULL, NULL);
    row(K, "gv", NULL, NULL);
    tg_source_printf(&k->source,
               "    for (var i0 = blk * %uu; i0 < %lldu; i0 += %lldu) {\n        workgroupBarrier();\n"
               "        for (var e = lid; e < %lldu; e += %uu) {\n            let i = i0 + e / %lldu;\n"
               "            let c = e - (e / %lldu) * %lldu;\n"
               "            if (i < %lldu) { qt[e] = bQ(iQ(b, h, i) + c); gt[e] = bG(iG(b, h, i) + c); }\n        }\n"
               "        for (var e = lid; e < %lldu; e += %uu) {\n"
               "            if (i0 + e < %lldu) { lt[e] = work[%lldu + bh * %lldu + i0 + e]; dt[e] = work[%lldu + bh * %lldu + i0 + e]; }\n"
               "        }\n        workgroupBarrier();\n"
               "        let ihi = min(i0 + %lldu, %lldu);\n"
               "        for (var i = max(i0, rq); i < ihi; i++) {\n            let ib = (i - i0) * %lldu;\n",
               K->wg, T, (long long)rows, (long long)rows * dh4, K->wg, dh4, dh4, dh4, T, (long long)rows, K->wg, T,
               (long long)(a->lse_at / 4), T, (long long)(a->d_at / 4), T, (long long)rows, T, dh4);
    dot_sum(K, "            ", "s", "dot($k, qt[ib + @])", sc);
    tg_source_printf(&k->source, "            let p = exp(s - lt[i - i0]);\n");
    dot_sum(K, "            ", "dp", "dot($v, gt[ib + @])", "");
    tg_source_printf(&k->source, "            let ds = p * (dp - dt[i - i0])%s;\n", dsc);
    each(K, "            ", "$gv = $gv + p * gt[ib + @];");
    each(K, "            ", "$gk = $gk + ds * qt[ib + @];");
    tg_source_printf(&k->source, "        }\n    }\n    if (r < %lldu) {\n", T);
    if (K->node[OP_DK] >= 0) {
        tg_source_printf(&k->source, "        let oi = iDK(b, h, r);\n");
        each(K, "        ", "sDK(oi + @, $gk);");
    }
    if (K->node[OP_DV] >= 0) {
        tg_source_printf(&k->source, "        let vo = iDV(b, h, r);\n");
        each(K, "        ", "sDV(vo + @, $gv);");
    }
    tg_source_printf(&k->source, "    }\n");
    tg_kernel_end(k);
    return tg_kernel_close(k, out);
}

/* The kernels' form: 64 x 64 blocks where they fit (head size up to 64)
 * and T fills them, else rows, unrolled on a GPU and as loops on a CPU
 * adapter. */
typedef enum { FORM_ROW_LOOPS, FORM_ROWS, FORM_TILES } attn_form;

static attn_form form_of(const tg_wgsl_attn *a, const tg_wgsl_limits *lim) {
    bool tiles = tg_wgsl_attn_tiles_fit(a, lim);
    int forced = tg_wgsl_forced()->attention;
    if (forced == TG_WGSL_ATTN_TILES) return tiles ? FORM_TILES : FORM_ROWS;
    if (forced == TG_WGSL_ATTN_ROWS || forced == TG_WGSL_ATTN_ROW_LOOPS)
        return forced == TG_WGSL_ATTN_ROWS ? FORM_ROWS : FORM_ROW_LOOPS;
    /* Below 64 rows a block is mostly padding: the addition transformer
     * (T 8) steps faster with rows. */
    if (tiles && a->T >= 64) return FORM_TILES;
    return lim->cpu_adapter ? FORM_ROW_LOOPS : FORM_ROWS;
}

static uint32_t rows_per_group(int64_t T) {
    uint32_t w = 4;
    while (w < 64 && w < T) w *= 2;
    return w;
}

tg_status tg_wgsl_emit_attention(const tg_graph *g, const tg_plan *plan, const tg_fusion *f, const tg_wgsl_attn *a,
                                 const tg_wgsl_limits *lim, int64_t work_bytes, tg_wgsl_program *out, int *cap,
                                 tg_status (*push)(tg_wgsl_program *, int *, tg_kernel_spec **)) {
    for (int kernel = 0; kernel < (a->bwd ? 2 : 1); kernel++) {
        if (a->bwd && kernel == 1 && a->dk < 0 && a->dv < 0) break;
        tg_kernel_spec *sp;
        tg_status st = push(out, cap, &sp);
        if (st != TG_OK) return st;
        attn_kernel K;
        memset(&K, 0, sizeof K);
        attn_form form = form_of(a, lim);
        K.a = a, K.f = f, K.wg = rows_per_group(a->T), K.dh4 = a->Dh / 4, K.work = work_bytes;
        K.unroll = form == FORM_ROWS;
        for (int o = 0; o < N_OP; o++) K.node[o] = -1;
        int turn = a->bwd ? (a->dq >= 0 ? a->dq : a->dk >= 0 ? a->dk : a->dv) : a->o;
        for (int o = 0; o < 3 && a->bwd; o++) {
            int c = o == 0 ? a->dq : o == 1 ? a->dk : a->dv;
            if (c >= 0 && c < turn) turn = c;
        }
        tg_kernel_open(&K.k, g, plan, lim, turn, sp);
        if (!a->bwd) {
            K.node[OP_Q] = a->q, K.node[OP_K] = a->k, K.node[OP_V] = a->v, K.node[OP_O] = a->o;
            st = form == FORM_TILES ? tg_wgsl_attn_tiles_forward(&K, out) : emit_forward(&K, out);
        } else if (kernel == 0) {
            K.node[OP_Q] = a->q, K.node[OP_K] = a->k, K.node[OP_V] = a->v, K.node[OP_DOUT] = a->dout;
            K.node[OP_O] = a->o, K.node[OP_DQ] = a->dq;
            st = form == FORM_TILES ? tg_wgsl_attn_tiles_dq(&K, out) : emit_dq(&K, out);
        } else {
            K.node[OP_Q] = a->q, K.node[OP_K] = a->k, K.node[OP_V] = a->v, K.node[OP_DOUT] = a->dout;
            K.node[OP_DK] = a->dk, K.node[OP_DV] = a->dv;
            st = form == FORM_TILES ? tg_wgsl_attn_tiles_dkdv(&K, out) : emit_dkdv(&K, out);
        }
        if (st != TG_OK) return st;
        /* For TG_PROFILE's rates: the products over the causal pairs of
         * rows (a block's masked half not counted), 2 Dh flops a pair each:
         * q.k and p.v; s, dp and dq; s, dp, dv and dk. */
        int products = !a->bwd ? 2 : kernel == 0 ? 3 : 4;
        sp->flops = products * 2.0 * (double)(a->B * a->H) * ((double)a->T * (double)(a->T + 1) / 2) * (double)a->Dh;
    }
    return TG_OK;
}
