// The metrics page: `#/metrics?service=<name>&q=<metrics query>&range=1h`
// (or `range=custom` with `from` and `to` in Unix seconds).
//
// Per service, what Grafana's Traces Drilldown shows first: the rate of its
// spans, the rate of those with status error, and the 50th, 90th and 99th
// percentiles of their durations, each a TraceQL metrics query `by` service
// over the range; and a chart of any metrics query typed. A click on a point
// opens the search for the traces behind it (the query's filter, that
// interval); a click on an exemplar opens its trace.

import * as api from './api.js';
import { drawChart, fitCharts } from './chart.js';
import { clock, el, fill, PALETTE, traceqlString } from './format.js';
import { RANGES, RANGE_WORDS, fromLocalInput, timeWindow, toLocalInput } from './range.js';

const $ = (id) => document.getElementById(id);

const SERVICE = 'resource.service.name';
/** Steps (seconds) the charts use: the smallest that gives at most ~100 intervals. */
const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];
/** The spans charted: all, the traces' roots (as Drilldown's default), or servers'. */
const SPANS = { root: 'nestedSetParent < 0', server: 'kind = server' };
/** Most services charted at once. */
const MAX_SERVICES = 30;
const COLORS = { rate: '#1f5f99', errors: '#c62828', p50: PALETTE[2], p90: PALETTE[1], p99: PALETTE[3] };
/** The metrics functions: the search behind a chart is what comes before. */
const FUNCTIONS = /\|\s*(rate|count_over_time|sum_over_time|avg_over_time|min_over_time|max_over_time|quantile_over_time|histogram_over_time|compare)\s*\(/;

let ready = false;
let running = null;

/** The step, in seconds, of a chart over `seconds`. */
export function stepFor(seconds) {
  return STEPS.find((s) => s >= seconds / 100) || STEPS[STEPS.length - 1];
}

function parseState(params) {
  const range = params.get('range');
  return {
    service: params.get('service') || '',
    spans: params.get('spans') in SPANS ? params.get('spans') : '',
    q: params.get('q') || '',
    range: range in RANGES || range === 'custom' ? range : '1h',
    from: Number(params.get('from')) || 0,
    to: Number(params.get('to')) || 0,
  };
}

function stateHash(state) {
  const p = new URLSearchParams();
  if (state.service) p.set('service', state.service);
  if (state.spans) p.set('spans', state.spans);
  if (state.q) p.set('q', state.q);
  p.set('range', state.range);
  if (state.range === 'custom') {
    p.set('from', String(state.from));
    p.set('to', String(state.to));
  }
  return `#/metrics?${p}`;
}

function formState() {
  const state = { service: $('m-service').value, spans: $('m-spans').value, q: $('m-query').value.trim(), range: $('m-range').value, from: 0, to: 0 };
  if (state.range === 'custom') {
    state.from = fromLocalInput($('m-from').value);
    state.to = fromLocalInput($('m-to').value);
  }
  return state;
}

function go(state) {
  const hash = stateHash(state);
  if (location.hash === hash) showMetrics(new URLSearchParams(hash.slice(hash.indexOf('?') + 1)));
  else location.hash = hash;
}

/** The search page for the spans of `filter` in (`ms` - `step`, `ms`]: the interval a sample stands for. */
function searchHash(filter, ms, step) {
  const to = Math.floor(ms / 1000);
  const p = new URLSearchParams({ q: filter, range: 'custom', from: String(to - step), to: String(to), limit: '100' });
  return `#/?${p}`;
}

function traceHash(e) {
  return `#/trace/${encodeURIComponent(e.traceId)}${e.spanId ? `?span=${encodeURIComponent(e.spanId)}` : ''}`;
}

/** A TraceQL literal of a series label's value. */
function literal(key, value) {
  if (typeof value === 'string' && !['status', 'kind', 'span:status', 'span:kind'].includes(key)) return traceqlString(value);
  return String(value);
}

/**
 * The search behind a series of metrics query `q`: its spanset filter, with
 * the series' `by()` labels as conditions (`__name__`, the quantile `p` and
 * the histogram's `__bucket` are not fields).
 */
export function filterOf(q, labels) {
  const at = q.search(FUNCTIONS);
  let filter = (at >= 0 ? q.slice(0, at) : q).trim() || '{}';
  const conds = Object.entries(labels)
    .filter(([key]) => !['__name__', 'p', '__bucket'].includes(key))
    .map(([key, value]) => `${key} = ${literal(key, value)}`);
  if (!conds.length) return filter;
  const single = /^\{([^{}]*)\}$/.exec(filter);
  if (single) {
    const inner = single[1].trim();
    const has = inner.includes('||') ? [] : inner.split(/\s*&&\s*/);
    const added = conds.filter((c) => !has.includes(c));
    if (!added.length) return filter;
    return `{ ${[inner && inner !== 'true' ? (inner.includes('||') ? `(${inner})` : inner) : '', ...added].filter(Boolean).join(' && ')} }`;
  }
  return `(${filter}) && { ${conds.join(' && ')} }`;
}

function labelValue(v) {
  if (!v) return '';
  if ('stringValue' in v) return v.stringValue;
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return Number(v.doubleValue);
  if ('boolValue' in v) return v.boolValue;
  return '';
}

/** Tempo's series as `{ labels: {key: value}, samples: [[ms, v]], exemplars }`. */
function parseSeries(data) {
  return (data.series || []).map((s) => {
    const labels = {};
    for (const l of s.labels || []) labels[l.key] = labelValue(l.value);
    const samples = (s.samples || []).map((p) => [Number(p.timestampMs), p.value === undefined ? 0 : Number(p.value)]);
    const exemplars = (s.exemplars || []).map((e) => {
      const named = {};
      for (const l of e.labels || []) named[l.key] = labelValue(l.value);
      // Tempo's trace IDs leave out leading zeros; the page names all 32 digits.
      const id = String(named['trace:id'] ?? '');
      const traceId = /^[0-9a-f]{1,32}$/i.test(id) ? id.toLowerCase().padStart(32, '0') : id;
      return { ms: Number(e.timestampMs), value: e.value === undefined ? 0 : Number(e.value), traceId, spanId: named['span:id'] };
    }).filter((e) => e.traceId);
    return { labels, samples, exemplars };
  });
}

function describe(labels) {
  const parts = Object.entries(labels).map(([k, v]) => (k === 'p' ? `p${Math.round(Number(v) * 100)}` : k === '__name__' ? String(v) : `${k}=${v}`));
  return parts.join(' ') || 'value';
}

function setup() {
  if (ready) return;
  ready = true;
  $('metrics-form').addEventListener('submit', (e) => {
    e.preventDefault();
    go(formState());
  });
  $('m-service').addEventListener('change', () => go(formState()));
  $('m-spans').addEventListener('change', () => go(formState()));
  $('m-range').addEventListener('change', () => {
    const custom = $('m-range').value === 'custom';
    $('m-custom-range').hidden = !custom;
    if (custom && !$('m-from').value) {
      const now = Math.floor(Date.now() / 1000);
      $('m-from').value = toLocalInput(now - 3600);
      $('m-to').value = toLocalInput(now);
    }
    if (!custom) go(formState());
  });
  let resizing = 0;
  addEventListener('resize', () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => fitCharts($('metrics-view')), 150);
  });
}

