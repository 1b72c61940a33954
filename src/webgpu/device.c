/* The process-wide WebGPU device: finding and loading the library, the
 * Vulkan adapter, the device, waiting on futures, and turning WebGPU's
 * asynchronous errors into tg_status values. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "webgpu.h"

#ifndef TG_DEPS_DIR
#define TG_DEPS_DIR ".deps" /* the Makefile passes the source tree's absolute path */
#endif
#ifndef TG_DATA_DIR
#define TG_DATA_DIR "/usr/local/lib/tensorgrad" /* the Makefile passes $(LIBDIR)/tensorgrad */
#endif

#define WAIT_NS (600ull * 1000000000ull) /* a lavapipe step can take long; a hung device must not hang us forever */

static wgpu_ctx g_ctx;
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_tried;
static tg_status g_status;
static char g_why[768];
static bool g_override;
static tg_wgsl_limits g_override_limits;

void tg_wgpu_copy_str(char *dst, size_t n, wg_str s) {
    size_t len = s.data ? (s.length == WG_STRLEN ? strlen(s.data) : s.length) : 0;
    if (len >= n) len = n - 1;
    if (len) memcpy(dst, s.data, len);
    dst[len] = 0;
}

const char *tg_wgpu_backend_name(uint32_t b) {
    static const char *names[] = {"undefined", "null", "webgpu", "d3d11", "d3d12", "metal", "vulkan", "opengl", "opengles"};
    return b < sizeof names / sizeof names[0] ? names[b] : "unknown";
}

tg_status tg_wgpu_check_adapter(uint32_t backend, const char *name) {
    if (backend == WG_BACKEND_VULKAN || backend == WG_BACKEND_METAL || backend == WG_BACKEND_D3D12) return TG_OK;
#ifdef __EMSCRIPTEN__
    if (backend == WG_BACKEND_WEBGPU) return TG_OK; /* the host's WebGPU, which hides its backend */
#endif
    return tg_fail(TG_ERR_BACKEND,
                   "webgpu: unavailable: the adapter '%s' uses the %s backend, which computes nothing "
                   "(no usable Vulkan driver: run scripts/fetch-webgpu.sh for lavapipe, or install a GPU driver)",
                   name && *name ? name : "?", tg_wgpu_backend_name(backend));
}

tg_status tg_wgpu_setting_read(tg_wgpu_setting *out) {
    *out = (tg_wgpu_setting){-1, false, false, NULL};
    const char *v = getenv("TG_WEBGPU");
    tg_wgpu_setting s = *out;
    for (const char *w = v; w && *w;) {
        size_t len = strcspn(w, ",");
        char *end = NULL;
        long adapter = len > 8 && strncmp(w, "adapter=", 8) == 0 ? strtol(w + 8, &end, 10) : -1;
        if (strncmp(w, "dump=", 5) == 0 && w[5]) {
            s.dump = w + 5;
            break;
        } else if (len == 6 && strncmp(w, "robust", 6) == 0) s.robust = true;
        else if (len == 12 && strncmp(w, "no-subgroups", 12) == 0) s.no_subgroups = true;
        else if (adapter >= 0 && adapter <= 1000 && end == w + len) s.adapter = adapter;
        else return tg_fail(TG_ERR_ARG, "TG_WEBGPU=%.60s: '%.*s' is not one of its words: adapter=N (the N-th adapter, "
                            "from 0), robust, no-subgroups, dump=DIR (last: the rest is the folder), comma-separated",
                            v, (int)(len < 40 ? len : 40), w);
        w += len + (w[len] == ',');
    }
    *out = s;
    return TG_OK;
}

/* ---- callbacks ---- */

typedef struct {
    uint32_t status;
    void *handle;
    char msg[512];
} request_result;

static void on_adapter(uint32_t status, wg_adapter a, wg_str msg, void *u1, void *u2) {
    (void)u2;
    request_result *r = u1;
    r->status = status;
    r->handle = a;
    tg_wgpu_copy_str(r->msg, sizeof r->msg, msg);
}

static void on_device(uint32_t status, wg_device d, wg_str msg, void *u1, void *u2) {
    (void)u2;
    request_result *r = u1;
    r->status = status;
    r->handle = d;
    tg_wgpu_copy_str(r->msg, sizeof r->msg, msg);
}

static void on_lost(const wg_device *d, uint32_t reason, wg_str msg, void *u1, void *u2) {
    (void)d, (void)u2;
    wgpu_ctx *c = u1;
    if (reason == WG_LOST_CANCELLED) return; /* the instance going away at exit */
    pthread_mutex_lock(&c->err_mu);
    c->lost = true;
    tg_wgpu_copy_str(c->lost_msg, sizeof c->lost_msg, msg);
    pthread_mutex_unlock(&c->err_mu);
}

