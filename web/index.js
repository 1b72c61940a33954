// tensorgrad-wasm: the tensorgrad C library compiled to WebAssembly, with a
// JavaScript API shaped like the TypeScript tensorgrad's (typebulb/tensorgrad):
// declare a model as a Module of params, write the loss as a function of the
// model and its inputs with the op functions below, compile, and await steps.
//
// Models are declared in JavaScript: the op functions call the C op builders
// (web/src/bridge.c) while compile() traces the loss, so the graph, its
// gradient, the plan and the kernels are the C library's. Training runs on
// the host's WebGPU when there is an adapter (navigator.gpu in a browser,
// npm's `webgpu` in Node) and on the CPU backend (WASM SIMD) when there is
// none. GPU work never blocks the page: a step's commands are encoded at
// once, and every read-back (the loss, params, outputs) is awaited, the C
// code suspended meanwhile (Asyncify). Every call into the library goes
// through one queue, so calls made without awaiting the last run in order.
import createCore from './tensorgrad_core.js';

// ---- the WebAssembly module ------------------------------------------------

let core = null;
let coreLoading = null;
let gpuChoice; // undefined: not chosen yet; null: none
let options = {};
const isNode = typeof process === 'object' && !!(process.versions && process.versions.node);

async function wasmBytesInNode(url) {
  const fs = await import('node:fs/promises');
  const { fileURLToPath } = await import('node:url');
  return fs.readFile(url.protocol === 'file:' ? fileURLToPath(url) : url);
}

function loadCore() {
  if (coreLoading) return coreLoading;
  const url = options.wasmUrl ? new URL(options.wasmUrl, import.meta.url) : new URL('./tensorgrad_core.wasm', import.meta.url);
  coreLoading = createCore({
    // The wasm is fetched here, not by emscripten's loader: its Node path
    // expects CommonJS, and a browser may serve .wasm without its MIME type.
    instantiateWasm(imports, done) {
      (async () => {
        let result;
        if (isNode) result = await WebAssembly.instantiate(await wasmBytesInNode(url), imports);
        else {
          const response = await fetch(url);
          if (!response.ok) throw new Error(`tensorgrad: cannot fetch ${url} (HTTP ${response.status})`);
          result = await WebAssembly.instantiate(await response.arrayBuffer(), imports);
        }
        done(result.instance, result.module);
      })().catch(e => { coreLoading = null; throw e; });
      return {};
    },
    print: options.print || (s => console.log(s)),
    printErr: options.printErr || (s => console.warn(s)),
  }).then(m => {
    core = m;
    core.tgTrace = traceEntry;
    core.tgFilter = filterEntry;
    ALL = core._tgw_all_axes();
    return m;
  });
  return coreLoading;
}

// The host's WebGPU, found once: options.gpu, navigator.gpu, else (Node)
// the `webgpu` package if it is installed. null when there is none.
async function hostGpu() {
  if (gpuChoice !== undefined) return gpuChoice;
  if (options.gpu !== undefined) gpuChoice = options.gpu;
  else if (typeof navigator === 'object' && navigator && navigator.gpu) gpuChoice = navigator.gpu;
  else if (isNode) {
    try {
      const pkg = 'webgpu'; // optional: CPU only without it
      const { create } = await import(pkg);
      gpuChoice = create(options.dawnFlags || []);
    } catch (e) {
      gpuChoice = null;
    }
  } else gpuChoice = null;
  if (core) core.gpu = gpuChoice || undefined;
  return gpuChoice;
}

/**
 * Optional set-up before the first compile: `gpu` (a GPU object to use
 * instead of navigator.gpu or npm's webgpu; null for the CPU only),
 * `dawnFlags` (Node: flags for webgpu's create()), `wasmUrl` (where
 * tensorgrad_core.wasm is served), `print` / `printErr` (the library's
 * stdout and stderr).
 */
export async function configure(opts = {}) {
  if (core && (opts.gpu !== undefined || opts.dawnFlags) && gpuChoice !== undefined)
    throw new Error('configure: the GPU was already chosen (call configure before the first compile)');
  options = { ...options, ...opts };
  await loadCore();
  await hostGpu();
  return core;
}

// One queue for every call into the library: a call that suspends (waits
// for the GPU) must not be overlapped by another.
let tail = Promise.resolve();
function serial(fn) {
  const run = tail.then(fn);
  tail = run.catch(() => {});
  return run;
}

function flushEvents() { if (core.tgFlushEvents) core.tgFlushEvents(); }

// A C function that may wait for the GPU: awaited (Asyncify).
async function callAsync(name, ...args) {
  flushEvents();
  return core.ccall(name, 'number', args.map(() => 'number'), args, { async: true });
}

export class TensorgradError extends Error {
  constructor(message, status) {
    super(message);
    this.name = 'TensorgradError';
    this.status = status;
  }
}

function lastError() { return core.UTF8ToString(core._tg_last_error()); }
function check(st, what) {
  if (st !== 0) {
    const name = core.UTF8ToString(core._tg_status_name(st));
    throw new TensorgradError(lastError() || `${what}: ${name}`, name);
  }
}

// Memory for one call's arguments, freed together.
class Scratch {
  constructor() { this.ptrs = []; }
  alloc(bytes) { const p = core._malloc(Math.max(bytes, 8)); if (!p) throw new TensorgradError('out of memory', 'TG_ERR_NOMEM'); this.ptrs.push(p); return p; }
  str(s) { const n = core.lengthBytesUTF8(s) + 1, p = this.alloc(n); core.stringToUTF8(s, p, n); return p; }
  i32(values) { const p = this.alloc(4 * values.length); core.HEAP32.set(values, p >> 2); return p; }
  f64(values) { const p = this.alloc(8 * values.length); core.HEAPF64.set(values, p >> 3); return p; }
  bytes(view) {
    const u8 = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    const p = this.alloc(u8.length);
    core.HEAPU8.set(u8, p);
    return p;
  }
  free() { for (const p of this.ptrs) core._free(p); this.ptrs = []; }
}

const DTYPES = ['f32', 'i32', 'bool'];
function dtypeCode(d) {
  const i = DTYPES.indexOf(d || 'f32');
  if (i < 0) throw new TypeError(`tensorgrad: unknown dtype '${d}' (f32, i32, bool)`);
  return i;
}

// ---- tensors and call sites ------------------------------------------------

// The graph being traced (compile() sets it while the loss function runs).
let tracing = null;

