//! Decoding a span for one query: the fields every span has (IDs, name,
//! kind, status, times), and of its attributes, events and links only those
//! the query reads ([`Projection`]).
//!
//! A metrics query that reads spans visits every span of its window, and
//! decoding a span whole (every attribute a `String` key and value, every
//! event and link) was most of its cost. The stored bytes are scanned in
//! place instead ([`Projection::span`]): an attribute is decoded only when
//! its key is one the query names, events and links only when the query
//! reads them. Anything the scan does not expect (a known field of another
//! wire type, a group, a name that is not UTF-8, a damaged length) makes it
//! give up, and the span is decoded whole as before, so an odd encoding
//! changes the cost, never the answer.
//!
//! What the query reads is all it can see: the evaluator reads span
//! attributes only by the names the query's fields give
//! ([`crate::eval::visit_query`] walks them all), and the projected span
//! holds exactly the whole span's attributes of those names, in order. Two
//! readings look at the whole list and take everything: `compare()`, which
//! counts every attribute of the spans it is given, and `span.x = nil`,
//! whose truth depends on whether the span has any attribute at all.

use std::sync::Arc;

use prost::Message as _;
use tracedb_proto::{common::v1::KeyValue, trace::v1 as otlp};

use super::{event, link, value, Origin, SpanData};
use crate::ast::{
    Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, MetricsFn, Query, Scope, Static,
};

/// What of each span a query reads, beyond the fields every span decodes to
/// and its resource and scope (decoded whole, once per trace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    /// The span attribute names read; `None` for every attribute.
    span_keys: Option<Vec<String>>,
    events: bool,
    links: bool,
}

impl Projection {
    /// Every attribute, event and link: a span decoded whole.
    pub fn all() -> Projection {
        Projection {
            span_keys: None,
            events: true,
            links: true,
        }
    }

    /// What `query` reads.
    pub fn of(query: &Query) -> Projection {
        if matches!(
            query.metrics.as_ref().map(|m| &m.function),
            Some(MetricsFn::Compare { .. })
        ) {
            return Projection::all();
        }
        let mut p = Projection {
            span_keys: Some(Vec::new()),
            events: false,
            links: false,
        };
        crate::eval::visit_query(query, &mut |e| match e {
            FieldExpr::Attribute(Attribute::Attr { scope, name }) => match scope {
                Scope::Span | Scope::Unscoped => {
                    if let Some(keys) = &mut p.span_keys {
                        if !keys.contains(name) {
                            keys.push(name.clone());
                        }
                    }
                }
                Scope::Event => p.events = true,
                Scope::Link => p.links = true,
                Scope::Resource | Scope::Instrumentation => {}
            },
            FieldExpr::Attribute(Attribute::Intrinsic(x)) => match x {
                Intrinsic::EventName | Intrinsic::EventTimeSinceStart => p.events = true,
                Intrinsic::LinkTraceId | Intrinsic::LinkSpanId => p.links = true,
                _ => {}
            },
            FieldExpr::Binary {
                op: BinaryOp::Cmp(CmpOp::Eq | CmpOp::Ne),
                lhs,
                rhs,
            } if is_span_nil(lhs, rhs) || is_span_nil(rhs, lhs) => p.span_keys = None,
            _ => {}
        });
        p
    }

    fn is_all(&self) -> bool {
        self.span_keys.is_none() && self.events && self.links
    }

    fn wants(&self, key: &[u8]) -> bool {
        match &self.span_keys {
            None => true,
            Some(keys) => keys.iter().any(|k| k.as_bytes() == key),
        }
    }

