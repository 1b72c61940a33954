/* Matmul (through tg_gemm), one_hot, and the optimizer updates. */
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "../optim/optim.h"
#include "../optim/update.h"

/* a [..., M, K] (ta: [..., K, M]) x b [K, N] (tb: [N, K]) or batched b. */
void tg_cpu_matmul_args(const tg_graph *g, int id, void *out, void *const *in, tg_gemm_args *ga) {
    const tg_node *n = ir_node(g, id), *a = ir_node(g, n->in[0]), *b = ir_node(g, n->in[1]);
    int na = a->shape.ndim, nb = b->shape.ndim;
    bool ta = n->at.matmul.ta, tb = n->at.matmul.tb;
    int64_t M = n->shape.d[na - 2], N = n->shape.d[na - 1];
    int64_t K = a->shape.d[na - (ta ? 2 : 1)];
    int64_t batch = 1;
    for (int i = 0; i < na - 2; i++) batch *= a->shape.d[i];
    *ga = (tg_gemm_args){batch, M, N, K, in[0], in[1], out, ta ? M : K, tb ? K : N, N, M * K, nb > 2 ? K * N : 0,
                         M * N, ta, tb, NULL, false};
    if (nb == 2 && !ta) { /* a shared B: fold the batch into the rows, one big product */
        ga->M = batch * M;
        ga->batch = 1;
    }
}

TG_CPU_KERNEL(tg_cpu_matmul) {
    tg_gemm_args ga;
    tg_cpu_matmul_args(g, id, out, in, &ga);
    tg_gemm(c->pool, &ga);
}

TG_CPU_KERNEL(tg_cpu_one_hot) {
    (void)c;
    const tg_node *n = ir_node(g, id);
    int64_t depth = n->at.one_hot.depth, rows = tg_ir_numel(n) / depth;
    const int32_t *idx = in[0];
    float *y = out;
    memset(y, 0, (size_t)tg_ir_numel(n) * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        if (idx[r] >= 0 && idx[r] < depth) y[r * depth + idx[r]] = 1.0f;
}

/* ---- optimizer updates: flat loops over one param (formulas: optim/update.h) ---- */

typedef struct {
    const tg_node *n;
    void *const *in;
    float *out;
} opt_job;

static void adam_m_range(void *arg, int64_t lo, int64_t hi) {
    opt_job *j = arg;
    const float *m = j->in[0], *gr = j->in[1];
    float b = j->n->at.adam.beta, ob = 1.0f - b;
    for (int64_t i = lo; i < hi; i++) j->out[i] = TG_ADAM_M(tg_s, b, ob, m[i], gr[i]);
}

static void adam_v_range(void *arg, int64_t lo, int64_t hi) {
    opt_job *j = arg;
    const float *v = j->in[0], *gr = j->in[1];
    float b = j->n->at.adam.beta, ob = 1.0f - b;
    for (int64_t i = lo; i < hi; i++) j->out[i] = TG_ADAM_V(tg_s, b, ob, v[i], gr[i]);
}

static void adam_p_range(void *arg, int64_t lo, int64_t hi) {
    opt_job *j = arg;
    const float *p = j->in[0], *m = j->in[1], *v = j->in[2], *h = j->in[3];
    float lrt = h[TG_HYPER_LRT], shrink = j->n->at.adam.decay ? h[TG_HYPER_SHRINK] : 1.0f, eps = j->n->at.adam.eps;
    for (int64_t i = lo; i < hi; i++) j->out[i] = TG_ADAM_P(tg_s, shrink, lrt, eps, p[i], m[i], v[i]);
}

static void sgd_v_range(void *arg, int64_t lo, int64_t hi) {
    opt_job *j = arg;
    const float *v = j->in[0], *gr = j->in[1], *p = j->in[2];
    float mu = j->n->at.sgd.momentum, wd = j->n->at.sgd.weight_decay;
    for (int64_t i = lo; i < hi; i++) j->out[i] = TG_SGD_V(tg_s, mu, wd, v[i], gr[i], p[i]);
}

/* in[2] is v' with momentum, else p (unread) */
static void sgd_p_range(void *arg, int64_t lo, int64_t hi) {
    opt_job *j = arg;
    const float *p = j->in[0], *gr = j->in[1], *v = j->in[2], *h = j->in[3];
    float mu = j->n->at.sgd.momentum, wd = j->n->at.sgd.weight_decay, lr = h[TG_HYPER_LR];
    bool nesterov = j->n->at.sgd.nesterov, mom = j->n->at.sgd.has_momentum;
    for (int64_t i = lo; i < hi; i++) {
        float g2 = TG_SGD_G(tg_s, wd, gr[i], p[i]);
        float u = mom ? (nesterov ? TG_SGD_NESTEROV(tg_s, mu, g2, v[i]) : v[i]) : g2;
        j->out[i] = TG_SGD_P(tg_s, lr, p[i], u);
    }
}

#define OPT_KERNEL(name, fn)                                                       \
    TG_CPU_KERNEL(name) {                                                          \
        opt_job j = {ir_node(g, id), in, out};                                     \
        tg_cpu_parallel(c, tg_ir_numel(j.n), 16384, fn, &j);                             \
    }
OPT_KERNEL(tg_cpu_adam_m, adam_m_range)
OPT_KERNEL(tg_cpu_adam_v, adam_v_range)
OPT_KERNEL(tg_cpu_adam_p, adam_p_range)
OPT_KERNEL(tg_cpu_sgd_v, sgd_v_range)
OPT_KERNEL(tg_cpu_sgd_p, sgd_p_range)
