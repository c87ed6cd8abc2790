//! Jaeger v2 remote storage (`jaeger.storage.v2`) through a client generated
//! from tracedb's .proto files, against spans exported over OTLP/gRPC:
//! chunked large traces, unknown IDs, time hints, search filters, services,
//! operations, dependencies, health; and jaeger-idl v0.14.0's additions
//! (trace summaries, capabilities, hints bounding the files read, the
//! structured filter, pagination's refusals), on one node and through the
//! query tier, with v0.6.0's message shapes still answered.

use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use tonic::{transport::Channel, Code};
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::InstrumentationScope,
    jaeger::{
        expression::v1::{
            expression::Term, AttributeReference, Call, Expression, FieldReference, List, Scalar,
        },
        storage::v2::{
            any_value, capabilities_client::CapabilitiesClient,
            dependency_reader_client::DependencyReaderClient,
            trace_reader_client::TraceReaderClient, AnyValue, FilterCapabilities,
            FindTraceIDsRequest, FindTraceIDsResponse, FindTraceSummariesRequest,
            FindTracesRequest, GetCapabilitiesRequest, GetCapabilitiesResponse,
            GetDependenciesRequest, GetOperationsRequest, GetServicesRequest, GetTraceParams,
            GetTracesRequest, KeyValue, Pagination, SearchCapabilities, ServiceSummary,
            TraceQueryParameters, TraceSummary,
        },
    },
    trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span, TracesData},
};

use crate::harness::{metric, resource, string_kv, Server};

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

// The storage API of jaeger-idl v0.14.0: FindTraceSummaries, Capabilities,
// FindTraceIDs' hints and GetTraces bounded by them, the structured filter,
// pagination's refusals, and v0.6.0's message shapes.

const S1: u128 = 0x51;
const S2: u128 = 0x52;

fn error_status() -> Option<tracedb_proto::trace::v1::Status> {
    Some(tracedb_proto::trace::v1::Status {
        message: "declined".into(),
        code: tracedb_proto::trace::v1::status::StatusCode::Error as i32,
    })
}

/// S1: frontend `GET /a` (50 ms) calls payments `charge` (an error); a
/// payments span `retry` names a parent the trace does not hold (an
/// orphan) and ends last, at +60 ms. S2, a second later: frontend `GET /b`
/// alone (5 ms), with the int attribute `http.status_code=500`.
async fn export_summary_traces(server: &Server, t0: u64) {
    let mut ingest = server.ingest().await;
    let mut charge = span(
        S1,
        2,
        Some(1),
        "charge",
        SpanKind::Server,
        t0 + 5 * MS,
        10 * MS,
    );
    charge.status = error_status();
    let retry = span(
        S1,
        3,
        Some(99),
        "retry",
        SpanKind::Internal,
        t0 + 20 * MS,
        40 * MS,
    );
    let mut get_b = span(
        S2,
        1,
        None,
        "GET /b",
        SpanKind::Server,
        t0 + 1_000 * MS,
        5 * MS,
    );
    get_b.attributes.push(tracedb_proto::common::v1::KeyValue {
        key: "http.status_code".into(),
        value: Some(tracedb_proto::common::v1::AnyValue {
            value: Some(tracedb_proto::common::v1::any_value::Value::IntValue(500)),
        }),
    });
    for request in [
        export(
            "frontend",
            vec![span(S1, 1, None, "GET /a", SpanKind::Server, t0, 50 * MS)],
        ),
        export("payments", vec![charge, retry]),
        export("frontend", vec![get_b]),
    ] {
        ingest.export(request).await.expect("export");
    }
}

fn service_summary(name: &str, spans: i32, errors: i32) -> ServiceSummary {
    ServiceSummary {
        name: name.into(),
        span_count: spans,
        error_span_count: errors,
    }
}

