//! Tests of the request scanner. Requests are built with the prost types and
//! checked against them; where the scanner's verdict on arbitrary bytes can be
//! compared with prost's decoder, it is.

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{
        any_value::Value, AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue,
        KeyValueList,
    },
    resource::v1::Resource,
    trace::v1::{
        span::{Event, Link},
        ResourceSpans, ScopeSpans, Span as ProtoSpan, Status, TracesData,
    },
    wire::put_varint,
};

use super::*;
use crate::error::MalformedKind;

// ---------------------------------------------------------------- helpers

fn trace_id(n: u64) -> Bytes {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&0xabcd_u64.to_be_bytes());
    id[8..].copy_from_slice(&n.to_be_bytes());
    Bytes::copy_from_slice(&id)
}

fn span_id(n: u64) -> Bytes {
    Bytes::copy_from_slice(&(n | 1 << 63).to_be_bytes())
}

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
    }
}

fn string(s: &str) -> Value {
    Value::StringValue(s.to_owned())
}

/// A span with every field set, attributes of every `AnyValue` kind included.
fn full_span(n: u64) -> ProtoSpan {
    ProtoSpan {
        trace_id: trace_id(n / 3),
        span_id: span_id(n),
        trace_state: "vendor=value".to_owned(),
        parent_span_id: span_id(n + 1000),
        flags: 0x301,
        name: format!("GET /items/{n}"),
        kind: 2,
        start_time_unix_nano: 1_700_000_000_000_000_000 + n,
        end_time_unix_nano: 1_700_000_000_000_500_000 + n,
        attributes: vec![
            kv("http.method", string("GET")),
            kv("ok", Value::BoolValue(true)),
            kv("status", Value::IntValue(-200)),
            kv("ratio", Value::DoubleValue(0.25)),
            kv("blob", Value::BytesValue(Bytes::from_static(b"\x00\xff"))),
            kv(
                "list",
                Value::ArrayValue(ArrayValue {
                    values: vec![
                        AnyValue {
                            value: Some(string("a")),
                        },
                        AnyValue { value: None },
                    ],
                }),
            ),
            kv(
                "map",
                Value::KvlistValue(KeyValueList {
                    values: vec![kv("inner", Value::IntValue(7))],
                }),
            ),
        ],
        dropped_attributes_count: 3,
        events: vec![Event {
            time_unix_nano: 1_700_000_000_000_100_000,
            name: "exception".to_owned(),
            attributes: vec![kv("exception.type", string("Boom"))],
            dropped_attributes_count: 1,
        }],
        dropped_events_count: 4,
        links: vec![Link {
            trace_id: trace_id(99),
            span_id: span_id(99),
            trace_state: "k=v".to_owned(),
            attributes: vec![kv("link", Value::BoolValue(false))],
            dropped_attributes_count: 2,
            flags: 0x100,
        }],
        dropped_links_count: 5,
        status: Some(Status {
            message: "failed".to_owned(),
            code: 2,
        }),
    }
}

fn small_span(n: u64) -> ProtoSpan {
    ProtoSpan {
        trace_id: trace_id(n / 4),
        span_id: span_id(n),
        name: "op".to_owned(),
        start_time_unix_nano: n,
        end_time_unix_nano: n + 10,
        attributes: vec![kv("k", string("v")), kv("n", Value::IntValue(n as i64))],
        ..ProtoSpan::default()
    }
}

fn resource(service: &str) -> Resource {
    Resource {
        attributes: vec![kv("service.name", string(service))],
        dropped_attributes_count: 1,
        entity_refs: vec![EntityRef {
            schema_url: "https://example.com/entity".to_owned(),
            r#type: "service".to_owned(),
            id_keys: vec!["service.name".to_owned()],
            description_keys: vec!["host".to_owned(), "pod".to_owned()],
        }],
    }
}

fn scope(name: &str) -> InstrumentationScope {
    InstrumentationScope {
        name: name.to_owned(),
        version: "1.2.3".to_owned(),
        attributes: vec![kv("scope.attr", Value::IntValue(1))],
        dropped_attributes_count: 0,
    }
}

