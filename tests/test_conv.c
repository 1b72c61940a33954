/* Convolution family beyond the finite-difference rows of
 * op_cases.h: values against a plain double-precision reference (finite
 * differences only prove the gradient matches the forward, not that the
 * forward is right), every CPU code path (im2col + GEMM, direct loops, one
 * image per chunk), bitwise independence of the thread count, grouped conv
 * against dense conv with a block-diagonal weight, pooling's tie and padding
 * rules, the Conv2d layer's params and init, and the error messages. */
#include <math.h>

#include "check.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "ir/model.h"

static int64_t default_budget, default_tables; /* tg_cpu_conv_scratch_floats, _table_max as the library sets them */

typedef struct {
    int64_t N, C, H, W, O, kh, kw;
    int sh, sw, ph, pw, G;
} conv_cfg;

static int64_t out_size(int64_t in, int64_t k, int s, int p) { return (in + 2 * p - k) / s + 1; }

static uint64_t rs = 12345;
static float urand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* ---- a session computing y = conv(x, w), loss = sum(y * R), and both grads ---- */

typedef struct {
    conv_cfg c;
    tg_param px, pw;
    float *R;
    tg_shape ys;
} conv_run;

static tg_tensor conv_loss(tg_graph *g, void *u) {
    conv_run *r = u;
    tg_tensor y = tg_conv2d_hw(tg_use(g, r->px), tg_use(g, r->pw), r->c.sh, r->c.sw, r->c.ph, r->c.pw, r->c.G);
    tg_capture(y, "y");
    return tg_sum(tg_mul(y, tg_constant(g, r->ys, r->R)), TG_ALL, false);
}

/* Runs one step; y, gx, gw receive the output and the two gradients. */
static bool run_conv(const conv_cfg *c, const float *x, const float *w, const float *R, int threads, float *y,
                     float *gx, float *gw) {
    conv_run r = {*c, 0, 0, (float *)R, {4, {c->N, c->O, out_size(c->H, c->kh, c->sh, c->ph),
                                             out_size(c->W, c->kw, c->sw, c->pw)}}};
    tg_model *m = tg_model_new();
    r.px = tg_model_param(m, "x", TG_SHAPE(c->N, c->C, c->H, c->W), tg_init_values(x));
    r.pw = tg_model_param(m, "w", TG_SHAPE(c->O, c->C / c->G, c->kh, c->kw), tg_init_values(w));
    tg_train_spec spec = {.model = m, .loss = conv_loss, .user = &r, .optim = {.kind = TG_OPT_NONE},
                          .threads = threads};
    tg_session *s = NULL;
    bool ok = tg_session_new(&spec, &s) == TG_OK && tg_session_step(s, NULL, 0, NULL) == TG_OK &&
              tg_session_read(s, "y", y, tg_shape_numel(r.ys)) == TG_OK &&
              tg_session_get_grad(s, "x", gx, c->N * c->C * c->H * c->W) == TG_OK &&
              tg_session_get_grad(s, "w", gw, c->O * (c->C / c->G) * c->kh * c->kw) == TG_OK;
    if (!ok) fprintf(stderr, "run_conv: %s\n", tg_last_error());
    tg_session_free(s);
    tg_model_free(m);
    return ok;
}

/* The textbook definition, in double: y, and with gy = R the gradients. */
static void ref_conv(const conv_cfg *c, const float *x, const float *w, const float *R, double *y, double *gx,
                     double *gw) {
    int64_t Ho = out_size(c->H, c->kh, c->sh, c->ph), Wo = out_size(c->W, c->kw, c->sw, c->pw);
    int64_t Cg = c->C / c->G, Og = c->O / c->G;
    memset(gx, 0, sizeof(double) * (size_t)(c->N * c->C * c->H * c->W));
    memset(gw, 0, sizeof(double) * (size_t)(c->O * Cg * c->kh * c->kw));
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    int64_t yi = ((n * c->O + o) * Ho + oy) * Wo + ox;
                    double acc = 0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t i = 0; i < c->kh; i++)
                            for (int64_t j = 0; j < c->kw; j++) {
                                int64_t iy = oy * c->sh - c->ph + i, ix = ox * c->sw - c->pw + j;
                                if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W) continue;
                                int64_t xi = ((n * c->C + o / Og * Cg + ci) * c->H + iy) * c->W + ix;
                                int64_t wi = ((o * Cg + ci) * c->kh + i) * c->kw + j;
                                acc += (double)x[xi] * w[wi];
                                gx[xi] += (double)R[yi] * w[wi];
                                gw[wi] += (double)R[yi] * x[xi];
                            }
                    y[yi] = acc;
                }
}

static double max_rel_err(const float *a, const double *ref, int64_t n) {
    double scale = 1e-6, err = 0;
    for (int64_t i = 0; i < n; i++) scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    for (int64_t i = 0; i < n; i++) err = fabs(a[i] - ref[i]) > err ? fabs(a[i] - ref[i]) : err;
    return err / scale;
}

