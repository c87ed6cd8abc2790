// Time-series charts of TraceQL metrics answers, drawn by uPlot (vendored in
// ui/vendor/, loaded by index.html before the modules as the global uPlot).
//
// A chart holds lines, one per series, and each series' exemplars as rings.
// A click on a ring opens its trace; anywhere else it names the interval
// under the pointer and the nearest series, for the caller to search the
// traces behind that point.
// The uPlot instance is kept on the chart's element (`node.uplot`) with the
// series it draws (`node.lines`), so that a test can read what is drawn.

import { clock, duration, el } from './format.js';

/** An exemplar's ring: its diameter, and how near (CSS px) a click must be to open it. */
const RING = 8;
const NEAR = RING / 2 + 1;

/** A value of `unit` as a person reads it. */
export function formatValue(v, unit) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (unit === 'seconds') return duration(v * 1e9);
  const n = Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : Math.abs(v) >= 1 ? v.toFixed(2) : String(Number(v.toPrecision(2)));
  return unit === 'rate' ? `${n}/s` : n;
}

/**
 * Draws `lines` into `node` (emptied first):
 * - `lines`: `[{ label, color, samples: [[ms, value]], exemplars: [{ ms, value, traceId, spanId }] }]`;
 * - `unit`: 'rate' (per second), 'seconds' (durations) or '' (plain numbers);
 * - `onPoint(line, ms)` when a point of a line is clicked: `ms` the sample's
 *   time, the end of its interval;
 * - `onExemplar(exemplar)` when an exemplar is clicked.
 */
