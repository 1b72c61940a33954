/* safetensors and checkpoints.
 *
 * The reader is fed valid files (ours, and fixtures written by an
 * independent Python writer), then hostile ones: malformed JSON, wrong types,
 * bad dtypes, huge sizes, duplicates, overlaps, every truncation of a valid
 * file and random corruption. Each must give an error naming a byte offset,
 * never a crash (`make sanitize` runs all of this under ASan+UBSan; buffers
 * are allocated to their exact size so any over-read is caught). Then the
 * session API: strict loads that write nothing on error, atomic writes, and
 * resumed training that matches an uninterrupted run bit for bit. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fixtures/checkpoint_v1.h"
#include "io/safetensors.h"
#include "session.h"
#include "util/util.h"

static char dir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static const char *missing_dir_path(void) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/no/such/dir/x.safetensors", dir);
    return buf;
}

/* The fixtures live next to this file; tests run from the repo root. */
static const char *fixture(const char *name) {
    static char buf[256];
    const char *slash = strrchr(__FILE__, '/');
    int n = slash ? (int)(slash - __FILE__) : 0;
    snprintf(buf, sizeof buf, "%.*s%sfixtures/%s", n, __FILE__, slash ? "/" : "", name);
    return buf;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* No "<x>.tmp.<pid>" may be left behind in the test directory. */
static int stray_tmp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* Parses an image from an allocation of exactly its size. */
static tg_status parse_exact(const uint8_t *img, size_t n, tg_safetensors **out) {
    uint8_t *b = malloc(n ? n : 1);
    if (n) memcpy(b, img, n);
    tg_status st = tg_st_parse("mem", b, n, out);
    if (st == TG_OK) {
        /* the parse refers into b; keep it alive with the result */
        (*out)->file = b;
    } else {
        free(b);
    }
    return st;
}

/* An image: 8-byte length, the header text, then `data` zero bytes. */
static uint8_t *image(const char *hdr, size_t hn, size_t data, size_t *n) {
    *n = 8 + hn + data;
    uint8_t *b = calloc(1, *n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, hdr, hn);
    return b;
}

/* ---- round trip ---------------------------------------------------------- */

static void roundtrip(void) {
    float w[6] = {1.5f, -2.0f, 0.0f, -0.0f, INFINITY, 3.0e-38f};
    uint32_t nan_bits = 0x7fc01234u; /* a NaN payload must survive */
    memcpy(&w[2], &nan_bits, 4);
    int32_t idx[5] = {0, -1, INT32_MAX, INT32_MIN, 7};
    float sc = 2.5f;
    int32_t isc = -42;
    float six[8];
    for (int i = 0; i < 8; i++) six[i] = (float)i / 3.0f;
    const char *odd = "quote\" back\\slash\nnewline\x01 caf\xc3\xa9 \xf0\x9f\x98\x80";
    tg_st_tensor t[] = {
        {"w", TG_F32, TG_SHAPE(2, 3), w},          {"idx", TG_I32, TG_SHAPE(5), idx},
        {"scalar", TG_F32, TG_SCALAR, &sc},        {"iscalar", TG_I32, TG_SCALAR, &isc},
        {"empty", TG_F32, TG_SHAPE(0), NULL},      {"six", TG_F32, TG_SHAPE(1, 2, 1, 2, 1, 2), six},
        {odd, TG_F32, TG_SHAPE(1), &sc},           {"", TG_I32, TG_SHAPE(1, 1), &isc},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    const char *meta[] = {"format", "test", "k\"ey", "v\\al\tue \xc3\xa9"};
    const char *p = tmp_path("rt.safetensors"), *p2 = tmp_path("rt2.safetensors");
    CHECK_OK(tg_safetensors_write(p, t, n, meta, 2));
    CHECK_OK(tg_safetensors_write(p2, t, n, meta, 2));
    size_t n1 = 0, n2 = 0;
    uint8_t *b1 = read_whole_file(p, &n1), *b2 = read_whole_file(p2, &n2);
    CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "two writes of the same tensors differ");
    if (b1 && n1 >= 8) {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | b1[i];
        CHECK((8 + hl) % 8 == 0, "data section starts at %llu, not a multiple of 8", (unsigned long long)(8 + hl));
        CHECK(b1[8] == '{' && b1[8 + hl - 1] == (hl > 0 && b1[8 + hl - 1] == ' ' ? ' ' : '}'),
              "header is not a JSON object padded with spaces");
        CHECK(memcmp(b1 + 8, "{\"__metadata__\"", 15) == 0, "metadata is not written first");
    }
    free(b1);
    free(b2);

    tg_safetensors *f = NULL;
    CHECK_OK(tg_safetensors_read(p, &f));
    if (!f) return;
    CHECK(tg_safetensors_count(f) == n, "count %d, want %d", tg_safetensors_count(f), n);
    for (int i = 0; i < n && i < tg_safetensors_count(f); i++) {
        const tg_st_tensor *r = tg_safetensors_tensor(f, i);
        CHECK(strcmp(r->name, t[i].name) == 0, "tensor %d is '%s', want '%s' (header order)", i, r->name, t[i].name);
        CHECK(r->dtype == t[i].dtype, "tensor %d dtype", i);
        CHECK(r->shape.ndim == t[i].shape.ndim && memcmp(r->shape.d, t[i].shape.d, sizeof(int64_t) * (size_t)r->shape.ndim) == 0,
              "tensor %d shape", i);
        int64_t nb = tg_st_nbytes(t[i].dtype, t[i].shape);
        CHECK(nb == 0 || memcmp(r->data, t[i].data, (size_t)nb) == 0, "tensor '%s' data differs", t[i].name);
        CHECK(((uintptr_t)r->data & 3) == 0, "tensor '%s' data is not 4-byte aligned", t[i].name);
        CHECK(tg_safetensors_find(f, t[i].name) == r, "find('%s') did not return it", t[i].name);
    }
    CHECK(tg_safetensors_find(f, "nope") == NULL, "find of a missing name");
    const char *v = tg_safetensors_meta(f, "k\"ey");
    CHECK(v && strcmp(v, meta[3]) == 0, "metadata value '%s'", v ? v : "(null)");
    CHECK(tg_safetensors_meta(f, "format") && strcmp(tg_safetensors_meta(f, "format"), "test") == 0, "metadata format");
    CHECK(tg_safetensors_meta(f, "absent") == NULL, "absent metadata key");
    tg_safetensors_free(f);

    /* No tensors at all is a valid file too. */
    CHECK_OK(tg_safetensors_write(p, NULL, 0, NULL, 0));
    f = NULL;
    CHECK_OK(tg_safetensors_read(p, &f));
    CHECK(f && tg_safetensors_count(f) == 0, "empty file");
    tg_safetensors_free(f);
    CHECK(stray_tmp_files() == 0, "temporary files left behind");
}

/* ---- a file from an independent writer ----------------------------------- */

static void reference_fixture(const char *name) {
    tg_safetensors *f = NULL;
    CHECK_OK(tg_safetensors_read(fixture(name), &f));
    if (!f) return;
    CHECK(tg_safetensors_count(f) == 6, "%s: %d tensors", name, tg_safetensors_count(f));
    static const char *order[] = {"weight", "bias", "idx", "scalar", "empty", "caf\xc3\xa9.\xf0\x9f\x98\x80"};
    for (int i = 0; i < 6 && i < tg_safetensors_count(f); i++)
        CHECK(strcmp(tg_safetensors_tensor(f, i)->name, order[i]) == 0, "%s: tensor %d is '%s'", name, i,
              tg_safetensors_tensor(f, i)->name);
    const tg_st_tensor *w = tg_safetensors_find(f, "weight"), *b = tg_safetensors_find(f, "bias"),
                       *ix = tg_safetensors_find(f, "idx"), *sc = tg_safetensors_find(f, "scalar"),
                       *em = tg_safetensors_find(f, "empty"), *u = tg_safetensors_find(f, order[5]);
    CHECK(w && b && ix && sc && em && u, "%s: a tensor is missing", name);
    if (!(w && b && ix && sc && em && u)) {
        tg_safetensors_free(f);
        return;
    }
    const float wv[6] = {0.5f, -1.25f, 3.0f, 1e-3f, -0.0f, 65504.0f}, bv[3] = {1, 2, -3.5f};
    const int32_t iv[4] = {0, -1, INT32_MAX, INT32_MIN};
    CHECK(w->dtype == TG_F32 && w->shape.ndim == 2 && w->shape.d[0] == 2 && w->shape.d[1] == 3, "%s: weight", name);
    CHECK(memcmp(w->data, wv, sizeof wv) == 0, "%s: weight values", name);
    CHECK(memcmp(b->data, bv, sizeof bv) == 0 && b->shape.ndim == 1, "%s: bias values", name);
    CHECK(ix->dtype == TG_I32 && memcmp(ix->data, iv, sizeof iv) == 0, "%s: idx values", name);
    CHECK(sc->shape.ndim == 0 && *(const float *)sc->data == 3.14159f, "%s: scalar", name);
    CHECK(em->shape.ndim == 1 && em->shape.d[0] == 0, "%s: empty", name);
    CHECK(u->shape.ndim == 3 && *(const float *)u->data == 42.0f, "%s: unicode-named tensor", name);
    for (int i = 0; i < 6; i++)
        CHECK(((uintptr_t)tg_safetensors_tensor(f, i)->data & 3) == 0, "%s: tensor %d unaligned", name, i);
    const char *note = tg_safetensors_meta(f, "note"), *src = tg_safetensors_meta(f, "source");
    CHECK(note && strcmp(note, "quote \" and backslash \\") == 0, "%s: note '%s'", name, note ? note : "(null)");
    CHECK(src && strcmp(src, "make_st_fixture.py") == 0, "%s: source", name);
    tg_safetensors_free(f);
}

/* ---- hostile headers ----------------------------------------------------- */

#define T1 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"
#define T2 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}"

typedef struct {
    const char *hdr;
    size_t data;      /* data section bytes */
    const char *want; /* in the message */
    long at;          /* "byte <at>:", or -1 for any */
} bad_case;

static const bad_case bad[] = {
    {"", 0, "expected '{' at the start of the header, found the end", 8},
    {"[]", 0, "expected '{' at the start", 8},
    {"true", 0, "expected '{'", 8},
    {"{\"a\" 1}", 4, "expected ':' after a tensor name, found '1'", 13},
    {"{\"a\":" T1, 4, "expected ',' or '}' after a header entry, found the end", -1},
    {"{\"a\":" T1 "}x", 4, "'x' after the header's JSON object", -1},
    {"{\"a\":" T1 "}\0\0", 4, "byte 0x00 after the header's JSON object", -1},
    {"{\"a\":" T1 ",}", 4, "expected a tensor name (a string), found '}'", -1},
    {"{\"a\":" T1 " \"b\":" T2 "}", 8, "expected ',' or '}'", -1},
    {"{a:1}", 0, "expected a tensor name (a string), found 'a'", 9},
    {"{\"a\":1}", 0, "tensor 'a': expected '{' to start its entry, found '1'", 13},
    {"{\"a\":[]}", 0, "expected '{' to start its entry", 13},
    /* dtypes read, converted and skipped are still checked against their bytes and shape */
    {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
     "tensor 'a': F16 [2] needs 4 bytes, data_offsets [0, 2] hold 2", 55},
    {"{\"w\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "BF16 [1] needs 2 bytes", -1},
    {"{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "I64 [1] needs 8 bytes", -1},
    {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
     "F64 (over 6 dims) needs 8 bytes", -1},
    {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[8],\"data_offsets\":[0,5]}}", 4, "run past the end of the data section", -1},
    {"{\"a\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': dtype '' is not a dtype tag", 22},
    {"{\"a\":" T1 ",\"a\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}}", 12, "tensor 'a' appears twice", -1},
    {"{\"a\":" T1 ",\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", 8,
     "tensor 'b': data_offsets [3, 5] overlap tensor 'a' [0, 4]", -1},
    {"{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "expected a dtype (a string), found '3'", 22},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, "expected '[' to start shape", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":null,\"data_offsets\":[0,4]}}", 4, "expected '[' to start shape, found 'n'", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape must be an integer", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e3],\"data_offsets\":[0,4]}}", 4, "shape must be an integer", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape must not be negative", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", 4, "expected shape (an integer), found ']'", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1 1],\"data_offsets\":[0,4]}}", 4, "expected ',' or ']' in shape", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "the shape has 7 dims (at most 6)", -1},
    {"{\"a\":{\"dtype\":\"I8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 4,
     "shape has more than 16 entries", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "data_offsets has more than 2 entries", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets needs exactly 2 entries, has 1", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}", 4, "expected '[' to start data_offsets", -1},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': missing \"dtype\"", 46},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing \"shape\"", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing \"data_offsets\"", -1},
    {"{\"a\":{}}", 0, "missing \"dtype\"", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "a field appears twice", 28},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4,
     "tensor 'a': unknown field 'extra' (expected dtype, shape, data_offsets)", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "F32 [2] needs 8 bytes, data_offsets [0, 4] hold 4", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, "needs 4 bytes", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8, "end before they begin", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 3,
     "data_offsets [0, 4] run past the end of the data section (3 bytes)", 55},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775803,9223372036854775807]}}", 4,
     "run past the end of the data section", -1},
    /* huge declared sizes: each product, and the byte count, must not overflow */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}}", 4,
     "shape [1099511627776,1099511627776] is too large", 36},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2305843009213693952],\"data_offsets\":[0,4]}}", 4, "is too large", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}}", 4,
     "shape is too large (over 2^63 - 1)", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999999999],\"data_offsets\":[0,4]}}", 4, "too large", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,4],\"data_offsets\":[0,4]}}", 4, "needs 0 bytes", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551616]}}", 4, "too large", -1},
    /* duplicates and overlaps */
    {"{\"a\":" T1 ",\"a\":" T2 "}", 8, "tensor 'a' appears twice", 62},
    {"{\"b\":" T1 ",\"a\":" T2 ",\"b\":" T2 "}", 8, "tensor 'b' appears twice", 115},
    {"{\"a\":" T1 ",\"b\":" T1 "}", 8, "tensor 'b': data_offsets [0, 4] overlap tensor 'a' [0, 4]", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":" T2 "}", 8,
     "tensor 'b': data_offsets [4, 8] overlap tensor 'a' [0, 8]", -1},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":" T2 ",\"c\":{\"dtype\":\"F32\","
     "\"shape\":[1],\"data_offsets\":[12,16]}}", 16, "overlap tensor 'a'", -1},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice", 27},
    {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, "metadata key 'k' appears twice", 33},
    {"{\"__metadata__\":{\"k\":1}}", 0, "expected a metadata value (a string), found '1'", 29},
    {"{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "expected a metadata value (a string), found '{'", -1},
    {"{\"__metadata__\":[]}", 0, "expected '{' to start __metadata__", -1},
    {"{\"__metadata__\":{\"k\":\"v\"}", 0, "expected ',' or '}' after a header entry", -1},
    /* strings: escapes, UTF-8, control characters */
    {"{\"a\\x\":" T1 "}", 4, "invalid escape: backslash followed by 'x'", 11},
    {"{\"a\\u12\":" T1 "}", 4, "expected 4 hex digits after \\u", 11},
    {"{\"\\ud800\":" T1 "}", 4, "unpaired surrogate \\uD800", 10},
    {"{\"\\ud800\\u0041\":" T1 "}", 4, "unpaired surrogate \\uD800", 10},
    {"{\"\\udc00\":" T1 "}", 4, "unpaired surrogate \\uDC00", 10},
    {"{\"a\\u0000\":" T1 "}", 4, "\\u0000 (NUL) is not allowed", 11},
    {"{\"a\x01\":" T1 "}", 4, "raw control character 0x01", 11},
    {"{\"a\xff\":" T1 "}", 4, "invalid UTF-8", 11},
    {"{\"\xc0\xaf\":" T1 "}", 4, "invalid UTF-8", 10},       /* overlong '/' */
    {"{\"\xed\xa0\x80\":" T1 "}", 4, "invalid UTF-8", 10},   /* an encoded surrogate */
    {"{\"\xf4\x90\x80\x80\":" T1 "}", 4, "invalid UTF-8", 10}, /* past U+10FFFF */
    {"{\"\xe2\x82\":" T1 "}", 4, "invalid UTF-8", 10},       /* cut sequence */
    {"{\"\xe2", 0, "invalid UTF-8", 10},                        /* cut by the header's end */
    {"{\"abc", 0, "unterminated string", 9},
    {"{\"abc\\", 0, "unterminated escape", 13},
    {"{\"a\":{\"dtype\":\"F\xff\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "invalid UTF-8", -1},
    {"{\"\xff\":" T1 "}", 4, "invalid UTF-8", 10},
    {"\xef\xbb\xbf{}", 0, "expected '{' at the start of the header, found byte 0xef", 8}, /* no BOM */
};

static void check_bad(const char *hdr, size_t hn, size_t data, const char *want, long at, const char *what) {
    size_t n;
    uint8_t *img = image(hdr, hn, data, &n);
    tg_safetensors *f = NULL;
    tg_status st = parse_exact(img, n, &f);
    const char *msg = tg_last_error();
    char at_s[40] = "byte ";
    if (at >= 0) snprintf(at_s, sizeof at_s, ": byte %ld: ", at);
    CHECK(st == TG_ERR_FORMAT && strstr(msg, want) && strstr(msg, at_s) && strncmp(msg, "safetensors: mem: byte ", 23) == 0,
          "%s: got %s '%s', want '%s' at '%s'", what, tg_status_name(st), msg, want, at_s);
    tg_safetensors_free(f);
    free(img);
}

static void hostile_headers(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "bad case %zu", i);
        /* the cases with an embedded NUL give their length by sizeof */
        size_t hn = strlen(bad[i].hdr);
        if (strstr(bad[i].want, "byte 0x00")) hn += 2;
        check_bad(bad[i].hdr, hn, bad[i].data, bad[i].want, bad[i].at, what);
    }

    /* nesting bombs fail at their first bracket, without recursion */
    size_t big = 200000;
    char *bomb = malloc(big + 64);
    const char *pre[] = {"", "{\"a\":", "{\"a\":{\"shape\":", "{\"__metadata__\":{\"k\":", "{\"a\":{\"dtype\":"};
    const char *want[] = {"expected '{' at the start", "expected '{' to start its entry", "expected shape (an integer)",
                          "expected a metadata value", "expected a dtype"};
    for (int k = 0; k < 5; k++) {
        for (int c = 0; c < 2; c++) {
            size_t o = (size_t)sprintf(bomb, "%s", pre[k]);
            memset(bomb + o, c ? '{' : '[', big);
            const char *w = want[k];
            if (k == 0 && c) w = "expected a tensor name";
            if (k == 1 && c) w = "expected a field name";
            if (k == 2 && !c) w = "expected shape (an integer), found '['";
            if (k == 2 && c) w = "expected '[' to start shape";
            check_bad(bomb, o + big, 0, w, -1, "nesting bomb");
        }
    }
    free(bomb);

    /* valid corner cases */
    const char *good[] = {"{}", "{}      ", " \t\r\n{ } ", "{\"__metadata__\":{}}", "{\"\":" T1 "}",
                          "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},\"b\":" T1
                          ",\"c\":{\"dtype\":\"I32\",\"shape\":[3,0],\"data_offsets\":[4,4]}}",
                          "{\"a\\/\\b\\f\\n\\r\\t\\\"\\\\\\u00e9\\uD83D\\uDE00\":" T1 "}"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t n;
        uint8_t *img = image(good[i], strlen(good[i]), 4, &n);
        tg_safetensors *f = NULL;
        tg_status st = parse_exact(img, n, &f);
        CHECK(st == TG_OK, "good case %zu: %s", i, tg_last_error());
        if (i == 6 && f) CHECK(strcmp(f->t[0].name, "a/\b\f\n\r\t\"\\\xc3\xa9\xf0\x9f\x98\x80") == 0, "escapes decoded");
        tg_safetensors_free(f);
        free(img);
    }
}

