//! TraceQL metrics: time series of the spans a query's pipeline matches,
//! with the meaning Grafana Tempo 3.0.3 gives them, so Grafana's panels
//! (Traces Drilldown's among them) draw the same lines over tracedb.
//!
//! A [`Grid`] cuts the query's range into intervals; a [`MetricsEval`]
//! takes one evaluated trace at a time ([`MetricsEval::observe`]), puts
//! each matched span in the interval of its start time and the series of
//! its `by()` values, and [`MetricsEval::finish`] turns the counts into
//! [`Series`]: values per interval, exemplars, the second stage applied.
//!
//! Tempo's rules carried over (its `pkg/traceql/engine_metrics*.go`):
//! - intervals are right-closed, `(start + i·step, start + (i+1)·step]`,
//!   and a sample's timestamp is its interval's end; a range query's start
//!   is aligned down to the step and moved one step earlier, its end
//!   aligned up ([`Grid::range`]); an instant query is one interval
//!   `[start, end]` stamped at `end`;
//! - `rate` is the count over the step in seconds, and `rate`, `count` and
//!   the histogram emit every interval, zero included; `min`, `max`, `sum`
//!   and `avg` emit only intervals with a value; `quantile_over_time`
//!   emits 0 for an empty interval;
//! - durations are measured in seconds; `histogram_over_time` and
//!   `quantile_over_time` count values in power-of-two buckets (the
//!   smallest power of two at or above the value, values under 2 left
//!   out), and a quantile is interpolated between its bucket's bounds on a
//!   log2 scale;
//! - a series without `by()` is labelled `__name__` = the function; `by()`
//!   labels whose value is nil are left out, and when all are, the first
//!   is kept with the string `nil`; quantiles add `p`, the histogram
//!   `__bucket`;
//! - `topk`/`bottomk` keep, at each timestamp, the values of the k
//!   largest (smallest) series; a comparison keeps the values it holds for.
//!
//! - `compare()` counts, per field, the spans of each side carrying each
//!   value, and keeps the `top` values with the most spans
//!   (the `compare` module).
//!
//! Where tracedb answers differently, on purpose (the README lists them,
//! and `tests/it/tempo_metrics.rs` checks them against Tempo's recorded
//! answers):
//! - it counts every span: sampling hints (`with(sample=true)`) are
//!   accepted and answered exactly, as Tempo allows;
//! - `sum_over_time` leaves out spans that lack the field (Tempo 3.0.3's
//!   running sum restarts at such a span) and sums every numeric value
//!   (Tempo's only those of the first value's type);
//! - `compare()` counts no nil for a field a span lacks;
//! - exemplars are the first matched span of a trace, not a random one.

use std::collections::HashMap;

use second::{second_stage, sort_series};

use crate::{
    ast::{Attribute, Intrinsic, Metrics, MetricsFn},
    eval::{Compiled, FieldValue, Spanset},
    trace::{hex, Trace},
};

const NANOS_PER_SEC: f64 = 1e9;

/// The intervals of a metrics query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    /// Unix ns: the left edge of the first interval (excluded).
    pub start: u64,
    /// Unix ns: the right edge of the last interval (included).
    pub end: u64,
    /// Length of an interval, ns; `end - start` for an instant query.
    pub step: u64,
    pub instant: bool,
}

impl Grid {
    /// A range query's grid, aligned as Tempo aligns it: `start` down to a
    /// multiple of `step` and then one step earlier, `end` up to a
    /// multiple. `step` must not be 0.
    pub fn range(start: u64, end: u64, step: u64) -> Grid {
        assert!(step > 0, "a grid needs a step");
        let mut s = start - start % step;
        let e = match end % step {
            0 => end,
            r => end.saturating_add(step - r),
        };
        if s > step {
            s -= step;
        }
        Grid {
            start: s,
            end: e,
            step,
            instant: false,
        }
    }

