//! Running a TraceQL metrics query on one store: every trace with a span
//! in the window, read whole and evaluated, its matched spans counted into
//! series by [`tracedb_traceql::metrics::MetricsEval`].
//!
//! The search index finds the traces: its walk proposes each trace with a
//! part that overlaps the window and may meet what the query needs
//! ([`tracedb_traceql::needs`]), so a query on a service or a span name
//! reads only the traces that have them. The spans decide: the index never
//! counts. Memory is admitted by the store's budget as a search's is: the
//! walk's set of proposed traces, the trace being evaluated and the series.

use std::sync::Arc;

use tracedb_lsm::{index::SearchQuery, Engine, TimeRange};
use tracedb_traceql::{
    metrics::{Grid, MetricsEval},
    Compiled,
};

use crate::{
    read::{file_reason, Answer},
    search::{decode, op_needs, RunError, DECODED_SPAN_BYTES},
};

/// A metrics query to run: the compiled query, its grid and its limits.
#[derive(Debug, Clone)]
pub struct MetricsRequest {
    pub query: Arc<Compiled>,
    pub grid: Grid,
    /// Most series answered; past it the answer is partial.
    pub max_series: usize,
    /// Most exemplars answered (0: none).
    pub max_exemplars: usize,
}

/// Most series a metrics answer holds unless the request asks for fewer.
pub const MAX_SERIES: usize = 10_000;

/// The partial mark of an answer whose series stopped at `max`.
pub fn series_capped(max: usize) -> String {
    format!(
        "Response exceeds maximum series limit of {max}, a partial response is returned. \
         Warning: the accuracy of each individual value is not guaranteed."
    )
}

/// Bytes one series holds per interval, for the memory budget (a
/// quantile's buckets take more; this is the estimate of a count).
const CELL_BYTES: usize = 24;

/// Runs `req` on `engine`: the series accumulated, not yet finished (so a
/// caller can add other stores' before [`MetricsEval::finish`]).
pub fn run(engine: &Engine, req: &MetricsRequest) -> Result<Answer<MetricsEval>, RunError> {
    let budget = engine.memory_budget();
    let mut held = budget.acquire(0).map_err(RunError::Overloaded)?;
    let mut eval = MetricsEval::new(&req.query, req.grid, req.max_series, req.max_exemplars)
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    let index_query = SearchQuery {
        start_max: req.grid.end,
        end_min: req.grid.start,
        needs: op_needs(tracedb_traceql::needs(&req.query.query)),
        ..SearchQuery::default()
    };
    let mut walk = engine.candidates(&index_query)?;
    let mut walk_bytes = 0;
    let mut series_bytes = 0;
    let mut partial: Vec<String> = Vec::new();
    let row_bytes = req.grid.len() * CELL_BYTES + 256;
    while let Some(candidate) = crate::search::next_counted(&mut walk, &mut held, &mut walk_bytes)?
    {
        let lookup = engine.lookup_trace(&candidate.trace_id, TimeRange::ALL)?;
        for skipped in &lookup.skipped {
            let reason = file_reason(skipped);
            if !partial.contains(&reason) {
                partial.push(reason);
            }
        }
        let trace_bytes: usize = lookup
            .spans
            .iter()
            .map(|s| 2 * s.payload.len() + DECODED_SPAN_BYTES)
            .sum();
        held.grow(trace_bytes).map_err(RunError::Overloaded)?;
        match decode(candidate.trace_id, &lookup.spans) {
            Ok(trace) => {
                let sets = req.query.eval(&trace);
                if !sets.is_empty() {
                    eval.observe(&req.query, &trace, &sets);
                }
            }
            Err(e) => partial.push(format!("trace {} not evaluated: {e}", candidate.trace_id)),
        }
        held.shrink(trace_bytes);
        let now = eval.series_count() * row_bytes;
        if now > series_bytes {
            held.grow(now - series_bytes)
                .map_err(RunError::Overloaded)?;
            series_bytes = now;
        }
    }
    if eval.series_capped() {
        partial.push(series_capped(req.max_series));
    }
    Ok(Answer {
        value: eval,
        partial,
    })
}