typedef struct {
    float *x, *w, *R, *y, *gx, *gw;
    double *ry, *rgx, *rgw;
    int64_t nx, nw, ny;
} bufs;

static void bufs_make(bufs *b, const conv_cfg *c) {
    b->nx = c->N * c->C * c->H * c->W;
    b->nw = c->O * (c->C / c->G) * c->kh * c->kw;
    b->ny = c->N * c->O * out_size(c->H, c->kh, c->sh, c->ph) * out_size(c->W, c->kw, c->sw, c->pw);
    b->x = malloc(sizeof(float) * (size_t)b->nx), b->gx = malloc(sizeof(float) * (size_t)b->nx);
    b->w = malloc(sizeof(float) * (size_t)b->nw), b->gw = malloc(sizeof(float) * (size_t)b->nw);
    b->R = malloc(sizeof(float) * (size_t)b->ny), b->y = malloc(sizeof(float) * (size_t)b->ny);
    b->ry = malloc(sizeof(double) * (size_t)b->ny), b->rgx = malloc(sizeof(double) * (size_t)b->nx);
    b->rgw = malloc(sizeof(double) * (size_t)b->nw);
    for (int64_t i = 0; i < b->nx; i++) b->x[i] = urand();
    for (int64_t i = 0; i < b->nw; i++) b->w[i] = urand();
    for (int64_t i = 0; i < b->ny; i++) b->R[i] = urand();
}

static void bufs_free(bufs *b) {
    free(b->x), free(b->w), free(b->R), free(b->y), free(b->gx), free(b->gw);
    free(b->ry), free(b->rgx), free(b->rgw);
}

/* Every config against the reference on every code path. */
static void reference_values(void) {
    static const conv_cfg cfgs[] = {
        {2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 1},  /* plain */
        {3, 4, 8, 7, 6, 3, 3, 2, 2, 1, 1, 1},  /* stride 2, padding 1 */
        {2, 4, 6, 9, 6, 2, 3, 1, 2, 1, 0, 2},  /* groups 2, non-square kernel, per-axis stride and padding */
        {2, 3, 5, 5, 6, 3, 3, 1, 1, 1, 1, 3},  /* depthwise, 2 outputs per channel */
        {2, 1, 8, 8, 5, 3, 3, 1, 1, 1, 1, 1},  /* one input channel (direct path by default) */
        {2, 6, 5, 5, 4, 1, 1, 1, 1, 0, 0, 2},  /* 1x1, grouped */
        {1, 2, 4, 4, 3, 4, 4, 1, 1, 0, 0, 1},  /* kernel = input: one output pixel */
        {2, 2, 5, 5, 2, 3, 3, 3, 3, 2, 2, 1},  /* stride 3 with padding that leaves windows of padding only */
        {3, 4, 4, 4, 5, 3, 3, 1, 1, 1, 1, 1},  /* a 4x4 plane: one register (the permute path) */
        {2, 4, 3, 5, 4, 2, 2, 1, 1, 0, 0, 2},  /* a 3x5 plane, groups 2 */
    };
    static const char *paths[] = {"default", "direct", "one image per chunk", "plain C", "row loops",
                                  "row loops, plain C"};
    for (int ci = 0; ci < (int)(sizeof cfgs / sizeof cfgs[0]); ci++) {
        bufs b;
        bufs_make(&b, &cfgs[ci]);
        ref_conv(&cfgs[ci], b.x, b.w, b.R, b.ry, b.rgx, b.rgw);
        /* the vector rows (AVX-512 or AVX2) and the plain C ones give the same bits */
        size_t all = (size_t)(b.ny + b.nx + b.nw);
        float *seen[2] = {malloc(sizeof(float) * all), malloc(sizeof(float) * all)};
        for (int path = 0; path < 6; path++) {
            tg_cpu_conv_force_direct = path == 1;
            tg_cpu_conv_scratch_floats = path == 2 ? 1 : default_budget;
            tg_cpu_conv_force_generic = path == 3 || path == 5;
            tg_cpu_conv_table_max = path >= 4 ? 0 : default_tables;
            bool ok = run_conv(&cfgs[ci], b.x, b.w, b.R, 2, b.y, b.gx, b.gw);
            CHECK(ok, "config %d (%s): the session failed", ci, paths[path]);
            if (!ok) continue;
            double ey = max_rel_err(b.y, b.ry, b.ny), ex = max_rel_err(b.gx, b.rgx, b.nx),
                   ew = max_rel_err(b.gw, b.rgw, b.nw);
            CHECK(ey < 1e-5 && ex < 1e-5 && ew < 1e-5,
                  "config %d (%s): relative errors y %.2g, dx %.2g, dw %.2g vs the double reference", ci,
                  paths[path], ey, ex, ew);
            if (path != 0 && path < 3) continue;
            float *v = seen[path >= 4];
            if (path == 0 || path == 4) {
                memcpy(v, b.y, sizeof(float) * (size_t)b.ny), memcpy(v + b.ny, b.gx, sizeof(float) * (size_t)b.nx);
                memcpy(v + b.ny + b.nx, b.gw, sizeof(float) * (size_t)b.nw);
                continue;
            }
            bool same = !memcmp(v, b.y, sizeof(float) * (size_t)b.ny) && !memcmp(v + b.ny, b.gx, sizeof(float) * (size_t)b.nx) &&
                        !memcmp(v + b.ny + b.nx, b.gw, sizeof(float) * (size_t)b.nw);
            CHECK(same, "config %d (%s): not the bits of %s", ci, paths[path], paths[path - 3]);
        }
        free(seen[0]), free(seen[1]);
        tg_cpu_conv_force_direct = false;
        tg_cpu_conv_force_generic = false;
        tg_cpu_conv_scratch_floats = default_budget;
        tg_cpu_conv_table_max = default_tables;
        bufs_free(&b);
    }
}

