//! The k-way merge of sorted span files, one trace at a time.
//!
//! A binary heap holds the next span of each input, ordered by
//! (trace ID, input index): a strict total order, so equal trace IDs never
//! compare "less" both ways and a run of one trace costs one comparison per
//! span. All spans of the smallest trace ID are drained from every input,
//! duplicates of a span ID are dropped (the copy from the earliest input is
//! kept; retried exports carry identical bytes), and the rest are ordered by
//! (start time, span ID) so a trace reads back in a stable order.

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
        };
        for i in 0..n {
            it.advance(i)?;
        }
        Ok(it)
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
    pub fn next_trace(&mut self) -> Result<Option<Vec<Span>>> {
        let Some(&Reverse((trace_id, _))) = self.heads.peek() else {
            return Ok(None);
        };
        let mut spans = Vec::new();
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
        // Inputs were drained in ascending order, so a stable sort by span ID
        // puts the earliest input's copy first among equals. (A hash set per
        // trace cost more than two sorts of a few dozen spans.)
        let before = spans.len();
        spans.sort_by_key(|s| s.span_id);
        spans.dedup_by_key(|s| s.span_id);
        self.duplicates += (before - spans.len()) as u64;
        spans.sort_unstable_by_key(|s| (s.start_unix_nano, s.span_id));
        Ok(Some(spans))
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

    #[test]
    fn a_trace_from_several_inputs_keeps_the_first_inputs_copy_ordered_by_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let g = group("svc");
        let with = |mut s: Span, payload: &'static str| {
            s.payload = Bytes::from_static(payload.as_bytes());
            s
        };
        let a = table(
            dir.path(),
            "a.sst",
            &[
                with(span(&g, 5, 1, 30), "first"),
                with(span(&g, 5, 2, 10), "two"),
                with(span(&g, 5, 1, 30), "first again"),
            ],
        );
        let b = table(
            dir.path(),
            "b.sst",
            &[
                with(span(&g, 5, 3, 20), "three"),
                with(span(&g, 5, 1, 30), "second"),
                with(span(&g, 9, 1, 5), "other trace"),
            ],
        );
        let mut merge = MergeIterator::new(vec![a.iter(), b.iter()]).expect("merge");

        let trace = merge.next_trace().expect("reads").expect("a trace");
        let got: Vec<(u64, &[u8])> = trace
            .iter()
            .map(|s| (s.start_unix_nano, &s.payload[..]))
            .collect();
        let want: Vec<(u64, &[u8])> = vec![(10, b"two"), (20, b"three"), (30, b"first")];
        assert_eq!(got, want);
        assert_eq!(merge.duplicates, 2);
        assert_eq!(merge.sources(), &[0, 1]);

        let trace = merge.next_trace().expect("reads").expect("a second trace");
        assert_eq!(trace.len(), 1);
        assert_eq!(&trace[0].payload[..], b"other trace");
        assert_eq!(merge.sources(), &[1]);
        assert!(merge.next_trace().expect("reads").is_none());
    }
}
