// A trace as the waterfall shows it: spans from OTLP/JSON, linked into a
// tree. Every span appears exactly once: a span whose parent is not in the
// trace is a root (marked `orphan`), and so is one caught in a parent cycle
// (marked `cycle`), which hostile or broken data can produce.

import { attr, nanos, PALETTE } from './format.js';

/** Builds the trace from `{ resourceSpans }`. */
export function buildTrace(traceId, data) {
  const spans = [];
  for (const rs of data.resourceSpans || []) {
    const resource = rs.resource || {};
    const service = attr(resource.attributes, 'service.name') ?? 'unknown service';
    for (const ss of rs.scopeSpans || []) {
      for (const s of ss.spans || []) {
        spans.push({
          id: s.spanId || '',
          parentId: s.parentSpanId || '',
          name: s.name ?? '',
          kind: s.kind || 0,
          start: nanos(s.startTimeUnixNano),
          end: nanos(s.endTimeUnixNano),
          status: s.status || {},
          error: (s.status && s.status.code) === 2,
          attributes: s.attributes || [],
          events: s.events || [],
          links: s.links || [],
          traceState: s.traceState || '',
          dropped: {
            attributes: s.droppedAttributesCount || 0,
            events: s.droppedEventsCount || 0,
            links: s.droppedLinksCount || 0,
          },
          service,
          resource,
          resourceSchemaUrl: rs.schemaUrl || '',
          scope: ss.scope || {},
          scopeSchemaUrl: ss.schemaUrl || '',
          children: [],
          depth: 0,
          orphan: false,
          cycle: false,
        });
      }
    }
  }
  if (spans.length === 0) return null;

  let start = spans[0].start;
  let end = spans[0].end;
  for (const s of spans) {
    if (s.start < start) start = s.start;
    if (s.end > end) end = s.end;
  }
  const total = Number(end - start) || 1;
  for (const s of spans) {
    s.offset = Number(s.start - start);
    s.duration = s.end > s.start ? Number(s.end - s.start) : 0;
  }

  const byId = new Map();
  for (const s of spans) if (!byId.has(s.id)) byId.set(s.id, s);
  const kids = new Map();
  const roots = [];
  for (const s of spans) {
    const parent = s.parentId ? byId.get(s.parentId) : undefined;
    if (!s.parentId) {
      roots.push(s);
    } else if (!parent) {
      s.orphan = true;
      roots.push(s);
    } else {
      if (!kids.has(parent)) kids.set(parent, []);
      kids.get(parent).push(s);
    }
  }
  const byStart = (a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0);
  roots.sort(byStart);

  // The tree, iteratively (a deep trace must not exhaust the stack); a span
  // is placed once, under the first parent that reaches it.
  const placed = new Set();
  const place = (root) => {
    placed.add(root);
    const stack = [root];
    while (stack.length) {
      const s = stack.pop();
      const children = (kids.get(s) || []).filter((c) => !placed.has(c)).sort(byStart);
      for (const c of children) {
        placed.add(c);
        c.depth = s.depth + 1;
        stack.push(c);
      }
      s.children = children;
    }
  };
  for (const r of roots) place(r);
  for (const s of spans) {
    if (!placed.has(s)) {
      s.cycle = true;
      roots.push(s);
      place(s);
    }
  }

  // Spans under each span, children before parents.
  const order = visibleRows({ roots }, new Set());
  for (let i = order.length - 1; i >= 0; i--) {
    const s = order[i];
    s.descendants = s.children.reduce((n, c) => n + 1 + c.descendants, 0);
  }

  const services = [...new Set(spans.map((s) => s.service))].sort();
  const colours = new Map(services.map((name, i) => [name, PALETTE[i % PALETTE.length]]));
  for (const s of spans) s.colour = colours.get(s.service);
  const root = roots.find((r) => !r.orphan && !r.cycle) || roots[0];

  return {
    id: traceId,
    spans,
    roots,
    byId,
    start,
    total,
    services,
    colours,
    root,
    errors: spans.filter((s) => s.error).length,
    orphans: spans.filter((s) => s.orphan).length,
    cycles: spans.filter((s) => s.cycle).length,
  };
}

/** The rows shown: every span under no collapsed ancestor, in tree order. */
export function visibleRows(trace, collapsed) {
  const rows = [];
  const stack = [...trace.roots].reverse();
  while (stack.length) {
    const s = stack.pop();
    rows.push(s);
    if (!collapsed.has(s)) {
      for (let i = s.children.length - 1; i >= 0; i--) stack.push(s.children[i]);
    }
  }
  return rows;
}

/** Every ancestor of `span`, nearest first. */
export function ancestors(trace, span) {
  const out = [];
  const seen = new Set([span]);
  let p = span.parentId && !span.orphan && !span.cycle ? trace.byId.get(span.parentId) : undefined;
  while (p && !seen.has(p)) {
    out.push(p);
    seen.add(p);
    p = p.parentId && !p.orphan && !p.cycle ? trace.byId.get(p.parentId) : undefined;
  }
  return out;
}
