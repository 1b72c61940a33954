/* Compute pipelines: compiled once per distinct WGSL source (its label line
 * aside), many at once on Dawn's worker threads, with the compiler's
 * messages turned into an error that names the shader line. Plus the test
 * hooks that compile or run arbitrary WGSL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "webgpu.h"

struct wg_pipe {
    uint32_t hash;
    char *src;
    wg_pipeline pipe;
};

struct wg_layouts {
    int n;
    unsigned read_only;
    wg_bgl bgl;
    wg_layout layout;
};

/* The layouts of n bindings with this read-only mask, made on first use (a
 * program uses a few dozen masks at most). */
static struct wg_layouts *layouts(wgpu_ctx *c, int n, unsigned ro) {
    if (n < 1 || n > TG_WGSL_MAX_BINDINGS || ro >> n) return NULL;
    for (int i = 0; i < c->n_layouts; i++)
        if (c->layouts[i].n == n && c->layouts[i].read_only == ro) return &c->layouts[i];
    if (c->n_layouts == c->cap_layouts) {
        int cap = c->cap_layouts ? 2 * c->cap_layouts : 16;
        struct wg_layouts *nl = tg_realloc(c->layouts, sizeof *nl * (size_t)cap);
        if (!nl) return NULL;
        c->layouts = nl;
        c->cap_layouts = cap;
    }
    wg_bgl_entry e[TG_WGSL_MAX_BINDINGS];
    memset(e, 0, sizeof e);
    for (int i = 0; i < n; i++) {
        e[i].binding = (uint32_t)i;
        e[i].visibility = WG_STAGE_COMPUTE;
        e[i].buffer.type = ro >> i & 1 ? WG_BINDING_READ_ONLY_STORAGE : WG_BINDING_STORAGE;
    }
    wg_bgl_desc d = {NULL, {NULL, 0}, (size_t)n, e};
    wg_bgl bgl = c->f.DeviceCreateBindGroupLayout(c->device, &d);
    if (!bgl) return NULL;
    wg_layout_desc ld = {NULL, {NULL, 0}, 1, &bgl, 0};
    wg_layout layout = c->f.DeviceCreatePipelineLayout(c->device, &ld);
    if (!layout) {
        c->f.BindGroupLayoutRelease(bgl);
        return NULL;
    }
    c->layouts[c->n_layouts] = (struct wg_layouts){n, ro, bgl, layout};
    return &c->layouts[c->n_layouts++];
}

wg_bgl tg_wgpu_bgl(wgpu_ctx *c, int n, unsigned read_only) {
    struct wg_layouts *l = layouts(c, n, read_only);
    return l ? l->bgl : NULL;
}

void tg_wgpu_on_popped(uint32_t status, uint32_t type, wg_str msg, void *u1, void *u2) {
    (void)u2;
    tg_wgpu_scope *r = u1;
    r->status = status;
    r->type = type;
    tg_wgpu_copy_str(r->msg, sizeof r->msg, msg);
}

