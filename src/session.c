/* Training sessions: a program with gradients and an optimizer on an
 * engine, an optimizer schedule and a step counter; params live in the
 * engine's params arena, addressed by the model's layout. reset and
 * replace_model start training over without a new session: reset rewrites
 * params and optimizer state in place, replace_model compiles the new model
 * on a new engine and moves the attached forward sessions onto it. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "dist/dp.h"
#include "engine.h"
#include "io/safetensors.h"
#include "ir/model.h"

#include "session.h"

tg_status tg_session_take_lr(tg_session *s, const tg_lr *src, const char *api) {
    tg_lr *c;
    tg_status st = tg_lr_copy(src, &c, api);
    if (st != TG_OK) return st;
    free(s->lr);
    s->lr = c;
    s->optim.lr = *c;
    return TG_OK;
}

/* Releases b's program and engine reference (b's share is the owner's). */
static void drop_program(tg_session_base *b) {
    if (b->prog) {
        if (b->eng) b->eng->vt->release(b->eng, b->prog);
        tg_program_free(b->prog);
        b->prog = NULL;
    }
    tg_session_base_close(b);
}

void tg_session_free(tg_session *s) {
    if (!s) return;
    tg_share_lock(&s->b);
    drop_program(&s->b);
    tg_share_unlock(&s->b);
    tg_share_unref(s->b.share);
    tg_inputs_free(s->inputs, s->n_inputs);
    free(s->lr);
    free(s);
}

/* The data-parallel exchange's own thread runs in the mode the CPU's
 * kernels run in (subnormals flushed), so its sums round as the cut's. */
static void cpu_thread_setup(void) { tg_fpmode_set(tg_fpmode_flush(tg_fpmode_get())); }

/* The training program for model m (with the loss's user pointer and
 * optimizer o) on a new engine, params drawn from seed, into b's model,
 * eng, param_offset and prog. On failure b holds nothing. */
static tg_status build(const tg_session *s, tg_session_base *b, tg_model *m, void *user, const tg_optim *o,
                       uint64_t seed, const char *api) {
    if (s->comm && s->backend == TG_BACKEND_WEBGPU) tg_wgpu_prefer_adapter(s->comm->rank);
    tg_status st = tg_session_base_open(b, m, s->backend, s->threads, s->memory_limit, api);
    tg_compile_req req = {m, s->loss, user, s->inputs, s->n_inputs, o, o->kind == TG_OPT_NONE, TG_ARENA_ALIGN,
                          b->param_offset, b->eng ? b->eng->vt->fuse : NULL, s->discard_grads,
                          tg_session_check_numerics(s->check_numerics), s->accumulate};
    if (st == TG_OK) st = tg_program_build(&req, &b->prog);
    if (st == TG_OK) {
        const tg_node *r = &b->prog->g->nodes[b->prog->result];
        if (r->dtype != TG_F32 || tg_ir_numel(r) != 1) {
            char buf[96];
            st = tg_fail(TG_ERR_SHAPE, "%s: the loss must be a single f32 value, got %s %s", api,
                         tg_dtype_name(r->dtype), tg_shape_str(r->shape, buf, sizeof buf));
        }
    }
    if (st == TG_OK) st = tg_session_base_check_plan(b, b->prog, 0, api);
    if (st == TG_OK && s->comm) {
        bool cpu = s->backend == TG_BACKEND_CPU;
        tg_dp *dp = NULL;
        st = tg_dp_new(s->comm, b->prog, o, cpu, cpu ? cpu_thread_setup : NULL, &dp);
        if (dp) b->prog->dp = &dp->ex;
    }
    if (st == TG_OK) {
        b->prog->compile_progress = b->compile_progress;
        b->prog->compile_progress_user = b->compile_progress_user;
        st = b->eng->vt->compile(b->eng, b->prog);
    }
    /* Initial values: params from the seed, optimizer state zero (the arenas start zeroed). */
    if (st == TG_OK) st = tg_session_base_init_params(b, seed, api);
    if (st != TG_OK) drop_program(b);
    return st;
}

