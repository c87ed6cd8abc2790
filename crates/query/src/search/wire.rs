//! A search's matches as `TraceSummary` rows, and back, for the tier.

use tracedb_lsm::{SpanId, TraceId};
use tracedb_proto::query::v1 as proto;

use super::{add_stats, Field, Match, MatchedSpan, MatchedSpanset, ServiceStats};

fn fields_to_proto(fields: &[Field]) -> Vec<proto::Field> {
    fields
        .iter()
        .map(|f| proto::Field {
            key: f.key.clone(),
            value: f.value.clone(),
            r#type: f.kind.clone(),
        })
        .collect()
}

fn fields_from_proto(fields: &[proto::Field]) -> Vec<Field> {
    fields
        .iter()
        .map(|f| Field {
            key: f.key.clone(),
            value: f.value.clone(),
            kind: f.r#type.clone(),
        })
        .collect()
}

/// A match as `tracedb.query.v1.TraceSummary`.
pub fn to_proto(m: &Match) -> proto::TraceSummary {
    proto::TraceSummary {
        trace_id: m.trace_id.0.to_vec().into(),
        root_service: m.root_service.clone().unwrap_or_default(),
        root_name: m.root_name.clone().unwrap_or_default(),
        start_time_unix_nano: m.start_unix_nano,
        duration_nanos: m.duration_nanos,
        span_count: m.span_count,
        error_span_count: m.error_count,
        services: m.services.clone(),
        service_stats: m
            .service_stats
            .iter()
            .map(|s| proto::ServiceStats {
                service: s.service.clone(),
                span_count: s.spans,
                error_span_count: s.errors,
            })
            .collect(),
        spansets: m
            .spansets
            .iter()
            .map(|s| proto::Spanset {
                matched: s.matched,
                spans: s
                    .spans
                    .iter()
                    .map(|span| proto::MatchedSpan {
                        span_id: span.span_id.0.to_vec().into(),
                        name: span.name.clone(),
                        start_time_unix_nano: span.start_unix_nano,
                        duration_nanos: span.duration_nanos,
                        attributes: fields_to_proto(&span.attributes),
                    })
                    .collect(),
                attributes: fields_to_proto(&s.attributes),
            })
            .collect(),
    }
}

/// A `TraceSummary` a node answered, as a match; `None` when its IDs are malformed.
pub fn from_proto(row: &proto::TraceSummary) -> Option<Match> {
    let nonempty = |s: &String| (!s.is_empty()).then(|| s.clone());
    let spansets = row
        .spansets
        .iter()
        .map(|s| {
            let spans = s
                .spans
                .iter()
                .map(|span| {
                    Some(MatchedSpan {
                        span_id: SpanId::from_slice(&span.span_id)?,
                        name: span.name.clone(),
                        start_unix_nano: span.start_time_unix_nano,
                        duration_nanos: span.duration_nanos,
                        attributes: fields_from_proto(&span.attributes),
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            Some(MatchedSpanset {
                matched: s.matched,
                spans,
                attributes: fields_from_proto(&s.attributes),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Match {
        trace_id: TraceId::from_slice(&row.trace_id)?,
        start_unix_nano: row.start_time_unix_nano,
        duration_nanos: row.duration_nanos,
        span_count: row.span_count,
        error_count: row.error_span_count,
        root_service: nonempty(&row.root_service),
        root_name: nonempty(&row.root_name),
        services: row.services.clone(),
        service_stats: {
            let mut stats = Vec::new();
            let rows: Vec<ServiceStats> = row
                .service_stats
                .iter()
                .map(|s| ServiceStats {
                    service: s.service.clone(),
                    spans: s.span_count,
                    errors: s.error_span_count,
                })
                .collect();
            add_stats(&mut stats, &rows);
            stats
        },
        spansets,
        // Rows of nodes are parts of a trace, perhaps not all of them.
        orphans: None,
    })
}
