//! The metrics stage against series worked out by hand from Tempo's rules
//! (see the module docs).

use std::sync::Arc;

use super::*;
use crate::{
    ast::{Kind, Status},
    parse,
    trace::{Origin, SpanData, Value},
};

const SEC: u64 = 1_000_000_000;
/// 1,000 s after the epoch: a multiple of every step used here.
const T0: u64 = 1_000 * SEC;

/// A span of `service` named `name`, starting `at` ns after T0.
fn span(id: u8, parent: Option<u8>, service: &str, name: &str, at: u64, dur: u64) -> SpanData {
    SpanData {
        span_id: [id; 8],
        parent_id: parent.map(|p| [p; 8]),
        name: name.into(),
        kind: Kind::Server,
        status: Status::Unset,
        status_message: String::new(),
        start_unix_nano: T0 + at,
        end_unix_nano: T0 + at + dur,
        attributes: Vec::new(),
        events: Vec::new(),
        links: Vec::new(),
        origin: Arc::new(Origin {
            resource: vec![("service.name".into(), Value::Str(service.into()))],
            ..Origin::default()
        }),
    }
}

fn trace(id: u8, spans: Vec<SpanData>) -> Trace {
    Trace::new([id; 16], spans)
}

/// The series `q` gives over `traces` on `grid`.
fn run(q: &str, grid: Grid, traces: &[Trace]) -> Vec<Series> {
    run_capped(q, grid, traces, 1_000).0
}

fn run_capped(q: &str, grid: Grid, traces: &[Trace], max_series: usize) -> (Vec<Series>, bool) {
    let compiled = Compiled::new(parse(q).expect("parses")).expect("compiles");
    let mut eval = MetricsEval::new(&compiled, grid, max_series, 100).expect("a metrics query");
    for t in traces {
        let sets = compiled.eval(t);
        eval.observe(&compiled, t, &sets);
    }
    let capped = eval.series_capped();
    (eval.finish(), capped)
}

fn s(v: &str) -> LabelValue {
    LabelValue::Str(v.into())
}

/// (labels as key=value text, samples as (seconds after T0, value)).
fn table(series: &[Series]) -> Vec<(String, Vec<(i64, f64)>)> {
    series
        .iter()
        .map(|s| {
            let labels = s
                .labels
                .iter()
                .map(|(k, v)| match v {
                    LabelValue::Str(x) => format!("{k}={x}"),
                    LabelValue::Int(x) => format!("{k}={x}"),
                    LabelValue::Float(x) => format!("{k}={x}"),
                    LabelValue::Bool(x) => format!("{k}={x}"),
                })
                .collect::<Vec<_>>()
                .join(",");
            let samples = s
                .samples
                .iter()
                .map(|&(t, v)| ((t as i64 - (T0 / 1_000_000) as i64) / 1_000, v))
                .collect();
            (labels, samples)
        })
        .collect()
}

/// Two traces over 0-30 s after T0: `a` calls `b`.
fn traces() -> Vec<Trace> {
    let mut err = span(3, Some(1), "b", "get", 25 * SEC, 2 * SEC);
    err.status = Status::Error;
    vec![
        trace(
            1,
            vec![
                span(1, None, "a", "root", 5 * SEC, 100_000_000),
                span(2, Some(1), "b", "get", 10 * SEC, 50_000_000),
                err,
            ],
        ),
        trace(2, vec![span(1, None, "a", "root", 12 * SEC, 1_000_000_000)]),
    ]
}

