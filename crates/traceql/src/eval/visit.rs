//! Walks over a query's field expressions: the regular expressions to
//! compile, the fields an answer shows, whether a condition names a field.

use crate::ast::{FieldExpr, Pipeline, Query, ScalarExpr, SpansetExpr, Stage};

/// Calls `f` on every field expression of `query`, depth first: those of
/// `select()` first, then filters, `by` and aggregates, then the metrics
/// stage's (`compare`'s filter, the measured field, the `by()` fields).
pub fn visit_query(query: &Query, f: &mut dyn FnMut(&FieldExpr)) {
    for stage in &query.pipeline.stages {
        if let Stage::Select(fields) = stage {
            for e in fields {
                visit_field(e, f);
            }
        }
    }
    visit_pipeline(&query.pipeline, f);
    if let Some(m) = &query.metrics {
        if let crate::ast::MetricsFn::Compare { selection, .. } = &m.function {
            visit_field(selection, f);
        }
        for a in m.fields() {
            f(&FieldExpr::Attribute(a.clone()));
        }
    }
}

/// Calls `f` on every field expression of the pipeline (filters, `by`,
/// aggregates), depth first.
fn visit_pipeline(p: &Pipeline, f: &mut dyn FnMut(&FieldExpr)) {
    for stage in &p.stages {
        match stage {
            Stage::Spansets(s) => visit_spansets(s, f),
            Stage::ScalarFilter(sf) => {
                visit_scalar(&sf.lhs, f);
                visit_scalar(&sf.rhs, f);
            }
            Stage::By(e) => visit_field(e, f),
            Stage::Select(_) | Stage::Coalesce => {}
        }
    }
}

fn visit_spansets(s: &SpansetExpr, f: &mut dyn FnMut(&FieldExpr)) {
    match s {
        SpansetExpr::Filter(e) => visit_field(e, f),
        SpansetExpr::Pipeline(p) => visit_pipeline(p, f),
        SpansetExpr::Binary { lhs, rhs, .. } => {
            visit_spansets(lhs, f);
            visit_spansets(rhs, f);
        }
    }
}

fn visit_scalar(s: &ScalarExpr, f: &mut dyn FnMut(&FieldExpr)) {
    match s {
        ScalarExpr::Aggregate(_, e) => visit_field(e, f),
        ScalarExpr::Arith { lhs, rhs, .. } => {
            visit_scalar(lhs, f);
            visit_scalar(rhs, f);
        }
        ScalarExpr::Static(_) | ScalarExpr::Count => {}
    }
}

pub(super) fn visit_field(e: &FieldExpr, f: &mut dyn FnMut(&FieldExpr)) {
    f(e);
    match e {
        FieldExpr::Unary(_, inner) => visit_field(inner, f),
        FieldExpr::Binary { lhs, rhs, .. } => {
            visit_field(lhs, f);
            visit_field(rhs, f);
        }
        FieldExpr::Static(_) | FieldExpr::Attribute(_) => {}
    }
}
