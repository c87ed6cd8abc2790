//! The README is a contract: every ```` ```sh ```` block in it is run here as a
//! reader would paste it, against a server started the way the README says
//! (`tracedb serve` with its defaults, in a fresh directory), and what each
//! block prints is checked. Blocks marked ```` ```sh template ```` stand for a
//! reader's own hosts and files (TLS) and are not run; each must name one of
//! those placeholders, so a runnable example cannot hide among them.
//!
//! `scripts/cluster` starts a cluster that the README's next blocks use; the
//! single server is stopped first (the cluster's Collector takes its ports)
//! and the cluster is stopped with SIGTERM at the end.
//!
//! A block that runs past [`BLOCK_DEADLINE`] (a loop waiting on a node that
//! died at start) is killed with what it started, and the test fails with
//! what it printed.
//!
//! Two commands of the set-up block are not run as written: `cargo run
//! --release --bin tracedb -- serve` is the binary cargo built for this test,
//! started directly, and `scripts/test` is what runs this test. `grpcurl`
//! blocks need `TRACEDB_TEST_GRPCURL` (`scripts/test` installs grpcurl) and
//! are skipped, loudly, without it.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use crate::harness::TRACEDB;

const README: &str = include_str!("../../../../README.md");

/// What a block must print, found by a piece of its text: pieces of its
/// output, with a leading `Nx ` (N one digit) a piece found at least N times, or with a
/// leading `=`, the whole of it (trimmed).
const EXPECTED: &[(&str, &[&str])] = &[
    // Through the cluster: the Collector, then tracedb query.
    (
        "tracedb get 6c9f0a0a42e5c1d1a2b3c4d5e6f70819 --addr 127.0.0.1:4417",
        &[
            "trace 6c9f0a0a42e5c1d1a2b3c4d5e6f70819: 1 span, 1 service, 100.00ms",
            "\"traceID\":\"6c9f0a0a42e5c1d1a2b3c4d5e6f70819\"",
            "\"rootServiceName\":\"cart\"",
        ],
    ),
    // Every span stored: no partial success.
    ("http://127.0.0.1:4318/v1/traces", &["={}"]),
    // TraceQL metrics: the span's rate by name and by route, its duration's quantiles
    // (250 ms lies in the 2^28 ns bucket: 0.268435456 s at both).
    (
        "/api/metrics/query_range",
        &[
            "{\"key\":\"name\",\"value\":{\"stringValue\":\"GET /cart\"}}",
            "{\"key\":\"span.http.route\",\"value\":{\"stringValue\":\"/cart\"}}",
            "\"timestampMs\":",
            "{\"key\":\"p\",\"value\":{\"doubleValue\":0.99}}",
            "2x \"value\":0.268435456",
        ],
    ),
    (
        "tracedb metrics --query",
        &["SERIES", "{name=GET /cart}", "\"p\":0.99", "0.268435456"],
    ),
    (
        "tracedb get 5b8efff798038103d269b633813fc60c",
        &[
            "trace 5b8efff798038103d269b633813fc60c: 1 span, 1 service, 250.00ms",
            "checkout: GET /cart server",
            "\"traceId\":\"5b8efff798038103d269b633813fc60c\"",
            // `search` lists the trace, its span count and root.
            "\n5b8efff798038103d269b633813fc60c  ",
            "1       0  checkout: GET /cart",
        ],
    ),
    (
        "jaeger.storage.v2.TraceReader/GetServices",
        &[
            "\"checkout\"",
            "\"name\": \"GET /cart\"",
            // FindTraceSummaries and GetCapabilities.
            "\"rootServiceName\": \"checkout\"",
            "\"rootOperationName\": \"GET /cart\"",
            "\"spanCount\": 1",
            "\"withoutServiceName\": true",
        ],
    ),
    (
        "/api/v2/traces/5b8efff798038103d269b633813fc60c",
        &[
            "\"traceId\":\"5b8efff798038103d269b633813fc60c\"",
            "\"traceID\":\"5b8efff798038103d269b633813fc60c\"",
            // The searches, by tag and by TraceQL, list it.
            "3x \"rootTraceName\":\"GET /cart\"",
            "\"spanSets\"",
            // An invalid query says where and why.
            "line 1, column 12",
            // The typed values of a tag.
            "{\"type\":\"string\",\"value\":\"checkout\"}",
        ],
    ),
    // Object storage: the second node, restored from the bucket, answers.
    (
        "--object-store s3://traces/node-a",
        &[
            "trace 0af7651916cd43dd8448eb211c80319c: 1 span, 1 service, 100.00ms",
            "billing: POST /invoice server",
        ],
    ),
    (
        "tracedb.query.v1.QueryService/GetTrace",
        &["\"name\": \"GET /cart\"", "\"status\": \"SERVING\""],
    ),
];

