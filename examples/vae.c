/* Upstream's VAE (samples/vae) on Fashion-MNIST: an MLP encoder and
 * decoder around a latent of 8.
 *
 *   encoder  x [B, 784] -> linear 256 relu -> linear 256 relu
 *            -> linear: mu [B, 8], and linear: log-variance [B, 8]
 *   sample   z = mu + exp(logvar / 2) * eps, eps ~ N(0, 1)   (the reparameterization)
 *   decoder  z -> linear 256 relu -> linear 256 relu -> linear 784 -> sigmoid
 *
 * eps is drawn in the graph by tg_randn (the counter-based generator every
 * backend shares). The loss is upstream's: the squared error of the
 * reconstruction summed over the pixels, plus KL(q(z|x) || N(0, I)), both
 * per image (beta 1); Adam 1e-3 with clip 1.0, here with a cosine decay,
 * batch 128. Ends with `test_loss=<value>`, the same loss over the 10,000
 * test images, and exits 2 above 27 (predicting every test image as the
 * mean training image costs 67.9). --out FILE writes a PNG: a test image of
 * each class, its reconstruction from mu, then three rows of samples
 * decoded from z ~ N(0, I). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define B 128
#define Z 8
#define H 256
#define PIXELS EX_FASHION_PIXELS
#define EVAL_CHUNK 1000
#define TARGET_LOSS 27.0

typedef struct {
    tg_linear e1, e2, mu, lv, d1, d2, out;
} vae_net;

static void encode(tg_graph *g, const vae_net *m, tg_tensor x, tg_tensor *mu, tg_tensor *lv) {
    tg_tensor h = tg_relu(tg_linear_fwd(g, &m->e2, tg_relu(tg_linear_fwd(g, &m->e1, x))));
    *mu = tg_linear_fwd(g, &m->mu, h);
    *lv = tg_linear_fwd(g, &m->lv, h);
}

/* z [n, Z] -> pixels [n, 784] in (0, 1) */
static tg_tensor decode(tg_graph *g, const vae_net *m, tg_tensor z) {
    tg_tensor h = tg_relu(tg_linear_fwd(g, &m->d2, tg_relu(tg_linear_fwd(g, &m->d1, z))));
    return tg_sigmoid(tg_linear_fwd(g, &m->out, h));
}

/* Squared error summed over pixels plus KL, per image, averaged over the
 * batch. eps ~ N(0, 1) is drawn in the graph (a fresh draw every step or
 * run), so the noise never crosses from the host. */
static tg_tensor vae_loss(tg_graph *g, const vae_net *m, tg_tensor x) {
    tg_tensor mu, lv;
    encode(g, m, x, &mu, &lv);
    int64_t n = tg_tensor_shape(x).d[0];
    tg_tensor eps = tg_randn(g, TG_SHAPE(n, Z));
    tg_tensor z = tg_add(mu, tg_mul(tg_exp(tg_mul_s(lv, 0.5f)), eps));
    tg_tensor rec = tg_mul_s(tg_sum(tg_square(tg_sub(decode(g, m, z), x)), TG_ALL, false), 1.0f / (float)n);
    /* KL(N(mu, e^lv) || N(0, 1)) = 1/2 sum(e^lv + mu^2 - 1 - lv) */
    tg_tensor kl_el = tg_sub(tg_add(tg_exp(lv), tg_square(mu)), tg_add_s(lv, 1.0f));
    tg_tensor kl = tg_mul_s(tg_sum(kl_el, TG_ALL, false), 0.5f / (float)n);
    return tg_add(tg_capture(rec, "rec"), tg_capture(kl, "kl"));
}

static tg_tensor train_loss(tg_graph *g, void *u) { return vae_loss(g, u, tg_input(g, "x")); }
/* Forward-only: reconstructions from mu and samples from z, as pixel probabilities. */
static tg_tensor reconstruct(tg_graph *g, void *u) {
    tg_tensor mu, lv;
    encode(g, u, tg_input(g, "x"), &mu, &lv);
    return decode(g, u, mu);
}
static tg_tensor generate(tg_graph *g, void *u) { return decode(g, u, tg_input(g, "z")); }

