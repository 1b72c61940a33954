/* tg_gemm against a double-precision reference on many shapes (odd sizes,
 * tile and block edges, K = 0 and 1, transposed operands, padded leading
 * dimensions, batches with shared and per-batch B) on 1..3 and 6 threads
 * (more than the 4 k blocks a weight gradient has at most), and the result
 * bitwise identical whatever the thread count.
 *
 * Tolerance: any order of float summation of K products is within
 * K * u * sum_k |a_ik * b_kj| of the exact value (u = 2^-24, plus one
 * rounding of the products); we allow (K + 2) * FLT_EPSILON = 2 (K + 2) u
 * times that sum, which is still far below the size of one lost or doubled
 * product for the random inputs used here.
 *
 * Then whole training sessions: the CPU executor's fused and specialized
 * steps must give bitwise the losses and weights of the op-table kernels,
 * on 1..3 threads, including the cases where a fusion must be refused. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <float.h>
#include <math.h>

#include "check.h"
#include "cpu/cpu.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0) - 1.0);
}

typedef struct {
    int64_t batch, M, N, K;
    bool ta, tb, shared_b;
    int64_t pad; /* extra elements per row of A, B and C */
    int epi;     /* bit 0: bias, bit 1: relu, bit 2: gate, bit 3: a residual */
} shape;

#define SENTINEL 12345.0f

/* Runs one case on `pool` into C (allocated by the caller, batch * M * ldc). */
static void run(tg_pool *pool, const shape *s, const float *A, const float *B, float *C, const tg_gemm_epi *e) {
    int64_t lda = (s->ta ? s->M : s->K) + s->pad, ldb = (s->tb ? s->K : s->N) + s->pad, ldc = s->N + s->pad;
    int64_t arows = s->ta ? s->K : s->M, brows = s->tb ? s->N : s->K;
    tg_gemm_args g = {s->batch, s->M, s->N, s->K, A, B, C, lda, ldb, ldc, arows * lda, s->shared_b ? 0 : brows * ldb,
                      s->M * ldc, s->ta, s->tb, s->epi ? e : NULL, false};
    tg_gemm(pool, &g);
}

static int split_cases; /* cases tg_gemm shares between threads */

