/* The WebGPU backend's fused kernels (src/wgsl/program.c): how many dispatches
 * a step of the sin MLP and of the addition transformer takes (a fusion that
 * stops happening fails here), training with fusion against training
 * without it, and the many-param groups cut into several dispatches when
 * the storage binding limit is small. Needs a WebGPU device (lavapipe). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "webgpu/webgpu.h"
#include "wgsl/fused_attention.h"
#include "session.h"
#include "../examples/sin.h"
#include "../examples/gpt.c"

#define S TG_SHAPE

/* ---- the sin MLP (examples/sin.h) at width W: 1-W-W-1, MSE on sin ---- */

typedef struct {
    int dispatches;
    int64_t scratch; /* planned intermediates */
    float loss[40];
    float w[256 * 256];
} mlp_result;

static tg_status mlp_train(int width, tg_optim o, int steps, mlp_result *r) {
    tg_model *m = tg_model_new();
    sin_net net = sin_net_new(m, width);
    tg_input_decl in[] = {{"x", TG_F32, S(SIN_B, 1)}, {"y", TG_F32, S(SIN_B, 1)}};
    tg_train_spec spec = {.model = m, .loss = sin_loss, .user = &net, .inputs = in, .n_inputs = 2, .optim = o,
                          .seed = 3, .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_plan_stats ps = {0};
    if (st == TG_OK) st = tg_session_plan_stats(s, &ps);
    r->dispatches = ps.n_dispatches;
    r->scratch = ps.scratch_bytes;
    static float xs[SIN_B], ys[SIN_B];
    uint64_t rng = 12345;
    for (int step = 0; step < steps && st == TG_OK; step++) {
        for (int i = 0; i < SIN_B; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            xs[i] = (float)(((double)(rng >> 40) / 16777216.0 * 2.0 - 1.0) * 3.14159265358979);
            ys[i] = sinf(xs[i]);
        }
        st = tg_session_step(s, (tg_feed[]){TG_FEED("x", xs, SIN_B), TG_FEED("y", ys, SIN_B)}, 2, &r->loss[step]);
    }
    if (st == TG_OK) st = tg_session_get_param(s, "l2.W", r->w, (int64_t)width * width);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(1e-30, fabs(b)); }

/* The adapter's own limits, as the engine gives them to the emitters. */
static tg_wgsl_limits device_limits(const tg_webgpu_adapter_info *info) {
    return (tg_wgsl_limits){info->max_storage_buffer_binding_size, info->max_buffer_size,
                            info->max_storage_buffers_per_shader_stage, info->max_compute_workgroup_storage_size,
                            info->max_compute_invocations_per_workgroup, info->max_compute_workgroups_per_dimension,
                            info->min_storage_buffer_offset_alignment, false, false, 0, 0, false, -1};
}

/* Fused against one kernel per node: the same losses and weights, up to the
 * order of long sums (the clip norm's). */
static void compare(const char *what, const mlp_result *f, const mlp_result *u, int steps, int n_w, double tol) {
    double worst = 0, wworst = 0;
    for (int i = 0; i < steps; i++) worst = fmax(worst, rel(f->loss[i], u->loss[i]));
    for (int i = 0; i < n_w; i++) wworst = fmax(wworst, fabs((double)f->w[i] - u->w[i]) / fmax(1.0, fabs((double)u->w[i])));
    CHECK(worst <= tol && wworst <= tol, "%s: fused vs unfused: losses differ by %.3g, weights by %.3g", what, worst,
          wworst);
}

static void test_mlp(void) {
    enum { STEPS = 20 };
    static mlp_result f, u;
    struct {
        const char *what;
        tg_optim o;
    } runs[4] = {{"adam", tg_adam(tg_lr_constant(5e-3f))},
                 {"adamw clip normalize", tg_adamw(tg_lr_cosine(5e-3f, 5e-4f, 50), 0.01f)},
                 {"sgd nesterov", tg_sgd(tg_lr_constant(2e-2f), 0.9f, true, 1e-3f)},
                 {"sgd plain", tg_sgd(tg_lr_constant(2e-2f), 0.0f, false, 0.0f)}};
    runs[1].o.clip_grad_norm = 0.5f;
    runs[1].o.normalize_grads = true;
    for (int r = 0; r < 4; r++) {
        tg_wgsl_force_forms(NULL);
        CHECK_OK(mlp_train(64, runs[r].o, STEPS, &f));
        tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
        CHECK_OK(mlp_train(64, runs[r].o, STEPS, &u));
        tg_wgsl_force_forms(NULL);
        compare(runs[r].what, &f, &u, STEPS, 64 * 64, 1e-5);
        CHECK(f.dispatches < u.dispatches, "%s: %d dispatches fused, %d unfused", runs[r].what, f.dispatches, u.dispatches);
        /* The products before the bias adds and relu's gradients are
         * fused before planning: they get no memory (the one-kernel-per-node
         * plan has the same nodes otherwise). */
        CHECK(f.scratch < u.scratch, "%s: %lld scratch bytes fused, %lld unfused", runs[r].what, (long long)f.scratch,
              (long long)u.scratch);
        printf("  sin MLP %-22s %3d dispatches per step (%d unfused), %lld scratch bytes (%lld)\n", runs[r].what,
               f.dispatches, u.dispatches, (long long)f.scratch, (long long)u.scratch);
        /* examples/sin.c's setup: a regression in fusion shows here. 16 kernels
         * train it, 7 more sum the gradients squared for the step check
         * (a non-finite loss or gradient norm fails the step). */
        if (r == 0) CHECK(f.dispatches <= 23, "sin MLP with Adam: %d dispatches per step, want <= 23", f.dispatches);
    }
}

/* A binding limit below the size of the optimizer state and of the
 * gradients: the update and the sums of squares each run as several
 * dispatches over consecutive params, and still train the same. */
static void test_chunked(void) {
    enum { STEPS = 8, W = 256 };
    static mlp_result f, u, c;
    tg_optim o = tg_adamw(tg_lr_constant(1e-3f), 0.01f);
    o.clip_grad_norm = 1.0f;
    tg_wgsl_force_forms(NULL);
    CHECK_OK(mlp_train(W, o, STEPS, &f));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
    CHECK_OK(mlp_train(W, o, STEPS, &u));
    tg_wgsl_force_forms(NULL);
    tg_webgpu_adapter_info info;
    CHECK_OK(tg_webgpu_info(&info));
    /* 256 KiB: the largest tensor ([256,256]) fits, the 264 KB of gradients do not */
    tg_wgsl_limits l = {256 << 10, info.max_buffer_size, info.max_storage_buffers_per_shader_stage,
                        info.max_compute_workgroup_storage_size, info.max_compute_invocations_per_workgroup,
                        info.max_compute_workgroups_per_dimension, info.min_storage_buffer_offset_alignment, false, false, 0, 0, false, -1};
    tg_wgpu_test_override_limits(&l);
    CHECK_OK(mlp_train(W, o, STEPS, &c));
    tg_wgpu_test_override_limits(NULL);
    compare("chunked vs one group", &c, &f, STEPS, W * W, 1e-5);
    compare("chunked vs unfused", &c, &u, STEPS, W * W, 1e-5);
    CHECK(c.dispatches >= f.dispatches + 2, "a small binding limit gave %d dispatches, %d without it", c.dispatches,
          f.dispatches);
    printf("  1-256-256-1 MLP, clip: %d dispatches, %d with a 256 KiB binding limit, %d unfused\n", f.dispatches,
           c.dispatches, u.dispatches);
}

/* A param exactly at the binding limit: its fused Adam update would bind its
 * gradient and both moments as one span three times the limit, so that
 * update runs unfused, and every binding the program makes is within the
 * limit (the real device's limit is larger, so Dawn cannot catch it here). */
static tg_param big_w;
static tg_tensor big_w_loss(tg_graph *g, void *u) {
    (void)u;
    return tg_mean(tg_square(tg_matmul(tg_input(g, "x"), tg_use(g, big_w))), TG_ALL, false);
}

static void test_exact_bindings(void) {
    tg_webgpu_adapter_info info;
    CHECK_OK(tg_webgpu_info(&info));
    tg_wgsl_limits l = {256 << 10, info.max_buffer_size, info.max_storage_buffers_per_shader_stage,
                        info.max_compute_workgroup_storage_size, info.max_compute_invocations_per_workgroup,
                        info.max_compute_workgroups_per_dimension, info.min_storage_buffer_offset_alignment, false, false, 0, 0, false, -1};
    tg_model *m = tg_model_new();
    big_w = tg_model_param(m, "W", S(256, 256), tg_init_randn(0.02f));
    tg_input_decl in[] = {{"x", TG_F32, S(4, 256)}};
    tg_train_spec spec = {.model = m, .loss = big_w_loss, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_constant(1e-3f)), .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    tg_wgpu_test_override_limits(&l);
    CHECK_OK(tg_session_new(&spec, &s));
    tg_wgpu_test_override_limits(NULL);
    tg_wgsl_program prog;
    if (s) CHECK_OK(tg_wgsl_emit_program(s->b.prog->g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, &l, &prog));
    int64_t worst = 0;
    for (int i = 0; s && i < prog.n; i++)
        for (int b = 0; b < prog.k[i].n_bindings; b++)
            if (prog.k[i].bind[b].size > worst) worst = prog.k[i].bind[b].size;
    CHECK(worst <= (int64_t)l.max_storage_buffer_binding_size, "a binding of %lld bytes, over the %lld-byte limit",
          (long long)worst, (long long)l.max_storage_buffer_binding_size);
    if (s) tg_wgsl_program_free(&prog);
    tg_session_free(s);
    tg_model_free(m);
}

/* The optimizer's updates and the clip norm's sums are grouped before
 * planning: each clipped gradient (grad * the clip factor, read only by
 * its updates), each square and each sum of squares lives inside its
 * group's kernels and has no memory, and the updates of every param are
 * one group, the clip norm's terms, total and tails another. */
static void test_before_planning(void) {
    tg_model *m = tg_model_new();
    sin_net net = sin_net_new(m, 64);
    tg_input_decl in[] = {{"x", TG_F32, S(SIN_B, 1)}, {"y", TG_F32, S(SIN_B, 1)}};
    tg_optim o = tg_adam(tg_lr_constant(1e-3f));
    o.clip_grad_norm = 0.5f;
    tg_train_spec spec = {.model = m, .loss = sin_loss, .user = &net, .inputs = in, .n_inputs = 2, .optim = o,
                          .seed = 3, .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (s && s->b.prog->fusion) {
        const tg_graph *g = s->b.prog->g;
        const tg_plan *pl = &s->b.prog->plan;
        const tg_fusion *f = s->b.prog->fusion;
        const tg_wgsl_chosen_groups *chosen = f->impl;
        int updates = 0, in_group = -2, clipped = 0, kept = 0, squares = 0, kept_sq = 0, optim = 0, sumsq = 0;
        for (int i = 0; i < g->n; i++) {
            const tg_node *n = &g->nodes[i];
            if (n->op == TG_OP_ADAM_P) {
                updates++;
                in_group = in_group == -2 ? f->group[i] : in_group == f->group[i] ? in_group : -1;
            }
            if (n->op == TG_OP_ADAM_M && g->nodes[n->in[1]].op == TG_OP_MUL) {
                clipped++;
                kept += pl->slot[n->in[1]].arena < 0;
            }
            if (n->op == TG_OP_MUL && n->in[0] == n->in[1] && f->group[i] >= 0 && chosen->chosen[f->group[i]].kind == GROUP_SUMSQ) {
                squares++; /* the clip norm's: the loss's own square is another */
                kept_sq += pl->slot[i].arena < 0;
            }
        }
        for (int gi = 0; gi < f->n_groups; gi++) optim += chosen->chosen[gi].kind == GROUP_OPTIM, sumsq += chosen->chosen[gi].kind == GROUP_SUMSQ;
        CHECK(updates == 6 && in_group >= 0 && chosen->chosen[in_group].kind == GROUP_OPTIM && optim == 1,
              "the 6 updates in one optimizer group chosen before planning (%d updates, group %d, %d optimizer groups)",
              updates, in_group, optim);
        CHECK(clipped == 6 && kept == 6, "%d of %d clipped gradients without memory, want all 6", kept, clipped);
        CHECK(squares == 6 && kept_sq == 6 && sumsq == 1, "%d of %d squares without memory (want 6), %d clip norm groups (want 1)",
              kept_sq, squares, sumsq);
    } else {
        CHECK(s && s->b.prog->fusion, "no fusion before planning");
    }
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- products of one input: one dispatch (program.c's matmul groups) ---- */

static tg_param gw[3];
static tg_tensor group_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x");
    /* all three before their readers (as q, k and v in gpt.c), each read by
     * a softmax, which takes no epilogue: the products stay plain kernels */
    tg_tensor s[3];
    for (int q = 0; q < 3; q++) s[q] = tg_matmul(x, tg_use(g, gw[q]));
    for (int q = 0; q < 3; q++) s[q] = tg_softmax(s[q], -1);
    return tg_mean(tg_square(tg_add(s[0], tg_mul(s[1], s[2]))), TG_ALL, false);
}

/* The sum of three products of one geometry, totalled by two adds:
 * one kernel accumulating all three (a softmax reads the sum, so no
 * epilogue takes the adds first). */
static tg_tensor sum_loss(tg_graph *g, void *user) {
    (void)user;
    tg_tensor x = tg_input(g, "x");
    tg_tensor a[3] = {x, tg_tanh(x), tg_square(x)}, y = {NULL, -1};
    for (int q = 0; q < 3; q++) {
        tg_tensor p = tg_matmul(a[q], tg_use(g, gw[q]));
        y = q ? tg_add(y, p) : p;
    }
    return tg_mean(tg_square(tg_softmax(y, -1)), TG_ALL, false);
}

/* How many of the kernels session s compiled to name `kind` in their source. */
static tg_status kernels_naming(tg_session *s, const char *kind, int *n) {
    tg_webgpu_adapter_info info;
    tg_wgsl_program prog;
    *n = 0;
    tg_status st = tg_webgpu_info(&info);
    if (st != TG_OK) return st;
    tg_wgsl_limits l = device_limits(&info);
    st = tg_wgsl_emit_program(s->b.prog->g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, &l, &prog);
    for (int i = 0; st == TG_OK && i < prog.n; i++) *n += prog.k[i].source && strstr(prog.k[i].source, kind) != NULL;
    if (st == TG_OK) tg_wgsl_program_free(&prog);
    return st;
}

/* Three steps of loss_fn; the losses, W0 after them, and how many kernels' sources name `kind`. */
static tg_status group_train(tg_trace_fn loss_fn, const char *kind, float *loss, float *w0, int *groups) {
    tg_model *m = tg_model_new();
    for (int q = 0; q < 3; q++) {
        char name[16];
        snprintf(name, sizeof name, "W%d", q);
        gw[q] = tg_model_param(m, name, S(64, 64), tg_init_randn(0.2f));
    }
    tg_input_decl in[] = {{"x", TG_F32, S(128, 64)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 5, .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    static float x[128 * 64];
    for (int i = 0; i < 128 * 64; i++) x[i] = sinf(0.37f * (float)i);
    for (int step = 0; step < 3 && st == TG_OK; step++) st = tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 128 * 64)}, 1, &loss[step]);
    if (st == TG_OK) st = tg_session_get_param(s, "W0", w0, 64 * 64);
    *groups = 0;
    if (st == TG_OK) st = kernels_naming(s, kind, groups);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

/* loss_fn trained fused and with one kernel per node: the losses within
 * 1e-5 relative, W0 within 1e-5 (its weights are about 0.2), and exactly
 * `want` kernels of `kind` fused, none unfused. */
static void check_one_kernel(const char *what, tg_trace_fn loss_fn, const char *kind, int want) {
    float lf[3], lu[3];
    static float wf[64 * 64], wu[64 * 64];
    int gf = 0, gu = 0;
    CHECK_OK(group_train(loss_fn, kind, lf, wf, &gf));
    tg_wgsl_forms forms = *tg_wgsl_forced(), unfused = forms; /* the caller's forms, unfused */
    unfused.unfused = true;
    tg_wgsl_force_forms(&unfused);
    CHECK_OK(group_train(loss_fn, kind, lu, wu, &gu));
    tg_wgsl_force_forms(&forms);
    double worst = 0, wworst = 0;
    for (int i = 0; i < 3; i++) worst = fmax(worst, rel(lf[i], lu[i]));
    for (int i = 0; i < 64 * 64; i++) wworst = fmax(wworst, fabs(wf[i] - wu[i]));
    CHECK(worst <= 1e-5 && wworst <= 1e-5, "%s: fused vs one kernel per node: losses differ by %.3g, weights by %.3g", what,
          worst, wworst);
    CHECK(gf == want && gu == 0, "%s: %d kernels '%s' (%d unfused), want %d (0)", what, gf, kind, gu, want);
    printf("  %s: %d '%s', losses differ by %.2g, weights by %.2g\n", what, gf, kind, worst, wworst);
}

/* The forward's x W0, x W1, x W2 as one kernel, and the weight gradients
 * x^T dY0, x^T dY1, x^T dY2 as another (they share x too; stored as grads,
 * they are written at the group's turn). A sum of three products: the terms are added
 * in registers instead of after rounding each product, so the results
 * agree to rounding, not bits. */
static void test_matmul_group(void) {
    check_one_kernel("three products of one input", group_loss, "matmul group of 3", 2);
    check_one_kernel("a sum of three products", sum_loss, "matmul sum of 3", 1);
    /* Written out as a GPU gets them (lavapipe gets loops; small tiles,
     * which lavapipe compiles quickly): a copy of the code per member or
     * term, each calling its own accessors (no switch on mq per load). */
    tg_wgsl_force_forms(&(tg_wgsl_forms){.matmul_tile = TG_WGSL_TILE_SMALL, .matmul_unroll = TG_WGSL_ON});
    check_one_kernel("three products of one input, written out", group_loss, "matmul group of 3", 2);
    check_one_kernel("a sum of three products, written out", sum_loss, "matmul sum of 3", 1);
    float loss[3];
    static float w0[64 * 64];
    int copies = 0, terms = 0;
    CHECK_OK(group_train(group_loss, "pb0 = ld1_2(", loss, w0, &copies));
    CHECK_OK(group_train(sum_loss, "pa0 = ld0_2(", loss, w0, &terms));
    CHECK(copies == 2 && terms == 1, "written out: %d group kernels with member 2's own loads (want 2), %d sums with term "
          "2's (want 1)", copies, terms);
    tg_wgsl_force_forms(NULL);
}

/* ---- weight gradients with K split: grouped, and with their bias sums ---- */

/* q = x W0 + b0, k = x W1, v = x W2 over 1100 rows (K of the weight
 * gradients, split in ranges, not a multiple of the k-slice) and odd
 * widths: dW1 and dW2 share x and run as one split group; dW0 takes b0's
 * column sum of dq beside it. */
enum { SR_MOST = 1100, SI_MOST = 64, SO_MOST = 64 };
static int SR = 1100, SI = 40, SO = 48;
static tg_param sw[4];
static tg_tensor split_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x");
    tg_tensor q = tg_add(tg_matmul(x, tg_use(g, sw[0])), tg_use(g, sw[3]));
    tg_tensor k = tg_matmul(x, tg_use(g, sw[1])), v = tg_matmul(x, tg_use(g, sw[2]));
    return tg_mean(tg_square(tg_add(tg_mul(tg_tanh(q), k), v)), TG_ALL, false);
}

/* Three Adam steps on `backend`: the losses, every param after them, and
 * (WebGPU) how many kernels' sources name `kind`. */
static tg_status split_train(tg_backend backend, float *loss, float *params, const char *kind, int *kinds, bool discard) {
    tg_model *m = tg_model_new();
    for (int q = 0; q < 3; q++) {
        char name[16];
        snprintf(name, sizeof name, "W%d", q);
        sw[q] = tg_model_param(m, name, S(SI, SO), tg_init_randn(0.2f));
    }
    sw[3] = tg_model_param(m, "b0", S(SO), tg_init_randn(0.2f));
    tg_input_decl in[] = {{"x", TG_F32, S(SR, SI)}};
    tg_train_spec spec = {.model = m, .loss = split_loss, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 7, .backend = backend,
                          .discard_grads = discard};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    static float x[SR_MOST * SI_MOST];
    for (int i = 0; i < SR * SI; i++) x[i] = sinf(0.37f * (float)i) + 0.1f * cosf(0.011f * (float)i);
    for (int step = 0; step < 3 && st == TG_OK; step++) st = tg_session_step(s, (tg_feed[]){TG_FEED("x", x, SR * SI)}, 1, &loss[step]);
    static const char *names[4] = {"W0", "W1", "W2", "b0"};
    for (int q = 0; q < 4 && st == TG_OK; q++) st = tg_session_get_param(s, names[q], params + q * SI * SO, q < 3 ? SI * SO : SO);
    *kinds = 0;
    if (st == TG_OK && backend == TG_BACKEND_WEBGPU) st = kernels_naming(s, kind, kinds);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

/* Fused WebGPU against the CPU backend and against WebGPU with one kernel
 * per node: losses within 1e-5 relative, every param within 2e-5. The
 * fused program has the group's two phases and a bias sum in a product's
 * kernel (no column sum kernel of its own). */
static void test_split_groups(void) {
    enum { NP = 3 * SI_MOST * SO_MOST + SO_MOST };
    float lf[3], lu[3], lc[3];
    static float pf[NP], pu[NP], pc[NP];
    int groups = 0, gu = 0, gc = 0, sibs = 0, su = 0;
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, lf, pf, "matmul group of 2", &groups, false));
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, lf, pf, "st2(c, cacc)", &sibs, false));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, lu, pu, "matmul group of 2", &gu, false));
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, lu, pu, "st2(c, cacc)", &su, false));
    tg_wgsl_force_forms(NULL);
    CHECK_OK(split_train(TG_BACKEND_CPU, lc, pc, "", &gc, false));
    /* Discarded gradients (planned in reused memory): the same group, the same bits. */
    float ld[3];
    static float pd[NP];
    int gd = 0;
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, ld, pd, "matmul group of 2", &gd, true));
    CHECK(gd == 2 && memcmp(ld, lf, sizeof ld) == 0 && memcmp(pd, pf, sizeof pd) == 0,
          "split weight gradients, discarded: %d kernels of the group (want 2), the same bits: %d", gd,
          memcmp(ld, lf, sizeof ld) == 0 && memcmp(pd, pf, sizeof pd) == 0);
    double lw = 0, pw = 0, lcw = 0, pcw = 0;
    for (int i = 0; i < 3; i++) lw = fmax(lw, rel(lf[i], lu[i])), lcw = fmax(lcw, rel(lf[i], lc[i]));
    for (int i = 0; i < NP; i++) pw = fmax(pw, fabs(pf[i] - pu[i])), pcw = fmax(pcw, fabs(pf[i] - pc[i]));
    CHECK(lw <= 1e-5 && pw <= 2e-5, "split weight gradients: fused vs one kernel per node: losses %.3g, params %.3g", lw, pw);
    CHECK(lcw <= 1e-5 && pcw <= 2e-5, "split weight gradients: fused WebGPU vs CPU: losses %.3g, params %.3g", lcw, pcw);
    CHECK(groups == 2 && gu == 0, "split weight gradients: %d kernels of the group (%d unfused), want its 2 phases (0)",
          groups, gu);
    CHECK(sibs == 1 && su == 0, "split weight gradients: %d kernels sum a bias beside a product (%d unfused), want 1 (0)",
          sibs, su);
    printf("  split weight gradients: a group in 2 phases, a bias sum beside dW0; vs unfused %.2g / %.2g, vs CPU %.2g / %.2g\n",
           lw, pw, lcw, pcw);
    /* the group written out (a copy per member): the same values as the loop form, member 1's own loads */
    float lo[3];
    static float po[NP];
    int own = 0;
    tg_wgsl_force_forms(&(tg_wgsl_forms){.matmul_unroll = TG_WGSL_ON});
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, lo, po, "pb0 = ld1_1(", &own, false));
    tg_wgsl_force_forms(NULL);
    double ow = 0;
    for (int i = 0; i < NP; i++) ow = fmax(ow, fabs(po[i] - pf[i]));
    CHECK(own == 1 && memcmp(lo, lf, sizeof lo) == 0 && ow <= 2e-5,
          "split weight gradients written out: %d kernels with member 1's own loads (want 1), losses %s, params %.3g",
          own, memcmp(lo, lf, sizeof lo) == 0 ? "the same" : "differ", ow);
}