    /// The span `payload` encodes, with only what this projection reads;
    /// `None` when it reads everything or the bytes are not as expected
    /// (the caller then decodes the span whole).
    pub(super) fn span(&self, payload: &[u8], origin: &Arc<Origin>) -> Option<SpanData> {
        if self.is_all() {
            return None;
        }
        let mut c = Cursor { buf: payload };
        let (mut span_id, mut parent_id, mut name): (&[u8], &[u8], &[u8]) = (&[], &[], &[]);
        let (mut kind, mut start, mut end) = (0i32, 0u64, 0u64);
        let mut status: Option<otlp::Status> = None;
        let (mut attributes, mut events, mut links) = (Vec::new(), Vec::new(), Vec::new());
        while let Some((field, wire)) = c.key()? {
            match (field, wire) {
                (2, LEN) => span_id = c.bytes()?,
                (4, LEN) => parent_id = c.bytes()?,
                (5, LEN) => name = c.bytes()?,
                // prost reads an enum's varint as an `i32`, truncating.
                (6, VARINT) => kind = c.varint()? as i32,
                (7, I64) => start = c.fixed64()?,
                (8, I64) => end = c.fixed64()?,
                (9, LEN) => {
                    let kv = c.bytes()?;
                    if self.wants(key_of(kv)?) {
                        let kv = KeyValue::decode(kv).ok()?;
                        if let Some(v) = kv.value.and_then(value) {
                            attributes.push((kv.key, v));
                        }
                    }
                }
                (11, LEN) => {
                    let bytes = c.bytes()?;
                    if self.events {
                        events.push(event(otlp::span::Event::decode(bytes).ok()?));
                    }
                }
                (13, LEN) => {
                    let bytes = c.bytes()?;
                    if self.links {
                        links.push(link(otlp::span::Link::decode(bytes).ok()?));
                    }
                }
                // A message field sent twice merges, as prost merges it.
                (15, LEN) => status
                    .get_or_insert_with(otlp::Status::default)
                    .merge(c.bytes()?)
                    .ok()?,
                (1 | 3, LEN) | (10 | 12 | 14, VARINT) | (16, I32) => c.skip(wire)?,
                // A known field of another type, or field 0: prost refuses it.
                (0..=16, _) => return None,
                (_, wire) => c.skip(wire)?,
            }
        }
        let name = std::str::from_utf8(name).ok()?.to_owned();
        Some(super::finish(
            super::Parts {
                span_id,
                parent_id,
                name,
                kind,
                status,
                start,
                end,
            },
            attributes,
            events,
            links,
            origin.clone(),
        ))
    }
}

/// `lhs` is a span attribute (`span.x`) and `rhs` is `nil`.
fn is_span_nil(lhs: &FieldExpr, rhs: &FieldExpr) -> bool {
    matches!(
        (lhs, rhs),
        (
            FieldExpr::Attribute(Attribute::Attr {
                scope: Scope::Span,
                ..
            }),
            FieldExpr::Static(Static::Nil)
        )
    )
}

/// The key of an encoded `KeyValue` (the last one sent, as prost keeps it);
/// `None` when its fields are not as expected.
fn key_of(kv: &[u8]) -> Option<&[u8]> {
    let mut c = Cursor { buf: kv };
    let mut key: &[u8] = &[];
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, LEN) => key = c.bytes()?,
            (2, LEN) => c.skip(LEN)?,
            (0..=2, _) => return None,
            (_, wire) => c.skip(wire)?,
        }
    }
    Some(key)
}

const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const I32: u8 = 5;

/// A lenient protobuf reader over a message's bytes: `None` for anything
/// truncated or unexpected.
struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// The next field's number and wire type; `Some(None)` at the end.
    fn key(&mut self) -> Option<Option<(u64, u8)>> {
        if self.buf.is_empty() {
            return Some(None);
        }
        let key = self.varint()?;
        Some(Some((key >> 3, (key & 7) as u8)))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &b) in self.buf.iter().enumerate().take(10) {
            if i == 9 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Some(head)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        self.take(n)
    }

    fn fixed64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// Steps over a value of `wire` type; groups (3, 4) and unknown types
    /// are not expected.
    fn skip(&mut self, wire: u8) -> Option<()> {
        match wire {
            VARINT => self.varint().map(drop),
            I64 => self.take(8).map(drop),
            LEN => self.bytes().map(drop),
            I32 => self.take(4).map(drop),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
