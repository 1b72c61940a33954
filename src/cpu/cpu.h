/* The CPU backend: a thread pool, a packed GEMM, and one kernel per op. */
#ifndef TG_CPU_H
#define TG_CPU_H

#include "../ir/ir.h"
#include "isa.h"

/* ---- floating-point mode ----
 * The CPU backend runs a program's kernels with subnormal floats flushed to
 * zero, inputs and results (x86 MXCSR FTZ and DAZ; aarch64 FPCR.FZ), as GPUs
 * do: a subnormal operand costs x86 a microcode assist of ~100 cycles, and
 * training makes them (Adam's second moments and small gradients decay
 * through that range), which slowed whole steps several times over. The
 * caller's mode is saved and restored around each run, so the program's own
 * floating-point environment is untouched; pool workers take the mode of the
 * thread that posts each job, so every thread rounds alike and results do
 * not depend on the thread count. */
typedef uint64_t tg_fpmode;
tg_fpmode tg_fpmode_get(void);
void tg_fpmode_set(tg_fpmode m);
/* m with subnormals flushed (a no-op on other targets). */
tg_fpmode tg_fpmode_flush(tg_fpmode m);
/* Whether a and b set the same controls (rounding, flushing; not the sticky flags). */
bool tg_fpmode_same(tg_fpmode a, tg_fpmode b);

/* ---- thread pool ---- */
typedef struct tg_pool tg_pool;
/* fn(arg, task, thread) runs for task in [0, n_tasks) across the pool's
 * threads; thread is in [0, tg_pool_threads). The call returns when all
 * tasks are done. Tasks must write disjoint memory. Workers run them in the
 * caller's floating-point mode. */
typedef void (*tg_task_fn)(void *arg, int task, int thread);
tg_pool *tg_pool_new(int n_threads);
void tg_pool_free(tg_pool *p);
int tg_pool_threads(const tg_pool *p);
/* A per-thread scratch buffer of at least `bytes` (64-byte aligned), owned
 * by the pool and reused across calls; NULL if it cannot grow. */
void *tg_pool_scratch(tg_pool *p, int thread, size_t bytes);
/* One buffer of at least `bytes` (64-byte aligned) that the tasks of a job
 * share (per-block partial results), grown as needed; NULL if it cannot grow. */
void *tg_pool_shared(tg_pool *p, size_t bytes);
void tg_pool_run(tg_pool *p, int n_tasks, tg_task_fn fn, void *arg);
/* Between tg_pool_hot(p, true) and (p, false) (a training step), idle
 * workers wait for the next job spinning instead of going to sleep after a
 * fraction of a millisecond: a step's serial stretches (the loss, a small
 * product) are long enough to put them to sleep, and waking a sleeping
 * thread delays the next parallel kernel and slows the caller's serial
 * kernels too (docs/performance.md). Outside a run they soon sleep, so
 * the caller's own work between steps gets the cores. */
void tg_pool_hot(tg_pool *p, bool on);
/* The thread count new sessions use when their spec says 0: the default set
 * by tg_set_default_threads, else TG_THREADS, else the CPUs this process
 * may run on; -1 when TG_THREADS is set to anything but a whole number from
 * 1 to TG_CPU_MAX_THREADS. */
int tg_default_threads(void);
/* The most threads an engine starts (tg_cpu_engine_new says why). */
#define TG_CPU_MAX_THREADS 1024

/* ---- GEMM ---- */
/* What is done to each element of C after the product, in this order:
 * C += bias[j]; C += resid[i,j] (a residual add); C = max(C, 0) if relu;
 * C = gate[i,j] > 0 ? C : 0 (relu's gradient, gate being relu's output).
 * The same float operations as the separate kernels, so fusing them changes
 * no bits. */
typedef struct {
    const float *bias;
    bool relu;
    const float *gate;
    int64_t ldg, sg; /* gate: between rows, between batch entries */
    const float *resid;
    int64_t ldr, sr; /* resid: between rows, between batch entries */
} tg_gemm_epi;

