/* Device limits under shrunken sets: every op of the shared table
 * (tests/op_cases.h), a few larger ops and whole models compiled for
 * WebGPU against limits smaller than the device's
 * (tg_wgpu_test_override_limits). For each graph and set:
 *   - the compile gives TG_OK, or TG_ERR_LIMIT naming a limit that was
 *     shrunk (never another status, never a crash);
 *   - when it compiles, every kernel of the program respects the set:
 *     grid, workgroup size, workgroup memory (from the var<workgroup>
 *     declarations), bindings per stage, binding sizes and offsets;
 *   - and a step on the real device (whose limits are larger) matches the
 *     CPU backend within test_webgpu.c's tolerances.
 * Without a WebGPU runtime it skips as the other WebGPU suites do. Under
 * sanitizers the run-and-compare part covers the models and larger ops
 * only (lavapipe is slow there); -v prints every graph and set. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv (parity.h) */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parity.h"
#include "harness.h"
#include "webgpu/webgpu.h"
#include "session.h"
#include "../examples/sin.h"
#include "../examples/gpt.c"

#define S TG_SHAPE /* op_cases.h #undefs its own */
#define PRM(...) {__VA_ARGS__, P_END}

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static bool verbose;

/* ---- the limit sets ---- */

/* 0: the device's value. The offset alignment is 256 in every set (lavapipe's is smaller). */
typedef struct {
    const char *name;
    uint32_t groups, invocations, wg_bytes, buffers;
    uint64_t binding, buffer;
} lim_set;

static const lim_set sets[] = {
    {"8 workgroups per dimension", 8, 0, 0, 0, 0, 0},
    {"64 workgroups per dimension", 64, 0, 0, 0, 0, 0},
    {"64 invocations", 0, 64, 0, 0, 0, 0},
    {"128 invocations", 0, 128, 0, 0, 0, 0},
    {"4 KiB of workgroup memory", 0, 0, 4096, 0, 0, 0},
    {"8 KiB of workgroup memory", 0, 0, 8192, 0, 0, 0},
    {"16 KiB of workgroup memory", 0, 0, 16384, 0, 0, 0},
    {"4 storage buffers", 0, 0, 0, 4, 0, 0},
    {"5 storage buffers", 0, 0, 0, 5, 0, 0},
    {"8 storage buffers", 0, 0, 0, 8, 0, 0},
    {"64 KiB bindings", 0, 0, 0, 0, 64 << 10, 0},
    {"256 invocations", 0, 256, 0, 0, 0, 0},
    {"16 workgroups per dimension", 16, 0, 0, 0, 0, 0},
    {"1 MiB buffers and bindings", 0, 0, 0, 0, 1 << 20, 1 << 20},
    {"all small", 16, 256, 16384, 5, 256 << 10, 0},
};
#define N_SETS ((int)(sizeof sets / sizeof sets[0]))

static tg_wgsl_limits dev; /* the device's, as codegen sees them */
static tg_wgsl_limits cur; /* the set in force */
static const lim_set *cur_set;

static tg_wgsl_limits limits_of(const lim_set *s) {
    tg_wgsl_limits l = dev;
    if (s->groups) l.max_workgroups_per_dimension = s->groups;
    if (s->invocations) l.max_invocations_per_workgroup = s->invocations;
    if (s->wg_bytes) l.max_workgroup_storage_size = s->wg_bytes;
    if (s->buffers) l.max_storage_buffers_per_stage = s->buffers;
    if (s->binding) l.max_storage_buffer_binding_size = s->binding;
    if (s->buffer) l.max_buffer_size = s->buffer;
    l.min_storage_buffer_offset_alignment = 256;
    return l;
}

/* Whether a TG_ERR_LIMIT message names a limit this set shrank. */
static bool names_a_shrunk_limit(const char *msg) {
    const tg_wgsl_limits *l = &cur;
    return (l->max_workgroups_per_dimension < dev.max_workgroups_per_dimension &&
            strstr(msg, "maxComputeWorkgroupsPerDimension")) ||
           (l->max_invocations_per_workgroup < dev.max_invocations_per_workgroup &&
            strstr(msg, "maxComputeInvocationsPerWorkgroup")) ||
           (l->max_workgroup_storage_size < dev.max_workgroup_storage_size &&
            strstr(msg, "maxComputeWorkgroupStorageSize")) ||
           (l->max_storage_buffers_per_stage < dev.max_storage_buffers_per_stage &&
            strstr(msg, "maxStorageBuffersPerShaderStage")) ||
           (l->max_storage_buffer_binding_size < dev.max_storage_buffer_binding_size &&
            strstr(msg, "maxStorageBufferBindingSize")) ||
           (l->min_storage_buffer_offset_alignment > dev.min_storage_buffer_offset_alignment &&
            strstr(msg, "minStorageBufferOffsetAlignment")) ||
           (l->max_buffer_size < dev.max_buffer_size && strstr(msg, "maxBufferSize"));
}

