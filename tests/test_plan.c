/* The buffer planner, DCE and determinism, on the sin MLP. */
#include <math.h>

#include "check.h"
#include "ir/ir.h"
#include "plan/plan.h"
#include "session.h"
#include "../examples/sin.h"

/* freeze: 1 = l1.W, 2 = l1.W and l1.b */
static tg_session *open_mlp(tg_model **m, sin_net *n, uint64_t seed, int threads, int freeze) {
    *m = tg_model_new();
    *n = sin_net_new(*m, 64);
    if (freeze >= 1) tg_model_freeze(*m, n->l1.W);
    if (freeze >= 2) tg_model_freeze(*m, n->l1.b);
    static const tg_input_decl in[] = {{"x", TG_F32, {2, {256, 1}}}, {"y", TG_F32, {2, {256, 1}}}};
    tg_train_spec spec = {.model = *m, .loss = sin_loss, .user = n, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(5e-3f)), .seed = seed, .threads = threads};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    return s;
}

/* 100 steps on a fixed data stream; losses into out[]. */
static void train(tg_session *s, float *out) {
    static float x[256], y[256];
    uint64_t st = 12345;
    for (int step = 0; step < 100; step++) {
        for (int i = 0; i < 256; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 6.283185 - 3.141593);
            y[i] = sinf(x[i]);
        }
        out[step] = NAN;
        CHECK_OK(tg_session_step(s, (tg_feed[]){TG_FEED("x", x, 256), TG_FEED("y", y, 256)}, 2, &out[step]));
    }
}

static int count_op(const tg_session *s, const char *op) {
    const tg_graph *g = tg_session_graph(s);
    int k = 0;
    for (int i = 0; i < g->n; i++) k += strcmp(tg_ops[g->nodes[i].op].name, op) == 0;
    return k;
}

static void determinism(void) {
    float a[100], b[100], c[100], d[100];
    tg_model *m;
    sin_net n;
    tg_session *s = open_mlp(&m, &n, 7, 1, 0);
    train(s, a);
    tg_session_free(s);
    tg_model_free(m);
    s = open_mlp(&m, &n, 7, 1, 0);
    train(s, b);
    tg_session_free(s);
    tg_model_free(m);
    s = open_mlp(&m, &n, 7, 2, 0);
    train(s, c);
    tg_session_free(s);
    tg_model_free(m);
    s = open_mlp(&m, &n, 8, 1, 0);
    train(s, d);
    tg_session_free(s);
    tg_model_free(m);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, different losses");
    CHECK(memcmp(a, c, sizeof a) == 0, "1 and 2 threads give different losses");
    CHECK(memcmp(a, d, sizeof a) != 0, "different seeds give identical losses");
    CHECK(a[99] < a[0], "the loss did not go down: %f -> %f", a[0], a[99]);
}

static void plan_properties(void) {
    tg_model *m;
    sin_net n;
    tg_session *s = open_mlp(&m, &n, 1, 1, 0);
    tg_plan_stats ps;
    CHECK_OK(tg_session_plan_stats(s, &ps));
    CHECK(ps.planned_bytes < ps.naive_bytes / 2, "planned %lld vs naive %lld", (long long)ps.planned_bytes,
          (long long)ps.naive_bytes);
    CHECK(ps.param_bytes == 4 * (64 + 64 + 64 * 64 + 64 + 64 + 1), "param bytes %lld", (long long)ps.param_bytes);
    CHECK(ps.grad_bytes == ps.param_bytes, "grad bytes %lld", (long long)ps.grad_bytes);
    CHECK(ps.state_bytes >= 2 * ps.param_bytes, "state bytes %lld", (long long)ps.state_bytes);
    FILE *f = fopen("/dev/null", "w");
    tg_session_print_plan(s, f);
    fclose(f);

    /* Every optimizer writeback is computed in place: no copies remain. */
    CHECK(ps.n_writebacks == 18 && ps.n_writeback_copies == 0, "%d writebacks, %d still copies", ps.n_writebacks,
          ps.n_writeback_copies);
    tg_session_free(s);
    tg_model_free(m);

    /* Frozen l1.W: its weight gradient and the backprop into layer 1 vanish. */
    s = open_mlp(&m, &n, 1, 1, 0);
    int mm_all = count_op(s, "matmul");
    tg_session_free(s);
    tg_model_free(m);
    s = open_mlp(&m, &n, 1, 1, 1);
    int mm_frozen_w = count_op(s, "matmul");
    float g[64];
    CHECK_ERR(tg_session_get_grad(s, "l1.W", g, 64), TG_ERR_STATE, "no gradient");
    CHECK_OK(tg_session_get_grad(s, "l1.b", g, 64));
    tg_session_free(s);
    tg_model_free(m);
    s = open_mlp(&m, &n, 1, 1, 2);
    int mm_frozen_l1 = count_op(s, "matmul");
    tg_session_free(s);
    tg_model_free(m);
    CHECK(mm_all == 8, "unfrozen MLP has %d matmuls, want 3 forward + 5 backward", mm_all);
    CHECK(mm_frozen_w == 7, "frozen l1.W leaves %d matmuls, want 7 (its weight gradient gone)", mm_frozen_w);
    CHECK(mm_frozen_l1 == 6, "frozen l1 leaves %d matmuls, want 6 (no backprop into layer 1)", mm_frozen_l1);
}

