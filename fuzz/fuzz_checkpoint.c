/* libFuzzer: the checkpoint loaders on arbitrary files. A load either
 * succeeds or fails leaving the session exactly as it was. Seeds: files
 * tg_session_save and tg_session_save_params write (fuzz/seed.c). Each
 * input is loaded as it is, then (when it has a checksum) with its checksum
 * recomputed, as a forger would: the loaders' checks behind the checksum
 * see the mutations too. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_model.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tg_session *s;
    static char path[64];
    if (!s) {
        s = fuzz_session();
        snprintf(path, sizeof path, "/tmp/tg_fuzz_ck.%ld", (long)getpid());
    }
    if (!s) return 0;
    uint8_t *sealed = malloc(size ? size : 1);
    if (!sealed) return 0;
    if (size) memcpy(sealed, data, size);
    bool resealed = tg_st_reseal(sealed, size);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(sealed);
        return 0;
    }
    fwrite(data, 1, size, f);
    fclose(f);
    float before[FUZZ_NP], after[FUZZ_NP];
    fuzz_params(s, before);
    int64_t step = tg_session_step_count(s);
    for (int k = 0; k < 4; k++) {
        bool full = k & 1;
        if (k == 2) {
            if (!resealed || !(f = fopen(path, "wb"))) break;
            fwrite(sealed, 1, size, f);
            fclose(f);
        }
        tg_status st = full ? tg_session_load(s, path) : tg_session_load_params(s, path);
        fuzz_params(s, after);
        if (st != TG_OK && (memcmp(before, after, sizeof before) != 0 || tg_session_step_count(s) != step))
            __builtin_trap(); /* a refused load changed the session */
        if (st == TG_OK) {
            memcpy(before, after, sizeof before);
            step = tg_session_step_count(s);
        }
    }
    free(sealed);
    return 0;
}
