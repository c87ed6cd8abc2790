//! The k-way merge compaction runs: `MergeIterator` over K files of 200k spans
//! in all (reading, checksumming and inflating every block), trace by trace.
//!
//! `cargo bench -p tracedb-benches --bench merge`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::compaction::MergeIterator;

#[path = "common/lsm.rs"]
mod common;

const SPANS: usize = 200_000;

fn bench_merge(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("merge");
    group.sample_size(10);
    for k in [2usize, 4, 8] {
        let tables: Vec<_> = (0..k)
            .map(|j| {
                let spans = common::sorted_spans(SPANS / k, 10 + j as u64);
                common::build_table(&spans, &dir.path().join(format!("m{k}-{j}.sst")), 3)
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

criterion_group!(benches, bench_merge);
criterion_main!(benches);
