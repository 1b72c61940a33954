/* WGSL kernels of the nn ops (CPU: kernels_nn.c): cross-entropy and NLL,
 * layer/RMS norm and their backward helpers, embedding, rope, and the random
 * ops, which draw from the same counter-based hash as the CPU (tg_wgsl_prng).
 *
 * Row ops run on the row kernels of rows.c. Several of these ops may write
 * over an input (in-place): each invocation reads element p only before it
 * writes element p, and every read of another element happens in an earlier
 * pass, behind the reduction barriers. Data-dependent conditions (targets,
 * indices) never steer a barrier: they only pick values with select. */
#include <stdio.h>

#include "emit.h"

static int64_t last_dim(const tg_node *n) { return n->shape.ndim ? n->shape.d[n->shape.ndim - 1] : 1; }

static const char *f32_of(int64_t v, char buf[32]) {
    snprintf(buf, 32, "%lld.0f", (long long)v);
    return buf;
}

/* m = max of ld0 (cached as v0) over the row, z = sum of exp(ld0 - m): the softmax of row l.
 * Where each pass reads the row from memory (rows too long for registers,
 * a vocabulary's), one pass keeps both: the running maximum and the sum
 * rescaled to it whenever it grows (online softmax), each invocation's
 * sum rescaled to the row's maximum before they are added. The maximum
 * starts at -FLT_MAX, not -inf, so a row's leading -inf entries add
 * exp(-inf) = 0 and not exp(-inf - -inf) = NaN; a NaN still propagates. */
static void softmax_stats(row_kernel *L) {
    if (L->regs == 0 && L->wide && !L->sg) {
        tg_source_printf(&L->k->source, "    var m = f32_bits(0xff7fffffu);\n    var z = 0.0f;\n");
        tg_kernel_rows_each(L, NULL, "        if (v0 > m) { z = z * exp(m - v0) + 1.0f; m = v0; } else { z += exp(v0 - m); }\n");
        tg_kernel_rows_combine(L, "m", true, "mx");
        tg_source_printf(&L->k->source, "    let zm = z * exp(m - mx);\n");
        tg_kernel_rows_combine(L, "zm", false, "zs");
        return;
    }
    tg_source_printf(&L->k->source, "    var m = f32_bits(0xff800000u);\n");
    tg_kernel_rows_each(L, NULL, "        m = max(m, v0);\n");
    tg_kernel_rows_combine(L, "m", true, "mx");
    tg_source_printf(&L->k->source, "    var z = 0.0f;\n");
    tg_kernel_rows_each(L, NULL, "        z += exp(v0 - mx);\n");
    tg_kernel_rows_combine(L, "z", false, "zs");
}

/* cross_entropy: logits [R, V], targets i32 [R] -> [R];
 * -((x[t] - max) - log(sum exp(x - max))), 0 for a target outside [0, V). */
bool tg_wgsl_cross_entropy(wgsl_kernel *k) {
    int64_t V = last_dim(tg_kernel_in(k, 0)), R = tg_ir_numel(k->n);
    row_kernel L;
    if (!tg_kernel_rows_open(&L, k, R, V, 1)) return false;
    tg_kernel_rows_cache(&L, 1u, 0u);
    tg_source_printf(&k->source, "    let t = ld1(l);\n    let ok = t >= 0 && t < %lldi;\n", (long long)V);
    softmax_stats(&L);
    tg_kernel_rows_once(&L);
    tg_source_printf(&k->source, "        let xt = ld0(base + u32(clamp(t, 0, %lldi)));\n", (long long)(V - 1));
    tg_source_printf(&k->source, "        st(l, select(0.0f, -((xt - mx) - log(zs)), ok));\n    }\n");
    tg_kernel_end(k);
    return true;
}

/* cross_entropy_grad: (logits [R, V], targets [R], gy [R]) -> [R, V];
 * (softmax(x) - onehot(t)) * gy, 0 for a target outside [0, V). */
