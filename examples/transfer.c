/* Transfer learning (upstream's image-classifier sample, which puts a
 * linear head on a frozen pretrained ViT-tiny): a small vision transformer
 * is pretrained on five of Fashion-MNIST's classes, saved as safetensors,
 * loaded frozen into a forward session of its own, and a linear head is
 * trained on its features for the other five classes from a few labeled
 * images each; beside it, the same head on the raw pixels.
 *
 *   ViT: x [B, 1, 28, 28] -> patch conv 7x7 stride 7 (D) -> 16 tokens of D,
 *        a class token prepended, learned positions added
 *        -> DEPTH x (x += attn(layernorm(x)), x += fc2(gelu(fc1(layernorm(x)))))
 *        -> layernorm -> the class token's D features (-> linear 5 to pretrain)
 *
 * Pretraining: five classes (pre_classes), their 30,000 training images, AdamW 1e-3 with a cosine decay,
 * weight decay 0.05, clip 1.0, batch 128. The backbone's params (not the
 * pretraining head) are written with tg_safetensors_write (--out FILE
 * keeps the file). The heads: the other five classes, SHOTS training
 * images of each, full-batch Adam 0.05 for 200
 * steps (upstream's head recipe), measured on those classes' 5,000 test
 * images. Ends with `transfer_accuracy=<value>` after `pixel_accuracy=`;
 * exits 2 below TARGET_ACC. On this data the head on the raw pixels does
 * better (about 0.84 against 0.80): five classes teach a backbone this
 * small features too specific to them to beat pixels on the other five
 * (4x4 patches, 3 times the cost, gave 0.83; every token's features rather
 * than the class token's 0.83). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "examples.h"

enum { D = 64, HEADS = 4, DEPTH = 2, FF = 4 * D, PATCH = 7, GRID = 4, NPATCH = GRID * GRID, NTOK = NPATCH + 1 };
enum { B = 128, NEW = 5, SHOTS = 20, HEAD_STEPS = 200, EVAL_CHUNK = 500 };
#define PRE_STEPS 1500
/* The pretraining classes (t-shirt/top, pullover, dress, sandal, bag) and
 * the new ones (trouser, coat, shirt, sneaker, ankle boot): each half has
 * clothes and footwear. */
static const int pre_classes[NEW] = {0, 2, 3, 5, 8}, new_classes[NEW] = {1, 4, 6, 7, 9};
#define TARGET_ACC 0.75

typedef struct {
    tg_layernorm n1, n2;
    tg_linear qkv, proj, fc1, fc2;
} vit_block;

typedef struct {
    tg_conv2d patch;
    tg_param cls, pos;
    vit_block blocks[DEPTH];
    tg_layernorm norm;
    tg_linear head; /* pretraining only */
} vit;

static void declare(tg_model *m, vit *v, bool head) {
    char name[64];
    v->patch = tg_conv2d_new(m, "patch", 1, D, PATCH, PATCH, 0, 1, true);
    v->cls = tg_model_param(m, "cls", TG_SHAPE(1, 1, D), tg_init_randn(0.02f));
    v->pos = tg_model_param(m, "pos", TG_SHAPE(1, NTOK, D), tg_init_randn(0.02f));
    for (int i = 0; i < DEPTH; i++) {
        vit_block *b = &v->blocks[i];
#define NAME(fmt) (snprintf(name, sizeof name, "blocks.%d." fmt, i), name)
        b->n1 = tg_layernorm_new(m, NAME("norm1"), D);
        b->qkv = tg_linear_new(m, NAME("qkv"), D, 3 * D, true);
        b->proj = tg_linear_new(m, NAME("proj"), D, D, true);
        b->n2 = tg_layernorm_new(m, NAME("norm2"), D);
        b->fc1 = tg_linear_new(m, NAME("fc1"), D, FF, true);
        b->fc2 = tg_linear_new(m, NAME("fc2"), FF, D, true);
#undef NAME
    }
    v->norm = tg_layernorm_new(m, "norm", D);
    if (head) v->head = tg_linear_new(m, "head", D, NEW, true);
}

