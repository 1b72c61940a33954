/* CPU kernels of the math and shape ops: the unary and binary math
 * families and their backward, min/max and their backward, softmax over any axis, argmax/argmin,
 * narrow and its adjoint, concat, take_along_axis and its scatter-add.
 *
 * Elementwise math runs on 16-lane vectors (vmath.h) in functions compiled
 * for several instruction sets; every lane is computed the same way whatever
 * chunk it lands in, so results do not depend on the thread count. Ops over
 * one axis view the tensor as [outer, A, inner] and give each line (or tile
 * of lines) to exactly one thread, so their sums have a fixed order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "isa.h"
#include "vmath.h"

#define GRAIN 16384 /* elements per task, below which threads cost more than they save */

/* ---- unary math: y = f(x), x and y flat [n] ----
 * ops.def writes each op's math once as expressions; this renders them as
 * 16-lane vector code. The primitives: */
#define ew_sel(c, a, b) vsel((c), EW_V(a), EW_V(b))
#define ew_abs vabs
#define ew_exp vexp
#define ew_tanh vtanh
#define ew_sigmoid vsigmoid
#define ew_erf verf
#define ew_phi vphi
#define ew_sin(x) vsincos_any((x), false)
#define ew_cos(x) vsincos_any((x), true)
#define ew_clamp vclamp_seq
#define ew_log1p_unit vlog1p_unit
#define ew_one_minus_exp_neg vone_minus_exp_neg
#define ew_floor vfloor_any
#define ew_inf() vsplat(INFINITY)
#define ew_nan() vsplat(NAN)
#define ew_is_nan(x) ((x) != (x))
#define ew_iabs(x) vseli((x) < 0, (vi)(0u - (vu)(x)), (x))
#define ew_imul(a, b) (vi)((vu)(a) * (vu)(b))

/* A literal operand of ew_sel as a vector; a vector as it is (adding 0
 * would turn -0 into +0). */
VINLINE vf ew_vec(vf x) { return x; }
#define EW_V(x) _Generic((x), vf: ew_vec, default: vsplat)(x)
VINLINE vi vseli(vi m, vi a, vi b) { return (a & m) | (b & ~m); }
VINLINE vi ew_iclamp(vi x, int32_t lo, int32_t hi) {
    x = vseli(x < lo, (vi){0} + lo, x);
    return vseli(x > hi, (vi){0} + hi, x);
}

/* sin / cos of every lane: the vector code, and libm for the lanes it does
 * not cover (|x| > 8192, inf, NaN), so an element's result never depends
 * on its neighbours. */
VINLINE vf vsincos_any(vf v, bool want_cos) {
    vf r = vsincos(v, want_cos);
    vi bad = ~vsincos_ok(v);
    int32_t any = 0;
    for (int k = 0; k < VL; k++) any |= bad[k];
    if (any)
        for (int k = 0; k < VL; k++)
            if (bad[k]) r[k] = want_cos ? cosf(v[k]) : sinf(v[k]);
    return r;
}

/* log of every lane, through libm: the expressions use it away from the
 * cases a polynomial handles better, so speed matters less than covering
 * every input (0, negatives, subnormals, inf, NaN). */
VINLINE vf ew_log(vf v) {
    vf r;
    for (int k = 0; k < VL; k++) r[k] = logf(v[k]);
    return r;
}

/* sqrt and x^y (x > 0) of every lane through libm, correctly rounded and
 * as exact as C's, for any input. */
VINLINE vf ew_sqrt(vf v) {
    vf r;
    for (int k = 0; k < VL; k++) r[k] = sqrtf(v[k]);
    return r;
}
VINLINE vf ew_pow_pos(vf x, vf y) {
    vf r;
    for (int k = 0; k < VL; k++) r[k] = powf(x[k], y[k]);
    return r;
}

/* floor of every lane: vfloor below 2^23, beyond which every float is an
 * integer (and inf and NaN pass through). */
VINLINE vf vfloor_any(vf x) { return vsel(vabs(x) < 8388608.0f, vfloor(x), x); }

/* clamp as PyTorch: max with lo first, then min with hi (so lo > hi gives
 * hi everywhere); NaN passes through. */
VINLINE vf vclamp_seq(vf v, float lo, float hi) {
    v = vsel(v < lo, vsplat(lo), v);
    return vsel(v > hi, vsplat(hi), v);
}

#define TG_EW_FN(name, x, expr) VINLINE vf name(vf x) { return EW_V(expr); }
#define TG_EW_FN2(name, x, y, expr) VINLINE vf name(vf x, vf y) { return EW_V(expr); }
#include "../ir/ops.def"

typedef struct {
    const tg_node *n;
    const void *x, *s, *gy;
    void *y;
} um_job;

/* Applies BODY (an expression of vf v) to x[0..len) into y, VL lanes at a
 * time; the last, partial vector is zero-padded and goes through the same
 * code, so the expansion of BODY appears once. */
#define VMAP(x, y, len, BODY)                                                    \
    do {                                                                         \
        for (int64_t i_ = 0; i_ < (len); i_ += VL) {                             \
            int64_t m_ = (len) - i_ < VL ? (len) - i_ : VL;                      \
            vf v = m_ == VL ? vload((x) + i_) : vload_n((x) + i_, m_);           \
            vf r_ = EW_V(BODY);                                                  \
            if (m_ == VL) vstore((y) + i_, r_);                                  \
            else vstore_n((y) + i_, r_, m_);                                     \
        }                                                                        \
    } while (0)

/* As VMAP with two inputs: s (the saved x or y) and g (the cotangent). */
#define VMAP2(sp, gp, y, len, BODY)                                              \
    do {                                                                         \
        for (int64_t i_ = 0; i_ < (len); i_ += VL) {                             \
            int64_t m_ = (len) - i_ < VL ? (len) - i_ : VL;                      \
            vf s = m_ == VL ? vload((sp) + i_) : vload_n((sp) + i_, m_);         \
            vf g = m_ == VL ? vload((gp) + i_) : vload_n((gp) + i_, m_);         \
            (void)s;                                                             \
            vf r_ = EW_V(BODY);                                                  \
            if (m_ == VL) vstore((y) + i_, r_);                                  \
            else vstore_n((y) + i_, r_, m_);                                     \
        }                                                                        \
    } while (0)