/* ---- what a compiled program's kernels must respect ---- */

/* Bytes of one element of a WGSL type (16 for vec3, as WGSL lays it out); 0: unknown. */
static int64_t type_bytes(const char *t, size_t n) {
    if (n >= 7 && strncmp(t, "atomic<", 7) == 0) return 4;
    if (n == 3 && (!strncmp(t, "f32", 3) || !strncmp(t, "u32", 3) || !strncmp(t, "i32", 3))) return 4;
    if (n >= 5 && strncmp(t, "vec2<", 5) == 0) return 8;
    if (n >= 5 && (strncmp(t, "vec3<", 5) == 0 || strncmp(t, "vec4<", 5) == 0)) return 16;
    return 0;
}

/* Total bytes of the source's var<workgroup> declarations, each rounded up
 * to 16 as Dawn counts them; -1 when one cannot be read. */
static int64_t workgroup_bytes(const char *src, char *bad, size_t nbad) {
    int64_t total = 0;
    for (const char *p = src; (p = strstr(p, "var<workgroup>")); p++) {
        const char *colon = strchr(p, ':'), *end = strchr(p, ';');
        if (!colon || !end || colon > end) goto fail;
        const char *t = colon + 1;
        while (*t == ' ') t++;
        int64_t bytes;
        if (strncmp(t, "array<", 6) == 0) {
            t += 6;
            const char *comma = NULL;
            for (const char *q = t; q < end; q++)
                if (*q == ',') comma = q;
            if (!comma) goto fail;
            int64_t eb = type_bytes(t, (size_t)(comma - t)), n = strtoll(comma + 1, NULL, 10);
            if (eb <= 0 || n <= 0) goto fail;
            bytes = eb * n;
        } else {
            size_t len = (size_t)(end - t);
            bytes = type_bytes(t, len);
            if (bytes <= 0) goto fail;
        }
        total += (bytes + 15) / 16 * 16;
        continue;
    fail:
        snprintf(bad, nbad, "%.*s", (int)strcspn(p, "\n"), p);
        return -1;
    }
    return total;
}

static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Kernels seen by check_program that bind a workspace (split products and
 * sums) and that compute a fused attention: the models below must reach them. */
static int n_workspace_kernels, n_attention_kernels;

/* Re-emits session s's program against the set in force, with what the
 * engine adds (wg_compile), and checks every kernel against it. */
