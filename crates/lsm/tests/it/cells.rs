//! A merge adds its outputs' metrics cells up from its inputs' cells: the
//! cells of each run it writes are those of counting the run's spans, with
//! the repeats and the spans past retention it dropped taken out, and the
//! spans starting on an hour's first nanosecond in their own hour.

use std::{collections::BTreeMap, time::Duration};

use tracedb_lsm::{
    index::cells::{decode, Cell, CellTable, CellsBuilder, Counts, Family, FileCells},
    layout, test_util, Engine, Span,
};
use tracedb_proto::wire::put_varint;

use crate::util::{small_tree, TestClock, SEC, T0};

const HOUR: u64 = 3600 * SEC;

fn field(out: &mut Vec<u8>, n: u64, b: &[u8]) {
    put_varint(out, n << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A span's payload: its name, kind, parent, status and `http.route`, each
/// picked by `i`, so spans share cell keys.
fn payload(i: u64) -> Vec<u8> {
    let mut out = Vec::new();
    match i % 3 {
        0 => {}
        1 => field(&mut out, 4, &[0; 8]),
        _ => field(&mut out, 4, &i.to_be_bytes()),
    }
    field(&mut out, 5, format!("op-{}", i % 7).as_bytes());
    put_varint(&mut out, 6 << 3);
    put_varint(&mut out, i % 4);
    let mut status = Vec::new();
    put_varint(&mut status, 3 << 3);
    put_varint(&mut status, i / 3 % 3);
    field(&mut out, 15, &status);
    if !i.is_multiple_of(5) {
        let mut value = Vec::new();
        field(&mut value, 1, format!("/route/{}", i % 11).as_bytes());
        let mut kv = Vec::new();
        field(&mut kv, 1, b"http.route");
        field(&mut kv, 2, &value);
        field(&mut out, 9, &kv);
    }
    out
}

fn span(trace: u128, id: u64, start: u64) -> Span {
    let services = [test_util::group("svc-a"), test_util::group("svc-b")];
    let duration = 1 + id * 7_919 % 5_000_000;
    test_util::span_with(
        &services[(id % 2) as usize],
        trace,
        id,
        (start, start + duration),
        payload(id),
    )
}

/// [`span`] with `http.request.method` (counted by default) of `method`.
fn with_method(trace: u128, id: u64, start: u64, method: &str) -> Span {
    let mut s = span(trace, id, start);
    let mut value = Vec::new();
    field(&mut value, 1, method.as_bytes());
    let mut kv = Vec::new();
    field(&mut kv, 1, b"http.request.method");
    field(&mut kv, 2, &value);
    let mut payload = s.payload.to_vec();
    field(&mut payload, 9, &kv);
    s.payload = payload.into();
    s
}

/// Where two files' cells differ, told briefly: their keys, their tables'
/// flags and spans, and each table's first cell apart.
fn differences(a: &FileCells, b: &FileCells) -> Vec<String> {
    let mut out = Vec::new();
    for f in [Family::Named, Family::Unnamed, Family::Attr] {
        if a.keys(f) != b.keys(f) {
            out.push(format!(
                "{f:?} keys: {} against {}",
                a.keys(f).len(),
                b.keys(f).len()
            ));
        }
    }
    if a.counted != b.counted {
        out.push("the attributes counted".into());
    }
    let tables = |c: &FileCells| {
        c.tables
            .iter()
            .map(|t| (t.family as u8, t.seconds))
            .collect::<Vec<_>>()
    };
    if tables(a) != tables(b) {
        out.push(format!("tables {:?} against {:?}", tables(a), tables(b)));
    }
    for t in &a.tables {
        let Some(u) = b.table(t.family, t.seconds) else {
            continue;
        };
        let flags = |t: &CellTable| (t.has_durations, t.roots_only, t.cells.len());
        if flags(t) != flags(u) {
            out.push(format!(
                "{:?} {} s: {:?} against {:?}",
                t.family,
                t.seconds,
                flags(t),
                flags(u)
            ));
        }
        let cell = |t: &CellTable, c: &Cell| (c.bucket, c.key, c.spans, t.durations_of(c).to_vec());
        if let Some((x, y)) = t
            .cells
            .iter()
            .zip(&u.cells)
            .find(|(x, y)| cell(t, x) != cell(u, y))
        {
            out.push(format!(
                "{:?} {} s: {:?} against {:?}",
                t.family,
                t.seconds,
                cell(t, x),
                cell(u, y)
            ));
        }
    }
    out
}

#[test]
fn a_merge_adds_up_its_inputs_cells_to_those_of_the_spans_it_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = TestClock::new();
    let mut opts = small_tree(dir.path(), &clock);
    opts.compaction.partition = Duration::from_secs(3600);
    opts.compaction.l0_trigger_files = 4;
    opts.compaction.size_ratio = 2;
    opts.compaction.level_base_bytes = 1 << 30;
    opts.memtable.flush_bytes = 1 << 30;
    opts.retention = Some(Duration::from_secs(6 * 3600));
    let engine = Engine::open(opts).expect("open");
    // The first nanosecond of the hour after T0.
    let edge = (T0 / HOUR + 1) * HOUR;
    // An attribute with more values than a file counts, in the hour before
    // the edge: its file leaves it out, and so do the sums (of both hours:
    // the next hour's holds no value of it). A few of its spans sent again
    // count it in their file; as repeats they are taken out of the cells
    // of the other attributes.
    let methods: Vec<Span> = (0..1100u64)
        .map(|i| {
            with_method(
                u128::from(i) << 64 | 9,
                1_000_000 + i,
                edge - 1200 * SEC + i * SEC,
                &format!("M{i}"),
            )
        })
        .collect();
    for sent in [&methods[..], &methods[..50]] {
        engine.write_blocking(sent.to_vec()).expect("write");
        engine.flush().expect("flush");
    }
    let mut id = 0;
    for round in 0..4u64 {
        let mut batch = Vec::new();
        for t in 0..60u64 {
            let trace = u128::from(round * 1000 + t + 1) << 64 | 7;
            for _ in 0..4 {
                id += 1;
                // Within 40 minutes of the edge, on whole seconds and not,
                // and on the edge itself; a few spans an hour older than
                // retention will be when the merges run.
                let start = match id % 13 {
                    0 => edge,
                    1 => edge - SEC,
                    2 => edge - 5 * HOUR + id * 37 % 3600 * SEC,
                    n => edge - 40 * 60 * SEC + (id * 7 + n) % 4800 * SEC + id % 3 * (SEC / 3),
                };
                batch.push(span(trace, id, start));
            }
        }
        // Every other batch sent twice, a flush apart: exact repeats.
        for copy in 0..1 + round % 2 {
            let half = if copy == 0 {
                &batch[..]
            } else {
                &batch[..batch.len() / 2]
            };
            engine.write_blocking(half.to_vec()).expect("write");
            engine.flush().expect("flush");
        }
        engine
            .write_blocking(vec![span(1, 900_000 + round, edge)])
            .expect("write");
        engine.flush().expect("flush");
        if round == 1 {
            // The old spans now end before retention's cut.
            clock.advance(2 * HOUR);
        }
        engine.compact().expect("compact");
    }
    let stats = engine.stats();
    // Every merge, of level 0 and of runs, added up its inputs' cells.
    assert_eq!(
        stats.compaction_cells_summed, stats.compactions,
        "{stats:?}"
    );
    assert!(stats.compactions >= 4, "{stats:?}");
    assert!(stats.compaction_duplicates > 0, "{stats:?}");
    assert!(stats.expired_spans_dropped > 0, "{stats:?}");

    // Each run's cells, against counting its files' spans.
    let files = engine.snapshot().tables();
    let mut cells_of = BTreeMap::new();
    for f in &files {
        let path = layout::sidecar_path(f.path());
        let bytes = std::fs::read(&path).expect("sidecar");
        cells_of.insert(f.id, decode(&path, &bytes).expect("cells").expect("cells"));
    }
    let (mut summed_runs, mut edges, mut left_out, mut deep) = (0, 0, 0, 0);
    for (holder, cells) in &cells_of {
        let members = match &cells.counts {
            Counts::Own => vec![*holder],
            Counts::Run { members, .. } => members.clone(),
            Counts::InRun { .. } => continue,
        };
        assert!(
            cells.named_in_run == (members.len() > 1),
            "{:?}",
            cells.counts
        );
        summed_runs += usize::from(cells.named_in_run);
        let level = files.iter().find(|f| f.id == *holder).expect("live").level;
        deep += usize::from(level >= 2);
        let mut counted = CellsBuilder::default();
        for m in &members {
            let f = files.iter().find(|f| f.id == *m).expect("a live member");
            for s in f.table().iter() {
                let s = s.expect("span");
                edges += usize::from(s.start_unix_nano == edge);
                counted.add(&s);
            }
        }
        let mut counted = counted.finish().expect("cells");
        // An attribute some input left out is left out of the sums; where
        // the run's spans carry none of it, counting them counts it.
        let missing: Vec<Box<[u8]>> = counted
            .counted
            .iter()
            .filter(|a| !cells.counted.contains(a))
            .cloned()
            .collect();
        let name = |attr: &[u8]| [&attr[..1], &attr[3..3 + attr[2] as usize]].concat();
        assert!(
            counted
                .attr
                .iter()
                .all(|k| !missing.contains(&name(k.attr.as_deref().expect("attr")).into())),
            "the sums left out an attribute the run's spans carry"
        );
        counted.counted.retain(|a| cells.counted.contains(a));
        left_out += missing.len();
        let mut cells = cells.clone();
        for c in [&mut counted, &mut cells] {
            c.tables.sort_by_key(|t| (t.family as u8, t.seconds));
        }
        let cells = &cells;
        assert_eq!(
            differences(cells, &counted),
            Vec::<String>::new(),
            "run of {members:?}"
        );
        assert_eq!(cells.tables, counted.tables, "run of {members:?}");
    }
    assert!(
        summed_runs >= 2,
        "{summed_runs} runs with all their cells summed"
    );
    assert!(edges > 0, "no span on the hour's edge");
    assert!(left_out > 0, "no attribute left out of the sums");
    assert!(deep > 0, "no run merged from runs");
}
