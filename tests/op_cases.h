/* The op-case table: every op, on several shapes (odd sizes, broadcasting),
 * as a function of up to four f32 operands. The CPU finite-difference test
 * (test_grad.c) and the cross-backend parity test both run every row, so a
 * new op needs one row here to be checked everywhere.
 *
 * Each case's operands are params x0..x3 of the given shapes, filled with
 * seeded random values in [lo, hi] (|x| >= gap when gap > 0, to keep kinks
 * like relu's away from finite differences). The harness takes
 * loss = sum(out * R) with R a fixed random tensor, so every output element
 * gets a different weight (a plain mean would hide bugs). */
#ifndef TG_OP_CASES_H
#define TG_OP_CASES_H

#include "tensorgrad.h"

typedef struct {
    const char *name;
    int n;                  /* operands */
    tg_shape shape[4];
    float lo, hi, gap;
    tg_tensor (*fn)(tg_graph *g, const tg_tensor *x);
    bool no_grad;           /* not differentiable: forward values only */
} op_case;

#define S(...) TG_SHAPE(__VA_ARGS__)
#define CASE_FN(name) static tg_tensor name(tg_graph *g, const tg_tensor *x)

/* An i32 tensor of the given values, built from a constant and a cast. */
static tg_tensor case_i32(tg_graph *g, tg_shape s, const float *v) { return tg_cast(tg_constant(g, s, v), TG_I32); }

CASE_FN(c_add) { (void)g; return tg_add(x[0], x[1]); }
CASE_FN(c_sub) { (void)g; return tg_sub(x[0], x[1]); }
CASE_FN(c_mul) { (void)g; return tg_mul(x[0], x[1]); }
CASE_FN(c_div) { (void)g; return tg_div(x[0], x[1]); }
CASE_FN(c_scalars) {
    (void)g;
    tg_tensor a = tg_add_s(tg_mul_s(x[0], 1.5f), 0.25f);
    tg_tensor b = tg_div_s(tg_sub_s(x[0], 2.0f), 3.0f);
    return tg_add(tg_mul(a, b), tg_add(tg_rsub_s(1.0f, x[0]), tg_rdiv_s(2.0f, x[0])));
}
CASE_FN(c_neg) { (void)g; return tg_neg(x[0]); }
CASE_FN(c_sqrt) { (void)g; return tg_sqrt(x[0]); }
CASE_FN(c_rsqrt) { (void)g; return tg_rsqrt(x[0]); }
CASE_FN(c_log) { (void)g; return tg_log(x[0]); }
CASE_FN(c_exp) { (void)g; return tg_exp(x[0]); }
CASE_FN(c_relu) { (void)g; return tg_relu(x[0]); }
CASE_FN(c_where) { (void)g; return tg_where(tg_less_s(x[2], 0.0f), x[0], x[1]); }
CASE_FN(c_compare) {
    (void)g;
    return tg_add(tg_cast(tg_less(x[0], x[1]), TG_F32), tg_mul_s(tg_cast(tg_greater_s(x[0], 0.1f), TG_F32), 2.0f));
}
CASE_FN(c_cast_i32) { (void)g; return tg_cast(tg_cast(tg_mul_s(x[0], 4.0f), TG_I32), TG_F32); }
CASE_FN(c_sum0) { (void)g; return tg_sum(x[0], 0, false); }
CASE_FN(c_sum1k) { (void)g; return tg_sum(x[0], -1, true); }
CASE_FN(c_sum_all) { (void)g; return tg_sum(x[0], TG_ALL, false); }
CASE_FN(c_sum_axes) { (void)g; return tg_sum_axes(x[0], S(0, 2), false); }
CASE_FN(c_mean) { (void)g; return tg_mean(x[0], 1, false); }
CASE_FN(c_mean_axes) { (void)g; return tg_mean_axes(x[0], S(1, 2), true); }
CASE_FN(c_reshape) { (void)g; return tg_mul(tg_reshape(x[0], S(-1, 6)), x[1]); }
CASE_FN(c_permute3) { (void)g; return tg_permute(x[0], S(1, 2, 0)); }
CASE_FN(c_permute4) { (void)g; return tg_permute(x[0], S(0, 2, 1, 3)); }
CASE_FN(c_broadcast_to) { (void)g; return tg_broadcast_to(x[0], S(3, 4, 5)); }
CASE_FN(c_sum_to_shape) { (void)g; return tg_sum_to_shape(x[0], S(4, 1)); }
CASE_FN(c_matmul) { (void)g; return tg_matmul(x[0], x[1]); }
CASE_FN(c_matmul_ta) { (void)g; return tg_matmul_t(x[0], x[1], true, false); }
CASE_FN(c_matmul_tb) { (void)g; return tg_matmul_t(x[0], x[1], false, true); }
CASE_FN(c_matmul_tab) { (void)g; return tg_matmul_t(x[0], x[1], true, true); }
/* convolution ops */
CASE_FN(c_conv_s1p0) { (void)g; return tg_conv2d(x[0], x[1], 1, 0, 1); }
CASE_FN(c_conv_s2p1) { (void)g; return tg_conv2d(x[0], x[1], 2, 1, 1); }
CASE_FN(c_conv_g2_hw) { (void)g; return tg_conv2d_hw(x[0], x[1], 1, 2, 1, 0, 2); }
CASE_FN(c_conv_depthwise) { (void)g; return tg_conv2d(x[0], x[1], 1, 1, 3); }
CASE_FN(c_conv_bias_s2) { (void)g; return tg_conv2d_bias(x[0], x[1], x[2], 2, 1, 1, 0, 2); }
CASE_FN(c_conv_bias_chain) {
    /* conv -> + bias -> upsample -> strided conv: gradients through a stack */
    tg_tensor h = tg_add(tg_conv2d(x[0], x[1], 1, 1, 1), tg_reshape(x[2], S(1, 3, 1, 1)));
    (void)g;
    return tg_conv2d_hw(tg_nearest_upsample2d(h, 2), x[3], 2, 1, 0, 1, 1);
}
/* Max pooling has a kink wherever two window elements tie. Offsets 3 apart
 * that differ at every position of any window up to 3x3 (by (y mod 3,
 * x mod 3)) keep each window's runner-up well away from its max (operands
 * lie in [-1, 1]), so finite differences stay valid; small offsets keep the
 * loss small enough for float differences. */
