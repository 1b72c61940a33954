/* The kernels of the many-tensor groups chosen before planning (grouping.c):
 *
 *   optimizer  every param's update in one dispatch: workgroups are dealt to
 *              params (a segment each, ceil(n / 256) workgroups), and each
 *              workgroup finds its segment in a table baked into the source
 *              as a tree of comparisons (uniform per workgroup: no
 *              divergence, no memory). Each invocation updates one element
 *              of m, v and the param (or SGD's velocity and param) with the
 *              expressions of the per-node kernels (ops_ew.c), so the fused
 *              update computes exactly what they do.
 *   sums of squares  the clip norm's sum(g * g) of every gradient: one
 *              dispatch of 4096-element partial sums into the workspace,
 *              then one workgroup adds each tensor's partials in order and
 *              evaluates the graph's tree of adds over the totals.
 *
 * Operands are bound one range per arena (the union of every operand in
 * it); a group whose ranges would pass maxStorageBufferBindingSize is cut
 * into several dispatches, and a scalar that no range can reach is bound
 * alone (spans_scalars). Offsets are baked in, so each model gets its own
 * pipeline for these. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "groups.h"
#include "../optim/update.h"

#define WG 256u
#define CHUNK 4096 /* elements per partial sum: 16 per invocation */

/* One binding per arena, the union of the ranges added, and one of its
 * own for each scalar added alone (spans_one). */
#define SPAN_ONES TG_WGSL_MAX_BINDINGS
typedef struct {
    int64_t lo[TG_N_ARENAS], hi[TG_N_ARENAS];
    int bind[TG_N_ARENAS]; /* binding index, -1 unused */
    int one[SPAN_ONES], one_bind[SPAN_ONES], n_one;
} spans;

static void spans_init(spans *s) {
    for (int a = 0; a < TG_N_ARENAS; a++) s->lo[a] = INT64_MAX, s->hi[a] = -1, s->bind[a] = -1;
    s->n_one = 0;
}

/* A value bound on its own, outside its arena's span. */
static void spans_one(spans *s, const tg_plan *p, int node) {
    if (node < 0 || p->slot[node].arena < 0) return;
    const tg_slot *sl = &p->slot[node];
    for (int i = 0; i < s->n_one; i++) { /* a value in place over another is bound with it */
        const tg_slot *o = &p->slot[s->one[i]];
        if (o->arena == sl->arena && o->offset == sl->offset && o->bytes == sl->bytes) return;
    }
    if (s->n_one < SPAN_ONES) s->one[s->n_one++] = node;
    else s->n_one = SPAN_ONES + 1; /* too many: spans_bind fails */
}

/* Adds node's bytes; a node kept inside the group (no memory) binds nothing. */
static void spans_add(spans *s, const tg_plan *p, int node) {
    if (node < 0 || p->slot[node].arena < 0) return;
    const tg_slot *sl = &p->slot[node];
    if (sl->offset < s->lo[sl->arena]) s->lo[sl->arena] = sl->offset;
    if (sl->offset + sl->bytes > s->hi[sl->arena]) s->hi[sl->arena] = sl->offset + sl->bytes;
}

static bool spans_fit(const spans *s, const tg_wgsl_limits *lim) {
    for (int a = 0; a < TG_N_ARENAS; a++)
        if (s->hi[a] >= 0 && (uint64_t)(s->hi[a] - s->lo[a]) > lim->max_storage_buffer_binding_size) return false;
    return true;
}

/* Small values (scalars) that may lie far from the rest of their arena's
 * span (the optimizer's clip scale, hyperparameters and step check; the
 * clip norm's total and the scalars after it): each joins its arena's span
 * while that still fits a binding, and the rest, outside the spans, are
 * bound alone. (Writable bindings of one dispatch must not overlap, so a
 * value inside a span is never bound apart.) */
static void spans_scalars(spans *s, const tg_plan *p, const int *nodes, int n, const tg_wgsl_limits *lim) {
    for (int i = 0; i < n; i++) {
        spans t = *s;
        spans_add(&t, p, nodes[i]);
        if (spans_fit(&t, lim)) *s = t;
    }
    for (int i = 0; i < n; i++) {
        if (nodes[i] < 0 || p->slot[nodes[i]].arena < 0) continue;
        const tg_slot *sl = &p->slot[nodes[i]];
        if (sl->offset < s->lo[sl->arena] || sl->offset + sl->bytes > s->hi[sl->arena]) spans_one(s, p, nodes[i]);
    }
}

