/* Lowering to CPU steps (see lower.h). Groups that change the plan were
 * chosen before planning (grouping.c) and run here as one step at their turn;
 * Adam's three updates of a param, which share no memory the plan could
 * save, are fused here. Fused kernels do the same float operations as the
 * separate ones, so the results are bitwise the same as without fusion. */
#include <stdlib.h>
#include <string.h>

#include "fused_attention.h"
#include "groups.h"
#include "kernels.h"
#include "lower.h"

#define GRAIN 16384 /* elements per task: below about this, other threads cost more than they save */

typedef struct {
    const tg_program *p;
    const tg_graph *g;
    char *const *arena;
} lower_ctx;

static char *addr(const lower_ctx *l, int id) {
    const tg_slot *s = &l->p->plan.slot[id];
    return l->arena[s->arena] + s->offset;
}

static int64_t bytes(const lower_ctx *l, int id) { return l->p->plan.slot[id].bytes; }
static const tg_node *node(const lower_ctx *l, int id) { return &l->g->nodes[id]; }

static bool overlap(const lower_ctx *l, int a, int b) {
    char *pa = addr(l, a), *pb = addr(l, b);
    return pa < pb + bytes(l, b) && pb < pa + bytes(l, a);
}

/* Same buffer, same size: an elementwise pass may read and write it. */
static bool same(const lower_ctx *l, int a, int b) { return addr(l, a) == addr(l, b) && bytes(l, a) == bytes(l, b); }

static bool f32(const lower_ctx *l, int id) { return node(l, id)->dtype == TG_F32; }

/* ---- runners ---- */

/* An empty output has nothing to compute, while its other dims can still be
 * huge: a concat of [2^40, 0] tensors would loop 2^40 times over nothing. */
static void run_kernel(cpu_ctx *c, const cpu_step *s) {
    if (tg_ir_numel(ir_node(s->g, s->id)) == 0) return;
    s->fn(c, s->g, s->id, s->out, s->in);
}

static void run_gemm(cpu_ctx *c, const cpu_step *s) { tg_gemm(c->pool, &s->gemm); }

static void binary_range(void *arg, int64_t lo, int64_t hi) {
    const cpu_step *s = arg;
    s->vk->binary(s->op, hi - lo, s->o[0] + lo, s->x[0] + lo * s->sa, s->sa, s->x[1] + lo * s->sb, s->sb);
}
static void run_binary(cpu_ctx *c, const cpu_step *s) { tg_cpu_parallel(c, s->n, GRAIN, binary_range, (void *)s); }

static void binary_row_range(void *arg, int64_t lo, int64_t hi) {
    const cpu_step *s = arg;
    s->vk->binary_row(s->op, hi - lo, s->cols, s->o[0] + lo * s->cols, s->x[0] + lo * s->cols, s->x[1], s->row_left);
}
static void run_binary_row(cpu_ctx *c, const cpu_step *s) {
    tg_cpu_parallel(c, s->rows, 1 + GRAIN / s->cols, binary_row_range, (void *)s);
}

static void relu_range(void *arg, int64_t lo, int64_t hi) {
    const cpu_step *s = arg;
    s->vk->relu(hi - lo, s->o[0] + lo, s->x[0] + lo);
}
static void run_relu(cpu_ctx *c, const cpu_step *s) { tg_cpu_parallel(c, s->n, GRAIN, relu_range, (void *)s); }

static void relu_grad_range(void *arg, int64_t lo, int64_t hi) {
    const cpu_step *s = arg;
    s->vk->relu_grad(hi - lo, s->o[0] + lo, s->x[0] + lo, s->x[1] + lo);
}
static void run_relu_grad(cpu_ctx *c, const cpu_step *s) { tg_cpu_parallel(c, s->n, GRAIN, relu_grad_range, (void *)s); }

static void run_colsum(cpu_ctx *c, const cpu_step *s) { tg_cpu_colsum(c, s->x[0], s->rows, s->cols, s->o[0]); }

/* Adam over several params in one job: their elements laid end to end. */
typedef struct {
    float *mo, *vo, *po;
    const float *m, *v, *g, *p, *gscale; /* gscale: the clip factor (one float), or NULL */
    int64_t n, at;                       /* elements, and where they start in the job */
    float b1, b2, eps;
    bool decay;
} adam_param;

typedef struct adam_batch {
    adam_param *p;
    int n;
    int64_t total;
    const float *hyper;
    const vec_kernels *vk;
} adam_batch;

