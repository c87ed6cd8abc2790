//! The metrics answered from cells against the same queries answered from
//! every span, on random traces stored in files (flushed, and merged into
//! runs whose unnamed cells one file holds), split across files and
//! buffered, and random queries of the fields cells hold.

use std::{sync::Arc, time::Duration};

use tracedb_lsm::{
    index::cells::{decode, CellAttributes, Counts},
    Engine, EngineOptions, MemTableOptions, Span, TraceId,
};
use tracedb_traceql::{
    arbitrary::{self, Rng, NAMES, SERVICES},
    metrics::{Grid, Series},
    parse, Compiled,
};

use super::{cells, scan, MetricsRequest};
use crate::cancel::Cancel;
use crate::search::tests::spans;

const SEC: u64 = 1_000_000_000;

mod any_service;
mod retention;

/// An engine in `dir` whose buffers are flushed when the test says only
/// (a flush by size in the background could empty them between a listing
/// of the files and a query), its merges run by the test, level 0 merged
/// at three files; `file_bytes` the merges' output size, if not the default.
fn test_engine(dir: &std::path::Path, file_bytes: Option<u64>) -> Engine {
    let mut opts = EngineOptions::new(dir);
    opts.memtable = MemTableOptions {
        shards: 2,
        flush_bytes: 1 << 30,
        max_age: Duration::from_secs(3600),
    };
    opts.compaction_threads = 0;
    opts.compaction.l0_trigger_files = 3;
    // The random traces' attributes but `span.f`: a query of it reads the
    // spans. `span.arr` holds arrays, so no file counts it.
    opts.table.cell_attributes = Arc::new(
        CellAttributes::parse(["span.a", "span.b", "span.c", "span.arr", "resource.region"])
            .expect("attributes"),
    );
    if let Some(bytes) = file_bytes {
        opts.compaction.target_file_bytes = bytes;
    }
    Engine::open(opts).expect("open")
}

/// The whole second `hours` hours ago (Unix ns), so that grids' edges fall
/// on cell boundaries.
fn hours_ago(hours: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    (now - hours * 3600 * SEC) / SEC * SEC
}

/// `traces` random traces (trace `t` starting at `start(t)`) in `batches`
/// batches, `split` in a hundred of them cut in two across consecutive
/// batches. Their IDs are spread over the ID space, as random IDs are, so
/// that each of a scan's ranges of trace IDs holds some.
fn random_batches(
    rng: &mut Rng,
    traces: u64,
    batches: usize,
    split: usize,
    start: impl Fn(u64) -> u64,
) -> Vec<Vec<Span>> {
    let mut out: Vec<Vec<Span>> = vec![Vec::new(); batches];
    for t in 1..=traces {
        let id = TraceId(
            u128::from(t)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
                .to_be_bytes(),
        );
        let mut trace = spans(id, arbitrary::trace(rng, id.0, start(t)));
        let batch = rng.below(batches);
        if trace.len() > 1 && rng.chance(split) {
            let rest = trace.split_off(trace.len() / 2);
            out[(batch + 1).min(batches - 1)].extend(rest);
        }
        out[batch].extend(trace);
    }
    out
}

/// A condition on the fields a cell key holds.
fn condition(rng: &mut Rng) -> String {
    let service = || format!("{:?}", SERVICES[0]);
    match rng.below(9) {
        0 => format!("resource.service.name = {:?}", rng.pick::<&str>(SERVICES)),
        1 => format!("resource.service.name != {:?}", rng.pick::<&str>(SERVICES)),
        2 => format!("name = {:?}", rng.pick::<&str>(NAMES)),
        3 => format!("name =~ {:?}", ".*a.*"),
        4 => format!(
            "kind = {}",
            rng.pick(&["server", "client", "internal", "unspecified"])
        ),
        5 => format!(
            "status {} {}",
            rng.pick(&["=", "!="]),
            rng.pick(&["error", "ok", "unset"])
        ),
        6 => "nestedSetParent < 0".to_owned(),
        7 => "resource.service.name != nil".to_owned(),
        _ => format!("true && resource.service.name != {}", service()),
    }
}

/// Attributes of the random traces, and whether files count them (see
/// `test_engine`).
const ATTRIBUTES: [(&str, bool); 7] = [
    ("span.a", true),
    ("span.b", true),
    ("span.c", true),
    ("resource.region", true),
    ("span.f", false),
    ("span.arr", false),
    ("span.region", false),
];

