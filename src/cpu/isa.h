/* The CPU path: which instruction set the CPU kernels use. The best one
 * this CPU supports, or a lower one named by $TG_CPU (avx512, avx2,
 * generic; neon or generic on aarch64; simd128 or generic in WebAssembly), read once. Every kernel with
 * per-target code asks tg_cpu_isa(), so the override governs all of them. */
#ifndef TG_CPU_ISA_H
#define TG_CPU_ISA_H
#include <stdbool.h>
#include <stddef.h>

/* CPU_SIMD128: WebAssembly's 128-bit SIMD (the WebAssembly build, web/). */
typedef enum { CPU_GENERIC, CPU_NEON, CPU_AVX2, CPU_AVX512, CPU_SIMD128 } cpu_isa_t;

cpu_isa_t tg_cpu_isa(void);
cpu_isa_t tg_cpu_isa_best(void);
const char *tg_cpu_isa_name(cpu_isa_t isa);
/* False (and a message in err) when $TG_CPU names no path or one above
 * what the CPU has; tg_cpu_isa() then runs the best one. */
bool tg_cpu_isa_env_ok(char *err, size_t n);
/* Tests: run `isa` from now on (false if the CPU lacks it). */
bool tg_cpu_isa_set(cpu_isa_t isa);

/* A kernel compiled once per x86 path from one body, chosen per call by
 * tg_cpu_isa():
 *     TG_MULTI(static, name, (params), (args)) { body }
 * defines name(params) (void), dispatching to copies of the body compiled
 * for AVX-512, AVX2+FMA and the baseline. The body is forced inline into
 * each copy, so the vector helpers it calls (vmath.h) compile to that
 * target's registers. Elsewhere the body is the function itself (on
 * aarch64 the baseline has NEON). */
#if defined(__x86_64__) && defined(__GNUC__)
#define TG_MULTI(decl, name, params, args)                                                       \
    static inline __attribute__((always_inline)) void name##_body params;                     \
    __attribute__((target("avx512f,fma"))) static void name##_avx512 params { name##_body args; } \
    __attribute__((target("avx2,fma"))) static void name##_avx2 params { name##_body args; }     \
    static void name##_generic params { name##_body args; }                                    \
    decl void name params {                                                                    \
        cpu_isa_t isa_ = tg_cpu_isa();                                                            \
        if (isa_ == CPU_AVX512) name##_avx512 args;                                            \
        else if (isa_ == CPU_AVX2) name##_avx2 args;                                           \
        else name##_generic args;                                                              \
    }                                                                                          \
    static inline __attribute__((always_inline)) void name##_body params
#else
#define TG_MULTI(decl, name, params, args) decl void name params
#endif
#endif
