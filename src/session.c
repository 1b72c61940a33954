/* Sessions: the public face of a compiled program on an engine. Training
 * sessions own an optimizer schedule and a step counter; params live in the
 * engine's params arena, addressed by the model's layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "ir/model.h"

#include "session.h"

/* The per-step seed random ops read (see TG_RNG_SEED_NAME): a hash of the
 * session seed and the step, so a resumed run draws what it would have. */
tg_status tg_session_write_rng_seed(tg_session *s, tg_program *p, int64_t t) {
    int id = p->g->rng_seed;
    if (id < 0) return TG_OK;
    uint32_t v[2] = {tg_rng_u32(s->seed, 0x5eed5eedu, (uint32_t)t), tg_rng_u32(s->seed, 0x5eed5eeeu, (uint32_t)t)};
    const tg_slot *sl = &p->plan.slot[id];
    return s->eng->vt->write(s->eng, p, sl->arena, sl->offset, v, sizeof v);
}

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
    tg_session_free_programs(s);
    if (s->eng && --s->eng->refs == 0) s->eng->vt->destroy(s->eng);
    free(s->param_offset);
    free(s);
}

static tg_status make_engine(const tg_train_spec *spec, int64_t params_bytes, tg_engine **out) {
    switch (spec->backend) {
    case TG_BACKEND_CPU: return tg_cpu_engine_new(spec->threads, params_bytes, out);
    case TG_BACKEND_WEBGPU: return tg_wgpu_engine_new(params_bytes, out);
    }
    return tg_fail(TG_ERR_ARG, "tg_session_new: unknown backend %d", (int)spec->backend);
}

tg_status tg_session_new(const tg_train_spec *spec, tg_session **out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_session_new: out is NULL");
    *out = NULL;
    if (!spec || !spec->model || !spec->loss)
        return tg_fail(TG_ERR_ARG, "tg_session_new: spec, spec->model and spec->loss are required");
    if (spec->n_inputs < 0 || (spec->n_inputs > 0 && !spec->inputs))
        return tg_fail(TG_ERR_ARG, "tg_session_new: bad input list");
    if (tg_model_status(spec->model) != TG_OK) return spec->model->err;
    tg_status st = tg_optim_check(&spec->optim, "tg_session_new");
    if (st != TG_OK) return st;
    tg_session *s = tg_calloc(1, sizeof *s);
    int np = tg_model_param_count(spec->model);
    if (!s || !(s->param_offset = tg_calloc((size_t)np + 1, sizeof(int64_t)))) {
        free(s);
        return tg_fail(TG_ERR_NOMEM, "tg_session_new: out of memory");
    }
    s->model = spec->model;
    s->seed = spec->seed;
    s->optim = spec->optim;
    copy_lr(s->lr, &spec->optim.lr);
    int64_t params_bytes = tg_plan_param_layout(spec->model, TG_ARENA_ALIGN, s->param_offset);

    /* The engine first: its fusion pass shapes the plan. */
    st = make_engine(spec, params_bytes, &s->eng);
    tg_compile_req req = {spec->model, spec->loss, spec->user, spec->inputs, spec->n_inputs, &spec->optim,
                          spec->optim.kind == TG_OPT_NONE, TG_ARENA_ALIGN, s->param_offset,
                          s->eng ? s->eng->vt->fuse : NULL};
    if (st == TG_OK) st = tg_program_build(&req, &s->prog);
    if (st == TG_OK) s->prog->check_each = tg_session_check_numerics(spec->check_numerics);
    if (st == TG_OK) {
        const tg_node *r = &s->prog->g->nodes[s->prog->result];
        if (r->dtype != TG_F32 || tg_ir_numel(r) != 1) {
            char b[96];
            st = tg_fail(TG_ERR_SHAPE, "tg_session_new: the loss must be a single f32 value, got %s %s",
                         tg_dtype_name(r->dtype), tg_shape_str(r->shape, b, sizeof b));
        }
    }
    if (st == TG_OK) st = s->eng->vt->compile(s->eng, s->prog);
    /* Initial values: params from the seed, optimizer state zero (the arenas start zeroed). */
    float *buf = NULL;
    for (int p = 0; st == TG_OK && p < np; p++) {
        int64_t n = tg_shape_numel(spec->model->params[p].shape);
        float *nb = realloc(buf, (size_t)n * sizeof(float));
        if (!nb) {
            st = tg_fail(TG_ERR_NOMEM, "tg_session_new: out of memory");
            break;
        }
        buf = nb;
        tg_model_init_param(spec->model, p, spec->seed, buf);
        st = s->eng->vt->write(s->eng, s->prog, TG_ARENA_PARAMS, s->param_offset[p], buf, n * 4);
    }
    free(buf);
    if (st != TG_OK) {
        tg_session_free(s);
        return st;
    }
    *out = s;
    return TG_OK;
}

