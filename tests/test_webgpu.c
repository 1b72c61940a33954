/* The WebGPU backend against the CPU backend, on whatever adapter the
 * runtime finds (lavapipe in CI): every op forward and backward, training,
 * the adapter check, WGSL compile errors, limit errors and the PRNG.
 *
 * Tolerances (relative to max(1, |cpu value|)): 1e-5 for the forward of
 * most ops, 1e-4 where a long sum or exp/log is involved, 10x that for
 * gradients; i32 and bool outputs must match exactly. Training: the loss of
 * every step within 1e-4 relative. Without a WebGPU runtime the test prints
 * "skipped" with the reason, except under CI=true where that is a failure. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv (parity.h) */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"
#include "harness.h"
#include "util/util.h"
#include "cpu/kernels.h"
#include "webgpu/webgpu.h"
#include "wgsl/emit.h"
#include "../examples/sin.h"

#define S TG_SHAPE /* op_cases.h #undefs its own */
#define PRM(...) {__VA_ARGS__, P_END}

/* ---- op cases ---- */

static tg_tensor pos(tg_tensor x) { return tg_add_s(tg_mul(x, x), 0.5f); } /* > 0 for sqrt/log/rsqrt */

static tg_tensor b_add(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_add(p[0], p[1]); }
static tg_tensor b_sub(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sub(p[0], p[1]); }
static tg_tensor b_mul(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_mul(p[0], p[1]); }
static tg_tensor b_div(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_div(p[0], pos(p[1])); }
static tg_tensor b_scalars(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor x = tg_rsub_s(2.0f, tg_mul_s(tg_sub_s(tg_add_s(p[0], 1.5f), 0.25f), -3.0f));
    return tg_add(tg_div_s(x, 7.0f), tg_rdiv_s(1.0f, pos(p[0])));
}
static tg_tensor b_where_cmp(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor a = tg_where(tg_less(p[0], p[1]), p[0], p[1]);
    return tg_where(tg_greater_s(p[0], 0.2f), a, tg_mul_s(p[1], 2.0f));
}
static tg_tensor b_where_bc(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_where(tg_greater_s(p[0], 0.0f), p[1], p[2]);
}
static tg_tensor b_less(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_less(p[0], p[1]); }
static tg_tensor b_iadd(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_add(i[0], i[1]); }
static tg_tensor b_isub(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sub(i[0], i[1]); }
static tg_tensor b_imul(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_mul(i[0], i[1]); }
static tg_tensor b_idiv(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_div(i[0], i[1]); }
static tg_tensor b_igreater(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_greater(i[0], i[1]); }
static tg_tensor b_isum(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum(i[0], 0, true); }
static tg_tensor b_neg(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_neg(p[0]); }
static tg_tensor b_sqrt(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sqrt(pos(p[0])); }
static tg_tensor b_rsqrt(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_rsqrt(pos(p[0])); }
static tg_tensor b_log(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_log(pos(p[0])); }
static tg_tensor b_exp(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_exp(p[0]); }
static tg_tensor b_relu(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_relu(p[0]); }
static tg_tensor b_cast_fi(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_cast(tg_mul_s(p[0], 1e9f), TG_I32); /* saturates past +-2^31 */
}
static tg_tensor b_cast_if(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_mul(tg_cast(i[0], TG_F32), p[0]);
}
static tg_tensor b_cast_bool(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor fb = tg_cast(tg_cast(tg_relu(p[0]), TG_BOOL), TG_F32); /* f32 -> bool -> f32 */
    tg_tensor ib = tg_cast(tg_cast(i[0], TG_BOOL), TG_I32);         /* i32 -> bool -> i32 */
    return tg_add(tg_mul(fb, p[0]), tg_cast(ib, TG_F32));
}
static tg_tensor b_sum_last(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum(p[0], -1, true); }
static tg_tensor b_sum_first(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum(p[0], 0, false); }
static tg_tensor b_sum_mid(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum(p[0], 1, true); }
static tg_tensor b_sum_all(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum(p[0], TG_ALL, false); }
static tg_tensor b_sum_02(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_sum_axes(p[0], S(0, 2), true);
}
static tg_tensor b_mean(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_mean(p[0], -1, false); }
static tg_tensor b_permute(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_permute(p[0], S(3, 1, 0, 2));
}
static tg_tensor b_reshape(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_mul(tg_reshape(p[0], S(6, -1)), p[1]);
}
static tg_tensor b_bcast(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_broadcast_to(p[0], S(5, 3, 7));
}
static tg_tensor b_sum_to(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_sum_to_shape(p[0], S(1, 7));
}
static tg_tensor b_mm(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_matmul(p[0], p[1]); }
static tg_tensor b_mm_ta(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_matmul_t(p[0], p[1], true, false); }
static tg_tensor b_mm_tb(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_matmul_t(p[0], p[1], false, true); }
static tg_tensor b_mm_tab(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_matmul_t(p[0], p[1], true, true); }
static tg_tensor b_one_hot(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_mul(tg_one_hot(i[0], 10), p[0]);
}
static tg_tensor b_lsm_last(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_log_softmax(p[0], -1); }
static tg_tensor b_lsm_first(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_log_softmax(p[0], 0); }
static tg_tensor b_lsm_mid(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_log_softmax(p[0], 1); }
static tg_tensor b_smc(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_softmax_causal(p[0]); }
static tg_tensor b_wc(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_where_causal(p[0], 0.5f); }
static tg_tensor b_wc_inf(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_where_causal(tg_mul_s(p[0], 2.0f), -INFINITY);
}
static tg_tensor b_attn(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    /* scores -> causal mask -> softmax -> weighted values, the attention chain */
    tg_tensor sc = tg_mul_s(tg_matmul_t(p[0], p[1], false, true), 0.25f);
    return tg_matmul(tg_softmax_causal(tg_where_causal(sc, -1e9f)), p[2]);
}
static tg_tensor b_mse(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_mse(p[0], p[1]); }
static tg_tensor b_consts(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    static const float lit[5] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f};
    tg_tensor a = tg_add(p[0], tg_arange(g, 5, TG_F32));
    tg_tensor b = tg_mul(a, tg_constant(g, S(5), lit));
    tg_tensor c = tg_add(tg_cast(tg_arange(g, 5, TG_I32), TG_F32), tg_full(g, S(3, 5), -0.75f));
    return tg_add(b, c);
}

/* Conv ops at sizes the shared table does not reach: weight gradients long
 * enough to be split over invocations, grids over 16 workgroups (2-D in
 * test_ops_2d_grid), strides larger than the kernel, padding wider than
 * it, and max pooling with ties and NaN. */
static tg_tensor b_conv3x3(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_conv2d(p[0], p[1], 1, 1, 2); }
static tg_tensor b_conv_bias_g4(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_conv2d_bias(p[0], p[1], p[2], 2, 1, 2, 1, 4);
}
static tg_tensor b_conv_dw(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_conv2d(p[0], p[1], 2, 1, 6); }
static tg_tensor b_conv_1x1_s2(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_conv2d(p[0], p[1], 2, 0, 1); }
static tg_tensor b_conv_wide_pad(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_conv2d_hw(p[0], p[1], 3, 2, 2, 3, 1);
}
/* Values 1.5 p0 truncated to integers (many ties, many negative windows next
 * to padding) with the gradient of 1.5 p0: a + stop_gradient(q - a) is q
 * exactly, so a gradient routed to the wrong tied element shows. */
