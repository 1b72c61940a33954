// Upstream tensorgrad (the TypeScript library, built by scripts/fetch-upstream.sh)
// in Node: it runs its GPU work in a Web Worker made from a Blob URL, so a
// Worker is provided here over node:worker_threads, with navigator.gpu (npm's
// webgpu), self and postMessage inside it as a browser worker has them. Then
// the benchmark's two models in its API, the same math as web/pages/models.js.
import { writeFileSync, mkdtempSync } from 'node:fs';
import { resolveObjectURL } from 'node:buffer';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker as ThreadWorker } from 'node:worker_threads';

// Installs globalThis.Worker (and navigator.gpu on this thread) for upstream; webgpuIndex is npm
// webgpu's index.js, flags its create() flags.
export function installWorker(webgpuIndex, flags) {
  const dir = mkdtempSync(join(tmpdir(), 'tg-upstream-worker-'));
  let n = 0;
  const prelude = `
import { create, globals } from ${JSON.stringify(pathToFileURL(webgpuIndex).href)};
import { parentPort } from 'node:worker_threads';
Object.assign(globalThis, globals);
globalThis.navigator = { gpu: create(${JSON.stringify(flags)}) };
globalThis.self = globalThis;
globalThis.postMessage = (msg, opts) => parentPort.postMessage(msg, Array.isArray(opts) ? opts : opts && opts.transfer);
parentPort.on('message', data => globalThis.onmessage && globalThis.onmessage({ data }));
`;
  globalThis.Worker = class {
    constructor(url) {
      this.queue = [];
      this.onmessage = null;
      this.onerror = null;
      const blob = resolveObjectURL(String(url));
      this.ready = (blob ? blob.text() : Promise.reject(new Error(`Worker: no Blob at ${url}`))).then(src => {
        const file = join(dir, `worker${n++}.mjs`);
        writeFileSync(file, prelude + src);
        this.thread = new ThreadWorker(file);
        this.thread.on('message', data => this.onmessage && this.onmessage({ data }));
        this.thread.on('error', e => this.onerror && this.onerror({ message: String(e && e.stack || e) }));
        for (const [m, t] of this.queue) this.thread.postMessage(m, t);
        this.queue = null;
      });
    }
    postMessage(msg, transfer) {
      const t = Array.isArray(transfer) ? transfer : transfer && transfer.transfer;
      if (this.queue) this.queue.push([msg, t]);
      else this.thread.postMessage(msg, t);
    }
    terminate() { this.ready.then(() => this.thread.terminate()); }
  };
}

// The sin MLP and the addition transformer in upstream's API (lib: its module).
export function upstreamModels(lib) {
  const { Module, Linear, LayerNorm, relu, sub, mul, mean, add, sum, matmul, swapAxes, embedding, arange,
    splitHeads, mergeHeads, softmaxCausal, crossEntropy, lr } = lib;
  class MLP extends Module {
    constructor() { super(); this.l1 = new Linear(1, 64); this.l2 = new Linear(64, 64); this.l3 = new Linear(64, 1); }
  }
  const sin = {
    Model: MLP,
    loss: (m, { x, y }) => { const d = sub(m.l3.fwd(relu(m.l2.fwd(relu(m.l1.fwd(x))))), y); return mean(mul(d, d)); },
    inputs: { x: [256, 1], y: [256, 1] },
    optimizer: { kind: 'adam', lr: 5e-3 },
  };
  const V = 12, D = 64, H = 4, SEQ = 9, T = 8, B = 128;
  class Attention extends Module {
    constructor() { super(); for (const k of ['q', 'k', 'v', 'o']) this[k] = new Linear(D, D, { bias: false }); }
  }
  class Mlp extends Module {
    constructor() { super(); this.up = new Linear(D, 4 * D); this.down = new Linear(4 * D, D); }
  }
  class Block extends Module {
    constructor() { super(); this.ln1 = new LayerNorm(D); this.attn = new Attention(); this.ln2 = new LayerNorm(D); this.mlp = new Mlp(); }
  }
  class Gpt extends Module {
    constructor() {
      super();
      this.tok_emb = this.param([V, D]);
      this.pos_emb = this.param([SEQ, D]);
      this.layers = [new Block(), new Block(), new Block()];
      this.lnf = new LayerNorm(D);
    }
  }
  const forward = (m, tokens) => {
    let x = add(embedding(m.tok_emb, tokens), embedding(m.pos_emb, arange(T)));
    for (const b of m.layers) {
      const h = b.ln1.fwd(x);
      const q = splitHeads(b.attn.q.fwd(h), H), k = splitHeads(b.attn.k.fwd(h), H), v = splitHeads(b.attn.v.fwd(h), H);
      const att = softmaxCausal(mul(matmul(q, swapAxes(k, -1, -2)), 1 / Math.sqrt(D / H)));
      x = add(x, b.attn.o.fwd(mergeHeads(matmul(att, v))));
      x = add(x, b.mlp.down.fwd(relu(b.mlp.up.fwd(b.ln2.fwd(x)))));
    }
    return matmul(m.lnf.fwd(x), swapAxes(m.tok_emb, -1, -2));
  };
  const addition = {
    Model: Gpt,
    loss: (m, { tokens, targets, mask }) =>
      mul(sum(mul(crossEntropy(forward(m, tokens), targets, { reduction: 'none' }), mask)), 1 / (B * 3)),
    inputs: { tokens: { shape: [B, T], dtype: 'i32' }, targets: { shape: [B, T], dtype: 'i32' }, mask: [T] },
    optimizer: { kind: 'adamw', lr: lr.linear({ peak: 5e-3, final: 5e-4, steps: 1500 }), weightDecay: 0.01, clipGradNorm: 1 },
  };
  return { sin, addition };
}
