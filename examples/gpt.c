/* The GPT decoder shared by the addition and gpt_small examples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpt.h"

/* The model declared so far has no error; else says the library's. */
static bool declared(tg_model *m) {
    if (tg_model_status(m) == TG_OK) return true;
    fprintf(stderr, "error: %s\n", tg_last_error());
    return false;
}

bool gpt_declare(gpt_model *net, tg_model *m, gpt_config c) {
    char name[64];
    gpt_block *layers = c.layers > 0 ? realloc(net->layers, sizeof *layers * (size_t)c.layers) : net->layers;
    if (c.layers > 0 && !layers) {
        fprintf(stderr, "error: out of memory for %lld layers\n", (long long)c.layers);
        return false;
    }
    net->layers = layers;
    net->cfg = c;
    net->tok_emb = tg_model_param(m, "tok_emb", TG_SHAPE(c.vocab, c.dim), tg_init_randn(0.02f));
    net->pos_emb = tg_model_param(m, "pos_emb", TG_SHAPE(c.seq, c.dim), tg_init_randn(0.02f));
    if (!declared(m)) return false;
    for (int i = 0; i < c.layers; i++) {
        gpt_block *b = &net->layers[i];
#define NAME(fmt) (snprintf(name, sizeof name, "layers.%d." fmt, i), name)
        b->ln1 = tg_layernorm_new(m, NAME("ln1"), c.dim);
        b->q = tg_linear_new(m, NAME("attn.q"), c.dim, c.dim, false);
        b->k = tg_linear_new(m, NAME("attn.k"), c.dim, c.dim, false);
        b->v = tg_linear_new(m, NAME("attn.v"), c.dim, c.dim, false);
        b->o = tg_linear_new(m, NAME("attn.o"), c.dim, c.dim, false);
        b->ln2 = tg_layernorm_new(m, NAME("ln2"), c.dim);
        b->up = tg_linear_new(m, NAME("mlp.up"), c.dim, 4 * c.dim, true);
        b->down = tg_linear_new(m, NAME("mlp.down"), 4 * c.dim, c.dim, true);
#undef NAME
        if (!declared(m)) return false; /* a model past the library's limits: stop at its first error */
    }
    net->lnf = tg_layernorm_new(m, "lnf", c.dim);
    return declared(m);
}

void gpt_free(gpt_model *net) {
    free(net->layers);
    net->layers = NULL;
    net->cfg.layers = 0;
}

/* x [B, T, D] -> [B, T, D]: causal self-attention over H heads of D/H. */
static tg_tensor attention(tg_graph *g, const gpt_model *net, const gpt_block *b, tg_tensor x, int layer,
                           bool captures) {
    int64_t H = net->cfg.heads, Dh = net->cfg.dim / H;
    tg_tensor q = tg_split_heads(tg_linear_fwd(g, &b->q, x), H); /* [B, H, T, Dh] */
    tg_tensor k = tg_split_heads(tg_linear_fwd(g, &b->k, x), H);
    tg_tensor v = tg_split_heads(tg_linear_fwd(g, &b->v, x), H);
    tg_tensor scores = tg_mul_s(tg_matmul_t(q, k, false, true), 1.0f / sqrtf((float)Dh)); /* [B, H, T, T] */
    tg_tensor att = tg_softmax_causal(scores);
    if (captures) {
        char name[32];
        snprintf(name, sizeof name, "attn.%d", layer);
        tg_capture(att, name);
    }
    return tg_linear_fwd(g, &b->o, tg_merge_heads(tg_matmul(att, v))); /* [B, T, D] */
}

tg_tensor gpt_forward(tg_graph *g, const gpt_model *net, tg_tensor tokens, bool captures) {
    int64_t T = tg_tensor_shape(tokens).d[1];
    tg_tensor tok = tg_use(g, net->tok_emb);
    tg_tensor pos = tg_embedding(tg_use(g, net->pos_emb), tg_arange(g, T, TG_I32)); /* [T, D] */
    tg_tensor x = tg_add(tg_embedding(tok, tokens), pos);                             /* [B, T, D] */
    for (int i = 0; i < net->cfg.layers; i++) {
        const gpt_block *b = &net->layers[i];
        x = tg_add(x, attention(g, net, b, tg_layernorm_fwd(g, &b->ln1, x), i, captures));
        tg_tensor h = tg_relu(tg_linear_fwd(g, &b->up, tg_layernorm_fwd(g, &b->ln2, x)));
        x = tg_add(x, tg_linear_fwd(g, &b->down, h));
    }
    return tg_matmul_t(tg_layernorm_fwd(g, &net->lnf, x), tok, false, true); /* [B, T, V] */
}
