/* The buffer planner (see plan.h): storage classes, categories, liveness,
 * offsets, and a self-check. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "../ir/model.h"

static int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) & ~(a - 1); }

const char *tg_plan_kind_name(tg_buf_kind k) {
    static const char *names[] = {"param", "state", "input", "const", "grad", "output", "scratch", "fused"};
    return (unsigned)k <= TG_BUF_NONE ? names[k] : "?";
}

tg_fusion *tg_fusion_new(int n) {
    tg_fusion *f = tg_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->n = n;
    f->role = tg_calloc((size_t)n + 1, 1);
    f->group = tg_calloc((size_t)n + 1, sizeof(int));
    f->turn = tg_calloc((size_t)n + 1, sizeof(int));
    f->inplace = tg_calloc((size_t)n + 1, sizeof(bool));
    f->in_step = tg_calloc((size_t)n + 1, sizeof(bool));
    f->also_reads = tg_calloc((size_t)n + 1, sizeof(int));
    if (!f->role || !f->group || !f->turn || !f->inplace || !f->in_step || !f->also_reads) {
        tg_fusion_free(f);
        return NULL;
    }
    for (int i = 0; i < n; i++) f->group[i] = f->also_reads[i] = -1;
    return f;
}

void tg_fusion_free(tg_fusion *f) {
    if (!f) return;
    if (f->impl_free) f->impl_free(f->impl);
    free(f->role), free(f->group), free(f->turn), free(f->inplace), free(f->in_step), free(f->also_reads);
    free(f);
}

bool tg_plan_runs(const tg_graph *g, int i) {
    unsigned f = tg_ops[g->nodes[i].op].flags;
    return !(f & (TG_OPF_LEAF | TG_OPF_VIEW | TG_OPF_CONSTANT));
}

int64_t tg_plan_param_layout(const tg_model *m, int64_t align, int64_t *offsets) {
    int64_t off = 0;
    for (int p = 0; p < tg_model_param_count(m); p++) {
        offsets[p] = off;
        off = align_up(off + tg_shape_numel(m->params[p].shape) * 4, align);
    }
    return off;
}

/* union-find over node ids; the root is always the class's earliest node */
static int find(int *parent, int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
}
static void unite(int *parent, int a, int b) {
    a = find(parent, a);
    b = find(parent, b);
    if (a < b) parent[b] = a;
    else if (b < a) parent[a] = b;
}

typedef struct {
    int root;
    int64_t bytes;
} cls_size;

static int by_size_desc(const void *x, const void *y) {
    const cls_size *a = x, *b = y;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return a->root - b->root;
}

typedef struct {
    int64_t off, end;
} range;

