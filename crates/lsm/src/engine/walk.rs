//! The newest-first walk of a search ([`Engine::candidates`]): trace parts
//! in the order of their start, latest first, from the buffers and from the
//! blocks of the files' sidecars, each checked against what the query
//! needs; a block is read only when the walk reaches it and its digest may
//! hold a part that meets the need.
//!
//! A part's start is never earlier than its trace's, so when the walk stands
//! at start `s`, every trace it has not proposed yet starts at `s` or
//! before. A caller that evaluates the candidates can stop once it has
//! `limit` answers starting after the walk's position: the walk costs what
//! the answer needs, not what the store holds.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashSet},
    sync::Arc,
};

use super::{search::rebuild, Engine, Inner, SuperVersion};
use crate::{
    error::{Error, Result},
    index::{
        blocks::{FileIndex, NeedTerms},
        cells::SectionCache,
        BlockParts, OpNeed, ResolvedNeed, SearchQuery, SummarySet,
    },
    span::TraceId,
    version::{TableFile, TimeRange},
};

/// A trace the walk proposes: its ID and the start of the part that
/// proposed it (the trace starts then or earlier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub trace_id: TraceId,
    pub start_unix_nano: u64,
}

/// Counts of what a walk did, for benchmarks and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Blocks whose digest ruled them out.
    pub blocks_skipped: usize,
    /// Blocks read and decoded.
    pub blocks_read: usize,
    /// Parts checked against the need.
    pub parts_checked: usize,
}

/// A set of parts being walked: a buffer's, or the block of a file read last.
struct Walking {
    parts: Parts,
    /// Its heap bytes, with its order made, as counted in the walk's.
    bytes: usize,
    filter: Option<ResolvedNeed>,
    /// Position in the parts' start order.
    pos: usize,
}

/// The parts of a [`Walking`]: a set, walked in [`SummarySet::by_start`]'s
/// order, or a sidecar block, whose parts are in that order already and
/// are decoded one at a time as the walk reaches them.
enum Parts {
    Set(Arc<SummarySet>),
    Block(BlockParts),
}

impl Walking {
    fn new(set: Arc<SummarySet>, need: Option<&OpNeed>) -> Walking {
        let filter = need.map(|n| ResolvedNeed::in_set(&set, n));
        set.by_start();
        Walking {
            bytes: set.heap_bytes(),
            parts: Parts::Set(set),
            filter,
            pos: 0,
        }
    }

    fn block(block: BlockParts, need: Option<&OpNeed>) -> Walking {
        let filter = need.map(|n| ResolvedNeed::new(n, |s| block.id(s)));
        Walking {
            bytes: block.heap_bytes(),
            parts: Parts::Block(block),
            filter,
            pos: 0,
        }
    }

