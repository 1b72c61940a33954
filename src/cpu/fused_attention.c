/* Fused causal attention (see fused_attention.h). Work is split by (batch, head):
 * each is computed whole by one thread in a fixed order, so results do not
 * depend on the thread count. */
#include <math.h>
#include <string.h>

#include "fused_attention.h"
#include "isa.h"
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
 * kernel's row): the max and the sum in VL lanes, then the lanes in order.
 * Up to VL keys that is softmax_causal16's sum, key by key (the lanes past
 * `valid` add 0). */
TG_MULTI(, tg_attn_softmax_causal_row, (const float *x, float *y, int64_t valid, int64_t Tk), (x, y, valid, Tk)) {
    vf vm = vsplat(-INFINITY);
    for (int64_t a = 0; a < valid; a += VL) {
        int64_t n = valid - a < VL ? valid - a : VL;
        vf v = vload_n(x + a, n);
        for (int64_t k = n; k < VL; k++) v[k] = -INFINITY;
        vm = vsel(v > vm, v, vm); /* NaN never wins, as in the max below */
    }
    float m = -INFINITY;
    for (int k = 0; k < VL; k++) m = vm[k] > m ? vm[k] : m;
    vf acc = vsplat(0.0f);
    for (int64_t a = 0; a < valid; a += VL) {
        int64_t n = valid - a < VL ? valid - a : VL;
        vf e = vexp(vload_n(x + a, n) - m);
        for (int64_t k = n; k < VL; k++) e[k] = 0.0f;
        vstore_n(y + a, e, n);
        acc += e;
    }
    float z = 0.0f;
    for (int k = 0; k < VL; k++) z += acc[k];
    float inv = 1.0f / z;
    for (int64_t a = 0; a < valid; a += VL) {
        int64_t n = valid - a < VL ? valid - a : VL;
        vstore_n(y + a, vload_n(y + a, n) * inv, n);
    }
    for (int64_t a = valid; a < Tk; a++) y[a] = 0.0f;
}

/* Keys' rows transposed: t[d * VL + j] = x[j * st + d]; lanes j >= T stay
 * as the caller zeroed them. */
static void transpose_keys(const float *x, int64_t st, int64_t T, int64_t Dh, float *t) {
    for (int64_t j = 0; j < T; j++)
        for (int64_t d = 0; d < Dh; d++) t[d * VL + j] = x[j * st + d];
}

/* ---- vectors over the keys: separate multiply and add as the portable GEMM
 * kernel, or (fma) FMA chains as the AVX2 one ---- */

/* acc + x * y, fused when fma */
#define MADD(fma, acc, x, y) ((fma) ? __builtin_fmaf(x, y, acc) : (acc) + (x) * (y))

TG_MULTI(static, fwd_generic, (const attn_fwd *a, int64_t b, int64_t h, float *kt, float *ar, bool fma),
         (a, b, h, kt, ar, fma)) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *Q = attn_at(&a->q, b, h), *K = attn_at(&a->k, b, h), *Vv = attn_at(&a->v, b, h);
    float *O = attn_atw(&a->o, b, h);
    transpose_keys(K, a->k.st, T, Dh, kt);
    for (int64_t i = 0; i < T; i++) {
        vf s = vsplat(0.0f);
        for (int64_t d = 0; d < Dh; d++)
            s = fma ? vfma(vsplat(Q[i * a->q.st + d]), vload(kt + d * VL), s)
                    : s + Q[i * a->q.st + d] * vload(kt + d * VL);
        if (a->has_scale) s = s * a->scale;
        vf y = softmax_causal16(s, i + 1 < T ? i + 1 : T);
        vstore(ar + i * VL, y);
        float *att = a->att ? a->att + (b * a->H + h) * T * T : NULL;
        for (int64_t j = 0; att && j < T; j++) att[a->att_cols ? j * T + i : i * T + j] = ar[i * VL + j];
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t d = 0; d < Dh; d++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < T; j++) acc = MADD(fma, acc, ar[i * VL + j], Vv[j * a->v.st + d]);
            O[i * a->o.st + d] = acc;
        }
}

