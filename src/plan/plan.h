/* Buffer planning: decides where every tensor lives.
 *
 * Tensors that share memory form a storage class: a reshape is a view of its
 * input, an elementwise op may write over an input that dies with it
 * (in-place), and an optimizer update is computed straight into the param or
 * state it replaces (which makes that writeback free). Each class gets one
 * category and one place:
 *
 *   arena 0 (params)   params, laid out by model order; shared by every
 *                      session compiled from the same trained params
 *   arena 1 (persist)  optimizer state, inputs, constants, outputs
 *   arena 2 (scratch)  intermediates and param gradients, packed by
 *                      liveness: two classes share bytes only if their live
 *                      ranges do not overlap. A kept gradient is live from
 *                      the turn that writes it to the end of the step (read
 *                      after it); before that its bytes serve the forward.
 *
 * A backend may fuse nodes into one kernel before planning (tg_fusion): a
 * group runs at one turn and writes its outputs then; the values it keeps in
 * registers (absorbed nodes, and views of them) get no memory at all, and a
 * permute its kernels read with strides is planned as a view. Liveness counts in turns, so a
 * group's inputs stay live until its turn and its outputs are live from it. */
#ifndef TG_PLAN_H
#define TG_PLAN_H

#include <stdio.h>

#include "../ir/ir.h"
#include "../optim/optim.h"

/* The most buffer bytes one program may plan (64 PiB): far past any machine,
 * far below int64 overflow for any sum of offsets. */
#define TG_MAX_PROGRAM_BYTES ((int64_t)1 << 56)

typedef enum {
    TG_BUF_PARAM, TG_BUF_STATE, TG_BUF_INPUT, TG_BUF_CONST, TG_BUF_GRAD, TG_BUF_OUTPUT, TG_BUF_SCRATCH,
    TG_BUF_NONE /* absorbed into a fused kernel: no memory (arena -1, 0 bytes) */
} tg_buf_kind;

enum { TG_ARENA_PARAMS, TG_ARENA_PERSIST, TG_ARENA_SCRATCH, TG_N_ARENAS };

/* What a backend's fusion pass decided, per node, before planning. */
typedef enum {
    TG_FUSE_NONE,     /* its own kernel, as the op table says */
    TG_FUSE_ABSORBED, /* computed inside its group's kernel, never stored; read only by its group */
    TG_FUSE_OUTPUT,   /* stored by its group's kernel, at the group's turn */
    TG_FUSE_VIEW,     /* a permute nobody materializes: its readers take its input's memory with strides */
    TG_FUSE_REMAT     /* absorbed, and read by later groups that compute it again from what they read
                       * (attention's softmax, from the scores and the statistics its group kept) */
} tg_fuse_role;

typedef struct tg_fusion {
    int n;           /* nodes */
    uint8_t *role;   /* per node, a tg_fuse_role */
    int *group;      /* per node: its group, -1 for none */
    int *turn;       /* per group: the node position at which its kernel runs */
    bool *inplace;   /* per group output: its kernel may write it over one of the node's own
                      * inputs (one that no other member reads), element by element; per
                      * absorbed member: it reads its inputs at the element its group's
                      * output writes, so that output may take their memory too */
    bool *in_step;   /* per group output besides the kernel's: it reads its inputs at the
                      * element the kernel's output writes, before that write, so that
                      * output may take their memory (a norm's gain and bias gradients,
                      * summed from the rows its dx kernel holds) */
    int *also_reads; /* per group: a value its kernels read besides its members' inputs, kept
                      * live until its turn (attention's backward reads the forward's result); -1 none */
    int n_groups;
    void *impl;      /* the backend's own description of the groups */
    void (*impl_free)(void *impl);
} tg_fusion;
tg_fusion *tg_fusion_new(int n_nodes);
void tg_fusion_free(tg_fusion *f);
/* The turn at which node i's value is produced (its group's, or i). */
static inline int tg_fusion_at(const tg_fusion *f, int i) {
    return f && f->group[i] >= 0 ? f->turn[f->group[i]] : i;
}

typedef struct {
    tg_buf_kind kind;  /* category of the node's storage class */
    int arena;         /* -1 for TG_BUF_NONE */
    int64_t offset;    /* bytes into the arena */
    int64_t bytes;     /* this node's size (>= 4; 0 for TG_BUF_NONE) */
    int root;          /* the class's first node */
    int first, last;   /* live range of the class, in turns (node order, a fused group at its turn) */
    int at;            /* the turn at which this node's value is written (-1: a leaf or a constant,
                        * there before the step's first kernel wherever its node stands) */
    bool remat;        /* TG_BUF_NONE, and later turns may read it (TG_FUSE_REMAT) */
} tg_slot;

typedef struct {
    tg_slot *slot; /* one per node */
    int n;
    int64_t arena_bytes[TG_N_ARENAS];
    int64_t naive_bytes;
    int64_t align;
    int n_kernels;
    bool *wb_free; /* per writeback: computed in place, no copy needed */
} tg_plan;

typedef struct {
    const int *param_grad; /* per model param, -1 for none */
    int n_params;
    const int *outputs;    /* nodes that must stay readable (loss, captures) */
    int n_outputs;
    const tg_writeback *wb;
    int n_wb;
    int64_t align;         /* offset alignment in bytes (a power of two) */
    const int64_t *param_offset; /* arena-0 offset of each model param */
    bool no_reuse;         /* one buffer per class: for debugging the planner */
    const tg_fusion *fusion; /* NULL: nothing fused */
    bool discard_grads;    /* param_grad's nodes are intermediates like any other (spec.discard_grads) */
} tg_plan_req;

/* Lays out params in model order; returns the params arena size. */
int64_t tg_plan_param_layout(const tg_model *m, int64_t align, int64_t *offsets);
tg_status tg_plan_build(const tg_graph *g, const tg_plan_req *req, tg_plan *out);
/* Proves no two simultaneously live classes overlap in memory, and that
 * every value is read while its memory holds it (between the turn that
 * writes it and the end of its class's live range), the values fused
 * groups read besides their members' inputs (fu's also_reads; fu may be
 * NULL) included. */
tg_status tg_plan_check(const tg_graph *g, const tg_plan *p, const tg_fusion *fu);
void tg_plan_print(const tg_graph *g, const tg_plan *p, FILE *f);
void tg_plan_free(tg_plan *p);
const char *tg_plan_kind_name(tg_buf_kind k);
/* True if node i runs a kernel each step (not a leaf, view or constant);
 * with fusion, a group's members run as one kernel, counted in n_kernels once. */
bool tg_plan_runs(const tg_graph *g, int i);
#endif
