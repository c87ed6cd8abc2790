//! Back-pressure: with a tiny memory budget, a burst of concurrent exports gets
//! the retryable statuses OTLP clients back off on (HTTP 429 with Retry-After,
//! gRPC UNAVAILABLE with RetryInfo), everything acknowledged is stored, and the
//! server keeps answering health checks and queries meanwhile.

use std::sync::Arc;

use prost::Message;
use tokio::sync::Barrier;
use tracedb_proto::google::rpc;

use crate::harness::{get_trace, health, metric, post_traces, request, Server};

const CONCURRENCY: u128 = 24;
/// Spans per request: about 30 KiB of protobuf.
const SPANS: u64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_memory_budget_answers_retryable_statuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Each request is ~30 KiB: the budget holds about four at a time.
    let server = Arc::new(Server::start_with(
        dir.path(),
        &["--max-memory", "128KiB", "--max-message-bytes", "64KiB"],
    ));
    let barrier = Arc::new(Barrier::new(2 * CONCURRENCY as usize));
    let mut tasks = Vec::new();
    for i in 0..CONCURRENCY {
        // HTTP, from blocking threads.
        let (http_server, http_barrier) = (server.clone(), barrier.clone());
        let trace = 0x1000 + i;
        tasks.push(tokio::spawn(async move {
            let (server, barrier) = (http_server, http_barrier);
            let body = request("burst", &[trace], SPANS).encode_to_vec();
            assert!(body.len() < 64 << 10, "{} bytes", body.len());
            barrier.wait().await;
            let response = tokio::task::spawn_blocking(move || {
                post_traces(
                    &server,
                    &[("Content-Type", "application/x-protobuf")],
                    &body,
                )
            })
            .await
            .expect("thread");
            match response.status {
                200 => (trace, true, false),
                429 | 503 => {
                    assert!(
                        response.header("retry-after").is_some(),
                        "{} without Retry-After",
                        response.status
                    );
                    let status = rpc::Status::decode(&response.body[..]).expect("status body");
                    assert_eq!(status.code, tonic::Code::Unavailable as i32);
                    assert_eq!(
                        status.details[0].type_url,
                        "type.googleapis.com/google.rpc.RetryInfo"
                    );
                    (trace, false, true)
                }
                other => panic!("unexpected HTTP status {other}"),
            }
        }));
        // gRPC.
        let (grpc_server, grpc_barrier) = (server.clone(), barrier.clone());
        let trace = 0x2000 + i;
        tasks.push(tokio::spawn(async move {
            let (server, barrier) = (grpc_server, grpc_barrier);
            let mut client = server.ingest().await;
            let req = request("burst", &[trace], SPANS);
            barrier.wait().await;
            match client.export(req).await {
                Ok(_) => (trace, true, false),
                Err(status) => {
                    assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
                    let details = rpc::Status::decode(status.details()).expect("status details");
                    let retry = details
                        .details
                        .iter()
                        .find(|d| d.type_url == "type.googleapis.com/google.rpc.RetryInfo")
                        .expect("RetryInfo in grpc-status-details-bin");
                    let info = rpc::RetryInfo::decode(&retry.value[..]).expect("RetryInfo");
                    assert!(
                        info.retry_delay
                            .is_some_and(|d| d.seconds > 0 || d.nanos > 0),
                        "a retry delay is advised"
                    );
                    (trace, false, true)
                }
            }
        }));
    }
    let mut acked = Vec::new();
    let mut refused = 0;
    for task in tasks {
        let (trace, ok, retry) = task.await.expect("task");
        if ok {
            acked.push(trace);
        }
        if retry {
            refused += 1;
        }
    }
    assert!(refused > 0, "no request was refused under a 128 KiB budget");
    assert!(!acked.is_empty(), "no request got through at all");

    // Still responsive: health, queries, and every acknowledged trace is whole.
    assert_eq!(health(&server).await, 1, "SERVING");
    let mut query = server.query().await;
    for trace in &acked {
        let messages = get_trace(&mut query, *trace)
            .await
            .expect("acknowledged trace");
        let spans: usize = messages
            .iter()
            .flat_map(|m| &m.resource_spans)
            .flat_map(|rs| &rs.scope_spans)
            .map(|ss| ss.spans.len())
            .sum();
        assert_eq!(spans as u64, SPANS, "trace {trace:x}");
    }
    let overloaded = metric(
        &server,
        "tracedb_export_requests_total{protocol=\"http_protobuf\",outcome=\"overloaded\"}",
    ) + metric(
        &server,
        "tracedb_export_requests_total{protocol=\"grpc\",outcome=\"overloaded\"}",
    );
    assert_eq!(overloaded, f64::from(refused));

    // Once the burst is over, the budget drains (early flushes) and exports
    // are taken again.
    let mut client = server.ingest().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match client.export(request("after", &[0x3000], 40)).await {
            Ok(_) => break,
            Err(s) if s.code() == tonic::Code::Unavailable => {
                assert!(std::time::Instant::now() < deadline, "budget never drained");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(s) => panic!("{s}"),
        }
    }
}
