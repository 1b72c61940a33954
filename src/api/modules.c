/* Module helpers: param declarations with upstream's names and layouts, and
 * their forward functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

tg_init tg_api_layer_init(const tg_init *init, tg_decay d) {
    tg_init i = init ? *init : tg_init_randn(0.02f);
    if (d == TG_DECAY_OFF || d == TG_DECAY_ON) i.decay = d == TG_DECAY_ON;
    else if (d != TG_DECAY_DEFAULT) i.decay = 2; /* out of range: tg_model_param names the param */
    return i;
}

/* The name is built at its full length: cut to a fixed buffer, a long layer
 * name lost its suffix (a weight named without ".W", so a file's "<name>.W"
 * never matched) or gave W and b one name. */
tg_param tg_api_layer_param(tg_model *m, const char *name, const char *suffix, tg_shape s, tg_init init) {
    if (!name) name = "";
    size_t n = strlen(name) + strlen(suffix) + 1;
    char *full = malloc(n);
    if (full) snprintf(full, n, "%s%s", name, suffix);
    tg_param p = tg_model_param(m, full, s, init); /* out of memory: NULL, a declaration error */
    free(full);
    return p;
}

tg_linear tg_linear_new_opts(tg_model *m, const char *name, int64_t in, int64_t out, bool bias, tg_layer_opts o) {
    tg_linear l = {-1, -1, in, out};
    l.W = tg_api_layer_param(m, name, ".W", (tg_shape){2, {in, out}}, tg_api_layer_init(o.init, o.decay));
    if (bias) l.b = tg_api_layer_param(m, name, ".b", (tg_shape){1, {out}}, tg_init_zeros());
    return l;
}

tg_linear tg_linear_new(tg_model *m, const char *name, int64_t in, int64_t out, bool bias) {
    return tg_linear_new_opts(m, name, in, out, bias, (tg_layer_opts){0});
}

/* x [..., in] -> [..., out] */
tg_tensor tg_linear_fwd_at(tg_graph *g, const tg_linear *l, tg_tensor x, const char *file, int line) {
    if (!tg_ir_module_ok(g, l, "linear_fwd", file, line)) return (tg_tensor){g, -1};
    tg_tensor y = tg_matmul_at(x, tg_use_at(g, l->W, file, line), file, line);
    return l->b >= 0 ? tg_add_at(y, tg_use_at(g, l->b, file, line), file, line) : y;
}

/* Norm gains and biases start at ones and zeros, so the default rule in
 * model.c already keeps weight decay off them, as upstream does. */
tg_layernorm tg_layernorm_new_opts(tg_model *m, const char *name, int64_t dim, tg_layernorm_opts o) {
    tg_layernorm l = {-1, -1, dim, o.eps > 0 ? o.eps : 1e-5f};
    tg_init ones = tg_init_ones(), zeros = tg_init_zeros();
    l.g = tg_api_layer_param(m, name, ".g", (tg_shape){1, {dim}}, tg_api_layer_init(&ones, o.decay));
    if (!o.no_bias) l.b = tg_api_layer_param(m, name, ".b", (tg_shape){1, {dim}}, tg_api_layer_init(&zeros, o.decay));
    return l;
}

tg_layernorm tg_layernorm_new(tg_model *m, const char *name, int64_t dim) {
    return tg_layernorm_new_opts(m, name, dim, (tg_layernorm_opts){0});
}

/* x [..., dim] -> [..., dim]; without a bias the fused op adds a zeros
 * constant (computed once at compile, and no gradient goes to it). */
tg_tensor tg_layernorm_fwd_at(tg_graph *g, const tg_layernorm *l, tg_tensor x, const char *file, int line) {
    if (!tg_ir_module_ok(g, l, "layernorm_fwd", file, line)) return (tg_tensor){g, -1};
    tg_tensor gain = tg_use_at(g, l->g, file, line);
    tg_tensor b = l->b >= 0 ? tg_use_at(g, l->b, file, line) : tg_zeros_at(g, (tg_shape){1, {l->dim}}, file, line);
    return tg_layer_norm_at(x, gain, b, l->eps, file, line);
}

