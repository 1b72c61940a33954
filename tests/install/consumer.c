/* A program built against the installed tree: it links, the header and the
 * library agree on the version, and a tiny model trains. */
#include <stdio.h>
#include <string.h>

#include <tensorgrad.h>

static tg_tensor loss_fn(tg_graph *g, void *user) { /* x [8,1] -> mse */
    tg_linear *l = user;
    return tg_mse(tg_linear_fwd(g, l, tg_input(g, "x")), tg_input(g, "y"));
}

int main(void) {
    if (strcmp(tg_version(), TG_VERSION_STRING) != 0) {
        printf("version mismatch: library %s, header %s\n", tg_version(), TG_VERSION_STRING);
        return 1;
    }
    tg_model *m = tg_model_new();
    tg_linear l = tg_linear_new(m, "l", 1, 1, true);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 1)}, {"y", TG_F32, TG_SHAPE(8, 1)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &l, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(5e-2f))};
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) {
        printf("error: %s\n", tg_last_error());
        return 1;
    }
    float x[8], y[8], loss = 0;
    for (int i = 0; i < 8; i++) x[i] = (float)i / 8, y[i] = 3 * x[i] + 1;
    for (int step = 0; step < 300; step++)
        if (tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 8), TG_FEED("y", y, 8)}, 2, &loss) != TG_OK) return 1;
    tg_session_free(s);
    tg_model_free(m);
    printf("tensorgrad %s loss %g\n", tg_version(), loss);
    return loss < 1e-2f ? 0 : 1;
}
