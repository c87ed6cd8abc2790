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
//! - [`table`]: immutable sorted files (blocks, index, bloom filter, footer), read
//!   through `mmap` (the only module with `unsafe`).
//! - [`engine`]: ties them together: the write path, the flusher thread, the
//!   snapshot readers take, recovery at start-up.

pub mod batch;
pub mod engine;
pub mod error;
pub mod memtable;
mod mmap;
pub mod sort;
pub mod span;
pub mod table;
pub mod wal;

#[cfg(test)]
mod test_util;

pub use engine::{Engine, EngineOptions, EngineStats, Snapshot};
pub use error::{Error, Result};
pub use memtable::MemTableOptions;
pub use span::{ParseIdError, ScopeGroup, Span, SpanId, TraceId};
pub use table::{SsTable, SsTableBuilder, SsTableIterator, TableMeta, TableOptions};
pub use wal::{ReplayStats, Wal, WalOptions, WalStats, WalTicket};