/* The split group over 1024 rows and widths of 64 (multiples of the
 * small tiles, K split in ranges of 512) loads its operands 4 at a time, as
 * gpt_small's q, k and v weight gradients do (ops_matmul.c's vec4_load),
 * and gives the bits of one load an element. */
static void test_split_group_loads(void) {
    enum { NP = 3 * SI_MOST * SO_MOST + SO_MOST };
    static float p4[NP], p1[NP];
    float l4[3], l1[3];
    int a4 = 0, b4 = 0, a1 = 0;
    SR = 1024, SI = 64, SO = 64;
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, l4, p4, "ranges: partial products", &a4, false));
    CHECK(a4 == 1, "split group over 1024 rows: %d first phases of a split group (want 1)", a4);
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, l4, p4, "pa0 = ld0v", &a4, false));
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, l4, p4, "pb0 = ld1v", &b4, false));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.matmul_load4 = TG_WGSL_OFF});
    CHECK_OK(split_train(TG_BACKEND_WEBGPU, l1, p1, "pa0 = ld0v", &a1, false));
    tg_wgsl_force_forms(NULL);
    SR = 1100, SI = 40, SO = 48;
    bool same = memcmp(l4, l1, sizeof l4) == 0 && memcmp(p4, p1, sizeof p4) == 0;
    CHECK(a4 == 1 && b4 == 1 && a1 == 0 && same,
          "split group over 1024 rows: %d and %d kernels load A and B 4 at a time (want 1 and 1; off: %d), the bits %s", a4, b4,
          a1, same ? "the same" : "differ");
}

