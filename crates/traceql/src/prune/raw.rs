//! The [`needs`](super::needs) of a query checked on a trace's stored bytes,
//! before any span is decoded: [`RawNeeds`].
//!
//! A query that reads the spans of every trace in its window (a metrics
//! query on an attribute the cells do not count, on most of a store's
//! traces) spent most of its time decoding spans that could not match:
//! `{ span.tenant = "acme" }` matches one root span in five, and every
//! span of every trace was decoded to find them. A string attribute equal
//! to a literal is stored as its key's and its value's UTF-8 bytes, as
//! sent, inside the span's encoded payload (or its resource's), so a span
//! whose bytes hold neither cannot match it; a trace where no span holds
//! what some need asks is passed over without decoding. The bytes only
//! rule out: every trace they let through is decoded and evaluated as
//! before, so the answer is the one reading every span gives.

use memchr::memmem::Finder;

use super::{needs, AttrNeed, LiteralKind, SpanNeed};
use crate::{
    analysis::{per_span_only, span_fields},
    ast::{Attribute, Intrinsic, Query, Scope, SpansetExpr, Stage},
    trace::EncodedSpan,
};

/// Byte strings that some one stored span of each trace the query matches
/// holds, per [`SpanNeed`]: a trace that fails one is not decoded.
#[derive(Debug)]
pub struct RawNeeds {
    /// One entry per need that names bytes: all its checks hold on one span.
    needs: Vec<Vec<Check>>,
}

/// Byte strings that one encoded message of a span holds together.
#[derive(Debug)]
struct Check {
    place: Place,
    finders: Vec<Finder<'static>>,
}

/// Where a [`Check`]'s bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The span's encoded payload (its name, its attributes).
    Span,
    /// Its encoded resource.
    Resource,
    /// The payload, or else the resource (an unscoped attribute: TraceQL
    /// reads the span's, then its resource's).
    Either,
}

impl RawNeeds {
    /// The bytes `query`'s needs name; `None` when they name none (every
    /// trace would pass).
    pub fn of(query: &Query) -> Option<RawNeeds> {
        let needs: Vec<Vec<Check>> = needs(query)
            .iter()
            .map(checks)
            .filter(|c| !c.is_empty())
            .collect();
        (!needs.is_empty()).then_some(RawNeeds { needs })
    }

    /// [`RawNeeds::of`] a query whose every match holds them on its own
    /// bytes: whether a span matches depends on that span alone
    /// ([`per_span_only`]: a query tier relies on the same) and on nothing
    /// of its place in its trace's tree (no `nestedSet` field is read), and
    /// its spans pass one spanset filter. A span whose bytes fail them
    /// ([`RawNeeds::span_may_match`]) then matches nothing, and the trace's
    /// other spans are judged the same without it: a trace may be decoded
    /// without such spans. `None` for any other query.
    pub fn of_each_span(query: &Query) -> Option<RawNeeds> {
        let one_filter = matches!(
            query.pipeline.stages.first(),
            Some(Stage::Spansets(SpansetExpr::Filter(_)))
        );
        let tree = |a: &&Attribute| {
            matches!(
                a,
                Attribute::Intrinsic(
                    Intrinsic::NestedSetParent
                        | Intrinsic::NestedSetLeft
                        | Intrinsic::NestedSetRight
                )
            )
        };
        if !one_filter || !per_span_only(query) || span_fields(query)?.iter().any(tree) {
            return None;
        }
        RawNeeds::of(query)
    }

    /// Whether this stored span may be one a query of
    /// [`RawNeeds::of_each_span`] matches: it holds the bytes of every need.
    pub fn span_may_match(&self, span: &EncodedSpan<'_>) -> bool {
        self.needs
            .iter()
            .all(|need| need.iter().all(|check| check.holds(span)))
    }

    /// Whether the trace these stored spans make up may match: for each
    /// need, some span holds its bytes. `false` only when the query matches
    /// no span of them.
    pub fn may_match<'a, I>(&self, spans: I) -> bool
    where
        I: Iterator<Item = EncodedSpan<'a>> + Clone,
    {
        self.needs.iter().all(|need| {
            spans
                .clone()
                .any(|span| need.iter().all(|check| check.holds(&span)))
        })
    }
}

impl Check {
    fn holds(&self, span: &EncodedSpan<'_>) -> bool {
        let all_in = |bytes: &[u8]| self.finders.iter().all(|f| f.find(bytes).is_some());
        let resource = || span.resource.is_some_and(all_in);
        match self.place {
            Place::Span => all_in(span.payload),
            Place::Resource => resource(),
            Place::Either => all_in(span.payload) || resource(),
        }
    }
}

/// What one need asks of a span's bytes: its service's name in its
/// resource, its span name in its payload, each attribute's key (and a
/// string's value) where its scope keeps them. Kinds and statuses are
/// varints that any span may hold as bytes, and are left to the decoder.
fn checks(need: &SpanNeed) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(service) = &need.service {
        out.push(Check::new(Place::Resource, &["service.name", service]));
    }
    if let Some(name) = &need.name {
        out.push(Check::new(Place::Span, &[name]));
    }
    for AttrNeed {
        scope,
        name,
        text,
        kind,
    } in &need.attributes
    {
        let place = match scope {
            Scope::Span => Place::Span,
            Scope::Resource => Place::Resource,
            Scope::Unscoped => Place::Either,
            // `needs` names no other scope; nothing is asked of it.
            _ => continue,
        };
        // A number's or a bool's stored form is not its text: only its key.
        match kind {
            LiteralKind::Str => out.push(Check::new(place, &[text, name])),
            LiteralKind::Int | LiteralKind::Float | LiteralKind::Bool => {
                out.push(Check::new(place, &[name]))
            }
        }
    }
    out
}

impl Check {
    fn new(place: Place, strings: &[&str]) -> Check {
        Check {
            place,
            finders: strings
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| Finder::new(s.as_bytes()).into_owned())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