static int by_off(const void *x, const void *y) {
    const range *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* Member m of a fused group reads its inputs at the element the group's
 * output writes (tg_fusion.inplace of an absorbed member, in_step of
 * another output). */
static bool in_step(const tg_fusion *fu, int m) {
    return (fu->role[m] == TG_FUSE_ABSORBED && fu->inplace[m]) || (fu->role[m] == TG_FUSE_OUTPUT && fu->in_step[m]);
}

/* Whether node i may be written over class rx as far as the other reads of
 * rx go: i reads it only with its own shape, and every other member of
 * its group that reads it is in step with i, reading it with i's shape. */
static bool may_take(const tg_graph *g, const tg_fusion *fu, const bool *none, int *parent, int i, int rx) {
    const tg_node *s = &g->nodes[i];
    for (int j = 0; j < s->nin; j++)
        if (!none[s->in[j]] && find(parent, s->in[j]) == rx && !tg_shape_eq(g->nodes[s->in[j]].shape, s->shape))
            return false;
    int gid = fu ? fu->group[i] : -1;
    for (int m = 0; gid >= 0 && m < g->n; m++) {
        if (m == i || fu->group[m] != gid) continue;
        for (int q = 0; q < g->nodes[m].nin; q++) {
            int y = g->nodes[m].in[q];
            if (!none[y] && find(parent, y) == rx && !(in_step(fu, m) && tg_shape_eq(g->nodes[y].shape, s->shape)))
                return false;
        }
    }
    return true;
}

/* The planner's state while it builds one plan. Nodes are grouped in
 * classes (union-find, parent[]) that share memory: a view with its input,
 * an in-place op with the input it overwrites. Per class root: its kind,
 * live range in turns and size; per node: whether it has no memory. */
typedef struct {
    const tg_graph *g;
    const tg_plan_req *req;
    const tg_fusion *fu; /* the backend's groups, NULL for none */
    tg_plan *out;
    int n;
    int *parent;
    int *own;     /* per node: its own kind (tg_buf_kind) */
    int *ckind;   /* per class root: the class's kind, the lowest of its members' */
    int *first;   /* per class root: first write, in turns */
    int *last;    /* per class root: last use, in turns */
    bool *none;   /* per node: no memory (kept inside a fused kernel) */
    int64_t *csize; /* per class root: its largest member's bytes */
    int64_t *off; /* per class root: its offset in its arena */
    cls_size *order; /* the classes with memory, n_cls of them */
    int n_cls;
    range *busy;  /* scratch: the placed classes a class must avoid */
    int *placed;  /* scratch classes placed so far */
    int n_placed;
} planner;

static tg_fuse_role role(const planner *pl, int i) { return pl->fu ? pl->fu->role[i] : TG_FUSE_NONE; }
/* The turn at which node i is computed (its group's, if fused). */
static int turn(const planner *pl, int i) { return tg_fusion_at(pl->fu, i); }
static bool is_view(const planner *pl, int i) {
    return (tg_ops[pl->g->nodes[i].op].flags & TG_OPF_VIEW) || role(pl, i) == TG_FUSE_VIEW;
}
/* Leaves and constants are there before the step's first turn (-1). */
static int written_at(const planner *pl, int i) {
    return tg_ops[pl->g->nodes[i].op].flags & (TG_OPF_LEAF | TG_OPF_CONSTANT) ? -1 : turn(pl, i);
}
static int64_t node_bytes(const tg_node *nd) { return tg_ir_numel(nd) * 4 > 4 ? tg_ir_numel(nd) * 4 : 4; }

static void planner_free(planner *pl) {
    free(pl->parent), free(pl->own), free(pl->ckind), free(pl->first), free(pl->last), free(pl->none);
    free(pl->csize), free(pl->off), free(pl->order), free(pl->busy), free(pl->placed);
}

static bool planner_init(planner *pl, const tg_graph *g, const tg_plan_req *req, tg_plan *out) {
    size_t n = (size_t)g->n + 1;
    *pl = (planner){.g = g, .req = req, .fu = req->fusion && req->fusion->n == g->n ? req->fusion : NULL, .out = out, .n = g->n};
    out->n = g->n;
    out->align = req->align;
    out->slot = tg_calloc(n, sizeof(tg_slot));
    out->wb_free = tg_calloc((size_t)req->n_wb + 1, sizeof(bool));
    pl->parent = tg_calloc(n, sizeof(int)), pl->own = tg_calloc(n, sizeof(int)), pl->ckind = tg_calloc(n, sizeof(int));
    pl->first = tg_calloc(n, sizeof(int)), pl->last = tg_calloc(n, sizeof(int)), pl->none = tg_calloc(n, sizeof(bool));
    pl->csize = tg_calloc(n, sizeof(int64_t)), pl->off = tg_calloc(n, sizeof(int64_t));
    pl->order = tg_calloc(n, sizeof(cls_size)), pl->busy = tg_calloc(n, sizeof(range)), pl->placed = tg_calloc(n, sizeof(int));
    return out->slot && out->wb_free && pl->parent && pl->own && pl->ckind && pl->first && pl->last && pl->none &&
           pl->csize && pl->off && pl->order && pl->busy && pl->placed;
}

/* Every offset is at most the sum of all buffers plus their alignment:
 * bounding that sum first keeps all of them far from overflow. */
static tg_status check_total(const tg_graph *g, int64_t align) {
    int64_t total = 0;
    for (int i = 0; i < g->n; i++) {
        total += tg_ir_numel(&g->nodes[i]) * 4 + align; /* each at most 4 * TG_MAX_NUMEL: no overflow before the check */
        if (total > TG_MAX_PROGRAM_BYTES)
            return tg_fail(TG_ERR_LIMIT, "plan: the program needs more than %lld bytes of buffers",
                           (long long)TG_MAX_PROGRAM_BYTES);
    }
    return TG_OK;
}

/* Whether node i is a writeback's source: then it lives in (or is copied
 * to) its destination, a param or state, which keeps it past the step
 * (an accumulation's gradient sums). */
static bool wb_source(const tg_plan_req *req, int i) {
    for (int w = 0; w < req->n_wb; w++)
        if (req->wb[w].src == i) return true;
    return false;
}

/* 1. Each node's own kind: leaves by op, param gradients and outputs by the
 * request, no memory for what a fused kernel keeps (and views of it). */
static void own_kinds(planner *pl) {
    const tg_graph *g = pl->g;
    for (int i = 0; i < pl->n; i++) {
        const tg_node *nd = &g->nodes[i];
        pl->parent[i] = i;
        pl->own[i] = nd->op == TG_OP_PARAM ? TG_BUF_PARAM
                     : nd->op == TG_OP_STATE ? TG_BUF_STATE
                     : nd->op == TG_OP_INPUT ? TG_BUF_INPUT
                     : (tg_ops[nd->op].flags & TG_OPF_CONSTANT) ? TG_BUF_CONST
                                                                : TG_BUF_SCRATCH;
        pl->none[i] = role(pl, i) == TG_FUSE_ABSORBED || role(pl, i) == TG_FUSE_REMAT ||
                      (is_view(pl, i) && pl->none[nd->in[0]]);
        if (pl->none[i]) pl->own[i] = TG_BUF_NONE;
        pl->out->naive_bytes += node_bytes(nd);
    }
    const tg_plan_req *req = pl->req;
    for (int p = 0; p < req->n_params && !req->discard_grads; p++)
        if (req->param_grad[p] >= 0 && pl->own[req->param_grad[p]] == TG_BUF_SCRATCH && !wb_source(req, req->param_grad[p]))
            pl->own[req->param_grad[p]] = TG_BUF_GRAD;
    for (int o = 0; o < req->n_outputs; o++)
        if (req->outputs[o] >= 0 && pl->own[req->outputs[o]] == TG_BUF_SCRATCH) pl->own[req->outputs[o]] = TG_BUF_OUTPUT;
}

/* 2. Views join their input's class; so do permutes the backend reads with
 * strides. A class takes the lowest kind of its members; absorbed nodes
 * and their views have no class. Then live ranges in turns: a class is
 * live from the first turn that writes one of its members to the last
 * turn that reads one (a fused group's also_reads included). */
static void classes(planner *pl) {
    const tg_graph *g = pl->g;
    const tg_fusion *fu = pl->fu;
    int n = pl->n, *parent = pl->parent;
    for (int i = 0; i < n; i++)
        if (is_view(pl, i) && !pl->none[i]) unite(parent, i, g->nodes[i].in[0]);
    for (int i = 0; i < n; i++) pl->ckind[i] = TG_BUF_SCRATCH;
    for (int i = 0; i < n; i++) {
        int r = find(parent, i);
        if (pl->own[i] < pl->ckind[r]) pl->ckind[r] = pl->own[i];
    }
    for (int i = 0; i < n; i++)
        if (pl->own[i] == TG_BUF_NONE) pl->ckind[i] = TG_BUF_NONE; /* alone in its class: nothing views or joins it */
    for (int i = 0; i < n; i++) pl->first[i] = pl->last[i] = written_at(pl, i);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int r = find(parent, g->nodes[i].in[k]);
            if (pl->last[r] < turn(pl, i)) pl->last[r] = turn(pl, i);
        }
    for (int q = 0; fu && q < fu->n_groups; q++) {
        if (fu->also_reads[q] < 0) continue;
        int r = find(parent, fu->also_reads[q]);
        if (pl->last[r] < fu->turn[q]) pl->last[r] = fu->turn[q];
    }
    for (int i = 0; i < n; i++) { /* a view's own last use extends its class */
        int r = find(parent, i);
        if (pl->last[r] < pl->last[i]) pl->last[r] = pl->last[i];
        if (pl->first[r] > pl->first[i]) pl->first[r] = pl->first[i];
    }
}