/* ---- a product leading a group of products of one other A ---- */

/* An attention block's shape: q, k, v = x Wq, x Wk, x Wv, then y = a Wp
 * with a computed from them. dWp = a^T dy comes first in the backward and
 * leads the group of dWq, dWk, dWv (A = x), as by default:
 * four weight gradients of two As in one split group. x W4, four times as
 * wide (an MLP's), has the largest partial products, which bound a
 * group's (tg_wgsl_matmul_group_split). */
enum { LR = 1100, LD = 48 };
static tg_param lw[5];
static tg_tensor lead_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x");
    tg_tensor q = tg_matmul(x, tg_use(g, lw[0])), k = tg_matmul(x, tg_use(g, lw[1])), v = tg_matmul(x, tg_use(g, lw[2]));
    tg_tensor a = tg_add(tg_mul(tg_tanh(q), k), v);
    tg_tensor wide = tg_mean(tg_square(tg_tanh(tg_matmul(x, tg_use(g, lw[4])))), TG_ALL, false);
    return tg_add(tg_mean(tg_square(tg_matmul(a, tg_use(g, lw[3]))), TG_ALL, false), wide);
}

/* Three Adam steps: the losses, the params after them, and (WebGPU) how
 * many kernels' sources name `kind`. */
static tg_status lead_train(tg_backend backend, float *loss, float *params, const char *kind, int *kinds) {
    tg_model *m = tg_model_new();
    static const char *names[4] = {"Wq", "Wk", "Wv", "Wp"};
    for (int q = 0; q < 4; q++) lw[q] = tg_model_param(m, names[q], S(LD, LD), tg_init_randn(0.2f));
    lw[4] = tg_model_param(m, "W4", S(LD, 4 * LD), tg_init_randn(0.2f));
    tg_input_decl in[] = {{"x", TG_F32, S(LR, LD)}};
    tg_train_spec spec = {.model = m, .loss = lead_loss, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 9, .backend = backend};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    static float x[LR * LD];
    for (int i = 0; i < LR * LD; i++) x[i] = sinf(0.29f * (float)i) + 0.1f * cosf(0.013f * (float)i);
    for (int step = 0; step < 3 && st == TG_OK; step++) st = tg_session_step(s, (tg_feed[]){TG_FEED("x", x, LR * LD)}, 1, &loss[step]);
    for (int q = 0; q < 4 && st == TG_OK; q++) st = tg_session_get_param(s, names[q], params + q * LD * LD, LD * LD);
    *kinds = 0;
    if (st == TG_OK && backend == TG_BACKEND_WEBGPU) st = kernels_naming(s, kind, kinds);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

/* Led: the group of 4 in its two phases, against the CPU and against one
 * kernel per node (losses within 1e-5 relative, params within 2e-5), in
 * the loop form and written out. Not led: the group of 3 and dWp alone. */
static void test_lead_groups(void) {
    enum { NP = 4 * LD * LD };
    float ll[3], lu[3], lc[3], lo[3], ln[3];
    static float pl[NP], pu[NP], pc[NP], po[NP], pn[NP];
    int led = 0, unfused = 0, out = 0, three = 0, four = 0, gc = 0;
    tg_wgsl_force_forms(NULL); /* products may lead groups, as by default */
    CHECK_OK(lead_train(TG_BACKEND_WEBGPU, ll, pl, "matmul group of 4 [", &led));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.matmul_unroll = TG_WGSL_ON});
    CHECK_OK(lead_train(TG_BACKEND_WEBGPU, lo, po, "matmul group of 4 [", &out));
    tg_wgsl_force_forms(NULL);
    tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
    CHECK_OK(lead_train(TG_BACKEND_WEBGPU, lu, pu, "matmul group of", &unfused));
    tg_wgsl_force_forms(NULL);
    tg_wgsl_force_forms(&(tg_wgsl_forms){.matmul_lead = TG_WGSL_OFF});
    CHECK_OK(lead_train(TG_BACKEND_WEBGPU, ln, pn, "matmul group of 3 [", &three));
    CHECK_OK(lead_train(TG_BACKEND_WEBGPU, ln, pn, "matmul group of 4 [", &four));
    tg_wgsl_force_forms(NULL);
    CHECK_OK(lead_train(TG_BACKEND_CPU, lc, pc, "", &gc));
    double lw_ = 0, pw = 0, lcw = 0, pcw = 0, ow = 0, nw = 0;
    for (int i = 0; i < 3; i++) lw_ = fmax(lw_, rel(ll[i], lu[i])), lcw = fmax(lcw, rel(ll[i], lc[i]));
    for (int i = 0; i < NP; i++) {
        pw = fmax(pw, fabs(pl[i] - pu[i])), pcw = fmax(pcw, fabs(pl[i] - pc[i]));
        ow = fmax(ow, fabs(po[i] - pc[i])), nw = fmax(nw, fabs(pn[i] - pc[i]));
    }
    CHECK(led == 2 && out == 2 && unfused == 0, "led groups: %d / %d kernels of the group of 4 (loop / written out; want 2), "
          "%d unfused (want 0)", led, out, unfused);
    CHECK(three == 2 && four == 0, "not led: %d kernels of a group of 3 (want 2), %d of 4 (want 0)", three, four);
    CHECK(lw_ <= 1e-5 && pw <= 2e-5, "led group vs one kernel per node: losses %.3g, params %.3g", lw_, pw);
    CHECK(lcw <= 1e-5 && pcw <= 2e-5 && ow <= 2e-5 && nw <= 2e-5,
          "led group vs CPU: losses %.3g, params %.3g (written out %.3g, not led %.3g)", lcw, pcw, ow, nw);
    printf("  a product leading a group of 3: 2 kernels; vs unfused %.2g / %.2g, vs CPU %.2g / %.2g\n", lw_, pw, lcw, pcw);
}

