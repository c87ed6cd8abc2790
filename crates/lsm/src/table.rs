//! Sorted span files: the immutable files a memtable is flushed to and
//! compaction rewrites.
//!
//! A file holds spans in trace-ID order (spans of one trace in the order they
//! were added), cut into independently compressed and checksummed data blocks.
//! After the blocks come a block index, a bloom filter over the file's distinct
//! trace IDs, and a fixed-size footer with the file's ID and time range. A
//! lookup by trace ID first asks the footer's ID range and the bloom filter
//! (both in memory after [`SsTable::open`]), so a file without the trace costs
//! no block read in the common case; otherwise it inflates only the blocks
//! whose ID range covers the trace, usually one.
//!
//! Opening a file checks everything that is read on every lookup (header,
//! footer, block index, bloom filter, and that they agree); data blocks are checked
//! when they are read, so opening stays cheap however large the file. Damage is
//! reported as [`Error::ChecksumMismatch`], [`Error::Corrupt`],
//! [`Error::CorruptBlock`] or [`Error::UnsupportedVersion`], never a panic, and
//! no length read from the file can make a reader allocate more than the file
//! size (or, for one decompressed block, 64 MiB).
//!
//! - `builder`: writes a file from sorted spans.
//! - `block`: the data block and its trailer (public for the benchmarks).
//! - `block_index`: the block index.
//! - `bloom`: the bloom filter and its hash (public for the benchmarks).
//! - `footer`: the header and the footer.
//!
//! The byte layout is in `docs/FORMAT.md` ("Sorted span file").

pub mod block;
mod block_index;
pub mod bloom;
mod builder;
mod columns;
mod footer;

#[cfg(test)]
pub(crate) mod hostile;
#[cfg(test)]
mod tests;

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

pub use builder::SsTableBuilder;

pub use crate::cold::RemoteFile;
use crate::{
    error::{Error, Result},
    mmap::Mmap,
    span::{Span, TraceId, TraceIdRange},
};

use block::decode_block_where;
use block_index::{blocks_for, decode_block_index, BlockHandle};
use bloom::Bloom;
use footer::{check_header, u32_at, Footer, FOOTER_LEN, HEADER_LEN};

/// How a [`SsTableBuilder`] lays out a file.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// Target uncompressed size of a data block. Larger blocks compress better;
    /// smaller ones make a lookup inflate less. Clamped to 1 byte .. 16 MiB.
    pub block_bytes: usize,
    /// zstd level for data blocks.
    pub zstd_level: i32,
    /// Bloom filter bits per distinct trace ID; 10 gives about 1% false positives.
    pub bloom_bits_per_key: usize,
    /// The attributes a file's metrics cells count
    /// ([`crate::index::cells::CellAttributes`]).
    pub cell_attributes: std::sync::Arc<crate::index::cells::CellAttributes>,
    /// File operations, with faults injected by tests.
    #[doc(hidden)]
    pub faults: crate::fault::Faults,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_bytes: 64 << 10,
            zstd_level: 3,
            bloom_bits_per_key: 10,
            cell_attributes: Default::default(),
            faults: crate::fault::Faults::default(),
        }
    }
}

/// A file's summary, kept in the engine's manifest and read from its footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    pub min_trace_id: TraceId,
    pub max_trace_id: TraceId,
    /// Smallest span start time.
    pub min_time_unix_nano: u64,
    /// Largest span end time.
    pub max_time_unix_nano: u64,
    pub span_count: u64,
    /// Distinct trace IDs.
    pub trace_count: u64,
    pub file_size: u64,
}

/// Where a file's data blocks are read from.
#[derive(Debug)]
enum Data {
    /// The whole file, mapped.
    Local(Mmap),
    /// The object store; the header, index, bloom filter and footer were
    /// read from the local head at open.
    Remote(RemoteFile),
}

/// An open, checked sorted span file. Cheap to share between threads.
#[derive(Debug)]
pub struct SsTable {
    path: PathBuf,
    data: Data,
    meta: TableMeta,
    blocks: Vec<BlockHandle>,
    bloom: Bloom,
    /// Data blocks read since open, for tests and metrics.
    blocks_read: AtomicU64,
}

