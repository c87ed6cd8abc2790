//! TraceQL through the Tempo search API, judged by the answers Grafana Tempo
//! 3.0.3 gave for the same traces and queries (`tests/traceql/`: the traces,
//! the queries and Tempo's answers, recorded as its README says).
//!
//! For each query Tempo answered, tracedb answers the same traces with the
//! same matched spans, or refuses the query with a 400 that names what is
//! unsupported (those are listed in [`UNSUPPORTED`] and in the README). A
//! query Tempo refused, tracedb refuses too. Never a 200 with other traces.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::harness::{http_request, post_traces, HttpResponse, Server};

const SEC: u64 = 1_000_000_000;

/// What tracedb refuses on purpose (a part of each 400 message), because
/// Tempo 3.0.3 answers it with traces it plainly does not match, or with
/// none where it does. Each is listed in the README's TraceQL section.
pub const REFUSED: &[&str] = &[
    "negation with ! of a condition is not supported",
    "link attributes (link.name) are not supported",
    "= nil on an attribute (its absence) is not supported",
    "span:childCount is not supported",
    "!= nil is not supported on",
    "avg, min, max and sum are not supported on",
];

/// Queries tracedb answers with their documented meaning where Tempo 3.0.3
/// leaves spans out: its unions `&>>` and `&<<` are made in one merge pass
/// over nested-set bounds that skips a span nested inside another span of
/// the answer (an intermediate server ancestor). The traces are the same;
/// tracedb's spans are Tempo's plus those, each below another answered span.
pub const TEMPO_LEAVES_NESTED_SPANS_OUT: &[&str] = &["{ kind = client } &<< { kind = server }"];

/// `!= nil` on attributes Tempo keeps in a column of one type: it finds the
/// values of that type only (the fixture's 14 string-typed status codes are
/// absent to it), and tracedb answers it so.
const TYPED_PRESENCE: &[&str] = &[
    "{ span.http.status_code != nil }",
    "{ span.http.route != nil }",
];

/// Each span's parent, per trace, from the fixture (16-hex span IDs).
fn parents() -> BTreeMap<String, BTreeMap<String, String>> {
    let v: Value = serde_json::from_str(&fixture("traces.json")).expect("traces.json");
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for rs in v["resourceSpans"].as_array().expect("resourceSpans") {
        for ss in rs["scopeSpans"].as_array().expect("scopeSpans") {
            for span in ss["spans"].as_array().expect("spans") {
                let text = |k: &str| span[k].as_str().unwrap_or_default().to_owned();
                out.entry(text("traceId"))
                    .or_default()
                    .insert(text("spanId"), text("parentSpanId"));
            }
        }
    }
    out
}

/// Why `ours` may hold spans `theirs` lacks, for a query of
/// [`TEMPO_LEAVES_NESTED_SPANS_OUT`]: `None` when every extra span is below
/// another span of the answer and nothing else differs.
fn nested_spans_only(
    ours: &BTreeMap<String, BTreeSet<String>>,
    theirs: &BTreeMap<String, BTreeSet<String>>,
) -> Option<String> {
    if ours.keys().ne(theirs.keys()) {
        return Some("the traces differ".into());
    }
    let parents = parents();
    for (trace, spans) in ours {
        let tempo = &theirs[trace];
        if !tempo.is_subset(spans) {
            return Some(format!("trace {trace}: Tempo has spans tracedb lacks"));
        }
        let tree = parents.get(trace).expect("a fixture trace");
        for extra in spans.difference(tempo) {
            let mut at = tree.get(extra).cloned().unwrap_or_default();
            let mut nested = false;
            while let Some(parent) = tree.get(&at) {
                if spans.contains(&at) {
                    nested = true;
                    break;
                }
                at = parent.clone();
            }
            if !nested {
                return Some(format!(
                    "trace {trace}: span {extra} is below no answered span"
                ));
            }
        }
    }
    None
}

pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/traceql/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fixture's OTLP/JSON with its time offsets moved to start at `base`.
pub fn shifted(traces: &str, base: u64) -> Vec<u8> {
    fn walk(v: &mut Value, base: u64) {
        match v {
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if matches!(
                        k.as_str(),
                        "startTimeUnixNano" | "endTimeUnixNano" | "timeUnixNano"
                    ) {
                        let offset: u64 = match v {
                            Value::String(s) => s.parse().expect("offset"),
                            Value::Number(n) => n.as_u64().expect("offset"),
                            _ => panic!("bad time {v}"),
                        };
                        *v = Value::String((base + offset).to_string());
                    } else {
                        walk(v, base);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, base)),
            _ => {}
        }
    }
    let mut v: Value = serde_json::from_str(traces).expect("traces.json");
    walk(&mut v, base);
    v.to_string().into_bytes()
}

