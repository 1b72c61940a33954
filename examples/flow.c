/* Rectified flow matching on Fashion-MNIST at 28x28 (upstream's
 * flow-matching-tiny sample): a small convolutional network learns the
 * velocity field that carries each image in a straight line to Gaussian
 * noise, and samples are drawn by integrating it back from noise.
 *
 *   x0 an image scaled to [-1, 1], x1 ~ N(0, I) drawn in the graph
 *   (tg_randn), t an integer in 1..T_STEPS, tn = t / T_STEPS:
 *   x_t = x0 + tn (x1 - x0);   loss = mse(v(x_t, t), x1 - x0)
 *
 *   v: a small U-Net of 3x3 convs of 32 channels. e1 = conv (28x28), e2 =
 *      conv stride 2 (14x14), e3 = conv stride 2 (7x7), m = conv (7x7),
 *      each relu, each plus the timestep's embedding (an Embedding of
 *      T_STEPS + 1 rows of 32, a linear 32 per stage, added to every
 *      pixel); d2 = conv of m upsampled (14x14) plus e2, relu; out = conv
 *      (1 channel) of d2 upsampled (28x28) plus e1.
 *
 * Upstream's four 3x3 convs at full resolution see 9x9 pixels of a 28x28
 * image and cost three times as much per step; the two stride-2 stages
 * let every output pixel see the whole image. t is drawn logit-normal
 * (most often near the middle of the path); Adam with a cosine decay, clip
 * 1.0 (upstream's), batch 64 (upstream's).
 *
 * Sampling: from the average of the params over the second half of the
 * run (an exponential moving average kept on the host), x = N(0, I) at
 * t = 1, then SAMPLE_STEPS Euler steps x <- x - v(x, t) / SAMPLE_STEPS down
 * to t = 0, with t rounded to its bucket; 256 samples at once through a
 * forward session.
 *
 * The samples are judged by the Fashion-MNIST CNN of fashion_cnn.h, trained
 * first in the same run on the real images (JUDGE_STEPS steps, about 0.89
 * test accuracy; as many as the flow's when --steps is fewer): `sample_confidence` is its mean top-class probability
 * over the 256 samples (exits 2 below TARGET_CONFIDENCE; real test images
 * score about 0.9), and the line before it says how many of the 10 classes
 * the samples fall in. With --out FILE it writes the samples as a 16x16
 * PNG grid. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fashion_cnn.h"

#define B 64
#define CH 32
#define T_STEPS 100
#define SAMPLE_STEPS 25
#define N_SAMPLES 256
#define JUDGE_STEPS 1500
#define TARGET_CONFIDENCE 0.5
#define LR 2e-3f
#define SIDE EX_FASHION_SIDE
#define PIXELS EX_FASHION_PIXELS
#define EMA_EVERY 5   /* steps between updates of the params' average */
#define EMA_DECAY 0.98f

typedef struct {
    tg_embedding t_emb;
    tg_linear t1, t2, t3;
    tg_conv2d e1, e2, e3, mid, d2, out;
} flow_net;

/* The timestep's feature for one stage: [n, CH, 1, 1], added to every pixel. */
static tg_tensor t_feature(tg_graph *g, const tg_linear *proj, tg_tensor emb, int64_t n) {
    return tg_reshape(tg_linear_fwd(g, proj, emb), TG_SHAPE(n, CH, 1, 1));
}

/* x [n, 1, 28, 28], t i32 [n] -> velocity [n, 1, 28, 28] */
static tg_tensor velocity(tg_graph *g, const flow_net *m, tg_tensor x, tg_tensor t) {
    int64_t n = tg_tensor_shape(x).d[0];
    tg_tensor emb = tg_embedding_fwd(g, &m->t_emb, t);
    tg_tensor e1 = tg_add(tg_relu(tg_conv2d_fwd(g, &m->e1, x)), t_feature(g, &m->t1, emb, n));   /* 28x28 */
    tg_tensor e2 = tg_add(tg_relu(tg_conv2d_fwd(g, &m->e2, e1)), t_feature(g, &m->t2, emb, n));  /* 14x14 */
    tg_tensor e3 = tg_add(tg_relu(tg_conv2d_fwd(g, &m->e3, e2)), t_feature(g, &m->t3, emb, n));  /* 7x7 */
    tg_tensor mid = tg_relu(tg_conv2d_fwd(g, &m->mid, e3));
    tg_tensor d2 = tg_relu(tg_add(tg_conv2d_fwd(g, &m->d2, tg_nearest_upsample2d(mid, 2)), e2)); /* 14x14 */
    return tg_conv2d_fwd(g, &m->out, tg_add(tg_nearest_upsample2d(d2, 2), e1));                /* 28x28 */
}

