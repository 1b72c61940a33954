/* The fused norm backward (src/wgsl/norm_bwd.c; tg_wgsl_forms.norm_backward turns it off):
 * norm_dx's kernel also summing the gain's and bias's gradients over its
 * rows. Layer and RMS norms, with and without the bias sum, with and
 * without a residual add after norm_dx (its epilogue), over odd widths and
 * row counts from 1 to a few thousand: three SGD steps fused against the
 * CPU and against the two kernels of the unfused WebGPU program, the
 * dispatches one fewer per norm where the gain's sum had its own two (or,
 * below NORM_CHUNK rows, one), and the fallbacks (short rows, rows not in
 * registers) unfused. Needs a WebGPU device (lavapipe). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "webgpu/webgpu.h"
#include "session.h"

#define S TG_SHAPE

enum { K = 8 };
enum { LN, LN_NOBIAS, RMS };

typedef struct {
    int norm;   /* LN, LN_NOBIAS, RMS */
    bool resid; /* y = h + norm(h): dh = gy + norm_dx, an add after norm_dx */
    int64_t R, D;
} net_cfg;

static net_cfg cfg;
static tg_param pw, pg, pb;

/* h = in W [R, D]; y = norm(h) (+ h); loss = mean((y - t)^2). h comes
 * from a product so that dx is needed and no elementwise op takes it. */
static tg_tensor norm_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor h = tg_matmul(tg_input(g, "in"), tg_use(g, pw)), y;
    if (cfg.norm == RMS) y = tg_rms_norm(h, tg_use(g, pg), 1e-6f);
    else y = tg_layer_norm(h, tg_use(g, pg), cfg.norm == LN ? tg_use(g, pb) : tg_zeros(g, S(cfg.D)), 1e-5f);
    if (cfg.resid) y = tg_add(y, h);
    return tg_mean(tg_square(tg_sub(y, tg_input(g, "t"))), TG_ALL, false);
}

typedef struct {
    float loss[3];
    float *p; /* W, g, b */
    int dispatches, fused; /* kernels with the fused partial sums */
    int epi;               /* of them, those storing dx through the residual's add */
    int64_t scratch;       /* the plan's intermediates */
} run_result;

static tg_status count_fused(tg_session *s, int *n, int *epi) {
    tg_webgpu_adapter_info info;
    tg_wgsl_program prog;
    *n = *epi = 0;
    tg_status st = tg_webgpu_info(&info);
    if (st != TG_OK) return st;
    tg_wgsl_limits l = {info.max_storage_buffer_binding_size, info.max_buffer_size,
                        info.max_storage_buffers_per_shader_stage, info.max_compute_workgroup_storage_size,
                        info.max_compute_invocations_per_workgroup, info.max_compute_workgroups_per_dimension,
                        info.min_storage_buffer_offset_alignment, false, false, 0, 0, false, -1};
    st = tg_wgsl_emit_program(s->b.prog->g, &s->b.prog->plan, s->b.prog->fusion, s->b.prog->wb, s->b.prog->n_wb, &l, &prog);
    for (int i = 0; st == TG_OK && i < prog.n; i++) {
        const char *src = prog.k[i].source;
        if (!src || !strstr(src, "pa0 += r2_0")) continue;
        ++*n;
        *epi += strstr(src, "norm_dx -> add") != NULL;
    }
    if (st == TG_OK) tg_wgsl_program_free(&prog);
    return st;
}

static int64_t n_params(void) { return K * cfg.D + 2 * cfg.D; }

/* Three SGD steps (momentum 0: the params move by the gradients, so they
 * differ by what the gradients differ by). */
