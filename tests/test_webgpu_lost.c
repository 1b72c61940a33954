/* A lost device (here: destroyed, as a driver reset would lose it) turns
 * every later WebGPU call into TG_ERR_BACKEND naming the loss, never a crash.
 * Its own process: the device is shared by the whole process. */
#include "check.h"
#include "webgpu/webgpu.h"

static tg_tensor loss(tg_graph *g, void *user) {
    (void)user;
    return tg_sum(tg_mul(tg_use(g, 0), tg_input(g, "x")), TG_ALL, false);
}

static tg_status new_session(tg_model *m, tg_session **s) {
    tg_input_decl in = {"x", TG_F32, TG_SHAPE(3)};
    tg_train_spec spec = {.model = m, .loss = loss, .inputs = &in, .n_inputs = 1,
                          .optim = tg_sgd(tg_lr_constant(0.1f), 0, false, 0), .backend = TG_BACKEND_WEBGPU};
    return tg_session_new(&spec, s);
}

int main(void) {
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        printf("test_webgpu_lost: skipped: %s\n", tg_last_error()); /* test_webgpu fails CI for it */
        return check_summary("test_webgpu_lost");
    }
    tg_model *m = tg_model_new();
    tg_model_param(m, "w", TG_SHAPE(3), tg_init_ones());
    tg_session *s = NULL;
    CHECK_OK(new_session(m, &s));
    float x[3] = {1, 2, 3}, l = 0, w[3];
    tg_feed f = TG_FEED("x", x, 3);
    CHECK_OK(tg_session_step(s, &f, 1, &l));
    CHECK(l == 6.0f, "loss %g before the loss of the device", l);
    tg_wgpu_test_lose_device();
    CHECK_ERR(tg_session_step(s, &f, 1, &l), TG_ERR_BACKEND, "lost");
    CHECK_ERR(tg_session_get_param(s, "w", w, 3), TG_ERR_BACKEND, "lost");
    tg_session *s2 = NULL;
    CHECK_ERR(new_session(m, &s2), TG_ERR_BACKEND, "lost");
    tg_session_free(s2);
    tg_session_free(s);
    tg_model_free(m);
    return check_summary("test_webgpu_lost");
}
