//! TLS on both listeners (`--tls-cert`, `--tls-key`, `--tls-client-ca`): real
//! OpenTelemetry clients over TLS and mutual TLS, the `tracedb get`/`search`
//! client options, plaintext and stalled clients at a TLS port, and the
//! start-up errors of broken TLS files.
//!
//! Certificates are made at test time with the `openssl` command (`.ci/run`
//! installs it): a CA, and certificates it signs for 127.0.0.1 and localhost.

use std::{
    cell::Cell,
    io::Read,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use tracedb_server::{cli::ClientTls, tls::HANDSHAKE_TIMEOUT};

use crate::{
    config::serve_fails,
    harness::{get_trace, health, http_request, metric, request, spans_of, Server, TRACEDB},
    python_sdk::python_sdk_round_trip,
};

/// The private key encodings `--tls-key` takes.
#[derive(Clone, Copy)]
enum KeyKind {
    /// `-----BEGIN EC PRIVATE KEY-----`
    Sec1,
    /// `-----BEGIN PRIVATE KEY-----`
    Pkcs8,
    /// `-----BEGIN RSA PRIVATE KEY-----`
    RsaPkcs1,
}

/// Throwaway certificates in a directory, made with the openssl command.
struct Pki {
    dir: PathBuf,
    serial: Cell<u32>,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let dir = dir.join("pki");
        std::fs::create_dir_all(&dir).expect("pki dir");
        Pki {
            dir,
            serial: Cell::new(1),
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("run openssl: the TLS tests need it (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A self-signed CA: `NAME.pem`, `NAME.key`.
    fn ca(&self, name: &str) -> PathBuf {
        let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &format!("/CN=tracedb test {name}"),
        ]);
        self.path(&pem)
    }

    /// A certificate signed by the CA `ca`: a server certificate for
    /// 127.0.0.1 and localhost, or a client certificate. Returns the
    /// certificate and key files.
    fn leaf(&self, name: &str, ca: &str, kind: KeyKind, server: bool) -> (PathBuf, PathBuf) {
        let extensions = if server {
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        } else {
            "extendedKeyUsage=clientAuth\n"
        };
        self.leaf_with(name, ca, kind, extensions)
    }

    /// A certificate with the given X.509 v3 `extensions` lines.
    fn leaf_with(
        &self,
        name: &str,
        ca: &str,
        kind: KeyKind,
        extensions: &str,
    ) -> (PathBuf, PathBuf) {
        let (key, csr, ext, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}.pem"),
        );
        let marker = match kind {
            KeyKind::Sec1 => {
                self.openssl(&[
                    "ecparam",
                    "-name",
                    "prime256v1",
                    "-genkey",
                    "-noout",
                    "-out",
                    &key,
                ]);
                "-----BEGIN EC PRIVATE KEY-----"
            }
            KeyKind::Pkcs8 => {
                self.openssl(&[
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-out",
                    &key,
                ]);
                "-----BEGIN PRIVATE KEY-----"
            }
            KeyKind::RsaPkcs1 => {
                self.openssl(&["genrsa", "-traditional", "-out", &key, "2048"]);
                "-----BEGIN RSA PRIVATE KEY-----"
            }
        };
        let text = std::fs::read_to_string(self.path(&key)).expect("key file");
        assert!(
            text.starts_with(marker),
            "openssl wrote another key encoding:\n{text}"
        );
        self.openssl(&[
            "req",
            "-new",
            "-key",
            &key,
            "-subj",
            &format!("/CN={name}"),
            "-out",
            &csr,
        ]);
        std::fs::write(
            self.path(&ext),
            format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n{extensions}"),
        )
        .expect("extensions file");
        let serial = self.serial.get();
        self.serial.set(serial + 1);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-set_serial",
            &serial.to_string(),
            "-days",
            "2",
            "-out",
            &pem,
            "-extfile",
            &ext,
        ]);
        (self.path(&pem), self.path(&key))
    }
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Runs the tracedb command; its exit success, stdout and stderr.
fn tracedb(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(TRACEDB)
        .args(args)
        .output()
        .expect("run tracedb");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
async fn python_sdk_exports_over_tls_and_tracedb_get_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let ca = pki.ca("ca");
    let (cert, key) = pki.leaf("server", "ca", KeyKind::Sec1, true);
    let client = ClientTls::load(&ca, None).expect("client TLS");
    let server = Server::start_tls(
        &dir.path().join("data"),
        &["--tls-cert", s(&cert), "--tls-key", s(&key)],
        client,
    );
    assert!(
        server.log_text().contains("tls=on"),
        "{}",
        server.log_text()
    );

    // The SDK trusts the CA through the standard variable, on both protocols.
    let env = [("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.as_path())];
    let mut traces = python_sdk_round_trip(&server, "grpc", &env, dir.path()).await;
    traces.extend(python_sdk_round_trip(&server, "http", &env, dir.path()).await);
    assert_eq!(traces.len(), 10);

    let addr = server.addr.to_string();
    let (ok, out, err) = tracedb(&[
        "get",
        &format!("{:032x}", traces[0]),
        "--addr",
        &addr,
        "--tls-ca",
        s(&ca),
    ]);
    assert!(ok, "tracedb get --tls-ca failed: {err}");
    for name in ["GET /cart/", "SELECT cart", "decode row"] {
        assert!(out.contains(name), "no {name:?} in:\n{out}");
    }
    let (ok, out, err) = tracedb(&[
        "search",
        "--service",
        "checkout",
        "--addr",
        &format!("https://{addr}"),
        "--tls-ca",
        s(&ca),
    ]);
    assert!(ok, "tracedb search --tls-ca failed: {err}");
    for trace in &traces {
        assert!(
            out.contains(&format!("{trace:032x}")),
            "trace {trace:032x} not listed:\n{out}"
        );
    }
    // Trusting another CA is refused.
    let other_ca = pki.ca("other-ca");
    let (ok, _, err) = tracedb(&[
        "get",
        &format!("{:032x}", traces[0]),
        "--addr",
        &addr,
        "--tls-ca",
        s(&other_ca),
    ]);
    assert!(!ok, "a client trusting another CA got the trace");
    assert!(err.contains("connecting to https://"), "{err}");
}

#[tokio::test]
async fn plaintext_and_stalled_clients_do_not_hold_up_tls_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let ca = pki.ca("ca");
    let (cert, key) = pki.leaf("server", "ca", KeyKind::Sec1, true);
    let server = Server::start_tls(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            s(&cert),
            "--tls-key",
            s(&key),
            "--log-level",
            "info,tracedb_server::tls=debug",
        ],
        ClientTls::load(&ca, None).expect("client TLS"),
    );

    // Connections that never say a word, held open through the test.
    let stalled_since = Instant::now();
    let mut stalled: Vec<std::net::TcpStream> = [server.addr, server.http]
        .iter()
        .map(|&addr| std::net::TcpStream::connect(addr).expect("connect"))
        .collect();

    // TLS clients are served at once, stalled handshakes notwithstanding (if
    // a handshake held up the accept loop, they would wait for its timeout).
    let mut ingest = server.ingest().await;
    ingest
        .export(request("tls", &[42], 3))
        .await
        .expect("export over TLS");
    let mut query = server.query().await;
    let served = get_trace(&mut query, 42).await.expect("GetTrace over TLS");
    assert_eq!(spans_of(&served).len(), 3);
    assert_eq!(health(&server).await, 1, "SERVING over TLS");
    let ready = server
        .http_call("GET", "/ready", &[], b"")
        .expect("GET /ready over TLS");
    assert_eq!(ready.status, 200);
    let waited = stalled_since.elapsed();
    assert!(
        waited < HANDSHAKE_TIMEOUT / 2,
        "a stalled handshake held up other clients: served after {waited:?}"
    );

    // Plaintext clients at the TLS ports fail, with no answer.
    let plain = http_request(server.http, "GET", "/ready", &[], b"");
    assert!(plain.is_err(), "plaintext HTTP got an answer: {plain:?}");
    let plain_grpc = async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
            .expect("uri")
            .connect()
            .await?;
        let mut client =
            tracedb_proto::collector::trace::v1::trace_service_client::TraceServiceClient::new(
                channel,
            );
        client.export(request("plain", &[1], 1)).await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    }
    .await;
    assert!(plain_grpc.is_err(), "a plaintext gRPC export was accepted");
    let (ok, _, err) = tracedb(&[
        "search",
        "--service",
        "plain",
        "--addr",
        &server.addr.to_string(),
    ]);
    assert!(!ok, "plaintext tracedb search worked against a TLS port");
    assert!(err.contains("connect with --tls-ca"), "no hint in: {err}");

    let failures = |listener: &str| {
        metric(
            &server,
            &format!("tracedb_tls_handshake_failures_total{{listener=\"{listener}\"}}"),
        )
    };
    let (grpc_before, http_before) = (failures("grpc"), failures("http"));
    assert!(
        grpc_before >= 1.0,
        "the plaintext gRPC client was not counted"
    );
    assert!(
        http_before >= 1.0,
        "the plaintext HTTP client was not counted"
    );
    let log = server.log_text();
    assert!(log.contains("tls handshake failed"), "{log}");
    assert!(
        log.contains("WARN") && log.contains("listener=\"http\""),
        "{log}"
    );

    // The stalled handshakes end at the timeout: the server closes them.
    let wait = (HANDSHAKE_TIMEOUT + Duration::from_secs(1)).saturating_sub(stalled_since.elapsed());
    tokio::time::sleep(wait).await;
    for socket in &mut stalled {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        match socket.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("a stalled handshake was not closed: {other:?}"),
        }
    }
    assert!(
        failures("grpc") > grpc_before,
        "the timed-out gRPC handshake was not counted"
    );
    assert!(
        failures("http") > http_before,
        "the timed-out HTTP handshake was not counted"
    );
    assert!(
        server.log_text().contains("no handshake within"),
        "{}",
        server.log_text()
    );
}

