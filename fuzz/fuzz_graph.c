/* libFuzzer: the graph API as a hostile caller uses it, through the stack
 * machine of fuzz_prog.h: shapes, layout, reductions and the convolution
 * family (fuzz_graph_nn.c: the rest of the ops). */
#include "fuzz_prog.h"

static void graph_step(tg_graph *g, prog *q, tg_tensor *st, int *sp) {
    switch (byte(q) % 20) {
    case 0: PUSH(tg_relu(TOP)); break;
    case 1: PUSH(tg_add(TOP, SECOND)); break;
    case 2: PUSH(tg_matmul(TOP, SECOND)); break;
    case 3: PUSH(tg_reshape(TOP, shape(q))); break;
    case 4: PUSH(tg_sum(TOP, (int)dim(q), byte(q) & 1)); break;
    case 5: PUSH(tg_permute(TOP, shape(q))); break;
    case 6: PUSH(tg_full(g, shape(q), 1.5f)); break;
    case 7: { int64_t a = dim(q), b = dim(q); PUSH(tg_narrow(TOP, (int)dim(q), a, b)); } break;
    case 8: {
        tg_tensor two[2] = {TOP, SECOND};
        PUSH(tg_concat(two, 2, (int)dim(q)));
    } break;
    case 9: PUSH(tg_nearest_upsample2d(TOP, (int)dim(q))); break;
    case 10: PUSH(((tg_tensor){g, (int32_t)(dim(q) - 3)})); break; /* forged ids */
    case 11: PUSH(tg_use(g, q->w)); break;
    case 12: PUSH(tg_one_hot(tg_cast(TOP, TG_I32), dim(q))); break;
    case 13: PUSH(tg_softmax(TOP, (int)dim(q))); break;
    case 14: PUSH(tg_log(tg_exp(TOP))); break;
    case 15: PUSH(tg_broadcast_to(TOP, shape(q))); break;
    case 16: PUSH(tg_sum_axes(TOP, shape(q), byte(q) & 1)); break;
    case 17: PUSH(tg_max_pool2d(TOP, (int)dim(q), (int)dim(q), (int)dim(q))); break;
    case 18: PUSH(tg_conv2d(TOP, SECOND, (int)dim(q), (int)dim(q), (int)dim(q))); break;
    case 19: POP(); break;
    }
}

static tg_tensor graph_run(tg_graph *g, void *u) { return program(g, u, graph_step); }

#ifndef FUZZ_NO_ENTRY /* tests/test_webgpu_programs.c runs the programs on WebGPU */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_program("fuzz_graph", data, size, graph_run); }
#endif
