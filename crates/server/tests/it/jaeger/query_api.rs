//! What the Jaeger UI asks, through a stock Jaeger v2 binary (the one
//! `scripts/jaeger/build` builds for Jaeger's storage suite) whose `grpc`
//! remote storage is tracedb: `/api/v3/services`, `/api/v3/operations`,
//! `/api/v3/traces` and `/api/v3/traces/{id}`, and the older `/api/services`,
//! `/api/services/{service}/operations`, `/api/traces?service=…` and
//! `/api/traces/{id}`. Once with one node holding everything, once through
//! `tracedb query` over two nodes with one trace split between them. Every
//! answer is compared with the spans tracedb's own GetTrace returns.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracedb_proto::trace::v1::span::SpanKind;

use super::{export, now, span, MS};
use crate::harness::{free_port, get_trace, http_request, spans_of, Server};

/// A trace with its root on frontend and two spans on backend: split
/// between the two nodes through the tier.
const SPLIT: u128 = 0x5a17_0000_0000_0000_0000_0000_0000_0001;
/// Frontend alone.
const HOME: u128 = 0x5a17_0000_0000_0000_0000_0000_0000_0002;
/// Backend alone.
const BATCH: u128 = 0x5a17_0000_0000_0000_0000_0000_0000_0003;

/// The Jaeger binary `scripts/jaeger/build` built.
fn jaeger_binary() -> PathBuf {
    if let Ok(p) = std::env::var("TRACEDB_TEST_JAEGER") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../.ci-cache/jaeger-src/cmd/jaeger/jaeger");
    assert!(
        built.exists(),
        "no Jaeger binary at {}: run scripts/test (it runs scripts/jaeger/build) or set TRACEDB_TEST_JAEGER",
        built.display()
    );
    built
}

