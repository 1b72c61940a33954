/* The tensorgrad command line: trains the bundled examples, draws their
 * graphs and lists the devices they can run on. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../examples/examples.h"
#ifdef TG_WITH_MPI
#include "tensorgrad_mpi.h"
#endif

/* The examples and the options each one reads: any other option is an error,
 * so nothing is silently ignored. Each example's row says what it trains,
 * its defaults, the options it takes beyond everyone's, and the time its
 * default run may take on 2 cores (make examples-check holds it to that);
 * tg train NAME --help prints them. */
enum {
    OPT_BENCH = 1 << 0,      /* --bench N */
    OPT_CHECKPOINT = 1 << 1, /* --checkpoint PATH */
    OPT_OUT = 1 << 2,        /* --out FILE */
    OPT_DISCARD = 1 << 3,    /* --discard-grads */
    OPT_BATCH = 1 << 4,      /* --batch N */
    OPT_SEQ = 1 << 5,        /* --seq N */
    OPT_LR = 1 << 6,         /* --lr X */
    OPT_MODEL = 1 << 7       /* --vocab V, --dim D, --layers L, --heads H: the model's shape */
};
/* The options that shape what is compiled: tg graph and tg plan take them too. */
#define OPT_SHAPES (OPT_BATCH | OPT_SEQ | OPT_MODEL)
static const struct example {
    const char *name;
    int (*run)(const tg_example_opts *o);
    unsigned opts;        /* the OPT_* options it reads beyond every example's */
    const char *help;     /* what it trains; the line it ends with */
    const char *defaults; /* its defaults: steps, batch, optimizer and schedule, data, what --out writes */
    int budget_s;         /* its default run's time limit on 2 cores (make examples-check); 0 = none set */
} examples[] = {
    {.name = "addition", .run = example_addition, .opts = OPT_BENCH | OPT_CHECKPOINT | OPT_LR,
     .help = "3-layer transformer learning 2-digit addition; ends with 'heldout_accuracy=<value>'",
     .defaults = "1500 steps, batch 128, AdamW (weight decay 0.01, clip 1.0), LR 5e-3 falling linearly to a tenth; "
       "20% of the pairs held out; target heldout_accuracy >= 0.95"},
    {.name = "digits", .run = example_digits, .opts = OPT_BENCH | OPT_LR,
     .help = "CNN on the 8x8 handwritten digits (a fast test fixture); ends with 'test_accuracy=<value>'",
     .defaults = "600 steps, batch 64, Adam, LR 3e-3 cosine to 1e-4; the digits of python3-sklearn (fetched into "
       ".deps/data); target test_accuracy >= 0.97"},
    {.name = "gpt_small", .run = example_gpt_small, .opts = OPT_BENCH | OPT_DISCARD,
     .help = "the 10.8M-param GPT of the benchmarks (V=65, D=384, 6 layers, T=256, B=64); for a GPU",
     .defaults = "200 steps, batch 64 x 256 characters of the word list, AdamW 1e-3 (weight decay 0.1, clip 1.0)"},
    {.name = "gpt2", .run = example_gpt2, .opts = OPT_BENCH | OPT_BATCH | OPT_SEQ | OPT_MODEL,
     .help = "the GPT-2-124M-shaped benchmark (V=50257, D=768, 12 layers, T=1024, B=8); for a GPU",
     .defaults = "50 steps, batch 8 x 1024 tokens (--batch, --seq), V=50257, D=768, 12 layers, 12 heads (--vocab, "
       "--dim, --layers, --heads), AdamW 6e-4 (weight decay 0.1, clip 1.0); the word list's bytes as tokens "
       "(V >= 256), --bench: random tokens"},
    {.name = "names", .run = example_names, .opts = OPT_LR,
     .help = "character-level transformer over Debian's word list; ends with 'val_loss=<value>'",
     .defaults = "1500 steps, batch 64 words, AdamW (weight decay 0.01, clip 1.0), LR 5e-3 falling linearly to a "
       "tenth; /usr/share/dict/words (wamerican), split 90/10"},
    {.name = "sin", .run = example_sin, .opts = OPT_BENCH | OPT_LR | OPT_BATCH,
     .help = "1-64-64-1 MLP fitting sin(x); ends with 'final loss=<value>'",
     .defaults = "2000 steps, batch 256 fresh points a step, Adam 5e-3, MSE; target final loss < 1e-3"},
    {.name = "vae", .run = example_vae, .opts = OPT_OUT,
     .help = "upstream's MLP VAE (784-256-256-8) on Fashion-MNIST; ends with 'test_loss=<value>'",
     .defaults = "6000 steps, batch 128, Adam (clip 1.0), LR 1e-3 cosine to 1e-5; squared error plus KL per image; "
       "--out writes test images, their reconstructions and samples; target test_loss <= 27", .budget_s = 60},
    {.name = "pokeformer", .run = example_pokeformer, .opts = 0,
     .help = "Llama-style transformer (RMSNorm, RoPE) on the word list; ends with 'val_loss=<value>'",
     .defaults = "1500 steps, batch 64, AdamW, LR 5e-3 falling linearly to a tenth; target val_loss below names' at "
       "equal steps", .budget_s = 120},
    {.name = "fashion_mlp", .run = example_fashion_mlp, .opts = 0,
     .help = "upstream's digit-canvas MLP (784-64-10, replace_model mid-run) on Fashion-MNIST; ends with "
             "'test_accuracy=<value>'",
     .defaults = "8000 steps (a 784-32-10 model for 4000 more first), batch 64, AdamW (weight decay 0.01, clip 1.0), "
       "LR 3e-3 cosine to 1e-4; target test_accuracy >= 0.87", .budget_s = 30},
    {.name = "fashion_cnn", .run = example_fashion_cnn, .opts = OPT_OUT,
     .help = "upstream's MNIST CNN (conv16-conv32-fc 1568-64-10) on Fashion-MNIST; ends with 'test_accuracy=<value>'",
     .defaults = "4000 steps (4.3 epochs), batch 64, AdamW (weight decay 0.01, clip 1.0), LR 3e-3 cosine to 1e-5; "
       "--out saves the params; target test_accuracy >= 0.90", .budget_s = 120},
    {.name = "flow", .run = example_flow, .opts = OPT_OUT,
     .help = "rectified flow generating Fashion-MNIST images at 28x28; ends with 'sample_confidence=<value>'",
     .defaults = "3000 steps, batch 64, Adam (clip 1.0), LR 2e-3 cosine to 1e-5; 256 samples by 25 Euler steps, "
       "judged by fashion_cnn trained in the run; --out writes the samples; target sample_confidence >= 0.5",
     .budget_s = 240},
    {.name = "diffusion", .run = example_diffusion, .opts = OPT_OUT,
     .help = "a denoising diffusion U-Net generating Fashion-MNIST images at 28x28; ends with 'sample_confidence=<value>'",
     .defaults = "3000 updates of batch 64 as 2 accumulated micro-batches of 32, Adam (clip 1.0, EMA 0.995), LR 2e-3 "
       "cosine to 1e-5; 256 samples by 40 DDIM steps, judged by fashion_cnn trained in the run; --out writes the "
       "samples; target sample_confidence >= 0.6", .budget_s = 300},
    {.name = "nerf", .run = example_nerf, .opts = OPT_OUT,
     .help = "MLP with positional encoding fitting a photograph; ends with 'psnr=<value>'",
     .defaults = "3000 steps, batch 1024 pixels, Adam, LR 3e-3 cosine to 1e-4; a 64x64 photograph from "
       "python3-skimage; --out writes it beside the reconstruction; target psnr >= 25", .budget_s = 120},
    {.name = "kan", .run = example_kan, .opts = OPT_OUT,
     .help = "Kolmogorov-Arnold network fitting sin(pi x); ends with 'mse=<value>'",
     .defaults = "3000 steps, batch 256, Adam, LR 1e-2 cosine to 1e-4; --out draws the fit and every edge's "
       "function; target mse <= 1e-4", .budget_s = 60},
    {.name = "cartpole", .run = example_cartpole, .opts = 0,
     .help = "REINFORCE balancing a pole; ends with 'mean_episode_length=<value>'",
     .defaults = "300 iterations (--steps) of 16 episodes x 200 steps, Adam, LR 1e-2 cosine to 1e-3; target "
       "mean_episode_length >= 195", .budget_s = 120},
    {.name = "tictactoe", .run = example_tictactoe, .opts = 0,
     .help = "policy gradient to perfect play; ends with 'perfect_draw_rate=<value>' (draws against minimax)",
     .defaults = "20000 iterations (--steps) of 256 games: self-play and games against a random and a perfect "
       "player, Adam with a cosine schedule; target perfect_draw_rate >= 0.99", .budget_s = 120},
    {.name = "grokking", .run = example_grokking, .opts = 0,
     .help = "upstream's fourier-bloom: a transformer grokking a / b mod 97; ends with 'val_accuracy=<value>'",
     .defaults = "at most 3000 steps (it stops once grokked), batch 512, AdamW 1e-3 (weight decay 1.0, beta2 0.98, "
       "10 warm-up steps); half the pairs held out; target val_accuracy >= 0.99", .budget_s = 240},
    {.name = "transcoder", .run = example_transcoder, .opts = 0,
     .help = "upstream's replacement-model: sparse transcoders in place of a character model's MLPs; ends with "
             "'loss_recovered=<value>'",
     .defaults = "1500 steps (--steps) of the character model (batch 32, AdamW, LR 5e-3 falling linearly to a "
       "tenth), then 2500 of each transcoder (batch 256, Adam 1e-3, L1 2e-3); target loss_recovered >= 0.8",
     .budget_s = 120},
    {.name = "nca", .run = example_nca, .opts = OPT_OUT,
     .help = "upstream's regrow: a neural cellular automaton growing and regrowing an image; ends with "
             "'regrown_loss=<value>'",
     .defaults = "1500 steps, batch 8 from a pool of 256, 20 CA steps a forward, Adam 1e-3 (x0.3 after 1000), "
       "gradients normalized on the automaton; no LPIPS; --out writes the target, grown, cut and regrown images; "
       "target grown_loss and regrown_loss <= 0.1", .budget_s = 300},
    {.name = "transfer", .run = example_transfer, .opts = OPT_OUT,
     .help = "upstream's image-classifier: a new head on a frozen pretrained ViT's features; ends with "
             "'transfer_accuracy=<value>'",
     .defaults = "1500 steps of pretraining on 5 classes (batch 128, AdamW 1e-3 cosine, weight decay 0.05), heads "
       "for the other 5 from 20 images each (Adam 0.05, 200 steps); --out keeps the backbone's safetensors; "
       "target transfer_accuracy >= 0.75", .budget_s = 120},
};
#define N_EXAMPLES (int)(sizeof examples / sizeof examples[0])

