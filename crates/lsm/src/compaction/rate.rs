//! A byte-rate limiter for compaction writes, so a large merge cannot take the
//! disk bandwidth ingest needs for its WAL fsyncs and flushes.
//!
//! A token bucket: `bytes_per_sec` tokens a second, at most one second's worth
//! banked. A caller that overdraws sleeps until the bucket is back at zero.
//! Shared by all compaction threads, so the limit is for the whole engine.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

#[derive(Debug)]
pub struct RateLimiter {
    bytes_per_sec: u64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// `bytes_per_sec == 0` means unlimited.
    pub fn new(bytes_per_sec: u64) -> Self {
        RateLimiter {
            bytes_per_sec,
            state: Mutex::new((bytes_per_sec as f64, Instant::now())),
        }
    }

    /// How long a caller must wait after taking `bytes` now (zero if the
    /// bucket had them). Updates the bucket; does not sleep.
    pub fn take(&self, bytes: u64) -> Duration {
        if self.bytes_per_sec == 0 {
            return Duration::ZERO;
        }
        let rate = self.bytes_per_sec as f64;
        let mut st = self.state.lock();
        let now = Instant::now();
        let refill = now.duration_since(st.1).as_secs_f64() * rate;
        st.0 = (st.0 + refill).min(rate) - bytes as f64;
        st.1 = now;
        if st.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-st.0 / rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overdrawing_the_bucket_asks_for_a_proportional_wait() {
        let limiter = RateLimiter::new(1000);
        // One second's worth is banked at start.
        assert_eq!(limiter.take(1000), Duration::ZERO);
        let wait = limiter.take(500);
        assert!(
            wait > Duration::from_millis(400) && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        assert_eq!(RateLimiter::new(0).take(u64::MAX), Duration::ZERO);
    }
}
