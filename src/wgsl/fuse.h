/* The fusion after planning (fuse.c): its state, the move check its
 * groups must pass, and their planners, the optimizer and the clip norm
 * (fuse_optim.c); and the emitters of the groups of products chosen before
 * planning (fuse_matmul.c). Internal to the WGSL backend. */
#ifndef TG_WGSL_FUSE_H
#define TG_WGSL_FUSE_H

#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "emit.h"
#include "fused.h"

typedef struct {
    const tg_graph *g;
    const tg_plan *plan;
    const tg_fusion *fu; /* the groups chosen before planning (prefuse.c), NULL for none */
    const tg_wgsl_limits *lim;
    int n;
    bool *must_store;  /* read after the step or by a writeback: never kept inside a kernel */
    tg_fuse_graph fg;  /* the readers of every node (fuse/fuse.h), must_store pinned */
    int *grp;          /* group per node, -1 for none */
    int *at;           /* position at which the node's kernel runs */
    bool *kept;        /* computed inside a fused kernel and never stored */
    fz_group *gr;
    int n_gr, cap_gr;
    bool oom;
} fz;

static inline bool is_view(const tg_graph *g, int i) { return tg_ops[g->nodes[i].op].flags & TG_OPF_VIEW; }
static inline bool runs(const fz *z, int i) { return tg_plan_runs(z->g, i); }

static inline bool overlap(const tg_slot *a, const tg_slot *b) {
    return a->arena == b->arena && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* Whether node i's value is in memory (not kept inside a fused kernel). */
static inline bool in_memory(const fz *z, int i) {
    if (is_view(z->g, i)) return in_memory(z, z->g->nodes[i].in[0]);
    return !z->kept[i];
}

/* The position from which node i's value can be read: its producer's turn
 * (a view's: its input's); -1 for leaves and constants. */
static inline int ready_at(const fz *z, int i) {
    const tg_node *n = &z->g->nodes[i];
    if (is_view(z->g, i)) return ready_at(z, n->in[0]);
    if (tg_ops[n->op].flags & (TG_OPF_LEAF | TG_OPF_CONSTANT)) return -1;
    return z->at[i];
}

/* What a group would touch: its members, those it stores, what it reads
 * from memory, and the position it runs at (see the top of fuse.c). */
typedef struct {
    int *mem;   /* every member (kept inside or stored) */
    int nm;
    int *st;    /* members whose value is written */
    int ns;
    int *rd;    /* nodes the group reads from memory */
    int nr;
    int turn;
} gview;

static inline bool in_list(const int *l, int n, int x) {
    for (int i = 0; i < n; i++)
        if (l[i] == x) return true;
    return false;
}

void tg_fz_gview_free(gview *v);
/* Whether every member may read its inputs and write its value at v->turn. */
bool tg_fz_move_ok(const fz *z, const gview *v);

fz_group *tg_fz_new_group(fz *z, int kind); /* NULL (z->oom set) when out of memory */
void tg_fz_free_group(fz_group *g);

/* The planners, in the order tg_wgsl_emit_program runs them. */
void tg_fz_plan_optimizer(fz *z, const tg_writeback *wb, int n_wb);
void tg_fz_plan_sumsq(fz *z);

tg_status tg_fz_emit_matmul_sum(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                                tg_kernel_spec *k, tg_wgsl_program *out);
tg_status tg_fz_emit_matmul_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const fz_group *gr,
                                  tg_wgsl_program *out, int *cap, fz_push push);
#endif