/* Line `line` (1-based) of src, for the error message. */
static void source_line(const char *src, uint64_t line, char *out, size_t n) {
    const char *p = src;
    for (uint64_t l = 1; l < line && p; l++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    size_t len = p ? strcspn(p, "\n") : 0;
    if (len >= n) len = n - 1;
    if (len) memcpy(out, p, len);
    out[len] = 0;
}

/* What a pipeline is compiled from and cached by: the source past its first
 * line where that is a comment, the kernel's label, which names its node.
 * The kernels of a model's identical layers then share one pipeline. */
static const char *body_of(const char *src) {
    if (src[0] != '/' || src[1] != '/') return src;
    const char *nl = strchr(src, '\n');
    return nl ? nl + 1 : src;
}

static uint32_t key_of(const char *src, int n_bindings) {
    return tg_str_hash(body_of(src)) ^ (uint32_t)n_bindings; /* the source declares the read-only bindings */
}

static wg_pipeline cached(const wgpu_ctx *c, uint32_t key, const char *src) {
    const char *body = body_of(src);
    for (int i = 0; i < c->n_pipes; i++)
        if (c->pipes[i].hash == key && strcmp(c->pipes[i].src, body) == 0) return c->pipes[i].pipe;
    return NULL;
}

static void cache(wgpu_ctx *c, uint32_t key, const char *src, wg_pipeline p) {
    if (c->n_pipes == c->cap_pipes) {
        int cap = c->cap_pipes ? 2 * c->cap_pipes : 64;
        struct wg_pipe *np = tg_realloc(c->pipes, sizeof *np * (size_t)cap);
        if (!np) return; /* not cached: still correct (the program holds no reference of its own, so it leaks) */
        c->pipes = np;
        c->cap_pipes = cap;
    }
    char *copy = tg_strdup(body_of(src));
    if (copy) c->pipes[c->n_pipes++] = (struct wg_pipe){key, copy, p};
}

/* One pipeline being compiled: its module, and what the asynchronous
 * creation's callback hands back. */
typedef struct {
    int req;             /* the first request of this source */
    uint32_t key;
    wg_shader module;
    wg_future future;
    uint32_t status;     /* 0 while pending */
    wg_pipeline pipe;
    char msg[512];
} build;

static void on_pipeline(uint32_t status, wg_pipeline pipe, wg_str msg, void *u1, void *u2) {
    (void)u2;
    build *b = u1;
    b->status = status ? status : ~0u;
    b->pipe = pipe;
    tg_wgpu_copy_str(b->msg, sizeof b->msg, msg);
}

/* Starts build b: the module (parsed and checked here, on this thread) and
 * the pipeline, which Dawn compiles on its worker threads (the shader
 * compiler's translation and the driver's compile). */
static tg_status start(wgpu_ctx *c, const tg_wgpu_pipeline_req *r, build *b) {
    struct wg_layouts *l = layouts(c, r->n_bindings, r->read_only);
    if (!l) return tg_fail(TG_ERR_BACKEND, "webgpu: %s: cannot make a layout of %d bindings", r->what, r->n_bindings);
    wg_wgsl_source code = {{NULL, WG_STYPE_SHADER_SOURCE_WGSL}, {r->src, WG_STRLEN}};
    wg_shader_desc sd = {&code.chain, {r->what, WG_STRLEN}};
    b->module = c->f.DeviceCreateShaderModule(c->device, &sd);
    wg_pipeline_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.label = (wg_str){r->what, WG_STRLEN};
    pd.layout = l->layout;
    pd.compute.module = b->module;
    pd.compute.entry_point = (wg_str){"main", WG_STRLEN};
    if (!c->create_pipeline_async) { /* made here, at once */
        on_pipeline(WG_SUCCESS, c->f.DeviceCreateComputePipeline(c->device, &pd), (wg_str){NULL, 0}, b, NULL);
        return TG_OK;
    }
    wg_pipeline_cb_info cb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_pipeline, b, NULL};
    b->future = c->create_pipeline_async(c->device, &pd, cb);
    return TG_OK;
}

typedef struct {
    bool has_error;
    uint64_t line, col;
    char msg[512];
} compile_result;

static void on_compiled(uint32_t status, const wg_compilation_info *info, void *u1, void *u2) {
    (void)status, (void)u2;
    compile_result *r = u1;
    for (size_t i = 0; info && i < info->message_count && !r->has_error; i++) {
        const wg_compilation_message *m = &info->messages[i];
        if (m->type != WG_MESSAGE_ERROR) continue;
        r->has_error = true;
        r->line = m->line_num;
        r->col = m->line_pos;
        size_t len = m->message.data ? (m->message.length == WG_STRLEN ? strlen(m->message.data) : m->message.length) : 0;
        if (len >= sizeof r->msg) len = sizeof r->msg - 1;
        if (len) memcpy(r->msg, m->message.data, len);
        r->msg[len] = 0;
    }
}

/* The error of a build that failed: the WGSL line the shader compiler
 * names where it names one, else the pipeline's message, else the error
 * scope's (scope_msg). */