/* ---- the step check in the clip norm's totals kernel ---- */

/* loss = mean((x W0 W1)^2) + log(c) with c an input that no gradient
 * reaches: c = 0 makes the loss -Inf with every gradient finite, which
 * only the step check's loss * 0 + total (computed after the total, in
 * the totals kernel) can see. */
static tg_tensor check_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor y = tg_matmul(tg_matmul(tg_input(g, "x"), tg_use(g, sw[0])), tg_use(g, sw[1]));
    return tg_add(tg_mean(tg_square(y), TG_ALL, false), tg_sum(tg_stop_gradient(tg_log(tg_input(g, "c"))), TG_ALL, false));
}

static void test_step_check_tail(void) {
    tg_model *m = tg_model_new();
    sw[0] = tg_model_param(m, "W0", S(64, 64), tg_init_randn(0.2f));
    sw[1] = tg_model_param(m, "W1", S(64, 64), tg_init_randn(0.2f));
    tg_input_decl in[] = {{"x", TG_F32, S(32, 64)}, {"c", TG_F32, S(1)}};
    tg_optim o = tg_adam(tg_lr_constant(1e-2f));
    o.clip_grad_norm = 0.5f;
    tg_train_spec spec = {.model = m, .loss = check_loss, .inputs = in, .n_inputs = 2, .optim = o, .seed = 3,
                          .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    static float x[32 * 64];
    for (int i = 0; i < 32 * 64; i++) x[i] = cosf(0.21f * (float)i);
    float one = 1, zero = 0, loss = 0;
    int tails = 0;
    tg_webgpu_adapter_info info;
    tg_wgsl_program prog;
    if (s && tg_webgpu_info(&info) == TG_OK) {
        tg_wgsl_limits l = device_limits(&info);
        if (tg_wgsl_emit_program(s->b.prog->g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, &l,
                                 &prog) == TG_OK) {
            for (int i = 0; i < prog.n; i++) tails += prog.k[i].source && strstr(prog.k[i].source, "scalars from the total");
            tg_wgsl_program_free(&prog);
        }
        /* asked to gate the updates on the check, as the engine does: every
         * update kernel reads it and says so, and nothing else does */
        l.gate_updates = true, l.step_check = s->b.prog->check;
        if (tg_wgsl_emit_program(s->b.prog->g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, &l,
                                 &prog) == TG_OK) {
            int updates = 0, gated = 0;
            for (int i = 0; i < prog.n; i++) {
                bool update = prog.k[i].source && strstr(prog.k[i].source, "adam update of");
                updates += update;
                gated += prog.k[i].gated;
                CHECK(prog.k[i].gated == update, "step check: kernel %d (node %d) gated %d, an update %d", i,
                      prog.k[i].node, prog.k[i].gated, update);
                if (update) CHECK(strstr(prog.k[i].source, "0x7f800000u) == 0x7f800000u) { return; }") != NULL,
                                  "step check: update kernel %d does not read the check", i);
                /* 4 elements an invocation: W0 and W1 (4096 each) in 4 workgroups of 256 each, not 16 */
                if (update) CHECK(prog.k[i].threads == 2 * 4 * 256, "update kernel %d: %lld invocations for 2 x 4096 elements, want %d",
                                  i, (long long)prog.k[i].threads, 2 * 4 * 256);
            }
            CHECK(updates >= 1 && gated == updates, "step check: %d of %d update kernels gated", gated, updates);
            tg_wgsl_program_free(&prog);
        }
    }
    CHECK(tails == 1, "step check: %d totals kernels compute scalars after the total, want 1", tails);
    tg_feed ok[] = {TG_FEED("x", x, 32 * 64), TG_FEED("c", &one, 1)}, bad[] = {TG_FEED("x", x, 32 * 64), TG_FEED("c", &zero, 1)};
    if (s) {
        CHECK_OK(tg_session_step(s, ok, 2, &loss));
        CHECK_ERR(tg_session_step(s, bad, 2, &loss), TG_ERR_NUMERIC, "not finite");
        CHECK_OK(tg_session_step(s, ok, 2, &loss));
        CHECK(tg_session_step_count(s) == 2, "step check: %lld steps counted, want 2", (long long)tg_session_step_count(s));
    }
    printf("  step check in the clip norm's totals kernel: a -Inf loss with finite gradients fails the step; the "
           "update kernels skip their work on it\n");
    tg_session_free(s);
    tg_model_free(m);
}

/* A math row of ops.def among the scalars after a sum of squares' total
 * (ops.def's MATH): tanh(sum(a^2) + sum(b^2)) runs as the partial sums and
 * the totals kernel, tanh computed in the latter from its row's expression:
 * two dispatches (three if tanh ran alone), the CPU's value. */
static tg_param ta, tb;
static tg_tensor tanh_total(tg_graph *g, void *u) {
    (void)u;
    tg_tensor a = tg_use(g, ta), b = tg_use(g, tb);
    return tg_tanh(tg_mul_s(tg_add(tg_sum(tg_mul(a, a), TG_ALL, false), tg_sum(tg_mul(b, b), TG_ALL, false)), 1e-5f));
}

static void test_math_tail(void) {
    tg_model *m = tg_model_new();
    ta = tg_model_param(m, "a", S(300, 300), tg_init_randn(0.5f));
    tb = tg_model_param(m, "b", S(300), tg_init_randn(0.5f));
    float y[2] = {0, 0};
    int dispatches[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        tg_forward *f = NULL;
        tg_forward_spec spec = {.fn = tanh_total, .model = m, .seed = 9, .backend = k ? TG_BACKEND_WEBGPU : TG_BACKEND_CPU};
        CHECK_OK(tg_forward_new(&spec, &f));
        tg_plan_stats ps = {0};
        if (f) {
            CHECK_OK(tg_forward_run(f, 0, NULL, 0));
            CHECK_OK(tg_forward_output(f, &y[k], 1));
            CHECK_OK(tg_forward_plan_stats(f, &ps));
        }
        dispatches[k] = ps.n_dispatches;
        tg_forward_free(f);
    }
    CHECK(dispatches[1] == 2, "tanh of a sum of squares' total: %d dispatches, want 2 (tanh in the totals kernel)", dispatches[1]);
    CHECK(fabsf(y[1] - y[0]) <= 1e-5f * fabsf(y[0]), "tanh of the total: %.9g on webgpu, %.9g on the cpu", y[1], y[0]);
    printf("  a math row after a sum of squares' total: computed in the totals kernel (%d dispatches)\n", dispatches[1]);
    tg_model_free(m);
}

/* ---- elementwise chains, fused before planning ---- */

enum { CR = 64, CC = 16 };
static tg_param cw;
static int chain_inputs; /* test_chain_bindings: how many inputs the chain of adds sums */

/* d = tanh(x W) * 2 + 1 - y, loss mean(d^2): the mul and the add are read
 * by the next link alone, so one kernel computes them where it reads them
 * (tanh's value is stored: its gradient reads it too). */
static tg_tensor chain_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor t = tg_tanh(tg_matmul(tg_input(g, "x"), tg_use(g, cw)));
    return tg_mean(tg_square(tg_sub(tg_add_s(tg_mul_s(t, 2.0f), 1.0f), tg_input(g, "y"))), TG_ALL, false);
}

