/* The thread pool (every task once, in the caller's floating-point mode,
 * whatever the thread count) and the CPU backend's flushing of subnormals:
 * applied on every thread of a run, never left behind in the caller. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>

#include "check.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"

enum { MAX_TASKS = 9000 };

typedef struct {
    atomic_int runs[MAX_TASKS];
    tg_fpmode mode[MAX_TASKS];
    atomic_int threads_seen[8];
} job;

static void task(void *arg, int t, int thread) {
    job *j = arg;
    atomic_fetch_add(&j->runs[t], 1);
    j->mode[t] = tg_fpmode_get();
    atomic_fetch_add(&j->threads_seen[thread], 1);
}

static void every_task_once(void) {
    static job j;
    static const int counts[] = {1, 2, 3, 7, 64, 4095, 4096, 4097, MAX_TASKS};
    tg_fpmode caller = tg_fpmode_get();
    for (int th = 1; th <= 4; th++) {
        tg_pool *p = tg_pool_new(th);
        CHECK(p != NULL, "tg_pool_new(%d)", th);
        if (!p) continue;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            for (int flush = 0; flush <= 1; flush++) {
                memset(&j, 0, sizeof j);
                tg_fpmode want = flush ? tg_fpmode_flush(caller) : caller;
                tg_fpmode_set(want);
                tg_pool_run(p, counts[c], task, &j);
                tg_fpmode_set(caller);
                int bad = 0, wrong_mode = 0;
                for (int t = 0; t < counts[c]; t++) {
                    bad += atomic_load(&j.runs[t]) != 1;
                    wrong_mode += !tg_fpmode_same(j.mode[t], want);
                }
                CHECK(bad == 0, "%d threads, %d tasks: %d tasks did not run exactly once", th, counts[c], bad);
                CHECK(wrong_mode == 0, "%d threads, %d tasks: %d tasks ran in another floating-point mode", th,
                      counts[c], wrong_mode);
            }
        }
        tg_pool_free(p);
    }
}

/* y = x * w over a tensor big enough to use every thread, x subnormal. */
static tg_param wparam;
static tg_tensor scale_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor y = tg_capture(tg_mul(tg_input(g, "x"), tg_use(g, wparam)), "y");
    return tg_sum(y, TG_ALL, false);
}

static void flushes_subnormals(void) {
    enum { N = 1 << 17 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = i % 2 ? FLT_MIN / 4 : 1.0f; /* a subnormal, a normal */
    for (int th = 1; th <= 2; th++) {
        tg_model *m = tg_model_new();
        wparam = tg_model_param(m, "w", TG_SHAPE(N), tg_init_ones());
        tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(N)}};
        tg_train_spec spec = {.model = m, .loss = scale_loss, .inputs = in, .n_inputs = 1,
                              .optim = {.kind = TG_OPT_NONE}, .threads = th};
        tg_session *s = NULL;
        CHECK_OK(tg_session_new(&spec, &s));
        if (!s) {
            tg_model_free(m);
            continue;
        }
        tg_fpmode caller = tg_fpmode_get();
        for (int flush = 0; flush <= 1; flush++) {
            tg_fpmode mine = flush ? tg_fpmode_flush(caller) : caller;
            tg_fpmode_set(mine);
            CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, N)}, 1, NULL));
            tg_fpmode after = tg_fpmode_get();
            tg_fpmode_set(caller);
            CHECK(tg_fpmode_same(after, mine), "the step changed the caller's floating-point mode");
            CHECK_OK(tg_session_read(s, "y", y, N));
            int kept = 0, wrong = 0;
            for (int i = 0; i < N; i++) {
                kept += i % 2 && y[i] != 0.0f;
                wrong += !(i % 2) && y[i] != 1.0f;
            }
            CHECK(kept == 0 && wrong == 0, "%d threads: %d subnormal products kept, %d normal ones wrong", th, kept,
                  wrong);
        }
        /* The caller's own arithmetic still keeps subnormals (unless it flushes itself). */
        volatile float a = FLT_MIN, b = 0.25f;
        CHECK(a * b > 0.0f, "subnormals are flushed in the caller after a step");
        tg_session_free(s);
        tg_model_free(m);
    }
}

/* Column sums in row blocks: the same bits for any thread count, close to
 * a double-precision sum. */
static void blocked_sums(void) {
    enum { R = 1000, C = 37 };
    static float x[R * C], y[4][C];
    uint64_t st = 5;
    for (int i = 0; i < R * C; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((st >> 40) % 2001) * 1e-3f - 1.0f;
    }
    CHECK(tg_cpu_row_blocks(R) > 1, "%d rows are summed in one block", R);
    for (int th = 1; th <= 4; th++) {
        tg_pool *p = tg_pool_new(th);
        cpu_ctx c = {.pool = p, .threads = tg_pool_threads(p)};
        tg_cpu_colsum(&c, x, R, C, y[th - 1]);
        tg_pool_free(p);
    }
    for (int th = 2; th <= 4; th++)
        CHECK(memcmp(y[0], y[th - 1], sizeof y[0]) == 0, "column sums on %d threads differ from 1 thread", th);
    for (int j = 0; j < C; j++) {
        double ref = 0;
        for (int r = 0; r < R; r++) ref += x[r * C + j];
        CHECK(fabs(y[0][j] - ref) < 1e-3, "column %d sums to %g, want %g", j, y[0][j], ref);
    }
}

int main(void) {
    every_task_once();
    blocked_sums();
    flushes_subnormals();
    return check_summary("test_pool");
}