/* A seed nobody chose: from the system's random source, else the clock and
 * an address (enough to tell runs apart; it is readable afterwards). */
static uint64_t fresh_seed(const void *salt) {
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof v, 1, f) != 1) v = 0;
        fclose(f);
    }
    if (!v) {
        struct timespec ts = {0};
        timespec_get(&ts, TIME_UTC);
        v = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)(uintptr_t)salt << 17);
    }
    return v ? v : 1;
}

static tg_status session_new(const tg_train_spec *spec, tg_session **out) {
    const char *api = "tg_session_new";
    if (!spec->model || !spec->loss)
        return tg_fail(TG_ERR_ARG, "%s: spec, spec->model and spec->loss are required", api);
    if (spec->n_inputs < 0 || (spec->n_inputs > 0 && !spec->inputs))
        return tg_fail(TG_ERR_ARG, "%s: bad input list", api);
    tg_status st = tg_inputs_check(spec->inputs, spec->n_inputs, false, api);
    if (st != TG_OK) return st;
    if (spec->random_seed && spec->seed)
        return tg_fail(TG_ERR_ARG, "%s: spec->random_seed asks for a fresh seed, but spec->seed is %llu (set one or "
                       "the other)", api, (unsigned long long)spec->seed);
    if (tg_model_status(spec->model) != TG_OK) return spec->model->err;
    st = tg_optim_check(&spec->optim, api);
    if (st != TG_OK) return st;
    if (spec->discard_grads && spec->optim.kind == TG_OPT_NONE)
        return tg_fail(TG_ERR_ARG, "%s: spec->discard_grads without an optimizer leaves nothing to compute (the "
                       "gradients are what a session without one is for)", api);
    if (spec->discard_grads && spec->comm)
        return tg_fail(TG_ERR_ARG, "%s: spec->discard_grads is not supported with spec->comm (the ranks exchange the "
                       "gradients where they are kept)", api);
    if (spec->accumulate < 0 || (spec->accumulate > 1 && spec->optim.kind == TG_OPT_NONE))
        return tg_fail(TG_ERR_ARG, "%s: spec->accumulate is %d: want 0 or 1 (no accumulation), or more micro-steps per "
                       "update with an optimizer", api, spec->accumulate);
    if (spec->accumulate > 1 && spec->comm)
        return tg_fail(TG_ERR_ARG, "%s: spec->accumulate is not supported with spec->comm", api);
    tg_session *s = tg_calloc(1, sizeof *s);
    if (!s) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    s->accumulate = spec->accumulate > 1 ? spec->accumulate : 1;
    s->b.seed = spec->random_seed ? fresh_seed(s) : spec->seed;
    s->optim = spec->optim;
    s->loss = spec->loss;
    s->user = spec->user;
    s->backend = spec->backend;
    s->threads = spec->threads;
    s->check_numerics = spec->check_numerics;
    s->discard_grads = spec->discard_grads;
    s->comm = spec->comm;
    s->memory_limit = spec->memory_limit;
    s->b.compile_progress =
        tg_compile_progress_or_default(spec->compile_progress, spec->compile_progress_user, &s->b.compile_progress_user);
    st = tg_session_take_lr(s, &spec->optim.lr, api);
    if (st == TG_OK) st = tg_share_new(&s->b.share);
    if (st == TG_OK) st = tg_inputs_copy(spec->inputs, spec->n_inputs, &s->inputs, api);
    if (st == TG_OK) s->n_inputs = spec->n_inputs;
    if (st == TG_OK) st = build(s, &s->b, spec->model, s->user, &s->optim, s->b.seed, api);
    if (st != TG_OK) {
        tg_session_free(s);
        return st;
    }
    *out = s;
    return TG_OK;
}

