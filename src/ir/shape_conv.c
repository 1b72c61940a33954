/* Shape rules of the convolution family: conv2d, max_pool2d,
 * nearest_upsample2d and their backward ops. Everything is NCHW f32.
 *
 * Output sizes follow PyTorch (and upstream): floor((H + 2p - k) / s) + 1,
 * so a stride that does not divide evenly drops the last partial window
 * instead of failing; only a kernel larger than the padded input is an
 * error. Messages name the shapes and the attribute at fault. */
#include "ir.h"
#include "shape.h"

#define IN(k) (&g->nodes[n->in[k]])
#define S(t, buf) tg_shape_str((t), buf, sizeof buf)

static bool need_4d_f32(tg_graph *g, tg_node *n, int k, const char *what, const char *dims) {
    const tg_node *x = IN(k);
    char s[96];
    if (x->dtype != TG_F32) {
        tg_ir_fail(g, n, "%s must be f32, got %s %s", what, tg_dtype_name(x->dtype), S(x->shape, s));
        return false;
    }
    if (x->shape.ndim != 4) {
        tg_ir_fail(g, n, "%s must be 4-d %s, got %s", what, dims, S(x->shape, s));
        return false;
    }
    return true;
}

/* One spatial axis: in -> out for kernel k, stride s, padding p. */
static bool window_out(tg_graph *g, tg_node *n, const char *axis, int64_t in, int64_t k, int64_t s, int64_t p,
                       tg_shape xs, int64_t *out) {
    char sx[96];
    if (k < 1 || s < 1 || p < 0) {
        tg_ir_fail(g, n, "%s: kernel %lld, stride %lld, padding %lld (need kernel >= 1, stride >= 1, padding >= 0)",
                axis, (long long)k, (long long)s, (long long)p);
        return false;
    }
    if (in + 2 * p < k) {
        tg_ir_fail(g, n, "kernel %s=%lld is larger than the padded input (%lld + 2*%lld) of %s", axis, (long long)k,
                (long long)in, (long long)p, S(xs, sx));
        return false;
    }
    *out = (in + 2 * p - k) / s + 1;
    return true;
}

/* conv2d: x [N, C, H, W], w [O, C/groups, kH, kW], optional bias [O] -> [N, O, Ho, Wo]. */
bool tg_shape_conv2d(tg_graph *g, tg_node *n) {
    const tg_attr_conv *c = &n->at.conv;
    if (!need_4d_f32(g, n, 0, "input", "[N, C, H, W]") || !need_4d_f32(g, n, 1, "weight", "[O, C/groups, kH, kW]"))
        return false;
    tg_shape xs = IN(0)->shape, ws = IN(1)->shape;
    char sx[96], sw[96];
    int64_t G = c->groups, C = xs.d[1], O = ws.d[0];
    if (G < 1) {
        tg_ir_fail(g, n, "groups must be >= 1, got %lld", (long long)G);
        return false;
    }
    if (C % G || O % G || ws.d[1] != C / G) {
        tg_ir_fail(g, n,
                "input %s and weight %s do not fit groups=%lld (need C and O divisible by groups and weight "
                "[O, C/groups, kH, kW])",
                S(xs, sx), S(ws, sw), (long long)G);
        return false;
    }
    if (n->nin > 2) {
        const tg_node *b = IN(2);
        if (b->dtype != TG_F32 || b->shape.ndim != 1 || b->shape.d[0] != O) {
            char sb[96];
            tg_ir_fail(g, n, "bias must be f32 [%lld] for weight %s, got %s %s", (long long)O, S(ws, sw),
                    tg_dtype_name(b->dtype), S(b->shape, sb));
            return false;
        }
    }
    int64_t ho, wo;
    if (!window_out(g, n, "H", xs.d[2], ws.d[2], c->stride_h, c->pad_h, xs, &ho) ||
        !window_out(g, n, "W", xs.d[3], ws.d[3], c->stride_w, c->pad_w, xs, &wo))
        return false;
    n->shape = (tg_shape){4, {xs.d[0], O, ho, wo}};
    n->dtype = TG_F32;
    return true;
}

/* conv2d_grad_input: gy [N, O, Ho, Wo], w [O, C/groups, kH, kW] -> dx [N, C, H, W];
 * H, W from the attributes. */
bool tg_shape_conv2d_grad_input(tg_graph *g, tg_node *n) {
    const tg_attr_conv *c = &n->at.conv;
    if (!need_4d_f32(g, n, 0, "gradient", "[N, O, Ho, Wo]") || !need_4d_f32(g, n, 1, "weight", "[O, C/g, kH, kW]"))
        return false;
    tg_shape ys = IN(0)->shape, ws = IN(1)->shape;
    char sy[96], sw[96];
    int64_t G = c->groups, ho, wo;
    tg_shape xs = {4, {ys.d[0], ws.d[1] * G, c->in_h, c->in_w}};
    if (G < 1 || ys.d[1] != ws.d[0] || ws.d[0] % G) {
        tg_ir_fail(g, n, "gradient %s does not fit weight %s with groups=%lld", S(ys, sy), S(ws, sw), (long long)G);
        return false;
    }
    if (!window_out(g, n, "H", xs.d[2], ws.d[2], c->stride_h, c->pad_h, xs, &ho) ||
        !window_out(g, n, "W", xs.d[3], ws.d[3], c->stride_w, c->pad_w, xs, &wo))
        return false;
    if (ho != ys.d[2] || wo != ys.d[3]) {
        tg_ir_fail(g, n, "gradient %s does not match the output of input %s", S(ys, sy), S(xs, sw));
        return false;
    }
    n->shape = xs;
    n->dtype = TG_F32;
    return true;
}

