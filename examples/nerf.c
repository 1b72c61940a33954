/* A 2-D implicit neural representation (upstream's tiny NeRF sample): an
 * MLP maps a pixel's coordinates to its colour and is fitted to one
 * photograph, NASA's portrait of the astronaut Eileen Collins that
 * Debian's python3-skimage ships (public domain; scripts/fetch-data.sh
 * photo), box-filtered from 512x512 down to 64x64.
 *
 *   (x, y) in [-1, 1]^2 -> sin, cos of pi 2^k (x, y), k = 0..7   [n, 32]
 *          -> linear W relu -> linear W relu -> linear W relu -> linear 3 sigmoid   (r, g, b)
 *
 * Without the positional encoding a ReLU MLP only fits the smooth part of
 * an image; the sinusoids at eight octaves give it the edges. Each step
 * trains on B random pixels (MSE, Adam with a cosine decay). Ends with
 * `psnr=<value>` (dB over the whole image, exits 2 below 25); with --out
 * FILE it writes a PNG of the photograph beside the reconstruction. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define SIDE 64
#define PIXELS (SIDE * SIDE)
#define BANDS 8
#define WIDTH 128
#define B 1024
#define TARGET_PSNR 25.0

typedef struct {
    tg_linear l1, l2, l3, l4;
} nerf_net;

/* coords [n, 2] -> [n, 4 * BANDS]: sin of every band of x and y, then cos. */
static tg_tensor encode(tg_graph *g, tg_tensor coords) {
    int64_t n = tg_tensor_shape(coords).d[0];
    float freq[BANDS];
    for (int k = 0; k < BANDS; k++) freq[k] = (float)(EX_PI * (double)(1 << k));
    tg_tensor f = tg_constant(g, TG_SHAPE(1, 1, BANDS), freq);
    tg_tensor a = tg_mul(tg_reshape(coords, TG_SHAPE(n, 2, 1)), f); /* [n, 2, BANDS] */
    tg_tensor parts[] = {tg_reshape(tg_sin(a), TG_SHAPE(n, 2 * BANDS)), tg_reshape(tg_cos(a), TG_SHAPE(n, 2 * BANDS))};
    return tg_concat(parts, 2, 1);
}

static tg_tensor nerf_fwd(tg_graph *g, const nerf_net *m, tg_tensor coords) {
    tg_tensor h = tg_relu(tg_linear_fwd(g, &m->l1, encode(g, coords)));
    h = tg_relu(tg_linear_fwd(g, &m->l2, h));
    h = tg_relu(tg_linear_fwd(g, &m->l3, h));
    return tg_sigmoid(tg_linear_fwd(g, &m->l4, h));
}

static tg_tensor nerf_loss(tg_graph *g, void *u) { return tg_mse(nerf_fwd(g, u, tg_input(g, "coords")), tg_input(g, "rgb")); }
static tg_tensor nerf_predict(tg_graph *g, void *u) { return nerf_fwd(g, u, tg_input(g, "coords")); }

/* The photograph as SIDE x SIDE RGB in [0, 1], each pixel the mean of its block. */
static int load_photo(float *rgb) {
    char path[4096];
    uint8_t *pix;
    int w, h;
    if (!ex_data_path("photo", path, sizeof path)) {
        fprintf(stderr, "nerf: cannot fetch the photograph (scripts/fetch-data.sh photo)\n");
        return 1;
    }
    if (ex_read_png_rgb(path, &pix, &w, &h)) return 1;
    if (w < SIDE || h < SIDE) {
        fprintf(stderr, "nerf: %s is %dx%d, smaller than %dx%d\n", path, w, h, SIDE, SIDE);
        free(pix);
        return 1;
    }
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++) {
            int y0 = y * h / SIDE, y1 = (y + 1) * h / SIDE, x0 = x * w / SIDE, x1 = (x + 1) * w / SIDE;
            for (int c = 0; c < 3; c++) {
                double s = 0;
                for (int yy = y0; yy < y1; yy++)
                    for (int xx = x0; xx < x1; xx++) s += pix[((size_t)yy * w + xx) * 3 + c];
                rgb[(y * SIDE + x) * 3 + c] = (float)(s / (255.0 * (y1 - y0) * (x1 - x0)));
            }
        }
    free(pix);
    return 0;
}

