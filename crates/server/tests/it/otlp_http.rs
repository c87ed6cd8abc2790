//! OTLP/HTTP: JSON and protobuf bodies, gzip, and one test per kind of bad
//! input. Each bad request must get its status code and a `google.rpc.Status`
//! body in the request's format; valid spans in the same request are stored;
//! and the server keeps serving afterwards.

use std::io::Write as _;

use prost::Message;
use serde_json::{json, Value};
use tracedb_proto::{
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    common::v1::{any_value, AnyValue, KeyValue},
    google::rpc,
    trace::v1::Span,
};

use crate::harness::{get_trace, metric, post_traces, request, rich_span, spans_of, Server};

const PROTOBUF: (&str, &str) = ("Content-Type", "application/x-protobuf");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const GZIP: (&str, &str) = ("Content-Encoding", "gzip");

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn any_json(v: &AnyValue) -> Value {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => json!({ "stringValue": s }),
        Some(any_value::Value::IntValue(i)) => json!({ "intValue": i.to_string() }),
        Some(any_value::Value::BoolValue(b)) => json!({ "boolValue": b }),
        Some(any_value::Value::DoubleValue(d)) => json!({ "doubleValue": d }),
        other => panic!("not used by these tests: {other:?}"),
    }
}

fn attrs_json(attrs: &[KeyValue]) -> Value {
    attrs
        .iter()
        .map(|kv| json!({ "key": kv.key, "value": kv.value.as_ref().map(any_json) }))
        .collect()
}

/// OTLP/JSON of a span as the spec spells it: hex IDs, 64-bit integers as
/// strings, integer enums, lowerCamelCase keys.
fn span_json(s: &Span) -> Value {
    json!({
        "traceId": hex(&s.trace_id),
        "spanId": hex(&s.span_id),
        "traceState": s.trace_state,
        "parentSpanId": hex(&s.parent_span_id),
        "flags": s.flags,
        "name": s.name,
        "kind": s.kind,
        "startTimeUnixNano": s.start_time_unix_nano.to_string(),
        // Numbers are allowed too.
        "endTimeUnixNano": s.end_time_unix_nano,
        "attributes": attrs_json(&s.attributes),
        "droppedAttributesCount": s.dropped_attributes_count,
        "events": s.events.iter().map(|e| json!({
            "timeUnixNano": e.time_unix_nano.to_string(),
            "name": e.name,
            "attributes": attrs_json(&e.attributes),
            "droppedAttributesCount": e.dropped_attributes_count,
        })).collect::<Vec<_>>(),
        "droppedEventsCount": s.dropped_events_count,
        "links": s.links.iter().map(|l| json!({
            "traceId": hex(&l.trace_id),
            "spanId": hex(&l.span_id),
            "traceState": l.trace_state,
            "attributes": attrs_json(&l.attributes),
            "droppedAttributesCount": l.dropped_attributes_count,
            "flags": l.flags,
        })).collect::<Vec<_>>(),
        "droppedLinksCount": s.dropped_links_count,
        "status": s.status.as_ref().map(|st| json!({ "message": st.message, "code": st.code })),
        "aFieldFromTheFuture": { "ignored": [1, 2, 3] },
    })
}

