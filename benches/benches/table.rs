//! Sorted files: build, point lookup (present and absent), and the k-way
//! merge of K files that compaction runs.
//!
//! `cargo bench -p tracedb-benches --bench table`

use std::{hint::black_box, sync::Arc};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::{compaction::MergeIterator, SsTable, SsTableBuilder, TableOptions, TraceId};

#[path = "common/lsm.rs"]
mod common;

const SPANS: usize = 200_000;

fn build(spans: &[tracedb_lsm::Span], path: &std::path::Path) -> SsTable {
    let mut b = SsTableBuilder::create(path, TableOptions::default()).expect("create");
    for s in spans {
        b.add(s).expect("sorted");
    }
    b.finish().expect("finish");
    SsTable::open(path).expect("open")
}

fn bench_build(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = common::sorted_spans(SPANS, 1);
    let mut group = c.benchmark_group("sstable_build");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(SPANS as u64));
    group.bench_function("200k_spans", |b| {
        b.iter(|| build(&spans, &dir.path().join("build.sst")))
    });
    group.finish();
}

fn bench_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = common::sorted_spans(SPANS, 2);
    let table = build(&spans, &dir.path().join("lookup.sst"));
    let present: Vec<TraceId> = spans.iter().step_by(97).map(|s| s.trace_id).collect();
    let mut rng = SmallRng::seed_from_u64(3);
    let absent: Vec<TraceId> = (0..1000)
        .map(|_| TraceId(rng.random::<u128>().to_be_bytes()))
        .collect();
    let mut group = c.benchmark_group("sstable_lookup");
    let mut i = 0;
    group.bench_function("present", |b| {
        b.iter(|| {
            i = (i + 1) % present.len();
            black_box(table.get(&present[i]).expect("get"))
        })
    });
    group.bench_function("absent", |b| {
        b.iter(|| {
            i = (i + 1) % absent.len();
            black_box(table.get(&absent[i]).expect("get"))
        })
    });
    group.finish();
}

fn bench_merge(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("merge");
    group.sample_size(10);
    for k in [2usize, 4, 8] {
        let tables: Vec<Arc<SsTable>> = (0..k)
            .map(|j| {
                let spans = common::sorted_spans(SPANS / k, 10 + j as u64);
                Arc::new(build(&spans, &dir.path().join(format!("m{k}-{j}.sst"))))
            })
            .collect();
        group.throughput(Throughput::Elements(SPANS as u64));
        group.bench_function(format!("{k}_files"), |b| {
            b.iter(|| {
                let mut m =
                    MergeIterator::new(tables.iter().map(|t| t.iter()).collect()).expect("merge");
                let mut n = 0usize;
                while let Some(trace) = m.next_trace().expect("next") {
                    n += trace.len();
                }
                assert_eq!(n, SPANS / k * k);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_build, bench_lookup, bench_merge);
criterion_main!(benches);
