/* The codegen driver: operands -> bindings (merged where they overlap, see
 * wgsl.h), limit checks, the accessor prelude, then the op's emitter. Also
 * the helpers emitters share: entry point and grid, index maps, literals. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "../ir/iter.h" /* the same dimension merging the CPU kernels use */

void tg_source_printf(wgsl_source *b, const char *fmt, ...) {
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

const tg_node *tg_kernel_in(const wgsl_kernel *k, int i) { return &k->g->nodes[k->n->in[i]]; }

const char *tg_kernel_type(tg_dtype dt) { return dt == TG_F32 ? "f32" : dt == TG_I32 ? "i32" : "u32"; }

static const char *node_desc(const tg_graph *g, int id, char *buf, size_t n) {
    char sh[96];
    snprintf(buf, n, "node %d (%s %s %s)", id, tg_ops[g->nodes[id].op].name, tg_dtype_name(g->nodes[id].dtype),
             tg_shape_str(g->nodes[id].shape, sh, sizeof sh));
    return buf;
}

bool tg_kernel_fail(wgsl_kernel *k, tg_status s, const char *fmt, ...) {
    if (k->status != TG_OK) return false;
    char msg[512], who[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    k->status = tg_fail(s, "webgpu: %s: %s", node_desc(k->g, k->id, who, sizeof who), msg);
    return false;
}

const char *tg_kernel_i32(int32_t v, char buf[24]) {
    if (v == INT32_MIN) snprintf(buf, 24, "(-2147483647i - 1i)"); /* the literal 2147483648i does not exist */
    else snprintf(buf, 24, v < 0 ? "(%di)" : "%di", (int)v);
    return buf;
}

const char *tg_kernel_f32(float v, char buf[48]) {
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

void tg_kernel_let_f32(wgsl_kernel *k, const char *name, float v) {
    char f[48];
    tg_source_printf(&k->source, "    let %s = %s;\n", name, tg_kernel_f32(v, f));
}

/* Splits `groups` workgroups over x (and y when x is not enough). */
static bool grid(wgsl_kernel *k, int64_t groups, uint32_t *gx, uint32_t *gy) {
    int64_t lim = k->lim->max_workgroups_per_dimension;
    if (groups <= 0) groups = 1;
    int64_t y = (groups + lim - 1) / lim;
    int64_t x = (groups + y - 1) / y;
    if (y > lim)
        return tg_kernel_fail(k, TG_ERR_LIMIT, "%lld workgroups exceed %lld x %lld (maxComputeWorkgroupsPerDimension)",
                       (long long)groups, (long long)lim, (long long)lim);
    *gx = (uint32_t)x;
    *gy = (uint32_t)y;
    return true;
}

static tg_wgsl_forms g_forms;

void tg_wgsl_force_forms(const tg_wgsl_forms *f) {
    if (f) g_forms = *f;
    else memset(&g_forms, 0, sizeof g_forms);
}

const tg_wgsl_forms *tg_wgsl_forced(void) { return &g_forms; }

void tg_kernel_shared(wgsl_kernel *k, const char *name, const char *type, int64_t n) {
    tg_source_printf(&k->source, "var<workgroup> %s: array<%s, %lld>;\n", name, type, (long long)n);
    if (k->n_shared == (int)(sizeof k->shared / sizeof k->shared[0]) || strlen(name) >= sizeof k->shared[0].name ||
        strlen(type) >= sizeof k->shared[0].type) {
        tg_kernel_fail(k, TG_ERR_STATE, "workgroup array %s: more arrays, or a longer name or type, than tg_kernel_shared records",
                   name);
        return;
    }
    snprintf(k->shared[k->n_shared].name, sizeof k->shared[0].name, "%s", name);
    snprintf(k->shared[k->n_shared].type, sizeof k->shared[0].type, "%s", type);
    k->shared[k->n_shared++].n = n;
}

void tg_kernel_poison(wgsl_kernel *k, uint32_t wg) {
    if (!k->n_shared || !g_forms.poison) return;
    for (int a = 0; a < k->n_shared; a++) {
        bool v4 = strcmp(k->shared[a].type, "vec4<f32>") == 0;
        /* lid keeps the NaN out of a constant expression, where WGSL rejects it */
        tg_source_printf(&k->source, "    for (var e = lid; e < %lldu; e += %uu) { %s[e] = bitcast<%s>(%s); }\n",
                      (long long)k->shared[a].n, wg, k->shared[a].name, k->shared[a].type,
                      v4 ? "vec4<u32>(0x7fc0deadu | (lid & 0u))" : "0x7fc0deadu | (lid & 0u)");
    }
    tg_source_printf(&k->source, "    workgroupBarrier();\n");
}

bool tg_kernel_main(wgsl_kernel *k, int64_t groups, uint32_t wg) {
    uint32_t gx = 1, gy = 1;
    if (wg > k->lim->max_invocations_per_workgroup)
        return tg_kernel_fail(k, TG_ERR_LIMIT, "workgroup of %u invocations exceeds maxComputeInvocationsPerWorkgroup %u", wg,
                       k->lim->max_invocations_per_workgroup);
    if (!grid(k, groups, &gx, &gy)) return false;
    k->spec->workgroup_size = wg;
    k->spec->dispatch[0] = gx;
    k->spec->dispatch[1] = gy;
    k->spec->dispatch[2] = 1;
    tg_source_printf(&k->source,
               "@compute @workgroup_size(%u)\n"
               "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
               "    let gid = wid.y * %uu + wid.x;\n",
               wg, gx);
    tg_kernel_poison(k, wg);
    return true;
}

/* One element an invocation, 256 a workgroup: 4 bytes in flight an
 * invocation are too few to cover the memory's latency (a negation runs
 * well below a copy's bandwidth), but gpt_small has few such kernels (its
 * elementwise work rides in product epilogues and row kernels). */
#define FLAT_WG 256u

void tg_kernel_helper(wgsl_kernel *k, unsigned id, const char *text) {
    uint64_t *h = k->helpers ? k->helpers : &k->own_helpers;
    if (*h & ((uint64_t)1 << id)) return;
    *h |= (uint64_t)1 << id;
    tg_source_printf(&k->source, "%s", text);
}

/* NaN tested on the bits: shader compilers may assume x != x never holds. */
void tg_kernel_is_nan(wgsl_kernel *k) {
    tg_kernel_helper(k, KERNEL_HELPER_IS_NAN, "fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }\n");
}

void tg_kernel_names_default(wgsl_kernel *k) {
    for (int j = 0; j < TG_MAX_IN; j++) snprintf(k->load_name[j], sizeof k->load_name[j], "ld%d", j);
    snprintf(k->store_name, sizeof k->store_name, "st");
    k->prefix[0] = 0;
    k->fn_name = NULL;
}

void tg_kernel_open(wgsl_kernel *k, const tg_graph *g, const tg_plan *plan, const tg_wgsl_limits *lim, int node,
             tg_kernel_spec *sp) {
    memset(k, 0, sizeof *k);
    k->g = g, k->n = &g->nodes[node], k->id = node, k->plan = plan, k->lim = lim, k->spec = sp;
    k->helpers = &k->own_helpers;
    tg_kernel_names_default(k);
    sp->node = node;
}

/* With k->subgroups, `enable subgroups;`: a directive must come before
 * every declaration; after the first line, which names the kernel
 * (TG_PROFILE's label). */
static void enable_subgroups(wgsl_kernel *k) {
    if (k->status != TG_OK || !k->subgroups) return;
    wgsl_source e = {0};
    const char *src = k->source.p ? k->source.p : "";
    size_t line = strcspn(src, "\n");
    tg_source_printf(&e, "%.*s\nenable subgroups;\n%s", (int)line, src, src[line] ? src + line + 1 : "");
    e.oom |= k->source.oom;
    free(k->source.p);
    k->source = e;
}

tg_status tg_kernel_close(wgsl_kernel *k, tg_wgsl_program *out) {
    enable_subgroups(k);
    if (k->status == TG_OK && k->source.oom) k->status = tg_fail(TG_ERR_NOMEM, "webgpu: out of memory generating WGSL");
    if (k->status != TG_OK) {
        free(k->source.p);
        memset(k->spec, 0, sizeof *k->spec);
        return k->status;
    }
    k->spec->source = k->source.p;
    out->n++;
    return TG_OK;
}

bool tg_kernel_flat(wgsl_kernel *k, int64_t n) {
    if (k->fn_name) {
        /* The store of the node's own emitter lands in a private variable
         * that the function returns: emitters may store from any branch. */
        const char *t = tg_kernel_type(k->n->dtype);
        tg_source_printf(&k->source, "var<private> %s_r: %s;\nfn %s(i: u32, v: %s) { %s_r = v; }\nfn %s(i: u32) -> %s {\n",
                   k->fn_name, t, k->store_name, t, k->fn_name, k->fn_name, t);
        return true;
    }
    k->spec->threads = n;
    if (!tg_kernel_main(k, (n + FLAT_WG - 1) / FLAT_WG, FLAT_WG)) return false;
    tg_source_printf(&k->source, "    let i = gid * %uu + lid;\n    if (i >= %lluu) { return; }\n", FLAT_WG,
               (unsigned long long)n);
    return true;
}

void tg_kernel_end(wgsl_kernel *k) {
    if (k->fn_name) tg_source_printf(&k->source, "    return %s_r;\n", k->fn_name);
    tg_source_printf(&k->source, "}\n");
}

void tg_kernel_index_fn(wgsl_kernel *k, const char *name, int nd, const int64_t *d, const int64_t *st) {
    tg_source_printf(&k->source, "fn %s(i: u32) -> u32 {\n    var r = i;\n    var o = 0u;\n", name);
    for (int a = nd - 1; a > 0; a--) {
        if (st[a]) tg_source_printf(&k->source, "    o += (r %% %lldu) * %lldu;\n", (long long)d[a], (long long)st[a]);
        tg_source_printf(&k->source, "    r = r / %lldu;\n", (long long)d[a]);
    }
    if (nd > 0 && st[0]) tg_source_printf(&k->source, "    o += r * %lldu;\n", (long long)st[0]);
    tg_source_printf(&k->source, "    return o;\n}\n");
}

void tg_kernel_bcast_maps(wgsl_kernel *k, int nin, char expr[][KERNEL_EXPR_LEN]) {
    int64_t st[TG_MAX_IN][TG_MAX_DIMS];
    for (int i = 0; i < nin; i++) tg_shape_bcast_strides(tg_kernel_in(k, i)->shape, k->n->shape, st[i]);
    tg_iter it;
    tg_iter_init(&it, k->n->shape, nin, st);
    for (int i = 0; i < nin; i++) {
        bool same = true, zero = true;
        for (int a = 0; a < it.nd; a++) {
            same &= it.st[i + 1][a] == it.st[0][a];
            zero &= it.st[i + 1][a] == 0;
        }
        if (same) snprintf(expr[i], KERNEL_EXPR_LEN, "i");
        else if (zero) snprintf(expr[i], KERNEL_EXPR_LEN, "0u");
        else {
            char name[32];
            snprintf(name, sizeof name, "%smap%d", k->prefix, i);
            tg_kernel_index_fn(k, name, it.nd, it.d, it.st[i + 1]);
            snprintf(expr[i], KERNEL_EXPR_LEN, "%s(i)", name);
        }
    }
}

/* ---- bindings ---- */

/* Binds operand nodes[0..n) as storage buffers: ranges of one arena that
 * overlap share one binding (their union, see wgsl.h). Sets bind_of[o] and
 * elem_off[o] (the operand's first element within its binding). */
bool tg_kernel_bind_nodes(wgsl_kernel *k, const int *nodes, int n, int *bind_of, int64_t *elem_off) {
    tg_kernel_spec *sp = k->spec;
    for (int o = 0; o < n; o++) {
        const tg_slot *s = &k->plan->slot[nodes[o]];
        int64_t lo = s->offset, hi = s->offset + s->bytes;
        int b = -1;
        for (int j = 0; j < sp->n_bindings && b < 0; j++)
            if (sp->bind[j].arena == s->arena && lo < sp->bind[j].offset + sp->bind[j].size && sp->bind[j].offset < hi)
                b = j;
        if (b < 0) {
            if (sp->n_bindings == TG_WGSL_MAX_BINDINGS)
                return tg_kernel_fail(k, TG_ERR_LIMIT, "needs over %d storage buffers", TG_WGSL_MAX_BINDINGS);
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
                for (int o = 0; o < n; o++) bind_of[o] = bind_of[o] == c ? a : bind_of[o] > c ? bind_of[o] - 1 : bind_of[o];
                memmove(y, y + 1, sizeof *y * (size_t)(sp->n_bindings - c - 1));
                sp->n_bindings--;
                again = true;
            }
    }
    for (int o = 0; o < n; o++) elem_off[o] = (k->plan->slot[nodes[o]].offset - sp->bind[bind_of[o]].offset) / 4;
    /* Limits: binding count, binding size (named by its largest operand), alignment. */
    if ((uint32_t)sp->n_bindings > k->lim->max_storage_buffers_per_stage)
        return tg_kernel_fail(k, TG_ERR_LIMIT, "needs %d storage buffers, over maxStorageBuffersPerShaderStage %u",
                       sp->n_bindings, k->lim->max_storage_buffers_per_stage);
    for (int b = 0; b < sp->n_bindings; b++) {
        if ((uint64_t)sp->bind[b].size <= k->lim->max_storage_buffer_binding_size &&
            sp->bind[b].offset % k->lim->min_storage_buffer_offset_alignment == 0)
            continue;
        int big = -1;
        for (int o = 0; o < n; o++)
            if (bind_of[o] == b && (big < 0 || k->plan->slot[nodes[o]].bytes > k->plan->slot[big].bytes)) big = nodes[o];
        char who[160];
        node_desc(k->g, big, who, sizeof who);
        if (sp->bind[b].offset % k->lim->min_storage_buffer_offset_alignment)
            return tg_kernel_fail(k, TG_ERR_LIMIT, "%s sits at offset %lld, not a multiple of minStorageBufferOffsetAlignment %u",
                           who, (long long)sp->bind[b].offset, k->lim->min_storage_buffer_offset_alignment);
        return tg_kernel_fail(k, TG_ERR_LIMIT, "%s needs a %lld-byte storage binding, over maxStorageBufferBindingSize %llu",
                       who, (long long)sp->bind[b].size, (unsigned long long)k->lim->max_storage_buffer_binding_size);
    }
    return true;
}

/* Declares the kernel's bindings as arrays of `type`, each read-only where
 * the kernel stores through
 * neither it nor any other binding of its arena (`written`: bit b for each
 * binding it stores through): WebGPU forbids one buffer bound both
 * writable and read-only in a dispatch, and a workspace (`work`) may be
 * placed in the scratch arena (program.c), which then counts as written.
 * Read-only bindings make gpt_small's step faster. */
void tg_kernel_declare(wgsl_kernel *k, const char *type, unsigned written, bool work) {
    tg_kernel_spec *sp = k->spec;
    bool off = g_forms.read_write;
    sp->read_only = 0;
    for (int b = 0; b < sp->n_bindings; b++) {
        bool w = off || (work && sp->bind[b].arena == TG_ARENA_SCRATCH);
        for (int c = 0; c < sp->n_bindings && !w; c++) w = (written >> c & 1) && sp->bind[c].arena == sp->bind[b].arena;
        if (!w) sp->read_only |= 1u << b;
        tg_source_printf(&k->source, "@group(0) @binding(%d) var<storage, %s> b%d: array<%s>;\n", b, w ? "read_write" : "read", b,
                      k->vec4_bind >> b & 1 ? "vec4<u32>" : type);
    }
}

bool tg_kernel_vec4_ok(const wgsl_kernel *k, const int *nodes, int n, const int *bind_of, const int64_t *elem_off, int o) {
    const tg_node *x = &k->g->nodes[nodes[o]];
    const tg_wgsl_binding *b = &k->spec->bind[bind_of[o]];
    if (x->dtype != TG_F32 || elem_off[o] % 4 || tg_ir_numel(x) % 4 || b->offset % 16) return false;
    for (int j = 0; j < n; j++) /* every operand in the binding within its whole vec4s */
        if (bind_of[j] == bind_of[o] && (elem_off[j] + tg_ir_numel(&k->g->nodes[nodes[j]])) * 4 > b->size / 16 * 16)
            return false;
    return true;
}

void tg_kernel_elem(const wgsl_kernel *k, int bind, int64_t elem_off, char *buf, size_t n) {
    char i[48];
    if (elem_off) snprintf(i, sizeof i, "%lldu + i", (long long)elem_off);
    else snprintf(i, sizeof i, "i");
    if (k->vec4_bind >> bind & 1) snprintf(buf, n, "b%d[(%s) / 4u][(%s) %% 4u]", bind, i, i);
    else snprintf(buf, n, "b%d[%s]", bind, i);
}

void tg_kernel_elem4(int bind, int64_t elem_off, char *buf, size_t n) {
    snprintf(buf, n, "b%d[(%lldu + i) / 4u]", bind, (long long)elem_off);
}

/* ---- kernels, fused or not ---- */

/* The operands of a kernel: stored outputs first, then the nodes its members
 * read from memory (each once), in the order the members first read them. */
typedef struct {
    int *node;
    int n, cap;
    int n_out;
} operands;

static void ops_add(operands *o, int id) {
    for (int i = 0; i < o->n; i++)
        if (o->node[i] == id) return;
    if (o->n < o->cap) o->node[o->n++] = id;
}

static int find_in(const int *list, int n, int id) {
    for (int i = 0; i < n; i++)
        if (list[i] == id) return i;
    return -1;
}

/* Which link of the epilogue chain node x is (-1: the kernel node, q: epi[q]),
 * looking through views kept inline; -2 if none. */
static int chain_link(const tg_graph *g, const tg_wgsl_fused_kernel *f, int kid, int x) {
    if (!f || !f->n_epilogue) return -2;
    if (x == kid) return -1;
    int q = find_in(f->epilogue, f->n_epilogue, x);
    if (q >= 0) return q;
    if ((tg_ops[g->nodes[x].op].flags & TG_OPF_VIEW) && find_in(f->inlined, f->n_inlined, x) >= 0)
        return chain_link(g, f, kid, g->nodes[x].in[0]);
    return -2;
}

/* The external reads of inlined node x (recursively through other inlined nodes). */
static void collect(const tg_graph *g, const tg_wgsl_fused_kernel *f, int kid, int x, operands *o, bool *seen) {
    if (chain_link(g, f, kid, x) != -2) return; /* the value being stored, not a read */
    int q = f ? find_in(f->inlined, f->n_inlined, x) : -1;
    if (q < 0) {
        ops_add(o, x);
        return;
    }
    if (seen[q]) return;
    seen[q] = true;
    const tg_node *n = &g->nodes[x];
    for (int j = 0; j < n->nin; j++) collect(g, f, kid, n->in[j], o, seen);
}

/* The names the driver gives a fused kernel's parts in its WGSL: a<q> the
 * q-th inlined producer, x<i> the i-th operand read from memory, e<q> the
 * q-th link of the epilogue; kernel_value is the kernel's own value, which
 * the epilogue's first link reads. */
static void inlined_name(int q, char *buf, size_t len) { snprintf(buf, len, "a%d", q); }
static void operand_name(int i, char *buf, size_t len) { snprintf(buf, len, "x%d", i); }
static void link_name(int q, char *buf, size_t len) { snprintf(buf, len, "e%d", q); }

/* The WGSL name of node x's value inside the kernel: an inlined function,
 * or the accessor of an operand read from memory. */
static void value_name(const tg_wgsl_fused_kernel *f, const operands *o, int x, char *buf, size_t len) {
    int q = f ? find_in(f->inlined, f->n_inlined, x) : -1;
    if (q >= 0) inlined_name(q, buf, len);
    else operand_name(find_in(o->node + o->n_out, o->n - o->n_out, x), buf, len);
}

/* Emits node `x` (an inlinable op, or a view) as a function named `name` whose
 * inputs are the functions in[], into k's module. */
static void emit_inline(wgsl_kernel *k, int x, const char *name, char in[][24]) {
    const tg_node *n = &k->g->nodes[x];
    const char *t = tg_kernel_type(n->dtype);
    if (tg_ops[n->op].flags & TG_OPF_VIEW) { /* the same elements in the same order */
        tg_source_printf(&k->source, "fn %s(i: u32) -> %s { return %s(i); }\n", name, t, in[0]);
        return;
    }
    if (tg_ir_numel(n) == 0) { /* never read; its emitter would divide by the empty axis */
        tg_source_printf(&k->source, "fn %s(i: u32) -> %s { return %s(0); }\n", name, t, t);
        return;
    }
    tg_kernel_spec dummy = {0};
    wgsl_kernel sub = {.g = k->g, .n = n, .id = x, .plan = k->plan, .lim = k->lim, .spec = &dummy, .status = TG_OK, .fn_name = name,
              .helpers = k->helpers};
    for (int j = 0; j < n->nin; j++) snprintf(sub.load_name[j], sizeof sub.load_name[j], "%s", in[j]);
    snprintf(sub.store_name, sizeof sub.store_name, "%s_st", name);
    snprintf(sub.prefix, sizeof sub.prefix, "%s_", name);
    if (!tg_wgsl_inline_ok(n->op)) tg_kernel_fail(&sub, TG_ERR_BACKEND, "op cannot be computed inline");
    else tg_wgsl_ops[n->op].emit(&sub);
    if (sub.status != TG_OK && k->status == TG_OK) k->status = sub.status;
    if (sub.source.oom) k->source.oom = true;
    if (sub.source.p) tg_source_printf(&k->source, "%s", sub.source.p);
    free(sub.source.p);
}

/* A kernel as emit_kernel writes it, in phases: the node whose memory it
 * stores (kid) and whose emitter writes its entry point (kn, a copy for a
 * writeback), the fused parts (f: inlined producers, epilogue, siblings;
 * NULL for none), and its operands with their bindings. */
typedef struct {
    const tg_graph *g;
    int kid;
    const tg_node *kn;
    const tg_wgsl_fused_kernel *f;
    int n_inl, n_epi;
    operands o;        /* the stored outputs, then the nodes read from memory */
    int *bind_of;      /* [o.cap]: operand i's binding */
    int64_t *elem_off; /* [o.cap]: its first element in that binding */
    int in_at[2];      /* a product's A and B where read from memory: their index in o, else -1 */
    char (*names)[24]; /* [TG_MAX_IN]: the WGSL names of a part's inputs */
} kernel_parts;

/* Nothing to store, no kernel: its index arithmetic would divide by the
 * empty axis, which WGSL rejects as a constant divisor. */
static bool stores_nothing(const kernel_parts *p) {
    const tg_wgsl_fused_kernel *f = p->f;
    return tg_ir_numel(&p->g->nodes[p->n_epi ? f->epilogue[p->n_epi - 1] : p->kid]) == 0 &&
           !(f && f->sibling > 0 && tg_ir_numel(&p->g->nodes[f->sibling]) > 0);
}

static void parts_free(kernel_parts *p) { free(p->o.node), free(p->bind_of), free(p->elem_off), free(p->names); }

/* The operands: what the kernel stores (its node's value or the epilogue's
 * last, then the siblings'), then every node its members read from memory. */
static tg_status gather_operands(kernel_parts *p) {
    const tg_graph *g = p->g;
    const tg_wgsl_fused_kernel *f = p->f;
    int cap = 4 + p->kn->nin; /* outputs: the kernel's, the epilogue's, the siblings' */
    for (int q = 0; q < p->n_inl; q++) cap += g->nodes[f->inlined[q]].nin;
    for (int q = 0; q < p->n_epi; q++) cap += g->nodes[f->epilogue[q]].nin;
    p->o = (operands){tg_calloc((size_t)cap, sizeof(int)), 0, cap, 0};
    p->bind_of = tg_calloc((size_t)cap, sizeof(int));
    p->elem_off = tg_calloc((size_t)cap, sizeof(int64_t));
    p->names = tg_calloc((size_t)TG_MAX_IN, sizeof *p->names);
    bool *seen = tg_calloc((size_t)p->n_inl + 1, sizeof(bool));
    if (!p->o.node || !p->bind_of || !p->elem_off || !p->names || !seen) {
        free(seen);
        return tg_fail(TG_ERR_NOMEM, "webgpu: out of memory generating WGSL");
    }
    operands *o = &p->o;
    o->node[o->n++] = p->n_epi ? f->epilogue[p->n_epi - 1] : p->kid;
    if (f && f->sibling > 0) o->node[o->n++] = f->sibling;
    if (f && f->sibling > 0 && f->second_sibling > 0) o->node[o->n++] = f->second_sibling;
    o->n_out = o->n;
    for (int j = 0; j < p->kn->nin; j++) collect(g, f, p->kid, p->kn->in[j], o, seen);
    for (int q = 0; q < p->n_epi; q++) {
        const tg_node *e = &g->nodes[f->epilogue[q]];
        for (int j = 0; j < e->nin; j++) collect(g, f, p->kid, e->in[j], o, seen);
    }
    free(seen);
    return TG_OK;
}

/* The first line: the kernel node's op, its inlined producers', its epilogue's. */
static void write_label(wgsl_kernel *k, const kernel_parts *p) {
    const tg_graph *g = p->g;
    tg_source_printf(&k->source, "// node %d: %s", p->kid, tg_ops[p->kn->op].name);
    for (int q = 0; q < p->n_inl; q++) tg_source_printf(&k->source, " <- %s", tg_ops[g->nodes[p->f->inlined[q]].op].name);
    for (int q = 0; q < p->n_epi; q++) tg_source_printf(&k->source, " -> %s", tg_ops[g->nodes[p->f->epilogue[q]].op].name);
    tg_source_printf(&k->source, "\n");
}

/* Bindings an emitter views as arrays of vec4 (a product's, for loads and
 * stores of 4), chosen before they are declared. */
static void choose_views(wgsl_kernel *k, kernel_parts *p) {
    if (p->kn->op != TG_OP_MATMUL) return;
    const operands *o = &p->o;
    for (int j = 0; j < 2; j++) {
        int x = p->f && find_in(p->f->inlined, p->f->n_inlined, p->kn->in[j]) >= 0
                    ? -1
                    : find_in(o->node + o->n_out, o->n - o->n_out, p->kn->in[j]);
        p->in_at[j] = x < 0 ? -1 : o->n_out + x;
    }
    tg_wgsl_matmul_views(k, o->node, o->n, p->bind_of, p->elem_off, p->in_at);
}

/* The storage bindings, merged where the operands overlap, and the
 * workspace's (`work` bytes, none for 0); false where they cannot be bound. */
static bool declare_bindings(wgsl_kernel *k, kernel_parts *p, int64_t work) {
    const operands *o = &p->o;
    if (!tg_kernel_bind_nodes(k, o->node, o->n, p->bind_of, p->elem_off)) return false;
    /* A function, not a bare bitcast: WGSL rejects a constant expression
     * whose value is inf or nan, and user functions are never constant. */
    tg_source_printf(&k->source, "fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }\n");
    unsigned written = 0;
    for (int i = 0; i < o->n_out; i++) written |= 1u << p->bind_of[i];
    choose_views(k, p);
    tg_kernel_declare(k, "u32", written, work > 0);
    if (work > 0) {
        tg_kernel_spec *out = k->spec;
        const tg_wgsl_limits *lim = k->lim;
        if (out->n_bindings == TG_WGSL_MAX_BINDINGS || (uint32_t)out->n_bindings >= lim->max_storage_buffers_per_stage)
            tg_kernel_fail(k, TG_ERR_LIMIT, "needs %d storage buffers with its workspace, over maxStorageBuffersPerShaderStage %u",
                           out->n_bindings + 1, lim->max_storage_buffers_per_stage);
        else if ((uint64_t)work > lim->max_storage_buffer_binding_size)
            tg_kernel_fail(k, TG_ERR_LIMIT, "needs %lld bytes of workspace, over maxStorageBufferBindingSize %llu",
                           (long long)work, (unsigned long long)lim->max_storage_buffer_binding_size);
        out->bind[out->n_bindings] = (tg_wgsl_binding){TG_WGSL_WORKSPACE, 0, work};
        out->workspace = work;
        tg_source_printf(&k->source, "@group(0) @binding(%d) var<storage, read_write> work: array<u32>;\n", out->n_bindings++);
    }
    return true;
}

/* The operands' accessors: the stores (st, or store_result before an
 * epilogue; st2 and st3 for the siblings) and the reads x<i>. */
static void define_operands(wgsl_kernel *k, const kernel_parts *p) {
    const operands *o = &p->o;
    const tg_wgsl_fused_kernel *f = p->f;
    char at[96], name[24];
    for (int i = 0; i < o->n; i++) {
        const char *t = tg_kernel_type(p->g->nodes[o->node[i]].dtype);
        tg_kernel_elem(k, p->bind_of[i], p->elem_off[i], at, sizeof at);
        if (i >= o->n_out) {
            operand_name(i - o->n_out, name, sizeof name);
            tg_source_printf(&k->source, "fn %s(i: u32) -> %s { return bitcast<%s>(%s); }\n", name, t, t, at);
        } else if (f && o->node[i] == f->sibling) {
            tg_source_printf(&k->source, "fn st2(i: u32, v: %s) { %s = bitcast<u32>(v); }\n", t, at);
        } else if (f && o->node[i] == f->second_sibling) {
            tg_source_printf(&k->source, "fn st3(i: u32, v: %s) { %s = bitcast<u32>(v); }\n", t, at);
        } else {
            tg_source_printf(&k->source, "fn %s(i: u32, v: %s) { %s = bitcast<u32>(v); }\n", p->n_epi ? "store_result" : "st", t,
                             at);
        }
    }
}

/* The inlined producers a<q>, each a function of the element index (those
 * in the epilogue's chain come with it). */
static void define_inlined(wgsl_kernel *k, kernel_parts *p) {
    const tg_wgsl_fused_kernel *f = p->f;
    for (int q = 0; q < p->n_inl && k->status == TG_OK; q++) {
        if (chain_link(p->g, f, p->kid, f->inlined[q]) != -2) continue;
        const tg_node *a = &p->g->nodes[f->inlined[q]];
        char name[24];
        for (int j = 0; j < a->nin; j++) value_name(f, &p->o, a->in[j], p->names[j], sizeof p->names[j]);
        inlined_name(q, name, sizeof name);
        emit_inline(k, f->inlined[q], name, p->names);
    }
}

/* The kernel node's inputs as its emitter reads them: ld<j>, and ld<j>v (4
 * elements at a time) where the views allow. */
static void define_loads(wgsl_kernel *k, const kernel_parts *p) {
    char at[96];
    for (int j = 0; j < p->kn->nin; j++) {
        const char *t = tg_kernel_type(p->g->nodes[p->kn->in[j]].dtype);
        char v[24];
        value_name(p->f, &p->o, p->kn->in[j], v, sizeof v);
        tg_source_printf(&k->source, "fn ld%d(i: u32) -> %s { return %s(i); }\n", j, t, v);
        if (j < 2 && (k->ld4 >> j & 1)) {
            tg_kernel_elem4(p->bind_of[p->in_at[j]], p->elem_off[p->in_at[j]], at, sizeof at);
            tg_source_printf(&k->source, "fn ld%dv(i: u32) -> vec4<f32> { return bitcast<vec4<f32>>(%s); }\n", j, at);
        }
    }
}

/* The epilogue: its links e<q> over the kernel's value, epilogue(i, v) (the
 * last link's value for the kernel's value v at i) and st, which stores
 * it; then st4 (4 columns at a time) where the views allow. */
static void define_epilogue(wgsl_kernel *k, kernel_parts *p) {
    const tg_graph *g = p->g;
    const tg_wgsl_fused_kernel *f = p->f;
    if (p->n_epi) {
        const char *t = tg_kernel_type(p->kn->dtype);
        tg_source_printf(&k->source, "var<private> kept_value: %s;\nfn kernel_value(i: u32) -> %s { return kept_value; }\n",
                         t, t);
        for (int q = 0; q < p->n_epi && k->status == TG_OK; q++) {
            const tg_node *e = &g->nodes[f->epilogue[q]];
            char name[24];
            for (int j = 0; j < e->nin; j++) {
                int link = chain_link(g, f, p->kid, e->in[j]);
                if (link >= 0) link_name(link, p->names[j], sizeof p->names[j]);
                else if (link == -1) snprintf(p->names[j], sizeof p->names[j], "kernel_value");
                else value_name(f, &p->o, e->in[j], p->names[j], sizeof p->names[j]);
            }
            link_name(q, name, sizeof name);
            emit_inline(k, f->epilogue[q], name, p->names);
        }
        char last[24];
        link_name(p->n_epi - 1, last, sizeof last);
        tg_source_printf(&k->source, "fn epilogue(i: u32, v: %s) -> %s {\n    kept_value = v;\n    return %s(i);\n}\n", t,
                         tg_kernel_type(g->nodes[f->epilogue[p->n_epi - 1]].dtype), last);
        tg_source_printf(&k->source, "fn st(i: u32, v: %s) { store_result(i, epilogue(i, v)); }\n", t);
    }
    if (k->st4) {
        char at[96];
        tg_kernel_elem4(p->bind_of[0], p->elem_off[0], at, sizeof at);
        tg_source_printf(&k->source, "fn st4(i: u32, v: vec4<f32>) { %s = bitcast<vec4<u32>>(%s); }\n", at,
                         p->n_epi ? "vec4<f32>(epilogue(i, v.x), epilogue(i + 1u, v.y), epilogue(i + 2u, v.z), "
                                    "epilogue(i + 3u, v.w))"
                                  : "v");
    }
}

/* Writes the kernel of `kn` (whose output is node kid's memory) with emitter
 * fn; f (NULL for none) adds the inlined producers and the epilogue; phase
 * and work: a kernel of two dispatches (1 or 2, else 0) and its workspace.
 * In order: the label, the bindings, the accessors of the operands, the
 * inlined producers, the loads, the epilogue, then the emitter's body. */
static tg_status emit_kernel(const tg_graph *g, const tg_plan *plan, int kid, const tg_node *kn, tg_wgsl_emit_fn fn,
                             const tg_wgsl_fused_kernel *f, int phase, int64_t work, const tg_wgsl_limits *lim,
                             tg_kernel_spec *out) {
    kernel_parts p = {.g = g, .kid = kid, .kn = kn, .f = f, .n_inl = f ? f->n_inlined : 0,
                      .n_epi = f ? f->n_epilogue : 0, .in_at = {-1, -1}};
    if (stores_nothing(&p)) return TG_OK;
    tg_status st = gather_operands(&p);
    if (st != TG_OK) {
        parts_free(&p);
        return st;
    }
    wgsl_kernel k = {.g = g, .n = kn, .id = kid, .plan = plan, .lim = lim, .spec = out, .status = TG_OK, .phase = phase,
                     .epilogue = p.n_epi > 0};
    k.helpers = &k.own_helpers;
    write_label(&k, &p);
    if (declare_bindings(&k, &p, work)) {
        define_operands(&k, &p);
        define_inlined(&k, &p);
        define_loads(&k, &p);
        define_epilogue(&k, &p);
        tg_kernel_names_default(&k);
        k.sibling = f ? f->sibling : 0;
        k.second_sibling = f && k.sibling ? f->second_sibling : 0;
        if (k.status == TG_OK) fn(&k);
        enable_subgroups(&k);
    }
    parts_free(&p);
    if (k.status == TG_OK && k.source.oom) k.status = tg_fail(TG_ERR_NOMEM, "webgpu: out of memory generating WGSL");
    if (k.status != TG_OK || out->upload) {
        free(k.source.p);
        if (k.status != TG_OK) memset(out, 0, sizeof *out);
        return k.status;
    }
    out->source = k.source.p;
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
    return emit_kernel(g, plan, id, n, fn, NULL, 0, 0, lim, out);
}

tg_status tg_wgsl_emit_fused(const tg_graph *g, const tg_plan *plan, const tg_wgsl_fused_kernel *f, const tg_wgsl_limits *lim,
                             tg_kernel_spec *out) {
    memset(out, 0, sizeof *out);
    int id = f->kernel;
    out->node = id;
    tg_wgsl_emit_fn fn = tg_wgsl_ops[g->nodes[id].op].emit;
    if (!fn) return tg_fail(TG_ERR_BACKEND, "webgpu: op '%s' (node %d) has no WGSL kernel", tg_ops[g->nodes[id].op].name, id);
    return emit_kernel(g, plan, id, &g->nodes[id], fn, f, 0, 0, lim, out);
}

tg_status tg_wgsl_emit_phase(const tg_graph *g, const tg_plan *plan, const tg_wgsl_fused_kernel *f, int phase, int64_t work_bytes,
                             const tg_wgsl_limits *lim, tg_kernel_spec *out) {
    memset(out, 0, sizeof *out);
    int id = f->kernel;
    out->node = id;
    tg_wgsl_emit_fn fn = tg_wgsl_ops[g->nodes[id].op].emit;
    if (!fn) return tg_fail(TG_ERR_BACKEND, "webgpu: op '%s' (node %d) has no WGSL kernel", tg_ops[g->nodes[id].op].name, id);
    return emit_kernel(g, plan, id, &g->nodes[id], fn, f, phase, work_bytes, lim, out);
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
    return emit_kernel(g, plan, dst, &copy, tg_wgsl_copy, NULL, 0, 0, lim, out);
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