static void on_error(const wg_device *d, uint32_t type, wg_str msg, void *u1, void *u2) {
    (void)d, (void)u2;
    wgpu_ctx *c = u1;
    pthread_mutex_lock(&c->err_mu);
    if (!c->error) { /* keep the first: later ones are usually its consequences */
        c->error = true;
        char m[900];
        tg_wgpu_copy_str(m, sizeof m, msg);
        snprintf(c->err_msg, sizeof c->err_msg, "%s error: %s",
                 type == WG_ERROR_OOM ? "out-of-memory" : type == WG_ERROR_INTERNAL ? "internal" : "validation", m);
    }
    pthread_mutex_unlock(&c->err_mu);
}

tg_status tg_wgpu_take_error(wgpu_ctx *c, const char *api) {
    tg_status st = TG_OK;
    pthread_mutex_lock(&c->err_mu);
    if (c->lost) st = tg_fail(TG_ERR_BACKEND, "%s: the WebGPU device was lost: %s", api, c->lost_msg);
    else if (c->error) {
        st = tg_fail(TG_ERR_BACKEND, "%s: WebGPU %s", api, c->err_msg);
        c->error = false;
    }
    pthread_mutex_unlock(&c->err_mu);
    return st;
}

tg_status tg_wgpu_wait_in(wgpu_ctx *c, wg_instance inst, wg_future f, const char *what) {
    wg_future_wait w = {f, 0};
    uint32_t s = c->f.InstanceWaitAny(inst, 1, &w, WAIT_NS);
    if (s == WG_WAIT_ERROR) {
        /* An implementation without timed waits: poll. */
        struct timespec nap = {0, 200000};
        for (uint64_t waited = 0; waited < WAIT_NS && s != WG_WAIT_SUCCESS; waited += 200000) {
            s = c->f.InstanceWaitAny(inst, 1, &w, 0);
            if (s == WG_WAIT_SUCCESS) break;
            c->f.InstanceProcessEvents(inst);
            nanosleep(&nap, NULL);
        }
    }
    if (s == WG_WAIT_SUCCESS && w.completed) return TG_OK;
    return tg_fail(TG_ERR_BACKEND, "webgpu: %s did not complete (%s)", what,
                   s == WG_WAIT_TIMED_OUT ? "timed out" : "wait failed");
}

tg_status tg_wgpu_wait(wgpu_ctx *c, wg_future f, const char *what) { return tg_wgpu_wait_in(c, c->instance, f, what); }

/* ---- loading ---- */

#ifdef __EMSCRIPTEN__
/* The WebAssembly build: the host's WebGPU (navigator.gpu in a browser, npm's
 * webgpu in Node), whose wgpu* functions web/src/webgpu_host.js implements
 * over the JavaScript API. Nothing to find or load. */
#define WG_DECLARE(ret, name, args) ret wgpu##name args;
WG_FUNCTIONS(WG_DECLARE)
#undef WG_DECLARE

static void prepare_vulkan(void) {}

static bool load_library(wgpu_ctx *c, char *why, size_t n) {
    (void)why, (void)n;
#define WG_BIND(ret, name, args) c->f.name = wgpu##name;
    WG_FUNCTIONS(WG_BIND)
#undef WG_BIND
    snprintf(c->lib_path, sizeof c->lib_path, "the host's WebGPU");
    return true;
}
#else
static bool file_exists(const char *p) { return access(p, R_OK) == 0; }

/* The folders that may hold a fetched runtime (webgpu/, vulkan/): the data
 * directory make install fills, then the source tree's .deps/ (an uninstalled
 * build). */
static const char *const runtime_dirs[] = {TG_DATA_DIR, TG_DEPS_DIR};
#define N_RUNTIME_DIRS 2

/* The WebGPU libraries to try, in order: $TG_WEBGPU_LIB alone when set; else
 * the names the dynamic linker finds on the library path, then the fetched
 * Dawn in each runtime dir. Returns the count; paths[] points into bufs. */
static int webgpu_candidates(const char *paths[], char bufs[][1024], int max) {
    const char *env = getenv("TG_WEBGPU_LIB");
    if (env && *env) {
        paths[0] = env;
        return 1;
    }
#ifdef __APPLE__
#define DSO ".dylib" /* what scripts/fetch-webgpu.sh fetches there: libwebgpu_wrapper.dylib */
#else
#define DSO ".so"
#endif
    static const char *const sonames[] = {"libwebgpu_dawn" DSO, "libwgpu_native" DSO, "libwebgpu_wrapper" DSO};
    int k = 0;
    for (int i = 0; i < 3 && k < max; i++) paths[k++] = sonames[i];
    for (int i = 0; i < N_RUNTIME_DIRS && k < max; i++) {
        snprintf(bufs[i], 1024, "%s/webgpu/libwebgpu_wrapper" DSO, runtime_dirs[i]);
        if (file_exists(bufs[i])) paths[k++] = bufs[i];
    }
    return k;
}