static tg_tensor separated(tg_graph *g, tg_tensor x) {
    static float off[4096];
    tg_shape s = tg_tensor_shape(x);
    int64_t n = tg_shape_numel(s), H = s.d[2], W = s.d[3];
    for (int64_t i = 0; i < n && i < 4096; i++) off[i] = (float)((i / W % H % 3) * 3 + i % W % 3) * 3.0f;
    return tg_add(x, tg_constant(g, s, off));
}
CASE_FN(c_pool_k2) { return tg_max_pool2d(separated(g, x[0]), 2, 0, 0); }
CASE_FN(c_pool_k3s2p1) { return tg_max_pool2d(separated(g, x[0]), 3, 2, 1); }
CASE_FN(c_pool_hw_overlap) { return tg_max_pool2d_hw(separated(g, x[0]), 2, 3, 1, 2, 1, 1); }
CASE_FN(c_upsample2) { (void)g; return tg_nearest_upsample2d(x[0], 2); }
CASE_FN(c_upsample3) { (void)g; return tg_nearest_upsample2d(x[0], 3); }

CASE_FN(c_one_hot) {
    static const float idx[] = {0, 3, 1, 4, 2, -1, 2};
    return tg_mul(tg_one_hot(case_i32(g, S(7), idx), 4), x[0]);
}
CASE_FN(c_arange) { return tg_mul(tg_arange(g, 5, TG_F32), tg_add(x[0], tg_cast(tg_arange(g, 5, TG_I32), TG_F32))); }
CASE_FN(c_log_softmax_last) { (void)g; return tg_log_softmax(x[0], -1); }
CASE_FN(c_log_softmax_mid) { (void)g; return tg_log_softmax(x[0], 1); }
CASE_FN(c_softmax_causal) { (void)g; return tg_softmax_causal(x[0]); }
CASE_FN(c_softmax_causal_axis1) { (void)g; return tg_softmax_causal_axis(x[0], 1); }
CASE_FN(c_softmax_causal_axis0) { (void)g; return tg_softmax_causal_axis(x[0], -3); }
CASE_FN(c_one_hot_dt) {
    static const float v[3] = {2, 0, 5}; /* 5 is out of range: a zero row */
    tg_tensor idx = case_i32(g, S(3), v);
    tg_tensor i = tg_cast(tg_one_hot_dt(idx, 4, TG_I32), TG_F32), b = tg_cast(tg_one_hot_dt(idx, 4, TG_BOOL), TG_F32);
    tg_tensor ones = tg_cast(tg_ones_dt(g, S(4), TG_I32), TG_F32), zeros = tg_cast(tg_zeros_dt(g, S(3, 1), TG_BOOL), TG_F32);
    return tg_add(tg_mul(tg_add(i, tg_mul_s(b, 3.0f)), x[0]), tg_add(ones, zeros));
}
CASE_FN(c_where_causal) { (void)g; return tg_where_causal(x[0], -3.0f); }
CASE_FN(c_mse) { (void)g; return tg_mse(x[0], x[1]); }
CASE_FN(c_linear) {
    (void)g;
    return tg_relu(tg_add(tg_matmul(x[0], x[1]), x[2]));
}

/* ---- math and shape ops ----
 * min/max cases keep the operands apart (|x0| >= gap, |0.02 x1| <= 0.02) so
 * finite differences never cross a tie; ties are checked in test_math_ops. */
CASE_FN(c_max_bcast) { (void)g; return tg_max(x[0], tg_mul_s(x[1], 0.02f)); }
CASE_FN(c_min_bcast) { (void)g; return tg_min(x[0], tg_mul_s(x[1], 0.02f)); }
CASE_FN(c_minmax_s) { (void)g; return tg_add(tg_max_s(x[0], 0.0f), tg_mul_s(tg_min_s(x[0], 0.0f), 3.0f)); }
CASE_FN(c_minmax_i32) {
    (void)g;
    tg_tensor a = tg_cast(tg_mul_s(x[0], 4.0f), TG_I32), b = tg_cast(tg_mul_s(x[1], 4.0f), TG_I32);
    tg_tensor r = tg_add(tg_max(a, b), tg_mul_s(tg_min_s(a, 1.0f), 10.0f));
    return tg_cast(tg_add(r, tg_abs(tg_clamp(tg_square(b), -3.5f, 5.5f))), TG_F32);
}
/* every element is clamped on one side or passes: |x0| >= gap > 0.02 */
CASE_FN(c_clamp) {
    (void)g;
    tg_tensor lo = tg_clamp(x[0], -0.02f, 1e30f), hi = tg_clamp(x[0], -1e30f, 0.02f);
    tg_tensor mid = tg_clamp(tg_mul_s(x[0], 0.01f), -0.5f, 0.5f);
    return tg_add(tg_add(lo, tg_mul_s(hi, 2.0f)), tg_mul_s(mid, 3.0f));
}
CASE_FN(c_abs) { (void)g; return tg_abs(x[0]); }
CASE_FN(c_square) { (void)g; return tg_square(x[0]); }
CASE_FN(c_sin_cos) { (void)g; return tg_add(tg_sin(x[0]), tg_mul_s(tg_cos(x[0]), 0.5f)); }
CASE_FN(c_tanh) { (void)g; return tg_tanh(x[0]); }
CASE_FN(c_sigmoid) { (void)g; return tg_sigmoid(x[0]); }
CASE_FN(c_erf) { (void)g; return tg_erf(x[0]); }
CASE_FN(c_gelu) { (void)g; return tg_gelu(x[0]); }
CASE_FN(c_gelu_tanh) { (void)g; return tg_gelu_tanh(x[0]); }
CASE_FN(c_silu) { (void)g; return tg_silu(x[0]); }
CASE_FN(c_softplus) { (void)g; return tg_softplus(x[0]); }
CASE_FN(c_leaky) { (void)g; return tg_leaky_relu(x[0], 0.1f); }
CASE_FN(c_leaky_big) { (void)g; return tg_leaky_relu(x[0], 1.5f); }
CASE_FN(c_leaky_neg) { (void)g; return tg_leaky_relu(x[0], -0.3f); }
CASE_FN(c_log1p) { (void)g; return tg_log1p(x[0]); }
CASE_FN(c_expm1) { (void)g; return tg_expm1(x[0]); }
/* the kinks at x0 = 0 only, which the gap keeps clear of */
CASE_FN(c_hardtanh) {
    (void)g;
    return tg_add(tg_hardtanh(tg_add_s(x[0], 1.0f)), tg_mul_s(tg_hardtanh(tg_add_s(x[0], -1.0f)), 2.0f));
}
/* a^b over a positive base (both gradients), a broadcast exponent */
CASE_FN(c_pow) { (void)g; return tg_pow(x[0], x[1]); }
/* scalar exponents: an odd integer over a negative base, and a root of |x| */
CASE_FN(c_pow_s) { (void)g; return tg_add(tg_pow_s(x[0], 3.0f), tg_mul_s(tg_pow_s(tg_abs(x[0]), 0.5f), 2.0f)); }
/* negative bases with integer exponents of every parity (and 0), the
 * exponent a constant broadcast along the rows */
