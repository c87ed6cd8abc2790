//! The query tier's reads over replica groups of real `tracedb` nodes
//! (`tracedb_query::fanout::NodeReads`): a trace split over two nodes of a
//! group comes back whole and is listed once; a group that answers in full
//! answers at once, whatever another group's hung node does; a node killed leaves every
//! trace whole from the other group, not marked partial; a node stopped
//! (SIGSTOP: it holds its connections and never answers) makes each answer
//! partial, naming it, or UNAVAILABLE, within the node timeout, and never
//! NOT_FOUND for a stored trace; a search reads candidates past the nodes'
//! page size and stops after the most it may read, saying so.

use std::time::{Duration, Instant};

use tracedb_lsm::{TimeRange, TraceId};
use tracedb_query::{
    fanout::NodeReads,
    read::{Answer, Reads},
    search::Search,
    Error,
};

use crate::harness::{request, rich_span, Server};

const SPLIT: u128 = 0xa1;
const ONE_NODE: u128 = 0xa2;
const ABSENT: u128 = 0xa3;

fn id(t: u128) -> TraceId {
    TraceId(t.to_be_bytes())
}

fn reads(groups: &[&[&Server]], timeout: Duration) -> NodeReads {
    let groups = groups
        .iter()
        .map(|nodes| nodes.iter().map(|s| s.addr.to_string()).collect())
        .collect();
    NodeReads::new(groups, timeout).expect("node clients")
}

async fn export(server: &Server, service: &str, spans: Vec<tracedb_proto::trace::v1::Span>) {
    let mut request = request(service, &[], 0);
    request.resource_spans[0].scope_spans[0].spans = spans;
    server.ingest().await.export(request).await.expect("export");
}