/* Vulkan before Dawn: a loader from a runtime dir when the system has none
 * (Dawn then finds it by soname), and the fetched lavapipe added to the drivers. */
static void prepare_vulkan(void) {
    char path[1024];
    bool have_loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_GLOBAL) != NULL;
    bool have_icd = getenv("VK_DRIVER_FILES") || getenv("VK_ICD_FILENAMES") || getenv("VK_ADD_DRIVER_FILES");
    for (int i = 0; i < N_RUNTIME_DIRS; i++) {
        snprintf(path, sizeof path, "%s/vulkan/lvp_icd.json", runtime_dirs[i]);
        if (!have_icd && file_exists(path)) {
            setenv("VK_ADD_DRIVER_FILES", path, 0); /* once, under g_init_mu, before any Vulkan call */
            have_icd = true;
        }
        snprintf(path, sizeof path, "%s/vulkan/libvulkan.so.1", runtime_dirs[i]);
        if (!have_loader && file_exists(path)) have_loader = dlopen(path, RTLD_NOW | RTLD_GLOBAL) != NULL;
    }
}

/* The other names are tried as the usual places a WebGPU library lives, but
 * only the Dawn build of wg_api.h is verified: another implementation with
 * different enum values fails the adapter or device request with an error.
 * (Our instance descriptor reads, in the standard layout, as no features and
 * no limits, so even that first call is safe.) */
