//! The storage engine's one error type.

use std::{io, path::PathBuf};

/// Everything the storage engine can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Stored bytes do not match their checksum.
    #[error("checksum mismatch in {file} at offset {offset}: expected {expected:#010x}, found {actual:#010x}")]
    ChecksumMismatch {
        file: PathBuf,
        offset: u64,
        expected: u32,
        actual: u32,
    },

    /// Stored bytes are structurally invalid (bad magic, impossible length, truncation).
    #[error("corrupt data in {file} at offset {offset}: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },

    /// A file written by a newer (or unknown) format version.
    #[error("{file} has format version {version}, this build reads version {supported}")]
    UnsupportedVersion {
        file: PathBuf,
        version: u32,
        supported: u32,
    },

    /// The manifest is damaged in a way a crash cannot leave (not a torn
    /// last record), so which files are live is unknown and the open stops.
    #[error(
        "the manifest {} is damaged at offset {offset} and is not a torn append, so the set of live \
         files is unknown; refusing to start rather than guess. Run `tracedb check <data dir>` to list \
         the damage, then restore MANIFEST from a backup, or move it aside: every .sst file in tables/ \
         is then adopted into level 0 at the next start (no span is lost; spans that compaction or \
         retention had already removed may be returned again until the next compaction)",
        file.display()
    )]
    ManifestUnreadable {
        file: PathBuf,
        offset: u64,
        #[source]
        source: Box<Error>,
    },

    /// A data block of a sorted span file passed its checksum but its span batch
    /// does not decode: the writer was wrong, or the damage matched the checksum.
    #[error("undecodable span batch in the block of {file} at offset {offset}: {source}")]
    CorruptBlock {
        file: PathBuf,
        offset: u64,
        #[source]
        source: crate::batch::BatchError,
    },

    /// Spans were given to a sorted span file builder out of trace-ID order.
    #[error(
        "span of trace {next} added after trace {previous}: spans must arrive in trace-ID order"
    )]
    OutOfOrder {
        previous: crate::span::TraceId,
        next: crate::span::TraceId,
    },

    /// One span (with its resource and scope) is too large for any data block.
    #[error("span of trace {trace_id} needs {size} bytes, more than the {max}-byte block limit")]
    SpanTooLarge {
        trace_id: crate::span::TraceId,
        size: u64,
        max: u64,
    },

    /// A sorted span file with no spans was asked for; such files are never written.
    #[error("refusing to write {path}: a sorted span file needs at least one span")]
    EmptyTable { path: PathBuf },

    /// An encoded span batch is malformed (see [`crate::batch`]).
    #[error("malformed span batch: {0}")]
    Batch(#[from] crate::batch::BatchError),

    /// The write-ahead log could not make the record durable (a write or
    /// fsync failed, e.g. the disk is full). Nothing was acknowledged; the log
    /// goes on in a new segment, so a retry can succeed.
    #[error("write-ahead log write failed, the write was not made durable: {0}")]
    WalFailed(String),

    /// An earlier manifest append failed; the manifest must be rewritten
    /// before it takes another edit (the engine does that by itself).
    #[error("manifest {} is damaged by an earlier failed append and awaits a rewrite", .0.display())]
    ManifestDamaged(PathBuf),

    /// A write-ahead log record longer than the format allows.
    #[error("record of {len} bytes exceeds the write-ahead log limit of {max} bytes")]
    RecordTooLarge { len: usize, max: usize },

    /// Another process has the data directory open.
    #[error("data directory {} is in use by another tracedb process", .0.display())]
    Locked(PathBuf),

    /// The engine is shutting down.
    #[error("storage engine is closed")]
    Closed,

    /// A data directory with tenants' stores opened without tenancy.
    #[error("{} holds the stores of {tenants} tenant(s), which are read only with tenancy on; start with --tenancy header", dir.display())]
    TenantsWithoutTenancy { dir: PathBuf, tenants: usize },

    /// A tenant without a store (and, with tenancy off, any but the single
    /// one).
    #[error("there is no store for the tenant {0}")]
    NoSuchTenant(String),

    /// The write was refused, not queued: buffered spans are over the memory
    /// budget, or flushing or compaction is behind. Nothing was logged; the
    /// client should retry after about `retry_after`. The ingest layer maps
    /// this to a retryable status.
    #[error("storage is busy ({reason}); retry in {} ms", retry_after.as_millis())]
    Backpressure {
        reason: Backpressure,
        retry_after: std::time::Duration,
    },

    /// The object store failed or could not be reached: `op` of `object`
    /// (a key under the store's bucket and prefix). Not damage: the object
    /// may read at the next try.
    #[error("object store: {op} {object} failed: {reason}")]
    Remote {
        op: &'static str,
        object: String,
        reason: String,
    },

    /// The object store's prefix is held by another node's lease
    /// (`crate::cold`): two nodes never write under one prefix.
    #[error("{object} is leased to {holder} until {until_unix_ms} ms (Unix); another node uses this prefix. Give each node its own prefix, or, if that node is gone for good, wait for its lease to expire")]
    LeaseHeld {
        object: String,
        holder: String,
        until_unix_ms: u64,
    },

    /// A crash point set by a test was reached; the engine does nothing more
    /// and must be abandoned ([`crate::Engine::abandon`]).
    #[cfg(feature = "test-support")]
    #[error("simulated crash at {0:?}")]
    SimulatedCrash(crate::engine::CrashPoint),
}

/// Why a write was refused with [`Error::Backpressure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backpressure {
    /// Spans in memtables and sealed buffers would pass the memory budget.
    MemoryBudget { used: usize, budget: usize },
    /// Level 0 holds so many files that compaction is behind.
    TooManyL0Files { files: usize, limit: usize },
}

impl std::fmt::Display for Backpressure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backpressure::MemoryBudget { used, budget } => write!(
                f,
                "{used} bytes of spans buffered in memory, budget {budget}: flushing is behind"
            ),
            Backpressure::TooManyL0Files { files, limit } => write!(
                f,
                "{files} level-0 files, limit {limit}: compaction is behind"
            ),
        }
    }
}

impl Error {
    /// Whether this is damage to stored bytes (a checksum mismatch, a
    /// structural error, an undecodable block), as opposed to an I/O error, a
    /// refusal or a format version this build does not read.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::ChecksumMismatch { .. } | Error::Corrupt { .. } | Error::CorruptBlock { .. }
        )
    }

    /// The file an error is about and, for damage, the byte offset in it.
    pub fn location(&self) -> Option<(&std::path::Path, Option<u64>)> {
        match self {
            Error::ChecksumMismatch { file, offset, .. }
            | Error::Corrupt { file, offset, .. }
            | Error::CorruptBlock { file, offset, .. } => Some((file, Some(*offset))),
            Error::UnsupportedVersion { file, .. } => Some((file, None)),
            Error::Io { path, .. } => Some((path, None)),
            Error::ManifestDamaged(path) => Some((path, None)),
            Error::ManifestUnreadable { file, offset, .. } => Some((file, Some(*offset))),
            _ => None,
        }
    }

    /// An I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
