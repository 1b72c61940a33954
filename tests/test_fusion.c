/* Rematerialization and the CPU backend's pre-plan fusion, on the addition
 * transformer (examples/gpt.c): each must leave every loss bitwise the same
 * as the plain program over several training steps, for any thread count,
 * while planning less memory; and the planner's self-check must catch a
 * plan that reads a value outside its life. */
#include <math.h>

#include "check.h"
#include "cpu/cpu.h"
#include "engine.h"
#include "cpu/groups.h"
#include "passes/passes.h"
#include "plan/plan.h"
#include "../examples/gpt.c"

enum { V = 12, D = 64, T = 8, B = 32, STEPS = 8 }; /* B * T = 256 rows: sums over rows go in 2 blocks */

static gpt_model net;

static tg_tensor loss_fn(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE);
    return tg_mean(ce, TG_ALL, false);
}

typedef struct {
    bool generic;   /* op-table kernels only: nothing fused */
    bool recompute; /* rematerialization pass on */
    int threads;
    int layers;
    bool portable;  /* the portable GEMM micro-kernel (multiply, then add) */
    int t, b;       /* sequence length and batch; 0: T and B */
} config;

typedef struct {
    float loss[STEPS];
    tg_plan_stats ps;
    int n_norms;  /* layer_norm nodes in the compiled graph */
    int n_embed;  /* embedding nodes */
} result;

static bool run(config c, result *r) {
    memset(r, 0, sizeof *r);
    tg_model *m = tg_model_new();
    int64_t t = c.t ? c.t : T, b = c.b ? c.b : B;
    gpt_declare(&net, m, (gpt_config){V, D, c.layers, 4, t + 1});
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(b, t)}, {"targets", TG_I32, TG_SHAPE(b, t)}};
    tg_optim opt = tg_adamw(tg_lr_constant(3e-3f), 0.01f);
    opt.clip_grad_norm = 1.0f;
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = 2, .optim = opt, .seed = 5,
                          .threads = c.threads};
    tg_cpu_use_generic_steps(c.generic);
    tg_pass_recompute_enable(c.recompute);
    tg_gemm_use_generic(c.portable);
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_cpu_use_generic_steps(false);
    tg_pass_recompute_enable(true);
    CHECK(st == TG_OK, "tg_session_new: %s", tg_last_error());
    bool ok = st == TG_OK;
    if (ok) {
        CHECK_OK(tg_session_plan_stats(s, &r->ps));
        const tg_graph *g = tg_session_graph(s);
        for (int i = 0; i < g->n; i++) r->n_norms += g->nodes[i].op == TG_OP_LAYER_NORM;
        for (int i = 0; i < g->n; i++) r->n_embed += g->nodes[i].op == TG_OP_EMBEDDING;
    }
    static int32_t tok[4096], tgt[4096];
    if (b * t > 4096) return false;
    uint64_t rng = 77;
    for (int i = 0; i < b * t; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((rng >> 33) % V);
        tgt[i] = (int32_t)((rng >> 40) % V);
    }
    tg_feed feeds[] = {TG_FEED("tokens", tok, b * t), TG_FEED("targets", tgt, b * t)};
    for (int i = 0; ok && i < STEPS; i++) ok = tg_session_step(s, feeds, 2, &r->loss[i]) == TG_OK;
    CHECK(ok, "training failed: %s", tg_last_error());
    tg_gemm_use_generic(false);
    tg_session_free(s);
    tg_model_free(m);
    return ok;
}

static void same_losses(const result *a, const result *b, const char *what) {
    bool same = memcmp(a->loss, b->loss, sizeof a->loss) == 0;
    CHECK(same, "%s: losses differ (step %d: %.9g vs %.9g)", what, STEPS - 1, a->loss[STEPS - 1],
          b->loss[STEPS - 1]);
}

