// The search page: `#/?q=<TraceQL>&range=1h&limit=20` (or `range=custom`
// with `from` and `to` in Unix seconds), so that a search can be shared.
// Opening the page runs `{}` over the last hour: the newest traces.

import * as api from './api.js';
import { attachCompletion } from './complete.js';
import { ago, clock, duration, el, fill, traceqlString } from './format.js';
import { RANGES, RANGE_WORDS, fromLocalInput, timeWindow, toLocalInput } from './range.js';

const $ = (id) => document.getElementById(id);

const DEFAULT = { q: '{}', range: '1h', limit: 20 };
/** Spans shown per matched spanset. */
const SPSS = 5;
const DURATION = /^\d+(\.\d+)?(ns|us|µs|ms|s|m|h)$/;

let ready = false;
let running = null;
let lastPickerWindow = '';
const names = { at: 0, list: null };

/** The search's state from the address's query part. */
export function parseState(params) {
  const limit = Number(params.get('limit'));
  return {
    q: params.get('q') ?? DEFAULT.q,
    range: params.get('range') in RANGES || params.get('range') === 'custom' ? params.get('range') : DEFAULT.range,
    from: Number(params.get('from')) || 0,
    to: Number(params.get('to')) || 0,
    limit: Number.isInteger(limit) && limit >= 1 && limit <= 1000 ? limit : DEFAULT.limit,
  };
}

function stateHash(state) {
  const p = new URLSearchParams();
  p.set('q', state.q);
  p.set('range', state.range);
  if (state.range === 'custom') {
    p.set('from', String(state.from));
    p.set('to', String(state.to));
  }
  p.set('limit', String(state.limit));
  return `#/?${p}`;
}

/** The form's state. */
function formState() {
  const range = $('range').value;
  const state = {
    q: $('query').value.trim() || '{}',
    range,
    from: 0,
    to: 0,
    limit: Math.min(1000, Math.max(1, Number($('limit').value) || DEFAULT.limit)),
  };
  if (range === 'custom') {
    state.from = fromLocalInput($('from').value);
    state.to = fromLocalInput($('to').value);
  }
  return state;
}

/** The TraceQL the pickers stand for. */
function pickerQuery() {
  const conds = [];
  if ($('service').value) conds.push(`resource.service.name = ${traceqlString($('service').value)}`);
  if ($('span-name').value) conds.push(`name = ${traceqlString($('span-name').value)}`);
  if ($('errors-only').checked) conds.push('status = error');
  const min = $('min-duration').value.trim();
  if (min && DURATION.test(min)) conds.push(`duration >= ${min}`);
  return conds.length ? `{ ${conds.join(' && ')} }` : '{}';
}

