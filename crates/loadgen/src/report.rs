//! The summary: a human table and the same figures as JSON.

use std::{fmt::Write, time::Duration};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        Latency {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        }
    }

    fn json(&self) -> Value {
        json!({"count": self.count, "p50_us": self.p50, "p90_us": self.p90, "p99_us": self.p99,
               "p99_9_us": self.p999, "p99_99_us": self.p9999, "max_us": self.max})
    }

    fn row(&self, name: &str, out: &mut String) {
        let ms = |us: u64| us as f64 / 1000.0;
        let _ = writeln!(
            out,
            "{name:<24} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}  (ms, n={})",
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.p9999),
            ms(self.max),
            self.count
        );
    }
}

#[derive(Debug, Clone, Default)]
pub struct QueryResult {
    pub complete: u64,
    pub incomplete: u64,
    pub missing: u64,
    pub absent_not_found: u64,
    pub present_latency: Option<Latency>,
    pub absent_latency: Option<Latency>,
    /// SearchTraces sent, the rows they answered in all, and their latency.
    pub searches: u64,
    pub search_rows: u64,
    /// Searches that answered no row: a window that missed the data.
    pub empty_searches: u64,
    pub search_latency: Option<Latency>,
    /// Jaeger FindTraceSummaries sent, the summaries they answered in all,
    /// and their latency.
    pub summary_calls: u64,
    pub summary_rows: u64,
    pub summary_latency: Option<Latency>,
    /// Drilldown's startup metrics queries sent, the series they answered in
    /// all, those marked partial, and their latency, each and per round of
    /// four.
    pub metrics_queries: u64,
    pub metrics_series: u64,
    pub metrics_partial: u64,
    pub metrics_latency: Option<Latency>,
    pub metrics_round_latency: Option<Latency>,
}

#[derive(Debug, Clone)]
pub struct Summary {
    pub mode: &'static str,
    pub offered_rate: u64,
    pub elapsed: Duration,
    pub requests: u64,
    pub accepted_spans: u64,
    pub rejected_spans: u64,
    pub throttled_spans: u64,
    pub failed_spans: u64,
    /// Spans sent again after a throttled attempt (counted once per retry).
    pub retried_spans: u64,
    pub first_error: Option<String>,
    pub export_latency: Option<Latency>,
    /// Open loop: how late requests left against their schedule. Part of
    /// `export_latency`; shown apart so the generator's own delay (its timer
    /// ticks in whole milliseconds, and it shares the cores with the server)
    /// can be told from the server's.
    pub send_lag: Option<Latency>,
    pub server_cpu_us_per_span: Option<f64>,
    pub server_peak_rss_bytes: Option<u64>,
    /// With `--settle`: the server's CPU per span until it went quiet.
    pub settled: Option<Settled>,
    pub disk_bytes_per_span: Option<f64>,
    pub query: Option<QueryResult>,
}

/// What `--settle` measured after the load.
#[derive(Debug, Clone, Copy)]
pub struct Settled {
    /// From the end of the load until the server went quiet.
    pub waited: Duration,
    /// Server CPU from the start of the load until quiet, per accepted span.
    pub cpu_us_per_span: f64,
}

impl Summary {
    pub fn new(mode: &'static str, offered_rate: u64, elapsed: Duration) -> Self {
        Summary {
            mode,
            offered_rate,
            elapsed,
            requests: 0,
            accepted_spans: 0,
            rejected_spans: 0,
            throttled_spans: 0,
            failed_spans: 0,
            retried_spans: 0,
            first_error: None,
            export_latency: None,
            send_lag: None,
            server_cpu_us_per_span: None,
            server_peak_rss_bytes: None,
            settled: None,
            disk_bytes_per_span: None,
            query: None,
        }
    }

