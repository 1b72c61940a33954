/* Strided iteration (iter.h). */
#include "iter.h"

void tg_iter_init(tg_iter *it, tg_shape out, int nin, int64_t st_in[][TG_MAX_DIMS]) {
    int64_t ost[TG_MAX_DIMS];
    tg_shape_strides(out, ost);
    it->nops = nin + 1;
    it->nd = 0;
    for (int i = 0; i < out.ndim; i++) {
        if (out.d[i] == 1) continue;
        int k = it->nd;
        if (k > 0) { /* merge with the previous axis when every operand is contiguous across them */
            bool merge = ost[i] * out.d[i] == it->st[0][k - 1];
            for (int o = 0; o < nin && merge; o++) merge = st_in[o][i] * out.d[i] == it->st[o + 1][k - 1];
            if (merge) {
                it->d[k - 1] *= out.d[i];
                it->st[0][k - 1] = ost[i];
                for (int o = 0; o < nin; o++) it->st[o + 1][k - 1] = st_in[o][i];
                continue;
            }
        }
        it->d[k] = out.d[i];
        it->st[0][k] = ost[i];
        for (int o = 0; o < nin; o++) it->st[o + 1][k] = st_in[o][i];
        it->nd++;
    }
    if (it->nd == 0) { /* a scalar (or all-ones shape): one row of one */
        it->nd = 1;
        it->d[0] = 1;
        for (int o = 0; o <= nin; o++) it->st[o][0] = 0;
    }
    it->inner = it->d[it->nd - 1];
    it->rows = 1;
    for (int i = 0; i < it->nd - 1; i++) it->rows *= it->d[i];
    if (it->inner == 0) it->rows = 0; /* no elements: no rows, however many [.., 0] would have (2^31 x 0) */
}

void tg_iter_row(const tg_iter *it, int64_t r, int64_t *idx, int64_t *off) {
    for (int o = 0; o < it->nops; o++) off[o] = 0;
    for (int i = it->nd - 2; i >= 0; i--) {
        /* A zero-size axis has no rows; callers may still ask for row 0 of an empty range. */
        idx[i] = it->d[i] ? r % it->d[i] : 0;
        r = it->d[i] ? r / it->d[i] : 0;
        for (int o = 0; o < it->nops; o++) off[o] += idx[i] * it->st[o][i];
    }
}

void tg_iter_next(const tg_iter *it, int64_t *idx, int64_t *off) {
    for (int i = it->nd - 2; i >= 0; i--) {
        for (int o = 0; o < it->nops; o++) off[o] += it->st[o][i];
        if (++idx[i] < it->d[i]) return;
        for (int o = 0; o < it->nops; o++) off[o] -= it->st[o][i] * it->d[i];
        idx[i] = 0;
    }
}
