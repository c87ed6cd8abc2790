//! Tests of whole sorted span files: written by the builder, read through
//! `SsTable`, damaged on disk.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use bytes::Bytes;
use rand::{rngs::SmallRng, Rng, SeedableRng};

use super::{
    footer::{Footer, FOOTER_LEN},
    SsTable, SsTableBuilder, TableMeta, TableOptions,
};
use crate::{
    error::Error,
    span::{ScopeGroup, Span, TraceId},
    test_util::{group, span},
};

fn opts(block_bytes: usize) -> TableOptions {
    TableOptions {
        block_bytes,
        ..TableOptions::default()
    }
}

fn write(path: &Path, opts: TableOptions, spans: &[Span]) -> TableMeta {
    let mut b = SsTableBuilder::create(path, opts).expect("create");
    for s in spans {
        b.add(s).expect("spans are sorted");
    }
    assert_eq!(b.span_count(), spans.len() as u64);
    b.finish().expect("finish")
}

/// `traces` random traces of 1 to 20 spans each, sorted by trace ID, with
/// payloads shaped like small real spans (a name, a few attributes, IDs).
fn random_spans(rng: &mut SmallRng, traces: usize) -> Vec<Span> {
    let groups: Vec<Arc<ScopeGroup>> = ["checkout", "cart", "payment", "frontend"]
        .iter()
        .map(|s| group(s))
        .collect();
    let routes = ["/api/cart", "/api/pay", "/health", "/api/items/{id}"];
    let mut ids: Vec<u128> = (0..traces).map(|_| rng.random()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::new();
    for trace in ids {
        let base = 1_700_000_000_000_000_000u64 + rng.random_range(0..3_600_000_000_000u64);
        for s in 0..rng.random_range(1..=20u64) {
            let g = &groups[rng.random_range(0..groups.len())];
            let mut sp = span(g, trace, rng.random(), base + s * 1_000_000);
            sp.end_unix_nano = sp.start_unix_nano + rng.random_range(1_000..50_000_000);
            sp.payload = Bytes::from(format!(
                "name=GET {} http.method=GET http.status_code={} net.peer.port={} span={:016x} parent={:016x}",
                routes[rng.random_range(0..routes.len())],
                [200, 200, 200, 404, 500][rng.random_range(0..5)],
                rng.random_range(1024..65535u32),
                u64::from_be_bytes(sp.span_id.0),
                rng.random::<u64>(),
            ));
            out.push(sp);
        }
    }
    out
}

fn same_span(a: &Span, b: &Span) -> bool {
    a.trace_id == b.trace_id
        && a.span_id == b.span_id
        && a.start_unix_nano == b.start_unix_nano
        && a.end_unix_nano == b.end_unix_nano
        && a.payload == b.payload
        && *a.group == *b.group
}

fn by_trace(spans: &[Span]) -> BTreeMap<TraceId, Vec<Span>> {
    let mut map: BTreeMap<TraceId, Vec<Span>> = BTreeMap::new();
    for s in spans {
        map.entry(s.trace_id).or_default().push(s.clone());
    }
    map
}

/// A small file of a few blocks, for the damage tests; returns its bytes too.
fn small_file(dir: &Path) -> (PathBuf, Vec<u8>, Vec<Span>) {
    let mut rng = SmallRng::seed_from_u64(11);
    let spans = random_spans(&mut rng, 40);
    let path = dir.join("small.sst");
    write(&path, opts(1024), &spans);
    let bytes = fs::read(&path).expect("read back");
    (path, bytes, spans)
}

fn is_typed_corruption(e: &Error) -> bool {
    matches!(
        e,
        Error::ChecksumMismatch { .. }
            | Error::Corrupt { .. }
            | Error::UnsupportedVersion { .. }
            | Error::CorruptBlock { .. }
    )
}

#[test]
fn round_trip_of_many_spans_over_many_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let mut rng = SmallRng::seed_from_u64(1);
    let spans = random_spans(&mut rng, 3_000);
    let meta = write(&path, opts(16 << 10), &spans);

    let table = SsTable::open(&path).expect("open");
    let traces = by_trace(&spans);
    assert_eq!(*table.meta(), meta);
    assert_eq!(meta.span_count, spans.len() as u64);
    assert_eq!(meta.trace_count, traces.len() as u64);
    assert_eq!(meta.min_trace_id, spans[0].trace_id);
    assert_eq!(meta.max_trace_id, spans[spans.len() - 1].trace_id);
    assert_eq!(
        meta.min_time_unix_nano,
        spans
            .iter()
            .map(|s| s.start_unix_nano)
            .min()
            .expect("spans")
    );
    assert_eq!(
        meta.max_time_unix_nano,
        spans.iter().map(|s| s.end_unix_nano).max().expect("spans")
    );
    assert_eq!(meta.file_size, fs::metadata(&path).expect("stat").len());
    assert!(
        table.blocks.len() > 20,
        "only {} blocks",
        table.blocks.len()
    );
    assert_eq!(table.path(), path);
    // Traces are far smaller than a block, so every cut falls between traces.
    assert!(
        table
            .blocks
            .windows(2)
            .all(|w| w[0].last_trace_id < w[1].first_trace_id),
        "a small trace was split across blocks"
    );

    for (id, expected) in &traces {
        let got = table.get(id).expect("get");
        assert_eq!(got.len(), expected.len(), "trace {id}");
        assert!(
            got.iter().zip(expected).all(|(a, b)| same_span(a, b)),
            "trace {id}"
        );
    }
    let all: Vec<Span> = table.iter().collect::<Result<_, _>>().expect("iter");
    assert_eq!(all.len(), spans.len());
    assert!(all.iter().zip(&spans).all(|(a, b)| same_span(a, b)));
    assert_eq!(table.verify().expect("verify"), spans.len() as u64);

    let payload: usize = spans.iter().map(|s| s.payload.len()).sum();
    println!(
        "round trip: {} spans, {} traces, {} blocks, {} bytes: {:.1} bytes/span on disk (payload {:.1} bytes/span)",
        spans.len(),
        traces.len(),
        table.blocks.len(),
        meta.file_size,
        meta.file_size as f64 / spans.len() as f64,
        payload as f64 / spans.len() as f64,
    );
}