/* The position a data-parallel rank takes from rank 0, in and out of s. */
static tg_status dp_sync(tg_session *s, const char *api) {
    tg_dp_position pos = {s->b.seed, s->step, s->lr_start};
    tg_status st = tg_dp_sync(s->comm, s->b.eng, s->b.prog, &pos, api);
    if (st == TG_OK) s->b.seed = pos.seed, s->step = pos.step, s->lr_start = pos.lr_start;
    return st;
}

/* After a compile that gave this rank st (s NULL when it failed): every
 * rank checks its program against rank 0's and they agree; then rank 0's
 * seed, params and optimizer state go to every rank. */
static tg_status dp_start(tg_comm *c, tg_session *s, tg_status st) {
    st = tg_dp_agree_program(c, s ? s->b.prog : NULL, st, "tg_session_new");
    if (st == TG_OK) st = dp_sync(s, "tg_session_new");
    if (st == TG_OK) s->b.rng_stream = (uint32_t)c->rank;
    return st;
}

tg_status tg_session_new(const tg_train_spec *spec, tg_session **out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_session_new: out is NULL");
    *out = NULL;
    if (!spec) return tg_fail(TG_ERR_ARG, "tg_session_new: spec, spec->model and spec->loss are required");
    tg_status st = spec->comm ? tg_dp_check_comm(spec->comm, "tg_session_new") : TG_OK;
    if (st != TG_OK) return st;
    st = session_new(spec, out);
    if (!spec->comm) return st;
    /* Every rank, failed or not, takes part: none is left waiting. */
    st = dp_start(spec->comm, *out, st);
    if (st != TG_OK) {
        tg_session_free(*out);
        *out = NULL;
    }
    return st;
}

/* check_each: the params and the persist arena (optimizer state) as they
 * were before the step, so one that fails inside the updates can be undone. */
static tg_status snapshot(tg_session *s, char **buf, bool restore) {
    tg_engine *e = s->b.eng;
    tg_program *p = s->b.prog;
    int64_t pb = e->params_bytes, sb = p->plan.arena_bytes[TG_ARENA_PERSIST];
    if (!restore && !(*buf = malloc((size_t)(pb + sb) + 1)))
        return tg_fail(TG_ERR_NOMEM, "tg_session_step: out of memory for the numerics snapshot");
    int arena[2] = {TG_ARENA_PARAMS, TG_ARENA_PERSIST};
    int64_t off[2] = {0, pb}, bytes[2] = {pb, sb};
    tg_status st = TG_OK;
    for (int k = 0; k < 2 && st == TG_OK; k++)
        st = restore ? e->vt->write(e, p, arena[k], 0, *buf + off[k], bytes[k])
                     : e->vt->read(e, p, arena[k], 0, *buf + off[k], bytes[k]);
    return st;
}

static tg_status read_loss(tg_session *s, float *loss) {
    const tg_slot *sl = &s->b.prog->plan.slot[s->b.prog->result];
    return s->b.eng->vt->read(s->b.eng, s->b.prog, sl->arena, sl->offset, loss, 4);
}

/* Inputs, hyperparameters and the step's seed written (and, with
 * check_each, the snapshot taken) for update t, at micro-step s->micro of
 * its round. */
static tg_status prepare(tg_session *s, const tg_feed *feeds, int n, int64_t t, char **saved) {
    tg_engine *e = s->b.eng;
    tg_program *p = s->b.prog;
    tg_status st = tg_session_write_feeds(&s->b, p, "tg_session_step", feeds, n);
    if (st != TG_OK) return st;
    if (p->hyper >= 0) {
        float h[TG_HYPER_N];
        tg_optim_hyper(&s->optim, s->lr, t, t - s->lr_start, h);
        h[TG_HYPER_ACC_KEEP] = s->micro > 0 ? 1.0f : 0.0f;
        /* Finite settings can still give an infinite rate (a staircase's
         * gamma^k); the step's check sees only the loss and the gradients,
         * so such an update would write inf or NaN into every param and
         * report success. */
        for (int i = 0; i < TG_HYPER_N; i++)
            if (!isfinite(h[i]))
                return tg_fail(TG_ERR_NUMERIC, "tg_session_step: at step %lld the schedule's learning rate is %g and "
                               "the optimizer's factors from it are not all finite floats; the step was not run",
                               (long long)t, h[TG_HYPER_LR]);
        const tg_slot *sl = &p->plan.slot[p->hyper];
        if ((st = e->vt->write(e, p, sl->arena, sl->offset, h, sizeof h)) != TG_OK) return st;
    }
    /* each micro-step draws anew: the draws of update t's round are numbered from (t - 1) K + 1 */
    int64_t draw = (t - 1) * s->accumulate + s->micro + 1;
    if ((st = tg_session_write_rng_seed(&s->b, p, draw)) != TG_OK) return st;
    return p->check_each ? snapshot(s, saved, false) : TG_OK;
}

