/* libFuzzer: the checkpoint loaders on arbitrary files. A load either
 * succeeds or fails leaving the session exactly as it was. Seeds: files
 * tg_session_save and tg_session_save_params write (fuzz/seed.c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tg_session *s;
    static char path[64];
    if (!s) {
        s = fuzz_session();
        snprintf(path, sizeof path, "/tmp/tg_fuzz_ck.%ld", (long)getpid());
    }
    if (!s) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    float before[FUZZ_NP], after[FUZZ_NP];
    fuzz_params(s, before);
    int64_t step = tg_session_step_count(s);
    for (int full = 0; full < 2; full++) {
        tg_status st = full ? tg_session_load(s, path) : tg_session_load_params(s, path);
        fuzz_params(s, after);
        if (st != TG_OK && (memcmp(before, after, sizeof before) != 0 || tg_session_step_count(s) != step))
            __builtin_trap(); /* a refused load changed the session */
        if (st == TG_OK) {
            memcpy(before, after, sizeof before);
            step = tg_session_step_count(s);
        }
    }
    return 0;
}
