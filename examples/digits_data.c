/* The 8x8 handwritten digits (1797 images, pixel values 0..16, then the
 * label) that Debian's python3-sklearn ships. scripts/fetch-data.sh pulls the
 * .deb and unpacks just that file into .deps/data; this finds it (or runs the
 * script), parses it and deals it out in a fixed shuffled order. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "examples.h"

/* The repository root: two levels above build/tg, else the working directory. */
static void repo_root(char *buf, size_t n) {
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len > 0) {
        buf[len] = 0;
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(buf, '/');
            if (slash) *slash = 0;
        }
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/scripts/fetch-data.sh", buf);
        if (access(probe, R_OK) == 0) return;
    }
    snprintf(buf, n, ".");
}

static FILE *open_csv(char *path, size_t n) {
    const char *env = getenv("TG_DIGITS_CSV");
    if (env && *env) {
        snprintf(path, n, "%s", env);
        return fopen(path, "r");
    }
    char root[3072];
    repo_root(root, sizeof root);
    snprintf(path, n, "%s/.deps/data/digits.csv", root);
    FILE *f = fopen(path, "r");
    if (f) return f;
    /* Not fetched yet: the script downloads python3-sklearn's .deb (no
     * install) and prints where it put the CSV. */
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "'%s/scripts/fetch-data.sh' digits", root);
    fprintf(stderr, "digits: %s not found, running %s\n", path, cmd);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    if (!fgets(path, (int)n, p)) path[0] = 0;
    pclose(p);
    path[strcspn(path, "\n")] = 0;
    return path[0] ? fopen(path, "r") : NULL;
}

int ex_digits_load(ex_digits *d) {
    memset(d, 0, sizeof *d);
    char path[4096];
    FILE *f = open_csv(path, sizeof path);
    if (!f) {
        fprintf(stderr, "digits: cannot open the data (%s); run scripts/fetch-data.sh digits or set TG_DIGITS_CSV\n",
                path[0] ? path : "no path");
        return 1;
    }
    int cap = 2048;
    d->x = malloc(sizeof(float) * 64 * (size_t)cap);
    d->y = malloc(sizeof(int32_t) * (size_t)cap);
    char line[1024];
    while (d->x && d->y && d->n < cap && fgets(line, sizeof line, f)) {
        char *s = line, *end;
        int k = 0;
        float v[65];
        for (; k < 65; k++) {
            v[k] = strtof(s, &end);
            if (end == s) break;
            s = end + (*end == ',');
        }
        if (k != 65) continue; /* a header or a blank line */
        for (int i = 0; i < 64; i++) d->x[d->n * 64 + i] = v[i] / 16.0f;
        d->y[d->n++] = (int32_t)v[64];
    }
    fclose(f);
    if (!d->x || !d->y || d->n < 100) {
        fprintf(stderr, "digits: %s holds %d usable rows, expected 1797\n", path, d->n);
        ex_digits_free(d);
        return 1;
    }
    /* One fixed shuffle (independent of --seed), so the test split is always the same images. */
    uint64_t rng = 20240607;
    for (int i = d->n - 1; i > 0; i--) {
        int j = (int)(ex_rand(&rng) % (uint64_t)(i + 1));
        float t[64];
        memcpy(t, d->x + i * 64, sizeof t);
        memcpy(d->x + i * 64, d->x + j * 64, sizeof t);
        memcpy(d->x + j * 64, t, sizeof t);
        int32_t ty = d->y[i];
        d->y[i] = d->y[j];
        d->y[j] = ty;
    }
    d->n_test = d->n / 5;
    d->n_train = d->n - d->n_test;
    return 0;
}

void ex_digits_free(ex_digits *d) {
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}
