//! OTLP/JSON: an `ExportTraceServiceRequest` in the protobuf JSON mapping with
//! OTLP's exceptions, turned into its protobuf encoding so that it takes exactly
//! the scan, validation and storage path of a protobuf request.
//!
//! What OTLP/JSON looks like, and what this accepts:
//! - keys in lowerCamelCase (`resourceSpans`, `traceId`); the original
//!   snake_case names are accepted too, as the protobuf JSON mapping requires;
//! - trace and span IDs as hex strings (OTLP's exception to base64), any case;
//! - enums (`kind`, `status.code`) as integers, or by their names;
//! - 64-bit integers (`startTimeUnixNano`, `intValue`) as strings or numbers;
//! - `bytesValue` in base64;
//! - `null` for a field means the field is absent; unknown fields are ignored.
//!
//! Correctness matters more than speed here: the JSON is parsed into a
//! `serde_json::Value`, then into prost messages, then encoded. Protobuf is the
//! fast path.

use base64::Engine as _;
use bytes::Bytes;
use prost::Message as _;
use serde_json::{Map, Value};
use tracedb_proto::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{
        any_value, AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
    },
    resource::v1::Resource,
    trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status},
};

/// How deeply `AnyValue`s may nest in JSON; deeper requests are refused here,
/// before the scanner would refuse them anyway.
const MAX_DEPTH: usize = crate::scan::MAX_ANY_VALUE_DEPTH;

/// Why an OTLP/JSON body was refused.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all.
    #[error("invalid JSON: {0}")]
    Syntax(#[from] serde_json::Error),
    /// JSON, but a field has a value OTLP does not allow.
    #[error("{path}: {problem}")]
    Field { path: String, problem: String },
}

/// Converts an OTLP/JSON `ExportTraceServiceRequest` to its protobuf encoding.
pub fn json_to_protobuf(json: &[u8]) -> Result<Bytes, JsonError> {
    let value: Value = serde_json::from_slice(json)?;
    let request = export_request(&value, &Path::root())?;
    Ok(request.encode_to_vec().into())
}

/// Where in the document a value sits, for error messages.
#[derive(Clone)]
struct Path(String);

impl Path {
    fn root() -> Path {
        Path(String::new())
    }

    fn field(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    fn error(&self, problem: impl Into<String>) -> JsonError {
        JsonError::Field {
            path: if self.0.is_empty() {
                "request".to_string()
            } else {
                self.0.clone()
            },
            problem: problem.into(),
        }
    }
}

type R<T> = Result<T, JsonError>;

/// A JSON object, or the error that says the value is not one.
fn object<'a>(value: &'a Value, path: &Path) -> R<&'a Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| path.error(format!("expected an object, found {}", kind_of(value))))
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A field by its lowerCamelCase name or its proto name; `null` is absent.
fn get<'a>(obj: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel)
        .or_else(|| obj.get(snake))
        .filter(|v| !v.is_null())
}

/// A repeated field: each element converted with `f`.
fn repeated<T>(
    obj: &Map<String, Value>,
    camel: &str,
    snake: &str,
    path: &Path,
    mut f: impl FnMut(&Value, &Path) -> R<T>,
) -> R<Vec<T>> {
    let Some(value) = get(obj, camel, snake) else {
        return Ok(Vec::new());
    };
    let path = path.field(camel);
    let items = value
        .as_array()
        .ok_or_else(|| path.error(format!("expected an array, found {}", kind_of(value))))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| f(item, &path.index(i)))
        .collect()
}

/// A singular message field.
fn message<T>(
    obj: &Map<String, Value>,
    camel: &str,
    snake: &str,
    path: &Path,
    f: impl FnOnce(&Value, &Path) -> R<T>,
) -> R<Option<T>> {
    get(obj, camel, snake)
        .map(|v| f(v, &path.field(camel)))
        .transpose()
}

fn string(obj: &Map<String, Value>, camel: &str, snake: &str, path: &Path) -> R<String> {
    match get(obj, camel, snake) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(path
            .field(camel)
            .error(format!("expected a string, found {}", kind_of(other)))),
    }
}

/// An unsigned integer of up to 64 bits: a JSON number or a decimal string.
fn unsigned(obj: &Map<String, Value>, camel: &str, snake: &str, path: &Path) -> R<u64> {
    let Some(value) = get(obj, camel, snake) else {
        return Ok(0);
    };
    let parsed = match value {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| integral_f64(n.as_f64()?)?.try_into().ok()),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| {
        path.field(camel).error(format!(
            "expected an unsigned integer (number or decimal string), found {value}"
        ))
    })
}

