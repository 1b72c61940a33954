/* The two session types over one base, shared by session.c (training),
 * infer.c (forward), session_base.c and checkpoint.c. */
#ifndef TG_SESSION_H
#define TG_SESSION_H

#include <pthread.h>

#include "engine.h"

#define TG_ARENA_ALIGN 256 /* WebGPU's storage-buffer offset alignment; the CPU just follows */

/* What a training session and the forward sessions attached to it share: one
 * lock, held by every call on any of them (so a step, a run and a
 * replace_model from different threads take turns and none sees another
 * half done), and the list of attached forwards that replace_model moves to
 * the new model. A session made alone has one of its own. */
typedef struct {
    pthread_mutex_t mu; /* recursive: public calls nest */
    int refs;
    struct tg_forward **fwd;
    int n_fwd, cap_fwd;
} tg_share;

/* What both kinds of session are: params in the engine's params arena at
 * param_offset[p], a seed for random ops, and the program that reads,
 * captures and plan queries look at. */
typedef struct {
    tg_model *model;
    tg_engine *eng;
    int64_t *param_offset;
    /* The model's param count when param_offset was laid out: a param
     * declared later has no place in the arena (tg_session_base_usable). */
    int n_params;
    uint64_t seed;
    int64_t memory_limit; /* the spec's (tg_session_base_check_plan) */
    bool host_memory;     /* the arenas are the process's memory (CPU), not a device's */
    uint32_t rng_stream; /* a data-parallel rank's own random draws: its rank (0 alone or on rank 0) */
    tg_program *prog; /* training: its one program; forward: the last run's (the first compiled before a run) */
    tg_share *share;
    /* An attached forward that a replace_model left unable to compile: why.
     * Every call on it then fails with this (tg_session_base_usable); "" while usable. */
    char broken[640];
    tg_compile_progress_fn compile_progress; /* the spec's, told as each program's kernels compile */
    void *compile_progress_user;
} tg_session_base;

/* A training session: one program with gradients and an optimizer, and what
 * replace_model compiles the next one from. */
struct tg_session {
    tg_session_base b;
    tg_optim optim;
    tg_lr *lr;         /* the schedule: a copy of its chain and milestones (tg_lr_copy) */
    int64_t step, lr_start;
    tg_trace_fn loss;
    void *user;
    tg_input_decl *inputs; /* copies; names owned */
    int n_inputs;
    tg_backend backend;
    int threads;
    bool check_numerics;
    bool discard_grads;
    /* The last step failed before its backward wrote every gradient
     * (check_numerics stopped it, or the device failed): the gradients'
     * memory, shared with the activations, holds no step's gradients. */
    bool grads_partial;
    tg_comm *comm; /* data parallel (dist/dp.h), NULL alone */
    int64_t memory_limit; /* the spec's, for replace_model's programs too */
    int accumulate; /* micro-steps per update, >= 1 */
    int micro;      /* micro-steps run since the last update, 0 .. accumulate - 1 */
};

/* A forward session: one program per batch size, compiled on first use. */
struct tg_forward {
    tg_session_base b;
    tg_trace_fn fn;
    void *user;
    tg_input_decl *inputs; /* copies; names owned */
    int n_inputs;
    bool check_numerics;
    bool ran; /* outputs and captures exist only after a run */
    bool failed; /* the last run failed: the output is an earlier run's, or part of one */
    struct tg_batch_prog {
        int64_t batch;
        tg_program *prog;
        int64_t used;  /* when it was last looked up (lookups): the least recent goes first */
        bool compiled; /* its kernels: batch 1's, traced at creation, wait for a run of batch 1 */
    } *progs;
    int n_progs;
    int64_t runs, lookups;
};

/* The comm of a data-parallel session, NULL for one without. */
tg_comm *tg_session_dp_comm(const tg_session *s);

/* Makes a copy of src the session's schedule (and optim.lr, so no pointer
 * into the caller's memory stays behind); on failure nothing changes. */
tg_status tg_session_take_lr(tg_session *s, const tg_lr *src, const char *api);

/* The share: a new one holding one reference; lock / unlock (b or its
 * share NULL: nothing); attach / detach a forward (under the lock); drop a
 * reference (not under the lock), freeing it with the last. */
