//! Hostile input for every decoder of a sorted span file: the footer, the
//! header, the block index, the bloom filter and data blocks, on their own
//! and through `SsTable::open`/`verify`/`get`/`iter` over the mmap. Seeded
//! mutations of a valid file (flipped bytes, overwritten runs, truncation,
//! a zeroed page, huge length fields) and plain random bytes. The decoders
//! must return an error or the original spans: never panic, never read out
//! of bounds, never allocate from a length field. `TRACEDB_FUZZ_ITERS`
//! multiplies the number of inputs (default 1).

use std::path::Path;

use rand::{rngs::SmallRng, Rng, SeedableRng};

use super::{
    block::decode_block, block_index::decode_block_index, bloom::Bloom, footer::Footer, SsTable,
    SsTableBuilder, TableOptions,
};
use crate::{
    span::Span,
    test_util::{group, span},
};

pub(crate) fn iters(base: usize) -> usize {
    let factor = std::env::var("TRACEDB_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    base * factor
}

/// Applies one random mutation to `bytes`.
pub(crate) fn mutate(rng: &mut SmallRng, bytes: &mut Vec<u8>) {
    if bytes.is_empty() {
        bytes.push(rng.random());
        return;
    }
    match rng.random_range(0..6) {
        0 => {
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] ^= 1 << rng.random_range(0..8);
            }
        }
        1 => {
            let at = rng.random_range(0..bytes.len());
            let n = rng.random_range(1..64).min(bytes.len() - at);
            rng.fill(&mut bytes[at..at + n]);
        }
        2 => bytes.truncate(rng.random_range(0..bytes.len())),
        3 => {
            let page = rng.random_range(0..bytes.len().div_ceil(4096)) * 4096;
            let end = (page + 4096).min(bytes.len());
            bytes[page..end].fill(0);
        }
        4 => {
            // A huge length or offset where a length field may sit.
            let at = rng.random_range(0..bytes.len());
            let n = 8.min(bytes.len() - at);
            let big = [0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff];
            bytes[at..at + n].copy_from_slice(&big[..n]);
        }
        _ => {
            let at = rng.random_range(0..=bytes.len());
            let extra: Vec<u8> = (0..rng.random_range(1..32)).map(|_| rng.random()).collect();
            bytes.splice(at..at, extra);
        }
    }
}

fn sample_spans() -> Vec<Span> {
    let groups = [group("a"), group("b")];
    let mut spans = Vec::new();
    for t in 1..40u128 {
        for s in 0..(t % 5 + 1) as u64 {
            spans.push(span(&groups[(t % 2) as usize], t, s, 1_000 + s));
        }
    }
    spans
}

fn build(path: &Path, spans: &[Span]) -> Vec<u8> {
    let mut b = SsTableBuilder::create(
        path,
        TableOptions {
            block_bytes: 300,
            ..TableOptions::default()
        },
    )
    .expect("create");
    for s in spans {
        b.add(s).expect("sorted");
    }
    b.finish().expect("finish");
    std::fs::read(path).expect("read")
}

#[test]
fn mutated_sorted_files_are_refused_or_read_right_never_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good_path = dir.path().join("good.sst");
    let spans = sample_spans();
    let good = build(&good_path, &spans);
    let mut rng = SmallRng::seed_from_u64(0x7ab1e);
    let path = dir.path().join("mutated.sst");
    let (mut refused, mut read) = (0, 0);
    for _ in 0..iters(1500) {
        let mut bytes = good.clone();
        for _ in 0..rng.random_range(1..3) {
            mutate(&mut rng, &mut bytes);
        }
        std::fs::write(&path, &bytes).expect("write");
        let Ok(table) = SsTable::open(&path) else {
            refused += 1;
            continue;
        };
        for t in [0u128, 1, 7, 20, 39, 40, u128::MAX] {
            let _ = table.get(&crate::span::TraceId(t.to_be_bytes()));
        }
        let all: Result<Vec<Span>, _> = table.iter().collect();
        match table.verify() {
            Err(_) => refused += 1,
            Ok(n) => {
                // Everything checked: the spans must be the ones written.
                let all = all.expect("verify passed, so every block reads");
                assert_eq!(n as usize, all.len());
                assert_eq!(all.len(), spans.len());
                for (a, b) in all.iter().zip(&spans) {
                    assert_eq!(
                        (a.trace_id, a.span_id, &a.payload),
                        (b.trace_id, b.span_id, &b.payload)
                    );
                }
                read += 1;
            }
        }
    }
    assert!(refused > 0 && refused + read == iters(1500));
    println!(
        "sorted files: {} mutated inputs, {refused} refused, {read} read unchanged",
        iters(1500)
    );
}

#[test]
fn random_bytes_in_each_table_decoder_are_errors_not_panics() {
    let p = Path::new("random");
    let mut rng = SmallRng::seed_from_u64(0xdec0de);
    for _ in 0..iters(100_000) {
        let len = rng.random_range(0..400);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let _ = decode_block(p, 16, &bytes);
        let _ = decode_block_index(p, 16, &bytes, 16);
        let _ = Bloom::decode(p, 16, &bytes);
        let _ = Footer::decode(p, &bytes);
        // The same with valid-looking checksums, so the parsers behind them run.
        if bytes.len() >= 4 {
            let n = bytes.len() - 4;
            let crc = crc32c::crc32c(&bytes[..n]);
            bytes[n..].copy_from_slice(&crc.to_le_bytes());
            let _ = decode_block_index(p, 16, &bytes, 16);
            assert!(Bloom::decode(p, 16, &bytes).is_err() || bytes.len() >= 4 + 8 + 4);
        }
    }
}

#[test]
fn a_block_with_a_valid_checksum_and_hostile_contents_is_refused() {
    // Blocks whose trailer checksum matches garbage: the decompression and
    // batch decoders behind the checksum get hostile bytes.
    let good_dir = tempfile::tempdir().expect("tempdir");
    let good = build(&good_dir.path().join("g.sst"), &sample_spans());
    let table = SsTable::open(&good_dir.path().join("g.sst")).expect("open");
    let h = table.blocks[0].clone();
    let block = good[h.offset as usize..h.end() as usize].to_vec();
    let mut rng = SmallRng::seed_from_u64(0xb10c);
    let mut refused = 0;
    for _ in 0..iters(2000) {
        let mut b = block.clone();
        mutate(&mut rng, &mut b);
        if b.len() >= 16 {
            // Re-seal: the trailer's crc is over everything before its last 4 bytes.
            let n = b.len() - 4;
            let crc = crc32c::crc32c(&b[..n]);
            b[n..].copy_from_slice(&crc.to_le_bytes());
        }
        if decode_block(Path::new("b"), h.offset, &b).is_err() {
            refused += 1;
        }
    }
    assert!(refused > 0);
}
