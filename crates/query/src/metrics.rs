//! Running a TraceQL metrics query on one store, its matched spans counted
//! into series by [`tracedb_traceql::metrics::MetricsEval`], one of two
//! ways:
//!
//! - from the files' and buffers' metrics cells (`cells`), when every field
//!   the query reads is one a cell key holds and its grid is of whole
//!   buckets: each key judged once by the evaluator, no span read but for
//!   exemplars;
//! - else from the spans: the search index's walk proposes each trace with
//!   a part that overlaps the window and may meet what the query needs
//!   ([`tracedb_traceql::needs`]), or a per-span query reads the window's
//!   files in one pass; the spans decide, the index never counts.
//!
//! Memory is admitted by the store's budget as a search's is: the walk's
//! set of proposed traces, the trace being evaluated, the cells' sums and
//! the series.

use std::sync::Arc;

use tracedb_lsm::{
    index::{OpNeed, SearchQuery},
    Candidate, Engine,
};
use tracedb_proto::query::v1 as proto;
use tracedb_traceql::{
    metrics::{go_duration, Cells, Grid, LabelValue, MetricsEval, Picked, RawSeries, Series},
    trace::{Origins, ORIGINS_HELD_BYTES},
    Compiled, Projection,
};

use crate::{
    cancel::Cancel,
    error::Error,
    read::Answer,
    search::{decode_matching, op_needs, RunError},
};

mod cells;
mod scan;
#[cfg(test)]
mod tests;

const SEC: u64 = 1_000_000_000;
/// The longest range a metrics query takes: Tempo's query frontend default
/// (`query_frontend.metrics.max_duration`).
pub const MAX_RANGE: u64 = 24 * 3_600 * SEC;
/// The longest range of a query answered from metrics cells
/// (the query crate's `metrics::cells`): Tempo refuses past [`MAX_RANGE`], and its users
/// ask for week-long dashboards.
pub const MAX_CELLS_RANGE: u64 = 31 * 24 * 3_600 * SEC;
/// The most intervals (`max_intervals`).
pub const MAX_INTERVALS: u64 = 10_000;

fn refuse(why: String) -> Error {
    Error::InvalidArgument(why)
}

/// A range query's grid from `start` to `end` (Unix ns) by `step` (ns;
/// `None`: Tempo's default for the range), or a 400 saying which of Tempo's
/// limits it passes.
pub fn range_grid(start: u64, end: u64, step: Option<i128>) -> Result<Grid, Error> {
    if start > end {
        return Err(refuse("end must be greater than start".into()));
    }
    let step = step.unwrap_or_else(|| i128::from(default_step(start, end)));
    if step <= 0 || i128::from(end - start) / step > i128::from(MAX_INTERVALS) {
        let shown = step.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        return Err(refuse(format!(
            "step of {} is too small, minimum step for given range is {}",
            go_duration(shown),
            go_duration(((end - start) / MAX_INTERVALS) as i64)
        )));
    }
    check_range(start, end, MAX_CELLS_RANGE)?;
    Ok(Grid::range(start, end, step as u64))
}

/// An instant query's grid over `[start, end]`, within Tempo's limits.
pub fn instant_grid(start: u64, end: u64) -> Result<Grid, Error> {
    if start > end {
        return Err(refuse("end must be greater than start".into()));
    }
    check_range(start, end, MAX_RANGE)?;
    Ok(Grid::instant(start, end))
}

/// `req` unless its range (`asked`, ns, before the grid's alignment) passes
/// Tempo's [`MAX_RANGE`] and metrics cells cannot answer it (then it must
/// read spans, and Tempo's limit holds).
pub fn within_range(req: MetricsRequest, asked: u64) -> Result<MetricsRequest, Error> {
    if asked > MAX_RANGE && !cells::answerable(&req) {
        return Err(refuse(format!(
            "metrics query time range exceeds the maximum allowed duration of {} \
             (tracedb answers up to {} when it can count the query from its metrics \
             cells: conditions and by() on resource.service.name, name, kind, status \
             and nestedSetParent<0 only, or on one counted attribute the conditions \
             need present, rate, count_over_time, or histogram_over_time or \
             quantile_over_time of duration, a step of whole seconds)",
            go_duration(MAX_RANGE as i64),
            go_duration(MAX_CELLS_RANGE as i64)
        )));
    }
    Ok(req)
}

