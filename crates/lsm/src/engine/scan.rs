//! Every trace of a time window, read in one pass ([`Engine::scan_traces`]):
//! for a metrics query, which counts every span of its window and would
//! otherwise look each trace up on its own, reading and decompressing the
//! same blocks once per trace.
//!
//! The buffers are copied first ([`Engine::scan_buffers`]): handles to their
//! spans, the payloads shared, sorted by trace. The copy is the scan's one
//! allocation that grows with the data, so the caller admits its
//! [`ScanBuffers::bytes`] to its memory budget before it scans.
//!
//! A damaged file found during the scan is quarantined, as a lookup would,
//! and the scan goes on over the other files; the traces it could have held
//! are reported ([`ScanStats::skipped`]), so the answer is marked partial.

use std::sync::Arc;

use crate::{
    compaction::MergeIterator,
    error::Result,
    span::{drop_repeats, Span, TraceId, TraceIdRange},
    table::KeepSpan,
    version::{SuperVersion, TableFile, TimeRange},
};

use super::{Engine, SkippedFile};

/// What a scan read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Files read whole, and the traces and spans handed on.
    pub files: usize,
    pub traces: u64,
    pub spans: u64,
    /// Files of the window that could not be read (damaged, now in
    /// quarantine, or there already): their spans are missing.
    pub skipped: Vec<SkippedFile>,
}

/// The spans of the buffers at one moment, and the snapshot of the files
/// taken after them: a span moving from a buffer to a file meanwhile is seen
/// at least once (twice is an exact repeat, dropped).
pub struct ScanBuffers {
    spans: Vec<Span>,
    snapshot: Arc<SuperVersion>,
}

impl ScanBuffers {
    /// Bytes the copy holds beyond the buffers themselves.
    pub fn bytes(&self) -> usize {
        self.spans.capacity() * std::mem::size_of::<Span>()
    }

    /// The copy cut by trace ID: for each of `ranges` (in order, as
    /// [`TraceIdRange::split`] makes them), its traces' spans, for a scan of
    /// that range.
    pub fn split(self, ranges: &[TraceIdRange]) -> Vec<ScanBuffers> {
        let mut rest = self.spans.as_slice();
        ranges
            .iter()
            .map(|ids| {
                let at = ids
                    .end
                    .map_or(rest.len(), |end| rest.partition_point(|s| s.trace_id < end));
                let (mine, after) = rest.split_at(at);
                rest = after;
                ScanBuffers {
                    spans: mine
                        .iter()
                        .filter(|s| ids.contains(s.trace_id))
                        .cloned()
                        .collect(),
                    snapshot: self.snapshot.clone(),
                }
            })
            .collect()
    }
}

/// The files' traces in trace-ID order, going on without a file found
/// damaged.
struct FileTraces<'a> {
    engine: &'a Engine,
    ids: TraceIdRange,
    wanted: Option<Arc<[TraceId]>>,
    keep: Option<Arc<KeepSpan>>,
    files: Vec<&'a Arc<TableFile>>,
    merge: MergeIterator<'a>,
    /// The last trace handed on, and after a file was dropped, the trace
    /// the rebuilt merge must pass before it hands on again.
    last: Option<TraceId>,
    resume_after: Option<TraceId>,
    skipped: Vec<SkippedFile>,
}

impl<'a> FileTraces<'a> {
    fn new(
        engine: &'a Engine,
        ids: TraceIdRange,
        wanted: Option<Arc<[TraceId]>>,
        keep: Option<Arc<KeepSpan>>,
        mut files: Vec<&'a Arc<TableFile>>,
    ) -> Result<Self> {
        let mut skipped = Vec::new();
        let merge = loop {
            match Self::merge_of(&files, ids, &wanted, &keep) {
                Ok(merge) => break merge,
                Err(e) => skipped.push(Self::drop_damaged(engine, &mut files, e)?),
            }
        };
        Ok(FileTraces {
            engine,
            ids,
            wanted,
            keep,
            files,
            merge,
            last: None,
            resume_after: None,
            skipped,
        })
    }

