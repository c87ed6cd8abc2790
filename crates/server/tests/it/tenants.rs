//! Tenancy (`--tenancy header`): two tenants export over OTLP/gRPC and
//! OTLP/HTTP (protobuf and JSON) and read over every API (GetTrace, search,
//! services, operations, span names, tag names and values, dependencies,
//! Jaeger's, the Tempo API): each sees exactly its own, `a|b` sees both,
//! and a request without a tenant or with a bad one is refused. The stores
//! are kept apart on disk and survive a restart; a data directory with
//! tenants is refused without tenancy. The query tier (`tracedb query
//! --tenancy header`) answers the same, naming each request's tenants to
//! its nodes.

use std::{
    collections::BTreeSet,
    time::{SystemTime, UNIX_EPOCH},
};

use prost::Message;
use serde_json::Value;
use tonic::{metadata::MetadataValue, Code, Request};
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::InstrumentationScope,
    jaeger::storage::v2::{
        dependency_reader_client::DependencyReaderClient, trace_reader_client::TraceReaderClient,
        FindTraceIDsRequest, GetDependenciesRequest, GetServicesRequest, TraceQueryParameters,
    },
    query::v1::{GetTagValuesRequest, GetTraceRequest, SearchTracesRequest, TimeWindow},
    trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span, TracesData},
};

use crate::harness::{post_traces, resource, string_kv, HttpResponse, Server};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// Team A's traces; [`SHARED`] has spans in both tenants.
const A1: u128 = 0xaaaa_0000_0000_0000_0000_0000_0000_0001;
const A2: u128 = 0xaaaa_0000_0000_0000_0000_0000_0000_0002;
const B1: u128 = 0xbbbb_0000_0000_0000_0000_0000_0000_0001;
const B2: u128 = 0xbbbb_0000_0000_0000_0000_0000_0000_0002;
const SHARED: u128 = 0x5555_0000_0000_0000_0000_0000_0000_0005;
/// Stored in no tenant.
const NOWHERE: u128 = 0x0000_0000_0000_0000_0000_0000_0000_0777;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
}

/// A span of `trace`; `parent` 0 for a root.
fn span(trace: u128, id: u64, parent: u64, name: &str, route: &str, start: u64) -> Span {
    Span {
        trace_id: trace.to_be_bytes().to_vec().into(),
        span_id: id.to_be_bytes().to_vec().into(),
        parent_span_id: if parent == 0 {
            Vec::new().into()
        } else {
            parent.to_be_bytes().to_vec().into()
        },
        name: name.into(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 5 * MS,
        // An attribute name of the tenant's own: "a.only" on team-a's.
        attributes: vec![
            string_kv("http.route", route),
            string_kv(&format!("{}.only", &route[1..2]), "x"),
        ],
        ..Default::default()
    }
}

/// A trace of `front` calling `back` (one span each), for the dependencies.
fn trace(
    t: u128,
    id0: u64,
    front: &str,
    back: &str,
    route: &str,
    start: u64,
) -> ExportTraceServiceRequest {
    let group = |service: &str, spans: Vec<Span>| ResourceSpans {
        resource: Some(resource(service)),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope::default()),
            spans,
            schema_url: String::new(),
        }],
        schema_url: String::new(),
    };
    ExportTraceServiceRequest {
        resource_spans: vec![
            group(
                front,
                vec![span(t, id0, 0, &format!("GET {route}"), route, start)],
            ),
            group(
                back,
                vec![span(t, id0 + 1, id0, "query", route, start + MS)],
            ),
        ],
    }
}

fn tenant<T>(message: T, tenant: &str) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        "x-scope-orgid",
        MetadataValue::try_from(tenant).expect("ASCII"),
    );
    request
}

fn get(server: &Server, path: &str, tenant: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = tenant.map(|t| ("X-Scope-OrgID", t)).into_iter().collect();
    server.http_call("GET", path, &headers, b"").expect("GET")
}

fn json(r: &HttpResponse) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).expect("JSON")
}