#[tokio::test]
async fn mutual_tls_needs_a_client_certificate_from_the_client_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let ca = pki.ca("ca");
    pki.ca("clients");
    let (cert, key) = pki.leaf("server", "ca", KeyKind::Pkcs8, true);
    let (client_cert, client_key) = pki.leaf("client", "clients", KeyKind::Pkcs8, false);
    // Signed by the server's CA, not the client CA.
    let (rogue_cert, rogue_key) = pki.leaf("rogue", "ca", KeyKind::Pkcs8, false);

    // The options from a config file, by their TOML keys.
    let file = dir.path().join("tracedb.toml");
    std::fs::write(
        &file,
        format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\n",
            s(&cert),
            s(&key),
            s(&pki.path("clients.pem"))
        ),
    )
    .expect("config file");
    let server = Server::start_tls(
        &dir.path().join("data"),
        &["--config", s(&file)],
        ClientTls::load(&ca, Some((&client_cert, &client_key))).expect("client TLS"),
    );
    assert!(
        server.log_text().contains("tls=mutual"),
        "{}",
        server.log_text()
    );

    // Without a certificate, or with one the client CA did not sign: refused.
    for (what, tls) in [
        ("no client certificate", ClientTls::load(&ca, None)),
        (
            "a certificate of another CA",
            ClientTls::load(&ca, Some((&rogue_cert, &rogue_key))),
        ),
    ] {
        let tls = tls.expect("client TLS");
        let export = async {
            let channel = tls.channel(&format!("https://{}", server.addr)).await?;
            let mut client =
                tracedb_proto::collector::trace::v1::trace_service_client::TraceServiceClient::new(
                    channel,
                );
            client.export(request("intruder", &[7], 1)).await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        }
        .await;
        assert!(export.is_err(), "gRPC with {what} was served");
        let https = crate::harness::https_request(server.http, &tls, "GET", "/ready", &[], b"");
        assert!(https.is_err(), "HTTPS with {what} was served: {https:?}");
    }
    let (ok, _, _) = tracedb(&[
        "search",
        "--service",
        "x",
        "--addr",
        &server.addr.to_string(),
        "--tls-ca",
        s(&ca),
    ]);
    assert!(
        !ok,
        "tracedb search without a client certificate was served"
    );

    // The SDK with its client certificate, through the standard variables.
    let env = [
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.as_path()),
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            client_cert.as_path(),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", client_key.as_path()),
    ];
    let mut traces = python_sdk_round_trip(&server, "grpc", &env, dir.path()).await;
    traces.extend(python_sdk_round_trip(&server, "http", &env, dir.path()).await);
    // The trace viewer and the API it reads are on the same HTTPS listener.
    let tls = server.tls.as_ref().expect("TLS");
    for path in ["/", "/ui/app.js", "/api/v2/search/tags"] {
        let r = crate::harness::https_request(server.http, tls, "GET", path, &[], b"")
            .expect("HTTPS with a client certificate");
        assert_eq!(r.status, 200, "{path}");
    }
    let (ok, out, err) = tracedb(&[
        "get",
        &format!("{:032x}", traces[0]),
        "--addr",
        &server.addr.to_string(),
        "--tls-ca",
        s(&ca),
        "--tls-cert",
        s(&client_cert),
        "--tls-key",
        s(&client_key),
    ]);
    assert!(ok, "tracedb get with a client certificate failed: {err}");
    assert!(out.contains("SELECT cart"), "{out}");

    let mut query = server.query().await;
    assert!(
        get_trace(&mut query, 7).await.is_err(),
        "an intruder's span was stored"
    );
    let refused = metric(
        &server,
        "tracedb_tls_handshake_failures_total{listener=\"grpc\"}",
    );
    assert!(refused >= 2.0, "refused gRPC handshakes counted: {refused}");
}

