//! TraceQL search over this process's storage engine: the one search every
//! front end runs ([`Search`], answered by [`run`]).
//!
//! The search index proposes candidates as the engine walks its trace parts
//! newest start first ([`Engine::candidates`]): the traces with a part that
//! meets what the query needs ([`tracedb_traceql::needs`]) and starts within
//! the window. Each candidate is read whole and the query is evaluated on
//! its spans. A part never starts before its trace, so every trace the walk
//! has not proposed starts no later than where the walk stands: the search
//! stops once it holds `limit` matches that all started later than that.
//! Since the index only rules out traces that cannot match, the answer is
//! the newest `limit` matching traces, the same every time.
//!
//! A search inspects at most [`MAX_INSPECTED`] candidates; one that stops
//! there answers what it found, marked partial with the reason, rather than
//! claim no older trace matches.
//!
//! Beside the running of a search: what a query asks of the index and its
//! compiling (`policy`, over the analyses of `tracedb_traceql::analysis`:
//! what is refused, what holds on one span, the tier's relaxed query), the legacy search fields as query trees ([`legacy`]),
//! matches as `TraceSummary` rows for the tier (`wire`), and the tier's merge
//! of the parts of one trace (`combine`).

use std::{collections::VecDeque, sync::Arc};

use tracedb_lsm::{
    index::SearchQuery, Candidate, Candidates, Engine, Permit, Span, SpanId, TimeRange, TraceId,
};
use tracedb_traceql::{ast::Attribute, Compiled, EncodedSpan, Projection, Trace};

use crate::{
    cancel::Cancel,
    error::Error,
    read::{file_reason, Answer},
};

/// Most candidate traces one search reads and evaluates.
pub const MAX_INSPECTED: usize = 100_000;
/// Most spans shown per spanset when the request does not say.
pub const DEFAULT_SPSS: usize = 3;
/// Most spans per spanset a request may ask to be shown.
pub const MAX_SPSS: usize = 1_000;
/// Most traces one search may ask for.
pub const MAX_LIMIT: usize = 1_000;

/// A TraceQL search, as every front end asks it.
#[derive(Debug, Clone)]
pub struct Search {
    pub query: Arc<Compiled>,
    /// The query as the client wrote it, to pass on to the nodes of a tier.
    pub text: String,
    /// The trace starts within `[start, end]` (Unix ns; 0 leaves an end open).
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// Most traces answered, newest first.
    pub limit: usize,
    /// Most spans shown per spanset (the `matched` count counts them all).
    pub spans_per_spanset: usize,
    /// Answer, newest first, the traces the index cannot rule out instead of
    /// the matches, each with only its ID and the start of its newest such
    /// part: what a tier asks its nodes for when it evaluates each trace
    /// whole itself.
    pub candidates_only: bool,
    /// The window bounds the start of a matched span rather than the
    /// trace's (Jaeger's meaning): a trace that began before the window is
    /// found by a matching span in it.
    pub span_window: bool,
}

/// A field of a matched span or spanset, as the answer shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub key: String,
    pub value: String,
    /// `string`, `int`, `float`, `bool`, `duration`, `keyword` or `array`.
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedSpan {
    pub span_id: SpanId,
    pub name: String,
    pub start_unix_nano: u64,
    pub duration_nanos: u64,
    /// The fields the query names or selects that the span has.
    pub attributes: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedSpanset {
    /// Spans in the set (more than `spans` holds when cut at the request's
    /// spans per spanset).
    pub matched: u64,
    pub spans: Vec<MatchedSpan>,
    /// The `by()` values that made the set.
    pub attributes: Vec<Field>,
}

/// One matching trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    pub trace_id: TraceId,
    pub start_unix_nano: u64,
    pub duration_nanos: u64,
    pub span_count: u64,
    pub error_count: u64,
    pub root_service: Option<String>,
    pub root_name: Option<String>,
    /// Services of the trace, sorted.
    pub services: Vec<String>,
    /// Spans and error spans per service, sorted by service (`""` for spans
    /// without one): Tempo's `serviceStats`.
    pub service_stats: Vec<ServiceStats>,
    pub spansets: Vec<MatchedSpanset>,
    /// Spans naming a parent the trace does not hold. `Some` only when this
    /// answer was made from the whole trace as read (a store's own search,
    /// or a tier's evaluation of a trace it read whole), so that its start,
    /// duration and counts are the trace's; `None` on a row combined from
    /// the parts a tier's nodes answered, which may miss a part no node
    /// matched.
    pub orphans: Option<u64>,
}