/* Declares the bindings (and a workspace binding of `work` bytes if > 0).
 * Each binding is checked as Dawn will bind it, whole: a chunk of one param
 * is never cut further, so its span (the update's state, gradient, clip
 * scale and hyperparameters included) may alone be over the limit. */
static void spans_bind(wgsl_kernel *k, spans *s, int64_t work) {
    tg_kernel_spec *sp = k->spec;
    for (int a = 0; a < TG_N_ARENAS; a++) {
        if (s->hi[a] < 0) continue;
        if ((uint64_t)(s->hi[a] - s->lo[a]) > k->lim->max_storage_buffer_binding_size)
            tg_kernel_fail(k, TG_ERR_LIMIT, "a fused kernel needs a %lld-byte storage binding of arena %d, over "
                    "maxStorageBufferBindingSize %llu", (long long)(s->hi[a] - s->lo[a]), a,
                    (unsigned long long)k->lim->max_storage_buffer_binding_size);
        if (s->lo[a] % k->lim->min_storage_buffer_offset_alignment)
            tg_kernel_fail(k, TG_ERR_LIMIT, "a fused kernel's binding of arena %d starts at %lld, not a multiple of "
                    "minStorageBufferOffsetAlignment %u", a, (long long)s->lo[a],
                    k->lim->min_storage_buffer_offset_alignment);
    }
    tg_source_printf(&k->source, "fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }\n");
    for (int a = 0; a < TG_N_ARENAS; a++) {
        if (s->hi[a] < 0) continue;
        s->bind[a] = sp->n_bindings;
        sp->bind[sp->n_bindings++] = (tg_wgsl_binding){a, s->lo[a], s->hi[a] - s->lo[a]};
        tg_source_printf(&k->source, "@group(0) @binding(%d) var<storage, read_write> b%d: array<u32>;\n", s->bind[a], s->bind[a]);
    }
    int n = s->n_one + (work > 0);
    for (int a = 0; a < TG_N_ARENAS; a++) n += s->hi[a] >= 0;
    if (n > TG_WGSL_MAX_BINDINGS || (uint32_t)n > k->lim->max_storage_buffers_per_stage) {
        tg_kernel_fail(k, TG_ERR_LIMIT, "a fused kernel needs %d storage buffers, over maxStorageBuffersPerShaderStage %u", n, k->lim->max_storage_buffers_per_stage);
        s->n_one = 0;
    }
    for (int i = 0; i < s->n_one; i++) {
        const tg_slot *sl = &k->plan->slot[s->one[i]];
        if (sl->offset % k->lim->min_storage_buffer_offset_alignment)
            tg_kernel_fail(k, TG_ERR_LIMIT, "a fused kernel's binding of node %d starts at %lld, not a multiple of "
                       "minStorageBufferOffsetAlignment %u", s->one[i], (long long)sl->offset,
                       k->lim->min_storage_buffer_offset_alignment);
        s->one_bind[i] = sp->n_bindings;
        sp->bind[sp->n_bindings++] = (tg_wgsl_binding){sl->arena, sl->offset, sl->bytes};
        tg_source_printf(&k->source, "@group(0) @binding(%d) var<storage, read_write> b%d: array<u32>;\n", s->one_bind[i],
                      s->one_bind[i]);
    }
    if (work > 0) {
        sp->workspace = work;
        sp->bind[sp->n_bindings] = (tg_wgsl_binding){TG_WGSL_WORKSPACE, 0, work};
        tg_source_printf(&k->source, "@group(0) @binding(%d) var<storage, read_write> work: array<u32>;\n", sp->n_bindings);
        sp->n_bindings++;
    }
}

/* The binding that holds node (one bound alone, or its arena's span) and
 * node's first element there. */
static int bind_of(const spans *s, const tg_plan *p, int node, long long *el) {
    const tg_slot *sl = &p->slot[node];
    for (int i = 0; i < s->n_one; i++) {
        const tg_slot *o = &p->slot[s->one[i]];
        if (o->arena == sl->arena && sl->offset >= o->offset && sl->offset + sl->bytes <= o->offset + o->bytes) {
            *el = (long long)((sl->offset - o->offset) / 4);
            return s->one_bind[i];
        }
    }
    *el = (long long)((sl->offset - s->lo[sl->arena]) / 4);
    return s->bind[sl->arena];
}

