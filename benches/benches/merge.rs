//! The k-way merge compaction runs: `MergeIterator` over K files of 200k spans
//! in all (reading, checksumming and inflating every block), trace by trace.
//! `_merged_inputs` is the same with the inputs declared written by merges, as
//! at level 1 and deeper: traces one input holds in order skip the sorts.
//! Span IDs are scrambled, as real ones are random, so a trace in start order
//! is not also in span-ID order and the sorts have work to do.
//!
//! `cargo bench -p tracedb-benches --bench merge`

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::{compaction::MergeIterator, Span, SpanId};

#[path = "common/lsm.rs"]
mod common;

const SPANS: usize = 200_000;

/// `spans` with each span ID replaced by a mix of its bits, in the payload
/// too (where it follows the tag, length and trace ID of field 1).
fn scrambled(spans: Vec<Span>) -> Vec<Span> {
    spans
        .into_iter()
        .map(|mut s| {
            let id = u64::from_be_bytes(s.span_id.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            s.span_id = SpanId(id.to_be_bytes());
            let mut payload = s.payload.to_vec();
            payload[20..28].copy_from_slice(&s.span_id.0);
            s.payload = Bytes::from(payload);
            s
        })
        .collect()
}

fn bench_merge(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("merge");
    group.sample_size(10);
    for k in [2usize, 4, 8] {
        let tables: Vec<_> = (0..k)
            .map(|j| {
                let spans = scrambled(common::sorted_spans(SPANS / k, 10 + j as u64));
                common::build_table(&spans, &dir.path().join(format!("m{k}-{j}.sst")), 3)
            })
            .collect();
        group.throughput(Throughput::Elements(SPANS as u64));
        for merged in [false, true] {
            let name = if merged {
                format!("{k}_files_merged_inputs")
            } else {
                format!("{k}_files")
            };
            group.bench_function(name, |b| {
                b.iter(|| {
                    let mut m = MergeIterator::new(tables.iter().map(|t| t.iter()).collect())
                        .expect("merge");
                    if merged {
                        m = m.merged_inputs();
                    }
                    let mut n = 0usize;
                    while let Some(trace) = m.next_trace().expect("next") {
                        n += trace.len();
                    }
                    assert_eq!(n, SPANS / k * k);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_merge);
criterion_main!(benches);