#[test]
fn a_range_grid_is_aligned_to_its_step_with_one_interval_more_before() {
    // Tempo's own example: 1100 s to 1300 s by 100 s has samples at 1100,
    // 1200 and 1300 s.
    let g = Grid::range(1_100 * SEC, 1_300 * SEC, 100 * SEC);
    assert_eq!((g.start, g.end, g.len()), (1_000 * SEC, 1_300 * SEC, 3));
    let stamps: Vec<u64> = (0..g.len()).map(|i| g.timestamp_ms(i) / 1_000).collect();
    assert_eq!(stamps, vec![1_100, 1_200, 1_300]);
    // Unaligned ends move out to the step.
    let g = Grid::range(1_150 * SEC, 1_250 * SEC, 100 * SEC);
    assert_eq!((g.start, g.end), (1_000 * SEC, 1_300 * SEC));
    // Intervals are right-closed: a span on a boundary counts in the
    // interval it ends; the range's own left edge is out.
    assert_eq!(g.interval(1_100 * SEC), Some(0));
    assert_eq!(g.interval(1_100 * SEC + 1), Some(1));
    assert_eq!(g.interval(1_000 * SEC), None);
    assert_eq!(g.interval(1_300 * SEC), Some(2));
    assert_eq!(g.interval(1_300 * SEC + 1), None);
    // An instant grid is one closed interval stamped at its end.
    let i = Grid::instant(1_000 * SEC, 1_060 * SEC);
    assert_eq!(
        (i.len(), i.interval(1_000 * SEC), i.interval(1_060 * SEC)),
        (1, Some(0), Some(0))
    );
    assert_eq!(i.interval(1_060 * SEC + 1), None);
    assert_eq!(i.timestamp_ms(0), 1_060_000);
}

#[test]
fn rate_and_count_by_service_emit_every_interval() {
    let grid = Grid::range(T0, T0 + 30 * SEC, 10 * SEC);
    let got = table(&run(
        "{ } | count_over_time() by(resource.service.name)",
        grid,
        &traces(),
    ));
    assert_eq!(
        got,
        vec![
            (
                "resource.service.name=a".to_owned(),
                vec![(0, 0.0), (10, 1.0), (20, 1.0), (30, 0.0)]
            ),
            (
                "resource.service.name=b".to_owned(),
                vec![(0, 0.0), (10, 1.0), (20, 0.0), (30, 1.0)]
            ),
        ]
    );
    let got = table(&run("{ status = error } | rate()", grid, &traces()));
    assert_eq!(
        got,
        vec![(
            "__name__=rate".to_owned(),
            vec![(0, 0.0), (10, 0.0), (20, 0.0), (30, 0.1)]
        )]
    );
}

#[test]
fn min_max_sum_and_avg_measure_durations_in_seconds_and_skip_empty_intervals() {
    let grid = Grid::range(T0, T0 + 30 * SEC, 10 * SEC);
    let t = traces();
    let rows = |q: &str| table(&run(q, grid, &t));
    assert_eq!(
        rows("{ } | max_over_time(duration)"),
        vec![(
            "__name__=max_over_time".to_owned(),
            vec![(10, 0.1), (20, 1.0), (30, 2.0)]
        )]
    );
    assert_eq!(
        rows("{ } | min_over_time(duration) by(name)"),
        vec![
            ("name=get".to_owned(), vec![(10, 0.05), (30, 2.0)]),
            ("name=root".to_owned(), vec![(10, 0.1), (20, 1.0)]),
        ]
    );
    assert_eq!(
        rows("{ } | sum_over_time(duration)"),
        vec![(
            "__name__=sum_over_time".to_owned(),
            vec![(10, 0.15000000000000002), (20, 1.0), (30, 2.0)]
        )]
    );
    assert_eq!(
        rows("{ } | avg_over_time(duration)"),
        vec![(
            "__name__=avg_over_time".to_owned(),
            vec![(10, 0.07500000000000001), (20, 1.0), (30, 2.0)]
        )]
    );
    // A field no span has makes no series.
    assert!(rows("{ } | avg_over_time(span.size)").is_empty());
}

