/* A small thread pool: the caller runs tasks too, workers spin briefly for
 * the next job (steps issue many small kernels back to back) and then sleep
 * on a condition variable. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu.h"

struct tg_pool {
    int n; /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;
    atomic_int next;
    atomic_int pending;
    int sleepers;
    bool stop;
    int n_tasks;
    tg_task_fn fn;
    void *arg;
    void **scratch;
    size_t *scratch_bytes;
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

static void drain(tg_pool *p, int tid) {
    int t;
    while ((t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n_tasks) p->fn(p->arg, t, tid);
}

static void *worker(void *argp) {
    worker_arg wa = *(worker_arg *)argp;
    free(argp);
    tg_pool *p = wa.p;
    /* The generation the pool had when it was made, not when this thread got
     * to run: a thread that starts after the first tg_pool_run would
     * otherwise take that job as already seen and never finish it. */
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && spins < 200000) {
            cpu_relax();
            spins++;
        }
        if (atomic_load_explicit(&p->gen, memory_order_acquire) == seen) {
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !p->stop) {
                p->sleepers++;
                pthread_cond_wait(&p->cv, &p->mu);
                p->sleepers--;
            }
            bool stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = atomic_load(&p->gen);
        if (p->stop) return NULL;
        drain(p, wa.id);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

tg_pool *tg_pool_new(int n) {
    if (n < 1) n = 1;
    tg_pool *p = tg_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->th = tg_calloc((size_t)n, sizeof(pthread_t));
    p->scratch = tg_calloc((size_t)n, sizeof(void *));
    p->scratch_bytes = tg_calloc((size_t)n, sizeof(size_t));
    if (!p->th || !p->scratch || !p->scratch_bytes) {
        free(p->th);
        free(p->scratch);
        free(p->scratch_bytes);
        free(p);
        return NULL;
    }
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
    p->stop = true;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    for (int i = 0; i < p->n; i++) tg_afree(p->scratch[i]);
    free(p->scratch);
    free(p->scratch_bytes);
    free(p->th);
    free(p);
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

int tg_pool_threads(const tg_pool *p) { return p ? p->n : 1; }

void tg_pool_run(tg_pool *p, int n_tasks, tg_task_fn fn, void *arg) {
    if (!p || p->n == 1 || n_tasks <= 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) cpu_relax();
}

static int default_threads = 0;
void tg_set_default_threads(int n) { default_threads = n > 0 ? n : 0; }

int tg_default_threads(void) {
    const char *e = getenv("TG_THREADS");
    if (e && atoi(e) > 0) return atoi(e);
    if (default_threads > 0) return default_threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    return 1;
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

void cpu_parallel(cpu_ctx *c, int64_t n, int64_t grain, tg_range_fn fn, void *arg) {
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
