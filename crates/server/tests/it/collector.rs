//! A tracedb cluster as users deploy it, with real components: the Python
//! SDK exports to an OpenTelemetry Collector (built by `scripts/collector/build`)
//! whose two `load_balancing` exporters (`routing_key: traceID`) feed two
//! replica groups of tracedb nodes (3 + 2), and a third exporter a reference
//! node that gets everything; `tracedb query` answers for the five nodes.
//!
//! Checked: every trace is on exactly one node of each group and every node
//! has a share; every trace comes back field for field through the tier's
//! GetTrace, Jaeger GetTraces and the Tempo API; search through the tier
//! lists what the reference node lists, one row per trace. A node killed:
//! every trace whole from the other group, not marked partial. A node of the
//! other group stopped too: every answer within the node timeout, marked
//! partial (a trace some live node holds) or UNAVAILABLE (one only the dead
//! and the stopped node hold), never NOT_FOUND. Both back: whole again.
//!
//! And a ring change mid-stream (a node added to a group's resolver, the
//! Collector restarted): traces split over two nodes come back whole and are
//! listed once by search.
//!
//! Tenancy: the Collector's `headers_setter` sets each export's
//! `X-Scope-OrgID` (from the request's metadata, or a fixed tenant per
//! pipeline) and `load_balancing` routes to two nodes with `--tenancy
//! header`; every trace lands once, in its tenant's store.

use std::{
    collections::{BTreeSet, HashMap},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use prost::Message as _;
use tonic::transport::Channel;
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    jaeger::storage::v2::{
        trace_reader_client::TraceReaderClient, GetTraceParams, GetTracesRequest,
    },
    query::v1::{query_service_client::QueryServiceClient, GetTraceRequest, SearchTracesRequest},
};

use crate::{
    harness::{free_port, http_request, Server},
    python_sdk::{by_span_id, export_with_python, Expected},
};

const TRACES: usize = 300;

/// The Collector `scripts/test` built.
fn otelcol() -> PathBuf {
    if let Ok(p) = std::env::var("TRACEDB_TEST_OTELCOL") {
        return PathBuf::from(p);
    }
    let built =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci-cache/bin/otelcol-tracedb");
    assert!(
        built.exists(),
        "no OpenTelemetry Collector at {}: run scripts/test (it runs scripts/collector/build) or set TRACEDB_TEST_OTELCOL",
        built.display()
    );
    built
}

