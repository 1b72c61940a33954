/* PyTorch parity: the addition transformer (V=12, D=64, 3 pre-LN blocks, 4
 * heads, T=8, tied embeddings, learned positions) with the fixed weights and
 * batch of tests/fixtures/addition_parity.safetensors (written by
 * make_addition_fixture.py with PyTorch). Logits, the masked cross-entropy
 * loss and every param gradient must match PyTorch's to 1e-4, relative to
 * each tensor's largest magnitude, on the CPU and (when there is one) on
 * WebGPU, and 50 training steps must give the same losses on both. Built
 * from the nn ops and modules exactly as a user would write it. */
#include <math.h>

#include "check.h"

enum { V = 12, D = 64, L = 3, H = 4, T = 8 };

typedef struct {
    tg_layernorm ln1, ln2;
    tg_linear q, k, v, o, up, down;
} block;

typedef struct {
    tg_param tok, pos;
    block b[L];
    tg_layernorm lnf;
    int64_t batch;
} model;

static tg_tensor forward(tg_graph *g, model *p, tg_tensor tokens) {
    tg_tensor tok = tg_use(g, p->tok);
    tg_tensor x = tg_add(tg_embedding(tok, tokens), tg_embedding(tg_use(g, p->pos), tg_arange(g, T, TG_I32)));
    for (int l = 0; l < L; l++) {
        block *b = &p->b[l];
        tg_tensor h = tg_layernorm_fwd(g, &b->ln1, x);
        tg_tensor q = tg_split_heads(tg_linear_fwd(g, &b->q, h), H);
        tg_tensor k = tg_split_heads(tg_linear_fwd(g, &b->k, h), H);
        tg_tensor v = tg_split_heads(tg_linear_fwd(g, &b->v, h), H);
        tg_tensor att = tg_softmax_causal(tg_mul_s(tg_matmul_t(q, k, false, true), 1.0f / sqrtf(D / H)));
        x = tg_add(x, tg_linear_fwd(g, &b->o, tg_merge_heads(tg_matmul(att, v))));
        h = tg_layernorm_fwd(g, &b->ln2, x);
        x = tg_add(x, tg_linear_fwd(g, &b->down, tg_relu(tg_linear_fwd(g, &b->up, h))));
    }
    return tg_matmul_t(tg_layernorm_fwd(g, &p->lnf, x), tok, false, true);
}

/* Mean cross-entropy over the 3 result digits: sum(ce * mask) / (B * 3). */
static tg_tensor loss_fn(tg_graph *g, void *u) {
    model *p = u;
    tg_tensor logits = tg_capture(forward(g, p, tg_input(g, "tokens")), "logits");
    tg_tensor ce = tg_cross_entropy(logits, tg_input(g, "targets"), TG_REDUCTION_NONE);
    return tg_mul_s(tg_sum(tg_mul(ce, tg_input(g, "mask")), TG_ALL, false), 1.0f / (float)(p->batch * 3));
}

static void declare(tg_model *m, model *p) {
    char n[64];
    p->tok = tg_model_param(m, "tok_emb", TG_SHAPE(V, D), tg_init_randn(0.02f));
    p->pos = tg_model_param(m, "pos_emb", TG_SHAPE(T + 1, D), tg_init_randn(0.02f));
    for (int l = 0; l < L; l++) {
        block *b = &p->b[l];
#define NAME(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        b->ln1 = tg_layernorm_new(m, NAME("ln1"), D);
        b->q = tg_linear_new(m, NAME("attn.q"), D, D, false);
        b->k = tg_linear_new(m, NAME("attn.k"), D, D, false);
        b->v = tg_linear_new(m, NAME("attn.v"), D, D, false);
        b->o = tg_linear_new(m, NAME("attn.o"), D, D, false);
        b->ln2 = tg_layernorm_new(m, NAME("ln2"), D);
        b->up = tg_linear_new(m, NAME("mlp.up"), D, 4 * D, true);
        b->down = tg_linear_new(m, NAME("mlp.down"), 4 * D, D, true);
#undef NAME
    }
    p->lnf = tg_layernorm_new(m, "lnf", D);
}

/* max |a - ref| / max |ref| */
static double rel_err(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - ref[i]));
        den = fmax(den, fabs((double)ref[i]));
    }
    return den > 0 ? num / den : num;
}

static const tg_st_tensor *need(const tg_safetensors *f, const char *name) {
    const tg_st_tensor *t = tg_safetensors_find(f, name);
    CHECK(t != NULL, "fixture has no tensor '%s'", name);
    return t;
}

/* The fixture's weights and batch in a session on backend `be` with
 * optimizer o (TG_OPT_NONE: gradients only). */
