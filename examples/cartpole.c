/* REINFORCE on the cart-pole (upstream's cartpole sample): a 4-16-2 tanh
 * policy learns to balance a pole on a cart by pushing it left or right,
 * with no target but its own episodes' returns.
 *
 * The environment is the classic one (Barto, Sutton and Anderson 1983, as
 * in OpenAI Gym): a step of 0.02 s, reward 1 per step until the pole leans
 * past 12 degrees or the cart leaves [-2.4, 2.4], at most T steps. An
 * iteration runs K environments in lockstep for T steps; a forward session
 * attached to the training session samples each action in the graph
 * (tg_categorical, i32 out). Then one training step on all T x K slots:
 *
 *   loss = sum(-log pi(a | s) * R * mask) / (T * K)
 *
 * where R is the discounted return (gamma 0.99) normalized over the batch
 * and mask is 0 on the slots after an episode ended (the shapes are
 * static, so they are masked, not cut). Adam with a cosine decay. Ends
 * with `mean_episode_length=<value>` over the last 20 iterations (exits 2
 * below 195). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define K 16   /* environments */
#define T 200  /* steps per episode at most */
#define N (T * K)
#define HIDDEN 16
#define GAMMA 0.99
#define WINDOW 20
#define TARGET_LENGTH 195.0

typedef struct {
    tg_linear l1, l2;
} policy;

typedef struct {
    double x, x_dot, th, th_dot;
    bool done;
} cart;

static void cart_reset(cart *c, uint64_t *rng) {
    c->x = ex_uniform(rng) * 0.1 - 0.05, c->x_dot = ex_uniform(rng) * 0.1 - 0.05;
    c->th = ex_uniform(rng) * 0.1 - 0.05, c->th_dot = ex_uniform(rng) * 0.1 - 0.05;
    c->done = false;
}

/* One 0.02 s Euler step of the classic equations with a 10 N push. */
static void cart_step(cart *c, int action) {
    const double g = 9.8, m_cart = 1.0, m_pole = 0.1, half_len = 0.5, tau = 0.02;
    double f = action ? 10.0 : -10.0, ct = cos(c->th), st = sin(c->th), total = m_cart + m_pole;
    double tmp = (f + m_pole * half_len * c->th_dot * c->th_dot * st) / total;
    double th_acc = (g * st - ct * tmp) / (half_len * (4.0 / 3.0 - m_pole * ct * ct / total));
    double x_acc = tmp - m_pole * half_len * th_acc * ct / total;
    c->x += tau * c->x_dot, c->x_dot += tau * x_acc;
    c->th += tau * c->th_dot, c->th_dot += tau * th_acc;
    c->done = fabs(c->x) > 2.4 || fabs(c->th) > 12.0 * EX_PI / 180.0;
}

static tg_tensor logits(tg_graph *g, const policy *p, tg_tensor s) {
    return tg_linear_fwd(g, &p->l2, tg_tanh(tg_linear_fwd(g, &p->l1, s)));
}

static int64_t rows = N; /* the slots this rank trains on (--dp: its share; the rollouts are every rank's) */

static tg_tensor pg_loss(tg_graph *g, void *u) {
    tg_tensor nll = tg_cross_entropy(logits(g, u, tg_input(g, "states")), tg_input(g, "actions"), TG_REDUCTION_NONE);
    tg_tensor w = tg_mul(tg_input(g, "returns"), tg_input(g, "mask"));
    return tg_mul_s(tg_sum(tg_mul(nll, w), TG_ALL, false), 1.0f / (float)rows);
}

static tg_tensor act(tg_graph *g, void *u) { return tg_categorical(logits(g, u, tg_input(g, "state"))); }

typedef struct {
    float states[N * 4], returns[N], mask[N];
    int32_t actions[N];
} rollout;

