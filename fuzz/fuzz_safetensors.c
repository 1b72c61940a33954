/* libFuzzer: the safetensors reader on arbitrary bytes, through the internal
 * parser and the public memory entry (which must agree). Any input must give
 * TG_OK or an error; on TG_OK every tensor's data must be readable (F16 and
 * BF16 ones converted) and every skipped tensor listed with a dtype. */
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tg_safetensors *f = NULL, *g = NULL;
    tg_status sf = tg_st_parse("fuzz", data, size, &f), sg = tg_safetensors_read_mem(data, size, &g);
    if (sf != sg) __builtin_trap();
    if (sf != TG_OK) return 0;
    if (tg_safetensors_count(f) != tg_safetensors_count(g) ||
        tg_safetensors_skipped_count(f) != tg_safetensors_skipped_count(g))
        __builtin_trap();
    volatile float sink = 0;
    for (int i = 0; i < tg_safetensors_count(f); i++) {
        const tg_st_tensor *t = tg_safetensors_tensor(f, i), *u = tg_safetensors_tensor(g, i);
        int64_t n = tg_shape_numel(t->shape);
        for (int64_t e = 0; e < n; e += 97) sink += ((const float *)t->data)[e];
        if (n && memcmp(t->data, u->data, 4 * (size_t)n) != 0) __builtin_trap();
        if (tg_safetensors_find(f, t->name) == NULL) __builtin_trap();
    }
    for (int i = 0; i < tg_safetensors_skipped_count(f); i++) {
        const char *dt = NULL, *name = tg_safetensors_skipped(f, i, &dt);
        if (!name || !dt || !*dt || tg_safetensors_find(f, name)) __builtin_trap();
    }
    tg_safetensors_free(f);
    tg_safetensors_free(g);
    return 0;
}
