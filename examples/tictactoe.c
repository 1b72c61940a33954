/* Tic-tac-toe by policy gradient (upstream's tic-tac-toe sample): one
 * 27-64-64-9 tanh MLP plays both sides and learns from nothing but the
 * games' outcomes.
 *
 * A board is seen from the side to move: 9 cells each of empty, mine,
 * theirs (27 inputs). Illegal moves are masked in the graph: an input adds
 * -1e9 to the logits of occupied cells, so they get probability 0 and no
 * gradient, in sampling and in the loss alike. An iteration plays K games
 * in lockstep, sampling each move in the graph (tg_categorical): a quarter
 * are self-play, the rest put the policy against a uniformly random player
 * (O in half the games, X in a quarter: O is the harder side), and 5% of
 * the policy's own moves are random too. Every move the policy made is
 * then weighted by the game's outcome for its side (+1 win, 0 draw, -1
 * loss) times DISCOUNT^(plies from the move to the end), normalized over
 * the batch:
 *
 *   loss = sum(-log pi(a | s) * outcome * mask) / (9 * K)
 *
 * with mask 0 on random moves and on the slots after a game ended, and on
 * losing moves already below probability e^-2.5. Plain self-play outcomes
 * credit every move alike and stall around 0.5 here; the random games and
 * the discount (the last moves decide a game) reach about 0.93, and the
 * floor on losing moves and 256 games an iteration about 0.99. Adam with a
 * cosine decay.
 * The trained policy then plays greedily (tg_argmax) 1000 games as X and
 * 1000 as O against a uniformly random player, and 1000 against a perfect
 * minimax player (which picks at random among its best moves). Ends with
 * `win_or_draw_rate=<value>`, the lower of its two rates against the random
 * player (exits 2 below 0.98). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define K 256          /* games per iteration */
#define N (9 * K)      /* move slots per iteration */
#define HIDDEN 64
#define EVAL_GAMES 1000
#define TARGET_RATE 0.99
#define LR 3e-3f
#define LOG_FLOOR 2.5f /* -log p beyond which a losing move is left alone */
#define DISCOUNT 0.3   /* a move's credit per ply between it and the end */
#define EXPLORE 0.05   /* moves made at random, left out of the loss */

typedef struct {
    tg_linear l1, l2, out;
} policy;

/* ---- the game ------------------------------------------------------------ */

typedef struct {
    int8_t cell[9]; /* 0 empty, 1 X, 2 O */
    int8_t turn;    /* 1 or 2: the side to move */
    int8_t winner;  /* 0 none yet or a draw, 1 X, 2 O */
    bool done;
} game;

static const int8_t lines[8][3] = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {0, 3, 6}, {1, 4, 7}, {2, 5, 8}, {0, 4, 8}, {2, 4, 6}};

static void game_new(game *g) { *g = (game){.turn = 1}; }

static void game_move(game *g, int c) {
    g->cell[c] = g->turn;
    for (int l = 0; l < 8; l++)
        if (g->cell[lines[l][0]] == g->turn && g->cell[lines[l][1]] == g->turn && g->cell[lines[l][2]] == g->turn)
            g->winner = g->turn, g->done = true;
    bool full = true;
    for (int i = 0; i < 9; i++) full &= g->cell[i] != 0;
    g->done |= full;
    g->turn = (int8_t)(3 - g->turn);
}

/* The board from the mover's side [27], and the logit mask of its occupied cells [9]. */
static void game_pack(const game *g, float *state, float *illegal) {
    for (int i = 0; i < 9; i++) {
        state[i] = g->cell[i] == 0, state[9 + i] = g->cell[i] == g->turn;
        state[18 + i] = g->cell[i] != 0 && g->cell[i] != g->turn;
        illegal[i] = g->cell[i] ? -1e9f : 0.0f;
    }
}

static int random_move(const game *g, uint64_t *rng) {
    int free_cells[9], n = 0;
    for (int i = 0; i < 9; i++)
        if (!g->cell[i]) free_cells[n++] = i;
    return free_cells[ex_rand(rng) % (uint64_t)n];
}

/* Minimax value of a position for the side to move (+1 win, 0 draw, -1
 * loss), memoized over the 3^9 boards (the mover follows from the board). */
