/* Lowering a planned graph to CPU steps. A step is either the op table's
 * kernel for one node, or a specialized kernel whose arguments (pointers,
 * sizes, strides, the GEMM set-up) were worked out once at compile time;
 * some specialized steps stand for a short chain of nodes (a matmul with its
 * bias add and relu, or with relu's gradient; Adam's three updates). */
#ifndef TG_CPU_LOWER_H
#define TG_CPU_LOWER_H
#include "fused_attention.h"
#include "cpu.h"
#include "kernels.h"
#include "vec.h"
#include "../engine.h"

typedef struct cpu_step cpu_step;
struct cpu_step {
    void (*run)(cpu_ctx *c, const cpu_step *s);
    const tg_graph *g;
    int id;                    /* the node whose output the step leaves (the chain's last) */
    int n_nodes;               /* nodes it stands for */
    const char *label;         /* a fused group's kind (tg_cpu_group_names); NULL: the node's op */
    /* the op table's kernel */
    tg_cpu_fn fn;
    void *out;
    void *in[TG_MAX_IN];
    /* specialized */
    const vec_kernels *vk;
    tg_gemm_args gemm;
    tg_gemm_epi epi;
    vec_op op;
    int64_t n, rows, cols, sa, sb;
    bool row_left;
    float f[4];
    float *o[3];
    const float *x[5];
    union {
        attn_fwd f;
        attn_bwd b;
    } attn;
    struct adam_batch *adam;
    cpu_norm_bwd norm;
    void *heap[2]; /* allocations the step owns (freed with the program) */
};

/* Fills steps[] (room for one per node) for the nodes that run each step;
 * returns how many, -1 out of memory, -2 if the plan breaks what a fused
 * group needs. specialize = false gives op-table kernels only (the groups of
 * p->fusion still run fused: the plan depends on them). */
int tg_cpu_lower(const tg_program *p, char *const *arena, bool specialize, cpu_step *steps);
#endif