    /// An instant query's grid: one interval, `[start, end]`.
    pub fn instant(start: u64, end: u64) -> Grid {
        Grid {
            start,
            end,
            step: end.saturating_sub(start),
            instant: true,
        }
    }

    /// How many intervals (samples per series) the grid has.
    pub fn len(&self) -> usize {
        if self.instant {
            1
        } else {
            ((self.end - self.start) / self.step) as usize
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The interval a span starting at `ts` (Unix ns) counts in, if any.
    pub fn interval(&self, ts: u64) -> Option<usize> {
        if self.instant {
            return (ts >= self.start && ts <= self.end && self.end != self.start).then_some(0);
        }
        if ts <= self.start || ts > self.end || self.step == 0 {
            return None;
        }
        let offset = ts - self.start;
        let mut i = offset / self.step;
        if i * self.step == offset {
            // On a boundary: the interval it closes.
            i -= 1;
        }
        Some(i as usize)
    }

    /// The timestamp of interval `i`'s sample, Unix ms: its right edge.
    pub fn timestamp_ms(&self, i: usize) -> u64 {
        let ns = if self.instant {
            self.end
        } else {
            self.start + (i as u64 + 1) * self.step
        };
        ns / 1_000_000
    }

    /// The step in seconds, as `rate` divides by it.
    fn step_secs(&self) -> f64 {
        self.step as f64 / NANOS_PER_SEC
    }
}

/// A label's value, as Tempo's JSON types it.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl LabelValue {
    /// Tempo's label for a field value: status, kind and durations as
    /// strings (durations in Go's notation, `1.5s`).
    fn of(v: &FieldValue) -> LabelValue {
        match v {
            FieldValue::Bool(b) => LabelValue::Bool(*b),
            FieldValue::Int(i) => LabelValue::Int(*i),
            FieldValue::Float(f) => LabelValue::Float(*f),
            FieldValue::Str(s) => LabelValue::Str(s.clone()),
            FieldValue::Duration(d) => LabelValue::Str(go_duration(*d)),
            FieldValue::Status(s) => LabelValue::Str(s.name().to_owned()),
            FieldValue::Kind(k) => LabelValue::Str(k.name().to_owned()),
        }
    }

    /// The text Tempo orders series by (protobuf's compact text form).
    fn sort_text(&self) -> String {
        match self {
            LabelValue::Str(s) => format!("string_value:{s:?} "),
            LabelValue::Int(i) => format!("int_value:{i} "),
            LabelValue::Float(f) => format!("double_value:{f} "),
            LabelValue::Bool(b) => format!("bool_value:{b} "),
        }
    }
}

/// One value of a series key: hashable and ordered, nil included.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum KeyPart {
    Nil,
    Str(String),
    Int(i64),
    /// The value's bits.
    Float(u64),
    Bool(bool),
}

impl KeyPart {
    fn of(v: Option<LabelValue>) -> KeyPart {
        match v {
            None => KeyPart::Nil,
            Some(LabelValue::Str(s)) => KeyPart::Str(s),
            Some(LabelValue::Int(i)) => KeyPart::Int(i),
            Some(LabelValue::Float(f)) => KeyPart::Float(f.to_bits()),
            Some(LabelValue::Bool(b)) => KeyPart::Bool(b),
        }
    }

    fn value(&self) -> Option<LabelValue> {
        Some(match self {
            KeyPart::Nil => return None,
            KeyPart::Str(s) => LabelValue::Str(s.clone()),
            KeyPart::Int(i) => LabelValue::Int(*i),
            KeyPart::Float(b) => LabelValue::Float(f64::from_bits(*b)),
            KeyPart::Bool(b) => LabelValue::Bool(*b),
        })
    }
}

/// A span picked to illustrate a series: a click on it opens its trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    pub labels: Vec<(String, LabelValue)>,
    /// NaN when the series has no value there.
    pub value: f64,
    /// The span's start, Unix ms.
    pub timestamp_ms: u64,
}

