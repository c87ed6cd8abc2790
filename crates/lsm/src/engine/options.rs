//! Engine configuration and the clock. The hooks tests use to simulate
//! crashes and stalls are in `hooks`.

use std::{
    fmt,
    path::PathBuf,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::{
    budget::MemoryBudget, compaction::CompactionOptions, memtable::MemTableOptions,
    table::TableOptions,
};

/// Engine configuration. Every field has a default ([`EngineOptions::new`]).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub data_dir: PathBuf,
    pub memtable: MemTableOptions,
    pub wal_segment_bytes: u64,
    /// Scheduler time slice for the WAL's sync thread, which every
    /// acknowledged write waits on ([`tracedb_sched`]). Default zero: the
    /// slice of the thread that opens the engine.
    pub request_thread_slice: Duration,
    /// Layout of compaction outputs, which hold the data for its lifetime:
    /// zstd 3 by default, since bytes on disk per span is a target.
    pub table: TableOptions,
    /// zstd level of level-0 files (flush outputs). They live for seconds
    /// to minutes and are read once, by the level-0 merge, so the flusher,
    /// on the ingest path's heels, compresses fast. Default 1.
    pub flush_zstd_level: i32,
    /// Shape of the tree and when to compact (levels, size ratio 8 by
    /// default, ...).
    pub compaction: CompactionOptions,
    /// Background compaction threads; 0 runs none (then only
    /// [`crate::Engine::compact`] compacts). Default 1.
    pub compaction_threads: usize,
    /// Cap on the bytes compaction writes per second, all threads together;
    /// 0 = unlimited. Default 64 MiB/s.
    pub compaction_bytes_per_sec: u64,
    /// Spans whose end time is older than this are removed; `None` keeps
    /// everything. Default 7 days.
    pub retention: Option<Duration>,
    /// How often the background threads apply retention. Default 60 s.
    pub retention_interval: Duration,
    /// Most bytes of spans held in memtables and sealed buffers together;
    /// past it a write gets [`crate::Error::Backpressure`]. Default 512 MiB.
    /// The limit of the budget the engine makes for itself when
    /// `memory_budget` is `None`.
    pub memory_budget_bytes: usize,
    /// The memory budget to count buffered spans against, when it is shared
    /// (a server's ingest layer admits requests against the same one; see
    /// [`crate::budget`]); its limit is then the engine's. Default `None`.
    pub memory_budget: Option<Arc<MemoryBudget>>,
    /// Most bytes of search-index summaries of sorted files kept in memory
    /// (least recently used out; the rest is read from the sidecars when a
    /// query needs it). Default 64 MiB.
    pub index_cache_bytes: usize,
    /// Trace parts per block of a sidecar (`docs/FORMAT.md`): a search reads
    /// the blocks its digest cannot rule out. Default
    /// [`crate::index::blocks::BLOCK_PARTS`].
    pub index_block_parts: usize,
    /// Threads a listing of a key's values reads sidecar blocks with
    /// ([`Engine::tag_values`](crate::Engine::tag_values)); its answer is the
    /// same with any number. Default: the machine's cores.
    pub search_threads: usize,
    /// Level-0 file count at which writes get [`crate::Error::Backpressure`]
    /// until compaction catches up. Default 64 (twice the level-0 trigger).
    pub l0_stop_files: usize,
    /// Where "now" comes from, for retention. Default: the system clock.
    pub clock: Clock,
    /// The object store files move to once cold ([`crate::cold`]); `None`
    /// (the default) keeps every file on local disk.
    pub cold: Option<crate::cold::ColdOptions>,
    /// Test hooks; [`Hooks::default`](crate::Hooks::default) does nothing.
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub hooks: super::Hooks,
}

impl EngineOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineOptions {
            data_dir: data_dir.into(),
            memtable: MemTableOptions::default(),
            wal_segment_bytes: 64 << 20,
            request_thread_slice: Duration::ZERO,
            table: TableOptions::default(),
            flush_zstd_level: 1,
            compaction: CompactionOptions::default(),
            compaction_threads: 1,
            compaction_bytes_per_sec: 64 << 20,
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            retention_interval: Duration::from_secs(60),
            memory_budget_bytes: 512 << 20,
            memory_budget: None,
            index_cache_bytes: 64 << 20,
            index_block_parts: crate::index::blocks::BLOCK_PARTS,
            search_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            l0_stop_files: 64,
            clock: Clock::system(),
            cold: None,
            #[cfg(feature = "test-support")]
            hooks: super::Hooks::default(),
        }
    }
}

/// The current time in Unix nanoseconds.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    pub fn system() -> Self {
        Clock(Arc::new(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        }))
    }

    /// A clock that asks `now` (tests use a settable one).
    pub fn from_fn(now: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        Clock(Arc::new(now))
    }

    pub fn now_unix_nano(&self) -> u64 {
        (self.0)()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Clock({})", self.now_unix_nano())
    }
}
