/* Fashion-MNIST (Zalando's 70,000 28x28 greyscale product images in 10
 * classes), from the IDX files of Debian's dataset-fashion-mnist, which
 * scripts/fetch-data.sh unpacks into .deps/data/fashion-mnist on first use.
 * An IDX file is a big-endian header (magic 0x00000803 for images
 * [n, rows, cols] of u8, 0x00000801 for labels [n] of u8) and the bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

const char *const ex_fashion_classes[EX_FASHION_CLASSES] = {
    "t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle boot"};

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Reads the IDX file dir/name: `dims` dims after the count, each of the
 * image dims 28. Returns the n * item bytes after the header (malloc'ed),
 * or NULL after printing what is wrong and at which offset. */
static uint8_t *read_idx(const char *dir, const char *name, int dims, int *n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fashion-mnist: cannot open %s\n", path);
        return NULL;
    }
    uint8_t h[16];
    size_t hn = 4 + 4 * (size_t)dims + 4;
    uint8_t *data = NULL;
    if (fread(h, 1, hn, f) != hn) {
        fprintf(stderr, "fashion-mnist: %s: the header ends early (offset %zu)\n", path, hn);
        goto out;
    }
    uint32_t magic = be32(h), want = 0x800u | (uint32_t)(dims + 1);
    if (magic != want) {
        fprintf(stderr, "fashion-mnist: %s: magic 0x%08x at offset 0, expected 0x%08x\n", path, magic, want);
        goto out;
    }
    uint32_t count = be32(h + 4);
    for (int d = 0; d < dims; d++)
        if (be32(h + 8 + 4 * d) != 28) {
            fprintf(stderr, "fashion-mnist: %s: dim %u at offset %d, expected 28\n", path, be32(h + 8 + 4 * d), 8 + 4 * d);
            goto out;
        }
    if (count == 0 || count > 1000000) {
        fprintf(stderr, "fashion-mnist: %s: %u items at offset 4\n", path, count);
        goto out;
    }
    size_t item = dims == 2 ? 28 * 28 : 1, bytes = (size_t)count * item;
    data = malloc(bytes);
    if (!data) {
        fprintf(stderr, "fashion-mnist: out of memory for %s\n", path);
        goto out;
    }
    size_t got = fread(data, 1, bytes, f);
    if (got != bytes) {
        fprintf(stderr, "fashion-mnist: %s ends at offset %zu, expected %zu bytes\n", path, hn + got, hn + bytes);
        free(data);
        data = NULL;
        goto out;
    }
    *n = (int)count;
out:
    fclose(f);
    return data;
}

int ex_fashion_load(ex_fashion *d) {
    memset(d, 0, sizeof *d);
    char dir[4096];
    if (!ex_data_path("fashion", dir, sizeof dir)) {
        fprintf(stderr, "fashion-mnist: cannot fetch the data (scripts/fetch-data.sh fashion, from a source tree)\n");
        return 1;
    }
    int n_train_labels = 0, n_test_labels = 0;
    uint8_t *train_y = NULL, *test_y = NULL;
    d->train_x = read_idx(dir, "train-images-idx3-ubyte", 2, &d->n_train);
    if (d->train_x) train_y = read_idx(dir, "train-labels-idx1-ubyte", 0, &n_train_labels);
    if (train_y) d->test_x = read_idx(dir, "t10k-images-idx3-ubyte", 2, &d->n_test);
    if (d->test_x) test_y = read_idx(dir, "t10k-labels-idx1-ubyte", 0, &n_test_labels);
    bool ok = test_y && n_train_labels == d->n_train && n_test_labels == d->n_test;
    if (test_y && !ok)
        fprintf(stderr, "fashion-mnist: %d train images but %d labels, %d test images but %d labels\n", d->n_train,
                n_train_labels, d->n_test, n_test_labels);
    if (ok) {
        d->train_y = malloc(sizeof(int32_t) * (size_t)d->n_train);
        d->test_y = malloc(sizeof(int32_t) * (size_t)d->n_test);
        ok = d->train_y && d->test_y;
    }
    for (int i = 0; ok && i < d->n_train + d->n_test; i++) {
        uint8_t y = i < d->n_train ? train_y[i] : test_y[i - d->n_train];
        if (y >= EX_FASHION_CLASSES) {
            fprintf(stderr, "fashion-mnist: label %u of item %d is not a class\n", y, i);
            ok = false;
        } else if (i < d->n_train) d->train_y[i] = y;
        else d->test_y[i - d->n_train] = y;
    }
    free(train_y);
    free(test_y);
    if (!ok) {
        ex_fashion_free(d);
        return 1;
    }
    return 0;
}

void ex_fashion_free(ex_fashion *d) {
    free(d->train_x);
    free(d->test_x);
    free(d->train_y);
    free(d->test_y);
    memset(d, 0, sizeof *d);
}

void ex_fashion_pixels(const uint8_t *images, const int *which, int n, float *out) {
    for (int i = 0; i < n; i++) {
        const uint8_t *src = images + (size_t)(which ? which[i] : i) * EX_FASHION_PIXELS;
        for (int k = 0; k < EX_FASHION_PIXELS; k++) out[(size_t)i * EX_FASHION_PIXELS + k] = src[k] * (1.0f / 255.0f);
    }
}

void ex_fashion_shuffle(int *order, int n, uint64_t *rng) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(ex_rand(rng) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

void ex_fashion_epochs_init(ex_fashion_epochs *e, int n, uint64_t seed) {
    e->order = malloc(sizeof(int) * (size_t)n);
    e->n = n, e->pos = n, e->rng = seed;
    for (int i = 0; e->order && i < n; i++) e->order[i] = i;
}

void ex_fashion_epochs_next(ex_fashion_epochs *e, int *which, int n) {
    for (int b = 0; b < n; b++) {
        if (e->pos == e->n) {
            ex_fashion_shuffle(e->order, e->n, &e->rng);
            e->pos = 0;
        }
        which[b] = e->order[e->pos++];
    }
}

int ex_fashion_write_grid(const char *path, const float *img, int n) {
    enum { S = 2, CELL = EX_FASHION_SIDE * S + 2, PER_ROW = 16, W = PER_ROW * CELL + 2 };
    int h = (n + PER_ROW - 1) / PER_ROW * CELL + 2;
    uint8_t *pix = malloc((size_t)W * h);
    if (!pix) {
        fprintf(stderr, "cannot write %s: out of memory\n", path);
        return 1;
    }
    memset(pix, 40, (size_t)W * h);
    for (int k = 0; k < n; k++)
        for (int y = 0; y < EX_FASHION_SIDE * S; y++)
            for (int x = 0; x < EX_FASHION_SIDE * S; x++) {
                float v = img[(size_t)k * EX_FASHION_PIXELS + (y / S) * EX_FASHION_SIDE + x / S];
                pix[(size_t)((k / PER_ROW) * CELL + 2 + y) * W + (k % PER_ROW) * CELL + 2 + x] =
                    (uint8_t)lrintf(fminf(fmaxf(v, 0), 1) * 255);
            }
    int rc = ex_write_png_gray(path, pix, W, h);
    if (rc) fprintf(stderr, "cannot write %s\n", path);
    free(pix);
    return rc;
}

void ex_fashion_epochs_free(ex_fashion_epochs *e) {
    free(e->order);
    e->order = NULL;
}
