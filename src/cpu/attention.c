/* Fused causal attention (see attention.h). Work is split by (batch, head):
 * each is computed whole by one thread in a fixed order, so results do not
 * depend on the thread count. */
#include <math.h>
#include <string.h>

#include "attention.h"
#include "vmath.h"

/* The causal softmax of a row of at most 16 keys: the max of the valid
 * entries (NaN never wins), e^(x - max) lane by lane, their sum in key
 * order, then one reciprocal; entries past `valid` are 0. */
VINLINE vf softmax_causal16(vf x, int64_t valid) {
    float m = -INFINITY;
    for (int64_t a = 0; a < valid; a++) m = x[a] > m ? x[a] : m;
    vf e = vexp(x - m);
    float z = 0.0f;
    for (int64_t a = 0; a < valid; a++) z += e[a];
    float inv = 1.0f / z;
    vf y = e * inv;
    for (int64_t a = valid; a < VL; a++) y[a] = 0.0f;
    return y;
}

/* The same for a row of any length, VL keys at a time (the softmax_causal
 * kernel's row). */
TG_CLONES void attn_softmax_causal_row(const float *x, float *y, int64_t valid, int64_t Tk) {
    float m = -INFINITY;
    for (int64_t a = 0; a < valid; a++) m = x[a] > m ? x[a] : m;
    for (int64_t a = 0; a < valid; a += VL) {
        int64_t n = valid - a < VL ? valid - a : VL;
        vstore_n(y + a, vexp(vload_n(x + a, n) - m), n);
    }
    float z = 0.0f;
    for (int64_t a = 0; a < valid; a++) z += y[a];
    float inv = 1.0f / z;
    for (int64_t a = 0; a < valid; a++) y[a] *= inv;
    for (int64_t a = valid; a < Tk; a++) y[a] = 0.0f;
}

static const float *at(const attn_operand *o, int64_t b, int64_t h) { return o->p + b * o->sb + h * o->sh; }
static float *atw(const attn_operand *o, int64_t b, int64_t h) { return o->p ? o->p + b * o->sb + h * o->sh : NULL; }

/* Keys' rows transposed: t[d * VL + j] = x[j * st + d]; lanes j >= T stay
 * as the caller zeroed them. */
static void transpose_keys(const float *x, int64_t st, int64_t T, int64_t Dh, float *t) {
    for (int64_t j = 0; j < T; j++)
        for (int64_t d = 0; d < Dh; d++) t[d * VL + j] = x[j * st + d];
}

/* ---- portable: separate multiply and add, as the portable GEMM kernel ---- */

static void fwd_generic(const attn_fwd *a, int64_t b, int64_t h, float *kt, float *ar) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *Q = at(&a->q, b, h), *K = at(&a->k, b, h), *Vv = at(&a->v, b, h);
    float *O = atw(&a->o, b, h);
    transpose_keys(K, a->k.st, T, Dh, kt);
    for (int64_t i = 0; i < T; i++) {
        vf s = vsplat(0.0f);
        for (int64_t d = 0; d < Dh; d++) s = s + Q[i * a->q.st + d] * vload(kt + d * VL);
        if (a->has_scale) s = s * a->scale;
        vf y = softmax_causal16(s, i + 1 < T ? i + 1 : T);
        vstore(ar + i * VL, y);
        if (a->att) memcpy(a->att + ((b * a->H + h) * T + i) * T, ar + i * VL, (size_t)T * sizeof(float));
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t d = 0; d < Dh; d++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < T; j++) acc = acc + ar[i * VL + j] * Vv[j * a->v.st + d];
            O[i * a->o.st + d] = acc;
        }
}

