//! Ingest counters and the Prometheus text format they are read in.
//!
//! Every counter is a relaxed atomic bumped once per request (never per span),
//! so counting costs nothing next to the fsync a request waits for. The
//! [`Exposition`] writer turns them, and any other figures the server adds
//! (the storage engine's), into Prometheus' text format 0.0.4.

use std::{
    fmt::Write as _,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use crate::{error::Error, scan::ScanOutcome};

/// How a request reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
    HttpJson,
}

impl Protocol {
    const ALL: [Protocol; 3] = [Protocol::Grpc, Protocol::HttpProtobuf, Protocol::HttpJson];

    pub fn label(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http_protobuf",
            Protocol::HttpJson => "http_json",
        }
    }
}

/// Why spans were not stored, for `tracedb_spans_rejected_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpanReason {
    InvalidTraceId,
    InvalidSpanId,
    NoStartTime,
    Expired,
    FutureTime,
    Storage,
    TraceTooLarge,
}

impl SpanReason {
    const ALL: [SpanReason; 7] = [
        SpanReason::InvalidTraceId,
        SpanReason::InvalidSpanId,
        SpanReason::NoStartTime,
        SpanReason::Expired,
        SpanReason::FutureTime,
        SpanReason::Storage,
        SpanReason::TraceTooLarge,
    ];

    fn label(self) -> &'static str {
        match self {
            SpanReason::InvalidTraceId => "invalid_trace_id",
            SpanReason::InvalidSpanId => "invalid_span_id",
            SpanReason::NoStartTime => "no_start_time",
            SpanReason::Expired => "expired",
            SpanReason::FutureTime => "future_time",
            SpanReason::Storage => "storage_error",
            SpanReason::TraceTooLarge => "trace_too_large",
        }
    }
}

/// How a request ended, for `tracedb_export_requests_total{outcome}`.
const OUTCOMES: [&str; 13] = [
    "ok",
    "partial",
    "malformed",
    "invalid_json",
    "bad_gzip",
    "too_large",
    "unsupported_media_type",
    "body_error",
    "overloaded",
    "storage_error",
    "unavailable",
    "invalid_tenant",
    "tenant_limit",
];

fn outcome_index(result: &Result<ScanOutcome, Error>) -> usize {
    match result {
        Ok(o) if o.rejected == 0 => 0,
        Ok(_) => 1,
        Err(Error::Scan(_)) => 2,
        Err(Error::Json(_)) => 3,
        Err(Error::Gzip(_)) => 4,
        Err(Error::TooLarge { .. }) => 5,
        Err(Error::UnsupportedContentType(_) | Error::UnsupportedEncoding(_)) => 6,
        Err(Error::Body(_)) => 7,
        Err(Error::Overloaded { .. }) => 8,
        // Storage pushing back is overload too: the client retries later.
        Err(Error::Storage(tracedb_lsm::Error::Backpressure { .. })) => 8,
        Err(Error::Storage(_)) => 9,
        Err(Error::Starting | Error::ShuttingDown) => 10,
        Err(Error::Tenant(_)) => 11,
        Err(Error::TenantRate { .. } | Error::TenantMemory { .. }) => 12,
    }
}

/// Upper bounds of the latency histograms' buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket, not cumulative; the last is +Inf.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    fn write(&self, out: &mut Exposition, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            out.sample(
                &format!("{name}_bucket"),
                &format!("{labels}{sep}le=\"{le}\""),
                cumulative,
            );
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        out.sample(&format!("{name}_sum"), labels, sum);
        out.sample(&format!("{name}_count"), labels, cumulative);
    }
}

/// The ingest path's counters.
#[derive(Debug, Default)]
pub struct IngestMetrics {
    /// By [`Protocol`].
    spans_accepted: [AtomicU64; 3],
    /// By [`SpanReason`].
    spans_rejected: [AtomicU64; SpanReason::ALL.len()],
    /// By [`Protocol`], then by outcome.
    requests: [[AtomicU64; OUTCOMES.len()]; 3],
    /// By [`Protocol`]: from the first byte of the handler to the answer.
    request_duration: [Histogram; 3],
    /// WAL append, group fsync and memtable append of one request.
    storage_write_duration: Histogram,
    bytes_received: [AtomicU64; 3],
}

impl IngestMetrics {
    /// Records one finished export.
    pub fn record(
        &self,
        protocol: Protocol,
        result: &Result<ScanOutcome, Error>,
        elapsed: Duration,
    ) {
        let p = protocol as usize;
        self.requests[p][outcome_index(result)].fetch_add(1, Ordering::Relaxed);
        self.request_duration[p].observe(elapsed);
        if let Ok(outcome) = result {
            self.spans_accepted[p].fetch_add(outcome.accepted, Ordering::Relaxed);
            for (reason, spans) in [
                (SpanReason::InvalidTraceId, outcome.rejected_trace_id),
                (SpanReason::InvalidSpanId, outcome.rejected_span_id),
                (SpanReason::NoStartTime, outcome.rejected_no_start),
                (SpanReason::Expired, outcome.rejected_expired),
                (SpanReason::FutureTime, outcome.rejected_future),
                (SpanReason::TraceTooLarge, outcome.rejected_too_large),
            ] {
                self.spans_rejected[reason as usize].fetch_add(spans, Ordering::Relaxed);
            }
        }
    }

    /// Spans that were scanned but not stored because storage failed.
    pub fn record_storage_failure(&self, spans: u64) {
        self.spans_rejected[SpanReason::Storage as usize].fetch_add(spans, Ordering::Relaxed);
    }

    pub fn record_storage_write(&self, elapsed: Duration) {
        self.storage_write_duration.observe(elapsed);
    }

