/* Shared helpers: error reporting, allocation, the counter-based PRNG. */
#ifndef TG_UTIL_H
#define TG_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "tensorgrad.h"

#if defined(__GNUC__)
#define TG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TG_PRINTF(a, b)
#endif

/* Sets this thread's last-error message and returns s, so callers can write
 * `return tg_fail(TG_ERR_ARG, "tg_x: bad y %d", y);`. */
tg_status tg_fail(tg_status s, const char *fmt, ...) TG_PRINTF(2, 3);
tg_status tg_failv(tg_status s, const char *fmt, va_list ap);
void tg_clear_error(void);

/* calloc/realloc that never abort; NULL on failure (callers report NOMEM). */
void *tg_calloc(size_t n, size_t size);
void *tg_realloc(void *p, size_t size);
char *tg_strdup(const char *s);
/* Aligned (64-byte) zeroed allocation for tensor memory; free with tg_afree. */
void *tg_aalloc(size_t bytes);
void tg_afree(void *p);

/* Counter-based PRNG: one integer hash of (seed, salt, index). The same
 * function, written in WGSL, drives the GPU, so every backend draws the same
 * numbers. uniform is in [0, 1) with 24 bits; normal uses Box-Muller on two
 * uniforms drawn at indices 2i and 2i+1. */
uint32_t tg_hash32(uint32_t x);
uint32_t tg_rng_u32(uint64_t seed, uint32_t salt, uint32_t index);
float tg_rng_uniform(uint64_t seed, uint32_t salt, uint32_t index);
float tg_rng_normal(uint64_t seed, uint32_t salt, uint32_t index);

/* The same stream in two halves, so a kernel folds (seed, salt) into a key
 * once per launch and pays one inlined hash per element:
 * tg_rng_key_u32(tg_rng_key(seed, salt), i) == tg_rng_u32(seed, salt, i),
 * and likewise for uniform and normal (util.c defines the three above
 * through these, so they cannot drift apart). */
static inline uint32_t tg_hash32_inline(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
static inline uint32_t tg_rng_key(uint64_t seed, uint32_t salt) {
    uint32_t h = tg_hash32_inline((uint32_t)seed ^ tg_hash32_inline((uint32_t)(seed >> 32) + 0x9e3779b9u));
    return tg_hash32_inline(h ^ salt);
}
static inline uint32_t tg_rng_key_u32(uint32_t key, uint32_t index) {
    return tg_hash32_inline(key + index * 0x9e3779b9u);
}
static inline float tg_rng_key_uniform(uint32_t key, uint32_t index) {
    return (float)(tg_rng_key_u32(key, index) >> 8) * (1.0f / 16777216.0f);
}
float tg_rng_key_normal(uint32_t key, uint32_t index);
/* FNV-1a of a string: the salt that ties a param's init to its name. */
uint32_t tg_str_hash(const char *s);

/* The index of the first NaN or Inf among x[0..n), or -1. */
int64_t tg_first_nonfinite(const float *x, int64_t n);

/* Monotonic seconds. */
double tg_now(void);

/* fn where set (a session spec's), else tg_set_default_compile_progress's;
 * *user_out the user pointer that goes with the one returned. */
tg_compile_progress_fn tg_compile_progress_or_default(tg_compile_progress_fn fn, void *user, void **user_out);

#endif
