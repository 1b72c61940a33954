/* A minimal PNG writer for 8-bit greyscale and RGB images: the zlib stream uses
 * stored (uncompressed) deflate blocks, so all it needs is CRC-32 for the
 * chunks and Adler-32 for the stream. Small pictures only; no zlib. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_of(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* length, type, data, CRC over type + data */
static int chunk(FILE *f, const char *type, const uint8_t *data, size_t n) {
    uint8_t head[8], tail[4];
    put32(head, (uint32_t)n);
    memcpy(head + 4, type, 4);
    put32(tail, crc32_of(crc32_of(0, head + 4, 4), data, n));
    return fwrite(head, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) && fwrite(tail, 1, 4, f) == 4;
}

/* ch: 1 (grey) or 3 (RGB) bytes per pixel */
static int write_png(const char *path, const uint8_t *pix, int w, int h, int ch) {
    crc_init();
    /* Raw scanlines: filter byte 0 (none), then the row. */
    size_t row = (size_t)w * ch, raw_n = (size_t)h * (row + 1);
    size_t blocks = raw_n / 65535 + 1;
    size_t z_n = 2 + raw_n + 5 * blocks + 4;
    uint8_t *raw = malloc(raw_n), *z = malloc(z_n);
    if (!raw || !z) {
        free(raw), free(z);
        return 1;
    }
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * (row + 1)] = 0;
        memcpy(raw + (size_t)y * (row + 1) + 1, pix + (size_t)y * row, row);
    }
    /* zlib: CMF/FLG (deflate, 32K window, no dictionary, check bits), stored
     * blocks of at most 65535 bytes, Adler-32 of the raw data. */
    size_t o = 0;
    z[o++] = 0x78, z[o++] = 0x01;
    size_t at = 0;
    do {
        size_t len = raw_n - at < 65535 ? raw_n - at : 65535;
        z[o++] = at + len == raw_n; /* BFINAL on the last block, BTYPE 00 */
        z[o++] = (uint8_t)len, z[o++] = (uint8_t)(len >> 8);
        z[o++] = (uint8_t)~len, z[o++] = (uint8_t)(~len >> 8);
        memcpy(z + o, raw + at, len);
        o += len, at += len;
    } while (at < raw_n);
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < raw_n; i++) a = (a + raw[i]) % 65521, b = (b + a) % 65521;
    put32(z + o, b << 16 | a);
    o += 4;

    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t ihdr[13];
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = ch == 3 ? 2 : 0; /* truecolour or greyscale */
    ihdr[10] = 0; /* deflate */
    ihdr[11] = 0; /* adaptive filtering (each row says "none") */
    ihdr[12] = 0; /* no interlace */
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(sig, 1, 8, f) == 8 && chunk(f, "IHDR", ihdr, 13) && chunk(f, "IDAT", z, o) &&
             chunk(f, "IEND", NULL, 0);
    if (f && fclose(f) != 0) ok = 0;
    free(raw), free(z);
    return ok ? 0 : 1;
}

int ex_write_png_gray(const char *path, const uint8_t *pix, int w, int h) { return write_png(path, pix, w, h, 1); }
int ex_write_png_rgb(const char *path, const uint8_t *pix, int w, int h) { return write_png(path, pix, w, h, 3); }
