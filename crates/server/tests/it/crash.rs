//! The kill -9 harness: clients stream spans while the server is killed with
//! SIGKILL at random moments (during appends, group commits and flushes), then
//! restarted on the same data directory. Every span whose export was
//! acknowledged must be returned, exactly once, and after every kill the data
//! directory must pass `check_data_dir` (what a crash normally leaves, such
//! as a torn WAL tail, is a note, not a problem).
//!
//! The reads that matter most come right after a restart, while the replayed
//! WAL is being flushed and the clients export again: as soon as health says
//! SERVING, every trace acknowledged before the last kill is read through
//! GetTrace, Jaeger's GetTraces and the Tempo API, concurrently with the
//! exporters. An answer is whole or it is a failure: an OK answer with
//! missing spans (or none) fails the run as surely as NOT_FOUND does.
//!
//! `TRACEDB_CRASH_CYCLES` (default 20) and `TRACEDB_CRASH_SEED` (default: from the
//! clock, printed) control the run; a long run is
//! `TRACEDB_CRASH_CYCLES=300 scripts/test -p tracedb-server crash`.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prost::Message;
use rand::{rngs::SmallRng, seq::IndexedRandom, Rng, SeedableRng};
use tonic::transport::Channel;
use tracedb_proto::{
    jaeger::storage::v2::{
        trace_reader_client::TraceReaderClient, GetTraceParams, GetTracesRequest,
    },
    query::v1::query_service_client::QueryServiceClient,
    trace::v1::TracesData,
};

use crate::{
    harness::{get_trace, health, http_request, request, spans_of, Server},
    tempo::TraceByIdResponse,
};

