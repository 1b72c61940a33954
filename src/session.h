/* The session object, shared by session.c and the files that extend the
 * session API (checkpoints in io/). */
#ifndef TG_SESSION_H
#define TG_SESSION_H

#include "engine.h"

#define TG_ARENA_ALIGN 256 /* WebGPU's storage-buffer offset alignment; the CPU just follows */

/* A session: a compiled program on an engine. Params live in the engine's
 * params arena at param_offset[p]. */
struct tg_session {
    tg_model *model;
    tg_engine *eng;
    tg_program *prog;
    int64_t *param_offset;
    tg_optim optim;
    tg_lr lr[TG_MAX_LR_CHAIN]; /* the schedule, warmup chains copied */
    int64_t step, lr_start;
    uint64_t seed;
    /* forward-only sessions (infer.c): one program per batch size */
    bool infer;
    tg_trace_fn fn;
    void *user;
    tg_input_decl *inputs; /* copies; names owned */
    int n_inputs;
    struct tg_batch_prog {
        int64_t batch;
        tg_program *prog;
    } *progs;
    int n_progs;
    int64_t runs;
};

/* Writes the checked feeds into the program's input buffers (api names the caller). */
tg_status tg_session_write_feeds(tg_session *s, tg_program *p, const char *api, const tg_feed *feeds, int n);
tg_status tg_session_write_rng_seed(tg_session *s, tg_program *p, int64_t t);
/* Releases and frees a session's programs (infer.c for forward sessions). */
void tg_session_free_programs(tg_session *s);

/* spec.check_numerics, or TG_CHECK_NUMERICS set (and not "0"). */
bool tg_session_check_numerics(bool asked);

/* The program's node for a leaf (TG_OP_INPUT / TG_OP_STATE / ...) by name, or -1. */
int tg_session_find_leaf(const tg_program *p, tg_opcode op, const char *name);
#endif
