//! The search index on a million spans: building the summary of a buffer
//! (spans in any order, and sorted as a flush sees them), and through a real
//! engine (files on disk with their sidecars): reading and decoding the
//! sidecars (what a search pays for every file whose summaries are not
//! cached), trace search as a user runs it (the newest-first walk to 20
//! candidates, each read whole) by service over one hour and by service +
//! operation + attribute, services, and GetTrace by ID; and the pruning step of a
//! TraceQL search: writing a sidecar's blocks and digest, checking every
//! block's digest against a need, decoding one block, and the newest-first
//! walk to 20 candidates (or to none).
//!
//! `cargo bench -p tracedb-benches --bench search`
//!
//! Spans: 1,000,000 spans in 100,000 traces of 10 spans across 3 of 20
//! services, start times spread over one hour, each with 3 attributes.

use std::{hint::black_box, sync::Arc, time::Duration};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::{
    index::{
        blocks::{NeedTerms, BLOCK_PARTS},
        encode_sidecar, open_index, read_sidecar, OpNeed, SearchQuery, SummarySet, TagNeed,
        ValueKind,
    },
    Engine, EngineOptions, ScopeGroup, Span, SpanId, TimeRange, TraceId,
};
use tracedb_proto::{
    common::v1::{any_value::Value, AnyValue, KeyValue},
    resource::v1::Resource,
    trace::v1::Span as OtlpSpan,
};

const TRACES: u64 = 100_000;
const SPANS_PER_TRACE: u64 = 10;
const SERVICES: u64 = 20;
const HOUR: u64 = 3_600_000_000_000;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        }),
    }
}

fn groups() -> Vec<Arc<ScopeGroup>> {
    (0..SERVICES)
        .map(|i| {
            let r = Resource {
                attributes: vec![kv("service.name", &format!("svc-{i}")), kv("host", "h1")],
                ..Default::default()
            };
            Arc::new(ScopeGroup {
                resource: Some(r.encode_to_vec().into()),
                ..ScopeGroup::default()
            })
        })
        .collect()
}

/// The spans, and a trace ID to look up.
fn spans(t0: u64) -> (Vec<Span>, TraceId) {
    let groups = groups();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut out = Vec::with_capacity((TRACES * SPANS_PER_TRACE) as usize);
    let mut probe = TraceId([0; 16]);
    for t in 0..TRACES {
        let trace: u128 = rng.random();
        let trace_id = TraceId(trace.to_be_bytes());
        if t == TRACES / 2 {
            probe = trace_id;
        }
        let start = t0 + t * (HOUR / TRACES);
        let first = rng.random_range(0..SERVICES);
        for i in 0..SPANS_PER_TRACE {
            let service = (first + i % 3) % SERVICES;
            let s_start = start + i * 1_000_000;
            let len = rng.random_range(1_000_000..200_000_000);
            let otlp = OtlpSpan {
                trace_id: trace.to_be_bytes().to_vec().into(),
                span_id: (i + 1).to_be_bytes().to_vec().into(),
                parent_span_id: if i == 0 {
                    Bytes::new()
                } else {
                    1u64.to_be_bytes().to_vec().into()
                },
                name: format!("op-{}", (service * 7 + i) % 50),
                kind: 2,
                start_time_unix_nano: s_start,
                end_time_unix_nano: s_start + len,
                attributes: vec![
                    kv("http.route", &format!("/r/{}", i % 10)),
                    kv("http.method", "GET"),
                    kv("tenant", &format!("t{}", t % 100)),
                ],
                ..Default::default()
            };
            out.push(Span {
                trace_id,
                span_id: SpanId((i + 1).to_be_bytes()),
                start_unix_nano: s_start,
                end_unix_nano: s_start + len,
                group: groups[service as usize].clone(),
                payload: otlp.encode_to_vec().into(),
            });
        }
    }
    (out, probe)
}