fn unsigned32(obj: &Map<String, Value>, camel: &str, snake: &str, path: &Path) -> R<u32> {
    let v = unsigned(obj, camel, snake, path)?;
    u32::try_from(v).map_err(|_| {
        path.field(camel)
            .error(format!("{v} does not fit in 32 bits"))
    })
}

/// A signed 64-bit integer: a JSON number or a decimal string.
fn signed(value: &Value, path: &Path) -> R<i64> {
    let parsed = match value {
        Value::Number(n) => n.as_i64().or_else(|| integral_f64(n.as_f64()?)),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| {
        path.error(format!(
            "expected a 64-bit integer (number or decimal string), found {value}"
        ))
    })
}

/// `1e3` is a valid JSON spelling of 1000; fractions are not integers.
fn integral_f64(f: f64) -> Option<i64> {
    (f.fract() == 0.0 && f.abs() < 9.2e18).then_some(f as i64)
}

fn boolean(value: &Value, path: &Path) -> R<bool> {
    value
        .as_bool()
        .ok_or_else(|| path.error(format!("expected true or false, found {value}")))
}

/// A double: a JSON number, or the strings the protobuf JSON mapping allows.
fn double(value: &Value, path: &Path) -> R<f64> {
    let parsed = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.trim().parse::<f64>().ok(),
        },
        _ => None,
    };
    parsed.ok_or_else(|| path.error(format!("expected a number, found {value}")))
}

/// An enum: its number, or one of its names.
fn enumeration(
    obj: &Map<String, Value>,
    camel: &str,
    path: &Path,
    from_name: fn(&str) -> Option<i32>,
) -> R<i32> {
    let Some(value) = get(obj, camel, camel) else {
        return Ok(0);
    };
    let parsed = match value {
        Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(s) => from_name(s),
        _ => None,
    };
    parsed.ok_or_else(|| {
        path.field(camel)
            .error(format!("expected an enum number or name, found {value}"))
    })
}

/// Trace and span IDs: hex, as OTLP/JSON specifies. An empty string is an
/// empty ID (which the scanner then rejects per span, as it would in protobuf).
fn hex_id(obj: &Map<String, Value>, camel: &str, snake: &str, path: &Path) -> R<Bytes> {
    let Some(value) = get(obj, camel, snake) else {
        return Ok(Bytes::new());
    };
    let path = path.field(camel);
    let s = value
        .as_str()
        .ok_or_else(|| path.error(format!("expected a hex string, found {}", kind_of(value))))?;
    decode_hex(s)
        .map(Bytes::from)
        .ok_or_else(|| path.error(format!("{s:?} is not an even number of hex digits")))
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// `bytes` fields other than IDs: base64, standard or URL-safe, padded or not.
fn base64_bytes(value: &Value, path: &Path) -> R<Bytes> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let s = value.as_str().ok_or_else(|| {
        path.error(format!(
            "expected a base64 string, found {}",
            kind_of(value)
        ))
    })?;
    let trimmed = s.trim_end_matches('=');
    STANDARD_NO_PAD
        .decode(trimmed)
        .or_else(|_| URL_SAFE_NO_PAD.decode(trimmed))
        .map(Bytes::from)
        .map_err(|e| path.error(format!("not base64: {e}")))
}

fn export_request(value: &Value, path: &Path) -> R<ExportTraceServiceRequest> {
    let obj = object(value, path)?;
    Ok(ExportTraceServiceRequest {
        resource_spans: repeated(obj, "resourceSpans", "resource_spans", path, resource_spans)?,
    })
}

fn resource_spans(value: &Value, path: &Path) -> R<ResourceSpans> {
    let obj = object(value, path)?;
    Ok(ResourceSpans {
        resource: message(obj, "resource", "resource", path, resource)?,
        scope_spans: repeated(obj, "scopeSpans", "scope_spans", path, scope_spans)?,
        schema_url: string(obj, "schemaUrl", "schema_url", path)?,
    })
}