/// The spans of one service in a matched trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStats {
    pub service: String,
    pub spans: u64,
    pub errors: u64,
}

/// `stats` with `more` added, service by service, sorted by service.
fn add_stats(stats: &mut Vec<ServiceStats>, more: &[ServiceStats]) {
    for m in more {
        match stats.binary_search_by(|s| s.service.as_str().cmp(&m.service)) {
            Ok(i) => {
                stats[i].spans += m.spans;
                stats[i].errors += m.errors;
            }
            Err(i) => stats.insert(i, m.clone()),
        }
    }
}

impl Search {
    /// What the index walks for: the window and what the query needs.
    fn index_query(&self) -> SearchQuery {
        let needs = op_needs(tracedb_traceql::needs(&self.query.query));
        if self.span_window {
            // Every trace with a part overlapping the window.
            return SearchQuery {
                start_max: self.end_unix_nano,
                end_min: self.start_unix_nano,
                needs,
                ..SearchQuery::default()
            };
        }
        SearchQuery {
            start_min: self.start_unix_nano,
            start_max: self.end_unix_nano,
            needs,
            ..SearchQuery::default()
        }
    }
}

/// Bytes a decoded span holds beyond its stored bytes (its strings and
/// vectors), for the memory budget: a conservative estimate.
pub(crate) const DECODED_SPAN_BYTES: usize = 512;

/// Why a search did not run: it could not have its share of the memory
/// budget (retryable), reading the store failed, the query cannot run, or
/// its caller went away ([`crate::cancel`]).
#[derive(Debug)]
pub enum RunError {
    Overloaded(tracedb_lsm::budget::Overloaded),
    Storage(tracedb_lsm::Error),
    Invalid(String),
    Cancelled,
}

impl From<tracedb_lsm::Error> for RunError {
    fn from(e: tracedb_lsm::Error) -> Self {
        RunError::Storage(e)
    }
}

impl From<RunError> for Error {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Storage(e) => Error::Storage(e),
            RunError::Invalid(why) => Error::InvalidArgument(why),
            RunError::Cancelled => Error::Cancelled,
            RunError::Overloaded(o) => Error::Unavailable(format!(
                "the memory budget cannot hold this search now ({} bytes more over {} of {} in use); retry",
                o.needed, o.in_use, o.limit
            )),
        }
    }
}

