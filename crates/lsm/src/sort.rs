//! The sort every flush goes through: spans by 128-bit trace ID, with a strict less.
//!
//! A production trace store once sorted with a comparator that answered "less"
//! for equal keys (`a <= b`). With many spans of one trace in a buffer that turns
//! a sort into its worst case, and it ran while a table lock was held: ingest
//! stalled. Here the flush sorts keys of (trace ID, position in the buffer):
//! no two are equal, so the order is strict and total, and a buffer of one
//! trace is one ascending run (n - 1 comparisons). It runs on the flush thread
//! over a buffer that no writer or reader can touch any more.
//! [`sort_by_trace_id`], in place, compares trace IDs with `Ord` (which says
//! `Equal` for equal IDs) in the standard library's stable sort.
//!
//! Ties keep arrival order: spans of one trace stay in the order they were
//! accepted, which is what a reader replaying a trace expects and costs nothing.

use std::cmp::Ordering;

use crate::span::Span;

/// `spans` in trace-ID order, spans of one trace in the order given: what a
/// flush writes. Sorts a key per span, (trace ID, position), and moves no
/// span: a buffer's spans copied out and sorted in place took their own size
/// again (80 bytes a span) plus half of it for the stable sort's scratch,
/// outside the memory budget. Keys are unique, so the order is total and
/// strict; a buffer of one trace is a single ascending run (n - 1
/// comparisons).
pub fn sorted_by_trace_id<'a>(spans: impl IntoIterator<Item = &'a Span>) -> Vec<&'a Span> {
    order_with(spans, |a, b| a.cmp(b))
}

/// A span's sort key: its trace ID's high and low halves, then its position.
type Key = (u64, u64, usize);

/// The routine behind [`sorted_by_trace_id`], with the comparison of keys
/// passed in so tests can count the comparisons it makes.
fn order_with<'a>(
    spans: impl IntoIterator<Item = &'a Span>,
    compare: impl FnMut(&Key, &Key) -> Ordering,
) -> Vec<&'a Span> {
    let spans: Vec<&Span> = spans.into_iter().collect();
    let mut keys: Vec<Key> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let id = u128::from_be_bytes(s.trace_id.0);
            ((id >> 64) as u64, id as u64, i)
        })
        .collect();
    keys.sort_unstable_by(compare);
    keys.into_iter().map(|(_, _, i)| spans[i]).collect()
}

/// Sorts spans by trace ID in place; spans of one trace keep their arrival order.
pub fn sort_by_trace_id(spans: &mut [Span]) {
    sort_with(spans, |a, b| a.trace_id.cmp(&b.trace_id));
}

/// The sort routine behind [`sort_by_trace_id`], with the comparison passed in so
/// tests can count the comparisons the production routine makes.
pub fn sort_with(spans: &mut [Span], mut compare: impl FnMut(&Span, &Span) -> Ordering) {
    spans.sort_by(|a, b| compare(a, b));
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand::{rngs::SmallRng, Rng, SeedableRng};

    use super::*;
    use crate::test_util::{group, span};

    fn counted_sort(spans: &mut [Span]) -> u64 {
        let mut comparisons = 0u64;
        sort_with(spans, |a, b| {
            comparisons += 1;
            a.trace_id.cmp(&b.trace_id)
        });
        comparisons
    }

    fn counted_order(spans: &[Span]) -> (Vec<&Span>, u64) {
        let mut comparisons = 0u64;
        let order = order_with(spans, |a, b| {
            comparisons += 1;
            a.cmp(b)
        });
        (order, comparisons)
    }

    #[test]
    fn a_million_identical_trace_ids_take_linear_comparisons() {
        let g = group("svc");
        let mut spans: Vec<Span> = (0..1_000_000u64).map(|i| span(&g, 7, i, i)).collect();
        // A strict comparator sees one ascending run: n - 1 comparisons. Allow 2n.
        let (order, comparisons) = counted_order(&spans);
        assert!(
            comparisons <= 2_000_000,
            "{comparisons} comparisons for 1M equal keys (flush order)"
        );
        // Arrival order is kept among equal IDs.
        assert!(order.windows(2).all(|w| w[0].span_id < w[1].span_id));
        let comparisons = counted_sort(&mut spans);
        assert!(
            comparisons <= 2_000_000,
            "{comparisons} comparisons for 1M equal keys (in place)"
        );
        assert!(spans.windows(2).all(|w| w[0].span_id < w[1].span_id));
    }

    /// Checks `sorted_by_trace_id` and `sort_by_trace_id` against a reference:
    /// a stable sort on (trace ID, arrival index) computed independently.
    fn check_against_reference(mut spans: Vec<Span>) {
        let mut reference: Vec<(u128, usize)> = spans
            .iter()
            .enumerate()
            .map(|(i, s)| (u128::from_be_bytes(s.trace_id.0), i))
            .collect();
        reference.sort_unstable();
        let arrival: Vec<Span> = spans.clone();
        let order = sorted_by_trace_id(&arrival);
        assert_eq!(order.len(), reference.len());
        for (got, (_, idx)) in order.iter().zip(&reference) {
            assert!(std::ptr::eq(*got, &arrival[*idx]));
        }
        sort_by_trace_id(&mut spans);
        assert_eq!(spans.len(), reference.len());
        for (got, (_, idx)) in spans.iter().zip(&reference) {
            assert_eq!(got.trace_id, arrival[*idx].trace_id);
            assert_eq!(got.span_id, arrival[*idx].span_id);
        }
    }

    #[test]
    fn random_ids_sort_like_the_reference() {
        let g = group("svc");
        let mut rng = SmallRng::seed_from_u64(42);
        let spans = (0..50_000u64)
            .map(|i| span(&g, rng.random(), i, 0))
            .collect();
        check_against_reference(spans);
    }

    #[test]
    fn realistic_traces_sort_like_the_reference() {
        // 5-50 spans per trace, traces interleaved as concurrent requests deliver them.
        let groups: Vec<Arc<_>> = (0..4).map(|i| group(&format!("svc-{i}"))).collect();
        let mut rng = SmallRng::seed_from_u64(7);
        let mut pending: Vec<(u128, u32)> = Vec::new();
        let mut spans = Vec::new();
        let mut next_span = 0u64;
        while spans.len() < 100_000 {
            if pending.len() < 64 {
                pending.push((rng.random(), rng.random_range(5..=50)));
            }
            let pick = rng.random_range(0..pending.len());
            let (trace, left) = &mut pending[pick];
            let g = &groups[rng.random_range(0..groups.len())];
            spans.push(span(g, *trace, next_span, rng.random()));
            next_span += 1;
            *left -= 1;
            if *left == 0 {
                pending.swap_remove(pick);
            }
        }
        check_against_reference(spans);
    }
}