fn one_resource(spans: Vec<ProtoSpan>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource("svc")),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope("lib")),
                spans,
                schema_url: "https://example.com/scope".to_owned(),
            }],
            schema_url: "https://example.com/resource".to_owned(),
        }],
    }
}

fn encode(request: &ExportTraceServiceRequest) -> Bytes {
    Bytes::from(request.encode_to_vec())
}

fn scan(body: &Bytes) -> (Result<ScanOutcome, ScanError>, Vec<tracedb_lsm::Span>) {
    let mut out = Vec::new();
    let result = scan_export_request(body, &mut out, TimeRules::ANY);
    (result, out)
}

fn scan_ok(body: &Bytes) -> (ScanOutcome, Vec<tracedb_lsm::Span>) {
    let (result, out) = scan(body);
    match result {
        Ok(outcome) => (outcome, out),
        Err(e) => panic!("expected a well-formed request, got {e}"),
    }
}

fn scan_err(body: &Bytes) -> ScanError {
    let (result, out) = scan(body);
    assert!(out.is_empty(), "no spans may be appended on error");
    match result {
        Ok(outcome) => panic!("expected a malformed request, got {outcome:?}"),
        Err(e) => e,
    }
}

fn varint(v: u64, out: &mut Vec<u8>) {
    put_varint(out, v);
}

fn len_field(field: u32, contents: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(field) << 3 | 2, out);
    varint(contents.len() as u64, out);
    out.extend_from_slice(contents);
}

/// A request holding one span given as raw bytes.
fn wrap_span(raw: &[u8]) -> Bytes {
    let mut scope_spans = Vec::new();
    len_field(2, raw, &mut scope_spans);
    let mut resource_spans = Vec::new();
    len_field(2, &scope_spans, &mut resource_spans);
    let mut request = Vec::new();
    len_field(1, &resource_spans, &mut request);
    Bytes::from(request)
}

fn is_valid_id(id: &[u8], len: usize) -> bool {
    id.len() == len && id.iter().any(|&b| b != 0)
}

/// Scans `body` and checks the verdict against prost's decoder: both accept
/// or both refuse, and when both accept, the scanner kept exactly the spans
/// with valid IDs, in order, with the right IDs, times and payloads.
/// Returns whether the body was accepted.
fn agrees_with_prost(body: &Bytes) -> bool {
    let sentinel = tracedb_lsm::Span {
        trace_id: tracedb_lsm::TraceId([7; 16]),
        span_id: tracedb_lsm::SpanId([7; 8]),
        start_unix_nano: 0,
        end_unix_nano: 0,
        group: Arc::default(),
        payload: Bytes::new(),
    };
    let mut out = vec![sentinel];
    let result = scan_export_request(body, &mut out, TimeRules::ANY);
    let decoded = ExportTraceServiceRequest::decode(body.clone());
    match (result, decoded) {
        (Err(e), Err(_)) => {
            assert_eq!(out.len(), 1, "output not restored after {e}");
            false
        }
        (Ok(outcome), Ok(request)) => {
            let spans: Vec<&ProtoSpan> = request
                .resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .flat_map(|ss| &ss.spans)
                .collect();
            let valid: Vec<&&ProtoSpan> = spans
                .iter()
                .filter(|s| {
                    is_valid_id(&s.trace_id, 16)
                        && is_valid_id(&s.span_id, 8)
                        && s.start_time_unix_nano != 0
                })
                .collect();
            assert_eq!(outcome.accepted as usize, valid.len());
            assert_eq!(outcome.rejected as usize, spans.len() - valid.len());
            assert_eq!(out.len(), 1 + valid.len());
            for (stored, original) in out[1..].iter().zip(valid) {
                assert_eq!(&stored.trace_id.0[..], &original.trace_id[..]);
                assert_eq!(&stored.span_id.0[..], &original.span_id[..]);
                assert_eq!(stored.start_unix_nano, original.start_time_unix_nano);
                assert_eq!(
                    stored.end_unix_nano,
                    original
                        .end_time_unix_nano
                        .max(original.start_time_unix_nano)
                );
                let payload = ProtoSpan::decode(stored.payload.clone()).expect("payload decodes");
                assert_eq!(&payload, *original);
            }
            true
        }
        (Ok(outcome), Err(e)) => panic!("scanner accepted ({outcome:?}) what prost refuses: {e}"),
        (Err(e), Ok(_)) => panic!("scanner refused what prost accepts: {e}"),
    }
}

