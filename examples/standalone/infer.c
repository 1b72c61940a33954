/* Inference from a checkpoint: loads what classifier.c saved and sorts a
 * few points, as a program that only uses a trained model would.
 *   ./infer [CHECKPOINT]   (default classifier.ckpt) */
#include <stdio.h>

#include "spirals.h"

static int fail(const char *what) {
    fprintf(stderr, "infer: %s: %s\n", what, tg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "classifier.ckpt";
    tg_model *m = tg_model_new();
    spiral_net net = spiral_net_new(m);
    /* A full checkpoint (tg_session_save) loads into a training session of
     * the same model and optimizer; a forward session attached to it runs
     * the model on the loaded params. */
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(SPIRAL_POINTS, 2)}, {"label", TG_I32, TG_SHAPE(SPIRAL_POINTS)}};
    tg_train_spec spec = spiral_spec(m, &net, in, 1);
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) return fail("tg_session_new");
    if (tg_session_load(s, path) != TG_OK) return fail("tg_session_load");
    tg_input_decl x_only[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    tg_forward_spec fspec = {.fn = spiral_class, .user = &net, .inputs = x_only, .n_inputs = 1};
    tg_forward *f;
    if (tg_forward_attach(s, &fspec, &f) != TG_OK) return fail("tg_forward_attach");
    printf("%s: trained %lld steps\n", path, (long long)tg_session_step_count(s));

    int right = 0, n = 8;
    for (int i = 0; i < n; i++) { /* one point at a time: batch 1 */
        float xy[2];
        int32_t label, got;
        spiral_point(i * 37 % SPIRAL_POINTS, &xy[0], &xy[1], &label);
        tg_feed feed[] = {TG_FEED("x", xy, 2)};
        if (tg_forward_run(f, 1, feed, 1) != TG_OK || tg_forward_output(f, &got, 1) != TG_OK) return fail("tg_forward_run");
        printf("  (%+.3f, %+.3f) -> arm %d%s\n", xy[0], xy[1], got, got == label ? "" : "  (wrong)");
        right += got == label;
    }
    printf("%d of %d right\n", right, n);
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    return 0;
}
