// make bench-web: the sin MLP and the addition transformer trained through
// the WebAssembly build in Node on npm's webgpu (Dawn), beside upstream
// tensorgrad 0.4.6 in the same Node and the same Dawn, from one run: the
// median step (one fixed batch, each step awaited with its loss read back,
// after a warm-up), the ratio upstream / ours, and ours on the CPU backend
// (WASM SIMD, one thread). First, what this Dawn exposes on the adapter:
// its features (shader-f16, subgroups, subgroup matrices), with Dawn's
// allow_unsafe_apis too.
//   node web/bench/bench.mjs [--steps-sin N] [--steps-addition N] [--models sin,addition]
//   node web/bench/bench.mjs --cpu ...   ours on the CPU backend alone (no GPU needed), N steps each
// Env: TG_WEB_DEPS (npm webgpu and upstream, scripts/fetch-web.sh and
// scripts/fetch-upstream.sh), TG_WASM_BUILD (default build-wasm).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { root, wasmBuild } from '../test/common.mjs';
import { installWorker, upstreamModels } from './upstream.mjs';
import { sinModel, sinBatch, sinRng, additionModel, additionBatch, additionRng, ADD } from '../pages/models.js';

const arg = (name, def) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : def; };
const deps = process.env.TG_WEB_DEPS || join(root, '.deps/web');
const webgpuIndex = join(deps, 'node_modules/webgpu/index.js');
const models = arg('--models', 'sin,addition').split(',');
const steps = { sin: +arg('--steps-sin', 200), addition: +arg('--steps-addition', 100) };
const cpuOnly = process.argv.includes('--cpu');
const WARMUP = 10, WARMUP_S = 1;
const alive = setInterval(() => {}, 1000); // dawn.node's promises hold no handle of the event loop

const json = o => console.log(JSON.stringify(o));
let create = null;
if (!cpuOnly) {
  const webgpu = await import(pathToFileURL(webgpuIndex));
  create = webgpu.create;
  Object.assign(globalThis, webgpu.globals);
}

// ---- the device ----
async function describe(flags) {
  const gpu = create(flags);
  const a = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!a) return null;
  const info = {};
  for (const k of ['vendor', 'architecture', 'device', 'description', 'subgroupMinSize', 'subgroupMaxSize', 'isFallbackAdapter'])
    info[k] = a.info[k];
  // Each config's fields are getters of its prototype: read by name.
  const configs = (a.info.subgroupMatrixConfigs || []).map(c =>
    Object.fromEntries(['componentType', 'resultComponentType', 'M', 'N', 'K'].map(k => [k, c[k]])));
  return { info, features: [...a.features].sort(), subgroupMatrixConfigs: configs };
}
const plain = cpuOnly ? null : await describe([]), unsafe = cpuOnly ? null : await describe(['enable-dawn-features=allow_unsafe_apis']);
if (!plain && !cpuOnly) { console.log('no WebGPU adapter from npm webgpu'); process.exit(1); }
if (!cpuOnly) {
json({ bench: 'dawn_node_adapter', flags: '', ...plain });
json({ bench: 'dawn_node_adapter', flags: 'allow_unsafe_apis', ...unsafe });
const has = (d, f) => d && d.features.includes(f);
console.log(`# npm webgpu (dawn.node) on ${plain.info.device || plain.info.description} (${plain.info.vendor}):`);
for (const [label, d] of [['plain', plain], ['allow_unsafe_apis', unsafe]])
  console.log(`#   ${label}: shader-f16 ${has(d, 'shader-f16') ? 'yes' : 'no'}, subgroups ${has(d, 'subgroups') ? 'yes' : 'no'}` +
    ` (${d.info.subgroupMinSize}-${d.info.subgroupMaxSize}), subgroup matrices ` +
    `${has(d, 'chromium-experimental-subgroup-matrix') ? `yes: ${JSON.stringify(d.subgroupMatrixConfigs)}` : 'no'}`);
console.log(`#   features (plain): ${plain.features.join(' ')}`);
const extra = unsafe ? unsafe.features.filter(f => !plain.features.includes(f)) : [];
console.log(`#   with allow_unsafe_apis also: ${extra.join(' ') || '(none)'}`);
}

