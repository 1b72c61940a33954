/* libFuzzer: the graph API as a hostile caller uses it, through the stack
 * machine of fuzz_prog.h: the network ops (norms, embeddings, losses,
 * attention's pieces, sampling), selection, splitting and the elementwise
 * math, with dtypes mixed (indices cast from anything, argmax results fed
 * on) and scalars from edge values (NaN, infinities, -0). fuzz_graph.c
 * covers shapes, layout, reductions and the convolution family. */
#include "fuzz_prog.h"

static tg_tensor nn_unary(tg_tensor x, unsigned k, float s) {
    switch (k % 16) {
    case 0: return tg_gelu(x);
    case 1: return tg_silu(x);
    case 2: return tg_tanh(x);
    case 3: return tg_sigmoid(x);
    case 4: return tg_softplus(x);
    case 5: return tg_erf(x);
    case 6: return tg_log1p(x);
    case 7: return tg_expm1(x);
    case 8: return tg_sqrt(x);
    case 9: return tg_rsqrt(x);
    case 10: return tg_abs(x);
    case 11: return tg_square(x);
    case 12: return tg_sin(x);
    case 13: return tg_leaky_relu(x, s);
    case 14: return tg_hardtanh(x);
    default: return tg_stop_gradient(x);
    }
}

static tg_tensor nn_binary(tg_tensor a, tg_tensor b, unsigned k, float s) {
    switch (k % 10) {
    case 0: return tg_mse(a, b);
    case 1: return tg_div(a, b);
    case 2: return tg_sub(a, b);
    case 3: return tg_mul(a, b);
    case 4: return tg_min(a, b);
    case 5: return tg_max(a, b);
    case 6: return tg_rdiv_s(s, a);
    case 7: return tg_where(tg_less(a, b), a, b);
    case 8: return tg_where(tg_greater_s(a, s), b, a);
    default: return tg_clamp(a, s, -s);
    }
}

static void nn_step(tg_graph *g, prog *q, tg_tensor *st, int *sp) {
    switch (byte(q) % 33) {
    case 0: PUSH(tg_reshape(TOP, shape(q))); break;
    case 1: PUSH(tg_use(g, q->w)); break;
    case 2: PUSH(tg_full(g, shape(q), scalar(q))); break;
    case 3: PUSH(tg_layer_norm(TOP, SECOND, THIRD, scalar(q))); break;
    case 4: PUSH(tg_rms_norm(TOP, SECOND, scalar(q))); break;
    case 5: PUSH(tg_embedding(TOP, tg_cast(SECOND, TG_I32))); break;
    case 6: PUSH(tg_cross_entropy(TOP, tg_cast(SECOND, TG_I32), (tg_reduction)(byte(q) % 4))); break;
    case 7: {
        int axis = (int)dim(q);
        PUSH(tg_nll_loss(tg_log_softmax(TOP, axis), tg_cast(SECOND, TG_I32), (tg_reduction)(byte(q) % 4)));
    } break;
    case 8: PUSH(byte(q) & 1 ? tg_softmax_causal(TOP) : tg_softmax_causal_axis(TOP, (int)dim(q))); break;
    case 9: PUSH(tg_where_causal(TOP, scalar(q))); break;
    case 10: PUSH(tg_split_heads(TOP, dim(q))); break;
    case 11: PUSH(tg_merge_heads(TOP)); break;
    case 12: PUSH(tg_rope(TOP, scalar(q))); break;
    case 13: PUSH(tg_dropout(TOP, scalar(q))); break;
    case 14: PUSH(tg_take_along_axis(TOP, tg_cast(SECOND, TG_I32), (int)dim(q))); break;
    case 15: {
        int axis = (int)dim(q);
        PUSH(byte(q) & 1 ? tg_argmax(TOP, axis, byte(q) & 1) : tg_argmin(TOP, axis, byte(q) & 1));
    } break;
    case 16: {
        int axis = (int)dim(q);
        PUSH(byte(q) & 1 ? tg_amax(TOP, axis, byte(q) & 1) : tg_amin(TOP, axis, byte(q) & 1));
    } break;
    case 17: {
        tg_tensor two[2] = {TOP, SECOND};
        PUSH(tg_stack(two, 1 + (int)(byte(q) % 2), (int)dim(q)));
    } break;
    case 18: {
        int64_t sizes[2] = {dim(q), dim(q)};
        tg_tensor out[2] = {{g, -1}, {g, -1}};
        tg_split(TOP, (int)dim(q), sizes, 1 + (int)(byte(q) % 2), out);
        PUSH(out[0]);
        PUSH(out[1]);
    } break;
    case 19: {
        int a = (int)dim(q);
        PUSH(tg_swap_axes(TOP, a, (int)dim(q)));
    } break;
    case 20: {
        unsigned k = byte(q);
        PUSH(nn_unary(TOP, k, scalar(q)));
    } break;
    case 21: {
        unsigned k = byte(q);
        PUSH(nn_binary(TOP, SECOND, k, scalar(q)));
    } break;
    case 22: {
        unsigned b = byte(q);
        PUSH(tg_matmul_t(TOP, SECOND, b & 1, b & 2));
    } break;
    case 23: PUSH(tg_sum_to_shape(TOP, shape(q))); break;
    case 24: {
        int64_t depth = dim(q);
        PUSH(tg_one_hot_dt(tg_cast(TOP, TG_I32), depth, (tg_dtype)(byte(q) % 4)));
    } break;
    case 25: PUSH(byte(q) & 1 ? tg_categorical(TOP) : tg_categorical_axis(TOP, (int)dim(q))); break;
    case 26: PUSH(tg_randn(g, shape(q))); break;
    case 27: {
        int sh = (int)dim(q), sw = (int)dim(q), ph = (int)dim(q), pw = (int)dim(q), groups = (int)dim(q);
        PUSH(tg_conv2d_bias(TOP, SECOND, THIRD, sh, sw, ph, pw, groups));
    } break;
    case 28: {
        int kh = (int)dim(q), kw = (int)dim(q), sh = (int)dim(q), sw = (int)dim(q), ph = (int)dim(q);
        PUSH(tg_max_pool2d_hw(TOP, kh, kw, sh, sw, ph, (int)dim(q)));
    } break;
    case 29: {
        int64_t n = dim(q);
        PUSH(tg_arange(g, n, (tg_dtype)(byte(q) % 4)));
    } break;
    case 30: PUSH(tg_cast(TOP, (tg_dtype)(byte(q) % 4))); break;
    case 31: {
        tg_tensor idx[2] = {TOP, SECOND};
        PUSH(idx[byte(q) & 1]); /* a duplicate: one value used twice */
    } break;
    case 32: POP(); break;
    }
}

static tg_tensor nn_run(tg_graph *g, void *u) { return program(g, u, nn_step); }

#ifndef FUZZ_NO_ENTRY /* tests/test_webgpu_programs.c runs the programs on WebGPU */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_program("fuzz_graph_nn", data, size, nn_run); }
#endif
