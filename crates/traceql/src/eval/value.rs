//! A field's value on one span as a metrics query reads it
//! ([`Compiled::field_value`]).

use super::{Compiled, Eval, Val};
use crate::{
    ast::{Attribute, Kind, Status},
    trace::Trace,
};

/// A field's value on one span, as a metrics query groups and measures it.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// Nanoseconds.
    Duration(i64),
    Status(Status),
    Kind(Kind),
}

impl Compiled {
    /// The value of `field` on span `i` of `trace`; `None` when the span
    /// lacks it. Of several values (an array, one per event) the first.
    pub fn field_value(&self, trace: &Trace, i: usize, field: &Attribute) -> Option<FieldValue> {
        let v = Eval {
            trace,
            regexes: &self.regexes,
            typed_presence: self.typed_presence,
        }
        .attribute(field, i);
        fn of(v: Val<'_>) -> Option<FieldValue> {
            Some(match v {
                Val::Nil => return None,
                Val::Bool(b) => FieldValue::Bool(b),
                Val::Int(i) => FieldValue::Int(i),
                Val::Float(f) => FieldValue::Float(f),
                Val::Str(s) => FieldValue::Str(s.into_owned()),
                Val::Dur(d) => FieldValue::Duration(d),
                Val::Status(s) => FieldValue::Status(s),
                Val::Kind(k) => FieldValue::Kind(k),
                Val::Many(vs) => return vs.into_iter().find_map(of),
            })
        }
        of(v)
    }
}

impl Compiled {
    /// [`Compiled::field_value`] as `by()` groups it: an attribute Tempo
    /// keeps in a typed column ([`crate::analysis::column_type`]) is nil on a
    /// span whose value is of another type, as `!= nil` says of it (unless
    /// the query was compiled with any-type presence,
    /// [`Compiled::with_presence_of_any_type`]): Tempo keeps that value in
    /// its generic attributes, which the column's name does not reach.
    pub fn by_value(&self, trace: &Trace, i: usize, field: &Attribute) -> Option<FieldValue> {
        if let Attribute::Attr { scope, name } = field {
            let span = &trace.spans[i];
            if super::in_typed_column(span, *scope, name, self.typed_presence) == Some(false) {
                return None;
            }
        }
        self.field_value(trace, i, field)
    }
}

impl Compiled {
    /// The fields `compare()` counts on span `i` of `trace`, with their
    /// values: the span's name, status, status message, kind and child
    /// count, its trace's root name and service, its instrumentation scope's
    /// name and version, and every resource, scope and span attribute it
    /// carries. Array attributes are left out (no single value stands for
    /// them), as are the fields whose values are unique or positions
    /// (durations, IDs, start times, nested-set numbers), as Tempo leaves them.
    pub fn compare_fields(&self, trace: &Trace, i: usize) -> Vec<(Attribute, FieldValue)> {
        use crate::ast::{Intrinsic::*, Scope};
        let span = &trace.spans[i];
        let mut out = Vec::new();
        for x in [
            Name,
            Status,
            StatusMessage,
            Kind,
            ChildCount,
            RootName,
            RootServiceName,
            InstrumentationName,
            InstrumentationVersion,
        ] {
            let a = Attribute::Intrinsic(x);
            if let Some(v) = self.field_value(trace, i, &a) {
                out.push((a, v));
            }
        }
        let lists = [
            (Scope::Resource, &span.origin.resource),
            (Scope::Instrumentation, &span.origin.scope),
            (Scope::Span, &span.attributes),
        ];
        for (scope, list) in lists {
            for (name, value) in list.iter() {
                let v = match value {
                    crate::trace::Value::Str(s) => FieldValue::Str(s.clone()),
                    crate::trace::Value::Int(n) => FieldValue::Int(*n),
                    crate::trace::Value::Float(f) => FieldValue::Float(*f),
                    crate::trace::Value::Bool(b) => FieldValue::Bool(*b),
                    crate::trace::Value::Array(_) => continue,
                };
                let a = Attribute::Attr {
                    scope,
                    name: name.clone(),
                };
                // A name sent twice counts once, with its first value.
                if !out.iter().any(|(b, _)| *b == a) {
                    out.push((a, v));
                }
            }
        }
        out
    }

    /// Whether the condition `e` holds on span `i` of `trace`.
    pub fn holds(&self, trace: &Trace, i: usize, e: &crate::ast::FieldExpr) -> bool {
        Eval {
            trace,
            regexes: &self.regexes,
            typed_presence: self.typed_presence,
        }
        .field(e, i)
            == Val::Bool(true)
    }
}
