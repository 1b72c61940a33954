/* WGSL kernels of the convolution family (CPU: kernels_conv.c), NCHW f32:
 * conv2d (with its optional bias), its input and weight gradients, max
 * pooling and its gradient, nearest upsampling and its gradient.
 *
 * Every kernel gives each invocation output elements of its own and reads
 * what it needs (a gather), so there are no atomics and no scatter:
 *   conv2d               one output element: the group's channels x taps, in
 *                        (c, i, j) order, then the bias (as the CPU adds it)
 *   conv2d_grad_input    one input element: every output channel of its group
 *                        and every tap that read it, in (o, i, j) order (the
 *                        taps that line up with the stride, found by arithmetic)
 *   conv2d_grad_weight   one weight element: gy * x over every image and
 *                        output pixel, in (n, oy, ox) order; when that sum is
 *                        long, a column sum (rows.c: 32 weights a workgroup,
 *                        8 invocations each taking every 8th term, then a
 *                        fixed tree), so the order is fixed either way and
 *                        nothing grows with the batch
 *   max_pool2d           one output element: the CPU's running v > m ? v : m
 *                        over the clipped window in row-major order (padding
 *                        is never a candidate), NaN if the window holds one
 *   max_pool2d_grad      one input element: for each window that covers it,
 *                        in (oy, ox) order, gy if it is the window's winner
 *                        (the first element equal to y, the first NaN for a
 *                        NaN max), so overlapping windows add as the CPU does
 *   nearest_upsample2d   one output element: a copy
 *   upsample2d_grad      one input element: its f x f block in row-major order
 *
 * Sizes, strides and padding are baked in as module-scope constants (one
 * pipeline per geometry, like the literals of the other emitters). Spatial
 * coordinates that can fall into the padding are computed in i32 and
 * clipped to loop bounds, so no load ever reads outside its tensor. NaN is
 * tested on the bits: shader compilers may assume x != x never holds. */
#include <stdio.h>

#include "emit.h"

static void cu(wgsl_kernel *k, const char *name, int64_t v) { tg_source_printf(&k->source, "const %s = %lldu;\n", name, (long long)v); }
static void ci(wgsl_kernel *k, const char *name, int64_t v) { tg_source_printf(&k->source, "const %s = %lldi;\n", name, (long long)v); }

/* The window geometry shared by conv and pooling: x [N, C, H, W] through a
 * kH x kW window at stride (SH, SW), padding (PH, PW) -> [., ., Ho, Wo]. */
typedef struct {
    int64_t N, C, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw;
} win_geom;

static void win_consts(wgsl_kernel *k, const win_geom *q) {
    cu(k, "N", q->N), cu(k, "C", q->C), cu(k, "H", q->H), cu(k, "W", q->W);
    cu(k, "HW", q->H * q->W), cu(k, "HO", q->Ho), cu(k, "WO", q->Wo), cu(k, "P", q->Ho * q->Wo);
    cu(k, "KH", q->kh), cu(k, "KW", q->kw), cu(k, "SH", q->sh), cu(k, "SW", q->sw);
    ci(k, "Hi", q->H), ci(k, "Wi", q->W), ci(k, "KHi", q->kh), ci(k, "KWi", q->kw);
    ci(k, "PH", q->ph), ci(k, "PW", q->pw), ci(k, "SHi", q->sh), ci(k, "SWi", q->sw);
    ci(k, "HOi", q->Ho), ci(k, "WOi", q->Wo);
}

/* conv geometry from x, w and y's shapes and the attributes. Also declares
 * O, OG (output channels per group) and CG (input channels per group). */
static win_geom conv_consts(wgsl_kernel *k, tg_shape xs, tg_shape ws, tg_shape ys) {
    const tg_attr_conv *a = &k->n->at.conv;
    win_geom q = {xs.d[0], xs.d[1], xs.d[2], xs.d[3], ys.d[2], ys.d[3], ws.d[2], ws.d[3],
                  a->stride_h, a->stride_w, a->pad_h, a->pad_w};
    int64_t G = a->groups;
    win_consts(k, &q);
    cu(k, "O", ws.d[0]), cu(k, "OG", ws.d[0] / G), cu(k, "CG", xs.d[1] / G);
    return q;
}

static win_geom pool_consts(wgsl_kernel *k, tg_shape xs, tg_shape ys) {
    const tg_attr_conv *a = &k->n->at.conv;
    win_geom q = {xs.d[0], xs.d[1], xs.d[2], xs.d[3], ys.d[2], ys.d[3], a->kh, a->kw,
                  a->stride_h, a->stride_w, a->pad_h, a->pad_w};
    win_consts(k, &q);
    return q;
}

