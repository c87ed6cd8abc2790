//! The trace viewer (`GET /`, `crates/server/src/ui.rs`): its routes and
//! headers, on a node and on the query tier; and the page itself in headless
//! Chromium, driven by Playwright for Python (`tests/browser/ui_test.py`),
//! over traces the Python SDK exported (`tests/browser/export_ui_traces.py`).
//!
//! A trace read through a query tier one of whose nodes did not answer is
//! shown with the page's partial warning (`tests/browser/ui_partial_test.py`).
//! With tenancy on, the page asks for a tenant and reads only its traces
//! (`tests/browser/ui_tenant_test.py`). The metrics page charts a service's
//! error spike, and a click on it opens the spike's traces
//! (`tests/browser/ui_metrics_test.py`, over `export_metrics_traces.py`).
//!
//! With `TRACEDB_UPDATE_SCREENSHOTS=1` the browser tests write their
//! screenshots of the search page, a trace and the metrics page to
//! `docs/img/`, where the README shows them.

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::{
    harness::{http_request, request, HttpResponse, Server},
    python_sdk::python,
};

fn get(server: &Server, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    http_request(server.http, "GET", path, headers, b"").expect("GET")
}

/// The page's own headers: a CSP that allows no inline script or style,
/// nosniff, an ETag that revalidates.
fn assert_viewer_headers(r: &HttpResponse, content_type: &str) {
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some(content_type));
    let csp = r.header("content-security-policy").expect("a CSP");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert!(r.header("etag").is_some_and(|e| e.starts_with('"')));
}

/// What a page or module names by relative URL: `src="…"`, `href="…"` and
/// `from './x.js'`.
fn references(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [("src=\"", '"'), ("href=\"", '"'), ("from './", '\'')] {
        let mut rest = text;
        while let Some(at) = rest.find(open) {
            rest = &rest[at + open.len()..];
            let end = rest.find(close).expect("closed");
            let url = &rest[..end];
            if !url.starts_with('#') && !url.starts_with("${") {
                out.push(if open.starts_with("from") {
                    format!("ui/{url}")
                } else {
                    url.to_owned()
                });
            }
        }
    }
    out
}

#[test]
fn the_viewer_is_served_at_the_root_of_a_node_and_of_the_query_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Server::start(&dir.path().join("data"));
    let tier = Server::start_tier(&[&[&node]], &[]);
    for server in [&node, &tier] {
        let page = get(server, "/", &[]);
        assert_viewer_headers(&page, "text/html; charset=utf-8");
        let html = String::from_utf8(page.body.clone()).expect("UTF-8");
        assert!(html.contains("<title>tracedb</title>"), "{html}");
        // No inline script or style: the CSP would refuse them anyway.
        assert!(!html.contains(" style="), "an inline style");
        for tag in html.split("<script").skip(1) {
            let open = &tag[..tag.find('>').expect("a closed tag")];
            assert!(
                open.contains(" src=\"ui/"),
                "an inline script: <script{open}>"
            );
        }
        assert!(!html.contains("http://") && !html.contains("https://"));

        // Everything the page loads, and every module those load, is served
        // with its type; nothing is fetched from elsewhere.
        let mut pending = references(&html);
        let mut seen = Vec::new();
        while let Some(url) = pending.pop() {
            if seen.contains(&url) {
                continue;
            }
            assert!(
                url.starts_with("ui/"),
                "{url} is not one of the page's files"
            );
            let r = get(server, &format!("/{url}"), &[]);
            let kind = match url.rsplit('.').next() {
                Some("js") => "text/javascript; charset=utf-8",
                Some("css") => "text/css; charset=utf-8",
                Some("svg") => "image/svg+xml",
                Some("txt") => "text/plain; charset=utf-8",
                other => panic!("unexpected asset type {other:?}"),
            };
            assert_viewer_headers(&r, kind);
            let text = String::from_utf8(r.body.clone()).expect("UTF-8");
            assert!(
                !text.contains("innerHTML") && !text.contains("insertAdjacentHTML"),
                "{url} writes markup"
            );
            // (The icon's XML namespace is a name, not an address.)
            assert!(
                url.ends_with(".svg") || !text.contains("http://"),
                "{url} names an http:// address"
            );
            pending.extend(references(&text));
            seen.push(url);
        }
        assert!(seen.len() >= 10, "the page's files: {seen:?}");

        // A cached copy is revalidated, and stays while unchanged.
        let etag = page.header("etag").expect("etag").to_owned();
        let again = get(server, "/", &[("If-None-Match", &etag)]);
        assert_eq!(again.status, 304);
        assert!(again.body.is_empty());
        assert_eq!(get(server, "/", &[("If-None-Match", "\"x\"")]).status, 200);
        assert_eq!(get(server, "/ui/nothing.js", &[]).status, 404);
        // The API the page reads is beside it.
        assert_eq!(get(server, "/api/echo", &[]).status, 200);
    }
}

/// Chromium and Playwright, or a panic that says how to get them.
fn browser() -> (PathBuf, PathBuf) {
    let chromium = std::env::var_os("TRACEDB_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        chromium.exists(),
        "the trace viewer's browser test needs Chromium at {}: run scripts/test as root (it \
         installs Debian's chromium with apt-get), `apt-get install chromium`, or set \
         TRACEDB_TEST_CHROMIUM",
        chromium.display()
    );
    let python = python();
    let import = Command::new(&python)
        .args(["-c", "import playwright.sync_api"])
        .output()
        .expect("run python");
    assert!(
        import.status.success(),
        "the trace viewer's browser test needs Playwright for Python in {}: run scripts/test (it \
         installs scripts/requirements-test.txt into .venv)\n{}",
        python.display(),
        String::from_utf8_lossy(&import.stderr)
    );
    (python, chromium)
}

