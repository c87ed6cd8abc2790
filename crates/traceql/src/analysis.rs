//! Analyses of a query tree that decide how a search runs it: the
//! constructs tracedb refuses and why ([`refused`]), whether every
//! condition holds on one span ([`per_span_only`]), and the relaxed query
//! a query tier asks its nodes when trace-level conditions need the whole
//! trace ([`relaxed`]). Beside [`crate::prune`], which says what a matching
//! trace must contain.

use crate::ast::{
    Attribute, BinaryOp, FieldExpr, Intrinsic, Query, ScalarExpr, Scope, SpansetExpr, SpansetOp,
    Stage, Static,
};
use crate::trace::Value;

/// Constructs tracedb evaluates but refuses, because Grafana Tempo 3.0.3
/// answers them with no traces on data where they plainly match, and an
/// answer other than Tempo's would be a different answer to the same query
/// (see the README's TraceQL section):
/// - `!` before a condition (`{ !(status = error) }`): write the opposite
///   comparison (`{ status != error }`); `!` before a bool attribute
///   (`{ !span.cache.hit }`) is answered;
/// - `span:childCount`;
/// - `attribute = nil` (Tempo answers it with spans that have other
///   attributes, whether or not they have this one);
/// - `link.` attributes (`link:traceID` and `link:spanID` are answered).
pub fn refused(query: &Query) -> Result<(), String> {
    let mut why = None;
    let mut check = |e: &FieldExpr| match e {
        FieldExpr::Unary(crate::ast::UnaryOp::Not, inner)
            if matches!(
                inner.as_ref(),
                FieldExpr::Binary {
                    op: BinaryOp::Cmp(_) | BinaryOp::And | BinaryOp::Or,
                    ..
                }
            ) =>
        {
            why.get_or_insert("negation with ! of a condition is not supported; write the opposite comparison (!= for =, !~ for =~, and so on)");
        }
        FieldExpr::Binary {
            op: crate::ast::BinaryOp::Cmp(crate::ast::CmpOp::Eq),
            lhs,
            rhs,
        } if matches!(
            (lhs.as_ref(), rhs.as_ref()),
            (
                FieldExpr::Attribute(Attribute::Attr { .. }),
                FieldExpr::Static(crate::ast::Static::Nil)
            ) | (
                FieldExpr::Static(crate::ast::Static::Nil),
                FieldExpr::Attribute(Attribute::Attr { .. })
            )
        ) =>
        {
            why.get_or_insert(
                "= nil on an attribute (its absence) is not supported; != nil (its presence) is",
            );
        }
        FieldExpr::Attribute(Attribute::Intrinsic(Intrinsic::ChildCount)) => {
            why.get_or_insert("span:childCount is not supported");
        }
        FieldExpr::Attribute(Attribute::Attr {
            scope: crate::ast::Scope::Link,
            ..
        }) => {
            why.get_or_insert(
                "link attributes (link.name) are not supported; link:traceID and link:spanID are",
            );
        }
        _ => {}
    };
    crate::eval::visit_query(query, &mut check);
    if let Some(why) = why {
        return Err(why.to_owned());
    }
    refused_in_pipeline(&query.pipeline)
}

/// The type of the values Tempo keeps in one of its attribute columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Str,
    Int,
}

impl ColumnType {
    /// Whether Tempo keeps `v` in a column of this type: a value of the
    /// type, or a non-empty array of values of it only. Any other value
    /// goes to its generic attributes, where the column's name does not
    /// find it.
    pub fn holds(self, v: &Value) -> bool {
        let one = |v: &Value| {
            matches!(
                (self, v),
                (ColumnType::Str, Value::Str(_)) | (ColumnType::Int, Value::Int(_))
            )
        };
        match v {
            Value::Array(vs) => !vs.is_empty() && vs.iter().all(one),
            v => one(v),
        }
    }
}

