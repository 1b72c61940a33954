// The npm package as a user gets it: `npm pack` of build-wasm/package, the
// tarball installed into a fresh temporary project (offline: the package has
// no dependencies), the README's program run there as written (Node without
// the webgpu package: the CPU backend) and, when TypeScript is at hand
// (scripts/fetch-web.sh puts it in .deps/web), type-checked against the
// package's index.d.ts, with web/test/types.ts (more of the API, strictly).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, root, summary, wasmBuild } from './common.mjs';

const tmp = mkdtempSync(join(tmpdir(), 'tg-web-package-'));
const quiet = { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' };
try {
  execFileSync('npm', ['pack', '--silent', '--pack-destination', tmp, join(wasmBuild, 'package')], quiet);
  const tarball = readdirSync(tmp).find(f => f.endsWith('.tgz'));
  check(!!tarball, 'npm pack made no tarball');
  const listing = execFileSync('tar', ['tzf', join(tmp, tarball)], quiet).split('\n');
  for (const f of ['index.js', 'index.d.ts', 'tensorgrad_core.js', 'tensorgrad_core.wasm', 'README.md', 'package.json', 'LICENSE'])
    check(listing.includes(`package/${f}`), `the tarball lacks ${f}: ${listing.join(' ')}`);

  const project = join(tmp, 'app');
  execFileSync('mkdir', ['-p', project]);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  const inst = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--offline', join(tmp, tarball)], { cwd: project, ...quiet });
  check(inst.status === 0, `npm install of the tarball failed: ${inst.stderr}`);

  // The README's first js block, as written.
  const readme = readFileSync(join(project, 'node_modules/tensorgrad-wasm/README.md'), 'utf8');
  const program = /```js\n([\s\S]*?)```/.exec(readme)[1];
  writeFileSync(join(project, 'sin.mjs'), program);
  const run = spawnSync('node', ['sin.mjs'], { cwd: project, ...quiet, timeout: 300000 });
  const out = run.stdout || '';
  check(run.status === 0, `node sin.mjs exited ${run.status}: ${run.stderr}`);
  check(/^training on cpu: CPU \(WebAssembly, simd128\)$/m.test(out), `no 'training on cpu' line: ${out}`);
  const losses = [...out.matchAll(/^step (\d+)  loss ([0-9.]+)$/gm)].map(m => +m[2]);
  check(losses.length === 5 && losses[4] < 0.01, `the README program's losses: ${losses} (want 5 lines, the last under 0.01)`);
  console.log(`README program in a fresh project: ${out.trim().split('\n').at(-1)}`);

  const tsc = join(process.env.TG_WEB_DEPS || join(root, '.deps/web'), 'node_modules/typescript/bin/tsc');
  if (existsSync(tsc)) {
    const ts = spawnSync('node', [tsc, '--noEmit', '--allowJs', '--checkJs', '--strictNullChecks', '--target', 'es2022',
      '--module', 'nodenext', '--moduleResolution', 'nodenext', 'sin.mjs'], { cwd: project, ...quiet });
    check(ts.status === 0, `tsc on the README program: ${ts.stdout}${ts.stderr}`);
    writeFileSync(join(project, 'types.ts'), readFileSync(join(root, 'web/test/types.ts')));
    const strict = spawnSync('node', [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext',
      '--moduleResolution', 'nodenext', 'types.ts'], { cwd: project, ...quiet });
    check(strict.status === 0, `tsc --strict on web/test/types.ts: ${strict.stdout}${strict.stderr}`);
  } else console.log('web package: typescript not fetched, the types are not checked (scripts/fetch-web.sh)');
} catch (e) {
  check(false, e.stack || e);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
process.exit(summary('web package'));
