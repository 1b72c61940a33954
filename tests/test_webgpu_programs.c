/* The graph fuzzers' programs (fuzz/fuzz_graph.c, fuzz/fuzz_graph_nn.c) on
 * WebGPU against the CPU. make fuzz runs them on the CPU alone: lavapipe
 * compiles shaders far too slowly to fuzz through. Here a fixed set of them,
 * drawn from a seeded generator, each traced by both targets, takes one
 * training step on each backend wherever its tensors are small (as the
 * fuzzers do): planning, fusion and WGSL generation meet hostile graphs
 * (edge shapes, NaN and infinite scalars, mixed dtypes), and must end in a
 * status, never a crash; where the CPU steps, WebGPU must step too, with the
 * same loss and gradient; where the CPU refuses, WebGPU must refuse with the
 * same status. The program's x is a param here, so that the gradient
 * compared is that of every op on its path. Values are compared only for
 * programs of f32 values alone: through an integer or boolean (a cast, a
 * comparison, an argmax) the result jumps where the input crosses a
 * boundary, and the two backends' last-bit differences (a softmax row
 * summing to 0.99999994 on one, 1 on the other, then cast) land on either
 * side of it. Nor need a step that meets an overflow, an infinity or a
 * NaN on one backend fail on the other: WGSL lets an implementation assume
 * that none occurs, and a shader's value where one does is indeterminate. */
#define FUZZ_NO_ENTRY
#include "../fuzz/fuzz_graph.c"
#include "../fuzz/fuzz_graph_nn.c"

#include "check.h"

enum { PROGRAMS = 100 }; /* per target */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static unsigned next_byte(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state >> 32) & 255u;
}

typedef struct {
    tg_status compiled, stepped;
    float loss, grad[16];
    bool has_grad; /* false where x's value does not reach the loss (through integer casts alone) */
    char err[200];
} outcome;

/* One SGD step of program q (model m) on backend be: its loss and the gradient of x. */
static outcome step_on(tg_model *m, prog *q, tg_trace_fn run, tg_backend be) {
    outcome o = {TG_OK, TG_OK, 0, {0}, false, ""};
    tg_train_spec spec = {.model = m, .loss = run, .user = q, .seed = 3,
                          .optim = tg_sgd(tg_lr_constant(0.5f), 0.0f, false, 0.0f), .threads = 1, .backend = be};
    tg_session *s = NULL;
    o.compiled = tg_session_new(&spec, &s);
    if (o.compiled == TG_OK) {
        o.stepped = tg_session_step(s, NULL, 0, &o.loss);
        o.has_grad = o.stepped == TG_OK && tg_session_get_grad(s, "x", o.grad, 16) == TG_OK;
    }
    if (o.compiled != TG_OK || o.stepped != TG_OK) snprintf(o.err, sizeof o.err, "%s", tg_last_error());
    tg_session_free(s);
    return o;
}

static bool close_to(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (a == b) return true; /* the infinities */
    return fabsf(a - b) <= 2e-3f * (1.0f + fmaxf(fabsf(a), fabsf(b)));
}

static void hex(const uint8_t *p, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", p[i]);
    out[2 * n] = 0;
}

static const struct {
    const char *name;
    tg_trace_fn run;
} targets[] = {{"fuzz_graph", graph_run}, {"fuzz_graph_nn", nn_run}};

static int compared, refused, discrete, nonfinite;


/* Steps program q of target t on both backends and checks that they agree. */
static void compare(int t, tg_model *m, prog *q) {
    char name[2 * 64 + 1];
    hex(q->p, q->n < 64 ? q->n : 64, name);
    const char *at = targets[t].name;
    outcome c = step_on(m, q, targets[t].run, TG_BACKEND_CPU);
    outcome w = step_on(m, q, targets[t].run, TG_BACKEND_WEBGPU);
    if (getenv("TG_TEST_VERBOSE"))
        printf("%s:%s CPU %s/%s %s | WebGPU %s/%s %s\n", at, name, tg_status_name(c.compiled), tg_status_name(c.stepped),
               c.err, tg_status_name(w.compiled), tg_status_name(w.stepped), w.err);
    if (c.compiled != TG_OK) {
        refused++;
        CHECK(w.compiled == c.compiled, "%s:%s the CPU refuses (%s: %s), WebGPU %s: %s", at, name,
              tg_status_name(c.compiled), c.err, tg_status_name(w.compiled), w.err);
        return;
    }
    bool one_numeric = (c.stepped == TG_ERR_NUMERIC && w.stepped == TG_OK) || (c.stepped == TG_OK && w.stepped == TG_ERR_NUMERIC);
    nonfinite += w.compiled == TG_OK && one_numeric;
    CHECK(w.compiled == TG_OK && (w.stepped == c.stepped || one_numeric), "%s:%s CPU %s (%s), WebGPU %s/%s: %s", at, name,
          tg_status_name(c.stepped), c.err, tg_status_name(w.compiled), tg_status_name(w.stepped), w.err);
    if (c.stepped != TG_OK || w.compiled != TG_OK || w.stepped != TG_OK) return;
    bool f32;
    fuzz_small(m, q, targets[t].run, &f32);
    if (!f32) { /* see the top */
        discrete++;
        return;
    }
    compared++;
    int bad = -1;
    for (int e = 0; e < 16 && bad < 0 && c.has_grad && w.has_grad; e++)
        if (!close_to(c.grad[e], w.grad[e])) bad = e;
    CHECK(close_to(c.loss, w.loss) && c.has_grad == w.has_grad && bad < 0,
          "%s:%s loss %g / %g, gradient %s / %s, [%d] %g / %g (CPU / WebGPU)", at, name, c.loss, w.loss,
          c.has_grad ? "yes" : "no", w.has_grad ? "yes" : "no", bad < 0 ? 0 : bad, bad < 0 ? 0.0 : c.grad[bad],
          bad < 0 ? 0.0 : w.grad[bad]);
}