static int check_case(tg_pool **pools, int n_pools, const shape *s) {
    int64_t lda = (s->ta ? s->M : s->K) + s->pad, ldb = (s->tb ? s->K : s->N) + s->pad, ldc = s->N + s->pad;
    int64_t arows = s->ta ? s->K : s->M, brows = s->tb ? s->N : s->K;
    int64_t na = s->batch * arows * lda, nb = (s->shared_b ? 1 : s->batch) * brows * ldb, nc = s->batch * s->M * ldc;
    float *A = malloc(sizeof(float) * (size_t)(na + 1)), *B = malloc(sizeof(float) * (size_t)(nb + 1));
    float *C = malloc(sizeof(float) * (size_t)(nc + 1)), *C1 = malloc(sizeof(float) * (size_t)(nc + 1));
    float *bias = malloc(sizeof(float) * (size_t)(s->N + 1)), *gate = malloc(sizeof(float) * (size_t)(nc + 1));
    float *res = malloc(sizeof(float) * (size_t)(nc + 1));
    for (int64_t i = 0; i < na; i++) A[i] = frand();
    for (int64_t i = 0; i < nb; i++) B[i] = frand();
    for (int64_t i = 0; i < s->N; i++) bias[i] = frand();
    for (int64_t i = 0; i < nc; i++) gate[i] = frand(), res[i] = frand();
    tg_gemm_epi epi = {s->epi & 1 ? bias : NULL, (s->epi & 2) != 0, s->epi & 4 ? gate : NULL, ldc, s->M * ldc,
                       s->epi & 8 ? res : NULL, ldc, s->M * ldc};
    tg_gemm_args probe = {s->batch, s->M, s->N, s->K, A, B, C, lda, ldb, ldc, 0, s->shared_b ? 0 : 1, 0, s->ta, s->tb,
                          NULL, false};
    split_cases += tg_gemm_splits(&probe);
    int fails = 0;
    char what[160];
    snprintf(what, sizeof what, "batch=%lld M=%lld N=%lld K=%lld ta=%d tb=%d shared_b=%d pad=%lld epi=%d",
             (long long)s->batch, (long long)s->M, (long long)s->N, (long long)s->K, s->ta, s->tb, s->shared_b,
             (long long)s->pad, s->epi);
    for (int p = 0; p < n_pools; p++) {
        /* NaN in C: the result must not depend on what C held; the padding
         * columns hold a sentinel that must survive. */
        for (int64_t i = 0; i < nc; i++) C[i] = (i % ldc) < s->N ? NAN : SENTINEL;
        run(pools[p], s, A, B, C, &epi);
        if (p == 0) {
            double worst = 0;
            bool pad_ok = true;
            for (int64_t b = 0; b < s->batch; b++) {
                const float *a = A + b * arows * lda, *bb = B + (s->shared_b ? 0 : b) * brows * ldb;
                const float *c = C + b * s->M * ldc;
                for (int64_t i = 0; i < s->M; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        if (j >= s->N) {
                            pad_ok &= c[i * ldc + j] == SENTINEL;
                            continue;
                        }
                        double ref = 0, mag = 0;
                        for (int64_t k = 0; k < s->K; k++) {
                            double x = s->ta ? a[k * lda + i] : a[i * lda + k];
                            double y = s->tb ? bb[j * ldb + k] : bb[k * ldb + j];
                            ref += x * y;
                            mag += fabs(x * y);
                        }
                        /* the epilogue: one more rounding for the bias; relu and the gate are exact */
                        double tol = (double)(s->K + 2) * FLT_EPSILON * mag;
                        if (epi.bias) ref += bias[j], tol += (fabs(ref) + fabs(bias[j])) * FLT_EPSILON;
                        if (epi.resid) {
                            double r = res[b * s->M * ldc + i * ldc + j];
                            ref += r, tol += (fabs(ref) + fabs(r)) * FLT_EPSILON;
                        }
                        if (epi.relu) ref = ref > 0 ? ref : 0;
                        if (epi.gate && !(gate[b * s->M * ldc + i * ldc + j] > 0)) ref = 0, tol = 0;
                        double err = fabs((double)c[i * ldc + j] - ref);
                        if (!(err <= tol)) worst = isnan(err) ? INFINITY : fmax(worst, err / (tol > 0 ? tol : 1e-30));
                    }
            }
            CHECK(worst == 0, "%s: error %.3g x the tolerance", what, worst);
            CHECK(pad_ok, "%s: wrote outside C's N columns", what);
            fails += worst != 0 || !pad_ok;
            memcpy(C1, C, sizeof(float) * (size_t)nc);
        } else {
            bool same = memcmp(C, C1, sizeof(float) * (size_t)nc) == 0;
            CHECK(same, "%s: %d threads differ bitwise from %d", what, tg_pool_threads(pools[p]),
                  tg_pool_threads(pools[0]));
            fails += !same;
        }
    }
    free(A);
    free(B);
    free(C);
    free(C1);
    free(bias);
    free(gate);
    free(res);
    return fails;
}

/* ---- sessions: fused and specialized CPU steps change no bits ---- */

typedef struct {
    int n_layers;
    tg_linear l[4];
} mlp;

static tg_tensor mlp_loss(tg_graph *g, void *user) {
    mlp *net = user;
    tg_tensor h = tg_input(g, "x");
    for (int i = 0; i < net->n_layers; i++) {
        h = tg_linear_fwd(g, &net->l[i], h);
        if (i + 1 < net->n_layers) h = tg_relu(h);
    }
    return tg_mse(h, tg_input(g, "y"));
}

/* Trains an MLP (widths w[0..n]) for `steps` steps on fixed data; losses
 * and the first layer's weights after training go to the caller. */