/// One series of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Vec<(String, LabelValue)>,
    /// (timestamp in Unix ms, value), ascending.
    pub samples: Vec<(u64, f64)>,
    pub exemplars: Vec<Exemplar>,
}

/// Most exemplars one time bucket of the range keeps (Tempo's).
const EXEMPLARS_PER_BUCKET: usize = 2;

/// What one series accumulates, per interval.
#[derive(Debug, Clone, PartialEq)]
pub enum Cells {
    /// Spans (`rate`, `count_over_time`, a histogram bucket).
    Count(Vec<f64>),
    /// NaN where no span had a value.
    Min(Vec<f64>),
    Max(Vec<f64>),
    Sum(Vec<f64>),
    /// (sum, count).
    Avg(Vec<(f64, f64)>),
    /// Counts per power-of-two exponent, for quantiles.
    Buckets(Vec<Vec<(u32, u64)>>),
}

/// The range cut into `n` equal time buckets, each keeping at most
/// [`EXEMPLARS_PER_BUCKET`] exemplars.
#[derive(Clone, Copy)]
struct ExemplarBuckets {
    n: usize,
    grid: Grid,
}

impl ExemplarBuckets {
    /// The bucket a span starting at `ts` (Unix ns) falls in.
    fn of(self, ts: u64) -> usize {
        let n = self.n as u64;
        let span = (self.grid.end - self.grid.start).max(1);
        let at = ts.saturating_sub(self.grid.start).min(span - 1);
        ((at as u128 * n as u128 / span as u128) as usize).min(self.n - 1)
    }
}

/// A pending exemplar: a matched span, in its series and interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Picked {
    pub interval: usize,
    /// The span's own value, for the functions whose exemplars carry it
    /// (NaN for those that take the series' value at the end).
    pub value: f64,
    pub timestamp_ms: u64,
    pub labels: Vec<(String, LabelValue)>,
}

/// A series as accumulated, before [`MetricsEval::finish`]: what a node
/// sends a query tier, which adds the nodes' series
/// ([`MetricsEval::add_raw`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RawSeries {
    /// The `by()` values (`None`: nil), then a histogram's bucket bound.
    pub key: Vec<Option<LabelValue>>,
    pub cells: Cells,
    pub exemplars: Vec<Picked>,
}

#[derive(Debug, Clone)]
struct SeriesAcc {
    cells: Cells,
    exemplars: Vec<Picked>,
}

/// The metrics stage of a query, accumulating over traces.
#[derive(Debug)]
pub struct MetricsEval {
    metrics: Metrics,
    grid: Grid,
    series: HashMap<Vec<KeyPart>, SeriesAcc>,
    /// Most series kept; spans of further series are left out and the
    /// answer marked ([`MetricsEval::series_capped`]).
    max_series: usize,
    capped: bool,
    /// Exemplars wanted in all, and taken so far per time bucket.
    max_exemplars: usize,
    exemplar_buckets: Vec<usize>,
    exemplars_taken: usize,
    /// Spans counted.
    spans: u64,
    /// No span can match ([`Compiled::is_noop`]).
    noop: bool,
    /// Spans starting after this (Unix ns) are not counted
    /// ([`MetricsEval::count_until`]).
    until: u64,
}

/// Why series of nested-set numbers are refused: the numbers are positions
/// in one trace's tree, and which sibling comes first is each store's own
/// order (Tempo's is the order it stored the spans in, tracedb's their
/// start), so the same traces give other series.
const NESTED_SET_SERIES: &str = "by() or a measure of nestedSetLeft, nestedSetRight or \
nestedSetParent (their numbers follow the order a store keeps sibling spans in, \
which is not Tempo's)";

/// Why a metrics stage cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error("not a metrics query (add a metrics function such as | rate())")]
    NotMetrics,
    #[error("{0} is not supported by tracedb yet")]
    Unsupported(&'static str),
}

