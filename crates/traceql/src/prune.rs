//! What a trace must have for a query to match it, in terms a search index
//! can check without reading spans: [`needs`].
//!
//! Each [`SpanNeed`] says that some one span of the trace has a given
//! service, name and kind, and whether the trace must hold an error span.
//! They are necessary, never sufficient: a trace the index rules out by them
//! cannot match, and every trace they let through is evaluated on its spans.
//! Only conditions that a span can satisfy in exactly one way are used: a
//! string literal compared with `=` to `resource.service.name` or to `name`,
//! a kind compared with `=` to `kind`, `status = error`, and a `span.`,
//! `resource.` or unscoped attribute compared with `=` to a literal (which only a value
//! of the literal's own type equals; a float literal of zero, which equals
//! `-0.0` too, is left out).

mod raw;
pub use raw::RawNeeds;

use crate::ast::{
    Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, Kind, Pipeline, Query, Scope, SpansetExpr,
    SpansetOp, Stage, Static, Status, Structure,
};

/// The longest value the search index keeps (`tracedb_lsm`'s
/// `index::wire::MAX_VALUE_BYTES`): a service named by a longer one is not
/// among the operations the index can check.
pub const MAX_INDEXED_VALUE_BYTES: usize = 256;

/// Some span of the trace has all of these (`None`: any).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SpanNeed {
    pub service: Option<String>,
    pub name: Option<String>,
    pub kind: Option<Kind>,
    /// The span's status is error.
    pub error: bool,
    /// Attributes some span of the trace has (each compared with `=` to a
    /// literal of its own type; the index keeps attributes per trace, not
    /// per span).
    pub attributes: Vec<AttrNeed>,
}

/// A `span.`, `resource.` or unscoped attribute equal to a literal, which
/// only a value of the literal's type equals.
#[derive(Debug, Clone, PartialEq, Hash, Eq)]
pub struct AttrNeed {
    /// `Scope::Span`, `Scope::Resource`, or `Scope::Unscoped` (the span's or
    /// its resource's).
    pub scope: Scope,
    pub name: String,
    /// The literal's text as the index writes values (numbers and bools
    /// rendered), and its type.
    pub text: String,
    pub kind: LiteralKind,
}

/// The types of literal an attribute need compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LiteralKind {
    Str,
    Int,
    Float,
    Bool,
}

impl SpanNeed {
    pub fn is_empty(&self) -> bool {
        *self == SpanNeed::default()
    }
}

/// Needs that every trace the query matches satisfies, each on some span
/// (empty: nothing the index can check).
pub fn needs(query: &Query) -> Vec<SpanNeed> {
    let mut out = Vec::new();
    pipeline(&query.pipeline, &mut out);
    out.retain(|n| !n.is_empty());
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out.dedup();
    out
}

/// Every stage keeps a subset of the spans the stage before kept, so the
/// spanset stages each add their needs.
fn pipeline(p: &Pipeline, out: &mut Vec<SpanNeed>) {
    for stage in &p.stages {
        if let Stage::Spansets(s) = stage {
            spansets(s, out);
        }
    }
}

fn spansets(s: &SpansetExpr, out: &mut Vec<SpanNeed>) {
    match s {
        SpansetExpr::Filter(e) => {
            let mut need = SpanNeed::default();
            conjuncts(e, &mut need);
            out.push(need);
        }
        SpansetExpr::Pipeline(p) => pipeline(p, out),
        SpansetExpr::Binary { op, lhs, rhs } => match op {
            // Both sides have spans.
            SpansetOp::And | SpansetOp::Structural(_, Structure::Plain | Structure::Union) => {
                spansets(lhs, out);
                spansets(rhs, out);
            }
            // The right side's spans not in the relation: the left may be empty.
            SpansetOp::Structural(_, Structure::Not) => spansets(rhs, out),
            SpansetOp::Or => {}
        },
    }
}

/// Adds to `need` what the top-level `&&` chain of `e` requires of its span.
fn conjuncts(e: &FieldExpr, need: &mut SpanNeed) {
    let FieldExpr::Binary { op, lhs, rhs } = e else {
        return;
    };
    match op {
        BinaryOp::And => {
            conjuncts(lhs, need);
            conjuncts(rhs, need);
        }
        BinaryOp::Cmp(CmpOp::Eq) => {
            let (attr, value) = match (lhs.as_ref(), rhs.as_ref()) {
                (FieldExpr::Attribute(a), FieldExpr::Static(v))
                | (FieldExpr::Static(v), FieldExpr::Attribute(a)) => (a, v),
                _ => return,
            };
            // The index keeps values of up to 256 bytes: a longer service is
            // not among its operations (it is an attribute need below).
            match (attr, value) {
                (
                    Attribute::Attr {
                        scope: Scope::Resource,
                        name,
                    },
                    Static::Str(s),
                ) if name == "service.name" && s.len() <= MAX_INDEXED_VALUE_BYTES => {
                    need.service = Some(s.clone());
                }
                (Attribute::Intrinsic(Intrinsic::Name), Static::Str(s)) => {
                    need.name = Some(s.clone());
                }
                (Attribute::Intrinsic(Intrinsic::Kind), Static::Kind(k)) => need.kind = Some(*k),
                (Attribute::Intrinsic(Intrinsic::Status), Static::Status(Status::Error)) => {
                    need.error = true;
                }
                (
                    Attribute::Attr {
                        scope: scope @ (Scope::Span | Scope::Resource | Scope::Unscoped),
                        name,
                    },
                    literal,
                ) => {
                    let (text, kind) = match literal {
                        Static::Str(s) => (s.clone(), LiteralKind::Str),
                        Static::Int(i) => (i.to_string(), LiteralKind::Int),
                        Static::Float(f) if f.is_finite() && *f != 0.0 => {
                            (f.to_string(), LiteralKind::Float)
                        }
                        Static::Bool(b) => (b.to_string(), LiteralKind::Bool),
                        _ => return,
                    };
                    need.attributes.push(AttrNeed {
                        scope: *scope,
                        name: name.clone(),
                        text,
                        kind,
                    });
                }
                _ => {}
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(q: &str) -> Vec<(Scope, String, String, LiteralKind)> {
        needs(&crate::parse(q).expect("valid"))
            .into_iter()
            .flat_map(|n| n.attributes)
            .map(|a| (a.scope, a.name, a.text, a.kind))
            .collect()
    }

    #[test]
    fn attributes_compared_with_a_literal_are_needs() {
        for (q, scope) in [
            ("{ span.http.status_code = 500 }", Scope::Span),
            ("{ resource.http.status_code = 500 }", Scope::Resource),
            ("{ .http.status_code = 500 }", Scope::Unscoped),
        ] {
            assert_eq!(
                attrs(q),
                [(
                    scope,
                    "http.status_code".to_owned(),
                    "500".to_owned(),
                    LiteralKind::Int
                )],
                "{q}"
            );
        }
        assert_eq!(attrs(r#"{ span.a = "x" } && { .b = true }"#).len(), 2);
        // Not necessary, so not needs: another operator, an alternative, a
        // negation, an event, a zero float (which -0.0 equals too).
        for q in [
            "{ span.a != 1 }",
            "{ span.a = 1 || span.b = 2 }",
            "{ span.a = 1 } || { span.b = 2 }",
            "{ span.a = 1 } !> { }",
            "{ event.a = 1 }",
            "{ span.a = 0.0 }",
        ] {
            assert!(attrs(q).is_empty(), "{q}: {:?}", attrs(q));
        }
    }
}
