//! Span generators and file helpers shared by the lsm benchmarks (included
//! with `#[path]`; a subfolder, so cargo does not take it for a bench). Each
//! bench uses some of them.
#![allow(dead_code)]

use std::{path::Path, sync::Arc};

use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::{
    manifest::FileEntry,
    test_util::span_with,
    version::{Janitor, TableFile},
    ScopeGroup, Span, SsTable, SsTableBuilder, TableOptions, TraceId,
};

/// A span whose payload is encoded as OTLP encoders write a span: its trace
/// and span IDs, a name, its kind, its two times, then 200 bytes of
/// attributes: 40 that differ from span to span (values) and 160 of text that
/// repeats across spans (keys, names), so blocks compress about as real ones do.
pub fn span(group: &Arc<ScopeGroup>, trace: u128, i: u64) -> Span {
    let trace_id = trace.to_be_bytes();
    let span_id = (i + 1).to_be_bytes();
    let start = 1_700_000_000_000_000_000 + i * 1_000_003;
    let end = start + 250_000 + (i % 7) * 10_000;
    let mut payload = Vec::with_capacity(260);
    payload.extend_from_slice(&[0x0a, 16]);
    payload.extend_from_slice(&trace_id);
    payload.extend_from_slice(&[0x12, 8]);
    payload.extend_from_slice(&span_id);
    payload.extend_from_slice(&[0x2a, 8]);
    payload.extend_from_slice(b"checkout");
    payload.extend_from_slice(&[0x30, 2, 0x39]);
    payload.extend_from_slice(&start.to_le_bytes());
    payload.push(0x41);
    payload.extend_from_slice(&end.to_le_bytes());
    // Field 9 (attributes), 200 bytes: varying values, then repeating text.
    payload.extend_from_slice(&[0x4a, 200, 1]);
    let mut x = (trace as u64) ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for _ in 0..5 {
        x = x.wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(29) ^ i;
        payload.extend_from_slice(&x.to_le_bytes());
    }
    let text = b"GET /api/v1/orders http.method=GET http.status_code=200 net.peer.name=orders-db \
                 service.name=checkout span.kind=server otel.library.name=io.opentelemetry.http ";
    payload.extend(text.iter().cycle().take(160));
    span_with(group, trace, i + 1, (start, end), payload)
}

/// `n` spans sorted by trace ID, 5-50 spans per trace, random IDs.
pub fn sorted_spans(n: usize, seed: u64) -> Vec<Span> {
    let group = Arc::new(ScopeGroup::default());
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let trace: u128 = rng.random();
        let k = rng.random_range(5..=50);
        for _ in 0..k {
            out.push(span(&group, trace, out.len() as u64));
        }
    }
    out.truncate(n);
    tracedb_lsm::sort::sort_by_trace_id(&mut out);
    out
}

/// `n` random trace IDs.
pub fn random_ids(n: usize, seed: u64) -> Vec<TraceId> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| TraceId(rng.random::<u128>().to_be_bytes()))
        .collect()
}

/// Writes `spans` (sorted) to `path` at zstd `level` and opens the file.
pub fn build_table(spans: &[Span], path: &Path, level: i32) -> SsTable {
    let mut b = SsTableBuilder::create(
        path,
        TableOptions {
            zstd_level: level,
            ..TableOptions::default()
        },
    )
    .expect("create");
    for s in spans {
        b.add(s).expect("sorted");
    }
    b.finish().expect("finish");
    SsTable::open(path).expect("open")
}

/// A live file of the tree around `table`, at `level` in `partition`.
pub fn table_file(id: u64, level: u32, partition: u64, table: SsTable) -> Arc<TableFile> {
    let janitor = Arc::new(Janitor {
        enabled: std::sync::atomic::AtomicBool::new(false),
        trash: None,
        cold: None,
    });
    let entry = FileEntry {
        id,
        level,
        partition,
        file_size: table.meta().file_size,
        remote: false,
    };
    Arc::new(TableFile::new(entry, table, janitor))
}

/// An encoded `KeyValue` of `key` and a string or int value.
fn key_value(key: &str, value: Result<&str, i64>) -> Vec<u8> {
    let mut v = Vec::new();
    match value {
        Ok(s) => {
            v.extend_from_slice(&[0x0a, s.len() as u8]);
            v.extend_from_slice(s.as_bytes());
        }
        Err(i) => {
            v.push(0x18);
            let mut n = i as u64;
            while n >= 0x80 {
                v.push(n as u8 | 0x80);
                n >>= 7;
            }
            v.push(n as u8);
        }
    }
    let mut kv = vec![0x0a, key.len() as u8];
    kv.extend_from_slice(key.as_bytes());
    kv.extend_from_slice(&[0x12, v.len() as u8]);
    kv.extend_from_slice(&v);
    kv
}

/// A span as an instrumented HTTP service sends it: the fields of [`span`]
/// and the attributes metrics cells count by default (method, route,
/// status code) among others they do not (a user, a tenant, a peer port),
/// whose values vary from span to span.
pub fn attributed_span(group: &Arc<ScopeGroup>, trace: u128, i: u64) -> Span {
    let mut s = span(group, trace, i);
    let mut payload = s.payload[..s.payload.len() - 203].to_vec();
    let routes = [
        "/api/cart",
        "/api/checkout",
        "/api/search",
        "/api/user",
        "/healthz",
    ];
    let attributes = [
        key_value("user.id", Ok(&format!("user-{}", (i * 7919) % 100_000))),
        key_value(
            "tenant",
            Ok(["acme", "globex", "initech"][(i % 3) as usize]),
        ),
        key_value(
            "http.method",
            Ok(if i.is_multiple_of(5) { "POST" } else { "GET" }),
        ),
        key_value("http.route", Ok(routes[(i % 5) as usize])),
        key_value(
            "http.status_code",
            Err(if i.is_multiple_of(50) { 500 } else { 200 }),
        ),
        key_value("net.peer.port", Err(5432)),
    ];
    for kv in attributes {
        payload.extend_from_slice(&[0x4a, kv.len() as u8]);
        payload.extend_from_slice(&kv);
    }
    s.payload = payload.into();
    s
}

/// [`sorted_spans`] of [`attributed_span`]s.
pub fn sorted_attributed_spans(n: usize, seed: u64) -> Vec<Span> {
    let mut out = sorted_spans(n, seed);
    let group = Arc::new(ScopeGroup::default());
    for (i, s) in out.iter_mut().enumerate() {
        *s = attributed_span(&group, u128::from_be_bytes(s.trace_id.0), i as u64);
    }
    out
}
