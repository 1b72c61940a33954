/* safetensors: a strict reader and an atomic writer (see safetensors.h).
 *
 * The reader does not build a JSON tree: the header has a fixed shape (an
 * object of tensor objects plus one object of strings), so the parser walks
 * that shape directly and rejects anything else where it stands. There is no
 * recursion, so nesting bombs fail at their first bracket, and the only
 * allocations are the decoded strings and entry arrays, all bounded by the
 * header's length, itself bounded by the file's size. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"
#include "safetensors.h"

/* Tensor data is copied byte for byte between the file and memory. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and is copied as is: a big-endian host needs byte swaps here"
#endif

#define HDR 8 /* file offset of the header's first byte */

int64_t tg_st_nbytes(tg_dtype dt, tg_shape s) {
    if (dt != TG_F32 && dt != TG_I32) return -1;
    if (s.ndim < 0 || s.ndim > TG_MAX_DIMS) return -1;
    int64_t n = 4;
    for (int i = 0; i < s.ndim; i++) {
        if (s.d[i] < 0) return -1;
        if (s.d[i] > 0 && n > INT64_MAX / s.d[i]) return -1;
        n *= s.d[i];
    }
    return n;
}

static const char *dtype_tag(tg_dtype dt) { return dt == TG_F32 ? "F32" : dt == TG_I32 ? "I32" : "?"; }

const char *tg_st_shown(const char *s, char *buf, size_t cap) {
    size_t o = 0, i = 0, max = cap > 8 ? cap - 4 : 0;
    for (; s[i] && o < max; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[o++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    if (s[i]) {
        while (o > 0 && ((unsigned char)buf[o - 1] & 0xC0) == 0x80) o--; /* do not cut a UTF-8 sequence */
        if (o > 0 && (unsigned char)buf[o - 1] >= 0xC0) o--;
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = 0;
    return buf;
}

/* strerror is not thread-safe; the XSI strerror_r is. */
static const char *errtext(int e, char *buf, size_t cap) {
    if (strerror_r(e, buf, cap) != 0) snprintf(buf, cap, "error %d", e);
    return buf;
}

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no
 * surrogates, nothing past U+10FFFF), or 0 if it is not one. */
static int utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    int k;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        k = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)k > n || s[1] < lo || s[1] > hi) return 0;
    for (int j = 2; j < k; j++)
        if ((s[j] & 0xC0) != 0x80) return 0;
    return k;
}

static bool utf8_valid(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int k = utf8_seq((const uint8_t *)s + i, n - i);
        if (!k) return false;
        i += (size_t)k;
    }
    return true;
}

/* ---- reader -------------------------------------------------------------- */

typedef struct {
    const char *label;
    const uint8_t *h; /* the header's JSON */
    size_t n, i;      /* its length, the read position */
    int64_t data_size;
    tg_safetensors *f;
    int cap_t, cap_meta;
    /* per tensor: header offsets of its name and data_offsets, its data
     * offset and byte length, what the reader does with it, and (skipped)
     * its dtype tag */
    struct st_ent { int64_t key_at, range_at, begin, bytes; int kind; char *tag; } *ent;
    int64_t *meta_at; /* per metadata entry: header offset of its key */
    /* the checksum's value (TG_ST_CHECKSUM_KEY): header offsets of its key
     * and of its first character, its length as written (escapes and all) */
    int64_t sum_key_at, sum_at, sum_len;
} parser;

static tg_status perr(const parser *p, size_t at, const char *fmt, ...) TG_PRINTF(3, 4);
static tg_status perr(const parser *p, size_t at, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tg_fail(TG_ERR_FORMAT, "safetensors: %s: byte %lld: %s", p->label, (long long)(HDR + at), msg);
}

