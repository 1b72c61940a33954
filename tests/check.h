/* A minimal test harness: CHECK records a failure with file:line and goes on;
 * check_summary prints the "N passed, N failed" line that tests/run.sh adds up
 * and returns the exit code. */
#ifndef TG_CHECK_H
#define TG_CHECK_H
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

static inline int check_summary(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, check_pass, check_fail);
    return check_fail ? 1 : 0;
}
#endif