static void fill_normal(uint64_t *rng, float *v, int n) {
    for (int i = 0; i < n; i += 2) { /* Box-Muller, two at a time */
        double u1 = (ex_rand(rng) + 1.0) / 2147483649.0, u2 = ex_rand(rng) / 2147483648.0;
        double r = sqrt(-2.0 * log(u1));
        v[i] = (float)(r * cos(2 * EX_PI * u2));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(2 * EX_PI * u2));
    }
}

/* An image [784] of values in [0, 1] as grey levels into a grid cell at
 * (row_y, col), each pixel drawn SCALE x SCALE. */
#define SCALE 2
#define SIDE EX_FASHION_SIDE
#define CELL (SIDE * SCALE + 2) /* the image and a 2-pixel gap */
static void put_image(uint8_t *img, int w, int row_y, int col, const float *p) {
    for (int y = 0; y < SIDE * SCALE; y++)
        for (int x = 0; x < SIDE * SCALE; x++) {
            int g = (int)lrintf(p[(y / SCALE) * SIDE + x / SCALE] * 255.0f);
            img[(size_t)(row_y + 2 + y) * w + col * CELL + 2 + x] = (uint8_t)(g < 0 ? 0 : g > 255 ? 255 : g);
        }
}

static int write_grid(const char *path, tg_forward *rec, tg_forward *gen, const ex_fashion *d, uint64_t seed) {
    /* The first test image of each class, in class order. */
    static float xs[10 * PIXELS], out[30 * PIXELS];
    float z[30 * Z];
    int have = 0;
    for (int k = 0; k < 10; k++)
        for (int i = 0; i < d->n_test; i++)
            if (d->test_y[i] == k) {
                ex_fashion_pixels(d->test_x, &i, 1, xs + have++ * PIXELS);
                break;
            }
    int w = 10 * CELL + 2, h = 2 * CELL + 8 + 3 * CELL + 2;
    uint8_t *img = malloc((size_t)w * h);
    if (!img) return 1;
    memset(img, 40, (size_t)w * h); /* dark grey gaps frame the black cells */
    tg_feed fx = TG_FEED("x", xs, have * PIXELS);
    if (tg_forward_run(rec, have, &fx, 1) != TG_OK || tg_forward_output(rec, out, have * PIXELS) != TG_OK) goto fail;
    for (int k = 0; k < have; k++) {
        put_image(img, w, 0, k, xs + k * PIXELS);
        put_image(img, w, CELL, k, out + k * PIXELS);
    }
    uint64_t rng = seed * 7 + 1234567;
    fill_normal(&rng, z, 30 * Z);
    tg_feed fz = TG_FEED("z", z, 30 * Z);
    if (tg_forward_run(gen, 30, &fz, 1) != TG_OK || tg_forward_output(gen, out, 30 * PIXELS) != TG_OK) goto fail;
    for (int k = 0; k < 30; k++) put_image(img, w, 2 * CELL + 8 + (k / 10) * CELL, k % 10, out + k * PIXELS);
    if (ex_write_png_gray(path, img, w, h)) {
        fprintf(stderr, "vae: cannot write %s\n", path);
        free(img);
        return 1;
    }
    free(img);
    return 0;
fail:
    fprintf(stderr, "error: %s\n", tg_last_error());
    free(img);
    return 1;
}

/* The loss over the n test images [n, 784] (u8), in chunks of EVAL_CHUNK
 * (one draw of eps per image); NAN after printing an error. */
static double test_loss(tg_forward *ev, const ex_fashion *d) {
    float *x = malloc(sizeof(float) * EVAL_CHUNK * PIXELS), l;
    double sum = 0;
    int n = d->n_test - d->n_test % EVAL_CHUNK;
    for (int at = 0; x && at < n; at += EVAL_CHUNK) {
        ex_fashion_pixels(d->test_x + (size_t)at * PIXELS, NULL, EVAL_CHUNK, x);
        tg_feed f = TG_FEED("x", x, EVAL_CHUNK * PIXELS);
        if (tg_forward_run(ev, EVAL_CHUNK, &f, 1) != TG_OK || tg_forward_output(ev, &l, 1) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            free(x);
            return NAN;
        }
        sum += l;
    }
    if (!x) fprintf(stderr, "error: out of memory\n");
    free(x);
    return x && n ? sum / (n / EVAL_CHUNK) : NAN;
}

