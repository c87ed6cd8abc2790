//! OTLP/JSON encoding of `TracesData`: the protobuf JSON mapping with OTLP's
//! exceptions (trace and span IDs as hex, not base64; enums as numbers;
//! 64-bit integers as strings; fields at their default value left out).
//! Used by the Tempo API's JSON bodies and `tracedb get --json`.

use base64::Engine as _;
use serde_json::{json, Map, Value};
use tracedb_proto::{
    common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
    resource::v1::Resource,
    trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status, TracesData},
};

/// `{"resourceSpans": [...]}`.
pub fn traces_data(data: &TracesData) -> Value {
    json!({ "resourceSpans": data.resource_spans.iter().map(resource_spans).collect::<Vec<_>>() })
}

/// One `ResourceSpans`.
pub fn resource_spans(rs: &ResourceSpans) -> Value {
    let mut m = Map::new();
    if let Some(r) = &rs.resource {
        m.insert("resource".into(), resource(r));
    }
    m.insert(
        "scopeSpans".into(),
        rs.scope_spans.iter().map(scope_spans).collect(),
    );
    put_str(&mut m, "schemaUrl", &rs.schema_url);
    Value::Object(m)
}

fn resource(r: &Resource) -> Value {
    let mut m = Map::new();
    put_attrs(&mut m, &r.attributes);
    put_u32(&mut m, "droppedAttributesCount", r.dropped_attributes_count);
    Value::Object(m)
}

fn scope_spans(ss: &ScopeSpans) -> Value {
    let mut m = Map::new();
    if let Some(s) = &ss.scope {
        m.insert("scope".into(), scope(s));
    }
    m.insert("spans".into(), ss.spans.iter().map(span).collect());
    put_str(&mut m, "schemaUrl", &ss.schema_url);
    Value::Object(m)
}

fn scope(s: &InstrumentationScope) -> Value {
    let mut m = Map::new();
    put_str(&mut m, "name", &s.name);
    put_str(&mut m, "version", &s.version);
    put_attrs(&mut m, &s.attributes);
    put_u32(&mut m, "droppedAttributesCount", s.dropped_attributes_count);
    Value::Object(m)
}

fn span(s: &Span) -> Value {
    let mut m = Map::new();
    m.insert("traceId".into(), hex(&s.trace_id).into());
    m.insert("spanId".into(), hex(&s.span_id).into());
    put_str(&mut m, "traceState", &s.trace_state);
    if !s.parent_span_id.is_empty() {
        m.insert("parentSpanId".into(), hex(&s.parent_span_id).into());
    }
    put_u32(&mut m, "flags", s.flags);
    m.insert("name".into(), s.name.clone().into());
    if s.kind != 0 {
        m.insert("kind".into(), s.kind.into());
    }
    put_u64(&mut m, "startTimeUnixNano", s.start_time_unix_nano);
    put_u64(&mut m, "endTimeUnixNano", s.end_time_unix_nano);
    put_attrs(&mut m, &s.attributes);
    put_u32(&mut m, "droppedAttributesCount", s.dropped_attributes_count);
    if !s.events.is_empty() {
        m.insert("events".into(), s.events.iter().map(event).collect());
    }
    put_u32(&mut m, "droppedEventsCount", s.dropped_events_count);
    if !s.links.is_empty() {
        m.insert("links".into(), s.links.iter().map(link).collect());
    }
    put_u32(&mut m, "droppedLinksCount", s.dropped_links_count);
    if let Some(st) = &s.status {
        m.insert("status".into(), status(st));
    }
    Value::Object(m)
}

fn event(e: &span::Event) -> Value {
    let mut m = Map::new();
    put_u64(&mut m, "timeUnixNano", e.time_unix_nano);
    put_str(&mut m, "name", &e.name);
    put_attrs(&mut m, &e.attributes);
    put_u32(&mut m, "droppedAttributesCount", e.dropped_attributes_count);
    Value::Object(m)
}

fn link(l: &span::Link) -> Value {
    let mut m = Map::new();
    m.insert("traceId".into(), hex(&l.trace_id).into());
    m.insert("spanId".into(), hex(&l.span_id).into());
    put_str(&mut m, "traceState", &l.trace_state);
    put_attrs(&mut m, &l.attributes);
    put_u32(&mut m, "droppedAttributesCount", l.dropped_attributes_count);
    put_u32(&mut m, "flags", l.flags);
    Value::Object(m)
}

fn status(s: &Status) -> Value {
    let mut m = Map::new();
    put_str(&mut m, "message", &s.message);
    if s.code != 0 {
        m.insert("code".into(), s.code.into());
    }
    Value::Object(m)
}

fn key_value(kv: &KeyValue) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), kv.key.clone().into());
    m.insert(
        "value".into(),
        kv.value.as_ref().map_or_else(|| json!({}), any_value_json),
    );
    Value::Object(m)
}

fn any_value_json(v: &AnyValue) -> Value {
    match &v.value {
        None => json!({}),
        Some(any_value::Value::StringValue(s)) => json!({ "stringValue": s }),
        Some(any_value::Value::BoolValue(b)) => json!({ "boolValue": b }),
        Some(any_value::Value::IntValue(i)) => json!({ "intValue": i.to_string() }),
        Some(any_value::Value::DoubleValue(d)) => json!({ "doubleValue": d }),
        Some(any_value::Value::BytesValue(b)) => {
            json!({ "bytesValue": base64::engine::general_purpose::STANDARD.encode(b) })
        }
        Some(any_value::Value::ArrayValue(a)) => {
            json!({ "arrayValue": { "values": a.values.iter().map(any_value_json).collect::<Vec<_>>() } })
        }
        Some(any_value::Value::KvlistValue(l)) => {
            json!({ "kvlistValue": { "values": l.values.iter().map(key_value).collect::<Vec<_>>() } })
        }
    }
}

fn put_attrs(m: &mut Map<String, Value>, attrs: &[KeyValue]) {
    if !attrs.is_empty() {
        m.insert("attributes".into(), attrs.iter().map(key_value).collect());
    }
}

fn put_str(m: &mut Map<String, Value>, key: &str, v: &str) {
    if !v.is_empty() {
        m.insert(key.into(), v.into());
    }
}

fn put_u32(m: &mut Map<String, Value>, key: &str, v: u32) {
    if v != 0 {
        m.insert(key.into(), v.into());
    }
}

fn put_u64(m: &mut Map<String, Value>, key: &str, v: u64) {
    if v != 0 {
        m.insert(key.into(), v.to_string().into());
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}
