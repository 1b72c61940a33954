/* The gradient exchange of a data-parallel step (dp.h): which memory is
 * averaged, in which buckets, and the step's protocol around the cut. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp.h"
#include "../ir/model.h"

/* Buckets of about this many bytes (unless comm->bucket_bytes): large
 * enough that an all-reduce costs its bandwidth more than its latency, small
 * enough that the first ones start while much of the backward is left. */
#define BUCKET_BYTES (1 << 21)

/* ---- the layout ---- */

typedef struct {
    int root;
    int arena;
    int64_t offset, bytes;
    int ready;
} dp_class;

static int by_ready(const void *a, const void *b) {
    const dp_class *x = a, *y = b;
    if (x->ready != y->ready) return x->ready < y->ready ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Memory the exchange may average in place: a gradient's own, or an input's
 * (the rank's data, rewritten every step). Params, optimizer state and
 * constants are the same on every rank already and are never written. */
static bool writable(tg_buf_kind k) { return k == TG_BUF_GRAD || k == TG_BUF_INPUT || k == TG_BUF_OUTPUT; }

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* A fused group on both sides of the cut would compute a gradient after
 * the exchange, or read one before it. */
static tg_status check_groups(const tg_program *p) {
    const tg_fusion *fu = p->fusion;
    for (int i = 0; fu && i < p->g->n; i++) {
        int q = fu->group[i];
        if (q >= 0 && (i < p->cut) != (fu->turn[q] < p->cut))
            return tg_fail(TG_ERR_STATE, "data-parallel: the backend fused node %d (%s) into a kernel on the other "
                           "side of the end of the backward (node %d)", i, tg_ops[p->g->nodes[i].op].name, p->cut);
    }
    return TG_OK;
}

/* The classes to average: every param gradient's (once each), and the
 * loss's unless it is one of them (then `loss` stays false). Each ready at
 * the last turn before the cut that writes or reads its memory. */
static tg_status classes(const tg_program *p, dp_class **out, int *n_out, bool *loss) {
    const tg_graph *g = p->g;
    const tg_plan *pl = &p->plan;
    int *idx = tg_calloc((size_t)g->n + 1, sizeof(int)); /* class root -> index + 1 */
    dp_class *c = tg_calloc((size_t)p->n_params + 2, sizeof *c);
    if (!idx || !c) {
        free(idx), free(c);
        return tg_fail(TG_ERR_NOMEM, "data-parallel: out of memory");
    }
    int n = 0;
    *loss = false;
    for (int k = 0; k <= p->n_params; k++) {
        int id = k < p->n_params ? p->param_grad[k] : p->result;
        if (id < 0) continue;
        int r = pl->slot[id].root;
        if (!writable(pl->slot[r].kind) || idx[r]) continue;
        c[n] = (dp_class){r, pl->slot[r].arena, pl->slot[r].offset, 0, -1};
        idx[r] = ++n;
        if (k == p->n_params) *loss = true;
    }
    for (int i = 0; i < g->n; i++) { /* sizes: the largest member; turns: every touch before the cut */
        int r = pl->slot[i].root, at = tg_fusion_at(p->fusion, i);
        if (r >= 0 && idx[r]) {
            dp_class *x = &c[idx[r] - 1];
            if (pl->slot[i].bytes > x->bytes) x->bytes = pl->slot[i].bytes;
            if (i < p->cut && tg_plan_runs(g, i) && at > x->ready) x->ready = at;
        }
        for (int k = 0; i < p->cut && k < g->nodes[i].nin; k++) {
            int rr = pl->slot[g->nodes[i].in[k]].root;
            if (rr >= 0 && idx[rr] && at > c[idx[rr] - 1].ready) c[idx[rr] - 1].ready = at;
        }
    }
    for (int q = 0; p->fusion && q < p->fusion->n_groups; q++) {
        int a = p->fusion->also_reads[q], t = p->fusion->turn[q];
        if (a >= 0 && t < p->cut && idx[pl->slot[a].root] && t > c[idx[pl->slot[a].root] - 1].ready)
            c[idx[pl->slot[a].root] - 1].ready = t;
    }
    free(idx);
    *out = c;
    *n_out = n;
    return TG_OK;
}

static uint64_t signature(const tg_dp *dp, const tg_program *p, const tg_optim *o) {
    const tg_model *m = p->g->model;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < tg_model_param_count(m); k++) {
        h = fnv(h, m->params[k].name, strlen(m->params[k].name) + 1);
        const tg_shape *sh = &m->params[k].shape; /* its dims alone: the struct has padding and unused dims */
        h = fnv(h, &sh->ndim, sizeof sh->ndim);
        h = fnv(h, sh->d, sizeof(int64_t) * (size_t)(sh->ndim > 0 ? sh->ndim : 0));
    }
    tg_optim oc = *o; /* the fields that decide the update (the schedule's `then` and milestones are pointers) */
    h = fnv(h, &oc.kind, sizeof oc.kind);
    float f[] = {oc.beta1, oc.beta2, oc.eps, oc.weight_decay, oc.momentum, oc.clip_grad_norm};
    h = fnv(h, f, sizeof f);
    h = fnv(h, &oc.nesterov, 1), h = fnv(h, &oc.normalize_grads, 1);
    int k = 0; /* the schedule's chain (tg_optim_check refused loops; 64 links bound it anyway) */
    for (const tg_lr *l = &oc.lr; l && k < 64; l = l->kind == TG_LR_WARMUP ? l->then : NULL, k++) {
        float lf[] = {l->peak, l->final_lr, l->gamma};
        int64_t li[] = {l->kind, l->steps, l->every, l->n_milestones, l->start_step};
        h = fnv(h, lf, sizeof lf), h = fnv(h, li, sizeof li);
        if (l->milestones && l->n_milestones > 0) h = fnv(h, l->milestones, sizeof(int64_t) * (size_t)l->n_milestones);
    }
    for (int i = 0; i < p->g->n; i++) /* the optimizer state, in graph order */
        if (p->g->nodes[i].op == TG_OP_STATE) h = fnv(h, &p->plan.slot[i].bytes, sizeof(int64_t));
    for (int b = 0; b < dp->n_bk; b++) h = fnv(h, &dp->bk[b].n, sizeof dp->bk[b].n);
    return h;
}

static void *worker(void *arg);
static void hook_begin(tg_exchange *x, char *const *arena);
static void hook_reached(tg_exchange *x, int turn);
static tg_status hook_cut(tg_exchange *x, tg_status local);
static void hook_free(tg_exchange *x);
static void dp_free(tg_dp *dp);

tg_status tg_dp_new(tg_comm *comm, const tg_program *p, const tg_optim *o, bool overlap, void (*thread_setup)(void),
                    tg_dp **out) {
    *out = NULL;
    tg_status st = check_groups(p);
    dp_class *c = NULL;
    int n = 0;
    bool loss = false;
    if (st == TG_OK) st = classes(p, &c, &n, &loss);
    if (st != TG_OK) return st;
    qsort(c, (size_t)(loss ? n - 1 : n), sizeof *c, by_ready); /* the loss's class stays last, in the tail */
    int64_t cap = comm->bucket_bytes > 0 ? comm->bucket_bytes : BUCKET_BYTES;
    tg_dp *dp = tg_calloc(1, sizeof *dp);
    if (dp) dp->seg = tg_calloc((size_t)n + 1, sizeof *dp->seg), dp->bk = tg_calloc((size_t)n + 2, sizeof *dp->bk);
    if (!dp || !dp->seg || !dp->bk) {
        free(c);
        dp_free(dp);
        return tg_fail(TG_ERR_NOMEM, "data-parallel: out of memory");
    }
    dp->ex = (tg_exchange){.seg = dp->seg, .begin = hook_begin, .reached = hook_reached, .cut = hook_cut,
                           .free = hook_free};
    dp->comm = comm;
    dp->cut = p->cut;
    dp->thread_setup = thread_setup;
    int64_t at = 0;
    int n_grad = loss ? n - 1 : n;
    for (int i = 0; i < n; i++) { /* grad buckets up to cap bytes each (one class may exceed it), then the tail */
        tg_dp_bucket *b = &dp->bk[dp->n_bk ? dp->n_bk - 1 : 0];
        bool tail = i == n_grad;
        if (dp->n_bk == 0 || tail || (b->n > 0 && (b->n + c[i].bytes / 4) * 4 > cap)) {
            b = &dp->bk[dp->n_bk++];
            *b = (tg_dp_bucket){i, 0, at, 0, -1};
        }
        dp->seg[dp->ex.n_seg++] = (tg_exchange_seg){c[i].arena, c[i].offset, c[i].bytes, at};
        b->n_seg++;
        b->n += c[i].bytes / 4;
        at += c[i].bytes / 4;
        if (c[i].ready > b->ready) b->ready = c[i].ready;
    }
    if (!loss) dp->bk[dp->n_bk++] = (tg_dp_bucket){dp->ex.n_seg, 0, at, 0, p->cut};
    tg_dp_bucket *tail = &dp->bk[dp->n_bk - 1];
    tail->ready = p->cut; /* it carries the step's status: only at the cut */
    dp->ex.status_at = tail->at + tail->n;
    tail->n += comm->size;
    dp->n_pack = dp->ex.status_at + comm->size;
    free(c);
    dp->ex.pack = tg_aalloc((size_t)dp->n_pack * sizeof(float));
    if (!dp->ex.pack) {
        dp_free(dp);
        return tg_fail(TG_ERR_NOMEM, "data-parallel: cannot allocate %lld bytes for the gradient buckets",
                       (long long)(4 * dp->n_pack));
    }
    dp->signature = signature(dp, p, o);
    dp->stats = (tg_comm_stats){comm->size, dp->n_bk, 4 * dp->n_pack, 0, 0, 0, 0};
    if (overlap && comm->concurrent && comm->size > 1 && dp->n_bk > 1) {
        if (pthread_mutex_init(&dp->mu, NULL) == 0) {
            if (pthread_cond_init(&dp->cv, NULL) == 0) {
                dp->threaded = pthread_create(&dp->th, NULL, worker, dp) == 0;
                if (!dp->threaded) pthread_cond_destroy(&dp->cv);
            }
            if (!dp->threaded) pthread_mutex_destroy(&dp->mu);
        }
        if (!dp->threaded) {
            dp_free(dp);
            return tg_fail(TG_ERR_NOMEM, "data-parallel: cannot start the all-reduce thread");
        }
    }
    *out = dp;
    return TG_OK;
}

static void dp_free(tg_dp *dp) {
    if (!dp) return;
    if (dp->threaded) {
        pthread_mutex_lock(&dp->mu);
        dp->quit = true;
        pthread_cond_broadcast(&dp->cv);
        pthread_mutex_unlock(&dp->mu);
        pthread_join(dp->th, NULL);
        pthread_cond_destroy(&dp->cv);
        pthread_mutex_destroy(&dp->mu);
    }
    tg_afree(dp->ex.pack);
    free(dp->seg);
    free(dp->bk);
    free(dp);
}

/* ---- a step ---- */

/* Packs bucket b, sums it over the ranks and unpacks the average. On the
 * thread or the caller's; writes nothing shared but the bucket's memory and
 * the timing, and fails with the message in msg (no tg_fail: the thread's
 * last error is not the caller's). */
static tg_status exchange(tg_dp *dp, int b, char *msg, size_t cap) {
    const tg_dp_bucket *k = &dp->bk[b];
    tg_comm *c = dp->comm;
    float *pack = dp->ex.pack;
    for (int s = k->seg0; dp->arena && s < k->seg0 + k->n_seg; s++)
        memcpy(pack + dp->seg[s].at, dp->arena[dp->seg[s].arena] + dp->seg[s].offset, (size_t)dp->seg[s].bytes);
    c->error[0] = 0;
    double t0 = tg_now();
    tg_status st = c->allreduce_sum_f32(c, pack + k->at, k->n);
    dp->stats.allreduce_s += tg_now() - t0;
    if (st != TG_OK) {
        /* The comm is the user's: its message may fill the array with no NUL. */
        char which[48];
        if (b == dp->n_bk - 1)
            snprintf(which, sizeof which, "the loss and every rank's status");
        else
            snprintf(which, sizeof which, "gradient bucket %d of %d", b + 1, dp->n_bk - 1);
        snprintf(msg, cap, "step %lld: data-parallel: the all-reduce of %s (%lld floats) %s%.*s", (long long)dp->step,
                 which, (long long)k->n, st == TG_ERR_TIMEOUT ? "" : "failed: ", (int)sizeof c->error,
                 c->error[0] ? c->error : tg_status_name(st));
        return st;
    }
    /* The average: the sum divided by the ranks (not times 1/R: exact when
     * every rank holds the same value). The statuses stay sums. */
    float R = (float)c->size, *x = pack + k->at;
    int64_t n = b == dp->n_bk - 1 ? dp->ex.status_at - k->at : k->n;
    for (int64_t i = 0; i < n; i++) x[i] /= R;
    for (int s = k->seg0; dp->arena && s < k->seg0 + k->n_seg; s++)
        memcpy(dp->arena[dp->seg[s].arena] + dp->seg[s].offset, pack + dp->seg[s].at, (size_t)dp->seg[s].bytes);
    return TG_OK;
}

/* The thread: buckets in order as they are posted; after a failure the
 * rest are only counted (the comm is broken). Runs in the mode the
 * session's setup gives it (the CPU's: subnormals flushed, as the step's
 * kernels run), so the sums and the division round alike whether they run
 * here or at the cut. */
static void *worker(void *arg) {
    tg_dp *dp = arg;
    if (dp->thread_setup) dp->thread_setup();
    pthread_mutex_lock(&dp->mu);
    for (;;) {
        while (!dp->quit && dp->done >= dp->posted) pthread_cond_wait(&dp->cv, &dp->mu);
        if (dp->quit) break;
        int b = dp->done;
        tg_status err = dp->err;
        pthread_mutex_unlock(&dp->mu);
        char msg[sizeof dp->msg];
        tg_status st = err == TG_OK ? exchange(dp, b, msg, sizeof msg) : TG_OK;
        pthread_mutex_lock(&dp->mu);
        if (st != TG_OK) dp->err = st, memcpy(dp->msg, msg, sizeof msg);
        dp->done++;
        pthread_cond_broadcast(&dp->cv);
    }
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

tg_dp *tg_dp_of(tg_exchange *x) { return (tg_dp *)x; }

tg_comm_stats tg_dp_stats(const tg_dp *dp) {
    tg_comm_stats s = dp->stats;
    s.exposed_s = dp->ex.exposed_s;
    return s;
}

static void hook_free(tg_exchange *x) { dp_free(tg_dp_of(x)); }

static void hook_begin(tg_exchange *x, char *const *arena) {
    tg_dp *dp = tg_dp_of(x);
    dp->arena = arena;
    dp->posted = 0;
    if (!dp->threaded) return;
    pthread_mutex_lock(&dp->mu);
    dp->done = 0;
    dp->err = TG_OK;
    pthread_mutex_unlock(&dp->mu);
}

static void post(tg_dp *dp, int upto) {
    if (upto <= dp->posted) return;
    pthread_mutex_lock(&dp->mu);
    dp->posted = upto;
    pthread_cond_broadcast(&dp->cv);
    pthread_mutex_unlock(&dp->mu);
}

static void hook_reached(tg_exchange *x, int turn) {
    tg_dp *dp = tg_dp_of(x);
    if (!dp->threaded) return;
    int upto = dp->posted;
    while (upto < dp->n_bk - 1 && dp->bk[upto].ready <= turn) upto++;
    post(dp, upto);
}

static tg_status hook_cut(tg_exchange *x, tg_status local) {
    tg_dp *dp = tg_dp_of(x);
    double t0 = tg_now();
    char mine[600] = "", msg[sizeof dp->msg] = "";
    if (local != TG_OK) snprintf(mine, sizeof mine, "%s", tg_last_error());
    tg_status st = TG_OK;
    int n_grad = dp->n_bk - 1;
    if (dp->threaded) {
        post(dp, n_grad);
        pthread_mutex_lock(&dp->mu);
        while (dp->done < n_grad) pthread_cond_wait(&dp->cv, &dp->mu);
        st = dp->err;
        memcpy(msg, dp->msg, sizeof msg);
        pthread_mutex_unlock(&dp->mu);
    } else {
        for (int b = 0; b < n_grad && st == TG_OK; b++) st = exchange(dp, b, msg, sizeof msg);
    }
    if (st != TG_OK) {
        dp->ex.exposed_s += tg_now() - t0;
        return tg_fail(st, "tg_session_step: %s", msg);
    }
    float *status = dp->ex.pack + dp->ex.status_at;
    memset(status, 0, sizeof(float) * (size_t)dp->comm->size);
    status[dp->comm->rank] = (float)local;
    st = exchange(dp, n_grad, msg, sizeof msg);
    if (st == TG_OK) st = tg_dp_verdict(dp->comm, status, local, mine, "tg_session_step");
    else st = tg_fail(st, "tg_session_step: %s", msg);
    dp->ex.exposed_s += tg_now() - t0;
    return st;
}
