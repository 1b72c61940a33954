/* WGSL kernels of the math and shape ops (CPU: kernels_math.c): the unary
 * and binary math families and their backward, min/max and their backward, softmax over any
 * axis, argmax/argmin, narrow (+ adjoint), concat, take_along_axis (+ its
 * scatter-add).
 *
 * The special functions are written out here rather than taken from the WGSL
 * builtins wherever a builtin's precision is left to the driver: sin and cos
 * (Vulkan only bounds their absolute error, 2^-11, near 0), erf (no builtin)
 * and tanh (some drivers build it from exp and give NaN for large |x|). The
 * approximations are the classic ones the CPU also uses (Cody-Waite
 * reduction + Taylor polynomials, the Numerical Recipes erfc fit), so results
 * agree with the CPU to a few ulp, not bit for bit. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"

/* The functions the math rows' expressions call, each written into a
 * kernel only where its expressions call it (directly or through another):
 * the special functions, ops.def's primitives in WGSL (the CPU's are in
 * cpu/kernels_math.c), then its helpers, rendered from the same text as on
 * the CPU. */
typedef struct {
    const char *name, *text;
} math_fn;

static const math_fn math_lib[] = {
    {"sigmoid", "fn sigmoid(x: f32) -> f32 {\n"
                "    let e = exp(-abs(x));\n    let r = 1.0f / (1.0f + e);\n    return select(r, e * r, x < 0.0f);\n}\n"},
    {"tanh_c", "fn tanh_c(x: f32) -> f32 { return tanh(clamp(x, -9.0f, 9.0f)); }\n"},
    /* log(1 + a) for a in [0, 1], keeping the digits of a tiny a (Kahan's trick) */
    {"log1p_u", "fn log1p_u(a: f32) -> f32 {\n"
                "    let u = 1.0f + a;\n    let d = u - 1.0f;\n    return select(log(u) * (a / d), a, d == 0.0f);\n}\n"},
    /* erfc(z), z >= 0: t exp(-z^2 + P(t)), t = 1 / (1 + z / 2) (relative error < 1.2e-7) */
    {"erfc_pos", "fn erfc_pos(z: f32) -> f32 {\n"
                 "    let t = 1.0f / (1.0f + 0.5f * z);\n"
                 "    var p = 0.17087277f;\n"
                 "    p = p * t - 0.82215223f;\n    p = p * t + 1.48851587f;\n    p = p * t - 1.13520398f;\n"
                 "    p = p * t + 0.27886807f;\n    p = p * t - 0.18628806f;\n    p = p * t + 0.09678418f;\n"
                 "    p = p * t + 0.37409196f;\n    p = p * t + 1.00002368f;\n    p = p * t - 1.26551223f;\n"
                 "    return t * exp(p - z * z);\n}\n"},
    /* erf: the Taylor series of 2/sqrt(pi) (x - x^3/3 + ...) below 1/2, 1 - erfc above */
    {"erf_f", "fn erf_f(x: f32) -> f32 {\n"
              "    let x2 = x * x;\n"
              "    var s = -1.0f / 75600.0f;\n"
              "    s = s * x2 + 1.0f / 9360.0f;\n    s = s * x2 - 1.0f / 1320.0f;\n    s = s * x2 + 1.0f / 216.0f;\n"
              "    s = s * x2 - 1.0f / 42.0f;\n    s = s * x2 + 1.0f / 10.0f;\n    s = s * x2 - 1.0f / 3.0f;\n"
              "    s = (s * x2 + 1.0f) * x * 1.12837916709551257f;\n"
              "    let big = 1.0f - erfc_pos(abs(x));\n"
              "    return select(select(big, -big, x < 0.0f), s, abs(x) < 0.5f);\n}\n"},
    /* Phi(x), the standard normal CDF, from erfc so the left tail keeps its digits */
    {"phi", "fn phi(x: f32) -> f32 {\n"
            "    let e = 0.5f * erfc_pos(abs(x) * 0.70710678118654752f);\n    return select(1.0f - e, e, x < 0.0f);\n}\n"},
    /* sin and cos: x = j pi/2 + r (pi/2 in three parts), then the Taylor
     * polynomials on |r| <= pi/4 picked by the quadrant; accurate to a few ulp
     * for |x| up to about 8192 */
    {"sincos_q", "fn sincos_q(x: f32, want_cos: bool) -> f32 {\n"
                 "    let j = round(x * 0.63661977236758134f);\n"
                 "    let r = ((x - j * 1.5703125f) - j * 4.837512969970703e-4f) - j * 7.549790126404332e-8f;\n"
                 "    let r2 = r * r;\n"
                 "    let s = r + r * r2 * (-1.0f / 6.0f + r2 * (1.0f / 120.0f + r2 * (-1.0f / 5040.0f + r2 * (1.0f / 362880.0f))));\n"
                 "    let c = 1.0f + r2 * (-0.5f + r2 * (1.0f / 24.0f + r2 * (-1.0f / 720.0f + r2 * (1.0f / 40320.0f"
                 " + r2 * (-1.0f / 3628800.0f)))));\n"
                 "    let q = (bitcast<u32>(i32(j)) + select(0u, 1u, want_cos)) & 3u;\n"
                 "    let v = select(s, c, (q & 1u) == 1u);\n"
                 "    return select(v, -v, q >= 2u);\n}\n"},
    {"ew_sel", "fn ew_sel(c: bool, a: f32, b: f32) -> f32 { return select(b, a, c); }\n"},
    {"ew_abs", "fn ew_abs(x: f32) -> f32 { return abs(x); }\n"},
    {"ew_exp", "fn ew_exp(x: f32) -> f32 { return exp(x); }\n"},
    {"ew_log", "fn ew_log(x: f32) -> f32 { return log(x); }\n"},
    {"ew_sqrt", "fn ew_sqrt(x: f32) -> f32 { return sqrt(x); }\n"},
    {"ew_tanh", "fn ew_tanh(x: f32) -> f32 { return tanh_c(x); }\n"},
    {"ew_sigmoid", "fn ew_sigmoid(x: f32) -> f32 { return sigmoid(x); }\n"},
    {"ew_erf", "fn ew_erf(x: f32) -> f32 { return erf_f(x); }\n"},
    {"ew_phi", "fn ew_phi(x: f32) -> f32 { return phi(x); }\n"},
    {"ew_sin", "fn ew_sin(x: f32) -> f32 { return sincos_q(x, false); }\n"},
    {"ew_cos", "fn ew_cos(x: f32) -> f32 { return sincos_q(x, true); }\n"},
    {"ew_clamp", "fn ew_clamp(x: f32, lo: f32, hi: f32) -> f32 {\n"
                 "    let v = select(x, lo, x < lo);\n    return select(v, hi, v > hi);\n}\n"},
    {"ew_log1p_unit", "fn ew_log1p_unit(a: f32) -> f32 { return log1p_u(a); }\n"},
    {"ew_one_minus_exp_neg", "fn ew_one_minus_exp_neg(y: f32) -> f32 { return 1.0f - exp(-y); }\n"},
    {"ew_floor", "fn ew_floor(x: f32) -> f32 { return floor(x); }\n"},
    {"ew_pow_pos", "fn ew_pow_pos(x: f32, y: f32) -> f32 { return pow(x, y); }\n"},
    /* functions, not constants: WGSL rejects a constant expression whose value is inf or nan */
    {"ew_inf", "fn ew_inf() -> f32 { return f32_bits(0x7f800000u); }\n"},
    {"ew_nan", "fn ew_nan() -> f32 { return f32_bits(0x7fc00000u); }\n"},
    {"ew_is_nan", "fn ew_is_nan(x: f32) -> bool { return is_nan(x); }\n"},
    {"ew_iabs", "fn ew_iabs(x: i32) -> i32 { return select(x, bitcast<i32>(0u - bitcast<u32>(x)), x < 0); }\n"},
    {"ew_imul", "fn ew_imul(a: i32, b: i32) -> i32 { return a * b; }\n"}, /* WGSL's i32 arithmetic wraps */
    {"ew_iclamp", "fn ew_iclamp(x: i32, lo: i32, hi: i32) -> i32 { return min(max(x, lo), hi); }\n"},
#define TG_EW_FN(name, x, expr) {#name, "fn " #name "(" #x ": f32) -> f32 { return " #expr "; }\n"},
#define TG_EW_FN2(name, x, y, expr) {#name, "fn " #name "(" #x ": f32, " #y ": f32) -> f32 { return " #expr "; }\n"},
#include "../ir/ops.def"
};
enum { N_MATH_FNS = sizeof math_lib / sizeof math_lib[0] };
_Static_assert(KERNEL_HELPER_MATH + N_MATH_FNS <= 64, "a helper id per function, 64 at most");

