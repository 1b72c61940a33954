/* Central finite-difference check of every differentiable op case on the CPU.
 *
 * loss = sum(out * R), R random: each operand element x is nudged by +-h and
 * (L(x+h) - L(x-h)) / 2h is compared with the analytic gradient.
 * Tolerances: h = 1e-2 * max(1, |x|) (float32 losses lose digits below that);
 * pass when |fd - an| <= 2e-3 + 2e-2 * max(|fd|, |an|). */
#include "check.h"
#include "harness.h"

/* Every op of ops.def must be reached by an op case (here, and on both
 * backends in test_webgpu), or be listed below with the test that checks
 * it: an op added without a test fails here. */
static const char *op_names[] = {
#define TG_OP(OP, name, ...) #name,
#include "ir/ops.def"
};
enum { N_OPS = sizeof op_names / sizeof op_names[0] };
static const struct { const char *op, *where; } tested_elsewhere[] = {
    {"param", "every case"}, {"state", "test_optim, test_saves"}, {"input", "test_nn, test_addition_parity"},
    {"adam_m", "test_optim"}, {"adam_v", "test_optim"}, {"adam_p", "test_optim"},
    {"sgd_v", "test_optim"}, {"sgd_p", "test_optim"},
    /* finite differences see through it: its zero gradient is checked by value */
    {"stop_gradient", "test_math_ops, test_webgpu"},
};
static bool covered[N_OPS];

/* Marks the ops of the compiled graph, read from its DOT (labels start with the op's name). */
static void mark_ops(tg_session *s) {
    FILE *f = tmpfile();
    if (!f) return;
    char buf[1 << 14], name[64];
    if (tg_session_dot(s, f) == TG_OK) {
        rewind(f);
        while (fgets(buf, sizeof buf, f)) {
            const char *l = strstr(buf, "[label=\"");
            if (!l || sscanf(l + 8, "%63[a-z0-9_]", name) != 1) continue;
            for (int o = 0; o < N_OPS; o++)
                if (strcmp(name, op_names[o]) == 0) covered[o] = true;
        }
    }
    fclose(f);
}

static void check_coverage(void) {
    for (int o = 0; o < N_OPS; o++) {
        bool elsewhere = false;
        for (size_t e = 0; e < sizeof tested_elsewhere / sizeof tested_elsewhere[0]; e++)
            elsewhere |= strcmp(tested_elsewhere[e].op, op_names[o]) == 0;
        CHECK(covered[o] || elsewhere, "op '%s' is in ops.def but no case of tests/op_cases.h reaches it", op_names[o]);
    }
}

#define ATOL 2e-3f
#define RTOL 2e-2f

static bool close_enough(float fd, float an) {
    float scale = fabsf(fd) > fabsf(an) ? fabsf(fd) : fabsf(an);
    return fabsf(fd - an) <= ATOL + RTOL * scale;
}

/* Returns the number of mismatching elements; analytic grads in an[i]. */
static int fd_check(case_run *r, float **an, bool report) {
    int bad = 0;
    for (int i = 0; i < r->c->n; i++) {
        for (int64_t k = 0; k < r->nx[i]; k++) {
            float x0 = r->x[i][k], h = 1e-2f * (fabsf(x0) > 1 ? fabsf(x0) : 1);
            r->x[i][k] = x0 + h;
            float lp = case_eval(r);
            r->x[i][k] = x0 - h;
            float lm = case_eval(r);
            r->x[i][k] = x0;
            float fd = (lp - lm) / (2 * h);
            if (!close_enough(fd, an[i][k])) {
                if (report && bad < 3)
                    fprintf(stderr, "  %s: d/dx%d[%lld] fd %.6f vs analytic %.6f\n", r->c->name, i, (long long)k, fd,
                            an[i][k]);
                bad++;
            }
        }
    }
    return bad;
}

int main(void) {
    int checked = 0;
    for (int ci = 0; ci < N_OP_CASES; ci++) {
        const op_case *c = &op_cases[ci];
        case_run r;
        tg_status st = case_open(&r, c, TG_BACKEND_CPU, 1000 + ci);
        CHECK(st == TG_OK, "%s: compile: %s", c->name, tg_last_error());
        if (st != TG_OK) {
            case_close(&r);
            continue;
        }
        mark_ops(r.s);
        float loss = case_eval(&r);
        CHECK(isfinite(loss), "%s: loss is %f", c->name, loss);
        if (c->no_grad) {
            float g0;
            CHECK_ERR(tg_session_get_grad(r.s, "x0", &g0, r.nx[0]), TG_ERR_STATE, "no gradient");
            case_close(&r);
            continue;
        }
        float *an[4] = {0};
        for (int i = 0; i < c->n; i++) {
            char name[16];
            snprintf(name, sizeof name, "x%d", i);
            an[i] = calloc((size_t)r.nx[i] + 1, sizeof(float));
            /* An operand that only reaches the output through a non-differentiable
             * path (where's condition) has no gradient: finite differences must
             * then be zero too. */
            tg_status gs = tg_session_get_grad(r.s, name, an[i], r.nx[i]);
            CHECK(gs == TG_OK || gs == TG_ERR_STATE, "%s: get_grad x%d: %s", c->name, i, tg_last_error());
        }
        int bad = fd_check(&r, an, true);
        CHECK(bad == 0, "%s: %d gradient elements differ from finite differences", c->name, bad);
        checked++;

        /* The check must be able to fail: a gradient that is off by 5% in one
         * element has to be caught. */
        if (ci == 0) {
            an[0][1] *= 1.05f;
            an[0][1] += an[0][1] == 0 ? 0.1f : 0;
            CHECK(fd_check(&r, an, false) > 0, "the finite-difference check did not catch a corrupted gradient");
        }
        for (int i = 0; i < c->n; i++) free(an[i]);
        case_close(&r);
    }
    CHECK(checked > 30, "only %d cases were gradient-checked", checked);
    check_coverage();
    return check_summary("test_grad");
}