/* The taps of output pixel (oy, ox) that land inside the input: rows
 * [a_lo, a_hi) and columns [b_lo, b_hi) of the kernel, at input row y0 + a,
 * column x0 + b (empty ranges when the window lies wholly in the padding). */
static const char *out_window =
    "    let y0 = i32(oy * SH) - PH;\n"
    "    let x0 = i32(ox * SW) - PW;\n"
    "    let a_lo = u32(clamp(-y0, 0, KHi));\n"
    "    let a_hi = u32(clamp(Hi - y0, 0, KHi));\n"
    "    let b_lo = u32(clamp(-x0, 0, KWi));\n"
    "    let b_hi = u32(clamp(Wi - x0, 0, KWi));\n";

/* conv2d: (x [N, C, H, W], w [O, C/G, kH, kW][, b [O]]) -> y [N, O, Ho, Wo] */
bool tg_wgsl_conv2d(wgsl_kernel *k) {
    const tg_node *n = k->n;
    conv_consts(k, tg_kernel_in(k, 0)->shape, tg_kernel_in(k, 1)->shape, n->shape);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let ox = i %% WO;\n    let oy = (i / WO) %% HO;\n"
               "    let o = (i / P) %% O;\n    let img = i / (P * O);\n"
               "%s"
               "    let xb = (img * C + (o / OG) * CG) * HW;\n"
               "    let wb = o * CG * KH * KW;\n"
               "    var acc = 0.0f;\n"
               "    for (var c = 0u; c < CG; c++) {\n"
               "        for (var a = a_lo; a < a_hi; a++) {\n"
               "            let xr = xb + c * HW + u32(y0 + i32(a)) * W;\n"
               "            let wr = wb + (c * KH + a) * KW;\n"
               "            for (var b = b_lo; b < b_hi; b++) {\n"
               "                acc += ld1(wr + b) * ld0(xr + u32(x0 + i32(b)));\n"
               "            }\n"
               "        }\n"
               "    }\n"
               "    st(i, acc%s);\n",
               out_window, n->nin > 2 ? " + ld2(o)" : "");
    tg_kernel_end(k);
    return true;
}

/* conv2d_grad_input: (gy [N, O, Ho, Wo], w [O, C/G, kH, kW]) -> dx [N, C, H, W].
 * Input row iy is read by tap a of output row oy when oy*SH - PH + a = iy:
 * the taps a = ty - oy*SH (ty = iy + PH) with 0 <= oy < Ho and 0 <= a < kH,
 * which step by SH from the lowest one. */
bool tg_wgsl_conv2d_grad_input(wgsl_kernel *k) {
    const tg_node *n = k->n;
    conv_consts(k, n->shape, tg_kernel_in(k, 1)->shape, tg_kernel_in(k, 0)->shape);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let ix = i %% W;\n    let iy = (i / W) %% H;\n"
               "    let ch = (i / HW) %% C;\n    let img = i / (HW * C);\n"
               "    let c = ch %% CG;\n    let o0 = (ch / CG) * OG;\n"
               "    let ty = i32(iy) + PH;\n    let tx = i32(ix) + PW;\n"
               "    let ylo = max(0, ty - (HOi - 1) * SHi);\n    let xlo = max(0, tx - (WOi - 1) * SWi);\n"
               "    let a_lo = u32(ylo + (ty - ylo) %% SHi);\n    let a_hi = u32(min(KHi, ty + 1));\n"
               "    let b_lo = u32(xlo + (tx - xlo) %% SWi);\n    let b_hi = u32(min(KWi, tx + 1));\n"
               "    var acc = 0.0f;\n"
               "    for (var oo = 0u; oo < OG; oo++) {\n"
               "        let o = o0 + oo;\n"
               "        let gb = (img * O + o) * P;\n"
               "        let wb = (o * CG + c) * KH * KW;\n"
               "        for (var a = a_lo; a < a_hi; a += SH) {\n"
               "            let gr = gb + (u32(ty - i32(a)) / SH) * WO;\n"
               "            let wr = wb + a * KW;\n"
               "            for (var b = b_lo; b < b_hi; b += SW) {\n"
               "                acc += ld1(wr + b) * ld0(gr + u32(tx - i32(b)) / SW);\n"
               "            }\n"
               "        }\n"
               "    }\n"
               "    st(i, acc);\n");
    tg_kernel_end(k);
    return true;
}

/* Weight gradients whose sum runs over at least this many terms (images x
 * output pixels) split it 32 ways (tg_kernel_colsum) rather than give it to one
 * thread: a GPU gets 32x the invocations for the few weights of a small
 * conv. (A workgroup per weight, tried first, made the digits CNN's step
 * slower on lavapipe: its barriers cost more than they saved.) */
#define DW_WIDE_TERMS 256

