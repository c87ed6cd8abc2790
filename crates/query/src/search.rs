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

use std::{collections::VecDeque, sync::Arc};

use tracedb_lsm::{
    index::{OpNeed, SearchQuery, TagNeed, TagScope, ValueKind},
    Candidate, Candidates, Engine, Permit, Span, SpanId, TimeRange, TraceId,
};
use tracedb_proto::query::v1 as proto;
use tracedb_traceql::{
    ast::{
        Attribute, BinaryOp, FieldExpr, Intrinsic, Query, ScalarExpr, Scope, SpansetExpr,
        SpansetOp, Stage, Static,
    },
    Compiled, EncodedSpan, Trace,
};

use crate::{
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
/// budget (retryable), reading the store failed, or the query cannot run.
#[derive(Debug)]
pub enum RunError {
    Overloaded(tracedb_lsm::budget::Overloaded),
    Storage(tracedb_lsm::Error),
    Invalid(String),
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
pub fn run(engine: &Engine, search: &Search) -> Result<Answer<Vec<Match>>, RunError> {
    if search.candidates_only {
        return candidates(engine, search);
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
            let Some(next) = next_counted(&mut walk, &mut held, &mut walk_bytes)? else {
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
    partial.extend(over_limit(search.limit, found.len()));
    Ok(Answer {
        value: found,
        partial,
    })
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
const READ_AHEAD: usize = 8;

/// The walk's next candidate, with `held` grown or shrunk to the bytes the
/// walk holds now (`walk_bytes` is what it held at the last call).
pub(crate) fn next_counted(
    walk: &mut Candidates,
    held: &mut Permit,
    walk_bytes: &mut usize,
) -> Result<Option<Candidate>, RunError> {
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
fn candidates(engine: &Engine, search: &Search) -> Result<Answer<Vec<Match>>, RunError> {
    let budget = engine.memory_budget();
    let mut held = budget.acquire(0).map_err(RunError::Overloaded)?;
    let limit = search.limit.clamp(1, MAX_LIMIT);
    let mut walk = engine.candidates(&search.index_query())?;
    let mut walk_bytes = 0;
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    while found.len() < limit {
        let Some(candidate) = next_counted(&mut walk, &mut held, &mut walk_bytes)? else {
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
    Ok(Answer {
        value: found,
        partial: Vec::new(),
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
    Trace::decode(
        trace_id.0,
        spans.iter().map(|s| EncodedSpan {
            payload: &s.payload,
            resource: s.group.resource.as_deref(),
            scope: s.group.scope.as_deref(),
        }),
    )
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
        FieldExpr::Unary(tracedb_traceql::ast::UnaryOp::Not, inner)
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
            op: tracedb_traceql::ast::BinaryOp::Cmp(tracedb_traceql::ast::CmpOp::Eq),
            lhs,
            rhs,
        } if matches!(
            (lhs.as_ref(), rhs.as_ref()),
            (
                FieldExpr::Attribute(Attribute::Attr { .. }),
                FieldExpr::Static(tracedb_traceql::ast::Static::Nil)
            ) | (
                FieldExpr::Static(tracedb_traceql::ast::Static::Nil),
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
            scope: tracedb_traceql::ast::Scope::Link,
            ..
        }) => {
            why.get_or_insert(
                "link attributes (link.name) are not supported; link:traceID and link:spanID are",
            );
        }
        _ => {}
    };
    tracedb_traceql::eval::visit_query(query, &mut check);
    if let Some(why) = why {
        return Err(why.to_owned());
    }
    refused_in_pipeline(&query.pipeline)
}

/// The attributes Tempo 3.0.3 keeps by default in columns of their own, of
/// one type (`tempodb/backend/block_meta.go`): there a value of another
/// type counts as absent, and a span without one counts as the string
/// `"nil"` in an aggregate.
const TYPED_COLUMNS: &[(Scope, &str)] = &[
    (Scope::Resource, "k8s.cluster.name"),
    (Scope::Resource, "k8s.namespace.name"),
    (Scope::Resource, "k8s.pod.name"),
    (Scope::Resource, "k8s.container.name"),
    (Scope::Span, "http.request.method"),
    (Scope::Span, "http.response.status_code"),
    (Scope::Span, "url.path"),
    (Scope::Span, "url.route"),
    (Scope::Span, "server.address"),
    (Scope::Span, "server.port"),
    (Scope::Span, "http.method"),
    (Scope::Span, "http.url"),
    (Scope::Span, "http.route"),
    (Scope::Span, "http.status_code"),
];

/// The name of `e` if it is an attribute Tempo keeps in a typed column.
fn typed_column(e: &FieldExpr) -> Option<&str> {
    let FieldExpr::Attribute(Attribute::Attr { scope, name }) = e else {
        return None;
    };
    TYPED_COLUMNS
        .iter()
        .any(|(s, n)| n == name && (scope == s || *scope == Scope::Unscoped))
        .then_some(name.as_str())
}

/// Refusals that are not about one field: `!= nil` and aggregates on the
/// attributes of [`TYPED_COLUMNS`], and the unions `&>>` and `&<<`.
fn refused_in_pipeline(p: &tracedb_traceql::ast::Pipeline) -> Result<(), String> {
    fn field(e: &FieldExpr) -> Result<(), String> {
        match e {
            FieldExpr::Binary {
                op: BinaryOp::Cmp(tracedb_traceql::ast::CmpOp::Ne),
                lhs,
                rhs,
            } => {
                let nil = |e: &FieldExpr| matches!(e, FieldExpr::Static(Static::Nil));
                let typed = match (lhs.as_ref(), rhs.as_ref()) {
                    (a, b) if nil(b) => typed_column(a),
                    (a, b) if nil(a) => typed_column(b),
                    _ => None,
                };
                if let Some(name) = typed {
                    return Err(format!(
                        "!= nil is not supported on {name}: Tempo 3.0.3 keeps it in a column of one type and counts values of another type as absent; compare it with a value instead"
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
    fn pipeline(p: &tracedb_traceql::ast::Pipeline) -> Result<(), String> {
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
        !matches!(m.function, tracedb_traceql::ast::MetricsFn::Compare { .. })
            && m.fields()
                .all(|a| !trace_level(&FieldExpr::Attribute(a.clone())))
    });
    matches!(stages.first(), Some(Stage::Spansets(s)) if per_span(s))
        && stages[1..]
            .iter()
            .all(|s| matches!(s, Stage::Select(fields) if fields.iter().all(|f| !trace_level(f))))
        && metrics_fields_per_span
}

/// Whether `e` reads a field of the whole trace rather than of its span
/// alone: `rootName`, `rootServiceName`, `traceDuration`,
/// `span:childCount` and the nested-set numbers, whose values on a node
/// holding part of a trace are not the whole trace's. `nestedSetParent < 0`
/// (and `= -1`), "the span is a root", is the exception: a span is a root
/// by its own parent ID, on any node.
fn trace_level(e: &FieldExpr) -> bool {
    use tracedb_traceql::ast::{BinaryOp::Cmp, CmpOp, UnaryOp};
    let parent = |e: &FieldExpr| {
        matches!(
            e,
            FieldExpr::Attribute(Attribute::Intrinsic(Intrinsic::NestedSetParent))
        )
    };
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
        } if parent(lhs)
            && matches!((op, int(rhs)), (CmpOp::Lt, Some(0)) | (CmpOp::Eq, Some(-1))) =>
        {
            false
        }
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

/// A query whose matches include every trace `query` matches, and whose
/// filters each hold on one span alone ([`per_span_only`]): the filters of
/// `query` joined by `||` (of an operator between spansets other than `||`,
/// those of its right side only, which must have spans for it to answer),
/// with each comparison of a trace-level field (see `trace_level`) replaced
/// by `true`. A span of every matching trace passes one of those filters, and
/// so the weaker one, on whichever node holds it: a query tier finds
/// candidates with it and evaluates `query` on each whole trace.
pub fn relaxed(query: &Query) -> Query {
    /// `e` with the conditions on trace-level fields made true (`!` is
    /// refused before a query runs, so weakening a part weakens the whole).
    fn weaken(e: &FieldExpr) -> FieldExpr {
        match e {
            FieldExpr::Binary {
                op: op @ (tracedb_traceql::ast::BinaryOp::And | tracedb_traceql::ast::BinaryOp::Or),
                lhs,
                rhs,
            } => FieldExpr::Binary {
                op: *op,
                lhs: Box::new(weaken(lhs)),
                rhs: Box::new(weaken(rhs)),
            },
            e if trace_level(e) => FieldExpr::Static(tracedb_traceql::ast::Static::Bool(true)),
            e => e.clone(),
        }
    }
    fn filters(s: &SpansetExpr, out: &mut Vec<FieldExpr>) {
        match s {
            SpansetExpr::Filter(e) => out.push(weaken(e)),
            SpansetExpr::Pipeline(p) => pipeline(p, out),
            SpansetExpr::Binary { op, lhs, rhs } => {
                // Every operator but `||` answers only when its right side
                // has spans (`&&` and the structural ones, `!>>` and `&>>`
                // included), so a span of every trace it matches passes a
                // filter of the right side.
                if matches!(op, SpansetOp::Or) {
                    filters(lhs, out);
                }
                filters(rhs, out);
            }
        }
    }
    fn pipeline(p: &tracedb_traceql::ast::Pipeline, out: &mut Vec<FieldExpr>) {
        if let Some(Stage::Spansets(s)) = p.stages.first() {
            filters(s, out);
        }
    }
    let mut all = Vec::new();
    pipeline(&query.pipeline, &mut all);
    let expr = all
        .into_iter()
        .map(SpansetExpr::Filter)
        .reduce(|a, b| SpansetExpr::Binary {
            op: SpansetOp::Or,
            lhs: Box::new(a),
            rhs: Box::new(b),
        })
        .unwrap_or(SpansetExpr::Filter(FieldExpr::Static(
            tracedb_traceql::ast::Static::Bool(true),
        )));
    Query {
        pipeline: tracedb_traceql::ast::Pipeline {
            stages: vec![Stage::Spansets(expr)],
        },
        most_recent: false,
        metrics: None,
        hints: Vec::new(),
    }
}

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

/// Adds `other`, the match of another part of the same trace (another node
/// of a group), to `m`: the parts' spans together, each span once; the
/// spansets of a per-span query ([`per_span_only`]) are one set per node.
pub fn combine(m: &mut Match, other: &Match, spans_per_spanset: usize) {
    m.orphans = None;
    let end =
        (m.start_unix_nano + m.duration_nanos).max(other.start_unix_nano + other.duration_nanos);
    m.start_unix_nano = m.start_unix_nano.min(other.start_unix_nano);
    m.duration_nanos = end - m.start_unix_nano;
    m.span_count += other.span_count;
    m.error_count += other.error_count;
    if m.root_service.is_none() && m.root_name.is_none() {
        m.root_service.clone_from(&other.root_service);
        m.root_name.clone_from(&other.root_name);
    }
    m.services.extend(other.services.iter().cloned());
    m.services.sort();
    m.services.dedup();
    add_stats(&mut m.service_stats, &other.service_stats);
    match (m.spansets.first_mut(), other.spansets.first()) {
        (Some(mine), Some(theirs)) => {
            mine.matched += theirs.matched;
            for span in &theirs.spans {
                if !mine.spans.contains(span) {
                    mine.spans.push(span.clone());
                }
            }
            mine.spans.sort_by_key(|s| (s.start_unix_nano, s.span_id));
            mine.spans.truncate(spans_per_spanset);
        }
        (None, Some(_)) => m.spansets.clone_from(&other.spansets),
        _ => {}
    }
}

/// The conditions the legacy search fields of the front ends map to (Tempo's
/// `tags`, `minDuration` and `maxDuration`; Jaeger's service, operation,
/// attributes and durations), built as query trees so that no value needs
/// quoting.
pub mod legacy {
    use tracedb_traceql::ast::{
        Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, Pipeline, Query, Scope, SpansetExpr,
        SpansetOp, Stage, Static,
    };

    fn cmp(op: CmpOp, lhs: FieldExpr, rhs: Static) -> FieldExpr {
        FieldExpr::Binary {
            op: BinaryOp::Cmp(op),
            lhs: Box::new(lhs),
            rhs: Box::new(FieldExpr::Static(rhs)),
        }
    }

    fn join(op: BinaryOp, exprs: Vec<FieldExpr>) -> Option<FieldExpr> {
        exprs.into_iter().reduce(|a, b| FieldExpr::Binary {
            op,
            lhs: Box::new(a),
            rhs: Box::new(b),
        })
    }

    /// `resource.service.name = "v"`.
    pub fn service(v: &str) -> FieldExpr {
        let attr = Attribute::Attr {
            scope: Scope::Resource,
            name: "service.name".to_owned(),
        };
        cmp(
            CmpOp::Eq,
            FieldExpr::Attribute(attr),
            Static::Str(v.to_owned()),
        )
    }

    /// `name = "v"`.
    pub fn span_name(v: &str) -> FieldExpr {
        let attr = FieldExpr::Attribute(Attribute::Intrinsic(Intrinsic::Name));
        cmp(CmpOp::Eq, attr, Static::Str(v.to_owned()))
    }

    /// The attribute `key` (`resource.k` or `span.k` scoped, else the span's
    /// or its resource's) equal to `text` read as text: a string `text`, or
    /// the number or bool it spells.
    pub fn tag(key: &str, text: &str) -> FieldExpr {
        let (scope, name) = if let Some(n) = key.strip_prefix("resource.") {
            (Scope::Resource, n)
        } else if let Some(n) = key.strip_prefix("span.") {
            (Scope::Span, n)
        } else {
            (Scope::Unscoped, key.strip_prefix('.').unwrap_or(key))
        };
        tag_in(scope, name, text)
    }

    /// Jaeger's meaning of a tag: the attribute `key` equal to `text` (read
    /// as text) wherever the span carries it: its own attributes, its
    /// resource's (Jaeger's process tags), one of its events' (Jaeger's
    /// logs) or its instrumentation scope's.
    pub fn tag_anywhere(key: &str, text: &str) -> FieldExpr {
        let places = [Scope::Unscoped, Scope::Event, Scope::Instrumentation]
            .into_iter()
            .map(|scope| tag_in(scope, key, text))
            .collect();
        join(BinaryOp::Or, places).unwrap_or(FieldExpr::Static(Static::Bool(false)))
    }

    /// The attribute `name` of `scope` equal to `text` read as text.
    fn tag_in(scope: Scope, name: &str, text: &str) -> FieldExpr {
        let mut values = vec![Static::Str(text.to_owned())];
        if let Ok(i) = text.parse::<i64>() {
            values.push(Static::Int(i));
        } else if let Ok(f) = text.parse::<f64>() {
            values.push(Static::Float(f));
        }
        if let Ok(b) = text.parse::<bool>() {
            values.push(Static::Bool(b));
        }
        let attr = FieldExpr::Attribute(Attribute::Attr {
            scope,
            name: name.to_owned(),
        });
        let alternatives = values
            .into_iter()
            .map(|v| cmp(CmpOp::Eq, attr.clone(), v))
            .collect();
        join(BinaryOp::Or, alternatives).unwrap_or(FieldExpr::Static(Static::Bool(false)))
    }

    /// `field op nanos`, for `duration` or `traceDuration`.
    pub fn duration(field: Intrinsic, op: CmpOp, nanos: u64) -> FieldExpr {
        let nanos = i64::try_from(nanos).unwrap_or(i64::MAX);
        cmp(
            op,
            FieldExpr::Attribute(Attribute::Intrinsic(field)),
            Static::Duration(nanos),
        )
    }

    /// The conditions joined with `&&` in one field expression (all on the
    /// same span); `None` without conditions.
    pub fn all(conds: Vec<FieldExpr>) -> Option<FieldExpr> {
        join(BinaryOp::And, conds)
    }

    /// `{ a } && { b } && ...`: a span of the trace meets each condition
    /// (not necessarily the same span); `{ }` without conditions.
    pub fn each(conds: Vec<FieldExpr>) -> Query {
        let filters = conds.into_iter().map(SpansetExpr::Filter);
        let expr = filters
            .reduce(|lhs, rhs| SpansetExpr::Binary {
                op: SpansetOp::And,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            })
            .unwrap_or(SpansetExpr::Filter(FieldExpr::Static(Static::Bool(true))));
        Query {
            pipeline: Pipeline {
                stages: vec![Stage::Spansets(expr)],
            },
            most_recent: false,
            metrics: None,
            hints: Vec::new(),
        }
    }

    /// One spanset filter of every condition (each on the same span); `None`
    /// without conditions.
    pub fn filter(conds: Vec<FieldExpr>) -> Option<Query> {
        Some(Query {
            pipeline: Pipeline {
                stages: vec![Stage::Spansets(SpansetExpr::Filter(join(
                    BinaryOp::And,
                    conds,
                )?))],
            },
            most_recent: false,
            metrics: None,
            hints: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use bytes::Bytes;
    use tracedb_lsm::{Engine, EngineOptions, MemTableOptions, ScopeGroup, Span, SpanId, TraceId};
    use tracedb_traceql::{
        arbitrary::{self, Rng},
        Compiled,
    };

    use super::{answer_order, run, Search};

    const SEC: u64 = 1_000_000_000;

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64
    }

    /// Spans as the engine stores them, from the generator's encoded parts.
    fn spans(id: TraceId, parts: Vec<arbitrary::EncodedParts>) -> Vec<Span> {
        parts
            .into_iter()
            .map(|(resource, scope, payload)| {
                let decoded =
                    <tracedb_proto::trace::v1::Span as prost::Message>::decode(payload.as_slice())
                        .expect("generated span");
                Span {
                    trace_id: id,
                    span_id: SpanId::from_slice(&decoded.span_id).expect("8 bytes"),
                    start_unix_nano: decoded.start_time_unix_nano,
                    end_unix_nano: decoded.end_time_unix_nano,
                    group: Arc::new(ScopeGroup {
                        resource: Some(Bytes::from(resource)),
                        scope: Some(Bytes::from(scope)),
                        ..ScopeGroup::default()
                    }),
                    payload: Bytes::from(payload),
                }
            })
            .collect()
    }

    /// The search against every trace evaluated, newest first: whatever the
    /// index prunes and however the candidates are paged, the answer is the
    /// newest `limit` traces the query matches, with the same spansets. The
    /// store has traces in files, split across files, and in memory.
    #[test]
    fn the_search_answers_as_evaluating_every_trace_would() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = EngineOptions::new(dir.path());
        opts.memtable = MemTableOptions {
            shards: 2,
            flush_bytes: 16 << 10,
            max_age: Duration::from_secs(3600),
        };
        opts.compaction_threads = 0;
        // Small blocks, so that the walk crosses many and skips some.
        opts.index_block_parts = 8;
        let engine = Engine::open(opts).expect("open");

        let mut rng = Rng::new(32);
        let base = now() - 600 * SEC;
        let ids: Vec<TraceId> = (1..=400u128)
            .map(|t| TraceId((t * 7919).to_be_bytes()))
            .collect();
        let mut batches: Vec<Vec<Span>> = vec![Vec::new(); 4];
        for (i, id) in ids.iter().enumerate() {
            // Starts repeat, so the answer order falls back on trace IDs.
            let start = base + (i as u64 % 150) * SEC;
            let mut trace = spans(*id, arbitrary::trace(&mut rng, id.0, start));
            let batch = rng.below(4);
            if trace.len() > 1 && rng.chance(20) {
                // Part of the trace in a later batch: another file, or memory.
                let rest = trace.split_off(trace.len() / 2);
                batches[(batch + 1).min(3)].extend(rest);
            }
            batches[batch].extend(trace);
        }
        for (b, batch) in batches.into_iter().enumerate() {
            engine.write_blocking(batch).expect("write");
            if b < 3 {
                engine.flush().expect("flush");
            }
        }

        let every: Vec<(TraceId, Vec<Span>)> = ids
            .iter()
            .map(|id| (*id, engine.get_trace(id).expect("read")))
            .collect();
        let mut answered = 0;
        for round in 0..150 {
            let query = arbitrary::query(&mut rng);
            let limit = 1 + rng.below(30);
            let search = Search {
                query: Arc::new(Compiled::new(query.clone()).expect("compiles")),
                text: String::new(),
                start_unix_nano: if round % 3 == 0 { base + 40 * SEC } else { 0 },
                end_unix_nano: if round % 5 == 0 { base + 120 * SEC } else { 0 },
                limit,
                spans_per_spanset: 1000,
                candidates_only: false,
                span_window: false,
            };
            let mut want: Vec<super::Match> = every
                .iter()
                .filter_map(|(id, spans)| super::evaluate(&search, *id, spans).expect("decodes"))
                .collect();
            want.sort_by(|a, b| {
                b.start_unix_nano
                    .cmp(&a.start_unix_nano)
                    .then(a.trace_id.cmp(&b.trace_id))
            });
            want.truncate(limit);
            let got = run(&engine, &search).expect("search");
            assert!(got.partial.is_empty(), "{:?}", got.partial);
            assert_eq!(
                got.value.iter().map(|m| m.trace_id).collect::<Vec<_>>(),
                want.iter().map(|m| m.trace_id).collect::<Vec<_>>(),
                "query {query:?}, limit {limit}"
            );
            assert_eq!(got.value, want, "query {query:?}");

            // What a tier asks its nodes for: the candidates of the query's
            // relaxation. The relaxation matches every trace the query
            // matches, and its candidates hold every trace the search finds,
            // each at the start of its newest part the index could not rule
            // out, which is never earlier than the trace's.
            let relaxation = super::relaxed(&query);
            let wide = |query: Arc<Compiled>, candidates_only| Search {
                query,
                text: String::new(),
                start_unix_nano: search.start_unix_nano,
                end_unix_nano: search.end_unix_nano,
                limit: super::MAX_LIMIT,
                spans_per_spanset: 1,
                candidates_only,
                span_window: false,
            };
            let relaxed = Arc::new(Compiled::new(relaxation.clone()).expect("compiles"));
            for (id, spans) in &every {
                if super::evaluate(&search, *id, spans)
                    .expect("decodes")
                    .is_some()
                {
                    assert!(
                        super::evaluate(&wide(relaxed.clone(), false), *id, spans)
                            .expect("decodes")
                            .is_some(),
                        "{id} matches {query:?} but not its relaxation {relaxation}"
                    );
                }
            }
            let all = run(&engine, &wide(search.query.clone(), false))
                .expect("search")
                .value;
            let candidates = run(&engine, &wide(relaxed, true))
                .expect("candidates")
                .value;
            assert!(candidates
                .windows(2)
                .all(|w| answer_order(&w[0], &w[1]).is_lt()));
            for m in &all {
                let c = candidates.iter().find(|c| c.trace_id == m.trace_id);
                assert!(
                    c.is_some_and(|c| c.start_unix_nano >= m.start_unix_nano),
                    "query {query:?}: {} found but {c:?} among the candidates of {relaxation}",
                    m.trace_id
                );
            }
            for m in &got.value {
                // serviceStats counts every span once, under its service.
                let stats = &m.service_stats;
                assert_eq!(stats.iter().map(|s| s.spans).sum::<u64>(), m.span_count);
                assert_eq!(stats.iter().map(|s| s.errors).sum::<u64>(), m.error_count);
                assert!(stats.windows(2).all(|w| w[0].service < w[1].service));
                // Through a node's answer to the tier and back; two parts of
                // a trace add up service by service.
                let wire = super::from_proto(&super::to_proto(m)).expect("round trip");
                // A node's row may be a part of its trace: it claims no orphan
                // count, and says the rest as the node had it.
                assert_eq!(wire.orphans, None);
                assert!(
                    m.orphans.is_some(),
                    "a node's own match saw the whole trace"
                );
                assert_eq!(
                    super::Match {
                        orphans: m.orphans,
                        ..wire.clone()
                    },
                    *m
                );
                let mut twice = wire.clone();
                super::combine(&mut twice, m, 1000);
                assert_eq!(twice.service_stats.len(), stats.len());
                for (a, b) in twice.service_stats.iter().zip(stats) {
                    assert_eq!((a.spans, a.errors), (2 * b.spans, 2 * b.errors));
                }
            }
            answered += usize::from(!want.is_empty());
        }
        assert!(answered > 50, "only {answered} queries matched anything");
    }

    /// The index keeps at most 256 attributes of a trace part; a trace with
    /// more is still found by the ones it did not keep.
    #[test]
    fn a_trace_with_more_attributes_than_the_index_keeps_is_found() {
        use prost::Message as _;
        use tracedb_proto::{
            common::v1::{any_value, AnyValue, KeyValue},
            resource::v1::Resource,
            trace::v1 as otlp,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = EngineOptions::new(dir.path());
        opts.compaction_threads = 0;
        let engine = Engine::open(opts).expect("open");
        let start = now() - 60 * SEC;
        let attributes = (0..300)
            .map(|i| KeyValue {
                key: format!("k{i:03}"),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("v".into())),
                }),
            })
            .collect();
        let id = TraceId([3; 16]);
        let span = otlp::Span {
            trace_id: id.0.to_vec().into(),
            span_id: vec![1; 8].into(),
            name: "wide".into(),
            start_time_unix_nano: start,
            end_time_unix_nano: start + SEC,
            attributes,
            ..Default::default()
        };
        let resource = Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("s".repeat(300))),
                }),
            }],
            ..Default::default()
        }
        .encode_to_vec();
        let parts = vec![(resource, Vec::new(), span.encode_to_vec())];
        engine.write_blocking(spans(id, parts)).expect("write");
        engine.flush().expect("flush");
        let found = |q: &str| -> usize {
            let search = Search {
                query: Arc::new(
                    Compiled::new(tracedb_traceql::parse(q).expect("valid")).expect("compiles"),
                ),
                text: q.to_owned(),
                start_unix_nano: 0,
                end_unix_nano: 0,
                limit: 20,
                spans_per_spanset: 3,
                candidates_only: false,
                span_window: false,
            };
            run(&engine, &search).expect("search").value.len()
        };
        assert_eq!(found(r#"{ span.k000 = "v" }"#), 1);
        // A value longer than the index keeps (its resource's service name)
        // is still found by the spans.
        assert_eq!(
            tracedb_traceql::prune::MAX_INDEXED_VALUE_BYTES,
            tracedb_lsm::index::wire::MAX_VALUE_BYTES
        );
        let long = "s".repeat(300);
        assert_eq!(
            found(&format!(r#"{{ resource.service.name = "{long}" }}"#)),
            1
        );
        assert_eq!(
            found(r#"{ span.k299 = "v" }"#),
            1,
            "an attribute past the index's 256"
        );
        assert_eq!(found(r#"{ span.k299 = "w" }"#), 0);
    }

    /// A search that reads [`super::MAX_INSPECTED`] candidates without
    /// reaching its limit stops and says so; one whose window holds fewer
    /// reads them all and is whole.
    #[test]
    fn a_search_stops_after_its_most_candidates_and_says_so() {
        use prost::Message as _;
        use tracedb_proto::{
            common::v1::{any_value, AnyValue, KeyValue},
            resource::v1::Resource,
            trace::v1 as otlp,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = EngineOptions::new(dir.path());
        opts.compaction_threads = 0;
        opts.memory_budget_bytes = 1 << 30;
        let engine = Engine::open(opts).expect("open");
        let resource = Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("cap".into())),
                }),
            }],
            ..Default::default()
        }
        .encode_to_vec();
        let int = |key: &str, v: i64| KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(v)),
            }),
        };
        // Each trace has `a = 1` on one span and `b = 2` on the other: every
        // one is a candidate of `{ span.a = 1 && span.b = 2 }`, none a match.
        let base = now() - 600 * SEC;
        let traces = super::MAX_INSPECTED as u64 + 500;
        let at = |t: u64| base + t * 1_000;
        for chunk in (0..traces).collect::<Vec<_>>().chunks(10_000) {
            let mut batch = Vec::new();
            for &t in chunk {
                let id = TraceId((u128::from(t) + 1).to_be_bytes());
                let span = |n: u8, attribute: KeyValue| otlp::Span {
                    trace_id: id.0.to_vec().into(),
                    span_id: vec![n; 8].into(),
                    parent_span_id: if n == 1 { Vec::new() } else { vec![1; 8] }.into(),
                    name: "op".into(),
                    start_time_unix_nano: at(t),
                    end_time_unix_nano: at(t) + 500,
                    attributes: vec![attribute],
                    ..Default::default()
                };
                let parts = vec![
                    (
                        resource.clone(),
                        Vec::new(),
                        span(1, int("a", 1)).encode_to_vec(),
                    ),
                    (
                        resource.clone(),
                        Vec::new(),
                        span(2, int("b", 2)).encode_to_vec(),
                    ),
                ];
                batch.extend(spans(id, parts));
            }
            engine.write_blocking(batch).expect("write");
        }
        engine.flush().expect("flush");
        let q = "{ span.a = 1 && span.b = 2 }";
        let search = |start_unix_nano, end_unix_nano| Search {
            query: Arc::new(
                Compiled::new(tracedb_traceql::parse(q).expect("valid")).expect("compiles"),
            ),
            text: q.to_owned(),
            start_unix_nano,
            end_unix_nano,
            limit: 20,
            spans_per_spanset: 3,
            candidates_only: false,
            span_window: false,
        };
        let all = run(&engine, &search(0, 0)).expect("search");
        assert!(all.value.is_empty());
        assert_eq!(
            all.partial,
            vec![super::stopped_inspecting(super::MAX_INSPECTED)]
        );
        // The newest half: fewer candidates than the most, all read.
        let half = run(&engine, &search(at(traces / 2), 0)).expect("search");
        assert!(half.value.is_empty());
        assert!(half.partial.is_empty(), "{:?}", half.partial);

        // Every trace matches `{ span.a = 1 }`: asked for more than a search
        // answers, the answer is full and says older matches were left.
        let every = |limit| Search {
            query: Arc::new(
                Compiled::new(tracedb_traceql::parse("{ span.a = 1 }").expect("valid"))
                    .expect("compiles"),
            ),
            text: "{ span.a = 1 }".to_owned(),
            limit,
            ..search(0, 0)
        };
        let most = run(&engine, &every(super::MAX_LIMIT)).expect("search");
        assert_eq!(most.value.len(), super::MAX_LIMIT);
        assert!(most.partial.is_empty(), "{:?}", most.partial);
        let more = run(&engine, &every(1500)).expect("search");
        assert_eq!(more.value, most.value);
        assert_eq!(
            more.partial,
            super::over_limit(1500, super::MAX_LIMIT)
                .into_iter()
                .collect::<Vec<_>>()
        );
        assert!(!more.partial.is_empty());
    }

    /// A search takes what it holds from the memory budget: one that cannot
    /// have its share is refused (retryably), and gives back what it took.
    #[test]
    fn a_search_the_memory_budget_cannot_hold_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = EngineOptions::new(dir.path());
        opts.compaction_threads = 0;
        opts.memory_budget_bytes = 256 << 10;
        let engine = Engine::open(opts).expect("open");
        let mut rng = Rng::new(5);
        let start = now() - 60 * SEC;
        let mut stored = 0;
        for t in 0..40u128 {
            let id = TraceId((t + 1).to_be_bytes());
            let trace = spans(id, arbitrary::trace(&mut rng, id.0, start));
            stored += usize::from(!trace.is_empty());
            engine.write_blocking(trace).expect("write");
        }
        engine.flush().expect("flush");
        let search = |limit| Search {
            query: Arc::new(
                Compiled::new(tracedb_traceql::parse("{}").expect("valid")).expect("compiles"),
            ),
            text: "{}".to_owned(),
            start_unix_nano: 0,
            end_unix_nano: 0,
            limit,
            spans_per_spanset: 1000,
            candidates_only: false,
            span_window: false,
        };
        let budget = engine.memory_budget();
        assert_eq!(run(&engine, &search(5)).expect("fits").value.len(), 5);
        assert_eq!(budget.in_flight(), 0, "given back");
        // Most of the budget taken by requests in flight: no room.
        let taken = budget.acquire(budget.admit_limit() - 1024).expect("room");
        match run(&engine, &search(5)) {
            Err(super::RunError::Overloaded(_)) => {}
            other => panic!("{:?}", other.map(|a| a.value.len())),
        }
        drop(taken);
        assert_eq!(budget.in_flight(), 0, "given back after a refusal too");
        assert_eq!(
            run(&engine, &search(40)).expect("fits again").value.len(),
            stored
        );
    }

    /// The per-span relaxation keeps the filters a match needs, joined by
    /// `||` (the right side of `&&` and of a structural operator), with the
    /// conditions on trace-level fields made true; a per-span query needs none.
    #[test]
    fn the_relaxation_keeps_each_filter_and_drops_trace_level_conditions() {
        let relaxed =
            |q: &str| super::relaxed(&tracedb_traceql::parse(q).expect("valid")).to_string();
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
            let query = tracedb_traceql::parse(q).expect("valid");
            assert_eq!(super::per_span_only(&query), per_span, "{q}");
        }
    }
}