fn request_json(req: &ExportTraceServiceRequest) -> Value {
    json!({
        "resourceSpans": req.resource_spans.iter().map(|rs| json!({
            "resource": rs.resource.as_ref().map(|r| json!({ "attributes": attrs_json(&r.attributes) })),
            "schemaUrl": rs.schema_url,
            "scopeSpans": rs.scope_spans.iter().map(|ss| json!({
                "scope": ss.scope.as_ref().map(|s| json!({ "name": s.name, "version": s.version })),
                "schemaUrl": ss.schema_url,
                "spans": ss.spans.iter().map(span_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).expect("gzip");
    enc.finish().expect("gzip")
}

/// The stored spans of a trace, sorted by span ID.
async fn stored(server: &Server, trace: u128) -> Vec<Span> {
    let mut query = server.query().await;
    match get_trace(&mut query, trace).await {
        Ok(messages) => spans_of(&messages).into_iter().map(|(_, s)| s).collect(),
        Err(status) if status.code() == tonic::Code::NotFound => Vec::new(),
        Err(status) => panic!("GetTrace {trace:x}: {status}"),
    }
}

fn sorted(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_by(|a, b| a.span_id.cmp(&b.span_id));
    spans
}

/// A valid export still works and is stored: the server kept serving.
async fn assert_still_serving(server: &Server, trace: u128) {
    let body = request("after", &[trace], 2).encode_to_vec();
    let response = post_traces(server, &[PROTOBUF], &body);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(stored(server, trace).await.len(), 2);
    let ready =
        crate::harness::http_request(server.http, "GET", "/ready", &[], b"").expect("GET /ready");
    assert_eq!(ready.status, 200);
}

/// A protobuf error response: its HTTP status and the `google.rpc.Status` in it.
fn rpc_error(response: &crate::harness::HttpResponse) -> rpc::Status {
    assert_eq!(
        response.header("content-type"),
        Some("application/x-protobuf")
    );
    rpc::Status::decode(&response.body[..]).expect("a google.rpc.Status body")
}

#[tokio::test]
async fn json_export_is_stored_field_for_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let sent = request("json-svc", &[0x51, 0x52], 3);
    let body = serde_json::to_vec(&request_json(&sent)).expect("json");

    let response = post_traces(&server, &[JSON], &body);
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(response.body, b"{}", "full success has no partial_success");

    // And gzip-compressed JSON.
    let sent_gz = request("json-svc", &[0x53], 2);
    let body = serde_json::to_vec(&request_json(&sent_gz)).expect("json");
    let response = post_traces(&server, &[JSON, GZIP], &gzip(&body));
    assert_eq!(response.status, 200);

    for (req, trace) in [(&sent, 0x51u128), (&sent, 0x52), (&sent_gz, 0x53)] {
        let want: Vec<Span> = req.resource_spans[0].scope_spans[0]
            .spans
            .iter()
            .filter(|s| s.trace_id[..] == trace.to_be_bytes())
            .cloned()
            .collect();
        assert_eq!(
            stored(&server, trace).await,
            sorted(want),
            "trace {trace:x}"
        );
    }
    assert_eq!(
        metric(
            &server,
            "tracedb_spans_accepted_total{protocol=\"http_json\"}"
        ),
        8.0
    );
}

#[tokio::test]
async fn protobuf_export_with_gzip_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let sent = request("pb-svc", &[0x61], 4);
    let response = post_traces(&server, &[PROTOBUF, GZIP], &gzip(&sent.encode_to_vec()));
    assert_eq!(response.status, 200);
    let answer = ExportTraceServiceResponse::decode(&response.body[..]).expect("response");
    assert_eq!(answer.partial_success, None);
    assert_eq!(
        stored(&server, 0x61).await,
        sorted(sent.resource_spans[0].scope_spans[0].spans.clone())
    );
}

#[tokio::test]
async fn garbage_bytes_are_400() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let response = post_traces(&server, &[PROTOBUF], &[0x0a, 0xff, 0xff, 0xff, 0x0f, 1, 2]);
    assert_eq!(response.status, 400);
    let status = rpc_error(&response);
    assert_eq!(status.code, tonic::Code::InvalidArgument as i32);
    assert!(status.message.contains("malformed"), "{}", status.message);
    assert!(status.details.is_empty(), "not retryable");
    assert_still_serving(&server, 0x71).await;
}

#[tokio::test]
async fn truncated_protobuf_is_400_and_stores_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let body = request("cut", &[0x72], 3).encode_to_vec();
    let response = post_traces(&server, &[PROTOBUF], &body[..body.len() - 7]);
    assert_eq!(response.status, 400);
    assert_eq!(
        rpc_error(&response).code,
        tonic::Code::InvalidArgument as i32
    );
    assert!(
        stored(&server, 0x72).await.is_empty(),
        "nothing of it is stored"
    );
    assert_still_serving(&server, 0x73).await;
}

#[tokio::test]
async fn bad_gzip_is_400() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let good = gzip(&request("gz", &[0x74], 2).encode_to_vec());
    for body in [&b"this is not gzip"[..], &good[..good.len() / 2]] {
        let response = post_traces(&server, &[PROTOBUF, GZIP], body);
        assert_eq!(response.status, 400);
        let status = rpc_error(&response);
        assert!(status.message.contains("gzip"), "{}", status.message);
    }
    assert!(stored(&server, 0x74).await.is_empty());
    assert_still_serving(&server, 0x75).await;
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let body = request("ct", &[0x76], 1).encode_to_vec();
    let response = post_traces(&server, &[("Content-Type", "text/plain")], &body);
    assert_eq!(response.status, 415);
    let status: Value = serde_json::from_slice(&response.body).expect("JSON status");
    assert_eq!(status["code"], tonic::Code::InvalidArgument as i32);
    let response = post_traces(&server, &[PROTOBUF, ("Content-Encoding", "br")], &body);
    assert_eq!(response.status, 415, "unknown encoding");
    assert!(stored(&server, 0x76).await.is_empty());
    assert_still_serving(&server, 0x77).await;
}

#[tokio::test]
async fn oversized_body_is_413() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(dir.path(), &["--max-message-bytes", "64KiB"]);
    let big = request("big", &[0x78], 400).encode_to_vec();
    assert!(big.len() > 64 << 10);
    let response = post_traces(&server, &[PROTOBUF], &big);
    assert_eq!(response.status, 413);
    let status = rpc_error(&response);
    assert_eq!(status.code, tonic::Code::ResourceExhausted as i32);
    assert!(status.details.is_empty(), "413 is not retryable");
    assert_eq!(response.header("retry-after"), None);

    // Small when compressed, too large once inflated.
    let bomb = gzip(&vec![0u8; 1 << 20]);
    assert!(bomb.len() < 64 << 10);
    let response = post_traces(&server, &[PROTOBUF, GZIP], &bomb);
    assert_eq!(response.status, 413);
    assert!(stored(&server, 0x78).await.is_empty());
    assert_still_serving(&server, 0x79).await;
}

#[tokio::test]
async fn invalid_json_is_400() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    for body in [
        &b"{\"resourceSpans\": [{"[..],
        br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"not hex","spanId":"0102030405060708"}]}]}]}"#,
        br#"{"resourceSpans":"nope"}"#,
    ] {
        let response = post_traces(&server, &[JSON], body);
        assert_eq!(response.status, 400, "{}", String::from_utf8_lossy(body));
        assert_eq!(response.header("content-type"), Some("application/json"));
        let status: Value = serde_json::from_slice(&response.body).expect("JSON status");
        assert_eq!(status["code"], tonic::Code::InvalidArgument as i32);
        assert!(status["message"].as_str().is_some_and(|m| m.contains("JSON")));
    }
    assert_still_serving(&server, 0x7a).await;
}

