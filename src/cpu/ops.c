/* The CPU kernel of every op, expanded from ops.def: op OP of kernel family
 * K runs tg_cpu_K (kernels.h). A family without a CPU kernel fails to link,
 * so every op the IR has runs here. */
#include "kernels.h"

#define tg_cpu_none NULL

const tg_cpu_fn tg_cpu_kernels[TG_OP_COUNT] = {
#define TG_OP(OP, name, arity, flags, shape, grad, kernel) [TG_OP_##OP] = tg_cpu_##kernel,
#include "../ir/ops.def"
};
_Static_assert(sizeof tg_cpu_kernels / sizeof tg_cpu_kernels[0] == TG_OP_COUNT, "one CPU kernel per op");