static void losses_unchanged(void) {
    for (int layers = 1; layers <= 3; layers += 2) {
        result plain, remat, fused, all, all1, pplain, pall;
        if (!run((config){true, false, 2, layers, false, 0, 0}, &plain) ||
            !run((config){true, true, 2, layers, false, 0, 0}, &remat) ||
            !run((config){false, false, 2, layers, false, 0, 0}, &fused) ||
            !run((config){false, true, 2, layers, false, 0, 0}, &all) ||
            !run((config){false, true, 1, layers, false, 0, 0}, &all1) ||
            !run((config){true, false, 2, layers, true, 0, 0}, &pplain) ||
            !run((config){false, true, 2, layers, true, 0, 0}, &pall))
            continue;
        same_losses(&pplain, &pall, "fusion with the portable GEMM kernel");
        /* Shorter sequences, an odd number of (batch, head) units per thread
         * (the forward and backward kernels pair units when T <= 8). */
        result splain, sfused, sfused1;
        if (run((config){true, false, 2, layers, false, 5, 7}, &splain) &&
            run((config){false, true, 2, layers, false, 5, 7}, &sfused) &&
            run((config){false, true, 1, layers, false, 5, 7}, &sfused1)) {
            same_losses(&splain, &sfused, "fusion, T = 5");
            same_losses(&sfused, &sfused1, "T = 5 on 1 and 2 threads");
        }
        CHECK(plain.loss[STEPS - 1] < plain.loss[0], "the loss did not fall: %g -> %g", plain.loss[0],
              plain.loss[STEPS - 1]);
        same_losses(&plain, &remat, "rematerialization");
        same_losses(&plain, &fused, "fusion");
        same_losses(&plain, &all, "rematerialization and fusion");
        same_losses(&all, &all1, "1 and 2 threads");
        /* Each pre-LN block's two norms and the final one feed a weight
         * gradient: each is computed again there. */
        int norms = 2 * layers + 1;
        CHECK(plain.n_norms == norms && remat.n_norms == 2 * norms, "%d layer norms plain, %d recomputed (want %d, %d)",
              plain.n_norms, remat.n_norms, norms, 2 * norms);
        /* The token and position embeddings and their sum (the first
         * block's input, which its norm's backward reads) are computed
         * again from the tokens when the backward reaches that norm. */
        CHECK(plain.n_embed == 2 && remat.n_embed == 4, "%d embeddings plain, %d recomputed (want 2, 4)", plain.n_embed,
              remat.n_embed);
        CHECK(remat.ps.planned_bytes < plain.ps.planned_bytes, "rematerialization planned %lld bytes, plain %lld",
              (long long)remat.ps.planned_bytes, (long long)plain.ps.planned_bytes);
        CHECK(fused.ps.planned_bytes < plain.ps.planned_bytes, "fusion planned %lld bytes, plain %lld",
              (long long)fused.ps.planned_bytes, (long long)plain.ps.planned_bytes);
        CHECK(all.ps.planned_bytes < fused.ps.planned_bytes && all.ps.planned_bytes < remat.ps.planned_bytes,
              "both planned %lld bytes, fusion alone %lld, rematerialization alone %lld",
              (long long)all.ps.planned_bytes, (long long)fused.ps.planned_bytes, (long long)remat.ps.planned_bytes);
        CHECK(fused.ps.n_kernels < plain.ps.n_kernels, "fusion runs %d kernels, plain %d", fused.ps.n_kernels,
              plain.ps.n_kernels);
        CHECK(all.ps.n_writeback_copies == 0 && plain.ps.n_writeback_copies == 0,
              "%d writebacks are copies with fusion, %d without: Adam must update in place", all.ps.n_writeback_copies,
              plain.ps.n_writeback_copies);
    }
}