/* Each math row's expressions as text: forward, backward (the binary rows:
 * a's cotangent, then b's), i32 form. */
#define TG_EW_I32_TEXT_I32(expr) #expr
#define TG_EW_I32_TEXT_F32_ONLY NULL
static const struct {
    const char *fwd, *bwd, *bwd_b, *i32;
} exprs[TG_OP_COUNT] = {
#define TG_UNARY_MATH(OP, name, flags, save, fwd, bwd, i32) [TG_OP_##OP] = {#fwd, #bwd, NULL, TG_EW_I32_TEXT_##i32},
#define TG_BINARY_MATH(OP, name, flags, fwd, da, db, i32) [TG_OP_##OP] = {#fwd, #da, #db, TG_EW_I32_TEXT_##i32},
#include "../ir/ops.def"
};

/* Whether expression e names the identifier id. */
static bool names(const char *e, const char *id) {
    size_t len = strlen(id);
    for (const char *p = strstr(e, id); p; p = strstr(p + 1, id)) {
        bool before = p > e && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool after = isalnum((unsigned char)p[len]) || p[len] == '_';
        if (!before && !after) return true;
    }
    return false;
}


/* The lets for the attributes expression e uses (see ops.def). */
static void attr_lets(wgsl_kernel *k, const char *e, const tg_attr_unary *u) {
    if (names(e, "p0")) tg_kernel_let_f32(k, "p0", u->p0);
    if (names(e, "p1")) tg_kernel_let_f32(k, "p1", u->p1);
    int32_t i0, i1;
    tg_attr_unary_int_range(u, &i0, &i1);
    char b[24];
    if (names(e, "i0")) tg_source_printf(&k->source, "    let i0 = %s;\n", tg_kernel_i32(i0, b));
    if (names(e, "i1")) tg_source_printf(&k->source, "    let i1 = %s;\n", tg_kernel_i32(i1, b));
}