bool tg_wgsl_conv2d_dw_dims(const tg_graph *g, const tg_node *n, int64_t *R, int64_t *C) {
    tg_shape xs = g->nodes[n->in[0]].shape, ys = g->nodes[n->in[1]].shape;
    *R = xs.d[0] * ys.d[2] * ys.d[3], *C = tg_ir_numel(n);
    return *R >= DW_WIDE_TERMS;
}

/* conv2d_grad_weight: (x [N, C, H, W], gy [N, O, Ho, Wo]) -> dw [O, C/G, kH, kW]:
 * dw[o, c, a, b] = sum over n, oy, ox of gy[n, o, oy, ox] * x[n, g*CG + c, oy*SH - PH + a, ox*SW - PW + b]. */
bool tg_wgsl_conv2d_grad_weight(wgsl_kernel *k) {
    const tg_node *n = k->n;
    win_geom q = conv_consts(k, tg_kernel_in(k, 0)->shape, n->shape, tg_kernel_in(k, 1)->shape);
    int64_t terms = q.N * q.Ho * q.Wo, nw = tg_ir_numel(n);
    const char *coords = "    let b = e % KW;\n    let a = (e / KW) % KH;\n" /* a %s argument: single % */
                         "    let c = (e / (KH * KW)) % CG;\n    let o = e / (KH * KW * CG);\n"
                         "    let xc = (o / OG) * CG + c;\n"
                         "    let dy = i32(a) - PH;\n    let dx = i32(b) - PW;\n";
    if (terms < DW_WIDE_TERMS) {
        /* A thread per weight: only the output rows and columns whose tap
         * lands inside the input, [oy0, oy1) x [ox0, ox1). */
        if (!tg_kernel_flat(k, nw)) return false;
        tg_source_printf(&k->source,
                   "    let e = i;\n%s"
                   "    let oy0 = u32(max(0, (SHi - 1 - dy) / SHi));\n"
                   "    let oy1 = u32(clamp((Hi - 1 - dy + SHi) / SHi, 0, HOi));\n"
                   "    let ox0 = u32(max(0, (SWi - 1 - dx) / SWi));\n"
                   "    let ox1 = u32(clamp((Wi - 1 - dx + SWi) / SWi, 0, WOi));\n"
                   "    var acc = 0.0f;\n"
                   "    for (var img = 0u; img < N; img++) {\n"
                   "        let xb = (img * C + xc) * HW;\n"
                   "        let gb = (img * O + o) * P;\n"
                   "        for (var oy = oy0; oy < oy1; oy++) {\n"
                   "            let xr = xb + u32(i32(oy * SH) + dy) * W;\n"
                   "            let gr = gb + oy * WO;\n"
                   "            for (var ox = ox0; ox < ox1; ox++) {\n"
                   "                acc += ld1(gr + ox) * ld0(xr + u32(i32(ox * SW) + dx));\n"
                   "            }\n"
                   "        }\n"
                   "    }\n"
                   "    st(i, acc);\n",
                   coords);
        tg_kernel_end(k);
        return true;
    }
    /* Column sums (rows.c): weight e is column c, term t = (n, oy, ox) row r. */
    tg_source_printf(&k->source,
               "fn term(t: u32, e: u32) -> f32 {\n%s"
               "    let ox = t %% WO;\n    let oy = (t / WO) %% HO;\n    let img = t / P;\n"
               "    let iy = i32(oy * SH) + dy;\n    let ix = i32(ox * SW) + dx;\n"
               "    let inside = iy >= 0 && iy < Hi && ix >= 0 && ix < Wi;\n"
               "    let xv = ld0(select(0u, (img * C + xc) * HW + u32(iy) * W + u32(ix), inside));\n"
               "    return select(0.0f, ld1((img * O + o) * P + oy * WO + ox) * xv, inside);\n}\n",
               coords);
    return tg_kernel_colsum(k, "term(r, c)", "f32");
}

/* max_pool2d: x [N, C, H, W] -> y [N, C, Ho, Wo] */
bool tg_wgsl_max_pool2d(wgsl_kernel *k) {
    const tg_node *n = k->n;
    pool_consts(k, tg_kernel_in(k, 0)->shape, n->shape);
    tg_kernel_is_nan(k);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let ox = i %% WO;\n    let oy = (i / WO) %% HO;\n    let xb = (i / P) * HW;\n"
               "%s"
               "    var m = f32_bits(0xff800000u);\n"
               "    var has_nan = false;\n"
               "    for (var a = a_lo; a < a_hi; a++) {\n"
               "        let xr = xb + u32(y0 + i32(a)) * W;\n"
               "        for (var b = b_lo; b < b_hi; b++) {\n"
               "            let v = ld0(xr + u32(x0 + i32(b)));\n"
               "            m = select(m, v, v > m);\n"
               "            has_nan = has_nan || is_nan(v);\n"
               "        }\n"
               "    }\n"
               "    st(i, select(m, f32_bits(0x7fc00000u), has_nan));\n",
               out_window);
    tg_kernel_end(k);
    return true;
}

