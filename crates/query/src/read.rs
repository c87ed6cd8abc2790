//! The one read interface every front-end calls ([`Reads`]): GetTrace and
//! SearchTraces, Jaeger's `TraceReader` and `DependencyReader`, and the Tempo
//! API ask it for traces, searches, services, operations, tags and
//! dependencies, and never touch a store themselves. [`LocalReads`] answers
//! from the storage engine of this process.
//!
//! A trace is answered the same way for every front-end, so each answers alike:
//!
//! - whole: every stored span, each (trace ID, span ID) once;
//! - partial: the spans that could be read, when sources that may hold more
//!   were skipped (damaged files; on a query tier, nodes that did not answer). Each front-end marks it where its protocol can
//!   (gRPC metadata and HTTP headers `tracedb-partial`, `tracedb-partial-reason`),
//!   and every partial answer is logged as a warning and counted in
//!   `tracedb_partial_answers_total{api}` (Jaeger's API has no field for it);
//! - [`Error::Unreadable`]: no span could be read but damaged files may hold
//!   some, never a "not found";
//! - [`Error::NotFound`]: nothing is stored.
//!
//! An answer with no spans is never a success.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use bytes::Bytes;
use tracedb_lsm::{
    index::{TagScope, ValueKind},
    Engine, SearchSnapshot, SkippedFile, Span, TimeRange, TraceId, ValuesLimit,
};

use tracedb_traceql::metrics::MetricsEval;

use crate::{
    cancel::Cancel,
    error::Error,
    metrics::MetricsRequest,
    search::{Match, RunError, Search},
    traces_data::encode_traces_data,
};