static tg_tensor ties(tg_tensor x) {
    tg_tensor a = tg_mul_s(x, 1.5f);
    tg_tensor q = tg_cast(tg_cast(a, TG_I32), TG_F32);
    return tg_add(a, tg_stop_gradient(tg_sub(q, a)));
}
static tg_tensor b_pool_ties(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_max_pool2d(ties(p[0]), 2, 2, 1);
}
static tg_tensor b_pool_ties_overlap(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_max_pool2d_hw(ties(p[0]), 3, 2, 1, 2, 1, 1);
}
static tg_tensor b_pool_k3s2(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_max_pool2d(p[0], 3, 2, 1); }
static tg_tensor b_pool_nan(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_max_pool2d(tg_sqrt(p[0]), 2, 2, 0); /* sqrt(< 0) is NaN */
}
static tg_tensor b_upsample(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_nearest_upsample2d(p[0], 3);
}
static tg_tensor b_conv_pool_stack(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor h = tg_max_pool2d(tg_relu(tg_conv2d(p[0], p[1], 1, 1, 1)), 2, 2, 0);
    return tg_conv2d(tg_nearest_upsample2d(h, 2), p[2], 1, 1, 1);
}

/* nn ops at sizes the shared table does not reach: rows over 32 wide (one
 * workgroup per row), column sums over more than 8 rows, larger scatters. */
static tg_tensor b_xent(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_cross_entropy(p[0], i[0], TG_REDUCTION_NONE);
}
static tg_tensor b_xent_mean(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_cross_entropy(p[0], i[0], TG_REDUCTION_MEAN);
}
static tg_tensor b_nll(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_nll_loss(tg_log_softmax(p[0], -1), i[0], TG_REDUCTION_SUM);
}
static tg_tensor b_ln(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_layer_norm(p[0], p[1], p[2], 1e-5f); }
static tg_tensor b_rms(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_rms_norm(p[0], p[1], 1e-6f); }
static tg_tensor b_emb(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_embedding(p[0], i[0]); }
static tg_tensor b_take_mid(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_take_along_axis(p[0], i[0], 1); }
static tg_tensor b_take_last(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_take_along_axis(p[0], i[0], -1); }
static tg_tensor b_rope(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_rope(p[0], 0.0f); }
static tg_tensor b_dropout(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_dropout(p[0], 0.3f); }
static tg_tensor b_randn(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_add(p[0], tg_randn(g, S(3, 171)));
}
static tg_tensor b_categorical(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_categorical(tg_mul_s(p[0], 3.0f));
}

/* The math family over wide input ranges: sin/cos beyond one period, the
 * saturating tails of tanh, sigmoid, softplus, erf and gelu. */
static tg_tensor b_sincos(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor x = tg_mul_s(p[0], 40.0f);
    return tg_add(tg_sin(x), tg_mul(tg_cos(x), p[1]));
}
static tg_tensor b_sat(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor x = tg_mul_s(p[0], 15.0f);
    return tg_add(tg_add(tg_tanh(x), tg_sigmoid(x)), tg_add(tg_mul_s(tg_softplus(x), 0.1f), tg_mul_s(tg_silu(x), 0.1f)));
}
static tg_tensor b_erf_gelu(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor x = tg_mul_s(p[0], 4.0f);
    return tg_add(tg_add(tg_erf(x), tg_gelu(x)), tg_gelu_tanh(x));
}
static tg_tensor b_piecewise(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor a = tg_add(tg_clamp(p[0], -0.5f, 0.7f), tg_leaky_relu(p[0], 0.1f));
    return tg_add(a, tg_add(tg_abs(p[1]), tg_square(p[1])));
}
static tg_tensor b_int_math(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_add(tg_add(tg_abs(i[0]), tg_square(i[0])), tg_clamp(i[0], -2.5f, 3e9f));
}
/* INT32_MIN / -1 (which traps in C), and i32 scalars from NaN and the infinities (0, INT32_MAX, INT32_MIN) */
static tg_tensor b_int_edges(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    static const float a[] = {-2147483648.0f, 7, -7, 5, 3e9f, -3e9f}, b[] = {-1, -1, 2, 0, 1, -1};
    tg_tensor q = tg_div(tg_cast(tg_constant(g, S(6), a), TG_I32), tg_cast(tg_constant(g, S(6), b), TG_I32));
    tg_tensor zero = tg_mul_s(i[0], 0.0f);
    tg_tensor edges[4] = {tg_add(q, zero), tg_add_s(zero, NAN), tg_add_s(zero, INFINITY), tg_add_s(zero, -INFINITY)};
    return tg_concat(edges, 4, 0);
}
static tg_tensor b_minmax_nan(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_add(tg_max(tg_sqrt(p[0]), p[1]), tg_min(p[1], tg_mul_s(p[0], 0.5f))); /* sqrt(< 0) is NaN */
}
static tg_tensor b_argmax_ties(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_argmax(tg_cast(tg_cast(tg_mul_s(p[0], 1.5f), TG_I32), TG_F32), 1, false);
}

