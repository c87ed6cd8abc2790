//! Jaeger's structured filter (`TraceQueryParameters.filter`, RFC 0005) as a
//! TraceQL span condition: the part tracedb evaluates exactly, and a refusal
//! naming the rest (INVALID_ARGUMENT), never a looser or ignored condition.
//!
//! A filter holds or not for one span, as one TraceQL spanset filter does:
//!
//! - `and`, `or` over conditions;
//! - `eq`, `gt`, `gte`, `lt`, `lte`, `regex`, `exists` and `in` over an
//!   attribute of a level: `span`, `resource`, `scope` (OTLP's
//!   instrumentation scope), `event` (some event of the span carries it),
//!   or no level (the span's or its resource's: either value may satisfy
//!   the condition, so both are asked);
//! - `eq`, `ne`, the ordered comparisons and `in` over the span's built-in
//!   fields `name`, `duration` (a Go duration such as `1.5ms`), `kind` and
//!   `status` (`regex` over `name`).
//!
//! An attribute compared with a constant without a type matches a stored
//! value of any type that the text spells (`"500"` finds the string and
//! the int), as Jaeger's tags are matched; a typed constant matches values
//! of its type (an int and a double compare as numbers).
//!
//! Refused, because one condition over several values (an attribute at two
//! levels, a span's events) or a negation would need an evaluation TraceQL
//! does not give exactly: `not`, `ne` and `not_in` over an attribute,
//! `some`, `phrase`, `fulltext`, the `link` level, and every other
//! built-in field.

use tracedb_proto::jaeger::expression::v1::{
    expression::Term, AttributeReference, Call, Expression, FieldReference, List,
};
use tracedb_traceql::ast::{
    Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, Kind, Scope, Static, Status,
};

/// The levels a filter's attribute may name here.
pub const LEVELS: &[&str] = &["span", "resource", "scope", "event"];
/// The operators a filter may use here (some only over some operands: see
/// the module documentation).
pub const OPERATORS: &[&str] = &[
    "and", "or", "eq", "ne", "gt", "gte", "lt", "lte", "regex", "exists", "in",
];

/// Why a filter is refused: said to the client as INVALID_ARGUMENT.
pub type Refusal = String;

