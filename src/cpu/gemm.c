/* Single-precision GEMM with three paths, chosen from the shape alone (never
 * from the thread count, so results do not depend on it):
 *
 *  - gemv: N = 1, or M = 1 with B transposed: dot products.
 *  - direct: K <= KC and B small. The micro-kernel reads A and B where they
 *    lie (B^T is packed panel by panel); no packing of A at all. This is the
 *    path of the small matrices that training steps are made of.
 *  - packed, BLIS-style: B is packed into KC x NR column panels (one stays in
 *    L1 while the micro-kernel runs), A into MR x KC row panels (an MC-row
 *    block stays in L2).
 *
 * Each C element is one chain of FMAs over k in KC-sized blocks, whatever
 * tile it falls in; threads own disjoint tiles of C, and K is never split
 * between threads, so results are bitwise the same for any thread count. */
#include <stdatomic.h>
#include <string.h>

#include "cpu.h"
#include "gemm_kernels.h"

#define KC 256
#define MC 192
#define NC 3072
#define DIRECT_MAX_KN (64 * 1024) /* elements of B for the direct path: it stays in L2 */

static _Atomic(const tg_ukernel *) chosen;
static const tg_ukernel *pick(void) {
    const tg_ukernel *k = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (!k) {
        k = tg_ukernel_best();
        atomic_store_explicit(&chosen, k, memory_order_relaxed);
    }
    return k;
}

const char *tg_gemm_kernel_name(void) { return pick()->name; }
void tg_gemm_use_generic(bool on) { atomic_store(&chosen, on ? tg_ukernel_generic() : tg_ukernel_best()); }

typedef enum { PATH_GEMV, PATH_DIRECT, PATH_PACKED } gemm_path;

static gemm_path choose(const tg_gemm_args *g) {
    if (g->N == 1 || (g->M == 1 && g->tb)) return PATH_GEMV;
    if (g->K <= KC && g->K * g->N <= DIRECT_MAX_KN) return PATH_DIRECT;
    return PATH_PACKED;
}

bool tg_gemm_single_pass(const tg_gemm_args *g) { return choose(g) != PATH_PACKED || g->K <= KC; }

/* The epilogue pointers for tile (i, j) of batch entry b. */
static void tile_epi(const tg_gemm_args *g, int64_t b, int64_t i, int64_t j, tg_tile *t) {
    const tg_gemm_epi *e = g->epi;
    t->bias = e && e->bias ? e->bias + j : NULL;
    t->relu = e && e->relu;
    t->gate = e && e->gate ? e->gate + b * e->sg + i * e->ldg + j : NULL;
    t->ldg = e ? e->ldg : 0;
}

/* ---- packing ---- */

/* op(A)[i,k] for rows [i0, i0+mc) and k in [k0, k0+kc) into MR-row panels,
 * zero-padded to a multiple of MR. */
static void pack_a(const tg_gemm_args *g, const float *A, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int MR,
                   float *dst) {
    for (int64_t ip = 0; ip < mc; ip += MR, dst += MR * kc) {
        int64_t rows = mc - ip < MR ? mc - ip : MR;
        if (g->ta) {
            for (int64_t k = 0; k < kc; k++) {
                const float *s = A + (k0 + k) * g->lda + i0 + ip;
                int64_t r = 0;
                for (; r < rows; r++) dst[k * MR + r] = s[r];
                for (; r < MR; r++) dst[k * MR + r] = 0.0f;
            }
        } else {
            /* Row by row: each source row is read in order. */
            for (int64_t r = 0; r < MR; r++) {
                if (r < rows) {
                    const float *s = A + (i0 + ip + r) * g->lda + k0;
                    for (int64_t k = 0; k < kc; k++) dst[k * MR + r] = s[k];
                } else {
                    for (int64_t k = 0; k < kc; k++) dst[k * MR + r] = 0.0f;
                }
            }
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
                int64_t c = 0;
                if (cols == NR) memcpy(d, s, sizeof(float) * (size_t)NR), c = NR;
                for (; c < cols; c++) d[c] = s[c];
                for (; c < NR; c++) d[c] = 0.0f;
            }
        } else {
            for (int64_t c = 0; c < NR; c++) {
                const float *s = B + (j0 + jp + c) * g->ldb + k0;
                if (c < cols)
                    for (int64_t k = 0; k < kc; k++) panel[k * NR + c] = s[k];
                else
                    for (int64_t k = 0; k < kc; k++) panel[k * NR + c] = 0.0f;
            }
        }
    }
}

/* ---- packed path ---- */

static size_t packed_bytes(void) { return sizeof(float) * ((size_t)KC * (NC + 64) + (size_t)(MC + 16) * KC); }

