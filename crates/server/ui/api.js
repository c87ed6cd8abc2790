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

const KINDS = { 400: 'bad-request', 404: 'not-found', 503: 'unavailable' };

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
    response = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store', signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    const error = new ApiError('unreachable', 0,
      `Cannot reach the tracedb server at ${location.host}: is it running, and is this its HTTP address? (${e.message})`);
    dispatchEvent(new CustomEvent('tracedb:reachable', { detail: error }));
    throw error;
  }
  dispatchEvent(new CustomEvent('tracedb:reachable', { detail: null }));
  const text = await response.text();
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