static int8_t memo[19683];
static int board_id(const game *g) {
    int id = 0;
    for (int i = 0; i < 9; i++) id = id * 3 + g->cell[i];
    return id;
}
static int value(const game *g) {
    int id = board_id(g);
    if (memo[id]) return memo[id] - 2;
    int best = -2;
    for (int c = 0; c < 9; c++) {
        if (g->cell[c]) continue;
        game n = *g;
        game_move(&n, c);
        int v = n.done ? (n.winner ? 1 : 0) : -value(&n);
        if (v > best) best = v;
    }
    memo[id] = (int8_t)(best + 2);
    return best;
}
static int perfect_move(const game *g, uint64_t *rng) {
    int best[9], n = 0, top = -2;
    for (int c = 0; c < 9; c++) {
        if (g->cell[c]) continue;
        game m = *g;
        game_move(&m, c);
        int v = m.done ? (m.winner ? 1 : 0) : -value(&m);
        if (v > top) top = v, n = 0;
        if (v == top) best[n++] = c;
    }
    return best[ex_rand(rng) % (uint64_t)n];
}

/* ---- the model ----------------------------------------------------------- */

static tg_tensor masked_logits(tg_graph *g, const policy *p, tg_tensor state, tg_tensor illegal) {
    tg_tensor h = tg_tanh(tg_linear_fwd(g, &p->l1, state));
    h = tg_tanh(tg_linear_fwd(g, &p->l2, h));
    return tg_add(tg_linear_fwd(g, &p->out, h), illegal);
}

static int64_t rows = N; /* the slots this rank trains on (--dp: its share; the games are every rank's) */

static tg_tensor pg_loss(tg_graph *g, void *u) {
    tg_tensor lg = masked_logits(g, u, tg_input(g, "states"), tg_input(g, "illegal"));
    tg_tensor nll = tg_cross_entropy(lg, tg_input(g, "actions"), TG_REDUCTION_NONE);
    tg_tensor w = tg_mul(tg_input(g, "outcomes"), tg_input(g, "mask"));
    /* A move that lost stops being pushed down once its probability is
     * below e^-2.5: -log p has no floor, and without this the losing moves'
     * logits run off to -infinity and take the policy with them. */
    tg_tensor live = tg_cast(tg_less_s(tg_stop_gradient(nll), LOG_FLOOR), TG_F32);
    w = tg_where(tg_less_s(w, 0.0f), tg_mul(w, live), w);
    return tg_mul_s(tg_sum(tg_mul(nll, w), TG_ALL, false), 1.0f / (float)rows);
}
static tg_tensor sample_move(tg_graph *g, void *u) {
    return tg_categorical(masked_logits(g, u, tg_input(g, "state"), tg_input(g, "illegal")));
}
static tg_tensor best_move(tg_graph *g, void *u) {
    return tg_argmax(masked_logits(g, u, tg_input(g, "state"), tg_input(g, "illegal")), -1, false);
}

typedef struct {
    float states[N * 27], illegal[N * 9], outcomes[N], mask[N];
    int32_t actions[N];
} rollout;

/* Who plays the policy in game k of an iteration, by k % 8: itself (0),
 * or a random or a perfect player on side X (1) or O (2). */
static const int opponent_side[8] = {0, 0, 2, 1, 1, 2, 1, 1};
#define PERFECT_FROM 4 /* kinds 4..7 meet the perfect player */

