/* The fused causal attention of the WebGPU backend (src/wgsl/fused_attention.h)
 * against the CPU backend: forward output and the gradients of q, k and v
 * at T in {1, 7, 64, 257} and head sizes {8, 12, 64, 80}, with the heads
 * permutes read and written with strides and without them; that each case
 * was fused (one forward and one backward group, and no [T, T] memory) in
 * the form its sizes get (64 x 64 blocks, or rows above Dh 64 or below T 64);
 * and that a GPT's plan runs no permute kernel; the blocks' row sums by
 * subgroup shuffles where a device's subgroups have 16 lanes or more
 * (--shuffles: those alone). Needs a WebGPU device (lavapipe). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv (parity.h) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity.h"
#include "webgpu/webgpu.h"
#include "wgsl/fused_attention.h"
#include "session.h"
#include "../examples/gpt.c"

#define S TG_SHAPE
#define PRM(...) {__VA_ARGS__, P_END}

static int64_t g_heads, g_dh;

/* q, k, v [B, T, H * Dh] -> heads -> softmax_causal(q k^T / sqrt(Dh)) v -> merged [B, T, H * Dh] */
static tg_tensor b_heads(tg_graph *g, const tg_tensor *p, const tg_tensor *in) {
    (void)g, (void)in;
    tg_tensor q = tg_split_heads(p[0], g_heads), k = tg_split_heads(p[1], g_heads), v = tg_split_heads(p[2], g_heads);
    tg_tensor s = tg_mul_s(tg_matmul_t(q, k, false, true), 1.0f / sqrtf((float)g_dh));
    return tg_merge_heads(tg_matmul(tg_softmax_causal(s), v));
}

/* q, k, v [B, H, T, Dh] as they are, no scale */
static tg_tensor b_plain(tg_graph *g, const tg_tensor *p, const tg_tensor *in) {
    (void)g, (void)in;
    return tg_matmul(tg_softmax_causal(tg_matmul_t(p[0], p[1], false, true)), p[2]);
}

/* The WebGPU session of case c: its attention groups, planned bytes, and
 * how many of its kernels are the attention's in 64 x 64 blocks and how
 * many in rows (from the kernels' header comments, through TG_WEBGPU=dump=DIR). */
static void fused_info(const par_case *c, int *groups, int64_t *planned, int forms[2]) {
    par_user u = {c, NULL, 0, {NULL, NULL}};
    par_run r;
    char dir[32];
    bool dump = forms && par_dump_start(dir);
    *groups = -1, *planned = -1;
    if (par_open(c, &u, TG_BACKEND_WEBGPU, &r) == TG_OK) {
        /* the attentions are the first groups (fused_attention.h); elementwise chains may follow */
        *groups = r.s->b.prog->fusion ? ((const tg_wgsl_chosen_groups *)r.s->b.prog->fusion->impl)->n_attn : 0;
        tg_plan_stats ps;
        if (tg_session_plan_stats(r.s, &ps) == TG_OK) *planned = ps.planned_bytes;
    }
    par_close(&r);
    free(u.w);
    if (!dump) return;
    forms[0] = par_dump_count(dir, ": attention ", "(64 x 64 blocks)");
    forms[1] = par_dump_count(dir, ": attention ", NULL) - forms[0];
    par_dump_end(dir);
}

/* Every T with Dh = 8, and the large head sizes at a T each: the shader
 * compiler of a CPU adapter takes seconds per large-Dh kernel. */