/// What FindTraceSummaries must answer for S1 and S2.
fn expected_summaries(t0: u64) -> (TraceSummary, TraceSummary) {
    let s1 = TraceSummary {
        trace_id: S1.to_be_bytes().to_vec().into(),
        root_service_name: "frontend".into(),
        root_operation_name: "GET /a".into(),
        min_start_time_unix_nano: t0,
        max_end_time_unix_nano: t0 + 60 * MS,
        span_count: 3,
        error_span_count: 1,
        orphan_span_count: 1,
        services: vec![
            service_summary("frontend", 1, 0),
            service_summary("payments", 2, 1),
        ],
    };
    let s2 = TraceSummary {
        trace_id: S2.to_be_bytes().to_vec().into(),
        root_service_name: "frontend".into(),
        root_operation_name: "GET /b".into(),
        min_start_time_unix_nano: t0 + 1_000 * MS,
        max_end_time_unix_nano: t0 + 1_005 * MS,
        span_count: 1,
        error_span_count: 0,
        orphan_span_count: 0,
        services: vec![service_summary("frontend", 1, 0)],
    };
    (s1, s2)
}

async fn summaries(
    client: &mut TraceReaderClient<Channel>,
    q: TraceQueryParameters,
) -> Result<Vec<TraceSummary>, tonic::Status> {
    let mut stream = client
        .find_trace_summaries(FindTraceSummariesRequest { query: Some(q) })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = stream.message().await? {
        assert!(!m.summaries.is_empty(), "no empty message");
        assert!(m.next_page_token.is_empty(), "no page token: not paginated");
        out.extend(m.summaries);
    }
    Ok(out)
}

fn around(t0: u64) -> TraceQueryParameters {
    TraceQueryParameters {
        start_time_min: Some(ts(t0 - 10_000 * MS)),
        start_time_max: Some(ts(t0 + 10_000 * MS)),
        ..Default::default()
    }
}

fn call(op: &str, args: Vec<Expression>) -> Expression {
    Expression {
        term: Some(Term::Call(Call {
            op: op.into(),
            args,
        })),
    }
}

fn attr_ref(level: &str, key: &str) -> Expression {
    Expression {
        term: Some(Term::Attr(AttributeReference {
            key: key.into(),
            level: level.into(),
        })),
    }
}

fn field_ref(name: &str) -> Expression {
    Expression {
        term: Some(Term::Field(FieldReference {
            name: name.into(),
            level: "span".into(),
        })),
    }
}

fn scalar(value: &str) -> Expression {
    Expression {
        term: Some(Term::Scalar(Scalar {
            value: value.into(),
            r#type: String::new(),
        })),
    }
}

fn filtered(t0: u64, filter: Expression) -> TraceQueryParameters {
    let Some(Term::Call(filter)) = filter.term else {
        panic!("a filter is a call");
    };
    TraceQueryParameters {
        filter: Some(filter),
        ..around(t0)
    }
}

