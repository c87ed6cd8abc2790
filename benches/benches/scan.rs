//! OTLP request scanning: the per-span CPU cost of turning an
//! `ExportTraceServiceRequest` into stored spans, next to a full prost decode of
//! the same bytes for comparison.
//!
//! `cargo bench -p tracedb-benches --bench scan`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use tracedb_otlp::{scan_export_request, TimeRules};
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{any_value::Value, AnyValue, InstrumentationScope, KeyValue},
    resource::v1::Resource,
    trace::v1::{ResourceSpans, ScopeSpans, Span},
};

const SPANS: usize = 512;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

/// A telemetrygen-like request: 512 spans of ~150 bytes with a few attributes.
fn request() -> Bytes {
    let spans = (0..SPANS as u64)
        .map(|i| Span {
            trace_id: (u128::from(i / 8) + 1).to_be_bytes().to_vec().into(),
            span_id: (i + 1).to_be_bytes().to_vec().into(),
            parent_span_id: if i % 8 == 0 {
                Bytes::new()
            } else {
                (i).to_be_bytes().to_vec().into()
            },
            name: "okey-dokey-0".into(),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000 + i,
            end_time_unix_nano: 1_700_000_000_000_123_456 + i,
            attributes: vec![
                kv("net.peer.ip", Value::StringValue("1.2.3.4".into())),
                kv(
                    "peer.service",
                    Value::StringValue("telemetrygen-client".into()),
                ),
                kv("http.status_code", Value::IntValue(200)),
            ],
            ..Default::default()
        })
        .collect();
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv(
                    "service.name",
                    Value::StringValue("telemetrygen".into()),
                )],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "telemetrygen".into(),
                    ..Default::default()
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    request.encode_to_vec().into()
}

fn bench_scan(c: &mut Criterion) {
    let body = request();
    let mut group = c.benchmark_group("otlp_request_512_spans");
    group.throughput(Throughput::Elements(SPANS as u64));
    group.bench_function("scan_export_request", |b| {
        let mut out = Vec::with_capacity(SPANS);
        b.iter(|| {
            out.clear();
            scan_export_request(black_box(&body), &mut out, TimeRules::ANY).expect("valid request");
        })
    });
    group.bench_function("prost_decode", |b| {
        b.iter(|| {
            ExportTraceServiceRequest::decode(black_box(body.clone())).expect("valid request")
        })
    });
    group.finish();
}

criterion_group!(benches, bench_scan);
criterion_main!(benches);