static void test_parity(void) {
    /* Dh 8, 12 and 64 give the blocks' score chunks of 2, 1, 4 and 8 vec4s a row (their bank rotations) */
    static const int64_t cfg[][3] = {{1, 8, 3}, {7, 8, 3}, {64, 8, 3}, {257, 8, 3}, {64, 64, 1}, {64, 12, 2}, {7, 80, 1}, {257, 80, 2}};
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        int64_t T = cfg[ci][0], Dh = cfg[ci][1], B = T > 64 ? 1 : 2, H = 2;
        g_heads = H, g_dh = Dh;
        char name[2][96];
        snprintf(name[0], sizeof name[0], "attention heads B=%lld T=%lld H=%lld Dh=%lld", (long long)B, (long long)T,
                 (long long)H, (long long)Dh);
        snprintf(name[1], sizeof name[1], "attention plain B=%lld T=%lld H=%lld Dh=%lld", (long long)B, (long long)T,
                 (long long)H, (long long)Dh);
        par_case cs[2] = {
            {name[0], PRM(S(B, T, H * Dh), S(B, T, H * Dh), S(B, T, H * Dh)), P_NONE, 0, 1, b_heads, 2e-4f},
            {name[1], PRM(S(B, H, T, Dh), S(B, H, T, Dh), S(B, H, T, Dh)), P_NONE, 0, 1, b_plain, 2e-4f},
        };
        for (int v = 0; v < 2; v++) {
            if (!(cfg[ci][2] & (1 << v))) continue;
            par_check(&cs[v], false);
            int groups, g0, forms[2];
            int64_t planned, unfused;
            fused_info(&cs[v], &groups, &planned, forms);
            /* 64 x 64 blocks up to Dh 64 (they need 32 KiB of workgroup memory: lavapipe's) from T 64, rows else */
            bool tiles = Dh <= 64 && T >= 64;
            CHECK(forms[tiles ? 0 : 1] == 3 && forms[tiles ? 1 : 0] == 0, "%s: %d kernels in blocks, %d in rows; want 3 %s",
                  cs[v].name, forms[0], forms[1], tiles ? "in blocks" : "in rows");
            tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
            fused_info(&cs[v], &g0, &unfused, NULL);
            tg_wgsl_force_forms(NULL);
            CHECK(groups == 2, "%s: %d attention groups, want 2 (forward and backward)", cs[v].name, groups);
            /* the scores and softmax [B, H, T, T] and their gradients have no memory */
            CHECK(T < 8 || unfused - planned >= B * H * T * T * 4, "%s: planned %lld bytes, unfused %lld", cs[v].name,
                  (long long)planned, (long long)unfused);
        }
    }
}

/* Odd head sizes are left to the separate kernels (the stated rule), and
 * still agree. */
static void test_unfused_rule(void) {
    g_heads = 2, g_dh = 6;
    par_case c = {"attention Dh=6 (not fused)", PRM(S(2, 2, 9, 6), S(2, 2, 9, 6), S(2, 2, 9, 6)), P_NONE, 0, 1, b_plain, 2e-4f};
    par_check(&c, false);
    int groups;
    int64_t planned;
    fused_info(&c, &groups, &planned, NULL);
    CHECK(groups == 0, "Dh=6: %d attention groups, want none", groups);
}

/* A 2-layer GPT (the structure of gpt_small, small sizes): its training step
 * has no permute kernel (every split_heads and merge_heads, forward and
 * backward, is read or written with strides), and runs. */
static gpt_model gnet;
static tg_tensor gpt_loss(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &gnet, tg_input(g, "tokens"), false);
    return tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_MEAN);
}

