//! Configuration from the outside: a TOML file, environment variables, and
//! the errors a wrong setting gets.

use std::process::Command;

use crate::harness::{metric, skipped, Server, TRACEDB};

/// Runs `tracedb serve` with `args`, which must make it exit non-zero; its stderr.
pub fn serve_fails(args: &[&str], envs: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(TRACEDB);
    cmd.arg("serve")
        .args([
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run tracedb");
    assert!(!out.status.success(), "tracedb serve {args:?} started");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn config_file_with_an_unknown_key_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tracedb.toml");
    std::fs::write(&file, "max_memory = \"512MiB\"\nflush_secs = 10\n").expect("write");
    let err = serve_fails(&["--config", file.to_str().expect("utf-8 path")], &[]);
    assert!(err.contains("tracedb.toml"), "{err}");
    assert!(err.contains("unknown key `flush_secs`"), "{err}");
    assert!(
        err.contains("flush_age_secs"),
        "names the valid keys: {err}"
    );
}

#[test]
fn invalid_values_say_what_to_change() {
    let err = serve_fails(&["--max-memory", "1MiB"], &[("TRACEDB_SHARDS", "0")]);
    assert!(err.contains("shards is 0"), "{err}");
    assert!(err.contains("raise max_memory"), "{err}");
    let err = serve_fails(&["--max-memory", "lots"], &[]);
    assert!(err.contains("not a byte size"), "{err}");
}

#[tokio::test]
async fn config_file_and_environment_are_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tracedb.toml");
    std::fs::write(
        &file,
        "max_memory = \"512MiB\"\nmax_message_bytes = \"8MiB\"\nshutdown_timeout_secs = 5\n",
    )
    .expect("write");
    let server = Server::start_with(
        &dir.path().join("data"),
        &["--config", file.to_str().expect("utf-8 path")],
    );
    // Three quarters of max_memory admit requests and buffered spans.
    assert_eq!(
        metric(&server, "tracedb_memory_budget_bytes"),
        (384u64 << 20) as f64
    );
    drop(server);

    // An environment variable outranks the file.
    let mut child = Command::new(TRACEDB)
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data2"))
        .args(["--config", file.to_str().expect("utf-8 path")])
        .env("TRACEDB_MAX_MEMORY", "256MiB")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let line = std::io::BufRead::lines(std::io::BufReader::new(stderr))
        .map_while(Result::ok)
        .find(|l| l.contains("tracedb listening"))
        .expect("ready line");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains("max_memory=256MiB"),
        "env outranks the file: {line}"
    );
}

/// (thread name, scheduler slice) of every thread of process `pid`.
fn thread_slices(pid: u32) -> Vec<(String, Option<std::time::Duration>)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc") {
        let task = task.expect("task");
        let tid: u32 = task.file_name().to_string_lossy().parse().expect("tid");
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        out.push((comm.trim().to_string(), tracedb_sched::slice_of(tid)));
    }
    out
}

#[test]
fn request_threads_ask_for_the_configured_time_slice() {
    // A fresh thread has the kernel's default slice; kernels before custom
    // slices (Linux 6.12) report none, and there is nothing to check.
    let Some(default) = std::thread::spawn(tracedb_sched::current_slice)
        .join()
        .expect("thread")
    else {
        return skipped("this kernel reports no time slice (custom slices need Linux 6.12)");
    };
    let want = std::time::Duration::from_micros(300);
    assert_ne!(default, want, "pick a slice the kernel does not default to");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(&dir.path().join("data"), &["--request-slice-us", "300"]);
    let slices = thread_slices(server.pid());
    let named = |name: &str| -> Vec<Option<std::time::Duration>> {
        slices
            .iter()
            .filter(|(comm, _)| comm == name)
            .map(|(_, slice)| *slice)
            .collect()
    };
    for name in ["wal-sync", "tokio-rt-worker"] {
        let got = named(name);
        assert!(!got.is_empty(), "no {name} thread in {slices:?}");
        assert!(got.iter().all(|s| *s == Some(want)), "{name}: {got:?}");
    }
    // Flush and compaction keep the default, so the request threads preempt them.
    for name in ["tracedb-flush", "tracedb-compact"] {
        let got = named(name);
        assert!(!got.is_empty(), "no {name} thread in {slices:?}");
        assert!(got.iter().all(|s| *s == Some(default)), "{name}: {got:?}");
    }
}

/// `--check-config` checks the settings and exits: 0 and nothing made for
/// good ones (no data directory, no port bound), 1 and every problem for
/// bad ones, the object store's URL among them.
#[test]
fn check_config_checks_and_exits_without_starting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("never-made");
    let run = |args: &[&str]| {
        Command::new(TRACEDB)
            .args(["serve", "--check-config", "--data-dir"])
            .arg(&data)
            .args(["--grpc-addr", "127.0.0.1:1", "--http-addr", "127.0.0.1:2"])
            .args(args)
            .output()
            .expect("run tracedb")
    };
    let good = run(&[
        "--object-store",
        "s3://traces/node-a",
        "--s3-endpoint",
        "http://127.0.0.1:9",
    ]);
    let out = String::from_utf8_lossy(&good.stdout);
    assert!(
        good.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&good.stderr)
    );
    assert!(out.contains("the configuration is valid"), "{out}");
    assert!(!data.exists(), "a check made the data directory");
    let bad = run(&["--object-store", "gs://traces", "--cold-interval", "0s"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "a bad configuration passed");
    assert!(err.contains("object_store is \"gs://traces\""), "{err}");
    assert!(err.contains("cold_interval"), "{err}");
    let query = Command::new(TRACEDB)
        .args([
            "query",
            "--check-config",
            "--nodes",
            "dns:///tracedb-g0.traces.svc.cluster.local:4317",
        ])
        .output()
        .expect("run tracedb query");
    assert!(
        query.status.success(),
        "{}",
        String::from_utf8_lossy(&query.stderr)
    );
}
