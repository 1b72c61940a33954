/* The small model the checkpoint fuzzer loads into and its seeds are saved
 * from: Linear(3, 2) + MSE, Adam. */
#ifndef FUZZ_MODEL_H
#define FUZZ_MODEL_H
#include "tensorgrad.h"

#define FUZZ_NP 8 /* l.W [3,2] + l.b [2] */
static tg_linear fuzz_l;
static tg_tensor fuzz_loss(tg_graph *g, void *u) {
    (void)u;
    return tg_mse(tg_linear_fwd(g, &fuzz_l, tg_input(g, "x")), tg_input(g, "y"));
}

static tg_session *fuzz_session(void) {
    tg_model *m = tg_model_new(); /* kept for the process's life */
    fuzz_l = tg_linear_new(m, "l", 3, 2, true);
    static const tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(4, 3)}, {"y", TG_F32, TG_SHAPE(4, 2)}};
    tg_train_spec spec = {.model = m, .loss = fuzz_loss, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_warmup(1e-2f, 3, NULL)), .threads = 1};
    tg_session *s = NULL;
    return tg_session_new(&spec, &s) == TG_OK ? s : NULL;
}

static void fuzz_params(tg_session *s, float *p) {
    tg_session_get_param(s, "l.W", p, 6);
    tg_session_get_param(s, "l.b", p + 6, 2);
}
#endif