/* tg_plan_check must reject two live classes that share bytes. */
static void check_catches_overlap(void) {
    tg_model *m;
    sin_net n;
    tg_session *s = open_mlp(&m, &n, 1, 1, 0);
    const tg_graph *g = tg_session_graph(s);
    tg_plan p;
    int64_t off[8];
    tg_plan_param_layout(m, 256, off);
    tg_plan_req req = {.n_params = 6, .align = 256, .param_offset = off};
    int *pg = calloc(8, sizeof(int));
    for (int i = 0; i < 6; i++) pg[i] = -1;
    req.param_grad = pg;
    CHECK_OK(tg_plan_build(g, &req, &p));
    CHECK_OK(tg_plan_check(g, &p, NULL));
    /* Move a scratch class onto another one that is live at the same time. */
    int a = -1, b = -1;
    for (int i = 0; i < p.n && b < 0; i++) {
        if (p.slot[i].root != i || p.slot[i].arena != TG_ARENA_SCRATCH) continue;
        if (a < 0) a = i;
        else if (!(p.slot[a].last < p.slot[i].first || p.slot[i].last < p.slot[a].first)) b = i;
    }
    CHECK(a >= 0 && b >= 0, "no two overlapping scratch classes found");
    if (a >= 0 && b >= 0) {
        for (int i = 0; i < p.n; i++)
            if (p.slot[i].root == b) p.slot[i].offset = p.slot[a].offset;
        CHECK(tg_plan_check(g, &p, NULL) == TG_ERR_STATE, "plan_check accepted overlapping live tensors");
    }
    tg_plan_free(&p);
    free(pg);
    tg_session_free(s);
    tg_model_free(m);
}

/* A fused group that reads a value besides its members' inputs
 * (also_reads) keeps it live until the group's turn, and tg_plan_check
 * rejects a plan that ends it sooner. The group here is one late node of
 * the MLP's graph reading an early scratch value. */
