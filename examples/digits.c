/* A small CNN on the 8x8 handwritten digits: two conv + max-pool stages and
 * a linear head (upstream's MNIST CNN, scaled to 8x8 images; the model is
 * in digits_cnn.h), trained on cross-entropy.
 *
 * Batch 64, Adam with a cosine decay over 600 steps (27 epochs). The split is fixed (the last 20% of
 * one seeded shuffle); --seed changes the init and the batch order only. The
 * run ends with `test_accuracy=<value>` and exits 2 below the 0.97 target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits_cnn.h"
#include "examples.h"

#define B 64
#define CLASSES DIGITS_CLASSES

static tg_tensor digits_loss(tg_graph *g, void *user) {
    return tg_cross_entropy(digits_cnn_logits(g, user, tg_input(g, "x")), tg_input(g, "y"), TG_REDUCTION_MEAN);
}

static tg_tensor digits_predict(tg_graph *g, void *user) { return digits_cnn_logits(g, user, tg_input(g, "x")); }

/* Fraction of images [n, 64] whose largest logit is their label. */
static double accuracy(tg_forward *fwd, const float *x, const int32_t *y, int n) {
    float *lg = malloc(sizeof(float) * (size_t)n * CLASSES);
    int right = 0;
    tg_feed f = TG_FEED("x", x, (int64_t)n * 64);
    if (lg && tg_forward_run(fwd, n, &f, 1) == TG_OK && tg_forward_output(fwd, lg, (int64_t)n * CLASSES) == TG_OK) {
        for (int i = 0; i < n; i++) {
            int best = 0;
            for (int k = 1; k < CLASSES; k++)
                if (lg[i * CLASSES + k] > lg[i * CLASSES + best]) best = k;
            right += best == y[i];
        }
    } else {
        fprintf(stderr, "error: %s\n", tg_last_error());
        right = -1;
    }
    free(lg);
    return right < 0 ? -1.0 : (double)right / n;
}

int example_digits(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 600, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    ex_digits d;
    if (ex_digits_load(&d)) return 1;
    tg_model *m = tg_model_new();
    digits_cnn net = digits_cnn_new(m);
    tg_input_decl inputs[] = {{"x", TG_F32, TG_SHAPE(rows, 1, 8, 8)}, {"y", TG_I32, TG_SHAPE(rows)}};
    tg_train_spec spec = {.model = m, .loss = digits_loss, .user = &net, .inputs = inputs, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_cosine(ex_lr(o, 3e-3f), ex_lr_at(o, 3e-3f, 1e-4f), steps)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    tg_input_decl pin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1, 8, 8)}};
    tg_forward_spec pspec = {.fn = digits_predict, .user = &net, .inputs = pin, .n_inputs = 1};
    tg_session *s = NULL;
    tg_forward *fwd = NULL;
    if (tg_session_new(&spec, &s) != TG_OK || tg_forward_attach(s, &pspec, &fwd) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tg_session_free(s);
        tg_model_free(m);
        ex_digits_free(&d);
        return 1;
    }
    int rc = 0;
    if (ex_compile_only(o, "digits_cnn", &spec, s, &rc) || o->bench > 0) {
        /* bench: the first B training images as one fixed batch, as bench/digits_torch.py times it */
        tg_feed feeds[] = {TG_FEED("x", d.x + first * 64, rows * 64), TG_FEED("y", d.y + first, rows)};
        if (!o->graph && !o->plan) rc = ex_bench_loop("digits_cnn", s, o->backend, feeds, 2, o->bench);
        tg_forward_free(fwd);
        tg_session_free(s);
        tg_model_free(m);
        ex_digits_free(&d);
        return rc;
    }
    const float *test_x = d.x + (size_t)d.n_train * 64;
    const int32_t *test_y = d.y + d.n_train;
    if (!o->quiet)
        printf("digits CNN: %lld params, %d train / %d test images, batch %d, %lld steps\n",
               (long long)tg_model_numel(m), d.n_train, d.n_test, B, (long long)steps);

    /* Batches from tg_data: each epoch a shuffled order of the training
     * images drawn from the seed, its last partial batch left out. */
    tg_data_field fields[] = {{"x", d.x, TG_F32, 64}, {"y", d.y, TG_I32, 1}};
    tg_data_spec ds = {.fields = fields, .n_fields = 2, .n = d.n_train, .batch = B,
                       .seed = o->seed * 0x9e3779b97f4a7c15ull + 11};
    tg_data *data = NULL;
    if (tg_data_new(&ds, &data) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1, steps = 0;
    }
    float loss = 0;
    double t0 = ex_now(), acc = 0;
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "test_accuracy")) rc = 1, steps = 0;
    /* The test accuracy every 200 steps is for people and files; the last one is always computed. */
    bool watched = !o->quiet || o->log || o->plot;
    for (int64_t step = 1; step <= steps; step++) {
        tg_batch b;
        if (!tg_data_next(data, TG_SPLIT_TRAIN, &b)) tg_data_next(data, TG_SPLIT_TRAIN, &b); /* a new epoch */
        const float *xb = b.feeds[0].data;
        const int32_t *yb = b.feeds[1].data;
        tg_feed feeds[] = {TG_FEED("x", xb + first * 64, rows * 64), TG_FEED("y", yb + first, rows)};
        if (tg_session_step(s, feeds, 2, &loss) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            rc = 1;
            break;
        }
        bool eval = watched && step % 200 == 0 && step < steps;
        if (eval) acc = accuracy(fwd, test_x, test_y, d.n_test);
        if ((ex_run_due(&run, step) || eval) && step < steps)
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), eval ? &acc : NULL);
    }
    if (rc == 0) {
        ex_final_loss(o, &run, s, loss);
        acc = accuracy(fwd, test_x, test_y, d.n_test);
        if (acc < 0) rc = 1;
        else {
            ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &acc);
            if (ex_run_end(&run)) rc = 1;
            if (!o->quiet) printf("train time %.2fs (%.3f ms/step)\n", ex_now() - t0, (ex_now() - t0) * 1e3 / (double)steps);
            printf("test_accuracy=%.4f\n", acc);
            rc = rc ? rc : ex_target("test_accuracy", acc, ">=", 0.97);
        }
    }
    ex_run_end(&run); /* closes the CSV after an error; a no-op after the normal end */
    tg_data_free(data);
    tg_forward_free(fwd);
    tg_session_free(s);
    tg_model_free(m);
    ex_digits_free(&d);
    return rc;
}
