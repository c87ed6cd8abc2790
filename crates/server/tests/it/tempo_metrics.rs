//! TraceQL metrics held to Grafana Tempo 3.0.3's own answers: the queries
//! of `tests/traceql/metrics-queries.txt` over the TraceQL fixture
//! (`traces.json`), asked of Tempo by `tests/traceql/record_metrics.py` and
//! recorded in `tempo-metrics-answers.json` (see that directory's README).
//! Each query is asked as a range query over the minute after the traces'
//! base time with a 5 s step, and as an instant query over the same minute;
//! tracedb must give the same series with the same values, or a 400 that
//! the README lists.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::harness::{post_traces, Server};
use crate::traceql::{encoded, fixture, shifted};

const SEC: u64 = 1_000_000_000;

/// Queries Tempo answers that tracedb refuses, with the words its 400 says
/// (the README's metrics section lists them).
const REFUSED: &[(&str, &str)] = &[
    // Tempo answers no series; an average of names has no meaning.
    ("{} | avg_over_time(name)", "needs a numeric field"),
    // Nested-set numbers follow each store's order of sibling spans.
    (
        "{} | count_over_time() by(nestedSetParent)",
        "nestedSetParent",
    ),
];

/// The sampling hint: tracedb answers exactly, so its answer is checked
/// against Tempo's to the same query without the hint.
const SAMPLED: &str = " with(sample=true)";

/// Array attributes of the fixture: `compare()` leaves them out (Tempo
/// counts each element, and a nil for the array).
const ARRAYS: &[&str] = &["span.tags", "span.codes", "span.weights"];

/// A series' labels as `key=type:value` text, in key order, joined by
/// [`SEP`].
type Labels = String;

const SEP: &str = "\u{1f}";

/// One answer, reduced to what must agree: the HTTP status and, for a 200,
/// each series' samples (ms after the base, value) or instant value.
#[derive(Debug, PartialEq)]
enum Answer {
    Refused(u16, String),
    Range(BTreeMap<Labels, Vec<(i64, f64)>>),
    Instant(BTreeMap<Labels, f64>),
}

/// A label value's text, the same whichever way a number was written.
fn label_value(kind: &str, text: &str) -> String {
    match kind {
        "doubleValue" => format!("{}", text.parse::<f64>().expect("a double label")),
        "boolValue" => text.to_ascii_lowercase(),
        _ => text.to_owned(),
    }
}

/// Labels from a recorded answer: `{key: [type, text]}`.
fn recorded_labels(labels: &Value) -> Labels {
    let map = labels.as_object().expect("labels");
    let mut out: Vec<String> = map
        .iter()
        .map(|(k, v)| {
            let kind = v[0].as_str().expect("type");
            let text = v[1].as_str().expect("text");
            format!("{k}={kind}:{}", label_value(kind, text))
        })
        .collect();
    out.sort();
    out.join(SEP)
}

/// Labels from a live answer: `[{key, value: {type: value}}]`.
fn live_labels(labels: &Value) -> Labels {
    let mut out: Vec<String> = labels
        .as_array()
        .expect("labels")
        .iter()
        .map(|l| {
            let key = l["key"].as_str().expect("key");
            let (kind, v) = l["value"]
                .as_object()
                .and_then(|o| o.iter().next())
                .map_or(("none", &Value::Null), |(k, v)| (k.as_str(), v));
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            format!("{key}={kind}:{}", label_value(kind, &text))
        })
        .collect();
    out.sort();
    out.join(SEP)
}

fn number(v: &Value) -> f64 {
    v.as_f64().expect("a number")
}

/// The answer Tempo gave, as recorded.
fn recorded(answer: &Value, instant: bool) -> Answer {
    let status = answer["status"].as_u64().expect("status") as u16;
    if status != 200 {
        let error = answer["error"].as_str().unwrap_or_default().to_owned();
        return Answer::Refused(status, error);
    }
    let series = answer["series"].as_array().expect("series");
    if instant {
        return Answer::Instant(
            series
                .iter()
                .map(|s| (recorded_labels(&s["labels"]), number(&s["value"])))
                .collect(),
        );
    }
    Answer::Range(
        series
            .iter()
            .map(|s| {
                let samples = s["samples"]
                    .as_array()
                    .expect("samples")
                    .iter()
                    .map(|p| (p[0].as_i64().expect("ms"), number(&p[1])))
                    .collect();
                (recorded_labels(&s["labels"]), samples)
            })
            .collect(),
    )
}