#[tokio::test]
async fn jaeger_current_api_summaries_capabilities_hints_and_filters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let t0 = now() - 60_000 * MS;
    export_summary_traces(&server, t0).await;
    let (s1, s2) = expected_summaries(t0);
    let mut client = TraceReaderClient::new(server.channel().await);

    // Capabilities, exactly.
    let declared = CapabilitiesClient::new(server.channel().await)
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .expect("GetCapabilities")
        .into_inner();
    let expected = GetCapabilitiesResponse {
        search: Some(SearchCapabilities {
            without_service_name: true,
            same_span_conjunction: true,
            filter: Some(FilterCapabilities {
                levels: ["span", "resource", "scope", "event"]
                    .map(String::from)
                    .into(),
                operators: [
                    "and", "or", "eq", "ne", "gt", "gte", "lt", "lte", "regex", "exists", "in",
                ]
                .map(String::from)
                .into(),
            }),
            paginated: false,
            span_search: false,
            span_sorting: false,
        }),
    };
    assert_eq!(declared, expected);

    // Summaries: from memory now, from files after a restart.
    check_summaries(&mut client, t0, &s1, &s2).await;

    // FindTraceIDs' hints are each trace's start and end.
    let found = client
        .find_trace_i_ds(FindTraceIDsRequest {
            query: Some(TraceQueryParameters {
                service_name: "payments".into(),
                ..around(t0)
            }),
        })
        .await
        .expect("FindTraceIDs")
        .into_inner();
    assert!(found.next_page_token.is_empty());
    assert_eq!(found.trace_ids.len(), 1);
    let hint = found.trace_ids[0].clone();
    assert_eq!(hint.trace_id, S1.to_be_bytes().to_vec());
    assert_eq!(
        (hint.start, hint.end),
        (Some(ts(t0)), Some(ts(t0 + 60 * MS)))
    );

    // v0.6.0 sent FindTraceIDs a FindTracesRequest: the same bytes as v0.14's
    // FindTraceIDsRequest, answered alike.
    let old = FindTracesRequest {
        query: Some(TraceQueryParameters {
            service_name: "payments".into(),
            ..around(t0)
        }),
    };
    let new = FindTraceIDsRequest {
        query: old.query.clone(),
    };
    assert_eq!(old.encode_to_vec(), new.encode_to_vec());
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.expect("ready");
    let old_answer: FindTraceIDsResponse = grpc
        .unary(
            tonic::Request::new(old),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/jaeger.storage.v2.TraceReader/FindTraceIDs",
            ),
            tracedb_proto::codec::RawCodec::<FindTracesRequest, FindTraceIDsResponse>::default(),
        )
        .await
        .expect("FindTraceIDs as v0.6.0 sends it")
        .into_inner();
    assert_eq!(old_answer.trace_ids, found.trace_ids);

    check_filters(&mut client, t0, &s1, &s2).await;

    drop((client, grpc));
    let stopped = tokio::task::spawn_blocking(move || server.terminate());
    assert!(stopped.await.expect("join").success());
    let server = Server::start(dir.path());
    let mut client = TraceReaderClient::new(server.channel().await);
    check_summaries(&mut client, t0, &s1, &s2).await;

    // GetTraces with the hints FindTraceIDs gave reads the trace's files and
    // returns it whole; a hint an hour off opens no file.
    let files_read = || metric(&server, "tracedb_lookup_files_read_total");
    let get = |start: u64, end: u64| GetTracesRequest {
        query: vec![GetTraceParams {
            trace_id: S1.to_be_bytes().to_vec().into(),
            start_time: Some(ts(start)),
            end_time: Some(ts(end)),
        }],
    };
    let before = files_read();
    let got = collect(client.get_traces(get(t0, t0 + 60 * MS)).await)
        .await
        .expect("hinted GetTraces");
    assert_eq!(got.iter().map(span_count).sum::<usize>(), 3);
    let hinted = files_read() - before;
    assert!(hinted >= 1.0, "the trace's file read: {hinted}");
    let before = files_read();
    let hour = 3_600_000 * MS;
    let got = collect(client.get_traces(get(t0 + hour, t0 + 2 * hour)).await)
        .await
        .expect("GetTraces hinted elsewhere");
    assert!(got.is_empty());
    assert_eq!(
        files_read() - before,
        0.0,
        "no file outside the hint opened"
    );
}

async fn check_summaries(
    client: &mut TraceReaderClient<Channel>,
    t0: u64,
    s1: &TraceSummary,
    s2: &TraceSummary,
) {
    let payments = TraceQueryParameters {
        service_name: "payments".into(),
        ..around(t0)
    };
    assert_eq!(
        summaries(client, payments).await.expect("summaries"),
        std::slice::from_ref(s1)
    );
    // Without a service name: every trace, newest first.
    assert_eq!(
        summaries(client, around(t0)).await.expect("summaries"),
        [s2.clone(), s1.clone()]
    );
    let nobody = TraceQueryParameters {
        service_name: "nobody".into(),
        ..around(t0)
    };
    assert!(summaries(client, nobody)
        .await
        .expect("summaries")
        .is_empty());
    // A page of one.
    let page = TraceQueryParameters {
        pagination: Some(Pagination {
            page_size: 1,
            page_token: String::new(),
        }),
        ..around(t0)
    };
    assert_eq!(
        summaries(client, page).await.expect("a page"),
        std::slice::from_ref(s2)
    );
}

