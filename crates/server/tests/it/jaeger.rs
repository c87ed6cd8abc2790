//! Jaeger v2 remote storage (`jaeger.storage.v2`) through a client generated
//! from tracedb's .proto files, against spans exported over OTLP/gRPC:
//! chunked large traces, unknown IDs, time hints, search filters, services,
//! operations, dependencies, health; and jaeger-idl v0.14.0's additions
//! (trace summaries, capabilities, hints bounding the files read, the
//! structured filter, pagination's refusals), on one node and through the
//! query tier, with v0.6.0's message shapes still answered (in `current`).

mod current;
mod query_api;

use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use tonic::{transport::Channel, Code};
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::InstrumentationScope,
    jaeger::storage::v2::{
        any_value, dependency_reader_client::DependencyReaderClient,
        trace_reader_client::TraceReaderClient, AnyValue, FindTraceIDsRequest, FindTracesRequest,
        GetDependenciesRequest, GetOperationsRequest, GetServicesRequest, GetTraceParams,
        GetTracesRequest, KeyValue, TraceQueryParameters,
    },
    trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span, TracesData},
};

use crate::harness::{resource, string_kv, Server};

const A: u128 = 0xa1a1_0000_0000_0000_0000_0000_0000_0001;
const BIG: u128 = 0xb16b_0000_0000_0000_0000_0000_0000_0002;
const MS: u64 = 1_000_000;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
}

fn span(
    trace: u128,
    id: u64,
    parent: Option<u64>,
    name: &str,
    kind: SpanKind,
    start: u64,
    len: u64,
) -> Span {
    Span {
        trace_id: trace.to_be_bytes().to_vec().into(),
        span_id: id.to_be_bytes().to_vec().into(),
        parent_span_id: parent
            .map(|p| p.to_be_bytes().to_vec())
            .unwrap_or_default()
            .into(),
        name: name.into(),
        kind: kind as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: start + len,
        attributes: vec![string_kv("http.route", "/checkout")],
        ..Default::default()
    }
}

fn export(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource(service)),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope::default()),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn ts(nanos: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (nanos / 1_000_000_000) as i64,
        nanos: (nanos % 1_000_000_000) as i32,
    }
}

fn trace_of(m: &TracesData) -> Vec<u128> {
    let mut ids: Vec<u128> = m
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .map(|s| u128::from_be_bytes(s.trace_id[..].try_into().expect("16 bytes")))
        .collect();
    ids.dedup();
    ids
}

fn span_count(m: &TracesData) -> usize {
    m.resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum()
}

async fn collect(
    stream: Result<tonic::Response<tonic::Streaming<TracesData>>, tonic::Status>,
) -> Result<Vec<TracesData>, tonic::Status> {
    let mut stream = stream?.into_inner();
    let mut out = Vec::new();
    while let Some(m) = stream.message().await? {
        out.push(m);
    }
    Ok(out)
}