/// A condition on `attr` that only spans carrying it pass (or, now and
/// then, one that others pass too).
fn attribute_of(rng: &mut Rng, attr: &str) -> String {
    let value = match attr {
        "span.a" => rng.below(5).to_string(),
        "span.c" => rng.chance(50).to_string(),
        "span.f" => format!("{}", rng.below(8) as f64 / 2.0),
        _ => format!("{:?}", rng.pick(&["x", "y", "eu", "us", "zz"])),
    };
    match rng.below(10) {
        0 => format!("{attr} != nil"),
        1 => format!("{attr} = nil"),
        2 => format!("({attr} = {value} || {})", condition(rng)),
        3 => format!("{attr} != {value}"),
        4 if !matches!(attr, "span.a" | "span.c" | "span.f") => format!("{attr} =~ \".*y.*\""),
        5 if matches!(attr, "span.a" | "span.f") => format!("{attr} >= {value}"),
        _ => format!("{attr} = {value}"),
    }
}

/// A random query, and the attribute it reads (if any).
fn query(rng: &mut Rng) -> (String, Option<(&'static str, bool)>) {
    let mut filter = condition(rng);
    for _ in 0..rng.below(3) {
        let op = if rng.chance(70) { "&&" } else { "||" };
        filter = format!("{filter} {op} {}", condition(rng));
    }
    let attr = rng.chance(50).then(|| *rng.pick(&ATTRIBUTES));
    if let Some((name, _)) = attr {
        filter = format!("{} && ({filter})", attribute_of(rng, name));
    }
    let mut q = if rng.chance(20) {
        format!("{{ {filter} }} || {{ {} }}", condition(rng))
    } else {
        format!("{{ {filter} }}")
    };
    let function = rng.pick(&[
        "rate()",
        "count_over_time()",
        "histogram_over_time(duration)",
        "quantile_over_time(duration, 0.5, 0.9)",
    ]);
    q = format!("{q} | {function}");
    let mut by: Vec<&str> = ["resource.service.name", "name", "kind", "status"]
        .into_iter()
        .filter(|_| rng.chance(25))
        .collect();
    if let Some((name, _)) = attr.filter(|_| rng.chance(40)) {
        by.push(name);
    }
    if !by.is_empty() {
        q = format!("{q} by({})", by.join(", "));
    }
    if rng.chance(10) {
        q = format!("{q} | topk(2)");
    }
    (q, attr)
}

fn finished(answer: super::Answer<tracedb_traceql::metrics::MetricsEval>) -> Vec<Series> {
    assert!(answer.partial.is_empty(), "{:?}", answer.partial);
    answer.value.finish()
}

#[test]
fn metrics_from_cells_answer_as_every_span_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Runs of several files, whose unnamed cells one file of each holds.
    let engine = test_engine(dir.path(), Some(24 << 10));
    let mut rng = Rng::new(43);
    let base = hours_ago(3);
    // Over two hours; some spans start exactly on a second, some just
    // after one.
    let batches = random_batches(&mut rng, 500, 6, 20, |t| {
        base + (t * 15 % 7200) * SEC + (t % 3) * (SEC / 3)
    });
    let sidecars = || {
        let mut sidecars: Vec<_> = std::fs::read_dir(dir.path().join("tables"))
            .expect("tables")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "idx"))
            .collect();
        sidecars.sort();
        sidecars
    };
    // The first three batches merged into runs of level 1 (one per hour),
    // the next two flushed, the last one buffered.
    for (b, batch) in batches.into_iter().enumerate() {
        engine.write_blocking(batch).expect("write");
        if b < 5 {
            engine.flush().expect("flush");
        }
        if b == 2 {
            assert!(engine.compact().expect("compact") > 0);
        }
    }
    let sidecars = sidecars();
    let counts: Vec<Counts> = sidecars
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).expect("read");
            decode(p, &bytes).expect("cells").expect("cells").counts
        })
        .collect();
    let holders = counts
        .iter()
        .filter(|c| matches!(c, Counts::Run { .. }))
        .count();
    assert!(holders >= 2, "{counts:?}");
    // The run of each holder, and how many files each run has.
    let run_of = |c: &Counts| match c {
        Counts::InRun { run } | Counts::Run { run, .. } => Some(*run),
        Counts::Own => None,
    };
    let files_of = |run: u64| counts.iter().filter(|c| run_of(c) == Some(run)).count();
    let runs: Vec<(usize, u64)> = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c, Counts::Run { .. }))
        .filter_map(|(at, c)| run_of(c).map(|run| (at, run)))
        .filter(|&(_, run)| files_of(run) > 1)
        .collect();
    assert!(runs.len() >= 2, "{counts:?}");
    // One run whose sums are lost with their file's sidecar: its files are
    // counted from their spans. Another run, one of whose other files lost
    // its sidecar: its sums still count it (a search rebuilds the sidecar
    // later, with cells of its own, which are then not read).
    let (holder, broken) = runs[0];
    std::fs::remove_file(&sidecars[holder]).expect("remove");
    let (_, whole) = runs[1];
    let member = counts
        .iter()
        .position(|c| *c == Counts::InRun { run: whole })
        .expect("a file whose run holds its cells");
    std::fs::remove_file(&sidecars[member]).expect("remove");
    // The flushed files: one sidecar as written before cells (they are
    // counted from its spans), one whose cells are damaged (counted from its
    // spans too).
    let flushed = &sidecars[sidecars.len() - 2..];
    let bytes = std::fs::read(&flushed[0]).expect("read");
    std::fs::write(&flushed[0], &bytes[..bytes.len() - 1]).expect("write");
    let mut bytes = std::fs::read(&flushed[1]).expect("read");
    let at = bytes.len() - 30;
    bytes[at] ^= 0x10;
    std::fs::write(&flushed[1], &bytes).expect("write");

    let mut held = engine.memory_budget().acquire(0).expect("budget");
    let stats_of = |family, held: &mut tracedb_lsm::Permit| {
        engine
            .cells_in(
                tracedb_lsm::TimeRange::new(base, base + 7300 * SEC),
                family,
                held,
                |_| Ok(0),
            )
            .unwrap_or_else(|_| panic!("cells of the window"))
    };
    let stats = stats_of(tracedb_lsm::index::cells::Family::Unnamed, &mut held);
    // A run's attribute cells are read with its unnamed ones.
    assert_eq!(
        stats_of(tracedb_lsm::index::cells::Family::Attr, &mut held),
        stats
    );
    assert_eq!(stats.files_counted, 2 + files_of(broken), "{stats:?}");
    let in_runs = counts
        .iter()
        .filter(|c| matches!(c, Counts::InRun { run } if *run != broken))
        .count();
    assert_eq!(stats.files_in_runs, in_runs, "{stats:?}");
    assert_eq!(
        stats.files_with_cells + stats.files_in_runs + stats.files_counted,
        sidecars.len(),
        "{stats:?}"
    );
    assert!(stats.buffered_spans > 0, "{stats:?}");
    drop(held);

    let (mut counted, mut from_cells_n, mut by_attribute) = (0, 0, 0);
    for _ in 0..800 {
        let (text, attr) = query(&mut rng);
        let compiled = Arc::new(Compiled::new(parse(&text).expect("parses")).expect("compiles"));
        let step = [1, 5, 10, 56, 60, 120, 150, 600, 3600][rng.below(9)] * SEC;
        let mut from = base + rng.below(4000) as u64 * SEC;
        if rng.chance(30) {
            // On a whole minute: durations by name or attribute need one.
            from = from / (60 * SEC) * 60 * SEC;
        }
        let req = MetricsRequest {
            query: compiled,
            grid: Grid::range(from, from + (step * 200).min(8000 * SEC), step),
            max_series: 1000,
            max_exemplars: 0,
        };
        // A query of an attribute no file counted is read from the spans.
        let uncounted = attr.is_some_and(|(_, counted)| !counted);
        // So may be one of durations at a step of seconds: these files'
        // named and attribute cells (and most runs' sums) count a span or
        // two each, and their seconds keep no durations.
        let timed = text.contains("_over_time(duration");
        let Some(from_cells) = cells::run(&engine, &req, &Cancel::new()).expect("runs") else {
            assert!(
                !cells::answerable(&req) || uncounted || timed,
                "{text}: answerable, yet not answered"
            );
            continue;
        };
        assert!(
            !uncounted,
            "{text}: answered from cells that did not count it"
        );
        from_cells_n += 1;
        by_attribute += usize::from(attr.is_some());
        let from_spans = scan::scan(&engine, &req, &Cancel::new(), None).expect("runs");
        let (a, b) = (finished(from_cells), finished(from_spans));
        counted += usize::from(!b.is_empty());
        assert_eq!(a, b, "{text} step {step}");
    }
    eprintln!("from cells {from_cells_n}, of attributes {by_attribute}, with series {counted}");
    assert!(counted > 200, "only {counted} queries had series");
    assert!(
        from_cells_n > 250,
        "only {from_cells_n} queries answered from cells"
    );
    assert!(
        by_attribute > 25,
        "only {by_attribute} queries of attributes answered from cells"
    );
}

