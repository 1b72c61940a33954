/* A growing neural cellular automaton with a SIREN decoder (upstream's
 * regrow sample, after "From Cells to Pixels" and Mordvintsev et al.'s
 * Growing Neural Cellular Automata): a lattice of G x G cells, each a
 * vector of C numbers, grows a target image from one seed cell by
 * repeating one learned local rule, and regrows it after a cut.
 *
 *   a CA step: every cell perceives its 3x3 neighbourhood through four fixed
 *   filters per channel (identity, Sobel x, Sobel y, Laplacian; a grouped
 *   conv over a wrapped-around lattice), a 1x1 conv of FC units (relu) and a
 *   1x1 conv back to C channels (zero init) give its update, which half
 *   the cells (at random, tg_randn > 0) apply; a cell whose 3x3
 *   neighbourhood had or has no alpha (channel 3) above 0.1 is set to zero.
 *   the render: the lattice upsampled S times (bilinear: a grouped conv of
 *   tent weights, then depth to space), each pixel's C values and 4
 *   sub-cell coordinates through a SIREN (sin(OMEGA x W + b), 3 layers of
 *   H) to RGBA, masked where the upsampled alpha's 3x3 maximum is not
 *   above 0.1.
 *
 * Training (upstream's recipe, smaller: G = 24, C = 16, FC = 64, K = 20 CA
 * steps per forward, S = 2, H = 32, B = 8): a pool of POOL states starts
 * as seeds; each step takes B of them, puts a fresh seed in slot 0 every
 * INJECT_EVERY steps, and, as Mordvintsev et al. train regeneration, cuts
 * a disc out of the last DAMAGED states; runs K CA steps and the render;
 * writes the final states back (a capture). The loss is upstream's minus
 * its LPIPS term: squared plus absolute error of the render against the
 * target, of the alpha against the target's (upstream's x2), and 100 x the
 * cells' overflow beyond [-1, 1]. Upstream's LPIPS term runs VGG16, whose
 * weights cannot be had offline here: it is left out. Adam 1e-3, x0.3
 * after 2/3 of the run (upstream: after 1000 of 1500 steps), with the
 * gradient of each CA param normalized (normalize_grads with a filter:
 * the automaton's params only, not the SIREN's), as upstream.
 *
 * Then a forward session grows the seed for GROW_STEPS CA steps and
 * renders it (`grown_loss`, the image loss against the target), cuts a
 * disc of radius CUT out of it, runs GROW_STEPS more and renders again.
 * Ends with `regrown_loss=<value>`; exits 2 when either is above
 * TARGET_LOSS (an empty canvas scores 0.38). --out FILE writes a PNG: the target, the grown image, the cut,
 * the regrown image. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

enum { C = 16, FC = 64, G = 24, K = 20, S = 2, GH = G * S, H = 32, B = 8, SIN = 4 + C };
enum { GG = G * G, STATE = C * GG, GGH = GH * GH, POOL = 256, INJECT_EVERY = 8, DAMAGED = 2 };
enum { GROW_STEPS = 2 * K, CUT = 5 };
#define OMEGA 10.0f
#define LR 1e-3f
#define TARGET_LOSS 0.1

typedef struct {
    tg_conv2d w1, w2;
    tg_linear s1, s2, s3, out;
} nca_net;

/* ---- the automaton ---- */

/* alive [n, 1, G, G] as f32: some alpha in the 3x3 neighbourhood above 0.1 */
static tg_tensor alive(tg_tensor s) {
    return tg_cast(tg_greater_s(tg_max_pool2d(tg_narrow(s, 1, 3, 1), 3, 1, 1), 0.1f), TG_F32);
}

/* s [n, C, G, G] -> [n, C, G + 2, G + 2], wrapped around */
static tg_tensor wrap_pad(tg_tensor s) {
    tg_tensor cols[3] = {tg_narrow(s, 3, G - 1, 1), s, tg_narrow(s, 3, 0, 1)};
    tg_tensor px = tg_concat(cols, 3, 3);
    tg_tensor rows[3] = {tg_narrow(px, 2, G - 1, 1), px, tg_narrow(px, 2, 0, 1)};
    return tg_concat(rows, 3, 2);
}