static tg_status build_error(wgpu_ctx *c, const tg_wgpu_pipeline_req *r, build *b, const char *scope_msg) {
    compile_result cr = {0};
    wg_compile_cb_info ccb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_compiled, &cr, NULL};
    if (b->module) (void)tg_wgpu_wait(c, c->f.ShaderModuleGetCompilationInfo(b->module, ccb), "shader compilation");
    if (cr.has_error) {
        char text[160];
        source_line(r->src, cr.line, text, sizeof text);
        return tg_fail(TG_ERR_BACKEND, "webgpu: %s: WGSL error at line %llu, column %llu: %s\n    %llu | %s", r->what,
                       (unsigned long long)cr.line, (unsigned long long)cr.col, cr.msg, (unsigned long long)cr.line, text);
    }
    return tg_fail(TG_ERR_BACKEND, "webgpu: %s: pipeline creation failed: %s", r->what,
                   b->msg[0] ? b->msg : scope_msg[0] ? scope_msg : "no pipeline");
}

/* Where the driver compiles a shader only when it first runs it (lavapipe,
 * at the first dispatch, one after another in its queue thread): pipeline p
 * dispatched once with no workgroups, so nothing runs, over small buffers
 * of its layout, and waited for, so that its compile happens in the
 * program's compile, told to its progress, and not in its first step. */