static bool load_library(wgpu_ctx *c, char *why, size_t n) {
    const char *names[3 + N_RUNTIME_DIRS];
    char bufs[N_RUNTIME_DIRS][1024];
    int k = webgpu_candidates(names, bufs, 3 + N_RUNTIME_DIRS);
    for (int i = 0; i < k; i++) {
        c->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (c->lib) {
            snprintf(c->lib_path, sizeof c->lib_path, "%s", names[i]);
            break;
        }
    }
    if (!c->lib) {
        const char *env = getenv("TG_WEBGPU_LIB");
        if (env && *env) snprintf(why, n, "cannot load TG_WEBGPU_LIB=%s: %s", env, dlerror());
        else
            snprintf(why, n, "no WebGPU library found (libwebgpu_dawn" DSO ", libwgpu_native" DSO ", libwebgpu_wrapper" DSO " "
                     "on the library path; %s/webgpu; %s/webgpu); run scripts/fetch-webgpu.sh or set TG_WEBGPU_LIB",
                     runtime_dirs[0], runtime_dirs[1]);
        return false;
    }
#define WG_LOAD(ret, name, args)                                                       \
    c->f.name = (ret(*) args)dlsym(c->lib, "wgpu" #name);                              \
    if (!c->f.name) {                                                                  \
        snprintf(why, n, "%s does not export wgpu" #name, c->lib_path);                \
        return false;                                                                  \
    }
    WG_FUNCTIONS(WG_LOAD)
#undef WG_LOAD
    c->create_pipeline_async = (wg_future(*)(wg_device, const wg_pipeline_desc *, wg_pipeline_cb_info))dlsym(
        c->lib, "wgpuDeviceCreateComputePipelineAsync");
    return true;
}
#endif

static void fill_info(wgpu_ctx *c, const wg_adapter_info *ai) {
    tg_webgpu_adapter_info *o = &c->info;
    tg_wgpu_copy_str(o->name, sizeof o->name, ai->device);
    tg_wgpu_copy_str(o->vendor, sizeof o->vendor, ai->vendor);
    tg_wgpu_copy_str(o->architecture, sizeof o->architecture, ai->architecture);
    tg_wgpu_copy_str(o->description, sizeof o->description, ai->description);
    snprintf(o->backend, sizeof o->backend, "%s", tg_wgpu_backend_name(ai->backend_type));
    static const char *types[] = {"unknown", "discrete GPU", "integrated GPU", "CPU", "unknown"};
    snprintf(o->type, sizeof o->type, "%s", ai->adapter_type <= 4 ? types[ai->adapter_type] : "unknown");
    snprintf(o->library, sizeof o->library, "%s", c->lib_path);
    o->vendor_id = ai->vendor_id;
    o->device_id = ai->device_id;
    o->subgroup_min_size = ai->subgroup_min_size;
    o->subgroup_max_size = ai->subgroup_max_size;
}

/* Names of the standard optional features (webgpu.h 2025-06-18 values);
 * others, Dawn's own, print as hex: their numbers move between builds. */
static void feature_names(const wg_features *f, const wg_features *skip, char *buf, size_t n) {
    static const char *std_names[] = {NULL, "depth-clip-control", "depth32float-stencil8", "timestamp-query",
                                      "texture-compression-bc", "texture-compression-bc-sliced-3d",
                                      "texture-compression-etc2", "texture-compression-astc",
                                      "texture-compression-astc-sliced-3d", "indirect-first-instance", "shader-f16",
                                      "rg11b10ufloat-renderable", "bgra8unorm-storage", "float32-filterable",
                                      "float32-blendable", "clip-distances", "dual-source-blending", "subgroups",
                                      "core-features-and-limits"};
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < f->count; i++) {
        uint32_t v = f->features[i];
        bool seen = false;
        for (size_t k = 0; skip && k < skip->count; k++) seen |= skip->features[k] == v;
        if (seen || len + 1 >= n) continue;
        char hex[16];
        const char *name = v < sizeof std_names / sizeof std_names[0] ? std_names[v] : NULL;
        if (!name) snprintf(hex, sizeof hex, "0x%x", v), name = hex;
        int w = snprintf(buf + len, n - len, "%s%s", len ? " " : "", name);
        if (w < 0 || (size_t)w >= n - len) { buf[len] = 0; break; }
        len += (size_t)w;
    }
}

/* Whether Dawn reports `toggle` among the ones the device uses
 * (dawn::native::GetTogglesUsed, a C++ export: it returns a
 * std::vector<const char *> through a hidden result pointer, which is
 * freed here with operator delete). Without that export (another
 * implementation) nothing can confirm it: false. */
static bool device_uses_toggle(wgpu_ctx *c, const char *toggle) {
#if !defined(__x86_64__) || defined(_WIN32)
    /* The hidden result pointer travels as the first argument only in the
     * x86-64 System V convention (arm64 passes it in x8, Windows differs). */
    (void)c, (void)toggle;
    return false;
#else
    typedef struct { const char **begin, **end, **cap; } cxx_vec;
    void (*used)(cxx_vec *, wg_device) = (void (*)(cxx_vec *, wg_device))dlsym(c->lib, "_ZN4dawn6native14GetTogglesUsedEP14WGPUDeviceImpl");
    /* The operator delete that matches the library's operator new: a
     * global one first (a sanitizer's, which then also serves its new),
     * else the one of the library's own C++ runtime. */
    void (*del)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
    if (!del) del = (void (*)(void *))dlsym(c->lib, "_ZdlPv");
    if (!used || !del) return false;
    cxx_vec v = {0};
    used(&v, c->device);
    bool found = false;
    for (const char **t = v.begin; t && t < v.end; t++) found |= *t && strcmp(*t, toggle) == 0;
    if (v.begin) del(v.begin);
    return found;
#endif
}

/* ---- which adapter ----
 * Several GPUs: TG_WEBGPU=adapter=N takes the N-th adapter of the native
 * backend, in the order Dawn lists them (the most capable first); else a
 * data-parallel session asks for rank % adapters (tg_wgpu_prefer_adapter)
 * before the device exists; else the one wgpuInstanceRequestAdapter gives.
 * The list comes from dawn::native::Instance::EnumerateAdapters, a C++
 * export: an Instance and an Adapter each hold one pointer (Dawn's
 * InstanceBase and AdapterBase, which its C handles are), and the vector
 * comes back through a hidden result pointer, as GetTogglesUsed's below. */

static int g_prefer = -1; /* a data-parallel rank, -1 for none */

void tg_wgpu_prefer_adapter(int rank) {
    pthread_mutex_lock(&g_init_mu);
    if (!g_tried) g_prefer = rank;
    pthread_mutex_unlock(&g_init_mu);
}

/* *out: the adapter asked for (one reference), NULL with no request; false
 * (why set) when the request cannot be met. */
static bool choose_adapter(wgpu_ctx *c, const wg_adapter_options *opt, long want, wg_adapter *out, char *why,
                           size_t n) {
    *out = NULL;
    if (want < 0 && g_prefer < 0) return true;
#if !defined(__x86_64__) || defined(_WIN32)
    if (want > 0) {
        snprintf(why, n, "TG_WEBGPU=adapter=%ld: adapters can be listed only on x86-64 Linux here", want);
        return false;
    }
    (void)c, (void)opt;
    return true;
#else
    typedef struct { void **begin, **end, **cap; } cxx_vec;
    void (*list)(cxx_vec *, void *const *, const wg_adapter_options *) =
        (void (*)(cxx_vec *, void *const *, const wg_adapter_options *))dlsym(
            c->lib, "_ZNK4dawn6native8Instance17EnumerateAdaptersEPK25WGPURequestAdapterOptions");
    void (*drop)(void **) = (void (*)(void **))dlsym(c->lib, "_ZN4dawn6native7AdapterD1Ev");
    void (*add_ref)(wg_adapter) = (void (*)(wg_adapter))dlsym(c->lib, "wgpuAdapterAddRef");
    void (*del)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
    if (!del) del = (void (*)(void *))dlsym(c->lib, "_ZdlPv");
    if (!list || !drop || !add_ref || !del) {
        if (want < 0) return true; /* a rank's preference only: the default adapter */
        snprintf(why, n, "TG_WEBGPU=adapter=%ld: %s cannot list its adapters (no Dawn native export)", want, c->lib_path);
        return false;
    }
    void *instance = c->instance;
    cxx_vec v = {0};
    list(&v, &instance, opt);
    long count = v.begin ? (long)(v.end - v.begin) : 0, pick = want >= 0 ? want : count ? g_prefer % count : 0;
    if (pick < count) {
        *out = v.begin[pick];
        add_ref(*out);
    }
    for (void **a = v.begin; a && a < v.end; a++) drop(a);
    if (v.begin) del(v.begin);
    if (!*out && count) snprintf(why, n, "TG_WEBGPU=adapter=%ld: %ld %s adapter%s here (0 to %ld)", pick, count,
                                 tg_wgpu_backend_name(opt->backend_type), count > 1 ? "s" : "", count - 1);
    else if (!*out) snprintf(why, n, "no %s adapter", tg_wgpu_backend_name(opt->backend_type));
    return *out != NULL;
#endif
}

static void fill_limits(wgpu_ctx *c) {
    tg_webgpu_adapter_info *o = &c->info;
    const wg_limits *l = &c->limits;
    o->max_buffer_size = l->max_buffer_size;
    o->max_storage_buffer_binding_size = l->max_storage_buffer_binding_size;
    o->max_storage_buffers_per_shader_stage = l->max_storage_buffers_per_shader_stage;
    o->max_compute_workgroup_storage_size = l->max_compute_workgroup_storage_size;
    o->max_compute_invocations_per_workgroup = l->max_compute_invocations_per_workgroup;
    o->max_compute_workgroups_per_dimension = l->max_compute_workgroups_per_dimension;
    o->min_storage_buffer_offset_alignment = l->min_storage_buffer_offset_alignment;
}

/* The kernels take a workgroup's subgroups to be runs of consecutive
 * invocations with their lanes numbered in order (rows.c's subgroup sums,
 * the attention blocks' shuffles). GPUs form them so, but WebGPU does not
 * promise it: a kernel of 256 invocations checks it once, and where it
 * does not hold (or TG_WEBGPU=no-subgroups) the kernels use no subgroups. */
static bool subgroups_in_order(wgpu_ctx *c) {
    static const char src[] =
        "enable subgroups;\n@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n"
        "@compute @workgroup_size(256)\n"
        "fn main(@builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) lane: u32,\n"
        "        @builtin(subgroup_size) n: u32) {\n"
        "    o[lid] = select(0u, 1u, lane == lid % n) + 2u * n;\n}\n";
    uint32_t o[256];
    if (tg_wgpu_run_once(c, src, 1, o, sizeof o, "subgroup probe") != TG_OK) return false;
    uint32_t size = o[0] >> 1;
    if (size < c->info.subgroup_min_size || size > c->info.subgroup_max_size || (size & (size - 1))) return false;
    for (int i = 0; i < 256; i++)
        if (!(o[i] & 1) || o[i] >> 1 != size) return false;
    return true;
}

static bool init(wgpu_ctx *c, char *why, size_t n) {
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->err_mu, NULL);
    tg_wgpu_setting set;
    if (tg_wgpu_setting_read(&set) != TG_OK) {
        snprintf(why, n, "%s", tg_last_error());
        return false;
    }
    prepare_vulkan();
    if (!load_library(c, why, n)) return false;
    wg_instance_desc idesc = {NULL, {NULL, 1, 0}};
    c->instance = c->f.CreateInstance(&idesc);
    if (!c->instance) {
        snprintf(why, n, "%s: wgpuCreateInstance failed", c->lib_path);
        return false;
    }
    /* The platform's native backend only: asking for "any" lets Dawn hand
     * out its Null adapter. */
#if defined(__APPLE__)
    const uint32_t native = WG_BACKEND_METAL;
#elif defined(_WIN32)
    const uint32_t native = WG_BACKEND_D3D12;
#else
    const uint32_t native = WG_BACKEND_VULKAN;
#endif
    wg_adapter_options opt = {NULL, WG_FEATURE_LEVEL_CORE, WG_POWER_HIGH_PERFORMANCE, 0, native, NULL};
    request_result r = {0};
    wg_adapter chosen;
    if (!choose_adapter(c, &opt, set.adapter, &chosen, why, n)) return false;
    if (chosen) r.status = WG_SUCCESS, r.handle = chosen;
    wg_adapter_cb_info acb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_adapter, &r, NULL};
    if (!chosen && (tg_wgpu_wait(c, c->f.InstanceRequestAdapter(c->instance, &opt, acb), "requesting an adapter") != TG_OK ||
                    r.status != WG_SUCCESS || !r.handle)) {
        snprintf(why, n, "no %s adapter (%s)%s", tg_wgpu_backend_name(native), r.msg[0] ? r.msg : "none offered",
                 native == WG_BACKEND_VULKAN ? "; without a GPU run scripts/fetch-webgpu.sh for lavapipe" : "");
        return false;
    }
    c->adapter = r.handle;
    wg_adapter_info ai;
    memset(&ai, 0, sizeof ai);
    if (c->f.AdapterGetInfo(c->adapter, &ai) != WG_SUCCESS) {
        snprintf(why, n, "wgpuAdapterGetInfo failed");
        return false;
    }
    uint32_t backend = ai.backend_type;
    fill_info(c, &ai);
    c->f.AdapterInfoFreeMembers(ai);
    if (tg_wgpu_check_adapter(backend, c->info.name) != TG_OK) {
        snprintf(why, n, "%s", tg_last_error() + strlen("webgpu: unavailable: "));
        return false;
    }
    wg_limits lim;
    memset(&lim, 0, sizeof lim);
    if (c->f.AdapterGetLimits(c->adapter, &lim) != WG_SUCCESS) {
        snprintf(why, n, "wgpuAdapterGetLimits failed");
        return false;
    }
    /* Ask for everything the adapter has: the defaults (128 MiB bindings,
     * 8 storage buffers) are far below what GPUs offer. */
    wg_device_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.label = (wg_str){"tensorgrad", WG_STRLEN};
    dd.required_limits = &lim;
    /* Subgroups, where offered, for the row kernels' reductions (rows.c):
     * a subgroup sum replaces most of a workgroup tree's barrier steps. */
    /* Timestamps only for TG_PROFILE (the engine's profile times each
     * kernel with them), unquantized: Dawn rounds them by default. A bad
     * TG_PROFILE fails the compile that reads it, not the device. */
    tg_profile_setting prof;
    bool want_timestamps = tg_program_profile(&prof) == TG_OK && prof.on;
    uint32_t want[2];
    wg_features af = {0};
    c->f.AdapterGetFeatures(c->adapter, &af);
    c->subgroups = c->timestamps = false;
    for (size_t i = 0; i < af.count; i++) {
        c->subgroups |= af.features[i] == WG_FEATURE_SUBGROUPS;
        c->timestamps |= want_timestamps && af.features[i] == WG_FEATURE_TIMESTAMP_QUERY;
    }
    feature_names(&af, NULL, c->info.features, sizeof c->info.features);
    c->f.SupportedFeaturesFreeMembers(af);
    if (c->subgroups) want[dd.required_feature_count++] = WG_FEATURE_SUBGROUPS;
    if (c->timestamps) want[dd.required_feature_count++] = WG_FEATURE_TIMESTAMP_QUERY;
    dd.required_features = want;
    /* Codegen already checked every index against the buffers' sizes at
     * compile time, so the clamps Dawn's compiler puts on every storage
     * access are dropped (they cost about 5% of gpt_small's step).
     * Likewise every kernel writes the workgroup memory it reads before
     * reading it, so the zeroing Dawn adds at the start of each workgroup
     * (a store loop and a barrier) is dropped too. */
    bool want_robust = set.robust;
    static const char *const fast[] = {"disable_robustness", "disable_workgroup_init"},
                             *const exact[] = {"timestamp_quantization"};
    wg_toggles toggles = {{NULL, WG_STYPE_DAWN_TOGGLES}, want_robust ? 0 : 2, fast, c->timestamps ? 1 : 0, exact};
    if (toggles.enabled_count || toggles.disabled_count) dd.next = &toggles.chain;
    dd.lost = (wg_lost_cb_info){NULL, WG_CALLBACK_ALLOW_SPONTANEOUS, on_lost, c, NULL};
    dd.uncaptured = (wg_error_cb_info){NULL, on_error, c, NULL};
    request_result d = {0};
    wg_device_cb_info dcb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_device, &d, NULL};
    if (tg_wgpu_wait(c, c->f.AdapterRequestDevice(c->adapter, &dd, dcb), "requesting a device") != TG_OK ||
        d.status != WG_SUCCESS || !d.handle) {
        snprintf(why, n, "the %s adapter '%s' gave no device: %s", c->info.backend, c->info.name, d.msg);
        return false;
    }
    c->device = d.handle;
    c->queue = c->f.DeviceGetQueue(c->device);
    memset(&c->limits, 0, sizeof c->limits);
    if (c->f.DeviceGetLimits(c->device, &c->limits) != WG_SUCCESS) c->limits = lim;
    fill_limits(c);
    if (c->subgroups) c->subgroups = !set.no_subgroups && subgroups_in_order(c);
    c->compiles_on_first_use = strcmp(c->info.type, "CPU") == 0;
    c->info.robust =
        want_robust || !device_uses_toggle(c, "disable_robustness") || !device_uses_toggle(c, "disable_workgroup_init");
    return true;
}