static bool train(const int64_t *w, int n, int64_t batch, int threads, bool generic, int steps, float *losses,
                  float *w0) {
    tg_model *m = tg_model_new();
    mlp net = {n, {{0}}};
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "l%d", i);
        net.l[i] = tg_linear_new(m, name, w[i], w[i + 1], true);
    }
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(batch, w[0])}, {"y", TG_F32, TG_SHAPE(batch, w[n])}};
    tg_train_spec spec = {.model = m, .loss = mlp_loss, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(5e-3f)), .seed = 7, .threads = threads};
    tg_cpu_use_generic_steps(generic);
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_cpu_use_generic_steps(false);
    CHECK(st == TG_OK, "tg_session_new: %s", tg_last_error());
    bool ok = st == TG_OK;
    int64_t nx = batch * w[0], ny = batch * w[n];
    float *x = malloc(sizeof(float) * (size_t)nx), *y = malloc(sizeof(float) * (size_t)ny);
    uint64_t keep = rng;
    rng = 12345;
    for (int64_t i = 0; i < nx; i++) x[i] = frand() * 3.0f;
    for (int64_t i = 0; i < ny; i++) y[i] = sinf(x[i % nx]);
    rng = keep;
    tg_feed feeds[] = {TG_FEED("x", x, nx), TG_FEED("y", y, ny)};
    for (int i = 0; ok && i < steps; i++) ok = tg_session_step(s, feeds, 2, &losses[i]) == TG_OK;
    if (ok) ok = tg_session_get_param(s, "l0.W", w0, w[0] * w[1]) == TG_OK;
    CHECK(ok, "training failed: %s", tg_last_error());
    tg_session_free(s);
    tg_model_free(m);
    free(x);
    free(y);
    return ok;
}

/* A matmul whose input dies at it, a kernel that may reuse that input's
 * memory, then the matmul's relu: the fused step runs at the relu's turn,
 * so it must see that the input was overwritten and not fuse. */
static tg_tensor reuse_loss(tg_graph *g, void *user) {
    const tg_param *p = user;
    tg_tensor x = tg_input(g, "x");
    tg_tensor a = tg_mul_s(x, 2.0f);
    tg_tensor h = tg_matmul(a, tg_use(g, p[0]));
    tg_tensor z = tg_mul(tg_add_s(x, 1.0f), tg_use(g, p[1]));
    tg_tensor r = tg_relu(h);
    return tg_add(tg_mse(r, tg_input(g, "y")), tg_mean(z, TG_ALL, false));
}

static void check_reuse(void) {
    float ref[6] = {0}, got[6] = {1};
    for (int generic = 1; generic >= 0; generic--) {
        tg_model *m = tg_model_new();
        tg_param p[2] = {tg_model_param(m, "W", TG_SHAPE(16, 16), tg_init_randn(0.5f)),
                         tg_model_param(m, "v", TG_SHAPE(16), tg_init_randn(0.5f))};
        tg_model_freeze(m, p[0]);
        tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(64, 16)}, {"y", TG_F32, TG_SHAPE(64, 16)}};
        tg_train_spec spec = {.model = m, .loss = reuse_loss, .user = p, .inputs = in, .n_inputs = 2,
                              .optim = tg_adam(tg_lr_constant(1e-2f)), .seed = 3, .threads = 2};
        float x[64 * 16], y[64 * 16];
        rng = 99;
        for (int i = 0; i < 64 * 16; i++) x[i] = frand(), y[i] = frand();
        tg_cpu_use_generic_steps(generic);
        tg_session *s = NULL;
        CHECK_OK(tg_session_new(&spec, &s));
        tg_cpu_use_generic_steps(false);
        tg_feed feeds[] = {TG_FEED("x", x, 64 * 16), TG_FEED("y", y, 64 * 16)};
        for (int i = 0; s && i < 6; i++) CHECK_OK(tg_session_step(s, feeds, 2, generic ? &ref[i] : &got[i]));
        tg_session_free(s);
        tg_model_free(m);
    }
    CHECK(memcmp(ref, got, sizeof ref) == 0, "matmul input reused before the fused step: %.9g vs %.9g", got[5], ref[5]);
}