async fn check_filters(
    client: &mut TraceReaderClient<Channel>,
    t0: u64,
    s1: &TraceSummary,
    s2: &TraceSummary,
) {
    let ids = |s: &[TraceSummary]| s.iter().map(|s| s.trace_id.clone()).collect::<Vec<_>>();
    for (what, filter, expected) in [
        (
            "service and status on one span",
            call(
                "and",
                vec![
                    call(
                        "eq",
                        vec![attr_ref("resource", "service.name"), scalar("payments")],
                    ),
                    call("eq", vec![field_ref("status"), scalar("error")]),
                ],
            ),
            vec![s1],
        ),
        (
            "no span is both frontend's and an error",
            call(
                "and",
                vec![
                    call("eq", vec![attr_ref("", "service.name"), scalar("frontend")]),
                    call("eq", vec![field_ref("status"), scalar("error")]),
                ],
            ),
            vec![],
        ),
        (
            "a duration over 30 ms",
            call("gt", vec![field_ref("duration"), scalar("30ms")]),
            vec![s1],
        ),
        (
            "names in a list",
            call(
                "in",
                vec![
                    field_ref("name"),
                    Expression {
                        term: Some(Term::List(List {
                            values: vec!["GET /b".into(), "nothing".into()],
                            r#type: String::new(),
                        })),
                    },
                ],
            ),
            vec![s2],
        ),
        (
            "a pattern anywhere in an attribute",
            call(
                "regex",
                vec![attr_ref("span", "http.route"), scalar("heck")],
            ),
            vec![s2, s1],
        ),
        (
            "an attribute every span has, at no level",
            call("exists", vec![attr_ref("", "http.route")]),
            vec![s2, s1],
        ),
        (
            "a span named other than GET /b",
            call("ne", vec![field_ref("name"), scalar("GET /b")]),
            vec![s1],
        ),
        (
            "the int 500 by its text",
            call(
                "eq",
                vec![attr_ref("span", "http.status_code"), scalar("500")],
            ),
            vec![s2],
        ),
        (
            "the int 500 is not the string 500",
            call(
                "eq",
                vec![
                    attr_ref("span", "http.status_code"),
                    Expression {
                        term: Some(Term::Scalar(Scalar {
                            value: "500".into(),
                            r#type: "string".into(),
                        })),
                    },
                ],
            ),
            vec![],
        ),
        (
            "an attribute no span has",
            call("exists", vec![attr_ref("span", "db.system")]),
            vec![],
        ),
    ] {
        let got = summaries(client, filtered(t0, filter)).await.expect(what);
        let expected: Vec<TraceSummary> = expected.into_iter().cloned().collect();
        assert_eq!(ids(&got), ids(&expected), "{what}");
    }

    // Refused, saying why: never ignored.
    let refused = |q: TraceQueryParameters, says: &'static str| (q, says);
    let not_error = call(
        "not",
        vec![call("eq", vec![field_ref("status"), scalar("error")])],
    );
    for (q, says) in [
        refused(filtered(t0, not_error), "operator not"),
        refused(
            filtered(t0, call("eq", vec![attr_ref("link", "k"), scalar("v")])),
            "link level",
        ),
        refused(
            TraceQueryParameters {
                service_name: "payments".into(),
                ..filtered(t0, call("exists", vec![attr_ref("span", "k")]))
            },
            "filter is asked with service_name",
        ),
        refused(
            TraceQueryParameters {
                pagination: Some(Pagination {
                    page_size: 10,
                    page_token: "next".into(),
                }),
                ..around(t0)
            },
            "does not paginate",
        ),
        refused(
            TraceQueryParameters {
                search_depth: 5,
                pagination: Some(Pagination {
                    page_size: 10,
                    page_token: String::new(),
                }),
                ..around(t0)
            },
            "asked together",
        ),
    ] {
        let err = summaries(client, q.clone()).await.expect_err(says);
        assert_eq!(err.code(), Code::InvalidArgument, "{says}: {err:?}");
        assert!(err.message().contains(says), "{says}: {}", err.message());
        let err = client
            .find_trace_i_ds(FindTraceIDsRequest { query: Some(q) })
            .await
            .expect_err(says);
        assert_eq!(err.code(), Code::InvalidArgument, "{says}: {err:?}");
    }
    let paged_traces = FindTracesRequest {
        query: Some(TraceQueryParameters {
            pagination: Some(Pagination {
                page_size: 1,
                page_token: String::new(),
            }),
            ..around(t0)
        }),
    };
    let err = collect(client.find_traces(paged_traces).await)
        .await
        .expect_err("FindTraces is not paginated");
    assert_eq!(err.code(), Code::InvalidArgument);
}