tg_status tg_wgpu_ctx_get(wgpu_ctx **out) {
    *out = NULL;
    pthread_mutex_lock(&g_init_mu);
    if (!g_tried) {
        g_tried = true;
        g_status = init(&g_ctx, g_why, sizeof g_why) ? TG_OK : TG_ERR_BACKEND;
    }
    pthread_mutex_unlock(&g_init_mu);
    if (g_status != TG_OK) return tg_fail(TG_ERR_BACKEND, "webgpu: unavailable: %s", g_why);
    *out = &g_ctx;
    return TG_OK;
}

/* The limits codegen checks: the device's, or a test's override. */
void tg_wgpu_kernel_limits(const wgpu_ctx *c, tg_wgsl_limits *l) {
    if (g_override) {
        *l = g_override_limits;
        return;
    }
    const wg_limits *d = &c->limits;
    *l = (tg_wgsl_limits){d->max_storage_buffer_binding_size, d->max_buffer_size,
                          d->max_storage_buffers_per_shader_stage, d->max_compute_workgroup_storage_size,
                          d->max_compute_invocations_per_workgroup, d->max_compute_workgroups_per_dimension,
                          d->min_storage_buffer_offset_alignment, false, strcmp(c->info.type, "CPU") == 0,
                          c->subgroups ? c->info.subgroup_min_size : 0, c->subgroups ? c->info.subgroup_max_size : 0,
                          false, -1};
}