/* "bB[OFFu + " for node's element 0 (the caller appends the index and "]"). */
static const char *at(const spans *s, const tg_plan *p, int node, char *buf, size_t n) {
    long long el;
    int b = bind_of(s, p, node, &el);
    snprintf(buf, n, "b%d[%lldu + ", b, el);
    return buf;
}

static long long elem(const spans *s, const tg_plan *p, int node) {
    long long el = 0;
    if (node >= 0) bind_of(s, p, node, &el);
    return el;
}

static int binding(const spans *s, const tg_plan *p, int node) {
    long long el;
    return bind_of(s, p, node, &el);
}

/* fn seg(w) -> Seg: the segment whose workgroups [w0[i], w0[i+1]) hold w,
 * as a balanced tree of comparisons over `fields` pre-formatted initializers. */
static void seg_tree(wgsl_kernel *k, const int64_t *w0, char (*init)[256], int lo, int hi, int depth) {
    if (hi - lo == 1) {
        tg_source_printf(&k->source, "%*sreturn Seg(%s);\n", 4 * depth, "", init[lo]);
        return;
    }
    int mid = (lo + hi) / 2;
    tg_source_printf(&k->source, "%*sif (w < %lldu) {\n", 4 * depth, "", (long long)w0[mid]);
    seg_tree(k, w0, init, lo, mid, depth + 1);
    tg_source_printf(&k->source, "%*s}\n", 4 * depth, "");
    seg_tree(k, w0, init, mid, hi, depth);
}

/* The tables seg_tree reads: n first workgroups and n initializers. */
static bool seg_alloc(int n, int64_t **w0, char (**init)[256]) {
    *w0 = tg_calloc((size_t)n + 1, sizeof **w0);
    *init = tg_calloc((size_t)n + 1, sizeof **init);
    if (*w0 && *init) return true;
    free(*w0), free(*init);
    return false;
}

/* ---- optimizer ---- */

/* The tensors of update q (its scalars are bound apart: spans_scalars). */
static void optim_spans(spans *s, const tg_plan *p, const optim_update *q) {
    int nodes[] = {q->p, q->p2, q->m, q->m2, q->v, q->v2, q->grad};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) spans_add(s, p, nodes[i]);
}

/* An update takes 4 elements an invocation, e, e + WG, e + 2 WG and
 * e + 3 WG of its workgroup's PER_WG (ev; ix: clamped into the tensor),
 * every load issued before the arithmetic: at an element an invocation, a
 * workgroup's search for its param and the scalars' loads come once per
 * element, and fewer loads are in flight (docs/performance.md, "The
 * optimizer"). */
#define PER_WG (4 * WG)

/* let name = the 4 elements of binding b from field s.<at> */
static void load4(wgsl_kernel *k, const char *name, int b, const char *at) {
    tg_source_printf(&k->source, "    let %s = vec4<f32>(", name);
    for (int c = 0; c < 4; c++) tg_source_printf(&k->source, "%sbitcast<f32>(b%d[s.%s + ix.%c])", c ? ", " : "", b, at, "xyzw"[c]);
    tg_source_printf(&k->source, ");\n");
}

/* val's elements into binding b from field s.<at>, those inside the tensor */
static void store4(wgsl_kernel *k, int b, const char *at, const char *val) {
    for (int c = 0; c < 4; c++)
        tg_source_printf(&k->source, "    if (ev.%c < s.n) { b%d[s.%s + ev.%c] = bitcast<u32>(%s.%c); }\n", "xyzw"[c], b, at, "xyzw"[c],
                      val, "xyzw"[c]);
}

/* Updates [from, to) of the group as one kernel; chk: the step check gating
 * them (tg_wgsl_limits.gate_updates), -1 for none. */
