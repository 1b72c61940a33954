/* What training and forward sessions share: the lock, the engine and params
 * arena, feeds, params by name, captures and plan queries. The public
 * functions of both types (session.c, infer.c) are thin wrappers naming
 * themselves; the base functions they call take the share's lock. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "io/safetensors.h"
#include "ir/model.h"
#include "util/memory.h"

#include "session.h"

tg_status tg_share_new(tg_share **out) {
    tg_share *sh = tg_calloc(1, sizeof *sh);
    pthread_mutexattr_t a;
    bool ok = sh && pthread_mutexattr_init(&a) == 0;
    if (ok) {
        ok = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE) == 0 && pthread_mutex_init(&sh->mu, &a) == 0;
        pthread_mutexattr_destroy(&a);
    }
    if (!ok) {
        free(sh);
        return tg_fail(TG_ERR_NOMEM, "session: cannot make a lock");
    }
    sh->refs = 1;
    *out = sh;
    return TG_OK;
}

void tg_share_lock(const tg_session_base *b) {
    if (b && b->share) pthread_mutex_lock(&b->share->mu);
}

void tg_share_unlock(const tg_session_base *b) {
    if (b && b->share) pthread_mutex_unlock(&b->share->mu);
}

tg_status tg_share_attach(tg_share *sh, tg_forward *f) {
    if (sh->n_fwd == sh->cap_fwd) {
        int cap = sh->cap_fwd ? 2 * sh->cap_fwd : 4;
        tg_forward **grown = tg_realloc(sh->fwd, sizeof *grown * (size_t)cap);
        if (!grown) return tg_fail(TG_ERR_NOMEM, "tg_forward_attach: out of memory");
        sh->fwd = grown;
        sh->cap_fwd = cap;
    }
    sh->fwd[sh->n_fwd++] = f;
    sh->refs++;
    return TG_OK;
}

void tg_share_detach(tg_share *sh, tg_forward *f) {
    for (int i = 0; i < sh->n_fwd; i++)
        if (sh->fwd[i] == f) {
            sh->fwd[i] = sh->fwd[--sh->n_fwd];
            return;
        }
}

void tg_share_unref(tg_share *sh) {
    if (!sh) return;
    pthread_mutex_lock(&sh->mu);
    bool last = --sh->refs == 0;
    pthread_mutex_unlock(&sh->mu);
    if (!last) return;
    pthread_mutex_destroy(&sh->mu);
    free(sh->fwd);
    free(sh);
}

tg_status tg_inputs_copy(const tg_input_decl *in, int n, tg_input_decl **out, const char *api) {
    tg_input_decl *c = tg_calloc((size_t)n + 1, sizeof *c);
    if (!c) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    for (int i = 0; i < n; i++) {
        c[i] = in[i];
        if (in[i].name && !(c[i].name = tg_strdup(in[i].name))) {
            tg_inputs_free(c, i);
            return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
        }
    }
    *out = c;
    return TG_OK;
}

void tg_inputs_free(tg_input_decl *in, int n) {
    for (int i = 0; in && i < n; i++) free((char *)in[i].name);
    free(in);
}

/* Before any trace: the graph would call these a shape error, at the
 * declaration's index for a call site. */
tg_status tg_inputs_check(const tg_input_decl *in, int n, bool batch_ok, const char *api) {
    for (int i = 0; i < n; i++) {
        const char *name = in[i].name ? in[i].name : "(null)";
        if ((unsigned)in[i].dtype > TG_BOOL)
            return tg_fail(TG_ERR_ARG, "%s: input %d ('%s') has dtype %d (not TG_F32, TG_I32 or TG_BOOL)", api, i, name,
                           (int)in[i].dtype);
        for (int k = 0; !batch_ok && k < in[i].shape.ndim && k < TG_MAX_DIMS; k++)
            if (in[i].shape.d[k] == TG_BATCH)
                return tg_fail(TG_ERR_ARG, "%s: input %d ('%s') uses TG_BATCH, which only forward sessions take (a "
                               "training session's inputs have fixed shapes)", api, i, name);
    }
    return TG_OK;
}