/* Every option of tg train, once: its value, the OPT_* bit an example must
 * have for it (0: every example), and what it does. */
static const struct option {
    const char *flag, *value;
    unsigned need;
    const char *help;
} options[] = {
    {"--steps", "N", 0, "training steps (or iterations) instead of the example's default"},
    {"--seed", "S", 0, "param init, data order and random ops (default 0)"},
    {"--backend", "cpu|webgpu", 0, "where to train (default cpu)"},
    {"--threads", "N", 0, "CPU threads (default: TG_THREADS, else every core)"},
    {"--quiet", NULL, 0, "no progress line"},
    {"--log", "FILE", 0, "a CSV row per step: step, loss, lr, time_s and the eval metric where measured"},
    {"--log-every", "N", 0, "--log and --plot take every N-th step (default 1: every step)"},
    {"--plot", "FILE", 0, "the loss curve, .png or .svg, with the eval points (log scale when it spans decades)"},
    {"--lr", "X", OPT_LR, "the peak learning rate; the schedule keeps its shape"},
    {"--batch", "N", OPT_BATCH, "rows in a batch"},
    {"--seq", "N", OPT_SEQ, "tokens in a row"},
    {"--vocab", "V", OPT_MODEL, "the model's vocabulary (default 50257)"},
    {"--dim", "D", OPT_MODEL, "the model's width, a multiple of --heads (default 768)"},
    {"--layers", "L", OPT_MODEL, "the model's blocks (default 12)"},
    {"--heads", "H", OPT_MODEL, "attention heads in each block (default 12)"},
    {"--bench", "N", OPT_BENCH, "time N steps on one fixed batch after a warm-up, print one JSON line"},
    {"--checkpoint", "PATH", OPT_CHECKPOINT, "save the trained session there, for tg_session_load"},
    {"--out", "FILE", OPT_OUT, "write the example's picture there (PNG; fashion_cnn and transfer: params, safetensors)"},
    {"--discard-grads", NULL, OPT_DISCARD, "spec.discard_grads: gradients live only from the backward to the update"},
    {"--dp", NULL, 0, "tg-mpi under mpirun: each batch split between the ranks (docs/distributed.md)"},
    {"--dp-timeout", "SECONDS", 0, "with --dp: a rank that waits this long for the others ends the job, naming the "
                                   "ranks that did not arrive (default 600)"},
    {"--dp-bucket-kb", "N", 0, "with --dp: the gradients are averaged in buckets of about N KiB, an all-reduce each "
                               "(default 2048)"},
};
#define N_OPTIONS (int)(sizeof options / sizeof options[0])