/* C[i0:i1, j0:j1] of batch entry b, single-threaded. */
static void gemm_packed(const tg_gemm_args *g, const tg_ukernel *uk, int64_t b, int64_t i0, int64_t i1, int64_t j0,
                        int64_t j1, float *buf) {
    const int MR = uk->mr, NR = uk->nr;
    const float *A = g->A + b * g->sa, *B = g->B + b * g->sb;
    float *C = g->C + b * g->sc;
    float *pb = buf;                           /* KC x NC */
    float *pa = buf + (int64_t)KC * (NC + 64); /* MC x KC */
    for (int64_t jc = j0; jc < j1; jc += NC) {
        int64_t nc = j1 - jc < NC ? j1 - jc : NC;
        for (int64_t pc = 0; pc < g->K; pc += KC) {
            int64_t kc = g->K - pc < KC ? g->K - pc : KC;
            bool last = pc + kc == g->K;
            pack_b(g, B, pc, kc, jc, nc, NR, pb);
            for (int64_t ic = i0; ic < i1; ic += MC) {
                int64_t mc = i1 - ic < MC ? i1 - ic : MC;
                pack_a(g, A, ic, mc, pc, kc, MR, pa);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    tg_tile t = {kc, NULL, 1, MR, pb + (jr / NR) * NR * kc, NR, NULL, g->ldc, 0, 0, pc > 0, NULL,
                                 false, NULL, 0};
                    t.nr = (int)(nc - jr < NR ? nc - jr : NR);
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        t.mr = (int)(mc - ir < MR ? mc - ir : MR);
                        t.a = pa + (ir / MR) * MR * kc;
                        t.c = C + (ic + ir) * g->ldc + jc + jr;
                        if (last) tile_epi(g, b, ic + ir, jc + jr, &t);
                        uk->tile(&t);
                    }
                }
            }
        }
    }
}

/* ---- direct path: tiles of C in column-panel-major order ---- */

typedef struct {
    const tg_gemm_args *g;
    const tg_ukernel *uk;
    tg_pool *pool;
    gemm_path path;
    int64_t mt, nt;      /* direct: tiles per batch entry down and across */
    int64_t units;       /* work units over all batch entries */
    int tasks;
    bool by_rows;        /* packed: split rows (else columns) */
    int64_t split;       /* packed: tasks per batch entry */
} job;

static void direct_tiles(const job *j, int64_t lo, int64_t hi, float *panel) {
    const tg_gemm_args *g = j->g;
    const int MR = j->uk->mr, NR = j->uk->nr;
    int64_t packed_at = -1; /* which (batch, column panel) `panel` holds */
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / (j->mt * j->nt), rest = u % (j->mt * j->nt), jr = rest / j->mt, ir = rest % j->mt;
        int64_t i = ir * MR, jj = jr * NR;
        const float *A = g->A + b * g->sa, *B = g->B + b * g->sb;
        tg_tile t = {g->K, NULL, 0, 0, NULL, 0, g->C + b * g->sc + i * g->ldc + jj, g->ldc, 0, 0, false, NULL,
                     false, NULL, 0};
        t.mr = (int)(g->M - i < MR ? g->M - i : MR);
        t.nr = (int)(g->N - jj < NR ? g->N - jj : NR);
        if (g->ta) t.a = A + i, t.rs_a = 1, t.cs_a = g->lda;
        else t.a = A + i * g->lda, t.rs_a = g->lda, t.cs_a = 1;
        if (!g->tb) {
            t.b = B + jj, t.ldb = g->ldb;
        } else {
            int64_t key = (g->sb ? b : 0) * j->nt + jr;
            if (key != packed_at) {
                pack_b(g, B, 0, g->K, jj, t.nr, NR, panel);
                packed_at = key;
            }
            t.b = panel, t.ldb = NR;
        }
        tile_epi(g, b, i, jj, &t);
        j->uk->tile(&t);
    }
}

/* ---- gemv path ---- */

