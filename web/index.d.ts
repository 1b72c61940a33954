// Types of tensorgrad-wasm (index.js). The API follows the TypeScript
// tensorgrad's where the concepts match; see README.md.

export type Dtype = 'f32' | 'i32' | 'bool';
export type Shape = readonly number[];

/** A tensor of the graph being traced (inside a loss or forward function). */
export declare class Tensor {
  /** The shape, or null for a tensor an earlier error left invalid. */
  readonly shape: number[] | null;
  readonly dtype: Dtype | null;
}

/** A failure of the library: the message names the op, the shapes and the call site. */
export declare class TensorgradError extends Error {
  /** The C status name ("shape", "arg", "name", "backend", "limit", "numeric", ...). */
  readonly status: string;
}

// ---- set-up ----

export interface ConfigureOptions {
  /** A GPU object (navigator.gpu, or npm webgpu's create()) instead of the default; null: the CPU only. */
  gpu?: unknown;
  /** Node: flags for npm webgpu's create() when the library makes the GPU object itself. */
  dawnFlags?: string[];
  /** Where tensorgrad_core.wasm is served (default: beside index.js). */
  wasmUrl?: string | URL;
  /** The library's stdout and stderr lines (default: console.log, console.warn). */
  print?: (line: string) => void;
  printErr?: (line: string) => void;
}
/** Optional: loads the WebAssembly module and picks the GPU; call it before the first compile to change the defaults. */
export declare function configure(opts?: ConfigureOptions): Promise<unknown>;
/** Whether there is a WebGPU adapter here and which one sessions would use. */
export declare function checkWebGPU(): Promise<
  | { available: true; adapter: { name: string; vendor: string; architecture: string; description: string; type: string; features: string } }
  | { available: false; reason: string }
>;
/** The C library's version ("0.7.0"). */
export declare function version(): Promise<string>;

// ---- modules and params ----

export type InitSpec =
  | { readonly kind: 'randn'; readonly scale: number }
  | { readonly kind: 'zeros' }
  | { readonly kind: 'ones' }
  | { readonly kind: 'kaiming'; readonly gain?: number }
  | { readonly kind: 'literal'; readonly data: Float32Array };
export declare const init: {
  /** Normal(0, scale), scale 0.02 by default. */
  randn(opts?: { scale?: number }): InitSpec;
  zeros(): InitSpec;
  ones(): InitSpec;
  /** Normal(0, gain / sqrt(fan_in)), gain sqrt(2) by default. */
  kaiming(opts?: { gain?: number }): InitSpec;
  literal(data: ArrayLike<number>): InitSpec;
};
export interface ParamOptions {
  dtype?: 'f32' | 'i32';
  /** Default init.randn(). */
  init?: InitSpec;
  /** Weight decay (AdamW's, SGD's): default on for randn/kaiming/literal, off for zeros/ones. */
  decay?: boolean;
}
/**
 * A tree of params: declare them with this.param(shape) and child modules
 * (or arrays of them) as fields. A param's name is its path: "layers.0.attn.q.W".
 * Inside a traced function the model's params are Tensors.
 */