void tg_wgpu_test_lose_device(void) {
    wgpu_ctx *c;
    if (tg_wgpu_ctx_get(&c) != TG_OK) return;
    pthread_mutex_lock(&c->mu);
    c->f.DeviceDestroy(c->device);
    c->f.InstanceProcessEvents(c->instance); /* lets a deferred lost callback run */
    pthread_mutex_unlock(&c->mu);
}

void tg_wgpu_test_override_limits(const tg_wgsl_limits *l) {
    g_override = l != NULL;
    if (l) g_override_limits = *l;
}

tg_status tg_webgpu_info(tg_webgpu_adapter_info *out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_webgpu_info: out is NULL");
    memset(out, 0, sizeof *out);
    wgpu_ctx *c;
    tg_status st = tg_wgpu_ctx_get(&c);
    if (st == TG_OK) *out = c->info;
    return st;
}

/* Whether a pipeline multiplying f32 subgroup matrices of M x N x K builds on
 * device d: "" when it does, else the first line of the device's error. */
static void probe_f32_matrix(wgpu_ctx *c, wg_instance inst, wg_device d, int M, int N, int K, char *why, size_t n) {
    char src[900];
    snprintf(src, sizeof src,
             "enable chromium_experimental_subgroup_matrix;\n"
             "@group(0) @binding(0) var<storage, read_write> b: array<f32, 1024>;\n"
             "@compute @workgroup_size(32)\n"
             "fn main() {\n"
             "    let l = subgroupMatrixLoad<subgroup_matrix_left<f32, %d, %d>>(&b, 0u, false, %du);\n"
             "    let r = subgroupMatrixLoad<subgroup_matrix_right<f32, %d, %d>>(&b, 256u, false, %du);\n"
             "    let acc = subgroupMatrixMultiplyAccumulate(l, r, subgroup_matrix_result<f32, %d, %d>());\n"
             "    subgroupMatrixStore(&b, 512u, acc, false, %du);\n"
             "}\n",
             K, M, K, N, K, N, N, M, N);
    c->f.DevicePushErrorScope(d, WG_ERROR_FILTER_VALIDATION);
    wg_wgsl_source code = {{NULL, WG_STYPE_SHADER_SOURCE_WGSL}, {src, WG_STRLEN}};
    wg_shader_desc sd = {&code.chain, {"subgroup matrix probe", WG_STRLEN}};
    wg_shader sh = c->f.DeviceCreateShaderModule(d, &sd);
    wg_pipeline_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.compute.module = sh;
    pd.compute.entry_point = (wg_str){"main", WG_STRLEN};
    wg_pipeline p = sh ? c->f.DeviceCreateComputePipeline(d, &pd) : NULL;
    tg_wgpu_scope r = {0};
    wg_pop_cb_info pcb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, tg_wgpu_on_popped, &r, NULL};
    if (tg_wgpu_wait_in(c, inst, c->f.DevicePopErrorScope(d, pcb), "the probe's error scope") != TG_OK)
        snprintf(r.msg, sizeof r.msg, "no answer");
    if (p) c->f.ComputePipelineRelease(p);
    if (sh) c->f.ShaderModuleRelease(sh);
    why[0] = 0;
    if (r.type != WG_ERROR_NONE || !p) {
        size_t len = strcspn(r.msg, "\n");
        snprintf(why, n, "%.*s", (int)(len < 150 ? len : 150), r.msg[0] ? r.msg : "no pipeline");
    }
}

