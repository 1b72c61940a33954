/* Internals shared by the WGSL emitters: a string builder, the kernel being
 * built, and helpers for the parts every kernel has (entry point, grid,
 * index maps, literals). One emitter per op lives in ops_*.c; the table that
 * maps opcodes to emitters is in ops.c. */
#ifndef TG_WGSL_EMIT_H
#define TG_WGSL_EMIT_H

#include "wgsl.h"

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} wsb;
void wsb_printf(wsb *b, const char *fmt, ...) TG_PRINTF(2, 3);

/* The kernel under construction. Operand 0 is the output, operand k+1 is
 * input k; the prelude has declared their bindings and accessors:
 *   fn ldK(i: u32) -> T     element i of input K (T = f32, i32 or u32 for bool)
 *   fn st(i: u32, v: T)     element i of the output
 *   fn ldo(i: u32) -> T     element i of the output (for kernels that re-read it) */
typedef struct {
    const tg_graph *g;
    const tg_node *n;
    int id;
    const tg_plan *plan;
    const tg_wgsl_limits *lim;
    tg_kernel_spec *spec;
    wsb s;
    tg_status st; /* first error, TG_OK while fine */
} wk;

typedef bool (*tg_wgsl_emit_fn)(wk *k);
typedef struct {
    tg_wgsl_emit_fn emit; /* NULL: no kernel (leaves, views) */
} tg_wgsl_op;
extern const tg_wgsl_op tg_wgsl_ops[TG_OP_COUNT];

/* Records an error naming the node ("webgpu: node 12 (matmul [64,64]): ...");
 * returns false. */
bool wk_fail(wk *k, tg_status s, const char *fmt, ...) TG_PRINTF(3, 4);
const tg_node *wk_in(const wk *k, int i);
const char *wk_type(tg_dtype dt);
/* A WGSL f32 expression with exactly the value v (f32_bits(...) for
 * inf/nan/subnormal/-0: the prelude defines fn f32_bits(u32) -> f32). */
const char *wk_f32(float v, char buf[48]);

/* Emits the entry point header for `groups` workgroups of `wg` invocations,
 * splitting the grid in 2-D when one dimension is not enough. Inside, `gid`
 * is the workgroup's linear index and `lid` the local index; the caller
 * writes the body and closes it with wk_end. */
bool wk_main(wk *k, int64_t groups, uint32_t wg);
/* An elementwise kernel over n items: thread `i` (u32), already range-checked. */
bool wk_flat(wk *k, int64_t n);
void wk_end(wk *k);

/* fn name(i: u32) -> u32: the flat row-major index i over dims d[0..nd)
 * mapped to sum(coord * st). */
void wk_index_fn(wk *k, const char *name, int nd, const int64_t *d, const int64_t *st);
/* Index maps ldK for a broadcasting elementwise op: writes `fn mapK(i)` for
 * each input whose layout differs from the output's and sets expr[K] to
 * "mapK(i)" or "i" or "0u". */
void wk_bcast_maps(wk *k, int nin, char expr[][16]);

/* Emitters (ops_ew.c, ops_reduce.c, ops_matmul.c). */
bool wgsl_const(wk *k);
bool wgsl_arange(wk *k);
bool wgsl_binary(wk *k);
bool wgsl_unary(wk *k);
bool wgsl_cast(wk *k);
bool wgsl_where(wk *k);
bool wgsl_copy(wk *k); /* broadcast_to, permute */
bool wgsl_one_hot(wk *k);
bool wgsl_where_causal(wk *k);
bool wgsl_relu_grad(wk *k);
bool wgsl_optim(wk *k); /* adam_m, adam_v, adam_p, sgd_v, sgd_p */
bool wgsl_sum(wk *k);
bool wgsl_softmax_lines(wk *k); /* log_softmax, log_softmax_grad, softmax_grad */
bool wgsl_softmax_causal(wk *k);
bool wgsl_matmul(wk *k);

#endif