/* One CA step: s [n, C, G, G] -> [n, C, G, G]. filters [4C, 1, 3, 3]. */
static tg_tensor ca_step(tg_graph *g, const nca_net *m, tg_tensor s, tg_tensor filters) {
    int64_t n = tg_tensor_shape(s).d[0];
    tg_tensor pre = alive(s);
    tg_tensor z = tg_conv2d(wrap_pad(s), filters, 1, 0, C);
    tg_tensor ds = tg_conv2d_fwd(g, &m->w2, tg_relu(tg_conv2d_fwd(g, &m->w1, z)));
    tg_tensor fire = tg_greater_s(tg_randn(g, TG_SHAPE(n, 1, G, G)), 0.0f);
    tg_tensor s2 = tg_where(fire, tg_add(s, ds), s);
    return tg_mul(s2, tg_mul(pre, alive(s2)));
}

/* x [n, ch, G, G] -> [n, ch, GH, GH], bilinear: a grouped conv of the tent
 * weights w [ch * S * S, 1, 3, 3], then depth to space. */
static tg_tensor upsample(tg_tensor x, tg_tensor w, int64_t ch) {
    int64_t n = tg_tensor_shape(x).d[0];
    tg_tensor t = tg_reshape(tg_conv2d(x, w, 1, 1, (int)ch), TG_SHAPE(n, ch, S, S, G, G));
    return tg_reshape(tg_permute(t, TG_SHAPE(0, 1, 4, 2, 5, 3)), TG_SHAPE(n, ch, GH, GH));
}

/* The render: s [n, C, G, G] -> RGBA [n, 4, GH, GH]; *alpha_up: the
 * upsampled alpha [n, 1, GH, GH]. */
static tg_tensor render(tg_graph *g, const nca_net *m, tg_tensor s, tg_tensor *alpha_up) {
    int64_t n = tg_tensor_shape(s).d[0];
    tg_tensor up = upsample(s, tg_input(g, "bilin"), C);
    tg_tensor parts[2] = {tg_input(g, "coords"), up};
    tg_tensor feats = tg_concat(parts, 2, 1); /* [n, 4 + C, GH, GH] */
    tg_tensor rows = tg_reshape(tg_permute(feats, TG_SHAPE(0, 2, 3, 1)), TG_SHAPE(n * GGH, SIN));
    tg_tensor h = tg_sin(tg_mul_s(tg_linear_fwd(g, &m->s1, rows), OMEGA));
    h = tg_sin(tg_mul_s(tg_linear_fwd(g, &m->s2, h), OMEGA));
    h = tg_sin(tg_mul_s(tg_linear_fwd(g, &m->s3, h), OMEGA));
    tg_tensor img = tg_permute(tg_reshape(tg_linear_fwd(g, &m->out, h), TG_SHAPE(n, GH, GH, 4)), TG_SHAPE(0, 3, 1, 2));
    tg_tensor a_up = upsample(tg_narrow(s, 1, 3, 1), tg_input(g, "bilin1"), 1);
    tg_tensor mask = tg_cast(tg_greater_s(tg_max_pool2d(a_up, 3, 1, 1), 0.1f), TG_F32);
    if (alpha_up) *alpha_up = a_up;
    return tg_mul(img, mask);
}

/* The image loss of a render against target [n, 4, GH, GH]. */
static tg_tensor image_loss(tg_tensor rendered, tg_tensor target) {
    tg_tensor d = tg_sub(rendered, target);
    return tg_add(tg_mean(tg_square(d), TG_ALL, false), tg_mean(tg_abs(d), TG_ALL, false));
}

static tg_tensor nca_loss(tg_graph *g, void *u) {
    const nca_net *m = u;
    tg_tensor s = tg_input(g, "state"), filters = tg_input(g, "filters"), target = tg_input(g, "target");
    for (int k = 0; k < K; k++) s = ca_step(g, m, s, filters);
    s = tg_capture(s, "final");
    tg_tensor a_up;
    tg_tensor rendered = render(g, m, s, &a_up);
    tg_tensor shape = tg_sub(tg_narrow(target, 1, 3, 1), tg_mul_s(a_up, 2.0f)); /* the paper's alpha x 2 */
    tg_tensor shape_loss = tg_add(tg_mean(tg_square(shape), TG_ALL, false), tg_mean(tg_abs(shape), TG_ALL, false));
    tg_tensor overflow = tg_mul_s(tg_mean(tg_abs(tg_sub(s, tg_clamp(s, -1.0f, 1.0f))), TG_ALL, false), 100.0f);
    return tg_add(tg_add(image_loss(rendered, target), shape_loss), overflow);
}

