//! Building a sorted file: 200k sorted spans encoded into blocks, compressed,
//! written and fsynced, at the flush's zstd level (1) and compaction's (3);
//! and what a flush does with a sorted buffer: the same file at zstd 1, the
//! search-index summary of its traces and their metrics cells, and the same
//! without the cells; and the cells alone, counted and encoded, which a
//! flush and every merge do; and what attribute cells add to the cells of
//! spans carrying HTTP attributes. The spans' payloads are separate
//! allocations visited in trace-ID order, not in the order they were made,
//! as a flushed buffer's are (about 50 MB of them, more than the caches hold).
//!
//! `cargo bench -p tracedb-benches --bench table`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::{
    engine::write_sorted_buffer,
    index::{
        cells::{self, CellAttributes, CellsBuilder},
        SummaryBuilder,
    },
    SsTableBuilder, TableOptions,
};

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
    // The same pass without the cells: what counting them adds to a flush.
    group.bench_function("200k_spans_table_and_summary", |b| {
        b.iter(|| {
            let table = TableOptions {
                zstd_level: 1,
                ..TableOptions::default()
            };
            let mut builder = SsTableBuilder::create(&path, table).expect("created");
            let mut summary = SummaryBuilder::default();
            for trace in spans.chunk_by(|a, b| a.trace_id == b.trace_id) {
                summary.add_trace(trace);
                for span in trace {
                    builder.add(span).expect("sorted");
                }
            }
            (builder.finish().expect("written"), summary.finish())
        })
    });
    group.bench_function("200k_spans_metrics_cells", |b| {
        b.iter(|| {
            let mut cells = CellsBuilder::default();
            cells.add_all(&spans);
            cells.finish().expect("cells")
        })
    });
    // The same, encoded as the sidecar ends with them (each frame at the
    // cells' zstd level): what counting the cells costs a flush or a merge.
    group.bench_function("200k_spans_metrics_cells_encoded", |b| {
        b.iter(|| {
            let mut cells = CellsBuilder::default();
            cells.add_all(&spans);
            cells::encode(&cells.finish().expect("cells"))
        })
    });
    group.finish();
}

/// What attribute cells add to counting the cells of spans that carry the
/// attributes they count (method, route, status code) and others: with
/// the summary's scan, as a flush and a merge count them, and alone, as a
/// merge counts a carried-over trace's spans.
fn bench_attribute_cells(c: &mut Criterion) {
    let spans = common::sorted_attributed_spans(SPANS, 2);
    let mut group = c.benchmark_group("attribute_cells");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(SPANS as u64));
    for (label, attributes) in [
        ("none", CellAttributes::none()),
        ("default", CellAttributes::default()),
    ] {
        let attributes = std::sync::Arc::new(attributes);
        group.bench_function(format!("200k_spans_summary_and_cells_{label}"), |b| {
            b.iter(|| {
                let mut summary = SummaryBuilder::default();
                let mut cells = CellsBuilder::new(attributes.clone());
                for trace in spans.chunk_by(|a, b| a.trace_id == b.trace_id) {
                    summary.add_trace_counted(trace, &mut cells);
                }
                (summary.finish(), cells.finish().expect("cells"))
            })
        });
        group.bench_function(format!("200k_spans_cells_alone_{label}"), |b| {
            b.iter(|| {
                let mut cells = CellsBuilder::new(attributes.clone());
                cells.add_all(&spans);
                cells.finish().expect("cells")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_build, bench_flush, bench_attribute_cells);
criterion_main!(benches);