static void check_program(const char *what, tg_session *s) {
    const tg_program *p = s->b.prog;
    tg_wgsl_limits l = cur;
    l.one_kernel_per_node = p->check_each;
    l.gate_updates = p->check >= 0 && !p->dp && !p->check_each;
    l.step_check = p->check;
    tg_wgsl_program prog;
    tg_status st = tg_wgsl_emit_program(p->g, &p->plan, p->fusion, p->wb, p->n_wb, &l, &prog);
    CHECK(st == TG_OK, "%s [%s]: the session compiled, emitting its program again: %s", what, cur_set->name,
          tg_last_error());
    if (st != TG_OK) return;
    for (int a = 0; a < TG_N_ARENAS; a++)
        CHECK((uint64_t)p->plan.arena_bytes[a] <= l.max_buffer_size, "%s [%s]: arena %d of %lld bytes, over %llu", what,
              cur_set->name, a, (long long)p->plan.arena_bytes[a], (unsigned long long)l.max_buffer_size);
    CHECK((uint64_t)prog.scratch_bytes <= l.max_buffer_size && (uint64_t)prog.workspace_bytes <= l.max_buffer_size,
          "%s [%s]: scratch %lld, workspace %lld bytes, over %llu", what, cur_set->name, (long long)prog.scratch_bytes,
          (long long)prog.workspace_bytes, (unsigned long long)l.max_buffer_size);
    int bad = 0;
    for (int i = 0; i < prog.n && bad < 3; i++) {
        const tg_kernel_spec *k = &prog.k[i];
        if (!k->source) continue;
        char head[96];
        snprintf(head, sizeof head, "%.*s", (int)strcspn(k->source, "\n"), k->source);
        n_workspace_kernels += k->workspace > 0;
        n_attention_kernels += strstr(head, "attention") != NULL;
        int before = check_fail;
        for (int d = 0; d < 3; d++)
            CHECK(k->dispatch[d] >= 1 && k->dispatch[d] <= l.max_workgroups_per_dimension,
                  "%s [%s]: kernel %d (%s): dispatch %u x %u x %u, over %u per dimension", what, cur_set->name, i, head,
                  k->dispatch[0], k->dispatch[1], k->dispatch[2], l.max_workgroups_per_dimension);
        const char *ws = strstr(k->source, "@workgroup_size(");
        unsigned declared = ws ? (unsigned)strtoul(ws + 16, NULL, 10) : 0;
        CHECK(ws && declared == k->workgroup_size && count_of(k->source, "@workgroup_size(") == 1,
              "%s [%s]: kernel %d (%s): declares @workgroup_size(%u), its spec %u", what, cur_set->name, i, head, declared,
              k->workgroup_size);
        CHECK(k->workgroup_size >= 1 && k->workgroup_size <= l.max_invocations_per_workgroup,
              "%s [%s]: kernel %d (%s): workgroups of %u invocations, over %u", what, cur_set->name, i, head,
              k->workgroup_size, l.max_invocations_per_workgroup);
        char unread[128] = "";
        int64_t wb = workgroup_bytes(k->source, unread, sizeof unread);
        CHECK(wb >= 0, "%s [%s]: kernel %d (%s): cannot read '%s'", what, cur_set->name, i, head, unread);
        CHECK(wb <= (int64_t)l.max_workgroup_storage_size, "%s [%s]: kernel %d (%s): %lld bytes of workgroup memory, over %u",
              what, cur_set->name, i, head, (long long)wb, l.max_workgroup_storage_size);
        CHECK(k->n_bindings >= 1 && (uint32_t)k->n_bindings <= l.max_storage_buffers_per_stage &&
                  count_of(k->source, "@binding(") == k->n_bindings,
              "%s [%s]: kernel %d (%s): %d bindings (%d declared), over %u", what, cur_set->name, i, head, k->n_bindings,
              count_of(k->source, "@binding("), l.max_storage_buffers_per_stage);
        for (int b = 0; b < k->n_bindings; b++)
            CHECK(k->bind[b].size > 0 && (uint64_t)k->bind[b].size <= l.max_storage_buffer_binding_size &&
                      k->bind[b].offset >= 0 && k->bind[b].offset % l.min_storage_buffer_offset_alignment == 0,
                  "%s [%s]: kernel %d (%s): binding %d of arena %d at %lld, %lld bytes (limit %llu, alignment %u)", what,
                  cur_set->name, i, head, b, k->bind[b].arena, (long long)k->bind[b].offset, (long long)k->bind[b].size,
                  (unsigned long long)l.max_storage_buffer_binding_size, l.min_storage_buffer_offset_alignment);
        bad += check_fail > before;
    }
    tg_wgsl_program_free(&prog);
}

/* Checks a WebGPU compile's status; true when it compiled (and then its program). */
static bool compiled(const char *what, tg_status st, tg_session *s) {
    if (st == TG_ERR_LIMIT) {
        CHECK(names_a_shrunk_limit(tg_last_error()), "%s [%s]: TG_ERR_LIMIT names no limit the set shrank: %s", what,
              cur_set->name, tg_last_error());
        if (verbose) printf("    %-40s %-28s limit: %s\n", what, cur_set->name, tg_last_error());
        return false;
    }
    CHECK(st == TG_OK, "%s [%s]: compile -> %s: %s", what, cur_set->name, tg_status_name(st), tg_last_error());
    if (st != TG_OK || !s) return false;
    check_program(what, s);
    return true;
}

static int n_ok, n_limit, n_compared;

/* ---- the op table ---- */

static bool run_compare = true; /* the step on lavapipe and the comparison with the CPU's */

static tg_status step_of(case_run *r, float *loss) {
    for (int i = 0; i < r->c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        tg_status st = tg_session_set_param(r->s, name, r->x[i], r->nx[i]);
        if (st != TG_OK) return st;
    }
    return tg_session_step(r->s, NULL, 0, loss);
}

static void test_op_table(void) {
    for (int ci = 0; ci < N_OP_CASES; ci++) {
        const op_case *c = &op_cases[ci];
        uint64_t seed = 101 + (uint64_t)ci;
        case_run rc;
        float lc = NAN;
        tg_status sc = case_open(&rc, c, TG_BACKEND_CPU, seed);
        if (sc == TG_OK && run_compare) sc = step_of(&rc, &lc);
        CHECK(sc == TG_OK, "%s: cpu: %s", c->name, tg_last_error());
        for (int si = 0; si < N_SETS && sc == TG_OK; si++) {
            cur_set = &sets[si];
            cur = limits_of(cur_set);
            case_run rg;
            tg_wgpu_test_override_limits(&cur);
            tg_status sg = case_open(&rg, c, TG_BACKEND_WEBGPU, seed);
            tg_wgpu_test_override_limits(NULL);
            if (compiled(c->name, sg, rg.s)) {
                n_ok++;
                if (run_compare) {
                    float lg = NAN;
                    tg_status st = step_of(&rg, &lg);
                    CHECK(st == TG_OK, "%s [%s]: step: %s", c->name, cur_set->name, tg_last_error());
                    if (st == TG_OK) {
                        CHECK(fabsf(lg - lc) <= 1e-4f * fmaxf(1.0f, fabsf(lc)), "%s [%s]: loss %.9g on webgpu, %.9g on cpu",
                              c->name, cur_set->name, lg, lc);
                        char what[160];
                        snprintf(what, sizeof what, "%s [%s]", c->name, cur_set->name);
                        par_compare(what, rg.s, rc.s, "x", c->shape, c->no_grad ? 0 : c->n, 1e-4, false);
                        n_compared++;
                    }
                }
            } else if (sg == TG_ERR_LIMIT) {
                n_limit++;
            }
            case_close(&rg);
        }
        case_close(&rc);
    }
}