/// The attributes Tempo 3.0.3 keeps by default in columns of their own, of
/// one type (`defaultDedicatedColumns`, `tempodb/backend/block_meta.go`):
/// `!= nil` there finds only values of the column's type, and a span
/// without one counts as the string `"nil"` in an aggregate.
const TYPED_COLUMNS: &[(Scope, &str, ColumnType)] = &[
    (Scope::Resource, "k8s.cluster.name", ColumnType::Str),
    (Scope::Resource, "k8s.namespace.name", ColumnType::Str),
    (Scope::Resource, "k8s.pod.name", ColumnType::Str),
    (Scope::Resource, "k8s.container.name", ColumnType::Str),
    (Scope::Span, "http.request.method", ColumnType::Str),
    (Scope::Span, "http.response.status_code", ColumnType::Int),
    (Scope::Span, "url.path", ColumnType::Str),
    (Scope::Span, "url.route", ColumnType::Str),
    (Scope::Span, "server.address", ColumnType::Str),
    (Scope::Span, "server.port", ColumnType::Int),
    (Scope::Span, "http.method", ColumnType::Str),
    (Scope::Span, "http.url", ColumnType::Str),
    (Scope::Span, "http.route", ColumnType::Str),
    (Scope::Span, "http.status_code", ColumnType::Int),
];

/// The type of Tempo's column for attribute `name` of `scope`, if it keeps
/// one (by default, as Tempo 3.0.3: the `k8s` names of a resource and the
/// HTTP, URL and server ones of a span).
pub fn column_type(scope: Scope, name: &str) -> Option<ColumnType> {
    TYPED_COLUMNS
        .iter()
        .find(|(s, n, _)| *s == scope && *n == name)
        .map(|c| c.2)
}

/// The name of `e` if it is an attribute Tempo keeps in a typed column,
/// scoped or not.
fn typed_column(e: &FieldExpr) -> Option<&str> {
    let FieldExpr::Attribute(Attribute::Attr { scope, name }) = e else {
        return None;
    };
    TYPED_COLUMNS
        .iter()
        .any(|(s, n, _)| n == name && (scope == s || *scope == Scope::Unscoped))
        .then_some(name.as_str())
}

/// The name of `e` if it is an unscoped attribute Tempo keeps in a typed
/// column under one of the scopes.
fn unscoped_typed_column(e: &FieldExpr) -> Option<&str> {
    match e {
        FieldExpr::Attribute(Attribute::Attr {
            scope: Scope::Unscoped,
            ..
        }) => typed_column(e),
        _ => None,
    }
}

/// Whether `e` is `!= nil` on an attribute Tempo keeps in a typed column
/// of its scope.
pub(crate) fn typed_presence(e: &FieldExpr) -> bool {
    let FieldExpr::Binary {
        op: BinaryOp::Cmp(crate::ast::CmpOp::Ne),
        lhs,
        rhs,
    } = e
    else {
        return false;
    };
    let nil = |e: &FieldExpr| matches!(e, FieldExpr::Static(Static::Nil));
    let attr = match (lhs.as_ref(), rhs.as_ref()) {
        (a, b) if nil(b) => a,
        (a, b) if nil(a) => b,
        _ => return false,
    };
    matches!(attr, FieldExpr::Attribute(Attribute::Attr { scope, name }) if column_type(*scope, name).is_some())
}

/// Refusals that are not about one field: `!= nil` and aggregates on the
/// attributes of [`TYPED_COLUMNS`], and the unions `&>>` and `&<<`.
fn refused_in_pipeline(p: &crate::ast::Pipeline) -> Result<(), String> {
    fn field(e: &FieldExpr) -> Result<(), String> {
        match e {
            FieldExpr::Binary {
                op: BinaryOp::Cmp(crate::ast::CmpOp::Ne),
                lhs,
                rhs,
            } => {
                let nil = |e: &FieldExpr| matches!(e, FieldExpr::Static(Static::Nil));
                let typed = match (lhs.as_ref(), rhs.as_ref()) {
                    (a, b) if nil(b) => unscoped_typed_column(a),
                    (a, b) if nil(a) => unscoped_typed_column(b),
                    _ => None,
                };
                if let Some(name) = typed {
                    return Err(format!(
                        "!= nil is not supported on the unscoped .{name}: Tempo 3.0.3 keeps it in a column of one type; name its scope (span.{name} or resource.{name})"
                    ));
                }
                field(lhs)?;
                field(rhs)
            }
            FieldExpr::Binary { lhs, rhs, .. } => {
                field(lhs)?;
                field(rhs)
            }
            FieldExpr::Unary(_, inner) => field(inner),
            FieldExpr::Static(_) | FieldExpr::Attribute(_) => Ok(()),
        }
    }
    fn scalar(s: &ScalarExpr) -> Result<(), String> {
        match s {
            ScalarExpr::Aggregate(_, e) => {
                if let Some(name) = typed_column(e) {
                    return Err(format!(
                        "avg, min, max and sum are not supported on {name}: Tempo 3.0.3 keeps it in a column of one type and counts the spans without it in the aggregate"
                    ));
                }
                field(e)
            }
            ScalarExpr::Arith { lhs, rhs, .. } => {
                scalar(lhs)?;
                scalar(rhs)
            }
            ScalarExpr::Static(_) | ScalarExpr::Count => Ok(()),
        }
    }
    fn spansets(s: &SpansetExpr) -> Result<(), String> {
        match s {
            SpansetExpr::Filter(e) => field(e),
            SpansetExpr::Pipeline(p) => pipeline(p),
            SpansetExpr::Binary { lhs, rhs, .. } => {
                spansets(lhs)?;
                spansets(rhs)
            }
        }
    }
    fn pipeline(p: &crate::ast::Pipeline) -> Result<(), String> {
        for stage in &p.stages {
            match stage {
                Stage::Spansets(s) => spansets(s)?,
                Stage::ScalarFilter(f) => {
                    scalar(&f.lhs)?;
                    scalar(&f.rhs)?;
                }
                Stage::By(e) => field(e)?,
                Stage::Select(fields) => fields.iter().try_for_each(field)?,
                Stage::Coalesce => {}
            }
        }
        Ok(())
    }
    pipeline(p)
}

