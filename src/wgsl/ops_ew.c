/* Elementwise WGSL kernels: one thread per output element. Each matches its
 * CPU kernel in src/cpu/kernels_ew.c / kernels_misc.c, including the integer
 * edge cases (floor division, 0 for /0, wrapping i32 arithmetic, saturating
 * f32 -> i32 casts) and bool stored as u32 0/1. */
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "../optim/optim.h"
#include "../optim/update.h"

/* const: y [...] of one value (a fill, run once at compile), or literal
 * values uploaded as they are. */
bool tg_wgsl_const(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t N = tg_ir_numel(n);
    if (n->data) {
        k->spec->upload = n->data;
        k->spec->upload_bytes = N * 4;
        return true;
    }
    if (!tg_kernel_flat(k, N)) return false;
    char f[48];
    if (n->dtype == TG_F32) tg_source_printf(&k->source, "    st(i, %s);\n", tg_kernel_f32(n->at.fill.value, f));
    else tg_source_printf(&k->source, "    st(i, %s(%s));\n", tg_kernel_type(n->dtype), tg_kernel_i32(tg_ir_f2i(n->at.fill.value), f));
    tg_kernel_end(k);
    return true;
}

/* arange: [n] of 0, 1, ..., n-1 as f32 or i32 */
bool tg_wgsl_arange(wgsl_kernel *k) {
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    st(i, %s(i));\n", tg_kernel_type(k->n->dtype));
    tg_kernel_end(k);
    return true;
}

static const char *idiv_fn = /* floor division, 0 for b == 0 (as cpu idiv) */
    "fn idiv(a: i32, b: i32) -> i32 {\n"
    "    if (b == 0) { return 0; }\n"
    "    let q = a / b;\n"
    "    if (q * b != a && ((a < 0) != (b < 0))) { return q - 1; }\n"
    "    return q;\n"
    "}\n";

/* add/sub/mul/div/less/greater: (a [...], b [...]) -> y [the broadcast
 * shape], NumPy broadcasting, f32 or i32 operands (bool out for less/greater). */
bool tg_wgsl_binary(wgsl_kernel *k) {
    char ix[2][KERNEL_EXPR_LEN];
    tg_kernel_bcast_maps(k, 2, ix);
    bool i32 = tg_kernel_in(k, 0)->dtype == TG_I32;
    const char *e = NULL;
    switch (k->n->op) {
    case TG_OP_ADD: e = "a + b"; break;
    case TG_OP_SUB: e = "a - b"; break;
    case TG_OP_MUL: e = "a * b"; break;
    case TG_OP_DIV: e = i32 ? "idiv(a, b)" : "a / b"; break;
    case TG_OP_LESS: e = "select(0u, 1u, a < b)"; break;
    case TG_OP_GREATER: e = "select(0u, 1u, a > b)"; break;
    default: return tg_kernel_fail(k, TG_ERR_BACKEND, "not a binary op");
    }
    if (i32 && k->n->op == TG_OP_DIV) tg_kernel_helper(k, KERNEL_HELPER_IDIV, idiv_fn);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    let a = %s(%s);\n    let b = %s(%s);\n    %s(i, %s);\n", k->load_name[0], ix[0], k->load_name[1], ix[1], k->store_name, e);
    tg_kernel_end(k);
    return true;
}

/* cast: x [...] -> y [...] between f32, i32 and bool. NaN is tested on the bits: shader
 * compilers may assume x != x never holds. */