/* Same bits for 1, 2 and 3 threads, on shapes big enough to be split. */
static void thread_independence(void) {
    static const conv_cfg cfgs[] = {
        {16, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1},
        {8, 16, 12, 12, 16, 3, 3, 2, 2, 1, 1, 4},
        {8, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1, 16},
    };
    for (int ci = 0; ci < 3; ci++) {
        for (int path = 0; path < 2; path++) {
            tg_cpu_conv_scratch_floats = path ? 4096 : default_budget; /* several chunks on the second pass */
            tg_cpu_conv_table_max = path ? 0 : default_tables;        /* and the row loops */
            bufs b, t;
            bufs_make(&b, &cfgs[ci]);
            bufs_make(&t, &cfgs[ci]);
            bool ok = run_conv(&cfgs[ci], b.x, b.w, b.R, 1, b.y, b.gx, b.gw);
            for (int th = 2; th <= 3 && ok; th++) {
                ok = run_conv(&cfgs[ci], b.x, b.w, b.R, th, t.y, t.gx, t.gw);
                CHECK(ok && !memcmp(b.y, t.y, sizeof(float) * (size_t)b.ny) &&
                          !memcmp(b.gx, t.gx, sizeof(float) * (size_t)b.nx) &&
                          !memcmp(b.gw, t.gw, sizeof(float) * (size_t)b.nw),
                      "config %d pass %d: %d threads differ from 1 thread", ci, path, th);
            }
            bufs_free(&b);
            bufs_free(&t);
        }
    }
    tg_cpu_conv_scratch_floats = default_budget;
    tg_cpu_conv_table_max = default_tables;
}

/* conv with groups = dense conv whose weight is zero outside the group blocks. */
static void grouped_equals_block_diagonal(void) {
    conv_cfg gc = {3, 6, 7, 7, 4, 3, 3, 1, 1, 1, 1, 2}, dc = gc;
    dc.G = 1;
    bufs g, d;
    bufs_make(&g, &gc);
    bufs_make(&d, &dc);
    memcpy(d.x, g.x, sizeof(float) * (size_t)g.nx);
    memcpy(d.R, g.R, sizeof(float) * (size_t)g.ny);
    int64_t Cg = 3, Og = 2, kk = 9;
    for (int64_t o = 0; o < 4; o++)
        for (int64_t c = 0; c < 6; c++)
            for (int64_t t = 0; t < kk; t++)
                d.w[(o * 6 + c) * kk + t] = c / Cg == o / Og ? g.w[(o * Cg + c % Cg) * kk + t] : 0.0f;
    bool ok = run_conv(&gc, g.x, g.w, g.R, 2, g.y, g.gx, g.gw) && run_conv(&dc, d.x, d.w, d.R, 2, d.y, d.gx, d.gw);
    CHECK(ok, "grouped vs dense: a session failed");
    double ey = 0, ex = 0, ew = 0;
    for (int64_t i = 0; ok && i < g.ny; i++) ey = fmax(ey, fabs(g.y[i] - d.y[i]));
    for (int64_t i = 0; ok && i < g.nx; i++) ex = fmax(ex, fabs(g.gx[i] - d.gx[i]));
    for (int64_t o = 0; ok && o < 4; o++)
        for (int64_t c = 0; c < Cg; c++)
            for (int64_t t = 0; t < kk; t++)
                ew = fmax(ew, fabs(g.gw[(o * Cg + c) * kk + t] - d.gw[(o * 6 + o / Og * Cg + c) * kk + t]));
    CHECK(ok && ey < 1e-5 && ex < 1e-5 && ew < 1e-4, "grouped vs block-diagonal dense: y %.2g dx %.2g dw %.2g", ey,
          ex, ew);
    bufs_free(&g);
    bufs_free(&d);
}

/* ---- pooling and upsampling ---- */

static float pool_in[64];
static int pool_case;