static void also_reads_live(void) {
    tg_model *m;
    sin_net n;
    tg_session *s = open_mlp(&m, &n, 1, 1, 0);
    const tg_graph *g = tg_session_graph(s);
    int64_t off[8];
    tg_plan_param_layout(m, 256, off);
    int pg[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    tg_plan_req req = {.n_params = 6, .align = 256, .param_offset = off, .param_grad = pg};
    tg_plan p;
    CHECK_OK(tg_plan_build(g, &req, &p));
    int x = -1, y = -1; /* y: the last node that runs; x: a scratch class that dies well before it */
    for (int i = 0; i < g->n; i++)
        if (tg_plan_runs(g, i)) y = i;
    for (int i = 0; i < p.n && x < 0; i++)
        if (p.slot[i].root == i && p.slot[i].arena == TG_ARENA_SCRATCH && p.slot[i].last + 2 < y) x = i;
    int natural = x >= 0 ? p.slot[x].last : 0;
    tg_plan_free(&p);
    CHECK(x >= 0 && y >= 0, "no early scratch value and late node");
    tg_fusion *fu = x >= 0 && y >= 0 ? tg_fusion_new(g->n) : NULL;
    if (fu) {
        fu->group[y] = 0, fu->role[y] = TG_FUSE_OUTPUT, fu->turn[0] = y, fu->also_reads[0] = x, fu->n_groups = 1;
        req.fusion = fu;
        CHECK_OK(tg_plan_build(g, &req, &p));
        CHECK(p.slot[x].last >= y, "node %d, read by the group at turn %d, lives only to %d", x, y, p.slot[x].last);
        for (int i = 0; i < p.n; i++)
            if (p.slot[i].root == x) p.slot[i].last = natural;
        CHECK(tg_plan_check(g, &p, fu) == TG_ERR_STATE, "plan_check accepted a group reading a value after its life");
        CHECK(tg_plan_check(g, &p, NULL) == TG_OK, "without the fusion the shortened plan is still sound");
        tg_plan_free(&p);
        tg_fusion_free(fu);
    }
    tg_session_free(s);
    tg_model_free(m);
}

/* The loss's seed gradient times the mean's scale is folded into one
 * constant when the gradient is built: no kernel multiplies two fill
 * constants each step. */
static tg_tensor scaled_loss(tg_graph *g, void *u) {
    sin_net *n = u;
    tg_tensor d = tg_sub(tg_linear_fwd(g, &n->l1, tg_input(g, "x")), tg_input(g, "y"));
    return tg_mul_s(tg_sum(tg_mul(d, d), TG_ALL, false), 1.0f / 256);
}

static void constants_folded(void) {
    tg_model *m = tg_model_new();
    sin_net n;
    n.l1 = tg_linear_new(m, "l1", 1, 1, true);
    static const tg_input_decl in[] = {{"x", TG_F32, {2, {256, 1}}}, {"y", TG_F32, {2, {256, 1}}}};
    tg_train_spec spec = {.model = m, .loss = scaled_loss, .user = &n, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(5e-3f)), .seed = 1, .threads = 1};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (!s) return;
    const tg_graph *g = tg_session_graph(s);
    int both = 0, consts = 0;
    for (int i = 0; i < g->n; i++) {
        const tg_node *nd = &g->nodes[i];
        consts += nd->op == TG_OP_CONST;
        if (nd->op == TG_OP_MUL && g->nodes[nd->in[0]].op == TG_OP_CONST && g->nodes[nd->in[1]].op == TG_OP_CONST) both++;
    }
    CHECK(consts > 0 && both == 0, "a scaled sum loss: %d constants, %d products of two constants (want 0)", consts, both);
    tg_session_free(s);
    tg_model_free(m);
}

/* A fused group relu(add(matmul, b)) with the add kept inside: the relu
 * may take the product's memory only when the backend marks the add as
 * reading it in step (tg_fusion.inplace of an absorbed member); a reshape
 * of a value kept inside a group gets no memory either. */