TG_MULTI(static, bwd_generic, (const attn_bwd *a, int64_t b, int64_t h, float *vt, float *ds, bool fma),
         (a, b, h, vt, ds, fma)) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *A = a->att + (b * a->H + h) * T * T;
    const int64_t ai = a->att_cols ? 1 : T, aj = a->att_cols ? T : 1; /* A(i, j) = A[i * ai + j * aj] */
    const float *dO = attn_at(&a->dout, b, h), *Q = attn_at(&a->q, b, h), *K = attn_at(&a->k, b, h),
                *Vv = attn_at(&a->v, b, h);
    float *dQ = attn_atw(&a->dq, b, h), *dK = attn_atw(&a->dk, b, h), *dV = attn_atw(&a->dv, b, h);
    transpose_keys(Vv, a->v.st, T, Dh, vt);
    for (int64_t i = 0; i < T; i++) {
        vf da = vsplat(0.0f);
        for (int64_t d = 0; d < Dh; d++)
            da = fma ? vfma(vsplat(dO[i * a->dout.st + d]), vload(vt + d * VL), da)
                     : da + dO[i * a->dout.st + d] * vload(vt + d * VL);
        float dot = 0.0f;
        for (int64_t j = 0; j < T; j++) dot += da[j] * A[i * ai + j * aj];
        for (int64_t j = 0; j < T; j++) {
            float g = A[i * ai + j * aj] * (da[j] - dot);
            ds[i * VL + j] = a->has_scale ? g * a->scale : g;
        }
    }
    for (int64_t d = 0; d < Dh; d++) {
        for (int64_t i = 0; dQ && i < T; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < T; j++) acc = MADD(fma, acc, ds[i * VL + j], K[j * a->k.st + d]);
            dQ[i * a->dq.st + d] = acc;
        }
        for (int64_t j = 0; j < T; j++) {
            float ak = 0.0f, av = 0.0f;
            for (int64_t i = 0; i < T; i++) {
                ak = MADD(fma, ak, ds[i * VL + j], Q[i * a->q.st + d]);
                av = MADD(fma, av, A[i * ai + j * aj], dO[i * a->dout.st + d]);
            }
            if (dK) dK[j * a->dk.st + d] = ak;
            if (dV) dV[j * a->dv.st + d] = av;
        }
    }
}

/* ---- AVX-512: FMA chains, as the AVX-512 GEMM kernel ----
 * Vectors run down the queries (lane i = query i): a key's scores, the
 * softmax's max, sum and normalization, and its gradient's dot product are
 * then plain vertical operations in key order, as the row kernels do them
 * one query at a time. */

#if defined(__x86_64__) && defined(__GNUC__)
#include "avx512.h"
#define HAVE_512 1

static inline __mmask16 lanes(int64_t n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }


/* x's T rows (st apart) transposed into t[d * 16 + i], d < Dh; lanes i >= T 0. */
AVX512_INLINE void transpose_rows(const float *x, int64_t st, int64_t T, int64_t Dh, float *t) {
    for (int64_t d0 = 0; d0 < Dh; d0 += 16) {
        __mmask16 m = lanes(Dh - d0);
        __m512 v[16];
        for (int i = 0; i < 16; i++) v[i] = i < T ? _mm512_maskz_loadu_ps(m, x + i * st + d0) : _mm512_setzero_ps();
        transpose16(v);
        for (int64_t d = 0; d < 16 && d0 + d < Dh; d++) _mm512_store_ps(t + (d0 + d) * 16, v[d]);
    }
}

/* Columns j < T of X Y^T over the queries: c[j] lanes i, each an FMA chain
 * over d of xt[d][i] * y[j][d]. The T chains advance together (d outer), so
 * their FMA latencies overlap; the loops over 16 unroll and keep them in
 * registers. */
AVX512_INLINE void columns(const float *xt, const float *y, int64_t ys, int64_t T, int64_t Dh, __m512 c[16]) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) c[j] = _mm512_setzero_ps();
    for (int64_t d = 0; d < Dh; d++) {
        __m512 x = _mm512_load_ps(xt + d * 16);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            if (j < T) c[j] = _mm512_fmadd_ps(x, _mm512_set1_ps(y[j * ys + d]), c[j]);
    }
}

/* C[r][:] = sum over s of P(r, s) X[s][:], an FMA chain over s, for r < T;
 * P(r, s) = P[s * pr + r * ps]. Rows advance together (s outer). */