export declare abstract class Module {
  protected param(shape: Shape, opts?: ParamOptions): Tensor;
}
export interface LinearOptions { bias?: boolean; init?: InitSpec; decay?: boolean }
/** y = x @ W + b; W [in, out], b [out]. */
export declare class Linear extends Module {
  constructor(inDim: number, outDim: number, opts?: LinearOptions);
  W: Tensor;
  b: Tensor | null;
  fwd(x: Tensor): Tensor;
}
/** Over the last axis: g [d] (ones), b [d] (zeros); eps 1e-5. */
export declare class LayerNorm extends Module {
  constructor(d: number, opts?: { eps?: number; bias?: boolean; decay?: boolean });
  g: Tensor;
  b: Tensor | null;
  fwd(x: Tensor): Tensor;
}
/** Over the last axis: g [d] (ones); eps 1e-6. */
export declare class RMSNorm extends Module {
  constructor(d: number, opts?: { eps?: number; decay?: boolean });
  g: Tensor;
  fwd(x: Tensor): Tensor;
}
/** W [vocab, dim]; fwd(idx i32 [...]) -> [..., dim]. */
export declare class Embedding extends Module {
  constructor(vocab: number, dim: number, opts?: { init?: InitSpec; decay?: boolean });
  W: Tensor;
  fwd(idx: Tensor): Tensor;
}
export interface Conv2dOptions {
  stride?: number | readonly [number, number];
  padding?: number | readonly [number, number];
  groups?: number;
}
/** NCHW: W [out, in/groups, kH, kW], b [out]. */
export declare class Conv2d extends Module {
  constructor(inC: number, outC: number, kernelSize: number | readonly [number, number], opts?: Conv2dOptions & { bias?: boolean; init?: InitSpec; decay?: boolean });
  W: Tensor;
  b: Tensor | null;
  fwd(x: Tensor): Tensor;
}

// ---- ops (inside a traced function) ----

