/* The CPU backend's fusion pass (tg_fuse_fn): decided on the graph before
 * planning, so the plan gives the values a fused kernel keeps to itself no
 * memory, and lowering (lower.c) runs exactly these groups. */
#ifndef TG_CPU_FUSE_H
#define TG_CPU_FUSE_H
#include "../engine.h"

typedef enum {
    CPU_GROUP_MATMUL, /* a matmul and its epilogue: bias add, relu or relu's gradient */
} cpu_group_kind;

typedef struct {
    cpu_group_kind kind;
    int out;          /* the node the group's kernel writes (its turn) */
    /* CPU_GROUP_MATMUL */
    int mm, bias, gate; /* bias and gate: -1 for none */
    bool relu;
} cpu_group;

typedef struct {
    cpu_group *g;
    int n;
} cpu_groups;

tg_status cpu_fuse(const tg_program *p, tg_fusion **out);
#endif
