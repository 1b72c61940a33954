/* Forward sessions: a function of the params with no gradient and no
 * optimizer, compiled once per batch size. The constructor traces and plans
 * the first at once, so errors in the function come back from it; with a
 * TG_BATCH input its kernels (batch 1's) wait for a run of batch 1, since
 * most callers never run it and WebGPU would compile every kernel twice.
 * Params are their own (tg_forward_new) or a training session's
 * (tg_forward_attach); an attached one follows its training session
 * through replace_model (refit below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "ir/model.h"

/* Random ops in a forward draw apart from the training steps'. */
#define TG_FORWARD_SEED_MIX 0x1f2e3d4c5b6a7988ull

static void drop_programs(tg_forward *f) {
    for (int i = 0; i < f->n_progs; i++) {
        if (f->b.eng) f->b.eng->vt->release(f->b.eng, f->progs[i].prog);
        tg_program_free(f->progs[i].prog);
    }
    f->n_progs = 0;
    f->b.prog = NULL;
    f->ran = false;
}

void tg_forward_free(tg_forward *f) {
    if (!f) return;
    tg_share_lock(&f->b);
    if (f->b.share) tg_share_detach(f->b.share, f);
    drop_programs(f);
    tg_session_base_close(&f->b);
    tg_share_unlock(&f->b);
    tg_share_unref(f->b.share);
    free(f->progs);
    tg_inputs_free(f->inputs, f->n_inputs);
    free(f);
}

static bool uses_batch(const tg_forward *f) {
    for (int i = 0; i < f->n_inputs; i++)
        for (int k = 0; k < f->inputs[i].shape.ndim; k++)
            if (f->inputs[i].shape.d[k] == TG_BATCH) return true;
    return false;
}

/* Batch sizes kept compiled: a server fed every size from 1 to 256 would
 * otherwise keep 256 programs and their arenas. */
#define TG_FORWARD_PROGRAMS 8

/* The least recently used program, never the last run's (its outputs and
 * captures stay readable); -1 for none. */
static int evict_candidate(const tg_forward *f) {
    int lru = -1;
    for (int i = 0; i < f->n_progs; i++)
        if (f->progs[i].prog != f->b.prog && (lru < 0 || f->progs[i].used < f->progs[lru].used)) lru = i;
    return lru;
}

/* Drops the least recently used program. */
static void evict_one(tg_forward *f) {
    int lru = evict_candidate(f);
    if (lru < 0) return;
    if (f->b.eng) f->b.eng->vt->release(f->b.eng, f->progs[lru].prog);
    tg_program_free(f->progs[lru].prog);
    f->progs[lru] = f->progs[--f->n_progs];
}

/* The kernels of kept program i, compiled on its first run. */
static tg_status compile_kept(tg_forward *f, int i) {
    if (f->progs[i].compiled) return TG_OK;
    tg_status st = f->b.eng->vt->compile(f->b.eng, f->progs[i].prog);
    if (st == TG_OK) f->progs[i].compiled = true;
    else f->b.eng->vt->release(f->b.eng, f->progs[i].prog); /* as it was: planned, nothing compiled */
    return st;
}

/* The program for `batch`, traced now if it is not among the
 * TG_FORWARD_PROGRAMS most recently used, and its kernels compiled unless
 * `compile` is false. */