/* x [n, 1, 28, 28] -> every token after the last layernorm [n, NTOK, D] */
static tg_tensor tokens(tg_graph *g, const vit *v, tg_tensor x) {
    int64_t n = tg_tensor_shape(x).d[0];
    tg_tensor p = tg_swap_axes(tg_reshape(tg_conv2d_fwd(g, &v->patch, x), TG_SHAPE(n, D, NPATCH)), 1, 2);
    tg_tensor parts[2] = {tg_broadcast_to(tg_use(g, v->cls), TG_SHAPE(n, 1, D)), p};
    tg_tensor h = tg_add(tg_concat(parts, 2, 1), tg_use(g, v->pos));
    for (int i = 0; i < DEPTH; i++) {
        const vit_block *b = &v->blocks[i];
        tg_tensor qkv[3];
        tg_split(tg_linear_fwd(g, &b->qkv, tg_layernorm_fwd(g, &b->n1, h)), -1, ((int64_t[]){D, D, D}), 3, qkv);
        tg_tensor q = tg_split_heads(qkv[0], HEADS), k = tg_split_heads(qkv[1], HEADS), val = tg_split_heads(qkv[2], HEADS);
        tg_tensor scores = tg_mul_s(tg_matmul_t(q, k, false, true), 1.0f / sqrtf((float)(D / HEADS)));
        h = tg_add(h, tg_linear_fwd(g, &b->proj, tg_merge_heads(tg_matmul(tg_softmax(scores, -1), val))));
        h = tg_add(h, tg_linear_fwd(g, &b->fc2, tg_gelu(tg_linear_fwd(g, &b->fc1, tg_layernorm_fwd(g, &b->n2, h)))));
    }
    return tg_layernorm_fwd(g, &v->norm, h);
}

/* x [n, 1, 28, 28] -> the class token's features [n, D] */
static tg_tensor features(tg_graph *g, const vit *v, tg_tensor x) {
    int64_t n = tg_tensor_shape(x).d[0];
    return tg_reshape(tg_narrow(tokens(g, v, x), 1, 0, 1), TG_SHAPE(n, D));
}

static tg_tensor pre_loss(tg_graph *g, void *u) {
    const vit *v = u;
    return tg_cross_entropy(tg_linear_fwd(g, &v->head, features(g, v, tg_input(g, "x"))), tg_input(g, "y"), TG_REDUCTION_MEAN);
}
static tg_tensor feature_fn(tg_graph *g, void *u) { return features(g, u, tg_input(g, "x")); }
static tg_tensor pre_predict(tg_graph *g, void *u) {
    const vit *v = u;
    return tg_argmax(tg_linear_fwd(g, &v->head, features(g, v, tg_input(g, "x"))), -1, false);
}

/* A linear head: f [n, in] -> logits [n, NEW] */
static tg_tensor head_loss(tg_graph *g, void *u) {
    return tg_cross_entropy(tg_linear_fwd(g, u, tg_input(g, "f")), tg_input(g, "y"), TG_REDUCTION_MEAN);
}
static tg_tensor head_predict(tg_graph *g, void *u) { return tg_argmax(tg_linear_fwd(g, u, tg_input(g, "f")), -1, false); }

/* Trains a linear head on the n labeled rows f [n, in] (labels 0..NEW-1),
 * then returns the fraction of the m test rows it labels right (-1 after
 * printing an error). */
static double head_accuracy(const float *f, const int32_t *y, int n, int64_t in, const float *tf, const int32_t *ty, int m,
                            const tg_example_opts *o) {
    tg_model *hm = tg_model_new();
    tg_linear head = tg_linear_new(hm, "fc", in, NEW, true);
    tg_input_decl hin[] = {{"f", TG_F32, TG_SHAPE(n, in)}, {"y", TG_I32, TG_SHAPE(n)}};
    tg_input_decl pin[] = {{"f", TG_F32, TG_SHAPE(TG_BATCH, in)}};
    tg_train_spec spec = {.model = hm, .loss = head_loss, .user = &head, .inputs = hin, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(0.05f)), .seed = o->seed, .backend = o->backend, .threads = o->threads};
    tg_forward_spec pspec = {.fn = head_predict, .user = &head, .inputs = pin, .n_inputs = 1};
    tg_session *s = NULL;
    tg_forward *p = NULL;
    int32_t *pred = malloc(sizeof(int32_t) * (size_t)m);
    tg_status st = pred ? tg_session_new(&spec, &s) : TG_ERR_NOMEM;
    if (st == TG_OK) st = tg_forward_attach(s, &pspec, &p);
    tg_feed feeds[] = {TG_FEED("f", f, (int64_t)n * in), TG_FEED("y", y, n)};
    for (int step = 0; step < HEAD_STEPS && st == TG_OK; step++) st = tg_session_step(s, feeds, 2, NULL);
    tg_feed tf_feed = TG_FEED("f", tf, (int64_t)m * in);
    if (st == TG_OK) st = tg_forward_run(p, m, &tf_feed, 1);
    if (st == TG_OK) st = tg_forward_output(p, pred, m);
    int right = 0;
    for (int i = 0; st == TG_OK && i < m; i++) right += pred[i] == ty[i];
    if (st != TG_OK) fprintf(stderr, "error: %s\n", st == TG_ERR_NOMEM ? "out of memory" : tg_last_error());
    free(pred);
    tg_forward_free(p);
    tg_session_free(s);
    tg_model_free(hm);
    return st == TG_OK ? (double)right / m : -1;
}

