/* OpenBLAS sgemm at the same sizes and with the same timing as bench_tg's
 * GEMM rows. Linked against -lopenblas here only; the library never is.
 * Threads: OPENBLAS_NUM_THREADS; run with OPENBLAS_CORETYPE set on CPUs that
 * Debian's OpenBLAS misdetects (bench/run.sh does).
 *
 *   bench_blas [sizes...] */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int sizes[8] = {256, 1024, 2048}, n_sizes = argc > 1 ? 0 : 3;
    for (int i = 1; i < argc && n_sizes < 8; i++) sizes[n_sizes++] = atoi(argv[i]);
    printf("{\"bench\": \"info\", \"impl\": \"openblas\", \"kernel\": \"%s\", \"threads\": %d}\n",
           openblas_get_corename(), openblas_get_num_threads());
    for (int s = 0; s < n_sizes; s++) {
        int n = sizes[s];
        size_t sz = (size_t)n * (size_t)n;
        float *A = malloc(sz * 4), *B = malloc(sz * 4), *C = malloc(sz * 4);
        for (size_t i = 0; i < sz; i++) {
            A[i] = (float)((i * 7 + 3) % 13) * 0.1f - 0.6f;
            B[i] = (float)((i * 5 + 1) % 11) * 0.1f - 0.5f;
        }
        double flop = 2.0 * n * (double)n * n;
        int reps = (int)(0.5 * 150e9 / flop);
        if (reps < 5) reps = 5;
        if (reps > 2000) reps = 2000;
        for (int i = 0; i < 2; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double *t = malloc(sizeof(double) * (size_t)reps);
        for (int i = 0; i < reps; i++) {
            double t0 = now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
            t[i] = now() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        printf("{\"bench\": \"gemm\", \"impl\": \"openblas\", \"n\": %d, \"gflops\": %.2f, \"best_gflops\": %.2f, "
               "\"reps\": %d, \"threads\": %d}\n",
               n, flop / t[reps / 2] * 1e-9, flop / t[0] * 1e-9, reps, openblas_get_num_threads());
        fflush(stdout);
        free(t);
        free(A);
        free(B);
        free(C);
    }
    return 0;
}
