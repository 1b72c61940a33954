/* Cross-backend parity: runs one traced function on the CPU backend and on
 * WebGPU with the same params and inputs (optim TG_OPT_NONE: gradients, no
 * update) and compares the output (a capture), the loss and every param's
 * gradient.
 *
 * The loss is sum(out * w) with fixed pseudo-random weights w, so each
 * output element gets its own cotangent. Non-f32 outputs are compared
 * exactly and contribute sum(cast(out)) (no gradient). */
#ifndef TG_TEST_PARITY_H
#define TG_TEST_PARITY_H
/* (its includers define _POSIX_C_SOURCE 200809L first: mkdtemp, setenv) */
#include <dirent.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define PAR_MAX 4

/* When set, par_compare also appends the WebGPU side's raw output and
 * gradient bytes here, so two runs of the suite can be compared bit for bit. */
static FILE *par_bits;

typedef struct {
    const char *name;
    tg_shape params[PAR_MAX];   /* f32 params p0.. (randn std 1); ndim -1 ends the list */
    tg_shape ints[3];           /* i32 inputs i0, i1 (values in [lo, hi)); ndim -1 ends */
    int lo, hi;
    /* Builds the op under test from the params and inputs. */
    tg_tensor (*build)(tg_graph *g, const tg_tensor *p, const tg_tensor *in);
    float tol;                  /* relative tolerance: |gpu - cpu| <= tol * max(1, |cpu|); 0 = 1e-5 */
} par_case;

#define P_END {-1, {0}}
#define P_NONE {P_END}

typedef struct {
    const par_case *c;
    float *w;      /* loss weights, made on first trace */
    int64_t w_n;
    int32_t *ints[2];
} par_user;

static tg_tensor par_loss(tg_graph *g, void *user) {
    par_user *u = user;
    tg_tensor p[PAR_MAX], in[2];
    for (int i = 0; i < PAR_MAX && u->c->params[i].ndim >= 0; i++) p[i] = tg_use(g, i);
    for (int i = 0; i < 2 && u->c->ints[i].ndim >= 0; i++) in[i] = tg_input(g, i ? "i1" : "i0");
    tg_tensor y = tg_capture(u->c->build(g, p, in), "out");
    if (!tg_tensor_ok(y)) return y;
    if (tg_tensor_dtype(y) != TG_F32) return tg_sum(tg_cast(y, TG_F32), TG_ALL, false);
    tg_shape s = tg_tensor_shape(y);
    int64_t n = tg_shape_numel(s);
    if (!u->w) {
        u->w = malloc(sizeof(float) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) u->w[i] = (float)sin(0.37 * (double)i + 0.1) + 0.25f;
        u->w_n = n;
    }
    return tg_sum(tg_mul(y, tg_constant(g, s, u->w)), TG_ALL, false);
}

typedef struct {
    tg_session *s;
    tg_model *m;
} par_run;

static tg_status par_open(const par_case *c, par_user *u, tg_backend be, par_run *r) {
    r->m = tg_model_new();
    r->s = NULL;
    char name[16];
    for (int i = 0; i < PAR_MAX && c->params[i].ndim >= 0; i++) {
        snprintf(name, sizeof name, "p%d", i);
        tg_model_param(r->m, name, c->params[i], tg_init_randn(1.0f));
    }
    tg_input_decl in[2];
    int n_in = 0;
    for (int i = 0; i < 2 && c->ints[i].ndim >= 0; i++) in[n_in++] = (tg_input_decl){i ? "i1" : "i0", TG_I32, c->ints[i]};
    tg_optim none = {0};
    tg_train_spec spec = {.model = r->m, .loss = par_loss, .user = u, .inputs = in, .n_inputs = n_in,
                          .optim = none, .seed = 7, .backend = be, .threads = 2};
    tg_status st = tg_session_new(&spec, &r->s);
    if (st != TG_OK) return st;
    tg_feed feeds[2];
    for (int i = 0; i < n_in; i++) feeds[i] = (tg_feed){in[i].name, u->ints[i], tg_shape_numel(c->ints[i]), TG_I32};
    float loss;
    return tg_session_step(r->s, feeds, n_in, &loss);
}

static void par_close(par_run *r) {
    tg_session_free(r->s);
    tg_model_free(r->m);
}

/* Max of |a - b| / max(1, |b|) over n floats; inf/nan must match exactly. */
static double par_err(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(b[i]) || isinf(b[i])) {
            if (!(isnan(a[i]) && isnan(b[i])) && a[i] != b[i]) return INFINITY;
            continue;
        }
        double e = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Compares the capture "out" (f32 within tol, i32/bool exactly) and the
 * gradient of params <prefix>0.. (10x tol: they sum over many more terms)
 * of two sessions that ran the same step. */
