//! The second stage of a metrics query (`| topk(n)`, `| bottomk(n)`,
//! `> value`), applied to the finished series, and Tempo's order of series.

use std::cmp::Ordering;

use super::{LabelValue, Series};
use crate::ast::{CmpOp, SecondStage};

/// `topk`, `bottomk` or a comparison, on the final series.
pub(super) fn second_stage(mut series: Vec<Series>, stage: &SecondStage) -> Vec<Series> {
    match *stage {
        SecondStage::Filter(op, v) => {
            let holds = |x: f64| match op {
                CmpOp::Eq => x == v,
                CmpOp::Ne => x != v,
                CmpOp::Gt => x > v,
                CmpOp::Ge => x >= v,
                CmpOp::Lt => x < v,
                CmpOp::Le => x <= v,
                CmpOp::Match | CmpOp::NotMatch => false,
            };
            for s in &mut series {
                s.samples.retain(|&(_, x)| holds(x));
                s.exemplars.retain(|e| holds(e.value));
            }
            series.retain(|s| !s.samples.is_empty());
            series
        }
        SecondStage::TopK(k) | SecondStage::BottomK(k) => {
            if series.len() <= k {
                return series;
            }
            let top = matches!(stage, SecondStage::TopK(_));
            sort_series(&mut series);
            let mut times: Vec<u64> = series
                .iter()
                .flat_map(|s| s.samples.iter().map(|&(t, _)| t))
                .collect();
            times.sort_unstable();
            times.dedup();
            let mut keep: Vec<Vec<u64>> = vec![Vec::new(); series.len()];
            for t in times {
                let mut at: Vec<(usize, f64)> = series
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| {
                        s.samples
                            .binary_search_by_key(&t, |&(x, _)| x)
                            .ok()
                            .map(|j| (i, s.samples[j].1))
                    })
                    .collect();
                // Largest (smallest) first. Of equal values, topk keeps
                // the series whose labels come first in Tempo's tie order,
                // bottomk those that come last (Tempo's heaps do so).
                at.sort_by(|a, b| {
                    let (la, lb) = (&series[a.0].labels, &series[b.0].labels);
                    if top {
                        b.1.total_cmp(&a.1).then_with(|| tie_order(la, lb))
                    } else {
                        a.1.total_cmp(&b.1).then_with(|| tie_order(lb, la))
                    }
                });
                for &(i, _) in at.iter().take(k) {
                    keep[i].push(t);
                }
            }
            for (s, kept) in series.iter_mut().zip(keep) {
                s.samples.retain(|(t, _)| kept.binary_search(t).is_ok());
            }
            series.retain(|s| !s.samples.is_empty());
            series
        }
    }
}

/// Tempo's order of series: fewer labels first, then label by label, by
/// key and by the value's protobuf text.
pub(super) fn sort_series(series: &mut [Series]) {
    series.sort_by(|a, b| {
        a.labels.len().cmp(&b.labels.len()).then_with(|| {
            for (x, y) in a.labels.iter().zip(&b.labels) {
                let c =
                    x.0.cmp(&y.0)
                        .then_with(|| x.1.sort_text().cmp(&y.1.sort_text()));
                if c.is_ne() {
                    return c;
                }
            }
            std::cmp::Ordering::Equal
        })
    });
}

/// Tempo's order of series with equal values in `topk` and `bottomk`,
/// label by label: a string value's text first (other values have none),
/// then the label's name, then the value's type (int, float, string, bool)
/// and its bits.
fn tie_order(a: &[(String, LabelValue)], b: &[(String, LabelValue)]) -> Ordering {
    fn parts(v: &LabelValue) -> (&str, u8, u64) {
        match v {
            LabelValue::Str(s) => (s, 5, 0),
            LabelValue::Int(i) => ("", 3, *i as u64),
            LabelValue::Float(f) => ("", 4, f.to_bits()),
            LabelValue::Bool(b) => ("", 6, u64::from(*b)),
        }
    }
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        let (sa, ta, ca) = parts(va);
        let (sb, tb, cb) = parts(vb);
        let c = sa
            .cmp(sb)
            .then_with(|| na.cmp(nb))
            .then(ta.cmp(&tb))
            .then(ca.cmp(&cb));
        if c.is_ne() {
            return c;
        }
    }
    Ordering::Equal
}