static tg_tensor pool_loss(tg_graph *g, void *u) {
    tg_tensor x = tg_use(g, *(tg_param *)u), y;
    switch (pool_case) {
    case 0: y = tg_max_pool2d(x, 2, 0, 0); break;
    case 1: y = tg_max_pool2d(x, 3, 1, 1); break;
    default: y = tg_nearest_upsample2d(x, 2); break;
    }
    tg_capture(y, "y");
    tg_shape s = tg_tensor_shape(y);
    static float w[256];
    for (int i = 0; i < 256; i++) w[i] = (float)(i + 1);
    return tg_sum(tg_mul(y, tg_constant(g, s, w)), TG_ALL, false);
}

static bool run_pool(int which, tg_shape xs, float *y, int64_t ny, float *gx) {
    pool_case = which;
    tg_model *m = tg_model_new();
    tg_param p = tg_model_param(m, "x", xs, tg_init_values(pool_in));
    tg_train_spec spec = {.model = m, .loss = pool_loss, .user = &p, .optim = {.kind = TG_OPT_NONE}, .threads = 1};
    tg_session *s = NULL;
    bool ok = tg_session_new(&spec, &s) == TG_OK && tg_session_step(s, NULL, 0, NULL) == TG_OK &&
              tg_session_read(s, "y", y, ny) == TG_OK &&
              tg_session_get_grad(s, "x", gx, tg_shape_numel(xs)) == TG_OK;
    if (!ok) fprintf(stderr, "run_pool: %s\n", tg_last_error());
    tg_session_free(s);
    tg_model_free(m);
    return ok;
}

static void pooling_rules(void) {
    float y[64], gx[64];
    /* Ties: a 2x2 window of equal values sends its gradient to the first (top-left). */
    for (int i = 0; i < 16; i++) pool_in[i] = 1.0f;
    bool ok = run_pool(0, TG_SHAPE(1, 1, 4, 4), y, 4, gx);
    CHECK(ok && y[0] == 1.0f && gx[0] == 1.0f && gx[1] == 0 && gx[4] == 0 && gx[5] == 0 && gx[2] == 2.0f &&
              gx[8] == 3.0f && gx[10] == 4.0f,
          "tied window: the gradient must go to the first element in row-major order");

    /* Padding never wins: all-negative input, 3x3 windows with padding 1.
     * Every window holds the centre, the largest value. */
    for (int i = 0; i < 9; i++) pool_in[i] = -10.0f - (float)i;
    pool_in[4] = -1.0f;
    ok = run_pool(1, TG_SHAPE(1, 1, 3, 3), y, 9, gx);
    bool all = ok;
    for (int i = 0; i < 9 && ok; i++) all &= y[i] == -1.0f;
    CHECK(all, "padding won a max: y[0]=%g y[8]=%g, want -1", y[0], y[8]);
    /* ... so the centre's gradient is the sum of all nine weights. */
    CHECK(ok && gx[4] == 45.0f && gx[0] == 0.0f, "overlapping windows: gx[4]=%g, want 45", gx[4]);

    /* Floor semantics: 5x5 pooled by 2 is 2x2, the last row and column dropped. */
    for (int i = 0; i < 25; i++) pool_in[i] = (float)i;
    ok = run_pool(0, TG_SHAPE(1, 1, 5, 5), y, 4, gx);
    CHECK(ok && y[0] == 6 && y[1] == 8 && y[2] == 16 && y[3] == 18 && gx[24] == 0 && gx[6] == 1 && gx[18] == 4,
          "5x5 max_pool2d(2): got %g %g %g %g", y[0], y[1], y[2], y[3]);

    /* Upsampling repeats each pixel into a 2x2 block; its gradient sums the block. */
    for (int i = 0; i < 6; i++) pool_in[i] = (float)(i + 1);
    ok = run_pool(2, TG_SHAPE(1, 1, 2, 3), y, 24, gx);
    static const float want_y[24] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 4, 4, 5, 5, 6, 6};
    CHECK(ok && !memcmp(y, want_y, sizeof want_y), "nearest_upsample2d values");
    /* weights are 1..24 row-major over the 4x6 output: block (0,0) holds 1,2,7,8 */
    CHECK(ok && gx[0] == 18 && gx[1] == 26 && gx[5] == 82, "upsample gradient gx[0]=%g gx[1]=%g gx[5]=%g", gx[0],
          gx[1], gx[5]);
}

/* Pooling on data full of ties (four levels) and a few NaNs, against the
 * documented rule: the max (NaN if the window holds one), and the whole
 * gradient to the first element in row-major window order that equals it
 * (the first NaN for a NaN max). Exact, for the 2x2 fast paths (pool2x2.c,
 * the index table in AVX-512 and plain C) and the general scan. */
typedef struct {
    int k, s, p;
    tg_shape xs;
} pool_cfg;
static pool_cfg pcfg;
static float *pool_x, *pool_R;

