//! jaeger-idl v0.14.0's additions to Jaeger's storage API: FindTraceSummaries,
//! Capabilities, FindTraceIDs' hints and GetTraces bounded by them, the
//! structured filter, pagination's refusals, and v0.6.0's message shapes,
//! on one node and through the query tier with a trace split over two nodes.

use prost::Message;
use tonic::{transport::Channel, Code};
use tracedb_proto::jaeger::{
    expression::v1::{
        expression::Term, AttributeReference, Call, Expression, FieldReference, List, Scalar,
    },
    storage::v2::{
        capabilities_client::CapabilitiesClient, trace_reader_client::TraceReaderClient,
        FilterCapabilities, FindTraceIDsRequest, FindTraceIDsResponse, FindTraceSummariesRequest,
        FindTracesRequest, GetCapabilitiesRequest, GetCapabilitiesResponse, GetTraceParams,
        GetTracesRequest, Pagination, SearchCapabilities, ServiceSummary, TraceQueryParameters,
        TraceSummary,
    },
};
use tracedb_proto::trace::v1::span::SpanKind;

use super::{collect, export, now, span, span_count, ts, MS};
use crate::harness::{metric, Server};

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
/// orphan) and ends last, at +60 ms; charge has the string
/// `http.status_code="402"`. S2, a second later: frontend `GET /b`
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
    with_string_code(&mut charge);
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

/// The string `http.status_code` "402" on a span: Tempo's typed column for
/// the attribute holds ints only, but a Jaeger `exists` finds any type.
fn with_string_code(span: &mut tracedb_proto::trace::v1::Span) {
    span.attributes.push(tracedb_proto::common::v1::KeyValue {
        key: "http.status_code".into(),
        value: Some(tracedb_proto::common::v1::AnyValue {
            value: Some(tracedb_proto::common::v1::any_value::Value::StringValue(
                "402".into(),
            )),
        }),
    });
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
        (
            "an attribute of any type, where Tempo's column holds ints",
            call("exists", vec![attr_ref("span", "http.status_code")]),
            vec![s2, s1],
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
    with_string_code(&mut charge);
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
    // A string where Tempo's column holds ints: the nodes' TraceQL would
    // not find it, so the tier evaluates the Jaeger query itself.
    let string_code = call("exists", vec![attr_ref("span", "http.status_code")]);
    assert_eq!(
        summaries(&mut client, filtered(t0, string_code))
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