#[tokio::test]
async fn rsa_pkcs1_keys_are_served_and_sigterm_stops_tls_listeners() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let ca = pki.ca("ca");
    let (cert, key) = pki.leaf("server", "ca", KeyKind::RsaPkcs1, true);
    let server = Server::start_tls(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            s(&cert),
            "--tls-key",
            s(&key),
            "--shutdown-timeout-secs",
            "5",
        ],
        ClientTls::load(&ca, None).expect("client TLS"),
    );
    assert_eq!(health(&server).await, 1, "SERVING over TLS");
    let ready = server
        .http_call("GET", "/ready", &[], b"")
        .expect("GET /ready over TLS");
    assert_eq!(ready.status, 200);

    // Graceful shutdown with an idle TLS connection and a handshake in progress.
    let mut idle = server.ingest().await;
    idle.export(request("rsa", &[5], 2))
        .await
        .expect("export over TLS");
    let _stalled = std::net::TcpStream::connect(server.addr).expect("connect");
    let log = server.log.clone();
    let status = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .expect("terminate");
    let log = log.lock().expect("log").join("\n");
    assert!(status.success(), "exit status {status}; log:\n{log}");
    assert!(log.contains("shut down cleanly"), "{log}");
    assert!(!log.contains("did not finish"), "{log}");
}

