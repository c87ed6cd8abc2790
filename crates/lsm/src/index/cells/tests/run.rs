//! A sorted run's cells added up across its files ([`RunCells`]).

use std::path::Path;

use super::*;

/// The unnamed cells a run's last file holds are those of all the run's
/// spans; each file keeps its own named cells; the others say where theirs
/// are; and all of it reads back as written.
#[test]
fn a_runs_unnamed_cells_are_the_sums_of_its_files() {
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
    let all = counted(&spans);
    for len in BUCKET_SECONDS {
        assert_eq!(
            resolved(&written[2], Family::Unnamed, len),
            resolved(&all, Family::Unnamed, len),
            "the run's unnamed cells of {len} s"
        );
    }
    let path = Path::new("x.idx");
    for cells in written {
        assert_eq!(decode(path, &encode(&cells)).expect("decodes"), Some(cells));
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
