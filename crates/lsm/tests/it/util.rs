//! Helpers for the engine tests: a settable clock, small-tree options, span
//! generators and checks on the data directory.

use std::{
    collections::BTreeSet,
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use tracedb_lsm::{
    layout, test_util, Clock, CompactionOptions, Engine, EngineOptions, MemTableOptions,
    ScopeGroup, Span, TableOptions, TraceId,
};

pub const SEC: u64 = 1_000_000_000;
/// "Now" at the start of every test: far from the epoch, like real data.
pub const T0: u64 = 1_700_000_000 * SEC;

/// A clock tests move by hand.
#[derive(Clone)]
pub struct TestClock(pub Arc<AtomicU64>);

impl TestClock {
    pub fn new() -> Self {
        TestClock(Arc::new(AtomicU64::new(T0)))
    }
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    pub fn advance(&self, nanos: u64) {
        self.0.fetch_add(nanos, Ordering::SeqCst);
    }
    pub fn clock(&self) -> Clock {
        let c = self.0.clone();
        Clock::from_fn(move || c.load(Ordering::SeqCst))
    }
}

/// A tiny tree: 2 KiB buffers, 4 KiB files, 10-second partitions, no
/// background threads (tests call `compact` and `apply_retention`).
pub fn small_tree(dir: &Path, clock: &TestClock) -> EngineOptions {
    let mut opts = EngineOptions::new(dir);
    opts.memtable = MemTableOptions {
        shards: 2,
        flush_bytes: 2 << 10,
        max_age: Duration::from_secs(3600),
    };
    opts.table = TableOptions {
        block_bytes: 512,
        ..TableOptions::default()
    };
    opts.compaction = CompactionOptions {
        levels: 4,
        l0_trigger_files: 3,
        l0_quiet: Duration::from_secs(3600),
        level_base_bytes: 8 << 10,
        size_ratio: 4,
        target_file_bytes: 4 << 10,
        partition: Duration::from_secs(10),
    };
    opts.compaction_threads = 0;
    opts.compaction_bytes_per_sec = 0;
    opts.retention = Some(Duration::from_secs(60));
    opts.l0_stop_files = 0;
    opts.memory_budget_bytes = 1 << 30;
    opts.clock = clock.clock();
    opts
}

pub fn group(i: u64) -> Arc<ScopeGroup> {
    test_util::group(&format!("svc-{i}"))
}

/// Span `id` of `trace`, starting at `start`; its bytes depend only on
/// (trace, id, start), so a retry is an identical copy.
pub fn span_at(trace: u128, id: u64, start: u64) -> Span {
    test_util::span_with(
        &group((trace % 3) as u64),
        trace,
        id,
        (start, start + 1_000),
        format!("{trace:x}/{id}/{start}/{}", "x".repeat((id % 40) as usize)),
    )
}

pub fn tid(trace: u128) -> TraceId {
    TraceId(trace.to_be_bytes())
}

/// (span ID, start) of every span of a trace the engine returns.
pub fn ids(engine: &Engine, trace: u128) -> Vec<(u64, u64)> {
    engine
        .get_trace(&tid(trace))
        .expect("get_trace")
        .iter()
        .map(|s| (u64::from_be_bytes(s.span_id.0), s.start_unix_nano))
        .collect()
}

/// The `.sst` file IDs in the data directory.
pub fn files_on_disk(dir: &Path) -> BTreeSet<u64> {
    std::fs::read_dir(layout::tables_dir(dir))
        .expect("tables dir")
        .filter_map(|e| layout::table_id(&e.expect("entry").file_name().to_string_lossy()))
        .collect()
}

/// The file IDs of the engine's current version.
pub fn files_in_version(engine: &Engine) -> BTreeSet<u64> {
    engine.snapshot().tables().iter().map(|f| f.id).collect()
}
