//! Reading one trace, the same way for every front-end (GetTrace, Jaeger's
//! GetTraces, the Tempo API), so each answers alike:
//!
//! - whole: every stored span, each (trace ID, span ID) once;
//! - partial: the spans that could be read, when damaged files that may hold
//!   more were skipped. Each front-end marks it where its protocol can
//!   (gRPC metadata and HTTP headers `tracedb-partial`, `tracedb-partial-reason`),
//!   and every partial answer is logged as a warning and counted in
//!   `tracedb_partial_answers_total{api}` (Jaeger's API has no field for it);
//! - [`Error::Unreadable`]: no span could be read but damaged files may hold
//!   some, never a "not found";
//! - [`Error::NotFound`]: nothing is stored.
//!
//! An answer with no spans is never a success.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use tracedb_lsm::{Engine, SkippedFile, Span, TimeRange, TraceId};

use crate::error::Error;

/// A trace as read: never empty.
#[derive(Debug)]
pub struct FoundTrace {
    pub trace_id: TraceId,
    /// At least one span, ordered by start time.
    pub spans: Vec<Span>,
    /// Files that may hold more spans of the trace but could not be read.
    pub skipped: Vec<SkippedFile>,
}

impl FoundTrace {
    pub fn is_partial(&self) -> bool {
        !self.skipped.is_empty()
    }
}

/// Reads the trace off the runtime threads (file reads can block on the disk).
pub async fn trace(
    engine: &Arc<Engine>,
    trace_id: TraceId,
    range: TimeRange,
) -> Result<FoundTrace, Error> {
    let engine = engine.clone();
    let found = tokio::task::spawn_blocking(move || engine.lookup_trace(&trace_id, range))
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
    match (found.spans.is_empty(), found.is_partial()) {
        (true, true) => Err(Error::Unreadable {
            trace: trace_id,
            skipped: found.skipped,
        }),
        (true, false) => Err(Error::NotFound(trace_id)),
        (false, _) => Ok(FoundTrace {
            trace_id,
            spans: found.spans,
            skipped: found.skipped,
        }),
    }
}

/// The read APIs, for `tracedb_partial_answers_total{api}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `tracedb.query.v1.QueryService/GetTrace`.
    Grpc = 0,
    /// `jaeger.storage.v2.TraceReader`.
    Jaeger = 1,
    /// The Tempo HTTP API.
    Tempo = 2,
}

impl Api {
    pub const ALL: [Api; 3] = [Api::Grpc, Api::Jaeger, Api::Tempo];

    pub fn label(self) -> &'static str {
        match self {
            Api::Grpc => "grpc",
            Api::Jaeger => "jaeger",
            Api::Tempo => "tempo",
        }
    }
}

static PARTIAL_ANSWERS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Logs and counts a partial answer about to be sent on `api`.
pub fn note_partial(api: Api, found: &FoundTrace) {
    PARTIAL_ANSWERS[api as usize].fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        api = api.label(),
        trace_id = %found.trace_id,
        reason = %crate::service::describe_skipped(&found.skipped),
        "answering with a partial trace: damaged files that may hold more of it were skipped"
    );
}

/// Partial answers sent so far on `api`, since the process started.
pub fn partial_answers(api: Api) -> u64 {
    PARTIAL_ANSWERS[api as usize].load(Ordering::Relaxed)
}