/* Class b joins class a, the union live over both ranges. */
static void merge(planner *pl, int a, int b) {
    int ra = find(pl->parent, a), rb = find(pl->parent, b);
    int lr = pl->last[ra] > pl->last[rb] ? pl->last[ra] : pl->last[rb];
    int fr = pl->first[ra] < pl->first[rb] ? pl->first[ra] : pl->first[rb];
    unite(pl->parent, a, b);
    pl->last[find(pl->parent, a)] = lr;
    pl->first[find(pl->parent, a)] = fr;
}

/* 3. Optimizer updates computed into the param or state they replace: an
 * in-place update whose destination is last read by the update itself,
 * with the same shape. Its writeback is then free (out->wb_free). */
static void updates_in_place(planner *pl) {
    const tg_graph *g = pl->g;
    const tg_plan_req *req = pl->req;
    for (int w = 0; w < req->n_wb && !req->no_reuse; w++) {
        int src = req->wb[w].src, dst = req->wb[w].dst;
        if (src < 0 || dst < 0) continue;
        const tg_node *s = &g->nodes[src];
        int rd = find(pl->parent, dst), rs = find(pl->parent, src);
        if (!(tg_ops[s->op].flags & TG_OPF_INPLACE) || rs != src || pl->ckind[rs] != TG_BUF_SCRATCH ||
            !(role(pl, src) == TG_FUSE_NONE || (role(pl, src) == TG_FUSE_OUTPUT && pl->fu->inplace[src])))
            continue;
        if (pl->last[rd] > turn(pl, src)) continue;
        bool reads_dst = false, clash = false;
        for (int k = 0; k < s->nin; k++) {
            if (find(pl->parent, s->in[k]) != rd) continue;
            if (s->in[k] == dst) reads_dst = true;
            if (!tg_shape_eq(g->nodes[s->in[k]].shape, s->shape)) clash = true;
        }
        if (!reads_dst || clash || !tg_shape_eq(g->nodes[dst].shape, s->shape)) continue;
        merge(pl, rd, rs);
        pl->out->wb_free[w] = true;
    }
    /* A writeback left as a copy reads its source after the last kernel: a
     * source computed early (batch_norm's running statistics, in the
     * forward) must keep its memory until then. */
    for (int w = 0; w < req->n_wb; w++)
        if (!pl->out->wb_free[w] && req->wb[w].src >= 0) pl->last[find(pl->parent, req->wb[w].src)] = pl->n - 1;
}