CASE_FN(c_pow_int) {
    static const float e[6] = {-2, -1, 0, 1, 2, 3};
    return tg_pow(x[0], tg_constant(g, S(6), e));
}
CASE_FN(c_softmax_last) { (void)g; return tg_softmax(x[0], -1); }
CASE_FN(c_softmax_mid) { (void)g; return tg_softmax(x[0], 1); }
CASE_FN(c_softmax_first) { (void)g; return tg_softmax(x[0], 0); }
CASE_FN(c_argmax) {
    (void)g;
    return tg_add(tg_argmax(x[0], 1, false), tg_mul_s(tg_argmin(x[0], -2, false), 7));
}
CASE_FN(c_argmax_axis0) { (void)g; return tg_argmax(x[0], 0, true); }
/* amax / amin of x plus distinct offsets 0.1 apart, x in [-0.02, 0.02]: no
 * two elements of a row come within finite differences' reach of a tie */
static tg_tensor spread(tg_graph *g, tg_tensor x) {
    static float off[3 * 4 * 5];
    for (int i = 0; i < 60; i++) off[i] = (float)((i * 37) % 60) * 0.1f - 3.0f;
    return tg_add(x, tg_constant(g, tg_tensor_shape(x), off));
}
CASE_FN(c_amax_amin) {
    tg_tensor s = spread(g, x[0]); /* [3,1,5] + [3,4,1] -> [3,4,5], and [4,5] */
    tg_tensor a = tg_add(tg_amax(s, 1, true), tg_mul_s(tg_amin(s, -1, true), 2.0f));
    return tg_add(a, tg_amin(s, 0, false));
}
CASE_FN(c_amax_all) { return tg_add(tg_amax(spread(g, x[0]), TG_ALL, false), tg_amin(spread(g, x[0]), 0, true)); }
CASE_FN(c_amax_i32) {
    tg_tensor i = tg_cast(tg_mul_s(x[0], 10.0f), TG_I32); /* ties, in i32: no gradient */
    return tg_cast(tg_sub(tg_amax(i, 0, true), tg_amin(i, -1, true)), TG_F32); /* [1,7] - [4,1] */
}
CASE_FN(c_zeros_ones) {
    return tg_mul(tg_add(x[0], tg_zeros(g, S(3, 4))), tg_add_s(tg_ones(g, S(4)), 1.0f));
}
CASE_FN(c_swap_axes) { (void)g; return tg_swap_axes(x[0], 0, -1); }
CASE_FN(c_narrow) { (void)g; return tg_narrow(x[0], 1, 2, 3); }
CASE_FN(c_narrow_neg) { (void)g; return tg_narrow(x[0], 0, -3, 2); }
CASE_FN(c_concat3) { (void)g; return tg_concat(((tg_tensor[]){x[0], x[1], x[2]}), 3, -1); }
/* 6 inputs: more than one concat node takes, with repeats */
CASE_FN(c_concat6) {
    (void)g;
    return tg_concat(((tg_tensor[]){x[0], x[1], x[0], tg_mul_s(x[1], 2.0f), x[0], x[1]}), 6, 0);
}
CASE_FN(c_stack) { (void)g; return tg_stack(((tg_tensor[]){x[0], x[1], tg_mul(x[0], x[1])}), 3, 1); }
CASE_FN(c_stack_last) { (void)g; return tg_stack(((tg_tensor[]){x[0], x[1]}), 2, -1); }
CASE_FN(c_split) {
    (void)g;
    tg_tensor p[3];
    tg_split(x[0], 1, ((int64_t[]){2, 4, 1}), 3, p);
    return tg_concat(((tg_tensor[]){tg_mul_s(p[2], 3.0f), p[0], tg_square(p[1])}), 3, 1);
}
CASE_FN(c_take_last) {
    static const float idx[] = {0, 4, 4, -1, 2, 9, 1, 1};
    return tg_take_along_axis(x[0], case_i32(g, S(4, 2), idx), -1);
}
CASE_FN(c_take_first) {
    static const float idx[] = {0, 1, 2, 3, 3, 3, 1, 0, -4, 2, 2, 2, 0, 0, 0};
    return tg_take_along_axis(x[0], case_i32(g, S(5, 3), idx), 0);
}
CASE_FN(c_take_mid) {
    static const float idx[] = {1, 0, 2, 2, 0, 1, 1, 1, 0, 2, 2, 0};
    return tg_take_along_axis(x[0], case_i32(g, S(2, 3, 2), idx), 1);
}
CASE_FN(c_take_many) { /* 18 indices a line (WebGPU sorts them): repeats, negatives, out of range */
    static float idx[2 * 18 * 3];
    for (int i = 0; i < 2 * 18 * 3; i++) idx[i] = (float)((i * 7) % 11 - 4); /* -4 .. 6 along an axis of 5 */
    return tg_take_along_axis(x[0], case_i32(g, S(2, 18, 3), idx), 1);
}
CASE_FN(c_one_hot_mm) { /* one_hot @ W, compiled as a gather (src/passes/gather.c) */
    static const float idx[] = {0, 5, 5, -1, 2, 6, 5, 0};
    return tg_mul(tg_matmul(tg_one_hot(case_i32(g, S(2, 4), idx), 6), x[0]), x[1]);
}
/* A tied head over a vocabulary of 300 (too big for WebGPU's warps form
 * on lavapipe, so its embedding gradient is the sorted one): 40 tokens
 * with repeats and one out of range, logits against the same table. */
