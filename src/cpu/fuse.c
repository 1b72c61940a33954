/* The CPU fusion pass (see fuse.h). A chain of nodes becomes one group only
 * when that cannot change what any other kernel or the caller sees:
 *  - every member whose value the group keeps to itself (absorbed) has all
 *    its readers inside the group and is not a result, capture, gradient or
 *    writeback source;
 *  - the group's kernel runs at its output's turn, after every value it
 *    reads from outside has been written;
 *  - its kernel does the same float operations as the separate kernels, so
 *    results are bitwise the same with or without fusion.
 * The planner then keeps the group's inputs live until its turn and lets an
 * output share an input's memory only where the group allows it. */
#include <stdlib.h>

#include "cpu.h"
#include "fuse.h"
#include "kernels.h"

typedef struct {
    const tg_program *p;
    const tg_graph *g;
    tg_fusion *f;
    cpu_groups *cg;
    int *uses;    /* readers among the nodes */
    int *reader;  /* for a node with one reader: that reader */
    bool *pinned; /* read from outside: result, capture, gradient, writeback source */
} fuse_ctx;

static const tg_node *node(const fuse_ctx *x, int id) { return &x->g->nodes[id]; }
static bool f32(const fuse_ctx *x, int id) { return node(x, id)->dtype == TG_F32; }
static bool free_node(const fuse_ctx *x, int id) { return x->f->group[id] < 0 && x->f->role[id] == TG_FUSE_NONE; }
static bool absorbable(const fuse_ctx *x, int id) { return x->uses[id] == 1 && !x->pinned[id] && free_node(x, id); }

/* Records group members: absorbed[] first, then the output. */
static int add_group(fuse_ctx *x, const int *absorbed, int n_abs, int out, bool inplace, const cpu_group *desc) {
    int gid = x->f->n_groups++;
    for (int k = 0; k < n_abs; k++) x->f->group[absorbed[k]] = gid, x->f->role[absorbed[k]] = TG_FUSE_ABSORBED;
    x->f->group[out] = gid;
    x->f->role[out] = TG_FUSE_OUTPUT;
    x->f->turn[gid] = out;
    x->f->inplace[out] = inplace;
    x->cg->g[x->cg->n++] = *desc;
    return gid;
}

/* ---- a matmul with its epilogue ---- */

/* matmul, then optionally its bias add, then optionally relu or relu's
 * gradient (as tg_gemm_epi applies them). */
static void fuse_matmul(fuse_ctx *x, int mm_id) {
    const tg_node *mm = node(x, mm_id);
    if (!free_node(x, mm_id) || !f32(x, mm_id)) return;
    int chain[3] = {mm_id}, len = 1, last = mm_id;
    cpu_group d = {CPU_GROUP_MATMUL, -1, mm_id, -1, -1, false};
    if (absorbable(x, last)) {
        const tg_node *n = node(x, x->reader[last]);
        int other = n->nin == 2 ? (n->in[0] == last ? n->in[1] : n->in[0]) : -1;
        if (n->op == TG_OP_ADD && other >= 0 && other != last && f32(x, other) && shape_eq(n->shape, mm->shape) &&
            free_node(x, x->reader[last])) {
            const tg_node *b = node(x, other);
            int64_t N = mm->shape.d[mm->shape.ndim - 1];
            if (ir_numel(b) == N && b->shape.ndim >= 1 && b->shape.d[b->shape.ndim - 1] == N)
                d.bias = other, last = chain[len++] = x->reader[last];
        }
    }
    if (absorbable(x, last)) {
        int k = x->reader[last];
        const tg_node *n = node(x, k);
        if (!free_node(x, k)) {
        } else if (n->op == TG_OP_RELU && n->in[0] == last) {
            d.relu = true;
            last = chain[len++] = k;
        } else if (n->op == TG_OP_RELU_GRAD && n->in[1] == last && n->in[0] != last && f32(x, n->in[0])) {
            d.gate = n->in[0];
            last = chain[len++] = k;
        }
    }
    if (len == 1) return;
    d.out = last;
    /* The epilogue reads the gate element by element, just before it writes
     * that element of C: so C may overwrite the gate if each C element is
     * written once (no k blocks). */
    bool inplace = false;
    if (d.gate >= 0) {
        void *in[TG_MAX_IN] = {0};
        tg_gemm_args ga;
        cpu_matmul_args(x->g, mm_id, NULL, in, &ga);
        inplace = tg_gemm_single_pass(&ga);
    }
    add_group(x, chain, len - 1, last, inplace, &d);
}

static void groups_free(void *p) {
    cpu_groups *cg = p;
    if (cg) free(cg->g);
    free(cg);
}

tg_status cpu_fuse(const tg_program *p, tg_fusion **out) {
    *out = NULL;
    if (cpu_generic_steps()) return TG_OK;
    const tg_graph *g = p->g;
    size_t n = (size_t)g->n + 1;
    fuse_ctx x = {p, g, tg_fusion_new(g->n), tg_calloc(1, sizeof(cpu_groups)), tg_calloc(n, sizeof(int)),
                  tg_calloc(n, sizeof(int)), tg_calloc(n, sizeof(bool))};
    if (x.cg) x.cg->g = tg_calloc(n, sizeof(cpu_group));
    if (!x.f || !x.cg || !x.cg->g || !x.uses || !x.reader || !x.pinned) {
        tg_fusion_free(x.f);
        groups_free(x.cg);
        free(x.uses), free(x.reader), free(x.pinned);
        return tg_fail(TG_ERR_NOMEM, "cpu: out of memory");
    }
    x.f->impl = x.cg;
    x.f->impl_free = groups_free;
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) x.uses[g->nodes[i].in[k]]++, x.reader[g->nodes[i].in[k]] = i;
    if (p->result >= 0) x.pinned[p->result] = true;
    for (int c = 0; c < g->n_caps; c++) x.pinned[g->caps[c].id] = true;
    for (int i = 0; i < p->n_params; i++)
        if (p->param_grad[i] >= 0) x.pinned[p->param_grad[i]] = true;
    for (int w = 0; w < p->n_wb; w++) x.pinned[p->wb[w].src] = true;

    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == TG_OP_MATMUL) fuse_matmul(&x, i);

    free(x.uses), free(x.reader), free(x.pinned);
    if (x.f->n_groups == 0) {
        tg_fusion_free(x.f);
        return TG_OK;
    }
    *out = x.f;
    return TG_OK;
}
