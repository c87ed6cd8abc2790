//! The conditions the legacy search fields of the front ends map to (Tempo's
//! `tags`, `minDuration` and `maxDuration`; Jaeger's service, operation,
//! attributes and durations), built as query trees so that no value needs
//! quoting.

use tracedb_traceql::ast::{
    Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, Pipeline, Query, Scope, SpansetExpr,
    SpansetOp, Stage, Static,
};

fn cmp(op: CmpOp, lhs: FieldExpr, rhs: Static) -> FieldExpr {
    FieldExpr::Binary {
        op: BinaryOp::Cmp(op),
        lhs: Box::new(lhs),
        rhs: Box::new(FieldExpr::Static(rhs)),
    }
}

fn join(op: BinaryOp, exprs: Vec<FieldExpr>) -> Option<FieldExpr> {
    exprs.into_iter().reduce(|a, b| FieldExpr::Binary {
        op,
        lhs: Box::new(a),
        rhs: Box::new(b),
    })
}

/// `resource.service.name = "v"`.
pub fn service(v: &str) -> FieldExpr {
    let attr = Attribute::Attr {
        scope: Scope::Resource,
        name: "service.name".to_owned(),
    };
    cmp(
        CmpOp::Eq,
        FieldExpr::Attribute(attr),
        Static::Str(v.to_owned()),
    )
}

/// `name = "v"`.
pub fn span_name(v: &str) -> FieldExpr {
    let attr = FieldExpr::Attribute(Attribute::Intrinsic(Intrinsic::Name));
    cmp(CmpOp::Eq, attr, Static::Str(v.to_owned()))
}

/// The attribute `key` (`resource.k` or `span.k` scoped, else the span's
/// or its resource's) equal to `text` read as text: a string `text`, or
/// the number or bool it spells.
pub fn tag(key: &str, text: &str) -> FieldExpr {
    let (scope, name) = if let Some(n) = key.strip_prefix("resource.") {
        (Scope::Resource, n)
    } else if let Some(n) = key.strip_prefix("span.") {
        (Scope::Span, n)
    } else {
        (Scope::Unscoped, key.strip_prefix('.').unwrap_or(key))
    };
    tag_in(scope, name, text)
}

/// Jaeger's meaning of a tag: the attribute `key` equal to `text` (read
/// as text) wherever the span carries it: its own attributes, its
/// resource's (Jaeger's process tags), one of its events' (Jaeger's
/// logs) or its instrumentation scope's.
pub fn tag_anywhere(key: &str, text: &str) -> FieldExpr {
    let places = [Scope::Unscoped, Scope::Event, Scope::Instrumentation]
        .into_iter()
        .map(|scope| tag_in(scope, key, text))
        .collect();
    join(BinaryOp::Or, places).unwrap_or(FieldExpr::Static(Static::Bool(false)))
}

/// The attribute `name` of `scope` equal to `text` read as text.
fn tag_in(scope: Scope, name: &str, text: &str) -> FieldExpr {
    let mut values = vec![Static::Str(text.to_owned())];
    if let Ok(i) = text.parse::<i64>() {
        values.push(Static::Int(i));
    } else if let Ok(f) = text.parse::<f64>() {
        values.push(Static::Float(f));
    }
    if let Ok(b) = text.parse::<bool>() {
        values.push(Static::Bool(b));
    }
    let attr = FieldExpr::Attribute(Attribute::Attr {
        scope,
        name: name.to_owned(),
    });
    let alternatives = values
        .into_iter()
        .map(|v| cmp(CmpOp::Eq, attr.clone(), v))
        .collect();
    join(BinaryOp::Or, alternatives).unwrap_or(FieldExpr::Static(Static::Bool(false)))
}

/// `field op nanos`, for `duration` or `traceDuration`.
pub fn duration(field: Intrinsic, op: CmpOp, nanos: u64) -> FieldExpr {
    let nanos = i64::try_from(nanos).unwrap_or(i64::MAX);
    cmp(
        op,
        FieldExpr::Attribute(Attribute::Intrinsic(field)),
        Static::Duration(nanos),
    )
}

/// The conditions joined with `&&` in one field expression (all on the
/// same span); `None` without conditions.
pub fn all(conds: Vec<FieldExpr>) -> Option<FieldExpr> {
    join(BinaryOp::And, conds)
}

/// `{ a } && { b } && ...`: a span of the trace meets each condition
/// (not necessarily the same span); `{ }` without conditions.
pub fn each(conds: Vec<FieldExpr>) -> Query {
    let filters = conds.into_iter().map(SpansetExpr::Filter);
    let expr = filters
        .reduce(|lhs, rhs| SpansetExpr::Binary {
            op: SpansetOp::And,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        })
        .unwrap_or(SpansetExpr::Filter(FieldExpr::Static(Static::Bool(true))));
    Query {
        pipeline: Pipeline {
            stages: vec![Stage::Spansets(expr)],
        },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    }
}

/// One spanset filter of every condition (each on the same span); `None`
/// without conditions.
pub fn filter(conds: Vec<FieldExpr>) -> Option<Query> {
    Some(Query {
        pipeline: Pipeline {
            stages: vec![Stage::Spansets(SpansetExpr::Filter(join(
                BinaryOp::And,
                conds,
            )?))],
        },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    })
}