impl MetricsEval {
    /// The metrics stage of `query` over `grid`, keeping at most
    /// `max_series` series and `max_exemplars` exemplars.
    pub fn new(
        query: &Compiled,
        grid: Grid,
        max_series: usize,
        max_exemplars: usize,
    ) -> Result<MetricsEval, MetricsError> {
        let metrics = query
            .query
            .metrics
            .as_deref()
            .cloned()
            .ok_or(MetricsError::NotMetrics)?;
        if metrics.fields().any(|a| {
            matches!(
                a,
                Attribute::Intrinsic(
                    Intrinsic::NestedSetLeft
                        | Intrinsic::NestedSetRight
                        | Intrinsic::NestedSetParent
                )
            )
        }) {
            return Err(MetricsError::Unsupported(NESTED_SET_SERIES));
        }
        let buckets = (max_exemplars / 2).max(1);
        Ok(MetricsEval {
            metrics,
            grid,
            series: HashMap::new(),
            max_series,
            capped: false,
            max_exemplars,
            exemplar_buckets: vec![0; buckets],
            exemplars_taken: 0,
            spans: 0,
            noop: query.is_noop(),
            until: u64::MAX,
        })
    }

    /// Counts only the spans that start at or before `t` (Unix ns): the
    /// part of a window that another evaluator, to be merged with this one,
    /// counts from its end.
    pub fn count_until(&mut self, t: u64) {
        self.until = t;
    }

    /// True once a series was left out for [`MetricsEval::new`]'s cap.
    pub fn series_capped(&self) -> bool {
        self.capped
    }

    /// Spans counted so far.
    pub fn spans(&self) -> u64 {
        self.spans
    }

