/* The session object, shared by session.c and the files that extend the
 * session API (checkpoints in io/). */
#ifndef TG_SESSION_H
#define TG_SESSION_H

#include "engine.h"

#define TG_ARENA_ALIGN 256 /* WebGPU's storage-buffer offset alignment; the CPU just follows */
#define TG_MAX_LR_CHAIN 8

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
};

/* The program's node for a leaf (TG_OP_INPUT / TG_OP_STATE / ...) by name, or -1. */
int session_find_leaf(const tg_program *p, tg_opcode op, const char *name);
#endif