fn check_range(start: u64, end: u64, max: u64) -> Result<(), Error> {
    if end == start {
        return Err(refuse("end must be greater than start".into()));
    }
    if end - start > max {
        return Err(refuse(format!(
            "metrics query time range exceeds the maximum allowed duration of {}",
            go_duration(max as i64)
        )));
    }
    Ok(())
}

/// Tempo's default step for a range: about 240 points, rounded down to a
/// whole 1h, 5m, 1m, 15s, 5s or 1s (at least 1s); under a minute, to 50 ms.
pub fn default_step(start: u64, end: u64) -> u64 {
    let range = end.saturating_sub(start);
    let baseline = range / 240;
    if range < 60 * SEC {
        let g = 50_000_000;
        return if baseline > g { baseline / g * g } else { g };
    }
    for g in [3_600 * SEC, 300 * SEC, 60 * SEC, 15 * SEC, 5 * SEC, SEC] {
        if baseline > g {
            return baseline / g * g;
        }
    }
    SEC
}

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
///
/// A query whose conditions each hold on one span
/// ([`crate::search::per_span_only`]) reads the window's files in one pass
/// ([`Engine::scan_traces`]; only the blocks of the index's candidates when
/// they are few): a span's match depends on it alone, so the
/// spans of a trace stored outside the window need not be read. Any other
/// (structural operators, trace-level fields) reads each candidate trace
/// whole, as a search does.
pub fn run(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
) -> Result<Answer<MetricsEval>, RunError> {
    if cells::answerable(req) {
        match cells::uncounted(req, engine.cell_attributes()) {
            None => {
                if let Some(answer) = from_cells(engine, req, cancel)? {
                    return Ok(answer);
                }
            }
            // Past Tempo's range, only a query cells answer is taken
            // (`within_range`, which cannot know the attributes counted).
            Some(attr) if req.grid.end - req.grid.start > MAX_RANGE + 2 * req.grid.step => {
                return Err(RunError::Invalid(format!(
                    "metrics query time range exceeds the maximum allowed duration of {}: \
                     its condition on {attr} must read spans, as this node's metrics cells \
                     do not count that attribute (--metrics-attributes)",
                    go_duration(MAX_RANGE as i64)
                )));
            }
            Some(_) => {}
        }
    }
    if crate::search::per_span_only(&req.query.query) {
        return match few_traces(engine, req, cancel, SPANS_PER_CANDIDATE)? {
            Some((few, _held)) => scan::scan(engine, req, cancel, Some(wanted(&few))),
            None => scan::scan(engine, req, cancel, None),
        };
    }
    whole_traces(engine, req, cancel)
}

/// [`run`] from the metrics cells of a query they can count and whose
/// attribute (if any) this node counts; `None` when the spans must be read.
fn from_cells(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
) -> Result<Option<Answer<MetricsEval>>, RunError> {
    let unanswered = match cells::answer(engine, req, cancel)? {
        Ok(answer) => return Ok(Some(answer)),
        Err(why) => why,
    };
    // A window past retention's cut, whose spans a read partly leaves out:
    // the spans up to the first edge of the grid after the cut, and the
    // cells from there on.
    if unanswered == cells::Unanswered::NotNow && crate::search::per_span_only(&req.query.query) {
        if let Some(split) = retention_split(engine.expire_before(), req.grid) {
            if let Ok(later) = cells::answer_after(engine, req, cancel, split)? {
                let earlier = scan::scan_until(engine, req, cancel, None, split)?;
                return Ok(Some(summed(vec![later, earlier], req.max_series)));
            }
        }
    }
    if unanswered == cells::Unanswered::NotCounted
        && req.grid.end - req.grid.start > MAX_RANGE + 2 * req.grid.step
    {
        return Err(RunError::Invalid(format!(
            "metrics query time range exceeds the maximum allowed duration of {}: \
             the metrics cells of its window cannot answer it (a file left its \
             attribute out, or its durations at a step of seconds, which cells \
             counting few spans a second do not keep: a step of whole minutes \
             can), and a query that reads spans keeps that limit",
            go_duration(MAX_RANGE as i64)
        )));
    }
    Ok(None)
}