/// A Collector process, killed when dropped.
struct Collector(Child);

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_collector(
    dir: &std::path::Path,
    otlp: SocketAddr,
    groups: &[&[&Server]],
    reference: &Server,
) -> Collector {
    let list = |nodes: &[&Server]| {
        nodes
            .iter()
            .map(|n| format!("\"{}\"", n.addr))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut exporters = String::new();
    let mut names = Vec::new();
    for (i, nodes) in groups.iter().enumerate() {
        let name = format!("load_balancing/group{i}");
        exporters.push_str(&format!(
            "  {name}:\n    routing_key: traceID\n    protocol:\n      otlp:\n        tls: {{insecure: true}}\n    resolver:\n      static:\n        hostnames: [{}]\n",
            list(nodes)
        ));
        names.push(name);
    }
    exporters.push_str(&format!(
        "  otlp_grpc/reference:\n    endpoint: \"{}\"\n    tls: {{insecure: true}}\n",
        reference.addr
    ));
    names.push("otlp_grpc/reference".into());
    let config = format!(
        "receivers:\n  otlp:\n    protocols:\n      grpc: {{endpoint: \"{otlp}\"}}\nexporters:\n{exporters}service:\n  telemetry:\n    metrics: {{level: none}}\n  pipelines:\n    traces: {{receivers: [otlp], exporters: [{}]}}\n",
        names.join(", ")
    );
    let path = dir.join("collector.yaml");
    std::fs::write(&path, config).expect("write the Collector's configuration");
    let log = std::fs::File::create(dir.join("collector.log")).expect("log file");
    let child = Command::new(otelcol())
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the Collector");
    let collector = Collector(child);
    let until = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(otlp).is_err() {
        assert!(
            Instant::now() < until,
            "the Collector did not listen on {otlp}:\n{}",
            std::fs::read_to_string(dir.join("collector.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    collector
}

/// GetTrace: its spans by span ID, whether it was marked partial, or the code.
async fn read(
    client: &mut QueryServiceClient<Channel>,
    trace: &[u8],
) -> Result<(Expected, bool), tonic::Code> {
    let response = client
        .get_trace(GetTraceRequest {
            trace_id: trace.to_vec().into(),
            ..Default::default()
        })
        .await
        .map_err(|s| s.code())?;
    let partial = response.metadata().get("tracedb-partial").is_some();
    let mut stream = response.into_inner();
    let mut resource_spans = Vec::new();
    while let Some(m) = stream.message().await.map_err(|s| s.code())? {
        resource_spans.extend(m.resource_spans);
    }
    Ok((
        by_span_id(&[ExportTraceServiceRequest { resource_spans }]),
        partial,
    ))
}

/// The spans of one trace in `expected`.
fn of_trace(expected: &Expected, trace: &[u8]) -> Expected {
    expected
        .iter()
        .filter(|(_, v)| v.3.trace_id[..] == *trace)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_routes_two_replica_groups_and_the_tier_answers_for_all() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let dirs: Vec<_> = (0..6)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let nodes: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    let (a, b, reference) = (&nodes[0..3], &nodes[3..5], &nodes[5]);
    let group_a: Vec<&Server> = a.iter().collect();
    let group_b: Vec<&Server> = b.iter().collect();
    let otlp = free_port();
    let _collector = start_collector(scratch.path(), otlp, &[&group_a, &group_b], reference);
    let tier = Server::start_tier(&[&group_a, &group_b], &["--node-timeout-ms", "500"]);

    // The SDK exports through the Collector.
    let sent_file = scratch.path().join("sent.pb");
    let (sent, _) = export_with_python("grpc", &otlp.to_string(), &sent_file, TRACES, &[]);
    let expected = by_span_id(&[sent]);
    let traces: BTreeSet<Vec<u8>> = expected.values().map(|v| v.3.trace_id.to_vec()).collect();
    assert_eq!(traces.len(), TRACES);

    // The Collector forwards asynchronously: wait until the reference node
    // has every span.
    let mut ref_client = reference.query().await;
    let until = Instant::now() + Duration::from_secs(60);
    for trace in &traces {
        loop {
            match read(&mut ref_client, trace).await {
                Ok((spans, _)) if spans.len() == 3 => break,
                _ => {
                    assert!(
                        Instant::now() < until,
                        "the reference node never got every span"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    let mut clients = Vec::new();
    for node in a.iter().chain(b) {
        clients.push(node.query().await);
    }
    // Each group has an exporter of its own, with its own queue: the
    // reference node holding a trace does not mean both groups do yet.
    for trace in &traces {
        loop {
            let mut groups = [false, false];
            for (i, client) in clients.iter_mut().enumerate() {
                if matches!(read(client, trace).await, Ok((spans, _)) if spans.len() == 3) {
                    groups[usize::from(i >= 3)] = true;
                }
            }
            if groups == [true, true] {
                break;
            }
            assert!(
                Instant::now() < until,
                "trace {} never reached both groups",
                hex(trace)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // Every trace on exactly one node of each group, every node a share.
    let mut shares = vec![0usize; clients.len()];
    let mut held_by: HashMap<&Vec<u8>, Vec<usize>> = HashMap::new();
    for trace in &traces {
        let mut holders = Vec::new();
        for (i, client) in clients.iter_mut().enumerate() {
            match read(client, trace).await {
                Ok((spans, _)) => {
                    assert_eq!(spans.len(), 3, "a trace is never split by the Collector");
                    holders.push(i);
                    shares[i] += 1;
                }
                Err(code) => assert_eq!(code, tonic::Code::NotFound),
            }
        }
        assert_eq!(
            holders.iter().filter(|&&i| i < 3).count(),
            1,
            "group a: {holders:?}"
        );
        assert_eq!(
            holders.iter().filter(|&&i| i >= 3).count(),
            1,
            "group b: {holders:?}"
        );
        held_by.insert(trace, holders);
    }
    assert!(
        shares.iter().all(|&n| n > 0),
        "every node has a share: {shares:?}"
    );

    // Field for field through the tier: GetTrace, Jaeger and Tempo.
    let mut tier_query = tier.query().await;
    let mut jaeger = TraceReaderClient::new(tier.channel().await);
    for (n, trace) in traces.iter().enumerate() {
        let (spans, partial) = read(&mut tier_query, trace)
            .await
            .expect("through the tier");
        assert!(!partial);
        assert_eq!(
            spans,
            of_trace(&expected, trace),
            "GetTrace through the tier"
        );
        if n % 10 == 0 {
            let path = format!("/api/v2/traces/{}", hex(trace));
            let r = http_request(
                tier.http,
                "GET",
                &path,
                &[("Accept", "application/protobuf")],
                b"",
            )
            .expect("Tempo");
            assert_eq!(r.status, 200);
            let trace_data = crate::tempo::TraceByIdResponse::decode(r.body.as_slice())
                .expect("TraceByIDResponse")
                .trace
                .expect("trace");
            let got = by_span_id(&[ExportTraceServiceRequest {
                resource_spans: trace_data.resource_spans,
            }]);
            assert_eq!(got, of_trace(&expected, trace), "Tempo through the tier");
        }
    }
    let all: Vec<&Vec<u8>> = traces.iter().collect();
    for batch in all.chunks(50) {
        let mut stream = jaeger
            .get_traces(GetTracesRequest {
                query: batch
                    .iter()
                    .map(|t| GetTraceParams {
                        trace_id: t.to_vec().into(),
                        ..Default::default()
                    })
                    .collect(),
            })
            .await
            .expect("Jaeger GetTraces")
            .into_inner();
        let mut resource_spans = Vec::new();
        while let Some(m) = stream.message().await.expect("stream") {
            resource_spans.extend(m.resource_spans);
        }
        let got = by_span_id(&[ExportTraceServiceRequest { resource_spans }]);
        let want: Expected = batch.iter().flat_map(|t| of_trace(&expected, t)).collect();
        assert_eq!(got, want, "Jaeger through the tier");
    }

    // Search through the tier lists what the reference node lists.
    let search = SearchTracesRequest {
        service: "checkout".into(),
        limit: 1_000,
        ..Default::default()
    };
    let rows =
        |r: tracedb_proto::query::v1::SearchTracesResponse| -> Vec<(Vec<u8>, u64, u64, u64)> {
            r.traces
                .into_iter()
                .map(|t| {
                    (
                        t.trace_id.to_vec(),
                        t.start_time_unix_nano,
                        t.duration_nanos,
                        t.span_count,
                    )
                })
                .collect()
        };
    let by_tier = rows(
        tier_query
            .search_traces(search.clone())
            .await
            .expect("search")
            .into_inner(),
    );
    let by_reference = rows(
        ref_client
            .search_traces(search.clone())
            .await
            .expect("search")
            .into_inner(),
    );
    assert_eq!(by_tier.len(), TRACES, "one row per trace");
    assert_eq!(by_tier, by_reference);

    // A node of group a killed: group b answers in full; nothing partial.
    let mut nodes = nodes;
    let killed = nodes.remove(0);
    let killed_addr = killed.addr;
    let _killed_port = killed.kill9_keeping_port();
    for trace in &traces {
        let (spans, partial) = read(&mut tier_query, trace)
            .await
            .expect("whole from group b");
        assert_eq!(spans.len(), 3);
        assert!(!partial, "group b answered in full");
    }
    // And a node of group b stopped (SIGSTOP): no group answers in full.
    // Nodes 0..3 are group a, 3..5 group b; node 0 is killed, node 3 stopped.
    let stopped = &nodes[2];
    stopped.pause();
    let pick = |both_down: bool| -> Vec<&Vec<u8>> {
        traces
            .iter()
            .filter(|t| (held_by[t] == [0, 3]) == both_down)
            .take(5)
            .collect()
    };
    let (unreachable, reachable) = (pick(true), pick(false));
    assert!(
        !unreachable.is_empty(),
        "some trace lies on nodes 0 and 3: {shares:?}"
    );
    for (traces, reachable) in [(&reachable, true), (&unreachable, false)] {
        for trace in traces.iter() {
            let call = Instant::now();
            match read(&mut tier_query, trace).await {
                Ok((spans, partial)) if reachable => {
                    assert!(
                        partial,
                        "no group answered in full, so the answer is marked"
                    );
                    assert_eq!(spans, of_trace(&expected, trace));
                }
                Err(code) if !reachable => {
                    assert_eq!(
                        code,
                        tonic::Code::Unavailable,
                        "never NOT_FOUND for a stored trace"
                    );
                }
                other => panic!(
                    "trace {} held by {:?}: {other:?}",
                    hex(trace),
                    held_by[trace]
                ),
            }
            assert!(
                call.elapsed() < Duration::from_secs(2),
                "within the node timeout"
            );
        }
    }
    eprintln!(
        "with {killed_addr} killed and {} stopped: {} traces partial, {} unavailable",
        stopped.addr,
        reachable.len(),
        unreachable.len()
    );
    stopped.resume();
    for trace in unreachable.iter().chain(&reachable) {
        let (spans, partial) = read(&mut tier_query, trace).await.expect("whole again");
        assert_eq!(spans.len(), 3);
        assert!(!partial);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A ring change mid-stream: the first span of each trace goes through a
/// Collector whose group a has two nodes, the second after a third node is
/// added to its resolver and the Collector restarted. Traces whose ID moved
/// now lie on two nodes of group a: through the tier every one is whole and
/// search lists it once, with both spans counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_change_splits_traces_and_the_tier_joins_them() {
    use tracedb_proto::collector::trace::v1::trace_service_client::TraceServiceClient;

    use crate::harness::{request, rich_span};

    let scratch = tempfile::tempdir().expect("tempdir");
    let dirs: Vec<_> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let nodes: Vec<Server> = dirs.iter().map(|d| Server::start(d.path())).collect();
    let (a, b) = (&nodes[0..3], &nodes[3]);
    let traces: Vec<u128> = (0..200u128)
        .map(|i| (i + 1) * 0x9e37_79b9_7f4a_7c15)
        .collect();
    let send = |otlp: SocketAddr, span_no: u64| {
        let traces = traces.clone();
        async move {
            let mut client = TraceServiceClient::connect(format!("http://{otlp}"))
                .await
                .expect("connect to the Collector");
            let mut export = request("split", &[], 0);
            export.resource_spans[0].scope_spans[0].spans = traces
                .iter()
                .map(|&t| rich_span(t, span_no, span_no.checked_sub(1)))
                .collect();
            client.export(export).await.expect("export");
        }
    };
    // Group a alone behind the tier (group b only proves delivery).
    let group_a: Vec<&Server> = a.iter().collect();
    let tier = Server::start_tier(&[&group_a], &[]);
    let otlp = free_port();
    {
        let _collector = start_collector(scratch.path(), otlp, &[&[&a[0], &a[1]], &[b]], b);
        send(otlp, 0).await;
        // Dropping the Collector kills it: wait until its queues are delivered.
        wait_for_spans(&tier, &traces, 1).await;
        wait_for_spans(b, &traces, 1).await;
    }
    let _collector = start_collector(scratch.path(), otlp, &[&[&a[0], &a[1], &a[2]], &[b]], b);
    send(otlp, 1).await;
    wait_for_spans(&tier, &traces, 2).await;

    // Some traces now have a span on two nodes of group a.
    let mut split = 0;
    for &t in &traces {
        let mut holders = 0;
        for node in a {
            let mut q = node.query().await;
            if read(&mut q, &t.to_be_bytes()).await.is_ok() {
                holders += 1;
            }
        }
        split += usize::from(holders == 2);
    }
    assert!(split > 0, "the new node took some trace IDs");

    // Through the tier: each trace whole from its parts.
    let mut q = tier.query().await;
    for &t in &traces {
        let (spans, partial) = read(&mut q, &t.to_be_bytes())
            .await
            .expect("through the tier");
        assert_eq!(spans.len(), 2, "both spans of {t:x}");
        assert!(!partial);
    }
    let rows = q
        .search_traces(SearchTracesRequest {
            service: "split".into(),
            limit: 1_000,
            ..Default::default()
        })
        .await
        .expect("search")
        .into_inner()
        .traces;
    assert_eq!(
        rows.len(),
        traces.len(),
        "one row per trace ({split} split)"
    );
    assert!(rows.iter().all(|r| r.span_count == 2), "both parts counted");
    eprintln!(
        "ring change: {split} of {} traces split over two nodes",
        traces.len()
    );
}

/// Waits until `node` (a node or a tier) answers `spans` spans of every
/// trace: the Collector forwards asynchronously. Here b is both group b and
/// the reference exporter's node: it gets each span twice and keeps it once.
async fn wait_for_spans(node: &Server, traces: &[u128], spans: usize) {
    let mut q = node.query().await;
    let until = Instant::now() + Duration::from_secs(60);
    for t in traces {
        loop {
            match read(&mut q, &t.to_be_bytes()).await {
                Ok((got, _)) if got.len() >= spans => break,
                _ => {
                    assert!(Instant::now() < until, "spans never reached {}", node.addr);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// The tenant's trace IDs each node's search finds (gRPC, `{}`).
async fn tenant_traces(node: &Server, tenant: &str) -> BTreeSet<Vec<u8>> {
    let mut request = tonic::Request::new(SearchTracesRequest {
        query: "{}".into(),
        limit: 1000,
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("x-scope-orgid", tenant.parse().expect("an ASCII tenant"));
    node.query()
        .await
        .search_traces(request)
        .await
        .expect("search")
        .into_inner()
        .traces
        .into_iter()
        .map(|t| t.trace_id.to_vec())
        .collect()
}

/// Tenancy through a real Collector: its `headers_setter` extension sets
/// `X-Scope-OrgID` from each request's own metadata on one pipeline and to a
/// fixed tenant on another, and `load_balancing` routes both by trace ID to
/// two nodes with `--tenancy header`. Every trace is stored once, on one
/// node, in its tenant's store and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_sets_the_tenant_header_and_routes_each_tenant_to_two_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes: Vec<Server> = (0..2)
        .map(|i| {
            let data = dir.path().join(format!("node{i}"));
            Server::start_with(&data, &["--tenancy", "header"])
        })
        .collect();
    let hostnames = format!("\"{}\", \"{}\"", nodes[0].addr, nodes[1].addr);
    let (from_metadata, fixed) = (free_port(), free_port());
    let exporter = |auth: &str| {
        format!(
            "    routing_key: traceID\n    protocol:\n      otlp:\n        tls: {{insecure: true}}\n        auth: {{authenticator: {auth}}}\n    resolver:\n      static:\n        hostnames: [{hostnames}]\n"
        )
    };
    let config = format!(
        "extensions:
  headers_setter:
    headers:
      - {{action: upsert, key: X-Scope-OrgID, from_context: x-scope-orgid}}
  headers_setter/fixed:
    headers:
      - {{action: upsert, key: X-Scope-OrgID, value: team-fixed}}
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: \"{from_metadata}\", include_metadata: true}}
  otlp/fixed:
    protocols:
      grpc: {{endpoint: \"{fixed}\"}}
exporters:
  load_balancing:
{}  load_balancing/fixed:
{}service:
  extensions: [headers_setter, headers_setter/fixed]
  telemetry:
    metrics: {{level: none}}
  pipelines:
    traces: {{receivers: [otlp], exporters: [load_balancing]}}
    traces/fixed: {{receivers: [otlp/fixed], exporters: [load_balancing/fixed]}}
",
        exporter("headers_setter"),
        exporter("headers_setter/fixed")
    );
    let path = dir.path().join("collector.yaml");
    std::fs::write(&path, config).expect("write the Collector's configuration");
    let log = std::fs::File::create(dir.path().join("collector.log")).expect("log file");
    let _collector = Collector(
        Command::new(otelcol())
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the Collector"),
    );
    let collector_log =
        || std::fs::read_to_string(dir.path().join("collector.log")).unwrap_or_default();
    let until = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(from_metadata).is_err() || TcpStream::connect(fixed).is_err() {
        assert!(
            Instant::now() < until,
            "the Collector did not listen:\n{}",
            collector_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // 30 traces of each tenant, each its own request.
    let traces = |tag: u128| -> Vec<u128> { (1..=30).map(|i| tag << 64 | i).collect() };
    let mut expected: HashMap<&str, BTreeSet<Vec<u8>>> = HashMap::new();
    for (tenant, tag, port) in [
        ("team-a", 0xaa, from_metadata),
        ("team-b", 0xbb, from_metadata),
        ("team-fixed", 0xff, fixed),
    ] {
        let channel = Channel::from_shared(format!("http://{port}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect to the Collector");
        let mut client =
            tracedb_proto::collector::trace::v1::trace_service_client::TraceServiceClient::new(
                channel,
            );
        for t in traces(tag) {
            let mut request =
                tonic::Request::new(crate::harness::request(&format!("svc-{tenant}"), &[t], 2));
            if port == from_metadata {
                request
                    .metadata_mut()
                    .insert("x-scope-orgid", tenant.parse().expect("an ASCII tenant"));
            } else {
                // The fixed pipeline's tenant wins over what a client says.
                request
                    .metadata_mut()
                    .insert("x-scope-orgid", "team-a".parse().expect("ASCII"));
            }
            client
                .export(request)
                .await
                .expect("the Collector takes it");
            expected
                .entry(tenant)
                .or_default()
                .insert(t.to_be_bytes().to_vec());
        }
    }

    // The Collector exports in the background: wait until every trace is in.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let mut all_in = true;
        for (tenant, want) in &expected {
            let mut got = BTreeSet::new();
            for node in &nodes {
                got.extend(tenant_traces(node, tenant).await);
            }
            all_in &= &got == want;
        }
        if all_in {
            break;
        }
        assert!(
            Instant::now() < until,
            "not every trace arrived in its tenant's store:\n{}",
            collector_log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Each trace on one node only; both nodes have a share of each tenant;
    // no tenant sees another's.
    for (tenant, want) in &expected {
        let (on0, on1) = (
            tenant_traces(&nodes[0], tenant).await,
            tenant_traces(&nodes[1], tenant).await,
        );
        assert!(on0.is_disjoint(&on1), "{tenant}: a trace on both nodes");
        assert!(
            !on0.is_empty() && !on1.is_empty(),
            "{tenant}: one node got nothing"
        );
        assert_eq!(&(&on0 | &on1), want, "{tenant}");
    }
    for node in &nodes {
        assert!(tenant_traces(node, "team-c").await.is_empty());
    }
}
