//! The span and group generators of every test and benchmark of the
//! workspace: this crate's unit and integration tests, the server's tests
//! and the benchmarks. With the `test-support` feature (and in this crate's
//! unit tests).

use std::sync::Arc;

use bytes::Bytes;

use crate::span::{ScopeGroup, Span, SpanId, TraceId};

/// A group whose resource bytes are `resource {service}` and whose scope
/// bytes are `scope`.
pub fn group(service: &str) -> Arc<ScopeGroup> {
    group_of(
        format!("resource {service}"),
        Some(Bytes::from_static(b"scope")),
    )
}

/// A group of `resource` and `scope` bytes (encoded OTLP messages where a
/// test reads them back), without schema URLs.
pub fn group_of(resource: impl Into<Bytes>, scope: Option<Bytes>) -> Arc<ScopeGroup> {
    Arc::new(ScopeGroup {
        resource: Some(resource.into()),
        resource_schema_url: Bytes::new(),
        scope,
        scope_schema_url: Bytes::new(),
    })
}

/// A span of trace `trace` with span ID `span` starting at `start`, lasting
/// 1 µs; its payload is unique per (trace, span) so tests can tell spans
/// apart.
pub fn span(group: &Arc<ScopeGroup>, trace: u128, span: u64, start: u64) -> Span {
    span_with(
        group,
        trace,
        span,
        (start, start + 1_000),
        format!("payload {trace:x}/{span:x}"),
    )
}

/// Span `span` of trace `trace` (both IDs big-endian), from `start` to `end`
/// (Unix nanoseconds), with `payload`.
pub fn span_with(
    group: &Arc<ScopeGroup>,
    trace: u128,
    span: u64,
    (start, end): (u64, u64),
    payload: impl Into<Bytes>,
) -> Span {
    Span {
        trace_id: TraceId(trace.to_be_bytes()),
        span_id: SpanId(span.to_be_bytes()),
        start_unix_nano: start,
        end_unix_nano: end,
        group: group.clone(),
        payload: payload.into(),
    }
}

/// A live file at `level` in `partition` (ID `id`, in `dir`) holding one span
/// of each trace in `traces`, which must be sorted. Never deleted from disk.
pub fn table_file(
    dir: &std::path::Path,
    id: u64,
    level: u32,
    partition: u64,
    traces: &[u128],
) -> Arc<crate::version::TableFile> {
    use crate::{
        manifest::FileEntry,
        table::{SsTable, SsTableBuilder, TableOptions},
        version::{Janitor, TableFile},
    };
    let g = group("svc");
    let path = crate::layout::table_path(dir, id);
    let mut builder = SsTableBuilder::create(&path, TableOptions::default()).expect("create");
    for (i, &t) in traces.iter().enumerate() {
        builder
            .add(&span(&g, t, i as u64 + 1, 1_000))
            .expect("sorted");
    }
    let meta = builder.finish().expect("finish");
    let table = SsTable::open(&path).expect("open");
    let janitor = Arc::new(Janitor {
        enabled: std::sync::atomic::AtomicBool::new(false),
        trash: None,
        cold: None,
    });
    let entry = FileEntry {
        id,
        level,
        partition,
        file_size: meta.file_size,
        remote: false,
    };
    Arc::new(TableFile::new(entry, table, janitor))
}
