/* The WebGPU engine (the vtable of engine.h): arenas are storage buffers, a
 * compiled program is a list of (pipeline, bind group, grid), and a step is
 * one compute pass holding every kernel and then the writeback copies.
 * Nothing waits for the GPU unless the caller reads something.
 *
 * Encoding a dispatch costs the CPU a few microseconds (Dawn validates and
 * records it, then translates it at submit), and the GPU sits idle until the
 * step's commands arrive; so a step is submitted in pieces as it is
 * encoded, the first small (SUBMIT_FIRST dispatches) and each twice the one
 * before up to SUBMIT_MOST: the GPU starts on the first piece while the CPU
 * encodes the next, and the CPU, faster per dispatch than the GPU, stays
 * ahead with few submits (pieces of 128 made a step of up to 128
 * dispatches wait for all of its encoding; docs/performance.md, "The
 * engine and the device").
 *
 * A training step's check (the loss and the gradient norm finite) is read
 * once, after the whole step: the fused optimizer kernels read it first and
 * do nothing when it is not finite, so the params and optimizer state stay
 * as they were, and the read that returns it brings the loss back with it
 * (the session reads it next). Where the updates are not all such kernels
 * (fusion off, a writeback copy after them, a binding too small), the
 * check is read before they are submitted. (Indirect dispatches gated by a
 * small kernel were slower than waiting: Dawn validates each indirect
 * dispatch.)
 *
 * TG_PROFILE (program.h): one run of each program (the run=N-th, counted
 * from 1) times every kernel and prints to stderr the totals per kind of
 * kernel, the slowest kernels each named by its op and call site, and the
 * products by shape: from the GPU's clock where the adapter has timestamp
 * queries (a compute pass per kernel), else by running the dispatches one
 * at a time, waiting for each. A tool for finding slow kernels on the real
 * GPU; the step it profiles computes what it should. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "webgpu.h"
#include "../wgsl/fused_attention.h"

#define SUBMIT_FIRST 4
#define SUBMIT_MOST 64

typedef struct {
    wg_pipeline pipe;
    wg_bind_group bg;
    uint32_t grid[3];
    int node;
    bool gated; /* does nothing when the step check is not finite (tg_kernel_spec.gated) */
    int64_t mm_mnk[3];
    double flops; /* a kernel's work (tg_kernel_spec), for TG_PROFILE */
    char label[120]; /* for TG_PROFILE: what the kernel computes (its first source line) and the node's shape */
} wg_call;

typedef struct {
    /* [0] is the engine's params buffer (not owned); [TG_WGSL_WORKSPACE] the
     * fused kernels' own scratch (partial sums), NULL when none needs it */
    wg_buffer arena[TG_N_ARENAS + 1];
    int64_t bytes[TG_N_ARENAS + 1];
    wg_call *calls; /* per step, in order: kernels, then writebacks */
    int n_calls;
    int split; /* the first call of the optimizer updates and writebacks: the step check is read before it */
    int cut;   /* the first call after the backward (p->cut): a data-parallel step averages the gradients there */
    int *pre;  /* the writeback calls of values computed before the cut, which a micro-step (p->to_cut) runs too */
    int n_pre;
    int runs;                   /* counted for TG_PROFILE */
    tg_profile_setting profile; /* TG_PROFILE, read at compile */
    bool gated;       /* every call from split on is gated: the check is read after the step (see the top) */
    bool have_result; /* result: the loss, read back with the check of the last step and not written since */
    float result;
} wg_program;

typedef struct {
    tg_engine base;
    wgpu_ctx *c;
    wg_buffer params;
    wg_buffer staging; /* MapRead buffer for reads, grown on demand */
    int64_t staging_bytes;
} wg_engine;

static wg_buffer new_buffer(wgpu_ctx *c, const char *label, wg_flags usage, int64_t bytes) {
    wg_buffer_desc d = {NULL, {label, WG_STRLEN}, usage, (uint64_t)(bytes < 4 ? 4 : (bytes + 3) & ~3ll), 0};
    return c->f.DeviceCreateBuffer(c->device, &d);
}

static void drop_buffer(wgpu_ctx *c, wg_buffer b) {
    if (!b) return;
    c->f.BufferDestroy(b);
    c->f.BufferRelease(b);
}

/* Records `n` calls into one compute pass of `enc`. */
static void encode(wgpu_ctx *c, wg_encoder enc, const wg_call *calls, int n) {
    wg_pass pass = c->f.CommandEncoderBeginComputePass(enc, NULL);
    for (int i = 0; i < n; i++) {
        if (i == 0 || calls[i].pipe != calls[i - 1].pipe) c->f.ComputePassEncoderSetPipeline(pass, calls[i].pipe);
        c->f.ComputePassEncoderSetBindGroup(pass, 0, calls[i].bg, 0, NULL);
        c->f.ComputePassEncoderDispatchWorkgroups(pass, calls[i].grid[0], calls[i].grid[1], calls[i].grid[2]);
    }
    c->f.ComputePassEncoderEnd(pass);
    c->f.ComputePassEncoderRelease(pass);
}

static void submit(wgpu_ctx *c, wg_encoder enc) {
    wg_cmdbuf cb = c->f.CommandEncoderFinish(enc, NULL);
    c->f.QueueSubmit(c->queue, 1, &cb);
    c->f.CommandBufferRelease(cb);
    c->f.CommandEncoderRelease(enc);
}

/* Turns a kernel spec into a call: its pipeline and a bind group over the
 * program's arena buffers. */
