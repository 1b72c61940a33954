/* Param declarations and seeded init. A param's init stream is salted by a
 * hash of its name, so adding a param does not change the others' values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ir.h"

tg_init tg_init_randn(float std) { return (tg_init){.kind = TG_INIT_RANDN, .scale = std, .decay = -1}; }
tg_init tg_init_zeros(void) { return (tg_init){.kind = TG_INIT_ZEROS, .decay = -1}; }
tg_init tg_init_ones(void) { return (tg_init){.kind = TG_INIT_ONES, .decay = -1}; }
tg_init tg_init_kaiming(void) { return (tg_init){.kind = TG_INIT_KAIMING, .decay = -1}; }
tg_init tg_init_values(const float *v) { return (tg_init){.kind = TG_INIT_VALUES, .values = v, .decay = -1}; }

tg_model *tg_model_new(void) { return tg_calloc(1, sizeof(tg_model)); }

void tg_model_free(tg_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->params[i].name);
        free((void *)m->params[i].init.values);
    }
    free(m->params);
    free(m->slots);
    free(m);
}

/* Names are found through a hash table, so that declaring n params takes
 * time proportional to n, not n squared. */
static uint32_t name_hash(const char *name) {
    uint32_t h = 2166136261u;
    for (; *name; name++) h = (h ^ (uint8_t)*name) * 16777619u;
    return h;
}

static void index_put(int *slots, int n_slots, const char *name, int p) {
    uint32_t i = name_hash(name) & (uint32_t)(n_slots - 1);
    while (slots[i]) i = (i + 1) & (uint32_t)(n_slots - 1);
    slots[i] = p + 1;
}

/* Room in the table for n params; false when out of memory. */
static bool index_reserve(tg_model *m, int n) {
    if (n <= m->n_slots / 2) return true;
    if (n > (1 << 29)) return false;
    int n_slots = m->n_slots ? m->n_slots : 32;
    while (n > n_slots / 2) n_slots *= 2;
    int *slots = tg_calloc((size_t)n_slots, sizeof *slots);
    if (!slots) return false;
    for (int p = 0; p < m->n; p++) index_put(slots, n_slots, m->params[p].name, p);
    free(m->slots);
    m->slots = slots;
    m->n_slots = n_slots;
    return true;
}

static tg_param model_fail(tg_model *m, tg_status s, const char *fmt, const char *name) {
    if (m->err == TG_OK) {
        m->err = s;
        snprintf(m->errmsg, sizeof m->errmsg, fmt, name ? name : "(null)");
    }
    tg_fail(s, "%s", m->errmsg);
    return -1;
}

tg_param tg_model_param(tg_model *m, const char *name, tg_shape shape, tg_init init) {
    return tg_model_param_dt(m, name, shape, TG_F32, init);
}

/* An i32 param holds integers: only inits that give integers, and values
 * that are whole numbers an int32 holds. */
static tg_param check_i32(tg_model *m, const char *name, tg_shape shape, tg_init init) {
    if (init.kind != TG_INIT_ZEROS && init.kind != TG_INIT_ONES && init.kind != TG_INIT_VALUES)
        return model_fail(m, TG_ERR_ARG, "tg_model_param_dt: '%s' is i32: its init must be zeros, ones or values",
                          name);
    int64_t n = init.kind == TG_INIT_VALUES ? tg_shape_numel(shape) : 0;
    for (int64_t i = 0; i < n; i++) {
        float v = init.values[i];
        if (!(v == floorf(v) && v >= -2147483648.0f && v < 2147483648.0f)) {
            char what[300];
            snprintf(what, sizeof what, "tg_model_param_dt: '%%s' is i32, but value %lld (%g) is not an int32",
                     (long long)i, (double)v);
            return model_fail(m, TG_ERR_ARG, what, name);
        }
    }
    return 0;
}

