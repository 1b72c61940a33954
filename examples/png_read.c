/* A PNG reader for the photographs the examples fit: 8-bit greyscale, grey
 * with alpha, RGB or RGBA, not interlaced, returned as RGB (alpha dropped).
 * It carries its own inflate (RFC 1951: stored, fixed and dynamic Huffman
 * blocks, decoded canonically one bit at a time, as in zlib's puff) and
 * checks the zlib stream's Adler-32; chunk CRCs are not checked. Every
 * error names the byte offset in the file or in the compressed stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

/* ---- inflate ------------------------------------------------------------ */

typedef struct {
    const uint8_t *in;
    size_t n, pos;   /* input bytes, next byte */
    uint32_t bits;   /* bit buffer, LSB first */
    int nbits;
    uint8_t *out;
    size_t cap, len; /* output room and bytes written */
    const char *err;
} inflater;

static int bits(inflater *z, int need) {
    while (z->nbits < need) {
        if (z->pos >= z->n) {
            z->err = "compressed data ends early";
            return -1;
        }
        z->bits |= (uint32_t)z->in[z->pos++] << z->nbits;
        z->nbits += 8;
    }
    int v = (int)(z->bits & ((1u << need) - 1));
    z->bits >>= need;
    z->nbits -= need;
    return v;
}

/* A canonical Huffman code: how many codes of each length, and the symbols in code order. */
typedef struct {
    short count[16], symbol[320];
} huffman;

/* Returns 0, or -1 for an over-subscribed set of lengths. An incomplete code
 * is allowed (a single distance code is legal); decoding then fails on a
 * missing code. */
static int build(huffman *h, const uint8_t *len, int n) {
    short offs[16];
    memset(h->count, 0, sizeof h->count);
    for (int s = 0; s < n; s++) h->count[len[s]]++;
    int left = 1;
    for (int l = 1; l < 16; l++) {
        left = 2 * left - h->count[l];
        if (left < 0) return -1;
    }
    offs[1] = 0;
    for (int l = 1; l < 15; l++) offs[l + 1] = (short)(offs[l] + h->count[l]);
    for (int s = 0; s < n; s++)
        if (len[s]) h->symbol[offs[len[s]]++] = (short)s;
    return 0;
}

static int decode(inflater *z, const huffman *h) {
    int code = 0, first = 0, index = 0;
    for (int l = 1; l < 16; l++) {
        int b = bits(z, 1);
        if (b < 0) return -1;
        code |= b;
        int count = h->count[l];
        if (code - count < first) return h->symbol[index + (code - first)];
        index += count, first += count;
        first <<= 1, code <<= 1;
    }
    z->err = "an invalid Huffman code";
    return -1;
}

