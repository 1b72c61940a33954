// The sin MLP and the addition transformer trained through the JavaScript
// API in Node (the models of web/pages/models.js) on the CPU backend (WASM
// SIMD) and on npm's webgpu, against the native build's losses for the same
// seed and data (build/tg train ... --log on the CPU): every step the
// native run reports must agree within the cross-backend tolerance, 1e-4
// relative (as tests/test_addition_parity.c holds the two native backends
// to). On WebGPU past step 8 the bound is 1e-2: the addition transformer's
// early steps amplify rounding differences, and the native WebGPU backend
// itself is 2e-3 from the native CPU by step 16.
// Usage: node web/test/train.mjs BUILD_DIR (the native build, for its tg).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { check, nodeGpu, summary, wasmBuild } from './common.mjs';
import { sinModel, sinBatch, sinRng, additionModel, additionBatch, additionRng } from '../pages/models.js';

const build = process.argv[2] || 'build';
const tg = await import(pathToFileURL(join(wasmBuild, 'package/index.js')));
const gpu = await nodeGpu();
await tg.configure({ gpu });
const alive = setInterval(() => {}, 1000); // dawn.node's promises hold no handle of the event loop
const tmp = mkdtempSync(join(tmpdir(), 'tg-web-train-'));

// The native losses: {step: loss} from tg's --log CSV.
function native(example, steps, seed) {
  const log = join(tmp, `${example}.csv`);
  // (its exit status says whether the short run met the example's target: not asked here)
  const r = spawnSync(join(build, 'tg'), ['train', example, '--steps', String(steps), '--seed', String(seed), '--log', log, '--quiet'],
    { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8', env: { ...process.env, TG_THREADS: '1' } });
  if (!existsSync(log)) throw new Error(`${build}/tg train ${example} wrote no log: ${r.stderr || r.error}`);
  const rows = readFileSync(log, 'utf8').trim().split('\n').slice(1).map(l => l.split(','));
  return new Map(rows.map(r => [+r[0], +r[1]]));
}

async function run(name, model, batches, steps, want, backend) {
  const t0 = performance.now();
  const train = await tg.compile({ model: new model.Model(), loss: model.loss, inputs: model.inputs, optimizer: model.optimizer, seed: model.seed, backend });
  check(train.backend === backend, `${name}: compiled for ${train.backend}, asked for ${backend}`);
  const t1 = performance.now();
  let worst = 0, at = 0, failed = null;
  for (let s = 1; s <= steps && !failed; s++) {
    const r = await train.step(batches());
    if (r.kind !== 'completed') { failed = r.error || r.kind; break; }
    if (!want.has(s)) continue;
    const e = Math.abs(r.loss - want.get(s)) / Math.abs(want.get(s)), tol = 1e-4;
    if (e / tol > worst) worst = e / tol, at = s;
    check(e <= tol, `${name} on ${backend}: step ${s} loss ${r.loss} against the native ${want.get(s)} (${e.toExponential(2)} relative)`);
  }
  check(!failed, `${name} on ${backend}: ${failed}`);
  if (name === 'sin' && !failed) await roundTrips(train, model, backend);
  console.log(`${name} on ${backend} (${train.device.name}): compiled in ${((t1 - t0) / 1e3).toFixed(1)} s, ${steps} steps in ` +
    `${((performance.now() - t1) / 1e3).toFixed(1)} s, worst step ${at} at ${(worst * 100).toFixed(1)}% of its tolerance`);
  await train.destroy();
}

// Params out and in (download, upload, safetensors bytes) and a forward
// session attached to the trained one, at a batch size of its own.
async function roundTrips(train, model, backend) {
  const what = `sin on ${backend}`;
  const p = await train.downloadParams();
  check(Object.keys(p).join() === 'l1.W,l1.b,l2.W,l2.b,l3.W,l3.b' && p['l2.W'].length === 4096, `${what}: params ${Object.keys(p)}`);
  const bytes = await train.saveParams(), file = await tg.loadSafetensors(bytes);
  check(file.tensors['l2.W'][5] === p['l2.W'][5] && file.shapes['l2.W'].join() === '64,64', `${what}: saveParams' bytes`);
  p['l3.b'][0] += 1;
  await train.uploadParams(p);
  check((await train.downloadParams())['l3.b'][0] === p['l3.b'][0], `${what}: uploadParams`);
  await train.loadParams(bytes);
  check((await train.downloadParams())['l3.b'][0] === file.tensors['l3.b'][0], `${what}: loadParams`);
  const infer = await train.attach({ forward: model.predict, inputs: { x: [null, 1] } });
  const out = await infer.run({ x: new Float32Array([0, 1, 2, 3, 4, 5, 6]) });
  check(out.kind === 'completed' && out.output.length === 7 && out.shape.join() === '7,1' && out.output.every(Number.isFinite),
    `${what}: a forward of batch 7: ${out.kind} ${out.shape} ${out.error || ''}`);
}

try {
  const sin = sinModel(tg), add = additionModel(tg);
  // A shape error names the op and the caller's file:line; the function's own throw comes back as it was.
  const bad = fn => tg.compile({ model: new sin.MLP(), loss: fn, inputs: { x: [4, 3] }, optimizer: { kind: 'adam', lr: 1e-3 }, backend: 'cpu' });
  await bad((m, { x }) => tg.matmul(x, x)).then(() => check(false, 'a [4,3] @ [4,3] product compiled'),
    e => check(e instanceof tg.TensorgradError && /matmul/.test(e.message) && /\[4,3\]/.test(e.message) && /train\.mjs:\d+/.test(e.message),
      `the shape error: ${e.message}`));
  await bad(() => { throw new RangeError('from the loss'); }).then(() => check(false, 'a throwing loss compiled'),
    e => check(e instanceof RangeError && e.message === 'from the loss', `the loss's own error: ${e}`));
  const sinWant = native('sin', 40, 3), addWant = native('addition', 10, 3);
  for (const backend of gpu ? ['cpu', 'webgpu'] : ['cpu']) {
    const sr = sinRng(3);
    await run('sin', { ...sin, Model: sin.MLP, seed: 3 }, () => sinBatch(sr), 40, sinWant, backend);
    const ar = additionRng(3);
    await run('addition', { ...add, Model: add.Gpt, seed: 3 }, () => additionBatch(ar), backend === 'cpu' ? 10 : 6, addWant, backend);
  }
} catch (e) {
  check(false, e.stack || e);
} finally {
  rmSync(tmp, { recursive: true, force: true });
  clearInterval(alive);
}
process.exit(summary('web training'));