CASE_FN(c_tied_head) {
    static float tok[40], tgt[40];
    for (int i = 0; i < 40; i++) tok[i] = i == 7 ? -1.0f : (float)((i * i * 37) % 23 * 13), tgt[i] = (float)((i * 61) % 300);
    tg_tensor h = tg_mul(tg_embedding(x[0], case_i32(g, S(40), tok)), x[1]); /* [40, 2] */
    tg_tensor logits = tg_matmul_t(h, x[0], false, true);                  /* [40, 300] */
    return tg_cross_entropy(logits, case_i32(g, S(40), tgt), TG_REDUCTION_MEAN);
}
CASE_FN(c_softmax_axis2) { (void)g; return tg_softmax(x[0], 2); }
CASE_FN(c_unary_mix) {
    (void)g;
    return tg_add(tg_mul(tg_tanh(x[0]), tg_sigmoid(x[0])), tg_mul(tg_erf(x[0]), tg_softplus(tg_sin(x[0]))));
}
/* a small MLP with the new activations, to check they compose */
CASE_FN(c_mlp_gelu) {
    (void)g;
    tg_tensor h = tg_gelu(tg_add(tg_matmul(x[0], x[1]), x[2]));
    return tg_softmax(tg_silu(h), -1);
}

/* nn ops */
CASE_FN(c_xent_mean) {
    static const float t[] = {0, 4, 2, 1, 3, 4};
    return tg_cross_entropy(x[0], case_i32(g, S(6), t), TG_REDUCTION_MEAN);
}
CASE_FN(c_xent_sum) {
    static const float t[] = {3, 0, 1, 2, 2, 0};
    return tg_cross_entropy(x[0], case_i32(g, S(2, 3), t), TG_REDUCTION_SUM);
}
CASE_FN(c_xent_none) { /* -1 and 7 are outside [0, 7): zero loss, zero gradient */
    static const float t[] = {6, -1, 0, 7, 3};
    return tg_cross_entropy(x[0], case_i32(g, S(5), t), TG_REDUCTION_NONE);
}
CASE_FN(c_xent_long) { /* 83 classes: the row-at-a-time kernel's full vectors and its tail */
    static const float t[] = {0, 82, 41};
    return tg_cross_entropy(x[0], case_i32(g, S(3), t), TG_REDUCTION_MEAN);
}
CASE_FN(c_nll_mean) {
    static const float t[] = {5, 0, 2, 3};
    return tg_nll_loss(x[0], case_i32(g, S(4), t), TG_REDUCTION_MEAN);
}
CASE_FN(c_nll_none) {
    static const float t[] = {2, -100, 0, 1};
    return tg_nll_loss(x[0], case_i32(g, S(2, 2), t), TG_REDUCTION_NONE);
}
CASE_FN(c_log_softmax_nll) {
    static const float t[] = {1, 0, 3};
    return tg_nll_loss(tg_log_softmax(x[0], -1), case_i32(g, S(3), t), TG_REDUCTION_SUM);
}
CASE_FN(c_layer_norm) { (void)g; return tg_layer_norm(x[0], x[1], x[2], 1e-5f); }
CASE_FN(c_rms_norm) { (void)g; return tg_rms_norm(x[0], x[1], 1e-6f); }
CASE_FN(c_norm_chain) { /* a norm's input shared with another consumer, as in a residual stream */
    (void)g;
    return tg_add(tg_layer_norm(tg_rms_norm(x[0], x[1], 1e-6f), x[1], x[2], 1e-5f), tg_mul(x[0], x[2]));
}
CASE_FN(c_embedding) {
    static const float idx[] = {0, 3, 3, -1, 4, 5, 1}; /* repeats, and two out-of-range indices */
    return tg_embedding(x[0], case_i32(g, S(7), idx));
}
CASE_FN(c_embedding_2d) {
    static const float idx[] = {6, 2, 2, 0, 6, 6};
    return tg_mul(tg_embedding(x[0], case_i32(g, S(2, 3), idx)), x[1]);
}
CASE_FN(c_split_heads) { (void)g; return tg_split_heads(x[0], 2); }
CASE_FN(c_split_heads3) { (void)g; return tg_split_heads(x[0], 3); }
CASE_FN(c_merge_heads) { (void)g; return tg_merge_heads(x[0]); }
CASE_FN(c_rope) { (void)g; return tg_rope(x[0], 0.0f); }
CASE_FN(c_rope_base) { (void)g; return tg_rope(x[0], 100.0f); }
/* A small causal attention language model over every nn op with a gradient:
 * tied embedding -> layer norm -> heads -> rope -> attention -> cross-entropy. */
CASE_FN(c_tiny_lm) {
    static const float tok[] = {1, 5, 0, 2, 3, 3, 4, 0}, tgt[] = {5, 0, 2, 1, 3, 4, 0, -1};
    tg_tensor h = tg_embedding(x[0], case_i32(g, S(2, 4), tok));         /* [2,4,8] */
    h = tg_layer_norm(h, x[1], x[2], 1e-5f);
    tg_tensor q = tg_rope(tg_split_heads(tg_matmul(h, x[3]), 2), 0.0f); /* [2,2,4,4] */
    tg_tensor a = tg_softmax_causal(tg_mul_s(tg_matmul_t(q, q, false, true), 0.5f));
    tg_tensor o = tg_add(h, tg_merge_heads(tg_matmul(a, q)));             /* [2,4,8] */
    tg_tensor logits = tg_matmul_t(o, x[0], false, true);                 /* [2,4,6] */
    return tg_cross_entropy(logits, case_i32(g, S(2, 4), tgt), TG_REDUCTION_MEAN);
}
CASE_FN(c_dropout) { (void)g; return tg_dropout(x[0], 0.4f); }
CASE_FN(c_randn) { return tg_add(x[0], tg_randn(g, S(3, 4))); }
CASE_FN(c_categorical) { (void)g; return tg_cast(tg_categorical(x[0]), TG_F32); }
CASE_FN(c_categorical_axis0) { (void)g; return tg_cast(tg_categorical_axis(tg_mul_s(x[0], 3.0f), 0), TG_F32); }