/* max_pool2d_grad: (x [N, C, H, W], y, gy [N, C, Ho, Wo]) -> dx [N, C, H, W].
 * The windows covering input row iy are oy in [ceil((iy + PH - kH + 1) / SH),
 * (iy + PH) / SH] within [0, Ho); each is scanned for its winner as the
 * CPU's window scan does (the first element when none matches, as there). */
bool tg_wgsl_max_pool2d_grad(wgsl_kernel *k) {
    const tg_node *n = k->n;
    pool_consts(k, n->shape, tg_kernel_in(k, 1)->shape);
    tg_kernel_is_nan(k);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let ix = i %% W;\n    let iy = (i / W) %% H;\n    let pl = i / HW;\n"
               "    let xb = pl * HW;\n    let me = iy * W + ix;\n"
               "    let ty = i32(iy) + PH;\n    let tx = i32(ix) + PW;\n"
               "    let oy0 = u32(max(0, ty - KHi + SHi) / SHi);\n    let oy1 = u32(min(HOi, ty / SHi + 1));\n"
               "    let ox0 = u32(max(0, tx - KWi + SWi) / SWi);\n    let ox1 = u32(min(WOi, tx / SWi + 1));\n"
               "    var acc = 0.0f;\n"
               "    for (var oy = oy0; oy < oy1; oy++) {\n"
               "        let r0 = u32(max(0, i32(oy * SH) - PH));\n"
               "        let r1 = u32(min(Hi, i32(oy * SH) - PH + KHi));\n"
               "        for (var ox = ox0; ox < ox1; ox++) {\n"
               "            let c0 = u32(max(0, i32(ox * SW) - PW));\n"
               "            let c1 = u32(min(Wi, i32(ox * SW) - PW + KWi));\n"
               "            let q = pl * P + oy * WO + ox;\n"
               "            let m = ld1(q);\n"
               "            let mn = is_nan(m);\n"
               "            var win = r0 * W + c0;\n"
               "            var found = false;\n"
               "            for (var r = r0; r < r1 && !found; r++) {\n"
               "                for (var c = c0; c < c1 && !found; c++) {\n"
               "                    let v = ld0(xb + r * W + c);\n"
               "                    if (v == m || (mn && is_nan(v))) {\n"
               "                        win = r * W + c;\n"
               "                        found = true;\n"
               "                    }\n"
               "                }\n"
               "            }\n"
               "            if (win == me) { acc += ld2(q); }\n"
               "        }\n"
               "    }\n"
               "    st(i, acc);\n");
    tg_kernel_end(k);
    return true;
}

/* nearest_upsample2d: x [N, C, H, W] -> y [N, C, H*f, W*f] */
bool tg_wgsl_upsample2d(wgsl_kernel *k) {
    const tg_node *n = k->n;
    tg_shape xs = tg_kernel_in(k, 0)->shape;
    int64_t f = n->at.upsample.factor;
    cu(k, "F", f), cu(k, "W", xs.d[3]), cu(k, "HW", xs.d[2] * xs.d[3]);
    cu(k, "WF", xs.d[3] * f), cu(k, "HF", xs.d[2] * f);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let X = i %% WF;\n    let Y = (i / WF) %% HF;\n    let pl = i / (HF * WF);\n"
               "    st(i, ld0(pl * HW + (Y / F) * W + X / F));\n");
    tg_kernel_end(k);
    return true;
}

/* upsample2d_grad: gy [N, C, H*f, W*f] -> dx [N, C, H, W], each f x f block
 * summed in row-major order from 0 (the CPU's order: the same bits). */
bool tg_wgsl_upsample2d_grad(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t f = n->at.upsample.factor, H = n->shape.d[2], W = n->shape.d[3];
    cu(k, "F", f), cu(k, "W", W), cu(k, "H", H), cu(k, "WF", W * f), cu(k, "HWFF", H * W * f * f);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let x = i %% W;\n    let y = (i / W) %% H;\n"
               "    let base = (i / (H * W)) * HWFF + y * F * WF + x * F;\n"
               "    var acc = 0.0f;\n"
               "    for (var a = 0u; a < F; a++) {\n"
               "        for (var b = 0u; b < F; b++) { acc += ld0(base + a * WF + b); }\n"
               "    }\n"
               "    st(i, acc);\n");
    tg_kernel_end(k);
    return true;
}
