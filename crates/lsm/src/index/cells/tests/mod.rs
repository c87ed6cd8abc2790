use std::{path::Path, sync::Arc};

use bytes::Bytes;
use tracedb_proto::wire::put_varint;

use super::*;
use crate::{
    index::{SidecarBuilder, SummaryBuilder},
    span::{ScopeGroup, Span, SpanId, TraceId},
};

mod any_service;
mod attr_model;
mod listed;
mod minutes;
mod parts;
mod run;

fn field(out: &mut Vec<u8>, n: u64, b: &[u8]) {
    put_varint(out, n << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn span(service: Option<&str>, name: &str, status: u64, root: bool, start: u64, dur: u64) -> Span {
    span_named(service, name.as_bytes(), status, root, start, dur)
}

/// [`span`] with a name of any bytes.
fn span_named(
    service: Option<&str>,
    name: &[u8],
    status: u64,
    root: bool,
    start: u64,
    dur: u64,
) -> Span {
    let mut p = Vec::new();
    field(&mut p, 2, &[9; 8]);
    if !root {
        field(&mut p, 4, &[5; 8]);
    }
    field(&mut p, 5, name);
    put_varint(&mut p, 6 << 3);
    put_varint(&mut p, 2);
    if status != 0 {
        let mut s = Vec::new();
        put_varint(&mut s, 3 << 3);
        put_varint(&mut s, status);
        field(&mut p, 15, &s);
    }
    let resource = service.map(|s| {
        let mut value = Vec::new();
        field(&mut value, 1, s.as_bytes());
        let mut kv = Vec::new();
        field(&mut kv, 1, b"service.name");
        field(&mut kv, 2, &value);
        let mut r = Vec::new();
        field(&mut r, 1, &kv);
        Bytes::from(r)
    });
    Span {
        trace_id: TraceId([1; 16]),
        span_id: SpanId([9; 8]),
        start_unix_nano: start,
        end_unix_nano: start + dur,
        group: Arc::new(ScopeGroup {
            resource,
            ..ScopeGroup::default()
        }),
        payload: Bytes::from(p),
    }
}

#[test]
fn spans_are_counted_per_key_and_bucket_and_round_trip() {
    let s = NANOS;
    // The named and unnamed families only (attribute cells: below).
    let mut b = CellsBuilder::new(Arc::new(CellAttributes::none()));
    // Right-closed seconds: 10 s exactly is the tenth second's.
    b.add(&span(Some("a"), "GET", 0, true, 10 * s, 3));
    b.add(&span(Some("a"), "GET", 0, true, 9 * s + 1, 4));
    b.add(&span(Some("a"), "GET", 0, true, 10 * s + 1, 1));
    b.add(&span(Some("a"), "PUT", 0, true, 70 * s, 5000));
    b.add(&span(Some("a"), "GET", 2, false, 10 * s, 1000));
    b.add(&span(None, "GET", 0, true, 10 * s, 0));
    let cells = b.finish().expect("cells");
    // Four named keys, three unnamed ones, and three of every service:
    // a's GET roots and those of no service are one.
    let any = (
        cells.named.len(),
        cells.unnamed.len(),
        cells.any_service.len(),
    );
    assert_eq!(any, (4, 3, 3));
    assert!(cells.unnamed.iter().all(|k| k.name.is_none()));
    assert!(cells.any_service.iter().all(|k| k.service.is_none()));
    assert_eq!(cells.spans(), 6);
    assert_eq!(cells.tables.len(), 9);
    let named = cells.table(Family::Named, 1).expect("named seconds");
    // A few cells keep their durations (else: below).
    assert!(named.has_durations);
    let tenth = named.buckets(10, 10);
    assert_eq!(tenth.len(), 3, "{cells:?}");
    let root_a = tenth
        .iter()
        .find(|c| {
            let k = &cells.named[c.key as usize];
            k.service.is_some() && k.parent == Parent::None
        })
        .expect("a's root cell");
    assert_eq!(root_a.spans, 2);
    assert_eq!(named.durations_of(root_a), [(2, 2)]);

    // Without names, GET and PUT of a's roots are one key.
    let unnamed = cells.table(Family::Unnamed, 1).expect("unnamed seconds");
    let key_of = |c: &Cell| &cells.unnamed[c.key as usize];
    type Row = (u64, u64, Vec<(u8, u64)>);
    let roots_a = |t: &'_ CellTable, from, to| -> Vec<Row> {
        t.buckets(from, to)
            .iter()
            .filter(|c| key_of(c).service.is_some() && key_of(c).parent == Parent::None)
            .map(|c| (c.bucket, c.spans, t.durations_of(c).to_vec()))
            .collect()
    };
    // 3 ns and 4 ns in the bucket of 2^2; 1 ns in none.
    assert_eq!(
        roots_a(unnamed, 0, 100),
        vec![
            (10, 2, vec![(2, 2)]),
            (11, 1, vec![]),
            (70, 1, vec![(13, 1)])
        ]
    );
    // Minutes: seconds 1-60 are the first, 61-120 the second.
    let minutes = cells.table(Family::Unnamed, 60).expect("unnamed minutes");
    assert!(minutes.has_durations);
    assert_eq!(
        roots_a(minutes, 0, 10),
        vec![(1, 3, vec![(2, 2)]), (2, 1, vec![(13, 1)])]
    );
    // A name of every service: the GET roots of a and of no service.
    let any = cells
        .table(Family::AnyService, 1)
        .expect("any-service seconds");
    let get_roots: Vec<Row> = any
        .cells
        .iter()
        .filter(|c| {
            let k = &cells.any_service[c.key as usize];
            k.name.as_deref() == Some(&b"GET"[..]) && k.parent == Parent::None
        })
        .map(|c| (c.bucket, c.spans, any.durations_of(c).to_vec()))
        .collect();
    assert_eq!(
        get_roots,
        vec![(10, 3, vec![(2, 2)]), (11, 1, vec![])],
        "{cells:?}"
    );
    let hours = cells.table(Family::Named, 3600).expect("named hours");
    assert_eq!(hours.cells.iter().map(|c| c.spans).sum::<u64>(), 6);
    assert!(hours.has_durations);

    let mut sidecar = b"blocks before".to_vec();
    sidecar.extend(encode(&cells));
    let path = Path::new("x.idx");
    assert_eq!(decode(path, &sidecar).expect("decodes"), Some(cells));
    assert_eq!(decode(path, b"blocks, no cells").expect("no cells"), None);
}

/// `cells` with its named seconds' durations those of its root and error
/// keys only, as a light file's sidecar written before they kept every
/// duration had them.
pub(super) fn roots_timed_named(cells: &FileCells) -> FileCells {
    let mut before = cells.clone();
    let named = before.named.clone();
    for t in &mut before.tables {
        if t.family == Family::Named && t.seconds == 1 {
            let whole = std::mem::replace(t, CellTable::empty(Family::Named, 1, false));
            *t = builder::roots_timed(whole, &named);
        }
    }
    before
}

/// The whole key's seconds keep every cell's durations, however few spans
/// a cell counts. Sidecars written before kept, where light, those of root
/// and error keys only; their parts say which, and read back so.
#[test]
fn named_seconds_keep_every_duration_however_light() {
    let s = NANOS;
    // GET spans are roots, PUT spans children, POST spans children in
    // error.
    let build_of = |spans_a_cell: u64, seconds: u64, roots: bool, errors: bool| {
        let mut b = CellsBuilder::new(Arc::new(CellAttributes::none()));
        for second in 1..=seconds {
            for i in 0..spans_a_cell {
                // 16 ns and 32 ns in turn: buckets 4 and 5.
                let dur = 1 << (i % 2 + 4);
                if roots {
                    b.add(&span(Some("a"), "GET", 0, true, second * s, dur));
                }
                b.add(&span(Some("a"), "PUT", 1, false, second * s, 4 * dur));
                if errors {
                    b.add(&span(Some("a"), "POST", 2, false, second * s, 16 * dur));
                }
            }
        }
        b.finish().expect("cells")
    };
    let build = |spans_a_cell, seconds| build_of(spans_a_cell, seconds, true, false);
    let path = Path::new("x.idx");
    let name_of = |cells: &FileCells, c: &Cell| -> Vec<u8> {
        cells.named[c.key as usize]
            .name
            .as_deref()
            .unwrap_or_default()
            .to_vec()
    };
    // Three spans a cell, as where traffic is light: every key's durations.
    let light = build_of(3, 1400, true, true);
    let seconds = light.table(Family::Named, 1).expect("named seconds");
    assert!(seconds.has_durations && !seconds.roots_only);
    assert_eq!(seconds.cells.len(), 4200);
    for c in &seconds.cells {
        let name = name_of(&light, c);
        let want: &[(u8, u64)] = match &name[..] {
            b"GET" => &[(4, 2), (5, 1)],
            b"PUT" => &[(6, 2), (7, 1)],
            _ => &[(8, 2), (9, 1)],
        };
        assert_eq!(seconds.durations_of(c), want, "{name:?}");
    }
    assert_eq!(
        decode(path, &encode(&light)).expect("decodes"),
        Some(light.clone())
    );
    // As a sidecar written before kept them: the roots' and errors' only.
    let before = roots_timed_named(&light);
    let seconds = before.table(Family::Named, 1).expect("named seconds");
    assert!(seconds.has_durations && seconds.roots_only);
    for c in &seconds.cells {
        let name = name_of(&before, c);
        assert_eq!(seconds.durations_of(c).is_empty(), name == b"PUT");
    }
    assert_eq!(
        decode(path, &encode(&before)).expect("decodes"),
        Some(before.clone())
    );
    // On disk the parts of roots and of errors hold durations and the
    // others' do not; a buffer's table says it has durations only where
    // asked for those keys'.
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    std::fs::write(crate::index::sidecar_path(&table), encode(&before)).expect("write");
    let file = CellsFile::open(&table).expect("open").expect("cells");
    let mask = |f: fn(&CellKey) -> bool| -> Vec<bool> { before.named.iter().map(f).collect() };
    let (roots, errors) = (mask(CellKey::is_root), mask(CellKey::is_error));
    let everything = vec![true; roots.len()];
    for view in [CellsView::File(&file), CellsView::Memory(&before)] {
        let timed = |want: &[bool]| -> Vec<bool> {
            view.table(Family::Named, 1, Reading::whole(), Some(want))
                .expect("reads")
                .expect("seconds")
                .iter()
                .map(|t| t.has_durations)
                .collect()
        };
        assert!(timed(&roots).iter().all(|&t| t), "roots");
        assert!(timed(&errors).iter().all(|&t| t), "errors");
        assert!(timed(&everything).contains(&false), "every key");
    }
    // Of children only, none in error, every duration too.
    let children = build_of(3, 4200, false, false);
    let seconds = children.table(Family::Named, 1).expect("named seconds");
    assert!(seconds.has_durations && !seconds.roots_only);
    assert!(seconds
        .cells
        .iter()
        .all(|c| seconds.durations_of(c) == [(6, 2), (7, 1)]));
    // Four: each cell keeps how its durations fall.
    let dense = build(4, 3);
    let seconds = dense.table(Family::Named, 1).expect("named seconds");
    assert!(seconds.has_durations);
    // Per cell: its second, whether its name is GET, its durations.
    type Timed = (u64, bool, Vec<(u8, u64)>);
    let cells_of = |t: &CellTable| {
        let mut cells: Vec<Timed> = t
            .cells
            .iter()
            .map(|c| {
                let name = dense.named[c.key as usize].name.as_deref();
                (c.bucket, name == Some(b"GET"), t.durations_of(c).to_vec())
            })
            .collect();
        cells.sort();
        cells
    };
    let (get, put) = (vec![(4, 2), (5, 2)], vec![(6, 2), (7, 2)]);
    let want: Vec<_> = (1..=3)
        .flat_map(|second| [(second, false, put.clone()), (second, true, get.clone())])
        .collect();
    assert_eq!(cells_of(seconds), want);
    // The minutes, added up from them, as ever.
    let minutes = dense.table(Family::Named, 60).expect("named minutes");
    assert_eq!(
        cells_of(minutes),
        vec![
            (1, false, vec![(6, 6), (7, 6)]),
            (1, true, vec![(4, 6), (5, 6)])
        ]
    );
    assert_eq!(
        decode(path, &encode(&dense)).expect("decodes"),
        Some(dense.clone())
    );
}

/// `good` damaged once per round, from `seed`: a bit flipped, the bytes cut
/// short, or a byte inserted.
fn damaged(good: &[u8], seed: u64, rounds: usize) -> impl Iterator<Item = Vec<u8>> + '_ {
    let mut rng = seed;
    (0..rounds).map(move |round| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut bad = good.to_vec();
        let at = (rng >> 33) as usize % bad.len();
        match round % 3 {
            0 => bad[at] ^= 1 << (rng % 8),
            1 => bad.truncate(at),
            _ => bad.insert(at, (rng >> 17) as u8),
        }
        bad
    })
}

