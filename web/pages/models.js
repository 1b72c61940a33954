// The two sample models of the pages (mlp-sin.html, addition.html), written
// against the package's API, and the data they train on. Each is a function
// of the library object (import * as tg from 'tensorgrad-wasm'), so the
// pages and the Node tests (web/test/train.mjs) share them. Param names,
// init and data follow the C examples (examples/sin.c, examples/addition.c),
// so the same seed gives the native build's losses.

// The examples' data generator: a 64-bit LCG (examples/common.c, ex_rand).
export class Lcg {
  constructor(state) { this.s = BigInt.asUintN(64, BigInt(state)); }
  next() {
    this.s = BigInt.asUintN(64, this.s * 6364136223846793005n + 1442695040888963407n);
    return Number(this.s >> 33n);
  }
  uniform() { return Math.fround(Math.floor(this.next() / 128) / 16777216); }
}

// ---- y = sin(x): a 1-64-64-1 ReLU MLP, batch 256, MSE, Adam 5e-3 ----------

export const SIN_B = 256;

export function sinModel(tg) {
  class MLP extends tg.Module {
    constructor(width = 64) {
      super();
      this.l1 = new tg.Linear(1, width);
      this.l2 = new tg.Linear(width, width);
      this.l3 = new tg.Linear(width, 1);
    }
  }
  const predict = (m, x) => m.l3.fwd(tg.relu(m.l2.fwd(tg.relu(m.l1.fwd(x)))));
  return {
    MLP,
    predict: (m, { x }) => predict(m, x),
    loss: (m, { x, y }) => tg.mse(predict(m, x), y),
    inputs: { x: [SIN_B, 1], y: [SIN_B, 1] },
    optimizer: { kind: 'adam', lr: 5e-3 },
  };
}

// A batch as examples/sin.c draws it (rng: an Lcg seeded seed * 2654435761 + 1).
export function sinBatch(rng, x = new Float32Array(SIN_B), y = new Float32Array(SIN_B)) {
  for (let i = 0; i < x.length; i++) {
    x[i] = Math.fround((rng.uniform() * 2 - 1) * Math.PI);
    y[i] = Math.fround(Math.sin(x[i]));
  }
  return { x, y };
}
export const sinRng = seed => new Lcg(BigInt(seed) * 2654435761n + 1n);

// ---- two-digit addition: a 3-layer transformer (examples/addition.c) -------
// "ab+cd=" -> the three sum digits, least significant first; V=12, D=64,
// 3 pre-LN blocks of 4 heads, T=8, B=128, tied embeddings, learned positions;
// AdamW 5e-3 -> 5e-4 over 1500 steps, weight decay 0.01, clip 1.0; the loss
// covers the 3 result digits only.

export const ADD = { V: 12, D: 64, LAYERS: 3, HEADS: 4, SEQ: 9, T: 8, B: 128, PLUS: 10, EQ: 11 };

export function additionModel(tg, batch = ADD.B) {
  const { V, D, LAYERS, HEADS, SEQ, T } = ADD;
  class Attention extends tg.Module {
    constructor() {
      super();
      for (const n of ['q', 'k', 'v', 'o']) this[n] = new tg.Linear(D, D, { bias: false });
    }
  }
  class Mlp extends tg.Module {
    constructor() { super(); this.up = new tg.Linear(D, 4 * D); this.down = new tg.Linear(4 * D, D); }
  }
  class Block extends tg.Module {
    constructor() {
      super();
      this.ln1 = new tg.LayerNorm(D);
      this.attn = new Attention();
      this.ln2 = new tg.LayerNorm(D);
      this.mlp = new Mlp();
    }
  }
  class Gpt extends tg.Module {
    constructor() {
      super();
      this.tok_emb = this.param([V, D]);
      this.pos_emb = this.param([SEQ, D]);
      this.layers = Array.from({ length: LAYERS }, () => new Block());
      this.lnf = new tg.LayerNorm(D);
    }
  }
  // x [B, T, D] -> [B, T, D]: causal self-attention; layer i's weights captured as attn.i when asked.
  function attention(a, x, i, captures) {
    const Dh = D / HEADS;
    const q = tg.splitHeads(a.q.fwd(x), HEADS), k = tg.splitHeads(a.k.fwd(x), HEADS), v = tg.splitHeads(a.v.fwd(x), HEADS);
    const att = tg.softmaxCausal(tg.mul(tg.matmulT(q, k, { transposeB: true }), Math.fround(1 / Math.sqrt(Dh))));
    if (captures) tg.capture(`attn.${i}`, att);
    return a.o.fwd(tg.mergeHeads(tg.matmul(att, v)));
  }
  function forward(m, tokens, captures) {
    const t = tokens.shape[1];
    let x = tg.add(tg.embedding(m.tok_emb, tokens), tg.embedding(m.pos_emb, tg.arange(t)));
    m.layers.forEach((b, i) => {
      x = tg.add(x, attention(b.attn, b.ln1.fwd(x), i, captures));
      x = tg.add(x, b.mlp.down.fwd(tg.relu(b.mlp.up.fwd(b.ln2.fwd(x)))));
    });
    return tg.matmulT(m.lnf.fwd(x), m.tok_emb, { transposeB: true }); // [B, T, V]
  }
  const mask = [0, 0, 0, 0, 0, 1, 1, 1]; // targets at t = 5..7 are the sum digits
  return {
    Gpt,
    loss: (m, { tokens, targets }) => {
      const ce = tg.crossEntropy(forward(m, tokens, false), targets, { reduction: 'none' }); // [B, T]
      return tg.mul(tg.sum(tg.mul(ce, tg.constant([T], mask))), Math.fround(1 / (batch * 3)));
    },
    predict: (m, { tokens }) => forward(m, tokens, true),
    inputs: { tokens: { shape: [batch, T], dtype: 'i32' }, targets: { shape: [batch, T], dtype: 'i32' } },
    predictInputs: { tokens: { shape: [null, T], dtype: 'i32' } },
    optimizer: { kind: 'adamw', lr: tg.lr.linear({ peak: 5e-3, final: 5e-4, steps: 1500 }), weightDecay: 0.01, clipGradNorm: 1 },
  };
}