/* ---- larger ops: grids of many workgroups, long rows, split sums, big bindings ---- */

static tg_tensor b_add6(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    /* one elementwise chain over three params and a constant: a kernel of 5 bindings when fused */
    static float k[5] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f};
    tg_tensor a = tg_add(tg_mul(p[0], p[1]), tg_tanh(p[2]));
    return tg_sub(tg_mul(a, tg_constant(g, S(5, 1), k)), tg_sigmoid(tg_add(p[0], p[2])));
}
static tg_tensor b_sum_first(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum(p[0], 0, false); }
static tg_tensor b_sum_all(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_sum(p[0], TG_ALL, false); }
static tg_tensor b_ln(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_layer_norm(p[0], p[1], p[2], 1e-5f); }
static tg_tensor b_sm_last(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_softmax(p[0], -1); }
static tg_tensor b_sm_mid(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_softmax(p[0], 1); }
static tg_tensor b_xent(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_cross_entropy(p[0], i[0], TG_REDUCTION_MEAN);
}
static tg_tensor b_emb(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_embedding(p[0], i[0]); }
static tg_tensor b_conv(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_conv2d(p[0], p[1], 1, 1, 2); }
static tg_tensor b_pool(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_max_pool2d(p[0], 3, 2, 1); }
static tg_tensor b_mm(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_matmul(p[0], p[1]); }
static tg_tensor b_linear(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_gelu(tg_add(tg_matmul(p[0], p[1]), p[2]));
}
static tg_tensor b_attn(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    tg_tensor s = tg_mul_s(tg_matmul_t(p[0], p[1], false, true), 0.25f);
    return tg_matmul(tg_softmax_causal(s), p[2]);
}
static tg_tensor b_permute(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_permute(p[0], S(2, 0, 1)); }
static tg_tensor b_concat(tg_graph *g, const tg_tensor *p, const tg_tensor *i) {
    return tg_concat(((tg_tensor[]){p[0], p[1], p[0], p[1], p[0]}), 5, 1);
}

static const par_case big_cases[] = {
    {"elementwise chain, 70000 elements", PRM(S(5, 14000), S(5, 14000), S(5, 14000)), P_NONE, 0, 1, b_add6, 1e-5f},
    {"sum first axis, 4100 x 40", PRM(S(4100, 40)), P_NONE, 0, 1, b_sum_first, 1e-4f},
    {"sum all, 300 x 301", PRM(S(300, 301)), P_NONE, 0, 1, b_sum_all, 1e-4f},
    /* 19 chunks of one column group: on 16 workgroups a dimension a 10 x 2 grid, one workgroup spare */
    {"layer_norm, 4864 x 8 (sums in 19 chunks)", PRM(S(4864, 8), S(8), S(8)), P_NONE, 0, 1, b_ln, 1e-4f},
    {"sum first axis, 4864 x 8 (19 chunks)", PRM(S(4864, 8)), P_NONE, 0, 1, b_sum_first, 1e-4f},
    {"layer_norm, 64 x 1000", PRM(S(64, 1000), S(1000), S(1000)), P_NONE, 0, 1, b_ln, 1e-4f},
    {"softmax last, 40 x 385", PRM(S(40, 385)), P_NONE, 0, 1, b_sm_last, 1e-4f},
    {"softmax middle, 3 x 300 x 70", PRM(S(3, 300, 70)), P_NONE, 0, 1, b_sm_mid, 1e-4f},
    {"cross_entropy, 300 x 50", PRM(S(300, 50)), {S(300), P_END}, -1, 50, b_xent, 1e-4f},
    {"embedding gradient, 65 x 40 over 43 x 97", PRM(S(65, 40)), {S(43, 97), P_END}, -2, 67, b_emb, 1e-5f},
    {"conv2d groups 2, 4 x 8 x 12 x 12", PRM(S(4, 8, 12, 12), S(6, 4, 3, 3)), P_NONE, 0, 1, b_conv, 1e-4f},
    {"max_pool2d 3x3 s2, 4 x 8 x 31 x 33", PRM(S(4, 8, 31, 33)), P_NONE, 0, 1, b_pool, 1e-5f},
    {"matmul 130 x 200 x 70", PRM(S(130, 200), S(200, 70)), P_NONE, 0, 1, b_mm, 1e-4f},
    {"linear 300 x 64 -> 96", PRM(S(300, 64), S(64, 96), S(96)), P_NONE, 0, 1, b_linear, 1e-4f},
    {"causal attention 2 x 2 x 64 x 16", PRM(S(2, 2, 64, 16), S(2, 2, 64, 16), S(2, 2, 64, 16)), P_NONE, 0, 1, b_attn,
     2e-4f},
    {"permute, 40 x 50 x 60", PRM(S(40, 50, 60)), P_NONE, 0, 1, b_permute, 1e-5f},
    {"concat of 5, 200 x 30 and 200 x 50", PRM(S(200, 30), S(200, 50)), P_NONE, 0, 1, b_concat, 1e-5f},
};

