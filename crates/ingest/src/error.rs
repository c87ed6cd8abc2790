//! Errors of the ingest crate. A malformed request is reported as the
//! scanner's [`ScanError`] (`tracedb_otlp`), re-exported here.

pub use tracedb_otlp::{FieldPath, Malformed, MalformedKind, PathSegment, ScanError};

/// Why an export was refused. Nothing of a refused request is stored; how each
/// variant becomes a gRPC status or an HTTP response is decided in one place,
/// [`crate::status`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request body is not a well-formed `ExportTraceServiceRequest`.
    #[error("malformed ExportTraceServiceRequest: {0}")]
    Scan(#[from] ScanError),

    /// An OTLP/JSON body that is not JSON, or not an `ExportTraceServiceRequest`.
    #[error("malformed OTLP/JSON request: {0}")]
    Json(#[from] crate::json::JsonError),

    /// A gzip body that does not decompress.
    #[error("request body is not valid gzip: {0}")]
    Gzip(#[source] std::io::Error),

    /// The body (compressed or not) is over the size limit.
    #[error("request body is larger than the limit of {limit} bytes (--max-message-bytes)")]
    TooLarge { limit: usize },

    /// The body could not be read off the connection.
    #[error("reading the request body: {0}")]
    Body(String),

    /// A `Content-Type` this server does not speak.
    #[error("unsupported content type {0:?}: send application/x-protobuf or application/json")]
    UnsupportedContentType(String),

    /// A `Content-Encoding` this server does not speak.
    #[error("unsupported content encoding {0:?}: send gzip or no encoding")]
    UnsupportedEncoding(String),

    /// The memory budget ([`tracedb_lsm::budget`]) cannot hold the request
    /// now; retrying later will work.
    #[error(
        "server overloaded: {needed} more bytes do not fit in the memory budget of {limit} bytes \
         ({in_use} in use); retry later"
    )]
    Overloaded {
        needed: usize,
        in_use: usize,
        limit: usize,
    },

    /// The storage engine did not take the spans (disk full, I/O error, closing).
    #[error("spans not stored: {0}")]
    Storage(#[from] tracedb_lsm::Error),

    /// The tenant sends faster than its limit (the overrides file); retrying
    /// after `retry_after` will work.
    #[error("tenant {tenant} is over its limit of {limit} {unit} a second; retry in {} ms", retry_after.as_millis())]
    TenantRate {
        tenant: String,
        unit: &'static str,
        limit: u64,
        retry_after: std::time::Duration,
    },

    /// The tenant's unflushed spans fill its share of the memory budget (the
    /// overrides file); retrying later will work.
    #[error(
        "tenant {tenant}'s spans waiting to be flushed fill its share of the memory budget \
         ({held} of {share} bytes); retry later"
    )]
    TenantMemory {
        tenant: String,
        held: usize,
        share: usize,
    },

    /// The request's tenant is not one a write can go to.
    #[error("{0}")]
    Tenant(tracedb_proto::tenant::InvalidTenant),

    /// The server is starting up and does not take exports yet.
    #[error("server is starting up; retry later")]
    Starting,

    /// The server is shutting down and takes no new exports.
    #[error("server is shutting down; retry later")]
    ShuttingDown,
}

impl From<tracedb_proto::start::Starting> for Error {
    fn from(_: tracedb_proto::start::Starting) -> Self {
        Error::Starting
    }
}

impl From<tracedb_lsm::budget::Overloaded> for Error {
    fn from(o: tracedb_lsm::budget::Overloaded) -> Self {
        Error::Overloaded {
            needed: o.needed,
            in_use: o.in_use,
            limit: o.limit,
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
