/* Grokking (upstream's fourier-bloom sample): a small transformer learns
 * c = a * b^-1 (mod 97) from half of the 96 x 96 pairs (a, b in 1..96),
 * and the other half is the validation set. With a strong weight decay,
 * the training accuracy reaches 1 within a few hundred steps by memorizing
 * the pairs, and the validation accuracy stays near chance until, long
 * after, it jumps to 1: the network has replaced the memorized table by a
 * general algorithm (in upstream's sample, rotations on Fourier
 * frequencies of the discrete logarithm, which it draws as a knot).
 *
 *   tokens [B, 4] = a, op, b, '=' -> tok_emb + pos_emb
 *                 -> 2 x (x += attn(rmsnorm(x)), x += swiglu(rmsnorm(x)))
 *                 -> rmsnorm -> linear (no bias): logits [B, 4, 97]
 *   loss: cross-entropy of the logits at '=' against c
 *
 * Upstream's recipe: AdamW 1e-3 (10 warm-up steps), weight decay 1.0,
 * beta2 0.98, batch 512 drawn from the training pairs, no biases, the
 * validation half chosen by upstream's hash of (a, b). Upstream's model is
 * D = 384 with 12 heads (4.7M params, about 58 GFLOP a step: minutes on a
 * GPU, an hour on 2 CPU cores); this one is D = 128 with 4 heads (0.55M),
 * which groks the same way in a few hundred steps more.
 *
 * Every EVAL_EVERY steps it measures the accuracy on EVAL_N training and
 * EVAL_N validation pairs (a fixed subset); once the validation subset
 * passes 0.99 the whole validation half is measured, and the run stops
 * when that passes 0.99 too. Prints `train_step=<n>` (training accuracy
 * first >= 0.99), `grok_step=<n>` (validation), and ends with
 * `val_accuracy=<value>` over all validation pairs; exits 2 below 0.99.
 * --plot draws the loss with both accuracies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

enum { P = 97, VOCAB = P + 2, TOK_OP = P, TOK_EQ = P + 1, T = 4, D = 128, HEADS = 4, FF = 4 * D, LAYERS = 2 };
enum { B = 512, EVAL_EVERY = 25, EVAL_N = 1024, MAX_STEPS = 3000 };
#define LR 1e-3f
#define WEIGHT_DECAY 1.0f
#define TARGET_ACC 0.99

typedef struct {
    tg_rmsnorm n1, n2;
    tg_linear q, k, v, o, gate, up, down;
} block;

typedef struct {
    tg_param tok_emb, pos_emb;
    block layers[LAYERS];
    tg_rmsnorm nf;
    tg_linear unembed;
} grok_net;

static void declare(tg_model *m, grok_net *net) {
    char name[64];
    net->tok_emb = tg_model_param(m, "tok_emb", TG_SHAPE(VOCAB, D), tg_init_randn(0.02f));
    net->pos_emb = tg_model_param(m, "pos_emb", TG_SHAPE(T, D), tg_init_randn(0.02f));
    for (int i = 0; i < LAYERS; i++) {
        block *b = &net->layers[i];
#define NAME(fmt) (snprintf(name, sizeof name, "layers.%d." fmt, i), name)
        b->n1 = tg_rmsnorm_new(m, NAME("n1"), D);
        b->q = tg_linear_new(m, NAME("attn.q"), D, D, false);
        b->k = tg_linear_new(m, NAME("attn.k"), D, D, false);
        b->v = tg_linear_new(m, NAME("attn.v"), D, D, false);
        b->o = tg_linear_new(m, NAME("attn.o"), D, D, false);
        b->n2 = tg_rmsnorm_new(m, NAME("n2"), D);
        b->gate = tg_linear_new(m, NAME("mlp.gate"), D, FF, false);
        b->up = tg_linear_new(m, NAME("mlp.up"), D, FF, false);
        b->down = tg_linear_new(m, NAME("mlp.down"), FF, D, false);
#undef NAME
    }
    net->nf = tg_rmsnorm_new(m, "nf", D);
    net->unembed = tg_linear_new(m, "unembed", D, P, false);
}

/* x [n, T, D] -> [n, T, D] */
static tg_tensor attention(tg_graph *g, const block *b, tg_tensor x) {
    tg_tensor q = tg_split_heads(tg_linear_fwd(g, &b->q, x), HEADS); /* [n, H, T, D/H] */
    tg_tensor k = tg_split_heads(tg_linear_fwd(g, &b->k, x), HEADS);
    tg_tensor v = tg_split_heads(tg_linear_fwd(g, &b->v, x), HEADS);
    tg_tensor scores = tg_mul_s(tg_matmul_t(q, k, false, true), 1.0f / sqrtf((float)(D / HEADS)));
    return tg_linear_fwd(g, &b->o, tg_merge_heads(tg_matmul(tg_softmax_causal(scores), v)));
}

