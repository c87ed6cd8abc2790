//! A trace as the evaluator reads it: every span decoded from its stored
//! OTLP bytes, with its resource and instrumentation scope, and the tree the
//! parent links make.
//!
//! Conditions are evaluated on these decoded spans, never on a summary, so
//! an answer depends only on what was stored. Decoding is lenient where OTLP
//! is: an attribute whose value is empty or of a type TraceQL has no literal
//! for (bytes, key-value lists) reads as absent.

use std::{collections::HashMap, sync::Arc};

use prost::Message as _;
use tracedb_proto::{
    common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
    resource::v1::Resource,
    trace::v1 as otlp,
};

use crate::ast::{Kind, Status};

mod origins;
mod project;
pub use origins::{Origins, MAX_HELD_BYTES as ORIGINS_HELD_BYTES};
pub use project::Projection;

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// An array attribute: TraceQL compares each element.
    Array(Vec<Value>),
}

/// Attributes in the order they were sent. Lookups are linear: spans carry
/// a handful, and a map per span would cost more than it saves.
pub type Attributes = Vec<(String, Value)>;

/// The resource and scope spans were exported under, decoded once per
/// distinct pair in a trace.
#[derive(Debug, Default, PartialEq)]
pub struct Origin {
    pub resource: Attributes,
    pub scope_name: Option<String>,
    pub scope_version: Option<String>,
    pub scope: Attributes,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: String,
    pub time_unix_nano: u64,
    pub attributes: Attributes,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub attributes: Attributes,
}

/// One decoded span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanData {
    pub span_id: [u8; 8],
    /// `None` for a span without a parent (an empty or all-zero parent ID).
    pub parent_id: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub status: Status,
    pub status_message: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Attributes,
    pub events: Vec<Event>,
    pub links: Vec<Link>,
    pub origin: Arc<Origin>,
}

impl SpanData {
    pub fn duration_nanos(&self) -> u64 {
        self.end_unix_nano.saturating_sub(self.start_unix_nano)
    }

    /// The service: the resource's `service.name` when it is a string.
    pub fn service(&self) -> Option<&str> {
        match find(&self.origin.resource, "service.name") {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }
}

/// A whole trace, ready to be evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub trace_id: [u8; 16],
    /// Ordered by start time, then span ID (a stable order for answers).
    pub spans: Vec<SpanData>,
    /// For each span, the index of its parent when the parent is stored.
    pub parent: Vec<Option<usize>>,
    /// For each span, how many stored spans name it as their parent.
    pub child_count: Vec<u32>,
    /// The root span: the earliest span without a parent ID.
    pub root: Option<usize>,
    /// For each span, whether it is in the tree: a span without a parent ID,
    /// or a child of one in the tree. Structural relations hold only
    /// between spans in the tree (a span whose parent was never stored, and
    /// everything below it, has no place in it).
    pub in_tree: Vec<bool>,
    /// For each span, its nested-set numbers (left, right, parent's left),
    /// as Tempo gives them: see [`NestedSet`].
    pub nested: Vec<NestedSet>,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

/// Why stored bytes are not a span.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("span {index} of the trace: {source}")]
    Span {
        index: usize,
        source: prost::DecodeError,
    },
    #[error("a resource or scope of the trace: {0}")]
    Origin(#[from] prost::DecodeError),
}

/// A span's encoded resource and scope (empty when not sent).
type OriginBytes<'a> = (&'a [u8], &'a [u8]);

/// The encoded parts of one stored span, as the storage engine keeps them.
#[derive(Debug, Clone, Copy)]
pub struct EncodedSpan<'a> {
    /// `opentelemetry.proto.trace.v1.Span`.
    pub payload: &'a [u8],
    /// `opentelemetry.proto.resource.v1.Resource`, if it was sent.
    pub resource: Option<&'a [u8]>,
    /// `opentelemetry.proto.common.v1.InstrumentationScope`, if it was sent.
    pub scope: Option<&'a [u8]>,
}