async fn find_ids(client: &mut TraceReaderClient<Channel>, q: TraceQueryParameters) -> Vec<u128> {
    let mut ids: Vec<u128> = client
        .find_trace_i_ds(FindTraceIDsRequest { query: Some(q) })
        .await
        .expect("FindTraceIDs")
        .into_inner()
        .trace_ids
        .iter()
        .map(|t| u128::from_be_bytes(t.trace_id[..].try_into().expect("16 bytes")))
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn jaeger_remote_storage_reads_what_otlp_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let t0 = now() - 60_000 * MS;
    let mut ingest = server.ingest().await;
    // Trace A: frontend GET /checkout (40 ms) calls payments charge (10 ms).
    ingest
        .export(export(
            "frontend",
            vec![span(
                A,
                1,
                None,
                "GET /checkout",
                SpanKind::Server,
                t0,
                40 * MS,
            )],
        ))
        .await
        .expect("export");
    ingest
        .export(export(
            "payments",
            vec![span(
                A,
                2,
                Some(1),
                "charge",
                SpanKind::Server,
                t0 + MS,
                10 * MS,
            )],
        ))
        .await
        .expect("export");
    // Trace BIG: 20,000 spans of ~300 bytes, over 4 MiB, in four requests.
    for part in 0..4u64 {
        let spans = (part * 5_000..(part + 1) * 5_000)
            .map(|i| {
                let mut s = span(
                    BIG,
                    i + 1,
                    (i > 0).then_some(1),
                    "work",
                    SpanKind::Internal,
                    t0 + 5_000 * MS + i,
                    1_000,
                );
                s.trace_state = "x".repeat(300);
                s
            })
            .collect();
        ingest
            .export(export("bulk", spans))
            .await
            .expect("export big");
    }

    let mut client =
        TraceReaderClient::new(server.channel().await).max_decoding_message_size(8 << 20);

    // GetTraces: A, an unknown ID (skipped), BIG in several consecutive chunks.
    let ids = [A, 0xdead, BIG];
    let request = GetTracesRequest {
        query: ids
            .iter()
            .map(|t| GetTraceParams {
                trace_id: t.to_be_bytes().to_vec().into(),
                ..Default::default()
            })
            .collect(),
    };
    let messages = collect(client.get_traces(request).await)
        .await
        .expect("GetTraces");
    let order: Vec<u128> = messages
        .iter()
        .map(|m| {
            let t = trace_of(m);
            assert_eq!(t.len(), 1, "one trace per message");
            assert!(m.encoded_len() < 4 << 20);
            t[0]
        })
        .collect();
    let first_big = order.iter().position(|&t| t == BIG).expect("BIG returned");
    assert!(
        order[..first_big].iter().all(|&t| t == A) && order[first_big..].iter().all(|&t| t == BIG),
        "{order:?}"
    );
    assert!(
        order.len() - first_big >= 2,
        "BIG split over {} chunks",
        order.len() - first_big
    );
    let big_spans: usize = messages[first_big..].iter().map(span_count).sum();
    assert_eq!(big_spans, 20_000);
    assert_eq!(
        messages[..first_big].iter().map(span_count).sum::<usize>(),
        2
    );

    // Time hints: a window around the trace returns it; a reversed one is refused.
    let hinted = GetTracesRequest {
        query: vec![GetTraceParams {
            trace_id: A.to_be_bytes().to_vec().into(),
            start_time: Some(ts(t0 - 1_000 * MS)),
            end_time: Some(ts(t0 + 1_000 * MS)),
        }],
    };
    let got = collect(client.get_traces(hinted).await)
        .await
        .expect("hinted");
    assert_eq!(got.iter().map(span_count).sum::<usize>(), 2);
    let reversed = GetTracesRequest {
        query: vec![GetTraceParams {
            trace_id: A.to_be_bytes().to_vec().into(),
            start_time: Some(ts(t0 + 1_000 * MS)),
            end_time: Some(ts(t0)),
        }],
    };
    let err = collect(client.get_traces(reversed).await)
        .await
        .expect_err("reversed range");
    assert_eq!(err.code(), Code::InvalidArgument);
    let bad_id = GetTracesRequest {
        query: vec![GetTraceParams {
            trace_id: vec![1, 2, 3].into(),
            ..Default::default()
        }],
    };
    let err = collect(client.get_traces(bad_id).await)
        .await
        .expect_err("3-byte ID");
    assert_eq!(err.code(), Code::InvalidArgument);
    // Only unknown IDs: an empty stream.
    let unknown = GetTracesRequest {
        query: vec![GetTraceParams {
            trace_id: 0xbeefu128.to_be_bytes().to_vec().into(),
            ..Default::default()
        }],
    };
    assert!(collect(client.get_traces(unknown).await)
        .await
        .expect("unknown")
        .is_empty());

    // The index answers from buffers, then (after a restart) from files and sidecars.
    check_index(&server, t0, "buffers").await;
    // Open connections would hold the graceful shutdown until its timeout.
    drop((client, ingest));
    // Off the runtime thread, so the runtime can close the dropped connections.
    let stopped = tokio::task::spawn_blocking(move || server.terminate());
    assert!(stopped.await.expect("join").success());
    let server = Server::start(dir.path());
    check_index(&server, t0, "files").await;
}

