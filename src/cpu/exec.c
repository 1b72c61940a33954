/* The CPU engine: arenas are host allocations, a program is a list of steps
 * (lower.c) resolved once at compile, and a training step walks that list. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "groups.h"
#include "lower.h"

typedef struct {
    char *arena[TG_N_ARENAS]; /* [0] is the engine's shared params arena */
    cpu_step *steps;
    int n_steps;
    /* writebacks not done in place; pre: of a value computed before the cut (a micro-step does it too) */
    struct { void *dst; const void *src; int64_t bytes; bool pre; } *copies;
    int n_copies;
    double *prof;  /* TG_PROFILE set: seconds spent in each step, summed over runs */
    int64_t prof_runs;
    bool prof_every; /* TG_PROFILE=all: every step printed, not only the slowest */
    int split;     /* the first step of the optimizer updates: the step check runs before it */
    int cut;       /* the first step after the backward (p->cut): a data-parallel step averages the gradients there */
} cpu_program;

typedef struct {
    tg_engine base;
    tg_pool *pool;
    cpu_ctx ctx;
    char *params;
} cpu_engine;

static atomic_bool generic_steps;
void tg_cpu_use_generic_steps(bool on) { atomic_store(&generic_steps, on); }
bool tg_cpu_generic_steps(void) { return atomic_load(&generic_steps); }

static void *addr(cpu_program *cp, const tg_plan *pl, int id) {
    const tg_slot *s = &pl->slot[id];
    return cp->arena[s->arena] + s->offset;
}

/* Arenas of a few MiB and more are zeroed by the pool's threads in
 * contiguous slices, the way the row-split kernels deal rows, so that each
 * page is first touched (and placed, on a machine of several memory nodes)
 * by a thread that will use it, and a big program compiles sooner. */
#define BIG_ARENA ((size_t)4 << 20)

typedef struct {
    char *p;
    size_t bytes;
    int tasks;
} zero_job;

static void zero_slice(void *arg, int task, int thread) {
    (void)thread;
    const zero_job *z = arg;
    size_t slice = z->bytes / (size_t)z->tasks, lo = slice * (size_t)task;
    memset(z->p + lo, 0, task + 1 == z->tasks ? z->bytes - lo : slice);
}

static char *arena_alloc(tg_pool *pool, size_t bytes) {
    if (bytes < BIG_ARENA) return tg_aalloc(bytes);
    size_t n = (bytes + 63) & ~(size_t)63;
    char *p = aligned_alloc(64, n);
    if (!p) return NULL;
    zero_job z = {p, n, tg_pool_threads(pool)};
    tg_pool_run(pool, z.tasks, zero_slice, &z);
    return p;
}