static void test_gpt_plan(void) {
    enum { V = 17, D = 64, L = 2, H = 4, T = 32, B = 4 };
    tg_model *m = tg_model_new();
    gpt_declare(&gnet, m, (gpt_config){V, D, L, H, T});
    tg_input_decl in[] = {{"tokens", TG_I32, S(B, T)}, {"targets", TG_I32, S(B, T)}};
    tg_train_spec spec = {.model = m, .loss = gpt_loss, .inputs = in, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_constant(1e-3f), 0.01f), .seed = 3, .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (s) {
        tg_webgpu_adapter_info info;
        CHECK_OK(tg_webgpu_info(&info));
        tg_wgsl_limits l = {info.max_storage_buffer_binding_size, info.max_buffer_size,
                            info.max_storage_buffers_per_shader_stage, info.max_compute_workgroup_storage_size,
                            info.max_compute_invocations_per_workgroup, info.max_compute_workgroups_per_dimension,
                            info.min_storage_buffer_offset_alignment, false, false, 0, 0, false, -1};
        tg_wgsl_program prog;
        CHECK_OK(tg_wgsl_emit_program(s->b.prog->g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, &l, &prog));
        int permutes = 0, attn = 0;
        for (int i = 0; i < prog.n; i++) {
            const char *src = prog.k[i].source;
            if (!src) continue;
            char first[128];
            snprintf(first, sizeof first, "%.*s", (int)strcspn(src, "\n"), src);
            permutes += strstr(first, "permute") != NULL;
            attn += strstr(first, "attention") != NULL;
        }
        CHECK(permutes == 0, "gpt: %d permute kernels per step, want none", permutes);
        CHECK(attn == 3 * L, "gpt: %d attention kernels, want %d (one forward, two backward per layer)", attn, 3 * L);
        tg_wgsl_program_free(&prog);
        /* The tiled forward loads V at its stage, after the scores'
         * exponentials: held in registers through the score loop, the rows
         * cost every invocation 16 live floats there (slower on an H100). */
        tg_wgsl_force_forms(&(tg_wgsl_forms){.attention = TG_WGSL_ATTN_TILES});
        CHECK_OK(tg_wgsl_emit_program(s->b.prog->g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, &l, &prog));
        tg_wgsl_force_forms(NULL);
        int fwd = 0;
        for (int i = 0; i < prog.n; i++) {
            const char *src = prog.k[i].source;
            if (!src || !strstr(src, "attention forward") || !strstr(src, "64 x 64 blocks")) continue;
            const char *v = strstr(src, "bV(iV("), *e = strstr(src, "exp(");
            fwd++;
            CHECK(v && e && v > e, "gpt: tiled forward kernel %d loads V before the scores' exponentials", i);
        }
        CHECK(fwd == L, "gpt: %d tiled forward kernels, want %d", fwd, L);
        tg_wgsl_program_free(&prog);
        /* one step, which also waits for the device: lavapipe's queue thread
         * would otherwise still be compiling the constants' kernels at exit */
        static int32_t tok[B * T], tgt[B * T];
        for (int i = 0; i < B * T; i++) tok[i] = i % V, tgt[i] = (i * 7 + 3) % V;
        float loss = NAN;
        CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("tokens", tok, B * T), TG_FEED("targets", tgt, B * T)}, 2, &loss));
        CHECK(fabsf(loss - logf((float)V)) < 0.5f, "gpt: first loss %g, want about log(%d)", loss, V);
    }
    tg_session_free(s);
    tg_model_free(m);
}

/* The row form unrolled (what a GPU gets above head size 64; lavapipe gets
 * loops) at small head sizes, which lavapipe's compiler builds quickly. */
static void test_unrolled(void) {
    tg_wgsl_force_forms(&(tg_wgsl_forms){.attention = TG_WGSL_ATTN_ROWS});
    static const int64_t Ts[] = {7, 64}, Dhs[] = {8, 16};
    for (int ti = 0; ti < 2; ti++)
        for (int di = 0; di < 2; di++) {
            int64_t T = Ts[ti], Dh = Dhs[di];
            g_heads = 2, g_dh = Dh;
            char name[96];
            snprintf(name, sizeof name, "attention heads, unrolled, T=%lld Dh=%lld", (long long)T, (long long)Dh);
            par_case c = {name, PRM(S(2, T, 2 * Dh), S(2, T, 2 * Dh), S(2, T, 2 * Dh)), P_NONE, 0, 1, b_heads, 2e-4f};
            par_check(&c, false);
        }
    /* the blocks below T 64 (rows by default there): every row and key masked but a few */
    tg_wgsl_force_forms(&(tg_wgsl_forms){.attention = TG_WGSL_ATTN_TILES});
    for (int T = 1; T <= 7; T += 6) {
        g_heads = 2, g_dh = 8;
        char name[96];
        snprintf(name, sizeof name, "attention heads, blocks, T=%d Dh=8", T);
        par_case c = {name, PRM(S(2, T, 16), S(2, T, 16), S(2, T, 16)), P_NONE, 0, 1, b_heads, 2e-4f};
        int groups, forms[2];
        int64_t planned;
        fused_info(&c, &groups, &planned, forms);
        CHECK(forms[0] == 3 && forms[1] == 0, "%s: %d kernels in blocks, %d in rows; want 3 in blocks", name, forms[0], forms[1]);
        par_check(&c, false);
    }
    tg_wgsl_force_forms(NULL);
}