static void par_compare(const char *what, tg_session *gpu, tg_session *cpu, const char *prefix, const tg_shape *params,
                        int n_params, double tol, bool verbose) {
    tg_shape s;
    tg_dtype dt;
    CHECK_OK(tg_session_capture_info(cpu, "out", &s, &dt));
    int64_t n = tg_shape_numel(s);
    float *a = calloc((size_t)(n ? n : 1), 4), *b = calloc((size_t)(n ? n : 1), 4);
    CHECK_OK(tg_session_read(gpu, "out", a, n));
    CHECK_OK(tg_session_read(cpu, "out", b, n));
    double worst = 0, gworst = 0;
    if (par_bits) fwrite(a, 4, (size_t)n, par_bits);
    if (dt == TG_F32) {
        worst = par_err(a, b, n);
        CHECK(worst <= tol, "%s: forward differs by %.3g (tolerance %.3g)", what, worst, tol);
    } else {
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (memcmp(&a[i], &b[i], 4)) bad = i;
        CHECK(bad < 0, "%s: %s output differs at %lld: %d vs %d", what, dt == TG_I32 ? "i32" : "bool", (long long)bad,
              bad >= 0 ? ((int32_t *)a)[bad] : 0, bad >= 0 ? ((int32_t *)b)[bad] : 0);
    }
    for (int i = 0; i < n_params; i++) {
        char name[16];
        snprintf(name, sizeof name, "%s%d", prefix, i);
        int64_t m = tg_shape_numel(params[i]);
        float *ga = malloc(4 * (size_t)m), *gb = malloc(4 * (size_t)m);
        tg_status hc = tg_session_get_grad(cpu, name, gb, m);
        tg_status hg = tg_session_get_grad(gpu, name, ga, m);
        if (par_bits && hg == TG_OK) fwrite(ga, 4, (size_t)m, par_bits);
        CHECK(hc == hg, "%s: grad of %s: cpu %s, webgpu %s", what, name, tg_status_name(hc), tg_status_name(hg));
        if (hc == TG_OK && hg == TG_OK) {
            double e = par_err(ga, gb, m);
            CHECK(e <= 10 * tol, "%s: grad of %s differs by %.3g (tolerance %.3g)", what, name, e, 10 * tol);
            if (e > gworst) gworst = e;
        }
        free(ga);
        free(gb);
    }
    if (verbose) printf("  %-32s forward %.2g  grads %.2g\n", what, worst, gworst);
    free(a);
    free(b);
}

/* Runs case c on both backends and checks output and grads. */
/* Case c's i32 inputs into u (freed by par_user_free). */
static void par_make_ints(const par_case *c, par_user *u) {
    for (int i = 0; i < 2 && c->ints[i].ndim >= 0; i++) {
        int64_t n = tg_shape_numel(c->ints[i]);
        u->ints[i] = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        for (int64_t k = 0; k < n; k++) u->ints[i][k] = c->lo + (int32_t)((k * 7919 + i * 31 + 3) % (c->hi - c->lo));
    }
}

static void par_user_free(par_user *u) {
    free(u->w);
    free(u->ints[0]);
    free(u->ints[1]);
}

/* The WebGPU kernels compiled while a test runs, as TG_WEBGPU=dump=DIR
 * writes them: par_dump_start makes a folder (dir, 32 bytes) and points the
 * dump there, after the setting's other words; par_dump_count counts the
 * lines holding `needle` (and `also`, if not NULL) in every kernel dumped
 * since; par_dump_end restores the setting and removes it all. */
static char par_dump_saved[256];
static bool par_dump_had;

static bool par_dump_start(char *dir) {
    strcpy(dir, "/tmp/tg_dump_XXXXXX");
    if (!mkdtemp(dir)) return false;
    const char *was = getenv("TG_WEBGPU");
    par_dump_had = was != NULL;
    snprintf(par_dump_saved, sizeof par_dump_saved, "%s", was ? was : "");
    char set[320]; /* the other words, any dump of the caller's replaced */
    snprintf(set, sizeof set, "%s", par_dump_saved);
    char *old = strncmp(set, "dump=", 5) == 0 ? set : strstr(set, ",dump=");
    if (old) *old = 0;
    snprintf(set + strlen(set), sizeof set - strlen(set), "%sdump=%s", set[0] ? "," : "", dir);
    setenv("TG_WEBGPU", set, 1);
    return true;
}

static int par_dump_count(const char *dir, const char *needle, const char *also) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[600], line[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f)) n += strstr(line, needle) && (!also || strstr(line, also));
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}

static void par_dump_end(const char *dir) {
    if (par_dump_had) setenv("TG_WEBGPU", par_dump_saved, 1);
    else unsetenv("TG_WEBGPU");
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static void par_check(const par_case *c, bool verbose) {
    par_user u = {c, NULL, 0, {NULL, NULL}};
    par_make_ints(c, &u);
    int np = 0;
    while (np < PAR_MAX && c->params[np].ndim >= 0) np++;
    par_run cpu, gpu;
    tg_status sc = par_open(c, &u, TG_BACKEND_CPU, &cpu);
    CHECK(sc == TG_OK, "%s: cpu: %s", c->name, tg_last_error());
    tg_status sg = sc == TG_OK ? par_open(c, &u, TG_BACKEND_WEBGPU, &gpu) : TG_ERR_STATE;
    CHECK(sc != TG_OK || sg == TG_OK, "%s: webgpu: %s", c->name, tg_last_error());
    if (sc == TG_OK && sg == TG_OK) par_compare(c->name, gpu.s, cpu.s, "p", c->params, np, c->tol > 0 ? c->tol : 1e-5, verbose);
    par_close(&cpu);
    if (sc == TG_OK) par_close(&gpu);
    par_user_free(&u);
}

/* The outputs and gradients par_check computes on WebGPU for case c, as
 * raw bytes (*n of them, malloc'd), and how many kernel lines compiled
 * for it call needle. */
static unsigned char *par_check_bits(const par_case *c, const char *needle, size_t *n, int *calls) {
    char dir[32];
    *n = 0, *calls = -1;
    unsigned char *buf = NULL;
    par_bits = tmpfile();
    bool dumped = par_dump_start(dir);
    par_check(c, false);
    if (dumped) *calls = par_dump_count(dir, needle, NULL), par_dump_end(dir);
    if (par_bits) {
        long len = ftell(par_bits);
        buf = len > 0 ? malloc((size_t)len) : NULL;
        rewind(par_bits);
        if (buf && fread(buf, 1, (size_t)len, par_bits) == (size_t)len) *n = (size_t)len;
        fclose(par_bits);
        par_bits = NULL;
    }
    return buf;
}
#endif