bool tg_session_check_numerics(bool asked) {
    const char *v = getenv("TG_CHECK_NUMERICS");
    return asked || (v && *v && strcmp(v, "0") != 0);
}

/* check_each: the params and the persist arena (optimizer state) as they
 * were before the step, so one that fails inside the updates can be undone. */
static tg_status snapshot(tg_session *s, char **buf, bool restore) {
    int64_t pb = s->eng->params_bytes, sb = s->prog->plan.arena_bytes[TG_ARENA_PERSIST];
    if (!restore && !(*buf = malloc((size_t)(pb + sb) + 1)))
        return tg_fail(TG_ERR_NOMEM, "tg_session_step: out of memory for the numerics snapshot");
    const tg_engine_vt *vt = s->eng->vt;
    int arena[2] = {TG_ARENA_PARAMS, TG_ARENA_PERSIST};
    int64_t off[2] = {0, pb}, bytes[2] = {pb, sb};
    tg_status st = TG_OK;
    for (int k = 0; k < 2 && st == TG_OK; k++)
        st = restore ? vt->write(s->eng, s->prog, arena[k], 0, *buf + off[k], bytes[k])
                     : vt->read(s->eng, s->prog, arena[k], 0, *buf + off[k], bytes[k]);
    return st;
}

int tg_session_find_leaf(const tg_program *p, tg_opcode op, const char *name) {
    for (int i = 0; i < p->g->n; i++)
        if (p->g->nodes[i].op == op && strcmp(p->g->nodes[i].name, name) == 0) return i;
    return -1;
}

/* Checks and writes the feeds: every input exactly once, right sizes. */
tg_status tg_session_write_feeds(tg_session *s, tg_program *p, const char *api, const tg_feed *feeds, int n) {
    const tg_graph *g = p->g;
    int n_inputs = 0;
    for (int i = 0; i < g->n; i++) n_inputs += g->nodes[i].op == TG_OP_INPUT;
    if (n < 0 || (n > 0 && !feeds)) return tg_fail(TG_ERR_ARG, "%s: bad feed list", api);
    for (int f = 0; f < n; f++) {
        if (!feeds[f].name) return tg_fail(TG_ERR_NAME, "%s: feed %d has no name", api, f);
        int id = tg_session_find_leaf(p, TG_OP_INPUT, feeds[f].name);
        if (id < 0) return tg_fail(TG_ERR_NAME, "%s: unknown input '%s'", api, feeds[f].name);
        for (int e = 0; e < f; e++)
            if (strcmp(feeds[e].name, feeds[f].name) == 0)
                return tg_fail(TG_ERR_NAME, "%s: input '%s' fed twice", api, feeds[f].name);
        int64_t want = tg_ir_numel(&g->nodes[id]);
        if (feeds[f].count != want) {
            char b[96];
            return tg_fail(TG_ERR_SIZE, "%s: input '%s' needs %lld elements (%s), got %lld", api, feeds[f].name,
                           (long long)want, tg_shape_str(g->nodes[id].shape, b, sizeof b), (long long)feeds[f].count);
        }
        if (want > 0 && !feeds[f].data) return tg_fail(TG_ERR_ARG, "%s: input '%s' has no data", api, feeds[f].name);
    }
    if (n != n_inputs) {
        for (int i = 0; i < g->n; i++) {
            if (g->nodes[i].op != TG_OP_INPUT) continue;
            bool fed = false;
            for (int f = 0; f < n && !fed; f++) fed = strcmp(feeds[f].name, g->nodes[i].name) == 0;
            if (!fed) return tg_fail(TG_ERR_NAME, "%s: input '%s' was not fed", api, g->nodes[i].name);
        }
    }
    for (int f = 0; f < n; f++) {
        int id = tg_session_find_leaf(p, TG_OP_INPUT, feeds[f].name);
        const tg_slot *sl = &p->plan.slot[id];
        tg_status st = s->eng->vt->write(s->eng, p, sl->arena, sl->offset, feeds[f].data, feeds[f].count * 4);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

tg_status tg_session_step(tg_session *s, const tg_feed *feeds, int n, float *loss) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_step: session is NULL");
    if (s->infer) return tg_fail(TG_ERR_STATE, "tg_session_step: a forward session has no step; use tg_session_run");
    if (s->step == INT64_MAX) return tg_fail(TG_ERR_STATE, "tg_session_step: the step count is at its maximum");
    tg_status st = tg_session_write_feeds(s, s->prog, "tg_session_step", feeds, n);
    if (st != TG_OK) return st;
    int64_t t = s->step + 1;
    if (s->prog->hyper >= 0) {
        float h[TG_HYPER_N];
        tg_optim_hyper(&s->optim, s->lr, t, t - s->lr_start, h);
        const tg_slot *sl = &s->prog->plan.slot[s->prog->hyper];
        if ((st = s->eng->vt->write(s->eng, s->prog, sl->arena, sl->offset, h, sizeof h)) != TG_OK) return st;
    }
    if ((st = tg_session_write_rng_seed(s, s->prog, t)) != TG_OK) return st;
    char *saved = NULL;
    if (s->prog->check_each && (st = snapshot(s, &saved, false)) != TG_OK) {
        free(saved);
        return st;
    }
    st = s->eng->vt->run(s->eng, s->prog);
    if (st == TG_ERR_NUMERIC) {
        char msg[600];
        snprintf(msg, sizeof msg, "tg_session_step: %s", tg_last_error());
        if (saved) snapshot(s, &saved, true);
        free(saved);
        if (loss) {
            const tg_slot *sl = &s->prog->plan.slot[s->prog->result];
            s->eng->vt->read(s->eng, s->prog, sl->arena, sl->offset, loss, 4);
        }
        return tg_fail(TG_ERR_NUMERIC, "%s", msg);
    }
    free(saved);
    if (st != TG_OK) return st;
    s->step = t;
    if (loss) {
        const tg_slot *sl = &s->prog->plan.slot[s->prog->result];
        return s->eng->vt->read(s->eng, s->prog, sl->arena, sl->offset, loss, 4);
    }
    return TG_OK;
}

tg_status tg_session_set_lr(tg_session *s, tg_lr lr) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_set_lr: session is NULL");
    if (s->infer) return tg_fail(TG_ERR_STATE, "tg_session_set_lr: a forward session has no optimizer");
    tg_status st = tg_lr_check(&lr, "tg_session_set_lr");
    if (st != TG_OK) return st;
    copy_lr(s->lr, &lr);
    s->lr_start = s->step;
    return TG_OK;
}

