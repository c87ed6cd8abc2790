//! The gRPC and command-line surface: status codes, partial success, gzip,
//! health, reflection, large traces, `tracedb get`.

use std::process::Command;

use prost::Message;
use tonic::{codec::CompressionEncoding, Code};
use tracedb_proto::{
    codec::{EncodedMessage, RawCodec},
    collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    query::v1::GetTraceRequest,
};

use crate::harness::{get_trace, request, rich_span, spans_of, Server, TRACEDB};

/// Sends `body` as an Export request, byte for byte.
async fn export_raw(
    server: &Server,
    body: Vec<u8>,
) -> Result<ExportTraceServiceResponse, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.expect("ready");
    let path = http::uri::PathAndQuery::from_static(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    );
    let codec = RawCodec::<EncodedMessage, ExportTraceServiceResponse>::default();
    grpc.unary(
        tonic::Request::new(EncodedMessage(body.into())),
        path,
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
}

#[test]
fn no_subcommand_prints_help() {
    let out = Command::new(TRACEDB).output().expect("run tracedb");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("Usage"), "{text}");
    assert!(text.contains("serve") && text.contains("get"), "{text}");
}

#[tokio::test]
async fn status_codes_follow_the_otlp_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());

    // An empty request succeeds with no partial success.
    let empty = export_raw(&server, Vec::new())
        .await
        .expect("empty request");
    assert_eq!(empty.partial_success, None);

    // Garbage is INVALID_ARGUMENT and stores nothing.
    let garbage = export_raw(&server, vec![0x0a, 0xff, 0xff, 0xff, 0x0f, 1, 2]).await;
    assert_eq!(
        garbage.expect_err("malformed").code(),
        Code::InvalidArgument
    );

    // A span with a 15-byte trace ID is rejected alone; its neighbour is stored.
    let mut req = request("svc", &[0xabc], 1);
    let mut bad = rich_span(0xabc, 7, None);
    bad.trace_id = vec![1; 15].into();
    req.resource_spans[0].scope_spans[0].spans.push(bad);
    let response = export_raw(&server, req.encode_to_vec())
        .await
        .expect("partial success");
    let partial = response.partial_success.expect("partial_success set");
    assert_eq!(partial.rejected_spans, 1);
    assert!(!partial.error_message.is_empty());
    let mut query = server.query().await;
    let spans = spans_of(&get_trace(&mut query, 0xabc).await.expect("stored"));
    assert_eq!(spans.len(), 1);

    // Query errors.
    let short = query
        .get_trace(GetTraceRequest {
            trace_id: vec![1, 2, 3].into(),
            ..Default::default()
        })
        .await;
    assert_eq!(short.expect_err("3-byte id").code(), Code::InvalidArgument);
    let missing = get_trace(&mut query, 0xdead).await;
    assert_eq!(missing.expect_err("unknown id").code(), Code::NotFound);
}

#[tokio::test]
async fn gzip_requests_are_accepted_and_large_traces_stream_in_chunks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let mut ingest = server
        .ingest()
        .await
        .send_compressed(CompressionEncoding::Gzip);
    // 3,000 spans of ~3 KiB: about 9 MiB, more than two 4 MiB messages.
    let mut req = request("big", &[42], 3_000);
    for span in &mut req.resource_spans[0].scope_spans[0].spans {
        span.trace_state = "x".repeat(3_000);
    }
    ingest.export(req.clone()).await.expect("gzip export");

    let mut query = server
        .query()
        .await
        .accept_compressed(CompressionEncoding::Gzip);
    let messages = get_trace(&mut query, 42).await.expect("trace");
    assert!(messages.len() >= 3, "{} messages", messages.len());
    for m in &messages {
        assert!(
            m.encoded_len() < 4 << 20,
            "message of {} bytes",
            m.encoded_len()
        );
    }
    let got = spans_of(&messages);
    let mut sent = req.resource_spans[0].scope_spans[0].spans.clone();
    sent.sort_by(|a, b| a.span_id.cmp(&b.span_id));
    assert_eq!(got.len(), sent.len());
    assert!(got.iter().zip(&sent).all(|((_, g), s)| g == s));
}

#[tokio::test]
async fn max_message_size_is_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(dir.path(), &["--max-message-bytes", "100000"]);
    let mut req = request("svc", &[5], 100);
    for span in &mut req.resource_spans[0].scope_spans[0].spans {
        span.trace_state = "y".repeat(2_000);
    }
    let err = server
        .ingest()
        .await
        .export(req)
        .await
        .expect_err("too large");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    // Below the limit still works.
    server
        .ingest()
        .await
        .export(request("svc", &[6], 3))
        .await
        .expect("small export");
}