/* 4. In-place elementwise ops over scratch inputs that die with them. A
 * fused group's output only where its kernel allows: over one of its own
 * inputs or of the members the backend says read in step with it
 * (absorbed and marked inplace), and never over a value another member
 * reads otherwise. */
static void ops_in_place(planner *pl) {
    const tg_graph *g = pl->g;
    const tg_fusion *fu = pl->fu;
    int n = pl->n;
    for (int i = 0; i < n && !pl->req->no_reuse; i++) {
        const tg_node *s = &g->nodes[i];
        if (!(tg_ops[s->op].flags & TG_OPF_INPLACE) || find(pl->parent, i) != i || pl->ckind[i] != TG_BUF_SCRATCH)
            continue;
        if (pl->none[i] || role(pl, i) == TG_FUSE_VIEW || (role(pl, i) == TG_FUSE_OUTPUT && !fu->inplace[i])) continue;
        int gid = fu ? fu->group[i] : -1;
        bool done = false;
        for (int m = -1; m < n && !done; m++) { /* i's own inputs, then those of its group's members in step */
            int y = m < 0 ? i : m;
            if (m >= 0 && (gid < 0 || fu->group[m] != gid || !in_step(fu, m))) continue;
            for (int k = 0; k < g->nodes[y].nin && !done; k++) {
                int x = g->nodes[y].in[k], rx = find(pl->parent, x);
                if (pl->none[x] || pl->ckind[rx] != TG_BUF_SCRATCH || pl->last[rx] != turn(pl, i) ||
                    !tg_shape_eq(g->nodes[x].shape, s->shape) || !may_take(g, fu, pl->none, pl->parent, i, rx))
                    continue;
                merge(pl, rx, i);
                done = true;
            }
        }
    }
    /* Kept gradients share the scratch arena: free before the backward
     * writes them (as PyTorch's, allocated by the backward), then live to
     * the end of the step so that they can be read after it. */
    for (int i = 0; i < n; i++)
        if (find(pl->parent, i) == i && pl->ckind[i] == TG_BUF_GRAD) pl->last[i] = n - 1;
}