/// How many of `rounds` damaged copies of `cells`' bytes (from `seed`)
/// are refused; each of the others must read as `cells`.
fn refusals(cells: &FileCells, seed: u64, rounds: usize) -> usize {
    let good = encode(cells);
    let path = Path::new("x.idx");
    let cells = &cells.clone().unpacked();
    let mut refused = 0;
    for bad in damaged(&good, seed, rounds) {
        match decode(path, &bad) {
            Ok(Some(read)) => assert_eq!(&read, cells, "a change read as other cells"),
            Ok(None) | Err(_) => refused += 1,
        }
    }
    refused
}

#[test]
fn damaged_cells_are_refused_and_never_panic() {
    let mut b = CellsBuilder::default();
    for i in 0..200u64 {
        let name = format!("op{}", i % 7);
        b.add(&span(
            Some("s"),
            &name,
            i % 3,
            i % 2 == 0,
            i * NANOS / 3,
            i * 1000,
        ));
    }
    let cells = b.finish().expect("cells");
    let refused = refusals(&cells, 7, 20_000);
    assert!(refused > 19_000, "{refused}");
}

/// A table's cells with their keys resolved, for comparing cells whose
/// keys are numbered differently.
type Resolved = (u64, CellKey, u64, Vec<(u8, u64)>);