int64_t tg_session_step_count(const tg_session *s) { return s ? s->step : 0; }

static tg_status param_io(tg_session *s, const char *api, const char *name, void *data, int64_t count, bool write,
                          bool grad) {
    if (!s || !name) return tg_fail(TG_ERR_ARG, "%s: session and name are required", api);
    tg_param p = tg_model_find(s->model, name);
    if (p < 0) return tg_fail(TG_ERR_NAME, "%s: no param named '%s'", api, name);
    int64_t want = tg_shape_numel(s->model->params[p].shape);
    if (count != want) {
        char b[96];
        return tg_fail(TG_ERR_SIZE, "%s: param '%s' has %lld elements (%s), got %lld", api, name, (long long)want,
                       tg_shape_str(s->model->params[p].shape, b, sizeof b), (long long)count);
    }
    if (!data) return tg_fail(TG_ERR_ARG, "%s: data is NULL", api);
    if (grad) {
        int id = s->prog && !s->infer ? s->prog->param_grad[p] : -1;
        if (id < 0) return tg_fail(TG_ERR_STATE, "%s: param '%s' has no gradient in this session", api, name);
        const tg_slot *sl = &s->prog->plan.slot[id];
        return s->eng->vt->read(s->eng, s->prog, sl->arena, sl->offset, data, count * 4);
    }
    return write ? s->eng->vt->write(s->eng, s->prog, TG_ARENA_PARAMS, s->param_offset[p], data, count * 4)
                 : s->eng->vt->read(s->eng, s->prog, TG_ARENA_PARAMS, s->param_offset[p], data, count * 4);
}

tg_status tg_session_set_param(tg_session *s, const char *name, const float *data, int64_t count) {
    return param_io(s, "tg_session_set_param", name, (void *)data, count, true, false);
}

tg_status tg_session_get_param(tg_session *s, const char *name, float *data, int64_t count) {
    return param_io(s, "tg_session_get_param", name, data, count, false, false);
}

tg_status tg_session_get_grad(tg_session *s, const char *name, float *data, int64_t count) {
    return param_io(s, "tg_session_get_grad", name, data, count, false, true);
}

