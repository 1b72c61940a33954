/* gpt_small: the benchmark-sized GPT of shared/peers/torch_ref.py (V=65,
 * D=384, 6 layers, 6 heads, T=256, B=64, 10.8M params; AdamW 1e-3, weight
 * decay 0.1, clip 1.0; mean cross-entropy over every position). It trains as
 * a character model on Debian's word list joined into one text (65 symbols),
 * so the loss means something; `--bench N` times it on one random batch, as
 * the peer does. About 1 TFLOP per step: meant for a GPU (--backend webgpu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"
#include "gpt.h"

enum { V = 65, D = 384, LAYERS = 6, HEADS = 6, T = 256, B = 64 };

static gpt_model net;

/* tokens, targets i32 [B, T] -> mean cross-entropy */
static tg_tensor loss_fn(tg_graph *g, void *user) {
    (void)user;
    tg_tensor logits = gpt_forward(g, &net, tg_input(g, "tokens"), false);
    return tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_MEAN);
}

/* '\n', ' ', '\'', '-', a-z, A-Z and 9 more punctuation marks: 65 symbols; others map to ' '. */
static int symbol(int c) {
    static const char *extra = "\n '-.,;:!?&$3";
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + c - 'A';
    const char *p = strchr(extra, c);
    return p && c ? 52 + (int)(p - extra) : 53;
}

int example_gpt_small(const tg_example_opts *o) {
    int64_t first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    tg_model *m = tg_model_new();
    if (!gpt_declare(&net, m, (gpt_config){V, D, LAYERS, HEADS, T + 1})) {
        tg_model_free(m);
        return 1;
    }
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(rows, T)}, {"targets", TG_I32, TG_SHAPE(rows, T)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .inputs = in, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_constant(1e-3f), 0.1f), .seed = o->seed, .backend = o->backend,
                          .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    spec.discard_grads = o->discard_grads;
    tg_session *s = NULL;
    double t0 = ex_now();
    tg_status made = tg_session_new(&spec, &s);
    double compile_s = ex_now() - t0;
    if (made != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        tg_model_free(m);
        return 1;
    }
    int rc;
    if (ex_compile_only(o, "gpt_small", &spec, s, &rc)) {
        tg_session_free(s);
        tg_model_free(m);
        return rc;
    }
    static int32_t tok[B * T], tgt[B * T];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 3;
    if (o->bench > 0) {
        for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(ex_rand(&rng) % V), tgt[i] = (int32_t)(ex_rand(&rng) % V);
        tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first * T, rows * T)};
        rc = ex_bench_loop_compiled(o->discard_grads ? "gpt_small_discard_grads" : "gpt_small", s, o->backend, feeds, 2,
                                    o->bench, compile_s);
        tg_session_free(s);
        tg_model_free(m);
        return rc;
    }
    /* The text: every word of the list, one per line. */
    char path[4096];
    FILE *f = ex_data_path("words", path, sizeof path) ? fopen(path, "rb") : NULL;
    char *text = NULL;
    long n = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > T + 1 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)n)) && fread(text, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    if (f) fclose(f);
    if (!text || n <= T + 1) {
        fprintf(stderr, "error: cannot read the word list (scripts/fetch-data.sh words)\n");
        free(text);
        tg_session_free(s);
        tg_model_free(m);
        return 1;
    }
    tg_plan_stats ps;
    tg_session_plan_stats(s, &ps);
    if (!o->quiet)
        printf("gpt_small: %lld params, %d kernels per step, %.0f MB planned\n", (long long)tg_model_numel(m),
               ps.n_dispatches, ps.planned_bytes / 1e6);
    int64_t steps = o->steps > 0 ? o->steps : 200;
    float loss = 0;
    tg_status st = TG_OK;
    ex_run run;
    if (ex_run_start(&run, o, steps, B, NULL)) st = TG_ERR_IO, steps = 0;
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        for (int b = 0; b < B; b++) {
            long at = (long)(ex_rand(&rng) % (uint64_t)(n - T - 1));
            for (int t = 0; t < T; t++) tok[b * T + t] = symbol(text[at + t]), tgt[b * T + t] = symbol(text[at + t + 1]);
        }
        bool report = ex_run_due(&run, step);
        tg_feed feeds[] = {TG_FEED("tokens", tok + first * T, rows * T), TG_FEED("targets", tgt + first * T, rows * T)};
        st = tg_session_step(s, feeds, 2, report || step == steps ? &loss : NULL);
        if (report && st == TG_OK) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    rc = ex_run_end(&run);
    if (st == TG_ERR_IO) rc = 1;
    else if (st != TG_OK) fprintf(stderr, "error: %s\n", tg_last_error());
    else ex_final_loss(o, NULL, s, loss);
    free(text);
    tg_session_free(s);
    tg_model_free(m);
    return st != TG_OK ? 1 : rc;
}
