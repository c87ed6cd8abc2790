//! Sharded in-memory buffers: where accepted spans wait until a flush writes them
//! to a sorted file.
//!
//! Concurrent requests append to different shards, so they do not serialize on one
//! lock: a request takes the first shard whose lock is free (`try_lock`, starting
//! from a rotating index) and appends all its spans under that one short lock
//! hold. A shard's buffer is a list of frozen [`Chunk`]s (never mutated again)
//! plus a tail that is still growing. A reader locks a shard only to scan the
//! tail (at most [`CHUNK_SPANS`] spans) and clone the chunk `Arc`s; it reads the
//! frozen chunks after letting go.
//!
//! A lookup by trace ID must not scan every buffered span: with a large memory
//! budget that is millions of spans, milliseconds per GetTrace. Each chunk
//! carries a small filter of its trace IDs ([`IdFilter`], a blocked bloom
//! filter filled as spans are appended, a few nanoseconds per span), so a
//! lookup scans only the chunks that may hold the trace.
//!
//! A buffer is *sealed* when it holds `flush_bytes` or is older than `max_age`:
//! the shard swaps in an empty buffer under its lock (O(1)), so writers go on at
//! once, and hands the sealed buffer to a callback that runs while the shard lock
//! is still held. The engine uses that callback to publish the sealed buffer to
//! readers before any reader can observe the shard without it, and to wake the
//! flusher: one wake-up per sealed buffer, never one per span.

use std::{
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use parking_lot::{Mutex, MutexGuard};

use crate::span::{Span, TraceId};

/// Spans per frozen chunk; also the most a reader scans under a shard lock.
pub const CHUNK_SPANS: usize = 4096;

/// When buffers are sealed.
#[derive(Debug, Clone)]
pub struct MemTableOptions {
    /// Number of shards; the default is the number of cores.
    pub shards: usize,
    /// A shard's buffer is sealed once it holds this many bytes of spans.
    pub flush_bytes: usize,
    /// ... or once its oldest span is this old.
    pub max_age: Duration,
}

impl Default for MemTableOptions {
    fn default() -> Self {
        MemTableOptions {
            shards: std::thread::available_parallelism().map_or(2, |n| n.get()),
            flush_bytes: 32 << 20,
            max_age: Duration::from_secs(30),
        }
    }
}

/// A buffer that no writer can touch any more, waiting to be flushed.
#[derive(Debug)]
pub struct Sealed {
    /// Unique, increasing in seal order.
    pub id: u64,
    pub chunks: Vec<Arc<Chunk>>,
    pub span_count: usize,
    pub bytes: usize,
    /// Oldest WAL segment holding any span of this buffer.
    pub min_wal_segment: u64,
}

impl Sealed {
    /// Appends the spans of this buffer with the given trace ID to `out`.
    pub fn get(&self, trace_id: &TraceId, out: &mut Vec<Span>) {
        for chunk in &self.chunks {
            chunk.get(trace_id, out);
        }
    }
}

/// Spans frozen in a buffer, with a filter of their trace IDs. Derefs to the
/// spans.
#[derive(Debug)]
pub struct Chunk {
    spans: Vec<Span>,
    ids: IdFilter,
}

impl Chunk {
    /// False only if no span here has this trace ID.
    pub fn may_contain(&self, trace_id: &TraceId) -> bool {
        self.ids.may_contain(trace_id)
    }

    /// Appends the spans with this trace ID to `out`.
    pub fn get(&self, trace_id: &TraceId, out: &mut Vec<Span>) {
        if self.may_contain(trace_id) {
            scan(&self.spans, trace_id, out);
        }
    }
}

impl std::ops::Deref for Chunk {
    type Target = [Span];

    fn deref(&self) -> &[Span] {
        &self.spans
    }
}

/// Filter words per chunk: 8 bits per span of a full chunk.
const FILTER_WORDS: usize = CHUNK_SPANS / 8;

/// A blocked bloom filter of trace IDs: each ID sets three bits of one 64-bit
/// word, so a probe reads one word. Sized for [`CHUNK_SPANS`] distinct IDs
/// (about 4% false positives then; a chunk usually holds far fewer traces,
/// since a request's spans of one trace arrive together).
#[derive(Debug, Clone)]
pub struct IdFilter {
    words: Box<[u64]>,
}

impl IdFilter {
    pub fn new() -> Self {
        IdFilter {
            words: vec![0; FILTER_WORDS].into_boxed_slice(),
        }
    }

    #[inline]
    pub fn insert(&mut self, trace_id: &TraceId) {
        let (word, mask) = Self::position(trace_id);
        self.words[word] |= mask;
    }

    #[inline]
    pub fn may_contain(&self, trace_id: &TraceId) -> bool {
        let (word, mask) = Self::position(trace_id);
        self.words[word] & mask == mask
    }

    /// The word and the three bits of an ID. IDs are hashed (splitmix64's
    /// finalizer over both halves): they are random in practice, but nothing
    /// stops a client from sending 1, 2, 3...
    #[inline]
    fn position(trace_id: &TraceId) -> (usize, u64) {
        let id = u128::from_be_bytes(trace_id.0);
        let mut h = (id as u64) ^ ((id >> 64) as u64).rotate_left(29);
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        let word = (h >> 32) as usize % FILTER_WORDS;
        let mask = (1 << (h & 63)) | (1 << ((h >> 6) & 63)) | (1 << ((h >> 12) & 63));
        (word, mask)
    }
}

impl Default for IdFilter {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug)]
struct Buffer {
    chunks: Vec<Arc<Chunk>>,
    tail: Vec<Span>,
    /// The trace IDs of `tail`, frozen with it.
    tail_ids: IdFilter,
    span_count: usize,
    bytes: usize,
    /// When the first span arrived; `None` while empty.
    since: Option<Instant>,
    min_wal_segment: u64,
}