impl Trace {
    /// Decodes the spans of one trace (any order).
    pub fn decode<'a>(
        trace_id: [u8; 16],
        spans: impl IntoIterator<Item = EncodedSpan<'a>>,
    ) -> Result<Trace, DecodeError> {
        Trace::decode_for(trace_id, spans, &Projection::all())
    }

    /// Decodes the spans of one trace (any order) with only the attributes,
    /// events and links `projection` reads: the trace answers the query the
    /// projection was made of exactly as the whole trace does.
    pub fn decode_for<'a>(
        trace_id: [u8; 16],
        spans: impl IntoIterator<Item = EncodedSpan<'a>>,
        projection: &Projection,
    ) -> Result<Trace, DecodeError> {
        Trace::decode_with(trace_id, spans, projection, &mut Origins::new())
    }

    /// [`Trace::decode_for`], the resources and scopes taken from
    /// `origins`, or decoded into it: a caller decoding many traces keeps
    /// one for them all.
    pub fn decode_with<'a>(
        trace_id: [u8; 16],
        spans: impl IntoIterator<Item = EncodedSpan<'a>>,
        projection: &Projection,
        origins: &mut Origins,
    ) -> Result<Trace, DecodeError> {
        // Spans of one resource and scope most often follow one another,
        // sharing their stored bytes: the last origin is checked by address
        // (then contents) before any hash of the bytes.
        let mut last: Option<(OriginBytes<'_>, Arc<Origin>)> = None;
        let same = |a: &[u8], b: &[u8]| std::ptr::eq(a, b) || a == b;
        let mut out = Vec::new();
        for (index, encoded) in spans.into_iter().enumerate() {
            let key = (
                encoded.resource.unwrap_or_default(),
                encoded.scope.unwrap_or_default(),
            );
            let origin = match &last {
                Some(((r, s), o)) if same(r, key.0) && same(s, key.1) => o.clone(),
                _ => {
                    let o = origins.get(key.0, key.1)?;
                    last = Some((key, o.clone()));
                    o
                }
            };
            let span = match projection.span(encoded.payload, &origin) {
                Some(span) => span,
                None => span_data(
                    otlp::Span::decode(encoded.payload)
                        .map_err(|source| DecodeError::Span { index, source })?,
                    origin,
                ),
            };
            out.push(span);
        }
        Ok(Trace::new(trace_id, out))
    }

    /// A trace of decoded spans (any order): links parents and children.
    pub fn new(trace_id: [u8; 16], mut spans: Vec<SpanData>) -> Trace {
        spans.sort_by_key(|s| (s.start_unix_nano, s.span_id));
        // The first span stored with an ID is the one a child's link names.
        let mut by_id: HashMap<[u8; 8], usize> = HashMap::with_capacity(spans.len());
        for (i, s) in spans.iter().enumerate() {
            by_id.entry(s.span_id).or_insert(i);
        }
        let parent: Vec<Option<usize>> = spans
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.parent_id
                    .and_then(|p| by_id.get(&p).copied())
                    .filter(|&p| p != i)
            })
            .collect();
        let mut child_count = vec![0u32; spans.len()];
        for p in parent.iter().flatten() {
            child_count[*p] += 1;
        }
        let root = spans.iter().position(|s| s.parent_id.is_none());
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
        for (i, p) in parent.iter().enumerate() {
            if let Some(p) = p {
                children[*p].push(i);
            }
        }
        let mut in_tree = vec![false; spans.len()];
        let mut stack: Vec<usize> = (0..spans.len())
            .filter(|&i| spans[i].parent_id.is_none())
            .collect();
        while let Some(i) = stack.pop() {
            if !std::mem::replace(&mut in_tree[i], true) {
                stack.extend(children[i].iter().copied());
            }
        }
        let start = spans.iter().map(|s| s.start_unix_nano).min().unwrap_or(0);
        let end = spans.iter().map(|s| s.end_unix_nano).max().unwrap_or(0);
        let nested = nested_sets(&spans, &parent, &children);
        Trace {
            trace_id,
            spans,
            parent,
            child_count,
            root,
            in_tree,
            nested,
            start_unix_nano: start,
            end_unix_nano: end,
        }
    }

    pub fn duration_nanos(&self) -> u64 {
        self.end_unix_nano.saturating_sub(self.start_unix_nano)
    }

    /// The root span's service and name, when the root is stored.
    pub fn root_service(&self) -> Option<&str> {
        self.root.and_then(|r| self.spans[r].service())
    }

    pub fn root_name(&self) -> Option<&str> {
        self.root.map(|r| self.spans[r].name.as_str())
    }
}