AVX512 static void times(const float *P, int64_t pr, int64_t ps, const float *X, int64_t xs, int64_t T, int64_t Dh,
                         float *C, int64_t cs) {
    for (int64_t d = 0; d < Dh; d += 16) {
        __mmask16 m = lanes(Dh - d);
        __m512 acc[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t s = 0; s < T; s++) {
            __m512 x = _mm512_maskz_loadu_ps(m, X + s * xs + d);
            const float *p = P + s * pr;
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++)
                if (r < T) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * ps]), x, acc[r]);
        }
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++)
            if (r < T) _mm512_mask_storeu_ps(C + r * cs + d, m, acc[r]);
    }
}

/* ar[j * 16 + i] = softmax_causal(scale * q k^T)[i][j] (0 for j > i). */
/* Loops over the keys run 16 times with a guard, fully unrolled, so the
 * columns stay in registers (a loop to T would index them in memory). */
AVX512 static void fwd_512(const attn_fwd *a, int64_t b, int64_t h, float *qt, float *ar) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *Q = attn_at(&a->q, b, h), *K = attn_at(&a->k, b, h), *Vv = attn_at(&a->v, b, h);
    transpose_rows(Q, a->q.st, T, Dh, qt);
    __m512 c[16], m = _mm512_set1_ps(-INFINITY), z = _mm512_setzero_ps();
    const __m512 scale = _mm512_set1_ps(a->scale);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __mmask16 rows_ok = lanes(T);
    columns(qt, K, a->k.st, T, Dh, c);
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        if (j >= T) break;
        if (a->has_scale) c[j] = _mm512_mul_ps(c[j], scale);
        /* queries i >= j see key j; the max as the row kernel takes it: x > m ? x : m */
        __mmask16 valid = _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32(j)) & rows_ok;
        m = _mm512_mask_mov_ps(m, _mm512_mask_cmp_ps_mask(valid, c[j], m, _CMP_GT_OQ), c[j]);
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        if (j >= T) break;
        c[j] = _mm512_sub_ps(c[j], m);
        vexp_at((vf *)&c[j]);
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        if (j >= T) break;
        z = _mm512_mask_add_ps(z, _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32(j)) & rows_ok, z, c[j]);
    }
    __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), z);
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        __mmask16 valid = _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32(j)) & rows_ok;
        c[j] = j < T ? _mm512_maskz_mul_ps(valid, c[j], inv) : _mm512_setzero_ps();
        if (j < T) _mm512_store_ps(ar + j * 16, c[j]);
    }
    if (a->att && a->att_cols) { /* by keys: the columns as they are */
        float *att = a->att + (b * a->H + h) * T * T;
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            if (j < T) _mm512_mask_storeu_ps(att + j * T, rows_ok, c[j]);
    } else if (a->att) {
        transpose16(c);
        float *att = a->att + (b * a->H + h) * T * T;
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            if (i < T) _mm512_mask_storeu_ps(att + i * T, rows_ok, c[i]);
    }
    times(ar, 16, 1, Vv, a->v.st, T, Dh, attn_atw(&a->o, b, h), a->o.st);
}

/* Two (batch, head) units at once when T <= 8: unit A's queries in lanes
 * 0-7, unit B's in lanes 8-15, so the softmax's vector work is shared; each
 * lane does exactly what fwd_512 does for it. The keys' broadcast is two
 * values, one per half. */