static void adam_range(void *arg, int64_t lo, int64_t hi) {
    const adam_batch *b = arg;
    const float *h = b->hyper;
    int k = 0;
    while (k + 1 < b->n && b->p[k + 1].at <= lo) k++;
    for (; k < b->n && b->p[k].at < hi; k++) {
        const adam_param *a = &b->p[k];
        int64_t i0 = lo > a->at ? lo - a->at : 0, i1 = hi - a->at < a->n ? hi - a->at : a->n;
        if (i0 < i1) /* no clip factor: g * 1 is g, bit for bit */
            b->vk->adam(i1 - i0, a->mo + i0, a->vo + i0, a->po + i0, a->m + i0, a->v + i0, a->g + i0, a->p + i0,
                        a->gscale ? *a->gscale : 1.0f, a->b1, a->b2, h[TG_HYPER_LRT],
                        a->decay ? h[TG_HYPER_SHRINK] : 1.0f, a->eps);
    }
}
static void run_adam(cpu_ctx *c, const cpu_step *s) { tg_cpu_parallel(c, s->adam->total, 8192, adam_range, s->adam); }

/* ---- matching ---- */

/* The step of a fused matmul group (grouping.c chose it before planning). The
 * plan keeps the matmul's inputs live until the group's turn and lets the
 * output share memory with the gate only where the group allowed it; the
 * checks here only make sure of that, and fail the compile if not. */
static bool lower_matmul_group(const lower_ctx *l, const cpu_group *d, cpu_step *s) {
    const tg_node *n = node(l, d->mm);
    int reads[3] = {n->in[0], n->in[1], d->bias};
    for (int k = 0; k < 3; k++)
        if (reads[k] >= 0 && overlap(l, d->out, reads[k])) return false;
    void *in[TG_MAX_IN] = {addr(l, n->in[0]), addr(l, n->in[1])};
    tg_cpu_matmul_args(l->g, d->mm, addr(l, d->out), in, &s->gemm);
    if (d->gate >= 0 && overlap(l, d->out, d->gate) && !(same(l, d->out, d->gate) && tg_gemm_single_pass(&s->gemm)))
        return false;
    if (d->resid >= 0 && overlap(l, d->out, d->resid) &&
        !(same(l, d->out, d->resid) && tg_gemm_single_pass(&s->gemm)))
        return false;
    s->epi = (tg_gemm_epi){d->bias >= 0 ? (const float *)addr(l, d->bias) : NULL, d->relu,
                           d->gate >= 0 ? (const float *)addr(l, d->gate) : NULL, s->gemm.ldc, s->gemm.sc,
                           d->resid >= 0 ? (const float *)addr(l, d->resid) : NULL, s->gemm.ldc, s->gemm.sc};
    s->gemm.epi = &s->epi;
    s->run = run_gemm;
    return true;
}

static bool lower_binary(const lower_ctx *l, int id, cpu_step *s) {
    const tg_node *n = node(l, id);
    if (!f32(l, id) || !f32(l, n->in[0]) || !f32(l, n->in[1])) return false;
    static const vec_op ops[] = {[TG_OP_ADD] = VEC_ADD, [TG_OP_SUB] = VEC_SUB, [TG_OP_MUL] = VEC_MUL,
                                 [TG_OP_DIV] = VEC_DIV};
    const tg_node *a = node(l, n->in[0]), *b = node(l, n->in[1]);
    int64_t N = tg_ir_numel(n), na = tg_ir_numel(a), nb = tg_ir_numel(b);
    int64_t cols = n->shape.ndim ? n->shape.d[n->shape.ndim - 1] : 1;
    s->op = ops[n->op];
    s->o[0] = (float *)s->out, s->x[0] = s->in[0], s->x[1] = s->in[1];
    s->n = N;
    if ((na == N || na == 1) && (nb == N || nb == 1)) {
        s->run = run_binary;
        s->sa = na == N, s->sb = nb == N;
        return true;
    }
    const tg_node *row = na == N ? b : a;
    if ((na == N) == (nb == N) || cols < 1 || tg_ir_numel(row) != cols || row->shape.ndim < 1 ||
        row->shape.d[row->shape.ndim - 1] != cols)
        return false;
    s->run = run_binary_row;
    s->rows = N / cols, s->cols = cols;
    s->row_left = row == a;
    if (s->row_left) s->x[0] = s->in[1], s->x[1] = s->in[0];
    return true;
}