/// A span's place in a depth-first walk of its trace's tree (Tempo's
/// `nestedSetLeft`, `nestedSetRight` and `nestedSetParent`): one counter
/// from 1 numbers each span on the way down (`left`) and on the way back up
/// (`right`), so a span's descendants are the spans whose `left` lies
/// between its `left` and `right`; `parent` is the parent's `left`, -1 for
/// a root. Roots are walked in start order, and so are the children of a
/// span (Tempo walks them in the order they were sent, which tracedb does
/// not keep: the numbers may differ from Tempo's, the relations they
/// describe do not). A span outside the tree (its parent never stored, or
/// below such a span) has 0 for all three, as in Tempo, and so has every
/// span of a trace where more than two spans share one span ID.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NestedSet {
    pub left: i64,
    pub right: i64,
    pub parent: i64,
}

fn nested_sets(
    spans: &[SpanData],
    parent: &[Option<usize>],
    children: &[Vec<usize>],
) -> Vec<NestedSet> {
    let mut out = vec![NestedSet::default(); spans.len()];
    let mut ids: Vec<[u8; 8]> = spans.iter().map(|s| s.span_id).collect();
    ids.sort_unstable();
    if ids.windows(3).any(|w| w[0] == w[2]) {
        return out;
    }
    let mut counter = 1i64;
    // (span, whether its children were pushed); spans are in start order,
    // and so is each children list, so reversing keeps that order.
    let mut stack: Vec<(usize, bool)> = Vec::new();
    for root in (0..spans.len()).filter(|&i| spans[i].parent_id.is_none()) {
        stack.push((root, false));
        while let Some((i, expanded)) = stack.pop() {
            if expanded {
                out[i].right = counter;
                counter += 1;
                continue;
            }
            if out[i].left != 0 {
                // Reached twice (a parent cycle through shared IDs): once.
                continue;
            }
            out[i].left = counter;
            counter += 1;
            out[i].parent = match parent[i] {
                Some(p) if spans[i].parent_id.is_some() => out[p].left,
                _ => -1,
            };
            stack.push((i, true));
            for &c in children[i].iter().rev() {
                if spans[c].parent_id.is_some() && out[c].left == 0 {
                    stack.push((c, false));
                }
            }
        }
    }
    out
}

/// The first attribute named `key`.
pub fn find<'a>(attributes: &'a Attributes, key: &str) -> Option<&'a Value> {
    attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn decode_origin(resource: Option<&[u8]>, scope: Option<&[u8]>) -> Result<Origin, DecodeError> {
    let resource = match resource {
        Some(bytes) => Resource::decode(bytes)?.attributes,
        None => Vec::new(),
    };
    let scope = match scope {
        Some(bytes) => Some(InstrumentationScope::decode(bytes)?),
        None => None,
    };
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    Ok(Origin {
        resource: attributes(resource),
        scope_name: scope.as_ref().and_then(|s| non_empty(s.name.clone())),
        scope_version: scope.as_ref().and_then(|s| non_empty(s.version.clone())),
        scope: scope.map(|s| attributes(s.attributes)).unwrap_or_default(),
    })
}

fn span_data(span: otlp::Span, origin: Arc<Origin>) -> SpanData {
    finish(
        Parts {
            span_id: &span.span_id[..],
            parent_id: &span.parent_span_id[..],
            name: span.name,
            kind: span.kind,
            status: span.status,
            start: span.start_time_unix_nano,
            end: span.end_time_unix_nano,
        },
        attributes(span.attributes),
        span.events.into_iter().map(event).collect(),
        span.links.into_iter().map(link).collect(),
        origin,
    )
}

/// The fields every decoded span has, as read from its bytes.
struct Parts<'a> {
    span_id: &'a [u8],
    parent_id: &'a [u8],
    name: String,
    kind: i32,
    status: Option<otlp::Status>,
    start: u64,
    end: u64,
}

