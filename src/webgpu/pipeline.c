/* Compute pipelines: compiled once per distinct WGSL source inside an error
 * scope, with the compiler's messages turned into an error that names the
 * shader line. Plus the test hooks that compile or run arbitrary WGSL. */
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

typedef struct {
    bool done, has_error;
    uint64_t line, col;
    char msg[512];
} compile_result;

static void on_compiled(uint32_t status, const wg_compilation_info *info, void *u1, void *u2) {
    (void)u2;
    compile_result *r = u1;
    r->done = status == WG_SUCCESS;
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

static tg_status compile(wgpu_ctx *c, const char *src, int n_bindings, unsigned ro, const char *what, wg_pipeline *out) {
    *out = NULL;
    struct wg_layouts *l = layouts(c, n_bindings, ro);
    if (!l) return tg_fail(TG_ERR_BACKEND, "webgpu: %s: cannot make a layout of %d bindings", what, n_bindings);
    wg_layout layout = l->layout;
    c->f.DevicePushErrorScope(c->device, WG_ERROR_FILTER_VALIDATION);
    wg_wgsl_source code = {{NULL, WG_STYPE_SHADER_SOURCE_WGSL}, {src, WG_STRLEN}};
    wg_shader_desc sd = {&code.chain, {what, WG_STRLEN}};
    wg_shader sh = c->f.DeviceCreateShaderModule(c->device, &sd);
    compile_result cr = {0};
    wg_compile_cb_info ccb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_compiled, &cr, NULL};
    tg_status st = tg_wgpu_wait(c, c->f.ShaderModuleGetCompilationInfo(sh, ccb), "shader compilation");
    wg_pipeline p = NULL;
    if (st == TG_OK && !cr.has_error) {
        wg_pipeline_desc pd;
        memset(&pd, 0, sizeof pd);
        pd.label = (wg_str){what, WG_STRLEN};
        pd.layout = layout;
        pd.compute.module = sh;
        pd.compute.entry_point = (wg_str){"main", WG_STRLEN};
        p = c->f.DeviceCreateComputePipeline(c->device, &pd);
    }
    tg_wgpu_scope sr = {0};
    wg_pop_cb_info pcb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, tg_wgpu_on_popped, &sr, NULL};
    tg_status pst = tg_wgpu_wait(c, c->f.DevicePopErrorScope(c->device, pcb), "the pipeline error scope");
    c->f.ShaderModuleRelease(sh);
    if (st == TG_OK && cr.has_error) {
        char text[160];
        source_line(src, cr.line, text, sizeof text);
        st = tg_fail(TG_ERR_BACKEND, "webgpu: %s: WGSL error at line %llu, column %llu: %s\n    %llu | %s", what,
                     (unsigned long long)cr.line, (unsigned long long)cr.col, cr.msg, (unsigned long long)cr.line, text);
    } else if (st == TG_OK && pst != TG_OK) {
        st = pst;
    } else if (st == TG_OK && sr.type != WG_ERROR_NONE) {
        st = tg_fail(TG_ERR_BACKEND, "webgpu: %s: pipeline creation failed: %s", what, sr.msg);
    }
    if (st == TG_OK && !p) st = tg_fail(TG_ERR_BACKEND, "webgpu: %s: no pipeline", what);
    if (st != TG_OK) {
        if (p) c->f.ComputePipelineRelease(p);
        return st;
    }
    *out = p;
    return TG_OK;
}

tg_status tg_wgpu_pipeline(wgpu_ctx *c, const char *src, int n_bindings, unsigned read_only, const char *what,
                           wg_pipeline *out) {
    uint32_t h = tg_str_hash(src) ^ (uint32_t)n_bindings; /* the source declares the read-only bindings */
    for (int i = 0; i < c->n_pipes; i++)
        if (c->pipes[i].hash == h && strcmp(c->pipes[i].src, src) == 0) {
            *out = c->pipes[i].pipe;
            return TG_OK;
        }
    tg_status st = compile(c, src, n_bindings, read_only, what, out);
    if (st != TG_OK) return st;
    if (c->n_pipes == c->cap_pipes) {
        int cap = c->cap_pipes ? 2 * c->cap_pipes : 64;
        struct wg_pipe *np = tg_realloc(c->pipes, sizeof *np * (size_t)cap);
        if (!np) return TG_OK; /* not cached: still correct */
        c->pipes = np;
        c->cap_pipes = cap;
    }
    char *copy = tg_strdup(src);
    if (copy) c->pipes[c->n_pipes++] = (struct wg_pipe){h, copy, *out};
    return TG_OK;
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
