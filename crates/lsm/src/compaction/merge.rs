//! The k-way merge of sorted span files, one trace at a time.
//!
//! A binary heap holds the next span of each input, ordered by
//! (trace ID, input index): a strict total order, so equal trace IDs never
//! compare "less" both ways and a run of one trace costs one comparison per
//! span. All spans of the smallest trace ID are drained from every input,
//! exact repeats are dropped (retried exports carry identical bytes; spans
//! that merely share a span ID are all kept, see [`crate::span::drop_repeats`]),
//! and the rest are ordered by (start time, span ID, bytes) so a trace reads
//! back in a stable order.
//!
//! Inputs a merge wrote (every file of level 1 and deeper) already hold each
//! trace that way. Told so ([`MergeIterator::merged_inputs`]), the iterator
//! passes a trace that one input holds whole, and in strict (start time,
//! span ID) order, on without its two sorts: at level 1 and deeper nearly
//! every trace comes from one input. The order is checked, not assumed, so a
//! file written otherwise is merged as before.

use std::{cmp::Reverse, collections::BinaryHeap};

use crate::{
    error::Result,
    span::{Span, TraceId},
    table::SsTableIterator,
};

/// Merges sorted inputs into traces; see the module docs.
pub struct MergeIterator<'a> {
    inputs: Vec<SsTableIterator<'a>>,
    /// Next span of each input, keyed by (trace ID, input index).
    heads: BinaryHeap<Reverse<(TraceId, usize)>>,
    peeked: Vec<Option<Span>>,
    /// Spans dropped as duplicates so far.
    pub duplicates: u64,
    /// Inputs that held spans of the last trace returned, ascending.
    sources: Vec<usize>,
    /// The spans of the trace being returned, reused from trace to trace.
    trace: Vec<Span>,
    /// Whether every input was written by a merge; see the module docs.
    merged_inputs: bool,
    /// The spans dropped as duplicates since [`MergeIterator::take_repeats`],
    /// when kept ([`MergeIterator::keep_repeats`]).
    repeats: Option<Vec<Span>>,
}

impl<'a> MergeIterator<'a> {
    pub fn new(inputs: Vec<SsTableIterator<'a>>) -> Result<Self> {
        let n = inputs.len();
        let mut it = MergeIterator {
            inputs,
            heads: BinaryHeap::with_capacity(n),
            peeked: (0..n).map(|_| None).collect(),
            duplicates: 0,
            sources: Vec::new(),
            trace: Vec::new(),
            merged_inputs: false,
            repeats: None,
        };
        for i in 0..n {
            it.advance(i)?;
        }
        Ok(it)
    }

    /// Declares that every input was written by a merge, so each holds a
    /// trace deduplicated and in (start time, span ID) order; see the
    /// module docs. A trace found out of order is still sorted.
    pub fn merged_inputs(mut self) -> Self {
        self.merged_inputs = true;
        self
    }

    /// Keeps the spans dropped as duplicates for
    /// [`MergeIterator::take_repeats`].
    pub fn keep_repeats(mut self) -> Self {
        self.repeats = Some(Vec::new());
        self
    }