/// `s` percent-encoded for a query string.
pub fn encoded(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn search(server: &Server, q: &str, start: u64, end: u64) -> HttpResponse {
    let path = format!(
        "/api/search?q={}&limit=1000&spss=1000&start={}&end={}",
        encoded(q),
        start / SEC,
        end / SEC + 1
    );
    http_request(server.http, "GET", &path, &[], b"").expect("GET /api/search")
}

/// trace ID -> the span IDs of its spansets, from a search answer.
fn answer(body: &Value) -> BTreeMap<String, BTreeSet<String>> {
    body["traces"]
        .as_array()
        .expect("traces")
        .iter()
        .map(|t| {
            let spans = t["spanSets"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["spans"].as_array().into_iter().flatten())
                .map(|s| format!("{:0>16}", s["spanID"].as_str().expect("spanID")))
                .collect();
            (t["traceID"].as_str().expect("traceID").to_owned(), spans)
        })
        .collect()
}

/// A server in `dir` holding the fixture's traces, their times moved to end
/// about now: the server, the traces' base time and now (Unix ns).
fn loaded(dir: &std::path::Path) -> (Server, u64, u64) {
    let server = Server::start(dir);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let base = now - 120 * SEC;
    let r = post_traces(
        &server,
        &[("Content-Type", "application/json")],
        &shifted(&fixture("traces.json"), base),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(String::from_utf8_lossy(&r.body), "{}", "every span kept");
    (server, base, now)
}

#[test]
fn traceql_answers_as_tempo_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, base, now) = loaded(dir.path());

    let golden: Value = serde_json::from_str(
        &std::env::var("TRACEDB_GOLDEN")
            .map(|p| std::fs::read_to_string(p).expect("golden"))
            .unwrap_or_else(|_| fixture("tempo-answers.json")),
    )
    .expect("answers");
    let mut differ = Vec::new();
    let (mut same, mut refused, mut explained) = (0, 0, 0);
    let mut typed_presence_same = 0;
    for case in golden["queries"].as_array().expect("queries") {
        let q = case["q"].as_str().expect("q");
        let r = search(&server, q, base - 60 * SEC, now + 60 * SEC);
        let body = String::from_utf8_lossy(&r.body).into_owned();
        if case["status"].as_u64().is_some_and(|s| s >= 500) {
            // Tempo failed (its README names the case): nothing to compare.
            continue;
        }
        if case["status"] != 200 {
            if r.status != 400 {
                differ.push(format!(
                    "{q}\n  Tempo refused it; tracedb answered {}: {body:.300}",
                    r.status
                ));
            } else {
                same += 1;
            }
            continue;
        }
        if r.status == 400 {
            if REFUSED.iter().any(|why| body.contains(why)) {
                refused += 1;
            } else {
                differ.push(format!("{q}\n  refused: {body:.300}"));
            }
            continue;
        }
        if r.status != 200 {
            differ.push(format!("{q}\n  status {}: {body:.300}", r.status));
            continue;
        }
        let ours = answer(&serde_json::from_str(&body).expect("JSON"));
        let theirs: BTreeMap<String, BTreeSet<String>> = case["traces"]
            .as_object()
            .expect("traces")
            .iter()
            .map(|(id, t)| {
                let spans = t["spans"]
                    .as_array()
                    .expect("spans")
                    .iter()
                    .map(|s| s.as_str().expect("span ID").to_owned())
                    .collect();
                (id.clone(), spans)
            })
            .collect();
        if ours == theirs {
            same += 1;
            typed_presence_same += usize::from(TYPED_PRESENCE.contains(&q));
            continue;
        }
        if TEMPO_LEAVES_NESTED_SPANS_OUT.contains(&q) {
            match nested_spans_only(&ours, &theirs) {
                None => {
                    explained += 1;
                    continue;
                }
                Some(why) => {
                    differ.push(format!("{q}\n  not only nested spans: {why}"));
                    continue;
                }
            }
        }
        let ids =
            |m: &BTreeMap<String, BTreeSet<String>>| m.keys().cloned().collect::<BTreeSet<_>>();
        let (o, t) = (ids(&ours), ids(&theirs));
        let spans_differ: Vec<&String> = o
            .intersection(&t)
            .filter(|id| ours[*id] != theirs[*id])
            .collect();
        differ.push(format!(
            "{q}\n  Tempo {} traces, tracedb {}; only Tempo: {:?}; only tracedb: {:?}; spans differ in {}",
            t.len(),
            o.len(),
            t.difference(&o).take(3).collect::<Vec<_>>(),
            o.difference(&t).take(3).collect::<Vec<_>>(),
            spans_differ.len()
        ));
    }
    assert!(
        differ.is_empty(),
        "{} of {} queries differ from Tempo:\n{}",
        differ.len(),
        differ.len() + same + refused,
        differ.join("\n")
    );
    assert!(same > 200, "only {same} queries answered as Tempo does");
    assert_eq!(
        explained,
        TEMPO_LEAVES_NESTED_SPANS_OUT.len(),
        "each documented difference is still one"
    );
    assert_eq!(
        typed_presence_same,
        TYPED_PRESENCE.len(),
        "presence on a typed column is answered, as Tempo does"
    );
    eprintln!("{same} answered as Tempo does, {refused} refused, {explained} with the spans Tempo leaves out");
}