/// `{ }`: the newest 20 traces.
fn search_all() -> Search {
    Search {
        query: tracedb_query::search::compile("{ }").expect("compiles"),
        text: "{ }".into(),
        start_unix_nano: 0,
        end_unix_nano: 0,
        limit: 20,
        spans_per_spanset: 1,
        candidates_only: false,
        span_window: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_answers_for_every_node_through_kills_and_hangs() {
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let a1 = Server::start(dirs[0].path());
    let a2 = Server::start(dirs[1].path());
    let b1 = Server::start(dirs[2].path());

    // Group a holds SPLIT over two nodes (a ring change moved it), group b a
    // whole copy; ONE_NODE lies on a1 and b1. SPLIT's root is "front",
    // calling "back".
    let split = |n: u64| rich_span(SPLIT, n, n.checked_sub(1));
    export(&a1, "front", vec![split(0), split(1)]).await;
    export(&a2, "back", vec![split(2), split(3)]).await;
    export(&b1, "front", vec![split(0), split(1)]).await;
    export(&b1, "back", vec![split(2), split(3)]).await;
    let one = |n: u64| rich_span(ONE_NODE, n, n.checked_sub(1));
    export(&a1, "front", vec![one(0), one(1)]).await;
    export(&b1, "front", vec![one(0), one(1)]).await;

    let tier = reads(&[&[&a1, &a2], &[&b1]], Duration::from_secs(1));
    let whole = tier.trace(id(SPLIT), TimeRange::ALL).await.expect("SPLIT");
    assert_eq!(whole.spans().len(), 4, "both parts, each span once");
    assert!(!whole.is_partial(), "{:?}", whole.partial());
    assert!(matches!(
        tier.trace(id(ABSENT), TimeRange::ALL).await,
        Err(Error::NotFound(_))
    ));

    let found = tier.find(search_all()).await.expect("search");
    assert!(!found.is_partial());
    let rows: Vec<(TraceId, u64)> = found
        .value
        .iter()
        .map(|h| (h.trace_id, h.span_count))
        .collect();
    assert_eq!(rows.len(), 2, "one row per trace: {rows:?}");
    assert!(
        rows.contains(&(id(SPLIT), 4)),
        "parts combined, copies not added: {rows:?}"
    );
    // TraceQL whose conditions hold on one span: the node holding a
    // matching span finds the trace, and a split trace's matched spans are
    // the union of its parts'.
    let traceql = |q: &str| Search {
        query: tracedb_query::search::compile(q).expect("valid TraceQL"),
        text: q.to_owned(),
        start_unix_nano: 0,
        end_unix_nano: 0,
        limit: 20,
        spans_per_spanset: 10,
        candidates_only: false,
        span_window: false,
    };
    let found = tier
        .find(traceql(
            r#"{ resource.service.name = "back" || name = "op-0" }"#,
        ))
        .await
        .expect("TraceQL search");
    assert!(!found.is_partial(), "{:?}", found.partial);
    let split = found
        .value
        .iter()
        .find(|m| m.trace_id == id(SPLIT))
        .expect("SPLIT matches");
    assert_eq!(found.value.len(), 2, "{:?}", found.value);
    assert_eq!(split.spansets.len(), 1);
    assert_eq!(split.spansets[0].matched, 3, "op-0 and both back spans");
    assert_eq!(split.spansets[0].spans.len(), 3);
    // What needs the whole trace in one place is evaluated on the whole
    // trace: on group a, SPLIT's root is on a1 and its "back" spans on a2.
    let a_only = reads(&[&[&a1, &a2]], Duration::from_secs(1));
    for tier in [&tier, &a_only] {
        for (q, want) in [
            (
                r#"{ resource.service.name = "front" } >> { resource.service.name = "back" }"#,
                vec![(SPLIT, 2)],
            ),
            (
                r#"{ rootServiceName = "front" && resource.service.name = "back" }"#,
                vec![(SPLIT, 2)],
            ),
            ("{ } | count() > 3", vec![(SPLIT, 4)]),
            ("{ } >> { }", vec![(SPLIT, 3), (ONE_NODE, 1)]),
        ] {
            let found = tier.find(traceql(q)).await.expect(q);
            assert!(!found.is_partial(), "{q}: {:?}", found.partial);
            let mut got: Vec<(TraceId, u64)> = found
                .value
                .iter()
                .map(|m| (m.trace_id, m.spansets.iter().map(|s| s.matched).sum()))
                .collect();
            got.sort();
            let mut want: Vec<(TraceId, u64)> = want.into_iter().map(|(t, n)| (id(t), n)).collect();
            want.sort();
            assert_eq!(got, want, "{q}");
        }
    }
    let services = tier.services(TimeRange::ALL).await.expect("services");
    assert_eq!(
        services,
        Answer::whole(vec!["back".to_string(), "front".to_string()])
    );
    let calls = tier
        .dependencies(TimeRange::ALL)
        .await
        .expect("dependencies");
    assert_eq!(
        calls.value.get(&("front".to_string(), "back".to_string())),
        Some(&1),
        "counted in one copy: {calls:?}"
    );

    // Group b's node hung while group a answers in full: whole at once, not
    // after the node timeout (20 s here).
    let patient = reads(&[&[&a1, &a2], &[&b1]], Duration::from_secs(20));
    b1.pause();
    let started = Instant::now();
    let whole = patient
        .trace(id(SPLIT), TimeRange::ALL)
        .await
        .expect("from group a");
    assert_eq!(whole.spans().len(), 4);
    assert!(!whole.is_partial(), "{:?}", whole.partial());
    let found = patient.find(search_all()).await.expect("search");
    assert!(!found.is_partial(), "{:?}", found.partial);
    assert_eq!(found.value.len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited for the hung node: {:?}",
        started.elapsed()
    );
    b1.resume();

    // A node of group a killed: group b answers in full, nothing is partial.
    let _a1_port = a1.kill9_keeping_port();
    let whole = tier
        .trace(id(ONE_NODE), TimeRange::ALL)
        .await
        .expect("ONE_NODE");
    assert_eq!(whole.spans().len(), 2);
    assert!(!whole.is_partial(), "{:?}", whole.partial());
    assert!(!tier.find(search_all()).await.expect("search").is_partial());

    // And group b's node hung: what a2 holds comes back marked partial,
    // naming both nodes; what only a1 and b1 hold is UNAVAILABLE, not
    // NOT_FOUND; every answer within the timeout.
    b1.pause();
    let started = Instant::now();
    let part = tier
        .trace(id(SPLIT), TimeRange::ALL)
        .await
        .expect("a2's part");
    assert_eq!(part.spans().len(), 2);
    let reasons = part.partial().join("; ");
    assert!(reasons.contains(&b1.addr.to_string()), "{reasons}");
    assert!(reasons.contains("no answer within"), "{reasons}");
    match tier.trace(id(ONE_NODE), TimeRange::ALL).await {
        Err(Error::Unavailable(why)) => assert!(why.contains(&b1.addr.to_string()), "{why}"),
        other => panic!("ONE_NODE with its nodes down: {other:?}"),
    }
    let listed = tier.find(search_all()).await.expect("search");
    assert!(listed.is_partial());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "three calls bounded by the 1 s node timeout took {:?}",
        started.elapsed()
    );
    let b1_node = tier
        .nodes()
        .into_iter()
        .find(|n| n.addr == b1.addr.to_string())
        .expect("b1");
    assert!(
        b1_node
            .stats()
            .timeouts
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 3
    );

    // Resumed: whole again.
    b1.resume();
    let whole = tier.trace(id(SPLIT), TimeRange::ALL).await.expect("SPLIT");
    assert_eq!(whole.spans().len(), 4);
    assert!(!whole.is_partial(), "{:?}", whole.partial());
}

/// `tracedb query` as a user runs it: two groups of one node each (copies),
/// every read API through the tier's own listeners, exports refused naming
/// the Collector, per-node metrics, and a hung node marked on gRPC and Tempo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracedb_query_serves_every_read_api_for_its_nodes() {
    use prost::Message as _;
    use tracedb_proto::jaeger::storage::v2::{
        trace_reader_client::TraceReaderClient, GetServicesRequest,
    };

    use crate::harness::{get_trace, health, http_request, metric, spans_of};

    let dirs: Vec<_> = (0..2)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let a = Server::start(dirs[0].path());
    let b = Server::start(dirs[1].path());
    for node in [&a, &b] {
        node.ingest()
            .await
            .export(request("front", &[0xb1], 3))
            .await
            .expect("export");
    }
    let tier = Server::start_tier(&[&[&a], &[&b]], &["--node-timeout-ms", "500"]);
    let until = Instant::now() + Duration::from_secs(20);
    while health(&tier).await != 1 {
        assert!(Instant::now() < until, "the tier never said SERVING");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        tier.http_call("GET", "/ready", &[], b"")
            .expect("ready")
            .status,
        200
    );

    // GetTrace, Jaeger and Tempo through the tier: each span once.
    let mut query = tier.query().await;
    let spans = spans_of(&get_trace(&mut query, 0xb1).await.expect("GetTrace"));
    assert_eq!(spans.len(), 3);
    assert_eq!(
        get_trace(&mut query, 0xdead)
            .await
            .expect_err("absent")
            .code(),
        tonic::Code::NotFound
    );
    let mut jaeger = TraceReaderClient::new(tier.channel().await);
    let services = jaeger
        .get_services(GetServicesRequest {})
        .await
        .expect("GetServices")
        .into_inner()
        .services;
    assert_eq!(services, ["front"]);
    let tempo = |path: &str| {
        http_request(
            tier.http,
            "GET",
            path,
            &[("Accept", "application/protobuf")],
            b"",
        )
        .expect("Tempo")
    };
    let trace = tempo(&format!("/api/v2/traces/{:032x}", 0xb1));
    assert_eq!(trace.status, 200);
    let decoded =
        crate::tempo::TraceByIdResponse::decode(trace.body.as_slice()).expect("TraceByIDResponse");
    assert_eq!(spans_of(&[decoded.trace.expect("trace")]).len(), 3);
    assert_eq!(trace.header("tracedb-partial"), None);

    // Exports are refused, naming the Collector.
    let refused = tier
        .ingest()
        .await
        .export(request("front", &[0xb2], 1))
        .await
        .expect_err("the tier stores nothing");
    assert_eq!(refused.code(), tonic::Code::Unimplemented);
    assert!(
        refused.message().contains("Collector"),
        "{}",
        refused.message()
    );
    let posted = tier
        .http_call(
            "POST",
            "/v1/traces",
            &[("Content-Type", "application/json")],
            b"{}",
        )
        .expect("POST");
    assert_eq!(posted.status, 404);
    assert!(String::from_utf8_lossy(&posted.body).contains("Collector"));
    // b's calls are counted as each ends, which may be after the answer
    // (a's group answered in full first): wait for them.
    let calls = format!(
        "tracedb_node_calls_total{{node=\"{}\",group=\"1\"}}",
        b.addr
    );
    let until = Instant::now() + Duration::from_secs(10);
    while metric(&tier, &calls) < 3.0 {
        assert!(Instant::now() < until, "{calls}: {}", metric(&tier, &calls));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A node hung: the other group's copy is whole, so nothing is marked;
    // hang that one too and un-hang the first: answers come from it alone,
    // whole again. With both hung, UNAVAILABLE within the timeout.
    a.pause();
    let spans = spans_of(&get_trace(&mut query, 0xb1).await.expect("from b"));
    assert_eq!(spans.len(), 3);
    b.pause();
    let started = Instant::now();
    let status = get_trace(&mut query, 0xb1)
        .await
        .expect_err("no node answers");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(tempo(&format!("/api/v2/traces/{:032x}", 0xb1)).status, 503);
    a.resume();
    b.resume();
    let spans = spans_of(&get_trace(&mut query, 0xb1).await.expect("whole again"));
    assert_eq!(spans.len(), 3);
    let timeouts = format!(
        "tracedb_node_timeouts_total{{node=\"{}\",group=\"0\"}}",
        a.addr
    );
    assert!(metric(&tier, &timeouts) >= 1.0, "{timeouts}");
}

/// The system resolver of the tier's process reads names from a hosts file
/// of the test's (nss_wrapper, the resolver-testing library of the Samba
/// project, preloaded), so one name can resolve to three loopback
/// addresses and change while the tier runs.
fn nss_wrapper() -> String {
    let path = std::env::var("TRACEDB_TEST_NSS_WRAPPER")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so".into());
    assert!(
        std::path::Path::new(&path).exists(),
        "no nss_wrapper at {path}: apt-get install libnss-wrapper (scripts/test finds it) or set \
         TRACEDB_TEST_NSS_WRAPPER"
    );
    path
}

/// Points `name` at `addrs` in the hosts file, atomically.
fn resolve_to(hosts: &std::path::Path, name: &str, addrs: &[std::net::IpAddr]) {
    let mut text = String::from("127.0.0.9 unrelated.tracedb.test\n");
    for addr in addrs {
        text.push_str(&format!("{addr} {name}\n"));
    }
    let next = hosts.with_extension("next");
    std::fs::write(&next, text).expect("write hosts");
    std::fs::rename(&next, hosts).expect("replace hosts");
}

/// GetTrace through the tier: the span count and the partial reason, or
/// the status.
async fn read_through(
    client: &mut tracedb_proto::query::v1::query_service_client::QueryServiceClient<
        tonic::transport::Channel,
    >,
    trace: u128,
) -> Result<(usize, Option<String>), tonic::Status> {
    let response = client
        .get_trace(tracedb_proto::query::v1::GetTraceRequest {
            trace_id: trace.to_be_bytes().to_vec().into(),
            ..Default::default()
        })
        .await?;
    let partial = response
        .metadata()
        .get("tracedb-partial-reason")
        .map(|v| v.to_str().unwrap_or("not text").to_owned());
    let mut stream = response.into_inner();
    let mut messages = Vec::new();
    while let Some(m) = stream.message().await? {
        messages.push(m);
    }
    Ok((crate::harness::spans_of(&messages).len(), partial))
}

/// Polls `check` every 50 ms until it holds; fails after `within`.
async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < until, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `--nodes dns:///HOST:PORT`, as for a Kubernetes headless Service: the
/// tier asks every address the name resolves to and follows the name as it
/// changes. Not resolvable: UNAVAILABLE naming it. A node that leaves the
/// name: answers partial naming the name, its trace UNAVAILABLE, never
/// NOT_FOUND, until the forget window passes. A node that comes back is
/// asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracedb_query_follows_a_dns_name() {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    const NAME: &str = "nodes.tracedb.test";
    let nss = nss_wrapper();
    let port = std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let ips: Vec<IpAddr> = (2..=4)
        .map(|o| IpAddr::V4(Ipv4Addr::new(127, 0, 0, o)))
        .collect();
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let nodes: Vec<Server> = ips
        .iter()
        .zip(&dirs)
        .map(|(ip, dir)| Server::start_at(dir.path(), SocketAddr::new(*ip, port)))
        .collect();
    // Trace 0xd0 + i lies on node i only.
    for (i, node) in nodes.iter().enumerate() {
        node.ingest()
            .await
            .export(request("front", &[0xd0 + i as u128], 2))
            .await
            .expect("export");
    }

    let etc = tempfile::tempdir().expect("tempdir");
    let hosts = etc.path().join("hosts");
    resolve_to(&hosts, NAME, &[]);
    let hosts_path = hosts.to_str().expect("UTF-8 path");
    let tier = Server::start_query(
        &[format!("dns:///{NAME}:{port}")],
        &[
            "--node-dns-refresh-ms",
            "100",
            "--node-dns-forget-ms",
            "4000",
            "--node-timeout-ms",
            "1000",
        ],
        &[("LD_PRELOAD", &nss), ("NSS_WRAPPER_HOSTS", hosts_path)],
    );
    let mut query = tier.query().await;

    // Not resolvable yet: UNAVAILABLE, naming the name.
    let status = read_through(&mut query, 0xd0)
        .await
        .expect_err("no node known");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
    assert!(
        status.message().contains(&format!("dns:///{NAME}:{port}")),
        "{status}"
    );
    assert_eq!(crate::harness::health(&tier).await, 2, "NOT_SERVING");

    // Three addresses: every trace whole, unmarked; SERVING.
    resolve_to(&hosts, NAME, &ips);
    eventually("the third node's trace", Duration::from_secs(10), || {
        let mut q = query.clone();
        async move { read_through(&mut q, 0xd2).await.is_ok() }
    })
    .await;
    for i in 0..3 {
        let (spans, partial) = read_through(&mut query, 0xd0 + i).await.expect("whole");
        assert_eq!((spans, partial), (2, None), "trace {i}");
    }
    let tier_ref = &tier;
    eventually("SERVING", Duration::from_secs(10), move || async move {
        crate::harness::health(tier_ref).await == 1
    })
    .await;

    // The third leaves the name: what it held may be missing, so answers
    // are marked and its trace is UNAVAILABLE, never NOT_FOUND.
    resolve_to(&hosts, NAME, &ips[..2]);
    eventually("a partial mark", Duration::from_secs(3), || {
        let mut q = query.clone();
        async move { matches!(read_through(&mut q, 0xd0).await, Ok((2, Some(_)))) }
    })
    .await;
    let (_, why) = read_through(&mut query, 0xd0).await.expect("partial");
    let why = why.expect("a reason");
    assert!(why.contains("resolves to 2 nodes, 3 within"), "{why}");
    let status = read_through(&mut query, 0xd2)
        .await
        .expect_err("its node left");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");

    // The forget window passes: two nodes are the whole group now.
    eventually("whole again", Duration::from_secs(10), || {
        let mut q = query.clone();
        async move { matches!(read_through(&mut q, 0xd0).await, Ok((2, None))) }
    })
    .await;
    let status = read_through(&mut query, 0xd2)
        .await
        .expect_err("its node left for good");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status}");

    // It comes back: asked again.
    resolve_to(&hosts, NAME, &ips);
    eventually("the third node back", Duration::from_secs(5), || {
        let mut q = query.clone();
        async move { matches!(read_through(&mut q, 0xd2).await, Ok((2, None))) }
    })
    .await;
}