static tg_status emit_optim_chunk(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                                  int from, int to, int chk, tg_wgsl_program *out, int *cap, spec_push_fn push) {
    spans t;
    spans_init(&t);
    optim_spans(&t, plan, &gr->seg[from]);
    bool alone = to == from + 1 && !spans_fit(&t, lim); /* one update whose tensors one span cannot hold */
    tg_kernel_spec *sp;
    tg_status st = push(out, cap, &sp);
    if (st != TG_OK) return st;
    wgsl_kernel k;
    tg_kernel_open(&k, g, plan, lim, gr->turn, sp);
    spans s;
    spans_init(&s);
    for (int i = from; i < to && !alone; i++) optim_spans(&s, plan, &gr->seg[i]);
    const optim_update *q0 = &gr->seg[from];
    int sc[3] = {q0->scale, q0->hyper, chk}; /* the same for every update of the group (grouping.c) */
    if (alone) { /* each tensor and scalar bound on its own (an update in place is its tensor's binding) */
        int nodes[] = {q0->p, q0->p2, q0->m, q0->m2, q0->v, q0->v2, q0->grad, sc[0], sc[1], sc[2]};
        for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) spans_one(&s, plan, nodes[i]);
    } else {
        spans_scalars(&s, plan, sc, 3, lim);
    }
    bool adam = g->nodes[q0->p2].op == TG_OP_ADAM_P;
    tg_source_printf(&k.source, "// node %d: %s update of %d params (%d to %d of the group)\n", gr->turn, adam ? "adam" : "sgd",
               to - from, from, to - 1);
    spans_bind(&k, &s, 0);
    int n = to - from;
    int64_t *w0;
    char (*init)[256];
    if (!seg_alloc(n, &w0, &init)) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const optim_update *q = &gr->seg[from + i];
        int64_t ne = tg_ir_numel(&g->nodes[q->p2]);
        w0[i] = total;
        snprintf(init[i], sizeof init[i], "%lldu, %lldu, %lldu, %lldu, %lldu, %lldu, %lldu, %lldu, %lldu, %uu",
                 (long long)total, (long long)ne, elem(&s, plan, q->p), elem(&s, plan, q->p2), elem(&s, plan, q->m),
                 elem(&s, plan, q->m2), elem(&s, plan, q->v), elem(&s, plan, q->v2), elem(&s, plan, q->grad),
                 q->decay ? 1u : 0u);
        total += (ne + PER_WG - 1) / PER_WG;
    }
    tg_source_printf(&k.source, "struct Seg { w0: u32, n: u32, pr: u32, pw: u32, mr: u32, mw: u32, vr: u32, vw: u32, g: u32, d: u32 }\n"
                     "fn seg(w: u32) -> Seg {\n");
    seg_tree(&k, w0, init, 0, n, 1);
    tg_source_printf(&k.source, "}\n");
    free(w0), free(init);
    if (tg_kernel_main(&k, total, WG)) {
        sp->threads = total * WG;
        char a[64];
        int bp = binding(&s, plan, q0->p), bg = binding(&s, plan, q0->grad);
        tg_source_printf(&k.source,
                   "    if (gid >= %lldu) { return; }\n    let s = seg(gid);\n    let e = (gid - s.w0) * %uu + lid;\n"
                   "    if (e >= s.n) { return; }\n"
                   "    let ev = vec4<u32>(e) + vec4<u32>(0u, %uu, %uu, %uu);\n    let ix = min(ev, vec4<u32>(s.n - 1u));\n",
                   (long long)total, PER_WG, WG, 2 * WG, 3 * WG);
        if (chk >= 0) { /* the exponent's bits: a shader compiler may assume floats are never NaN */
            tg_source_printf(&k.source, "    if ((%s0u] & 0x7f800000u) == 0x7f800000u) { return; }\n", at(&s, plan, chk, a, sizeof a));
            sp->gated = true;
        }
        load4(&k, "g0", bg, "g");
        if (q0->scale >= 0)
            tg_source_printf(&k.source, "    let gs = bitcast<f32>(%s0u]);\n    let g = %s;\n", at(&s, plan, q0->scale, a, sizeof a),
                       TG_WGSL(TG_OPT_GRAD(tg_w, g0, gs)));
        else tg_source_printf(&k.source, "    let g = g0;\n");
        load4(&k, "p", bp, "pr");
        if (adam) {
            int bm = binding(&s, plan, q0->m), bv = binding(&s, plan, q0->v);
            tg_kernel_let_f32(&k, "beta1", q0->hp[0]), tg_kernel_let_f32(&k, "ob1", 1.0f - q0->hp[0]);
            tg_kernel_let_f32(&k, "beta2", q0->hp[1]), tg_kernel_let_f32(&k, "ob2", 1.0f - q0->hp[1]);
            tg_kernel_let_f32(&k, "eps", q0->hp[2]);
            load4(&k, "m0", bm, "mr");
            load4(&k, "v0", bv, "vr");
            tg_source_printf(&k.source, "    let lrt = bitcast<f32>(%s%du]);\n", at(&s, plan, q0->hyper, a, sizeof a), TG_HYPER_LRT);
            tg_source_printf(&k.source, "    let shrink = select(1.0f, bitcast<f32>(%s%du]), s.d != 0u);\n",
                       at(&s, plan, q0->hyper, a, sizeof a), TG_HYPER_SHRINK);
            tg_source_printf(&k.source, "    let m = %s;\n    let v = %s;\n    let u = %s;\n", TG_WGSL(TG_ADAM_M(tg_w, beta1, ob1, m0, g)),
                       TG_WGSL(TG_ADAM_V(tg_w, beta2, ob2, v0, g)), TG_WGSL(TG_ADAM_P(tg_w, shrink, lrt, eps, p, m, v)));
            store4(&k, binding(&s, plan, q0->m2), "mw", "m");
            store4(&k, binding(&s, plan, q0->v2), "vw", "v");
        } else {
            tg_kernel_let_f32(&k, "mu", q0->hp[0]), tg_kernel_let_f32(&k, "wd", q0->hp[1]);
            tg_source_printf(&k.source, "    let lr = bitcast<f32>(%s%du]);\n", at(&s, plan, q0->hyper, a, sizeof a), TG_HYPER_LR);
            if (q0->momentum) {
                load4(&k, "v0", binding(&s, plan, q0->v), "vr");
                tg_source_printf(&k.source, "    let v = %s;\n", TG_WGSL(TG_SGD_V(tg_w, mu, wd, v0, g, p)));
                store4(&k, binding(&s, plan, q0->v2), "vw", "v");
            }
            tg_wgsl_sgd_step(&k, q0->momentum, q0->nesterov);
        }
        store4(&k, binding(&s, plan, q0->p2), "pw", "u");
        tg_kernel_end(&k);
    }
    return tg_kernel_close(&k, out);
}

