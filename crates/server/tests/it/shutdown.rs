//! SIGTERM under load: exporters keep sending over gRPC and HTTP while the
//! server shuts down. It must exit 0 within its shutdown timeout, and after a
//! restart every export it acknowledged must be there, whole.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use prost::Message;

use crate::harness::{get_trace, http_request, request, spans_of, Server};

const SPANS: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_exits_0_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(dir.path(), &["--shutdown-timeout-secs", "10"]);
    let acked = Arc::new(Mutex::new(Vec::<u128>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut exporters = Vec::new();

    for worker in 0..3u128 {
        let mut client = server.ingest().await;
        let (acked, stop) = (acked.clone(), stop.clone());
        exporters.push(tokio::spawn(async move {
            let mut n = 0u128;
            while !stop.load(Ordering::Relaxed) {
                let trace = (worker + 1) << 32 | n;
                n += 1;
                match client.export(request("grpc-load", &[trace], SPANS)).await {
                    Ok(_) => acked.lock().expect("lock").push(trace),
                    Err(_) => break,
                }
            }
        }));
    }
    for worker in 0..2u128 {
        let (acked, stop, addr) = (acked.clone(), stop.clone(), server.http);
        exporters.push(tokio::task::spawn_blocking(move || {
            let mut n = 0u128;
            while !stop.load(Ordering::Relaxed) {
                let trace = (worker + 10) << 32 | n;
                n += 1;
                let body = request("http-load", &[trace], SPANS).encode_to_vec();
                let headers = [("Content-Type", "application/x-protobuf")];
                match http_request(addr, "POST", "/v1/traces", &headers, &body) {
                    Ok(r) if r.status == 200 => acked.lock().expect("lock").push(trace),
                    Ok(r) => assert_eq!(r.status, 503, "only 'shutting down' is expected"),
                    Err(_) => {}
                }
                // Connection refused once the listener is gone: stop.
                if std::net::TcpStream::connect(addr).is_err() {
                    break;
                }
            }
        }));
    }

    // Signal once exports over both protocols are flowing.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let flowing = {
            let acked = acked.lock().expect("lock");
            acked.iter().any(|t| t >> 32 < 10) && acked.iter().any(|t| t >> 32 >= 10)
        };
        if flowing {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no export over both gRPC and HTTP was acknowledged within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = server.log.clone();
    let started = Instant::now();
    let status = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .expect("terminate");
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for e in exporters {
        e.await.expect("exporter");
    }
    let log = log.lock().expect("log").join("\n");
    assert!(status.success(), "exit status {status}; log:\n{log}");
    assert!(took < Duration::from_secs(12), "shutdown took {took:?}");
    assert!(log.contains("shut down cleanly"), "{log}");

    let acked = acked.lock().expect("lock").clone();
    let server = Server::start(dir.path());
    let mut query = server.query().await;
    for trace in &acked {
        let messages = get_trace(&mut query, *trace)
            .await
            .unwrap_or_else(|e| panic!("acknowledged trace {trace:x} lost: {e}"));
        let spans = spans_of(&messages).len();
        assert_eq!(spans as u64, SPANS, "trace {trace:x}");
    }
}
