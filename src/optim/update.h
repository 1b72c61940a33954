/* The optimizer's element updates, each spelled once. Every backend computes
 * them, and the CPU paths must agree bit for bit: that holds only while each
 * rounds the same operations in the same order, so the formulas live here
 * and a backend supplies five primitives named by a prefix K:
 * K##_add, K##_sub, K##_mul, K##_div (two operands) and K##_sqrt.
 *
 *   tg_s  plain C floats (below): the op-table kernels and the fused Adam's C loop
 *   tg_y  AVX2 __m256, tg_z  AVX-512 __m512 (cpu/vec.c)
 *   tg_w  WGSL text (below): TG_WGSL(expr) is the expression as a string over
 *         the operands' names, which the WGSL emitters bind with `let`
 *
 * Nothing is fused into a multiply-add: none is spelled here and the build
 * forbids contraction, so an FMA target rounds as the portable loops do. */
#ifndef TG_OPTIM_UPDATE_H
#define TG_OPTIM_UPDATE_H
#include <math.h>

/* The gradient the fused passes read: times the clip factor gs, rounded as
 * the mul node they absorb. */
#define TG_OPT_GRAD(K, g, gs) K##_mul(g, gs)

/* m' = beta1 m + (1 - beta1) g, with ob1 = 1 - beta1 rounded once */
#define TG_ADAM_M(K, beta1, ob1, m, g) K##_add(K##_mul(beta1, m), K##_mul(ob1, g))
/* v' = beta2 v + ((1 - beta2) g) g */
#define TG_ADAM_V(K, beta2, ob2, v, g) K##_add(K##_mul(beta2, v), K##_mul(K##_mul(ob2, g), g))
/* p' = shrink p - (lrt m') / (sqrt(v') + eps); shrink is AdamW's 1 - lr wd, or 1 */
#define TG_ADAM_P(K, shrink, lrt, eps, p, m, v) \
    K##_sub(K##_mul(shrink, p), K##_div(K##_mul(lrt, m), K##_add(K##_sqrt(v), eps)))

/* SGD's gradient with L2 decay: g2 = g + wd p */
#define TG_SGD_G(K, wd, g, p) K##_add(g, K##_mul(wd, p))
/* v' = (mu v + g) + wd p: the decay is added last, not through g2 (another rounding) */
#define TG_SGD_V(K, mu, wd, v, g, p) K##_add(K##_add(K##_mul(mu, v), g), K##_mul(wd, p))
/* Nesterov's step direction g2 + mu v' (momentum alone steps along v', none along g2) */
#define TG_SGD_NESTEROV(K, mu, g2, v) K##_add(g2, K##_mul(mu, v))
/* p' = p - lr u */
#define TG_SGD_P(K, lr, p, u) K##_sub(p, K##_mul(lr, u))

#define tg_s_add(a, b) ((a) + (b))
#define tg_s_sub(a, b) ((a) - (b))
#define tg_s_mul(a, b) ((a) * (b))
#define tg_s_div(a, b) ((a) / (b))
#define tg_s_sqrt(a) sqrtf(a)

/* Fully parenthesized, so WGSL parses the tree the macros build. */
#define tg_w_add(a, b) (a + b)
#define tg_w_sub(a, b) (a - b)
#define tg_w_mul(a, b) (a * b)
#define tg_w_div(a, b) (a / b)
#define tg_w_sqrt(a) sqrt(a)
#define TG_WGSL(e) TG_WGSL_STR(e)
#define TG_WGSL_STR(e) #e
#endif