static tg_status train(tg_backend backend, run_result *r) {
    int64_t R = cfg.R, D = cfg.D;
    tg_model *m = tg_model_new();
    pw = tg_model_param(m, "W", S(K, D), tg_init_randn(0.5f));
    pg = tg_model_param(m, "g", S(D), tg_init_randn(1.0f));
    pb = tg_model_param(m, "b", S(D), tg_init_randn(0.3f));
    tg_input_decl in[] = {{"in", TG_F32, S(R, K)}, {"t", TG_F32, S(R, D)}};
    tg_train_spec spec = {.model = m, .loss = norm_loss, .inputs = in, .n_inputs = 2,
                          .optim = tg_sgd(tg_lr_constant(0.5f), 0.0f, false, 0.0f), .seed = 11, .backend = backend};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    float *x = malloc(sizeof(float) * (size_t)(R * K)), *t = malloc(sizeof(float) * (size_t)(R * D));
    if (!x || !t) st = TG_ERR_NOMEM;
    for (int64_t i = 0; st == TG_OK && i < R * K; i++) x[i] = sinf(0.37f * (float)i) + 0.2f * cosf(0.013f * (float)i);
    for (int64_t i = 0; st == TG_OK && i < R * D; i++) t[i] = cosf(0.71f * (float)i);
    for (int step = 0; step < 3 && st == TG_OK; step++)
        st = tg_session_step(s, (tg_feed[]){TG_FEED("in", x, R * K), TG_FEED("t", t, R * D)}, 2, &r->loss[step]);
    if (st == TG_OK) st = tg_session_get_param(s, "W", r->p, K * D);
    if (st == TG_OK) st = tg_session_get_param(s, "g", r->p + K * D, D);
    if (st == TG_OK) st = tg_session_get_param(s, "b", r->p + K * D + D, D);
    tg_plan_stats ps = {0};
    if (st == TG_OK && backend == TG_BACKEND_WEBGPU) st = tg_session_plan_stats(s, &ps);
    r->dispatches = ps.n_dispatches;
    r->scratch = ps.scratch_bytes;
    r->fused = r->epi = 0;
    if (st == TG_OK && backend == TG_BACKEND_WEBGPU) st = count_fused(s, &r->fused, &r->epi);
    free(x), free(t);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(1e-30, fabs(b)); }

static void compare(const char *what, const run_result *a, const run_result *b, double *lw, double *pw_) {
    *lw = 0, *pw_ = 0;
    for (int i = 0; i < 3; i++) *lw = fmax(*lw, rel(a->loss[i], b->loss[i]));
    for (int64_t i = 0; i < n_params(); i++) *pw_ = fmax(*pw_, fabs(a->p[i] - b->p[i]) / fmax(1.0, fabs(b->p[i])));
    (void)what;
}

static const char *norm_name[] = {"layer norm", "layer norm without bias", "rms norm"};

/* One configuration: fused (chunks forced when > 0) against unfused
 * WebGPU and the CPU; `drop`: the dispatches the fusion saves. */
static void check_cfg(net_cfg c, int chunks, int drop) {
    cfg = c;
    char what[128];
    snprintf(what, sizeof what, "%s%s [%lld, %lld]%s", norm_name[c.norm], c.resid ? " + residual" : "", (long long)c.R,
             (long long)c.D, chunks ? " (chunks forced)" : "");
    run_result f = {.p = calloc((size_t)n_params(), sizeof(float))}, u = {.p = calloc((size_t)n_params(), sizeof(float))},
               cpu = {.p = calloc((size_t)n_params(), sizeof(float))};
    if (!f.p || !u.p || !cpu.p) {
        CHECK(false, "%s: out of memory", what);
        free(f.p), free(u.p), free(cpu.p);
        return;
    }
    tg_wgsl_forms forms = *tg_wgsl_forced(), unfused = forms; /* the caller's forms */
    unfused.norm_backward = TG_WGSL_OFF;
    tg_wgsl_forms fused = forms;
    fused.norm_backward = chunks;
    tg_wgsl_force_forms(&fused);
    CHECK_OK(train(TG_BACKEND_WEBGPU, &f));
    tg_wgsl_force_forms(&unfused);
    CHECK_OK(train(TG_BACKEND_WEBGPU, &u));
    tg_wgsl_force_forms(&forms);
    CHECK_OK(train(TG_BACKEND_CPU, &cpu));
    double lu, pu, lc, pc;
    compare(what, &f, &u, &lu, &pu);
    compare(what, &f, &cpu, &lc, &pc);
    CHECK(lu <= 1e-5 && pu <= 2e-5, "%s: fused vs unfused WebGPU: losses %.3g, params %.3g", what, lu, pu);
    /* the loss is a mean over up to a million elements, summed in another order than the CPU's */
    CHECK(lc <= 1e-4 && pc <= 2e-5, "%s: fused WebGPU vs CPU: losses %.3g, params %.3g", what, lc, pc);
    CHECK(f.fused == 1 && u.fused == 0, "%s: %d fused norm backward kernels (%d unfused), want 1 (0)", what, f.fused, u.fused);
    CHECK(f.epi == c.resid, "%s: %d fused kernels store dx through the residual's add, want %d", what, f.epi, c.resid);
    CHECK(u.dispatches - f.dispatches == drop, "%s: %d dispatches fused, %d unfused, want %d fewer", what, f.dispatches,
          u.dispatches, drop);
    /* dx goes over gy as unfused: the sums read gy in step with it (the plan's in_step) */
    CHECK(f.scratch <= u.scratch, "%s: scratch %lld bytes fused, %lld unfused", what, (long long)f.scratch,
          (long long)u.scratch);
    printf("  %s: %d -> %d dispatches, scratch %lld -> %lld bytes; vs unfused %.2g / %.2g, vs CPU %.2g / %.2g\n", what,
           u.dispatches, f.dispatches, (long long)u.scratch, (long long)f.scratch, lu, pu, lc, pc);
    free(f.p), free(u.p), free(cpu.p);
}