static const struct option *find_option(const char *flag) {
    for (int i = 0; i < N_OPTIONS; i++)
        if (!strcmp(options[i].flag, flag)) return &options[i];
    return NULL;
}

/* tg --help: the commands. */
static int usage(FILE *f) {
    fprintf(f,
            "usage: tg train <example> [options]   train a bundled example (tg train --help: the options and examples)\n"
            "       tg train <example> --help      one example: what it trains, its defaults, its options, its time\n"
            "       mpirun -n R tg-mpi train <example> --dp [options]   data parallel: R ranks share each batch\n"
            "       tg graph <example> [--compiled] [--svg out.svg]   the graph as Graphviz DOT\n"
            "       tg plan <example> [--backend cpu|webgpu] [--json] [--discard-grads] [--batch N] [--seq N]\n"
            "                        [--vocab V] [--dim D] [--layers L] [--heads H]   (as tg train <example> takes them)\n"
            "                        compile without training; print the buffer plan's totals and dispatches per step\n"
            "       tg devices       list the CPU and the WebGPU adapter\n"
            "       tg --version     the version of tg and of the library\n"
            "examples:");
    for (int i = 0; i < N_EXAMPLES; i++) fprintf(f, " %s", examples[i].name);
    fprintf(f, "\ntg writes files only where an option asks. More: docs/cli.md.\n");
    return f == stderr ? 2 : 0;
}