type Operand = Tensor | number;
export declare function add(a: Operand, b: Operand): Tensor;
export declare function sub(a: Operand, b: Operand): Tensor;
export declare function mul(a: Operand, b: Operand): Tensor;
export declare function div(a: Operand, b: Operand): Tensor;
export declare function min(a: Operand, b: Operand): Tensor;
export declare function max(a: Operand, b: Operand): Tensor;
/** bool tensors. */
export declare function less(a: Operand, b: Operand): Tensor;
export declare function greater(a: Operand, b: Operand): Tensor;
export declare function where(cond: Tensor, a: Operand, b: Operand): Tensor;
export declare function clamp(x: Tensor, lo: number, hi: number): Tensor;
export declare function neg(x: Tensor): Tensor;
export declare function sqrt(x: Tensor): Tensor;
export declare function rsqrt(x: Tensor): Tensor;
export declare function log(x: Tensor): Tensor;
export declare function exp(x: Tensor): Tensor;
export declare function relu(x: Tensor): Tensor;
export declare function abs(x: Tensor): Tensor;
export declare function square(x: Tensor): Tensor;
export declare function sin(x: Tensor): Tensor;
export declare function cos(x: Tensor): Tensor;
export declare function tanh(x: Tensor): Tensor;
export declare function sigmoid(x: Tensor): Tensor;
export declare function erf(x: Tensor): Tensor;
/** The exact erf form; {approximate: 'tanh'} for the tanh one. */
export declare function gelu(x: Tensor, opts?: { approximate?: 'none' | 'tanh' }): Tensor;
export declare function silu(x: Tensor): Tensor;
export declare function softplus(x: Tensor): Tensor;
export declare function leakyRelu(x: Tensor, alpha?: number): Tensor;
export declare function log1p(x: Tensor): Tensor;
export declare function expm1(x: Tensor): Tensor;
export declare function hardtanh(x: Tensor): Tensor;
export declare function stopGradient(x: Tensor): Tensor;
export declare function cast(x: Tensor, dtype: Dtype): Tensor;
export interface ReduceOptions { keepDims?: boolean }
/** Over `axis` (negative counts from the end), several axes, or every axis when left out. */
export declare function sum(x: Tensor, axis?: number | readonly number[] | null, opts?: ReduceOptions): Tensor;
export declare function mean(x: Tensor, axis?: number | readonly number[] | null, opts?: ReduceOptions): Tensor;
/** i32; the flattened tensor when axis is left out. */
export declare function argmax(x: Tensor, axis?: number | null, opts?: ReduceOptions): Tensor;
export declare function argmin(x: Tensor, axis?: number | null, opts?: ReduceOptions): Tensor;
export declare function amax(x: Tensor, axis?: number | null, opts?: ReduceOptions): Tensor;
export declare function amin(x: Tensor, axis?: number | null, opts?: ReduceOptions): Tensor;
export declare function softmax(x: Tensor, axis?: number): Tensor;
export declare function logSoftmax(x: Tensor, axis?: number): Tensor;
/** Softmax with entries j > i of the last two axes masked out (attention scores [..., T, T]). */
export declare function softmaxCausal(x: Tensor, axis?: number): Tensor;
export declare function whereCausal(x: Tensor, value: number): Tensor;
/** One class index per row, drawn from softmax(logits) along axis (the last by default); i32. */
export declare function categorical(logits: Tensor, axis?: number): Tensor;
/** A view; one -1 allowed. */
export declare function reshape(x: Tensor, shape: Shape): Tensor;
export declare function permute(x: Tensor, perm: Shape): Tensor;
export declare function swapAxes(x: Tensor, a: number, b: number): Tensor;
export declare function broadcastTo(x: Tensor, shape: Shape): Tensor;
export declare function sumToShape(x: Tensor, shape: Shape): Tensor;
export declare function flatten(x: Tensor, startAxis?: number): Tensor;
/** a [..., M, K] @ b [K, N] (or batched b [..., K, N]). */
export declare function matmul(a: Tensor, b: Tensor): Tensor;
/** matmul with a or b read transposed, without a copy. */
export declare function matmulT(a: Tensor, b: Tensor, opts?: { transposeA?: boolean; transposeB?: boolean }): Tensor;
export declare function oneHot(idx: Tensor, depth: number, dtype?: Dtype): Tensor;
export declare function embedding(table: Tensor, idx: Tensor): Tensor;
export declare function takeAlongAxis(x: Tensor, idx: Tensor, axis: number): Tensor;
export declare function narrow(x: Tensor, axis: number, start: number, length: number): Tensor;
export declare function concat(xs: readonly Tensor[], axis?: number): Tensor;
export declare function stack(xs: readonly Tensor[], axis?: number): Tensor;
export declare function split(x: Tensor, sizes: readonly number[], axis?: number): Tensor[];
export interface LossOptions { reduction?: 'mean' | 'sum' | 'none' }
/** Raw logits [..., V] against i32 targets [...]: log-softmax and NLL fused. */
export declare function crossEntropy(logits: Tensor, targets: Tensor, opts?: LossOptions): Tensor;
export declare function nllLoss(logProbs: Tensor, targets: Tensor, opts?: LossOptions): Tensor;
/** mean((a - b)^2) over every element. */
export declare function mse(a: Tensor, b: Tensor): Tensor;
export declare function layerNorm(x: Tensor, gain: Tensor, bias: Tensor, eps?: number): Tensor;
export declare function rmsNorm(x: Tensor, gain: Tensor, eps?: number): Tensor;
/** [..., T, H*Dh] -> [..., H, T, Dh]; mergeHeads is its inverse. */
export declare function splitHeads(x: Tensor, heads: number): Tensor;
export declare function mergeHeads(x: Tensor): Tensor;
export declare function rope(x: Tensor, opts?: { base?: number }): Tensor;
export declare function dropout(x: Tensor, p: number): Tensor;
/** N(0, 1) draws, new every step; no gradient. */
export declare function randn(shape: Shape): Tensor;
export declare function zeros(shape: Shape, dtype?: Dtype): Tensor;
export declare function ones(shape: Shape, dtype?: Dtype): Tensor;
export declare function full(shape: Shape, value: number): Tensor;
export declare function scalar(value: number): Tensor;
export declare function constant(shape: Shape, values: ArrayLike<number>): Tensor;
export declare function arange(n: number, dtype?: Dtype): Tensor;
/** x [N, C, H, W] with w [O, C/groups, kH, kW] -> [N, O, Ho, Wo]. */
export declare function conv2d(x: Tensor, w: Tensor, opts?: Conv2dOptions & { bias?: Tensor }): Tensor;
export declare function maxPool2d(x: Tensor, k: number | readonly [number, number], opts?: { stride?: number | readonly [number, number]; padding?: number | readonly [number, number] }): Tensor;
export declare function nearestUpsample2d(x: Tensor, factor: number): Tensor;
/** Marks t as a capture: its value comes back with every step or run (result.captures). */
export declare function capture(name: string, t: Tensor): Tensor;

