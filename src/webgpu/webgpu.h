/* The WebGPU runtime: one process-wide device (loaded with dlopen on first
 * use) and the engine that runs compiled programs on it. */
#ifndef TG_WEBGPU_H
#define TG_WEBGPU_H

#include <pthread.h>
#include <stdbool.h>

#include "wg_api.h"
#include "../engine.h"
#include "../wgsl/wgsl.h"

typedef struct {
    wg_api f;
    /* wgpuDeviceCreateComputePipelineAsync where the library has it (NULL:
     * pipelines are made one at a time, pipeline.c) */
    wg_future (*create_pipeline_async)(wg_device, const wg_pipeline_desc *, wg_pipeline_cb_info);
    void *lib;
    char lib_path[256];
    wg_instance instance;
    wg_adapter adapter;
    wg_device device;
    wg_queue queue;
    wg_limits limits;       /* the device's: the adapter's maxima, all requested */
    tg_wgsl_limits klimits; /* what codegen checks against (limits, or a test override) */
    tg_webgpu_adapter_info info;
    bool subgroups;         /* kernels may use subgroups: the device has the feature (asked for when
                             * offered) and numbers them in order (device.c: subgroups_in_order) */
    bool timestamps;        /* ... and with timestamp-query (asked for under TG_PROFILE, when offered) */
    /* Serializes every use of the device: WebGPU objects are not promised to
     * be thread-safe, and sessions may live on different threads. */
    pthread_mutex_t mu;
    /* Set by callbacks that may fire on any thread, hence their own lock. */
    pthread_mutex_t err_mu;
    bool lost, error;
    char lost_msg[512], err_msg[1024];
    struct wg_pipe *pipes; /* compiled pipelines by source, for the life of the device */
    int n_pipes, cap_pipes;
    struct wg_layouts *layouts; /* bind group and pipeline layouts by bindings and read-only mask */
    int n_layouts, cap_layouts;
    /* A CPU adapter's driver compiles a shader when it first runs it:
     * pipeline.c runs each new pipeline once with no workgroups, over these
     * buffers (one per binding), and waits for it with the read-back one. */
    bool compiles_on_first_use;
    wg_buffer first_use[TG_WGSL_MAX_BINDINGS], first_use_read;
} wgpu_ctx;

/* The shared device, created on first call. On failure returns
 * TG_ERR_BACKEND with "webgpu: unavailable: <why>" (the reason is kept and
 * repeated on later calls without retrying). */
tg_status tg_wgpu_ctx_get(wgpu_ctx **out);

/* Accepts only adapters on a real GPU API. Dawn falls back to its Null
 * backend (which computes nothing) when Vulkan finds no usable driver, so a
 * Null or unknown backend is refused here. */
tg_status tg_wgpu_check_adapter(uint32_t backend_type, const char *name);
const char *tg_wgpu_backend_name(uint32_t backend_type);
/* A WebGPU string view into dst[n], cut to fit and NUL-terminated. */
void tg_wgpu_copy_str(char *dst, size_t n, wg_str s);

/* Blocks until `f` completes (its callback has run). */
tg_status tg_wgpu_wait(wgpu_ctx *c, wg_future f, const char *what);
/* The same for a future of another instance (the allow_unsafe_apis probe's). */
tg_status tg_wgpu_wait_in(wgpu_ctx *c, wg_instance inst, wg_future f, const char *what);
/* What a popped error scope held: tg_wgpu_on_popped, the pop's callback, fills it. */
typedef struct {
    uint32_t status, type;
    char msg[768];
} tg_wgpu_scope;
void tg_wgpu_on_popped(uint32_t status, uint32_t type, wg_str msg, void *u1, void *u2);
/* Returns and clears a pending validation error or device loss as
 * TG_ERR_BACKEND "<api>: <message>"; TG_OK if none. */
tg_status tg_wgpu_take_error(wgpu_ctx *c, const char *api);

/* A compute pipeline for `src`, compiled once per distinct source (its first
 * line aside, where that is a comment: a kernel's label) and cached for the
 * life of the device. A WGSL error comes back as TG_ERR_BACKEND with the
 * shader's line, column and message, prefixed by `what`. */
tg_status tg_wgpu_pipeline(wgpu_ctx *c, const char *src, int n_bindings, unsigned read_only, const char *what,
                           wg_pipeline *out);
/* The pipelines of many kernels at once: each request's from the cache, or
 * compiled, the distinct sources on Dawn's worker threads, several at a
 * time (c->mu held). progress (NULL: none) hears "kernels", done of total
 * distinct compiles, after each; the first error is returned (a WGSL
 * error as above) and no request gets a pipeline then. */
typedef struct {
    const char *src;
    int n_bindings;
    unsigned read_only;
    const char *what;
    wg_pipeline pipe; /* out */
} tg_wgpu_pipeline_req;
tg_status tg_wgpu_pipelines(wgpu_ctx *c, tg_wgpu_pipeline_req *reqs, int n, tg_compile_progress_fn progress, void *user);
/* The bind group layout of a pipeline with n storage bindings, read-only
 * where read_only has bit b set, read_write elsewhere (compute); NULL when
 * the device cannot make it. */
wg_bgl tg_wgpu_bgl(wgpu_ctx *c, int n_bindings, unsigned read_only);

/* Maps `staging` (a MapRead buffer whose copy was submitted) and copies its
 * first `bytes` to dst. */
tg_status tg_wgpu_map_read(wgpu_ctx *c, wg_buffer staging, void *dst, size_t bytes);
/* Runs `src` (entry point "main") once with binding 0 = a zeroed read_write
 * buffer of `bytes`, dispatching groups_x workgroups, and copies the buffer
 * back to out (c->mu held, or the device not yet shared). */
tg_status tg_wgpu_run_once(wgpu_ctx *c, const char *src, uint32_t groups_x, void *out, size_t bytes, const char *what);

/* TG_WEBGPU, the backend's one diagnostic setting (docs/environment.md):
 * comma-separated words, adapter=N (the N-th adapter of the native
 * backend), robust (Dawn's bounds clamps and workgroup zeroing kept),
 * no-subgroups (no kernel uses subgroups) and dump=DIR (every kernel
 * compiled written to folder DIR), which comes last: the rest of the value
 * is the folder, commas and all. Unset or empty: none of them. */
typedef struct {
    long adapter;     /* -1: none asked for */
    bool robust, no_subgroups;
    const char *dump; /* inside the environment's value, NULL for none */
} tg_wgpu_setting;
/* *out from the environment; TG_ERR_ARG naming the value and the words it
 * takes when a word is not one of them. */
tg_status tg_wgpu_setting_read(tg_wgpu_setting *out);

/* Test hooks (tests/test_webgpu.c). */
/* Compiles `src` (entry point "main") into a pipeline; errors as above. */
tg_status tg_wgpu_test_compile(const char *src);
/* Runs `src` once with binding 0 = a zeroed read_write buffer of `bytes`,
 * dispatching groups_x workgroups, and copies the buffer back to out. */
tg_status tg_wgpu_test_run(const char *src, uint32_t groups_x, void *out, size_t bytes);
/* The limits codegen checks against: the device's unless a test overrides them. */
void tg_wgpu_kernel_limits(const wgpu_ctx *c, tg_wgsl_limits *l);
/* Destroys the shared device, as a driver reset would lose it. */
void tg_wgpu_test_lose_device(void);
/* Replaces the limits codegen checks against (NULL restores the device's). */
void tg_wgpu_test_override_limits(const tg_wgsl_limits *l);

#endif