/* Past ATTN_MAX_T keys the fused attention computes the softmax again in
 * its backward instead of keeping it (fused_attention_long.c): the losses
 * stay bitwise those of the separate kernels, on 1 and 2 threads and with
 * the portable GEMM kernel, with backward blocks of queries that end
 * inside the sequence (T = 400 > TG_GEMM_KC); the softmax then gets no
 * memory, so the plan is smaller than with the shorter path's kept softmax
 * would be. */
static void long_attention(void) {
    static const int lens[][2] = {{17, 5}, {40, 3}, {400, 1}}; /* T, batch */
    for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
        int t = lens[c][0], b = lens[c][1];
        char what[64];
        result plain, fused, fused1, pplain, pfused;
        if (!run((config){true, false, 2, 2, false, t, b}, &plain) || !run((config){false, true, 2, 2, false, t, b}, &fused) ||
            !run((config){false, true, 1, 2, false, t, b}, &fused1) || !run((config){true, false, 2, 2, true, t, b}, &pplain) ||
            !run((config){false, true, 2, 2, true, t, b}, &pfused))
            continue;
        snprintf(what, sizeof what, "long attention, T = %d", t);
        same_losses(&plain, &fused, what);
        snprintf(what, sizeof what, "long attention, T = %d, 1 and 2 threads", t);
        same_losses(&fused, &fused1, what);
        snprintf(what, sizeof what, "long attention, T = %d, the portable GEMM kernel", t);
        same_losses(&pplain, &pfused, what);
        CHECK(plain.loss[STEPS - 1] < plain.loss[0], "T = %d: the loss did not fall: %g -> %g", t, plain.loss[0],
              plain.loss[STEPS - 1]);
    }
    /* the groups, and the softmax with no memory */
    tg_model *m = tg_model_new();
    enum { LT = 40, LB = 3 };
    gpt_declare(&net, m, (gpt_config){V, D, 2, 4, LT + 1});
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(LB, LT)}, {"targets", TG_I32, TG_SHAPE(LB, LT)}};
    int64_t off[64];
    tg_plan_param_layout(m, 64, off);
    tg_optim opt = tg_adam(tg_lr_constant(1e-3f));
    tg_compile_req req = {m, loss_fn, NULL, in, 2, &opt, false, 64, off, tg_cpu_fuse, false, false, 1};
    tg_program *p = NULL;
    CHECK_OK(tg_program_build(&req, &p));
    if (p && p->fusion) {
        const cpu_groups *cg = p->fusion->impl;
        int fwd = 0, bwd = 0, remat = 0, kept = 0;
        for (int i = 0; i < cg->n; i++)
            fwd += cg->g[i].kind == CPU_GROUP_ATTN_FWD, bwd += cg->g[i].kind == CPU_GROUP_ATTN_BWD,
                kept += (cg->g[i].kind == CPU_GROUP_ATTN_FWD || cg->g[i].kind == CPU_GROUP_ATTN_BWD) && cg->g[i].att >= 0;
        for (int i = 0; i < p->g->n; i++)
            if (p->g->nodes[i].op == TG_OP_SOFTMAX_CAUSAL)
                remat += p->fusion->role[i] == TG_FUSE_REMAT && p->plan.slot[i].kind == TG_BUF_NONE;
        CHECK(fwd == 2 && bwd == 2 && kept == 0 && remat == 2,
              "T = 40, 2 layers: %d forward and %d backward attention kernels, %d keeping the softmax, %d softmaxes "
              "with no memory", fwd, bwd, kept, remat);
        CHECK_OK(tg_plan_check(p->g, &p->plan, p->fusion));
    } else {
        CHECK(false, "T = 40: nothing was fused");
    }
    tg_program_free(p);
    tg_model_free(m);
}

/* A forward-only compile with the attention captured (so the softmax is
 * kept, not absorbed): logits and attention bitwise as without fusion, for
 * any batch size. */
static tg_tensor predict_fn(tg_graph *g, void *user) {
    (void)user;
    return gpt_forward(g, &net, tg_input(g, "tokens"), true);
}