/* Sums over 16384 rows kept in one kernel (no split into chunks): the
 * tall form, workgroups of 1024 with a layer norm's two sums side by side. */
static const par_case tall_cases[] = {
    {"layer_norm gain and bias sums, 16384 x 8, one kernel", PRM(S(16384, 8), S(8), S(8)), P_NONE, 0, 1, b_ln, 1e-4f},
    {"sum first axis, 16384 x 8, one kernel", PRM(S(16384, 8)), P_NONE, 0, 1, b_sum_first, 1e-4f},
};

/* The fused norm backward (the default form): norm_dx's kernel
 * summing the gain's (and bias's) gradients over chunks of rows. */
static tg_tensor b_rms(tg_graph *g, const tg_tensor *p, const tg_tensor *i) { return tg_rms_norm(p[0], p[1], 1e-6f); }
static const par_case norm_bwd_cases[] = {
    {"layer_norm, 4100 x 100, fused backward", PRM(S(4100, 100), S(100), S(100)), P_NONE, 0, 1, b_ln, 1e-4f},
    {"rms_norm, 300 x 37, fused backward", PRM(S(300, 37), S(37)), P_NONE, 0, 1, b_rms, 1e-4f},
};

static void test_big_ops(const par_case *cases, int n) {
    for (int ci = 0; ci < n; ci++) {
        const par_case *c = &cases[ci];
        par_user u = {c, NULL, 0, {NULL, NULL}};
        par_make_ints(c, &u);
        int np = 0;
        while (np < PAR_MAX && c->params[np].ndim >= 0) np++;
        par_run cpu;
        tg_status sc = par_open(c, &u, TG_BACKEND_CPU, &cpu);
        CHECK(sc == TG_OK, "%s: cpu: %s", c->name, tg_last_error());
        for (int si = 0; si < N_SETS && sc == TG_OK; si++) {
            cur_set = &sets[si];
            cur = limits_of(cur_set);
            par_run gpu;
            tg_wgpu_test_override_limits(&cur);
            tg_status sg = par_open(c, &u, TG_BACKEND_WEBGPU, &gpu); /* compile, then a step */
            tg_wgpu_test_override_limits(NULL);
            if (compiled(c->name, gpu.s ? TG_OK : sg, gpu.s)) {
                n_ok++;
                CHECK(sg == TG_OK, "%s [%s]: step: %s", c->name, cur_set->name, tg_last_error());
                if (sg == TG_OK) {
                    char what[160];
                    snprintf(what, sizeof what, "%s [%s]", c->name, cur_set->name);
                    par_compare(what, gpu.s, cpu.s, "p", c->params, np, c->tol > 0 ? c->tol : 1e-5, false);
                    n_compared++;
                }
            } else if (sg == TG_ERR_LIMIT) {
                n_limit++;
            }
            par_close(&gpu);
        }
        par_close(&cpu);
        par_user_free(&u);
    }
}

/* ---- whole models: a few training steps, losses and one param ---- */

typedef struct {
    float loss[4];
    float *w; /* the param named by the model, after the steps */
    int64_t nw;
} model_out;

#define STEPS 3

/* Opens a session of spec on backend be under the set in force (WebGPU),
 * checks the compile; NULL when it did not compile. */