/* Forward sessions: one CA step, and the render's image loss (output) with the render captured. */
static tg_tensor step_fn(tg_graph *g, void *u) { return ca_step(g, u, tg_input(g, "state"), tg_input(g, "filters")); }
static tg_tensor render_fn(tg_graph *g, void *u) {
    tg_tensor img = tg_capture(render(g, u, tg_input(g, "state"), NULL), "image");
    return image_loss(img, tg_input(g, "target"));
}

/* The CA's params get their gradients normalized, the SIREN's do not. */
static bool is_ca_param(const char *name, void *user) {
    (void)user;
    return strncmp(name, "w1.", 3) == 0 || strncmp(name, "w2.", 3) == 0;
}

/* ---- host-side tables ---- */

static void make_filters(float *f) { /* [4C, 1, 3, 3]: output channel c * 4 + k is filter k of channel c */
    static const float f3[4][9] = {{0, 0, 0, 0, 1, 0, 0, 0, 0},
                                   {-1, 0, 1, -2, 0, 2, -1, 0, 1},
                                   {-1, -2, -1, 0, 0, 0, 1, 2, 1},
                                   {1, 2, 1, 2, -12, 2, 1, 2, 1}};
    for (int c = 0; c < C; c++)
        for (int k = 0; k < 4; k++) memcpy(f + (c * 4 + k) * 9, f3[k], sizeof f3[k]);
}

/* [ch * S * S, 1, 3, 3]: output (c, dy, dx) samples the cell at sub-pixel (dy, dx) from its 3x3 neighbourhood */
static void make_bilinear(float *w, int ch) {
    static const float w1d[S][3] = {{0.25f, 0.75f, 0}, {0, 0.75f, 0.25f}};
    for (int c = 0; c < ch; c++)
        for (int dy = 0; dy < S; dy++)
            for (int dx = 0; dx < S; dx++)
                for (int ky = 0; ky < 3; ky++)
                    for (int kx = 0; kx < 3; kx++) w[((c * S + dy) * S + dx) * 9 + ky * 3 + kx] = w1d[dy][ky] * w1d[dx][kx];
}

/* [n, 4, GH, GH]: sin and cos of each pixel's place inside its cell */
static void make_coords(float *a, int n) {
    for (int y = 0; y < GH; y++)
        for (int x = 0; x < GH; x++) {
            float cy = (float)((y % S + 0.5) / S - 0.5) * (float)EX_PI * 2, cx = (float)((x % S + 0.5) / S - 0.5) * (float)EX_PI * 2;
            int i = y * GH + x;
            a[i] = sinf(cy), a[GGH + i] = sinf(cx), a[2 * GGH + i] = cosf(cy), a[3 * GGH + i] = cosf(cx);
        }
    for (int b = 1; b < n; b++) memcpy(a + (size_t)b * 4 * GGH, a, sizeof(float) * 4 * GGH);
}

/* The target [4, GH, GH], premultiplied RGBA: a round badge (a red rim,
 * an orange band, a blue centre) on a transparent canvas, radius 8 cells. */
static void make_target(float *t) {
    for (int y = 0; y < GH; y++)
        for (int x = 0; x < GH; x++) {
            double dy = (y + 0.5) / S - G / 2.0, dx = (x + 0.5) / S - G / 2.0, r = sqrt(dy * dy + dx * dx);
            float a = (float)fmin(fmax(8.5 - r, 0), 1) /* antialiased edge */, rgb[3];
            if (r > 6) rgb[0] = 0.85f, rgb[1] = 0.15f, rgb[2] = 0.2f;
            else if (r > 3) rgb[0] = 0.95f, rgb[1] = 0.6f, rgb[2] = 0.1f;
            else rgb[0] = 0.2f, rgb[1] = 0.35f, rgb[2] = 0.9f;
            int i = y * GH + x;
            t[i] = rgb[0] * a, t[GGH + i] = rgb[1] * a, t[2 * GGH + i] = rgb[2] * a, t[3 * GGH + i] = a;
        }
}