    /// Series held so far.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Counts the spans of `sets` (the spansets `query` matched on
    /// `trace`) that start inside the grid.
    pub fn observe(&mut self, query: &Compiled, trace: &Trace, sets: &[Spanset]) {
        let mut spans: Vec<usize> = sets.iter().flat_map(|s| s.spans.iter().copied()).collect();
        spans.sort_unstable();
        spans.dedup();
        let mut exemplar_left = self.max_exemplars > 0;
        let compare = match &self.metrics.function {
            MetricsFn::Compare {
                selection,
                start_unix_nano,
                end_unix_nano,
                ..
            } => Some((selection.clone(), *start_unix_nano, *end_unix_nano)),
            _ => None,
        };
        for i in spans {
            let span = &trace.spans[i];
            if span.start_unix_nano > self.until {
                continue;
            }
            let Some(interval) = self.grid.interval(span.start_unix_nano) else {
                continue;
            };
            if let Some((selection, start, end)) = &compare {
                let in_window = (*start == 0 && *end == 0)
                    || (span.start_unix_nano > *start && span.start_unix_nano <= *end);
                let selected = in_window && query.holds(trace, i, selection);
                self.count_compare(query, trace, i, interval, selected);
                continue;
            }
            let mut key: Vec<KeyPart> = self
                .metrics
                .by
                .iter()
                .map(|a| KeyPart::of(query.by_value(trace, i, a).map(|v| LabelValue::of(&v))))
                .collect();
            let value = match &self.metrics.function {
                MetricsFn::Rate | MetricsFn::CountOverTime => 1.0,
                MetricsFn::MinOverTime(a)
                | MetricsFn::MaxOverTime(a)
                | MetricsFn::SumOverTime(a)
                | MetricsFn::AvgOverTime(a) => match measure(query, trace, i, a) {
                    Some(v) => v,
                    None => continue,
                },
                MetricsFn::HistogramOverTime(a) | MetricsFn::QuantileOverTime(a, _) => {
                    match log2_bucket(query, trace, i, a) {
                        Some(exp) => exp as f64,
                        None => continue,
                    }
                }
                MetricsFn::Compare { .. } => unreachable!("counted above"),
            };
            if let MetricsFn::HistogramOverTime(a) = &self.metrics.function {
                let bound = bucket_bound(value as u32, field_is_duration(a));
                key.push(KeyPart::Float(bound.to_bits()));
            }
            let n = self.grid.len();
            if !self.series.contains_key(&key) {
                if self.series.len() >= self.max_series {
                    self.capped = true;
                    continue;
                }
                let cells = match &self.metrics.function {
                    MetricsFn::Rate
                    | MetricsFn::CountOverTime
                    | MetricsFn::HistogramOverTime(_) => Cells::Count(vec![0.0; n]),
                    MetricsFn::MinOverTime(_) => Cells::Min(vec![f64::NAN; n]),
                    MetricsFn::MaxOverTime(_) => Cells::Max(vec![f64::NAN; n]),
                    MetricsFn::SumOverTime(_) => Cells::Sum(vec![f64::NAN; n]),
                    MetricsFn::AvgOverTime(_) => Cells::Avg(vec![(0.0, 0.0); n]),
                    MetricsFn::QuantileOverTime(..) => Cells::Buckets(vec![Vec::new(); n]),
                    MetricsFn::Compare { .. } => unreachable!("counted above"),
                };
                self.series.insert(
                    key.clone(),
                    SeriesAcc {
                        cells,
                        exemplars: Vec::new(),
                    },
                );
            }
            // By the millisecond an exemplar carries, as `finish` bounds them.
            let bucket = self.exemplar_bucket(span.start_unix_nano / 1_000_000 * 1_000_000);
            let acc = self.series.get_mut(&key).expect("inserted above");
            match &mut acc.cells {
                Cells::Count(c) => c[interval] += 1.0,
                Cells::Min(c) => {
                    if c[interval].is_nan() || value < c[interval] {
                        c[interval] = value;
                    }
                }
                Cells::Max(c) => {
                    if c[interval].is_nan() || value > c[interval] {
                        c[interval] = value;
                    }
                }
                Cells::Sum(c) => {
                    c[interval] = if c[interval].is_nan() {
                        value
                    } else {
                        c[interval] + value
                    };
                }
                Cells::Avg(c) => {
                    c[interval].0 += value;
                    c[interval].1 += 1.0;
                }
                Cells::Buckets(b) => {
                    let exp = value as u32;
                    let cell = &mut b[interval];
                    match cell.binary_search_by_key(&exp, |&(e, _)| e) {
                        Ok(at) => cell[at].1 += 1,
                        Err(at) => cell.insert(at, (exp, 1)),
                    }
                }
            }
            self.spans += 1;
            // One exemplar per trace, from its first span counted.
            if exemplar_left
                && self.exemplars_taken < self.max_exemplars
                && self.exemplar_buckets[bucket] < EXEMPLARS_PER_BUCKET
            {
                exemplar_left = false;
                self.exemplar_buckets[bucket] += 1;
                self.exemplars_taken += 1;
                let own = match &self.metrics.function {
                    MetricsFn::QuantileOverTime(a, _) => {
                        measure(query, trace, i, a).unwrap_or(f64::NAN)
                    }
                    MetricsFn::Rate
                    | MetricsFn::CountOverTime
                    | MetricsFn::HistogramOverTime(_) => f64::NAN,
                    _ => value,
                };
                let mut labels = vec![
                    (
                        "trace:id".to_owned(),
                        LabelValue::Str(trimmed_hex(&trace.trace_id)),
                    ),
                    ("span:id".to_owned(), LabelValue::Str(hex(&span.span_id))),
                ];
                for (a, part) in self.metrics.by.iter().zip(&key) {
                    if let Some(v) = part.value() {
                        labels.push((label_name(a), v));
                    }
                }
                acc.exemplars.push(Picked {
                    interval,
                    value: own,
                    timestamp_ms: span.start_unix_nano / 1_000_000,
                    labels,
                });
            }
        }
    }