fn bench(c: &mut Criterion) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let t0 = now - 2 * HOUR;
    let (spans, probe) = spans(t0);

    let mut group = c.benchmark_group("index_build");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(100_000));
    group.bench_function("summarize_100k_spans", |b| {
        b.iter(|| black_box(SummarySet::from_spans(&spans[..100_000])))
    });
    // What a flush summarizes: spans sorted by trace ID, each trace's spans
    // under the group of the request that brought them (one Arc per request,
    // as the ingest scanner makes them; the contents repeat across requests).
    let mut sorted: Vec<Span> = spans[..100_000]
        .chunk_by(|a, b| a.trace_id == b.trace_id)
        .flat_map(|trace| {
            let group = Arc::new((*trace[0].group).clone());
            trace.iter().map(move |s| Span {
                group: group.clone(),
                ..s.clone()
            })
        })
        .collect();
    sorted.sort_by_key(|s| s.trace_id);
    group.bench_function("summarize_sorted_100k_spans", |b| {
        b.iter(|| black_box(SummarySet::from_sorted_spans(&sorted)))
    });
    group.finish();

    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    opts.compaction_bytes_per_sec = 0;
    opts.l0_stop_files = 0;
    opts.memory_budget_bytes = 4 << 30;
    let engine = Engine::open(opts).expect("open");
    for chunk in spans.chunks(1_000) {
        engine.write_blocking(chunk.to_vec()).expect("write");
    }
    engine.flush().expect("flush");
    engine.compact().expect("compact");
    drop(spans);
    let stats = engine.stats();
    eprintln!(
        "engine: {} files, {} bytes; {} spans",
        stats.tables,
        stats.table_bytes,
        TRACES * SPANS_PER_TRACE
    );
    let tables: Vec<std::path::PathBuf> =
        std::fs::read_dir(tracedb_lsm::layout::tables_dir(dir.path()))
            .expect("tables")
            .map(|e| e.expect("entry"))
            .filter(|e| tracedb_lsm::layout::table_id(&e.file_name().to_string_lossy()).is_some())
            .map(|e| e.path())
            .collect();
    assert!(!tables.is_empty(), "no sorted file");
    let mut group = c.benchmark_group("index_load");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(TRACES * SPANS_PER_TRACE));
    group.bench_function("decode_sidecars_1m_spans", |b| {
        b.iter(|| {
            for table in &tables {
                black_box(read_sidecar(table).expect("sidecar"));
            }
        })
    });
    group.finish();

    // The first query loads the sidecars; the benchmarks measure warm queries.
    engine.warm_index().expect("warm");

    // A search as a user runs it (`tracedb_query::search::run`): the
    // newest-first walk over the blocks' digests, each candidate read whole
    // from its files, until 20 are read. The TraceQL evaluation of each
    // trace, in the query crate, is not timed here.
    let need = |service: &str| OpNeed {
        service: Some(service.into()),
        ..OpNeed::default()
    };
    let hour = SearchQuery {
        start_min: t0,
        start_max: t0 + HOUR,
        needs: vec![need("svc-3")],
        ..SearchQuery::default()
    };
    let narrow = SearchQuery {
        needs: vec![OpNeed {
            name: Some("op-21".into()),
            tags: vec![TagNeed {
                scope: None,
                key: "tenant".into(),
                value: "t7".into(),
                kind: ValueKind::Str,
            }],
            ..need("svc-3")
        }],
        ..hour.clone()
    };
    let search = |q: &SearchQuery| {
        let mut w = engine.candidates(q).expect("walk");
        let mut spans = 0;
        for _ in 0..20 {
            let Some(c) = w.next_candidate().expect("step") else {
                break;
            };
            spans += engine.get_trace(&c.trace_id).expect("get").len();
        }
        spans
    };
    assert_eq!(search(&hour), 20 * SPANS_PER_TRACE as usize);
    assert!(search(&narrow) > 0);
    let mut group = c.benchmark_group("search_1m_spans");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("service_1h_limit_20", |b| {
        b.iter(|| black_box(search(&hour)))
    });
    group.bench_function("service_op_tag_1h_limit_20", |b| {
        b.iter(|| black_box(search(&narrow)))
    });
    group.bench_function("services", |b| {
        b.iter(|| black_box(engine.index(TimeRange::ALL).expect("index").services()))
    });
    group.bench_function("get_trace", |b| {
        b.iter(|| {
            let spans = engine.get_trace(&probe).expect("get");
            assert_eq!(spans.len(), SPANS_PER_TRACE as usize);
            black_box(spans)
        })
    });
    group.finish();

    // The pruning step.
    let set = engine.index(TimeRange::ALL).expect("index").sets;
    let whole = set
        .iter()
        .max_by_key(|s| s.traces.len())
        .expect("a set")
        .clone();
    let index = tables
        .iter()
        .map(|t| open_index(t).expect("digest"))
        .max_by_key(|i| i.blocks.len())
        .expect("a file");
    eprintln!("largest file: {} blocks", index.blocks.len());
    let walk = |service: Option<&str>, most: usize| {
        let q = SearchQuery {
            needs: service.map(need).into_iter().collect(),
            ..SearchQuery::default()
        };
        let mut w = engine.candidates(&q).expect("walk");
        let mut n = 0;
        while n < most && w.next_candidate().expect("step").is_some() {
            n += 1;
        }
        n
    };
    assert_eq!(walk(Some("svc-3"), 20), 20);
    assert_eq!(walk(Some("nobody"), usize::MAX), 0);
    let mut group = c.benchmark_group("index_prune");
    group.sample_size(10);
    group.bench_function("encode_sidecar_of_largest_file", |b| {
        b.iter(|| black_box(encode_sidecar(&whole, BLOCK_PARTS)))
    });
    let terms = NeedTerms::new(&need("svc-3"));
    let nobody = NeedTerms::new(&need("nobody"));
    group.bench_function("digest_check_every_block", |b| {
        b.iter(|| {
            black_box(&index)
                .blocks
                .iter()
                .filter(|d| black_box(&terms).may_meet(d) || black_box(&nobody).may_meet(d))
                .count()
        })
    });
    group.bench_function("decode_one_block", |b| {
        b.iter(|| black_box(index.block(0).expect("block")))
    });
    group.bench_function("walk_service_to_20", |b| b.iter(|| walk(Some("svc-3"), 20)));
    group.bench_function("walk_no_match", |b| {
        b.iter(|| walk(Some("nobody"), usize::MAX))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
