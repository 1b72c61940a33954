/* Elementwise work around a kernel (see fuse.h): which producers a kernel
 * can compute inline and which links it can apply as it stores, decided on
 * the graph before planning. The plan then keeps what the group reads
 * until its turn and gives what it keeps no memory, so the only timing
 * rule is that of any group: what it reads exists by its turn, and a read
 * it delays keeps no value live across another kernel's write. */
#include "fuse.h"

static const tg_node *node(const tg_fuse_graph *x, int id) { return tg_fuse_node(x, id); }
static unsigned flags(const tg_fuse_graph *x, int id) { return tg_ops[node(x, id)->op].flags; }

static bool in_list(const int *l, int n, int v) {
    for (int i = 0; i < n; i++)
        if (l[i] == v) return true;
    return false;
}

/* The kernel, a producer, a view between members or a link. */
static bool in_chain(const tg_ew_group *d, int v) {
    return v == d->kernel || in_list(d->inl, d->n_inl, v) || in_list(d->epi, d->n_epi, v);
}

/* A sibling: stored beside the chain's value, from the kernel's own inputs. */
static bool is_sib(const tg_ew_group *d, int v) { return v >= 0 && (v == d->sib || v == d->sib2); }

bool tg_fuse_ew_member(const tg_ew_group *d, int v) { return in_chain(d, v) || is_sib(d, v); }

int tg_fuse_ew_members(const tg_fuse_graph *x, const tg_ew_group *d, int *out) {
    int n = 0;
    out[n++] = d->kernel;
    if (d->sib >= 0) out[n++] = d->sib;
    if (d->sib2 >= 0) out[n++] = d->sib2;
    for (int q = 0; q < d->n_inl; q++)
        if (!(flags(x, d->inl[q]) & TG_OPF_VIEW)) out[n++] = d->inl[q];
    for (int q = 0; q < d->n_epi; q++) out[n++] = d->epi[q];
    return n;
}

int tg_fuse_ew_reads(const tg_fuse_graph *x, const tg_ew_group *d, int *out, int cap) {
    int mem[TG_EW_MAX_INL + TG_EW_MAX_EPI + 3], nm = tg_fuse_ew_members(x, d, mem), n = 0;
    for (int q = 0; q < nm; q++)
        for (int k = 0; k < node(x, mem[q])->nin; k++) {
            int v = node(x, mem[q])->in[k];
            if (tg_fuse_ew_member(d, v) || in_list(out, n < cap ? n : cap, v)) continue;
            if (n < cap) out[n] = v;
            n++;
        }
    return n;
}

/* The last turn at which something reads v (its group's turn for a grouped reader). */
static int last_read(const tg_fuse_graph *x, int v) {
    int last = -1;
    for (int r = x->rd0[v]; r < x->rd0[v + 1]; r++) {
        int j = x->rd[r], t = tg_fuse_is_view(x, j) ? last_read(x, j) : tg_fusion_at(x->f, j);
        if (t > last) last = t;
    }
    return last;
}

/* Whether a kernel other than d's writes memory at a turn strictly between a and b. */
static bool writes_between(const tg_fuse_graph *x, const tg_ew_group *d, int a, int b) {
    for (int j = a + 1; j < b; j++) {
        if (!tg_plan_runs(x->g, j) || tg_fuse_ew_member(d, j)) continue;
        int gid = x->f ? x->f->group[j] : -1;
        if (gid < 0 || (gid != d->gid && x->f->turn[gid] == j)) return true;
    }
    return false;
}

static int64_t bytes_of(const tg_fuse_graph *x, int v) { return tg_ir_numel(node(x, v)) * 4; }

enum { READ_NEVER = -3, READ_NOW = -2 };

/* Whether a kernel at turn t can read v, and what the read costs:
 * READ_NEVER when v is not there by then, or not in memory (kept inside
 * another group's kernel, or a permute only strided kernels read);
 * READ_NOW when it lives until t anyway (a leaf, a constant, a value read
 * from outside or read at t or later); else the turn of its last read, after
 * which a plan for its readers' own turns could have given its bytes to
 * something else. *src: the value under the views. */
static int read_at(const tg_fuse_graph *x, int v, int t, int *src) {
    int s = v;
    for (; tg_fuse_is_view(x, s); s = node(x, s)->in[0])
        if (x->f && x->f->role[s] == TG_FUSE_VIEW) return READ_NEVER;
    *src = s;
    uint8_t role = x->f ? x->f->role[s] : TG_FUSE_NONE;
    if (role == TG_FUSE_ABSORBED || role == TG_FUSE_REMAT || !tg_fuse_ready_before(x, s, t)) return READ_NEVER;
    if ((flags(x, s) & (TG_OPF_LEAF | TG_OPF_CONSTANT)) || x->pinned[s] || x->pinned[v]) return READ_NOW;
    int last = last_read(x, s);
    return last >= t ? READ_NOW : last;
}

