//! The newest-first walk over the sidecars' blocks: it reads only the
//! blocks that may hold what a search needs, matches an error to its
//! operation, walks a damaged block from the spans, and passes over parts
//! outside the window or the asked trace IDs without decoding them.

use super::*;

/// An engine writing sidecars in blocks of 16 parts, that flushes only
/// when asked (one flush, one file).
pub(super) fn blocks_of_16(dir: &Path) -> Engine {
    let mut opts = small_tree(dir, &TestClock::new());
    opts.index_block_parts = 16;
    // More threads than a block's neighbours in most rounds.
    opts.search_threads = 4;
    opts.memtable.flush_bytes = 64 << 20;
    Engine::open(opts).expect("open")
}

/// The candidates of a walk, in the order it proposed them.
pub(super) fn walk(engine: &Engine, q: &SearchQuery, most: usize) -> (Vec<(u128, u64)>, WalkStats) {
    let mut w = engine.candidates(q).expect("walk");
    let mut out = Vec::new();
    while out.len() < most {
        let Some(c) = w.next_candidate().expect("step") else {
            break;
        };
        out.push((u128::from_be_bytes(c.trace_id.0), c.start_unix_nano));
    }
    (out, w.stats())
}

#[test]
fn a_search_reads_only_the_blocks_that_may_hold_what_it_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = blocks_of_16(dir.path());
    // 640 traces, one per 10 ms; every 64th has a span of service "rare".
    let rare = service("rare");
    let spans: Vec<Span> = (1..=640u128)
        .flat_map(|t| {
            let start = T0 - 50 * SEC + t as u64 * 10_000_000;
            let mut spans = trace(t, start);
            if t % 64 == 0 {
                spans.push(otlp_span(&rare, t, 9, Some(1), "lookup", start + 1, 10));
            }
            spans
        })
        .collect();
    engine.write_blocking(spans).expect("write");
    engine.flush().expect("flush");
    let blocks = 640 / 16;

    let need = |service: &str| SearchQuery {
        needs: vec![OpNeed {
            service: Some(service.into()),
            ..OpNeed::default()
        }],
        ..SearchQuery::default()
    };
    let (found, stats) = walk(&engine, &need("rare"), usize::MAX);
    let ids: Vec<u128> = found.iter().map(|f| f.0).collect();
    assert_eq!(ids, (1..=10).rev().map(|i| i * 64).collect::<Vec<u128>>());
    assert_eq!(stats.blocks_read + stats.blocks_skipped, blocks);
    // Ten blocks hold a rare trace; a false positive of the filters may add one or two.
    assert!(stats.blocks_read <= 12, "{stats:?}");

    let (found, stats) = walk(&engine, &need("nowhere"), usize::MAX);
    assert!(found.is_empty());
    assert_eq!(stats.blocks_read, 0, "{stats:?}");

    // With nothing needed, the 20 newest parts lie in the two newest blocks.
    let (found, stats) = walk(&engine, &SearchQuery::default(), 20);
    let ids: Vec<u128> = found.iter().map(|f| f.0).collect();
    assert_eq!(ids, (621..=640).rev().collect::<Vec<u128>>());
    assert!(found.windows(2).all(|w| w[0].1 >= w[1].1));
    assert_eq!(stats.blocks_read, 2, "{stats:?}");
}

/// Parts that start after the window, or whose trace lies outside the asked
/// trace IDs, are passed over without being decoded.
#[test]
fn parts_outside_the_window_or_the_trace_ids_are_not_decoded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = blocks_of_16(dir.path());
    // 640 traces, one per 10 ms: 40 blocks of 16 parts, latest first.
    let at = |t: u128| T0 - 50 * SEC + t as u64 * 10_000_000;
    let spans: Vec<Span> = (1..=640u128).flat_map(|t| trace(t, at(t))).collect();
    engine.write_blocking(spans).expect("write");
    engine.flush().expect("flush");
    // The window ends inside the block of traces 305 to 320.
    let q = SearchQuery {
        start_max: at(312),
        trace_ids: Some((
            TraceId(100u128.to_be_bytes()),
            TraceId(200u128.to_be_bytes()),
        )),
        ..SearchQuery::default()
    };
    let (found, stats) = walk(&engine, &q, usize::MAX);
    let ids: Vec<u128> = found.iter().map(|f| f.0).collect();
    assert_eq!(ids, (100..=200).rev().collect::<Vec<u128>>());
    // Only the parts of traces 100 to 200 were decoded.
    assert_eq!(stats.parts_checked, 101, "{stats:?}");
}