bool tg_wgsl_cross_entropy_grad(wgsl_kernel *k) {
    int64_t V = last_dim(k->n), R = V ? tg_ir_numel(k->n) / V : 0;
    row_kernel L;
    if (!tg_kernel_rows_open(&L, k, R, V, 1)) return false;
    tg_kernel_rows_cache(&L, 1u, 0u);
    tg_source_printf(&k->source, "    let t = ld1(l);\n    let ok = t >= 0 && t < %lldi;\n    let g = ld2(l);\n", (long long)V);
    softmax_stats(&L);
    tg_source_printf(&k->source, "    let kg = g / zs;\n");
    tg_kernel_rows_each(&L, NULL,
                    "        let e = exp(v0 - mx) * kg;\n"
                    "        st(p, select(0.0f, select(e, e - g, i32(a) == t), ok));\n");
    tg_kernel_end(k);
    return true;
}

/* nll_loss: (logprobs [R, V], targets [R]) -> [R]; -lp[t], 0 out of range. */
bool tg_wgsl_nll_loss(wgsl_kernel *k) {
    int64_t V = last_dim(tg_kernel_in(k, 0));
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source,
               "    let t = ld1(i);\n"
               "    let v = -ld0(i * %lldu + u32(clamp(t, 0, %lldi)));\n"
               "    st(i, select(0.0f, v, t >= 0 && t < %lldi));\n",
               (long long)V, (long long)(V - 1), (long long)V);
    tg_kernel_end(k);
    return true;
}

/* nll_loss_grad: (targets [R], gy [R]) -> [R, V]; -gy at the target, else 0. */
bool tg_wgsl_nll_loss_grad(wgsl_kernel *k) {
    int64_t V = k->n->at.classes.v;
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    let r = i / %lldu;\n    %s(i, select(0.0f, -%s(r), %s(r) == i32(i %% %lldu)));\n",
               (long long)V, k->store_name, k->load_name[1], k->load_name[0], (long long)V);
    tg_kernel_end(k);
    return true;
}

/* The row statistics of norm_stats_row (kernels_nn.c): mean (0 for RMS) and
 * rstd = 1 / sqrt(mean((x - mean)^2) + eps), over ld0 of the row (cached as v0).
 * The two sums stay in sequence: merging per-subgroup statistics with
 * Chan's formula (one pair of barriers instead of two) was no faster. */
static void norm_stats(row_kernel *L, bool rms, float eps) {
    wgsl_kernel *k = L->k;
    char D[32], e[48];
    f32_of(L->A, D);
    if (rms) tg_source_printf(&k->source, "    let mean = 0.0f;\n");
    else {
        tg_source_printf(&k->source, "    var s1 = 0.0f;\n");
        tg_kernel_rows_each(L, NULL, "        s1 += v0;\n");
        tg_kernel_rows_combine(L, "s1", false, "ssum");
        tg_source_printf(&k->source, "    let mean = ssum / %s;\n", D);
    }
    tg_source_printf(&k->source, "    var s2 = 0.0f;\n");
    tg_kernel_rows_each(L, NULL, "        let dv = v0 - mean;\n        s2 += dv * dv;\n");
    tg_kernel_rows_combine(L, "s2", false, "sq");
    tg_source_printf(&k->source, "    let rstd = 1.0f / sqrt(sq / %s + %s);\n", D, tg_kernel_f32(eps, e));
}

/* layer_norm (x, g, b) / rms_norm (x, g) over the last axis of x [R, D];
 * with a sibling, also its norm_stats [R, 2] through st2. */
