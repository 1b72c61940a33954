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
    const char *out;        /* an output file the example writes (vae: its PNG); NULL = its default */
    int bench;              /* > 0: time this many steps on one fixed batch, print JSON, skip the rest */
    int plan;               /* 1: compile only and print the plan's totals; 2: the same as one JSON line */
} tg_example_opts;

int example_sin(const tg_example_opts *o);
int example_addition(const tg_example_opts *o);
int example_names(const tg_example_opts *o);
int example_gpt_small(const tg_example_opts *o);
int example_digits(const tg_example_opts *o);
int example_vae(const tg_example_opts *o);

/* The 8x8 digits (digits_data.c): pixels scaled to [0, 1], images [n, 64]
 * in one fixed shuffled order; the first n_train train, the last n_test
 * (20%) test. Returns 0, or 1 after printing why not. */
typedef struct {
    int n, n_train, n_test;
    float *x;
    int32_t *y;
} ex_digits;
int ex_digits_load(ex_digits *d);
void ex_digits_free(ex_digits *d);

/* png.c: an 8-bit greyscale PNG of w x h pixels (row-major); 0 on success. */
int ex_write_png_gray(const char *path, const uint8_t *pix, int w, int h);

/* Helpers shared by the examples (common.c). */
double ex_now(void);                         /* monotonic seconds */
uint64_t ex_rand(uint64_t *state);           /* 31 random bits */
float ex_uniform(uint64_t *state);           /* [0, 1) */
/* The path of an example data set ("words", "digits"), fetched by
 * scripts/fetch-data.sh when missing. False if it cannot be had. */
bool ex_data_path(const char *what, char *out, size_t n);
/* Prints one JSON line for `make bench`: median/min of the n step times (ms,
 * sorted in place), dispatches per step and planned bytes. */
void ex_bench_report(const char *model, const tg_session *s, tg_backend be, double *ms, int n);
/* `tg plan`: the plan's totals by category and the dispatches per step of a
 * compiled, never-run session; mode 2 prints one JSON line with the keys
 * --bench uses (planned_bytes, naive_bytes, dispatches). Returns an exit code. */
int ex_plan_report(const char *model, const tg_session *s, tg_backend be, int mode);
#define EX_BENCH_WARMUP 10
/* Warms up, then times `steps` training steps on the same feeds (reading the
 * loss every step) and prints the JSON line. Returns an exit code. */
int ex_bench_loop(const char *model, tg_session *s, tg_backend be, const tg_feed *feeds, int n_feeds, int steps);
#define EX_PI 3.14159265358979323846
#endif
