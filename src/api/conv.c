/* Public builders of the convolution family and the Conv2d layer.
 * Attribute layout: see the convolution block of ir/optable.c. */
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "api.h"


/* b.g == NULL: no bias. */
static tg_tensor conv(tg_tensor x, tg_tensor w, tg_tensor b, int stride_h, int stride_w, int pad_h, int pad_w,
                      int groups, const char *api, const char *file, int line) {
    tg_graph *g = x.g ? x.g : w.g;
    if (!g) return (tg_tensor){NULL, -1};
    tg_node n = tg_ir_proto(TG_OP_CONV2D, api, file, line);
    if ((x.g && w.g && x.g != w.g) || (b.g && b.g != g)) {
        tg_ir_fail(g, &n, "operands come from different graphs");
        return (tg_tensor){g, -1};
    }
    n.nin = b.g ? 3 : 2;
    n.in[0] = x.id;
    n.in[1] = w.id;
    n.in[2] = b.g ? b.id : 0;
    n.at.conv.stride_h = stride_h;
    n.at.conv.stride_w = stride_w;
    n.at.conv.pad_h = pad_h;
    n.at.conv.pad_w = pad_w;
    n.at.conv.groups = groups;
    return (tg_tensor){g, tg_ir_add(g, &n)};
}

static const tg_tensor NO_BIAS = {NULL, -1};

tg_tensor tg_conv2d_hw_at(tg_tensor x, tg_tensor w, int stride_h, int stride_w, int pad_h, int pad_w, int groups,
                          const char *file, int line) {
    return conv(x, w, NO_BIAS, stride_h, stride_w, pad_h, pad_w, groups, "conv2d_hw", file, line);
}

tg_tensor tg_conv2d_at(tg_tensor x, tg_tensor w, int stride, int padding, int groups, const char *file, int line) {
    return conv(x, w, NO_BIAS, stride, stride, padding, padding, groups, "conv2d", file, line);
}

tg_tensor tg_conv2d_bias_at(tg_tensor x, tg_tensor w, tg_tensor b, int stride_h, int stride_w, int pad_h, int pad_w,
                            int groups, const char *file, int line) {
    if (!b.g) { /* an invalid bias is an error, never "no bias" */
        tg_graph *g = x.g ? x.g : w.g;
        if (g) {
            tg_node n = tg_ir_proto(TG_OP_CONV2D, "conv2d_bias", file, line);
            tg_ir_fail(g, &n, "the bias is not a tensor of this graph");
        }
        return (tg_tensor){g, -1};
    }
    return conv(x, w, b, stride_h, stride_w, pad_h, pad_w, groups, "conv2d_bias", file, line);
}

tg_tensor tg_max_pool2d_hw_at(tg_tensor x, int kh, int kw, int stride_h, int stride_w, int pad_h, int pad_w,
                              const char *file, int line) {
    if (!x.g) return (tg_tensor){NULL, -1};
    tg_node n = tg_ir_proto(TG_OP_MAX_POOL2D, "max_pool2d", file, line);
    n.in[0] = x.id;
    n.at.conv.stride_h = stride_h ? stride_h : kh;
    n.at.conv.stride_w = stride_w ? stride_w : kw;
    n.at.conv.pad_h = pad_h;
    n.at.conv.pad_w = pad_w;
    n.at.conv.kh = kh;
    n.at.conv.kw = kw;
    return (tg_tensor){x.g, tg_ir_add(x.g, &n)};
}

tg_tensor tg_max_pool2d_at(tg_tensor x, int k, int stride, int padding, const char *file, int line) {
    return tg_max_pool2d_hw_at(x, k, k, stride, stride, padding, padding, file, line);
}

tg_tensor tg_nearest_upsample2d_at(tg_tensor x, int factor, const char *file, int line) {
    if (!x.g) return (tg_tensor){NULL, -1};
    tg_node n = tg_ir_proto(TG_OP_UPSAMPLE2D, "nearest_upsample2d", file, line);
    n.in[0] = x.id;
    n.at.upsample.factor = factor;
    return (tg_tensor){x.g, tg_ir_add(x.g, &n)};
}

