/* Single-precision GEMM with three paths, chosen from the shape alone (never
 * from the thread count, so results do not depend on it):
 *
 *  - gemv: N = 1, or M = 1 with B transposed: dot products.
 *  - direct: B small, or one KC block of it. The micro-kernel reads A and B
 *    where they lie (only B^T is packed, a block at a time); no packing of A
 *    at all. This is the path of the small and skinny matrices that
 *    training steps are made of, where packing costs as much as the
 *    arithmetic (a 64x256x1024 weight gradient packs 1 MiB of B for 64 rows).
 *  - packed, BLIS-style: for each KC x NC block of B, all threads pack it
 *    together into NR-column panels, then each takes whole rows of C: it
 *    packs MC rows of A at a time into MR-row panels and, for NL2 columns
 *    of the B block at a time (kept in L2), runs the micro-kernel along
 *    each row of tiles: the A panel stays in L1, B panels come from L2, and
 *    C is walked row by row (which the hardware prefetcher follows; going
 *    down columns of C with a large power-of-two stride makes its lines
 *    alias in L1).
 *
 * Each C element is one chain of FMAs over k in KC-sized blocks, whatever
 * tile it falls in; threads own disjoint tiles of C, and K is never split
 * between threads, so results are bitwise the same for any thread count. */
#include <stdatomic.h>

#include "cpu.h"
#include "gemm_kernels.h"
#include "vec.h"

#define KC TG_GEMM_KC
#define MC 96
#define NC 2048
#define NL2 512 /* columns of the B block swept by one MC block of A: 768 KiB, stays in L2 */
#define DIRECT_MAX_KN (64 * 1024) /* elements of B (or of its KC blocks, twice that) the direct path takes */
#define MIN_FLOPS_PER_BYTE 8.0  /* see worth_threads */
#define SMALL_FLOPS 4e6           /* below this, MIN_FLOPS_PER_BYTE_SMALL applies */
#define MIN_FLOPS_PER_BYTE_SMALL 16.0
#define DIRECT_MAX_M 96           /* rows of a transposed A the direct path reads in place */

static atomic_bool force_generic;
static const tg_ukernel *pick(void) {
    return atomic_load_explicit(&force_generic, memory_order_relaxed) ? tg_ukernel_generic() : tg_ukernel_best();
}

const char *tg_gemm_kernel_name(void) { return pick()->name; }
bool tg_gemm_uses_fma(void) { return pick()->fma; }
void tg_gemm_use_generic(bool on) { atomic_store(&force_generic, on); }

typedef enum { PATH_GEMV, PATH_DIRECT, PATH_PACKED } gemm_path;

static gemm_path choose(const tg_gemm_args *g) {
    if (g->N == 1 || (g->M == 1 && g->tb)) return PATH_GEMV;
    /* The direct path reads A and B in place. It pays when a KC-block of B
     * fits in L2, and A is row-major or its rows (M apart) are short: long
     * transposed rows put every k of a 12-wide column strip in the same L1
     * set. Small products take it whatever their layout. */
    int64_t kc = g->K < KC ? g->K : KC;
    if ((g->K <= KC && g->K * g->N <= DIRECT_MAX_KN) ||
        (kc * g->N <= 2 * DIRECT_MAX_KN && (!g->ta || g->M <= DIRECT_MAX_M)))
        return PATH_DIRECT;
    return PATH_PACKED;
}

/* Weight gradients (X^T dY: A transposed, K = the batch rows) are split
 * along K into fixed blocks: with no more threads than blocks, each block's
 * partial product is computed by the thread that owns those rows in the
 * row-split kernels before it (so it reads its own cache, not the other
 * core's); with more threads, the blocks go one after the other, each
 * shared by all the threads as a product of its own. The partials are then
 * added in block order. The blocks depend on the shape alone, and a block's
 * partial has the same bits on one thread or many, so results do not
 * depend on the thread count; each C element is the sum of k_blocks FMA
 * chains instead of one. */
#define KSPLIT_MIN_K 512
#define KSPLIT_BLOCK 256
#define KSPLIT_MAX_BLOCKS 4
#define KSPLIT_MAX_PARTIAL (4 << 20) /* floats of partial products */

