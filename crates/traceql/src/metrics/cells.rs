//! Counting spans a store pre-aggregated: many spans that share every field
//! the query reads, given as one span standing for them all, with their
//! count and their durations' power-of-two buckets
//! ([`MetricsEval::observe_many`]).

use super::{bucket_bound, field_is_duration, Cells, KeyPart, MetricsEval, SeriesAcc};
use crate::{
    ast::{Attribute, Intrinsic, MetricsFn},
    eval::Compiled,
    trace::Trace,
};

impl MetricsEval {
    /// Whether [`MetricsEval::observe_many`] can count this query's function:
    /// `rate`, `count_over_time`, and `histogram_over_time` or
    /// `quantile_over_time` of `duration`.
    pub fn counts_by_buckets(&self) -> bool {
        let duration = |a: &Attribute| matches!(a, Attribute::Intrinsic(Intrinsic::Duration));
        match &self.metrics.function {
            MetricsFn::Rate | MetricsFn::CountOverTime => true,
            MetricsFn::HistogramOverTime(a) | MetricsFn::QuantileOverTime(a, _) => duration(a),
            _ => false,
        }
    }

    /// Counts `spans` spans that `query` matched, each with the fields span
    /// `i` of `trace` has (every field the query reads), all starting in
    /// `interval`; `buckets` are their durations' (exponent, spans). Only
    /// for a function [`MetricsEval::counts_by_buckets`] accepts; no
    /// exemplar is taken (the spans are not at hand).
    pub fn observe_many(
        &mut self,
        query: &Compiled,
        trace: &Trace,
        i: usize,
        interval: usize,
        spans: u64,
        buckets: &[(u8, u64)],
    ) {
        debug_assert!(self.counts_by_buckets());
        if interval >= self.grid.len() {
            return;
        }
        let key: Vec<KeyPart> = self
            .metrics
            .by
            .iter()
            .map(|a| {
                KeyPart::of(
                    query
                        .field_value(trace, i, a)
                        .map(|v| super::LabelValue::of(&v)),
                )
            })
            .collect();
        match self.metrics.function.clone() {
            MetricsFn::Rate | MetricsFn::CountOverTime => {
                if let Some(Cells::Count(c)) = self.cells_of(key) {
                    c[interval] += spans as f64;
                    self.spans += spans;
                }
            }
            MetricsFn::HistogramOverTime(a) => {
                for &(exp, n) in buckets {
                    let mut key = key.clone();
                    let bound = bucket_bound(u32::from(exp), field_is_duration(&a));
                    key.push(KeyPart::Float(bound.to_bits()));
                    if let Some(Cells::Count(c)) = self.cells_of(key) {
                        c[interval] += n as f64;
                        self.spans += n;
                    }
                }
            }
            MetricsFn::QuantileOverTime(..) => {
                if buckets.is_empty() {
                    return;
                }
                if let Some(Cells::Buckets(b)) = self.cells_of(key) {
                    let cell = &mut b[interval];
                    for &(exp, n) in buckets {
                        let exp = u32::from(exp);
                        match cell.binary_search_by_key(&exp, |&(e, _)| e) {
                            Ok(at) => cell[at].1 += n,
                            Err(at) => cell.insert(at, (exp, n)),
                        }
                    }
                    self.spans += buckets.iter().map(|b| b.1).sum::<u64>();
                }
            }
            _ => {}
        }
    }

    /// The cells of the series `key`, made if there is room for it.
    fn cells_of(&mut self, key: Vec<KeyPart>) -> Option<&mut Cells> {
        let n = self.grid.len();
        if !self.series.contains_key(&key) {
            if self.series.len() >= self.max_series {
                self.capped = true;
                return None;
            }
            let cells = match self.metrics.function {
                MetricsFn::QuantileOverTime(..) => Cells::Buckets(vec![Vec::new(); n]),
                _ => Cells::Count(vec![0.0; n]),
            };
            self.series.insert(
                key.clone(),
                SeriesAcc {
                    cells,
                    exemplars: Vec::new(),
                },
            );
        }
        self.series.get_mut(&key).map(|s| &mut s.cells)
    }

    /// Takes the exemplars of `other` (the same query on the same grid) for
    /// the series these already hold; its counts are left.
    pub fn adopt_exemplars(&mut self, other: MetricsEval) {
        self.max_exemplars = other.max_exemplars;
        for (key, theirs) in other.series {
            if let Some(mine) = self.series.get_mut(&key) {
                mine.exemplars.extend(theirs.exemplars);
            }
        }
    }
}
