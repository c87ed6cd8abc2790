//! Durability across restarts: a clean SIGTERM, and SIGKILL at arbitrary moments.

use std::collections::HashSet;

use crate::harness::{get_trace, request, spans_of, Server};

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
