/* gpt2: a GPT-2-124M-shaped model, the realistic-scale benchmark (bench/,
 * beside PyTorch's bench/torch_ref.py gpt2): V=50257, D=768, 12 layers, 12
 * heads, T=1024 positions, B=8 by default (--batch, --seq change them, and
 * --vocab, --dim, --layers, --heads the model, so that configurations
 * nobody tuned for can be measured too); the GPT of examples/gpt.h (ReLU
 * MLP, tied head, learned positions), AdamW 6e-4 with weight decay 0.1 and
 * clip 1.0, mean cross-entropy over every position. 124M params, about 6
 * TFLOP a step at B=8: meant for a GPU (--backend webgpu). `--bench N`
 * times it on one random batch, as the peer does; without it, it trains on
 * the bytes of Debian's word list (a byte is a token, so V >= 256; the
 * other ids of the vocabulary stay unused), so the loss means something. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"
#include "gpt.h"

enum { VOCAB = 50257, DIM = 768, LAYERS = 12, HEADS = 12, SEQ = 1024, BATCH = 8 };
enum { BYTE_TOKENS = 256 }; /* the word list's bytes are the tokens it trains on */

static gpt_model net;

/* tokens, targets i32 [B, T] -> mean cross-entropy */
static tg_tensor loss_fn(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    return tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_MEAN);
}

/* The word list as one text (each word on its line), *n bytes; NULL after
 * printing why. */
static char *read_text(long min, long *n) {
    char path[4096];
    FILE *f = ex_data_path("words", path, sizeof path) ? fopen(path, "rb") : NULL;
    char *text = NULL;
    *n = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*n = ftell(f)) > min && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)*n)) && fread(text, 1, (size_t)*n, f) != (size_t)*n)
        *n = 0;
    if (f) fclose(f);
    if (!text || *n <= min) {
        fprintf(stderr, "error: cannot read the word list (scripts/fetch-data.sh words)\n");
        free(text);
        return NULL;
    }
    return text;
}

/* The model's name in --bench's JSON and tg plan's report: gpt2_b<B>_t<T>,
 * and for any model but GPT-2's all of _v<V>_d<D>_l<L>_h<H>, so that the
 * name alone says what ran (bench/torch_ref.py builds the model it names). */
static void model_name(char *out, size_t n, int64_t B, int64_t T, gpt_config c) {
    int k = snprintf(out, n, "gpt2_b%lld_t%lld", (long long)B, (long long)T);
    if (k > 0 && (size_t)k < n && (c.vocab != VOCAB || c.dim != DIM || c.layers != LAYERS || c.heads != HEADS))
        snprintf(out + k, n - (size_t)k, "_v%lld_d%lld_l%lld_h%lld", (long long)c.vocab, (long long)c.dim,
                 (long long)c.layers, (long long)c.heads);
}

/* The model's options that tg cannot check alone, as its usage errors (exit
 * 2): the heads split the width evenly, and training on the word list's
 * bytes needs a token for each. Returns 0 or 2. */
static int check_config(const tg_example_opts *o, gpt_config c) {
    if (c.dim % c.heads) {
        fprintf(stderr, "tg: gpt2's --dim %lld%s is not a multiple of --heads %lld%s: each head takes dim/heads "
                "of the width\n", (long long)c.dim, o->dim ? "" : " (the default)", (long long)c.heads,
                o->heads ? "" : " (the default)");
        return 2;
    }
    bool trains = !o->bench && !o->plan && !o->graph;
    if (trains && c.vocab < BYTE_TOKENS) {
        fprintf(stderr, "tg: gpt2 trains on the word list's bytes, a token each, so it needs --vocab %d or more, not "
                "%lld (--bench and tg plan take any)\n", BYTE_TOKENS, (long long)c.vocab);
        return 2;
    }
    return 0;
}

