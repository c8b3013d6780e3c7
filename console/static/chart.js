// A small SVG line chart drawn by hand (no library): a time axis over the last minutes, a value
// axis from 0 to a rounded maximum, and one polyline. Labels are text nodes.

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 560;
const HEIGHT = 180;
const PAD = { left: 56, right: 12, top: 14, bottom: 26 };

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.appendChild(document.createTextNode(text));
  return node;
}

/** The smallest of 1, 2, 2.5, 5 times a power of ten at or above `v` (at least 1). */
export function niceCeiling(v) {
  if (!(v > 1)) return 1;
  const power = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= v) return m * power;
  return 10 * power;
}

function shortNumber(v) {
  if (v >= 1e6) return `${(v / 1e6).toFixed(v >= 1e7 ? 0 : 1)}M`;
  if (v >= 1e3) return `${(v / 1e3).toFixed(v >= 1e4 ? 0 : 1)}k`;
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

/**
 * An <svg> chart of `points` ([{t (ms), v}], oldest first; v null for a gap) over the `spanMs`
 * before `now`, titled `title`.
 */
export function lineChart({ title, points, now, spanMs, id }) {
  const root = svg('svg', { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: 'chart', role: 'img', id });
  root.appendChild(svg('title', {}, title));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const shown = points.filter((p) => p.t >= now - spanMs);
  const top = niceCeiling(Math.max(0, ...shown.map((p) => p.v ?? 0)));
  const x = (t) => PAD.left + ((t - (now - spanMs)) / spanMs) * plotW;
  const y = (v) => PAD.top + plotH - (v / top) * plotH;
  for (const f of [0, 0.5, 1]) {
    const v = top * f;
    root.appendChild(svg('line', { x1: PAD.left, x2: PAD.left + plotW, y1: y(v), y2: y(v), class: 'grid' }));
    root.appendChild(svg('text', { x: PAD.left - 6, y: y(v) + 4, class: 'axis', 'text-anchor': 'end' }, shortNumber(v)));
  }
  const minutes = spanMs / 60000;
  for (let m = 0; m <= minutes; m += Math.max(1, Math.round(minutes / 5))) {
    const t = now - m * 60000;
    root.appendChild(svg('text', { x: x(t), y: HEIGHT - 8, class: 'axis', 'text-anchor': 'middle' }, m === 0 ? 'now' : `-${m} min`));
  }
  let run = [];
  const flush = () => {
    if (run.length) root.appendChild(svg('polyline', { points: run.join(' '), class: 'line' }));
    run = [];
  };
  for (const p of shown) {
    if (p.v === null || p.v === undefined) { flush(); continue; }
    run.push(`${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`);
  }
  flush();
  const last = [...shown].reverse().find((p) => p.v !== null && p.v !== undefined);
  root.appendChild(svg('text', { x: PAD.left + 4, y: PAD.top + 10, class: 'label' },
    `${title}: ${last ? shortNumber(last.v) : '—'}`));
  if (last) root.dataset.last = String(last.v);
  root.dataset.max = String(Math.max(0, ...shown.map((p) => p.v ?? 0)));
  root.dataset.points = String(shown.length);
  return root;
}