/* K games in lockstep, slot move * K + k. */
static tg_status play(tg_forward *f, rollout *r, uint64_t *rng) {
    game gs[K];
    int8_t side[N] = {0};
    float state[K * 27], illegal[K * 9];
    int32_t a[K];
    for (int k = 0; k < K; k++) game_new(&gs[k]);
    memset(r->mask, 0, sizeof r->mask);
    memset(r->outcomes, 0, sizeof r->outcomes);
    for (int move = 0; move < 9; move++) {
        for (int k = 0; k < K; k++) game_pack(&gs[k], state + k * 27, illegal + k * 9);
        tg_feed fs[] = {TG_FEED("state", state, K * 27), TG_FEED("illegal", illegal, K * 9)};
        tg_status st = tg_forward_run(f, K, fs, 2);
        if (st == TG_OK) st = tg_forward_output(f, a, K);
        if (st != TG_OK) return st;
        for (int k = 0; k < K; k++) {
            if (gs[k].done) continue;
            int i = move * K + k;
            int kind = k % 8, opp = opponent_side[kind]; /* 0 in self-play */
            bool theirs = opp == gs[k].turn, explore = theirs || ex_uniform(rng) < EXPLORE;
            int c = !explore ? a[k] : theirs && kind >= PERFECT_FROM ? perfect_move(&gs[k], rng) : random_move(&gs[k], rng);
            memcpy(r->states + i * 27, state + k * 27, sizeof(float) * 27);
            memcpy(r->illegal + i * 9, illegal + k * 9, sizeof(float) * 9);
            r->actions[i] = c, r->mask[i] = !explore, side[i] = gs[k].turn;
            game_move(&gs[k], c);
        }
    }
    /* A move's credit decays with the plies between it and the end: the
     * last moves decided the game most surely. */
    int plies[K] = {0};
    for (int i = 0; i < N; i++) plies[i % K] += side[i] != 0;
    double sum = 0, sq = 0, live = 0;
    for (int i = 0; i < N; i++) {
        int w = gs[i % K].winner, left = plies[i % K] - 1 - i / K;
        if (r->mask[i]) r->outcomes[i] = (float)((w == 0 ? 0.0 : w == side[i] ? 1.0 : -1.0) * pow(DISCOUNT, left));
        sum += r->outcomes[i], live += r->mask[i];
    }
    double mean = sum / live;
    for (int i = 0; i < N; i++) sq += r->mask[i] * (r->outcomes[i] - mean) * (r->outcomes[i] - mean);
    double sd = sqrt(sq / live) + 1e-8;
    for (int i = 0; i < N; i++) r->outcomes[i] = r->mask[i] ? (float)((r->outcomes[i] - mean) / sd) : 0.0f;
    return TG_OK;
}

/* EVAL_GAMES games of the greedy policy as `me` (1 X, 2 O) against an
 * opponent (perfect or random). Counts wins and draws. */
static tg_status match(tg_forward *greedy, int me, bool perfect, uint64_t *rng, int *wins, int *draws) {
    static game gs[EVAL_GAMES];
    static float state[EVAL_GAMES * 27], illegal[EVAL_GAMES * 9];
    static int32_t a[EVAL_GAMES];
    for (int i = 0; i < EVAL_GAMES; i++) game_new(&gs[i]);
    for (int ply = 0; ply < 9; ply++) {
        if ((ply % 2 == 0) == (me == 1)) { /* the model's ply, for every game at once */
            for (int i = 0; i < EVAL_GAMES; i++) game_pack(&gs[i], state + i * 27, illegal + i * 9);
            tg_feed fs[] = {TG_FEED("state", state, EVAL_GAMES * 27), TG_FEED("illegal", illegal, EVAL_GAMES * 9)};
            tg_status st = tg_forward_run(greedy, EVAL_GAMES, fs, 2);
            if (st == TG_OK) st = tg_forward_output(greedy, a, EVAL_GAMES);
            if (st != TG_OK) return st;
        }
        for (int i = 0; i < EVAL_GAMES; i++) {
            if (gs[i].done) continue;
            game_move(&gs[i], gs[i].turn == me ? a[i] : perfect ? perfect_move(&gs[i], rng) : random_move(&gs[i], rng));
        }
    }
    *wins = *draws = 0;
    for (int i = 0; i < EVAL_GAMES; i++) *wins += gs[i].winner == me, *draws += gs[i].winner == 0;
    return TG_OK;
}

