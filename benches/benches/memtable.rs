//! Memtable append with 1, 2 and 4 writer threads (no WAL, no flush).
//!
//! `cargo bench -p tracedb-benches --bench memtable`

use std::{sync::Arc, time::Duration};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::{memtable::MemTable, MemTableOptions, ScopeGroup};

#[path = "common/lsm.rs"]
mod common;

const PER_THREAD: u64 = 100_000;
const BATCH: u64 = 100;

fn bench_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("memtable_append");
    group.sample_size(10);
    let scope = Arc::new(ScopeGroup::default());
    for threads in [1u64, 2, 4] {
        group.throughput(Throughput::Elements(threads * PER_THREAD));
        group.bench_function(format!("{threads}_threads"), |b| {
            b.iter(|| {
                let mt = MemTable::new(MemTableOptions {
                    shards: 4,
                    flush_bytes: usize::MAX,
                    max_age: Duration::from_secs(3600),
                });
                std::thread::scope(|s| {
                    for t in 0..threads {
                        let (mt, scope) = (&mt, &scope);
                        s.spawn(move || {
                            for b in 0..PER_THREAD / BATCH {
                                let spans = (0..BATCH)
                                    .map(|i| common::span(scope, u128::from(t << 32 | b), i))
                                    .collect();
                                mt.append(spans, 1, |_| {});
                            }
                        });
                    }
                });
                mt
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
