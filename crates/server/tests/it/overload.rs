//! Back-pressure: with a tiny memory budget, a burst of concurrent exports gets
//! the retryable statuses OTLP clients back off on (HTTP 429 with Retry-After,
//! gRPC UNAVAILABLE with RetryInfo), everything acknowledged is stored, and the
//! server keeps answering health checks and queries meanwhile.

use std::sync::Arc;

use prost::Message;
use tokio::sync::Barrier;
use tracedb_proto::google::rpc;

use crate::harness::{get_trace, health, metric, post_traces, request, spans_of, Server};

const CONCURRENCY: u128 = 24;
/// Spans per request: about 30 KiB of protobuf.
const SPANS: u64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_memory_budget_answers_retryable_statuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Each request is ~30 KiB: the budget (three quarters of 176 KiB) holds
    // about four at a time.
    let server = Arc::new(Server::start_with(
        dir.path(),
        &["--max-memory", "176KiB", "--max-message-bytes", "64KiB"],
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
    assert!(refused > 0, "no request was refused under a 132 KiB budget");
    assert!(!acked.is_empty(), "no request got through at all");

    // Still responsive: health, queries, and every acknowledged trace is whole.
    assert_eq!(health(&server).await, 1, "SERVING");
    let mut query = server.query().await;
    for trace in &acked {
        let messages = get_trace(&mut query, *trace)
            .await
            .expect("acknowledged trace");
        let spans = spans_of(&messages).len();
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

/// Streams that keep exporting for a few seconds, far more than a small
/// budget lets the server take: every refusal is retryable (UNAVAILABLE with
/// RetryInfo, nothing else), the server keeps taking spans all along, health
/// checks, `/metrics` and GetTrace keep answering during the load, and every
/// acknowledged trace is whole afterwards. (Throughput and memory under ten
/// times the load are measured with `tracedb-bench`: docs/BENCHMARKS.md,
/// "Overload".)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sustained_overload_is_refused_retryably_while_the_server_stays_responsive() {
    use std::{
        sync::atomic::{AtomicBool, Ordering},
        time::{Duration, Instant},
    };

    const STREAMS: u128 = 48;
    const SPANS_PER_REQUEST: u64 = 100;
    let dir = tempfile::tempdir().expect("tempdir");
    // Three quarters of 4 MiB for requests and buffered spans: about a
    // hundred requests of ~30 KiB, against 48 streams that never pause.
    let server = Arc::new(Server::start_with(
        dir.path(),
        &[
            "--max-memory",
            "4MiB",
            "--max-message-bytes",
            "1MiB",
            "--flush-bytes",
            "512KiB",
        ],
    ));
    let running = Arc::new(AtomicBool::new(true));
    let mut streams = Vec::new();
    for stream in 0..STREAMS {
        let (server, running) = (server.clone(), running.clone());
        streams.push(tokio::spawn(async move {
            let mut client = server.ingest().await;
            let (mut acked, mut refused) = (Vec::new(), 0u64);
            let mut n = 0u128;
            while running.load(Ordering::Relaxed) {
                let trace = (stream + 1) << 64 | n;
                n += 1;
                match client
                    .export(request("overload", &[trace], SPANS_PER_REQUEST))
                    .await
                {
                    Ok(_) => acked.push(trace),
                    Err(status) => {
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
                        let details =
                            rpc::Status::decode(status.details()).expect("status details");
                        assert!(
                            details
                                .details
                                .iter()
                                .any(|d| d.type_url == "type.googleapis.com/google.rpc.RetryInfo"),
                            "UNAVAILABLE without RetryInfo: {status}"
                        );
                        refused += 1;
                    }
                }
            }
            (acked, refused)
        }));
    }

    // Probe while the load runs.
    let load_ends = Instant::now() + Duration::from_secs(5);
    let mut query = server.query().await;
    let mut probes = 0;
    while Instant::now() < load_ends {
        assert_eq!(health(&server).await, 1, "SERVING under load");
        let accepted = metric(&server, "tracedb_spans_accepted_total{protocol=\"grpc\"}");
        // A trace stream 1 acknowledged early on (if any yet) is readable now.
        if accepted > 0.0 {
            let first = 1u128 << 64;
            match get_trace(&mut query, first).await {
                Ok(_) => {}
                Err(s) if s.code() == tonic::Code::NotFound => {}
                Err(s) => panic!("GetTrace under load: {s}"),
            }
        }
        probes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.store(false, Ordering::Relaxed);
    let (mut acked, mut refused) = (Vec::new(), 0);
    for s in streams {
        let (a, r) = s.await.expect("stream");
        acked.extend(a);
        refused += r;
    }
    assert!(probes >= 10, "only {probes} probes answered in 5 s");
    // At least one request in five refused: the streams asked for more than
    // the budget holds, all along (how many more varies with the machine).
    assert!(
        refused * 4 > acked.len() as u64,
        "the load was not an overload: {refused} refused, {} taken",
        acked.len()
    );
    assert!(
        acked.len() > STREAMS as usize,
        "the server took only {} requests",
        acked.len()
    );
    eprintln!(
        "overload: {} requests taken, {refused} refused retryably, {probes} probes",
        acked.len()
    );

    // Everything acknowledged is whole (a sample: every 7th).
    for trace in acked.iter().step_by(7) {
        let messages = get_trace(&mut query, *trace)
            .await
            .expect("acknowledged trace");
        let spans = spans_of(&messages).len();
        assert_eq!(spans as u64, SPANS_PER_REQUEST, "trace {trace:x}");
    }
}

/// A process already over `--max-memory` before any export (512 KiB: the
/// runtime alone holds more): the budget narrows to its floor, what the
/// process holds is sampled and shown, glibc is asked to give free memory
/// back, and exports still go through, a few at a time, all stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_over_its_memory_limit_narrows_admission_to_the_floor() {
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().expect("tempdir");
    // Three quarters of 512 KiB for requests and buffered spans, never
    // narrowed below two largest requests (128 KiB).
    let server = Server::start_with(
        dir.path(),
        &["--max-memory", "512KiB", "--max-message-bytes", "64KiB"],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&server, "tracedb_memory_resident_bytes") == 0.0 {
        assert!(Instant::now() < deadline, "resident memory never sampled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resident = metric(&server, "tracedb_memory_resident_bytes");
    assert!(resident > f64::from(512u32 << 10), "resident {resident}");
    assert_eq!(
        metric(&server, "tracedb_memory_limit_bytes"),
        f64::from(512u32 << 10)
    );
    assert_eq!(
        metric(&server, "tracedb_memory_budget_bytes"),
        f64::from(384u32 << 10)
    );
    assert_eq!(
        metric(&server, "tracedb_memory_admit_limit_bytes"),
        f64::from(128u32 << 10),
        "the budget narrowed to its floor"
    );
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert!(metric(&server, "tracedb_memory_trims_total") >= 1.0);
    }

    // ~30 KiB per request, 3 MiB in all: more than the floor holds at once.
    let mut client = server.ingest().await;
    let (mut refused, deadline) = (0, Instant::now() + Duration::from_secs(60));
    for n in 0..100u128 {
        loop {
            match client.export(request("tight", &[0x5000 + n], 100)).await {
                Ok(_) => break,
                Err(s) if s.code() == tonic::Code::Unavailable => {
                    refused += 1;
                    assert!(Instant::now() < deadline, "ingest stalled: {s}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(s) => panic!("{s}"),
            }
        }
    }
    eprintln!("tight process limit: 100 requests stored, {refused} refusals retried");
    let mut query = server.query().await;
    for n in (0..100u128).step_by(9) {
        let messages = get_trace(&mut query, 0x5000 + n)
            .await
            .expect("stored trace");
        assert_eq!(spans_of(&messages).len(), 100, "trace {n}");
    }
}