/* As VMAP over i32 lanes (memcpy in and out: the same bytes as floats). */
#define VMAPI(x, y, len, BODY)                                                   \
    do {                                                                         \
        for (int64_t i_ = 0; i_ < (len); i_ += VL) {                             \
            int64_t m_ = (len) - i_ < VL ? (len) - i_ : VL;                      \
            vi v = {0};                                                          \
            memcpy(&v, (x) + i_, (size_t)m_ * sizeof(int32_t));                  \
            vi r_ = (BODY);                                                      \
            memcpy((y) + i_, &r_, (size_t)m_ * sizeof(int32_t));                 \
        }                                                                        \
    } while (0)

TG_MULTI(static, um_forward, (tg_opcode op, const tg_node *n, const float *x, float *y, int64_t len),
         (op, n, x, y, len)) {
    const float p0 = n->at.unary.p0, p1 = n->at.unary.p1;
    (void)p0, (void)p1;
    switch (op) {
#define TG_UNARY_MATH(OP, name, flags, save, fwd, bwd, i32) case TG_OP_##OP: VMAP(x, y, len, fwd); break;
#include "../ir/ops.def"
    default: break;
    }
}

/* i32 forms, with i0, i1 the integer range inside [p0, p1]. */
#define TG_EW_I32_BODY_I32(expr) expr
#define TG_EW_I32_BODY_F32_ONLY v
static void um_forward_i32(tg_opcode op, const tg_node *n, const int32_t *x, int32_t *y, int64_t len) {
    int32_t i0, i1;
    tg_attr_unary_int_range(&n->at.unary, &i0, &i1);
    (void)i0, (void)i1;
    switch (op) {
#define TG_UNARY_MATH(OP, name, flags, save, fwd, bwd, i32) \
    case TG_OP_##OP: VMAPI(x, y, len, TG_EW_I32_BODY_##i32); break;
#include "../ir/ops.def"
    default: break;
    }
}

static void um_forward_range(void *arg, int64_t lo, int64_t hi) {
    um_job *j = arg;
    if (j->n->dtype == TG_I32)
        um_forward_i32(j->n->op, j->n, (const int32_t *)j->x + lo, (int32_t *)j->y + lo, hi - lo);
    else
        um_forward(j->n->op, j->n, (const float *)j->x + lo, (float *)j->y + lo, hi - lo);
}

/* Any of the unary math ops; x and y have the same shape, f32 (or i32 for
 * those with an i32 form). */
TG_CPU_KERNEL(tg_cpu_unary_math) {
    um_job j = {ir_node(g, id), in[0], NULL, NULL, out};
    tg_cpu_parallel(c, tg_ir_numel(j.n), GRAIN, um_forward_range, &j);
}

/* ---- unary math backward: gx = f'(.) * gy over flat [n] ----
 * s is the tensor the gradient rule saved (ops.def's save column). */
TG_MULTI(static, um_backward, (const tg_node *n, const float *sp, const float *gp, float *y, int64_t len),
         (n, sp, gp, y, len)) {
    const float p0 = n->at.unary_grad.fwd.p0, p1 = n->at.unary_grad.fwd.p1;
    (void)p0, (void)p1;
    switch (n->at.unary_grad.op) {
#define TG_UNARY_MATH(OP, name, flags, save, fwd, bwd, i32) case TG_OP_##OP: VMAP2(sp, gp, y, len, bwd); break;
#include "../ir/ops.def"
    default: break;
    }
}

static void um_backward_range(void *arg, int64_t lo, int64_t hi) {
    um_job *j = arg;
    um_backward(j->n, (const float *)j->s + lo, (const float *)j->gy + lo, (float *)j->y + lo, hi - lo);
}

/* unary_grad(s, gy) -> gx, all the same shape, f32 */
TG_CPU_KERNEL(tg_cpu_unary_grad) {
    um_job j = {ir_node(g, id), NULL, in[0], in[1], out};
    tg_cpu_parallel(c, tg_ir_numel(j.n), GRAIN, um_backward_range, &j);
}

/* ---- binary math: y = f(a, b) with NumPy broadcasting ----
 * ops.def's binary rows rendered as 16-lane vector code over the rows of
 * the merged iteration (tg_iter): an operand with stride 0 along a row is
 * splatted, so the tensor-scalar form runs at full width. */
typedef struct {
    const tg_node *n;
    tg_iter it;
    const void *in[3];
    void *out;
} bm_job;

/* Applies BODY (an expression of vf a, b and, for the gradients, g) to a
 * row of len elements: a, b and g read with their row strides. */
#define BMAP(y, ap, sa, bp, sb, gp, sg, len, BODY)                                   \
    do {                                                                             \
        for (int64_t i_ = 0; i_ < (len); i_ += VL) {                                 \
            int64_t m_ = (len) - i_ < VL ? (len) - i_ : VL;                          \
            vf a = vload_st((ap) + i_ * (sa), (sa), m_);                             \
            vf b = vload_st((bp) + i_ * (sb), (sb), m_);                             \
            vf g = (gp) ? vload_st((gp) + i_ * (sg), (sg), m_) : a;                  \
            (void)g;                                                                 \
            vf r_ = EW_V(BODY);                                                      \
            if (m_ == VL) vstore((y) + i_, r_);                                      \
            else vstore_n((y) + i_, r_, m_);                                         \
        }                                                                            \
    } while (0)

/* fwd (side < 0) or the cotangent of operand `side` of binary math op `op`
 * over one row; g NULL for the forward. */
TG_MULTI(static, bm_row, (tg_opcode op, int side, float *y, const float *ap, int64_t sa, const float *bp, int64_t sb,
                          const float *gp, int64_t sg, int64_t len),
         (op, side, y, ap, sa, bp, sb, gp, sg, len)) {
    switch (op) {
#define TG_BINARY_MATH(OP, name, flags, fwd, da, db, i32)                              \
    case TG_OP_##OP:                                                                   \
        if (side < 0) BMAP(y, ap, sa, bp, sb, gp, sg, len, fwd);                       \
        else if (side == 0) BMAP(y, ap, sa, bp, sb, gp, sg, len, da);                  \
        else BMAP(y, ap, sa, bp, sb, gp, sg, len, db);                                 \
        break;
#include "../ir/ops.def"
    default: break;
    }
}