bool tg_wgsl_norm(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t D = last_dim(n), R = D ? tg_ir_numel(n) / D : 0;
    row_kernel L;
    if (!tg_kernel_rows_open_norm(&L, k, R, D, 1)) return false;
    /* The gain and bias read into registers with x, before the reductions,
     * not at the stores after them (a workgroup walking several rows in
     * turn, reading them once, was no faster). A row per subgroup
     * (tg_kernel_rows_open_norm, the default where the device allows it)
     * is faster on rows read from memory. */
    tg_kernel_rows_cache(&L, 1u, n->nin > 2 ? 6u : 2u);
    norm_stats(&L, n->op == TG_OP_RMS_NORM, n->at.norm.eps);
    if (k->sibling) { /* the norm_stats of the same x (grouping.c) */
        tg_kernel_rows_once(&L);
        tg_source_printf(&k->source, "        st2(2u * l, mean);\n        st2(2u * l + 1u, rstd);\n    }\n");
    }
    tg_kernel_rows_each(&L, NULL, n->nin > 2 ? "        st(p, (v0 - mean) * rstd * v1 + v2);\n"
                                         : "        st(p, (v0 - mean) * rstd * v1);\n");
    tg_kernel_end(k);
    return true;
}

/* norm_stats: x [R, D] -> [R, 2] = (mean, rstd) per row. */
bool tg_wgsl_norm_stats(wgsl_kernel *k) {
    int64_t D = last_dim(tg_kernel_in(k, 0)), R = D ? tg_ir_numel(tg_kernel_in(k, 0)) / D : 0;
    row_kernel L;
    if (!tg_kernel_rows_open_stats(&L, k, R, D, 1)) return false;
    tg_kernel_rows_cache(&L, 1u, 0u);
    norm_stats(&L, k->n->at.norm.rms, k->n->at.norm.eps);
    tg_kernel_rows_once(&L);
    tg_source_printf(&k->source, "        st(2u * l, mean);\n        st(2u * l + 1u, rstd);\n    }\n");
    tg_kernel_end(k);
    return true;
}

void tg_wgsl_norm_dx_row(row_kernel *L) {
    wgsl_kernel *k = L->k;
    char Df[32];
    f32_of(L->A, Df);
    tg_source_printf(&k->source, "    let mean = ld3(2u * l);\n    let rstd = ld3(2u * l + 1u);\n    var sa = 0.0f;\n    var sb = 0.0f;\n");
    tg_kernel_rows_each(L, NULL, "        let d = v2 * v1;\n        sa += d;\n        sb += d * ((v0 - mean) * rstd);\n");
    tg_kernel_rows_combine2(L, "sa", "sb", "ta", "tb");
    if (k->n->at.norm.rms) tg_source_printf(&k->source, "    let am = 0.0f;\n");
    else tg_source_printf(&k->source, "    let am = ta / %s;\n", Df);
    tg_source_printf(&k->source, "    let bm = tb / %s;\n", Df);
    tg_kernel_rows_each(L, NULL, "        st(p, rstd * (v2 * v1 - am - (v0 - mean) * rstd * bm));\n");
}

/* norm_dx: (x, g, gy, stats) -> dx [R, D]; with xh = (x - mean) rstd, d = gy g:
 * rstd (d - mean(d) - xh mean(d xh)), without the mean(d) term for RMS.
 * With siblings (the gain's and bias's gradients, grouping.c), the fused
 * form of norm_bwd.c. */
bool tg_wgsl_norm_dx(wgsl_kernel *k) {
    if (k->sibling) return tg_wgsl_norm_bwd(k);
    int64_t D = last_dim(k->n), R = D ? tg_ir_numel(k->n) / D : 0;
    row_kernel L;
    if (!tg_kernel_rows_open(&L, k, R, D, 1)) return false;
    tg_kernel_rows_cache(&L, 1u | 4u, 2u); /* x and gy by element, the gain by column */
    tg_wgsl_norm_dx_row(&L);
    tg_kernel_end(k);
    return true;
}

/* norm_dgain: (x [R, D], gy [R, D], stats [R, 2]) -> [D]: sum over rows of
 * gy * xh; with a sibling (the bias gradient, a column sum of gy), that sum too. */
bool tg_wgsl_norm_dgain(wgsl_kernel *k) {
    int64_t D = last_dim(tg_kernel_in(k, 0));
    char e[160], b[64];
    snprintf(e, sizeof e, "ld1(r * %lldu + c) * ((ld0(r * %lldu + c) - ld2(2u * r)) * ld2(2u * r + 1u))", (long long)D,
             (long long)D);
    snprintf(b, sizeof b, "ld1(r * %lldu + c)", (long long)D);
    return tg_kernel_colsum2(k, e, k->sibling ? b : NULL, "f32");
}