    /// The spans dropped as duplicates since the last call, if kept.
    pub fn take_repeats(&mut self) -> Vec<Span> {
        self.repeats
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn advance(&mut self, i: usize) -> Result<()> {
        match self.inputs[i].next().transpose()? {
            Some(span) => {
                self.heads.push(Reverse((span.trace_id, i)));
                self.peeked[i] = Some(span);
            }
            None => self.peeked[i] = None,
        }
        Ok(())
    }

    /// The next trace's spans, deduplicated; `None` when every input is done.
    /// The vector is the iterator's own, reused for the next trace: take the
    /// spans out of it (`drain`) rather than clone them.
    pub fn next_trace(&mut self) -> Result<Option<&mut Vec<Span>>> {
        let Some(&Reverse((trace_id, _))) = self.heads.peek() else {
            return Ok(None);
        };
        let spans = &mut self.trace;
        spans.clear();
        self.sources.clear();
        while let Some(&Reverse((id, i))) = self.heads.peek() {
            if id != trace_id {
                break;
            }
            self.heads.pop();
            self.sources.push(i);
            // Drain this input's run of the trace before touching the heap again.
            loop {
                match self.peeked[i].take() {
                    Some(span) if span.trace_id == trace_id => {
                        spans.push(span);
                        match self.inputs[i].next().transpose()? {
                            Some(next) => self.peeked[i] = Some(next),
                            None => break,
                        }
                    }
                    Some(other) => {
                        self.heads.push(Reverse((other.trace_id, i)));
                        self.peeked[i] = Some(other);
                        break;
                    }
                    None => break,
                }
            }
        }
        // A merge wrote this input, so the trace it holds whole has no
        // exact repeats; strictly ascending by (start, span ID), it is in
        // final order (two spans sharing both would be equal, not
        // ascending, and take the sort below).
        let ordered = self.merged_inputs
            && self.sources.len() == 1
            && spans.windows(2).all(|w| {
                (w[0].start_unix_nano, w[0].span_id) < (w[1].start_unix_nano, w[1].span_id)
            });
        if !ordered {
            // Exact repeats (a retried export) collapse; spans that only
            // share a span ID are all kept.
            let dropped = match &mut self.repeats {
                Some(kept) => crate::span::drop_repeats_into(spans, kept),
                None => crate::span::drop_repeats(spans),
            };
            self.duplicates += dropped as u64;
        }
        Ok(Some(spans))
    }

    /// Whether input `i` has no spans left.
    pub fn is_done(&self, i: usize) -> bool {
        self.peeked[i].is_none()
    }

    /// The inputs that held spans of the trace [`MergeIterator::next_trace`]
    /// returned last, ascending.
    pub fn sources(&self) -> &[usize] {
        &self.sources
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::{
        table::{SsTable, SsTableBuilder, TableOptions},
        test_util::{group, span},
    };

    fn table(dir: &std::path::Path, name: &str, spans: &[Span]) -> SsTable {
        let path = dir.join(name);
        let mut b = SsTableBuilder::create(&path, TableOptions::default()).expect("create");
        for s in spans {
            b.add(s).expect("sorted");
        }
        b.finish().expect("finish");
        SsTable::open(&path).expect("open")
    }

    /// `s` with `payload` in place of its own, so a test can tell copies apart.
    fn with(mut s: Span, payload: &'static str) -> Span {
        s.payload = Bytes::from_static(payload.as_bytes());
        s
    }

    #[test]
    fn a_trace_from_several_inputs_keeps_one_copy_of_each_span_ordered_by_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let g = group("svc");
        let a = table(
            dir.path(),
            "a.sst",
            &[
                with(span(&g, 5, 1, 30), "first"),
                with(span(&g, 5, 2, 10), "two"),
                with(span(&g, 5, 1, 30), "first"),
            ],
        );
        let b = table(
            dir.path(),
            "b.sst",
            &[
                with(span(&g, 5, 3, 20), "three"),
                with(span(&g, 5, 1, 30), "first"),
                // The same span ID and start, other bytes: another span.
                with(span(&g, 5, 1, 30), "first, changed"),
                with(span(&g, 9, 1, 5), "other trace"),
            ],
        );
        let mut merge = MergeIterator::new(vec![a.iter(), b.iter()]).expect("merge");

        let trace = merge.next_trace().expect("reads").expect("a trace");
        let got: Vec<(u64, &[u8])> = trace
            .iter()
            .map(|s| (s.start_unix_nano, &s.payload[..]))
            .collect();
        let want: Vec<(u64, &[u8])> = vec![
            (10, b"two"),
            (20, b"three"),
            (30, b"first"),
            (30, b"first, changed"),
        ];
        assert_eq!(got, want);
        assert_eq!(merge.duplicates, 2);
        assert_eq!(merge.sources(), &[0, 1]);

        let trace = merge.next_trace().expect("reads").expect("a second trace");
        assert_eq!(trace.len(), 1);
        assert_eq!(&trace[0].payload[..], b"other trace");
        assert_eq!(merge.sources(), &[1]);
        assert!(merge.next_trace().expect("reads").is_none());
    }

    /// Every trace of `merge`, as (trace, start, span ID, payload).
    fn drain(mut merge: MergeIterator<'_>) -> (Vec<(u128, u64, u64, String)>, u64) {
        let mut got = Vec::new();
        while let Some(trace) = merge.next_trace().expect("reads") {
            for s in trace.drain(..) {
                got.push((
                    u128::from_be_bytes(s.trace_id.0),
                    s.start_unix_nano,
                    u64::from_be_bytes(s.span_id.0),
                    String::from_utf8(s.payload.to_vec()).expect("utf-8"),
                ));
            }
        }
        (got, merge.duplicates)
    }

    #[test]
    fn merged_inputs_skip_only_sorts_that_would_change_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let g = group("svc");
        let a = table(
            dir.path(),
            "a.sst",
            &[
                // In order: passed on as is.
                with(span(&g, 1, 1, 10), "1/1"),
                with(span(&g, 1, 2, 20), "1/2"),
                // Out of order in one input: sorted all the same.
                with(span(&g, 2, 1, 30), "2/1"),
                with(span(&g, 2, 2, 10), "2/2"),
                // Two identical copies in one input: not ascending, deduplicated.
                with(span(&g, 3, 1, 5), "3/1"),
                with(span(&g, 3, 1, 5), "3/1"),
                // In order in each input, but in two of them.
                with(span(&g, 4, 1, 10), "4/1"),
                with(span(&g, 4, 3, 30), "4/3"),
            ],
        );
        let b = table(
            dir.path(),
            "b.sst",
            &[
                with(span(&g, 4, 1, 10), "4/1"),
                with(span(&g, 4, 2, 20), "4/2"),
                // Equal starts, span IDs descending.
                with(span(&g, 5, 9, 7), "5/9"),
                with(span(&g, 5, 3, 7), "5/3"),
            ],
        );
        let want: Vec<(u128, u64, u64, String)> = [
            (1, 10, 1, "1/1"),
            (1, 20, 2, "1/2"),
            (2, 10, 2, "2/2"),
            (2, 30, 1, "2/1"),
            (3, 5, 1, "3/1"),
            (4, 10, 1, "4/1"),
            (4, 20, 2, "4/2"),
            (4, 30, 3, "4/3"),
            (5, 7, 3, "5/3"),
            (5, 7, 9, "5/9"),
        ]
        .into_iter()
        .map(|(t, start, id, p)| (t, start, id, p.to_string()))
        .collect();

        let plain = drain(MergeIterator::new(vec![a.iter(), b.iter()]).expect("merge"));
        let merged = drain(
            MergeIterator::new(vec![a.iter(), b.iter()])
                .expect("merge")
                .merged_inputs(),
        );
        assert_eq!(plain, (want.clone(), 2));
        assert_eq!(merged, (want, 2));
    }
}
