/* Checkpoints, a feature of the sessions: a session's params (and, for
 * full checkpoints, its optimizer state and training position) as a
 * safetensors file (io/ reads and writes the container, and its checksum
 * over every byte). docs/checkpoints.md describes the format.
 *
 * Loads check the whole file against the session before writing anything,
 * so a bad file leaves the session as it was. Files name their format and
 * its version in the metadata ("format": CK_FULL or CK_WEIGHTS followed by
 * the version): version 2 files must carry the container's checksum;
 * version 1 full checkpoints (which checked their data only, with a
 * "checksum" of their own, or nothing before that) still load. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dp.h"
#include "io/safetensors.h"
#include "ir/model.h"
#include "session.h"

#define CK_PREFIX "tensorgrad-"
#define CK_FULL "tensorgrad-checkpoint-"
#define CK_WEIGHTS "tensorgrad-weights-"
#define CK_VERSION 2 /* what saves write; loads read 1 (full checkpoints) and 2 */
#define STR(x) #x
#define XSTR(x) STR(x)

/* One tensor of the session that a file holds. */
typedef struct {
    const char *name;
    tg_dtype dtype;
    tg_shape shape;
    int arena;
    int64_t offset, bytes;
} ck_entry;

/* The training state a full checkpoint holds beside the params. */
static bool is_saved_state(const tg_node *n) { return tg_optim_is_carried(n); }

/* Params in model order, then (with a training session: a full
 * checkpoint) the saved state leaves in graph order. */
static tg_status collect(const tg_session_base *s, const tg_session *train, const char *api, ck_entry **out,
                         int *n_out) {
    bool full = train != NULL;
    const tg_graph *g = full ? s->prog->g : NULL;
    int np = tg_model_param_count(s->model), n = np;
    for (int i = 0; full && i < g->n; i++) n += is_saved_state(&g->nodes[i]);
    ck_entry *e = tg_calloc((size_t)n + 1, sizeof *e);
    if (!e) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    for (int p = 0; p < np; p++) {
        const tg_param_decl *d = &s->model->params[p];
        e[p] = (ck_entry){d->name, d->dtype, d->shape, TG_ARENA_PARAMS, s->param_offset[p],
                          tg_shape_numel(d->shape) * 4};
    }
    for (int i = 0, k = np; full && i < g->n; i++) {
        const tg_node *nd = &g->nodes[i];
        if (!is_saved_state(nd)) continue;
        const tg_slot *sl = &s->prog->plan.slot[i];
        e[k++] = (ck_entry){nd->name, nd->dtype, nd->shape, sl->arena, sl->offset,
                            tg_ir_numel(nd) * (int64_t)tg_dtype_size(nd->dtype)};
    }
    *out = e;
    *n_out = n;
    return TG_OK;
}

/* Lower layers name the file; this adds which call failed. */
static tg_status rewrap(const char *api, tg_status st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tg_last_error());
    return tg_fail(st, "%s: %s", api, msg);
}

static const char *opt_name(tg_opt_kind k) {
    switch (k) {
    case TG_OPT_NONE: return "none";
    case TG_OPT_ADAM: return "adam";
    case TG_OPT_ADAMW: return "adamw";
    case TG_OPT_SGD: return "sgd";
    }
    return "unknown";
}

static const char *const lr_kinds[] = {"constant", "linear", "cosine", "warmup", "staircase", "multistep"};
#define N_LR_KINDS ((int)(sizeof lr_kinds / sizeof lr_kinds[0]))

/* The schedule as text, in a new allocation (NULL when out of memory).
 * Every field of every link is written, floats with 9 significant digits
 * (enough for any float to read back exactly); start= only when set, so a
 * schedule without one reads back in older versions. */
