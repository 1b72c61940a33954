/* The data-parallel checks tests/test_dp.sh runs under mpirun: a small
 * addition transformer (D=32, 1 layer, AdamW with clipping, as the example
 * but narrower), its batch of 128 rows split between the ranks.
 *
 *   dp_driver match cpu|webgpu   50 steps on R ranks match one process fed all
 *                                128 rows (rank 0 runs that too): losses and
 *                                final params within the stated tolerance, and
 *                                every rank's params bitwise rank 0's
 *   dp_driver repeat FILE        rank 0 writes the 50 losses and the final params
 *                                (test_dp.sh compares two runs byte for byte)
 *   dp_driver resume DIR         25 steps, a checkpoint (written by rank 0), a new
 *                                session that loads it (every rank) and 25 more:
 *                                bitwise the losses and params of 50 unbroken steps
 *   dp_driver fail               a rank whose compile fails, or whose model differs,
 *                                or whose step fails: every rank gets the error
 *   dp_driver stall DIR SECONDS  5 steps, a checkpoint, 2 more, then the comm's timeout_s
 *                                becomes SECONDS and rank 1 stops itself (SIGSTOP): rank 0's
 *                                step fails with TG_ERR_TIMEOUT within SECONDS + 5,
 *                                naming the collective, the step and rank 1, having
 *                                slept rather than spun, and the checkpoint loads into
 *                                a session of its own; rank 0 then ends the job with
 *                                MPI_Abort (test_dp.sh reads its summary line)
 *   dp_driver allreduce MB REPS  (make bench-dist, not a check) the comm's all-reduce
 *                                of MB megabytes, timed REPS times, as JSON
 *
 * Rank 0 prints the CHECK failures and the summary line; the exit status is
 * every rank's (mpirun fails when one fails). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tensorgrad_mpi.h"
#include "../examples/gpt.h"

enum { V = 12, D = 32, LAYERS = 1, HEADS = 4, SEQ = 9, T = SEQ - 1, B = 128, STEPS = 50, PLUS = 10, EQ = 11 };
/* The stated tolerance: the mean over 2 ranks of two 64-row means rounds
 * differently from one 128-row mean (a few ulps in each gradient); 50 Adam
 * steps, which divide by sqrt(v), carry that into the losses and params. */
#define LOSS_RTOL 1e-4
#define PARAM_ATOL 1e-4

static gpt_model net;
static int64_t rows; /* rows per rank */
static const float result_mask[T] = {0, 0, 0, 0, 0, 1, 1, 1};
static int rank, ranks;

static tg_tensor loss_fn(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE);
    tg_tensor masked = tg_mul(ce, tg_constant(g, TG_SHAPE(T), result_mask));
    return tg_mul_s(tg_sum(masked, TG_ALL, false), 1.0f / (float)(rows * 3));
}

/* A loss that cannot compile: logits [rows, T, V] times a [3] vector. */
static tg_tensor bad_loss_fn(tg_graph *g, void *user) {
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    return tg_sum(tg_mul(logits, tg_zeros(g, TG_SHAPE(3))), TG_ALL, false);
    (void)user;
}

/* The global batch of step `step` (every rank draws all of it). */
static void batch(int step, int32_t *tok, int32_t *tgt) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
    for (int i = 0; i < B; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int a = (int)((s >> 33) % 100), b = (int)((s >> 17) % 100), sum = a + b;
        int32_t q[SEQ] = {a / 10, a % 10, PLUS, b / 10, b % 10, EQ, sum % 10, (sum / 10) % 10, sum / 100};
        memcpy(tok + i * T, q, T * sizeof(int32_t));
        memcpy(tgt + i * T, q + 1, T * sizeof(int32_t));
    }
}

/* A session over `share` rows per process: comm NULL for one process. */
static tg_status session_seeded(tg_model *m, tg_backend be, tg_comm *comm, int64_t share, tg_trace_fn fn, uint64_t seed,
                                tg_session **s) {
    rows = share;
    static tg_input_decl in[2];
    in[0] = (tg_input_decl){"tokens", TG_I32, TG_SHAPE(share, T)};
    in[1] = (tg_input_decl){"targets", TG_I32, TG_SHAPE(share, T)};
    tg_optim opt = tg_adamw(tg_lr_linear(5e-3f, 5e-4f, 1500), 0.01f);
    opt.clip_grad_norm = 1.0f;
    tg_train_spec spec = {.model = m, .loss = fn, .inputs = in, .n_inputs = 2, .optim = opt, .seed = seed,
                          .backend = be, .threads = 1, .comm = comm};
    return tg_session_new(&spec, s);
}

static tg_status session(tg_model *m, tg_backend be, tg_comm *comm, int64_t share, tg_trace_fn fn, tg_session **s) {
    return session_seeded(m, be, comm, share, fn, 7, s);
}