function setSelect(select, value) {
  if (value && ![...select.options].some((o) => o.value === value)) select.appendChild(el('option', { value }, value));
  select.value = value;
}

/** Shows the metrics page for the address's parameters and runs its queries. */
export async function showMetrics(params) {
  setup();
  const state = parseState(params);
  document.title = 'Metrics · tracedb';
  setSelect($('m-service'), state.service);
  $('m-spans').value = state.spans;
  $('m-query').value = state.q;
  $('m-range').value = state.range;
  $('m-custom-range').hidden = state.range !== 'custom';
  if (state.range === 'custom') {
    $('m-from').value = state.from ? toLocalInput(state.from) : '';
    $('m-to').value = state.to ? toLocalInput(state.to) : '';
  }
  await run(state);
}

async function run(state) {
  running?.abort();
  const request = new AbortController();
  running = request;
  const [start, end] = timeWindow(state);
  const step = stepFor(end - start);
  const grid = { start, end, step };
  const span = state.range === 'custom' ? `${clock(start * 1000)} to ${clock(end * 1000)}` : RANGE_WORDS[state.range];
  $('m-query-error').hidden = true;
  $('metrics-warning').hidden = true;
  fill($('metrics-status'), 'Loading…');
  $('metrics-view').setAttribute('aria-busy', 'true');
  const partial = [];
  const noted = (answer) => {
    if (answer.partial || answer.data.status === 'PARTIAL') partial.push(answer.data.message || answer.partialReason || 'some data could not be read');
    return answer;
  };
  const conds = [SPANS[state.spans], state.service ? `resource.service.name = ${traceqlString(state.service)}` : ''].filter(Boolean);
  const filter = (...more) => (conds.length + more.length ? `{ ${[...conds, ...more].join(' && ')} }` : '{}');
  const queries = {
    rate: `${filter()} | rate() by(${SERVICE})`,
    errors: `${filter('status = error')} | rate() by(${SERVICE})`,
    duration: `${filter()} | quantile_over_time(duration, 0.5, 0.9, 0.99) by(${SERVICE})`,
  };
  const ask = (q) => api.metricsRange({ q, start, end, step }, request.signal).then(noted);
  const typed = state.q ? ask(state.q).then((a) => ({ a }), (e) => ({ e })) : null;
  let red;
  try {
    red = await Promise.all([ask(queries.rate), ask(queries.errors), ask(queries.duration)]);
  } catch (e) {
    if (e.name === 'AbortError') return;
    red = e;
  }
  const typedAnswer = typed ? await typed : null;
  if (running !== request) return;
  running = null;
  $('metrics-view').removeAttribute('aria-busy');

  if (typedAnswer) showTyped(state, typedAnswer, grid);
  else $('query-chart').hidden = true;
  if (red instanceof Error) {
    clearRed();
    $('red').hidden = true;
    fill($('metrics-status'), el('span', { class: 'status-error' }, red.message));
  } else {
    showRed(state, red.map((a) => parseSeries(a.data)), queries, grid, span);
    loadServices(start, end);
  }
  if (partial.length) {
    fill($('metrics-warning'), el('strong', {}, 'Partial results: '),
      'some data could not be read, so the charts may show less than there is. ',
      el('span', { class: 'mono' }, [...new Set(partial)].join('; ')));
    $('metrics-warning').hidden = false;
  }
}