/* K episodes in lockstep; slot t * K + k. Returns the mean episode length, or -1 on an error. */
static double play(tg_forward *f, rollout *r, uint64_t *rng) {
    cart env[K];
    float state[K * 4];
    int32_t a[K];
    int length[K] = {0};
    for (int k = 0; k < K; k++) cart_reset(&env[k], rng);
    memset(r->mask, 0, sizeof r->mask);
    for (int t = 0; t < T; t++) {
        for (int k = 0; k < K; k++) {
            float *s = state + k * 4;
            s[0] = (float)env[k].x, s[1] = (float)env[k].x_dot, s[2] = (float)env[k].th, s[3] = (float)env[k].th_dot;
        }
        tg_feed fs = TG_FEED("state", state, K * 4);
        if (tg_forward_run(f, K, &fs, 1) != TG_OK || tg_forward_output(f, a, K) != TG_OK) return -1;
        for (int k = 0; k < K; k++) {
            if (env[k].done) continue;
            int i = t * K + k;
            memcpy(r->states + i * 4, state + k * 4, sizeof(float) * 4);
            r->actions[i] = a[k], r->mask[i] = 1;
            length[k]++;
            cart_step(&env[k], a[k]);
        }
    }
    /* Discounted returns per episode, then normalized over the live slots. */
    double sum = 0, sq = 0, live = 0, total = 0;
    for (int k = 0; k < K; k++) {
        double ret = 0;
        for (int t = length[k] - 1; t >= 0; t--) r->returns[t * K + k] = (float)(ret = 1.0 + GAMMA * ret);
        for (int t = length[k]; t < T; t++) r->returns[t * K + k] = 0;
        total += length[k];
    }
    for (int i = 0; i < N; i++) sum += r->mask[i] * r->returns[i], live += r->mask[i];
    double mean = sum / live;
    for (int i = 0; i < N; i++) sq += r->mask[i] * (r->returns[i] - mean) * (r->returns[i] - mean);
    double sd = sqrt(sq / live) + 1e-8;
    for (int i = 0; i < N; i++) r->returns[i] = r->mask[i] ? (float)((r->returns[i] - mean) / sd) : 0.0f;
    return total / K;
}

int example_cartpole(const tg_example_opts *o) {
    int64_t iters = o->steps > 0 ? o->steps : 300, first;
    if (!(rows = ex_shard(o, N, &first))) return 2;
    tg_model *m = tg_model_new();
    policy net = {tg_linear_new(m, "l1", 4, HIDDEN, true), tg_linear_new(m, "l2", HIDDEN, 2, true)};
    tg_input_decl in[] = {{"states", TG_F32, TG_SHAPE(rows, 4)}, {"actions", TG_I32, TG_SHAPE(rows)},
                          {"returns", TG_F32, TG_SHAPE(rows)}, {"mask", TG_F32, TG_SHAPE(rows)}};
    tg_input_decl ain[] = {{"state", TG_F32, TG_SHAPE(K, 4)}};
    tg_train_spec spec = {.model = m, .loss = pg_loss, .user = &net, .inputs = in, .n_inputs = 4,
                          .optim = tg_adam(tg_lr_cosine(1e-2f, 1e-3f, iters)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    tg_forward_spec aspec = {.fn = act, .user = &net, .inputs = ain, .n_inputs = 1};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    rollout *r = calloc(1, sizeof *r); /* slots no episode reaches stay zero */
    int rc = 0;
    if (!r || tg_session_new(&spec, &s) != TG_OK || tg_forward_attach(s, &aspec, &f) != TG_OK ||
        tg_forward_set_seed(f, o->seed) != TG_OK) {
        fprintf(stderr, "error: %s\n", r ? tg_last_error() : "out of memory");
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "cartpole", &spec, s, &rc)) goto done;
    if (!o->quiet)
        printf("cartpole: 4-%d-2 tanh policy, %d environments x %d steps per iteration, %lld iterations\n", HIDDEN, K,
               T, (long long)iters);
    ex_run run;
    if (ex_run_start(&run, o, iters, N, "mean_episode_length")) {
        rc = 1;
        goto done;
    }
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 17;
    double recent[WINDOW] = {0}, window = 0;
    float loss = 0;
    for (int64_t it = 1; it <= iters && rc == 0; it++) {
        double len = play(f, r, &rng);
        tg_feed feeds[] = {TG_FEED("states", r->states + first * 4, rows * 4), TG_FEED("actions", r->actions + first, rows),
                           TG_FEED("returns", r->returns + first, rows), TG_FEED("mask", r->mask + first, rows)};
        if (len < 0 || tg_session_step(s, feeds, 4, &loss) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            rc = 1;
            break;
        }
        recent[it % WINDOW] = len;
        window = 0;
        for (int i = 0; i < WINDOW; i++) window += recent[i] / (it < WINDOW ? (double)it : WINDOW);
        if (ex_run_due(&run, it) && it < iters) ex_run_step(&run, it, loss, tg_lr_at(&spec.optim.lr, it), &window);
    }
    if (rc == 0) {
        ex_final_loss(o, &run, s, loss);
        ex_run_step(&run, iters, loss, tg_lr_at(&spec.optim.lr, iters), &window);
    }
    if (ex_run_end(&run)) rc = 1;
    if (rc == 0) {
        printf("mean_episode_length=%.1f\n", window);
        rc = ex_target("mean_episode_length", window, ">=", TARGET_LENGTH);
    }
done:
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    free(r);
    return rc;
}