static void inference(void) {
    enum { NB = 3 };
    static float logits[2][NB * T * V], att[2][NB * 4 * T * T];
    for (int generic = 0; generic <= 1; generic++) {
        tg_model *m = tg_model_new();
        gpt_declare(&net, m, (gpt_config){V, D, 2, 4, T + 1});
        tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(B, T)}, {"targets", TG_I32, TG_SHAPE(B, T)}};
        tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = 2,
                              .optim = tg_adam(tg_lr_constant(1e-3f)), .seed = 9, .threads = 2};
        tg_input_decl fin[] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)}};
        tg_session *s = NULL;
        tg_forward *f = NULL;
        tg_cpu_use_generic_steps(generic);
        CHECK_OK(tg_session_new(&spec, &s));
        if (s) CHECK_OK(tg_forward_attach(s, &(tg_forward_spec){.fn = predict_fn, .inputs = fin, .n_inputs = 1}, &f));
        int32_t tok[NB * T];
        for (int i = 0; i < NB * T; i++) tok[i] = (i * 7 + 3) % V;
        if (f) {
            CHECK_OK(tg_forward_run(f, NB, (tg_feed[]){TG_FEED("tokens", tok, NB * T)}, 1));
            CHECK_OK(tg_forward_output(f, logits[generic], NB * T * V));
            CHECK_OK(tg_forward_read(f, "attn.1", att[generic], NB * 4 * T * T));
        }
        tg_cpu_use_generic_steps(false);
        tg_forward_free(f);
        tg_session_free(s);
        tg_model_free(m);
    }
    CHECK(memcmp(logits[0], logits[1], sizeof logits[0]) == 0, "fused inference logits differ");
    CHECK(memcmp(att[0], att[1], sizeof att[0]) == 0, "fused inference attention differs");
    CHECK(att[0][1] == 0.0f && att[0][T] + att[0][T + 1] > 0.99f, "the captured attention is not causal softmax rows");
}

/* tg_plan_check must reject a plan where a value is read after its memory
 * was given to something else, or before the turn that writes it. */