static tg_session *model_open(const char *what, tg_train_spec *spec, tg_backend be, tg_status *st) {
    spec->backend = be;
    tg_session *s = NULL;
    if (be == TG_BACKEND_WEBGPU) tg_wgpu_test_override_limits(&cur);
    *st = tg_session_new(spec, &s);
    if (be == TG_BACKEND_WEBGPU) tg_wgpu_test_override_limits(NULL);
    if (be == TG_BACKEND_CPU) {
        CHECK(*st == TG_OK, "%s: cpu: %s", what, tg_last_error());
        return s;
    }
    if (!compiled(what, *st, s)) {
        tg_session_free(s);
        return NULL;
    }
    return s;
}

static void model_steps(const char *what, tg_session *s, tg_feed *f, int nf, const char *param, model_out *o) {
    tg_status st = TG_OK;
    for (int i = 0; i < STEPS && st == TG_OK; i++) st = tg_session_step(s, f, nf, &o->loss[i]);
    if (st == TG_OK) st = tg_session_get_param(s, param, o->w, o->nw);
    CHECK(st == TG_OK, "%s [%s]: %s", what, cur_set ? cur_set->name : "cpu", tg_last_error());
}

static void model_compare(const char *what, const model_out *g, const model_out *c, double tol) {
    double worst = 0;
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs((double)g->loss[i] - c->loss[i]) / fmax(1.0, fabs(c->loss[i])));
    CHECK(worst <= tol, "%s [%s]: losses differ by %.3g (%.8g vs %.8g at the last step)", what, cur_set->name, worst,
          g->loss[STEPS - 1], c->loss[STEPS - 1]);
    double we = par_err(g->w, c->w, g->nw);
    CHECK(we <= tol, "%s [%s]: the param after %d steps differs by %.3g", what, cur_set->name, STEPS, we);
    n_compared++;
}

/* Runs model m (built by build(), trained with feeds f) on the CPU, then
 * under every set on WebGPU. */
typedef struct {
    const char *name, *param;
    tg_train_spec spec;
    tg_feed *f;
    int nf;
    int64_t nw;
    double tol;
} model_case;

static void run_model(model_case *mc, const lim_set *list, int n_list) {
    model_out cpu = {{0}, calloc((size_t)mc->nw, 4), mc->nw}, gpu = {{0}, calloc((size_t)mc->nw, 4), mc->nw};
    tg_status st;
    cur_set = NULL;
    tg_session *s = model_open(mc->name, &mc->spec, TG_BACKEND_CPU, &st);
    if (s) model_steps(mc->name, s, mc->f, mc->nf, mc->param, &cpu);
    tg_session_free(s);
    for (int si = 0; si < n_list && st == TG_OK; si++) {
        cur_set = &list[si];
        cur = limits_of(cur_set);
        tg_status sg;
        tg_session *sw = model_open(mc->name, &mc->spec, TG_BACKEND_WEBGPU, &sg);
        if (sw) {
            n_ok++;
            int before = check_fail;
            model_steps(mc->name, sw, mc->f, mc->nf, mc->param, &gpu);
            if (check_fail == before) model_compare(mc->name, &gpu, &cpu, mc->tol);
        } else if (sg == TG_ERR_LIMIT) {
            n_limit++;
        }
        tg_session_free(sw);
    }
    free(cpu.w);
    free(gpu.w);
}

static float fill(uint64_t *r) {
    *r = *r * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*r >> 40) / 16777216.0 * 2.0 - 1.0);
}

/* the sin MLP of examples/sin.c (examples/sin.h), Adam */
static void test_sin_mlp(void) {
    tg_model *m = tg_model_new();
    sin_net net = sin_net_new(m, 64);
    static float xs[SIN_B], ys[SIN_B];
    for (int i = 0; i < SIN_B; i++) xs[i] = -3.0f + 6.0f * (float)i / SIN_B, ys[i] = sinf(xs[i]);
    tg_input_decl in[] = {{"x", TG_F32, S(SIN_B, 1)}, {"y", TG_F32, S(SIN_B, 1)}};
    tg_feed f[] = {TG_FEED("x", xs, SIN_B), TG_FEED("y", ys, SIN_B)};
    model_case mc = {"sin MLP, Adam", "l2.W",
                     {.model = m, .loss = sin_loss, .user = &net, .inputs = in, .n_inputs = 2,
                      .optim = tg_adam(tg_lr_constant(5e-3f)), .seed = 3, .threads = 2},
                     f, 2, 64 * 64, 1e-4};
    run_model(&mc, sets, N_SETS);
    tg_model_free(m);
}

/* a GPT block: embeddings, layer norms, causal attention (fused), MLP, tied logits; AdamW with clipping */
static gpt_model gnet;
static tg_tensor gpt_loss(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &gnet, tg_input(g, "tokens"), false);
    return tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_MEAN);
}

