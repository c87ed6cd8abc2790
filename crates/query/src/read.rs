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

use tracedb_lsm::{
    index::{SearchQuery, TagScope, TraceHit, ValueKind},
    Engine, SearchSnapshot, SkippedFile, Span, TimeRange, TraceId,
};

use crate::{
    error::Error,
    search::{Match, Search},
};

/// What the read front-ends ask of a store. Every method is answered off the
/// runtime threads where it blocks.
#[tonic::async_trait]
pub trait Reads: Send + Sync + 'static {
    /// A whole trace, or why not: see the module documentation.
    async fn trace(&self, trace_id: TraceId, range: TimeRange) -> Result<FoundTrace, Error>;

    /// Traces matching `query`, newest first, at most `query.limit`.
    async fn search(&self, query: SearchQuery) -> Result<Answer<Vec<TraceHit>>, Error>;

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
    /// unfinished; see [`crate::search::narrowing`]).
    async fn tag_values(
        &self,
        scope: Option<TagScope>,
        key: String,
        range: TimeRange,
        query: String,
    ) -> Result<Answer<TagValues>, Error>;

    /// Calls from one service to another in `range`: (parent, child) -> count.
    async fn dependencies(&self, range: TimeRange) -> Result<Answer<Dependencies>, Error>;
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
        self.blocking(move |engine| {
            let mut out = BTreeSet::new();
            engine.each_index(range, |index| out.extend(f(index)))?;
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
        match (found.spans.is_empty(), found.is_partial()) {
            (true, true) => Err(Error::Unreadable {
                trace: trace_id,
                skipped: found.skipped,
            }),
            (true, false) => Err(Error::NotFound(trace_id)),
            (false, _) => Ok(FoundTrace {
                trace_id,
                spans: found.spans,
                partial: found.skipped.iter().map(file_reason).collect(),
            }),
        }
    }

    async fn search(&self, query: SearchQuery) -> Result<Answer<Vec<TraceHit>>, Error> {
        self.blocking(move |engine| engine.search(&query).map(Answer::whole))
            .await
    }

    async fn find(&self, search: Search) -> Result<Answer<Vec<Match>>, Error> {
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || crate::search::run(&engine, &search))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map_err(Error::from)
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
    ) -> Result<Answer<TagValues>, Error> {
        let needs = crate::search::narrowing(&query);
        self.blocking(move |engine| {
            engine
                .tag_values(scope, &key, range, &needs)
                .map(Answer::whole)
        })
        .await
    }

    async fn dependencies(&self, range: TimeRange) -> Result<Answer<Dependencies>, Error> {
        self.blocking(move |engine| engine.dependencies(range).map(Answer::whole))
            .await
    }
}

/// A trace as read: never empty.
#[derive(Debug)]
pub struct FoundTrace {
    pub trace_id: TraceId,
    /// At least one span, ordered by start time, each (trace ID, span ID) once.
    pub spans: Vec<Span>,
    /// Why more spans may exist (a damaged file, a node that did not
    /// answer), one reason each; empty when the trace is whole.
    pub partial: Vec<String>,
}

impl FoundTrace {
    pub fn is_partial(&self) -> bool {
        !self.partial.is_empty()
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
