/* The tensorgrad command line: trains the bundled examples and lists the
 * devices they can run on. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../examples/examples.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: tg train <example> [--steps N] [--seed S] [--backend cpu|webgpu] [--threads N] [--quiet]\n"
            "                          [--checkpoint PATH] [--bench N] [--out FILE]\n"
            "       tg plan <example> [--backend cpu|webgpu] [--json]\n"
            "                        compile without training; print the buffer plan's totals and dispatches per step\n"
            "       tg devices       list the CPU and the WebGPU adapter\n"
            "examples:\n"
            "  addition   3-layer transformer learning 2-digit addition; ends with 'heldout_accuracy=<value>'\n"
            "  digits     CNN on the 8x8 handwritten digits; ends with 'test_accuracy=<value>'\n"
            "  gpt_small  the 10.8M-param GPT of the benchmarks (V=65, D=384, 6 layers, T=256, B=64); for a GPU\n"
            "  names      character-level transformer over Debian's word list; ends with 'val_loss=<value>'\n"
            "  sin        1-64-64-1 MLP fitting sin(x); ends with 'final loss=<value>'\n"
            "  vae        convolutional VAE on the digits; writes a PNG of reconstructions and samples\n"
            "             and ends with 'test_elbo=<value>'\n"
            "options: --checkpoint PATH  where addition saves its checkpoint (default addition.safetensors)\n"
            "         --bench N          time N steps on one fixed batch (after warm-up), print one JSON line\n"
            "         --out FILE         where vae writes its PNG (default vae.png)\n");
    return f == stderr ? 2 : 0;
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !v) continue;
        v += 1 + strspn(v + 1, " \t");
        v[strcspn(v, "\n")] = 0;
        snprintf(buf, n, "%s", v);
        break;
    }
    if (f) fclose(f);
}

/* The adapter's optional features, the experimental ones Dawn would add
 * under allow_unsafe_apis, and whether storage accesses are clamped. */
static void webgpu_features(const tg_webgpu_adapter_info *w) {
    char more[256];
    printf("        features: %s\n", w->features[0] ? w->features : "(none)");
    if (tg_webgpu_unsafe_features(more, sizeof more) == TG_OK)
        printf("        with allow_unsafe_apis also: %s\n", more[0] ? more : "(nothing more)");
    else
        printf("        with allow_unsafe_apis: %s\n", tg_last_error());
    printf("        bounds clamps: %s\n", w->robust ? "on (TG_WEBGPU_ROBUST=1, or the library refused disable_robustness)"
                                                    : "off (disable_robustness; TG_WEBGPU_ROBUST=1 turns them on)");
}

/* One line per backend, with the WebGPU adapter's limits that bound model size. */
static int devices(void) {
    char model[128];
    cpu_model(model, sizeof model);
    printf("cpu     %s, %ld cores online (TG_THREADS overrides)\n", model, sysconf(_SC_NPROCESSORS_ONLN));
    tg_cpu_path_info ci;
    if (tg_cpu_info(&ci) != TG_OK) {
        fprintf(stderr, "tg devices: %s\n", tg_last_error());
        return 1;
    }
    printf("        path %s (best on this CPU: %s; TG_CPU lowers it)\n        kernels: %s\n", ci.path, ci.best,
           ci.kernels);
    tg_webgpu_adapter_info w;
    if (tg_webgpu_info(&w) != TG_OK) {
        printf("webgpu  %s\n", tg_last_error());
        return 0;
    }
    printf("webgpu  %s (%s, %s)\n", w.name, w.backend, w.type);
    if (w.description[0]) printf("        driver: %s\n", w.description);
    printf("        library: %s\n", w.library);
    printf("        max buffer %llu MiB, max storage binding %llu MiB, %u storage buffers per stage\n",
           (unsigned long long)(w.max_buffer_size >> 20), (unsigned long long)(w.max_storage_buffer_binding_size >> 20),
           w.max_storage_buffers_per_shader_stage);
    printf("        workgroup storage %u KiB, %u invocations per workgroup, %u workgroups per dimension",
           w.max_compute_workgroup_storage_size >> 10, w.max_compute_invocations_per_workgroup,
           w.max_compute_workgroups_per_dimension);
    if (w.subgroup_max_size) printf(", subgroups %u-%u", w.subgroup_min_size, w.subgroup_max_size);
    printf("\n");
    webgpu_features(&w);
    return 0;
}

static int run_example(const char *ex, const tg_example_opts *o) {
    if (!strcmp(ex, "sin")) return example_sin(o);
    if (!strcmp(ex, "addition")) return example_addition(o);
    if (!strcmp(ex, "names")) return example_names(o);
    if (!strcmp(ex, "gpt_small")) return example_gpt_small(o);
    if (!strcmp(ex, "digits")) return example_digits(o);
    if (!strcmp(ex, "vae")) return example_vae(o);
    fprintf(stderr, "tg: unknown example '%s'\n", ex);
    return usage(stderr);
}

static int parse_backend(const char *v, tg_backend *out) {
    if (v && !strcmp(v, "cpu")) *out = TG_BACKEND_CPU;
    else if (v && !strcmp(v, "webgpu")) *out = TG_BACKEND_WEBGPU;
    else {
        fprintf(stderr, "tg: unknown backend '%s' (cpu or webgpu)\n", v ? v : "");
        return 2;
    }
    return 0;
}

/* tg plan <example> [--backend B] [--json] */
static int plan_cmd(int argc, char **argv) {
    if (argc < 3) return usage(stderr);
    tg_example_opts o = {.plan = 1, .quiet = true};
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) o.plan = 2;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            if (parse_backend(argv[++i], &o.backend)) return 2;
        } else {
            fprintf(stderr, "tg: unknown option '%s' for plan\n", argv[i]);
            return usage(stderr);
        }
    }
    return run_example(argv[2], &o);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) return usage(argc < 2 ? stderr : stdout);
    if (!strcmp(argv[1], "devices")) return devices();
    if (!strcmp(argv[1], "plan")) return plan_cmd(argc, argv);
    if (strcmp(argv[1], "train") != 0 || argc < 3) return usage(stderr);
    tg_example_opts o = {0};
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--steps") && v) o.steps = atoll(argv[++i]);
        else if (!strcmp(a, "--seed") && v) o.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--threads") && v) o.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--quiet")) o.quiet = true;
        else if (!strcmp(a, "--checkpoint") && v) o.checkpoint = argv[++i];
        else if (!strcmp(a, "--bench") && v) o.bench = atoi(argv[++i]);
        else if (!strcmp(a, "--out") && v) o.out = argv[++i];
        else if (!strcmp(a, "--backend") && v) {
            if (parse_backend(argv[++i], &o.backend)) return 2;
        } else {
            fprintf(stderr, "tg: unknown option '%s'\n", a);
            return usage(stderr);
        }
    }
    return run_example(argv[2], &o);
}
