/* A minimal test harness: CHECK records a failure with file:line and goes on;
 * check_summary prints the "N passed, N failed" line that tests/run.sh adds up
 * and returns the exit code. */
#ifndef TG_CHECK_H
#define TG_CHECK_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorgrad.h"

static int check_pass, check_fail;

#define CHECK(cond, ...)                                                \
    do {                                                                \
        if (cond) {                                                     \
            check_pass++;                                               \
        } else {                                                        \
            check_fail++;                                               \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                               \
            fprintf(stderr, "\n");                                      \
        }                                                               \
    } while (0)

/* A call that must succeed; prints tg_last_error() if it does not. */
#define CHECK_OK(call)                                                               \
    do {                                                                             \
        tg_status st_ = (call);                                                      \
        CHECK(st_ == TG_OK, "%s -> %s: %s", #call, tg_status_name(st_), tg_last_error()); \
    } while (0)

/* A call that must fail with `want` and a message containing `needle`. */
#define CHECK_ERR(call, want, needle)                                                          \
    do {                                                                                       \
        tg_status st_ = (call);                                                                \
        CHECK(st_ == (want) && strstr(tg_last_error(), needle),                                \
              "%s -> %s '%s', want %s containing '%s'", #call, tg_status_name(st_), tg_last_error(), \
              tg_status_name(want), needle);                                                   \
    } while (0)

/* A test that finds no WebGPU adapter skips its WebGPU part, except under CI
 * (CI=true), which installs the runtime and so must not skip silently. A run
 * that cannot have WebGPU at all (make test-aarch64: Dawn has no linux-arm64
 * build) says so with TG_TEST_NO_WEBGPU=1. */
/* A whole file into a malloc'ed buffer (*size bytes), NULL if unreadable. */
static inline uint8_t *read_whole_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *size = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

/* n bytes of b as the file at path (replacing it); nothing if it cannot be opened. */
static inline void write_whole_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(b, 1, n, f);
    fclose(f);
}

static inline void check_webgpu_missing(const char *suite) {
    const char *ci = getenv("CI"), *none = getenv("TG_TEST_NO_WEBGPU");
    if (ci && strcmp(ci, "true") == 0 && !(none && strcmp(none, "1") == 0))
        CHECK(false, "%s: WebGPU is required under CI: %s", suite, tg_last_error());
    else
        printf("%s: webgpu skipped: %s\n", suite, tg_last_error());
}

static inline int check_summary(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, check_pass, check_fail);
    return check_fail ? 1 : 0;
}
#endif
