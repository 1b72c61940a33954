/* A convolutional variational autoencoder on the 8x8 digits.
 *
 *   encoder  x [B, 1, 8, 8] -> conv 3x3 (16) relu -> conv 3x3 stride 2 (32) relu
 *            -> [B, 32, 4, 4] -> flatten 512 -> linear: mu [B, 8], log-variance [B, 8]
 *   sample   z = mu + exp(logvar / 2) * eps, eps ~ N(0, 1)   (the reparameterization)
 *   decoder  z -> linear 512 relu -> [B, 32, 4, 4] -> nearest upsample x2 -> [B, 32, 8, 8]
 *            -> conv 3x3 (16) relu -> conv 3x3 (1): pixel logits [B, 1, 8, 8]
 *
 * eps is drawn in the graph by tg_randn (the counter-based generator every
 * backend shares). Pixels (0..16 scaled to [0, 1]) are Bernoulli means: the
 * reconstruction term is the binary cross-entropy of the logits, summed over
 * pixels. The loss is the negative ELBO in nats per image: reconstruction +
 * KL(q(z|x) || N(0, I)). Prints the train ELBO as it goes and the test ELBO at the end
 * (`test_elbo=<value>`), and writes a PNG (--out, default vae.png): a row of
 * test digits, their reconstructions from mu, then three rows of samples
 * decoded from z ~ N(0, I). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples.h"

#define B 128
#define Z 8

typedef struct {
    tg_conv2d e1, e2, d2, d3;
    tg_linear mu, lv, d1;
} vae_net;

static void encode(tg_graph *g, const vae_net *m, tg_tensor x, tg_tensor *mu, tg_tensor *lv) {
    tg_tensor h = tg_relu(tg_conv2d_fwd(g, &m->e1, x));
    h = tg_reshape(tg_relu(tg_conv2d_fwd(g, &m->e2, h)), TG_SHAPE(-1, 32 * 4 * 4));
    *mu = tg_linear_fwd(g, &m->mu, h);
    *lv = tg_linear_fwd(g, &m->lv, h);
}

/* z [n, Z] -> pixel logits [n, 1, 8, 8] */
static tg_tensor decode(tg_graph *g, const vae_net *m, tg_tensor z) {
    tg_tensor h = tg_reshape(tg_relu(tg_linear_fwd(g, &m->d1, z)), TG_SHAPE(-1, 32, 4, 4));
    h = tg_relu(tg_conv2d_fwd(g, &m->d2, tg_nearest_upsample2d(h, 2)));
    return tg_conv2d_fwd(g, &m->d3, h);
}

/* Negative ELBO per image, averaged over the batch. eps ~ N(0, 1) is drawn
 * in the graph (a fresh draw every step or run), so the noise never crosses
 * from the host. */
static tg_tensor neg_elbo(tg_graph *g, const vae_net *m, tg_tensor x) {
    tg_tensor mu, lv;
    encode(g, m, x, &mu, &lv);
    int64_t n = tg_tensor_shape(x).d[0];
    tg_tensor eps = tg_randn(g, TG_SHAPE(n, Z));
    tg_tensor z = tg_add(mu, tg_mul(tg_exp(tg_mul_s(lv, 0.5f)), eps));
    tg_tensor l = decode(g, m, z);
    /* Binary cross-entropy of the logits: softplus(l) - l*x (softplus is the stable form) */
    tg_tensor bce = tg_sub(tg_softplus(l), tg_mul(l, x));
    tg_tensor rec = tg_capture(tg_mul_s(tg_sum(bce, TG_ALL, false), 1.0f / (float)n), "rec");
    /* KL(N(mu, e^lv) || N(0, 1)) = 1/2 sum(e^lv + mu^2 - 1 - lv) */
    tg_tensor kl_el = tg_sub(tg_add(tg_exp(lv), tg_mul(mu, mu)), tg_add_s(lv, 1.0f));
    tg_tensor kl = tg_capture(tg_mul_s(tg_sum(kl_el, TG_ALL, false), 0.5f / (float)n), "kl");
    return tg_add(rec, kl);
}

static tg_tensor train_loss(tg_graph *g, void *u) { return neg_elbo(g, u, tg_input(g, "x")); }
/* Forward-only: reconstructions from mu and samples from z, as pixel probabilities. */
static tg_tensor reconstruct(tg_graph *g, void *u) {
    tg_tensor mu, lv;
    encode(g, u, tg_input(g, "x"), &mu, &lv);
    return tg_sigmoid(decode(g, u, mu));
}
static tg_tensor generate(tg_graph *g, void *u) { return tg_sigmoid(decode(g, u, tg_input(g, "z"))); }

static void fill_normal(uint64_t *rng, float *v, int n) {
    for (int i = 0; i < n; i += 2) { /* Box-Muller, two at a time */
        double u1 = (ex_rand(rng) + 1.0) / 2147483649.0, u2 = ex_rand(rng) / 2147483648.0;
        double r = sqrt(-2.0 * log(u1));
        v[i] = (float)(r * cos(2 * EX_PI * u2));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(2 * EX_PI * u2));
    }
}

/* An image [64] of values in [0, 1] as grey levels into a grid cell at
 * (row_y, col), each pixel drawn SCALE x SCALE. */
#define SCALE 6
#define CELL (8 * SCALE + 2) /* the digit and a 2-pixel gap */
static void put_digit(uint8_t *img, int w, int row_y, int col, const float *p) {
    for (int y = 0; y < 8 * SCALE; y++)
        for (int x = 0; x < 8 * SCALE; x++) {
            float v = p[(y / SCALE) * 8 + x / SCALE];
            int g = (int)lrintf(v * 255.0f);
            img[(size_t)(row_y + 2 + y) * w + col * CELL + 2 + x] = (uint8_t)(g < 0 ? 0 : g > 255 ? 255 : g);
        }
}

