/* A character model with sampling: an MLP reads the last 3 letters of a word
 * (embedded, 16 numbers each) and predicts the next, '.' ending the word.
 * It trains on a word list, then samples new words through a forward
 * session that draws each letter in the graph (tg_categorical).
 *   ./charmodel [STEPS [WORDS_FILE]]   (default 3000 steps, /usr/share/dict/words,
 *                                       else a few dozen names built in) */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorgrad.h>

enum { V = 27, CTX = 3, EMB = 16, HIDDEN = 128, B = 256, MAX_WORDS = 50000 }; /* V: '.' and a-z */

typedef struct {
    tg_embedding emb;
    tg_linear l1, l2;
} char_net;

/* ctx i32 [N, CTX] -> logits [N, V] */
static tg_tensor logits_of(tg_graph *g, char_net *n, tg_tensor ctx, int64_t rows) {
    tg_tensor e = tg_reshape(tg_embedding_fwd(g, &n->emb, ctx), TG_SHAPE(rows, CTX * EMB));
    return tg_linear_fwd(g, &n->l2, tg_tanh(tg_linear_fwd(g, &n->l1, e)));
}

static tg_tensor loss_fn(tg_graph *g, void *user) {
    return tg_cross_entropy(logits_of(g, user, tg_input(g, "ctx"), B), tg_input(g, "next"), TG_REDUCTION_MEAN);
}

/* One letter drawn from softmax(logits / temperature) for one context. */
static tg_tensor sample_fn(tg_graph *g, void *user) {
    tg_tensor logits = logits_of(g, user, tg_input(g, "ctx"), 1);
    return tg_categorical(tg_div(logits, tg_input(g, "temperature")));
}

static const char *const builtin[] = {
    "emma", "olivia", "ava", "isabella", "sophia", "charlotte", "mia", "amelia", "harper", "evelyn", "abigail",
    "emily", "elizabeth", "mila", "ella", "avery", "sofia", "camila", "aria", "scarlett", "victoria", "madison",
    "luna", "grace", "chloe", "penelope", "layla", "riley", "zoey", "nora", "lily", "eleanor", "hannah", "lillian",
    "addison", "aubrey", "ellie", "stella", "natalie", "zoe", "leah", "hazel", "violet", "aurora", "savannah",
    "audrey", "brooklyn", "bella", "claire", "skylar", "lucy", "paisley", "everly", "anna", "caroline", "nova"};

/* The words: lower-case a-z only, 2 to 15 letters. */
static int load_words(const char *path, char (*words)[16]) {
    int n = 0;
    FILE *f = fopen(path, "r");
    char line[256];
    while (f && n < MAX_WORDS && fgets(line, sizeof line, f)) {
        size_t k = strcspn(line, "\r\n"), ok = k >= 2 && k <= 15;
        for (size_t i = 0; i < k && ok; i++) ok = islower((unsigned char)line[i]);
        if (ok) memcpy(words[n], line, k), words[n++][k] = 0;
    }
    if (f) fclose(f);
    for (size_t i = 0; n == 0 && i < sizeof builtin / sizeof builtin[0]; i++) strcpy(words[i], builtin[i]);
    return n ? n : (int)(sizeof builtin / sizeof builtin[0]);
}

static int code(char c) { return c == '.' ? 0 : c - 'a' + 1; }

static int fail(const char *what) {
    fprintf(stderr, "charmodel: %s: %s\n", what, tg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int64_t steps = argc > 1 ? atoll(argv[1]) : 3000;
    const char *path = argc > 2 ? argv[2] : "/usr/share/dict/words";
    static char words[MAX_WORDS][16];
    int n_words = load_words(path, words);
    if (steps < 1) {
        fprintf(stderr, "usage: charmodel [STEPS [WORDS_FILE]]\n");
        return 2;
    }
    printf("%d words\n", n_words);

    tg_model *m = tg_model_new();
    char_net net = {tg_embedding_new(m, "emb", V, EMB), tg_linear_new(m, "l1", CTX * EMB, HIDDEN, true),
                    tg_linear_new(m, "l2", HIDDEN, V, true)};
    tg_input_decl in[] = {{"ctx", TG_I32, TG_SHAPE(B, CTX)}, {"next", TG_I32, TG_SHAPE(B)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_cosine(1e-2f, 1e-3f, steps), 0.01f)};
    spec.optim.clip_grad_norm = 1.0f;
    tg_session *s;
    if (tg_session_new(&spec, &s) != TG_OK) return fail("tg_session_new");

    /* Each row of a batch: a random word, a random position in ".word.", the
     * 3 letters before it (dots before the start) and the letter there. */
    static int32_t ctx[B * CTX], next[B];
    uint64_t rng = 1;
    tg_progress p = {.total = steps, .batch = B};
    tg_progress_start(&p);
    float loss = 0;
    for (int64_t step = 1; step <= steps; step++) {
        for (int r = 0; r < B; r++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const char *w = words[(rng >> 33) % (uint64_t)n_words];
            int len = (int)strlen(w), at = (int)((rng >> 13) % (uint64_t)(len + 1)); /* predict w[at], or '.' at len */
            for (int k = 0; k < CTX; k++) ctx[r * CTX + k] = at - CTX + k >= 0 ? code(w[at - CTX + k]) : 0;
            next[r] = at < len ? code(w[at]) : 0;
        }
        bool due = tg_progress_due(&p, step);
        tg_feed feeds[] = {TG_FEED("ctx", ctx, B * CTX), TG_FEED("next", next, B)};
        if (tg_session_step(s, feeds, 2, due ? &loss : NULL) != TG_OK) return fail("tg_session_step");
        if (due) tg_progress_update(&p, step, loss, NULL);
    }
    tg_progress_end(&p);

    /* Sampling: a forward session on the trained params draws one letter per
     * run; the word grows until it draws '.'. */
    tg_input_decl sin[] = {{"ctx", TG_I32, TG_SHAPE(1, CTX)}, {"temperature", TG_F32, TG_SHAPE(1)}};
    tg_forward_spec fspec = {.fn = sample_fn, .user = &net, .inputs = sin, .n_inputs = 2};
    tg_forward *f;
    if (tg_forward_attach(s, &fspec, &f) != TG_OK) return fail("tg_forward_attach");
    tg_forward_set_seed(f, 42);
    float temperature = 0.8f;
    printf("samples:");
    for (int w = 0; w < 10; w++) {
        char word[32];
        int32_t c[CTX] = {0}, got = 0;
        int len = 0;
        do {
            tg_feed feeds[] = {TG_FEED("ctx", c, CTX), TG_FEED("temperature", &temperature, 1)};
            if (tg_forward_run(f, 1, feeds, 2) != TG_OK || tg_forward_output(f, &got, 1) != TG_OK)
                return fail("tg_forward_run");
            if (got > 0) word[len++] = (char)('a' + got - 1);
            memmove(c, c + 1, (CTX - 1) * sizeof c[0]), c[CTX - 1] = got;
        } while (got != 0 && len < 20);
        word[len] = 0;
        printf(" %s", word);
    }
    printf("\n");
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    return 0;
}