static char *lr_encode(const tg_lr *lr) {
    size_t cap = 1;
    for (const tg_lr *l = lr; l; l = l->kind == TG_LR_WARMUP ? l->then : NULL)
        cap += 256 + 21 * (size_t)(l->kind == TG_LR_MULTISTEP ? l->n_milestones : 0);
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t o = 0;
    buf[0] = 0;
    for (const tg_lr *l = lr; l; l = l->kind == TG_LR_WARMUP ? l->then : NULL) {
        int kind = (int)l->kind >= 0 && (int)l->kind < N_LR_KINDS ? (int)l->kind : 0;
        o += (size_t)snprintf(buf + o, cap - o,
                              "%s%s peak=%.9g final=%.9g gamma=%.9g steps=%lld every=%lld milestones=", o ? "; " : "",
                              lr_kinds[kind], l->peak, l->final_lr, l->gamma, (long long)l->steps, (long long)l->every);
        for (int i = 0; l->kind == TG_LR_MULTISTEP && i < l->n_milestones; i++)
            o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)l->milestones[i]);
        if (l->start_step) o += (size_t)snprintf(buf + o, cap - o, " start=%lld", (long long)l->start_step);
    }
    return buf;
}

/* A number as the writer prints it, from v up to the next space, ';' or
 * the end (*end): kind 'f' a float, [-]digits[.digits][e[+-]digits],
 * finite and within float's range; kind 'i' an integer, [-]digits, within
 * int64's. Anything else (spaces, a '+', hex, "nan", trailing junk, a
 * value out of range) is refused. */
static bool lr_number(const char *v, char kind, void *out, const char **end) {
    const char *c = v + (*v == '-');
    size_t digits = strspn(c, "0123456789");
    if (!digits) return false;
    c += digits;
    if (kind == 'f' && *c == '.') {
        if (!(digits = strspn(c + 1, "0123456789"))) return false;
        c += 1 + digits;
    }
    if (kind == 'f' && (*c == 'e' || *c == 'E')) {
        const char *x = c + 1 + (c[1] == '-' || c[1] == '+');
        if (!(digits = strspn(x, "0123456789"))) return false;
        c = x + digits;
    }
    if (*c && *c != ' ' && *c != ';') return false;
    char num[64];
    if ((size_t)(c - v) >= sizeof num) return false;
    memcpy(num, v, (size_t)(c - v));
    num[c - v] = 0;
    *end = c;
    if (kind == 'f') {
        double d = strtod(num, NULL);
        if (!isfinite(d) || fabs(d) > FLT_MAX) return false;
        *(float *)out = (float)d;
        return true;
    }
    bool neg = num[0] == '-';
    uint64_t m = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (const char *d = num + neg; *d; d++) {
        unsigned k = (unsigned)(*d - '0');
        if (m > (lim - k) / 10) return false;
        m = m * 10 + k;
    }
    *(int64_t *)out = neg ? (int64_t)(0 - m) : (int64_t)m;
    return true;
}

/* What lr_decode found wrong: the link, the field and the value as written. */
typedef struct {
    int64_t link;
    const char *field, *at;
} lr_bad;

/* " key=" then a number (lr_number) at *p; on failure *bad says where. */
static bool lr_field(const char **p, const char *key, char kind, void *out, lr_bad *bad) {
    size_t kl = strlen(key);
    bad->field = key;
    bad->at = *p;
    if (**p != ' ' || strncmp(*p + 1, key, kl) != 0 || (*p)[1 + kl] != '=') return false;
    bad->at = *p + 2 + kl;
    return lr_number(bad->at, kind, out, p);
}

/* Room for one more element in a growing array. */
static bool grow(void **a, size_t elem, int64_t *cap, int64_t n) {
    if (n < *cap) return true;
    int64_t nc = *cap ? 2 * *cap : 8;
    void *g = realloc(*a, (size_t)nc * elem);
    if (!g) return false;
    *a = g;
    *cap = nc;
    return true;
}

/* The schedule in a checkpoint's "lr" metadata, checked and copied into one
 * block as a session keeps it (*out, free it), or an error naming the
 * link, the field and its value. */