static void inplace_in_step(void) {
    tg_model *m;
    sin_net n;
    tg_session *s = open_mlp(&m, &n, 1, 1, 0);
    const tg_graph *g = tg_session_graph(s);
    int relu = -1, add = -1, mm = -1;
    for (int i = 0; i < g->n && relu < 0; i++) {
        const tg_node *r = &g->nodes[i], *a = &g->nodes[r->in[0]];
        if (r->op != TG_OP_RELU || a->op != TG_OP_ADD || g->nodes[a->in[0]].op != TG_OP_MATMUL) continue;
        relu = i, add = r->in[0], mm = a->in[0];
    }
    CHECK(relu >= 0, "no relu(add(matmul, b)) in the MLP");
    int64_t off[8];
    tg_plan_param_layout(m, 256, off);
    int pg[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    tg_plan_req req = {.n_params = 6, .align = 256, .param_offset = off, .param_grad = pg};
    tg_fusion *fu = relu >= 0 ? tg_fusion_new(g->n) : NULL;
    for (int step = 0; fu && step < 2; step++) {
        fu->group[add] = fu->group[relu] = 0, fu->turn[0] = relu, fu->n_groups = 1;
        fu->role[add] = TG_FUSE_ABSORBED, fu->role[relu] = TG_FUSE_OUTPUT;
        fu->inplace[relu] = true, fu->inplace[add] = step == 1;
        req.fusion = fu;
        tg_plan p;
        CHECK_OK(tg_plan_build(g, &req, &p));
        bool shared = p.slot[relu].root == p.slot[mm].root;
        CHECK(p.slot[add].kind == TG_BUF_NONE && shared == (step == 1),
              "add %s in step: the relu %s the product's memory (want %s)", step ? "marked" : "not marked",
              shared ? "takes" : "does not take", step ? "takes" : "not");
        tg_plan_free(&p);
    }
    /* a reshape read by a kernel, of a value nothing else reads, kept inside */
    int view = -1, src = -1, rd = -1;
    for (int i = 0; i < g->n && rd < 0; i++) {
        if (g->nodes[i].op != TG_OP_RESHAPE || !tg_plan_runs(g, g->nodes[i].in[0])) continue;
        int readers = 0, reader = -1;
        for (int j = 0; j < g->n; j++)
            for (int k = 0; k < g->nodes[j].nin; k++) {
                readers += g->nodes[j].in[k] == g->nodes[i].in[0];
                if (g->nodes[j].in[k] == i && tg_plan_runs(g, j)) reader = j;
            }
        if (readers == 1 && reader >= 0) view = i, src = g->nodes[i].in[0], rd = reader;
    }
    CHECK(rd >= 0, "no reshape of a value read by it alone, read by a kernel");
    if (fu && rd >= 0) {
        tg_fusion_free(fu);
        fu = tg_fusion_new(g->n);
        fu->group[src] = fu->group[rd] = 0, fu->turn[0] = rd, fu->n_groups = 1;
        fu->role[src] = TG_FUSE_ABSORBED, fu->role[rd] = TG_FUSE_OUTPUT;
        req.fusion = fu;
        tg_plan p;
        CHECK_OK(tg_plan_build(g, &req, &p));
        CHECK(p.slot[view].kind == TG_BUF_NONE && p.slot[view].bytes == 0, "a reshape of a kept value: %lld bytes, kind %s",
              (long long)p.slot[view].bytes, tg_plan_kind_name(p.slot[view].kind));
        tg_plan_free(&p);
    }
    tg_fusion_free(fu);
    tg_session_free(s);
    tg_model_free(m);
}

/* Kept gradients are pooled with the activations: in the scratch arena,
 * live from the turn that writes them to the end of the step (they are
 * read after it), in bytes that some value of the forward held before. A
 * plan that ends one sooner is rejected. */
static void grads_pooled(void) {
    tg_model *m;
    sin_net n;
    tg_session *s = open_mlp(&m, &n, 1, 1, 0);
    const tg_program *pr = s ? s->b.prog : NULL;
    int n_grads = 0, reused = 0;
    for (int p = 0; pr && p < pr->n_params; p++) {
        int gi = pr->param_grad[p];
        if (gi < 0) continue;
        const tg_slot *sg = &pr->plan.slot[pr->plan.slot[gi].root];
        n_grads++;
        CHECK(sg->kind == TG_BUF_GRAD && sg->arena == TG_ARENA_SCRATCH && sg->last == pr->plan.n - 1,
              "param %d's gradient: kind %s, arena %d, live %d-%d of %d", p, tg_plan_kind_name(sg->kind), sg->arena,
              sg->first, sg->last, pr->plan.n - 1);
        for (int i = 0; i < pr->plan.n; i++) {
            const tg_slot *o = &pr->plan.slot[i];
            reused += o->root == i && o->kind == TG_BUF_SCRATCH && o->last < sg->first && o->offset < sg->offset + sg->bytes &&
                      sg->offset < o->offset + o->bytes;
        }
    }
    CHECK(n_grads == 6 && reused > 0, "%d gradients, %d earlier values in their bytes", n_grads, reused);
    if (pr && n_grads) {
        tg_plan cut = pr->plan;
        cut.slot = malloc(sizeof *cut.slot * (size_t)cut.n);
        memcpy(cut.slot, pr->plan.slot, sizeof *cut.slot * (size_t)cut.n);
        int r = pr->plan.slot[pr->param_grad[0]].root;
        for (int i = 0; i < cut.n; i++)
            if (cut.slot[i].root == r) cut.slot[i].last = cut.n - 2;
        CHECK(tg_plan_check(pr->g, &cut, pr->fusion) == TG_ERR_STATE, "plan_check accepted a gradient dying in the step");
        free(cut.slot);
    }
    tg_session_free(s);
    tg_model_free(m);
}

int main(void) {
    determinism();
    plan_properties();
    check_catches_overlap();
    also_reads_live();
    constants_folded();
    inplace_in_step();
    grads_pooled();
    return check_summary("test_plan");
}