static int64_t k_blocks(const tg_gemm_args *g) {
    if (!g->ta || g->tb || g->batch != 1 || g->acc || g->K < KSPLIT_MIN_K || choose(g) == PATH_GEMV) return 1;
    int64_t nb = g->K / KSPLIT_BLOCK;
    if (nb > KSPLIT_MAX_BLOCKS) nb = KSPLIT_MAX_BLOCKS;
    return nb * g->M * g->N <= KSPLIT_MAX_PARTIAL ? nb : 1;
}

bool tg_gemm_single_pass(const tg_gemm_args *g) { return choose(g) == PATH_GEMV || g->K <= KC || k_blocks(g) > 1; }

/* The epilogue pointers for tile (i, j) of batch entry b. */
static void tile_epi(const tg_gemm_args *g, int64_t b, int64_t i, int64_t j, tg_tile *t) {
    const tg_gemm_epi *e = g->epi;
    t->bias = e && e->bias ? e->bias + j : NULL;
    t->relu = e && e->relu;
    t->gate = e && e->gate ? e->gate + b * e->sg + i * e->ldg + j : NULL;
    t->ldg = e ? e->ldg : 0;
    t->resid = e && e->resid ? e->resid + b * e->sr + i * e->ldr + j : NULL;
    t->ldr = e ? e->ldr : 0;
}

/* ---- packing ---- */

/* op(A)[i,k] for rows [i0, i0+mc) and k in [k0, k0+kc) into MR-row panels,
 * zero-padded to a multiple of MR. */
static void pack_a(const tg_gemm_args *g, const tg_ukernel *uk, const float *A, int64_t i0, int64_t mc, int64_t k0,
                   int64_t kc, float *dst) {
    const int MR = uk->mr;
    for (int64_t ip = 0; ip < mc; ip += MR, dst += MR * kc) {
        int rows = (int)(mc - ip < MR ? mc - ip : MR);
        if (g->ta) uk->pack_n(kc, rows, A + k0 * g->lda + i0 + ip, g->lda, MR, dst);
        else uk->pack_t(kc, rows, A + (i0 + ip) * g->lda + k0, g->lda, MR, dst);
    }
}

/* op(B)[k,j] for k in [k0, k0+kc), j in [j0, j0+nc) into NR-column panels. */
static void pack_b(const tg_gemm_args *g, const tg_ukernel *uk, const float *B, int64_t k0, int64_t kc, int64_t j0,
                   int64_t nc, float *dst) {
    const int NR = uk->nr;
    for (int64_t jp = 0; jp < nc; jp += NR) {
        int cols = (int)(nc - jp < NR ? nc - jp : NR);
        float *panel = dst + (jp / NR) * NR * kc;
        if (g->tb) uk->pack_t(kc, cols, B + (j0 + jp) * g->ldb + k0, g->ldb, NR, panel);
        else uk->pack_n(kc, cols, B + k0 * g->ldb + j0 + jp, g->ldb, NR, panel);
    }
}

/* ---- packed path ---- */

static size_t a_block_floats(void) { return (size_t)(MC + 16) * KC; }
static size_t b_block_floats(void) { return (size_t)KC * (NC + 64); }
/* Every thread's scratch: its A block, then (used from each thread's own
 * when batch entries run one per thread) a B block. Thread 0's holds room
 * for B_GROUP_FLOATS instead: the B blocks one product on all threads packs
 * at once. */
#define B_GROUP_FLOATS (2 * b_block_floats())
#define B_GROUP_MAX 16
static size_t packed_bytes(void) { return sizeof(float) * (a_block_floats() + b_block_floats()); }
static size_t packed_bytes_lead(void) { return sizeof(float) * (a_block_floats() + B_GROUP_FLOATS); }

typedef struct {
    int64_t b, jc, nc, pc, kc; /* batch entry, the B block's columns and k range */
    const float *pb;           /* the packed B block */
} block;