/* The 8-byte length prefix itself. */
static void header_length(void) {
    uint8_t b[24] = {0};
    for (size_t n = 0; n < 8; n++) {
        tg_safetensors *f = NULL;
        tg_status st = parse_exact(b, n, &f);
        CHECK(st == TG_ERR_FORMAT && strstr(tg_last_error(), "byte 0: the file is") &&
                  strstr(tg_last_error(), "too short"),
              "%zu-byte file: %s", n, tg_last_error());
    }
    const uint64_t lens[] = {1ull << 63, UINT64_MAX, 17, 1ull << 40};
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 8; i++) b[i] = (uint8_t)(lens[k] >> (8 * i));
        memcpy(b + 8, "{}", 2);
        tg_safetensors *f = NULL;
        tg_status st = parse_exact(b, 24, &f);
        char want[96];
        snprintf(want, sizeof want, "byte 0: header length %llu runs past the end of the file (24 bytes)",
                 (unsigned long long)lens[k]);
        CHECK(st == TG_ERR_FORMAT && strstr(tg_last_error(), want), "length %llu: %s", (unsigned long long)lens[k],
              tg_last_error());
    }
    /* the same through a real file */
    const char *p = tmp_path("huge_len.safetensors");
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((1ull << 63) >> (8 * i));
    write_whole_file(p, b, 24);
    tg_safetensors *f = NULL;
    char want[300];
    snprintf(want, sizeof want, "safetensors: %s: byte 0: header length 9223372036854775808 runs past", p);
    CHECK_ERR(tg_safetensors_read(p, &f), TG_ERR_FORMAT, want);
    CHECK_ERR(tg_safetensors_read(tmp_path("does_not_exist"), &f), TG_ERR_IO, "cannot open: No such file or directory");
    CHECK_ERR(tg_safetensors_read(dir, &f), TG_ERR_IO, "not a regular file");
    CHECK_ERR(tg_safetensors_read(NULL, &f), TG_ERR_ARG, "path is NULL");
    CHECK(f == NULL, "failed read left a result");
}

