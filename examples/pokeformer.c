/* A Llama-style character model (upstream's Pokeformer sample, trained on
 * the word list the names example reads, with the same split): RMSNorm
 * before each sublayer, rotary position embeddings on the queries and keys
 * instead of learned positions, a SwiGLU MLP, no biases, and the token
 * embedding tied to the output layer. 2 layers, D = 64, 4 heads.
 *
 *   tokens [B, T] -> tok_emb -> 2 x (x += attn(rmsnorm(x)), x += mlp(rmsnorm(x)))
 *                 -> rmsnorm -> x tok_emb^T: logits [B, T, 27]
 *   attn: q, k, v, o linear; rope(q), rope(k); causal softmax(q k^T / sqrt(16)) v
 *   mlp:  down(silu(gate(x)) * up(x)), hidden 4D
 *
 * Words are '.' + letters, predicting each next letter and the final '.';
 * the loss is the mean cross-entropy over those predictions (AdamW, linear
 * decay 5e-3 -> 5e-4, weight decay 0.01, clip 1.0, batch 64: the names
 * example's recipe, to compare at equal steps). Sampling is in the graph:
 * a forward session takes the tokens and a temperature and returns
 * categorical(logits / temperature) as i32. Prints 10 words sampled at
 * temperature 0.8 and ends with `val_loss=<value>` over the validation
 * words. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

enum { V = 27, D = 64, LAYERS = 2, HEADS = 4, FF = 4 * D, T = 16, B = 64, EVAL_B = 512, N_SAMPLES = 10 };
#define TEMPERATURE 0.8f

typedef struct {
    tg_rmsnorm n1, n2;
    tg_linear q, k, v, o, gate, up, down;
} block;

typedef struct {
    tg_param tok_emb;
    block layers[LAYERS];
    tg_rmsnorm nf;
} llama;

static llama net;

static void declare(tg_model *m) {
    char name[64];
    net.tok_emb = tg_model_param(m, "tok_emb", TG_SHAPE(V, D), tg_init_randn(0.02f));
    for (int i = 0; i < LAYERS; i++) {
        block *b = &net.layers[i];
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
    net.nf = tg_rmsnorm_new(m, "nf", D);
}

/* x [B, T, D] -> [B, T, D] */
static tg_tensor attention(tg_graph *g, const block *b, tg_tensor x) {
    tg_tensor q = tg_rope(tg_split_heads(tg_linear_fwd(g, &b->q, x), HEADS), 0); /* [B, H, T, D/H] */
    tg_tensor k = tg_rope(tg_split_heads(tg_linear_fwd(g, &b->k, x), HEADS), 0);
    tg_tensor v = tg_split_heads(tg_linear_fwd(g, &b->v, x), HEADS);
    tg_tensor scores = tg_mul_s(tg_matmul_t(q, k, false, true), 1.0f / sqrtf((float)(D / HEADS)));
    return tg_linear_fwd(g, &b->o, tg_merge_heads(tg_matmul(tg_softmax_causal(scores), v)));
}

/* tokens i32 [n, T] -> logits [n, T, V] */
static tg_tensor logits(tg_graph *g, tg_tensor tokens) {
    tg_tensor emb = tg_use(g, net.tok_emb);
    tg_tensor x = tg_embedding(emb, tokens);
    for (int i = 0; i < LAYERS; i++) {
        const block *b = &net.layers[i];
        x = tg_add(x, attention(g, b, tg_rmsnorm_fwd(g, &b->n1, x)));
        tg_tensor h = tg_rmsnorm_fwd(g, &b->n2, x);
        h = tg_mul(tg_silu(tg_linear_fwd(g, &b->gate, h)), tg_linear_fwd(g, &b->up, h));
        x = tg_add(x, tg_linear_fwd(g, &b->down, h));
    }
    return tg_matmul_t(tg_rmsnorm_fwd(g, &net.nf, x), emb, false, true);
}

/* The mask carries 1 / (predictions in the batch), so the sum is the mean. */
static tg_tensor loss_fn(tg_graph *g, void *u) {
    tg_tensor ce = tg_cross_entropy(logits(g, tg_input(g, "tokens")), tg_input(g, "targets"), TG_REDUCTION_NONE);
    return tg_sum(tg_mul(ce, tg_input(g, "mask")), TG_ALL, false);
}

/* One sampled next token per position: i32 [n, T]. */
static tg_tensor sample_fn(tg_graph *g, void *u) {
    return tg_categorical(tg_div(logits(g, tg_input(g, "tokens")), tg_input(g, "temperature")));
}

/* Word i as tokens '.' c1 .. cn, targets c1 .. cn '.', mask over those n + 1
 * predictions. '.' is 0, letters 1..26. Returns n + 1. */
static int encode(const ex_words *s, int i, int32_t *tok, int32_t *tgt, float *mask) {
    const char *w = s->w + (size_t)i * s->stride;
    int n = (int)strlen(w);
    for (int t = 0; t < T; t++) {
        tok[t] = t == 0 || t > n ? 0 : w[t - 1] - 'a' + 1;
        tgt[t] = t < n ? w[t] - 'a' + 1 : 0;
        mask[t] = t <= n;
    }
    return n + 1;
}