/// Trace IDs (hex) of a Tempo search for `{}` over the last hour.
fn searched(server: &Server, tenant: &str) -> BTreeSet<String> {
    let end = now() / SEC + 60;
    let path = format!(
        "/api/search?q=%7B%7D&limit=100&start={}&end={end}",
        end - 3_700
    );
    let answer = json(&get(server, &path, Some(tenant)));
    let traces = answer["traces"].as_array().expect("traces");
    let ids: BTreeSet<String> = traces
        .iter()
        .map(|t| t["traceID"].as_str().expect("ID").to_owned())
        .collect();
    assert_eq!(ids.len(), traces.len(), "each trace once: {answer}");
    ids
}

fn hex(t: u128) -> String {
    format!("{t:032x}")
}

fn ids(ts: &[u128]) -> BTreeSet<String> {
    ts.iter().map(|&t| hex(t)).collect()
}

/// The values of a tag through the Tempo API.
fn tag_values(server: &Server, tag: &str, tenant: &str) -> BTreeSet<String> {
    let path = format!("/api/v2/search/tag/{tag}/values");
    json(&get(server, &path, Some(tenant)))["tagValues"]
        .as_array()
        .expect("tagValues")
        .iter()
        .map(|v| v["value"].as_str().expect("value").to_owned())
        .collect()
}

/// Span IDs of a trace read with GetTrace as `who`, or its status.
async fn span_ids(server: &Server, t: u128, who: &str) -> Result<BTreeSet<u64>, tonic::Status> {
    let mut client = server.query().await;
    let request = GetTraceRequest {
        trace_id: t.to_be_bytes().to_vec().into(),
        ..Default::default()
    };
    let mut stream = client.get_trace(tenant(request, who)).await?.into_inner();
    let mut out = BTreeSet::new();
    while let Some(m) = stream.message().await? {
        let m: TracesData = m;
        for rs in m.resource_spans {
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.insert(u64::from_be_bytes(
                        s.span_id[..].try_into().expect("8 bytes"),
                    ));
                }
            }
        }
    }
    Ok(out)
}

async fn grpc_services(server: &Server, who: &str) -> BTreeSet<String> {
    let mut client = server.query().await;
    client
        .get_services(tenant(TimeWindow::default(), who))
        .await
        .expect("GetServices")
        .into_inner()
        .names
        .into_iter()
        .collect()
}

async fn jaeger_services(server: &Server, who: &str) -> BTreeSet<String> {
    let mut client = TraceReaderClient::new(server.channel().await);
    client
        .get_services(tenant(GetServicesRequest {}, who))
        .await
        .expect("Jaeger GetServices")
        .into_inner()
        .services
        .into_iter()
        .collect()
}

async fn dependencies(server: &Server, who: &str) -> BTreeSet<(String, String, u64)> {
    let mut client = DependencyReaderClient::new(server.channel().await);
    let request = GetDependenciesRequest {
        start_time: Some(prost_types::Timestamp {
            seconds: (now() / SEC - 3_600) as i64,
            nanos: 0,
        }),
        end_time: Some(prost_types::Timestamp {
            seconds: (now() / SEC + 60) as i64,
            nanos: 0,
        }),
    };
    client
        .get_dependencies(tenant(request, who))
        .await
        .expect("GetDependencies")
        .into_inner()
        .dependencies
        .into_iter()
        .map(|d| (d.parent, d.child, d.call_count))
        .collect()
}

async fn jaeger_find(server: &Server, service: &str, who: &str) -> BTreeSet<String> {
    let mut client = TraceReaderClient::new(server.channel().await);
    let query = TraceQueryParameters {
        service_name: service.into(),
        search_depth: 100,
        ..Default::default()
    };
    client
        .find_trace_i_ds(tenant(FindTraceIDsRequest { query: Some(query) }, who))
        .await
        .expect("FindTraceIDs")
        .into_inner()
        .trace_ids
        .into_iter()
        .map(|f| {
            hex(u128::from_be_bytes(
                f.trace_id[..].try_into().expect("16 bytes"),
            ))
        })
        .collect()
}

async fn grpc_search(
    server: &Server,
    who: &str,
    query: &str,
) -> Result<BTreeSet<String>, tonic::Status> {
    let mut client = server.query().await;
    let request = SearchTracesRequest {
        query: query.into(),
        limit: 100,
        ..Default::default()
    };
    Ok(client
        .search_traces(tenant(request, who))
        .await?
        .into_inner()
        .traces
        .into_iter()
        .map(|t| {
            hex(u128::from_be_bytes(
                t.trace_id[..].try_into().expect("16 bytes"),
            ))
        })
        .collect())
}