#[test]
fn a_trace_straddling_blocks_is_read_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let g = group("svc");
    let mut spans = vec![span(&g, 5, 1, 1), span(&g, 6, 1, 2)];
    spans.extend((0..300).map(|i| span(&g, 7, i, 100 + i)));
    spans.push(span(&g, 8, 1, 3));
    // Blocks of 512 bytes split trace 7 (about 60 bytes a span) many times.
    write(&path, opts(512), &spans);
    let table = SsTable::open(&path).expect("open");
    assert!(table.blocks.len() > 10);

    let got = table.get(&TraceId(7u128.to_be_bytes())).expect("get");
    assert_eq!(got.len(), 300);
    assert!(got.iter().zip(&spans[2..302]).all(|(a, b)| same_span(a, b)));
    let read_for_7 = table.blocks_read();
    assert!(
        read_for_7 > 10,
        "trace 7 spans many blocks, read {read_for_7}"
    );

    for (id, n) in [(5u128, 1), (6, 1), (8, 1)] {
        assert_eq!(
            table.get(&TraceId(id.to_be_bytes())).expect("get").len(),
            n,
            "trace {id}"
        );
    }
    assert_eq!(table.verify().expect("verify"), 303);
}

#[test]
fn absent_ids_are_mostly_rejected_without_reading_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let mut rng = SmallRng::seed_from_u64(2);
    let spans = random_spans(&mut rng, 2_000);
    write(&path, opts(8 << 10), &spans);
    let table = SsTable::open(&path).expect("open");
    let present = by_trace(&spans);

    let mut false_positives = 0;
    let mut tried = 0;
    while tried < 10_000 {
        let id = TraceId(rng.random());
        if present.contains_key(&id) {
            continue;
        }
        tried += 1;
        let before = table.blocks_read();
        if table.may_contain(&id) {
            false_positives += 1;
        } else {
            assert!(table.get(&id).expect("get").is_empty());
            assert_eq!(
                table.blocks_read(),
                before,
                "bloom-negative {id} read a block"
            );
        }
    }
    assert!(
        false_positives < 300,
        "{false_positives} false positives in 10000"
    );

    // Outside the file's ID range: no bloom question, no block.
    let before = table.blocks_read();
    for id in [TraceId([0; 16]), TraceId([0xff; 16])] {
        assert!(id < table.meta().min_trace_id || id > table.meta().max_trace_id);
        assert!(!table.may_contain(&id));
        assert!(table.get(&id).expect("get").is_empty());
    }
    assert_eq!(table.blocks_read(), before);
}

