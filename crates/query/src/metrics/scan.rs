//! A per-span metrics query over the window's files in one pass, on every
//! core: the trace IDs are cut into as many ranges as the engine has
//! search threads ([`TraceIdRange::split`]), and each thread scans its
//! range of every file ([`Engine::scan_trace_ids`]: only the blocks that
//! may hold it inflated) and counts its traces into its own
//! [`MetricsEval`]; their series are then added up in range order, as a
//! query tier adds its nodes' ([`MetricsEval::merge`]), so the same store
//! gives the same series every time.
//!
//! Each thread reads, decodes and evaluates its own spans: handing spans
//! read by one thread to others for evaluation cost a third more CPU
//! (every handle's reference count went back and forth between the cores)
//! for 1.4 times the speed.
//!
//! Memory: the copy of the buffers is admitted before the scan (twice while
//! it is cut into the threads' parts), and each thread admits its series as
//! they grow.

use std::sync::Arc;

use tracedb_lsm::{Engine, TimeRange, TraceId, TraceIdRange};
use tracedb_traceql::{
    metrics::MetricsEval,
    trace::{EncodedSpan, Origins, ORIGINS_HELD_BYTES},
    Projection, RawNeeds,
};

use super::{MetricsRequest, CELL_BYTES};
use crate::{
    cancel::Cancel,
    read::Answer,
    search::{decode_with, encoded, RunError},
};

/// [`super::run`] over the window's files in one pass.
pub(super) fn scan(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
    wanted: Option<Arc<[TraceId]>>,
) -> Result<Answer<MetricsEval>, RunError> {
    scan_until(engine, req, cancel, wanted, u64::MAX)
}

/// [`scan`], counting only the spans that start at or before `until`
/// (Unix ns): the part of the window before retention's split, whose rest
/// the cells count ([`super::run`]).
pub(super) fn scan_until(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
    wanted: Option<Arc<[TraceId]>>,
    until: u64,
) -> Result<Answer<MetricsEval>, RunError> {
    let budget = engine.memory_budget();
    let mut held = budget.acquire(0).map_err(RunError::Overloaded)?;
    // A query the evaluator refuses is refused before any thread starts.
    req.evaluator()?;
    let projection = Projection::of(&req.query.query);
    // Where the others are judged the same without them, the spans whose
    // bytes cannot match are left out by the reads (in the files, their
    // payloads are not even put back together), and every trace handed on
    // may match. Once the query is cancelled every span is kept, so that
    // the next trace reaches the check below and stops the scan (a scan
    // that keeps no span would otherwise read to its end).
    let each_span = RawNeeds::of_each_span(&req.query.query);
    // Else a trace whose stored bytes cannot match is passed over whole.
    let raw_needs = match each_span {
        Some(_) => None,
        None => RawNeeds::of(&req.query.query),
    };
    let keep: Option<Arc<tracedb_lsm::KeepSpan>> = each_span.map(|needs| {
        let cancel = cancel.clone();
        Arc::new(
            move |_: &TraceId, payload: &[u8], resource: Option<&[u8]>| {
                cancel.is_cancelled()
                    || needs.span_may_match(&EncodedSpan {
                        payload,
                        resource,
                        scope: None,
                    })
            },
        ) as Arc<tracedb_lsm::KeepSpan>
    });
    // Files are chosen by the spans' times; a span counts by its start, so
    // the window is the grid's.
    let last = req.grid.end.min(until);
    let range = TimeRange::new(req.grid.start, last);
    // The copy of the buffers' spans is admitted before the scan reads,
    // twice while it is split among the threads (the parts are a copy).
    let buffers = engine.scan_buffers_of(range, wanted.as_deref());
    let copy_bytes = buffers.bytes();
    held.grow(2 * copy_bytes).map_err(RunError::Overloaded)?;
    let ranges = TraceIdRange::split(engine.search_threads());
    let parts = buffers.split(&ranges);
    held.shrink(copy_bytes);
    let parts = super::each_on_a_thread(ranges.iter().zip(parts).map(|(&ids, buffers)| {
        let projection = &projection;
        let raw_needs = raw_needs.as_ref();
        let keep = keep.clone();
        let wanted = wanted.clone();
        move || {
            let mut held = budget.acquire(0).map_err(RunError::Overloaded)?;
            // The resources and scopes decoded, kept from trace to trace.
            held.grow(ORIGINS_HELD_BYTES)
                .map_err(RunError::Overloaded)?;
            let mut origins = Origins::new();
            let mut eval = req.evaluator()?;
            eval.count_until(until);
            let row_bytes = req.grid.len() * CELL_BYTES + 256;
            let mut series_bytes = 0;
            let mut partial: Vec<String> = Vec::new();
            let mut over: Option<RunError> = None;
            let stats =
                engine.scan_where(range, ids, wanted, keep, buffers, |trace_id, spans| {
                    if let Err(e) = cancel.check() {
                        over = Some(e);
                        return false;
                    }
                    // Only spans that start in the window can count.
                    if !spans
                        .iter()
                        .any(|s| s.start_unix_nano > req.grid.start && s.start_unix_nano <= last)
                    {
                        return true;
                    }
                    // Nor can a trace whose stored bytes lack what the
                    // query's conditions name.
                    if raw_needs.is_some_and(|needs| !needs.may_match(encoded(spans))) {
                        return true;
                    }
                    match decode_with(trace_id, spans, projection, &mut origins) {
                        Ok(trace) => {
                            let sets = req.query.eval(&trace);
                            if !sets.is_empty() {
                                eval.observe(&req.query, &trace, &sets);
                            }
                        }
                        Err(e) => partial.push(format!("trace {trace_id} not evaluated: {e}")),
                    }
                    let now = eval.series_count() * row_bytes;
                    if now > series_bytes {
                        if let Err(e) = held.grow(now - series_bytes) {
                            over = Some(RunError::Overloaded(e));
                            return false;
                        }
                        series_bytes = now;
                    }
                    true
                })?;
            if let Some(e) = over {
                return Err(e);
            }
            partial.extend(stats.skipped.iter().map(crate::read::file_reason));
            Ok((
                Answer {
                    value: eval,
                    partial,
                },
                held,
            ))
        }
    }));
    super::add_up(parts, req.max_series)
}
