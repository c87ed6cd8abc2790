//! A table's cells of fewer than [`LISTED_BELOW`] spans give each span's
//! duration bucket, the others their buckets with their spans
//! (docs/FORMAT.md, "Metrics cells"). Both forms, and sidecars written
//! before (every cell giving its buckets), read back as the same cells.

use std::path::Path;

use super::*;

/// Spans of a few keys over a minute: in each second, a key has none to
/// six spans, some of them under 2 ns (in no duration bucket), some
/// sharing a bucket.
fn few_and_many() -> Vec<Span> {
    let names = ["a", "b", "c", "d"];
    let mut spans = Vec::new();
    for second in 0..60u64 {
        for (k, name) in names.iter().enumerate() {
            let n = (second * 3 + k as u64 * 5) % 7;
            for i in 0..n {
                let dur = match (second + i) % 4 {
                    0 => 1,
                    1 => 1_000,
                    2 => 1_000 + i,
                    _ => 1_000_000 * (i + 1),
                };
                let start = second * NANOS + 1 + i;
                spans.push(span(Some("s"), name, 0, false, start, dur));
            }
        }
    }
    spans
}

/// Cells of each number of spans from one to six, with durations, of
/// which some have spans in no bucket, in `cells`' named seconds.
fn varied_cells(cells: &FileCells) -> bool {
    let t = cells.table(Family::Named, 1).expect("named seconds");
    let of = |n: u64| t.cells.iter().filter(move |c| c.spans == n);
    let unbucketed = of(1)
        .chain(of(2))
        .any(|c| t.durations_of(c).iter().map(|d| d.1).sum::<u64>() < c.spans);
    let shared = of(2).any(|c| t.durations_of(c).len() == 1 && t.durations_of(c)[0].1 == 2);
    t.has_durations && !t.roots_only && (1..=6).all(|n| of(n).count() > 0) && unbucketed && shared
}

#[test]
fn cells_of_few_spans_read_back_as_their_buckets_with_their_spans() {
    let cells = counted(&few_and_many());
    assert!(varied_cells(&cells), "the spans make cells of every kind");
    let path = Path::new("x.idx");
    let whole = cells.clone().unpacked();
    let listed = encode_framed(&cells, usize::MAX, LISTED_BELOW);
    let before = encode_framed(&cells, usize::MAX, 1);
    let read = decode(path, &listed).expect("decodes").expect("cells");
    assert_eq!(read, whole);
    assert_eq!(decode(path, &before).expect("decodes"), Some(whole));
    assert_ne!(listed, before, "the cells of few spans are listed");
    // Each length's table read as a query reads it, some buckets only,
    // with and without durations.
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("1.sst");
    std::fs::write(crate::index::sidecar_path(&table), &listed).expect("write");
    let file = CellsFile::open(&table).expect("open").expect("cells");
    let wanted: Vec<bool> = (0..61).map(|b| b % 3 == 1).collect();
    for seconds in BUCKET_SECONDS {
        for durations in [true, false] {
            let reading = Reading {
                durations,
                buckets: Some((0, &wanted)),
            };
            let pieces = file
                .table(Family::Named, seconds, reading, None)
                .expect("reads")
                .expect("a table");
            let all = cells.table(Family::Named, seconds).expect("table");
            let expected: Vec<FullCell> = with_durations(std::slice::from_ref(all))
                .into_iter()
                .filter(|c| wanted.get(c.0 as usize) == Some(&true))
                .map(|c| {
                    if durations {
                        c
                    } else {
                        (c.0, c.1, c.2, Vec::new())
                    }
                })
                .collect();
            assert!(!expected.is_empty());
            assert_eq!(
                with_durations(&pieces),
                expected,
                "the {seconds} s table's buckets, durations {durations}"
            );
        }
    }
}

/// A cell's listed buckets out of order, past 64, or fewer than its spans
/// are refused, as any other damage to the cells.
#[test]
fn damaged_listed_cells_are_refused_and_never_panic() {
    let cells = counted(&few_and_many());
    let refused = refusals(&cells, 11, 6_000);
    assert!(refused > 5_700, "{refused}");
}
