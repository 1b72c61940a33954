/* safetensors files: a strict reader and an atomic writer.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON, then the
 * data section. The JSON maps tensor names to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets into the data section), plus an
 * optional "__metadata__" object of string values.
 *
 * The reader trusts nothing in the file: it accepts exactly that JSON subset
 * (objects, arrays, strings, non-negative integers), and every error names
 * the byte offset in the file where it was found. F32 and I32 tensors are
 * read as they are, F16 and BF16 converted to F32; tensors of any other
 * dtype are checked (their range) and listed as skipped. All allocations
 * are bounded by twice the file's size (the F16 / BF16 conversions).
 *
 * Every file the writer makes carries a checksum of all its bytes but the
 * checksum's own digits (header, metadata and data), as the first metadata
 * entry: TG_ST_CHECKSUM_KEY, 16 lowercase hex digits. The reader checks it
 * whenever a file has one and keeps it out of the metadata it lists; a
 * file without one (written by another program) reads as before. */
#ifndef TG_SAFETENSORS_H
#define TG_SAFETENSORS_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

#include "tensorgrad.h"

typedef struct {
    char *key, *value;
} st_meta;

typedef struct {
    char *name, *dtype; /* the dtype as the file spells it */
} st_skipped;

#define TG_ST_CHECKSUM_KEY "tensorgrad_checksum"
#define TG_ST_CHECKSUM_DIGITS 16

struct tg_safetensors {
    uint8_t *file;        /* the whole file when read from a path or memory (owned), else NULL */
    tg_st_tensor *t;      /* in header order; names owned, data points into the file or a copy */
    int n;
    int *by_name;         /* indices of t sorted by name, for lookups */
    st_meta *meta;        /* in header order */
    int n_meta;
    void **copies;        /* tensors placed at unaligned offsets or converted from F16 / BF16 */
    int n_copies;
    st_skipped *skipped;  /* tensors of dtypes the reader does not read, in header order */
    int n_skipped;
    bool checksummed;     /* the file had a checksum, and it matched */
};

/* Parses a safetensors image already in memory. label names it in errors
 * (the path, usually). *out refers into buf, which must outlive it. */
tg_status tg_st_parse(const char *label, const uint8_t *buf, size_t size, tg_safetensors **out);

/* A collection of n tensors held in memory, as tg_safetensors_read gives
 * one: names copied, data in one owned block (4-byte aligned); t[i].data
 * copied, or left zero for the caller to fill when NULL. */
tg_status tg_st_new(const tg_st_tensor *t, int n, tg_safetensors **out);

/* n halves (F16, or BF16 when bf16) at src, little-endian, as f32 into dst. */
void tg_st_halves(const void *src, bool bf16, int64_t n, float *dst);

/* The byte size of a tensor of this dtype and shape, or -1 if it overflows
 * or the dtype is not storable (only F32 and I32 are). */
int64_t tg_st_nbytes(tg_dtype dt, tg_shape s);

/* Recomputes the checksum of a file image in place, as the writer would
 * have (for tests and the fuzzer, which forge files): false when the image
 * has none. */
bool tg_st_reseal(uint8_t *img, size_t size);

/* Atomic saves (tempname.c): a temporary name unique to this save (malloc'd,
 * NULL when out of memory), and the removal of path's temporaries left by
 * processes that died mid-save. */
char *tg_st_temp_name(const char *path);
void tg_st_remove_stale(const char *path);

/* Strings from hostile files, made printable (control characters become
 * '?') and cut to fit buf, for error messages. Returns buf. */
const char *tg_st_shown(const char *s, char *buf, size_t cap);
#endif