#[test]
fn a_flipped_byte_in_a_data_block_is_a_checksum_mismatch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, mut bytes, spans) = small_file(dir.path());
    let table = SsTable::open(&path).expect("open");
    assert!(table.blocks.len() >= 3);
    let victim = table.blocks[1].clone();
    drop(table);

    bytes[victim.offset as usize + 5] ^= 0x40;
    fs::write(&path, &bytes).expect("write damaged");
    let table = SsTable::open(&path).expect("blocks are not checked at open");

    match table.get(&victim.first_trace_id) {
        Err(Error::ChecksumMismatch { file, offset, .. }) => {
            assert_eq!(file, path);
            assert_eq!(offset, victim.offset);
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    assert!(matches!(
        table.verify(),
        Err(Error::ChecksumMismatch { .. })
    ));
    let results: Vec<_> = table.iter().collect();
    assert!(
        results.last().is_some_and(|r| r.is_err()),
        "iter must end with the error"
    );
    assert!(results.iter().filter(|r| r.is_err()).count() == 1);
    assert!(
        results.len() <= table.blocks[0].span_count as usize + 1,
        "nothing after the error"
    );
    // Blocks around the damage are still readable.
    let last = spans[spans.len() - 1].trace_id;
    assert!(last > victim.last_trace_id);
    assert!(!table
        .get(&last)
        .expect("the last block is intact")
        .is_empty());
}

#[test]
fn flipped_bytes_outside_data_blocks_make_open_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes, _) = small_file(dir.path());
    let table = SsTable::open(&path).expect("open");
    let data_end = table.blocks.last().expect("blocks").end() as usize;
    drop(table);

    let damaged = dir.path().join("damaged.sst");
    // Every byte of the header, the index, the bloom filter and the footer.
    for i in (0..16).chain(data_end..bytes.len()) {
        let mut bad = bytes.clone();
        bad[i] ^= 0x08;
        fs::write(&damaged, &bad).expect("write damaged");
        match SsTable::open(&damaged) {
            Ok(_) => panic!("flip at byte {i} of {} was not noticed", bytes.len()),
            Err(e) => assert!(is_typed_corruption(&e), "byte {i}: {e}"),
        }
    }
}

#[test]
fn a_truncated_file_is_an_error_never_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, bytes, _) = small_file(dir.path());
    let cut = dir.path().join("cut.sst");
    let mut lengths: Vec<usize> = (0..bytes.len()).step_by(37).collect();
    lengths.extend([
        1,
        15,
        16,
        17,
        135,
        136,
        137,
        bytes.len() - FOOTER_LEN,
        bytes.len() - 1,
    ]);
    for len in lengths {
        fs::write(&cut, &bytes[..len]).expect("write cut");
        match SsTable::open(&cut).and_then(|t| t.verify()) {
            Ok(n) => panic!("a {len}-byte prefix read as {n} spans"),
            Err(e) => assert!(is_typed_corruption(&e), "length {len}: {e}"),
        }
    }
}

#[test]
fn hostile_footer_offsets_with_a_valid_checksum_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes, _) = small_file(dir.path());
    let good = Footer::decode(&path, &bytes).expect("footer");
    let at = bytes.len() - FOOTER_LEN;
    let hostile = dir.path().join("hostile.sst");
    let cases: Vec<(&str, Footer)> = vec![
        (
            "huge index",
            Footer {
                index_len: u64::MAX - 3,
                ..good.clone()
            },
        ),
        (
            "bloom past end",
            Footer {
                bloom_len: good.bloom_len + 1,
                ..good.clone()
            },
        ),
        (
            "index in header",
            Footer {
                index_offset: 3,
                index_len: good.index_len + good.index_offset - 3,
                ..good.clone()
            },
        ),
        (
            "wrapping bloom",
            Footer {
                bloom_offset: u64::MAX,
                ..good.clone()
            },
        ),
        (
            "span count",
            Footer {
                span_count: good.span_count + 1,
                ..good.clone()
            },
        ),
        (
            "block count",
            Footer {
                block_count: u64::MAX,
                ..good.clone()
            },
        ),
        (
            "no traces",
            Footer {
                trace_count: 0,
                ..good.clone()
            },
        ),
        (
            "id range",
            Footer {
                max_trace_id: TraceId([0xff; 16]),
                ..good.clone()
            },
        ),
    ];
    for (what, footer) in cases {
        let mut bad = bytes.clone();
        bad[at..].copy_from_slice(&footer.encode());
        fs::write(&hostile, &bad).expect("write hostile");
        match SsTable::open(&hostile) {
            Ok(_) => panic!("{what}: opened"),
            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "{what}: {e}"),
        }
    }
}