/* Marks in use[] the functions text calls, and those they call. */
static void calls(const char *text, bool *use) {
    for (int f = 0; f < N_MATH_FNS; f++)
        if (!use[f] && names(text, math_lib[f].name)) use[f] = true, calls(math_lib[f].text, use);
}

/* The module-scope functions expression e calls, once per module. */
static void math_helpers(wgsl_kernel *k, const char *e) {
    bool use[N_MATH_FNS] = {false};
    calls(e, use);
    for (int f = 0; f < N_MATH_FNS; f++) {
        if (!use[f]) continue;
        if (names(math_lib[f].text, "is_nan")) tg_kernel_is_nan(k);
        tg_kernel_helper(k, KERNEL_HELPER_MATH + (unsigned)f, math_lib[f].text);
    }
}

void tg_wgsl_math_helpers(wgsl_kernel *k, tg_opcode op) {
    if ((unsigned)op < TG_OP_COUNT && exprs[op].fwd) math_helpers(k, exprs[op].fwd);
}

void tg_wgsl_math_value(wgsl_kernel *k, const tg_node *n, const char *const *operand, int id) {
    const char *e = exprs[n->op].fwd;
    tg_source_printf(&k->source, "        var t%d: f32;\n        {\n", id);
    if (exprs[n->op].bwd_b) tg_source_printf(&k->source, "            let a = %s;\n            let b = %s;\n", operand[0], operand[1]);
    else tg_source_printf(&k->source, "            let v = %s;\n", operand[0]);
    attr_lets(k, e, &n->at.unary);
    tg_source_printf(&k->source, "            t%d = %s;\n        }\n", id, e);
}

/* A unary math row of ops.def: x [...] -> y [...] = f(x); i32 for those
 * with an i32 form. */
bool tg_wgsl_unary_math(wgsl_kernel *k) {
    const tg_node *n = k->n;
    const char *e = n->op < TG_OP_COUNT ? (n->dtype == TG_I32 ? exprs[n->op].i32 : exprs[n->op].fwd) : NULL;
    if (!e) return tg_kernel_fail(k, TG_ERR_BACKEND, "not a unary math op");
    math_helpers(k, e);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    attr_lets(k, e, &n->at.unary);
    tg_source_printf(&k->source, "    let v = %s(i);\n    %s(i, %s);\n", k->load_name[0], k->store_name, e);
    tg_kernel_end(k);
    return true;
}

