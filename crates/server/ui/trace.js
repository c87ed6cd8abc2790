// The trace view: `#/trace/<id>` (and `?span=<span id>` for the chosen span),
// so that the address can be shared and survives a reload.

import * as api from './api.js';
import { showDetails } from './details.js';
import { clock, duration, el, fill } from './format.js';
import { buildTrace } from './model.js';
import { Waterfall } from './waterfall.js';

const $ = (id) => document.getElementById(id);

let waterfall = null;
let current = null; // the trace shown
let loading = null; // AbortController of the request under way

function setup() {
  if (waterfall) return;
  waterfall = new Waterfall(
    { rows: $('rows'), spacer: $('rows-spacer'), ticks: $('axis-ticks') },
    (span) => {
      showDetails($('details'), current, span, { close: () => unselect() });
      history.replaceState(null, '', `#/trace/${current.id}?span=${encodeURIComponent(span.id)}`);
    });
  $('expand-all').addEventListener('click', () => waterfall.expandAll());
  $('collapse-all').addEventListener('click', () => waterfall.collapseAll());
}

function unselect() {
  $('details').hidden = true;
  waterfall.selected = null;
  waterfall.window = null;
  waterfall.render();
  history.replaceState(null, '', `#/trace/${current.id}`);
}

/** Shows the trace `id`, its span `spanId` chosen if given. */
export async function openTrace(id, spanId) {
  setup();
  const clean = id.trim().toLowerCase();
  document.title = `Trace ${clean} · tracedb`;
  fill($('trace-title'), 'Trace ', el('span', { class: 'mono' }, clean));
  fill($('trace-summary'), 'Loading…');
  $('trace-warning').hidden = true;
  $('trace-error').hidden = true;
  $('trace-body').hidden = true;
  $('details').hidden = true;
  if (current && current.id === clean && spanId && !loading) {
    // Same trace (a span link within it): no reload.
    $('trace-body').hidden = false;
    summarise(current);
    chooseSpan(spanId);
    return;
  }
  loading?.abort();
  const request = new AbortController();
  loading = request;
  let answer;
  try {
    answer = await api.trace(clean, request.signal);
  } catch (e) {
    if (e.name === 'AbortError') return;
    loading = null;
    current = null;
    fill($('trace-summary'));
    showError(clean, e);
    return;
  }
  if (loading !== request) return;
  loading = null;
  const trace = buildTrace(clean, (answer.data && answer.data.trace) || {});
  if (!trace) {
    current = null;
    fill($('trace-summary'));
    showError(clean, new api.ApiError('not-found', 404, 'the server answered with no spans'));
    return;
  }
  current = trace;
  if (answer.partial) {
    fill($('trace-warning'), el('strong', {}, 'Partial trace: '),
      'some spans of this trace could not be read and are not shown. ',
      answer.partialReason ? el('span', { class: 'mono' }, answer.partialReason) : '');
    $('trace-warning').hidden = false;
  }
  summarise(trace);
  $('trace-body').hidden = false;
  waterfall.show(trace, spanId ? trace.byId.get(spanId) : undefined);
  if (spanId && !trace.byId.has(spanId)) {
    fill($('trace-warning'), `Span ${spanId} is not in this trace.`);
    $('trace-warning').hidden = false;
  }
}

function chooseSpan(spanId) {
  const span = spanId ? current.byId.get(spanId) : undefined;
  if (span) waterfall.select(span, { center: true });
}

function summarise(trace) {
  const root = trace.root;
  fill($('trace-title'), el('span', { class: 'service-name' }, root.service), ': ', root.name || '(no name)');
  const legend = trace.services.map((name) => {
    const swatch = el('span', { class: 'swatch' });
    swatch.style.backgroundColor = trace.colours.get(name);
    return el('span', {}, swatch, name);
  });
  fill($('legend'), legend);
  fill($('trace-summary'),
    'Trace ', el('span', { class: 'mono', id: 'trace-id' }, trace.id), ' · ',
    `${trace.spans.length} span${trace.spans.length === 1 ? '' : 's'}`, ' · ',
    `${trace.services.length} service${trace.services.length === 1 ? '' : 's'}`, ' · ',
    trace.errors ? el('span', { class: 'status-error' }, `${trace.errors} error${trace.errors === 1 ? '' : 's'}`) : '0 errors',
    ' · started ', clock(Number(trace.start / 1000000n)), ' · ', duration(trace.total),
    trace.orphans ? ` · ${trace.orphans} span${trace.orphans === 1 ? '' : 's'} whose parent is missing (shown as roots)` : '',
    trace.cycles ? ` · ${trace.cycles} span${trace.cycles === 1 ? '' : 's'} in a parent cycle (shown as roots)` : '');
}

function showError(id, e) {
  let message;
  switch (e.kind) {
    case 'not-found':
      message = `Trace ${id} was not found. It may not have arrived yet, it may be older than ` +
        'the retention period, or the ID may be mistyped.';
      break;
    case 'bad-request':
      message = `"${id}" is not a trace ID: ${e.message}. A trace ID is 32 hexadecimal digits.`;
      break;
    default:
      message = e.message;
  }
  fill($('trace-error'), message);
  $('trace-error').hidden = false;
}