#[tokio::test]
async fn health_and_reflection_are_served() {
    use tonic_health::pb::{
        health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
    };
    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        ServerReflectionRequest,
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "opentelemetry.proto.collector.trace.v1.TraceService",
        "tracedb.query.v1.QueryService",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }

    let mut reflection = ServerReflectionClient::new(server.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let response = responses
        .message()
        .await
        .expect("stream")
        .expect("one response");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer {response:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "opentelemetry.proto.collector.trace.v1.TraceService",
        "tracedb.query.v1.QueryService",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
}

#[tokio::test]
async fn tracedb_get_prints_the_span_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let trace: u128 = 0x0af7651916cd43dd8448eb211c80319c;
    server
        .ingest()
        .await
        .export(request("checkout", &[trace], 3))
        .await
        .expect("export");

    let out = Command::new(TRACEDB)
        .args([
            "get",
            "0af7651916cd43dd8448eb211c80319c",
            "--attributes",
            "--addr",
            &server.addr.to_string(),
        ])
        .output()
        .expect("run tracedb get");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("3 spans, 1 service,"), "{text}");
    assert!(
        lines[1].contains("checkout: op-0 server ERROR: boom"),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.contains("  checkout: op-1")),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.contains("    checkout: op-2")),
        "{text}"
    );
    assert!(text.contains("http.route=\"/cart\""), "{text}");
    assert!(lines[1].starts_with('!'), "error span marked: {text}");

    // --json: OTLP/JSON that decodes to the three spans.
    let out = Command::new(TRACEDB)
        .args([
            "get",
            "0af7651916cd43dd8448eb211c80319c",
            "--json",
            "--addr",
        ])
        .arg(server.addr.to_string())
        .output()
        .expect("run tracedb get --json");
    assert!(out.status.success());
    let decoded = tracedb_ingest::json::json_to_protobuf(&out.stdout).expect("OTLP/JSON");
    let data =
        <tracedb_proto::trace::v1::TracesData as Message>::decode(decoded).expect("TracesData");
    assert_eq!(spans_of(&[data]).len(), 3);

    // search: the trace, its root, span count and error count.
    let out = Command::new(TRACEDB)
        .args([
            "search",
            "--service",
            "checkout",
            "--since",
            "1d",
            "--limit",
            "5",
            "--addr",
        ])
        .arg(server.addr.to_string())
        .output()
        .expect("run tracedb search");
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listing}");
    let row = listing.lines().nth(1).expect("one trace");
    assert!(
        row.starts_with("0af7651916cd43dd8448eb211c80319c"),
        "{listing}"
    );
    assert!(
        row.contains("checkout: op-0") && row.contains("     3       3  "),
        "{listing}"
    );
    let none = Command::new(TRACEDB)
        .args(["search", "--service", "nobody", "--addr"])
        .arg(server.addr.to_string())
        .output()
        .expect("run tracedb search");
    assert!(String::from_utf8_lossy(&none.stdout).contains("no traces found"));

    let missing = Command::new(TRACEDB)
        .args([
            "get",
            "00000000000000000000000000000001",
            "--addr",
            &server.addr.to_string(),
        ])
        .output()
        .expect("run tracedb get");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    let bad = Command::new(TRACEDB)
        .args(["get", "xyz"])
        .output()
        .expect("run tracedb get");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("hex digits"));
}

#[tokio::test]
async fn empty_export_request_message_is_ok() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let response = server
        .ingest()
        .await
        .export(ExportTraceServiceRequest::default())
        .await
        .expect("empty export")
        .into_inner();
    assert_eq!(response.partial_success, None);
}