/* ---- Conv2d layer ---- */

tg_conv2d tg_conv2d_new_opts(tg_model *m, const char *name, int64_t in, int64_t out, tg_conv2d_opts o) {
    int64_t kw = o.kw ? o.kw : o.kh, groups = o.groups ? o.groups : 1;
    tg_conv2d l = {-1, -1, in, out, o.kh, kw, o.stride_h ? o.stride_h : 1, o.stride_w ? o.stride_w : 1, o.pad_h,
                   o.pad_w, groups};
    /* A bad groups value would make the weight's shape meaningless; the
     * declared shape is left for the conv2d shape rule to reject with a
     * message naming both shapes. */
    int64_t per_group = groups > 0 && in % groups == 0 ? in / groups : in;
    /* randn(0.02), upstream's default: a ported program starts from the same
     * distribution (docs/upstream.md). */
    l.W = tg_api_layer_param(m, name, ".W", (tg_shape){4, {out, per_group, o.kh, kw}},
                             tg_api_layer_init(o.init, o.decay));
    if (!o.no_bias) l.b = tg_api_layer_param(m, name, ".b", (tg_shape){1, {out}}, tg_init_zeros());
    return l;
}

tg_conv2d tg_conv2d_new(tg_model *m, const char *name, int64_t in, int64_t out, int64_t k, int64_t stride,
                        int64_t padding, int64_t groups, bool bias) {
    /* stride 0 is passed on as it is (the forward rejects it), not read as "1" */
    tg_conv2d l = tg_conv2d_new_opts(m, name, in, out,
                                     (tg_conv2d_opts){.kh = k, .kw = k, .stride_h = stride, .stride_w = stride,
                                                      .pad_h = padding, .pad_w = padding, .groups = groups,
                                                      .no_bias = !bias});
    l.stride_h = l.stride_w = stride;
    l.groups = groups;
    return l;
}

static bool in_int(int64_t v, int64_t lo) { return v >= lo && v <= INT_MAX; }

/* x [N, in, H, W] -> [N, out, Ho, Wo]; the bias rides in the conv op (added as
 * each output plane is written, not as a separate broadcast pass). */
tg_tensor tg_conv2d_fwd_at(tg_graph *g, const tg_conv2d *l, tg_tensor x, const char *file, int line) {
    if (!tg_ir_module_ok(g, l, "conv2d_fwd", file, line)) return (tg_tensor){g, -1};
    if (!in_int(l->stride_h, 1) || !in_int(l->stride_w, 1) || !in_int(l->pad_h, 0) || !in_int(l->pad_w, 0) ||
        !in_int(l->groups, 1)) {
        tg_node n = tg_ir_proto(TG_OP_CONV2D, "conv2d_fwd", file, line);
        tg_ir_fail(g, &n, "stride %lldx%lld, padding %lldx%lld, groups %lld out of range", (long long)l->stride_h,
                   (long long)l->stride_w, (long long)l->pad_h, (long long)l->pad_w, (long long)l->groups);
        return (tg_tensor){g, -1};
    }
    tg_tensor w = tg_use_at(g, l->W, file, line);
    int sh = (int)l->stride_h, sw = (int)l->stride_w, ph = (int)l->pad_h, pw = (int)l->pad_w, gr = (int)l->groups;
    if (l->b < 0) return tg_conv2d_hw_at(x, w, sh, sw, ph, pw, gr, file, line);
    return tg_conv2d_bias_at(x, w, tg_use_at(g, l->b, file, line), sh, sw, ph, pw, gr, file, line);
}

/* ---- transposed convolution, average pooling ---- */

/* conv_transpose2d is conv2d's input gradient run forward: the
 * conv2d_grad_input op with the output size that output_padding picks among
 * those a strided conv maps to x's size. */
