/* Upstream's MNIST CNN (samples/mnist-cnn), on Fashion-MNIST: the model
 * `tg train fashion_cnn` trains, and a classifier other examples can train
 * or load and call (flow judges its samples with it).
 *
 *   x [B, 1, 28, 28] -> conv 3x3 (16) relu -> max pool 2 -> [B, 16, 14, 14]
 *                    -> conv 3x3 (32) relu -> max pool 2 -> [B, 32, 7, 7]
 *                    -> flatten 1568 -> linear 64 relu -> linear 10 (logits)
 *
 * Params (upstream's names): conv1.W [16,1,3,3], conv1.b, conv2.W
 * [32,16,3,3], conv2.b, fc1.W [1568,64], fc1.b, fc2.W [64,10], fc2.b:
 * 105,866 in all. */
#ifndef TG_EXAMPLES_FASHION_CNN_H
#define TG_EXAMPLES_FASHION_CNN_H

#include "examples.h"

typedef struct {
    tg_conv2d c1, c2;
    tg_linear fc1, fc2;
} fashion_cnn;

fashion_cnn fashion_cnn_new(tg_model *m);
/* x [B, 1, 28, 28] in [0, 1] -> logits [B, 10] */
tg_tensor fashion_cnn_logits(tg_graph *g, const fashion_cnn *net, tg_tensor x);

/* A trained classifier: a forward session of the CNN whose output is the
 * logits [n, 10] of its input "x" [n, 1, 28, 28] (any n, TG_BATCH). */
typedef struct {
    tg_model *m;
    fashion_cnn net;
    tg_forward *f;
} fashion_classifier;

/* The recipe of `tg train fashion_cnn`: upstream's AdamW (weight decay
 * 0.01, clip 1.0; here 3e-3 with a cosine decay to 1e-5) on batches of 64
 * walking a fresh shuffle of the 60,000 training images each epoch,
 * `steps` steps from o->seed on o->backend. run: the progress line, --log
 * and --plot (NULL: silent); every `eval_every` steps (0: never) the test
 * accuracy is measured and reported on it. Fills c (its forward session
 * keeps the params). Returns 0, or 1 after printing why. */
int fashion_classifier_train(const ex_fashion *d, const tg_example_opts *o, int64_t steps, ex_run *run,
                             int64_t eval_every, fashion_classifier *c, float *final_loss);
/* The classifier from a file `tg train fashion_cnn --out FILE` wrote (its
 * params, safetensors), on `backend`. Returns 0, or 1 after printing why. */
int fashion_classifier_load(const char *path, tg_backend backend, int threads, fashion_classifier *c);
/* The fraction of the n images [n, 784] (u8) whose largest logit is their
 * label; -1 after printing an error. */
double fashion_classifier_accuracy(fashion_classifier *c, const uint8_t *images, const int32_t *labels, int n);
/* logits [n, 10] of the n images [n, 784] in [0, 1]. */
tg_status fashion_classifier_logits(fashion_classifier *c, const float *x, int n, float *logits);
/* How generated images are judged (flow, diffusion): of the n images
 * [n, 784] in [0, 1], the mean of each one's largest class probability,
 * and how many classes hold at least 2% of them. */
tg_status fashion_classifier_judge(fashion_classifier *c, const float *img, int n, double *confidence, int *classes);
void fashion_classifier_free(fashion_classifier *c);

#endif