impl SsTable {
    /// Maps the file and checks its header, footer, index and bloom filter and
    /// that they agree with each other. Data blocks are checked when read.
    pub fn open(path: &Path) -> Result<SsTable> {
        let map = Mmap::open(path)?;
        let file = map.as_bytes();
        let (meta, blocks, bloom) = parse(path, file, file, 0)?;
        Ok(SsTable {
            path: path.to_path_buf(),
            data: Data::Local(map),
            meta,
            blocks,
            bloom,
            blocks_read: AtomicU64::new(0),
        })
    }

    /// Opens a file kept in the object store from its head, the bytes kept
    /// on local disk ([`head_bytes`]: its header, then everything from its
    /// block index on): lookups ask the bloom filter and index as for a
    /// local file, and read data blocks from `remote`. `path` is where the
    /// file would be, for messages.
    pub fn open_remote(
        path: &Path,
        head: &[u8],
        file_size: u64,
        remote: RemoteFile,
    ) -> Result<SsTable> {
        if head.len() < HEADER_LEN || head.len() as u64 > file_size {
            return Err(corrupt(
                path,
                0,
                format!(
                    "a head of {} bytes cannot describe a {file_size}-byte file",
                    head.len()
                ),
            ));
        }
        let (header, tail) = head.split_at(HEADER_LEN);
        let tail_offset = file_size - tail.len() as u64;
        let (meta, blocks, bloom) = parse(path, header, tail, tail_offset)?;
        Ok(SsTable {
            path: path.to_path_buf(),
            data: Data::Remote(remote),
            meta,
            blocks,
            bloom,
            blocks_read: AtomicU64::new(0),
        })
    }

    /// The file in the object store, when its blocks are read from there.
    pub fn remote(&self) -> Option<&RemoteFile> {
        match &self.data {
            Data::Local(_) => None,
            Data::Remote(r) => Some(r),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn meta(&self) -> &TableMeta {
        &self.meta
    }

    /// False when the file certainly holds no span of `trace_id`: outside the
    /// file's ID range or rejected by the bloom filter. Reads no data block.
    pub fn may_contain(&self, trace_id: &TraceId) -> bool {
        (self.meta.min_trace_id..=self.meta.max_trace_id).contains(trace_id)
            && self.bloom.may_contain(trace_id)
    }

    /// All spans of the trace, in file order; empty when the file has none.
    /// Reads only the blocks whose trace-ID range includes the ID.
    pub fn get(&self, trace_id: &TraceId) -> Result<Vec<Span>> {
        self.lookup(trace_id).map(|(spans, _)| spans)
    }

    /// [`SsTable::get`], plus the number of data blocks it read.
    pub fn lookup(&self, trace_id: &TraceId) -> Result<(Vec<Span>, u64)> {
        if !self.may_contain(trace_id) {
            return Ok((Vec::new(), 0));
        }
        let mut out = Vec::new();
        let mut blocks = 0;
        // Only the trace's spans are put back together: a block holds a
        // few hundred, most of other traces.
        let id = *trace_id;
        let keep = move |t: &TraceId, _: &[u8], _: Option<&[u8]>| *t == id;
        for i in blocks_for(&self.blocks, trace_id) {
            out.extend(self.read_block_where(i, Some(&keep))?);
            blocks += 1;
        }
        Ok((out, blocks))
    }

    /// Asks the kernel to read ahead the blocks [`SsTable::get`] would read
    /// for the trace, so that lookups of several traces wait on the disk
    /// together rather than one after another.
    pub fn prefetch(&self, trace_id: &TraceId) {
        if self.may_contain(trace_id) {
            if let Data::Local(map) = &self.data {
                for i in blocks_for(&self.blocks, trace_id) {
                    let h = &self.blocks[i];
                    map.will_need(h.offset as usize..h.end() as usize);
                }
            }
        }
    }

    /// Every span in file order, block by block. After an error the iterator ends.
    pub fn iter(&self) -> SsTableIterator<'_> {
        self.iter_ids(TraceIdRange::ALL)
    }

    /// The spans of the traces in `ids`, in file order: only the blocks that
    /// may hold them are read.
    pub fn iter_ids(&self, ids: TraceIdRange) -> SsTableIterator<'_> {
        self.iter_wanted(ids, None)
    }