static tg_status make_call(wgpu_ctx *c, const tg_graph *g, wg_program *wp, const tg_kernel_spec *k, wg_pipeline pipe,
                           const char *what, wg_call *out) {
    out->pipe = pipe;
    wg_bind_entry e[TG_WGSL_MAX_BINDINGS];
    memset(e, 0, sizeof e);
    for (int b = 0; b < k->n_bindings; b++) {
        e[b].binding = (uint32_t)b;
        e[b].buffer = wp->arena[k->bind[b].arena];
        e[b].offset = (uint64_t)k->bind[b].offset;
        e[b].size = (uint64_t)k->bind[b].size;
    }
    wg_bind_group_desc d = {NULL, {what, WG_STRLEN}, tg_wgpu_bgl(c, k->n_bindings, k->read_only), (size_t)k->n_bindings, e};
    out->bg = c->f.DeviceCreateBindGroup(c->device, &d);
    memcpy(out->grid, k->dispatch, sizeof out->grid);
    out->node = k->node;
    out->gated = k->gated;
    memcpy(out->mm_mnk, k->mm_mnk, sizeof out->mm_mnk);
    out->flops = k->flops;
    const tg_node *n = &g->nodes[k->node];
    char sh[64];
    const char *kind = k->source; /* "// node N: matmul -> add -> relu": the kernel after its node */
    if (strncmp(kind, "// node ", 8) == 0 && strstr(kind, ": ")) kind = strstr(kind, ": ") + 2;
    size_t line = strcspn(kind, "\n");
    snprintf(out->label, sizeof out->label, "%.*s %s", (int)(line < 80 ? line : 80), kind,
             tg_shape_str(n->shape, sh, sizeof sh));
    return out->bg ? TG_OK : tg_fail(TG_ERR_BACKEND, "webgpu: %s: no bind group", what);
}

/* With TG_WEBGPU=dump=DIR, every kernel of every program compiled goes to
 * DIR/p<program>_<index>_node<id>.wgsl with its bindings and grid in a
 * header comment: for reading, diffing and profiling the generated code.
 * The setting is read at each compile (a test points it at a folder of its
 * own for a while); a file that cannot be written fails the compile. */
static tg_status dump_kernels(const tg_kernel_spec *ks, int n) {
    static int program;
    tg_wgpu_setting set;
    tg_status st = tg_wgpu_setting_read(&set);
    if (st != TG_OK || !set.dump) return st;
    program++;
    for (int i = 0; i < n; i++) {
        if (!ks[i].source) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/p%d_%03d_node%d.wgsl", set.dump, program, i, ks[i].node);
        FILE *f = fopen(path, "w");
        if (!f) return tg_fail(TG_ERR_IO, "webgpu: TG_WEBGPU=dump=%.300s: cannot write %s: %s", set.dump, path,
                               strerror(errno));
        fprintf(f, "// grid %u x %u x %u of %u; bindings:", ks[i].dispatch[0], ks[i].dispatch[1], ks[i].dispatch[2],
                ks[i].workgroup_size);
        for (int b = 0; b < ks[i].n_bindings; b++)
            fprintf(f, " (arena %d, %lld +%lld)", ks[i].bind[b].arena, (long long)ks[i].bind[b].offset,
                    (long long)ks[i].bind[b].size);
        fprintf(f, "\n%s", ks[i].source);
        if (fclose(f) != 0) return tg_fail(TG_ERR_IO, "webgpu: TG_WEBGPU=dump: cannot write %s", path);
    }
    return TG_OK;
}

