//! One data block: encode (batch encoding + zstd) and decode (checksum, zstd,
//! batch decoding) of the spans a 64 KiB block holds, at zstd 1 and 3.
//!
//! `cargo bench -p tracedb-benches --bench block`

use std::{hint::black_box, path::Path};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::table::block::{decode_block, encode_block};

#[path = "common/lsm.rs"]
mod common;

/// About 64 KiB of encoded spans: the default block size.
const SPANS: usize = 250;

fn bench_block(c: &mut Criterion) {
    let spans = common::sorted_spans(SPANS, 4);
    let mut encode = c.benchmark_group("block_encode");
    encode.throughput(Throughput::Elements(SPANS as u64));
    let mut blocks = Vec::new();
    for level in [1, 3] {
        let mut out = Vec::new();
        let raw = encode_block(&spans, level, &mut out);
        println!("zstd {level}: {raw} bytes raw, {} compressed", out.len());
        blocks.push((level, out));
        encode.bench_function(format!("zstd_{level}"), |b| {
            let mut out = Vec::with_capacity(raw);
            b.iter(|| {
                out.clear();
                encode_block(black_box(&spans), level, &mut out)
            })
        });
    }
    encode.finish();
    let mut decode = c.benchmark_group("block_decode");
    decode.throughput(Throughput::Elements(SPANS as u64));
    for (level, block) in &blocks {
        decode.bench_function(format!("zstd_{level}"), |b| {
            b.iter(|| decode_block(Path::new("bench"), 0, black_box(block)).expect("decode"))
        });
    }
    decode.finish();
}

criterion_group!(benches, bench_block);
criterion_main!(benches);