/// tracedb's answer to `q`, its times made relative to `base`.
fn ask(server: &Server, q: &str, base: u64, instant: bool) -> Answer {
    let (start, end) = (base / SEC, base / SEC + 60);
    let path = if instant {
        format!(
            "/api/metrics/query?q={}&start={start}&end={end}",
            encoded(q)
        )
    } else {
        format!(
            "/api/metrics/query_range?q={}&start={start}&end={end}&step=5s",
            encoded(q)
        )
    };
    let r = server.http_call("GET", &path, &[], b"").expect("GET");
    let text = String::from_utf8_lossy(&r.body).into_owned();
    if r.status != 200 {
        return Answer::Refused(r.status, text);
    }
    let body: Value = serde_json::from_str(&text).expect("JSON");
    assert!(body.get("status").is_none(), "{q}: a whole answer: {text}");
    // Tempo's JSON leaves an empty list out.
    let series = body["series"].as_array().map_or(&[][..], Vec::as_slice);
    let value = |p: &Value| p.get("value").map_or(0.0, number);
    if instant {
        return Answer::Instant(
            series
                .iter()
                .map(|s| (live_labels(&s["labels"]), value(s)))
                .collect(),
        );
    }
    let base_ms = (base / 1_000_000) as i64;
    Answer::Range(
        series
            .iter()
            .map(|s| {
                let samples = s["samples"]
                    .as_array()
                    .expect("samples")
                    .iter()
                    .map(|p| {
                        let ms: i64 = p["timestampMs"]
                            .as_str()
                            .expect("a string")
                            .parse()
                            .expect("ms");
                        (ms - base_ms, value(p))
                    })
                    .collect();
                (live_labels(&s["labels"]), samples)
            })
            .collect(),
    )
}

/// The same numbers, to the last few bits (Tempo and tracedb add in
/// different orders).
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn agree(tempo: &Answer, ours: &Answer) -> bool {
    match (tempo, ours) {
        (Answer::Refused(a, _), Answer::Refused(b, _)) => a == b,
        (Answer::Instant(a), Answer::Instant(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, va), (kb, vb))| ka == kb && close(*va, *vb))
        }
        (Answer::Range(a), Answer::Range(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|((ka, sa), (kb, sb))| {
                    ka == kb
                        && sa.len() == sb.len()
                        && sa
                            .iter()
                            .zip(sb)
                            .all(|((ta, va), (tb, vb))| ta == tb && close(*va, *vb))
                })
        }
        _ => false,
    }
}

/// A series' labels, back from [`Labels`]: (key, type, value).
fn parts(labels: &str) -> Vec<(&str, &str, &str)> {
    labels
        .split(SEP)
        .map(|l| {
            let (key, rest) = l.split_once('=').expect("key=");
            let (kind, value) = rest.split_once(':').expect("type:");
            (key, kind, value)
        })
        .collect()
}

/// Each series' total over the range, by labels.
fn totals(a: &Answer) -> BTreeMap<&str, f64> {
    match a {
        Answer::Instant(m) => m.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
        Answer::Range(m) => m
            .iter()
            .map(|(k, s)| (k.as_str(), s.iter().map(|p| p.1).sum()))
            .collect(),
        Answer::Refused(..) => BTreeMap::new(),
    }
}

/// Per (side, field) of `compare()`: Tempo's counts of its values (nil
/// left out), tracedb's, and whether Tempo counted a nil.
type Side = (Vec<f64>, Vec<f64>, bool);

