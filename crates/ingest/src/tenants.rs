//! Per-tenant ingest limits and counters.
//!
//! Each tenant's limits ([`TenantLimits`], from the server's overrides file)
//! are asked of a [`LimitsSource`] on every export, so a reloaded file applies
//! to the next request. Two rates, spans and bytes a second, are token
//! buckets of one second's worth: a request passes while its tenant's
//! buckets are not empty and takes what it holds from both (a request larger
//! than a second's worth passes when the buckets are full and leaves them in
//! debt), and is refused retryably, with the time until the buckets refill,
//! when either is empty. The memory share bounds the bytes a tenant's store
//! holds unflushed, so one tenant's flood leaves the rest of the budget to
//! the others.
//!
//! A largest trace ([`TraceSizes`]) bounds the bytes of one trace's spans
//! received close together: a span past it is left out of its request, and
//! said so in the OTLP partial success.
//!
//! [`TenantCounters`] count each tenant's spans accepted and rejected,
//! requests refused and bytes received, for `/metrics` (`tenant` label).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use tracedb_lsm::{Span, TraceId};
use tracedb_proto::tenant::TenantId;

use crate::exposition::{family, DescriptorEncoder, Kind};

/// What one tenant may send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TenantLimits {
    /// Spans a second; 0 for no limit.
    pub spans_per_sec: u64,
    /// Bytes of export requests a second, decoded (after gzip, and
    /// OTLP/JSON turned into protobuf); 0 for no limit.
    pub bytes_per_sec: u64,
    /// The most of the memory budget the tenant's unflushed spans may hold:
    /// above 0, at most 1.
    pub memory_share: f64,
    /// The most bytes of spans (as sent, encoded) one trace may hold, counted
    /// over the spans of it received within [`TRACE_WINDOW`] to twice that of
    /// each other; 0 for no limit.
    pub max_trace_bytes: u64,
}

impl Default for TenantLimits {
    fn default() -> Self {
        TenantLimits {
            spans_per_sec: 0,
            bytes_per_sec: 0,
            memory_share: 1.0,
            max_trace_bytes: 0,
        }
    }
}

/// Where each tenant's limits come from.
pub trait LimitsSource: Send + Sync {
    fn limits(&self, tenant: &TenantId) -> TenantLimits;
}

/// No limits for anyone.
pub struct Unlimited;

impl LimitsSource for Unlimited {
    fn limits(&self, _: &TenantId) -> TenantLimits {
        TenantLimits::default()
    }
}

/// Which rate a refused request was over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    Spans,
    Bytes,
}

impl Rate {
    pub fn unit(self) -> &'static str {
        match self {
            Rate::Spans => "spans",
            Rate::Bytes => "bytes",
        }
    }
}

/// A token bucket of one second's worth of `rate`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// The rate it was filled for: a new limit (a reloaded file) starts
    /// with a full bucket.
    rate: u64,
}

impl Bucket {
    fn refill(&mut self, rate: u64, now: Instant) {
        if self.rate != rate {
            *self = Bucket {
                tokens: rate as f64,
                at: now,
                rate,
            };
        }
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate as f64).min(rate as f64);
        self.at = now;
    }

    /// How long until the bucket holds a token again; zero if it does.
    fn wait(&self, rate: u64) -> Duration {
        if self.tokens > 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((-self.tokens + 1.0) / rate as f64)
        }
    }
}

/// Every tenant's two buckets.
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: Mutex<BTreeMap<TenantId, [Bucket; 2]>>,
}

impl RateLimiter {
    /// Takes `spans` and `bytes` from `tenant`'s buckets, or says which rate
    /// is spent and how long until it is not.
    pub fn take(
        &self,
        tenant: &TenantId,
        limits: &TenantLimits,
        spans: u64,
        bytes: u64,
        now: Instant,
    ) -> Result<(), (Rate, u64, Duration)> {
        let rates = [
            (Rate::Spans, limits.spans_per_sec, spans),
            (Rate::Bytes, limits.bytes_per_sec, bytes),
        ];
        if rates.iter().all(|r| r.1 == 0) {
            return Ok(());
        }
        let mut all = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let buckets = all.entry(tenant.clone()).or_insert_with(|| {
            rates.map(|(_, rate, _)| Bucket {
                tokens: rate as f64,
                at: now,
                rate,
            })
        });
        for ((what, rate, _), bucket) in rates.iter().zip(buckets.iter_mut()) {
            if *rate == 0 {
                continue;
            }
            bucket.refill(*rate, now);
            let wait = bucket.wait(*rate);
            if !wait.is_zero() {
                return Err((*what, *rate, wait));
            }
        }
        for ((_, rate, n), bucket) in rates.iter().zip(buckets.iter_mut()) {
            if *rate > 0 {
                bucket.tokens -= *n as f64;
            }
        }
        Ok(())
    }
}