static tg_tensor flow_loss(tg_graph *g, void *u) {
    tg_tensor x0 = tg_input(g, "x"), t = tg_input(g, "t");
    tg_tensor x1 = tg_randn(g, tg_tensor_shape(x0));
    tg_tensor tn = tg_reshape(tg_mul_s(tg_cast(t, TG_F32), 1.0f / T_STEPS), TG_SHAPE(tg_tensor_shape(x0).d[0], 1, 1, 1));
    tg_tensor v = tg_sub(x1, x0);
    return tg_mse(velocity(g, u, tg_add(x0, tg_mul(tn, v)), t), v);
}
static tg_tensor flow_predict(tg_graph *g, void *u) { return velocity(g, u, tg_input(g, "x"), tg_input(g, "t")); }

/* An exponential moving average of the params, kept on the host: samples
 * come from the average of the last few hundred steps' weights rather than
 * the last step's, as diffusion and flow models are usually sampled. */
typedef struct {
    int n;
    const char *name[32];
    int64_t count[32];
    float *avg[32], *cur;
    bool started;
} ema;

static tg_status ema_update(ema *e, tg_session *s, float decay) {
    for (int i = 0; i < e->n; i++) {
        tg_status st = tg_session_get_param(s, e->name[i], e->cur, e->count[i]);
        if (st != TG_OK) return st;
        for (int64_t k = 0; k < e->count[i]; k++)
            e->avg[i][k] = e->started ? decay * e->avg[i][k] + (1 - decay) * e->cur[k] : e->cur[k];
    }
    e->started = true;
    return TG_OK;
}

static void fill_normal(uint64_t *rng, float *v, int n) {
    for (int i = 0; i < n; i += 2) { /* Box-Muller, two at a time */
        double u1 = (ex_rand(rng) + 1.0) / 2147483649.0, u2 = ex_rand(rng) / 2147483648.0, r = sqrt(-2.0 * log(u1));
        v[i] = (float)(r * cos(2 * EX_PI * u2));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(2 * EX_PI * u2));
    }
}

/* N_SAMPLES samples in [-1, 1] by SAMPLE_STEPS Euler steps from noise. */
static tg_status sample(tg_forward *f, uint64_t seed, float *x) {
    static float v[N_SAMPLES * PIXELS];
    int32_t t[N_SAMPLES];
    uint64_t rng = seed * 7 + 1234567;
    fill_normal(&rng, x, N_SAMPLES * PIXELS);
    for (int i = 0; i < SAMPLE_STEPS; i++) {
        double tc = 1.0 - (double)i / SAMPLE_STEPS; /* 1, 24/25, ..., 1/25 */
        int bucket = (int)lround(tc * T_STEPS);
        for (int k = 0; k < N_SAMPLES; k++) t[k] = bucket < 1 ? 1 : bucket;
        tg_feed fs[] = {TG_FEED("x", x, N_SAMPLES * PIXELS), TG_FEED("t", t, N_SAMPLES)};
        tg_status st = tg_forward_run(f, N_SAMPLES, fs, 2);
        if (st == TG_OK) st = tg_forward_output(f, v, N_SAMPLES * PIXELS);
        if (st != TG_OK) return st;
        for (int k = 0; k < N_SAMPLES * PIXELS; k++) x[k] -= v[k] / SAMPLE_STEPS;
    }
    return TG_OK;
}

