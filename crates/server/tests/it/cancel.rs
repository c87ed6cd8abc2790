//! A query whose client goes away stops on the server: over HTTP (the
//! connection closed), over gRPC (the call dropped), and through a query
//! tier (its client gone, the tier drops its calls and the node stops).
//! Each stop is counted in `tracedb_queries_cancelled_total`.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use tracedb_proto::query::v1::QueryMetricsRequest;

use crate::{
    harness::{base_time, metric, request, Server},
    traceql::encoded,
};

const SEC: u64 = 1_000_000_000;
/// Reads every span: a condition on the duration is not answered from cells.
const QUERY: &str = "{ span.http.route = \"/cart\" && duration >= 0s } | count_over_time()";
const CANCELLED: &str = "tracedb_queries_cancelled_total";

/// Sends `GET path` to `addr` and closes the connection after `wait`,
/// without reading an answer; false if the answer came first.
fn ask_and_leave(addr: std::net::SocketAddr, path: &str, wait: Duration) -> bool {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send");
    std::thread::sleep(wait);
    stream.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    let answered = std::io::Read::read(&mut stream, &mut byte).is_ok();
    drop(stream);
    !answered
}

/// Waits until `server` counts `want` cancelled queries, up to `patience`.
fn cancelled_within(server: &Server, want: f64, patience: Duration) -> f64 {
    let deadline = Instant::now() + patience;
    loop {
        let now = metric(server, CANCELLED);
        if now >= want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_whose_client_goes_away_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Server::start_with(dir.path(), &["--flush-bytes", "16000000"]);
    let mut ingest = node.ingest().await;
    // 400,000 spans, so a query that reads them all takes long enough to
    // be left in the middle.
    for r in 0..40u128 {
        let traces: Vec<u128> = (0..1000).map(|t| r * 1000 + t + 1).collect();
        ingest
            .export(request("shop", &traces, 10))
            .await
            .expect("export");
    }
    let (start, end) = (base_time() / SEC - 60, base_time() / SEC + 60);
    let path = format!(
        "/api/metrics/query_range?q={}&start={start}&end={end}&step=60s",
        encoded(QUERY)
    );
    assert_eq!(metric(&node, CANCELLED), 0.0);

    // How long the whole query takes here: the client leaves after a
    // tenth of it.
    let began = Instant::now();
    let whole = node.http_call("GET", &path, &[], b"").expect("GET");
    let took = began.elapsed();
    let text = String::from_utf8_lossy(&whole.body).into_owned();
    assert_eq!(whole.status, 200, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let counted: f64 = answer["series"]
        .as_array()
        .expect("series")
        .iter()
        .flat_map(|s| s["samples"].as_array().expect("samples"))
        .map(|p| {
            p.get("value")
                .map_or(0.0, |v| v.as_f64().expect("a number"))
        })
        .sum();
    assert_eq!(counted, 400_000.0, "every span counted: {text}");
    assert_eq!(metric(&node, CANCELLED), 0.0, "an answered query is not");
    eprintln!("the whole query took {took:?}");
    let leave = took / 10;
    let patience = took * 3 + Duration::from_secs(5);

    assert!(
        ask_and_leave(node.http, &path, leave),
        "left before the answer"
    );
    assert_eq!(cancelled_within(&node, 1.0, patience), 1.0, "over HTTP");

    let mut query = node.query().await;
    let call = query.query_metrics(QueryMetricsRequest {
        query: QUERY.into(),
        start_time_unix_nano: start * SEC,
        end_time_unix_nano: end * SEC,
        step_nanos: 60 * SEC,
        ..Default::default()
    });
    assert!(
        tokio::time::timeout(leave, call).await.is_err(),
        "left before the answer"
    );
    assert_eq!(cancelled_within(&node, 2.0, patience), 2.0, "over gRPC");

    let tier = Server::start_tier(&[&[&node]], &[]);
    assert!(
        ask_and_leave(tier.http, &path, leave),
        "left before the answer"
    );
    assert_eq!(
        cancelled_within(&node, 3.0, patience),
        3.0,
        "the node, after the tier's client left"
    );
    // The node still answers in full.
    let again = node.http_call("GET", &path, &[], b"").expect("GET");
    assert_eq!(again.status, 200);
    assert_eq!(metric(&node, CANCELLED), 3.0);
}