/* Whether adapter a (of instance inst) can run subgroup matrices, appended
 * to buf. Dawn's feature numbers past the standard ones move between its
 * builds (this build refuses the matrix shapes of the number webgpu.h gave
 * them in 2025: "not available"), so no number is trusted: a device is
 * asked for with every feature `more` lists and the extension's WGSL is
 * compiled on it, as f32 products of the shapes GPUs use. f16 ones would
 * also need shader-f16. */
static void matrix_probe(wgpu_ctx *c, wg_instance inst, wg_adapter a, const wg_features *more, char *buf, size_t n) {
    wg_device_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.required_feature_count = more->count;
    dd.required_features = more->features;
    static const char *const unsafe[] = {"allow_unsafe_apis"};
    wg_toggles t = {{NULL, WG_STYPE_DAWN_TOGGLES}, 1, unsafe, 0, NULL};
    dd.next = &t.chain;
    request_result d = {0};
    wg_device_cb_info dcb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_device, &d, NULL};
    if (tg_wgpu_wait_in(c, inst, c->f.AdapterRequestDevice(a, &dd, dcb), "the probe's device") != TG_OK) d.status = 0;
    size_t len = strlen(buf);
    if (d.status != WG_SUCCESS || !d.handle) {
        snprintf(buf + len, n - len, "; subgroup matrices: unknown (a device with those features was refused: %s)",
                 d.msg[0] ? d.msg : "no answer");
        return;
    }
    static const int shapes[][3] = {{8, 8, 8}, {16, 8, 8}, {16, 16, 8}, {16, 16, 16}};
    char why[160] = "", first[160] = "";
    int ok = -1;
    for (int i = 0; i < 4 && ok < 0 && !strstr(first, "not allowed"); i++) { /* a refused extension refuses every shape */
        probe_f32_matrix(c, inst, d.handle, shapes[i][0], shapes[i][1], shapes[i][2], why, sizeof why);
        if (!why[0]) ok = i;
        else if (!first[0]) snprintf(first, sizeof first, "%s", why);
    }
    if (ok >= 0)
        snprintf(buf + len, n - len, "; subgroup matrices: f32 %dx%dx%d products compile", shapes[ok][0], shapes[ok][1],
                 shapes[ok][2]);
    else if (strstr(first, "not allowed"))
        snprintf(buf + len, n - len, "; subgroup matrices: none (with every feature above, the device refuses "
                                     "`enable chromium_experimental_subgroup_matrix`)");
    else
        snprintf(buf + len, n - len, "; subgroup matrices: no f32 product of 8x8x8 to 16x16x16 compiles (%s)", first);
    c->f.DeviceDestroy(d.handle);
    c->f.DeviceRelease(d.handle);
}