#[test]
fn keys_that_agree_on_what_a_query_reads_are_one_class() {
    use tracedb_lsm::index::cells::{CellKey, Parent};
    let q = |text: &str| MetricsRequest {
        query: Arc::new(Compiled::new(parse(text).expect("parses")).expect("compiles")),
        grid: Grid::range(1_700_000_000 * SEC, 1_700_000_600 * SEC, 60 * SEC),
        max_series: 10,
        max_exemplars: 0,
    };
    let key = |service: &str, name: &str, kind: u32, status: u32, parent: Parent| CellKey {
        parent,
        service: Some(service.as_bytes().into()),
        name: Some(name.as_bytes().into()),
        attr: None,
        kind,
        status,
    };
    let class = |text: &str, k: CellKey| cells::class_of(&q(text), k).expect("from cells");
    let errors = "{ status = error } | quantile_over_time(duration, .9) by(name)";
    let by_service = "{ nestedSetParent < 0 } | rate() by(resource.service.name, kind)";
    let a = || key("a", "GET", 2, 2, Parent::Some);
    // (query, another key, whether it is in `a`'s class)
    for (query, other, same) in [
        (errors, key("b", "GET", 3, 2, Parent::None), true),
        (errors, key("a", "PUT", 2, 2, Parent::Some), false),
        (errors, key("a", "GET", 2, 1, Parent::Some), false),
        (by_service, key("a", "PUT", 2, 1, Parent::Some), true),
        (by_service, key("b", "GET", 2, 2, Parent::Some), false),
        (by_service, key("a", "GET", 3, 2, Parent::Some), false),
        (by_service, key("a", "GET", 2, 2, Parent::None), false),
    ] {
        let said = format!("{query}: {other:?}");
        assert_eq!(class(query, a()) == class(query, other), same, "{said}");
    }
}

