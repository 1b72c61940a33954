// The sample pages (web/pages) in headless Chromium (Debian's chromium with
// --enable-unsafe-webgpu: WebGPU on its SwiftShader Vulkan adapter, a CPU
// one), served with the package as ./tensorgrad-wasm/: mlp-sin on WebGPU
// and on the CPU fallback, the addition transformer for a few steps on the
// CPU fallback (SwiftShader takes minutes to compile its 60 pipelines; it
// trains on WebGPU in Node, web/test/train.mjs). Each page trains, draws,
// and posts its run to /report.
//   node web/test/pages.mjs            the test
//   node web/test/pages.mjs --serve    serve the pages for a browser (prints the URL)
//   node web/test/pages.mjs --visit 'addition.html?report=1&steps=20' [SECONDS]
//                                      one page in headless Chromium; prints its report
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize } from 'node:path';
import { check, root, summary, wasmBuild } from './common.mjs';

const pagesDir = join(root, 'web/pages'), pkgDir = join(wasmBuild, 'package');
const types = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };
let onReport = null, onLog = null;

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (req.method === 'POST' && url.pathname === '/log') { // a page's log line (--visit prints them)
    let body = '';
    req.on('data', c => (body += c));
    req.on('end', () => { res.end(); if (onLog) onLog(body); });
    return;
  }
  if (req.method === 'POST' && url.pathname === '/report') {
    let body = '';
    req.on('data', c => (body += c));
    req.on('end', () => { res.end(); if (onReport) onReport(JSON.parse(body)); });
    return;
  }
  const path = decodeURIComponent(url.pathname);
  const file = path.startsWith('/tensorgrad-wasm/') ? join(pkgDir, normalize(path.slice(17))) : join(pagesDir, normalize(path === '/' ? 'mlp-sin.html' : path));
  if (!file.startsWith(pagesDir) && !file.startsWith(pkgDir) || !existsSync(file)) { res.statusCode = 404; res.end(); return; }
  res.setHeader('content-type', types[extname(file)] || 'application/octet-stream');
  res.end(readFileSync(file));
});
await new Promise(ok => server.listen(process.env.TG_WEB_PORT || 0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}`;

if (process.argv.includes('--serve')) {
  console.log(`serving ${pagesDir} (the package from ${pkgDir}): ${base}/mlp-sin.html, ${base}/addition.html`);
} else {
  const chromium = process.env.CHROMIUM || 'chromium';
  const verbose = process.argv.includes('--visit');
  const profile = mkdtempSync(join(tmpdir(), 'tg-web-chromium-'));
  // One page in a fresh headless Chromium; resolves to its report (or a timeout's).
  const visit = (page, seconds) => new Promise(done => {
    const child = spawn(chromium, ['--headless=new', '--no-sandbox', '--enable-unsafe-webgpu', '--no-first-run', '--enable-logging=stderr',
      `--user-data-dir=${profile}`, `${base}/${page}`], { stdio: ['ignore', 'ignore', 'pipe'] });
    // The page's log lines and Chromium's errors, the last of them kept for a failure's message.
    let said = '';
    const hear = l => { if (verbose) console.error(l); said = (said + l + '\n').slice(-4000); };
    onLog = hear;
    child.stderr.on('data', d => String(d).split('\n').filter(l => /ERROR:(?!.*(dbus|on_device_model))/.test(l)).forEach(hear));
    let exited = false;
    child.on('exit', () => (exited = true));
    const finish = r => {
      clearTimeout(timer);
      onReport = onLog = null;
      child.kill();
      const wait = () => (exited ? done(r) : setTimeout(wait, 50));
      wait();
    };
    const timer = setTimeout(() => finish({ error: `no report in ${seconds} s; the page and chromium said: ${said.slice(-2000)}` }), seconds * 1000);
    child.on('error', e => finish({ error: `cannot start ${chromium}: ${e.message}` }));
    onReport = finish;
  });
  const at = process.argv.indexOf('--visit');
  if (at > 0) {
    console.log(JSON.stringify(await visit(process.argv[at + 1], +process.argv[at + 2] || 600)));
    rmSync(profile, { recursive: true, force: true });
    server.close();
    process.exit(0);
  }
  const decreased = r => r.losses && r.losses.length > 2 && r.losses.every(Number.isFinite) && r.losses.at(-1) < r.losses[0];
  try {
    for (const backend of ['auto', 'cpu']) {
      const r = await visit(`mlp-sin.html?report=1&steps=60&backend=${backend}`, 300);
      const want = backend === 'cpu' ? 'cpu' : 'webgpu';
      if (!check(!r.error, `mlp-sin (${backend}):`, r.error)) continue;
      check(r.backend === want, `mlp-sin (${backend}): trained on ${r.backend} (${r.device}), want ${want}`);
      check(decreased(r), `mlp-sin (${backend}): losses ${r.losses && r.losses.slice(0, 3)} ... ${r.losses && r.losses.at(-1)}`);
      check(r.inked.loss > 100 && r.inked.fit > 100, `mlp-sin (${backend}): the canvases are blank`, r.inked);
      console.log(`mlp-sin in Chromium on ${r.backend} (${r.device}): loss ${r.losses[0].toFixed(4)} -> ${r.losses.at(-1).toFixed(4)} in 60 steps, ${r.msPerStep.toFixed(2)} ms a step`);
    }
    const r = await visit('addition.html?report=1&steps=6&eval=40&backend=cpu', 120);
    if (check(!r.error, 'addition:', r.error)) {
      check(r.backend === 'cpu', `addition: trained on ${r.backend} (${r.device}), want cpu`);
      check(r.losses.length === 6 && r.losses.every(Number.isFinite) && r.losses.at(-1) < r.losses[0], 'addition: losses', r.losses);
      check(r.accuracy >= 0 && r.accuracy <= 1 && r.inked.loss > 100, 'addition: accuracy or drawing', r.accuracy, r.inked);
      console.log(`addition in Chromium on ${r.backend} (${r.device}): loss ${r.losses[0].toFixed(4)} -> ${r.losses.at(-1).toFixed(4)} in 6 steps, ${r.msPerStep.toFixed(1)} ms a step`);
    }
  } finally {
    rmSync(profile, { recursive: true, force: true });
    server.close();
  }
  process.exit(summary('web pages'));
}
