/* A GPT-style decoder (upstream's transformer sample): token + learned
 * position embeddings, pre-LN blocks (causal multi-head attention without
 * biases, ReLU MLP 4x wide), a final LayerNorm and logits tied to the token
 * embedding. Param names follow upstream: tok_emb, pos_emb,
 * layers.<i>.{ln1,attn.{q,k,v,o},ln2,mlp.{up,down}}, lnf. */
#ifndef TG_EXAMPLE_GPT_H
#define TG_EXAMPLE_GPT_H
#include "tensorgrad.h"

typedef struct {
    int64_t vocab, dim, layers, heads, seq; /* seq: positions the model knows */
} gpt_config;

typedef struct {
    tg_layernorm ln1, ln2;
    tg_linear q, k, v, o, up, down;
} gpt_block;

typedef struct {
    gpt_config cfg;
    tg_param tok_emb, pos_emb;
    gpt_block *layers; /* cfg.layers of them, allocated by gpt_declare */
    tg_layernorm lnf;
} gpt_model;

/* Declares every param of the model in m, any number of layers. net's
 * layers are (re)allocated: net starts zeroed (or from an earlier
 * gpt_declare) and gpt_free releases them. Returns false, after printing
 * why, when out of memory. */
bool gpt_declare(gpt_model *net, tg_model *m, gpt_config cfg);
void gpt_free(gpt_model *net);
/* tokens i32 [B, T] (T <= seq) -> logits [B, T, vocab]. Captures the
 * attention of each layer as "attn.<i>" when `captures` is set. */
tg_tensor gpt_forward(tg_graph *g, const gpt_model *net, tg_tensor tokens, bool captures);
#endif