static void check_catches_bad_turns(void) {
    tg_model *m = tg_model_new();
    gpt_declare(&net, m, (gpt_config){V, D, 1, 4, T + 1});
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(B, T)}, {"targets", TG_I32, TG_SHAPE(B, T)}};
    int64_t off[64];
    tg_plan_param_layout(m, 64, off);
    tg_optim opt = tg_adam(tg_lr_constant(1e-3f));
    opt.clip_grad_norm = 1.0f;
    tg_compile_req req = {m, loss_fn, NULL, in, 2, &opt, false, 64, off, tg_cpu_fuse, false, false, 1};
    tg_program *p = NULL;
    CHECK_OK(tg_program_build(&req, &p));
    if (!p) {
        tg_model_free(m);
        return;
    }
    CHECK(p->fusion && p->fusion->n_groups > 0, "nothing was fused");
    if (p->fusion) {
        const cpu_groups *cg = p->fusion->impl;
        int fwd = 0, bwd = 0, views = 0, adam = 0;
        for (int i = 0; i < cg->n; i++)
            fwd += cg->g[i].kind == CPU_GROUP_ATTN_FWD, bwd += cg->g[i].kind == CPU_GROUP_ATTN_BWD,
                adam += cg->g[i].kind == CPU_GROUP_ADAM;
        CHECK(adam == tg_model_param_count(m), "%d Adam groups for %d params", adam, tg_model_param_count(m));
        CHECK(cg->n_sq == tg_model_param_count(m), "%d clip-norm terms in one job for %d params", cg->n_sq,
              tg_model_param_count(m));
        for (int i = 0; i < p->g->n; i++) views += p->fusion->role[i] == TG_FUSE_VIEW;
        /* one layer: its attention each way; q, k, v and the output gradient read in place */
        CHECK(fwd == 1 && bwd == 1 && views == 4, "%d forward and %d backward attention kernels, %d permutes read in place",
              fwd, bwd, views);
    }
    CHECK_OK(tg_plan_check(p->g, &p->plan, p->fusion));
    int fused = 0;
    for (int i = 0; i < p->plan.n; i++) fused += p->plan.slot[i].kind == TG_BUF_NONE;
    CHECK(fused > 0, "no value was kept inside a fused kernel");
    /* A scratch value read later than its class's end. */
    tg_plan *pl = &p->plan;
    int victim = -1;
    for (int i = 0; i < pl->n && victim < 0; i++)
        if (pl->slot[i].root == i && pl->slot[i].arena == TG_ARENA_SCRATCH && pl->slot[i].last > pl->slot[i].at)
            victim = i;
    CHECK(victim >= 0, "no scratch class read after it is written");
    if (victim >= 0) {
        int keep = pl->slot[victim].last;
        for (int i = 0; i < pl->n; i++)
            if (pl->slot[i].root == victim) pl->slot[i].last = pl->slot[victim].at;
        CHECK(tg_plan_check(p->g, pl, p->fusion) == TG_ERR_STATE, "plan_check accepted a read after the value's life");
        for (int i = 0; i < pl->n; i++)
            if (pl->slot[i].root == victim) pl->slot[i].last = keep;
        CHECK_OK(tg_plan_check(p->g, pl, p->fusion));
    }
    /* A fused group's output written before a value it reads exists. */
    int out = -1;
    for (int i = 0; i < pl->n && out < 0; i++)
        if (p->fusion->role[i] == TG_FUSE_OUTPUT) out = i;
    if (out >= 0) {
        int keep = pl->slot[out].at;
        pl->slot[out].at = 0;
        CHECK(tg_plan_check(p->g, pl, p->fusion) == TG_ERR_STATE, "plan_check accepted a kernel that runs before its inputs");
        pl->slot[out].at = keep;
    }
    tg_program_free(p);
    tg_model_free(m);
}

/* bench_tg's addition loss: mean cross-entropy over the 3 result digits. */
static tg_tensor digits_loss(tg_graph *g, void *user) {
    (void)user;
    static const float mask[T] = {0, 0, 0, 0, 0, 1, 1, 1};
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE);
    return tg_mul_s(tg_sum(tg_mul(ce, tg_constant(g, TG_SHAPE(T), mask)), TG_ALL, false), 1.0f / (128 * 3));
}

/* The memory target, as make bench measures it: the addition
 * transformer (B=128, T=8, 3 layers, AdamW with clipping) must plan at most
 * 11.6 MB in all (half of upstream's pooled 23.3 MB). Compile only. */
static void addition_plan(void) {
    tg_model *m = tg_model_new();
    gpt_declare(&net, m, (gpt_config){V, D, 3, 4, T + 1});
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(128, T)}, {"targets", TG_I32, TG_SHAPE(128, T)}};
    tg_optim opt = tg_adamw(tg_lr_linear(5e-3f, 5e-4f, 1500), 0.01f);
    opt.clip_grad_norm = 1.0f;
    tg_train_spec spec = {.model = m, .loss = digits_loss, .inputs = in, .n_inputs = 2, .optim = opt, .seed = 1};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    tg_plan_stats ps = {0};
    if (s) CHECK_OK(tg_session_plan_stats(s, &ps));
    CHECK(ps.planned_bytes > 0 && ps.planned_bytes <= 11600000, "the addition transformer plans %.3f MB (target 11.6)",
          (double)ps.planned_bytes / 1e6);
    CHECK(ps.n_writeback_copies == 0, "%d writebacks copied", ps.n_writeback_copies);
    printf("test_fusion: the addition transformer plans %lld bytes\n", (long long)ps.planned_bytes);
    tg_session_free(s);
    tg_model_free(m);
}

/* examples/gpt.h takes any number of layers: 24 of them (the largest
 * GPT-2 has 48) are all declared and all trained. */