/// `span` (a server span, as [`otlp_span`] makes them) made a client span.
pub(super) fn client(mut span: Span) -> Span {
    let mut p = span.payload.to_vec();
    // Field 6 (kind) = 2; the IDs and names of these tests hold no such bytes.
    let at = p
        .windows(2)
        .position(|w| w == [6 << 3, 2])
        .expect("a span kind");
    p[at + 1] = 3;
    span.payload = Bytes::from(p);
    span
}

/// `span` with an error status (Status.code = 2).
pub(super) fn failed(mut span: Span) -> Span {
    let mut p = span.payload.to_vec();
    let mut status = Vec::new();
    put_varint(&mut status, 3 << 3);
    put_varint(&mut status, 2);
    field(&mut p, 15, &status);
    span.payload = Bytes::from(p);
    span
}

#[test]
fn an_error_is_matched_to_the_operation_whose_span_has_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = blocks_of_16(dir.path());
    let rare = service("rare");
    // Every trace has a "rare" span; in even traces that span failed, in
    // odd ones the root did.
    let spans: Vec<Span> = (1..=64u128)
        .flat_map(|t| {
            let start = T0 - 50 * SEC + t as u64 * 10_000_000;
            let mut spans = trace(t, start);
            let lookup = otlp_span(&rare, t, 9, Some(1), "lookup", start + 1, 10);
            if t % 2 == 0 {
                spans.push(failed(lookup));
            } else {
                spans[0] = failed(spans[0].clone());
                spans.push(lookup);
            }
            spans
        })
        .collect();
    engine.write_blocking(spans).expect("write");
    engine.flush().expect("flush");
    let q = SearchQuery {
        needs: vec![OpNeed {
            service: Some("rare".into()),
            error: true,
            ..OpNeed::default()
        }],
        ..SearchQuery::default()
    };
    let (found, _) = walk(&engine, &q, usize::MAX);
    let mut ids: Vec<u128> = found.iter().map(|f| f.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=32).map(|i| i * 2).collect::<Vec<u128>>());
}

/// An engine of [`blocks_of_16`] holding 160 one-span traces, 10 ms
/// apart, in one flushed file: ten blocks.
fn one_file_of_160_traces(dir: &Path) -> Engine {
    let engine = blocks_of_16(dir);
    let spans: Vec<Span> = (1..=160u128)
        .flat_map(|t| trace(t, T0 - 50 * SEC + t as u64 * 10_000_000))
        .collect();
    engine.write_blocking(spans).expect("write");
    engine.flush().expect("flush");
    engine
}

/// The sidecar of the only file under `dir`, and a byte of its last
/// block's frame (the oldest traces), just before the metrics cells.
fn oldest_block_byte(dir: &Path) -> (std::path::PathBuf, usize) {
    let idx = std::fs::read_dir(dir.join("tables"))
        .expect("tables")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .expect("a sidecar");
    let bytes = std::fs::read(&idx).expect("read");
    let cells = tracedb_lsm::index::cells::cells_len(&idx, &bytes).expect("cells");
    assert!(cells > 0, "the flush wrote cells");
    (idx, bytes.len() - cells - 20)
}