fn resolved(cells: &FileCells, family: Family, seconds: u64) -> Vec<Resolved> {
    let t = cells.table(family, seconds).expect("table");
    let keys = cells.keys(family);
    let mut out: Vec<_> = t
        .cells
        .iter()
        .map(|c| {
            (
                c.bucket,
                keys[c.key as usize].clone(),
                c.spans,
                t.durations_of(c).to_vec(),
            )
        })
        .collect();
    out.sort();
    out
}

fn varied_spans(n: u64) -> Vec<Span> {
    (0..n)
        .map(|i| {
            let service = ["a", "b", "c"][(i % 3) as usize];
            let name = format!("op{}", i % 11);
            span(
                Some(service),
                &name,
                i % 3,
                i % 4 == 0,
                i * NANOS / 7,
                i * 997 % 100_000,
            )
        })
        .collect()
}

fn counted(spans: &[Span]) -> FileCells {
    let mut b = CellsBuilder::default();
    b.add_all(spans);
    b.finish().expect("cells")
}

/// Cells counted from the search-index summary's scan of each span (a
/// flush, a merge's traces summarized from their spans) are those counted
/// from the spans alone, whatever their names: names that are not UTF-8
/// share one string in the summary (the empty one) but not one cell key.
#[test]
fn cells_counted_with_the_summary_are_those_counted_alone() {
    let names: [&[u8]; 6] = [b"GET", b"", b"\xff", b"\xfe\xff", b"\xff\xfe", b"PUT"];
    let mut spans: Vec<Span> = (0..600u64)
        .map(|i| {
            let service = [Some("a"), Some("b"), None][(i % 3) as usize];
            let name = names[(i * 7 % 6) as usize];
            let mut s = span_named(service, name, i % 3, i % 5 == 0, i * NANOS / 3, i * 991);
            s.trace_id = TraceId((i as u128 / 4).to_be_bytes());
            s
        })
        .collect();
    spans.sort_by_key(|s| s.trace_id);
    let alone = counted(&spans);
    let keys: std::collections::HashSet<_> = (0..600u64)
        .map(|i| (i % 3, i * 7 % 6, i % 3, i % 5 == 0))
        .collect();
    assert_eq!(alone.named.len(), keys.len(), "every name a key of its own");

    let mut summary = SummaryBuilder::default();
    let mut with_summary = CellsBuilder::default();
    let mut sidecar = SidecarBuilder::new(16);
    for trace in spans.chunk_by(|a, b| a.trace_id == b.trace_id) {
        summary.add_trace_counted(trace, &mut with_summary);
        sidecar.add_trace(trace);
    }
    // Compared whole, reported by their keys (the tables run long).
    let keys = |c: &FileCells| (c.named.clone(), c.spans());
    let with_summary = with_summary.finish().expect("cells");
    assert!(
        with_summary == alone,
        "{:?} != {:?}",
        keys(&with_summary),
        keys(&alone)
    );
    let sidecar = sidecar.take_cells().expect("cells");
    assert!(
        sidecar == alone,
        "{:?} != {:?}",
        keys(&sidecar),
        keys(&alone)
    );
}