/* Rows [i0, i1) of C[:, jc:jc+nc] (+)= op(A)[i0:i1, pc:pc+kc] @ the B block. */
static void packed_rows(const tg_gemm_args *g, const tg_ukernel *uk, const block *k, int64_t i0, int64_t i1,
                        float *pa) {
    const int MR = uk->mr, NR = uk->nr;
    const float *A = g->A + k->b * g->sa;
    float *C = g->C + k->b * g->sc;
    bool last = k->pc + k->kc == g->K;
    for (int64_t ic = i0; ic < i1; ic += MC) {
        int64_t mc = i1 - ic < MC ? i1 - ic : MC;
        pack_a(g, uk, A, ic, mc, k->pc, k->kc, pa);
        for (int64_t j0 = 0; j0 < k->nc; j0 += NL2) {
            int64_t j1 = k->nc - j0 < NL2 ? k->nc : j0 + NL2;
            for (int64_t ir = 0; ir < mc; ir += MR) {
                tg_tile t = {k->kc, pa + (ir / MR) * MR * k->kc, 1, MR, NULL, NR, NULL, g->ldc, 0, 0, k->pc > 0 || g->acc,
                             NULL, false, NULL, 0, NULL, NULL, 0};
                t.mr = (int)(mc - ir < MR ? mc - ir : MR);
                for (int64_t jr = j0; jr < j1; jr += NR) {
                    t.nr = (int)(k->nc - jr < NR ? k->nc - jr : NR);
                    t.b = k->pb + (jr / NR) * NR * k->kc;
                    t.c = C + (ic + ir) * g->ldc + k->jc + jr;
                    t.c_next = jr + NR < j1 ? t.c + NR : NULL;
                    if (last) tile_epi(g, k->b, ic + ir, k->jc + jr, &t);
                    uk->tile(&t);
                }
            }
        }
    }
}

/* A whole batch entry on one thread. */
static void packed_entry(const tg_gemm_args *g, const tg_ukernel *uk, int64_t b, float *buf) {
    float *pb = buf + a_block_floats();
    for (int64_t jc = 0; jc < g->N; jc += NC)
        for (int64_t pc = 0; pc < g->K; pc += KC) {
            block k = {b, jc, g->N - jc < NC ? g->N - jc : NC, pc, g->K - pc < KC ? g->K - pc : KC, pb};
            pack_b(g, uk, g->B + b * g->sb, pc, k.kc, jc, k.nc, pb);
            packed_rows(g, uk, &k, 0, g->M, buf);
        }
}

/* ---- direct path ---- */

typedef struct {
    const tg_gemm_args *g;
    const tg_ukernel *uk;
    tg_pool *pool;
    gemm_path path;
    int64_t mt, nt;      /* direct: tiles per batch entry down and across */
    int64_t units;       /* work units over all batch entries */
    int tasks;
    /* packed: a batch entry per task, or one product on all threads in
     * phases: pack the n_blk consecutive KC blocks blk[] of B (units: each
     * block's NR-column panels, block after block), then compute with them
     * (units: MR-row groups, each taking the blocks in order) */
    enum { ENTRIES, PACK_B, ROWS } phase;
    block blk[B_GROUP_MAX];
    int n_blk;
    int64_t panels; /* NR-column panels of each block */
} job;

/* Units lo..hi-1 in (batch, row of tiles, column panel) order: a row of A
 * (12 x KC) stays in L1 while the tiles sweep across the B block, which
 * stays in L2, and C is walked along its rows. K goes in KC blocks, each
 * over all the units (C is small on this path). B^T is packed one block at
 * a time, once per batch entry. */
static void direct_tiles(const job *j, int64_t lo, int64_t hi, float *bt) {
    const tg_gemm_args *g = j->g;
    const int MR = j->uk->mr, NR = j->uk->nr;
    int64_t pc = 0;
    do {
        int64_t kc = g->K - pc < KC ? g->K - pc : KC;
        bool last = pc + kc >= g->K;
        int64_t packed = -1; /* which batch entry's B^T block `bt` holds */
        int64_t b = lo / (j->mt * j->nt), ir = lo % (j->mt * j->nt) / j->nt, jr = lo % j->nt;
        tg_tile t = {kc, NULL, 0, 0, NULL, 0, NULL, g->ldc, 0, 0, pc > 0 || g->acc, NULL, false, NULL, 0, NULL, NULL, 0};
        if (g->ta) t.rs_a = 1, t.cs_a = g->lda;
        else t.rs_a = g->lda, t.cs_a = 1;
        for (int64_t u = lo; u < hi; u++) {
            int64_t i = ir * MR, jj = jr * NR;
            const float *A = g->A + b * g->sa, *B = g->B + b * g->sb;
            t.c = g->C + b * g->sc + i * g->ldc + jj;
            t.c_next = jr + 1 < j->nt ? t.c + NR : ir + 1 < j->mt ? t.c - jj + MR * g->ldc : NULL;
            t.mr = (int)(g->M - i < MR ? g->M - i : MR);
            t.nr = (int)(g->N - jj < NR ? g->N - jj : NR);
            t.a = g->ta ? A + pc * g->lda + i : A + i * g->lda + pc;
            if (!g->tb) {
                t.b = B + pc * g->ldb + jj, t.ldb = g->ldb;
            } else {
                int64_t key = g->sb ? b : 0;
                if (key != packed) {
                    pack_b(g, j->uk, B, pc, kc, 0, g->N, bt);
                    packed = key;
                }
                t.b = bt + jr * NR * kc, t.ldb = NR;
            }
            if (last) tile_epi(g, b, i, jj, &t);
            j->uk->tile(&t);
            if (++jr == j->nt) {
                jr = 0;
                if (++ir == j->mt) ir = 0, b++;
            }
        }
        pc += kc;
    } while (pc < g->K);
}