#[test]
fn a_damaged_block_is_walked_from_the_spans_and_its_sidecar_rebuilt_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = one_file_of_160_traces(dir.path());
    let all = SearchQuery::default();
    let (before, _) = walk(&engine, &all, usize::MAX);
    assert_eq!(before.len(), 160);

    // Flip a byte in the last block's frame (the oldest traces).
    let (idx, at) = oldest_block_byte(dir.path());
    let mut bytes = std::fs::read(&idx).expect("read");
    bytes[at] ^= 0x55;
    std::fs::write(&idx, &bytes).expect("write");

    use std::os::unix::fs::MetadataExt;
    let inode = || std::fs::metadata(&idx).expect("sidecar").ino();
    let damaged = inode();
    // Listing values from the damaged block (a window within it, so its
    // digest's list is not enough) answers from the spans and rebuilds.
    let at = |t: u64| T0 - 50 * SEC + t * 10_000_000;
    let cut = TimeRange::new(at(5) + 5, at(10));
    let values = engine
        .tag_values(None, "tenant", cut, &[], ValuesLimit::NONE)
        .expect("values");
    let want: BTreeSet<(String, ValueKind)> =
        [("t0".into(), ValueKind::Str), ("t1".into(), ValueKind::Str)].into();
    assert_eq!(values.values, want);
    assert_ne!(inode(), damaged, "the sidecar was rebuilt");
    let (found, _) = walk(&engine, &all, usize::MAX);
    assert_eq!(found, before);
    let rebuilt = inode();
    assert_ne!(rebuilt, damaged, "the sidecar was rebuilt");
    // The next search reads the rebuilt sidecar, not the damaged one again.
    let (found, stats) = walk(&engine, &all, usize::MAX);
    assert_eq!(found, before);
    assert_eq!(inode(), rebuilt, "rebuilt once");
    assert_eq!(stats.blocks_read, 10, "{stats:?}");
}

/// A walk for a metrics query's exemplars keeps the blocks it inflates
/// in the metrics cells cache, and the next takes them from there, never
/// from another sidecar file than the one they were read from.
#[test]
fn a_kept_walk_inflates_its_blocks_once_and_only_for_the_same_sidecar() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = one_file_of_160_traces(dir.path());
    let all = SearchQuery::default();
    let kept = |engine: &Engine| {
        let mut w = engine.candidates_kept(&all).expect("walk");
        let mut out = Vec::new();
        while let Some(c) = w.next_candidate().expect("step") {
            out.push((u128::from_be_bytes(c.trace_id.0), c.start_unix_nano));
        }
        (out, w.stats())
    };
    let (before, _) = walk(&engine, &all, usize::MAX);
    assert_eq!(before.len(), 160);
    assert_eq!(engine.stats().cells_sections_bytes, 0);
    let (found, stats) = kept(&engine);
    assert_eq!(found, before);
    assert_eq!(stats.blocks_read, 10, "{stats:?}");
    assert!(engine.stats().cells_sections_bytes > 0);

    // The oldest block's frame damaged in place: the same sidecar file.
    let (idx, at) = oldest_block_byte(dir.path());
    let bytes = std::fs::read(&idx).expect("read");
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&idx)
            .expect("open");
        file.write_all_at(&[bytes[at] ^ 0x55], at as u64)
            .expect("write");
    }
    use std::os::unix::fs::MetadataExt;
    let inode = || std::fs::metadata(&idx).expect("sidecar").ino();
    let damaged = inode();
    // A kept walk reads what it kept, not the damaged frame.
    let (found, _) = kept(&engine);
    assert_eq!(found, before);
    assert_eq!(inode(), damaged, "nothing read the damaged block");
    // A walk that reads it walks the spans and rebuilds the sidecar; a kept
    // walk then reads the new file's blocks.
    let (found, _) = walk(&engine, &all, usize::MAX);
    assert_eq!(found, before);
    assert_ne!(inode(), damaged, "the sidecar was rebuilt");
    let (found, stats) = kept(&engine);
    assert_eq!(found, before);
    assert_eq!(stats.blocks_read, 10, "{stats:?}");
}