/* Whether no turn in (lo, d's turn] has more bytes live with d than
 * without it: the values whose last read d delays to its turn (src[q],
 * otherwise dead after last[q]) against the values d keeps inside, each of
 * which was live from its write to its last read. */
static bool balanced(const tg_fuse_graph *x, const tg_ew_group *d, const int *src, const int *last, int n, int lo) {
    int mem[TG_EW_MAX_INL + TG_EW_MAX_EPI + 3], nm = tg_fuse_ew_members(x, d, mem), from[TG_EW_MAX_INL + TG_EW_MAX_EPI + 3];
    int to[TG_EW_MAX_INL + TG_EW_MAX_EPI + 3];
    for (int q = 0; q < nm; q++) {
        bool kept = mem[q] != tg_fuse_ew_stored(d) && !is_sib(d, mem[q]);
        from[q] = kept ? tg_fusion_at(x->f, mem[q]) : d->turn + 1, to[q] = kept ? last_read(x, mem[q]) : -1;
    }
    for (int t = lo + 1; t <= d->turn; t++) {
        int64_t delayed = 0, kept = 0;
        for (int q = 0; q < n; q++) delayed += last[q] < t ? bytes_of(x, src[q]) : 0;
        for (int q = 0; q < nm; q++) kept += from[q] <= t && t <= to[q] ? bytes_of(x, mem[q]) : 0;
        if (delayed > kept) return false;
    }
    return true;
}

/* Whether d can run at its turn: everything it reads is there and in
 * memory then; a read it delays past the value's last read keeps it live
 * over no other kernel's write, or over turns where d keeps at least as
 * many bytes inside as it keeps live that way; and nothing outside reads
 * what it stores before then. */
static bool timing_ok(const tg_fuse_graph *x, const tg_ew_group *d) {
    int rd[64], n = tg_fuse_ew_reads(x, d, rd, 64), src[64], last[64], nd = 0, lo = d->turn;
    if (n > 64) return false;
    bool crosses = false;
    for (int q = 0; q < n; q++) {
        int s = -1, at = read_at(x, rd[q], d->turn, &s), k = 0;
        if (at == READ_NEVER) return false;
        while (k < nd && src[k] != s) k++;
        if (at == READ_NOW || k < nd) continue;
        src[nd] = s, last[nd++] = at;
        crosses |= writes_between(x, d, at, d->turn);
        if (at < lo) lo = at;
    }
    if (crosses && !balanced(x, d, src, last, nd, lo)) return false;
    int st = tg_fuse_ew_stored(d), sib[2] = {d->sib, d->sib2};
    for (int r = x->rd0[st]; r < x->rd0[st + 1]; r++)
        if (!tg_fuse_ew_member(d, x->rd[r]) && tg_fusion_at(x->f, x->rd[r]) <= d->turn) return false;
    /* a sibling is often read through a view (a bias sum's reshape to [D]),
     * which reads no memory: its readers count */
    for (int s = 0; s < 2; s++) {
        int nr = sib[s] < 0 ? 0 : tg_fuse_value_readers(x, sib[s], rd, 64);
        if (nr > 64) return false;
        for (int q = 0; q < nr; q++)
            if (!tg_fuse_ew_member(d, rd[q]) && tg_fusion_at(x->f, rd[q]) <= d->turn) return false;
    }
    return true;
}

static bool accept(const tg_fuse_graph *x, const tg_ew_group *d, const tg_ew_rules *r) {
    return timing_ok(x, d) && r->fits(x, d, r->ctx);
}

/* Whether node v may join d at all: it runs, may be computed inline and
 * is in no group. */
static bool joinable(const tg_fuse_graph *x, const tg_ew_rules *r, int v) {
    return tg_plan_runs(x->g, v) && (flags(x, v) & TG_OPF_MAP) && tg_fuse_free(x, v);
}

/* Appends views[0..nv) to d's producers (views between members cost
 * nothing); false if one is read from outside. */
static bool add_views(const tg_fuse_graph *x, tg_ew_group *d, const int *views, int nv) {
    for (int v = 0; v < nv; v++) {
        if (x->pinned[views[v]]) return false;
        if (!in_list(d->inl, d->n_inl, views[v])) d->inl[d->n_inl++] = views[v];
    }
    return true;
}

