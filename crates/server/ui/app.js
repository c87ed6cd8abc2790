// The trace viewer's entry point: routes the address's fragment to the
// search page (`#/?q=...`), the metrics page (`#/metrics?...`) or a trace
// (`#/trace/<id>?span=<id>`).

import { setTenant, tenant } from './api.js';
import { showMetrics } from './metrics.js';
import { showSearch } from './search.js';
import { openTrace } from './trace.js';

const $ = (id) => document.getElementById(id);

function route() {
  const hash = location.hash || '#/';
  const trace = /^#\/trace\/([^?]*)(?:\?(.*))?$/.exec(hash);
  const metrics = /^#\/metrics(?:\?(.*))?$/.exec(hash);
  $('search-view').hidden = Boolean(trace || metrics);
  $('metrics-view').hidden = !metrics;
  $('trace-view').hidden = !trace;
  $('tab-search').classList.toggle('current', !trace && !metrics);
  $('tab-metrics').classList.toggle('current', Boolean(metrics));
  if (metrics) {
    showMetrics(new URLSearchParams(metrics[1] || ''));
  } else if (trace) {
    let id = trace[1];
    try {
      id = decodeURIComponent(id);
    } catch {
      // shown as typed; the server says it is not an ID
    }
    openTrace(id, new URLSearchParams(trace[2] || '').get('span') || undefined);
  } else {
    const at = hash.indexOf('?');
    showSearch(new URLSearchParams(at >= 0 ? hash.slice(at + 1) : ''));
  }
}

$('open-trace').addEventListener('submit', (e) => {
  e.preventDefault();
  const id = $('trace-id-input').value.trim();
  if (id) location.hash = `#/trace/${encodeURIComponent(id)}`;
});

// A request that could not reach the server says so at the top of the page
// until one gets through.
addEventListener('tracedb:reachable', (e) => {
  const banner = $('banner');
  banner.hidden = !e.detail;
  banner.textContent = e.detail ? e.detail.message : '';
});

// With tenancy on, the tenant field shows once the server asks for one (or
// one is set); using another tenant reads the page again.
addEventListener('tracedb:tenant', (e) => {
  $('tenant-form').hidden = false;
  if (e.detail.needed && !tenant()) $('tenant-input').focus();
});
$('tenant-input').value = tenant();
$('tenant-form').hidden = !tenant();
$('tenant-form').addEventListener('submit', (e) => {
  e.preventDefault();
  setTenant($('tenant-input').value.trim());
  route();
});

addEventListener('hashchange', route);
route();