impl Buffer {
    fn new() -> Self {
        Buffer {
            chunks: Vec::new(),
            tail: Vec::new(),
            tail_ids: IdFilter::new(),
            span_count: 0,
            bytes: 0,
            since: None,
            min_wal_segment: u64::MAX,
        }
    }

    fn is_empty(&self) -> bool {
        self.span_count == 0
    }

    /// Moves the tail, with its filter, into a frozen chunk.
    fn freeze_tail(&mut self) {
        let spans = std::mem::take(&mut self.tail);
        let ids = std::mem::take(&mut self.tail_ids);
        self.chunks.push(Arc::new(Chunk { spans, ids }));
    }
}

/// The sharded buffers.
#[derive(Debug)]
pub struct MemTable {
    shards: Vec<Mutex<Buffer>>,
    opts: MemTableOptions,
    next_shard: AtomicUsize,
    next_seal_id: AtomicU64,
}

impl MemTable {
    pub fn new(opts: MemTableOptions) -> Self {
        let shards = (0..opts.shards.max(1))
            .map(|_| Mutex::new(Buffer::new()))
            .collect();
        MemTable {
            shards,
            opts,
            next_shard: AtomicUsize::new(0),
            next_seal_id: AtomicU64::new(0),
        }
    }

    pub fn options(&self) -> &MemTableOptions {
        &self.opts
    }

    /// Appends one request's spans (from WAL segment `wal_segment`) to one shard.
    /// If that fills the shard, its buffer is sealed and passed to `on_seal` while
    /// the shard lock is held.
    pub fn append(&self, spans: Vec<Span>, wal_segment: u64, on_seal: impl FnOnce(Sealed)) {
        if spans.is_empty() {
            return;
        }
        let mut shard = self.lock_any_shard();
        let buf = &mut *shard;
        buf.since.get_or_insert_with(Instant::now);
        buf.min_wal_segment = buf.min_wal_segment.min(wal_segment);
        buf.span_count += spans.len();
        for span in spans {
            buf.bytes += span.memory_size();
            if buf.tail.len() == CHUNK_SPANS {
                buf.freeze_tail();
            }
            if buf.tail.capacity() == 0 {
                buf.tail.reserve_exact(CHUNK_SPANS);
            }
            buf.tail_ids.insert(&span.trace_id);
            buf.tail.push(span);
        }
        if buf.bytes >= self.opts.flush_bytes {
            on_seal(self.seal(buf));
        }
    }