#define GEMV_CHUNK 256

/* Outputs [lo, hi) of the dot products, GEMV_CHUNK at a time: into a local
 * buffer, then through the epilogue into C, so that each C element is
 * written once, after the gate element it may share memory with was read. */
static void gemv_rows(const job *j, int64_t lo, int64_t hi, float *xbuf) {
    const tg_gemm_args *g = j->g;
    const tg_gemm_epi *e = g->epi;
    int64_t per = g->N == 1 ? g->M : g->N; /* outputs per batch entry */
    float out[GEMV_CHUNK];
    for (int64_t u = lo; u < hi;) {
        int64_t b = u / per, r0 = u % per, r1 = r0 + (hi - u);
        if (r1 > per) r1 = per;
        if (r1 > r0 + GEMV_CHUNK) r1 = r0 + GEMV_CHUNK;
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
                tg_tile t = {g->K, x, 1, 1, A + i, g->lda, out + (i - r0), 0, 1, 0, false, NULL, false, NULL, 0, NULL,
                             NULL, 0};
                t.nr = (int)(r1 - i < NR ? r1 - i : NR);
                j->uk->tile(&t);
            }
        } else {
            j->uk->gemv(r1 - r0, g->K, mat + r0 * ldm, ldm, x, out, 1);
        }
        for (int64_t r = r0; r < r1; r++) { /* the tile kernels' epilogue, element by element */
            float v = out[r - r0];
            if (e) {
                int64_t i = g->N == 1 ? r : 0, jj = g->N == 1 ? 0 : r;
                if (e->bias) v += e->bias[jj];
                if (e->resid) v += e->resid[b * e->sr + i * e->ldr + jj];
                if (e->relu) v = v > 0.0f ? v : 0.0f;
                if (e->gate && !(e->gate[b * e->sg + i * e->ldg + jj] > 0.0f)) v = 0.0f;
            }
            C[r * incy] = g->acc ? C[r * incy] + v : v;
        }
        u += r1 - r0;
    }
}

/* ---- driver ---- */

static bool worth_threads(const tg_gemm_args *g, double flops);
bool tg_gemm_splits(const tg_gemm_args *g) {
    return k_blocks(g) > 1 || worth_threads(g, 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)g->batch);
}

/* Whether other threads pay for themselves. Besides waking them, a thread
 * on another core has to pull its share of A and B and push its share of C
 * across the cores, which in a training step (where the operands were just
 * written by the previous kernel on the caller's core) cost as much as the
 * arithmetic it saved on a 256x64x64 product: so also require enough flops
 * per byte touched. Since the pool deals rows to threads the way the
 * elementwise kernels split them, a thread mostly finds its rows of A in its
 * own cache, and an 8 MFLOP 1024x64x64 product (a transformer's projection,
 * 8 flops per byte) gains from a second core; products under 4 MFLOP (the
 * sin MLP's) still need 16 flops per byte (docs/performance.md). */
static bool worth_threads(const tg_gemm_args *g, double flops) {
    double bytes = 4.0 * ((double)g->batch * (double)(g->M * g->K + g->M * g->N) +
                          (double)(g->sb ? g->batch : 1) * (double)(g->K * g->N));
    double need = flops >= SMALL_FLOPS ? MIN_FLOPS_PER_BYTE : MIN_FLOPS_PER_BYTE_SMALL;
    return flops >= 1.5e5 && flops >= need * bytes;
}