/* embedding: (table [V, D], idx [R]) -> [R, D]; a zero row for an index outside [0, V). */
bool tg_wgsl_embedding(wgsl_kernel *k) {
    int64_t D = last_dim(k->n), V = tg_kernel_in(k, 0)->shape.d[0];
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source,
               "    let t = %s(i / %lldu);\n"
               "    let v = %s(u32(clamp(t, 0, %lldi)) * %lldu + i %% %lldu);\n"
               "    %s(i, select(0.0f, v, t >= 0 && t < %lldi));\n",
               k->load_name[1], (long long)D, k->load_name[0], (long long)(V - 1), (long long)D, (long long)D, k->store_name, (long long)V);
    tg_kernel_end(k);
    return true;
}

/* embedding_grad: (idx [R], gy [R, D]) -> [V, D], no atomics (WGSL has
 * none for f32).
 *
 * By warps (tg_wgsl_embedding_grad_split, where the table's rows fit
 * workgroup memory): a workgroup of nw warps takes 32 table columns and a
 * chunk of rows; each warp keeps a private [V, 32] accumulator in
 * workgroup memory and walks batches of 8 rows, loading their indices and
 * gy (8 loads in flight) and adding each gy row into the accumulator row
 * its index picks. Only the lane of a column touches that column, so
 * nothing races; the warps' accumulators are added at the end. gy is read
 * once. From EMB_SPLIT_R rows, over several chunks (two phases): each
 * writes its partial table to the workspace and phase 2 adds them in chunk
 * order, as the split column sums do.
 *
 * Otherwise (a table whose warp accumulators do not fit, or the warps
 * form forced off) the indices are sorted and each table row sums its
 * segment (scatter.c): a column sum over every index for each table
 * element would cost tokens x vocabulary (docs/performance.md, "Embedding
 * gradient"). */
#define EMB_BATCH 8
#define EMB_WARPS 2048 /* warps that keep the loads of a big GPU in flight (132 multiprocessors x 16) */
#define EMB_SPLIT_R 4096 /* rows from which two phases pay for their second dispatch (the column sums' SPLIT_R) */

bool tg_wgsl_embedding_grad_split(const tg_graph *g, const tg_node *n, const tg_wgsl_limits *lim, tg_wgsl_emb_split *e) {
    int forced = tg_wgsl_forced()->embedding_grad;
    if (n->op != TG_OP_EMBEDDING_GRAD || forced == TG_WGSL_OFF) return false;
    int64_t V = n->at.classes.v, D = last_dim(n), R = tg_ir_numel(&g->nodes[n->in[0]]);
    uint64_t per_warp = (uint64_t)V * 32 * 4, room = lim->max_workgroup_storage_size;
    if (V < 1 || D < 1 || R < 1 || per_warp > room) return false;
    int nw = 4;
    while (nw > 1 && nw * per_warp > room) nw /= 2;
    int64_t groups = (D + 31) / 32, step = EMB_BATCH * nw, S = (EMB_WARPS + groups * nw - 1) / (groups * nw);
    if (R < EMB_SPLIT_R || S > R / (2 * V)) S = R < EMB_SPLIT_R ? 1 : R / (2 * V); /* partials at most half of gy */
    if (S > (R + step - 1) / step) S = (R + step - 1) / step;
    if (forced > 0) S = forced;
    while (S > 1 && (uint64_t)(S * V * D * 4) > lim->max_storage_buffer_binding_size) S /= 2;
    if (S < 1) S = 1;
    int64_t chunk = ((R + S - 1) / S + step - 1) / step * step;
    *e = (tg_wgsl_emb_split){R, V, D, groups, chunk, (int)((R + chunk - 1) / chunk), nw};
    return true;
}