/// Queries from anyone who can reach the HTTP port: each gets a 400 or a
/// bounded answer, and the server keeps answering.
#[test]
fn hostile_queries_get_a_400_or_a_bounded_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, base, now) = loaded(dir.path());
    let long_chain = vec!["{ .a = 1 }"; 400].join(" && ");
    let refused = [
        // Nesting past the parser's depth limit, never a stack overflow.
        format!("{}{{}}{}", "(".repeat(5_000), ")".repeat(5_000)),
        format!("{{ {}true }}", "!".repeat(5_000)),
        format!("{{ {}1 = 1 }}", "-".repeat(5_000)),
        // More operators than a query may hold (its tree would be as deep).
        format!("{{ .a = {}2 }}", "2 ^ ".repeat(2_000)),
        // A regular expression too large to compile within its bound.
        format!("{{ name =~ \"{}\" }}", "(a{1,1000}){1,1000}"),
    ];
    for q in &refused {
        let r = search(&server, q, base - 60 * SEC, now + 60 * SEC);
        assert_eq!(
            r.status,
            400,
            "{:.200}: {}",
            q,
            String::from_utf8_lossy(&r.body)
        );
    }
    // Longer than any query tracedb takes: refused by the parser, or by the
    // HTTP server before it (414, 431) when the URL itself is too long.
    for len in [70_000, 1_000_000] {
        let q = format!("{{ span.a = \"{}\" }}", "x".repeat(len));
        let r = search(&server, &q, base - 60 * SEC, now + 60 * SEC);
        assert!(matches!(r.status, 400 | 414 | 431), "{len}: {}", r.status);
    }
    // A long but flat query parses; a pathological pattern runs in linear
    // time (no backtracking) and answers.
    for q in [
        long_chain.as_str(),
        r#"{ name =~ "(a*)*b" || statusMessage =~ "(.*a){20}" }"#,
    ] {
        let r = search(&server, q, base - 60 * SEC, now + 60 * SEC);
        assert_eq!(
            r.status,
            200,
            "{:.200}: {}",
            q,
            String::from_utf8_lossy(&r.body)
        );
    }
    // Enormous limits are bounded.
    let path = format!(
        "/api/search?q=%7B%7D&limit=4000000000&spss=4000000000&start={}&end={}",
        (base - 60 * SEC) / SEC,
        now / SEC + 60
    );
    let r = http_request(server.http, "GET", &path, &[], b"").expect("GET");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(
        v["traces"].as_array().map(Vec::len),
        Some(300),
        "every trace, once"
    );
    let r = search(
        &server,
        "{ status = error }",
        base - 60 * SEC,
        now + 60 * SEC,
    );
    assert_eq!(r.status, 200, "still answering");
}

/// Every construct tracedb refuses is named in the README's TraceQL section,
/// with the words its 400 uses.
#[test]
fn the_readme_lists_what_is_refused() {
    let readme = include_str!("../../../../README.md");
    let section = &readme[readme.find("## TraceQL").expect("a TraceQL section")..];
    for (reason, named) in [
        (REFUSED[0], "negation with `!` of a condition"),
        (REFUSED[1], "`link.` attributes"),
        (REFUSED[2], "`= nil` on an attribute"),
        (REFUSED[3], "`span:childCount`"),
        (REFUSED[4], "`!= nil` on an unscoped attribute"),
        (
            REFUSED[5],
            "`avg`, `min`, `max` and `sum` of `http.status_code`",
        ),
    ] {
        assert!(
            section.contains(named),
            "the README does not name {named:?} ({reason})"
        );
    }
    assert_eq!(REFUSED.len(), 6, "a new refusal is named in the README too");
    for q in TEMPO_LEAVES_NESTED_SPANS_OUT {
        assert!(
            section.contains(&format!("`{q}`")),
            "the README does not name {q:?}, where Tempo leaves spans out"
        );
    }
}
