// A span's details: everything OTLP says about it, as text.

import { anyValue, clock, duration, el, fill } from './format.js';

const KINDS = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];
const STATUS = ['unset', 'ok', 'error'];

function table(rows) {
  const body = rows
    .filter(([, value]) => value !== undefined && value !== '')
    .map(([key, value]) => el('tr', {}, el('th', {}, key), el('td', {}, value)));
  return el('table', { class: 'kv' }, el('tbody', {}, body));
}

function attributes(list, dropped) {
  if ((!list || list.length === 0) && !dropped) return el('p', { class: 'muted' }, 'none');
  return el('div', {},
    table((list || []).map((kv) => [kv.key, anyValue(kv.value)])),
    dropped ? el('p', { class: 'muted' }, `${dropped} dropped by the SDK`) : null);
}

/** Wall-clock time of a span-relative offset. */
function at(trace, ns) {
  return clock(Number((trace.start + BigInt(Math.round(ns))) / 1000000n));
}

/** Fills `box` with `span`'s details; `close` hides them. */
export function showDetails(box, trace, span, { close }) {
  const status = STATUS[span.status.code || 0] || String(span.status.code);
  const parent = span.parentId && !span.orphan ? trace.byId.get(span.parentId) : undefined;
  const parentCell = !span.parentId
    ? '(root span)'
    : parent
      ? el('a', { href: `#/trace/${trace.id}?span=${span.parentId}`, class: 'mono' }, span.parentId)
      : el('span', {}, span.parentId, el('span', { class: 'badge orphan' }, 'not in this trace'));

  const closeButton = el('button', { type: 'button', class: 'close', 'aria-label': 'Close details' }, '×');
  closeButton.addEventListener('click', close);

  fill(box,
    closeButton,
    el('h2', { id: 'details-name' }, span.name || '(no name)'),
    table([
      ['Service', span.service],
      ['Span ID', span.id],
      ['Parent', parentCell],
      ['Kind', KINDS[span.kind] || String(span.kind)],
      ['Status', el('span', { class: span.error ? 'status-error' : '' }, status,
        span.status.message ? `: ${span.status.message}` : '')],
      ['Start', `${at(trace, span.offset)} (+${duration(span.offset)})`],
      ['Duration', duration(span.duration)],
      ['Trace state', span.traceState],
    ]),
    el('h3', {}, 'Attributes'),
    attributes(span.attributes, span.dropped.attributes),
    el('h3', {}, `Events (${span.events.length})`),
    span.events.length === 0 && !span.dropped.events
      ? el('p', { class: 'muted' }, 'none')
      : span.events.map((e) => {
        const offset = Number(BigInt(e.timeUnixNano || 0) - trace.start);
        return el('div', { class: 'event' },
          el('span', { class: 'when' }, `+${duration(offset)}`),
          el('strong', {}, e.name || '(no name)'),
          e.attributes && e.attributes.length ? attributes(e.attributes, e.droppedAttributesCount) : null);
      }),
    span.dropped.events ? el('p', { class: 'muted' }, `${span.dropped.events} events dropped by the SDK`) : null,
    el('h3', {}, `Links (${span.links.length})`),
    span.links.length === 0 && !span.dropped.links
      ? el('p', { class: 'muted' }, 'none')
      : span.links.map((l) => {
        const target = /^[0-9a-f]{1,32}$/i.test(l.traceId || '')
          ? `#/trace/${l.traceId}${l.spanId ? `?span=${l.spanId}` : ''}`
          : undefined;
        return el('div', { class: 'link' },
          target
            ? el('a', { href: target, class: 'mono span-link' }, `${l.traceId} / ${l.spanId || '-'}`)
            : el('span', { class: 'mono' }, `${l.traceId || '?'} / ${l.spanId || '-'}`),
          l.traceId === trace.id ? el('span', { class: 'muted' }, ' (this trace)') : null,
          l.attributes && l.attributes.length ? attributes(l.attributes, l.droppedAttributesCount) : null);
      }),
    span.dropped.links ? el('p', { class: 'muted' }, `${span.dropped.links} links dropped by the SDK`) : null,
    el('h3', {}, 'Resource'),
    attributes(span.resource.attributes, span.resource.droppedAttributesCount),
    span.resourceSchemaUrl ? table([['Schema URL', span.resourceSchemaUrl]]) : null,
    el('h3', {}, 'Instrumentation scope'),
    table([
      ['Name', span.scope.name || '(none)'],
      ['Version', span.scope.version],
      ['Schema URL', span.scopeSchemaUrl],
    ]),
    span.scope.attributes && span.scope.attributes.length ? attributes(span.scope.attributes) : null);
  box.hidden = false;
}
