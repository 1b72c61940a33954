/* Public builders of the convolution family and the Conv2d layer.
 * Attribute layout: see the convolution block of ir/optable.c. */
#include <limits.h>
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