static tg_tensor pool_ref_loss(tg_graph *g, void *u) {
    tg_tensor y = tg_max_pool2d(tg_use(g, *(tg_param *)u), pcfg.k, pcfg.s, pcfg.p);
    tg_capture(y, "y");
    tg_tensor R = tg_constant(g, tg_tensor_shape(y), pool_R);
    return tg_sum(tg_mul(y, R), TG_ALL, false);
}

static void pool_against_reference(void) {
    static const pool_cfg cfgs[] = {
        {2, 2, 0, {4, {2, 3, 7, 9}}}, {2, 2, 0, {4, {1, 2, 8, 40}}}, {3, 2, 1, {4, {2, 2, 7, 6}}},
        {2, 1, 1, {4, {1, 3, 5, 4}}}, {3, 3, 0, {4, {2, 2, 9, 7}}},
        /* pool2x2.c's shapes: Wo dividing 16 (a partial last block of 16), 16 dividing Wo */
        {2, 2, 0, {4, {3, 5, 8, 8}}}, {2, 2, 0, {4, {1, 3, 4, 4}}}, {2, 2, 0, {4, {1, 2, 6, 64}}},
    };
    for (int ci = 0; ci < (int)(sizeof cfgs / sizeof cfgs[0]); ci++) {
        pcfg = cfgs[ci];
        tg_shape xs = pcfg.xs;
        int64_t H = xs.d[2], W = xs.d[3], planes = xs.d[0] * xs.d[1];
        int64_t Ho = (H + 2 * pcfg.p - pcfg.k) / pcfg.s + 1, Wo = (W + 2 * pcfg.p - pcfg.k) / pcfg.s + 1;
        int64_t nx = planes * H * W, ny = planes * Ho * Wo;
        pool_x = malloc(sizeof(float) * (size_t)nx);
        pool_R = malloc(sizeof(float) * (size_t)ny);
        float *y = malloc(sizeof(float) * (size_t)ny), *gx = malloc(sizeof(float) * (size_t)nx);
        float *ry = malloc(sizeof(float) * (size_t)ny), *rgx = calloc((size_t)nx, sizeof(float));
        for (int64_t i = 0; i < nx; i++) pool_x[i] = (float)((int)((urand() + 1.0f) * 2.0f)) * 0.5f - 1.0f;
        for (int64_t i = 0; i < nx; i += 37) pool_x[i] = NAN;
        /* R is 0 on NaN windows (their gradient is then 0 wherever it goes; the
         * loss is NaN, which does not reach the gradients); y checks their values. */
        for (int64_t t = 0; t < planes; t++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    int64_t best = -1;
                    float m = 0;
                    for (int64_t i = 0; i < pcfg.k; i++)
                        for (int64_t c = 0; c < pcfg.k; c++) {
                            int64_t iy = oy * pcfg.s - pcfg.p + i, ix = ox * pcfg.s - pcfg.p + c;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                            float v = pool_x[(t * H + iy) * W + ix];
                            if (best < 0 || (m == m && (v != v || v > m))) best = (t * H + iy) * W + ix, m = v;
                        }
                    int64_t yi = (t * Ho + oy) * Wo + ox;
                    ry[yi] = m;
                    pool_R[yi] = m == m ? (float)(yi % 7 + 1) : 0.0f;
                    if (m == m) rgx[best] += pool_R[yi];
                }
        for (int path = 0; path < 3; path++) { /* index table (AVX-512, plain C), window scan */
            int generic = path == 1;
            tg_cpu_conv_force_generic = generic;
            tg_cpu_conv_table_max = path == 2 ? 0 : default_tables;
            tg_model *mo = tg_model_new();
            tg_param p = tg_model_param(mo, "x", xs, tg_init_values(pool_x));
            tg_train_spec spec = {.model = mo, .loss = pool_ref_loss, .user = &p, .optim = {.kind = TG_OPT_NONE},
                                  .threads = 2};
            tg_session *s = NULL;
            bool ok = tg_session_new(&spec, &s) == TG_OK && tg_session_step(s, NULL, 0, NULL) == TG_OK &&
                      tg_session_read(s, "y", y, ny) == TG_OK && tg_session_get_grad(s, "x", gx, nx) == TG_OK;
            CHECK(ok, "pool config %d: %s", ci, tg_last_error());
            int bad_y = 0, bad_g = 0;
            for (int64_t i = 0; ok && i < ny; i++) bad_y += !(y[i] == ry[i] || (y[i] != y[i] && ry[i] != ry[i]));
            for (int64_t i = 0; ok && i < nx; i++) bad_g += gx[i] != rgx[i];
            CHECK(ok && bad_y == 0 && bad_g == 0, "pool config %d (%s): %d outputs and %d gradients differ", ci,
                  path == 2 ? "window scan" : generic ? "plain C" : "default", bad_y, bad_g);
            tg_session_free(s);
            tg_model_free(mo);
        }
        tg_cpu_conv_force_generic = false;
        tg_cpu_conv_table_max = default_tables;
        free(pool_x), free(pool_R), free(y), free(gx), free(ry), free(rgx);
    }
}