/* q, k, v [B, H, T, Dh] as they are, v or k without a gradient: the dk/dv
 * kernel then makes only dk or only dv besides dq. */
static tg_tensor b_no_dv(tg_graph *g, const tg_tensor *p, const tg_tensor *in) {
    (void)g, (void)in;
    return tg_matmul(tg_softmax_causal(tg_matmul_t(p[0], p[1], false, true)), tg_stop_gradient(p[2]));
}
static tg_tensor b_no_dk(tg_graph *g, const tg_tensor *p, const tg_tensor *in) {
    (void)g, (void)in;
    return tg_matmul(tg_softmax_causal(tg_matmul_t(p[0], tg_stop_gradient(p[1]), false, true)), p[2]);
}

/* The 64 x 64 blocks with each kernel's workgroup memory filled with NaN
 * bits before it starts (tg_wgsl_forms.poison; the device does not zero
 * it): its kernels are the ones run, and the gradients agree, at T 7 (one
 * block, rows and keys masked), 64 and 257 (a partial last block), with
 * score chunks of 2, 1, 4 and 16 vec4s (Dh 8, 12, 16, 64), strided and
 * plain, and with only dk or only dv wanted besides dq. */
static void test_blocks_poisoned(void) {
    enum { HEADS, PLAIN, NO_DV, NO_DK };
    static const char *const kind[] = {"heads", "plain", "plain, no dv", "plain, no dk"};
    tg_tensor (*const build[])(tg_graph *, const tg_tensor *, const tg_tensor *) = {b_heads, b_plain, b_no_dv, b_no_dk};
    static const int64_t cfg[][3] = {{7, 8, HEADS},   {64, 12, PLAIN}, {257, 8, HEADS}, {64, 16, HEADS},
                                     {64, 64, HEADS}, {64, 8, NO_DV},  {64, 8, NO_DK}}; /* T, Dh, kind */
    tg_wgsl_force_forms(&(tg_wgsl_forms){.attention = TG_WGSL_ATTN_TILES, .poison = true});
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        int64_t T = cfg[ci][0], Dh = cfg[ci][1], B = T > 64 ? 1 : 2, H = 2, kd = cfg[ci][2];
        g_heads = H, g_dh = Dh;
        char name[96];
        snprintf(name, sizeof name, "attention %s, T=%lld Dh=%lld", kind[kd], (long long)T, (long long)Dh);
        par_case c = kd == HEADS
                         ? (par_case){name, PRM(S(B, T, H * Dh), S(B, T, H * Dh), S(B, T, H * Dh)), P_NONE, 0, 1, b_heads, 2e-4f}
                         : (par_case){name, PRM(S(B, H, T, Dh), S(B, H, T, Dh), S(B, H, T, Dh)), P_NONE, 0, 1, build[kd], 2e-4f};
        char dir[32];
        int n_poison = -1;
        if (par_dump_start(dir)) {
            int groups;
            int64_t planned;
            fused_info(&c, &groups, &planned, NULL);
            n_poison = par_dump_count(dir, "0x7fc0deadu", NULL);
            par_dump_end(dir);
        }
        CHECK(n_poison >= 3, "%s: %d kernels fill their workgroup memory with NaN first, want the attention's 3", name, n_poison);
        par_check(&c, false);
    }
    tg_wgsl_force_forms(NULL);
}

