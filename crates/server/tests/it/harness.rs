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
use tracedb_server::{cli::ClientTls, tls::ALPN_HTTP1};

/// The release (or debug) binary cargo built for these tests.
pub const TRACEDB: &str = env!("CARGO_BIN_EXE_tracedb");

/// Ends a test that has nothing to check on this machine, saying why in a
/// `skipped:` line on stderr, written there itself: the test harness swallows
/// `eprintln!` of a passing test. The caller returns at once.
pub fn skipped(why: &str) {
    use std::io::Write as _;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let line = format!("skipped: {test}: {why}\n");
    // One write, so the line is not cut by the harness's own output; nothing
    // to do if stderr is gone.
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// A running `tracedb serve`.
pub struct Server {
    child: Child,
    /// The gRPC address.
    pub addr: SocketAddr,
    /// The HTTP address (OTLP/HTTP, /metrics, /ready).
    pub http: SocketAddr,
    /// Everything the server logged so far.
    pub log: Arc<Mutex<Vec<String>>>,
    /// Set for a server started with TLS: how this process's clients talk to it.
    pub tls: Option<ClientTls>,
}

impl Server {
    /// Starts a server on `data_dir` with a free port and waits until it listens.
    pub fn start(data_dir: &Path) -> Server {
        Self::start_with(data_dir, &[])
    }

    pub fn start_with(data_dir: &Path, extra: &[&str]) -> Server {
        Self::start_until(data_dir, extra, "tracedb listening")
    }

    /// Starts the server and returns once it logs `marker` with its addresses:
    /// "tracedb listening" once it serves, "tracedb starting" as soon as its
    /// ports are bound (storage may still be opening).
    pub fn start_until(data_dir: &Path, extra: &[&str], marker: &'static str) -> Server {
        Self::serve(data_dir, extra, &[], marker)
    }

    /// [`Server::start_with`], with `env` in the server's environment.
    pub fn start_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::serve(data_dir, extra, env, "tracedb listening")
    }

    /// `tracedb serve` on `data_dir` and free ports, with `extra` options
    /// and `env`; returns once it logs `marker`.
    fn serve(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        marker: &'static str,
    ) -> Server {
        let data_dir = data_dir.to_str().expect("UTF-8 temporary path");
        let mut args = vec![
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
        ];
        args.extend_from_slice(extra);
        Self::spawn(&args, env, marker)
    }

    /// Starts a server whose gRPC address is `grpc` (HTTP on a free port).
    pub fn start_at(data_dir: &Path, grpc: SocketAddr) -> Server {
        let grpc = grpc.to_string();
        let data_dir = data_dir.to_str().expect("UTF-8 temporary path");
        let args = [
            "serve",
            "--grpc-addr",
            &grpc,
            "--http-addr",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
        ];
        Self::spawn(&args, &[], "tracedb listening")
    }

    /// `tracedb query` over `groups` of running nodes (one `--nodes` per
    /// group), on free ports; returns once it listens.
    pub fn start_tier(groups: &[&[&Server]], extra: &[&str]) -> Server {
        let groups: Vec<String> = groups
            .iter()
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|n| n.addr.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        Self::start_query(&groups, extra, &[])
    }

    /// `tracedb query` with one `--nodes` per entry of `groups`, `extra`
    /// options and `env` in its environment, on free ports.
    pub fn start_query(groups: &[String], extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec![
            "query",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ];
        for group in groups {
            args.extend(["--nodes", group.as_str()]);
        }
        args.extend_from_slice(extra);
        Self::spawn(&args, env, "tracedb query listening")
    }

    /// Runs `tracedb ARGS` with `env` and returns once it logs `marker`
    /// with its addresses.
    fn spawn(args: &[&str], env: &[(&str, &str)], marker: &'static str) -> Server {
        let mut child = Command::new(TRACEDB)
            .args(args)
            .envs(env.iter().copied())
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
                if let Some(addr) = listening_addr(&line, marker) {
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
            tls: None,
        }
    }

    /// Starts a server with `extra` options that turn TLS on; `tls` is how
    /// the tests' clients will connect to it.
    pub fn start_tls(data_dir: &Path, extra: &[&str], tls: ClientTls) -> Server {
        let mut server = Self::start_with(data_dir, extra);
        server.tls = Some(tls);
        server
    }

    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn endpoint(&self) -> String {
        match self.tls {
            None => format!("http://{}", self.addr),
            Some(_) => format!("https://{}", self.addr),
        }
    }

    pub async fn channel(&self) -> Channel {
        match &self.tls {
            None => Channel::from_shared(self.endpoint())
                .expect("uri")
                .connect()
                .await
                .expect("connect"),
            Some(tls) => tls.channel(&self.endpoint()).await.expect("connect"),
        }
    }

    /// One request to the HTTP port, over TLS if the server serves it.
    pub fn http_call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<HttpResponse> {
        match &self.tls {
            None => http_request(self.http, method, path, headers, body),
            Some(tls) => https_request(self.http, tls, method, path, headers, body),
        }
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

    /// [`Server::kill9`], then its gRPC port held, so that a read sent there
    /// is refused, as by a dead node, for as long as the [`DeadPort`] lives.
    pub fn kill9_keeping_port(self) -> DeadPort {
        let addr = self.addr;
        self.kill9();
        DeadPort::bind(addr)
    }

    /// SIGSTOP: the process keeps its sockets and never answers. Returns once
    /// every thread of it is stopped: a signal stops each thread on its own
    /// time, and one still running could answer a request sent next.
    pub fn pause(&self) {
        signal(&self.child, "STOP");
        let tasks = format!("/proc/{}/task", self.child.id());
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stopped = std::fs::read_dir(&tasks)
                .expect("the server's threads")
                .filter_map(Result::ok)
                .all(|task| {
                    let stat =
                        std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                    // The state follows the command name, which is in parentheses.
                    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
                    matches!(state, Some(Some('T' | 't')) | None)
                });
            if stopped {
                return;
            }
            assert!(
                std::time::Instant::now() < until,
                "the server never stopped"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGCONT after [`Server::pause`].
    pub fn resume(&self) {
        signal(&self.child, "CONT");
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

/// A port bound but not listening: a connection to it is refused, and no
/// other server can take it. Once a killed node's port was free, a server
/// started by a test running alongside took it, and a tier read that
/// server's trace of the same ID as the dead node's part.
pub struct DeadPort {
    _fd: std::os::fd::OwnedFd,
}

impl DeadPort {
    #[allow(unsafe_code)]
    fn bind(addr: SocketAddr) -> DeadPort {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let SocketAddr::V4(v4) = addr else {
            panic!("{addr}: the tests' servers listen on IPv4")
        };
        let int = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let sockaddr_len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let sockaddr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(v4.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: a new descriptor, owned at once; setsockopt and bind read
        // values that live across the calls, with their sizes.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let fd = OwnedFd::from_raw_fd(fd);
            // The dead server's connections may linger in TIME_WAIT.
            let one: libc::c_int = 1;
            let rc = libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                (&one as *const libc::c_int).cast(),
                int,
            );
            assert_eq!(rc, 0, "SO_REUSEADDR: {}", std::io::Error::last_os_error());
            let rc = libc::bind(
                fd.as_raw_fd(),
                (&sockaddr as *const libc::sockaddr_in).cast(),
                sockaddr_len,
            );
            assert_eq!(rc, 0, "bind {addr}: {}", std::io::Error::last_os_error());
            DeadPort { _fd: fd }
        }
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
fn listening_addr(line: &str, marker: &str) -> Option<(SocketAddr, SocketAddr)> {
    if !line.contains(marker) {
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

/// A port on 127.0.0.1 that was free a moment ago, for a peer process the
/// test configures (the port is released before the peer binds it).
pub fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// The start time of every test span: this process's start, so spans are well
/// inside the server's retention period and the same on every call.
pub fn base_time() -> u64 {
    static BASE: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970");
        now.as_secs() * 1_000_000_000
    });
    *BASE
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
        start_time_unix_nano: base_time() + span_no * 1_000,
        end_time_unix_nano: base_time() + span_no * 1_000 + 500,
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
            time_unix_nano: base_time() + 100,
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
            ..Default::default()
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

/// An HTTP response as read off the socket.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to
/// the end. Small on purpose: the tests need exact control of every header.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    let stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    exchange(stream, addr, method, path, headers, body)
}

/// [`http_request`] over TLS, trusting what `tls` trusts.
pub fn https_request(
    addr: SocketAddr,
    tls: &ClientTls,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    let tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let connection = rustls::ClientConnection::new(tls.config(ALPN_HTTP1), name)
        .map_err(std::io::Error::other)?;
    exchange(
        rustls::StreamOwned::new(connection, tcp),
        addr,
        method,
        path,
        headers,
        body,
    )
}

fn exchange(
    mut stream: impl std::io::Read + std::io::Write,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
    out
}

/// `POST /v1/traces`.
pub fn post_traces(server: &Server, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    server
        .http_call("POST", "/v1/traces", headers, body)
        .expect("POST /v1/traces")
}

/// The value of one sample of `/metrics`, e.g.
/// `tracedb_spans_accepted_total{protocol="grpc"}`.
pub fn metric(server: &Server, sample: &str) -> f64 {
    let response = server
        .http_call("GET", "/metrics", &[], b"")
        .expect("GET /metrics");
    assert_eq!(response.status, 200);
    let text = String::from_utf8(response.body).expect("utf-8 metrics");
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {sample} in /metrics:\n{text}"))
        .parse()
        .expect("a number")
}

/// `grpc.health.v1.Health/Check` for the whole server.
pub async fn health(server: &Server) -> i32 {
    let mut client = tonic_health::pb::health_client::HealthClient::new(server.channel().await);
    client
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status
}