/* ((x0 + x1) + ... + x_{n-1}) * w - y: a chain of adds reading n inputs, summed
 * by one kernel where the bindings allow it (its sum is stored: w's gradient
 * reads it). */
static tg_tensor adds_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor a = tg_input(g, "x0");
    for (int q = 1; q < chain_inputs; q++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", q);
        a = tg_add(a, tg_input(g, name));
    }
    return tg_mean(tg_square(tg_sub(tg_mul(a, tg_use(g, cw)), tg_input(g, "y"))), TG_ALL, false);
}

typedef struct {
    float loss[5];
    int dispatches, max_bindings, kept_links; /* kept_links: chain_loss's mul and add without memory */
    int64_t scratch;
} chain_result;

/* Five steps of loss_fn (on `lim` when not NULL); what the plan and the kernels came to. */
static tg_status chain_train(tg_trace_fn loss_fn, int n_in, const tg_wgsl_limits *lim, chain_result *r) {
    memset(r, 0, sizeof *r);
    tg_model *m = tg_model_new();
    cw = tg_model_param(m, "W", loss_fn == chain_loss ? S(CC, CC) : S(CR, CC), tg_init_randn(0.3f));
    /* y, then x (chain_loss) or x0 .. x_{n_in - 1} */
    tg_input_decl in[10] = {{"y", TG_F32, S(CR, CC)}, {"x", TG_F32, S(CR, CC)}};
    static char names[9][16];
    for (int q = 0; q < n_in; q++) {
        snprintf(names[q], sizeof names[q], "x%d", q);
        in[1 + q] = (tg_input_decl){names[q], TG_F32, S(CR, CC)};
    }
    int n_feeds = 1 + (n_in ? n_in : 1);
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = n_feeds,
                          .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 9, .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    if (lim) tg_wgpu_test_override_limits(lim);
    tg_status st = tg_session_new(&spec, &s);
    if (lim) tg_wgpu_test_override_limits(NULL);
    tg_plan_stats ps = {0};
    if (st == TG_OK) st = tg_session_plan_stats(s, &ps);
    r->dispatches = ps.n_dispatches, r->scratch = ps.scratch_bytes;
    static float xs[10][CR * CC];
    for (int q = 0; q < 10; q++)
        for (int i = 0; i < CR * CC; i++) xs[q][i] = sinf(0.13f * (float)(i + 97 * q));
    tg_feed feeds[10] = {TG_FEED("y", xs[0], CR * CC), TG_FEED("x", xs[1], CR * CC)};
    for (int q = 0; q < n_in; q++) feeds[1 + q] = (tg_feed)TG_FEED(names[q], xs[1 + q], CR * CC);
    for (int step = 0; step < 5 && st == TG_OK; step++) st = tg_session_step(s, feeds, n_feeds, &r->loss[step]);
    const tg_graph *g = st == TG_OK ? s->b.prog->g : NULL;
    for (int i = 0; g && i < g->n; i++) { /* sub(add(mul(tanh, 2), 1), y) */
        const tg_node *sb = &g->nodes[i], *ad = &g->nodes[sb->in[0]], *mu = &g->nodes[ad->in[0]];
        if (sb->op != TG_OP_SUB || ad->op != TG_OP_ADD || mu->op != TG_OP_MUL || g->nodes[mu->in[0]].op != TG_OP_TANH) continue;
        r->kept_links += s->b.prog->plan.slot[ad->in[0]].kind == TG_BUF_NONE && s->b.prog->plan.slot[ad->in[0]].bytes == 0;
        r->kept_links += s->b.prog->plan.slot[sb->in[0]].kind == TG_BUF_NONE && s->b.prog->plan.slot[sb->in[0]].bytes == 0;
    }
    tg_webgpu_adapter_info info;
    tg_wgsl_program prog;
    if (st == TG_OK && (st = tg_webgpu_info(&info)) == TG_OK) {
        tg_wgsl_limits l = device_limits(&info);
        st = tg_wgsl_emit_program(g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, lim ? lim : &l, &prog);
        for (int i = 0; st == TG_OK && i < prog.n; i++)
            if (prog.k[i].n_bindings > r->max_bindings) r->max_bindings = prog.k[i].n_bindings;
        if (st == TG_OK) tg_wgsl_program_free(&prog);
    }
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

static double worst_rel(const float *a, const float *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, rel(a[i], b[i]));
    return w;
}