/* The examples that take option o, comma-separated into buf. */
static const char *takers(const struct option *o, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < N_EXAMPLES && k < n; i++)
        if (examples[i].opts & o->need) {
            int w = snprintf(buf + k, n - k, "%s%s", k ? ", " : "", examples[i].name);
            if (w > 0) k += (size_t)w;
        }
    return buf;
}

static void print_option(const struct option *o, bool with_takers) {
    char flag[48], who[512];
    snprintf(flag, sizeof flag, "%s%s%s", o->flag, o->value ? " " : "", o->value ? o->value : "");
    printf("  %-22s %s", flag, o->help);
    if (with_takers && o->need) printf(" (%s)", takers(o, who, sizeof who));
    printf("\n");
}

/* tg train --help: every option and every example. */
static int train_help(void) {
    printf("usage: tg train <example> [options]\noptions:\n");
    for (int i = 0; i < N_OPTIONS; i++) print_option(&options[i], true);
    printf("examples (tg train <example> --help for one's defaults and options):\n");
    for (int i = 0; i < N_EXAMPLES; i++) printf("  %-11s %s\n", examples[i].name, examples[i].help);
    return 0;
}

/* tg train NAME --help: one example's defaults, options and time. */
static int example_help(const struct example *ex) {
    printf("tg train %s: %s\n  defaults: %s\n", ex->name, ex->help, ex->defaults ? ex->defaults : "(see docs/cli.md)");
    if (ex->budget_s)
        printf("  time: its default run is to finish within %d s on 2 CPU cores (make examples-check)\n", ex->budget_s);
    printf("options:\n");
    for (int i = 0; i < N_OPTIONS; i++)
        if (!options[i].need || (ex->opts & options[i].need)) print_option(&options[i], false);
    return 0;
}

static bool is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

static const struct example *find_example(const char *name) {
    for (int i = 0; i < N_EXAMPLES; i++)
        if (!strcmp(examples[i].name, name)) return &examples[i];
    fprintf(stderr, "tg: unknown example '%s'\n", name);
    return NULL;
}

