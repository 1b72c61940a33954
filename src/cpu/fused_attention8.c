/* Fused causal attention for T <= 8 on 8-lane vectors, one (batch, head)
 * unit at a time, for the paths without AVX-512 (on AVX2 a vector is one
 * register). Lane i is query i, as in the AVX-512 kernels: a key's scores,
 * the softmax's max, sum and normalization and its gradient's dot product
 * are vertical operations in key order, and the products with V, K, Q and
 * dO are vectors over the head width. The float operations are those of the
 * unfused kernels in the same order (fused_attention.h): FMA chains from zero when
 * `fma` (the AVX2 GEMM kernel's), else separate multiply and add (the
 * portable one's). */
#include <math.h>
#include <string.h>

#include "fused_attention.h"
#include "isa.h"
#include "vmath.h"

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

VINLINE v8 splat8(float x) { return (v8){0} + x; }
VINLINE v8 sel8(v8i m, v8 a, v8 b) { return (v8)(((v8i)a & m) | ((v8i)b & ~m)); }
/* The first n <= 8 floats at p; the other lanes 0. */
VINLINE v8 load8(const float *p, int64_t n) {
    v8 v = {0};
    if (n == 8) memcpy(&v, p, sizeof v);
    else memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}
VINLINE void store8(float *p, v8 v, int64_t n) {
    if (n == 8) memcpy(p, &v, sizeof v);
    else memcpy(p, &v, (size_t)n * sizeof(float));
}
/* acc + x * y: rounded once (fma) or twice */
VINLINE v8 madd8(bool fma, v8 acc, v8 x, v8 y) {
    if (!fma) return acc + x * y;
    v8 r;
    for (int i = 0; i < 8; i++) r[i] = __builtin_fmaf(x[i], y[i], acc[i]);
    return r;
}
/* e^x of two vectors at once, through vmath's 16-lane exp */
VINLINE void exp2x8(v8 *a, v8 *b) {
    vf v;
    memcpy(&v, a, sizeof *a);
    memcpy((char *)&v + sizeof *a, b, sizeof *b);
    vexp_at(&v);
    memcpy(a, &v, sizeof *a);
    memcpy(b, (char *)&v + sizeof *a, sizeof *b);
}

/* x's T rows (st apart) transposed: t[d * 8 + i] = x[i * st + d], 0 for i >= T. */
VINLINE void rows8(const float *x, int64_t st, int64_t T, int64_t Dh, float *t) {
    for (int64_t d = 0; d < Dh; d++)
        for (int64_t i = 0; i < 8; i++) t[d * 8 + i] = i < T ? x[i * st + d] : 0.0f;
}

/* Columns j < T of X Y^T over the queries: c[j] lane i is the chain over d
 * of xt[d][i] * y[j][d]. The chains advance together (d outer) so their
 * latencies overlap. */
VINLINE void columns8(bool fma, const float *xt, const float *y, int64_t ys, int64_t T, int64_t Dh, v8 c[8]) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) c[j] = splat8(0.0f);
    for (int64_t d = 0; d < Dh; d++) {
        v8 x;
        memcpy(&x, xt + d * 8, sizeof x);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            if (j < T) c[j] = madd8(fma, c[j], x, splat8(y[j * ys + d]));
    }
}

/* C[r][:] = the chain over s < T of P(r, s) X[s][:], for r < T, with
 * P(r, s) = P[s * pr + r * ps]; 8 columns of C at a time. */