/* A byte count for people: "1.50 GB", "12.3 MB", "640 bytes". */
static const char *human(int64_t n, char *buf, size_t cap) {
    if (n >= 1000000000) snprintf(buf, cap, "%.2f GB", (double)n / 1e9);
    else if (n >= 1000000) snprintf(buf, cap, "%.1f MB", (double)n / 1e6);
    else if (n >= 10000) snprintf(buf, cap, "%.0f kB", (double)n / 1e3);
    else snprintf(buf, cap, "%lld bytes", (long long)n);
    return buf;
}

/* What a plan holds, for the check and its message: the params, the
 * optimizer state, the activations and gradients (the pool liveness
 * shares), and the rest (inputs, constants, other programs). */
enum { PART_PARAMS, PART_STATE, PART_ACTIVATIONS, PART_OTHER, N_PARTS };
static const char *const part_names[N_PARTS] = {"params", "optimizer state", "activations and gradients",
                                                "inputs, constants and other programs"};

static tg_status check_memory(const tg_session_base *b, const int64_t *part, const char *api) {
    if (b->memory_limit == TG_MEMORY_UNCHECKED) return TG_OK;
    tg_memory_cap cap = {b->memory_limit, "spec.memory_limit"};
    if (b->memory_limit == 0) {
        if (!b->host_memory) return TG_OK; /* a device's: each buffer meets the adapter's limits at compile */
        cap = tg_memory_available();
    }
    int64_t total = 0;
    int most = 0;
    for (int k = 0; k < N_PARTS; k++) {
        total = part[k] > INT64_MAX - total ? INT64_MAX : total + part[k];
        if (part[k] > part[most]) most = k;
    }
    if (cap.bytes < 0 || total <= cap.bytes) return TG_OK;
    char t[32], c[32], p[N_PARTS][32];
    for (int k = 0; k < N_PARTS; k++) human(part[k], p[k], sizeof p[k]);
    return tg_fail(TG_ERR_NOMEM, "%s: the session plans %s (%s %s, %s %s, %s %s, %s %s; the largest: %s), more than "
                   "the %s this process can have (%s); nothing was allocated. A smaller model or batch fits; "
                   "spec.memory_limit = TG_MEMORY_UNCHECKED tries anyway", api, human(total, t, sizeof t),
                   part_names[0], p[0], part_names[1], p[1], part_names[2], p[2], part_names[3], p[3], part_names[most],
                   human(cap.bytes, c, sizeof c), cap.what);
}

tg_status tg_session_base_check_plan(const tg_session_base *b, const tg_program *p, int64_t more, const char *api) {
    int64_t part[N_PARTS] = {b->eng ? b->eng->params_bytes : 0, 0, p->plan.arena_bytes[TG_ARENA_SCRATCH], 0};
    for (int i = 0; i < p->plan.n; i++)
        if (p->plan.slot[i].root == i && p->plan.slot[i].kind == TG_BUF_STATE) part[PART_STATE] += p->plan.slot[i].bytes;
    int64_t persist = p->plan.arena_bytes[TG_ARENA_PERSIST];
    part[PART_OTHER] = (persist > part[PART_STATE] ? persist - part[PART_STATE] : 0) + more;
    return check_memory(b, part, api);
}

tg_status tg_session_base_open(tg_session_base *b, tg_model *m, tg_backend be, int threads, int64_t memory_limit,
                               const char *api) {
    int np = tg_model_param_count(m);
    b->model = m;
    b->n_params = np;
    b->memory_limit = memory_limit;
    b->host_memory = be == TG_BACKEND_CPU;
    if (memory_limit < 0 && memory_limit != TG_MEMORY_UNCHECKED)
        return tg_fail(TG_ERR_ARG, "%s: spec.memory_limit is %lld (bytes, 0 for the machine's, or TG_MEMORY_UNCHECKED)",
                       api, (long long)memory_limit);
    if (!(b->param_offset = tg_calloc((size_t)np + 1, sizeof(int64_t))))
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    int64_t params_bytes = tg_plan_param_layout(m, TG_ARENA_ALIGN, b->param_offset);
    /* The params alone first: their arena is allocated, and written, before the rest is planned. */
    tg_status st = check_memory(b, (int64_t[N_PARTS]){params_bytes, 0, 0, 0}, api);
    if (st != TG_OK) return st;
    switch (be) {
    case TG_BACKEND_CPU: return tg_cpu_engine_new(threads, params_bytes, &b->eng);
    case TG_BACKEND_WEBGPU: return tg_wgpu_engine_new(params_bytes, &b->eng);
    }
    return tg_fail(TG_ERR_ARG, "%s: unknown backend %d", api, (int)be);
}