/* 5. Slots: kind, arena, size and live range of each node from its class.
 * A view's value exists once its input's does. Then each class's size
 * (its largest member: members are equal-sized today), in pl->order. */
static void slots(planner *pl) {
    const tg_graph *g = pl->g;
    tg_plan *out = pl->out;
    for (int i = 0; i < pl->n; i++) {
        int r = find(pl->parent, i);
        tg_slot *sl = &out->slot[i];
        sl->root = r;
        sl->kind = pl->ckind[r];
        sl->bytes = node_bytes(&g->nodes[i]);
        sl->first = pl->first[r];
        sl->last = pl->last[r];
        sl->at = is_view(pl, i) ? out->slot[g->nodes[i].in[0]].at : written_at(pl, i);
        sl->arena = sl->kind == TG_BUF_PARAM                                ? TG_ARENA_PARAMS
                    : sl->kind == TG_BUF_SCRATCH || sl->kind == TG_BUF_GRAD ? TG_ARENA_SCRATCH
                                                                            : TG_ARENA_PERSIST;
        if (sl->kind == TG_BUF_NONE) sl->arena = -1, sl->bytes = 0;
        sl->remat = role(pl, i) == TG_FUSE_REMAT || (pl->none[i] && is_view(pl, i) && out->slot[g->nodes[i].in[0]].remat);
        if (tg_plan_runs(g, i) && role(pl, i) == TG_FUSE_NONE) out->n_kernels++;
    }
    if (pl->fu) out->n_kernels += pl->fu->n_groups;
    for (int i = 0; i < pl->n; i++)
        if (pl->csize[out->slot[i].root] < out->slot[i].bytes) pl->csize[out->slot[i].root] = out->slot[i].bytes;
    for (int i = 0; i < pl->n; i++)
        if (out->slot[i].root == i && out->slot[i].kind != TG_BUF_NONE) pl->order[pl->n_cls++] = (cls_size){i, pl->csize[i]};
}

/* Where scratch class c (of pl->order) goes: the lowest gap among the
 * placed classes live with it; a kept gradient as high as it fits below
 * the arena's end so far (scratch), so that the gradients lie close
 * together and one binding of the optimizer's kernel can span them all. */
static int64_t scratch_offset(planner *pl, int c, int64_t scratch) {
    const tg_slot *sl = &pl->out->slot[pl->order[c].root];
    int64_t A = pl->req->align, bytes = pl->order[c].bytes;
    bool reuse = !pl->req->no_reuse;
    int nb = 0;
    for (int q = 0; q < pl->n_placed; q++) {
        const tg_slot *o = &pl->out->slot[pl->placed[q]];
        if (!reuse || !(o->last < sl->first || sl->last < o->first))
            pl->busy[nb++] = (range){pl->off[pl->placed[q]], pl->off[pl->placed[q]] + pl->csize[pl->placed[q]]};
    }
    qsort(pl->busy, (size_t)nb, sizeof *pl->busy, by_off);
    int64_t at = 0;
    for (int q = 0; q < nb; q++) {
        if (pl->busy[q].off >= at + bytes) break;
        if (align_up(pl->busy[q].end, A) > at) at = align_up(pl->busy[q].end, A);
    }
    if (sl->kind == TG_BUF_GRAD && reuse && at + bytes <= scratch) {
        int64_t lo = 0; /* the gaps between busy ranges, lowest first: keep the highest that fits */
        for (int q = 0; q <= nb; q++) {
            int64_t hi = q < nb ? pl->busy[q].off : scratch;
            int64_t top = (hi - bytes) & ~(A - 1);
            if (top >= lo && top > at) at = top;
            if (q < nb && align_up(pl->busy[q].end, A) > lo) lo = align_up(pl->busy[q].end, A);
        }
    }
    return at;
}

/* 6. Offsets: params by the model's layout, persistent classes packed in
 * order, scratch classes by greedy best fit, largest first; then each
 * arena's size. */