    /// The position of the first part starting at or before `start`.
    fn first_starting_by(&self, start: u64) -> usize {
        match &self.parts {
            Parts::Set(set) => {
                let order = set.by_start();
                order.partition_point(|&t| set.traces[t as usize].start_unix_nano > start)
            }
            Parts::Block(block) => {
                let (mut lo, mut hi) = (0, block.len());
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if block.start_and_id(mid).0 > start {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        }
    }

    fn next_start(&self) -> Option<(u64, TraceId)> {
        match &self.parts {
            Parts::Set(set) => {
                let &i = set.by_start().get(self.pos)?;
                let t = &set.traces[i as usize];
                Some((t.start_unix_nano, t.trace_id))
            }
            Parts::Block(block) => (self.pos < block.len()).then(|| block.start_and_id(self.pos)),
        }
    }
}

enum Source {
    Buffer(Walking),
    File {
        file: Arc<TableFile>,
        index: Arc<FileIndex>,
        /// The next block not yet read or skipped.
        next_block: usize,
        current: Option<Walking>,
    },
}

/// The trace IDs of blocks in the heap: below every real ID in answer
/// order at the same start, so a block is opened before any part of its
/// start is proposed.
const BLOCK: TraceId = TraceId([0; 16]);

/// The walk; see the module docs. Holds the snapshot it was made from.
pub struct Candidates {
    _snapshot: Arc<SuperVersion>,
    sources: Vec<Source>,
    /// (start, reverse trace ID, source): the next part (or block) of each
    /// source, latest start first.
    heap: BinaryHeap<(u64, Reverse<TraceId>, usize)>,
    need: Option<OpNeed>,
    terms: Option<NeedTerms>,
    start_min: u64,
    start_max: u64,
    /// Parts that end before this are left out: the query's `end_min`, or
    /// retention's cut when later.
    end_min: u64,
    /// See [`SearchQuery::trace_ids`].
    trace_ids: Option<(TraceId, TraceId)>,
    proposed: HashSet<TraceId>,
    held: usize,
    stats: WalkStats,
    /// For a sidecar rebuilt on the way: its digest leaves the cache.
    inner: Arc<Inner>,
    /// Where the blocks read are kept inflated, and the walk's turn there
    /// ([`Engine::candidates_kept`]).
    kept: Option<(Arc<SectionCache>, u64)>,
}

impl Engine {
    /// The traces that may match `q`, newest part start first; see the
    /// module docs. Uses `q`'s window and needs (of its needs, the one
    /// with most conditions: each must be met by one span, so by one part);
    /// the rest of `q` is left to the caller.
    ///
    /// A trace is proposed by the first of its parts that meets the need
    /// and starts within the window: a trace whose parts meeting it all
    /// start after the window's end is not proposed.
    pub fn candidates(&self, q: &SearchQuery) -> Result<Candidates> {
        let range = TimeRange::new(q.start_min.max(q.end_min), q.start_max);
        let (buffers, snapshot) = self.buffer_sets();
        let need = q
            .needs
            .iter()
            .max_by_key(|n| {
                n.tags.len()
                    + usize::from(n.service.is_some())
                    + usize::from(n.name.is_some())
                    + usize::from(n.kind.is_some())
                    + usize::from(n.error)
            })
            .cloned();
        let mut sources = Vec::new();
        for set in buffers {
            let mut w = Walking::new(set, need.as_ref());
            if q.start_max != 0 {
                w.pos = w.first_starting_by(q.start_max);
            }
            sources.push(Source::Buffer(w));
        }
        for file in self.files_in(&snapshot, range) {
            let meta = file.table().meta();
            if q.trace_ids
                .is_some_and(|(lo, hi)| meta.max_trace_id < lo || meta.min_trace_id > hi)
            {
                continue;
            }
            let index = self.file_index(file)?;
            // Every file's newest block is read from the disk at once, not
            // each as the walk reaches it.
            index.prefetch(0);
            sources.push(Source::File {
                file: file.clone(),
                index,
                next_block: 0,
                current: None,
            });
        }
        let mut walk = Candidates {
            _snapshot: snapshot,
            terms: need.as_ref().map(NeedTerms::new),
            need,
            sources,
            heap: BinaryHeap::new(),
            start_min: q.start_min,
            start_max: q.start_max,
            end_min: q.end_min.max(self.inner.retention.expire_before()),
            trace_ids: q.trace_ids,
            proposed: HashSet::new(),
            held: 0,
            stats: WalkStats::default(),
            inner: self.inner.clone(),
            kept: None,
        };
        for i in 0..walk.sources.len() {
            walk.push(i);
        }
        Ok(walk)
    }

    /// [`Engine::candidates`], the blocks it inflates kept (and taken from)
    /// the files' metrics cells cache: a metrics query answered from cells
    /// walks the index for its exemplars, and a dashboard asks it again
    /// every few seconds over the same window, whose blocks it then read
    /// and inflated again (half the CPU of a query by name on 2 M spans,
    /// docs/BENCHMARKS.md).
    pub fn candidates_kept(&self, q: &SearchQuery) -> Result<Candidates> {
        let mut walk = self.candidates(q)?;
        let cache = self.inner.summary_cache.cells_files().clone();
        let turn = cache.turn();
        walk.kept = Some((cache, turn));
        Ok(walk)
    }
}

impl Candidates {
    /// Puts source `i` back in the heap at its next part or block, if any.
    fn push(&mut self, i: usize) {
        let key = match &self.sources[i] {
            Source::Buffer(w) => w.next_start(),
            Source::File {
                index,
                next_block,
                current,
                ..
            } => match current.as_ref().and_then(Walking::next_start) {
                Some(next) => Some(next),
                None => index.blocks.get(*next_block).map(|b| (b.max_start, BLOCK)),
            },
        };
        if let Some((start, id)) = key {
            if start >= self.start_min {
                self.heap.push((start, Reverse(id), i));
            }
        }
    }

    /// The next candidate, or `None` when the walk is done.
    pub fn next_candidate(&mut self) -> Result<Option<Candidate>> {
        while let Some((_, _, i)) = self.heap.pop() {
            if let Some(found) = self.step(i)? {
                self.push(i);
                return Ok(Some(found));
            }
            self.push(i);
        }
        Ok(None)
    }

    /// Where the walk stands: every trace not yet proposed starts at or
    /// before this (`None`: the walk is done).
    pub fn position(&self) -> Option<u64> {
        self.heap.peek().map(|(start, _, _)| *start)
    }

    /// Bytes the walk holds beyond the snapshot: the blocks it decoded and
    /// the IDs it proposed.
    pub fn held_bytes(&self) -> usize {
        self.held + self.proposed.len() * 32
    }

    pub fn stats(&self) -> WalkStats {
        self.stats
    }

    /// Takes one step in source `i`: opens or skips its next block, or
    /// checks its next part (returned if it is a candidate).
    fn step(&mut self, i: usize) -> Result<Option<Candidate>> {
        let need = self.need.as_ref();
        let walking = match &mut self.sources[i] {
            Source::Buffer(w) => w,
            Source::File {
                file,
                index,
                next_block,
                current,
            } => {
                if current.as_ref().is_some_and(|w| w.next_start().is_some()) {
                    current.as_mut().expect("checked")
                } else {
                    // The current block is done: let it go, and open or skip the next.
                    if let Some(done) = current.take() {
                        self.held -= done.bytes;
                    }
                    let b = *next_block;
                    *next_block += 1;
                    let d = &index.blocks[b];
                    let wanted = (self.start_max == 0 || d.min_start <= self.start_max)
                        && d.max_end >= self.end_min
                        && self.terms.as_ref().is_none_or(|t| t.may_meet(d));
                    if !wanted {
                        self.stats.blocks_skipped += 1;
                        return Ok(None);
                    }
                    self.stats.blocks_read += 1;
                    index.prefetch(b + 1);
                    let parts = match &self.kept {
                        Some((cache, turn)) => index.block_parts_kept(b, cache, file.id, *turn),
                        None => index.block_parts(b),
                    };
                    let w = match parts {
                        Ok(block) => {
                            let mut w = Walking::block(block, need);
                            // Parts that start after the window (the
                            // block's latest first) are passed over unread.
                            if self.start_max != 0 {
                                w.pos = w.first_starting_by(self.start_max);
                            }
                            w
                        }
                        Err(e) => {
                            let max_start = d.max_start;
                            let w = self.walk_spans(i, &e, max_start)?;
                            return Ok(w);
                        }
                    };
                    self.held += w.bytes;
                    *current = Some(w);
                    return Ok(None);
                }
            }
        };
        let decoded;
        let part = match &walking.parts {
            Parts::Set(set) => {
                let &t = set.by_start().get(walking.pos).expect("in the heap");
                &set.traces[t as usize]
            }
            Parts::Block(block) => {
                // Parts outside the asked trace IDs are passed over unread,
                // a row of them at once; the source then goes back in the
                // heap at the start of its next part.
                if let Some((lo, hi)) = self.trace_ids {
                    let outside = |pos| {
                        let (_, id) = block.start_and_id(pos);
                        id < lo || hi < id
                    };
                    let from = walking.pos;
                    while walking.pos < block.len() && outside(walking.pos) {
                        walking.pos += 1;
                    }
                    if walking.pos > from {
                        return Ok(None);
                    }
                }
                match block.part(walking.pos) {
                    Ok(part) => {
                        decoded = part;
                        &decoded
                    }
                    Err(e) => {
                        // Walk the rest of the file from its spans, from this part's start on.
                        let from = block.start_and_id(walking.pos).0;
                        return self.walk_spans(i, &e, from);
                    }
                }
            }
        };
        walking.pos += 1;
        self.stats.parts_checked += 1;
        let wanted = (self.start_max == 0 || part.start_unix_nano <= self.start_max)
            && part.end_unix_nano >= self.end_min
            && self
                .trace_ids
                .is_none_or(|(lo, hi)| lo <= part.trace_id && part.trace_id <= hi)
            && walking.filter.as_ref().is_none_or(|f| f.passes(part))
            && self.proposed.insert(part.trace_id);
        Ok(wanted.then_some(Candidate {
            trace_id: part.trace_id,
            start_unix_nano: part.start_unix_nano,
        }))
    }

    /// Source `i`'s sidecar failed its checks with `e`: walks the rest of
    /// its file from the spans (rebuilding the sidecar), from the parts
    /// starting at `from` or earlier on. Parts already proposed are not
    /// proposed again.
    fn walk_spans(&mut self, i: usize, e: &Error, from: u64) -> Result<Option<Candidate>> {
        let need = self.need.as_ref();
        let Source::File {
            file,
            index,
            next_block,
            current,
        } = &mut self.sources[i]
        else {
            unreachable!("only a file's sidecar is walked by blocks");
        };
        if let Some(done) = current.take() {
            self.held -= done.bytes;
        }
        self.inner.summary_cache.forget_digest(file.id);
        let set = Arc::new(rebuild(file, e, &self.inner.opts)?);
        let mut w = Walking::new(set.clone(), need);
        let order = set.by_start();
        w.pos = order.partition_point(|&t| set.traces[t as usize].start_unix_nano > from);
        self.held += w.bytes;
        *next_block = index.blocks.len();
        *current = Some(w);
        Ok(None)
    }
}
