//! The Collector project's load generator as a real OTLP client: a bounded run
//! over gRPC and over OTLP/HTTP, and the server's own accepted-spans counter
//! must equal what it sent. `scripts/test` installs telemetrygen.

use std::{path::PathBuf, process::Command};

use crate::harness::{metric, Server};

const WORKERS: u64 = 2;
const TRACES_PER_WORKER: u64 = 100;
const CHILD_SPANS: u64 = 2;

/// telemetrygen, installed by the README's test command (`scripts/test`).
fn telemetrygen() -> PathBuf {
    let path = std::env::var_os("TRACEDB_TEST_TELEMETRYGEN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci-cache/bin/telemetrygen"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "telemetrygen not found at {}: run scripts/test (it installs it) or set TRACEDB_TEST_TELEMETRYGEN",
        path.display()
    );
    path
}

fn run(server: &Server, http: bool) -> String {
    let mut cmd = Command::new(telemetrygen());
    cmd.args(["traces", "--otlp-insecure"]);
    if http {
        cmd.args(["--otlp-http", "--otlp-endpoint", &server.http.to_string()]);
    } else {
        cmd.args(["--otlp-endpoint", &server.addr.to_string()]);
    }
    // A modest rate: telemetrygen drops spans silently when it is flooded.
    cmd.args([
        "--workers",
        &WORKERS.to_string(),
        "--traces",
        &TRACES_PER_WORKER.to_string(),
        "--child-spans",
        &CHILD_SPANS.to_string(),
        "--rate",
        "500",
    ]);
    let out = cmd.output().expect("run telemetrygen");
    let log =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "telemetrygen failed:\n{log}");
    log
}

#[test]
fn telemetrygen_grpc_and_http_spans_are_all_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let expected = (WORKERS * TRACES_PER_WORKER * (1 + CHILD_SPANS)) as f64;

    let log = run(&server, false);
    assert!(log.contains("traces generated"), "{log}");
    assert_eq!(
        metric(&server, "tracedb_spans_accepted_total{protocol=\"grpc\"}"),
        expected,
        "telemetrygen log:\n{log}"
    );

    let log = run(&server, true);
    assert_eq!(
        metric(
            &server,
            "tracedb_spans_accepted_total{protocol=\"http_protobuf\"}"
        ),
        expected,
        "telemetrygen log:\n{log}"
    );
    for protocol in ["grpc", "http_protobuf"] {
        for outcome in ["malformed", "overloaded", "storage_error", "unavailable"] {
            assert_eq!(
                metric(
                    &server,
                    &format!(
                        "tracedb_export_requests_total{{protocol=\"{protocol}\",outcome=\"{outcome}\"}}"
                    )
                ),
                0.0,
                "{protocol} {outcome}"
            );
        }
    }
}
