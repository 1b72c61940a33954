/* The WGSL emitter of every op, expanded from ops.def: op OP of kernel family
 * K is emitted by tg_wgsl_K (emit.h, which also maps the families WGSL
 * writes with a shared emitter). Leaves other than constants and views (reshape)
 * have no kernel. Whether an op can be written as an inline function, and
 * whether it is cheap to recompute, are the registry's MAP and CHEAP flags. */
#include "emit.h"

#define tg_wgsl_none NULL

const tg_wgsl_op tg_wgsl_ops[TG_OP_COUNT] = {
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) [TG_OP_##OP] = {tg_wgsl_##kernel},
#include "../ir/ops.def"
};
_Static_assert(sizeof tg_wgsl_ops / sizeof tg_wgsl_ops[0] == TG_OP_COUNT, "one WGSL row per op");