/* Whether updates a and b keep each role in the same arena: one kernel's
 * code reads every param, state and gradient through its role's binding. */
static bool same_arenas(const tg_plan *p, const optim_update *a, const optim_update *b) {
    int x[7] = {a->p, a->p2, a->m, a->m2, a->v, a->v2, a->grad}, y[7] = {b->p, b->p2, b->m, b->m2, b->v, b->v2, b->grad};
    for (int k = 0; k < 7; k++)
        if ((x[k] < 0) != (y[k] < 0) || (x[k] >= 0 && p->slot[x[k]].arena != p->slot[y[k]].arena)) return false;
    return true;
}

/* The updates in chunks whose bindings fit (an arena's span of the chunk's
 * tensors each; one update too big for that binds each tensor alone), every
 * chunk gated on the step check when asked (tg_wgsl_limits.gate_updates). */
static tg_status emit_optim(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                            tg_wgsl_program *out, int *cap, spec_push_fn push) {
    int from = 0, chk = lim->gate_updates ? lim->step_check : -1;
    spans s;
    spans_init(&s);
    for (int i = 0; i < gr->n_seg; i++) {
        spans t = s;
        optim_spans(&t, plan, &gr->seg[i]);
        if (i > from && (!spans_fit(&t, lim) || !same_arenas(plan, &gr->seg[from], &gr->seg[i]))) { /* cut before this param */
            tg_status st = emit_optim_chunk(g, plan, lim, gr, from, i, chk, out, cap, push);
            if (st != TG_OK) return st;
            from = i;
            spans_init(&t);
            optim_spans(&t, plan, &gr->seg[i]);
        }
        s = t;
    }
    return emit_optim_chunk(g, plan, lim, gr, from, gr->n_seg, chk, out, cap, push);
}

/* ---- sums of squares ---- */

static int64_t n_parts(const tg_graph *g, const tg_sumsq_term *t) { return (tg_ir_numel(&g->nodes[t->x]) + CHUNK - 1) / CHUNK; }