static void offsets(planner *pl) {
    const tg_graph *g = pl->g;
    const tg_plan_req *req = pl->req;
    tg_plan *out = pl->out;
    int64_t A = req->align, persist = 0, scratch = 0;
    for (int c = 0; c < pl->n_cls; c++) {
        int r = pl->order[c].root;
        const tg_slot *sl = &out->slot[r];
        if (sl->arena == TG_ARENA_PARAMS) {
            pl->off[r] = req->param_offset ? req->param_offset[g->nodes[r].param] : 0;
        } else if (sl->arena == TG_ARENA_PERSIST) {
            pl->off[r] = persist;
            persist = align_up(persist + pl->order[c].bytes, A);
        }
    }
    qsort(pl->order, (size_t)pl->n_cls, sizeof *pl->order, by_size_desc);
    for (int c = 0; c < pl->n_cls; c++) {
        int r = pl->order[c].root;
        if (out->slot[r].arena != TG_ARENA_SCRATCH) continue;
        int64_t at = scratch_offset(pl, c, scratch);
        pl->off[r] = at;
        if (at + pl->order[c].bytes > scratch) scratch = align_up(at + pl->order[c].bytes, A);
        pl->placed[pl->n_placed++] = r;
    }
    for (int i = 0; i < pl->n; i++) out->slot[i].offset = pl->off[out->slot[i].root];
    out->arena_bytes[TG_ARENA_PARAMS] = 0;
    for (int p = 0; p < req->n_params && req->param_offset; p++) {
        int64_t end = req->param_offset[p] + tg_shape_numel(g->model->params[p].shape) * 4;
        if (align_up(end, A) > out->arena_bytes[TG_ARENA_PARAMS]) out->arena_bytes[TG_ARENA_PARAMS] = align_up(end, A);
    }
    out->arena_bytes[TG_ARENA_PERSIST] = persist;
    out->arena_bytes[TG_ARENA_SCRATCH] = scratch;
}

tg_status tg_plan_build(const tg_graph *g, const tg_plan_req *req, tg_plan *out) {
    memset(out, 0, sizeof *out);
    tg_status st = check_total(g, req->align);
    if (st != TG_OK) return st;
    planner pl;
    if (!planner_init(&pl, g, req, out)) {
        planner_free(&pl);
        tg_plan_free(out);
        return tg_fail(TG_ERR_NOMEM, "plan: out of memory");
    }
    own_kinds(&pl);
    classes(&pl);
    updates_in_place(&pl);
    ops_in_place(&pl);
    slots(&pl);
    offsets(&pl);
    planner_free(&pl);
    return tg_plan_check(g, out, pl.fu);
}

