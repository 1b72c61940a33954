/* The addition transformer (upstream's main sample): learns two-digit
 * addition "ab+cd=" -> the three sum digits, least significant first.
 * V=12 (digits, '+', '='), D=64, 3 pre-LN blocks, 4 heads, T=8, B=128,
 * tied embeddings, learned positions; AdamW with a linear LR from 5e-3 to
 * 5e-4 over 1500 steps, weight decay 0.01, gradient clip 1.0; the loss
 * covers only the 3 result digits. 20% of the (a, b) pairs never appear in
 * training; held-out accuracy is measured on all of them, generating the 3
 * digits autoregressively through a B=1 forward compile. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "examples.h"
#include "gpt.h"

enum { V = 12, D = 64, LAYERS = 3, HEADS = 4, SEQ = 9, T = SEQ - 1, B = 128, PLUS = 10, EQ = 11 };

/* A pseudo-random 20% of the 10000 pairs (exactly 2000, spread over every
 * pair of last digits). Fibonacci hashing: the product's high bits depend
 * on every digit. (A linear rule such as (31 p + 7) % 5 collapses to
 * b % 5 == 3: no training pair would end b in 3 or 8.) */
static bool is_test_pair(int a, int b) { return ((uint32_t)(a * 100 + b) * 0x9E3779B1u >> 16) % 5 == 0; }

/* The 9 tokens of a + b: a1 a0 + b1 b0 = s0 s1 s2. */
static void encode(int a, int b, int32_t *seq) {
    int s = a + b;
    int32_t v[SEQ] = {a / 10, a % 10, PLUS, b / 10, b % 10, EQ, s % 10, (s / 10) % 10, s / 100};
    memcpy(seq, v, sizeof v);
}

static gpt_model net;
static int64_t rows; /* this rank's share of the B rows (all of them alone) */
static const float result_mask[T] = {0, 0, 0, 0, 0, 1, 1, 1}; /* targets at t = 5..7 are the sum digits */

/* tokens, targets i32 [B, T] -> mean cross-entropy over the result digits */
static tg_tensor loss_fn(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE); /* [B, T] */
    tg_tensor masked = tg_mul(ce, tg_constant(g, TG_SHAPE(T), result_mask));
    return tg_mul_s(tg_sum(masked, TG_ALL, false), 1.0f / (float)(rows * 3));
}

static tg_tensor predict_fn(tg_graph *g, void *user) {
    (void)user;
    return gpt_forward(g, &net, tg_input(g, "tokens"), true);
}

/* Generates the 3 sum digits of a + b one at a time; returns the sum. */
static int predict(tg_forward *fwd, int a, int b, tg_status *st) {
    int32_t seq[SEQ], tokens[T] = {0};
    float logits[T * V];
    encode(a, b, seq);
    memcpy(tokens, seq, 6 * sizeof(int32_t));
    int sum = 0, scale = 1;
    for (int d = 0; d < 3; d++) {
        if ((*st = tg_forward_run(fwd, 1, (tg_feed[]){TG_FEED("tokens", tokens, T)}, 1)) != TG_OK) return -1;
        if ((*st = tg_forward_output(fwd, logits, T * V)) != TG_OK) return -1;
        const float *row = logits + (5 + d) * V; /* the position that predicts digit d */
        int best = 0;
        for (int v = 1; v < 10; v++)
            if (row[v] > row[best]) best = v;
        if (d < 2) tokens[6 + d] = best;
        sum += best * scale;
        scale *= 10;
    }
    return sum;
}

