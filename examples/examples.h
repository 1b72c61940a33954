/* The models `tg train <name>` runs. Each parses its own options and
 * returns a process exit code. */
#ifndef TG_EXAMPLES_H
#define TG_EXAMPLES_H
#include "tensorgrad.h"

typedef struct {
    int64_t steps;      /* 0 = the example's default */
    uint64_t seed;
    tg_backend backend;
    int threads;
    bool quiet;
    const char *checkpoint; /* where to save a checkpoint, NULL = the example's default */
} tg_example_opts;

int example_sin(const tg_example_opts *o);
int example_addition(const tg_example_opts *o);
int example_names(const tg_example_opts *o);

/* Helpers shared by the examples (common.c). */
double ex_now(void);                         /* monotonic seconds */
uint64_t ex_rand(uint64_t *state);           /* 31 random bits */
float ex_uniform(uint64_t *state);           /* [0, 1) */
/* The path of an example data set ("words", "digits"), fetched by
 * scripts/fetch-data.sh when missing. False if it cannot be had. */
bool ex_data_path(const char *what, char *out, size_t n);
#define EX_PI 3.14159265358979323846
#endif