/* The links a chain keeps to itself get no memory (the plan is made with
 * the groups), and training is the same as with one kernel per node. */
static void test_chain_memory(void) {
    chain_result f, u;
    CHECK_OK(chain_train(chain_loss, 0, NULL, &f));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
    CHECK_OK(chain_train(chain_loss, 0, NULL, &u));
    tg_wgsl_force_forms(NULL);
    double w = worst_rel(f.loss, u.loss, 5);
    CHECK(w <= 1e-5, "a chain of links: fused vs one kernel per node, losses differ by %.3g", w);
    CHECK(f.kept_links == 2 && u.kept_links == 0, "a chain of links: %d of its 2 kept links have no memory (%d unfused)",
          f.kept_links, u.kept_links);
    CHECK(f.scratch < u.scratch && f.dispatches < u.dispatches, "a chain of links: %lld scratch bytes, %d dispatches "
          "fused; %lld, %d unfused", (long long)f.scratch, f.dispatches, (long long)u.scratch, u.dispatches);
    printf("  tanh(x W) * 2 + 1 - y: the mul and add kept without memory; %d dispatches, %lld scratch bytes (%d, %lld "
           "unfused)\n", f.dispatches, (long long)f.scratch, u.dispatches, (long long)u.scratch);
}

/* A chain of adds over 7 inputs: with 5 storage buffers per stage its
 * kernel stops taking producers where the rule of grouping_elementwise.c says its
 * bindings would not fit (one per value it stores or reads), so that
 * every kernel binds at most 5, and trains the same as with the device's
 * own limit and with one kernel per node. */