    /// [`SsTable::iter_ids`] of only the traces `wanted` lists (sorted,
    /// ascending), if given: only the blocks that may hold one of them (by
    /// their ranges of trace IDs and the file's Bloom filter) are read, and
    /// only their spans are handed on.
    pub fn iter_wanted(
        &self,
        ids: TraceIdRange,
        wanted: Option<Arc<[TraceId]>>,
    ) -> SsTableIterator<'_> {
        self.iter_where(ids, wanted, None)
    }

    /// [`SsTable::iter_wanted`] of only the spans `keep` accepts, if given:
    /// the others' payloads are not put back together.
    pub fn iter_where(
        &self,
        ids: TraceIdRange,
        wanted: Option<Arc<[TraceId]>>,
        keep: Option<Arc<KeepSpan>>,
    ) -> SsTableIterator<'_> {
        let first = self.blocks.partition_point(|b| b.last_trace_id < ids.start);
        let end = ids.end.map_or(self.blocks.len(), |end| {
            self.blocks.partition_point(|b| b.first_trace_id < end)
        });
        SsTableIterator {
            table: self,
            ids,
            next_block: first,
            end_block: end.max(first),
            spans: Vec::new().into_iter(),
            released: self.blocks.get(first).map_or(0, |b| b.offset as usize),
            fetched: None,
            wanted,
            next_wanted: 0,
            keep: keep.map(Keeping),
        }
    }

    /// Reads and checks every block, and that the blocks agree with the index,
    /// the bloom filter and the footer. Returns the span count or the first error.
    pub fn verify(&self) -> Result<u64> {
        let mut spans = 0u64;
        let mut traces = 0u64;
        let mut previous: Option<TraceId> = None;
        let mut min_start = u64::MAX;
        let mut max_end = 0u64;
        for i in 0..self.blocks.len() {
            let offset = self.blocks[i].offset;
            for span in self.read_block(i)? {
                spans += 1;
                min_start = min_start.min(span.start_unix_nano);
                max_end = max_end.max(span.end_unix_nano);
                if previous != Some(span.trace_id) {
                    traces += 1;
                    previous = Some(span.trace_id);
                    if !self.bloom.may_contain(&span.trace_id) {
                        return Err(corrupt(
                            &self.path,
                            offset,
                            format!(
                                "bloom filter misses trace {} stored in this block",
                                span.trace_id
                            ),
                        ));
                    }
                }
            }
        }
        let m = &self.meta;
        let found = (spans, traces, min_start, max_end);
        let claimed = (
            m.span_count,
            m.trace_count,
            m.min_time_unix_nano,
            m.max_time_unix_nano,
        );
        if found != claimed {
            return Err(corrupt(
                &self.path,
                m.file_size - FOOTER_LEN as u64,
                format!("blocks hold (spans, traces, min start, max end) {found:?}, footer says {claimed:?}"),
            ));
        }
        Ok(spans)
    }

    /// Data blocks read since open.
    pub fn blocks_read(&self) -> u64 {
        self.blocks_read.load(Ordering::Relaxed)
    }

    /// Reads, checks and decodes block `i`, and checks it against its index entry.
    fn read_block(&self, i: usize) -> Result<Vec<Span>> {
        self.read_block_where(i, None)
    }

    /// [`SsTable::read_block`] of the spans `keep` accepts.
    fn read_block_where(&self, i: usize, keep: Option<&KeepSpan>) -> Result<Vec<Span>> {
        self.blocks_read.fetch_add(1, Ordering::Relaxed);
        let h = &self.blocks[i];
        match &self.data {
            // The index was checked at open to tile the data region of the file.
            Data::Local(map) => self.decode_checked(
                i,
                &map.as_bytes()[h.offset as usize..h.end() as usize],
                keep,
            ),
            Data::Remote(r) => r.read_block(h.offset..h.end(), |b| self.decode_checked(i, b, keep)),
        }
    }

    /// Decodes the spans `keep` accepts of block `i` from its `bytes`, and
    /// checks the whole block against its index entry.
    fn decode_checked(&self, i: usize, bytes: &[u8], keep: Option<&KeepSpan>) -> Result<Vec<Span>> {
        let h = &self.blocks[i];
        let (spans, facts) = decode_block_where(&self.path, h.offset, bytes, keep)?;
        let sorted = facts.sorted;
        let agrees = facts.spans == h.span_count as usize
            && facts.first_trace_id == Some(h.first_trace_id)
            && facts.last_trace_id == Some(h.last_trace_id)
            && facts.min_start == Some(h.min_start_unix_nano)
            && facts.max_start == Some(h.max_start_unix_nano);
        if !sorted || !agrees {
            return Err(corrupt(
                &self.path,
                h.offset,
                format!("block {i} does not match its index entry (sorted: {sorted})"),
            ));
        }
        Ok(spans)
    }

    /// Block `i` of a remote file for a sequential read: from `fetched`, a
    /// run of blocks got with one GET, fetching the next run (up to
    /// [`REMOTE_READ_AHEAD`] bytes) when `i` is not in it.
    fn read_block_ahead(
        &self,
        i: usize,
        remote: &RemoteFile,
        fetched: &mut Option<(u64, bytes::Bytes)>,
        keep: Option<&KeepSpan>,
    ) -> Result<Vec<Span>> {
        let h = &self.blocks[i];
        let held = fetched
            .as_ref()
            .is_some_and(|(at, b)| *at <= h.offset && h.end() <= at + b.len() as u64);
        if !held {
            let mut end = h.end();
            for next in &self.blocks[i + 1..] {
                if next.end() - h.offset > REMOTE_READ_AHEAD {
                    break;
                }
                end = next.end();
            }
            *fetched = Some((h.offset, remote.fetch(h.offset..end)?));
        }
        self.blocks_read.fetch_add(1, Ordering::Relaxed);
        let (at, bytes) = fetched.as_ref().expect("fetched above");
        let from = (h.offset - at) as usize;
        self.decode_checked(i, &bytes[from..from + (h.end() - h.offset) as usize], keep)
    }
}