int example_tictactoe(const tg_example_opts *o) {
    int64_t iters = o->steps > 0 ? o->steps : 20000, first;
    if (!(rows = ex_shard(o, N, &first))) return 2;
    tg_model *m = tg_model_new();
    policy net = {tg_linear_new(m, "l1", 27, HIDDEN, true), tg_linear_new(m, "l2", HIDDEN, HIDDEN, true),
                  tg_linear_new(m, "out", HIDDEN, 9, true)};
    tg_input_decl in[] = {{"states", TG_F32, TG_SHAPE(rows, 27)}, {"illegal", TG_F32, TG_SHAPE(rows, 9)},
                          {"actions", TG_I32, TG_SHAPE(rows)}, {"outcomes", TG_F32, TG_SHAPE(rows)},
                          {"mask", TG_F32, TG_SHAPE(rows)}};
    tg_input_decl pin[] = {{"state", TG_F32, TG_SHAPE(TG_BATCH, 27)}, {"illegal", TG_F32, TG_SHAPE(TG_BATCH, 9)}};
    tg_train_spec spec = {.model = m, .loss = pg_loss, .user = &net, .inputs = in, .n_inputs = 5,
                          .optim = tg_adam(tg_lr_cosine(LR, LR / 10, iters)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    tg_forward_spec sspec = {.fn = sample_move, .user = &net, .inputs = pin, .n_inputs = 2};
    tg_forward_spec gspec = {.fn = best_move, .user = &net, .inputs = pin, .n_inputs = 2};
    tg_session *s = NULL;
    tg_forward *smp = NULL, *greedy = NULL;
    rollout *r = calloc(1, sizeof *r); /* slots no game reaches stay zero */
    int rc = 0;
    if (!r || tg_session_new(&spec, &s) != TG_OK || tg_forward_attach(s, &sspec, &smp) != TG_OK ||
        tg_forward_attach(s, &gspec, &greedy) != TG_OK || tg_forward_set_seed(smp, o->seed) != TG_OK) {
        fprintf(stderr, "error: %s\n", r ? tg_last_error() : "out of memory");
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "tictactoe", &spec, s, &rc)) goto done;
    if (!o->quiet)
        printf("tictactoe: 27-%d-%d-9 tanh policy, %d games per iteration, %lld iterations\n", HIDDEN, HIDDEN,
               K, (long long)iters);
    ex_run run;
    if (ex_run_start(&run, o, iters, K, NULL)) {
        rc = 1;
        goto done;
    }
    float loss = 0;
    tg_status st = TG_OK;
    uint64_t play_rng = o->seed * 0x9e3779b97f4a7c15ull + 19;
    for (int64_t it = 1; it <= iters && st == TG_OK; it++) {
        st = play(smp, r, &play_rng);
        tg_feed feeds[] = {TG_FEED("states", r->states + first * 27, rows * 27),
                           TG_FEED("illegal", r->illegal + first * 9, rows * 9), TG_FEED("actions", r->actions + first, rows),
                           TG_FEED("outcomes", r->outcomes + first, rows), TG_FEED("mask", r->mask + first, rows)};
        if (st == TG_OK) st = tg_session_step(s, feeds, 5, &loss);
        if (st == TG_OK && ex_run_due(&run, it)) ex_run_step(&run, it, loss, tg_lr_at(&spec.optim.lr, it), NULL);
    }
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    if (ex_run_end(&run)) rc = 1;
    uint64_t rng = 12345; /* the same opponents' moves for every run */
    int wx = 0, dx = 0, wo = 0, d_o = 0, pwx = 0, pdx = 0, pwo = 0, pdo = 0;
    if (st == TG_OK) st = match(greedy, 1, false, &rng, &wx, &dx);
    if (st == TG_OK) st = match(greedy, 2, false, &rng, &wo, &d_o);
    if (st == TG_OK) st = match(greedy, 1, true, &rng, &pwx, &pdx);
    if (st == TG_OK) st = match(greedy, 2, true, &rng, &pwo, &pdo);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    double as_x = (double)(wx + dx) / EVAL_GAMES, as_o = (double)(wo + d_o) / EVAL_GAMES;
    double perfect_x = (double)pdx / EVAL_GAMES, perfect_o = (double)pdo / EVAL_GAMES;
    printf("against a random player: as X %d wins, %d draws, %d losses; as O %d wins, %d draws, %d losses\n", wx, dx,
           EVAL_GAMES - wx - dx, wo, d_o, EVAL_GAMES - wo - d_o);
    printf("win_or_draw_rate=%.3f\n", as_x < as_o ? as_x : as_o);
    printf("against a perfect player: draw rate %.3f as X, %.3f as O\n", perfect_x, perfect_o);
    double rate = perfect_x < perfect_o ? perfect_x : perfect_o; /* the weaker side */
    printf("perfect_draw_rate=%.3f\n", rate);
    if (rc == 0) rc = ex_target("perfect_draw_rate", rate, ">=", TARGET_RATE);
done:
    tg_forward_free(greedy);
    tg_forward_free(smp);
    tg_session_free(s);
    tg_model_free(m);
    free(r);
    return rc;
}
