// The op-case parity harness (web/test/parity.c) built for WebAssembly, run
// in Node on npm's webgpu (lavapipe without a GPU) over a representative
// subset of tests/op_cases.h: elementwise with broadcasting, reductions,
// views, products (batched, transposed), convolution and pooling, the
// softmax family, gathers, losses, norms and a small MLP.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { nodeGpu, wasmBuild } from './common.mjs';

const subset = ['add_bcast_both', 'scalar_forms', 'where', 'sum_axes_0_2', 'mean_axes_keep', 'permute3',
  'matmul_batched', 'matmul_tb', 'linear_relu', 'conv2d_s2_p1', 'max_pool2d_k3_s2_p1', 'log_softmax_last',
  'softmax_causal', 'gelu', 'take_along_mid', 'cross_entropy_mean', 'layer_norm_3d', 'mlp_gelu_silu_softmax'];
const names = process.argv.length > 2 ? process.argv.slice(2) : subset;

const gpu = await nodeGpu();
const ci = process.env.CI === 'true';
const js = join(wasmBuild, 'tests/parity.js');
const { default: createParity } = await import(pathToFileURL(js));
const wasm = await readFile(join(wasmBuild, 'tests/parity.wasm'));
// main suspends while it waits for the GPU, so its return ends nothing: the
// summary line (check.h's) is the end. dawn.node's pending promises hold no
// handle of the event loop: the interval keeps Node running meanwhile.
const alive = setInterval(() => {}, 1000);
let skippedInCi = false;
const code = await new Promise(done => {
  createParity({
    gpu: gpu || undefined,
    arguments: names,
    instantiateWasm(imports, ok) {
      WebAssembly.instantiate(wasm, imports).then(r => ok(r.instance, r.module));
      return {};
    },
    print: s => {
      // Under CI a run without WebGPU fails (the C side cannot see CI's environment).
      if (ci && / webgpu skipped: /.test(s)) s = `FAIL ${s}`, skippedInCi = true;
      const m = /: (\d+) passed, (\d+) failed$/.exec(s);
      if (m && skippedInCi) s = s.replace(/\d+ failed$/, `${+m[2] + 1} failed`);
      console.log(s);
      if (m) done(+m[2] || skippedInCi ? 1 : 0);
    },
    printErr: s => console.error(s),
    onAbort: () => done(1),
  });
});
clearInterval(alive);
process.exit(code);
