#define _POSIX_C_SOURCE 200809L
/* makemore-style character model over the word list of Debian's wamerican
 * package: a 3-layer GPT (D=64, 4 heads) reads '.' + the letters of a word
 * and predicts each next letter, then '.' at the end. Words are lowercased,
 * kept if they are 2..15 letters a-z, deduplicated, and split 90/10 into
 * train and validation with a seeded shuffle. Prints the validation loss and
 * words sampled with tg_categorical; ends with `val_loss=<value>`. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"
#include "gpt.h"

enum { V = 27, D = 64, LAYERS = 3, HEADS = 4, SEQ = 17, T = SEQ - 1, B = 64, N_SAMPLES = 12, EVAL_B = 512 };

static gpt_model net;

typedef struct {
    char (*w)[T]; /* letters, not terminated */
    int *len;
    int n;
} word_set;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Reads, normalizes and deduplicates the word list, then splits it. */
static bool load_words(const char *path, uint64_t seed, word_set *train, word_set *val) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    int cap = 1 << 17, n = 0;
    char **all = malloc(sizeof(char *) * (size_t)cap), line[256];
    while (all && fgets(line, sizeof line, f)) {
        int k = 0, bad = 0;
        for (char *c = line; *c && *c != '\n'; c++, k++) {
            if (!isalpha((unsigned char)*c)) bad = 1;
            *c = (char)tolower((unsigned char)*c);
        }
        line[k] = 0;
        if (bad || k < 2 || k > T - 1) continue;
        if (n == cap) {
            char **g = realloc(all, sizeof(char *) * (size_t)(cap *= 2));
            if (!g) break;
            all = g;
        }
        all[n++] = strdup(line);
    }
    fclose(f);
    if (!all || n == 0) return false;
    qsort(all, (size_t)n, sizeof *all, cmp_str);
    int u = 0;
    for (int i = 0; i < n; i++) {
        if (u > 0 && strcmp(all[u - 1], all[i]) == 0) free(all[i]);
        else all[u++] = all[i];
    }
    for (int i = u - 1; i > 0; i--) { /* Fisher-Yates with the example's generator */
        int j = (int)(ex_rand(&seed) % (uint64_t)(i + 1));
        char *t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    int n_val = u / 10;
    word_set *sets[2] = {val, train};
    int from[2] = {0, n_val}, count[2] = {n_val, u - n_val};
    for (int s = 0; s < 2; s++) {
        sets[s]->n = count[s];
        sets[s]->w = calloc((size_t)count[s], sizeof *sets[s]->w);
        sets[s]->len = calloc((size_t)count[s], sizeof(int));
        for (int i = 0; i < count[s]; i++) {
            const char *w = all[from[s] + i];
            sets[s]->len[i] = (int)strlen(w);
            memcpy(sets[s]->w[i], w, (size_t)sets[s]->len[i]);
        }
    }
    for (int i = 0; i < u; i++) free(all[i]);
    free(all);
    return true;
}

/* Word i as a sequence: tokens '.' c1 .. cn, targets c1 .. cn '.', and the
 * mask covering those n + 1 predictions. Letters are 1..26, '.' is 0. */
static int encode(const word_set *s, int i, int32_t *tok, int32_t *tgt, float *mask) {
    int n = s->len[i];
    for (int t = 0; t < T; t++) {
        tok[t] = t == 0 ? 0 : (t <= n ? s->w[i][t - 1] - 'a' + 1 : 0);
        tgt[t] = t < n ? s->w[i][t] - 'a' + 1 : 0;
        mask[t] = t <= n ? 1.0f : 0.0f;
    }
    return n + 1;
}

/* Mean cross-entropy over the masked positions: the mask input carries
 * 1 / (number of predictions in the batch), so the sum is the mean. */
static tg_tensor loss_fn(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE); /* [B, T] */
    return tg_sum(tg_mul(ce, tg_input(g, "mask")), TG_ALL, false);
}

/* One sampled next letter per position: i32 [N, T]. */
static tg_tensor sample_fn(tg_graph *g, void *user) {
    (void)user;
    return tg_categorical(gpt_forward(g, &net, tg_input(g, "tokens"), false));
}

/* Validation loss over the whole validation set, EVAL_B words per run. */
static tg_status val_loss(tg_forward *ev, const word_set *val, double *out) {
    static int32_t tok[EVAL_B * T], tgt[EVAL_B * T];
    static float mask[EVAL_B * T];
    double total = 0;
    int64_t count = 0;
    for (int i0 = 0; i0 < val->n; i0 += EVAL_B) {
        int nb = val->n - i0 < EVAL_B ? val->n - i0 : EVAL_B, preds = 0;
        for (int i = 0; i < nb; i++) preds += encode(val, i0 + i, tok + i * T, tgt + i * T, mask + i * T);
        for (int k = 0; k < nb * T; k++) mask[k] /= (float)preds;
        tg_feed f[] = {TG_FEED("tokens", tok, nb * T), TG_FEED("targets", tgt, nb * T), TG_FEED("mask", mask, nb * T)};
        float l;
        tg_status st = tg_forward_run(ev, nb, f, 3);
        if (st == TG_OK) st = tg_forward_output(ev, &l, 1);
        if (st != TG_OK) return st;
        total += (double)l * preds;
        count += preds;
    }
    *out = total / (double)count;
    return TG_OK;
}

