/* Fusion patterns, backend-neutral: a graph's readers as a backend's fusion
 * pass needs them, and the matchers of the patterns the backends fuse that
 * the graph alone decides, each member named by its role. A match says
 * only what the graph holds; each backend's pass before planning
 * (cpu/grouping.c, wgsl/grouping*.c) applies its own size and memory rules and
 * decides which matches become its groups. */
#ifndef TG_FUSE_H
#define TG_FUSE_H

#include "../plan/plan.h"

/* The readers of every node, and what the pass has grouped so far. */
typedef struct {
    const tg_graph *g;
    const tg_fusion *f;  /* the groups taken so far (the pass's own, growing); NULL for none */
    const bool *pinned;  /* read from outside: result, capture, gradient, writeback source */
    int *rd0, *rd;       /* readers of node i: rd[rd0[i] .. rd0[i + 1]) (a node reading i twice, twice) */
} tg_fuse_graph;

/* Builds the reader lists of g; the pointers are borrowed and must outlive x. */
tg_status tg_fuse_graph_init(tg_fuse_graph *x, const tg_graph *g, const tg_fusion *f, const bool *pinned);
void tg_fuse_graph_free(tg_fuse_graph *x);

static inline const tg_node *tg_fuse_node(const tg_fuse_graph *x, int id) { return &x->g->nodes[id]; }
static inline int tg_fuse_uses(const tg_fuse_graph *x, int id) { return x->rd0[id + 1] - x->rd0[id]; }
/* The last reader of node id in node order (its only one when it has one), -1 for none. */
static inline int tg_fuse_reader(const tg_fuse_graph *x, int id) {
    return tg_fuse_uses(x, id) ? x->rd[x->rd0[id + 1] - 1] : -1;
}
/* In no group yet, with no role. */
static inline bool tg_fuse_free(const tg_fuse_graph *x, int id) {
    return !x->f || (x->f->group[id] < 0 && x->f->role[id] == TG_FUSE_NONE);
}
/* Free, read by exactly one node and not from outside: a group may keep it. */
static inline bool tg_fuse_private(const tg_fuse_graph *x, int id) {
    return tg_fuse_uses(x, id) == 1 && !x->pinned[id] && tg_fuse_free(x, id);
}
/* A view: a view op, or a permute the pass has made one (read with strides). */
static inline bool tg_fuse_is_view(const tg_fuse_graph *x, int id) {
    return (tg_ops[tg_fuse_node(x, id)->op].flags & TG_OPF_VIEW) || (x->f && x->f->role[id] == TG_FUSE_VIEW);
}
/* The turn at which the value node id reads exists (through views). */
int tg_fuse_ready_at(const tg_fuse_graph *x, int id);
/* Whether a kernel at turn t can find v's value there: a leaf or constant
 * (in memory before any kernel runs, wherever its node stands), or a value
 * written before t. */
bool tg_fuse_ready_before(const tg_fuse_graph *x, int v, int t);
/* The readers of node v's value that are not views (views are looked
 * through), at most cap of them into out; returns how many there are. */
int tg_fuse_value_readers(const tg_fuse_graph *x, int v, int *out, int cap);
/* The same, each reader once (a node reading v twice counts once), and
 * the views passed through counted in *n_views (NULL: not asked), the
 * first vcap of them into views. */
int tg_fuse_readers_once(const tg_fuse_graph *x, int v, int *out, int cap, int *views, int *n_views, int vcap);

/* A product's destination: the split_heads / merge_heads permute that is its
 * only reader (the product is then appended to abs[*n_abs] and stays in the
 * kernel, which writes through the permute's strides), or the product. */
int tg_fuse_result_of(const tg_fuse_graph *x, int mm, int *abs, int *n_abs);

/* Marks TG_FUSE_VIEW every f32 heads permute (split_heads, merge_heads) that
 * is free, read, not read from outside, and read only by groups whose
 * kernels take it with strides: every group, or those `strided` accepts
 * (ctx passed through). It then needs no memory and no kernel. Reads the
 * groups from f, which must be x->f. */
void tg_fuse_view_permutes(const tg_fuse_graph *x, tg_fusion *f, bool (*strided)(int group, const void *ctx),
                           const void *ctx);

/* ---- causal attention ---- */

/* att = softmax_causal(s [* scale]), s = q k^T, and the product o = att v
 * (the first such reader of att). q, k, v: f32 [B, H, T, Dh]; att: [B, H, T, T]. */