#[test]
fn an_empty_table_is_refused_and_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("empty.sst");
    let err = SsTableBuilder::create(&path, TableOptions::default())
        .expect("create")
        .finish()
        .expect_err("empty");
    assert!(matches!(err, Error::EmptyTable { .. }));
    assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 0);
}

#[test]
fn blocks_are_written_as_they_fill_and_a_dropped_builder_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.sst");
    let tmp = dir.path().join("big.sst.tmp");
    let mut b = SsTableBuilder::create(&path, opts(4096)).expect("create");
    let g = group("svc");
    for t in 0..2_000u64 {
        b.add(&span(&g, u128::from(t) + 1, 1, t)).expect("sorted");
    }
    // Finished blocks are on disk already, not held by the builder.
    let on_disk = fs::metadata(&tmp).expect("temporary file").len();
    assert!(on_disk > 8 * 1024, "only {on_disk} bytes written so far");
    assert!(b.estimated_bytes() >= on_disk);
    drop(b);
    assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 0);
}

#[test]
fn finish_leaves_only_the_final_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("one.sst");
    write(
        &path,
        TableOptions::default(),
        &[span(&group("svc"), 1, 1, 1)],
    );
    let names: Vec<_> = fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("one.sst")]);
}

#[test]
fn out_of_order_spans_are_refused_and_the_builder_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = group("svc");
    let mut b =
        SsTableBuilder::create(&dir.path().join("t.sst"), TableOptions::default()).expect("create");
    b.add(&span(&g, 5, 1, 1)).expect("first");
    b.add(&span(&g, 5, 2, 1)).expect("same trace again");
    let err = b.add(&span(&g, 4, 1, 1)).expect_err("backwards");
    assert!(matches!(err, Error::OutOfOrder { .. }));
    b.add(&span(&g, 6, 1, 1)).expect("forwards");
    let meta = b.finish().expect("finish");
    assert_eq!((meta.span_count, meta.trace_count), (3, 2));
}

#[test]
fn a_span_larger_than_any_block_is_refused() {
    let g = group("svc");
    let mut huge = span(&g, 1, 1, 1);
    huge.payload = Bytes::from(vec![0u8; super::block::MAX_BLOCK_BYTES]);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b =
        SsTableBuilder::create(&dir.path().join("t.sst"), TableOptions::default()).expect("create");
    assert!(matches!(b.add(&huge), Err(Error::SpanTooLarge { .. })));
    assert_eq!(b.span_count(), 0);
}

#[test]
fn spans_outlive_their_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let g = group("svc");
    write(
        &path,
        TableOptions::default(),
        &[span(&g, 1, 1, 1), span(&g, 2, 1, 1)],
    );
    let table = SsTable::open(&path).expect("open");
    let got = table.get(&TraceId(2u128.to_be_bytes())).expect("get");
    drop(table);
    fs::remove_file(&path).expect("unlink");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, span(&g, 2, 1, 1).payload);
}

#[test]
fn an_open_table_survives_unlinking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let mut rng = SmallRng::seed_from_u64(3);
    let spans = random_spans(&mut rng, 100);
    write(&path, opts(1024), &spans);
    let table = SsTable::open(&path).expect("open");
    fs::remove_file(&path).expect("unlink");
    assert_eq!(
        table.verify().expect("mapping stays valid"),
        spans.len() as u64
    );
}

#[test]
fn tables_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SsTable>();
    fn assert_send<T: Send>() {}
    assert_send::<SsTableBuilder>();
}

