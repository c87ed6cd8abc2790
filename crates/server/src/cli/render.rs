//! Renders a trace for the terminal as a waterfall: the span tree indented by
//! parent, each span's service, name, kind, status, offset and duration, a bar
//! placing it on the trace's time axis; error spans marked with `!` in the
//! first column; spans whose parent is not stored (a partial trace) under a
//! `[missing parent ...]` line rather than hidden; on request, each span's
//! attributes, events and links.

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

/// The trace as text, one block per span, children under their parents;
/// `attributes` adds each span's attributes, events and links.
pub fn render_trace(trace_id: &TraceId, messages: &[TracesData], attributes: bool) -> String {
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

    // Children by parent. Roots have no parent; orphans have one that is not
    // stored, and are shown under a marker for that parent.
    let ids: HashSet<&[u8]> = rows.iter().map(|r| &r.span.span_id[..]).collect();
    let mut children: HashMap<&[u8], Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    let mut missing: Vec<(&[u8], Vec<usize>)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let parent = &row.span.parent_span_id[..];
        if parent.is_empty() || parent.iter().all(|&b| b == 0) || parent == &row.span.span_id[..] {
            roots.push(i);
        } else if !ids.contains(parent) {
            match missing.iter_mut().find(|(p, _)| *p == parent) {
                Some((_, kids)) => kids.push(i),
                None => missing.push((parent, vec![i])),
            }
        } else {
            children.entry(parent).or_default().push(i);
        }
    }
    let mut printed = HashSet::new();
    let walk = |out: &mut String, printed: &mut HashSet<usize>, top: Vec<usize>, depth: usize| {
        let mut stack: Vec<(usize, usize)> = top.into_iter().rev().map(|i| (i, depth)).collect();
        while let Some((i, depth)) = stack.pop() {
            if !printed.insert(i) {
                continue;
            }
            render_span(out, &rows[i], depth, start, total, attributes);
            if let Some(kids) = children.get(&rows[i].span.span_id[..]) {
                stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
            }
        }
    };
    walk(&mut out, &mut printed, roots, 0);
    for (parent, kids) in missing {
        let _ = writeln!(
            out,
            " {:width$} [missing parent {}]",
            "",
            hex(parent),
            width = BAR_WIDTH
        );
        walk(&mut out, &mut printed, kids, 1);
    }
    // Spans in a parent cycle reach no root: print them rather than drop them.
    let rest: Vec<usize> = (0..rows.len()).filter(|i| !printed.contains(i)).collect();
    walk(&mut out, &mut printed, rest, 0);
    out
}

fn render_span(
    out: &mut String,
    row: &Row<'_>,
    depth: usize,
    trace_start: u64,
    total: u64,
    attributes_too: bool,
) {
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
    let is_error = span
        .status
        .as_ref()
        .is_some_and(|s| s.code == StatusCode::Error as i32);
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
        "{mark}{bar} {indent}{service}: {name}{kind}{status}  +{offset} {length}  span {span_id}",
        mark = if is_error { '!' } else { ' ' },
        service = row.service,
        name = span.name,
        offset = duration(offset),
        length = duration(length),
        span_id = hex(&span.span_id),
    );
    if !attributes_too {
        return;
    }
    let pad = format!(" {:width$} {indent}    ", "", width = BAR_WIDTH);
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

/// The `tracedb search` table: one line per trace.
pub fn render_search(traces: &[tracedb_proto::query::v1::TraceSummary]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<32}  {:<24}  {:>10}  {:>6}  {:>6}  root",
        "trace", "start (UTC)", "duration", "spans", "errors"
    );
    for t in traces {
        let root = if t.root_service.is_empty() {
            "[root span not stored]".to_string()
        } else {
            format!("{}: {}", t.root_service, t.root_name)
        };
        let _ = writeln!(
            out,
            "{:<32}  {:<24}  {:>10}  {:>6}  {:>6}  {root}",
            hex(&t.trace_id),
            utc(t.start_time_unix_nano),
            duration(t.duration_nanos),
            t.span_count,
            t.error_span_count,
        );
    }
    if traces.is_empty() {
        out.push_str("no traces found\n");
    }
    out
}

/// Unix nanoseconds as `YYYY-MM-DD HH:MM:SS.mmm`.
fn utc(nanos: u64) -> String {
    let t = tracedb_proto::time::Utc::from_unix_nanos(nanos);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
        t.year, t.month, t.day, t.hour, t.minute, t.second, t.millis
    )
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
        let text = render_trace(&TraceId([1; 16]), &[data], false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("3 spans, 1 service,"), "{text}");
        assert!(lines[1].contains(" checkout: root"), "{text}");
        assert!(lines[2].contains("   checkout: child"), "{text}");
        assert!(lines[3].contains("     checkout: grandchild"), "{text}");
        assert!(
            lines[1].starts_with(&format!(" {}", "#".repeat(BAR_WIDTH))),
            "root spans the whole axis: {text}"
        );
    }

    fn service(name: &str, spans: Vec<Span>) -> ResourceSpans {
        ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(Value::StringValue(name.into())),
                    }),
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: None,
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }
    }

    /// A fixed trace: a root calling two services, one child failing, and
    /// two spans whose parent (span 09..) was never stored, one under the other.
    fn golden_trace() -> TracesData {
        let ms = 1_000_000;
        let t0 = 1_700_000_000_000_000_000;
        let mut charge = span(3, Some(1), "charge", t0 + 12 * ms, t0 + 40 * ms);
        charge.kind = SpanKind::Client as i32;
        charge.status = Some(tracedb_proto::trace::v1::Status {
            message: "card declined".into(),
            code: StatusCode::Error as i32,
        });
        charge.attributes = vec![KeyValue {
            key: "amount".into(),
            value: Some(AnyValue {
                value: Some(Value::IntValue(42)),
            }),
        }];
        let mut root = span(1, None, "GET /checkout", t0, t0 + 100 * ms);
        root.kind = SpanKind::Server as i32;
        TracesData {
            resource_spans: vec![
                service(
                    "frontend",
                    vec![root, span(2, Some(1), "render", t0 + 60 * ms, t0 + 95 * ms)],
                ),
                service(
                    "payments",
                    vec![
                        charge,
                        span(4, Some(9), "late retry", t0 + 70 * ms, t0 + 80 * ms),
                        span(5, Some(4), "db write", t0 + 72 * ms, t0 + 75 * ms),
                    ],
                ),
            ],
        }
    }

    #[test]
    fn waterfall_matches_the_golden_file() {
        let golden = include_str!("../../tests/golden/waterfall.txt");
        let text = render_trace(&TraceId([1; 16]), &[golden_trace()], false);
        assert_eq!(text, golden, "rendered:\n{text}");
        let with_attributes = render_trace(&TraceId([1; 16]), &[golden_trace()], true);
        assert!(with_attributes.contains("amount=42"), "{with_attributes}");
        assert!(!text.contains("amount=42"));
    }
}