#define FIRST_USE_BYTES 65536 /* more than any binding's minimum size a kernel declares */
static tg_status first_use(wgpu_ctx *c, const tg_wgpu_pipeline_req *r, wg_pipeline p) {
    for (int i = 0; i <= TG_WGSL_MAX_BINDINGS; i++) {
        wg_buffer *b = i < TG_WGSL_MAX_BINDINGS ? &c->first_use[i] : &c->first_use_read;
        if (*b) continue;
        wg_buffer_desc d = {NULL, {"first use", WG_STRLEN}, i < TG_WGSL_MAX_BINDINGS ? WG_USAGE_STORAGE | WG_USAGE_COPY_SRC
                                                                                      : WG_USAGE_MAP_READ | WG_USAGE_COPY_DST,
                            i < TG_WGSL_MAX_BINDINGS ? FIRST_USE_BYTES : 4, 0};
        if (!(*b = c->f.DeviceCreateBuffer(c->device, &d))) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    wg_bind_entry e[TG_WGSL_MAX_BINDINGS];
    memset(e, 0, sizeof e);
    for (int i = 0; i < r->n_bindings; i++) e[i].binding = (uint32_t)i, e[i].buffer = c->first_use[i], e[i].size = FIRST_USE_BYTES;
    wg_bind_group_desc gd = {NULL, {NULL, 0}, tg_wgpu_bgl(c, r->n_bindings, r->read_only), (size_t)r->n_bindings, e};
    wg_bind_group bg = c->f.DeviceCreateBindGroup(c->device, &gd);
    wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
    wg_pass pass = c->f.CommandEncoderBeginComputePass(enc, NULL);
    c->f.ComputePassEncoderSetPipeline(pass, p);
    c->f.ComputePassEncoderSetBindGroup(pass, 0, bg, 0, NULL);
    c->f.ComputePassEncoderDispatchWorkgroups(pass, 0, 1, 1);
    c->f.ComputePassEncoderEnd(pass);
    c->f.ComputePassEncoderRelease(pass);
    c->f.CommandEncoderCopyBufferToBuffer(enc, c->first_use[0], 0, c->first_use_read, 0, 4);
    wg_cmdbuf cb = c->f.CommandEncoderFinish(enc, NULL);
    c->f.QueueSubmit(c->queue, 1, &cb);
    c->f.CommandBufferRelease(cb);
    c->f.CommandEncoderRelease(enc);
    if (bg) c->f.BindGroupRelease(bg);
    uint32_t word;
    return tg_wgpu_map_read(c, c->first_use_read, &word, 4);
}

/* Builds at once: enough to keep a GPU machine's cores busy, few enough
 * that their compilers' memory stays small. */
#define IN_FLIGHT 32

tg_status tg_wgpu_pipelines(wgpu_ctx *c, tg_wgpu_pipeline_req *reqs, int n, tg_compile_progress_fn progress, void *user) {
    /* each request's pipeline from the cache, or the build of the first
     * request of its source (same[i]: that build's index) */
    build *b = tg_calloc((size_t)n + 1, sizeof *b);
    int *same = tg_calloc((size_t)n + 1, sizeof(int));
    if (!b || !same) {
        free(b), free(same);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    int nb = 0;
    for (int i = 0; i < n; i++) {
        uint32_t key = key_of(reqs[i].src, reqs[i].n_bindings);
        same[i] = -1;
        if ((reqs[i].pipe = cached(c, key, reqs[i].src))) continue;
        for (int j = 0; j < nb && same[i] < 0; j++)
            if (b[j].key == key && reqs[b[j].req].n_bindings == reqs[i].n_bindings &&
                strcmp(body_of(reqs[b[j].req].src), body_of(reqs[i].src)) == 0)
                same[i] = j;
        if (same[i] < 0) b[nb] = (build){.req = i, .key = key}, same[i] = nb++;
    }
    /* every build started, at most IN_FLIGHT at a time, each waited for in
     * turn; a shader module's errors go to this scope */
    c->f.DevicePushErrorScope(c->device, WG_ERROR_FILTER_VALIDATION);
    tg_status st = TG_OK;
    int started = 0, waited = 0, failed = -1;
    if (progress && nb) progress(user, "kernels", 0, nb);
    while (waited < nb && st == TG_OK) {
        while (st == TG_OK && started < nb && started < waited + IN_FLIGHT) {
            st = start(c, &reqs[b[started].req], &b[started]);
            if (st == TG_OK) started++;
        }
        if (st != TG_OK) break;
        if (!b[waited].status) st = tg_wgpu_wait(c, b[waited].future, "pipeline creation");
        if (st != TG_OK) break;
        if ((b[waited].status != WG_SUCCESS || !b[waited].pipe) && failed < 0) failed = waited;
        if (failed < 0 && c->compiles_on_first_use) st = first_use(c, &reqs[b[waited].req], b[waited].pipe);
        if (st != TG_OK) break;
        waited++;
        if (progress) progress(user, "kernels", waited, nb);
    }
    for (int d = waited; d < started; d++) /* after an error: the builds still pending */
        if (!b[d].status) (void)tg_wgpu_wait(c, b[d].future, "pipeline creation");
    tg_wgpu_scope sr = {0};
    wg_pop_cb_info pcb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, tg_wgpu_on_popped, &sr, NULL};
    tg_status pst = tg_wgpu_wait(c, c->f.DevicePopErrorScope(c->device, pcb), "the pipeline error scope");
    if (st == TG_OK && failed >= 0) st = build_error(c, &reqs[b[failed].req], &b[failed], sr.msg);
    else if (st == TG_OK && pst != TG_OK) st = pst;
    else if (st == TG_OK && sr.type != WG_ERROR_NONE && sr.type != 0)
        st = tg_fail(TG_ERR_BACKEND, "webgpu: pipeline creation failed: %s", sr.msg);
    for (int d = 0; d < started; d++) {
        if (b[d].module) c->f.ShaderModuleRelease(b[d].module);
        if (!b[d].pipe) continue;
        if (st == TG_OK) cache(c, b[d].key, reqs[b[d].req].src, b[d].pipe);
        else c->f.ComputePipelineRelease(b[d].pipe);
    }
    for (int i = 0; i < n && st == TG_OK; i++)
        if (!reqs[i].pipe) reqs[i].pipe = b[same[i]].pipe;
    free(b), free(same);
    return st;
}

tg_status tg_wgpu_pipeline(wgpu_ctx *c, const char *src, int n_bindings, unsigned read_only, const char *what,
                           wg_pipeline *out) {
    tg_wgpu_pipeline_req r = {src, n_bindings, read_only, what, NULL};
    tg_status st = tg_wgpu_pipelines(c, &r, 1, NULL, NULL);
    *out = st == TG_OK ? r.pipe : NULL;
    return st;
}

/* ---- test hooks ---- */

tg_status tg_wgpu_test_compile(const char *src) {
    wgpu_ctx *c;
    tg_status st = tg_wgpu_ctx_get(&c);
    if (st != TG_OK) return st;
    pthread_mutex_lock(&c->mu);
    wg_pipeline p;
    st = tg_wgpu_pipeline(c, src, 1, 0, "test kernel", &p);
    pthread_mutex_unlock(&c->mu);
    return st;
}

typedef struct {
    uint32_t status;
} map_result;

static void on_mapped(uint32_t status, wg_str msg, void *u1, void *u2) {
    (void)msg, (void)u2;
    ((map_result *)u1)->status = status;
}

tg_status tg_wgpu_map_read(wgpu_ctx *c, wg_buffer staging, void *dst, size_t bytes) {
    map_result mr = {0};
    wg_map_cb_info mcb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_mapped, &mr, NULL};
    tg_status st = tg_wgpu_wait(c, c->f.BufferMapAsync(staging, WG_MAP_READ, 0, bytes, mcb), "reading back");
    if (st != TG_OK) return st;
    if (mr.status != WG_SUCCESS) {
        st = tg_wgpu_take_error(c, "webgpu read");
        return st != TG_OK ? st : tg_fail(TG_ERR_BACKEND, "webgpu: mapping the read-back buffer failed");
    }
    const void *src = c->f.BufferGetConstMappedRange(staging, 0, bytes);
    if (src) memcpy(dst, src, bytes);
    c->f.BufferUnmap(staging);
    return src ? TG_OK : tg_fail(TG_ERR_BACKEND, "webgpu: the read-back buffer has no mapped range");
}

