/* The word list of Debian's wamerican (scripts/fetch-data.sh words) as the
 * character models read it: lowercased, 2..max_len letters a-z, sorted and
 * deduplicated, shuffled with the examples' generator from `seed`, then the
 * first tenth for validation and the rest for training. names.c keeps the
 * same rules, so a model given its seed sees the same split. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool take(ex_words *s, char **from, int n, int stride) {
    s->n = n, s->stride = stride;
    s->w = calloc((size_t)(n ? n : 1), (size_t)stride);
    for (int i = 0; s->w && i < n; i++) memcpy(s->w + (size_t)i * stride, from[i], strlen(from[i]) + 1);
    return s->w != NULL;
}

int ex_words_load(int max_len, uint64_t seed, ex_words *train, ex_words *val) {
    char path[4096], line[256];
    memset(train, 0, sizeof *train), memset(val, 0, sizeof *val);
    FILE *f = ex_data_path("words", path, sizeof path) ? fopen(path, "r") : NULL;
    if (!f) {
        fprintf(stderr, "error: cannot read the word list (install wamerican, or run scripts/fetch-data.sh words)\n");
        return 1;
    }
    int cap = 1 << 17, n = 0;
    char **all = malloc(sizeof(char *) * (size_t)cap);
    while (all && fgets(line, sizeof line, f)) {
        int k = 0, bad = 0;
        for (char *c = line; *c && *c != '\n'; c++, k++) {
            bad |= !isalpha((unsigned char)*c);
            *c = (char)tolower((unsigned char)*c);
        }
        line[k] = 0;
        if (bad || k < 2 || k > max_len) continue;
        if (n == cap) {
            char **g = realloc(all, sizeof(char *) * (size_t)(cap *= 2));
            if (!g) break;
            all = g;
        }
        if (!(all[n] = strdup(line))) break;
        n++;
    }
    fclose(f);
    if (!all || n == 0) {
        free(all);
        fprintf(stderr, "error: no usable words in %s\n", path);
        return 1;
    }
    qsort(all, (size_t)n, sizeof *all, cmp_str);
    int u = 0;
    for (int i = 0; i < n; i++) {
        if (u > 0 && strcmp(all[u - 1], all[i]) == 0) free(all[i]);
        else all[u++] = all[i];
    }
    for (int i = u - 1; i > 0; i--) {
        int j = (int)(ex_rand(&seed) % (uint64_t)(i + 1));
        char *t = all[i];
        all[i] = all[j], all[j] = t;
    }
    int n_val = u / 10;
    bool ok = take(val, all, n_val, max_len + 1) && take(train, all + n_val, u - n_val, max_len + 1);
    for (int i = 0; i < u; i++) free(all[i]);
    free(all);
    if (!ok) {
        ex_words_free(train), ex_words_free(val);
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    return 0;
}

void ex_words_free(ex_words *w) {
    free(w->w);
    memset(w, 0, sizeof *w);
}