static const par_case cases[] = {
    {"add broadcast [7,13]+[13]", PRM(S(7, 13), S(13)), P_NONE, 0, 1, b_add, 0},
    {"add broadcast 3-d", PRM(S(5, 1, 9), S(1, 4, 1)), P_NONE, 0, 1, b_add, 0},
    {"sub [7,13]-[7,1]", PRM(S(7, 13), S(7, 1)), P_NONE, 0, 1, b_sub, 0},
    {"mul 4-d broadcast", PRM(S(2, 3, 5, 7), S(3, 1, 7)), P_NONE, 0, 1, b_mul, 0},
    {"mul by a scalar param", PRM(S(9, 4), TG_SCALAR), P_NONE, 0, 1, b_mul, 0},
    {"div [31,17]/[17]", PRM(S(31, 17), S(17)), P_NONE, 0, 1, b_div, 0},
    {"tensor-scalar ops", PRM(S(300)), P_NONE, 0, 1, b_scalars, 0},
    {"where(less, greater)", PRM(S(7, 13), S(13)), P_NONE, 0, 1, b_where_cmp, 0},
    {"where broadcast 3 ways", PRM(S(4, 1, 6), S(5, 6), S(1)), P_NONE, 0, 1, b_where_bc, 0},
    {"less f32 -> bool", PRM(S(7, 13), S(7, 1)), P_NONE, 0, 1, b_less, 0},
    {"i32 add", P_NONE, {S(6, 11), S(11), P_END}, -5, 5, b_iadd, 0},
    {"i32 sub", P_NONE, {S(6, 11), S(6, 1), P_END}, -5, 5, b_isub, 0},
    {"i32 mul", P_NONE, {S(6, 11), S(11), P_END}, -40000, 40000, b_imul, 0},
    {"i32 floor div, /0 = 0", P_NONE, {S(6, 11), S(11), P_END}, -5, 5, b_idiv, 0},
    {"i32 greater", P_NONE, {S(6, 11), S(11), P_END}, -5, 5, b_igreater, 0},
    {"i32 sum", P_NONE, {S(40, 3), P_END}, -1000000000, 1000000000, b_isum, 0},
    {"neg", PRM(S(129, 33)), P_NONE, 0, 1, b_neg, 0},
    {"sqrt", PRM(S(129, 33)), P_NONE, 0, 1, b_sqrt, 0},
    {"rsqrt", PRM(S(129, 33)), P_NONE, 0, 1, b_rsqrt, 0},
    {"log", PRM(S(129, 33)), P_NONE, 0, 1, b_log, 0},
    {"exp", PRM(S(129, 33)), P_NONE, 0, 1, b_exp, 0},
    {"relu", PRM(S(129, 33)), P_NONE, 0, 1, b_relu, 0},
    {"cast f32 -> i32 saturating", PRM(S(70)), P_NONE, 0, 1, b_cast_fi, 0},
    {"cast i32 -> f32", PRM(S(5, 8)), {S(5, 8), P_END}, -100, 100, b_cast_if, 0},
    {"cast via bool", PRM(S(40)), {S(40), P_END}, -2, 3, b_cast_bool, 0},
    {"sum last axis, 300 wide", PRM(S(37, 300)), P_NONE, 0, 1, b_sum_last, 1e-4f},
    {"sum last axis, 1000 wide", PRM(S(3, 1000)), P_NONE, 0, 1, b_sum_last, 1e-4f},
    {"sum last axis, short", PRM(S(37, 5)), P_NONE, 0, 1, b_sum_last, 0},
    {"sum first axis", PRM(S(300, 37)), P_NONE, 0, 1, b_sum_first, 1e-4f},
    {"sum first axis, many outputs", PRM(S(70, 1100)), P_NONE, 0, 1, b_sum_first, 1e-4f},
    {"sum first axis, 16400 rows (tall column sum)", PRM(S(16400, 9)), P_NONE, 0, 1, b_sum_first, 1e-4f},
    {"sum middle axis", PRM(S(6, 50, 7)), P_NONE, 0, 1, b_sum_mid, 1e-4f},
    {"sum axes 0 and 2", PRM(S(4, 5, 66)), P_NONE, 0, 1, b_sum_02, 1e-4f},
    {"sum all", PRM(S(33, 65)), P_NONE, 0, 1, b_sum_all, 1e-4f},
    {"mean last axis", PRM(S(9, 70)), P_NONE, 0, 1, b_mean, 1e-4f},
    {"permute 4-d", PRM(S(2, 3, 4, 5)), P_NONE, 0, 1, b_permute, 0},
    {"reshape (a view)", PRM(S(2, 3, 7), S(7)), P_NONE, 0, 1, b_reshape, 0},
    {"broadcast_to", PRM(S(3, 1)), P_NONE, 0, 1, b_bcast, 0},
    {"sum_to_shape", PRM(S(5, 7)), P_NONE, 0, 1, b_sum_to, 0},
    {"matmul [37,29]x[29,41]", PRM(S(37, 29), S(29, 41)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul a^T", PRM(S(29, 37), S(29, 41)), P_NONE, 0, 1, b_mm_ta, 1e-4f},
    {"matmul b^T", PRM(S(37, 29), S(41, 29)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
    {"matmul a^T b^T", PRM(S(29, 37), S(41, 29)), P_NONE, 0, 1, b_mm_tab, 1e-4f},
    {"matmul K=1", PRM(S(65, 1), S(1, 70)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul 3 tiles, K=150", PRM(S(130, 150), S(150, 70)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul 128-tiles [200,70]x[70,260]", PRM(S(200, 70), S(70, 260)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul 128-tiles a^T", PRM(S(70, 200), S(70, 131)), P_NONE, 0, 1, b_mm_ta, 1e-4f},
    {"matmul 128-tiles b^T", PRM(S(129, 33), S(300, 33)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
    {"matmul 128-tiles a^T b^T", PRM(S(9, 140), S(130, 9)), P_NONE, 0, 1, b_mm_tab, 1e-4f},
    {"matmul 128-tiles batched", PRM(S(2, 129, 17), S(2, 17, 128)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul batch x shared B", PRM(S(3, 37, 29), S(29, 41)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul batch^T x shared B", PRM(S(2, 29, 37), S(29, 41)), P_NONE, 0, 1, b_mm_ta, 1e-4f},
    {"matmul batched", PRM(S(3, 37, 29), S(3, 29, 41)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul batched b^T", PRM(S(2, 3, 17, 9), S(2, 3, 19, 9)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
    /* M or N past a multiple of the tile, K a multiple of the slice: unchecked tiles inside, checked edges */
    {"matmul edges [200,48]x[48,260]", PRM(S(200, 48), S(48, 260)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul edges a^T", PRM(S(48, 200), S(48, 131)), P_NONE, 0, 1, b_mm_ta, 1e-4f},
    {"matmul edges b^T (a vocabulary head)", PRM(S(130, 32), S(301, 32)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
    {"matmul edges batched", PRM(S(2, 70, 32), S(2, 32, 133)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul K past the slice [130,50]x[50,131]", PRM(S(130, 50), S(50, 131)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul K past the slice [128,37]x[37,128]", PRM(S(128, 37), S(37, 128)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul K past the slice b^T [129,7]x[140,7]^T", PRM(S(129, 7), S(140, 7)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
    {"matmul tile multiples [128,32]x[32,128]", PRM(S(128, 32), S(32, 128)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul tile multiples a^T b^T batched", PRM(S(2, 48, 128), S(2, 64, 48)), P_NONE, 0, 1, b_mm_tab, 1e-4f},
    /* tile multiples run without bounds checks: each transposed form, and a K of
     * 160 that a split of 3 cuts into 64 + 64 + 32 */
    {"matmul tile multiples a^T", PRM(S(64, 128), S(64, 64)), P_NONE, 0, 1, b_mm_ta, 1e-4f},
    {"matmul tile multiples b^T", PRM(S(64, 32), S(128, 32)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
    {"matmul tile multiples batched [2,3,64,16]x[2,3,16,64]", PRM(S(2, 3, 64, 16), S(2, 3, 16, 64)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul tile multiples batch x shared B", PRM(S(2, 64, 32), S(32, 64)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"matmul tile multiples, K=160", PRM(S(128, 160), S(160, 128)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"one_hot", PRM(S(17, 10)), {S(17), P_END}, -1, 12, b_one_hot, 0},
    {"log_softmax last, 300 wide", PRM(S(7, 300)), P_NONE, 0, 1, b_lsm_last, 1e-4f},
    {"log_softmax last, short", PRM(S(50, 10)), P_NONE, 0, 1, b_lsm_last, 1e-4f},
    {"log_softmax first axis", PRM(S(40, 3)), P_NONE, 0, 1, b_lsm_first, 1e-4f},
    {"log_softmax middle, wide", PRM(S(4, 64, 5)), P_NONE, 0, 1, b_lsm_mid, 1e-4f},
    {"softmax_causal", PRM(S(2, 3, 9, 9)), P_NONE, 0, 1, b_smc, 1e-4f},
    {"softmax_causal, wide rows", PRM(S(2, 40, 40)), P_NONE, 0, 1, b_smc, 1e-4f},
    {"softmax_causal Tq != Tk", PRM(S(3, 5, 8)), P_NONE, 0, 1, b_smc, 1e-4f},
    {"where_causal", PRM(S(2, 9, 9)), P_NONE, 0, 1, b_wc, 0},
    {"where_causal -inf", PRM(S(3, 7, 5)), P_NONE, 0, 1, b_wc_inf, 0},
    {"attention chain", PRM(S(2, 8, 16), S(2, 8, 16), S(2, 8, 16)), P_NONE, 0, 1, b_attn, 1e-4f},
    {"mse", PRM(S(33, 4), S(33, 4)), P_NONE, 0, 1, b_mse, 1e-4f},
    {"arange, constant, full", PRM(S(5)), P_NONE, 0, 1, b_consts, 0},
    {"sin, cos over |x| < 150", PRM(S(30, 33), S(30, 33)), P_NONE, 0, 1, b_sincos, 1e-5f},
    {"tanh, sigmoid, softplus, silu tails", PRM(S(500)), P_NONE, 0, 1, b_sat, 1e-5f},
    {"erf, gelu, gelu_tanh tails", PRM(S(500)), P_NONE, 0, 1, b_erf_gelu, 1e-5f},
    {"clamp, leaky_relu, abs, square", PRM(S(300), S(300)), P_NONE, 0, 1, b_piecewise, 0},
    {"i32 abs, square, clamp", P_NONE, {S(70), P_END}, -60000, 60000, b_int_math, 0},
    {"i32 INT32_MIN / -1, scalars from NaN and infinities", P_NONE, {S(6), P_END}, -5, 5, b_int_edges, 0},
    {"min, max with NaN", PRM(S(9, 20), S(20)), P_NONE, 0, 1, b_minmax_nan, 0},
    {"argmax with ties", PRM(S(10, 40, 3)), P_NONE, 0, 1, b_argmax_ties, 0},
    {"conv2d 3x3 p1 groups 2, dw of 576 terms", PRM(S(4, 8, 12, 12), S(6, 4, 3, 3)), P_NONE, 0, 1, b_conv3x3, 1e-4f},
    {"conv2d bias, groups 4, 5x3 s21 p21", PRM(S(3, 8, 15, 13), S(8, 2, 5, 3), S(8)), P_NONE, 0, 1, b_conv_bias_g4, 1e-4f},
    {"conv2d depthwise x2, s2 p1", PRM(S(8, 6, 20, 19), S(12, 1, 3, 3)), P_NONE, 0, 1, b_conv_dw, 1e-4f},
    {"conv2d 1x1 stride 2", PRM(S(2, 5, 9, 8), S(7, 5, 1, 1)), P_NONE, 0, 1, b_conv_1x1_s2, 1e-4f},
    {"conv2d 2x1 s32, padding over kernel", PRM(S(2, 3, 7, 6), S(4, 3, 2, 1)), P_NONE, 0, 1, b_conv_wide_pad, 1e-4f},
    {"max_pool2d ties, padding", PRM(S(3, 4, 9, 10)), P_NONE, 0, 1, b_pool_ties, 0},
    {"max_pool2d ties, overlapping 3x2", PRM(S(2, 3, 11, 9)), P_NONE, 0, 1, b_pool_ties_overlap, 0},
    {"max_pool2d 3x3 s2 p1, 2-D grid", PRM(S(4, 16, 30, 31)), P_NONE, 0, 1, b_pool_k3s2, 0},
    {"max_pool2d with NaN", PRM(S(2, 3, 8, 6)), P_NONE, 0, 1, b_pool_nan, 0},
    {"nearest_upsample2d x3", PRM(S(3, 4, 10, 7)), P_NONE, 0, 1, b_upsample, 0},
    {"conv, relu, pool, upsample, conv", PRM(S(4, 3, 10, 10), S(8, 3, 3, 3), S(5, 8, 3, 3)), P_NONE, 0, 1,
     b_conv_pool_stack, 1e-4f},
    {"cross_entropy, 300 classes", PRM(S(9, 300)), {S(9), P_END}, -1, 302, b_xent, 1e-4f},
    {"cross_entropy mean, 40 rows", PRM(S(40, 50)), {S(40), P_END}, 0, 50, b_xent_mean, 1e-4f},
    {"cross_entropy mean, 50257 classes", PRM(S(3, 50257)), {S(3), P_END}, -1, 50258, b_xent_mean, 1e-4f},
    /* odd vocabularies: one class, seven, and every row the same target */
    {"cross_entropy mean, 1 class", PRM(S(5, 1)), {S(5), P_END}, 0, 1, b_xent_mean, 1e-4f},
    {"cross_entropy, 7 classes, one target for every row", PRM(S(33, 7)), {S(33), P_END}, 3, 4, b_xent, 1e-4f},
    {"cross_entropy mean, 50257 classes, one target for every row", PRM(S(40, 50257)), {S(40), P_END}, 50256, 50257,
     b_xent_mean, 1e-4f},
    {"nll_loss, 70 classes", PRM(S(6, 70)), {S(6), P_END}, -2, 70, b_nll, 1e-4f},
    {"layer_norm, 100 wide", PRM(S(37, 100), S(100), S(100)), P_NONE, 0, 1, b_ln, 1e-4f},
    {"layer_norm, 16400 rows (tall gain sums)", PRM(S(16400, 8), S(8), S(8)), P_NONE, 0, 1, b_ln, 1e-4f},
    {"rms_norm, 64 wide", PRM(S(2, 10, 64), S(64)), P_NONE, 0, 1, b_rms, 1e-4f},
    {"embedding, 50 x 33", PRM(S(50, 33)), {S(4, 10), P_END}, -1, 51, b_emb, 0},
    {"rope [3,17,24]", PRM(S(3, 17, 24)), P_NONE, 0, 1, b_rope, 0},
    {"dropout 1000", PRM(S(1000)), P_NONE, 0, 1, b_dropout, 0},
    {"randn [3,171]", PRM(S(3, 171)), P_NONE, 0, 1, b_randn, 0},
    {"categorical, 100 classes", PRM(S(20, 100)), P_NONE, 0, 1, b_categorical, 0},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* One case big enough that a flat kernel needs more than 65535 workgroups of
 * 256, so the real device splits its grid in two dimensions. */
static const par_case big_case = {"relu, 2-D grid (16.8M elements)", PRM(S(65535 * 256 + 3)), P_NONE, 0, 1, b_relu, 0};

/* The matmul cases under each tile configuration, with and without a split
 * K (the shapes that pick them on their own are too big for lavapipe); then
 * the k-slices written out as a GPU gets them (lavapipe gets loops), in the
 * small tiles and the first four cases only: lavapipe takes minutes to
 * compile the written-out large tiles. */
static void test_matmul_configs(bool verbose) {
    for (int tile = TG_WGSL_TILE_LARGE; tile <= TG_WGSL_TILE_SMALL; tile++)
        for (int split = 0; split <= 3; split += 3) {
            int warps = (tile + split / 3) % 2 ? TG_WGSL_WARPS_ROWS : TG_WGSL_WARPS_SQUARE; /* each tiling in both */
            tg_wgsl_force_forms(&(tg_wgsl_forms){.matmul_tile = tile, .matmul_split = split, .matmul_warps = warps});
            for (int i = 0; i < N_CASES; i++)
                if (strncmp(cases[i].name, "matmul", 6) == 0 || strncmp(cases[i].name, "attention", 9) == 0)
                    par_check(&cases[i], verbose);
        }
    tg_wgsl_force_forms(&(tg_wgsl_forms){.matmul_tile = TG_WGSL_TILE_SMALL, .matmul_unroll = TG_WGSL_ON,
                                         .matmul_warps = TG_WGSL_WARPS_SQUARE});
    for (int i = 0, n = 0; i < N_CASES && n < 4; i++)
        if (strncmp(cases[i].name, "matmul", 6) == 0) par_check(&cases[i], verbose), n++;
    tg_wgsl_force_forms(NULL);
    /* split by shape: tall K under few output tiles (the weight gradients) */
    static const par_case tall_k = {"matmul a^T, K=2048 split", {S(2048, 40), S(2048, 70), P_END}, P_NONE, 0, 1, b_mm_ta, 1e-4f};
    par_check(&tall_k, verbose);
}

/* Products with an epilogue that reads memory beside each element (bias and
 * relu, a residual; relu's gradient in the backward). */
static tg_tensor b_mm_relu(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_relu(tg_add(tg_matmul(p[0], p[1]), p[2]));
}
static tg_tensor b_mm_res(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_add(tg_matmul(p[0], p[1]), p[2]); }
static tg_tensor b_mm_over(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor r = tg_matmul(p[2], p[1]), sr = tg_sum(r, TG_ALL, false);
    return tg_add(tg_matmul(tg_add(tg_matmul(p[0], p[1]), r), p[2]), sr);
}

/* Bindings of the dumped kernel whose source holds `needle` (-1: none). */
static int bindings_of(const char *dir, const char *needle) {
    int n = -1;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) && n < 0;) {
        char path[600], line[4096], head[4096] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
        for (bool first = true; f && fgets(line, sizeof line, f); first = false) {
            if (first) snprintf(head, sizeof head, "%s", line);
            if (!strstr(line, needle)) continue;
            n = 0;
            for (const char *q = head; (q = strstr(q, "(arena ")); q++) n++;
            break;
        }
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}
/* Products with an epilogue, and one of B transposed with none; the
 * third's residual (another product, whose sum came before) dies at the
 * add, so the output is written over it: one binding for both. */
static const par_case epi_cases[4] = {
    {"matmul -> add -> relu", PRM(S(128, 48), S(48, 128), S(128)), P_NONE, 0, 1, b_mm_relu, 1e-4f},
    {"matmul -> add (a residual)", PRM(S(128, 32), S(32, 128), S(128, 128)), P_NONE, 0, 1, b_mm_res, 1e-4f},
    {"matmul -> add over its residual", PRM(S(128, 32), S(32, 128), S(128, 32)), P_NONE, 0, 1, b_mm_over, 1e-4f},
    {"matmul b^T", PRM(S(128, 32), S(128, 32)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
};

/* Case c in tile form `tile` with the tg_wgsl_forms field at offset
 * `field` set to each of values[0..n) (n <= 3) in turn: calls[f] kernels
 * of form values[f] hold `needle`, and every form gives the bits of the
 * first. */
static void forms_same_bits(const par_case *c, int tile, size_t field, const int *values, int n, const char *needle,
                            int *calls, const char *what) {
    size_t bytes[3];
    unsigned char *bits[3];
    for (int f = 0; f < n; f++) {
        tg_wgsl_forms forms = {.matmul_tile = tile};
        *(int *)((char *)&forms + field) = values[f];
        tg_wgsl_force_forms(&forms);
        bits[f] = par_check_bits(c, needle, &bytes[f], &calls[f]);
    }
    tg_wgsl_force_forms(NULL);
    for (int f = 0; f < n; f++)
        CHECK(bytes[0] > 0 && bytes[f] == bytes[0] && bits[f] && bits[0] && memcmp(bits[f], bits[0], bytes[0]) == 0,
              "%s, tiles %d: %s give other bits (%zu and %zu bytes)", c->name, tile, what, bytes[f], bytes[0]);
    for (int f = 0; f < n; f++) free(bits[f]);
}

/* The kernel holding `needle` of epi_cases[2] under `forms` has 3
 * bindings: its output over the residual, A and B. */
static void over_residual_bindings(const tg_wgsl_forms *forms, const char *needle, const char *what) {
    char dir[32];
    tg_wgsl_force_forms(forms);
    if (par_dump_start(dir)) {
        par_check(&epi_cases[2], false);
        int n = bindings_of(dir, needle);
        par_dump_end(dir);
        CHECK(n == 3, "%s, %s: the kernel has %d bindings, want 3 (its output over the residual, A, B)", epi_cases[2].name,
              what, n);
    }
    tg_wgsl_force_forms(NULL);
}

/* Products storing 4 columns at a time (st4, through a vec4 view of the
 * output's binding) give the bits of one store an element, and the
 * kernels do so, the output written over its residual too (the residual
 * read an element at a time from the vec4 view); each tile configuration,
 * and the product of B transposed, which the measured rule leaves to one
 * store an element. */
static void test_vec4_stores(bool verbose) {
    (void)verbose;
    for (int tile = TG_WGSL_TILE_LARGE; tile <= TG_WGSL_TILE_SMALL; tile++)
        for (int i = 0; i < 4; i++) {
            int calls[3];
            static const int forms[3] = {TG_WGSL_OFF, TG_WGSL_CHOOSE, TG_WGSL_ON};
            forms_same_bits(&epi_cases[i], tile, offsetof(tg_wgsl_forms, matmul_store4), forms, 3, "st4(i + ", calls,
                            "stores of 4");
            CHECK(calls[0] == 0 && calls[2] > 0 && (i == 3 ? calls[1] == 0 : calls[1] > 0),
                  "%s, tiles %d: %d, %d and %d stores of 4 (none, by rule, everywhere)", epi_cases[i].name, tile, calls[0],
                  calls[1], calls[2]);
        }
    over_residual_bindings(&(tg_wgsl_forms){.matmul_store4 = TG_WGSL_ON}, "epilogue(i + 3u", "4 columns a store");
}

/* Products loading their operands 4 elements at a time (ld4, through vec4
 * views of the operands' bindings) give the bits of one load an element,
 * and the kernels do so: plain, each operand transposed, batched, each
 * tile configuration. */
static void test_vec4_loads(bool verbose) {
    (void)verbose;
    static const par_case mm4[4] = { /* multiples of every tile */
        {"matmul [128,32]x[32,128]", PRM(S(128, 32), S(32, 128)), P_NONE, 0, 1, b_mm, 1e-4f},
        {"matmul a^T [32,128]x[32,128]", PRM(S(32, 128), S(32, 128)), P_NONE, 0, 1, b_mm_ta, 1e-4f},
        {"matmul b^T [128,32]x[128,32]", PRM(S(128, 32), S(128, 32)), P_NONE, 0, 1, b_mm_tb, 1e-4f},
        {"matmul a^T b^T batched", PRM(S(2, 32, 128), S(2, 128, 32)), P_NONE, 0, 1, b_mm_tab, 1e-4f},
    };
    static const char *const needle[2] = {"pa0 = ld0v", "pb0 = ld1v"};
    for (int tile = TG_WGSL_TILE_LARGE; tile <= TG_WGSL_TILE_SMALL; tile++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 2; j++) {
                int calls[2];
                static const int forms[2] = {TG_WGSL_OFF, TG_WGSL_ON};
                forms_same_bits(&mm4[i], tile, offsetof(tg_wgsl_forms, matmul_load4), forms, 2, needle[j], calls,
                                "loads of 4");
                CHECK(calls[0] == 0 && calls[1] > 0, "%s, tiles %d: %d and %d kernels load %s 4 at a time (off, on)", mm4[i].name,
                      tile, calls[0], calls[1], j ? "B" : "A");
            }
    /* the rule (too big to run here): where a workgroup walks K of 2048 or
     * more, or B is transposed and no epilogue follows; not K 1536 nor a
     * weight gradient's split K of 16384 */
    tg_graph *g = tg_graph_new(NULL);
    tg_tensor x = tg_input_new(g, "x", TG_F32, S(16384, 2048)), w = tg_input_new(g, "w", TG_F32, S(2048, 384));
    tg_tensor h = tg_input_new(g, "h", TG_F32, S(16384, 1536)), v = tg_input_new(g, "v", TG_F32, S(1536, 384));
    tg_tensor d = tg_input_new(g, "d", TG_F32, S(16384, 384)), u = tg_input_new(g, "u", TG_F32, S(384, 1536));
    tg_tensor y[4] = {tg_matmul(x, w), tg_matmul(h, v), tg_matmul_t(h, d, true, false), tg_matmul_t(h, u, false, true)};
    static const char *what[4] = {"K 2048", "K 1536", "K 16384, split", "K 1536, B transposed"};
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < 2; j++)
            for (int e = 0; e < 2; e++) {
                bool want = c == 0 || (c == 3 && !e), got = tg_tensor_ok(y[c]) && tg_wgsl_matmul_vec4_load(g, y[c].id, j, e);
                CHECK(got == want, "product of %s%s: operand %d loads 4 at a time: %d", what[c], e ? ", an epilogue" : "", j, got);
            }
    tg_graph_free(g);
}

/* ---- row kernels in each form, column sums in one and two phases ---- */

static tg_tensor b_sm_last(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_softmax(p[0], -1); }
static tg_tensor b_sm_mid(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_softmax(p[0], 1); }
/* a sum with producers (add, scale: nothing keeps their values for the
 * backward) and an epilogue (scale, shift) that the planner fuses into it */
static tg_tensor b_sum_fused(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_add_s(tg_mul_s(tg_sum(tg_mul_s(tg_add(p[0], p[1]), 0.5f), 0, false), 3.0f), 1.0f);
}
static tg_tensor b_sum_lead(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum_axes(p[0], S(0, 1), true); }
/* a linear layer: its bias gradient is a column sum of the output's gradient */
static tg_tensor b_linear(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_gelu(tg_add(tg_matmul(p[0], p[1]), p[2]));
}

/* Every row op (forward and backward: layer/RMS norm, norm_stats, norm_dx,
 * softmax along the last and a middle axis, log_softmax, the causal softmax,
 * cross-entropy) in every form of rows.c (loops or registers, workgroup
 * trees or, where the device has them, subgroup sums), at row lengths around the
 * thresholds: 1 and 31 (a thread per row), 33 (a workgroup of 64, one
 * element each in registers), 384 (6, all full), 385 (7, the last partial)
 * and 1000 (past the register limit: loops either way). A row per subgroup
 * (lavapipe's subgroups are all 8 wide) at 33 (5 each, the last partial)
 * and 128 (16, the most), over 2 to 12 rows: 1 to 4 rows per workgroup.
 * (In the subgroup forms the layer norm's forward takes a row per subgroup
 * where one fits, as by default; the last check asks for its workgroup.) */
static void test_row_forms(bool verbose) {
    static const int64_t lens[] = {1, 31, 33, 128, 384, 385, 1000};
    tg_webgpu_adapter_info info;
    CHECK_OK(tg_webgpu_info(&info));
    bool sg = strstr(info.features, "subgroups") != NULL;
    for (int form = 0; form < 6; form++) {
        if (form >= 2 && !sg) break;
        if (form == 4) continue; /* loops, a row per subgroup: needs registers, so form 2 again */
        static const int reduce[3] = {TG_WGSL_REDUCE_TREE, TG_WGSL_REDUCE_SUBGROUP, TG_WGSL_REDUCE_ROW_PER_SUBGROUP};
        tg_wgsl_force_forms(&(tg_wgsl_forms){.rows = form & 1 ? TG_WGSL_ROWS_REGISTERS : TG_WGSL_ROWS_LOOP,
                                             .reduce = reduce[form >> 1]});
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t A = lens[li];
            if (form != 1 && A <= 32) continue; /* a thread per row: the same kernel in every form */
            if ((A == 128) != (form == 5) && A != 33) continue;
            char name[8][96];
            const char *what[8] = {"layer_norm", "rms_norm", "softmax last", "softmax middle", "log_softmax", "softmax_causal",
                                   "cross_entropy", "log_softmax middle"};
            static const char *const forms[6] = {"loops, tree", "registers, tree", "loops, subgroups", "registers, subgroups", "",
                                                 "registers, a row per subgroup"};
            for (int q = 0; q < 8; q++) snprintf(name[q], sizeof name[q], "%s, rows of %lld, %s", what[q], (long long)A,
                                                  forms[form]);
            const par_case cs[8] = {
                {name[0], PRM(S(5, A), S(A), S(A)), P_NONE, 0, 1, b_ln, 1e-4f},
                {name[1], PRM(S(2, 3, A), S(A)), P_NONE, 0, 1, b_rms, 1e-4f},
                {name[2], PRM(S(4, A)), P_NONE, 0, 1, b_sm_last, 1e-4f},
                {name[3], PRM(S(2, A, 3)), P_NONE, 0, 1, b_sm_mid, 1e-4f},
                {name[4], PRM(S(3, A)), P_NONE, 0, 1, b_lsm_last, 1e-4f},
                {name[5], PRM(S(2, A < 400 ? A : 40, A)), P_NONE, 0, 1, b_smc, 1e-4f},
                {name[6], PRM(S(6, A)), {S(6), P_END}, -1, (int)A + 1, b_xent, 1e-4f},
                {name[7], PRM(S(2, A, 2)), P_NONE, 0, 1, b_lsm_mid, 1e-4f},
            };
            for (int q = 0; q < 8; q++) par_check(&cs[q], verbose);
        }
    }
    tg_wgsl_force_forms(NULL);
    /* Larger workgroups per row (tg_wgsl_forms.row_workgroup), registers and subgroup
     * sums where the device has them: rows of 384 in 256 (2 each, the
     * second partial) and in 512 (1 each, a quarter of the workgroup idle). */
    for (uint32_t wg = 256; wg <= 512 && wg <= info.max_compute_invocations_per_workgroup; wg *= 2) {
        tg_wgsl_force_forms(&(tg_wgsl_forms){.row_workgroup = wg});
        char name[2][96];
        snprintf(name[0], sizeof name[0], "layer_norm, rows of 384, workgroups of %u", wg);
        snprintf(name[1], sizeof name[1], "softmax last, rows of 384, workgroups of %u", wg);
        const par_case cs[2] = {{name[0], PRM(S(5, 384), S(384), S(384)), P_NONE, 0, 1, b_ln, 1e-4f},
                                {name[1], PRM(S(4, 384)), P_NONE, 0, 1, b_sm_last, 1e-4f}};
        for (int q = 0; q < 2; q++) par_check(&cs[q], verbose);
        /* a row per subgroup (rows of 100 fit one of lavapipe's), wg / S rows
         * per workgroup or as many as divide the rows: the 64 rows' kernels
         * in workgroups of wg */
        tg_wgsl_force_forms(&(tg_wgsl_forms){.row_workgroup = wg, .reduce = TG_WGSL_REDUCE_ROW_PER_SUBGROUP});
        snprintf(name[0], sizeof name[0], "layer_norm, 64 rows of 100, a subgroup each, workgroups of %u", wg);
        snprintf(name[1], sizeof name[1], "layer_norm, 6 rows of 100, a subgroup each, workgroups of %u", wg);
        const par_case sg[2] = {{name[0], PRM(S(64, 100), S(100), S(100)), P_NONE, 0, 1, b_ln, 1e-4f},
                                {name[1], PRM(S(6, 100), S(100), S(100)), P_NONE, 0, 1, b_ln, 1e-4f}};
        uint32_t S = info.subgroup_min_size;
        char dir[32], rows[64];
        snprintf(rows, sizeof rows, "let l = gid * %uu + lid / %uu;", S ? wg / S : 0, S);
        bool dump = S >= 4 && S == info.subgroup_max_size && par_dump_start(dir);
        par_check(&sg[0], verbose);
        if (dump) {
            int n = par_dump_count(dir, rows, NULL);
            par_dump_end(dir);
            CHECK(n >= 1, "%s: no kernel walks %u rows a workgroup (want '%s')", sg[0].name, wg / S, rows);
        }
        par_check(&sg[1], verbose);
    }
    tg_wgsl_force_forms(NULL);
    /* The layer norm's forward, every form by default: a row per subgroup
     * in workgroups of 256 (rows.c), or a workgroup per row when asked. */
    uint32_t S = info.subgroup_min_size;
    if (!sg || S < 4 || S != info.subgroup_max_size || 256 / S > 64) return;
    for (int nf = -1; nf <= 0; nf++) {
        tg_wgsl_force_forms(&(tg_wgsl_forms){.norm = nf < 0 ? TG_WGSL_CHOOSE : TG_WGSL_NORM_WORKGROUP});
        char name[96], dir[32], rows[64];
        snprintf(name, sizeof name, "layer_norm, 64 rows of 100, %s", nf < 0 ? "the default form" : "a workgroup per row");
        const par_case c = {name, PRM(S(64, 100), S(100), S(100)), P_NONE, 0, 1, b_ln, 1e-4f};
        snprintf(rows, sizeof rows, "let l = gid * %uu + lid / %uu;", 256 / S, S);
        bool dump = par_dump_start(dir);
        par_check(&c, verbose);
        if (dump) {
            int n = par_dump_count(dir, rows, NULL);
            par_dump_end(dir);
            CHECK(nf < 0 ? n >= 1 : n == 0, "%s: %d kernels walk %u rows a workgroup ('%s')", name, n, 256 / S, rows);
        }
    }
    tg_wgsl_force_forms(NULL);
}

/* Column sums (bias and gain gradients, sums over leading axes, the
 * embedding and conv weight gradients) with their rows split into chunks:
 * 3 and 7 chunks forced at small sizes (uneven chunks, chunks of one row),
 * then by shape at sizes that split on their own; each also with 8, 32 and
 * 128 columns per workgroup. */
static void test_colsum_split(bool verbose) {
    static const par_case forced[] = {
        {"split sum first axis", PRM(S(100, 37)), P_NONE, 0, 1, b_sum_first, 1e-4f},
        {"split sum leading axes", PRM(S(4, 25, 40)), P_NONE, 0, 1, b_sum_lead, 1e-4f},
        {"split sum with producer and epilogue", PRM(S(90, 20), S(90, 20)), P_NONE, 0, 1, b_sum_fused, 1e-4f},
        {"split linear bias gradient", PRM(S(70, 16), S(16, 24), S(24)), P_NONE, 0, 1, b_linear, 1e-4f},
        {"split layer_norm gain sums", PRM(S(50, 20), S(20), S(20)), P_NONE, 0, 1, b_ln, 1e-4f},
        {"split i32 sum", P_NONE, {S(40, 3), P_END}, -1000000000, 1000000000, b_isum, 0},
        {"split embedding gradient", PRM(S(7, 5)), {S(6, 10), P_END}, -1, 8, b_emb, 0},
        {"split conv2d dw of 576 terms", PRM(S(4, 8, 12, 12), S(6, 4, 3, 3)), P_NONE, 0, 1, b_conv3x3, 1e-4f},
    };
    static const int splits[] = {3, 7}, widths[] = {8, 32, 128};
    for (int wi = 0; wi < 3; wi++)
        for (int si = 0; si < 2; si++) {
            tg_wgsl_force_forms(&(tg_wgsl_forms){.colsum_width = widths[wi], .colsum_chunks = splits[si]});
            for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) par_check(&forced[i], verbose);
        }
    tg_wgsl_force_forms(NULL);
    /* by shape: over 4096 rows and few columns */
    static const par_case tall[] = {
        {"sum first axis, 4100 rows (split by shape)", PRM(S(4100, 40)), P_NONE, 0, 1, b_sum_first, 1e-4f},
        {"linear, 5000 rows (split bias gradient)", PRM(S(5000, 8), S(8, 24), S(24)), P_NONE, 0, 1, b_linear, 1e-4f},
        {"layer_norm gain sums, 4200 x 200", PRM(S(4200, 200), S(200), S(200)), P_NONE, 0, 1, b_ln, 1e-4f},
    };
    for (int wi = -1; wi < 3; wi++) { /* by shape, then each width */
        tg_wgsl_force_forms(&(tg_wgsl_forms){.colsum_width = wi < 0 ? 0 : widths[wi]});
        for (size_t i = 0; i < sizeof tall / sizeof tall[0]; i++) par_check(&tall[i], verbose);
    }
    tg_wgsl_force_forms(NULL);
    int64_t R = 4100, C = 40;
    CHECK(tg_kernel_colsum_chunks(R, C) > 1, "a sum of %lld x %lld should split", (long long)R, (long long)C);
    CHECK(tg_kernel_colsum_chunks(1024, 64) == 1, "a sum of 1024 rows should not split");
    /* gpt_small's bias sums take 32 columns a workgroup (12 of them, 32
     * chunks to fill the GPU); with 8 (48 workgroups) they would take 8 */
    CHECK(tg_kernel_colsum_chunks(16384, 384) == 32, "a sum of 16384 x 384 in %d chunks, not 32",
          tg_kernel_colsum_chunks(16384, 384));
}

/* How many of case c's WebGPU kernels hold `needle` (-1: it did not run). */
static int kernels_with(const par_case *c, const char *needle) {
    par_user u = {c, NULL, 0, {NULL, NULL}};
    par_make_ints(c, &u);
    par_run r;
    char dir[32];
    int n = -1;
    if (par_dump_start(dir)) {
        if (par_open(c, &u, TG_BACKEND_WEBGPU, &r) == TG_OK) n = par_dump_count(dir, needle, NULL);
        par_close(&r);
        par_dump_end(dir);
    }
    par_user_free(&u);
    return n;
}

/* The embedding gradient by warps (a private table per warp in workgroup
 * memory): by shape over 4171 rows (two phases, uneven chunks, the warps'
 * shorter last batches, indices outside the table), forced over 1, 2 and
 * 9 chunks at small sizes, then in the sorted form (scatter.c) forced
 * and where the table is too big for workgroup memory (300 rows of 128
 * bytes a warp on lavapipe's 32 KiB; a GPU's 48 KiB takes it by warps). */
static void test_embedding_grad(bool verbose) {
    static const par_case by_shape[] = {
        {"embedding gradient by warps, 65 x 40 over 4171 rows", PRM(S(65, 40)), {S(43, 97), P_END}, -2, 67, b_emb, 1e-5f},
        {"embedding gradient by warps, 7 x 5 over 60 rows", PRM(S(7, 5)), {S(6, 10), P_END}, -1, 8, b_emb, 0},
        {"embedding gradient, 300 x 33", PRM(S(300, 33)), {S(5, 20), P_END}, -1, 301, b_emb, 0},
    };
    for (size_t i = 0; i < sizeof by_shape / sizeof by_shape[0]; i++) par_check(&by_shape[i], verbose);
    static const int forced[] = {1, 2, 9, TG_WGSL_OFF};
    for (int f = 0; f < 4; f++) {
        tg_wgsl_force_forms(&(tg_wgsl_forms){.embedding_grad = forced[f]});
        for (size_t i = 0; i < 2; i++) par_check(&by_shape[i], verbose);
    }
    tg_wgsl_force_forms(NULL);
    /* by shape, the warps form (its private tables) in both cases (lavapipe's 32 KiB hold 65 x 32 floats) */
    for (size_t i = 0; i < 2; i++)
        CHECK(kernels_with(&by_shape[i], "var<workgroup> acc:") >= 1, "%s: not in the warps form", by_shape[i].name);
}

/* The sorted scatter-adds (src/wgsl/scatter.c) against the CPU: an
 * embedding gradient over tables of 1 (forced: the warps form takes it
 * by shape; test_embedding_grad forces 7) and 50257 rows, indices out of
 * range, many repeated indices, one index for every row; the same bits in
 * two runs; and
 * take_along_axis's gradient over 20 and 300 indices a line. */
static void test_scatter_sorted(bool verbose) {
    static const par_case forced[] = {
        {"sorted embedding gradient, 1 x 6", PRM(S(1, 6)), {S(5, 9), P_END}, -1, 2, b_emb, 0},
    };
    static const par_case by_shape[] = {
        {"embedding gradient, 50257 x 3", PRM(S(50257, 3)), {S(40, 50), P_END}, -2, 50259, b_emb, 0},
        {"embedding gradient, 50257 x 5, 4 indices", PRM(S(50257, 5)), {S(30, 41), P_END}, 100, 104, b_emb, 0},
        {"embedding gradient, 50257 x 2, one index", PRM(S(50257, 2)), {S(3, 300), P_END}, 7, 8, b_emb, 0},
    };
    tg_wgsl_force_forms(&(tg_wgsl_forms){.embedding_grad = TG_WGSL_OFF});
    for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) {
        par_check(&forced[i], verbose);
        CHECK(kernels_with(&forced[i], "let s_order") >= 1, "%s: not sorted", forced[i].name);
    }
    tg_wgsl_force_forms(NULL);
    for (size_t i = 0; i < sizeof by_shape / sizeof by_shape[0]; i++) { /* each against the CPU, twice */
        size_t n1, n2;
        int calls1, calls2;
        unsigned char *b1 = par_check_bits(&by_shape[i], "let s_order", &n1, &calls1);
        unsigned char *b2 = par_check_bits(&by_shape[i], "let s_order", &n2, &calls2);
        CHECK(calls1 >= 1, "%s: not sorted (%d kernels)", by_shape[i].name, calls1);
        CHECK(n1 > 0 && n1 == n2 && memcmp(b1, b2, n1) == 0, "%s: two runs differ", by_shape[i].name);
        free(b1), free(b2);
    }
    static const par_case take[] = {
        {"take_along_axis gradient, 20 indices a line", PRM(S(3, 7, 4)), {S(3, 20, 4), P_END}, -8, 9, b_take_mid, 0},
        {"take_along_axis gradient, 300 indices into 1000", PRM(S(2, 1000)), {S(2, 300), P_END}, -3, 40, b_take_last, 0},
    };
    for (size_t i = 0; i < sizeof take / sizeof take[0]; i++) {
        par_check(&take[i], verbose);
        CHECK(kernels_with(&take[i], "let s_order") >= 1, "%s: not sorted", take[i].name);
    }
}

/* Every op the CPU can run (other than views) has a WGSL emitter: both
 * tables expand from ops.def, this catches a family the WGSL side maps to
 * nothing. */
static void test_emitter_table(void) {
    for (int op = 0; op < TG_OP_COUNT; op++) {
        const tg_opinfo *o = &tg_ops[op];
        if (!tg_cpu_kernels[op] || (o->flags & TG_OPF_VIEW)) continue;
        CHECK(tg_wgsl_ops[op].emit != NULL, "op '%s' has a CPU kernel but no WGSL emitter", o->name);
    }
}

static void test_ops(bool verbose) {
    for (int i = 0; i < N_CASES; i++) par_check(&cases[i], verbose);
}

/* Every row of the shared op-case table (tests/op_cases.h), so an op added
 * there is checked on both backends with no change here. Tolerance 1e-4
 * (its cases mix exp, log and sums). */
static void test_op_table(bool verbose) {
    for (int ci = 0; ci < N_OP_CASES; ci++) {
        const op_case *c = &op_cases[ci];
        case_run rc, rg;
        tg_status sc = case_open(&rc, c, TG_BACKEND_CPU, 101 + (uint64_t)ci);
        tg_status sg = case_open(&rg, c, TG_BACKEND_WEBGPU, 101 + (uint64_t)ci);
        CHECK(sc == TG_OK, "%s: cpu: %s", c->name, sc == TG_OK ? "" : tg_last_error());
        CHECK(sg == TG_OK, "%s: webgpu: %s", c->name, sg == TG_OK ? "" : tg_last_error());
        if (sc == TG_OK && sg == TG_OK) {
            float lc = case_eval(&rc), lg = case_eval(&rg);
            CHECK(fabsf(lg - lc) <= 1e-4f * fmaxf(1.0f, fabsf(lc)), "%s: loss %.9g on webgpu, %.9g on cpu", c->name, lg, lc);
            char what[64];
            snprintf(what, sizeof what, "table: %s", c->name);
            par_compare(what, rg.s, rc.s, "x", c->shape, c->no_grad ? 0 : c->n, 1e-4, verbose);
        }
        case_close(&rc);
        case_close(&rg);
    }
}

/* The same cases with at most 16 workgroups per grid dimension, so every
 * kernel beyond 16 workgroups runs on a 2-D grid (cases whose params need
 * more than 16 x 16 groups of 256 are left out). */
static void test_ops_2d_grid(bool verbose) {
    tg_webgpu_adapter_info info;
    CHECK_OK(tg_webgpu_info(&info));
    tg_wgsl_limits l = {info.max_storage_buffer_binding_size, info.max_buffer_size,
                        info.max_storage_buffers_per_shader_stage, info.max_compute_workgroup_storage_size,
                        info.max_compute_invocations_per_workgroup, 16, info.min_storage_buffer_offset_alignment, false, false, 0, 0, false, -1};
    tg_wgpu_test_override_limits(&l);
    for (int i = 0; i < N_CASES; i++) {
        bool fits = true;
        for (int k = 0; k < PAR_MAX && cases[i].params[k].ndim >= 0; k++) fits &= tg_shape_numel(cases[i].params[k]) <= 16 * 16 * 256;
        if (fits) par_check(&cases[i], verbose);
    }
    tg_wgpu_test_override_limits(NULL);
}

#include "webgpu_misc.h"

/* --bits FILE [--poison | --read-write]: only the op cases of this file
 * (not the shared table, to keep the doubled run short), with the WebGPU
 * results' bytes written to FILE and the guards' state (bounds clamps,
 * workgroup zeroing) printed; with --poison every kernel first fills its
 * workgroup memory with NaN bits, with --read-write it declares no binding
 * read-only (tg_wgsl_forms). tests/test_webgpu_robust.sh runs it in each
 * way, and with and without TG_WEBGPU=robust, and compares the files. */
static int robust_bits(const char *path, const char *form) {
    if (form && strcmp(form, "--poison") && strcmp(form, "--read-write")) {
        printf("test_webgpu: --bits FILE takes --poison or --read-write, not '%s'\n", form);
        return 2;
    }
    tg_wgsl_force_forms(&(tg_wgsl_forms){.poison = form && strcmp(form, "--poison") == 0,
                                         .read_write = form && strcmp(form, "--read-write") == 0});
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        printf("test_webgpu: skipped: %s\n", tg_last_error());
        return check_summary("test_webgpu");
    }
    par_bits = fopen(path, "wb");
    CHECK(par_bits != NULL, "cannot write %s", path);
    if (!par_bits) return check_summary("test_webgpu");
    printf("guards: %s\n", info.robust ? "on" : "off"); /* bounds clamps and workgroup zeroing */
    test_ops(false);
    fclose(par_bits);
    return check_summary("test_webgpu");
}

/* The allow_unsafe_apis probe names what it found and stays inside any
 * buffer (ASan sees an overrun), answering the subgroup-matrix question. */
static void test_unsafe_probe(void) {
    char buf[1024], tiny[12];
    CHECK_OK(tg_webgpu_unsafe_features(buf, sizeof buf));
    CHECK(strstr(buf, "; subgroup matrices: ") != NULL, "the probe says nothing of subgroup matrices: '%s'", buf);
    memset(tiny, 'x', sizeof tiny);
    CHECK_OK(tg_webgpu_unsafe_features(tiny, 8));
    CHECK(strlen(tiny) < 8 && tiny[8] == 'x', "the probe wrote past its 8 bytes: '%.12s'", tiny);
    CHECK(tg_webgpu_unsafe_features(NULL, 8) == TG_ERR_ARG, "no buffer is accepted");
}

int main(int argc, char **argv) {
    bool verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    if (argc > 2 && strcmp(argv[1], "--bits") == 0) return robust_bits(argv[2], argc > 3 ? argv[3] : NULL);
    if (argc > 1 && strcmp(argv[1], "--matmul") == 0) { /* the matmul cases under every tile configuration alone */
        if (tg_webgpu_info(&(tg_webgpu_adapter_info){0}) == TG_OK) test_matmul_configs(true), test_vec4_stores(true), test_vec4_loads(true);
        return check_summary("test_webgpu");
    }
    if (argc > 1 && strcmp(argv[1], "--rows") == 0) { /* the row-form and column-split cases alone */
        if (tg_webgpu_info(&(tg_webgpu_adapter_info){0}) == TG_OK)
            test_row_forms(argc > 2), test_colsum_split(argc > 2), test_embedding_grad(argc > 2), test_scatter_sorted(argc > 2);
        return check_summary("test_webgpu");
    }
    /* --rest: all but the two parts above (tests/run.sh runs the three side by side) */
    bool rest = argc > 1 && strcmp(argv[1], "--rest") == 0;
    test_emitter_table();
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        check_webgpu_missing("test_webgpu");
        return check_summary("test_webgpu");
    }
    printf("test_webgpu: adapter %s (%s, %s)\n", info.name, info.backend, info.type);
    test_adapter_check();
    test_unsafe_probe();
    test_compile_errors();
    test_limits();
    test_prng();
    test_ops(verbose);
    test_op_table(verbose);
    test_ops_2d_grid(verbose);
    if (!rest) test_matmul_configs(verbose), test_vec4_stores(verbose), test_vec4_loads(verbose), test_row_forms(verbose), test_colsum_split(verbose), test_embedding_grad(verbose), test_scatter_sorted(verbose);
    par_check(&big_case, verbose);
    test_training(verbose);
    test_forward_sessions();
    return check_summary("test_webgpu");
}
