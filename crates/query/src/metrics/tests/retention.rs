//! A window reaching back past retention's cut: counted from cells, or
//! split at the grid's first edge after the cut.

use super::*;

/// A window reaching back past retention's cut is counted from cells when
/// no file or buffer holds a span that started before the cut (a store
/// younger than its retention); else from the spans up to the grid's first
/// edge after the cut (a read leaves out those that ended before it) and
/// from the cells after that edge, past Tempo's 24 h too.
#[test]
fn a_window_past_retention_is_counted_from_spans_up_to_the_cut_and_from_cells_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = EngineOptions::new(dir.path());
    opts.compaction_threads = 0;
    opts.retention = Some(Duration::from_secs(3600));
    let engine = Engine::open(opts).expect("open");
    let mut rng = Rng::new(11);
    let base = hours_ago(0) - 600 * SEC;
    let recent = random_batches(&mut rng, 50, 1, 0, |t| base + t * SEC);
    engine.write_blocking(recent.concat()).expect("write");
    engine.flush().expect("flush");
    let end = hours_ago(0) / (60 * SEC) * (60 * SEC) + 60 * SEC;
    let req = |hours: u64| MetricsRequest {
        query: Arc::new(
            Compiled::new(parse("{} | count_over_time()").expect("parses")).expect("compiles"),
        ),
        grid: Grid::range(end - hours * 3600 * SEC, end, 60 * SEC),
        max_series: 10,
        max_exemplars: 0,
    };
    for hours in [3, 48] {
        let r = req(hours);
        let from_cells = cells::answer(&engine, &r, &Cancel::new())
            .expect("runs")
            .unwrap_or_else(|why| panic!("{hours} h: {why:?}"));
        let from_spans = scan::scan(&engine, &r, &Cancel::new(), None).expect("runs");
        assert_eq!(finished(from_cells), finished(from_spans));
    }
    // Spans that started before the cut: one trace's end after it, which
    // a read keeps, another's before it, which a read leaves out (cells
    // count both); buffered, then flushed.
    let mut old = Vec::new();
    for (t, end) in [
        (98u128, hours_ago(0) - 1800 * SEC),
        (99, hours_ago(1) - 30 * SEC),
    ] {
        let id = TraceId(t.to_be_bytes());
        let mut trace = spans(
            id,
            arbitrary::trace(&mut rng, id.0, hours_ago(1) - 60 * SEC),
        );
        for s in &mut trace {
            s.end_unix_nano = end;
        }
        old.extend(trace);
    }
    // Trace 98 goes on after the split: spans of other IDs, after it.
    let other = TraceId((98u128 | 1 << 8).to_be_bytes());
    let mut after = spans(
        other,
        arbitrary::trace(&mut rng, other.0, hours_ago(1) + 120 * SEC),
    );
    for s in &mut after {
        s.trace_id = TraceId(98u128.to_be_bytes());
    }
    old.extend(after);
    engine.write_blocking(old).expect("write");
    for flushed in [false, true] {
        if flushed {
            engine.flush().expect("flush");
        }
        for hours in [3, 48] {
            let r = req(hours);
            assert_eq!(
                cells::answer(&engine, &r, &Cancel::new())
                    .expect("runs")
                    .err(),
                Some(cells::Unanswered::NotNow),
                "{hours} h, flushed {flushed}"
            );
            let answer = crate::metrics::run(&engine, &r, &Cancel::new())
                .unwrap_or_else(|_| panic!("{hours} h: not answered"));
            let from_spans = scan::scan(&engine, &r, &Cancel::new(), None).expect("runs");
            assert_eq!(finished(answer), finished(from_spans));
        }
    }
    // The spans answer up to the first edge after the cut, the cells from
    // there on: a recent trace stored twice counts twice in cells (until a
    // merge), once in spans.
    let again = recent.concat()[..3].to_vec();
    engine.write_blocking(again).expect("write");
    engine.flush().expect("flush");
    let total = |series: &[Series]| -> f64 {
        series
            .iter()
            .flat_map(|s| s.samples.iter().map(|p| p.1))
            .sum()
    };
    for hours in [3, 48] {
        let r = req(hours);
        let answer = crate::metrics::run(&engine, &r, &Cancel::new())
            .unwrap_or_else(|_| panic!("{hours} h: not answered"));
        let from_spans = scan::scan(&engine, &r, &Cancel::new(), None).expect("runs");
        let (a, b) = (finished(answer), finished(from_spans));
        assert_eq!(total(&a), total(&b) + 3.0, "{hours} h");
        // The intervals up to the cut's: the spans' answer, the trace that
        // ended before the cut left out.
        let cut = engine.expire_before();
        let early = |s: &[Series]| -> Vec<(u64, f64)> {
            s.iter()
                .flat_map(|s| s.samples.iter().copied())
                .filter(|&(ms, _)| ms * 1_000_000 < cut + 60 * SEC)
                .collect()
        };
        assert_eq!(early(&a), early(&b), "{hours} h");
        assert!(early(&b).iter().any(|p| p.1 > 0.0), "{hours} h: {b:?}");
    }
}
