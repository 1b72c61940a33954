/* Inference from a checkpoint: loads the params of what classifier.c saved
 * into a forward session and sorts a few points, as a program that only
 * uses a trained model would: no loss, no optimizer, no training session.
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
    /* A forward session of its own, from the model alone: it takes the
     * params of a full checkpoint (tg_session_save) and leaves the
     * optimizer state in the file. */
    tg_input_decl x_only[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 2)}};
    tg_forward_spec fspec = {.fn = spiral_class, .user = &net, .inputs = x_only, .n_inputs = 1, .model = m};
    tg_forward *f;
    if (tg_forward_new(&fspec, &f) != TG_OK) return fail("tg_forward_new");
    if (tg_forward_load_params(f, path) != TG_OK) return fail("tg_forward_load_params");
    printf("%s: params loaded into a forward session\n", path);

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
    tg_model_free(m);
    return 0;
}
