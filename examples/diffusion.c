/* A denoising diffusion model (DDPM: Ho, Jain and Abbeel, 2020) on
 * Fashion-MNIST at 28x28, sampled with DDIM (Song, Meng and Ermon, 2021).
 *
 *   x0 an image scaled to [-1, 1], t uniform in 1..T_STEPS, eps ~ N(0, I)
 *   drawn in the graph (tg_randn), abar(t) the cosine schedule (Nichol and
 *   Dhariwal, 2021), a = sqrt(abar), s = sqrt(1 - abar):
 *   x_t = a x0 + s eps;   loss = mse(v_net(x_t, t), a eps - s x0)
 *
 *   The network predicts v (Salimans and Ho, 2022), from which
 *   x0 = a x_t - s v and eps = s x_t + a v at every t: predicting eps
 *   instead, the first sampling steps divide it by an a near 0, and many
 *   samples came out as white noise.
 *
 *   v_net: a U-Net. The timestep's sinusoidal embedding (EMB features)
 *   goes through an MLP (EMB -> TDIM -> TDIM, silu) and into every block
 *   as a per-channel shift. A block is group_norm -> silu -> 3x3 conv, plus
 *   the time shift. Down: C1 channels at 28x28, avg_pool2d to 14x14 (C2),
 *   to 7x7 (C3) and a middle block; up: conv_transpose2d (2x2, stride 2)
 *   back to 14x14 and 28x28, each concatenated with the encoder's block of
 *   that size (the skip connections) before a block; out: group_norm ->
 *   silu -> 3x3 conv to one channel.
 *
 * Training: batches of BATCH images from the batching helper (tg_data:
 * a shuffled epoch order from the seed), each update the mean gradient of
 * ACCUM micro-batches (spec.accumulate: the activations of BATCH / ACCUM
 * images); Adam with a cosine decay, clip 1.0, and a moving average of the
 * params in the graph (optim.ema_decay) that the samples are drawn from.
 *
 * Sampling: N_SAMPLES images from N(0, I) through SAMPLE_STEPS
 * deterministic DDIM steps (as many as its updates in a shorter run, a
 * test's) from t = T_STEPS down to 0, predicting x0 at each (clipped to
 * [-1, 1]) in a forward session holding the average.
 *
 * The samples are judged, as flow's, by the Fashion-MNIST CNN of
 * fashion_cnn.h trained first in the same run (JUDGE_STEPS steps; as many
 * as the updates when --steps is fewer): `sample_confidence` is its mean
 * top-class probability (exit 2 below TARGET_CONFIDENCE; real test images
 * score about 0.9), and the line before it says how many of the 10 classes
 * the samples fall in. With --out FILE it writes the samples as a 16x16
 * PNG grid. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fashion_cnn.h"

#define BATCH 64
#define ACCUM 2
#define MICRO (BATCH / ACCUM)
#define T_STEPS 1000
#define SAMPLE_STEPS 40
#define N_SAMPLES 256
#define JUDGE_STEPS 1500
#define TARGET_CONFIDENCE 0.6
#define LR 2e-3f
#define EMA_DECAY 0.995f
#define EMB 32
#define TDIM 64
#define C1 16
#define C2 32
#define C3 64
#define SIDE EX_FASHION_SIDE
#define PIXELS EX_FASHION_PIXELS

/* group_norm -> silu -> 3x3 conv, plus the timestep's shift per channel */
typedef struct {
    tg_groupnorm norm;
    tg_conv2d conv;
    tg_linear shift;
} block;

typedef struct {
    tg_linear t1, t2;
    tg_conv2d in;
    block b28, b14, b7, mid, u14, u28;
    tg_conv_transpose2d up14, up28;
    tg_groupnorm out_norm;
    tg_conv2d out;
} unet;

static block block_new(tg_model *m, const char *name, int64_t in, int64_t out) {
    char n[64];
    tg_init kaiming = tg_init_kaiming();
    block b;
    snprintf(n, sizeof n, "%s.norm", name);
    b.norm = tg_groupnorm_new(m, n, in / 8, in);
    snprintf(n, sizeof n, "%s.conv", name);
    b.conv = tg_conv2d_new_opts(m, n, in, out, (tg_conv2d_opts){.kh = 3, .pad_h = 1, .pad_w = 1, .init = &kaiming});
    snprintf(n, sizeof n, "%s.shift", name);
    b.shift = tg_linear_new(m, n, TDIM, out, true);
    return b;
}