#[test]
fn queries_cells_cannot_answer_are_read_from_spans() {
    let q = |text: &str, step: u64, start: u64| MetricsRequest {
        query: Arc::new(Compiled::new(parse(text).expect("parses")).expect("compiles")),
        grid: Grid::range(start, start + 600 * SEC, step),
        max_series: 10,
        max_exemplars: 0,
    };
    let t = 1_700_000_000 * SEC;
    assert!(cells::answerable(&q("{} | rate()", SEC, t)));
    assert!(cells::answerable(&q(
        "{ nestedSetParent < 0 && status = error } | quantile_over_time(duration, .9) by(resource.service.name)",
        5 * SEC,
        t
    )));
    // The whole key's seconds hold durations (a file's written before kept
    // them where dense only: those send the query to the spans).
    let by_name = "{} | quantile_over_time(duration, .9) by(name)";
    assert!(cells::answerable(&q(by_name, 56 * SEC, t)));
    assert!(cells::answerable(&q(by_name, 120 * SEC, t)));
    assert!(cells::answerable(&q(
        "{ name = \"a\" } | rate()",
        56 * SEC,
        t
    )));
    // One attribute, which the filters need present.
    for text in [
        "{ span.http.route = \"/\" } | rate()",
        "{ span.http.route != nil && kind = server } | rate() by(span.http.route)",
        "{ resource.cloud.region =~ \"eu.*\" } | histogram_over_time(duration)",
    ] {
        assert!(cells::answerable(&q(text, 60 * SEC, t)), "{text}");
    }
    // The attribute keys' seconds hold durations where they count several
    // spans each (else the files' cells send the query to the spans).
    let route_quantiles = "{ span.http.route = \"/\" } | quantile_over_time(duration, .9)";
    assert!(cells::answerable(&q(route_quantiles, SEC, t)));
    for text in [
        "{ span.http.route = \"/\" || kind = server } | rate()",
        "{ span.http.route = nil } | rate()",
        "{ span.http.route = \"/\" && span.http.method = \"GET\" } | rate()",
        "{ span.http.route = \"/\" } | rate() by(span.http.method)",
        "{ span.http.route = \"/\" && name = \"x\" } | rate()",
        "{ .http.route = \"/\" } | rate()",
        "{ event.x = 1 } | rate()",
        "{ .service.name = \"a\" } | rate()",
        "{ duration > 1s } | rate()",
        "{} | avg_over_time(duration)",
        "{} | rate() by(span.http.route)",
        "{ span.http.route = \"/\" } | rate() by(name)",
        "{ nestedSetLeft > 1 } | rate()",
        "{} >> {} | rate()",
        "{} | compare({status = error})",
    ] {
        assert!(!cells::answerable(&q(text, SEC, t)), "{text}");
    }
    // Steps and starts off whole seconds cut a second in two.
    assert!(!cells::answerable(&q("{} | rate()", SEC / 2, t)));
    assert!(!cells::answerable(&q("{} | rate()", 1500 * 1_000_000, t)));
}

/// A condition on span and resource attributes, or on a cell key's fields.
fn attribute_condition(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => format!("span.a = {}", rng.below(5)),
        1 => format!("span.b = {:?}", rng.pick(&["x", "y", "zz", "x y"])),
        2 => format!("span.c = {}", rng.chance(50)),
        3 => format!("span.f > {}", rng.below(8) as f64 / 2.0),
        4 => format!("resource.region = {:?}", rng.pick(&["eu", "us"])),
        5 => format!(".b = {:?}", rng.pick(&["x", "zz"])),
        6 => format!("span.a != {}", rng.below(5)),
        _ => condition(rng),
    }
}