/// Rewrites a file of this build as format version 1 wrote it: the same
/// spans, index entries and bloom filter, row-batch blocks, version 1.
fn as_version_1(path: &Path, bytes: &[u8]) -> Vec<u8> {
    use super::{
        block::{decode_block, encode_row_block},
        block_index::{decode_block_index, encode_block_index},
        footer::HEADER_LEN,
    };
    let footer = Footer::decode(path, bytes).expect("footer");
    let index_region = &bytes[footer.index_offset as usize..][..footer.index_len as usize];
    let handles = decode_block_index(path, footer.index_offset, index_region, HEADER_LEN as u64)
        .expect("index");
    let mut out = bytes[..HEADER_LEN].to_vec();
    out[8..12].copy_from_slice(&1u32.to_le_bytes());
    let mut rewritten = Vec::new();
    for h in &handles {
        let spans = decode_block(path, h.offset, &bytes[h.offset as usize..h.end() as usize])
            .expect("block");
        let offset = out.len() as u64;
        encode_row_block(&spans, 3, &mut out);
        rewritten.push(super::block_index::BlockHandle {
            offset,
            len: (out.len() as u64 - offset) as u32,
            ..h.clone()
        });
    }
    let index_offset = out.len() as u64;
    out.extend_from_slice(&encode_block_index(&rewritten));
    let bloom_offset = out.len() as u64;
    out.extend_from_slice(&bytes[footer.bloom_offset as usize..][..footer.bloom_len as usize]);
    let mut tail = Footer {
        index_offset,
        bloom_offset,
        ..footer
    }
    .encode();
    tail[112..116].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c(&tail[..FOOTER_LEN - 4]);
    tail[FOOTER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&tail);
    out
}

#[test]
fn version_1_files_of_row_batches_are_still_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = SmallRng::seed_from_u64(21);
    let spans = random_spans(&mut rng, 300);
    let path = dir.path().join("new.sst");
    write(&path, opts(4096), &spans);
    let bytes = fs::read(&path).expect("read");
    assert_eq!(
        &bytes[8..12],
        &2u32.to_le_bytes(),
        "this build writes version 2"
    );

    let old = dir.path().join("old.sst");
    let old_bytes = as_version_1(&path, &bytes);
    // Blocks of a version 1 file are row batches in zstd frames (kind 1).
    assert_eq!(
        old_bytes[Footer::decode(&old, &old_bytes)
            .expect("footer")
            .index_offset as usize
            - 8],
        1
    );
    fs::write(&old, &old_bytes).expect("write");
    let table = SsTable::open(&old).expect("a version 1 file opens");
    let all: Vec<Span> = table.iter().collect::<Result<_, _>>().expect("iter");
    assert_eq!(all.len(), spans.len());
    assert!(all.iter().zip(&spans).all(|(a, b)| same_span(a, b)));
    for (id, expected) in by_trace(&spans) {
        let got = table.get(&id).expect("get");
        assert!(
            got.iter().zip(&expected).all(|(a, b)| same_span(a, b)) && got.len() == expected.len()
        );
    }
}

/// A file read by ranges of trace IDs: each range's spans are exactly the
/// file's spans of that range, in file order, the ranges together are the
/// whole file, and each range reads only the blocks that may hold it.
#[test]
fn a_range_of_trace_ids_reads_its_spans_and_its_blocks_only() {
    use crate::span::TraceIdRange;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let mut rng = SmallRng::seed_from_u64(11);
    let spans = random_spans(&mut rng, 2_000);
    write(&path, opts(8 << 10), &spans);
    let table = SsTable::open(&path).expect("open");
    let blocks = table.blocks.len() as u64;
    assert!(blocks > 20, "{blocks} blocks");
    for n in [1, 2, 3, 7] {
        let mut all = Vec::new();
        for ids in TraceIdRange::split(n) {
            let before = table.blocks_read();
            let got: Vec<Span> = table.iter_ids(ids).collect::<Result<_, _>>().expect("read");
            let want: Vec<&Span> = spans.iter().filter(|s| ids.contains(s.trace_id)).collect();
            assert_eq!(got.len(), want.len(), "{n} ranges: {ids:?}");
            assert!(got.iter().zip(&want).all(|(a, b)| same_span(a, b)));
            // A range reads the blocks that hold some of its traces only.
            let holding = table
                .blocks
                .iter()
                .filter(|b| {
                    b.last_trace_id >= ids.start && ids.end.is_none_or(|e| b.first_trace_id < e)
                })
                .count() as u64;
            let read = table.blocks_read() - before;
            assert_eq!(read, holding, "{n} ranges: {ids:?}");
            if n > 1 {
                assert!(read < blocks, "{n} ranges: read {read} of {blocks}");
            }
            all.extend(got);
        }
        assert_eq!(all.len(), spans.len(), "{n} ranges");
        assert!(all.iter().zip(&spans).all(|(a, b)| same_span(a, b)));
    }
}

