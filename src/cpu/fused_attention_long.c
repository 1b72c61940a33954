/* Fused causal attention past ATTN_MAX_T keys (see fused_attention.h).
 * Queries go in blocks; a block's scores are a scratch [rows, keys] made by
 * tg_gemm_serial, scaled, and turned into the softmax by the softmax_causal
 * kernel's own row, so every value rounds as the separate kernels round it.
 * Keys past the block's last query are left out: the separate kernels'
 * softmax is 0 there, and a chain of products only adds those zeros.
 *
 * Forward: tasks of (batch, head, FWD_ROWS queries). Backward: a task per
 * (batch, head), its query blocks in order, each computing its softmax
 * again from q and k; dK and dV sum over the queries, so its blocks are the
 * GEMM's K blocks (TG_GEMM_KC queries), each block's products added as the
 * separate product adds its K blocks. */
#include <math.h>
#include <string.h>

#include "fused_attention.h"
#include "kernels.h"

#define FWD_ROWS 64         /* queries a forward task takes: enough tasks for the threads at batch 1 */
#define BWD_ROWS TG_GEMM_KC /* queries a backward block takes (see above) */

typedef struct {
    const attn_fwd *f;
    const attn_bwd *b;
    int64_t blocks;     /* forward: query blocks per (batch, head) */
    size_t gemm_floats; /* each thread's scratch: the GEMM's buffer, then the block's rows */
    size_t rows_floats;
    float *scratch;     /* the threads' scratch, one after the other; NULL: each task allocates its own */
} long_job;

static size_t up16(size_t n) { return (n + 15) / 16 * 16; }

/* C [m, n] (+)= op(A) [m, k] @ op(B) [k, n] on this thread, with buf of gemm_floats. */
static void product(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, bool ta, const float *B, int64_t ldb,
                    bool tb, float *C, int64_t ldc, bool acc, float *buf) {
    tg_gemm_args g = {1, m, n, k, A, B, C, lda, ldb, ldc, 0, 0, 0, ta, tb, NULL, acc};
    tg_gemm_serial(&g, buf);
}

/* The GEMM buffer the products below need at most, for T keys and blocks of `rows` queries. */
static size_t gemm_need(int64_t T, int64_t Dh, int64_t rows) {
    const tg_gemm_args shapes[] = {
        {1, rows, T, Dh, NULL, NULL, NULL, Dh, Dh, T, 0, 0, 0, false, true, NULL, false},  /* scores, dA */
        {1, rows, Dh, T, NULL, NULL, NULL, T, Dh, Dh, 0, 0, 0, false, false, NULL, false}, /* o, dq */
        {1, T, Dh, rows, NULL, NULL, NULL, T, Dh, Dh, 0, 0, 0, true, false, NULL, true},   /* dk, dv */
    };
    size_t need = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t f = tg_gemm_serial_floats(&shapes[i]);
        need = f > need ? f : need;
    }
    return up16(need);
}

/* Rows r0..r1-1 of the softmax of (b, h) into P [r1 - r0, r1]: q k^T, times
 * the scale, then the causal softmax of each row. */
static void softmax_block(const float *Q, int64_t qs, const float *K, int64_t ks, int64_t Dh, int64_t r0, int64_t r1,
                          bool has_scale, float scale, float *P, float *buf) {
    product(r1 - r0, r1, Dh, Q + r0 * qs, qs, false, K, ks, true, P, r1, false, buf);
    for (int64_t i = r0; i < r1; i++) {
        float *row = P + (i - r0) * r1;
        if (has_scale)
            for (int64_t j = 0; j <= i; j++) row[j] *= scale;
        tg_attn_softmax_causal_row(row, row, i + 1, r1);
    }
}

/* Thread's scratch, or one of the task's own (freed by release); NULL when none can be had. */
static float *scratch(const long_job *j, int thread) {
    if (j->scratch) return j->scratch + (size_t)thread * (j->gemm_floats + j->rows_floats);
    return tg_aalloc(sizeof(float) * (j->gemm_floats + j->rows_floats));
}
static void release(const long_job *j, float *buf) {
    if (!j->scratch) tg_afree(buf);
}

/* Out of memory: NaN in the outputs, so the step's loss (or TG_CHECK_NUMERICS) shows it. */
static void poison(float *p, int64_t st, int64_t T, int64_t Dh) {
    for (int64_t t = 0; p && t < T; t++)
        for (int64_t d = 0; d < Dh; d++) p[t * st + d] = NAN;
}