fn resource(value: &Value, path: &Path) -> R<Resource> {
    let obj = object(value, path)?;
    Ok(Resource {
        attributes: attributes(obj, path)?,
        dropped_attributes_count: dropped_attributes(obj, path)?,
        entity_refs: repeated(obj, "entityRefs", "entity_refs", path, entity_ref)?,
    })
}

fn entity_ref(value: &Value, path: &Path) -> R<EntityRef> {
    let obj = object(value, path)?;
    let strings = |camel: &str, snake: &str| {
        repeated(obj, camel, snake, path, |v, p| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| p.error(format!("expected a string, found {}", kind_of(v))))
        })
    };
    Ok(EntityRef {
        schema_url: string(obj, "schemaUrl", "schema_url", path)?,
        r#type: string(obj, "type", "type", path)?,
        id_keys: strings("idKeys", "id_keys")?,
        description_keys: strings("descriptionKeys", "description_keys")?,
    })
}

fn scope_spans(value: &Value, path: &Path) -> R<ScopeSpans> {
    let obj = object(value, path)?;
    Ok(ScopeSpans {
        scope: message(obj, "scope", "scope", path, scope)?,
        spans: repeated(obj, "spans", "spans", path, span)?,
        schema_url: string(obj, "schemaUrl", "schema_url", path)?,
    })
}

fn scope(value: &Value, path: &Path) -> R<InstrumentationScope> {
    let obj = object(value, path)?;
    Ok(InstrumentationScope {
        name: string(obj, "name", "name", path)?,
        version: string(obj, "version", "version", path)?,
        attributes: attributes(obj, path)?,
        dropped_attributes_count: dropped_attributes(obj, path)?,
    })
}

fn attributes(obj: &Map<String, Value>, path: &Path) -> R<Vec<KeyValue>> {
    repeated(obj, "attributes", "attributes", path, |v, p| {
        key_value(v, p, 1)
    })
}

fn dropped_attributes(obj: &Map<String, Value>, path: &Path) -> R<u32> {
    unsigned32(
        obj,
        "droppedAttributesCount",
        "dropped_attributes_count",
        path,
    )
}

fn span(value: &Value, path: &Path) -> R<Span> {
    let obj = object(value, path)?;
    Ok(Span {
        trace_id: hex_id(obj, "traceId", "trace_id", path)?,
        span_id: hex_id(obj, "spanId", "span_id", path)?,
        trace_state: string(obj, "traceState", "trace_state", path)?,
        parent_span_id: hex_id(obj, "parentSpanId", "parent_span_id", path)?,
        flags: unsigned32(obj, "flags", "flags", path)?,
        name: string(obj, "name", "name", path)?,
        kind: enumeration(obj, "kind", path, |name| {
            span::SpanKind::from_str_name(name).map(|k| k as i32)
        })?,
        start_time_unix_nano: unsigned(obj, "startTimeUnixNano", "start_time_unix_nano", path)?,
        end_time_unix_nano: unsigned(obj, "endTimeUnixNano", "end_time_unix_nano", path)?,
        attributes: attributes(obj, path)?,
        dropped_attributes_count: dropped_attributes(obj, path)?,
        events: repeated(obj, "events", "events", path, event)?,
        dropped_events_count: unsigned32(obj, "droppedEventsCount", "dropped_events_count", path)?,
        links: repeated(obj, "links", "links", path, link)?,
        dropped_links_count: unsigned32(obj, "droppedLinksCount", "dropped_links_count", path)?,
        status: message(obj, "status", "status", path, status)?,
    })
}

fn event(value: &Value, path: &Path) -> R<span::Event> {
    let obj = object(value, path)?;
    Ok(span::Event {
        time_unix_nano: unsigned(obj, "timeUnixNano", "time_unix_nano", path)?,
        name: string(obj, "name", "name", path)?,
        attributes: attributes(obj, path)?,
        dropped_attributes_count: dropped_attributes(obj, path)?,
    })
}

fn link(value: &Value, path: &Path) -> R<span::Link> {
    let obj = object(value, path)?;
    Ok(span::Link {
        trace_id: hex_id(obj, "traceId", "trace_id", path)?,
        span_id: hex_id(obj, "spanId", "span_id", path)?,
        trace_state: string(obj, "traceState", "trace_state", path)?,
        attributes: attributes(obj, path)?,
        dropped_attributes_count: dropped_attributes(obj, path)?,
        flags: unsigned32(obj, "flags", "flags", path)?,
    })
}