bool tg_wgsl_cast(wgsl_kernel *k) {
    tg_dtype from = tg_kernel_in(k, 0)->dtype, to = k->n->dtype;
    const char *e;
    if (from == to) e = "x";
    else if (from == TG_F32 && to == TG_I32) {
        tg_kernel_helper(k, KERNEL_HELPER_F2I,
                   "fn f2i(x: f32) -> i32 {\n"
                   "    if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) { return 0; }\n"
                   "    if (x >= 2147483648.0f) { return 2147483647; }\n"
                   "    if (x <= -2147483648.0f) { return i32(-2147483647 - 1); }\n"
                   "    return i32(x);\n"
                   "}\n");
        e = "f2i(x)";
    } else if (from == TG_F32) e = "select(0u, 1u, (bitcast<u32>(x) & 0x7fffffffu) != 0u)"; /* -> bool; NaN is true */
    else if (from == TG_I32 && to == TG_F32) e = "f32(x)";
    else if (from == TG_I32) e = "select(0u, 1u, x != 0)";
    else if (to == TG_F32) e = "select(0.0f, 1.0f, x != 0u)";
    else e = "select(0, 1, x != 0u)";
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    let x = %s(i);\n    %s(i, %s);\n", k->load_name[0], k->store_name, e);
    tg_kernel_end(k);
    return true;
}

/* where: (cond bool [...], a [...], b [...]) -> y [the broadcast shape]. */
bool tg_wgsl_where(wgsl_kernel *k) {
    char ix[3][KERNEL_EXPR_LEN];
    tg_kernel_bcast_maps(k, 3, ix);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    %s(i, select(%s(%s), %s(%s), %s(%s) != 0u));\n", k->store_name, k->load_name[2], ix[2], k->load_name[1], ix[1], k->load_name[0],
               ix[0]);
    tg_kernel_end(k);
    return true;
}

/* broadcast_to and permute: x [...] -> y [...], a gather through the
 * input's strides. */
bool tg_wgsl_copy(wgsl_kernel *k) {
    const tg_node *n = k->n, *x = tg_kernel_in(k, 0);
    int64_t st[1][TG_MAX_DIMS];
    char ix[1][KERNEL_EXPR_LEN];
    if (n->op == TG_OP_PERMUTE) {
        int64_t own[TG_MAX_DIMS];
        tg_shape_strides(x->shape, own);
        for (int i = 0; i < n->shape.ndim; i++) st[0][i] = own[n->at.permute.perm.d[i]];
        int64_t d[TG_MAX_DIMS];
        for (int i = 0; i < n->shape.ndim; i++) d[i] = n->shape.d[i];
        char name[32];
        snprintf(name, sizeof name, "%smap0", k->prefix);
        tg_kernel_index_fn(k, name, n->shape.ndim, d, st[0]);
        snprintf(ix[0], sizeof ix[0], "%s(i)", name);
    } else {
        tg_kernel_bcast_maps(k, 1, ix);
    }
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source, "    %s(i, %s(%s));\n", k->store_name, k->load_name[0], ix[0]);
    tg_kernel_end(k);
    return true;
}

/* one_hot: i32 [...] -> f32 [..., depth]; out-of-range indices give zeros. */
bool tg_wgsl_one_hot(wgsl_kernel *k) {
    int64_t depth = k->n->at.one_hot.depth;
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    %s(i, select(0.0f, 1.0f, %s(i / %lldu) == i32(i %% %lldu)));\n", k->store_name, k->load_name[0],
               (long long)depth, (long long)depth);
    tg_kernel_end(k);
    return true;
}

/* where_causal over [..., Tq, Tk]: key j > query i gets the fill value. */
bool tg_wgsl_where_causal(wgsl_kernel *k) {
    const tg_shape *s = &k->n->shape;
    int64_t Tk = s->d[s->ndim - 1], Tq = s->d[s->ndim - 2];
    char f[48];
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    let q = (i / %lldu) %% %lldu;\n    %s(i, select(%s(i), %s, i %% %lldu > q));\n",
               (long long)Tk, (long long)Tq, k->store_name, k->load_name[0], tg_kernel_f32(k->n->at.fill.value, f), (long long)Tk);
    tg_kernel_end(k);
    return true;
}

