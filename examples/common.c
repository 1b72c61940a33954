/* Helpers shared by the examples. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "examples.h"

double ex_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A 64-bit LCG: data generation only (the library has its own PRNG for params). */
uint64_t ex_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

float ex_uniform(uint64_t *s) { return (float)(ex_rand(s) >> 7) * (1.0f / 16777216.0f); }

/* The directory above the running binary (build/tg -> the repo root). */
static bool repo_root(char *out, size_t n) {
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return false;
    exe[k] = 0;
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return false;
        *slash = 0;
    }
    snprintf(out, n, "%s", exe);
    return true;
}

bool ex_data_path(const char *what, char *out, size_t n) {
    char root[4096], cmd[4300];
    if (!repo_root(root, sizeof root)) snprintf(root, sizeof root, ".");
    snprintf(cmd, sizeof cmd, "%s/scripts/fetch-data.sh", root);
    if (access(cmd, X_OK) != 0) {
        /* An installed tg has no source tree to fetch into: only the system's word list. */
        if (strcmp(what, "words") != 0 || access("/usr/share/dict/words", R_OK) != 0) return false;
        snprintf(out, n, "/usr/share/dict/words");
        return true;
    }
    /* scripts/fetch-data.sh prints the path (fetching the .deb only when needed). */
    snprintf(cmd, sizeof cmd, "'%s/scripts/fetch-data.sh' '%s'", root, what);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    bool ok = fgets(out, (int)n, p) != NULL;
    int rc = pclose(p);
    if (!ok || rc != 0) return false;
    out[strcspn(out, "\n")] = 0;
    return out[0] != 0;
}

float ex_lr(const tg_example_opts *o, float peak) { return o->lr > 0 ? o->lr : peak; }
float ex_lr_at(const tg_example_opts *o, float peak, float value) { return o->lr > 0 ? value * (o->lr / peak) : value; }