/* What stands at header offset `at`, for "expected X, found Y". */
static const char *found(const parser *p, size_t at, char *buf) {
    if (at >= p->n) return "the end of the header";
    uint8_t c = p->h[at];
    if (c > 0x20 && c < 0x7f)
        snprintf(buf, 16, "'%c'", c);
    else
        snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

static void ws(parser *p) {
    while (p->i < p->n && (p->h[p->i] == ' ' || p->h[p->i] == '\t' || p->h[p->i] == '\n' || p->h[p->i] == '\r'))
        p->i++;
}

static bool eat(parser *p, char c) {
    ws(p);
    if (p->i < p->n && p->h[p->i] == (uint8_t)c) {
        p->i++;
        return true;
    }
    return false;
}

static tg_status expect(parser *p, char c, const char *context) {
    if (eat(p, c)) return TG_OK;
    char b[16];
    return perr(p, p->i, "expected '%c' %s, found %s", c, context, found(p, p->i, b));
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits at p->i (just after "\u"). */
static tg_status hex4(parser *p, size_t esc_at, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int d = p->i < p->n ? hexval(p->h[p->i]) : -1;
        if (d < 0) return perr(p, esc_at, "expected 4 hex digits after \\u");
        v = v * 16 + (uint32_t)d;
        p->i++;
    }
    *out = v;
    return TG_OK;
}

static int utf8_encode(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18);
    o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape sequence after its backslash, as a code point. */
static tg_status parse_escape(parser *p, size_t esc_at, uint32_t *cp) {
    if (p->i >= p->n) return perr(p, esc_at, "unterminated escape at the end of the header");
    uint8_t e = p->h[p->i++];
    switch (e) {
    case '"': *cp = '"'; return TG_OK;
    case '\\': *cp = '\\'; return TG_OK;
    case '/': *cp = '/'; return TG_OK;
    case 'b': *cp = 8; return TG_OK;
    case 'f': *cp = 12; return TG_OK;
    case 'n': *cp = 10; return TG_OK;
    case 'r': *cp = 13; return TG_OK;
    case 't': *cp = 9; return TG_OK;
    case 'u': break;
    default: {
        char b[16];
        return perr(p, esc_at, "invalid escape: backslash followed by %s", found(p, p->i - 1, b));
    }
    }
    uint32_t v;
    tg_status st = hex4(p, esc_at, &v);
    if (st != TG_OK) return st;
    if (v >= 0xDC00 && v <= 0xDFFF) return perr(p, esc_at, "unpaired surrogate \\u%04X", (unsigned)v);
    if (v >= 0xD800 && v <= 0xDBFF) {
        size_t lo_at = p->i;
        uint32_t lo = 0;
        if (p->i + 1 < p->n && p->h[p->i] == '\\' && p->h[p->i + 1] == 'u') {
            p->i += 2;
            if ((st = hex4(p, lo_at, &lo)) != TG_OK) return st;
        }
        if (lo < 0xDC00 || lo > 0xDFFF) return perr(p, esc_at, "unpaired surrogate \\u%04X", (unsigned)v);
        v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (v == 0) return perr(p, esc_at, "\\u0000 (NUL) is not allowed in a string");
    *cp = v;
    return TG_OK;
}

/* A JSON string, decoded to UTF-8 in a new allocation (at most twice its
 * encoded length). */
static tg_status parse_string(parser *p, const char *what, char **out) {
    *out = NULL;
    ws(p);
    size_t start = p->i;
    if (p->i >= p->n || p->h[p->i] != '"') {
        char b[16];
        return perr(p, start, "expected %s (a string), found %s", what, found(p, start, b));
    }
    p->i++;
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    if (!s) return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", p->label);
    tg_status st = TG_OK;
    for (;;) {
        if (p->i >= p->n) {
            st = perr(p, start, "unterminated string");
            break;
        }
        uint8_t c = p->h[p->i], enc[4];
        int k;
        if (c == '"') {
            p->i++;
            break;
        }
        if (c < 0x20) {
            st = perr(p, p->i, "raw control character 0x%02x in a string (JSON requires an escape)", c);
            break;
        }
        if (c == '\\') {
            size_t esc_at = p->i++;
            uint32_t cp = 0;
            if ((st = parse_escape(p, esc_at, &cp)) != TG_OK) break;
            k = utf8_encode(cp, enc);
        } else {
            k = utf8_seq(p->h + p->i, p->n - p->i);
            if (!k) {
                st = perr(p, p->i, "invalid UTF-8 in a string");
                break;
            }
            memcpy(enc, p->h + p->i, (size_t)k);
            p->i += (size_t)k;
        }
        if (len + (size_t)k + 1 > cap) {
            char *ns = realloc(s, cap * 2);
            if (!ns) {
                st = tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", p->label);
                break;
            }
            s = ns;
            cap *= 2;
        }
        memcpy(s + len, enc, (size_t)k);
        len += (size_t)k;
    }
    if (st != TG_OK) {
        free(s);
        return st;
    }
    s[len] = 0;
    *out = s;
    return TG_OK;
}

/* A non-negative integer that fits int64. */
static tg_status parse_uint(parser *p, const char *what, int64_t *out) {
    ws(p);
    size_t start = p->i;
    if (p->i < p->n && p->h[p->i] == '-') return perr(p, start, "%s must not be negative", what);
    if (p->i >= p->n || p->h[p->i] < '0' || p->h[p->i] > '9') {
        char b[16];
        return perr(p, start, "expected %s (an integer), found %s", what, found(p, start, b));
    }
    if (p->h[p->i] == '0' && p->i + 1 < p->n && p->h[p->i + 1] >= '0' && p->h[p->i + 1] <= '9')
        return perr(p, start, "%s has a leading zero", what);
    int64_t v = 0;
    while (p->i < p->n && p->h[p->i] >= '0' && p->h[p->i] <= '9') {
        int d = p->h[p->i] - '0';
        if (v > (INT64_MAX - d) / 10) return perr(p, start, "%s is too large (over 2^63 - 1)", what);
        v = v * 10 + d;
        p->i++;
    }
    if (p->i < p->n && (p->h[p->i] == '.' || p->h[p->i] == 'e' || p->h[p->i] == 'E'))
        return perr(p, start, "%s must be an integer", what);
    *out = v;
    return TG_OK;
}

/* [n, n, ...] with at most `max` entries. */
static tg_status parse_uint_array(parser *p, const char *what, const char *ctx, int64_t *out, int max, int *count) {
    *count = 0;
    char b[16];
    ws(p);
    if (!eat(p, '[')) return perr(p, p->i, "%s: expected '[' to start %s, found %s", ctx, what, found(p, p->i, b));
    if (eat(p, ']')) return TG_OK;
    for (;;) {
        ws(p);
        if (*count == max) return perr(p, p->i, "%s: %s has more than %d entries", ctx, what, max);
        tg_status st = parse_uint(p, what, &out[*count]);
        if (st != TG_OK) return st;
        (*count)++;
        if (eat(p, ',')) continue;
        if (eat(p, ']')) return TG_OK;
        return perr(p, p->i, "%s: expected ',' or ']' in %s, found %s", ctx, what, found(p, p->i, b));
    }
}

/* Room for entry n in two parallel arrays that share the capacity *cap. */
static tg_status grow2(parser *p, void **a, size_t ea, void **b, size_t eb, int *cap, int n) {
    if (n < *cap) return TG_OK;
    if (*cap > (1 << 28)) return tg_fail(TG_ERR_FORMAT, "safetensors: %s: too many header entries", p->label);
    int nc = *cap ? *cap * 2 : 16;
    void *na = realloc(*a, (size_t)nc * ea);
    if (na) *a = na;
    void *nb = na ? realloc(*b, (size_t)nc * eb) : NULL;
    if (nb) *b = nb;
    if (!na || !nb) return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", p->label);
    *cap = nc;
    return TG_OK;
}

/* The dtypes a file may hold: what the reader does with each, its element
 * size, and what it is read as. A tag not listed is skipped too, its size
 * unknown (only its range is checked). */
enum { ST_AS_IS, ST_F16, ST_BF16, ST_SKIP };
static const struct {
    const char *tag;
    int size, kind;
    tg_dtype dt;
} st_dtypes[] = {
    {"F32", 4, ST_AS_IS, TG_F32}, {"I32", 4, ST_AS_IS, TG_I32}, {"F16", 2, ST_F16, TG_F32},
    {"BF16", 2, ST_BF16, TG_F32}, {"F64", 8, ST_SKIP, TG_F32},  {"I64", 8, ST_SKIP, TG_F32},
    {"U64", 8, ST_SKIP, TG_F32},  {"U32", 4, ST_SKIP, TG_F32},  {"I16", 2, ST_SKIP, TG_F32},
    {"U16", 2, ST_SKIP, TG_F32},  {"I8", 1, ST_SKIP, TG_F32},   {"U8", 1, ST_SKIP, TG_F32},
    {"BOOL", 1, ST_SKIP, TG_F32}, {"F8_E4M3", 1, ST_SKIP, TG_F32}, {"F8_E5M2", 1, ST_SKIP, TG_F32},
    {"F8_E8M0", 1, ST_SKIP, TG_F32},
};

/* numel * size, or -1 when it overflows (dims past TG_MAX_DIMS included). */
static int64_t st_bytes(const int64_t *d, int nd, int64_t size) {
    int64_t n = size;
    for (int i = 0; i < nd; i++) {
        if (d[i] > 0 && n > INT64_MAX / d[i]) return -1;
        n *= d[i];
    }
    return n;
}

/* The body of one tensor entry; takes ownership of name. */
static tg_status parse_tensor(parser *p, char *name, size_t key_at) {
    tg_safetensors *f = p->f;
    char nm[96], ctx[120], b[16], sb[160];
    snprintf(ctx, sizeof ctx, "tensor '%s'", tg_st_shown(name, nm, 64));
    tg_status st = TG_OK;
    bool have_dt = false, have_shape = false, have_off = false;
    tg_dtype dt = TG_F32;
    int kind = ST_SKIP, size = 0;
    char *tag = NULL;
    int64_t dims[16];
    int ndim = 0;
    int64_t off[2] = {0, 0};
    size_t shape_at = 0, off_at = 0;
    ws(p);
    if (!eat(p, '{')) {
        st = perr(p, p->i, "%s: expected '{' to start its entry, found %s", ctx, found(p, p->i, b));
        goto fail;
    }
    if (!eat(p, '}')) {
        for (;;) {
            ws(p);
            size_t field_at = p->i;
            char *field;
            if ((st = parse_string(p, "a field name", &field)) != TG_OK) goto fail;
            if ((st = expect(p, ':', "after a field name")) != TG_OK) {
                free(field);
                goto fail;
            }
            ws(p);
            bool *have = strcmp(field, "dtype") == 0          ? &have_dt
                         : strcmp(field, "shape") == 0        ? &have_shape
                         : strcmp(field, "data_offsets") == 0 ? &have_off
                                                              : NULL;
            if (!have) {
                st = perr(p, field_at, "%s: unknown field '%s' (expected dtype, shape, data_offsets)", ctx,
                          tg_st_shown(field, sb, 64));
                free(field);
                goto fail;
            }
            free(field);
            if (*have) {
                st = perr(p, field_at, "%s: a field appears twice", ctx);
                goto fail;
            }
            *have = true;
            if (have == &have_dt) {
                size_t dt_at = p->i;
                if ((st = parse_string(p, "a dtype", &tag)) != TG_OK) goto fail;
                if (!*tag || strlen(tag) > 32) {
                    st = perr(p, dt_at, "%s: dtype '%s' is not a dtype tag", ctx, tg_st_shown(tag, sb, 40));
                    goto fail;
                }
                for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
                    if (strcmp(tag, st_dtypes[k].tag) == 0)
                        kind = st_dtypes[k].kind, size = st_dtypes[k].size, dt = st_dtypes[k].dt;
            } else if (have == &have_shape) {
                shape_at = p->i;
                if ((st = parse_uint_array(p, "shape", ctx, dims, 16, &ndim)) != TG_OK) goto fail;
            } else {
                off_at = p->i;
                int k;
                if ((st = parse_uint_array(p, "data_offsets", ctx, off, 2, &k)) != TG_OK) goto fail;
                if (k != 2) {
                    st = perr(p, off_at, "%s: data_offsets needs exactly 2 entries, has %d", ctx, k);
                    goto fail;
                }
            }
            if (eat(p, ',')) continue;
            if (eat(p, '}')) break;
            st = perr(p, p->i, "%s: expected ',' or '}' in its entry, found %s", ctx, found(p, p->i, b));
            goto fail;
        }
    }
    size_t end_at = p->i - 1;
    if (!have_dt || !have_shape || !have_off) {
        st = perr(p, end_at, "%s: missing \"%s\"", ctx, !have_dt ? "dtype" : !have_shape ? "shape" : "data_offsets");
        goto fail;
    }
    if (ndim > TG_MAX_DIMS && kind != ST_SKIP) {
        st = perr(p, shape_at, "%s: the shape has %d dims (at most %d)", ctx, ndim, TG_MAX_DIMS);
        goto fail;
    }
    tg_shape shape = {ndim <= TG_MAX_DIMS ? ndim : 0, {0}};
    for (int k = 0; k < shape.ndim; k++) shape.d[k] = dims[k];
    int64_t nbytes = st_bytes(dims, ndim, size ? size : 1);
    if (nbytes < 0 || (kind != ST_SKIP && tg_st_nbytes(dt, shape) < 0)) {
        st = perr(p, shape_at, "%s: shape %s is too large", ctx,
                  ndim <= TG_MAX_DIMS ? tg_shape_str(shape, sb, sizeof sb) : "(over 6 dims)");
        goto fail;
    }
    if (off[0] > off[1]) {
        st = perr(p, off_at, "%s: data_offsets [%lld, %lld] end before they begin", ctx, (long long)off[0],
                  (long long)off[1]);
        goto fail;
    }
    if (off[1] > p->data_size) {
        st = perr(p, off_at, "%s: data_offsets [%lld, %lld] run past the end of the data section (%lld bytes)", ctx,
                  (long long)off[0], (long long)off[1], (long long)p->data_size);
        goto fail;
    }
    if (size && off[1] - off[0] != nbytes) { /* a tag of unknown size: only its range is checked */
        st = perr(p, off_at, "%s: %s %s needs %lld bytes, data_offsets [%lld, %lld] hold %lld", ctx,
                  tg_st_shown(tag, nm, 40), ndim <= TG_MAX_DIMS ? tg_shape_str(shape, sb, sizeof sb) : "(over 6 dims)",
                  (long long)nbytes, (long long)off[0], (long long)off[1], (long long)(off[1] - off[0]));
        goto fail;
    }
    if ((st = grow2(p, (void **)&f->t, sizeof *f->t, (void **)&p->ent, sizeof *p->ent, &p->cap_t, f->n)) != TG_OK)
        goto fail;
    f->t[f->n] = (tg_st_tensor){name, dt, shape, NULL}; /* data is placed once every range is checked */
    p->ent[f->n] = (struct st_ent){(int64_t)key_at, (int64_t)off_at, off[0], off[1] - off[0], kind,
                                   kind == ST_SKIP ? tag : NULL};
    if (kind != ST_SKIP) free(tag);
    f->n++;
    return TG_OK;
fail:
    free(tag);
    free(name);
    return st;
}

static tg_status parse_meta(parser *p) {
    tg_safetensors *f = p->f;
    char b[16];
    ws(p);
    if (!eat(p, '{')) return perr(p, p->i, "expected '{' to start __metadata__, found %s", found(p, p->i, b));
    if (eat(p, '}')) return TG_OK;
    for (;;) {
        ws(p);
        size_t key_at = p->i;
        char *k = NULL, *v = NULL;
        tg_status st = parse_string(p, "a metadata key", &k);
        if (st == TG_OK) st = expect(p, ':', "after a metadata key");
        ws(p);
        size_t value_at = p->i;
        if (st == TG_OK) st = parse_string(p, "a metadata value", &v);
        bool sum = st == TG_OK && strcmp(k, TG_ST_CHECKSUM_KEY) == 0;
        if (sum && p->sum_at >= 0) st = perr(p, key_at, "metadata key '" TG_ST_CHECKSUM_KEY "' appears twice");
        if (sum && st == TG_OK) { /* the container's, not the caller's: kept apart from the metadata */
            p->sum_key_at = (int64_t)key_at;
            p->sum_at = (int64_t)value_at + 1;
            p->sum_len = (int64_t)(p->i - value_at) - 2;
            free(k);
            free(v);
        }
        if (sum && st == TG_OK) {
            if (eat(p, ',')) continue;
            if (eat(p, '}')) return TG_OK;
            return perr(p, p->i, "expected ',' or '}' in __metadata__, found %s", found(p, p->i, b));
        }
        if (st == TG_OK)
            st = grow2(p, (void **)&f->meta, sizeof *f->meta, (void **)&p->meta_at, sizeof *p->meta_at, &p->cap_meta,
                       f->n_meta);
        if (st != TG_OK) {
            free(k);
            free(v);
            return st;
        }
        f->meta[f->n_meta] = (st_meta){k, v};
        p->meta_at[f->n_meta++] = (int64_t)key_at;
        if (eat(p, ',')) continue;
        if (eat(p, '}')) return TG_OK;
        return perr(p, p->i, "expected ',' or '}' in __metadata__, found %s", found(p, p->i, b));
    }
}

static tg_status parse_header(parser *p) {
    char b[16];
    bool seen_meta = false;
    ws(p);
    if (!eat(p, '{')) return perr(p, p->i, "expected '{' at the start of the header, found %s", found(p, p->i, b));
    if (!eat(p, '}')) {
        for (;;) {
            ws(p);
            size_t key_at = p->i;
            char *key;
            tg_status st = parse_string(p, "a tensor name", &key);
            if (st == TG_OK) st = expect(p, ':', "after a tensor name");
            if (st != TG_OK) {
                free(key);
                return st;
            }
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (seen_meta) return perr(p, key_at, "__metadata__ appears twice");
                seen_meta = true;
                st = parse_meta(p);
            } else {
                st = parse_tensor(p, key, key_at);
            }
            if (st != TG_OK) return st;
            if (eat(p, ',')) continue;
            if (eat(p, '}')) break;
            return perr(p, p->i, "expected ',' or '}' after a header entry, found %s", found(p, p->i, b));
        }
    }
    ws(p);
    if (p->i != p->n)
        return perr(p, p->i, "%s after the header's JSON object (only space padding may follow)", found(p, p->i, b));
    return TG_OK;
}

/* Sorting with the parser as context (qsort has none). */
typedef struct {
    const char *name;
    int64_t a, b;
    int idx;
} st_key;

static int by_name_cmp(const void *x, const void *y) {
    const st_key *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static int by_range_cmp(const void *x, const void *y) {
    const st_key *a = x, *b = y;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    if (a->b != b->b) return a->b < b->b ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Duplicate names; reports the earliest second occurrence in the file. */
static tg_status check_dups(parser *p, st_key *k, int n, const char *what, int *order) {
    qsort(k, (size_t)n, sizeof *k, by_name_cmp);
    int worst = -1;
    for (int i = 1; i < n; i++)
        if (strcmp(k[i].name, k[i - 1].name) == 0 && (worst < 0 || k[i].idx < worst)) worst = k[i].idx;
    if (worst >= 0) {
        char nm[96];
        const char *name = NULL;
        for (int i = 0; i < n; i++)
            if (k[i].idx == worst) name = k[i].name;
        size_t at = (size_t)(order ? p->ent[worst].key_at : p->meta_at[worst]);
        return perr(p, at, "%s '%s' appears twice", what, tg_st_shown(name, nm, 64));
    }
    if (order)
        for (int i = 0; i < n; i++) order[i] = k[i].idx;
    return TG_OK;
}

static tg_status check_entries(parser *p, const uint8_t *data) {
    tg_safetensors *f = p->f;
    int n = f->n > f->n_meta ? f->n : f->n_meta;
    st_key *k = tg_calloc((size_t)n + 1, sizeof *k);
    f->by_name = tg_calloc((size_t)f->n + 1, sizeof(int));
    f->copies = tg_calloc((size_t)f->n + 1, sizeof(void *));
    f->skipped = tg_calloc((size_t)f->n + 1, sizeof *f->skipped);
    if (!k || !f->by_name || !f->copies || !f->skipped) {
        free(k);
        return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", p->label);
    }
    tg_status st;
    for (int i = 0; i < f->n_meta; i++) k[i] = (st_key){f->meta[i].key, 0, 0, i};
    if ((st = check_dups(p, k, f->n_meta, "metadata key", NULL)) != TG_OK) goto done;
    for (int i = 0; i < f->n; i++) k[i] = (st_key){f->t[i].name, 0, 0, i};
    if ((st = check_dups(p, k, f->n, "tensor", f->by_name)) != TG_OK) goto done;

    /* Overlaps: in order of begin, each non-empty range must start at or
     * after the furthest end seen so far. */
    for (int i = 0; i < f->n; i++) {
        int64_t b = p->ent[i].begin;
        k[i] = (st_key){f->t[i].name, b, b + p->ent[i].bytes, i};
    }
    qsort(k, (size_t)f->n, sizeof *k, by_range_cmp);
    int far = -1;
    for (int i = 0; i < f->n; i++) {
        if (k[i].a == k[i].b) continue;
        if (far >= 0 && k[i].a < k[far].b) {
            char n1[96], n2[96];
            st = perr(p, (size_t)p->ent[k[i].idx].range_at,
                      "tensor '%s': data_offsets [%lld, %lld] overlap tensor '%s' [%lld, %lld]",
                      tg_st_shown(k[i].name, n1, 64), (long long)k[i].a, (long long)k[i].b, tg_st_shown(k[far].name, n2, 64),
                      (long long)k[far].a, (long long)k[far].b);
            goto done;
        }
        if (far < 0 || k[i].b > k[far].b) far = i;
    }

    /* Place the data; ranges the file put at unaligned addresses get an
     * aligned copy, so callers may read floats straight from .data, and
     * F16 / BF16 tensors an F32 one. */
    static const int32_t no_data[1];
    for (int i = 0; i < f->n; i++) {
        int kind = p->ent[i].kind;
        int64_t b = p->ent[i].begin, nb = tg_st_nbytes(f->t[i].dtype, f->t[i].shape);
        const uint8_t *src = p->ent[i].bytes ? data + b : (const uint8_t *)no_data;
        if (kind == ST_SKIP) continue;
        if (((uintptr_t)src & 3) || kind != ST_AS_IS) {
            void *c = malloc((size_t)nb + 4);
            if (!c) {
                st = tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", p->label);
                goto done;
            }
            if (kind == ST_AS_IS) memcpy(c, src, (size_t)nb);
            else tg_st_halves(src, kind == ST_BF16, nb / 4, c);
            f->copies[f->n_copies++] = c;
            src = c;
        }
        f->t[i].data = src;
    }

    /* The skipped move to their own list; the rest keep header order. */
    int kept = 0;
    for (int i = 0; i < f->n; i++) {
        if (p->ent[i].kind == ST_SKIP) {
            f->skipped[f->n_skipped++] = (st_skipped){(char *)f->t[i].name, p->ent[i].tag};
            p->ent[i].tag = NULL;
        } else {
            f->t[kept++] = f->t[i];
        }
    }
    f->n = kept;
    for (int i = 0; i < f->n; i++) k[i] = (st_key){f->t[i].name, 0, 0, i};
    qsort(k, (size_t)f->n, sizeof *k, by_name_cmp);
    for (int i = 0; i < f->n; i++) f->by_name[i] = k[i].idx;
    st = TG_OK;
done:
    free(k);
    return st;
}

void tg_safetensors_free(tg_safetensors *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    for (int i = 0; i < f->n_copies; i++) free(f->copies[i]);
    for (int i = 0; i < f->n_skipped; i++) {
        free(f->skipped[i].name);
        free(f->skipped[i].dtype);
    }
    free(f->skipped);
    free(f->copies);
    free(f->t);
    free(f->meta);
    free(f->by_name);
    free(f->file);
    free(f);
}

/* ---- the checksum -------------------------------------------------------- */

/* A 64-bit hash of a byte stream: each 8-byte word w steps h to
 * ((h ^ w) * P) ^ (that >> 29), and the last bytes one at a time. Every
 * step is a bijection of h and, for a given h, one-to-one in w, so any
 * change confined to one word (every single flipped bit) changes the
 * result; the length is mixed in at the end. A few GB/s. */
typedef struct {
    uint64_t h, len;
    uint8_t part[8];
    int n_part;
} st_hasher;

#define HASH_SEED 0xcbf29ce484222325ull
#define HASH_MUL 0x100000001b3ull

static void hash_word(st_hasher *s, const uint8_t *b) {
    uint64_t w;
    memcpy(&w, b, 8);
    s->h = (s->h ^ w) * HASH_MUL;
    s->h ^= s->h >> 29;
}

static void hash_bytes(st_hasher *s, const void *p, size_t n) {
    const uint8_t *b = p;
    s->len += n;
    while (n > 0 && s->n_part > 0) {
        s->part[s->n_part++] = *b++, n--;
        if (s->n_part == 8) hash_word(s, s->part), s->n_part = 0;
    }
    for (; n >= 8; b += 8, n -= 8) hash_word(s, b);
    while (n > 0) s->part[s->n_part++] = *b++, n--;
}

static uint64_t hash_end(st_hasher *s) {
    for (int i = 0; i < s->n_part; i++) s->h = (s->h ^ s->part[i]) * HASH_MUL;
    uint64_t h = (s->h ^ s->len) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
}

/* The hash of a file image with its checksum's digits (at byte `at`) read as '0's. */
static uint64_t image_hash(const uint8_t *buf, size_t size, size_t at) {
    static const char zeros[TG_ST_CHECKSUM_DIGITS + 1] = "0000000000000000";
    st_hasher s = {HASH_SEED, 0, {0}, 0};
    hash_bytes(&s, buf, at);
    hash_bytes(&s, zeros, TG_ST_CHECKSUM_DIGITS);
    hash_bytes(&s, buf + at + TG_ST_CHECKSUM_DIGITS, size - at - TG_ST_CHECKSUM_DIGITS);
    return hash_end(&s);
}

static void put_hex(uint64_t v, char *out) {
    for (int i = TG_ST_CHECKSUM_DIGITS - 1; i >= 0; i--, v >>= 4) out[i] = "0123456789abcdef"[v & 15];
}

/* The checksum the parser found, against the whole image. */
static tg_status verify(const parser *p, const uint8_t *buf, size_t size) {
    const char *d = (const char *)p->h + p->sum_at;
    bool hex = p->sum_len == TG_ST_CHECKSUM_DIGITS;
    for (int i = 0; hex && i < TG_ST_CHECKSUM_DIGITS; i++) hex = (d[i] >= '0' && d[i] <= '9') || (d[i] >= 'a' && d[i] <= 'f');
    if (!hex)
        return perr(p, (size_t)p->sum_at, TG_ST_CHECKSUM_KEY " is not %d lowercase hex digits: the file was damaged "
                    "or edited", TG_ST_CHECKSUM_DIGITS);
    char want[TG_ST_CHECKSUM_DIGITS + 1] = {0};
    put_hex(image_hash(buf, size, HDR + (size_t)p->sum_at), want);
    if (memcmp(want, d, TG_ST_CHECKSUM_DIGITS) != 0)
        return perr(p, (size_t)p->sum_at, "the file does not match its checksum (%.*s here, %s computed over its %zu "
                    "bytes): it was damaged or edited after it was written", TG_ST_CHECKSUM_DIGITS, d, want, size);
    return TG_OK;
}

bool tg_st_reseal(uint8_t *img, size_t size) {
    tg_safetensors *f = NULL;
    if (size < HDR) return false;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | img[i];
    if (hl > (uint64_t)(size - HDR)) return false;
    parser p = {"(reseal)", img + HDR, (size_t)hl, 0, (int64_t)(size - HDR - hl), NULL, 0, 0, NULL, NULL, -1, -1, 0};
    if (!(f = tg_calloc(1, sizeof *f))) return false;
    p.f = f;
    tg_status st = parse_header(&p);
    for (int i = 0; i < f->n; i++) free(p.ent[i].tag);
    free(p.ent);
    free(p.meta_at);
    tg_safetensors_free(f);
    if (st != TG_OK || p.sum_at < 0 || p.sum_len != TG_ST_CHECKSUM_DIGITS) return false;
    put_hex(image_hash(img, size, HDR + (size_t)p.sum_at), (char *)img + HDR + p.sum_at);
    return true;
}

tg_status tg_st_parse(const char *label, const uint8_t *buf, size_t size, tg_safetensors **out) {
    *out = NULL;
    if (size < HDR)
        return tg_fail(TG_ERR_FORMAT, "safetensors: %s: byte 0: the file is %zu bytes, too short for the 8-byte header length",
                       label, size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
    if (hl > (uint64_t)(size - HDR))
        return tg_fail(TG_ERR_FORMAT,
                       "safetensors: %s: byte 0: header length %llu runs past the end of the file (%zu bytes)", label,
                       (unsigned long long)hl, size);
    tg_safetensors *f = tg_calloc(1, sizeof *f);
    if (!f) return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", label);
    parser p = {label, buf + HDR, (size_t)hl, 0, (int64_t)(size - HDR - hl), f, 0, 0, NULL, NULL, -1, -1, 0};
    tg_status st = parse_header(&p);
    int n_ent = f->n;
    /* A damaged file says so before anything else it has wrong. */
    if (st == TG_OK && p.sum_at >= 0) st = verify(&p, buf, size);
    f->checksummed = st == TG_OK && p.sum_at >= 0;
    if (st == TG_OK) st = check_entries(&p, buf + HDR + hl);
    for (int i = 0; i < n_ent; i++) free(p.ent[i].tag); /* those not moved to the skipped list */
    free(p.ent);
    free(p.meta_at);
    if (st != TG_OK) {
        tg_safetensors_free(f);
        return st;
    }
    *out = f;
    return TG_OK;
}

tg_status tg_safetensors_read(const char *path, tg_safetensors **out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_safetensors_read: out is NULL");
    *out = NULL;
    if (!path) return tg_fail(TG_ERR_ARG, "tg_safetensors_read: path is NULL");
    char eb[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tg_fail(TG_ERR_IO, "safetensors: %s: cannot open: %s", path, errtext(errno, eb, sizeof eb));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tg_fail(TG_ERR_IO, "safetensors: %s: cannot stat: %s", path, errtext(e, eb, sizeof eb));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tg_fail(TG_ERR_IO, "safetensors: %s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return tg_fail(TG_ERR_NOMEM, "safetensors: %s: %lld bytes is too large to read", path, (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size, got = 0;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory reading %zu bytes", path, size);
    }
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return e ? tg_fail(TG_ERR_IO, "safetensors: %s: read failed: %s", path, errtext(e, eb, sizeof eb))
                     : tg_fail(TG_ERR_IO, "safetensors: %s: the file shrank while it was read", path);
        }
        got += (size_t)r;
    }
    close(fd);
    tg_status st = tg_st_parse(path, buf, size, out);
    if (st != TG_OK) {
        free(buf);
        return st;
    }
    (*out)->file = buf;
    return TG_OK;
}

/* IEEE half: sign, 5 exponent bits (bias 15), 10 mantissa bits. Exact in
 * f32: a normal half is rebiased, a subnormal one (m * 2^-24) normalized,
 * inf and NaN keep their class (a NaN its payload, shifted). */
static uint32_t half_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return sign | 0x7f800000u | m << 13;
    if (e) return sign | (e + 112) << 23 | m << 13;
    if (!m) return sign;
    e = 113; /* 2^-14 once the leading 1 is shifted into place */
    while (!(m & 0x400)) m <<= 1, e--;
    return sign | e << 23 | (m & 0x3ff) << 13;
}

void tg_st_halves(const void *src, bool bf16, int64_t n, float *dst) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
        uint32_t bits = bf16 ? (uint32_t)h << 16 : half_bits(h);
        memcpy(&dst[i], &bits, 4);
    }
}