#define AVX512DQ __attribute__((target("avx512f,avx512dq,avx512vl,fma")))
AVX512DQ static void fwd_pair_512(const attn_fwd *a, int64_t u, float *qt, float *ar) {
    const int64_t T = a->T, Dh = a->Dh;
    const int64_t bA = u / a->H, hA = u % a->H, bB = (u + 1) / a->H, hB = (u + 1) % a->H;
    const float *QA = attn_at(&a->q, bA, hA), *KA = attn_at(&a->k, bA, hA);
    const float *QB = attn_at(&a->q, bB, hB), *KB = attn_at(&a->k, bB, hB);
    for (int64_t d0 = 0; d0 < Dh; d0 += 16) {
        __mmask16 m = lanes(Dh - d0);
        __m512 v[16];
        for (int i = 0; i < 8; i++) {
            v[i] = i < T ? _mm512_maskz_loadu_ps(m, QA + i * a->q.st + d0) : _mm512_setzero_ps();
            v[8 + i] = i < T ? _mm512_maskz_loadu_ps(m, QB + i * a->q.st + d0) : _mm512_setzero_ps();
        }
        transpose16(v);
        for (int64_t d = 0; d < 16 && d0 + d < Dh; d++) _mm512_store_ps(qt + (d0 + d) * 16, v[d]);
    }
    __m512 c[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) c[j] = _mm512_setzero_ps();
    for (int64_t d = 0; d < Dh; d++) {
        __m512 x = _mm512_load_ps(qt + d * 16);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            if (j < T) {
                __m512 k2 = _mm512_mask_broadcastss_ps(_mm512_set1_ps(KA[j * a->k.st + d]), 0xff00,
                                                       _mm_load_ss(KB + j * a->k.st + d));
                c[j] = _mm512_fmadd_ps(x, k2, c[j]);
            }
    }
    const __m512 scale = _mm512_set1_ps(a->scale);
    const __m512i lane8 = _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4, 3, 2, 1, 0);
    const __mmask16 rows_ok = (__mmask16)(lanes(T) | lanes(T) << 8);
    __m512 m = _mm512_set1_ps(-INFINITY), z = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        if (a->has_scale) c[j] = _mm512_mul_ps(c[j], scale);
        __mmask16 valid = _mm512_cmpge_epi32_mask(lane8, _mm512_set1_epi32(j)) & rows_ok;
        m = _mm512_mask_mov_ps(m, _mm512_mask_cmp_ps_mask(valid, c[j], m, _CMP_GT_OQ), c[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        c[j] = _mm512_sub_ps(c[j], m);
        vexp_at((vf *)&c[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        z = _mm512_mask_add_ps(z, _mm512_cmpge_epi32_mask(lane8, _mm512_set1_epi32(j)) & rows_ok, z, c[j]);
    }
    __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), z);
    float *attA = a->att ? a->att + u * T * T : NULL, *attB = attA ? attA + T * T : NULL;
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        __mmask16 valid = _mm512_cmpge_epi32_mask(lane8, _mm512_set1_epi32(j)) & rows_ok;
        c[j] = _mm512_maskz_mul_ps(valid, c[j], inv);
        _mm512_store_ps(ar + j * 16, c[j]);
        if (attA) { /* by keys (the caller pairs only then) */
            _mm256_mask_storeu_ps(attA + j * T, (__mmask8)lanes(T), _mm512_castps512_ps256(c[j]));
            _mm256_mask_storeu_ps(attB + j * T, (__mmask8)lanes(T), _mm512_extractf32x8_ps(c[j], 1));
        }
    }
    times(ar, 16, 1, attn_at(&a->v, bA, hA), a->v.st, T, Dh, attn_atw(&a->o, bA, hA), a->o.st);
    times(ar + 8, 16, 1, attn_at(&a->v, bB, hB), a->v.st, T, Dh, attn_atw(&a->o, bB, hB), a->o.st);
}

/* The backward of two units at once (T <= 8, softmax stored by keys), as
 * fwd_pair_512: each lane does what bwd_512 does for it. */