static tg_status compile_locked(wg_engine *e, tg_program *p, wg_program *wp, const tg_wgsl_program *prog) {
    const tg_kernel_spec *ks = prog->k;
    int n_specs = prog->n;
    wgpu_ctx *c = e->c;
    const tg_graph *g = p->g;
    const tg_plan *pl = &p->plan;
    tg_status st = TG_OK;
    wp->arena[TG_ARENA_PARAMS] = e->params;
    wp->bytes[TG_ARENA_PARAMS] = e->base.params_bytes;
    static const char *labels[] = {"params", "persistent arena", "scratch arena"};
    for (int a = TG_ARENA_PERSIST; a < TG_N_ARENAS; a++) {
        /* The kernels' partial sums may need the scratch arena longer than the plan. */
        wp->bytes[a] = a == TG_ARENA_SCRATCH && prog->scratch_bytes > pl->arena_bytes[a] ? prog->scratch_bytes
                                                                                         : pl->arena_bytes[a];
        wp->arena[a] = new_buffer(c, labels[a], WG_USAGE_STORAGE | WG_USAGE_COPY_SRC | WG_USAGE_COPY_DST, wp->bytes[a]);
        if (!wp->arena[a]) return tg_fail(TG_ERR_NOMEM, "webgpu: cannot allocate the %s (%lld bytes)", labels[a],
                                          (long long)wp->bytes[a]);
    }
    if (prog->workspace_bytes > 0) {
        wp->bytes[TG_WGSL_WORKSPACE] = prog->workspace_bytes;
        wp->arena[TG_WGSL_WORKSPACE] = new_buffer(c, "fused-kernel workspace", WG_USAGE_STORAGE, prog->workspace_bytes);
        if (!wp->arena[TG_WGSL_WORKSPACE])
            return tg_fail(TG_ERR_NOMEM, "webgpu: cannot allocate %lld bytes of workspace", (long long)prog->workspace_bytes);
    }
    wp->calls = tg_calloc((size_t)n_specs + 1, sizeof(wg_call));
    wg_call *init = tg_calloc((size_t)n_specs + 1, sizeof(wg_call));
    tg_wgpu_pipeline_req *req = tg_calloc((size_t)n_specs + 1, sizeof *req);
    char (*what)[96] = tg_calloc((size_t)n_specs + 1, sizeof *what);
    if (!wp->calls || !init || !req || !what) {
        free(init), free(req), free(what);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    /* Every kernel's pipeline first, compiled together (pipeline.c). */
    int n_req = 0;
    for (int i = 0; i < n_specs; i++) {
        const tg_kernel_spec *k = &ks[i];
        if (k->upload) continue;
        snprintf(what[i], sizeof what[i], "node %d (%s)", k->node, tg_ops[g->nodes[k->node].op].name);
        req[n_req++] = (tg_wgpu_pipeline_req){k->source, k->n_bindings, k->read_only, what[i], NULL};
    }
    st = tg_wgpu_pipelines(c, req, n_req, p->compile_progress, p->compile_progress_user);
    int n_init = 0;
    for (int i = 0, r = 0; i < n_specs && st == TG_OK; i++) {
        const tg_kernel_spec *k = &ks[i];
        const tg_slot *s = &pl->slot[k->node];
        if (k->upload) {
            c->f.QueueWriteBuffer(c->queue, wp->arena[s->arena], (uint64_t)s->offset, k->upload, (size_t)k->upload_bytes);
            continue;
        }
        /* Constants run once, now; everything else every step (a writeback's
         * node is its destination, a leaf, so it lands in the step list). */
        bool once = tg_ops[g->nodes[k->node].op].flags & TG_OPF_CONSTANT;
        st = make_call(c, g, wp, k, req[r++].pipe, what[i], once ? &init[n_init++] : &wp->calls[wp->n_calls++]);
    }
    free(req), free(what);
    if (st == TG_OK && n_init) {
        wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
        encode(c, enc, init, n_init);
        submit(c, enc);
    }
    for (int i = 0; i < n_init; i++)
        if (init[i].bg) c->f.BindGroupRelease(init[i].bg);
    free(init);
    if (st == TG_OK) st = tg_wgpu_take_error(c, "webgpu compile");
    p->n_dispatches = wp->n_calls;
    p->workspace_bytes = prog->workspace_bytes + (wp->bytes[TG_ARENA_SCRATCH] - pl->arena_bytes[TG_ARENA_SCRATCH]);
    while (wp->split < wp->n_calls && wp->calls[wp->split].node < p->first_update &&
           !(tg_ops[g->nodes[wp->calls[wp->split].node].op].flags & TG_OPF_LEAF))
        wp->split++;
    while (wp->cut < wp->n_calls && wp->calls[wp->cut].node < p->cut &&
           !(tg_ops[g->nodes[wp->calls[wp->cut].node].op].flags & TG_OPF_LEAF))
        wp->cut++;
    /* Data parallel: no kernel of the backward may run after the exchange
     * (a fused kernel runs at its group's turn; a writeback's node is its leaf). */
    for (int i = wp->cut; p->dp && st == TG_OK && i < wp->n_calls; i++)
        if (wp->calls[i].node < p->cut && !(tg_ops[g->nodes[wp->calls[i].node].op].flags & TG_OPF_LEAF))
            st = tg_fail(TG_ERR_STATE, "webgpu: data-parallel: kernel %d (node %d) of the backward runs after the "
                         "end of the backward", i, wp->calls[i].node);
    wp->pre = tg_calloc((size_t)wp->n_calls + 1, sizeof(int));
    if (!wp->pre && st == TG_OK) st = tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    for (int i = wp->cut; wp->pre && i < wp->n_calls; i++) {
        int node = wp->calls[i].node;
        if (!(tg_ops[g->nodes[node].op].flags & TG_OPF_LEAF)) continue;
        for (int w = 0; w < p->n_wb; w++)
            if (!pl->wb_free[w] && p->wb[w].dst == node && p->wb[w].src < p->cut) {
                wp->pre[wp->n_pre++] = i;
                break;
            }
    }
    wp->gated = p->check >= 0 && !p->dp && !p->check_each && wp->split < wp->n_calls;
    for (int i = wp->split; i < wp->n_calls && wp->gated; i++) wp->gated = wp->calls[i].gated;
    return st;
}

static tg_status wg_compile(tg_engine *e_, tg_program *p) {
    wg_engine *e = (wg_engine *)e_;
    wg_program *wp = tg_calloc(1, sizeof *wp);
    if (!wp) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    p->impl = wp;
    tg_status st = tg_program_profile(&wp->profile);
    if (st != TG_OK) return st;
    tg_wgsl_limits lim;
    tg_wgpu_kernel_limits(e->c, &lim);
    lim.one_kernel_per_node = p->check_each;
    lim.gate_updates = p->check >= 0 && !p->dp && !p->check_each;
    lim.step_check = p->check;
    /* Pure codegen first: every limit is checked before any GPU memory is allocated. */
    tg_wgsl_program prog;
    st = tg_wgsl_emit_program(p->g, &p->plan, p->fusion, p->wb, p->n_wb, &lim, &prog);
    if (st != TG_OK) return st;
    st = dump_kernels(prog.k, prog.n);
    if (st != TG_OK) {
        tg_wgsl_program_free(&prog);
        return st;
    }
    pthread_mutex_lock(&e->c->mu);
    st = compile_locked(e, p, wp, &prog);
    pthread_mutex_unlock(&e->c->mu);
    tg_wgsl_program_free(&prog);
    return st;
}

static void wg_release(tg_engine *e_, tg_program *p) {
    wg_engine *e = (wg_engine *)e_;
    wg_program *wp = p->impl;
    if (!wp) return;
    if (wp->profile.on && wp->runs > 0 && wp->runs < wp->profile.run)
        fprintf(stderr, "webgpu profile: none for a program of %d dispatches: it ran %d time%s, and TG_PROFILE times "
                "run %d (TG_PROFILE=run=N picks another; data-parallel runs are not timed)\n",
                wp->n_calls, wp->runs, wp->runs > 1 ? "s" : "", wp->profile.run);
    pthread_mutex_lock(&e->c->mu);
    for (int i = 0; i < wp->n_calls; i++)
        if (wp->calls[i].bg) e->c->f.BindGroupRelease(wp->calls[i].bg);
    for (int a = TG_ARENA_PERSIST; a <= TG_WGSL_WORKSPACE; a++) drop_buffer(e->c, wp->arena[a]);
    pthread_mutex_unlock(&e->c->mu);
    free(wp->calls);
    free(wp->pre);
    free(wp);
    p->impl = NULL;
}

/* The buffer behind `arena`, with a bounds check of [off, off + bytes). */
static tg_status locate(wg_engine *e, tg_program *p, int arena, int64_t off, int64_t bytes, const char *api,
                        wg_buffer *buf) {
    wg_program *wp = p ? p->impl : NULL;
    int64_t size = arena == TG_ARENA_PARAMS ? e->base.params_bytes : wp ? wp->bytes[arena] : -1;
    *buf = arena == TG_ARENA_PARAMS ? e->params : wp ? wp->arena[arena] : NULL;
    if (arena < 0 || arena >= TG_N_ARENAS || !*buf) return tg_fail(TG_ERR_STATE, "%s: no arena %d", api, arena);
    if (off < 0 || bytes < 0 || off + bytes > size || (off | bytes) & 3)
        return tg_fail(TG_ERR_ARG, "%s: bytes [%lld, %lld) outside arena %d (%lld bytes) or not 4-aligned", api,
                       (long long)off, (long long)(off + bytes), arena, (long long)size);
    return TG_OK;
}

static tg_status wg_write(tg_engine *e_, tg_program *p, int arena, int64_t off, const void *src, int64_t bytes) {
    wg_engine *e = (wg_engine *)e_;
    wg_buffer buf;
    tg_status st = locate(e, p, arena, off, bytes, "webgpu write", &buf);
    if (st != TG_OK || bytes == 0) return st;
    if (p && p->impl) ((wg_program *)p->impl)->have_result = false;
    pthread_mutex_lock(&e->c->mu);
    e->c->f.QueueWriteBuffer(e->c->queue, buf, (uint64_t)off, src, (size_t)bytes);
    st = tg_wgpu_take_error(e->c, "webgpu write");
    pthread_mutex_unlock(&e->c->mu);
    return st;
}

/* The read-back buffer, grown to at least `bytes` (c->mu held); false when
 * it cannot be allocated. */
static bool staging_for(wg_engine *e, int64_t bytes) {
    if (e->staging_bytes < bytes) {
        drop_buffer(e->c, e->staging);
        e->staging = new_buffer(e->c, "read-back", WG_USAGE_MAP_READ | WG_USAGE_COPY_DST, bytes);
        e->staging_bytes = e->staging ? bytes : 0;
    }
    return e->staging != NULL;
}

static tg_status wg_read(tg_engine *e_, tg_program *p, int arena, int64_t off, void *dst, int64_t bytes) {
    wg_engine *e = (wg_engine *)e_;
    wgpu_ctx *c = e->c;
    wg_buffer buf;
    tg_status st = locate(e, p, arena, off, bytes, "webgpu read", &buf);
    if (st != TG_OK || bytes == 0) return st;
    wg_program *wp = p ? p->impl : NULL;
    if (wp && wp->have_result && bytes == 4 && arena == p->plan.slot[p->result].arena &&
        off == p->plan.slot[p->result].offset) {
        memcpy(dst, &wp->result, 4);
        return TG_OK;
    }
    pthread_mutex_lock(&c->mu);
    if (!staging_for(e, bytes))
        st = tg_fail(TG_ERR_NOMEM, "webgpu read: cannot allocate %lld bytes to read back", (long long)bytes);
    if (st == TG_OK) {
        wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
        c->f.CommandEncoderCopyBufferToBuffer(enc, buf, (uint64_t)off, e->staging, 0, (uint64_t)bytes);
        submit(c, enc);
        st = tg_wgpu_take_error(c, "webgpu read");
    }
    if (st == TG_OK) st = tg_wgpu_map_read(c, e->staging, dst, (size_t)bytes);
    if (st == TG_OK) st = tg_wgpu_take_error(c, "webgpu read"); /* errors of earlier steps surface here */
    pthread_mutex_unlock(&c->mu);
    return st;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits until the GPU has done everything submitted (a 4-byte read-back). */
static tg_status wait_idle(wg_engine *e) {
    wgpu_ctx *c = e->c;
    if (!staging_for(e, 4)) return tg_fail(TG_ERR_NOMEM, "webgpu: cannot allocate a read-back buffer");
    wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
    c->f.CommandEncoderCopyBufferToBuffer(enc, e->params, 0, e->staging, 0, 4);
    submit(c, enc);
    uint32_t word;
    return tg_wgpu_map_read(c, e->staging, &word, 4);
}

typedef struct {
    const char *label;
    double ms;
    int n;
    double flops;
    int node;
} prof_row;

static int by_ms(const void *a, const void *b) {
    double x = ((const prof_row *)a)->ms, y = ((const prof_row *)b)->ms;
    return (x < y) - (x > y);
}

/* Each call's time, waiting for it alone: the GPU idles between kernels
 * (its clocks may drop), and the wait's cost on an empty submit is
 * subtracted. *note says so. */
static tg_status profile_waits(wg_engine *e, wg_program *wp, double *ms, char *note, size_t n) {
    wgpu_ctx *c = e->c;
    tg_status st = wait_idle(e);
    double base = 1e9;
    for (int r = 0; r < 5 && st == TG_OK; r++) { /* the cost of submitting and waiting for nothing */
        double t0 = now_s();
        wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
        encode(c, enc, wp->calls, 0);
        submit(c, enc);
        st = wait_idle(e);
        if (now_s() - t0 < base) base = now_s() - t0;
    }
    for (int i = 0; i < wp->n_calls && st == TG_OK; i++) {
        double t0 = now_s();
        wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
        encode(c, enc, &wp->calls[i], 1);
        submit(c, enc);
        st = wait_idle(e);
        ms[i] = 1e3 * (now_s() - t0 - base);
        if (ms[i] < 0) ms[i] = 0;
    }
    snprintf(note, n, "each waited for alone; %.1f us of waiting subtracted from each", base * 1e6);
    return st;
}

/* Each call's time from the GPU's clock: every call in a compute pass of
 * its own that writes the clock as it begins and ends, all of them
 * submitted at once, so the GPU stays busy as in a step. */
#define PROFILE_PASSES 1024 /* passes per query set (WebGPU allows 4096 queries) */
static tg_status profile_timestamps(wg_engine *e, wg_program *wp, double *ms, char *note, size_t n) {
    wgpu_ctx *c = e->c;
    uint64_t first = UINT64_MAX, last = 0;
    tg_status st = TG_OK;
    for (int from = 0; from < wp->n_calls && st == TG_OK; from += PROFILE_PASSES) {
        int k = wp->n_calls - from < PROFILE_PASSES ? wp->n_calls - from : PROFILE_PASSES;
        int64_t bytes = (int64_t)k * 2 * 8;
        wg_query_set_desc qd = {NULL, {"profile", WG_STRLEN}, WG_QUERY_TIMESTAMP, (uint32_t)(2 * k)};
        wg_query_set qs = c->f.DeviceCreateQuerySet(c->device, &qd);
        wg_buffer resolved = new_buffer(c, "profile", WG_USAGE_QUERY_RESOLVE | WG_USAGE_COPY_SRC, bytes);
        uint64_t *t = malloc((size_t)bytes);
        if (!qs || !resolved || !t || !staging_for(e, bytes)) st = tg_fail(TG_ERR_NOMEM, "webgpu profile: out of memory");
        if (st == TG_OK) {
            wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
            for (int i = 0; i < k; i++) {
                const wg_call *w = &wp->calls[from + i];
                wg_pass_timestamps tw = {NULL, qs, (uint32_t)(2 * i), (uint32_t)(2 * i + 1)};
                wg_pass_desc pd = {NULL, {NULL, 0}, &tw};
                wg_pass pass = c->f.CommandEncoderBeginComputePass(enc, &pd);
                c->f.ComputePassEncoderSetPipeline(pass, w->pipe);
                c->f.ComputePassEncoderSetBindGroup(pass, 0, w->bg, 0, NULL);
                c->f.ComputePassEncoderDispatchWorkgroups(pass, w->grid[0], w->grid[1], w->grid[2]);
                c->f.ComputePassEncoderEnd(pass);
                c->f.ComputePassEncoderRelease(pass);
            }
            c->f.CommandEncoderResolveQuerySet(enc, qs, 0, (uint32_t)(2 * k), resolved, 0);
            c->f.CommandEncoderCopyBufferToBuffer(enc, resolved, 0, e->staging, 0, (uint64_t)bytes);
            submit(c, enc);
            st = tg_wgpu_take_error(c, "webgpu profile");
        }
        if (st == TG_OK) st = tg_wgpu_map_read(c, e->staging, t, (size_t)bytes);
        for (int i = 0; i < k && st == TG_OK; i++) {
            ms[from + i] = t[2 * i + 1] > t[2 * i] ? (double)(t[2 * i + 1] - t[2 * i]) * 1e-6 : 0;
            if (t[2 * i] < first) first = t[2 * i];
            if (t[2 * i + 1] > last) last = t[2 * i + 1];
        }
        free(t);
        drop_buffer(c, resolved);
        if (qs) {
            c->f.QuerySetDestroy(qs);
            c->f.QuerySetRelease(qs);
        }
    }
    snprintf(note, n, "GPU timestamps, a pass per kernel submitted together; %.3f ms from the first kernel's start "
             "to the last one's end", last > first ? (double)(last - first) * 1e-6 : 0.0);
    return st;
}

/* The product kernels by the shape of their products, M x N x K with M <= N
 * (a weight gradient [D, F] and its transpose [F, D] are one shape): the
 * time and work per shape, as lines to set beside another framework's
 * products of the same shapes (make bench BACKEND=webgpu does). A split
 * product's two phases count together. */
static void profile_products(const wg_program *wp, const double *ms) {
    int64_t (*key)[3] = tg_calloc((size_t)wp->n_calls + 1, sizeof *key);
    prof_row *sum = tg_calloc((size_t)wp->n_calls + 1, sizeof *sum);
    int n = 0;
    for (int i = 0; key && sum && i < wp->n_calls; i++) {
        const wg_call *w = &wp->calls[i];
        if (!w->mm_mnk[2]) continue;
        int64_t lo = w->mm_mnk[0] < w->mm_mnk[1] ? w->mm_mnk[0] : w->mm_mnk[1];
        int64_t hi = w->mm_mnk[0] ^ w->mm_mnk[1] ^ lo, kk = w->mm_mnk[2];
        int j = 0;
        while (j < n && !(key[j][0] == lo && key[j][1] == hi && key[j][2] == kk)) j++;
        if (j == n) key[n][0] = lo, key[n][1] = hi, key[n][2] = kk, n++;
        sum[j].ms += ms[i];
        sum[j].flops += w->flops;
        if (w->flops > 0) sum[j].n += (int)(w->flops / (2.0 * (double)w->mm_mnk[0] * (double)w->mm_mnk[1] * (double)kk) + 0.5); /* batch, members, terms */
    }
    if (n) fprintf(stderr, "  products by shape (M x N x K, M <= N):\n");
    for (int j = 0; j < n; j++)
        fprintf(stderr,
                "  %9.3f ms %8.2f TFLOP/s %5d products  %lld x %lld x %lld\n"
                "{\"wg_profile\": \"product\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"ms\": %.4f, "
                "\"gflop\": %.9g, \"products\": %d}\n",
                sum[j].ms, sum[j].ms > 0 ? sum[j].flops / sum[j].ms * 1e-9 : 0.0, sum[j].n, (long long)key[j][0],
                (long long)key[j][1], (long long)key[j][2], (long long)key[j][0], (long long)key[j][1],
                (long long)key[j][2], sum[j].ms, sum[j].flops * 1e-9, sum[j].n);
    free(key);
    free(sum);
}

static tg_status profile_run(wg_engine *e, const tg_program *p, wg_program *wp) {
    prof_row *rows = tg_calloc((size_t)wp->n_calls + 1, sizeof *rows), *kinds = tg_calloc((size_t)wp->n_calls + 1, sizeof *kinds);
    double *ms = tg_calloc((size_t)wp->n_calls + 1, sizeof *ms);
    char note[160] = "";
    tg_status st = rows && kinds && ms ? TG_OK : tg_fail(TG_ERR_NOMEM, "webgpu profile: out of memory");
    if (st == TG_OK)
        st = e->c->timestamps ? profile_timestamps(e, wp, ms, note, sizeof note) : profile_waits(e, wp, ms, note, sizeof note);
    int nk = 0;
    double total = 0;
    for (int i = 0; i < wp->n_calls && st == TG_OK; i++) {
        rows[i] = (prof_row){wp->calls[i].label, ms[i], 1, wp->calls[i].flops, wp->calls[i].node};
        total += ms[i];
        const char *k = wp->calls[i].label;
        int j = 0;
        while (j < nk && strcmp(kinds[j].label, k)) j++;
        if (j == nk) kinds[nk++] = (prof_row){k, 0, 0, 0, -1};
        kinds[j].ms += ms[i];
        kinds[j].n++;
        kinds[j].flops += wp->calls[i].flops;
    }
    if (st == TG_OK) {
        qsort(rows, (size_t)wp->n_calls, sizeof *rows, by_ms);
        qsort(kinds, (size_t)nk, sizeof *kinds, by_ms);
        fprintf(stderr, "webgpu profile: %d dispatches, %.3f ms of kernels (%s)\n", wp->n_calls, total, note);
        fprintf(stderr, "  by kind:\n");
        for (int j = 0; j < nk; j++) {
            fprintf(stderr, "  %9.3f ms %5.1f%% %4dx  %s", kinds[j].ms, 100 * kinds[j].ms / (total > 0 ? total : 1),
                    kinds[j].n, kinds[j].label);
            if (kinds[j].flops > 0 && kinds[j].ms > 0) fprintf(stderr, "  (%.2f TFLOP/s)", kinds[j].flops / kinds[j].ms * 1e-9);
            fprintf(stderr, "\n");
        }
        bool all = wp->profile.every;
        fprintf(stderr, all ? "  every dispatch, slowest first:\n" : "  slowest:\n");
        for (int i = 0; i < wp->n_calls && (all || i < TG_PROFILE_SLOWEST); i++) {
            char site[200];
            tg_program_node_site(p, rows[i].node, site, sizeof site);
            fprintf(stderr, "  %9.3f ms  %%%-5d %s  %s\n", rows[i].ms, rows[i].node, rows[i].label, site);
        }
        profile_products(wp, ms);
    }
    free(ms);
    free(rows);
    free(kinds);
    return st;
}

/* Submits calls [from, to) in pieces growing from SUBMIT_FIRST to
 * SUBMIT_MOST (see the top; c->mu held). */
static tg_status submit_calls(wgpu_ctx *c, const wg_program *wp, int from, int to) {
    for (int at = from, piece = SUBMIT_FIRST;;) {
        int n = to - at < piece ? to - at : piece;
        wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
        encode(c, enc, wp->calls + at, n);
        submit(c, enc);
        at += n;
        if (at >= to) break;
        piece = 2 * piece < SUBMIT_MOST ? 2 * piece : SUBMIT_MOST;
    }
    return tg_wgpu_take_error(c, "tg_session_step");
}

/* check_each: node id's f32 output read back and searched for NaN or Inf
 * (the debugging mode: one wait per kernel). c->mu not held. */
static tg_status check_node(wg_engine *e, tg_program *p, int id) {
    const tg_node *n = &p->g->nodes[id];
    const tg_slot *sl = &p->plan.slot[id];
    if (n->dtype != TG_F32 || sl->arena < 0 || sl->bytes == 0) return TG_OK;
    int64_t count = tg_ir_numel(n);
    float *x = malloc((size_t)count * 4 + 4);
    if (!x) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory checking numerics");
    tg_status st = wg_read(&e->base, p, sl->arena, sl->offset, x, count * 4);
    int64_t at = st == TG_OK ? tg_first_nonfinite(x, count) : -1;
    if (at >= 0) st = tg_program_numeric_fail(p, id, x[at], at);
    free(x);
    return st;
}

/* Data parallel, at the cut: every gradient bucket read back into the
 * exchange's pack in one copy, averaged over the ranks on the host, and
 * written back before the optimizer's kernels are submitted. local: this
 * rank's status so far (a failed rank still takes part, reading nothing). */
static tg_status dp_exchange(wg_engine *e, tg_program *p, tg_status local) {
    wgpu_ctx *c = e->c;
    tg_exchange *dp = p->dp;
    dp->begin(dp, NULL);
    int64_t bytes = dp->status_at * 4;
    wg_buffer buf;
    double t0 = now_s();
    if (local == TG_OK && bytes > 0) {
        pthread_mutex_lock(&c->mu);
        /* The backward done first, so that the time counted from here is
         * the exchange's: the read-back, the all-reduce, the write-back. */
        local = wait_idle(e);
        t0 = now_s();
        if (!staging_for(e, bytes))
            local = tg_fail(TG_ERR_NOMEM, "webgpu: cannot allocate %lld bytes to read the gradients back", (long long)bytes);
        wg_encoder enc = local == TG_OK ? c->f.DeviceCreateCommandEncoder(c->device, NULL) : NULL;
        for (int s = 0; enc && s < dp->n_seg && local == TG_OK; s++) {
            local = locate(e, p, dp->seg[s].arena, dp->seg[s].offset, dp->seg[s].bytes, "webgpu data-parallel", &buf);
            if (local == TG_OK)
                c->f.CommandEncoderCopyBufferToBuffer(enc, buf, (uint64_t)dp->seg[s].offset, e->staging,
                                                      (uint64_t)dp->seg[s].at * 4, (uint64_t)dp->seg[s].bytes);
        }
        if (enc) submit(c, enc);
        if (local == TG_OK) local = tg_wgpu_take_error(c, "tg_session_step");
        if (local == TG_OK) local = tg_wgpu_map_read(c, e->staging, dp->pack, (size_t)bytes);
        pthread_mutex_unlock(&c->mu);
    }
    double t1 = now_s();
    tg_status st = dp->cut(dp, local);
    double t2 = now_s();
    dp->exposed_s += t1 - t0;
    if (st != TG_OK) return st;
    pthread_mutex_lock(&c->mu);
    for (int s = 0; s < dp->n_seg && st == TG_OK; s++) {
        st = locate(e, p, dp->seg[s].arena, dp->seg[s].offset, dp->seg[s].bytes, "webgpu data-parallel", &buf);
        if (st == TG_OK)
            c->f.QueueWriteBuffer(c->queue, buf, (uint64_t)dp->seg[s].offset, dp->pack + dp->seg[s].at,
                                  (size_t)dp->seg[s].bytes);
    }
    if (st == TG_OK) st = tg_wgpu_take_error(c, "tg_session_step");
    pthread_mutex_unlock(&c->mu);
    dp->exposed_s += now_s() - t2;
    return st;
}

static tg_status run_checked(wg_engine *e, tg_program *p, wg_program *wp) {
    wgpu_ctx *c = e->c;
    tg_status st = TG_OK;
    if (!p->check_each) {
        pthread_mutex_lock(&c->mu);
        st = submit_calls(c, wp, 0, p->dp ? wp->cut : wp->split);
        pthread_mutex_unlock(&c->mu);
        if (p->dp) {
            st = dp_exchange(e, p, st);
            pthread_mutex_lock(&c->mu);
            if (st == TG_OK && wp->split > wp->cut) st = submit_calls(c, wp, wp->cut, wp->split);
            pthread_mutex_unlock(&c->mu);
        }
        float v = 0;
        const tg_slot *sl = p->check >= 0 ? &p->plan.slot[p->check] : NULL;
        if (st == TG_OK && sl) st = wg_read(&e->base, p, sl->arena, sl->offset, &v, 4);
        if (st == TG_OK && v - v != 0) st = tg_program_numeric_fail(p, p->check, v, 0);
    } else {
        bool exchanged = !p->dp;
        for (int i = 0; i < p->g->n && st == TG_OK; i++)
            if (p->g->nodes[i].op == TG_OP_INPUT || p->g->nodes[i].op == TG_OP_PARAM) st = check_node(e, p, i);
        for (int i = 0; i < wp->n_calls && st == TG_OK; i++) {
            if (!exchanged && i == wp->cut) {
                exchanged = true;
                if ((st = dp_exchange(e, p, TG_OK)) != TG_OK) break;
            }
            pthread_mutex_lock(&c->mu);
            st = submit_calls(c, wp, i, i + 1);
            pthread_mutex_unlock(&c->mu);
            /* a call followed by one of the same node (phase 1 of a two-phase kernel) leaves the value to it */
            bool phase1 = i + 1 < wp->n_calls && wp->calls[i + 1].node == wp->calls[i].node;
            if (st == TG_OK && !phase1 && !(tg_ops[p->g->nodes[wp->calls[i].node].op].flags & TG_OPF_LEAF))
                st = check_node(e, p, wp->calls[i].node);
        }
        if (!exchanged) st = dp_exchange(e, p, st); /* stopped before the cut, or the cut is the end */
        return st;
    }
    pthread_mutex_lock(&c->mu);
    if (st == TG_OK) st = submit_calls(c, wp, wp->split, wp->n_calls);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* After a gated step: the check and the loss in one read-back (see the
 * top); a check that is not finite fails the step, whose updates skipped
 * their work. */
static tg_status read_check(wg_engine *e, tg_program *p, wg_program *wp) {
    wgpu_ctx *c = e->c;
    const tg_slot *chk = &p->plan.slot[p->check], *res = &p->plan.slot[p->result];
    float v[2];
    pthread_mutex_lock(&c->mu);
    tg_status st = staging_for(e, 8) ? TG_OK : tg_fail(TG_ERR_NOMEM, "webgpu: cannot allocate a read-back buffer");
    if (st == TG_OK) {
        wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
        c->f.CommandEncoderCopyBufferToBuffer(enc, wp->arena[chk->arena], (uint64_t)chk->offset, e->staging, 0, 4);
        c->f.CommandEncoderCopyBufferToBuffer(enc, wp->arena[res->arena], (uint64_t)res->offset, e->staging, 4, 4);
        submit(c, enc);
        st = tg_wgpu_map_read(c, e->staging, v, 8);
    }
    if (st == TG_OK) st = tg_wgpu_take_error(c, "tg_session_step");
    pthread_mutex_unlock(&c->mu);
    if (st != TG_OK) return st;
    wp->have_result = true;
    wp->result = v[1];
    return v[0] - v[0] != 0 ? tg_program_numeric_fail(p, p->check, v[0], 0) : TG_OK;
}

/* A micro-step (p->to_cut): the calls before the cut, then the writebacks
 * of values computed there; with check_each, each kernel's output checked
 * as it is made (as run_checked does). */
static tg_status run_to_cut(wg_engine *e, tg_program *p, wg_program *wp) {
    wgpu_ctx *c = e->c;
    pthread_mutex_lock(&c->mu);
    tg_status st = tg_wgpu_take_error(c, "tg_session_step");
    if (st == TG_OK && !p->check_each) st = submit_calls(c, wp, 0, wp->cut);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < p->g->n && st == TG_OK && p->check_each; i++)
        if (p->g->nodes[i].op == TG_OP_INPUT || p->g->nodes[i].op == TG_OP_PARAM) st = check_node(e, p, i);
    for (int i = 0; i < wp->cut && st == TG_OK && p->check_each; i++) {
        pthread_mutex_lock(&c->mu);
        st = submit_calls(c, wp, i, i + 1);
        pthread_mutex_unlock(&c->mu);
        bool phase1 = i + 1 < wp->n_calls && wp->calls[i + 1].node == wp->calls[i].node;
        if (st == TG_OK && !phase1 && !(tg_ops[p->g->nodes[wp->calls[i].node].op].flags & TG_OPF_LEAF))
            st = check_node(e, p, wp->calls[i].node);
    }
    pthread_mutex_lock(&c->mu);
    for (int k = 0; k < wp->n_pre && st == TG_OK; k++) st = submit_calls(c, wp, wp->pre[k], wp->pre[k] + 1);
    pthread_mutex_unlock(&c->mu);
    return st;
}

static tg_status wg_run(tg_engine *e_, tg_program *p) {
    wg_engine *e = (wg_engine *)e_;
    wgpu_ctx *c = e->c;
    wg_program *wp = p->impl;
    if (p->to_cut) {
        wp->have_result = false;
        return run_to_cut(e, p, wp);
    }
    pthread_mutex_lock(&c->mu);
    tg_status st = tg_wgpu_take_error(c, "tg_session_step");
    wp->have_result = false;
    bool checked = (p->check >= 0 && !wp->gated) || p->check_each || p->dp;
    bool profiled = st == TG_OK && wp->profile.on && !p->dp && ++wp->runs == wp->profile.run; /* not between ranks */
    if (profiled) st = profile_run(e, p, wp);
    else if (st == TG_OK && !checked) st = submit_calls(c, wp, 0, wp->n_calls);
    pthread_mutex_unlock(&c->mu);
    if (st != TG_OK && p->dp) return dp_exchange(e, p, st); /* the other ranks wait for this one's status */
    if (st == TG_OK && checked && !profiled) st = run_checked(e, p, wp);
    if (st == TG_OK && wp->gated && !profiled) st = read_check(e, p, wp);
    return st;
}

static void wg_destroy(tg_engine *e_) {
    wg_engine *e = (wg_engine *)e_;
    pthread_mutex_lock(&e->c->mu);
    /* Work still queued (a compile's constants, a step nobody waited for)
     * finishes first: lavapipe crashed in its queue thread when a process
     * exited while it still compiled those kernels. */
    if (e->params) (void)wait_idle(e);
    drop_buffer(e->c, e->params);
    drop_buffer(e->c, e->staging);
    pthread_mutex_unlock(&e->c->mu);
    free(e);
}

/* The fusion pass before planning (src/wgsl/grouping.c): causal attention,
 * products with an epilogue, siblings, sums and groups of products, the
 * optimizer's updates, the clip norm's sums, elementwise chains.
 * Off where every node's value must be readable (check_numerics). */
static tg_status wg_fuse(const tg_program *p, tg_fusion **out) {
    *out = NULL;
    if (p->check_each || tg_wgsl_forced()->unfused) return TG_OK;
    wgpu_ctx *c;
    tg_status st = tg_wgpu_ctx_get(&c);
    if (st != TG_OK) return st;
    tg_wgsl_limits lim;
    tg_wgpu_kernel_limits(c, &lim);
    const tg_graph *g = p->g;
    bool *pinned = tg_calloc((size_t)g->n + 1, sizeof(bool));
    if (!pinned) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    tg_program_pinned(p, pinned);
    st = tg_wgsl_choose_groups(g, pinned, p->cut, &lim, out);
    free(pinned);
    return st;
}

static const tg_engine_vt wg_vt = {"webgpu", wg_compile, wg_release, wg_write, wg_read, wg_run, wg_destroy, wg_fuse};

tg_status tg_wgpu_engine_new(int64_t params_bytes, tg_engine **out) {
    *out = NULL;
    wgpu_ctx *c;
    tg_status st = tg_wgpu_ctx_get(&c);
    if (st != TG_OK) return st;
    tg_wgsl_limits lim;
    tg_wgpu_kernel_limits(c, &lim);
    if ((uint64_t)params_bytes > lim.max_buffer_size)
        return tg_fail(TG_ERR_LIMIT, "webgpu: the params need %lld bytes, over maxBufferSize %llu",
                       (long long)params_bytes, (unsigned long long)lim.max_buffer_size);
    wg_engine *e = tg_calloc(1, sizeof *e);
    if (!e) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    e->base.vt = &wg_vt;
    e->base.refs = 1;
    e->base.align = 256;
    e->base.params_bytes = params_bytes;
    e->c = c;
    pthread_mutex_lock(&c->mu);
    e->params = new_buffer(c, "params", WG_USAGE_STORAGE | WG_USAGE_COPY_SRC | WG_USAGE_COPY_DST, params_bytes);
    pthread_mutex_unlock(&c->mu);
    if (!e->params) {
        free(e);
        return tg_fail(TG_ERR_NOMEM, "webgpu: cannot allocate %lld bytes of params", (long long)params_bytes);
    }
    *out = &e->base;
    return TG_OK;
}