static tg_status lr_decode(const char *str, const char *what, tg_lr **out) {
    const char *p = str;
    tg_lr *chain = NULL;
    int64_t *ms = NULL, *first = NULL; /* all milestones; each link's first one */
    int64_t n = 0, cap = 0, nm = 0, cap_m = 0, cap_f = 0;
    bool ok = true, oom = false;
    lr_bad bad = {0, "kind", str};
    for (;;) {
        if (!grow((void **)&chain, sizeof *chain, &cap, n) || !grow((void **)&first, sizeof *first, &cap_f, n)) {
            oom = true;
            break;
        }
        tg_lr l = {0};
        size_t w = strcspn(p, " ;");
        int kind = -1;
        for (int i = 0; i < N_LR_KINDS; i++)
            if (strlen(lr_kinds[i]) == w && strncmp(p, lr_kinds[i], w) == 0) kind = i;
        bad = (lr_bad){n, "kind", p};
        l.kind = (tg_lr_kind)kind;
        p += w;
        ok = kind >= 0 && lr_field(&p, "peak", 'f', &l.peak, &bad) && lr_field(&p, "final", 'f', &l.final_lr, &bad) &&
             lr_field(&p, "gamma", 'f', &l.gamma, &bad) && lr_field(&p, "steps", 'i', &l.steps, &bad) &&
             lr_field(&p, "every", 'i', &l.every, &bad);
        if (ok) bad = (lr_bad){n, "milestones", p}, ok = strncmp(p, " milestones=", 12) == 0;
        if (!ok) break;
        p += 12;
        first[n] = nm;
        while (*p && *p != ' ' && *p != ';') {
            bad.at = p;
            if (l.n_milestones == INT32_MAX || !grow((void **)&ms, sizeof *ms, &cap_m, nm)) {
                oom = l.n_milestones != INT32_MAX;
                ok = false;
                break;
            }
            /* each one ends at a ',' that another follows */
            char one[64];
            size_t k = strcspn(p, ", ;");
            const char *end;
            ok = k < sizeof one;
            if (ok) memcpy(one, p, k), one[k] = 0, ok = lr_number(one, 'i', &ms[nm], &end) && !*end;
            if (!ok) break;
            nm++;
            l.n_milestones++;
            p += k;
            if (*p == ',' && (ok = p[1] && p[1] != ' ' && p[1] != ';')) p++;
            if (!ok) break;
        }
        if (!ok) break;
        if (*p == ' ' && !(ok = lr_field(&p, "start", 'i', &l.start_step, &bad))) break;
        chain[n++] = l;
        if (*p == 0) break;
        /* Only a warmup continues into another schedule. */
        bad = (lr_bad){n, "kind", p};
        if (strncmp(p, "; ", 2) != 0 || l.kind != TG_LR_WARMUP) {
            ok = false;
            break;
        }
        p += 2;
    }
    tg_status st;
    if (oom) {
        st = tg_fail(TG_ERR_NOMEM, "%s: out of memory", what);
    } else if (!ok) {
        char sh[240], val[80], shown[80];
        size_t k = strcspn(bad.at, " ;");
        snprintf(val, sizeof val, "%.*s", (int)(k < 60 ? k : 60), bad.at);
        st = tg_fail(TG_ERR_FORMAT, "%s is '%s', not a schedule: link %lld's %s is '%s'%s", what,
                     tg_st_shown(str, sh, sizeof sh), (long long)bad.link, bad.field, tg_st_shown(val, shown, sizeof shown),
                     !strcmp(bad.field, "kind")    ? ""
                     : !strcmp(bad.field, "peak") || !strcmp(bad.field, "final") || !strcmp(bad.field, "gamma")
                         ? " (not a finite float)"
                         : " (not an integer of int64's range)");
    } else {
        for (int64_t k = 0; k < n; k++) {
            chain[k].then = k + 1 < n ? &chain[k + 1] : NULL;
            chain[k].milestones = chain[k].n_milestones ? ms + first[k] : NULL;
        }
        st = tg_lr_copy(chain, out, what);
        if (st == TG_ERR_ARG) { /* values out of range: a damaged file, not a caller's mistake */
            char msg[600];
            snprintf(msg, sizeof msg, "%s", tg_last_error());
            st = tg_fail(TG_ERR_FORMAT, "%s", msg);
        }
    }
    free(chain);
    free(ms);
    free(first);
    return st;
}