AVX512DQ static void bwd_pair_512(const attn_bwd *a, int64_t u, float *ot, float *ds) {
    const int64_t T = a->T, Dh = a->Dh;
    const int64_t bA = u / a->H, hA = u % a->H, bB = (u + 1) / a->H, hB = (u + 1) % a->H;
    const float *AA = a->att + u * T * T, *AB = AA + T * T;
    const float *dOA = attn_at(&a->dout, bA, hA), *dOB = attn_at(&a->dout, bB, hB);
    const float *VA = attn_at(&a->v, bA, hA), *VB = attn_at(&a->v, bB, hB);
    for (int64_t d0 = 0; d0 < Dh; d0 += 16) {
        __mmask16 m = lanes(Dh - d0);
        __m512 v[16];
        for (int i = 0; i < 8; i++) {
            v[i] = i < T ? _mm512_maskz_loadu_ps(m, dOA + i * a->dout.st + d0) : _mm512_setzero_ps();
            v[8 + i] = i < T ? _mm512_maskz_loadu_ps(m, dOB + i * a->dout.st + d0) : _mm512_setzero_ps();
        }
        transpose16(v);
        for (int64_t d = 0; d < 16 && d0 + d < Dh; d++) _mm512_store_ps(ot + (d0 + d) * 16, v[d]);
    }
    __m512 at2[8], da[8], dot = _mm512_setzero_ps();
    const __mmask8 t8 = (__mmask8)lanes(T);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        at2[j] = j < T ? _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskz_loadu_ps(t8, AA + j * T)),
                                            _mm256_maskz_loadu_ps(t8, AB + j * T), 1)
                       : _mm512_setzero_ps();
        da[j] = _mm512_setzero_ps();
    }
    for (int64_t d = 0; d < Dh; d++) {
        __m512 x = _mm512_load_ps(ot + d * 16);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            if (j < T) {
                __m512 v2 = _mm512_mask_broadcastss_ps(_mm512_set1_ps(VA[j * a->v.st + d]), 0xff00,
                                                       _mm_load_ss(VB + j * a->v.st + d));
                da[j] = _mm512_fmadd_ps(x, v2, da[j]);
            }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) /* softmax_grad's sum: key order, multiply then add */
        if (j < T) dot = _mm512_add_ps(dot, _mm512_mul_ps(da[j], at2[j]));
    const __m512 scale = _mm512_set1_ps(a->scale);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        if (j >= T) break;
        __m512 g = _mm512_mul_ps(at2[j], _mm512_sub_ps(da[j], dot));
        if (a->has_scale) g = _mm512_mul_ps(g, scale);
        _mm512_store_ps(ds + j * 16, g);
    }
    if (a->dq.p) {
        times(ds, 16, 1, attn_at(&a->k, bA, hA), a->k.st, T, Dh, attn_atw(&a->dq, bA, hA), a->dq.st);
        times(ds + 8, 16, 1, attn_at(&a->k, bB, hB), a->k.st, T, Dh, attn_atw(&a->dq, bB, hB), a->dq.st);
    }
    if (a->dk.p) {
        times(ds, 1, 16, attn_at(&a->q, bA, hA), a->q.st, T, Dh, attn_atw(&a->dk, bA, hA), a->dk.st);
        times(ds + 8, 1, 16, attn_at(&a->q, bB, hB), a->q.st, T, Dh, attn_atw(&a->dk, bB, hB), a->dk.st);
    }
    if (a->dv.p) {
        times(AA, 1, T, dOA, a->dout.st, T, Dh, attn_atw(&a->dv, bA, hA), a->dv.st);
        times(AB, 1, T, dOB, a->dout.st, T, Dh, attn_atw(&a->dv, bB, hB), a->dv.st);
    }
}

AVX512 static void bwd_512(const attn_bwd *a, int64_t b, int64_t h, float *ot, float *ds) {
    const int64_t T = a->T, Dh = a->Dh;
    const float *A = a->att + (b * a->H + h) * T * T;
    const float *dO = attn_at(&a->dout, b, h), *Q = attn_at(&a->q, b, h), *K = attn_at(&a->k, b, h),
                *Vv = attn_at(&a->v, b, h);
    transpose_rows(dO, a->dout.st, T, Dh, ot);
    __m512 at_[16]; /* the softmax's columns: lanes i */
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) at_[i] = i < T ? _mm512_maskz_loadu_ps(lanes(T), A + i * T) : _mm512_setzero_ps();
    if (!a->att_cols) transpose16(at_); /* by keys already: column j is row j of memory */
    __m512 da[16], dot = _mm512_setzero_ps();
    columns(ot, Vv, a->v.st, T, Dh, da);
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) /* softmax_grad's sum: key order, multiply then add */
        if (j < T) dot = _mm512_add_ps(dot, _mm512_mul_ps(da[j], at_[j]));
    const __m512 scale = _mm512_set1_ps(a->scale);
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        if (j >= T) break;
        __m512 g = _mm512_mul_ps(at_[j], _mm512_sub_ps(da[j], dot));
        if (a->has_scale) g = _mm512_mul_ps(g, scale);
        _mm512_store_ps(ds + j * 16, g);
    }
    if (a->dq.p) times(ds, 16, 1, K, a->k.st, T, Dh, attn_atw(&a->dq, b, h), a->dq.st);
    if (a->dk.p) times(ds, 1, 16, Q, a->q.st, T, Dh, attn_atw(&a->dk, b, h), a->dk.st);
    if (a->dv.p)
        times(A, a->att_cols ? 1 : T, a->att_cols ? T : 1, dO, a->dout.st, T, Dh, attn_atw(&a->dv, b, h), a->dv.st);
}
#endif

