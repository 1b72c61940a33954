/* The training output every example shares: the library's progress line, the
 * --log CSV (a row per step, or per --log-every steps) and the --plot loss curve. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "examples.h"

int ex_run_start(ex_run *r, const tg_example_opts *o, int64_t steps, int64_t batch, const char *metric) {
    return ex_run_start2(r, o, steps, batch, metric, NULL);
}

int ex_run_start2(ex_run *r, const tg_example_opts *o, int64_t steps, int64_t batch, const char *metric,
                  const char *metric2) {
    *r = (ex_run){.prog = {.total = steps, .batch = batch}, .plot = o->plot, .metric = metric, .metric2 = metric2,
                  .quiet = o->quiet, .log_every = o->log || o->plot ? (o->log_every > 0 ? o->log_every : 1) : 0};
    r->curve.metric = metric;
    r->curve.metric2 = metric2;
    if (o->log) {
        r->csv = fopen(o->log, "w");
        if (!r->csv) {
            fprintf(stderr, "tg: cannot create %s\n", o->log);
            return 1;
        }
        fprintf(r->csv, "step,loss,lr,time_s,%s%s%s\n", metric ? metric : "eval", metric2 ? "," : "", metric2 ? metric2 : "");
    }
    tg_progress_start(&r->prog);
    r->t0 = ex_now();
    return 0;
}

static bool logged(const ex_run *r, int64_t step) {
    return r->log_every > 0 && (step % r->log_every == 0 || step == 1 || step == r->prog.total);
}

bool ex_run_due(const ex_run *r, int64_t step) { return tg_progress_due(&r->prog, step) || logged(r, step); }

static bool grow(void **p, int *cap, int n, size_t size) {
    if (n < *cap) return true;
    int c = *cap ? 2 * *cap : 64;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return false;
    *p = q, *cap = c;
    return true;
}

void ex_run_step(ex_run *r, int64_t step, float loss, float lr, const double *eval) {
    ex_run_step2(r, step, loss, lr, eval, NULL);
}

void ex_run_step2(ex_run *r, int64_t step, float loss, float lr, const double *eval, const double *eval2) {
    char extra[128] = "";
    if (eval && eval2 && r->metric2)
        snprintf(extra, sizeof extra, "%s %.4f  %s %.4f", r->metric2, *eval2, r->metric ? r->metric : "eval", *eval);
    else if (eval) snprintf(extra, sizeof extra, "%s %.4f", r->metric ? r->metric : "eval", *eval);
    if (!r->quiet && (eval || tg_progress_due(&r->prog, step))) tg_progress_update(&r->prog, step, loss, extra);
    if (!eval && !logged(r, step)) return;
    if (r->csv) {
        fprintf(r->csv, "%lld,%.9g,%.7g,%.4f,", (long long)step, loss, lr, ex_now() - r->t0);
        if (eval) fprintf(r->csv, "%.9g", *eval);
        if (r->metric2) fputc(',', r->csv);
        if (r->metric2 && eval && eval2) fprintf(r->csv, "%.9g", *eval2);
        fputc('\n', r->csv);
    }
    ex_curve *c = &r->curve;
    int cap = c->cap;
    if (r->plot && grow((void **)&c->step, &cap, c->n, sizeof *c->step) &&
        grow((void **)&c->loss, &c->cap, c->n, sizeof *c->loss)) {
        c->step[c->n] = step, c->loss[c->n++] = loss;
    }
    cap = c->cap_eval;
    if (r->plot && eval && grow((void **)&c->eval_step, &cap, c->n_eval, sizeof *c->eval_step) &&
        (!r->metric2 || grow((void **)&c->eval2, &c->cap_eval2, c->n_eval, sizeof *c->eval2)) &&
        grow((void **)&c->eval, &c->cap_eval, c->n_eval, sizeof *c->eval)) {
        c->eval_step[c->n_eval] = step, c->eval[c->n_eval] = *eval;
        if (r->metric2) c->eval2[c->n_eval] = eval2 ? *eval2 : NAN;
        c->n_eval++;
    }
}

int ex_run_end(ex_run *r) {
    int rc = 0;
    if (!r->quiet) tg_progress_end(&r->prog);
    if (r->csv && fclose(r->csv) != 0) {
        fprintf(stderr, "tg: error writing the --log CSV\n");
        rc = 1;
    }
    r->csv = NULL;
    if (r->plot && ex_plot_write(r->plot, &r->curve)) rc = 1;
    r->plot = NULL; /* a second call (an error path's clean-up) writes nothing */
    free(r->curve.step), free(r->curve.loss), free(r->curve.eval_step), free(r->curve.eval), free(r->curve.eval2);
    r->curve = (ex_curve){0};
    return rc;
}

bool ex_compile_only(const tg_example_opts *o, const char *name, const tg_train_spec *spec, const tg_session *s, int *rc) {
    if (o->plan) {
        *rc = ex_plan_report(name, s, o->backend, o->plan);
        return true;
    }
    if (!o->graph) return false;
    tg_status st;
    if (o->graph_compiled) {
        st = tg_session_dot(s, o->graph);
    } else {
        /* The traced forward alone: the inputs as the compile declares them, then the loss. */
        tg_graph *g = tg_graph_new(spec->model);
        for (int i = 0; g && i < spec->n_inputs; i++)
            tg_input_new(g, spec->inputs[i].name, spec->inputs[i].dtype, spec->inputs[i].shape);
        if (g) spec->loss(g, spec->user);
        st = !g ? TG_ERR_NOMEM : tg_graph_status(g) != TG_OK ? tg_graph_status(g) : tg_graph_dot(g, o->graph);
        if (g && tg_graph_status(g) != TG_OK) fprintf(stderr, "error: %s\n", tg_graph_error(g));
        else if (st != TG_OK) fprintf(stderr, "error: %s\n", tg_last_error());
        tg_graph_free(g);
        *rc = st == TG_OK ? 0 : 1;
        return true;
    }
    if (st != TG_OK) fprintf(stderr, "error: %s\n", tg_last_error());
    *rc = st == TG_OK ? 0 : 1;
    return true;
}
