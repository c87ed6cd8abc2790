//! The bloom filter over a file's trace IDs (10 bits per ID): one probe for
//! an ID the file holds and for one it does not, in a filter the size of a
//! 64 MiB file's (50k traces, 61 KiB: fits in L2) and of a million traces
//! (1.2 MiB: probes miss the cache).
//!
//! `cargo bench -p tracedb-benches --bench bloom`

use std::{hint::black_box, path::Path};

use criterion::{criterion_group, criterion_main, Criterion};
use tracedb_lsm::table::bloom::{Bloom, BloomBuilder};

#[path = "common/lsm.rs"]
mod common;

fn bench_probe(c: &mut Criterion) {
    let mut group = c.benchmark_group("bloom_probe");
    for (name, keys) in [("50k_ids", 50_000), ("1m_ids", 1_000_000)] {
        let present = common::random_ids(keys, 1);
        let absent = common::random_ids(4096, 2);
        let mut b = BloomBuilder::default();
        for id in &present {
            b.add(id);
        }
        let bloom = Bloom::decode(Path::new("bench"), 0, &b.finish(10)).expect("decode");
        let fp = absent.iter().filter(|id| bloom.may_contain(id)).count();
        println!("{name}: {fp} of {} absent IDs pass", absent.len());
        let mut i = 0;
        group.bench_function(format!("{name}/present"), |b| {
            b.iter(|| {
                i = (i + 1) % present.len();
                black_box(bloom.may_contain(&present[i]))
            })
        });
        group.bench_function(format!("{name}/absent"), |b| {
            b.iter(|| {
                i = (i + 1) % absent.len();
                black_box(bloom.may_contain(&absent[i]))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_probe);
criterion_main!(benches);