tg_status tg_share_new(tg_share **out);
void tg_share_lock(const tg_session_base *b);
void tg_share_unlock(const tg_session_base *b);
tg_status tg_share_attach(tg_share *sh, struct tg_forward *f);
void tg_share_detach(tg_share *sh, struct tg_forward *f);
void tg_share_unref(tg_share *sh);

/* Copies of an input list, names owned; freed with tg_inputs_free. */
tg_status tg_inputs_copy(const tg_input_decl *in, int n, tg_input_decl **out, const char *api);
void tg_inputs_free(tg_input_decl *in, int n);
/* Each declaration's dtype, and TG_BATCH unless batch_ok (a forward's). */
tg_status tg_inputs_check(const tg_input_decl *in, int n, bool batch_ok, const char *api);

/* After a replace_model: an attached forward drops its programs and takes
 * the training session's model, engine and layout, then compiles its first
 * program again. A function that no longer traces leaves the forward
 * broken (every later call fails with why); that is not the caller's error,
 * so nothing is returned. Under the share's lock. */
void tg_forward_refit(struct tg_forward *f, const tg_session_base *train);

/* An engine for the backend and a params arena of the model's layout, into
 * b->eng and b->param_offset (api names the caller); memory_limit is the
 * spec's, and the params alone are checked against it first. */
tg_status tg_session_base_open(tg_session_base *b, tg_model *m, tg_backend be, int threads, int64_t memory_limit,
                               const char *api);
/* Before program p's arenas are allocated: the params, p's arenas and
 * `more` bytes (a forward's other programs) against the session's memory
 * limit; TG_ERR_NOMEM naming both figures and the largest part. */
tg_status tg_session_base_check_plan(const tg_session_base *b, const tg_program *p, int64_t more, const char *api);
/* Params from the seed, as tg_model_init_param draws them. */
tg_status tg_session_base_init_params(tg_session_base *b, uint64_t seed, const char *api);
/* Drops the engine reference and the offsets; programs are the owner's. */
void tg_session_base_close(tg_session_base *b);

/* TG_ERR_ARG for a NULL session, TG_ERR_STATE (naming api and why) for a broken one. */
tg_status tg_session_base_usable(const tg_session_base *b, const char *api);

/* Checks the feeds against the program's input table (every input exactly
 * once, its dtype, its size) and writes them (api names the caller). */
tg_status tg_session_write_feeds(tg_session_base *b, tg_program *p, const char *api, const tg_feed *feeds, int n);
tg_status tg_session_write_rng_seed(tg_session_base *b, tg_program *p, int64_t t);

/* Shared by both types' public functions; api names the caller. */
#define TG_SESSION_BASE(s) ((s) ? &(s)->b : NULL)
/* A param by name with `count` elements at non-NULL data, into *out. */
tg_status tg_session_base_param_check(const tg_session_base *b, const char *api, const char *name, const void *data,
                                      int64_t count, tg_param *out);
tg_status tg_session_base_param_io(tg_session_base *b, const char *api, const char *name, void *data, int64_t count,
                                   bool write);
tg_status tg_session_base_upload(tg_session_base *b, const char *api, const tg_feed *params, int n);
/* Params from tensors, checked by name, dtype and exact shape: one, or
 * every param exactly once (nothing written unless all pass). */
tg_status tg_session_base_set_tensor(tg_session_base *b, const char *api, const tg_st_tensor *t);
tg_status tg_session_base_upload_tensors(tg_session_base *b, const char *api, const tg_st_tensor *t, int n);
/* Every param (name, dtype, shape, a copy of its values) in model order. */
tg_status tg_session_base_download(tg_session_base *b, const char *api, tg_safetensors **out);
/* The program's captures in the order they were made (0 / NULL without one). */
int tg_session_base_capture_count(const tg_session_base *b);
const char *tg_session_base_capture_name(const tg_session_base *b, int i);
tg_status tg_session_base_read(tg_session_base *b, const char *api, const char *name, void *dst, int64_t count);
tg_status tg_session_base_capture_info(const tg_session_base *b, const char *api, const char *name, tg_shape *shape,
                                       tg_dtype *dtype);
tg_status tg_session_base_plan_stats(const tg_session_base *b, const char *api, tg_plan_stats *o);
void tg_session_base_print_plan(const tg_session_base *b, void *file);
tg_status tg_session_base_dot(const tg_session_base *b, const char *api, void *file);

/* spec.check_numerics, or TG_CHECK_NUMERICS set (and not "0"). */
bool tg_session_check_numerics(bool asked);
#endif
