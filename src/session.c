/* Training sessions: a program with gradients and an optimizer on an
 * engine, an optimizer schedule and a step counter; params live in the
 * engine's params arena, addressed by the model's layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dp.h"
#include "engine.h"
#include "ir/model.h"

#include "session.h"

static void copy_lr(tg_lr *dst, const tg_lr *src) {
    int k = 0;
    for (const tg_lr *l = src; l && k < TG_MAX_LR_CHAIN; l = l->kind == TG_LR_WARMUP ? l->then : NULL, k++) {
        dst[k] = *l;
        dst[k].then = NULL;
        if (k > 0) dst[k - 1].then = &dst[k];
    }
}

void tg_session_free(tg_session *s) {
    if (!s) return;
    if (s->b.prog) {
        if (s->b.eng) s->b.eng->vt->release(s->b.eng, s->b.prog);
        tg_program_free(s->b.prog);
    }
    tg_session_base_close(&s->b);
    free(s);
}

static tg_status session_new(const tg_train_spec *spec, tg_session **out) {
    *out = NULL;
    if (!spec->model || !spec->loss)
        return tg_fail(TG_ERR_ARG, "tg_session_new: spec, spec->model and spec->loss are required");
    if (spec->n_inputs < 0 || (spec->n_inputs > 0 && !spec->inputs))
        return tg_fail(TG_ERR_ARG, "tg_session_new: bad input list");
    if (tg_model_status(spec->model) != TG_OK) return spec->model->err;
    tg_status st = tg_optim_check(&spec->optim, "tg_session_new");
    if (st != TG_OK) return st;
    tg_session *s = tg_calloc(1, sizeof *s);
    if (!s) return tg_fail(TG_ERR_NOMEM, "tg_session_new: out of memory");
    s->b.seed = spec->seed;
    s->optim = spec->optim;
    copy_lr(s->lr, &spec->optim.lr);

    if (spec->comm && spec->backend == TG_BACKEND_WEBGPU) tg_wgpu_prefer_adapter(spec->comm->rank);
    /* The engine first: its fusion pass shapes the plan. */
    st = tg_session_base_open(&s->b, spec->model, spec->backend, spec->threads, "tg_session_new");
    tg_compile_req req = {spec->model, spec->loss, spec->user, spec->inputs, spec->n_inputs, &spec->optim,
                          spec->optim.kind == TG_OPT_NONE, TG_ARENA_ALIGN, s->b.param_offset,
                          s->b.eng ? s->b.eng->vt->fuse : NULL};
    if (st == TG_OK) st = tg_program_build(&req, &s->b.prog);
    if (st == TG_OK) s->b.prog->check_each = tg_session_check_numerics(spec->check_numerics);
    if (st == TG_OK) {
        const tg_node *r = &s->b.prog->g->nodes[s->b.prog->result];
        if (r->dtype != TG_F32 || tg_ir_numel(r) != 1) {
            char b[96];
            st = tg_fail(TG_ERR_SHAPE, "tg_session_new: the loss must be a single f32 value, got %s %s",
                         tg_dtype_name(r->dtype), tg_shape_str(r->shape, b, sizeof b));
        }
    }
    if (st == TG_OK && spec->comm)
        st = tg_dp_new(spec->comm, s->b.prog, &spec->optim, spec->backend == TG_BACKEND_CPU, &s->b.prog->dp);
    if (st == TG_OK) st = s->b.eng->vt->compile(s->b.eng, s->b.prog);
    /* Initial values: params from the seed, optimizer state zero (the arenas start zeroed). */
    if (st == TG_OK) st = tg_session_base_init_params(&s->b, spec->seed, "tg_session_new");
    if (st != TG_OK) {
        tg_session_free(s);
        return st;
    }
    *out = s;
    return TG_OK;
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
    st = tg_dp_session_start(spec->comm, *out, st);
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
 * check_each, the snapshot taken) for step t. */
static tg_status prepare(tg_session *s, const tg_feed *feeds, int n, int64_t t, char **saved) {
    tg_engine *e = s->b.eng;
    tg_program *p = s->b.prog;
    tg_status st = tg_session_write_feeds(&s->b, p, "tg_session_step", feeds, n);
    if (st != TG_OK) return st;
    if (p->hyper >= 0) {
        float h[TG_HYPER_N];
        tg_optim_hyper(&s->optim, s->lr, t, t - s->lr_start, h);
        const tg_slot *sl = &p->plan.slot[p->hyper];
        if ((st = e->vt->write(e, p, sl->arena, sl->offset, h, sizeof h)) != TG_OK) return st;
    }
    if ((st = tg_session_write_rng_seed(&s->b, p, t)) != TG_OK) return st;
    return p->check_each ? snapshot(s, saved, false) : TG_OK;
}

tg_status tg_session_step(tg_session *s, const tg_feed *feeds, int n, float *loss) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_step: session is NULL");
    if (s->step == INT64_MAX) return tg_fail(TG_ERR_STATE, "tg_session_step: the step count is at its maximum");
    tg_engine *e = s->b.eng;
    tg_program *p = s->b.prog;
    int64_t t = s->step + 1;
    char *saved = NULL;
    tg_status st = prepare(s, feeds, n, t, &saved);
    if (st != TG_OK) {
        free(saved);
        /* Data parallel: the other ranks' steps wait at the cut for this one's status. */
        if (p->dp) tg_dp_step_begin(p->dp, NULL), st = tg_dp_step_cut(p->dp, st);
        return st;
    }
    double t0 = p->dp ? tg_now() : 0;
    st = e->vt->run(e, p);
    if (p->dp) p->dp->stats.steps++, p->dp->stats.step_s += tg_now() - t0;
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
    s->step = t;
    return loss ? read_loss(s, loss) : TG_OK;
}

tg_status tg_session_set_lr(tg_session *s, tg_lr lr) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_set_lr: session is NULL");
    tg_status st = tg_lr_check(&lr, "tg_session_set_lr");
    if (st != TG_OK) return st;
    copy_lr(s->lr, &lr);
    s->lr_start = s->step;
    return TG_OK;
}

int64_t tg_session_step_count(const tg_session *s) { return s ? s->step : 0; }

tg_status tg_session_get_grad(tg_session *s, const char *name, float *data, int64_t count) {
    const char *api = "tg_session_get_grad";
    tg_param p;
    tg_status st = tg_session_base_param_check(s ? &s->b : NULL, api, name, data, count, &p);
    if (st != TG_OK) return st;
    int id = s->b.prog->param_grad[p];
    if (id < 0) return tg_fail(TG_ERR_STATE, "%s: param '%s' has no gradient in this session", api, name);
    const tg_slot *sl = &s->b.prog->plan.slot[id];
    return s->b.eng->vt->read(s->b.eng, s->b.prog, sl->arena, sl->offset, data, count * 4);
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

const tg_graph *tg_session_graph(const tg_session *s) { return s ? s->b.prog->g : NULL; }

tg_status tg_session_dot(const tg_session *s, void *file) {
    return tg_session_base_dot(TG_SESSION_BASE(s), "tg_session_dot", file);
}

tg_status tg_session_set_seed(tg_session *s, uint64_t seed) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_set_seed: session is NULL");
    s->b.seed = seed;
    return TG_OK;
}
