//! The k-way merge of sorted span files, one trace at a time.
//!
//! A binary heap holds the next span of each input, ordered by
//! (trace ID, input index): a strict total order, so equal trace IDs never
//! compare "less" both ways and a run of one trace costs one comparison per
//! span. All spans of the smallest trace ID are drained from every input,
//! duplicates of a span ID are dropped (the copy from the earliest input is
//! kept; retried exports carry identical bytes), and the rest are ordered by
//! (start time, span ID) so a trace reads back in a stable order.

use std::{cmp::Reverse, collections::BinaryHeap, collections::HashSet};

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
        let before = spans.len();
        let mut seen = HashSet::with_capacity(spans.len());
        spans.retain(|s| seen.insert(s.span_id));
        self.duplicates += (before - spans.len()) as u64;
        spans.sort_by_key(|s| (s.start_unix_nano, s.span_id));
        Ok(Some(spans))
    }

    /// The inputs that held spans of the trace [`MergeIterator::next_trace`]
    /// returned last, ascending.
    pub fn sources(&self) -> &[usize] {
        &self.sources
    }
}