async function loadServices(start, end) {
  let values = [];
  try {
    values = (await api.tagValues(SERVICE, { start, end })).data.tagValues || [];
  } catch {
    return; // the charts themselves report an unreachable server
  }
  const select = $('m-service');
  const keep = select.value;
  fill(select, el('option', { value: '' }, 'every service'),
    values.map((v) => v.value).sort().map((v) => el('option', { value: v }, v)));
  setSelect(select, keep);
}

function showTyped(state, { a, e }, { step }) {
  const node = $('query-chart-plot');
  fill($('query-chart-title'), state.q);
  $('query-chart').hidden = false;
  if (e) {
    node.uplot?.destroy();
    node.uplot = null;
    fill(node);
    if (e.kind === 'bad-request') {
      // Said under the query, where it is wrong, as the search page says it.
      $('query-chart').hidden = true;
      const where = /line (\d+), column (\d+)/.exec(e.message);
      if (where) {
        const line = state.q.split('\n')[Number(where[1]) - 1] ?? state.q;
        fill($('m-query-error-where'), `${line}\n${' '.repeat(Math.max(0, Number(where[2]) - 1))}^`);
      } else {
        fill($('m-query-error-where'));
      }
      fill($('m-query-error-message'), e.message);
      $('m-query-error').hidden = false;
    } else {
      node.append(el('p', { class: 'status-error' }, e.message));
    }
    return;
  }
  const series = parseSeries(a.data);
  if (!series.length) {
    node.uplot?.destroy();
    node.uplot = null;
    fill(node, el('p', { class: 'muted' }, 'No spans in the range match this query.'));
    return;
  }
  const lines = series.map((s, i) => ({
    label: describe(s.labels), labels: s.labels, color: PALETTE[i % PALETTE.length], samples: s.samples, exemplars: s.exemplars,
  }));
  const unit = /\|\s*rate\s*\(/.test(state.q) ? 'rate' : /quantile_over_time\s*\(\s*duration\b|_over_time\s*\(\s*duration\b/.test(state.q) ? 'seconds' : '';
  drawChart(node, {
    lines,
    unit,
    height: 220,
    legend: true,
    onPoint: (line, ms) => { location.hash = searchHash(filterOf(state.q, line.labels), ms, step); },
    onExemplar: (ex) => { location.hash = traceHash(ex); },
  });
}

/** Empties the charts per service (uPlot's listeners go with them). */
function clearRed() {
  const body = $('red-body');
  body.querySelectorAll('.chart').forEach((n) => n.uplot?.destroy());
  return fill(body);
}

function showRed(state, [rate, errors, duration], queries, { step }, span) {
  const byService = (list) => {
    const out = new Map();
    for (const s of list) {
      const name = String(s.labels[SERVICE] ?? '');
      if (!out.has(name)) out.set(name, []);
      out.get(name).push(s);
    }
    return out;
  };
  const rates = byService(rate);
  const errs = byService(errors);
  const durs = byService(duration);
  const total = (name) => rates.get(name).reduce((n, s) => n + s.samples.reduce((m, [, v]) => m + (v || 0), 0), 0);
  let services = [...rates.keys()].sort();
  const body = clearRed();
  if (!services.length) {
    $('red').hidden = true;
    fill($('metrics-status'), state.service
      ? `No spans of ${state.service} in ${span}.`
      : `No spans in ${span}. Traces sent to this server over OTLP are charted here.`);
    return;
  }
  $('red').hidden = false;
  let note = '';
  if (services.length > MAX_SERVICES) {
    services = [...services].sort((x, y) => total(y) - total(x)).slice(0, MAX_SERVICES).sort();
    note = ` (the ${MAX_SERVICES} busiest of ${rates.size}: pick one to see another)`;
  }
  fill($('metrics-status'), `${services.length} service${services.length === 1 ? '' : 's'} in ${span}, a point every ${step}s${note}. ` +
    'Click a point for the traces behind it, a ring (an exemplar) for its trace.');
  for (const name of services) {
    const filter = (q) => filterOf(q, { [SERVICE]: name });
    const base = rates.get(name)[0];
    const zero = base.samples.map(([ms]) => [ms, 0]);
    const errSeries = errs.get(name)?.[0];
    const charts = [
      ['rate', 'Span rate', [{ label: 'spans/s', color: COLORS.rate, samples: base.samples, exemplars: base.exemplars }], 'rate', filter(queries.rate)],
      ['errors', 'Error rate', [{ label: 'errors/s', color: COLORS.errors, samples: errSeries?.samples || zero, exemplars: errSeries?.exemplars || [] }], 'rate', filter(queries.errors)],
      ['duration', 'Duration', (durs.get(name) || [])
        .sort((x, y) => Number(x.labels.p) - Number(y.labels.p))
        .map((s) => {
          const p = `p${Math.round(Number(s.labels.p) * 100)}`;
          return { label: p, color: COLORS[p] || PALETTE[0], samples: s.samples, exemplars: s.exemplars };
        }), 'seconds', filter(queries.duration)],
    ];
    const row = el('div', { class: 'red-row', 'data-service': name },
      el('div', { class: 'red-service' },
        el('a', { href: stateHash({ ...state, service: name }), class: 'service-name' }, name || '(no service name)'),
        el('a', { href: `#/?${new URLSearchParams({ q: filter(queries.rate), range: state.range, ...(state.range === 'custom' ? { from: state.from, to: state.to } : {}), limit: '20' })}`, class: 'muted' }, 'traces')));
    body.append(row);
    for (const [metric, title, lines, unit, search] of charts) {
      const node = el('div', { class: 'chart', 'data-service': name, 'data-metric': metric });
      row.append(el('div', { class: 'red-cell' }, el('h3', {}, title), node));
      drawChart(node, {
        lines,
        unit,
        legend: metric === 'duration',
        onPoint: (_, ms) => { location.hash = searchHash(search, ms, step); },
        onExemplar: (ex) => { location.hash = traceHash(ex); },
      });
    }
  }
  // The queries behind the charts, to copy into the box above.
  fill($('red-queries'), Object.values(queries).map((q) => el('code', {}, q)));
}