/// How long a trace's bytes are remembered with no new span of it: between
/// one and two of these.
pub const TRACE_WINDOW: Duration = Duration::from_secs(60);

/// Most traces remembered per tenant with a largest trace; past it the older
/// half is forgotten early (the window shrinks), so the memory stays bounded
/// (about 40 bytes a trace).
pub const MAX_TRACKED_TRACES: usize = 1 << 18;

/// The bytes of each recent trace of the tenants with a largest trace.
#[derive(Default)]
pub struct TraceSizes {
    tenants: Mutex<BTreeMap<TenantId, Generations>>,
}

/// Two generations of trace sizes: a trace's size is the sum of both.
struct Generations {
    current: HashMap<TraceId, u64>,
    previous: HashMap<TraceId, u64>,
    since: Instant,
}

impl TraceSizes {
    /// Keeps the spans of `spans`, in order, that keep their trace within
    /// `max` bytes, counting what came of it before; returns how many were
    /// left out.
    pub fn admit(&self, tenant: &TenantId, max: u64, spans: &mut Vec<Span>, now: Instant) -> u64 {
        let mut all = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let g = all.entry(tenant.clone()).or_insert_with(|| Generations {
            current: HashMap::new(),
            previous: HashMap::new(),
            since: now,
        });
        let idle = now.saturating_duration_since(g.since);
        if idle >= 2 * TRACE_WINDOW {
            g.current.clear();
            g.previous.clear();
            g.since = now;
        } else if idle >= TRACE_WINDOW || g.current.len() >= MAX_TRACKED_TRACES / 2 {
            g.previous = std::mem::take(&mut g.current);
            g.since = now;
        }
        let mut dropped = 0;
        spans.retain(|span| {
            let bytes = span.payload.len() as u64;
            let before = g.current.get(&span.trace_id).copied().unwrap_or(0)
                + g.previous.get(&span.trace_id).copied().unwrap_or(0);
            if before + bytes > max {
                dropped += 1;
                false
            } else {
                *g.current.entry(span.trace_id).or_insert(0) += bytes;
                true
            }
        });
        dropped
    }
}

/// One tenant's counts.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    accepted: u64,
    rejected: u64,
    refused_requests: u64,
    bytes: u64,
}

/// A counter family's name, help and value of one tenant's counts.
type Family = (&'static str, &'static str, fn(&Counts) -> u64);

/// Each tenant's spans accepted and rejected, requests refused and bytes
/// received.
#[derive(Debug, Default)]
pub struct TenantCounters {
    counts: Mutex<BTreeMap<TenantId, Counts>>,
}

impl TenantCounters {
    pub(crate) fn record(&self, tenant: &TenantId, accepted: u64, rejected: u64, refused: bool) {
        let mut all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let c = all.entry(tenant.clone()).or_default();
        c.accepted += accepted;
        c.rejected += rejected;
        c.refused_requests += u64::from(refused);
    }

    pub(crate) fn record_bytes(&self, tenant: &TenantId, bytes: usize) {
        let mut all = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        all.entry(tenant.clone()).or_default().bytes += bytes as u64;
    }

