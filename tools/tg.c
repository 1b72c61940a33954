/* The tensorgrad command line: trains the bundled examples. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/examples.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: tg train <example> [--steps N] [--seed S] [--backend cpu|webgpu] [--threads N] [--quiet]\n"
            "                          [--checkpoint PATH] [--out FILE]\n"
            "examples:\n"
            "  addition   3-layer transformer learning 2-digit addition; ends with 'heldout_accuracy=<value>'\n"
            "  digits     CNN on the 8x8 handwritten digits; ends with 'test_accuracy=<value>'\n"
            "  names      character-level transformer over Debian's word list; ends with 'val_loss=<value>'\n"
            "  sin        1-64-64-1 MLP fitting sin(x); ends with 'final loss=<value>'\n"
            "  vae        convolutional VAE on the digits; writes a PNG of reconstructions and samples\n"
            "             and ends with 'test_elbo=<value>'\n"
            "options: --checkpoint PATH  where addition saves its checkpoint (default addition.safetensors)\n"
            "         --out FILE         where vae writes its PNG (default vae.png)\n");
    return f == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) return usage(argc < 2 ? stderr : stdout);
    if (strcmp(argv[1], "train") != 0 || argc < 3) return usage(stderr);
    tg_example_opts o = {0};
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--steps") && v) o.steps = atoll(argv[++i]);
        else if (!strcmp(a, "--seed") && v) o.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--threads") && v) o.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--quiet")) o.quiet = true;
        else if (!strcmp(a, "--checkpoint") && v) o.checkpoint = argv[++i];
        else if (!strcmp(a, "--out") && v) o.out = argv[++i];
        else if (!strcmp(a, "--backend") && v) {
            v = argv[++i];
            if (!strcmp(v, "cpu")) o.backend = TG_BACKEND_CPU;
            else if (!strcmp(v, "webgpu")) o.backend = TG_BACKEND_WEBGPU;
            else {
                fprintf(stderr, "tg: unknown backend '%s' (cpu or webgpu)\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "tg: unknown option '%s'\n", a);
            return usage(stderr);
        }
    }
    const char *ex = argv[2];
    if (!strcmp(ex, "sin")) return example_sin(&o);
    if (!strcmp(ex, "addition")) return example_addition(&o);
    if (!strcmp(ex, "names")) return example_names(&o);
    if (!strcmp(ex, "digits")) return example_digits(&o);
    if (!strcmp(ex, "vae")) return example_vae(&o);
    fprintf(stderr, "tg: unknown example '%s'\n", ex);
    return usage(stderr);
}