/** A tensor of the graph being traced: its shape and dtype are known at once. */
export class Tensor {
  constructor(g, id) { this.g = g; this.id = id; }
  #info() {
    const s = new Scratch();
    try {
      const dims = s.alloc(4 * 6), dt = s.alloc(4);
      const rank = core._tgw_tensor_info(this.g, this.id, dims, dt);
      if (rank < 0) return { shape: null, dtype: null };
      return { shape: Array.from(core.HEAP32.subarray(dims >> 2, (dims >> 2) + rank)), dtype: DTYPES[core.HEAP32[dt >> 2]] };
    } finally { s.free(); }
  }
  /** The shape, or null for a tensor an earlier error left invalid. */
  get shape() { return this.#info().shape; }
  get dtype() { return this.#info().dtype; }
}

// "file.js:line" of the op's caller, for error messages (the first stack
// frame outside this file). Trace time only.
const thisFile = import.meta.url;
const siteCache = new Map();
function site() {
  const stack = new Error().stack || '';
  let file = '?', line = 0;
  for (const l of stack.split('\n').slice(1)) {
    if (l.includes(thisFile)) continue;
    const m = /\(?((?:[a-z]+:\/\/|\/|[A-Za-z]:)[^\s()]*?):(\d+):\d+\)?\s*$/.exec(l) || /@(.*?):(\d+):\d+$/.exec(l);
    if (m) { file = m[1].replace(/[?#].*$/, '').split('/').pop(); line = +m[2]; break; }
  }
  let p = siteCache.get(file);
  if (p === undefined) {
    const s = new Scratch();
    p = core._tgw_site(s.str(file));
    s.free();
    siteCache.set(file, p);
  }
  return [p, line];
}

function graphOf(...xs) {
  for (const x of xs) if (x instanceof Tensor) return x.g;
  if (tracing) return tracing;
  throw new TensorgradError('tensorgrad: ops build graphs only inside a loss or forward function that compile() traces', 'TG_ERR_STATE');
}
function T(x, api) {
  if (!(x instanceof Tensor)) throw new TypeError(`${api}: expected a Tensor, got ${typeof x}`);
  return x.id;
}
const wrap = (g, id) => new Tensor(g, id);

// ---- op functions -------------------------------------------------------------
// Numbers mix with tensors where upstream allows it (add(x, 1), sub(1, x)).

const U = { neg: 0, sqrt: 1, rsqrt: 2, log: 3, exp: 4, relu: 5, abs: 6, square: 7, sin: 8, cos: 9, tanh: 10,
  sigmoid: 11, erf: 12, gelu: 13, geluTanh: 14, silu: 15, softplus: 16, log1p: 17, expm1: 18, hardtanh: 19,
  stopGradient: 20, softmaxCausal: 21, mergeHeads: 22, categorical: 23 };
function unary(op, name) {
  return x => { const g = graphOf(x), [f, l] = site(); return wrap(g, core._tgw_unary(g, U[op], T(x, name), f, l)); };
}
export const neg = unary('neg', 'neg'), sqrt = unary('sqrt', 'sqrt'), rsqrt = unary('rsqrt', 'rsqrt');
export const log = unary('log', 'log'), exp = unary('exp', 'exp'), relu = unary('relu', 'relu');
export const abs = unary('abs', 'abs'), square = unary('square', 'square'), sin = unary('sin', 'sin');
export const cos = unary('cos', 'cos'), tanh = unary('tanh', 'tanh'), sigmoid = unary('sigmoid', 'sigmoid');
export const erf = unary('erf', 'erf'), silu = unary('silu', 'silu'), softplus = unary('softplus', 'softplus');
export const log1p = unary('log1p', 'log1p'), expm1 = unary('expm1', 'expm1'), hardtanh = unary('hardtanh', 'hardtanh');
export const stopGradient = unary('stopGradient', 'stopGradient'), mergeHeads = unary('mergeHeads', 'mergeHeads');
/** gelu(x, {approximate: 'tanh'}) for the tanh form; the exact erf form by default. */
export function gelu(x, opts = {}) { return opts.approximate === 'tanh' ? unary('geluTanh', 'gelu')(x) : unary('gelu', 'gelu')(x); }

const B = { add: 0, sub: 1, mul: 2, div: 3, less: 4, greater: 5, min: 6, max: 7, matmul: 8, mse: 9, embedding: 10 };
const S = { add: 0, sub: 1, rsub: 2, mul: 3, div: 4, rdiv: 5, less: 6, greater: 7, min: 8, max: 9, leakyRelu: 10,
  dropout: 11, whereCausal: 12, rope: 13 };
function scalarOp(op, x, s) { const g = graphOf(x), [f, l] = site(); return wrap(g, core._tgw_scalar_op(g, S[op], T(x, op), s, f, l)); }
function binaryOp(op, a, b) { const g = graphOf(a, b), [f, l] = site(); return wrap(g, core._tgw_binary(g, B[op], T(a, op), T(b, op), f, l)); }
// a op b with either side a number: lhs is the op with the number on the
// right, rhs the op with the number on the left.
function mixed(op, lhs, rhs) {
  return (a, b) => {
    if (typeof b === 'number' && a instanceof Tensor) return scalarOp(lhs, a, b);
    if (typeof a === 'number' && b instanceof Tensor) return scalarOp(rhs, b, a);
    return binaryOp(op, a, b);
  };
}
export const add = mixed('add', 'add', 'add'), sub = mixed('sub', 'sub', 'rsub');
export const mul = mixed('mul', 'mul', 'mul'), div = mixed('div', 'div', 'rdiv');
export const min = mixed('min', 'min', 'min'), max = mixed('max', 'max', 'max');
export const less = mixed('less', 'less', 'greater'), greater = mixed('greater', 'greater', 'less');
export const matmul = (a, b) => binaryOp('matmul', a, b);
/** mean((a - b)^2) over every element. */
export const mse = (a, b) => binaryOp('mse', a, b);
/** Rows of table [V, D] picked by i32 idx [...] -> [..., D]. */
export const embedding = (table, idx) => binaryOp('embedding', table, idx);
export const leakyRelu = (x, alpha = 0.01) => scalarOp('leakyRelu', x, alpha);
export const dropout = (x, p) => scalarOp('dropout', x, p);
export const whereCausal = (x, value) => scalarOp('whereCausal', x, value);
/** Rotary position embedding of x [..., T, D] (rotate-half); base 10000 by default. */
export const rope = (x, opts = {}) => scalarOp('rope', x, opts.base || 0);

let ALL; // TG_ALL, read from the library as it loads
const A = { sum: 0, mean: 1, argmax: 2, argmin: 3, amax: 4, amin: 5, softmax: 6, logSoftmax: 7, softmaxCausal: 8, categorical: 9 };
function axisOp(op, x, axis, keepDims) {
  const g = graphOf(x), [f, l] = site();
  return wrap(g, core._tgw_axis_op(g, A[op], T(x, op), axis, keepDims ? 1 : 0, f, l));
}
const SH = { reshape: 0, permute: 1, broadcastTo: 2, sumToShape: 3, sumAxes: 4, meanAxes: 5 };
function shapeOp(op, x, dims, keepDims) {
  if (!Array.isArray(dims)) throw new TypeError(`${op}: expected an array of numbers`);
  const g = graphOf(x), [f, l] = site(), s = new Scratch();
  try { return wrap(g, core._tgw_shape_op(g, SH[op], T(x, op), s.i32(dims), dims.length, keepDims ? 1 : 0, f, l)); } finally { s.free(); }
}
/** Sum over `axis` (a number, an array of axes, or every axis when left out). */
export function sum(x, axis, opts = {}) {
  if (Array.isArray(axis)) return shapeOp('sumAxes', x, axis, opts.keepDims);
  return axisOp('sum', x, axis === undefined || axis === null ? ALL : axis, opts.keepDims);
}
export function mean(x, axis, opts = {}) {
  if (Array.isArray(axis)) return shapeOp('meanAxes', x, axis, opts.keepDims);
  return axisOp('mean', x, axis === undefined || axis === null ? ALL : axis, opts.keepDims);
}
export const argmax = (x, axis, opts = {}) => axisOp('argmax', x, axis === undefined || axis === null ? ALL : axis, opts.keepDims);
export const argmin = (x, axis, opts = {}) => axisOp('argmin', x, axis === undefined || axis === null ? ALL : axis, opts.keepDims);
export const amax = (x, axis, opts = {}) => axisOp('amax', x, axis === undefined || axis === null ? ALL : axis, opts.keepDims);
export const amin = (x, axis, opts = {}) => axisOp('amin', x, axis === undefined || axis === null ? ALL : axis, opts.keepDims);
export const softmax = (x, axis = -1) => axisOp('softmax', x, axis, false);
export const logSoftmax = (x, axis = -1) => axisOp('logSoftmax', x, axis, false);
/** Softmax over the last axis with entries j > i of the last two axes masked out (attention scores). */
export const softmaxCausal = (x, axis) => axis === undefined || axis === -1 ? unary('softmaxCausal', 'softmaxCausal')(x) : axisOp('softmaxCausal', x, axis, false);
/** One class index per row of logits, drawn from softmax(logits) along `axis` (the last by default). */
export const categorical = (logits, axis) => axis === undefined || axis === -1 ? unary('categorical', 'categorical')(logits) : axisOp('categorical', logits, axis, false);

export const reshape = (x, shape) => shapeOp('reshape', x, shape, false);
export const permute = (x, perm) => shapeOp('permute', x, perm, false);
export const broadcastTo = (x, shape) => shapeOp('broadcastTo', x, shape, false);
export const sumToShape = (x, shape) => shapeOp('sumToShape', x, shape, false);
/** x [d0, ..., dn] -> [d0, ..., d(start-1), product of the rest]. */
export function flatten(x, startAxis = 1) {
  const s = x.shape;
  const a = startAxis < 0 ? startAxis + s.length : startAxis;
  return reshape(x, [...s.slice(0, a), s.slice(a).reduce((p, d) => p * d, 1)]);
}

function leaf(op, shape, dtype, v) {
  const g = graphOf(), [f, l] = site(), s = new Scratch();
  try { return wrap(g, core._tgw_leaf(g, op, s.i32(shape), shape.length, dtypeCode(dtype), v || 0, f, l)); } finally { s.free(); }
}
export const full = (shape, value) => leaf(0, shape, 'f32', value);
export const zeros = (shape, dtype = 'f32') => leaf(1, shape, dtype, 0);
export const ones = (shape, dtype = 'f32') => leaf(2, shape, dtype, 0);
/** N(0, 1) draws of the given shape, new every step; no gradient. */
export const randn = shape => leaf(3, shape, 'f32', 0);
/** A scalar constant. */
export function scalar(v) { const g = graphOf(), [f, l] = site(); return wrap(g, core._tgw_scalar(g, v, f, l)); }
/** A constant tensor of the given shape (Float32Array or number[] values). */
export function constant(shape, values) {
  const g = graphOf(), [f, l] = site(), s = new Scratch();
  try { return wrap(g, core._tgw_constant(g, s.i32(shape), shape.length, s.bytes(Float32Array.from(values)), f, l)); } finally { s.free(); }
}
export function arange(n, dtype = 'i32') { const g = graphOf(), [f, l] = site(); return wrap(g, core._tgw_arange(g, n, dtypeCode(dtype), f, l)); }

export function cast(x, dtype) { const g = graphOf(x), [f, l] = site(); return wrap(g, core._tgw_cast(g, T(x, 'cast'), dtypeCode(dtype), f, l)); }
export function where(cond, a, b) {
  const g = graphOf(cond, a, b), [f, l] = site();
  const t = v => (typeof v === 'number' ? scalar(v) : v);
  return wrap(g, core._tgw_where(g, T(cond, 'where'), T(t(a), 'where'), T(t(b), 'where'), f, l));
}
/** a [..., M, K] @ b [K, N]; transposeA / transposeB read an operand transposed without a copy. */
export function matmulT(a, b, opts = {}) {
  const g = graphOf(a, b), [f, l] = site();
  return wrap(g, core._tgw_matmul_t(g, T(a, 'matmul'), T(b, 'matmul'), opts.transposeA ? 1 : 0, opts.transposeB ? 1 : 0, f, l));
}
export function oneHot(idx, depth, dtype = 'f32') {
  const g = graphOf(idx), [f, l] = site();
  return wrap(g, core._tgw_one_hot(g, T(idx, 'oneHot'), depth, dtypeCode(dtype), f, l));
}
/** Marks t as a capture: its value comes back with every step or run (result.captures). */
export function capture(name, t) {
  const g = graphOf(t), [f, l] = site(), s = new Scratch();
  try { return wrap(g, core._tgw_capture(g, T(t, 'capture'), s.str(name), f, l)); } finally { s.free(); }
}
export function clamp(x, lo, hi) { const g = graphOf(x), [f, l] = site(); return wrap(g, core._tgw_clamp(g, T(x, 'clamp'), lo, hi, f, l)); }
export function swapAxes(x, a, b) { const g = graphOf(x), [f, l] = site(); return wrap(g, core._tgw_swap_axes(g, T(x, 'swapAxes'), a, b, f, l)); }
export function narrow(x, axis, start, length) {
  const g = graphOf(x), [f, l] = site();
  return wrap(g, core._tgw_narrow(g, T(x, 'narrow'), axis, start, length, f, l));
}
function join(stack, xs, axis) {
  const g = graphOf(...xs), [f, l] = site(), s = new Scratch();
  try { return wrap(g, core._tgw_join(g, stack, s.i32(xs.map(x => T(x, stack ? 'stack' : 'concat'))), xs.length, axis, f, l)); } finally { s.free(); }
}
export const concat = (xs, axis = 0) => join(0, xs, axis);
export const stack = (xs, axis = 0) => join(1, xs, axis);
/** Pieces of x along `axis` of the given sizes (which sum to the axis). */
export function split(x, sizes, axis = 0) {
  const g = graphOf(x), [f, l] = site(), s = new Scratch();
  try {
    const out = s.alloc(4 * sizes.length);
    core._tgw_split(g, T(x, 'split'), axis, s.f64(sizes), sizes.length, out, f, l);
    return Array.from(core.HEAP32.subarray(out >> 2, (out >> 2) + sizes.length), id => wrap(g, id));
  } finally { s.free(); }
}
export function takeAlongAxis(x, idx, axis) {
  const g = graphOf(x, idx), [f, l] = site();
  return wrap(g, core._tgw_take_along_axis(g, T(x, 'takeAlongAxis'), T(idx, 'takeAlongAxis'), axis, f, l));
}
const REDUCTIONS = { mean: 0, sum: 1, none: 2 };
function lossOp(nll, x, targets, opts) {
  const r = REDUCTIONS[opts.reduction || 'mean'];
  if (r === undefined) throw new TypeError(`reduction '${opts.reduction}': mean, sum or none`);
  const g = graphOf(x, targets), [f, l] = site();
  return wrap(g, core._tgw_loss(g, nll, T(x, 'loss'), T(targets, 'loss'), r, f, l));
}
/** Cross-entropy of raw logits [..., V] against i32 targets [...] (log-softmax and NLL fused). */
export const crossEntropy = (logits, targets, opts = {}) => lossOp(0, logits, targets, opts);
export const nllLoss = (logProbs, targets, opts = {}) => lossOp(1, logProbs, targets, opts);
export function layerNorm(x, gain, bias, eps = 1e-5) {
  const g = graphOf(x), [f, l] = site();
  return wrap(g, core._tgw_layer_norm(g, T(x, 'layerNorm'), T(gain, 'layerNorm'), T(bias, 'layerNorm'), eps, f, l));
}
export function rmsNorm(x, gain, eps = 1e-6) {
  const g = graphOf(x), [f, l] = site();
  return wrap(g, core._tgw_rms_norm(g, T(x, 'rmsNorm'), T(gain, 'rmsNorm'), eps, f, l));
}
/** x [..., T, H*Dh] -> [..., H, T, Dh]. */
export function splitHeads(x, heads) { const g = graphOf(x), [f, l] = site(); return wrap(g, core._tgw_split_heads(g, T(x, 'splitHeads'), heads, f, l)); }
const pair = (v, d) => (v === undefined ? [d, d] : typeof v === 'number' ? [v, v] : v);
/** x [N, C, H, W] with w [O, C/groups, kH, kW] -> [N, O, Ho, Wo]. */
export function conv2d(x, w, opts = {}) {
  const g = graphOf(x, w), [f, l] = site(), [sh, sw] = pair(opts.stride, 1), [ph, pw] = pair(opts.padding, 0);
  const b = opts.bias ? T(opts.bias, 'conv2d') : -1;
  return wrap(g, core._tgw_conv2d(g, T(x, 'conv2d'), T(w, 'conv2d'), b, sh, sw, ph, pw, opts.groups || 1, f, l));
}
export function maxPool2d(x, k, opts = {}) {
  const g = graphOf(x), [f, l] = site(), [kh, kw] = pair(k, 1), [sh, sw] = pair(opts.stride, 0), [ph, pw] = pair(opts.padding, 0);
  return wrap(g, core._tgw_max_pool2d(g, T(x, 'maxPool2d'), kh, kw, sh || kh, sw || kw, ph, pw, f, l));
}
export function nearestUpsample2d(x, factor) {
  const g = graphOf(x), [f, l] = site();
  return wrap(g, core._tgw_upsample2d(g, T(x, 'nearestUpsample2d'), factor, f, l));
}

// ---- modules and params ---------------------------------------------------------

const INIT_KINDS = { randn: 0, zeros: 1, ones: 2, kaiming: 3, literal: 4 };
/** Param initializers: randn({scale}) (std 0.02 by default), zeros(), ones(), kaiming({gain}), literal(values). */
export const init = {
  randn: (opts = {}) => ({ kind: 'randn', scale: opts.scale ?? 0.02 }),
  zeros: () => ({ kind: 'zeros' }),
  ones: () => ({ kind: 'ones' }),
  kaiming: (opts = {}) => ({ kind: 'kaiming', gain: opts.gain }),
  literal: data => ({ kind: 'literal', data: Float32Array.from(data) }),
};

class Param {
  constructor(shape, opts) {
    this.shape = Array.from(shape);
    this.dtype = opts.dtype || 'f32';
    this.init = opts.init || init.randn();
    this.decay = opts.decay;
    Object.freeze(this);
  }
}

/**
 * A tree of params: subclass it, declare params with this.param(shape,
 * opts) and child modules as fields (arrays of modules too). A param's name
 * is its path in the tree ("layers.0.attn.q.W"). Inside a traced function
 * the model's params are Tensors.
 */
export class Module {
  param(shape, opts = {}) { return new Param(shape, opts); }
}

// [name, Param] in the order the fields were declared.
function paramsOf(model) {
  const out = [];
  const walk = (v, path) => {
    if (v instanceof Param) out.push([path, v]);
    else if (v instanceof Module || Array.isArray(v))
      for (const k of Object.keys(v)) walk(v[k], path ? `${path}.${k}` : k);
  };
  if (!(model instanceof Module)) throw new TypeError('compile: model must be a Module');
  walk(model, '');
  return out;
}

// A copy of the model whose params are the graph's tensors.
function materialize(model, g, uses) {
  let i = 0;
  const copy = v => {
    if (v instanceof Param) return uses[i++];
    if (Array.isArray(v)) return v.map(copy);
    if (v instanceof Module) {
      const m = Object.create(Object.getPrototypeOf(v));
      for (const k of Object.keys(v)) m[k] = copy(v[k]);
      return m;
    }
    return v;
  };
  return copy(model);
}

// The model as a C model: its params declared in order.
function declareModel(model) {
  const params = paramsOf(model);
  const m = core._tg_model_new();
  const s = new Scratch();
  try {
    for (const [name, p] of params) {
      const kind = INIT_KINDS[p.init.kind];
      if (kind === undefined) throw new TypeError(`param ${name}: unknown init '${p.init.kind}'`);
      const n = p.shape.reduce((a, d) => a * d, 1);
      let values = 0;
      if (kind === 4) {
        if (p.init.data.length !== n) throw new TensorgradError(`param ${name}: init.literal has ${p.init.data.length} values for ${n} elements`, 'TG_ERR_SIZE');
        values = s.bytes(p.init.data);
      }
      const scale = kind === 0 ? p.init.scale : kind === 3 ? p.init.gain || 0 : 0;
      const decay = p.decay === undefined ? -1 : p.decay ? 1 : 0;
      core._tgw_param(m, s.str(name), s.i32(p.shape), p.shape.length, dtypeCode(p.dtype), kind, scale, values, decay);
    }
    const st = core._tg_model_status(m);
    if (st !== 0) { const msg = lastError(); core._tg_model_free(m); throw new TensorgradError(msg, 'model'); }
  } finally { s.free(); }
  return { m, names: params.map(([n]) => n), params };
}

export class Linear extends Module {
  constructor(inDim, outDim, opts = {}) {
    super();
    this.inDim = inDim;
    this.outDim = outDim;
    this.W = this.param([inDim, outDim], { init: opts.init, decay: opts.decay });
    this.b = opts.bias === false ? null : this.param([outDim], { init: init.zeros() });
  }
  fwd(x) { const y = matmul(x, this.W); return this.b ? add(y, this.b) : y; }
}

export class LayerNorm extends Module {
  constructor(d, opts = {}) {
    super();
    this.d = d;
    this.eps = opts.eps ?? 1e-5;
    this.g = this.param([d], { init: init.ones(), decay: opts.decay ?? false });
    this.b = opts.bias === false ? null : this.param([d], { init: init.zeros(), decay: opts.decay ?? false });
  }
  fwd(x) { return layerNorm(x, this.g, this.b || zeros([this.d]), this.eps); }
}

export class RMSNorm extends Module {
  constructor(d, opts = {}) {
    super();
    this.d = d;
    this.eps = opts.eps ?? 1e-6;
    this.g = this.param([d], { init: init.ones(), decay: opts.decay ?? false });
  }
  fwd(x) { return rmsNorm(x, this.g, this.eps); }
}

export class Embedding extends Module {
  constructor(vocab, dim, opts = {}) {
    super();
    this.vocab = vocab;
    this.dim = dim;
    this.W = this.param([vocab, dim], { init: opts.init, decay: opts.decay });
  }
  fwd(idx) { return embedding(this.W, idx); }
}

export class Conv2d extends Module {
  constructor(inC, outC, kernelSize, opts = {}) {
    super();
    const [kh, kw] = pair(kernelSize, 1), groups = opts.groups || 1;
    this.stride = pair(opts.stride, 1);
    this.padding = pair(opts.padding, 0);
    this.groups = groups;
    this.W = this.param([outC, inC / groups, kh, kw], { init: opts.init, decay: opts.decay });
    this.b = opts.bias === false ? null : this.param([outC], { init: init.zeros() });
  }
  fwd(x) { return conv2d(x, this.W, { stride: this.stride, padding: this.padding, groups: this.groups, bias: this.b || undefined }); }
}

// ---- tracing: the C library calls back into JavaScript -------------------------

const traces = new Map();
let nextToken = 1;

// Called by the C trace function (web/src/bridge.c) with the graph to build.
function traceEntry(token, g) {
  const t = traces.get(token);
  const saved = tracing;
  tracing = g;
  const s = new Scratch();
  try {
    const [f, l] = [core._tgw_site(s.str('model')), 0];
    const uses = t.names.map((_, i) => wrap(g, core._tgw_use(g, i, f, l)));
    const inputs = {};
    for (const name of Object.keys(t.inputs)) inputs[name] = wrap(g, core._tgw_input(g, s.str(name), f, l));
    const out = t.fn(materialize(t.model, g, uses), inputs);
    if (!(out instanceof Tensor)) throw new TypeError(`the ${t.what} function must return a Tensor, got ${out === null ? 'null' : typeof out}`);
    return out.id;
  } catch (e) {
    t.error = e;
    return -1;
  } finally {
    s.free();
    tracing = saved;
  }
}

function filterEntry(token, which, name) {
  const t = traces.get(token);
  const fn = which === 0 ? t.decayFilter : t.normalizeFilter;
  try { return fn(name) ? 1 : 0; } catch (e) { t.error = e; return 0; }
}

// A thrown error of the traced function wins over the C status it caused.
function traceError(t, st) {
  if (t.error) { const e = t.error; t.error = null; throw e; }
  check(st, 'compile');
}

// ---- specs: inputs, optimizers, schedules -----------------------------------------

// {name: [B, 1]} or {name: {shape, dtype}}; null marks the batch dimension (forward specs).
function inputDecls(inputs, forward) {
  const out = [];
  for (const [name, d] of Object.entries(inputs || {})) {
    const shape = Array.isArray(d) ? d : d.shape;
    const dtype = Array.isArray(d) ? 'f32' : d.dtype || 'f32';
    if (!Array.isArray(shape)) throw new TypeError(`input '${name}': a shape array or {shape, dtype}`);
    const nulls = shape.filter(v => v === null).length;
    if (nulls && (!forward || nulls > 1)) throw new TypeError(`input '${name}': ${forward ? 'one null (the batch) at most' : 'null dimensions are for forward specs'}`);
    out.push({ name, dtype, shape: shape.map(v => (v === null ? -1 : v)) });
  }
  return out;
}

function writeInputs(s, decls) {
  const names = s.alloc(4 * Math.max(decls.length, 1)), dims = new Int32Array(6 * decls.length);
  decls.forEach((d, i) => { core.HEAPU32[(names >> 2) + i] = s.str(d.name); dims.set(d.shape.slice(0, 6), 6 * i); });
  return [decls.length, names, s.i32(decls.map(d => dtypeCode(d.dtype))), s.i32(decls.map(d => d.shape.length)), s.i32(dims)];
}

const LR_KINDS = { constant: 0, linear: 1, cosineAnnealing: 2, warmup: 3, staircase: 4, multiStep: 5 };
/** Learning-rate schedules (a number is a constant rate). */
export const lr = {
  linear: o => ({ kind: 'linear', ...o }),
  cosineAnnealing: o => ({ kind: 'cosineAnnealing', ...o }),
  warmup: o => ({ kind: 'warmup', ...o }),
  staircase: o => ({ kind: 'staircase', ...o }),
  multiStep: o => ({ kind: 'multiStep', ...o }),
};
function lrList(x) {
  if (typeof x === 'number') return [0, x, 0, 0, 0, 0, 0, 0];
  const k = LR_KINDS[x && x.kind];
  if (k === undefined) throw new TypeError(`lr: a number or a schedule from lr.* (got ${JSON.stringify(x)})`);
  const ms = x.milestones || [];
  const head = [k, x.peak, x.final ?? 0, x.gamma ?? 0, x.steps ?? 0, x.every ?? 0, x.startStep ?? 0, ms.length, ...ms];
  return k === 3 ? head.concat(lrList(x.after)) : head;
}
const OPT_KINDS = { adam: 1, adamw: 2, sgd: 3 };
function optimList(o) {
  const k = OPT_KINDS[o && o.kind];
  if (k === undefined) throw new TypeError("optimizer: {kind: 'adam' | 'adamw' | 'sgd', lr, ...}");
  if (k === 2 && !(o.weightDecay > 0)) throw new TypeError("optimizer 'adamw' needs weightDecay > 0 (use 'adam' for none)");
  const norm = o.normalizeGrads === undefined || o.normalizeGrads === false ? 0 : typeof o.normalizeGrads === 'function' ? 2 : 1;
  return [k, o.beta1 ?? 0.9, o.beta2 ?? 0.999, o.eps ?? 1e-8, o.weightDecay ?? 0, o.momentum ?? 0, o.nesterov ? 1 : 0,
    o.clipGradNorm ?? 0, norm, o.decayFilter ? 1 : 0];
}

const BACKENDS = { cpu: 0, webgpu: 1 };
async function chooseBackends(requested) {
  const b = requested || 'auto';
  if (b === 'cpu') return ['cpu'];
  if (b !== 'webgpu' && b !== 'auto') throw new TypeError(`backend '${b}': 'auto', 'webgpu' or 'cpu'`);
  const gpu = await hostGpu();
  if (!gpu) {
    if (b === 'webgpu') throw new TensorgradError('webgpu: unavailable: no WebGPU here (navigator.gpu, or npm\'s webgpu in Node)', 'TG_ERR_BACKEND');
    return ['cpu'];
  }
  core.gpu = gpu;
  return b === 'webgpu' ? ['webgpu'] : ['webgpu', 'cpu'];
}
const unavailable = e => e instanceof TensorgradError && /webgpu: unavailable/.test(e.message);

// ---- results -----------------------------------------------------------------

/** The captures of a step or run: get(name), shape(name), has(name), names(). */
export class Captures {
  constructor(data, shapes) { this.data = data; this.shapes = shapes; }
  get(name) {
    if (!this.data.has(name)) throw new Error(`Captures.get: '${name}' not present. Known: ${this.names().join(', ') || '(none)'}`);
    return this.data.get(name);
  }
  shape(name) {
    if (!this.shapes.has(name)) throw new Error(`Captures.shape: '${name}' not present. Known: ${this.names().join(', ') || '(none)'}`);
    return this.shapes.get(name);
  }
  has(name) { return this.data.has(name); }
  names() { return [...this.data.keys()].sort(); }
}

function typed(dtype, n) { return dtype === 'f32' ? new Float32Array(n) : new Int32Array(n); }

// The captures of session or forward h, read back (kind: 'session' | 'forward').
async function readCaptures(kind, h) {
  const data = new Map(), shapes = new Map(), s = new Scratch();
  try {
    const namePtr = s.alloc(4), dims = s.alloc(24), dt = s.alloc(4);
    for (let i = 0; ; i++) {
      const rank = core[`_tgw_${kind}_capture`](h, i, namePtr, dims, dt);
      const np = core.HEAPU32[namePtr >> 2];
      if (!np) break;
      if (rank < 0) continue;
      const name = core.UTF8ToString(np), shape = Array.from(core.HEAP32.subarray(dims >> 2, (dims >> 2) + rank));
      const n = shape.reduce((a, d) => a * d, 1), dtype = DTYPES[core.HEAP32[dt >> 2]];
      const buf = s.alloc(4 * n), nameC = s.str(name);
      check(await callAsync(`tgw_${kind}_read`, h, nameC, buf, n), 'capture');
      const out = typed(dtype, n);
      out.set(dtype === 'f32' ? core.HEAPF32.subarray(buf >> 2, (buf >> 2) + n) : core.HEAP32.subarray(buf >> 2, (buf >> 2) + n));
      data.set(name, out);
      shapes.set(name, shape);
    }
  } finally { s.free(); }
  return new Captures(data, shapes);
}

// Feeds from a record of typed arrays, in the order of decls (checked by the library).
function writeFeeds(s, decls, record, api) {
  if (!record || typeof record !== 'object') throw new TypeError(`${api}: expected a record of typed arrays`);
  const known = new Set(decls.map(d => d.name));
  for (const k of Object.keys(record)) if (!known.has(k)) throw new TensorgradError(`${api}: unknown input '${k}' (inputs: ${[...known].join(', ')})`, 'TG_ERR_NAME');
  decls.forEach((d, i) => {
    const a = record[d.name];
    if (!a) throw new TensorgradError(`${api}: missing input '${d.name}'`, 'TG_ERR_NAME');
    const want = d.dtype === 'f32' ? Float32Array : Int32Array;
    if (!(a instanceof want)) throw new TypeError(`${api}: input '${d.name}' is ${d.dtype}: pass a ${want.name}`);
    core._tgw_feed(i, s.str(d.name), s.bytes(a), a.length, dtypeCode(d.dtype));
  });
  return decls.length;
}

// Every param of a collection (download), name -> typed array.
function collection(st) {
  if (!st) throw new TensorgradError(lastError(), 'download');
  const out = {}, shapes = {}, s = new Scratch();
  try {
    const dt = s.alloc(4), rank = s.alloc(4), dims = s.alloc(24), data = s.alloc(4);
    const n = core._tg_safetensors_count(st);
    for (let i = 0; i < n; i++) {
      const name = core.UTF8ToString(core._tgw_st_tensor(st, i, dt, rank, dims, data));
      const shape = Array.from(core.HEAP32.subarray(dims >> 2, (dims >> 2) + core.HEAP32[rank >> 2]));
      const count = shape.reduce((a, d) => a * d, 1), p = core.HEAPU32[data >> 2], dtype = DTYPES[core.HEAP32[dt >> 2]];
      const arr = typed(dtype, count);
      arr.set(dtype === 'f32' ? core.HEAPF32.subarray(p >> 2, (p >> 2) + count) : core.HEAP32.subarray(p >> 2, (p >> 2) + count));
      out[name] = arr;
      shapes[name] = shape;
    }
  } finally { s.free(); core._tg_safetensors_free(st); }
  return { tensors: out, shapes };
}

function writeParams(s, params, record, api) {
  const names = params.map(([n]) => n);
  const known = new Set(names);
  for (const k of Object.keys(record)) if (!known.has(k)) throw new TensorgradError(`${api}: unknown param '${k}'`, 'TG_ERR_NAME');
  let i = 0;
  for (const [name, p] of params) {
    const a = record[name];
    if (!a) throw new TensorgradError(`${api}: missing param '${name}' (every param, as downloadParams gives them)`, 'TG_ERR_NAME');
    core._tgw_feed(i++, s.str(name), s.bytes(a), a.length, dtypeCode(p.dtype));
  }
  return i;
}

// A file in the module's memory file system, for the C functions that take a path.
let tmpFiles = 0;
const tmpPath = () => `/tmp/tensorgrad-${++tmpFiles}.safetensors`;
async function saveVia(fn, h) {
  const path = tmpPath(), s = new Scratch();
  try {
    check(await callAsync(fn, h, s.str(path)), fn);
    return core.FS.readFile(path);
  } finally { s.free(); try { core.FS.unlink(path); } catch (e) { /* not written */ } }
}
async function loadVia(fn, h, bytes) {
  const path = tmpPath(), s = new Scratch();
  try {
    core.FS.writeFile(path, bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes));
    check(await callAsync(fn, h, s.str(path)), fn);
  } finally { s.free(); try { core.FS.unlink(path); } catch (e) { /* gone */ } }
}

function planStats(kind, h) {
  const s = new Scratch();
  try {
    const p = s.alloc(8 * 12);
    if (core[`_tgw_${kind}_stats`](h, p) !== 0) return null;
    const v = Array.from(core.HEAPF64.subarray(p >> 3, (p >> 3) + 12));
    const keys = ['plannedBytes', 'naiveBytes', 'paramBytes', 'gradBytes', 'stateBytes', 'inputBytes', 'scratchBytes',
      'workspaceBytes', 'nodes', 'kernels', 'dispatches', 'writebacks'];
    return Object.fromEntries(keys.map((k, i) => [k, v[i]]));
  } finally { s.free(); }
}

function adapterInfo() {
  const s = new Scratch();
  try {
    const p = s.alloc(4096);
    return core._tgw_webgpu_info(p, 4096) === 0 ? JSON.parse(core.UTF8ToString(p)) : null;
  } finally { s.free(); }
}

// ---- compile: training ----------------------------------------------------------

/**
 * Compiles a training step: traces loss(model, inputs), appends the
 * gradient and the optimizer, plans and compiles the kernels.
 * spec: {model, loss, inputs, optimizer, seed?, backend?: 'auto' | 'webgpu' | 'cpu', checkNumerics?}.
 */
export function compile(spec) {
  return (async () => {
    await configure();
    return serial(() => compileTraining(spec));
  })();
}

async function compileTraining(spec) {
  const decls = inputDecls(spec.inputs, false);
  const token = nextToken++;
  const model = declareModel(spec.model);
  const t = { fn: spec.loss, model: spec.model, names: model.names, inputs: spec.inputs, what: 'loss',
    decayFilter: spec.optimizer && spec.optimizer.decayFilter,
    normalizeFilter: spec.optimizer && typeof spec.optimizer.normalizeGrads === 'function' ? spec.optimizer.normalizeGrads : null };
  if (typeof spec.loss !== 'function') throw new TypeError('compile: loss must be a function (model, inputs) => Tensor');
  traces.set(token, t);
  const seed = spec.seed === undefined ? -1 : spec.seed;
  let lastErr = null;
  for (const backend of await chooseBackends(spec.backend)) {
    const s = new Scratch();
    try {
      const out = s.alloc(4), o = optimList(spec.optimizer), l = lrList(spec.optimizer.lr);
      const st = await callAsync('tgw_session_new', model.m, token, ...writeInputs(s, decls), s.f64(o), s.f64(l), l.length, seed,
        BACKENDS[backend], spec.checkNumerics ? 1 : 0, out);
      traceError(t, st);
      return new CompiledTraining(core.HEAPU32[out >> 2], model, decls, token, spec, backend);
    } catch (e) {
      lastErr = e;
      if (!unavailable(e)) break;
    } finally { s.free(); }
  }
  traces.delete(token);
  core._tg_model_free(model.m);
  throw lastErr;
}

class CompiledTraining {
  constructor(h, model, decls, token, spec, backend) {
    this.h = h;
    this.model = model;
    this.decls = decls;
    this.token = token;
    this.spec = spec;
    this.forwards = new Set();
    /** 'webgpu' or 'cpu': where this session runs. */
    this.backend = backend;
    /** The adapter (WebGPU) or the CPU path, for status lines. */
    this.device = backend === 'webgpu' ? adapterInfo() : { name: `CPU (WebAssembly, ${core.UTF8ToString(core._tgw_cpu_path())})` };
    this.destroyed = false;
    this.staging = null;
  }
  /** Param names in model order. */
  get paramNames() { return this.model.names.slice(); }
  /** The seed params were drawn from (the spec's, or the one drawn for it). */
  get seed() { return this.h ? core._tgw_session_seed(this.h) : NaN; }
  /** The plan's totals: bytes, nodes, kernels, dispatches per step. */
  get stats() { return this.h ? planStats('session', this.h) : null; }
  get outputShape() { return []; }

  #live(api) { if (this.destroyed) throw new TensorgradError(`${api}: the session was destroyed`, 'TG_ERR_STATE'); }

  /** One step: forward, backward, update. Resolves to {kind: 'completed', loss, captures}, {kind: 'aborted'} or {kind: 'failed', error}. */
  step(inputs) {
    return serial(async () => {
      if (this.destroyed) return { kind: 'aborted' };
      const s = new Scratch();
      try {
        const n = writeFeeds(s, this.decls, inputs, 'step'), loss = s.alloc(4);
        check(await callAsync('tgw_session_step', this.h, n, loss), 'step');
        const value = core.HEAPF32[loss >> 2];
        const captures = await readCaptures('session', this.h);
        return { kind: 'completed', loss: value, captures };
      } catch (e) {
        return { kind: 'failed', error: e };
      } finally { s.free(); }
    });
  }

  /** Every param at once (strict: every name, nothing else). */
  uploadParams(record) {
    return serial(async () => {
      this.#live('uploadParams');
      const s = new Scratch();
      try { check(await callAsync('tgw_session_upload', this.h, writeParams(s, this.model.params, record, 'uploadParams')), 'uploadParams'); } finally { s.free(); }
    });
  }
  /** {name: Float32Array (Int32Array for i32 params)}, in model order. */
  downloadParams() {
    return serial(async () => {
      this.#live('downloadParams');
      return collection(await callAsync('tgw_session_download', this.h)).tensors;
    });
  }
  /** Params drawn again and optimizer state zeroed; {params: false} or {optimizer: false} keeps one. */
  reset(opts = {}) {
    return serial(async () => {
      this.#live('reset');
      check(await callAsync('tgw_session_reset', this.h, opts.params === false ? 1 : 0, opts.optimizer === false ? 1 : 0,
        opts.seed === undefined ? -1 : opts.seed), 'reset');
    });
  }
  /** A new schedule, from the next step. */
  setLR(rate) {
    return serial(async () => {
      this.#live('setLR');
      const s = new Scratch(), l = lrList(rate);
      try { check(await callAsync('tgw_session_set_lr', this.h, s.f64(l), l.length), 'setLR'); } finally { s.free(); }
    });
  }
  /** Swaps in a new model (any shapes), recompiling the loss and the attached forwards. */
  replaceModel(newModel, opts = {}) {
    return serial(async () => {
      this.#live('replaceModel');
      const model = declareModel(newModel), t = traces.get(this.token), s = new Scratch();
      const old = { model: t.model, names: t.names };
      t.model = newModel;
      t.names = model.names;
      for (const f of this.forwards) { const ft = traces.get(f.token); ft.model = newModel; ft.names = model.names; }
      try {
        let o = 0, l = [], nl = 0;
        if (opts.optimizer) {
          const ol = optimList(opts.optimizer);
          l = lrList(opts.optimizer.lr);
          o = s.f64(ol);
          nl = l.length;
          t.decayFilter = opts.optimizer.decayFilter;
          t.normalizeFilter = typeof opts.optimizer.normalizeGrads === 'function' ? opts.optimizer.normalizeGrads : null;
        }
        const st = await callAsync('tgw_session_replace', this.h, model.m, o, nl ? s.f64(l) : 0, nl, this.token,
          opts.seed === undefined ? -1 : opts.seed);
        traceError(t, st);
        core._tg_model_free(this.model.m);
        this.model = model;
      } catch (e) {
        t.model = old.model;
        t.names = old.names;
        for (const f of this.forwards) { const ft = traces.get(f.token); ft.model = old.model; ft.names = old.names; }
        core._tg_model_free(model.m);
        throw e;
      } finally { s.free(); }
    });
  }
  /** A forward function sharing this session's params: {forward, inputs, output?}. */
  attach(spec) {
    return serial(async () => {
      this.#live('attach');
      const f = await compileForwardOn(this, spec);
      this.forwards.add(f);
      return f;
    });
  }
  /** The params as safetensors bytes (loadParams takes them back). */
  saveParams() { return serial(() => { this.#live('saveParams'); return saveVia('tg_session_save_params', this.h); }); }
  loadParams(bytes) { return serial(() => { this.#live('loadParams'); return loadVia('tg_session_load_params', this.h, bytes); }); }
  /** The whole training state (params, optimizer state, step count) as safetensors bytes. */
  saveCheckpoint() { return serial(() => { this.#live('saveCheckpoint'); return saveVia('tg_session_save', this.h); }); }
  loadCheckpoint(bytes) { return serial(() => { this.#live('loadCheckpoint'); return loadVia('tg_session_load', this.h, bytes); }); }
  /** Frees the session and its attached forwards. */
  destroy() {
    if (this.destroyed) return Promise.resolve();
    this.destroyed = true;
    return serial(async () => {
      for (const f of this.forwards) await f.release();
      await callAsync('tg_session_free', this.h);
      core._tg_model_free(this.model.m);
      traces.delete(this.token);
      this.h = 0;
    });
  }
}

// ---- compile: forward ----------------------------------------------------------------

/** A forward session with params of its own: {model, forward, inputs, seed?, backend?, output?}. */
export function compileForward(spec) {
  return (async () => {
    await configure();
    return serial(() => compileForwardOn(null, spec));
  })();
}

async function compileForwardOn(train, spec) {
  const decls = inputDecls(spec.inputs, true);
  if (typeof spec.forward !== 'function') throw new TypeError('forward: a function (model, inputs) => Tensor');
  const token = nextToken++;
  const model = train ? train.model : declareModel(spec.model);
  const t = { fn: spec.forward, model: train ? train.spec.model : spec.model, names: model.names, inputs: spec.inputs, what: 'forward' };
  if (train) t.model = traces.get(train.token).model;
  traces.set(token, t);
  let lastErr = null;
  const backends = train ? [train.backend] : await chooseBackends(spec.backend);
  for (const backend of backends) {
    const s = new Scratch();
    try {
      const out = s.alloc(4);
      const st = await callAsync('tgw_forward_new', train ? train.h : 0, train ? 0 : model.m, token, ...writeInputs(s, decls),
        spec.seed === undefined ? 0 : spec.seed, BACKENDS[backend], out);
      traceError(t, st);
      return new CompiledForward(core.HEAPU32[out >> 2], model, decls, token, train, backend);
    } catch (e) {
      lastErr = e;
      if (!unavailable(e)) break;
    } finally { s.free(); }
  }
  traces.delete(token);
  if (!train) core._tg_model_free(model.m);
  throw lastErr;
}

class CompiledForward {
  constructor(h, model, decls, token, train, backend) {
    this.h = h;
    this.model = model;
    this.decls = decls;
    this.token = token;
    this.train = train;
    this.backend = backend;
    this.destroyed = false;
  }
  get paramNames() { return (this.train ? this.train.model : this.model).names.slice(); }
  get stats() { return this.h ? planStats('forward', this.h) : null; }
  #params() { return (this.train ? this.train.model : this.model).params; }

  // The batch size: from the first input with a null dimension.
  #batch(inputs) {
    for (const d of this.decls) {
      const at = d.shape.indexOf(-1);
      if (at < 0 || !inputs[d.name]) continue;
      const rest = d.shape.reduce((a, v) => (v === -1 ? a : a * v), 1);
      return Math.floor(inputs[d.name].length / rest);
    }
    return 1;
  }
  /** Runs the forward: {kind: 'completed', output, captures} (output a Float32Array or Int32Array), or 'aborted' / 'failed'. */
  run(inputs) {
    return serial(async () => {
      if (this.destroyed || (this.train && this.train.destroyed)) return { kind: 'aborted' };
      const s = new Scratch();
      try {
        const n = writeFeeds(s, this.decls, inputs, 'run');
        check(await callAsync('tgw_forward_run', this.h, this.#batch(inputs), n), 'run');
        const dims = s.alloc(24), dt = s.alloc(4);
        const rank = core._tgw_forward_output_info(this.h, dims, dt);
        const shape = Array.from(core.HEAP32.subarray(dims >> 2, (dims >> 2) + Math.max(rank, 0)));
        const count = shape.reduce((a, d) => a * d, 1), dtype = DTYPES[core.HEAP32[dt >> 2]];
        const buf = s.alloc(4 * count);
        check(await callAsync('tgw_forward_output', this.h, buf, count), 'run');
        const output = typed(dtype === 'bool' ? 'i32' : dtype, count);
        output.set(dtype === 'f32' ? core.HEAPF32.subarray(buf >> 2, (buf >> 2) + count) : core.HEAP32.subarray(buf >> 2, (buf >> 2) + count));
        const captures = await readCaptures('forward', this.h);
        return { kind: 'completed', output, shape, captures };
      } catch (e) {
        return { kind: 'failed', error: e };
      } finally { s.free(); }
    });
  }
  uploadParams(record) {
    return serial(async () => {
      const s = new Scratch();
      try { check(await callAsync('tgw_forward_upload', this.h, writeParams(s, this.#params(), record, 'uploadParams')), 'uploadParams'); } finally { s.free(); }
    });
  }
  downloadParams() { return serial(async () => collection(await callAsync('tgw_forward_download', this.h)).tensors); }
  saveParams() { return serial(() => saveVia('tg_forward_save_params', this.h)); }
  loadParams(bytes) { return serial(() => loadVia('tg_forward_load_params', this.h, bytes)); }
  async release() {
    if (this.destroyed) return;
    this.destroyed = true;
    await callAsync('tg_forward_free', this.h);
    traces.delete(this.token);
    if (!this.train) core._tg_model_free(this.model.m);
    this.h = 0;
  }
  destroy() {
    if (this.train) this.train.forwards.delete(this);
    return serial(() => this.release());
  }
}

// ---- safetensors and device information -------------------------------------------

/** A safetensors file's tensors: {tensors: {name: Float32Array | Int32Array}, shapes: {name: number[]}}. */
export async function loadSafetensors(bytes) {
  await configure();
  return serial(async () => {
    const s = new Scratch();
    try {
      const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
      const p = s.bytes(u8);
      return collection(core._tgw_st_read(p, u8.length));
    } finally { s.free(); }
  });
}

/** Whether WebGPU is here and which adapter the library would use; {available: false, reason} otherwise. */
export async function checkWebGPU() {
  await configure();
  const gpu = await hostGpu();
  if (!gpu) return { available: false, reason: 'no navigator.gpu (and, in Node, no webgpu package)' };
  return serial(async () => {
    core.gpu = gpu;
    const s = new Scratch();
    try {
      const p = s.alloc(4096);
      const st = await callAsync('tgw_webgpu_info', p, 4096);
      if (st !== 0) return { available: false, reason: lastError() };
      return { available: true, adapter: JSON.parse(core.UTF8ToString(p)) };
    } finally { s.free(); }
  });
}

/** The library's version ("0.7.0"). */
export async function version() { await configure(); return core.UTF8ToString(core._tg_version()); }

/**
 * Wraps a one-argument async function so that at most one call runs and one
 * waits: a newer call displaces the waiting one, which resolves to
 * {kind: 'aborted'}; the others resolve to {kind: 'completed', value} (a
 * rejection passes through).
 */
export function singleFlight(fn) {
  let active = null, pending = null;
  const call = arg => {
    if (!active) {
      const p = Promise.resolve().then(() => fn(arg));
      active = p;
      p.catch(() => {}).finally(() => {
        active = null;
        if (pending) { const next = pending; pending = null; call(next.arg).then(next.resolve, next.reject); }
      });
      return p.then(value => ({ kind: 'completed', value }));
    }
    if (pending) pending.resolve({ kind: 'aborted' });
    return new Promise((resolve, reject) => { pending = { arg, resolve, reject }; });
  };
  return call;
}