static void make_seed(float *s) {
    memset(s, 0, sizeof(float) * STATE);
    for (int c = 3; c < C; c++) s[c * GG + (G / 2) * G + G / 2] = 1;
}

/* Zeroes the cells within `radius` of (cy, cx) in the state [C, G, G]. */
static void cut(float *s, int cy, int cx, int radius) {
    for (int y = 0; y < G; y++)
        for (int x = 0; x < G; x++)
            if ((y - cy) * (y - cy) + (x - cx) * (x - cx) <= radius * radius)
                for (int c = 0; c < C; c++) s[c * GG + y * G + x] = 0;
}

/* uniform(-bound, bound), for the SIREN's init (the paper's) */
static float *uniform_init(int64_t n, float bound, uint64_t *rng) {
    float *a = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; a && i < n; i++) a[i] = (2 * ex_uniform(rng) - 1) * bound;
    return a;
}

/* ---- the evaluation: grow, cut, regrow ---- */

typedef struct {
    tg_forward *step, *render;
    const float *filters, *bilin, *bilin1, *coords, *target;
} grower;

static tg_status grow(const grower *w, float *s, int steps) {
    static float next[STATE];
    for (int i = 0; i < steps; i++) {
        tg_feed f[] = {TG_FEED("state", s, STATE), TG_FEED("filters", w->filters, 4 * C * 9)};
        tg_status st = tg_forward_run(w->step, 1, f, 2);
        if (st == TG_OK) st = tg_forward_output(w->step, next, STATE);
        if (st != TG_OK) return st;
        memcpy(s, next, sizeof next);
    }
    return TG_OK;
}

static tg_status score(const grower *w, const float *s, float *loss, float *image) {
    tg_feed f[] = {TG_FEED("state", s, STATE), TG_FEED("bilin", w->bilin, C * S * S * 9),
                   TG_FEED("bilin1", w->bilin1, S * S * 9), TG_FEED("coords", w->coords, 4 * GGH),
                   TG_FEED("target", w->target, 4 * GGH)};
    tg_status st = tg_forward_run(w->render, 1, f, 5);
    if (st == TG_OK) st = tg_forward_output(w->render, loss, 1);
    if (st == TG_OK && image) st = tg_forward_read(w->render, "image", image, 4 * GGH);
    return st;
}

