//! tracedb's storage engine.
//!
//! - [`span`]: the stored unit, a span's encoded OTLP bytes plus its IDs and times.
//! - [`batch`]: the encoding of a run of spans, used by WAL records and file blocks.
//! - [`sort`]: the strict-less sort by trace ID that every flush goes through.

pub mod batch;
pub mod error;
pub mod sort;
pub mod span;

#[cfg(test)]
mod test_util;

pub use error::{Error, Result};
pub use span::{ParseIdError, ScopeGroup, Span, SpanId, TraceId};