async fn grpc_tag_values(server: &Server, key: &str, who: &str) -> BTreeSet<String> {
    let mut client = server.query().await;
    let request = GetTagValuesRequest {
        key: key.into(),
        ..Default::default()
    };
    client
        .get_tag_values(tenant(request, who))
        .await
        .expect("GetTagValues")
        .into_inner()
        .names
        .into_iter()
        .collect()
}

/// Exports each tenant's traces: team-a over OTLP/gRPC, team-b over
/// OTLP/HTTP protobuf and JSON; the shared trace's spans go to both.
async fn load(server: &Server) {
    let t0 = now() - 60 * SEC;
    let mut ingest = server.ingest().await;
    for request in [
        trace(A1, 1, "a-front", "a-db", "/a/cart", t0),
        trace(A2, 1, "a-front", "a-db", "/a/pay", t0 + SEC),
        trace(SHARED, 1, "a-front", "a-db", "/a/shared", t0 + 2 * SEC),
    ] {
        let response = ingest
            .export(tenant(request, "team-a"))
            .await
            .expect("export team-a")
            .into_inner();
        assert!(response.partial_success.is_none(), "{response:?}");
    }
    let protobuf = [
        ("Content-Type", "application/x-protobuf"),
        ("X-Scope-OrgID", "team-b"),
    ];
    for request in [
        trace(B1, 1, "b-front", "b-cache", "/b/feed", t0 + 3 * SEC),
        trace(SHARED, 11, "b-front", "b-cache", "/b/shared", t0 + 2 * SEC),
    ] {
        let r = post_traces(server, &protobuf, &request.encode_to_vec());
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    // OTLP/JSON, with the header spelled in another case.
    let t = now() / SEC * SEC - 30 * SEC;
    let body = format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"b-front"}}}}]}},
        "scopeSpans":[{{"spans":[{{"traceId":"{}","spanId":"00000000000000b2","name":"GET /b/json",
        "startTimeUnixNano":"{t}","endTimeUnixNano":"{}","kind":2,
        "attributes":[{{"key":"http.route","value":{{"stringValue":"/b/json"}}}}]}}]}}]}}]}}"#,
        hex(B2),
        t + 5 * MS
    );
    let json_headers = [
        ("Content-Type", "application/json"),
        ("x-scope-orgid", "team-b"),
    ];
    let r = post_traces(server, &json_headers, body.as_bytes());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// What each tenant, and both together, see on every API.