#[tokio::test]
async fn bad_ids_are_rejected_one_by_one_and_valid_spans_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let mut req = request("ids", &[0x7b], 3);
    let spans = &mut req.resource_spans[0].scope_spans[0].spans;
    let mut short_trace = rich_span(0x7b, 10, None);
    short_trace.trace_id = vec![1; 15].into();
    let mut zero_trace = rich_span(0x7b, 11, None);
    zero_trace.trace_id = vec![0; 16].into();
    let mut long_span = rich_span(0x7b, 12, None);
    long_span.span_id = vec![1; 9].into();
    let mut zero_span = rich_span(0x7b, 13, None);
    zero_span.span_id = vec![0; 8].into();
    spans.insert(1, short_trace);
    spans.insert(3, zero_trace);
    spans.push(long_span);
    spans.push(zero_span);
    let valid: Vec<Span> = spans
        .iter()
        .filter(|s| {
            s.name != "op-10" && s.name != "op-11" && s.name != "op-12" && s.name != "op-13"
        })
        .cloned()
        .collect();
    assert_eq!(valid.len(), 3);

    // Protobuf.
    let response = post_traces(&server, &[PROTOBUF], &req.encode_to_vec());
    assert_eq!(response.status, 200);
    let partial = ExportTraceServiceResponse::decode(&response.body[..])
        .expect("response")
        .partial_success
        .expect("partial success");
    assert_eq!(partial.rejected_spans, 4);
    assert!(
        partial.error_message.contains("trace_id is 15 bytes"),
        "{}",
        partial.error_message
    );
    assert!(
        partial.error_message.contains("span_id is all zero"),
        "{}",
        partial.error_message
    );
    assert_eq!(stored(&server, 0x7b).await, sorted(valid.clone()));

    // The same request in JSON.
    let json_req = {
        let mut r = req.clone();
        for s in &mut r.resource_spans[0].scope_spans[0].spans {
            if s.trace_id[..] == 0x7bu128.to_be_bytes() {
                s.trace_id = 0x7cu128.to_be_bytes().to_vec().into();
            }
        }
        r
    };
    let body = serde_json::to_vec(&request_json(&json_req)).expect("json");
    let response = post_traces(&server, &[JSON], &body);
    assert_eq!(response.status, 200);
    let answer: Value = serde_json::from_slice(&response.body).expect("JSON response");
    assert_eq!(answer["partialSuccess"]["rejectedSpans"], "4");
    assert_eq!(stored(&server, 0x7c).await.len(), 3);

    assert_eq!(
        metric(
            &server,
            "tracedb_spans_rejected_total{reason=\"invalid_trace_id\"}"
        ),
        4.0
    );
    assert_eq!(
        metric(
            &server,
            "tracedb_spans_rejected_total{reason=\"invalid_span_id\"}"
        ),
        4.0
    );
    assert_still_serving(&server, 0x7d).await;
}

