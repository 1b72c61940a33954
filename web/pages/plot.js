// Small canvas helpers for the sample pages: a loss curve on a log scale
// and a y = f(x) plot.

// Draws losses [[step, loss], ...] on canvas as a line, log-scaled in y.
export function drawLoss(canvas, points) {
  const ctx = canvas.getContext('2d'), w = canvas.width, h = canvas.height, pad = 36;
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, w, h);
  ctx.strokeStyle = '#ccc';
  ctx.strokeRect(pad, 8, w - pad - 8, h - pad);
  const ok = points.filter(p => p[1] > 0 && Number.isFinite(p[1]));
  if (ok.length < 2) return;
  const lo = Math.log10(Math.min(...ok.map(p => p[1]))), hi = Math.log10(Math.max(...ok.map(p => p[1])));
  const span = Math.max(hi - lo, 1e-3), last = ok[ok.length - 1][0];
  const px = s => pad + (w - pad - 8) * (s / Math.max(last, 1));
  const py = v => 8 + (h - pad) * (hi - Math.log10(v)) / span;
  ctx.fillStyle = '#555';
  ctx.font = '11px sans-serif';
  ctx.fillText(`${Math.pow(10, hi).toPrecision(3)}`, 2, 16);
  ctx.fillText(`${Math.pow(10, lo).toPrecision(3)}`, 2, h - pad + 4);
  ctx.fillText(`step ${last}`, w - 70, h - 12);
  ctx.strokeStyle = '#06c';
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  ok.forEach((p, i) => (i ? ctx.lineTo(px(p[0]), py(p[1])) : ctx.moveTo(px(p[0]), py(p[1]))));
  ctx.stroke();
}

// Draws sin(x) in grey and the model's ys at xs in blue, x in [-pi, pi].
export function drawFit(canvas, xs, ys) {
  const ctx = canvas.getContext('2d'), w = canvas.width, h = canvas.height;
  const px = x => (x + Math.PI) / (2 * Math.PI) * w, py = y => h / 2 - y * h * 0.4;
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, w, h);
  ctx.strokeStyle = '#ddd';
  ctx.beginPath();
  ctx.moveTo(0, h / 2);
  ctx.lineTo(w, h / 2);
  ctx.stroke();
  const line = (color, f) => {
    ctx.strokeStyle = color;
    ctx.beginPath();
    xs.forEach((x, i) => (i ? ctx.lineTo(px(x), py(f(i))) : ctx.moveTo(px(x), py(f(i)))));
    ctx.stroke();
  };
  ctx.lineWidth = 1;
  line('#999', i => Math.sin(xs[i]));
  ctx.lineWidth = 2;
  line('#06c', i => ys[i]);
}

// How many pixels of the canvas are not white: a test's proof that it drew.
export function inkedPixels(canvas) {
  const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) n++;
  return n;
}