#[test]
fn quantiles_and_histograms_use_power_of_two_buckets() {
    let grid = Grid::instant(T0, T0 + 60 * SEC);
    // Durations 50 ms, 100 ms, 1 s, 2 s: buckets 2^26, 2^27, 2^30, 2^31 ns.
    let t = traces();
    let b = |exp: i32| 2f64.powi(exp) / 1e9;
    let got = table(&run("{ } | histogram_over_time(duration)", grid, &t));
    assert_eq!(
        got,
        vec![
            (format!("__bucket={}", b(26)), vec![(60, 1.0)]),
            (format!("__bucket={}", b(27)), vec![(60, 1.0)]),
            (format!("__bucket={}", b(30)), vec![(60, 1.0)]),
            (format!("__bucket={}", b(31)), vec![(60, 1.0)]),
        ]
    );
    let got = run(
        "{ } | quantile_over_time(duration, 0, 0.5, 0.75, 0.9)",
        grid,
        &t,
    );
    let value = |p: f64| {
        got.iter()
            .find(|s| s.labels == vec![("p".to_owned(), LabelValue::Float(p))])
            .map(|s| s.samples[0].1)
            .expect("a series per quantile")
    };
    // q = 0 wants the first value: its bucket's bound.
    assert_eq!(value(0.0), b(26));
    // 0.5 of 4 is the 2nd value, which fills the 2nd bucket exactly.
    assert_eq!(value(0.5), b(27));
    // 0.75: the 3rd, the whole of the 3rd bucket.
    assert_eq!(value(0.75), b(30));
    // 0.9: ceil(3.6) = 4th, the whole 4th bucket.
    assert_eq!(value(0.9), b(31));
    // Inside a bucket: four values in 2^30, q = 0.75 is 3/4 of the way
    // from 2^29 to 2^30 on a log2 scale.
    let same: Vec<Trace> = (1..=4)
        .map(|i| trace(i, vec![span(1, None, "a", "x", SEC, 1_000_000_000)]))
        .collect();
    let got = run("{ } | quantile_over_time(duration, 0.75)", grid, &same);
    let want = 2f64.powf(29.75) / 1e9;
    assert!((got[0].samples[0].1 - want).abs() < want * 1e-12, "{got:?}");
}

#[test]
fn nil_by_values_are_left_out_of_the_labels() {
    let grid = Grid::instant(T0, T0 + 60 * SEC);
    let mut t = traces();
    t[0].spans[1]
        .attributes
        .push(("http.route".into(), Value::Str("/x".into())));
    let got = run(
        "{ } | count_over_time() by(span.http.route, name)",
        grid,
        &t,
    );
    let labels: Vec<_> = got
        .iter()
        .map(|s| (s.labels.clone(), s.samples[0].1))
        .collect();
    assert_eq!(
        labels,
        vec![
            (vec![("name".to_owned(), s("get"))], 1.0),
            (vec![("name".to_owned(), s("root"))], 2.0),
            (
                vec![
                    ("span.http.route".to_owned(), s("/x")),
                    ("name".to_owned(), s("get"))
                ],
                1.0
            ),
        ]
    );
    // Every by() value nil: the first field, labelled "nil".
    let got = run("{ } | rate() by(span.absent)", grid, &t);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].labels, vec![("span.absent".to_owned(), s("nil"))]);
}

#[test]
fn by_a_typed_column_groups_a_value_of_another_type_as_nil() {
    let grid = Grid::instant(T0, T0 + 60 * SEC);
    let mut t = traces();
    let code = |v: Value| ("http.status_code".to_owned(), v);
    t[0].spans[0].attributes.push(code(Value::Int(500)));
    t[0].spans[1]
        .attributes
        .push(code(Value::Str("500".into())));
    t[1].spans[0]
        .attributes
        .push(code(Value::Array(vec![Value::Int(404)])));
    let labelled = |got: Vec<Series>| -> Vec<(String, f64)> {
        got.iter()
            .map(|s| {
                let l: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                (l.join(","), s.samples[0].1)
            })
            .collect()
    };
    // Tempo keeps the code in an int column: the string is nil there, as
    // is a span without a code; an array of ints is its first.
    let q = "{ } | count_over_time() by(span.http.status_code)";
    let nil = format!("span.http.status_code={:?}", s("nil"));
    assert_eq!(
        labelled(run(q, grid, &t)),
        vec![
            (
                format!("span.http.status_code={:?}", LabelValue::Int(404)),
                1.0
            ),
            (
                format!("span.http.status_code={:?}", LabelValue::Int(500)),
                1.0
            ),
            (nil.clone(), 2.0),
        ]
    );
    // An attribute without a column of its own is grouped by every value.
    for sp in t.iter_mut().flat_map(|t| t.spans.iter_mut()) {
        for a in &mut sp.attributes {
            a.0 = "code".into();
        }
    }
    let got = labelled(run("{ } | count_over_time() by(span.code)", grid, &t));
    assert_eq!(got.len(), 4, "{got:?}");
    // With any-type presence (a Jaeger query), the string is its own value.
    let mut t = traces();
    t[0].spans[1]
        .attributes
        .push(code(Value::Str("500".into())));
    let compiled = Compiled::new(parse(q).expect("parses"))
        .expect("compiles")
        .with_presence_of_any_type();
    let mut eval = MetricsEval::new(&compiled, grid, 100, 0).expect("a metrics query");
    for tr in &t {
        let sets = compiled.eval(tr);
        eval.observe(&compiled, tr, &sets);
    }
    assert_eq!(
        labelled(eval.finish()),
        vec![
            (format!("span.http.status_code={:?}", s("500")), 1.0),
            (nil, 3.0),
        ]
    );
}

