/* The counter-based PRNG of src/util/util.h in WGSL. u32 arithmetic wraps in
 * both languages, so the integer functions return exactly what tg_hash32,
 * tg_rng_key, tg_rng_key_u32 and tg_rng_u32 return, and the uniform is the
 * same 24-bit value; the normal (log, sqrt, cos) agrees to a few ulp. The
 * 64-bit seed arrives as two u32 halves. Random-op kernels include this
 * text and fold (seed, salt) into a key once per invocation. */
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
    "fn tg_rng_key(seed_lo: u32, seed_hi: u32, salt: u32) -> u32 {\n"
    "    return tg_hash32(tg_hash32(seed_lo ^ tg_hash32(seed_hi + 0x9e3779b9u)) ^ salt);\n"
    "}\n"
    "fn tg_rng_key_u32(key: u32, index: u32) -> u32 { return tg_hash32(key + index * 0x9e3779b9u); }\n"
    "fn tg_rng_key_uniform(key: u32, index: u32) -> f32 {\n"
    "    return f32(tg_rng_key_u32(key, index) >> 8u) * (1.0f / 16777216.0f);\n"
    "}\n"
    "fn tg_rng_key_normal(key: u32, index: u32) -> f32 {\n"
    "    let u1 = 1.0f - tg_rng_key_uniform(key, 2u * index);\n"
    "    let u2 = tg_rng_key_uniform(key, 2u * index + 1u);\n"
    "    return sqrt(-2.0f * log(u1)) * cos(6.28318530717958647692f * u2);\n"
    "}\n"
    "fn tg_rng_u32(seed_lo: u32, seed_hi: u32, salt: u32, index: u32) -> u32 {\n"
    "    return tg_rng_key_u32(tg_rng_key(seed_lo, seed_hi, salt), index);\n"
    "}\n";
