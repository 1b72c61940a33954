/* Elementwise CPU kernels: binary ops with NumPy broadcasting, cast, where,
 * broadcast_to, permute, constants (the math rows of ops.def are
 * kernels_math.c's). Rows of the merged iteration space are split across
 * threads when there is enough work. */
#include <string.h>

#include "cpu.h"
#include "kernels.h"

#define GRAIN 16384 /* elements per task, below which threads cost more than they save */

/* ---- constants ---- */

TG_CPU_KERNEL(tg_cpu_const) {
    (void)c, (void)in;
    const tg_node *n = ir_node(g, id);
    int64_t N = tg_ir_numel(n);
    if (n->data) {
        memcpy(out, n->data, (size_t)N * sizeof(float));
    } else if (n->dtype == TG_F32) {
        for (int64_t i = 0; i < N; i++) ((float *)out)[i] = n->at.fill.value;
    } else {
        int32_t v = tg_ir_f2i(n->at.fill.value);
        for (int64_t i = 0; i < N; i++) ((int32_t *)out)[i] = v;
    }
}

TG_CPU_KERNEL(tg_cpu_arange) {
    (void)c, (void)in;
    const tg_node *n = ir_node(g, id);
    for (int64_t i = 0; i < n->at.arange.len; i++) {
        if (n->dtype == TG_F32) ((float *)out)[i] = (float)i;
        else ((int32_t *)out)[i] = (int32_t)i;
    }
}

/* ---- binary ---- */

typedef struct {
    const tg_graph *g;
    const tg_node *n;
    tg_iter it;
    void *out;
    void *const *in;
} ew_job;

#define LOOP2(T_OUT, T_IN, EXPR)                                                   \
    do {                                                                           \
        T_OUT *o = (T_OUT *)op;                                                    \
        const T_IN *x = (const T_IN *)ap, *y = (const T_IN *)bp;                   \
        if (sa == 1 && sb == 1)                                                    \
            for (int64_t i = 0; i < len; i++) { T_IN a = x[i], b = y[i]; o[i] = EXPR; } \
        else if (sa == 1 && sb == 0) {                                             \
            T_IN b = y[0];                                                         \
            for (int64_t i = 0; i < len; i++) { T_IN a = x[i]; o[i] = EXPR; }     \
        } else if (sa == 0 && sb == 1) {                                           \
            T_IN a = x[0];                                                         \
            for (int64_t i = 0; i < len; i++) { T_IN b = y[i]; o[i] = EXPR; }     \
        } else                                                                     \
            for (int64_t i = 0; i < len; i++) { T_IN a = x[i * sa], b = y[i * sb]; o[i] = EXPR; } \
    } while (0)