#[test]
fn topk_bottomk_and_comparisons_apply_to_the_final_series() {
    let grid = Grid::range(T0, T0 + 30 * SEC, 10 * SEC);
    let t = traces();
    let names = |q: &str| -> Vec<(String, Vec<(i64, f64)>)> { table(&run(q, grid, &t)) };
    // topk(1) at each timestamp; of equal values topk keeps the series
    // that comes first in Tempo's tie order, bottomk the one that comes last.
    assert_eq!(
        names("{ } | count_over_time() by(resource.service.name) | topk(1)"),
        vec![
            (
                "resource.service.name=a".to_owned(),
                vec![(0, 0.0), (10, 1.0), (20, 1.0)]
            ),
            ("resource.service.name=b".to_owned(), vec![(30, 1.0)]),
        ]
    );
    assert_eq!(
        names("{ } | count_over_time() by(resource.service.name) | bottomk(1)"),
        vec![
            ("resource.service.name=a".to_owned(), vec![(30, 0.0)]),
            (
                "resource.service.name=b".to_owned(),
                vec![(0, 0.0), (10, 1.0), (20, 0.0)]
            ),
        ]
    );
    assert_eq!(
        names("{ } | count_over_time() by(resource.service.name) > 0"),
        vec![
            (
                "resource.service.name=a".to_owned(),
                vec![(10, 1.0), (20, 1.0)]
            ),
            (
                "resource.service.name=b".to_owned(),
                vec![(10, 1.0), (30, 1.0)]
            ),
        ]
    );
    assert!(names("{ } | max_over_time(duration) > 2s").is_empty());
    assert_eq!(
        names("{ } | max_over_time(duration) >= 1s"),
        vec![(
            "__name__=max_over_time".to_owned(),
            vec![(20, 1.0), (30, 2.0)]
        )]
    );
}

#[test]
fn exemplars_are_one_matched_span_per_trace_with_its_ids() {
    let grid = Grid::range(T0, T0 + 30 * SEC, 10 * SEC);
    let got = run("{ } | rate()", grid, &traces());
    let ex = &got[0].exemplars;
    assert_eq!(ex.len(), 2, "{ex:?}");
    assert_eq!(
        ex[0].labels[0],
        ("trace:id".to_owned(), s(&"01".repeat(16)[1..]))
    );
    assert_eq!(ex[0].labels[1], ("span:id".to_owned(), s(&"01".repeat(8))));
    assert_eq!(ex[0].timestamp_ms, (T0 + 5 * SEC) / 1_000_000);
    // A rate's exemplar carries the rate of its interval: two spans in
    // (T0, T0 + 10 s].
    assert_eq!(ex[0].value, 0.2);
    // A maximum's carries the span's own value.
    let got = run("{ } | max_over_time(duration)", grid, &traces());
    assert_eq!(got[0].exemplars[0].value, 0.1);
}