/* The i32 forms, element by element. */
#define TG_EW_I32_BINARY_I32(expr) expr
#define TG_EW_I32_BINARY_F32_ONLY a
static int32_t bm_i32(tg_opcode op, int32_t a, int32_t b) {
    (void)b;
    switch (op) {
#define TG_BINARY_MATH(OP, name, flags, fwd, da, db, i32) case TG_OP_##OP: return TG_EW_I32_BINARY_##i32;
#include "../ir/ops.def"
    default: return a;
    }
}

/* Element offsets of row r's first element for every operand of it (what
 * tg_iter_row gives; kept local so these kernels do not depend on how the
 * shared iterator steps). */
static void row_offsets(const tg_iter *it, int64_t r, int64_t *off) {
    for (int o = 0; o < it->nops; o++) off[o] = 0;
    for (int i = it->nd - 2; i >= 0; i--) {
        int64_t q = r % it->d[i];
        r /= it->d[i];
        for (int o = 0; o < it->nops; o++) off[o] += q * it->st[o][i];
    }
}

static void bm_rows(void *arg, int64_t lo, int64_t hi) {
    bm_job *j = arg;
    const tg_node *n = j->n;
    int k = j->it.nd - 1, side = n->op == TG_OP_BINARY_GRAD ? n->at.binary_grad.side : -1;
    tg_opcode op = side < 0 ? n->op : n->at.binary_grad.op;
    int64_t off[4], sa = j->it.st[1][k], sb = j->it.st[2][k], sg = side < 0 ? 0 : j->it.st[3][k], len = j->it.inner;
    for (int64_t r = lo; r < hi; r++) {
        row_offsets(&j->it, r, off);
        if (n->dtype == TG_I32) {
            const int32_t *a = (const int32_t *)j->in[0] + off[1], *b = (const int32_t *)j->in[1] + off[2];
            int32_t *y = (int32_t *)j->out + off[0];
            for (int64_t i = 0; i < len; i++) y[i] = bm_i32(op, a[i * sa], b[i * sb]);
            continue;
        }
        bm_row(op, side, (float *)j->out + off[0], (const float *)j->in[0] + off[1], sa, (const float *)j->in[1] + off[2],
               sb, side < 0 ? NULL : (const float *)j->in[2] + off[3], sg, len);
    }
}

static void bm_run(cpu_ctx *c, const tg_graph *g, const tg_node *n, int nin, void *out, void *const *in) {
    bm_job j = {n, {0}, {in[0], in[1], nin > 2 ? in[2] : NULL}, out};
    int64_t st[3][TG_MAX_DIMS];
    for (int k = 0; k < nin; k++) tg_shape_bcast_strides(ir_node(g, n->in[k])->shape, n->shape, st[k]);
    tg_iter_init(&j.it, n->shape, nin, st);
    tg_iter_split_long_row(&j.it);
    int64_t grain = GRAIN / (j.it.inner ? j.it.inner : 1);
    tg_cpu_parallel(c, j.it.rows, grain > 0 ? grain : 1, bm_rows, &j);
}

/* Any of the binary math rows: a, b broadcast to y, f32 (or i32 for those
 * with an i32 form). */
TG_CPU_KERNEL(tg_cpu_binary_math) { bm_run(c, g, ir_node(g, id), 2, out, in); }

/* binary_grad(a, b, gy) -> the cotangent of operand side (0 = a, 1 = b) of
 * its forward row, over gy's shape (a and b broadcast to it), f32. */
TG_CPU_KERNEL(tg_cpu_binary_grad) { bm_run(c, g, ir_node(g, id), 3, out, in); }

/* ---- min / max and their backward ----
 * Rows of the merged broadcast iteration (tg_iter); operands with stride 0
 * along a row are splatted, so the common tensor-scalar form runs at full
 * vector width. Branch-free: a data-dependent branch per element costs more
 * than the comparison itself on random data. */
typedef struct {
    const tg_node *n;
    tg_iter it;
    const void *in[3];
    void *out;
} mm_job;

/* max(a, b) / min(a, b); NaN in either operand gives NaN, as torch.maximum */
TG_MULTI(static, minmax_row, (bool is_max, float *y, const float *a, int64_t sa, const float *b, int64_t sb,
          int64_t len),
         (is_max, y, a, sa, b, sb, len)) {
    for (int64_t i = 0; i < len; i += VL) {
        int64_t m = len - i < VL ? len - i : VL;
        vf x = vload_st(a + i * sa, sa, m), z = vload_st(b + i * sb, sb, m);
        vi pick_a = (is_max ? x > z : x < z) | (x != x);
        vf r = vsel(pick_a, x, z);
        if (m == VL) vstore(y + i, r);
        else vstore_n(y + i, r, m);
    }
}

static void minmax_rows(void *arg, int64_t lo, int64_t hi) {
    mm_job *j = arg;
    int k = j->it.nd - 1;
    int64_t off[4], sa = j->it.st[1][k], sb = j->it.st[2][k], len = j->it.inner;
    bool is_max = j->n->op == TG_OP_MAX, f32 = j->n->dtype == TG_F32;
    for (int64_t r = lo; r < hi; r++) {
        row_offsets(&j->it, r, off);
        if (f32) {
            minmax_row(is_max, (float *)j->out + off[0], (const float *)j->in[0] + off[1], sa,
                       (const float *)j->in[1] + off[2], sb, len);
        } else {
            const int32_t *a = (const int32_t *)j->in[0] + off[1], *b = (const int32_t *)j->in[1] + off[2];
            int32_t *y = (int32_t *)j->out + off[0];
            for (int64_t i = 0; i < len; i++) {
                int32_t x = a[i * sa], z = b[i * sb];
                y[i] = (is_max ? x > z : x < z) ? x : z;
            }
        }
    }
}

/* min / max: a, b broadcast to y, f32 or i32 */
TG_CPU_KERNEL(tg_cpu_minmax) {
    const tg_node *n = ir_node(g, id);
    mm_job j = {n, {0}, {in[0], in[1], NULL}, out};
    int64_t st[2][TG_MAX_DIMS];
    for (int k = 0; k < 2; k++) tg_shape_bcast_strides(ir_node(g, n->in[k])->shape, n->shape, st[k]);
    tg_iter_init(&j.it, n->shape, 2, st);
    tg_iter_split_long_row(&j.it);
    int64_t grain = GRAIN / (j.it.inner ? j.it.inner : 1);
    tg_cpu_parallel(c, j.it.rows, grain > 0 ? grain : 1, minmax_rows, &j);
}

