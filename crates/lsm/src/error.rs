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

    /// An encoded span batch is malformed (see [`crate::batch`]).
    #[error("malformed span batch: {0}")]
    Batch(#[from] crate::batch::BatchError),

    /// The write-ahead log failed earlier and accepts no more writes until restart.
    #[error("write-ahead log is unusable after an earlier failure: {0}")]
    WalFailed(String),

    /// The engine is shutting down.
    #[error("storage engine is closed")]
    Closed,
}

impl Error {
    /// An I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