/* x [n, in, H, W], temb [n, TDIM] -> [n, out, H, W] */
static tg_tensor block_fwd(tg_graph *g, const block *b, tg_tensor x, tg_tensor temb) {
    int64_t n = tg_tensor_shape(x).d[0];
    tg_tensor h = tg_conv2d_fwd(g, &b->conv, tg_silu(tg_groupnorm_fwd(g, &b->norm, x)));
    return tg_add(h, tg_reshape(tg_linear_fwd(g, &b->shift, temb), TG_SHAPE(n, b->conv.out, 1, 1)));
}

static unet unet_new(tg_model *m) {
    tg_init kaiming = tg_init_kaiming();
    unet u;
    u.t1 = tg_linear_new(m, "time.l1", EMB, TDIM, true);
    u.t2 = tg_linear_new(m, "time.l2", TDIM, TDIM, true);
    u.in = tg_conv2d_new_opts(m, "in", 1, C1, (tg_conv2d_opts){.kh = 3, .pad_h = 1, .pad_w = 1, .init = &kaiming});
    u.b28 = block_new(m, "down28", C1, C1);
    u.b14 = block_new(m, "down14", C1, C2);
    u.b7 = block_new(m, "down7", C2, C3);
    u.mid = block_new(m, "mid", C3, C3);
    u.up14 = tg_conv_transpose2d_new(m, "up14", C3, C2, 2, 2, 0, 0, 1, true);
    u.u14 = block_new(m, "up14.block", 2 * C2, C2);
    u.up28 = tg_conv_transpose2d_new(m, "up28", C2, C1, 2, 2, 0, 0, 1, true);
    u.u28 = block_new(m, "up28.block", 2 * C1, C1);
    u.out_norm = tg_groupnorm_new(m, "out.norm", C1 / 8, C1);
    u.out = tg_conv2d_new_opts(m, "out", C1, 1, (tg_conv2d_opts){.kh = 3, .pad_h = 1, .pad_w = 1});
    return u;
}

/* t f32 [n, 1] -> [n, EMB]: sin and cos of t times EMB / 2 frequencies
 * from 1 down to 1/10000 (the transformer's positional encoding) */
static tg_tensor sinusoid(tg_graph *g, tg_tensor t) {
    float f[EMB / 2];
    for (int k = 0; k < EMB / 2; k++) f[k] = expf(-logf(10000.0f) * (float)k / (EMB / 2));
    tg_tensor a = tg_mul(t, tg_constant(g, TG_SHAPE(EMB / 2), f));
    return tg_concat(((tg_tensor[]){tg_sin(a), tg_cos(a)}), 2, -1);
}

/* x_t [n, 1, 28, 28], t f32 [n, 1] -> the predicted v [n, 1, 28, 28] */
static tg_tensor v_net(tg_graph *g, const unet *u, tg_tensor x, tg_tensor t) {
    tg_tensor temb = tg_silu(tg_linear_fwd(g, &u->t2, tg_silu(tg_linear_fwd(g, &u->t1, sinusoid(g, t)))));
    tg_tensor h1 = block_fwd(g, &u->b28, tg_conv2d_fwd(g, &u->in, x), temb);                /* C1 x 28 */
    tg_tensor h2 = block_fwd(g, &u->b14, tg_avg_pool2d(h1, 2, 0, 0), temb);                 /* C2 x 14 */
    tg_tensor h3 = block_fwd(g, &u->b7, tg_avg_pool2d(h2, 2, 0, 0), temb);                  /* C3 x 7 */
    h3 = block_fwd(g, &u->mid, h3, temb);
    tg_tensor d = tg_conv_transpose2d_fwd(g, &u->up14, h3);                                 /* C2 x 14 */
    d = block_fwd(g, &u->u14, tg_concat(((tg_tensor[]){d, h2}), 2, 1), temb);
    d = tg_conv_transpose2d_fwd(g, &u->up28, d);                                            /* C1 x 28 */
    d = block_fwd(g, &u->u28, tg_concat(((tg_tensor[]){d, h1}), 2, 1), temb);
    return tg_conv2d_fwd(g, &u->out, tg_silu(tg_groupnorm_fwd(g, &u->out_norm, d)));
}

static tg_tensor diffusion_loss(tg_graph *g, void *u) {
    tg_tensor x0 = tg_input(g, "x"), eps = tg_randn(g, tg_tensor_shape(x0)), a = tg_input(g, "a"), s = tg_input(g, "s");
    tg_tensor xt = tg_add(tg_mul(a, x0), tg_mul(s, eps));
    tg_tensor v = tg_sub(tg_mul(a, eps), tg_mul(s, x0));
    return tg_mse(v_net(g, u, xt, tg_input(g, "t")), v);
}
static tg_tensor diffusion_predict(tg_graph *g, void *u) { return v_net(g, u, tg_input(g, "x"), tg_input(g, "t")); }

