/* Models: named param declarations. Values live in sessions. */
#ifndef TG_MODEL_H
#define TG_MODEL_H
#include "tensorgrad.h"

typedef struct {
    char *name;
    tg_shape shape;
    tg_init init;     /* values, if any, owned */
    tg_dtype dtype;   /* f32, or i32 (never trained: no gradient) */
    bool decay;       /* weight decay applies */
    bool frozen;      /* no gradient, no update */
} tg_param_decl;

struct tg_model {
    tg_param_decl *params;
    int n, cap;
    int64_t numel; /* the params' elements, summed as they are declared */
    int *slots;    /* names hashed, open addressing: a param's index + 1, 0 empty */
    int n_slots;   /* a power of two, at least twice n */
    tg_status err;
    char errmsg[256];
};

/* Fills dst (numel 4-byte elements of the param's dtype: i32 params get
 * int32 bits) with the param's initial values for `seed`. */
void tg_model_init_param(const tg_model *m, int p, uint64_t seed, float *dst);
/* For a name m has no param of: "; did you mean 'l1.W'?" (up to three of
 * its nearest names, "'a' or 'b'"), or "" when none is near, into buf[n]. */
void tg_model_name_hint(const tg_model *m, const char *name, char *buf, size_t n);
#endif