/// What the read front-ends ask of a store. Every method is answered off the
/// runtime threads where it blocks.
#[tonic::async_trait]
pub trait Reads: Send + Sync + 'static {
    /// A whole trace, or why not: see the module documentation.
    async fn trace(&self, trace_id: TraceId, range: TimeRange) -> Result<FoundTrace, Error>;

    /// The newest traces a TraceQL search matches, at most `search.limit`,
    /// with their matched spansets ([`crate::search`]).
    async fn find(&self, search: Search) -> Result<Answer<Vec<Match>>, Error>;

    /// Services with spans in `range`, sorted.
    async fn services(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error>;

    /// (span name, OTLP kind) of a service's spans in `range`, sorted;
    /// `kind` keeps one kind.
    async fn operations(
        &self,
        service: String,
        kind: Option<u8>,
        range: TimeRange,
    ) -> Result<Answer<Vec<(String, u8)>>, Error>;

    /// Span names of every service in `range`, sorted, each once.
    async fn span_names(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error>;

    /// Attribute keys with their scope, of traces in `range`.
    async fn tag_keys(&self, range: TimeRange) -> Result<Answer<TagKeys>, Error>;

    /// Values of attribute `key` (in `scope`, or either) in `range`, with
    /// their types, of traces that can match `query` (TraceQL, possibly
    /// unfinished; see [`crate::search::narrowing`]): at most `limit` of
    /// them when it is not 0 (as asked, so not partial). Past
    /// [`TAG_VALUES_MAX_BYTES`] of values the answer stops there and is
    /// partial.
    async fn tag_values(
        &self,
        scope: Option<TagScope>,
        key: String,
        range: TimeRange,
        query: String,
        limit: usize,
    ) -> Result<Answer<TagValues>, Error>;

    /// Calls from one service to another in `range`: (parent, child) -> count.
    async fn dependencies(&self, range: TimeRange) -> Result<Answer<Dependencies>, Error>;

    /// A TraceQL metrics query's series, accumulated and not yet finished
    /// ([`crate::metrics`]), so the stores of several tenants can be added.
    async fn metrics(&self, request: MetricsRequest) -> Result<Answer<MetricsEval>, Error>;
}

/// The most bytes of values a tag-values answer holds; past it the answer
/// stops and is partial. Tempo's `max_bytes_per_tag_values_query` defaults
/// to the same, and stops there too (without saying so).
pub const TAG_VALUES_MAX_BYTES: usize = 1_000_000;

/// The partial reason of a tag-values answer cut at [`TAG_VALUES_MAX_BYTES`].
pub fn tag_values_cut() -> String {
    format!(
        "tag values stop at {TAG_VALUES_MAX_BYTES} bytes of values; \
         narrow them with q, a shorter time range or limit"
    )
}

/// Values gathered from several sources held to the limits of one answer:
/// at most `limit` (when not 0, as asked: not partial), and at most
/// [`TAG_VALUES_MAX_BYTES`] of text (past it, cut and marked partial).
pub fn limit_values(answer: &mut Answer<TagValues>, limit: usize) {
    let values = &mut answer.value;
    let mut bytes: usize = values.iter().map(|(v, _)| v.len()).sum();
    while limit > 0 && values.len() > limit {
        if let Some((v, _)) = values.pop_last() {
            bytes -= v.len();
        }
    }
    let mut cut = false;
    while bytes > TAG_VALUES_MAX_BYTES {
        cut = true;
        match values.pop_last() {
            Some((v, _)) => bytes -= v.len(),
            None => break,
        }
    }
    if cut && !answer.partial.contains(&tag_values_cut()) {
        answer.partial.push(tag_values_cut());
    }
}

/// Attribute keys with the scope each was seen in.
pub type TagKeys = BTreeSet<(TagScope, String)>;
/// Attribute values with their types.
pub type TagValues = BTreeSet<(String, ValueKind)>;
/// (parent service, child service) -> calls.
pub type Dependencies = BTreeMap<(String, String), u64>;

/// [`Reads`] from the storage engine of this process.
#[derive(Clone)]
pub struct LocalReads {
    engine: Arc<Engine>,
}

impl LocalReads {
    pub fn new(engine: Arc<Engine>) -> Self {
        LocalReads { engine }
    }

    /// Runs `f` with the engine on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> tracedb_lsm::Result<T> + Send + 'static,
    ) -> Result<T, Error> {
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || f(&engine))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(Error::from)
    }

    /// Runs `f` with the engine on the blocking pool, with a [`Cancel`] that
    /// is set when this future is dropped ([`crate::cancel`]).
    async fn cancellable<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine, &Cancel) -> Result<T, RunError> + Send + 'static,
    ) -> Result<T, Error> {
        let engine = self.engine.clone();
        let cancel = Cancel::new();
        let _stop_if_dropped = cancel.on_drop();
        tokio::task::spawn_blocking(move || crate::cancel::counted(f(&engine, &cancel)))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(Error::from)
    }

    /// The union of `f` over the search index of `range`, one summary set at
    /// a time (see [`Engine::each_index`]).
    async fn union<T, I>(
        &self,
        range: TimeRange,
        f: impl Fn(&SearchSnapshot) -> I + Send + 'static,
    ) -> Result<Answer<BTreeSet<T>>, Error>
    where
        T: Ord + Send + 'static,
        I: IntoIterator<Item = T>,
    {
        self.cancellable(move |engine, cancel| {
            let mut out = BTreeSet::new();
            engine.each_index_until(range, cancel.flag(), |index| out.extend(f(index)))?;
            cancel.check()?;
            Ok(Answer::whole(out))
        })
        .await
    }
}

#[tonic::async_trait]
impl Reads for LocalReads {
    async fn trace(&self, trace_id: TraceId, range: TimeRange) -> Result<FoundTrace, Error> {
        let found = self
            .blocking(move |engine| engine.lookup_trace(&trace_id, range))
            .await?;
        let partial: Vec<String> = found.skipped.iter().map(file_reason).collect();
        let skipped = found.skipped;
        FoundTrace::new(trace_id, found.spans, partial, |partial| {
            if partial.is_empty() {
                Error::NotFound(trace_id)
            } else {
                Error::Unreadable {
                    trace: trace_id,
                    skipped,
                }
            }
        })
    }

    async fn find(&self, search: Search) -> Result<Answer<Vec<Match>>, Error> {
        self.cancellable(move |engine, cancel| crate::search::run(engine, &search, cancel))
            .await
    }