/// Whether a query tier can answer `query` from its nodes' answers alone:
/// when whether a span matches depends on that span alone (spanset filters
/// joined by `||`, no field of the trace's other spans), a trace split
/// across the nodes of a group matches on the node holding a matching span,
/// and its spansets are the union of the nodes'. Anything else needs the
/// whole trace in one place: the tier finds candidates with the query's
/// [`relaxed`] form and evaluates the query on each whole trace. The
/// fields `select()` shows and a metrics stage measures or groups by must
/// be the span's own too.
pub fn per_span_only(query: &Query) -> bool {
    fn per_span(s: &SpansetExpr) -> bool {
        match s {
            SpansetExpr::Filter(e) => !trace_level(e),
            SpansetExpr::Binary {
                op: SpansetOp::Or,
                lhs,
                rhs,
            } => per_span(lhs) && per_span(rhs),
            _ => false,
        }
    }
    let stages = &query.pipeline.stages;
    // compare() counts every field of a span, its trace's root name and
    // service and its child count among them.
    let metrics_fields_per_span = query.metrics.as_deref().is_none_or(|m| {
        !matches!(m.function, crate::ast::MetricsFn::Compare { .. })
            && m.fields()
                .all(|a| !trace_level(&FieldExpr::Attribute(a.clone())))
    });
    matches!(stages.first(), Some(Stage::Spansets(s)) if per_span(s))
        && stages[1..]
            .iter()
            .all(|s| matches!(s, Stage::Select(fields) if fields.iter().all(|f| !trace_level(f))))
        && metrics_fields_per_span
}

/// Every field the filters of a [`per_span_only`] query's first stage
/// read (not those its metrics stage measures or groups by); `None` for
/// any other query.
pub fn span_fields(query: &Query) -> Option<Vec<&Attribute>> {
    fn expr<'a>(e: &'a FieldExpr, out: &mut Vec<&'a Attribute>) {
        match e {
            FieldExpr::Static(_) => {}
            FieldExpr::Attribute(a) => out.push(a),
            FieldExpr::Unary(_, inner) => expr(inner, out),
            FieldExpr::Binary { lhs, rhs, .. } => {
                expr(lhs, out);
                expr(rhs, out);
            }
        }
    }
    fn spansets<'a>(s: &'a SpansetExpr, out: &mut Vec<&'a Attribute>) {
        match s {
            SpansetExpr::Filter(e) => expr(e, out),
            SpansetExpr::Pipeline(p) => {
                for stage in &p.stages {
                    if let Stage::Spansets(s) = stage {
                        spansets(s, out);
                    }
                }
            }
            SpansetExpr::Binary { lhs, rhs, .. } => {
                spansets(lhs, out);
                spansets(rhs, out);
            }
        }
    }
    if !per_span_only(query) {
        return None;
    }
    let mut out = Vec::new();
    if let Some(Stage::Spansets(s)) = query.pipeline.stages.first() {
        spansets(s, &mut out);
    }
    Some(out)
}

