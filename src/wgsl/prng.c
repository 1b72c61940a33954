/* The counter-based PRNG of src/util/util.c in WGSL. u32 arithmetic wraps in
 * both languages, so these return exactly tg_hash32 / tg_rng_u32; the 64-bit
 * seed arrives as two u32 halves. Kernels that draw random numbers append
 * this text to their source. */
#include "wgsl.h"

const char tg_wgsl_prng[] =
    "fn tg_hash32(v: u32) -> u32 {\n"
    "    var x = v;\n"
    "    x ^= x >> 16u;\n"
    "    x *= 0x7feb352du;\n"
    "    x ^= x >> 15u;\n"
    "    x *= 0x846ca68bu;\n"
    "    x ^= x >> 16u;\n"
    "    return x;\n"
    "}\n"
    "fn tg_rng_u32(seed_lo: u32, seed_hi: u32, salt: u32, index: u32) -> u32 {\n"
    "    var h = tg_hash32(seed_lo ^ tg_hash32(seed_hi + 0x9e3779b9u));\n"
    "    h = tg_hash32(h ^ salt);\n"
    "    return tg_hash32(h + index * 0x9e3779b9u);\n"
    "}\n";
