/* Part of tests/test_webgpu.c: the adapter check, WGSL errors, limit
 * errors, the PRNG and training parity. Needs a WebGPU device. */
#ifndef TG_TEST_WEBGPU_MISC_H
#define TG_TEST_WEBGPU_MISC_H

/* Dawn offers its Null adapter when Vulkan has no usable driver; it must be
 * refused, not used (it "runs" every dispatch and computes nothing). */
static void test_adapter_check(void) {
    CHECK_ERR(tg_wgpu_check_adapter(WG_BACKEND_NULL, "Null backend"), TG_ERR_BACKEND, "null backend");
    CHECK_ERR(tg_wgpu_check_adapter(WG_BACKEND_UNDEFINED, "x"), TG_ERR_BACKEND, "unavailable");
    CHECK_ERR(tg_wgpu_check_adapter(77, "x"), TG_ERR_BACKEND, "unknown backend");
    CHECK_OK(tg_wgpu_check_adapter(WG_BACKEND_VULKAN, "llvmpipe"));
    tg_webgpu_adapter_info info;
    CHECK_OK(tg_webgpu_info(&info));
    CHECK(strcmp(info.backend, "vulkan") == 0, "backend is %s", info.backend);
    CHECK(info.max_storage_buffer_binding_size >= (1u << 27) && info.max_compute_workgroups_per_dimension >= 65535,
          "limits below WebGPU's defaults: binding %llu, groups %u",
          (unsigned long long)info.max_storage_buffer_binding_size, info.max_compute_workgroups_per_dimension);
}

static const char *k_broken =
    "@group(0) @binding(0) var<storage, read_write> b0: array<u32>;\n"
    "@compute @workgroup_size(1)\n"
    "fn main() {\n"
    "    b0[0] = no_such_name + 1u;\n"
    "}\n";

static const char *k_fill =
    "@group(0) @binding(0) var<storage, read_write> b0: array<u32>;\n"
    "@compute @workgroup_size(64)\n"
    "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
    "    if (id.x < arrayLength(&b0)) { b0[id.x] = id.x * 3u; }\n"
    "}\n";

static void test_compile_errors(void) {
    tg_status st = tg_wgpu_test_compile(k_broken);
    CHECK(st == TG_ERR_BACKEND && strstr(tg_last_error(), "line 4") && strstr(tg_last_error(), "column") &&
              strstr(tg_last_error(), "no_such_name"),
          "broken WGSL -> %s: %s", tg_status_name(st), tg_last_error());
    CHECK_OK(tg_wgpu_test_compile(k_fill));
    uint32_t out[100];
    CHECK_OK(tg_wgpu_test_run(k_fill, 2, out, sizeof out));
    CHECK(out[0] == 0 && out[99] == 297, "fill kernel wrote %u, %u", out[0], out[99]);
    /* A validation error of the device (too many workgroups) is a status, and
     * the device stays usable after it. */
    CHECK_ERR(tg_wgpu_test_run(k_fill, 70000, out, sizeof out), TG_ERR_BACKEND, "rror");
    CHECK_OK(tg_wgpu_test_run(k_fill, 2, out, sizeof out));
}

typedef struct {
    tg_shape shape;
    bool as_input;
} big_user;

static tg_tensor big_loss(tg_graph *g, void *user) {
    big_user *u = user;
    tg_tensor x = u->as_input ? tg_input(g, "x") : tg_broadcast_to(tg_use(g, 0), u->shape);
    return tg_sum(tg_relu(x), TG_ALL, false);
}

