// The read API the viewer uses: GET requests to the Tempo API beside it,
// by relative URL, so that the page works over TLS and under a path prefix.

/** Why a request failed, said so that a person can act on it. */
export class ApiError extends Error {
  constructor(kind, status, message) {
    super(message);
    this.kind = kind; // 'unreachable' | 'bad-request' | 'not-found' | 'unavailable' | 'server' | 'bad-answer'
    this.status = status;
  }
}

const KINDS = { 400: 'bad-request', 401: 'no-tenant', 404: 'not-found', 503: 'unavailable' };

// With tenancy on, every request names the tenant the reader chose, in the
// header the server names when it refuses a request without one
// (`tracedb-tenant-header`). Both are kept in this browser's storage.
const TENANT = 'tracedb-tenant';
const TENANT_HEADER = 'tracedb-tenant-header';

/** The tenant requests name ('' for none). */
export function tenant() {
  return localStorage.getItem(TENANT) || '';
}

/** Names `value` ('' for none) as the tenant of every request from now on. */
export function setTenant(value) {
  if (value) localStorage.setItem(TENANT, value);
  else localStorage.removeItem(TENANT);
  dispatchEvent(new CustomEvent('tracedb:tenant', { detail: { tenant: value, needed: false } }));
}

function headers() {
  const out = { Accept: 'application/json' };
  const name = tenant();
  if (name) out[localStorage.getItem(TENANT_HEADER) || 'X-Scope-OrgID'] = name;
  return out;
}

/**
 * GET `path` with `params` (undefined and '' left out), JSON back:
 * `{ data, partial, partialReason }`; partial is set when the server says the
 * answer lacks what damaged files or unanswering nodes hold.
 */
export async function getJson(path, params = {}, signal) {
  const url = new URL(path, document.baseURI);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== '') url.searchParams.set(key, String(value));
  }
  let response;
  try {
    response = await fetch(url, { headers: headers(), cache: 'no-store', signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    const error = new ApiError('unreachable', 0,
      `Cannot reach the tracedb server at ${location.host}: is it running, and is this its HTTP address? (${e.message})`);
    dispatchEvent(new CustomEvent('tracedb:reachable', { detail: error }));
    throw error;
  }
  dispatchEvent(new CustomEvent('tracedb:reachable', { detail: null }));
  const text = await response.text();
  const header = response.headers.get('tracedb-tenant-header');
  if (header) {
    // The server keeps tenants apart: ask the reader for theirs.
    localStorage.setItem(TENANT_HEADER, header);
    dispatchEvent(new CustomEvent('tracedb:tenant', { detail: { tenant: tenant(), needed: true } }));
  }
  if (!response.ok) {
    const kind = KINDS[response.status] || 'server';
    let message = text.trim() || response.statusText;
    if (response.status === 503) message = `The server cannot answer now: ${message}. Retry in a moment.`;
    throw new ApiError(kind, response.status, message);
  }
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    throw new ApiError('bad-answer', response.status, `The server's answer to ${url.pathname} is not JSON.`);
  }
  return {
    data,
    partial: response.headers.get('tracedb-partial') === 'true',
    partialReason: response.headers.get('tracedb-partial-reason') || '',
  };
}

/** Tempo's search: TraceQL `q` over [start, end] in Unix seconds. */
export function search({ q, start, end, limit, spss }, signal) {
  return getJson('api/search', { q, start, end, limit, spss }, signal);
}

/** A whole trace as OTLP/JSON (`{ trace: { resourceSpans } }`). */
export function trace(id, signal) {
  return getJson(`api/v2/traces/${encodeURIComponent(id)}`, {}, signal);
}

/** Attribute names by scope (`{ scopes: [{ name, tags }] }`). */
export function tags({ start, end }, signal) {
  return getJson('api/v2/search/tags', { start, end }, signal);
}

/** Values of a tag, typed (`{ tagValues: [{ type, value }] }`), narrowed by TraceQL `q`. */
export function tagValues(tag, { start, end, q }, signal) {
  return getJson(`api/v2/search/tag/${encodeURIComponent(tag)}/values`, { start, end, q }, signal);
}

/**
 * A TraceQL metrics query `q` over [start, end] in Unix seconds, a value every
 * `step` seconds: Tempo's `{ series: [{ labels, samples, exemplars }] }`, with
 * `status: 'PARTIAL'` and a `message` when some of it is missing.
 */
export function metricsRange({ q, start, end, step, exemplars }, signal) {
  return getJson('api/metrics/query_range', { q, start, end, step, exemplars }, signal);
}
