/* A small thread pool. A job's units are dealt out in one contiguous range
 * per thread, each published as a 64-bit word (generation, end, next unit);
 * every thread, the caller included, claims units with compare-and-swap,
 * first from its own range, then from the others'. Consecutive kernels
 * split their rows the same way, so a thread mostly reads what it wrote
 * itself, from its own core's cache, instead of pulling it from the other
 * core; and a thread that is late (descheduled on a busy machine) has its
 * range taken by the others, since the caller only waits for workers that
 * did claim a unit. Idle workers spin for a short while (steps issue many
 * small kernels back to back), then sleep on a condition variable. */
#define _GNU_SOURCE /* sched_getaffinity (Linux) */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FP_CONTROL 0xffc0u /* MXCSR without its sticky exception flags */
tg_fpmode tg_fpmode_get(void) { return _mm_getcsr(); }
void tg_fpmode_set(tg_fpmode m) { _mm_setcsr((unsigned)m); }
tg_fpmode tg_fpmode_flush(tg_fpmode m) { return m | 0x8040u; /* FTZ | DAZ */ }
#elif defined(__aarch64__)
#define FP_CONTROL (~(tg_fpmode)0x9fu) /* FPCR; the flags live in FPSR */
tg_fpmode tg_fpmode_get(void) {
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}
void tg_fpmode_set(tg_fpmode m) { __asm__ volatile("msr fpcr, %0" : : "r"(m)); }
tg_fpmode tg_fpmode_flush(tg_fpmode m) { return m | (1u << 24); /* FZ */ }
#else
#define FP_CONTROL 0u
tg_fpmode tg_fpmode_get(void) { return 0; }
void tg_fpmode_set(tg_fpmode m) { (void)m; }
tg_fpmode tg_fpmode_flush(tg_fpmode m) { return m; }
#endif

bool tg_fpmode_same(tg_fpmode a, tg_fpmode b) { return (a & FP_CONTROL) == (b & FP_CONTROL); }

#define MAX_UNITS 4096   /* units per job; more tasks are grouped into units */
#define SPIN_SECONDS 2e-4     /* idle spinning before sleeping */
#define SPIN_SECONDS_HOT 5e-3 /* the same while the owner is inside a run (tg_pool_hot) */

/* Three cache lines apart: the job (written once per job by the caller,
 * then only read), the count of workers inside it (written by each worker
 * as it enters and leaves), and the rest. With the count beside the job,
 * every worker's entry and exit took the line away from the threads
 * reading the job's fields and watching for the next one. */
struct tg_pool {
    /* The job, written before its state is published and not touched again
     * until every worker that claimed a unit has left. */
    _Alignas(64) _Atomic uint64_t state; /* generation << 32: what idle workers watch */
    struct range { _Alignas(64) _Atomic uint64_t w; } *range; /* per thread: generation << 32 | end << 16 | next */
    /* Ranges of the current job. Atomic: a worker still in the last job's
     * claim loop may read it while the owner writes the next job's. */
    atomic_int n_ranges;
    int n_tasks, units;
    tg_task_fn fn;
    void *arg;
    tg_fpmode fpmode;      /* the caller's */
    atomic_bool hot;       /* inside a run: more jobs follow soon */
    _Atomic double cooled; /* when the last run ended (tg_now) */

    _Alignas(64) atomic_int active; /* workers inside a job's claim loop */

    _Alignas(64) int n; /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int sleepers;
    atomic_bool stop;
    uint32_t gen; /* the caller's count of jobs */
    void **scratch;
    size_t *scratch_bytes;
    void *shared;
    size_t shared_bytes;
};

typedef struct {
    tg_pool *p;
    int id;
} worker_arg;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint32_t state_gen(uint64_t s) { return (uint32_t)(s >> 32); }

/* Claims and runs units of job `gen` until none is left: its own range
 * first, then the others' in turn. */
static void claim(tg_pool *p, uint32_t gen, int tid) {
    /* the job's, or a later one's: then every CAS below fails on the generation */
    int nr = atomic_load_explicit(&p->n_ranges, memory_order_relaxed);
    for (int k = 0; k < nr; k++) {
        _Atomic uint64_t *w = &p->range[(tid + k) % nr].w;
        uint64_t s = atomic_load_explicit(w, memory_order_acquire);
        for (;;) {
            uint32_t end = (uint32_t)(s >> 16) & 0xffff, next = (uint32_t)s & 0xffff;
            if (state_gen(s) != gen) return;
            if (next >= end) break;
            if (!atomic_compare_exchange_weak_explicit(w, &s, s + 1, memory_order_acq_rel, memory_order_acquire))
                continue;
            /* A claimed unit's job is current: its fields, the caller's mode among them, are stable. */
            if (!tg_fpmode_same(tg_fpmode_get(), p->fpmode)) tg_fpmode_set(p->fpmode);
            int lo = (int)((int64_t)p->n_tasks * next / p->units);
            int hi = (int)((int64_t)p->n_tasks * (next + 1) / p->units);
            for (int t = lo; t < hi; t++) p->fn(p->arg, t, tid);
            s = atomic_load_explicit(w, memory_order_acquire);
        }
    }
}