static bool embedding_grad_warps(wgsl_kernel *k, const tg_wgsl_emb_split *e) {
    long long V = e->V, D = e->D, R = e->R, G = e->groups, CH = e->chunk, nw = e->nw, S = e->S, step = EMB_BATCH * e->nw;
    if (S > 1 && k->phase == 0) return tg_kernel_fail(k, TG_ERR_BACKEND, "a split embedding gradient runs in two phases");
    if (S > 1 && k->phase == 2) return tg_kernel_colsum_combine(k, e->S, V * D, "f32", false);
    tg_kernel_shared(k, "acc", "f32", nw * V * 32);
    if (!tg_kernel_main(k, G * S, (uint32_t)(32 * nw))) return false;
    k->spec->threads = G * S * 32 * nw;
    tg_source_printf(&k->source,
               "    if (gid >= %lldu) { return; }\n    let cg = gid %% %lldu;\n    let chunk = gid / %lldu;\n"
               "    let tx = lid %% 32u;\n    let w = lid / 32u;\n"
               "    for (var e = lid; e < %lldu; e += %lldu) { acc[e] = 0.0f; }\n    workgroupBarrier();\n"
               "    let c = min(cg * 32u + tx, %lldu);\n    let r0 = chunk * %lldu;\n    let r1 = min(r0 + %lldu, %lldu);\n"
               "    let base = w * %lldu + tx;\n    var r = r0 + w * %du;\n    while (r + %du <= r1) {\n",
               G * S, G, G, nw * V * 32, 32 * nw, D - 1, CH, CH, R, V * 32, EMB_BATCH, EMB_BATCH);
    for (int u = 0; u < EMB_BATCH; u++) tg_source_printf(&k->source, "        let v%d = ld0(r + %du);\n", u, u);
    for (int u = 0; u < EMB_BATCH; u++) tg_source_printf(&k->source, "        let g%d = ld1((r + %du) * %lldu + c);\n", u, u, D);
    for (int u = 0; u < EMB_BATCH; u++)
        tg_source_printf(&k->source, "        if (v%d >= 0 && v%d < %lldi) { acc[base + u32(v%d) * 32u] += g%d; }\n", u, u, V, u, u);
    /* then the warp's last, shorter batch: rows r.. up to r1 */
    tg_source_printf(&k->source,
               "        r += %lldu;\n    }\n    let rend = min(r + %du, r1);\n    for (; r < rend; r++) {\n"
               "        let v = ld0(r);\n        if (v >= 0 && v < %lldi) { acc[base + u32(v) * 32u] += ld1(r * %lldu + c); }\n"
               "    }\n    workgroupBarrier();\n"
               "    for (var e = lid; e < %lldu; e += %lldu) {\n        let col = cg * 32u + e %% 32u;\n"
               "        if (col < %lldu) {\n            var s = acc[e];\n"
               "            for (var q = 1u; q < %lldu; q++) { s += acc[q * %lldu + e]; }\n",
               step, EMB_BATCH, V, D, V * 32, 32 * nw, D, nw, V * 32);
    if (S > 1) tg_source_printf(&k->source, "            work[chunk * %lldu + (e / 32u) * %lldu + col] = bitcast<u32>(s);\n", V * D, D);
    else tg_source_printf(&k->source, "            st((e / 32u) * %lldu + col, s);\n", D);
    tg_source_printf(&k->source, "        }\n    }\n");
    tg_kernel_end(k);
    return true;
}

bool tg_wgsl_embedding_grad(wgsl_kernel *k) {
    tg_wgsl_emb_split e;
    if (tg_wgsl_embedding_grad_split(k->g, k->n, k->lim, &e)) return embedding_grad_warps(k, &e);
    return tg_wgsl_embedding_grad_sorted(k);
}

/* rope: (x [..., T, D], table [T, D] = cos | sin) -> [..., T, D]. One
 * invocation per pair (i, i + D/2) of a row reads both before writing both. */
