/* libFuzzer: the safetensors reader on arbitrary bytes. Any input must give
 * TG_OK or an error; on TG_OK every tensor's data must be readable. */
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tg_safetensors *f = NULL;
    if (tg_st_parse("fuzz", data, size, &f) != TG_OK) return 0;
    volatile float sink = 0;
    for (int i = 0; i < tg_safetensors_count(f); i++) {
        const tg_st_tensor *t = tg_safetensors_tensor(f, i);
        int64_t n = tg_shape_numel(t->shape);
        for (int64_t e = 0; e < n; e += 97) sink += ((const float *)t->data)[e];
        if (tg_safetensors_find(f, t->name) == NULL) __builtin_trap();
    }
    tg_safetensors_free(f);
    return 0;
}