/// Whether a span must carry `attr` to pass the filters of
/// [`per_span_only`] `query`'s first stage: each of them compares it with
/// a value (a comparison with nil is false, whatever the operator) or with
/// `!= nil`, under `&&` on one side at least and under `||` on both. A
/// query of only such spans can be answered from the spans that carry it.
/// `false` for any other query, and whenever it cannot tell.
pub fn requires_present(query: &Query, attr: &Attribute) -> bool {
    use crate::ast::CmpOp;
    fn expr(e: &FieldExpr, attr: &Attribute) -> bool {
        let is_attr = |e: &FieldExpr| matches!(e, FieldExpr::Attribute(a) if a == attr);
        match e {
            FieldExpr::Binary {
                op: BinaryOp::And,
                lhs,
                rhs,
            } => expr(lhs, attr) || expr(rhs, attr),
            FieldExpr::Binary {
                op: BinaryOp::Or,
                lhs,
                rhs,
            } => expr(lhs, attr) && expr(rhs, attr),
            FieldExpr::Binary {
                op: BinaryOp::Cmp(op),
                lhs,
                rhs,
            } => {
                let value = match (lhs.as_ref(), rhs.as_ref()) {
                    (a, FieldExpr::Static(v)) | (FieldExpr::Static(v), a) if is_attr(a) => v,
                    _ => return false,
                };
                !matches!(value, Static::Nil) || *op == CmpOp::Ne
            }
            _ => false,
        }
    }
    fn spansets(s: &SpansetExpr, attr: &Attribute) -> bool {
        match s {
            SpansetExpr::Filter(e) => expr(e, attr),
            SpansetExpr::Binary {
                op: SpansetOp::Or,
                lhs,
                rhs,
            } => spansets(lhs, attr) && spansets(rhs, attr),
            _ => false,
        }
    }
    per_span_only(query)
        && matches!(query.pipeline.stages.first(), Some(Stage::Spansets(s)) if spansets(s, attr))
}

/// Whether `e` reads a field of the whole trace rather than of its span
/// alone: `rootName`, `rootServiceName`, `traceDuration`,
/// `span:childCount` and the nested-set numbers, whose values on a node
/// holding part of a trace are not the whole trace's. `nestedSetParent < 0`
/// (and `= -1`), "the span is a root", is the exception: a span is a root
/// by its own parent ID, on any node.
fn trace_level(e: &FieldExpr) -> bool {
    match e {
        e if is_root_test(e) => false,
        FieldExpr::Attribute(Attribute::Intrinsic(
            Intrinsic::RootName
            | Intrinsic::RootServiceName
            | Intrinsic::TraceDuration
            | Intrinsic::ChildCount
            | Intrinsic::NestedSetLeft
            | Intrinsic::NestedSetRight
            | Intrinsic::NestedSetParent,
        )) => true,
        FieldExpr::Unary(_, inner) => trace_level(inner),
        FieldExpr::Binary { lhs, rhs, .. } => trace_level(lhs) || trace_level(rhs),
        FieldExpr::Attribute(_) | FieldExpr::Static(_) => false,
    }
}

/// Whether only root spans pass the filters of [`per_span_only`] `query`'s
/// first stage: each requires `nestedSetParent < 0` (or `= -1`) under `&&`
/// on one side at least and under `||` on both, as the queries Traces
/// Drilldown asks of root spans do. `false` for any other query, and
/// whenever it cannot tell.
pub fn requires_root(query: &Query) -> bool {
    fn expr(e: &FieldExpr) -> bool {
        match e {
            FieldExpr::Binary {
                op: BinaryOp::And,
                lhs,
                rhs,
            } => expr(lhs) || expr(rhs),
            FieldExpr::Binary {
                op: BinaryOp::Or,
                lhs,
                rhs,
            } => expr(lhs) && expr(rhs),
            e => is_root_test(e),
        }
    }
    fn spansets(s: &SpansetExpr) -> bool {
        match s {
            SpansetExpr::Filter(e) => expr(e),
            SpansetExpr::Binary {
                op: SpansetOp::Or,
                lhs,
                rhs,
            } => spansets(lhs) && spansets(rhs),
            _ => false,
        }
    }
    per_span_only(query)
        && matches!(query.pipeline.stages.first(), Some(Stage::Spansets(s)) if spansets(s))
}

