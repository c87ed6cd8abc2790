//! The flush sort: spans by trace ID with a strict less; in place
//! (`sort_by_trace_id`, for comparison: docs/decisions/0016-flush-sorts-keys.md),
//! and as the flush does it now (`sorted_by_trace_id`: keys sorted, spans
//! referenced).
//!
//! `cargo bench -p tracedb-benches --bench sort`
//!
//! Three inputs of 1,000,000 spans: one trace ID for every span (the case a
//! non-strict comparator made pathological), random IDs, and realistic traffic
//! (5-50 spans per trace, traces interleaved).

use std::{hint::black_box, sync::Arc};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_lsm::{
    sort::{sort_by_trace_id, sorted_by_trace_id},
    test_util::span_with,
    ScopeGroup, Span,
};

const N: usize = 1_000_000;

/// Span `i` of `trace`, 1 ns long at `i` ns, with no payload: the sort moves
/// only keys and references.
fn span(group: &Arc<ScopeGroup>, trace: u128, i: u64) -> Span {
    span_with(group, trace, i, (i, i + 1), Bytes::new())
}

fn inputs() -> Vec<(&'static str, Vec<Span>)> {
    let group = Arc::new(ScopeGroup::default());
    let mut rng = SmallRng::seed_from_u64(1);
    let identical = (0..N as u64).map(|i| span(&group, 7, i)).collect();
    let random = (0..N as u64)
        .map(|i| span(&group, rng.random(), i))
        .collect();
    let mut realistic = Vec::with_capacity(N);
    let mut open: Vec<(u128, u32)> = Vec::new();
    while realistic.len() < N {
        if open.len() < 256 {
            open.push((rng.random(), rng.random_range(5..=50)));
        }
        let pick = rng.random_range(0..open.len());
        realistic.push(span(&group, open[pick].0, realistic.len() as u64));
        open[pick].1 -= 1;
        if open[pick].1 == 0 {
            open.swap_remove(pick);
        }
    }
    vec![
        ("identical", identical),
        ("random", random),
        ("realistic", realistic),
    ]
}

fn bench_sort(c: &mut Criterion) {
    let mut group = c.benchmark_group("sort_by_trace_id");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(N as u64));
    let inputs = inputs();
    for (name, spans) in &inputs {
        group.bench_function(*name, |b| {
            b.iter_batched_ref(
                || spans.clone(),
                |s| sort_by_trace_id(black_box(s)),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();

    // What a flush does: the order of a buffer's spans, no span moved.
    let mut group = c.benchmark_group("sorted_by_trace_id");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(N as u64));
    for (name, spans) in &inputs {
        group.bench_function(*name, |b| {
            b.iter(|| black_box(sorted_by_trace_id(black_box(spans))))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_sort);
criterion_main!(benches);
