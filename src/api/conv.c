/* Public builders of the convolution family and the Conv2d layer.
 * Attribute layout: see the convolution block of ir/optable.c. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../ir/ir.h"


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

tg_conv2d tg_conv2d_new(tg_model *m, const char *name, int64_t in, int64_t out, int64_t k, int64_t stride,
                        int64_t padding, int64_t groups, bool bias) {
    tg_conv2d l = {-1, -1, in, out, k, stride, padding, groups};
    char buf[256];
    /* A bad groups value would make the fan-in below meaningless; the
     * declared shape is left for the conv2d shape rule to reject with a
     * message naming both shapes. */
    int64_t per_group = groups > 0 && in % groups == 0 ? in / groups : in;
    /* randn(0.02), upstream's default: a ported program starts from the same
     * distribution (docs/upstream.md). */
    snprintf(buf, sizeof buf, "%s.W", name ? name : "");
    l.W = tg_model_param(m, buf, (tg_shape){4, {out, per_group, k, k}}, tg_init_randn(0.02f));
    if (bias) {
        snprintf(buf, sizeof buf, "%s.b", name ? name : "");
        l.b = tg_model_param(m, buf, (tg_shape){1, {out}}, tg_init_zeros());
    }
    return l;
}

/* x [N, in, H, W] -> [N, out, Ho, Wo]; the bias rides in the conv op (added as
 * each output plane is written, not as a separate broadcast pass). */
tg_tensor tg_conv2d_fwd_at(tg_graph *g, const tg_conv2d *l, tg_tensor x, const char *file, int line) {
    if (!tg_ir_module_ok(g, l, "conv2d_fwd", file, line)) return (tg_tensor){g, -1};
    if (l->stride < 1 || l->stride > INT_MAX || l->padding < 0 || l->padding > INT_MAX || l->groups < 1 ||
        l->groups > INT_MAX) {
        tg_node n = tg_ir_proto(TG_OP_CONV2D, "conv2d_fwd", file, line);
        tg_ir_fail(g, &n, "stride %lld, padding %lld, groups %lld out of range", (long long)l->stride,
                (long long)l->padding, (long long)l->groups);
        return (tg_tensor){g, -1};
    }
    tg_tensor w = tg_use_at(g, l->W, file, line);
    int s = (int)l->stride, p = (int)l->padding, gr = (int)l->groups;
    if (l->b < 0) return tg_conv2d_at(x, w, s, p, gr, file, line);
    return tg_conv2d_bias_at(x, w, tg_use_at(g, l->b, file, line), s, s, p, p, gr, file, line);
}