    fn accepted_per_second(&self) -> f64 {
        self.accepted_spans as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        if self.mode == "query" {
            latency_header(&mut out);
            self.query_rows(&mut out);
            return out;
        }
        let _ = writeln!(
            out,
            "mode {}{}, {:.1} s, {} requests",
            self.mode,
            if self.mode == "open" {
                format!(" at {} spans/s offered", self.offered_rate)
            } else {
                String::new()
            },
            self.elapsed.as_secs_f64(),
            self.requests
        );
        let _ = writeln!(
            out,
            "accepted spans/s         {:>12.0}",
            self.accepted_per_second()
        );
        let _ = writeln!(
            out,
            "spans accepted/rejected/throttled/failed  {} / {} / {} / {}; retried {}",
            self.accepted_spans,
            self.rejected_spans,
            self.throttled_spans,
            self.failed_spans,
            self.retried_spans
        );
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "first error              {e}");
        }
        latency_header(&mut out);
        if let Some(l) = &self.export_latency {
            l.row(
                if self.mode == "open" {
                    "export (from schedule)"
                } else {
                    "export"
                },
                &mut out,
            );
        }
        if let Some(l) = &self.send_lag {
            l.row("  of it, send lag", &mut out);
        }
        self.query_rows(&mut out);
        if let Some(c) = self.server_cpu_us_per_span {
            let _ = writeln!(out, "server CPU per span      {c:>12.3} µs");
        }
        if let Some(r) = self.server_peak_rss_bytes {
            let _ = writeln!(
                out,
                "server peak RSS          {:>12.1} MiB",
                r as f64 / (1 << 20) as f64
            );
        }
        if let Some(s) = self.settled {
            let _ = writeln!(
                out,
                "server CPU per span, settled {:>8.3} µs (quiet {:.0} s after the load)",
                s.cpu_us_per_span,
                s.waited.as_secs_f64()
            );
        }
        if let Some(d) = self.disk_bytes_per_span {
            let _ = writeln!(out, "disk bytes per span      {d:>12.1}");
        }
        out
    }

    /// GetTrace latency rows and the completeness check.
    fn query_rows(&self, out: &mut String) {
        let Some(q) = &self.query else {
            return;
        };
        if let Some(l) = &q.present_latency {
            l.row("GetTrace present", out);
        }
        if let Some(l) = &q.absent_latency {
            l.row("GetTrace absent", out);
        }
        let _ = writeln!(
            out,
            "traces complete/incomplete/missing  {} / {} / {}; absent IDs not found {}",
            q.complete, q.incomplete, q.missing, q.absent_not_found
        );
        if let Some(l) = &q.search_latency {
            l.row("SearchTraces", out);
            let _ = writeln!(
                out,
                "searches {} ({} answered no row), rows per search {:.1}",
                q.searches,
                q.empty_searches,
                q.search_rows as f64 / q.searches.max(1) as f64
            );
        }
        if let Some(l) = &q.summary_latency {
            l.row("FindTraceSummaries", out);
            let _ = writeln!(
                out,
                "trace summary calls {}, summaries per call {:.1}",
                q.summary_calls,
                q.summary_rows as f64 / q.summary_calls.max(1) as f64
            );
        }
        if let Some(l) = &q.metrics_latency {
            l.row("QueryMetrics", out);
        }
        if let Some(l) = &q.metrics_round_latency {
            l.row("Drilldown page (4)", out);
            let _ = writeln!(
                out,
                "metrics queries {} ({} partial), series per query {:.1}",
                q.metrics_queries,
                q.metrics_partial,
                q.metrics_series as f64 / q.metrics_queries.max(1) as f64
            );
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "mode": self.mode,
            "offered_spans_per_second": self.offered_rate,
            "elapsed_seconds": self.elapsed.as_secs_f64(),
            "requests": self.requests,
            "accepted_spans_per_second": self.accepted_per_second(),
            "accepted_spans": self.accepted_spans,
            "rejected_spans": self.rejected_spans,
            "throttled_spans": self.throttled_spans,
            "failed_spans": self.failed_spans,
            "retried_spans": self.retried_spans,
            "first_error": self.first_error,
            "export_latency": self.export_latency.map(|l| l.json()),
            "send_lag": self.send_lag.map(|l| l.json()),
            "server_cpu_us_per_span": self.server_cpu_us_per_span,
            "server_peak_rss_bytes": self.server_peak_rss_bytes,
            "settled": self.settled.map(|s| json!({
                "waited_seconds": s.waited.as_secs_f64(),
                "server_cpu_us_per_span": s.cpu_us_per_span,
            })),
            "disk_bytes_per_span": self.disk_bytes_per_span,
            "query": self.query.as_ref().map(|q| json!({
                "complete": q.complete, "incomplete": q.incomplete, "missing": q.missing,
                "absent_not_found": q.absent_not_found,
                "present_latency": q.present_latency.map(|l| l.json()),
                "absent_latency": q.absent_latency.map(|l| l.json()),
                "searches": q.searches, "search_rows": q.search_rows,
                "empty_searches": q.empty_searches,
                "search_latency": q.search_latency.map(|l| l.json()),
                "summary_calls": q.summary_calls, "summary_rows": q.summary_rows,
                "summary_latency": q.summary_latency.map(|l| l.json()),
                "metrics_queries": q.metrics_queries, "metrics_series": q.metrics_series,
                "metrics_partial": q.metrics_partial,
                "metrics_latency": q.metrics_latency.map(|l| l.json()),
                "metrics_round_latency": q.metrics_round_latency.map(|l| l.json()),
            })),
        })
    }
}

fn latency_header(out: &mut String) {
    let _ = writeln!(
        out,
        "{:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "latency", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
}