/// Runs `search` on `engine` (blocking): see the module docs. What the
/// search holds (the index blocks the walk decoded, the trace being
/// evaluated, the answer so far) is taken from the engine's memory budget
/// as it grows; a search the budget cannot hold is refused, retryably.
pub fn run(
    engine: &Engine,
    search: &Search,
    cancel: &Cancel,
) -> Result<Answer<Vec<Match>>, RunError> {
    if search.candidates_only {
        return candidates(engine, search, cancel);
    }
    let budget = engine.memory_budget();
    let mut held = budget.acquire(0).map_err(RunError::Overloaded)?;
    let limit = search.limit.clamp(1, MAX_LIMIT);
    let mut walk = engine.candidates(&search.index_query())?;
    let mut walk_bytes = 0;
    // Newest first, at most `limit`.
    let mut found: Vec<Match> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    let mut inspected = 0;
    // The next candidates, taken from the walk ahead of their turn so that
    // their spans are read from the disk while the one before is evaluated.
    let mut ahead: VecDeque<Candidate> = VecDeque::with_capacity(READ_AHEAD);
    loop {
        if let Some(last) = found.get(limit - 1) {
            // A trace not evaluated yet starts at or before the next
            // candidate's part, or the walk's position: none can come
            // before `last` unless it starts then too.
            let position = match ahead.front() {
                Some(next) => Some(next.start_unix_nano),
                None => walk.position(),
            };
            if position.is_none_or(|p| p < last.start_unix_nano) {
                break;
            }
        }
        // No more ahead than the answers still wanted: the walk does not go
        // further than a search without read-ahead would.
        let wanted = READ_AHEAD.min(limit.saturating_sub(found.len())).max(1);
        while ahead.len() < wanted {
            let Some(next) = next_counted(&mut walk, &mut held, &mut walk_bytes, cancel)? else {
                break;
            };
            engine.prefetch_trace(&next.trace_id);
            ahead.push_back(next);
        }
        let Some(candidate) = ahead.pop_front() else {
            break;
        };
        inspected += 1;
        let (lookup, trace_bytes) = read_candidate(engine, &candidate, &mut held, &mut partial)?;
        let evaluated = evaluate(search, candidate.trace_id, &lookup.spans);
        held.shrink(trace_bytes);
        match evaluated {
            Ok(Some(m)) => {
                held.grow(match_bytes(&m)).map_err(RunError::Overloaded)?;
                let at = found.partition_point(|f| answer_order(f, &m).is_lt());
                found.insert(at, m);
                if found.len() > limit {
                    let dropped = found.pop().expect("over the limit");
                    held.shrink(match_bytes(&dropped));
                }
            }
            Ok(None) => {}
            Err(e) => partial.push(format!("trace {} not evaluated: {e}", candidate.trace_id)),
        }
        if inspected >= MAX_INSPECTED && (!ahead.is_empty() || walk.position().is_some()) {
            partial.push(stopped_inspecting(inspected));
            break;
        }
    }
    quarantined_in(
        engine,
        TimeRange::new(search.start_unix_nano, search.end_unix_nano),
        &mut partial,
    );
    partial.extend(over_limit(search.limit, found.len()));
    Ok(Answer {
        value: found,
        partial,
    })
}

/// Names in `partial` each file in quarantine that may have held spans of
/// `window`: the index's walk cannot propose a trace held only there (a
/// lookup names such a file only for the traces it is asked for).
pub(crate) fn quarantined_in(engine: &Engine, window: TimeRange, partial: &mut Vec<String>) {
    for file in engine.quarantined_in(window) {
        let reason = file_reason(&file);
        if !partial.contains(&reason) {
            partial.push(reason);
        }
    }
}

/// A candidate's spans read whole, with `held` grown by what decoding them
/// will hold (returned, for the caller to give back) and the files that
/// could not be read named in `partial`.
pub(crate) fn read_candidate(
    engine: &Engine,
    candidate: &Candidate,
    held: &mut Permit,
    partial: &mut Vec<String>,
) -> Result<(tracedb_lsm::TraceLookup, usize), RunError> {
    let lookup = engine.lookup_trace(&candidate.trace_id, TimeRange::ALL)?;
    let trace_bytes: usize = lookup
        .spans
        .iter()
        .map(|s| 2 * s.payload.len() + DECODED_SPAN_BYTES)
        .sum();
    held.grow(trace_bytes).map_err(RunError::Overloaded)?;
    for skipped in &lookup.skipped {
        let reason = file_reason(skipped);
        if !partial.contains(&reason) {
            partial.push(reason);
        }
    }
    Ok((lookup, trace_bytes))
}

/// Candidates a search takes from the walk ahead of their turn, their spans
/// asked of the disk at once ([`Engine::prefetch_trace`]): a cold search
/// then waits on the disk for several traces together.
pub(crate) const READ_AHEAD: usize = 8;