/// The first edge of `grid` after retention's `cut`, if the grid starts
/// before the cut and ends after that edge: from there on, every span
/// counted starts after the cut, so a read keeps it.
fn retention_split(cut: u64, grid: tracedb_traceql::metrics::Grid) -> Option<u64> {
    if grid.instant || cut <= grid.start {
        return None;
    }
    let split = grid.start + (cut - grid.start).div_ceil(grid.step) * grid.step;
    (split < grid.end).then_some(split)
}

/// `answers` added up in their order ([`MetricsEval::merge`]): each reason
/// for a partial answer said once, the series cap's among them if the sum
/// is capped. `answers` holds one at least.
fn summed(answers: Vec<Answer<MetricsEval>>, max_series: usize) -> Answer<MetricsEval> {
    let mut answers = answers.into_iter();
    let mut sum = answers.next().expect("one answer at least");
    for answer in answers {
        sum.value.merge(answer.value);
        sum.partial.extend(answer.partial);
    }
    if sum.value.series_capped() {
        sum.partial.push(series_capped(max_series));
    }
    let mut seen = std::collections::HashSet::new();
    sum.partial.retain(|p| seen.insert(p.clone()));
    sum
}

/// Spans of the window's files per candidate trace under which a per-span
/// query scans only the blocks that may hold its candidates, and evaluates
/// only them, instead of every span. First measured as the point where
/// reading a trace by its ID took as long as scanning that many spans (138
/// µs a trace on one core, 0.93 µs a span on two); the pass over the
/// candidates' blocks costs less than either, and a bound of 30 changed no
/// query's time (docs/BENCHMARKS.md, "Metrics that read spans").
pub const SPANS_PER_CANDIDATE: u64 = 150;
/// Most candidate traces a per-span query lists for a scan of their blocks.
pub const MAX_FEW_TRACES: u64 = 200_000;

/// The walk of the traces with a part that overlaps the window and may
/// meet what the query needs.
fn index_query(req: &MetricsRequest) -> SearchQuery {
    SearchQuery {
        start_max: req.grid.end,
        end_min: req.grid.start,
        needs: op_needs(tracedb_traceql::needs(&req.query.query)),
        ..SearchQuery::default()
    }
}

/// The traces a per-span query must read, from the search index, when
/// they are few enough that a pass over only their blocks is worth the
/// walk (fewer than one per `spans_per_read` spans of the window's files,
/// [`SPANS_PER_CANDIDATE`]); `None` when the query needs nothing the index
/// knows, or the walk proposes more. The list's bytes stay admitted with
/// it.
fn few_traces(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
    spans_per_read: u64,
) -> Result<Option<(Vec<Candidate>, tracedb_lsm::Permit)>, RunError> {
    let query = index_query(req);
    if query.needs.iter().all(|n| *n == OpNeed::default()) {
        return Ok(None);
    }
    let window = tracedb_lsm::TimeRange::new(req.grid.start, req.grid.end);
    let most = (engine.file_spans_in(window) / spans_per_read).min(MAX_FEW_TRACES) as usize;
    if most == 0 {
        return Ok(None);
    }
    let mut held = engine
        .memory_budget()
        .acquire(0)
        .map_err(RunError::Overloaded)?;
    let mut walk = engine.candidates(&query)?;
    let mut walk_bytes = 0;
    let mut few = Vec::new();
    while let Some(candidate) =
        crate::search::next_counted(&mut walk, &mut held, &mut walk_bytes, cancel)?
    {
        if few.len() == most {
            return Ok(None);
        }
        few.push(candidate);
    }
    drop(walk);
    held.shrink(walk_bytes);
    held.grow(few.len() * std::mem::size_of::<Candidate>())
        .map_err(RunError::Overloaded)?;
    Ok(Some((few, held)))
}