static tg_status step(tg_session *s, const tg_feed *feeds, int n, float *loss) {
    if (s->step == INT64_MAX) return tg_fail(TG_ERR_STATE, "tg_session_step: the step count is at its maximum");
    tg_engine *e = s->b.eng;
    tg_program *p = s->b.prog;
    int64_t t = s->step + 1;
    char *saved = NULL;
    tg_status st = prepare(s, feeds, n, t, &saved);
    if (st != TG_OK) {
        free(saved);
        /* Data parallel: the other ranks' steps wait at the cut for this one's status. */
        if (p->dp) tg_dp_of(p->dp)->step = t, p->dp->begin(p->dp, NULL), st = p->dp->cut(p->dp, st);
        return st;
    }
    tg_dp *dp = p->dp ? tg_dp_of(p->dp) : NULL;
    double t0 = dp ? tg_now() : 0;
    if (dp) dp->step = t;
    p->to_cut = s->micro + 1 < s->accumulate;
    st = e->vt->run(e, p);
    bool micro = p->to_cut;
    p->to_cut = false;
    /* a failed micro-step or update ends the round: the next step restarts the sums */
    s->micro = st == TG_OK && micro ? s->micro + 1 : 0;
    if (dp) dp->stats.steps++, dp->stats.step_s += tg_now() - t0;
    /* Without check_numerics a step fails as numeric only at its check, after the backward. */
    s->grads_partial = st != TG_OK && !(st == TG_ERR_NUMERIC && !p->check_each);
    if (st == TG_ERR_NUMERIC) {
        char msg[600];
        const char *why = tg_last_error(), *api = "tg_session_step: "; /* a rank's own, or already another's */
        snprintf(msg, sizeof msg, "%s%s", strncmp(why, api, strlen(api)) ? api : "", why);
        if (saved) snapshot(s, &saved, true);
        free(saved);
        if (loss) read_loss(s, loss);
        return tg_fail(TG_ERR_NUMERIC, "%s", msg);
    }
    free(saved);
    if (st != TG_OK) return st;
    if (!micro) s->step = t;
    return loss ? read_loss(s, loss) : TG_OK;
}

tg_status tg_session_step(tg_session *s, const tg_feed *feeds, int n, float *loss) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_step: session is NULL");
    tg_share_lock(&s->b);
    tg_status st = step(s, feeds, n, loss);
    tg_share_unlock(&s->b);
    return st;
}

tg_status tg_session_set_lr(tg_session *s, tg_lr lr) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_set_lr: session is NULL");
    tg_share_lock(&s->b);
    tg_status st = tg_session_take_lr(s, &lr, "tg_session_set_lr");
    if (st == TG_OK) s->lr_start = s->step;
    tg_share_unlock(&s->b);
    return st;
}

int tg_session_pending(const tg_session *s) {
    if (!s) return 0;
    tg_share_lock(&s->b);
    int n = s->micro;
    tg_share_unlock(&s->b);
    return n;
}

int64_t tg_session_step_count(const tg_session *s) {
    if (!s) return 0;
    tg_share_lock(&s->b);
    int64_t n = s->step;
    tg_share_unlock(&s->b);
    return n;
}