/// A per-span query whose candidate traces (from the search index) are few
/// reads them by their IDs, and answers as the scan of its window does:
/// traces split across files, merged, flushed and buffered, random
/// conditions on attributes and cell fields.
#[test]
fn per_span_queries_of_few_traces_read_their_blocks_and_answer_as_the_scan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = test_engine(dir.path(), None);
    let mut rng = Rng::new(7);
    let base = hours_ago(2);
    let batches = random_batches(&mut rng, 400, 5, 25, |t| base + (t * 17 % 3600) * SEC);
    for (b, batch) in batches.into_iter().enumerate() {
        engine.write_blocking(batch).expect("write");
        if b < 4 {
            engine.flush().expect("flush");
        }
        if b == 2 {
            assert!(engine.compact().expect("compact") > 0);
        }
    }
    let request = |text: &str, from: u64, step: u64| MetricsRequest {
        query: Arc::new(Compiled::new(parse(text).expect("parses")).expect("compiles")),
        grid: Grid::range(from, from + (step * 100).min(3000 * SEC), step),
        max_series: 1000,
        max_exemplars: 0,
    };
    let (mut by_id, mut with_series) = (0, 0);
    for _ in 0..300 {
        let mut filter = attribute_condition(&mut rng);
        for _ in 0..rng.below(3) {
            let op = if rng.chance(75) { "&&" } else { "||" };
            filter = format!("{filter} {op} {}", attribute_condition(&mut rng));
        }
        let function = rng.pick(&[
            "rate()",
            "count_over_time() by(span.b)",
            "avg_over_time(span.f) by(resource.service.name)",
            "quantile_over_time(duration, 0.9)",
            "max_over_time(span.a) by(name)",
        ]);
        let text = format!("{{ {filter} }} | {function}");
        let step = [1, 10, 60, 300][rng.below(4)] * SEC;
        let req = request(&text, base + rng.below(1800) as u64 * SEC, step);
        assert!(crate::search::per_span_only(&req.query.query), "{text}");
        let scanned = finished(scan::scan(&engine, &req, &Cancel::new(), None).expect("scans"));
        let Some((few, _held)) =
            super::few_traces(&engine, &req, &Cancel::new(), 1).expect("walks")
        else {
            continue;
        };
        by_id += 1;
        let read = finished(
            scan::scan(&engine, &req, &Cancel::new(), Some(super::wanted(&few))).expect("reads"),
        );
        with_series += usize::from(!read.is_empty());
        // The same series; sums added in another order may differ in their
        // last digits.
        assert_eq!(read.len(), scanned.len(), "{text}");
        for (a, b) in read.iter().zip(&scanned) {
            assert_eq!(a.labels, b.labels, "{text}");
            assert_eq!(a.samples.len(), b.samples.len(), "{text}");
            for (x, y) in a.samples.iter().zip(&b.samples) {
                assert!(
                    x.0 == y.0 && (x.1 - y.1).abs() <= 1e-9 * y.1.abs().max(1.0),
                    "{text}: {x:?} against {y:?}"
                );
            }
        }
    }
    assert!(by_id > 150, "only {by_id} queries were read by ID");
    assert!(with_series > 75, "only {with_series} of them had series");
    // At the cost `run` weighs, a query most traces meet scans the window,
    // and one no trace meets reads none.
    let common = request(
        "{ resource.service.name = \"front\" } | rate()",
        base,
        60 * SEC,
    );
    let rare = request("{ span.b = \"none\" } | rate()", base, 60 * SEC);
    let walk = |req: &MetricsRequest| {
        super::few_traces(&engine, req, &Cancel::new(), super::SPANS_PER_CANDIDATE)
            .expect("walks")
            .map(|(few, _)| few.len())
    };
    assert_eq!(walk(&common), None);
    assert_eq!(walk(&rare), Some(0));
}