/// The walk's next candidate, with `held` grown or shrunk to the bytes the
/// walk holds now (`walk_bytes` is what it held at the last call); none once
/// `cancel` is set, but [`RunError::Cancelled`].
pub(crate) fn next_counted(
    walk: &mut Candidates,
    held: &mut Permit,
    walk_bytes: &mut usize,
    cancel: &Cancel,
) -> Result<Option<Candidate>, RunError> {
    cancel.check()?;
    let candidate = walk.next_candidate()?;
    let now = walk.held_bytes();
    if now > *walk_bytes {
        held.grow(now - *walk_bytes).map_err(RunError::Overloaded)?;
    } else {
        held.shrink(*walk_bytes - now);
    }
    *walk_bytes = now;
    Ok(candidate)
}

/// The traces whose parts the index cannot rule out for `search`, at most
/// `limit`, newest first by the start of their newest such part (never
/// earlier than the trace's): a superset of the matches in the window, read
/// from the index alone, for a tier that reads each one whole and evaluates
/// the query on it. A row holds the trace ID and that start, nothing else.
fn candidates(
    engine: &Engine,
    search: &Search,
    cancel: &Cancel,
) -> Result<Answer<Vec<Match>>, RunError> {
    let budget = engine.memory_budget();
    let mut held = budget.acquire(0).map_err(RunError::Overloaded)?;
    let limit = search.limit.clamp(1, MAX_LIMIT);
    let mut walk = engine.candidates(&search.index_query())?;
    let mut walk_bytes = 0;
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    while found.len() < limit {
        let Some(candidate) = next_counted(&mut walk, &mut held, &mut walk_bytes, cancel)? else {
            break;
        };
        // The walk goes newest part first: a trace's first part is its newest.
        if seen.insert(candidate.trace_id) {
            found.push(Match {
                trace_id: candidate.trace_id,
                start_unix_nano: candidate.start_unix_nano,
                duration_nanos: 0,
                span_count: 0,
                error_count: 0,
                root_service: None,
                root_name: None,
                services: Vec::new(),
                service_stats: Vec::new(),
                spansets: Vec::new(),
                orphans: None,
            });
        }
    }
    // Ties at one start in trace ID order, as the answers of `run`.
    found.sort_by(answer_order);
    let mut partial = Vec::new();
    quarantined_in(
        engine,
        TimeRange::new(search.start_unix_nano, search.end_unix_nano),
        &mut partial,
    );
    Ok(Answer {
        value: found,
        partial,
    })
}

/// The partial mark of a search asked for `asked` traces, more than the
/// [`MAX_LIMIT`] one search answers, whose answer holds `answered`: when
/// that is the most, older matches were not searched (Jaeger's search depth
/// and `SearchTraces.limit` may ask for up to 10,000).
pub fn over_limit(asked: usize, answered: usize) -> Option<String> {
    (asked > MAX_LIMIT && answered >= MAX_LIMIT).then(|| {
        format!(
            "a search answers at most {MAX_LIMIT} traces and {asked} were asked for; older matches were not searched"
        )
    })
}

/// The partial mark of a search that stopped after reading `inspected`
/// candidate traces ([`MAX_INSPECTED`]).
pub fn stopped_inspecting(inspected: usize) -> String {
    format!(
        "the search stopped after inspecting {inspected} traces; older traces were not searched (narrow the time range or the query)"
    )
}

/// The order of answers: newest start first, then by trace ID.
fn answer_order(a: &Match, b: &Match) -> std::cmp::Ordering {
    b.start_unix_nano
        .cmp(&a.start_unix_nano)
        .then(a.trace_id.cmp(&b.trace_id))
}