/// Blocks that only need to succeed (they set variables for the reader's shell).
const EXIT_ZERO: &[&str] = &["export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"];

/// What a template block must name: a reader's host or files.
const PLACEHOLDERS: &[&str] = &["tracedb.example", "/etc/", "registry.example"];

struct Block {
    line: usize,
    template: bool,
    text: String,
}

/// The `sh` blocks of a Markdown text, with the line each starts on.
fn sh_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in markdown.lines().enumerate() {
        match open.take() {
            Some(block) if line.trim_end() == "```" => blocks.push(block),
            Some(mut block) => {
                block.text.push_str(line);
                block.text.push('\n');
                open = Some(block);
            }
            None => {
                let info = line.strip_prefix("```").map(str::trim);
                if let Some(info @ ("sh" | "sh template")) = info {
                    open = Some(Block {
                        line: i + 1,
                        template: info == "sh template",
                        text: String::new(),
                    });
                }
            }
        }
    }
    assert!(open.is_none(), "README ends inside a code block");
    blocks
}

#[test]
fn every_readme_example_runs_as_written() {
    let blocks = sh_blocks(README);
    let work = tempfile::tempdir().expect("tempdir");
    // `target/release/tracedb`, as the README's commands spell it.
    let release = work.path().join("target/release");
    std::fs::create_dir_all(&release).expect("mkdir");
    std::os::unix::fs::symlink(TRACEDB, release.join("tracedb")).expect("symlink");

    let setup = blocks.first().expect("the set-up block");
    assert!(
        setup
            .text
            .contains("cargo run --release --bin tracedb -- serve")
            && setup.text.contains("scripts/test"),
        "README line {}: the first block starts the server and runs the tests:\n{}",
        setup.line,
        setup.text
    );
    let mut server = KillOnDrop(Some(start_as_documented(work.path())));
    // `scripts/cluster`, once its block is reached.
    let mut cluster = StopGroupOnDrop(None);

    let grpcurl = std::env::var_os("TRACEDB_TEST_GRPCURL");
    let mut ran = 0;
    for block in &blocks[1..] {
        if block.text.contains("scripts/cluster") {
            // It takes the OTLP ports the single server holds.
            stop_as_documented(&mut server, work.path());
            cluster.0 = Some(start_cluster(work.path()));
            ran += 1;
            continue;
        }
        if block.template {
            assert!(
                PLACEHOLDERS.iter().any(|p| block.text.contains(p)),
                "README line {}: a template block names none of {PLACEHOLDERS:?}; run it instead:\n{}",
                block.line,
                block.text
            );
            continue;
        }
        let expected = EXPECTED
            .iter()
            .find(|(key, _)| block.text.contains(key))
            .map(|(_, wanted)| *wanted);
        assert!(
            expected.is_some() || EXIT_ZERO.iter().any(|key| block.text.contains(key)),
            "README line {}: readme.rs has no expectation for this block:\n{}",
            block.line,
            block.text
        );
        let mut path = std::env::var_os("PATH").unwrap_or_default();
        if block.text.contains("grpcurl") {
            let Some(grpcurl) = &grpcurl else {
                eprintln!(
                    "README line {}: SKIPPED (grpcurl not installed; scripts/test installs it)",
                    block.line
                );
                continue;
            };
            let dir = Path::new(grpcurl).parent().expect("grpcurl's directory");
            path = std::env::join_paths(
                std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&path)),
            )
            .expect("PATH");
        }
        let (status, stdout, stderr) = run_block(&block.text, work.path(), &path);
        let Some(status) = status else {
            panic!(
                "README line {}: still running after {} s, stopped:\n{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                block.line,
                BLOCK_DEADLINE.as_secs(),
                block.text
            )
        };
        assert!(
            status.success(),
            "README line {}: failed with {status}:\n{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            block.line,
            block.text
        );
        for wanted in expected.unwrap_or_default() {
            // `Nx piece`: the piece at least N times (one digit).
            let times = wanted
                .split_once("x ")
                .and_then(|(n, piece)| Some((n.parse::<usize>().ok()?, piece)));
            let found = match (wanted.strip_prefix('='), times) {
                (Some(whole), _) => stdout.trim() == whole,
                (None, Some((n, piece))) => stdout.matches(piece).count() >= n,
                (None, None) => stdout.contains(wanted),
            };
            assert!(
                found,
                "README line {}: output lacks {wanted:?}:\n{}\nstdout:\n{stdout}",
                block.line, block.text
            );
        }
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} README blocks ran");

    stop_as_documented(&mut server, work.path());
    if let Some(mut cluster) = cluster.0.take() {
        terminate(&cluster);
        let status = cluster.wait().expect("wait");
        assert!(status.success(), "scripts/cluster exited with {status}");
    }
}

