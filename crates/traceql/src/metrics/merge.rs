//! Adding up series of one query from several stores: a query tier adds
//! the raw cells its nodes send ([`MetricsEval::into_raw`],
//! [`MetricsEval::add_raw`]) as one store adds its own evaluators'
//! ([`MetricsEval::merge`]): counts, sums, minima and maxima combined cell by
//! cell, histograms bucket by bucket, before any quantile, `top` cut or
//! second stage is made.

use std::collections::HashMap;

use super::{function_name, Cells, KeyPart, MetricsEval, RawSeries, SeriesAcc};
use crate::ast::MetricsFn;

impl Cells {
    /// Adds the cells of another store's series of the same function.
    pub(super) fn add(&mut self, other: Cells) {
        let nan_or = |a: f64, b: f64, f: fn(f64, f64) -> f64| {
            if a.is_nan() {
                b
            } else if b.is_nan() {
                a
            } else {
                f(a, b)
            }
        };
        match (self, other) {
            (Cells::Count(a), Cells::Count(b)) => a.iter_mut().zip(b).for_each(|(x, y)| *x += y),
            (Cells::Min(a), Cells::Min(b)) => a
                .iter_mut()
                .zip(b)
                .for_each(|(x, y)| *x = nan_or(*x, y, f64::min)),
            (Cells::Max(a), Cells::Max(b)) => a
                .iter_mut()
                .zip(b)
                .for_each(|(x, y)| *x = nan_or(*x, y, f64::max)),
            (Cells::Sum(a), Cells::Sum(b)) => a
                .iter_mut()
                .zip(b)
                .for_each(|(x, y)| *x = nan_or(*x, y, |p, q| p + q)),
            (Cells::Avg(a), Cells::Avg(b)) => a.iter_mut().zip(b).for_each(|(x, y)| {
                x.0 += y.0;
                x.1 += y.1;
            }),
            (Cells::Buckets(a), Cells::Buckets(b)) => {
                for (cell, more) in a.iter_mut().zip(b) {
                    for (exp, n) in more {
                        match cell.binary_search_by_key(&exp, |&(e, _)| e) {
                            Ok(at) => cell[at].1 += n,
                            Err(at) => cell.insert(at, (exp, n)),
                        }
                    }
                }
            }
            _ => unreachable!("series of one query hold cells of one kind"),
        }
    }
}

impl MetricsEval {
    /// Adds `other`'s series (the same query on the same grid, over other
    /// traces: another store's) to these. Past the series cap, the series
    /// kept are these, then `other`'s new ones in the order of their labels:
    /// never the order a map happens to hold them in.
    pub fn merge(&mut self, other: MetricsEval) {
        self.capped |= other.capped;
        self.spans += other.spans;
        let mut series: Vec<_> = other.series.into_iter().collect();
        if self.series.len() + series.len() > self.max_series {
            series.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        for (key, theirs) in series {
            let room = self.series.len() < self.max_series;
            match self.series.get_mut(&key) {
                Some(mine) => {
                    mine.cells.add(theirs.cells);
                    mine.exemplars.extend(theirs.exemplars);
                }
                None if room => {
                    self.series.insert(key, theirs);
                }
                None => self.capped = true,
            }
        }
    }

    /// The series as accumulated, and whether some were left out for the
    /// cap: for another evaluator to add ([`MetricsEval::add_raw`]).
    pub fn into_raw(self) -> (Vec<RawSeries>, bool) {
        let raw = self
            .series
            .into_iter()
            .map(|(key, acc)| RawSeries {
                key: key.iter().map(KeyPart::value).collect(),
                cells: acc.cells,
                exemplars: acc.exemplars,
            })
            .collect();
        (raw, self.capped)
    }

    /// Adds series another evaluator of the same query and grid sent
    /// ([`MetricsEval::into_raw`]); an error, and nothing added, when they
    /// are not of this query's shape (another function, another grid).
    pub fn add_raw(&mut self, raw: Vec<RawSeries>, capped: bool) -> Result<(), String> {
        let n = self.grid.len();
        let key_len = match self.metrics.function {
            MetricsFn::Compare { .. } => 3,
            MetricsFn::HistogramOverTime(_) => self.metrics.by.len() + 1,
            _ => self.metrics.by.len(),
        };
        let mut checked = Vec::with_capacity(raw.len());
        for mut series in raw {
            if series.key.len() != key_len {
                return Err(format!(
                    "a series has {} labels where the query makes {key_len}",
                    series.key.len()
                ));
            }
            let kind_ok = match (&mut series.cells, &self.metrics.function) {
                (
                    Cells::Count(c),
                    MetricsFn::Rate
                    | MetricsFn::CountOverTime
                    | MetricsFn::HistogramOverTime(_)
                    | MetricsFn::Compare { .. },
                )
                | (Cells::Min(c), MetricsFn::MinOverTime(_))
                | (Cells::Max(c), MetricsFn::MaxOverTime(_))
                | (Cells::Sum(c), MetricsFn::SumOverTime(_)) => c.len() == n,
                (Cells::Avg(c), MetricsFn::AvgOverTime(_)) => c.len() == n,
                (Cells::Buckets(b), MetricsFn::QuantileOverTime(..)) => {
                    for cell in b.iter_mut() {
                        cell.sort_unstable_by_key(|&(e, _)| e);
                        cell.dedup_by(|later, earlier| {
                            let same = later.0 == earlier.0;
                            if same {
                                earlier.1 += later.1;
                            }
                            same
                        });
                    }
                    b.len() == n && b.iter().flatten().all(|&(e, _)| e < 64)
                }
                _ => false,
            };
            if !kind_ok {
                return Err(format!(
                    "a series' cells are not {n} intervals of {}",
                    function_name(&self.metrics.function)
                ));
            }
            if series.exemplars.iter().any(|e| e.interval >= n) {
                return Err("an exemplar lies outside the grid".into());
            }
            checked.push(series);
        }
        let mut other = MetricsEval {
            metrics: self.metrics.clone(),
            grid: self.grid,
            series: HashMap::new(),
            max_series: usize::MAX,
            capped,
            max_exemplars: self.max_exemplars,
            exemplar_buckets: Vec::new(),
            exemplars_taken: 0,
            spans: 0,
            noop: self.noop,
            until: u64::MAX,
        };
        for series in checked {
            let key: Vec<KeyPart> = series.key.into_iter().map(KeyPart::of).collect();
            other.series.insert(
                key,
                SeriesAcc {
                    cells: series.cells,
                    exemplars: series.exemplars,
                },
            );
        }
        self.merge(other);
        Ok(())
    }
}