// ---------------------------------------------------------------- well-formed requests

#[test]
fn empty_body_is_an_empty_request() {
    let (outcome, out) = scan_ok(&Bytes::new());
    assert_eq!(outcome, ScanOutcome::default());
    assert!(out.is_empty());
}

#[test]
fn every_span_field_round_trips() {
    let spans: Vec<ProtoSpan> = (1..=3).map(full_span).collect();
    let request = one_resource(spans.clone());
    let body = encode(&request);
    let (outcome, out) = scan_ok(&body);

    assert_eq!(outcome.accepted, 3);
    assert_eq!(outcome.rejected, 0);
    assert_eq!(outcome.rejection_message, "");
    assert_eq!(out.len(), 3);
    for (stored, original) in out.iter().zip(&spans) {
        assert_eq!(&stored.trace_id.0[..], &original.trace_id[..]);
        assert_eq!(&stored.span_id.0[..], &original.span_id[..]);
        assert_eq!(stored.start_unix_nano, original.start_time_unix_nano);
        assert_eq!(stored.end_unix_nano, original.end_time_unix_nano);
        assert_eq!(stored.payload, original.encode_to_vec());
        let decoded = ProtoSpan::decode(stored.payload.clone()).expect("payload decodes");
        assert_eq!(&decoded, original);
        // Zero-copy: the payload points into the request body.
        let body_range = body.as_ptr_range();
        assert!(body_range.contains(&stored.payload.as_ptr()));
    }

    let group = &out[0].group;
    let resource_bytes = group.resource.clone().expect("resource present");
    assert_eq!(
        Resource::decode(resource_bytes).expect("resource decodes"),
        resource("svc")
    );
    let scope_bytes = group.scope.clone().expect("scope present");
    assert_eq!(
        InstrumentationScope::decode(scope_bytes).expect("scope decodes"),
        scope("lib")
    );
    assert_eq!(
        &group.resource_schema_url[..],
        b"https://example.com/resource"
    );
    assert_eq!(&group.scope_schema_url[..], b"https://example.com/scope");
}

