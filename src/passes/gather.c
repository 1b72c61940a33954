/* One-hot products as gathers: y = one_hot(idx, V) @ W, W [V, D], is row
 * idx of W (a zero row for an index outside [0, V), as one_hot gives), so
 * the product becomes embedding(W, idx). Both directions then cost
 * O(tokens x D + V x D) instead of a product over the whole vocabulary:
 * the forward gathers, and the gradient of W is the embedding's sorted
 * scatter-add, not one_hot^T @ gy. Only the exact form is rewritten: an f32
 * one_hot as A, neither operand transposed, W 2-d. */
#include "passes.h"

void tg_pass_one_hot_products(tg_graph *g) {
    for (int i = 0; i < g->n; i++) {
        tg_node *n = &g->nodes[i];
        if (n->op != TG_OP_MATMUL || n->at.matmul.ta || n->at.matmul.tb) continue;
        const tg_node *a = &g->nodes[n->in[0]], *w = &g->nodes[n->in[1]];
        if (a->op != TG_OP_ONE_HOT || a->dtype != TG_F32 || a->shape.ndim < 2 || w->shape.ndim != 2 ||
            w->dtype != TG_F32 || w->shape.d[0] != a->at.one_hot.depth)
            continue;
        int table = n->in[1], idx = a->in[0];
        n->op = TG_OP_EMBEDDING;
        n->at = (tg_attrs){0};
        n->in[0] = table;
        n->in[1] = idx;
        n->nin = 2;
    }
}