/* minmax_grad(a, b, gy) -> the share of gy that goes to one operand (side
 * 0 = a, 1 = b) of min or max, over gy's shape (the forward output;
 * a and b broadcast to it). The operand that wins gets all of gy; at a tie
 * each gets half, as torch.maximum / torch.minimum do. */
TG_MULTI(static, minmax_grad_row, (bool is_max, float *gx, const float *own, int64_t so, const float *oth, int64_t sa,
          const float *gy, int64_t sg, int64_t len),
         (is_max, gx, own, so, oth, sa, gy, sg, len)) {
    for (int64_t i = 0; i < len; i += VL) {
        int64_t m = len - i < VL ? len - i : VL;
        vf x = vload_st(own + i * so, so, m), z = vload_st(oth + i * sa, sa, m), g = vload_st(gy + i * sg, sg, m);
        vi win = is_max ? x > z : x < z;
        vf r = vsel(win, g, vsel(x == z, 0.5f * g, vsplat(0.0f)));
        if (m == VL) vstore(gx + i, r);
        else vstore_n(gx + i, r, m);
    }
}

static void minmax_grad_rows(void *arg, int64_t lo, int64_t hi) {
    mm_job *j = arg;
    int k = j->it.nd - 1;
    int64_t off[4];
    bool is_max = j->n->at.minmax_grad.op == TG_OP_MAX;
    for (int64_t r = lo; r < hi; r++) {
        row_offsets(&j->it, r, off);
        /* operands 1, 2, 3 of the iteration: own side, other side, gy */
        minmax_grad_row(is_max, (float *)j->out + off[0], (const float *)j->in[0] + off[1], j->it.st[1][k],
                        (const float *)j->in[1] + off[2], j->it.st[2][k], (const float *)j->in[2] + off[3],
                        j->it.st[3][k], j->it.inner);
    }
}

TG_CPU_KERNEL(tg_cpu_minmax_grad) {
    const tg_node *n = ir_node(g, id);
    int side = n->at.minmax_grad.side;
    mm_job j = {n, {0}, {in[side], in[1 - side], in[2]}, out};
    int64_t st[3][TG_MAX_DIMS];
    tg_shape_bcast_strides(ir_node(g, n->in[side])->shape, n->shape, st[0]);
    tg_shape_bcast_strides(ir_node(g, n->in[1 - side])->shape, n->shape, st[1]);
    tg_shape_bcast_strides(ir_node(g, n->in[2])->shape, n->shape, st[2]);
    tg_iter_init(&j.it, n->shape, 3, st);
    tg_iter_split_long_row(&j.it);
    int64_t grain = GRAIN / (j.it.inner ? j.it.inner : 1);
    tg_cpu_parallel(c, j.it.rows, grain > 0 ? grain : 1, minmax_grad_rows, &j);
}

/* ---- ops over one axis: the tensor viewed as [outer, A, inner] ---- */

typedef struct {
    const tg_node *n;
    int64_t outer, A, inner;
    const void *x, *x2;
    void *y;
    int64_t tile; /* inner positions per task when inner > 1 */
    bool f32;     /* argmax/argmin: the input's dtype */
} ax_job;

static void ax_view(tg_shape s, int axis, int64_t *outer, int64_t *A, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s.d[i];
    for (int i = axis + 1; i < s.ndim; i++) *inner *= s.d[i];
    *A = s.d[axis];
}

/* Tasks over [outer, inner] in tiles of `tile` inner positions. */
static int64_t ax_tasks(const ax_job *j) { return j->outer * ((j->inner + j->tile - 1) / j->tile); }
static void ax_task(const ax_job *j, int64_t t, int64_t *o, int64_t *j0, int64_t *w) {
    int64_t per = (j->inner + j->tile - 1) / j->tile;
    *o = t / per;
    *j0 = (t % per) * j->tile;
    *w = j->inner - *j0 < j->tile ? j->inner - *j0 : j->tile;
}

/* softmax along a contiguous row of A: y = e^(x - max) / sum. The sum runs
 * over VL lane accumulators, then the lanes in order, then the tail: a
 * fixed order for a given A. */
TG_MULTI(static, softmax_row, (const float *x, float *y, int64_t A), (x, y, A)) {
    vf vm = vsplat(-INFINITY);
    for (int64_t i = 0; i < A; i += VL) {
        int64_t m = A - i < VL ? A - i : VL;
        vf v = m == VL ? vload(x + i) : vload_n(x + i, m);
        if (m < VL)
            for (int64_t k = m; k < VL; k++) v[k] = -INFINITY;
        vm = vsel(v > vm, v, vm);
    }
    float mx = -INFINITY;
    for (int k = 0; k < VL; k++) mx = vm[k] > mx ? vm[k] : mx;
    vf acc = vsplat(0.0f);
    int64_t i = 0;
    for (; i + VL <= A; i += VL) {
        vf e = vexp(vload(x + i) - mx);
        vstore(y + i, e);
        acc += e;
    }
    if (i < A) vstore_n(y + i, vexp(vload_n(x + i, A - i) - mx), A - i);
    float sum = 0.0f;
    for (int k = 0; k < VL; k++) sum += acc[k];
    for (; i < A; i++) sum += y[i];
    float inv = 1.0f / sum;
    VMAP(y, y, A, v * inv);
}

/* softmax along a strided axis for a tile of w <= 4 VL adjacent inner
 * positions: every loop runs along the contiguous inner positions, with the
 * running max and sum of each position in a vector lane. */
