/* Batches of an in-memory dataset (tg_data_*): a validation split held out
 * once, then per epoch the training samples in an order drawn from (seed,
 * epoch), gathered sample by sample into the set's own buffers. Everything
 * happens on the host, so the batches do not depend on the backend or the
 * thread count. */
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

struct tg_data {
    tg_data_spec spec;
    tg_data_field *fields; /* copies, names owned */
    int64_t *order[2];     /* per split: the samples, in this epoch's order (train) or the data's (val) */
    int64_t count[2], at[2], epoch[2], index[2];
    void **buf;            /* per field, batch samples */
    tg_feed *feeds;
    int64_t *samples;      /* the batch's */
};

/* splitmix64: the stream each shuffle draws from */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fisher-Yates over v[0..n) from the stream of `key` (the modulo's bias is
 * below n / 2^64). */
static void shuffle(int64_t *v, int64_t n, uint64_t key) {
    uint64_t s = key;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(mix(&s) % (uint64_t)(i + 1));
        int64_t t = v[i];
        v[i] = v[j], v[j] = t;
    }
}

static uint64_t epoch_key(const tg_data *d, int64_t epoch) {
    uint64_t s = d->spec.seed ^ 0x5eedda7aull;
    uint64_t a = mix(&s);
    s = a ^ (uint64_t)epoch * 0xd1342543de82ef95ull;
    return mix(&s);
}

void tg_data_free(tg_data *d) {
    if (!d) return;
    for (int f = 0; d->fields && f < d->spec.n_fields; f++) free((char *)d->fields[f].name);
    for (int f = 0; d->buf && f < d->spec.n_fields; f++) free(d->buf[f]);
    free(d->fields);
    free(d->buf);
    free(d->feeds);
    free(d->order[0]);
    free(d->order[1]);
    free(d->samples);
    free(d);
}