/// The tier reads at most `MAX_INSPECTED` candidate traces whole, as a node
/// does: a search that reads that many without reaching its limit stops and
/// says so, and one whose window holds fewer reads them all, however many
/// pages of candidates the nodes answer in (at most `MAX_LIMIT` rows each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_through_the_tier_stops_after_its_most_candidates_and_says_so() {
    use tracedb_query::search::{stopped_inspecting, MAX_INSPECTED, MAX_LIMIT};

    let dir = tempfile::tempdir().expect("tempdir");
    let node = Server::start(dir.path());
    // Each trace has `n = 0` on one span and the name `op-1` on the other:
    // every one is a candidate of the queries below, and only `matching`, the
    // 4,000th newest, has both on one span. Each trace starts 1 µs after
    // the one before.
    let traces = MAX_INSPECTED as u128 + 500;
    let matching = traces - 4_000;
    let start_of = |t: u128| rich_span(t, 0, None).start_time_unix_nano + t as u64 * 1_000;
    let mut ingest = node.ingest().await;
    for from in (1..=traces).step_by(2_000) {
        let spans = (from..(from + 2_000).min(traces + 1))
            .flat_map(|t| {
                (0..2u64).map(move |i| {
                    let mut span = rich_span(t, i, i.checked_sub(1));
                    span.start_time_unix_nano += t as u64 * 1_000;
                    span.end_time_unix_nano += t as u64 * 1_000;
                    if t == matching && i == 1 {
                        span.attributes = rich_span(t, 0, None).attributes;
                    }
                    span
                })
            })
            .collect();
        let mut request = request("cap", &[], 0);
        request.resource_spans[0].scope_spans[0].spans = spans;
        ingest.export(request).await.expect("export");
    }
    let tier = reads(&[&[&node]], Duration::from_secs(30));
    let search = |q: &str, start_unix_nano| Search {
        query: tracedb_query::search::compile(q).expect("compiles"),
        text: q.into(),
        start_unix_nano,
        end_unix_nano: 0,
        limit: 20,
        spans_per_spanset: 1,
        candidates_only: false,
        span_window: false,
    };
    let found = |answer: &Answer<Vec<tracedb_query::search::Match>>| -> Vec<TraceId> {
        answer.value.iter().map(|m| m.trace_id).collect()
    };
    // Per span: the node searches, stops, and its mark comes through.
    let per_span = r#"{ span.n = 0 && name = "op-1" }"#;
    let all = tier.find(search(per_span, 0)).await.expect("search");
    assert_eq!(found(&all), [id(matching)]);
    let mark = stopped_inspecting(MAX_INSPECTED);
    assert_eq!(all.partial, vec![format!("node {}: {mark}", node.addr)]);
    // A trace-level condition: the tier reads the candidates whole itself,
    // in pages from the node.
    let whole = r#"{ span.n = 0 && name = "op-1" && traceDuration > 0ns }"#;
    let all = tier.find(search(whole, 0)).await.expect("search");
    assert_eq!(found(&all), [id(matching)]);
    assert_eq!(all.partial, vec![mark]);
    // The newest 5,000: fewer than the most, read through several pages.
    let newest = start_of(traces - 5_000);
    for q in [per_span, whole] {
        let some = tier.find(search(q, newest)).await.expect("search");
        assert_eq!(found(&some), [id(matching)], "{q}");
        assert!(some.partial.is_empty(), "{q}: {:?}", some.partial);
    }

    // Every trace matches: asked for more than a search answers, through a
    // node's search or the tier's own reads, the answer is full and marked.
    let over = tracedb_query::search::over_limit(1500, MAX_LIMIT).expect("a mark");
    for (q, mark) in [
        ("{ span.n = 0 }", format!("node {}: {over}", node.addr)),
        ("{ span.n = 0 && traceDuration > 0ns }", over.clone()),
    ] {
        let mut most = search(q, newest);
        most.limit = MAX_LIMIT;
        let whole = tier.find(most.clone()).await.expect("search");
        assert_eq!(whole.value.len(), MAX_LIMIT, "{q}");
        assert!(whole.partial.is_empty(), "{q}: {:?}", whole.partial);
        most.limit = 1500;
        let cut = tier.find(most).await.expect("search");
        assert_eq!(found(&cut), found(&whole), "{q}");
        assert_eq!(cut.partial, [mark], "{q}");
    }
}
