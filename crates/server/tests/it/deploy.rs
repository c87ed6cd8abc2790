//! The deployment files, checked as far as a machine without a cluster or
//! a registry can (issue 46):
//! - the Helm chart (`deploy/helm/tracedb`), by `deploy/helm/check`: `helm
//!   lint` and `helm template` for the defaults and each values file of
//!   `ci/`, every manifest through kubernetes-validate --strict, the
//!   Collector's configuration through the real Collector's `validate`, and
//!   each tracedb container's settings through `tracedb serve|query
//!   --check-config`;
//! - the image: built from local parts by `deploy/image/build` (the
//!   Dockerfile's runtime stage FROM scratch), run with a volume under a real
//!   container engine, spans exported and read back, stopped with SIGTERM
//!   (which flushes), started again on the same volume and read again.

use std::{
    path::PathBuf,
    process::{Command, Output},
    time::{Duration, Instant},
};

use crate::harness::TRACEDB;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tool(var: &str, what: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: {what} (scripts/test installs it and sets {var})")
    })
}

fn ok(output: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed with {}:\n{out}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

#[test]
fn the_chart_renders_validates_and_configures_for_every_values_file() {
    let output = Command::new(repo().join("deploy/helm/check"))
        .env("HELM", tool("TRACEDB_TEST_HELM", "Helm"))
        .env(
            "OTELCOL",
            tool("TRACEDB_TEST_OTELCOL", "the OpenTelemetry Collector"),
        )
        .env(
            "PYTHON",
            tool("TRACEDB_TEST_PYTHON", "Python with kubernetes-validate"),
        )
        .env("TRACEDB", TRACEDB)
        .output()
        .expect("run deploy/helm/check");
    let out = ok(&output, "deploy/helm/check");
    for values in ["default", "groups", "object-store", "tenancy", "tls"] {
        assert!(
            out.contains(&format!(
                "{values}: the Collector and every tracedb container accept"
            )),
            "{out}"
        );
    }
    // Three groups of four: three StatefulSets and their headless Services.
    assert!(
        out.contains("groups: ") && out.contains("3 StatefulSet"),
        "{out}"
    );
}

/// The container engine: podman (with runc, which runs where crun meets
/// cgroups it does not take), as scripts/test installs it.
fn engine() -> Command {
    let podman = std::env::var("TRACEDB_TEST_PODMAN").unwrap_or_else(|_| "podman".into());
    let mut cmd = Command::new(podman);
    cmd.args(["--runtime", "runc"]);
    cmd
}

fn engine_ok(args: &[&str]) -> String {
    ok(
        &engine().args(args).output().expect("run podman"),
        &format!("podman {args:?}"),
    )
}

/// Removes the test's container, volume and image however it ends.
struct Cleanup {
    names: Vec<String>,
    volume: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = engine().args(["rm", "-f", name]).output();
        }
        let _ = engine().args(["volume", "rm", "-f", &self.volume]).output();
        let _ = engine().args(["rmi", "-f", &self.image]).output();
    }
}

fn free_port() -> u16 {
    crate::harness::free_port().port()
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn wait_ready(http: u16) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let ready =
            crate::harness::http_request(([127, 0, 0, 1], http).into(), "GET", "/ready", &[], b"")
                .is_ok_and(|r| r.status == 200);
        if ready {
            return;
        }
        assert!(Instant::now() < until, "the container never got ready");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn read_back(grpc: u16) -> String {
    let out = Command::new(TRACEDB)
        .args(["get", TRACE, "--addr", &format!("127.0.0.1:{grpc}")])
        .output()
        .expect("tracedb get");
    ok(&out, "tracedb get from the container")
}

#[test]
fn the_image_runs_with_a_volume_stops_on_sigterm_and_keeps_its_spans() {
    let id = std::process::id();
    let tag = format!("localhost/tracedb:test-{id}");
    let (first, second) = (
        format!("tracedb-test-{id}-a"),
        format!("tracedb-test-{id}-b"),
    );
    let volume = format!("tracedb-test-{id}");
    let _cleanup = Cleanup {
        names: vec![first.clone(), second.clone()],
        volume: volume.clone(),
        image: tag.clone(),
    };
    let built = Command::new(repo().join("deploy/image/build"))
        .arg(&tag)
        .env(
            "ENGINE",
            std::env::var("TRACEDB_TEST_PODMAN").unwrap_or_else(|_| "podman".into()),
        )
        .output()
        .expect("deploy/image/build");
    ok(&built, "deploy/image/build");
    engine_ok(&["volume", "create", &volume]);
    let run = |name: &str, grpc: u16, http: u16| {
        engine_ok(&[
            "run",
            "-d",
            "--name",
            name,
            // This machine's sandbox lets no process raise its limits.
            "--ulimit",
            "nofile=8192:8192",
            "--ulimit",
            "nproc=1000:1000",
            "-v",
            &format!("{volume}:/var/lib/tracedb"),
            "-p",
            &format!("127.0.0.1:{grpc}:4317"),
            "-p",
            &format!("127.0.0.1:{http}:4318"),
            &tag,
            "--max-memory",
            "512MiB",
        ]);
        wait_ready(http);
    };

    // The image's own settings: a non-root user, the volume, both ports.
    let inspect = engine_ok(&["image", "inspect", "--format",
        "{{.Config.User}} {{.Config.Volumes}} {{.Config.ExposedPorts}} {{.Config.StopSignal}} {{.Config.Entrypoint}}", &tag]);
    for want in [
        "10001:10001",
        "/var/lib/tracedb",
        "4317/tcp",
        "4318/tcp",
        "SIGTERM",
        "/usr/local/bin/tracedb serve",
    ] {
        assert!(inspect.contains(want), "image lacks {want}: {inspect}");
    }

    let (grpc, http) = (free_port(), free_port());
    run(&first, grpc, http);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let body = format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"shop"}}}}]}},"scopeSpans":[{{"spans":[{{"traceId":"{TRACE}","spanId":"00f067aa0ba902b7","name":"GET /basket","kind":2,"startTimeUnixNano":"{}","endTimeUnixNano":"{}"}}]}}]}}]}}"#,
        now - 50_000_000,
        now
    );
    let posted = crate::harness::http_request(
        ([127, 0, 0, 1], http).into(),
        "POST",
        "/v1/traces",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .expect("export to the container");
    assert_eq!(posted.status, 200);
    assert!(read_back(grpc).contains("shop: GET /basket"));

    // SIGTERM (the image's stop signal): the buffers are flushed to files.
    engine_ok(&["stop", "-t", "60", &first]);
    let state = engine_ok(&["inspect", "--format", "{{.State.ExitCode}}", &first]);
    assert_eq!(state.trim(), "0", "the server's exit status after SIGTERM");
    let logs = String::from_utf8_lossy(
        &engine()
            .args(["logs", &first])
            .output()
            .expect("logs")
            .stderr,
    )
    .into_owned();
    assert!(logs.contains("shut down cleanly"), "{logs}");

    // A new container on the same volume: nothing to replay, all there.
    let (grpc, http) = (free_port(), free_port());
    run(&second, grpc, http);
    assert!(read_back(grpc).contains("shop: GET /basket"));
    let logs = String::from_utf8_lossy(
        &engine()
            .args(["logs", &second])
            .output()
            .expect("logs")
            .stderr,
    )
    .into_owned();
    assert!(
        logs.contains("wal_records=0"),
        "the first stop flushed everything: {logs}"
    );
}