/* unary_grad: (s [...], gy [...]) -> gx [...] of the forward op, s what it
 * saved (ops.def). */
bool tg_wgsl_unary_grad(wgsl_kernel *k) {
    const tg_node *n = k->n;
    tg_opcode op = n->at.unary_grad.op;
    const char *e = (unsigned)op < TG_OP_COUNT ? exprs[op].bwd : NULL;
    if (!e) return tg_kernel_fail(k, TG_ERR_BACKEND, "unary_grad of an unknown op %d", (int)op);
    math_helpers(k, e);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    attr_lets(k, e, &n->at.unary_grad.fwd);
    tg_source_printf(&k->source, "    let s = %s(i);\n    let g = %s(i);\n    %s(i, %s);\n", k->load_name[0], k->load_name[1], k->store_name, e);
    tg_kernel_end(k);
    return true;
}

/* A binary math row of ops.def: (a [...], b [...]) -> y [the broadcast
 * shape] = f(a, b), f32, or i32 for those with an i32 form. */
bool tg_wgsl_binary_math(wgsl_kernel *k) {
    const tg_node *n = k->n;
    const char *e = n->op < TG_OP_COUNT && exprs[n->op].bwd_b ? (n->dtype == TG_I32 ? exprs[n->op].i32 : exprs[n->op].fwd) : NULL;
    if (!e) return tg_kernel_fail(k, TG_ERR_BACKEND, "not a binary math op");
    char ix[2][KERNEL_EXPR_LEN];
    tg_kernel_bcast_maps(k, 2, ix);
    math_helpers(k, e);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source, "    let a = %s(%s);\n    let b = %s(%s);\n    %s(i, %s);\n", k->load_name[0], ix[0],
                     k->load_name[1], ix[1], k->store_name, e);
    tg_kernel_end(k);
    return true;
}

/* binary_grad: (a [...], b [...], gy [the broadcast shape]) -> the
 * cotangent of one operand (side 0 = a, 1 = b) of its forward row, over
 * gy's shape. */
bool tg_wgsl_binary_grad(wgsl_kernel *k) {
    tg_opcode op = k->n->at.binary_grad.op;
    int side = k->n->at.binary_grad.side;
    const char *e = (unsigned)op < TG_OP_COUNT && exprs[op].bwd_b ? (side ? exprs[op].bwd_b : exprs[op].bwd) : NULL;
    if (!e) return tg_kernel_fail(k, TG_ERR_BACKEND, "binary_grad of an unknown op %d", (int)op);
    char ix[3][KERNEL_EXPR_LEN];
    tg_kernel_bcast_maps(k, 3, ix);
    math_helpers(k, e);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    let a = %s(%s);\n    let b = %s(%s);\n    let g = %s(%s);\n    %s(i, %s);\n",
                     k->load_name[0], ix[0], k->load_name[1], ix[1], k->load_name[2], ix[2], k->store_name, e);
    tg_kernel_end(k);
    return true;
}

/* min / max: (a [...], b [...]) -> y [the broadcast shape], f32 or i32; a
 * NaN operand gives NaN. */
bool tg_wgsl_minmax(wgsl_kernel *k) {
    char ix[2][KERNEL_EXPR_LEN];
    tg_kernel_bcast_maps(k, 2, ix);
    bool is_max = k->n->op == TG_OP_MAX, f32 = k->n->dtype == TG_F32;
    if (f32) tg_kernel_is_nan(k);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    let a = %s(%s);\n    let b = %s(%s);\n", k->load_name[0], ix[0], k->load_name[1], ix[1]);
    tg_source_printf(&k->source, "    %s(i, select(b, a, a %s b%s));\n", k->store_name, is_max ? ">" : "<", f32 ? " || is_nan(a)" : "");
    tg_kernel_end(k);
    return true;
}

/* minmax_grad: (a, b, gy [...]) -> the share of gy [...] of one operand
 * (side 0 = a, 1 = b) of min or max: all of it to the winner, half at a tie. */
