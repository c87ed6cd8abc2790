//! Spans that share a span ID but differ are all returned, on every read
//! API of a node and of the query tier; exact repeats (a retried export, a
//! replica group's copy) are returned once.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tracedb_proto::jaeger::storage::v2::{
    trace_reader_client::TraceReaderClient, GetTraceParams, GetTracesRequest,
};

use crate::harness::{get_trace, post_traces, spans_of, Server};

const TRACE: &str = "5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed01";
const SPAN: &str = "00000000000000aa";

/// One OTLP/JSON request: span `SPAN` three times (names `a` and `b`, `b` a
/// second later), `a` twice with identical bytes.
fn body(now: u64) -> Vec<u8> {
    let span = |name: &str, start: u64| {
        serde_json::json!({
            "traceId": TRACE, "spanId": SPAN, "name": name, "kind": 2,
            "startTimeUnixNano": start.to_string(),
            "endTimeUnixNano": (start + 5_000_000).to_string(),
        })
    };
    let request = serde_json::json!({ "resourceSpans": [{
        "resource": { "attributes": [
            { "key": "service.name", "value": { "stringValue": "shared" } } ] },
        "scopeSpans": [{ "spans": [
            span("a", now), span("b", now + 1_000_000_000), span("a", now) ] }]
    }]});
    serde_json::to_vec(&request).expect("JSON")
}

/// The names of the spans with ID `SPAN` anywhere in a JSON answer, sorted.
fn json_names(body: &[u8]) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                let id = m.get("spanId").or_else(|| m.get("spanID"));
                if id
                    .and_then(Value::as_str)
                    .is_some_and(|id| id.eq_ignore_ascii_case(SPAN) || id == "AAAAAAAAAKo=")
                {
                    let name = m.get("name").or_else(|| m.get("operationName"));
                    out.push(name.and_then(Value::as_str).unwrap_or("?").to_owned());
                }
                m.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let v: Value = serde_json::from_slice(body).expect("a JSON answer");
    let mut out = Vec::new();
    walk(&v, &mut out);
    out.sort();
    out
}

/// What every read API of `server` (a node or the tier) returns for TRACE.
async fn every_api(server: &Server, what: &str) {
    let want = vec!["a".to_owned(), "b".to_owned()];
    let trace = u128::from_str_radix(TRACE, 16).expect("hex");
    let messages = get_trace(&mut server.query().await, trace)
        .await
        .unwrap_or_else(|e| panic!("{what}: GetTrace: {e}"));
    let mut names: Vec<String> = spans_of(&messages)
        .into_iter()
        .map(|(_, s)| s.name)
        .collect();
    names.sort();
    assert_eq!(names, want, "{what}: gRPC GetTrace");

    for path in [
        format!("/api/traces/{TRACE}"),
        format!("/api/v2/traces/{TRACE}"),
    ] {
        let response = server
            .http_call("GET", &path, &[("Accept", "application/json")], b"")
            .expect("GET");
        assert_eq!(response.status, 200, "{what}: {path}");
        assert_eq!(json_names(&response.body), want, "{what}: {path}");
    }

    let mut jaeger = TraceReaderClient::new(server.channel().await);
    let mut stream = jaeger
        .get_traces(GetTracesRequest {
            query: vec![GetTraceParams {
                trace_id: trace.to_be_bytes().to_vec().into(),
                ..Default::default()
            }],
        })
        .await
        .unwrap_or_else(|e| panic!("{what}: Jaeger GetTraces: {e}"))
        .into_inner();
    let mut messages = Vec::new();
    while let Some(m) = stream.message().await.expect("Jaeger stream") {
        messages.push(m);
    }
    let mut names: Vec<String> = spans_of(&messages)
        .into_iter()
        .map(|(_, s)| s.name)
        .collect();
    names.sort();
    assert_eq!(names, want, "{what}: Jaeger GetTraces");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_sharing_a_span_id_are_all_returned_by_every_api() {
    let (d1, d2) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let (n1, n2) = (Server::start(d1.path()), Server::start(d2.path()));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
        - 60_000_000_000;
    let json = [("Content-Type", "application/json")];
    let body = body(now);
    // Sent twice to n1, as a Collector retries; once to n2, a second
    // replica group's copy.
    for server in [&n1, &n1, &n2] {
        let response = post_traces(server, &json, &body);
        assert_eq!(
            response.status,
            200,
            "{}",
            String::from_utf8_lossy(&response.body)
        );
        let answer: Value = serde_json::from_slice(&response.body).expect("JSON");
        assert!(
            answer.get("partialSuccess").is_none(),
            "every span kept: {answer}"
        );
    }
    every_api(&n1, "a node").await;
    let tier = Server::start_tier(&[&[&n1], &[&n2]], &[]);
    every_api(&tier, "the tier over two groups").await;
}