tg_param tg_model_param_dt(tg_model *m, const char *name, tg_shape shape, tg_dtype dtype, tg_init init) {
    if (!m) return -1;
    if (!name || !*name) return model_fail(m, TG_ERR_NAME, "tg_model_param: empty name%s", "");
    if (tg_model_find(m, name) >= 0) return model_fail(m, TG_ERR_NAME, "tg_model_param: duplicate name '%s'", name);
    if (shape.ndim < 0 || shape.ndim > TG_MAX_DIMS)
        return model_fail(m, TG_ERR_SHAPE, "tg_model_param: '%s' has a bad number of dims", name);
    for (int i = 0; i < shape.ndim; i++)
        if (shape.d[i] <= 0) return model_fail(m, TG_ERR_SHAPE, "tg_model_param: '%s' has a dim <= 0", name);
    if (!tg_ir_numel_ok(shape) || tg_model_numel(m) > TG_MAX_NUMEL - tg_shape_numel(shape))
        return model_fail(m, TG_ERR_LIMIT, "tg_model_param: '%s' takes the model past TG_MAX_NUMEL elements", name);
    if ((unsigned)init.kind > TG_INIT_VALUES)
        return model_fail(m, TG_ERR_ARG, "tg_model_param: '%s' has an unknown init kind", name);
    /* NaN read as "default" and inf drew a param of infinities, both without a word. */
    if (!isfinite(init.scale))
        return model_fail(m, TG_ERR_ARG, "tg_model_param: '%s' has a non-finite init scale", name);
    if (init.decay < -1 || init.decay > 1)
        return model_fail(m, TG_ERR_ARG, "tg_model_param: '%s' has a decay other than -1 (default), 0 or 1", name);
    if (init.kind == TG_INIT_VALUES && !init.values)
        return model_fail(m, TG_ERR_ARG, "tg_model_param: '%s' has TG_INIT_VALUES with no values", name);
    if (dtype != TG_F32 && dtype != TG_I32)
        return model_fail(m, TG_ERR_ARG, "tg_model_param_dt: '%s': a param is f32 or i32", name);
    if (dtype == TG_I32 && check_i32(m, name, shape, init) < 0) return -1;
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 16;
        tg_param_decl *p = m->cap <= (1 << 29) ? tg_realloc(m->params, (size_t)cap * sizeof *p) : NULL;
        if (!p) return model_fail(m, TG_ERR_NOMEM, "tg_model_param: out of memory at '%s'", name);
        m->params = p;
        m->cap = cap;
    }
    tg_param_decl d = {0};
    d.name = tg_strdup(name);
    d.shape = shape;
    d.init = init;
    d.dtype = dtype;
    if (init.kind == TG_INIT_VALUES) {
        size_t bytes = (size_t)tg_shape_numel(shape) * sizeof(float);
        float *v = malloc(bytes ? bytes : 4);
        if (!v || !d.name) {
            free(v);
            free(d.name);
            return model_fail(m, TG_ERR_NOMEM, "tg_model_param: out of memory at '%s'", name);
        }
        memcpy(v, init.values, bytes);
        d.init.values = v;
    }
    d.decay = init.decay >= 0 ? init.decay != 0 : (init.kind != TG_INIT_ZEROS && init.kind != TG_INIT_ONES);
    if (!d.name || !index_reserve(m, m->n + 1)) {
        free(d.name);
        if (init.kind == TG_INIT_VALUES) free((void *)d.init.values);
        return model_fail(m, TG_ERR_NOMEM, "tg_model_param: out of memory at '%s'", name);
    }
    m->params[m->n] = d;
    index_put(m->slots, m->n_slots, d.name, m->n);
    m->numel += tg_shape_numel(shape);
    return m->n++;
}

tg_status tg_model_freeze(tg_model *m, tg_param p) {
    if (!m || p < 0 || p >= m->n) return tg_fail(TG_ERR_ARG, "tg_model_freeze: no param %d", p);
    m->params[p].frozen = true;
    return TG_OK;
}

tg_status tg_model_status(const tg_model *m) {
    if (!m) return tg_fail(TG_ERR_ARG, "tg_model_status: NULL model");
    if (m->err != TG_OK) tg_fail(m->err, "%s", m->errmsg);
    return m->err;
}

int tg_model_param_count(const tg_model *m) { return m ? m->n : 0; }
const char *tg_model_param_name(const tg_model *m, tg_param p) {
    return m && p >= 0 && p < m->n ? m->params[p].name : NULL;
}
tg_shape tg_model_param_shape(const tg_model *m, tg_param p) {
    return m && p >= 0 && p < m->n ? m->params[p].shape : (tg_shape){0, {0}};
}
tg_dtype tg_model_param_dtype(const tg_model *m, tg_param p) {
    return m && p >= 0 && p < m->n ? m->params[p].dtype : TG_F32;
}

tg_param tg_model_find(const tg_model *m, const char *name) {
    if (!m || !name || !m->slots) return -1;
    for (uint32_t i = name_hash(name) & (uint32_t)(m->n_slots - 1); m->slots[i]; i = (i + 1) & (uint32_t)(m->n_slots - 1))
        if (strcmp(m->params[m->slots[i] - 1].name, name) == 0) return m->slots[i] - 1;
    return -1;
}