/* Partial sums of terms [from, to) into work[wbase ..]. */
static tg_status emit_partials(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                               int from, int to, int64_t wbase, int64_t work, tg_wgsl_program *out, int *cap,
                               spec_push_fn push) {
    tg_kernel_spec *sp;
    tg_status st = push(out, cap, &sp);
    if (st != TG_OK) return st;
    wgsl_kernel k;
    tg_kernel_open(&k, g, plan, lim, gr->turn, sp);
    spans s;
    spans_init(&s);
    for (int i = from; i < to; i++) spans_add(&s, plan, gr->term[i].x);
    tg_source_printf(&k.source, "// node %d: sums of squares of %d tensors (%d to %d of the group): partial sums\n", gr->turn,
               to - from, from, to - 1);
    spans_bind(&k, &s, work);
    int n = to - from;
    int64_t *w0;
    char (*init)[256];
    if (!seg_alloc(n, &w0, &init)) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const tg_sumsq_term *t = &gr->term[from + i];
        const tg_slot *sl = &plan->slot[t->x];
        w0[i] = total;
        snprintf(init[i], sizeof init[i], "%lldu, %lldu, %lldu, %du", (long long)total, (long long)tg_ir_numel(&g->nodes[t->x]),
                 elem(&s, plan, t->x), s.bind[sl->arena]);
        total += n_parts(g, t);
    }
    tg_source_printf(&k.source, "struct Seg { w0: u32, n: u32, x: u32, b: u32 }\nfn seg(w: u32) -> Seg {\n");
    seg_tree(&k, w0, init, 0, n, 1);
    tg_source_printf(&k.source, "}\n");
    /* a term's binding is picked per workgroup (uniform), from the few arenas in use */
    tg_source_printf(&k.source, "fn ldx(b: u32, i: u32) -> f32 {\n");
    for (int a = 0; a < TG_N_ARENAS; a++)
        if (s.bind[a] >= 0) tg_source_printf(&k.source, "    if (b == %du) { return bitcast<f32>(b%d[i]); }\n", s.bind[a], s.bind[a]);
    tg_source_printf(&k.source, "    return 0.0f;\n}\n");
    free(w0), free(init);
    tg_kernel_red_decl(&k, WG, "f32");
    if (tg_kernel_main(&k, total, WG)) {
        sp->threads = total * WG;
        /* gid is uniform: the early return keeps the barriers uniform */
        tg_source_printf(&k.source,
                   "    if (gid >= %lldu) { return; }\n    let s = seg(gid);\n    let base = (gid - s.w0) * %du;\n"
                   "    var acc = 0.0f;\n"
                   "    for (var j = 0u; j < %du; j++) {\n"
                   "        let e = base + j * %uu + lid;\n"
                   "        if (e < s.n) {\n            let x = ldx(s.b, s.x + e);\n            acc += x * x;\n        }\n"
                   "    }\n",
                   (long long)total, CHUNK, CHUNK / (int)WG, WG);
        tg_kernel_reduce(&k, WG, "acc", false, "sum");
        tg_source_printf(&k.source, "    if (lid == 0u) { work[%lldu + gid] = bitcast<u32>(sum); }\n", (long long)wbase);
        tg_kernel_end(&k);
    }
    return tg_kernel_close(&k, out);
}

static int term_of(const tg_graph *g, const program_group *gr, int x) {
    while (tg_ops[g->nodes[x].op].flags & TG_OPF_VIEW) x = g->nodes[x].in[0];
    for (int t = 0; t < gr->n_term; t++)
        if (gr->term[t].sum == x) return t;
    return -1;
}

static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* One workgroup: each term's partials added in order, then the stored terms
 * and the graph's tree of adds over them. */
static int unview(const tg_graph *g, int x) {
    while (tg_ops[g->nodes[x].op].flags & TG_OPF_VIEW) x = g->nodes[x].in[0];
    return x;
}

/* The scalars after the total (fuse/sumsq.c), in node order:
 * `t<node>` in registers (f32, or u32 0/1 for a bool, as bools are
 * stored), stored where something outside the kernel reads them. */
