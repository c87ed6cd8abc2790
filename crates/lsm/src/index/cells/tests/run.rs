//! A sorted run's cells added up across its files ([`RunCells`]).

use std::{path::Path, sync::Arc};

use super::*;

/// The unnamed and any-service cells a run's last file holds are those of
/// all the run's spans; each file keeps its own named cells; the others
/// say where theirs are; and all of it reads back as written.
#[test]
fn a_runs_unnamed_and_any_service_cells_are_the_sums_of_its_files() {
    let spans = varied_spans(3000);
    let parts: Vec<&[Span]> = spans.chunks(1100).collect();
    let mut run = RunCells::default();
    let ids = [40u64, 41, 47];
    let mut written = Vec::new();
    for (i, (part, id)) in parts.iter().zip(ids).enumerate() {
        let own = counted(part);
        let cells = run
            .file(id, Some(own.clone()), i == parts.len() - 1)
            .expect("cells to write");
        for len in BUCKET_SECONDS {
            assert_eq!(
                resolved(&cells, Family::Named, len),
                resolved(&own, Family::Named, len),
                "file {id}'s named cells of {len} s"
            );
        }
        written.push(cells);
    }
    assert_eq!(written[0].counts, Counts::InRun { run: 40 });
    assert_eq!(written[1].counts, Counts::InRun { run: 40 });
    assert!(written[0].unnamed.is_empty() && written[0].table(Family::Unnamed, 1).is_none());
    assert_eq!(
        written[2].counts,
        Counts::Run {
            run: 40,
            members: ids.to_vec()
        }
    );
    // In order, as a file's keys are, so its tables' parts are ranges of them.
    assert!(written[2].unnamed.is_sorted());
    assert!(written[0].any_service.is_empty() && !written[0].has(Family::AnyService));
    let all = counted(&spans);
    let holder = written[2].clone().unpacked();
    for family in [Family::Unnamed, Family::AnyService] {
        for len in BUCKET_SECONDS {
            assert_eq!(
                resolved(&holder, family, len),
                resolved(&all, family, len),
                "the run's {family:?} cells of {len} s"
            );
        }
    }
    let path = Path::new("x.idx");
    for cells in written {
        assert_eq!(
            decode(path, &encode(&cells)).expect("decodes"),
            Some(cells.unpacked())
        );
    }
}

/// Past its bound, the sums are written with the file that passed it and
/// start again; a file without cells is left out of them (counted from its
/// spans); a run of one file writes that file's own cells.
#[test]
fn a_run_writes_its_sums_when_they_pass_the_bound() {
    let spans = varied_spans(4000);
    let parts: Vec<&[Span]> = spans.chunks(1000).collect();
    let one = counted(parts[0]);
    // The counts of each file's cells, the second file having none.
    let counts = |bound: usize| {
        let mut run = RunCells::with_bound(bound);
        let mut counts = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let own = (i != 1).then(|| counted(part));
            counts.push(run.file(10 + i as u64, own, i == 3).map(|c| c.counts));
        }
        counts
    };
    assert_eq!(
        counts(1),
        vec![
            Some(Counts::Own),
            None,
            Some(Counts::Own),
            Some(Counts::Own)
        ]
    );
    assert_eq!(
        counts(usize::MAX),
        vec![
            Some(Counts::InRun { run: 10 }),
            None,
            Some(Counts::InRun { run: 10 }),
            Some(Counts::Run {
                run: 10,
                members: vec![10, 12, 13]
            })
        ]
    );
    let alone = RunCells::default()
        .file(5, Some(one.clone()), true)
        .expect("cells");
    for (family, len) in [
        (Family::Named, 1),
        (Family::Unnamed, 1),
        (Family::Unnamed, 3600),
    ] {
        assert_eq!(resolved(&alone, family, len), resolved(&one, family, len));
    }
}

/// A run's cells and a file's mark that its run holds them are checked as
/// the cells are: a change is refused or reads as what was written.
#[test]
fn damaged_run_cells_are_refused_and_never_panic() {
    let spans = varied_spans(300);
    let mut run = RunCells::default();
    let member = run
        .file(3, Some(counted(&spans[..150])), false)
        .expect("member");
    let holder = run
        .file(9, Some(counted(&spans[150..])), true)
        .expect("holder");
    for cells in [member, holder] {
        refusals(&cells, 11, 5_000);
    }
}