    async fn metrics(&self, request: MetricsRequest) -> Result<Answer<MetricsEval>, Error> {
        self.cancellable(move |engine, cancel| crate::metrics::run(engine, &request, cancel))
            .await
    }

    async fn services(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        let set = self.union(range, |index| index.services()).await?;
        Ok(Answer::whole(set.value.into_iter().collect()))
    }

    async fn operations(
        &self,
        service: String,
        kind: Option<u8>,
        range: TimeRange,
    ) -> Result<Answer<Vec<(String, u8)>>, Error> {
        let set = self
            .union(range, move |index| index.operations(&service, kind))
            .await?;
        Ok(Answer::whole(set.value.into_iter().collect()))
    }

    async fn span_names(&self, range: TimeRange) -> Result<Answer<Vec<String>>, Error> {
        let set = self
            .union(range, |index| {
                index
                    .services()
                    .iter()
                    .flat_map(|service| index.operations(service, None))
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>()
            })
            .await?;
        Ok(Answer::whole(set.value.into_iter().collect()))
    }

    async fn tag_keys(&self, range: TimeRange) -> Result<Answer<TagKeys>, Error> {
        self.blocking(move |engine| engine.tag_keys(range).map(Answer::whole))
            .await
    }

    async fn tag_values(
        &self,
        scope: Option<TagScope>,
        key: String,
        range: TimeRange,
        query: String,
        limit: usize,
    ) -> Result<Answer<TagValues>, Error> {
        let needs = crate::search::narrowing(&query);
        let most = ValuesLimit {
            values: limit,
            bytes: TAG_VALUES_MAX_BYTES,
        };
        let found = self
            .cancellable(move |engine, cancel| {
                let found =
                    engine.tag_values_until(scope, &key, range, &needs, most, cancel.flag())?;
                // Stopped for the flag, what was found is not the answer.
                cancel.check()?;
                Ok(found)
            })
            .await?;
        let asked = limit > 0 && found.values.len() >= limit;
        Ok(Answer {
            partial: if found.stopped && !asked {
                vec![tag_values_cut()]
            } else {
                Vec::new()
            },
            value: found.values,
        })
    }

    async fn dependencies(&self, range: TimeRange) -> Result<Answer<Dependencies>, Error> {
        self.cancellable(move |engine, cancel| {
            let calls = engine.dependencies_until(range, cancel.flag())?;
            cancel.check()?;
            Ok(Answer::whole(calls))
        })
        .await
    }
}

/// A trace as read: at least one span of it, by construction. The only way
/// to make one is [`FoundTrace::new`], which answers an error instead when
/// no span is left, so no API can send an OK answer that carries no span.
#[derive(Debug)]
pub struct FoundTrace {
    trace_id: TraceId,
    /// In [`Span::read_order`], without exact repeats, all of `trace_id`.
    spans: Vec<Span>,
    partial: Vec<String>,
}

impl FoundTrace {
    /// The trace `trace_id` from the spans read of it, or `empty(partial)`
    /// when none is left. Spans of another trace are dropped (they are not
    /// this trace's, whatever returned them); the rest are ordered by start
    /// time, exact repeats dropped (spans that share a span ID but differ are
    /// all kept). `partial` holds one reason per source that may
    /// hold more spans and was not read.
    pub fn new(
        trace_id: TraceId,
        mut spans: Vec<Span>,
        partial: Vec<String>,
        empty: impl FnOnce(Vec<String>) -> Error,
    ) -> Result<FoundTrace, Error> {
        spans.retain(|s| s.trace_id == trace_id);
        if spans.is_empty() {
            return Err(empty(partial));
        }
        tracedb_lsm::span::drop_repeats(&mut spans);
        Ok(FoundTrace {
            trace_id,
            spans,
            partial,
        })
    }

    pub fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    /// At least one span, ordered by start time, each (trace ID, span ID) once.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// Why more spans may exist (a damaged file, a node that did not
    /// answer), one reason each; empty when the trace is whole.
    pub fn partial(&self) -> &[String] {
        &self.partial
    }

    pub fn is_partial(&self) -> bool {
        !self.partial.is_empty()
    }