/// A query read trace by trace (few candidates, or a structural query)
/// cannot see the traces held only by a file in quarantine: its answer is
/// marked partial with the file, as a scan's is.
#[test]
fn queries_read_through_the_index_name_the_quarantined_files_of_their_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = hours_ago(1);
    let mut rng = Rng::new(11);
    // Two files of trace IDs far apart, so that reading one's traces never
    // looks into the other.
    let engine = test_engine(dir.path(), None);
    for high in [0u128, 1 << 127] {
        let batch: Vec<Span> = (1..=30u128)
            .flat_map(|t| {
                let id = TraceId((high + t).to_be_bytes());
                spans(id, arbitrary::trace(&mut rng, id.0, base + t as u64 * SEC))
            })
            .collect();
        engine.write_blocking(batch).expect("write");
        engine.flush().expect("flush");
    }
    engine.close().expect("close");
    drop(engine);
    let mut files: Vec<_> = std::fs::read_dir(dir.path().join("tables"))
        .expect("tables")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 2);
    // A byte of the second file's first block: the file opens, and its
    // first read finds the damage and puts it in quarantine.
    let mut bytes = std::fs::read(&files[1]).expect("read");
    bytes[16 + 40] ^= 0x20;
    std::fs::write(&files[1], &bytes).expect("damage");
    let engine = test_engine(dir.path(), None);
    let high = TraceId(((1u128 << 127) + 1).to_be_bytes());
    let lookup = engine
        .lookup_trace(&high, tracedb_lsm::TimeRange::ALL)
        .expect("lookup");
    assert!(lookup.spans.is_empty() && !lookup.skipped.is_empty());
    let req = MetricsRequest {
        query: Arc::new(
            Compiled::new(parse("{ span.a = 1 } | rate()").expect("parses")).expect("compiles"),
        ),
        grid: Grid::range(base, base + 120 * SEC, 60 * SEC),
        max_series: 10,
        max_exemplars: 0,
    };
    let name = files[1]
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let names_it = |partial: &[String]| partial.iter().any(|p| p.contains(&name));
    let scanned = scan::scan(&engine, &req, &Cancel::new(), None).expect("scans");
    assert!(names_it(&scanned.partial), "{:?}", scanned.partial);
    let (few, _held) = super::few_traces(&engine, &req, &Cancel::new(), 1)
        .expect("walks")
        .expect("few");
    let read = scan::scan(&engine, &req, &Cancel::new(), Some(super::wanted(&few))).expect("reads");
    assert!(names_it(&read.partial), "{:?}", read.partial);
    let structural = MetricsRequest {
        query: Arc::new(
            Compiled::new(parse("{ span.a = 1 } >> { } | rate()").expect("parses"))
                .expect("compiles"),
        ),
        ..req
    };
    let walked = super::whole_traces(&engine, &structural, &Cancel::new()).expect("walks");
    assert!(names_it(&walked.partial), "{:?}", walked.partial);
    // A search of the window too, and a tier's ask for its candidates.
    for candidates_only in [false, true] {
        let search = crate::search::Search {
            query: Arc::new(
                Compiled::new(parse("{ span.a = 1 }").expect("parses")).expect("compiles"),
            ),
            text: String::new(),
            start_unix_nano: base,
            end_unix_nano: base + 120 * SEC,
            limit: 20,
            spans_per_spanset: 3,
            candidates_only,
            span_window: false,
        };
        let found = crate::search::run(&engine, &search, &Cancel::new()).expect("searches");
        assert!(
            names_it(&found.partial),
            "{candidates_only}: {:?}",
            found.partial
        );
    }
}

/// A span sent twice (a retried export whose acknowledgement was lost) and
/// stored in two files: reads and metrics from spans count it once, metrics
/// from cells twice until a compaction rewrites the files (README, "Metrics
/// cells").
#[test]
fn a_span_stored_twice_counts_twice_in_cells_until_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    opts.compaction.l0_trigger_files = 2;
    let engine = Engine::open(opts).expect("open");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    let base = (now - 600 * SEC) / SEC * SEC;
    let mut rng = Rng::new(5);
    let id = TraceId(77u128.to_be_bytes());
    let trace = spans(id, arbitrary::trace(&mut rng, id.0, base + 10 * SEC));
    let n = trace.len() as f64;
    for _ in 0..2 {
        engine.write_blocking(trace.clone()).expect("write");
        engine.flush().expect("flush");
    }
    assert_eq!(engine.get_trace(&id).expect("read").len() as f64, n);
    let req = MetricsRequest {
        query: Arc::new(
            Compiled::new(parse("{} | count_over_time()").expect("parses")).expect("compiles"),
        ),
        grid: Grid::range(base, base + 60 * SEC, 60 * SEC),
        max_series: 10,
        max_exemplars: 0,
    };
    let total = |series: Vec<Series>| -> f64 {
        series
            .iter()
            .flat_map(|s| s.samples.iter().map(|p| p.1))
            .sum()
    };
    let cells_total = |engine: &Engine| {
        total(finished(
            cells::run(engine, &req, &Cancel::new())
                .expect("runs")
                .expect("from cells"),
        ))
    };
    assert_eq!(
        total(finished(
            scan::scan(&engine, &req, &Cancel::new(), None).expect("runs")
        )),
        n
    );
    assert_eq!(cells_total(&engine), 2.0 * n);
    assert!(engine.compact().expect("compact") > 0);
    assert_eq!(cells_total(&engine), n);
}

