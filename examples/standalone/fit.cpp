// tensorgrad from C++17: an MLP fits y = x^2 on [-1, 1], then a forward
// session that shares its params predicts a few points.
//   c++ -std=c++17 fit.cpp $(pkg-config --cflags --libs tensorgrad)
//
// What differs from C: specs are zero-initialized and filled field by field
// (designated initializers are C++20), feeds go in a named array (C++ has
// no compound literals), and the loss is a captureless lambda.
#include <cmath>
#include <cstdio>
#include <vector>

#include <tensorgrad.h>

namespace {

struct Net {
    tg_linear l1, l2;
};

tg_tensor predict(tg_graph *g, Net *net) { // x [B, 1] -> [B, 1]
    tg_tensor h = tg_relu(tg_linear_fwd(g, &net->l1, tg_input(g, "x")));
    return tg_linear_fwd(g, &net->l2, h);
}

int fail(const char *what) {
    std::fprintf(stderr, "%s: %s\n", what, tg_last_error());
    return 1;
}

} // namespace

int main() {
    const int n = 64;
    tg_model *model = tg_model_new();
    Net net{tg_linear_new(model, "l1", 1, 32, true), tg_linear_new(model, "l2", 32, 1, true)};

    tg_input_decl inputs[] = {{"x", TG_F32, TG_SHAPE(n, 1)}, {"y", TG_F32, TG_SHAPE(n, 1)}};
    tg_train_spec spec{};
    spec.model = model;
    spec.loss = [](tg_graph *g, void *user) { return tg_mse(predict(g, static_cast<Net *>(user)), tg_input(g, "y")); };
    spec.user = &net;
    spec.inputs = inputs;
    spec.n_inputs = 2;
    spec.optim = tg_adam(tg_lr_constant(1e-2f));
    tg_session *session = nullptr;
    if (tg_session_new(&spec, &session) != TG_OK) return fail("tg_session_new");

    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; i++) x[i] = i / 32.0f - 1, y[i] = x[i] * x[i];
    tg_feed feeds[] = {TG_FEED("x", x.data(), x.size()), TG_FEED("y", y.data(), y.size())};
    float loss = 0;
    for (int step = 0; step < 500; step++)
        if (tg_session_step(session, feeds, 2, &loss) != TG_OK) return fail("tg_session_step");
    std::printf("loss %g\n", loss);

    // Inference: any batch size, sharing the trained params.
    tg_input_decl x_only[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1)}};
    tg_forward_spec fspec{};
    fspec.fn = [](tg_graph *g, void *user) { return predict(g, static_cast<Net *>(user)); };
    fspec.user = &net;
    fspec.inputs = x_only;
    fspec.n_inputs = 1;
    tg_forward *forward = nullptr;
    if (tg_forward_attach(session, &fspec, &forward) != TG_OK) return fail("tg_forward_attach");
    std::vector<float> at{-0.5f, 0.0f, 0.75f}, got(at.size());
    tg_feed query[] = {TG_FEED("x", at.data(), at.size())};
    if (tg_forward_run(forward, static_cast<int64_t>(at.size()), query, 1) != TG_OK ||
        tg_forward_output(forward, got.data(), static_cast<int64_t>(got.size())) != TG_OK)
        return fail("tg_forward_run");
    for (size_t i = 0; i < at.size(); i++) std::printf("f(%.2f) = %.3f (x^2 = %.3f)\n", at[i], got[i], at[i] * at[i]);

    tg_forward_free(forward);
    tg_session_free(session);
    tg_model_free(model);
    return loss < 1e-2f ? 0 : 1;
}