/// Longest one block may run (the S3 example installs SeaweedFS from PyPI
/// first): a block waiting on a process that died (`until curl ...`) would
/// otherwise hold the test until CI's own limit.
const BLOCK_DEADLINE: Duration = Duration::from_secs(600);

/// Runs a block with `bash -euo pipefail` in `dir`, in a process group of
/// its own; past [`BLOCK_DEADLINE`] the group (the block and what it
/// started) is killed and the status is `None`. Returns what it printed.
fn run_block(
    text: &str,
    dir: &Path,
    path: &std::ffi::OsStr,
) -> (Option<std::process::ExitStatus>, String, String) {
    // Files, not pipes: a process the block leaves behind cannot hold the
    // test waiting for the end of its output.
    let out = tempfile::tempfile().expect("stdout file");
    let err = tempfile::tempfile().expect("stderr file");
    let mut command = Command::new("bash");
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .args(["-euo", "pipefail", "-c", text])
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("stdout file"))
        .stderr(err.try_clone().expect("stderr file"))
        .spawn()
        .expect("run bash");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > BLOCK_DEADLINE {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |mut f: std::fs::File| {
        use std::io::{Read, Seek};
        let mut bytes = Vec::new();
        f.rewind().expect("rewind");
        f.read_to_end(&mut bytes).expect("read output");
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (status, read(out), read(err))
}

/// `scripts/cluster` and the processes it started (its process group),
/// stopped with SIGTERM if the test fails first.
struct StopGroupOnDrop(Option<std::process::Child>);

impl Drop for StopGroupOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
    }
}

fn terminate(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// "runs until ctrl-c or SIGTERM, when it flushes everything to disk and
/// exits 0"; nothing if it was stopped already.
fn stop_as_documented(server: &mut KillOnDrop, dir: &Path) {
    let Some(mut server) = server.0.take() else {
        return;
    };
    terminate(&server);
    let status = server.wait().expect("wait");
    assert!(status.success(), "tracedb serve exited with {status}");
    assert!(
        dir.join("tracedb-data/tables").is_dir(),
        "the default data directory ./tracedb-data"
    );
}

/// `scripts/cluster` as the README runs it, with this test's tracedb and
/// the Collector `scripts/test` built; returns once it says it is ready.
fn start_cluster(dir: &Path) -> std::process::Child {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let otelcol = std::env::var_os("TRACEDB_TEST_OTELCOL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo.join(".ci-cache/bin/otelcol-tracedb"));
    assert!(
        otelcol.exists(),
        "no OpenTelemetry Collector at {}: run scripts/test (it builds one) or set TRACEDB_TEST_OTELCOL",
        otelcol.display()
    );
    let mut child = Command::new(repo.join("scripts/cluster"));
    std::os::unix::process::CommandExt::process_group(&mut child, 0);
    let mut child = child
        .env("TRACEDB_BIN", TRACEDB)
        .env("OTELCOL", &otelcol)
        .env("TRACEDB_CLUSTER_DIR", dir.join("cluster"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/cluster");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("tracedb cluster ready") {
                let _ = tx.send(line);
            }
        }
    });
    let errors = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(line) => {
            assert!(line.contains("5 nodes in two replica groups"), "{line}");
            child
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "scripts/cluster did not say it was ready:\n{}",
                errors.join().unwrap_or_default()
            )
        }
    }
}

/// A server the test stops itself; killed if the test fails first (it holds
/// the documented ports).
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `tracedb serve` with no flags in `dir`, as the set-up block starts it;
/// returns once it logs that it listens on the documented addresses.
fn start_as_documented(dir: &Path) -> std::process::Child {
    let mut child = Command::new(dir.join("target/release/tracedb"))
        .arg("serve")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tracedb serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut log = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("tracedb listening") {
                let _ = tx.send(Ok(line.clone()));
            }
            log.push(line);
        }
        let _ = tx.send(Err(log.join("\n")));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(line)) => {
            assert!(
                line.contains("grpc=127.0.0.1:4317") && line.contains("http=127.0.0.1:4318"),
                "not on the documented addresses: {line}"
            );
            child
        }
        Ok(Err(log)) => panic!(
            "tracedb serve with the README's defaults did not start (is something else on 127.0.0.1:4317 or :4318?):\n{log}"
        ),
        Err(_) => {
            let _ = child.kill();
            panic!("tracedb serve did not log that it listens within 60 s")
        }
    }
}