/* A sum whose output keeps the input's trailing axes and drops the leading
 * ones: column sums of [rows, cols]. */
static bool lower_colsum(const lower_ctx *l, int id, cpu_step *s) {
    const tg_node *n = node(l, id);
    if (!tg_cpu_colsum_shape(n, node(l, n->in[0]), &s->rows, &s->cols)) return false;
    s->run = run_colsum;
    s->o[0] = s->out, s->x[0] = s->in[0];
    return true;
}

static int lower_one(const lower_ctx *l, const int *run, int left, bool specialize, cpu_step *s) {
    int id = run[0];
    const tg_node *n = node(l, id);
    memset(s, 0, sizeof *s);
    s->g = l->g;
    s->id = id;
    s->fn = tg_cpu_kernels[n->op];
    s->out = addr(l, id);
    for (int k = 0; k < n->nin; k++) s->in[k] = addr(l, n->in[k]);
    s->run = run_kernel;
    s->vk = tg_vec_best();
    s->n_nodes = 1;
    if (!specialize) return 1;
    int used = 0;
    switch (n->op) {
    case TG_OP_MATMUL:
        tg_cpu_matmul_args(l->g, id, s->out, s->in, &s->gemm);
        s->run = run_gemm;
        used = 1;
        break;
    case TG_OP_ADD: case TG_OP_SUB: case TG_OP_MUL: case TG_OP_DIV: used = lower_binary(l, id, s); break;
    case TG_OP_RELU:
        if (f32(l, id)) s->run = run_relu, s->n = tg_ir_numel(n), s->o[0] = s->out, s->x[0] = s->in[0], used = 1;
        break;
    case TG_OP_UNARY_GRAD: /* relu's gradient */
        if (tg_ir_is_relu_grad(n) && f32(l, id) && f32(l, n->in[1]))
            s->run = run_relu_grad, s->n = tg_ir_numel(n), s->o[0] = s->out, s->x[0] = s->in[0], s->x[1] = s->in[1],
            used = 1;
        break;
    case TG_OP_SUM: used = lower_colsum(l, id, s); break;
    default: break;
    }
    if (used == 0) s->run = run_kernel, used = 1;
    s->n_nodes = used;
    return used;
}

/* ---- fused attention ---- */

static void run_attn_fwd(cpu_ctx *c, const cpu_step *s) { tg_cpu_attention_fwd(c, &s->attn.f); }
static void run_attn_bwd(cpu_ctx *c, const cpu_step *s) { tg_cpu_attention_bwd(c, &s->attn.b); }

/* An operand a group reads, [B, H, T, Dh]: a split_heads permute the plan
 * made a view lies in its input's [B, T, H, Dh] memory, heads interleaved;
 * anything else is contiguous. */
static attn_operand operand_in(const lower_ctx *l, int id) {
    const tg_shape *s = &node(l, id)->shape;
    int64_t H = s->d[1], T = s->d[2], Dh = s->d[3];
    attn_operand o = {(float *)addr(l, id), H * T * Dh, T * Dh, Dh};
    if (l->p->fusion->role[id] == TG_FUSE_VIEW) o.sh = Dh, o.st = H * Dh;
    return o;
}

/* The result of a product: a merge_heads permute's memory is [B, T, H, Dh]. */
static attn_operand operand_out(const lower_ctx *l, int id) {
    const tg_node *n = node(l, id);
    attn_operand o = {(float *)addr(l, id), 0, 0, 0};
    const tg_shape *s = &n->shape;
    if (n->op == TG_OP_PERMUTE) { /* node shape [B, T, H, Dh] */
        o.sb = s->d[1] * s->d[2] * s->d[3], o.sh = s->d[3], o.st = s->d[2] * s->d[3];
    } else {
        o.sb = s->d[1] * s->d[2] * s->d[3], o.sh = s->d[2] * s->d[3], o.st = s->d[3];
    }
    return o;
}

