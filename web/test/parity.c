/* Cross-backend parity through the WebAssembly build: rows of the shared
 * op-case table (tests/op_cases.h), each run on the CPU backend (WASM
 * SIMD) and on the host's WebGPU, compared as tests/test_webgpu.c's op
 * table compares them natively (loss and output within 1e-4 relative,
 * gradients within 1e-3). The rows are the ones named on the command line
 * (web/test/parity.mjs passes a representative subset), all of them with
 * none named. Built by make wasm-tests (web/web.mk). */
#define _POSIX_C_SOURCE 200809L
#include "../../tests/harness.h"
#include "../../tests/parity.h"

static bool wanted(const char *name, int argc, char **argv) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return true;
    return false;
}

int main(int argc, char **argv) {
    tg_webgpu_adapter_info info;
    if (tg_webgpu_info(&info) != TG_OK) {
        check_webgpu_missing("wasm parity");
        return check_summary("wasm parity");
    }
    printf("wasm parity: %s (%s)\n", info.name, info.type);
    int ran = 0;
    for (int ci = 0; ci < N_OP_CASES; ci++) {
        const op_case *c = &op_cases[ci];
        if (!wanted(c->name, argc, argv)) continue;
        ran++;
        case_run rc, rg;
        tg_status sc = case_open(&rc, c, TG_BACKEND_CPU, 101 + (uint64_t)ci);
        tg_status sg = case_open(&rg, c, TG_BACKEND_WEBGPU, 101 + (uint64_t)ci);
        CHECK(sc == TG_OK, "%s: cpu: %s", c->name, sc == TG_OK ? "" : tg_last_error());
        CHECK(sg == TG_OK, "%s: webgpu: %s", c->name, sg == TG_OK ? "" : tg_last_error());
        if (sc == TG_OK && sg == TG_OK) {
            float lc = case_eval(&rc), lg = case_eval(&rg);
            CHECK(fabsf(lg - lc) <= 1e-4f * fmaxf(1.0f, fabsf(lc)), "%s: loss %.9g on webgpu, %.9g on cpu", c->name, lg, lc);
            char what[64];
            snprintf(what, sizeof what, "table: %s", c->name);
            par_compare(what, rg.s, rc.s, "x", c->shape, c->no_grad ? 0 : c->n, 1e-4, false);
        }
        case_close(&rc);
        case_close(&rg);
    }
    CHECK(ran == (argc < 2 ? N_OP_CASES : argc - 1), "%d of the %d cases named are in the table", ran, argc - 1);
    /* main waits for the GPU suspended, and its return no longer ends the
     * program: web/test/parity.mjs takes this line as the end. */
    return check_summary("wasm parity");
}
