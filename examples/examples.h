/* The models `tg train <name>` runs. Each parses its own options and
 * returns a process exit code. */
#ifndef TG_EXAMPLES_H
#define TG_EXAMPLES_H
#include <stdio.h>

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
    const char *log;        /* --log: a CSV of step, loss, lr, time and the eval metric; NULL = none */
    const char *plot;       /* --plot: the loss curve as .png or .svg; NULL = none */
    FILE *graph;            /* tg graph: write the graph as DOT here instead of training */
    bool graph_compiled;    /* tg graph --compiled: the compiled graph (grad, optimizer, passes) */
    tg_comm *comm;          /* --dp (tg-mpi): the ranks training together; NULL alone */
    bool discard_grads;     /* --discard-grads: spec.discard_grads */
    int64_t batch, seq;     /* --batch, --seq: the batch's rows and tokens a row; 0 = the example's default */
    int64_t vocab, dim, layers, heads; /* --vocab, --dim, --layers, --heads (gpt2): the model; 0 = its default */
    float lr;               /* --lr: the peak learning rate; 0 = the example's (ex_lr) */
    int64_t log_every;      /* --log-every: --log and --plot take every N-th step; 0 = every step */
} tg_example_opts;

int example_sin(const tg_example_opts *o);
int example_addition(const tg_example_opts *o);
int example_names(const tg_example_opts *o);
int example_gpt_small(const tg_example_opts *o);
int example_gpt2(const tg_example_opts *o);
int example_digits(const tg_example_opts *o);
int example_vae(const tg_example_opts *o);
int example_pokeformer(const tg_example_opts *o);
int example_fashion_mlp(const tg_example_opts *o);
int example_flow(const tg_example_opts *o);
int example_diffusion(const tg_example_opts *o);
int example_nerf(const tg_example_opts *o);
int example_kan(const tg_example_opts *o);
int example_cartpole(const tg_example_opts *o);
int example_tictactoe(const tg_example_opts *o);
int example_fashion_cnn(const tg_example_opts *o);
int example_grokking(const tg_example_opts *o);
int example_transcoder(const tg_example_opts *o);
int example_nca(const tg_example_opts *o);
int example_transfer(const tg_example_opts *o);

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

/* Fashion-MNIST (fashion_data.c): Zalando's 60,000 training and 10,000 test
 * images of 28x28 greyscale pixels (u8, row-major) in 10 classes, from
 * Debian's dataset-fashion-mnist (scripts/fetch-data.sh fashion, fetched on
 * first use). Returns 0, or 1 after printing why not. */
#define EX_FASHION_CLASSES 10
#define EX_FASHION_SIDE 28
#define EX_FASHION_PIXELS (28 * 28)
typedef struct {
    int n_train, n_test;
    uint8_t *train_x, *test_x; /* [n, 784] */
    int32_t *train_y, *test_y; /* [n] in 0..9 */
} ex_fashion;
extern const char *const ex_fashion_classes[EX_FASHION_CLASSES];
int ex_fashion_load(ex_fashion *d);
void ex_fashion_free(ex_fashion *d);
/* out [n, 784] in [0, 1]: images[which[i]] (which NULL: the first n). */
void ex_fashion_pixels(const uint8_t *images, const int *which, int n, float *out);
/* A Fisher-Yates shuffle of order[0..n) from rng. */
void ex_fashion_shuffle(int *order, int n, uint64_t *rng);
/* Batches that walk a fresh shuffle of 0..n-1 each epoch. */
typedef struct {
    int *order, n, pos;
    uint64_t rng;
} ex_fashion_epochs;
void ex_fashion_epochs_init(ex_fashion_epochs *e, int n, uint64_t seed); /* order NULL: out of memory */
void ex_fashion_epochs_next(ex_fashion_epochs *e, int *which, int n);     /* the next n indices */
void ex_fashion_epochs_free(ex_fashion_epochs *e);
/* n images [n, 784] in [0, 1] as a greyscale PNG at `path`: 16 a row, each
 * pixel 2x2, on a dark grey grid. 0, or 1 after saying which file failed. */
int ex_fashion_write_grid(const char *path, const float *img, int n);

/* png.c: an 8-bit greyscale PNG of w x h pixels (row-major); 0 on success. */
int ex_write_png_gray(const char *path, const uint8_t *pix, int w, int h);
/* The same for 8-bit RGB, pix holding 3 bytes per pixel. */
int ex_write_png_rgb(const char *path, const uint8_t *pix, int w, int h);
/* png_read.c: an 8-bit greyscale or RGB(A) PNG, non-interlaced, as RGB: *pix
 * (malloc'ed, 3 bytes per pixel, row-major), *w, *h. Returns 0, or 1 after
 * printing what is wrong with the file and where. */
int ex_read_png_rgb(const char *path, uint8_t **pix, int *w, int *h);

/* words.c: the word list of the names examples, lowercased, 2..max_len
 * letters a-z, deduplicated, shuffled with `seed` and split 90/10. */
typedef struct {
    char *w;  /* n words of `stride` bytes, each NUL-terminated */
    int n, stride;
} ex_words;
int ex_words_load(int max_len, uint64_t seed, ex_words *train, ex_words *val);
void ex_words_free(ex_words *w);

/* plot.c: the loss curve (and the eval metric's points) as PNG or SVG. */
#define EX_PLOT_W 640
#define EX_PLOT_H 400
typedef struct {
    int64_t *step;
    float *loss;
    int n, cap;
    int64_t *eval_step;
    double *eval;
    int n_eval, cap_eval;
    const char *metric;
    /* a second metric measured at the same steps (NULL metric2: none), on the same scale */
    double *eval2;
    int cap_eval2;
    const char *metric2;
} ex_curve;
bool ex_plot_format_ok(const char *path); /* .png or .svg */
int ex_plot_write(const char *path, const ex_curve *c);