bool tg_wgsl_minmax_grad(wgsl_kernel *k) {
    char ix[3][KERNEL_EXPR_LEN];
    tg_kernel_bcast_maps(k, 3, ix);
    int side = k->n->at.minmax_grad.side;
    bool is_max = k->n->at.minmax_grad.op == TG_OP_MAX;
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    let own = %s(%s);\n    let oth = %s(%s);\n    let g = %s(%s);\n", k->load_name[side], ix[side],
               k->load_name[1 - side], ix[1 - side], k->load_name[2], ix[2]);
    tg_source_printf(&k->source, "    %s(i, select(select(0.0f, 0.5f * g, own == oth), g, own %s oth));\n", k->store_name, is_max ? ">" : "<");
    tg_kernel_end(k);
    return true;
}

static void axis_view(tg_shape s, int axis, int64_t *outer, int64_t *A, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s.d[i];
    for (int i = axis + 1; i < s.ndim; i++) *inner *= s.d[i];
    *A = s.d[axis];
}

/* softmax: x [outer, A, inner] -> y [outer, A, inner] = e^(x - max) / sum
 * along A; may run in place (each
 * element is read before it is written, all others in earlier passes). */
bool tg_wgsl_softmax(wgsl_kernel *k) {
    int64_t outer, A, inner;
    axis_view(k->n->shape, (int)k->n->at.axis.axis, &outer, &A, &inner);
    row_kernel L;
    if (!tg_kernel_rows_open(&L, k, outer * inner, A, inner)) return false;
    tg_kernel_rows_cache(&L, 1u, 0u);
    tg_source_printf(&k->source, "    var m = f32_bits(0xff800000u);\n");
    tg_kernel_rows_each(&L, NULL, "        m = max(m, v0);\n");
    tg_kernel_rows_combine(&L, "m", true, "mx");
    tg_source_printf(&k->source, "    var z = 0.0f;\n");
    tg_kernel_rows_each(&L, NULL, "        z += exp(v0 - mx);\n");
    tg_kernel_rows_combine(&L, "z", false, "zs");
    tg_source_printf(&k->source, "    let inv = 1.0f / zs;\n");
    tg_kernel_rows_each(&L, NULL, "        st(p, exp(v0 - mx) * inv);\n");
    tg_kernel_end(k);
    return true;
}

/* argmax / argmin over the axis: x [outer, A, inner] -> i32 [outer, 1,
 * inner]; the first index of the extreme wins, and NaN is the most extreme.
 * amax / amin store that extreme instead, in x's dtype. */
bool tg_wgsl_argmax(wgsl_kernel *k) {
    const tg_node *x = tg_kernel_in(k, 0);
    int64_t outer, A, inner;
    axis_view(x->shape, (int)k->n->at.axis.axis, &outer, &A, &inner);
    bool is_max = k->n->op == TG_OP_ARGMAX || k->n->op == TG_OP_AMAX, f32 = x->dtype == TG_F32;
    bool value = k->n->op == TG_OP_AMAX || k->n->op == TG_OP_AMIN;
    if (f32) tg_kernel_is_nan(k);
    if (!tg_kernel_flat(k, outer * inner)) return false;
    tg_source_printf(&k->source,
               "    let base = (i / %lldu) * %lldu + i %% %lldu;\n"
               "    var best = ld0(base);\n    var at = 0;\n"
               "    for (var a = 1u; a < %lldu; a++) {\n"
               "        let v = ld0(base + a * %lldu);\n"
               "        if (v %s best%s) { best = v; at = i32(a); }\n"
               "    }\n"
               "    st(i, %s);\n",
               (long long)inner, (long long)(A * inner), (long long)inner, (long long)A, (long long)inner,
               is_max ? ">" : "<", f32 ? " || (is_nan(v) && !is_nan(best))" : "", value ? "best" : "at");
    tg_kernel_end(k);
    return true;
}

/* narrow: x [outer, A, inner] -> y [outer, L, inner] = x[:, start:start+L, :] */
bool tg_wgsl_narrow(wgsl_kernel *k) {
    int64_t outer, L, inner, A = tg_kernel_in(k, 0)->shape.d[k->n->at.axis.axis];
    axis_view(k->n->shape, (int)k->n->at.axis.axis, &outer, &L, &inner);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source, "    %s(i, %s((i / %lldu) * %lldu + %lldu + i %% %lldu));\n", k->store_name, k->load_name[0], (long long)(L * inner),
               (long long)(A * inner), (long long)(k->n->at.axis.start * inner), (long long)(L * inner));
    tg_kernel_end(k);
    return true;
}

