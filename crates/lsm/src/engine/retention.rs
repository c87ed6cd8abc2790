//! Retention: spans that ended more than `EngineOptions::retention` ago are
//! past it. No read returns them; compaction drops them from the files it
//! writes; and every `retention_interval` a compaction thread drops whole the
//! files whose newest span is past it, by one manifest edit
//! ([`Inner::apply_retention`]).
//!
//! [`Retention`] owns the rule (the period, the interval, the clock) and the
//! pure choice of expired files; the scheduler claims them, so a file a
//! running compaction holds is left for the next pass.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use super::{add, Inner};
use crate::{
    compaction::{CompactionTask, TaskKind},
    error::Result,
    manifest::Edit,
    version::{TableFile, Version},
    Clock,
};

/// Owner of the retention rule (see the module docs).
pub(super) struct Retention {
    /// The period in nanoseconds; 0 keeps everything. Set at open and
    /// changed by [`Retention::set`] (a tenant's overrides) while serving.
    period: AtomicU64,
    /// How often the background threads apply retention.
    interval: Duration,
    clock: Clock,
}

impl Retention {
    pub(super) fn new(period: Option<Duration>, interval: Duration, clock: Clock) -> Self {
        Retention {
            period: AtomicU64::new(Self::nanos(period)),
            interval,
            clock,
        }
    }

    fn nanos(period: Option<Duration>) -> u64 {
        period.map_or(0, |p| {
            u64::try_from(p.as_nanos()).unwrap_or(u64::MAX).max(1)
        })
    }

    /// Keeps spans for `period` from now on (`None`: everything).
    pub(super) fn set(&self, period: Option<Duration>) {
        self.period.store(Self::nanos(period), Ordering::Relaxed);
    }

    /// The period now; `None` keeps everything.
    pub(super) fn period(&self) -> Option<Duration> {
        match self.period.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    /// Spans ending before this (Unix nanoseconds) are past retention (0
    /// when retention is off).
    pub(super) fn expire_before(&self) -> u64 {
        match self.period.load(Ordering::Relaxed) {
            0 => 0,
            r => self.clock.now_unix_nano().saturating_sub(r),
        }
    }

    /// When a thread that last applied retention at `last` applies it next.
    pub(super) fn next_due(&self, last: Instant) -> Instant {
        last + self.interval
    }

    /// The files of `version` no task holds (`busy`) whose newest span ends
    /// before `expire_before`.
    pub(super) fn expired(
        version: &Version,
        busy: &HashSet<u64>,
        expire_before: u64,
    ) -> Vec<Arc<TableFile>> {
        version
            .files()
            .filter(|f| {
                !busy.contains(&f.id) && f.table().meta().max_time_unix_nano < expire_before
            })
            .cloned()
            .collect()
    }
}

impl Inner {
    /// Drops every file whose newest span is past retention, by one manifest
    /// edit. Files in running compactions are left for the next pass.
    pub(super) fn apply_retention(&self) -> Result<usize> {
        let expire_before = self.retention.expire_before();
        if expire_before == 0 {
            return Ok(0);
        }
        let expired = self.scheduler.claim_files(|busy| {
            let version = self.tree.version();
            Retention::expired(&version, busy, expire_before)
        });
        if expired.is_empty() {
            return Ok(0);
        }
        let bytes: u64 = expired.iter().map(|f| f.size()).sum();
        let task = CompactionTask {
            kind: TaskKind::Merge,
            input_level: 0,
            output_level: 0,
            inputs: expired,
        };
        let result = self.install(
            Edit {
                next_file_id: self.tree.next_file_id(),
                removed: task.inputs.iter().map(|f| f.id).collect(),
                added: Vec::new(),
            },
            Vec::new(),
            None,
        );
        self.scheduler.finish(&task);
        result?;
        let n = task.inputs.len();
        add(&self.counters.retention_files_dropped, n as u64);
        add(&self.counters.retention_bytes_dropped, bytes);
        tracing::info!(files = n, bytes, expire_before, "retention dropped files");
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    const HOUR: u64 = 3600 * 1_000_000_000;

    #[test]
    fn spans_older_than_the_period_by_the_clock_are_past_retention() {
        let now = Arc::new(AtomicU64::new(10 * HOUR));
        let clock = {
            let now = now.clone();
            Clock::from_fn(move || now.load(Ordering::Relaxed))
        };
        let r = Retention::new(
            Some(Duration::from_secs(3600)),
            Duration::from_secs(60),
            clock.clone(),
        );
        assert_eq!(r.expire_before(), 9 * HOUR);
        now.store(12 * HOUR, Ordering::Relaxed);
        assert_eq!(r.expire_before(), 11 * HOUR, "follows the clock");
        let off = Retention::new(None, Duration::from_secs(60), clock);
        assert_eq!(off.expire_before(), 0, "retention off keeps everything");
        let t = Instant::now();
        assert_eq!(r.next_due(t), t + Duration::from_secs(60));
    }

    #[test]
    fn only_files_wholly_past_retention_and_not_busy_expire() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Each file holds one span ending at 2_000 (see `table_file`).
        let files: Vec<_> = (1..=3u64)
            .map(|id| crate::test_util::table_file(dir.path(), id, 0, 0, &[u128::from(id)]))
            .collect();
        let version = Version::empty(3).apply(&HashSet::new(), files);
        let ids = |files: Vec<Arc<TableFile>>| {
            let mut ids: Vec<u64> = files.iter().map(|f| f.id).collect();
            ids.sort_unstable();
            ids
        };
        assert!(Retention::expired(&version, &HashSet::new(), 2_000).is_empty());
        assert_eq!(
            ids(Retention::expired(&version, &HashSet::new(), 2_001)),
            [1, 2, 3]
        );
        assert_eq!(
            ids(Retention::expired(&version, &HashSet::from([2]), 2_001)),
            [1, 3]
        );
    }
}