static bool lower_attention(const lower_ctx *l, const cpu_group *d, cpu_step *s) {
    const tg_shape *sv = &node(l, d->v)->shape;
    int64_t B = sv->d[0], H = sv->d[1], T = sv->d[2], Dh = sv->d[3];
    float scale = d->scale >= 0 ? *(const float *)addr(l, d->scale) : 1.0f;
    /* Results never share memory with what the kernel reads. */
    int reads[6] = {d->q, d->k, d->v, d->dout, d->att, d->scale}, writes[4] = {d->o, d->dq, d->dk, d->dv};
    if (d->kind == CPU_GROUP_ATTN_FWD) writes[1] = d->att, reads[4] = -1;
    for (int w = 0; w < 4; w++)
        for (int r = 0; r < 6 && writes[w] >= 0; r++)
            if (reads[r] >= 0 && overlap(l, writes[w], reads[r])) return false;
    if (d->kind == CPU_GROUP_ATTN_FWD) {
        s->attn.f = (attn_fwd){B, H, T, Dh, operand_in(l, d->q), operand_in(l, d->k), operand_in(l, d->v),
                               operand_out(l, d->o), d->att >= 0 ? (float *)addr(l, d->att) : NULL, scale,
                               d->scale >= 0, d->att_cols};
        s->run = run_attn_fwd;
        return true;
    }
    attn_operand none = {NULL, 0, 0, 0};
    /* no att (more than ATTN_MAX_T keys): the softmax again from q and k, with the forward's scale */
    bool recompute = d->att < 0;
    float fwd_scale = recompute && d->fwd_scale >= 0 ? *(const float *)addr(l, d->fwd_scale) : 1.0f;
    s->attn.b = (attn_bwd){B, H, T, Dh, recompute ? NULL : (const float *)addr(l, d->att), operand_in(l, d->dout),
                           d->q >= 0 ? operand_in(l, d->q) : none, d->k >= 0 ? operand_in(l, d->k) : none,
                           operand_in(l, d->v), d->dq >= 0 ? operand_out(l, d->dq) : none,
                           d->dk >= 0 ? operand_out(l, d->dk) : none, d->dv >= 0 ? operand_out(l, d->dv) : none,
                           scale, d->scale >= 0, d->att_cols, fwd_scale, recompute && d->fwd_scale >= 0};
    s->run = run_attn_bwd;
    return true;
}

/* One param of a fused Adam group; the plan computes each update into the
 * state it replaces (the same element, read first). */
static bool adam_of(const lower_ctx *l, const cpu_group *d, adam_param *a) {
    const tg_node *m = node(l, d->am), *v = node(l, d->av), *p = node(l, d->ap);
    int ins[4] = {m->in[0], v->in[0], d->grad, p->in[0]}, outs[3] = {d->am, d->av, d->ap};
    for (int o = 0; o < 3; o++) {
        for (int k = 0; k < 4; k++)
            if (overlap(l, outs[o], ins[k]) && !same(l, outs[o], ins[k])) return false;
        for (int q = 0; q < o; q++)
            if (overlap(l, outs[o], outs[q])) return false;
    }
    *a = (adam_param){(float *)addr(l, d->am), (float *)addr(l, d->av), (float *)addr(l, d->ap),
                      (const float *)addr(l, ins[0]), (const float *)addr(l, ins[1]), (const float *)addr(l, ins[2]),
                      (const float *)addr(l, ins[3]), d->gscale >= 0 ? (const float *)addr(l, d->gscale) : NULL,
                      tg_ir_numel(m), 0, m->at.adam.beta, v->at.adam.beta, p->at.adam.eps, p->at.adam.decay};
    return true;
}

/* ---- fused norm backward ---- */

static void run_norm_bwd(cpu_ctx *c, const cpu_step *s) { tg_cpu_norm_backward(c, &s->norm); }
static void run_norm_sums(cpu_ctx *c, const cpu_step *s) {
    tg_cpu_norm_sums(c, s->rows, s->cols, s->x[0], s->x[1], s->x[2], s->o[0], s->o[1]);
}