/* narrow_grad: gy [outer, L, inner] -> gx [outer, A, inner], zero outside
 * [start, start+L) along the axis. */
bool tg_wgsl_narrow_grad(wgsl_kernel *k) {
    int64_t outer, A, inner, L = tg_kernel_in(k, 0)->shape.d[k->n->at.axis.axis], s0 = k->n->at.axis.start;
    axis_view(k->n->shape, (int)k->n->at.axis.axis, &outer, &A, &inner);
    if (!tg_kernel_flat(k, tg_ir_numel(k->n))) return false;
    tg_source_printf(&k->source,
               "    let rem = i %% %lldu;\n    let a = rem / %lldu;\n"
               "    let inside = a >= %lldu && a < %lldu;\n"
               "    let src = select(0u, (i / %lldu) * %lldu + rem - %lldu, inside);\n"
               "    %s(i, select(0.0f, %s(src), inside));\n",
               (long long)(A * inner), (long long)inner, (long long)s0, (long long)(s0 + L), (long long)(A * inner),
               (long long)(L * inner), (long long)(s0 * inner), k->store_name, k->load_name[0]);
    tg_kernel_end(k);
    return true;
}

/* concat: inputs k [outer, A_k, inner] -> y [outer, sum A_k, inner] */
bool tg_wgsl_concat(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t outer, S, inner;
    int axis = (int)n->at.axis.axis;
    axis_view(n->shape, axis, &outer, &S, &inner);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source, "    let o = i / %lldu;\n    let rem = i %% %lldu;\n    let a = rem / %lldu;\n    let q = rem %% %lldu;\n",
               (long long)(S * inner), (long long)(S * inner), (long long)inner, (long long)inner);
    int64_t start = 0;
    for (int j = 0; j < n->nin; j++) {
        int64_t Aj = tg_kernel_in(k, j)->shape.d[axis];
        if (j < n->nin - 1) tg_source_printf(&k->source, "    %sif (a < %lldu) {", j ? "else " : "", (long long)(start + Aj));
        else tg_source_printf(&k->source, "    %s{", j ? "else " : "");
        tg_source_printf(&k->source, " %s(i, %s((o * %lldu + a - %lldu) * %lldu + q)); }\n", k->store_name, k->load_name[j], (long long)Aj,
                   (long long)start, (long long)inner);
        start += Aj;
    }
    tg_kernel_end(k);
    return true;
}

/* take_along_axis: x [outer, A, inner], idx i32 [outer, K, inner] -> y
 * [outer, K, inner], y = x[o, idx, q]; a negative index counts from the end,
 * one still out of range reads 0. */
bool tg_wgsl_take_along_axis(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t outer, K, inner, A = tg_kernel_in(k, 0)->shape.d[n->at.axis.axis];
    axis_view(n->shape, (int)n->at.axis.axis, &outer, &K, &inner);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let t = %s(i);\n    let v = select(t, t + %lldi, t < 0);\n    let ok = v >= 0 && v < %lldi;\n"
               "    let src = (i / %lldu) * %lldu + u32(clamp(v, 0, %lldi)) * %lldu + i %% %lldu;\n"
               "    %s(i, select(bitcast<%s>(0u), %s(src), ok));\n",
               k->load_name[1], (long long)A, (long long)A, (long long)(K * inner), (long long)(A * inner), (long long)(A - 1),
               (long long)inner, (long long)inner, k->store_name, tg_kernel_type(n->dtype), k->load_name[0]);
    tg_kernel_end(k);
    return true;
}

/* take_along_axis_grad: (gy [outer, K, inner], idx) -> gx [outer, A, inner].
 * One invocation per gx element adds, in k order as the CPU does, the gy
 * elements whose index picked it (no atomics). */
