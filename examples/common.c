/* Helpers shared by the examples. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "examples.h"

double ex_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A 64-bit LCG: data generation only (the library has its own PRNG for params). */
uint64_t ex_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

float ex_uniform(uint64_t *s) { return (float)(ex_rand(s) >> 7) * (1.0f / 16777216.0f); }