/* The four RGBA images [4, GH, GH] side by side over a grey check. */
static int write_strip(const char *path, float *const imgs[4]) {
    enum { Z = 3, W = 4 * (GH * Z + 4) + 4, HT = GH * Z + 8 };
    static uint8_t pix[W * HT * 3];
    memset(pix, 60, sizeof pix);
    for (int k = 0; k < 4; k++)
        for (int y = 0; y < GH * Z; y++)
            for (int x = 0; x < GH * Z; x++) {
                int i = (y / Z) * GH + x / Z;
                float a = fminf(fmaxf(imgs[k][3 * GGH + i], 0), 1), bg = ((x / 12 + y / 12) % 2) ? 0.8f : 0.65f;
                uint8_t *p = pix + ((size_t)(4 + y) * W + 4 + k * (GH * Z + 4) + x) * 3;
                for (int c = 0; c < 3; c++) /* premultiplied over the check */
                    p[c] = (uint8_t)lrintf(fminf(fmaxf(imgs[k][c * GGH + i] + (1 - a) * bg, 0), 1) * 255);
            }
    if (ex_write_png_rgb(path, pix, W, HT)) {
        fprintf(stderr, "nca: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

int example_nca(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 1500;
    tg_model *m = tg_model_new();
    uint64_t init_rng = o->seed * 0x9e3779b97f4a7c15ull + 47;
    float *u1 = uniform_init(SIN * H, 1.0f / SIN, &init_rng), *u2 = uniform_init(H * H, sqrtf(6.0f / H) / OMEGA, &init_rng),
          *u3 = uniform_init(H * H, sqrtf(6.0f / H) / OMEGA, &init_rng), *u4 = uniform_init(H * 4, sqrtf(6.0f / H) / OMEGA, &init_rng);
    tg_init w1_init = tg_init_randn(0.02f), zero = tg_init_zeros(), i1 = tg_init_values(u1), i2 = tg_init_values(u2),
            i3 = tg_init_values(u3), i4 = tg_init_values(u4);
    nca_net net = {tg_conv2d_new_opts(m, "w1", 4 * C, FC, (tg_conv2d_opts){.kh = 1, .init = &w1_init}),
                   tg_conv2d_new_opts(m, "w2", FC, C, (tg_conv2d_opts){.kh = 1, .init = &zero, .no_bias = true}),
                   tg_linear_new_opts(m, "s1", SIN, H, true, (tg_layer_opts){.init = &i1}),
                   tg_linear_new_opts(m, "s2", H, H, true, (tg_layer_opts){.init = &i2}),
                   tg_linear_new_opts(m, "s3", H, H, true, (tg_layer_opts){.init = &i3}),
                   tg_linear_new_opts(m, "out", H, 4, true, (tg_layer_opts){.init = &i4})};
    tg_input_decl in[] = {{"state", TG_F32, TG_SHAPE(B, C, G, G)},        {"filters", TG_F32, TG_SHAPE(4 * C, 1, 3, 3)},
                          {"bilin", TG_F32, TG_SHAPE(C * S * S, 1, 3, 3)}, {"bilin1", TG_F32, TG_SHAPE(S * S, 1, 3, 3)},
                          {"coords", TG_F32, TG_SHAPE(B, 4, GH, GH)},      {"target", TG_F32, TG_SHAPE(B, 4, GH, GH)}};
    int64_t milestone = steps * 2 / 3;
    tg_train_spec spec = {.model = m, .loss = nca_loss, .user = &net, .inputs = in, .n_inputs = 6,
                          .optim = tg_adam(tg_lr_multistep(LR, 0.3f, 1, &milestone)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads};
    spec.optim.normalize_grads = true;
    spec.optim.normalize_filter = is_ca_param;
    tg_input_decl step_in[] = {{"state", TG_F32, TG_SHAPE(1, C, G, G)}, {"filters", TG_F32, TG_SHAPE(4 * C, 1, 3, 3)}};
    tg_input_decl render_in[] = {{"state", TG_F32, TG_SHAPE(1, C, G, G)}, {"bilin", TG_F32, TG_SHAPE(C * S * S, 1, 3, 3)},
                                 {"bilin1", TG_F32, TG_SHAPE(S * S, 1, 3, 3)}, {"coords", TG_F32, TG_SHAPE(1, 4, GH, GH)},
                                 {"target", TG_F32, TG_SHAPE(1, 4, GH, GH)}};
    tg_forward_spec step_spec = {.fn = step_fn, .user = &net, .inputs = step_in, .n_inputs = 2};
    tg_forward_spec render_spec = {.fn = render_fn, .user = &net, .inputs = render_in, .n_inputs = 5};
    tg_session *s = NULL;
    grower w = {0};
    static float filters[4 * C * 9], bilin[C * S * S * 9], bilin1[S * S * 9], target1[4 * GGH];
    float *coords = malloc(sizeof(float) * B * 4 * GGH), *target = malloc(sizeof(float) * B * 4 * GGH);
    float *pool = malloc(sizeof(float) * (size_t)POOL * STATE), *state = malloc(sizeof(float) * B * STATE);
    int rc = 0;
    tg_status st = u1 && u2 && u3 && u4 && coords && target && pool && state ? tg_session_new(&spec, &s) : TG_ERR_NOMEM;
    if (st == TG_OK) st = tg_forward_attach(s, &step_spec, &w.step);
    if (st == TG_OK) st = tg_forward_attach(s, &render_spec, &w.render);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", st == TG_ERR_NOMEM ? "out of memory" : tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "nca", &spec, s, &rc)) goto done;
    make_filters(filters), make_bilinear(bilin, C), make_bilinear(bilin1, 1), make_coords(coords, B), make_target(target1);
    for (int b = 0; b < B; b++) memcpy(target + (size_t)b * 4 * GGH, target1, sizeof target1);
    w.filters = filters, w.bilin = bilin, w.bilin1 = bilin1, w.coords = coords, w.target = target1;
    for (int i = 0; i < POOL; i++) make_seed(pool + (size_t)i * STATE);
    if (!o->quiet)
        printf("nca: %lld params, %dx%d cells of %d channels, %d CA steps per forward, rendered at %dx%d by a SIREN, "
               "batch %d from a pool of %d, %lld steps\n",
               (long long)tg_model_numel(m), G, G, C, K, GH, GH, B, POOL, (long long)steps);
    ex_run run;
    if (ex_run_start(&run, o, steps, B, NULL)) {
        rc = 1;
        goto done;
    }
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 53;
    float loss = 0;
    int idx[B];
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        for (int b = 0; b < B; b++) { /* B distinct pool slots */
            bool again;
            do {
                idx[b] = (int)(ex_rand(&rng) % POOL), again = false;
                for (int j = 0; j < b; j++) again |= idx[j] == idx[b];
            } while (again);
            memcpy(state + (size_t)b * STATE, pool + (size_t)idx[b] * STATE, sizeof(float) * STATE);
        }
        if (step % INJECT_EVERY == 1) make_seed(state);
        for (int b = B - DAMAGED; b < B; b++) /* regeneration: a disc cut out near the middle */
            cut(state + (size_t)b * STATE, G / 2 - 6 + (int)(ex_rand(&rng) % 13), G / 2 - 6 + (int)(ex_rand(&rng) % 13), 2 + (int)(ex_rand(&rng) % 4));
        tg_feed feeds[] = {TG_FEED("state", state, B * STATE), TG_FEED("filters", filters, 4 * C * 9),
                           TG_FEED("bilin", bilin, C * S * S * 9), TG_FEED("bilin1", bilin1, S * S * 9),
                           TG_FEED("coords", coords, B * 4 * GGH), TG_FEED("target", target, B * 4 * GGH)};
        st = tg_session_step(s, feeds, 6, &loss);
        if (st == TG_OK) st = tg_session_read(s, "final", state, B * STATE);
        for (int b = 0; st == TG_OK && b < B; b++) memcpy(pool + (size_t)idx[b] * STATE, state + (size_t)b * STATE, sizeof(float) * STATE);
        if (st == TG_OK && ex_run_due(&run, step)) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    if (ex_run_end(&run)) rc = 1;
    /* grow from the seed, cut, regrow */
    static float one[STATE], grown_img[4 * GGH], cut_img[4 * GGH], regrown_img[4 * GGH];
    float grown = 0, after_cut = 0, regrown = 0;
    make_seed(one);
    if (st == TG_OK) st = grow(&w, one, GROW_STEPS);
    if (st == TG_OK) st = score(&w, one, &grown, grown_img);
    cut(one, G / 2, G / 2 - 4, CUT);
    if (st == TG_OK) st = score(&w, one, &after_cut, cut_img);
    if (st == TG_OK) st = grow(&w, one, GROW_STEPS);
    if (st == TG_OK) st = score(&w, one, &regrown, regrown_img);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    float *strip[4] = {target1, grown_img, cut_img, regrown_img};
    if (rc == 0 && o->out && write_strip(o->out, strip)) rc = 1;
    if (o->out && rc == 0) printf("wrote %s: the target, grown from one cell, cut, regrown\n", o->out);
    printf("image loss against the target: grown in %d CA steps %.4f, after a cut of radius %d %.4f, %d steps later %.4f\n",
           GROW_STEPS, grown, CUT, after_cut, GROW_STEPS, regrown);
    printf("grown_loss=%.4f\n", grown);
    printf("regrown_loss=%.4f\n", regrown);
    if (rc == 0) rc = ex_target("grown_loss", grown, "<=", TARGET_LOSS);
    if (rc == 0) rc = ex_target("regrown_loss", regrown, "<=", TARGET_LOSS);
done:
    tg_forward_free(w.render);
    tg_forward_free(w.step);
    tg_session_free(s);
    tg_model_free(m);
    free(u1), free(u2), free(u3), free(u4);
    free(coords), free(target), free(pool), free(state);
    return rc;
}
