/* With no WebGPU library to load, the backend reports "unavailable" as
 * TG_ERR_BACKEND (never a crash), and the CPU backend is unaffected. Runs in
 * its own process: the runtime tries to load WebGPU once per process. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "check.h"

static tg_tensor loss(tg_graph *g, void *user) {
    (void)user;
    return tg_sum(tg_mul(tg_use(g, 0), tg_use(g, 0)), TG_ALL, false);
}

static tg_status open_session(tg_backend be) {
    tg_model *m = tg_model_new();
    tg_model_param(m, "w", TG_SHAPE(3), tg_init_ones());
    tg_train_spec spec = {.model = m, .loss = loss, .optim = tg_adam(tg_lr_constant(0.1f)), .backend = be};
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    float l = 0;
    if (st == TG_OK) st = tg_session_step(s, NULL, 0, &l);
    tg_session_free(s);
    tg_model_free(m);
    return st;
}

int main(void) {
    setenv("TG_WEBGPU_LIB", "/nonexistent/libwebgpu_dawn.so", 1);
    tg_webgpu_adapter_info info;
    CHECK_ERR(tg_webgpu_info(&info), TG_ERR_BACKEND, "webgpu: unavailable: cannot load TG_WEBGPU_LIB=/nonexistent");
    CHECK_ERR(open_session(TG_BACKEND_WEBGPU), TG_ERR_BACKEND, "unavailable");
    CHECK_ERR(open_session(TG_BACKEND_WEBGPU), TG_ERR_BACKEND, "unavailable"); /* the reason is kept */
    CHECK_OK(open_session(TG_BACKEND_CPU));
    return check_summary("test_webgpu_missing");
}