/// A file read for a list of wanted traces, within ranges of trace IDs:
/// exactly the spans of the listed traces of each range, in file order,
/// from only the blocks that may hold one of them (its range of trace IDs
/// holds one the Bloom filter does not rule out).
#[test]
fn wanted_traces_read_their_spans_and_their_blocks_only() {
    use crate::span::TraceIdRange;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let mut rng = SmallRng::seed_from_u64(17);
    let spans = random_spans(&mut rng, 2_000);
    write(&path, opts(8 << 10), &spans);
    let table = SsTable::open(&path).expect("open");
    let present: Vec<TraceId> = by_trace(&spans).into_keys().collect();
    for every in [1, 3, 40, 700] {
        // Every `every`-th trace of the file, IDs it does not hold between
        // them, and its first and last.
        let mut wanted: Vec<TraceId> = present.iter().step_by(every).copied().collect();
        wanted.extend((0..20).map(|_| TraceId(rng.random())));
        wanted.extend([present[0], present[present.len() - 1]]);
        wanted.sort_unstable();
        wanted.dedup();
        let wanted: Arc<[TraceId]> = wanted.into();
        for n in [1, 3] {
            for ids in TraceIdRange::split(n) {
                let before = table.blocks_read();
                let got: Vec<Span> = table
                    .iter_wanted(ids, Some(wanted.clone()))
                    .collect::<Result<_, _>>()
                    .expect("read");
                let want: Vec<&Span> = spans
                    .iter()
                    .filter(|s| ids.contains(s.trace_id) && wanted.contains(&s.trace_id))
                    .collect();
                assert_eq!(got.len(), want.len(), "every {every}, {n} ranges: {ids:?}");
                assert!(got.iter().zip(&want).all(|(a, b)| same_span(a, b)));
                let holding = table
                    .blocks
                    .iter()
                    .filter(|b| {
                        b.last_trace_id >= ids.start
                            && ids.end.is_none_or(|e| b.first_trace_id < e)
                            && wanted.iter().any(|w| {
                                b.first_trace_id <= *w
                                    && *w <= b.last_trace_id
                                    && table.may_contain(w)
                            })
                    })
                    .count() as u64;
                assert_eq!(
                    table.blocks_read() - before,
                    holding,
                    "every {every}, {n} ranges: {ids:?}"
                );
            }
        }
    }
}

/// A file read keeping only some spans, for every trace or a list of
/// them: exactly those spans, in file order, each block still checked
/// whole against its index entry.
#[test]
fn a_read_that_keeps_some_spans_hands_on_exactly_those() {
    use crate::{span::TraceIdRange, table::KeepSpan};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.sst");
    let mut rng = SmallRng::seed_from_u64(23);
    let spans = random_spans(&mut rng, 1_500);
    write(&path, opts(8 << 10), &spans);
    let table = SsTable::open(&path).expect("open");
    let pays = |payload: &[u8]| payload.windows(8).any(|w| w == b"/api/pay");
    let keep: Arc<KeepSpan> = Arc::new(move |_, payload, _| pays(payload));
    let present: Vec<TraceId> = by_trace(&spans).into_keys().collect();
    let some: Arc<[TraceId]> = present.iter().step_by(3).copied().collect();
    for wanted in [None, Some(some)] {
        let got: Vec<Span> = table
            .iter_where(TraceIdRange::ALL, wanted.clone(), Some(keep.clone()))
            .collect::<Result<_, _>>()
            .expect("read");
        let want: Vec<&Span> = spans
            .iter()
            .filter(|s| pays(&s.payload) && wanted.as_ref().is_none_or(|w| w.contains(&s.trace_id)))
            .collect();
        assert!(!want.is_empty() && want.len() < spans.len() / 2);
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(a, b)| same_span(a, b)));
    }
}
