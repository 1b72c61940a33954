/* Module helpers: param declarations with upstream's names and layouts, and
 * their forward functions. */
#include <stdio.h>

#include "../ir/ir.h"

tg_linear tg_linear_new(tg_model *m, const char *name, int64_t in, int64_t out, bool bias) {
    tg_linear l = {-1, -1, in, out};
    char buf[256];
    snprintf(buf, sizeof buf, "%s.W", name ? name : "");
    l.W = tg_model_param(m, buf, (tg_shape){2, {in, out}}, tg_init_randn(0.02f));
    if (bias) {
        snprintf(buf, sizeof buf, "%s.b", name ? name : "");
        l.b = tg_model_param(m, buf, (tg_shape){1, {out}}, tg_init_zeros());
    }
    return l;
}

/* x [..., in] -> [..., out] */
tg_tensor tg_linear_fwd_at(tg_graph *g, const tg_linear *l, tg_tensor x, const char *file, int line) {
    tg_tensor y = tg_matmul_at(x, tg_use_at(g, l->W, file, line), file, line);
    return l->b >= 0 ? tg_add_at(y, tg_use_at(g, l->b, file, line), file, line) : y;
}