/* abar(t), t in 0..T_STEPS: the cosine schedule, abar(0) = 1 */
static double abar(int t) {
    const double s = 0.008;
    double f = cos((t / (double)T_STEPS + s) / (1 + s) * EX_PI / 2), f0 = cos(s / (1 + s) * EX_PI / 2);
    double a = f * f / (f0 * f0);
    return a < 1e-5 ? 1e-5 : a;
}

static void fill_normal(uint64_t *rng, float *v, int n) {
    for (int i = 0; i < n; i += 2) { /* Box-Muller, two at a time */
        double u1 = (ex_rand(rng) + 1.0) / 2147483649.0, u2 = ex_rand(rng) / 2147483648.0, r = sqrt(-2.0 * log(u1));
        v[i] = (float)(r * cos(2 * EX_PI * u2));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(2 * EX_PI * u2));
    }
}

/* N_SAMPLES images in [-1, 1]: deterministic DDIM from noise in n_steps
 * steps, each predicting x0 (clipped) and moving to the next, lower
 * timestep. */
static tg_status sample(tg_forward *f, uint64_t seed, int n_steps, float *x) {
    static float v[N_SAMPLES * PIXELS], tt[N_SAMPLES];
    uint64_t rng = seed * 7 + 7654321;
    fill_normal(&rng, x, N_SAMPLES * PIXELS);
    for (int i = 0; i < n_steps; i++) {
        int t = T_STEPS - i * T_STEPS / n_steps, next = T_STEPS - (i + 1) * T_STEPS / n_steps;
        for (int k = 0; k < N_SAMPLES; k++) tt[k] = (float)t;
        tg_feed fs[] = {TG_FEED("x", x, N_SAMPLES * PIXELS), TG_FEED("t", tt, N_SAMPLES)};
        tg_status st = tg_forward_run(f, N_SAMPLES, fs, 2);
        if (st == TG_OK) st = tg_forward_output(f, v, N_SAMPLES * PIXELS);
        if (st != TG_OK) return st;
        double a = abar(t), an = abar(next);
        for (int k = 0; k < N_SAMPLES * PIXELS; k++) {
            double x0 = sqrt(a) * x[k] - sqrt(1 - a) * v[k];
            x0 = x0 < -1 ? -1 : x0 > 1 ? 1 : x0;
            double e = (x[k] - sqrt(a) * x0) / sqrt(1 - a); /* the noise that x0 leaves */
            x[k] = (float)(next > 0 ? sqrt(an) * x0 + sqrt(1 - an) * e : x0);
        }
    }
    return TG_OK;
}

