/* Kernels over rows ("lines": the elements along one axis, A of them, at
 * stride `inner`) and over columns. Long rows get a workgroup each with tree
 * reductions in workgroup memory; short rows get a thread each, looping in
 * the CPU's order. Column sums give each workgroup 32 adjacent columns (so
 * reads are coalesced) and 8 interleaved row sets, combined at the end. */
#include "emit.h"

#define SHORT_ROW 32 /* rows this long or shorter: one thread per row */

uint32_t wk_row_wg(int64_t len) {
    uint32_t wg = 32;
    while (wg < 256 && wg < len) wg *= 2;
    return wg;
}

void wk_red_decl(wk *k, uint32_t wg, const char *type) {
    wsb_printf(&k->s, "var<workgroup> red: array<%s, %u>;\n", type, wg);
}

/* The barriers are in uniform control flow: the loop bound is a literal. */
void wk_reduce(wk *k, uint32_t wg, const char *val, bool is_max, const char *out) {
    wsb_printf(&k->s,
               "    red[lid] = %s;\n    workgroupBarrier();\n"
               "    for (var s = %uu; s > 0u; s = s >> 1u) {\n"
               "        if (lid < s) { red[lid] = %s; }\n"
               "        workgroupBarrier();\n    }\n"
               "    let %s = red[0];\n    workgroupBarrier();\n",
               val, wg / 2, is_max ? "max(red[lid], red[lid + s])" : "red[lid] + red[lid + s]", out);
}

bool wk_rows_open(wk_rows *L, wk *k, int64_t lines, int64_t A, int64_t inner) {
    *L = (wk_rows){k, A > SHORT_ROW, wk_row_wg(A), lines, A, inner};
    if (L->wide) {
        wk_red_decl(k, L->wg, "f32");
        if (!wk_main(k, lines, L->wg)) return false;
        k->spec->threads = lines * L->wg;
        /* gid is uniform, so returning here keeps later barriers uniform. */
        wsb_printf(&k->s, "    let l = gid;\n    if (l >= %lldu) { return; }\n", (long long)lines);
    } else {
        if (!wk_flat(k, lines)) return false;
        wsb_printf(&k->s, "    let l = i;\n");
    }
    if (inner == 1) wsb_printf(&k->s, "    let base = l * %lldu;\n", (long long)A);
    else
        wsb_printf(&k->s, "    let base = (l / %lldu) * %lldu + l %% %lldu;\n", (long long)inner, (long long)(A * inner),
                   (long long)inner);
    return true;
}

void wk_rows_loop(wk_rows *L, const char *len) {
    if (L->wide) wsb_printf(&L->k->s, "    for (var a = lid; a < %s; a += %uu) {\n", len, L->wg);
    else wsb_printf(&L->k->s, "    for (var a = 0u; a < %s; a++) {\n", len);
    wsb_printf(&L->k->s, "        let p = base + a * %lldu;\n", (long long)L->inner);
}

void wk_rows_combine(wk_rows *L, const char *var, bool is_max, const char *out) {
    if (L->wide) wk_reduce(L->k, L->wg, var, is_max, out);
    else wsb_printf(&L->k->s, "    let %s = %s;\n", out, var);
}

void wk_rows_once(wk_rows *L) { wsb_printf(&L->k->s, L->wide ? "    if (lid == 0u) {\n" : "    {\n"); }

#define CW 32 /* columns per workgroup */
#define RW 8  /* interleaved row sets per workgroup */

bool wk_colsum(wk *k, int64_t R, int64_t C, const char *expr, const char *type) {
    wsb_printf(&k->s, "var<workgroup> red: array<%s, %d>;\n", type, CW * RW);
    if (!wk_main(k, (C + CW - 1) / CW, CW * RW)) return false;
    k->spec->threads = ((C + CW - 1) / CW) * CW * RW;
    wsb_printf(&k->s,
               "    let tx = lid %% %du;\n    let ty = lid / %du;\n    let c = gid * %du + tx;\n"
               "    var acc = %s(0);\n"
               "    if (c < %lldu) {\n"
               "        for (var r = ty; r < %lldu; r += %du) { acc += %s; }\n"
               "    }\n"
               "    red[lid] = acc;\n    workgroupBarrier();\n"
               "    for (var s = %du; s > 0u; s = s >> 1u) {\n"
               "        if (ty < s) { red[lid] = red[lid] + red[lid + s * %du]; }\n"
               "        workgroupBarrier();\n    }\n"
               "    if (ty == 0u && c < %lldu) { st(c, red[tx]); }\n}\n",
               CW, CW, CW, type, (long long)C, (long long)R, RW, expr, RW / 2, CW, (long long)C);
    return true;
}
