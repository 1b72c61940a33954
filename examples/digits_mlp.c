/* Upstream's digit-canvas MLP on the 8x8 digits: 64 -> HIDDEN relu, dropout
 * 0.1 -> 10, cross-entropy, AdamW (weight decay 0.01, clip 1.0), batch 64.
 * Dropout is in the training function only; the forward session that
 * measures accuracy is a separate function without it (no train/eval mode
 * flag).
 *
 * Like the upstream sample, which swaps in a model of another hidden size
 * mid-run, the run trains a first model of FIRST_HIDDEN units for half the
 * steps, reports its accuracy, then swaps a fresh 64-unit model into the
 * same session (tg_session_replace_model) and trains it for the full run. Ends with `test_accuracy=<value>` of the
 * second model on the fixed test split (exits 2 below 0.95). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define B 64
#define FIRST_HIDDEN 32
#define HIDDEN 64
#define CLASSES 10
#define DROPOUT 0.1f
#define TARGET_ACC 0.95

typedef struct {
    tg_linear l1, l2;
} mlp;

static tg_tensor mlp_fwd(tg_graph *g, const mlp *n, tg_tensor x, bool train) {
    tg_tensor h = tg_relu(tg_linear_fwd(g, &n->l1, x));
    if (train) h = tg_dropout(h, DROPOUT);
    return tg_linear_fwd(g, &n->l2, h);
}
static tg_tensor mlp_loss(tg_graph *g, void *u) {
    return tg_cross_entropy(mlp_fwd(g, u, tg_input(g, "x"), true), tg_input(g, "y"), TG_REDUCTION_MEAN);
}
static tg_tensor mlp_predict(tg_graph *g, void *u) { return tg_argmax(mlp_fwd(g, u, tg_input(g, "x"), false), -1, false); }

/* A model of `hidden` units, its training session and its accuracy probe. */
typedef struct {
    tg_model *m;
    mlp net;
    tg_train_spec spec;
    tg_session *s;
    tg_forward *f;
} trainer;

/* --dp: this rank's rows [row0, row0 + rows) of each batch of B */
static int64_t rows = B, row0 = 0;
static tg_input_decl inputs[] = {{"x", TG_F32, {2, {B, 64}}}, {"y", TG_I32, {1, {B}}}};
static const tg_input_decl probe_in[] = {{"x", TG_F32, {2, {TG_BATCH, 64}}}};

static void trainer_free(trainer *t) {
    tg_forward_free(t->f);
    tg_session_free(t->s);
    tg_model_free(t->m);
    memset(t, 0, sizeof *t);
}

static tg_status trainer_new(trainer *t, int64_t hidden, int64_t steps, const tg_example_opts *o) {
    memset(t, 0, sizeof *t);
    t->m = tg_model_new();
    t->net = (mlp){tg_linear_new(t->m, "l1", 64, hidden, true), tg_linear_new(t->m, "l2", hidden, CLASSES, true)};
    t->spec = (tg_train_spec){.model = t->m, .loss = mlp_loss, .user = &t->net, .inputs = inputs, .n_inputs = 2,
                              .optim = tg_adamw(tg_lr_cosine(3e-3f, 1e-4f, steps), 0.01f), .seed = o->seed,
                              .backend = o->backend, .threads = o->threads, .comm = o->comm};
    t->spec.optim.clip_grad_norm = 1.0f;
    tg_forward_spec pspec = {.fn = mlp_predict, .user = &t->net, .inputs = probe_in, .n_inputs = 1};
    tg_status st = tg_session_new(&t->spec, &t->s);
    if (st == TG_OK) st = tg_forward_attach(t->s, &pspec, &t->f);
    return st;
}

/* The restart: a fresh model of `hidden` units swapped into the same
 * session (tg_session_replace_model), trained from step 1 with its own
 * schedule; the attached probe is recompiled for it. On failure the
 * session keeps the old model. */
static tg_status restart(trainer *t, int64_t hidden, int64_t steps) {
    tg_model *m = tg_model_new();
    mlp net = {tg_linear_new(m, "l1", 64, hidden, true), tg_linear_new(m, "l2", hidden, CLASSES, true)};
    tg_optim opt = tg_adamw(tg_lr_cosine(3e-3f, 1e-4f, steps), 0.01f);
    opt.clip_grad_norm = 1.0f;
    mlp old_net = t->net;
    t->net = net; /* the loss and the probe read the layers through &t->net */
    tg_status st = tg_session_replace_model(t->s, &(tg_replace_spec){.model = m, .optim = &opt});
    if (st != TG_OK) {
        t->net = old_net;
        tg_model_free(m);
        return st;
    }
    tg_model_free(t->m);
    t->m = m;
    t->spec.model = m;
    t->spec.optim = opt;
    return TG_OK;
}