/* Steps [from, to) of the run, this process's rows [first, first + share). */
static tg_status train(tg_session *s, int from, int to, int64_t first, int64_t share, float *losses) {
    static int32_t tok[B * T], tgt[B * T];
    for (int t = from; t < to; t++) {
        batch(t, tok, tgt);
        tg_feed f[] = {TG_FEED("tokens", tok + first * T, share * T), TG_FEED("targets", tgt + first * T, share * T)};
        tg_status st = tg_session_step(s, f, 2, &losses[t]);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* Every param, concatenated in model order. */
static float *params(tg_session *s, tg_model *m, int64_t *n) {
    *n = tg_model_numel(m);
    float *p = malloc(sizeof(float) * (size_t)*n);
    int64_t at = 0;
    for (int i = 0; p && i < tg_model_param_count(m); i++) {
        const char *name = tg_model_param_name(m, i);
        int64_t k = tg_shape_numel(tg_model_param_shape(m, i));
        if (tg_session_get_param(s, name, p + at, k) != TG_OK) {
            free(p);
            return NULL;
        }
        at += k;
    }
    return p;
}

static tg_model *model(void) {
    tg_model *m = tg_model_new();
    gpt_declare(&net, m, (gpt_config){V, D, LAYERS, HEADS, SEQ});
    return m;
}

static uint64_t hash(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void match(tg_comm *comm, tg_backend be) {
    int64_t share = B / ranks;
    float dp[STEPS], one[STEPS];
    tg_model *m = model();
    tg_session *s = NULL;
    CHECK_OK(session(m, be, comm, share, loss_fn, &s));
    CHECK_OK(train(s, 0, STEPS, share * rank, share, dp));
    int64_t n;
    float *pd = s ? params(s, m, &n) : NULL;
    /* Every rank applied the same updates: the same bits everywhere. */
    uint64_t h = pd ? hash(pd, sizeof(float) * (size_t)n) : 0, *all = calloc((size_t)ranks, sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 1; r < ranks; r++) CHECK(all[r] == all[0], "rank %d's params differ from rank 0's", r);
    free(all);
    tg_session_free(s);
    if (rank == 0) { /* one process, every row */
        tg_session *ref = NULL;
        CHECK_OK(session(m, be, NULL, B, loss_fn, &ref));
        CHECK_OK(train(ref, 0, STEPS, 0, B, one));
        float *p1 = ref ? params(ref, m, &n) : NULL;
        double worst = 0, pworst = 0;
        for (int t = 0; t < STEPS; t++) {
            double rel = fabs((double)dp[t] - one[t]) / fabs((double)one[t]);
            worst = rel > worst ? rel : worst;
        }
        for (int64_t i = 0; pd && p1 && i < n; i++) pworst = fmax(pworst, fabs((double)pd[i] - p1[i]));
        CHECK(worst <= LOSS_RTOL, "%s: losses of %d ranks x %lld rows vs 1 x %d: relative difference %.3g (> %g)",
              be ? "webgpu" : "cpu", ranks, (long long)share, B, worst, LOSS_RTOL);
        CHECK(pd && p1 && pworst <= PARAM_ATOL, "%s: final params differ by %.3g (> %g)", be ? "webgpu" : "cpu",
              pworst, PARAM_ATOL);
        printf("dp_driver match %s: loss %.5f -> %.5f; %d ranks vs 1: losses within %.2g relative, params within %.2g\n",
               be ? "webgpu" : "cpu", one[0], one[STEPS - 1], ranks, worst, pworst);
        free(p1);
        tg_session_free(ref);
    }
    free(pd);
    tg_model_free(m);
}

static void repeat(tg_comm *comm, const char *path) {
    int64_t share = B / ranks, n;
    float losses[STEPS];
    tg_model *m = model();
    tg_session *s = NULL;
    CHECK_OK(session(m, TG_BACKEND_CPU, comm, share, loss_fn, &s));
    CHECK_OK(train(s, 0, STEPS, share * rank, share, losses));
    float *p = s ? params(s, m, &n) : NULL;
    FILE *f = rank == 0 ? fopen(path, "wb") : NULL;
    if (rank == 0)
        CHECK(f && p && fwrite(losses, sizeof losses, 1, f) == 1 && fwrite(p, sizeof(float), (size_t)n, f) == (size_t)n &&
                  fclose(f) == 0, "cannot write %s", path);
    free(p);
    tg_session_free(s);
    tg_model_free(m);
}

static void resume(tg_comm *comm, const char *dir) {
    int64_t share = B / ranks, first = share * rank, n1, n2;
    float whole[STEPS], parts[STEPS];
    char path[4096];
    snprintf(path, sizeof path, "%s/dp.safetensors", dir);
    tg_model *m = model();
    tg_session *a = NULL, *b = NULL;
    CHECK_OK(session(m, TG_BACKEND_CPU, comm, share, loss_fn, &a));
    CHECK_OK(train(a, 0, STEPS, first, share, whole));
    CHECK_OK(session(m, TG_BACKEND_CPU, comm, share, loss_fn, &b));
    CHECK_OK(train(b, 0, STEPS / 2, first, share, parts));
    CHECK_OK(tg_session_save(b, path));
    tg_session_free(b);
    b = NULL;
    /* A new session from another seed: everything it needs comes from the file. */
    CHECK_OK(session_seeded(m, TG_BACKEND_CPU, comm, share, loss_fn, 8, &b));
    CHECK_OK(tg_session_load(b, path));
    CHECK_OK(train(b, STEPS / 2, STEPS, first, share, parts));
    float *pa = a ? params(a, m, &n1) : NULL, *pb = b ? params(b, m, &n2) : NULL;
    CHECK(memcmp(whole + STEPS / 2, parts + STEPS / 2, sizeof(float) * (STEPS - STEPS / 2)) == 0,
          "rank %d: the resumed losses differ from the unbroken run's (step %d: %.9g vs %.9g)", rank, STEPS / 2 + 1,
          parts[STEPS / 2], whole[STEPS / 2]);
    CHECK(pa && pb && memcmp(pa, pb, sizeof(float) * (size_t)n1) == 0, "rank %d: the resumed params differ", rank);
    free(pa), free(pb);
    tg_session_free(a), tg_session_free(b);
    tg_model_free(m);
}

/* Each case runs on every rank; rank 1 is the one that breaks. */
static void fail(tg_comm *comm) {
    int64_t share = B / ranks;
    tg_model *m = model();
    tg_session *s = NULL;
    /* rank 1's loss does not compile */
    tg_status st = session(m, TG_BACKEND_CPU, comm, share, rank == 1 ? bad_loss_fn : loss_fn, &s);
    CHECK(st == TG_ERR_SHAPE && !s && (rank == 1 || strstr(tg_last_error(), "rank 1 of")),
          "rank %d: a compile failing on rank 1 gave %s: %s", rank, tg_status_name(st), tg_last_error());
    tg_session_free(s), s = NULL;
    /* rank 1's model has a param more */
    tg_model *m2 = model();
    if (rank == 1) tg_model_param(m2, "extra", TG_SHAPE(4), tg_init_zeros());
    st = session(m2, TG_BACKEND_CPU, comm, share, loss_fn, &s);
    CHECK(st == TG_ERR_STATE && !s && strstr(tg_last_error(), "differ"), "rank %d: a different model on rank 1 gave %s: %s",
          rank, tg_status_name(st), tg_last_error());
    tg_session_free(s), s = NULL;
    tg_model_free(m2);
    /* rank 1's step fails before it runs (a feed one element short): the
     * step fails on every rank with rank 1's error, none applies it, and the
     * next step runs everywhere */
    CHECK_OK(session(m, TG_BACKEND_CPU, comm, share, loss_fn, &s));
    int64_t n = 0, n2 = 0;
    float loss = 0, *before = s ? params(s, m, &n) : NULL;
    static int32_t tok[B * T], tgt[B * T];
    batch(0, tok, tgt);
    int32_t *mine = tgt + share * rank * T;
    tg_feed f[] = {TG_FEED("tokens", tok + share * rank * T, share * T), TG_FEED("targets", mine, share * T - (rank == 1))};
    st = s ? tg_session_step(s, f, 2, &loss) : TG_ERR_STATE;
    CHECK(st == TG_ERR_SIZE && (rank == 1 || strstr(tg_last_error(), "rank 1 of")),
          "rank %d: a step failing on rank 1 gave %s: %s", rank, tg_status_name(st), tg_last_error());
    float *after = s ? params(s, m, &n2) : NULL;
    CHECK(before && after && n == n2 && memcmp(before, after, sizeof(float) * (size_t)n) == 0 &&
              tg_session_step_count(s) == 0, "rank %d: the failed step changed the params", rank);
    f[1].count = share * T;
    if (s) CHECK_OK(tg_session_step(s, f, 2, &loss));
    free(after);
    free(before);
    tg_session_free(s);
    tg_model_free(m);
}

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static void stall(tg_comm *comm, const char *dir, double timeout) {
    int64_t share = B / ranks, first = share * rank;
    float losses[STEPS];
    char path[4096];
    snprintf(path, sizeof path, "%s/stall.safetensors", dir);
    comm->timeout_s = 120; /* the steps before the stall: on a loaded machine a rank may well be late by seconds */
    tg_model *m = model();
    tg_session *s = NULL;
    CHECK_OK(session(m, TG_BACKEND_CPU, comm, share, loss_fn, &s));
    CHECK_OK(train(s, 0, 5, first, share, losses));
    CHECK_OK(tg_session_save(s, path));
    CHECK_OK(train(s, 5, 7, first, share, losses));
    comm->timeout_s = timeout; /* read at every call */
    if (rank == 1) raise(SIGSTOP); /* a hung driver, a swapped-out node: it never arrives */
    double t0 = MPI_Wtime(), c0 = cpu_seconds();
    tg_status st = train(s, 7, 8, first, share, losses);
    double waited = MPI_Wtime() - t0, cpu = cpu_seconds() - c0;
    const char *msg = tg_last_error();
    CHECK(st == TG_ERR_TIMEOUT && strstr(msg, "tg_session_step: step 8: data-parallel: the all-reduce of ") &&
              strstr(msg, "timed out after ") && strstr(msg, "rank 1 of 2 did not arrive"),
          "rank %d: a stalled rank 1 gave %s: %s", rank, tg_status_name(st), msg);
    printf("dp_driver stall: %s\n", msg);
    CHECK(waited >= 0.9 * timeout && waited <= timeout + 5, "rank %d: the step gave up after %.2f s (timeout %g s)", rank,
          waited, timeout);
    /* Waiting, it slept: a core spinning for the whole wait would count
     * about waited seconds, even on a machine shared many ways. */
    CHECK(cpu < 0.1 * waited, "rank %d: %.3f s of CPU time in a %.2f s wait", rank, cpu, waited);
    CHECK(tg_mpi_comm_failed(comm), "rank %d: the comm does not say it failed", rank);
    CHECK(tg_session_step(s, NULL, 0, NULL) != TG_OK, "rank %d: a step after the timeout passed", rank);
    /* The last checkpoint (after step 5) is whole and loads. */
    tg_session *alone = NULL;
    CHECK_OK(session(m, TG_BACKEND_CPU, NULL, share, loss_fn, &alone));
    CHECK_OK(tg_session_load(alone, path));
    CHECK(tg_session_step_count(alone) == 5, "the last checkpoint holds step %lld, want 5",
          (long long)tg_session_step_count(alone));
    tg_session_free(alone);
    tg_session_free(s);
    tg_model_free(m);
}

/* make bench-dist: the comm's all-reduce of `mb` megabytes, every rank
 * entering together (a barrier first), `reps` times; rank 0 prints JSON. */
static void allreduce_time(tg_comm *comm, double mb, int reps) {
    int64_t n = (int64_t)(mb * 1e6 / 4);
    float *x = calloc((size_t)n + 1, sizeof(float));
    double best = 1e30, total = 0;
    for (int r = 0; x && r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        CHECK_OK(comm->allreduce_sum_f32(comm, x, n));
        double t = MPI_Wtime() - t0;
        best = t < best ? t : best, total += t;
    }
    if (rank == 0 && x)
        printf("{\"allreduce_bytes\": %lld, \"ranks\": %d, \"min_ms\": %.3f, \"mean_ms\": %.3f, \"reps\": %d}\n",
               (long long)n * 4, ranks, 1e3 * best, 1e3 * total / reps, reps);
    free(x);
}

int main(int argc, char **argv) {
    int level;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    tg_comm *comm = tg_mpi_comm(MPI_COMM_WORLD);
    const char *mode = argc > 1 ? argv[1] : "";
    char name[64];
    snprintf(name, sizeof name, "dp_driver %s", mode);
    if (!comm) CHECK(false, "tg_mpi_comm failed");
    else if (B % ranks) CHECK(false, "%d ranks do not divide the batch of %d rows", ranks, B);
    else if (!strcmp(mode, "match") && argc > 2)
        match(comm, !strcmp(argv[2], "webgpu") ? TG_BACKEND_WEBGPU : TG_BACKEND_CPU);
    else if (!strcmp(mode, "repeat") && argc > 2) repeat(comm, argv[2]);
    else if (!strcmp(mode, "resume") && argc > 2) resume(comm, argv[2]);
    else if (!strcmp(mode, "fail")) fail(comm);
    else if (!strcmp(mode, "stall") && argc > 3 && ranks == 2) {
        stall(comm, argv[2], atof(argv[3]));
        int rc = check_summary(name); /* rank 1 is stopped: no agreement, no MPI_Finalize */
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc ? 1 : 3);
    }
    else if (!strcmp(mode, "allreduce") && argc > 3) allreduce_time(comm, atof(argv[2]), atoi(argv[3]));
    else CHECK(false, "usage: dp_driver match cpu|webgpu | repeat FILE | resume DIR | fail | stall DIR SECONDS (2 "
               "ranks) | allreduce MB REPS");
    int bad = check_fail, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int rc = rank == 0 ? check_summary(name) : check_fail != 0;
    tg_mpi_comm_free(comm);
    MPI_Finalize();
    return rc || any;
}