typedef struct {
    int att, scores; /* the softmax; the product q k^T */
    int scale_mul;   /* mul(scores, scale), -1 for none */
    int scale;       /* a one-element f32 constant, -1 for none */
    int q, k, v, o;
    int64_t B, H, T, Dh;
} tg_attn_fwd_match;

/* From softmax_causal node a: the scores and their scale read by a alone,
 * a itself free (it may be pinned: the backend decides). */
bool tg_fuse_match_attn_fwd(const tg_fuse_graph *x, int a, tg_attn_fwd_match *m);

/* The backward, from softmax_grad node sg: dA = dout v^T, dS = softmax_grad(att,
 * dA) [* dscale], dq = dS k, dk = dS^T q, dv = att^T dout. Every reader of dS
 * is dq or dk; dv is the first such reader of att (others may exist: the
 * backend decides). Each product -1 when absent. */
typedef struct {
    int sg, att, dA, dout, v;
    int ds;     /* dS: sg, or the mul scaling it */
    int dscale; /* that mul's one-element f32 constant, -1 for none */
    int dq, k, dk, q, dv;
    int64_t Dh;
} tg_attn_bwd_match;

bool tg_fuse_match_attn_bwd(const tg_fuse_graph *x, int sg, tg_attn_bwd_match *m);

/* ---- a product with its epilogue ---- */

/* mm, then optionally its bias add (a row of N, the product's columns, added
 * to every row), then optionally a residual add (an operand of the product's
 * shape; nothing follows it), or relu, or relu's gradient relu_grad(gate, .).
 * Each link is read by the next alone and lies within a few nodes of mm. */
typedef struct {
    int mm, bias, resid, gate; /* -1 for none */
    bool relu;
    int chain[3], len; /* mm and its epilogue in order; chain[len - 1] holds the result */
} tg_matmul_epi_match;

/* Whether product mm has an epilogue (len > 1). */
bool tg_fuse_match_matmul_epi(const tg_fuse_graph *x, int mm, tg_matmul_epi_match *m);

/* ---- elementwise work around a kernel ---- */

#define TG_EW_MAX_INL 32 /* inline producers and views of one group (its bindings run out far sooner) */
#define TG_EW_MAX_EPI 8  /* epilogue links */

/* A kernel with elementwise work around it: inline producers (computed
 * where a member reads them, never stored) and an epilogue (applied to the
 * kernel's values as it stores them; the last link is stored instead). */
typedef struct {
    int kernel;
    int inl[TG_EW_MAX_INL], n_inl; /* the producers, and the views between members (any order) */
    int epi[TG_EW_MAX_EPI], n_epi; /* the links in chain order */
    int sib;                       /* a second value the kernel stores from its own inputs, -1 for none */
    int sib2;                      /* a third (beside a sibling only), -1 for none */
    int turn;                      /* the position at which the kernel runs */
    int gid;                       /* its group in the fusion, -1 before it has one */
} tg_ew_group;

/* What the backend adds to the rules: whether its kernel can bind what d
 * reads and writes. */
typedef struct {
    bool (*fits)(const tg_fuse_graph *x, const tg_ew_group *d, const void *ctx);
    const void *ctx;
} tg_ew_rules;

/* The value d's kernel writes: the last link, or the kernel's own. */
static inline int tg_fuse_ew_stored(const tg_ew_group *d) { return d->n_epi ? d->epi[d->n_epi - 1] : d->kernel; }
bool tg_fuse_ew_member(const tg_ew_group *d, int v);
/* d's members that are not views, into out (room for every member). */
int tg_fuse_ew_members(const tg_fuse_graph *x, const tg_ew_group *d, int *out);
/* The values d's members read that are not members (each once, as read:
 * a view is not looked through), at most cap of them; returns how many. */
int tg_fuse_ew_reads(const tg_fuse_graph *x, const tg_ew_group *d, int *out, int cap);

/* Each growth step below is taken only if the group can still run at its
 * turn (what it reads exists then, in memory, and a read it delays keeps
 * nothing live across another kernel's write; nothing outside reads what
 * it writes before then) and the backend's fits accepts it. */

/* Extends d's epilogue while the value it stores is not read from outside
 * and has one reader (views between are looked through): an elementwise
 * MAP op of the same size reading it with its own shape. A link runs at
 * d's turn when it can, else d moves to the link's. Returns whether it grew. */