    fn merge_of(
        files: &[&'a Arc<TableFile>],
        ids: TraceIdRange,
        wanted: &Option<Arc<[TraceId]>>,
        keep: &Option<Arc<KeepSpan>>,
    ) -> Result<MergeIterator<'a>> {
        let merge = MergeIterator::new(
            files
                .iter()
                .map(|f| f.table().iter_where(ids, wanted.clone(), keep.clone()))
                .collect(),
        )?;
        // Files of the levels below 0 were merged once already.
        Ok(if files.iter().all(|f| f.level > 0) {
            merge.merged_inputs()
        } else {
            merge
        })
    }

    /// Takes the file `err` names as damaged out of `files` and quarantines
    /// it; `err` itself when it names no file of the scan or is not damage.
    fn drop_damaged(
        engine: &Engine,
        files: &mut Vec<&'a Arc<TableFile>>,
        err: crate::error::Error,
    ) -> Result<SkippedFile> {
        let damaged = err
            .location()
            .filter(|_| err.is_corruption())
            .and_then(|(path, _)| files.iter().position(|f| f.path() == path));
        let Some(at) = damaged else {
            return Err(err);
        };
        let file = files.remove(at);
        tracing::error!(
            file = %file.path().display(),
            error = %err,
            "a sorted file failed while a scan read it; its spans are left out"
        );
        engine.inner.quarantine(file.id, &err);
        Ok(SkippedFile {
            id: file.id,
            path: file.path().to_path_buf(),
            reason: err.to_string(),
        })
    }

    fn next(&mut self) -> Result<Option<Vec<Span>>> {
        loop {
            let err = match self.merge.next_trace() {
                Ok(None) => return Ok(None),
                Ok(Some(spans)) => {
                    let spans = std::mem::take(spans);
                    let id = spans.first().map(|s| s.trace_id);
                    if self.resume_after.is_some() && id <= self.resume_after {
                        continue;
                    }
                    self.resume_after = None;
                    self.last = id;
                    return Ok(Some(spans));
                }
                Err(e) => e,
            };
            let skipped = Self::drop_damaged(self.engine, &mut self.files, err)?;
            self.skipped.push(skipped);
            // The traces handed on so far were whole: each came out of the
            // merge before the damaged block was read.
            self.merge = loop {
                match Self::merge_of(&self.files, self.ids, &self.wanted, &self.keep) {
                    Ok(merge) => break merge,
                    Err(e) => {
                        let skipped = Self::drop_damaged(self.engine, &mut self.files, e)?;
                        self.skipped.push(skipped);
                    }
                }
            };
            self.resume_after = self.last;
        }
    }
}

impl Engine {
    /// Files already in quarantine that may have held spans of `range`.
    pub fn quarantined_in(&self, range: TimeRange) -> Vec<SkippedFile> {
        self.inner
            .quarantined
            .lock()
            .iter()
            .filter(|q| {
                q.filter.as_ref().is_none_or(|t| {
                    let m = t.meta();
                    range.overlaps(m.min_time_unix_nano, m.max_time_unix_nano)
                })
            })
            .map(|q| SkippedFile {
                id: q.id,
                path: q.path.clone(),
                reason: q.reason.clone(),
            })
            .collect()
    }

    /// How many spans the files whose time ranges overlap `range` hold: what
    /// [`Engine::scan_traces`] over `range` reads, buffers aside.
    pub fn file_spans_in(&self, range: TimeRange) -> u64 {
        let snapshot = self.snapshot();
        self.files_in(&snapshot, range)
            .iter()
            .map(|f| f.table().meta().span_count)
            .sum()
    }

    /// The buffers' spans that overlap `range`, for [`Engine::scan_traces`]
    /// over the same range: as a file is read when its time range overlaps,
    /// a buffered span is handed on when its own does.
    pub fn scan_buffers(&self, range: TimeRange) -> ScanBuffers {
        self.scan_buffers_of(range, None)
    }