// ---- optimizers and schedules ----

export type LR =
  | number
  | { readonly kind: 'linear'; readonly peak: number; readonly final: number; readonly steps: number; readonly startStep?: number }
  | { readonly kind: 'cosineAnnealing'; readonly peak: number; readonly final: number; readonly steps: number; readonly startStep?: number }
  | { readonly kind: 'warmup'; readonly peak: number; readonly steps: number; readonly after: LR; readonly startStep?: number }
  | { readonly kind: 'staircase'; readonly peak: number; readonly every: number; readonly gamma: number; readonly startStep?: number }
  | { readonly kind: 'multiStep'; readonly peak: number; readonly milestones: readonly number[]; readonly gamma: number; readonly startStep?: number };
export declare const lr: {
  linear(o: { peak: number; final: number; steps: number; startStep?: number }): LR;
  cosineAnnealing(o: { peak: number; final: number; steps: number; startStep?: number }): LR;
  warmup(o: { peak: number; steps: number; after: LR; startStep?: number }): LR;
  staircase(o: { peak: number; every: number; gamma: number; startStep?: number }): LR;
  multiStep(o: { peak: number; milestones: readonly number[]; gamma: number; startStep?: number }): LR;
};
interface OptimizerCommon {
  lr: LR;
  /** Scale every gradient so their global norm is at most this. */
  clipGradNorm?: number;
  /** g / (||g|| + 1e-8) per param (or the params a filter accepts), before clipping. */
  normalizeGrads?: boolean | ((paramName: string) => boolean);
}
export type OptimizerConfig =
  | ({ kind: 'adam'; beta1?: number; beta2?: number; eps?: number } & OptimizerCommon)
  | ({ kind: 'adamw'; weightDecay: number; beta1?: number; beta2?: number; eps?: number; decayFilter?: (paramName: string) => boolean } & OptimizerCommon)
  | ({ kind: 'sgd'; momentum?: number; nesterov?: boolean; weightDecay?: number; decayFilter?: (paramName: string) => boolean } & OptimizerCommon);

// ---- compile ----

/** [B, 1] (f32), or {shape, dtype}; forward specs may mark the batch dimension null. */
export type InputDecl = readonly (number | null)[] | { readonly shape: readonly (number | null)[]; readonly dtype?: Dtype };
export type InputDecls = Record<string, InputDecl>;
type DtypeOf<D> = D extends { dtype: 'i32' } ? 'i32' : D extends { dtype: 'bool' } ? 'i32' : 'f32';
export type TypedInputs<I extends InputDecls> = { [K in keyof I]: DtypeOf<I[K]> extends 'i32' ? Int32Array : Float32Array };
export type InputsTensors<I extends InputDecls> = { [K in keyof I]: Tensor };
export type ForwardFn<M extends Module, I extends InputDecls> = (model: M, inputs: InputsTensors<I>) => Tensor;
export type Backend = 'auto' | 'webgpu' | 'cpu';

export interface TrainingSpec<M extends Module, I extends InputDecls> {
  model: M;
  /** Returns a scalar f32 loss. */
  loss: ForwardFn<M, I>;
  inputs: I;
  optimizer: OptimizerConfig;
  /** Param init and random ops; a fresh one when left out (train.seed reads it). */
  seed?: number;
  /** 'auto' (default): WebGPU when there is an adapter, else the CPU. */
  backend?: Backend;
  /** Check every kernel's output for NaN and Inf (slow: for debugging). */
  checkNumerics?: boolean;
}
export interface ForwardSpec<I extends InputDecls> {
  forward: ForwardFn<any, I>;
  inputs: I;
}

/** The captures of a step or run. */
export declare class Captures {
  get(name: string): Float32Array | Int32Array;
  shape(name: string): number[];
  has(name: string): boolean;
  names(): string[];
}
export type StepResult =
  | { kind: 'completed'; loss: number; captures: Captures }
  | { kind: 'aborted' }
  | { kind: 'failed'; error: Error };