/* A small valid file cut at every byte: each cut is an error (the header
 * length no longer fits, or the last tensor's data runs past the end). */
static void truncations(void) {
    float a[3] = {1, 2, 3};
    int32_t b[2] = {4, 5};
    float c = 6;
    tg_st_tensor t[] = {{"a", TG_F32, TG_SHAPE(3), a}, {"bb", TG_I32, TG_SHAPE(1, 2), b}, {"c", TG_F32, TG_SCALAR, &c}};
    const char *meta[] = {"format", "x"};
    const char *p = tmp_path("small.safetensors");
    CHECK_OK(tg_safetensors_write(p, t, 3, meta, 1));
    size_t n = 0;
    uint8_t *img = read_whole_file(p, &n);
    if (!img) return;
    tg_safetensors *f = NULL;
    CHECK(parse_exact(img, n, &f) == TG_OK, "whole file: %s", tg_last_error());
    tg_safetensors_free(f);
    int bad_cuts = 0;
    for (size_t cut = 0; cut < n; cut++) {
        f = NULL;
        tg_status st = parse_exact(img, cut, &f);
        bool ok = st == TG_ERR_FORMAT && strstr(tg_last_error(), ": byte ");
        if (!ok && bad_cuts++ < 5) CHECK(ok, "cut at %zu of %zu: %s '%s'", cut, n, tg_status_name(st), tg_last_error());
        tg_safetensors_free(f);
    }
    CHECK(bad_cuts == 0, "%d of %zu truncations were not errors", bad_cuts, n);
    /* and through real files, a few cuts */
    const char *q = tmp_path("cut.safetensors");
    for (size_t cut = 0; cut < n; cut += 7) {
        write_whole_file(q, img, cut);
        f = NULL;
        CHECK_ERR(tg_safetensors_read(q, &f), TG_ERR_FORMAT, "byte ");
    }

    /* Random corruption of header bytes: any outcome but a crash, and every
     * error names a byte. */
    uint64_t seed = 12345;
    uint8_t *m = malloc(n);
    int errors = 0, unnamed = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(m, img, n);
        int flips = 1 + (int)((seed >> 60) & 3);
        for (int k = 0; k < flips; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = 8 + (size_t)((seed >> 33) % (n - 8 > 0 ? n - 8 : 1));
            static const uint8_t vals[] = {0, 0xff, '"', '\\', '{', '}', '[', ']', ',', ':', '9', '-', ' ', 'e', 0xc3};
            m[pos] = (seed >> 20) & 1 ? vals[(seed >> 8) % sizeof vals] : (uint8_t)(seed >> 40);
        }
        f = NULL;
        tg_status st = parse_exact(m, n, &f);
        if (st != TG_OK) {
            errors++;
            unnamed += !strstr(tg_last_error(), ": byte ");
        }
        tg_safetensors_free(f);
    }
    CHECK(errors > 10000 && unnamed == 0, "corruption: %d errors, %d without a byte offset", errors, unnamed);
    free(m);
    free(img);
}

/* ---- writer -------------------------------------------------------------- */