export function drawChart(node, { lines, unit = '', height = 160, legend = lines.length > 1, onPoint, onExemplar }) {
  node.uplot?.destroy();
  node.replaceChildren();
  if (typeof uPlot !== 'function') {
    node.append(el('p', { class: 'status-error' }, 'The charting library (ui/vendor/uPlot.iife.min.js) did not load.'));
    return null;
  }
  // uPlot draws series over one x array: the samples' times and the
  // exemplars' times together, each series null where it has no value.
  const times = new Set();
  for (const line of lines) {
    for (const [ms] of line.samples) times.add(ms);
    for (const e of line.exemplars || []) times.add(e.ms);
  }
  const xs = [...times].sort((a, b) => a - b);
  const at = new Map(xs.map((ms, i) => [ms, i]));
  const data = [xs.map((ms) => ms / 1000)];
  const series = [{}];
  const exemplarRefs = [];
  for (const line of lines) {
    const ys = new Array(xs.length).fill(null);
    for (const [ms, v] of line.samples) ys[at.get(ms)] = Number.isFinite(v) ? v : null;
    data.push(ys);
    series.push({
      label: line.label,
      stroke: line.color,
      width: 1.5,
      spanGaps: true,
      points: { show: false },
      value: (u, v) => formatValue(v, unit),
    });
  }
  for (const line of lines) {
    if (!line.exemplars?.length) continue;
    const ys = new Array(xs.length).fill(null);
    const refs = new Array(xs.length).fill(null);
    for (const e of line.exemplars) {
      if (!Number.isFinite(e.value)) continue;
      ys[at.get(e.ms)] = e.value;
      refs[at.get(e.ms)] = e;
    }
    data.push(ys);
    exemplarRefs[data.length - 1] = refs;
    series.push({
      label: `${line.label} exemplars`,
      stroke: line.color,
      fill: '#ffffff',
      paths: () => null,
      points: { show: true, space: 0, size: RING, width: 1.5, stroke: line.color, fill: '#ffffff' },
      value: (u, v) => formatValue(v, unit),
    });
  }
  const options = {
    width: Math.max(240, node.clientWidth || 600),
    height,
    series,
    legend: { show: false },
    cursor: { drag: { x: false, y: false, setScale: false }, points: { size: 6 } },
    scales: { y: { range: (u, min, max) => [0, Number.isFinite(max) && max > 0 ? max * 1.1 : 1] } },
    axes: [
      { stroke: '#5f6b7a', grid: { stroke: '#eef1f4' }, ticks: { stroke: '#d9dee5' } },
      {
        stroke: '#5f6b7a', grid: { stroke: '#eef1f4' }, ticks: { stroke: '#d9dee5' }, size: 64,
        values: (u, splits) => splits.map((v) => formatValue(v, unit)),
      },
    ],
  };
  // What is under the pointer at (left, top) in the plot, CSS px: an
  // exemplar whose ring it is on (drawn over the lines), else the interval
  // whose sample is nearest in time, of the line nearest the pointer there.
  const under = (u, left, top) => {
    let best = null;
    exemplarRefs.forEach((refs, s) => {
      if (!refs) return;
      refs.forEach((e, i) => {
        if (!e) return;
        const d = Math.hypot(u.valToPos(data[0][i], 'x') - left, u.valToPos(data[s][i], 'y') - top);
        if (d <= NEAR && (!best || d < best.d)) best = { d, e };
      });
    });
    let pick = null;
    lines.forEach((line, l) => {
      for (const [ms, v] of line.samples) {
        const dx = Math.abs(u.valToPos(ms / 1000, 'x') - left);
        const dy = Number.isFinite(v) ? Math.abs(u.valToPos(v, 'y') - top) : Infinity;
        if (!pick || dx < pick.dx - 0.5 || (Math.abs(dx - pick.dx) <= 0.5 && dy < pick.dy)) pick = { dx, dy, l, ms };
      }
    });
    return { exemplar: best?.e, line: pick ? lines[pick.l] : null, ms: pick?.ms };
  };
  // The overlay's tooltip says what a click there opens.
  options.hooks = {
    setCursor: [(u) => {
      const { left, top } = u.cursor;
      const at = left === undefined || left < 0 ? {} : under(u, left, top);
      if (at.exemplar) {
        const e = at.exemplar;
        u.over.title = `${clock(e.ms)}\nexemplar: trace ${e.traceId}, ${formatValue(e.value, unit)}\n(click to open it)`;
      } else if (at.line) {
        const parts = [clock(at.ms)];
        for (const line of lines) {
          const sample = line.samples.find(([ms]) => ms === at.ms);
          if (sample) parts.push(`${line.label}: ${formatValue(sample[1], unit)}`);
        }
        parts.push('(click for the traces behind this point)');
        u.over.title = parts.join('\n');
      } else {
        u.over.title = '';
      }
    }],
  };
  const u = new uPlot(options, data, node);
  if (legend) node.append(legendOf(lines));
  node.uplot = u;
  node.lines = lines;
  u.over.addEventListener('click', (event) => {
    // Where the click was, not uPlot's cursor: that follows the pointer a
    // frame late.
    const box = u.over.getBoundingClientRect();
    const at = under(u, event.clientX - box.left, event.clientY - box.top);
    if (at.exemplar) onExemplar?.(at.exemplar);
    else if (at.line) onPoint?.(at.line, at.ms);
  });
  return u;
}

/** A swatch and label per line, and a ring for exemplars when there are any. */
function legendOf(lines) {
  const swatch = (color, ring) => {
    const s = el('span', { class: ring ? 'swatch ring' : 'swatch' });
    if (ring) s.style.borderColor = color;
    else s.style.background = color;
    return s;
  };
  const items = lines.map((line) => el('span', {}, swatch(line.color), line.label));
  const ringed = lines.find((line) => line.exemplars?.length);
  if (ringed) items.push(el('span', { class: 'muted' }, swatch('#5f6b7a', true), 'exemplar: click for its trace'));
  return el('div', { class: 'chart-legend' }, items);
}

/** Resizes every chart under `root` to its element's width. */
export function fitCharts(root) {
  for (const node of root.querySelectorAll('.chart')) {
    if (node.uplot && node.clientWidth) node.uplot.setSize({ width: node.clientWidth, height: node.uplot.height });
  }
}