static void run_task(void *argp, int task, int thread) {
    job *j = argp;
    const tg_gemm_args *g = j->g;
    float *buf = tg_pool_scratch(j->pool, thread, 0); /* reserved by tg_gemm */
    int64_t lo = j->units * task / j->tasks, hi = j->units * (task + 1) / j->tasks;
    if (lo >= hi) return;
    switch (j->path) {
    case PATH_PACKED: {
        if (j->phase == ENTRIES) {
            for (int64_t b = lo; b < hi; b++) packed_entry(g, j->uk, b, buf);
        } else if (j->phase == PACK_B) {
            int64_t NR = j->uk->nr;
            for (int64_t u = lo; u < hi;) { /* the units' panels, block by block */
                const block *k = &j->blk[u / j->panels];
                int64_t p0 = u % j->panels, p1 = hi - u + p0 < j->panels ? hi - u + p0 : j->panels;
                int64_t c0 = p0 * NR, c1 = p1 * NR < k->nc ? p1 * NR : k->nc;
                pack_b(g, j->uk, g->B + k->b * g->sb, k->pc, k->kc, k->jc + c0, c1 - c0, (float *)k->pb + p0 * NR * k->kc);
                u += p1 - p0;
            }
        } else {
            int64_t MR = j->uk->mr, r1 = hi * MR < g->M ? hi * MR : g->M;
            for (int b = 0; b < j->n_blk; b++) packed_rows(g, j->uk, &j->blk[b], lo * MR, r1, buf);
        }
        break;
    }
    case PATH_DIRECT: direct_tiles(j, lo, hi, buf); break;
    default: gemv_rows(j, lo, hi, buf); break;
    }
}

/* Out of memory for the packing buffers: a plain loop, slower and rounded
 * differently, but it does not fail. */
static void gemm_naive(const tg_gemm_args *g) {
    for (int64_t b = 0; b < g->batch; b++)
        for (int64_t i = 0; i < g->M; i++)
            for (int64_t jj = 0; jj < g->N; jj++) {
                const float *A = g->A + b * g->sa, *B = g->B + b * g->sb;
                float s = 0.0f, c0 = g->acc ? g->C[b * g->sc + i * g->ldc + jj] : 0.0f;
                for (int64_t k = 0; k < g->K; k++)
                    s += (g->ta ? A[k * g->lda + i] : A[i * g->lda + k]) *
                         (g->tb ? B[jj * g->ldb + k] : B[k * g->ldb + jj]);
                const tg_gemm_epi *e = g->epi;
                if (e && e->bias) s += e->bias[jj];
                if (e && e->resid) s += e->resid[b * e->sr + i * e->ldr + jj];
                if (e && e->relu) s = s > 0.0f ? s : 0.0f;
                if (e && e->gate && !(e->gate[b * e->sg + i * e->ldg + jj] > 0.0f)) s = 0.0f;
                g->C[b * g->sc + i * g->ldc + jj] = g->acc ? c0 + s : s;
            }
}

/* ---- K split in blocks (see k_blocks) ---- */

/* Scratch floats the product needs on one thread. */
static size_t serial_scratch(const tg_gemm_args *g, const tg_ukernel *uk) {
    switch (choose(g)) {
    case PATH_PACKED: return packed_bytes() / sizeof(float);
    case PATH_DIRECT: return (size_t)((g->K < KC ? g->K : KC) * ((g->N + uk->nr - 1) / uk->nr) * uk->nr);
    default: return (size_t)(g->K + 16);
    }
}

/* The whole product on the calling thread, with its scratch `buf`. */
static void gemm_serial(const tg_gemm_args *g, const tg_ukernel *uk, float *buf) {
    job j = {g, uk, NULL, choose(g), 0, 0, 0, 1, ENTRIES, {{0}}, 0, 0};
    if (j.path == PATH_PACKED) {
        for (int64_t b = 0; b < g->batch; b++) packed_entry(g, uk, b, buf);
    } else if (j.path == PATH_DIRECT) {
        j.mt = (g->M + uk->mr - 1) / uk->mr;
        j.nt = (g->N + uk->nr - 1) / uk->nr;
        direct_tiles(&j, 0, g->batch * j.mt * j.nt, buf);
    } else {
        gemv_rows(&j, 0, g->batch * (g->N == 1 ? g->M : g->N), buf);
    }
}