tg_tensor tg_conv_transpose2d_at(tg_tensor x, tg_tensor w, int stride, int padding, int output_padding, int groups,
                                 const char *file, int line) {
    tg_graph *g = x.g ? x.g : w.g;
    if (!g) return (tg_tensor){NULL, -1};
    tg_node n = tg_ir_proto(TG_OP_CONV2D_GRAD_INPUT, "conv_transpose2d", file, line);
    if (x.g && w.g && x.g != w.g) {
        tg_ir_fail(g, &n, "operands come from different graphs");
        return (tg_tensor){g, -1};
    }
    if (!ir_live(x) || !ir_live(w)) return (tg_tensor){g, -1};
    const tg_node *xn = &g->nodes[x.id], *wn = &g->nodes[w.id];
    char sx[96], sw[96];
    tg_shape_str(xn->shape, sx, sizeof sx);
    tg_shape_str(wn->shape, sw, sizeof sw);
    if (xn->dtype != TG_F32 || wn->dtype != TG_F32 || xn->shape.ndim != 4 || wn->shape.ndim != 4) {
        tg_ir_fail(g, &n, "input %s %s and weight %s %s must be f32 [N, C, H, W] and [C, O/groups, kH, kW]",
                   tg_dtype_name(xn->dtype), sx, tg_dtype_name(wn->dtype), sw);
        return (tg_tensor){g, -1};
    }
    if (stride < 1 || padding < 0 || groups < 1 || output_padding < 0 || output_padding >= stride) {
        tg_ir_fail(g, &n, "stride %d, padding %d, output_padding %d, groups %d (need stride >= 1, padding >= 0, "
                   "0 <= output_padding < stride, groups >= 1)", stride, padding, output_padding, groups);
        return (tg_tensor){g, -1};
    }
    if (xn->shape.d[1] != wn->shape.d[0] || wn->shape.d[0] % groups) {
        tg_ir_fail(g, &n, "input %s and weight %s do not fit groups=%d (need weight [C, O/groups, kH, kW] with the "
                   "input's C, divisible by groups)", sx, sw, groups);
        return (tg_tensor){g, -1};
    }
    int64_t h = (xn->shape.d[2] - 1) * stride - 2 * (int64_t)padding + wn->shape.d[2] + output_padding;
    int64_t wd = (xn->shape.d[3] - 1) * stride - 2 * (int64_t)padding + wn->shape.d[3] + output_padding;
    if (xn->shape.d[2] < 1 || xn->shape.d[3] < 1 || h < 1 || wd < 1) {
        tg_ir_fail(g, &n, "input %s with weight %s, stride %d, padding %d gives an empty output (%lld x %lld)", sx, sw,
                   stride, padding, (long long)h, (long long)wd);
        return (tg_tensor){g, -1};
    }
    n.in[0] = x.id;
    n.in[1] = w.id;
    n.at.conv.stride_h = n.at.conv.stride_w = stride;
    n.at.conv.pad_h = n.at.conv.pad_w = padding;
    n.at.conv.groups = groups;
    n.at.conv.in_h = h;
    n.at.conv.in_w = wd;
    return (tg_tensor){g, tg_ir_add(g, &n)};
}

/* Windows that tile the input (stride k, no padding) are summed by the
 * kernel that sums nearest_upsample2d's gradient blocks, then scaled; any
 * other is a depthwise convolution with a constant 1/k^2 kernel (padding
 * counts as zeros, as PyTorch's default count_include_pad). */
