/* Forward-only sessions: attached to a session whose params (and engine)
 * they share, compiled once per batch size on first use. */
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "ir/model.h"

void tg_session_free_programs(tg_session *s) {
    if (s->infer) {
        for (int i = 0; i < s->n_progs; i++) {
            if (s->eng) s->eng->vt->release(s->eng, s->progs[i].prog);
            tg_program_free(s->progs[i].prog);
        }
        free(s->progs);
        for (int i = 0; i < s->n_inputs; i++) free((char *)s->inputs[i].name);
        free(s->inputs);
    } else if (s->prog) {
        if (s->eng) s->eng->vt->release(s->eng, s->prog);
        tg_program_free(s->prog);
    }
    s->prog = NULL;
}

tg_status tg_session_attach(tg_session *base, const tg_infer_spec *spec, tg_session **out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_session_attach: out is NULL");
    *out = NULL;
    if (!base || !spec || !spec->fn) return tg_fail(TG_ERR_ARG, "tg_session_attach: base, spec and spec->fn are required");
    if (spec->n_inputs < 0 || (spec->n_inputs > 0 && !spec->inputs))
        return tg_fail(TG_ERR_ARG, "tg_session_attach: bad input list");
    tg_session *s = tg_calloc(1, sizeof *s);
    int np = tg_model_param_count(base->model);
    if (!s || !(s->param_offset = tg_calloc((size_t)np + 1, sizeof(int64_t))) ||
        !(s->inputs = tg_calloc((size_t)spec->n_inputs + 1, sizeof(tg_input_decl)))) {
        if (s) free(s->param_offset);
        free(s);
        return tg_fail(TG_ERR_NOMEM, "tg_session_attach: out of memory");
    }
    s->infer = true;
    s->model = base->model;
    s->eng = base->eng;
    s->eng->refs++;
    memcpy(s->param_offset, base->param_offset, sizeof(int64_t) * (size_t)np);
    s->seed = base->seed ^ 0x1f2e3d4c5b6a7988ull;
    s->fn = spec->fn;
    s->user = spec->user;
    for (int i = 0; i < spec->n_inputs; i++) {
        const tg_input_decl *d = &spec->inputs[i];
        s->inputs[i] = *d;
        s->inputs[i].name = d->name ? tg_strdup(d->name) : NULL;
        s->n_inputs++;
        bool bad = !s->inputs[i].name || d->shape.ndim < 0 || d->shape.ndim > TG_MAX_DIMS;
        for (int k = 0; !bad && k < d->shape.ndim; k++) bad = d->shape.d[k] < 0 && d->shape.d[k] != TG_BATCH;
        if (bad) {
            tg_session_free(s);
            return tg_fail(TG_ERR_ARG, "tg_session_attach: input %d ('%s') has no name or a bad shape", i,
                           d->name ? d->name : "(null)");
        }
    }
    *out = s;
    return TG_OK;
}

static bool uses_batch(const tg_session *s) {
    for (int i = 0; i < s->n_inputs; i++)
        for (int k = 0; k < s->inputs[i].shape.ndim; k++)
            if (s->inputs[i].shape.d[k] == TG_BATCH) return true;
    return false;
}

/* The program for `batch`, compiled now if this is its first use. */
static tg_status program_for(tg_session *s, int64_t batch, tg_program **out) {
    for (int i = 0; i < s->n_progs; i++)
        if (s->progs[i].batch == batch) return (*out = s->progs[i].prog, TG_OK);
    tg_input_decl *in = tg_calloc((size_t)s->n_inputs + 1, sizeof *in);
    struct tg_batch_prog *grown = tg_realloc(s->progs, sizeof *grown * (size_t)(s->n_progs + 1));
    if (!in || !grown) {
        free(in);
        return tg_fail(TG_ERR_NOMEM, "tg_session_run: out of memory");
    }
    s->progs = grown;
    for (int i = 0; i < s->n_inputs; i++) {
        in[i] = s->inputs[i];
        for (int k = 0; k < in[i].shape.ndim; k++)
            if (in[i].shape.d[k] == TG_BATCH) in[i].shape.d[k] = batch;
    }
    tg_compile_req req = {s->model, s->fn, s->user, in, s->n_inputs, NULL, false, TG_ARENA_ALIGN, s->param_offset,
                          s->eng->vt->fuse};
    tg_program *p;
    tg_status st = tg_program_build(&req, &p);
    free(in);
    if (st != TG_OK) return st;
    p->check_each = tg_session_check_numerics(false);
    if ((st = s->eng->vt->compile(s->eng, p)) != TG_OK) {
        s->eng->vt->release(s->eng, p);
        tg_program_free(p);
        return st;
    }
    s->progs[s->n_progs++] = (struct tg_batch_prog){batch, p};
    *out = p;
    return TG_OK;
}

tg_status tg_session_run(tg_session *s, int64_t batch, const tg_feed *feeds, int n) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_run: session is NULL");
    if (!s->infer) return tg_fail(TG_ERR_STATE, "tg_session_run: not a forward session (see tg_session_attach)");
    if (!uses_batch(s)) batch = 0;
    else if (batch <= 0) return tg_fail(TG_ERR_ARG, "tg_session_run: batch %lld must be > 0", (long long)batch);
    tg_program *p = NULL;
    tg_status st = program_for(s, batch, &p);
    if (st != TG_OK) return st;
    if ((st = tg_session_write_feeds(s, p, "tg_session_run", feeds, n)) != TG_OK) return st;
    if ((st = tg_session_write_rng_seed(s, p, ++s->runs)) != TG_OK) return st;
    if ((st = s->eng->vt->run(s->eng, p)) != TG_OK) return st;
    s->prog = p; /* outputs and captures now come from this program */
    return TG_OK;
}

tg_status tg_session_output_info(const tg_session *s, tg_shape *shape, tg_dtype *dtype) {
    if (!s) return tg_fail(TG_ERR_ARG, "tg_session_output_info: session is NULL");
    if (!s->prog) return tg_fail(TG_ERR_STATE, "tg_session_output_info: the session has not run yet");
    const tg_node *r = &s->prog->g->nodes[s->prog->result];
    if (shape) *shape = r->shape;
    if (dtype) *dtype = r->dtype;
    return TG_OK;
}

tg_status tg_session_output(tg_session *s, void *dst, int64_t count) {
    if (!s || !dst) return tg_fail(TG_ERR_ARG, "tg_session_output: session and dst are required");
    if (!s->prog) return tg_fail(TG_ERR_STATE, "tg_session_output: the session has not run yet");
    const tg_node *r = &s->prog->g->nodes[s->prog->result];
    if (count != tg_ir_numel(r)) {
        char b[96];
        return tg_fail(TG_ERR_SIZE, "tg_session_output: the output has %lld elements (%s), got room for %lld",
                       (long long)tg_ir_numel(r), tg_shape_str(r->shape, b, sizeof b), (long long)count);
    }
    const tg_slot *sl = &s->prog->plan.slot[s->prog->result];
    return s->eng->vt->read(s->eng, s->prog, sl->arena, sl->offset, dst, count * 4);
}
