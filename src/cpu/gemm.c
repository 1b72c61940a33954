/* Single-precision GEMM, BLIS-style: B is packed into KC x NR column panels
 * (kept in L1 by the micro-kernel), A into MR x KC row panels (an MC-row
 * block stays in L2), and an MR x NR register-tile micro-kernel does the
 * arithmetic. Transposed operands are handled by the packing, so the
 * micro-kernel only ever sees one layout.
 *
 * Threads split C into disjoint column (or row) ranges, each packing its own
 * panels; no thread ever adds into another's tile, so the result is the same
 * bitwise whatever the thread count. */
#include <string.h>

#include "cpu.h"
#include "gemm_kernels.h"

#define KC 256
#define MC 192
#define NC 3072

static const tg_ukernel *pick(void) {
    static const tg_ukernel *k;
    if (!k) k = tg_ukernel_best();
    return k;
}

const char *tg_gemm_kernel_name(void) { return pick()->name; }

/* op(A)[i,k] for rows [i0, i0+mc) and k in [k0, k0+kc) into MR-row panels,
 * zero-padded to a multiple of MR. */
static void pack_a(const tg_gemm_args *g, const float *A, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int MR,
                   float *dst) {
    for (int64_t ip = 0; ip < mc; ip += MR) {
        int64_t rows = mc - ip < MR ? mc - ip : MR;
        for (int64_t k = 0; k < kc; k++) {
            float *d = dst + (ip / MR) * MR * kc + k * MR;
            int64_t r = 0;
            if (!g->ta) {
                const float *s = A + (i0 + ip) * g->lda + k0 + k;
                for (; r < rows; r++) d[r] = s[r * g->lda];
            } else {
                const float *s = A + (k0 + k) * g->lda + i0 + ip;
                for (; r < rows; r++) d[r] = s[r];
            }
            for (; r < MR; r++) d[r] = 0.0f;
        }
    }
}

/* op(B)[k,j] for k in [k0, k0+kc), j in [j0, j0+nc) into NR-column panels. */
static void pack_b(const tg_gemm_args *g, const float *B, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int NR,
                   float *dst) {
    for (int64_t jp = 0; jp < nc; jp += NR) {
        int64_t cols = nc - jp < NR ? nc - jp : NR;
        float *panel = dst + (jp / NR) * NR * kc;
        if (!g->tb) {
            for (int64_t k = 0; k < kc; k++) {
                const float *s = B + (k0 + k) * g->ldb + j0 + jp;
                float *d = panel + k * NR;
                if (cols == NR) memcpy(d, s, sizeof(float) * NR);
                else {
                    int64_t c = 0;
                    for (; c < cols; c++) d[c] = s[c];
                    for (; c < NR; c++) d[c] = 0.0f;
                }
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                float *d = panel + k * NR;
                int64_t c = 0;
                for (; c < cols; c++) d[c] = B[(j0 + jp + c) * g->ldb + k0 + k];
                for (; c < NR; c++) d[c] = 0.0f;
            }
        }
    }
}

/* C[i0:i1, j0:j1] of one batch entry, single-threaded. */
static void gemm_block(const tg_gemm_args *g, const float *A, const float *B, float *C, int64_t i0, int64_t i1,
                       int64_t j0, int64_t j1, float *buf) {
    const tg_ukernel *uk = pick();
    const int MR = uk->mr, NR = uk->nr;
    float *pb = buf;                                   /* KC x NC */
    float *pa = buf + (int64_t)KC * (NC + 64);         /* MC x KC */
    float tile[32 * 64] __attribute__((aligned(64))); /* MR x NR edge tile */
    if (g->K == 0) {
        for (int64_t i = i0; i < i1; i++) memset(C + i * g->ldc + j0, 0, sizeof(float) * (size_t)(j1 - j0));
        return;
    }
    for (int64_t jc = j0; jc < j1; jc += NC) {
        int64_t nc = j1 - jc < NC ? j1 - jc : NC;
        for (int64_t pc = 0; pc < g->K; pc += KC) {
            int64_t kc = g->K - pc < KC ? g->K - pc : KC;
            int acc = pc > 0;
            pack_b(g, B, pc, kc, jc, nc, NR, pb);
            for (int64_t ic = i0; ic < i1; ic += MC) {
                int64_t mc = i1 - ic < MC ? i1 - ic : MC;
                pack_a(g, A, ic, mc, pc, kc, MR, pa);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    int64_t nr = nc - jr < NR ? nc - jr : NR;
                    const float *bp = pb + (jr / NR) * NR * kc;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        int64_t mr = mc - ir < MR ? mc - ir : MR;
                        const float *ap = pa + (ir / MR) * MR * kc;
                        float *c = C + (ic + ir) * g->ldc + jc + jr;
                        if (mr == MR && nr == NR) {
                            uk->run(kc, ap, bp, c, g->ldc, acc);
                        } else {
                            uk->run(kc, ap, bp, tile, NR, 0);
                            for (int64_t r = 0; r < mr; r++)
                                for (int64_t q = 0; q < nr; q++)
                                    c[r * g->ldc + q] = acc ? c[r * g->ldc + q] + tile[r * NR + q] : tile[r * NR + q];
                        }
                    }
                }
            }
        }
    }
}