int example_diffusion(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : 3000;
    if (o->comm) {
        fprintf(stderr, "diffusion: --dp is not supported (the updates accumulate micro-batches)\n");
        return 1;
    }
    tg_model *m = tg_model_new();
    unet net = unet_new(m);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(MICRO, 1, SIDE, SIDE)}, {"t", TG_F32, TG_SHAPE(MICRO, 1)},
                          {"a", TG_F32, TG_SHAPE(MICRO, 1, 1, 1)}, {"s", TG_F32, TG_SHAPE(MICRO, 1, 1, 1)}};
    tg_input_decl pin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1, SIDE, SIDE)}, {"t", TG_F32, TG_SHAPE(TG_BATCH, 1)}};
    tg_train_spec spec = {.model = m, .loss = diffusion_loss, .user = &net, .inputs = in, .n_inputs = 4,
                          .optim = tg_adam(tg_lr_cosine(ex_lr(o, LR), ex_lr_at(o, LR, 1e-5f), steps)),
                          .seed = o->seed, .backend = o->backend, .threads = o->threads, .accumulate = ACCUM,
                          .discard_grads = o->discard_grads};
    spec.optim.clip_grad_norm = 1.0f;
    spec.optim.ema_decay = EMA_DECAY;
    tg_forward_spec pspec = {.fn = diffusion_predict, .user = &net, .inputs = pin, .n_inputs = 2, .model = m,
                             .seed = o->seed, .backend = o->backend, .threads = o->threads};
    tg_session *s = NULL;
    tg_forward *f = NULL;
    tg_data *data = NULL;
    tg_safetensors *avg = NULL;
    fashion_classifier judge = {0};
    ex_fashion d = {0};
    float *img = malloc(sizeof(float) * N_SAMPLES * PIXELS), *train_x = NULL, loss = 0;
    int rc = 0;
    tg_status st = img ? tg_session_new(&spec, &s) : TG_ERR_NOMEM;
    if (st == TG_OK) st = tg_session_set_seed(s, o->seed);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", img ? tg_last_error() : "out of memory");
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "diffusion", &spec, s, &rc)) goto done;
    if (ex_fashion_load(&d)) {
        rc = 1;
        goto done;
    }
    /* the training images in [-1, 1], batched by the helper */
    if (!(train_x = malloc(sizeof(float) * (size_t)d.n_train * PIXELS))) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto done;
    }
    ex_fashion_pixels(d.train_x, NULL, d.n_train, train_x);
    for (int64_t k = 0; k < (int64_t)d.n_train * PIXELS; k++) train_x[k] = 2 * train_x[k] - 1;
    tg_data_field field = {"x", train_x, TG_F32, PIXELS};
    tg_data_spec ds = {.fields = &field, .n_fields = 1, .n = d.n_train, .batch = MICRO, .seed = o->seed,
                       .last = TG_LAST_DROP};
    if ((st = tg_data_new(&ds, &data)) != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    int64_t judge_steps = steps < JUDGE_STEPS ? steps : JUDGE_STEPS; /* a short run (a test) has a short judge */
    if (!o->quiet)
        printf("diffusion: training the Fashion-MNIST CNN that judges the samples (%lld steps)\n",
               (long long)judge_steps);
    if (fashion_classifier_train(&d, o, judge_steps, NULL, 0, &judge, NULL)) {
        rc = 1;
        goto done;
    }
    if (!o->quiet)
        printf("diffusion: %lld params, a U-Net of %d, %d and %d channels at 28, 14 and 7 pixels; batch %d as %d "
               "micro-batches of %d; %lld updates\n", (long long)tg_model_numel(m), C1, C2, C3, BATCH, ACCUM, MICRO,
               (long long)steps);
    ex_run run;
    if (ex_run_start(&run, o, steps, BATCH, "sample_confidence")) {
        rc = 1;
        goto done;
    }
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 41;
    static float tt[MICRO], a[MICRO], sd[MICRO];
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        float sum = 0;
        for (int k = 0; k < ACCUM && st == TG_OK; k++) { /* one update: ACCUM micro-batches */
            tg_batch b;
            if (!tg_data_next(data, TG_SPLIT_TRAIN, &b)) tg_data_next(data, TG_SPLIT_TRAIN, &b); /* a new epoch */
            for (int i = 0; i < MICRO; i++) {
                int t = 1 + (int)(ex_rand(&rng) % T_STEPS);
                double ab = abar(t);
                tt[i] = (float)t, a[i] = (float)sqrt(ab), sd[i] = (float)sqrt(1 - ab);
            }
            tg_feed feeds[] = {b.feeds[0], TG_FEED("t", tt, MICRO), TG_FEED("a", a, MICRO), TG_FEED("s", sd, MICRO)};
            float l = 0;
            st = tg_session_step(s, feeds, 4, ex_run_due(&run, step) || step == steps ? &l : NULL);
            sum += l;
        }
        loss = sum / ACCUM;
        if (st == TG_OK && ex_run_due(&run, step) && step < steps)
            ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    /* the samples come from the params' average, in a forward session of their own */
    if (st == TG_OK) st = tg_session_download_ema(s, &avg);
    if (st == TG_OK) st = tg_forward_new(&pspec, &f);
    if (st == TG_OK) st = tg_forward_upload_tensors(f, tg_safetensors_tensor(avg, 0), tg_safetensors_count(avg));
    /* a short run (a test) samples in as many steps */
    int sample_steps = steps < SAMPLE_STEPS ? (int)steps : SAMPLE_STEPS;
    if (st == TG_OK) st = sample(f, o->seed, sample_steps, img);
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
        if (o->out) printf("wrote %s: %d samples, %d DDIM steps each\n", o->out, N_SAMPLES, sample_steps);
        printf("the samples fall in %d of the 10 classes (at least 2%% of them each)\n", classes);
        printf("sample_confidence=%.4f\n", mean);
        rc = ex_target("sample_confidence", mean, ">=", TARGET_CONFIDENCE);
    }
done:
    fashion_classifier_free(&judge);
    tg_safetensors_free(avg);
    tg_forward_free(f);
    tg_session_free(s);
    tg_data_free(data);
    tg_model_free(m);
    ex_fashion_free(&d);
    free(train_x);
    free(img);
    return rc;
}