tg_status tg_session_base_init_params(tg_session_base *b, uint64_t seed, const char *api) {
    float *buf = NULL;
    tg_status st = TG_OK;
    for (int p = 0; st == TG_OK && p < tg_model_param_count(b->model); p++) {
        int64_t n = tg_shape_numel(b->model->params[p].shape);
        float *nb = realloc(buf, (size_t)n * sizeof(float));
        if (!nb) {
            st = tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
            break;
        }
        buf = nb;
        tg_model_init_param(b->model, p, seed, buf);
        st = b->eng->vt->write(b->eng, b->prog, TG_ARENA_PARAMS, b->param_offset[p], buf, n * 4);
    }
    free(buf);
    return st;
}

tg_status tg_session_base_usable(const tg_session_base *b, const char *api) {
    if (!b) return tg_fail(TG_ERR_ARG, "%s: session is NULL", api);
    if (b->broken[0]) return tg_fail(TG_ERR_STATE, "%s: %s", api, b->broken);
    /* Every param lookup and arena offset assumes the layout's count. */
    if (b->model && tg_model_param_count(b->model) != b->n_params)
        return tg_fail(TG_ERR_STATE, "%s: the model has %d params, but the session was made for its first %d: declare "
                       "every param before making the session (tg_session_replace_model recompiles for the model as "
                       "it is now)", api, tg_model_param_count(b->model), b->n_params);
    return TG_OK;
}

void tg_session_base_close(tg_session_base *b) {
    if (b->eng && --b->eng->refs == 0) b->eng->vt->destroy(b->eng);
    free(b->param_offset);
    b->eng = NULL;
    b->param_offset = NULL;
}

bool tg_session_check_numerics(bool asked) {
    const char *v = getenv("TG_CHECK_NUMERICS");
    return asked || (v && *v && strcmp(v, "0") != 0);
}

/* The per-step seed random ops read (see TG_RNG_SEED_NAME): a hash of the
 * session seed and the step, so a resumed run draws what it would have.
 * Data-parallel ranks other than 0 hash their rank in too: their shares of
 * the batch get masks and samples of their own, not copies of rank 0's. */
tg_status tg_session_write_rng_seed(tg_session_base *b, tg_program *p, int64_t t) {
    int id = p->g->rng_seed;
    if (id < 0) return TG_OK;
    uint64_t seed = b->seed ^ (0x9e3779b97f4a7c15ull * b->rng_stream);
    uint32_t v[2] = {tg_rng_u32(seed, 0x5eed5eedu, (uint32_t)t), tg_rng_u32(seed, 0x5eed5eeeu, (uint32_t)t)};
    const tg_slot *sl = &p->plan.slot[id];
    return b->eng->vt->write(b->eng, p, sl->arena, sl->offset, v, sizeof v);
}

static tg_program_input *find_input(tg_program *p, const char *name) {
    for (int i = 0; i < p->n_in; i++)
        if (strcmp(p->in[i].name, name) == 0) return &p->in[i];
    return NULL;
}

/* One feed against its input: dtype, then size, then data. */
static tg_status check_feed(const tg_program *p, const tg_program_input *in, const tg_feed *fd, const char *api) {
    const tg_node *nd = &p->g->nodes[in->node];
    char b[96];
    tg_shape_str(nd->shape, b, sizeof b);
    if (fd->dtype != nd->dtype)
        return tg_fail(TG_ERR_ARG, "%s: input '%s' %s is %s, the feed is %s%s", api, fd->name, b,
                       tg_dtype_name(nd->dtype), tg_dtype_name(fd->dtype),
                       nd->dtype == TG_I32 && fd->dtype == TG_F32 ? " (set the feed's .dtype to TG_I32)" : "");
    int64_t want = tg_ir_numel(nd);
    if (fd->count != want)
        return tg_fail(TG_ERR_SIZE, "%s: input '%s' needs %lld elements (%s), got %lld", api, fd->name,
                       (long long)want, b, (long long)fd->count);
    if (want > 0 && !fd->data) return tg_fail(TG_ERR_ARG, "%s: input '%s' has no data", api, fd->name);
    return TG_OK;
}

/* Every input exactly once: each feed marks its table entry with this
 * round's number, so a second mark is a duplicate and an entry left
 * unmarked was not fed. Nothing is written unless every feed passes. */