/* The indices of the images of the five classes cls[], and their labels 0..4 there. */
static int pick_classes(const int32_t *labels, int n, const int *cls, int *idx, int32_t *y) {
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < NEW; c++)
            if (labels[i] == cls[c]) idx[k] = i, y[k++] = c;
    return k;
}

/* "a, b, c, d and e" */
static void class_names(const int *cls, char *buf, size_t n) {
    snprintf(buf, n, "%s, %s, %s, %s and %s", ex_fashion_classes[cls[0]], ex_fashion_classes[cls[1]],
             ex_fashion_classes[cls[2]], ex_fashion_classes[cls[3]], ex_fashion_classes[cls[4]]);
}

/* The backbone's features [n, D] of the images idx[0..n) of `images`. */
static tg_status extract(tg_forward *fw, const uint8_t *images, const int *idx, int n, float *out) {
    static float x[EVAL_CHUNK * EX_FASHION_PIXELS];
    for (int at = 0; at < n; at += EVAL_CHUNK) {
        int k = n - at < EVAL_CHUNK ? n - at : EVAL_CHUNK;
        ex_fashion_pixels(images, idx + at, k, x);
        tg_feed f = TG_FEED("x", x, (int64_t)k * EX_FASHION_PIXELS);
        tg_status st = tg_forward_run(fw, k, &f, 1);
        if (st == TG_OK) st = tg_forward_output(fw, out + (size_t)at * D, (int64_t)k * D);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* The fraction of the images idx[0..n) of `images` that f (argmax, i32 [k]) labels y[i]; -1 on an error. */
static double pre_accuracy(tg_forward *f, const uint8_t *images, const int *idx, const int32_t *y, int n) {
    static float x[EVAL_CHUNK * EX_FASHION_PIXELS];
    static int32_t pred[EVAL_CHUNK];
    int right = 0;
    for (int at = 0; at < n; at += EVAL_CHUNK) {
        int k = n - at < EVAL_CHUNK ? n - at : EVAL_CHUNK;
        ex_fashion_pixels(images, idx + at, k, x);
        tg_feed fx = TG_FEED("x", x, (int64_t)k * EX_FASHION_PIXELS);
        if (tg_forward_run(f, k, &fx, 1) != TG_OK || tg_forward_output(f, pred, k) != TG_OK) return -1;
        for (int i = 0; i < k; i++) right += pred[i] == y[at + i];
    }
    return (double)right / n;
}

/* Writes every param of the session but the pretraining head to path. */
static tg_status save_backbone(tg_session *s, const char *path) {
    tg_safetensors *all = NULL;
    tg_status st = tg_session_download(s, &all);
    int n = st == TG_OK ? tg_safetensors_count(all) : 0, k = 0;
    tg_st_tensor *keep = st == TG_OK ? malloc(sizeof(tg_st_tensor) * (size_t)n) : NULL;
    for (int i = 0; keep && i < n; i++) {
        const tg_st_tensor *t = tg_safetensors_tensor(all, i);
        if (strncmp(t->name, "head.", 5) != 0) keep[k++] = *t;
    }
    const char *meta[] = {"model", "fashion-mnist vit backbone"};
    if (st == TG_OK) st = keep ? tg_safetensors_write(path, keep, k, meta, 1) : TG_ERR_NOMEM;
    free(keep);
    tg_safetensors_free(all);
    return st;
}

int example_transfer(const tg_example_opts *o) {
    int64_t steps = o->steps > 0 ? o->steps : PRE_STEPS, first, rows = ex_shard(o, B, &first);
    if (!rows) return 2;
    tg_model *m = tg_model_new(), *fm = tg_model_new();
    vit v, fv;
    declare(m, &v, true);
    declare(fm, &fv, false);
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(rows, 1, 28, 28)}, {"y", TG_I32, TG_SHAPE(rows)}};
    tg_train_spec spec = {.model = m, .loss = pre_loss, .user = &v, .inputs = in, .n_inputs = 2,
                          .optim = tg_adamw(tg_lr_cosine(1e-3f, 1e-5f, steps), 0.05f), .seed = o->seed,
                          .backend = o->backend, .threads = o->threads, .comm = o->comm};
    spec.optim.clip_grad_norm = 1.0f;
    tg_input_decl fin[] = {{"x", TG_F32, TG_SHAPE(TG_BATCH, 1, 28, 28)}};
    tg_forward_spec fspec = {.fn = feature_fn, .user = &fv, .inputs = fin, .n_inputs = 1, .model = fm,
                             .seed = o->seed + 1, .backend = o->backend, .threads = o->threads};
    tg_forward_spec pp_spec = {.fn = pre_predict, .user = &v, .inputs = fin, .n_inputs = 1};
    tg_session *s = NULL;
    tg_forward *fw = NULL, *pp = NULL;
    ex_fashion d = {0};
    int *pre_idx = NULL, *new_idx = NULL, *test_idx = NULL, *pre_test_idx = NULL, *shot_idx = NULL;
    int32_t *pre_y = NULL, *new_y = NULL, *test_y = NULL, *pre_test_y = NULL, *shot_y = NULL;
    float *x = NULL, *shot_f = NULL, *test_f = NULL, *shot_px = NULL, *test_px = NULL;
    char tmp[64] = "";
    int rc = 0;
    tg_status st = tg_session_new(&spec, &s);
    if (st == TG_OK) st = tg_forward_attach(s, &pp_spec, &pp);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (ex_compile_only(o, "transfer", &spec, s, &rc)) goto done;
    if (ex_fashion_load(&d)) {
        rc = 1;
        goto done;
    }
    int n_all = d.n_train > d.n_test ? d.n_train : d.n_test;
    pre_idx = malloc(sizeof(int) * (size_t)n_all), new_idx = malloc(sizeof(int) * (size_t)n_all);
    test_idx = malloc(sizeof(int) * (size_t)n_all), pre_test_idx = malloc(sizeof(int) * (size_t)n_all), shot_idx = malloc(sizeof(int) * NEW * SHOTS);
    pre_y = malloc(sizeof(int32_t) * (size_t)n_all), new_y = malloc(sizeof(int32_t) * (size_t)n_all);
    test_y = malloc(sizeof(int32_t) * (size_t)n_all), pre_test_y = malloc(sizeof(int32_t) * (size_t)n_all), shot_y = malloc(sizeof(int32_t) * NEW * SHOTS);
    x = malloc(sizeof(float) * B * EX_FASHION_PIXELS);
    if (!pre_idx || !new_idx || !test_idx || !pre_test_idx || !shot_idx || !pre_y || !new_y || !test_y || !pre_test_y ||
        !shot_y || !x) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto done;
    }
    int n_pre = pick_classes(d.train_y, d.n_train, pre_classes, pre_idx, pre_y);
    int n_new = pick_classes(d.train_y, d.n_train, new_classes, new_idx, new_y);
    int n_test = pick_classes(d.test_y, d.n_test, new_classes, test_idx, test_y);
    int n_pre_test = pick_classes(d.test_y, d.n_test, pre_classes, pre_test_idx, pre_test_y);
    if (!o->quiet) {
        char pre_names[128], new_names[128];
        class_names(pre_classes, pre_names, sizeof pre_names), class_names(new_classes, new_names, sizeof new_names);
        printf("transfer: a ViT of %d blocks, D=%d, %lld params, pretrained for %lld steps on the %d training images of "
               "%s; heads for %s from %d images of each\n",
               DEPTH, D, (long long)tg_model_numel(m), (long long)steps, n_pre, pre_names, new_names, SHOTS);
    }
    /* 1. pretraining */
    ex_run run;
    if (ex_run_start(&run, o, steps, B, NULL)) {
        rc = 1;
        goto done;
    }
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 59;
    float loss = 0;
    int which[B];
    int32_t y[B];
    for (int64_t step = 1; step <= steps && st == TG_OK; step++) {
        for (int b = 0; b < B; b++) {
            int k = (int)(ex_rand(&rng) % (uint64_t)n_pre);
            which[b] = pre_idx[k], y[b] = pre_y[k];
        }
        ex_fashion_pixels(d.train_x, which, B, x);
        tg_feed feeds[] = {TG_FEED("x", x + first * EX_FASHION_PIXELS, rows * EX_FASHION_PIXELS), TG_FEED("y", y + first, rows)};
        st = tg_session_step(s, feeds, 2, &loss);
        if (st == TG_OK && ex_run_due(&run, step)) ex_run_step(&run, step, loss, tg_lr_at(&spec.optim.lr, step), NULL);
    }
    if (st == TG_OK) ex_final_loss(o, &run, s, loss);
    if (ex_run_end(&run)) rc = 1;
    double pre_acc = st == TG_OK ? pre_accuracy(pp, d.test_x, pre_test_idx, pre_test_y, n_pre_test) : -1;
    if (pre_acc < 0) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    printf("the pretrained ViT labels %.4f of its five classes' %d test images right\n", pre_acc, n_pre_test);
    /* 2. the backbone saved, loaded frozen into a forward session of its own */
    const char *path = o->out;
    if (!path) { /* a temporary file, removed at the end */
        snprintf(tmp, sizeof tmp, "/tmp/tg-transfer-XXXXXX");
        int fd = mkstemp(tmp);
        if (fd < 0) {
            fprintf(stderr, "transfer: cannot create a temporary file in /tmp (--out FILE names one)\n");
            tmp[0] = 0;
            rc = 1;
            goto done;
        }
        close(fd);
        path = tmp;
    }
    if (st == TG_OK) st = save_backbone(s, path);
    if (st == TG_OK) st = tg_forward_new(&fspec, &fw);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    if (o->out) printf("wrote %s: the pretrained backbone's params\n", o->out);
    /* 3. the few labeled images of the new classes: the first SHOTS of each in one seeded shuffle */
    uint64_t pick_rng = o->seed + 61;
    int *order = malloc(sizeof(int) * (size_t)n_new), have[NEW] = {0}, n_shot = 0;
    for (int i = 0; order && i < n_new; i++) order[i] = i;
    if (order) ex_fashion_shuffle(order, n_new, &pick_rng);
    for (int i = 0; order && i < n_new && n_shot < NEW * SHOTS; i++) {
        int k = order[i];
        if (have[new_y[k]] < SHOTS) have[new_y[k]]++, shot_idx[n_shot] = new_idx[k], shot_y[n_shot++] = new_y[k];
    }
    free(order);
    shot_f = malloc(sizeof(float) * NEW * SHOTS * D), test_f = malloc(sizeof(float) * (size_t)n_test * D);
    shot_px = malloc(sizeof(float) * NEW * SHOTS * EX_FASHION_PIXELS);
    test_px = malloc(sizeof(float) * (size_t)n_test * EX_FASHION_PIXELS);
    if (!shot_f || !test_f || !shot_px || !test_px || n_shot < NEW * SHOTS) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto done;
    }
    /* the features of the backbone before its params are loaded: its random init */
    st = extract(fw, d.train_x, shot_idx, n_shot, shot_f);
    if (st == TG_OK) st = extract(fw, d.test_x, test_idx, n_test, test_f);
    double random_acc = st == TG_OK ? head_accuracy(shot_f, shot_y, n_shot, D, test_f, test_y, n_test, o) : -1;
    if (st == TG_OK) st = tg_forward_load_params(fw, path);
    if (st == TG_OK) st = extract(fw, d.train_x, shot_idx, n_shot, shot_f);
    if (st == TG_OK) st = extract(fw, d.test_x, test_idx, n_test, test_f);
    if (st != TG_OK) {
        fprintf(stderr, "error: %s\n", tg_last_error());
        rc = 1;
        goto done;
    }
    ex_fashion_pixels(d.train_x, shot_idx, n_shot, shot_px);
    ex_fashion_pixels(d.test_x, test_idx, n_test, test_px);
    /* 4. a linear head on the frozen features, and one on the pixels */
    double feat_acc = head_accuracy(shot_f, shot_y, n_shot, D, test_f, test_y, n_test, o);
    double pixel_acc = feat_acc < 0 ? -1 : head_accuracy(shot_px, shot_y, n_shot, EX_FASHION_PIXELS, test_px, test_y, n_test, o);
    if (feat_acc < 0 || pixel_acc < 0) {
        rc = 1;
        goto done;
    }
    printf("linear heads for %d new classes from %d images each, on %d test images: on the frozen features %.4f, "
           "on an untrained backbone's %.4f, on the pixels %.4f\n", NEW, SHOTS, n_test, feat_acc, random_acc, pixel_acc);
    printf("pixel_accuracy=%.4f\n", pixel_acc);
    printf("transfer_accuracy=%.4f\n", feat_acc);
    if (rc == 0) rc = ex_target("transfer_accuracy", feat_acc, ">=", TARGET_ACC);
done:
    if (tmp[0]) remove(tmp);
    tg_forward_free(fw);
    tg_forward_free(pp);
    tg_session_free(s);
    tg_model_free(fm);
    tg_model_free(m);
    ex_fashion_free(&d);
    free(pre_idx), free(new_idx), free(test_idx), free(pre_test_idx), free(shot_idx);
    free(pre_y), free(new_y), free(test_y), free(pre_test_y), free(shot_y);
    free(x), free(shot_f), free(test_f), free(shot_px), free(test_px);
    return rc;
}
