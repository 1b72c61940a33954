/* A classifier: an MLP learns to tell apart the points of two interleaved
 * spirals, then a forward session sharing its params measures how many it
 * sorts right, and a checkpoint is saved for infer.c.
 *   ./classifier [STEPS [CHECKPOINT]]   (default 1000 steps, classifier.ckpt) */
#include <stdio.h>
#include <stdlib.h>

#include "spirals.h"

static int fail(const char *what) {
    fprintf(stderr, "classifier: %s: %s\n", what, tg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int64_t steps = argc > 1 ? atoll(argv[1]) : 1000;
    const char *path = argc > 2 ? argv[2] : "classifier.ckpt";
    if (steps < 1) {
        fprintf(stderr, "usage: classifier [STEPS [CHECKPOINT]]\n");
        return 2;
    }
    static float xy[SPIRAL_POINTS * 2];
    static int32_t label[SPIRAL_POINTS];
    for (int i = 0; i < SPIRAL_POINTS; i++) spiral_point(i, &xy[2 * i], &xy[2 * i + 1], &label[i]);

    tg_model *m = tg_model_new();
    spiral_net net = spiral_net_new(m);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(SPIRAL_POINTS, 2)}, {"label", TG_I32, TG_SHAPE(SPIRAL_POINTS)}};
    tg_train_spec spec = spiral_spec(m, &net, in, steps);
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) return fail("tg_session_new");

    /* Every point each step; the progress line every tenth of the run. */
    tg_progress p = {.total = steps, .batch = SPIRAL_POINTS};
    tg_progress_start(&p);
    float loss = 0;
    for (int64_t step = 1; step <= steps; step++) {
        bool due = tg_progress_due(&p, step);
        tg_feed feeds[] = {TG_FEED("x", xy, SPIRAL_POINTS * 2), TG_FEED("label", label, SPIRAL_POINTS)};
        if (tg_session_step(s, feeds, 2, due ? &loss : NULL) != TG_OK) return fail("tg_session_step");
        if (due) tg_progress_update(&p, step, loss, NULL);
    }
    tg_progress_end(&p);

    /* Accuracy through a forward session on the trained params: i32 classes out. */
    tg_input_decl x_only[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    tg_forward_spec fspec = {.fn = spiral_class, .user = &net, .inputs = x_only, .n_inputs = 1};
    tg_forward *f;
    static int32_t got[SPIRAL_POINTS];
    if (tg_forward_attach(s, &fspec, &f) != TG_OK) return fail("tg_forward_attach");
    tg_feed xs[] = {TG_FEED("x", xy, SPIRAL_POINTS * 2)};
    if (tg_forward_run(f, SPIRAL_POINTS, xs, 1) != TG_OK || tg_forward_output(f, got, SPIRAL_POINTS) != TG_OK)
        return fail("tg_forward_run");
    int right = 0;
    for (int i = 0; i < SPIRAL_POINTS; i++) right += got[i] == label[i];
    printf("loss %.4f, accuracy %.4f on the %d points\n", loss, (double)right / SPIRAL_POINTS, SPIRAL_POINTS);

    /* Params, optimizer state and step: training can resume from it, infer.c reads it. */
    if (tg_session_save(s, path) != TG_OK) return fail("tg_session_save");
    printf("saved %s\n", path);
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    return 0;
}