tg_tensor tg_avg_pool2d_at(tg_tensor x, int k, int stride, int padding, const char *file, int line) {
    if (!x.g) return (tg_tensor){NULL, -1};
    if (!ir_live(x)) return (tg_tensor){x.g, -1};
    tg_graph *g = x.g;
    const tg_node *xn = &g->nodes[x.id];
    tg_node e = tg_ir_proto(TG_OP_CONV2D, "avg_pool2d", file, line);
    char sx[96];
    tg_shape s = xn->shape;
    if (stride == 0) stride = k;
    if (xn->dtype != TG_F32 || s.ndim != 4) {
        tg_ir_fail(g, &e, "input must be f32 [N, C, H, W], got %s %s", tg_dtype_name(xn->dtype),
                   tg_shape_str(s, sx, sizeof sx));
        return (tg_tensor){g, -1};
    }
    if (k < 1 || stride < 1 || padding < 0 || padding > k / 2 || s.d[2] + 2 * padding < k || s.d[3] + 2 * padding < k) {
        tg_ir_fail(g, &e, "kernel %d, stride %d, padding %d do not fit %s (need kernel >= 1, stride >= 1, 0 <= padding "
                   "<= kernel/2, and the padded input at least the kernel)", k, stride, padding,
                   tg_shape_str(s, sx, sizeof sx));
        return (tg_tensor){g, -1};
    }
    if (stride == k && padding == 0) {
        int64_t ho = s.d[2] / k, wo = s.d[3] / k;
        if (ho * k != s.d[2]) x = tg_narrow_at(x, 2, 0, ho * k, file, line);
        if (wo * k != s.d[3]) x = tg_narrow_at(x, 3, 0, wo * k, file, line);
        tg_node n = tg_ir_proto(TG_OP_UPSAMPLE2D_GRAD, "avg_pool2d", file, line);
        n.in[0] = x.id;
        n.at.upsample.factor = k;
        return tg_mul_s_at((tg_tensor){g, tg_ir_add(g, &n)}, 1.0f / (float)(k * k), file, line);
    }
    int64_t C = s.d[1], kk = (int64_t)k * k;
    float *w = tg_calloc((size_t)(C * kk), sizeof(float));
    if (!w) {
        tg_ir_fail_status(g, TG_ERR_NOMEM, &e, "out of memory");
        return (tg_tensor){g, -1};
    }
    for (int64_t i = 0; i < C * kk; i++) w[i] = 1.0f / (float)kk;
    tg_tensor wt = tg_constant_at(g, (tg_shape){4, {C, 1, k, k}}, w, file, line);
    free(w);
    return conv(x, wt, NO_BIAS, stride, stride, padding, padding, (int)C, "avg_pool2d", file, line);
}

/* ---- ConvTranspose2d layer ---- */

tg_conv_transpose2d tg_conv_transpose2d_new(tg_model *m, const char *name, int64_t in, int64_t out, int64_t k,
                                            int64_t stride, int64_t padding, int64_t output_padding, int64_t groups,
                                            bool bias) {
    tg_conv_transpose2d l = {-1, -1, in, out, k, stride, padding, output_padding, groups};
    int64_t per_group = groups > 0 && out % groups == 0 ? out / groups : out;
    l.W = tg_api_layer_param(m, name, ".W", (tg_shape){4, {in, per_group, k, k}}, tg_api_layer_init(NULL, TG_DECAY_DEFAULT));
    if (bias) l.b = tg_api_layer_param(m, name, ".b", (tg_shape){1, {out}}, tg_init_zeros());
    return l;
}

/* x [N, in, H, W] -> [N, out, Ho, Wo]; the bias added per channel */
tg_tensor tg_conv_transpose2d_fwd_at(tg_graph *g, const tg_conv_transpose2d *l, tg_tensor x, const char *file,
                                     int line) {
    if (!tg_ir_module_ok(g, l, "conv_transpose2d_fwd", file, line)) return (tg_tensor){g, -1};
    if (!in_int(l->stride, 1) || !in_int(l->padding, 0) || !in_int(l->output_padding, 0) || !in_int(l->groups, 1)) {
        tg_node n = tg_ir_proto(TG_OP_CONV2D_GRAD_INPUT, "conv_transpose2d_fwd", file, line);
        tg_ir_fail(g, &n, "stride %lld, padding %lld, output_padding %lld, groups %lld out of range",
                   (long long)l->stride, (long long)l->padding, (long long)l->output_padding, (long long)l->groups);
        return (tg_tensor){g, -1};
    }
    tg_tensor y = tg_conv_transpose2d_at(x, tg_use_at(g, l->W, file, line), (int)l->stride, (int)l->padding,
                                         (int)l->output_padding, (int)l->groups, file, line);
    if (l->b < 0) return y;
    tg_tensor b = tg_reshape_at(tg_use_at(g, l->b, file, line), (tg_shape){4, {1, l->out, 1, 1}}, file, line);
    return tg_add_at(y, b, file, line);
}
