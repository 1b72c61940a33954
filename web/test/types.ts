// Type-checked (never run) by web/test/package.mjs against the packed
// package's index.d.ts: the API as a TypeScript user writes it.
import {
  Module, Linear, LayerNorm, Embedding, compile, lr, init, relu, add, mul, matmulT, softmaxCausal, crossEntropy,
  capture, splitHeads, mergeHeads, matmul, sum, constant, arange, embedding, type Tensor, type StepResult,
} from 'tensorgrad-wasm';

class Tiny extends Module {
  emb = new Embedding(12, 16);
  pos: Tensor = this.param([8, 16], { init: init.randn({ scale: 0.02 }) });
  ln = new LayerNorm(16);
  q = new Linear(16, 16, { bias: false });
  out = new Linear(16, 12);
}

function loss(m: Tiny, { tokens, targets }: { tokens: Tensor; targets: Tensor }): Tensor {
  const x = add(m.emb.fwd(tokens), embedding(m.pos, arange(8)));
  const q = splitHeads(m.q.fwd(m.ln.fwd(x)), 2);
  const att = capture('att', softmaxCausal(mul(matmulT(q, q, { transposeB: true }), 0.25)));
  const y = m.out.fwd(relu(mergeHeads(matmul(att, q))));
  const ce = crossEntropy(y, targets, { reduction: 'none' });
  return mul(sum(mul(ce, constant([8], [0, 0, 0, 0, 0, 1, 1, 1]))), 1 / 12);
}

export async function main(): Promise<number> {
  const train = await compile({
    model: new Tiny(),
    loss,
    inputs: { tokens: { shape: [4, 8], dtype: 'i32' }, targets: { shape: [4, 8], dtype: 'i32' } },
    optimizer: { kind: 'adamw', lr: lr.linear({ peak: 5e-3, final: 5e-4, steps: 100 }), weightDecay: 0.01, clipGradNorm: 1 },
    backend: 'auto',
  });
  const r: StepResult = await train.step({ tokens: new Int32Array(32), targets: new Int32Array(32) });
  const infer = await train.attach({ forward: (m: Tiny, { tokens }) => m.out.fwd(m.emb.fwd(tokens)), inputs: { tokens: { shape: [null, 8], dtype: 'i32' } } });
  const out = await infer.run({ tokens: new Int32Array(8) });
  const params = await train.downloadParams();
  const bytes: Uint8Array = await train.saveParams();
  await train.setLR(1e-3);
  await train.destroy();
  return (r.kind === 'completed' ? r.loss + r.captures.get('att').length : 0) + (out.kind === 'completed' ? out.output.length : 0) +
    Object.keys(params).length + bytes.length + train.stats!.dispatches;
}
