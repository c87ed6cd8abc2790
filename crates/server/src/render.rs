//! Renders a trace for the terminal: the span tree indented by parent, each
//! span's service, name, kind, status, offset and duration, a bar placing it on
//! the trace's time axis, then its attributes, events and links.

use std::{
    collections::{HashMap, HashSet},
    fmt::Write,
};

use tracedb_lsm::TraceId;
use tracedb_proto::{
    common::v1::{any_value::Value, AnyValue, KeyValue},
    trace::v1::{span::SpanKind, status::StatusCode, Span, TracesData},
};

const BAR_WIDTH: usize = 24;

struct Row<'a> {
    service: &'a str,
    span: &'a Span,
}

/// The trace as text, one block per span, children under their parents.
pub fn render_trace(trace_id: &TraceId, messages: &[TracesData]) -> String {
    let mut rows = Vec::new();
    let mut services = HashSet::new();
    for data in messages {
        for rs in &data.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(Value::StringValue(s)) => Some(s.as_str()),
                    _ => None,
                })
                .unwrap_or("unknown_service");
            services.insert(service);
            for ss in &rs.scope_spans {
                rows.extend(ss.spans.iter().map(|span| Row { service, span }));
            }
        }
    }
    rows.sort_by_key(|r| r.span.start_time_unix_nano);
    let start = rows
        .iter()
        .map(|r| r.span.start_time_unix_nano)
        .min()
        .unwrap_or(0);
    let end = rows
        .iter()
        .map(|r| r.span.end_time_unix_nano)
        .max()
        .unwrap_or(start);
    let total = end.saturating_sub(start).max(1);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "trace {trace_id}: {} span{}, {} service{}, {}",
        rows.len(),
        plural(rows.len()),
        services.len(),
        plural(services.len()),
        duration(total)
    );

    // Children by parent; spans whose parent is not in the trace are roots.
    let ids: HashSet<&[u8]> = rows.iter().map(|r| &r.span.span_id[..]).collect();
    let mut children: HashMap<&[u8], Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let parent = &row.span.parent_span_id[..];
        if parent.is_empty() || !ids.contains(parent) || parent == &row.span.span_id[..] {
            roots.push(i);
        } else {
            children.entry(parent).or_default().push(i);
        }
    }
    let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
    let mut printed = HashSet::new();
    while let Some((i, depth)) = stack.pop() {
        if !printed.insert(i) {
            continue;
        }
        render_span(&mut out, &rows[i], depth, start, total);
        if let Some(kids) = children.get(&rows[i].span.span_id[..]) {
            stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
        }
    }
    out
}

fn render_span(out: &mut String, row: &Row<'_>, depth: usize, trace_start: u64, total: u64) {
    let span = row.span;
    let offset = span.start_time_unix_nano.saturating_sub(trace_start);
    let length = span
        .end_time_unix_nano
        .saturating_sub(span.start_time_unix_nano);
    let from = (offset as u128 * BAR_WIDTH as u128 / total as u128) as usize;
    let width = ((length as u128 * BAR_WIDTH as u128).div_ceil(total as u128) as usize).max(1);
    let bar: String = (0..BAR_WIDTH)
        .map(|c| {
            if c >= from && c < from + width {
                '#'
            } else {
                '.'
            }
        })
        .collect();
    let indent = "  ".repeat(depth);
    let kind = SpanKind::try_from(span.kind).map_or("?", |k| match k {
        SpanKind::Unspecified => "",
        SpanKind::Internal => " internal",
        SpanKind::Server => " server",
        SpanKind::Client => " client",
        SpanKind::Producer => " producer",
        SpanKind::Consumer => " consumer",
    });
    let status = match span
        .status
        .as_ref()
        .map(|s| (StatusCode::try_from(s.code), &s.message))
    {
        Some((Ok(StatusCode::Error), msg)) if msg.is_empty() => " ERROR".to_string(),
        Some((Ok(StatusCode::Error), msg)) => format!(" ERROR: {msg}"),
        Some((Ok(StatusCode::Ok), _)) => " ok".to_string(),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "{bar} {indent}{service}: {name}{kind}{status}  +{offset} {length}  span {span_id}",
        service = row.service,
        name = span.name,
        offset = duration(offset),
        length = duration(length),
        span_id = hex(&span.span_id),
    );
    let pad = format!("{:width$} {indent}    ", "", width = BAR_WIDTH);
    if !span.attributes.is_empty() {
        let _ = writeln!(out, "{pad}{}", attributes(&span.attributes));
    }
    for event in &span.events {
        let at = event.time_unix_nano.saturating_sub(trace_start);
        let _ = writeln!(
            out,
            "{pad}event +{} {} {}",
            duration(at),
            event.name,
            attributes(&event.attributes)
        );
    }
    for link in &span.links {
        let _ = writeln!(
            out,
            "{pad}link {}/{} {}",
            hex(&link.trace_id),
            hex(&link.span_id),
            attributes(&link.attributes)
        );
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn attributes(kvs: &[KeyValue]) -> String {
    let parts: Vec<String> = kvs
        .iter()
        .map(|kv| {
            format!(
                "{}={}",
                kv.key,
                kv.value.as_ref().map_or(String::new(), value)
            )
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(", "))
    }
}

fn value(v: &AnyValue) -> String {
    match &v.value {
        None => String::new(),
        Some(Value::StringValue(s)) => format!("{s:?}"),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BytesValue(b)) => format!("0x{}", hex(b)),
        Some(Value::ArrayValue(a)) => {
            format!(
                "[{}]",
                a.values.iter().map(value).collect::<Vec<_>>().join(", ")
            )
        }
        Some(Value::KvlistValue(l)) => attributes(&l.values),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A duration in nanoseconds, in the unit that reads best.
fn duration(nanos: u64) -> String {
    match nanos {
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{:.1}µs", n as f64 / 1e3),
        n if n < 1_000_000_000 => format!("{:.2}ms", n as f64 / 1e6),
        n => format!("{:.3}s", n as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use tracedb_proto::{
        common::v1::InstrumentationScope,
        resource::v1::Resource,
        trace::v1::{ResourceSpans, ScopeSpans},
    };

    use super::*;

    fn span(id: u8, parent: Option<u8>, name: &str, start: u64, end: u64) -> Span {
        Span {
            trace_id: vec![1; 16].into(),
            span_id: vec![id; 8].into(),
            parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default().into(),
            name: name.into(),
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            ..Default::default()
        }
    }

    #[test]
    fn children_are_indented_under_their_parents() {
        let resource = Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(Value::StringValue("checkout".into())),
                }),
            }],
            ..Default::default()
        };
        let data = TracesData {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope::default()),
                    spans: vec![
                        span(3, Some(2), "grandchild", 300, 400),
                        span(1, None, "root", 0, 1_000),
                        span(2, Some(1), "child", 100, 500),
                    ],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let text = render_trace(&TraceId([1; 16]), &[data]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("3 spans, 1 service,"), "{text}");
        assert!(lines[1].contains(" checkout: root"), "{text}");
        assert!(lines[2].contains("   checkout: child"), "{text}");
        assert!(lines[3].contains("     checkout: grandchild"), "{text}");
        assert!(
            lines[1].starts_with(&"#".repeat(BAR_WIDTH)),
            "root spans the whole axis: {text}"
        );
    }
}