/// Durations at a step of seconds: by name, from the cells of every file,
/// dense or light; by a counted attribute, of spans that are neither roots
/// nor errors, from the spans where a file's attribute seconds count few
/// spans a cell (and then within Tempo's range only).
#[test]
fn durations_at_a_step_of_seconds_are_counted_by_name_always_by_attribute_where_dense() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = test_engine(dir.path(), None);
    let mut rng = Rng::new(7);
    let base = hours_ago(7);
    // About 13 k spans in three seconds: a few hundred keys, many spans each.
    let dense = random_batches(&mut rng, 3000, 1, 0, |t| base + (10 + t % 3) * SEC);
    engine.write_blocking(dense.concat()).expect("write");
    engine.flush().expect("flush");
    let req = |text: &str, from: u64, to: u64, step: u64| MetricsRequest {
        query: Arc::new(Compiled::new(parse(text).expect("parses")).expect("compiles")),
        grid: Grid::range(from, to, step),
        max_series: 1000,
        max_exemplars: 0,
    };
    let from_cells = |r: &MetricsRequest| {
        cells::run(&engine, r, &Cancel::new())
            .expect("runs")
            .map(finished)
    };
    let scanned =
        |r: &MetricsRequest| finished(scan::scan(&engine, r, &Cancel::new(), None).expect("runs"));
    let by_name = [
        "{} | quantile_over_time(duration, .5, .9) by(name)",
        "{ resource.service.name = \"cart\" } | histogram_over_time(duration) by(name)",
        "{ name = \"query\" && status != error } | quantile_over_time(duration, .99)",
    ];
    let by_attribute = [
        "{ span.b != nil && status != error } | quantile_over_time(duration, .5, .9) by(span.b)",
        "{ span.a >= 2 && status != error } | histogram_over_time(duration)",
    ];
    for text in by_name.iter().chain(&by_attribute) {
        // Intervals of 7 s: none holds a whole minute.
        let r = req(text, base, base + 70 * SEC, 7 * SEC);
        let b = scanned(&r);
        assert!(!b.is_empty(), "{text}");
        assert_eq!(from_cells(&r), Some(b), "{text}");
    }
    // A light file beside it: 5000 traces over 20,000 s, a span or two a
    // cell, and too many cells to keep their attribute durations.
    let light = random_batches(&mut rng, 5000, 1, 0, |t| base + (100 + 4 * t) * SEC);
    engine.write_blocking(light.concat()).expect("write");
    engine.flush().expect("flush");
    for text in by_name {
        let r = req(text, base, base + 20110 * SEC, 7 * SEC);
        let b = scanned(&r);
        assert!(!b.is_empty(), "{text}");
        assert_eq!(from_cells(&r), Some(b), "{text}");
        // Past Tempo's 24 h too, from cells.
        let r = req(
            text,
            base - 2 * 24 * 3600 * SEC,
            base + 20130 * SEC,
            61 * SEC,
        );
        assert!(super::run(&engine, &r, &Cancel::new()).is_ok(), "{text}");
    }
    for text in by_attribute {
        let r = req(text, base, base + 20110 * SEC, 7 * SEC);
        assert!(cells::answerable(&r), "{text}");
        assert!(
            from_cells(&r).is_none(),
            "{text}: answered from cells that keep no durations"
        );
        let answer = super::run(&engine, &r, &Cancel::new())
            .unwrap_or_else(|_| panic!("{text}: not answered"));
        assert_eq!(finished(answer), scanned(&r), "{text}");
        // The dense file's window alone is still counted from its cells.
        let r = req(text, base, base + 70 * SEC, 7 * SEC);
        assert!(from_cells(&r).is_some(), "{text}");
        // Past Tempo's 24 h, a query that would read spans is refused; at
        // a step of whole minutes the cells answer it.
        let r = req(
            text,
            base - 2 * 24 * 3600 * SEC,
            base + 2310 * SEC,
            61 * SEC,
        );
        match super::run(&engine, &r, &Cancel::new()) {
            Err(crate::search::RunError::Invalid(why)) => {
                assert!(why.contains("whole minutes"), "{why}")
            }
            _ => panic!("{text}: answered past 24 h from spans"),
        }
        let r = req(
            text,
            base - 2 * 24 * 3600 * SEC,
            base + 2340 * SEC,
            60 * SEC,
        );
        assert!(super::run(&engine, &r, &Cancel::new()).is_ok(), "{text}");
    }
    // Root spans' durations by a counted attribute (Traces Drilldown's
    // breakdowns), and error spans', are kept in the light file's
    // attribute seconds too: counted from cells, past 24 h too.
    for text in [
        "{nestedSetParent<0 && true && span.b != nil} | quantile_over_time(duration, 0.9) by(span.b)",
        "{nestedSetParent<0 && span.a >= 2} | histogram_over_time(duration)",
        "{ status = error && span.b != nil } | quantile_over_time(duration, 0.9) by(span.b)",
    ] {
        let r = req(text, base, base + 20110 * SEC, 7 * SEC);
        let b = scanned(&r);
        assert!(b.len() > 1, "{text}");
        assert_eq!(from_cells(&r), Some(b), "{text}");
        let r = req(text, base - 2 * 24 * 3600 * SEC, base + 20130 * SEC, 61 * SEC);
        assert!(super::run(&engine, &r, &Cancel::new()).is_ok(), "{text}");
    }
}