export type RunResult =
  | { kind: 'completed'; output: Float32Array | Int32Array; shape: number[]; captures: Captures }
  | { kind: 'aborted' }
  | { kind: 'failed'; error: Error };

export interface PlanStats {
  plannedBytes: number; naiveBytes: number; paramBytes: number; gradBytes: number; stateBytes: number;
  inputBytes: number; scratchBytes: number; workspaceBytes: number;
  nodes: number; kernels: number; dispatches: number; writebacks: number;
}

export interface CompiledForward<I extends InputDecls = InputDecls> {
  readonly backend: 'webgpu' | 'cpu';
  readonly paramNames: readonly string[];
  /** The plan of the last batch size run. */
  readonly stats: PlanStats | null;
  run(inputs: TypedInputs<I>): Promise<RunResult>;
  uploadParams(params: Record<string, Float32Array | Int32Array>): Promise<void>;
  downloadParams(): Promise<Record<string, Float32Array | Int32Array>>;
  saveParams(): Promise<Uint8Array>;
  loadParams(bytes: Uint8Array | ArrayBuffer): Promise<void>;
  destroy(): Promise<void>;
}

export interface CompiledTraining<M extends Module = Module, I extends InputDecls = InputDecls> {
  /** Where it runs. */
  readonly backend: 'webgpu' | 'cpu';
  /** The WebGPU adapter, or the CPU path. */
  readonly device: { name: string; [key: string]: string };
  readonly paramNames: readonly string[];
  readonly seed: number;
  readonly outputShape: readonly number[];
  readonly stats: PlanStats | null;
  /** One step: forward, backward, update; the loss read back. Never rejects: failures come as {kind: 'failed'}. */
  step(inputs: TypedInputs<I>): Promise<StepResult>;
  /** Every param at once (strict: each name once, nothing else). */
  uploadParams(params: Record<string, Float32Array | Int32Array>): Promise<void>;
  downloadParams(): Promise<Record<string, Float32Array | Int32Array>>;
  /** Params drawn again and optimizer state zeroed; pass params: false or optimizer: false to keep one. */
  reset(opts?: { params?: boolean; optimizer?: boolean; seed?: number }): Promise<void>;
  setLR(lr: LR): Promise<void>;
  replaceModel(model: M, opts?: { seed?: number; optimizer?: OptimizerConfig }): Promise<void>;
  /** A forward function sharing this session's params (and device). */
  attach<I2 extends InputDecls>(spec: ForwardSpec<I2>): Promise<CompiledForward<I2>>;
  /** The params as safetensors bytes. */
  saveParams(): Promise<Uint8Array>;
  loadParams(bytes: Uint8Array | ArrayBuffer): Promise<void>;
  /** Params, optimizer state and step count as safetensors bytes. */
  saveCheckpoint(): Promise<Uint8Array>;
  loadCheckpoint(bytes: Uint8Array | ArrayBuffer): Promise<void>;
  destroy(): Promise<void>;
}

export declare function compile<M extends Module, I extends InputDecls>(spec: TrainingSpec<M, I>): Promise<CompiledTraining<M, I>>;
export declare function compileForward<M extends Module, I extends InputDecls>(
  spec: { model: M; forward: ForwardFn<M, I>; inputs: I; seed?: number; backend?: Backend },
): Promise<CompiledForward<I>>;

/** A safetensors file's tensors. */
export declare function loadSafetensors(bytes: Uint8Array | ArrayBuffer): Promise<{
  tensors: Record<string, Float32Array | Int32Array>;
  shapes: Record<string, number[]>;
}>;

export type SingleFlightResult<R> = { kind: 'completed'; value: R } | { kind: 'aborted' };
/** At most one call running and one waiting; a newer call displaces the waiting one (which resolves 'aborted'); rejections pass through. */
export declare function singleFlight<A, R>(fn: (arg: A) => Promise<R>): (arg: A) => Promise<SingleFlightResult<R>>;
