//! OTLP receivers of tracedb: wire-format scanning, validation, and the gRPC
//! `TraceService`.
//!
//! How a request body moves through the crate:
//! - [`wire`] is a bounds-checked cursor over protobuf bytes: keys, varints,
//!   fixed-width values, length-delimited ranges, skipping of unknown fields.
//!   It never allocates and never recurses.
//! - [`scan`] walks an encoded `ExportTraceServiceRequest` by its schema with
//!   that cursor, validates every message in it, and turns each span into a
//!   [`tracedb_lsm::Span`] whose payload is a zero-copy slice of the body and
//!   whose [`tracedb_lsm::ScopeGroup`] is shared per `ScopeSpans`. Spans with
//!   unusable IDs are rejected one by one ([`ScanOutcome`]); a malformed
//!   request is rejected whole ([`ScanError`]).
//! - [`service`] is `TraceService/Export`: it scans the raw request body and
//!   hands the spans to the storage engine, answering only once they are durable.
//! - [`limit`] makes an over-size request RESOURCE_EXHAUSTED, as OTLP specifies.
//! - [`error`] holds the crate's error types.

#![deny(unsafe_code)]

pub mod error;
pub mod limit;
pub mod scan;
pub mod service;
pub mod wire;

pub use error::{Error, FieldPath, Malformed, MalformedKind, PathSegment, Result, ScanError};
pub use limit::OtlpSizeStatus;
pub use scan::{scan_export_request, ScanOutcome, MAX_ANY_VALUE_DEPTH};
pub use service::OtlpTraceService;