/* Tiny products: packing costs more than it saves. */
static void gemm_direct(const tg_gemm_args *g, const float *A, const float *B, float *C, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        float *c = C + i * g->ldc;
        for (int64_t j = 0; j < g->N; j++) c[j] = 0.0f;
        for (int64_t k = 0; k < g->K; k++) {
            float a = g->ta ? A[k * g->lda + i] : A[i * g->lda + k];
            if (!g->tb) {
                const float *b = B + k * g->ldb;
                for (int64_t j = 0; j < g->N; j++) c[j] += a * b[j];
            } else {
                for (int64_t j = 0; j < g->N; j++) c[j] += a * B[j * g->ldb + k];
            }
        }
    }
}

typedef struct {
    const tg_gemm_args *g;
    tg_pool *pool;
    int64_t split;     /* tasks per batch entry */
    bool by_rows;      /* split rows (else columns) */
    bool direct;
} job;

static size_t buf_bytes(void) { return sizeof(float) * ((size_t)KC * (NC + 64) + (size_t)MC * KC + 4096); }

static void run_task(void *argp, int task, int thread) {
    job *j = argp;
    const tg_gemm_args *g = j->g;
    int64_t b = task / j->split, part = task % j->split;
    const float *A = g->A + b * g->sa, *B = g->B + b * g->sb;
    float *C = g->C + b * g->sc;
    int64_t unit = j->by_rows ? 16 : 32, total = j->by_rows ? g->M : g->N;
    int64_t units = (total + unit - 1) / unit;
    int64_t lo = units * part / j->split * unit, hi = units * (part + 1) / j->split * unit;
    if (hi > total) hi = total;
    if (lo >= hi) return;
    if (j->direct) {
        gemm_direct(g, A, B, C, lo, hi);
        return;
    }
    float *buf = tg_pool_scratch(j->pool, thread, buf_bytes());
    if (!buf) return; /* cannot happen after tg_gemm reserved it */
    if (j->by_rows) gemm_block(g, A, B, C, lo, hi, 0, g->N, buf);
    else gemm_block(g, A, B, C, 0, g->M, lo, hi, buf);
}

void tg_gemm(tg_pool *pool, const tg_gemm_args *g) {
    if (g->batch <= 0 || g->M <= 0 || g->N <= 0) return;
    int th = tg_pool_threads(pool);
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    job j = {g, pool, 1, true, false};
    j.direct = g->M * g->N * g->K < 8 * 8 * 64 || g->K <= 2;
    for (int t = 0; t < th && !j.direct; t++)
        if (!tg_pool_scratch(pool, t, buf_bytes())) j.direct = true; /* out of memory: slow path */
    /* Parallelize across batch entries when there are enough of them, else
     * split each product; tiny work stays on one thread. */
    if (th > 1 && flops * (double)g->batch > 2e5 && g->batch < th) {
        j.by_rows = g->M >= g->N || j.direct; /* gemm_direct only splits rows */
        int64_t units = j.by_rows ? (g->M + 15) / 16 : (g->N + 31) / 32;
        j.split = units < th ? units : th;
    }
    if (th > 1 && flops * (double)g->batch <= 2e5) {
        /* run inline: waking the pool costs more than the product */
        for (int64_t t = 0; t < g->batch * j.split; t++) run_task(&j, (int)t, 0);
        return;
    }
    tg_pool_run(pool, (int)(g->batch * j.split), run_task, &j);
}