/* ---- scans, selection, padding ---- */
CASE_FN(c_cumsum_last) { (void)g; return tg_cumsum(x[0], -1); }
CASE_FN(c_cumsum_first) { (void)g; return tg_mul(tg_cumsum(x[0], 0), x[0]); }
CASE_FN(c_cumsum_i32) { (void)g; return tg_cast(tg_cumsum(tg_cast(tg_mul_s(x[0], 5.0f), TG_I32), 1), TG_F32); }
CASE_FN(c_logsumexp_last) { (void)g; return tg_logsumexp(x[0], -1, false); }
CASE_FN(c_logsumexp_mid_keep) { (void)g; return tg_mul(tg_logsumexp(x[0], 1, true), x[0]); }
CASE_FN(c_logsumexp_all) { (void)g; return tg_logsumexp(tg_mul_s(x[0], 30.0f), TG_ALL, false); }
/* x in [-0.02, 0.02] plus offsets 0.1 apart: no two entries of a line come
 * within finite differences' reach of a tie. The indices ride along in the
 * output (scaled down), so both backends must pick the same ones. */
static tg_tensor apart(tg_graph *g, tg_tensor x) {
    static float off[256];
    tg_shape s = tg_tensor_shape(x);
    int64_t n = tg_shape_numel(s);
    for (int64_t i = 0; i < n && i < 256; i++) off[i] = (float)((i * 37) % n) * 0.1f - 2.0f;
    return tg_add(x, tg_constant(g, s, off));
}
CASE_FN(c_topk_largest) {
    tg_tensor idx, v = tg_topk(apart(g, x[0]), 3, -1, true, &idx);
    return tg_add(v, tg_mul_s(tg_cast(idx, TG_F32), 0.01f));
}
CASE_FN(c_topk_smallest_axis0) {
    tg_tensor idx, v = tg_topk(apart(g, x[0]), 2, 0, false, &idx);
    return tg_add(tg_mul(v, v), tg_mul_s(tg_cast(idx, TG_F32), 0.01f));
}
CASE_FN(c_topk_sorted_all) { return tg_topk(apart(g, x[0]), 11, 1, true, NULL); }
CASE_FN(c_pad_constant) { (void)g; return tg_pad(x[0], S(0, 1, 2), S(1, 0, 1), TG_PAD_CONSTANT, 0.5f); }
CASE_FN(c_pad_reflect) { (void)g; return tg_pad(x[0], S(0, 0, 2, 1), S(0, 0, 1, 3), TG_PAD_REFLECT, 0.0f); }
CASE_FN(c_pad_replicate) { (void)g; return tg_pad(x[0], S(2, 0, 1), S(1, 3, 0), TG_PAD_REPLICATE, 0.0f); }

CASE_FN(c_convt_s2p1op1) { (void)g; return tg_conv_transpose2d(x[0], x[1], 2, 1, 1, 1); }
CASE_FN(c_convt_groups2) { (void)g; return tg_conv_transpose2d(x[0], x[1], 1, 0, 0, 2); }
CASE_FN(c_convt_s3op2) { (void)g; return tg_conv_transpose2d(x[0], x[1], 3, 0, 2, 1); }
CASE_FN(c_avg_pool_tile) { (void)g; return tg_avg_pool2d(x[0], 2, 0, 0); }
CASE_FN(c_avg_pool_overlap) { (void)g; return tg_avg_pool2d(x[0], 3, 2, 1); }
CASE_FN(c_group_norm) { (void)g; return tg_group_norm(x[0], 3, x[1], x[2], 1e-5f); }
CASE_FN(c_group_norm_3d) { (void)g; return tg_group_norm(x[0], 2, x[1], x[2], 1e-5f); }
/* gain and bias packed in x1 [2, C]: x2, x3 are the running statistics, params as the update needs */
CASE_FN(c_batch_norm_train) {
    (void)g;
    tg_shape c = S(tg_tensor_shape(x[1]).d[1]);
    tg_tensor gb = tg_reshape(tg_narrow(x[1], 0, 0, 1), c), bb = tg_reshape(tg_narrow(x[1], 0, 1, 1), c);
    return tg_batch_norm(x[0], gb, bb, x[2], x[3], true, 0.1f, 1e-5f);
}
CASE_FN(c_batch_norm_eval) {
    (void)g;
    return tg_batch_norm(x[0], x[1], x[2], x[3], tg_add_s(tg_abs(x[3]), 0.5f), false, 0.1f, 1e-5f);
}

