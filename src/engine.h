/* What a compiled model is (a program) and what a backend must do with it
 * (an engine). compile.c builds programs; session.c drives an engine. */
#ifndef TG_ENGINE_H
#define TG_ENGINE_H

#include "ir/ir.h"
#include "optim/optim.h"
#include "plan/plan.h"

/* A graph input as a program holds it: names resolved to nodes once, when
 * the program is built, so a step looks its feeds up here and never scans
 * the graph. */
typedef struct {
    const char *name; /* the graph's */
    int node;
    uint64_t fed;     /* the feed round that last wrote it: a second write in one round is a duplicate */
} tg_program_input;

/* A graph after trace, grad, optimizer and passes, with its buffer plan. */
typedef struct {
    tg_graph *g;
    tg_plan plan;
    int result;        /* the loss (training) or the forward output; -1 none */
    int *param_grad;   /* per model param: grad node or -1 */
    bool discard_grads; /* param_grad's values are scratch, unreadable after a step (spec.discard_grads, training) */
    int n_params;
    tg_writeback *wb;
    int n_wb;
    int hyper;         /* optimizer hyperparameter state node, -1 without optimizer */
    tg_fusion *fusion; /* what the backend fused before planning; NULL for none */
    void *impl;        /* the engine's compiled form */
    int n_dispatches;  /* kernel launches per step or run, as the engine compiled them (after fusion) */
    int64_t workspace_bytes; /* what the engine allocates beyond the plan for its kernels */
    /* Numerics: check is a scalar, loss * 0 + the sum of every grad squared,
     * computed before node first_update (the first optimizer update): not
     * finite when the loss or any gradient is not, or the norm overflows.
     * An engine's run reads it there and stops with TG_ERR_NUMERIC before
     * anything is updated. check_each (spec.check_numerics): every kernel's
     * f32 output is checked after it runs. Nodes >= first_bwd are backward. */
    int check, first_update, first_bwd;
    bool check_each;
    /* The end of the backward: nodes < cut compute the loss and the
     * gradients, nodes >= cut only read them (the step check, clipping, the
     * optimizer). g->n without an optimizer. A data-parallel step averages
     * the gradients there (dp, NULL for one process; see dp.h). */
    int cut;
    struct tg_dp *dp;
    tg_program_input *in; /* the INPUT nodes that survived the passes, in graph order */
    int n_in;
    uint64_t feed_round;
} tg_program;

/* TG_ERR_NUMERIC for element `at` (value v) of node `id`'s output, naming
 * the op, its shape and call site (or the forward op it is a gradient of). */
tg_status tg_program_numeric_fail(const tg_program *p, int id, float v, int64_t at);
/* True for the optimizer's update ops. */
bool tg_program_is_update(tg_opcode op);

/* A backend's fusion pass: sees the final graph (result, grads, writebacks,
 * captures known) before planning, and says which nodes it will run as one
 * kernel (*out = NULL: none). The plan then gives absorbed values no memory
 * and the backend must run exactly those groups. */
typedef tg_status (*tg_fuse_fn)(const tg_program *p, tg_fusion **out);
/* For a fusion pass: pinned[i] (g->n entries) set for every node read from
 * outside the program's kernels (the result, the numeric check, captures,
 * param gradients unless discarded, writeback sources), which no group may absorb. */
void tg_program_pinned(const tg_program *p, bool *pinned);

typedef struct {
    tg_model *model;
    tg_trace_fn fn;
    void *user;
    const tg_input_decl *inputs;
    int n_inputs;
    const tg_optim *optim; /* NULL: forward only, no gradients */
    bool grads;            /* with optim == NULL: still compute param grads */
    int64_t align;
    const int64_t *param_offset;
    tg_fuse_fn fuse;       /* NULL: nothing fused */
    bool discard_grads;    /* grads are scratch, unreadable after the step (needs optim) */
    bool check_each;       /* tg_program.check_each, known to the fusion pass (which may then fuse less) */
} tg_compile_req;

tg_status tg_program_build(const tg_compile_req *req, tg_program **out);
void tg_program_free(tg_program *p);

/* A backend instance: a device plus the params arena that every program
 * compiled on it shares. */
typedef struct tg_engine tg_engine;
typedef struct {
    const char *name;
    /* Allocates the program's arenas, prepares its kernels and computes its
     * constants. */
    tg_status (*compile)(tg_engine *e, tg_program *p);
    void (*release)(tg_engine *e, tg_program *p);
    /* Copies bytes into / out of an arena (p is ignored for the params arena). */
    tg_status (*write)(tg_engine *e, tg_program *p, int arena, int64_t off, const void *src, int64_t bytes);
    tg_status (*read)(tg_engine *e, tg_program *p, int arena, int64_t off, void *dst, int64_t bytes);
    /* Runs every kernel of the program in order, then its writebacks. */
    tg_status (*run)(tg_engine *e, tg_program *p);
    void (*destroy)(tg_engine *e);
    tg_fuse_fn fuse; /* NULL: the backend fuses nothing that changes the plan */
} tg_engine_vt;

struct tg_engine {
    const tg_engine_vt *vt;
    int refs;
    int64_t align;         /* offsets in every arena are multiples of this */
    int64_t params_bytes;
};

tg_status tg_cpu_engine_new(int threads, int64_t params_bytes, tg_engine **out);
/* The WebGPU engine (src/webgpu/): TG_ERR_BACKEND "webgpu: unavailable: ..."
 * when no WebGPU library or Vulkan adapter can be had. */
tg_status tg_wgpu_engine_new(int64_t params_bytes, tg_engine **out);
/* A data-parallel rank asks for adapter rank % adapters, if the device is
 * not made yet and TG_WEBGPU_ADAPTER does not say which (webgpu/device.c). */
void tg_wgpu_prefer_adapter(int rank);
#endif