/// Root and child spans of `services` services in each of `seconds`
/// seconds.
fn every_second(services: usize, seconds: u64) -> Vec<Span> {
    let mut spans = Vec::new();
    for second in 1..=seconds {
        for s in 0..services {
            let service = format!("service-{s}");
            spans.push(span(Some(&service), "GET /", 0, true, second * NANOS, 1000));
            spans.push(span(
                Some(&service),
                "SELECT",
                2,
                false,
                second * NANOS,
                900,
            ));
        }
    }
    spans
}

/// (bucket, key, spans) of `t`'s cells whose key `keep` keeps, in order.
fn cells_of(pieces: &[CellTable], keep: impl Fn(u32) -> bool) -> Vec<(u64, u32, u64)> {
    let mut out: Vec<_> = pieces
        .iter()
        .flat_map(|t| &t.cells)
        .filter(|c| keep(c.key))
        .map(|c| (c.bucket, c.key, c.spans))
        .collect();
    out.sort_unstable();
    out
}

/// A table is written in parts by ranges of keys: roots apart from the
/// rest, and past a part's size cut where the service changes. Asked for
/// some keys, a reader reads the parts that hold them: every cell of those
/// keys, and few others. All the parts read back as the table.
#[test]
fn tables_are_written_in_parts_and_read_by_the_keys_wanted() {
    let cells = counted(&every_second(40, 3600));
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    std::fs::write(crate::index::sidecar_path(&table), encode(&cells)).expect("write");
    let file = CellsFile::open(&table).expect("open").expect("cells");
    let keys = file.keys(Family::Unnamed).expect("keys");
    assert_eq!(keys, cells.unnamed);
    // Listed as bytes, a key reads back as itself, and its bytes are those
    // of the same key listed from memory.
    let listed = file.key_list(Family::Unnamed).expect("key list");
    let held = KeyList::of(&cells.unnamed, Family::Unnamed);
    assert_eq!(listed.len(), keys.len());
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(&listed.key(i), key);
        assert_eq!(listed.bytes(i), held.bytes(i));
    }
    assert_ne!(listed.bytes(0), listed.bytes(1));
    let whole = cells.table(Family::Unnamed, 1).expect("seconds");

    let all = file
        .table(Family::Unnamed, 1, Reading::whole(), None)
        .expect("read")
        .expect("seconds");
    assert!(all.len() >= 10, "{} parts", all.len());
    let mut joined = all[0].clone();
    for piece in &all[1..] {
        joined.append(piece.clone());
    }
    joined.sort();
    assert_eq!(&joined, whole);

    // The roots of one service.
    let service = keys[7].service.clone();
    let want: Vec<bool> = keys
        .iter()
        .map(|k| k.parent == Parent::None && k.service == service)
        .collect();
    assert_eq!(want.iter().filter(|&&w| w).count(), 1);
    let pieces = file
        .table(Family::Unnamed, 1, Reading::default(), Some(&want))
        .expect("read")
        .expect("seconds");
    let wanted = |k: u32| want[k as usize];
    assert_eq!(
        cells_of(&pieces, wanted),
        cells_of(std::slice::from_ref(whole), wanted)
    );
    assert_eq!(cells_of(&pieces, wanted).len(), 3600);
    // Of the parts holding the key, only its cells are kept.
    assert!(pieces.len() * 10 <= all.len(), "{} parts", pieces.len());
    let read: usize = pieces.iter().map(|t| t.cells.len()).sum();
    assert_eq!(read, 3600, "cells of other keys kept");

    let none = vec![false; keys.len()];
    let pieces = file
        .table(Family::Unnamed, 1, Reading::default(), Some(&none))
        .expect("read")
        .expect("seconds");
    assert!(pieces.is_empty(), "{} parts read for no key", pieces.len());
    assert!(file
        .table(Family::Unnamed, 2, Reading::default(), None)
        .expect("read")
        .is_none());
}