static void emit_tails(wgsl_kernel *k, const tg_graph *g, const tg_plan *plan, const program_group *gr, const spans *s) {
    for (int q = 0; q < gr->n_tail; q++) {
        int id = gr->tail[q];
        const tg_node *nd = &g->nodes[id];
        char v[3][96], a[64];
        for (int j = 0; j < nd->nin; j++) {
            int x = unview(g, nd->in[j]);
            bool mine = x == gr->total;
            for (int r = 0; r < q && !mine; r++) mine = gr->tail[r] == x;
            if (mine) snprintf(v[j], sizeof v[j], "t%d", x);
            else if (g->nodes[x].dtype == TG_BOOL) snprintf(v[j], sizeof v[j], "%s0u]", at(s, plan, x, a, sizeof a));
            else snprintf(v[j], sizeof v[j], "bitcast<f32>(%s0u])", at(s, plan, x, a, sizeof a));
        }
        if (tg_ops[nd->op].flags & TG_OPF_MATH) { /* a math row of ops.def, written from its expression */
            const char *operand[2] = {v[0], v[1]};
            tg_wgsl_math_value(k, nd, operand, id);
        } else {
        tg_source_printf(&k->source, "        let t%d = ", id);
        switch (nd->op) {
        case TG_OP_ADD: tg_source_printf(&k->source, "%s + %s;\n", v[0], v[1]); break;
        case TG_OP_SUB: tg_source_printf(&k->source, "%s - %s;\n", v[0], v[1]); break;
        case TG_OP_MUL: tg_source_printf(&k->source, "%s * %s;\n", v[0], v[1]); break;
        case TG_OP_DIV: tg_source_printf(&k->source, "%s / %s;\n", v[0], v[1]); break;
        case TG_OP_LESS: tg_source_printf(&k->source, "select(0u, 1u, %s < %s);\n", v[0], v[1]); break;
        case TG_OP_GREATER: tg_source_printf(&k->source, "select(0u, 1u, %s > %s);\n", v[0], v[1]); break;
        default: tg_source_printf(&k->source, "select(%s, %s, %s != 0u);\n", v[2], v[1], v[0]); break; /* where */
        }
        }
        if (gr->tail_st[q])
            tg_source_printf(&k->source, "        %s0u] = %s;\n", at(s, plan, id, a, sizeof a),
                       nd->dtype == TG_BOOL ? (snprintf(v[0], sizeof v[0], "t%d", id), v[0])
                                            : (snprintf(v[0], sizeof v[0], "bitcast<u32>(t%d)", id), v[0]));
    }
}

static tg_status emit_combine(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                              int64_t work, tg_wgsl_program *out, int *cap, spec_push_fn push) {
    tg_kernel_spec *sp;
    tg_status st = push(out, cap, &sp);
    if (st != TG_OK) return st;
    wgsl_kernel k;
    tg_kernel_open(&k, g, plan, lim, gr->turn, sp);
    spans s;
    spans_init(&s);
    int *sc = tg_calloc((size_t)(gr->n_term + 1 + 4 * gr->n_tail) + 1, sizeof(int)), n_sc = 0;
    if (!sc) return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    for (int t = 0; t < gr->n_term; t++)
        if (gr->term[t].store) sc[n_sc++] = gr->term[t].sum;
    if (gr->total >= 0) sc[n_sc++] = gr->total;
    for (int q = 0; q < gr->n_tail; q++) {
        const tg_node *nd = &g->nodes[gr->tail[q]];
        if (gr->tail_st[q]) sc[n_sc++] = gr->tail[q];
        for (int j = 0; j < nd->nin; j++) sc[n_sc++] = unview(g, nd->in[j]);
    }
    spans_scalars(&s, plan, sc, n_sc, lim);
    free(sc);
    tg_source_printf(&k.source, "// node %d: sums of squares of %d tensors: totals", gr->turn, gr->n_term);
    if (gr->n_tail) tg_source_printf(&k.source, ", then %d scalars from the total", gr->n_tail);
    tg_source_printf(&k.source, "\n");
    spans_bind(&k, &s, work);
    int n = gr->n_term;
    int64_t *w0;
    char (*init)[256];
    int *tree = tg_calloc((size_t)gr->n_tree + 1, sizeof(int));
    if (!tree || !seg_alloc(n, &w0, &init)) {
        free(tree);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory");
    }
    int64_t p0 = 0;
    for (int t = 0; t < n; t++) {
        w0[t] = t;
        snprintf(init[t], sizeof init[t], "%lldu, %lldu", (long long)p0, (long long)n_parts(g, &gr->term[t]));
        p0 += n_parts(g, &gr->term[t]);
    }
    for (int q = 0; q < gr->n_tail; q++) /* the functions the math rows among the scalars call */
        if (tg_ops[g->nodes[gr->tail[q]].op].flags & TG_OPF_MATH) tg_wgsl_math_helpers(&k, g->nodes[gr->tail[q]].op);
    tg_source_printf(&k.source, "struct Seg { p: u32, n: u32 }\nfn seg(w: u32) -> Seg {\n");
    seg_tree(&k, w0, init, 0, n, 1);
    tg_source_printf(&k.source, "}\n");
    tg_kernel_shared(&k, "sv", "f32", n);
    free(w0), free(init);
    if (tg_kernel_main(&k, 1, WG)) {
        sp->threads = WG;
        tg_source_printf(&k.source,
                   "    for (var t = lid; t < %du; t += %uu) {\n        let r = seg(t);\n        var acc = 0.0f;\n"
                   "        for (var q = 0u; q < r.n; q++) { acc += bitcast<f32>(work[r.p + q]); }\n"
                   "        sv[t] = acc;\n    }\n    workgroupBarrier();\n    if (lid == 0u) {\n",
                   n, WG);
        char a[64];
        for (int t = 0; t < n; t++)
            if (gr->term[t].store)
                tg_source_printf(&k.source, "        %s0u] = bitcast<u32>(sv[%du]);\n", at(&s, plan, gr->term[t].sum, a, sizeof a), t);
        memcpy(tree, gr->tree, sizeof(int) * (size_t)gr->n_tree);
        qsort(tree, (size_t)gr->n_tree, sizeof(int), by_id);
        for (int q = 0; q < gr->n_tree; q++) {
            const tg_node *ad = &g->nodes[tree[q]];
            char opnd[2][32];
            for (int j = 0; j < 2; j++) {
                int x = ad->in[j];
                while (tg_ops[g->nodes[x].op].flags & TG_OPF_VIEW) x = g->nodes[x].in[0];
                int t = term_of(g, gr, x);
                if (t >= 0) snprintf(opnd[j], sizeof opnd[j], "sv[%du]", t);
                else snprintf(opnd[j], sizeof opnd[j], "t%d", x);
            }
            tg_source_printf(&k.source, "        let t%d = %s + %s;\n", tree[q], opnd[0], opnd[1]);
        }
        if (gr->total >= 0) tg_source_printf(&k.source, "        %s0u] = bitcast<u32>(t%d);\n", at(&s, plan, gr->total, a, sizeof a), gr->total);
        emit_tails(&k, g, plan, gr, &s);
        tg_source_printf(&k.source, "    }\n");
        tg_kernel_end(&k);
    }
    free(tree);
    return tg_kernel_close(&k, out);
}