tg_status tg_session_upload(tg_session *s, const tg_feed *params, int n) {
    const char *api = "tg_session_upload";
    if (!s || n < 0 || (n > 0 && !params)) return tg_fail(TG_ERR_ARG, "%s: bad arguments", api);
    int np = tg_model_param_count(s->model);
    /* Check everything first: a failed upload writes nothing. */
    for (int f = 0; f < n; f++) {
        tg_param p = params[f].name ? tg_model_find(s->model, params[f].name) : -1;
        if (p < 0) return tg_fail(TG_ERR_NAME, "%s: no param named '%s'", api, params[f].name ? params[f].name : "(null)");
        for (int e = 0; e < f; e++)
            if (strcmp(params[e].name, params[f].name) == 0)
                return tg_fail(TG_ERR_NAME, "%s: param '%s' given twice", api, params[f].name);
        int64_t want = tg_shape_numel(s->model->params[p].shape);
        if (params[f].count != want)
            return tg_fail(TG_ERR_SIZE, "%s: param '%s' has %lld elements, got %lld", api, params[f].name,
                           (long long)want, (long long)params[f].count);
        if (!params[f].data) return tg_fail(TG_ERR_ARG, "%s: param '%s' has no data", api, params[f].name);
    }
    if (n != np) {
        for (int p = 0; p < np; p++) {
            bool given = false;
            for (int f = 0; f < n && !given; f++) given = strcmp(params[f].name, s->model->params[p].name) == 0;
            if (!given) return tg_fail(TG_ERR_NAME, "%s: param '%s' is missing", api, s->model->params[p].name);
        }
    }
    for (int f = 0; f < n; f++) {
        tg_status st = tg_session_set_param(s, params[f].name, params[f].data, params[f].count);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

static int find_capture(const tg_session *s, const char *name) {
    const tg_graph *g = s->prog->g;
    for (int c = 0; name && c < g->n_caps; c++)
        if (strcmp(g->caps[c].name, name) == 0) return g->caps[c].id;
    return -1;
}

tg_status tg_session_read(tg_session *s, const char *name, void *dst, int64_t count) {
    if (!s || !dst) return tg_fail(TG_ERR_ARG, "tg_session_read: session and dst are required");
    if (!s->prog) return tg_fail(TG_ERR_STATE, "tg_session_read: the forward session has not run yet");
    int id = find_capture(s, name);
    if (id < 0) return tg_fail(TG_ERR_NAME, "tg_session_read: no capture named '%s'", name ? name : "(null)");
    int64_t want = tg_ir_numel(&s->prog->g->nodes[id]);
    if (count != want)
        return tg_fail(TG_ERR_SIZE, "tg_session_read: capture '%s' has %lld elements, got room for %lld", name,
                       (long long)want, (long long)count);
    const tg_slot *sl = &s->prog->plan.slot[id];
    return s->eng->vt->read(s->eng, s->prog, sl->arena, sl->offset, dst, count * 4);
}

tg_status tg_session_capture_info(const tg_session *s, const char *name, tg_shape *shape, tg_dtype *dtype) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_capture_info: session is NULL");
    if (!s->prog) return tg_fail(TG_ERR_STATE, "tg_session_capture_info: the forward session has not run yet");
    int id = find_capture(s, name);
    if (id < 0) return tg_fail(TG_ERR_NAME, "tg_session_capture_info: no capture named '%s'", name ? name : "(null)");
    if (shape) *shape = s->prog->g->nodes[id].shape;
    if (dtype) *dtype = s->prog->g->nodes[id].dtype;
    return TG_OK;
}

tg_status tg_session_plan_stats(const tg_session *s, tg_plan_stats *o) {
    if (!s || !o) return tg_fail(TG_ERR_ARG, "tg_session_plan_stats: NULL argument");
    if (!s->prog) return tg_fail(TG_ERR_STATE, "tg_session_plan_stats: the forward session has not run yet");
    memset(o, 0, sizeof *o);
    const tg_plan *pl = &s->prog->plan;
    o->workspace_bytes = s->prog->workspace_bytes;
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
    o->n_nodes = s->prog->g->n;
    o->n_kernels = pl->n_kernels;
    o->n_dispatches = s->prog->n_dispatches;
    o->n_writebacks = s->prog->n_wb;
    for (int w = 0; w < s->prog->n_wb; w++) o->n_writeback_copies += !pl->wb_free[w];
    return TG_OK;
}

void tg_session_print_plan(const tg_session *s, void *file) {
    if (s && s->prog) tg_plan_print(s->prog->g, &s->prog->plan, file ? file : stdout);
}

const tg_graph *tg_session_graph(const tg_session *s) { return s && s->prog ? s->prog->g : NULL; }

tg_status tg_session_dot(const tg_session *s, void *file) {
    if (!s || !file) return tg_fail(TG_ERR_ARG, "tg_session_dot: session and file must not be NULL");
    if (!s->prog) return tg_fail(TG_ERR_STATE, "tg_session_dot: the forward session has not run yet");
    const tg_fusion *fu = s->prog->fusion;
    return tg_ir_graph_dot(s->prog->g, fu ? fu->group : NULL, fu ? fu->n_groups : 0, file);
}

tg_status tg_session_set_seed(tg_session *s, uint64_t seed) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_set_seed: session is NULL");
    s->seed = seed;
    return TG_OK;
}