/* The photograph (left) and the reconstruction (right), each pixel 4x4. */
static int write_pair(const char *path, const float *target, const float *recon) {
    enum { S = 4, GAP = 8, W = 2 * SIDE * S + GAP, H = SIDE * S };
    static uint8_t img[W * H * 3];
    memset(img, 40, sizeof img);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < SIDE * S; x++)
            for (int c = 0; c < 3; c++) {
                int i = ((y / S) * SIDE + x / S) * 3 + c;
                img[((size_t)y * W + x) * 3 + c] = (uint8_t)lrintf(fminf(fmaxf(target[i], 0), 1) * 255);
                img[((size_t)y * W + x + SIDE * S + GAP) * 3 + c] = (uint8_t)lrintf(fminf(fmaxf(recon[i], 0), 1) * 255);
            }
    if (ex_write_png_rgb(path, img, W, H)) {
        fprintf(stderr, "nerf: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

int example_nerf(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 3000, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    static float target[PIXELS * 3], grid[PIXELS * 2], recon[PIXELS * 3];
    if (!o->graph && !o->plan && load_photo(target)) return 1;
    for (int y = 0; y < SIDE; y++) /* pixel centres in [-1, 1], row-major */
        for (int x = 0; x < SIDE; x++) {
            grid[(y * SIDE + x) * 2] = 2.0f * (x + 0.5f) / SIDE - 1;
            grid[(y * SIDE + x) * 2 + 1] = 2.0f * (y + 0.5f) / SIDE - 1;
        }
    tg_model *m = tg_model_new();
    nerf_net net = {tg_linear_new(m, "l1", 4 * BANDS, WIDTH, true), tg_linear_new(m, "l2", WIDTH, WIDTH, true),
                    tg_linear_new(m, "l3", WIDTH, WIDTH, true), tg_linear_new(m, "l4", WIDTH, 3, true)};
    tg_input_decl in[] = {{"coords", TG_F32, TG_SHAPE(rows, 2)}, {"rgb", TG_F32, TG_SHAPE(rows, 3)}};
    tg_input_decl pin[] = {{"coords", TG_F32, TG_SHAPE(PIXELS, 2)}};
    tg_train_spec spec = {.model = m, .loss = nerf_loss, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_cosine(3e-3f, 1e-4f, steps)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    tg_forward_spec pspec = {.fn = nerf_predict, .user = &net, .inputs = pin, .n_inputs = 1};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    int rc = 0;
    if (tg_session_new(&spec, &s) != TG_OK || tg_forward_attach(s, &pspec, &f) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "nerf", &spec, s, &rc)) goto done;
    if (!o->quiet)
        printf("nerf: a %dx%d photograph, %d bands, 4 layers of %d, %lld params, batch %d pixels, %lld steps\n", SIDE,
               SIDE, BANDS, WIDTH, (long long)tg_model_numel(m), B, (long long)steps);
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "psnr")) {
        rc = 1;
        goto done;
    }
    static float cb[B * 2], cc[B * 3];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 13;
    float loss = 0;
    for (int64_t step = 1; step <= steps && rc == 0; step++) {
        for (int b = 0; b < B; b++) {
            int i = (int)(ex_rand(&rng) % PIXELS);
            memcpy(cb + b * 2, grid + i * 2, sizeof(float) * 2);
            memcpy(cc + b * 3, target + i * 3, sizeof(float) * 3);
        }
        tg_feed feeds[] = {TG_FEED("coords", cb + first * 2, rows * 2), TG_FEED("rgb", cc + first * 3, rows * 3)};
        if (tg_session_step(s, feeds, 2, &loss) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            rc = 1;
        } else if (ex_run_due(&run, step) && step < steps) {
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
        }
    }
    if (rc == 0) ex_final_loss(o, &run, s, loss);
    tg_feed fg = TG_FEED("coords", grid, PIXELS * 2);
    if (rc == 0 && (tg_forward_run(f, PIXELS, &fg, 1) != TG_OK || tg_forward_output(f, recon, PIXELS * 3) != TG_OK)) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
    }
    double mse = 0;
    for (int i = 0; i < PIXELS * 3; i++) mse += ((double)recon[i] - target[i]) * ((double)recon[i] - target[i]);
    mse /= PIXELS * 3;
    double psnr = 10.0 * log10(1.0 / fmax(mse, 1e-12));
    if (rc == 0) ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &psnr);
    if (ex_run_end(&run)) rc = 1;
    if (rc == 0 && o->out && write_pair(o->out, target, recon)) rc = 1;
    if (rc == 0) {
        if (o->out) printf("wrote %s: the photograph, then its reconstruction\n", o->out);
        printf("psnr=%.2f\n", psnr);
        rc = ex_target("psnr", psnr, ">=", TARGET_PSNR);
    }
done:
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    return rc;
}