int ex_target(const char *metric, double value, const char *cmp, double target) {
    bool met = !strcmp(cmp, ">=") ? value >= target : !strcmp(cmp, "<=") ? value <= target : value < target;
    if (met) return 0;
    fprintf(stderr, "tg: the run missed its target: %s=%.6g, the target is %s %g (exit status 2)\n", metric, value, cmp,
            target);
    return 2;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ex_bench_report(const char *model, const tg_session *s, tg_backend be, double *ms, int n) {
    ex_bench_report_compiled(model, s, be, ms, n, 0);
}

void ex_bench_report_compiled(const char *model, const tg_session *s, tg_backend be, double *ms, int n, double compile_s) {
    tg_plan_stats ps = {0};
    tg_session_plan_stats(s, &ps);
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    /* Data parallel: the ranks and the all-reduce per step (every step's mean, warm-up included). */
    tg_comm_stats cs = {0};
    char dp[200] = "", compile[48] = "";
    if (compile_s > 0) snprintf(compile, sizeof compile, ", \"compile_ms\": %.1f", 1e3 * compile_s);
    if (tg_session_comm_stats(s, &cs) == TG_OK && cs.steps > 0)
        snprintf(dp, sizeof dp, ", \"ranks\": %d, \"allreduce_bytes\": %lld, \"allreduce_ms\": %.4f, \"exposed_ms\": %.4f",
                 cs.ranks, (long long)cs.bytes, 1e3 * cs.allreduce_s / (double)cs.steps,
                 1e3 * cs.exposed_s / (double)cs.steps);
    printf("{\"bench\": \"%s\", \"impl\": \"tensorgrad\", \"backend\": \"%s\", \"median_step_ms\": %.4f, "
           "\"min_step_ms\": %.4f, \"steps\": %d, \"dispatches\": %d, \"planned_bytes\": %lld, \"naive_bytes\": %lld%s%s}\n",
           model, be == TG_BACKEND_WEBGPU ? "webgpu" : "cpu", n ? ms[n / 2] : 0.0, n ? ms[0] : 0.0, n,
           ps.n_dispatches, (long long)ps.planned_bytes, (long long)ps.naive_bytes, compile, dp);
}

int ex_plan_report(const char *model, const tg_session *s, tg_backend be, int mode) {
    tg_plan_stats ps = {0};
    if (tg_session_plan_stats(s, &ps) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        return 1;
    }
    const char *bk = be == TG_BACKEND_WEBGPU ? "webgpu" : "cpu";
    if (mode == 2) {
        printf("{\"plan\": \"%s\", \"backend\": \"%s\", \"dispatches\": %d, \"planned_bytes\": %lld, "
               "\"naive_bytes\": %lld, \"param_bytes\": %lld, \"grad_bytes\": %lld, \"state_bytes\": %lld, "
               "\"input_bytes\": %lld, \"pooled_bytes\": %lld, \"other_bytes\": %lld, \"workspace_bytes\": %lld, "
               "\"kernels\": %d, \"writebacks\": %d}\n",
               model, bk, ps.n_dispatches, (long long)ps.planned_bytes, (long long)ps.naive_bytes,
               (long long)ps.param_bytes, (long long)ps.grad_bytes, (long long)ps.state_bytes,
               (long long)ps.input_bytes, (long long)ps.scratch_bytes, (long long)ps.other_bytes,
               (long long)ps.workspace_bytes, ps.n_kernels, ps.n_writebacks);
        return 0;
    }
    printf("%s on %s: %d dispatches per step (%d graph nodes run kernels, %d writebacks, %d of them copies)\n", model, bk,
           ps.n_dispatches, ps.n_kernels, ps.n_writebacks, ps.n_writeback_copies);
    printf("  params       %10.2f MB\n  optim state  %10.2f MB\n  inputs       %10.2f MB\n", ps.param_bytes / 1e6,
           ps.state_bytes / 1e6, ps.input_bytes / 1e6);
    printf("  pooled       %10.2f MB (activations and the %.2f MB of grads, reused by liveness)\n"
           "  other        %10.2f MB\n",
           ps.scratch_bytes / 1e6, ps.grad_bytes / 1e6, ps.other_bytes / 1e6);
    if (ps.workspace_bytes) printf("  kernel workspace %6.2f MB\n", ps.workspace_bytes / 1e6);
    printf("  planned      %10.2f MB\n  one buffer per tensor %.2f MB (%.0f%% saved)\n", ps.planned_bytes / 1e6,
           ps.naive_bytes / 1e6, ps.naive_bytes ? 100.0 * (1.0 - (double)ps.planned_bytes / (double)ps.naive_bytes) : 0.0);
    return 0;
}

int ex_bench_loop(const char *model, tg_session *s, tg_backend be, const tg_feed *feeds, int n_feeds, int steps) {
    return ex_bench_loop_compiled(model, s, be, feeds, n_feeds, steps, 0);
}

int ex_bench_loop_compiled(const char *model, tg_session *s, tg_backend be, const tg_feed *feeds, int n_feeds, int steps,
                           double compile_s) {
    double *ms = calloc((size_t)steps + 1, sizeof(double));
    float loss;
    tg_status st = ms ? TG_OK : TG_ERR_NOMEM;
    double start = ex_now();
    for (int i = 0; st == TG_OK; i++) {
        double spent = ex_now() - start;
        bool more = i < EX_BENCH_WARMUP ? i < EX_BENCH_WARMUP_MIN || spent < EX_BENCH_WARMUP_LONG_S
                                        : spent < EX_BENCH_WARMUP_S && i < EX_BENCH_WARMUP_MAX;
        if (!more) break;
        st = tg_session_step(s, feeds, n_feeds, &loss);
    }
    for (int i = 0; i < steps && st == TG_OK; i++) {
        double t0 = ex_now();
        st = tg_session_step(s, feeds, n_feeds, &loss); /* reading the loss waits for the step, as the peer's .item() */
        ms[i] = 1e3 * (ex_now() - t0);
    }
    if (st == TG_OK) ex_bench_report_compiled(model, s, be, ms, steps, compile_s);
    else fprintf(stderr, "error: %s\n", st == TG_ERR_NOMEM ? "out of memory" : tg_last_error());
    free(ms);
    return st == TG_OK ? 0 : 1;
}

int64_t ex_shard(const tg_example_opts *o, int64_t batch, int64_t *first) {
    int ranks = o->comm ? o->comm->size : 1, rank = o->comm ? o->comm->rank : 0;
    if (batch % ranks != 0) {
        fprintf(stderr, "tg: --dp: %d ranks do not divide the batch of %lld rows\n", ranks, (long long)batch);
        return 0;
    }
    *first = batch / ranks * rank;
    return batch / ranks;
}

void ex_final_loss(const tg_example_opts *o, ex_run *r, const tg_session *s, float loss) {
    if (r && !r->quiet) tg_progress_end(&r->prog);
    printf("final loss=%.6g\n", loss);
    tg_comm_stats cs;
    if (!o->comm || tg_session_comm_stats(s, &cs) != TG_OK || cs.steps == 0) return;
    double step = 1e3 * cs.step_s / (double)cs.steps, ar = 1e3 * cs.allreduce_s / (double)cs.steps,
           exp = 1e3 * cs.exposed_s / (double)cs.steps;
    printf("data-parallel: %d ranks, %.2f MB all-reduced per step in %d buckets: all-reduce %.3f ms of a %.3f ms "
           "step (%.1f%%), %.3f ms of it not hidden behind the backward (%.1f%%)\n",
           cs.ranks, (double)cs.bytes / 1e6, cs.buckets, ar, step, step > 0 ? 100 * ar / step : 0.0, exp,
           step > 0 ? 100 * exp / step : 0.0);
}