static void bwd_generic(const attn_bwd *a, int64_t b, int64_t h, float *vt, float *ds) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *A = a->att + (b * a->H + h) * T * T;
    const float *dO = at(&a->dout, b, h), *Q = at(&a->q, b, h), *K = at(&a->k, b, h), *Vv = at(&a->v, b, h);
    float *dQ = atw(&a->dq, b, h), *dK = atw(&a->dk, b, h), *dV = atw(&a->dv, b, h);
    transpose_keys(Vv, a->v.st, T, Dh, vt);
    for (int64_t i = 0; i < T; i++) {
        vf da = vsplat(0.0f);
        for (int64_t d = 0; d < Dh; d++) da = da + dO[i * a->dout.st + d] * vload(vt + d * VL);
        float dot = 0.0f;
        for (int64_t j = 0; j < T; j++) dot += da[j] * A[i * T + j];
        for (int64_t j = 0; j < T; j++) {
            float g = A[i * T + j] * (da[j] - dot);
            ds[i * VL + j] = a->has_scale ? g * a->scale : g;
        }
    }
    for (int64_t d = 0; d < Dh; d++) {
        for (int64_t i = 0; dQ && i < T; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < T; j++) acc = acc + ds[i * VL + j] * K[j * a->k.st + d];
            dQ[i * a->dq.st + d] = acc;
        }
        for (int64_t j = 0; j < T; j++) {
            float ak = 0.0f, av = 0.0f;
            for (int64_t i = 0; i < T; i++) {
                ak = ak + ds[i * VL + j] * Q[i * a->q.st + d];
                av = av + A[i * T + j] * dO[i * a->dout.st + d];
            }
            if (dK) dK[j * a->dk.st + d] = ak;
            if (dV) dV[j * a->dv.st + d] = av;
        }
    }
}

/* ---- AVX-512: FMA chains, as the AVX-512 GEMM kernel ---- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_512 1
#define AVX512 __attribute__((target("avx512f,fma")))

static inline __mmask16 lanes(int64_t n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

/* C rows [T, Dh] (st apart) = P [T, VL-strided] @ X [T rows, xs apart]: for
 * each row i, an FMA chain over j from zero. */
AVX512 static void rows_times(const float *P, const float *X, int64_t xs, int64_t T, int64_t Dh, float *C,
                              int64_t cs) {
    for (int64_t d = 0; d < Dh; d += 16) {
        __mmask16 m = lanes(Dh - d);
        __m512 x[ATTN_MAX_T];
        for (int64_t j = 0; j < T; j++) x[j] = _mm512_maskz_loadu_ps(m, X + j * xs + d);
        for (int64_t i = 0; i < T; i++) {
            __m512 acc = _mm512_setzero_ps();
            for (int64_t j = 0; j < T; j++) acc = _mm512_fmadd_ps(_mm512_set1_ps(P[i * VL + j]), x[j], acc);
            _mm512_mask_storeu_ps(C + i * cs + d, m, acc);
        }
    }
}

/* C rows [T, Dh] = P^T @ X: row j of C chains over i. */
AVX512 static void rows_times_t(const float *P, int64_t ps, const float *X, int64_t xs, int64_t T, int64_t Dh,
                                float *C, int64_t cs) {
    for (int64_t d = 0; d < Dh; d += 16) {
        __mmask16 m = lanes(Dh - d);
        __m512 x[ATTN_MAX_T];
        for (int64_t i = 0; i < T; i++) x[i] = _mm512_maskz_loadu_ps(m, X + i * xs + d);
        for (int64_t j = 0; j < T; j++) {
            __m512 acc = _mm512_setzero_ps();
            for (int64_t i = 0; i < T; i++) acc = _mm512_fmadd_ps(_mm512_set1_ps(P[i * ps + j]), x[i], acc);
            _mm512_mask_storeu_ps(C + j * cs + d, m, acc);
        }
    }
}

/* Row i of X K^T (K transposed in kt): lanes j, an FMA chain over d. */
AVX512 static inline __m512 row_dot_keys(const float *x, const float *kt, int64_t Dh) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d = 0; d < Dh; d++) acc = _mm512_fmadd_ps(_mm512_set1_ps(x[d]), _mm512_loadu_ps(kt + d * VL), acc);
    return acc;
}

AVX512 static void fwd_512(const attn_fwd *a, int64_t b, int64_t h, float *kt, float *ar) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *Q = at(&a->q, b, h), *K = at(&a->k, b, h), *Vv = at(&a->v, b, h);
    transpose_keys(K, a->k.st, T, Dh, kt);
    for (int64_t i = 0; i < T; i++) {
        vf s = (vf)row_dot_keys(Q + i * a->q.st, kt, Dh);
        if (a->has_scale) s = s * a->scale;
        vf y = softmax_causal16(s, i + 1 < T ? i + 1 : T);
        _mm512_storeu_ps(ar + i * VL, (__m512)y);
        if (a->att) _mm512_mask_storeu_ps(a->att + ((b * a->H + h) * T + i) * T, lanes(T), (__m512)y);
    }
    rows_times(ar, Vv, a->v.st, T, Dh, atw(&a->o, b, h), a->o.st);
}

