//! Building a sorted file: 200k sorted spans encoded into blocks, compressed,
//! written and fsynced, at the flush's zstd level (1) and compaction's (3);
//! and what a flush does with a sorted buffer: the same file at zstd 1, the
//! search-index summary of its traces and their metrics cells; and the
//! cells alone, which a flush and every merge count. The spans' payloads are separate
//! allocations visited in trace-ID order, not in the order they were made,
//! as a flushed buffer's are (about 50 MB of them, more than the caches hold).
//!
//! `cargo bench -p tracedb-benches --bench table`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::{engine::write_sorted_buffer, index::cells::CellsBuilder, TableOptions};

#[path = "common/lsm.rs"]
mod common;

const SPANS: usize = 200_000;

fn bench_build(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = common::sorted_spans(SPANS, 1);
    let mut group = c.benchmark_group("sstable_build");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(SPANS as u64));
    for level in [1, 3] {
        let path = dir.path().join(format!("build-{level}.sst"));
        let size = common::build_table(&spans, &path, level).meta().file_size;
        println!(
            "zstd {level}: {} bytes, {:.1} B/span",
            size,
            size as f64 / SPANS as f64
        );
        group.bench_function(format!("200k_spans_zstd_{level}"), |b| {
            b.iter(|| common::build_table(&spans, &path, level))
        });
    }
    group.finish();
}

fn bench_flush(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = common::sorted_spans(SPANS, 1);
    let path = dir.path().join("flush.sst");
    let mut group = c.benchmark_group("flush_write");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(SPANS as u64));
    group.bench_function("200k_spans_table_summary_and_cells", |b| {
        b.iter(|| {
            let table = TableOptions {
                zstd_level: 1,
                ..TableOptions::default()
            };
            write_sorted_buffer(&path, table, &spans).expect("written")
        })
    });
    group.bench_function("200k_spans_metrics_cells", |b| {
        b.iter(|| {
            let mut cells = CellsBuilder::default();
            cells.add_all(&spans);
            cells.finish().expect("cells")
        })
    });
    group.finish();
}

criterion_group!(benches, bench_build, bench_flush);
criterion_main!(benches);