int example_vae(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 6000, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    const char *png = o->out; /* the picture only where asked */
    tg_model *m = tg_model_new();
    vae_net net = {tg_linear_new(m, "enc1", PIXELS, H, true), tg_linear_new(m, "enc2", H, H, true),
                   tg_linear_new(m, "enc_mu", H, Z, true),    tg_linear_new(m, "enc_logvar", H, Z, true),
                   tg_linear_new(m, "dec1", Z, H, true),      tg_linear_new(m, "dec2", H, H, true),
                   tg_linear_new(m, "dec_out", H, PIXELS, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(rows, PIXELS)}};
    tg_train_spec spec = {.model = m, .loss = train_loss, .user = &net, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_cosine(1e-3f, 1e-5f, steps)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    tg_input_decl rin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, PIXELS)}};
    tg_input_decl gin[] = {{"z", TG_F32, TG_SHAPE(TG_BATCH, Z)}};
    tg_session *s = NULL;
    tg_forward *ev = NULL, *rec = NULL, *gen = NULL;
    ex_fashion d = {0};
    ex_fashion_epochs ep = {0};
    float *xb = NULL;
    int rc = 0;
    tg_forward_spec ev_spec = {.fn = train_loss, .user = &net, .inputs = rin, .n_inputs = 1};
    tg_forward_spec rec_spec = {.fn = reconstruct, .user = &net, .inputs = rin, .n_inputs = 1};
    tg_forward_spec gen_spec = {.fn = generate, .user = &net, .inputs = gin, .n_inputs = 1};
    if (tg_session_new(&spec, &s) != TG_OK || tg_forward_attach(s, &ev_spec, &ev) ||
        tg_forward_attach(s, &rec_spec, &rec) || tg_forward_attach(s, &gen_spec, &gen)) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "vae", &spec, s, &rc)) goto done;
    if (ex_fashion_load(&d)) {
        rc = 1;
        goto done;
    }
    if (!o->quiet)
        printf("VAE 784-%d-%d-%d: %lld params, %d train / %d test images, batch %d, %lld steps (%.1f epochs)\n", H, H, Z,
               (long long)tg_model_numel(m), d.n_train, d.n_test, B, (long long)steps, (double)steps * B / d.n_train);
    xb = malloc(sizeof(float) * B * PIXELS);
    ex_fashion_epochs_init(&ep, d.n_train, o->seed * 0x9e3779b97f4a7c15ull + 5);
    if (!xb || !ep.order) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto done;
    }
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "test_loss")) {
        rc = 1;
        goto done;
    }
    double t0 = ex_now();
    float loss = 0;
    int which[B];
    for (int64_t step = 1; step <= steps; step++) {
        ex_fashion_epochs_next(&ep, which, B);
        ex_fashion_pixels(d.train_x, which, B, xb);
        tg_feed feeds[] = {TG_FEED("x", xb + first * PIXELS, rows * PIXELS)};
        if (tg_session_step(s, feeds, 1, &loss) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            ex_run_end(&run);
            rc = 1;
            goto done;
        }
        if (ex_run_due(&run, step) && step < steps) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    double train_s = ex_now() - t0;
    ex_final_loss(o, &run, s, loss);
    double tl = test_loss(ev, &d);
    if (isnan(tl)) rc = 1;
    else ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &tl);
    if (ex_run_end(&run)) rc = 1;
    if (rc == 0 && png && write_grid(png, rec, gen, &d, o->seed)) rc = 1;
    if (rc == 0) {
        if (!o->quiet) printf("train time %.2fs (%.3f ms/step)\n", train_s, train_s * 1e3 / (double)steps);
        if (png) printf("wrote %s: a test image of each class, its reconstruction, then samples z ~ N(0, I)\n", png);
        printf("test_loss=%.3f\n", tl);
        rc = ex_target("test_loss", tl, "<=", TARGET_LOSS);
    }
done:
    free(xb);
    ex_fashion_epochs_free(&ep);
    tg_forward_free(gen);
    tg_forward_free(rec);
    tg_forward_free(ev);
    tg_session_free(s);
    tg_model_free(m);
    ex_fashion_free(&d);
    return rc;
}