#[test]
fn resources_and_scopes_map_to_their_groups() {
    let mut n = 0;
    let mut next = || {
        n += 1;
        small_span(n)
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![
            ResourceSpans {
                resource: Some(resource("a")),
                scope_spans: vec![
                    ScopeSpans {
                        scope: Some(scope("a1")),
                        spans: vec![next(), next()],
                        schema_url: "s-a1".to_owned(),
                    },
                    // Contributes nothing.
                    ScopeSpans {
                        scope: Some(scope("empty")),
                        spans: vec![],
                        schema_url: String::new(),
                    },
                    ScopeSpans {
                        scope: None,
                        spans: vec![next()],
                        schema_url: String::new(),
                    },
                ],
                schema_url: "r-a".to_owned(),
            },
            // Contributes nothing.
            ResourceSpans {
                resource: Some(resource("nothing")),
                scope_spans: vec![],
                schema_url: String::new(),
            },
            ResourceSpans {
                resource: None,
                scope_spans: vec![ScopeSpans {
                    scope: Some(scope("b1")),
                    spans: vec![next()],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            },
            ResourceSpans {
                resource: Some(Resource::default()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope::default()),
                    spans: vec![next(), next()],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            },
        ],
    };
    let (outcome, out) = scan_ok(&encode(&request));
    assert_eq!(outcome.accepted, 6);
    assert_eq!(out.len(), 6);
    let span_numbers: Vec<u64> = out.iter().map(|s| s.start_unix_nano).collect();
    assert_eq!(span_numbers, [1, 2, 3, 4, 5, 6]);

    // Spans of one ScopeSpans share one group; different ScopeSpans do not.
    assert!(Arc::ptr_eq(&out[0].group, &out[1].group));
    assert!(!Arc::ptr_eq(&out[1].group, &out[2].group));
    assert!(Arc::ptr_eq(&out[4].group, &out[5].group));

    let decode_resource = |group: &ScopeGroup| {
        group
            .resource
            .clone()
            .map(|b| Resource::decode(b).expect("resource decodes"))
    };
    let decode_scope = |group: &ScopeGroup| {
        group
            .scope
            .clone()
            .map(|b| InstrumentationScope::decode(b).expect("scope decodes"))
    };
    assert_eq!(decode_resource(&out[0].group), Some(resource("a")));
    assert_eq!(decode_scope(&out[0].group), Some(scope("a1")));
    assert_eq!(&out[0].group.resource_schema_url[..], b"r-a");
    assert_eq!(&out[0].group.scope_schema_url[..], b"s-a1");
    assert_eq!(decode_resource(&out[2].group), Some(resource("a")));
    assert_eq!(out[2].group.scope, None);
    assert_eq!(&out[2].group.scope_schema_url[..], b"");
    // Absent resource is None; present but empty is Some(empty).
    assert_eq!(out[3].group.resource, None);
    assert_eq!(decode_scope(&out[3].group), Some(scope("b1")));
    assert_eq!(out[4].group.resource, Some(Bytes::new()));
    assert_eq!(out[4].group.scope, Some(Bytes::new()));
}

#[test]
fn invalid_ids_are_rejected_one_by_one() {
    let with = |n: u64, trace: &[u8], span: &[u8]| ProtoSpan {
        trace_id: Bytes::copy_from_slice(trace),
        span_id: Bytes::copy_from_slice(span),
        ..small_span(n)
    };
    let good_trace = trace_id(1);
    let good_span = span_id(1);
    let spans = vec![
        small_span(10),
        with(11, &good_trace[..15], &good_span),
        small_span(12),
        with(13, &[0; 16], &good_span),
        with(14, &good_trace, &good_span[..7]),
        with(15, &good_trace, &[0; 8]),
        with(16, &[], &good_span),
        with(17, &good_trace, &[]),
        small_span(18),
    ];
    let (outcome, out) = scan_ok(&encode(&one_resource(spans)));
    assert_eq!(outcome.accepted, 3);
    assert_eq!(outcome.rejected, 6);
    assert_eq!(outcome.rejected_trace_id, 3);
    assert_eq!(outcome.rejected_span_id, 3);
    let kept: Vec<u64> = out.iter().map(|s| s.start_unix_nano).collect();
    assert_eq!(kept, [10, 12, 18]);
    assert_eq!(
        outcome.rejection_message,
        "resource_spans[0].scope_spans[0].spans[1]: trace_id is 15 bytes, expected 16; \
         resource_spans[0].scope_spans[0].spans[3]: trace_id is all zero; \
         resource_spans[0].scope_spans[0].spans[4]: span_id is 7 bytes, expected 8; \
         resource_spans[0].scope_spans[0].spans[5]: span_id is all zero; \
         resource_spans[0].scope_spans[0].spans[6]: trace_id is 0 bytes, expected 16; \
         and 1 more"
    );
}

#[test]
fn repeated_fields_follow_protobuf_semantics() {
    // Span: the last trace_id, span_id and times win.
    let first = small_span(1);
    let mut raw = first.encode_to_vec();
    let last = ProtoSpan {
        trace_id: trace_id(500),
        span_id: span_id(500),
        start_time_unix_nano: 111,
        end_time_unix_nano: 222,
        ..ProtoSpan::default()
    };
    raw.extend_from_slice(&last.encode_to_vec());
    let (outcome, out) = scan_ok(&wrap_span(&raw));
    assert_eq!(outcome.accepted, 1);
    assert_eq!(&out[0].trace_id.0[..], &trace_id(500)[..]);
    assert_eq!(&out[0].span_id.0[..], &span_id(500)[..]);
    assert_eq!((out[0].start_unix_nano, out[0].end_unix_nano), (111, 222));

    // ResourceSpans: a resource given twice, the second time after the spans,
    // merges like protobuf merges a repeated singular message.
    let scope_spans = ScopeSpans {
        scope: None,
        spans: vec![small_span(2)],
        schema_url: String::new(),
    };
    let mut resource_spans = Vec::new();
    len_field(1, &resource("first").encode_to_vec(), &mut resource_spans);
    len_field(2, &scope_spans.encode_to_vec(), &mut resource_spans);
    let second = Resource {
        attributes: vec![kv("extra", Value::BoolValue(true))],
        ..Resource::default()
    };
    len_field(1, &second.encode_to_vec(), &mut resource_spans);
    let mut body = Vec::new();
    len_field(1, &resource_spans, &mut body);
    let body = Bytes::from(body);
    assert!(agrees_with_prost(&body));
    let (_, out) = scan_ok(&body);
    let merged = Resource::decode(out[0].group.resource.clone().expect("resource"))
        .expect("merged resource decodes");
    let expected = ExportTraceServiceRequest::decode(body.clone()).expect("prost decodes");
    assert_eq!(Some(merged), expected.resource_spans[0].resource);
}

#[test]
fn unknown_fields_are_accepted_and_kept_in_the_payload() {
    let original = small_span(3);
    let mut raw = original.encode_to_vec();
    varint(100 << 3, &mut raw); // varint field 100
    varint(12345, &mut raw);
    varint(101 << 3 | 1, &mut raw); // fixed64 field 101
    raw.extend_from_slice(&[9; 8]);
    len_field(102, b"opaque", &mut raw);
    varint(103 << 3 | 3, &mut raw); // group 103 { 1: 5 }
    varint(1 << 3, &mut raw);
    varint(5, &mut raw);
    varint(103 << 3 | 4, &mut raw);
    varint(104 << 3 | 5, &mut raw); // fixed32 field 104
    raw.extend_from_slice(&[1; 4]);

    let mut body = wrap_span(&raw).to_vec();
    // Unknown fields at the top level too.
    len_field(9, b"future", &mut body);
    varint(10 << 3, &mut body);
    varint(1, &mut body);
    let body = Bytes::from(body);

    assert!(agrees_with_prost(&body));
    let (outcome, out) = scan_ok(&body);
    assert_eq!(outcome.accepted, 1);
    assert_eq!(out[0].payload, raw);
    assert_eq!(
        ProtoSpan::decode(out[0].payload.clone()).expect("payload decodes"),
        original
    );
}

#[test]
fn any_value_nesting_up_to_the_limit_is_accepted() {
    // Kvlists cost a decoder the most nesting levels per AnyValue.
    let mut value = AnyValue {
        value: Some(string("leaf")),
    };
    for _ in 1..MAX_ANY_VALUE_DEPTH {
        value = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![KeyValue {
                    key: "k".to_owned(),
                    value: Some(value),
                }],
            })),
        };
    }
    let span = ProtoSpan {
        attributes: vec![KeyValue {
            key: "deep".to_owned(),
            value: Some(value),
        }],
        ..small_span(1)
    };
    let (outcome, out) = scan_ok(&encode(&one_resource(vec![span.clone()])));
    assert_eq!(outcome.accepted, 1);
    // What we store can be read back even from inside a TracesData.
    let traces = TracesData {
        resource_spans: vec![ResourceSpans {
            resource: None,
            scope_spans: vec![ScopeSpans {
                scope: None,
                spans: vec![ProtoSpan::decode(out[0].payload.clone()).expect("payload decodes")],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    let decoded = TracesData::decode(traces.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(decoded.resource_spans[0].scope_spans[0].spans[0], span);
}

// ---------------------------------------------------------------- malformed requests

#[test]
fn any_value_nesting_beyond_the_limit_is_malformed() {
    let mut value = AnyValue {
        value: Some(Value::IntValue(1)),
    };
    for _ in 0..MAX_ANY_VALUE_DEPTH {
        value = AnyValue {
            value: Some(Value::ArrayValue(ArrayValue {
                values: vec![value],
            })),
        };
    }
    let span = ProtoSpan {
        attributes: vec![KeyValue {
            key: "deep".to_owned(),
            value: Some(value),
        }],
        ..small_span(1)
    };
    let error = scan_err(&encode(&one_resource(vec![span])));
    assert_eq!(
        error.kind(),
        MalformedKind::NestingTooDeep {
            limit: MAX_ANY_VALUE_DEPTH
        }
    );
    let path = error.path().to_string();
    assert!(
        path.starts_with(
            "resource_spans[0].scope_spans[0].spans[0].attributes[0].value.array_value.values[0]"
        ),
        "{path}"
    );
}

#[test]
fn invalid_utf8_in_a_span_name_is_malformed_and_located() {
    let marked = ProtoSpan {
        name: "MARKER".to_owned(),
        ..small_span(9)
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![
            ResourceSpans::default(),
            ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![small_span(1), small_span(2), marked],
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            },
        ],
    };
    let mut body = request.encode_to_vec();
    let at = body
        .windows(6)
        .position(|w| w == b"MARKER")
        .expect("marker encoded");
    body[at] = 0xff;
    let error = scan_err(&Bytes::from(body));
    assert_eq!(error.kind(), MalformedKind::InvalidUtf8 { field: 5 });
    // The offset is that of the name's key, two bytes before its contents.
    assert_eq!(error.offset(), at - 2);
    assert_eq!(
        error.to_string(),
        format!(
            "resource_spans[1].scope_spans[0].spans[2]: string field 5 is not valid UTF-8 at byte {}",
            at - 2
        )
    );
}

#[test]
fn wrong_wire_type_for_trace_id_is_malformed() {
    let mut raw = Vec::new();
    varint(1 << 3, &mut raw); // trace_id as a varint
    varint(5, &mut raw);
    len_field(2, &span_id(1), &mut raw);
    let error = scan_err(&wrap_span(&raw));
    assert_eq!(
        error.kind(),
        MalformedKind::WrongWireType {
            field: 1,
            expected: WireType::Len,
            actual: WireType::Varint
        }
    );
    assert_eq!(
        error.path().to_string(),
        "resource_spans[0].scope_spans[0].spans[0]"
    );
}

#[test]
fn wrong_wire_types_deep_inside_are_malformed() {
    // An event's time as a varint instead of fixed64.
    let mut event = Vec::new();
    varint(1 << 3, &mut event);
    varint(5, &mut event);
    let mut raw = small_span(1).encode_to_vec();
    len_field(11, &event, &mut raw);
    let error = scan_err(&wrap_span(&raw));
    assert_eq!(
        error.kind(),
        MalformedKind::WrongWireType {
            field: 1,
            expected: WireType::Fixed64,
            actual: WireType::Varint
        }
    );
    assert_eq!(
        error.path().to_string(),
        "resource_spans[0].scope_spans[0].spans[0].events[0]"
    );

    // A resource attribute key that is not UTF-8.
    let mut key_value = Vec::new();
    len_field(1, &[0xc0, 0x80], &mut key_value);
    let mut resource = Vec::new();
    len_field(1, &key_value, &mut resource);
    let mut resource_spans = Vec::new();
    len_field(1, &resource, &mut resource_spans);
    let mut body = Vec::new();
    len_field(1, &resource_spans, &mut body);
    let error = scan_err(&Bytes::from(body));
    assert_eq!(error.kind(), MalformedKind::InvalidUtf8 { field: 1 });
    assert_eq!(
        error.path().to_string(),
        "resource_spans[0].resource.attributes[0]"
    );
}

#[test]
fn length_claiming_four_gib_is_malformed() {
    let mut body = Vec::new();
    varint(1 << 3 | 2, &mut body);
    varint(1 << 32, &mut body);
    body.extend_from_slice(b"tiny");
    let error = scan_err(&Bytes::from(body));
    assert_eq!(
        error.kind(),
        MalformedKind::TruncatedLength {
            field: 1,
            len: 1 << 32,
            available: 4
        }
    );
    assert_eq!(error.offset(), 0);
    assert_eq!(error.path().to_string(), "request");

    // The same inside a span attribute.
    let mut raw = small_span(1).encode_to_vec();
    varint(9 << 3 | 2, &mut raw);
    varint(1 << 32, &mut raw);
    let error = scan_err(&wrap_span(&raw));
    assert!(matches!(
        error.kind(),
        MalformedKind::TruncatedLength { field: 9, .. }
    ));
}

#[test]
fn error_after_accepted_spans_leaves_output_as_it_was() {
    let valid = encode(&one_resource((1..=5).map(small_span).collect()));
    let mut body = valid.to_vec();
    // A second ResourceSpans whose span is cut short.
    let mut broken_span = small_span(9).encode_to_vec();
    broken_span.truncate(broken_span.len() - 3);
    body.extend_from_slice(&wrap_span(&broken_span));
    let body = Bytes::from(body);

    let mut out = Vec::new();
    scan_export_request(&valid, &mut out, TimeRules::ANY).expect("valid request");
    assert_eq!(out.len(), 5);
    let result = scan_export_request(&body, &mut out, TimeRules::ANY);
    assert!(result.is_err());
    assert_eq!(out.len(), 5, "spans of the failed request were removed");
    assert!(out
        .iter()
        .all(|s| valid.as_ptr_range().contains(&s.payload.as_ptr())));
}

#[test]
fn truncation_at_every_offset_is_refused_or_a_valid_prefix() {
    let mut request = one_resource((0..4).map(full_span).collect());
    request.resource_spans.push(ResourceSpans {
        resource: Some(resource("second")),
        scope_spans: vec![ScopeSpans {
            scope: Some(scope("s")),
            spans: vec![small_span(7), small_span(8)],
            schema_url: "x".to_owned(),
        }],
        schema_url: "y".to_owned(),
    });
    let body = encode(&request);
    let (mut accepted, mut refused) = (0, 0);
    for cut in 0..=body.len() {
        if agrees_with_prost(&body.slice(..cut)) {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    // Only the empty prefix, the boundary between the two ResourceSpans and
    // the whole request are well-formed.
    assert_eq!(accepted, 3);
    assert_eq!(refused, body.len() + 1 - 3);
}

#[test]
fn random_bytes_never_panic_and_agree_with_prost() {
    let mut rng = SmallRng::seed_from_u64(0x5ca1);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let len = rng.random_range(0..256);
        let mut buf = vec![0u8; len];
        rng.fill(&mut buf[..]);
        // Starting most inputs with a plausible key gets them past the first byte.
        if len > 0 && rng.random_bool(0.5) {
            buf[0] = 0x0a;
        }
        if agrees_with_prost(&Bytes::from(buf)) {
            accepted += 1;
        }
    }
    // The empty inputs alone are accepted; random bytes rarely are.
    assert!(accepted > 0);
    assert!(accepted < 20_000);
}

#[test]
fn mutated_requests_never_panic_and_agree_with_prost() {
    let mut rng = SmallRng::seed_from_u64(0xbeef);
    let mut request = one_resource((0..3).map(full_span).collect());
    request.resource_spans[0]
        .scope_spans
        .push(ScopeSpans::default());
    let valid = request.encode_to_vec();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let mut buf = valid.clone();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..buf.len());
            match rng.random_range(0..4) {
                0 => buf[at] = rng.random(),
                1 => buf[at] ^= 1 << rng.random_range(0..8),
                2 => {
                    buf.remove(at);
                }
                _ => buf.insert(at, rng.random()),
            }
        }
        if agrees_with_prost(&Bytes::from(buf)) {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    // Both verdicts occur, so the comparison with prost was exercised both ways.
    assert!(accepted > 100, "accepted {accepted}");
    assert!(refused > 100, "refused {refused}");
}

#[test]
fn ten_thousand_spans_are_scanned() {
    let mut n = 0;
    let request = ExportTraceServiceRequest {
        resource_spans: (0..4)
            .map(|r| ResourceSpans {
                resource: Some(resource(&format!("svc-{r}"))),
                scope_spans: (0..5)
                    .map(|s| ScopeSpans {
                        scope: Some(scope(&format!("lib-{s}"))),
                        spans: (0..500)
                            .map(|_| {
                                n += 1;
                                small_span(n)
                            })
                            .collect(),
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url: String::new(),
            })
            .collect(),
    };
    let (outcome, out) = scan_ok(&encode(&request));
    assert_eq!(outcome.accepted, 10_000);
    assert_eq!(outcome.rejected, 0);
    assert_eq!(out.len(), 10_000);
    for (i, span) in out.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(&span.span_id.0[..], &span_id(n)[..]);
        assert_eq!(&span.trace_id.0[..], &trace_id(n / 4)[..]);
        assert_eq!(span.start_unix_nano, n);
    }
    let mut groups: Vec<*const ScopeGroup> = out.iter().map(|s| Arc::as_ptr(&s.group)).collect();
    groups.dedup();
    assert_eq!(groups.len(), 20);
}

// ---------------------------------------------------------------- time rules

/// A span of trace 1 with span ID `n`, at the given times.
fn timed_span(n: u64, start: u64, end: u64) -> ProtoSpan {
    ProtoSpan {
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        ..small_span(4 + n)
    }
}

const NOW: u64 = 1_800_000_000_000_000_000;
const DAY: u64 = 86_400 * 1_000_000_000;

#[test]
fn spans_past_retention_without_a_start_or_ahead_of_the_clock_are_rejected_with_reasons() {
    let rules = TimeRules::at(NOW, NOW - 7 * DAY);
    let spans = vec![
        timed_span(0, NOW - DAY, NOW - DAY + 5),           // kept
        timed_span(1, NOW - 30 * DAY, NOW - 30 * DAY + 5), // expired
        timed_span(2, 0, NOW),                             // no start time
        timed_span(
            3,
            NOW + 2 * 3_600 * 1_000_000_000,
            NOW + 2 * 3_600 * 1_000_000_000,
        ), // future
        timed_span(4, NOW - 7 * DAY - 10, NOW - 7 * DAY),  // ends exactly at the window: kept
        timed_span(5, NOW, NOW + FUTURE_SLACK_NANOS),      // at the slack: kept
        timed_span(6, NOW - DAY, NOW + DAY),               // ends a day ahead
    ];
    let body = encode(&one_resource(spans));
    let mut out = Vec::new();
    let outcome = scan_export_request(&body, &mut out, rules).expect("well-formed");
    let kept: Vec<u64> = out.iter().map(|s| s.span_id.0[7].into()).collect();
    assert_eq!(kept, [4, 8, 9], "span IDs are 4 + n");
    assert_eq!(outcome.accepted, 3);
    assert_eq!(outcome.rejected, 4);
    assert_eq!(outcome.rejected_expired, 1);
    assert_eq!(outcome.rejected_no_start, 1);
    assert_eq!(outcome.rejected_future, 2);
    assert_eq!(outcome.rejected_trace_id + outcome.rejected_span_id, 0);
    let message = &outcome.rejection_message;
    assert!(
        message.contains(
            "spans[1]: ended at 2026-12-16T08:00:00.000Z, before the retention window began at 2027-01-08T08:00:00.000Z"
        ),
        "{message}"
    );
    assert!(
        message.contains("spans[2]: start_time_unix_nano is not set"),
        "{message}"
    );
    assert!(
        message.contains("spans[3]: ends at 2027-01-15T10:00:00.000Z, more than 1h ahead"),
        "{message}"
    );
    assert!(
        message.contains("spans[6]: ends at 2027-01-16T08:00:00.000Z"),
        "{message}"
    );
}

#[test]
fn a_span_ending_before_it_starts_is_kept_as_lasting_no_time() {
    let span = timed_span(0, NOW - 100, NOW - 5_000);
    let body = encode(&one_resource(vec![span.clone()]));
    let mut out = Vec::new();
    let outcome =
        scan_export_request(&body, &mut out, TimeRules::at(NOW, NOW - DAY)).expect("well-formed");
    assert_eq!((outcome.accepted, outcome.rejected), (1, 0));
    assert_eq!(
        (out[0].start_unix_nano, out[0].end_unix_nano),
        (NOW - 100, NOW - 100)
    );
    // The payload is the span as it was sent, end time and all.
    assert_eq!(
        ProtoSpan::decode(out[0].payload.clone()).expect("decodes"),
        span
    );
}

#[test]
fn without_retention_old_spans_are_kept_but_a_missing_start_is_not() {
    let spans = vec![timed_span(0, 1, 2), timed_span(1, 0, 0)];
    let body = encode(&one_resource(spans));
    let mut out = Vec::new();
    let outcome = scan_export_request(&body, &mut out, TimeRules::at(NOW, 0)).expect("well-formed");
    assert_eq!((outcome.accepted, outcome.rejected_no_start), (1, 1));
    assert_eq!(out[0].start_unix_nano, 1);
}