    /// The trace as encoded `TracesData` messages of about `max_bytes` each
    /// (one span at least, whatever its size): never an empty list, and no
    /// message without a span.
    pub fn encode(&self, max_bytes: usize) -> Vec<Bytes> {
        encode_traces_data(&self.spans, max_bytes)
    }

    /// The spans and the partial reasons.
    pub fn into_parts(self) -> (Vec<Span>, Vec<String>) {
        (self.spans, self.partial)
    }
}

/// An answer other than a trace, and why it may be incomplete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    pub value: T,
    /// One reason per missing source; empty when the answer is whole.
    pub partial: Vec<String>,
}

impl<T> Answer<T> {
    pub fn whole(value: T) -> Self {
        Answer {
            value,
            partial: Vec::new(),
        }
    }

    pub fn is_partial(&self) -> bool {
        !self.partial.is_empty()
    }
}

/// One line of partial reasons, for a header or a log.
pub fn describe(reasons: &[String]) -> String {
    reasons.join("; ")
}

/// A skipped file as a partial reason.
pub fn file_reason(file: &SkippedFile) -> String {
    format!("{}: {}", file.path.display(), file.reason)
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

/// Logs and counts a partial answer about to be sent on `api`; `what` says
/// what was asked (a trace ID, "search", ...).
pub fn note_partial(api: Api, what: &dyn std::fmt::Display, reasons: &[String]) {
    PARTIAL_ANSWERS[api as usize].fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        api = api.label(),
        what = %what,
        reason = %describe(reasons),
        "answering with a partial answer: sources that may hold more were skipped"
    );
}

/// Partial answers sent so far on `api`, since the process started.
pub fn partial_answers(api: Api) -> u64 {
    PARTIAL_ANSWERS[api as usize].load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prost::Message;
    use tracedb_lsm::{ScopeGroup, SpanId};
    use tracedb_proto::trace::v1::TracesData;

    use super::*;

    fn span(trace: u8, id: u8, start: u64) -> Span {
        Span {
            trace_id: TraceId([trace; 16]),
            span_id: SpanId([id; 8]),
            start_unix_nano: start,
            end_unix_nano: start + 1,
            group: Arc::new(ScopeGroup::default()),
            payload: tracedb_proto::trace::v1::Span {
                trace_id: vec![trace; 16].into(),
                span_id: vec![id; 8].into(),
                start_time_unix_nano: start,
                ..Default::default()
            }
            .encode_to_vec()
            .into(),
        }
    }

    fn not_found(_: Vec<String>) -> Error {
        Error::NotFound(TraceId([1; 16]))
    }

    #[test]
    fn a_found_trace_holds_a_span_of_it_or_is_an_error() {
        let id = TraceId([1; 16]);
        let empty = FoundTrace::new(id, Vec::new(), Vec::new(), not_found);
        assert!(matches!(empty, Err(Error::NotFound(_))), "{empty:?}");
        // Only another trace's spans: not this trace, whatever read them.
        let foreign = FoundTrace::new(id, vec![span(2, 1, 5)], Vec::new(), not_found);
        assert!(matches!(foreign, Err(Error::NotFound(_))), "{foreign:?}");
        // The reasons reach the caller's error when nothing is left.
        let unreadable = FoundTrace::new(id, Vec::new(), vec!["damaged".into()], |reasons| {
            Error::Unavailable(reasons.join(";"))
        });
        assert!(
            matches!(&unreadable, Err(Error::Unavailable(r)) if r == "damaged"),
            "{unreadable:?}"
        );

        let found = FoundTrace::new(
            id,
            vec![
                span(1, 2, 20),
                span(2, 9, 1),
                span(1, 1, 10),
                span(1, 2, 20),
            ],
            Vec::new(),
            not_found,
        )
        .expect("a span of the trace");
        let ids: Vec<u8> = found.spans().iter().map(|s| s.span_id.0[0]).collect();
        assert_eq!(ids, [1, 2], "this trace's spans, by start, each once");
        let messages = found.encode(usize::MAX);
        assert_eq!(messages.len(), 1);
        let data = TracesData::decode(messages[0].clone()).expect("decodes");
        let spans: usize = data
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(spans, 2);
    }
}