/* tokens i32 [n, T] -> the logits at '=' [n, P] */
static tg_tensor answer_logits(tg_graph *g, const grok_net *net, tg_tensor tokens) {
    int64_t n = tg_tensor_shape(tokens).d[0];
    tg_tensor x = tg_add(tg_embedding(tg_use(g, net->tok_emb), tokens), tg_use(g, net->pos_emb));
    for (int i = 0; i < LAYERS; i++) {
        const block *b = &net->layers[i];
        x = tg_add(x, attention(g, b, tg_rmsnorm_fwd(g, &b->n1, x)));
        tg_tensor h = tg_rmsnorm_fwd(g, &b->n2, x);
        h = tg_mul(tg_silu(tg_linear_fwd(g, &b->gate, h)), tg_linear_fwd(g, &b->up, h));
        x = tg_add(x, tg_linear_fwd(g, &b->down, h));
    }
    tg_tensor last = tg_reshape(tg_narrow(x, 1, T - 1, 1), TG_SHAPE(n, D));
    return tg_linear_fwd(g, &net->unembed, tg_rmsnorm_fwd(g, &net->nf, last));
}

static tg_tensor grok_loss(tg_graph *g, void *u) {
    return tg_cross_entropy(answer_logits(g, u, tg_input(g, "tokens")), tg_input(g, "targets"), TG_REDUCTION_MEAN);
}
static tg_tensor grok_predict(tg_graph *g, void *u) { return tg_argmax(answer_logits(g, u, tg_input(g, "tokens")), -1, false); }

/* ---- the data: every (a, b) with a, b in 1..96, c = a * b^-1 mod 97 ---- */

typedef struct {
    int32_t a, b, c;
} pair;

static int modpow(int b, int e) {
    int r = 1;
    for (b %= P; e > 0; e >>= 1, b = b * b % P)
        if (e & 1) r = r * b % P;
    return r;
}

/* upstream's split: a pair is validation when this hash of (a, b) falls in the lower half */
static bool is_val(int a, int b) { return (uint32_t)((uint32_t)(a * 131 + b) * 2654435761u) % 1000 < 500; }

static void encode(const pair *p, int n, int32_t *tok, int32_t *tgt) {
    for (int i = 0; i < n; i++) {
        tok[i * T] = p[i].a, tok[i * T + 1] = TOK_OP, tok[i * T + 2] = p[i].b, tok[i * T + 3] = TOK_EQ;
        if (tgt) tgt[i] = p[i].c;
    }
}

/* The fraction of the n pairs the model answers right; -1 after printing an error. */
static double accuracy(tg_forward *f, const pair *p, int n) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n * T), *pred = malloc(sizeof(int32_t) * (size_t)n);
    int right = tok && pred ? 0 : -1;
    if (right == 0) {
        encode(p, n, tok, NULL);
        tg_feed fs = TG_FEED("tokens", tok, (int64_t)n * T);
        if (tg_forward_run(f, n, &fs, 1) != TG_OK || tg_forward_output(f, pred, n) != TG_OK) right = -1;
    }
    for (int i = 0; right >= 0 && i < n; i++) right += pred[i] == p[i].c;
    if (right < 0) fprintf(stderr, "error: %s\n", tok && pred ? tg_last_error() : "out of memory");
    free(tok);
    free(pred);
    return right < 0 ? -1.0 : (double)right / n;
}