TG_MULTI(static, softmax_tile, (const float *x, float *y, int64_t A, int64_t inner, int64_t w), (x, y, A, inner, w)) {
    enum { NV = 4 };
    vf m[NV], s[NV];
    int64_t nv = (w + VL - 1) / VL;
    for (int v = 0; v < NV; v++) m[v] = vsplat(-INFINITY), s[v] = vsplat(0.0f);
    for (int64_t a = 0; a < A; a++)
        for (int64_t v = 0; v < nv; v++) {
            vf t = vload_st(x + a * inner + v * VL, 1, w - v * VL < VL ? w - v * VL : VL);
            m[v] = vsel(t > m[v], t, m[v]);
        }
    for (int64_t a = 0; a < A; a++)
        for (int64_t v = 0; v < nv; v++) {
            int64_t n = w - v * VL < VL ? w - v * VL : VL, at = a * inner + v * VL;
            vf e = vexp(vload_st(x + at, 1, n) - m[v]);
            s[v] += e;
            if (n == VL) vstore(y + at, e);
            else vstore_n(y + at, e, n);
        }
    for (int64_t v = 0; v < nv; v++) s[v] = 1.0f / s[v];
    for (int64_t a = 0; a < A; a++)
        for (int64_t v = 0; v < nv; v++) {
            int64_t n = w - v * VL < VL ? w - v * VL : VL, at = a * inner + v * VL;
            vf r = vload_st(y + at, 1, n) * s[v];
            if (n == VL) vstore(y + at, r);
            else vstore_n(y + at, r, n);
        }
}

static void softmax_tasks(void *arg, int64_t lo, int64_t hi) {
    ax_job *j = arg;
    const float *x = j->x;
    float *y = j->y;
    for (int64_t t = lo; t < hi; t++) {
        if (j->inner == 1) {
            softmax_row(x + t * j->A, y + t * j->A, j->A);
        } else {
            int64_t o, j0, w;
            ax_task(j, t, &o, &j0, &w);
            int64_t base = o * j->A * j->inner + j0;
            softmax_tile(x + base, y + base, j->A, j->inner, w);
        }
    }
}

/* softmax over the axis: x, y [outer, A, inner] f32 */
TG_CPU_KERNEL(tg_cpu_softmax) {
    const tg_node *n = ir_node(g, id);
    ax_job j = {n, 0, 0, 0, in[0], NULL, out, 4 * VL, true};
    ax_view(n->shape, (int)n->at.axis.axis, &j.outer, &j.A, &j.inner);
    if (j.A == 0) return;
    int64_t per_task = j.A * (j.inner == 1 ? 1 : j.tile);
    tg_cpu_parallel(c, ax_tasks(&j), 1 + 8192 / per_task, softmax_tasks, &j);
}

/* softmax_grad(y, gy) along the axis (the backward of softmax and of
 * softmax_causal): gx = y (gy - sum(gy y)), [outer, A, inner] f32. */
TG_MULTI(, tg_cpu_softmax_grad_row, (const float *y, const float *gy, float *gx, int64_t A), (y, gy, gx, A)) {
    vf acc = vsplat(0.0f);
    int64_t i = 0;
    for (; i + VL <= A; i += VL) acc += vload(gy + i) * vload(y + i);
    float d = 0.0f;
    for (int k = 0; k < VL; k++) d += acc[k];
    for (; i < A; i++) d += gy[i] * y[i];
    VMAP2(y, gy, gx, A, s * (g - d));
}

TG_MULTI(static, softmax_grad_tile, (const float *y, const float *gy, float *gx, int64_t A, int64_t inner, int64_t w),
         (y, gy, gx, A, inner, w)) {
    enum { NV = 4 };
    vf d[NV];
    int64_t nv = (w + VL - 1) / VL;
    for (int v = 0; v < NV; v++) d[v] = vsplat(0.0f);
    for (int64_t a = 0; a < A; a++)
        for (int64_t v = 0; v < nv; v++) {
            int64_t n = w - v * VL < VL ? w - v * VL : VL, at = a * inner + v * VL;
            d[v] += vload_st(gy + at, 1, n) * vload_st(y + at, 1, n);
        }
    for (int64_t a = 0; a < A; a++)
        for (int64_t v = 0; v < nv; v++) {
            int64_t n = w - v * VL < VL ? w - v * VL : VL, at = a * inner + v * VL;
            vf s = vload_st(y + at, 1, n), r = s * (vload_st(gy + at, 1, n) - d[v]);
            if (n == VL) vstore(gx + at, r);
            else vstore_n(gx + at, r, n);
        }
}

static void softmax_grad_tasks(void *arg, int64_t lo, int64_t hi) {
    ax_job *j = arg;
    const float *y = j->x, *gy = j->x2;
    float *gx = j->y;
    for (int64_t t = lo; t < hi; t++) {
        if (j->inner == 1) {
            tg_cpu_softmax_grad_row(y + t * j->A, gy + t * j->A, gx + t * j->A, j->A);
        } else {
            int64_t o, j0, w;
            ax_task(j, t, &o, &j0, &w);
            int64_t base = o * j->A * j->inner + j0;
            softmax_grad_tile(y + base, gy + base, gx + base, j->A, j->inner, w);
        }
    }
}

TG_CPU_KERNEL(tg_cpu_softmax_grad) {
    const tg_node *n = ir_node(g, id);
    ax_job j = {n, 0, 0, 0, in[0], in[1], out, 4 * VL, true};
    ax_view(n->shape, (int)n->at.axis.axis, &j.outer, &j.A, &j.inner);
    if (j.A == 0) return;
    int64_t per_task = j.A * (j.inner == 1 ? 1 : j.tile);
    tg_cpu_parallel(c, ax_tasks(&j), 1 + 8192 / per_task, softmax_grad_tasks, &j);
}

/* ---- argmax / argmin, amax / amin ----
 * x [outer, A, inner] (f32 or i32) -> i32 [outer, 1, inner]: the first
 * index of the extreme value along A (argmax / argmin), or that value in
 * x's dtype (amax / amin). A NaN counts as more extreme than any number
 * (the first NaN wins), as in PyTorch. */
/* BETTER(v, b): v replaces the best so far b */
#define ARG_LINES(T, BETTER)                                                               \
    do {                                                                                   \
        const T *x = j->x;                                                                 \
        bool value = j->n->op == TG_OP_AMAX || j->n->op == TG_OP_AMIN;                     \
        for (int64_t t = lo; t < hi; t++) {                                                \
            int64_t o, j0, w;                                                              \
            ax_task(j, t, &o, &j0, &w);                                                    \
            const T *xb = x + o * j->A * j->inner + j0;                                    \
            int32_t at[64];                                                                \
            T best[64];                                                                    \
            for (int64_t q = 0; q < w; q++) best[q] = xb[q], at[q] = 0;                    \
            for (int64_t a = 1; a < j->A; a++)                                             \
                for (int64_t q = 0; q < w; q++) {                                          \
                    T v = xb[a * j->inner + q], b = best[q];                               \
                    if (BETTER) best[q] = v, at[q] = (int32_t)a;                           \
                }                                                                          \
            if (value) memcpy((T *)j->y + o * j->inner + j0, best, sizeof(T) * (size_t)w); \
            else memcpy((int32_t *)j->y + o * j->inner + j0, at, sizeof(int32_t) * (size_t)w); \
        }                                                                                  \
    } while (0)