static tg_status emit_sumsq(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                            tg_wgsl_program *out, int *cap, spec_push_fn push) {
    int64_t parts = 0;
    for (int t = 0; t < gr->n_term; t++) parts += n_parts(g, &gr->term[t]);
    int64_t work = (parts ? parts : 1) * 4;
    if ((uint64_t)work > lim->max_storage_buffer_binding_size)
        return tg_fail(TG_ERR_LIMIT, "webgpu: node %d: %lld partial sums need %lld bytes, over maxStorageBufferBindingSize %llu",
                       gr->turn, (long long)parts, (long long)work, (unsigned long long)lim->max_storage_buffer_binding_size);
    if (work > out->workspace_bytes) out->workspace_bytes = work;
    int from = 0;
    int64_t wbase = 0, wfrom = 0;
    spans s;
    spans_init(&s);
    for (int t = 0; t < gr->n_term; t++) {
        spans u = s;
        spans_add(&u, plan, gr->term[t].x);
        if (t > from && !spans_fit(&u, lim)) {
            tg_status st = emit_partials(g, plan, lim, gr, from, t, wfrom, work, out, cap, push);
            if (st != TG_OK) return st;
            from = t;
            wfrom = wbase;
            spans_init(&u);
            spans_add(&u, plan, gr->term[t].x);
        }
        s = u;
        wbase += n_parts(g, &gr->term[t]);
    }
    tg_status st = emit_partials(g, plan, lim, gr, from, gr->n_term, wfrom, work, out, cap, push);
    if (st != TG_OK) return st;
    return emit_combine(g, plan, lim, gr, work, out, cap, push);
}

tg_status tg_wgsl_emit_span_group(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, const program_group *gr,
                        tg_wgsl_program *out, int *cap, spec_push_fn push) {
    switch (gr->kind) {
    case GROUP_OPTIM: return emit_optim(g, plan, lim, gr, out, cap, push);
    case GROUP_SUMSQ: return emit_sumsq(g, plan, lim, gr, out, cap, push);
    default: return tg_fail(TG_ERR_BACKEND, "webgpu: fused group of unknown kind %d", (int)gr->kind);
    }
}