tg_status tg_wgpu_run_once(wgpu_ctx *c, const char *src, uint32_t groups_x, void *out, size_t bytes, const char *what) {
    bytes = (bytes + 3) & ~(size_t)3;
    wg_pipeline p;
    tg_status st = tg_wgpu_pipeline(c, src, 1, 0, what, &p);
    if (st != TG_OK) return st;
    wg_buffer_desc bd = {NULL, {what, WG_STRLEN}, WG_USAGE_STORAGE | WG_USAGE_COPY_SRC, bytes, 0};
    wg_buffer buf = c->f.DeviceCreateBuffer(c->device, &bd);
    wg_buffer_desc sd = {NULL, {what, WG_STRLEN}, WG_USAGE_MAP_READ | WG_USAGE_COPY_DST, bytes, 0};
    wg_buffer staging = c->f.DeviceCreateBuffer(c->device, &sd);
    wg_bind_entry e = {NULL, 0, buf, 0, bytes, NULL, NULL};
    wg_bind_group_desc gd = {NULL, {NULL, 0}, tg_wgpu_bgl(c, 1, 0), 1, &e};
    wg_bind_group bg = c->f.DeviceCreateBindGroup(c->device, &gd);
    wg_encoder enc = c->f.DeviceCreateCommandEncoder(c->device, NULL);
    wg_pass pass = c->f.CommandEncoderBeginComputePass(enc, NULL);
    c->f.ComputePassEncoderSetPipeline(pass, p);
    c->f.ComputePassEncoderSetBindGroup(pass, 0, bg, 0, NULL);
    c->f.ComputePassEncoderDispatchWorkgroups(pass, groups_x, 1, 1);
    c->f.ComputePassEncoderEnd(pass);
    c->f.ComputePassEncoderRelease(pass);
    c->f.CommandEncoderCopyBufferToBuffer(enc, buf, 0, staging, 0, bytes);
    wg_cmdbuf cb = c->f.CommandEncoderFinish(enc, NULL);
    c->f.QueueSubmit(c->queue, 1, &cb);
    c->f.CommandBufferRelease(cb);
    c->f.CommandEncoderRelease(enc);
    st = tg_wgpu_take_error(c, what);
    if (st == TG_OK) st = tg_wgpu_map_read(c, staging, out, bytes);
    c->f.BindGroupRelease(bg);
    c->f.BufferDestroy(buf);
    c->f.BufferRelease(buf);
    c->f.BufferDestroy(staging);
    c->f.BufferRelease(staging);
    return st;
}

tg_status tg_wgpu_test_run(const char *src, uint32_t groups_x, void *out, size_t bytes) {
    wgpu_ctx *c;
    tg_status st = tg_wgpu_ctx_get(&c);
    if (st != TG_OK) return st;
    pthread_mutex_lock(&c->mu);
    st = tg_wgpu_run_once(c, src, groups_x, out, bytes, "test kernel");
    pthread_mutex_unlock(&c->mu);
    return st;
}