/* Fraction of the n images [n, 64] whose predicted class is their label; -1 on an error. */
static double accuracy(tg_forward *f, const float *x, const int32_t *y, int n) {
    int32_t *pred = malloc(sizeof(int32_t) * (size_t)n);
    tg_feed fx = TG_FEED("x", x, (int64_t)n * 64);
    int right = 0;
    if (!pred || tg_forward_run(f, n, &fx, 1) != TG_OK || tg_forward_output(f, pred, n) != TG_OK) right = -1;
    for (int i = 0; right >= 0 && i < n; i++) right += pred[i] == y[i];
    free(pred);
    return right < 0 ? -1.0 : (double)right / n;
}

/* `steps` steps on batches that walk a per-epoch shuffle of the training images. */
static tg_status train(trainer *t, const ex_digits *d, int64_t steps, uint64_t *rng, ex_run *run, int64_t at,
                       float *loss) {
    static float xb[B * 64];
    static int32_t yb[B];
    int *order = malloc(sizeof(int) * (size_t)d->n_train), pos = d->n_train;
    if (!order) return TG_ERR_NOMEM;
    for (int i = 0; i < d->n_train; i++) order[i] = i;
    tg_status st = TG_OK;
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        for (int b = 0; b < B; b++) {
            if (pos == d->n_train) {
                for (int i = d->n_train - 1; i > 0; i--) {
                    int j = (int)(ex_rand(rng) % (uint64_t)(i + 1)), tmp = order[i];
                    order[i] = order[j], order[j] = tmp;
                }
                pos = 0;
            }
            int k = order[pos++];
            memcpy(xb + b * 64, d->x + (size_t)k * 64, sizeof(float) * 64);
            yb[b] = d->y[k];
        }
        tg_feed feeds[] = {TG_FEED("x", xb + row0 * 64, rows * 64), TG_FEED("y", yb + row0, rows)};
        st = tg_session_step(t->s, feeds, 2, loss);
        if (st == TG_OK && ex_run_due(run, at + step) && at + step < run->prog.total) /* the last line carries the accuracy */
            ex_run_step(run, at + step, *loss, tg_lr_at(&t->spec.optim.lr, step), NULL);
    }
    free(order);
    return st;
}

int example_digits_mlp(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 1500, first = steps / 2;
    if (!(rows = ex_shard(o, B, &row0))) return 2;
    inputs[0].shape.d[0] = inputs[1].shape.d[0] = rows;
    ex_digits d = {0};
    trainer t;
    tg_status st = trainer_new(&t, FIRST_HIDDEN, first > 0 ? first : 1, o);
    int rc = 0;
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        trainer_free(&t);
        return 1;
    }
    if (ex_compile_only(o, "digits_mlp", &t.spec, t.s, &rc)) {
        trainer_free(&t);
        return rc;
    }
    if (ex_digits_load(&d)) {
        trainer_free(&t);
        return 1;
    }
    const float *test_x = d.x + (size_t)d.n_train * 64;
    const int32_t *test_y = d.y + d.n_train;
    if (!o->quiet)
        printf("digits_mlp: 64-%d-10 for %lld steps, then a fresh 64-%d-10 for %lld; %d train / %d test images\n",
               FIRST_HIDDEN, (long long)first, HIDDEN, (long long)steps, d.n_train, d.n_test);
    ex_run run;
    if (ex_run_start(&run, o, first + steps, B, "test_accuracy")) {
        trainer_free(&t);
        ex_digits_free(&d);
        return 1;
    }
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 23;
    float loss = 0;
    double acc = 0;
    st = train(&t, &d, first, &rng, &run, 0, &loss);
    if (st == TG_OK && (acc = accuracy(t.f, test_x, test_y, d.n_test)) < 0) st = TG_ERR_STATE;
    if (st == TG_OK) {
        ex_run_step(&run, first, loss, tg_lr_at(&t.spec.optim.lr, first), &acc);
        if (!o->quiet) printf("64-%d-10: test accuracy %.4f; restarting from a fresh 64-%d-10\n", FIRST_HIDDEN, acc, HIDDEN);
        st = restart(&t, HIDDEN, steps);
    }
    if (st == TG_OK) st = train(&t, &d, steps, &rng, &run, first, &loss);
    if (st == TG_OK) ex_final_loss(o, &run, t.s, loss);
    if (st == TG_OK && (acc = accuracy(t.f, test_x, test_y, d.n_test)) < 0) st = TG_ERR_STATE;
    if (st == TG_OK) ex_run_step(&run, first + steps, loss, tg_lr_at(&t.spec.optim.lr, steps), &acc);
    if (ex_run_end(&run)) rc = 1;
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
    } else {
        printf("test_accuracy=%.4f\n", acc);
        if (rc == 0) rc = ex_target("test_accuracy", acc, ">=", TARGET_ACC);
    }
    trainer_free(&t);
    ex_digits_free(&d);
    return rc;
}