/* A whole-string integer in [lo, hi], or an error naming the option. */
static bool parse_int(const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "tg: %s needs an integer in [%lld, %lld], not '%s'\n", opt, lo, hi, v);
        return false;
    }
    *out = x;
    return true;
}

/* Where an option that shapes the compiled model goes in o (--batch, --seq,
 * --vocab, --dim, --layers, --heads), and the most it takes (*hi); NULL
 * for any other option. */
static int64_t *shape_field(tg_example_opts *o, const char *flag, long long *hi) {
    static const struct {
        const char *flag;
        size_t at;
        long long hi;
    } fields[] = {{"--batch", offsetof(tg_example_opts, batch), 1 << 20},
                  {"--seq", offsetof(tg_example_opts, seq), 1 << 20},
                  {"--vocab", offsetof(tg_example_opts, vocab), INT32_MAX}, /* token ids are i32 */
                  {"--dim", offsetof(tg_example_opts, dim), 1 << 20},
                  {"--layers", offsetof(tg_example_opts, layers), 1 << 20},
                  {"--heads", offsetof(tg_example_opts, heads), 1 << 20}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!strcmp(flag, fields[i].flag)) {
            *hi = fields[i].hi;
            return (int64_t *)((char *)o + fields[i].at);
        }
    return NULL;
}

/* --dp and what goes with it: the comm's timeout_s and bucket_bytes (0: the defaults). */
typedef struct {
    bool on;
    double timeout_s;
    int64_t bucket_bytes;
} dp_opts;

/* Parses the options of `tg train` / `tg graph` for example ex into o.
 * Returns 0, or 2 after printing why. */
static int parse_opts(const struct example *ex, bool graph, int argc, char **argv, tg_example_opts *o,
                      const char **svg, dp_opts *dp) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x, hi;
        int64_t *field;
        const struct option *opt = find_option(a);
        bool takes_value = opt ? opt->value != NULL : !strcmp(a, "--svg");
        if (takes_value && !v) {
            fprintf(stderr, "tg: %s needs a value\n", a);
            return 2;
        }
        unsigned need = opt ? opt->need : 0;
        /* tg graph traces the example as its options shape it, and trains nothing. */
        bool shapes = need & OPT_SHAPES;
        bool train_only = opt && !shapes && strcmp(a, "--seed") && strcmp(a, "--backend") && strcmp(a, "--threads");
        bool graph_only = !strcmp(a, "--compiled") || !strcmp(a, "--svg");
        if ((need && !(ex->opts & need)) || (graph && train_only) || (!graph && graph_only)) {
            fprintf(stderr, "tg: %s %s does not use %s (tg train %s --help lists what it takes)\n",
                    graph ? "graph" : "train", ex->name, a, ex->name);
            return 2;
        }
        if (takes_value) i++;
        if (!strcmp(a, "--steps")) {
            if (!parse_int(a, v, 1, INT64_MAX, &x)) return 2;
            o->steps = x;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_int(a, v, 0, INT64_MAX, &x)) return 2;
            o->seed = (uint64_t)x;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_int(a, v, 1, 4096, &x)) return 2;
            o->threads = (int)x;
        } else if (!strcmp(a, "--bench")) {
            if (!parse_int(a, v, 1, 1000000, &x)) return 2;
            o->bench = (int)x;
        } else if ((field = shape_field(o, a, &hi))) {
            if (!parse_int(a, v, 1, hi, &x)) return 2;
            *field = x;
        } else if (!strcmp(a, "--log-every")) {
            if (!parse_int(a, v, 1, INT64_MAX, &x)) return 2;
            o->log_every = x;
        } else if (!strcmp(a, "--lr")) {
            char *end;
            double lr = strtod(v, &end);
            if (end == v || *end || !(lr > 0 && lr < 1e3)) {
                fprintf(stderr, "tg: --lr needs a learning rate above 0, not '%s'\n", v);
                return 2;
            }
            o->lr = (float)lr;
        } else if (!strcmp(a, "--quiet")) o->quiet = true;
        else if (!strcmp(a, "--discard-grads")) o->discard_grads = true;
        else if (!strcmp(a, "--dp")) dp->on = true;
        else if (!strcmp(a, "--dp-timeout")) {
            char *end;
            errno = 0;
            double t = strtod(v, &end);
            if (errno || end == v || *end || !(t > 0 && t <= 1e9)) {
                fprintf(stderr, "tg: --dp-timeout needs seconds, more than 0 and at most 1e9, not '%s'\n", v);
                return 2;
            }
            dp->timeout_s = t;
        } else if (!strcmp(a, "--dp-bucket-kb")) {
            if (!parse_int(a, v, 1, (int64_t)1 << 30, &x)) return 2;
            dp->bucket_bytes = x * 1024;
        }
        else if (!strcmp(a, "--log")) o->log = v;
        else if (!strcmp(a, "--checkpoint")) o->checkpoint = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--compiled")) o->graph_compiled = true;
        else if (!strcmp(a, "--svg")) *svg = v;
        else if (!strcmp(a, "--plot")) {
            if (!ex_plot_format_ok(v)) {
                fprintf(stderr, "tg: --plot writes .png or .svg, not '%s'\n", v);
                return 2;
            }
            o->plot = v;
        } else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "cpu")) o->backend = TG_BACKEND_CPU;
            else if (!strcmp(v, "webgpu")) o->backend = TG_BACKEND_WEBGPU;
            else {
                fprintf(stderr, "tg: unknown backend '%s' (cpu or webgpu)\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "tg: unknown option '%s'\n", a);
            return usage(stderr);
        }
    }
    if (o->bench && (o->log || o->plot)) {
        fprintf(stderr, "tg: --bench times steps and prints JSON; it writes no --log or --plot\n");
        return 2;
    }
    return 0;
}

