//! Durability across restarts: a clean SIGTERM, and SIGKILL at arbitrary moments.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use crate::harness::{get_trace, health, http_request, request, spans_of, Server};

const TRACES: u128 = 40;
const SPANS_PER_TRACE: u64 = 6;

async fn export_all(server: &Server, first: u128) {
    let mut ingest = server.ingest().await;
    for t in first..first + TRACES {
        ingest
            .export(request(&format!("svc-{}", t % 3), &[t], SPANS_PER_TRACE))
            .await
            .expect("export acknowledged");
    }
}

/// Every trace is complete, field for field, and no span appears twice.
async fn assert_all_present(server: &Server, first: u128) {
    let mut query = server.query().await;
    for t in first..first + TRACES {
        let spans = spans_of(
            &get_trace(&mut query, t)
                .await
                .unwrap_or_else(|e| panic!("trace {t:x}: {e}")),
        );
        let expected = request(&format!("svc-{}", t % 3), &[t], SPANS_PER_TRACE);
        let mut sent = expected.resource_spans[0].scope_spans[0].spans.clone();
        sent.sort_by(|a, b| a.span_id.cmp(&b.span_id));
        assert_eq!(spans.len(), sent.len(), "trace {t:x}");
        let ids: HashSet<_> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
        assert_eq!(ids.len(), spans.len(), "duplicate span in trace {t:x}");
        for ((service, got), want) in spans.iter().zip(&sent) {
            assert_eq!(got, want, "trace {t:x}");
            assert_eq!(*service, format!("svc-{}", t % 3));
        }
    }
}

#[tokio::test]
async fn sigterm_flushes_and_a_restart_serves_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    export_all(&server, 1).await;
    let status = server.terminate();
    assert!(status.success(), "exit status {status}");
    let files = std::fs::read_dir(dir.path().join("tables"))
        .expect("tables dir")
        .count();
    assert!(files > 0, "shutdown wrote no sorted file");

    let server = Server::start(dir.path());
    assert_all_present(&server, 1).await;
    assert!(
        server.log_text().contains("wal_records=0"),
        "clean shutdown left WAL records:\n{}",
        server.log_text()
    );
}

#[tokio::test]
async fn sigkill_loses_no_acknowledged_span_and_duplicates_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Small buffers: flushes happen during the run, so the kill lands with data
    // in files, in sealed buffers and in the WAL at once.
    let small = ["--flush-bytes", "20000", "--shards", "2"];
    let server = Server::start_with(dir.path(), &small);
    export_all(&server, 1).await;
    server.kill9();

    let server = Server::start_with(dir.path(), &small);
    assert_all_present(&server, 1).await;
    export_all(&server, 1_000).await;
    server.kill9();

    let server = Server::start(dir.path());
    assert_all_present(&server, 1).await;
    assert_all_present(&server, 1_000).await;
}

/// While storage opens (here: blocked reading a WAL segment that is a FIFO,
/// until the test writes to it), both ports answer: health NOT_SERVING,
/// `/ready` 503 and exports UNAVAILABLE (retryable). Once storage is open
/// the same server serves.
#[tokio::test]
async fn while_storage_opens_health_says_not_serving_and_exports_are_retryable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = dir.path().join("wal");
    std::fs::create_dir_all(&wal).expect("wal dir");
    let fifo = wal.join("00000000000000000001.wal");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    let server = Server::start_until(dir.path(), &[], "tracedb starting");

    assert_eq!(health(&server).await, 2, "NOT_SERVING while storage opens");
    let ready = http_request(server.http, "GET", "/ready", &[], b"").expect("GET /ready");
    assert_eq!(ready.status, 503);
    let refused = server
        .ingest()
        .await
        .export(request("startup", &[1], 2))
        .await
        .expect_err("no export before storage is open");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        !server.log_text().contains("tracedb listening"),
        "storage opened while the WAL was still blocked"
    );

    // Let the replay go on: a writer that writes nothing leaves an empty
    // segment, which recovery removes as an interrupted creation.
    drop(
        std::fs::OpenOptions::new()
            .write(true)
            .open(&fifo)
            .expect("open the FIFO for writing"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.log_text().contains("tracedb listening") {
        assert!(
            Instant::now() < deadline,
            "storage never opened:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(health(&server).await, 1, "SERVING once storage is open");
    let ready = http_request(server.http, "GET", "/ready", &[], b"").expect("GET /ready");
    assert_eq!(ready.status, 200);
    server
        .ingest()
        .await
        .export(request("startup", &[1], 2))
        .await
        .expect("export once serving");
    let got = get_trace(&mut server.query().await, 1)
        .await
        .expect("GetTrace");
    assert_eq!(spans_of(&got).len(), 2);
}
