//! Helpers shared by this crate's unit tests: span and group generators.

use std::sync::Arc;

use bytes::Bytes;

use crate::span::{ScopeGroup, Span, SpanId, TraceId};

/// A group whose resource bytes name `service`.
pub fn group(service: &str) -> Arc<ScopeGroup> {
    Arc::new(ScopeGroup {
        resource: Some(Bytes::from(format!("resource:{service}"))),
        resource_schema_url: Bytes::from_static(b"https://opentelemetry.io/schemas/1.21.0"),
        scope: Some(Bytes::from_static(b"scope")),
        scope_schema_url: Bytes::new(),
    })
}

/// A span of trace `trace` with span ID `span` starting at `start`; its payload is
/// unique per (trace, span) so tests can tell spans apart.
pub fn span(group: &Arc<ScopeGroup>, trace: u128, span: u64, start: u64) -> Span {
    Span {
        trace_id: TraceId(trace.to_be_bytes()),
        span_id: SpanId(span.to_be_bytes()),
        start_unix_nano: start,
        end_unix_nano: start + 1_000,
        group: group.clone(),
        payload: Bytes::from(format!("payload {trace:x}/{span:x}")),
    }
}
