//! `compare({ condition }, top, from, to)`: for each field of the matched
//! spans, how many spans of the selection (the condition holds, and the span
//! starts between `from` and `to` when they are given) and how many of the
//! rest (the baseline) carry each of its values, per interval; Drilldown's
//! comparison tab draws them side by side.
//!
//! The series are keyed `[side, field, value]`, the totals `[side_total,
//! field, nil]`, all counts, so a query tier adds nodes' series as it adds
//! any count; the `top` cut is made at the end, over the added counts, as
//! Tempo's frontend makes it.

use std::collections::HashMap;

use super::{label_name, sort_series, Cells, KeyPart, LabelValue, MetricsEval, Series, SeriesAcc};
use crate::{eval::Compiled, trace::Trace};

/// `compare()`'s sides, as its series' `__meta_type` names them.
const BASELINE: &str = "baseline";
const SELECTION: &str = "selection";
const BASELINE_TOTAL: &str = "baseline_total";
const SELECTION_TOTAL: &str = "selection_total";

/// A field's value (nil for a total) and its counts per interval.
type Counted = (Option<LabelValue>, Vec<f64>);

impl MetricsEval {
    /// Counts span `i` for `compare()`: one for each of its fields' values
    /// and one for each field's total, on the selection's side or the
    /// baseline's.
    pub(super) fn count_compare(
        &mut self,
        query: &Compiled,
        trace: &Trace,
        i: usize,
        interval: usize,
        selected: bool,
    ) {
        let (side, total) = if selected {
            (SELECTION, SELECTION_TOTAL)
        } else {
            (BASELINE, BASELINE_TOTAL)
        };
        for (field, value) in query.compare_fields(trace, i) {
            let name = label_name(&field);
            let value = KeyPart::of(Some(LabelValue::of(&value)));
            for key in [
                vec![KeyPart::Str(side.into()), KeyPart::Str(name.clone()), value],
                vec![KeyPart::Str(total.into()), KeyPart::Str(name), KeyPart::Nil],
            ] {
                let full = self.series.len() >= self.max_series;
                match self.series.get_mut(&key) {
                    Some(acc) => {
                        let Cells::Count(c) = &mut acc.cells else {
                            unreachable!("compare() counts")
                        };
                        c[interval] += 1.0;
                    }
                    None if full => self.capped = true,
                    None => {
                        let mut c = vec![0.0; self.grid.len()];
                        c[interval] = 1.0;
                        self.series.insert(
                            key,
                            SeriesAcc {
                                cells: Cells::Count(c),
                                exemplars: Vec::new(),
                            },
                        );
                    }
                }
            }
        }
        self.spans += 1;
    }

    /// `compare()`'s series: for each field and side, the `top` values
    /// with the most spans over the range, and the field's total.
    pub(super) fn finish_compare(self, top: usize) -> Vec<Series> {
        let grid = self.grid;
        let mut groups: HashMap<(String, String), Vec<Counted>> = HashMap::new();
        for (key, acc) in self.series {
            let (Some(KeyPart::Str(side)), Some(KeyPart::Str(name)), Some(value)) =
                (key.first(), key.get(1), key.get(2))
            else {
                continue;
            };
            let Cells::Count(counts) = acc.cells else {
                continue;
            };
            groups
                .entry((side.clone(), name.clone()))
                .or_default()
                .push((value.value(), counts));
        }
        let mut out = Vec::new();
        for ((side, name), mut values) in groups {
            let is_total = side == BASELINE_TOTAL || side == SELECTION_TOTAL;
            if !is_total {
                let sum = |c: &[f64]| c.iter().sum::<f64>();
                values.sort_by(|a, b| {
                    sum(&b.1).total_cmp(&sum(&a.1)).then_with(|| {
                        let text = |v: &Option<LabelValue>| v.as_ref().map(LabelValue::sort_text);
                        text(&a.0).cmp(&text(&b.0))
                    })
                });
                values.truncate(top);
            }
            for (value, counts) in values {
                let value = value.unwrap_or_else(|| LabelValue::Str("nil".into()));
                out.push(Series {
                    labels: vec![
                        ("__meta_type".into(), LabelValue::Str(side.clone())),
                        (name.clone(), value),
                    ],
                    samples: counts
                        .into_iter()
                        .enumerate()
                        .map(|(i, v)| (grid.timestamp_ms(i), v))
                        .collect(),
                    exemplars: Vec::new(),
                });
            }
        }
        sort_series(&mut out);
        out
    }
}
