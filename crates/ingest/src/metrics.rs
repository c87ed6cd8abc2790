//! Ingest counters and the Prometheus text format they are read in.
//!
//! Every counter is a relaxed atomic bumped once per request (never per span),
//! so counting costs nothing next to the fsync a request waits for. They are
//! read when `/metrics` is scraped and written with [`crate::exposition`].

use std::{
    fmt,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, NoLabelSet},
    metrics::MetricType,
};

use crate::{
    error::Error,
    exposition::{family, DescriptorEncoder, Kind, NO_LABELS},
    scan::ScanOutcome,
};

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

    /// Observations per bucket (the last is +Inf), their sum in seconds, and
    /// their count.
    fn read(&self) -> ([(f64, u64); BUCKETS.len() + 1], f64, u64) {
        let mut buckets = [(f64::INFINITY, 0); BUCKETS.len() + 1];
        for (i, count) in self.counts.iter().enumerate() {
            buckets[i] = (
                BUCKETS.get(i).copied().unwrap_or(f64::INFINITY),
                count.load(Ordering::Relaxed),
            );
        }
        let count = buckets.iter().map(|&(_, n)| n).sum();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (buckets, sum, count)
    }
}

/// Each protocol's label.
fn protocols() -> impl Iterator<Item = [(&'static str, &'static str); 1]> {
    Protocol::ALL.into_iter().map(|p| [("protocol", p.label())])
}

/// One sample per protocol.
fn by_protocol(
    counts: &[AtomicU64; 3],
) -> impl Iterator<Item = ([(&'static str, &'static str); 1], u64)> + '_ {
    protocols().zip(counts.iter().map(|c| c.load(Ordering::Relaxed)))
}

/// Writes a histogram family, one histogram per label set.
fn histograms<'h, L: EncodeLabelSet>(
    out: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    each: impl IntoIterator<Item = (L, &'h Histogram)>,
) -> fmt::Result {
    let mut metric = out.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, histogram) in each {
        let (buckets, sum, count) = histogram.read();
        metric
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
    }
    Ok(())
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
    pub fn encode(&self, out: &mut DescriptorEncoder<'_>) -> fmt::Result {
        family(
            out,
            Kind::Counter,
            "tracedb_spans_accepted_total",
            "Spans stored durably and acknowledged, by protocol.",
            by_protocol(&self.spans_accepted),
        )?;
        family(
            out,
            Kind::Counter,
            "tracedb_spans_rejected_total",
            "Spans of well-formed requests that were not stored, by reason.",
            SpanReason::ALL.into_iter().map(|r| {
                (
                    [("reason", r.label())],
                    self.spans_rejected[r as usize].load(Ordering::Relaxed),
                )
            }),
        )?;
        family(
            out,
            Kind::Counter,
            "tracedb_export_requests_total",
            "Export requests by protocol and outcome.",
            Protocol::ALL.into_iter().flat_map(|p| {
                OUTCOMES.iter().enumerate().map(move |(i, outcome)| {
                    (
                        [("protocol", p.label()), ("outcome", outcome)],
                        self.requests[p as usize][i].load(Ordering::Relaxed),
                    )
                })
            }),
        )?;
        family(
            out,
            Kind::Counter,
            "tracedb_export_received_bytes_total",
            "Request body bytes read, before decompression, by protocol.",
            by_protocol(&self.bytes_received),
        )?;
        histograms(
            out,
            "tracedb_export_duration_seconds",
            "Time to answer an export request, by protocol.",
            protocols().zip(&self.request_duration),
        )?;
        histograms(
            out,
            "tracedb_storage_write_duration_seconds",
            "Time for one request's spans to be appended to the WAL, fsynced and buffered.",
            [(NO_LABELS, &self.storage_write_duration)],
        )
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
        let h = std::sync::Arc::new(h);
        let text =
            crate::exposition::render(move |out| histograms(out, "x", "X.", [([("p", "a")], &*h)]));
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
        let m = std::sync::Arc::new(m);
        let text = crate::exposition::render({
            let m = m.clone();
            move |out| m.encode(out)
        });
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
