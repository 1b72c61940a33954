/* Runs one op case (op_cases.h) as a session on a backend: operands are
 * params, loss = sum(out * R), the output is captured as "out". Shared by
 * the finite-difference test and the cross-backend parity test. */
#ifndef TG_HARNESS_H
#define TG_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_cases.h"

typedef struct {
    const op_case *c;
    tg_model *m;
    tg_param p[4];
    float *x[4];         /* operand values on the host */
    int64_t nx[4];
    float *R;            /* loss weights, sized at trace time */
    int64_t n_out;
    tg_shape out_shape;
    tg_dtype out_dtype;
    uint64_t seed;
    tg_session *s;
} case_run;

static uint64_t h_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
static float h_uniform(uint64_t *s) { return (float)(h_next(s) >> 7) * (1.0f / 16777216.0f); }

static tg_tensor case_loss(tg_graph *g, void *u) {
    case_run *r = u;
    tg_tensor xs[4];
    for (int i = 0; i < r->c->n; i++) xs[i] = tg_use(g, r->p[i]);
    tg_tensor out = r->c->fn(g, xs);
    if (!tg_tensor_ok(out)) return out;
    tg_capture(out, "out");
    r->out_shape = tg_tensor_shape(out);
    r->out_dtype = tg_tensor_dtype(out);
    r->n_out = tg_shape_numel(r->out_shape);
    free(r->R);
    r->R = malloc(sizeof(float) * (size_t)(r->n_out ? r->n_out : 1));
    uint64_t st = r->seed ^ 0xabcdefull;
    for (int64_t i = 0; i < r->n_out; i++) r->R[i] = h_uniform(&st) * 2.0f - 1.0f;
    tg_tensor w = tg_constant(g, r->out_shape, r->R);
    return tg_sum(tg_mul(tg_cast(out, TG_F32), w), TG_ALL, false);
}

/* Builds the case's session; operand values come from `seed`. */
static tg_status case_open(case_run *r, const op_case *c, tg_backend be, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->c = c;
    r->seed = seed;
    r->m = tg_model_new();
    uint64_t st = seed * 7919 + 17;
    for (int i = 0; i < c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        r->nx[i] = tg_shape_numel(c->shape[i]);
        r->x[i] = malloc(sizeof(float) * (size_t)(r->nx[i] ? r->nx[i] : 1));
        for (int64_t k = 0; k < r->nx[i]; k++) {
            float v = c->lo + (c->hi - c->lo) * h_uniform(&st);
            if (c->gap > 0 && fabsf(v) < c->gap) v = v < 0 ? v - c->gap : v + c->gap;
            r->x[i][k] = v;
        }
        r->p[i] = tg_model_param(r->m, name, c->shape[i], tg_init_values(r->x[i]));
        if (c->no_grad) tg_model_freeze(r->m, r->p[i]);
    }
    tg_train_spec spec = {.model = r->m, .loss = case_loss, .user = r, .optim = {.kind = TG_OPT_NONE},
                          .seed = seed, .backend = be, .threads = 1};
    return tg_session_new(&spec, &r->s);
}

/* Uploads the current operand values, runs one step, returns the loss. */
static float case_eval(case_run *r) {
    for (int i = 0; i < r->c->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        tg_session_set_param(r->s, name, r->x[i], r->nx[i]);
    }
    float loss = NAN;
    if (tg_session_step(r->s, NULL, 0, &loss) != TG_OK) return NAN;
    return loss;
}

static void case_close(case_run *r) {
    tg_session_free(r->s);
    tg_model_free(r->m);
    for (int i = 0; i < 4; i++) free(r->x[i]);
    free(r->R);
    memset(r, 0, sizeof *r);
}
#endif