/// Bytes a sequential read of a remote file (a compaction, a scan, a check)
/// asks for with one GET.
const REMOTE_READ_AHEAD: u64 = 8 << 20;

/// A file's head, as a remote file keeps it on local disk: its header, then
/// its bytes from the block index on (index, bloom filter, footer). `file`
/// is the whole file.
pub fn head_bytes(path: &Path, file: &[u8]) -> Result<Vec<u8>> {
    let footer = Footer::decode(path, file)?;
    let from = usize::try_from(footer.index_offset)
        .ok()
        .filter(|&at| at >= HEADER_LEN && at <= file.len())
        .ok_or_else(|| corrupt(path, 0, "the footer's index offset is outside the file"))?;
    let mut head = Vec::with_capacity(HEADER_LEN + file.len() - from);
    head.extend_from_slice(&file[..HEADER_LEN]);
    head.extend_from_slice(&file[from..]);
    Ok(head)
}

/// Bytes at the start of a file that hold its header.
pub const HEADER_BYTES: u64 = HEADER_LEN as u64;

/// Bytes at the end of a file that hold its footer: what to read first to
/// find a remote file's head ([`head_offset`]).
pub const FOOTER_BYTES: u64 = FOOTER_LEN as u64;

/// Where a file's head starts (its block index), from its last
/// [`FOOTER_BYTES`] bytes.
pub fn head_offset(path: &Path, footer: &[u8]) -> Result<u64> {
    let mut padded = vec![0u8; HEADER_LEN];
    padded.extend_from_slice(footer);
    Ok(Footer::decode(path, &padded)?.index_offset)
}

/// Header, footer, block index and bloom filter of a file, checked against
/// each other: `header` is the file's first bytes, `tail` its bytes from
/// `tail_offset` to its end (the whole file, from 0, for a local one).
fn parse(
    path: &Path,
    header: &[u8],
    tail: &[u8],
    tail_offset: u64,
) -> Result<(TableMeta, Vec<BlockHandle>, Bloom)> {
    let footer = Footer::decode(path, tail)?;
    check_header(path, header)?;
    let file_len = tail_offset + tail.len() as u64;
    let footer_at = file_len - FOOTER_LEN as u64;

    // The regions must tile the file: blocks, index, bloom filter, footer.
    let index_end = footer.index_offset.checked_add(footer.index_len);
    let bloom_end = footer.bloom_offset.checked_add(footer.bloom_len);
    if footer.index_offset < HEADER_LEN as u64
        || footer.index_offset < tail_offset
        || index_end != Some(footer.bloom_offset)
        || bloom_end != Some(footer_at)
    {
        return Err(corrupt(
            path,
            footer_at,
            format!(
                "footer regions do not tile a {file_len}-byte file: index {}+{}, bloom {}+{}",
                footer.index_offset, footer.index_len, footer.bloom_offset, footer.bloom_len
            ),
        ));
    }
    // All bounds are now between tail_offset and the file length.
    let at = |offset: u64| (offset - tail_offset) as usize;
    let index_region = &tail[at(footer.index_offset)..at(footer.bloom_offset)];
    let bloom_region = &tail[at(footer.bloom_offset)..at(footer_at)];
    let blocks = decode_block_index(path, footer.index_offset, index_region, HEADER_LEN as u64)?;
    let bloom = Bloom::decode(path, footer.bloom_offset, bloom_region)?;
    check_footer_against_index(path, footer_at, &footer, &blocks)?;
    let meta = TableMeta {
        min_trace_id: footer.min_trace_id,
        max_trace_id: footer.max_trace_id,
        min_time_unix_nano: footer.min_start_unix_nano,
        max_time_unix_nano: footer.max_end_unix_nano,
        span_count: footer.span_count,
        trace_count: footer.trace_count,
        file_size: file_len,
    };
    Ok((meta, blocks, bloom))
}

