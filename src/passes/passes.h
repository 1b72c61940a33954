/* Graph passes: pure rewrites of a graph between grad and planning. */
#ifndef TG_PASSES_H
#define TG_PASSES_H
#include "../ir/ir.h"

/* Dead-code elimination: keeps the nodes the roots depend on, the captures, plus
 * every param, input and state leaf (they are part of the session's interface).
 * Compacts g in place; remap[old] = new id or -1 (remap has g->n entries). */
tg_status pass_dce(tg_graph *g, const int *roots, int n_roots, int *remap);
#endif