/* A second instance and adapter asked for with allow_unsafe_apis, to see
 * which experimental features (shader-f16, subgroup matrices) this library
 * and driver would expose. */
tg_status tg_webgpu_unsafe_features(char *buf, size_t n) {
    if (!buf || !n) return tg_fail(TG_ERR_ARG, "tg_webgpu_unsafe_features: no buffer");
    buf[0] = 0;
    wgpu_ctx *c;
    tg_status st = tg_wgpu_ctx_get(&c);
    if (st != TG_OK) return st;
    static const char *const unsafe[] = {"allow_unsafe_apis"};
    wg_toggles t_inst = {{NULL, WG_STYPE_DAWN_TOGGLES}, 1, unsafe, 0, NULL};
    wg_toggles t_adapter = t_inst;
    wg_instance_desc idesc = {&t_inst.chain, {NULL, 1, 0}};
    pthread_mutex_lock(&c->mu);
    wg_instance inst = c->f.CreateInstance(&idesc);
    request_result r = {0};
    if (inst) {
        wg_adapter_options opt = {&t_adapter.chain, WG_FEATURE_LEVEL_CORE, WG_POWER_HIGH_PERFORMANCE, 0,
                                  WG_BACKEND_VULKAN, NULL};
        wg_adapter_cb_info acb = {NULL, WG_CALLBACK_WAIT_ANY_ONLY, on_adapter, &r, NULL};
        if (tg_wgpu_wait_in(c, inst, c->f.InstanceRequestAdapter(inst, &opt, acb), "the probe's adapter") != TG_OK)
            r.status = 0;
    }
    if (r.status == WG_SUCCESS && r.handle) {
        wg_features base = {0}, more = {0};
        c->f.AdapterGetFeatures(c->adapter, &base);
        c->f.AdapterGetFeatures(r.handle, &more);
        feature_names(&more, &base, buf, n);
        matrix_probe(c, inst, r.handle, &more, buf, n);
        c->f.SupportedFeaturesFreeMembers(base);
        c->f.SupportedFeaturesFreeMembers(more);
        c->f.AdapterRelease(r.handle);
    } else st = tg_fail(TG_ERR_BACKEND, "webgpu: no adapter with allow_unsafe_apis (%s)", r.msg[0] ? r.msg : "none offered");
    if (inst) c->f.InstanceRelease(inst);
    pthread_mutex_unlock(&c->mu);
    return st;
}
