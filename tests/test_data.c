/* Batches of an in-memory dataset (tg_data_*): the split, each epoch's
 * order from the seed, the three ways with a last partial batch, the
 * gathered feeds, and the errors. */
#include "check.h"

enum { N = 10, B = 3, NVAL = 3 };

static float X[N][2];
static int32_t Y[N];

static tg_data *open_set(uint64_t seed, tg_last_batch last, int64_t n_val) {
    tg_data_field f[] = {{"x", X, TG_F32, 2}, {"y", Y, TG_I32, 1}};
    tg_data_spec spec = {f, 2, N, B, n_val, seed, false, last, TG_LAST_PARTIAL};
    tg_data *d = NULL;
    CHECK_OK(tg_data_new(&spec, &d));
    return d;
}

/* one epoch of split: the samples in order into got[], the batch counts into counts[] */
static int epoch(tg_data *d, tg_split split, int64_t *got, int64_t *counts, int64_t *fresh) {
    tg_batch b;
    int nb = 0, k = 0;
    while (tg_data_next(d, split, &b)) {
        CHECK(b.n_feeds == 2 && strcmp(b.feeds[0].name, "x") == 0 && b.feeds[1].dtype == TG_I32, "feeds");
        CHECK(b.feeds[0].count == 2 * b.count && b.feeds[1].count == b.count, "feed sizes");
        CHECK(b.index == nb, "batch %lld at place %d", (long long)b.index, nb);
        for (int64_t i = 0; i < b.count; i++) {
            int64_t s = b.samples[i];
            const float *x = b.feeds[0].data;
            const int32_t *y = b.feeds[1].data;
            CHECK(x[2 * i] == X[s][0] && x[2 * i + 1] == X[s][1] && y[i] == Y[s], "sample %lld gathered wrong",
                  (long long)s);
            if (i < b.fresh) got[k++] = s;
        }
        counts[nb] = b.count, fresh[nb] = b.fresh;
        nb++;
    }
    return nb;
}

static void split_and_orders(void) {
    tg_data *a = open_set(42, TG_LAST_DROP, NVAL), *b = open_set(42, TG_LAST_DROP, NVAL), *c = open_set(43, TG_LAST_DROP, NVAL);
    if (!a || !b || !c) goto done;
    CHECK(tg_data_count(a, TG_SPLIT_TRAIN) == N - NVAL && tg_data_count(a, TG_SPLIT_VAL) == NVAL, "split sizes");
    CHECK(tg_data_batches(a, TG_SPLIT_TRAIN) == 2 && tg_data_batches(a, TG_SPLIT_VAL) == 1, "batches per epoch");
    int64_t val[N], cv[4], fv[4];
    CHECK(epoch(a, TG_SPLIT_VAL, val, cv, fv) == 1 && cv[0] == NVAL, "the validation epoch");
    bool in_val[N] = {false};
    for (int i = 0; i < NVAL; i++) in_val[val[i]] = true;
    int64_t e0[N], e1[N], o[N], f[N], counts[4], fresh[4];
    CHECK(epoch(a, TG_SPLIT_TRAIN, e0, counts, fresh) == 2, "2 full batches of 3 from 7 (the last dropped)");
    CHECK(epoch(a, TG_SPLIT_TRAIN, e1, counts, fresh) == 2, "the next epoch");
    bool seen[N] = {false}, differ = false;
    for (int i = 0; i < 6; i++) {
        CHECK(!in_val[e0[i]], "validation sample %lld in a training batch", (long long)e0[i]);
        CHECK(!seen[e0[i]], "sample %lld twice in an epoch", (long long)e0[i]);
        seen[e0[i]] = true;
        differ |= e0[i] != e1[i];
    }
    CHECK(differ, "two epochs in the same order");
    epoch(b, TG_SPLIT_TRAIN, o, counts, fresh);
    CHECK(memcmp(o, e0, sizeof(int64_t) * 6) == 0, "the same seed gave another order");
    epoch(c, TG_SPLIT_TRAIN, f, counts, fresh);
    bool other = false;
    for (int i = 0; i < 6; i++) other |= f[i] != e0[i];
    CHECK(other, "another seed gave the same order");
done:
    tg_data_free(a);
    tg_data_free(b);
    tg_data_free(c);
}

