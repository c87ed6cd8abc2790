//! The engine's counters, and the snapshot of them [`EngineStats`] that the
//! server publishes.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{version::LevelStats, wal::WalStats};

/// Counters for operators and tests.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    /// Spans and bytes in the memtable (not counting sealed buffers).
    pub memtable_spans: usize,
    pub memtable_bytes: usize,
    pub sealed_buffers: usize,
    pub sealed_spans: usize,
    /// Bytes counted against the memory budget (memtable, sealed buffers and
    /// admitted writes not yet buffered), and the budget.
    pub memory_bytes: usize,
    pub memory_budget_bytes: usize,
    /// Bytes of sorted files' search-index summaries and metrics cells
    /// cached in memory.
    pub index_cache_bytes: usize,
    /// Of those, the files' inflated metrics cells sections, and the
    /// dictionary of their keys.
    pub cells_sections_bytes: usize,
    pub cells_dict_bytes: usize,
    /// Live files and their bytes, all levels.
    pub tables: usize,
    pub table_bytes: u64,
    /// Files and bytes per level, level 0 first.
    pub levels: Vec<LevelStats>,
    pub flushes: u64,
    pub flush_errors: u64,
    /// Merge compactions done, trivial moves done, and failures.
    pub compactions: u64,
    pub compaction_moves: u64,
    pub compaction_errors: u64,
    /// Merges of upper levels run between the traces of a deeper merge.
    pub merges_run_first: u64,
    /// Merges that waited for the memory they expect to need before they
    /// started ([`crate::budget::Work`]).
    pub merges_waited_for_memory: u64,
    /// Bytes compaction read and wrote; with the flushed bytes this gives
    /// write amplification.
    pub compaction_bytes_read: u64,
    pub compaction_bytes_written: u64,
    pub flush_bytes_written: u64,
    /// Duplicate spans compaction dropped.
    pub compaction_duplicates: u64,
    /// Traces whose search-index part compaction carried over from an
    /// input's sidecar instead of summarizing their spans again.
    pub compaction_index_parts_reused: u64,
    /// Merges whose outputs' metrics cells were added up from their
    /// inputs' cells instead of counted from their spans.
    pub compaction_cells_summed: u64,
    /// Files retention deleted whole, their bytes, and spans compaction
    /// dropped for being past retention.
    pub retention_files_dropped: u64,
    pub retention_bytes_dropped: u64,
    pub expired_spans_dropped: u64,
    /// Trace lookups, files they read blocks of, and blocks read.
    pub lookups: u64,
    pub lookup_files_read: u64,
    pub blocks_read: u64,
    /// Writes refused with [`Error::Backpressure`](crate::Error::Backpressure).
    pub backpressure_rejections: u64,
    /// Lookups of a sorted file that failed (damage, then quarantine).
    pub lookup_errors: u64,
    /// Files in `DATA_DIR/quarantine/`.
    pub quarantined_files: usize,
    pub wal: WalStats,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) flushes: AtomicU64,
    pub(super) flush_errors: AtomicU64,
    pub(super) flush_bytes_written: AtomicU64,
    pub(super) compactions: AtomicU64,
    pub(super) compaction_moves: AtomicU64,
    pub(super) compaction_errors: AtomicU64,
    pub(super) merges_run_first: AtomicU64,
    pub(super) merges_waited_for_memory: AtomicU64,
    pub(super) compaction_bytes_read: AtomicU64,
    pub(super) compaction_bytes_written: AtomicU64,
    pub(super) compaction_duplicates: AtomicU64,
    pub(super) compaction_index_parts_reused: AtomicU64,
    pub(super) compaction_cells_summed: AtomicU64,
    pub(super) retention_files_dropped: AtomicU64,
    pub(super) retention_bytes_dropped: AtomicU64,
    pub(super) expired_spans_dropped: AtomicU64,
    pub(super) lookups: AtomicU64,
    pub(super) lookup_files_read: AtomicU64,
    pub(super) blocks_read: AtomicU64,
    pub(super) backpressure_rejections: AtomicU64,
    pub(super) lookup_errors: AtomicU64,
}

pub(super) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
