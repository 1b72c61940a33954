/* Helpers shared by the examples. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* The directory above the running binary (build/tg -> the repo root). */
static bool repo_root(char *out, size_t n) {
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return false;
    exe[k] = 0;
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return false;
        *slash = 0;
    }
    snprintf(out, n, "%s", exe);
    return true;
}

bool ex_data_path(const char *what, char *out, size_t n) {
    char root[4096], cmd[4300];
    if (!repo_root(root, sizeof root)) snprintf(root, sizeof root, ".");
    /* scripts/fetch-data.sh prints the path (fetching the .deb only when needed). */
    snprintf(cmd, sizeof cmd, "'%s/scripts/fetch-data.sh' '%s'", root, what);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    bool ok = fgets(out, (int)n, p) != NULL;
    int rc = pclose(p);
    if (!ok || rc != 0) return false;
    out[strcspn(out, "\n")] = 0;
    return out[0] != 0;
}