tg_status tg_session_write_feeds(tg_session_base *b, tg_program *p, const char *api, const tg_feed *feeds, int n) {
    if (n < 0 || (n > 0 && !feeds)) return tg_fail(TG_ERR_ARG, "%s: bad feed list", api);
    uint64_t round = ++p->feed_round;
    for (int f = 0; f < n; f++) {
        if (!feeds[f].name) return tg_fail(TG_ERR_NAME, "%s: feed %d has no name", api, f);
        tg_program_input *in = find_input(p, feeds[f].name);
        if (!in) return tg_fail(TG_ERR_NAME, "%s: unknown input '%s'", api, feeds[f].name);
        if (in->fed == round) return tg_fail(TG_ERR_NAME, "%s: input '%s' fed twice", api, feeds[f].name);
        in->fed = round;
        tg_status st = check_feed(p, in, &feeds[f], api);
        if (st != TG_OK) return st;
    }
    for (int i = 0; n != p->n_in && i < p->n_in; i++)
        if (p->in[i].fed != round) return tg_fail(TG_ERR_NAME, "%s: input '%s' was not fed", api, p->in[i].name);
    for (int f = 0; f < n; f++) {
        const tg_slot *sl = &p->plan.slot[find_input(p, feeds[f].name)->node];
        tg_status st = b->eng->vt->write(b->eng, p, sl->arena, sl->offset, feeds[f].data, feeds[f].count * 4);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

tg_status tg_session_base_param_check(const tg_session_base *b, const char *api, const char *name, const void *data,
                                      int64_t count, tg_param *out) {
    tg_status st = tg_session_base_usable(b, api);
    if (st != TG_OK) return st;
    if (!name) return tg_fail(TG_ERR_ARG, "%s: name is NULL", api);
    tg_param p = tg_model_find(b->model, name);
    if (p < 0) {
        char hint[400];
        tg_model_name_hint(b->model, name, hint, sizeof hint);
        return tg_fail(TG_ERR_NAME, "%s: no param named '%s'%s", api, name, hint);
    }
    int64_t want = tg_shape_numel(b->model->params[p].shape);
    if (count != want) {
        char s[96];
        return tg_fail(TG_ERR_SIZE, "%s: param '%s' has %lld elements (%s), got %lld", api, name, (long long)want,
                       tg_shape_str(b->model->params[p].shape, s, sizeof s), (long long)count);
    }
    if (!data) return tg_fail(TG_ERR_ARG, "%s: data is NULL", api);
    if (b->model->params[p].dtype != TG_F32)
        return tg_fail(TG_ERR_ARG, "%s: param '%s' is %s: move it with a %s feed to upload, with set_tensor or with "
                       "download", api, name, tg_dtype_name(b->model->params[p].dtype),
                       b->model->params[p].dtype == TG_I32 ? "TG_I32" : "typed");
    *out = p;
    return TG_OK;
}

static tg_status param_io(tg_session_base *b, const char *api, const char *name, void *data, int64_t count,
                          bool write) {
    tg_param p;
    tg_status st = tg_session_base_param_check(b, api, name, data, count, &p);
    if (st != TG_OK) return st;
    return write ? b->eng->vt->write(b->eng, b->prog, TG_ARENA_PARAMS, b->param_offset[p], data, count * 4)
                 : b->eng->vt->read(b->eng, b->prog, TG_ARENA_PARAMS, b->param_offset[p], data, count * 4);
}

tg_status tg_session_base_param_io(tg_session_base *b, const char *api, const char *name, void *data, int64_t count,
                                   bool write) {
    tg_share_lock(b);
    tg_status st = param_io(b, api, name, data, count, write);
    tg_share_unlock(b);
    return st;
}

static tg_status upload(tg_session_base *b, const char *api, const tg_feed *params, int n) {
    tg_status st = tg_session_base_usable(b, api);
    if (st != TG_OK) return st;
    if (n < 0 || (n > 0 && !params)) return tg_fail(TG_ERR_ARG, "%s: bad arguments", api);
    int np = tg_model_param_count(b->model);
    /* Check everything first: a failed upload writes nothing. */
    for (int f = 0; f < n; f++) {
        tg_param p = params[f].name ? tg_model_find(b->model, params[f].name) : -1;
        if (p < 0) {
            char hint[400];
            tg_model_name_hint(b->model, params[f].name, hint, sizeof hint);
            return tg_fail(TG_ERR_NAME, "%s: no param named '%s'%s", api, params[f].name ? params[f].name : "(null)",
                           hint);
        }
        for (int e = 0; e < f; e++)
            if (strcmp(params[e].name, params[f].name) == 0)
                return tg_fail(TG_ERR_NAME, "%s: param '%s' given twice", api, params[f].name);
        if (params[f].dtype != b->model->params[p].dtype)
            return tg_fail(TG_ERR_ARG, "%s: param '%s' is %s, the feed is %s", api, params[f].name,
                           tg_dtype_name(b->model->params[p].dtype), tg_dtype_name(params[f].dtype));
        int64_t want = tg_shape_numel(b->model->params[p].shape);
        if (params[f].count != want)
            return tg_fail(TG_ERR_SIZE, "%s: param '%s' has %lld elements, got %lld", api, params[f].name,
                           (long long)want, (long long)params[f].count);
        if (!params[f].data) return tg_fail(TG_ERR_ARG, "%s: param '%s' has no data", api, params[f].name);
    }
    if (n != np) {
        for (int p = 0; p < np; p++) {
            bool given = false;
            for (int f = 0; f < n && !given; f++) given = strcmp(params[f].name, b->model->params[p].name) == 0;
            if (!given) return tg_fail(TG_ERR_NAME, "%s: param '%s' is missing", api, b->model->params[p].name);
        }
    }
    for (int f = 0; f < n && st == TG_OK; f++) {
        tg_param p = tg_model_find(b->model, params[f].name);
        st = b->eng->vt->write(b->eng, b->prog, TG_ARENA_PARAMS, b->param_offset[p], params[f].data,
                               params[f].count * 4);
    }
    return st;
}

tg_status tg_session_base_upload(tg_session_base *b, const char *api, const tg_feed *params, int n) {
    tg_share_lock(b);
    tg_status st = upload(b, api, params, n);
    tg_share_unlock(b);
    return st;
}

/* One tensor against its param: the name, the dtype and the exact shape (a
 * transposed weight has the right count and the wrong shape). */
static tg_status check_tensor(const tg_session_base *b, const char *api, const tg_st_tensor *t, tg_param *out) {
    if (!t || !t->name) return tg_fail(TG_ERR_ARG, "%s: a tensor without a name", api);
    tg_param p = tg_model_find(b->model, t->name);
    if (p < 0) {
        char hint[400];
        tg_model_name_hint(b->model, t->name, hint, sizeof hint);
        return tg_fail(TG_ERR_NAME, "%s: no param named '%s'%s", api, t->name, hint);
    }
    const tg_param_decl *d = &b->model->params[p];
    if (t->dtype != d->dtype)
        return tg_fail(TG_ERR_ARG, "%s: param '%s' is %s, the tensor is %s", api, t->name, tg_dtype_name(d->dtype),
                       tg_dtype_name(t->dtype));
    if (!tg_shape_eq(t->shape, d->shape)) {
        char a[96], c[96];
        bool swapped = t->shape.ndim == 2 && d->shape.ndim == 2 && t->shape.d[0] == d->shape.d[1] &&
                       t->shape.d[1] == d->shape.d[0];
        return tg_fail(TG_ERR_SHAPE, "%s: param '%s' is %s, the tensor is %s%s", api, t->name,
                       tg_shape_str(d->shape, a, sizeof a), tg_shape_str(t->shape, c, sizeof c),
                       swapped ? " (transposed: a Linear W is [in, out], PyTorch's weight [out, in])" : "");
    }
    if (!t->data && tg_shape_numel(d->shape) > 0)
        return tg_fail(TG_ERR_ARG, "%s: tensor '%s' has no data", api, t->name);
    *out = p;
    return TG_OK;
}

static tg_status write_tensor(tg_session_base *b, tg_param p, const tg_st_tensor *t) {
    return b->eng->vt->write(b->eng, b->prog, TG_ARENA_PARAMS, b->param_offset[p], t->data,
                             tg_shape_numel(t->shape) * 4);
}

tg_status tg_session_base_set_tensor(tg_session_base *b, const char *api, const tg_st_tensor *t) {
    tg_share_lock(b);
    tg_param p;
    tg_status st = tg_session_base_usable(b, api);
    if (st == TG_OK) st = check_tensor(b, api, t, &p);
    if (st == TG_OK) st = write_tensor(b, p, t);
    tg_share_unlock(b);
    return st;
}

/* Every param exactly once, each checked before any is written. */
static tg_status upload_tensors(tg_session_base *b, const char *api, const tg_st_tensor *t, int n) {
    tg_status st = tg_session_base_usable(b, api);
    if (st != TG_OK) return st;
    if (n < 0 || (n > 0 && !t)) return tg_fail(TG_ERR_ARG, "%s: bad tensor list", api);
    int np = tg_model_param_count(b->model);
    bool *given = tg_calloc((size_t)np + 1, sizeof *given);
    if (!given) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    for (int i = 0; i < n && st == TG_OK; i++) {
        tg_param p;
        st = check_tensor(b, api, &t[i], &p);
        if (st == TG_OK && given[p]) st = tg_fail(TG_ERR_NAME, "%s: param '%s' given twice", api, t[i].name);
        if (st == TG_OK) given[p] = true;
    }
    for (int p = 0; p < np && st == TG_OK; p++)
        if (!given[p]) st = tg_fail(TG_ERR_NAME, "%s: param '%s' is missing", api, b->model->params[p].name);
    free(given);
    for (int i = 0; i < n && st == TG_OK; i++) st = write_tensor(b, tg_model_find(b->model, t[i].name), &t[i]);
    return st;
}

tg_status tg_session_base_upload_tensors(tg_session_base *b, const char *api, const tg_st_tensor *t, int n) {
    tg_share_lock(b);
    tg_status st = upload_tensors(b, api, t, n);
    tg_share_unlock(b);
    return st;
}

static tg_status download(tg_session_base *b, const char *api, tg_safetensors **out) {
    tg_status st = tg_session_base_usable(b, api);
    if (st != TG_OK) return st;
    int np = tg_model_param_count(b->model);
    tg_st_tensor *t = tg_calloc((size_t)np + 1, sizeof *t);
    if (!t) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    for (int p = 0; p < np; p++)
        t[p] = (tg_st_tensor){b->model->params[p].name, b->model->params[p].dtype, b->model->params[p].shape, NULL};
    tg_safetensors *f = NULL;
    st = tg_st_new(t, np, &f);
    for (int p = 0; p < np && st == TG_OK; p++)
        st = b->eng->vt->read(b->eng, b->prog, TG_ARENA_PARAMS, b->param_offset[p], (void *)f->t[p].data,
                              tg_st_nbytes(t[p].dtype, t[p].shape));
    free(t);
    if (st != TG_OK) {
        tg_safetensors_free(f);
        return st;
    }
    *out = f;
    return TG_OK;
}

tg_status tg_session_base_download(tg_session_base *b, const char *api, tg_safetensors **out) {
    if (!out) return tg_fail(TG_ERR_ARG, "%s: out is NULL", api);
    *out = NULL;
    tg_share_lock(b);
    tg_status st = download(b, api, out);
    tg_share_unlock(b);
    return st;
}

/* The program reads, captures and plans look at; TG_ERR_STATE when there is
 * none (a forward a replace_model left unable to compile). */
static tg_status have_prog(const tg_session_base *b, const char *api) {
    tg_status st = tg_session_base_usable(b, api);
    if (st != TG_OK) return st;
    return b->prog ? TG_OK : tg_fail(TG_ERR_STATE, "%s: the session has no compiled program", api);
}

static int find_capture(const tg_session_base *b, const char *name) {
    const tg_graph *g = b->prog->g;
    for (int c = 0; name && c < g->n_caps; c++)
        if (strcmp(g->caps[c].name, name) == 0) return g->caps[c].id;
    return -1;
}

int tg_session_base_capture_count(const tg_session_base *b) {
    tg_share_lock(b);
    int n = b && b->prog ? b->prog->g->n_caps : 0;
    tg_share_unlock(b);
    return n;
}

const char *tg_session_base_capture_name(const tg_session_base *b, int i) {
    tg_share_lock(b);
    const char *name = b && b->prog && i >= 0 && i < b->prog->g->n_caps ? b->prog->g->caps[i].name : NULL;
    tg_share_unlock(b);
    return name;
}

static tg_status read_capture(tg_session_base *b, const char *api, const char *name, void *dst, int64_t count) {
    if (!dst) return tg_fail(TG_ERR_ARG, "%s: dst is NULL", api);
    tg_status st = have_prog(b, api);
    if (st != TG_OK) return st;
    int id = find_capture(b, name);
    if (id < 0) return tg_fail(TG_ERR_NAME, "%s: no capture named '%s'", api, name ? name : "(null)");
    int64_t want = tg_ir_numel(&b->prog->g->nodes[id]);
    if (count != want)
        return tg_fail(TG_ERR_SIZE, "%s: capture '%s' has %lld elements, got room for %lld", api, name,
                       (long long)want, (long long)count);
    const tg_slot *sl = &b->prog->plan.slot[id];
    return b->eng->vt->read(b->eng, b->prog, sl->arena, sl->offset, dst, count * 4);
}

tg_status tg_session_base_read(tg_session_base *b, const char *api, const char *name, void *dst, int64_t count) {
    tg_share_lock(b);
    tg_status st = read_capture(b, api, name, dst, count);
    tg_share_unlock(b);
    return st;
}

tg_status tg_session_base_capture_info(const tg_session_base *b, const char *api, const char *name, tg_shape *shape,
                                       tg_dtype *dtype) {
    tg_share_lock(b);
    tg_status st = have_prog(b, api);
    int id = st == TG_OK ? find_capture(b, name) : -1;
    if (st == TG_OK && id < 0) st = tg_fail(TG_ERR_NAME, "%s: no capture named '%s'", api, name ? name : "(null)");
    if (st == TG_OK && shape) *shape = b->prog->g->nodes[id].shape;
    if (st == TG_OK && dtype) *dtype = b->prog->g->nodes[id].dtype;
    tg_share_unlock(b);
    return st;
}

static void plan_stats(const tg_program *p, tg_plan_stats *o) {
    memset(o, 0, sizeof *o);
    const tg_plan *pl = &p->plan;
    o->workspace_bytes = p->workspace_bytes;
    o->planned_bytes = pl->arena_bytes[0] + pl->arena_bytes[1] + pl->arena_bytes[2] + o->workspace_bytes;
    o->naive_bytes = pl->naive_bytes;
    for (int i = 0; i < pl->n; i++) {
        const tg_slot *sl = &pl->slot[i];
        if (sl->root != i) continue;
        switch (sl->kind) {
        case TG_BUF_PARAM: o->param_bytes += sl->bytes; break;
        case TG_BUF_GRAD: o->grad_bytes += sl->bytes; break;
        case TG_BUF_STATE: o->state_bytes += sl->bytes; break;
        case TG_BUF_INPUT: o->input_bytes += sl->bytes; break;
        case TG_BUF_SCRATCH: break;
        default: o->other_bytes += sl->bytes; break;
        }
    }
    o->scratch_bytes = pl->arena_bytes[TG_ARENA_SCRATCH];
    o->n_nodes = p->g->n;
    o->n_kernels = pl->n_kernels;
    o->n_dispatches = p->n_dispatches;
    o->n_writebacks = p->n_wb;
    for (int w = 0; w < p->n_wb; w++) o->n_writeback_copies += !pl->wb_free[w];
}

tg_status tg_session_base_plan_stats(const tg_session_base *b, const char *api, tg_plan_stats *o) {
    if (!o) return tg_fail(TG_ERR_ARG, "%s: NULL argument", api);
    tg_share_lock(b);
    tg_status st = have_prog(b, api);
    if (st == TG_OK) plan_stats(b->prog, o);
    tg_share_unlock(b);
    return st;
}

void tg_session_base_print_plan(const tg_session_base *b, void *file) {
    tg_share_lock(b);
    if (b && b->prog) tg_plan_print(b->prog->g, &b->prog->plan, file ? file : stdout);
    tg_share_unlock(b);
}

tg_status tg_session_base_dot(const tg_session_base *b, const char *api, void *file) {
    if (!file) return tg_fail(TG_ERR_ARG, "%s: file is NULL", api);
    tg_share_lock(b);
    tg_status st = have_prog(b, api);
    if (st == TG_OK) {
        const tg_fusion *fu = b->prog->fusion;
        st = tg_ir_graph_dot(b->prog->g, fu ? fu->group : NULL, fu ? fu->n_groups : 0, file);
    }
    tg_share_unlock(b);
    return st;
}