/// A run whose named cells are summed with the others (a merge that added
/// up its inputs' cells): the file holding them reads back as written and
/// says so; its other files hold a run section alone; both are refused,
/// or read as written, when damaged.
#[test]
fn a_run_holding_its_named_cells_reads_back_and_its_other_files_hold_none() {
    let spans = varied_spans(300);
    let holder = FileCells {
        counts: Counts::Run {
            run: 3,
            members: vec![3, 9],
        },
        named_in_run: true,
        ..counted(&spans)
    };
    let member = FileCells {
        counts: Counts::InRun { run: 3 },
        named_in_run: true,
        ..FileCells::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("5.sst");
    let path = crate::index::sidecar_path(&table);
    for cells in [&holder, &member] {
        let bytes = encode(cells);
        assert_eq!(
            decode(&path, &bytes).expect("decodes").as_ref(),
            Some(cells)
        );
        std::fs::write(&path, &bytes).expect("write");
        let file = CellsFile::open(&table).expect("opens").expect("cells");
        assert!(file.named_in_run());
        assert_eq!(file.counts().expect("counts"), cells.counts);
        refusals(cells, 13, 2_000);
    }
}

/// A merge's sums, for its partition 7, of two inputs: files 1 and 2 in
/// `dir`, whose sidecars hold `cells`.
pub(super) fn summed_pair(dir: &Path, cells: [&FileCells; 2]) -> FileCells {
    let tables: Vec<_> = (1..=2).map(|id| dir.join(format!("{id}.sst"))).collect();
    for (table, c) in tables.iter().zip(cells) {
        std::fs::write(crate::index::sidecar_path(table), encode(c)).expect("write");
    }
    let inputs: Vec<Input<'_>> = (1..)
        .zip(&tables)
        .zip(cells)
        .map(|((id, t), c)| (id, t.as_path(), c.spans()))
        .collect();
    let mut sums =
        InputSums::of(&inputs, Some(7), 3600 * NANOS, Arc::default(), &mut |_| ()).expect("sums");
    let spans = cells.iter().map(|c| c.spans()).sum();
    sums.take(7, vec![1, 2], spans).expect("cells")
}

/// A merge's sums keep every named second's durations, however light, as
/// a file's own do; of an input written before, whose light named seconds
/// kept their roots' and errors' only, those only.
#[test]
fn a_merges_named_seconds_keep_the_durations_its_inputs_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A span a (second, key), light, in more than a few cells; every
    // third key a root's, every fifth an error's.
    let half = |h: u64| -> FileCells {
        let spans: Vec<Span> = (0..3000u64)
            .map(|i| {
                let name = format!("op{}", i % 15);
                let (status, root) = (if i % 5 == 0 { 2 } else { 0 }, i % 3 == 0);
                let start = (2 * (i / 15) + h + 1) * NANOS;
                span(Some("a"), &name, status, root, start, 1 << (i % 9 + 3))
            })
            .collect();
        counted(&spans)
    };
    let halves = [half(0), half(1)];
    let sums = summed_pair(dir.path(), [&halves[0], &halves[1]]);
    let seconds = sums.table(Family::Named, 1).expect("named seconds");
    assert!(seconds.cells.len() > 4096 && seconds.cells.iter().all(|c| c.spans == 1));
    assert!(seconds.has_durations && !seconds.roots_only);
    assert!(seconds
        .cells
        .iter()
        .all(|c| seconds.durations_of(c).len() == 1));
    // The second input as written before.
    let before = roots_timed_named(&halves[1]);
    let sums = summed_pair(dir.path(), [&halves[0], &before]);
    let seconds = sums.table(Family::Named, 1).expect("named seconds");
    assert!(seconds.has_durations && seconds.roots_only);
    for c in &seconds.cells {
        let key = &sums.named[c.key as usize];
        assert_eq!(seconds.durations_of(c).is_empty(), !key.timed_when_light());
    }
}

/// A merge's sums of inputs whose spans carry no attribute counted have
/// the attribute tables a builder writes for them, of no cells: a query
/// reads them as cells, not as tables it cannot read.
#[test]
fn sums_of_inputs_without_attribute_cells_have_empty_attribute_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = varied_spans(200);
    let halves = [counted(&spans[..100]), counted(&spans[100..])];
    let cells = summed_pair(dir.path(), [&halves[0], &halves[1]]);
    let whole = counted(&spans);
    assert!(!whole.counted.is_empty() && whole.attr.is_empty());
    assert_eq!(cells.counted, whole.counted);
    for seconds in BUCKET_SECONDS {
        let t = cells
            .table(Family::Attr, seconds)
            .expect("an attribute table");
        assert!(t.cells.is_empty(), "{seconds} s");
    }
}