/* tg graph: DOT on stdout, or rendered to an SVG with Graphviz's dot. */
static int graph_cmd(const struct example *ex, tg_example_opts *o, const char *svg) {
    if (!svg) {
        o->graph = stdout;
        return ex->run(o);
    }
    char dot_path[4096], cmd[8400];
    snprintf(dot_path, sizeof dot_path, "%s.dot", svg);
    if (strchr(svg, '\'')) {
        fprintf(stderr, "tg: --svg path must not contain a quote\n");
        return 2;
    }
    FILE *f = fopen(dot_path, "w");
    if (!f) {
        fprintf(stderr, "tg: cannot create %s\n", dot_path);
        return 1;
    }
    o->graph = f;
    int rc = ex->run(o);
    if (fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "tg: error writing %s\n", dot_path);
        rc = 1;
    }
    if (rc) return rc;
    if (system("command -v dot >/dev/null 2>&1") != 0) {
        printf("wrote %s; Graphviz's dot is not installed (apt-get install graphviz), render it with:\n"
               "  dot -Tsvg '%s' -o '%s'\n", dot_path, dot_path, svg);
        return 0;
    }
    snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o '%s'", dot_path, svg);
    if (system(cmd) != 0) {
        fprintf(stderr, "tg: dot failed on %s\n", dot_path);
        return 1;
    }
    remove(dot_path);
    printf("wrote %s\n", svg);
    return 0;
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !v) continue;
        v += 1 + strspn(v + 1, " \t");
        v[strcspn(v, "\n")] = 0;
        snprintf(buf, n, "%s", v);
        break;
    }
    if (f) fclose(f);
}

/* The adapter's optional features, the experimental ones Dawn would add
 * under allow_unsafe_apis, and whether storage accesses are clamped. */
static void webgpu_features(const tg_webgpu_adapter_info *w) {
    char more[768];
    printf("        features: %s\n", w->features[0] ? w->features : "(none)");
    if (tg_webgpu_unsafe_features(more, sizeof more) == TG_OK)
        printf("        with allow_unsafe_apis also: %s\n", more[0] ? more : "(nothing more)");
    else
        printf("        with allow_unsafe_apis: %s\n", tg_last_error());
    printf("        bounds clamps and workgroup zeroing: %s\n",
           w->robust ? "on (TG_WEBGPU=robust, or the library refused disable_robustness or disable_workgroup_init)"
                     : "off (disable_robustness, disable_workgroup_init; TG_WEBGPU=robust turns them on)");
}