#[tokio::test]
async fn metrics_and_ready_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let ready =
        crate::harness::http_request(server.http, "GET", "/ready", &[], b"").expect("GET /ready");
    assert_eq!((ready.status, &ready.body[..]), (200, &b"ready\n"[..]));
    let response = crate::harness::http_request(server.http, "GET", "/metrics", &[], b"")
        .expect("GET /metrics");
    assert!(response
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")));
    let text = String::from_utf8(response.body).expect("utf-8");
    for family in [
        "tracedb_spans_accepted_total",
        "tracedb_spans_rejected_total",
        "tracedb_export_duration_seconds",
        "tracedb_memory_budget_bytes",
        "tracedb_memory_buffered_bytes",
        "tracedb_wal_fsyncs_total",
        "tracedb_flushes_total",
        "tracedb_memtable_bytes",
        "tracedb_level_files",
        "tracedb_level_runs",
        "tracedb_compactions_total",
        "tracedb_compaction_written_bytes_total",
        "tracedb_lookups_total",
        "tracedb_blocks_read_total",
        "tracedb_wal_data_sync_seconds_total",
        "tracedb_backpressure_rejections_total",
        "tracedb_index_cache_bytes",
        "tracedb_metrics_cells_cached_bytes",
        "tracedb_metrics_key_dict_bytes",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{family} missing:\n{text}"
        );
    }
    // Three quarters of the default 1 GiB admit requests and buffered spans.
    assert_eq!(
        metric(&server, "tracedb_memory_budget_bytes"),
        (3u64 << 28) as f64
    );
    assert!(text.contains("tracedb_level_files{level=\"0\"} "), "{text}");
    let before = metric(&server, "tracedb_wal_fsyncs_total");
    let lookups = metric(&server, "tracedb_lookups_total");
    assert_still_serving(&server, 0x7e).await;
    assert!(metric(&server, "tracedb_wal_fsyncs_total") > before);
    assert!(metric(&server, "tracedb_wal_data_syncs_total") > 0.0);
    assert!(
        metric(&server, "tracedb_lookups_total") > lookups,
        "GetTrace counts a lookup"
    );
    assert_eq!(
        metric(
            &server,
            "tracedb_export_duration_seconds_count{protocol=\"http_protobuf\"}"
        ),
        1.0
    );
}