// ---- timing ----
// Median and minimum of n awaited steps after the warm-up (at least WARMUP
// steps and WARMUP_S seconds).
async function time(step, n) {
  const t0 = performance.now();
  for (let i = 0; i < WARMUP || (performance.now() - t0 < WARMUP_S * 1e3 && i < 200); i++) await step();
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await step();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return { median_step_ms: +ms[ms.length >> 1].toFixed(4), min_step_ms: +ms[0].toFixed(4), steps: n };
}
const loss = r => { if (r.kind !== 'completed') throw r.error || new Error(`step: ${r.kind}`); return r.loss; };

// The fixed batches, the same for every implementation.
const sinB = sinBatch(sinRng(1)), addB = additionBatch(additionRng(1));
const mask = Float32Array.from([0, 0, 0, 0, 0, 1, 1, 1]);
const batches = { sin: sinB, addition: addB };
const names = { sin: 'sin_mlp', addition: 'addition' };

const results = {};
async function bench(impl, lib, model, name, backend) {
  const t0 = performance.now();
  const spec = { model: new model.Model(), loss: model.loss, inputs: model.inputs, optimizer: model.optimizer, seed: 1 };
  if (backend) spec.backend = backend;
  const train = await lib.compile(spec);
  const compile_ms = +(performance.now() - t0).toFixed(1);
  const feed = impl === 'upstream' && name === 'addition' ? { ...batches[name], mask } : batches[name];
  let last = NaN;
  const n = backend === 'cpu' && !cpuOnly ? Math.max(5, steps[name] >> 3) : steps[name]; // beside the GPU's, a few
  const r = await time(async () => { last = loss(await train.step(feed)); }, n);
  const row = { bench: names[name], impl, backend: backend || 'webgpu', ...r, compile_ms, loss: last };
  if (train.stats) row.dispatches = train.stats.dispatches;
  else if (train.kernels) row.dispatches = train.kernels.length; // upstream: a dispatch per kernel
  json(row);
  results[`${name}/${impl}/${row.backend}`] = row;
  await train.destroy();
}

// Ours.
const ours = await import(pathToFileURL(join(wasmBuild, 'package/index.js')));
await ours.configure({ gpu: cpuOnly ? null : create([]) });
const oursModels = { sin: sinModel(ours), addition: additionModel(ours, ADD.B) };
for (const m of cpuOnly ? [] : models) await bench('tensorgrad-wasm', ours, { ...oursModels[m], Model: m === 'sin' ? oursModels[m].MLP : oursModels[m].Gpt }, m, 'webgpu');
// Upstream, same Node, same Dawn.
let up = null;
if (!cpuOnly) try {
  installWorker(webgpuIndex, []);
  globalThis.navigator = { gpu: create([]) };
  up = await import(pathToFileURL(join(deps, 'upstream/dist/index.js')));
} catch (e) {
  console.log(`# upstream tensorgrad not loaded (scripts/fetch-upstream.sh): ${e.message}`);
}
if (up) {
  const upModels = upstreamModels(up);
  for (const m of models) {
    try { await bench('upstream', up, upModels[m], m); } catch (e) { console.log(`# upstream ${m} failed: ${e.stack || e}`); }
  }
}
// Ours on the CPU backend (the fallback without WebGPU), one thread of WASM SIMD.
for (const m of models) await bench('tensorgrad-wasm', ours, { ...oursModels[m], Model: m === 'sin' ? oursModels[m].MLP : oursModels[m].Gpt }, m, 'cpu');

console.log('\nmodel      impl                backend  median ms/step   min    compile ms  dispatches  upstream / ours');
for (const m of models) {
  const base = results[`${m}/tensorgrad-wasm/webgpu`];
  for (const key of [`${m}/tensorgrad-wasm/webgpu`, `${m}/upstream/webgpu`, `${m}/tensorgrad-wasm/cpu`]) {
    const r = results[key];
    if (!r) continue;
    const ratio = r.impl === 'upstream' && base ? `${(r.median_step_ms / base.median_step_ms).toFixed(1)}x` : '';
    console.log(`${names[m].padEnd(10)} ${r.impl.padEnd(19)} ${r.backend.padEnd(8)} ${r.median_step_ms.toFixed(3).padStart(12)} ` +
      `${r.min_step_ms.toFixed(3).padStart(8)} ${String(r.compile_ms).padStart(11)} ${String(r.dispatches ?? '').padStart(11)}  ${ratio}`);
  }
}
clearInterval(alive);
process.exit(0);