/// Whether `e` is `nestedSetParent < 0` or `nestedSetParent = -1`: "the
/// span is a root".
fn is_root_test(e: &FieldExpr) -> bool {
    use crate::ast::{BinaryOp::Cmp, CmpOp, UnaryOp};
    let int = |e: &FieldExpr| match e {
        FieldExpr::Static(Static::Int(i)) => Some(*i),
        FieldExpr::Unary(UnaryOp::Neg, inner) => match inner.as_ref() {
            FieldExpr::Static(Static::Int(i)) => Some(-*i),
            _ => None,
        },
        _ => None,
    };
    match e {
        FieldExpr::Binary {
            op: Cmp(op),
            lhs,
            rhs,
        } => {
            matches!(
                lhs.as_ref(),
                FieldExpr::Attribute(Attribute::Intrinsic(Intrinsic::NestedSetParent))
            ) && matches!((op, int(rhs)), (CmpOp::Lt, Some(0)) | (CmpOp::Eq, Some(-1)))
        }
        _ => false,
    }
}

/// A query whose matches include every trace `query` matches, and whose
/// filters each hold on one span alone ([`per_span_only`]): the filters of
/// `query` joined by `||` (of an operator between spansets other than `||`,
/// those of its right side only, which must have spans for it to answer),
/// with each comparison of a trace-level field (see `trace_level`) replaced
/// by `true`. A span of every matching trace passes one of those filters, and
/// so the weaker one, on whichever node holds it: a query tier finds
/// candidates with it and evaluates `query` on each whole trace.
pub fn relaxed(query: &Query) -> Query {
    relaxed_with(query, false)
}

