//! Assembles `opentelemetry.proto.trace.v1.TracesData` messages from stored spans
//! without decoding them.
//!
//! A stored span is its encoded `Span` message plus a shared [`ScopeGroup`]
//! holding the encoded `Resource` and `InstrumentationScope`. A `TracesData` is
//! those bytes nested in `ResourceSpans` and `ScopeSpans` wrappers, so building
//! one is a matter of grouping spans and writing tags and lengths around bytes
//! that are copied once into the output.
//!
//! Field numbers used: TracesData.resource_spans = 1; ResourceSpans.resource = 1,
//! .scope_spans = 2, .schema_url = 3; ScopeSpans.scope = 1, .spans = 2,
//! .schema_url = 3.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use tracedb_lsm::{ScopeGroup, Span};

/// gRPC clients refuse messages over 4 MiB by default; stay well below.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024 - 64 * 1024;

/// Encodes `spans` as one or more `TracesData` messages, each at most
/// `max_bytes` long unless a single span is larger than that on its own.
/// Spans of the same resource and scope share one `ResourceSpans`/`ScopeSpans`.
pub fn encode_traces_data(spans: &[Span], max_bytes: usize) -> Vec<Bytes> {
    let mut messages = Vec::new();
    let mut start = 0;
    while start < spans.len() {
        let mut end = start;
        let mut estimate = 0usize;
        let mut groups_seen: Vec<&ScopeGroup> = Vec::new();
        while end < spans.len() {
            let span = &spans[end];
            let mut cost = span.payload.len() + 16;
            if !groups_seen.iter().any(|g| **g == *span.group) {
                cost += group_size(&span.group) + 32;
            }
            if end > start && estimate + cost > max_bytes {
                break;
            }
            if !groups_seen.iter().any(|g| **g == *span.group) {
                groups_seen.push(&span.group);
            }
            estimate += cost;
            end += 1;
        }
        messages.push(encode_one(&spans[start..end]));
        start = end;
    }
    messages
}

fn group_size(g: &ScopeGroup) -> usize {
    g.resource.as_ref().map_or(0, Bytes::len)
        + g.resource_schema_url.len()
        + g.scope.as_ref().map_or(0, Bytes::len)
        + g.scope_schema_url.len()
}

/// Spans of one scope within one resource.
struct ScopeEntry<'a> {
    group: &'a ScopeGroup,
    spans: Vec<&'a Span>,
}

/// Key of a `ResourceSpans`: the resource bytes and its schema URL.
type ResourceKey<'a> = (Option<&'a [u8]>, &'a [u8]);
/// Key of a `ScopeSpans` within a resource.
type ScopeKey<'a> = (Option<&'a [u8]>, &'a [u8]);

fn encode_one(spans: &[Span]) -> Bytes {
    // Group in first-seen order so the output is deterministic.
    let mut resources: Vec<(ResourceKey<'_>, Vec<ScopeEntry<'_>>)> = Vec::new();
    let mut resource_index: HashMap<ResourceKey<'_>, usize> = HashMap::new();
    let mut scope_index: HashMap<(usize, ScopeKey<'_>), usize> = HashMap::new();
    for span in spans {
        let g = &*span.group;
        let rkey = (g.resource.as_deref(), &g.resource_schema_url[..]);
        let r = *resource_index.entry(rkey).or_insert_with(|| {
            resources.push((rkey, Vec::new()));
            resources.len() - 1
        });
        let skey = (g.scope.as_deref(), &g.scope_schema_url[..]);
        let scopes = &mut resources[r].1;
        let s = *scope_index.entry((r, skey)).or_insert_with(|| {
            scopes.push(ScopeEntry {
                group: g,
                spans: Vec::new(),
            });
            scopes.len() - 1
        });
        scopes[s].spans.push(span);
    }

    let scope_len = |e: &ScopeEntry<'_>| {
        opt_field_len(e.group.scope.as_deref())
            + e.spans
                .iter()
                .map(|s| field_len(s.payload.len()))
                .sum::<usize>()
            + str_field_len(&e.group.scope_schema_url)
    };
    let resource_len = |key: &ResourceKey<'_>, scopes: &[ScopeEntry<'_>]| {
        opt_field_len(key.0)
            + scopes
                .iter()
                .map(|e| field_len(scope_len(e)))
                .sum::<usize>()
            + str_field_len(key.1)
    };
    let total: usize = resources
        .iter()
        .map(|(k, s)| field_len(resource_len(k, s)))
        .sum();

    let mut out = BytesMut::with_capacity(total);
    for (key, scopes) in &resources {
        put_len_field(&mut out, 1, resource_len(key, scopes));
        if let Some(resource) = key.0 {
            put_bytes_field(&mut out, 1, resource);
        }
        for entry in scopes {
            put_len_field(&mut out, 2, scope_len(entry));
            if let Some(scope) = entry.group.scope.as_deref() {
                put_bytes_field(&mut out, 1, scope);
            }
            for span in &entry.spans {
                put_bytes_field(&mut out, 2, &span.payload);
            }
            if !entry.group.scope_schema_url.is_empty() {
                put_bytes_field(&mut out, 3, &entry.group.scope_schema_url);
            }
        }
        if !key.1.is_empty() {
            put_bytes_field(&mut out, 3, key.1);
        }
    }
    debug_assert_eq!(out.len(), total);
    out.freeze()
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Size of a length-delimited field (tag < 16) with a body of `len` bytes.
fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