static int write_grid(const char *path, tg_forward *rec, tg_forward *gen, const ex_digits *d, uint64_t seed) {
    /* The first test image of each class, in class order. */
    float xs[10 * 64], out[30 * 64], z[30 * Z];
    int have = 0;
    for (int k = 0; k < 10; k++)
        for (int i = d->n_train; i < d->n; i++)
            if (d->y[i] == k) {
                memcpy(xs + have++ * 64, d->x + (size_t)i * 64, sizeof(float) * 64);
                break;
            }
    int w = 10 * CELL + 2, h = 2 * CELL + 8 + 3 * CELL + 2;
    uint8_t *img = calloc((size_t)w * h, 1);
    if (!img) return 1;
    for (size_t i = 0; i < (size_t)w * h; i++) img[i] = 40; /* dark grey gaps frame the black cells */
    tg_feed fx = TG_FEED("x", xs, have * 64);
    if (tg_forward_run(rec, have, &fx, 1) != TG_OK || tg_forward_output(rec, out, have * 64) != TG_OK) goto fail;
    for (int k = 0; k < have; k++) {
        put_digit(img, w, 0, k, xs + k * 64);
        put_digit(img, w, CELL, k, out + k * 64);
    }
    uint64_t rng = seed * 7 + 1234567;
    fill_normal(&rng, z, 30 * Z);
    tg_feed fz = TG_FEED("z", z, 30 * Z);
    if (tg_forward_run(gen, 30, &fz, 1) != TG_OK || tg_forward_output(gen, out, 30 * 64) != TG_OK) goto fail;
    for (int k = 0; k < 30; k++) put_digit(img, w, 2 * CELL + 8 + (k / 10) * CELL, k % 10, out + k * 64);
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

int example_vae(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 1500, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    const char *png = o->out; /* the picture only where asked */
    ex_digits d;
    if (ex_digits_load(&d)) return 1;
    tg_model *m = tg_model_new();
    vae_net net = {tg_conv2d_new(m, "enc1", 1, 16, 3, 1, 1, 1, true),
                   tg_conv2d_new(m, "enc2", 16, 32, 3, 2, 1, 1, true),
                   tg_conv2d_new(m, "dec2", 32, 16, 3, 1, 1, 1, true),
                   tg_conv2d_new(m, "dec3", 16, 1, 3, 1, 1, 1, true),
                   tg_linear_new(m, "mu", 512, Z, true), tg_linear_new(m, "logvar", 512, Z, true),
                   tg_linear_new(m, "dec1", Z, 512, true)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(rows, 1, 8, 8)}};
    tg_train_spec spec = {.model = m, .loss = train_loss, .user = &net, .inputs = in, .n_inputs = 1,
                          .optim = tg_adam(tg_lr_cosine(3e-3f, 1e-4f, steps)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    tg_input_decl rin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1, 8, 8)}};
    tg_input_decl gin[] = {{"z", TG_F32, TG_SHAPE(TG_BATCH, Z)}};
    tg_session *s = NULL;
    tg_forward *ev = NULL, *rec = NULL, *gen = NULL;
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
    if (!o->quiet)
        printf("digits VAE: %lld params, latent %d, %d train / %d test images, batch %d, %lld steps\n",
               (long long)tg_model_numel(m), Z, d.n_train, d.n_test, B, (long long)steps);

    static float xb[B * 64];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 5;
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "test_elbo")) {
        rc = 1;
        goto done;
    }
    double t0 = ex_now();
    float loss = 0;
    for (int64_t step = 1; step <= steps; step++) {
        for (int b = 0; b < B; b++)
            memcpy(xb + b * 64, d.x + (size_t)(ex_rand(&rng) % (uint64_t)d.n_train) * 64, sizeof(float) * 64);
        tg_feed feeds[] = {TG_FEED("x", xb + first * 64, rows * 64)};
        if (tg_session_step(s, feeds, 1, &loss) != TG_OK) {
            fprintf(stderr, "error: %s\n", tg_last_error());
            ex_run_end(&run);
            rc = 1;
            goto done;
        }
        /* the loss is the negative ELBO, nats per image */
        if (ex_run_due(&run, step) && step < steps) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    double train_s = ex_now() - t0;
    ex_final_loss(o, &run, s, loss);

    /* Test ELBO: the whole test split at once, one draw of eps per image. */
    float test_loss = NAN;
    tg_feed ef = TG_FEED("x", d.x + (size_t)d.n_train * 64, (int64_t)d.n_test * 64);
    if (tg_forward_run(ev, d.n_test, &ef, 1) != TG_OK || tg_forward_output(ev, &test_loss, 1) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
    }
    double elbo = -test_loss;
    if (rc == 0) ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &elbo);
    if (ex_run_end(&run)) rc = 1;
    if (rc == 0 && png && write_grid(png, rec, gen, &d, o->seed)) rc = 1;
    if (rc == 0) {
        if (!o->quiet) printf("train time %.2fs (%.3f ms/step)\n", train_s, train_s * 1e3 / (double)steps);
        if (png) printf("wrote %s: test digits, their reconstructions, then samples z ~ N(0, I)\n", png);
        printf("test_elbo=%.3f\n", -test_loss);
    }
done:
    tg_forward_free(gen);
    tg_forward_free(rec);
    tg_forward_free(ev);
    tg_session_free(s);
    tg_model_free(m);
    ex_digits_free(&d);
    return rc;
}