/// [`relaxed`], and with `any_type`, each `!= nil` on an attribute Tempo
/// keeps in a typed column made true as well: `query` means by it a value
/// of any type ([`crate::Compiled::with_presence_of_any_type`]), the text
/// of the relaxed query a value of the column's type only.
pub(crate) fn relaxed_with(query: &Query, any_type: bool) -> Query {
    /// `e` with the conditions on trace-level fields (and with `any_type`,
    /// presence on a typed column) made true (`!` is refused before a
    /// query runs, so weakening a part weakens the whole).
    fn weaken(e: &FieldExpr, any_type: bool) -> FieldExpr {
        match e {
            FieldExpr::Binary {
                op: op @ (crate::ast::BinaryOp::And | crate::ast::BinaryOp::Or),
                lhs,
                rhs,
            } => FieldExpr::Binary {
                op: *op,
                lhs: Box::new(weaken(lhs, any_type)),
                rhs: Box::new(weaken(rhs, any_type)),
            },
            e if trace_level(e) || (any_type && typed_presence(e)) => {
                FieldExpr::Static(crate::ast::Static::Bool(true))
            }
            e => e.clone(),
        }
    }
    fn filters(s: &SpansetExpr, out: &mut Vec<FieldExpr>, any_type: bool) {
        match s {
            SpansetExpr::Filter(e) => out.push(weaken(e, any_type)),
            SpansetExpr::Pipeline(p) => pipeline(p, out, any_type),
            SpansetExpr::Binary { op, lhs, rhs } => {
                // Every operator but `||` answers only when its right side
                // has spans (`&&` and the structural ones, `!>>` and `&>>`
                // included), so a span of every trace it matches passes a
                // filter of the right side.
                if matches!(op, SpansetOp::Or) {
                    filters(lhs, out, any_type);
                }
                filters(rhs, out, any_type);
            }
        }
    }
    fn pipeline(p: &crate::ast::Pipeline, out: &mut Vec<FieldExpr>, any_type: bool) {
        if let Some(Stage::Spansets(s)) = p.stages.first() {
            filters(s, out, any_type);
        }
    }
    let mut all = Vec::new();
    pipeline(&query.pipeline, &mut all, any_type);
    let expr = all
        .into_iter()
        .map(SpansetExpr::Filter)
        .reduce(|a, b| SpansetExpr::Binary {
            op: SpansetOp::Or,
            lhs: Box::new(a),
            rhs: Box::new(b),
        })
        .unwrap_or(SpansetExpr::Filter(FieldExpr::Static(
            crate::ast::Static::Bool(true),
        )));
    Query {
        pipeline: crate::ast::Pipeline {
            stages: vec![Stage::Spansets(expr)],
        },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-span relaxation keeps the filters a match needs, joined by
    /// `||` (the right side of `&&` and of a structural operator), with the
    /// conditions on trace-level fields made true; a per-span query needs none.
    #[test]
    fn the_relaxation_keeps_each_filter_and_drops_trace_level_conditions() {
        let relaxed = |q: &str| relaxed(&crate::parse(q).expect("valid")).to_string();
        assert_eq!(
            relaxed(
                r#"{ kind = server } >> { status = error && rootServiceName = "a" } | count() > 1"#
            ),
            "{ span:status = error && true }"
        );
        assert_eq!(
            relaxed("({ .a = 1 } | count() > 2) && ({ .b = 2 })"),
            "{ .b = 2 }"
        );
        assert_eq!(
            relaxed("({ .a = 1 } !>> { .b = 2 }) || { .c = 3 }"),
            "{ .b = 2 } || { .c = 3 }"
        );
        for (q, per_span) in [
            (r#"{ .a = 1 } || { name = "x" } | select(.b)"#, true),
            ("{ .a = 1 } && { .b = 1 }", false),
            ("{ traceDuration > 1s }", false),
            ("{ } | count() > 1", false),
        ] {
            let query = crate::parse(q).expect("valid");
            assert_eq!(per_span_only(&query), per_span, "{q}");
        }
    }

    /// A filter needs an attribute present when no span without it could
    /// pass: a comparison with a value or `!= nil`, on one side of `&&`,
    /// on both of `||`.
    #[test]
    fn an_attribute_is_required_only_where_no_span_without_it_passes() {
        let route = Attribute::Attr {
            scope: Scope::Span,
            name: "http.route".into(),
        };
        for (q, required) in [
            (r#"{ span.http.route = "/a" }"#, true),
            (r#"{ span.http.route != "/a" }"#, true),
            (r#"{ span.http.route =~ "/.*" }"#, true),
            (r#"{ "/a" = span.http.route }"#, true),
            ("{ span.http.route != nil }", true),
            ("{ span.http.route = nil }", false),
            (r#"{ kind = server && span.http.route = "/a" }"#, true),
            (r#"{ kind = server || span.http.route = "/a" }"#, false),
            (
                r#"{ span.http.route = "/a" || span.http.route = "/b" }"#,
                true,
            ),
            (
                r#"{ span.http.route = "/a" } || { span.http.route = "/b" }"#,
                true,
            ),
            (r#"{ span.http.route = "/a" } || { kind = server }"#, false),
            (r#"{ .http.route = "/a" }"#, false),
            (r#"{ resource.http.route = "/a" }"#, false),
            ("{ span.http.route = span.other }", false),
            (r#"{ span.http.route = "/a" } && { kind = server }"#, false),
            ("{ }", false),
        ] {
            let query = crate::parse(q).expect("valid");
            assert_eq!(requires_present(&query, &route), required, "{q}");
        }
    }

    #[test]
    fn a_query_of_root_spans_only_is_told_from_its_first_stage() {
        for (q, roots) in [
            ("{ nestedSetParent < 0 }", true),
            ("{ nestedSetParent = -1 }", true),
            (
                "{nestedSetParent<0 && true && name != nil} | rate() by(name)",
                true,
            ),
            (
                "{ kind = server && nestedSetParent < 0 } | count_over_time()",
                true,
            ),
            ("{ nestedSetParent < 0 || kind = server }", false),
            (
                "{ nestedSetParent < 0 && name = \"a\" || nestedSetParent = -1 }",
                true,
            ),
            ("{ nestedSetParent < 0 } || { nestedSetParent = -1 }", true),
            ("{ nestedSetParent < 0 } || { kind = server }", false),
            ("{ nestedSetParent < 1 }", false),
            ("{ nestedSetParent != -1 }", false),
            ("{ !(nestedSetParent < 0) }", false),
            ("{ nestedSetParent < 0 } >> { }", false),
            ("{ }", false),
        ] {
            let query = crate::parse(q).expect("valid");
            assert_eq!(requires_root(&query), roots, "{q}");
        }
    }

    /// `!= nil` on an attribute Tempo keeps in a typed column finds a
    /// value of the column's type only (scoped; unscoped it is refused),
    /// unless the query means any type (a Jaeger `exists`), whose relaxed
    /// text then drops the condition, as the text would mean the type.
    #[test]
    fn presence_on_a_typed_column_is_of_its_type() {
        use crate::trace::{Origin, SpanData, Trace};
        use std::sync::Arc;
        let span = |attributes: Vec<(&str, Value)>, resource: Vec<(&str, Value)>| {
            let list = |l: Vec<(&str, Value)>| l.into_iter().map(|(k, v)| (k.into(), v)).collect();
            let one = SpanData {
                span_id: [1; 8],
                parent_id: None,
                name: "a".into(),
                kind: crate::ast::Kind::Server,
                status: crate::ast::Status::Unset,
                status_message: String::new(),
                start_unix_nano: 1,
                end_unix_nano: 2,
                attributes: list(attributes),
                events: Vec::new(),
                links: Vec::new(),
                origin: Arc::new(Origin {
                    resource: list(resource),
                    ..Origin::default()
                }),
            };
            Trace::new([1; 16], vec![one])
        };
        let (s, i) = (|v: &str| Value::Str(v.into()), Value::Int);
        let matches = |q: &str, t: &Trace, any_type: bool| {
            let c = crate::Compiled::new(crate::parse(q).expect("valid")).expect("compiles");
            let c = if any_type {
                c.with_presence_of_any_type()
            } else {
                c
            };
            !c.eval(t).is_empty()
        };
        let code = "{ span.http.status_code != nil }";
        let route = "{ span.http.route != nil }";
        let pod = "{ resource.k8s.pod.name != nil }";
        for (q, t, typed, any) in [
            (
                code,
                span(vec![("http.status_code", i(200))], vec![]),
                true,
                true,
            ),
            (
                code,
                span(vec![("http.status_code", s("200"))], vec![]),
                false,
                true,
            ),
            (
                code,
                span(vec![("http.status_code", Value::Float(200.0))], vec![]),
                false,
                true,
            ),
            (
                code,
                span(
                    vec![("http.status_code", Value::Array(vec![i(1), i(2)]))],
                    vec![],
                ),
                true,
                true,
            ),
            (
                code,
                span(
                    vec![("http.status_code", Value::Array(vec![i(1), s("2")]))],
                    vec![],
                ),
                false,
                true,
            ),
            (
                code,
                span(vec![("http.status_code", Value::Array(vec![]))], vec![]),
                false,
                true,
            ),
            (
                code,
                span(vec![], vec![("http.status_code", i(200))]),
                false,
                false,
            ),
            (
                route,
                span(vec![("http.route", s("/a"))], vec![]),
                true,
                true,
            ),
            (
                route,
                span(vec![("http.route", Value::Bool(true))], vec![]),
                false,
                true,
            ),
            (pod, span(vec![], vec![("k8s.pod.name", i(3))]), false, true),
            (
                pod,
                span(vec![], vec![("k8s.pod.name", s("p"))]),
                true,
                true,
            ),
            // Not a column of that scope, or of any: any value.
            (
                "{ resource.http.route != nil }",
                span(vec![], vec![("http.route", i(1))]),
                true,
                true,
            ),
            (
                "{ span.http.flavor != nil }",
                span(vec![("http.flavor", i(1))], vec![]),
                true,
                true,
            ),
        ] {
            assert_eq!(matches(q, &t, false), typed, "{q} {t:?}");
            assert_eq!(matches(q, &t, true), any, "{q} {t:?}, any type");
        }
        let parsed = |q: &str| crate::parse(q).expect("valid");
        assert!(refused(&parsed(route)).is_ok());
        assert!(refused(&parsed(pod)).is_ok());
        let why = refused(&parsed("{ .http.route != nil }")).expect_err("unscoped");
        assert!(why.contains("span.http.route"), "{why}");
        // The relaxation for text keeps typed presence, and drops it where
        // the query means any type.
        let jaeger =
            crate::Compiled::new(parsed(r#"{ span.http.status_code != nil && name = "a" }"#))
                .expect("compiles");
        assert!(jaeger.text_means_it());
        assert_eq!(
            jaeger.relaxed().to_string(),
            r#"{ span.http.status_code != nil && span:name = "a" }"#
        );
        let jaeger = jaeger.with_presence_of_any_type();
        assert!(!jaeger.text_means_it());
        assert_eq!(
            jaeger.relaxed().to_string(),
            r#"{ true && span:name = "a" }"#
        );
        let other = crate::Compiled::new(parsed("{ span.http.flavor != nil }"))
            .expect("compiles")
            .with_presence_of_any_type();
        assert!(other.text_means_it());
    }
}