/* Samples N_SAMPLES words, one letter per run. */
static tg_status sample_words(tg_forward *smp, char words[][T + 1]) {
    int32_t tok[N_SAMPLES * T] = {0}, out[N_SAMPLES * T];
    bool done[N_SAMPLES] = {0};
    memset(words, 0, sizeof(char) * N_SAMPLES * (T + 1));
    for (int t = 0; t < T - 1; t++) {
        tg_status st = tg_forward_run(smp, N_SAMPLES, (tg_feed[]){TG_FEED("tokens", tok, N_SAMPLES * T)}, 1);
        if (st == TG_OK) st = tg_forward_output(smp, out, N_SAMPLES * T);
        if (st != TG_OK) return st;
        for (int i = 0; i < N_SAMPLES; i++) {
            int c = out[i * T + t];
            if (done[i] || c == 0) {
                done[i] = true;
                continue;
            }
            words[i][t] = (char)('a' + c - 1);
            tok[i * T + t + 1] = c;
        }
    }
    return TG_OK;
}

int example_names(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 1500, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    char path[4096];
    word_set train = {0}, val = {0};
    if (!ex_data_path("words", path, sizeof path) || !load_words(path, o->seed + 1, &train, &val)) {
        fprintf(stderr, "error: cannot read the word list (install wamerican, or run scripts/fetch-data.sh words in a source tree)\n");
        return 1;
    }
    if (!o->quiet && !o->graph) printf("names: %d training words, %d validation words from %s\n", train.n, val.n, path);
    tg_model *m = tg_model_new();
    gpt_declare(&net, m, (gpt_config){V, D, LAYERS, HEADS, SEQ});
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(rows, T)}, {"targets", TG_I32, TG_SHAPE(rows, T)},
                          {"mask", TG_F32, TG_SHAPE(rows, T)}};
    tg_input_decl ev_in[] = {{"tokens", TG_I32, TG_SHAPE(TG_BATCH, T)}, {"targets", TG_I32, TG_SHAPE(TG_BATCH, T)},
                             {"mask", TG_F32, TG_SHAPE(TG_BATCH, T)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = 3,
                          .optim = tg_adamw(tg_lr_linear(ex_lr(o, 5e-3f), ex_lr_at(o, 5e-3f, 5e-4f), steps), 0.01f), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    tg_session *s = NULL;
    tg_forward *ev = NULL, *smp = NULL;
    tg_status st = tg_session_new(&spec, &s);
    tg_forward_spec ev_spec = {.fn = loss_fn, .inputs = ev_in, .n_inputs = 3};
    tg_forward_spec smp_spec = {.fn = sample_fn, .inputs = ev_in, .n_inputs = 1};
    if (st == TG_OK) st = tg_forward_attach(s, &ev_spec, &ev);
    if (st == TG_OK) st = tg_forward_attach(s, &smp_spec, &smp);
    if (st == TG_OK) st = tg_forward_set_seed(smp, o->seed);
    int rc = 0;
    ex_run run;
    bool stop = st != TG_OK; /* an error, a graph written instead, or no --log file */
    if (st != TG_OK) fprintf(stderr, "error: %s\n", tg_last_error()), rc = 1;
    else if (ex_compile_only(o, "names", &spec, s, &rc)) stop = true;
    else if (ex_run_start(&run, o, steps, B, "val_loss")) stop = true, rc = 1;
    if (stop) {
        tg_forward_free(smp), tg_forward_free(ev), tg_session_free(s), tg_model_free(m);
        free(train.w), free(train.len), free(val.w), free(val.len);
        return rc;
    }
    /* The validation loss every 500 steps is for people and files; the last one is always computed. */
    bool watched = !o->quiet || o->log || o->plot;

    static int32_t tok[B * T], tgt[B * T];
    static float mask[B * T];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 7;
    double vl = NAN;
    float loss = 0;
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        int preds = 0;
        for (int i = 0; i < B; i++)
            preds += encode(&train, (int)(ex_rand(&rng) % (uint64_t)train.n), tok + i * T, tgt + i * T, mask + i * T);
        /* Each rank's loss is its rows' share of the batch's sum over `ranks`:
         * the ranks' mean is the batch's mean. */
        for (int k = 0; k < B * T; k++) mask[k] /= (float)preds / (float)(B / rows);
        bool eval = watched && step % 500 == 0 && step < steps, report = ex_run_due(&run, step) || eval;
        tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first * T, rows * T),
                           TG_FEED("mask", mask + first * T, rows * T)};
        st = tg_session_step(s, feeds, 3, report || step == steps ? &loss : NULL);
        if (st == TG_OK && eval) st = val_loss(ev, &val, &vl);
        if (st == TG_OK && report && step < steps)
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), eval ? &vl : NULL);
    }
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    if (st == TG_OK) st = val_loss(ev, &val, &vl);
    if (st == TG_OK) ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &vl);
    rc = ex_run_end(&run);
    char words[N_SAMPLES][T + 1];
    if (st == TG_OK) st = sample_words(smp, words);
    if (st != TG_OK) fprintf(stderr, "error: %s\n", tg_last_error());
    else {
        printf("sampled words:");
        for (int i = 0; i < N_SAMPLES; i++) printf(" %s", words[i]);
        printf("\nval_loss=%.4f\n", vl);
    }
    tg_forward_free(smp);
    tg_forward_free(ev);
    tg_session_free(s);
    tg_model_free(m);
    free(train.w), free(train.len), free(val.w), free(val.len);
    return st != TG_OK ? 1 : rc;
}