static tg_status cpu_compile(tg_engine *e_, tg_program *p) {
    cpu_engine *e = (cpu_engine *)e_;
    cpu_program *cp = tg_calloc(1, sizeof *cp);
    if (!cp) return tg_fail(TG_ERR_NOMEM, "cpu: out of memory");
    p->impl = cp;
    cp->arena[TG_ARENA_PARAMS] = e->params;
    for (int a = TG_ARENA_PERSIST; a < TG_N_ARENAS; a++) {
        cp->arena[a] = arena_alloc(e->pool, (size_t)p->plan.arena_bytes[a]);
        if (!cp->arena[a])
            return tg_fail(TG_ERR_NOMEM, "cpu: cannot allocate %lld bytes for arena %d",
                           (long long)p->plan.arena_bytes[a], a);
    }
    const tg_graph *g = p->g;
    cp->steps = tg_calloc((size_t)g->n + 1, sizeof(cpu_step));
    cp->copies = tg_calloc((size_t)p->n_wb + 1, sizeof *cp->copies);
    if (!cp->steps || !cp->copies) return tg_fail(TG_ERR_NOMEM, "cpu: out of memory");
    for (int i = 0; i < g->n; i++) { /* constants: once, now */
        const tg_node *n = &g->nodes[i];
        const tg_opinfo *info = &tg_ops[n->op];
        if (!tg_cpu_kernels[n->op] || !(info->flags & TG_OPF_CONSTANT) || (info->flags & TG_OPF_VIEW)) continue;
        void *in[TG_MAX_IN] = {0};
        for (int k = 0; k < n->nin; k++) in[k] = addr(cp, &p->plan, n->in[k]);
        tg_cpu_kernels[n->op](&e->ctx, g, i, addr(cp, &p->plan, i), in);
    }
    cp->n_steps = tg_cpu_lower(p, cp->arena, !atomic_load(&generic_steps), cp->steps);
    if (cp->n_steps == -2) return tg_fail(TG_ERR_STATE, "cpu: the plan does not keep a fused kernel's inputs apart");
    if (cp->n_steps < 0) return tg_fail(TG_ERR_NOMEM, "cpu: out of memory");
    tg_profile_setting prof;
    tg_status st = tg_program_profile(&prof);
    if (st != TG_OK) return st;
    if (prof.on) cp->prof = tg_calloc((size_t)cp->n_steps + 1, sizeof(double));
    cp->prof_every = prof.every;
    p->n_dispatches = cp->n_steps;
    cp->split = cp->cut = 0;
    while (cp->split < cp->n_steps && cp->steps[cp->split].id < p->first_update) cp->split++;
    while (cp->cut < cp->n_steps && cp->steps[cp->cut].id < p->cut) cp->cut++;
    if (cp->cut > cp->split) return tg_fail(TG_ERR_STATE, "cpu: an optimizer update runs before the end of the backward");
    bool before = p->check < 0;
    for (int i = 0; i < cp->split && !before; i++) before = cp->steps[i].id == p->check;
    if (!before) return tg_fail(TG_ERR_STATE, "cpu: the step check is not computed before the optimizer updates");
    for (int w = 0; w < p->n_wb; w++) {
        if (p->plan.wb_free[w]) continue;
        int src = p->wb[w].src, dst = p->wb[w].dst;
        cp->copies[cp->n_copies].dst = addr(cp, &p->plan, dst);
        cp->copies[cp->n_copies].src = addr(cp, &p->plan, src);
        cp->copies[cp->n_copies].bytes = p->plan.slot[src].bytes;
        cp->copies[cp->n_copies].pre = src < p->cut;
        cp->n_copies++;
    }
    return TG_OK;
}

/* TG_PROFILE: where a program's steps spent their time, the mean of every
 * run, per step (the slowest first, each named by its op, or a fused
 * group's kind, and its last node's call site) and per op or kind, on
 * stderr. */
static int by_time_desc(const void *x, const void *y, void *t_) {
    const double *t = t_;
    int a = *(const int *)x, b = *(const int *)y;
    return t[a] < t[b] ? 1 : t[a] > t[b] ? -1 : a - b;
}

static const char *step_name(const tg_graph *g, const cpu_step *s) {
    return s->label ? s->label : tg_ops[g->nodes[s->id].op].name;
}

/* The totals per op or group kind: [0, TG_OP_COUNT) ops, then the kinds. */
#define PROFILE_ROWS (TG_OP_COUNT + CPU_GROUP_KINDS)
static int profile_row(const tg_graph *g, const cpu_step *s) {
    for (int k = 0; s->label && k < CPU_GROUP_KINDS; k++)
        if (s->label == tg_cpu_group_names[k]) return TG_OP_COUNT + k;
    return g->nodes[s->id].op;
}