size_t tg_gemm_serial_floats(const tg_gemm_args *g) { return serial_scratch(g, pick()) + 16; }

void tg_gemm_serial(const tg_gemm_args *g, float *buf) {
    if (g->batch > 0 && g->M > 0 && g->N > 0) gemm_serial(g, pick(), buf);
}

typedef struct {
    const tg_gemm_args *g;
    const tg_ukernel *uk;
    tg_pool *pool;
    int64_t nb;
    float *part; /* nb partial products, [M, N] each */
    int sum_tasks;
} ksplit_job;

static tg_gemm_args k_block(const ksplit_job *j, int64_t b) {
    const tg_gemm_args *g = j->g;
    int64_t k0 = g->K * b / j->nb, k1 = g->K * (b + 1) / j->nb;
    tg_gemm_args s = *g;
    s.K = k1 - k0;
    s.A = g->ta ? g->A + k0 * g->lda : g->A + k0;
    s.B = g->tb ? g->B + k0 : g->B + k0 * g->ldb;
    s.C = j->part + b * g->M * g->N;
    s.ldc = g->N;
    s.epi = NULL;
    return s;
}

static void ksplit_block(void *arg, int b, int thread) {
    ksplit_job *j = arg;
    tg_gemm_args s = k_block(j, b);
    gemm_serial(&s, j->uk, tg_pool_scratch(j->pool, thread, 0));
}

/* Rows of C: the partials added in block order (vector adds along the
 * row), then the epilogue as the tile kernels apply it. With an epilogue
 * the sums go through a local buffer, so a gate that C overwrites in place
 * is read before its element is written. */
#define KSPLIT_CHUNK 512
static void ksplit_sum(void *arg, int task, int thread) {
    (void)thread;
    ksplit_job *j = arg;
    const tg_gemm_args *g = j->g;
    const tg_gemm_epi *e = g->epi;
    const vec_kernels *vk = tg_vec_best();
    float buf[KSPLIT_CHUNK];
    int64_t MN = g->M * g->N, i0 = g->M * task / j->sum_tasks, i1 = g->M * (task + 1) / j->sum_tasks;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j0 = 0; j0 < g->N; j0 += KSPLIT_CHUNK) {
            int64_t n = g->N - j0 < KSPLIT_CHUNK ? g->N - j0 : KSPLIT_CHUNK;
            float *c = e ? buf : g->C + i * g->ldc + j0;
            const float *p = j->part + i * g->N + j0;
            vk->binary(VEC_ADD, n, c, p, 1, p + MN, 1);
            for (int64_t b = 2; b < j->nb; b++) vk->binary(VEC_ADD, n, c, c, 1, p + b * MN, 1);
            for (int64_t jj = 0; e && jj < n; jj++) {
                float v = c[jj];
                if (e->bias) v += e->bias[j0 + jj];
                if (e->resid) v += e->resid[i * e->ldr + j0 + jj];
                if (e->relu) v = v > 0.0f ? v : 0.0f;
                if (e->gate && !(e->gate[i * e->ldg + j0 + jj] > 0.0f)) v = 0.0f;
                g->C[i * g->ldc + j0 + jj] = v;
            }
        }
}

static bool gemm_shared(tg_pool *pool, const tg_gemm_args *g);

static bool gemm_ksplit(tg_pool *pool, const tg_gemm_args *g, int64_t nb) {
    int th = tg_pool_threads(pool);
    ksplit_job j = {g, pick(), pool, nb, tg_pool_shared(pool, sizeof(float) * (size_t)(nb * g->M * g->N)), 8};
    if (!j.part) return false;
    tg_gemm_args first = k_block(&j, 0);
    if (th > nb && worth_threads(&first, 2.0 * (double)g->M * (double)g->N * (double)first.K)) {
        for (int64_t b = 0; b < nb; b++) {
            tg_gemm_args s = k_block(&j, b);
            if (!gemm_shared(pool, &s)) return false;
        }
    } else {
        size_t need = 0;
        for (int64_t b = 0; b < nb; b++) {
            tg_gemm_args s = k_block(&j, b);
            size_t f = serial_scratch(&s, j.uk);
            need = f > need ? f : need;
        }
        for (int t = 0; t < th; t++)
            if (!tg_pool_scratch(pool, t, need * sizeof(float))) return false;
        tg_pool_run(pool, (int)nb, ksplit_block, &j);
    }
    /* rows of C in tasks: at least 8 (the sums' order is per element, any split gives the same bits) */
    j.sum_tasks = (int)(g->M < 8 ? g->M : g->M < 2 * th ? g->M : 2 * th > 8 ? 2 * th : 8);
    tg_pool_run(pool, j.sum_tasks, ksplit_sum, &j);
    return true;
}