AVX512 static void bwd_512(const attn_bwd *a, int64_t b, int64_t h, float *vt, float *ds) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *A = a->att + (b * a->H + h) * T * T;
    const float *dO = at(&a->dout, b, h), *Q = at(&a->q, b, h), *K = at(&a->k, b, h), *Vv = at(&a->v, b, h);
    transpose_keys(Vv, a->v.st, T, Dh, vt);
    const __m512 scale = _mm512_set1_ps(a->scale);
    for (int64_t i = 0; i < T; i++) {
        vf da = (vf)row_dot_keys(dO + i * a->dout.st, vt, Dh);
        float dot = 0.0f; /* softmax_grad's sum: in key order, multiply then add */
        for (int64_t j = 0; j < T; j++) dot += da[j] * A[i * T + j];
        __m512 ar = _mm512_maskz_loadu_ps(lanes(T), A + i * T);
        __m512 g = _mm512_mul_ps(ar, _mm512_sub_ps((__m512)da, _mm512_set1_ps(dot)));
        if (a->has_scale) g = _mm512_mul_ps(g, scale);
        _mm512_storeu_ps(ds + i * VL, g);
    }
    if (a->dq.p) rows_times(ds, K, a->k.st, T, Dh, atw(&a->dq, b, h), a->dq.st);
    if (a->dk.p) rows_times_t(ds, VL, Q, a->q.st, T, Dh, atw(&a->dk, b, h), a->dk.st);
    if (a->dv.p) rows_times_t(A, T, dO, a->dout.st, T, Dh, atw(&a->dv, b, h), a->dv.st);
}
#endif

/* ---- drivers ---- */

typedef struct {
    const attn_fwd *f;
    const attn_bwd *bw;
    bool fma;
} attn_job;

static void fwd_range(void *arg, int64_t lo, int64_t hi) {
    const attn_job *j = arg;
    float kt[ATTN_MAX_DH * VL] __attribute__((aligned(64)));
    float ar[ATTN_MAX_T * VL] __attribute__((aligned(64)));
    memset(kt, 0, sizeof(float) * (size_t)(j->f->Dh * VL));
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / j->f->H, h = u % j->f->H;
#ifdef HAVE_512
        if (j->fma) {
            fwd_512(j->f, b, h, kt, ar);
            continue;
        }
#endif
        fwd_generic(j->f, b, h, kt, ar);
    }
}

static void bwd_range(void *arg, int64_t lo, int64_t hi) {
    const attn_job *j = arg;
    float vt[ATTN_MAX_DH * VL] __attribute__((aligned(64)));
    float ds[ATTN_MAX_T * VL] __attribute__((aligned(64)));
    memset(vt, 0, sizeof(float) * (size_t)(j->bw->Dh * VL));
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / j->bw->H, h = u % j->bw->H;
#ifdef HAVE_512
        if (j->fma) {
            bwd_512(j->bw, b, h, vt, ds);
            continue;
        }
#endif
        bwd_generic(j->bw, b, h, vt, ds);
    }
}

/* (batch, head) pairs per task: a pair is about T * T * Dh * 4 flops. */
static int64_t grain(int64_t T, int64_t Dh) {
    int64_t g = 65536 / (T * T * Dh * 4 + 1);
    return g > 0 ? g : 1;
}

void cpu_attention_fwd(cpu_ctx *c, const attn_fwd *a) {
    attn_job j = {a, NULL, tg_gemm_uses_fma()};
    cpu_parallel(c, a->B * a->H, grain(a->T, a->Dh), fwd_range, &j);
}

void cpu_attention_bwd(cpu_ctx *c, const attn_bwd *a) {
    attn_job j = {NULL, a, tg_gemm_uses_fma()};
    cpu_parallel(c, a->B * a->H, grain(a->T, a->Dh) / 2 + 1, bwd_range, &j);
}