/// Evaluators over different traces (other stores, or a scan's threads),
/// added up, keep the exemplars one evaluator would: two per time bucket
/// (a fiftieth of the range for 100) and the number asked for.
#[test]
fn exemplars_added_up_keep_two_per_bucket_and_the_number_asked() {
    let grid = Grid::range(T0, T0 + 100 * SEC, 10 * SEC);
    let compiled = Compiled::new(parse("{ } | rate()").expect("parses")).expect("compiles");
    // Forty traces, each one span, all in the first second of the range.
    let traces: Vec<Trace> = (0..40u8)
        .map(|t| {
            trace(
                t + 1,
                vec![span(1, None, "a", "op", SEC / 2 + u64::from(t), 10)],
            )
        })
        .collect();
    let added = |max: usize| {
        let mut evals: Vec<MetricsEval> = (0..4)
            .map(|_| MetricsEval::new(&compiled, grid, 1_000, max).expect("metrics"))
            .collect();
        for (i, t) in traces.iter().enumerate() {
            evals[i % 4].observe(&compiled, t, &compiled.eval(t));
        }
        let mut evals = evals.into_iter();
        let mut first = evals.next().expect("four");
        evals.for_each(|e| first.merge(e));
        first.finish()
    };
    // Four evaluators took two each in the first bucket: two are kept.
    assert_eq!(added(100)[0].exemplars.len(), 2);
    assert_eq!(added(1)[0].exemplars.len(), 1);
    assert_eq!(added(0)[0].exemplars.len(), 0);
}

#[test]
fn series_past_the_cap_are_left_out_and_said_so() {
    let grid = Grid::instant(T0, T0 + 60 * SEC);
    let (got, capped) = run_capped("{ } | rate() by(name)", grid, &traces(), 1);
    assert!(capped);
    assert_eq!(got.len(), 1);
    let (got, capped) = run_capped("{ } | rate() by(name)", grid, &traces(), 2);
    assert!(!capped);
    assert_eq!(got.len(), 2);
}

/// Evaluators added up past the cap keep the same series however their
/// maps order them: the first evaluator's, then the others' by their labels.
#[test]
fn series_added_up_past_the_cap_are_the_same_every_time() {
    let grid = Grid::instant(T0, T0 + 60 * SEC);
    let compiled =
        Compiled::new(parse("{ } | rate() by(name)").expect("parses")).expect("compiles");
    let traces: Vec<Trace> = (0..30u8)
        .map(|t| {
            trace(
                t + 1,
                vec![span(1, None, "a", &format!("op{t:02}"), SEC, 10)],
            )
        })
        .collect();
    let kept = || {
        let mut first = MetricsEval::new(&compiled, grid, 10, 0).expect("metrics");
        let mut second = MetricsEval::new(&compiled, grid, usize::MAX, 0).expect("metrics");
        for (i, t) in traces.iter().enumerate() {
            let eval = if i < 4 { &mut first } else { &mut second };
            eval.observe(&compiled, t, &compiled.eval(t));
        }
        first.merge(second);
        assert!(first.series_capped());
        let mut names: Vec<String> = first
            .finish()
            .iter()
            .map(|s| format!("{:?}", s.labels))
            .collect();
        names.sort();
        names
    };
    let once = kept();
    assert_eq!(once.len(), 10);
    assert!(
        once[9].contains("op09"),
        "the first four, then op04..op09: {once:?}"
    );
    for _ in 0..20 {
        assert_eq!(kept(), once);
    }
}