/// A metrics query whose caller has gone stops, from cells, by a scan of
/// the spans, or trace by trace, and gives back what it held.
#[test]
fn a_cancelled_metrics_query_stops_in_every_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    let engine = Engine::open(opts).expect("open");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    let base = (now - 600 * SEC) / SEC * SEC;
    let mut rng = Rng::new(11);
    for t in 1..=20u128 {
        let id = TraceId(t.to_be_bytes());
        let trace = spans(id, arbitrary::trace(&mut rng, id.0, base + 10 * SEC));
        engine.write_blocking(trace).expect("write");
    }
    engine.flush().expect("flush");
    let budget = engine.memory_budget();
    let request = |text: &str| MetricsRequest {
        query: Arc::new(Compiled::new(parse(text).expect("parses")).expect("compiles")),
        grid: Grid::range(base, base + 60 * SEC, 60 * SEC),
        max_series: 10,
        // No exemplars: their walk would stop a query from cells too.
        max_exemplars: 0,
    };
    let cells_path = request("{} | count_over_time()");
    let scan_path = request("{ span.http.method = \"GET\" && duration >= 0s } | count_over_time()");
    let trace_path = request("{} >> {} | count_over_time()");
    assert!(cells::answerable(&cells_path));
    assert!(!cells::answerable(&scan_path));
    assert!(crate::search::per_span_only(&scan_path.query.query));
    assert!(!crate::search::per_span_only(&trace_path.query.query));
    for req in [cells_path, scan_path, trace_path] {
        let answered = super::run(&engine, &req, &Cancel::new()).expect("answers");
        assert!(answered.partial.is_empty(), "{:?}", answered.partial);
        let cancel = Cancel::new();
        cancel.cancel();
        match super::run(&engine, &req, &cancel) {
            Err(crate::search::RunError::Cancelled) => {}
            other => panic!("{:?}", other.map(|a| a.value.finish())),
        }
        assert_eq!(budget.in_flight(), 0, "given back");
    }
}

/// A query that reads whole traces walks the index on every core, a range
/// of trace IDs each: traces whose IDs lie at the ranges' bounds (and on
/// either side of them) are each counted once, as one walk over every ID
/// counts them.
#[test]
fn traces_read_whole_on_every_core_are_each_counted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = test_engine(dir.path(), None);
    let base = hours_ago(1);
    let mut rng = Rng::new(13);
    let mut ids: Vec<u128> = vec![0, u128::MAX];
    for n in 2..=4 {
        for range in tracedb_lsm::TraceIdRange::split(n) {
            let at = u128::from_be_bytes(range.start.0);
            ids.extend([at.saturating_sub(1), at, at.saturating_add(1)]);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    // Half the traces in a file, half buffered.
    let mut written = 0;
    for (i, half) in ids.chunks(ids.len().div_ceil(2)).enumerate() {
        let batch: Vec<Span> = half
            .iter()
            .enumerate()
            .flat_map(|(t, &id)| {
                let id = TraceId(id.to_be_bytes());
                spans(
                    id,
                    arbitrary::trace(&mut rng, id.0, base + (1 + t as u64) * SEC),
                )
            })
            .collect();
        written += batch.len();
        engine.write_blocking(batch).expect("write");
        if i == 0 {
            engine.flush().expect("flush");
        }
    }
    let request = |text: &str| MetricsRequest {
        query: Arc::new(Compiled::new(parse(text).expect("parses")).expect("compiles")),
        grid: Grid::range(base, base + 600 * SEC, 60 * SEC),
        max_series: 1000,
        max_exemplars: 0,
    };
    let one_walk = |req: &MetricsRequest| {
        let mut walk = engine.candidates(&super::index_query(req)).expect("walk");
        let mut walk_bytes = 0;
        let (answer, _held) = super::by_traces(&engine, req, &Cancel::new(), |held| {
            crate::search::next_counted(&mut walk, held, &mut walk_bytes, &Cancel::new())
        })
        .expect("reads");
        finished(answer)
    };
    // Every span, one sample: each trace's spans counted once.
    let every = request("{ } | count_over_time()");
    let every_span = finished(super::whole_traces(&engine, &every, &Cancel::new()).expect("reads"));
    let total: f64 = every_span
        .iter()
        .flat_map(|s| s.samples.iter().map(|x| x.1))
        .filter(|x| !x.is_nan())
        .sum();
    assert_eq!(total, written as f64);
    assert_eq!(every_span, one_walk(&every));
    for text in [
        "{ } >> { } | count_over_time() by(resource.service.name)",
        "{ span.a = 1 } && { } | rate()",
        "{ } ~ { } | quantile_over_time(duration, 0.5) by(name)",
    ] {
        let req = request(text);
        let on_every_core =
            finished(super::whole_traces(&engine, &req, &Cancel::new()).expect("reads"));
        assert!(!on_every_core.is_empty(), "{text}");
        assert_eq!(on_every_core, one_walk(&req), "{text}");
    }
}