fn finish(
    parts: Parts<'_>,
    attributes: Attributes,
    events: Vec<Event>,
    links: Vec<Link>,
    origin: Arc<Origin>,
) -> SpanData {
    let id8 = |b: &[u8]| -> Option<[u8; 8]> {
        let id: [u8; 8] = b.try_into().ok()?;
        (id != [0; 8]).then_some(id)
    };
    let (status, status_message) = match parts.status {
        Some(s) => (Status::from_code(s.code), s.message),
        None => (Status::Unset, String::new()),
    };
    SpanData {
        span_id: id8(parts.span_id).unwrap_or_default(),
        parent_id: id8(parts.parent_id),
        kind: Kind::from_code(parts.kind),
        name: parts.name,
        status,
        status_message,
        start_unix_nano: parts.start,
        end_unix_nano: parts.end,
        attributes,
        events,
        links,
        origin,
    }
}

fn event(e: otlp::span::Event) -> Event {
    Event {
        name: e.name,
        time_unix_nano: e.time_unix_nano,
        attributes: attributes(e.attributes),
    }
}

fn link(l: otlp::span::Link) -> Link {
    Link {
        trace_id: l.trace_id.to_vec(),
        span_id: l.span_id.to_vec(),
        attributes: attributes(l.attributes),
    }
}

fn attributes(kvs: Vec<KeyValue>) -> Attributes {
    kvs.into_iter()
        .filter_map(|kv| Some((kv.key, value(kv.value?)?)))
        .collect()
}

fn value(v: AnyValue) -> Option<Value> {
    Some(match v.value? {
        any_value::Value::StringValue(s) => Value::Str(s),
        any_value::Value::BoolValue(b) => Value::Bool(b),
        any_value::Value::IntValue(i) => Value::Int(i),
        any_value::Value::DoubleValue(f) => Value::Float(f),
        any_value::Value::ArrayValue(a) => {
            Value::Array(a.values.into_iter().filter_map(value).collect())
        }
        _ => return None,
    })
}

/// Lowercase hex, as TraceQL compares IDs.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: u8, parent: Option<u8>, start: u64) -> SpanData {
        SpanData {
            span_id: [id; 8],
            parent_id: parent.map(|p| [p; 8]),
            name: String::new(),
            kind: Kind::Server,
            status: Status::Unset,
            status_message: String::new(),
            start_unix_nano: start,
            end_unix_nano: start + 1,
            attributes: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
            origin: Arc::new(Origin::default()),
        }
    }

    fn nested(t: &Trace, id: u8) -> (i64, i64, i64) {
        let i = t
            .spans
            .iter()
            .position(|s| s.span_id == [id; 8])
            .expect("span");
        let n = t.nested[i];
        (n.left, n.right, n.parent)
    }

    #[test]
    fn nested_sets_number_the_tree_depth_first_and_leave_orphans_at_zero() {
        // A(1) has children B(2) and C(3); B has D(4); E(5)'s parent 9 was
        // never stored, and F(6) is below E.
        let t = Trace::new(
            [1; 16],
            vec![
                span(3, Some(1), 40),
                span(1, None, 10),
                span(4, Some(2), 30),
                span(2, Some(1), 20),
                span(5, Some(9), 50),
                span(6, Some(5), 60),
            ],
        );
        assert_eq!(nested(&t, 1), (1, 8, -1));
        assert_eq!(nested(&t, 2), (2, 5, 1));
        assert_eq!(nested(&t, 4), (3, 4, 2));
        assert_eq!(nested(&t, 3), (6, 7, 1));
        assert_eq!(nested(&t, 5), (0, 0, 0));
        assert_eq!(nested(&t, 6), (0, 0, 0));
        // Two roots: the counter runs on from the first to the second.
        let t = Trace::new(
            [1; 16],
            vec![span(1, None, 10), span(2, None, 20), span(3, Some(2), 30)],
        );
        assert_eq!(nested(&t, 1), (1, 2, -1));
        assert_eq!(nested(&t, 2), (3, 6, -1));
        assert_eq!(nested(&t, 3), (4, 5, 3));
        // Three spans sharing an ID: Tempo gives up on the whole trace.
        let t = Trace::new(
            [1; 16],
            vec![
                span(1, None, 10),
                span(2, Some(1), 20),
                span(2, Some(1), 21),
                span(2, Some(1), 22),
            ],
        );
        assert!(t.nested.iter().all(|n| *n == NestedSet::default()));
    }
}
