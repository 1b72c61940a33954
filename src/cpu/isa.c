/* The CPU path (isa.h): detected once, lowered by $TG_CPU. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"
#include "cpu.h"

static const char *const names[] = {"generic", "neon", "avx2", "avx512", "simd128"};
_Static_assert(sizeof names / sizeof *names == CPU_SIMD128 + 1, "a name per CPU path");

const char *tg_cpu_isa_name(cpu_isa_t isa) { return names[isa]; }

cpu_isa_t tg_cpu_isa_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return CPU_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CPU_AVX2;
#elif defined(__aarch64__)
    return CPU_NEON;
#elif defined(__wasm_simd128__)
    return CPU_SIMD128;
#endif
    return CPU_GENERIC;
}

/* Whether `isa` runs here: the best path or one below it on the same family. */
static bool runs_here(cpu_isa_t isa, cpu_isa_t best) {
    if (isa == CPU_GENERIC || isa == best) return true;
    return best == CPU_AVX512 && isa == CPU_AVX2;
}

/* The path $TG_CPU asks for; the best one when unset, unknown or too high
 * (err says which). */
static cpu_isa_t from_env(char *err, size_t n, bool *ok) {
    cpu_isa_t best = tg_cpu_isa_best();
    const char *e = getenv("TG_CPU");
    *ok = true;
    if (!e || !*e) return best;
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(e, names[i])) {
            if (runs_here((cpu_isa_t)i, best)) return (cpu_isa_t)i;
            *ok = false;
            if (err)
                snprintf(err, n, "TG_CPU=%s: this CPU's best path is %s (%s%s)", e, names[best], names[best],
                         best == CPU_AVX512 ? ", avx2, generic" : best == CPU_GENERIC ? "" : ", generic");
            return best;
        }
    *ok = false;
    if (err)
        snprintf(err, n, "TG_CPU=%s: unknown CPU path (%s)", e,
                 best == CPU_NEON ? "neon or generic" : best == CPU_SIMD128 ? "simd128 or generic" : "avx512, avx2 or generic");
    return best;
}

static atomic_int chosen = -1;

cpu_isa_t tg_cpu_isa(void) {
    int c = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (c < 0) {
        bool ok;
        c = (int)from_env(NULL, 0, &ok);
        atomic_store_explicit(&chosen, c, memory_order_relaxed);
    }
    return (cpu_isa_t)c;
}

bool tg_cpu_isa_env_ok(char *err, size_t n) {
    bool ok;
    from_env(err, n, &ok);
    return ok;
}

bool tg_cpu_isa_set(cpu_isa_t isa) {
    if (!runs_here(isa, tg_cpu_isa_best())) return false;
    atomic_store(&chosen, (int)isa);
    return true;
}

/* ---- the public description (tensorgrad.h) ---- */

/* What each kernel family runs on each path; kept beside the dispatch in
 * the files named. */
static void describe(cpu_isa_t isa, char *buf, size_t n) {
    const char *v = isa == CPU_AVX512 ? "avx512" : isa == CPU_AVX2 ? "avx2" : isa == CPU_NEON ? "neon" : isa == CPU_SIMD128 ? "simd128" : "generic";
    bool k512 = isa == CPU_AVX512;
    snprintf(buf, n,
             "gemm %s; attention %s; vector math, softmax, norms, cross-entropy %s (16-lane vectors%s); "
             "conv rows %s; 2x2 pooling %s; elementwise passes %s; Adam pass %s",
             tg_gemm_kernel_name(),                              /* gemm_kernels.c */
             k512 ? "avx512" : isa == CPU_AVX2 ? "avx2 8-lane (T <= 8), fma vectors" : "8-lane (T <= 8), vectors",
             /* fused_attention.c, fused_attention8.c */
             v, isa == CPU_AVX2 ? "; norm rows in 8-lane pairs" : "", /* TG_MULTI kernels, norm_avx2.c */
             k512 ? "avx512" : isa == CPU_AVX2 ? "avx2" : "generic", /* kernels_conv.c */
             k512 ? "avx512" : isa == CPU_AVX2 ? "avx2" : "index tables", /* pool2x2.c */
             k512 ? "avx512" : isa == CPU_GENERIC ? "generic" : v, /* vec.c */
             k512 ? "avx512" : isa == CPU_AVX2 ? "avx2" : "generic"); /* vec.c */
}

tg_status tg_cpu_info(tg_cpu_path_info *out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_cpu_info: out is NULL");
    char why[160];
    bool ok = tg_cpu_isa_env_ok(why, sizeof why);
    out->path = tg_cpu_isa_name(tg_cpu_isa());
    out->best = tg_cpu_isa_name(tg_cpu_isa_best());
    describe(tg_cpu_isa(), out->kernels, sizeof out->kernels);
    return ok ? TG_OK : tg_fail(TG_ERR_ARG, "tg_cpu_info: %s", why);
}