/* One line per backend, with the WebGPU adapter's limits that bound model size. */
static int devices(void) {
    char model[128];
    cpu_model(model, sizeof model);
    printf("cpu     %s, %ld cores online (TG_THREADS overrides)\n", model, sysconf(_SC_NPROCESSORS_ONLN));
    tg_cpu_path_info ci;
    if (tg_cpu_info(&ci) != TG_OK) {
        fprintf(stderr, "tg devices: %s\n", tg_last_error());
        return 1;
    }
    printf("        path %s (best on this CPU: %s; TG_CPU lowers it)\n        kernels: %s\n", ci.path, ci.best,
           ci.kernels);
    tg_webgpu_adapter_info w;
    if (tg_webgpu_info(&w) != TG_OK) {
        printf("webgpu  %s\n", tg_last_error());
        return 0;
    }
    printf("webgpu  %s (%s, %s)\n", w.name, w.backend, w.type);
    if (w.description[0]) printf("        driver: %s\n", w.description);
    printf("        library: %s\n", w.library);
    printf("        max buffer %llu MiB, max storage binding %llu MiB, %u storage buffers per stage\n",
           (unsigned long long)(w.max_buffer_size >> 20), (unsigned long long)(w.max_storage_buffer_binding_size >> 20),
           w.max_storage_buffers_per_shader_stage);
    printf("        workgroup storage %u KiB, %u invocations per workgroup, %u workgroups per dimension",
           w.max_compute_workgroup_storage_size >> 10, w.max_compute_invocations_per_workgroup,
           w.max_compute_workgroups_per_dimension);
    if (w.subgroup_max_size) printf(", subgroups %u-%u", w.subgroup_min_size, w.subgroup_max_size);
    printf("\n");
    webgpu_features(&w);
    return 0;
}

/* tg plan <example> [--backend B] [--json] [--discard-grads] [the options that shape it] */
static int plan_cmd(const struct example *ex, int argc, char **argv) {
    tg_example_opts o = {.plan = 1, .quiet = true};
    for (int i = 0; i < argc; i++) {
        const struct option *opt = find_option(argv[i]);
        long long x, hi;
        int64_t *field;
        if (!strcmp(argv[i], "--json")) o.plan = 2;
        else if (!strcmp(argv[i], "--discard-grads") && (ex->opts & OPT_DISCARD)) o.discard_grads = true;
        else if (opt && (opt->need & OPT_SHAPES) && (ex->opts & opt->need) && i + 1 < argc &&
                 (field = shape_field(&o, argv[i], &hi))) {
            if (!parse_int(argv[i], argv[i + 1], 1, hi, &x)) return 2;
            *field = x;
            i++;
        }
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc && !strcmp(argv[i + 1], "cpu")) o.backend = TG_BACKEND_CPU, i++;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc && !strcmp(argv[i + 1], "webgpu")) o.backend = TG_BACKEND_WEBGPU, i++;
        else {
            fprintf(stderr, "tg: plan takes --backend cpu|webgpu, --json and (examples that use them) --discard-grads, "
                    "--batch N, --seq N, --vocab V, --dim D, --layers L, --heads H, not '%s'\n", argv[i]);
            return 2;
        }
    }
    return ex->run(&o);
}

#ifdef TG_WITH_MPI
/* --dp: every rank runs the example with the comm over MPI_COMM_WORLD. The
 * CPU threads of the ranks on one machine share its cores (TG_THREADS or
 * --threads overrides), a WebGPU rank takes adapter rank % adapters (the
 * library's choice; TG_WEBGPU=adapter=N overrides), and only rank 0 writes to
 * stdout (errors still come from every rank). */
