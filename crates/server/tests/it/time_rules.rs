//! Spans the server will not keep for their times are refused in OTLP partial
//! success, on every protocol, never acknowledged and then hidden: ended
//! before the retention window, no start time, or ahead of the clock. A span
//! that ends before it starts is kept. With `--retention off` old spans are
//! kept and read back.

use prost::Message;
use serde_json::{json, Value};
use tracedb_proto::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};

use crate::harness::{get_trace, metric, post_traces, request, spans_of, Server};

const DAY: u64 = 86_400 * 1_000_000_000;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

/// One span for each of traces `first..first + 5`: recent, 30 days old, no
/// start time, two days ahead, and ending 1 ms before it starts.
fn mixed_request(first: u128) -> ExportTraceServiceRequest {
    let mut request = request(
        "clock",
        &[first, first + 1, first + 2, first + 3, first + 4],
        1,
    );
    let spans = &mut request.resource_spans[0].scope_spans[0].spans;
    let t = now();
    let times = [
        (t - 1_000, t),
        (t - 30 * DAY, t - 30 * DAY + 1_000),
        (0, t),
        (t + 2 * DAY, t + 2 * DAY + 1_000),
        (t, t - 1_000_000),
    ];
    for (span, (start, end)) in spans.iter_mut().zip(times) {
        span.start_time_unix_nano = start;
        span.end_time_unix_nano = end;
    }
    request
}

fn rejected(server: &Server, reason: &str) -> f64 {
    metric(
        server,
        &format!("tracedb_spans_rejected_total{{reason=\"{reason}\"}}"),
    )
}

/// The spans of trace `id` read back, or the gRPC code the read failed with.
async fn read(server: &Server, id: u128) -> Result<usize, tonic::Code> {
    let mut query = server.query().await;
    get_trace(&mut query, id)
        .await
        .map(|m| spans_of(&m).len())
        .map_err(|s| s.code())
}

/// Checks what one mixed request starting at `first` left behind.
async fn only_kept_spans_are_readable(server: &Server, first: u128) {
    assert_eq!(read(server, first).await, Ok(1), "recent span");
    for refused in [first + 1, first + 2, first + 3] {
        assert_eq!(read(server, refused).await, Err(tonic::Code::NotFound));
    }
    assert_eq!(read(server, first + 4).await, Ok(1), "end before start");
}

fn assert_reasons(message: &str) {
    for reason in [
        "spans[1]: ended at ",
        "before the retention window began at ",
        "spans[2]: start_time_unix_nano is not set",
        "spans[3]: ends at ",
        "more than 1h ahead of the server's clock",
    ] {
        assert!(message.contains(reason), "{reason:?} not in {message:?}");
    }
}

#[tokio::test]
async fn spans_the_server_would_not_keep_are_refused_on_every_protocol() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());

    // gRPC.
    let mut ingest = server.ingest().await;
    let answer = ingest
        .export(mixed_request(0x100))
        .await
        .expect("export")
        .into_inner();
    let partial = answer.partial_success.expect("partial_success set");
    assert_eq!(partial.rejected_spans, 3);
    assert_reasons(&partial.error_message);
    only_kept_spans_are_readable(&server, 0x100).await;

    // OTLP/HTTP protobuf.
    let body = mixed_request(0x200).encode_to_vec();
    let response = post_traces(
        &server,
        &[("Content-Type", "application/x-protobuf")],
        &body,
    );
    assert_eq!(response.status, 200);
    let partial = ExportTraceServiceResponse::decode(&response.body[..])
        .expect("protobuf answer")
        .partial_success
        .expect("partial_success set");
    assert_eq!(partial.rejected_spans, 3);
    assert_reasons(&partial.error_message);
    only_kept_spans_are_readable(&server, 0x200).await;

    // OTLP/JSON: the README's example span as first written, from 2023.
    let old = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
         "name": "GET /cart", "kind": 2,
         "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000250000000"}]}]}]});
    let response = post_traces(
        &server,
        &[("Content-Type", "application/json")],
        old.to_string().as_bytes(),
    );
    assert_eq!(response.status, 200);
    let answer: Value = serde_json::from_slice(&response.body).expect("JSON answer");
    assert_eq!(answer["partialSuccess"]["rejectedSpans"], "1", "{answer}");
    let message = answer["partialSuccess"]["errorMessage"]
        .as_str()
        .expect("a message");
    assert!(
        message.contains("ended at 2023-11-14T22:13:20.250Z, before the retention window"),
        "{message}"
    );
    assert_eq!(
        read(&server, 0x5b8efff798038103d269b633813fc60c).await,
        Err(tonic::Code::NotFound)
    );

    assert_eq!(rejected(&server, "expired"), 3.0);
    assert_eq!(rejected(&server, "no_start_time"), 2.0);
    assert_eq!(rejected(&server, "future_time"), 2.0);
    assert_eq!(
        metric(&server, "tracedb_spans_accepted_total{protocol=\"grpc\"}"),
        2.0
    );
}

#[tokio::test]
async fn without_retention_old_spans_are_kept_and_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(dir.path(), &["--retention", "off"]);
    let mut ingest = server.ingest().await;
    let answer = ingest
        .export(mixed_request(0x300))
        .await
        .expect("export")
        .into_inner();
    let partial = answer.partial_success.expect("partial_success set");
    assert_eq!(partial.rejected_spans, 2, "{}", partial.error_message);
    assert!(!partial.error_message.contains("retention"));
    assert_eq!(read(&server, 0x301).await, Ok(1), "the 30-day-old span");
    assert_eq!(rejected(&server, "expired"), 0.0);
}