/// A run's attribute cells are written with the file that ends its sums:
/// the sums of its files' (whose own sidecars then hold none), of the
/// attributes every file counted, their seconds with durations where the
/// sums count several spans a cell though no file's own would; packed while
/// summed, they read back as written, in several time frames.
#[test]
fn a_runs_attribute_cells_are_the_sums_of_what_every_file_counted() {
    let list = Arc::new(CellAttributes::parse(["span.route", "span.code"]).expect("list"));
    let route_only = Arc::new(CellAttributes::parse(["span.route"]).expect("list"));
    // Four files, each with one span a second of each route (no root, whose
    // durations a light table would keep); the third with a code too
    // many, so that code is left out of the run's.
    let file = |f: u64| -> Vec<Span> {
        let mut spans: Vec<Span> = (1..=300u64)
            .flat_map(|second| {
                ["/a", "/b"].into_iter().map(move |route| {
                    with_attributes(
                        span(
                            Some("a"),
                            "GET",
                            0,
                            false,
                            second * NANOS,
                            1 << (second % 5 + 3),
                        ),
                        &[kv("route", &string(route)), kv("code", &int(200 + f))],
                        &[],
                    )
                })
            })
            .collect();
        if f == 2 {
            spans.extend((0..=MAX_VALUES as u64).map(|i| {
                with_attributes(
                    span(Some("a"), "GET", 0, false, NANOS, 7),
                    &[kv("route", &string("/a")), kv("code", &int(1000 + i))],
                    &[],
                )
            }));
        }
        spans
    };
    let files: Vec<Vec<Span>> = (0..4).map(file).collect();
    let unthinned = |spans: &[Span]| {
        let mut b = CellsBuilder::new(list.clone());
        b.add_all(spans);
        b.finish_counted(|_| ()).expect("cells")
    };
    let mut run = RunCells::default();
    let mut written = Vec::new();
    for (i, spans) in files.iter().enumerate() {
        let own = unthinned(spans);
        let mut alone = own.clone();
        alone.thin();
        assert!(
            !alone.table(Family::Attr, 1).expect("seconds").has_durations,
            "a file alone counts a span a cell"
        );
        written.push(run.file(i as u64 + 1, Some(own), i == 3).expect("cells"));
    }
    for member in &written[..3] {
        assert_eq!(member.counts, Counts::InRun { run: 1 });
        assert!(member.attr.is_empty() && member.counted.is_empty());
        assert!(member.table(Family::Attr, 60).is_none() && member.packed.is_empty());
    }
    let holder = &written[3];
    assert_eq!(
        holder.counted,
        vec![[&[SPAN_SCOPE][..], b"route"].concat().into_boxed_slice()]
    );
    assert!(holder.attr.is_sorted());
    // The sums are those of all the spans, counted with the route alone.
    let all: Vec<Span> = files.concat();
    let mut b = CellsBuilder::new(route_only);
    b.add_all(&all);
    let all = b.finish().expect("cells");
    let unpacked = holder.clone().unpacked();
    for len in BUCKET_SECONDS {
        let (run, all) = (
            resolved(&unpacked, Family::Attr, len),
            resolved(&all, Family::Attr, len),
        );
        assert_eq!(run.len(), all.len(), "the run's attribute cells of {len} s");
        for (a, b) in run.iter().zip(&all) {
            assert_eq!(a, b, "the run's attribute cells of {len} s");
        }
    }
    assert!(
        unpacked
            .table(Family::Attr, 1)
            .expect("seconds")
            .has_durations
    );
    let path = Path::new("x.idx");
    assert_eq!(
        decode(path, &encode(holder)).expect("decodes"),
        Some(unpacked.clone())
    );
    let framed = encode_framed(holder, 100, LISTED_BELOW);
    assert_eq!(decode(path, &framed).expect("decodes"), Some(unpacked));
    for member in &written[..3] {
        assert_eq!(
            decode(path, &encode(member)).expect("decodes").as_ref(),
            Some(member)
        );
    }
    assert!(refusals(holder, 13, 2_000) > 1_800);

    // Sums of a span a cell keep counts only in their seconds, and their
    // minutes and hours keep the durations.
    let sparse = |f: u64| -> Vec<Span> {
        (0..200u64)
            .map(|i| {
                let second = 2 * i + f + 1;
                with_attributes(
                    span(
                        Some("a"),
                        "GET",
                        // A child in four is in error.
                        if i % 4 == 1 { 2 } else { 0 },
                        i % 2 == 0,
                        second * NANOS,
                        1 << (i % 7 + 3),
                    ),
                    &[kv("route", &string("/a"))],
                    &[],
                )
            })
            .collect()
    };
    let mut run = RunCells::default();
    run.file(1, Some(unthinned(&sparse(0))), false);
    let holder = run
        .file(2, Some(unthinned(&sparse(1))), true)
        .expect("cells")
        .unpacked();
    let mut b = CellsBuilder::new(list.clone());
    b.add_all(&[sparse(0), sparse(1)].concat());
    let all = b.finish().expect("cells");
    // Light sums keep their root and error spans' durations only, as a
    // file's own.
    let seconds = holder.table(Family::Attr, 1).expect("seconds");
    assert!(seconds.has_durations && seconds.roots_only);
    let (mut roots, mut errors) = (0, 0);
    for c in &seconds.cells {
        let key = &holder.attr[c.key as usize];
        (roots, errors) = (
            roots + usize::from(key.is_root()),
            errors + usize::from(key.is_error()),
        );
        assert_eq!(seconds.durations_of(c).is_empty(), !key.timed_when_light());
    }
    assert!(roots > 0 && errors > 0 && roots + errors < seconds.cells.len());
    for len in BUCKET_SECONDS {
        assert_eq!(
            resolved(&holder, Family::Attr, len),
            resolved(&all, Family::Attr, len),
            "the sparse run's attribute cells of {len} s"
        );
    }
    // A light run of error spans only, none a root, keeps every duration.
    let errors_only = |f: u64| -> Vec<Span> {
        sparse(f)
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let start = s.start_unix_nano;
                let at = span(Some("a"), "GET", 2, false, start, 1 << (i % 7 + 3));
                with_attributes(at, &[kv("route", &string("/a"))], &[])
            })
            .collect()
    };
    let mut run = RunCells::default();
    run.file(1, Some(unthinned(&errors_only(0))), false);
    let holder = run
        .file(2, Some(unthinned(&errors_only(1))), true)
        .expect("cells")
        .unpacked();
    let seconds = holder.table(Family::Attr, 1).expect("seconds");
    assert!(seconds.has_durations && !seconds.roots_only);
    assert!(seconds
        .cells
        .iter()
        .all(|c| !seconds.durations_of(c).is_empty()));
}