static const short len_base[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
                                   35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const short len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const short dist_base[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
                                    257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const short dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static int put(inflater *z, uint8_t c) {
    if (z->len >= z->cap) {
        z->err = "more image data than the header's size";
        return -1;
    }
    z->out[z->len++] = c;
    return 0;
}

/* The symbols of one Huffman block up to its end code. */
static int codes(inflater *z, const huffman *lit, const huffman *dist) {
    for (;;) {
        int s = decode(z, lit);
        if (s < 0) return -1;
        if (s < 256) {
            if (put(z, (uint8_t)s)) return -1;
            continue;
        }
        if (s == 256) return 0;
        s -= 257;
        if (s >= 29) break;
        int e = bits(z, len_extra[s]);
        if (e < 0) return -1;
        int n = len_base[s] + e, d = decode(z, dist);
        if (d < 0) return -1;
        if (d >= 30) break;
        int de = bits(z, dist_extra[d]);
        if (de < 0) return -1;
        size_t back = (size_t)dist_base[d] + (size_t)de;
        if (back > z->len) {
            z->err = "a distance back past the start of the data";
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (put(z, z->out[z->len - back])) return -1;
    }
    z->err = "an invalid length or distance symbol";
    return -1;
}

static int fixed_block(inflater *z) {
    static huffman lit, dist;
    static int made;
    if (!made) {
        uint8_t l[288];
        for (int s = 0; s < 288; s++) l[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
        build(&lit, l, 288);
        memset(l, 5, 30);
        build(&dist, l, 30);
        made = 1;
    }
    return codes(z, &lit, &dist);
}

static int dynamic_block(inflater *z) {
    static const uint8_t order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    int nlen = bits(z, 5), ndist = bits(z, 5), ncode = bits(z, 4);
    if (nlen < 0 || ndist < 0 || ncode < 0) return -1;
    nlen += 257, ndist += 1, ncode += 4;
    if (nlen > 286 || ndist > 30) {
        z->err = "too many length or distance codes";
        return -1;
    }
    uint8_t len[320] = {0};
    for (int i = 0; i < ncode; i++) {
        int v = bits(z, 3);
        if (v < 0) return -1;
        len[order[i]] = (uint8_t)v;
    }
    huffman lencode, lit, dist;
    if (build(&lencode, len, 19)) {
        z->err = "an invalid code-length code";
        return -1;
    }
    memset(len, 0, sizeof len);
    for (int i = 0; i < nlen + ndist;) {
        int s = decode(z, &lencode);
        if (s < 0) return -1;
        if (s < 16) {
            len[i++] = (uint8_t)s;
            continue;
        }
        int rep = s == 16 ? 3 + bits(z, 2) : s == 17 ? 3 + bits(z, 3) : 11 + bits(z, 7);
        if (z->err) return -1;
        if (s == 16 && i == 0) {
            z->err = "a repeat with no previous length";
            return -1;
        }
        uint8_t v = s == 16 ? len[i - 1] : 0;
        if (i + rep > nlen + ndist) {
            z->err = "code lengths run past their count";
            return -1;
        }
        while (rep--) len[i++] = v;
    }
    if (len[256] == 0 || build(&lit, len, nlen) || build(&dist, len + nlen, ndist)) {
        z->err = "invalid literal or distance code lengths";
        return -1;
    }
    return codes(z, &lit, &dist);
}

static int inflate_all(inflater *z) {
    for (int last = 0; !last;) {
        last = bits(z, 1);
        int type = bits(z, 2);
        if (last < 0 || type < 0) return -1;
        if (type == 0) {
            z->bits = 0, z->nbits = 0; /* stored: to the byte boundary, then LEN, NLEN */
            if (z->pos + 4 > z->n) {
                z->err = "compressed data ends early";
                return -1;
            }
            unsigned n = z->in[z->pos] | z->in[z->pos + 1] << 8, nn = z->in[z->pos + 2] | z->in[z->pos + 3] << 8;
            z->pos += 4;
            if (n != (~nn & 0xffff) || z->pos + n > z->n) {
                z->err = n != (~nn & 0xffff) ? "a stored block's length check fails" : "compressed data ends early";
                return -1;
            }
            for (unsigned i = 0; i < n; i++)
                if (put(z, z->in[z->pos++])) return -1;
        } else if (type == 1) {
            if (fixed_block(z)) return -1;
        } else if (type == 2) {
            if (dynamic_block(z)) return -1;
        } else {
            z->err = "an invalid block type";
            return -1;
        }
    }
    return 0;
}

/* ---- PNG ---------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* where: "" (a byte of the file), " of the image data" (the zlib stream)
 * or " of the unpacked rows" */
static int fail(const char *path, const char *what, size_t at, const char *where, void *a, void *b) {
    fprintf(stderr, "png: %s: %s at byte %zu%s\n", path, what, at, where);
    free(a), free(b);
    return 1;
}

int ex_read_png_rgb(const char *path, uint8_t **pix, int *w, int *h) {
    *pix = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "png: cannot open %s\n", path);
        return 1;
    }
    uint8_t *file = NULL, *idat = NULL, *raw = NULL;
    size_t n = 0, cap = 0, got;
    do { /* the whole file */
        if (n == cap) {
            uint8_t *g = realloc(file, cap = cap ? 2 * cap : 1 << 16);
            if (!g) break;
            file = g;
        }
        got = fread(file + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (!file || n < 8 || memcmp(file, sig, 8)) return fail(path, "not a PNG signature", 0, "", file, NULL);
    int ch = 0;
    size_t idat_n = 0, at = 8;
    uint32_t W = 0, H = 0;
    for (;;) { /* chunks: IHDR first, the IDATs joined, up to IEND */
        if (at + 12 > n) return fail(path, "the file ends inside a chunk", at, "", file, idat);
        uint32_t len = be32(file + at);
        const uint8_t *type = file + at + 4, *data = file + at + 8;
        if (len > n - at - 12) return fail(path, "a chunk longer than the file", at, "", file, idat);
        if (at == 8 && memcmp(type, "IHDR", 4)) return fail(path, "no IHDR chunk first", at, "", file, idat);
        if (!memcmp(type, "IHDR", 4)) {
            if (len != 13) return fail(path, "an IHDR chunk of the wrong length", at, "", file, idat);
            W = be32(data), H = be32(data + 4);
            int color = data[9];
            ch = color == 0 ? 1 : color == 2 ? 3 : color == 4 ? 2 : color == 6 ? 4 : 0;
            if (data[8] != 8 || !ch || data[10] || data[11] || data[12])
                return fail(path, "not 8-bit grey/RGB(A), non-interlaced", at + 16, "", file, idat);
            if (W == 0 || H == 0 || W > 16384 || H > 16384)
                return fail(path, "an image size outside 1..16384", at + 8, "", file, idat);
        } else if (!memcmp(type, "IDAT", 4)) {
            uint8_t *g = realloc(idat, idat_n + len + 1);
            if (!g) return fail(path, "out of memory", at, "", file, idat);
            idat = g;
            memcpy(idat + idat_n, data, len);
            idat_n += len;
        } else if (!memcmp(type, "IEND", 4)) {
            break;
        } else if (!(type[0] & 0x20)) {
            return fail(path, "an unknown critical chunk", at, "", file, idat);
        }
        at += 12 + (size_t)len;
    }
    free(file);
    /* zlib: deflate with a window of at most 32K, no preset dictionary; then Adler-32. */
    if (idat_n < 6 || (idat[0] & 0x0f) != 8 || (idat[0] >> 4) > 7 || (idat[0] << 8 | idat[1]) % 31 || (idat[1] & 0x20))
        return fail(path, "a bad zlib header", 0, " of the image data", idat, NULL);
    size_t stride = (size_t)W * ch, raw_n = (size_t)H * (stride + 1);
    raw = malloc(raw_n);
    inflater z = {.in = idat, .n = idat_n, .pos = 2, .out = raw, .cap = raw_n};
    if (!raw) return fail(path, "out of memory", 0, "", idat, NULL);
    if (inflate_all(&z)) return fail(path, z.err, z.pos, " of the image data", idat, raw);
    if (z.len != raw_n) return fail(path, "less image data than the header's size", z.pos, " of the image data", idat, raw);
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < raw_n; i++) a = (a + raw[i]) % 65521, b = (b + a) % 65521;
    if (z.pos + 4 > idat_n || be32(idat + z.pos) != (b << 16 | a))
        return fail(path, "the Adler-32 check does not match", z.pos, " of the image data", idat, raw);
    free(idat);
    /* Undo each row's filter in place; the row above starts as zeros. */
    for (size_t y = 0; y < H; y++) {
        uint8_t *r = raw + y * (stride + 1), *cur = r + 1, *up = y ? r - stride : NULL;
        if (r[0] > 4) return fail(path, "an unknown row filter", y * (stride + 1), " of the unpacked rows", raw, NULL);
        for (size_t x = 0; x < stride; x++) {
            int left = x >= (size_t)ch ? cur[x - ch] : 0, above = up ? up[x] : 0;
            int ul = up && x >= (size_t)ch ? up[x - ch] : 0;
            int p = r[0] == 0 ? 0 : r[0] == 1 ? left : r[0] == 2 ? above : r[0] == 3 ? (left + above) / 2 : paeth(left, above, ul);
            cur[x] = (uint8_t)(cur[x] + p);
        }
    }
    uint8_t *rgb = malloc((size_t)W * H * 3);
    if (!rgb) return fail(path, "out of memory", 0, "", raw, NULL);
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++) {
            const uint8_t *p = raw + y * (stride + 1) + 1 + x * ch;
            for (int c = 0; c < 3; c++) rgb[(y * W + x) * 3 + c] = ch >= 3 ? p[c] : p[0];
        }
    free(raw);
    *pix = rgb, *w = (int)W, *h = (int)H;
    return 0;
}