static const op_case op_cases[] = {
    {"add", 2, {S(3, 4), S(3, 4)}, -1, 1, 0, c_add, false},
    {"add_bcast_row", 2, {S(3, 5), S(5)}, -1, 1, 0, c_add, false},
    {"add_bcast_both", 2, {S(2, 3, 1), S(1, 4)}, -1, 1, 0, c_add, false},
    {"sub_bcast", 2, {S(4, 1), S(2, 1, 3)}, -1, 1, 0, c_sub, false},
    {"mul_bcast", 2, {S(2, 3, 4), S(3, 1)}, -1, 1, 0, c_mul, false},
    {"mul_scalar_operand", 2, {S(5, 3), TG_SCALAR}, -1, 1, 0, c_mul, false},
    {"div_bcast", 2, {S(3, 4), S(4)}, 0.5f, 2, 0, c_div, false},
    {"scalar_forms", 1, {S(7)}, 0.5f, 2, 0, c_scalars, false},
    {"neg", 1, {S(5, 3)}, -1, 1, 0, c_neg, false},
    {"sqrt", 1, {S(9)}, 0.3f, 3, 0, c_sqrt, false},
    {"rsqrt", 1, {S(2, 5)}, 0.3f, 3, 0, c_rsqrt, false},
    {"log", 1, {S(11)}, 0.3f, 3, 0, c_log, false},
    {"exp", 1, {S(3, 3)}, -2, 1, 0, c_exp, false},
    {"relu", 1, {S(4, 7)}, -1, 1, 0.05f, c_relu, false},
    {"where", 3, {S(3, 4), S(4), S(3, 1)}, -1, 1, 0.05f, c_where, false},
    {"less_greater", 2, {S(3, 5), S(5)}, -1, 1, 0.05f, c_compare, true},
    {"cast_i32", 1, {S(13)}, -3, 3, 0, c_cast_i32, true},
    {"sum_axis0", 1, {S(4, 3)}, -1, 1, 0, c_sum0, false},
    {"sum_last_keep", 1, {S(2, 3, 5)}, -1, 1, 0, c_sum1k, false},
    {"sum_all", 1, {S(3, 7)}, -1, 1, 0, c_sum_all, false},
    {"sum_axes_0_2", 1, {S(2, 3, 4)}, -1, 1, 0, c_sum_axes, false},
    {"mean_axis1", 1, {S(3, 5, 2)}, -1, 1, 0, c_mean, false},
    {"mean_axes_keep", 1, {S(2, 3, 4)}, -1, 1, 0, c_mean_axes, false},
    {"reshape", 2, {S(2, 3, 2), S(6)}, -1, 1, 0, c_reshape, false},
    {"permute3", 1, {S(2, 3, 4)}, -1, 1, 0, c_permute3, false},
    {"permute4", 1, {S(2, 3, 4, 5)}, -1, 1, 0, c_permute4, false},
    {"broadcast_to", 1, {S(4, 1)}, -1, 1, 0, c_broadcast_to, false},
    {"sum_to_shape", 1, {S(3, 4, 5)}, -1, 1, 0, c_sum_to_shape, false},
    {"matmul", 2, {S(5, 7), S(7, 3)}, -1, 1, 0, c_matmul, false},
    {"matmul_shared_b", 2, {S(2, 3, 4), S(4, 5)}, -1, 1, 0, c_matmul, false},
    {"matmul_batched", 2, {S(2, 3, 4), S(2, 4, 5)}, -1, 1, 0, c_matmul, false},
    {"matmul_ta", 2, {S(4, 3), S(4, 5)}, -1, 1, 0, c_matmul_ta, false},
    {"matmul_tb", 2, {S(3, 4), S(5, 4)}, -1, 1, 0, c_matmul_tb, false},
    {"matmul_tab_batched", 2, {S(2, 4, 3), S(2, 5, 4)}, -1, 1, 0, c_matmul_tab, false},
    {"matmul_ta_shared_b", 2, {S(2, 4, 3), S(4, 5)}, -1, 1, 0, c_matmul_ta, false},
    {"matmul_tb_shared_b", 2, {S(2, 3, 4), S(5, 4)}, -1, 1, 0, c_matmul_tb, false},
    {"matmul_large", 2, {S(33, 70), S(70, 37)}, -1, 1, 0, c_matmul, false},
    {"linear_relu", 3, {S(6, 5), S(5, 4), S(4)}, -1, 1, 0, c_linear, false},
    /* convolution ops */
    {"conv2d_s1_p0", 2, {S(2, 3, 5, 5), S(4, 3, 3, 3)}, -1, 1, 0, c_conv_s1p0, false},
    {"conv2d_s2_p1", 2, {S(2, 3, 6, 5), S(4, 3, 3, 3)}, -1, 1, 0, c_conv_s2p1, false},
    {"conv2d_groups2_2x3_s12_p10", 2, {S(2, 4, 5, 6), S(6, 2, 2, 3)}, -1, 1, 0, c_conv_g2_hw, false},
    {"conv2d_depthwise_x2", 2, {S(2, 3, 5, 5), S(6, 1, 3, 3)}, -1, 1, 0, c_conv_depthwise, false},
    {"conv2d_bias_groups2_s21_p10", 3, {S(2, 4, 5, 4), S(6, 2, 3, 2), S(6)}, -1, 1, 0, c_conv_bias_s2, false},
    {"conv2d_bias_upsample_chain", 4, {S(1, 2, 3, 4), S(3, 2, 3, 3), S(3), S(2, 3, 3, 2)}, -1, 1, 0,
     c_conv_bias_chain, false},
    {"max_pool2d_k2_floor", 1, {S(2, 3, 5, 5)}, -1, 1, 0, c_pool_k2, false},
    {"max_pool2d_k3_s2_p1", 1, {S(2, 2, 6, 5)}, -1, 1, 0, c_pool_k3s2p1, false},
    {"max_pool2d_2x3_s12_p11", 1, {S(1, 2, 5, 6)}, -1, 1, 0, c_pool_hw_overlap, false},
    {"nearest_upsample2d_x2", 1, {S(2, 3, 3, 2)}, -1, 1, 0, c_upsample2, false},
    {"nearest_upsample2d_x3", 1, {S(1, 2, 2, 3)}, -1, 1, 0, c_upsample3, false},
    {"one_hot", 1, {S(7, 4)}, -1, 1, 0, c_one_hot, false},
    {"arange", 1, {S(5)}, -1, 1, 0, c_arange, false},
    {"log_softmax_last", 1, {S(3, 6)}, -2, 2, 0, c_log_softmax_last, false},
    {"log_softmax_mid", 1, {S(2, 5, 3)}, -2, 2, 0, c_log_softmax_mid, false},
    {"softmax_causal", 1, {S(2, 4, 4)}, -2, 2, 0, c_softmax_causal, false},
    {"softmax_causal_5", 1, {S(3, 5, 5)}, -2, 2, 0, c_softmax_causal, false},
    {"softmax_causal_axis1", 1, {S(2, 4, 4)}, -2, 2, 0, c_softmax_causal_axis1, false},
    {"softmax_causal_axis0", 1, {S(5, 2, 5)}, -2, 2, 0, c_softmax_causal_axis0, false},
    {"one_hot_dt_zeros_ones_dt", 1, {S(3, 4)}, -1, 1, 0, c_one_hot_dt, false},
    {"where_causal", 1, {S(2, 3, 3)}, -1, 1, 0, c_where_causal, false},
    {"mse", 2, {S(4, 3), S(4, 3)}, -1, 1, 0, c_mse, false},

    /* math and shape ops */
    {"max_bcast", 2, {S(3, 4), S(4)}, -1, 1, 0.05f, c_max_bcast, false},
    {"min_bcast_both", 2, {S(2, 3, 1), S(1, 4)}, -1, 1, 0.05f, c_min_bcast, false},
    {"min_max_scalar", 1, {S(5, 3)}, -1, 1, 0.05f, c_minmax_s, false},
    {"min_max_abs_clamp_square_i32", 2, {S(3, 5), S(5)}, -1, 1, 0, c_minmax_i32, true},
    {"clamp", 1, {S(4, 5)}, -1, 1, 0.05f, c_clamp, false},
    {"abs", 1, {S(7, 3)}, -1, 1, 0.05f, c_abs, false},
    {"square", 1, {S(2, 9)}, -2, 2, 0, c_square, false},
    {"sin_cos", 1, {S(3, 7)}, -3, 3, 0, c_sin_cos, false},
    {"tanh", 1, {S(37)}, -3, 3, 0, c_tanh, false},
    {"sigmoid", 1, {S(4, 5)}, -4, 4, 0, c_sigmoid, false},
    {"erf", 1, {S(33)}, -2.5f, 2.5f, 0, c_erf, false},
    {"gelu", 1, {S(3, 13)}, -4, 4, 0, c_gelu, false},
    {"gelu_tanh", 1, {S(3, 13)}, -4, 4, 0, c_gelu_tanh, false},
    {"silu", 1, {S(19)}, -5, 5, 0, c_silu, false},
    {"softplus", 1, {S(2, 11)}, -6, 6, 0, c_softplus, false},
    {"leaky_relu", 1, {S(4, 6)}, -1, 1, 0.05f, c_leaky, false},
    {"leaky_relu_alpha_1.5", 1, {S(5, 5)}, -1, 1, 0.05f, c_leaky_big, false},
    {"leaky_relu_alpha_neg", 1, {S(17)}, -1, 1, 0.05f, c_leaky_neg, false},
    {"log1p", 1, {S(5, 7)}, -0.9f, 3, 0, c_log1p, false},
    {"expm1", 1, {S(3, 11)}, -3, 3, 0, c_expm1, false},
    {"hardtanh", 1, {S(4, 9)}, -1.5f, 1.5f, 0.05f, c_hardtanh, false},
    {"pow", 2, {S(3, 4), S(4)}, 0.5f, 2, 0, c_pow, false},
    {"pow_bcast_both", 2, {S(2, 3, 1), S(1, 5)}, 0.6f, 1.8f, 0, c_pow, false},
    {"pow_scalar", 1, {S(4, 7)}, -2, 2, 0.2f, c_pow_s, false},
    {"pow_negative_base_int", 1, {S(3, 6)}, -2, 2, 0.4f, c_pow_int, false},
    {"softmax_last", 1, {S(3, 37)}, -2, 2, 0, c_softmax_last, false},
    {"softmax_mid", 1, {S(2, 5, 3)}, -2, 2, 0, c_softmax_mid, false},
    {"softmax_first_wide", 1, {S(3, 70)}, -2, 2, 0, c_softmax_first, false},
    {"argmax_argmin", 1, {S(3, 4, 5)}, -1, 1, 0, c_argmax, true},
    {"argmax_axis0_keep", 1, {S(4, 3)}, -1, 1, 0, c_argmax_axis0, true},
    {"amax_amin", 1, {S(3, 4, 5)}, -0.02f, 0.02f, 0, c_amax_amin, false},
    {"amax_all_amin_axis0", 1, {S(3, 4, 5)}, -0.02f, 0.02f, 0, c_amax_all, false},
    {"amax_amin_i32", 1, {S(4, 7)}, -1, 1, 0, c_amax_i32, true},
    {"zeros_ones", 1, {S(3, 4)}, -1, 1, 0, c_zeros_ones, false},
    {"swap_axes", 1, {S(2, 3, 4)}, -1, 1, 0, c_swap_axes, false},
    {"narrow", 1, {S(4, 6)}, -1, 1, 0, c_narrow, false},
    {"narrow_neg_start", 1, {S(5, 3, 2)}, -1, 1, 0, c_narrow_neg, false},
    {"concat3", 3, {S(2, 3), S(2, 1), S(2, 4)}, -1, 1, 0, c_concat3, false},
    {"concat6_axis0", 2, {S(2, 3), S(1, 3)}, -1, 1, 0, c_concat6, false},
    {"stack", 2, {S(3, 4), S(3, 4)}, -1, 1, 0, c_stack, false},
    {"stack_last", 2, {S(5), S(5)}, -1, 1, 0, c_stack_last, false},
    {"split", 1, {S(3, 7)}, -1, 1, 0, c_split, false},
    {"take_along_last", 1, {S(4, 5)}, -1, 1, 0, c_take_last, false},
    {"take_along_first", 1, {S(4, 3)}, -1, 1, 0, c_take_first, false},
    {"take_along_mid", 1, {S(2, 3, 2)}, -1, 1, 0, c_take_mid, false},
    {"take_along_many", 1, {S(2, 5, 3)}, -1, 1, 0, c_take_many, false},
    {"one_hot_product", 2, {S(6, 3), S(2, 4, 3)}, -1, 1, 0, c_one_hot_mm, false},
    {"mlp_gelu_silu_softmax", 3, {S(4, 5), S(5, 6), S(6)}, -1, 1, 0, c_mlp_gelu, false},
    {"max_scalar_operand", 2, {S(5, 3), TG_SCALAR}, -1, 1, 0.05f, c_max_bcast, false},
    {"min_3d_row", 2, {S(2, 3, 17), S(17)}, -1, 1, 0.05f, c_min_bcast, false},
    {"unary_mix_scalar", 1, {TG_SCALAR}, -2, 2, 0, c_unary_mix, false},
    {"unary_mix_3d", 1, {S(2, 3, 5)}, -2, 2, 0, c_unary_mix, false},
    {"gelu_3d", 1, {S(3, 2, 7)}, -3, 3, 0, c_gelu, false},
    {"softmax_4d_axis2", 1, {S(2, 3, 4, 5)}, -2, 2, 0, c_softmax_axis2, false},

    /* scans, selection, padding */
    {"cumsum_last", 1, {S(3, 5)}, -1, 1, 0, c_cumsum_last, false},
    {"cumsum_first", 1, {S(4, 3, 2)}, -1, 1, 0, c_cumsum_first, false},
    {"cumsum_i32", 1, {S(3, 6)}, -1, 1, 0, c_cumsum_i32, true},
    {"logsumexp_last", 1, {S(3, 6)}, -3, 3, 0, c_logsumexp_last, false},
    {"logsumexp_mid_keep", 1, {S(2, 5, 3)}, -2, 2, 0, c_logsumexp_mid_keep, false},
    {"logsumexp_all_large", 1, {S(4, 5)}, -1, 1, 0, c_logsumexp_all, false},
    {"topk_largest", 1, {S(4, 7)}, -0.02f, 0.02f, 0, c_topk_largest, false},
    {"topk_smallest_axis0", 1, {S(5, 3, 2)}, -0.02f, 0.02f, 0, c_topk_smallest_axis0, false},
    {"topk_sorted_all", 1, {S(2, 11)}, -0.02f, 0.02f, 0, c_topk_sorted_all, false},
    {"pad_constant", 1, {S(2, 3, 4)}, -1, 1, 0, c_pad_constant, false},
    {"pad_reflect", 1, {S(2, 2, 5, 4)}, -1, 1, 0, c_pad_reflect, false},
    {"pad_replicate", 1, {S(2, 3, 4)}, -1, 1, 0, c_pad_replicate, false},

    {"conv_transpose2d_s2_p1_op1", 2, {S(2, 4, 3, 3), S(4, 3, 3, 3)}, -1, 1, 0, c_convt_s2p1op1, false},
    {"conv_transpose2d_groups2", 2, {S(1, 4, 3, 4), S(4, 1, 2, 2)}, -1, 1, 0, c_convt_groups2, false},
    {"conv_transpose2d_s3_op2", 2, {S(1, 2, 2, 2), S(2, 2, 2, 2)}, -1, 1, 0, c_convt_s3op2, false},
    {"avg_pool2d_tiles", 1, {S(2, 3, 4, 6)}, -1, 1, 0, c_avg_pool_tile, false},
    {"avg_pool2d_tiles_odd", 1, {S(1, 2, 5, 5)}, -1, 1, 0, c_avg_pool_tile, false},
    {"avg_pool2d_k3_s2_p1", 1, {S(2, 2, 6, 5)}, -1, 1, 0, c_avg_pool_overlap, false},
    {"group_norm", 3, {S(2, 6, 3, 3), S(6), S(6)}, -2, 2, 0, c_group_norm, false},
    {"group_norm_3d", 3, {S(3, 4, 5), S(4), S(4)}, -2, 2, 0, c_group_norm_3d, false},
    {"batch_norm_train", 4, {S(4, 3, 2, 2), S(2, 3), S(3), S(3)}, -2, 2, 0, c_batch_norm_train, false},
    {"batch_norm_train_2d", 4, {S(6, 4), S(2, 4), S(4), S(4)}, -2, 2, 0, c_batch_norm_train, false},
    {"batch_norm_eval", 4, {S(3, 2, 2, 3), S(2), S(2), S(2)}, -2, 2, 0, c_batch_norm_eval, false},

    /* nn ops */
    {"cross_entropy_mean", 1, {S(6, 5)}, -2, 2, 0, c_xent_mean, false},
    {"cross_entropy_sum", 1, {S(2, 3, 4)}, -2, 2, 0, c_xent_sum, false},
    {"cross_entropy_none", 1, {S(5, 7)}, -3, 3, 0, c_xent_none, false},
    {"cross_entropy_83_classes", 1, {S(3, 83)}, -3, 3, 0, c_xent_long, false},
    {"nll_loss_mean", 1, {S(4, 6)}, -2, 0, 0, c_nll_mean, false},
    {"nll_loss_none", 1, {S(2, 2, 3)}, -2, 0, 0, c_nll_none, false},
    {"log_softmax_nll", 1, {S(3, 4)}, -2, 2, 0, c_log_softmax_nll, false},
    {"layer_norm", 3, {S(6, 8), S(8), S(8)}, -2, 2, 0, c_layer_norm, false},
    {"layer_norm_3d", 3, {S(2, 3, 5), S(5), S(5)}, -2, 2, 0, c_layer_norm, false},
    {"layer_norm_1d", 3, {S(13), S(13), S(13)}, -2, 2, 0, c_layer_norm, false},
    {"rms_norm", 2, {S(4, 6), S(6)}, -2, 2, 0, c_rms_norm, false},
    {"rms_norm_3d", 2, {S(2, 3, 11), S(11)}, -2, 2, 0, c_rms_norm, false},
    {"norm_chain", 3, {S(3, 9), S(9), S(9)}, -2, 2, 0, c_norm_chain, false},
    {"embedding", 1, {S(6, 3)}, -1, 1, 0, c_embedding, false},
    {"embedding_2d", 2, {S(7, 4), S(2, 3, 4)}, -1, 1, 0, c_embedding_2d, false},
    {"split_heads", 1, {S(2, 3, 8)}, -1, 1, 0, c_split_heads, false},
    {"split_heads_2d", 1, {S(4, 9)}, -1, 1, 0, c_split_heads3, false},
    {"merge_heads", 1, {S(2, 2, 3, 4)}, -1, 1, 0, c_merge_heads, false},
    {"rope", 1, {S(2, 5, 6)}, -1, 1, 0, c_rope, false},
    {"rope_base100", 1, {S(3, 8)}, -1, 1, 0, c_rope_base, false},
    {"dropout", 1, {S(4, 9)}, -1, 1, 0, c_dropout, true},
    {"randn", 1, {S(3, 4)}, -1, 1, 0, c_randn, true},
    {"categorical", 1, {S(6, 5)}, -2, 2, 0, c_categorical, true},
    {"categorical_axis0", 1, {S(5, 6)}, -2, 2, 0, c_categorical_axis0, true},
    {"tied_head", 2, {S(300, 2), S(2)}, -1, 1, 0, c_tied_head, false},
    {"tiny_lm", 4, {S(6, 8), S(8), S(8), S(8, 8)}, -1, 1, 0, c_tiny_lm, false},
};
#define N_OP_CASES ((int)(sizeof op_cases / sizeof op_cases[0]))

#undef S
#endif