    /// Seals every non-empty buffer older than `max_age` (all non-empty buffers if
    /// `force`), calling `on_seal` for each under its shard lock.
    pub fn seal_where(&self, force: bool, mut on_seal: impl FnMut(Sealed)) {
        for shard in &self.shards {
            let mut buf = shard.lock();
            let old = buf.since.is_some_and(|t| t.elapsed() >= self.opts.max_age);
            if !buf.is_empty() && (force || old) {
                on_seal(self.seal(&mut buf));
            }
        }
    }

    /// Appends every buffered span with the given trace ID to `out`.
    pub fn get(&self, trace_id: &TraceId, out: &mut Vec<Span>) {
        let mut chunks = Vec::new();
        for shard in &self.shards {
            let buf = shard.lock();
            scan(&buf.tail, trace_id, out);
            chunks.extend(buf.chunks.iter().cloned());
        }
        for chunk in &chunks {
            chunk.get(trace_id, out);
        }
    }

    /// Every buffered span, for the search index: the frozen chunks (shared)
    /// and a copy of each shard's growing tail.
    pub fn chunks(&self) -> (Vec<Arc<Chunk>>, Vec<Span>) {
        let mut chunks = Vec::new();
        let mut tails = Vec::new();
        for shard in &self.shards {
            let buf = shard.lock();
            chunks.extend(buf.chunks.iter().cloned());
            tails.extend(buf.tail.iter().cloned());
        }
        (chunks, tails)
    }

    /// Buffers sealed so far: unchanged across two reads, no span left the
    /// growing buffers between them.
    pub fn seals(&self) -> u64 {
        self.next_seal_id.load(Ordering::Acquire)
    }

    /// Oldest WAL segment any buffered span came from.
    pub fn min_wal_segment(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().min_wal_segment)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Spans and bytes currently buffered (not counting sealed buffers).
    pub fn usage(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(n, b), s| {
            let buf = s.lock();
            (n + buf.span_count, b + buf.bytes)
        })
    }

    fn lock_any_shard(&self) -> MutexGuard<'_, Buffer> {
        let n = self.shards.len();
        let start = self.next_shard.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            if let Some(guard) = self.shards[(start + i) % n].try_lock() {
                return guard;
            }
        }
        self.shards[start % n].lock()
    }

    fn seal(&self, buf: &mut Buffer) -> Sealed {
        let mut full = std::mem::replace(buf, Buffer::new());
        if !full.tail.is_empty() {
            full.freeze_tail();
        }
        Sealed {
            id: self.next_seal_id.fetch_add(1, Ordering::AcqRel),
            chunks: full.chunks,
            span_count: full.span_count,
            bytes: full.bytes,
            min_wal_segment: full.min_wal_segment,
        }
    }
}

