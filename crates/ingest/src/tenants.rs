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
//! [`TenantCounters`] count each tenant's spans accepted and rejected,
//! requests refused and bytes received, for `/metrics` (`tenant` label).

use std::{
    collections::BTreeMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use tracedb_proto::tenant::TenantId;

use crate::metrics::Exposition;

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
}

impl Default for TenantLimits {
    fn default() -> Self {
        TenantLimits {
            spans_per_sec: 0,
            bytes_per_sec: 0,
            memory_share: 1.0,
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
    pub fn write(&self, out: &mut Exposition) {
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
            out.header(name, "counter", help);
            for (tenant, counts) in &all {
                out.sample(name, &format!("tenant=\"{tenant}\""), value(counts));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