static void last_batches(void) {
    int64_t got[N], counts[4], fresh[4];
    tg_data *p = open_set(1, TG_LAST_PARTIAL, 0), *f = open_set(1, TG_LAST_FILL, 0);
    if (!p || !f) goto done;
    CHECK(epoch(p, TG_SPLIT_TRAIN, got, counts, fresh) == 4 && counts[3] == 1 && fresh[3] == 1,
          "PARTIAL: 3 + 3 + 3 + 1, got a last batch of %lld", (long long)counts[3]);
    int64_t first = got[0];
    int64_t got2[N];
    CHECK(epoch(f, TG_SPLIT_TRAIN, got2, counts, fresh) == 4 && counts[3] == B && fresh[3] == 1, "FILL: 3 + 3 + 3 + 3 (1 new)");
    CHECK(memcmp(got, got2, sizeof got) == 0 && got2[0] == first, "the two sets' orders differ");
    tg_batch b;
    for (int i = 0; i < 4; i++) tg_data_next(f, TG_SPLIT_TRAIN, &b); /* the next epoch's fourth batch */
    CHECK(b.epoch == 1 && b.index == 3 && b.count == B && b.fresh == 1, "epoch %lld batch %lld", (long long)b.epoch,
          (long long)b.index);
done:
    tg_data_free(p);
    tg_data_free(f);
}

/* the feeds go straight into a step */
static tg_tensor loss_fn(tg_graph *g, void *u) {
    tg_tensor w = tg_use(g, *(tg_param *)u);
    tg_tensor logits = tg_matmul(tg_input(g, "x"), w);
    return tg_cross_entropy(logits, tg_input(g, "y"), TG_REDUCTION_MEAN);
}

static void feeds_a_session(void) {
    tg_model *m = tg_model_new();
    tg_param w = tg_model_param(m, "w", TG_SHAPE(2, 2), tg_init_randn(0.1f));
    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(B, 2)}, {"y", TG_I32, TG_SHAPE(B)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &w, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(0.1f)), .threads = 1};
    tg_session *s = NULL;
    tg_data *d = open_set(5, TG_LAST_DROP, 0);
    CHECK_OK(tg_session_new(&spec, &s));
    tg_batch b;
    float first = 0, loss = 0;
    for (int e = 0; s && d && e < 20; e++)
        while (tg_data_next(d, TG_SPLIT_TRAIN, &b)) {
            CHECK_OK(tg_session_step(s, b.feeds, b.n_feeds, &loss));
            if (e == 0 && b.index == 0) first = loss;
        }
    CHECK(loss < first, "training on the batches: loss %.4f after %.4f", loss, first);
    tg_data_free(d);
    tg_session_free(s);
    tg_model_free(m);
}

static void errors(void) {
    tg_data_field f[] = {{"x", X, TG_F32, 2}, {"x", Y, TG_I32, 1}};
    tg_data_spec spec = {f, 1, N, B, 0, 0, false, TG_LAST_DROP, TG_LAST_DROP};
    tg_data *d = NULL;
    CHECK_ERR(tg_data_new(NULL, &d), TG_ERR_ARG, "spec is NULL");
    spec.n_fields = 2;
    CHECK_ERR(tg_data_new(&spec, &d), TG_ERR_ARG, "two fields are called 'x'");
    spec.n_fields = 1, spec.n_val = N;
    CHECK_ERR(tg_data_new(&spec, &d), TG_ERR_ARG, "0 <= n_val < n");
    spec.n_val = 8;
    CHECK_ERR(tg_data_new(&spec, &d), TG_ERR_ARG, "2 training samples make no full batch of 3");
    spec.n_val = 0, f[0].size = 0;
    CHECK_ERR(tg_data_new(&spec, &d), TG_ERR_ARG, "field 0 ('x')");
    CHECK(d == NULL, "a failed tg_data_new left a set");
    tg_batch b;
    CHECK(!tg_data_next(NULL, TG_SPLIT_TRAIN, &b) && tg_data_count(NULL, TG_SPLIT_VAL) == 0, "NULL sets");
}

int main(void) {
    for (int i = 0; i < N; i++) X[i][0] = (float)i, X[i][1] = (float)(i % 3) - 1.0f, Y[i] = i % 2;
    split_and_orders();
    last_batches();
    feeds_a_session();
    errors();
    return check_summary("test_data");
}