static void test_chain_bindings(void) {
    chain_inputs = 7;
    tg_webgpu_adapter_info info;
    CHECK_OK(tg_webgpu_info(&info));
    tg_wgsl_limits l = device_limits(&info);
    l.max_storage_buffers_per_stage = 5;
    chain_result f, c, u;
    CHECK_OK(chain_train(adds_loss, 7, NULL, &f));
    CHECK_OK(chain_train(adds_loss, 7, &l, &c));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
    CHECK_OK(chain_train(adds_loss, 7, NULL, &u));
    tg_wgsl_force_forms(NULL);
    double wc = worst_rel(c.loss, u.loss, 5), wf = worst_rel(f.loss, u.loss, 5);
    CHECK(wc <= 1e-5 && wf <= 1e-5, "a chain of 7 adds: vs one kernel per node, losses differ by %.3g (5 bindings), "
          "%.3g (the device's %u)", wc, wf, info.max_storage_buffers_per_shader_stage);
    CHECK(c.max_bindings <= 5, "a chain of 7 adds: a kernel binds %d storage buffers with 5 allowed", c.max_bindings);
    CHECK(f.dispatches < c.dispatches && c.dispatches < u.dispatches, "a chain of 7 adds: %d dispatches, %d with 5 "
          "bindings, %d unfused", f.dispatches, c.dispatches, u.dispatches);
    printf("  a chain of 7 adds: %d dispatches (%d bindings at most), %d with 5 bindings (%d), %d unfused\n",
           f.dispatches, f.max_bindings, c.dispatches, c.max_bindings, u.dispatches);
}

