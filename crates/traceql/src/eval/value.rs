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