int example_gpt2(const tg_example_opts *o) {
    int64_t B = o->batch > 0 ? o->batch : BATCH, T = o->seq > 0 ? o->seq : SEQ, first;
    gpt_config cfg = {o->vocab > 0 ? o->vocab : VOCAB, o->dim > 0 ? o->dim : DIM, o->layers > 0 ? o->layers : LAYERS,
                      o->heads > 0 ? o->heads : HEADS, T};
    char name[128];
    model_name(name, sizeof name, B, T, cfg);
    if (check_config(o, cfg)) return 2;
    int64_t rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    tg_model *m = tg_model_new();
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T)), *tgt = malloc(sizeof(int32_t) * (size_t)(B * T));
    if (!m || !tok || !tgt || !gpt_declare(&net, m, cfg)) {
        if (!tok || !tgt) fprintf(stderr, "error: out of memory for a batch of %lld x %lld\n", (long long)B, (long long)T);
        free(tok), free(tgt), gpt_free(&net), tg_model_free(m);
        return 1;
    }
    if (o->plan == 1) /* tg plan: the model whose plan follows */
        printf("gpt2: V=%lld, D=%lld, layers=%lld, heads=%lld, B=%lld, T=%lld, %lld params\n", (long long)cfg.vocab,
               (long long)cfg.dim, (long long)cfg.layers, (long long)cfg.heads, (long long)B, (long long)T,
               (long long)tg_model_numel(m));
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(rows, T)}, {"targets", TG_I32, TG_SHAPE(rows, T)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_constant(6e-4f), 0.1f), .seed = o->seed, .backend = o->backend,
                          .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    tg_session *s = NULL;
    double t0 = ex_now();
    tg_status st = tg_session_new(&spec, &s);
    double compile_s = ex_now() - t0;
    int rc = 0;
    char *text = NULL;
    long n = 0;
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
    } else if (ex_compile_only(o, name, &spec, s, &rc)) {
    } else if (o->bench > 0) {
        uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 5;
        uint64_t V = (uint64_t)cfg.vocab; /* every id drawn is a row of the table */
        for (int64_t i = 0; i < B * T; i++) tok[i] = (int32_t)(ex_rand(&rng) % V), tgt[i] = (int32_t)(ex_rand(&rng) % V);
        tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first * T, rows * T)};
        rc = ex_bench_loop_compiled(name, s, o->backend, feeds, 2, o->bench, compile_s);
    } else if (!(text = read_text(T + 1, &n))) {
        rc = 1;
    } else {
        tg_plan_stats ps;
        tg_session_plan_stats(s, &ps);
        if (!o->quiet)
            printf("gpt2: V=%lld, D=%lld, layers=%lld, heads=%lld, %lld params, B=%lld, T=%lld, %d kernels per step, "
                   "%.0f MB planned, compiled in %.1f s\n", (long long)cfg.vocab, (long long)cfg.dim,
                   (long long)cfg.layers, (long long)cfg.heads, (long long)tg_model_numel(m), (long long)B, (long long)T,
                   ps.n_dispatches, ps.planned_bytes / 1e6, compile_s);
        int64_t steps = o->steps > 0 ? o->steps : 50;
        uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 7;
        float loss = 0;
        ex_run run;
        if (ex_run_start(&run, o, steps, B, NULL)) st = TG_ERR_IO, steps = 0;
        for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
            for (int64_t b = 0; b < B; b++) {
                long at = (long)(ex_rand(&rng) % (uint64_t)(n - T - 1));
                for (int64_t t = 0; t < T; t++)
                    tok[b * T + t] = (unsigned char)text[at + t], tgt[b * T + t] = (unsigned char)text[at + t + 1];
            }
            bool report = ex_run_due(&run, step);
            tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first * T, rows * T)};
            st = tg_session_step(s, feeds, 2, report || step == steps ? &loss : NULL);
            if (report && st == TG_OK) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
        }
        rc = ex_run_end(&run);
        if (st == TG_ERR_IO) rc = 1;
        else if (st != TG_OK) fprintf(stderr, "error: %s\n", tg_last_error()), rc = 1;
        else ex_final_loss(o, NULL, s, loss);
    }
    free(text), free(tok), free(tgt);
    tg_session_free(s);
    gpt_free(&net);
    tg_model_free(m);
    return rc;
}