/* Where the fused form does not apply, the fusion leaves the kernels as they are. */
static void check_fallback(const char *why, net_cfg c) {
    cfg = c;
    run_result f = {.p = calloc((size_t)n_params(), sizeof(float))}, u = {.p = calloc((size_t)n_params(), sizeof(float))};
    if (!f.p || !u.p) {
        CHECK(false, "%s: out of memory", why);
        free(f.p), free(u.p);
        return;
    }
    tg_wgsl_forms forms = *tg_wgsl_forced(), unfused = forms; /* the caller's forms */
    unfused.norm_backward = TG_WGSL_OFF;
    CHECK_OK(train(TG_BACKEND_WEBGPU, &f));
    tg_wgsl_force_forms(&unfused);
    CHECK_OK(train(TG_BACKEND_WEBGPU, &u));
    tg_wgsl_force_forms(&forms);
    CHECK(f.fused == 0 && f.dispatches == u.dispatches && memcmp(f.loss, u.loss, sizeof f.loss) == 0 &&
              memcmp(f.p, u.p, sizeof(float) * (size_t)n_params()) == 0,
          "%s: %d fused kernels (want 0), %d dispatches against %d, the same bits: %d", why, f.fused, f.dispatches,
          u.dispatches, memcmp(f.p, u.p, sizeof(float) * (size_t)n_params()) == 0);
    printf("  %s: unfused\n", why);
    free(f.p), free(u.p);
}

int main(void) {
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        check_webgpu_missing("test_webgpu_norm_bwd");
        return check_summary("test_webgpu_norm_bwd");
    }
    /* Unfused, norm_dx is one dispatch and the gain's sum (with the bias's
     * beside it) one, or two from 4096 rows (split in chunks), the bias's
     * sum a kernel of its own up to 8 rows (no column sum); fused, one up
     * to 16 rows (a single chunk), else two. */
    check_cfg((net_cfg){LN, true, 4099, 100}, 0, 1);
    check_cfg((net_cfg){LN, false, 3, 384}, 0, 2);
    check_cfg((net_cfg){LN_NOBIAS, true, 1, 37}, 0, 1);
    check_cfg((net_cfg){LN_NOBIAS, false, 5000, 37}, 0, 1);
    check_cfg((net_cfg){RMS, true, 600, 384}, 7, 0);
    check_cfg((net_cfg){RMS, false, 4096, 64}, 0, 1);
    check_cfg((net_cfg){LN, false, 250, 100}, 0, 0);
    /* the workgroup tree instead of subgroup sums, across the row loop's barriers */
    tg_wgsl_force_forms(&(tg_wgsl_forms){.reduce = TG_WGSL_REDUCE_TREE});
    check_cfg((net_cfg){LN, true, 2500, 384}, 0, 0);
    tg_wgsl_force_forms(NULL);
    check_fallback("rows of 32 (a thread per row)", (net_cfg){LN, true, 300, 32});
    tg_wgsl_force_forms(&(tg_wgsl_forms){.rows = TG_WGSL_ROWS_LOOP});
    check_fallback("rows walked in loops", (net_cfg){LN, true, 300, 100});
    tg_wgsl_force_forms(NULL);
    return check_summary("test_webgpu_norm_bwd");
}