static void check_sessions(void) {
    /* The sin MLP; one with k blocks in the backward products (K = 1000,
     * more than any KC), where relu's gradient may not be fused over its own
     * input; one
     * with odd widths; one with 1-wide hidden layers (matrix-vector
     * products with relu's gradient fused in). */
    static const int64_t widths[][5] = {{1, 64, 64, 1}, {3, 1000, 1000, 2}, {5, 37, 19, 33, 3}, {4, 1, 7, 1, 2},
                                        {8, 256, 256, 4}};
    static const int depth[] = {3, 3, 4, 4, 3};
    static const int64_t batches[] = {256, 24, 29, 50, 512};
    enum { STEPS = 12 };
    for (int c = 0; c < 5; c++) {
        float ref[STEPS], got[STEPS];
        float *w_ref = malloc(sizeof(float) * 512 * 512), *w_got = malloc(sizeof(float) * 512 * 512);
        int64_t nw = widths[c][0] * widths[c][1];
        if (!train(widths[c], depth[c], batches[c], 1, true, STEPS, ref, w_ref)) continue;
        CHECK(ref[STEPS - 1] < ref[0], "model %d: loss did not fall (%g -> %g)", c, ref[0], ref[STEPS - 1]);
        for (int threads = 1; threads <= 3; threads++) {
            if (!train(widths[c], depth[c], batches[c], threads, false, STEPS, got, w_got)) continue;
            CHECK(memcmp(ref, got, sizeof ref) == 0 && memcmp(w_ref, w_got, sizeof(float) * (size_t)nw) == 0,
                  "model %d, %d threads: fused steps differ from op-table kernels (loss %.9g vs %.9g)", c, threads,
                  got[STEPS - 1], ref[STEPS - 1]);
        }
        free(w_ref);
        free(w_got);
    }
}

/* Thread count precedence, as the public header states it: spec.threads,
 * then tg_set_default_threads, then TG_THREADS, then the CPUs. */
static void check_threads(void) {
    setenv("TG_THREADS", "3", 1);
    tg_set_default_threads(2);
    CHECK(tg_default_threads() == 2, "tg_set_default_threads must win over TG_THREADS, got %d", tg_default_threads());
    tg_set_default_threads(0);
    CHECK(tg_default_threads() == 3, "TG_THREADS=3 must apply, got %d", tg_default_threads());
    unsetenv("TG_THREADS");
    CHECK(tg_default_threads() >= 1, "default thread count");
}