static void profile_print(const tg_program *p, const cpu_program *cp) {
    const tg_graph *g = p->g;
    double total = 0, by_row[PROFILE_ROWS] = {0};
    int count[PROFILE_ROWS] = {0};
    const char *row_name[PROFILE_ROWS] = {0};
    int *order = tg_calloc((size_t)cp->n_steps + 1, sizeof(int));
    if (!order || cp->prof_runs == 0) {
        free(order);
        return;
    }
    for (int i = 0; i < cp->n_steps; i++) {
        int r = profile_row(g, &cp->steps[i]);
        total += cp->prof[i], by_row[r] += cp->prof[i], count[r]++;
        row_name[r] = step_name(g, &cp->steps[i]);
        order[i] = i;
    }
    double per = 1e3 / (double)cp->prof_runs;
    fprintf(stderr, "cpu profile: %d steps, %.3f ms per run (%lld runs)\n", cp->n_steps, total * per,
            (long long)cp->prof_runs);
    /* insertion sort: a few hundred steps, once */
    for (int i = 1; i < cp->n_steps; i++)
        for (int j = i; j > 0 && by_time_desc(&order[j - 1], &order[j], cp->prof) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    fprintf(stderr, cp->prof_every ? "  every step, slowest first:\n" : "  slowest:\n");
    for (int k = 0; k < cp->n_steps && (cp->prof_every || k < TG_PROFILE_SLOWEST); k++) {
        const cpu_step *s = &cp->steps[order[k]];
        const tg_node *n = &g->nodes[s->id];
        char shape[64];
        int at = 0;
        for (int d = 0; d < n->shape.ndim && at < 56; d++)
            at += snprintf(shape + at, sizeof shape - (size_t)at, d ? ",%lld" : "%lld", (long long)n->shape.d[d]);
        shape[at] = 0;
        char site[200];
        tg_program_node_site(p, s->id, site, sizeof site);
        fprintf(stderr, "  %8.4f ms  %%%-5d %-18s [%s] nodes=%d  %s\n", cp->prof[order[k]] * per, s->id,
                step_name(g, s), shape, s->n_nodes, site);
    }
    fprintf(stderr, "  by op (a fused group by its kind):\n");
    for (int r = 0; r < PROFILE_ROWS; r++)
        if (count[r]) fprintf(stderr, "  %8.4f ms  %-18s x%d\n", by_row[r] * per, row_name[r], count[r]);
    free(order);
}

static void cpu_release(tg_engine *e, tg_program *p) {
    (void)e;
    cpu_program *cp = p->impl;
    if (!cp) return;
    if (cp->prof) profile_print(p, cp), free(cp->prof);
    for (int a = TG_ARENA_PERSIST; a < TG_N_ARENAS; a++) tg_afree(cp->arena[a]);
    for (int i = 0; cp->steps && i <= p->g->n; i++) free(cp->steps[i].heap[0]), free(cp->steps[i].heap[1]);
    free(cp->steps);
    free(cp->copies);
    free(cp);
    p->impl = NULL;
}

static char *arena_of(cpu_engine *e, tg_program *p, int arena) {
    if (arena == TG_ARENA_PARAMS) return e->params;
    return p && p->impl ? ((cpu_program *)p->impl)->arena[arena] : NULL;
}

static tg_status cpu_write(tg_engine *e_, tg_program *p, int arena, int64_t off, const void *src, int64_t bytes) {
    char *base = arena_of((cpu_engine *)e_, p, arena);
    if (!base && bytes) return tg_fail(TG_ERR_STATE, "cpu: no arena %d", arena);
    if (bytes) memcpy(base + off, src, (size_t)bytes);
    return TG_OK;
}

static tg_status cpu_read(tg_engine *e_, tg_program *p, int arena, int64_t off, void *dst, int64_t bytes) {
    char *base = arena_of((cpu_engine *)e_, p, arena);
    if (!base && bytes) return tg_fail(TG_ERR_STATE, "cpu: no arena %d", arena);
    if (bytes) memcpy(dst, base + off, (size_t)bytes);
    return TG_OK;
}

/* check_each: the first non-finite f32 value node `id` holds, as a failure. */
static tg_status check_node(const tg_program *p, cpu_program *cp, int id) {
    const tg_node *n = &p->g->nodes[id];
    const tg_slot *sl = &p->plan.slot[id];
    if (n->dtype != TG_F32 || sl->arena < 0 || sl->bytes == 0) return TG_OK;
    const float *x = addr(cp, &p->plan, id);
    int64_t at = tg_first_nonfinite(x, tg_ir_numel(n));
    return at < 0 ? TG_OK : tg_program_numeric_fail(p, id, x[at], at);
}

/* Steps [from, to); with check_each, each output (and first the inputs and
 * params) is checked as it is made. */
static tg_status run_steps(cpu_engine *e, const tg_program *p, cpu_program *cp, int from, int to) {
    tg_status st = TG_OK;
    if (p->check_each && from == 0)
        for (int i = 0; i < p->g->n && st == TG_OK; i++)
            if (p->g->nodes[i].op == TG_OP_INPUT || p->g->nodes[i].op == TG_OP_PARAM) st = check_node(p, cp, i);
    for (int i = from; i < to && st == TG_OK; i++) {
        double t0 = cp->prof ? tg_now() : 0;
        cp->steps[i].run(&e->ctx, &cp->steps[i]);
        if (cp->prof) cp->prof[i] += tg_now() - t0;
        if (p->check_each) st = check_node(p, cp, cp->steps[i].id);
        if (p->dp && i < cp->cut) p->dp->reached(p->dp, cp->steps[i].id); /* buckets done with start their all-reduce */
    }
    return st;
}

static tg_status cpu_run(tg_engine *e_, tg_program *p) {
    cpu_engine *e = (cpu_engine *)e_;
    cpu_program *cp = p->impl;
    tg_fpmode caller = tg_fpmode_get();
    tg_fpmode_set(tg_fpmode_flush(caller)); /* see cpu.h: subnormals flushed, the caller's mode restored */
    tg_pool_hot(e->pool, true);
    if (p->to_cut) { /* a micro-step: the backward and its own writebacks */
        tg_status st = run_steps(e, p, cp, 0, cp->cut);
        for (int i = 0; st == TG_OK && i < cp->n_copies; i++)
            if (cp->copies[i].pre) memcpy(cp->copies[i].dst, cp->copies[i].src, (size_t)cp->copies[i].bytes);
        tg_pool_hot(e->pool, false);
        tg_fpmode_set(caller);
        return st;
    }
    if (p->dp) p->dp->begin(p->dp, cp->arena);
    tg_status st = run_steps(e, p, cp, 0, cp->cut);
    if (p->dp) st = p->dp->cut(p->dp, st); /* every rank takes part, even one whose step failed */
    if (st == TG_OK) st = run_steps(e, p, cp, cp->cut, cp->split);
    if (st == TG_OK && p->check >= 0) {
        float v = *(const float *)addr(cp, &p->plan, p->check);
        if (v - v != 0) st = tg_program_numeric_fail(p, p->check, v, 0);
    }
    if (st == TG_OK) st = run_steps(e, p, cp, cp->split, cp->n_steps);
    if (cp->prof) cp->prof_runs++;
    for (int i = 0; st == TG_OK && i < cp->n_copies; i++)
        memcpy(cp->copies[i].dst, cp->copies[i].src, (size_t)cp->copies[i].bytes);
    tg_pool_hot(e->pool, false);
    tg_fpmode_set(caller);
    return st;
}

static void cpu_destroy(tg_engine *e_) {
    cpu_engine *e = (cpu_engine *)e_;
    tg_pool_free(e->pool);
    tg_afree(e->ctx.scratch);
    tg_afree(e->params);
    free(e);
}

static const tg_engine_vt cpu_vt = {"cpu", cpu_compile, cpu_release, cpu_write, cpu_read, cpu_run, cpu_destroy,
                                    tg_cpu_fuse};

tg_status tg_cpu_engine_new(int threads, int64_t params_bytes, tg_engine **out) {
    *out = NULL;
    cpu_engine *e = tg_calloc(1, sizeof *e);
    if (!e) return tg_fail(TG_ERR_NOMEM, "cpu: out of memory");
    char why[160];
    if (!tg_cpu_isa_env_ok(why, sizeof why)) {
        free(e);
        return tg_fail(TG_ERR_ARG, "cpu: %s", why);
    }
    if (threads <= 0 && (threads = tg_default_threads()) < 0) {
        const char *env = getenv("TG_THREADS");
        free(e);
        return tg_fail(TG_ERR_ARG, "cpu: TG_THREADS=%.40s is not a whole number from 1 to %d", env ? env : "",
                       TG_CPU_MAX_THREADS);
    }
    /* The pool makes every thread up front: INT_MAX would ask for terabytes of
     * per-thread state, and a count in the tens of thousands would start that
     * many threads before failing. 1024 is the most CPUs sched_getaffinity
     * reports (CPU_SETSIZE). */
    if (threads > TG_CPU_MAX_THREADS) {
        free(e);
        return tg_fail(TG_ERR_ARG, "cpu: %d threads asked for (spec.threads, tg_set_default_threads or TG_THREADS); "
                       "at most %d", threads, TG_CPU_MAX_THREADS);
    }
    e->base.vt = &cpu_vt;
    e->base.refs = 1;
    e->base.align = 64;
    e->base.params_bytes = params_bytes;
    e->pool = tg_pool_new(threads);
    e->params = e->pool ? arena_alloc(e->pool, (size_t)params_bytes) : NULL;
    if (!e->pool || !e->params) {
        cpu_destroy(&e->base);
        return tg_fail(TG_ERR_NOMEM, "cpu: cannot allocate %lld bytes of params", (long long)params_bytes);
    }
    e->ctx.pool = e->pool;
    e->ctx.threads = tg_pool_threads(e->pool);
    *out = &e->base;
    return TG_OK;
}