/* Edits (insert, delete, substitute) from a to b, counting at most 64
 * characters of each: names are compared for hints, not equality. */
static int len64(const char *s) {
    int k = 0;
    while (k < 64 && s[k]) k++;
    return k;
}

static int edit_distance(const char *a, const char *b) {
    int la = len64(a), lb = len64(b), row[65];
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up, row[j] = best;
        }
    }
    return row[lb];
}

/* PyTorch's names for upstream's: Linear and Conv .weight is .W (norms': .g),
 * .bias is .b. A name that differs only so is the nearest of all. */
static bool torch_alias(const char *name, const char *param) {
    const char *dn = strrchr(name, '.'), *dp = strrchr(param, '.');
    size_t k = dn ? (size_t)(dn - name) : 0;
    if (!dn || !dp || (size_t)(dp - param) != k || strncmp(name, param, k) != 0) return false;
    static const char *const pairs[][2] = {{"weight", "W"}, {"weight", "g"}, {"bias", "b"}, {"gamma", "g"}, {"beta", "b"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (!strcmp(dn + 1, pairs[i][0]) && !strcmp(dp + 1, pairs[i][1])) return true;
    return false;
}

/* Same path up to the last '.' (siblings in one module). */
static bool siblings(const char *a, const char *b) {
    const char *da = strrchr(a, '.'), *db = strrchr(b, '.');
    return da && db && da - a == db - b && strncmp(a, b, (size_t)(da - a)) == 0;
}

void tg_model_name_hint(const tg_model *m, const char *name, char *buf, size_t n) {
    if (!buf || n == 0) return;
    buf[0] = 0;
    if (!m || !name) return;
    /* A param is near when it is an alias (score 0), within about a third
     * of the name's length in edits, or a sibling; the best score wins. */
    int best = 1 << 30, limit = len64(name) / 3 + 1, pick[3], n_pick = 0;
    for (int i = 0; i < m->n; i++) {
        const char *q = m->params[i].name;
        int d = torch_alias(name, q) ? 0 : edit_distance(name, q);
        if (d > limit && !siblings(name, q)) continue;
        if (d < best) best = d, n_pick = 0;
        if (d == best && n_pick < 3) pick[n_pick++] = i;
    }
    size_t k = 0;
    for (int i = 0; i < n_pick && k < n; i++) {
        int w = snprintf(buf + k, n - k, "%s'%s'%s", i == 0 ? "; did you mean " : i == n_pick - 1 ? " or " : ", ",
                         m->params[pick[i]].name, i == n_pick - 1 ? "?" : "");
        if (w < 0) break;
        k += (size_t)w;
    }
}

int64_t tg_model_numel(const tg_model *m) { return m ? m->numel : 0; }

void tg_model_init_param(const tg_model *m, int p, uint64_t seed, float *dst) {
    const tg_param_decl *d = &m->params[p];
    int64_t n = tg_shape_numel(d->shape);
    uint32_t salt = tg_str_hash(d->name);
    float std = 0;
    switch (d->init.kind) {
    case TG_INIT_ZEROS: memset(dst, 0, (size_t)n * sizeof(float)); return;
    case TG_INIT_ONES:
        for (int64_t i = 0; i < n; i++) {
            if (d->dtype == TG_I32) memcpy(&dst[i], &(int32_t){1}, 4);
            else dst[i] = 1.0f;
        }
        return;
    case TG_INIT_VALUES:
        if (d->dtype == TG_I32) /* whole numbers in range, checked at declaration */
            for (int64_t i = 0; i < n; i++) memcpy(&dst[i], &(int32_t){(int32_t)d->init.values[i]}, 4);
        else
            memcpy(dst, d->init.values, (size_t)n * sizeof(float));
        return;
    case TG_INIT_RANDN: std = d->init.scale > 0 ? d->init.scale : 0.02f; break;
    case TG_INIT_KAIMING: {
        int64_t fan = d->init.fan_in;
        if (fan <= 0) {
            fan = 1;
            if (d->shape.ndim == 2) fan = d->shape.d[0];
            else
                for (int i = 1; i < d->shape.ndim; i++) fan *= d->shape.d[i];
        }
        float gain = d->init.scale > 0 ? d->init.scale : sqrtf(2.0f);
        std = gain / sqrtf((float)(fan > 0 ? fan : 1));
        break;
    }
    }
    for (int64_t i = 0; i < n; i++) dst[i] = std * tg_rng_normal(seed, salt, (uint32_t)i);
}