async fn each_sees_its_own(server: &Server) {
    let (a, b, both) = ("team-a", "team-b", "team-a|team-b");

    // Search, through Tempo and gRPC (TraceQL, and the legacy fields).
    assert_eq!(searched(server, a), ids(&[A1, A2, SHARED]));
    assert_eq!(searched(server, b), ids(&[B1, B2, SHARED]));
    assert_eq!(searched(server, both), ids(&[A1, A2, B1, B2, SHARED]));
    // The shared trace's row counts the spans of both tenants.
    let end = now() / SEC + 60;
    let path = format!(
        "/api/search?q=%7B%7D&limit=100&start={}&end={end}",
        end - 3_700
    );
    let answer = json(&get(server, &path, Some(both)));
    let shared = answer["traces"]
        .as_array()
        .expect("traces")
        .iter()
        .find(|t| t["traceID"] == hex(SHARED))
        .expect("the shared trace");
    let stats = shared["serviceStats"].as_object().expect("serviceStats");
    let services: BTreeSet<&str> = stats.keys().map(String::as_str).collect();
    assert_eq!(
        services,
        ["a-db", "a-front", "b-cache", "b-front"].into(),
        "{shared}"
    );
    assert_eq!(searched(server, "team-c"), ids(&[]));
    assert_eq!(
        grpc_search(server, a, "{ resource.service.name = \"b-front\" }")
            .await
            .expect("search"),
        ids(&[])
    );
    assert_eq!(
        grpc_search(server, b, "{ resource.service.name = \"b-front\" }")
            .await
            .expect("search"),
        ids(&[B1, B2, SHARED])
    );
    assert_eq!(
        grpc_search(server, a, "{ span.http.route = \"/a/pay\" }")
            .await
            .expect("search"),
        ids(&[A2])
    );
    assert_eq!(
        grpc_search(server, b, "{ span.http.route = \"/a/pay\" }")
            .await
            .expect("search"),
        ids(&[])
    );

    // GetTrace: the other tenant's trace is as unknown as one stored nowhere.
    assert_eq!(
        span_ids(server, A1, a).await.expect("own trace"),
        [1, 2].into()
    );
    assert_eq!(
        span_ids(server, SHARED, a).await.expect("own part"),
        [1, 2].into()
    );
    assert_eq!(
        span_ids(server, SHARED, b).await.expect("own part"),
        [11, 12].into()
    );
    assert_eq!(
        span_ids(server, SHARED, both).await.expect("both parts"),
        [1, 2, 11, 12].into()
    );
    let theirs = span_ids(server, B1, a)
        .await
        .expect_err("another tenant's trace");
    let nowhere = span_ids(server, NOWHERE, a).await.expect_err("no trace");
    assert_eq!(theirs.code(), Code::NotFound);
    assert_eq!(nowhere.code(), Code::NotFound);
    assert_eq!(
        theirs.message().replace(&hex(B1), "ID"),
        nowhere.message().replace(&hex(NOWHERE), "ID")
    );
    // The same through the Tempo API.
    assert_eq!(
        get(server, &format!("/api/traces/{}", hex(B1)), Some(b)).status,
        200
    );
    let theirs = get(server, &format!("/api/traces/{}", hex(B1)), Some(a));
    let nowhere = get(server, &format!("/api/traces/{}", hex(NOWHERE)), Some(a));
    assert_eq!((theirs.status, nowhere.status), (404, 404));
    assert_eq!(
        String::from_utf8_lossy(&theirs.body).replace(&hex(B1), "ID"),
        String::from_utf8_lossy(&nowhere.body).replace(&hex(NOWHERE), "ID")
    );

    // Services, operations' names, attributes, dependencies.
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(grpc_services(server, a).await, set(&["a-db", "a-front"]));
    assert_eq!(grpc_services(server, b).await, set(&["b-cache", "b-front"]));
    assert_eq!(
        grpc_services(server, both).await,
        set(&["a-db", "a-front", "b-cache", "b-front"])
    );
    assert_eq!(jaeger_services(server, a).await, set(&["a-db", "a-front"]));
    assert_eq!(
        jaeger_services(server, b).await,
        set(&["b-cache", "b-front"])
    );
    assert_eq!(
        jaeger_find(server, "a-front", a).await,
        ids(&[A1, A2, SHARED])
    );
    assert_eq!(jaeger_find(server, "a-front", b).await, ids(&[]));
    assert_eq!(
        tag_values(server, "resource.service.name", a),
        set(&["a-db", "a-front"])
    );
    assert_eq!(
        tag_values(server, "span.http.route", b),
        set(&["/b/feed", "/b/json", "/b/shared"])
    );
    assert_eq!(
        grpc_tag_values(server, "http.route", a).await,
        set(&["/a/cart", "/a/pay", "/a/shared"])
    );
    assert_eq!(tag_values(server, "span.http.route", "team-c"), set(&[]));
    assert_eq!(
        dependencies(server, a).await,
        [("a-front".to_string(), "a-db".to_string(), 3)].into()
    );
    assert_eq!(
        dependencies(server, b).await,
        [("b-front".to_string(), "b-cache".to_string(), 2)].into()
    );
    // Attribute names: each tenant's own, and both together.
    let tag_names = |who: &str| -> BTreeSet<String> {
        let answer = json(&get(server, "/api/v2/search/tags", Some(who)));
        answer["scopes"]
            .as_array()
            .expect("scopes")
            .iter()
            .flat_map(|s| s["tags"].as_array().expect("tags").iter())
            .map(|t| t.as_str().expect("a name").to_owned())
            .collect()
    };
    let (names_a, names_b) = (tag_names(a), tag_names(b));
    assert!(
        names_a.contains("a.only") && !names_a.contains("b.only"),
        "{names_a:?}"
    );
    assert!(
        names_b.contains("b.only") && !names_b.contains("a.only"),
        "{names_b:?}"
    );
    let names_both = tag_names(both);
    assert!(names_both.contains("a.only") && names_both.contains("b.only"));
    let names = json(&get(server, "/api/v2/search/tag/name/values", Some(b)));
    let names: BTreeSet<&str> = names["tagValues"]
        .as_array()
        .expect("names")
        .iter()
        .map(|v| v["value"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        ["GET /b/feed", "GET /b/json", "GET /b/shared", "query"].into()
    );
}

#[tokio::test]
async fn two_tenants_each_see_only_their_own_on_every_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(dir.path(), &["--tenancy", "header"]);
    load(&server).await;
    each_sees_its_own(&server).await;

    // The command-line clients name their tenant with --tenant.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(crate::harness::TRACEDB)
            .args(args)
            .args(["--addr", &server.addr.to_string()])
            .output()
            .expect("run tracedb");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = cli(&["get", &hex(A1), "--tenant", "team-a"]);
    assert!(ok && text.contains("a-front: GET /a/cart"), "{text}");
    let (ok, text) = cli(&["get", &hex(A1), "--tenant", "team-b"]);
    assert!(!ok && text.contains("not found"), "{text}");
    let (ok, text) = cli(&["get", &hex(A1)]);
    assert!(!ok && text.contains("no tenant"), "{text}");
    let (ok, text) = cli(&[
        "search",
        "--tenant",
        "team-a|team-b",
        "--service",
        "b-front",
    ]);
    assert!(
        ok && text.contains(&hex(B1)) && !text.contains(&hex(A1)),
        "{text}"
    );
    let (ok, text) = cli(&["search", "--tenant", "team-a", "--service", "b-front"]);
    assert!(ok && !text.contains(&hex(B1)), "{text}");

    // The same through the query tier, which names each request's tenants
    // to its nodes.
    let tier = Server::start_tier(&[&[&server]], &["--tenancy", "header"]);
    each_sees_its_own(&tier).await;
    let e = tier.query().await.get_services(TimeWindow::default()).await;
    assert_eq!(e.expect_err("no tenant").code(), Code::Unauthenticated);
    assert_eq!(get(&tier, "/api/search?q=%7B%7D", None).status, 401);
    drop(tier);

    // Each tenant's spans are in a store of its own.
    for t in ["team-a", "team-b"] {
        assert!(
            dir.path().join("tenants").join(t).join("wal").is_dir(),
            "{t}"
        );
    }
    assert!(
        !dir.path().join("tenants").join("team-c").exists(),
        "a read makes no store"
    );

    // Unscoped: metrics and health answer without a tenant.
    assert_eq!(get(&server, "/metrics", None).status, 200);
    assert_eq!(crate::harness::health(&server).await, 1);

    // Flushed to files and read again after a restart.
    server.terminate();
    let server = Server::start_with(dir.path(), &["--tenancy", "header"]);
    each_sees_its_own(&server).await;
    let metrics = String::from_utf8(get(&server, "/metrics", None).body).expect("text");
    assert!(
        metrics.contains("tracedb_sorted_files{tenant=\"team-a\"} ")
            && metrics.contains("tracedb_sorted_files{tenant=\"team-b\"} "),
        "{metrics}"
    );
    // A tenant is deleted offline: refused while the server holds it.
    let tenant_cli = |args: &[&str]| {
        let out = std::process::Command::new(crate::harness::TRACEDB)
            .arg("tenant")
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .expect("run tracedb tenant");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = tenant_cli(&["delete", "team-b"]);
    assert!(!ok && text.contains("stop the server first"), "{text}");
    server.terminate();
    // `tracedb check` checks each tenant's store too.
    let out = std::process::Command::new(crate::harness::TRACEDB)
        .arg("check")
        .arg(dir.path())
        .output()
        .expect("run tracedb check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("tenant team-a:") && text.contains("tenant team-b:"),
        "{text}"
    );
    let (ok, text) = tenant_cli(&["list"]);
    assert!(
        ok && text.contains("team-a\t") && text.contains("team-b\t"),
        "{text}"
    );
    let (ok, text) = tenant_cli(&["delete", "team-b"]);
    assert!(
        ok && text.contains("deleted tenant team-b") && text.contains("gone from disk"),
        "{text}"
    );
    assert!(!dir.path().join("tenants/team-b").exists());
    let (ok, text) = tenant_cli(&["delete", "team-b"]);
    assert!(!ok && text.contains("no store for the tenant"), "{text}");
    let server = Server::start_with(dir.path(), &["--tenancy", "header"]);
    assert_eq!(searched(&server, "team-b"), ids(&[]));
    assert_eq!(searched(&server, "team-a"), ids(&[A1, A2, SHARED]));
    server.terminate();

    // Without tenancy the tenants' spans would be left out: refused.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tracedb"))
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .expect("run tracedb");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--tenancy header") && stderr.contains("1 tenant"),
        "{stderr}"
    );

    // Damage in a tenant's store fails `tracedb check`.
    let tables = dir.path().join("tenants/team-a/tables");
    let sst = std::fs::read_dir(&tables)
        .expect("team-a's tables")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "sst"))
        .expect("a sorted file of team-a");
    let mut bytes = std::fs::read(&sst).expect("read");
    bytes[40] ^= 0xff;
    std::fs::write(&sst, &bytes).expect("write");
    let out = std::process::Command::new(crate::harness::TRACEDB)
        .arg("check")
        .arg(dir.path())
        .output()
        .expect("run tracedb check");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("tenant team-a:") && text.contains("problem(s) found"),
        "{text}"
    );
}