static tg_status program_for(tg_forward *f, int64_t batch, bool compile, const char *api, tg_program **out) {
    f->lookups++;
    for (int i = 0; i < f->n_progs; i++)
        if (f->progs[i].batch == batch) {
            tg_status st = compile ? compile_kept(f, i) : TG_OK;
            if (st == TG_OK) f->progs[i].used = f->lookups, *out = f->progs[i].prog;
            return st;
        }
    tg_input_decl *in = tg_calloc((size_t)f->n_inputs + 1, sizeof *in);
    struct tg_batch_prog *grown = tg_realloc(f->progs, sizeof *grown * (size_t)(f->n_progs + 1));
    if (grown) f->progs = grown;
    if (!in || !grown) {
        free(in);
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    }
    for (int i = 0; i < f->n_inputs; i++) {
        in[i] = f->inputs[i];
        for (int k = 0; k < in[i].shape.ndim; k++)
            if (in[i].shape.d[k] == TG_BATCH) in[i].shape.d[k] = batch;
    }
    tg_engine *e = f->b.eng;
    tg_compile_req req = {f->b.model, f->fn, f->user, in, f->n_inputs, NULL, false, TG_ARENA_ALIGN, f->b.param_offset,
                          e->vt->fuse, false, tg_session_check_numerics(f->check_numerics), 1};
    tg_program *p;
    tg_status st = tg_program_build(&req, &p);
    free(in);
    if (st != TG_OK) return st;
    /* The programs kept, but the one this would evict. */
    int64_t kept = 0;
    int lru = f->n_progs >= TG_FORWARD_PROGRAMS ? evict_candidate(f) : -1;
    for (int i = 0; i < f->n_progs; i++)
        for (int a = TG_ARENA_PERSIST; i != lru && a < TG_N_ARENAS; a++) kept += f->progs[i].prog->plan.arena_bytes[a];
    st = tg_session_base_check_plan(&f->b, p, kept, api);
    p->compile_progress = f->b.compile_progress;
    p->compile_progress_user = f->b.compile_progress_user;
    if (st == TG_OK && compile) st = e->vt->compile(e, p);
    if (st != TG_OK) {
        e->vt->release(e, p);
        tg_program_free(p);
        return st;
    }
    if (f->n_progs >= TG_FORWARD_PROGRAMS) evict_one(f);
    f->progs[f->n_progs++] = (struct tg_batch_prog){batch, p, f->lookups, compile};
    *out = p;
    return TG_OK;
}

/* The spec's function and inputs copied, then the first program traced:
 * for batch 1 when an input uses TG_BATCH (b.eng and b.model already set),
 * its kernels compiled only without one. */
static tg_status trace_spec(tg_forward *f, const tg_forward_spec *spec, const char *api) {
    f->fn = spec->fn;
    f->user = spec->user;
    f->check_numerics = spec->check_numerics;
    f->b.compile_progress =
        tg_compile_progress_or_default(spec->compile_progress, spec->compile_progress_user, &f->b.compile_progress_user);
    tg_status st = tg_inputs_copy(spec->inputs, spec->n_inputs, &f->inputs, api);
    if (st != TG_OK) return st;
    f->n_inputs = spec->n_inputs;
    for (int i = 0; i < spec->n_inputs; i++) {
        const tg_input_decl *d = &spec->inputs[i];
        bool bad = !d->name || d->shape.ndim < 0 || d->shape.ndim > TG_MAX_DIMS;
        for (int k = 0; !bad && k < d->shape.ndim; k++) bad = d->shape.d[k] < 0 && d->shape.d[k] != TG_BATCH;
        if (bad)
            return tg_fail(TG_ERR_ARG, "%s: input %d ('%s') has no name or a bad shape", api, i,
                           d->name ? d->name : "(null)");
    }
    if ((st = tg_inputs_check(spec->inputs, spec->n_inputs, true, api)) != TG_OK) return st;
    return program_for(f, uses_batch(f) ? 1 : 0, !uses_batch(f), api, &f->b.prog);
}

void tg_forward_refit(tg_forward *f, const tg_session_base *train) {
    drop_programs(f);
    tg_session_base_close(&f->b); /* the old engine's reference and layout */
    f->b.broken[0] = 0;
    int np = train->n_params;
    f->b.eng = train->eng;
    f->b.eng->refs++;
    f->b.model = train->model;
    f->b.n_params = np;
    tg_status st = TG_OK;
    if (!(f->b.param_offset = tg_calloc((size_t)np + 1, sizeof(int64_t))))
        st = tg_fail(TG_ERR_NOMEM, "out of memory");
    if (st == TG_OK) {
        memcpy(f->b.param_offset, train->param_offset, sizeof(int64_t) * (size_t)np);
        st = program_for(f, uses_batch(f) ? 1 : 0, !uses_batch(f), "tg_session_replace_model", &f->b.prog);
    }
    if (st != TG_OK)
        snprintf(f->b.broken, sizeof f->b.broken, "tg_session_replace_model left this attached forward session "
                 "unable to compile (free it and attach a new one): %s", tg_last_error());
}