/* ---- the addition transformer of examples/addition.c ---- */

enum { AV = 12, AD = 64, AL = 3, AH = 4, AT = 8, AB = 128 };
static gpt_model add_net;

static tg_tensor add_loss(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &add_net, tg_input(g, "tokens"), false);
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE);
    static const float mask[AT] = {0, 0, 0, 0, 0, 1, 1, 1};
    return tg_mul_s(tg_sum(tg_mul(ce, tg_constant(g, S(AT), mask)), TG_ALL, false), 1.0f / (AB * 3));
}

static tg_status add_train(int steps, float *losses, int *dispatches) {
    tg_model *m = tg_model_new();
    gpt_declare(&add_net, m, (gpt_config){AV, AD, AL, AH, AT + 1});
    tg_input_decl in[] = {{"tokens", TG_I32, S(AB, AT)}, {"targets", TG_I32, S(AB, AT)}};
    tg_optim o = tg_adamw(tg_lr_linear(5e-3f, 5e-4f, 1500), 0.01f);
    o.clip_grad_norm = 1.0f;
    tg_train_spec spec = {.model = m, .loss = add_loss, .inputs = in, .n_inputs = 2, .optim = o, .seed = 1,
                          .backend = TG_BACKEND_WEBGPU};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_plan_stats ps = {0};
    if (st == TG_OK) st = tg_session_plan_stats(s, &ps);
    *dispatches = ps.n_dispatches;
    static int32_t tok[AB * AT], tgt[AB * AT];
    uint64_t rng = 99;
    for (int step = 0; step < steps && st == TG_OK; step++) {
        for (int i = 0; i < AB * AT; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tok[i] = (int32_t)((rng >> 33) % 12);
            tgt[i] = (int32_t)((rng >> 45) % 10);
        }
        st = tg_session_step(s, (tg_feed[]){TG_FEED("tokens", tok, AB * AT), TG_FEED("targets", tgt, AB * AT)}, 2, &losses[step]);
    }
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

static void test_addition(void) {
    enum { STEPS = 5 };
    float lf[STEPS], lu[STEPS];
    int df = 0, du = 0;
    tg_wgsl_force_forms(NULL);
    CHECK_OK(add_train(STEPS, lf, &df));
    tg_wgsl_force_forms(&(tg_wgsl_forms){.unfused = true});
    CHECK_OK(add_train(STEPS, lu, &du));
    tg_wgsl_force_forms(NULL);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, rel(lf[i], lu[i]));
    CHECK(worst <= 1e-5, "addition: fused vs unfused losses differ by %.3g", worst);
    printf("  addition transformer: %d dispatches per step (%d unfused)\n", df, du);
    /* A regression guard at the count measured when each layer norm's
     * backward statistics joined its recomputation's kernel: 120, of which 7
     * recompute layer norms for the backward (the planner's
     * rematerialization) and write their statistics beside, 3 per
     * layer are the attention kernels (its heads permutes are read and
     * written with strides), and 1 is the step check (it shares the clip
     * norm's sums). Then 102: the q, k and v weight gradients of a layer
     * as one split group (2 dispatches, not 6), and each MLP bias
     * gradient summed in its weight gradient's split kernel; then 100:
     * the clip factor and the step check computed by the clip norm's
     * totals kernel; then 99: the seed gradient's scale folded into one
     * constant when the gradient is built; then 100: the token and
     * position embeddings computed again for the backward. */
    CHECK(df <= 100, "addition transformer: %d dispatches per step, want <= 100", df);
}

int main(void) {
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        check_webgpu_missing("test_webgpu_fusion");
        return check_summary("test_webgpu_fusion");
    }
    test_mlp();
    test_before_planning();
    test_chunked();
    test_exact_bindings();
    test_matmul_group();
    test_split_groups();
    test_split_group_loads();
    test_lead_groups();
    test_step_check_tail();
    test_math_tail();
    test_chain_memory();
    test_chain_bindings();
    test_addition();
    return check_summary("test_webgpu_fusion");
}
