//! `tracedb check DATA_DIR` and a damaged sorted file end to end: the check
//! passes on a clean directory and fails naming the file and offset after
//! damage; the server still starts, quarantines the file, serves the rest,
//! and marks GetTrace answers that may be incomplete.

use std::{
    fs,
    io::{Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    process::{Command, Output},
};

use prost::Message;
use tracedb_lsm::{
    test_util::{group_of, span_with},
    Engine, EngineOptions,
};
use tracedb_proto::{
    jaeger::storage::v2::{
        trace_reader_client::TraceReaderClient, GetTraceParams, GetTracesRequest,
    },
    query::v1::GetTraceRequest,
    trace::v1::TracesData,
};

use crate::harness::{
    get_trace, http_request, metric, resource, rich_span, spans_of, Server, TRACEDB,
};

fn check(dir: &Path) -> Output {
    Command::new(TRACEDB)
        .arg("check")
        .arg(dir)
        .output()
        .expect("run tracedb check")
}

fn sorted_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = fs::read_dir(dir.join("tables"))
        .expect("tables dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    files.sort();
    files
}

/// Flips a byte in the middle of every data block of a sorted file (block
/// offsets and lengths from its index; layout in docs/FORMAT.md).
fn damage_blocks(path: &Path) {
    let bytes = fs::read(path).expect("read");
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
    let footer = bytes.len() - 120;
    let (index_at, index_len) = (u64_at(footer) as usize, u64_at(footer + 8) as usize);
    let mut f = fs::OpenOptions::new().write(true).open(path).expect("open");
    for i in 0..(index_len - 4) / 64 {
        let e = index_at + 64 * i;
        let len = u32::from_le_bytes(bytes[e + 8..e + 12].try_into().expect("4")) as u64;
        let at = u64_at(e) + len / 2;
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.write_all(&[bytes[at as usize] ^ 0x5a]).expect("write");
    }
}

/// Stores spans `span_nos` of each trace as one sorted file, with the bytes
/// the OTLP receiver would have stored.
fn write_file(dir: &Path, traces: &[u128], span_nos: std::ops::Range<u64>) {
    let mut opts = EngineOptions::new(dir);
    opts.memtable.shards = 1;
    let engine = Engine::open(opts).expect("open engine");
    let group = group_of(resource("svc").encode_to_vec(), None);
    for &t in traces {
        let spans = span_nos
            .clone()
            .map(|i| {
                let otlp = rich_span(t, i, None);
                span_with(
                    &group,
                    t,
                    u64::from_be_bytes(otlp.span_id[..].try_into().expect("8 bytes")),
                    (otlp.start_time_unix_nano, otlp.end_time_unix_nano),
                    otlp.encode_to_vec(),
                )
            })
            .collect();
        engine.write_blocking(spans).expect("write");
    }
    engine.close().expect("close flushes to a file");
}

async fn get(
    server: &Server,
    trace: u128,
) -> Result<tonic::Response<tonic::Streaming<TracesData>>, tonic::Status> {
    server
        .query()
        .await
        .get_trace(GetTraceRequest {
            trace_id: trace.to_be_bytes().to_vec().into(),
            ..Default::default()
        })
        .await
}

/// Jaeger's `GetTraces` of one trace: every message, or the status.
async fn jaeger_get(
    client: &mut TraceReaderClient<tonic::transport::Channel>,
    trace: u128,
) -> Result<Vec<TracesData>, tonic::Status> {
    let mut stream = client
        .get_traces(GetTracesRequest {
            query: vec![GetTraceParams {
                trace_id: trace.to_be_bytes().to_vec().into(),
                ..Default::default()
            }],
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = stream.message().await? {
        out.push(m);
    }
    Ok(out)
}

#[tokio::test]
async fn check_finds_damage_and_the_server_serves_the_rest_marking_partial_traces() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two sorted files; trace 1 has spans in both.
    write_file(dir.path(), &(1..=8).collect::<Vec<_>>(), 0..4);
    write_file(dir.path(), &[1, 20], 100..104);
    let files = sorted_files(dir.path());
    assert_eq!(files.len(), 2, "{files:?}");

    let clean = check(dir.path());
    let out = String::from_utf8_lossy(&clean.stdout);
    assert_eq!(clean.status.code(), Some(0), "{out}");
    assert!(out.contains("0 problems"), "{out}");

    damage_blocks(&files[0]);
    let damaged = check(dir.path());
    let out = String::from_utf8_lossy(&damaged.stdout);
    assert_eq!(damaged.status.code(), Some(1), "{out}");
    let name = files[0]
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        out.lines()
            .any(|l| l.starts_with("problem:") && l.contains(&name) && l.contains("at offset 16")),
        "{out}"
    );
    let err = String::from_utf8_lossy(&damaged.stderr);
    assert!(err.contains("1 problem(s) found"), "{err}");

    let server = Server::start(dir.path());
    // Spans in the good file come back, and the answer says more may exist.
    let response = get(&server, 1)
        .await
        .expect("a partial trace is still an answer");
    let headers = response.metadata().clone();
    assert_eq!(
        headers.get("tracedb-partial").and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let reason = headers
        .get("tracedb-partial-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("quarantine") && reason.contains(&name),
        "{reason}"
    );
    let mut stream = response.into_inner();
    let mut messages = Vec::new();
    while let Some(m) = stream.message().await.expect("stream") {
        messages.push(m);
    }
    assert_eq!(spans_of(&messages).len(), 4);

    // A trace only in the damaged file: the data is there but unreadable.
    let lost = get_trace(&mut server.query().await, 2)
        .await
        .expect_err("unreadable");
    assert_eq!(lost.code(), tonic::Code::DataLoss, "{lost}");
    // A trace the damaged file cannot hold: whole, and not marked.
    let whole = get(&server, 20).await.expect("trace 20");
    assert!(whole.metadata().get("tracedb-partial").is_none());

    // The Tempo API marks the same answers with the same headers.
    let tempo = |trace: u128| {
        let path = format!("/api/v2/traces/{trace:032x}");
        http_request(
            server.http,
            "GET",
            &path,
            &[("Accept", "application/json")],
            b"",
        )
        .expect("GET trace")
    };
    let partial = tempo(1);
    assert_eq!(partial.status, 200);
    assert_eq!(partial.header("tracedb-partial"), Some("true"));
    let tempo_reason = partial.header("tracedb-partial-reason").unwrap_or_default();
    assert!(tempo_reason.contains(&name), "{tempo_reason}");
    assert_eq!(
        tempo(2).status,
        500,
        "unreadable is not \"not found\": {}",
        String::from_utf8_lossy(&tempo(2).body)
    );
    assert_eq!(tempo(20).header("tracedb-partial"), None);

    // Jaeger's API has no field for it: the spans that could be read, and
    // DATA_LOSS for a trace none of whose spans could be.
    let mut jaeger = TraceReaderClient::new(server.channel().await);
    let jaeger_spans = |messages: Vec<TracesData>| spans_of(&messages).len();
    let one = jaeger_get(&mut jaeger, 1).await.expect("partial trace");
    assert_eq!(jaeger_spans(one), 4);
    let unreadable = jaeger_get(&mut jaeger, 2).await.expect_err("unreadable");
    assert_eq!(unreadable.code(), tonic::Code::DataLoss, "{unreadable}");
    // Each partial answer is counted, on every API.
    for api in ["grpc", "tempo", "jaeger"] {
        let sample = format!("tracedb_partial_answers_total{{api=\"{api}\"}}");
        assert_eq!(metric(&server, &sample), 1.0, "{sample}");
    }

    // Through a query tier in front of the node: the same marker on its
    // gRPC and Tempo answers, the reason naming the node and the file.
    let tier = Server::start_tier(&[&[&server]], &[]);
    let through = get(&tier, 1)
        .await
        .expect("a partial trace through the tier");
    let tier_reason = through
        .metadata()
        .get("tracedb-partial-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        tier_reason.contains(&server.addr.to_string()) && tier_reason.contains(&name),
        "{tier_reason}"
    );
    let mut stream = through.into_inner();
    let mut messages = Vec::new();
    while let Some(m) = stream.message().await.expect("stream") {
        messages.push(m);
    }
    assert_eq!(spans_of(&messages).len(), 4);
    let tier_tempo = http_request(
        tier.http,
        "GET",
        &format!("/api/v2/traces/{:032x}", 1),
        &[("Accept", "application/json")],
        b"",
    )
    .expect("GET through the tier");
    assert_eq!(tier_tempo.status, 200);
    assert_eq!(tier_tempo.header("tracedb-partial"), Some("true"));
    let whole = get(&tier, 20).await.expect("trace 20 through the tier");
    assert!(whole.metadata().get("tracedb-partial").is_none());
    assert!(
        server.log_text().contains("quarantined"),
        "{}",
        server.log_text()
    );
    server.kill9();

    assert!(
        dir.path().join("quarantine").join(&name).exists(),
        "kept, not deleted"
    );
    let after = check(dir.path());
    let out = String::from_utf8_lossy(&after.stdout);
    assert_eq!(
        after.status.code(),
        Some(0),
        "quarantine is a note, not a problem: {out}"
    );
}