tg_status tg_safetensors_read_mem(const void *buf, size_t size, tg_safetensors **out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_safetensors_read_mem: out is NULL");
    *out = NULL;
    if (!buf && size) return tg_fail(TG_ERR_ARG, "tg_safetensors_read_mem: buf is NULL");
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return tg_fail(TG_ERR_NOMEM, "safetensors: (memory): out of memory for %zu bytes", size);
    if (size) memcpy(copy, buf, size);
    tg_status st = tg_st_parse("(memory)", copy, size, out);
    if (st != TG_OK) {
        free(copy);
        return st;
    }
    (*out)->file = copy;
    return TG_OK;
}

int tg_safetensors_skipped_count(const tg_safetensors *f) { return f ? f->n_skipped : 0; }

const char *tg_safetensors_skipped(const tg_safetensors *f, int i, const char **dtype) {
    bool in = f && i >= 0 && i < f->n_skipped;
    if (dtype) *dtype = in ? f->skipped[i].dtype : NULL;
    return in ? f->skipped[i].name : NULL;
}

tg_status tg_st_new(const tg_st_tensor *t, int n, tg_safetensors **out) {
    *out = NULL;
    tg_safetensors *f = tg_calloc(1, sizeof *f);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += tg_st_nbytes(t[i].dtype, t[i].shape);
    if (f) {
        f->t = tg_calloc((size_t)n + 1, sizeof *f->t);
        f->by_name = tg_calloc((size_t)n + 1, sizeof(int));
        f->file = tg_calloc((size_t)total + 4, 1);
    }
    if (!f || !f->t || !f->by_name || !f->file) {
        tg_safetensors_free(f);
        return tg_fail(TG_ERR_NOMEM, "safetensors: out of memory for %lld bytes", (long long)total);
    }
    st_key *k = tg_calloc((size_t)n + 1, sizeof *k);
    int64_t o = 0;
    for (int i = 0; i < n && k; i++, f->n++) {
        int64_t nb = tg_st_nbytes(t[i].dtype, t[i].shape);
        f->t[i] = (tg_st_tensor){tg_strdup(t[i].name), t[i].dtype, t[i].shape, f->file + o};
        if (!f->t[i].name) break;
        if (t[i].data) memcpy(f->file + o, t[i].data, (size_t)nb);
        o += nb;
        k[i] = (st_key){f->t[i].name, 0, 0, i};
    }
    if (!k || f->n < n) {
        free(k);
        tg_safetensors_free(f);
        return tg_fail(TG_ERR_NOMEM, "safetensors: out of memory");
    }
    qsort(k, (size_t)n, sizeof *k, by_name_cmp);
    for (int i = 0; i < n; i++) f->by_name[i] = k[i].idx;
    free(k);
    *out = f;
    return TG_OK;
}