tg_rmsnorm tg_rmsnorm_new(tg_model *m, const char *name, int64_t dim) {
    tg_rmsnorm l = {-1, dim, 1e-6f};
    l.g = tg_api_layer_param(m, name, ".g", (tg_shape){1, {dim}}, tg_init_ones());
    return l;
}

/* x [..., dim] -> [..., dim] */
tg_tensor tg_rmsnorm_fwd_at(tg_graph *g, const tg_rmsnorm *l, tg_tensor x, const char *file, int line) {
    if (!tg_ir_module_ok(g, l, "rmsnorm_fwd", file, line)) return (tg_tensor){g, -1};
    return tg_rms_norm_at(x, tg_use_at(g, l->g, file, line), l->eps, file, line);
}

tg_groupnorm tg_groupnorm_new(tg_model *m, const char *name, int64_t groups, int64_t channels) {
    tg_groupnorm l = {-1, -1, groups, channels, 1e-5f};
    l.g = tg_api_layer_param(m, name, ".g", (tg_shape){1, {channels}}, tg_init_ones());
    l.b = tg_api_layer_param(m, name, ".b", (tg_shape){1, {channels}}, tg_init_zeros());
    return l;
}

/* x [N, channels, ...] -> the same shape */
tg_tensor tg_groupnorm_fwd_at(tg_graph *g, const tg_groupnorm *l, tg_tensor x, const char *file, int line) {
    if (!tg_ir_module_ok(g, l, "groupnorm_fwd", file, line)) return (tg_tensor){g, -1};
    return tg_group_norm_at(x, l->groups, tg_use_at(g, l->g, file, line), tg_use_at(g, l->b, file, line), l->eps,
                            file, line);
}

/* The running statistics are frozen params: trained by nothing, saved and
 * loaded with the weights, shared with attached forward sessions. */
tg_batchnorm tg_batchnorm_new(tg_model *m, const char *name, int64_t channels) {
    tg_batchnorm l = {-1, -1, -1, -1, channels, 0.1f, 1e-5f};
    tg_shape c = {1, {channels}};
    l.g = tg_api_layer_param(m, name, ".g", c, tg_init_ones());
    l.b = tg_api_layer_param(m, name, ".b", c, tg_init_zeros());
    l.running_mean = tg_api_layer_param(m, name, ".running_mean", c, tg_init_zeros());
    l.running_var = tg_api_layer_param(m, name, ".running_var", c, tg_init_ones());
    if (l.running_mean >= 0) tg_model_freeze(m, l.running_mean);
    if (l.running_var >= 0) tg_model_freeze(m, l.running_var);
    return l;
}

/* x [N, channels, ...] -> the same shape */
tg_tensor tg_batchnorm_fwd_at(tg_graph *g, const tg_batchnorm *l, tg_tensor x, bool training, const char *file,
                              int line) {
    if (!tg_ir_module_ok(g, l, "batchnorm_fwd", file, line)) return (tg_tensor){g, -1};
    return tg_batch_norm_at(x, tg_use_at(g, l->g, file, line), tg_use_at(g, l->b, file, line),
                            tg_use_at(g, l->running_mean, file, line), tg_use_at(g, l->running_var, file, line),
                            training, l->momentum, l->eps, file, line);
}

tg_embedding tg_embedding_new_opts(tg_model *m, const char *name, int64_t vocab, int64_t dim, tg_layer_opts o) {
    tg_embedding e = {-1, vocab, dim};
    e.W = tg_api_layer_param(m, name, ".W", (tg_shape){2, {vocab, dim}}, tg_api_layer_init(o.init, o.decay));
    return e;
}

tg_embedding tg_embedding_new(tg_model *m, const char *name, int64_t vocab, int64_t dim) {
    return tg_embedding_new_opts(m, name, vocab, dim, (tg_layer_opts){0});
}

/* idx i32 [...] -> [..., dim] */
tg_tensor tg_embedding_fwd_at(tg_graph *g, const tg_embedding *e, tg_tensor idx, const char *file, int line) {
    if (!tg_ir_module_ok(g, e, "embedding_fwd", file, line)) return (tg_tensor){g, -1};
    return tg_embedding_at(tg_use_at(g, e->W, file, line), idx, file, line);
}