static bool lower_norm(const lower_ctx *l, const cpu_group *d, cpu_step *s) {
    const tg_node *xn = node(l, d->nb.x);
    int64_t D = xn->shape.d[xn->shape.ndim - 1], R = tg_ir_numel(xn) / (D ? D : 1);
    if (d->kind == CPU_GROUP_NORM_SUMS) {
        int reads[3] = {d->nb.x, d->nb.gy, d->nb.stats}, writes[2] = {d->nb.dgain, d->nb.dbias};
        for (int w = 0; w < 2; w++)
            for (int r = 0; r < 3; r++)
                if (overlap(l, writes[w], reads[r])) return false;
        s->rows = R, s->cols = D;
        s->x[0] = (const float *)addr(l, d->nb.x), s->x[1] = (const float *)addr(l, d->nb.gy);
        s->x[2] = (const float *)addr(l, d->nb.stats);
        s->o[0] = (float *)addr(l, d->nb.dgain), s->o[1] = (float *)addr(l, d->nb.dbias);
        s->run = run_norm_sums;
        return true;
    }
    const tg_node *dx = node(l, d->nb.dx), *ln = d->nb.ln >= 0 ? node(l, d->nb.ln) : NULL;
    int out = d->nb.add >= 0 ? d->nb.add : d->nb.dx, bias = ln && ln->nin > 2 ? ln->in[2] : -1;
    /* Results apart from what the pass reads, but dx over the residual or gy
     * (each row read whole before it is written). */
    int reads[5] = {d->nb.x, dx->in[1], d->nb.gy, d->nb.resid, bias};
    int writes[3] = {out, d->nb.ln, d->nb.keep_stats ? d->nb.stats : -1};
    for (int w = 0; w < 3; w++)
        for (int r = 0; r < 5; r++) {
            if (writes[w] < 0 || reads[r] < 0 || !overlap(l, writes[w], reads[r])) continue;
            if (!(w == 0 && (r == 2 || r == 3) && same(l, writes[w], reads[r]))) return false;
        }
    s->norm = (cpu_norm_bwd){R, D, dx->at.norm.rms, node(l, d->nb.stats)->at.norm.eps, (const float *)addr(l, d->nb.x),
                             (const float *)addr(l, dx->in[1]), bias >= 0 ? (const float *)addr(l, bias) : NULL,
                             (const float *)addr(l, d->nb.gy),
                             d->nb.resid >= 0 ? (const float *)addr(l, d->nb.resid) : NULL,
                             d->nb.keep_stats ? (float *)addr(l, d->nb.stats) : NULL,
                             ln ? (float *)addr(l, d->nb.ln) : NULL, (float *)addr(l, out)};
    s->run = run_norm_bwd;
    return true;
}

static void run_sumsq(cpu_ctx *c, const cpu_step *s) { tg_cpu_sumsq(c, s->heap[0], (int)s->n); }

static bool lower_sumsq(const lower_ctx *l, cpu_step *s) {
    const cpu_groups *cg = l->p->fusion->impl;
    cpu_sumsq_term *t = tg_calloc((size_t)cg->n_sq + 1, sizeof *t);
    if (!t) return false;
    s->heap[0] = t;
    for (int i = 0; i < cg->n_sq; i++) {
        t[i] = (cpu_sumsq_term){(const float *)addr(l, cg->sq[i].x), tg_ir_numel(node(l, cg->sq[i].x)),
                                (float *)addr(l, cg->sq[i].sum)};
        for (int k = 0; k < cg->n_sq; k++)
            if (overlap(l, cg->sq[i].sum, cg->sq[k].x)) return false;
    }
    s->n = cg->n_sq;
    s->run = run_sumsq;
    return true;
}

static void run_pool_relu(cpu_ctx *c, const cpu_step *s) { tg_cpu_max_pool2d_grad_relu(c, s->g, s->sa, s->out, s->in); }

/* dx apart from x, y and gy: the fallback's relu pass reads x after dx is written. */
static bool lower_pool_relu(const lower_ctx *l, const cpu_group *d, cpu_step *s) {
    const tg_node *pg = node(l, d->mm);
    for (int k = 0; k < 3; k++) {
        if (overlap(l, d->out, pg->in[k])) return false;
        s->in[k] = addr(l, pg->in[k]);
    }
    s->out = addr(l, d->out);
    s->sa = d->mm;
    s->run = run_pool_relu;
    return true;
}

const char *const tg_cpu_group_names[CPU_GROUP_KINDS] = {
    [CPU_GROUP_MATMUL] = "matmul+epilogue", [CPU_GROUP_ATTN_FWD] = "attention",
    [CPU_GROUP_ATTN_BWD] = "attention_grad", [CPU_GROUP_ADAM] = "adam",
    [CPU_GROUP_NORM_BWD] = "norm_grad", [CPU_GROUP_NORM_SUMS] = "norm_sums",
    [CPU_GROUP_SUMSQ] = "sumsq", [CPU_GROUP_POOL_RELU] = "pool_relu_grad",
};