bool tg_fuse_ew_grow_epilogue(const tg_fuse_graph *x, tg_ew_group *d, const tg_ew_rules *r) {
    bool grew = false;
    while (d->n_epi < TG_EW_MAX_EPI) {
        int cur = tg_fuse_ew_stored(d), c, views[TG_EW_MAX_INL], nv;
        if (x->pinned[cur] || tg_fuse_readers_once(x, cur, &c, 1, views, &nv, TG_EW_MAX_INL) != 1 ||
            d->n_inl + nv > TG_EW_MAX_INL)
            break;
        const tg_node *cn = node(x, c);
        if (!(flags(x, c) & TG_OPF_ELEMWISE) || !joinable(x, r, c) || tg_ir_numel(cn) != tg_ir_numel(node(x, cur)))
            break;
        bool step = true; /* the chain's value read at the element being stored */
        for (int k = 0; k < cn->nin; k++)
            if ((cn->in[k] == cur || in_list(views, nv, cn->in[k])) && !tg_shape_eq(node(x, cn->in[k])->shape, cn->shape))
                step = false;
        int n_inl = d->n_inl, turn = d->turn;
        if (!step || !add_views(x, d, views, nv)) {
            d->n_inl = n_inl;
            break;
        }
        d->epi[d->n_epi++] = c;
        /* at the kernel's turn the link's operands must be there already; at
         * the link's own the kernel's reads wait for it */
        if (!accept(x, d, r)) {
            d->turn = c;
            if (!accept(x, d, r)) {
                d->n_epi--, d->n_inl = n_inl, d->turn = turn;
                break;
            }
        }
        grew = true;
    }
    return grew;
}

/* Whether member m reads each element of what it reads once per element
 * stored, so that an inline producer it reads costs no extra work. */
static bool reads_once(const tg_fuse_graph *x, const tg_ew_group *d, int m) {
    if (in_list(d->epi, d->n_epi, m)) return true;
    if (m == d->kernel) return flags(x, m) & TG_OPF_ELEMWISE;
    int rd[64], n = tg_fuse_readers_once(x, m, rd, 64, NULL, NULL, 0);
    for (int q = 0; q < n && q < 64; q++)
        if (!reads_once(x, d, rd[q])) return false;
    return n <= 64;
}

/* Takes producer p (an input of a member) inline, then its own inputs. */
static void take(const tg_fuse_graph *x, tg_ew_group *d, const tg_ew_rules *r, int p) {
    if (in_chain(d, p) || !joinable(x, r, p) || x->pinned[p] || d->n_inl == TG_EW_MAX_INL) return;
    int rd[64], views[TG_EW_MAX_INL], nv, nr = tg_fuse_readers_once(x, p, rd, 64, views, &nv, TG_EW_MAX_INL);
    if (nr > 64 || d->n_inl + nv + 1 > TG_EW_MAX_INL) return;
    for (int q = 0; q < nr; q++) /* every reader is in the chain (a sibling reads memory) */
        if (!in_chain(d, rd[q]) || (!(flags(x, p) & TG_OPF_CHEAP) && !reads_once(x, d, rd[q]))) return;
    int n_inl = d->n_inl;
    if (!add_views(x, d, views, nv)) {
        d->n_inl = n_inl;
        return;
    }
    d->inl[d->n_inl++] = p;
    if (!accept(x, d, r)) {
        d->n_inl = n_inl;
        return;
    }
    for (int k = 0; k < node(x, p)->nin; k++) take(x, d, r, node(x, p)->in[k]);
}

bool tg_fuse_ew_take_producers(const tg_fuse_graph *x, tg_ew_group *d, const tg_ew_rules *r) {
    int before = d->n_inl;
    for (int k = 0; k < node(x, d->kernel)->nin; k++) take(x, d, r, node(x, d->kernel)->in[k]);
    for (int q = 0; q < d->n_epi; q++)
        for (int k = 0; k < node(x, d->epi[q])->nin; k++) take(x, d, r, node(x, d->epi[q])->in[k]);
    return d->n_inl > before;
}

bool tg_fuse_ew_in_step(const tg_fuse_graph *x, const tg_ew_group *d, int m) {
    if (!tg_shape_eq(node(x, m)->shape, node(x, tg_fuse_ew_stored(d))->shape)) return false;
    if (m == d->kernel) return flags(x, m) & TG_OPF_INPLACE;
    if (!(flags(x, m) & TG_OPF_ELEMWISE)) return false;
    if (in_list(d->epi, d->n_epi, m)) return true;
    int rd[64], n = tg_fuse_readers_once(x, m, rd, 64, NULL, NULL, 0);
    for (int q = 0; q < n && q < 64; q++)
        if (!tg_fuse_ew_in_step(x, d, rd[q])) return false;
    return n <= 64;
}