static tg_model *program_model(prog *q, const uint8_t *bytes, size_t n) {
    tg_model *m = tg_model_new();
    *q = (prog){bytes, n, 0, tg_model_param(m, "w", TG_SHAPE(4, 4), tg_init_randn(0.1f)), true,
                tg_model_param(m, "x", TG_SHAPE(4, 4), tg_init_randn(1.0f))};
    return m;
}

/* Program <target>:<hex bytes>, as a failure names it. */
static void one(const char *spec) {
    const char *colon = strchr(spec, ':');
    uint8_t bytes[64];
    size_t n = 0;
    int t = 0;
    while (t < 2 && !(colon && strncmp(spec, targets[t].name, (size_t)(colon - spec)) == 0 &&
                      strlen(targets[t].name) == (size_t)(colon - spec)))
        t++;
    for (const char *h = colon ? colon + 1 : ""; t < 2 && h[0] && h[1] && n < sizeof bytes; h += 2) {
        unsigned v;
        if (sscanf(h, "%2x", &v) != 1) break;
        bytes[n++] = (uint8_t)v;
    }
    CHECK(t < 2 && n > 0, "TG_TEST_PROGRAM=%s: want <fuzz_graph|fuzz_graph_nn>:<hex bytes>", spec);
    if (t < 2 && n > 0) {
        prog q;
        tg_model *m = program_model(&q, bytes, n);
        compare(t, m, &q);
        tg_model_free(m);
    }
}

int main(void) {
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        check_webgpu_missing("test_webgpu_programs");
        return check_summary("test_webgpu_programs");
    }
    if (getenv("TG_TEST_PROGRAM")) { /* TG_TEST_PROGRAM=<target>:<hex bytes> runs that one alone */
        one(getenv("TG_TEST_PROGRAM"));
        return check_summary("test_webgpu_programs");
    }
    /* Programs that once failed here: a narrow to no elements (WGSL refused
     * its kernel's constant divisor 0), the same narrow inlined into a sum,
     * an i32 clamp at -inf (INT32_MIN written as a literal WGSL does not
     * have), a max pool's gradient fused with another op that tests for
     * NaN (is_nan declared twice). */
    static const char *const found[] = {
        "fuzz_graph:92d25233426063a10233c1c1d15163e3f12441",
        "fuzz_graph:93557470badf1101b28251d0219121b3e2f062c412a383f022d0d1b061d270d39203b1c0839342100b43",
        "fuzz_graph_nn:603157318311f0af11708030f142c0404131c2025171125042203b301343405070d131a040e041229ed111a1525143a26010",
        "fuzz_graph_nn:838301baa1308ea0a22053b2314e720183d1144331537050a0d1615113c04091b0",
    };
    for (size_t i = 0; i < sizeof found / sizeof found[0]; i++) one(found[i]);
    /* TG_TEST_SEED=N (N > 0) draws other programs, TG_TEST_PROGRAMS=N as many per target */
    const char *seed = getenv("TG_TEST_SEED"), *count = getenv("TG_TEST_PROGRAMS");
    if (seed && strtoull(seed, NULL, 10) > 0) rng_state ^= strtoull(seed, NULL, 10) * 0x2545f4914f6cdd1du;
    int programs = count && atoi(count) > 0 ? atoi(count) : PROGRAMS;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < programs; i++) {
            uint8_t bytes[64];
            prog q;
            tg_model *m = program_model(&q, bytes, 0);
            /* Grown a piece at a time, each piece kept only if the program
             * still traces and stays small: drawn whole, almost every
             * program fails its trace (a zero, negative or huge dim; an
             * axis out of range). The bytes are mostly b with b % 16 < 4,
             * which the machine reads as dims of 1 to 4 and as any opcode.
             * Every other program keeps to f32 values, so that about half
             * have their values compared. */
            for (int tries = 0; tries < 48 && q.n + 8 <= sizeof bytes; tries++) {
                size_t k = 1 + next_byte() % 6;
                for (size_t j = 0; j < k; j++)
                    bytes[q.n + j] = (uint8_t)(next_byte() % 8 ? next_byte() & 0xf3u : next_byte());
                q.n += k;
                bool f32;
                if (!fuzz_small(m, &q, targets[t].run, &f32) || (i % 2 == 0 && !f32)) q.n -= k;
            }
            compare(t, m, &q);
            tg_model_free(m);
        }
    printf("test_webgpu_programs: %d programs stepped on both backends with the same values, %d more through integers "
           "(values not compared), %d refused by both, %d met a non-finite value on one backend\n",
           compared, discrete, refused, nonfinite);
    CHECK(compared >= programs / 2, "only %d of %d programs compared", compared, 2 * programs);
    return check_summary("test_webgpu_programs");
}