static tg_status val_loss(tg_forward *ev, const ex_words *val, double *out) {
    static int32_t tok[EVAL_B * T], tgt[EVAL_B * T];
    static float mask[EVAL_B * T];
    double total = 0, count = 0;
    for (int i0 = 0; i0 < val->n; i0 += EVAL_B) {
        int nb = val->n - i0 < EVAL_B ? val->n - i0 : EVAL_B, preds = 0;
        for (int i = 0; i < nb; i++) preds += encode(val, i0 + i, tok + i * T, tgt + i * T, mask + i * T);
        for (int k = 0; k < nb * T; k++) mask[k] /= (float)preds;
        tg_feed f[] = {TG_FEED("tokens", tok, nb * T), TG_FEED("targets", tgt, nb * T), TG_FEED("mask", mask, nb * T)};
        float l;
        tg_status st = tg_forward_run(ev, nb, f, 3);
        if (st == TG_OK) st = tg_forward_output(ev, &l, 1);
        if (st != TG_OK) return st;
        total += (double)l * preds, count += preds;
    }
    *out = total / count;
    return TG_OK;
}

/* N_SAMPLES words, a letter per run for all of them at once. */
static tg_status sample_words(tg_forward *smp, char words[][T]) {
    int32_t tok[N_SAMPLES * T] = {0}, out[N_SAMPLES * T];
    float temp = TEMPERATURE;
    bool done[N_SAMPLES] = {0};
    memset(words, 0, sizeof(char) * N_SAMPLES * T);
    for (int t = 0; t < T - 1; t++) {
        tg_feed f[] = {TG_FEED("tokens", tok, N_SAMPLES * T), TG_FEED("temperature", &temp, 1)};
        tg_status st = tg_forward_run(smp, N_SAMPLES, f, 2);
        if (st == TG_OK) st = tg_forward_output(smp, out, N_SAMPLES * T);
        if (st != TG_OK) return st;
        for (int i = 0; i < N_SAMPLES; i++) {
            int c = out[i * T + t];
            done[i] |= c == 0;
            if (done[i]) continue;
            words[i][t] = (char)('a' + c - 1);
            tok[i * T + t + 1] = c;
        }
    }
    return TG_OK;
}

int example_pokeformer(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 1500, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    ex_words train = {0}, val = {0};
    if (!o->graph && !o->plan && ex_words_load(T - 1, o->seed + 1, &train, &val)) return 1;
    tg_model *m = tg_model_new();
    declare(m);
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(rows, T)}, {"targets", TG_I32, TG_SHAPE(rows, T)},
                          {"mask", TG_F32, TG_SHAPE(rows, T)}};
    tg_input_decl ev_in[] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)}, {"targets", TG_I32, TG_SHAPE(TG_BATCH, T)},
                             {"mask", TG_F32, TG_SHAPE(TG_BATCH, T)}};
    tg_input_decl smp_in[] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)}, {"temperature", TG_F32, TG_SHAPE(1)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = 3,
                          .optim = tg_adamw(tg_lr_linear(5e-3f, 5e-4f, steps), 0.01f), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    tg_forward_spec ev_spec = {.fn = loss_fn, .inputs = ev_in, .n_inputs = 3};
    tg_forward_spec smp_spec = {.fn = sample_fn, .inputs = smp_in, .n_inputs = 2};
    tg_session *s = NULL;
    tg_forward *ev = NULL, *smp = NULL;
    int rc = 0;
    tg_status st = tg_session_new(&spec, &s);
    if (st == TG_OK) st = tg_forward_attach(s, &ev_spec, &ev);
    if (st == TG_OK) st = tg_forward_attach(s, &smp_spec, &smp);
    if (st == TG_OK) st = tg_forward_set_seed(smp, o->seed);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "pokeformer", &spec, s, &rc)) goto done;
    if (!o->quiet)
        printf("pokeformer: %lld params, %d training words, %d validation words, batch %d, %lld steps\n",
               (long long)tg_model_numel(m), train.n, val.n, B, (long long)steps);
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "val_loss")) {
        rc = 1;
        goto done;
    }
    bool watched = !o->quiet || o->log || o->plot; /* the validation loss every 500 steps is for people and files */
    static int32_t tok[B * T], tgt[B * T];
    static float mask[B * T];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 7;
    double vl = NAN;
    float loss = 0;
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        int preds = 0;
        for (int i = 0; i < B; i++)
            preds += encode(&train, (int)(ex_rand(&rng) % (uint64_t)train.n), tok + i * T, tgt + i * T, mask + i * T);
        /* each rank's rows carry its share of the mean: the ranks' average is the batch's */
        for (int k = 0; k < B * T; k++) mask[k] /= (float)preds / (float)(B / rows);
        bool eval = watched && step % 500 == 0 && step < steps;
        tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first * T, rows * T),
                           TG_FEED("mask", mask + first * T, rows * T)};
        st = tg_session_step(s, feeds, 3, &loss);
        if (st == TG_OK && eval) st = val_loss(ev, &val, &vl);
        if (st == TG_OK && (ex_run_due(&run, step) || eval) && step < steps)
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), eval ? &vl : NULL);
    }
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    if (st == TG_OK) st = val_loss(ev, &val, &vl);
    if (st == TG_OK) ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &vl);
    if (ex_run_end(&run)) rc = 1;
    char words[N_SAMPLES][T];
    if (st == TG_OK) st = sample_words(smp, words);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    printf("sampled words (temperature %.1f):", TEMPERATURE);
    for (int i = 0; i < N_SAMPLES; i++) printf(" %s", words[i]);
    printf("\nval_loss=%.4f\n", vl);
done:
    tg_forward_free(smp);
    tg_forward_free(ev);
    tg_session_free(s);
    tg_model_free(m);
    ex_words_free(&train), ex_words_free(&val);
    return rc;
}