static tg_session *open_fixture(const tg_safetensors *f, tg_model *m, model *p, tg_backend be, tg_optim o) {
    int64_t B = p->batch;
    tg_input_decl in[] = {{"tokens", TG_I32, TG_SHAPE(B, T)}, {"targets", TG_I32, TG_SHAPE(B, T)},
                          {"mask", TG_F32, TG_SHAPE(T)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = p, .inputs = in, .n_inputs = 3, .optim = o,
                          .threads = 2, .backend = be};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    for (int i = 0; s && i < tg_model_param_count(m); i++) {
        const char *name = tg_model_param_name(m, i);
        const tg_st_tensor *t = need(f, name);
        if (t) CHECK_OK(tg_session_set_param(s, name, t->data, tg_shape_numel(t->shape)));
    }
    return s;
}

static tg_status fixture_step(tg_session *s, const tg_safetensors *f, int64_t B, float *loss) {
    const tg_st_tensor *tokens = need(f, "input.tokens"), *targets = need(f, "input.targets"), *mask = need(f, "input.mask");
    /* The file's dtypes: a fixture written with the wrong one fails here. */
    tg_feed feeds[] = {{"tokens", tokens->data, B * T, tokens->dtype},
                       {"targets", targets->data, B * T, targets->dtype},
                       {"mask", mask->data, T, mask->dtype}};
    return tg_session_step(s, feeds, 3, loss);
}

/* Logits, loss and every gradient of one step on `be` against PyTorch's. */
static void check_pytorch(const tg_safetensors *f, tg_backend be) {
    const char *bn = be == TG_BACKEND_CPU ? "cpu" : "webgpu";
    const tg_st_tensor *logits = need(f, "out.logits"), *loss = need(f, "out.loss");
    int64_t B = need(f, "input.tokens")->shape.d[0];
    tg_model *m = tg_model_new();
    model p;
    p.batch = B;
    declare(m, &p);
    tg_session *s = open_fixture(f, m, &p, be, (tg_optim){.kind = TG_OPT_NONE});
    if (!s) {
        tg_model_free(m);
        return;
    }
    int np = tg_model_param_count(m);
    float got_loss = NAN;
    CHECK_OK(fixture_step(s, f, B, &got_loss));
    float *buf = malloc(sizeof(float) * (size_t)(B * T * V > 4 * D * D ? B * T * V : 4 * D * D));
    CHECK_OK(tg_session_read(s, "logits", buf, B * T * V));
    double e = rel_err(buf, logits->data, B * T * V);
    CHECK(e < 1e-4, "%s: logits differ from PyTorch by %.2e (relative)", bn, e);
    float want_loss = *(const float *)loss->data;
    CHECK(fabs(got_loss - want_loss) <= 1e-4 * fabs(want_loss), "%s: loss %.8f vs PyTorch %.8f", bn, got_loss, want_loss);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < np; i++) {
        const char *name = tg_model_param_name(m, i);
        char gname[96];
        snprintf(gname, sizeof gname, "grad.%s", name);
        const tg_st_tensor *t = need(f, gname);
        int64_t n = tg_shape_numel(tg_model_param_shape(m, i));
        if (!t) continue;
        CHECK_OK(tg_session_get_grad(s, name, buf, n));
        e = rel_err(buf, t->data, n);
        CHECK(e < 1e-4, "%s: gradient of %s differs from PyTorch by %.2e (relative)", bn, name, e);
        if (e > worst) worst = e, worst_name = name;
    }
    printf("addition parity (%s): loss %.7f (PyTorch %.7f), worst gradient %s %.1e\n", bn, got_loss, want_loss,
           worst_name, worst);
    free(buf);
    tg_session_free(s);
    tg_model_free(m);
}

/* 50 training steps (AdamW, linear LR decay, clipping: the addition recipe
 * at a fifth of its peak LR) from the fixture's weights on the fixture's
 * batch, on the CPU and on WebGPU: every step's loss must agree to 1e-4
 * relative. At the recipe's 5e-3 the run memorizes this one batch of 16
 * through a chaotic stretch where the backends' 1e-7 float differences grow
 * to 5e-3 within ten steps; at 1e-3 it still drives the loss from 4.3 to
 * 6e-4 and they stay within 1e-5. */
static void check_training(const tg_safetensors *f) {
    enum { STEPS = 50 };
    float losses[2][STEPS];
    int64_t B = need(f, "input.tokens")->shape.d[0];
    tg_optim o = tg_adamw(tg_lr_linear(1e-3f, 1e-4f, STEPS), 0.01f);
    o.clip_grad_norm = 1.0f;
    for (int k = 0; k < 2; k++) {
        tg_model *m = tg_model_new();
        model p;
        p.batch = B;
        declare(m, &p);
        tg_session *s = open_fixture(f, m, &p, k ? TG_BACKEND_WEBGPU : TG_BACKEND_CPU, o);
        tg_status st = s ? TG_OK : TG_ERR_STATE;
        for (int i = 0; i < STEPS && st == TG_OK; i++) st = fixture_step(s, f, B, &losses[k][i]);
        CHECK(st == TG_OK, "training on %s: %s", k ? "webgpu" : "cpu", tg_last_error());
        tg_session_free(s);
        tg_model_free(m);
        if (st != TG_OK) return;
    }
    double worst = 0;
    int at = 0;
    for (int i = 0; i < STEPS; i++) {
        double e = fabs((double)losses[1][i] - losses[0][i]) / fabs((double)losses[0][i]);
        if (!(e <= worst)) worst = e, at = i;
    }
    CHECK(worst <= 1e-4, "step %d loss %.8g on webgpu, %.8g on cpu (%.2e relative)", at + 1, losses[1][at],
          losses[0][at], worst);
    printf("addition training, %d steps: loss %.4f -> %.4f on both backends, worst step difference %.1e\n", STEPS,
           losses[0][0], losses[0][STEPS - 1], worst);
}

int main(void) {
    tg_safetensors *f = NULL;
    const char *path = "tests/fixtures/addition_parity.safetensors";
    tg_status st = tg_safetensors_read(path, &f);
    CHECK(st == TG_OK, "read %s: %s", path, tg_last_error());
    if (st != TG_OK) return check_summary("test_addition_parity");
    if (!need(f, "input.tokens") || !need(f, "input.targets") || !need(f, "input.mask") || !need(f, "out.logits") ||
        !need(f, "out.loss"))
        return check_summary("test_addition_parity");
    check_pytorch(f, TG_BACKEND_CPU);
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) == TG_OK) {
        check_pytorch(f, TG_BACKEND_WEBGPU);
        check_training(f);
    } else {
        printf("test_addition_parity: webgpu part skipped: %s\n", tg_last_error()); /* test_webgpu fails CI for it */
    }
    tg_safetensors_free(f);
    return check_summary("test_addition_parity");
}