/// Runs `command` to its end or `limit`, whichever comes first; its output.
fn run_bounded(command: &mut Command, limit: Duration) -> (bool, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = r.read_to_string(&mut text);
            text
        })
    };
    let out = pipe(Box::new(child.stdout.take().expect("stdout")));
    let err = pipe(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    match status {
        Some(s) => (s.success(), text),
        None => (false, format!("{text}\n(killed after {limit:?})")),
    }
}

/// Where the browser tests write their screenshots: `docs/img/` with
/// `TRACEDB_UPDATE_SCREENSHOTS=1` (the README shows them), else `scratch`.
fn screenshots(scratch: &Path) -> PathBuf {
    let shots = if std::env::var_os("TRACEDB_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img")
    } else {
        scratch.join("shots")
    };
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    shots
}

/// Exports traces with the Python SDK (`export`, in tests/browser), then
/// runs the Playwright test `test` against a fresh server, which must pass
/// every check and leave each of `shots` as a screenshot.
fn browser_test(export: &str, test: &str, shots: &[&str]) {
    let (python, chromium) = browser();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&dir.path().join("data"));
    let base = format!("http://{}", server.http);
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let ids = dir.path().join("ids.json");

    let (ok, out) = run_bounded(
        Command::new(&python)
            .arg(scripts.join(export))
            .arg(&base)
            .arg(&ids),
        Duration::from_secs(120),
    );
    assert!(ok, "exporting with the Python SDK failed:\n{out}");

    let shot_dir = screenshots(dir.path());
    let (ok, out) = run_bounded(
        Command::new(&python)
            .arg(scripts.join(test))
            .arg(&base)
            .arg(&ids)
            .arg(&shot_dir)
            .env("TRACEDB_TEST_CHROMIUM", &chromium),
        Duration::from_secs(180),
    );
    assert!(ok, "the browser test {test} failed:\n{out}");
    assert!(out.contains("every check passed"), "{out}");
    for shot in shots {
        let png = std::fs::read(shot_dir.join(shot)).expect("a screenshot");
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 10_000,
            "{shot}: {} bytes",
            png.len()
        );
    }
    eprintln!("{}", out.trim());
}

#[test]
fn the_viewer_searches_and_shows_traces_in_a_real_browser() {
    browser_test(
        "export_ui_traces.py",
        "ui_test.py",
        &["ui-search.png", "ui-trace.png"],
    );
}

#[test]
fn the_viewer_charts_a_services_error_spike_and_a_click_opens_its_traces() {
    browser_test(
        "export_metrics_traces.py",
        "ui_metrics_test.py",
        &["ui-metrics.png"],
    );
}

#[test]
fn the_viewer_warns_that_a_trace_is_partial_when_a_node_did_not_answer() {
    const TRACE: u128 = 0x0a11_ce00_0000_0000_0000_0000_0000_0042;
    let (python, chromium) = browser();
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (
        Server::start(&dir.path().join("a")),
        Server::start(&dir.path().join("b")),
    );
    // One replica group of two nodes: with b down, no group answers in
    // full, so a trace read from a alone may lack spans kept on b.
    let tier = Server::start_tier(&[&[&a, &b]], &[]);
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            a.ingest()
                .await
                .export(request("partial", &[TRACE], 3))
                .await
        })
        .expect("export to a");
    let b_addr = b.addr.to_string();
    let _b_port = b.kill9_keeping_port();

    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let (ok, out) = run_bounded(
        Command::new(&python)
            .arg(scripts.join("ui_partial_test.py"))
            .arg(format!("http://{}", tier.http))
            .arg(format!("{TRACE:032x}"))
            .arg(&b_addr)
            .env("TRACEDB_TEST_CHROMIUM", &chromium),
        Duration::from_secs(120),
    );
    assert!(ok, "the partial-trace browser test failed:\n{out}");
    assert!(out.contains("every check passed"), "{out}");
}

#[test]
fn the_viewer_asks_for_a_tenant_and_reads_only_its_traces() {
    const A: u128 = 0x7ea1_0000_0000_0000_0000_0000_0000_000a;
    const B: u128 = 0x7ea1_0000_0000_0000_0000_0000_0000_000b;
    let (python, chromium) = browser();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(&dir.path().join("data"), &["--tenancy", "header"]);
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            let mut ingest = server.ingest().await;
            for (tenant, trace) in [("team-a", A), ("team-b", B)] {
                let mut r = tonic::Request::new(request(tenant, &[trace], 3));
                r.metadata_mut()
                    .insert("x-scope-orgid", tenant.parse().expect("ASCII"));
                ingest.export(r).await.expect("export");
            }
        });
    // The refusal names the tenant header, for the page to use.
    let refused = get(&server, "/api/search?q=%7B%7D", &[]);
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.header("tracedb-tenant-header"),
        Some("x-scope-orgid")
    );

    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let (ok, out) = run_bounded(
        Command::new(&python)
            .arg(scripts.join("ui_tenant_test.py"))
            .arg(format!("http://{}", server.http))
            .arg(format!("{A:032x}"))
            .arg(format!("{B:032x}"))
            .env("TRACEDB_TEST_CHROMIUM", &chromium),
        Duration::from_secs(120),
    );
    assert!(ok, "the tenant browser test failed:\n{out}");
    assert!(out.contains("every check passed"), "{out}");
}