/// `compare()`'s series agree where Tempo's are not artefacts of its
/// columns: a value's count on each side is the same, except that Tempo
/// also counts spans lacking a field that has a dedicated column (as the
/// value nil, in the field's total too), counts array elements, and breaks
/// ties at the `top` cut at random; and `span:childCount` differs in
/// root-less traces (see the README of tests/traceql).
fn compare_agrees(tempo: &Answer, ours: &Answer, top: usize) -> Result<usize, String> {
    let (t, o) = (totals(tempo), totals(ours));
    if o.is_empty() {
        return Err(format!("no series: {ours:?}"));
    }
    let field = |labels: &str| -> (String, String, String) {
        let p = parts(labels);
        let side = p.iter().find(|x| x.0 == "__meta_type").map(|x| x.2);
        let f = p.iter().find(|x| x.0 != "__meta_type").expect("a field");
        (
            side.unwrap_or("").to_owned(),
            f.0.to_owned(),
            f.2.to_owned(),
        )
    };
    let skipped = |name: &str| ARRAYS.contains(&name) || name == "span:childCount";
    // (side, field) -> the counts of its values, Tempo's and ours.
    let mut sides: BTreeMap<(String, String), Side> = BTreeMap::new();
    for (labels, n) in &t {
        let (side, name, value) = field(labels);
        let e = sides.entry((side, name)).or_default();
        if value == "nil" {
            e.2 = true;
        } else {
            e.0.push(*n);
        }
    }
    for (labels, n) in &o {
        let (side, name, _) = field(labels);
        sides.entry((side, name)).or_default().1.push(*n);
    }
    let mut checked = 0;
    let series = |a: &Answer, labels: &str| match a {
        Answer::Instant(m) => m.get(labels).map(|v| format!("{v}")),
        Answer::Range(m) => m.get(labels).map(|s| format!("{s:?}")),
        Answer::Refused(..) => None,
    };
    for labels in t.keys().chain(o.keys()) {
        let (side, name, value) = field(labels);
        if skipped(&name) || value == "nil" {
            continue;
        }
        let (theirs, mine, tempo_nil) = &sides[&(side.clone(), name.clone())];
        if side.ends_with("_total") {
            if *tempo_nil
                || sides
                    .get(&(side.replace("_total", ""), name.clone()))
                    .is_some_and(|s| s.2)
            {
                continue;
            }
        } else if series(tempo, labels).is_none() || series(ours, labels).is_none() {
            // Left out on one side: only a value at the cut, where Tempo
            // breaks ties at random or a nil of its took a place.
            let n = t.get(*labels).or(o.get(*labels)).copied().unwrap_or(0.0);
            let cut = |v: &Vec<f64>| v.iter().copied().fold(f64::INFINITY, f64::min);
            let at_cut =
                (mine.len() >= top && n <= cut(mine)) || (theirs.len() >= top && n <= cut(theirs));
            if at_cut || *tempo_nil {
                continue;
            }
            return Err(format!(
                "{labels}: tempo {:?}, tracedb {:?}",
                series(tempo, labels),
                series(ours, labels)
            ));
        }
        let (a, b) = (series(tempo, labels), series(ours, labels));
        let same = match (tempo, ours) {
            (Answer::Instant(x), Answer::Instant(y)) => close(x[*labels], y[*labels]),
            (Answer::Range(x), Answer::Range(y)) => x[*labels] == y[*labels],
            _ => false,
        };
        if !same {
            return Err(format!("{labels}: tempo {a:?}, tracedb {b:?}"));
        }
        checked += 1;
    }
    Ok(checked)
}

/// `{} | sum_over_time(span.http.status_code)` from the fixture itself:
/// the int codes of the spans starting in each 5 s interval (right-closed),
/// or in the minute. Tempo sums only values of the type of the first it
/// reads (a nil for spans without an int code), so its sums are far off.
fn status_code_sums(instant: bool) -> Answer {
    let traces: Value = serde_json::from_str(&fixture("traces.json")).expect("traces");
    let mut sums: BTreeMap<i64, f64> = BTreeMap::new();
    for rs in traces["resourceSpans"].as_array().expect("resourceSpans") {
        for ss in rs["scopeSpans"].as_array().expect("scopeSpans") {
            for span in ss["spans"].as_array().expect("spans") {
                let start: u64 = span["startTimeUnixNano"]
                    .as_str()
                    .expect("start")
                    .parse()
                    .expect("ns");
                let code = span["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find_map(|a| {
                        (a["key"] == "http.status_code")
                            .then(|| a["value"]["intValue"].as_str()?.parse::<f64>().ok())
                            .flatten()
                    });
                let Some(code) = code else { continue };
                let end = if instant {
                    60_000
                } else {
                    (start.div_ceil(5 * SEC) * 5000) as i64
                };
                *sums.entry(end).or_insert(0.0) += code;
            }
        }
    }
    let label = "__name__=stringValue:sum_over_time".to_owned();
    if instant {
        return Answer::Instant(BTreeMap::from([(label, sums[&60_000])]));
    }
    Answer::Range(BTreeMap::from([(label, sums.into_iter().collect())]))
}