bool tg_wgsl_take_along_axis_grad(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t work;
    if (tg_wgsl_take_grad_sorted(k->g, n, k->lim, &work)) return tg_wgsl_take_along_axis_grad_sorted(k);
    int64_t outer, A, inner, K = tg_kernel_in(k, 1)->shape.d[n->at.axis.axis];
    axis_view(n->shape, (int)n->at.axis.axis, &outer, &A, &inner);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
               "    let o = i / %lldu;\n    let a = i32((i %% %lldu) / %lldu);\n    let q = i %% %lldu;\n"
               "    var acc = 0.0f;\n"
               "    for (var kk = 0u; kk < %lldu; kk++) {\n"
               "        let j = (o * %lldu + kk) * %lldu + q;\n"
               "        let t = ld1(j);\n"
               "        if (select(t, t + %lldi, t < 0) == a) { acc += ld0(j); }\n"
               "    }\n"
               "    st(i, acc);\n",
               (long long)(A * inner), (long long)(A * inner), (long long)inner, (long long)inner, (long long)K,
               (long long)K, (long long)inner, (long long)A);
    tg_kernel_end(k);
    return true;
}

/* cumsum: x, y [outer, A, inner]; one invocation per line adds along A in
 * order (from the end when reversed), as the CPU does. i32 wraps. */
bool tg_wgsl_cumsum(wgsl_kernel *k) {
    int64_t outer, A, inner;
    axis_view(k->n->shape, (int)k->n->at.scan.axis, &outer, &A, &inner);
    char a[48];
    if (k->n->at.scan.reverse) snprintf(a, sizeof a, "(%lldu - s)", (long long)(A - 1));
    else snprintf(a, sizeof a, "s");
    if (!tg_kernel_flat(k, outer * inner)) return false;
    tg_source_printf(&k->source,
                  "    let base = (i / %lldu) * %lldu + i %% %lldu;\n"
                  "    var acc = %s(0);\n"
                  "    for (var s = 0u; s < %lldu; s++) {\n"
                  "        let p = base + %s * %lldu;\n"
                  "        acc += ld0(p);\n"
                  "        st(p, acc);\n"
                  "    }\n",
                  (long long)inner, (long long)(A * inner), (long long)inner, tg_kernel_type(k->n->dtype), (long long)A, a,
                  (long long)inner);
    tg_kernel_end(k);
    return true;
}

/* topk: x [outer, A, inner] -> i32 [outer, K, inner]; one invocation per
 * line takes K passes, each picking the first entry (in tk_before's order,
 * the CPU's) after the one the last pass picked. */
bool tg_wgsl_topk(wgsl_kernel *k) {
    const tg_node *x = tg_kernel_in(k, 0);
    int64_t outer, A, inner, K = k->n->at.topk.k;
    axis_view(x->shape, (int)k->n->at.topk.axis, &outer, &A, &inner);
    bool f32 = x->dtype == TG_F32, largest = k->n->at.topk.largest;
    const char *T = tg_kernel_type(x->dtype), *cmp = largest ? ">" : "<";
    if (f32) tg_kernel_is_nan(k);
    tg_source_printf(&k->source, "fn tk_before(va: %s, a: u32, vb: %s, b: u32) -> bool {\n", T, T);
    if (f32)
        tg_source_printf(&k->source,
                      "    let na = is_nan(va);\n    let nb = is_nan(vb);\n"
                      "    if (na != nb) { return %s; }\n"
                      "    if (!na && va != vb) { return va %s vb; }\n",
                      largest ? "na" : "nb", cmp);
    else tg_source_printf(&k->source, "    if (va != vb) { return va %s vb; }\n", cmp);
    tg_source_printf(&k->source, "    return a < b;\n}\n");
    if (!tg_kernel_flat(k, outer * inner)) return false;
    tg_source_printf(&k->source,
                  "    let base = (i / %lldu) * %lldu + i %% %lldu;\n"
                  "    let obase = (i / %lldu) * %lldu + i %% %lldu;\n"
                  "    var pv = ld0(base);\n    var pa = 0xffffffffu;\n"
                  "    for (var r = 0u; r < %lldu; r++) {\n"
                  "        var bv = pv;\n        var ba = 0xffffffffu;\n"
                  "        for (var a = 0u; a < %lldu; a++) {\n"
                  "            let v = ld0(base + a * %lldu);\n"
                  "            if (r > 0u && !tk_before(pv, pa, v, a)) { continue; }\n"
                  "            if (ba == 0xffffffffu || tk_before(v, a, bv, ba)) { bv = v; ba = a; }\n"
                  "        }\n"
                  "        st(obase + r * %lldu, i32(ba));\n"
                  "        pv = bv;\n        pa = ba;\n"
                  "    }\n",
                  (long long)inner, (long long)(A * inner), (long long)inner, (long long)inner, (long long)(K * inner),
                  (long long)inner, (long long)K, (long long)A, (long long)inner, (long long)inner);
    tg_kernel_end(k);
    return true;
}