bool tg_fuse_ew_grow_epilogue(const tg_fuse_graph *x, tg_ew_group *d, const tg_ew_rules *r);
/* Takes inline every producer of the kernel or a link (then theirs): a free
 * MAP node, not read from outside, that only the kernel, links and other
 * producers read; one that is not cheap only where each reader reads an
 * element once per element stored. Returns whether any was taken. */
bool tg_fuse_ew_take_producers(const tg_fuse_graph *x, tg_ew_group *d, const tg_ew_rules *r);
/* Whether member m reads its operands at the element d's stored value
 * writes (of that value's shape): a link, a producer that only such
 * members read, or a kernel that may run in place (TG_OPF_INPLACE). */
bool tg_fuse_ew_in_step(const tg_fuse_graph *x, const tg_ew_group *d, int m);

/* ---- the optimizer ---- */

/* One param's update. Adam: m2 = adam_m(m, gx), v2 = adam_v(v, gx), p2 =
 * adam_p(p, m2, v2, hyper), m2 and v2 read by p2 alone. SGD: p2 = sgd_p(p,
 * gx, v2, hyper) with v2 = sgd_v(v, gx, p, hyper) read by p2 alone, or
 * sgd_p(p, gx, p, hyper) without momentum. gx is grad * scale (scale: one
 * f32 element, the clip factor) when only the updates read that product, so
 * that a kernel may compute it inline; else grad is gx and scale -1. */
typedef struct {
    int p2, m2, v2; /* the updates (m2, v2: -1 for none) */
    int p, m, v;    /* the values each replaces */
    int hyper, gx, grad, scale;
} tg_update_match;

/* From adam_p or sgd_p node p2, every update node free. */
bool tg_fuse_match_update(const tg_fuse_graph *x, int p2, tg_update_match *m);

/* A clip norm's term: s = sum over every axis of sq = mul(x, x), sq free,
 * read by s alone and not from outside. Returns sq, or -1. */
int tg_fuse_match_sumsq(const tg_fuse_graph *x, int s);

/* ---- a clip norm's total ---- */

/* What a pass knows beyond x->f: the nodes it has grouped itself (taken),
 * and whether value v can be read from memory by a kernel at turn t. */
typedef struct {
    bool (*taken)(int node, const void *ctx);
    bool (*readable)(int v, int turn, const void *ctx);
    const void *ctx;
} tg_fuse_hooks;

typedef struct {
    int sum, sq, x; /* sum = the sum over every axis of sq = x * x */
    bool store;     /* read outside the tree of adds: written */
} tg_sumsq_term;

/* Sums of squares that one kernel can compute together, and the adds
 * totalling them. */
typedef struct {
    tg_sumsq_term *term;
    int n_term;
    int *tree, n_tree; /* the adds of the total, its root among them (any order) */
    int total;         /* the root, -1 for none: then every term is stored */
    int turn;          /* the last node of them, where such a kernel runs */
} tg_sumsq_match;

/* Every term (tg_fuse_match_sumsq) that h leaves, and the largest tree of
 * one-element adds over terms above one of them whose inner adds nothing
 * else reads; with a tree, only the terms it totals. No terms when the
 * only one is small (one kernel per node serves it as well). Fills m with
 * arrays for tg_sumsq_match_free. */
tg_status tg_fuse_match_sumsq_total(const tg_fuse_graph *x, const tg_fuse_hooks *h, tg_sumsq_match *m);
void tg_sumsq_match_free(tg_sumsq_match *m);

/* The scalar arithmetic after the total that the kernel with the total can
 * do at turn (the clip factor min(c / (sqrt(total) + eps), 1), the step
 * check loss * 0 + total): one-element f32 or bool add, sub, mul, div,
 * less, greater, where or math row (sqrt) after it whose operands are the total,
 * other such nodes, or values readable at turn; only those that read the
 * total (directly or through others), or that only such nodes read.
 * Writes them to tail in node order, with stored[q] when something else
 * reads tail[q]; returns how many, -1 when out of memory. */
int tg_fuse_match_sumsq_tails(const tg_fuse_graph *x, const tg_fuse_hooks *h, int total, int turn, int *tail,
                              bool *stored);

/* ---- a norm's backward ---- */

/* Whether sum node sb is the bias gradient beside norm_dgain node dg: both
 * free and f32, sb summing dg's gy over its leading axes, so one kernel
 * can compute both from the same rows of gy. */
bool tg_fuse_norm_sums_pair(const tg_fuse_graph *x, int dg, int sb);
#endif