#[test]
fn metrics_answers_as_tempo_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    // A whole minute, as the recording's base: Tempo's grid is aligned to
    // the step, so the same offsets fall in the same intervals.
    let base = (now / (60 * SEC) - 2) * 60 * SEC;
    let r = post_traces(
        &server,
        &[("Content-Type", "application/json")],
        &shifted(&fixture("traces.json"), base),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(String::from_utf8_lossy(&r.body), "{}", "every span kept");

    let golden: Value =
        serde_json::from_str(&fixture("tempo-metrics-answers.json")).expect("answers");
    let cases = golden["queries"].as_array().expect("queries");
    let queries = fixture("metrics-queries.txt");
    assert_eq!(
        cases.len(),
        queries.lines().filter(|l| !l.trim().is_empty()).count(),
        "an answer per query"
    );
    let (mut same, mut refused, mut compared) = (0, 0, 0);
    let mut differ = Vec::new();
    for case in cases {
        let q = case["q"].as_str().expect("q");
        // A sampled query is held to Tempo's exact answer.
        let unhinted = q.replace(SAMPLED, "");
        let exact = cases
            .iter()
            .find(|c| c["q"] == unhinted.as_str())
            .unwrap_or_else(|| panic!("{q}: no unhinted query"));
        for (kind, instant) in [("range", false), ("instant", true)] {
            let tempo = recorded(&exact[kind], instant);
            let ours = ask(&server, q, base, instant);
            let verdict = if q.contains("compare(") {
                compare_agrees(&tempo, &ours, 10).map(|n| compared += n)
            } else if q == "{} | sum_over_time(span.http.status_code)" {
                if agree(&status_code_sums(instant), &ours) {
                    Ok(())
                } else {
                    Err(format!(
                        "the fixture's sums: {:?}",
                        status_code_sums(instant)
                    ))
                }
            } else if agree(&tempo, &ours) {
                Ok(())
            } else {
                Err(String::new())
            };
            match verdict {
                Ok(()) => {
                    same += 1;
                    continue;
                }
                Err(why) if !why.is_empty() => {
                    differ.push(format!("{q} ({kind}): {why}\n  tracedb: {ours:?}"));
                    continue;
                }
                Err(_) => {}
            }
            if let (Answer::Refused(400, why), Some((_, words))) =
                (&ours, REFUSED.iter().find(|(r, _)| *r == q))
            {
                if why.contains(words) {
                    refused += 1;
                    continue;
                }
            }
            differ.push(format!(
                "{q} ({kind})\n  tempo:   {tempo:?}\n  tracedb: {ours:?}"
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} answers differ from Tempo's:\n{}",
        differ.len(),
        cases.len() * 2,
        differ.join("\n")
    );
    assert_eq!(refused, REFUSED.len() * 2, "every listed refusal is used");
    assert!(same > 0);
    // Drilldown's breakdown by an attribute Tempo keeps in a typed column:
    // `!= nil` finds the values of the column's type, so the series are
    // Tempo's by the code without its nil (the string-typed codes).
    let by_code = cases
        .iter()
        .find(|c| c["q"] == "{} | rate() by(span.http.status_code)")
        .expect("the breakdown by code");
    for (kind, instant) in [("range", false), ("instant", true)] {
        let nil = "span.http.status_code=stringValue:nil";
        let tempo = match recorded(&by_code[kind], instant) {
            Answer::Range(mut m) => {
                m.remove(nil).expect("Tempo's nil series");
                Answer::Range(m)
            }
            Answer::Instant(mut m) => {
                m.remove(nil).expect("Tempo's nil series");
                Answer::Instant(m)
            }
            refused => panic!("Tempo answered the breakdown: {refused:?}"),
        };
        let q = "{ span.http.status_code != nil } | rate() by(span.http.status_code)";
        let ours = ask(&server, q, base, instant);
        assert!(
            agree(&tempo, &ours),
            "{q} ({kind})\n  tempo's, without nil: {tempo:?}\n  tracedb: {ours:?}"
        );
    }
    assert!(compared > 100, "compare() series checked: {compared}");
}
