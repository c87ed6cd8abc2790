//! TraceQL metrics through Tempo's HTTP API (`/api/metrics/query_range`,
//! `/api/metrics/query`), over a fixed set of traces whose series are
//! worked out by hand from Tempo's rules: every function Grafana's Traces
//! Drilldown asks for, verbatim, plus `by`, instant queries, exemplars,
//! the step rules and the refusals.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::harness::{post_traces, HttpResponse, Server};
use crate::traceql::encoded;

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// Twelve traces, one every 15 s from `base` + 1 s: a `frontend` root
/// (server, 100-400 ms, an error on every third), a `cart` server child
/// and a `db` client grandchild of 10 ms.
fn traces(base: u64) -> Vec<u8> {
    traces_of(base, &["frontend", "cart", "db"])
}

/// The spans of [`traces`] of these services only.
fn traces_of(base: u64, services: &[&str]) -> Vec<u8> {
    let span = |t: u64,
                id: u64,
                parent: Option<u64>,
                name: &str,
                kind: u8,
                start: u64,
                dur: u64| {
        let mut s = json!({
            "traceId": format!("{:032x}", 0xabc000 + t),
            "spanId": format!("{:016x}", t * 16 + id),
            "name": name, "kind": kind,
            "startTimeUnixNano": start.to_string(),
            "endTimeUnixNano": (start + dur).to_string(),
            "attributes": [{ "key": "http.route", "value": { "stringValue": format!("/r{}", t % 2) } }],
        });
        if let Some(p) = parent {
            s["parentSpanId"] = json!(format!("{:016x}", t * 16 + p));
        }
        if id == 1 && t.is_multiple_of(3) {
            s["status"] = json!({ "code": 2 });
        }
        s
    };
    let resource = |service: &str, spans: Vec<Value>| {
        json!({
            "resource": { "attributes": [{ "key": "service.name", "value": { "stringValue": service } }] },
            "scopeSpans": [{ "spans": spans }],
        })
    };
    let (mut front, mut cart, mut db) = (Vec::new(), Vec::new(), Vec::new());
    for t in 0..12u64 {
        let start = base + SEC + t * 15 * SEC;
        front.push(span(t, 1, None, "GET /", 2, start, 100 * MS * (1 + t % 4)));
        cart.push(span(t, 2, Some(1), "add", 2, start + MS, 50 * MS));
        db.push(span(t, 3, Some(2), "select", 3, start + 2 * MS, 10 * MS));
    }
    let all = [
        resource("frontend", front),
        resource("cart", cart),
        resource("db", db),
    ];
    let kept: Vec<Value> = all
        .into_iter()
        .filter(|r| {
            let name = &r["resource"]["attributes"][0]["value"]["stringValue"];
            services.iter().any(|s| name == s)
        })
        .collect();
    let body = json!({ "resourceSpans": kept });
    serde_json::to_vec(&body).expect("JSON")
}

fn get(server: &Server, path: &str) -> HttpResponse {
    server.http_call("GET", path, &[], b"").expect("GET")
}

/// A label value as text: `{"stringValue": "a"}` -> `a`.
fn text(v: &Value) -> String {
    let v = &v["value"];
    for k in ["stringValue", "intValue", "boolValue"] {
        if let Some(x) = v.get(k) {
            return x.as_str().map_or_else(|| x.to_string(), str::to_owned);
        }
    }
    v["doubleValue"].to_string()
}

