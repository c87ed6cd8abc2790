//! Errors of the query service, and the one place they become gRPC statuses.

use tracedb_lsm::{SkippedFile, TraceId};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("trace_id must be 16 bytes, got {0}")]
    TraceIdLength(usize),
    #[error("start_time_unix_nano {start} is after end_time_unix_nano {end}")]
    TimeRange { start: u64, end: u64 },
    #[error("trace {0} not found")]
    NotFound(TraceId),
    /// No span of the trace could be read, and damaged files that may hold
    /// some were skipped: the trace may exist, its data is not readable.
    #[error(
        "trace {trace}: no span could be read; {} damaged file(s) that may hold it are quarantined: {}",
        skipped.len(),
        crate::service::describe_skipped(skipped)
    )]
    Unreadable {
        trace: TraceId,
        skipped: Vec<SkippedFile>,
    },
    /// No node of a query tier answered, or none that could hold the trace.
    #[error("no answer: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Storage(#[from] tracedb_lsm::Error),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The retry delay advised with UNAVAILABLE when no node answered.
const RETRY_UNAVAILABLE: std::time::Duration = std::time::Duration::from_secs(1);

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match e {
            Error::TraceIdLength(_) | Error::TimeRange { .. } => {
                tonic::Status::invalid_argument(e.to_string())
            }
            Error::NotFound(_) => tonic::Status::not_found(e.to_string()),
            Error::Unreadable { .. } => tonic::Status::data_loss(e.to_string()),
            Error::Unavailable(_) => {
                tracedb_proto::retry::unavailable(e.to_string(), RETRY_UNAVAILABLE)
            }
            Error::Storage(ref inner) => {
                tracing::error!(error = %inner, "reading trace");
                tonic::Status::internal(e.to_string())
            }
            Error::Internal(_) => tonic::Status::internal(e.to_string()),
        }
    }
}
