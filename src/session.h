/* The two session types over one base, shared by session.c (training),
 * infer.c (forward), session_base.c and the files that extend the session
 * API (checkpoints in io/). */
#ifndef TG_SESSION_H
#define TG_SESSION_H

#include "engine.h"

#define TG_ARENA_ALIGN 256 /* WebGPU's storage-buffer offset alignment; the CPU just follows */

/* What both kinds of session are: params in the engine's params arena at
 * param_offset[p], a seed for random ops, and the program that reads,
 * captures and plan queries look at. */
typedef struct {
    tg_model *model;
    tg_engine *eng;
    int64_t *param_offset;
    uint64_t seed;
    uint32_t rng_stream; /* a data-parallel rank's own random draws: its rank (0 alone or on rank 0) */
    tg_program *prog; /* training: its one program; forward: the last run's (the first compiled before a run) */
} tg_session_base;

/* A training session: one program with gradients and an optimizer. */
struct tg_session {
    tg_session_base b;
    tg_optim optim;
    tg_lr lr[TG_MAX_LR_CHAIN]; /* the schedule, warmup chains copied */
    int64_t step, lr_start;
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
    struct tg_batch_prog {
        int64_t batch;
        tg_program *prog;
    } *progs;
    int n_progs;
    int64_t runs;
};

/* An engine for the backend and a params arena of the model's layout, into
 * b->eng and b->param_offset (api names the caller). */
tg_status tg_session_base_open(tg_session_base *b, tg_model *m, tg_backend be, int threads, const char *api);
/* Params from the seed, as tg_model_init_param draws them. */
tg_status tg_session_base_init_params(tg_session_base *b, uint64_t seed, const char *api);
/* Drops the engine reference and the offsets; programs are the owner's. */
void tg_session_base_close(tg_session_base *b);

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
tg_status tg_session_base_read(tg_session_base *b, const char *api, const char *name, void *dst, int64_t count);
tg_status tg_session_base_capture_info(const tg_session_base *b, const char *api, const char *name, tg_shape *shape,
                                       tg_dtype *dtype);
tg_status tg_session_base_plan_stats(const tg_session_base *b, const char *api, tg_plan_stats *o);
void tg_session_base_print_plan(const tg_session_base *b, void *file);
tg_status tg_session_base_dot(const tg_session_base *b, const char *api, void *file);

/* spec.check_numerics, or TG_CHECK_NUMERICS set (and not "0"). */
bool tg_session_check_numerics(bool asked);
#endif