static tg_status check_spec(const tg_forward_spec *spec, const char *api) {
    if (!spec || !spec->fn) return tg_fail(TG_ERR_ARG, "%s: spec and spec->fn are required", api);
    if (spec->n_inputs < 0 || (spec->n_inputs > 0 && !spec->inputs))
        return tg_fail(TG_ERR_ARG, "%s: bad input list", api);
    return TG_OK;
}

tg_status tg_forward_new(const tg_forward_spec *spec, tg_forward **out) {
    const char *api = "tg_forward_new";
    if (!out) return tg_fail(TG_ERR_ARG, "%s: out is NULL", api);
    *out = NULL;
    tg_status st = check_spec(spec, api);
    if (st != TG_OK) return st;
    if (!spec->model) return tg_fail(TG_ERR_ARG, "%s: spec->model is required", api);
    if (tg_model_status(spec->model) != TG_OK) return spec->model->err;
    tg_forward *f = tg_calloc(1, sizeof *f);
    if (!f) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    f->b.seed = spec->seed ^ TG_FORWARD_SEED_MIX;
    st = tg_share_new(&f->b.share);
    if (st == TG_OK) st = tg_session_base_open(&f->b, spec->model, spec->backend, spec->threads, spec->memory_limit, api);
    if (st == TG_OK) st = trace_spec(f, spec, api);
    if (st == TG_OK) st = tg_session_base_init_params(&f->b, spec->seed, api);
    if (st != TG_OK) {
        tg_forward_free(f);
        return st;
    }
    *out = f;
    return TG_OK;
}

/* Under the training session's lock: f joins its share first, so a
 * replace_model on another thread either comes before (f traces the new
 * model) or after (f is refit with the others). */
static tg_status attach(tg_session *train, const tg_forward_spec *spec, tg_forward *f, const char *api) {
    if (spec->model && spec->model != train->b.model)
        return tg_fail(TG_ERR_ARG, "%s: spec->model is not the training session's model (leave it NULL)", api);
    tg_status st = tg_session_base_usable(&train->b, api);
    if (st != TG_OK) return st;
    int np = train->b.n_params;
    if (!(f->b.param_offset = tg_calloc((size_t)np + 1, sizeof(int64_t))))
        return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    if ((st = tg_share_attach(train->b.share, f)) != TG_OK) return st;
    f->b.share = train->b.share;
    f->b.model = train->b.model;
    f->b.n_params = np;
    f->b.eng = train->b.eng;
    f->b.eng->refs++;
    memcpy(f->b.param_offset, train->b.param_offset, sizeof(int64_t) * (size_t)np);
    f->b.seed = train->b.seed ^ TG_FORWARD_SEED_MIX;
    f->b.memory_limit = spec->memory_limit;
    f->b.host_memory = train->b.host_memory;
    if (spec->memory_limit < 0 && spec->memory_limit != TG_MEMORY_UNCHECKED)
        return tg_fail(TG_ERR_ARG, "%s: spec.memory_limit is %lld (bytes, 0 for the machine's, or TG_MEMORY_UNCHECKED)",
                       api, (long long)spec->memory_limit);
    return trace_spec(f, spec, api);
}