VINLINE void times8(bool fma, const float *P, int64_t pr, int64_t ps, const float *X, int64_t xs, int64_t T,
                    int64_t Dh, float *C, int64_t cs) {
    for (int64_t d = 0; d < Dh; d += 8) {
        int64_t n = Dh - d < 8 ? Dh - d : 8;
        v8 acc[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = splat8(0.0f);
        for (int64_t s = 0; s < T; s++) {
            v8 x = load8(X + s * xs + d, n);
            const float *p = P + s * pr;
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                if (r < T) acc[r] = madd8(fma, acc[r], splat8(p[r * ps]), x);
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            if (r < T) store8(C + r * cs + d, acc[r], n);
    }
}

/* lanes i with j <= i < T: the queries that see key j */
VINLINE v8i sees8(int j, int64_t T) {
    const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    return (lane >= j) & (lane < (int32_t)T);
}

/* ar[j * 8 + i] = softmax_causal(scale * q k^T)[i][j] (0 for j > i), then o = ar v. */
VINLINE void fwd8(bool fma, const attn_fwd *a, int64_t b, int64_t h, float *qt, float *ar) {
    const int64_t T = a->T, Dh = a->Dh;
    v8 c[8], m = splat8(-INFINITY), z = splat8(0.0f);
    rows8(attn_at(&a->q, b, h), a->q.st, T, Dh, qt);
    columns8(fma, qt, attn_at(&a->k, b, h), a->k.st, T, Dh, c);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        if (a->has_scale) c[j] = c[j] * a->scale;
        m = sel8((c[j] > m) & sees8(j, T), c[j], m); /* as the row kernel: x > m ? x : m, NaN never wins */
    }
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
        if (j >= T) break;
        c[j] = c[j] - m, c[j + 1] = c[j + 1] - m;
        exp2x8(&c[j], &c[j + 1]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        z = sel8(sees8(j, T), z + c[j], z);
    }
    v8 inv = 1.0f / z;
    float *att = a->att ? a->att + (b * a->H + h) * T * T : NULL;
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        c[j] = sel8(sees8(j, T), c[j] * inv, splat8(0.0f));
        memcpy(ar + j * 8, &c[j], sizeof c[j]);
        if (att && a->att_cols) store8(att + j * T, c[j], T);
        for (int64_t i = 0; att && !a->att_cols && i < T; i++) att[i * T + j] = c[j][i];
    }
    times8(fma, ar, 8, 1, attn_at(&a->v, b, h), a->v.st, T, Dh, attn_atw(&a->o, b, h), a->o.st);
}

VINLINE void bwd8(bool fma, const attn_bwd *a, int64_t b, int64_t h, float *ot, float *ds) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *A = a->att + (b * a->H + h) * T * T;
    v8 at[8], da[8], dot = splat8(0.0f);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) { /* the softmax's column j: lane i is A(i, j) */
        at[j] = splat8(0.0f);
        if (j < T && a->att_cols) at[j] = load8(A + j * T, T);
        for (int64_t i = 0; j < T && !a->att_cols && i < T; i++) at[j][i] = A[i * T + j];
    }
    rows8(attn_at(&a->dout, b, h), a->dout.st, T, Dh, ot);
    columns8(fma, ot, attn_at(&a->v, b, h), a->v.st, T, Dh, da);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) /* softmax_grad's sum: key order, multiply then add */
        if (j < T) dot = dot + da[j] * at[j];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        v8 g = at[j] * (da[j] - dot);
        if (a->has_scale) g = g * a->scale;
        memcpy(ds + j * 8, &g, sizeof g);
    }
    if (a->dq.p) times8(fma, ds, 8, 1, attn_at(&a->k, b, h), a->k.st, T, Dh, attn_atw(&a->dq, b, h), a->dq.st);
    if (a->dk.p) times8(fma, ds, 1, 8, attn_at(&a->q, b, h), a->q.st, T, Dh, attn_atw(&a->dk, b, h), a->dk.st);
    if (a->dv.p)
        times8(fma, A, a->att_cols ? 1 : T, a->att_cols ? T : 1, attn_at(&a->dout, b, h), a->dout.st, T, Dh,
               attn_atw(&a->dv, b, h), a->dv.st);
}

/* fma is a constant inside each copy, so its branches fold away. */
TG_MULTI(, tg_attn_fwd8, (const attn_fwd *a, int64_t b, int64_t h, float *qt, float *ar, bool fma),
         (a, b, h, qt, ar, fma)) {
    if (fma) fwd8(true, a, b, h, qt, ar);
    else fwd8(false, a, b, h, qt, ar);
}

TG_MULTI(, tg_attn_bwd8, (const attn_bwd *a, int64_t b, int64_t h, float *ot, float *ds, bool fma),
         (a, b, h, ot, ds, fma)) {
    if (fma) bwd8(true, a, b, h, ot, ds);
    else bwd8(false, a, b, h, ot, ds);
}