/* run.c: what every example prints and writes while it trains: the
 * progress line, the --log CSV and the --plot curve. */
typedef struct {
    tg_progress prog;
    FILE *csv;
    const char *plot;
    const char *metric; /* the eval metric's name ("val_loss"), NULL for none */
    int64_t log_every;  /* --log and --plot: a row and a point every this many steps; 0 = neither */
    const char *metric2; /* a second one, measured with it ("train_accuracy"), NULL for none */
    ex_curve curve;
    double t0;
    bool quiet;
} ex_run;
/* Returns 0, or 1 after printing why (the CSV cannot be created). */
int ex_run_start(ex_run *r, const tg_example_opts *o, int64_t steps, int64_t batch, const char *metric);
/* The same with a second metric, which ex_run_step2 reports beside the first. */
int ex_run_start2(ex_run *r, const tg_example_opts *o, int64_t steps, int64_t batch, const char *metric,
                  const char *metric2);
/* True on the steps whose loss should be read and passed to ex_run_step:
 * those the progress line shows, and with --log or --plot every step (or
 * every --log-every N, with the first and the last). */
bool ex_run_due(const ex_run *r, int64_t step);
/* Records a step: the progress line (on the steps it shows, and any with an
 * eval), a CSV row, a point of the curve. eval: the metric's value at this
 * step, or NULL. */
void ex_run_step(ex_run *r, int64_t step, float loss, float lr, const double *eval);
/* A step with both metrics measured. */
void ex_run_step2(ex_run *r, int64_t step, float loss, float lr, const double *eval, const double *eval2);
/* Ends the line, closes the CSV, writes the plot. Returns 0, or 1 after
 * printing why. */
int ex_run_end(ex_run *r);
/* The modes that compile and stop: with o->graph set (tg graph), writes the
 * traced (or compiled) graph of the spec as DOT; with o->plan set (tg plan),
 * prints the plan's totals for `name`. Returns true (*rc = the exit code) in
 * those modes; false: go on training. */
bool ex_compile_only(const tg_example_opts *o, const char *name, const tg_train_spec *spec, const tg_session *s, int *rc);

/* Data parallel (--dp): every rank draws the whole batch of `batch` rows
 * as one process would, and trains on its share, rows [*first, *first +
 * the return value); alone, all of them. 0 (after printing why) when the
 * ranks do not divide the batch. */
int64_t ex_shard(const tg_example_opts *o, int64_t batch, int64_t *first);
/* The line every example prints after training, before its evaluation:
 * `final loss=<value>` (with --dp the mean over the ranks), and with --dp
 * what the all-reduce cost per step. Ends r's live progress line first. */
void ex_final_loss(const tg_example_opts *o, ex_run *r, const tg_session *s, float loss);

/* The peak learning rate: --lr, else the example's `peak`; ex_lr_at scales
 * another rate of the schedule (its final one) by the same factor, so the
 * schedule keeps its shape (the example's own value without --lr). */
float ex_lr(const tg_example_opts *o, float peak);
float ex_lr_at(const tg_example_opts *o, float peak, float value);

/* The example's target, met when `value cmp target` (cmp ">=", "<=" or
 * "<"): returns 0, else prints which criterion the run missed and returns 2,
 * the exit status of a run that misses its target. */
int ex_target(const char *metric, double value, const char *cmp, double target);

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
/* The same with the seconds tg_session_new took ("compile_ms"), when > 0. */
void ex_bench_report_compiled(const char *model, const tg_session *s, tg_backend be, double *ms, int n, double compile_s);
/* `tg plan`: the plan's totals by category and the dispatches per step of a
 * compiled, never-run session; mode 2 prints one JSON line with the keys
 * --bench uses (planned_bytes, naive_bytes, dispatches). Returns an exit code. */
int ex_plan_report(const char *model, const tg_session *s, tg_backend be, int mode);
/* The warm-up: at least EX_BENCH_WARMUP steps and EX_BENCH_WARMUP_S seconds
 * (at most EX_BENCH_WARMUP_MAX steps). On the H200 the addition step's first
 * --bench after a pause had a median of 2.79 ms (min 0.92) against 0.95 and
 * 0.96 in the next two runs: 10 steps of 1 ms do not bring a GPU out of its
 * idle clocks. Steps so long that EX_BENCH_WARMUP of them would pass
 * EX_BENCH_WARMUP_LONG_S (a GPT-2-sized step on one CPU thread takes
 * seconds) stop there, after EX_BENCH_WARMUP_MIN at least. */
#define EX_BENCH_WARMUP 10
#define EX_BENCH_WARMUP_S 0.5
#define EX_BENCH_WARMUP_MAX 2000
#define EX_BENCH_WARMUP_MIN 2
#define EX_BENCH_WARMUP_LONG_S 5.0
/* Warms up, then times `steps` training steps on the same feeds (reading the
 * loss every step) and prints the JSON line. Returns an exit code. */
int ex_bench_loop(const char *model, tg_session *s, tg_backend be, const tg_feed *feeds, int n_feeds, int steps);
/* The same, reporting compile_s (the seconds tg_session_new took) too. */
int ex_bench_loop_compiled(const char *model, tg_session *s, tg_backend be, const tg_feed *feeds, int n_feeds, int steps,
                           double compile_s);
#define EX_PI 3.14159265358979323846
#endif
