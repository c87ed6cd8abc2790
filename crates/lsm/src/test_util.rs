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
    });
    let entry = FileEntry {
        id,
        level,
        partition,
        file_size: meta.file_size,
    };
    Arc::new(TableFile::new(entry, table, janitor))
}