static void arg_tasks(void *arg, int64_t lo, int64_t hi) {
    ax_job *j = arg;
    bool is_max = j->n->op == TG_OP_ARGMAX || j->n->op == TG_OP_AMAX;
    if (j->f32 && is_max) ARG_LINES(float, v > b || (v != v && b == b));
    else if (j->f32) ARG_LINES(float, v < b || (v != v && b == b));
    else if (is_max) ARG_LINES(int32_t, v > b);
    else ARG_LINES(int32_t, v < b);
}

/* argmax / argmin / amax / amin over the axis */
TG_CPU_KERNEL(tg_cpu_argmax) {
    const tg_node *n = ir_node(g, id), *x = ir_node(g, n->in[0]);
    ax_job j = {n, 0, 0, 0, in[0], NULL, out, 64, x->dtype == TG_F32};
    ax_view(x->shape, (int)n->at.axis.axis, &j.outer, &j.A, &j.inner);
    if (j.A == 0) return;
    tg_cpu_parallel(c, ax_tasks(&j), 1 + 8192 / (j.A * (j.inner < j.tile ? j.inner : j.tile)), arg_tasks, &j);
}

/* ---- narrow, its adjoint, concat: block copies, 4-byte elements ---- */

typedef struct {
    const tg_node *n;
    int64_t outer, inner;
    void *const *in;
    void *out;
    const tg_graph *g;
} cp_job;

/* narrow: x [outer, A, inner] -> y [outer, L, inner] = x[:, start:start+L, :] */
static void narrow_rows(void *arg, int64_t lo, int64_t hi) {
    cp_job *j = arg;
    const tg_node *n = j->n;
    int64_t axis = n->at.axis.axis, A = ir_node(j->g, n->in[0])->shape.d[axis], L = n->shape.d[axis];
    int64_t blk = L * j->inner;
    for (int64_t o = lo; o < hi; o++)
        memcpy((uint32_t *)j->out + o * blk, (const uint32_t *)j->in[0] + (o * A + n->at.axis.start) * j->inner,
               (size_t)blk * 4);
}

/* narrow_grad: gy [outer, L, inner] -> gx [outer, A, inner], zero outside
 * [start, start+L) */
static void narrow_grad_rows(void *arg, int64_t lo, int64_t hi) {
    cp_job *j = arg;
    const tg_node *n = j->n;
    int64_t axis = n->at.axis.axis, A = n->shape.d[axis], L = ir_node(j->g, n->in[0])->shape.d[axis];
    int64_t before = n->at.axis.start * j->inner, mid = L * j->inner, after = (A - n->at.axis.start - L) * j->inner;
    for (int64_t o = lo; o < hi; o++) {
        uint32_t *y = (uint32_t *)j->out + o * A * j->inner;
        memset(y, 0, (size_t)before * 4);
        memcpy(y + before, (const uint32_t *)j->in[0] + o * mid, (size_t)mid * 4);
        memset(y + before + mid, 0, (size_t)after * 4);
    }
}

/* concat: inputs k [outer, A_k, inner] -> y [outer, sum A_k, inner] */
static void concat_rows(void *arg, int64_t lo, int64_t hi) {
    cp_job *j = arg;
    const tg_node *n = j->n;
    int64_t axis = n->at.axis.axis, blk = n->shape.d[axis] * j->inner;
    for (int64_t o = lo; o < hi; o++) {
        uint32_t *y = (uint32_t *)j->out + o * blk;
        for (int k = 0; k < n->nin; k++) {
            int64_t kb = ir_node(j->g, n->in[k])->shape.d[axis] * j->inner;
            memcpy(y, (const uint32_t *)j->in[k] + o * kb, (size_t)kb * 4);
            y += kb;
        }
    }
}

static void run_copy(cpu_ctx *c, const tg_graph *g, int id, void *out, void *const *in, tg_range_fn fn) {
    const tg_node *n = ir_node(g, id);
    cp_job j = {n, 1, 1, in, out, g};
    int64_t A;
    ax_view(n->shape, (int)n->at.axis.axis, &j.outer, &A, &j.inner);
    int64_t row = A * j.inner;
    tg_cpu_parallel(c, j.outer, 1 + 4 * GRAIN / (row + 1), fn, &j);
}

TG_CPU_KERNEL(tg_cpu_narrow) { run_copy(c, g, id, out, in, narrow_rows); }
TG_CPU_KERNEL(tg_cpu_narrow_grad) { run_copy(c, g, id, out, in, narrow_grad_rows); }
TG_CPU_KERNEL(tg_cpu_concat) { run_copy(c, g, id, out, in, concat_rows); }

/* ---- take_along_axis and its scatter-add ----
 * x [outer, A, inner], idx i32 [outer, K, inner] -> y [outer, K, inner],
 * y[o,k,q] = x[o, idx[o,k,q], q]. A negative index counts from the end; one
 * still out of range reads 0 (and its gradient is dropped). */
static inline int64_t take_index(int32_t i, int64_t A) {
    int64_t v = i < 0 ? (int64_t)i + A : i;
    return v >= 0 && v < A ? v : -1;
}

typedef struct {
    ax_job ax;      /* over idx / y: A here is K */
    int64_t A;      /* the gathered axis of x */
} take_job;

static void take_tasks(void *arg, int64_t lo, int64_t hi) {
    take_job *tj = arg;
    const ax_job *j = &tj->ax;
    const uint32_t *x = j->x;
    const int32_t *idx = j->x2;
    uint32_t *y = j->y;
    int64_t K = j->A, A = tj->A, inner = j->inner;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o, j0, w;
        ax_task(j, t, &o, &j0, &w);
        for (int64_t k = 0; k < K; k++) {
            int64_t r = (o * K + k) * inner + j0;
            for (int64_t q = 0; q < w; q++) {
                int64_t i = take_index(idx[r + q], A);
                y[r + q] = i < 0 ? 0 : x[(o * A + i) * inner + j0 + q];
            }
        }
    }
}