/** Sets the pickers from a query they could have written, else clears them. */
function pickersFrom(q) {
  const picked = { service: '', name: '', errors: false, min: '' };
  const inner = /^\{\s*(.*?)\s*\}$/.exec(q.trim());
  let ok = Boolean(inner);
  if (inner && inner[1]) {
    for (const cond of inner[1].split(' && ')) {
      let m;
      if ((m = /^resource\.service\.name = ("(?:[^"\\]|\\.)*")$/.exec(cond))) picked.service = JSON.parse(m[1]);
      else if ((m = /^name = ("(?:[^"\\]|\\.)*")$/.exec(cond))) picked.name = JSON.parse(m[1]);
      else if (cond === 'status = error') picked.errors = true;
      else if ((m = /^duration >= (\S+)$/.exec(cond)) && DURATION.test(m[1])) picked.min = m[1];
      else ok = false;
    }
  }
  if (!ok) Object.assign(picked, { service: '', name: '', errors: false, min: '' });
  setSelect($('service'), picked.service);
  setSelect($('span-name'), picked.name);
  $('errors-only').checked = picked.errors;
  $('min-duration').value = picked.min;
}

function setSelect(select, value) {
  if (value && ![...select.options].some((o) => o.value === value)) {
    select.appendChild(el('option', { value }, value));
  }
  select.value = value;
}

async function loadPickers(state) {
  const [start, end] = timeWindow(state);
  const key = `${state.range}:${state.range === 'custom' ? `${start}-${end}` : Math.floor(start / 60)}`;
  if (key === lastPickerWindow) return;
  lastPickerWindow = key;
  const fillPicker = async (select, tag) => {
    let values = [];
    try {
      values = (await api.tagValues(tag, { start, end })).data.tagValues || [];
    } catch {
      return; // the search itself reports an unreachable server
    }
    const keep = select.value;
    fill(select, el('option', { value: '' }, 'any'),
      values.map((v) => v.value).sort().map((v) => el('option', { value: v }, v)));
    setSelect(select, keep);
  };
  await Promise.all([fillPicker($('service'), 'resource.service.name'), fillPicker($('span-name'), 'name')]);
}

async function completionNames() {
  if (names.list && Date.now() - names.at < 30000) return names.list;
  const [start, end] = timeWindow(formState());
  const scopes = (await api.tags({ start, end })).data.scopes || [];
  const list = [];
  for (const scope of scopes) {
    for (const tag of scope.tags || []) {
      const name = scope.name === 'intrinsic' ? tag : `${scope.name}.${tag}`;
      list.push({ name, scope: scope.name });
    }
  }
  names.list = list;
  names.at = Date.now();
  return list;
}

function setup() {
  if (ready) return;
  ready = true;
  $('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    // A trace ID pasted where a query goes opens that trace.
    const text = $('query').value.trim();
    if (/^[0-9a-fA-F]{16}([0-9a-fA-F]{16})?$/.test(text)) location.hash = `#/trace/${text.toLowerCase()}`;
    else go(formState());
  });
  $('range').addEventListener('change', () => {
    const custom = $('range').value === 'custom';
    $('custom-range').hidden = !custom;
    if (custom && !$('from').value) {
      const now = Math.floor(Date.now() / 1000);
      $('from').value = toLocalInput(now - 3600);
      $('to').value = toLocalInput(now);
    }
    if (!custom) go(formState());
  });
  for (const id of ['service', 'span-name', 'errors-only']) {
    $(id).addEventListener('change', () => {
      $('query').value = pickerQuery();
      go(formState());
    });
  }
  $('min-duration').addEventListener('change', () => {
    const v = $('min-duration').value.trim();
    $('min-duration').setCustomValidity(v && !DURATION.test(v) ? 'a duration such as 250ms, 1.5s or 2m' : '');
    if (!v || DURATION.test(v)) {
      $('query').value = pickerQuery();
      go(formState());
    } else {
      $('min-duration').reportValidity();
    }
  });
  attachCompletion($('query'), $('completions'), {
    names: completionNames,
    values: async (tag, q) => {
      const [start, end] = timeWindow(formState());
      return (await api.tagValues(tag, { start, end, q })).data.tagValues || [];
    },
  });
}

/** Runs `state`'s search, through the address so that it can be shared. */
function go(state) {
  const hash = stateHash(state);
  if (location.hash === hash) showSearch(new URLSearchParams(hash.slice(3)));
  else location.hash = hash;
}

/** Shows the search page for the address's parameters and runs the search. */
export async function showSearch(params) {
  setup();
  const state = parseState(params);
  document.title = 'Search · tracedb';
  $('query').value = state.q;
  $('range').value = state.range;
  $('custom-range').hidden = state.range !== 'custom';
  if (state.range === 'custom') {
    $('from').value = state.from ? toLocalInput(state.from) : '';
    $('to').value = state.to ? toLocalInput(state.to) : '';
  }
  $('limit').value = String(state.limit);
  pickersFrom(state.q);
  loadPickers(state);
  names.list = null;
  await run(state);
}

async function run(state) {
  running?.abort();
  const request = new AbortController();
  running = request;
  const [start, end] = timeWindow(state);
  $('query-error').hidden = true;
  $('search-warning').hidden = true;
  fill($('search-status'), 'Searching…');
  $('search-button').disabled = true;
  let answer;
  try {
    answer = await api.search({ q: state.q, start, end, limit: state.limit, spss: SPSS }, request.signal);
  } catch (e) {
    if (e.name === 'AbortError') return;
    if (running === request) {
      $('search-button').disabled = false;
      $('results').hidden = true;
      fill($('search-status'));
      searchError(state, e);
    }
    return;
  }
  if (running !== request) return;
  running = null;
  $('search-button').disabled = false;
  const traces = answer.data.traces || [];
  if (answer.partial) {
    fill($('search-warning'), el('strong', {}, 'Partial results: '),
      'some data could not be searched, so traces may be missing. ',
      answer.partialReason ? el('span', { class: 'mono' }, answer.partialReason) : '');
    $('search-warning').hidden = false;
  }
  const span = state.range === 'custom' ? `${clock(start * 1000)} to ${clock(end * 1000)}` : RANGE_WORDS[state.range];
  if (traces.length === 0) {
    fill($('search-status'), state.q === '{}'
      ? `No traces started in ${span}. Traces sent to this server over OTLP (gRPC, or HTTP POST /v1/traces) are listed here.`
      : `No traces started in ${span} match ${state.q}.`);
    $('results').hidden = true;
    return;
  }
  fill($('search-status'), `${traces.length} trace${traces.length === 1 ? '' : 's'} started in ${span}, newest first` +
    (traces.length >= state.limit ? ` (the limit, ${state.limit}: raise it or narrow the search to see more)` : '') + '.');
  fill($('results-body'), traces.map(resultRow));
  // `{}` matches every span: the list of matches would only repeat the trace.
  $('results').classList.toggle('no-matches', state.q.replace(/\s/g, '') === '{}');
  $('results').hidden = false;
}

function resultRow(t) {
  const id = String(t.traceID || '');
  const startMs = Number(BigInt(t.startTimeUnixNano || '0') / 1000000n);
  const stats = Object.values(t.serviceStats || {});
  const spans = stats.length ? stats.reduce((n, s) => n + (s.spanCount || 0), 0) : undefined;
  const errors = stats.length ? stats.reduce((n, s) => n + (s.errorCount || 0), 0) : undefined;
  const ms = t.durationMs || 0;
  const link = `#/trace/${id}`;
  return el('tr', { 'data-trace-id': id },
    el('td', {}, el('a', { href: link, class: 'trace-id' }, id)),
    el('td', {},
      el('span', { class: 'service-name' }, t.rootServiceName || ''),
      t.rootTraceName !== undefined ? ': ' : '',
      el('span', { class: 'root-name' }, t.rootTraceName ?? '')),
    el('td', { class: 'start', title: ago(startMs) }, clock(startMs)),
    el('td', { class: 'num' }, ms ? duration(ms * 1e6) : '<1ms'),
    el('td', { class: 'num span-count' }, spans ?? '–'),
    el('td', { class: errors ? 'num errors' : 'num' }, errors ?? '–'),
    el('td', { class: 'matched-col' }, matched(id, t.spanSets || [])));
}

function matched(id, sets) {
  const items = [];
  for (const set of sets) {
    const by = (set.attributes || []).map((a) => `${a.key}=${Object.values(a.value || {})[0]}`).join(' ');
    for (const s of set.spans || []) {
      const fields = (s.attributes || []).map((a) => `${a.key}=${Object.values(a.value || {})[0]}`).join(' ');
      items.push(el('li', {},
        el('a', { href: `#/trace/${id}?span=${encodeURIComponent(s.spanID || '')}`, class: 'matched-span' }, s.name || '(no name)'),
        el('span', { class: 'dur' }, duration(Number(s.durationNanos || 0))),
        fields ? el('span', { class: 'dur' }, fields) : null,
        by ? el('span', { class: 'dur' }, `by ${by}`) : null));
    }
    const more = (set.matched || 0) - (set.spans || []).length;
    if (more > 0) items.push(el('li', { class: 'muted' }, `and ${more} more`));
  }
  return items.length ? el('ul', { class: 'matched' }, items) : '';
}

function searchError(state, e) {
  if (e.kind === 'bad-request') {
    const where = /line (\d+), column (\d+)/.exec(e.message);
    if (where) {
      const line = state.q.split('\n')[Number(where[1]) - 1] ?? state.q;
      const col = Number(where[2]);
      fill($('query-error-where'), `${line}\n${' '.repeat(Math.max(0, col - 1))}^`);
      const input = $('query');
      if (Number(where[1]) === 1) input.setSelectionRange(col - 1, col - 1);
    } else {
      fill($('query-error-where'));
    }
    fill($('query-error-message'), e.message);
    $('query-error').hidden = false;
    return;
  }
  fill($('search-warning'));
  $('search-warning').hidden = true;
  fill($('search-status'), el('span', { class: 'status-error' }, e.message));
}