/* ---- drivers ---- */

typedef struct {
    const attn_fwd *f;
    const attn_bwd *bw;
    bool fma;   /* products as FMA chains (the GEMM kernel's) */
    bool k512;  /* fwd_512 / bwd_512 apply */
    bool pairs; /* fwd_pair_512 applies */
} attn_job;

static void fwd_range(void *arg, int64_t lo, int64_t hi) {
    const attn_job *j = arg;
    float kt[ATTN_MAX_DH * VL] __attribute__((aligned(64)));
    float ar[ATTN_MAX_T * VL] __attribute__((aligned(64)));
    if (!j->k512) memset(kt, 0, sizeof(float) * (size_t)(j->f->Dh * VL));
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / j->f->H, h = u % j->f->H;
#ifdef HAVE_512
        if (j->pairs && u + 1 < hi) {
            fwd_pair_512(j->f, u++, kt, ar);
            continue;
        }
        if (j->k512) {
            fwd_512(j->f, b, h, kt, ar);
            continue;
        }
#endif
        if (j->f->T <= 8) tg_attn_fwd8(j->f, b, h, kt, ar, j->fma);
        else fwd_generic(j->f, b, h, kt, ar, j->fma);
    }
}

static void bwd_range(void *arg, int64_t lo, int64_t hi) {
    const attn_job *j = arg;
    float vt[ATTN_MAX_DH * VL] __attribute__((aligned(64)));
    float ds[ATTN_MAX_T * VL] __attribute__((aligned(64)));
    if (!j->k512) memset(vt, 0, sizeof(float) * (size_t)(j->bw->Dh * VL));
    for (int64_t u = lo; u < hi; u++) {
        int64_t b = u / j->bw->H, h = u % j->bw->H;
#ifdef HAVE_512
        if (j->pairs && u + 1 < hi) {
            bwd_pair_512(j->bw, u++, vt, ds);
            continue;
        }
        if (j->k512) {
            bwd_512(j->bw, b, h, vt, ds);
            continue;
        }
#endif
        if (j->bw->T <= 8) tg_attn_bwd8(j->bw, b, h, vt, ds, j->fma);
        else bwd_generic(j->bw, b, h, vt, ds, j->fma);
    }
}

/* (batch, head) pairs per task: a pair is about T * T * Dh * 4 flops. */
static int64_t grain(int64_t T, int64_t Dh) {
    int64_t g = 65536 / (T * T * Dh * 4 + 1);
    return g > 0 ? g : 1;
}

void tg_cpu_attention_fwd(cpu_ctx *c, const attn_fwd *a) {
    if (a->T > ATTN_MAX_T) {
        tg_attn_fwd_long(c, a);
        return;
    }
    attn_job j = {a, NULL, tg_gemm_uses_fma(), false, false};
#ifdef HAVE_512
    j.k512 = j.fma && tg_cpu_isa() == CPU_AVX512;
    j.pairs = j.k512 && a->T <= 8 && (!a->att || a->att_cols) && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("avx512vl");
#endif
    tg_cpu_parallel(c, a->B * a->H, grain(a->T, a->Dh), fwd_range, &j);
}

void tg_cpu_attention_bwd(cpu_ctx *c, const attn_bwd *a) {
    if (a->T > ATTN_MAX_T) {
        tg_attn_bwd_long(c, a);
        return;
    }
    attn_job j = {NULL, a, tg_gemm_uses_fma(), false, false};
#ifdef HAVE_512
    j.k512 = j.fma && tg_cpu_isa() == CPU_AVX512;
    j.pairs = j.k512 && a->T <= 8 && a->att_cols && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("avx512vl");
#endif
    tg_cpu_parallel(c, a->B * a->H, grain(a->T, a->Dh) / 2 + 1, bwd_range, &j);
}