/// The candidates' trace IDs, sorted, for a scan of their blocks only.
fn wanted(few: &[Candidate]) -> Arc<[tracedb_lsm::TraceId]> {
    let mut ids: Vec<tracedb_lsm::TraceId> = few.iter().map(|c| c.trace_id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into()
}

impl MetricsRequest {
    /// An evaluator of the query on its grid, within its bounds; a 400 for
    /// a query the evaluator refuses.
    fn evaluator(&self) -> Result<MetricsEval, RunError> {
        MetricsEval::new(&self.query, self.grid, self.max_series, self.max_exemplars)
            .map_err(|e| RunError::Invalid(e.to_string()))
    }
}

/// One thread's answer, and the permit that admits its series.
type Part = (Answer<MetricsEval>, tracedb_lsm::Permit);

/// The threads' answers added up in their order, as a query tier adds its
/// nodes' ([`summed`]), so the same store gives the same series every time.
/// The threads' permits are held until the sum is made.
fn add_up(
    parts: Vec<Result<Part, RunError>>,
    max_series: usize,
) -> Result<Answer<MetricsEval>, RunError> {
    let mut permits = Vec::with_capacity(parts.len());
    let mut answers = Vec::with_capacity(parts.len());
    for part in parts {
        let (answer, held) = part?;
        permits.push(held);
        answers.push(answer);
    }
    Ok(summed(answers, max_series))
}

/// Runs each of `work` on a thread of its own and gives back what each
/// returned, in `work`'s order (a thread's panic is passed on).
fn each_on_a_thread<'env, T, F>(work: impl IntoIterator<Item = F>) -> Vec<T>
where
    T: Send + 'env,
    F: FnOnce() -> T + Send + 'env,
{
    std::thread::scope(|scope| {
        let threads: Vec<_> = work.into_iter().map(|w| scope.spawn(w)).collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// [`run`] trace by trace: each candidate of the index's walk read whole,
/// on every core. The trace IDs are cut into one range per search thread,
/// and each thread walks the index for its range's candidates and reads
/// them ([`by_traces`]); the threads' series are added up in range order
/// ([`add_up`]).
fn whole_traces(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
) -> Result<Answer<MetricsEval>, RunError> {
    let ranges = tracedb_lsm::TraceIdRange::split(engine.search_threads());
    add_up(
        each_on_a_thread(ranges.into_iter().map(|ids| {
            move || {
                let last = match ids.end {
                    // Split bounds are above 0.
                    Some(end) => {
                        tracedb_lsm::TraceId((u128::from_be_bytes(end.0) - 1).to_be_bytes())
                    }
                    None => tracedb_lsm::TraceId([0xff; 16]),
                };
                let query = SearchQuery {
                    trace_ids: Some((ids.start, last)),
                    ..index_query(req)
                };
                let mut walk = engine.candidates(&query)?;
                let mut walk_bytes = 0;
                by_traces(engine, req, cancel, |held| {
                    crate::search::next_counted(&mut walk, held, &mut walk_bytes, cancel)
                })
            }
        })),
        req.max_series,
    )
}

/// [`run`] over the traces `next` gives (given the query's permit, to count
/// what it holds in), each read whole by its ID. The next
/// [`crate::search::READ_AHEAD`] are taken ahead of their turn and asked of
/// the disk at once ([`Engine::prefetch_trace`]), as a search's are.
fn by_traces(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
    mut next: impl FnMut(&mut tracedb_lsm::Permit) -> Result<Option<Candidate>, RunError>,
) -> Result<Part, RunError> {
    let budget = engine.memory_budget();
    let mut held = budget
        .acquire(ORIGINS_HELD_BYTES)
        .map_err(RunError::Overloaded)?;
    let mut origins = Origins::new();
    let mut eval = req.evaluator()?;
    let projection = Projection::of(&req.query.query);
    let each_span = tracedb_traceql::RawNeeds::of_each_span(&req.query.query);
    let mut series_bytes = 0;
    let mut partial: Vec<String> = Vec::new();
    let row_bytes = req.grid.len() * CELL_BYTES + 256;
    let mut ahead = std::collections::VecDeque::with_capacity(crate::search::READ_AHEAD);
    loop {
        while ahead.len() < crate::search::READ_AHEAD {
            let Some(candidate) = next(&mut held)? else {
                break;
            };
            engine.prefetch_trace(&candidate.trace_id);
            ahead.push_back(candidate);
        }
        let Some(candidate) = ahead.pop_front() else {
            break;
        };
        cancel.check()?;
        let (lookup, trace_bytes) =
            crate::search::read_candidate(engine, &candidate, &mut held, &mut partial)?;
        match decode_matching(
            candidate.trace_id,
            &lookup.spans,
            each_span.as_ref(),
            &projection,
            &mut origins,
        ) {
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
    // A trace held only by a file in quarantine is not proposed: the answer
    // says such a file may have held more of the window's spans, as a scan's
    // does.
    let window = tracedb_lsm::TimeRange::new(req.grid.start, req.grid.end);
    crate::search::quarantined_in(engine, window, &mut partial);
    Ok((
        Answer {
            value: eval,
            partial,
        },
        held,
    ))
}

/// The request `QueryService.QueryMetrics` carries, checked as Tempo's API
/// checks its parameters.
pub fn from_proto(r: &proto::QueryMetricsRequest) -> Result<MetricsRequest, Error> {
    let query = crate::search::compile_any(&r.query)?;
    if query.query.metrics.is_none() {
        return Err(refuse(format!(
            "not a metrics query: {:?} has no metrics function (such as | rate())",
            r.query
        )));
    }
    let (start, end) = (r.start_time_unix_nano, r.end_time_unix_nano);
    // A tier's aligned grid has up to two steps more than it was asked.
    let asked = if r.aligned {
        end.saturating_sub(start).saturating_sub(2 * r.step_nanos)
    } else {
        end.saturating_sub(start)
    };
    let grid = if r.instant {
        instant_grid(start, end)?
    } else if r.aligned {
        // A tier's grid, checked for what the grid itself needs.
        let step = r.step_nanos;
        if step == 0 || end <= start || (end - start) % step != 0 {
            return Err(refuse(
                "an aligned grid needs end - start a positive multiple of step".into(),
            ));
        }
        if (end - start) / step > MAX_INTERVALS + 2 {
            return Err(refuse(format!(
                "a grid of more than {MAX_INTERVALS} intervals"
            )));
        }
        Grid {
            start,
            end,
            step,
            instant: false,
        }
    } else {
        let step = (r.step_nanos != 0).then(|| i128::from(r.step_nanos));
        range_grid(start, end, step)?
    };
    let max_series = match r.max_series {
        0 => MAX_SERIES,
        n => (n as usize).min(MAX_SERIES),
    };
    within_range(
        MetricsRequest {
            query,
            grid,
            max_series,
            max_exemplars: (r.max_exemplars as usize).min(100),
        },
        asked,
    )
}

fn value_proto(v: &LabelValue) -> proto::MetricsValue {
    use proto::metrics_value::Value;
    proto::MetricsValue {
        value: Some(match v {
            LabelValue::Str(s) => Value::StringValue(s.clone()),
            LabelValue::Int(i) => Value::IntValue(*i),
            LabelValue::Float(f) => Value::DoubleValue(*f),
            LabelValue::Bool(b) => Value::BoolValue(*b),
        }),
    }
}

fn value_from_proto(v: &proto::MetricsValue) -> Option<LabelValue> {
    use proto::metrics_value::Value;
    Some(match v.value.as_ref()? {
        Value::StringValue(s) => LabelValue::Str(s.clone()),
        Value::IntValue(i) => LabelValue::Int(*i),
        Value::DoubleValue(f) => LabelValue::Float(*f),
        Value::BoolValue(b) => LabelValue::Bool(*b),
    })
}

fn labels_proto(labels: &[(String, LabelValue)]) -> Vec<proto::MetricsLabel> {
    labels
        .iter()
        .map(|(key, v)| proto::MetricsLabel {
            key: key.clone(),
            value: Some(value_proto(v)),
        })
        .collect()
}

fn labels_from_proto(labels: &[proto::MetricsLabel]) -> Vec<(String, LabelValue)> {
    labels
        .iter()
        .filter_map(|l| Some((l.key.clone(), value_from_proto(l.value.as_ref()?)?)))
        .collect()
}

/// Finished series as the wire carries them.
pub fn series_proto(series: &[Series]) -> Vec<proto::MetricsSeries> {
    series
        .iter()
        .map(|s| proto::MetricsSeries {
            labels: labels_proto(&s.labels),
            samples: s
                .samples
                .iter()
                .map(|&(t, value)| proto::MetricsSample {
                    timestamp_ms: t as i64,
                    value,
                })
                .collect(),
            exemplars: s
                .exemplars
                .iter()
                .map(|e| proto::MetricsExemplar {
                    labels: labels_proto(&e.labels),
                    value: e.value,
                    timestamp_ms: e.timestamp_ms as i64,
                })
                .collect(),
        })
        .collect()
}

/// Accumulated series as the wire carries them, for a query tier.
pub fn raw_proto(raw: Vec<RawSeries>) -> Vec<proto::RawMetricsSeries> {
    use proto::raw_metrics_series::Cells as P;
    raw.into_iter()
        .map(|s| {
            let doubles = |values: Vec<f64>| proto::DoubleCells { values };
            let cells = match s.cells {
                Cells::Count(c) => P::Counts(doubles(c)),
                Cells::Min(c) => P::Mins(doubles(c)),
                Cells::Max(c) => P::Maxes(doubles(c)),
                Cells::Sum(c) => P::Sums(doubles(c)),
                Cells::Avg(c) => {
                    P::Averages(doubles(c.into_iter().flat_map(|(s, n)| [s, n]).collect()))
                }
                Cells::Buckets(b) => P::Buckets(proto::BucketCells {
                    intervals: b
                        .into_iter()
                        .map(|cell| proto::Buckets {
                            exponents: cell.iter().map(|b| b.0).collect(),
                            counts: cell.iter().map(|b| b.1).collect(),
                        })
                        .collect(),
                }),
            };
            proto::RawMetricsSeries {
                key: s
                    .key
                    .iter()
                    .map(|v| v.as_ref().map(value_proto).unwrap_or_default())
                    .collect(),
                cells: Some(cells),
                exemplars: s
                    .exemplars
                    .into_iter()
                    .map(|e| proto::RawMetricsExemplar {
                        interval: e.interval as u32,
                        value: e.value,
                        timestamp_ms: e.timestamp_ms as i64,
                        labels: labels_proto(&e.labels),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Accumulated series from the wire; an error for a message no node of
/// this version sends (cells missing, averages or buckets mismatched).
pub fn raw_from_proto(raw: Vec<proto::RawMetricsSeries>) -> Result<Vec<RawSeries>, String> {
    use proto::raw_metrics_series::Cells as P;
    raw.into_iter()
        .map(|s| {
            let cells = match s.cells.ok_or("a series without cells")? {
                P::Counts(c) => Cells::Count(c.values),
                P::Mins(c) => Cells::Min(c.values),
                P::Maxes(c) => Cells::Max(c.values),
                P::Sums(c) => Cells::Sum(c.values),
                P::Averages(c) => {
                    if c.values.len() % 2 != 0 {
                        return Err("averages come in pairs".into());
                    }
                    Cells::Avg(c.values.chunks(2).map(|p| (p[0], p[1])).collect())
                }
                P::Buckets(b) => Cells::Buckets(
                    b.intervals
                        .into_iter()
                        .map(|cell| {
                            if cell.exponents.len() != cell.counts.len() {
                                return Err(
                                    "bucket exponents and counts differ in length".to_owned()
                                );
                            }
                            Ok(cell.exponents.into_iter().zip(cell.counts).collect())
                        })
                        .collect::<Result<_, _>>()?,
                ),
            };
            Ok(RawSeries {
                key: s.key.iter().map(value_from_proto).collect(),
                cells,
                exemplars: s
                    .exemplars
                    .into_iter()
                    .map(|e| Picked {
                        interval: e.interval as usize,
                        value: e.value,
                        timestamp_ms: e.timestamp_ms.max(0) as u64,
                        labels: labels_from_proto(&e.labels),
                    })
                    .collect(),
            })
        })
        .collect()
}

/// The request a query tier sends each node for `request`: the same query
/// on the same grid, answered raw.
pub fn node_request(request: &MetricsRequest) -> proto::QueryMetricsRequest {
    let g = request.grid;
    proto::QueryMetricsRequest {
        query: request.query.query.to_string(),
        start_time_unix_nano: g.start,
        end_time_unix_nano: g.end,
        step_nanos: if g.instant { 0 } else { g.step },
        instant: g.instant,
        max_series: request.max_series as u32,
        max_exemplars: request.max_exemplars as u32,
        raw: true,
        aligned: !g.instant,
    }
}