/// A Jaeger process reading from (and writing to) one tracedb address,
/// killed when dropped.
struct Jaeger {
    child: Child,
    http: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Jaeger {
    fn start(storage: SocketAddr, writer: SocketAddr) -> Jaeger {
        let dir = tempfile::tempdir().expect("tempdir");
        let http = free_port();
        let config = format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_query:
    storage:
      traces: tracedb
    http:
      endpoint: {http}
    grpc:
      endpoint: {grpc}
  jaeger_storage:
    backends:
      tracedb:
        grpc:
          endpoint: {storage}
          tls:
            insecure: true
          writer:
            endpoint: {writer}
            tls:
              insecure: true
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {otlp}
exporters:
  jaeger_storage_exporter:
    trace_storage: tracedb
"#,
            grpc = free_port(),
            otlp = free_port(),
        );
        let path = dir.path().join("jaeger.yaml");
        std::fs::write(&path, config).expect("write jaeger.yaml");
        let log = std::fs::File::create(dir.path().join("jaeger.log")).expect("jaeger.log");
        let child = Command::new(jaeger_binary())
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start jaeger");
        let mut jaeger = Jaeger {
            child,
            http,
            _dir: dir,
        };
        jaeger.wait_ready();
        jaeger
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("jaeger status") {
                panic!("jaeger exited ({status}): {}", self.log());
            }
            if http_request(self.http, "GET", "/api/v3/services", &[], b"")
                .is_ok_and(|r| r.status == 200)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("jaeger was not ready within 60 s: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("jaeger.log")).unwrap_or_default()
    }

    /// GET `path`, which must answer 200 with JSON.
    fn get(&self, path: &str) -> Value {
        let r = http_request(self.http, "GET", path, &[], b"").expect("GET from jaeger");
        let body = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(r.status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }
}

/// The spans of the three traces, as (node, service, spans) exports: `split`
/// sends backend's spans to the second node.
async fn export_fixture(nodes: &[&Server], t0: u64) {
    let first = nodes[0];
    let second = nodes[nodes.len() - 1];
    first
        .ingest()
        .await
        .export(export(
            "frontend",
            vec![
                span(
                    SPLIT,
                    1,
                    None,
                    "GET /checkout",
                    SpanKind::Server,
                    t0,
                    50 * MS,
                ),
                span(
                    HOME,
                    1,
                    None,
                    "GET /home",
                    SpanKind::Server,
                    t0 + 1_000 * MS,
                    5 * MS,
                ),
            ],
        ))
        .await
        .expect("export frontend");
    second
        .ingest()
        .await
        .export(export(
            "backend",
            vec![
                span(
                    SPLIT,
                    2,
                    Some(1),
                    "charge",
                    SpanKind::Server,
                    t0 + 5 * MS,
                    30 * MS,
                ),
                span(
                    SPLIT,
                    3,
                    Some(2),
                    "db query",
                    SpanKind::Client,
                    t0 + 6 * MS,
                    20 * MS,
                ),
                span(
                    BATCH,
                    1,
                    None,
                    "charge",
                    SpanKind::Server,
                    t0 + 2_000 * MS,
                    8 * MS,
                ),
            ],
        ))
        .await
        .expect("export backend");
}

/// `(service, span ID)` of every span tracedb's GetTrace returns for `trace`
/// from `server`.
async fn held(server: &Server, trace: u128) -> BTreeSet<(String, String)> {
    let messages = get_trace(&mut server.query().await, trace)
        .await
        .expect("GetTrace");
    spans_of(&messages)
        .into_iter()
        .map(|(service, s)| (service, hex(&s.span_id)))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn trace_hex(trace: u128) -> String {
    format!("{trace:032x}")
}

/// RFC 3339 in UTC, as Jaeger's query API takes times.
fn rfc3339(nanos: u64) -> String {
    tracedb_proto::time::Utc::from_unix_nanos(nanos).to_string()
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

/// `(service, span ID)` of every span of one trace in a `/api/v3` answer
/// (OTLP JSON), by trace.
fn v3_traces(answer: &Value) -> std::collections::BTreeMap<String, BTreeSet<(String, String)>> {
    let mut out: std::collections::BTreeMap<String, BTreeSet<(String, String)>> =
        Default::default();
    let empty = Vec::new();
    let resource_spans = answer["result"]["resourceSpans"]
        .as_array()
        .unwrap_or(&empty);
    for rs in resource_spans {
        let service = rs["resource"]["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|kv| kv["key"] == "service.name")
            .and_then(|kv| kv["value"]["stringValue"].as_str())
            .unwrap_or_default()
            .to_owned();
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for s in ss["spans"].as_array().into_iter().flatten() {
                let trace = s["traceId"].as_str().expect("traceId").to_lowercase();
                let id = s["spanId"].as_str().expect("spanId").to_lowercase();
                out.entry(trace).or_default().insert((service.clone(), id));
            }
        }
    }
    out
}

/// The same from the older `/api/traces` answer (Jaeger's UI model).
fn v1_traces(answer: &Value) -> std::collections::BTreeMap<String, BTreeSet<(String, String)>> {
    let mut out = std::collections::BTreeMap::new();
    for t in answer["data"].as_array().expect("data") {
        let processes = &t["processes"];
        let spans: BTreeSet<(String, String)> = t["spans"]
            .as_array()
            .expect("spans")
            .iter()
            .map(|s| {
                let process = s["processID"].as_str().expect("processID");
                let service = processes[process]["serviceName"]
                    .as_str()
                    .expect("serviceName")
                    .to_owned();
                (service, s["spanID"].as_str().expect("spanID").to_owned())
            })
            .collect();
        out.insert(t["traceID"].as_str().expect("traceID").to_owned(), spans);
    }
    out
}

fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Asks Jaeger everything the UI asks, with `reads` being tracedb's own
/// answer for the traces (a node, or the tier).
async fn check_jaeger(jaeger: &Jaeger, reads: &Server, t0: u64) {
    let want = [SPLIT, HOME, BATCH];
    let mut holds = std::collections::BTreeMap::new();
    for t in want {
        holds.insert(trace_hex(t), held(reads, t).await);
    }
    assert_eq!(holds[&trace_hex(SPLIT)].len(), 3, "the split trace, whole");
    let only = |ids: &[u128]| -> std::collections::BTreeMap<String, BTreeSet<(String, String)>> {
        ids.iter()
            .map(|t| (trace_hex(*t), holds[&trace_hex(*t)].clone()))
            .collect()
    };

    // Services and operations, both APIs.
    let both: BTreeSet<String> = ["backend", "frontend"].map(String::from).into();
    assert_eq!(strings(&jaeger.get("/api/v3/services")["services"]), both);
    assert_eq!(strings(&jaeger.get("/api/services")["data"]), both);
    let ops: BTreeSet<(String, String)> = jaeger.get("/api/v3/operations?service=backend")
        ["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .map(|o| {
            (
                o["name"].as_str().expect("name").to_owned(),
                o["spanKind"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [("charge", "server"), ("db query", "client")]
            .map(|(n, k)| (n.to_owned(), k.to_owned()))
            .into()
    );
    let server_ops =
        &jaeger.get("/api/v3/operations?service=backend&span_kind=server")["operations"];
    assert_eq!(
        server_ops.as_array().expect("operations").len(),
        1,
        "{server_ops}"
    );
    assert_eq!(
        strings(&jaeger.get("/api/services/backend/operations")["data"]),
        ["charge", "db query"].map(String::from).into()
    );

    // One trace by ID, both APIs: every span tracedb holds.
    for t in want {
        let got = v3_traces(&jaeger.get(&format!("/api/v3/traces/{}", trace_hex(t))));
        assert_eq!(got, only(&[t]), "/api/v3/traces/{{id}}");
        let got = v1_traces(&jaeger.get(&format!("/api/traces/{}", trace_hex(t))));
        assert_eq!(got, only(&[t]), "/api/traces/{{id}}");
    }

    // Search, v3: by service, by operation, by duration.
    let window = format!(
        "query.start_time_min={}&query.start_time_max={}&query.num_traces=20",
        rfc3339(t0 - 60_000 * MS),
        rfc3339(t0 + 60_000 * MS)
    );
    let find = |extra: &str| v3_traces(&jaeger.get(&format!("/api/v3/traces?{window}&{extra}")));
    assert_eq!(find("query.service_name=backend"), only(&[SPLIT, BATCH]));
    assert_eq!(find("query.service_name=frontend"), only(&[SPLIT, HOME]));
    assert_eq!(
        find(&format!(
            "query.service_name=frontend&query.operation_name={}",
            query_escape("GET /checkout")
        )),
        only(&[SPLIT])
    );
    assert_eq!(
        find("query.service_name=backend&query.duration_min=25ms"),
        only(&[SPLIT])
    );
    // Jaeger answers an empty search with 404 "No traces found".
    let none = http_request(
        jaeger.http,
        "GET",
        &format!("/api/v3/traces?{window}&query.service_name=nobody"),
        &[],
        b"",
    )
    .expect("GET from jaeger");
    assert_eq!(none.status, 404, "{}", String::from_utf8_lossy(&none.body));

    // Search, the older API the UI's search page still calls.
    let (start_us, end_us) = ((t0 - 60_000 * MS) / 1_000, (t0 + 60_000 * MS) / 1_000);
    let v1 = |extra: &str| {
        v1_traces(&jaeger.get(&format!(
            "/api/traces?start={start_us}&end={end_us}&limit=20&{extra}"
        )))
    };
    assert_eq!(v1("service=frontend"), only(&[SPLIT, HOME]));
    assert_eq!(
        v1(&format!(
            "service=backend&operation={}",
            query_escape("db query")
        )),
        only(&[SPLIT])
    );
}

/// One node holding everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jaeger_ui_api_through_the_jaeger_binary_on_one_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Server::start(dir.path());
    let t0 = now() - 120_000 * MS;
    export_fixture(&[&node], t0).await;
    let jaeger = Jaeger::start(node.addr, node.addr);
    check_jaeger(&jaeger, &node, t0).await;
}

/// `tracedb query` over two nodes, the split trace's backend spans on the
/// second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jaeger_ui_api_through_the_jaeger_binary_and_the_tier() {
    let dirs: Vec<_> = (0..2)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let n1 = Server::start(dirs[0].path());
    let n2 = Server::start(dirs[1].path());
    let t0 = now() - 120_000 * MS;
    export_fixture(&[&n1, &n2], t0).await;
    // Each node holds a part of the split trace only.
    assert_eq!(held(&n1, SPLIT).await.len(), 1);
    assert_eq!(held(&n2, SPLIT).await.len(), 2);
    let tier = Server::start_tier(&[&[&n1, &n2]], &[]);
    let jaeger = Jaeger::start(tier.addr, n1.addr);
    check_jaeger(&jaeger, &tier, t0).await;
}
