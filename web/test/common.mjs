// Shared by the Node tests of the WebAssembly build (tests/test_web.sh runs
// them): the build folder, the host WebGPU (npm's webgpu from .deps/web,
// scripts/fetch-web.sh), and the "N passed, M failed" line tests/run.sh reads.
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const wasmBuild = resolve(process.env.TG_WASM_BUILD || join(root, 'build-wasm'));

// npm's webgpu (Dawn for Node), or null when it was not fetched.
export async function nodeGpu() {
  const index = join(process.env.TG_WEB_DEPS || join(root, '.deps/web'), 'node_modules/webgpu/index.js');
  if (!existsSync(index)) return null;
  const { create, globals } = await import(pathToFileURL(index));
  Object.assign(globalThis, globals);
  return create([]);
}

let pass = 0, fail = 0;
export function check(ok, ...what) {
  if (ok) pass++;
  else {
    fail++;
    console.error('FAIL', ...what);
  }
  return ok;
}
export function summary(suite) {
  console.log(`${suite}: ${pass} passed, ${fail} failed`);
  return fail ? 1 : 0;
}
