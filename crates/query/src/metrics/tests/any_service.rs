//! A span name asked of every service: read from the cells of every
//! service added up, or from the named cells of files written before them.

use tracedb_lsm::index::cells::{cells_len, encode, Family};

use super::*;

fn request(text: &str, from: u64, step: u64) -> MetricsRequest {
    MetricsRequest {
        query: Arc::new(Compiled::new(parse(text).expect("parses")).expect("compiles")),
        grid: Grid::range(from, from + 3600 * SEC, step),
        max_series: 1000,
        max_exemplars: 0,
    }
}

/// A query of names that reads no service reads the family without the
/// service; one that reads a service, the whole key.
#[test]
fn a_name_asked_of_every_service_reads_the_cells_without_the_service() {
    let t = 1_700_000_000 * SEC;
    for (text, family) in [
        ("{ name = \"a\" } | rate()", Family::AnyService),
        (
            "{ true && name = \"a\" } | quantile_over_time(duration, .9)",
            Family::AnyService,
        ),
        (
            "{ nestedSetParent < 0 } | histogram_over_time(duration) by(name)",
            Family::AnyService,
        ),
        (
            "{ name = \"a\" } | rate() by(resource.service.name)",
            Family::Named,
        ),
        (
            "{ resource.service.name = \"s\" && name = \"a\" } | rate()",
            Family::Named,
        ),
        ("{ kind = server } | rate()", Family::Unnamed),
    ] {
        let req = request(text, t, 60 * SEC);
        assert_eq!(cells::family_of(&req), Some(family), "{text}");
    }
}

/// Sidecars without the family without the service (written before it,
/// or light; rewritten here without it) answer a name's queries from their
/// named cells, as every span does: those of some files beside the family
/// of the others, then those of every file; so do the sidecars as written.
#[test]
fn cells_without_the_any_service_family_answer_from_the_named_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng::new(7);
    let base = hours_ago(3);
    let batches = random_batches(&mut rng, 300, 5, 10, |t| base + (t * 13 % 3600) * SEC);
    {
        let engine = test_engine(dir.path(), Some(24 << 10));
        for (b, batch) in batches.into_iter().enumerate() {
            engine.write_blocking(batch).expect("write");
            engine.flush().expect("flush");
            if b == 2 {
                assert!(engine.compact().expect("compact") > 0);
            }
        }
    }
    let queries = [
        format!("{{ name = {:?} }} | rate()", NAMES[0]),
        format!(
            "{{ nestedSetParent < 0 && name = {:?} }} | count_over_time()",
            NAMES[1]
        ),
        "{ status = error } | histogram_over_time(duration) by(name)".to_owned(),
        "{ kind = server } | quantile_over_time(duration, .5) by(name, kind)".to_owned(),
    ];
    let answers = |engine: &Engine| -> Vec<Vec<Series>> {
        queries
            .iter()
            .map(|text| {
                let req = request(text, base, 60 * SEC);
                let from_cells = cells::answer(engine, &req, &Cancel::new())
                    .expect("runs")
                    .unwrap_or_else(|why| panic!("{text}: {why:?}"));
                let from_spans = scan::scan(engine, &req, &Cancel::new(), None).expect("runs");
                let (a, b) = (finished(from_cells), finished(from_spans));
                assert_eq!(a, b, "{text}");
                a
            })
            .collect()
    };
    let engine = test_engine(dir.path(), Some(24 << 10));
    let written = answers(&engine);
    assert!(written.iter().all(|s| !s.is_empty()), "{written:?}");
    drop(engine);

    // The family taken out of the sidecars whose cells `which` picks (by
    // whose spans they count); how many.
    let strip = |which: &dyn Fn(&Counts) -> bool| {
        let mut stripped = 0;
        for entry in std::fs::read_dir(dir.path().join("tables")).expect("tables") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|x| x != "idx") {
                continue;
            }
            let bytes = std::fs::read(&path).expect("read");
            let Some(mut cells) = decode(&path, &bytes).expect("cells") else {
                continue;
            };
            if !cells.has(Family::AnyService) || !which(&cells.counts) {
                continue;
            }
            cells.any_service.clear();
            cells.tables.retain(|t| t.family != Family::AnyService);
            let blocks = bytes.len() - cells_len(&path, &bytes).expect("cells");
            let mut old = bytes[..blocks].to_vec();
            old.extend(encode(&cells));
            std::fs::write(&path, old).expect("write");
            stripped += 1;
        }
        stripped
    };
    // Files counting their own spans first: each is read from its named
    // cells, the runs' sums from theirs.
    let own = strip(&|c| *c == Counts::Own);
    assert!(own >= 2, "{own} sidecars of their own spans");
    let engine = test_engine(dir.path(), Some(24 << 10));
    assert_eq!(answers(&engine), written);
    drop(engine);
    let runs = strip(&|_| true);
    assert!(runs >= 1, "{runs} runs' sums");
    let engine = test_engine(dir.path(), Some(24 << 10));
    assert_eq!(answers(&engine), written);
}