/// Services, operations, search filters, FindTraces and dependencies.
async fn check_index(server: &Server, t0: u64, round: &str) {
    let mut client = TraceReaderClient::new(server.channel().await);
    {
        let services = client
            .get_services(GetServicesRequest {})
            .await
            .expect("GetServices")
            .into_inner()
            .services;
        assert_eq!(services, ["bulk", "frontend", "payments"], "round {round}");
        let ops = client
            .get_operations(GetOperationsRequest {
                service: "frontend".into(),
                span_kind: String::new(),
            })
            .await
            .expect("GetOperations")
            .into_inner()
            .operations;
        assert_eq!(ops.len(), 1);
        assert_eq!(
            (ops[0].name.as_str(), ops[0].span_kind.as_str()),
            ("GET /checkout", "server")
        );
        let client_ops = client
            .get_operations(GetOperationsRequest {
                service: "frontend".into(),
                span_kind: "client".into(),
            })
            .await
            .expect("GetOperations client")
            .into_inner()
            .operations;
        assert!(client_ops.is_empty());

        // Search filters.
        let window = |q: TraceQueryParameters| TraceQueryParameters {
            start_time_min: Some(ts(t0 - 10_000 * MS)),
            start_time_max: Some(ts(t0 + 10_000 * MS)),
            ..q
        };
        let q = |service: &str| {
            window(TraceQueryParameters {
                service_name: service.into(),
                ..Default::default()
            })
        };
        assert_eq!(find_ids(&mut client, q("frontend")).await, [A]);
        assert_eq!(find_ids(&mut client, q("bulk")).await, [BIG]);
        assert!(find_ids(&mut client, q("nobody")).await.is_empty());
        let op = TraceQueryParameters {
            operation_name: "charge".into(),
            ..q("payments")
        };
        assert_eq!(find_ids(&mut client, op).await, [A]);
        let wrong_op = TraceQueryParameters {
            operation_name: "charge".into(),
            ..q("frontend")
        };
        assert!(find_ids(&mut client, wrong_op).await.is_empty());
        let attr = |v: &str| KeyValue {
            key: "http.route".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
        };
        let tagged = TraceQueryParameters {
            attributes: vec![attr("/checkout")],
            ..q("payments")
        };
        assert_eq!(find_ids(&mut client, tagged).await, [A]);
        let mistagged = TraceQueryParameters {
            attributes: vec![attr("/cart")],
            ..q("payments")
        };
        assert!(find_ids(&mut client, mistagged).await.is_empty());
        let dur = |min_ms: i64, max_ms: i64| TraceQueryParameters {
            duration_min: Some(prost_types::Duration {
                seconds: 0,
                nanos: (min_ms * 1_000_000) as i32,
            }),
            duration_max: Some(prost_types::Duration {
                seconds: 0,
                nanos: (max_ms * 1_000_000) as i32,
            }),
            ..q("frontend")
        };
        assert_eq!(find_ids(&mut client, dur(30, 50)).await, [A]);
        assert!(find_ids(&mut client, dur(50, 900)).await.is_empty());
        let later = TraceQueryParameters {
            service_name: "frontend".into(),
            start_time_min: Some(ts(t0 + MS)),
            ..Default::default()
        };
        assert!(find_ids(&mut client, later).await.is_empty());
        let depth = TraceQueryParameters {
            search_depth: 1,
            ..window(Default::default())
        };
        assert_eq!(
            find_ids(&mut client, depth).await,
            [BIG],
            "newest first, one trace"
        );

        // FindTraces streams whole traces, all services.
        let found = collect(
            client
                .find_traces(FindTracesRequest {
                    query: Some(q("payments")),
                })
                .await,
        )
        .await
        .expect("FindTraces");
        assert_eq!(found.iter().map(span_count).sum::<usize>(), 2);
        assert!(found.iter().all(|m| trace_of(m) == [A]));

        // Dependencies.
        let mut deps = DependencyReaderClient::new(server.channel().await);
        let got = deps
            .get_dependencies(GetDependenciesRequest {
                start_time: Some(ts(t0 - 60_000 * MS)),
                end_time: Some(ts(now())),
            })
            .await
            .expect("GetDependencies")
            .into_inner()
            .dependencies;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (
                got[0].parent.as_str(),
                got[0].child.as_str(),
                got[0].call_count
            ),
            ("frontend", "payments", 1)
        );
        let none = deps
            .get_dependencies(GetDependenciesRequest {
                start_time: Some(ts(now())),
                end_time: Some(ts(now() + 1_000 * MS)),
            })
            .await
            .expect("GetDependencies empty window")
            .into_inner()
            .dependencies;
        assert!(none.is_empty(), "{none:?}");
    }
}

