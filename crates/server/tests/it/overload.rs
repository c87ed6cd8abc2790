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

/// The resident memory of process `pid` in bytes: (anonymous now, all of it
/// now, the peak of all of it so far). Pages of the sorted files a search
/// maps are in the last two: page cache, which the kernel takes back before
/// anything else.
fn rss(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kib = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
            * 1024
    };
    (kib("RssAnon:"), kib("VmRSS:"), kib("VmHWM:"))
}

/// `--max-memory` holds with searches too: exports at full speed from
/// several streams while four clients search at once (the newest traces,
/// a query that matches nothing and so reads every block, an aggregate over
/// many traces, tag names, the values of a key with a value per trace). The
/// server's peak resident memory (`VmHWM`) stays inside the budget; searches
/// the budget cannot hold now are refused retryably (503), never answered
/// by growing past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_memory_stays_inside_the_budget_under_ingest_and_concurrent_searches() {
    use std::{
        sync::atomic::{AtomicBool, AtomicU64, Ordering},
        time::{Duration, Instant},
    };

    use crate::harness::{http_request, string_kv};

    const BUDGET: u64 = 512 << 20;
    const STREAMS: u128 = 6;
    let seconds = std::env::var("TRACEDB_MEMORY_TEST_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25u64);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Arc::new(Server::start_with(dir.path(), &["--max-memory", "512MiB"]));
    let pid = server.pid();
    let running = Arc::new(AtomicBool::new(true));
    let mut streams = Vec::new();
    for stream in 0..STREAMS {
        let (server, running) = (server.clone(), running.clone());
        streams.push(tokio::spawn(async move {
            let mut client = server.ingest().await;
            let mut taken = 0u64;
            let mut n = 0u128;
            while running.load(Ordering::Relaxed) {
                let traces: Vec<u128> = (0..50).map(|i| (stream + 1) << 64 | (n + i)).collect();
                n += 50;
                let mut sent = request("memory", &traces, 8);
                for span in &mut sent.resource_spans[0].scope_spans[0].spans {
                    let t = u128::from_be_bytes(span.trace_id[..].try_into().expect("16 bytes"));
                    span.attributes
                        .push(string_kv("user.id", &format!("user-{t:x}")));
                    // Each trace starts a microsecond after the one before,
                    // as traces do (the newest-first search stops by start).
                    let later = (n as u64 * 8 + stream as u64) * 1_000;
                    span.start_time_unix_nano += later;
                    span.end_time_unix_nano += later;
                }
                match client.export(sent).await {
                    Ok(_) => taken += 1,
                    Err(status) => {
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            taken
        }));
    }

    let paths = [
        "/api/search?q=%7B%7D&limit=300&spss=100",
        "/api/search?q=%7Bspan.user.id%3D%22nobody%22%7D&limit=20",
        "/api/search?q=%7B%20%7D%20%7C%20count()%20%3E%203&limit=300",
        "/api/v2/search/tags",
        "/api/v2/search/tag/span.user.id/values",
        "/api/v2/search/tag/span.http.route/values",
    ];
    // TRACEDB_MEMORY_TEST_BASELINE=1: no searches, for the peak of the
    // ingest alone (the test then fails on its count of searches).
    let baseline = std::env::var_os("TRACEDB_MEMORY_TEST_BASELINE").is_some();
    let (answered, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut searchers = Vec::new();
    for client in 0..4 {
        let (http, running) = (server.http, running.clone());
        let (answered, refused) = (answered.clone(), refused.clone());
        searchers.push(tokio::task::spawn_blocking(move || {
            // Searches begin once some files exist.
            let begin = Instant::now() + Duration::from_secs(3);
            while Instant::now() < begin || baseline {
                if !running.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut i = client;
            while running.load(Ordering::Relaxed) {
                let path = paths[i % paths.len()];
                i += 1;
                let r = http_request(http, "GET", path, &[], b"").expect("search");
                match r.status {
                    200 => answered.fetch_add(1, Ordering::Relaxed),
                    503 => refused.fetch_add(1, Ordering::Relaxed),
                    other => panic!("{path}: {other} {}", String::from_utf8_lossy(&r.body)),
                };
            }
        }));
    }

    let ends = Instant::now() + Duration::from_secs(seconds);
    let (mut anon, mut merge_room, mut next_metrics) = (0, 0f64, Instant::now());
    while Instant::now() < ends {
        anon = anon.max(rss(pid).0);
        if Instant::now() >= next_metrics {
            next_metrics += Duration::from_millis(250);
            merge_room = merge_room.max(metric(&server, "tracedb_memory_work_room_bytes"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let merges = metric(&server, "tracedb_compactions_total");
    let (_, _, peak) = rss(pid);
    running.store(false, Ordering::Relaxed);
    let mut taken = 0;
    for s in streams {
        taken += s.await.expect("stream");
    }
    for s in searchers {
        s.await.expect("searcher");
    }
    let (answered, refused) = (
        answered.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    eprintln!(
        "memory: anonymous peak {} MiB (sampled every 20 ms), VmHWM {} MiB with mapped files, of {} MiB; {taken} exports taken; {answered} searches answered, {refused} refused; {merges} merges, room kept for them at most {} MiB",
        anon >> 20,
        peak >> 20,
        BUDGET >> 20,
        merge_room as u64 >> 20
    );
    assert!(
        taken > 100,
        "too little ingest to test anything: {taken} exports"
    );
    assert!(answered >= 50, "too few searches answered: {answered}");
    assert!(
        anon <= BUDGET,
        "resident anonymous memory {} MiB over --max-memory {} MiB",
        anon >> 20,
        BUDGET >> 20
    );
}