// 20% of the pairs never appear in training (examples/addition.c's rule).
export const isTestPair = (a, b) => ((Math.imul(a * 100 + b, 0x9E3779B1) >>> 16) % 5) === 0;

// The 9 tokens of a + b: a1 a0 + b1 b0 = s0 s1 s2.
export function encode(a, b) {
  const s = a + b;
  return [Math.floor(a / 10), a % 10, ADD.PLUS, Math.floor(b / 10), b % 10, ADD.EQ, s % 10, Math.floor(s / 10) % 10, Math.floor(s / 100)];
}

export const additionRng = seed => new Lcg(BigInt(seed) * 0x9e3779b97f4a7c15n + 1n);

// A training batch (held-out pairs redrawn) as examples/addition.c draws it.
export function additionBatch(rng, batch = ADD.B) {
  const { T } = ADD;
  const tokens = new Int32Array(batch * T), targets = new Int32Array(batch * T);
  for (let i = 0; i < batch; i++) {
    let a, b;
    do { a = rng.next() % 100; b = rng.next() % 100; } while (isTestPair(a, b));
    const seq = encode(a, b);
    tokens.set(seq.slice(0, T), i * T);
    targets.set(seq.slice(1), i * T);
  }
  return { tokens, targets };
}

// a + b generated digit by digit through a forward session of batch 1; returns the sum.
export async function predictSum(infer, a, b) {
  const { T, V } = ADD;
  const seq = encode(a, b), tokens = new Int32Array(T);
  tokens.set(seq.slice(0, 6));
  let sum = 0, scale = 1;
  for (let d = 0; d < 3; d++) {
    const r = await infer.run({ tokens });
    if (r.kind !== 'completed') throw r.error || new Error(r.kind);
    const row = r.output.subarray((5 + d) * V, (6 + d) * V);
    let best = 0;
    for (let v = 1; v < 10; v++) if (row[v] > row[best]) best = v;
    if (d < 2) tokens[6 + d] = best;
    sum += best * scale;
    scale *= 10;
  }
  return sum;
}

// The held-out pairs (the first n of them), and the fraction of them the
// model adds right, generating the 3 digits for all of them at once (3 runs
// of a forward session over a batch of n).
export function heldOutPairs(n = Infinity) {
  const out = [];
  for (let a = 0; a < 100; a++) for (let b = 0; b < 100; b++) if (isTestPair(a, b) && out.length < n) out.push([a, b]);
  return out;
}
export async function heldOutAccuracy(infer, pairs) {
  const { T, V } = ADD, n = pairs.length, tokens = new Int32Array(n * T);
  pairs.forEach(([a, b], i) => tokens.set(encode(a, b).slice(0, 6), i * T));
  const sums = new Array(n).fill(0);
  for (let d = 0, scale = 1; d < 3; d++, scale *= 10) {
    const r = await infer.run({ tokens });
    if (r.kind !== 'completed') throw r.error || new Error(r.kind);
    for (let i = 0; i < n; i++) {
      const row = r.output.subarray((i * T + 5 + d) * V, (i * T + 6 + d) * V);
      let best = 0;
      for (let v = 1; v < 10; v++) if (row[v] > row[best]) best = v;
      if (d < 2) tokens[i * T + 6 + d] = best;
      sums[i] += best * scale;
    }
  }
  return pairs.filter(([a, b], i) => sums[i] === a + b).length / n;
}