int main(void) {
    check_threads();
    tg_pool *pools[4];
    for (int t = 0; t < 4; t++) pools[t] = tg_pool_new(t < 3 ? t + 1 : 6);
    CHECK(pools[0] && pools[1] && pools[2] && pools[3], "tg_pool_new");
    CHECK(tg_gemm_kernel_name()[0] != 0, "kernel name");

    /* Sizes around the tile (12 x 32, 8 x 16 generic) and block (KC 256,
     * MC 192) edges, tiny ones, and the sin MLP's. */
    static const int64_t mk[][3] = {
        {1, 1, 1},    {1, 1, 0},    {5, 7, 0},     {3, 1, 1},     {1, 64, 1},    {256, 64, 1},  {256, 1, 64},
        {64, 64, 256}, {256, 64, 64}, {1, 64, 256},  {2, 3, 4},     {7, 13, 5},    {12, 32, 8},   {13, 33, 9},
        {11, 31, 17}, {24, 64, 64}, {25, 65, 66},  {37, 95, 3},   {100, 7, 300}, {193, 97, 257}, {200, 40, 513},
        {45, 300, 70}, {20, 3100, 20}, {384, 96, 130}, {97, 129, 2}, {70, 260, 600}, {1, 50, 300}, {50, 1, 300},
        {200, 600, 400}, {40, 2100, 390}, /* the packed path, and past NC columns */
        {150, 300, 1100}, {100, 150, 1600}, /* k blocks on the packed path (A transposed), one KC block each or two */
    };
    static const int64_t bmk[][4] = {{3, 17, 40, 33}, {4, 8, 8, 8}, {2, 64, 64, 256}, {5, 30, 70, 1}, {3, 200, 50, 40},
                                     {2, 1, 40, 300}, {3, 20, 1, 30}};
    int n_shapes = (int)(sizeof mk / sizeof mk[0]), n_batched = (int)(sizeof bmk / sizeof bmk[0]);
    int cases = 0;
    /* Each kernel this machine has: the best one, and the portable one that
     * CPUs without AVX-512 get. */
    for (int generic = 0; generic < 2; generic++) {
        tg_gemm_use_generic(generic);
        printf("test_gemm: kernel %s\n", tg_gemm_kernel_name());
        for (int i = 0; i < n_shapes; i++)
            for (int t = 0; t < 4; t++) {
                shape s = {1, mk[i][0], mk[i][1], mk[i][2], t & 1, t >> 1, false, (i % 3) * 5, (i * 5 + t) % 16};
                check_case(pools, 4, &s);
                cases++;
            }
        /* Batches: per-batch and shared B, each transposition. */
        for (int i = 0; i < n_batched; i++)
            for (int t = 0; t < 8; t++) {
                shape s = {bmk[i][0], bmk[i][1], bmk[i][2], bmk[i][3], t & 1, (t >> 1) & 1, t >> 2, i % 2 ? 3 : 0,
                           (i * 3 + t) % 16};
                check_case(pools, 4, &s);
                cases++;
            }
    }
    tg_gemm_use_generic(false);
    /* batch = 0 and M = 0 / N = 0 must not touch C. */
    float c0[4] = {1, 2, 3, 4}, a0[4] = {1, 1, 1, 1};
    tg_gemm_args z = {0, 2, 2, 1, a0, a0, c0, 1, 2, 2, 2, 2, 4, false, false, NULL, false};
    tg_gemm(pools[1], &z);
    z.batch = 1, z.M = 0;
    tg_gemm(pools[1], &z);
    CHECK(c0[0] == 1 && c0[3] == 4, "empty products must not write C");
    /* relu's gradient fused over its own gate, and a residual add over the
     * residual (C overwrites what the epilogue reads) on the shapes
     * tg_gemm_single_pass allows: the same bits as out of place. */
    static const int64_t ip[][4] = {{40, 70, 300, 0}, {96, 64, 1024, 1}, {30, 50, 700, 1}};
    for (int c = 0; c < 3; c++) {
        int64_t M = ip[c][0], N = ip[c][1], K = ip[c][2];
        bool ta = ip[c][3];
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
        float *G = malloc(sizeof(float) * (size_t)(M * N)), *C = malloc(sizeof(float) * (size_t)(M * N));
        for (int64_t i = 0; i < M * K; i++) A[i] = frand();
        for (int64_t i = 0; i < K * N; i++) B[i] = frand();
        for (int64_t i = 0; i < M * N; i++) G[i] = frand();
        for (int resid = 0; resid <= 1; resid++) {
            for (int64_t i = 0; i < M * N; i++) G[i] = frand();
            tg_gemm_epi e = {NULL, false, resid ? NULL : G, N, 0, resid ? G : NULL, N, 0};
            tg_gemm_args ga = {1, M, N, K, A, B, C, ta ? M : K, N, N, 0, 0, 0, ta, false, &e, false};
            CHECK(tg_gemm_single_pass(&ga), "case %d: not single pass", c);
            tg_gemm(pools[1], &ga);
            ga.C = G;
            tg_gemm(pools[1], &ga);
            CHECK(memcmp(C, G, sizeof(float) * (size_t)(M * N)) == 0, "case %d: C over its %s differs", c,
                  resid ? "residual" : "gate");
        }
        free(A), free(B), free(G), free(C);
    }
    printf("test_gemm: %d cases, %d shared between threads\n", cases, split_cases);
    CHECK(split_cases >= 20, "only %d cases run on several threads: the thread checks would prove little", split_cases);
    for (int t = 0; t < 4; t++) tg_pool_free(pools[t]);
    check_sessions();
    check_reuse();
    return check_summary("test_gemm");
}