/* Rows [lo, hi) of the dot products, then the epilogue on them. */
static void gemv_rows(const job *j, int64_t lo, int64_t hi, float *xbuf) {
    const tg_gemm_args *g = j->g;
    int64_t per = g->N == 1 ? g->M : g->N; /* outputs per batch entry */
    for (int64_t u = lo; u < hi;) {
        int64_t b = u / per, r0 = u % per, r1 = per < r0 + (hi - u) ? per : r0 + (hi - u);
        const float *A = g->A + b * g->sa, *B = g->B + b * g->sb;
        float *C = g->C + b * g->sc;
        const float *mat, *x;
        int64_t ldm, xs, incy;
        if (g->N == 1) { /* C[:, 0] = op(A) @ B[:, 0] */
            mat = A, ldm = g->lda, x = B, xs = g->tb ? 1 : g->ldb, incy = g->ldc;
        } else {         /* C[0, :] = B @ op(A)[0, :] with B stored [N, K] */
            mat = B, ldm = g->ldb, x = A, xs = g->ta ? g->lda : 1, incy = 1;
        }
        if (xs != 1) {
            for (int64_t k = 0; k < g->K; k++) xbuf[k] = x[k * xs];
            x = xbuf;
        }
        if (g->N == 1 && g->ta) { /* A stored [K, M]: a row vector times a matrix, through the tile kernel */
            const int NR = j->uk->nr;
            for (int64_t i = r0; i < r1; i += NR) {
                float row[64];
                tg_tile t = {g->K, x, 1, 1, A + i, g->lda, row, 0, 1, 0, false, NULL, false, NULL, 0};
                t.nr = (int)(r1 - i < NR ? r1 - i : NR);
                j->uk->tile(&t);
                for (int q = 0; q < t.nr; q++) C[(i + q) * incy] = row[q];
            }
        } else {
            j->uk->gemv(r1 - r0, g->K, mat + r0 * ldm, ldm, x, C + r0 * incy, incy);
        }
        const tg_gemm_epi *e = g->epi;
        if (e) /* the tile kernels' epilogue, element by element */
            for (int64_t r = r0; r < r1; r++) {
                int64_t i = g->N == 1 ? r : 0, jj = g->N == 1 ? 0 : r;
                float v = C[r * incy];
                if (e->bias) v += e->bias[jj];
                if (e->relu) v = v > 0.0f ? v : 0.0f;
                if (e->gate && !(e->gate[b * e->sg + i * e->ldg + jj] > 0.0f)) v = 0.0f;
                C[r * incy] = v;
            }
        u += r1 - r0;
    }
}

/* ---- driver ---- */

static void run_task(void *argp, int task, int thread) {
    job *j = argp;
    const tg_gemm_args *g = j->g;
    if (j->path == PATH_PACKED) {
        int64_t b = task / j->split, part = task % j->split;
        int64_t unit = j->by_rows ? j->uk->mr : j->uk->nr, total = j->by_rows ? g->M : g->N;
        int64_t units = (total + unit - 1) / unit;
        int64_t lo = units * part / j->split * unit, hi = units * (part + 1) / j->split * unit;
        if (hi > total) hi = total;
        if (lo >= hi) return;
        float *buf = tg_pool_scratch(j->pool, thread, packed_bytes());
        if (j->by_rows) gemm_packed(g, j->uk, b, lo, hi, 0, g->N, buf);
        else gemm_packed(g, j->uk, b, 0, g->M, lo, hi, buf);
        return;
    }
    int64_t lo = j->units * task / j->tasks, hi = j->units * (task + 1) / j->tasks;
    if (lo >= hi) return;
    if (j->path == PATH_DIRECT) direct_tiles(j, lo, hi, tg_pool_scratch(j->pool, thread, sizeof(float) * 64 * KC));
    else gemv_rows(j, lo, hi, tg_pool_scratch(j->pool, thread, sizeof(float) * (size_t)(g->K + 16)));
}

void tg_gemm(tg_pool *pool, const tg_gemm_args *g) {
    if (g->batch <= 0 || g->M <= 0 || g->N <= 0) return;
    int th = tg_pool_threads(pool);
    job j = {g, pick(), pool, choose(g), 0, 0, 0, 1, true, 1};
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)g->batch;
    /* Below this, waking the other threads costs more than it saves. */
    int want = flops < 1.5e5 ? 1 : th;
    size_t scratch = 0;
    if (j.path == PATH_PACKED) {
        scratch = packed_bytes();
        if (g->batch >= want) {
            j.tasks = (int)g->batch;
        } else {
            j.by_rows = g->M >= g->N;
            int64_t units = j.by_rows ? (g->M + j.uk->mr - 1) / j.uk->mr : (g->N + j.uk->nr - 1) / j.uk->nr;
            j.split = units < want ? units : want;
            j.tasks = (int)(g->batch * j.split);
        }
    } else {
        if (j.path == PATH_DIRECT) {
            j.mt = (g->M + j.uk->mr - 1) / j.uk->mr;
            j.nt = (g->N + j.uk->nr - 1) / j.uk->nr;
            j.units = g->batch * j.mt * j.nt;
            scratch = sizeof(float) * 64 * KC;
        } else {
            j.units = g->batch * (g->N == 1 ? g->M : g->N);
            scratch = sizeof(float) * (size_t)(g->K + 16);
        }
        j.tasks = (int)(j.units < want ? j.units : want);
    }
    int used = j.tasks < th ? j.tasks : th;
    for (int t = 0; t < used; t++)
        if (!tg_pool_scratch(pool, t, scratch)) {
            /* Out of memory for packing: run the direct path on one thread,
             * slower but exact. Only the packed and tb paths need scratch. */
            j.path = PATH_DIRECT;
            break;
        }
    tg_pool_run(pool, j.tasks, run_task, &j);
}