/* Optimizer updates over one param p [...], the formulas of optim/update.h
 * over operands bound by name: adam_m (m, g) -> m2, adam_v (v, g) -> v2,
 * adam_p (p, m2, v2, hyper) -> p2, sgd_v (v, g, p, hyper) -> v2, sgd_p (p,
 * g, v2, hyper) -> p2, each of p's shape; hyper [TG_HYPER_N] the
 * hyperparameter vector (input 3). */
bool tg_wgsl_optim(wgsl_kernel *k) {
    const tg_node *n = k->n;
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    switch (n->op) {
    case TG_OP_ADAM_M:
        tg_kernel_let_f32(k, "beta1", n->at.adam.beta), tg_kernel_let_f32(k, "ob1", 1.0f - n->at.adam.beta);
        tg_source_printf(&k->source, "    let m0 = ld0(i);\n    let g = ld1(i);\n    st(i, %s);\n",
                      TG_WGSL(TG_ADAM_M(tg_w, beta1, ob1, m0, g)));
        break;
    case TG_OP_ADAM_V:
        tg_kernel_let_f32(k, "beta2", n->at.adam.beta), tg_kernel_let_f32(k, "ob2", 1.0f - n->at.adam.beta);
        tg_source_printf(&k->source, "    let v0 = ld0(i);\n    let g = ld1(i);\n    st(i, %s);\n",
                      TG_WGSL(TG_ADAM_V(tg_w, beta2, ob2, v0, g)));
        break;
    case TG_OP_ADAM_P:
        tg_source_printf(&k->source, "    let lrt = ld3(%du);\n", TG_HYPER_LRT);
        if (n->at.adam.decay) tg_source_printf(&k->source, "    let shrink = ld3(%du);\n", TG_HYPER_SHRINK);
        else tg_source_printf(&k->source, "    let shrink = 1.0f;\n");
        tg_kernel_let_f32(k, "eps", n->at.adam.eps);
        tg_source_printf(&k->source, "    let p = ld0(i);\n    let m = ld1(i);\n    let v = ld2(i);\n    st(i, %s);\n",
                      TG_WGSL(TG_ADAM_P(tg_w, shrink, lrt, eps, p, m, v)));
        break;
    case TG_OP_SGD_V:
    case TG_OP_SGD_P:
        tg_kernel_let_f32(k, "mu", n->at.sgd.momentum), tg_kernel_let_f32(k, "wd", n->at.sgd.weight_decay);
        if (n->op == TG_OP_SGD_V) {
            tg_source_printf(&k->source, "    let v0 = ld0(i);\n    let g = ld1(i);\n    let p = ld2(i);\n    st(i, %s);\n",
                          TG_WGSL(TG_SGD_V(tg_w, mu, wd, v0, g, p)));
            break;
        }
        /* sgd_p: in[2] is v' with momentum, else p */
        tg_source_printf(&k->source, "    let lr = ld3(%du);\n    let p = ld0(i);\n    let g = ld1(i);\n", TG_HYPER_LR);
        if (n->at.sgd.has_momentum) tg_source_printf(&k->source, "    let v = ld2(i);\n");
        tg_wgsl_sgd_step(k, n->at.sgd.has_momentum, n->at.sgd.nesterov);
        tg_source_printf(&k->source, "    st(i, u);\n");
        break;
    default: return tg_kernel_fail(k, TG_ERR_BACKEND, "not an optimizer op");
    }
    tg_kernel_end(k);
    return true;
}

void tg_wgsl_sgd_step(wgsl_kernel *k, bool momentum, bool nesterov) {
    const char *d = !momentum ? "g2" : nesterov ? TG_WGSL(TG_SGD_NESTEROV(tg_w, mu, g2, v)) : "v";
    tg_source_printf(&k->source, "    let g2 = %s;\n    let d = %s;\n    let u = %s;\n", TG_WGSL(TG_SGD_G(tg_w, wd, g, p)), d,
                  TG_WGSL(TG_SGD_P(tg_w, lr, p, d)));
}