    /// The time bucket of the range an exemplar at `ts` falls in.
    fn exemplar_bucket(&self, ts: u64) -> usize {
        ExemplarBuckets {
            n: self.exemplar_buckets.len(),
            grid: self.grid,
        }
        .of(ts)
    }

    /// The series, with the second stage applied, in Tempo's order.
    pub fn finish(self) -> Vec<Series> {
        if let MetricsFn::Compare { top, .. } = self.metrics.function {
            return self.finish_compare(top);
        }
        let grid = self.grid;
        let name = function_name(&self.metrics.function);
        let mut out = Vec::new();
        for (key, acc) in self.series {
            let mut labels: Vec<(String, LabelValue)> = Vec::new();
            let by_len = self.metrics.by.len();
            for (a, part) in self.metrics.by.iter().zip(&key[..by_len]) {
                if let Some(v) = part.value() {
                    labels.push((label_name(a), v));
                }
            }
            if labels.is_empty() {
                if let Some(first) = self.metrics.by.first() {
                    labels.push((label_name(first), LabelValue::Str("nil".into())));
                }
            }
            let bucket = key.get(by_len).and_then(KeyPart::value);
            let samples_of = |values: Vec<f64>| -> Vec<(u64, f64)> {
                values
                    .into_iter()
                    .enumerate()
                    .filter(|(_, v)| !v.is_nan())
                    .map(|(i, v)| (grid.timestamp_ms(i), v))
                    .collect()
            };
            match acc.cells {
                Cells::Buckets(cells) => {
                    let MetricsFn::QuantileOverTime(field, qs) = &self.metrics.function else {
                        unreachable!("buckets are quantiles'")
                    };
                    let duration = field_is_duration(field);
                    let mut per_q: Vec<Series> = qs
                        .iter()
                        .map(|&q| {
                            let values = cells
                                .iter()
                                .map(|b| quantile(b, q, duration))
                                .collect::<Vec<f64>>();
                            let mut labels = labels.clone();
                            labels.push(("p".into(), LabelValue::Float(q)));
                            Series {
                                labels,
                                samples: samples_of(values),
                                exemplars: Vec::new(),
                            }
                        })
                        .collect();
                    // Each exemplar goes to the quantile series whose value
                    // over the whole range is closest to its own.
                    if !per_q.is_empty() {
                        let mut all: Vec<(u32, u64)> = Vec::new();
                        for cell in &cells {
                            for &(e, c) in cell {
                                match all.binary_search_by_key(&e, |&(x, _)| x) {
                                    Ok(at) => all[at].1 += c,
                                    Err(at) => all.insert(at, (e, c)),
                                }
                            }
                        }
                        let overall: Vec<f64> =
                            qs.iter().map(|&q| quantile(&all, q, duration)).collect();
                        for p in acc.exemplars {
                            let closest = overall
                                .iter()
                                .enumerate()
                                .min_by(|a, b| {
                                    (a.1 - p.value).abs().total_cmp(&(b.1 - p.value).abs())
                                })
                                .map_or(0, |(i, _)| i);
                            per_q[closest].exemplars.push(Exemplar {
                                labels: p.labels,
                                value: p.value,
                                timestamp_ms: p.timestamp_ms,
                            });
                        }
                    }
                    out.extend(per_q);
                    continue;
                }
                cells => {
                    let values: Vec<f64> = match cells {
                        Cells::Count(c) => match self.metrics.function {
                            MetricsFn::Rate => c.iter().map(|n| n / grid.step_secs()).collect(),
                            _ => c,
                        },
                        Cells::Min(c) | Cells::Max(c) | Cells::Sum(c) => c,
                        Cells::Avg(c) => c
                            .iter()
                            .map(|&(s, n)| if n > 0.0 { s / n } else { f64::NAN })
                            .collect(),
                        Cells::Buckets(_) => unreachable!("handled above"),
                    };
                    if let Some(b) = bucket {
                        labels.push(("__bucket".into(), b));
                    } else if self.metrics.by.is_empty() {
                        labels.push(("__name__".into(), LabelValue::Str(name.into())));
                    }
                    let exemplars = acc
                        .exemplars
                        .into_iter()
                        .map(|p| Exemplar {
                            labels: p.labels,
                            value: if p.value.is_nan() {
                                values.get(p.interval).copied().unwrap_or(f64::NAN)
                            } else {
                                p.value
                            },
                            timestamp_ms: p.timestamp_ms,
                        })
                        .filter(|e| !e.value.is_nan())
                        .collect();
                    out.push(Series {
                        labels,
                        samples: samples_of(values),
                        exemplars,
                    });
                }
            }
        }
        // Tempo answers an ungrouped count or rate that matched nothing
        // with a series of zeros, unless no span could ever match.
        if out.is_empty()
            && !self.noop
            && self.metrics.by.is_empty()
            && matches!(
                self.metrics.function,
                MetricsFn::Rate | MetricsFn::CountOverTime
            )
        {
            out.push(Series {
                labels: vec![("__name__".into(), LabelValue::Str(name.into()))],
                samples: (0..grid.len())
                    .map(|i| (grid.timestamp_ms(i), 0.0))
                    .collect(),
                exemplars: Vec::new(),
            });
        }
        out.retain(|s| !s.samples.is_empty());
        for stage in &self.metrics.second {
            out = second_stage(out, stage);
        }
        sort_series(&mut out);
        // Series added from other stores (or other threads' ranges of
        // trace IDs) may bring more than were asked, in all or in a time
        // bucket; the first series in order keep theirs.
        let mut left = self.max_exemplars;
        // As many buckets as `new` makes for the exemplars asked (an
        // evaluator of cells adopts another's exemplars and their number).
        let buckets = ExemplarBuckets {
            n: (self.max_exemplars / 2).max(1),
            grid: self.grid,
        };
        let mut per_bucket = vec![0; buckets.n];
        for s in &mut out {
            s.exemplars.retain(|e| {
                let b = buckets.of(e.timestamp_ms.saturating_mul(1_000_000));
                let keep = left > 0 && per_bucket[b] < EXEMPLARS_PER_BUCKET;
                if keep {
                    left -= 1;
                    per_bucket[b] += 1;
                }
                keep
            });
        }
        out
    }
}