/* take_along_axis_grad: gy [outer, K, inner], idx -> gx [outer, A, inner].
 * Each task owns a tile of inner positions of one outer index, so it owns
 * every gx element it adds to: no atomics, and the additions into one
 * element happen in k order whatever the thread count. */
static void take_grad_tasks(void *arg, int64_t lo, int64_t hi) {
    take_job *tj = arg;
    const ax_job *j = &tj->ax;
    const float *gy = j->x;
    const int32_t *idx = j->x2;
    float *gx = j->y;
    int64_t K = j->A, A = tj->A, inner = j->inner;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o, j0, w;
        ax_task(j, t, &o, &j0, &w);
        for (int64_t a = 0; a < A; a++) memset(gx + (o * A + a) * inner + j0, 0, (size_t)w * sizeof(float));
        for (int64_t k = 0; k < K; k++) {
            int64_t r = (o * K + k) * inner + j0;
            for (int64_t q = 0; q < w; q++) {
                int64_t i = take_index(idx[r + q], A);
                if (i >= 0) gx[(o * A + i) * inner + j0 + q] += gy[r + q];
            }
        }
    }
}

static void run_take(cpu_ctx *c, const tg_graph *g, int id, void *out, void *const *in, bool grad) {
    const tg_node *n = ir_node(g, id);
    int axis = (int)n->at.axis.axis;
    const tg_node *ix = ir_node(g, n->in[1]);
    take_job tj = {{n, 0, 0, 0, in[0], in[1], out, 256, false}, 0};
    ax_view(ix->shape, axis, &tj.ax.outer, &tj.ax.A, &tj.ax.inner);
    tj.A = (grad ? n : ir_node(g, n->in[0]))->shape.d[axis];
    int64_t per = (tj.ax.A + tj.A) * (tj.ax.inner < tj.ax.tile ? tj.ax.inner : tj.ax.tile);
    tg_cpu_parallel(c, ax_tasks(&tj.ax), 1 + GRAIN / (per + 1), grad ? take_grad_tasks : take_tasks, &tj);
}

TG_CPU_KERNEL(tg_cpu_take_along_axis) { run_take(c, g, id, out, in, false); }
TG_CPU_KERNEL(tg_cpu_take_along_axis_grad) { run_take(c, g, id, out, in, true); }

/* ---- cumsum: x, y [outer, A, inner], running sums along A ----
 * Each task owns a tile of inner positions of one outer index and adds
 * along A in order (from the end when reversed): a fixed order whatever the
 * thread count. i32 wraps. */
static void cumsum_tasks(void *arg, int64_t lo, int64_t hi) {
    ax_job *j = arg;
    bool rev = j->n->at.scan.reverse;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o, j0, w;
        ax_task(j, t, &o, &j0, &w);
        int64_t base = o * j->A * j->inner + j0;
        if (j->f32) {
            float acc[64] = {0};
            const float *x = (const float *)j->x + base;
            float *y = (float *)j->y + base;
            for (int64_t s = 0; s < j->A; s++) {
                int64_t a = rev ? j->A - 1 - s : s;
                for (int64_t q = 0; q < w; q++) y[a * j->inner + q] = acc[q] += x[a * j->inner + q];
            }
        } else {
            uint32_t acc[64] = {0};
            const uint32_t *x = (const uint32_t *)j->x + base;
            uint32_t *y = (uint32_t *)j->y + base;
            for (int64_t s = 0; s < j->A; s++) {
                int64_t a = rev ? j->A - 1 - s : s;
                for (int64_t q = 0; q < w; q++) y[a * j->inner + q] = acc[q] += x[a * j->inner + q];
            }
        }
    }
}

TG_CPU_KERNEL(tg_cpu_cumsum) {
    const tg_node *n = ir_node(g, id);
    ax_job j = {n, 0, 0, 0, in[0], NULL, out, 64, n->dtype == TG_F32};
    ax_view(n->shape, (int)n->at.scan.axis, &j.outer, &j.A, &j.inner);
    if (j.A == 0) return;
    tg_cpu_parallel(c, ax_tasks(&j), 1 + GRAIN / (j.A * (j.inner < j.tile ? j.inner : j.tile)), cumsum_tasks, &j);
}

/* ---- topk: x [outer, A, inner] -> i32 [outer, k, inner] ----
 * The entries of a line in one strict order (larger first, or smaller
 * first; NaN after every number when smaller, before when larger; ties by
 * index), the first k of it. The WGSL kernel selects by the same order, so
 * both give the same indices. */
typedef struct {
    const ax_job *j;
    const void *x; /* the line's first entry */
    bool largest;
} topk_line;

static float topk_f(const topk_line *l, int64_t a) { return ((const float *)l->x)[a * l->j->inner]; }
static int32_t topk_i(const topk_line *l, int64_t a) { return ((const int32_t *)l->x)[a * l->j->inner]; }

/* true when entry a comes before entry b */
static bool topk_before(const topk_line *l, int64_t a, int64_t b) {
    if (l->j->f32) {
        float va = topk_f(l, a), vb = topk_f(l, b);
        bool na = va != va, nb = vb != vb;
        if (na != nb) return l->largest ? na : nb;
        if (!na && va != vb) return l->largest ? va > vb : va < vb;
    } else {
        int32_t va = topk_i(l, a), vb = topk_i(l, b);
        if (va != vb) return l->largest ? va > vb : va < vb;
    }
    return a < b;
}

/* idx[0, n) sorted by topk_before, merging runs through tmp */
static void topk_sort(const topk_line *l, int32_t *idx, int32_t *tmp, int64_t n) {
    for (int64_t run = 1; run < n; run *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * run) {
            int64_t mid = lo + run < n ? lo + run : n, hi = lo + 2 * run < n ? lo + 2 * run : n, p = lo, q = mid, o = lo;
            while (p < mid && q < hi) tmp[o++] = topk_before(l, idx[q], idx[p]) ? idx[q++] : idx[p++];
            while (p < mid) tmp[o++] = idx[p++];
            while (q < hi) tmp[o++] = idx[q++];
        }
        memcpy(idx, tmp, sizeof(int32_t) * (size_t)n);
    }
}

