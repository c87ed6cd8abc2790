//! tracedb's storage engine.
//!
//! Data moves through these modules in this order:
//! - [`span`]: the stored unit, a span's encoded OTLP bytes plus its IDs and times.
//! - [`batch`]: the encoding of a run of spans, used by WAL records and file blocks.
//! - [`wal`]: the write-ahead log; a request's spans are one record, fsynced by
//!   group commit before the request is acknowledged.
//! - [`memtable`]: sharded in-memory buffers the spans go to next; a full or old
//!   buffer is sealed and handed to the flusher.
//! - [`sort`]: the strict-less sort by trace ID of a sealed buffer.
//! - [`table`]: immutable sorted files (blocks, block index, bloom filter, footer), read
//!   through `mmap`; files are written with paced writeback (`writeback`), so a
//!   large file's bytes do not reach the disk all at once. `mmap` and
//!   `writeback` are the only modules with `unsafe`.
//! - [`manifest`]: the log of edits to the set of live files, fsynced before
//!   each edit is installed; the truth at recovery.
//! - [`version`]: the live files per level ([`Version`]) and the snapshot a
//!   reader holds ([`SuperVersion`]: sealed buffers plus a version).
//! - [`compaction`]: the pure choice of what to merge ([`compaction::pick`]) and
//!   the merge itself, which writes new files and installs nothing.
//! - `writeback` and `trash`: paced writeback of the files flush and compaction
//!   write, and paced deletion of the files nobody needs any more, so neither
//!   stalls the WAL's fsync.
//! - [`fault`] (doc-hidden): the file layer durable writes go through, where
//!   tests inject `ENOSPC` and `EIO`.
//! - [`check`]: offline verification of a data directory, file by file.
//! - [`layout`]: the name of every file and folder of a data directory.
//! - [`index`]: the search index: a summary per trace per file, written
//!   beside each file by flush and compaction (a sidecar), and the searches
//!   over it (services, operations, traces, dependencies, tags).
//! - [`budget`]: the memory budget, the one owner of the count of bytes in
//!   memory: request bodies in flight (the ingest layer's [`Permit`]s) and
//!   spans the engine buffers (reserved at a write's admission, released by
//!   its flush); it alone decides whether a request or a write fits.
//! - [`engine`]: ties them together. `engine.rs` holds the write path with
//!   admission (back-pressure: the level-0 count, and the [`budget`]), the lookups, `Engine::open` (its steps) and
//!   shutdown; the rest is one file per concern under `engine/`:
//!   `flush` (the flush queue and the flusher thread), `scheduler` (which
//!   files running compactions hold, pause and stop: the choice of the next
//!   task), `compact` (the compaction threads, which run those tasks),
//!   `retention` (the retention rule and the dropping of expired files),
//!   `tree` (`TreeState`, the one owner of the live files: the current
//!   super-version, the manifest, the next file ID; its methods are the only
//!   code that changes the tree: a sealed buffer published, an edit of
//!   flush, compaction or retention installed (manifest edit, then version
//!   swap), a damaged file removed), `recovery` (start-up), `quarantine`
//!   (damaged files), `search`
//!   (the search index's view of a snapshot and its cache), `stats`,
//!   `options`, and `hooks` (the crash points and hooks of tests, which exist
//!   only with the `test-support` feature).
//! - [`cold`]: the object store tier: cold files uploaded to S3, their
//!   blocks read back with ranged GETs through a local block cache, the
//!   bucket's copy of the manifest a new node restores from, and the lease
//!   that keeps one node per prefix (the engine's side is `engine/cold`).
//! - [`stores`]: one engine per tenant, each in a folder of its own, and
//!   the store at the top of the data directory as the tenant
//!   `single-tenant`.
//! - `test_util` (with the `test-support` feature): the span and group
//!   generators every test and benchmark of the workspace uses.

pub mod batch;
pub mod budget;
pub mod check;
pub mod cold;
pub mod compaction;
pub mod engine;
pub mod error;
#[doc(hidden)]
pub mod fault;
pub mod index;
pub mod layout;
pub mod manifest;
pub mod memtable;
mod mmap;
mod readahead;
pub mod sort;
pub mod span;
pub mod stores;
pub mod table;
mod trash;
pub mod version;
pub mod wal;
mod writeback;

#[cfg(test)]
mod hostile_tests;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_util;

pub use budget::{MemoryBudget, Permit, Work};
pub use compaction::{CompactionOptions, CompactionTask};
pub use engine::{
    Candidate, Candidates, CellsError, CellsStats, Clock, ColdPass, ColdStats, Engine,
    EngineOptions, EngineStats, ScanBuffers, ScanStats, SearchSnapshot, SkippedFile, Snapshot,
    TagValues, TraceLookup, ValuesLimit, WalkStats,
};
#[cfg(feature = "test-support")]
pub use engine::{CrashPoint, Hooks};
pub use error::{Backpressure, Error, Result};
pub use layout::QUARANTINE_DIR;
pub use memtable::MemTableOptions;
pub use span::{ParseIdError, ScopeGroup, Span, SpanId, TraceId, TraceIdRange};
pub use stores::{
    delete_tenant, delete_tenant_objects, delete_tenant_with, list_tenants, tenant_usage,
    DeletedTenant, Retentions, Stores,
};
pub use table::{KeepSpan, SsTable, SsTableBuilder, SsTableIterator, TableMeta, TableOptions};
pub use version::{LevelStats, SuperVersion, TableFile, TimeRange, Version};
pub use wal::{ReplayStats, Wal, WalOptions, WalStats, WalTicket};