tg_status tg_forward_attach(tg_session *train, const tg_forward_spec *spec, tg_forward **out) {
    const char *api = "tg_forward_attach";
    if (!out) return tg_fail(TG_ERR_ARG, "%s: out is NULL", api);
    *out = NULL;
    if (!train) return tg_fail(TG_ERR_ARG, "%s: the training session is NULL", api);
    tg_status st = check_spec(spec, api);
    if (st != TG_OK) return st;
    tg_forward *f = tg_calloc(1, sizeof *f);
    if (!f) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    tg_share_lock(&train->b);
    st = attach(train, spec, f, api);
    tg_share_unlock(&train->b);
    if (st != TG_OK) {
        tg_forward_free(f);
        return st;
    }
    *out = f;
    return TG_OK;
}

static tg_status run(tg_forward *f, int64_t batch, const tg_feed *feeds, int n, const char *api) {
    tg_status st = tg_session_base_usable(&f->b, api);
    if (st != TG_OK) return st;
    if (!uses_batch(f)) batch = 0;
    else if (batch <= 0) return tg_fail(TG_ERR_ARG, "%s: batch %lld must be > 0", api, (long long)batch);
    tg_program *p = NULL;
    if ((st = program_for(f, batch, true, api, &p)) != TG_OK) return st;
    if ((st = tg_session_write_feeds(&f->b, p, api, feeds, n)) != TG_OK) return st;
    if ((st = tg_session_write_rng_seed(&f->b, p, ++f->runs)) != TG_OK) return st;
    /* Outputs and captures now come from this program; a run that failed in
     * it has left its captures up to the failing kernel, for debugging. */
    st = f->b.eng->vt->run(f->b.eng, p);
    f->b.prog = p;
    f->ran = true;
    return st;
}

tg_status tg_forward_run(tg_forward *f, int64_t batch, const tg_feed *feeds, int n) {
    if (!f) return tg_fail(TG_ERR_ARG, "tg_forward_run: session is NULL");
    tg_share_lock(&f->b);
    tg_status st = run(f, batch, feeds, n, "tg_forward_run");
    f->failed = st != TG_OK;
    tg_share_unlock(&f->b);
    return st;
}

/* Usable and run since it was made (or refit); under the lock. */
static tg_status ran(const tg_forward *f, const char *api) {
    tg_status st = tg_session_base_usable(TG_SESSION_BASE(f), api);
    if (st != TG_OK) return st;
    return f->ran ? TG_OK : tg_fail(TG_ERR_STATE, "%s: the forward session has not run yet", api);
}

/* An output left by an earlier run must not pass for the failed one's. */
static tg_status has_output(const tg_forward *f, const char *api) {
    tg_status st = ran(f, api);
    if (st == TG_OK && f->failed)
        st = tg_fail(TG_ERR_STATE, "%s: the last run failed: there is no output until a run succeeds", api);
    return st;
}

tg_status tg_forward_output_info(const tg_forward *f, tg_shape *shape, tg_dtype *dtype) {
    tg_share_lock(TG_SESSION_BASE(f));
    tg_status st = has_output(f, "tg_forward_output_info");
    if (st == TG_OK) {
        const tg_node *r = &f->b.prog->g->nodes[f->b.prog->result];
        if (shape) *shape = r->shape;
        if (dtype) *dtype = r->dtype;
    }
    tg_share_unlock(TG_SESSION_BASE(f));
    return st;
}

static tg_status output(tg_forward *f, void *dst, int64_t count, const char *api) {
    if (!dst) return tg_fail(TG_ERR_ARG, "%s: dst is NULL", api);
    tg_status st = has_output(f, api);
    if (st != TG_OK) return st;
    const tg_program *p = f->b.prog;
    const tg_node *r = &p->g->nodes[p->result];
    if (count != tg_ir_numel(r)) {
        char b[96];
        return tg_fail(TG_ERR_SIZE, "%s: the output has %lld elements (%s), got room for %lld", api,
                       (long long)tg_ir_numel(r), tg_shape_str(r->shape, b, sizeof b), (long long)count);
    }
    const tg_slot *sl = &p->plan.slot[p->result];
    return f->b.eng->vt->read(f->b.eng, f->b.prog, sl->arena, sl->offset, dst, count * 4);
}

