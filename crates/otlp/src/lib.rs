//! The OTLP wire scanner: an encoded `ExportTraceServiceRequest` (or a
//! node's `TracesData`, which has the same layout) to the spans the storage
//! engine keeps, each span's payload a zero-copy slice of the body.
//! Ingest scans every export with it; the query tier reads the nodes'
//! answers with it, so the tier does not depend on the receivers.
//!
//! - [`scan`]: the scanner, its validation and its outcome.
//! - [`wire`]: the protobuf wire cursor the scanner reads with.
//! - `error`: what is wrong with a malformed request ([`ScanError`]) and
//!   where.

#![deny(unsafe_code)]

mod error;
pub mod scan;
pub mod wire;

pub use error::{FieldPath, Malformed, MalformedKind, PathSegment, ScanError};
pub use scan::{
    scan_export_request, ScanOutcome, TimeRules, FUTURE_SLACK_NANOS, MAX_ANY_VALUE_DEPTH,
};