/// About how many bytes a match holds.
fn match_bytes(m: &Match) -> usize {
    let field = |f: &Field| f.key.len() + f.value.len() + f.kind.len() + 72;
    std::mem::size_of::<Match>()
        + m.services.iter().map(|s| s.len() + 24).sum::<usize>()
        + m.service_stats
            .iter()
            .map(|s| s.service.len() + std::mem::size_of::<ServiceStats>())
            .sum::<usize>()
        + m.spansets
            .iter()
            .map(|set| {
                set.attributes.iter().map(field).sum::<usize>()
                    + set
                        .spans
                        .iter()
                        .map(|s| s.name.len() + 64 + s.attributes.iter().map(field).sum::<usize>())
                        .sum::<usize>()
            })
            .sum::<usize>()
}

/// The spans of one trace decoded, as the evaluator reads them.
pub fn decode(
    trace_id: TraceId,
    spans: &[Span],
) -> Result<Trace, tracedb_traceql::trace::DecodeError> {
    decode_for(trace_id, spans, &Projection::all())
}

/// The trace `spans` hold, with only what `projection` reads of each span
/// ([`Trace::decode_for`]).
pub fn decode_for(
    trace_id: TraceId,
    spans: &[Span],
    projection: &Projection,
) -> Result<Trace, tracedb_traceql::trace::DecodeError> {
    Trace::decode_for(trace_id.0, encoded(spans), projection)
}

/// [`decode_for`], with the resources and scopes `origins` decoded
/// already (a caller decoding many traces keeps one for them all).
pub fn decode_with(
    trace_id: TraceId,
    spans: &[Span],
    projection: &Projection,
    origins: &mut tracedb_traceql::trace::Origins,
) -> Result<Trace, tracedb_traceql::trace::DecodeError> {
    Trace::decode_with(trace_id.0, encoded(spans), projection, origins)
}

/// [`decode_with`] without the spans whose bytes `each` rules out
/// ([`tracedb_traceql::RawNeeds::of_each_span`]: they match nothing, and
/// the others are judged the same without them); every span when `None`.
pub fn decode_matching(
    trace_id: TraceId,
    spans: &[Span],
    each: Option<&tracedb_traceql::RawNeeds>,
    projection: &Projection,
    origins: &mut tracedb_traceql::trace::Origins,
) -> Result<Trace, tracedb_traceql::trace::DecodeError> {
    match each {
        Some(needs) => Trace::decode_with(
            trace_id.0,
            encoded(spans).filter(|s| needs.span_may_match(s)),
            projection,
            origins,
        ),
        None => decode_with(trace_id, spans, projection, origins),
    }
}

/// Stored spans as the evaluator reads their bytes.
pub fn encoded(spans: &[Span]) -> impl Iterator<Item = EncodedSpan<'_>> + Clone {
    spans.iter().map(|s| EncodedSpan {
        payload: &s.payload,
        resource: s.group.resource.as_deref(),
        scope: s.group.scope.as_deref(),
    })
}

/// `search`'s query evaluated on one trace's spans: the match, if any.
pub fn evaluate(
    search: &Search,
    trace_id: TraceId,
    spans: &[Span],
) -> Result<Option<Match>, tracedb_traceql::trace::DecodeError> {
    if spans.is_empty() {
        return Ok(None);
    }
    let trace = decode(trace_id, spans)?;
    // The index places a trace by its summaries; the window is decided on
    // the spans read.
    let within = |start: u64| {
        (search.start_unix_nano == 0 || start >= search.start_unix_nano)
            && (search.end_unix_nano == 0 || start <= search.end_unix_nano)
    };
    if !search.span_window && !within(trace.start_unix_nano) {
        return Ok(None);
    }
    let mut sets = search.query.eval(&trace);
    if search.span_window {
        // Some matched span starts in the window.
        sets.retain(|set| {
            set.spans
                .iter()
                .any(|&i| within(trace.spans[i].start_unix_nano))
        });
    }
    if sets.is_empty() {
        return Ok(None);
    }
    Ok(Some(matched(search, &trace, sets)))
}