/// `call` as one TraceQL condition on a span.
pub fn condition(call: &Call) -> Result<FieldExpr, Refusal> {
    match call.op.as_str() {
        "and" | "or" => {
            let op = if call.op == "and" {
                BinaryOp::And
            } else {
                BinaryOp::Or
            };
            if call.args.is_empty() {
                return Err(format!("filter: {} needs at least one operand", call.op));
            }
            let parts = call
                .args
                .iter()
                .map(|a| match &a.term {
                    Some(Term::Call(c)) => condition(c),
                    _ => Err(format!(
                        "filter: the operands of {} are conditions (calls)",
                        call.op
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(join(op, parts))
        }
        "exists" => {
            let [arg] = call.args.as_slice() else {
                return Err("filter: exists takes one operand".to_owned());
            };
            match &arg.term {
                Some(Term::Attr(a)) => Ok(join(
                    BinaryOp::Or,
                    scopes(a)?
                        .into_iter()
                        .map(|scope| cmp(CmpOp::Ne, attr(scope, &a.key), Static::Nil))
                        .collect(),
                )),
                Some(Term::Field(f)) => Err(format!(
                    "filter: exists on the built-in field {}.{} is not supported (every span has it)",
                    f.level, f.name
                )),
                _ => Err("filter: exists takes an attribute".to_owned()),
            }
        }
        "eq" | "ne" | "gt" | "gte" | "lt" | "lte" | "regex" => {
            let [l, r] = call.args.as_slice() else {
                return Err(format!("filter: {} takes two operands", call.op));
            };
            let op = cmp_op(&call.op);
            // The reference on the left; a constant on the left turns the
            // comparison around.
            let (reference, scalar, op) = match (&l.term, &r.term) {
                (Some(Term::Scalar(s)), _) if call.op != "regex" => (r, s, flip(op)),
                (_, Some(Term::Scalar(s))) => (l, s, op),
                _ => {
                    return Err(format!(
                        "filter: {} compares a reference with a constant (scalar)",
                        call.op
                    ))
                }
            };
            compare(
                reference,
                op,
                &call.op,
                &[scalar.value.as_str()],
                &scalar.r#type,
            )
        }
        "in" => {
            let [l, r] = call.args.as_slice() else {
                return Err("filter: in takes two operands".to_owned());
            };
            let Some(Term::List(List { values, r#type })) = &r.term else {
                return Err("filter: in takes a reference and a list".to_owned());
            };
            if values.is_empty() {
                return Err("filter: the list of in is empty".to_owned());
            }
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            compare(l, CmpOp::Eq, "in", &values, r#type)
        }
        "not" | "not_in" | "some" | "phrase" | "fulltext" => Err(format!(
            "filter: the operator {} is not supported; tracedb evaluates {}",
            call.op,
            OPERATORS.join(", ")
        )),
        other => Err(format!("filter: unknown operator {other:?}")),
    }
}

/// `reference op value` for each of `values`, any of them holding.
fn compare(
    reference: &Expression,
    op: CmpOp,
    name: &str,
    values: &[&str],
    kind: &str,
) -> Result<FieldExpr, Refusal> {
    let mut alternatives = Vec::new();
    match &reference.term {
        Some(Term::Attr(a)) => {
            if op == CmpOp::Ne {
                return Err(format!(
                    "filter: ne over the attribute {:?} is not supported (its values at several levels or events would each have to differ); ne over span.name, span.duration, span.kind and span.status is",
                    a.key
                ));
            }
            let scopes = scopes(a)?;
            for value in values {
                for constant in constants(op, value, kind, name)? {
                    for &scope in &scopes {
                        alternatives.push(cmp(op, attr(scope, &a.key), constant.clone()));
                    }
                }
            }
        }
        Some(Term::Field(f)) => {
            let (field, ordered) = field(f)?;
            if op == CmpOp::Match && field != Intrinsic::Name {
                return Err(format!(
                    "filter: regex over span.{} is not supported",
                    f.name
                ));
            }
            if matches!(op, CmpOp::Gt | CmpOp::Ge | CmpOp::Lt | CmpOp::Le) && !ordered {
                return Err(format!(
                    "filter: {name} over span.{} is refused: it has no order",
                    f.name
                ));
            }
            for value in values {
                let constant = field_constant(field, value)?;
                let constant = match op {
                    CmpOp::Match => regex_anywhere(value),
                    _ => constant,
                };
                alternatives.push(cmp(
                    op,
                    FieldExpr::Attribute(Attribute::Intrinsic(field)),
                    constant,
                ));
            }
        }
        _ => {
            return Err(format!(
                "filter: the first operand of {name} is an attribute or a built-in field"
            ))
        }
    }
    Ok(join(BinaryOp::Or, alternatives))
}

/// Where an attribute reference reads: one scope, or the span's and the
/// resource's for no level.
fn scopes(a: &AttributeReference) -> Result<Vec<Scope>, Refusal> {
    if a.key.is_empty() {
        return Err("filter: an attribute reference without a key".to_owned());
    }
    Ok(match a.level.as_str() {
        "" => vec![Scope::Span, Scope::Resource],
        "span" => vec![Scope::Span],
        "resource" => vec![Scope::Resource],
        "scope" => vec![Scope::Instrumentation],
        "event" => vec![Scope::Event],
        "link" => return Err("filter: attributes of the link level are not supported".to_owned()),
        other => return Err(format!("filter: unknown level {other:?}")),
    })
}

/// A built-in field, and whether it has an order.
fn field(f: &FieldReference) -> Result<(Intrinsic, bool), Refusal> {
    match (f.level.as_str(), f.name.as_str()) {
        ("span", "name") => Ok((Intrinsic::Name, true)),
        ("span", "duration") => Ok((Intrinsic::Duration, true)),
        ("span", "kind") => Ok((Intrinsic::Kind, false)),
        ("span", "status") => Ok((Intrinsic::Status, false)),
        (level, name) => Err(format!(
            "filter: the built-in field {level}.{name} is not supported; span.name, span.duration, span.kind and span.status are"
        )),
    }
}

/// The constant a built-in field is compared with, from its text.
fn field_constant(field: Intrinsic, text: &str) -> Result<Static, Refusal> {
    Ok(match field {
        Intrinsic::Duration => Static::Duration(
            tracedb_traceql::parse_go_duration(text)
                .ok_or_else(|| format!("filter: {text:?} is not a duration such as 1.5ms"))?,
        ),
        Intrinsic::Kind => Static::Kind(match text.to_ascii_lowercase().as_str() {
            "unspecified" => Kind::Unspecified,
            "internal" => Kind::Internal,
            "server" => Kind::Server,
            "client" => Kind::Client,
            "producer" => Kind::Producer,
            "consumer" => Kind::Consumer,
            _ => return Err(format!("filter: {text:?} is not a span kind")),
        }),
        Intrinsic::Status => Static::Status(match text.to_ascii_lowercase().as_str() {
            "unset" => Status::Unset,
            "ok" => Status::Ok,
            "error" => Status::Error,
            _ => return Err(format!("filter: {text:?} is not a span status")),
        }),
        _ => Static::Str(text.to_owned()),
    })
}

/// The constants an attribute is compared with: of the type asked, or
/// (none asked) of every type the text spells that `op` can compare.
fn constants(op: CmpOp, text: &str, kind: &str, name: &str) -> Result<Vec<Static>, Refusal> {
    let ordered = matches!(op, CmpOp::Gt | CmpOp::Ge | CmpOp::Lt | CmpOp::Le);
    let bad = |t: &str| format!("filter: {text:?} is not {t}");
    if op == CmpOp::Match {
        if !matches!(kind, "" | "string") {
            return Err(format!("filter: regex takes a string pattern, not {kind}"));
        }
        return Ok(vec![regex_anywhere(text)]);
    }
    Ok(match kind {
        "string" => vec![Static::Str(text.to_owned())],
        "int" => vec![Static::Int(text.parse().map_err(|_| bad("an int"))?)],
        "double" => vec![Static::Float(text.parse().map_err(|_| bad("a double"))?)],
        "bool" if ordered => {
            return Err(format!(
                "filter: {name} over a bool is refused: it has no order"
            ))
        }
        "bool" => vec![Static::Bool(text.parse().map_err(|_| bad("a bool"))?)],
        "" => {
            let mut all = vec![Static::Str(text.to_owned())];
            if let Ok(i) = text.parse::<i64>() {
                all.push(Static::Int(i));
            } else if let Ok(f) = text.parse::<f64>() {
                all.push(Static::Float(f));
            }
            if let (false, Ok(b)) = (ordered, text.parse::<bool>()) {
                all.push(Static::Bool(b));
            }
            all
        }
        other => return Err(format!("filter: unknown constant type {other:?}")),
    })
}

/// A pattern that matches anywhere in the value, as RFC 0005's `regex`
/// does, for TraceQL's `=~`, which matches the whole value.
fn regex_anywhere(pattern: &str) -> Static {
    Static::Str(format!("(?s:.*)(?:{pattern})(?s:.*)"))
}

fn cmp_op(op: &str) -> CmpOp {
    match op {
        "ne" => CmpOp::Ne,
        "gt" => CmpOp::Gt,
        "gte" => CmpOp::Ge,
        "lt" => CmpOp::Lt,
        "lte" => CmpOp::Le,
        "regex" => CmpOp::Match,
        _ => CmpOp::Eq,
    }
}

/// The operator with its operands swapped (`3 < x` is `x > 3`).
fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Ge => CmpOp::Le,
        CmpOp::Le => CmpOp::Ge,
        other => other,
    }
}

fn attr(scope: Scope, name: &str) -> FieldExpr {
    FieldExpr::Attribute(Attribute::Attr {
        scope,
        name: name.to_owned(),
    })
}

fn cmp(op: CmpOp, lhs: FieldExpr, rhs: Static) -> FieldExpr {
    FieldExpr::Binary {
        op: BinaryOp::Cmp(op),
        lhs: Box::new(lhs),
        rhs: Box::new(FieldExpr::Static(rhs)),
    }
}

fn join(op: BinaryOp, exprs: Vec<FieldExpr>) -> FieldExpr {
    exprs
        .into_iter()
        .reduce(|a, b| FieldExpr::Binary {
            op,
            lhs: Box::new(a),
            rhs: Box::new(b),
        })
        .unwrap_or(FieldExpr::Static(Static::Bool(false)))
}

#[cfg(test)]
mod tests {
    use tracedb_proto::jaeger::expression::v1::Scalar;

    use super::*;

    fn call(op: &str, args: Vec<Expression>) -> Call {
        Call {
            op: op.into(),
            args,
        }
    }
    fn e(term: Term) -> Expression {
        Expression { term: Some(term) }
    }
    fn a(level: &str, key: &str) -> Expression {
        e(Term::Attr(AttributeReference {
            key: key.into(),
            level: level.into(),
        }))
    }
    fn f(name: &str) -> Expression {
        e(Term::Field(FieldReference {
            name: name.into(),
            level: "span".into(),
        }))
    }
    fn s(value: &str, kind: &str) -> Expression {
        e(Term::Scalar(Scalar {
            value: value.into(),
            r#type: kind.into(),
        }))
    }
    fn text(c: &Call) -> Result<String, Refusal> {
        condition(c).map(|x| x.to_string())
    }

    #[test]
    fn filters_become_one_span_condition() {
        let c = call(
            "and",
            vec![
                e(Term::Call(call(
                    "eq",
                    vec![a("resource", "service.name"), s("api", "string")],
                ))),
                e(Term::Call(call("gte", vec![f("duration"), s("1.5ms", "")]))),
                e(Term::Call(call(
                    "eq",
                    vec![a("", "http.status_code"), s("500", "")],
                ))),
                e(Term::Call(call(
                    "lt",
                    vec![s("3", "int"), a("event", "retry")],
                ))),
            ],
        );
        let got = text(&c).expect("supported");
        assert_eq!(
            got,
            "resource.service.name = \"api\" && span:duration >= 1500us && \
             (span.http.status_code = \"500\" || resource.http.status_code = \"500\" || \
             span.http.status_code = 500 || resource.http.status_code = 500) && event.retry > 3",
        );
    }

    #[test]
    fn what_is_not_exact_is_refused_with_its_name() {
        for (c, says) in [
            (
                call("not", vec![e(Term::Call(call("exists", vec![a("", "k")])))]),
                "not",
            ),
            (
                call("ne", vec![a("span", "k"), s("v", "")]),
                "ne over the attribute",
            ),
            (call("eq", vec![a("link", "k"), s("v", "")]), "link"),
            (call("eq", vec![f("traceID"), s("v", "")]), "span.traceID"),
            (call("gt", vec![f("kind"), s("server", "")]), "no order"),
            (call("gt", vec![a("span", "k"), s("true", "bool")]), "bool"),
            (
                call("eq", vec![f("duration"), s("soon", "")]),
                "not a duration",
            ),
            (
                call("eq", vec![a("span", "k"), s("x", "int")]),
                "not an int",
            ),
            (call("frobnicate", vec![]), "unknown operator"),
        ] {
            let err = text(&c).expect_err(&c.op);
            assert!(err.contains(says), "{err}");
        }
    }
}