/// The numeric value of `field` on span `i` for min, max, sum and avg:
/// durations in seconds, ints and floats as they are; `None` otherwise.
fn measure(query: &Compiled, trace: &Trace, i: usize, field: &Attribute) -> Option<f64> {
    match query.field_value(trace, i, field)? {
        FieldValue::Duration(d) => Some(d as f64 / NANOS_PER_SEC),
        FieldValue::Int(v) => Some(v as f64),
        FieldValue::Float(v) => Some(v),
        _ => None,
    }
}

/// Whether `field` is an intrinsic measured in time.
fn field_is_duration(field: &Attribute) -> bool {
    matches!(
        field,
        Attribute::Intrinsic(i) if i.value_type() == crate::ast::Type::Duration
    )
}

/// The exponent of the power-of-two bucket of `field` on span `i`:
/// integers (durations in ns) of 2 or more only.
fn log2_bucket(query: &Compiled, trace: &Trace, i: usize, field: &Attribute) -> Option<u32> {
    let v = match query.field_value(trace, i, field)? {
        FieldValue::Duration(v) | FieldValue::Int(v) => v,
        _ => return None,
    };
    if v < 2 {
        return None;
    }
    // The smallest power of two at or above v.
    Some(64 - (v as u64 - 1).leading_zeros())
}

/// A bucket's upper bound as its label shows it: seconds for durations.
fn bucket_bound(exp: u32, duration: bool) -> f64 {
    let bound = 2f64.powi(exp as i32);
    if duration {
        bound / NANOS_PER_SEC
    } else {
        bound
    }
}