    pub fn record_bytes(&self, protocol: Protocol, bytes: usize) {
        self.bytes_received[protocol as usize].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Spans accepted over every protocol.
    pub fn spans_accepted(&self) -> u64 {
        self.spans_accepted
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Writes every ingest metric.
    pub fn write(&self, out: &mut Exposition) {
        out.header(
            "tracedb_spans_accepted_total",
            "counter",
            "Spans stored durably and acknowledged, by protocol.",
        );
        for p in Protocol::ALL {
            out.sample(
                "tracedb_spans_accepted_total",
                &format!("protocol=\"{}\"", p.label()),
                self.spans_accepted[p as usize].load(Ordering::Relaxed),
            );
        }
        out.header(
            "tracedb_spans_rejected_total",
            "counter",
            "Spans of well-formed requests that were not stored, by reason.",
        );
        for r in SpanReason::ALL {
            out.sample(
                "tracedb_spans_rejected_total",
                &format!("reason=\"{}\"", r.label()),
                self.spans_rejected[r as usize].load(Ordering::Relaxed),
            );
        }
        out.header(
            "tracedb_export_requests_total",
            "counter",
            "Export requests by protocol and outcome.",
        );
        for p in Protocol::ALL {
            for (i, outcome) in OUTCOMES.iter().enumerate() {
                out.sample(
                    "tracedb_export_requests_total",
                    &format!("protocol=\"{}\",outcome=\"{outcome}\"", p.label()),
                    self.requests[p as usize][i].load(Ordering::Relaxed),
                );
            }
        }
        out.header(
            "tracedb_export_received_bytes_total",
            "counter",
            "Request body bytes read, before decompression, by protocol.",
        );
        for p in Protocol::ALL {
            out.sample(
                "tracedb_export_received_bytes_total",
                &format!("protocol=\"{}\"", p.label()),
                self.bytes_received[p as usize].load(Ordering::Relaxed),
            );
        }
        out.header(
            "tracedb_export_duration_seconds",
            "histogram",
            "Time to answer an export request, by protocol.",
        );
        for p in Protocol::ALL {
            self.request_duration[p as usize].write(
                out,
                "tracedb_export_duration_seconds",
                &format!("protocol=\"{}\"", p.label()),
            );
        }
        out.header(
            "tracedb_storage_write_duration_seconds",
            "histogram",
            "Time for one request's spans to be appended to the WAL, fsynced and buffered.",
        );
        self.storage_write_duration
            .write(out, "tracedb_storage_write_duration_seconds", "");
    }
}

/// A Prometheus text-format (0.0.4) document being written.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

/// A sample value: integers print exactly, floats as Rust prints them.
pub trait SampleValue {
    fn write_to(&self, out: &mut String);
}

impl SampleValue for u64 {
    fn write_to(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl SampleValue for usize {
    fn write_to(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl SampleValue for f64 {
    fn write_to(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl Exposition {
    /// The `# HELP` and `# TYPE` lines of a metric family.
    pub fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// One sample line; `labels` is `key="value",...` or empty.
    pub fn sample(&mut self, name: &str, labels: &str, value: impl SampleValue) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            self.text.push_str(labels);
            self.text.push('}');
        }
        self.text.push(' ');
        value.write_to(&mut self.text);
        self.text.push('\n');
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: &str, help: &str, value: impl SampleValue) {
        self.header(name, kind, help);
        self.sample(name, "", value);
    }

    pub fn finish(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let mut out = Exposition::default();
        h.write(&mut out, "x", "p=\"a\"");
        let text = out.finish();
        assert!(
            text.contains("x_bucket{p=\"a\",le=\"0.0005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("x_bucket{p=\"a\",le=\"0.005\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("x_bucket{p=\"a\",le=\"10\"} 2\n"), "{text}");
        assert!(text.contains("x_bucket{p=\"a\",le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("x_count{p=\"a\"} 3\n"), "{text}");
    }

    #[test]
    fn records_spans_by_protocol_and_reason() {
        let m = IngestMetrics::default();
        let outcome = ScanOutcome {
            accepted: 5,
            rejected: 9,
            rejected_trace_id: 2,
            rejected_span_id: 1,
            rejected_no_start: 1,
            rejected_expired: 4,
            rejected_future: 1,
            rejected_too_large: 0,
            rejection_message: String::new(),
        };
        m.record(Protocol::HttpJson, &Ok(outcome), Duration::from_millis(1));
        m.record(
            Protocol::Grpc,
            &Err(Error::Starting),
            Duration::from_millis(1),
        );
        let mut out = Exposition::default();
        m.write(&mut out);
        let text = out.finish();
        assert!(text.contains("tracedb_spans_accepted_total{protocol=\"http_json\"} 5\n"));
        assert!(text.contains("tracedb_spans_rejected_total{reason=\"invalid_trace_id\"} 2\n"));
        assert!(text.contains("tracedb_spans_rejected_total{reason=\"invalid_span_id\"} 1\n"));
        assert!(text.contains("tracedb_spans_rejected_total{reason=\"no_start_time\"} 1\n"));
        assert!(text.contains("tracedb_spans_rejected_total{reason=\"expired\"} 4\n"));
        assert!(text.contains("tracedb_spans_rejected_total{reason=\"future_time\"} 1\n"));
        assert!(text.contains(
            "tracedb_export_requests_total{protocol=\"http_json\",outcome=\"partial\"} 1\n"
        ));
        assert!(text.contains(
            "tracedb_export_requests_total{protocol=\"grpc\",outcome=\"unavailable\"} 1\n"
        ));
        assert_eq!(m.spans_accepted(), 5);
    }
}