fn labels(series: &Value) -> String {
    series["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|l| format!("{}={}", l["key"].as_str().expect("key"), text(l)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A sample's value: absent means 0, as Tempo writes it.
fn value(v: &Value) -> f64 {
    v.get("value")
        .map_or(0.0, |v| v.as_f64().expect("a number"))
}

/// labels -> [(seconds after `base`, value)] of a range answer.
fn range(
    server: &Server,
    q: &str,
    base: u64,
    end: u64,
    step: &str,
) -> BTreeMap<String, Vec<(i64, f64)>> {
    let path = format!(
        "/api/metrics/query_range?q={}&start={}&end={}&step={step}",
        encoded(q),
        base / SEC,
        end / SEC
    );
    let r = get(server, &path);
    assert_eq!(r.status, 200, "{q}: {}", String::from_utf8_lossy(&r.body));
    let body: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert!(body.get("status").is_none(), "{q}: whole: {body}");
    body["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| {
            let samples = s["samples"]
                .as_array()
                .expect("samples")
                .iter()
                .map(|p| {
                    let ms: u64 = p["timestampMs"]
                        .as_str()
                        .expect("string")
                        .parse()
                        .expect("ms");
                    ((ms as i64 - (base / MS) as i64) / 1_000, value(p))
                })
                .collect();
            (labels(s), samples)
        })
        .collect()
}

fn rows(pairs: &[(&str, &[(i64, f64)])]) -> BTreeMap<String, Vec<(i64, f64)>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

#[test]
fn metrics_queries_answer_with_tempos_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    // A minute boundary ten minutes back: every trace is in the past.
    let base = (now - 600 * SEC) / (60 * SEC) * (60 * SEC);
    let end = base + 180 * SEC;
    let r = post_traces(
        &server,
        &[("Content-Type", "application/json")],
        &traces(base),
    );
    assert_eq!(r.status, 200);

    // A week, past Tempo's 24 h: counted from the metrics cells. Twelve
    // traces of three spans.
    let week = range(
        &server,
        "{} | count_over_time()",
        end - 7 * 86_400 * SEC,
        end,
        "3600s",
    );
    let total: f64 = week.values().flatten().map(|p| p.1).sum();
    assert_eq!(total, 36.0, "{week:?}");

    // Drilldown's RED panels, verbatim. With step 60 s the grid is
    // (base - 60 s, base], ..., (base + 120 s, base + 180 s]: four roots a
    // minute after the first.
    let per_min = |n: f64| n / 60.0;
    assert_eq!(
        range(
            &server,
            "{nestedSetParent<0 && true} | rate()  with(sample=true)",
            base,
            end,
            "60s"
        ),
        rows(&[(
            "__name__=rate",
            &[
                (0, 0.0),
                (60, per_min(4.0)),
                (120, per_min(4.0)),
                (180, per_min(4.0))
            ]
        )])
    );
    // Errors on the roots of traces 0, 3, 6 and 9.
    assert_eq!(
        range(
            &server,
            "{nestedSetParent<0 && true && status=error} | rate()  with(sample=true)",
            base,
            end,
            "60s"
        ),
        rows(&[(
            "__name__=rate",
            &[
                (0, 0.0),
                (60, per_min(2.0)),
                (120, per_min(1.0)),
                (180, per_min(1.0))
            ]
        )])
    );
    // Root durations 100, 200, 300, 400 ms each minute: buckets 2^27,
    // 2^28 and (twice) 2^29 ns.
    let b = |exp: i32| format!("__bucket={}", 2f64.powi(exp) / 1e9);
    let hist = range(
        &server,
        "{nestedSetParent<0 && true} | histogram_over_time(duration) with(sample=true)",
        base,
        end,
        "60s",
    );
    let minutes = |n: f64| vec![(0, 0.0), (60, n), (120, n), (180, n)];
    let want: BTreeMap<String, Vec<(i64, f64)>> = [
        (b(27), minutes(1.0)),
        (b(28), minutes(1.0)),
        (b(29), minutes(2.0)),
    ]
    .into_iter()
    .collect();
    assert_eq!(hist, want);
    // The breakdown and its duration metric.
    assert_eq!(
        range(
            &server,
            "{nestedSetParent<0 && true && resource.service.name != nil} | rate() by(resource.service.name)",
            base,
            end,
            "60s"
        ),
        rows(&[(
            "resource.service.name=frontend",
            &[(0, 0.0), (60, per_min(4.0)), (120, per_min(4.0)), (180, per_min(4.0))]
        )])
    );
    // 0.9 of four values is the 4th, which fills the 2^29 bucket: its bound.
    let p90 = 2f64.powi(29) / 1e9;
    assert_eq!(
        range(
            &server,
            "{nestedSetParent<0 && true && resource.service.name != nil} | quantile_over_time(duration, 0.9) by(resource.service.name)",
            base,
            end,
            "60s"
        ),
        rows(&[(
            "resource.service.name=frontend,p=0.9",
            &[(0, 0.0), (60, p90), (120, p90), (180, p90)]
        )])
    );
    // Every span, by service; one service's by two fields.
    assert_eq!(
        range(
            &server,
            "{ } | count_over_time() by(resource.service.name)",
            base,
            end,
            "60s"
        ),
        rows(&[
            ("resource.service.name=cart", &minutes(4.0)),
            ("resource.service.name=db", &minutes(4.0)),
            ("resource.service.name=frontend", &minutes(4.0)),
        ])
    );
    assert_eq!(
        range(
            &server,
            "{ resource.service.name = \"cart\" } | count_over_time() by(span.http.route, name)",
            base,
            end,
            "60s"
        ),
        rows(&[
            ("span.http.route=/r0,name=add", &minutes(2.0)),
            ("span.http.route=/r1,name=add", &minutes(2.0)),
        ])
    );
    // Structure: the client spans below a frontend span; their durations.
    assert_eq!(
        range(&server, "{ resource.service.name = \"frontend\" } >> { kind = client } | max_over_time(duration)", base, end, "60s"),
        rows(&[("__name__=max_over_time", &[(60, 0.01), (120, 0.01), (180, 0.01)])])
    );
    // The slowest root per minute is 400 ms; the slowest above 300 ms only.
    assert_eq!(
        range(
            &server,
            "{ nestedSetParent < 0 } | max_over_time(duration) > 300ms",
            base,
            end,
            "60s"
        ),
        rows(&[(
            "__name__=max_over_time",
            &[(60, 0.4), (120, 0.4), (180, 0.4)]
        )])
    );

    // Exemplars: trace and span IDs of spans the query counted.
    let path = format!(
        "/api/metrics/query_range?q={}&start={}&end={}&step=60s",
        encoded("{nestedSetParent<0} | rate()"),
        base / SEC,
        end / SEC
    );
    let body: Value = serde_json::from_slice(&get(&server, &path).body).expect("JSON");
    let exemplars = body["series"][0]["exemplars"]
        .as_array()
        .expect("exemplars");
    assert_eq!(exemplars.len(), 12, "{body}");
    for e in exemplars {
        let trace = e["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .find(|l| l["key"] == "trace:id")
            .map(text)
            .expect("trace:id");
        assert!(trace.starts_with("abc0"), "{trace}");
        assert_eq!(value(e), per_min(4.0), "{e}");
    }

    // Instant: one value over [start, end].
    let path = format!(
        "/api/metrics/query?q={}&start={}&end={}",
        encoded("{ } | count_over_time() by(resource.service.name)"),
        base / SEC,
        end / SEC
    );
    let r = get(&server, &path);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let body: Value = serde_json::from_slice(&r.body).expect("JSON");
    let got: BTreeMap<String, f64> = body["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| (labels(s), value(s)))
        .collect();
    let want: BTreeMap<String, f64> = ["cart", "db", "frontend"]
        .iter()
        .map(|s| (format!("resource.service.name={s}"), 12.0))
        .collect();
    assert_eq!(got, want);

    // compare(): the error spans (four frontend roots) against the other
    // 32, field by field; then with a window holding the first error only.
    let compare = |q: &str| -> BTreeMap<String, f64> {
        let path = format!(
            "/api/metrics/query?q={}&start={}&end={}",
            encoded(q),
            base / SEC,
            end / SEC
        );
        let r = get(&server, &path);
        assert_eq!(r.status, 200, "{q}: {}", String::from_utf8_lossy(&r.body));
        let body: Value = serde_json::from_slice(&r.body).expect("JSON");
        body["series"]
            .as_array()
            .expect("series")
            .iter()
            .map(|s| (labels(s), value(s)))
            .collect()
    };
    let got = compare("{ } | compare({ status = error })");
    for (series, n) in [
        ("__meta_type=selection,resource.service.name=frontend", 4.0),
        ("__meta_type=baseline,resource.service.name=frontend", 8.0),
        ("__meta_type=baseline,resource.service.name=cart", 12.0),
        ("__meta_type=baseline,resource.service.name=db", 12.0),
        ("__meta_type=selection_total,resource.service.name=nil", 4.0),
        ("__meta_type=baseline_total,resource.service.name=nil", 32.0),
        ("__meta_type=selection,status=error", 4.0),
        ("__meta_type=baseline,status=unset", 32.0),
        ("__meta_type=baseline,span:childCount=0", 12.0),
        ("__meta_type=baseline,span:childCount=1", 20.0),
        ("__meta_type=selection,span.http.route=/r0", 2.0),
        ("__meta_type=selection,span.http.route=/r1", 2.0),
    ] {
        assert_eq!(got.get(series), Some(&n), "{series} in {got:?}");
    }
    assert!(!got.contains_key("__meta_type=selection,resource.service.name=cart"));
    let got = compare(&format!(
        "{{ }} | compare({{ status = error }}, 10, {}, {})",
        base,
        base + 16 * SEC
    ));
    assert_eq!(
        got.get("__meta_type=selection,resource.service.name=frontend"),
        Some(&1.0),
        "{got:?}"
    );
    assert_eq!(
        got.get("__meta_type=baseline,resource.service.name=frontend"),
        Some(&11.0),
        "{got:?}"
    );
    // Drilldown's first question: anything in the last minute (none here).
    let r = get(
        &server,
        &format!(
            "/api/metrics/query_range?q={}&since=1m",
            encoded("{} | rate()")
        ),
    );
    assert_eq!(r.status, 200);

    // Refusals, each saying what is wrong.
    for (path, needle) in [
        (
            format!(
                "/api/metrics/query_range?q={}&start={}&end={}&step=1s",
                encoded("{} | rate()"),
                base / SEC,
                base / SEC + 86_400
            ),
            "step of 1s is too small, minimum step for given range is 8.64s",
        ),
        (
            format!(
                "/api/metrics/query_range?q={}&start={}&end={}",
                encoded("{ span.http.url = \"/r1\" } | rate()"),
                base / SEC - 100_000,
                base / SEC
            ),
            "exceeds the maximum allowed duration of 24h0m0s",
        ),
        (
            format!(
                "/api/metrics/query_range?q={}",
                encoded("{} | quantile_over_time(duration, 1.5)")
            ),
            "outside [0, 1]",
        ),
        (
            format!("/api/metrics/query_range?q={}", encoded("{}")),
            "not a metrics query",
        ),
        (
            format!(
                "/api/metrics/query_range?q={}",
                encoded("{} | rate() by(nestedSetParent)")
            ),
            "nestedSetParent (their numbers follow the order a store keeps sibling spans in",
        ),
        (
            format!("/api/search?q={}", encoded("{} | rate()")),
            "is a metrics query",
        ),
    ] {
        let r = get(&server, &path);
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 400, "{path}: {body}");
        assert!(body.contains(needle), "{path}: {body}");
    }
}

/// Through `tracedb query`: the series of one node holding every span, from
/// a group whose two nodes each hold part of every trace (frontend spans on
/// one, cart and db on the other) and a second group with a whole copy, as
/// long as the second group answers; then from the split group alone.
#[test]
fn the_query_tier_adds_its_nodes_series() {
    let dirs: Vec<_> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let [all, a1, a2, b1] = [0, 1, 2, 3].map(|i| Server::start(dirs[i].path()));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let base = (now - 600 * SEC) / (60 * SEC) * (60 * SEC);
    let end = base + 180 * SEC;
    let json = [("Content-Type", "application/json")];
    for (server, services) in [
        (&all, &["frontend", "cart", "db"][..]),
        (&b1, &["frontend", "cart", "db"][..]),
        (&a1, &["frontend"][..]),
        (&a2, &["cart", "db"][..]),
    ] {
        let r = post_traces(server, &json, &traces_of(base, services));
        assert_eq!(r.status, 200);
    }
    let queries = [
        "{ } | count_over_time() by(resource.service.name)",
        "{nestedSetParent<0 && true} | rate()  with(sample=true)",
        "{nestedSetParent<0 && true && status=error} | rate()  with(sample=true)",
        "{nestedSetParent<0 && true} | histogram_over_time(duration) with(sample=true)",
        "{ } | quantile_over_time(duration, 0.5, 0.9) by(kind)",
        "{ } | avg_over_time(duration) by(name)",
        "{ kind = client || status = error } | max_over_time(duration)",
        "{ } | count_over_time() by(span.http.route) | topk(1)",
    ];
    let both = Server::start_tier(&[&[&a1, &a2], &[&b1]], &[]);
    let split = Server::start_tier(&[&[&a1, &a2]], &[]);
    for q in queries {
        let want = range(&all, q, base, end, "60s");
        assert!(!want.is_empty(), "{q}");
        assert_eq!(range(&both, q, base, end, "60s"), want, "{q}: two groups");
        assert_eq!(
            range(&split, q, base, end, "60s"),
            want,
            "{q}: the split group"
        );
    }
    // What depends on other spans of the trace is not added up from parts.
    for q in [
        "{ resource.service.name = \"frontend\" } >> { kind = client } | rate()",
        "{ rootServiceName = \"frontend\" } | rate()",
        "{ nestedSetLeft > 2 } | rate()",
        "{ } | compare({ status = error })",
    ] {
        let r = get(
            &split,
            &format!("/api/metrics/query_range?q={}&since=1h", encoded(q)),
        );
        assert_eq!(r.status, 400, "{q}");
        assert!(
            String::from_utf8_lossy(&r.body).contains("ask a storage node"),
            "{q}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // A node that does not answer: the other group's copy is whole.
    a2.pause();
    assert_eq!(
        range(&both, queries[0], base, end, "60s"),
        range(&all, queries[0], base, end, "60s")
    );
    a2.resume();
}