int tg_safetensors_count(const tg_safetensors *f) { return f ? f->n : 0; }

const tg_st_tensor *tg_safetensors_tensor(const tg_safetensors *f, int i) {
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const tg_st_tensor *tg_safetensors_find(const tg_safetensors *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return &f->t[f->by_name[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *tg_safetensors_meta(const tg_safetensors *f, const char *key) {
    for (int i = 0; f && key && i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* ---- writer -------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_cat(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* A JSON string; s is valid UTF-8 (checked by the caller). */
static void sb_json(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

/* Names must be unique, non-NULL and valid UTF-8 (a reader would reject the file otherwise). */
static tg_status check_names(const char *path, const char **names, int n, const char *what) {
    char nm[96];
    for (int i = 0; i < n; i++) {
        if (!names[i]) return tg_fail(TG_ERR_ARG, "safetensors: %s: %s %d has no name", path, what, i);
        if (!utf8_valid(names[i]))
            return tg_fail(TG_ERR_ARG, "safetensors: %s: %s '%s' is not valid UTF-8", path, what, tg_st_shown(names[i], nm, 64));
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i], names[i - 1]) == 0)
            return tg_fail(TG_ERR_NAME, "safetensors: %s: %s '%s' is given twice", path, what, tg_st_shown(names[i], nm, 64));
    return TG_OK;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The rename is durable only once the directory entry is; best effort, as
 * some file systems refuse fsync on directories. */
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? malloc((size_t)(slash - path) + 2) : NULL;
    if (slash && !dir) return;
    if (dir) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    int fd = open(dir ? dir : ".", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* Where a save to path goes: path itself, or, when it is a symbolic link,
 * the file the link (and any link it names) points to, so that the link
 * stays and its target is replaced, as editors and SQLite do. A link to a
 * file that does not exist yet names the file to create. NULL (with
 * *st set) when the links loop or memory runs out. */
static char *save_target(const char *path, tg_status *st) {
    char *p = tg_strdup(path);
    for (int hops = 0; p; hops++) {
        struct stat sb;
        if (lstat(p, &sb) != 0 || !S_ISLNK(sb.st_mode)) return p;
        if (hops == 40) {
            *st = tg_fail(TG_ERR_IO, "safetensors: %s: too many levels of symbolic links", path);
            free(p);
            return NULL;
        }
        size_t cap = (size_t)(sb.st_size > 0 ? sb.st_size : 255) + 1;
        char *link = malloc(cap);
        ssize_t k = link ? readlink(p, link, cap) : -1;
        if (k < 0 || (size_t)k >= cap) { /* gone or grown since the lstat: save over the name as it is */
            free(link);
            return p;
        }
        link[k] = 0;
        const char *slash = strrchr(p, '/');
        size_t dir = link[0] == '/' || !slash ? 0 : (size_t)(slash - p) + 1; /* relative: from the link's folder */
        char *next = malloc(dir + (size_t)k + 1);
        if (next) {
            memcpy(next, p, dir);
            memcpy(next + dir, link, (size_t)k + 1);
        }
        free(link);
        free(p);
        p = next;
    }
    *st = tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", path);
    return NULL;
}

static tg_status write_file(const char *path, const char *target, const sbuf *h, const tg_st_tensor *t, int n);

tg_status tg_safetensors_write(const char *path, const tg_st_tensor *t, int n, const char *const *meta, int n_meta) {
    if (!path || n < 0 || n_meta < 0 || (n > 0 && !t) || (n_meta > 0 && !meta))
        return tg_fail(TG_ERR_ARG, "tg_safetensors_write: bad arguments");
    if (!*path) return tg_fail(TG_ERR_ARG, "tg_safetensors_write: the path is empty");
    char sh[160], nm[96];
    for (int i = 0; i < n; i++) {
        if (t[i].dtype != TG_F32 && t[i].dtype != TG_I32)
            return tg_fail(TG_ERR_ARG, "safetensors: %s: tensor '%s': only F32 and I32 can be written", path,
                           t[i].name ? tg_st_shown(t[i].name, nm, 64) : "(null)");
        if (tg_st_nbytes(t[i].dtype, t[i].shape) < 0)
            return tg_fail(TG_ERR_SHAPE, "safetensors: %s: tensor '%s': bad shape %s", path,
                           t[i].name ? tg_st_shown(t[i].name, nm, 64) : "(null)", tg_shape_str(t[i].shape, sh, sizeof sh));
        if (!t[i].data && tg_st_nbytes(t[i].dtype, t[i].shape) > 0)
            return tg_fail(TG_ERR_ARG, "safetensors: %s: tensor '%s' has no data", path,
                           t[i].name ? tg_st_shown(t[i].name, nm, 64) : "(null)");
        if (t[i].name && strcmp(t[i].name, "__metadata__") == 0)
            return tg_fail(TG_ERR_NAME, "safetensors: %s: '__metadata__' cannot name a tensor", path);
    }
    const char **names = tg_calloc((size_t)(n > n_meta ? n : n_meta) + 1, sizeof *names);
    if (!names) return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", path);
    for (int i = 0; i < n; i++) names[i] = t[i].name;
    tg_status st = check_names(path, names, n, "tensor");
    for (int i = 0; st == TG_OK && i < n_meta; i++) {
        names[i] = meta[2 * i];
        if (!meta[2 * i + 1] || !utf8_valid(meta[2 * i + 1]))
            st = tg_fail(TG_ERR_ARG, "safetensors: %s: metadata value %d is missing or not valid UTF-8", path, i);
        else if (meta[2 * i] && strcmp(meta[2 * i], TG_ST_CHECKSUM_KEY) == 0)
            st = tg_fail(TG_ERR_NAME, "safetensors: %s: metadata key '" TG_ST_CHECKSUM_KEY "' is the writer's own "
                         "(the checksum of the file)", path);
    }
    if (st == TG_OK) st = check_names(path, names, n_meta, "metadata key");
    free(names);
    if (st != TG_OK) return st;

    /* Header in the caller's order, data contiguous in the same order; the
     * checksum first in the metadata, its digits filled in once known. */
    sbuf h = {0};
    sb_cat(&h, "{\"__metadata__\":{\"" TG_ST_CHECKSUM_KEY "\":\"");
    size_t digits_at = h.n;
    sb_cat(&h, "0000000000000000\"");
    for (int i = 0; i < n_meta; i++) {
        sb_cat(&h, ",");
        sb_json(&h, meta[2 * i]);
        sb_cat(&h, ":");
        sb_json(&h, meta[2 * i + 1]);
    }
    sb_cat(&h, "}");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        char num[64];
        sb_cat(&h, ",");
        sb_json(&h, t[i].name);
        sb_cat(&h, ":{\"dtype\":\"");
        sb_cat(&h, dtype_tag(t[i].dtype));
        sb_cat(&h, "\",\"shape\":[");
        for (int d = 0; d < t[i].shape.ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t[i].shape.d[d]);
            sb_cat(&h, num);
        }
        int64_t nb = tg_st_nbytes(t[i].dtype, t[i].shape);
        if (nb > INT64_MAX - off) {
            free(h.s);
            return tg_fail(TG_ERR_SIZE, "safetensors: %s: the tensors add up to more than 2^63 bytes", path);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + nb));
        sb_cat(&h, num);
        off += nb;
    }
    sb_cat(&h, "}");
    /* Space padding (which the format allows) puts the data at a multiple of 8. */
    while (!h.oom && (HDR + h.n) % 8) sb_cat(&h, " ");
    if (h.oom) {
        free(h.s);
        return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", path);
    }

    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
    st_hasher sum = {HASH_SEED, 0, {0}, 0};
    hash_bytes(&sum, len8, 8);
    hash_bytes(&sum, h.s, h.n);
    for (int i = 0; i < n; i++) hash_bytes(&sum, t[i].data, (size_t)tg_st_nbytes(t[i].dtype, t[i].shape));
    put_hex(hash_end(&sum), h.s + digits_at);
    char *target = save_target(path, &st);
    if (target) st = write_file(path, target, &h, t, n);
    free(target);
    free(h.s);
    return st;
}

/* The header h (its length first) and the tensors' data into a temporary
 * beside target, then renamed over it; path names the file in errors. */
static tg_status write_file(const char *path, const char *target, const sbuf *h, const tg_st_tensor *t, int n) {
    char *tmp = tg_st_temp_name(target), eb[128];
    if (!tmp) return tg_fail(TG_ERR_NOMEM, "safetensors: %s: out of memory", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        tg_status st = tg_fail(TG_ERR_IO, "safetensors: %s: cannot create '%s': %s", path, tmp, errtext(errno, eb, sizeof eb));
        free(tmp);
        return st;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h->n >> (8 * i));
    int e = write_all(fd, len8, 8);
    if (!e) e = write_all(fd, h->s, h->n);
    for (int i = 0; !e && i < n; i++) e = write_all(fd, t[i].data, (size_t)tg_st_nbytes(t[i].dtype, t[i].shape));
    const char *op = "write";
    if (!e && fsync(fd) != 0) e = errno, op = "sync";
    if (close(fd) != 0 && !e) e = errno, op = "close";
    if (!e && rename(tmp, target) != 0) e = errno, op = "rename";
    tg_status st = TG_OK;
    if (e) {
        unlink(tmp);
        st = tg_fail(TG_ERR_IO, "safetensors: %s: cannot %s '%s': %s", path, op, tmp, errtext(e, eb, sizeof eb));
    } else {
        sync_dir(target);
        tg_st_remove_stale(target);
    }
    free(tmp);
    return st;
}