/// Every span of a file in order; see [`SsTable::iter`]. The mapped pages of
/// blocks it has decoded leave the process's resident set a MiB at a
/// time (`RELEASE_EVERY`): a scan reads each block once.
#[derive(Debug)]
pub struct SsTableIterator<'a> {
    table: &'a SsTable,
    ids: TraceIdRange,
    next_block: usize,
    /// The block after the last that may hold a trace of `ids`.
    end_block: usize,
    spans: std::vec::IntoIter<Span>,
    /// File offset up to which mapped pages were released.
    released: usize,
    /// For a remote file: the run of blocks fetched last, and its offset.
    fetched: Option<(u64, bytes::Bytes)>,
    /// Only these traces (sorted), and the first of them not yet passed.
    wanted: Option<Arc<[TraceId]>>,
    next_wanted: usize,
    /// Only the spans this accepts.
    keep: Option<Keeping>,
}

/// A [`KeepSpan`] as an iterator holds it.
struct Keeping(Arc<KeepSpan>);

impl std::fmt::Debug for Keeping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepSpan")
    }
}

/// Which spans a read of blocks decodes ([`SsTable::iter_where`]), given
/// a span's trace ID, its payload as its block stores it (without the IDs
/// and times a columnar block keeps in columns: its name and attributes as
/// sent) and its resource's bytes: a span turned down is not handed on, and
/// its payload is not put back together.
pub type KeepSpan = dyn Fn(&TraceId, &[u8], Option<&[u8]>) -> bool + Send + Sync;

/// What a block holds whole, whatever a read keeps of its spans: it is
/// checked against the block's index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockFacts {
    pub spans: usize,
    pub first_trace_id: Option<TraceId>,
    pub last_trace_id: Option<TraceId>,
    pub min_start: Option<u64>,
    pub max_start: Option<u64>,
    /// Its spans are in trace-ID order.
    pub sorted: bool,
}

impl BlockFacts {
    /// The facts of a block holding `spans`, in its order.
    pub(crate) fn of(spans: &[Span]) -> BlockFacts {
        BlockFacts {
            spans: spans.len(),
            first_trace_id: spans.first().map(|s| s.trace_id),
            last_trace_id: spans.last().map(|s| s.trace_id),
            min_start: spans.iter().map(|s| s.start_unix_nano).min(),
            max_start: spans.iter().map(|s| s.start_unix_nano).max(),
            sorted: spans.windows(2).all(|w| w[0].trace_id <= w[1].trace_id),
        }
    }
}

/// Bytes of decoded blocks a scan lets pile up before it releases their pages
/// (a deep merge reads dozens of files at once).
const RELEASE_EVERY: usize = 1 << 20;

