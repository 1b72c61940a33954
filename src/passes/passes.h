/* Graph passes: pure rewrites of a graph between grad and planning. */
#ifndef TG_PASSES_H
#define TG_PASSES_H
#include "../ir/ir.h"

/* Dead-code elimination: keeps the nodes the roots depend on, the captures, plus
 * every param, input and state leaf (they are part of the session's interface).
 * Compacts g in place; remap[old] = new id or -1 (remap has g->n entries). */
tg_status tg_pass_dce(tg_graph *g, const int *roots, int n_roots, int *remap);

/* One-hot products as gathers (gather.c): matmul(one_hot(idx, V), W [V, D])
 * rewritten in place as embedding(W, idx), before the gradient is built. */
void tg_pass_one_hot_products(tg_graph *g);

/* Rematerialization (recompute.c): copies of cheap forward nodes placed
 * just before their first reader in the backward (nodes >= first_bwd), which
 * then read the copy. remap[old] = new id (g->n entries, before the pass);
 * *n_copies = how many were added. */
tg_status tg_pass_recompute(tg_graph *g, int first_bwd, int *remap, int *n_copies);
/* Tests: compiles from now on skip (false) or run (true, the default) the pass. */
void tg_pass_recompute_enable(bool on);
#endif