static void many_layers(void) {
    config c = {.layers = 24, .threads = 1, .recompute = true, .t = 4, .b = 2};
    result r;
    CHECK(run(c, &r), "a GPT of 24 layers did not train");
    tg_model *m = tg_model_new();
    CHECK(gpt_declare(&net, m, (gpt_config){V, D, 24, 4, 5}), "gpt_declare of 24 layers failed");
    CHECK(tg_model_find(m, "layers.23.mlp.down.W") >= 0 && tg_model_param_count(m) == 2 + 24 * 12 + 2,
          "a GPT of 24 layers declared %d params", tg_model_param_count(m));
    tg_model_free(m);
}

/* The clip norm's sum over a param of more than 65536 elements (a sum the
 * threads share in fixed blocks): its fused kernel and the plain mul and
 * sum kernels give the same bits, on 1, 2 and 3 threads. */
enum { LW = 600, LROWS = 8 }; /* W [600, 600]: 360000 elements, six blocks, the last one short */
static tg_linear long_lin;

static tg_tensor long_loss(tg_graph *g, void *user) {
    (void)user;
    return tg_mse(tg_linear_fwd(g, &long_lin, tg_input(g, "x")), tg_input(g, "y"));
}

static bool long_run(bool generic, int threads, float *loss, float *w) {
    tg_model *m = tg_model_new();
    long_lin = tg_linear_new(m, "lin", LW, LW, true);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(LROWS, LW)}, {"y", TG_F32, TG_SHAPE(LROWS, LW)}};
    tg_optim opt = tg_adamw(tg_lr_constant(1e-2f), 0.01f);
    opt.clip_grad_norm = 1e-3f; /* below the norm at every step: its bits reach every update */
    tg_train_spec spec = {.model = m, .loss = long_loss, .inputs = in, .n_inputs = 2, .optim = opt, .seed = 9,
                          .threads = threads};
    static float x[LROWS * LW], y[LROWS * LW];
    uint64_t rng = 5;
    for (int i = 0; i < LROWS * LW; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((rng >> 40) % 2001) / 1000.0f - 1.0f;
        y[i] = (float)((rng >> 20) % 2001) / 1000.0f - 1.0f;
    }
    tg_cpu_use_generic_steps(generic);
    tg_session *s = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_cpu_use_generic_steps(false);
    CHECK(st == TG_OK, "tg_session_new: %s", tg_last_error());
    tg_feed feeds[] = {TG_FEED("x", x, LROWS * LW), TG_FEED("y", y, LROWS * LW)};
    bool ok = st == TG_OK;
    for (int i = 0; ok && i < 4; i++) ok = tg_session_step(s, feeds, 2, &loss[i]) == TG_OK;
    ok = ok && tg_session_get_param(s, "lin.W", w, LW * LW) == TG_OK;
    CHECK(ok, "training failed: %s", tg_last_error());
    tg_session_free(s);
    tg_model_free(m);
    return ok;
}

static void long_clip_norm(void) {
    static float w_ref[LW * LW], w[LW * LW];
    float ref[4], loss[4];
    if (!long_run(true, 1, ref, w_ref)) return;
    for (int c = 0; c < 4; c++) {
        bool generic = c == 3;
        int threads = c == 3 ? 2 : c + 1;
        if (!long_run(generic, threads, loss, w)) continue;
        CHECK(memcmp(ref, loss, sizeof ref) == 0 && memcmp(w_ref, w, sizeof w) == 0,
              "long clip-norm sums, %s on %d threads: losses or weights differ from plain kernels on 1 (%.9g vs %.9g)",
              generic ? "plain kernels" : "fused", threads, loss[3], ref[3]);
    }
}

int main(void) {
    many_layers();
    addition_plan();
    losses_unchanged();
    long_attention();
    long_clip_norm();
    inference();
    check_catches_bad_turns();
    return check_summary("test_fusion");
}