void tg_gemm(tg_pool *pool, const tg_gemm_args *g) {
    if (g->batch <= 0 || g->M <= 0 || g->N <= 0) return;
    int64_t nb = k_blocks(g);
    if (nb > 1) {
        if (!gemm_ksplit(pool, g, nb)) gemm_naive(g);
        return;
    }
    if (!gemm_shared(pool, g)) gemm_naive(g);
}

/* The product (no k blocks) on the pool's threads where they pay; false
 * when the packing buffers cannot be had. */
static bool gemm_shared(tg_pool *pool, const tg_gemm_args *g) {
    int th = tg_pool_threads(pool);
    job j = {g, pick(), pool, choose(g), 0, 0, 0, 1, ENTRIES, {{0}}, 0, 0};
    double flops = 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)g->batch;
    int want = worth_threads(g, flops) ? th : 1;
    size_t scratch;
    if (j.path == PATH_PACKED) {
        scratch = packed_bytes();
    } else if (j.path == PATH_DIRECT) {
        j.mt = (g->M + j.uk->mr - 1) / j.uk->mr;
        j.nt = (g->N + j.uk->nr - 1) / j.uk->nr;
        j.units = g->batch * j.mt * j.nt;
        scratch = sizeof(float) * (size_t)((g->K < KC ? g->K : KC) * j.nt * j.uk->nr); /* a block of B^T */
    } else {
        j.units = g->batch * (g->N == 1 ? g->M : g->N);
        scratch = sizeof(float) * (size_t)(g->K + 16);
    }
    for (int t = 0; t < th; t++)
        if (!tg_pool_scratch(pool, t, t == 0 && j.path == PATH_PACKED ? packed_bytes_lead() : scratch)) return false;
    if (j.path != PATH_PACKED) {
        j.tasks = (int)(j.units < want ? j.units : want);
        tg_pool_run(pool, j.tasks, run_task, &j);
        return true;
    }
    if (g->batch >= want) { /* batch entries split between threads, each on its own buffers */
        j.units = g->batch;
        j.tasks = (int)(g->batch < 4 * want ? g->batch : 4 * want);
        tg_pool_run(pool, j.tasks, run_task, &j);
        return true;
    }
    /* One product on all threads: pack a group of consecutive B blocks
     * together, then split the rows of C, each thread taking the blocks in
     * order over its rows (which only it writes). Each pool run is a full
     * barrier: packing several KC blocks at once saves most of them where
     * K is long (a vocabulary head's input gradient has 131). */
    float *pb = (float *)tg_pool_scratch(pool, 0, 0) + a_block_floats();
    int64_t row_units = (g->M + j.uk->mr - 1) / j.uk->mr, NR = j.uk->nr;
    for (int64_t b = 0; b < g->batch; b++)
        for (int64_t jc = 0; jc < g->N; jc += NC) {
            int64_t nc = g->N - jc < NC ? g->N - jc : NC;
            j.panels = (nc + NR - 1) / NR;
            int64_t per = j.panels * NR * KC, group = (int64_t)B_GROUP_FLOATS / per;
            if (group > B_GROUP_MAX) group = B_GROUP_MAX;
            for (int64_t pc = 0; pc < g->K;) {
                for (j.n_blk = 0; j.n_blk < group && pc < g->K; j.n_blk++, pc += KC)
                    j.blk[j.n_blk] = (block){b, jc, nc, pc, g->K - pc < KC ? g->K - pc : KC, pb + j.n_blk * per};
                j.phase = PACK_B;
                j.units = j.n_blk * j.panels;
                j.tasks = (int)(j.units < want ? j.units : want);
                tg_pool_run(pool, j.tasks, run_task, &j);
                j.phase = ROWS;
                j.units = row_units;
                j.tasks = (int)(j.units < 2 * want ? j.units : 2 * want);
                tg_pool_run(pool, j.tasks, run_task, &j);
            }
        }
    return true;
}