fn opt_field_len(b: Option<&[u8]>) -> usize {
    b.map_or(0, |b| field_len(b.len()))
}

/// proto3 strings are omitted when empty.
fn str_field_len(b: &[u8]) -> usize {
    if b.is_empty() {
        0
    } else {
        field_len(b.len())
    }
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn put_len_field(out: &mut BytesMut, field: u32, len: usize) {
    put_varint(out, u64::from(field << 3 | 2));
    put_varint(out, len as u64);
}

fn put_bytes_field(out: &mut BytesMut, field: u32, bytes: &[u8]) {
    put_len_field(out, field, bytes.len());
    out.put_slice(bytes);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prost::Message;
    use tracedb_lsm::{SpanId, TraceId};
    use tracedb_proto::{
        common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
        resource::v1::Resource,
        trace::v1::{self as otlp, TracesData},
    };

    use super::*;

    fn group(service: &str, scope: &str) -> Arc<ScopeGroup> {
        let resource = Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(service.into())),
                }),
            }],
            ..Default::default()
        };
        let scope = InstrumentationScope {
            name: scope.into(),
            ..Default::default()
        };
        Arc::new(ScopeGroup {
            resource: Some(resource.encode_to_vec().into()),
            resource_schema_url: Bytes::from_static(b"https://example.com/schema"),
            scope: Some(scope.encode_to_vec().into()),
            scope_schema_url: Bytes::new(),
        })
    }

    fn span(group: &Arc<ScopeGroup>, id: u64, name: &str, padding: usize) -> (Span, otlp::Span) {
        let proto = otlp::Span {
            trace_id: vec![1; 16].into(),
            span_id: id.to_be_bytes().to_vec().into(),
            name: name.into(),
            start_time_unix_nano: id,
            trace_state: "x".repeat(padding),
            ..Default::default()
        };
        let stored = Span {
            trace_id: TraceId([1; 16]),
            span_id: SpanId(id.to_be_bytes()),
            start_unix_nano: id,
            end_unix_nano: id,
            group: group.clone(),
            payload: proto.encode_to_vec().into(),
        };
        (stored, proto)
    }

    #[test]
    fn groups_by_resource_and_scope_and_decodes_as_traces_data() {
        let a1 = group("a", "lib1");
        let a2 = group("a", "lib2");
        let b1 = group("b", "lib1");
        let input = [
            span(&a1, 1, "one", 0),
            span(&b1, 2, "two", 0),
            span(&a2, 3, "three", 0),
            span(&a1, 4, "four", 0),
        ];
        let stored: Vec<Span> = input.iter().map(|(s, _)| s.clone()).collect();
        let messages = encode_traces_data(&stored, MAX_MESSAGE_BYTES);
        assert_eq!(messages.len(), 1);
        let data = TracesData::decode(messages[0].clone()).expect("valid TracesData");
        assert_eq!(data.resource_spans.len(), 2, "two services");
        let a = &data.resource_spans[0];
        assert_eq!(a.schema_url, "https://example.com/schema");
        assert_eq!(a.scope_spans.len(), 2, "two scopes in service a");
        assert_eq!(
            a.scope_spans[0].scope.as_ref().map(|s| s.name.as_str()),
            Some("lib1")
        );
        let names: Vec<&str> = a.scope_spans[0]
            .spans
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["one", "four"]);
        assert_eq!(a.scope_spans[0].spans[0], input[0].1);
        assert_eq!(data.resource_spans[1].scope_spans[0].spans[0], input[1].1);
    }

    #[test]
    fn large_traces_split_into_messages_under_the_limit() {
        let g = group("a", "lib");
        let stored: Vec<Span> = (0..100).map(|i| span(&g, i, "s", 10_000).0).collect();
        let messages = encode_traces_data(&stored, 100_000);
        assert!(messages.len() >= 10, "{} messages", messages.len());
        let mut ids = Vec::new();
        for m in &messages {
            assert!(m.len() <= 100_000, "message of {} bytes", m.len());
            let data = TracesData::decode(m.clone()).expect("valid TracesData");
            for rs in data.resource_spans {
                assert!(rs.resource.is_some());
                for ss in rs.scope_spans {
                    ids.extend(ss.spans.into_iter().map(|s| s.start_time_unix_nano));
                }
            }
        }
        assert_eq!(ids, (0..100).collect::<Vec<u64>>());
    }

    #[test]
    fn absent_resource_and_scope_stay_absent() {
        let g = Arc::new(ScopeGroup::default());
        let (stored, _) = span(&g, 1, "bare", 0);
        let data = TracesData::decode(encode_traces_data(&[stored], MAX_MESSAGE_BYTES)[0].clone())
            .expect("valid TracesData");
        assert!(data.resource_spans[0].resource.is_none());
        assert!(data.resource_spans[0].scope_spans[0].scope.is_none());
    }
}