#[test]
fn warming_reads_each_digest_once_and_the_walk_then_reads_none_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |t: u128| T0 - 50 * SEC + t as u64 * 10_000_000;
    {
        let engine = blocks_of_16(dir.path());
        for (from, to) in [(1, 100), (101, 200), (201, 300)] {
            let spans: Vec<Span> = (from..=to).flat_map(|t| trace(t, at(t))).collect();
            engine.write_blocking(spans).expect("write");
            engine.flush().expect("flush");
        }
    }
    let engine = blocks_of_16(dir.path());
    let files = engine.stats().tables;
    assert!(files >= 2, "{files} files");
    assert_eq!(engine.warm_index().expect("warm"), files);
    assert_eq!(engine.warm_index().expect("warm"), 0, "all cached");
    let (found, _) = walk(&engine, &SearchQuery::default(), 5);
    assert_eq!(found.len(), 5);
    assert_eq!(
        engine.warm_index().expect("warm"),
        0,
        "the walk read none anew"
    );
}

/// `span` with OTLP kind `kind` (a later field 6 wins, as protobuf reads it).
fn of_kind(mut span: Span, kind: u64) -> Span {
    let mut p = span.payload.to_vec();
    put_varint(&mut p, 6 << 3);
    put_varint(&mut p, kind);
    span.payload = Bytes::from(p);
    span
}

#[test]
fn a_block_without_an_error_span_of_the_service_and_kind_is_not_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = blocks_of_16(dir.path());
    let rare = service("rare");
    // Every block has failed spans of "rare" and server spans of "rare";
    // only the newest block (traces 49 to 64) has a failed server span of it.
    let spans: Vec<Span> = (1..=64u128)
        .flat_map(|t| {
            let start = T0 - 50 * SEC + t as u64 * 10_000_000;
            let mut spans = trace(t, start);
            let lookup = otlp_span(&rare, t, 9, Some(1), "lookup", start + 1, 10);
            if t > 48 {
                spans.push(failed(lookup));
            } else {
                spans.push(failed(of_kind(lookup, 3)));
                spans.push(otlp_span(&rare, t, 10, Some(1), "serve", start + 2, 10));
            }
            spans
        })
        .collect();
    engine.write_blocking(spans).expect("write");
    engine.flush().expect("flush");
    let q = SearchQuery {
        needs: vec![OpNeed {
            service: Some("rare".into()),
            kind: Some(2),
            error: true,
            ..OpNeed::default()
        }],
        ..SearchQuery::default()
    };
    let (found, stats) = walk(&engine, &q, usize::MAX);
    let mut ids: Vec<u128> = found.iter().map(|f| f.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (49..=64).collect::<Vec<u128>>());
    assert_eq!(stats.blocks_read, 1, "{stats:?}");
}

/// Tag values, and the walk of every summary set (services, operations,
/// dependencies), asked with their stop flag set read no block; unset, the
/// same calls answer.
#[test]
fn index_reads_stop_when_asked() {
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = blocks_of_16(dir.path());
    let at = |t: u128| T0 - 50 * SEC + t as u64 * 10_000_000;
    let spans: Vec<Span> = (1..=64u128).flat_map(|t| trace(t, at(t))).collect();
    engine.write_blocking(spans).expect("write");
    engine.flush().expect("flush");
    let values = |stop: bool| {
        engine
            .tag_values_until(
                None,
                "tenant",
                TimeRange::ALL,
                &[],
                ValuesLimit::NONE,
                &AtomicBool::new(stop),
            )
            .expect("values")
            .values
    };
    assert!(!values(false).is_empty());
    assert!(values(true).is_empty());
    let sets = |stop: bool| {
        let mut sets = 0;
        engine
            .each_index_until(TimeRange::ALL, &AtomicBool::new(stop), |_| sets += 1)
            .expect("sets");
        sets
    };
    assert_eq!(sets(false), 64 / 16);
    assert_eq!(sets(true), 0);
}