static int32_t idiv(int32_t a, int32_t b) { /* floor division, 0 for b == 0 */
    if (b == 0) return 0;
    if (b == -1) return (int32_t)(0u - (uint32_t)a); /* INT32_MIN / -1 traps; it wraps to itself, as in WGSL */
    int32_t q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static void binary_row(tg_opcode code, tg_dtype dt, int64_t len, void *op, const void *ap, int64_t sa,
                       const void *bp, int64_t sb) {
    if (dt == TG_F32) {
        switch (code) {
        case TG_OP_ADD: LOOP2(float, float, a + b); break;
        case TG_OP_SUB: LOOP2(float, float, a - b); break;
        case TG_OP_MUL: LOOP2(float, float, a * b); break;
        case TG_OP_DIV: LOOP2(float, float, a / b); break;
        case TG_OP_LESS: LOOP2(uint32_t, float, a < b); break;
        case TG_OP_GREATER: LOOP2(uint32_t, float, a > b); break;
        default: break;
        }
    } else {
        switch (code) {
        case TG_OP_ADD: LOOP2(int32_t, int32_t, (int32_t)((uint32_t)a + (uint32_t)b)); break;
        case TG_OP_SUB: LOOP2(int32_t, int32_t, (int32_t)((uint32_t)a - (uint32_t)b)); break;
        case TG_OP_MUL: LOOP2(int32_t, int32_t, (int32_t)((uint32_t)a * (uint32_t)b)); break;
        case TG_OP_DIV: LOOP2(int32_t, int32_t, idiv(a, b)); break;
        case TG_OP_LESS: LOOP2(uint32_t, int32_t, a < b); break;
        case TG_OP_GREATER: LOOP2(uint32_t, int32_t, a > b); break;
        default: break;
        }
    }
}

static void binary_rows(void *arg, int64_t lo, int64_t hi) {
    ew_job *j = arg;
    tg_dtype dt = ir_node(j->g, j->n->in[0])->dtype;
    int64_t off[4], idx[TG_MAX_DIMS];
    tg_iter_row(&j->it, lo, idx, off);
    for (int64_t r = lo; r < hi; r++, tg_iter_next(&j->it, idx, off)) {
        binary_row(j->n->op, dt, j->it.inner, (char *)j->out + 4 * off[0], (const char *)j->in[0] + 4 * off[1],
                   j->it.st[1][j->it.nd - 1], (const char *)j->in[1] + 4 * off[2], j->it.st[2][j->it.nd - 1]);
    }
}

static void run_rows(cpu_ctx *c, ew_job *j, tg_range_fn fn) {
    int64_t grain = GRAIN / (j->it.inner ? j->it.inner : 1);
    tg_cpu_parallel(c, j->it.rows, grain > 0 ? grain : 1, fn, j);
}

void tg_iter_split_long_row(tg_iter *it) {
    if (it->nd != 1 || it->inner < 4 * GRAIN) return;
    int64_t chunk = 4096;
    while (it->inner % chunk) chunk /= 2;
    if (chunk < 256) return;
    it->nd = 2;
    it->d[1] = chunk;
    it->d[0] = it->inner / chunk;
    for (int o = 0; o < it->nops; o++) {
        it->st[o][1] = it->st[o][0];
        it->st[o][0] = it->st[o][1] * chunk;
    }
    it->inner = chunk;
    it->rows = it->d[0];
}

TG_CPU_KERNEL(tg_cpu_binary) {
    ew_job j = {g, ir_node(g, id), {0}, out, in};
    int64_t st[2][TG_MAX_DIMS];
    tg_shape_bcast_strides(ir_node(g, j.n->in[0])->shape, j.n->shape, st[0]);
    tg_shape_bcast_strides(ir_node(g, j.n->in[1])->shape, j.n->shape, st[1]);
    tg_iter_init(&j.it, j.n->shape, 2, st);
    tg_iter_split_long_row(&j.it);
    run_rows(c, &j, binary_rows);
}

/* Casts: f32 -> i32 by tg_ir_f2i; anything -> bool is x != 0. */

TG_CPU_KERNEL(tg_cpu_cast) {
    (void)c;
    const tg_node *n = ir_node(g, id);
    tg_dtype from = ir_node(g, n->in[0])->dtype, to = n->dtype;
    int64_t N = tg_ir_numel(n);
    const void *x = in[0];
    for (int64_t i = 0; i < N; i++) {
        float f = from == TG_F32 ? ((const float *)x)[i] : (float)((const int32_t *)x)[i];
        int32_t v = from == TG_F32 ? tg_ir_f2i(((const float *)x)[i]) : ((const int32_t *)x)[i];
        if (from == TG_BOOL) v = ((const uint32_t *)x)[i] != 0, f = (float)v;
        if (to == TG_F32) ((float *)out)[i] = f;
        else if (to == TG_I32) ((int32_t *)out)[i] = v;
        else ((uint32_t *)out)[i] = from == TG_F32 ? f != 0.0f : v != 0;
    }
}

/* ---- where, broadcast, permute: strided copies ---- */

static void where_rows(void *arg, int64_t lo, int64_t hi) {
    ew_job *j = arg;
    int64_t off[4], idx[TG_MAX_DIMS], k = j->it.nd - 1;
    int64_t sc = j->it.st[1][k], sa = j->it.st[2][k], sb = j->it.st[3][k];
    tg_iter_row(&j->it, lo, idx, off);
    for (int64_t r = lo; r < hi; r++, tg_iter_next(&j->it, idx, off)) {
        const uint32_t *cond = (const uint32_t *)j->in[0] + off[1];
        const uint32_t *a = (const uint32_t *)j->in[1] + off[2], *b = (const uint32_t *)j->in[2] + off[3];
        uint32_t *o = (uint32_t *)j->out + off[0];
        for (int64_t i = 0; i < j->it.inner; i++) o[i] = cond[i * sc] ? a[i * sa] : b[i * sb];
    }
}

TG_CPU_KERNEL(tg_cpu_where) {
    ew_job j = {g, ir_node(g, id), {0}, out, in};
    int64_t st[3][TG_MAX_DIMS];
    for (int k = 0; k < 3; k++) tg_shape_bcast_strides(ir_node(g, j.n->in[k])->shape, j.n->shape, st[k]);
    tg_iter_init(&j.it, j.n->shape, 3, st);
    tg_iter_split_long_row(&j.it);
    run_rows(c, &j, where_rows);
}

static void copy_rows(void *arg, int64_t lo, int64_t hi) {
    ew_job *j = arg;
    int64_t off[4], idx[TG_MAX_DIMS], s = j->it.st[1][j->it.nd - 1];
    tg_iter_row(&j->it, lo, idx, off);
    for (int64_t r = lo; r < hi; r++, tg_iter_next(&j->it, idx, off)) {
        const uint32_t *x = (const uint32_t *)j->in[0] + off[1];
        uint32_t *o = (uint32_t *)j->out + off[0];
        if (s == 1) memcpy(o, x, (size_t)j->it.inner * 4);
        else if (s == 0)
            for (int64_t i = 0; i < j->it.inner; i++) o[i] = x[0];
        else
            for (int64_t i = 0; i < j->it.inner; i++) o[i] = x[i * s];
    }
}

TG_CPU_KERNEL(tg_cpu_broadcast) {
    ew_job j = {g, ir_node(g, id), {0}, out, in};
    int64_t st[1][TG_MAX_DIMS];
    tg_shape_bcast_strides(ir_node(g, j.n->in[0])->shape, j.n->shape, st[0]);
    tg_iter_init(&j.it, j.n->shape, 1, st);
    run_rows(c, &j, copy_rows);
}

TG_CPU_KERNEL(tg_cpu_permute) {
    ew_job j = {g, ir_node(g, id), {0}, out, in};
    int64_t own[TG_MAX_DIMS], st[1][TG_MAX_DIMS];
    tg_shape_strides(ir_node(g, j.n->in[0])->shape, own);
    for (int i = 0; i < j.n->shape.ndim; i++) st[0][i] = own[j.n->at.permute.perm.d[i]];
    tg_iter_init(&j.it, j.n->shape, 1, st);
    run_rows(c, &j, copy_rows);
}