static void test_gpt(void) {
    enum { V = 17, D = 32, L = 1, H = 2, T = 64, B = 2 };
    tg_model *m = tg_model_new();
    gpt_declare(&gnet, m, (gpt_config){V, D, L, H, T});
    tg_input_decl in[] = {{"tokens", TG_I32, S(B, T)}, {"targets", TG_I32, S(B, T)}};
    static int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 5 + 1) % V, tgt[i] = (i * 7 + 3) % V;
    tg_feed f[] = {TG_FEED("tokens", tok, B * T), TG_FEED("targets", tgt, B * T)};
    tg_optim o = tg_adamw(tg_lr_constant(1e-3f), 0.01f);
    o.clip_grad_norm = 1.0f;
    model_case mc = {"transformer block (T 64, D 32, 2 heads)", "layers.0.attn.q.W",
                     {.model = m, .loss = gpt_loss, .inputs = in, .n_inputs = 2, .optim = o, .seed = 3, .threads = 2},
                     f, 2, D * D, 2e-4};
    run_model(&mc, sets, N_SETS);
    tg_model_free(m);
}

/* a conv net: conv, relu, pool, strided conv with bias, relu, linear, cross-entropy; SGD with momentum */
static tg_param cw1, cw2, cb2, lw, lb;
static tg_tensor conv_loss(tg_graph *g, void *user) {
    (void)user;
    tg_tensor h = tg_max_pool2d(tg_relu(tg_conv2d(tg_input(g, "x"), tg_use(g, cw1), 1, 1, 1)), 2, 0, 0); /* [4,8,6,6] */
    h = tg_relu(tg_conv2d_bias(h, tg_use(g, cw2), tg_use(g, cb2), 2, 2, 1, 1, 1));                      /* [4,16,3,3] */
    tg_tensor logits = tg_add(tg_matmul(tg_reshape(h, S(4, 144)), tg_use(g, lw)), tg_use(g, lb));
    return tg_cross_entropy(logits, tg_input(g, "y"), TG_REDUCTION_MEAN);
}

static void test_conv_net(void) {
    tg_model *m = tg_model_new();
    cw1 = tg_model_param(m, "c1", S(8, 3, 3, 3), tg_init_randn(0.3f));
    cw2 = tg_model_param(m, "c2", S(16, 8, 3, 3), tg_init_randn(0.2f));
    cb2 = tg_model_param(m, "c2b", S(16), tg_init_zeros());
    lw = tg_model_param(m, "fc", S(144, 10), tg_init_randn(0.1f));
    lb = tg_model_param(m, "fcb", S(10), tg_init_zeros());
    static float x[4 * 3 * 12 * 12];
    static int32_t y[4] = {3, 7, 0, 9};
    uint64_t r = 99;
    for (int i = 0; i < 4 * 3 * 12 * 12; i++) x[i] = fill(&r);
    tg_input_decl in[] = {{"x", TG_F32, S(4, 3, 12, 12)}, {"y", TG_I32, S(4)}};
    tg_feed f[] = {TG_FEED("x", x, 4 * 3 * 12 * 12), TG_FEED("y", y, 4)};
    model_case mc = {"conv net", "c2",
                     {.model = m, .loss = conv_loss, .inputs = in, .n_inputs = 2,
                      .optim = tg_sgd(tg_lr_constant(5e-2f), 0.9f, false, 0.0f), .seed = 3, .threads = 2},
                     f, 2, 16 * 8 * 3 * 3, 1e-4};
    run_model(&mc, sets, N_SETS);
    tg_model_free(m);
}

/* a linear layer over 4096 rows: its weight gradient X^T dY (K = 4096) is split over K-ranges, its bias sum beside it */
#define SK_R 4096
static tg_param skw, skb;
static tg_tensor splitk_loss(tg_graph *g, void *user) {
    (void)user;
    tg_tensor y = tg_add(tg_matmul(tg_input(g, "x"), tg_use(g, skw)), tg_use(g, skb));
    return tg_mse(tg_tanh(y), tg_input(g, "t"));
}

static void test_splitk(void) {
    tg_model *m = tg_model_new();
    skw = tg_model_param(m, "W", S(16, 32), tg_init_randn(0.3f));
    skb = tg_model_param(m, "b", S(32), tg_init_zeros());
    static float x[SK_R * 16], t[SK_R * 32];
    uint64_t r = 7;
    for (int i = 0; i < SK_R * 16; i++) x[i] = fill(&r);
    for (int i = 0; i < SK_R * 32; i++) t[i] = 0.5f * fill(&r);
    tg_input_decl in[] = {{"x", TG_F32, S(SK_R, 16)}, {"t", TG_F32, S(SK_R, 32)}};
    tg_feed f[] = {TG_FEED("x", x, SK_R * 16), TG_FEED("t", t, SK_R * 32)};
    model_case mc = {"split-K weight gradient (4096 rows)", "W",
                     {.model = m, .loss = splitk_loss, .inputs = in, .n_inputs = 2,
                      .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 3, .threads = 2},
                     f, 2, 16 * 32, 1e-4};
    run_model(&mc, sets, N_SETS);
    tg_model_free(m);
}

