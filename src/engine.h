/* What a backend must do with a compiled model (an engine), and how a
 * model is compiled into a program (program/program.h says what a program
 * is). compile.c builds programs; session.c drives an engine. */
#ifndef TG_ENGINE_H
#define TG_ENGINE_H

#include "program/program.h"

/* A backend's fusion pass: sees the final graph (result, grads, writebacks,
 * captures known) before planning, and says which nodes it will run as one
 * kernel (*out = NULL: none). The plan then gives absorbed values no memory
 * and the backend must run exactly those groups. */
typedef tg_status (*tg_fuse_fn)(const tg_program *p, tg_fusion **out);
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
    int accumulate;        /* > 1: gradients summed over that many micro-steps per update (needs optim) */
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
 * not made yet and TG_WEBGPU=adapter=N does not say which (webgpu/device.c). */
void tg_wgpu_prefer_adapter(int rank);
#endif
