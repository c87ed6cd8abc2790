//! Large and hostile requests end to end: 10,000 spans in one request, a
//! 1 MB attribute value, a trace of 100,000 spans (GetTrace streams it in
//! messages under the 4 MiB gRPC limit), and AnyValues nested deeper than
//! the scanner allows (refused whole, the server unharmed).

use std::collections::HashSet;

use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{any_value::Value, AnyValue, ArrayValue, KeyValue},
};

use crate::harness::{get_trace, request, rich_span, spans_of, Server};

/// One request with spans `from..to` of `trace`.
fn spans_request(trace: u128, from: u64, to: u64) -> ExportTraceServiceRequest {
    let mut r = request("big", &[trace], 0);
    r.resource_spans[0].scope_spans[0].spans =
        (from..to).map(|i| rich_span(trace, i, None)).collect();
    r
}

fn nested(depth: usize) -> AnyValue {
    let mut v = AnyValue {
        value: Some(Value::StringValue("leaf".into())),
    };
    for _ in 0..depth {
        v = AnyValue {
            value: Some(Value::ArrayValue(ArrayValue { values: vec![v] })),
        };
    }
    v
}

#[tokio::test]
async fn large_requests_and_a_100_000_span_trace_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(dir.path(), &["--flush-bytes", "8000000"]);
    let mut ingest = server.ingest().await;
    let mut query = server.query().await;

    // 10,000 spans per request, ten requests: one trace of 100,000 spans.
    for k in 0..10u64 {
        ingest
            .export(spans_request(1, k * 10_000, (k + 1) * 10_000))
            .await
            .expect("10,000 spans in one request");
    }
    let messages = get_trace(&mut query, 1).await.expect("the big trace");
    assert!(messages.len() > 1, "streamed in several messages");
    let spans = spans_of(&messages);
    assert_eq!(spans.len(), 100_000);
    let ids: HashSet<_> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
    assert_eq!(ids.len(), 100_000);

    // A 1 MB attribute value comes back byte for byte.
    let value: String = (0..1 << 20)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let mut r = spans_request(2, 0, 1);
    r.resource_spans[0].scope_spans[0].spans[0]
        .attributes
        .push(KeyValue {
            key: "blob".into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.clone())),
            }),
        });
    ingest.export(r).await.expect("1 MB attribute");
    let got = spans_of(&get_trace(&mut query, 2).await.expect("trace 2"));
    let blob = got[0]
        .1
        .attributes
        .iter()
        .find(|kv| kv.key == "blob")
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
        .expect("blob attribute");
    assert_eq!(blob, value);

    // Nesting: at the limit accepted, past it refused whole.
    let max = tracedb_ingest::MAX_ANY_VALUE_DEPTH;
    for (depth, ok) in [(max - 2, true), (max + 1, false), (10_000, false)] {
        let mut r = spans_request(3 + depth as u128, 0, 1);
        r.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .push(KeyValue {
                key: "deep".into(),
                value: Some(nested(depth)),
            });
        let result = ingest.export(r).await;
        if ok {
            result.unwrap_or_else(|e| panic!("depth {depth}: {e}"));
        } else {
            let status = result.expect_err("too deep");
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "depth {depth}: {status}"
            );
        }
    }
    // The server is unharmed.
    ingest
        .export(request("after", &[99], 3))
        .await
        .expect("export after hostile input");
    assert_eq!(
        spans_of(&get_trace(&mut query, 99).await.expect("99")).len(),
        3
    );
}