/* C[M,N] = op(A)[M,K] @ op(B)[K,N] for `batch` matrices. op(A) is A (lda
 * between rows) or, with ta, A stored [K,M]; likewise B. Stride between
 * batch entries: sa, sb, sc elements (sb = 0 shares one B). Row-major. */
typedef struct tg_gemm_args {
    int64_t batch, M, N, K;
    const float *A, *B;
    float *C;
    int64_t lda, ldb, ldc, sa, sb, sc;
    bool ta, tb;
    const tg_gemm_epi *epi; /* NULL: none */
    bool acc;               /* C += the product, as a later K block adds its own (no epilogue) */
} tg_gemm_args;
/* K goes in blocks of TG_GEMM_KC: each C element is the first block's FMA
 * chain, then each later block's chain added, so a product split along K
 * at these boundaries into products with acc gives the same bits. */
#define TG_GEMM_KC 384
void tg_gemm(tg_pool *pool, const tg_gemm_args *a);
/* The same product on the calling thread alone (inside a pool task), with
 * `buf` of tg_gemm_serial_floats(a) floats, 64-byte aligned, for packing.
 * Its bits depend on the shape alone, like tg_gemm's, though they may
 * differ from tg_gemm's where that splits K (weight-gradient shapes). */
size_t tg_gemm_serial_floats(const tg_gemm_args *a);
void tg_gemm_serial(const tg_gemm_args *a, float *buf);
/* Which micro-kernel tg_gemm uses on this machine ("avx512 12x32", ...). */
const char *tg_gemm_kernel_name(void);
/* Tests: use the portable kernel (the one CPUs without AVX-512 get). */
void tg_gemm_use_generic(bool on);
/* Whether the chosen micro-kernel chains products with FMAs (AVX-512) or
 * multiplies then adds (portable): kernels that must round like tg_gemm ask. */
bool tg_gemm_uses_fma(void);
/* Whether tg_gemm shares this product between threads (else it runs on
 * the caller's); tests use it to make sure they cover both. */
bool tg_gemm_splits(const tg_gemm_args *a);
/* True if tg_gemm writes each element of C once (no k blocks), so an
 * epilogue may read a buffer that C overwrites element by element. */
bool tg_gemm_single_pass(const tg_gemm_args *a);

/* Tests: sessions compiled from now on run op-table kernels only, no
 * specialized or fused steps. */
void tg_cpu_use_generic_steps(bool on);
bool tg_cpu_generic_steps(void);

/* ---- kernels ---- */
typedef struct cpu_ctx cpu_ctx;
struct cpu_ctx {
    tg_pool *pool;
    int threads;
    /* One growable buffer for kernels that stage data around tg_gemm calls
     * (conv's im2col); separate from the pool's per-thread buffers, which
     * tg_gemm itself uses. Freed with the engine. */
    void *scratch;
    size_t scratch_bytes;
};
/* c->scratch grown to at least `bytes` (64-byte aligned); NULL if it cannot grow. */
void *tg_cpu_scratch(cpu_ctx *c, size_t bytes);

/* Runs fn over [0, n) split in chunks of at least `grain` items. */
typedef void (*tg_range_fn)(void *arg, int64_t lo, int64_t hi);
void tg_cpu_parallel(cpu_ctx *c, int64_t n, int64_t grain, tg_range_fn fn, void *arg);

/* Sums over a long axis of rows (bias gradients, norm gains, small
 * embedding tables) are split into tg_cpu_row_blocks(R) fixed blocks of rows:
 * fn(arg, r0, r1, partial) writes the sums of rows [r0, r1), in row order,
 * into its own `width` partial results, and out[i] = the partials added in
 * block order. A block goes to the thread that owns its rows in every
 * row-split kernel (the pool deals ranges in order), which mostly wrote
 * them, so no thread pulls the other's rows across cores, as splitting the
 * columns did (slower than one thread; docs/performance.md). The blocks depend on R
 * alone: results do not depend on the thread count. */
typedef void (*tg_block_fn)(void *arg, int64_t r0, int64_t r1, float *partial);
int64_t tg_cpu_row_blocks(int64_t R);
void tg_cpu_reduce_rows(cpu_ctx *c, int64_t R, int64_t width, tg_block_fn fn, void *arg, float *out);
#endif
