/* Writes the fuzzers' seed corpora: files the library itself writes. */
#include <stdio.h>

#include "fuzz_model.h"

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    tg_session *s = fuzz_session();
    if (!s) return 1;
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, y[8] = {0}, loss;
    tg_feed f[] = {TG_FEED("x", x, 12), TG_FEED("y", y, 8)};
    char path[512];
    for (int k = 0; k < 3; k++) {
        tg_session_step(s, f, 2, &loss);
        snprintf(path, sizeof path, "%s/full%d.safetensors", argv[1], k);
        if (tg_session_save(s, path) != TG_OK) return 1;
        snprintf(path, sizeof path, "%s/params%d.safetensors", argv[1], k);
        if (tg_session_save_params(s, path) != TG_OK) return 1;
    }
    return 0;
}
