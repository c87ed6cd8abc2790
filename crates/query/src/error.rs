//! Errors of the query service, and the one place they become gRPC statuses.

use tracedb_lsm::TraceId;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("trace_id must be 16 bytes, got {0}")]
    TraceIdLength(usize),
    #[error("start_time_unix_nano {start} is after end_time_unix_nano {end}")]
    TimeRange { start: u64, end: u64 },
    #[error("trace {0} not found")]
    NotFound(TraceId),
    #[error(transparent)]
    Storage(#[from] tracedb_lsm::Error),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match e {
            Error::TraceIdLength(_) | Error::TimeRange { .. } => {
                tonic::Status::invalid_argument(e.to_string())
            }
            Error::NotFound(_) => tonic::Status::not_found(e.to_string()),
            Error::Storage(ref inner) => {
                tracing::error!(error = %inner, "reading trace");
                tonic::Status::internal(e.to_string())
            }
            Error::Internal(_) => tonic::Status::internal(e.to_string()),
        }
    }
}