/// Quantile `q` of the values counted in `buckets` (exponent, count),
/// ascending: interpolated between the bounds of the bucket it falls in,
/// on a log2 scale; 0 when nothing was counted.
fn quantile(buckets: &[(u32, u64)], q: f64, duration: bool) -> f64 {
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    if total == 0 {
        return 0.0;
    }
    let want = ((q * total as f64).ceil() as u64).max(1);
    let mut cum = 0u64;
    for (i, &(exp, count)) in buckets.iter().enumerate() {
        if cum + count > want {
            let frac = (want - cum) as f64 / count as f64;
            let hi = bucket_bound(exp, duration).log2();
            let lo = match i.checked_sub(1) {
                Some(p) => bucket_bound(buckets[p].0, duration).log2(),
                None => hi - 1.0,
            };
            return 2f64.powf(lo + (hi - lo) * frac);
        }
        cum += count;
        if cum == want {
            return bucket_bound(exp, duration);
        }
    }
    buckets.last().map_or(0.0, |b| bucket_bound(b.0, duration))
}

/// The name a series without `by()` carries in `__name__`.
fn function_name(f: &MetricsFn) -> &'static str {
    match f {
        MetricsFn::Rate => "rate",
        MetricsFn::CountOverTime => "count_over_time",
        MetricsFn::MinOverTime(_) => "min_over_time",
        MetricsFn::MaxOverTime(_) => "max_over_time",
        MetricsFn::SumOverTime(_) => "sum_over_time",
        MetricsFn::AvgOverTime(_) => "avg_over_time",
        MetricsFn::QuantileOverTime(..) => "quantile_over_time",
        MetricsFn::HistogramOverTime(_) => "histogram_over_time",
        MetricsFn::Compare { .. } => "compare",
    }
}

/// A field as a label key, as Tempo names it: attributes as written
/// (`resource.service.name`, `span.http.route`, `.foo`), intrinsics by
/// their short name where they have one (`name`, `status`, `duration`;
/// tracedb does not keep whether the query wrote `span:name`, for which
/// Tempo's label is `span:name`).
pub fn label_name(a: &Attribute) -> String {
    use crate::ast::Intrinsic::*;
    match a {
        Attribute::Intrinsic(i) => match i {
            Name => "name",
            Status => "status",
            StatusMessage => "statusMessage",
            Kind => "kind",
            Duration => "duration",
            RootName => "rootName",
            RootServiceName => "rootServiceName",
            TraceDuration => "traceDuration",
            other => other.name(),
        }
        .to_owned(),
        Attribute::Attr { .. } => a.to_string(),
    }
}

/// A trace ID as Tempo's exemplars name it: lowercase hex without its
/// leading zeros.
fn trimmed_hex(id: &[u8; 16]) -> String {
    let full = hex(id);
    let trimmed = full.trim_start_matches('0');
    if trimmed.is_empty() {
        "0".into()
    } else {
        trimmed.into()
    }
}

/// `ns` in Go's `time.Duration` notation (`1h2m3.5s`, `1.5ms`, `0s`), as
/// Tempo labels a duration.
pub fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let frac = |v: u64, unit: u64, digits: usize| -> String {
        let whole = v / unit;
        let rest = v % unit;
        if rest == 0 {
            whole.to_string()
        } else {
            let r = format!("{rest:0digits$}");
            format!("{whole}.{}", r.trim_end_matches('0'))
        }
    };
    let body = if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 1_000, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 1_000_000, 6))
    } else {
        let secs = u / 1_000_000_000;
        let sub = u % 1_000_000_000;
        let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
        let s = frac(s * 1_000_000_000 + sub, 1_000_000_000, 9);
        if h > 0 {
            format!("{h}h{m}m{s}s")
        } else if m > 0 {
            format!("{m}m{s}s")
        } else {
            format!("{s}s")
        }
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

mod cells;
mod compare;
mod merge;
mod second;
#[cfg(test)]
mod tests;
