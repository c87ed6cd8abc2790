//! The Grafana Tempo HTTP API with a plain HTTP client: protobuf and JSON
//! trace bodies decode to exactly the spans exported over OTLP; search, tag
//! names and values; 404 and 400.

use prost::Message;
use serde_json::Value;
use tracedb_proto::trace::v1::TracesData;

use crate::harness::{http_request, request, spans_of, string_kv, HttpResponse, Server};

const TRACE: u128 = 0x5b8e_fff7_9803_8103_d269_b633_813f_c60c;
const HEX: &str = "5b8efff798038103d269b633813fc60c";

/// Tempo's `TraceByIDResponse`, field 1 only.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TraceByIdResponse {
    #[prost(message, optional, tag = "1")]
    pub trace: Option<TracesData>,
}

fn get(server: &Server, path: &str, accept: &str) -> HttpResponse {
    http_request(server.http, "GET", path, &[("Accept", accept)], b"").expect("GET")
}

fn json(r: &HttpResponse) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).expect("JSON body")
}

/// OTLP/JSON `{"resourceSpans": ...}` back to protobuf, through tracedb's own
/// OTLP/JSON decoder (which checks hex IDs and the rest of the mapping).
fn from_otlp_json(v: &Value) -> TracesData {
    let bytes =
        tracedb_ingest::json::json_to_protobuf(v.to_string().as_bytes()).expect("valid OTLP/JSON");
    TracesData::decode(bytes).expect("TracesData")
}