int example_flow(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 3000, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    tg_model *m = tg_model_new();
    /* kaiming convs: the criterion was reached from them (Conv2d's default is randn 0.02) */
    tg_init kaiming = tg_init_kaiming();
    tg_conv2d_opts co = {.kh = 3, .pad_h = 1, .pad_w = 1, .init = &kaiming};
    tg_conv2d_opts down = {.kh = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .init = &kaiming};
    flow_net net = {tg_embedding_new(m, "t_emb", T_STEPS + 1, CH),
                    tg_linear_new(m, "t_proj1", CH, CH, true), tg_linear_new(m, "t_proj2", CH, CH, true),
                    tg_linear_new(m, "t_proj3", CH, CH, true),
                    tg_conv2d_new_opts(m, "enc1", 1, CH, co), tg_conv2d_new_opts(m, "enc2", CH, CH, down),
                    tg_conv2d_new_opts(m, "enc3", CH, CH, down), tg_conv2d_new_opts(m, "mid", CH, CH, co),
                    tg_conv2d_new_opts(m, "dec2", CH, CH, co), tg_conv2d_new_opts(m, "out", CH, 1, co)};
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(rows, 1, SIDE, SIDE)}, {"t", TG_I32, TG_SHAPE(rows)}};
    tg_input_decl pin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1, SIDE, SIDE)}, {"t", TG_I32, TG_SHAPE(TG_BATCH)}};
    tg_train_spec spec = {.model = m, .loss = flow_loss, .user = &net, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_cosine(LR, 1e-5f, steps)), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    tg_forward_spec pspec = {.fn = flow_predict, .user = &net, .inputs = pin, .n_inputs = 2};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    fashion_classifier judge = {0};
    ex_fashion d = {0};
    ex_fashion_epochs ep = {0};
    ema avg = {.n = tg_model_param_count(m)};
    float *img = malloc(sizeof(float) * N_SAMPLES * PIXELS), *x = malloc(sizeof(float) * B * PIXELS);
    int64_t biggest = 0;
    for (int i = 0; i < avg.n && i < 32; i++) {
        avg.name[i] = tg_model_param_name(m, i), avg.count[i] = tg_shape_numel(tg_model_param_shape(m, i));
        avg.avg[i] = malloc(sizeof(float) * (size_t)avg.count[i]);
        if (!avg.avg[i]) img = (free(img), NULL);
        if (avg.count[i] > biggest) biggest = avg.count[i];
    }
    avg.cur = malloc(sizeof(float) * (size_t)biggest);
    if (!avg.cur || avg.n > 32 || !x) img = (free(img), NULL);
    int rc = 0;
    tg_status st = img ? tg_session_new(&spec, &s) : TG_ERR_NOMEM;
    if (st == TG_OK) st = tg_forward_attach(s, &pspec, &f);
    if (st == TG_OK) st = tg_session_set_seed(s, o->seed);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", img ? tg_last_error() : "out of memory");
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "flow", &spec, s, &rc)) goto done;
    if (ex_fashion_load(&d)) {
        rc = 1;
        goto done;
    }
    ex_fashion_epochs_init(&ep, d.n_train, o->seed * 0x9e3779b97f4a7c15ull + 31);
    if (!ep.order) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto done;
    }
    int64_t judge_steps = steps < JUDGE_STEPS ? steps : JUDGE_STEPS; /* a short run (a test) has a short judge */
    if (!o->quiet) printf("flow: training the Fashion-MNIST CNN that judges the samples (%lld steps)\n", (long long)judge_steps);
    if (fashion_classifier_train(&d, o, judge_steps, NULL, 0, &judge, NULL)) {
        rc = 1;
        goto done;
    }
    if (!o->quiet)
        printf("flow: %lld params, a U-Net of 3x3 convs of %d channels at 28, 14 and 7 pixels, batch %d, %lld steps\n",
               (long long)tg_model_numel(m), CH, B, (long long)steps);
    ex_run run;
    if (ex_run_start(&run, o, steps, B, "sample_confidence")) {
        rc = 1;
        goto done;
    }
    static int32_t t[B];
    int which[B];
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 37;
    float loss = 0;
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        ex_fashion_epochs_next(&ep, which, B);
        ex_fashion_pixels(d.train_x, which, B, x);
        for (int k = 0; k < B * PIXELS; k++) x[k] = 2 * x[k] - 1;
        for (int b = 0; b < B; b += 2) { /* half of t logit-normal (the middle of the path is where the field is
                                          * hardest), half uniform (the ends, where the samples' detail is made) */
            float z[2];
            fill_normal(&rng, z, 2);
            for (int q = 0; q < 2; q++) {
                int tb = q ? 1 + (int)(ex_rand(&rng) % T_STEPS) : (int)lrintf(T_STEPS / (1.0f + expf(-z[q])));
                t[b + q] = tb < 1 ? 1 : tb > T_STEPS ? T_STEPS : tb;
            }
        }
        tg_feed feeds[] = {TG_FEED("x", x + first * PIXELS, rows * PIXELS), TG_FEED("t", t + first, rows)};
        st = tg_session_step(s, feeds, 2, &loss);
        if (st == TG_OK && step > steps / 2 && step % EMA_EVERY == 0) st = ema_update(&avg, s, EMA_DECAY);
        if (st == TG_OK && ex_run_due(&run, step) && step < steps)
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    tg_feed params[32];
    for (int i = 0; i < avg.n; i++) params[i] = (tg_feed){avg.name[i], avg.avg[i], avg.count[i], TG_F32};
    if (st == TG_OK && avg.started) st = tg_session_upload(s, params, avg.n); /* training is over */
    if (st == TG_OK) st = sample(f, o->seed, img);
    for (int k = 0; k < N_SAMPLES * PIXELS; k++) img[k] = fminf(fmaxf((img[k] + 1) / 2, 0), 1);
    double mean = 0;
    int classes = 0;
    if (st == TG_OK) st = fashion_classifier_judge(&judge, img, N_SAMPLES, &mean, &classes);
    if (st == TG_OK) ex_run_step(&run, steps, loss, tg_lr_at(&spec.optim.lr, steps), &mean);
    if (ex_run_end(&run)) rc = 1;
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (rc == 0 && o->out && ex_fashion_write_grid(o->out, img, N_SAMPLES)) rc = 1;
    if (rc == 0) {
        if (o->out) printf("wrote %s: %d samples, %d Euler steps each\n", o->out, N_SAMPLES, SAMPLE_STEPS);
        printf("the samples fall in %d of the 10 classes (at least 2%% of them each)\n", classes);
        printf("sample_confidence=%.4f\n", mean);
        rc = ex_target("sample_confidence", mean, ">=", TARGET_CONFIDENCE);
    }
done:
    fashion_classifier_free(&judge);
    tg_forward_free(f);
    tg_session_free(s);
    tg_model_free(m);
    ex_fashion_free(&d);
    ex_fashion_epochs_free(&ep);
    for (int i = 0; i < avg.n && i < 32; i++) free(avg.avg[i]);
    free(avg.cur);
    free(img);
    free(x);
    return rc;
}
