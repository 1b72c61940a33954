/* The 8x8 handwritten digits (1797 images, pixel values 0..16, then the
 * label) that Debian's python3-sklearn ships. scripts/fetch-data.sh pulls the
 * .deb and unpacks just that file into .deps/data (TG_DIGITS_CSV overrides the
 * path); this parses it and deals it out in a fixed shuffled order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

static FILE *open_csv(char *path, size_t n) {
    const char *env = getenv("TG_DIGITS_CSV");
    if (env && *env) snprintf(path, n, "%s", env);
    else if (!ex_data_path("digits", path, n)) return NULL; /* fetches python3-sklearn's .deb when missing */
    return fopen(path, "r");
}

int ex_digits_load(ex_digits *d) {
    memset(d, 0, sizeof *d);
    char path[4096] = "";
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