/* Zeroes the optimizer's state leaves (moments, velocities); the leaves a
 * step rewrites (hyperparameters, the random seed) are left alone. */
static tg_status zero_state(tg_session *s) {
    const tg_program *p = s->b.prog;
    const tg_graph *g = p->g;
    int64_t most = 0;
    for (int i = 0; i < g->n; i++)
        if (tg_optim_is_carried(&g->nodes[i]) && p->plan.slot[i].bytes > most) most = p->plan.slot[i].bytes;
    void *zeros = tg_calloc((size_t)most + 1, 1);
    if (!zeros) return tg_fail(TG_ERR_NOMEM, "tg_session_reset: out of memory");
    tg_status st = TG_OK;
    for (int i = 0; i < g->n && st == TG_OK; i++) {
        const tg_slot *sl = &p->plan.slot[i];
        if (tg_optim_is_carried(&g->nodes[i]))
            st = s->b.eng->vt->write(s->b.eng, s->b.prog, sl->arena, sl->offset, zeros, sl->bytes);
    }
    free(zeros);
    return st;
}

static tg_status reset(tg_session *s, const tg_reset_opts *o) {
    uint64_t seed = o->new_seed ? o->seed : s->b.seed;
    tg_status st = tg_session_base_usable(&s->b, "tg_session_reset");
    if (st == TG_OK && !o->keep_params) st = tg_session_base_init_params(&s->b, seed, "tg_session_reset");
    if (st == TG_OK && !o->keep_optimizer) st = zero_state(s);
    if (st != TG_OK) return st;
    if (!o->keep_optimizer) s->step = s->lr_start = s->micro = 0;
    s->b.seed = seed;
    return TG_OK;
}

tg_status tg_session_reset(tg_session *s, const tg_reset_opts *opts) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_reset: session is NULL");
    tg_reset_opts all = {0};
    tg_share_lock(&s->b);
    tg_status st = reset(s, opts ? opts : &all);
    /* Data parallel: every rank resets, then starts again from rank 0's draw. */
    if (s->comm) st = tg_dp_agree(s->comm, st, "tg_session_reset");
    if (s->comm && st == TG_OK) st = dp_sync(s, "tg_session_reset");
    tg_share_unlock(&s->b);
    return st;
}

static tg_status replace(tg_session *s, const tg_replace_spec *r) {
    const char *api = "tg_session_replace_model";
    const tg_optim *o = r->optim ? r->optim : &s->optim;
    tg_status st = tg_model_status(r->model) != TG_OK ? r->model->err : tg_optim_check(o, api);
    void *user = r->user ? r->user : s->user;
    uint64_t seed = r->new_seed ? r->seed : s->b.seed;
    tg_lr *lr = NULL;
    if (st == TG_OK && r->optim) st = tg_lr_copy(&r->optim->lr, &lr, api);
    /* The new program first, on an engine of its own: if it fails, nothing
     * changed. Data parallel: every rank's new program must pass, and match
     * rank 0's, before any rank takes its own. */
    tg_session_base nb = {.share = s->b.share};
    if (st == TG_OK) st = build(s, &nb, r->model, user, o, seed, api);
    if (s->comm) st = tg_dp_agree_program(s->comm, st == TG_OK ? nb.prog : NULL, st, api);
    if (st != TG_OK) {
        if (nb.prog) drop_program(&nb);
        free(lr);
        return st;
    }
    drop_program(&s->b);
    s->b.model = nb.model;
    s->b.eng = nb.eng;
    s->b.param_offset = nb.param_offset;
    s->b.n_params = nb.n_params;
    s->b.prog = nb.prog;
    s->b.seed = seed;
    s->user = user;
    if (r->optim) {
        s->optim = *r->optim;
        free(s->lr);
        s->lr = lr;
        s->optim.lr = *lr;
    }
    s->step = s->lr_start = s->micro = 0; /* fresh optimizer state: the schedule starts over */
    s->grads_partial = false; /* a new program: its gradients read as zeros until its first step */
    for (int i = 0; i < s->b.share->n_fwd; i++) tg_forward_refit(s->b.share->fwd[i], &s->b);
    return s->comm ? dp_sync(s, api) : TG_OK; /* rank 0's new params everywhere */
}