impl Iterator for SsTableIterator<'_> {
    type Item = Result<Span>;

    fn next(&mut self) -> Option<Result<Span>> {
        loop {
            if let Some(span) = self.spans.next() {
                return Some(Ok(span));
            }
            if self.next_block >= self.end_block {
                return None;
            }
            if let Some(wanted) = &self.wanted {
                // The first wanted trace from this block's first on; the
                // blocks that end before it hold none.
                let blocks = &self.table.blocks[self.next_block..self.end_block];
                let first = blocks[0].first_trace_id;
                self.next_wanted += wanted[self.next_wanted..].partition_point(|id| *id < first);
                let Some(&want) = wanted.get(self.next_wanted) else {
                    self.next_block = self.end_block;
                    return None;
                };
                // A trace the Bloom filter rules out is not in this file:
                // its ID still falls in some block's range.
                if !self.table.may_contain(&want) {
                    self.next_wanted += 1;
                    continue;
                }
                let before = blocks.partition_point(|b| b.last_trace_id < want);
                if before > 0 {
                    self.next_block += before;
                    continue;
                }
            }
            let i = self.next_block;
            self.next_block += 1;
            let read = match &self.table.data {
                Data::Local(_) => self
                    .table
                    .read_block_where(i, self.keep.as_ref().map(|k| &*k.0)),
                Data::Remote(r) => self.table.read_block_ahead(
                    i,
                    r,
                    &mut self.fetched,
                    self.keep.as_ref().map(|k| &*k.0),
                ),
            };
            match read {
                Ok(mut spans) => {
                    let h = &self.table.blocks[i];
                    if !(self.ids.contains(h.first_trace_id) && self.ids.contains(h.last_trace_id))
                    {
                        spans.retain(|s| self.ids.contains(s.trace_id));
                    }
                    if let Some(wanted) = &self.wanted {
                        // The block's spans are in trace-ID order.
                        let mut k = self.next_wanted;
                        spans.retain(|s| {
                            while wanted.get(k).is_some_and(|w| *w < s.trace_id) {
                                k += 1;
                            }
                            wanted.get(k) == Some(&s.trace_id)
                        });
                    }
                    self.spans = spans.into_iter();
                    // Spans own their bytes (decompressed): the mapped block
                    // is not read again.
                    if let Data::Local(map) = &self.table.data {
                        let end = self.table.blocks[i].end() as usize;
                        let last = self.next_block == self.end_block;
                        if end - self.released >= RELEASE_EVERY || last {
                            map.release(self.released..end);
                            self.released = end;
                        }
                    }
                }
                Err(e) => {
                    self.next_block = self.end_block;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Checks that the footer's summary agrees with the index.
fn check_footer_against_index(
    path: &Path,
    at: u64,
    footer: &Footer,
    blocks: &[BlockHandle],
) -> Result<()> {
    let spans: u64 = blocks.iter().map(|b| u64::from(b.span_count)).sum();
    let min_start = blocks.iter().map(|b| b.min_start_unix_nano).min();
    let problem = if footer.block_count != blocks.len() as u64 {
        Some(format!(
            "footer counts {} blocks, index has {}",
            footer.block_count,
            blocks.len()
        ))
    } else if footer.span_count != spans {
        Some(format!(
            "footer counts {} spans, index has {spans}",
            footer.span_count
        ))
    } else if footer.trace_count == 0 || footer.trace_count > spans {
        Some(format!(
            "footer counts {} traces in {spans} spans",
            footer.trace_count
        ))
    } else if blocks.first().map(|b| b.first_trace_id) != Some(footer.min_trace_id)
        || blocks.last().map(|b| b.last_trace_id) != Some(footer.max_trace_id)
    {
        Some("footer trace-ID range differs from the index".to_string())
    } else if min_start != Some(footer.min_start_unix_nano) {
        Some("footer start time differs from the index".to_string())
    } else {
        None
    };
    match problem {
        Some(reason) => Err(corrupt(path, at, reason)),
        None => Ok(()),
    }
}

/// A [`Error::Corrupt`] for `file` at `offset`.
pub(crate) fn corrupt(file: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        file: file.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// Checks a region whose last four bytes are a crc32c of the rest, found at
/// `offset` in `file`; returns the rest. The region must be at least 4 bytes.
pub(crate) fn check_crc<'a>(file: &Path, offset: u64, region: &'a [u8]) -> Result<&'a [u8]> {
    let Some(n) = region.len().checked_sub(4) else {
        return Err(corrupt(file, offset, "region too short for a checksum"));
    };
    let expected = u32_at(region, n);
    let actual = crc32c::crc32c(&region[..n]);
    if expected != actual {
        return Err(Error::ChecksumMismatch {
            file: file.to_path_buf(),
            offset,
            expected,
            actual,
        });
    }
    Ok(&region[..n])
}