/* Compiles a relu + sum over `shape` on WebGPU; returns the status. */
static tg_status compile_big(tg_shape shape, bool as_input) {
    tg_model *m = tg_model_new();
    tg_model_param(m, "w", S(1), tg_init_ones());
    big_user u = {shape, as_input};
    tg_input_decl in = {"x", TG_F32, shape};
    tg_optim none = {0};
    tg_train_spec spec = {.model = m, .loss = big_loss, .user = &u, .inputs = &in, .n_inputs = as_input,
                          .optim = none, .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

static void test_limits(void) {
    tg_webgpu_adapter_info info;
    CHECK_OK(tg_webgpu_info(&info));
    tg_wgsl_limits l = {1 << 20, info.max_buffer_size, info.max_storage_buffers_per_shader_stage,
                        info.max_compute_workgroup_storage_size, info.max_compute_invocations_per_workgroup,
                        info.max_compute_workgroups_per_dimension, info.min_storage_buffer_offset_alignment, false, false, 0, 0, false, -1};
    tg_wgpu_test_override_limits(&l);
    CHECK_ERR(compile_big(S(512, 1024), true), TG_ERR_LIMIT, "[512,1024]) needs a 2097152-byte storage binding");
    CHECK_ERR(compile_big(S(512, 1024), true), TG_ERR_LIMIT, "maxStorageBufferBindingSize 1048576");
    CHECK_OK(compile_big(S(512, 256), true));
    l.max_storage_buffer_binding_size = info.max_storage_buffer_binding_size;
    l.max_buffer_size = 1 << 20;
    tg_wgpu_test_override_limits(&l);
    CHECK_ERR(compile_big(S(300, 1024), false), TG_ERR_LIMIT, "over maxBufferSize 1048576");
    /* the broadcast is computed inline where the relu reads it: the relu is the tensor named */
    CHECK_ERR(compile_big(S(300, 1024), false), TG_ERR_LIMIT, "(relu f32 [300,1024])");
    tg_wgpu_test_override_limits(NULL);
    /* The device's own limit, no override: one element over the binding size.
     * Refused at compile, before any GPU memory is allocated. */
    if (info.max_storage_buffer_binding_size <= (1ull << 30)) {
        int64_t n = (int64_t)(info.max_storage_buffer_binding_size / 4) + 1;
        CHECK_ERR(compile_big(S(n), true), TG_ERR_LIMIT, "maxStorageBufferBindingSize");
    }
}

static void test_prng(void) {
    static const uint64_t seeds[] = {0, 42, 0xdeadbeefcafef00dull};
    static const uint32_t salts[] = {0, 7, 0x9e3779b9u};
    enum { N = 1000 };
    static uint32_t got[N];
    for (int s = 0; s < 3; s++) {
        size_t cap = strlen(tg_wgsl_prng) + 1024;
        char *src = malloc(cap);
        snprintf(src, cap,
                 "%s@group(0) @binding(0) var<storage, read_write> b0: array<u32>;\n"
                 "@compute @workgroup_size(64)\n"
                 "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
                 "    let i = id.x;\n"
                 "    if (i >= %uu) { return; }\n"
                 "    b0[i] = select(tg_rng_u32(%uu, %uu, %uu, i * 977u + 5u), tg_hash32(i), i %% 2u == 1u);\n"
                 "}\n",
                 tg_wgsl_prng, (unsigned)N, (unsigned)(uint32_t)seeds[s], (unsigned)(seeds[s] >> 32), salts[s]);
        CHECK_OK(tg_wgpu_test_run(src, (N + 63) / 64, got, sizeof got));
        int bad = -1;
        for (uint32_t i = 0; i < N && bad < 0; i++) {
            uint32_t want = i % 2 ? tg_hash32(i) : tg_rng_u32(seeds[s], salts[s], i * 977u + 5u);
            if (got[i] != want) bad = (int)i;
        }
        CHECK(bad < 0, "WGSL PRNG differs from tg_rng_u32 (seed %llu) at %d: %u vs %u", (unsigned long long)seeds[s],
              bad, bad >= 0 ? got[bad] : 0, bad >= 0 ? tg_rng_u32(seeds[s], salts[s], (uint32_t)bad * 977u + 5u) : 0);
        free(src);
    }
    /* The key split the random ops use: uniform bit for bit, normal to a few ulp. */
    const char *body =
        "@group(0) @binding(0) var<storage, read_write> b0: array<u32>;\n"
        "@compute @workgroup_size(64)\n"
        "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
        "    let i = id.x;\n"
        "    if (i >= 1000u) { return; }\n"
        "    let key = tg_rng_key(0x01234567u, 0x89abcdefu, 99u);\n"
        "    b0[i] = select(bitcast<u32>(tg_rng_key_uniform(key, i)), bitcast<u32>(tg_rng_key_normal(key, i)), i >= 500u);\n"
        "}\n";
    size_t cap = strlen(tg_wgsl_prng) + strlen(body) + 1;
    char *src = malloc(cap);
    snprintf(src, cap, "%s%s", tg_wgsl_prng, body);
    CHECK_OK(tg_wgpu_test_run(src, (N + 63) / 64, got, sizeof got));
    free(src);
    uint32_t key = tg_rng_key(0x89abcdef01234567ull, 99);
    int bad_u = -1;
    double worst_n = 0;
    for (uint32_t i = 0; i < N; i++) {
        float g;
        memcpy(&g, &got[i], 4);
        if (i < 500 && g != tg_rng_key_uniform(key, i) && bad_u < 0) bad_u = (int)i;
        if (i >= 500) worst_n = fmax(worst_n, fabs((double)g - tg_rng_key_normal(key, i)));
    }
    CHECK(bad_u < 0, "WGSL tg_rng_key_uniform differs at %d", bad_u);
    CHECK(worst_n < 1e-5, "WGSL tg_rng_key_normal differs by %.3g", worst_n);
}

/* ---- training parity: the sin MLP of examples/sin.c (examples/sin.h) ---- */

/* Trains `steps` steps with optimizer o on backend be; losses[] per step and
 * the final l2.W. */
static tg_status sin_train(tg_backend be, tg_optim o, int steps, float *losses, float *w2) {
    tg_model *m = tg_model_new();
    sin_net net = sin_net_new(m, 64);
    tg_input_decl in[] = {{"x", TG_F32, S(SIN_B, 1)}, {"y", TG_F32, S(SIN_B, 1)}};
    tg_train_spec spec = {.model = m, .loss = sin_loss, .user = &net, .inputs = in, .n_inputs = 2, .optim = o,
                          .seed = 3, .backend = be, .threads = 2};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    static float xs[SIN_B], ys[SIN_B];
    uint64_t rng = 12345;
    for (int step = 0; step < steps && st == TG_OK; step++) {
        for (int i = 0; i < SIN_B; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            xs[i] = (float)(((double)(rng >> 40) / 16777216.0 * 2.0 - 1.0) * 3.14159265358979);
            ys[i] = sinf(xs[i]);
        }
        tg_feed f[] = {TG_FEED("x", xs, SIN_B), TG_FEED("y", ys, SIN_B)};
        st = tg_session_step(s, f, 2, &losses[step]);
    }
    if (st == TG_OK) st = tg_session_get_param(s, "l2.W", w2, 64 * 64);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

static void train_pair(const char *what, tg_optim o, bool verbose) {
    enum { STEPS = 50 };
    static float lc[STEPS], lg[STEPS], wc[64 * 64], wg[64 * 64];
    CHECK_OK(sin_train(TG_BACKEND_CPU, o, STEPS, lc, wc));
    tg_status st = sin_train(TG_BACKEND_WEBGPU, o, STEPS, lg, wg);
    CHECK(st == TG_OK, "%s on webgpu: %s", what, tg_last_error());
    if (st != TG_OK) return;
    double worst = 0;
    int at = 0;
    for (int i = 0; i < STEPS; i++) {
        double e = fabs((double)lg[i] - lc[i]) / fabs((double)lc[i]);
        if (!(e <= worst)) worst = e, at = i;
    }
    CHECK(worst <= 1e-4, "%s: loss of step %d differs by %.3g relative (%.8g vs %.8g)", what, at + 1, worst, lg[at],
          lc[at]);
    double we = par_err(wg, wc, 64 * 64);
    CHECK(we <= 1e-4, "%s: l2.W after %d steps differs by %.3g", what, STEPS, we);
    if (verbose) printf("  train %-24s loss %.3g -> %.3g, max loss diff %.2g, weights %.2g\n", what, lc[0], lc[STEPS - 1], worst, we);
}

/* A forward session attached to a WebGPU training session shares its params
 * (program per batch size, params arena shared): its predictions match the
 * CPU's for the same params and follow training. */
static tg_tensor sin_predict(tg_graph *g, void *user) {
    sin_net *n = user;
    tg_tensor h = tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x")));
    return tg_linear_fwd(g, &n->l3, tg_relu(tg_linear_fwd(g, &n->l2, h)));
}

/* Compile progress reports of kernels (WebGPU's; the CPU reports none). */
static int kernel_reports;
static void count_kernel_reports(void *user, const char *what, int64_t done, int64_t total) {
    (void)user, (void)done, (void)total;
    kernel_reports += strcmp(what, "kernels") == 0;
}

static void test_forward_sessions(void) {
    float out[2][300], xs[300], ys[SIN_B];
    for (int i = 0; i < 300; i++) xs[i] = -3.0f + 0.02f * (float)i;
    for (int i = 0; i < SIN_B; i++) ys[i] = sinf(xs[i]);
    tg_input_decl in[] = {{"x", TG_F32, S(SIN_B, 1)}, {"y", TG_F32, S(SIN_B, 1)}};
    tg_input_decl fin[] = {{"x", TG_F32, S(TG_BATCH, 1)}};
    for (int k = 0; k < 2; k++) {
        tg_model *m = tg_model_new();
        sin_net net = {tg_linear_new(m, "l1", 1, 64, true), tg_linear_new(m, "l2", 64, 64, true),
                       tg_linear_new(m, "l3", 64, 1, true)};
        tg_train_spec spec = {.model = m, .loss = sin_loss, .user = &net, .inputs = in, .n_inputs = 2,
                              .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 5,
                              .backend = k ? TG_BACKEND_WEBGPU : TG_BACKEND_CPU, .threads = 2};
        tg_session *s = NULL;
        tg_forward *f = NULL;
        CHECK_OK(tg_session_new(&spec, &s));
        tg_forward_spec is = {.fn = sin_predict, .user = &net, .inputs = fin, .n_inputs = 1,
                              .compile_progress = count_kernel_reports};
        kernel_reports = 0;
        if (s) CHECK_OK(tg_forward_attach(s, &is, &f));
        /* batch 1's program, traced to find errors, compiles only when batch 1 runs */
        CHECK(kernel_reports == 0, "%s: attaching compiled kernels (%d reports) for a batch no run asked for",
              k ? "webgpu" : "cpu", kernel_reports);
        if (s && f) {
            tg_feed tf[] = {TG_FEED("x", xs, SIN_B), TG_FEED("y", ys, SIN_B)};
            for (int i = 0; i < 5; i++) CHECK_OK(tg_session_step(s, tf, 2, NULL));
            float before[7], one;
            CHECK_OK(tg_forward_run(f, 7, (tg_feed[]){TG_FEED("x", xs, 7)}, 1));
            CHECK(k == 0 || kernel_reports > 0, "webgpu: the first run of batch 7 reported no kernels compiled");
            CHECK_OK(tg_forward_output(f, before, 7));
            CHECK_OK(tg_session_step(s, tf, 2, NULL));
            CHECK_OK(tg_forward_run(f, 300, (tg_feed[]){TG_FEED("x", xs, 300)}, 1));
            CHECK_OK(tg_forward_output(f, out[k], 300));
            CHECK(before[3] != out[k][3], "%s: the forward session did not see the training step", k ? "webgpu" : "cpu");
            CHECK_OK(tg_forward_run(f, 1, (tg_feed[]){TG_FEED("x", xs + 3, 1)}, 1));
            CHECK_OK(tg_forward_output(f, &one, 1));
            CHECK(fabsf(one - out[k][3]) <= 1e-5f * (1.0f + fabsf(one)), "%s: batch 1 gives %.9g, batch 300 %.9g",
                  k ? "webgpu" : "cpu", one, out[k][3]);
        }
        tg_forward_free(f);
        tg_session_free(s);
        tg_model_free(m);
    }
    double e = par_err(out[1], out[0], 300);
    CHECK(e <= 1e-4, "forward session on webgpu differs from the cpu's by %.3g", e);
}

static void test_training(bool verbose) {
    train_pair("sin MLP, Adam", tg_adam(tg_lr_constant(5e-3f)), verbose);
    tg_optim aw = tg_adamw(tg_lr_cosine(5e-3f, 5e-4f, 50), 0.01f);
    aw.clip_grad_norm = 0.5f;
    aw.normalize_grads = true;
    train_pair("AdamW, clip, normalize", aw, verbose);
    train_pair("SGD nesterov, wd", tg_sgd(tg_lr_constant(2e-2f), 0.9f, true, 1e-3f), verbose);
    train_pair("SGD plain", tg_sgd(tg_lr_constant(2e-2f), 0.0f, false, 0.0f), verbose);
}
#endif