/* o [r0:r1] = softmax(q k^T * scale) v for one (batch, head, block of queries) */
static void fwd_task(void *arg, int task, int thread) {
    const long_job *j = arg;
    const attn_fwd *a = j->f;
    const int64_t T = a->T, Dh = a->Dh, bh = task / j->blocks, b = bh / a->H, h = bh % a->H;
    const int64_t r0 = task % j->blocks * FWD_ROWS, r1 = r0 + FWD_ROWS < T ? r0 + FWD_ROWS : T;
    float *buf = scratch(j, thread), *P = buf + j->gemm_floats;
    if (!buf) {
        poison(attn_atw(&a->o, b, h) + r0 * a->o.st, a->o.st, r1 - r0, Dh);
        return;
    }
    softmax_block(attn_at(&a->q, b, h), a->q.st, attn_at(&a->k, b, h), a->k.st, Dh, r0, r1, a->has_scale, a->scale, P,
                  buf);
    if (a->att) { /* kept: every row whole, 0 past its query */
        float *att = a->att + bh * T * T;
        for (int64_t i = r0; i < r1; i++)
            for (int64_t k = 0; k < T; k++) {
                float v = k < r1 ? P[(i - r0) * r1 + k] : 0.0f;
                att[a->att_cols ? k * T + i : i * T + k] = v;
            }
    }
    product(r1 - r0, Dh, r1, P, r1, false, attn_at(&a->v, b, h), a->v.st, false, attn_atw(&a->o, b, h) + r0 * a->o.st,
            a->o.st, false, buf);
    release(j, buf);
}

/* One (batch, head): for each block of queries in order, its softmax P
 * again, dA = dout v^T, dS = softmax_grad(P, dA) * scale, then dq of the
 * block, and the block's terms of dk (dS^T q) and dv (P^T dout). */
static void bwd_task(void *arg, int task, int thread) {
    const long_job *j = arg;
    const attn_bwd *a = j->b;
    const int64_t T = a->T, Dh = a->Dh, b = task / a->H, h = task % a->H;
    const float *Q = attn_at(&a->q, b, h), *K = attn_at(&a->k, b, h), *Vv = attn_at(&a->v, b, h),
                *dO = attn_at(&a->dout, b, h);
    float *dQ = attn_atw(&a->dq, b, h), *dK = attn_atw(&a->dk, b, h), *dV = attn_atw(&a->dv, b, h);
    float *buf = scratch(j, thread);
    if (!buf) {
        poison(dQ, a->dq.st, T, Dh), poison(dK, a->dk.st, T, Dh), poison(dV, a->dv.st, T, Dh);
        return;
    }
    float *P = buf + j->gemm_floats, *dS = P + up16((size_t)(BWD_ROWS * T));
    for (int64_t r0 = 0; r0 < T; r0 += BWD_ROWS) {
        const int64_t r1 = r0 + BWD_ROWS < T ? r0 + BWD_ROWS : T, n = r1 - r0;
        softmax_block(Q, a->q.st, K, a->k.st, Dh, r0, r1, a->has_fwd_scale, a->fwd_scale, P, buf);
        product(n, r1, Dh, dO + r0 * a->dout.st, a->dout.st, false, Vv, a->v.st, true, dS, r1, false, buf);
        for (int64_t i = 0; i < n; i++) {
            float *row = dS + i * r1;
            tg_cpu_softmax_grad_row(P + i * r1, row, row, r1);
            if (a->has_scale)
                for (int64_t k = 0; k < r1; k++) row[k] *= a->scale;
        }
        if (dQ) product(n, Dh, r1, dS, r1, false, K, a->k.st, false, dQ + r0 * a->dq.st, a->dq.st, false, buf);
        /* keys r0..r1-1 meet their first queries in this block: their sums start at 0 */
        for (int64_t k = r0; r0 > 0 && k < r1; k++) {
            if (dK) memset(dK + k * a->dk.st, 0, sizeof(float) * (size_t)Dh);
            if (dV) memset(dV + k * a->dv.st, 0, sizeof(float) * (size_t)Dh);
        }
        if (dK) product(r1, Dh, n, dS, r1, true, Q + r0 * a->q.st, a->q.st, false, dK, a->dk.st, r0 > 0, buf);
        if (dV) product(r1, Dh, n, P, r1, true, dO + r0 * a->dout.st, a->dout.st, false, dV, a->dv.st, r0 > 0, buf);
    }
    release(j, buf);
}

/* The threads' scratch from the engine's growable buffer (each task's own if it cannot grow). */
static void run(cpu_ctx *c, long_job *j, int tasks, tg_task_fn fn) {
    int th = tg_pool_threads(c->pool);
    j->scratch = tg_cpu_scratch(c, sizeof(float) * (size_t)th * (j->gemm_floats + j->rows_floats));
    tg_pool_run(c->pool, tasks, fn, j);
}

void tg_attn_fwd_long(cpu_ctx *c, const attn_fwd *a) {
    long_job j = {a, NULL, (a->T + FWD_ROWS - 1) / FWD_ROWS, gemm_need(a->T, a->Dh, FWD_ROWS),
                  up16((size_t)(FWD_ROWS * a->T)), NULL};
    run(c, &j, (int)(a->B * a->H * j.blocks), fwd_task);
}

void tg_attn_bwd_long(cpu_ctx *c, const attn_bwd *a) {
    long_job j = {NULL, a, 0, gemm_need(a->T, a->Dh, BWD_ROWS), 2 * up16((size_t)(BWD_ROWS * a->T)), NULL};
    run(c, &j, (int)(a->B * a->H), bwd_task);
}