static void lap(const char *what) {
    static struct timespec t;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (t.tv_sec && verbose) printf("  %s: %.1f s\n", what, (double)(now.tv_sec - t.tv_sec) + 1e-9 * (double)(now.tv_nsec - t.tv_nsec));
    t = now;
}

/* Many small params under a clipped norm: one sum of squares per param,
 * the totals combined in one kernel through a workgroup array of one f32
 * per param. 150 params (600 bytes) against 512 bytes of workgroup memory
 * stand for a model of over 4096 params on a device of 16 KiB: compiling
 * 4096 params takes minutes on lavapipe. */
#define MANY 150
static tg_param many[MANY];
static tg_tensor many_loss(tg_graph *g, void *user) {
    (void)user;
    tg_tensor x = tg_input(g, "x"), acc = {NULL, -1};
    for (int i = 0; i < MANY; i++) {
        tg_tensor t = tg_sum(tg_square(tg_mul(tg_use(g, many[i]), x)), TG_ALL, false);
        acc = i ? tg_add(acc, t) : t;
    }
    return acc;
}

static void test_many_params(void) {
    tg_model *m = tg_model_new();
    for (int i = 0; i < MANY; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        many[i] = tg_model_param(m, name, S(3), tg_init_randn(1.0f));
    }
    static float x[3] = {0.5f, -1.0f, 2.0f};
    tg_input_decl in[] = {{"x", TG_F32, S(3)}};
    tg_feed f[] = {TG_FEED("x", x, 3)};
    tg_optim o = tg_adam(tg_lr_constant(1e-2f));
    o.clip_grad_norm = 1.0f;
    model_case mc = {"150 params, clipped norm", "p7",
                     {.model = m, .loss = many_loss, .inputs = in, .n_inputs = 1, .optim = o, .seed = 3, .threads = 1},
                     f, 1, 3, 1e-4};
    static const lim_set small[] = {{"512 bytes of workgroup memory", 0, 0, 512, 0, 0, 0}};
    run_model(&mc, small, 1);
    tg_model_free(m);
}

int main(int argc, char **argv) {
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    (void)case_eval, (void)par_check_bits; /* the headers' helpers this suite does without */
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        check_webgpu_missing("test_webgpu_limits");
        return check_summary("test_webgpu_limits");
    }
    wgpu_ctx *c;
    CHECK_OK(tg_wgpu_ctx_get(&c));
    tg_wgpu_kernel_limits(c, &dev);
    printf("test_webgpu_limits: adapter %s (%s), %d limit sets%s\n", info.name, info.type, N_SETS,
           SANITIZED ? "; op table compiled only (sanitizers)" : "");
    if (verbose)
        printf("  the device's: %u workgroups a dimension, %u invocations, %u bytes of workgroup memory, %u storage "
               "buffers, bindings of %llu, buffers of %llu bytes, offsets aligned to %u\n",
               dev.max_workgroups_per_dimension, dev.max_invocations_per_workgroup, dev.max_workgroup_storage_size,
               dev.max_storage_buffers_per_stage, (unsigned long long)dev.max_storage_buffer_binding_size,
               (unsigned long long)dev.max_buffer_size, dev.min_storage_buffer_offset_alignment);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    lap(NULL);
    run_compare = !SANITIZED;
    test_op_table();
    lap("op table");
    run_compare = true;
    test_big_ops(big_cases, (int)(sizeof big_cases / sizeof big_cases[0]));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.colsum_chunks = TG_WGSL_OFF});
    test_big_ops(tall_cases, (int)(sizeof tall_cases / sizeof tall_cases[0]));
    tg_wgsl_force_forms(NULL);
    test_big_ops(norm_bwd_cases, (int)(sizeof norm_bwd_cases / sizeof norm_bwd_cases[0])); /* fused, as by default */
    lap("larger ops");
    test_sin_mlp();
    lap("sin MLP");
    n_attention_kernels = 0;
    test_gpt();
    CHECK(n_attention_kernels > 0, "the transformer block compiled no fused attention kernel");
    lap("transformer block");
    test_conv_net();
    lap("conv net");
    n_workspace_kernels = 0;
    test_splitk();
    CHECK(n_workspace_kernels > 0, "the split-K model compiled no kernel with a workspace (no split product)");
    lap("split-K");
    test_many_params();
    lap("many params");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("  %d compiles fit, %d refused with TG_ERR_LIMIT, %d compared with the CPU (%.1f s)\n", n_ok, n_limit,
           n_compared, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return check_summary("test_webgpu_limits");
}