/// The answer for a trace the query matched.
fn matched(search: &Search, trace: &Trace, sets: Vec<tracedb_traceql::Spanset>) -> Match {
    let shown = search.query.shown_fields();
    let spss = search.spans_per_spanset.min(MAX_SPSS);
    let spansets = sets
        .into_iter()
        .map(|set| MatchedSpanset {
            matched: set.spans.len() as u64,
            spans: set
                .spans
                .iter()
                .take(spss)
                .map(|&i| matched_span(search, trace, i, &shown))
                .collect(),
            attributes: set
                .by
                .into_iter()
                .map(|(key, value)| Field {
                    key,
                    value,
                    kind: "string".to_owned(),
                })
                .collect(),
        })
        .collect();
    Match {
        spansets,
        ..summary(trace)
    }
}

/// What an answer says of a whole trace, without spansets: its start,
/// duration, root, and its spans, error spans and orphans, per service too.
pub fn summary(trace: &Trace) -> Match {
    let mut services: Vec<String> = trace
        .spans
        .iter()
        .filter_map(|s| s.service().map(str::to_owned))
        .collect();
    services.sort();
    services.dedup();
    let mut per_service: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for span in &trace.spans {
        let counts = per_service
            .entry(span.service().unwrap_or_default())
            .or_default();
        counts.0 += 1;
        counts.1 += u64::from(span.status == tracedb_traceql::ast::Status::Error);
    }
    let service_stats = per_service
        .into_iter()
        .map(|(service, (spans, errors))| ServiceStats {
            service: service.to_owned(),
            spans,
            errors,
        })
        .collect();
    Match {
        trace_id: TraceId(trace.trace_id),
        start_unix_nano: trace.start_unix_nano,
        duration_nanos: trace.duration_nanos(),
        span_count: trace.spans.len() as u64,
        error_count: trace
            .spans
            .iter()
            .filter(|s| s.status == tracedb_traceql::ast::Status::Error)
            .count() as u64,
        root_service: trace.root_service().map(str::to_owned),
        root_name: trace.root_name().map(str::to_owned),
        services,
        service_stats,
        spansets: Vec::new(),
        orphans: Some(
            trace
                .spans
                .iter()
                .zip(&trace.parent)
                .filter(|(span, parent)| span.parent_id.is_some() && parent.is_none())
                .count() as u64,
        ),
    }
}

fn matched_span(search: &Search, trace: &Trace, i: usize, shown: &[Attribute]) -> MatchedSpan {
    let span = &trace.spans[i];
    MatchedSpan {
        span_id: SpanId(span.span_id),
        name: span.name.clone(),
        start_unix_nano: span.start_unix_nano,
        duration_nanos: span.duration_nanos(),
        attributes: shown
            .iter()
            .filter_map(|a| {
                let (value, kind) = search.query.field_text(trace, i, a)?;
                Some(Field {
                    key: field_key(a),
                    value,
                    kind: kind.to_owned(),
                })
            })
            .collect(),
    }
}

/// The key an answer gives a field: the attribute's name without its scope,
/// or the intrinsic's short name.
fn field_key(a: &Attribute) -> String {
    use tracedb_traceql::ast::Intrinsic::*;
    match a {
        Attribute::Attr { name, .. } => name.clone(),
        Attribute::Intrinsic(x) => match x {
            Name => "name".to_owned(),
            Status => "status".to_owned(),
            StatusMessage => "statusMessage".to_owned(),
            Kind => "kind".to_owned(),
            Duration => "duration".to_owned(),
            RootName => "rootName".to_owned(),
            RootServiceName => "rootServiceName".to_owned(),
            TraceDuration => "traceDuration".to_owned(),
            other => other.name().to_owned(),
        },
    }
}

mod combine;
pub mod legacy;
mod policy;
#[cfg(test)]
pub(crate) mod tests;
mod wire;

pub use combine::combine;
pub(crate) use policy::op_needs;
pub use policy::{compile, compile_any, narrowing, per_span_only, refused, relaxed};
pub use wire::{from_proto, to_proto};