tg_status tg_session_replace_model(tg_session *s, const tg_replace_spec *r) {
    const char *api = "tg_session_replace_model";
    if (!s || !r || !r->model) return tg_fail(TG_ERR_ARG, "%s: session, spec and spec->model are required", api);
    tg_share_lock(&s->b);
    tg_status st = replace(s, r);
    tg_share_unlock(&s->b);
    return st;
}

tg_status tg_session_get_grad(tg_session *s, const char *name, float *data, int64_t count) {
    const char *api = "tg_session_get_grad";
    tg_param p;
    tg_share_lock(TG_SESSION_BASE(s));
    tg_status st = tg_session_base_param_check(s ? &s->b : NULL, api, name, data, count, &p);
    int id = st == TG_OK ? s->b.prog->param_grad[p] : -1;
    if (st == TG_OK && id < 0) st = tg_fail(TG_ERR_STATE, "%s: param '%s' has no gradient in this session", api, name);
    if (st == TG_OK && s->b.prog->discard_grads)
        st = tg_fail(TG_ERR_STATE, "%s: this session discards its gradients after each step (spec.discard_grads)",
                     api);
    if (st == TG_OK && s->grads_partial)
        st = tg_fail(TG_ERR_STATE, "%s: the last step failed before its backward wrote every gradient (check_numerics "
                     "stopped it, or the device failed); their memory holds other values until a step succeeds", api);
    if (st == TG_OK) {
        const tg_slot *sl = &s->b.prog->plan.slot[id];
        st = s->b.eng->vt->read(s->b.eng, s->b.prog, sl->arena, sl->offset, data, count * 4);
    }
    tg_share_unlock(TG_SESSION_BASE(s));
    return st;
}

/* The params, each trained one replaced by its average (state
 * "opt.<param>.ema") once an update has made one. */
static tg_status download_ema(tg_session *s, const char *api, tg_safetensors **out) {
    if (s->optim.ema_decay <= 0)
        return tg_fail(TG_ERR_STATE, "%s: the session keeps no average (its optimizer's ema_decay is 0)", api);
    tg_status st = tg_session_base_download(&s->b, api, out);
    const tg_program *p = s->b.prog;
    const tg_graph *g = p->g;
    for (int i = 0; i < g->n && st == TG_OK && s->step > 0; i++) {
        const tg_node *n = &g->nodes[i];
        size_t len = n->op == TG_OP_STATE && n->name ? strlen(n->name) : 0;
        if (len < 9 || strncmp(n->name, "opt.", 4) || strcmp(n->name + len - 4, ".ema")) continue;
        for (int q = 0; q < (*out)->n; q++) {
            const char *pn = (*out)->t[q].name;
            if (strlen(pn) != len - 8 || strncmp(n->name + 4, pn, len - 8)) continue;
            const tg_slot *sl = &p->plan.slot[i];
            st = s->b.eng->vt->read(s->b.eng, s->b.prog, sl->arena, sl->offset, (void *)(*out)->t[q].data, sl->bytes);
            break;
        }
    }
    if (st != TG_OK) {
        tg_safetensors_free(*out);
        *out = NULL;
    }
    return st;
}

tg_status tg_session_download_ema(tg_session *s, tg_safetensors **out) {
    const char *api = "tg_session_download_ema";
    if (!s || !out) return tg_fail(TG_ERR_ARG, "%s: session and out are required", api);
    *out = NULL;
    tg_share_lock(&s->b);
    tg_status st = tg_session_base_usable(&s->b, api);
    if (st == TG_OK) st = download_ema(s, api, out);
    tg_share_unlock(&s->b);
    return st;
}

