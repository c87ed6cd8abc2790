//! One data block: encode (batch encoding + zstd) and decode (checksum, zstd,
//! batch decoding) of the spans a 64 KiB block holds, at zstd -3, -1, 1 and 3, as
//! columnar batches (what this build writes) and as row batches (format
//! version 1, still read).
//!
//! `cargo bench -p tracedb-benches --bench block`

use std::{hint::black_box, path::Path};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tracedb_lsm::{
    table::block::{decode_block, encode_block, encode_row_block},
    Span,
};

#[path = "common/lsm.rs"]
mod common;

/// About 64 KiB of encoded spans: the default block size.
const SPANS: usize = 250;

fn bench_block(c: &mut Criterion) {
    let spans = common::sorted_spans(SPANS, 4);
    let mut encode = c.benchmark_group("block_encode");
    encode.throughput(Throughput::Elements(SPANS as u64));
    let mut blocks = Vec::new();
    type Encode = fn(&[Span], i32, &mut Vec<u8>) -> usize;
    let formats: [(&str, Encode); 2] = [("columns", encode_block), ("rows", encode_row_block)];
    for (format, encode_fn) in formats {
        for level in [-3, -1, 1, 3] {
            let mut out = Vec::new();
            let raw = encode_fn(&spans, level, &mut out);
            println!(
                "{format} zstd {level}: {raw} bytes raw, {} stored ({:.1} bytes per span)",
                out.len(),
                out.len() as f64 / SPANS as f64
            );
            let name = format!("{format}_zstd_{level}");
            encode.bench_function(&name, |b| {
                let mut out = Vec::with_capacity(raw);
                b.iter(|| {
                    out.clear();
                    encode_fn(black_box(&spans), level, &mut out)
                })
            });
            blocks.push((name, out));
        }
    }
    encode.finish();
    let mut decode = c.benchmark_group("block_decode");
    decode.throughput(Throughput::Elements(SPANS as u64));
    for (name, block) in &blocks {
        decode.bench_function(name, |b| {
            b.iter(|| decode_block(Path::new("bench"), 0, black_box(block)).expect("decode"))
        });
    }
    decode.finish();
}

criterion_group!(benches, bench_block);
criterion_main!(benches);