/* relu then pooling: the backward's fused relu_grad(max_pool2d_grad) step
 * (pool2x2.c's pass, or the two kernels when that does not apply) gives the
 * same bits as the separate op-table kernels. Data with ties, negatives and
 * zeros, so windows whose max the relu clipped to 0 are covered. */
static tg_tensor relu_pool_loss(tg_graph *g, void *u) {
    tg_tensor y = tg_max_pool2d(tg_relu(tg_use(g, *(tg_param *)u)), 2, 0, 0);
    tg_tensor R = tg_constant(g, tg_tensor_shape(y), pool_R);
    return tg_sum(tg_mul(y, R), TG_ALL, false);
}

static bool relu_pool_grad(tg_shape xs, const float *x, float *gx, int64_t nx) {
    tg_model *mo = tg_model_new();
    tg_param p = tg_model_param(mo, "x", xs, tg_init_values(x));
    tg_train_spec spec = {.model = mo, .loss = relu_pool_loss, .user = &p, .optim = {.kind = TG_OPT_NONE}, .threads = 2};
    tg_session *s = NULL;
    bool ok = tg_session_new(&spec, &s) == TG_OK && tg_session_step(s, NULL, 0, NULL) == TG_OK &&
              tg_session_get_grad(s, "x", gx, nx) == TG_OK;
    tg_session_free(s);
    tg_model_free(mo);
    return ok;
}

static void relu_pool_fused(void) {
    static const tg_shape shapes[] = {{4, {4, 8, 8, 8}}, {4, {2, 3, 6, 64}}, {4, {2, 3, 7, 9}}};
    for (int si = 0; si < 3; si++) {
        tg_shape xs = shapes[si];
        int64_t nx = xs.d[0] * xs.d[1] * xs.d[2] * xs.d[3], ny = xs.d[0] * xs.d[1] * (xs.d[2] / 2) * (xs.d[3] / 2);
        float *x = malloc(sizeof(float) * (size_t)nx), *gf = malloc(sizeof(float) * (size_t)nx);
        float *gs = malloc(sizeof(float) * (size_t)nx);
        pool_R = malloc(sizeof(float) * (size_t)ny);
        for (int64_t i = 0; i < nx; i++) x[i] = (float)((int)((urand() + 1.0f) * 2.0f)) * 0.5f - 1.0f;
        for (int64_t i = 0; i < ny; i++) pool_R[i] = urand();
        for (int generic = 0; generic < 2; generic++) { /* pool2x2.c where it applies; the two kernels */
            tg_cpu_conv_force_generic = generic;
            tg_cpu_use_generic_steps(true);
            bool ok = relu_pool_grad(xs, x, gs, nx);
            tg_cpu_use_generic_steps(false);
            ok = ok && relu_pool_grad(xs, x, gf, nx);
            int bad = 0;
            for (int64_t i = 0; ok && i < nx; i++) bad += memcmp(&gf[i], &gs[i], sizeof(float)) != 0;
            CHECK(ok && bad == 0, "relu + pool shape %d (%s): %d fused gradients differ (%s)", si,
                  generic ? "plain C" : "default", bad, ok ? "" : tg_last_error());
        }
        tg_cpu_conv_force_generic = false;
        free(x), free(gf), free(gs), free(pool_R);
    }
}

/* ---- the Conv2d layer ---- */

static tg_conv2d layer;
static tg_tensor layer_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor y = tg_conv2d_fwd(g, &layer, tg_input(g, "x"));
    tg_capture(y, "y");
    return tg_sum(y, TG_ALL, false);
}