int example_grokking(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : MAX_STEPS, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    static pair train[(P - 1) * (P - 1)], val[(P - 1) * (P - 1)];
    int n_train = 0, n_val = 0;
    for (int a = 1; a < P; a++)
        for (int b = 1; b < P; b++) {
            pair p = {a, b, a * modpow(b, P - 2) % P};
            if (is_val(a, b)) val[n_val++] = p;
            else train[n_train++] = p;
        }
    tg_model *m = tg_model_new();
    grok_net net;
    declare(m, &net);
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(rows, T)}, {"targets", TG_I32, TG_SHAPE(rows)}};
    tg_input_decl pin[] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)}};
    tg_lr constant = tg_lr_constant(LR);
    tg_train_spec spec = {.model = m, .loss = grok_loss, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_warmup(LR, 10, &constant), WEIGHT_DECAY), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    spec.optim.beta2 = 0.98f;
    tg_forward_spec pspec = {.fn = grok_predict, .user = &net, .inputs = pin, .n_inputs = 1};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    int rc = 0;
    if (tg_session_new(&spec, &s) != TG_OK || tg_forward_attach(s, &pspec, &f) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "grokking", &spec, s, &rc)) goto done;
    if (!o->quiet)
        printf("grokking: c = a / b mod %d, %d training pairs, %d validation; D=%d, %d layers, %lld params; "
               "AdamW %g, weight decay %g, batch %d, at most %lld steps\n",
               P, n_train, n_val, D, LAYERS, (long long)tg_model_numel(m), LR, WEIGHT_DECAY, B, (long long)steps);
    /* fixed evaluation subsets: every k-th pair */
    static pair ev_train[EVAL_N], ev_val[EVAL_N];
    for (int i = 0; i < EVAL_N; i++) ev_train[i] = train[(int64_t)i * n_train / EVAL_N], ev_val[i] = val[(int64_t)i * n_val / EVAL_N];
    ex_run run;
    if (ex_run_start2(&run, o, steps, B, "val_accuracy", "train_accuracy")) {
        rc = 1;
        goto done;
    }
    static pair batch[B];
    static int32_t tok[B * T], tgt[B];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 41;
    float loss = 0;
    int64_t train_step = -1, grok_step = -1, step;
    double full_val = 0, t0 = ex_now();
    tg_status st = TG_OK;
    for (step = 1; step <= steps && st == TG_OK; step++) {
        for (int i = 0; i < B; i++) batch[i] = train[ex_rand(&rng) % (uint64_t)n_train];
        encode(batch, B, tok, tgt);
        tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first, rows)};
        st = tg_session_step(s, feeds, 2, &loss);
        if (st != TG_OK) break;
        if (step % EVAL_EVERY == 0 || step == steps) {
            double tr = accuracy(f, ev_train, EVAL_N), va = accuracy(f, ev_val, EVAL_N);
            if (tr < 0 || va < 0) {
                st = TG_ERR_STATE;
                break;
            }
            if (train_step < 0 && tr >= TARGET_ACC) train_step = step;
            if (va >= TARGET_ACC && (full_val = accuracy(f, val, n_val)) >= TARGET_ACC) grok_step = step;
            ex_run_step2(&run, step, loss, tg_lr_at(&spec.optim.lr, step), &va, &tr);
            if (grok_step > 0) break;
        } else if (ex_run_due(&run, step)) {
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
        }
    }
    if (st == TG_OK) {
        ex_final_loss(o, &run, s, loss);
        if (grok_step < 0 && (full_val = accuracy(f, val, n_val)) < 0) st = TG_ERR_STATE;
    }
    if (ex_run_end(&run)) rc = 1;
    if (st != TG_OK) {
        if (st != TG_ERR_STATE) fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (!o->quiet) printf("train time %.1fs, %lld steps\n", ex_now() - t0, (long long)(step > steps ? steps : step));
    printf("train_step=%lld\n", (long long)train_step);
    printf("grok_step=%lld\n", (long long)grok_step);
    printf("val_accuracy=%.4f\n", full_val);
    if (rc == 0) rc = ex_target("val_accuracy", full_val, ">=", TARGET_ACC);
done:
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    return rc;
}