/// Through the query tier, a trace split over two nodes of a group is
/// summarised whole, and its hint is not one part's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jaeger_current_api_through_the_tier_summarises_a_split_trace_whole() {
    let dirs: Vec<_> = (0..2)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let n1 = Server::start(dirs[0].path());
    let n2 = Server::start(dirs[1].path());
    let t0 = now() - 60_000 * MS;
    // S1's frontend root on n1; its payments spans (the error, the orphan)
    // on n2; S2 on n1.
    let mut charge = span(
        S1,
        2,
        Some(1),
        "charge",
        SpanKind::Server,
        t0 + 5 * MS,
        10 * MS,
    );
    charge.status = error_status();
    let retry = span(
        S1,
        3,
        Some(99),
        "retry",
        SpanKind::Internal,
        t0 + 20 * MS,
        40 * MS,
    );
    n1.ingest()
        .await
        .export(export(
            "frontend",
            vec![
                span(S1, 1, None, "GET /a", SpanKind::Server, t0, 50 * MS),
                span(
                    S2,
                    1,
                    None,
                    "GET /b",
                    SpanKind::Server,
                    t0 + 1_000 * MS,
                    5 * MS,
                ),
            ],
        ))
        .await
        .expect("export n1");
    n2.ingest()
        .await
        .export(export("payments", vec![charge, retry]))
        .await
        .expect("export n2");
    let tier = Server::start_tier(&[&[&n1, &n2]], &[]);
    let (s1, s2) = expected_summaries(t0);
    let mut client = TraceReaderClient::new(tier.channel().await);

    // Only n1's part matches frontend's root; the summary counts n2's too.
    let frontend = TraceQueryParameters {
        service_name: "frontend".into(),
        ..around(t0)
    };
    assert_eq!(
        summaries(&mut client, frontend.clone())
            .await
            .expect("summaries"),
        [s2.clone(), s1.clone()]
    );
    let payments = TraceQueryParameters {
        service_name: "payments".into(),
        ..around(t0)
    };
    assert_eq!(
        summaries(&mut client, payments).await.expect("summaries"),
        std::slice::from_ref(&s1)
    );
    // A filter whose spans lie on both nodes.
    let either = call(
        "or",
        vec![
            call("eq", vec![field_ref("name"), scalar("GET /a")]),
            call("eq", vec![field_ref("status"), scalar("error")]),
        ],
    );
    assert_eq!(
        summaries(&mut client, filtered(t0, either))
            .await
            .expect("summaries"),
        std::slice::from_ref(&s1)
    );

    // FindTraceIDs then GetTraces with what it gave: S1 whole.
    let found = client
        .find_trace_i_ds(FindTraceIDsRequest {
            query: Some(frontend),
        })
        .await
        .expect("FindTraceIDs")
        .into_inner()
        .trace_ids;
    assert_eq!(found.len(), 2);
    let s1_found = found
        .iter()
        .find(|f| f.trace_id == S1.to_be_bytes().to_vec())
        .expect("S1 found");
    let got = collect(
        client
            .get_traces(GetTracesRequest {
                query: vec![GetTraceParams {
                    trace_id: s1_found.trace_id.clone(),
                    start_time: s1_found.start,
                    end_time: s1_found.end,
                }],
            })
            .await,
    )
    .await
    .expect("GetTraces");
    assert_eq!(got.iter().map(span_count).sum::<usize>(), 3, "both parts");

    let declared = CapabilitiesClient::new(tier.channel().await)
        .get_capabilities(GetCapabilitiesRequest {})
        .await
        .expect("GetCapabilities on the tier")
        .into_inner();
    assert!(declared.search.expect("search").without_service_name);
}
