//! Starting and stopping `tracedb serve` child processes, and building OTLP requests.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{mpsc, Arc, Mutex},
    time::Duration,
};

use tonic::transport::Channel;
use tracedb_proto::{
    collector::trace::v1::{trace_service_client::TraceServiceClient, ExportTraceServiceRequest},
    common::v1::{any_value::Value, AnyValue, InstrumentationScope, KeyValue},
    query::v1::{query_service_client::QueryServiceClient, GetTraceRequest},
    resource::v1::Resource,
    trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status, TracesData},
};

/// The release (or debug) binary cargo built for these tests.
pub const TRACEDB: &str = env!("CARGO_BIN_EXE_tracedb");

/// A running `tracedb serve`.
pub struct Server {
    child: Child,
    /// The gRPC address.
    pub addr: SocketAddr,
    /// The HTTP address (OTLP/HTTP, /metrics, /ready).
    pub http: SocketAddr,
    /// Everything the server logged so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts a server on `data_dir` with a free port and waits until it listens.
    pub fn start(data_dir: &Path) -> Server {
        Self::start_with(data_dir, &[])
    }

    pub fn start_with(data_dir: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(TRACEDB)
            .args([
                "serve",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tracedb");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        // Keep draining stderr for the server's whole life so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = listening_addr(&line) {
                    let _ = tx.send(addr);
                }
                sink.lock().expect("log lock").push(line);
            }
        });
        let (addr, http) = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addrs) => addrs,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "tracedb did not start; log:\n{}",
                    log.lock().expect("log lock").join("\n")
                );
            }
        };
        Server {
            child,
            addr,
            http,
            log,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.endpoint())
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    pub async fn ingest(&self) -> TraceServiceClient<Channel> {
        TraceServiceClient::new(self.channel().await)
    }

    pub async fn query(&self) -> QueryServiceClient<Channel> {
        QueryServiceClient::new(self.channel().await)
    }

    /// SIGTERM, then waits for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        signal(&self.child, "TERM");
        let status = wait_timeout(&mut self.child, Duration::from_secs(60));
        std::mem::forget(self);
        status
    }

    /// SIGKILL: the process dies wherever it is.
    pub fn kill9(mut self) {
        signal(&self.child, "KILL");
        let _ = self.child.wait();
        std::mem::forget(self);
    }

    pub fn log_text(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} failed");
}

fn wait_timeout(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tracedb did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Parses `grpc=ADDR` and `http=ADDR` out of the server's ready line.
fn listening_addr(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    if !line.contains("tracedb listening") {
        return None;
    }
    let field = |name: &str| -> Option<SocketAddr> {
        let rest = &line[line.find(name)? + name.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    Some((field(" grpc=")?, field(" http=")?))
}

pub fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
    }
}

/// A span with attributes, an event, a link, status, flags and trace state, so
/// round trips exercise every field.
pub fn rich_span(trace: u128, span_no: u64, parent: Option<u64>) -> Span {
    Span {
        trace_id: trace.to_be_bytes().to_vec().into(),
        span_id: (span_no + 1).to_be_bytes().to_vec().into(),
        trace_state: "vendor=1".into(),
        parent_span_id: parent
            .map(|p| (p + 1).to_be_bytes().to_vec())
            .unwrap_or_default()
            .into(),
        flags: 0x101,
        name: format!("op-{span_no}"),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: 1_700_000_000_000_000_000 + span_no * 1_000,
        end_time_unix_nano: 1_700_000_000_000_000_000 + span_no * 1_000 + 500,
        attributes: vec![
            string_kv("http.route", "/cart"),
            KeyValue {
                key: "n".into(),
                value: Some(AnyValue {
                    value: Some(Value::IntValue(span_no as i64)),
                }),
            },
        ],
        dropped_attributes_count: 1,
        events: vec![span::Event {
            time_unix_nano: 1_700_000_000_000_000_100,
            name: "retry".into(),
            attributes: vec![string_kv("why", "timeout")],
            dropped_attributes_count: 0,
        }],
        dropped_events_count: 2,
        links: vec![span::Link {
            trace_id: vec![9; 16].into(),
            span_id: vec![8; 8].into(),
            trace_state: String::new(),
            attributes: vec![string_kv("kind", "follows")],
            dropped_attributes_count: 0,
            flags: 1,
        }],
        dropped_links_count: 3,
        status: Some(Status {
            message: "boom".into(),
            code: 2,
        }),
    }
}

pub fn resource(service: &str) -> Resource {
    Resource {
        attributes: vec![string_kv("service.name", service)],
        ..Default::default()
    }
}

/// One request: `spans_per_trace` spans for each of `traces`, under one resource and scope.
pub fn request(service: &str, traces: &[u128], spans_per_trace: u64) -> ExportTraceServiceRequest {
    let spans = traces
        .iter()
        .flat_map(|&t| (0..spans_per_trace).map(move |i| rich_span(t, i, i.checked_sub(1))))
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource(service)),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "lib".into(),
                    version: "1.0".into(),
                    ..Default::default()
                }),
                spans,
                schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// All messages of GetTrace, or the status it failed with.
pub async fn get_trace(
    client: &mut QueryServiceClient<Channel>,
    trace: u128,
) -> Result<Vec<TracesData>, tonic::Status> {
    let mut stream = client
        .get_trace(GetTraceRequest {
            trace_id: trace.to_be_bytes().to_vec().into(),
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = stream.message().await? {
        out.push(m);
    }
    Ok(out)
}

/// Every span of the messages with its service name, sorted by span ID.
pub fn spans_of(messages: &[TracesData]) -> Vec<(String, Span)> {
    let mut out = Vec::new();
    for m in messages {
        for rs in &m.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(Value::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                out.extend(ss.spans.iter().map(|s| (service.clone(), s.clone())));
            }
        }
    }
    out.sort_by(|a, b| a.1.span_id.cmp(&b.1.span_id));
    out
}