fn status(value: &Value, path: &Path) -> R<Status> {
    let obj = object(value, path)?;
    Ok(Status {
        message: string(obj, "message", "message", path)?,
        code: enumeration(obj, "code", path, |name| {
            tracedb_proto::trace::v1::status::StatusCode::from_str_name(name).map(|c| c as i32)
        })?,
    })
}

fn key_value(value: &Value, path: &Path, depth: usize) -> R<KeyValue> {
    let obj = object(value, path)?;
    Ok(KeyValue {
        key: string(obj, "key", "key", path)?,
        value: message(obj, "value", "value", path, |v, p| any_value(v, p, depth))?,
    })
}

/// `AnyValue`: an object with at most one of the value fields. An empty object
/// is an empty value, as in protobuf.
fn any_value(value: &Value, path: &Path, depth: usize) -> R<AnyValue> {
    if depth > MAX_DEPTH {
        return Err(path.error(format!("AnyValue nested deeper than {MAX_DEPTH}")));
    }
    let obj = object(value, path)?;
    let mut found = None;
    for (camel, snake) in [
        ("stringValue", "string_value"),
        ("boolValue", "bool_value"),
        ("intValue", "int_value"),
        ("doubleValue", "double_value"),
        ("arrayValue", "array_value"),
        ("kvlistValue", "kvlist_value"),
        ("bytesValue", "bytes_value"),
    ] {
        let Some(v) = get(obj, camel, snake) else {
            continue;
        };
        if found.is_some() {
            return Err(path.error("more than one value field in an AnyValue"));
        }
        let p = path.field(camel);
        found = Some(match camel {
            "stringValue" => any_value::Value::StringValue(
                v.as_str()
                    .ok_or_else(|| p.error(format!("expected a string, found {}", kind_of(v))))?
                    .to_string(),
            ),
            "boolValue" => any_value::Value::BoolValue(boolean(v, &p)?),
            "intValue" => any_value::Value::IntValue(signed(v, &p)?),
            "doubleValue" => any_value::Value::DoubleValue(double(v, &p)?),
            "arrayValue" => {
                let o = object(v, &p)?;
                any_value::Value::ArrayValue(ArrayValue {
                    values: repeated(o, "values", "values", &p, |v, p| any_value(v, p, depth + 1))?,
                })
            }
            "kvlistValue" => {
                let o = object(v, &p)?;
                any_value::Value::KvlistValue(KeyValueList {
                    values: repeated(o, "values", "values", &p, |v, p| key_value(v, p, depth + 1))?,
                })
            }
            _ => any_value::Value::BytesValue(base64_bytes(v, &p)?),
        });
    }
    Ok(AnyValue { value: found })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(json: &str) -> ExportTraceServiceRequest {
        let bytes = json_to_protobuf(json.as_bytes()).expect("valid OTLP/JSON");
        ExportTraceServiceRequest::decode(bytes).expect("protobuf")
    }

    #[test]
    fn converts_every_span_field() {
        let request = convert(
            r#"{"resourceSpans":[{
              "resource":{"attributes":[{"key":"service.name","value":{"stringValue":"cart"}}],
                          "droppedAttributesCount":1},
              "schemaUrl":"https://example.com/r",
              "scopeSpans":[{
                "scope":{"name":"lib","version":"1.0"},
                "schemaUrl":"https://example.com/s",
                "spans":[{
                  "traceId":"5B8EFFF798038103D269B633813FC60C",
                  "spanId":"eee19b7ec3c1b174",
                  "parentSpanId":"",
                  "traceState":"k=v",
                  "flags":257,
                  "name":"GET /cart",
                  "kind":2,
                  "startTimeUnixNano":"1544712660000000000",
                  "endTimeUnixNano":1544712661000000000,
                  "attributes":[
                    {"key":"i","value":{"intValue":"-42"}},
                    {"key":"n","value":{"intValue":7}},
                    {"key":"d","value":{"doubleValue":"NaN"}},
                    {"key":"b","value":{"boolValue":true}},
                    {"key":"raw","value":{"bytesValue":"AAEC"}},
                    {"key":"arr","value":{"arrayValue":{"values":[{"stringValue":"x"},{"doubleValue":1.5}]}}},
                    {"key":"kv","value":{"kvlistValue":{"values":[{"key":"a","value":{"intValue":"1"}}]}}},
                    {"key":"empty","value":{}}
                  ],
                  "droppedAttributesCount":2,
                  "events":[{"timeUnixNano":"1544712660500000000","name":"retry",
                             "attributes":[{"key":"why","value":{"stringValue":"timeout"}}]}],
                  "droppedEventsCount":3,
                  "links":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",
                            "flags":1,"attributes":[]}],
                  "droppedLinksCount":4,
                  "status":{"code":"STATUS_CODE_ERROR","message":"boom"},
                  "someFutureField":{"ignored":true}
                }]
              }]
            }]}"#,
        );
        let rs = &request.resource_spans[0];
        assert_eq!(rs.schema_url, "https://example.com/r");
        let resource = rs.resource.as_ref().expect("resource");
        assert_eq!(resource.dropped_attributes_count, 1);
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().expect("scope").name, "lib");
        let s = &ss.spans[0];
        assert_eq!(
            s.trace_id[..],
            [
                0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33, 0x81, 0x3f,
                0xc6, 0x0c
            ]
        );
        assert_eq!(
            s.span_id[..],
            [0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74]
        );
        assert!(s.parent_span_id.is_empty());
        assert_eq!(s.flags, 257);
        assert_eq!(s.kind, span::SpanKind::Server as i32);
        assert_eq!(s.start_time_unix_nano, 1_544_712_660_000_000_000);
        assert_eq!(s.end_time_unix_nano, 1_544_712_661_000_000_000);
        let values: Vec<_> = s.attributes.iter().map(|kv| kv.value.clone()).collect();
        assert_eq!(
            values[0].as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::IntValue(-42))
        );
        assert_eq!(
            values[1].as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::IntValue(7))
        );
        assert!(matches!(
            values[2].as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::DoubleValue(d)) if d.is_nan()
        ));
        assert_eq!(
            values[4].as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::BytesValue(Bytes::from_static(&[0, 1, 2])))
        );
        assert_eq!(values[7], Some(AnyValue { value: None }));
        assert_eq!(s.dropped_attributes_count, 2);
        assert_eq!(s.events[0].time_unix_nano, 1_544_712_660_500_000_000);
        assert_eq!(s.dropped_events_count, 3);
        assert_eq!(s.links[0].span_id[..], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(s.links[0].flags, 1);
        assert_eq!(s.dropped_links_count, 4);
        let status = s.status.as_ref().expect("status");
        assert_eq!((status.code, status.message.as_str()), (2, "boom"));
    }

    #[test]
    fn accepts_snake_case_and_null() {
        let request = convert(
            r#"{"resource_spans":[{"resource":null,"scope_spans":[{"spans":[
                {"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0102030405060708",
                 "start_time_unix_nano":5,"status":null}]}]}]}"#,
        );
        let s = &request.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(s.start_time_unix_nano, 5);
        assert_eq!(s.span_id.len(), 8);
        assert!(s.status.is_none());
        assert!(request.resource_spans[0].resource.is_none());
    }

    #[test]
    fn empty_object_is_an_empty_request() {
        assert_eq!(convert("{}").resource_spans.len(), 0);
    }

    #[test]
    fn refuses_what_is_not_otlp_json() {
        let err = |json: &str| {
            json_to_protobuf(json.as_bytes())
                .expect_err(json)
                .to_string()
        };
        assert!(err("{\"resourceSpans\": [").starts_with("invalid JSON"));
        assert!(err("[]").contains("expected an object"));
        assert_eq!(
            err(r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}"#),
            "resourceSpans[0].scopeSpans[0].spans[0].traceId: \"xyz\" is not an even number of hex digits"
        );
        assert!(err(
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"-1"}]}]}]}"#
        )
        .contains("startTimeUnixNano"));
        assert!(err(
            r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"intValue":1,"stringValue":"x"}}]}}]}"#
        )
        .contains("more than one value field"));
        assert!(err(
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":"SPAN_KIND_NOPE"}]}]}]}"#
        )
        .contains("kind"));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut v = String::from(r#"{"stringValue":"x"}"#);
        for _ in 0..(MAX_DEPTH + 1) {
            v = format!(r#"{{"arrayValue":{{"values":[{v}]}}}}"#);
        }
        let json = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"k","value":{v}}}]}}}}]}}"#
        );
        let e = json_to_protobuf(json.as_bytes()).expect_err("too deep");
        assert!(e.to_string().contains("nested deeper"), "{e}");
    }
}