int example_addition(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 1500, first;
    if (!(rows = ex_shard(o, B, &first))) return 2;
    tg_model *m = tg_model_new();
    gpt_declare(&net, m, (gpt_config){V, D, LAYERS, HEADS, SEQ});
    tg_input_decl inputs[] = {{"tokens", TG_I32, TG_SHAPE(rows, T)}, {"targets", TG_I32, TG_SHAPE(rows, T)}};
    tg_optim opt = tg_adamw(tg_lr_linear(ex_lr(o, 5e-3f), ex_lr_at(o, 5e-3f, 5e-4f), 1500), 0.01f);
    opt.clip_grad_norm = 1.0f;
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = inputs, .n_inputs = 2, .optim = opt,
                          .seed = o->seed, .backend = o->backend, .threads = o->threads, .comm = o->comm};
    tg_session *s = NULL;
    tg_forward *fwd = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_input_decl fin[] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)}};
    tg_forward_spec fspec = {.fn = predict_fn, .inputs = fin, .n_inputs = 1};
    if (st == TG_OK) st = tg_forward_attach(s, &fspec, &fwd);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tg_session_free(s);
        tg_model_free(m);
        return 1;
    }
    int rc;
    if (ex_compile_only(o, "addition", &spec, s, &rc)) {
        tg_forward_free(fwd);
        tg_session_free(s);
        tg_model_free(m);
        return rc;
    }
    tg_plan_stats ps;
    tg_session_plan_stats(s, &ps);
    if (!o->bench && !o->quiet)
        printf("Training a %lld-param transformer to add two-digit numbers: %lld steps %s, 20%% of the pairs held out.\n"
               "  (%d kernels per step, %.1f MB planned, %.1f MB with one buffer per tensor)\n",
               (long long)tg_model_numel(m), (long long)steps, o->backend == TG_BACKEND_WEBGPU ? "through WebGPU" : "on the CPU",
               ps.n_dispatches, ps.planned_bytes / 1e6, ps.naive_bytes / 1e6);

    static int32_t tokens[B * T], targets[B * T];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 1;
    if (o->bench > 0) { /* one fixed batch, as the PyTorch peer times it */
        for (int i = 0; i < B; i++) {
            int32_t seq[SEQ];
            encode((int)(ex_rand(&rng) % 100), (int)(ex_rand(&rng) % 100), seq);
            memcpy(tokens + i * T, seq, T * sizeof(int32_t));
            memcpy(targets + i * T, seq + 1, T * sizeof(int32_t));
        }
        tg_feed f[] = {TG_FEED("tokens", tokens + first * T, rows * T), TG_FEED("targets", targets + first * T, rows * T)};
        rc = ex_bench_loop("addition", s, o->backend, f, 2, o->bench);
        tg_forward_free(fwd);
        tg_session_free(s);
        tg_model_free(m);
        return rc;
    }
    float loss = 0;
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "heldout_accuracy")) {
        tg_forward_free(fwd);
        tg_session_free(s);
        tg_model_free(m);
        return 1;
    }
    double t0 = ex_now();
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        for (int i = 0; i < B; i++) {
            int a, b;
            do {
                a = (int)(ex_rand(&rng) % 100);
                b = (int)(ex_rand(&rng) % 100);
            } while (is_test_pair(a, b));
            int32_t seq[SEQ];
            encode(a, b, seq);
            memcpy(tokens + i * T, seq, T * sizeof(int32_t));
            memcpy(targets + i * T, seq + 1, T * sizeof(int32_t));
        }
        /* Reading the loss waits for the step: only on the steps the progress line shows. */
        bool due = ex_run_due(&run, step);
        tg_feed f[] = {TG_FEED("tokens", tokens + first * T, rows * T), TG_FEED("targets", targets + first * T, rows * T)};
        st = tg_session_step(s, f, 2, due || step == steps ? &loss : NULL);
        if (st == TG_OK && due && step < steps) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    double train_s = ex_now() - t0;
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    int correct = 0, total = 0;
    for (int a = 0; a < 100 && st == TG_OK; a++)
        for (int b = 0; b < 100 && st == TG_OK; b++) {
            if (!is_test_pair(a, b)) continue;
            correct += predict(fwd, a, b, &st) == a + b;
            total++;
        }
    double acc = total ? (double)correct / total : 0;
    /* The last step's row carries the held-out accuracy. */
    if (st == TG_OK) ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &acc);
    rc = ex_run_end(&run);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tg_forward_free(fwd);
        tg_session_free(s);
        tg_model_free(m);
        return 1;
    }
    if (!o->quiet) printf("trained %lld steps in %.1f s (%.2f ms/step); some sums it computes now:\n", (long long)steps,
           train_s, 1e3 * train_s / steps);
    const int show[][2] = {{23, 45}, {99, 99}, {7, 3}, {50, 50}, {68, 47}};
    for (int i = 0; i < 5 && !o->quiet; i++) {
        int a = show[i][0], b = show[i][1], got = predict(fwd, a, b, &st);
        printf("  %2d + %2d = %3d  %s%s\n", a, b, got, got == a + b ? "ok" : "WRONG",
               is_test_pair(a, b) ? "  (held out: never seen in training)" : "");
    }
    /* A checkpoint only where asked. */
    if (o->checkpoint && tg_session_save(s, o->checkpoint) == TG_OK) printf("checkpoint: %s\n", o->checkpoint);
    else if (o->checkpoint) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
    }
    printf("heldout_accuracy=%.4f\n", acc);
    tg_forward_free(fwd);
    tg_session_free(s);
    tg_model_free(m);
    return rc ? rc : ex_target("heldout_accuracy", acc, ">=", 0.95);
}