#[tokio::test]
async fn tempo_api_serves_traces_search_and_tags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let sent = request("checkout", &[TRACE], 5);
    server
        .ingest()
        .await
        .export(sent.clone())
        .await
        .expect("export");
    let expected = spans_of(&[TracesData {
        resource_spans: sent.resource_spans.clone(),
    }]);

    let echo = get(&server, "/api/echo", "*/*");
    assert_eq!((echo.status, echo.body.as_slice()), (200, &b"echo"[..]));

    // Trace by ID, v2: protobuf TraceByIDResponse and JSON.
    let r = get(
        &server,
        &format!("/api/v2/traces/{HEX}"),
        "application/protobuf",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/protobuf"));
    let decoded = TraceByIdResponse::decode(r.body.as_slice()).expect("TraceByIDResponse");
    assert_eq!(spans_of(&[decoded.trace.expect("trace")]), expected);
    let v = json(&get(
        &server,
        &format!("/api/v2/traces/{HEX}"),
        "application/json",
    ));
    assert_eq!(
        v["trace"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"],
        HEX
    );
    assert_eq!(spans_of(&[from_otlp_json(&v["trace"])]), expected);

    // v1: the trace alone; with time hints.
    let r = get(
        &server,
        &format!("/api/traces/{HEX}"),
        "application/protobuf",
    );
    assert_eq!(
        spans_of(&[TracesData::decode(r.body.as_slice()).expect("TracesData")]),
        expected
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let path = format!("/api/traces/{HEX}?start={}&end={}", now - 3600, now + 3600);
    let v = json(&get(&server, &path, "application/json"));
    let batches = serde_json::json!({ "resourceSpans": v["batches"] });
    assert_eq!(spans_of(&[from_otlp_json(&batches)]), expected);

    // Errors.
    assert_eq!(
        get(
            &server,
            "/api/traces/00000000000000000000000000000bad",
            "*/*"
        )
        .status,
        404
    );
    assert_eq!(
        get(
            &server,
            "/api/v2/traces/00000000000000000000000000000bad",
            "application/protobuf"
        )
        .status,
        404
    );
    assert_eq!(get(&server, "/api/traces/xyz", "*/*").status, 400);
    assert_eq!(
        get(&server, &format!("/api/traces/{}", "a".repeat(33)), "*/*").status,
        400
    );
    assert_eq!(
        get(
            &server,
            &format!("/api/traces/{HEX}?start=20&end=10"),
            "*/*"
        )
        .status,
        400
    );
    assert_eq!(
        get(&server, "/api/search?minDuration=fast", "*/*").status,
        400
    );
    // An invalid query is 400 with where and why.
    let invalid = get(
        &server,
        "/api/search?q=%7Bstatus%3Derror%7D%20%7C%20count()",
        "*/*",
    );
    assert_eq!(invalid.status, 400);
    let message = String::from_utf8_lossy(&invalid.body);
    assert!(
        message.contains("invalid TraceQL") && message.contains("line 1, column 25"),
        "{message:?}"
    );

    // Search.
    let v = json(&get(
        &server,
        "/api/search?tags=service.name%3Dcheckout&limit=5",
        "*/*",
    ));
    let traces = v["traces"].as_array().expect("traces");
    assert_eq!(traces.len(), 1, "{v}");
    assert_eq!(traces[0]["traceID"], HEX);
    assert_eq!(traces[0]["rootServiceName"], "checkout");
    assert_eq!(traces[0]["rootTraceName"], "op-0");
    // Tempo's serviceStats: every span of the service, each one an error.
    assert_eq!(
        traces[0]["serviceStats"],
        serde_json::json!({ "checkout": { "spanCount": 5, "errorCount": 5 } })
    );
    assert!(traces[0]["startTimeUnixNano"]
        .as_str()
        .is_some_and(|s| s.parse::<u64>().is_ok()));
    let v = json(&get(
        &server,
        "/api/search?tags=http.route%3D%2Fcart%20name%3Dop-3",
        "*/*",
    ));
    assert_eq!(v["traces"].as_array().map(Vec::len), Some(1), "{v}");
    let v = json(&get(
        &server,
        "/api/search?tags=service.name%3Dcheckout&minDuration=10s",
        "*/*",
    ));
    assert_eq!(v["traces"].as_array().map(Vec::len), Some(0), "{v}");
    let v = json(&get(
        &server,
        "/api/search?tags=service.name%3Dnobody",
        "*/*",
    ));
    assert_eq!(v["traces"].as_array().map(Vec::len), Some(0), "{v}");
    // TraceQL as Grafana's search builder writes it.
    let v = json(&get(
        &server,
        "/api/search?q=%7Bresource.service.name%3D%22checkout%22%20%26%26%20name%3D%22op-3%22%20%26%26%20.http.route%3D%22%2Fcart%22%7D",
        "*/*",
    ));
    let traces = v["traces"].as_array().expect("traces");
    assert_eq!(traces.len(), 1, "{v}");
    assert_eq!(traces[0]["traceID"], HEX);
    for q in [
        "%7Bname%3D%22op-3%22%20%26%26%20duration%3E10s%7D",
        "%7Bresource.service.name%3D%22nobody%22%7D",
    ] {
        let v = json(&get(&server, &format!("/api/search?q={q}"), "*/*"));
        assert_eq!(v["traces"].as_array().map(Vec::len), Some(0), "{q}: {v}");
    }

    // Tags for the query editor.
    let v = json(&get(&server, "/api/v2/search/tags", "*/*"));
    let scope = |name: &str| -> Vec<String> {
        v["scopes"]
            .as_array()
            .expect("scopes")
            .iter()
            .find(|s| s["name"] == name)
            .expect("scope")["tags"]
            .as_array()
            .expect("tags")
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect()
    };
    assert!(
        scope("resource").contains(&"service.name".to_string()),
        "{v}"
    );
    assert!(scope("span").contains(&"http.route".to_string()), "{v}");
    let v = json(&get(
        &server,
        "/api/v2/search/tag/resource.service.name/values",
        "*/*",
    ));
    assert_eq!(
        v["tagValues"],
        serde_json::json!([{ "type": "string", "value": "checkout" }])
    );
    let v = json(&get(&server, "/api/search/tag/http.route/values", "*/*"));
    assert_eq!(v["tagValues"], serde_json::json!(["/cart"]));
    // Values carry their types, so Grafana writes `= 3`, not `= "3"`.
    let v = json(&get(&server, "/api/v2/search/tag/span.n/values", "*/*"));
    assert_eq!(
        v["tagValues"][0],
        serde_json::json!({ "type": "int", "value": "0" }),
        "{v}"
    );
    // `limit` keeps that many, as asked: not a partial answer.
    let r = get(&server, "/api/v2/search/tag/span.n/values?limit=2", "*/*");
    assert_eq!(r.header("tracedb-partial"), None);
    assert_eq!(json(&r)["tagValues"].as_array().map(Vec::len), Some(2));
    let r = get(&server, "/api/v2/search/tag/span.n/values?limit=x", "*/*");
    assert_eq!(r.status, 400);
    let v = json(&get(&server, "/api/v2/search/tag/status/values", "*/*"));
    assert_eq!(
        v["tagValues"],
        serde_json::json!([
            { "type": "keyword", "value": "error" },
            { "type": "keyword", "value": "ok" },
            { "type": "keyword", "value": "unset" },
        ])
    );
    // `q`, even unfinished, narrows the values to traces that can match it.
    for (q, expected) in [
        (
            "%7Bresource.service.name%3D%22nobody%22%20%26%26%20span.n%3D",
            0,
        ),
        (
            "%7Bresource.service.name%3D%22checkout%22%20%26%26%20span.n%3D",
            5,
        ),
    ] {
        let v = json(&get(
            &server,
            &format!("/api/v2/search/tag/span.n/values?q={q}"),
            "*/*",
        ));
        assert_eq!(
            v["tagValues"].as_array().map(Vec::len),
            Some(expected),
            "{q}: {v}"
        );
    }
    let v = json(&get(&server, "/api/v2/search/tags?scope=intrinsic", "*/*"));
    assert_eq!(v["scopes"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(
        v["scopes"][0]["tags"]
            .as_array()
            .is_some_and(|t| t.contains(&serde_json::json!("rootServiceName"))),
        "{v}"
    );
}

/// A key with a value per trace (a user or order ID) has more values than an
/// answer can carry: the values stop at about a megabyte, as Tempo's do, and
/// the answer says it is partial (Tempo's does not).
#[tokio::test]
async fn tag_values_stop_at_a_megabyte_and_say_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let mut ingest = server.ingest().await;
    // 12,000 values of 100 bytes: 1.2 MB.
    for batch in 0..12u128 {
        let traces: Vec<u128> = (batch * 1_000 + 1..=batch * 1_000 + 1_000).collect();
        let mut sent = request("orders", &traces, 1);
        for span in &mut sent.resource_spans[0].scope_spans[0].spans {
            let t = u128::from_be_bytes(span.trace_id[..].try_into().expect("16 bytes"));
            span.attributes
                .push(string_kv("order.key", &format!("{t:0>100}")));
        }
        ingest.export(sent).await.expect("export");
    }
    let r = get(&server, "/api/v2/search/tag/span.order.key/values", "*/*");
    assert_eq!(r.status, 200);
    let partial = r.header("tracedb-partial-reason").unwrap_or_default();
    assert!(partial.contains("1000000 bytes"), "{:?}", r.headers);
    let values = json(&r)["tagValues"].as_array().map_or(0, Vec::len);
    assert!((10_000..12_000).contains(&values), "{values} values");
    // What fits is answered whole.
    let r = get(
        &server,
        "/api/v2/search/tag/resource.service.name/values",
        "*/*",
    );
    assert_eq!(r.header("tracedb-partial"), None, "{:?}", r.headers);
}

/// A search asked for more traces than one search answers (1,000) gets the
/// newest 1,000, and the answer says older matches were not searched.
#[tokio::test]
async fn a_search_asked_for_more_than_it_answers_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let traces: Vec<u128> = (1..=1_001).collect();
    let mut ingest = server.ingest().await;
    ingest
        .export(request("front", &traces, 1))
        .await
        .expect("export");
    let rows = |r: &HttpResponse| json(r)["traces"].as_array().map_or(0, Vec::len);
    let r = get(&server, "/api/search?q=%7B%7D&limit=1000", "*/*");
    assert_eq!((r.status, rows(&r)), (200, 1_000));
    assert_eq!(r.header("tracedb-partial"), None, "{:?}", r.headers);
    let r = get(&server, "/api/search?q=%7B%7D&limit=1001", "*/*");
    assert_eq!((r.status, rows(&r)), (200, 1_000));
    let reason = r.header("tracedb-partial-reason").unwrap_or_default();
    assert!(reason.contains("at most 1000 traces"), "{:?}", r.headers);
}
