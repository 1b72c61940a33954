/* A norm's backward sums (see fuse.h). */
#include "fuse.h"

bool tg_fuse_norm_sums_pair(const tg_fuse_graph *x, int dg, int sb) {
    const tg_node *d = tg_fuse_node(x, dg), *s = tg_fuse_node(x, sb);
    if (d->op != TG_OP_NORM_DGAIN || s->op != TG_OP_SUM || s->in[0] != d->in[1] || d->dtype != TG_F32 ||
        s->dtype != TG_F32 || !tg_fuse_free(x, dg) || !tg_fuse_free(x, sb))
        return false;
    const tg_node *gy = tg_fuse_node(x, d->in[1]);
    if (gy->dtype != TG_F32 || tg_fuse_node(x, d->in[0])->dtype != TG_F32 || s->shape.ndim != gy->shape.ndim ||
        tg_ir_numel(s) != tg_ir_numel(d))
        return false;
    int k = 0; /* gy summed over its leading axes: [1, .., 1, D..] of gy's [R.., D..] */
    while (k < s->shape.ndim && s->shape.d[k] == 1) k++;
    for (int i = k; i < s->shape.ndim; i++)
        if (s->shape.d[i] != gy->shape.d[i]) return false;
    return true;
}