/// The search index's lists over `tracedb.query.v1`, which a query tier asks
/// each node for: services, operations, span names, tag keys and values,
/// dependencies, and search by tag.
#[tokio::test]
async fn query_service_lists_what_the_search_index_holds() {
    use tracedb_proto::query::v1::{
        GetOperationsRequest, GetTagValuesRequest, SearchTracesRequest, Tag, TagKey, TagScope,
        TimeWindow,
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let mut ingest = server.ingest().await;
    // Trace 0x71: a root in "front" calling "back"; trace 0x72 only in "front".
    ingest
        .export(request("front", &[0x71, 0x72], 2))
        .await
        .expect("export front");
    let mut back = request("back", &[], 0);
    back.resource_spans[0].scope_spans[0].spans = vec![rich_span(0x71, 5, Some(0))];
    ingest.export(back).await.expect("export back");

    let mut query = server.query().await;
    let all = TimeWindow::default();
    let services = query
        .get_services(all)
        .await
        .expect("services")
        .into_inner();
    assert_eq!(services.names, ["back", "front"]);
    let operations = query
        .get_operations(GetOperationsRequest {
            service: "front".into(),
            span_kind: 2,
            window: None,
        })
        .await
        .expect("operations")
        .into_inner()
        .operations;
    let names: Vec<(&str, u32)> = operations
        .iter()
        .map(|o| (o.name.as_str(), o.span_kind))
        .collect();
    assert_eq!(names, [("op-0", 2), ("op-1", 2)]);
    let bad_kind = query
        .get_operations(GetOperationsRequest {
            service: "front".into(),
            span_kind: 9,
            window: None,
        })
        .await
        .expect_err("kind 9");
    assert_eq!(bad_kind.code(), Code::InvalidArgument);
    let span_names = query.get_span_names(all).await.expect("names").into_inner();
    assert_eq!(span_names.names, ["op-0", "op-1", "op-5"]);
    let keys = query
        .get_tag_keys(all)
        .await
        .expect("keys")
        .into_inner()
        .keys;
    for (scope, key) in [
        (TagScope::Span, "http.route"),
        (TagScope::Resource, "service.name"),
    ] {
        assert!(
            keys.contains(&TagKey {
                scope: scope.into(),
                key: key.into()
            }),
            "{key} in {keys:?}"
        );
    }
    let values = query
        .get_tag_values(GetTagValuesRequest {
            scope: TagScope::Resource.into(),
            key: "service.name".into(),
            window: None,
            query: String::new(),
            limit: 0,
        })
        .await
        .expect("values")
        .into_inner();
    assert_eq!(values.names, ["back", "front"]);
    assert_eq!(values.types, ["string", "string"]);
    // A query being typed narrows the values to traces that can match it:
    // trace 0x71 has a span of "back", and its values are all listed.
    for (typed, expected) in [
        (
            r#"{ resource.service.name = "back" && span.x = "#,
            &["back", "front"][..],
        ),
        (r#"{ resource.service.name = "nobody" && span.x = "#, &[]),
    ] {
        let values = query
            .get_tag_values(GetTagValuesRequest {
                scope: TagScope::Resource.into(),
                key: "service.name".into(),
                window: None,
                query: typed.into(),
                limit: 0,
            })
            .await
            .expect("values")
            .into_inner();
        assert_eq!(values.names, expected, "{typed}");
    }
    // A limit keeps that many, as asked: not a partial answer.
    let one = query
        .get_tag_values(GetTagValuesRequest {
            scope: TagScope::Resource.into(),
            key: "service.name".into(),
            window: None,
            query: String::new(),
            limit: 1,
        })
        .await
        .expect("values");
    assert!(one.metadata().get("tracedb-partial").is_none());
    assert_eq!(one.into_inner().names.len(), 1);
    let dependencies = query
        .get_dependencies(all)
        .await
        .expect("dependencies")
        .into_inner()
        .dependencies;
    assert_eq!(dependencies.len(), 1, "{dependencies:?}");
    assert_eq!(
        (
            dependencies[0].parent.as_str(),
            dependencies[0].child.as_str(),
            dependencies[0].call_count
        ),
        ("front", "back", 1)
    );

    let search = |tags: Vec<Tag>| SearchTracesRequest {
        tags,
        limit: 10,
        ..Default::default()
    };
    let tag = |key: &str, value: &str| Tag {
        key: key.into(),
        value: value.into(),
    };
    let found = query
        .search_traces(search(vec![tag("http.route", "/cart")]))
        .await
        .expect("search")
        .into_inner()
        .traces;
    assert_eq!(found.len(), 2);
    let with_back = query
        .search_traces(search(vec![tag("service.name", "back")]))
        .await
        .expect("search")
        .into_inner()
        .traces;
    assert_eq!(with_back.len(), 1);
    assert_eq!(with_back[0].trace_id[..], 0x71u128.to_be_bytes());
    assert_eq!(with_back[0].span_count, 3);
    let none = query
        .search_traces(search(vec![tag("http.route", "/nope")]))
        .await
        .expect("search")
        .into_inner()
        .traces;
    assert!(none.is_empty());
}