#[test]
fn broken_tls_settings_are_refused_at_start_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    pki.ca("ca");
    let (cert, key) = pki.leaf("server", "ca", KeyKind::Sec1, true);
    let (_, other_key) = pki.leaf("other", "ca", KeyKind::Sec1, true);
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").expect("write");
    let bad_base64 = dir.path().join("bad-base64.pem");
    std::fs::write(
        &bad_base64,
        "-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let missing = dir.path().join("missing.pem");

    let err = serve_fails(&["--tls-cert", s(&cert)], &[]);
    assert!(err.contains("tls_cert is set but tls_key is not"), "{err}");
    // The environment variable alone is half a configuration too.
    let err = serve_fails(&[], &[("TRACEDB_TLS_KEY", s(&key))]);
    assert!(err.contains("tls_key is set but tls_cert is not"), "{err}");
    let err = serve_fails(&["--tls-client-ca", s(&pki.path("ca.pem"))], &[]);
    assert!(
        err.contains("tls_client_ca is set without tls_cert and tls_key"),
        "{err}"
    );

    let err = serve_fails(&["--tls-cert", s(&missing), "--tls-key", s(&key)], &[]);
    assert!(
        err.contains(&format!("tls_cert {}: cannot read it", missing.display())),
        "{err}"
    );
    let err = serve_fails(&["--tls-cert", s(&garbage), "--tls-key", s(&key)], &[]);
    assert!(
        err.contains(&format!(
            "tls_cert {}: no certificate in it",
            garbage.display()
        )),
        "{err}"
    );
    let err = serve_fails(&["--tls-cert", s(&bad_base64), "--tls-key", s(&key)], &[]);
    assert!(
        err.contains(&format!("tls_cert {}: broken PEM", bad_base64.display())),
        "{err}"
    );
    let err = serve_fails(&["--tls-cert", s(&cert), "--tls-key", s(&other_key)], &[]);
    assert!(
        err.contains(&format!(
            "tls_key {} does not belong to the certificate",
            other_key.display()
        )),
        "{err}"
    );
    let err = serve_fails(&["--tls-cert", s(&key), "--tls-key", s(&cert)], &[]);
    assert!(
        err.contains("are the certificate and key files swapped?"),
        "{err}"
    );
    let err = serve_fails(
        &[
            "--tls-cert",
            s(&cert),
            "--tls-key",
            s(&key),
            "--tls-client-ca",
            s(&garbage),
        ],
        &[],
    );
    assert!(
        err.contains(&format!(
            "tls_client_ca {}: no certificate in it",
            garbage.display()
        )),
        "{err}"
    );
    // Every problem at once.
    let err = serve_fails(&["--tls-cert", s(&garbage), "--tls-key", s(&missing)], &[]);
    assert!(err.contains("tls_cert") && err.contains("tls_key"), "{err}");
    assert!(!err.contains("tracedb listening"), "{err}");
}