const TRACES_PER_REQUEST: u128 = 4;
const SPANS_PER_TRACE: u64 = 5;
const CLIENTS: usize = 4;
/// Older traces read again after each restart, besides all of the last cycle's.
const OLDER_SAMPLE: usize = 50;
/// Jaeger's GetTraces is asked for this many traces at once.
const JAEGER_BATCH: usize = 16;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_spans_survive_random_sigkills() {
    let cycles = env_u64("TRACEDB_CRASH_CYCLES").unwrap_or(20);
    let seed = env_u64("TRACEDB_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("crash harness: {cycles} cycles, TRACEDB_CRASH_SEED={seed}");
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    // Small buffers so that kills land during flushes too.
    let flags = ["--flush-bytes", "50000", "--shards", "2"];
    let acked: Arc<Mutex<Vec<u128>>> = Arc::default();
    let next_trace = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let mut verified = 0;
    // Where the traces the last cycle acknowledged begin in `acked`.
    let mut last_cycle_from = 0;

    for cycle in 0..cycles {
        let server = Server::start_with(dir.path(), &flags);
        serving(&server).await;
        // What was acknowledged before the kill: all of the last cycle's
        // traces and a sample of the older ones.
        let before: Vec<u128> = acked.lock().expect("lock").clone();
        let mut check: Vec<u128> = before[last_cycle_from..].to_vec();
        check.extend(before[..last_cycle_from].choose_multiple(&mut rng, OLDER_SAMPLE));
        last_cycle_from = before.len();

        let endpoint = server.endpoint();
        let deadline = Instant::now() + Duration::from_millis(rng.random_range(100..1_200));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let (acked, next_trace, endpoint) = (acked.clone(), next_trace.clone(), endpoint.clone());
                tokio::spawn(async move {
                    let Ok(mut client) = tracedb_proto::collector::trace::v1::trace_service_client::TraceServiceClient::connect(endpoint).await else {
                        return;
                    };
                    loop {
                        let first = u128::from(next_trace.fetch_add(TRACES_PER_REQUEST as u64, std::sync::atomic::Ordering::Relaxed));
                        let traces: Vec<u128> = (first..first + TRACES_PER_REQUEST).collect();
                        match client.export(request("crash", &traces, SPANS_PER_TRACE)).await {
                            Ok(_) => acked.lock().expect("lock").extend(traces),
                            Err(_) => return, // the server died under us: not acknowledged
                        }
                        // Paced so the final check stays short; kills still land mid-flush.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        // Read back while the clients export and the replayed buffers flush.
        verified += check.len();
        verify_all(
            &server,
            check,
            seed,
            &format!("right after restart {cycle}"),
        )
        .await;
        tokio::time::sleep_until(deadline.into()).await;
        server.kill9();
        for c in clients {
            // A client's export fails once the server is gone; one that hangs
            // instead (seen once, in the HTTP/2 client) was never acknowledged
            // and must not hang the harness.
            let abort = c.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), c)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        let report = tracedb_lsm::check::check_data_dir(dir.path()).expect("check");
        assert!(
            report.is_clean(),
            "cycle {cycle} (seed {seed}): the data directory fails its check:\n{report}"
        );
        eprintln!(
            "cycle {cycle}: killed; {} traces acknowledged so far; check: {} files, {} WAL records, {} notes",
            acked.lock().expect("lock").len(),
            report.tables,
            report.wal_records,
            report.notes.len()
        );
    }

    let server = Server::start(dir.path());
    serving(&server).await;
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() as u64 >= cycles,
        "too little traffic to test anything: {}",
        acked.len()
    );
    verify_all(&server, acked.clone(), seed, "after the last restart").await;
    eprintln!(
        "crash harness: {} acknowledged traces all present after {cycles} kills ({verified} read right after a restart)",
        acked.len()
    );
}

/// Waits until health says SERVING (the harness reads only after that).
async fn serving(server: &Server) {
    let until = Instant::now() + Duration::from_secs(60);
    while health(server).await != 1 {
        assert!(Instant::now() < until, "not SERVING after 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads each trace through the three read APIs, four tasks at a time.
async fn verify_all(server: &Server, traces: Vec<u128>, seed: u64, when: &str) {
    let tasks: Vec<_> = traces
        .chunks(traces.len().div_ceil(4).max(1))
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let (endpoint, http, when) = (server.endpoint(), server.http, when.to_owned());
            tokio::spawn(async move {
                let channel = Channel::from_shared(endpoint)
                    .expect("endpoint")
                    .connect()
                    .await
                    .expect("connect");
                let mut query = QueryServiceClient::new(channel.clone());
                let mut jaeger = TraceReaderClient::new(channel);
                for &trace in &chunk {
                    let found = get_trace(&mut query, trace).await.unwrap_or_else(|e| {
                        panic!("{when}: GetTrace of acknowledged trace {trace:x} failed (seed {seed}): {e}")
                    });
                    assert_whole(&found, trace, "GetTrace", &when, seed);
                }
                for batch in chunk.chunks(JAEGER_BATCH) {
                    jaeger_whole(&mut jaeger, batch, &when, seed).await;
                }
                let tempo: Vec<u128> = chunk.iter().copied().step_by(4).collect();
                tokio::task::spawn_blocking(move || {
                    for trace in tempo {
                        tempo_whole(http, trace, &when, seed);
                    }
                })
                .await
                .expect("tempo reads");
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("verifier");
    }
}

/// Every span of `trace` once; an OK answer with fewer (or none) is a failure.
fn assert_whole(messages: &[TracesData], trace: u128, api: &str, when: &str, seed: u64) {
    let spans = spans_of(messages);
    let ids: HashSet<_> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
    assert_eq!(
        ids.len(),
        spans.len(),
        "{when}: {api}: trace {trace:x} has a duplicate span (seed {seed})"
    );
    assert_eq!(
        spans.len() as u64,
        SPANS_PER_TRACE,
        "{when}: {api} answered OK with {} of the {SPANS_PER_TRACE} spans of acknowledged trace {trace:x} (seed {seed})",
        spans.len()
    );
}

async fn jaeger_whole(
    client: &mut TraceReaderClient<Channel>,
    batch: &[u128],
    when: &str,
    seed: u64,
) {
    let request = GetTracesRequest {
        query: batch
            .iter()
            .map(|t| GetTraceParams {
                trace_id: t.to_be_bytes().to_vec().into(),
                ..Default::default()
            })
            .collect(),
    };
    let mut stream = client
        .get_traces(request)
        .await
        .unwrap_or_else(|e| panic!("{when}: Jaeger GetTraces failed (seed {seed}): {e}"))
        .into_inner();
    let mut by_trace: HashMap<u128, Vec<TracesData>> = HashMap::new();
    while let Some(m) = stream
        .message()
        .await
        .unwrap_or_else(|e| panic!("{when}: Jaeger GetTraces stream failed (seed {seed}): {e}"))
    {
        let first = spans_of(std::slice::from_ref(&m));
        let trace = first.first().map_or(0, |(_, s)| {
            u128::from_be_bytes(s.trace_id[..].try_into().expect("16-byte trace ID"))
        });
        by_trace.entry(trace).or_default().push(m);
    }
    for &trace in batch {
        let messages = by_trace.remove(&trace).unwrap_or_default();
        assert_whole(&messages, trace, "Jaeger GetTraces", when, seed);
    }
    assert!(
        by_trace.is_empty(),
        "{when}: Jaeger GetTraces answered traces not asked for, or a message without spans (seed {seed})"
    );
}

fn tempo_whole(http: SocketAddr, trace: u128, when: &str, seed: u64) {
    let path = format!("/api/v2/traces/{trace:032x}");
    let response = http_request(
        http,
        "GET",
        &path,
        &[("Accept", "application/protobuf")],
        b"",
    )
    .unwrap_or_else(|e| panic!("{when}: Tempo GET {path} failed (seed {seed}): {e}"));
    assert_eq!(
        response.status,
        200,
        "{when}: Tempo {path} answered {} for an acknowledged trace (seed {seed}): {}",
        response.status,
        String::from_utf8_lossy(&response.body)
    );
    let decoded = TraceByIdResponse::decode(response.body.as_slice()).expect("TraceByIDResponse");
    let messages: Vec<TracesData> = decoded.trace.into_iter().collect();
    assert_whole(&messages, trace, "Tempo", when, seed);
}
