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
 *   arena 1 (persist)  grads, optimizer state, inputs, constants, outputs
 *   arena 2 (scratch)  intermediates, packed by liveness: two classes share
 *                      bytes only if their live ranges do not overlap */
#ifndef TG_PLAN_H
#define TG_PLAN_H

#include <stdio.h>

#include "../ir/ir.h"
#include "../optim/optim.h"

typedef enum {
    TG_BUF_PARAM, TG_BUF_STATE, TG_BUF_INPUT, TG_BUF_CONST, TG_BUF_GRAD, TG_BUF_OUTPUT, TG_BUF_SCRATCH
} tg_buf_kind;

enum { TG_ARENA_PARAMS, TG_ARENA_PERSIST, TG_ARENA_SCRATCH, TG_N_ARENAS };

typedef struct {
    tg_buf_kind kind;  /* category of the node's storage class */
    int arena;
    int64_t offset;    /* bytes into the arena */
    int64_t bytes;     /* this node's size (>= 4) */
    int root;          /* the class's first node */
    int first, last;   /* live range of the class, in node order */
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
} tg_plan_req;

/* Lays out params in model order; returns the params arena size. */
int64_t plan_param_layout(const tg_model *m, int64_t align, int64_t *offsets);
tg_status plan_build(const tg_graph *g, const tg_plan_req *req, tg_plan *out);
/* Proves no two simultaneously live classes overlap in memory. */
tg_status plan_check(const tg_graph *g, const tg_plan *p);
void plan_print(const tg_graph *g, const tg_plan *p, FILE *f);
void plan_free(tg_plan *p);
const char *plan_kind_name(tg_buf_kind k);
/* True if node i runs a kernel each step (not a leaf, view or constant). */
bool plan_runs(const tg_graph *g, int i);
#endif
