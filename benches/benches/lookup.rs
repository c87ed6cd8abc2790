//! Trace lookups by ID: in one sorted file (present: one block inflated;
//! absent: ID range and bloom filter, no block read), and across the sorted
//! runs of a tiered (level, partition): the candidates a version gives for an
//! ID (one binary search and one bloom probe per run) and the reads.
//!
//! `cargo bench -p tracedb-benches --bench lookup`

use std::{collections::HashSet, hint::black_box};

use criterion::{criterion_group, criterion_main, Criterion};
use tracedb_lsm::{TimeRange, TraceId, Version};

#[path = "common/lsm.rs"]
mod common;

const SPANS: usize = 200_000;

fn bench_file(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = common::sorted_spans(SPANS, 2);
    let table = common::build_table(&spans, &dir.path().join("lookup.sst"), 3);
    let present: Vec<TraceId> = spans.iter().step_by(97).map(|s| s.trace_id).collect();
    let absent = common::random_ids(1000, 3);
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

/// One partition's level 1 holding `runs` runs of 50k spans each.
fn bench_runs(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("runs_lookup");
    let absent = common::random_ids(1000, 5);
    for runs in [1usize, 4, 16] {
        let mut present = Vec::new();
        let files = (0..runs)
            .map(|r| {
                let spans = common::sorted_spans(50_000, 100 + r as u64);
                present.extend(spans.iter().step_by(97).map(|s| s.trace_id));
                let path = dir.path().join(format!("r{runs}-{r}.sst"));
                common::table_file(r as u64, 1, 0, common::build_table(&spans, &path, 3))
            })
            .collect();
        let version = Version::empty(3).apply(&HashSet::new(), files);
        assert_eq!(version.level_stats()[1].runs, runs);
        let mut i = 0;
        let lookup = |id: &TraceId| {
            let mut n = 0;
            for f in version.candidates(id, TimeRange::ALL) {
                n += f.table().get(id).expect("get").len();
            }
            n
        };
        group.bench_function(format!("absent/{runs}_runs"), |b| {
            b.iter(|| {
                i = (i + 1) % absent.len();
                black_box(lookup(&absent[i]))
            })
        });
        group.bench_function(format!("present/{runs}_runs"), |b| {
            b.iter(|| {
                i = (i + 1) % present.len();
                black_box(lookup(&present[i]))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_file, bench_runs);
criterion_main!(benches);