/* A hash of a checkpoint's tensor bytes, in the session's order: a 64-bit
 * multiply-xor hash over 8-byte words (a few GB/s). Format 1's "checksum"
 * (its data's only), and what the ranks of a data-parallel load compare. */
static uint64_t data_hash(uint64_t h, const void *p, int64_t bytes) {
    const unsigned char *b = p;
    int64_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define HASH_SEED 0xcbf29ce484222325ull

/* A non-negative decimal integer, the whole string. */
static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* train: a full checkpoint of that session (s is its base); NULL: params only. */
static tg_status save(tg_session_base *s, const tg_session *train, const char *api, const char *path) {
    if (!s || !path) return tg_fail(TG_ERR_ARG, "%s: session and path are required", api);
    if (!*path) return tg_fail(TG_ERR_ARG, "%s: the path is empty", api);
    bool full = train != NULL;
    ck_entry *e;
    int n;
    char *lr = NULL;
    tg_status st = collect(s, train, api, &e, &n);
    if (st != TG_OK) return st;
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += e[i].bytes;
    char *host = malloc((size_t)total + 1);
    tg_st_tensor *t = tg_calloc((size_t)n + 1, sizeof *t);
    if (!host || !t) {
        st = tg_fail(TG_ERR_NOMEM, "%s: out of memory for %lld bytes", api, (long long)total);
        goto done;
    }
    int64_t o = 0;
    for (int i = 0; i < n && st == TG_OK; i++) {
        st = s->eng->vt->read(s->eng, s->prog, e[i].arena, e[i].offset, host + o, e[i].bytes);
        t[i] = (tg_st_tensor){e[i].name, e[i].dtype, e[i].shape, host + o};
        o += e[i].bytes;
    }
    if (st != TG_OK) goto done;
    /* The container adds a checksum of every byte (io/safetensors.h). */
    const char *meta[14] = {"format", full ? CK_FULL XSTR(CK_VERSION) : CK_WEIGHTS XSTR(CK_VERSION)};
    char step[24], lr_start[24], seed[24], pending[24];
    int n_meta = full ? 6 : 1;
    if (full) {
        if (!(lr = lr_encode(train->lr))) {
            st = tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
            goto done;
        }
        snprintf(step, sizeof step, "%lld", (long long)train->step);
        snprintf(lr_start, sizeof lr_start, "%lld", (long long)train->lr_start);
        snprintf(seed, sizeof seed, "%" PRIu64, s->seed);
        const char *m[] = {"step", step, "lr_start", lr_start, "seed", seed,
                           "optimizer", opt_name(train->optim.kind), "lr", lr};
        memcpy(meta + 2, m, sizeof m);
        if (train->micro > 0) { /* saved between updates: the micro-steps whose sums the state holds */
            snprintf(pending, sizeof pending, "%d", train->micro);
            meta[2 * n_meta] = "pending", meta[2 * n_meta + 1] = pending, n_meta++;
        }
    }
    st = tg_safetensors_write(path, t, n, meta, n_meta);
    if (st != TG_OK) st = rewrap(api, st);
done:
    free(lr);
    free(host);
    free(t);
    free(e);
    return st;
}

/* Under the session's lock: a step on another thread cannot change what is saved midway. */
static tg_status save_locked(tg_session_base *s, const tg_session *train, const char *api, const char *path) {
    tg_share_lock(s);
    tg_status st = s ? tg_session_base_usable(s, api) : TG_OK;
    if (st == TG_OK) st = save(s, train, api, path);
    tg_share_unlock(s);
    return st;
}

/* Data parallel: every rank holds the same params and state, so rank 0
 * writes the file alone, and every rank returns how that went. */
static tg_status save_rank0(tg_session *s, bool full, const char *api, const char *path) {
    tg_comm *c = tg_session_dp_comm(s);
    tg_session_base *b = s ? &s->b : NULL;
    if (!c) return save_locked(b, full ? s : NULL, api, path);
    tg_status st = c->rank == 0 ? save_locked(b, full ? s : NULL, api, path) : TG_OK;
    return tg_dp_agree(c, st, api);
}

tg_status tg_session_save_params(tg_session *s, const char *path) {
    return save_rank0(s, false, "tg_session_save_params", path);
}

tg_status tg_forward_save_params(tg_forward *f, const char *path) {
    return save_locked(f ? &f->b : NULL, NULL, "tg_forward_save_params", path);
}

tg_status tg_session_save(tg_session *s, const char *path) { return save_rank0(s, true, "tg_session_save", path); }

/* What a file is, from its "format" metadata: ours (CK_FULL or CK_WEIGHTS
 * and a version), or another program's (weights by name, no version). */
typedef struct {
    bool ours, full;
    int version;
} ck_format;

static tg_status file_format(const tg_safetensors *f, const char *api, const char *path, ck_format *out) {
    const char *fmt = tg_safetensors_meta(f, "format");
    *out = (ck_format){0};
    if (!fmt || strncmp(fmt, CK_PREFIX, strlen(CK_PREFIX)) != 0) return TG_OK;
    char sh[80];
    bool full = strncmp(fmt, CK_FULL, strlen(CK_FULL)) == 0, weights = strncmp(fmt, CK_WEIGHTS, strlen(CK_WEIGHTS)) == 0;
    const char *v = fmt + (full ? strlen(CK_FULL) : weights ? strlen(CK_WEIGHTS) : 0);
    uint64_t version = 0;
    if ((!full && !weights) || !parse_u64(v, &version) || version == 0 || (v[0] == '0'))
        return tg_fail(TG_ERR_FORMAT, "%s: %s: its format '%s' is none this library knows ('" CK_FULL "N' or '"
                       CK_WEIGHTS "N')", api, path, tg_st_shown(fmt, sh, sizeof sh));
    if (version > CK_VERSION || (weights && version < 2)) /* weights files had no metadata before version 2 */
        return tg_fail(TG_ERR_FORMAT, "%s: %s: its format '%s' is not one this library reads (" CK_FULL "1 and 2, "
                       CK_WEIGHTS "2)%s", api, path, tg_st_shown(fmt, sh, sizeof sh),
                       version > CK_VERSION ? ": a newer tensorgrad wrote it" : "");
    /* From version 2 every file carries the container's checksum: one
     * without it was edited, or damaged where the checksum's key was. */
    if (version >= 2 && !f->checksummed)
        return tg_fail(TG_ERR_FORMAT, "%s: %s: the file has no checksum (format '%s' always has one): it was damaged "
                       "or edited after it was written", api, path, tg_st_shown(fmt, sh, sizeof sh));
    *out = (ck_format){true, full, (int)version};
    return TG_OK;
}

/* Every entry present with its dtype and shape, nothing else in the file
 * but, with skip_state (params from a full checkpoint), its optimizer
 * state ("opt." tensors that are no param). */
static tg_status match(const char *api, const char *path, const tg_safetensors *f, const ck_entry *e, int n, bool full,
                       bool skip_state, const tg_st_tensor **src) {
    char a[160], b[160];
    const char *other = skip_state ? " (the file holds another model's params: make this session's model as the one "
                                     "that saved it)" : "";
    for (int i = 0; i < n; i++) {
        const tg_st_tensor *t = tg_safetensors_find(f, e[i].name);
        for (int k = 0; !t && k < tg_safetensors_skipped_count(f); k++) {
            const char *dt, *name = tg_safetensors_skipped(f, k, &dt);
            if (strcmp(name, e[i].name) == 0)
                return tg_fail(TG_ERR_FORMAT, "%s: %s: tensor '%s' is %s, which is not read (F32, I32, F16 and BF16 "
                               "are)", api, path, e[i].name, tg_st_shown(dt, a, 40));
        }
        if (!t) return tg_fail(TG_ERR_NAME, "%s: %s: missing tensor '%s'%s", api, path, e[i].name, other);
        if (t->dtype != e[i].dtype)
            return tg_fail(TG_ERR_FORMAT, "%s: %s: tensor '%s' is %s, the session's is %s%s", api, path, e[i].name,
                           tg_dtype_name(t->dtype), tg_dtype_name(e[i].dtype), other);
        int same = t->shape.ndim == e[i].shape.ndim;
        for (int d = 0; same && d < t->shape.ndim; d++) same = t->shape.d[d] == e[i].shape.d[d];
        if (!same)
            return tg_fail(TG_ERR_SIZE, "%s: %s: tensor '%s' has shape %s, the session's is %s%s", api, path, e[i].name,
                           tg_shape_str(t->shape, a, sizeof a), tg_shape_str(e[i].shape, b, sizeof b), other);
        src[i] = t;
    }
    /* Loads are strict: a tensor the reader skipped is one the session does not have. */
    if (tg_safetensors_skipped_count(f) > 0) {
        const char *dt, *name = tg_safetensors_skipped(f, 0, &dt);
        char nm[128];
        return tg_fail(TG_ERR_NAME, "%s: %s: unknown tensor '%s' (%s, not read; to load the others, read the file with "
                       "tg_safetensors_read and upload them with tg_session_upload_tensors)", api, path,
                       tg_st_shown(name, nm, sizeof nm), tg_st_shown(dt, a, 40));
    }
    int nf = tg_safetensors_count(f);
    if (nf == n) return TG_OK; /* names are unique on both sides, so every file tensor was matched */
    bool *used = tg_calloc((size_t)nf + 1, sizeof *used);
    if (!used) return tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
    for (int i = 0; i < n; i++) used[src[i] - f->t] = true;
    int k = 0;
    while (k < nf && (used[k] || (skip_state && strncmp(f->t[k].name, "opt.", 4) == 0))) k++;
    free(used);
    if (k == nf) return TG_OK;
    char nm[128];
    return tg_fail(TG_ERR_NAME, "%s: %s: unknown tensor '%s'%s", api, path, tg_st_shown(f->t[k].name, nm, sizeof nm),
                   full                 ? ""
                   : skip_state         ? other
                   : tg_safetensors_meta(f, "format") &&
                           strncmp(tg_safetensors_meta(f, "format"), CK_FULL, strlen(CK_FULL)) == 0
                       ? " (the file is a full checkpoint: load it with tg_session_load)"
                       : "");
}

/* Loaded optimizer state is state an optimizer could have made: Adam's
 * and AdamW's second moments (".v") are never negative. (Every f32 tensor
 * was checked finite before.) */
static tg_status check_state(const char *api, const char *path, const tg_session *train, const ck_entry *e, int n,
                             int n_params, const tg_st_tensor *const *src) {
    tg_opt_kind k = train->optim.kind;
    if (k != TG_OPT_ADAM && k != TG_OPT_ADAMW) return TG_OK;
    for (int i = n_params; i < n; i++) {
        size_t len = strlen(e[i].name);
        if (len < 2 || strcmp(e[i].name + len - 2, ".v") != 0 || e[i].dtype != TG_F32) continue;
        const float *x = src[i]->data;
        for (int64_t j = 0; j < e[i].bytes / 4; j++)
            if (x[j] < 0)
                return tg_fail(TG_ERR_FORMAT, "%s: %s: tensor '%s' holds %g at element %lld, but it is Adam's second "
                               "moment (a mean of squares, never negative)", api, path, e[i].name, x[j], (long long)j);
    }
    return TG_OK;
}

/* Data parallel, once a rank has checked its file (st: how that went): the
 * file must hold what rank 0's holds (the same hash of every tensor), and
 * every rank must have passed before any writes. Every rank makes the same
 * calls whatever its st, so none is left waiting. */
static tg_status agree_on_file(tg_comm *c, tg_status st, uint64_t hash, const char *api, const char *path) {
    uint64_t rank0 = hash;
    c->error[0] = 0;
    tg_status sent = c->broadcast(c, &rank0, sizeof rank0, 0);
    if (st == TG_OK && sent != TG_OK)
        st = tg_fail(sent, "%s: data-parallel: the broadcast of rank 0's file hash failed: %s", api,
                     c->error[0] ? c->error : tg_status_name(sent));
    if (st == TG_OK && rank0 != hash)
        st = tg_fail(TG_ERR_STATE, "%s: %s: the file differs from the one rank 0 read (every rank loads the same "
                     "checkpoint)", api, path);
    return tg_dp_agree(c, st, api);
}

/* The training position of a full checkpoint (format 1 or 2), checked. */
typedef struct {
    uint64_t step, lr_start, seed;
    uint64_t pending; /* micro-steps of an accumulation round the sums hold ("pending"; absent: 0) */
    tg_lr *lr;
} ck_position;

static tg_status read_position(const tg_safetensors *f, const tg_session *train, const char *api, const char *path,
                               ck_position *pos) {
    char sh[240];
    const char *keys[] = {"step", "lr_start", "seed"};
    uint64_t *vals[] = {&pos->step, &pos->lr_start, &pos->seed};
    for (int k = 0; k < 3; k++) {
        const char *v = tg_safetensors_meta(f, keys[k]);
        /* step + 1 must stay an int64: the next step's number */
        if (!parse_u64(v, vals[k]) || (k < 2 && *vals[k] >= INT64_MAX))
            return tg_fail(TG_ERR_FORMAT, "%s: %s: metadata '%s' is %s%s%s, not a non-negative integer%s", api, path,
                           keys[k], v ? "'" : "", v ? tg_st_shown(v, sh, 48) : "missing", v ? "'" : "",
                           k < 2 ? " below 2^63 - 1" : " below 2^64");
    }
    const char *pv = tg_safetensors_meta(f, "pending");
    if (pv && (!parse_u64(pv, &pos->pending) || pos->pending >= (uint64_t)train->accumulate))
        return tg_fail(TG_ERR_STATE, "%s: %s: saved after %s micro-steps of an accumulation; this session "
                       "accumulates %d", api, path, tg_st_shown(pv, sh, 24), train->accumulate);
    if (pos->lr_start > pos->step)
        return tg_fail(TG_ERR_FORMAT, "%s: %s: metadata lr_start %llu is after step %llu", api, path,
                       (unsigned long long)pos->lr_start, (unsigned long long)pos->step);
    const char *opt = tg_safetensors_meta(f, "optimizer");
    if (!opt || strcmp(opt, opt_name(train->optim.kind)) != 0)
        return tg_fail(TG_ERR_STATE, "%s: %s: the checkpoint's optimizer is '%s', this session's is '%s'", api, path,
                       opt ? tg_st_shown(opt, sh, 48) : "(missing)", opt_name(train->optim.kind));
    const char *lrs = tg_safetensors_meta(f, "lr");
    char what[300];
    snprintf(what, sizeof what, "%s: %s: metadata 'lr'", api, path);
    if (!lrs) return tg_fail(TG_ERR_FORMAT, "%s is missing, not a schedule", what);
    return lr_decode(lrs, what, &pos->lr);
}

/* train: a full checkpoint into that session (s is its base); NULL: params
 * only (forward: from a full checkpoint too, skipping its optimizer state).
 * comm: a data-parallel training session's (every rank loads, see agree_on_file). */
static tg_status load(tg_session_base *s, tg_session *train, bool forward, tg_comm *comm, const char *api,
                      const char *path) {
    bool full = train != NULL, agreed = false;
    tg_safetensors *f = NULL;
    ck_entry *e = NULL;
    const tg_st_tensor **src = NULL;
    int n = 0;
    ck_position pos = {0};
    ck_format fm = {0};
    char sh[240];
    tg_status st = !s || !path ? tg_fail(TG_ERR_ARG, "%s: session and path are required", api) : TG_OK;
    if (st == TG_OK) st = collect(s, train, api, &e, &n);
    if (st == TG_OK && (st = tg_safetensors_read(path, &f)) != TG_OK) st = rewrap(api, st);
    if (st == TG_OK) st = file_format(f, api, path, &fm);
    if (st != TG_OK) goto done;
    if (full && !(fm.ours && fm.full)) {
        const char *fmt = tg_safetensors_meta(f, "format");
        st = tg_fail(TG_ERR_FORMAT,
                     "%s: %s: not a full checkpoint (its __metadata__ format is %s%s%s, want '" CK_FULL
                     XSTR(CK_VERSION) "'); a weights-only file loads with tg_session_load_params",
                     api, path, fmt ? "'" : "", fmt ? tg_st_shown(fmt, sh, 64) : "missing", fmt ? "'" : "");
        goto done;
    }
    if (full && (st = read_position(f, train, api, path, &pos)) != TG_OK) goto done;
    if (!(src = tg_calloc((size_t)n + 1, sizeof *src))) {
        st = tg_fail(TG_ERR_NOMEM, "%s: out of memory", api);
        goto done;
    }
    if ((st = match(api, path, f, e, n, full, forward && fm.full, src)) != TG_OK) goto done;
    /* A NaN or Inf param or optimizer state would poison every later step. */
    for (int i = 0; i < n; i++) {
        if (src[i]->dtype != TG_F32) continue;
        int64_t at = tg_first_nonfinite(src[i]->data, e[i].bytes / 4);
        if (at >= 0) {
            float v = ((const float *)src[i]->data)[at];
            st = tg_fail(TG_ERR_FORMAT, "%s: %s: tensor '%s' holds %s at element %lld", api, path, e[i].name,
                         v != v ? "NaN" : "Inf", (long long)at);
            goto done;
        }
    }
    if (full && (st = check_state(api, path, train, e, n, tg_model_param_count(s->model), src)) != TG_OK) goto done;
    /* Format 1 checked its data alone, with a checksum of its own (none before 0.5). */
    const char *sum = full && fm.version == 1 ? tg_safetensors_meta(f, "checksum") : NULL;
    if (sum) {
        uint64_t want, got = HASH_SEED;
        for (int i = 0; i < n; i++) got = data_hash(got, src[i]->data, e[i].bytes);
        if (!parse_u64(sum, &want) || want != got) {
            st = tg_fail(TG_ERR_FORMAT, "%s: %s: the data section does not match its checksum (%s in the metadata, "
                         "%" PRIu64 " computed): the file is damaged", api, path, tg_st_shown(sum, sh, 48), got);
            goto done;
        }
    }
    if (comm) {
        uint64_t h = HASH_SEED;
        for (int i = 0; i < n; i++) h = data_hash(h, src[i]->data, e[i].bytes);
        agreed = true;
        if ((st = agree_on_file(comm, TG_OK, h ^ pos.step, api, path)) != TG_OK) goto done;
    }
    /* Everything checked: now write. */
    for (int i = 0; i < n && st == TG_OK; i++)
        st = s->eng->vt->write(s->eng, s->prog, e[i].arena, e[i].offset, src[i]->data, e[i].bytes);
    if (st == TG_OK && full) {
        train->step = (int64_t)pos.step;
        train->lr_start = (int64_t)pos.lr_start;
        train->micro = (int)pos.pending;
        s->seed = pos.seed;
        free(train->lr);
        train->lr = pos.lr;
        train->optim.lr = *pos.lr;
        pos.lr = NULL;
    }
done:
    if (comm && !agreed) st = agree_on_file(comm, st, 0, api, path);
    free(pos.lr);
    free(src);
    free(e);
    tg_safetensors_free(f);
    return st;
}

static tg_status load_locked(tg_session_base *s, tg_session *train, bool forward, tg_comm *comm, const char *api,
                             const char *path) {
    tg_share_lock(s);
    tg_status st = s ? tg_session_base_usable(s, api) : TG_OK;
    if (st == TG_OK) st = load(s, train, forward, comm, api, path);
    else if (comm) st = agree_on_file(comm, st, 0, api, path); /* the other ranks wait for this one's word */
    tg_share_unlock(s);
    return st;
}

tg_status tg_session_load_params(tg_session *s, const char *path) {
    return load_locked(s ? &s->b : NULL, NULL, false, tg_session_dp_comm(s), "tg_session_load_params", path);
}

tg_status tg_forward_load_params(tg_forward *f, const char *path) {
    return load_locked(f ? &f->b : NULL, NULL, true, NULL, "tg_forward_load_params", path);
}

tg_status tg_session_load(tg_session *s, const char *path) {
    return load_locked(s ? &s->b : NULL, s, false, tg_session_dp_comm(s), "tg_session_load", path);
}