/* The rest is the base's, under this type's names. */

tg_status tg_session_set_param(tg_session *s, const char *name, const float *data, int64_t count) {
    return tg_session_base_param_io(TG_SESSION_BASE(s), "tg_session_set_param", name, (void *)data, count, true);
}

tg_status tg_session_get_param(tg_session *s, const char *name, float *data, int64_t count) {
    return tg_session_base_param_io(TG_SESSION_BASE(s), "tg_session_get_param", name, data, count, false);
}

tg_status tg_session_upload(tg_session *s, const tg_feed *params, int n) {
    return tg_session_base_upload(TG_SESSION_BASE(s), "tg_session_upload", params, n);
}

tg_status tg_session_set_tensor(tg_session *s, const tg_st_tensor *t) {
    return tg_session_base_set_tensor(TG_SESSION_BASE(s), "tg_session_set_tensor", t);
}

tg_status tg_session_upload_tensors(tg_session *s, const tg_st_tensor *t, int n) {
    return tg_session_base_upload_tensors(TG_SESSION_BASE(s), "tg_session_upload_tensors", t, n);
}

tg_status tg_session_download(tg_session *s, tg_safetensors **out) {
    return tg_session_base_download(TG_SESSION_BASE(s), "tg_session_download", out);
}

int tg_session_capture_count(const tg_session *s) { return tg_session_base_capture_count(TG_SESSION_BASE(s)); }

const char *tg_session_capture_name(const tg_session *s, int i) {
    return tg_session_base_capture_name(TG_SESSION_BASE(s), i);
}

tg_status tg_session_read(tg_session *s, const char *name, void *dst, int64_t count) {
    return tg_session_base_read(TG_SESSION_BASE(s), "tg_session_read", name, dst, count);
}

tg_status tg_session_capture_info(const tg_session *s, const char *name, tg_shape *shape, tg_dtype *dtype) {
    return tg_session_base_capture_info(TG_SESSION_BASE(s), "tg_session_capture_info", name, shape, dtype);
}

tg_status tg_session_plan_stats(const tg_session *s, tg_plan_stats *o) {
    return tg_session_base_plan_stats(TG_SESSION_BASE(s), "tg_session_plan_stats", o);
}

void tg_session_print_plan(const tg_session *s, void *file) { tg_session_base_print_plan(TG_SESSION_BASE(s), file); }

const tg_graph *tg_session_graph(const tg_session *s) {
    if (!s) return NULL;
    /* Under the lock, as every call: a replace_model on another thread swaps the program. */
    tg_share_lock(&s->b);
    const tg_graph *g = s->b.prog->g;
    tg_share_unlock(&s->b);
    return g;
}

tg_status tg_session_dot(const tg_session *s, void *file) {
    return tg_session_base_dot(TG_SESSION_BASE(s), "tg_session_dot", file);
}

tg_status tg_session_set_seed(tg_session *s, uint64_t seed) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_set_seed: session is NULL");
    tg_share_lock(&s->b);
    s->b.seed = seed;
    tg_share_unlock(&s->b);
    return TG_OK;
}

uint64_t tg_session_seed(const tg_session *s) {
    if (!s) return 0;
    tg_share_lock(&s->b);
    uint64_t seed = s->b.seed;
    tg_share_unlock(&s->b);
    return seed;
}

tg_comm *tg_session_dp_comm(const tg_session *s) { return s ? s->comm : NULL; }

tg_status tg_session_comm_stats(const tg_session *s, tg_comm_stats *out) {
    if (!s || !out) return tg_fail(TG_ERR_ARG, "tg_session_comm_stats: session and out are required");
    tg_share_lock(&s->b); /* a step on another thread adds to the stats; a replace_model swaps the program */
    tg_exchange *x = s->b.prog ? s->b.prog->dp : NULL;
    *out = x ? tg_dp_stats(tg_dp_of(x)) : (tg_comm_stats){0};
    tg_share_unlock(&s->b);
    return TG_OK;
}
