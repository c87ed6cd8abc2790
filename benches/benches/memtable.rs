//! Memtable append with 1, 2 and 4 writer threads (no WAL, no flush), and
//! lookups of one trace among a million buffered spans (what GetTrace pays
//! for the spans not yet flushed).
//!
//! `cargo bench -p tracedb-benches --bench memtable`

use std::{sync::Arc, time::Duration};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::{memtable::MemTable, MemTableOptions, ScopeGroup, TraceId};

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

/// A million spans buffered (requests of 512 spans, 5-50 spans per trace),
/// then one trace looked up: present, and absent.
fn bench_get(c: &mut Criterion) {
    const SPANS: u64 = 1_000_000;
    let mut group = c.benchmark_group("memtable_get");
    let scope = Arc::new(ScopeGroup::default());
    let mt = MemTable::new(MemTableOptions {
        shards: 2,
        flush_bytes: usize::MAX,
        max_age: Duration::from_secs(3600),
    });
    let trace = |i: u64| u128::from(i / 27).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
    let mut i = 0;
    while i < SPANS {
        let spans = (i..(i + 512).min(SPANS))
            .map(|j| common::span(&scope, trace(j), j))
            .collect();
        mt.append(spans, 1, |_| {});
        i += 512;
    }
    let mut out = Vec::new();
    let mut n = 0;
    group.bench_function("1m_spans/present", |b| {
        b.iter(|| {
            n = (n + 7919) % SPANS;
            out.clear();
            mt.get(&TraceId(trace(n).to_be_bytes()), &mut out);
            assert!(!out.is_empty());
        })
    });
    group.bench_function("1m_spans/absent", |b| {
        b.iter(|| {
            n += 1;
            out.clear();
            mt.get(&TraceId(u128::from(n).to_be_bytes()), &mut out);
            assert!(out.is_empty());
        })
    });
    group.finish();
}

criterion_group!(benches, bench_append, bench_get);
criterion_main!(benches);