static void writer_errors(void) {
    float x[4] = {1, 2, 3, 4};
    tg_st_tensor t[] = {{"x", TG_F32, TG_SHAPE(4), x}, {"y", TG_F32, TG_SHAPE(2, 2), x}};
    const char *p = tmp_path("w.safetensors");
    const char *missing = missing_dir_path();
    char want[1000];
    snprintf(want, sizeof want, "safetensors: %s: cannot create '%s.tmp.%ld.", missing, missing, (long)getpid());
    CHECK_ERR(tg_safetensors_write(missing, t, 2, NULL, 0), TG_ERR_IO, want);
    CHECK(strstr(tg_last_error(), "': No such file or directory"), "%s", tg_last_error());
    CHECK(!file_exists(missing), "a file appeared at a path in a missing directory");

    tg_st_tensor dup[] = {{"x", TG_F32, TG_SHAPE(4), x}, {"x", TG_F32, TG_SHAPE(4), x}};
    CHECK_ERR(tg_safetensors_write(p, dup, 2, NULL, 0), TG_ERR_NAME, "tensor 'x' is given twice");
    tg_st_tensor bad_dt[] = {{"x", TG_BOOL, TG_SHAPE(4), x}};
    CHECK_ERR(tg_safetensors_write(p, bad_dt, 1, NULL, 0), TG_ERR_ARG, "only F32 and I32 can be written");
    tg_st_tensor bad_shape[] = {{"x", TG_F32, TG_SHAPE(-1), x}};
    CHECK_ERR(tg_safetensors_write(p, bad_shape, 1, NULL, 0), TG_ERR_SHAPE, "bad shape [-1]");
    tg_st_tensor no_data[] = {{"x", TG_F32, TG_SHAPE(4), NULL}};
    CHECK_ERR(tg_safetensors_write(p, no_data, 1, NULL, 0), TG_ERR_ARG, "has no data");
    tg_st_tensor reserved[] = {{"__metadata__", TG_F32, TG_SHAPE(4), x}};
    CHECK_ERR(tg_safetensors_write(p, reserved, 1, NULL, 0), TG_ERR_NAME, "'__metadata__' cannot name a tensor");
    tg_st_tensor bad_utf8[] = {{"x\xff", TG_F32, TG_SHAPE(4), x}};
    CHECK_ERR(tg_safetensors_write(p, bad_utf8, 1, NULL, 0), TG_ERR_ARG, "is not valid UTF-8");
    const char *dup_meta[] = {"k", "1", "k", "2"};
    CHECK_ERR(tg_safetensors_write(p, t, 2, dup_meta, 2), TG_ERR_NAME, "metadata key 'k' is given twice");
    const char *null_meta[] = {"k", NULL};
    CHECK_ERR(tg_safetensors_write(p, t, 2, null_meta, 1), TG_ERR_ARG, "metadata value 0 is missing");
    CHECK(!file_exists(p), "a rejected write created the file");

    /* A write that fails part-way (the file size limit: EFBIG) leaves the
     * previous file intact and no temporary behind. */
    CHECK_OK(tg_safetensors_write(p, t, 2, NULL, 0));
    size_t n0 = 0, n1 = 0;
    uint8_t *before = read_whole_file(p, &n0);
    enum { BIG = 1 << 16 };
    float *big = calloc(BIG, sizeof(float));
    tg_st_tensor tb[] = {{"big", TG_F32, TG_SHAPE(BIG), big}};
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    tg_status st = tg_safetensors_write(p, tb, 1, NULL, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CHECK(st == TG_ERR_IO && strstr(tg_last_error(), "cannot write") && strstr(tg_last_error(), "File too large"),
          "write past the size limit: %s '%s'", tg_status_name(st), tg_last_error());
    uint8_t *after = read_whole_file(p, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0, "a failed write changed the existing file");
    CHECK(stray_tmp_files() == 0, "a failed write left its temporary file");
    free(before);
    free(after);
    free(big);
}

/* ---- sessions ------------------------------------------------------------ */

enum { B = 8, IN = 3, HID = 16, OUT = 2 };
typedef struct {
    tg_linear l1, l2;
} net;

static tg_tensor mlp_loss(tg_graph *g, void *u) {
    net *n = u;
    tg_tensor h = tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x")));
    return tg_mse(tg_linear_fwd(g, &n->l2, h), tg_input(g, "y"));
}

typedef struct {
    tg_model *m;
    net n;
    tg_session *s;
} run;

static bool open_run(run *r, tg_optim o, uint64_t seed, bool freeze) {
    r->m = tg_model_new();
    r->n.l1 = tg_linear_new(r->m, "l1", IN, HID, true);
    r->n.l2 = tg_linear_new(r->m, "l2", HID, OUT, true);
    if (freeze) tg_model_freeze(r->m, r->n.l2.b);
    static const tg_input_decl in[] = {{"x", TG_F32, {2, {B, IN}}}, {"y", TG_F32, {2, {B, OUT}}}};
    tg_train_spec spec = {.model = r->m, .loss = mlp_loss, .user = &r->n, .inputs = in, .n_inputs = 2,
                          .optim = o, .seed = seed, .threads = 2};
    r->s = NULL;
    tg_status st = tg_session_new(&spec, &r->s);
    CHECK(st == TG_OK, "tg_session_new: %s", tg_last_error());
    return st == TG_OK;
}

static void close_run(run *r) {
    tg_session_free(r->s);
    tg_model_free(r->m);
    r->s = NULL;
    r->m = NULL;
}

/* The data of step t (from 1): the same whoever runs it. */
static tg_status step_at(tg_session *s, int64_t t, float *loss) {
    float x[B * IN], y[B * OUT];
    for (int i = 0; i < B * IN; i++) x[i] = (float)(tg_hash32((uint32_t)(t * 1000 + i)) % 2000) / 1000.0f - 1.0f;
    for (int b = 0; b < B; b++) {
        y[b * OUT] = sinf(2 * x[b * IN]) + x[b * IN + 1] * x[b * IN + 2];
        y[b * OUT + 1] = x[b * IN + 1] - 0.5f * x[b * IN];
    }
    return tg_session_step(s, (tg_feed[]){TG_FEED("x", x, B * IN), TG_FEED("y", y, B * OUT)}, 2, loss);
}

/* Every param, in model order, as one array. */
static int64_t snapshot(run *r, float *out) {
    int64_t o = 0;
    for (int p = 0; p < tg_model_param_count(r->m); p++) {
        int64_t n = tg_shape_numel(tg_model_param_shape(r->m, p));
        if (out) tg_session_get_param(r->s, tg_model_param_name(r->m, p), out + o, n);
        o += n;
    }
    return o;
}

static void params_files(void) {
    run a, b;
    if (!open_run(&a, tg_adam(tg_lr_constant(1e-2f)), 1, false)) return;
    if (!open_run(&b, tg_adam(tg_lr_constant(1e-2f)), 2, false)) return;
    for (int t = 1; t <= 3; t++) CHECK_OK(step_at(a.s, t, NULL));
    const char *p = tmp_path("params.safetensors");
    CHECK_OK(tg_session_save_params(a.s, p));

    /* The file: every param, F32, its shape, in model order, nothing else. */
    tg_safetensors *f = NULL;
    CHECK_OK(tg_safetensors_read(p, &f));
    CHECK(f && tg_safetensors_count(f) == 4, "params file has %d tensors", tg_safetensors_count(f));
    for (int i = 0; f && i < 4 && i < tg_safetensors_count(f); i++) {
        const tg_st_tensor *t = tg_safetensors_tensor(f, i);
        tg_shape want = tg_model_param_shape(a.m, i);
        CHECK(strcmp(t->name, tg_model_param_name(a.m, i)) == 0 && t->dtype == TG_F32 && t->shape.ndim == want.ndim &&
                  t->shape.d[0] == want.d[0],
              "params file tensor %d is '%s'", i, t->name);
    }
    tg_safetensors_free(f);

    int64_t np = snapshot(&a, NULL);
    float *pa = malloc(sizeof(float) * (size_t)np), *pb = malloc(sizeof(float) * (size_t)np),
          *pb0 = malloc(sizeof(float) * (size_t)np);
    snapshot(&a, pa);
    snapshot(&b, pb0);
    CHECK(memcmp(pa, pb0, sizeof(float) * (size_t)np) != 0, "different seeds gave the same params");

    /* Strict: each bad file is refused and changes nothing. */
    float w1[IN * HID], b1[HID], w2[HID * OUT], b2[OUT];
    CHECK_OK(tg_session_get_param(a.s, "l1.W", w1, IN * HID));
    CHECK_OK(tg_session_get_param(a.s, "l1.b", b1, HID));
    CHECK_OK(tg_session_get_param(a.s, "l2.W", w2, HID * OUT));
    CHECK_OK(tg_session_get_param(a.s, "l2.b", b2, OUT));
    int32_t ib[HID] = {0};
    const char *q = tmp_path("bad_params.safetensors");
    struct {
        tg_st_tensor t[5];
        int n;
        tg_status st;
        const char *want;
    } cases[] = {
        {{{"l1.W", TG_F32, TG_SHAPE(IN, HID), w1}, {"l1.b", TG_F32, TG_SHAPE(HID), b1}, {"l2.W", TG_F32, TG_SHAPE(HID, OUT), w2}},
         3, TG_ERR_NAME, "missing tensor 'l2.b'"},
        {{{"l1.W", TG_F32, TG_SHAPE(IN, HID), w1}, {"l1.b", TG_F32, TG_SHAPE(HID), b1}, {"l2.W", TG_F32, TG_SHAPE(HID, OUT), w2},
          {"l2.b", TG_F32, TG_SHAPE(OUT), b2}, {"l3.W", TG_F32, TG_SHAPE(OUT), b2}},
         5, TG_ERR_NAME, "unknown tensor 'l3.W'"},
        {{{"l1.W", TG_F32, TG_SHAPE(HID, IN), w1}, {"l1.b", TG_F32, TG_SHAPE(HID), b1}, {"l2.W", TG_F32, TG_SHAPE(HID, OUT), w2},
          {"l2.b", TG_F32, TG_SHAPE(OUT), b2}},
         4, TG_ERR_SIZE, "tensor 'l1.W' has shape [16,3], the session's is [3,16]"},
        {{{"l1.W", TG_F32, TG_SHAPE(IN * HID), w1}, {"l1.b", TG_F32, TG_SHAPE(HID), b1}, {"l2.W", TG_F32, TG_SHAPE(HID, OUT), w2},
          {"l2.b", TG_F32, TG_SHAPE(OUT), b2}},
         4, TG_ERR_SIZE, "tensor 'l1.W' has shape [48], the session's is [3,16]"},
        {{{"l1.W", TG_F32, TG_SHAPE(IN, HID), w1}, {"l1.b", TG_I32, TG_SHAPE(HID), ib}, {"l2.W", TG_F32, TG_SHAPE(HID, OUT), w2},
          {"l2.b", TG_F32, TG_SHAPE(OUT), b2}},
         4, TG_ERR_FORMAT, "tensor 'l1.b' is i32, the session's is f32"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        CHECK_OK(tg_safetensors_write(q, cases[k].t, cases[k].n, NULL, 0));
        char want[400];
        snprintf(want, sizeof want, "tg_session_load_params: %s: %s", q, cases[k].want);
        CHECK_ERR(tg_session_load_params(b.s, q), cases[k].st, want);
        snapshot(&b, pb);
        CHECK(memcmp(pb, pb0, sizeof(float) * (size_t)np) == 0, "case %zu: a refused load changed params", k);
    }
    /* a full checkpoint is not a weights file */
    const char *ck = tmp_path("full.safetensors");
    CHECK_OK(tg_session_save(a.s, ck));
    CHECK_ERR(tg_session_load_params(b.s, ck), TG_ERR_NAME,
              "unknown tensor 'opt.l1.W.m' (the file is a full checkpoint: load it with tg_session_load)");
    /* a malformed file: the reader's message, with the byte */
    size_t n = 0;
    uint8_t *img = read_whole_file(p, &n);
    if (img && n > 20) {
        img[8] = '?';
        write_whole_file(q, img, n);
        CHECK_ERR(tg_session_load_params(b.s, q), TG_ERR_FORMAT, "tg_session_load_params: safetensors: ");
        CHECK(strstr(tg_last_error(), ": byte "), "no byte offset in '%s'", tg_last_error());
    }
    free(img);
    CHECK_ERR(tg_session_load_params(b.s, tmp_path("nothing_here")), TG_ERR_IO, "cannot open");
    snapshot(&b, pb);
    CHECK(memcmp(pb, pb0, sizeof(float) * (size_t)np) == 0, "a refused load changed params");
    CHECK(tg_session_step_count(b.s) == 0, "a refused load changed the step count");

    /* The good file loads bit for bit. */
    CHECK_OK(tg_session_load_params(b.s, p));
    snapshot(&b, pb);
    CHECK(memcmp(pa, pb, sizeof(float) * (size_t)np) == 0, "loaded params differ from the saved ones");
    CHECK(tg_session_step_count(b.s) == 0, "load_params must not change the step count");
    CHECK_ERR(tg_session_save_params(a.s, missing_dir_path()), TG_ERR_IO, "No such file or directory");
    free(pa);
    free(pb);
    free(pb0);
    close_run(&a);
    close_run(&b);
}

static tg_tensor mlp_fwd(tg_graph *g, void *u) {
    net *n = u;
    return tg_linear_fwd(g, &n->l2, tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x"))));
}

/* A forward session shares its base's params: weights files go through it
 * (before or after it ever ran); full checkpoints load whole only into a
 * training session (tests/test_session_types.sh checks tg_session_load
 * takes no forward session at compile time), and their params into a
 * forward session. */
static void forward_sessions(void) {
    run a, b;
    if (!open_run(&a, tg_adam(tg_lr_constant(1e-2f)), 1, false)) return;
    if (!open_run(&b, tg_adam(tg_lr_constant(1e-2f)), 2, false)) return;
    for (int t = 1; t <= 2; t++) CHECK_OK(step_at(a.s, t, NULL));
    tg_input_decl fin[] = {{"x", TG_F32, {2, {TG_BATCH, IN}}}};
    tg_forward *fa = NULL, *fb = NULL;
    CHECK_OK(tg_forward_attach(a.s, &(tg_forward_spec){.fn = mlp_fwd, .user = &a.n, .inputs = fin, .n_inputs = 1}, &fa));
    CHECK_OK(tg_forward_attach(b.s, &(tg_forward_spec){.fn = mlp_fwd, .user = &b.n, .inputs = fin, .n_inputs = 1}, &fb));
    if (!fa || !fb) return;
    const char *p = tmp_path("fwd.safetensors"), *q = tmp_path("base.safetensors");
    CHECK_OK(tg_forward_save_params(fa, p));
    CHECK_OK(tg_session_save_params(a.s, q));
    size_t n1 = 0, n2 = 0;
    uint8_t *b1 = read_whole_file(p, &n1), *b2 = read_whole_file(q, &n2);
    CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "a forward session saved other params than its base");
    free(b1);
    free(b2);
    CHECK_OK(tg_forward_load_params(fb, p)); /* lands in b's params */
    int64_t np = snapshot(&a, NULL);
    float *pa = malloc(sizeof(float) * (size_t)np), *pb = malloc(sizeof(float) * (size_t)np);
    snapshot(&a, pa);
    snapshot(&b, pb);
    CHECK(memcmp(pa, pb, sizeof(float) * (size_t)np) == 0, "load_params through a forward session missed its base");
    float x[2 * IN] = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f}, ya[2 * OUT], yb[2 * OUT];
    CHECK_OK(tg_forward_run(fa, 2, (tg_feed[]){TG_FEED("x", x, 2 * IN)}, 1));
    CHECK_OK(tg_forward_run(fb, 2, (tg_feed[]){TG_FEED("x", x, 2 * IN)}, 1));
    CHECK_OK(tg_forward_output(fa, ya, 2 * OUT));
    CHECK_OK(tg_forward_output(fb, yb, 2 * OUT));
    CHECK(memcmp(ya, yb, sizeof ya) == 0, "same params, different outputs");

    /* A full checkpoint into a forward session: its params, its optimizer
     * state skipped on purpose; a lone forward session of the same model
     * gives the training session's outputs. */
    const char *ck = tmp_path("fwd_full.safetensors");
    CHECK_OK(step_at(a.s, 3, NULL));
    CHECK_OK(tg_session_save(a.s, ck));
    tg_forward *lone = NULL;
    CHECK_OK(tg_forward_new(&(tg_forward_spec){.fn = mlp_fwd, .user = &b.n, .inputs = fin, .n_inputs = 1,
                                               .model = b.m, .seed = 5}, &lone));
    if (lone) {
        CHECK_OK(tg_forward_load_params(lone, ck));
        float yl[2 * OUT];
        CHECK_OK(tg_forward_run(fa, 2, (tg_feed[]){TG_FEED("x", x, 2 * IN)}, 1));
        CHECK_OK(tg_forward_run(lone, 2, (tg_feed[]){TG_FEED("x", x, 2 * IN)}, 1));
        CHECK_OK(tg_forward_output(fa, ya, 2 * OUT));
        CHECK_OK(tg_forward_output(lone, yl, 2 * OUT));
        CHECK(memcmp(ya, yl, sizeof ya) == 0, "a forward session loaded a full checkpoint's params wrong");
    }
    tg_forward_free(lone);
    /* another model's checkpoint: the message says what to do */
    tg_model *other = tg_model_new();
    net on;
    on.l1 = tg_linear_new(other, "l1", IN, HID + 1, true);
    on.l2 = tg_linear_new(other, "l2", HID + 1, OUT, true);
    CHECK_OK(tg_forward_new(&(tg_forward_spec){.fn = mlp_fwd, .user = &on, .inputs = fin, .n_inputs = 1,
                                               .model = other}, &lone));
    if (lone)
        CHECK_ERR(tg_forward_load_params(lone, ck), TG_ERR_SIZE,
                  "tensor 'l1.W' has shape [3,16], the session's is [3,17] (the file holds another model's params: "
                  "make this session's model as the one that saved it)");
    tg_forward_free(lone);
    tg_model_free(other);
    /* a training session still takes a full checkpoint whole, or not at all */
    CHECK_ERR(tg_session_load_params(b.s, ck), TG_ERR_NAME, "(the file is a full checkpoint: load it with tg_session_load)");
    free(pa);
    free(pb);
    tg_forward_free(fa);
    tg_forward_free(fb);
    close_run(&a);
    close_run(&b);
}

/* Full checkpoints refused for the wrong session or a damaged file. */
static void checkpoint_errors(void) {
    run a, b, c;
    tg_optim adam = tg_adam(tg_lr_linear(1e-2f, 1e-3f, 20));
    if (!open_run(&a, adam, 7, false)) return;
    if (!open_run(&b, adam, 8, false)) return;
    if (!open_run(&c, tg_sgd(tg_lr_constant(1e-2f), 0.9f, false, 0), 9, false)) return;
    for (int t = 1; t <= 4; t++) CHECK_OK(step_at(a.s, t, NULL));
    const char *p = tmp_path("ck.safetensors"), *q = tmp_path("ck_bad.safetensors");
    CHECK_OK(tg_session_save(a.s, p));

    /* What the file holds. */
    tg_safetensors *f = NULL;
    CHECK_OK(tg_safetensors_read(p, &f));
    if (!f) return;
    static const char *names[] = {"l1.W", "l1.b", "l2.W", "l2.b", "opt.l1.W.m", "opt.l1.W.v", "opt.l1.b.m",
                                  "opt.l1.b.v", "opt.l2.W.m", "opt.l2.W.v", "opt.l2.b.m", "opt.l2.b.v"};
    CHECK(tg_safetensors_count(f) == 12, "checkpoint holds %d tensors", tg_safetensors_count(f));
    for (int i = 0; i < 12; i++) CHECK(tg_safetensors_find(f, names[i]), "checkpoint lacks '%s'", names[i]);
    CHECK(!tg_safetensors_find(f, "opt.hyper") && !tg_safetensors_find(f, "rng.seed"), "per-step leaves saved");
    const char *want_meta[][2] = {{"format", "tensorgrad-checkpoint-2"}, {"step", "4"}, {"lr_start", "0"},
                                  {"seed", "7"}, {"optimizer", "adam"}};
    for (int k = 0; k < 5; k++) {
        const char *v = tg_safetensors_meta(f, want_meta[k][0]);
        CHECK(v && strcmp(v, want_meta[k][1]) == 0, "metadata %s = '%s', want '%s'", want_meta[k][0], v ? v : "(null)",
              want_meta[k][1]);
    }
    const char *lr = tg_safetensors_meta(f, "lr");
    CHECK(lr && strncmp(lr, "linear peak=0.00999999978 final=0.00100000005 ", 46) == 0, "lr metadata '%s'",
          lr ? lr : "(null)");

    int64_t np = snapshot(&b, NULL);
    float *p0 = malloc(sizeof(float) * (size_t)np), *p1 = malloc(sizeof(float) * (size_t)np);
    snapshot(&b, p0);

    /* A copy of the checkpoint with one thing changed: tensors (drop or
     * reshape one) or metadata (replace or drop one value). */
    int nt = tg_safetensors_count(f);
    tg_st_tensor *t = calloc((size_t)nt, sizeof *t);
    const char *meta[2 * 16];
    CHECK(f->n_meta <= 16, "the checkpoint has %d metadata entries (the copy holds 16)", f->n_meta);
    struct {
        const char *drop, *meta_key, *meta_val, *want;
        tg_status st;
    } cases[] = {
        {"opt.l2.W.v", NULL, NULL, "missing tensor 'opt.l2.W.v'", TG_ERR_NAME},
        {NULL, "format", "something-else", "not a full checkpoint (its __metadata__ format is 'something-else'", TG_ERR_FORMAT},
        {NULL, "format", NULL, "not a full checkpoint (its __metadata__ format is missing", TG_ERR_FORMAT},
        {NULL, "step", "12x", "metadata 'step' is '12x', not a non-negative integer", TG_ERR_FORMAT},
        {NULL, "step", "-1", "metadata 'step' is '-1'", TG_ERR_FORMAT},
        {NULL, "step", "99999999999999999999", "metadata 'step' is '99999999999999999999'", TG_ERR_FORMAT},
        {NULL, "seed", NULL, "metadata 'seed' is missing", TG_ERR_FORMAT},
        {NULL, "lr_start", "5", "metadata lr_start 5 is after step 4", TG_ERR_FORMAT},
        {NULL, "optimizer", "sgd", "the checkpoint's optimizer is 'sgd', this session's is 'adam'", TG_ERR_STATE},
        {NULL, "lr", "linear peak=1", "metadata 'lr' is 'linear peak=1', not a schedule", TG_ERR_FORMAT},
        {NULL, "lr", "bogus", "not a schedule", TG_ERR_FORMAT},
        {NULL, "lr", "constant peak=1 final=0 gamma=0 steps=0 every=0 milestones=; constant peak=1 final=0 gamma=0 "
                     "steps=0 every=0 milestones=", "not a schedule", TG_ERR_FORMAT},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int n = 0, nm = 0;
        for (int i = 0; i < nt; i++)
            if (!cases[k].drop || strcmp(tg_safetensors_tensor(f, i)->name, cases[k].drop) != 0)
                t[n++] = *tg_safetensors_tensor(f, i);
        for (int i = 0; i < f->n_meta && nm < 16; i++) {
            bool hit = cases[k].meta_key && strcmp(f->meta[i].key, cases[k].meta_key) == 0;
            if (hit && !cases[k].meta_val) continue;
            meta[2 * nm] = f->meta[i].key;
            meta[2 * nm + 1] = hit ? cases[k].meta_val : f->meta[i].value;
            nm++;
        }
        CHECK_OK(tg_safetensors_write(q, t, n, meta, nm));
        CHECK_ERR(tg_session_load(b.s, q), cases[k].st, cases[k].want);
        snapshot(&b, p1);
        CHECK(memcmp(p0, p1, sizeof(float) * (size_t)np) == 0 && tg_session_step_count(b.s) == 0,
              "case %zu: a refused checkpoint changed the session", k);
    }
    free(t);
    tg_safetensors_free(f);

    /* Formats: versions this library does not read, and a version 2 file
     * whose checksum is gone (its key blanked: the JSON stays valid). */
    const char *fmts[][2] = {{"tensorgrad-checkpoint-3", "is not one this library reads (tensorgrad-checkpoint-1 and 2, "
                                                         "tensorgrad-weights-2): a newer tensorgrad wrote it"},
                             {"tensorgrad-weights-1", "is not one this library reads"},
                             {"tensorgrad-checkpoint-02", "is none this library knows"},
                             {"tensorgrad-notes-2", "is none this library knows"}};
    CHECK_OK(tg_safetensors_read(p, &f));
    for (int k = 0; f && k < 4; k++) {
        const char *meta[2 * 16];
        int nm = 0;
        for (int i = 0; i < f->n_meta && nm < 16; i++, nm++) {
            meta[2 * nm] = f->meta[i].key;
            meta[2 * nm + 1] = strcmp(f->meta[i].key, "format") ? f->meta[i].value : fmts[k][0];
        }
        CHECK_OK(tg_safetensors_write(q, f->t, f->n, meta, nm));
        CHECK_ERR(tg_session_load(b.s, q), TG_ERR_FORMAT, fmts[k][1]);
        CHECK_ERR(tg_session_load_params(b.s, q), TG_ERR_FORMAT, fmts[k][1]);
    }
    tg_safetensors_free(f);
    f = NULL;
    size_t n_img = 0;
    uint8_t *img = read_whole_file(p, &n_img);
    char *key = img ? memmem(img, n_img, "\"tensorgrad_checksum\":\"", 23) : NULL;
    CHECK(key != NULL, "no checksum in a checkpoint");
    if (key) {
        memset(key, ' ', 23 + 16 + 2); /* the key, its value and the comma after it */
        write_whole_file(q, img, n_img);
        CHECK_ERR(tg_session_load(b.s, q), TG_ERR_FORMAT, "the file has no checksum (format 'tensorgrad-checkpoint-2' "
                  "always has one)");
    }
    free(img);
    CHECK_ERR(tg_session_load(c.s, p), TG_ERR_STATE, "the checkpoint's optimizer is 'adam', this session's is 'sgd'");
    const char *wp = tmp_path("weights_only.safetensors");
    CHECK_OK(tg_session_save_params(a.s, wp));
    CHECK_ERR(tg_session_load(b.s, wp), TG_ERR_FORMAT, "a weights-only file loads with tg_session_load_params");
    CHECK_ERR(tg_session_save(a.s, missing_dir_path()), TG_ERR_IO, "tg_session_save: safetensors: ");
    CHECK_ERR(tg_session_load(NULL, p), TG_ERR_ARG, "required");
    CHECK_ERR(tg_session_save(a.s, NULL), TG_ERR_ARG, "required");
    snapshot(&b, p1);
    CHECK(memcmp(p0, p1, sizeof(float) * (size_t)np) == 0 && tg_session_step_count(b.s) == 0,
          "a refused checkpoint changed the session");
    /* and a good one loads */
    CHECK_OK(tg_session_load(b.s, p));
    CHECK(tg_session_step_count(b.s) == 4, "step count after load: %lld", (long long)tg_session_step_count(b.s));
    CHECK(stray_tmp_files() == 0, "temporary files left behind");
    free(p0);
    free(p1);
    close_run(&a);
    close_run(&b);
    close_run(&c);
}

/* Training interrupted at step k (saved, the session thrown away, a fresh
 * one from the same spec but another seed loaded) must continue with the
 * very same losses and params as a run that never stopped. set_lr_at > 0
 * swaps the schedule at that step, before the save. */
static void resume(const char *what, tg_optim o, bool freeze, int N, int k, int set_lr_at, tg_lr new_lr) {
    float *want = calloc((size_t)N + 1, sizeof(float)), *got = calloc((size_t)N + 1, sizeof(float));
    run a, b;
    if (!open_run(&a, o, 42, freeze)) return;
    for (int t = 1; t <= N; t++) {
        if (t == set_lr_at) CHECK_OK(tg_session_set_lr(a.s, new_lr));
        CHECK_OK(step_at(a.s, t, &want[t]));
    }
    int64_t np = snapshot(&a, NULL);
    float *pa = malloc(sizeof(float) * (size_t)np), *pb = malloc(sizeof(float) * (size_t)np);
    snapshot(&a, pa);
    close_run(&a);

    const char *p = tmp_path("resume.safetensors");
    if (!open_run(&a, o, 42, freeze)) return;
    for (int t = 1; t <= k; t++) {
        if (t == set_lr_at) CHECK_OK(tg_session_set_lr(a.s, new_lr));
        CHECK_OK(step_at(a.s, t, &got[t]));
    }
    CHECK_OK(tg_session_save(a.s, p));
    close_run(&a);
    if (!open_run(&b, o, 4242, freeze)) return;
    CHECK_OK(tg_session_load(b.s, p));
    CHECK(tg_session_step_count(b.s) == k, "%s: step count %lld after load, want %d", what,
          (long long)tg_session_step_count(b.s), k);
    /* No random op exists yet to show it in the losses: the seed that drives
     * their per-step stream must come back all the same. */
    CHECK(b.s->b.seed == 42, "%s: seed %llu after load, want 42", what, (unsigned long long)b.s->b.seed);
    for (int t = k + 1; t <= N; t++) CHECK_OK(step_at(b.s, t, &got[t]));
    int diff = 0;
    for (int t = 1; t <= N; t++) {
        if (memcmp(&got[t], &want[t], 4) != 0 && diff++ < 3)
            CHECK(false, "%s: step %d loss %.9g, uninterrupted %.9g", what, t, got[t], want[t]);
    }
    snapshot(&b, pb);
    CHECK(diff == 0 && memcmp(pa, pb, sizeof(float) * (size_t)np) == 0, "%s: %d losses differ, params %s", what, diff,
          memcmp(pa, pb, sizeof(float) * (size_t)np) ? "differ" : "match");
    /* the model must actually learn, or the comparison proves little */
    float first = 0, last = 0;
    for (int t = 1; t <= 5; t++) first += want[t], last += want[N + 1 - t];
    CHECK(last < first, "%s: loss did not fall (%g -> %g over 5 steps)", what, first, last);
    close_run(&b);
    free(pa);
    free(pb);
    free(want);
    free(got);
}

/* A long schedule (12 warmups chained into a multistep with 20 milestones,
 * start_steps here and there) comes back field for field. */
static void lr_roundtrip(void) {
    enum { LINKS = 13, MS = 20 };
    int64_t ms[MS];
    for (int k = 0; k < MS; k++) ms[k] = 3 + k * k;
    tg_lr chain[LINKS];
    chain[LINKS - 1] = tg_lr_multistep(-1.17549435e-38f, 0.333333343f, MS, ms);
    chain[LINKS - 1].start_step = 4;
    for (int k = LINKS - 2; k >= 0; k--) {
        chain[k] = tg_lr_warmup(1e-3f * (float)(k + 1), 10 + k, &chain[k + 1]);
        chain[k].start_step = k % 3;
    }
    run a, b;
    if (!open_run(&a, tg_adam(chain[0]), 1, false)) return;
    if (!open_run(&b, tg_adam(tg_lr_constant(1)), 1, false)) return;
    const char *p = tmp_path("lr.safetensors");
    CHECK_OK(tg_session_save(a.s, p));
    CHECK_OK(tg_session_load(b.s, p));
    const tg_lr *x = a.s->lr, *y = b.s->lr;
    for (int k = 0; k < LINKS; k++, x = x->then, y = y->then) {
        if (!x || !y) {
            CHECK(false, "lr chain %d ends early after load", k);
            break;
        }
        CHECK(x->kind == y->kind && memcmp(&x->peak, &y->peak, 4) == 0 && memcmp(&x->final_lr, &y->final_lr, 4) == 0 &&
                  memcmp(&x->gamma, &y->gamma, 4) == 0 && x->steps == y->steps && x->every == y->every &&
                  x->n_milestones == y->n_milestones && x->start_step == y->start_step &&
                  (!x->n_milestones || memcmp(x->milestones, y->milestones, sizeof(int64_t) * (size_t)x->n_milestones) == 0),
              "lr link %d differs after load", k);
    }
    CHECK(!x && !y, "lr chain lengths differ after load");
    for (int64_t t = 1; t < 400; t += 7)
        CHECK(tg_lr_at(a.s->lr, t) == tg_lr_at(b.s->lr, t), "lr at step %lld differs", (long long)t);
    close_run(&a);
    close_run(&b);
}

/* ---- tensors as users meet them: half precision, other dtypes, memory ---- */

/* The PyTorch-written fixture (make_half_fixture.py): F16 and BF16 read as
 * torch converts them, bit for bit; the other dtypes skipped and listed;
 * the same from the file in memory. */
static void half_fixture(void) {
    size_t size = 0;
    uint8_t *img = read_whole_file(fixture("half_dtypes.safetensors"), &size);
    CHECK(img != NULL, "cannot read the half-precision fixture");
    if (!img) return;
    tg_safetensors *files[2] = {NULL, NULL};
    CHECK_OK(tg_safetensors_read(fixture("half_dtypes.safetensors"), &files[0]));
    CHECK_OK(tg_safetensors_read_mem(img, size, &files[1]));
    memset(img, 0, size); /* the memory reader copied it */
    free(img);
    for (int k = 0; k < 2; k++) {
        tg_safetensors *f = files[k];
        const char *how = k ? "from memory" : "from the file";
        if (!f) continue;
        CHECK(tg_safetensors_count(f) == 8, "%s: %d tensors read, want 8", how, tg_safetensors_count(f));
        const char *names[] = {"w16", "s16", "w16b", "e16b"};
        for (int i = 0; i < 4; i++) {
            char want[32];
            snprintf(want, sizeof want, "expect.%s", names[i]);
            const tg_st_tensor *t = tg_safetensors_find(f, names[i]), *e = tg_safetensors_find(f, want);
            CHECK(t && e && t->dtype == TG_F32 && tg_shape_eq(t->shape, e->shape) &&
                      memcmp(t->data, e->data, 4 * (size_t)tg_shape_numel(e->shape)) == 0,
                  "%s: '%s' is not torch's .float() of it, bit for bit", how, names[i]);
        }
        const tg_st_tensor *w = tg_safetensors_find(f, "w16");
        if (w) {
            const float *v = w->data;
            CHECK(v[4] == 65504.0f && v[6] == 0x1p-24f && isinf(v[8]) && isnan(v[10]) && signbit(v[1]) && v[15] == 2048.0f,
                  "%s: F16 edge values: %g %g %g %g", how, v[4], v[6], v[8], v[15]);
        }
        static const char *skipped[][2] = {{"bn.num_batches_tracked", "I64"}, {"u8", "U8"}, {"f64", "F64"},
                                           {"mask", "BOOL"}, {"fp8", "F8_E4M3"}};
        CHECK(tg_safetensors_skipped_count(f) == 5, "%s: %d skipped, want 5", how, tg_safetensors_skipped_count(f));
        for (int i = 0; i < 5 && tg_safetensors_skipped_count(f) == 5; i++) {
            const char *dt = NULL, *name = tg_safetensors_skipped(f, i, &dt);
            CHECK(name && dt && strcmp(name, skipped[i][0]) == 0 && strcmp(dt, skipped[i][1]) == 0,
                  "%s: skipped %d is %s %s, want %s %s", how, i, name ? name : "NULL", dt ? dt : "NULL", skipped[i][0],
                  skipped[i][1]);
        }
        const char *dt = "x";
        CHECK(!tg_safetensors_skipped(f, 5, &dt) && !dt && !tg_safetensors_find(f, "u8"), "%s: past the skipped list", how);
        tg_safetensors_free(f);
    }
    tg_safetensors *f = (tg_safetensors *)1;
    CHECK_ERR(tg_safetensors_read_mem("\x02\0\0\0\0\0\0\0{}", 9, &f), TG_ERR_FORMAT, "safetensors: (memory): byte 0:");
    CHECK(f == NULL, "a failed read_mem left a pointer");
    CHECK_ERR(tg_safetensors_read_mem(NULL, 4, &f), TG_ERR_ARG, "buf is NULL");
}

/* Every F16 and BF16 bit pattern against the definition, in double. */
static void every_half(void) {
    for (int bf = 0; bf < 2; bf++) {
        const char *hdr = bf ? "{\"h\":{\"dtype\":\"BF16\",\"shape\":[65536],\"data_offsets\":[0,131072]}}"
                             : "{\"h\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[0,131072]}}";
        size_t n;
        uint8_t *img = image(hdr, strlen(hdr), 131072, &n);
        uint8_t *d = img + 8 + strlen(hdr);
        for (int i = 0; i < 65536; i++) d[2 * i] = (uint8_t)i, d[2 * i + 1] = (uint8_t)(i >> 8);
        tg_safetensors *f = NULL;
        CHECK_OK(tg_safetensors_read_mem(img, n, &f));
        free(img);
        const float *v = f ? tg_safetensors_find(f, "h")->data : NULL;
        int bad = 0, first = -1;
        for (int i = 0; v && i < 65536; i++) {
            int sign = i >> 15, e = bf ? (i >> 7) & 0xff : (i >> 10) & 0x1f, m = bf ? i & 0x7f : i & 0x3ff;
            int emax = bf ? 0xff : 0x1f, mbits = bf ? 7 : 10, bias = bf ? 127 : 15;
            double want = e == emax ? (m ? NAN : INFINITY)
                        : e == 0    ? ldexp(m, 1 - bias - mbits)
                                    : ldexp(m + (1 << mbits), e - bias - mbits);
            if (sign) want = -want;
            bool ok = isnan(want) ? isnan(v[i]) : (double)v[i] == want && (signbit(v[i]) != 0) == (sign != 0);
            if (!ok && first < 0) first = i;
            bad += !ok;
        }
        CHECK(v && bad == 0, "%s: %d of 65536 patterns convert wrong (first 0x%04x -> %g)", bf ? "BF16" : "F16", bad,
              first, v && first >= 0 ? v[first] : 0.0);
        tg_safetensors_free(f);
    }
}

/* set_tensor and upload_tensors check the shape, not just the count; a
 * weights file in F16 loads; one with a tensor the reader skips does not,
 * and says what to do. */
static void tensors_into_sessions(void) {
    run a;
    if (!open_run(&a, tg_adam(tg_lr_constant(1e-2f)), 1, false)) return;
    tg_safetensors *d = NULL;
    CHECK_OK(tg_session_download(a.s, &d));
    if (!d) goto done;
    const tg_st_tensor *t = tg_safetensors_tensor(d, 0); /* l1.W [IN, HID] */
    int n = tg_safetensors_count(d);
    CHECK_OK(tg_session_upload_tensors(a.s, t, n));
    CHECK_OK(tg_session_set_tensor(a.s, &t[0]));
    tg_st_tensor tr = t[0];
    tr.shape = TG_SHAPE(HID, IN); /* same count, transposed */
    CHECK_ERR(tg_session_set_tensor(a.s, &tr), TG_ERR_SHAPE,
              "tg_session_set_tensor: param 'l1.W' is [3,16], the tensor is [16,3] (transposed: a Linear W is [in, out]");
    float w[IN * HID];
    CHECK_OK(tg_session_set_param(a.s, "l1.W", t[0].data, IN * HID)); /* the count alone passes */
    tg_st_tensor *c = malloc(sizeof *c * (size_t)(n + 1));
    memcpy(c, t, sizeof *c * (size_t)n);
    c[1].shape = TG_SHAPE(1, HID);
    CHECK_ERR(tg_session_upload_tensors(a.s, c, n), TG_ERR_SHAPE, "param 'l1.b' is [16], the tensor is [1,16]");
    c[1] = t[1];
    c[2].dtype = TG_I32;
    CHECK_ERR(tg_session_upload_tensors(a.s, c, n), TG_ERR_ARG, "param 'l2.W' is f32, the tensor is i32");
    c[2] = t[1];
    CHECK_ERR(tg_session_upload_tensors(a.s, c, n), TG_ERR_NAME, "param 'l1.b' given twice");
    CHECK_ERR(tg_session_upload_tensors(a.s, c, n - 1), TG_ERR_NAME, "given twice");
    CHECK_ERR(tg_session_upload_tensors(a.s, t, n - 1), TG_ERR_NAME, "param 'l2.b' is missing");
    c[2] = t[2];
    c[n] = t[0];
    c[n].name = "l9.W";
    CHECK_ERR(tg_session_upload_tensors(a.s, c + 1, n), TG_ERR_NAME, "no param named 'l9.W'");
    free(c);
    /* The params as a BF16 file (each value cut to BF16 by hand): load_params takes it, converted. */
    size_t hl;
    char hdr[512];
    int o = 0, k = snprintf(hdr, sizeof hdr, "{");
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += tg_shape_numel(t[i].shape);
    uint8_t *data = malloc((size_t)total * 2);
    float *want = malloc((size_t)total * 4);
    for (int i = 0; i < n; i++) {
        char sh[64];
        int64_t m = tg_shape_numel(t[i].shape);
        k += snprintf(hdr + k, sizeof hdr - (size_t)k, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":%s,\"data_offsets\":[%d,%lld]}",
                      i ? "," : "", t[i].name, tg_shape_str(t[i].shape, sh, sizeof sh), 2 * o, (long long)(2 * (o + m)));
        for (int64_t e = 0; e < m; e++, o++) {
            uint32_t bits;
            memcpy(&bits, (const float *)t[i].data + e, 4);
            data[2 * o] = (uint8_t)(bits >> 16), data[2 * o + 1] = (uint8_t)(bits >> 24);
            bits &= 0xffff0000u;
            memcpy(&want[o], &bits, 4);
        }
    }
    k += snprintf(hdr + k, sizeof hdr - (size_t)k, "}");
    hl = (size_t)k;
    size_t sz;
    uint8_t *img = image(hdr, hl, (size_t)total * 2, &sz);
    memcpy(img + 8 + hl, data, (size_t)total * 2);
    const char *p = tmp_path("bf16_params.safetensors");
    write_whole_file(p, img, sz);
    CHECK_OK(tg_session_load_params(a.s, p));
    CHECK_OK(tg_session_get_param(a.s, "l1.W", w, IN * HID));
    CHECK(memcmp(w, want, sizeof w) == 0, "a BF16 weights file did not load as its values");
    /* plus an I64 counter: the strict load refuses it and names the way round */
    char hdr2[600];
    snprintf(hdr2, sizeof hdr2, "%.*s,\"steps\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[%lld,%lld]}}",
             (int)hl - 1, hdr, (long long)total * 2, (long long)total * 2 + 8);
    free(img);
    img = image(hdr2, strlen(hdr2), (size_t)total * 2 + 8, &sz);
    memcpy(img + 8 + strlen(hdr2), data, (size_t)total * 2);
    write_whole_file(p, img, sz);
    CHECK_ERR(tg_session_load_params(a.s, p), TG_ERR_NAME,
              "unknown tensor 'steps' (I64, not read; to load the others, read the file with tg_safetensors_read");
    tg_safetensors *f = NULL;
    CHECK_OK(tg_safetensors_read(p, &f));
    if (f) CHECK_OK(tg_session_upload_tensors(a.s, tg_safetensors_tensor(f, 0), tg_safetensors_count(f)));
    tg_safetensors_free(f);
    free(img);
    free(data);
    free(want);
done:
    tg_safetensors_free(d);
    close_run(&a);
}

/* Files an earlier release wrote (tests/fixtures/make_checkpoint_v1.sh, at
 * checkpoint format 1) still load: the full checkpoint into a session of
 * the same spec, with its step, schedule position, seed, schedule, params
 * and optimizer state; the weights file into a training and a forward
 * session. */
static tg_tensor v1_fwd(tg_graph *g, void *u) {
    v1_net *n = u;
    return tg_linear_fwd(g, &n->l2, tg_tanh(tg_linear_fwd(g, &n->l1, tg_input(g, "x"))));
}

static void v1_fixtures(void) {
    v1_net n;
    tg_session *s = v1_session(&n, 99);
    CHECK(s != NULL, "the fixture's session: %s", tg_last_error());
    if (!s) return;
    const char *ck = fixture("checkpoint_v1.safetensors");
    tg_safetensors *f = NULL;
    CHECK_OK(tg_safetensors_read(ck, &f));
    CHECK(f && tg_safetensors_meta(f, "format") && strcmp(tg_safetensors_meta(f, "format"), "tensorgrad-checkpoint-1") == 0,
          "the fixture is not of format 1");
    CHECK_OK(tg_session_load(s, ck));
    CHECK(tg_session_step_count(s) == V1_STEPS && s->lr_start == V1_SET_LR_AFTER && tg_session_seed(s) == V1_SEED,
          "after loading format 1: step %lld, lr_start %lld, seed %llu", (long long)tg_session_step_count(s),
          (long long)s->lr_start, (unsigned long long)tg_session_seed(s));
    tg_lr later = v1_later_lr();
    for (int64_t t = 1; t < 12; t++)
        CHECK(tg_lr_at(s->lr, t) == tg_lr_at(&later, t), "the loaded schedule differs at step %lld", (long long)t);
    /* Saved again (in the current format), every tensor is the fixture's, bit for bit. */
    const char *again = tmp_path("v1_again.safetensors");
    CHECK_OK(tg_session_save(s, again));
    tg_safetensors *g = NULL;
    CHECK_OK(tg_safetensors_read(again, &g));
    CHECK(f && g && tg_safetensors_count(f) == tg_safetensors_count(g), "tensor counts differ after loading format 1");
    for (int i = 0; f && g && i < tg_safetensors_count(f); i++) {
        const tg_st_tensor *a = tg_safetensors_tensor(f, i), *b = tg_safetensors_find(g, a->name);
        CHECK(b && tg_shape_eq(a->shape, b->shape) &&
                  memcmp(a->data, b->data, (size_t)tg_st_nbytes(a->dtype, a->shape)) == 0,
              "tensor '%s' differs after loading format 1", a->name);
    }
    tg_safetensors_free(g);
    for (int64_t t = V1_STEPS + 1; t <= V1_STEPS + 2; t++) CHECK_OK(v1_step(s, t));
    /* Format 1 as 0.4 wrote it, without the data checksum, loads; a flipped
     * bit in the data of one with the checksum does not. */
    tg_safetensors *h = NULL;
    CHECK_OK(tg_safetensors_read(ck, &h));
    if (h) {
        const char *meta[32];
        int nm = 0;
        for (int i = 0; i < h->n_meta && nm < 16; i++)
            if (strcmp(h->meta[i].key, "checksum") != 0) meta[2 * nm] = h->meta[i].key, meta[2 * nm + 1] = h->meta[i].value, nm++;
        const char *old = tmp_path("v1_no_checksum.safetensors");
        CHECK_OK(tg_safetensors_write(old, h->t, h->n, meta, nm));
        CHECK_OK(tg_session_load(s, old));
        CHECK(tg_session_step_count(s) == V1_STEPS, "format 1 without its checksum: step %lld",
              (long long)tg_session_step_count(s));
    }
    tg_safetensors_free(h);
    size_t size = 0;
    uint8_t *img = read_whole_file(ck, &size);
    if (img && size > 16) {
        img[size - 5] ^= 0x04;
        const char *flipped = tmp_path("v1_flipped.safetensors");
        write_whole_file(flipped, img, size);
        CHECK_ERR(tg_session_load(s, flipped), TG_ERR_FORMAT, "the data section does not match its checksum");
    }
    free(img);

    /* The weights file, into a training session and a forward one. */
    const char *w = fixture("weights_v1.safetensors");
    CHECK_OK(tg_session_load_params(s, w));
    float l1w[V1_IN * V1_HID];
    CHECK_OK(tg_session_get_param(s, "l1.W", l1w, V1_IN * V1_HID));
    const tg_st_tensor *want = f ? tg_safetensors_find(f, "l1.W") : NULL;
    CHECK(want && memcmp(l1w, want->data, sizeof l1w) == 0, "the weights file of format 1 loaded other values");
    tg_input_decl fin[] = {{"x", TG_F32, {2, {TG_BATCH, V1_IN}}}};
    tg_forward *fw = NULL;
    CHECK_OK(tg_forward_new(&(tg_forward_spec){.fn = v1_fwd, .user = &n, .inputs = fin, .n_inputs = 1, .model = n.m}, &fw));
    CHECK_OK(tg_forward_load_params(fw, w));
    tg_forward_free(fw);
    tg_safetensors_free(f);
    tg_session_free(s);
    tg_model_free(n.m);
}

static void resumes(void) {
    const int N = 30, k = 11;
    resume("adam, linear lr", tg_adam(tg_lr_linear(2e-2f, 2e-3f, N)), false, N, k, 0, tg_lr_constant(0));
    resume("adam, resume at step 1", tg_adam(tg_lr_linear(2e-2f, 2e-3f, N)), false, N, 1, 0, tg_lr_constant(0));
    static const tg_lr cosine = {.kind = TG_LR_COSINE, .peak = 3e-2f, .final_lr = 1e-3f, .steps = 25};
    tg_optim adamw = tg_adamw(tg_lr_warmup(3e-2f, 5, &cosine), 0.05f);
    adamw.clip_grad_norm = 0.5f;
    resume("adamw, warmup+cosine, clip, a frozen param", adamw, true, N, k, 0, tg_lr_constant(0));
    tg_optim sgd = tg_sgd(tg_lr_staircase(0.1f, 0.7f, 4), 0.9f, true, 1e-3f);
    resume("sgd nesterov, staircase", sgd, false, N, k, 0, tg_lr_constant(0));
    resume("sgd plain", tg_sgd(tg_lr_constant(0.3f), 0, false, 0), false, N, k, 0, tg_lr_constant(0));
    int64_t ms[] = {14, 20};
    resume("adam, set_lr before the save", tg_adam(tg_lr_linear(2e-2f, 2e-3f, N)), false, N, k, 6,
           tg_lr_multistep(1e-2f, 0.5f, 2, ms));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tg_st_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    roundtrip();
    reference_fixture("reference.safetensors");
    reference_fixture("reference_utf8.safetensors");
    hostile_headers();
    header_length();
    truncations();
    writer_errors();
    params_files();
    forward_sessions();
    checkpoint_errors();
    lr_roundtrip();
    resumes();
    half_fixture();
    every_half();
    tensors_into_sessions();
    v1_fixtures();
    /* clean up the scratch directory */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
    return check_summary("test_safetensors");
}
