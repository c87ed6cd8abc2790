//! Every trace of a time window, read in one pass ([`Engine::scan_traces`]):
//! for a metrics query, which counts every span of its window and would
//! otherwise look each trace up on its own, reading and decompressing the
//! same blocks once per trace.

use crate::{
    compaction::MergeIterator,
    error::Result,
    span::{drop_repeats, Span, TraceId},
    version::TimeRange,
};

use super::Engine;

/// What a scan read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Files read whole, and the traces and spans handed on.
    pub files: usize,
    pub traces: u64,
    pub spans: u64,
}

impl Engine {
    /// Calls `f` with each trace that has spans in a buffer or in a file
    /// whose time range overlaps `range`, in trace-ID order, with its spans
    /// from those (exact repeats dropped, spans past retention left out, in
    /// [`Span::read_order`]); stops when `f` returns false. A file outside
    /// the range is not read, so a trace's spans stored only there are not
    /// handed on: a caller that needs whole traces looks them up instead.
    /// Each block of each file is read once.
    pub fn scan_traces(
        &self,
        range: TimeRange,
        mut f: impl FnMut(TraceId, &[Span]) -> bool,
    ) -> Result<ScanStats> {
        // The buffers before the snapshot, as a search takes them: a span
        // moving from a buffer to a file meanwhile is seen at least once,
        // and its second copy is an exact repeat.
        let (chunks, tails) = self.inner.memtable.chunks();
        let snapshot = self.snapshot();
        let mut buffered: Vec<Span> = tails;
        for chunk in chunks
            .iter()
            .chain(snapshot.sealed.iter().flat_map(|s| s.chunks.iter()))
        {
            buffered.extend(chunk.iter().cloned());
        }
        buffered.sort_by_key(|s| s.trace_id);
        let files = self.files_in(&snapshot, range);
        let mut stats = ScanStats {
            files: files.len(),
            ..ScanStats::default()
        };
        let merged = files.iter().all(|f| f.level > 0);
        let mut merge = MergeIterator::new(files.iter().map(|f| f.table().iter()).collect())?;
        if merged {
            merge = merge.merged_inputs();
        }
        let expire_before = self.inner.retention.expire_before();
        let mut buffered = buffered.into_iter().peekable();
        let mut spans: Vec<Span> = Vec::new();
        let mut from_file = merge.next_trace()?.map(std::mem::take);
        loop {
            let file_id = from_file
                .as_ref()
                .and_then(|s| s.first())
                .map(|s| s.trace_id);
            let buffer_id = buffered.peek().map(|s| s.trace_id);
            let id = match (file_id, buffer_id) {
                (None, None) => break,
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
            };
            spans.clear();
            let mut both = false;
            if file_id == Some(id) {
                spans.append(from_file.as_mut().expect("peeked"));
                from_file = merge.next_trace()?.map(std::mem::take);
            }
            while let Some(s) = buffered.next_if(|s| s.trace_id == id) {
                both |= file_id == Some(id);
                spans.push(s);
            }
            spans.retain(|s| s.end_unix_nano >= expire_before);
            if both || file_id != Some(id) {
                drop_repeats(&mut spans);
            }
            if spans.is_empty() {
                continue;
            }
            stats.traces += 1;
            stats.spans += spans.len() as u64;
            if !f(id, &spans) {
                break;
            }
        }
        Ok(stats)
    }
}
