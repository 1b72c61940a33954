/* Loads converted PyTorch weights into the 1-64-64-1 ReLU MLP (params l1, l2,
 * l3, as nn.Linear modules of those names) and prints its outputs for the
 * inputs given, one per line, for tests/test_torch_convert.sh to compare.
 * Usage: mlp WEIGHTS.safetensors x1 x2 ... */
#include <stdio.h>
#include <stdlib.h>

#include "tensorgrad.h"

typedef struct {
    tg_linear l1, l2, l3;
} mlp;

static tg_tensor forward(tg_graph *g, void *user) { /* x [N,1] -> y [N,1] */
    mlp *n = user;
    tg_tensor h = tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x")));
    h = tg_relu(tg_linear_fwd(g, &n->l2, h));
    return tg_linear_fwd(g, &n->l3, h);
}

static tg_tensor loss(tg_graph *g, void *user) { return tg_mse(forward(g, user), tg_input(g, "y")); }

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int n = argc - 2;
    tg_model *m = tg_model_new();
    mlp net = {tg_linear_new(m, "l1", 1, 64, true), tg_linear_new(m, "l2", 64, 64, true),
               tg_linear_new(m, "l3", 64, 1, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(1, 1)}, {"y", TG_F32, TG_SHAPE(1, 1)}};
    tg_train_spec spec = {.model = m, .loss = loss, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(1e-3f))};
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1)}};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    float *x = calloc((size_t)n, sizeof *x), *y = calloc((size_t)n, sizeof *y);
    tg_status st = x && y ? tg_session_new(&spec, &s) : TG_ERR_NOMEM;
    if (st == TG_OK) st = tg_forward_attach(s, &(tg_forward_spec){.fn = forward, .user = &net, .inputs = fin, .n_inputs = 1}, &f);
    if (st == TG_OK) st = tg_session_load_params(s, argv[1]);
    for (int i = 0; i < n; i++) x[i] = strtof(argv[i + 2], NULL);
    if (st == TG_OK) st = tg_forward_run(f, n, (tg_feed[]){TG_FEED("x", x, n)}, 1);
    if (st == TG_OK) st = tg_forward_output(f, y, n);
    if (st != TG_OK) fprintf(stderr, "error: %s\n", tg_last_error());
    for (int i = 0; st == TG_OK && i < n; i++) printf("%.9g\n", y[i]);
    free(x), free(y);
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    return st == TG_OK ? 0 : 1;
}