fn scan(spans: &[Span], trace_id: &TraceId, out: &mut Vec<Span>) {
    out.extend(spans.iter().filter(|s| s.trace_id == *trace_id).cloned());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{group, span};

    fn table(flush_bytes: usize) -> MemTable {
        MemTable::new(MemTableOptions {
            shards: 4,
            flush_bytes,
            max_age: Duration::from_secs(3600),
        })
    }

    #[test]
    fn appended_spans_are_found_until_sealed_and_then_in_the_sealed_buffer() {
        let mt = table(usize::MAX);
        let g = group("svc");
        for i in 0..10_000u64 {
            mt.append(vec![span(&g, u128::from(i % 100), i, i)], 3, |_| {
                panic!("not full")
            });
        }
        let mut out = Vec::new();
        mt.get(&TraceId(7u128.to_be_bytes()), &mut out);
        assert_eq!(out.len(), 100);
        assert_eq!(mt.min_wal_segment(), 3);

        let mut sealed = Vec::new();
        mt.seal_where(true, |s| sealed.push(s));
        assert_eq!(sealed.iter().map(|s| s.span_count).sum::<usize>(), 10_000);
        let mut again = Vec::new();
        mt.get(&TraceId(7u128.to_be_bytes()), &mut again);
        assert!(again.is_empty());
        let mut from_sealed = Vec::new();
        for s in &sealed {
            s.get(&TraceId(7u128.to_be_bytes()), &mut from_sealed);
        }
        assert_eq!(from_sealed.len(), 100);
        assert_eq!(mt.min_wal_segment(), u64::MAX);
    }

    #[test]
    fn every_trace_is_found_in_frozen_chunks_and_after_sealing() {
        let mt = table(usize::MAX);
        let g = group("svc");
        // 20,000 traces of 5 spans, interleaved over requests of 100 spans: 25
        // frozen chunks per shard, each trace's spans in several requests.
        let id = |t: u64| u128::from(t).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        for request in 0..1_000u64 {
            let spans = (0..100u64)
                .map(|i| {
                    let t = (request * 100 + i) % 20_000;
                    span(&g, id(t), request * 100 + i, i)
                })
                .collect();
            mt.append(spans, 0, |_| panic!("not full"));
        }
        let mut chunks = 0;
        for shard in &mt.shards {
            chunks += shard.lock().chunks.len();
        }
        assert!(chunks >= 20, "only {chunks} chunks frozen");
        for t in 0..20_000u64 {
            let mut out = Vec::new();
            mt.get(&TraceId(id(t).to_be_bytes()), &mut out);
            assert_eq!(out.len(), 5, "trace {t}");
        }
        let mut sealed = Vec::new();
        mt.seal_where(true, |s| sealed.push(s));
        for t in (0..20_000u64).step_by(7) {
            let mut out = Vec::new();
            for s in &sealed {
                s.get(&TraceId(id(t).to_be_bytes()), &mut out);
            }
            assert_eq!(out.len(), 5, "trace {t} after sealing");
        }
    }

    #[test]
    fn few_absent_ids_pass_the_filter_of_a_full_chunk_even_with_sequential_ids() {
        // A chunk of 4,096 distinct IDs 1..=4096 (the worst case for the filter:
        // as many traces as spans, and IDs that differ in a few low bits).
        let mut filter = IdFilter::new();
        for i in 1..=CHUNK_SPANS as u128 {
            filter.insert(&TraceId(i.to_be_bytes()));
        }
        for i in 1..=CHUNK_SPANS as u128 {
            assert!(filter.may_contain(&TraceId(i.to_be_bytes())));
        }
        let probes = 20_000u128;
        let passed = (0..probes)
            .map(|i| TraceId((1 << 64 | i).to_be_bytes()))
            .chain((0..probes).map(|i| TraceId((10_000 + i).to_be_bytes())))
            .filter(|id| filter.may_contain(id))
            .count();
        let rate = passed as f64 / (2 * probes) as f64;
        assert!(rate < 0.08, "{:.1}% of absent IDs passed", rate * 100.0);
    }

    #[test]
    fn a_full_shard_is_sealed_once_with_all_its_spans() {
        let g = group("svc");
        let one = span(&g, 1, 1, 1).memory_size();
        let mt = table(one * 1000);
        let mut sealed = Vec::new();
        for i in 0..999u64 {
            mt.append(vec![span(&g, 1, i, i)], 0, |s| sealed.push(s));
        }
        assert!(sealed.is_empty(), "sealed before the threshold");
        // One request pushes the shard it lands in over the threshold, whichever it is.
        let big: Vec<Span> = (0..1000u64).map(|i| span(&g, 2, i, i)).collect();
        mt.append(big, 0, |s| sealed.push(s));
        assert_eq!(sealed.len(), 1);
        assert!(sealed[0].span_count >= 1000);
    }

    #[test]
    fn aged_buffers_are_sealed_and_fresh_ones_are_not() {
        let mt = MemTable::new(MemTableOptions {
            shards: 2,
            flush_bytes: usize::MAX,
            max_age: Duration::from_millis(0),
        });
        let g = group("svc");
        mt.append(vec![span(&g, 1, 1, 1)], 0, |_| {});
        let mut n = 0;
        mt.seal_where(false, |_| n += 1);
        assert_eq!(n, 1);

        let slow = MemTable::new(MemTableOptions {
            shards: 2,
            flush_bytes: usize::MAX,
            max_age: Duration::from_secs(3600),
        });
        slow.append(vec![span(&g, 1, 1, 1)], 0, |_| {});
        let mut m = 0;
        slow.seal_where(false, |_| m += 1);
        assert_eq!(m, 0);
    }
}