tg_status tg_plan_check(const tg_graph *g, const tg_plan *p, const tg_fusion *fu) {
    /* Every value is read while it is there: after the turn that writes it,
     * inside its class's live range. A fused (absorbed) value lives only in
     * its group's kernel, so only that kernel (the same turn) may read it,
     * and later kernels that compute it again (remat). */
    for (int i = 0; i < p->n; i++) {
        const tg_slot *s = &p->slot[i];
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int x = g->nodes[i].in[k];
            const tg_slot *sx = &p->slot[x];
            if (sx->kind == TG_BUF_NONE) {
                if (sx->at != s->at && !(sx->remat && s->at > sx->at))
                    return tg_fail(TG_ERR_STATE, "plan check: node %d reads fused node %d outside its kernel", i, x);
                continue;
            }
            if (sx->at > s->at || s->at < sx->first || s->at > sx->last)
                return tg_fail(TG_ERR_STATE,
                               "plan check: node %d reads node %d at turn %d, outside its value's life (%d, %d-%d)", i,
                               x, s->at, sx->at, sx->first, sx->last);
        }
        if (s->kind != TG_BUF_NONE && (s->at < s->first || s->at > s->last))
            return tg_fail(TG_ERR_STATE, "plan check: node %d is written at turn %d, outside its class's life %d-%d", i,
                           s->at, s->first, s->last);
        if (s->kind == TG_BUF_GRAD && s->last != p->n - 1) /* read after the step */
            return tg_fail(TG_ERR_STATE, "plan check: gradient node %d lives only to turn %d of %d", i, s->last,
                           p->n - 1);
    }
    for (int q = 0; fu && fu->n == p->n && q < fu->n_groups; q++) {
        int x = fu->also_reads[q], t = fu->turn[q];
        if (x < 0) continue;
        const tg_slot *sx = &p->slot[x];
        if (sx->kind == TG_BUF_NONE || sx->at > t || t < sx->first || t > sx->last)
            return tg_fail(TG_ERR_STATE,
                           "plan check: fused group %d reads node %d at turn %d, outside its value's life (%d, %d-%d)",
                           q, x, t, sx->at, sx->first, sx->last);
    }
    /* Every node fits its class's memory and stays inside its arena. */
    for (int i = 0; i < p->n; i++) {
        const tg_slot *s = &p->slot[i], *r = &p->slot[s->root];
        if (s->kind == TG_BUF_NONE) {
            if (s->arena != -1 || s->bytes != 0 || s->root != i)
                return tg_fail(TG_ERR_STATE, "plan check: fused node %d has memory", i);
            continue;
        }
        if (s->offset != r->offset || s->arena != r->arena)
            return tg_fail(TG_ERR_STATE, "plan check: node %d is placed apart from its class %d", i, s->root);
        if (s->offset < 0 || s->offset + s->bytes > p->arena_bytes[s->arena])
            return tg_fail(TG_ERR_STATE, "plan check: node %d (%lld bytes at %lld) overruns arena %d", i,
                           (long long)s->bytes, (long long)s->offset, s->arena);
        if (s->offset % p->align)
            return tg_fail(TG_ERR_STATE, "plan check: node %d offset %lld is not aligned", i, (long long)s->offset);
    }
    /* No two distinct classes that are live at the same time (or persistent)
     * share a byte. */
    for (int i = 0; i < p->n; i++) {
        const tg_slot *a = &p->slot[i];
        if (a->root != i || a->kind == TG_BUF_NONE) continue;
        for (int j = i + 1; j < p->n; j++) {
            const tg_slot *b = &p->slot[j];
            if (b->root != j || b->arena != a->arena || b->kind == TG_BUF_NONE) continue;
            bool both_live = a->arena != TG_ARENA_SCRATCH || !(a->last < b->first || b->last < a->first);
            if (!both_live) continue;
            /* Two uses of one param (same param node twice) cannot happen: one node per param. */
            if (a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes) {
                if (a->arena == TG_ARENA_PARAMS && g->nodes[i].param == g->nodes[j].param) continue;
                return tg_fail(TG_ERR_STATE,
                               "plan check: nodes %d and %d are live together and overlap in arena %d", i, j,
                               a->arena);
            }
        }
    }
    return TG_OK;
}

void tg_plan_print(const tg_graph *g, const tg_plan *p, FILE *f) {
    int64_t by_kind[TG_BUF_NONE + 1] = {0};
    fprintf(f, "%-6s %-16s %-8s %5s %10s %12s %11s\n", "node", "op", "kind", "arena", "offset", "bytes", "live");
    for (int i = 0; i < p->n; i++) {
        const tg_slot *s = &p->slot[i];
        if (s->root != i) continue;
        by_kind[s->kind] += s->bytes;
        fprintf(f, "%%%-5d %-16s %-8s %5d %10lld %12lld %5d-%-5d\n", i, tg_ops[g->nodes[i].op].name,
                tg_plan_kind_name(s->kind), s->arena, (long long)s->offset, (long long)s->bytes, s->first, s->last);
    }
    fprintf(f, "classes by kind:");
    for (int k = 0; k <= TG_BUF_SCRATCH; k++) fprintf(f, " %s=%lld", tg_plan_kind_name(k), (long long)by_kind[k]);
    int n_fused = 0;
    for (int i = 0; i < p->n; i++) n_fused += p->slot[i].kind == TG_BUF_NONE;
    if (n_fused) fprintf(f, " (and %d values kept inside fused kernels)", n_fused);
    int64_t total = p->arena_bytes[0] + p->arena_bytes[1] + p->arena_bytes[2];
    fprintf(f, "\narenas: params=%lld persist=%lld scratch=%lld\n", (long long)p->arena_bytes[0],
            (long long)p->arena_bytes[1], (long long)p->arena_bytes[2]);
    fprintf(f, "planned %lld bytes vs %lld one-buffer-per-tensor (%.1f%%), %d kernels\n", (long long)total,
            (long long)p->naive_bytes, p->naive_bytes ? 100.0 * (double)total / (double)p->naive_bytes : 0.0,
            p->n_kernels);
}

void tg_plan_free(tg_plan *p) {
    free(p->slot);
    free(p->wb_free);
    memset(p, 0, sizeof *p);
}