#[tokio::test]
async fn health_reports_the_jaeger_services() {
    use tonic_health::pb::{
        health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "jaeger.storage.v2.TraceReader",
        "jaeger.storage.v2.DependencyReader",
        "jaeger.storage.v2.Capabilities",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service}");
    }
}

/// Jaeger's tag search matches a tag wherever the span carries it (its own
/// tags, its process's, its logs: OTLP's span, resource and event
/// attributes, and the scope's), and its time bounds bound the start of the
/// span that matches, so a trace that began before them is found by a span
/// inside them (Jaeger's "spans over multiple indices").
#[tokio::test]
async fn jaeger_tags_are_found_in_logs_and_a_trace_begun_earlier_by_its_span() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let t0 = now() - 600_000 * MS;
    const EARLY: u128 = 0xea;
    // The root starts 5 minutes before the window; its child, inside it,
    // carries `error.kind=timeout` in a log (an event) and `cache=cold` in
    // its scope.
    let root = span(
        EARLY,
        1,
        None,
        "GET /report",
        SpanKind::Server,
        t0,
        400_000 * MS,
    );
    let mut child = span(
        EARLY,
        2,
        Some(1),
        "query",
        SpanKind::Client,
        t0 + 300_000 * MS,
        10 * MS,
    );
    child.events = vec![tracedb_proto::trace::v1::span::Event {
        time_unix_nano: t0 + 300_005 * MS,
        name: "log".into(),
        attributes: vec![string_kv("error.kind", "timeout")],
        ..Default::default()
    }];
    let mut request = export("reports", vec![root, child]);
    request.resource_spans[0].scope_spans[0].scope = Some(InstrumentationScope {
        name: "db".into(),
        attributes: vec![string_kv("cache", "cold")],
        ..Default::default()
    });
    server.ingest().await.export(request).await.expect("export");
    let mut client = TraceReaderClient::new(server.channel().await);
    let tag = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
    };
    let within = |attributes: Vec<KeyValue>, operation: &str| TraceQueryParameters {
        service_name: "reports".into(),
        operation_name: operation.into(),
        attributes,
        start_time_min: Some(ts(t0 + 240_000 * MS)),
        start_time_max: Some(ts(t0 + 360_000 * MS)),
        ..Default::default()
    };
    for (what, q) in [
        (
            "a tag in a log",
            within(vec![tag("error.kind", "timeout")], ""),
        ),
        (
            "a tag of the scope",
            within(vec![tag("cache", "cold")], "query"),
        ),
        (
            "tags in two places",
            within(
                vec![tag("error.kind", "timeout"), tag("cache", "cold")],
                "query",
            ),
        ),
        ("the span in the window", within(Vec::new(), "query")),
    ] {
        assert_eq!(find_ids(&mut client, q).await, [EARLY], "{what}");
    }
    // The root, the only span starting before the window, matches no span
    // inside it; nor does a tag no span has.
    assert!(find_ids(&mut client, within(Vec::new(), "GET /report"))
        .await
        .is_empty());
    assert!(
        find_ids(&mut client, within(vec![tag("error.kind", "oom")], ""))
            .await
            .is_empty()
    );
}