static tg_status check(const tg_data_spec *sp) {
    const char *api = "tg_data_new";
    if (!sp->fields || sp->n_fields < 1) return tg_fail(TG_ERR_ARG, "%s: spec->fields is empty", api);
    if (sp->n < 1 || sp->batch < 1 || sp->n_val < 0 || sp->n_val >= sp->n)
        return tg_fail(TG_ERR_ARG, "%s: %lld samples, batch %lld, %lld held out: want n >= 1, batch >= 1 and "
                       "0 <= n_val < n", api, (long long)sp->n, (long long)sp->batch, (long long)sp->n_val);
    if ((unsigned)sp->last > TG_LAST_FILL || (unsigned)sp->last_val > TG_LAST_FILL)
        return tg_fail(TG_ERR_ARG, "%s: spec->last or last_val is not a tg_last_batch", api);
    for (int f = 0; f < sp->n_fields; f++) {
        const tg_data_field *x = &sp->fields[f];
        int64_t bytes;
        if (!x->name || !x->data || (x->dtype != TG_F32 && x->dtype != TG_I32) || x->size < 1 ||
            __builtin_mul_overflow(x->size, sp->batch, &bytes) || bytes > TG_MAX_NUMEL ||
            __builtin_mul_overflow(x->size, sp->n, &bytes))
            return tg_fail(TG_ERR_ARG, "%s: field %d ('%s'): want a name, data, dtype TG_F32 or TG_I32 and a size >= 1 "
                           "(got size %lld)", api, f, x->name ? x->name : "(null)", (long long)x->size);
        for (int g = 0; g < f; g++)
            if (strcmp(sp->fields[g].name, x->name) == 0)
                return tg_fail(TG_ERR_ARG, "%s: two fields are called '%s'", api, x->name);
    }
    int64_t train = sp->n - sp->n_val;
    if (sp->last == TG_LAST_DROP && train < sp->batch)
        return tg_fail(TG_ERR_ARG, "%s: %lld training samples make no full batch of %lld (their last batch is "
                       "dropped)", api, (long long)train, (long long)sp->batch);
    if (sp->n_val && sp->last_val == TG_LAST_DROP && sp->n_val < sp->batch)
        return tg_fail(TG_ERR_ARG, "%s: %lld validation samples make no full batch of %lld (their last batch is "
                       "dropped)", api, (long long)sp->n_val, (long long)sp->batch);
    return TG_OK;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

tg_status tg_data_new(const tg_data_spec *spec, tg_data **out) {
    if (!out) return tg_fail(TG_ERR_ARG, "tg_data_new: out is NULL");
    *out = NULL;
    if (!spec) return tg_fail(TG_ERR_ARG, "tg_data_new: spec is NULL");
    tg_status st = check(spec);
    if (st != TG_OK) return st;
    tg_data *d = tg_calloc(1, sizeof *d);
    int nf = spec->n_fields;
    if (d) {
        d->spec = *spec;
        d->fields = tg_calloc((size_t)nf, sizeof *d->fields);
        d->buf = tg_calloc((size_t)nf, sizeof *d->buf);
        d->feeds = tg_calloc((size_t)nf, sizeof *d->feeds);
        d->samples = tg_calloc((size_t)spec->batch, sizeof *d->samples);
        d->order[0] = tg_calloc((size_t)(spec->n - spec->n_val) + 1, sizeof(int64_t));
        d->order[1] = tg_calloc((size_t)spec->n_val + 1, sizeof(int64_t));
    }
    bool ok = d && d->fields && d->buf && d->feeds && d->samples && d->order[0] && d->order[1];
    for (int f = 0; ok && f < nf; f++) {
        d->fields[f] = spec->fields[f];
        ok = (d->fields[f].name = tg_strdup(spec->fields[f].name)) != NULL &&
             (d->buf[f] = tg_calloc((size_t)(spec->batch * spec->fields[f].size), 4)) != NULL;
    }
    if (!ok) {
        tg_data_free(d);
        return tg_fail(TG_ERR_NOMEM, "tg_data_new: out of memory");
    }
    d->spec.fields = d->fields;
    /* the split: the first n_val of a permutation drawn from the seed, each
     * side kept in the data's order */
    int64_t *all = tg_calloc((size_t)spec->n, sizeof(int64_t));
    if (!all) {
        tg_data_free(d);
        return tg_fail(TG_ERR_NOMEM, "tg_data_new: out of memory");
    }
    for (int64_t i = 0; i < spec->n; i++) all[i] = i;
    if (spec->n_val) shuffle(all, spec->n, epoch_key(d, -1));
    d->count[1] = spec->n_val;
    d->count[0] = spec->n - spec->n_val;
    memcpy(d->order[1], all, sizeof(int64_t) * (size_t)d->count[1]);
    memcpy(d->order[0], all + d->count[1], sizeof(int64_t) * (size_t)d->count[0]);
    free(all);
    qsort(d->order[0], (size_t)d->count[0], sizeof(int64_t), cmp_i64);
    qsort(d->order[1], (size_t)d->count[1], sizeof(int64_t), cmp_i64);
    *out = d;
    return TG_OK;
}

int64_t tg_data_count(const tg_data *d, tg_split split) { return d && (unsigned)split <= TG_SPLIT_VAL ? d->count[split] : 0; }

int64_t tg_data_batches(const tg_data *d, tg_split split) {
    if (!d || (unsigned)split > TG_SPLIT_VAL) return 0;
    int64_t n = d->count[split], b = d->spec.batch;
    tg_last_batch last = split == TG_SPLIT_TRAIN ? d->spec.last : d->spec.last_val;
    return last == TG_LAST_DROP ? n / b : (n + b - 1) / b;
}

bool tg_data_next(tg_data *d, tg_split split, tg_batch *out) {
    if (!d || !out || (unsigned)split > TG_SPLIT_VAL) return false;
    int64_t n = d->count[split], b = d->spec.batch, at = d->at[split];
    tg_last_batch last = split == TG_SPLIT_TRAIN ? d->spec.last : d->spec.last_val;
    if (split == TG_SPLIT_TRAIN && at == 0 && !d->spec.no_shuffle) { /* a new epoch: its order */
        qsort(d->order[0], (size_t)n, sizeof(int64_t), cmp_i64);
        shuffle(d->order[0], n, epoch_key(d, d->epoch[0]));
    }
    int64_t left = n - at;
    if (left <= 0 || (left < b && last == TG_LAST_DROP)) { /* the end of the epoch */
        d->at[split] = 0;
        d->index[split] = 0;
        d->epoch[split]++;
        return false;
    }
    int64_t fresh = left < b ? left : b, count = last == TG_LAST_PARTIAL ? fresh : b;
    for (int64_t i = 0; i < count; i++) /* FILL: the epoch's first samples again */
        d->samples[i] = d->order[split][i < fresh ? at + i : (i - fresh) % n];
    for (int f = 0; f < d->spec.n_fields; f++) {
        const tg_data_field *x = &d->fields[f];
        size_t row = (size_t)x->size * 4;
        for (int64_t i = 0; i < count; i++)
            memcpy((char *)d->buf[f] + (size_t)i * row, (const char *)x->data + (size_t)d->samples[i] * row, row);
        d->feeds[f] = (tg_feed){x->name, d->buf[f], count * x->size, x->dtype};
    }
    *out = (tg_batch){d->feeds, d->spec.n_fields, count, fresh, d->samples, d->epoch[split], d->index[split]};
    d->at[split] = at + fresh;
    d->index[split]++;
    return true;
}