/// `tracedb query` to nodes that serve mutual TLS: with `--node-tls-ca` and a
/// client certificate it reads through them; without them the node does not
/// answer and the tier says UNAVAILABLE, never NOT_FOUND.
#[tokio::test]
async fn the_query_tier_reads_from_nodes_over_mutual_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let ca = pki.ca("ca");
    pki.ca("clients");
    let (cert, key) = pki.leaf("server", "ca", KeyKind::Pkcs8, true);
    let (tier_cert, tier_key) = pki.leaf("tier", "clients", KeyKind::Pkcs8, false);
    let clients_ca = pki.path("clients.pem");
    let node = Server::start_tls(
        &dir.path().join("data"),
        &[
            "--tls-cert",
            s(&cert),
            "--tls-key",
            s(&key),
            "--tls-client-ca",
            s(&clients_ca),
        ],
        ClientTls::load(&ca, Some((&tier_cert, &tier_key))).expect("client TLS"),
    );
    node.ingest()
        .await
        .export(request("secure", &[0x77], 2))
        .await
        .expect("export over mutual TLS");

    let tier = Server::start_tier(
        &[&[&node]],
        &[
            "--node-tls-ca",
            s(&ca),
            "--node-tls-cert",
            s(&tier_cert),
            "--node-tls-key",
            s(&tier_key),
        ],
    );
    let mut query = tier.query().await;
    let spans = spans_of(&get_trace(&mut query, 0x77).await.expect("through the tier"));
    assert_eq!(spans.len(), 2);
    let until = Instant::now() + Duration::from_secs(20);
    while health(&tier).await != 1 {
        assert!(
            Instant::now() < until,
            "the tier never saw its node serve over TLS"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Found by name, a node is certified by the name: a certificate for
    // localhost alone (no IP address in it) passes.
    let (named_cert, named_key) = pki.leaf_with(
        "named",
        "ca",
        KeyKind::Pkcs8,
        "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n",
    );
    let named = Server::start_tls(
        &dir.path().join("named"),
        &["--tls-cert", s(&named_cert), "--tls-key", s(&named_key)],
        ClientTls::load(&ca, None).expect("client TLS"),
    );
    let to_named = ClientTls::load(&ca, None)
        .expect("client TLS")
        .channel(&format!("https://localhost:{}", named.addr.port()))
        .await
        .expect("connect by name");
    tracedb_proto::collector::trace::v1::trace_service_client::TraceServiceClient::new(to_named)
        .export(request("secure", &[0x78], 2))
        .await
        .expect("export over TLS");
    let by_name = Server::start_query(
        &[format!("dns:///localhost:{}", named.addr.port())],
        &["--node-tls-ca", s(&ca)],
        &[],
    );
    let spans = spans_of(
        &get_trace(&mut by_name.query().await, 0x78)
            .await
            .expect("through a node found by name"),
    );
    assert_eq!(spans.len(), 2);
    let by_addr = Server::start_tier(&[&[&named]], &["--node-tls-ca", s(&ca)]);
    let refused = get_trace(&mut by_addr.query().await, 0x78)
        .await
        .expect_err("its certificate names no address");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");

    let plain = Server::start_tier(&[&[&node]], &["--node-timeout-ms", "1000"]);
    let refused = get_trace(&mut plain.query().await, 0x77)
        .await
        .expect_err("a plaintext tier gets no answer from a TLS node");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");

    let (ok, _, err) = tracedb(&[
        "query",
        "--nodes",
        "127.0.0.1:1",
        "--node-tls-cert",
        s(&tier_cert),
        "--node-tls-ca",
        s(&ca),
    ]);
    assert!(!ok);
    assert!(
        err.contains("node_tls_cert and node_tls_key go together"),
        "{err}"
    );
}

/// `--tenancy certificate`: each client's certificate names its tenant (the
/// subject's CN, or with `--tenant-cert-field san-dns` a DNS name), on the
/// gRPC and the HTTPS port; a certificate without the field is refused, and
/// a header cannot name another tenant.
#[tokio::test]
async fn with_certificate_tenancy_each_client_certificate_names_its_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let ca = pki.ca("ca");
    pki.ca("clients");
    let (cert, key) = pki.leaf("server", "ca", KeyKind::Pkcs8, true);
    let client = |name: &str, extensions: &str| {
        let (c, k) = pki.leaf_with(name, "clients", KeyKind::Pkcs8, extensions);
        ClientTls::load(&ca, Some((&c, &k))).expect("client TLS")
    };
    let team_a = client(
        "team-a",
        "extendedKeyUsage=clientAuth\nsubjectAltName=DNS:dns-a\n",
    );
    let team_b = client(
        "team-b",
        "extendedKeyUsage=clientAuth\nsubjectAltName=DNS:dns-b\n",
    );
    // A common name that is not a tenant ID, and no DNS name.
    let bad = client("not a tenant", "extendedKeyUsage=clientAuth\n");
    let options = |field: &'static str| {
        vec![
            "--tls-cert".to_string(),
            s(&cert).to_string(),
            "--tls-key".to_string(),
            s(&key).to_string(),
            "--tls-client-ca".to_string(),
            s(&pki.path("clients.pem")).to_string(),
            "--tenancy".to_string(),
            "certificate".to_string(),
            "--tenant-cert-field".to_string(),
            field.to_string(),
        ]
    };
    let export = |tls: &ClientTls, addr: std::net::SocketAddr, trace: u128, orgid: Option<&str>| {
        let tls = tls.clone();
        let orgid = orgid.map(str::to_owned);
        async move {
            let channel = tls
                .channel(&format!("https://{addr}"))
                .await
                .expect("connect");
            let mut client =
                tracedb_proto::collector::trace::v1::trace_service_client::TraceServiceClient::new(
                    channel,
                );
            let mut r = tonic::Request::new(request("svc", &[trace], 2));
            if let Some(t) = orgid {
                r.metadata_mut()
                    .insert("x-scope-orgid", t.parse().expect("ASCII"));
            }
            client.export(r).await.map(drop)
        }
    };
    let search = |tls: &ClientTls, server: &Server| {
        let r = crate::harness::https_request(
            server.http,
            tls,
            "GET",
            "/api/search?q=%7B%7D&limit=50",
            &[],
            b"",
        )
        .expect("HTTPS");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        v["traces"]
            .as_array()
            .expect("traces")
            .iter()
            .map(|t| t["traceID"].as_str().expect("ID").to_owned())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let hex = |t: u128| format!("{t:032x}");

    let args = options("cn");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_tls(&dir.path().join("cn"), &args, team_a.clone());
    export(&team_a, server.addr, 0xa1, None)
        .await
        .expect("team-a");
    // A header naming another tenant changes nothing: the certificate decides.
    export(&team_a, server.addr, 0xa2, Some("team-b"))
        .await
        .expect("team-a");
    export(&team_b, server.addr, 0xb1, None)
        .await
        .expect("team-b");
    assert_eq!(search(&team_a, &server), [hex(0xa1), hex(0xa2)].into());
    assert_eq!(search(&team_b, &server), [hex(0xb1)].into());
    assert!(dir.path().join("cn/tenants/team-a").is_dir());
    let e = export(&bad, server.addr, 0xc1, None)
        .await
        .expect_err("not a tenant ID");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let r = crate::harness::https_request(server.http, &bad, "GET", "/api/search/tags", &[], b"")
        .expect("HTTPS");
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    drop(server);

    // Another field: the certificates' DNS names; one without is refused.
    let args = options("san-dns");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_tls(&dir.path().join("dns"), &args, team_a.clone());
    export(&team_a, server.addr, 0xa1, None)
        .await
        .expect("dns-a");
    assert!(dir.path().join("dns/tenants/dns-a").is_dir());
    assert_eq!(search(&team_a, &server), [hex(0xa1)].into());
    assert_eq!(search(&team_b, &server), [].into());
    let e = export(&bad, server.addr, 0xc1, None)
        .await
        .expect_err("no DNS name");
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert!(
        e.message().contains("DNS subject alternative name"),
        "{e:?}"
    );
    let r = crate::harness::https_request(server.http, &bad, "GET", "/api/search/tags", &[], b"")
        .expect("HTTPS");
    assert_eq!(r.status, 401);
    drop(server);

    // Certificate tenancy without mutual TLS is refused at start-up.
    let (ok, _, err) = tracedb(&[
        "serve",
        "--data-dir",
        s(&dir.path().join("x")),
        "--tenancy",
        "certificate",
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
    ]);
    assert!(!ok && err.contains("--tls-client-ca"), "{err}");
}