/* Where a row's 16 invocations share a subgroup (subgroups of 16 or more:
 * a GPU's, or lavapipe's under LP_NATIVE_VECTOR_WIDTH=512, which
 * tests/run.sh runs `test_webgpu_attention --shuffles` under), the blocks'
 * row max and sums go by subgroup shuffles: the forward and dq kernels
 * call them, agree with the CPU, and give the same bits as through
 * workgroup memory (tg_wgsl_forms.attention_shuffles off), at T 7 (one block, masked
 * rows), 64 and 257, Dh 8, 12 and 64, strided and plain. */
static void test_shuffles(const tg_webgpu_adapter_info *info, bool required) {
    if (info->subgroup_min_size < 16) {
        /* Under CI the adapter is the lavapipe .ci/run installs, which takes the width. */
        const char *ci = getenv("CI");
        CHECK(!required || strcmp(info->type, "CPU") != 0 || !ci || strcmp(ci, "true") != 0,
              "--shuffles: the CPU adapter has subgroups of %u, not 16 (LP_NATIVE_VECTOR_WIDTH=512 not taken?)",
              info->subgroup_min_size);
        printf("test_webgpu_attention: shuffles skipped (subgroups of %u < 16)\n", info->subgroup_min_size);
        return;
    }
    static const int64_t cfg[][3] = {{7, 8, 0}, {64, 64, 0}, {257, 8, 0}, {64, 12, 1}}; /* T, Dh, plain */
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        int64_t T = cfg[ci][0], Dh = cfg[ci][1], B = T > 64 ? 1 : 2, H = 2;
        g_heads = H, g_dh = Dh;
        char name[96];
        snprintf(name, sizeof name, "attention %s by shuffles, T=%lld Dh=%lld", cfg[ci][2] ? "plain" : "heads",
                 (long long)T, (long long)Dh);
        par_case c = cfg[ci][2] ? (par_case){name, PRM(S(B, H, T, Dh), S(B, H, T, Dh), S(B, H, T, Dh)), P_NONE, 0, 1, b_plain, 2e-4f}
                                : (par_case){name, PRM(S(B, T, H * Dh), S(B, T, H * Dh), S(B, T, H * Dh)), P_NONE, 0, 1, b_heads, 2e-4f};
        size_t n[2];
        int calls[2];
        tg_wgsl_force_forms(&(tg_wgsl_forms){.attention = TG_WGSL_ATTN_TILES, .attention_shuffles = TG_WGSL_OFF});
        unsigned char *off = par_check_bits(&c, "subgroupShuffleXor", &n[0], &calls[0]);
        tg_wgsl_force_forms(&(tg_wgsl_forms){.attention = TG_WGSL_ATTN_TILES});
        unsigned char *on = par_check_bits(&c, "subgroupShuffleXor", &n[1], &calls[1]);
        /* 16 shuffles per row reduction: the forward's max and l, dq's D */
        CHECK(calls[0] == 0 && calls[1] == 48, "%s: %d and %d lines shuffle (workgroup memory, shuffles); want 0 and 48",
              name, calls[0], calls[1]);
        CHECK(n[0] > 0 && n[0] == n[1] && off && on && memcmp(off, on, n[0]) == 0,
              "%s: shuffles and workgroup memory give different bits (%zu and %zu bytes)", name, n[0], n[1]);
        free(off), free(on);
    }
    tg_wgsl_force_forms(NULL);
}

int main(int argc, char **argv) {
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        check_webgpu_missing("test_webgpu_attention");
        return check_summary("test_webgpu_attention");
    }
    if (argc > 1 && strcmp(argv[1], "--shuffles") == 0) { /* tests/run.sh: under LP_NATIVE_VECTOR_WIDTH=512 */
        test_shuffles(&info, true);
        return check_summary("test_webgpu_attention");
    }
    test_shuffles(&info, false);
    test_parity();
    test_unrolled();
    test_blocks_poisoned();
    test_unfused_rule();
    test_gpt_plan();
    return check_summary("test_webgpu_attention");
}
