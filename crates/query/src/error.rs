//! Errors of the query side, and the one place they become gRPC statuses
//! (`QueryService`, Jaeger) and HTTP statuses (the Tempo API):
//!
//! | error | gRPC | HTTP |
//! |---|---|---|
//! | bad trace ID, time range or other argument | INVALID_ARGUMENT | 400 |
//! | trace not found | NOT_FOUND | 404 |
//! | no span readable (damaged files) | DATA_LOSS | 500 |
//! | no node answered | UNAVAILABLE + RetryInfo | 503 |
//! | the engine is not open yet | UNAVAILABLE | 503 |
//! | storage or internal failure | INTERNAL | 500 |
//! | the caller went away ([`crate::cancel`]) | CANCELLED | 499 |

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use tracedb_lsm::{SkippedFile, TraceId};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("trace_id must be 16 bytes, got {0}")]
    TraceIdLength(usize),
    #[error("start_time_unix_nano {start} is after end_time_unix_nano {end}")]
    TimeRange { start: u64, end: u64 },
    /// Any other argument the request got wrong, said for the client.
    #[error("{0}")]
    InvalidArgument(String),
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
    /// The storage engine is not open yet ([`tracedb_proto::start`]).
    #[error(transparent)]
    Starting(#[from] tracedb_proto::start::Starting),
    #[error(transparent)]
    Storage(#[from] tracedb_lsm::Error),
    #[error("internal error: {0}")]
    Internal(String),
    /// The query stopped because its caller went away; nobody reads this.
    #[error("the query was cancelled: its caller went away")]
    Cancelled,
}

/// The status nginx and others give a request whose client closed the
/// connection before the answer; HTTP itself has none.
const CLIENT_CLOSED_REQUEST: u16 = 499;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The retry delay advised with UNAVAILABLE when no node answered.
const RETRY_UNAVAILABLE: std::time::Duration = std::time::Duration::from_secs(1);

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match e {
            Error::TraceIdLength(_) | Error::TimeRange { .. } | Error::InvalidArgument(_) => {
                tonic::Status::invalid_argument(e.to_string())
            }
            Error::NotFound(_) => tonic::Status::not_found(e.to_string()),
            Error::Unreadable { .. } => tonic::Status::data_loss(e.to_string()),
            Error::Unavailable(_) => {
                tracedb_proto::retry::unavailable(e.to_string(), RETRY_UNAVAILABLE)
            }
            Error::Starting(starting) => starting.into(),
            Error::Storage(ref inner) => {
                tracing::error!(error = %inner, "reading trace");
                tonic::Status::internal(e.to_string())
            }
            Error::Internal(_) => tonic::Status::internal(e.to_string()),
            Error::Cancelled => tonic::Status::cancelled(e.to_string()),
        }
    }
}

impl Error {
    /// The HTTP status of this error, for the Tempo API. A failure to read
    /// that is not the client's doing (storage, damage, internal) is 500.
    pub fn http_status(&self) -> StatusCode {
        match self {
            Error::TraceIdLength(_) | Error::TimeRange { .. } | Error::InvalidArgument(_) => {
                StatusCode::BAD_REQUEST
            }
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Unavailable(_) | Error::Starting(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Unreadable { .. } | Error::Storage(_) | Error::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Error::Cancelled => {
                StatusCode::from_u16(CLIENT_CLOSED_REQUEST).expect("a status code in range")
            }
        }
    }
}

/// The HTTP answer: [`Error::http_status`] and the reason as plain text.
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match &self {
            Error::Unavailable(_) => tracing::warn!(error = %self, "no node answered"),
            Error::TraceIdLength(_)
            | Error::TimeRange { .. }
            | Error::InvalidArgument(_)
            | Error::NotFound(_)
            | Error::Starting(_)
            | Error::Cancelled => {}
            _ => tracing::error!(error = %self, "reading storage"),
        }
        (self.http_status(), self.to_string()).into_response()
    }
}