#[tokio::test]
async fn a_request_without_a_valid_tenant_is_refused_on_every_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(dir.path(), &["--tenancy", "header"]);
    let request = trace(A1, 1, "a-front", "a-db", "/a/cart", now() - SEC);

    // gRPC: UNAUTHENTICATED without a tenant, INVALID_ARGUMENT for a bad one.
    let mut ingest = server.ingest().await;
    let e = ingest.export(request.clone()).await.expect_err("no tenant");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("x-scope-orgid"), "{e:?}");
    let e = ingest
        .export(tenant(request.clone(), "a/b"))
        .await
        .expect_err("bad tenant");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("'/'"), "{e:?}");
    let e = ingest
        .export(tenant(request.clone(), "a|b"))
        .await
        .expect_err("two tenants");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let mut query = server.query().await;
    let e = query
        .get_services(TimeWindow::default())
        .await
        .expect_err("no tenant");
    assert_eq!(e.code(), Code::Unauthenticated);
    let mut jaeger = TraceReaderClient::new(server.channel().await);
    let e = jaeger
        .get_services(GetServicesRequest {})
        .await
        .expect_err("no tenant");
    assert_eq!(e.code(), Code::Unauthenticated);
    let mut deps = DependencyReaderClient::new(server.channel().await);
    let e = deps
        .get_dependencies(GetDependenciesRequest::default())
        .await
        .expect_err("no tenant");
    assert_eq!(e.code(), Code::Unauthenticated);

    // HTTP: 401 and 400; OTLP/HTTP with a google.rpc.Status body.
    let r = post_traces(
        &server,
        &[("Content-Type", "application/x-protobuf")],
        &request.encode_to_vec(),
    );
    assert_eq!(r.status, 401);
    let status = tracedb_proto::google::rpc::Status::decode(&r.body[..]).expect("a Status body");
    assert_eq!(status.code, Code::Unauthenticated as i32);
    let r = post_traces(
        &server,
        &[
            ("Content-Type", "application/json"),
            ("X-Scope-OrgID", ".."),
        ],
        b"{}",
    );
    assert_eq!(r.status, 400);
    let body: Value = serde_json::from_slice(&r.body).expect("a JSON Status");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("\"..\""),
        "{body}"
    );
    assert_eq!(get(&server, "/api/search?q=%7B%7D", None).status, 401);
    assert_eq!(get(&server, "/api/search/tags", Some("a b")).status, 400);
    assert_eq!(
        get(&server, &format!("/api/traces/{}", hex(A1)), None).status,
        401
    );
    // Nothing was stored anywhere.
    assert!(!dir.path().join("tenants").exists());

    // With a default tenant, requests without one go there.
    server.terminate();
    let server = Server::start_with(
        dir.path(),
        &["--tenancy", "header", "--default-tenant", "team-a"],
    );
    let mut ingest = server.ingest().await;
    ingest.export(request).await.expect("to the default tenant");
    assert_eq!(
        span_ids(&server, A1, "team-a").await.expect("stored"),
        [1, 2].into()
    );
    assert_eq!(
        span_ids(&server, A1, "team-b")
            .await
            .expect_err("not team-b's")
            .code(),
        Code::NotFound
    );
}

mod limits;