bool tg_wgsl_rope(wgsl_kernel *k) {
    const tg_shape *s = &k->n->shape;
    int64_t D = s->d[s->ndim - 1], T = s->d[s->ndim - 2], h = D / 2, R = D ? tg_ir_numel(k->n) / D : 0;
    if (!tg_kernel_flat(k, R * h)) return false;
    tg_source_printf(&k->source,
               "    let r = i / %lldu;\n    let j = i %% %lldu;\n"
               "    let tb = (r %% %lldu) * %lldu + j;\n"
               "    let c = ld1(tb);\n    let s = %sld1(tb + %lldu);\n"
               "    let xa = r * %lldu + j;\n    let a = ld0(xa);\n    let b = ld0(xa + %lldu);\n"
               "    st(xa, a * c - b * s);\n    st(xa + %lldu, b * c + a * s);\n",
               (long long)h, (long long)h, (long long)T, (long long)D, k->n->at.rope.inverse ? "-" : "", (long long)h,
               (long long)D, (long long)h, (long long)h);
    tg_kernel_end(k);
    return true;
}

/* The launch key from the seed leaf (i32 [2]: low, high) at input `in`. */
static void rng_key(wgsl_kernel *k, int in) {
    tg_source_printf(&k->source, "    let key = tg_rng_key(bitcast<u32>(%s(0u)), bitcast<u32>(%s(1u)), %uu);\n", k->load_name[in], k->load_name[in],
               (unsigned)k->n->at.rand.salt);
}

/* dropout: (x, seed) -> y; element e is 0 when uniform(e) < p, else x[e] / (1 - p). */
bool tg_wgsl_dropout(wgsl_kernel *k) {
    char p[48], sc[48];
    tg_kernel_helper(k, KERNEL_HELPER_PRNG, tg_wgsl_prng);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    rng_key(k, 1);
    tg_source_printf(&k->source, "    %s(i, select(%s(i) * %s, 0.0f, tg_rng_key_uniform(key, i) < %s));\n", k->store_name, k->load_name[0],
               tg_kernel_f32(k->n->at.rand.scale, sc), tg_kernel_f32(k->n->at.rand.p, p));
    tg_kernel_end(k);
    return true;
}

/* randn: (seed) -> y[e] = normal(e), Box-Muller as tg_rng_key_normal. */
bool tg_wgsl_randn(wgsl_kernel *k) {
    tg_kernel_helper(k, KERNEL_HELPER_PRNG, tg_wgsl_prng);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    rng_key(k, 0);
    tg_source_printf(&k->source, "    %s(i, tg_rng_key_normal(key, i));\n", k->store_name);
    tg_kernel_end(k);
    return true;
}

/* categorical: (logits [R, V], seed) -> i32 [R]; one thread per row runs
 * tg_cpu_categorical's inverse CDF in its order (the pick is a running sum). */
bool tg_wgsl_categorical(wgsl_kernel *k) {
    int64_t V = last_dim(tg_kernel_in(k, 0)), R = tg_ir_numel(k->n);
    tg_kernel_helper(k, KERNEL_HELPER_PRNG, tg_wgsl_prng);
    if (!tg_kernel_flat(k, R)) return false;
    rng_key(k, 1);
    tg_source_printf(&k->source,
               "    let base = i * %lldu;\n"
               "    var m = f32_bits(0xff800000u);\n"
               "    for (var v = 0u; v < %lldu; v++) { m = max(m, ld0(base + v)); }\n"
               "    var z = 0.0f;\n"
               "    for (var v = 0u; v < %lldu; v++) { z += exp(ld0(base + v) - m); }\n"
               "    let goal = tg_rng_key_uniform(key, i) * z;\n"
               "    var run = 0.0f;\n    var pick = -1;\n    var last = %lldi;\n"
               "    for (var v = 0u; v < %lldu; v++) {\n"
               "        let w = exp(ld0(base + v) - m);\n"
               "        if (w > 0.0f) { last = i32(v); }\n"
               "        run += w;\n"
               "        if (goal < run) { pick = i32(v); break; }\n"
               "    }\n"
               "    st(i, select(last, pick, pick >= 0));\n",
               (long long)V, (long long)V, (long long)V, (long long)(V - 1), (long long)V);
    tg_kernel_end(k);
    return true;
}