    /// [`Engine::scan_buffers`] of only the traces `wanted` lists (sorted,
    /// ascending), if given: the other spans are neither copied nor sorted,
    /// for [`Engine::scan_wanted`].
    pub fn scan_buffers_of(&self, range: TimeRange, wanted: Option<&[TraceId]>) -> ScanBuffers {
        let (chunks, tails) = self.inner.write.memtable.chunks();
        let snapshot = self.snapshot();
        let within = |s: &Span| {
            range.overlaps(s.start_unix_nano, s.end_unix_nano)
                && wanted.is_none_or(|w| w.binary_search(&s.trace_id).is_ok())
        };
        let mut spans: Vec<Span> = tails;
        spans.retain(within);
        for chunk in chunks
            .iter()
            .chain(snapshot.sealed.iter().flat_map(|s| s.chunks.iter()))
        {
            spans.extend(chunk.iter().filter(|s| within(s)).cloned());
        }
        spans.sort_by_key(|s| s.trace_id);
        // What the window left out of the buffers' tails is not held.
        spans.shrink_to_fit();
        ScanBuffers { spans, snapshot }
    }

    /// Calls `f` with each trace that has spans in `buffers` (taken for
    /// `range`) or in a file whose time range overlaps `range`, in trace-ID order, with its spans
    /// from those (exact repeats dropped, spans past retention left out, in
    /// [`Span::read_order`]); stops when `f` returns false. A file outside
    /// the range is not read, so a trace's spans stored only there are not
    /// handed on: a caller that needs whole traces looks them up instead.
    /// Each block of each file is read once.
    pub fn scan_traces(
        &self,
        range: TimeRange,
        buffers: ScanBuffers,
        f: impl FnMut(TraceId, &[Span]) -> bool,
    ) -> Result<ScanStats> {
        self.scan_trace_ids(range, TraceIdRange::ALL, buffers, f)
    }

    /// [`Engine::scan_traces`] for the traces in `ids` only, with `buffers`
    /// cut to them ([`ScanBuffers::split`]): only the blocks of each file
    /// that may hold them are read, so threads scanning ranges side by side
    /// read each block once between them (a block that straddles two
    /// ranges, twice).
    pub fn scan_trace_ids(
        &self,
        range: TimeRange,
        ids: TraceIdRange,
        buffers: ScanBuffers,
        f: impl FnMut(TraceId, &[Span]) -> bool,
    ) -> Result<ScanStats> {
        self.scan_wanted(range, ids, None, buffers, f)
    }

    /// [`Engine::scan_trace_ids`] for the traces `wanted` lists (sorted,
    /// ascending), if given: of each file, only the blocks that may hold
    /// one of them are read (each once), and only their spans are handed
    /// on; `buffers` is taken as it comes ([`Engine::scan_buffers_of`]
    /// copies only theirs).
    pub fn scan_wanted(
        &self,
        range: TimeRange,
        ids: TraceIdRange,
        wanted: Option<Arc<[TraceId]>>,
        buffers: ScanBuffers,
        f: impl FnMut(TraceId, &[Span]) -> bool,
    ) -> Result<ScanStats> {
        self.scan_where(range, ids, wanted, None, buffers, f)
    }

    /// [`Engine::scan_wanted`] of only the spans `keep` accepts, if given
    /// ([`KeepSpan`]; a buffer's spans are given to it whole): a trace none
    /// of whose spans it accepts is not handed on, and in files the other
    /// spans' payloads are not put back together.
    pub fn scan_where(
        &self,
        range: TimeRange,
        ids: TraceIdRange,
        wanted: Option<Arc<[TraceId]>>,
        keep: Option<Arc<KeepSpan>>,
        buffers: ScanBuffers,
        mut f: impl FnMut(TraceId, &[Span]) -> bool,
    ) -> Result<ScanStats> {
        let ScanBuffers {
            spans: mut buffered,
            snapshot,
        } = buffers;
        if let Some(keep) = &keep {
            buffered.retain(|s| keep(&s.trace_id, &s.payload, s.group.resource.as_deref()));
        }
        let files = self.files_in(&snapshot, range);
        let mut stats = ScanStats {
            files: files.len(),
            ..ScanStats::default()
        };
        stats.skipped = self.quarantined_in(range);
        let mut from_files = FileTraces::new(self, ids, wanted, keep, files)?;
        let expire_before = self.inner.retention.expire_before();
        let mut buffered = buffered.into_iter().peekable();
        let mut spans: Vec<Span> = Vec::new();
        let mut from_file = from_files.next()?;
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
                from_file = from_files.next()?;
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
        stats.skipped.append(&mut from_files.skipped);
        Ok(stats)
    }
}