tg_status tg_forward_output(tg_forward *f, void *dst, int64_t count) {
    tg_share_lock(TG_SESSION_BASE(f));
    tg_status st = output(f, dst, count, "tg_forward_output");
    tg_share_unlock(TG_SESSION_BASE(f));
    return st;
}

tg_status tg_forward_read(tg_forward *f, const char *name, void *dst, int64_t count) {
    tg_share_lock(TG_SESSION_BASE(f));
    tg_status st = ran(f, "tg_forward_read");
    if (st == TG_OK) st = tg_session_base_read(&f->b, "tg_forward_read", name, dst, count);
    tg_share_unlock(TG_SESSION_BASE(f));
    return st;
}

tg_status tg_forward_capture_info(const tg_forward *f, const char *name, tg_shape *shape, tg_dtype *dtype) {
    tg_share_lock(TG_SESSION_BASE(f));
    tg_status st = ran(f, "tg_forward_capture_info");
    if (st == TG_OK) st = tg_session_base_capture_info(&f->b, "tg_forward_capture_info", name, shape, dtype);
    tg_share_unlock(TG_SESSION_BASE(f));
    return st;
}

/* The rest is the base's, under this type's names. */

tg_status tg_forward_set_param(tg_forward *f, const char *name, const float *data, int64_t count) {
    return tg_session_base_param_io(TG_SESSION_BASE(f), "tg_forward_set_param", name, (void *)data, count, true);
}

tg_status tg_forward_get_param(tg_forward *f, const char *name, float *data, int64_t count) {
    return tg_session_base_param_io(TG_SESSION_BASE(f), "tg_forward_get_param", name, data, count, false);
}

tg_status tg_forward_upload(tg_forward *f, const tg_feed *params, int n) {
    return tg_session_base_upload(TG_SESSION_BASE(f), "tg_forward_upload", params, n);
}

tg_status tg_forward_set_tensor(tg_forward *f, const tg_st_tensor *t) {
    return tg_session_base_set_tensor(TG_SESSION_BASE(f), "tg_forward_set_tensor", t);
}

tg_status tg_forward_upload_tensors(tg_forward *f, const tg_st_tensor *t, int n) {
    return tg_session_base_upload_tensors(TG_SESSION_BASE(f), "tg_forward_upload_tensors", t, n);
}

tg_status tg_forward_download(tg_forward *f, tg_safetensors **out) {
    return tg_session_base_download(TG_SESSION_BASE(f), "tg_forward_download", out);
}

int tg_forward_capture_count(const tg_forward *f) { return tg_session_base_capture_count(TG_SESSION_BASE(f)); }

const char *tg_forward_capture_name(const tg_forward *f, int i) {
    return tg_session_base_capture_name(TG_SESSION_BASE(f), i);
}

tg_status tg_forward_plan_stats(const tg_forward *f, tg_plan_stats *o) {
    return tg_session_base_plan_stats(TG_SESSION_BASE(f), "tg_forward_plan_stats", o);
}

void tg_forward_print_plan(const tg_forward *f, void *file) { tg_session_base_print_plan(TG_SESSION_BASE(f), file); }

const tg_graph *tg_forward_graph(const tg_forward *f) {
    /* Under the lock, as every call: a run or a replace_model on another thread swaps the program. */
    tg_share_lock(TG_SESSION_BASE(f));
    const tg_graph *g = f && f->b.prog ? f->b.prog->g : NULL;
    tg_share_unlock(TG_SESSION_BASE(f));
    return g;
}

tg_status tg_forward_dot(const tg_forward *f, void *file) {
    return tg_session_base_dot(TG_SESSION_BASE(f), "tg_forward_dot", file);
}

tg_status tg_forward_set_seed(tg_forward *f, uint64_t seed) {
    if (!f) return tg_fail(TG_ERR_ARG, "tg_forward_set_seed: session is NULL");
    tg_share_lock(&f->b);
    f->b.seed = seed;
    tg_share_unlock(&f->b);
    return TG_OK;
}
