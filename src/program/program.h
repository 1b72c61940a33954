/* What a compiled model is: a program, the graph after trace, grad,
 * optimizer and passes with its buffer plan, and what every backend asks
 * of it (program.c). It sits below the backends, which read programs, and
 * the compiler (compile.c), which builds them. */
#ifndef TG_PROGRAM_H
#define TG_PROGRAM_H

#include "../ir/ir.h"
#include "../optim/optim.h"
#include "../plan/plan.h"

/* A graph input as a program holds it: names resolved to nodes once, when
 * the program is built, so a step looks its feeds up here and never scans
 * the graph. */
typedef struct {
    const char *name; /* the graph's */
    int node;
    uint64_t fed;     /* the feed round that last wrote it: a second write in one round is a duplicate */
} tg_program_input;

/* Data parallel: what an engine does with the other ranks, and all it
 * knows of them. The session installs an exchange in the program (dist/
 * makes it); the engine calls begin before a step, reached after each
 * kernel before the cut (its node), and cut at the end of the backward
 * with its status so far; cut returns the status every rank agreed on.
 * What is averaged is seg[0 .. n_seg): bytes at offset of arena, packed
 * into pack from float at. An engine that keeps its arenas on the host
 * passes them to begin and the exchange moves the bytes; one that does
 * not (WebGPU) passes NULL, copies the segments into pack[0 .. status_at)
 * before cut and back after it, and adds the seconds its copies took to
 * exposed_s. */
typedef struct {
    int arena;
    int64_t offset, bytes, at;
} tg_exchange_seg;

typedef struct tg_exchange {
    const tg_exchange_seg *seg;
    int n_seg;
    float *pack;
    int64_t status_at;
    double exposed_s; /* seconds the steps waited for the exchange */
    void (*begin)(struct tg_exchange *x, char *const *arena);
    void (*reached)(struct tg_exchange *x, int turn);
    tg_status (*cut)(struct tg_exchange *x, tg_status local);
    void (*free)(struct tg_exchange *x);
} tg_exchange;

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
     * the gradients there (dp, NULL for one process). */
    int cut;
    tg_exchange *dp;
    /* Set by the session for one run: only the nodes before the cut, then
     * the writebacks of values computed there (gradient sums, running
     * statistics): a micro-step of an accumulation, which updates nothing. */
    bool to_cut;
    tg_program_input *in; /* the INPUT nodes that survived the passes, in graph order */
    int n_in;
    uint64_t feed_round;
    /* Told as the engine compiles the kernels (the session spec's
     * compile_progress); NULL: nobody. */
    tg_compile_progress_fn compile_progress;
    void *compile_progress_user;
} tg_program;

/* TG_ERR_NUMERIC for element `at` (value v) of node `id`'s output, naming
 * the op, its shape and call site (or the forward op it is a gradient of). */
tg_status tg_program_numeric_fail(const tg_program *p, int id, float v, int64_t at);
/* Where node `id` comes from, for a report: "tg_matmul (model.c:41)", "the
 * gradient of tg_matmul (model.c:41)", "the backward: tg_add (grad.c:93)"
 * (a gradient sum), "the optimizer: tg_sum (optim.c:92)", "the optimizer
 * update", "input 'x'" or "param 'l1.W'", into buf[n]. */
void tg_program_node_site(const tg_program *p, int id, char *buf, size_t n);
/* TG_PROFILE, the one profiler setting of both backends (docs/environment.md):
 * comma-separated words, `1` (the TG_PROFILE_SLOWEST slowest kernels),
 * `all` (every kernel) and `run=N` (the run WebGPU times by the GPU's
 * clock, default TG_PROFILE_RUN: past the first runs, whose clocks are
 * still rising); unset, empty or `0` is off. */
#define TG_PROFILE_SLOWEST 40
#define TG_PROFILE_RUN 20
typedef struct {
    bool on, every;
    int run;
} tg_profile_setting;
/* *out from the environment; TG_ERR_ARG naming the value and the words
 * it takes when it is not one of them (*out is then off). */
tg_status tg_program_profile(tg_profile_setting *out);
/* True for the optimizer's update ops (ops.def's UPDATE). */
bool tg_program_is_update(tg_opcode op);
/* For a backend's fusion pass: pinned[i] (g->n entries) set for every node read from
 * outside the program's kernels (the result, the numeric check, captures,
 * param gradients unless discarded, writeback sources), which no group may absorb. */
void tg_program_pinned(const tg_program *p, bool *pinned);
#endif
