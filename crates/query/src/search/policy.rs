//! What a query asks of the search: the index's needs, and the query
//! compiled once it passed the analyses of `tracedb_traceql::analysis`
//! (the queries tracedb refuses and why, which conditions hold on one
//! span, and the relaxed query a tier asks its nodes).

use std::sync::Arc;

use tracedb_lsm::index::{OpNeed, TagNeed, TagScope, ValueKind};
pub use tracedb_traceql::analysis::{per_span_only, refused, relaxed};
use tracedb_traceql::Compiled;

use crate::error::Error;

/// A query's needs as the search index checks them.
pub(crate) fn op_needs(needs: Vec<tracedb_traceql::SpanNeed>) -> Vec<OpNeed> {
    use tracedb_traceql::{ast::Scope, LiteralKind};
    needs
        .into_iter()
        .map(|n| OpNeed {
            service: n.service,
            name: n.name,
            kind: n.kind.map(|k| k as u8),
            error: n.error,
            tags: n
                .attributes
                .into_iter()
                .map(|a| TagNeed {
                    scope: match a.scope {
                        Scope::Resource => Some(TagScope::Resource),
                        Scope::Span => Some(TagScope::Span),
                        _ => None,
                    },
                    key: a.name,
                    value: a.text,
                    kind: match a.kind {
                        LiteralKind::Str => ValueKind::Str,
                        LiteralKind::Int => ValueKind::Int,
                        LiteralKind::Float => ValueKind::Float,
                        LiteralKind::Bool => ValueKind::Bool,
                    },
                })
                .collect(),
        })
        .collect()
}

/// What the traces of a query being typed must have, for narrowing
/// autocomplete: the needs of `text` when it parses, else of the conditions
/// of its first `{ ... }` (to its end, if unclosed) that parse on their own.
pub fn narrowing(text: &str) -> Vec<OpNeed> {
    let to_ops = op_needs;
    if text.trim().is_empty() {
        return Vec::new();
    }
    if let Ok(q) = tracedb_traceql::parse(text) {
        return to_ops(tracedb_traceql::needs(&q));
    }
    let Some(open) = text.find('{') else {
        return Vec::new();
    };
    let body = &text[open + 1..];
    let body = body.find('}').map_or(body, |close| &body[..close]);
    let conditions: Vec<&str> = body
        .split("&&")
        .map(str::trim)
        .filter(|c| tracedb_traceql::parse(&format!("{{ {c} }}")).is_ok())
        .collect();
    if conditions.is_empty() {
        return Vec::new();
    }
    tracedb_traceql::parse(&format!("{{ {} }}", conditions.join(" && ")))
        .map(|q| to_ops(tracedb_traceql::needs(&q)))
        .unwrap_or_default()
}

/// `text` parsed, checked and compiled as a search; a query tracedb cannot
/// run is [`Error::InvalidArgument`] with the parser's position and reason,
/// and so is a metrics query, which searches do not answer.
pub fn compile(text: &str) -> Result<Arc<Compiled>, Error> {
    let query = compile_any(text)?;
    if query.query.metrics.is_some() {
        return Err(Error::InvalidArgument(format!(
            "{text:?} is a metrics query: ask /api/metrics/query_range or /api/metrics/query"
        )));
    }
    Ok(query)
}

/// `text` parsed, checked and compiled, a search or a metrics query.
pub fn compile_any(text: &str) -> Result<Arc<Compiled>, Error> {
    let query = tracedb_traceql::parse(text)
        .map_err(|e| Error::InvalidArgument(format!("invalid TraceQL {text:?}: {e}")))?;
    refused(&query)
        .map_err(|why| Error::InvalidArgument(format!("unsupported TraceQL {text:?}: {why}")))?;
    Compiled::new(query)
        .map(Arc::new)
        .map_err(|e| Error::InvalidArgument(format!("invalid TraceQL {text:?}: {e}")))
}
