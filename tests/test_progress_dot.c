/* The progress line helper and the DOT writer: which steps a non-terminal
 * run prints, what a line holds, and the DOT of a small traced graph
 * (leaves, a capture, forward ops) and of its compiled session (backward and
 * optimizer nodes, fused kernels as clusters); NULL arguments are errors. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"

/* Everything f holds, NUL-terminated, into buf. */
static const char *slurp(FILE *f, char *buf, size_t n) {
    rewind(f);
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = 0;
    return buf;
}

static void test_progress(void) {
    static char buf[1 << 14];
    FILE *f = tmpfile();
    tg_progress p = {.total = 100, .batch = 32, .file = f};
    tg_progress_start(&p);
    CHECK(p.every == 10, "every defaults to total / 10, got %lld", (long long)p.every);
    int due = 0;
    for (int64_t s = 1; s <= 100; s++)
        if (tg_progress_due(&p, s)) {
            due++;
            tg_progress_update(&p, s, 0.5f, s == 100 ? "val 0.2500" : NULL);
        }
    tg_progress_end(&p);
    CHECK(due == 11, "steps 1, 10, ..., 100 are due; got %d", due);
    slurp(f, buf, sizeof buf);
    CHECK(strstr(buf, "step 1/100  loss 0.5  ") == buf, "first line: %.60s", buf);
    CHECK(strstr(buf, "ex/s  ETA ") != NULL, "examples/s and ETA: %.80s", buf);
    CHECK(strstr(buf, "step 100/100  loss 0.5") && strstr(buf, "  val 0.2500\n"), "last line with its extra");
    int lines = 0;
    for (const char *c = buf; *c; c++) lines += *c == '\n';
    CHECK(lines == 11 && !strchr(buf, '\r'), "one line per due step, no carriage returns: %d lines", lines);
    fclose(f);
    /* Unknown total and no batch: steps/s, no ETA; NULL is ignored. */
    f = tmpfile();
    tg_progress q = {.file = f, .every = 5};
    tg_progress_start(&q);
    CHECK(tg_progress_due(&q, 1) && !tg_progress_due(&q, 2) && tg_progress_due(&q, 5), "every 5 steps and the first");
    tg_progress_update(&q, 5, 1.0f, NULL);
    slurp(f, buf, sizeof buf);
    CHECK(strstr(buf, "step 5  loss 1  ") == buf && strstr(buf, "steps/s") && !strstr(buf, "ETA"), "%s", buf);
    fclose(f);
    /* A resumed run: 10 steps in about 0.2 s after 240 done before it. The
     * rate is this run's (about 50 steps/s, 50000 ex/s), the ETA the 150
     * steps left at that rate, and the run's first step is due. */
    f = tmpfile();
    tg_progress r = {.total = 400, .batch = 1000, .file = f, .start = 240};
    tg_progress_start(&r);
    CHECK(tg_progress_due(&r, 241), "a resumed run's first step is due");
    nanosleep(&(struct timespec){0, 200000000}, NULL);
    tg_progress_update(&r, 250, 1.0f, NULL);
    slurp(f, buf, sizeof buf);
    double rate = 0;
    int eta_m = -1, eta_s = -1;
    const char *at = strstr(buf, "ex/s");
    CHECK(sscanf(buf, "step 250/400  loss 1  %lf ex/s  ETA %d:%d", &rate, &eta_m, &eta_s) == 3 && at,
          "resumed line: %s", buf);
    CHECK(rate > 10000 && rate < 60000 && eta_m == 0 && eta_s >= 2 && eta_s <= 15,
          "a resumed run counts its own steps: %.0f ex/s, ETA %d:%02d (%s)", rate, eta_m, eta_s, buf);
    fclose(f);
    tg_progress_start(NULL), tg_progress_update(NULL, 1, 0, NULL), tg_progress_end(NULL);
    CHECK(!tg_progress_due(NULL, 1), "NULL is never due");
}

typedef struct {
    tg_linear l1, l2;
} net;

static tg_tensor loss_fn(tg_graph *g, void *user) { /* x [8,4] -> mse against y [8,2] */
    net *n = user;
    tg_tensor h = tg_capture(tg_relu(tg_linear_fwd(g, &n->l1, tg_input(g, "x"))), "hidden \"h\"");
    return tg_mse(tg_linear_fwd(g, &n->l2, h), tg_input(g, "y"));
}

static void test_dot(void) {
    static char buf[1 << 16];
    tg_model *m = tg_model_new();
    net n = {tg_linear_new(m, "l1", 4, 16, true), tg_linear_new(m, "l2", 16, 2, true)};
    tg_graph *g = tg_graph_new(m);
    tg_input_new(g, "x", TG_F32, TG_SHAPE(8, 4));
    tg_input_new(g, "y", TG_F32, TG_SHAPE(8, 2));
    loss_fn(g, &n);
    FILE *f = tmpfile();
    CHECK_OK(tg_graph_dot(g, f));
    slurp(f, buf, sizeof buf);
    CHECK(strncmp(buf, "digraph tensorgrad {", 20) == 0 && strstr(buf, "}\n"), "a digraph");
    CHECK(strstr(buf, "param l1.W\\n[4,16] f32\", shape=ellipse, fillcolor=gold"), "params as gold ellipses");
    CHECK(strstr(buf, "input x\\n[8,4] f32\", shape=ellipse, fillcolor=lightblue"), "inputs as blue ellipses");
    CHECK(strstr(buf, "matmul\\n[8,16] f32\", fillcolor=white"), "forward ops with their shapes");
    CHECK(strstr(buf, "peripheries=2, xlabel=\"capture hidden \\\"h\\\"\""), "the capture, its name escaped");
    CHECK(strstr(buf, "forward (") && strstr(buf, "backward (0)") && strstr(buf, "optimizer (0)"),
          "the traced graph has no backward or optimizer nodes");
    CHECK(!strstr(buf, "cluster_fused"), "no clusters without a backend");
    fclose(f);
    tg_graph_free(g);

    tg_input_decl in[] = {{"x", TG_F32, TG_SHAPE(8, 4)}, {"y", TG_F32, TG_SHAPE(8, 2)}};
    tg_train_spec spec = {.model = m, .loss = loss_fn, .user = &n, .inputs = in, .n_inputs = 2,
                          .optim = tg_adam(tg_lr_constant(1e-3f))};
    tg_session *s = NULL;
    CHECK_OK(tg_session_new(&spec, &s));
    f = tmpfile();
    CHECK_OK(tg_session_dot(s, f));
    slurp(f, buf, sizeof buf);
    CHECK(strstr(buf, "fillcolor=mistyrose") && strstr(buf, "fillcolor=honeydew") && !strstr(buf, "backward (0)") &&
          !strstr(buf, "optimizer (0)"), "the compiled graph has backward and optimizer nodes");
    CHECK(strstr(buf, "subgraph cluster_fused0 {"), "the CPU backend's fused kernels as clusters");
    fclose(f);
    CHECK_ERR(tg_graph_dot(NULL, stdout), TG_ERR_ARG, "tg_graph_dot");
    CHECK_ERR(tg_graph_dot(tg_session_graph(s), NULL), TG_ERR_ARG, "tg_graph_dot");
    CHECK_ERR(tg_session_dot(NULL, stdout), TG_ERR_ARG, "tg_session_dot");
    tg_session_free(s);
    tg_model_free(m);
}

int main(void) {
    CHECK(strcmp(tg_version(), TG_VERSION_STRING) == 0, "tg_version %s, header %s", tg_version(), TG_VERSION_STRING);
    test_progress();
    test_dot();
    return check_summary("test_progress_dot");
}