/// A long table's seconds are written in frames of whole minutes, each of
/// its parts saying which buckets it holds: asked for a few seconds, a
/// reader reads the frames holding them (every cell of those seconds) and
/// none of the others; all the parts read back as the table. Damaged, a
/// framed table is refused or reads as itself. (Frames of 64 Ki cells
/// here: the files' 1 Mi would take a table of millions of cells.)
#[test]
fn a_long_table_is_framed_in_time_and_read_by_the_buckets_wanted() {
    const FRAME: usize = 64 * 1024;
    let cells = counted(&every_second(40, 3600));
    let path = Path::new("x.idx");
    assert_eq!(
        decode(path, &encode_framed(&cells, FRAME, LISTED_BELOW)).expect("decodes"),
        Some(cells.clone())
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    std::fs::write(
        crate::index::sidecar_path(&table),
        encode_framed(&cells, FRAME, LISTED_BELOW),
    )
    .expect("write");
    let file = CellsFile::open(&table).expect("open").expect("cells");
    let whole = cells.table(Family::Unnamed, 1).expect("seconds");
    let all = file
        .table(Family::Unnamed, 1, Reading::whole(), None)
        .expect("read")
        .expect("seconds");
    // Each frame's parts hold buckets of whole minutes, apart from the
    // other frames'.
    let span_of = |t: &CellTable| {
        let buckets = t.cells.iter().map(|c| c.bucket);
        (
            buckets.clone().min().expect("cells"),
            buckets.max().expect("cells"),
        )
    };
    let mut frames: Vec<(u64, u64)> = all.iter().map(span_of).collect();
    frames.sort_unstable();
    frames.dedup();
    assert!(frames.len() >= 4, "{} frames", frames.len());
    for pair in frames.windows(2) {
        assert!(pair[0].1 < pair[1].0, "frames overlap: {pair:?}");
        assert_eq!(
            pair[1].0 % 60,
            1,
            "a frame starts within a minute: {pair:?}"
        );
    }

    // Seconds 1,000 to 1,029.
    let first = 1000;
    let wanted = vec![true; 30];
    let pieces = file
        .table(
            Family::Unnamed,
            1,
            Reading {
                durations: false,
                buckets: Some((first, &wanted)),
            },
            None,
        )
        .expect("read")
        .expect("seconds");
    let in_window: Vec<_> = cells_of(std::slice::from_ref(whole), |_| true)
        .into_iter()
        .filter(|c| (first..first + 30).contains(&c.0))
        .collect();
    assert_eq!(in_window.len(), 30 * 80);
    assert_eq!(cells_of(&pieces, |_| true), in_window);
    assert!(
        pieces.len() * frames.len() <= all.len() * 2,
        "{} of {} parts read for 30 seconds in {} frames",
        pieces.len(),
        all.len(),
        frames.len()
    );

    // Damaged, a smaller framed table (four frames) is refused or reads
    // as itself.
    let framed = counted(&every_second(40, 900));
    let good = encode_framed(&framed, FRAME / 4, LISTED_BELOW);
    let mut refused = 0;
    for bad in damaged(&good, 19, 600) {
        match decode(path, &bad) {
            Ok(Some(read)) => assert_eq!(read, framed, "a change read as other cells"),
            Ok(None) | Err(_) => refused += 1,
        }
    }
    assert!(refused > 500, "{refused}");
}

/// Cells in parts are checked as whole tables are: a change is refused or
/// reads as what was written.
#[test]
fn damaged_table_parts_are_refused_and_never_panic() {
    let cells = counted(&every_second(12, 200));
    let path = Path::new("x.idx");
    assert_eq!(
        decode(path, &encode(&cells)).expect("decodes"),
        Some(cells.clone())
    );
    let refused = refusals(&cells, 13, 3_000);
    assert!(refused > 2_800, "{refused}");
}

/// A cell as (bucket, key, spans, durations).
type FullCell = (u64, u32, u64, Vec<(u8, u64)>);

/// Every cell of `pieces`, in order.
fn with_durations(pieces: &[CellTable]) -> Vec<FullCell> {
    let mut out: Vec<_> = pieces
        .iter()
        .flat_map(|t| t.cells.iter().map(move |c| (t, c)))
        .map(|(t, c)| (c.bucket, c.key, c.spans, t.durations_of(c).to_vec()))
        .collect();
    out.sort_unstable();
    out
}

/// Read for some buckets, a table gives each of their cells as it is,
/// durations and all, and leaves the other buckets' cells out; read again
/// from the cache, the same.
#[test]
fn a_table_read_for_some_buckets_gives_their_cells_whole() {
    let mut spans = Vec::new();
    for second in 1..=600u64 {
        for s in 0..5u64 {
            let service = format!("service-{s}");
            for d in 0..(second % 4) {
                let dur = 1000 << ((second + s + d) % 20);
                spans.push(span(Some(&service), "GET /", 0, true, second * NANOS, dur));
            }
        }
    }
    let cells = counted(&spans);
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    std::fs::write(crate::index::sidecar_path(&table), encode(&cells)).expect("write");
    let cache = Arc::new(SectionCache::new(1 << 20));
    let whole = with_durations(std::slice::from_ref(
        cells.table(Family::Unnamed, 1).expect("seconds"),
    ));
    // Every third second from the 100th to the 399th.
    let first = 100;
    let wanted: Vec<bool> = (0..300).map(|i| i % 3 == 0).collect();
    let kept = |b: u64| b >= first && b < first + 300 && (b - first).is_multiple_of(3);
    let expected: Vec<_> = whole.iter().filter(|c| kept(c.0)).cloned().collect();
    assert!(expected.len() > 100 && expected.len() < whole.len() / 2);
    assert!(expected.iter().any(|c| c.3.len() > 1));
    for round in 0..2 {
        let file = CellsFile::open_cached(&table, &cache, 1, cache.turn())
            .expect("open")
            .expect("cells");
        let read = |durations| {
            file.table(
                Family::Unnamed,
                1,
                Reading {
                    durations,
                    buckets: Some((first, &wanted)),
                },
                None,
            )
            .expect("read")
            .expect("seconds")
        };
        assert_eq!(with_durations(&read(true)), expected, "round {round}");
        let counts: Vec<_> = with_durations(&read(false))
            .into_iter()
            .map(|c| (c.0, c.1, c.2))
            .collect();
        let expected: Vec<_> = expected.iter().map(|c| (c.0, c.1, c.2)).collect();
        assert_eq!(counts, expected, "round {round}");
        assert!(!cache.is_empty());
    }
}

/// A sidecar rebuilt over another (a new file renamed over the old) is
/// read as itself, never as the sections the cache kept of the old one.
#[test]
fn a_rebuilt_sidecar_is_not_read_from_the_old_ones_cached_sections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    let sidecar = crate::index::sidecar_path(&table);
    let cache = Arc::new(SectionCache::new(1 << 20));
    let mut read = Vec::new();
    for services in [3, 4] {
        let cells = counted(&every_second(services, 50));
        let tmp = dir.path().join("new.idx");
        std::fs::write(&tmp, encode(&cells)).expect("write");
        std::fs::rename(&tmp, &sidecar).expect("rename");
        let file = CellsFile::open_cached(&table, &cache, 1, cache.turn())
            .expect("open")
            .expect("cells");
        assert_eq!(file.keys(Family::Unnamed).expect("keys"), cells.unnamed);
        let pieces = file
            .table(Family::Unnamed, 1, Reading::whole(), None)
            .expect("read")
            .expect("seconds");
        assert_eq!(
            with_durations(&pieces),
            with_durations(std::slice::from_ref(
                cells.table(Family::Unnamed, 1).expect("seconds")
            ))
        );
        read.push(pieces.iter().map(|t| t.cells.len()).sum::<usize>());
    }
    assert_ne!(read[0], read[1]);
}