/* pad along one axis: x [outer, A, inner] -> y [outer, P, inner], P = B + A
 * + F; position p copies x at the CPU's pad_src(p - B), or is the value. */
bool tg_wgsl_pad(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t outer, P, inner, A = tg_kernel_in(k, 0)->shape.d[n->at.pad.axis], B = n->at.pad.before;
    axis_view(n->shape, (int)n->at.pad.axis, &outer, &P, &inner);
    char v[48];
    if (n->dtype == TG_F32) tg_kernel_f32(n->at.pad.value, v);
    else tg_kernel_i32(tg_ir_f2i(n->at.pad.value), v);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
                  "    let o = i / %lldu;\n    let rem = i %% %lldu;\n    let q = rem %% %lldu;\n"
                  "    var s = i32(rem / %lldu) - %lldi;\n",
                  (long long)(P * inner), (long long)(P * inner), (long long)inner, (long long)inner, (long long)B);
    if (n->at.pad.mode == TG_PAD_REFLECT)
        tg_source_printf(&k->source, "    s = select(s, -s, s < 0);\n    s = select(s, %lldi - s, s >= %lldi);\n",
                      (long long)(2 * (A - 1)), (long long)A);
    else if (n->at.pad.mode == TG_PAD_REPLICATE) tg_source_printf(&k->source, "    s = clamp(s, 0, %lldi);\n", (long long)(A - 1));
    tg_source_printf(&k->source,
                  "    if (s < 0 || s >= %lldi) { st(i, %s); return; }\n"
                  "    st(i, ld0((o * %lldu + u32(s)) * %lldu + q));\n",
                  (long long)A, v, (long long)A, (long long)inner);
    tg_kernel_end(k);
    return true;
}

/* pad_grad: gy [outer, P, inner] -> gx [outer, A, inner]; entry a sums gy
 * at a + B, then the padding before the data that copies it, then the
 * padding after it, in the CPU's order. */
bool tg_wgsl_pad_grad(wgsl_kernel *k) {
    const tg_node *n = k->n;
    int64_t outer, A, inner, P = tg_kernel_in(k, 0)->shape.d[n->at.pad.axis], B = n->at.pad.before;
    int64_t F = n->at.pad.after;
    axis_view(n->shape, (int)n->at.pad.axis, &outer, &A, &inner);
    if (!tg_kernel_flat(k, tg_ir_numel(n))) return false;
    tg_source_printf(&k->source,
                  "    let o = i / %lldu;\n    let rem = i %% %lldu;\n    let a = i32(rem / %lldu);\n"
                  "    let gb = o * %lldu + rem %% %lldu;\n"
                  "    var acc = ld0(gb + u32(a + %lldi) * %lldu);\n",
                  (long long)(A * inner), (long long)(A * inner), (long long)inner, (long long)(P * inner),
                  (long long)inner, (long long)B, (long long)inner);
    if (n->at.pad.mode == TG_PAD_REFLECT)
        tg_source_printf(&k->source,
                      "    if (a >= 1 && a <= %lldi) { acc += ld0(gb + u32(%lldi - a) * %lldu); }\n"
                      "    if (a >= %lldi && a <= %lldi) { acc += ld0(gb + u32(%lldi - a) * %lldu); }\n",
                      (long long)B, (long long)B, (long long)inner, (long long)(A - 1 - F), (long long)(A - 2),
                      (long long)(B + 2 * (A - 1)), (long long)inner);
    else if (n->at.pad.mode == TG_PAD_REPLICATE)
        tg_source_printf(&k->source,
                      "    if (a == 0) { for (var p = 0u; p < %lldu; p++) { acc += ld0(gb + p * %lldu); } }\n"
                      "    if (a == %lldi) { for (var p = %lldu; p < %lldu; p++) { acc += ld0(gb + p * %lldu); } }\n",
                      (long long)B, (long long)inner, (long long)(A - 1), (long long)(B + A), (long long)P,
                      (long long)inner);
    tg_source_printf(&k->source, "    st(i, acc);\n");
    tg_kernel_end(k);
    return true;
}