#[test]
fn go_durations_print_as_tempo_labels_them() {
    for (ns, text) in [
        (0, "0s"),
        (500, "500ns"),
        (1_500, "1.5µs"),
        (1_500_000, "1.5ms"),
        (1_000_000_000, "1s"),
        (90_000_000_000, "1m30s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-2_000_000, "-2ms"),
    ] {
        assert_eq!(go_duration(ns), text, "{ns}");
    }
}

/// Series accumulated on two stores and added equal the series of one
/// store holding both halves, for every function; cells of another shape
/// are refused.
#[test]
fn series_of_two_stores_add_up_to_one_stores() {
    let grid = Grid::range(T0, T0 + 30 * SEC, 10 * SEC);
    let t = traces();
    for q in [
        "{ } | rate() by(resource.service.name)",
        "{ } | count_over_time()",
        "{ } | min_over_time(duration)",
        "{ } | max_over_time(duration) by(name)",
        "{ } | sum_over_time(duration)",
        "{ } | avg_over_time(duration)",
        "{ } | quantile_over_time(duration, 0.5, 0.9)",
        "{ } | histogram_over_time(duration) by(name)",
        "{ } | count_over_time() by(name) | topk(1)",
        "{ } | compare({ status = error }, 1)",
    ] {
        let compiled = Compiled::new(parse(q).expect("parses")).expect("compiles");
        let whole = run(q, grid, &t);
        let mut total = MetricsEval::new(&compiled, grid, 1_000, 100).expect("metrics");
        for part in t.chunks(1) {
            let mut one = MetricsEval::new(&compiled, grid, 1_000, 100).expect("metrics");
            for trace in part {
                one.observe(&compiled, trace, &compiled.eval(trace));
            }
            let (raw, capped) = one.into_raw();
            total.add_raw(raw, capped).expect("the same shape");
        }
        assert_eq!(table(&total.finish()), table(&whole), "{q}");
    }
    let rate = Compiled::new(parse("{ } | rate()").expect("parses")).expect("compiles");
    let mut eval = MetricsEval::new(&rate, grid, 1_000, 100).expect("metrics");
    let shaped = |cells| RawSeries {
        key: Vec::new(),
        cells,
        exemplars: Vec::new(),
    };
    assert!(eval
        .add_raw(vec![shaped(Cells::Count(vec![1.0; 2]))], false)
        .is_err());
    assert!(eval
        .add_raw(vec![shaped(Cells::Sum(vec![1.0; grid.len()]))], false)
        .is_err());
    assert!(eval
        .add_raw(vec![shaped(Cells::Count(vec![1.0; grid.len()]))], false)
        .is_ok());
}

#[test]
fn a_count_that_matched_nothing_is_a_series_of_zeros_unless_nothing_can_match() {
    let grid = Grid::range(T0, T0 + 30 * SEC, 10 * SEC);
    let t = traces();
    assert_eq!(
        table(&run("{ span.nosuch = 1 } | rate()", grid, &t)),
        vec![(
            "__name__=rate".to_owned(),
            vec![(0, 0.0), (10, 0.0), (20, 0.0), (30, 0.0)]
        )]
    );
    for q in [
        "{ false } | count_over_time()",
        "{ 1 = 2 } | rate()",
        "{ span.nosuch = 1 } | rate() by(name)",
        "{ span.nosuch = 1 } | max_over_time(duration)",
    ] {
        assert!(run(q, grid, &t).is_empty(), "{q}");
    }
}

#[test]
fn compare_counts_each_field_value_of_the_selection_and_of_the_rest() {
    let grid = Grid::instant(T0, T0 + 30 * SEC);
    let t = traces();
    let got = table(&run("{ } | compare({ status = error }, 1)", grid, &t));
    let get = |labels: &str| got.iter().find(|(l, _)| l == labels).map(|(_, s)| s[0].1);
    // One error span (b's), three others (two of a, one of b).
    assert_eq!(
        get("__meta_type=selection,resource.service.name=b"),
        Some(1.0)
    );
    assert_eq!(
        get("__meta_type=selection_total,resource.service.name=nil"),
        Some(1.0)
    );
    assert_eq!(
        get("__meta_type=baseline_total,resource.service.name=nil"),
        Some(3.0)
    );
    // The top 1 value of each field: a (two spans) over b (one).
    assert_eq!(
        get("__meta_type=baseline,resource.service.name=a"),
        Some(2.0)
    );
    assert_eq!(get("__meta_type=baseline,resource.service.name=b"), None);
    assert_eq!(get("__meta_type=baseline,rootName=root"), Some(3.0));
    assert_eq!(get("__meta_type=selection,status=error"), Some(1.0));
    // Durations, IDs and start times are not counted.
    assert!(
        got.iter()
            .all(|(l, _)| !l.contains("duration") && !l.contains("span:id")),
        "{got:?}"
    );
    // A window narrows the selection: b's error at 25 s is outside 0-20 s.
    let windowed = format!(
        "{{ }} | compare({{ status = error }}, 10, {}, {})",
        T0,
        T0 + 20 * SEC
    );
    let got = table(&run(&windowed, grid, &t));
    assert!(
        got.iter()
            .all(|(l, _)| !l.starts_with("__meta_type=selection")),
        "{got:?}"
    );
    assert!(got
        .iter()
        .any(|(l, s)| l == "__meta_type=baseline,status=error" && s[0].1 == 1.0));
}
