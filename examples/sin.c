/* The sin MLP: fit y = sin(x) on [-pi, pi] with a 1-64-64-1 ReLU network,
 * batch 256 (--batch), MSE loss, Adam 5e-3 (--lr). Each step draws a fresh batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "examples.h"
#include "sin.h"

int example_sin(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 2000, B = o->batch > 0 ? o->batch : SIN_B, first, b = ex_shard(o, B, &first);
    if (!b) return 2;
    tg_model *m = tg_model_new();
    sin_net net = sin_net_new(m, 64);
    tg_input_decl inputs[] = {{"x", TG_F32, TG_SHAPE(b, 1)}, {"y", TG_F32, TG_SHAPE(b, 1)}};
    tg_train_spec spec = {.model = m, .loss = sin_loss, .user = &net, .inputs = inputs, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(ex_lr(o, 5e-3f))), .seed = o->seed, .backend = o->backend,
                          .threads = o->threads, .comm = o->comm};
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tg_model_free(m);
        return 1;
    }
    int rc;
    if (ex_compile_only(o, "sin_mlp", &spec, s, &rc)) {
        tg_session_free(s);
        tg_model_free(m);
        return rc;
    }
    float *xs = malloc((size_t)B * sizeof *xs), *ys = malloc((size_t)B * sizeof *ys);
    uint64_t rng = o->seed * 2654435761u + 1;
    if (!xs || !ys) {
        fprintf(stderr, "error: out of memory\n");
        free(xs), free(ys);
        tg_session_free(s);
        tg_model_free(m);
        return 1;
    }
    if (o->bench > 0) { /* one fixed batch, as the PyTorch peer times it */
        for (int64_t i = 0; i < B; i++) ys[i] = sinf(xs[i] = (float)((ex_uniform(&rng) * 2.0 - 1.0) * EX_PI));
        tg_feed feeds[] = {TG_FEED("x", xs + first, b), TG_FEED("y", ys + first, b)};
        int rc = ex_bench_loop("sin_mlp", s, o->backend, feeds, 2, o->bench);
        free(xs), free(ys);
        tg_session_free(s);
        tg_model_free(m);
        return rc;
    }
    float loss = 0;
    ex_run run;
    if (ex_run_start(&run, o, steps, B, NULL)) {
        free(xs), free(ys);
        tg_session_free(s);
        tg_model_free(m);
        return 1;
    }
    for (int64_t step = 1; step <= steps; step++) {
        for (int64_t i = 0; i < B; i++) {
            xs[i] = (float)((ex_uniform(&rng) * 2.0 - 1.0) * EX_PI);
            ys[i] = sinf(xs[i]);
        }
        tg_feed feeds[] = {TG_FEED("x", xs + first, b), TG_FEED("y", ys + first, b)};
        if (tg_session_step(s, feeds, 2, &loss) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            ex_run_end(&run);
            free(xs), free(ys);
            tg_session_free(s);
            tg_model_free(m);
            return 1;
        }
        if (ex_run_due(&run, step)) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    rc = ex_run_end(&run);
    ex_final_loss(o, &run, s, loss);
    free(xs), free(ys);
    tg_session_free(s);
    tg_model_free(m);
    return rc ? rc : ex_target("final loss", loss, "<", 1e-3);
}
