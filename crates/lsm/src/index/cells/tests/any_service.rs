//! The family of keys without the service ([`Family::AnyService`]): kept
//! where its seconds are dense or few, left out where light, and a merge's
//! sums of inputs without it.

use std::sync::Arc;

use super::*;

/// `names` span names in each of `services` services, `spans` spans of each
/// (name, service) a second for `seconds` seconds, none a root.
fn traffic(services: u64, names: u64, spans: u64, seconds: u64) -> FileCells {
    let mut b = CellsBuilder::new(Arc::new(CellAttributes::none()));
    for second in 1..=seconds {
        for service in 0..services {
            for name in 0..names {
                for _ in 0..spans {
                    // 16, 32 and 64 ns by service: buckets 4, 5 and 6.
                    let dur = 1 << (service % 3 + 4);
                    let service = format!("s{service}");
                    let name = format!("op{name}");
                    b.add(&span(Some(&service), &name, 0, false, second * NANOS, dur));
                }
            }
        }
    }
    b.finish().expect("cells")
}

/// Forty services sharing their names: a name's cells without the service
/// count forty spans each, where the named seconds count one. At one span a name and second
/// over all services, the family is left out (a query reads the named
/// cells); few cells keep it whatever they count.
#[test]
fn the_family_is_kept_where_its_seconds_are_dense_or_few() {
    let dense = traffic(40, 30, 1, 10);
    let named = dense.table(Family::Named, 1).expect("named seconds");
    assert!(named.cells.len() > 4096 && named.cells.iter().all(|c| c.spans == 1));
    let any = dense
        .table(Family::AnyService, 1)
        .expect("any-service seconds");
    assert_eq!(any.cells.len(), 300);
    assert!(any.has_durations && !any.roots_only);
    assert!(any.cells.iter().all(|c| c.spans == 40));
    let first = &any.cells[0];
    assert_eq!(any.durations_of(first), [(4, 14), (5, 13), (6, 13)]);
    assert_eq!(dense.any_service.len(), 30);
    let path = std::path::Path::new("x.idx");
    assert_eq!(decode(path, &encode(&dense)).expect("decodes"), Some(dense));

    let light = traffic(1, 500, 1, 10);
    assert!(!light.has(Family::AnyService) && light.any_service.is_empty());
    let decoded = decode(path, &encode(&light))
        .expect("decodes")
        .expect("cells");
    assert!(!decoded.has(Family::AnyService));
    assert!(decoded.has(Family::Named) && decoded.has(Family::Unnamed));

    let few = traffic(1, 40, 1, 10);
    assert!(few.has(Family::AnyService));
}

/// A merge whose inputs' cells are summed, one input without any-service
/// cells (light, or written before them): the sums leave the family out
/// and keep the others, rather than counting the merge's spans.
#[test]
fn sums_of_an_input_without_the_family_leave_it_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spans = varied_spans(200);
    let first = counted(&spans[..100]);
    let second = counted(&spans[100..]);
    let mut without = second.clone();
    without.any_service.clear();
    without.tables.retain(|t| t.family != Family::AnyService);
    let cells = run::summed_pair(dir.path(), [&first, &without]);
    assert!(!cells.has(Family::AnyService) && cells.any_service.is_empty());
    let whole = counted(&spans);
    for family in [Family::Named, Family::Unnamed] {
        for seconds in BUCKET_SECONDS {
            assert_eq!(
                resolved(&cells, family, seconds),
                resolved(&whole, family, seconds),
                "{family:?} {seconds} s"
            );
        }
    }
    // With both inputs' the sums have it, as counted.
    let cells = run::summed_pair(dir.path(), [&first, &second]);
    for seconds in BUCKET_SECONDS {
        assert_eq!(
            resolved(&cells, Family::AnyService, seconds),
            resolved(&whole, Family::AnyService, seconds),
            "{seconds} s"
        );
    }
}

/// Whose spans a source's named cells count, against its other families':
/// the same in memory, in a file of its own spans and in a run's sums that
/// hold the named cells too; not in sums that do not (the holder's named
/// cells count its own spans alone).
#[test]
fn named_cells_count_what_the_other_families_count_unless_a_run_holds_them_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let own = counted(&varied_spans(50));
    let run = Counts::Run {
        run: 3,
        members: vec![3, 4],
    };
    let cases = [
        (Counts::Own, false, true),
        (run.clone(), false, false),
        (run, true, true),
    ];
    for (i, (counts, named_in_run, same)) in cases.into_iter().enumerate() {
        let cells = FileCells {
            counts: counts.clone(),
            named_in_run,
            ..own.clone()
        };
        let table = dir.path().join(format!("{i}.sst"));
        std::fs::write(crate::index::sidecar_path(&table), encode(&cells)).expect("write");
        let file = CellsFile::open(&table).expect("opens").expect("cells");
        let view = CellsView::File(&file);
        let said = format!("{counts:?}, named in run: {named_in_run}");
        assert_eq!(view.named_counts_the_same().expect("reads"), same, "{said}");
    }
    assert!(CellsView::Memory(&own)
        .named_counts_the_same()
        .expect("reads"));
}