/// Attribute cells written before a run's were summed count their own
/// file's spans, and say so: a file of a run that holds them reads back
/// with them, and its sidecar tells a query to read them alone.
#[test]
fn attribute_cells_of_a_file_of_a_run_written_per_file_say_so() {
    let list = Arc::new(CellAttributes::parse(["span.route"]).expect("list"));
    let mut b = CellsBuilder::new(list);
    b.add_all(&[with_attributes(
        span(Some("a"), "GET", 0, true, NANOS, 9),
        &[kv("route", &string("/a"))],
        &[],
    )]);
    let own = b.finish().expect("cells");
    let mut member = FileCells {
        named: own.named.clone(),
        attr: own.attr.clone(),
        counted: own.counted.clone(),
        tables: own
            .tables
            .iter()
            .filter(|t| !matches!(t.family, Family::Unnamed | Family::AnyService))
            .cloned()
            .collect(),
        counts: Counts::InRun { run: 4 },
        attr_per_file: true,
        ..FileCells::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("5.sst");
    let path = crate::index::sidecar_path(&table);
    for (per_file, counts) in [(true, Counts::InRun { run: 4 }), (false, Counts::Own)] {
        member.attr_per_file = per_file;
        member.counts = counts.clone();
        if counts == Counts::Own {
            member.unnamed = own.unnamed.clone();
            member.any_service = own.any_service.clone();
            member.tables = own.tables.clone();
        }
        let bytes = encode(&member);
        assert_eq!(
            decode(&path, &bytes).expect("decodes").as_ref(),
            Some(&member)
        );
        std::fs::write(&path, &bytes).expect("write");
        let file = CellsFile::open(&table).expect("opens").expect("cells");
        assert_eq!(file.attr_per_file(), per_file);
        assert_eq!(file.counts().expect("counts"), counts);
    }
}

/// A packed table holds its cells in chunks of whole buckets, and gives
/// them back as they were.
#[test]
fn a_packed_table_gives_its_cells_back_in_chunks_of_whole_buckets() {
    let mut t = CellTable {
        family: Family::Attr,
        seconds: 1,
        has_durations: true,
        roots_only: false,
        cells: Vec::new(),
        durations: Vec::new(),
    };
    for i in 0..200_000u64 {
        let from = t.durations.len() as u32;
        t.durations.extend((0..i % 3).map(|e| (e as u8 + 1, i + e)));
        t.cells.push(Cell {
            bucket: 1_700_000_000 + i / 7,
            key: (i % 7) as u32,
            spans: i + 1,
            durations: (from, t.durations.len() as u32),
        });
    }
    let packed = Packed::of(&t);
    assert_eq!(packed.cells(), t.cells.len());
    assert_eq!(packed.unpacked(), t);
    let chunks: Vec<CellTable> = packed.chunks().collect();
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    for pair in chunks.windows(2) {
        let (last, first) = (pair[0].cells.last().expect("cells"), pair[1].cells[0]);
        assert!(last.bucket < first.bucket, "a bucket split between chunks");
    }
    // Unpacked, a cell takes 32 bytes, and each duration bucket 16.
    assert!(
        packed.bytes() < t.cells.len() * 16,
        "{} bytes",
        packed.bytes()
    );
}