/* conv2d_grad_weight: x [N, C, H, W], gy [N, O, Ho, Wo] -> dw [O, C/groups, kH, kW]. */
bool tg_shape_conv2d_grad_weight(tg_graph *g, tg_node *n) {
    const tg_attr_conv *c = &n->at.conv;
    if (!need_4d_f32(g, n, 0, "input", "[N, C, H, W]") || !need_4d_f32(g, n, 1, "gradient", "[N, O, Ho, Wo]"))
        return false;
    tg_shape xs = IN(0)->shape, ys = IN(1)->shape;
    char sx[96], sy[96];
    int64_t G = c->groups, ho, wo;
    if (G < 1 || xs.d[0] != ys.d[0] || xs.d[1] % G || ys.d[1] % G) {
        tg_ir_fail(g, n, "input %s and gradient %s do not fit groups=%lld", S(xs, sx), S(ys, sy), (long long)G);
        return false;
    }
    if (!window_out(g, n, "H", xs.d[2], c->kh, c->stride_h, c->pad_h, xs, &ho) ||
        !window_out(g, n, "W", xs.d[3], c->kw, c->stride_w, c->pad_w, xs, &wo))
        return false;
    if (ho != ys.d[2] || wo != ys.d[3]) {
        tg_ir_fail(g, n, "gradient %s does not match the output of input %s", S(ys, sy), S(xs, sx));
        return false;
    }
    n->shape = (tg_shape){4, {ys.d[1], xs.d[1] / G, c->kh, c->kw}};
    n->dtype = TG_F32;
    return true;
}

/* max_pool2d: x [N, C, H, W] -> [N, C, Ho, Wo]; max_pool2d_grad: (x, y, gy) -> [N, C, H, W].
 * Padding is at most half the kernel (PyTorch's rule), so every window holds at least
 * one real element and padding never has to win. */
bool tg_shape_max_pool2d(tg_graph *g, tg_node *n) {
    const tg_attr_conv *c = &n->at.conv;
    if (!need_4d_f32(g, n, 0, "input", "[N, C, H, W]")) return false;
    tg_shape xs = IN(0)->shape;
    char sx[96];
    int64_t ho, wo;
    for (int a = 0; a < 2; a++) {
        int64_t pad = a ? c->pad_w : c->pad_h, k = a ? c->kw : c->kh;
        if (pad > k / 2) {
            tg_ir_fail(g, n, "padding %s=%lld is more than half the kernel %lld", a ? "W" : "H", (long long)pad,
                    (long long)k);
            return false;
        }
    }
    if (!window_out(g, n, "H", xs.d[2], c->kh, c->stride_h, c->pad_h, xs, &ho) ||
        !window_out(g, n, "W", xs.d[3], c->kw, c->stride_w, c->pad_w, xs, &wo))
        return false;
    if (n->op == TG_OP_MAX_POOL2D_GRAD) { /* (x, y, gy): y and gy have the output's shape */
        tg_shape want = {4, {xs.d[0], xs.d[1], ho, wo}};
        for (int k = 1; k < 3; k++) {
            if (IN(k)->dtype != TG_F32 || !tg_shape_eq(IN(k)->shape, want)) {
                char sw[96];
                tg_ir_fail(g, n, "operand %d is %s, expected f32 %s", k, S(IN(k)->shape, sx), S(want, sw));
                return false;
            }
        }
        n->shape = xs;
    } else {
        n->shape = (tg_shape){4, {xs.d[0], xs.d[1], ho, wo}};
    }
    n->dtype = TG_F32;
    return true;
}

/* nearest_upsample2d: [N, C, H, W] -> [N, C, H*f, W*f]; its gradient sums
 * each f x f block back: [N, C, H*f, W*f] -> [N, C, H, W]. */
bool tg_shape_upsample2d(tg_graph *g, tg_node *n) {
    if (!need_4d_f32(g, n, 0, "input", "[N, C, H, W]")) return false;
    tg_shape xs = IN(0)->shape;
    char sx[96];
    int64_t f = n->at.upsample.factor;
    if (f < 1) {
        tg_ir_fail(g, n, "factor must be a positive integer, got %lld", (long long)f);
        return false;
    }
    n->shape = xs;
    if (n->op == TG_OP_UPSAMPLE2D_GRAD) {
        if (xs.d[2] % f || xs.d[3] % f) {
            tg_ir_fail(g, n, "gradient %s is not a multiple of factor %lld", S(xs, sx), (long long)f);
            return false;
        }
        n->shape.d[2] /= f;
        n->shape.d[3] /= f;
    } else if (__builtin_mul_overflow(xs.d[2], f, &n->shape.d[2]) ||
               __builtin_mul_overflow(xs.d[3], f, &n->shape.d[3]) || !tg_ir_numel_ok(n->shape)) {
        tg_ir_fail_status(g, TG_ERR_LIMIT, n, "factor %lld makes %s more than %lld elements", (long long)f, S(xs, sx),
                       (long long)TG_MAX_NUMEL);
        return false;
    }
    n->dtype = TG_F32;
    return true;
}
