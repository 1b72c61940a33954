#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <math.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_error[1024];

tg_status tg_failv(tg_status s, const char *fmt, va_list ap) {
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return s;
}

tg_status tg_fail(tg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tg_failv(s, fmt, ap);
    va_end(ap);
    return s;
}

void tg_clear_error(void) { last_error[0] = 0; }
const char *tg_last_error(void) { return last_error; }

const char *tg_version(void) { return TG_VERSION_STRING; }

const char *tg_status_name(tg_status s) {
    static const char *names[] = {"ok", "shape", "arg", "name", "size", "io",
                                  "format", "backend", "limit", "nomem", "state", "numeric", "timeout"};
    static_assert(sizeof names / sizeof names[0] == TG_ERR_TIMEOUT + 1, "a name for every status");
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

void *tg_calloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }
void *tg_realloc(void *p, size_t size) { return realloc(p, size ? size : 1); }

char *tg_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void *tg_aalloc(size_t bytes) {
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p) memset(p, 0, n ? n : 64);
    return p;
}
void tg_afree(void *p) { free(p); }

/* lowbias32 (Chris Wellons' hash-prospector): good avalanche, u32 ops only,
 * so WGSL computes the identical value. */
uint32_t tg_hash32(uint32_t x) { return tg_hash32_inline(x); }

uint32_t tg_rng_u32(uint64_t seed, uint32_t salt, uint32_t index) {
    return tg_rng_key_u32(tg_rng_key(seed, salt), index);
}

float tg_rng_uniform(uint64_t seed, uint32_t salt, uint32_t index) {
    return tg_rng_key_uniform(tg_rng_key(seed, salt), index);
}

float tg_rng_key_normal(uint32_t key, uint32_t index) {
    /* u1 in (0, 1] so log never sees 0. */
    float u1 = 1.0f - tg_rng_key_uniform(key, 2u * index);
    float u2 = tg_rng_key_uniform(key, 2u * index + 1u);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

float tg_rng_normal(uint64_t seed, uint32_t salt, uint32_t index) {
    return tg_rng_key_normal(tg_rng_key(seed, salt), index);
}

uint32_t tg_str_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

double tg_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* NaN and Inf are the floats whose exponent bits are all ones; adding one
 * exponent step to those bits alone carries into the sign bit for them and
 * for no other value. An OR of integers may be reordered, so the compiler
 * runs it in vector lanes (a float sum such as x - x may not be, and ran
 * one element per add's latency: half of a small model's step under
 * check_numerics). The sign bit of the result says whether x[0, e) has one. */
static inline uint32_t nonfinite_bits(const float *x, int64_t e) {
    uint32_t acc = 0;
    for (int64_t i = 0; i < e; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        acc |= (u & 0x7f800000u) + 0x00800000u;
    }
    return acc & 0x80000000u;
}

int64_t tg_first_nonfinite(const float *x, int64_t n) {
    enum { BLOCK = 1024 }; /* a whole block's trip count is a constant, which -O2 vectorizes */
    for (int64_t b = 0; b < n; b += BLOCK) {
        int64_t e = n - b < BLOCK ? n - b : BLOCK;
        if (!(e == BLOCK ? nonfinite_bits(x + b, BLOCK) : nonfinite_bits(x + b, e))) continue;
        for (int64_t i = 0; i < e; i++) /* only a block with a hit is scanned for the element */
            if (!isfinite(x[b + i])) return b + i;
    }
    return -1;
}