/// An encoded `KeyValue` of `key` and the encoded `AnyValue` `value`.
fn kv(key: &str, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    field(&mut out, 1, key.as_bytes());
    field(&mut out, 2, value);
    out
}

fn string(s: &str) -> Vec<u8> {
    let mut v = Vec::new();
    field(&mut v, 1, s.as_bytes());
    v
}

fn int(i: u64) -> Vec<u8> {
    let mut v = Vec::new();
    put_varint(&mut v, 3 << 3);
    put_varint(&mut v, i);
    v
}

/// `s` with the span attributes `attrs` and the resource attributes
/// `resource` added (each an encoded `KeyValue`).
fn with_attributes(mut s: Span, attrs: &[Vec<u8>], resource: &[Vec<u8>]) -> Span {
    let mut p = s.payload.to_vec();
    for a in attrs {
        field(&mut p, 9, a);
    }
    s.payload = Bytes::from(p);
    if !resource.is_empty() {
        let mut r = s.group.resource.as_deref().unwrap_or_default().to_vec();
        for a in resource {
            field(&mut r, 1, a);
        }
        s.group = Arc::new(ScopeGroup {
            resource: Some(Bytes::from(r)),
            ..ScopeGroup::default()
        });
    }
    s
}

/// Attribute cells count each span once per counted attribute it carries,
/// by its first value of each; an attribute of too many values, or whose
/// value is not plain, is left out of the file's cells, which say so; the
/// cells read back as written, damaged ones are refused, and the search
/// index's scan counts them as the builder alone does.
#[test]
fn attribute_cells_count_the_first_plain_value_of_each_counted_attribute() {
    let list = Arc::new(
        CellAttributes::parse([
            "span.route",
            "span.code",
            "span.arr",
            "span.many",
            "resource.env",
        ])
        .expect("attributes"),
    );
    let s = NANOS;
    let env = [kv("env", &string("prod"))];
    let mut spans = vec![
        with_attributes(
            span(Some("a"), "GET", 0, true, 10 * s, 3),
            &[
                kv("route", &string("/a")),
                kv("code", &int(200)),
                kv("other", &string("x")),
            ],
            &env,
        ),
        // The first route counts, the second is not seen.
        with_attributes(
            span(Some("a"), "PUT", 0, true, 10 * s, 5),
            &[
                kv("route", &string("/a")),
                kv("route", &string("/b")),
                kv("code", &int(500)),
            ],
            &env,
        ),
        span(Some("b"), "GET", 0, true, 10 * s, 5),
        // An array: its attribute is left out.
        with_attributes(
            span(Some("a"), "GET", 0, false, 11 * s, 5),
            &[kv("arr", &{
                let mut v = Vec::new();
                field(&mut v, 5, &[]);
                v
            })],
            &env,
        ),
    ];
    // One value too many: left out.
    spans.extend((0..=MAX_VALUES as u64).map(|i| {
        with_attributes(
            span(Some("c"), "GET", 0, false, 12 * s, 5),
            &[kv("many", &int(i))],
            &[],
        )
    }));
    for (i, s) in spans.iter_mut().enumerate() {
        s.trace_id = TraceId((i as u128 / 3).to_be_bytes());
    }
    let mut b = CellsBuilder::new(list.clone());
    b.add_all(&spans);
    let cells = b.finish().expect("cells");
    let name =
        |scope: u8, key: &str| -> Box<[u8]> { [&[scope][..], key.as_bytes()].concat().into() };
    assert_eq!(
        cells.counted,
        vec![
            name(SPAN_SCOPE, "code"),
            name(SPAN_SCOPE, "route"),
            name(RESOURCE_SCOPE, "env")
        ]
    );
    let value = |scope: u8, kv: Vec<u8>| -> Box<[u8]> { [&[scope][..], &kv].concat().into() };
    let seconds = resolved(&cells, Family::Attr, 1);
    let count = |attr: &[u8]| -> u64 {
        seconds
            .iter()
            .filter(|c| c.1.attr.as_deref() == Some(attr))
            .map(|c| c.2)
            .sum()
    };
    assert_eq!(count(&value(SPAN_SCOPE, kv("route", &string("/a")))), 2);
    assert_eq!(count(&value(SPAN_SCOPE, kv("route", &string("/b")))), 0);
    assert_eq!(count(&value(SPAN_SCOPE, kv("code", &int(500)))), 1);
    assert_eq!(count(&value(RESOURCE_SCOPE, kv("env", &string("prod")))), 3);
    // The three attributes' cells and nothing else.
    assert_eq!(seconds.iter().map(|c| c.2).sum::<u64>(), 2 + 2 + 3);
    assert!(cells
        .attr
        .iter()
        .all(|k| k.name.is_none() && k.attr.is_some()));
    // Two of them in the tenth second, one key: a, root, unset, route /a.
    let route_a = seconds
        .iter()
        .find(|c| c.1.attr.as_deref() == Some(&*value(SPAN_SCOPE, kv("route", &string("/a")))))
        .expect("route /a");
    assert_eq!((route_a.0, route_a.2), (10, 2));
    let hours = cells.table(Family::Attr, 3600).expect("attribute hours");
    assert!(hours.has_durations);
    // A cell or two per span: the seconds keep the root spans' durations
    // only (the span with an array is a child, counted by its resource).
    let seconds_table = cells.table(Family::Attr, 1).expect("seconds");
    assert!(seconds_table.has_durations && seconds_table.roots_only);
    for c in &seconds_table.cells {
        let root = cells.attr[c.key as usize].is_root();
        assert_eq!(seconds_table.durations_of(c).is_empty(), !root);
    }
    assert_eq!(hours.cells.iter().map(|c| c.spans).sum::<u64>(), 7);

    let path = Path::new("x.idx");
    assert_eq!(
        decode(path, &encode(&cells)).expect("decodes"),
        Some(cells.clone())
    );
    let refused = refusals(&cells, 11, 5_000);
    assert!(refused > 4_700, "{refused}");

    // The search index's scan of each span counts as the builder does.
    let mut summary = SummaryBuilder::default();
    let mut with_summary = CellsBuilder::new(list.clone());
    let mut sidecar = SidecarBuilder::new(16).counting(list.clone());
    for trace in spans.chunk_by(|a, b| a.trace_id == b.trace_id) {
        summary.add_trace_counted(trace, &mut with_summary);
        sidecar.add_trace(trace);
    }
    assert!(with_summary.finish().expect("cells") == cells);
    assert!(sidecar.take_cells().expect("cells") == cells);

    // Four spans a cell: the seconds keep their durations.
    let mut dense = CellsBuilder::new(list.clone());
    for i in 0..8u64 {
        dense.add(&with_attributes(
            span(Some("a"), "GET", 0, true, 20 * s + 1 + i, 1 << (i % 2 + 4)),
            &[kv("route", &string(["/a", "/b"][(i % 2) as usize]))],
            &[],
        ));
    }
    let dense = dense.finish().expect("cells");
    let seconds = dense.table(Family::Attr, 1).expect("seconds");
    assert!(seconds.has_durations);
    let timed: Vec<_> = seconds
        .cells
        .iter()
        .map(|c| seconds.durations_of(c).to_vec())
        .collect();
    assert_eq!(timed, vec![vec![(4, 4)], vec![(5, 4)]]);
    assert_eq!(decode(path, &encode(&dense)).expect("decodes"), Some(dense));

    // A builder made by default counts the default attributes.
    let mut by_default = CellsBuilder::default();
    by_default.add(&with_attributes(
        span(Some("a"), "GET", 0, true, 10 * s, 3),
        &[kv("http.route", &string("/a"))],
        &[],
    ));
    let by_default = by_default.finish().expect("cells");
    assert!(by_default.counted.contains(&name(SPAN_SCOPE, "http.route")));
    assert_eq!(by_default.attr.len(), 1);

    // Without attributes, no attribute cells.
    let mut none = CellsBuilder::new(Arc::new(CellAttributes::none()));
    none.add_all(&spans);
    let none = none.finish().expect("cells");
    assert!(none.counted.is_empty() && none.attr.is_empty());
    assert!(none.table(Family::Attr, 60).is_none());
    assert_eq!(decode(path, &encode(&none)).expect("decodes"), Some(none));
}
