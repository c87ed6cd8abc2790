// Formatting and DOM helpers. Span data is untrusted: it only ever enters the
// document as text nodes (el() and text()), never as markup.

/** An element with attributes and children; strings become text nodes. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') || key === 'style') throw new Error(`el: ${key} is not allowed`);
    if (key === 'class') node.className = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }
}

/** Replaces every child of `node`. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** A duration in nanoseconds, as a person reads it. */
export function duration(ns) {
  if (!Number.isFinite(ns) || ns < 0) return '?';
  if (ns < 1e3) return `${Math.round(ns)}ns`;
  if (ns < 1e6) return `${trim(ns / 1e3)}µs`;
  if (ns < 1e9) return `${trim(ns / 1e6)}ms`;
  if (ns < 60e9) return `${trim(ns / 1e9)}s`;
  const s = Math.round(ns / 1e9);
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

function trim(x) {
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

const pad = (n, w = 2) => String(n).padStart(w, '0');

/** Local wall-clock time of `ms` since the epoch, to the millisecond. */
export function clock(ms) {
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return '?';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** How long ago `ms` was, roughly. */
export function ago(ms, now = Date.now()) {
  const s = Math.round((now - ms) / 1000);
  if (s < 0) return 'in the future';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/** Nanoseconds since the epoch, from OTLP/JSON's decimal string, exactly. */
export function nanos(value) {
  try {
    return BigInt(value ?? 0);
  } catch {
    return 0n;
  }
}

/** An OTLP/JSON AnyValue as text. */
export function anyValue(v) {
  if (!v || typeof v !== 'object') return '';
  if ('stringValue' in v) return String(v.stringValue);
  if ('intValue' in v) return String(v.intValue);
  if ('doubleValue' in v) return String(v.doubleValue);
  if ('boolValue' in v) return String(v.boolValue);
  if ('bytesValue' in v) return `base64:${v.bytesValue}`;
  if ('arrayValue' in v) return `[${(v.arrayValue.values || []).map(quoted).join(', ')}]`;
  if ('kvlistValue' in v) {
    return `{${(v.kvlistValue.values || []).map((kv) => `${kv.key}: ${quoted(kv.value)}`).join(', ')}}`;
  }
  return '';
}

function quoted(v) {
  return v && 'stringValue' in v ? JSON.stringify(v.stringValue) : anyValue(v);
}

/** `s` as a TraceQL string literal. */
export function traceqlString(s) {
  return `"${String(s).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n').replace(/\t/g, '\\t')}"`;
}

/** The value of attribute `key` in an OTLP/JSON attribute list, or undefined. */
export function attr(list, key) {
  const kv = (list || []).find((a) => a.key === key);
  return kv ? anyValue(kv.value) : undefined;
}

/** Colours of services within one trace: distinct for the first ten, then reused. */
export const PALETTE = [
  '#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2',
  '#edc948', '#9c755f', '#ff9da7', '#86bcb6', '#8c8cc4',
];