/* The step of fused group `gid`, at its turn. */
static bool lower_group(const lower_ctx *l, int gid, cpu_step *s) {
    const cpu_groups *cg = l->p->fusion->impl;
    const cpu_group *d = &cg->g[gid];
    memset(s, 0, sizeof *s);
    s->g = l->g;
    s->vk = tg_vec_best();
    s->id = d->out;
    s->label = tg_cpu_group_names[d->kind];
    s->n_nodes = 0;
    for (int i = 0; i < l->g->n; i++) s->n_nodes += l->p->fusion->group[i] == gid;
    switch (d->kind) {
    case CPU_GROUP_MATMUL: return lower_matmul_group(l, d, s);
    case CPU_GROUP_ATTN_FWD:
    case CPU_GROUP_ATTN_BWD: return lower_attention(l, d, s);
    case CPU_GROUP_ADAM: break; /* batched by tg_cpu_lower */
    case CPU_GROUP_NORM_BWD:
    case CPU_GROUP_NORM_SUMS: return lower_norm(l, d, s);
    case CPU_GROUP_SUMSQ: return lower_sumsq(l, s);
    case CPU_GROUP_POOL_RELU: return lower_pool_relu(l, d, s);
    case CPU_GROUP_KINDS: break;
    }
    return false;
}

int tg_cpu_lower(const tg_program *p, char *const *arena, bool specialize, cpu_step *steps) {
    const tg_graph *g = p->g;
    const tg_fusion *fu = p->fusion;
    size_t n = (size_t)g->n + 1;
    int *run = tg_calloc(n, sizeof(int));
    int n_run = 0, n_steps = -1;
    for (int i = 0; run && i < g->n; i++) {
        unsigned f = tg_ops[g->nodes[i].op].flags;
        if (tg_cpu_kernels[g->nodes[i].op] && !(f & (TG_OPF_VIEW | TG_OPF_CONSTANT | TG_OPF_LEAF))) run[n_run++] = i;
    }
    if (!run) return -1;
    lower_ctx l = {p, g, arena};
    n_steps = 0;
    for (int r = 0; r < n_run;) {
        int id = run[r];
        if (fu && fu->group[id] >= 0) { /* a member of a fused group: its step runs at the group's turn */
            int gid = fu->group[id];
            const cpu_groups *cg = fu->impl;
            if (fu->turn[gid] == id && cg->g[gid].kind == CPU_GROUP_ADAM) {
                /* Consecutive Adam groups (nothing else runs between them:
                 * every param's own buffers) make one job over all their
                 * elements, shared by the threads. */
                int k = 0;
                for (int q = r; q < n_run; q++) {
                    int gq = fu->group[run[q]];
                    if (gq < 0 || cg->g[gq].kind != CPU_GROUP_ADAM) break;
                    k += fu->turn[gq] == run[q];
                }
                adam_batch *b = tg_calloc(1, sizeof *b);
                adam_param *ps = tg_calloc((size_t)k + 1, sizeof *ps);
                cpu_step *s = &steps[n_steps++];
                memset(s, 0, sizeof *s);
                s->g = g, s->id = id, s->run = run_adam, s->adam = b, s->heap[0] = b, s->heap[1] = ps;
                s->label = tg_cpu_group_names[CPU_GROUP_ADAM];
                if (!b || !ps) {
                    n_steps = -1;
                    break;
                }
                *b = (adam_batch){ps, 0, 0, NULL, tg_vec_best()};
                for (; r < n_run; r++) {
                    int gq = fu->group[run[r]];
                    if (gq < 0 || cg->g[gq].kind != CPU_GROUP_ADAM) break;
                    s->n_nodes++;
                    if (fu->turn[gq] != run[r]) continue;
                    if (!adam_of(&l, &cg->g[gq], &ps[b->n])) {
                        n_steps = -2;
                        break;
                    }
                    ps[b->n].at = b->total;
                    b->total += ps[b->n].n;
                    b->hyper = (const float *)addr(&l, node(&l, cg->g[gq].ap)->in[3]);
                    b->n++;
                }
                if (n_steps < 0) break;
                continue;
            }
            if (fu->turn[gid] == id && !lower_group(&l, gid, &steps[n_steps++])) {
                n_steps = -2;
                break;
            }
            r++;
            continue;
        }
        if (fu && fu->role[id] == TG_FUSE_VIEW) { /* read in place by the groups */
            r++;
            continue;
        }
        r += lower_one(&l, run + r, n_run - r, specialize, &steps[n_steps++]);
    }
    free(run);
    return n_steps;
}