static void conv_layer(void) {
    tg_model *m = tg_model_new();
    layer = tg_conv2d_new(m, "c1", 4, 8, 3, 1, 1, 2, true);
    CHECK(tg_model_param_count(m) == 2, "Conv2d declares W and b");
    CHECK(!strcmp(tg_model_param_name(m, layer.W), "c1.W") && !strcmp(tg_model_param_name(m, layer.b), "c1.b"),
          "Conv2d param names");
    tg_shape ws = tg_model_param_shape(m, layer.W), bs = tg_model_param_shape(m, layer.b);
    CHECK(ws.ndim == 4 && ws.d[0] == 8 && ws.d[1] == 2 && ws.d[2] == 3 && ws.d[3] == 3 && bs.ndim == 1 &&
              bs.d[0] == 8,
          "Conv2d layout: W [out, in/groups, k, k], b [out]");
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(2, 4, 5, 5)}};
    tg_train_spec spec = {.model = m, .loss = layer_loss, .inputs = in, .n_inputs = 1, .optim = tg_adam(tg_lr_constant(0)),
                          .seed = 7};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (s) {
        /* randn(0.02) by default, as upstream's Conv2d. */
        float w[8 * 2 * 9], b[8];
        CHECK_OK(tg_session_get_param(s, "c1.W", w, 144));
        CHECK_OK(tg_session_get_param(s, "c1.b", b, 8));
        double ss = 0;
        for (int i = 0; i < 144; i++) ss += (double)w[i] * w[i];
        double std = sqrt(ss / 144), want = 0.02;
        CHECK(fabs(std - want) < 0.2 * want, "Conv2d default init std %.4f, want about %.4f", std, want);
        CHECK(b[0] == 0 && b[7] == 0, "Conv2d bias starts at zero");

        /* y = conv(x, W) + b: set b, compare against the reference on the layer's own params. */
        for (int i = 0; i < 8; i++) b[i] = (float)i;
        CHECK_OK(tg_session_set_param(s, "c1.b", b, 8));
        float x[200], y[400];
        for (int i = 0; i < 200; i++) x[i] = urand();
        tg_feed f = TG_FEED("x", x, 200);
        CHECK_OK(tg_session_step(s, &f, 1, NULL));
        CHECK_OK(tg_session_read(s, "y", y, 400));
        conv_cfg c = {2, 4, 5, 5, 8, 3, 3, 1, 1, 1, 1, 2};
        static double ry[400], rgx[200], rgw[144];
        float R[400];
        for (int i = 0; i < 400; i++) R[i] = 1;
        ref_conv(&c, x, w, R, ry, rgx, rgw);
        double err = 0;
        for (int i = 0; i < 400; i++) err = fmax(err, fabs(y[i] - (ry[i] + i / 25 % 8)));
        CHECK(err < 1e-4, "Conv2d forward differs from conv + bias by %.2g", err);
    }
    tg_session_free(s);
    tg_model_free(m);

    /* The model's kaiming default for any 4-d param is prod(shape[1:]). */
    m = tg_model_new();
    tg_model_param(m, "k", TG_SHAPE(64, 3, 5, 5), tg_init_kaiming());
    float *v = malloc(sizeof(float) * 64 * 75);
    extern void tg_model_init_param(const tg_model *m, int p, uint64_t seed, float *dst);
    tg_model_init_param(m, 0, 3, v);
    double ss = 0;
    for (int i = 0; i < 64 * 75; i++) ss += (double)v[i] * v[i];
    double std = sqrt(ss / (64 * 75)), want = sqrt(2.0 / 75);
    CHECK(fabs(std - want) < 0.05 * want, "kaiming default fan-in of [64,3,5,5]: std %.4f, want %.4f", std, want);
    free(v);
    tg_model_free(m);
}

/* Conv2d's options: a 2x3 kernel, strides 2 and 1, paddings 1 and 2, no
 * bias, kaiming with decay off; the forward against the reference. */
static void conv_layer_opts(void) {
    tg_model *m = tg_model_new();
    tg_init k = tg_init_kaiming();
    layer = tg_conv2d_new_opts(m, "c", 4, 6,
                               (tg_conv2d_opts){.kh = 2, .kw = 3, .stride_h = 2, .pad_h = 1, .pad_w = 2, .groups = 2,
                                                .no_bias = true, .init = &k, .decay = TG_DECAY_OFF});
    tg_shape ws = tg_model_param_shape(m, layer.W);
    CHECK(tg_model_param_count(m) == 1 && layer.b == -1, "Conv2d no_bias: %d params", tg_model_param_count(m));
    CHECK(ws.ndim == 4 && ws.d[0] == 6 && ws.d[1] == 2 && ws.d[2] == 2 && ws.d[3] == 3,
          "Conv2d W [out, in/groups, kh, kw]: got [%lld,%lld,%lld,%lld]", (long long)ws.d[0], (long long)ws.d[1],
          (long long)ws.d[2], (long long)ws.d[3]);
    CHECK(layer.stride_h == 2 && layer.stride_w == 1 && layer.pad_h == 1 && layer.pad_w == 2 && layer.kh == 2 &&
              layer.kw == 3,
          "Conv2d per-axis fields");
    CHECK(!m->params[layer.W].decay && m->params[layer.W].init.kind == TG_INIT_KAIMING, "Conv2d init and decay options");
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(2, 4, 5, 6)}};
    tg_train_spec spec = {.model = m, .loss = layer_loss, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_constant(0)), .seed = 2};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    if (s) {
        conv_cfg c = {2, 4, 5, 6, 6, 2, 3, 2, 1, 1, 2, 2};
        int64_t ny = 2 * 6 * out_size(5, 2, 2, 1) * out_size(6, 3, 1, 2);
        float w[72], x[240], y[2 * 6 * 3 * 8], R[2 * 6 * 3 * 8];
        static double ry[288], rgx[240], rgw[72];
        CHECK(ny == 288, "output size %lld", (long long)ny);
        CHECK_OK(tg_session_get_param(s, "c.W", w, 72));
        double ss = 0; /* kaiming over the true fan-in 2 * 2 * 3 = 12 */
        for (int i = 0; i < 72; i++) ss += (double)w[i] * w[i];
        CHECK(fabs(sqrt(ss / 72) - sqrt(2.0 / 12)) < 0.25 * sqrt(2.0 / 12), "Conv2d kaiming option: std %.3f",
              sqrt(ss / 72));
        for (int i = 0; i < 240; i++) x[i] = urand();
        for (int i = 0; i < 288; i++) R[i] = 1;
        tg_feed f = TG_FEED("x", x, 240);
        CHECK_OK(tg_session_step(s, &f, 1, NULL));
        CHECK_OK(tg_session_read(s, "y", y, 288));
        ref_conv(&c, x, w, R, ry, rgx, rgw);
        CHECK(max_rel_err(y, ry, 288) < 1e-5, "Conv2d with per-axis options differs from the reference by %.2g",
              max_rel_err(y, ry, 288));
    }
    tg_session_free(s);
    tg_model_free(m);
}