static int train_dp(const struct example *ex, tg_example_opts *o, const dp_opts *dp, int *argc, char ***argv) {
    int level, local_n = 1;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &level) != MPI_SUCCESS) {
        fprintf(stderr, "tg: --dp: MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local_n);
        MPI_Comm_free(&node);
    }
    tg_comm *comm = tg_mpi_comm(MPI_COMM_WORLD);
    if (!comm) {
        fprintf(stderr, "tg: --dp: cannot make a communicator over MPI_COMM_WORLD\n");
        MPI_Finalize();
        return 1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!o->threads && !getenv("TG_THREADS")) o->threads = cores / local_n > 1 ? (int)(cores / local_n) : 1;
    if (comm->rank != 0 && !freopen("/dev/null", "w", stdout)) o->quiet = true;
    if (dp->timeout_s > 0) comm->timeout_s = dp->timeout_s;
    comm->bucket_bytes = dp->bucket_bytes;
    o->comm = comm;
    int rc = ex->run(o);
    fflush(stdout);
    /* A rank that did not arrive (TG_ERR_TIMEOUT) would keep MPI_Finalize
     * waiting: the job ends here, mpirun stopping every rank. */
    if (tg_mpi_comm_failed(comm)) {
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc ? rc : 1);
    }
    tg_mpi_comm_free(comm);
    MPI_Finalize();
    return rc;
}
#else
static int train_dp(const struct example *ex, tg_example_opts *o, const dp_opts *dp, int *argc, char ***argv) {
    (void)ex, (void)o, (void)dp, (void)argc, (void)argv;
    fprintf(stderr, "tg: --dp runs under mpirun with tg-mpi; this tg is built without MPI (make builds "
                    "tg-mpi where mpicc is found: Debian's libopenmpi-dev)\n");
    return 2;
}
#endif

/* A compile's progress on stderr once it has taken a second (a CPU adapter
 * compiles a GPT's kernels for minutes, a GPU a few seconds): redrawn in
 * place on a terminal, else a line at each tenth; then how long it took. */
static struct {
    double t0;
    int64_t tenth; /* the last tenth printed, -1 none */
    bool live, drawn;
} compile_line;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void show_compile(void *user, const char *what, int64_t done, int64_t total) {
    (void)user;
    if (done == 0) {
        compile_line.t0 = now_s(), compile_line.tenth = -1, compile_line.drawn = false;
        compile_line.live = isatty(fileno(stderr)) == 1;
        return;
    }
    double el = now_s() - compile_line.t0;
    if (el < 1.0 && !compile_line.drawn) return;
    int64_t tenth = total > 0 ? done * 10 / total : 10;
    if (compile_line.live) fprintf(stderr, "\rcompiling %s: %lld/%lld  %.0f s\033[K", what, (long long)done, (long long)total, el);
    else if (tenth > compile_line.tenth || done == total)
        fprintf(stderr, "compiling %s: %lld/%lld  %.0f s\n", what, (long long)done, (long long)total, el);
    compile_line.tenth = tenth, compile_line.drawn = true;
    if (done == total) {
        if (compile_line.live) fputc('\n', stderr);
        compile_line.drawn = false;
    }
    fflush(stderr);
}

int main(int argc, char **argv) {
    tg_set_default_compile_progress(show_compile, NULL);
    if (argc < 2 || is_help(argv[1]) || !strcmp(argv[1], "help")) return usage(argc < 2 ? stderr : stdout);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("tg %s (library %s)\n", TG_VERSION_STRING, tg_version());
        return 0;
    }
    if (!strcmp(argv[1], "devices")) return devices();
    bool graph = !strcmp(argv[1], "graph"), plan = !strcmp(argv[1], "plan");
    if (strcmp(argv[1], "train") != 0 && !graph && !plan) {
        fprintf(stderr, "tg: unknown command '%s'\n", argv[1]);
        return usage(stderr);
    }
    if (argc < 3) return usage(stderr);
    if (is_help(argv[2])) return graph || plan ? usage(stdout) : train_help();
    const struct example *ex = find_example(argv[2]);
    if (!ex) {
        fprintf(stderr, "examples:");
        for (int i = 0; i < N_EXAMPLES; i++) fprintf(stderr, " %s", examples[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    for (int i = 3; i < argc; i++)
        if (is_help(argv[i])) return example_help(ex);
    if (plan) return plan_cmd(ex, argc - 3, argv + 3);
    tg_example_opts o = {0};
    const char *svg = NULL;
    dp_opts dp = {0};
    int rc = parse_opts(ex, graph, argc - 3, argv + 3, &o, &svg, &dp);
    if (rc) return rc;
    if ((dp.timeout_s > 0 || dp.bucket_bytes > 0) && !dp.on) {
        fprintf(stderr, "tg: %s goes with --dp\n", dp.timeout_s > 0 ? "--dp-timeout" : "--dp-bucket-kb");
        return 2;
    }
    if (dp.on) return train_dp(ex, &o, &dp, &argc, &argv);
    return graph ? graph_cmd(ex, &o, svg) : ex->run(&o);
}
