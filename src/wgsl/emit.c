/* The codegen driver: operands -> bindings (merged where they overlap, see
 * wgsl.h), limit checks, the accessor prelude, then the op's emitter. Also
 * the helpers emitters share: entry point and grid, index maps, literals. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "../cpu/kernels.h" /* tg_iter: the same dimension merging the CPU kernels use */

void wsb_printf(wsb *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int need = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (need < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->n + (size_t)need < b->cap) {
            b->n += (size_t)need;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + (size_t)need + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

const tg_node *wk_in(const wk *k, int i) { return &k->g->nodes[k->n->in[i]]; }

const char *wk_type(tg_dtype dt) { return dt == TG_F32 ? "f32" : dt == TG_I32 ? "i32" : "u32"; }

static const char *node_desc(const tg_graph *g, int id, char *buf, size_t n) {
    char sh[96];
    snprintf(buf, n, "node %d (%s %s %s)", id, tg_ops[g->nodes[id].op].name, tg_dtype_name(g->nodes[id].dtype),
             tg_shape_str(g->nodes[id].shape, sh, sizeof sh));
    return buf;
}

bool wk_fail(wk *k, tg_status s, const char *fmt, ...) {
    if (k->st != TG_OK) return false;
    char msg[512], who[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    k->st = tg_fail(s, "webgpu: %s: %s", node_desc(k->g, k->id, who, sizeof who), msg);
    return false;
}

const char *wk_f32(float v, char buf[48]) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    int cls = fpclassify(v);
    if (cls == FP_NORMAL || cls == FP_ZERO) {
        char t[40];
        snprintf(t, sizeof t, "%.9g", (double)v);
        if (strtof(t, NULL) == v && (cls != FP_ZERO || !signbit(v))) {
            bool dot = strpbrk(t, ".e") != NULL;
            snprintf(buf, 48, v < 0 ? "(%s%sf)" : "%s%sf", t, dot ? "" : ".0");
            return buf;
        }
    }
    snprintf(buf, 48, "f32_bits(0x%08xu)", bits); /* inf, nan, subnormal, -0 */
    return buf;
}

/* Splits `groups` workgroups over x (and y when x is not enough). */
static bool grid(wk *k, int64_t groups, uint32_t *gx, uint32_t *gy) {
    int64_t lim = k->lim->max_workgroups_per_dimension;
    if (groups <= 0) groups = 1;
    int64_t y = (groups + lim - 1) / lim;
    int64_t x = (groups + y - 1) / y;
    if (y > lim)
        return wk_fail(k, TG_ERR_LIMIT, "%lld workgroups exceed %lld x %lld (maxComputeWorkgroupsPerDimension)",
                       (long long)groups, (long long)lim, (long long)lim);
    *gx = (uint32_t)x;
    *gy = (uint32_t)y;
    return true;
}

bool wk_main(wk *k, int64_t groups, uint32_t wg) {
    uint32_t gx = 1, gy = 1;
    if (wg > k->lim->max_invocations_per_workgroup)
        return wk_fail(k, TG_ERR_LIMIT, "workgroup of %u invocations exceeds maxComputeInvocationsPerWorkgroup %u", wg,
                       k->lim->max_invocations_per_workgroup);
    if (!grid(k, groups, &gx, &gy)) return false;
    k->spec->workgroup_size = wg;
    k->spec->dispatch[0] = gx;
    k->spec->dispatch[1] = gy;
    k->spec->dispatch[2] = 1;
    wsb_printf(&k->s,
               "@compute @workgroup_size(%u)\n"
               "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
               "    let gid = wid.y * %uu + wid.x;\n",
               wg, gx);
    return true;
}

#define FLAT_WG 256u

bool wk_flat(wk *k, int64_t n) {
    k->spec->threads = n;
    if (!wk_main(k, (n + FLAT_WG - 1) / FLAT_WG, FLAT_WG)) return false;
    wsb_printf(&k->s, "    let i = gid * %uu + lid;\n    if (i >= %lluu) { return; }\n", FLAT_WG,
               (unsigned long long)n);
    return true;
}

void wk_end(wk *k) { wsb_printf(&k->s, "}\n"); }

void wk_index_fn(wk *k, const char *name, int nd, const int64_t *d, const int64_t *st) {
    wsb_printf(&k->s, "fn %s(i: u32) -> u32 {\n    var r = i;\n    var o = 0u;\n", name);
    for (int a = nd - 1; a > 0; a--) {
        if (st[a]) wsb_printf(&k->s, "    o += (r %% %lldu) * %lldu;\n", (long long)d[a], (long long)st[a]);
        wsb_printf(&k->s, "    r = r / %lldu;\n", (long long)d[a]);
    }
    if (nd > 0 && st[0]) wsb_printf(&k->s, "    o += r * %lldu;\n", (long long)st[0]);
    wsb_printf(&k->s, "    return o;\n}\n");
}

void wk_bcast_maps(wk *k, int nin, char expr[][16]) {
    int64_t st[TG_MAX_IN][TG_MAX_DIMS];
    for (int i = 0; i < nin; i++) shape_bcast_strides(wk_in(k, i)->shape, k->n->shape, st[i]);
    tg_iter it;
    tg_iter_init(&it, k->n->shape, nin, st);
    for (int i = 0; i < nin; i++) {
        bool same = true, zero = true;
        for (int a = 0; a < it.nd; a++) {
            same &= it.st[i + 1][a] == it.st[0][a];
            zero &= it.st[i + 1][a] == 0;
        }
        if (same) snprintf(expr[i], 16, "i");
        else if (zero) snprintf(expr[i], 16, "0u");
        else {
            char name[16];
            snprintf(name, sizeof name, "map%d", i);
            wk_index_fn(k, name, it.nd, it.d, it.st[i + 1]);
            snprintf(expr[i], 16, "map%d(i)", i);
        }
    }
}

/* ---- bindings ---- */

/* Operand o: 0 = the output, k+1 = input k. */
static int operand_node(const tg_node *n, int id, int o) { return o == 0 ? id : n->in[o - 1]; }

static bool bind_operands(wk *k, int *bind_of, int64_t *elem_off) {
    tg_kernel_spec *sp = k->spec;
    int nops = 1 + k->n->nin;
    for (int o = 0; o < nops; o++) {
        const tg_slot *s = &k->plan->slot[operand_node(k->n, k->id, o)];
        int64_t lo = s->offset, hi = s->offset + s->bytes;
        int b = -1;
        for (int j = 0; j < sp->n_bindings && b < 0; j++)
            if (sp->bind[j].arena == s->arena && lo < sp->bind[j].offset + sp->bind[j].size && sp->bind[j].offset < hi)
                b = j;
        if (b < 0) {
            b = sp->n_bindings++;
            sp->bind[b] = (tg_wgsl_binding){s->arena, lo, hi - lo};
        } else {
            int64_t blo = sp->bind[b].offset < lo ? sp->bind[b].offset : lo;
            int64_t bhi = sp->bind[b].offset + sp->bind[b].size > hi ? sp->bind[b].offset + sp->bind[b].size : hi;
            sp->bind[b].offset = blo;
            sp->bind[b].size = bhi - blo;
        }
        bind_of[o] = b;
    }
    /* A union may now overlap another binding: fold until no two overlap. */
    for (bool again = true; again;) {
        again = false;
        for (int a = 0; a < sp->n_bindings && !again; a++)
            for (int c = a + 1; c < sp->n_bindings && !again; c++) {
                tg_wgsl_binding *x = &sp->bind[a], *y = &sp->bind[c];
                if (x->arena != y->arena || !(x->offset < y->offset + y->size && y->offset < x->offset + x->size))
                    continue;
                int64_t lo = x->offset < y->offset ? x->offset : y->offset;
                int64_t hi = x->offset + x->size > y->offset + y->size ? x->offset + x->size : y->offset + y->size;
                *x = (tg_wgsl_binding){x->arena, lo, hi - lo};
                for (int o = 0; o < nops; o++) bind_of[o] = bind_of[o] == c ? a : bind_of[o] > c ? bind_of[o] - 1 : bind_of[o];
                memmove(y, y + 1, sizeof *y * (size_t)(sp->n_bindings - c - 1));
                sp->n_bindings--;
                again = true;
            }
    }
    for (int o = 0; o < nops; o++) {
        const tg_slot *s = &k->plan->slot[operand_node(k->n, k->id, o)];
        elem_off[o] = (s->offset - sp->bind[bind_of[o]].offset) / 4;
    }
    /* Limits: binding count, binding size (named by its largest operand), alignment. */
    if ((uint32_t)sp->n_bindings > k->lim->max_storage_buffers_per_stage)
        return wk_fail(k, TG_ERR_LIMIT, "needs %d storage buffers, over maxStorageBuffersPerShaderStage %u",
                       sp->n_bindings, k->lim->max_storage_buffers_per_stage);
    for (int b = 0; b < sp->n_bindings; b++) {
        if ((uint64_t)sp->bind[b].size <= k->lim->max_storage_buffer_binding_size &&
            sp->bind[b].offset % k->lim->min_storage_buffer_offset_alignment == 0)
            continue;
        int big = -1;
        for (int o = 0; o < nops; o++)
            if (bind_of[o] == b &&
                (big < 0 || k->plan->slot[operand_node(k->n, k->id, o)].bytes > k->plan->slot[big].bytes))
                big = operand_node(k->n, k->id, o);
        char who[160];
        node_desc(k->g, big, who, sizeof who);
        if (sp->bind[b].offset % k->lim->min_storage_buffer_offset_alignment)
            return wk_fail(k, TG_ERR_LIMIT, "%s sits at offset %lld, not a multiple of minStorageBufferOffsetAlignment %u",
                           who, (long long)sp->bind[b].offset, k->lim->min_storage_buffer_offset_alignment);
        return wk_fail(k, TG_ERR_LIMIT, "%s needs a %lld-byte storage binding, over maxStorageBufferBindingSize %llu",
                       who, (long long)sp->bind[b].size, (unsigned long long)k->lim->max_storage_buffer_binding_size);
    }
    return true;
}

static void prelude(wk *k, const int *bind_of, const int64_t *elem_off) {
    /* A function, not a bare bitcast: WGSL rejects a constant expression
     * whose value is inf or nan, and user functions are never constant. */
    wsb_printf(&k->s, "fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }\n");
    for (int b = 0; b < k->spec->n_bindings; b++)
        wsb_printf(&k->s, "@group(0) @binding(%d) var<storage, read_write> b%d: array<u32>;\n", b, b);
    for (int o = 0; o <= k->n->nin; o++) {
        const char *t = wk_type(k->g->nodes[operand_node(k->n, k->id, o)].dtype);
        char at[48];
        if (elem_off[o]) snprintf(at, sizeof at, "b%d[%lldu + i]", bind_of[o], (long long)elem_off[o]);
        else snprintf(at, sizeof at, "b%d[i]", bind_of[o]);
        if (o == 0) {
            wsb_printf(&k->s, "fn st(i: u32, v: %s) { %s = bitcast<u32>(v); }\n", t, at);
            wsb_printf(&k->s, "fn ldo(i: u32) -> %s { return bitcast<%s>(%s); }\n", t, t, at);
        } else {
            wsb_printf(&k->s, "fn ld%d(i: u32) -> %s { return bitcast<%s>(%s); }\n", o - 1, t, t, at);
        }
    }
}

/* Emits the kernel of node n (whose output is node id's memory) with fn. */
static tg_status emit_with(const tg_graph *g, const tg_plan *plan, int id, const tg_node *n, tg_wgsl_emit_fn fn,
                           const tg_wgsl_limits *lim, tg_kernel_spec *out) {
    const tg_opinfo *info = &tg_ops[n->op];
    wk k = {g, n, id, plan, lim, out, {0}, TG_OK};
    int bind_of[TG_MAX_IN + 1];
    int64_t elem_off[TG_MAX_IN + 1];
    wsb_printf(&k.s, "// node %d: %s\n", id, info->name);
    if (bind_operands(&k, bind_of, elem_off)) {
        prelude(&k, bind_of, elem_off);
        fn(&k);
    }
    if (k.st == TG_OK && k.s.oom) k.st = tg_fail(TG_ERR_NOMEM, "webgpu: out of memory generating WGSL");
    if (k.st != TG_OK || out->upload) {
        free(k.s.p);
        if (k.st != TG_OK) memset(out, 0, sizeof *out);
        return k.st;
    }
    out->source = k.s.p;
    return TG_OK;
}

tg_status tg_wgsl_emit(const tg_graph *g, const tg_plan *plan, int id, const tg_wgsl_limits *lim,
                       tg_kernel_spec *out) {
    memset(out, 0, sizeof *out);
    out->node = id;
    const tg_node *n = &g->nodes[id];
    const tg_opinfo *info = &tg_ops[n->op];
    tg_wgsl_emit_fn fn = tg_wgsl_ops[n->op].emit;
    if (info->flags & TG_OPF_VIEW) return TG_OK;
    if (!fn) {
        if (info->flags & TG_OPF_LEAF && !(info->flags & TG_OPF_CONSTANT)) return TG_OK;
        return tg_fail(TG_ERR_BACKEND, "webgpu: op '%s' (node %d) has no WGSL kernel", info->name, id);
    }
    return emit_with(g, plan, id, n, fn, lim, out);
}

tg_status tg_wgsl_emit_writeback(const tg_graph *g, const tg_plan *plan, int src, int dst, const tg_wgsl_limits *lim,
                                 tg_kernel_spec *out) {
    memset(out, 0, sizeof *out);
    out->node = dst;
    /* A same-shape broadcast_to from src, written into dst's memory, is that copy. */
    tg_node copy = g->nodes[src];
    copy.op = TG_OP_BROADCAST;
    copy.nin = 1;
    copy.in[0] = src;
    return emit_with(g, plan, dst, &copy, wgsl_copy, lim, out);
}

void tg_kernel_spec_free(tg_kernel_spec *k) {
    free(k->source);
    k->source = NULL;
}

tg_status tg_wgsl_check_arenas(const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim) {
    for (int a = 0; a < TG_N_ARENAS; a++) {
        if ((uint64_t)plan->arena_bytes[a] <= lim->max_buffer_size) continue;
        int worst = -1;
        for (int i = 0; i < plan->n; i++) {
            const tg_slot *s = &plan->slot[i];
            if (s->arena == a && (uint64_t)(s->offset + s->bytes) > lim->max_buffer_size &&
                (worst < 0 || s->offset < plan->slot[worst].offset))
                worst = i;
        }
        char who[160] = "a tensor";
        if (worst >= 0) node_desc(g, worst, who, sizeof who);
        static const char *names[] = {"params", "persistent", "scratch"};
        return tg_fail(TG_ERR_LIMIT, "webgpu: the %s arena needs %lld bytes, over maxBufferSize %llu; %s lies past the limit",
                       names[a], (long long)plan->arena_bytes[a], (unsigned long long)lim->max_buffer_size, who);
    }
    return TG_OK;
}