/* ---- errors name the op, the shapes and the call site ---- */

static int err_case, err_line;
static tg_tensor err_loss(tg_graph *g, void *u) {
    (void)u;
    tg_tensor x = tg_input(g, "x"), w6 = tg_full(g, TG_SHAPE(6, 2, 3, 3), 0.1f), y;
    switch (err_case) {
    case 0: err_line = __LINE__; y = tg_conv2d(x, w6, 1, 0, 4); break;                 /* C=4, groups 4: w needs C/g=1 */
    case 1: err_line = __LINE__; y = tg_conv2d(x, w6, 1, 0, 3); break;                 /* 4 % 3 */
    case 2: err_line = __LINE__; y = tg_conv2d(x, tg_full(g, TG_SHAPE(6, 4, 9, 3), 0.1f), 1, 1, 1); break;
    case 3: err_line = __LINE__; y = tg_conv2d(x, w6, 0, 0, 2); break;
    case 4: err_line = __LINE__; y = tg_max_pool2d(x, 2, 2, 2); break;
    case 5: err_line = __LINE__; y = tg_nearest_upsample2d(x, 0); break;
    case 6: err_line = __LINE__; y = tg_max_pool2d(tg_reshape(x, TG_SHAPE(2, 4, 30)), 2, 0, 0); break;
    case 7: err_line = __LINE__; y = tg_conv2d(x, tg_full(g, TG_SHAPE(6, 4, 3), 0.1f), 1, 0, 1); break;
    default: err_line = __LINE__; y = tg_conv2d_bias(x, w6, tg_full(g, TG_SHAPE(4), 0.f), 1, 1, 0, 0, 2); break;
    }
    return tg_sum(y, TG_ALL, false);
}

static void errors(void) {
    static const char *want[] = {
        "tg_conv2d: input [2,4,6,5] and weight [6,2,3,3] do not fit groups=4",
        "tg_conv2d: input [2,4,6,5] and weight [6,2,3,3] do not fit groups=3",
        "tg_conv2d: kernel H=9 is larger than the padded input (6 + 2*1) of [2,4,6,5]",
        "tg_conv2d: H: kernel 3, stride 0, padding 0 (need kernel >= 1, stride >= 1, padding >= 0)",
        "tg_max_pool2d: padding H=2 is more than half the kernel 2",
        "tg_nearest_upsample2d: factor must be a positive integer, got 0",
        "tg_max_pool2d: input must be 4-d [N, C, H, W], got [2,4,30]",
        "tg_conv2d: weight must be 4-d [O, C/groups, kH, kW], got [6,4,3]",
        "tg_conv2d_bias: bias must be f32 [6] for weight [6,2,3,3], got f32 [4]",
    };
    for (err_case = 0; err_case < (int)(sizeof want / sizeof want[0]); err_case++) {
        tg_model *m = tg_model_new();
        tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(2, 4, 6, 5)}};
        tg_train_spec spec = {.model = m, .loss = err_loss, .inputs = in, .n_inputs = 1};
        tg_session *s = NULL;
        tg_status st = tg_session_new(&spec, &s);
        char site[64];
        snprintf(site, sizeof site, "(test_conv.c:%d)", err_line);
        CHECK(st == TG_ERR_SHAPE && strstr(tg_last_error(), want[err_case]) && strstr(tg_last_error(), site),
              "error case %d: got %s '%s', want '%s' %s", err_case, tg_status_name(st), tg_last_error(),
              want[err_case], site);
        tg_session_free(s);
        tg_model_free(m);
    }
}

int main(void) {
    default_budget = tg_cpu_conv_scratch_floats;
    default_tables = tg_cpu_conv_table_max;
    reference_values();
    thread_independence();
    grouped_equals_block_diagonal();
    pooling_rules();
    pool_against_reference();
    relu_pool_fused();
    conv_layer();
    conv_layer_opts();
    errors();
    return check_summary("test_conv");
}