typedef struct {
    ax_job ax;
    int64_t k;
} topk_job;

static void topk_tasks(void *arg, int64_t lo, int64_t hi) {
    topk_job *tj = arg;
    const ax_job *j = &tj->ax;
    int64_t A = j->A, k = tj->k, inner = j->inner;
    /* the sort's index buffers; without them (no memory) the passes below, slower, give the same result */
    int32_t small[2 * 64], *idx = A <= 64 ? small : malloc(sizeof(int32_t) * 2 * (size_t)A);
    for (int64_t t = lo; t < hi; t++) {
        int64_t o = t / inner, q = t % inner;
        topk_line l = {j, (const char *)j->x + 4 * (o * A * inner + q), j->n->at.topk.largest};
        int32_t *y = (int32_t *)j->y + o * k * inner + q;
        if (k <= 8 || !idx) { /* k passes, each taking the first entry after the last one taken */
            int64_t prev = -1;
            for (int64_t r = 0; r < k; r++) {
                int64_t best = -1;
                for (int64_t a = 0; a < A; a++)
                    if ((prev < 0 || topk_before(&l, prev, a)) && (best < 0 || topk_before(&l, a, best))) best = a;
                y[r * inner] = (int32_t)best;
                prev = best;
            }
        } else {
            for (int64_t a = 0; a < A; a++) idx[a] = (int32_t)a;
            topk_sort(&l, idx, idx + A, A);
            for (int64_t r = 0; r < k; r++) y[r * inner] = idx[r];
        }
    }
    if (idx != small) free(idx);
}

TG_CPU_KERNEL(tg_cpu_topk) {
    const tg_node *n = ir_node(g, id), *x = ir_node(g, n->in[0]);
    topk_job tj = {{n, 0, 0, 0, in[0], NULL, out, 1, x->dtype == TG_F32}, n->at.topk.k};
    ax_view(x->shape, (int)n->at.topk.axis, &tj.ax.outer, &tj.ax.A, &tj.ax.inner);
    int64_t lines = tj.ax.outer * tj.ax.inner, per = tj.ax.A * (tj.k <= 8 ? tj.k : 16);
    tg_cpu_parallel(c, lines, 1 + GRAIN / (per + 1), topk_tasks, &tj);
}

/* ---- pad along one axis: x [outer, A, inner] -> y [outer, B + A + F, inner] ----
 * Output position p copies x at src(p - B): itself inside, else the value
 * (constant), the mirror image about the edge entry (reflect) or the edge
 * entry (replicate). */
static int64_t pad_src(int mode, int64_t s, int64_t A) {
    if (s >= 0 && s < A) return s;
    if (mode == TG_PAD_REFLECT) return s < 0 ? -s : 2 * (A - 1) - s;
    if (mode == TG_PAD_REPLICATE) return s < 0 ? 0 : A - 1;
    return -1;
}

typedef struct {
    const tg_node *n;
    int64_t outer, A, P, inner; /* P: the padded axis' length */
    const void *x;
    void *y;
} pad_job;

/* rows [lo, hi) of y viewed as [outer * P, inner] */
static void pad_rows(void *arg, int64_t lo, int64_t hi) {
    pad_job *j = arg;
    const tg_node *n = j->n;
    uint32_t fill;
    if (n->dtype == TG_F32) memcpy(&fill, &n->at.pad.value, 4);
    else fill = (uint32_t)tg_ir_f2i(n->at.pad.value);
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / j->P, p = r % j->P, s = pad_src(n->at.pad.mode, p - n->at.pad.before, j->A);
        uint32_t *y = (uint32_t *)j->y + r * j->inner;
        if (s >= 0) memcpy(y, (const uint32_t *)j->x + (o * j->A + s) * j->inner, (size_t)j->inner * 4);
        else
            for (int64_t q = 0; q < j->inner; q++) y[q] = fill;
    }
}

TG_CPU_KERNEL(tg_cpu_pad) {
    const tg_node *n = ir_node(g, id);
    pad_job j = {n, 0, 0, 0, 0, in[0], out};
    ax_view(n->shape, (int)n->at.pad.axis, &j.outer, &j.P, &j.inner);
    j.A = ir_node(g, n->in[0])->shape.d[n->at.pad.axis];
    tg_cpu_parallel(c, j.outer * j.P, 1 + GRAIN / (j.inner + 1), pad_rows, &j);
}

/* pad_grad: gy [outer, P, inner] -> gx [outer, A, inner]. Entry a sums, in
 * this order, gy at a + B, then the positions before the data that copy it
 * (increasing), then those after it (increasing); a row of gx belongs to one
 * task, so the order is fixed. */
static void pad_grad_rows(void *arg, int64_t lo, int64_t hi) {
    pad_job *j = arg;
    const tg_node *n = j->n;
    int64_t A = j->A, B = n->at.pad.before, inner = j->inner;
    int mode = n->at.pad.mode;
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / A, a = r % A;
        const float *gy = (const float *)j->x + o * j->P * inner;
        float *gx = (float *)j->y + r * inner;
        memcpy(gx, gy + (a + B) * inner, (size_t)inner * sizeof(float));
        if (mode == TG_PAD_CONSTANT) continue;
        for (int side = 0; side < 2; side++) /* the positions before the data, then after it */
            for (int64_t p = side ? B + A : 0; p < (side ? j->P : B); p++) {
                if (pad_src(mode, p - B, A) != a) continue;
                for (int64_t q = 0; q < inner; q++) gx[q] += gy[p * inner + q];
            }
    }
}

TG_CPU_KERNEL(tg_cpu_pad_grad) {
    const tg_node *n = ir_node(g, id);
    pad_job j = {n, 0, 0, 0, 0, in[0], out};
    ax_view(n->shape, (int)n->at.pad.axis, &j.outer, &j.A, &j.inner);
    j.P = ir_node(g, n->in[0])->shape.d[n->at.pad.axis];
    if (j.A == 0) return;
    tg_cpu_parallel(c, j.outer * j.A, 1 + GRAIN / (j.inner * 2 + 1), pad_grad_rows, &j);
}
