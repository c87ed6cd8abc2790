//! OTLP receivers of tracedb: OTLP/gRPC and OTLP/HTTP (protobuf and JSON), with
//! wire-format scanning, validation, admission under a memory budget, and the
//! status codes the OTLP specification prescribes.
//!
//! How a request body moves through the crate:
//! - [`service`] (gRPC `TraceService/Export`, behind the [`limit`] wrappers) and
//!   [`http`] (`POST /v1/traces`: content type, gzip, size limit) each turn a
//!   request into an encoded `ExportTraceServiceRequest`; [`json`] converts
//!   OTLP/JSON to that encoding first.
//! - [`export`] is the path both share: [`Ingest`] checks the server's phase,
//!   asks the memory budget ([`tracedb_lsm::budget`], shared with the storage
//!   engine) for the body's bytes, scans it and hands the spans to
//!   the storage engine, answering only once they are durable, and counts the
//!   outcome in [`metrics`].
//! - [`scan`] (in `tracedb_otlp`, which the query tier shares) walks the
//!   encoded request by its schema with the [`wire`] cursor,
//!   validates every message in it, and turns each span into a
//!   [`tracedb_lsm::Span`] whose payload is a zero-copy slice of the body and
//!   whose [`tracedb_lsm::ScopeGroup`] is shared per `ScopeSpans`. Spans with
//!   unusable IDs are rejected one by one ([`ScanOutcome`]); a malformed
//!   request is rejected whole ([`ScanError`]).
//! - [`status`] is the one place where an [`Error`] becomes a gRPC status (with
//!   `RetryInfo` when retryable) or an HTTP status with a `google.rpc.Status`
//!   body.
//! - [`tenants`]: each tenant's limits (rates, memory share) and counters.
//! - [`exposition`] writes counters in Prometheus' text format for `/metrics`.
//! - [`error`] holds the crate's error types.

#![deny(unsafe_code)]

pub mod error;
pub mod export;
pub mod exposition;
pub mod http;
pub mod json;
pub mod limit;
pub mod metrics;
pub mod service;
pub mod status;
pub mod tenants;

pub use error::{Error, FieldPath, Malformed, MalformedKind, PathSegment, Result, ScanError};
pub use export::{Ingest, IngestOptions, Phase};
pub use json::{json_to_protobuf, JsonError};
pub use limit::{GrpcAdmission, OtlpSizeStatus};
pub use metrics::{IngestMetrics, Protocol};
pub use service::OtlpTraceService;
/// The OTLP wire scanner and reader live in `tracedb_otlp`, which the query
/// tier uses too; re-exported under their old paths.
pub use tracedb_otlp::{scan, wire};
pub use tracedb_otlp::{
    scan_export_request, ScanOutcome, TimeRules, FUTURE_SLACK_NANOS, MAX_ANY_VALUE_DEPTH,
};