static void *worker(void *argp) {
    worker_arg wa = *(worker_arg *)argp;
    free(argp);
    tg_pool *p = wa.p;
    uint32_t seen = 0; /* the generation at creation: a job posted before we got here is still new */
    for (;;) {
        double t0 = tg_now();
        for (int spins = 1; state_gen(atomic_load_explicit(&p->state, memory_order_acquire)) == seen; spins++) {
            cpu_relax();
            if (spins % 64) continue;
            /* Spin as long as the run lasts (up to SPIN_SECONDS_HOT), then
             * SPIN_SECONDS past its end: the next step usually starts by then.
             * Yield now and then: on an idle machine that returns at once, on
             * a busy one it lets the other processes run instead of this
             * spinning (which otherwise costs the run its own time slices). */
            if (spins % 1024 == 0) sched_yield();
            double now = tg_now(), since = atomic_load_explicit(&p->cooled, memory_order_relaxed);
            if (atomic_load_explicit(&p->hot, memory_order_relaxed) ? now - t0 > SPIN_SECONDS_HOT
                                                                   : now - (since > t0 ? since : t0) > SPIN_SECONDS)
                break;
        }
        if (state_gen(atomic_load(&p->state)) == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (state_gen(atomic_load(&p->state)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = state_gen(atomic_load(&p->state));
        atomic_fetch_add(&p->active, 1);
        claim(p, seen, wa.id);
        atomic_fetch_sub_explicit(&p->active, 1, memory_order_release);
    }
}

tg_pool *tg_pool_new(int n) {
    if (n < 1) n = 1;
    tg_pool *p = tg_aalloc(sizeof *p); /* zeroed, and 64-byte aligned as its lines need */
    if (!p) return NULL;
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->th = tg_calloc((size_t)n, sizeof(pthread_t));
    p->scratch = tg_calloc((size_t)n, sizeof(void *));
    p->scratch_bytes = tg_calloc((size_t)n, sizeof(size_t));
    p->range = tg_aalloc(sizeof(struct range) * (size_t)n);
    if (!p->th || !p->scratch || !p->scratch_bytes || !p->range) {
        free(p->th);
        free(p->scratch);
        free(p->scratch_bytes);
        tg_afree(p->range);
        tg_afree(p);
        return NULL;
    }
    for (int i = 0; i < n; i++) atomic_init(&p->range[i].w, 0);
    for (int i = 1; i < n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->th[i], NULL, worker, wa ? (wa->p = p, wa->id = i, wa) : NULL) != 0) {
            free(wa);
            p->n = i; /* run with the threads we got */
            break;
        }
    }
    return p;
}

void tg_pool_free(tg_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    for (int i = 0; i < p->n; i++) tg_afree(p->scratch[i]);
    tg_afree(p->shared);
    free(p->scratch);
    free(p->scratch_bytes);
    free(p->th);
    tg_afree(p->range);
    tg_afree(p);
}

void *tg_pool_scratch(tg_pool *p, int thread, size_t bytes) {
    if (!p || thread < 0 || thread >= p->n) return NULL;
    if (p->scratch_bytes[thread] < bytes) {
        tg_afree(p->scratch[thread]);
        p->scratch[thread] = tg_aalloc(bytes);
        p->scratch_bytes[thread] = p->scratch[thread] ? bytes : 0;
    }
    return p->scratch[thread];
}

void *tg_pool_shared(tg_pool *p, size_t bytes) {
    if (!p) return NULL;
    if (p->shared_bytes < bytes) {
        tg_afree(p->shared);
        p->shared = tg_aalloc(bytes);
        p->shared_bytes = p->shared ? bytes : 0;
    }
    return p->shared;
}

int tg_pool_threads(const tg_pool *p) { return p ? p->n : 1; }

void tg_pool_hot(tg_pool *p, bool on) {
    if (!p) return;
    if (!on) atomic_store_explicit(&p->cooled, tg_now(), memory_order_relaxed);
    atomic_store_explicit(&p->hot, on, memory_order_relaxed);
}

void tg_pool_run(tg_pool *p, int n_tasks, tg_task_fn fn, void *arg) {
    if (!p || p->n == 1 || n_tasks <= 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    p->units = n_tasks < MAX_UNITS ? n_tasks : MAX_UNITS;
    p->fpmode = tg_fpmode_get();
    uint32_t gen = ++p->gen ? p->gen : ++p->gen; /* 0 is "before the first job" */
    /* Thread t's own units: [t * units / nr, (t + 1) * units / nr). */
    int nr = p->n < p->units ? p->n : p->units;
    for (int t = 0; t < nr; t++) {
        uint64_t lo = (uint64_t)p->units * (uint64_t)t / (uint64_t)nr;
        uint64_t hi = (uint64_t)p->units * (uint64_t)(t + 1) / (uint64_t)nr;
        atomic_store_explicit(&p->range[t].w, (uint64_t)gen << 32 | hi << 16 | lo, memory_order_relaxed);
    }
    atomic_store_explicit(&p->n_ranges, nr, memory_order_relaxed); /* published by the state store below */
    atomic_store(&p->state, (uint64_t)gen << 32);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    claim(p, gen, 0);
    /* Every unit is claimed; wait for the workers still running theirs. */
    for (int spins = 1; atomic_load_explicit(&p->active, memory_order_acquire) > 0; spins++) {
        cpu_relax();
        if (spins % 1024 == 0) sched_yield(); /* a worker holding a unit may need this core */
    }
}

static atomic_int default_threads;
void tg_set_default_threads(int n) { atomic_store(&default_threads, n > 0 ? n : 0); }

/* The order the public header gives: the program's own setting, then the
 * environment, then the machine. */
int tg_default_threads(void) {
    int d = atomic_load(&default_threads);
    if (d > 0) return d;
    const char *e = getenv("TG_THREADS");
    if (e && *e) {
        char *end;
        long n = strtol(e, &end, 10);
        return end != e && !*end && n >= 1 && n <= TG_CPU_MAX_THREADS ? (int)n : -1;
    }
#ifdef __linux__
    /* The cores this process may run on (taskset, cgroups), not all the machine's. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

typedef struct {
    int64_t n, chunk;
    tg_range_fn fn;
    void *arg;
} range_job;

static void range_task(void *argp, int task, int thread) {
    (void)thread;
    range_job *j = argp;
    int64_t lo = (int64_t)task * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    if (lo < hi) j->fn(j->arg, lo, hi);
}

void tg_cpu_parallel(cpu_ctx *c, int64_t n, int64_t grain, tg_range_fn fn, void *arg) {
    int th = c ? c->threads : 1;
    if (n <= 0) return;
    if (th <= 1 || n < 2 * grain) {
        fn(arg, 0, n);
        return;
    }
    int64_t tasks = n / grain;
    if (tasks > 4 * th) tasks = 4 * th;
    if (tasks < th) tasks = th;
    range_job j = {n, (n + tasks - 1) / tasks, fn, arg};
    tg_pool_run(c->pool, (int)((n + j.chunk - 1) / j.chunk), range_task, &j);
}

int64_t tg_cpu_row_blocks(int64_t R) {
    int64_t nb = R / 128;
    return nb < 2 ? 1 : nb > 8 ? 8 : nb;
}

typedef struct {
    int64_t R, nb, width;
    tg_block_fn fn;
    void *arg;
    float *part, *out;
} rows_job;

static void block_task(void *argp, int b, int thread) {
    (void)thread;
    rows_job *j = argp;
    j->fn(j->arg, j->R * b / j->nb, j->R * (b + 1) / j->nb, j->part + (int64_t)b * j->width);
}

static void combine_range(void *argp, int64_t lo, int64_t hi) {
    rows_job *j = argp;
    for (int64_t i = lo; i < hi; i++) {
        float s = j->part[i];
        for (int64_t b = 1; b < j->nb; b++) s += j->part[b * j->width + i];
        j->out[i] = s;
    }
}

void tg_cpu_reduce_rows(cpu_ctx *c, int64_t R, int64_t width, tg_block_fn fn, void *arg, float *out) {
    int64_t nb = tg_cpu_row_blocks(R);
    float *part = nb > 1 && c ? tg_pool_shared(c->pool, sizeof(float) * (size_t)(nb * width)) : NULL;
    if (!part) { /* one block (or out of memory: one block, rounded differently, but no failure) */
        fn(arg, 0, R, out);
        return;
    }
    rows_job j = {R, nb, width, fn, arg, part, out};
    if (R * width < 4 * 16384) { /* small: the same blocks, on the caller, cheaper than waking the pool */
        for (int b = 0; b < nb; b++) block_task(&j, b, 0);
        combine_range(&j, 0, width);
        return;
    }
    tg_pool_run(c->pool, (int)nb, block_task, &j);
    tg_cpu_parallel(c, width, 16384, combine_range, &j);
}