    /// The families, one sample per tenant seen.
    pub fn encode(&self, out: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let all = self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let families: [Family; 4] = [
            (
                "tracedb_tenant_spans_accepted_total",
                "Spans stored and acknowledged, by tenant.",
                |c| c.accepted,
            ),
            (
                "tracedb_tenant_spans_rejected_total",
                "Spans of accepted requests refused one by one (partial success), by tenant.",
                |c| c.rejected,
            ),
            (
                "tracedb_tenant_requests_refused_total",
                "Export requests refused whole (over a limit, malformed, storage), by tenant.",
                |c| c.refused_requests,
            ),
            (
                "tracedb_tenant_received_bytes_total",
                "Bytes of export requests, decoded (after gzip and OTLP/JSON), by tenant.",
                |c| c.bytes,
            ),
        ];
        for (name, help, value) in families {
            let samples = all
                .iter()
                .map(|(tenant, counts)| ([("tenant", tenant.as_str())], value(counts)));
            family(out, Kind::Counter, name, help, samples)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(trace: u128, bytes: usize) -> Span {
        Span {
            trace_id: TraceId(trace.to_be_bytes()),
            span_id: tracedb_lsm::SpanId(1u64.to_be_bytes()),
            start_unix_nano: 1,
            end_unix_nano: 2,
            group: std::sync::Arc::new(tracedb_lsm::ScopeGroup {
                resource: None,
                resource_schema_url: bytes::Bytes::new(),
                scope: None,
                scope_schema_url: bytes::Bytes::new(),
            }),
            payload: bytes::Bytes::from(vec![0u8; bytes]),
        }
    }

    #[test]
    fn a_trace_past_its_tenants_largest_is_cut_and_others_are_not() {
        let sizes = TraceSizes::default();
        let (a, b) = (
            TenantId::new("a").expect("id"),
            TenantId::new("b").expect("id"),
        );
        let t0 = Instant::now();
        // 100-byte spans, 350 bytes a trace: the fourth span of trace 1 goes.
        let mut spans: Vec<Span> = (0..4).map(|_| span(1, 100)).chain([span(2, 100)]).collect();
        assert_eq!(sizes.admit(&a, 350, &mut spans, t0), 1);
        assert_eq!(spans.len(), 4);
        // Later requests count what came before, within the window...
        let mut more = vec![span(1, 50), span(1, 10), span(2, 100)];
        assert_eq!(
            sizes.admit(&a, 350, &mut more, t0 + Duration::from_secs(30)),
            1
        );
        assert_eq!(
            more.iter().map(|s| s.payload.len()).collect::<Vec<_>>(),
            [50, 100]
        );
        // ... and another tenant's traces are its own.
        let mut theirs: Vec<Span> = (0..3).map(|_| span(1, 100)).collect();
        assert_eq!(sizes.admit(&b, 350, &mut theirs, t0), 0);
        // Two windows with nothing of the trace: it is forgotten.
        let mut much_later = vec![span(1, 300)];
        let later = t0 + 2 * TRACE_WINDOW + Duration::from_secs(1);
        assert_eq!(sizes.admit(&a, 350, &mut much_later, later), 0);
        assert_eq!(sizes.admit(&a, 350, &mut vec![span(1, 100)], later), 1);
    }

    #[test]
    fn a_tenant_past_its_rate_waits_for_its_bucket_and_others_do_not() {
        let limiter = RateLimiter::default();
        let (a, b) = (
            TenantId::new("a").expect("id"),
            TenantId::new("b").expect("id"),
        );
        let limits = TenantLimits {
            spans_per_sec: 100,
            ..TenantLimits::default()
        };
        let t0 = Instant::now();
        // A second's worth, then more: the bucket is empty.
        assert!(limiter.take(&a, &limits, 100, 10, t0).is_ok());
        let (what, rate, wait) = limiter.take(&a, &limits, 1, 10, t0).expect_err("spent");
        assert_eq!((what, rate), (Rate::Spans, 100));
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(20),
            "{wait:?}"
        );
        // Another tenant's bucket is its own.
        assert!(limiter.take(&b, &limits, 100, 10, t0).is_ok());
        // Half a second refills half.
        let later = t0 + Duration::from_millis(500);
        assert!(limiter.take(&a, &limits, 60, 10, later).is_ok());
        assert!(limiter.take(&a, &limits, 1, 10, later).is_err());
        // A request of more than a second's worth passes a full bucket.
        let much_later = t0 + Duration::from_secs(10);
        assert!(limiter.take(&a, &limits, 1_000, 10, much_later).is_ok());
        let (_, _, wait) = limiter
            .take(&a, &limits, 1, 10, much_later)
            .expect_err("in debt");
        assert!(wait >= Duration::from_secs(9), "{wait:?}");
        // Bytes too, and no limit at all.
        let bytes = TenantLimits {
            bytes_per_sec: 1_000,
            ..TenantLimits::default()
        };
        assert!(limiter.take(&b, &bytes, 1, 2_000, t0).is_ok());
        assert_eq!(
            limiter.take(&b, &bytes, 1, 1, t0).expect_err("bytes").0,
            Rate::Bytes
        );
        for _ in 0..10 {
            assert!(limiter
                .take(&b, &TenantLimits::default(), 1_000_000, 1 << 30, t0)
                .is_ok());
        }
    }
}
