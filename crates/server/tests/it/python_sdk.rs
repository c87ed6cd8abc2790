//! End to end with a real OpenTelemetry SDK: the Python SDK's OTLP/gRPC and
//! OTLP/HTTP protobuf exporters (gzip) send traces with attributes, events,
//! links and status; GetTrace must return them field for field, with their
//! resource and scope, and the server must count every one as accepted.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use prost::Message;
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::InstrumentationScope,
    resource::v1::Resource, trace::v1::Span,
};

use crate::harness::{get_trace, metric, Server};

/// The virtualenv's Python, made by the README's test command (`scripts/test`).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("TRACEDB_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        venv.exists(),
        "no Python with the OpenTelemetry SDK at {}: run scripts/test (it creates .venv) or set TRACEDB_TEST_PYTHON",
        venv.display()
    );
    venv
}

pub type Expected =
    BTreeMap<Vec<u8>, (Option<Resource>, Option<InstrumentationScope>, String, Span)>;

/// Every span of a request, by span ID, with its resource, scope and scope schema URL.
pub fn by_span_id(requests: &[ExportTraceServiceRequest]) -> Expected {
    let mut out = BTreeMap::new();
    for req in requests {
        for rs in &req.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    out.insert(
                        span.span_id.to_vec(),
                        (
                            rs.resource.clone(),
                            ss.scope.clone(),
                            ss.schema_url.clone(),
                            span.clone(),
                        ),
                    );
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn python_sdk_traces_come_back_field_for_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    python_sdk_round_trip(&server, "grpc", &[], dir.path()).await;
}

#[tokio::test]
async fn python_sdk_http_protobuf_traces_come_back_field_for_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    python_sdk_round_trip(&server, "http", &[], dir.path()).await;
}

/// Runs `tests/python/export_traces.py`: `traces` traces of 3 spans to
/// `endpoint` over `protocol` with the Python SDK, `env` set for the
/// exporter. Returns what the SDK sent (also left in `sent_file`) and what
/// it logged.
pub fn export_with_python(
    protocol: &str,
    endpoint: &str,
    sent_file: &Path,
    traces: usize,
    env: &[(&str, &Path)],
) -> (ExportTraceServiceRequest, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/export_traces.py");
    let out = Command::new(python())
        .arg(&script)
        .args([protocol, endpoint])
        .arg(sent_file)
        .arg(traces.to_string())
        .envs(env.iter().copied())
        // requests lets these override the exporter's own CA file
        // (OTEL_EXPORTER_OTLP_CERTIFICATE): a machine's setting, not the SDK's.
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE")
        .output()
        .expect("run the Python exporter");
    assert!(
        out.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent =
        ExportTraceServiceRequest::decode(&std::fs::read(sent_file).expect("sent spans")[..])
            .expect("the SDK's encoding");
    (sent, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Exports 5 traces of 3 spans to `server` with the Python SDK over `grpc` or
/// `http`, with `env` set for the exporter (its TLS settings), and checks
/// that GetTrace returns them field for field. Returns the trace IDs.
pub async fn python_sdk_round_trip(
    server: &Server,
    protocol: &str,
    env: &[(&str, &Path)],
    scratch: &Path,
) -> Vec<u128> {
    let sent_file = scratch.join(format!("sent-{protocol}.pb"));
    let addr = match protocol {
        "grpc" => server.addr,
        _ => server.http,
    };
    let endpoint = match server.tls {
        None => addr.to_string(),
        Some(_) => format!("https://{addr}"),
    };
    let (sent, stderr) = export_with_python(protocol, &endpoint, &sent_file, 5, env);
    let expected = by_span_id(&[sent]);
    assert_eq!(expected.len(), 15, "5 traces of 3 spans");
    let trace_ids: std::collections::BTreeSet<Vec<u8>> = expected
        .values()
        .map(|(_, _, _, s)| s.trace_id.to_vec())
        .collect();
    assert_eq!(trace_ids.len(), 5);
    let counter = match protocol {
        "grpc" => "tracedb_spans_accepted_total{protocol=\"grpc\"}",
        _ => "tracedb_spans_accepted_total{protocol=\"http_protobuf\"}",
    };
    assert_eq!(metric(server, counter), 15.0, "{counter}");
    assert!(
        !stderr.contains("Failed to export"),
        "the SDK reported failed exports:\n{stderr}"
    );
    assert!(
        expected.values().any(|(_, _, _, s)| !s.links.is_empty()),
        "the script sends links"
    );
    assert!(
        expected.values().any(|(_, _, _, s)| !s.events.is_empty()),
        "the script sends events"
    );

    let mut query = server.query().await;
    let mut got_requests = Vec::new();
    for id in &trace_ids {
        let trace = u128::from_be_bytes(id[..].try_into().expect("16 bytes"));
        let messages = get_trace(&mut query, trace)
            .await
            .expect("trace exported by the SDK");
        got_requests.push(ExportTraceServiceRequest {
            resource_spans: messages
                .into_iter()
                .flat_map(|m| m.resource_spans)
                .collect(),
        });
    }
    let got = by_span_id(&got_requests);
    assert_eq!(got.len(), expected.len(), "span count");
    for (id, want) in &expected {
        let have = got
            .get(id)
            .unwrap_or_else(|| panic!("span {id:02x?} missing"));
        assert_eq!(have.3, want.3, "span fields");
        assert_eq!(have.0, want.0, "resource");
        assert_eq!(have.1, want.1, "scope");
        assert_eq!(have.2, want.2, "scope schema URL");
    }
    trace_ids
        .iter()
        .map(|id| u128::from_be_bytes(id[..].try_into().expect("16 bytes")))
        .collect()
}
