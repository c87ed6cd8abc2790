//! Sharded in-memory buffers: where accepted spans wait until a flush writes them
//! to a sorted file.
//!
//! Concurrent requests append to different shards, so they do not serialize on one
//! lock: a request takes the first shard whose lock is free (`try_lock`, starting
//! from a rotating index) and appends all its spans under that one short lock
//! hold. A shard's buffer is a list of frozen chunks (`Arc<Vec<Span>>`, never
//! mutated again) plus a tail that is still growing. A reader locks a shard only
//! to scan the tail (at most [`CHUNK_SPANS`] spans) and clone the chunk `Arc`s;
//! it scans the frozen chunks after letting go.
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
    pub chunks: Vec<Arc<Vec<Span>>>,
    pub span_count: usize,
    pub bytes: usize,
    /// Oldest WAL segment holding any span of this buffer.
    pub min_wal_segment: u64,
}

impl Sealed {
    /// Appends the spans of this buffer with the given trace ID to `out`.
    pub fn get(&self, trace_id: &TraceId, out: &mut Vec<Span>) {
        for chunk in &self.chunks {
            scan(chunk, trace_id, out);
        }
    }

    /// Every span, moved into one vector for sorting.
    pub fn to_vec(&self) -> Vec<Span> {
        let mut all = Vec::with_capacity(self.span_count);
        for chunk in &self.chunks {
            all.extend(chunk.iter().cloned());
        }
        all
    }
}

#[derive(Debug)]
struct Buffer {
    chunks: Vec<Arc<Vec<Span>>>,
    tail: Vec<Span>,
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
            span_count: 0,
            bytes: 0,
            since: None,
            min_wal_segment: u64::MAX,
        }
    }

    fn is_empty(&self) -> bool {
        self.span_count == 0
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
                let full = std::mem::replace(&mut buf.tail, Vec::with_capacity(CHUNK_SPANS));
                buf.chunks.push(Arc::new(full));
            }
            if buf.tail.capacity() == 0 {
                buf.tail.reserve_exact(CHUNK_SPANS);
            }
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
            scan(chunk, trace_id, out);
        }
    }

    /// Every buffered span, for the search index: the frozen chunks (shared)
    /// and a copy of each shard's growing tail.
    pub fn chunks(&self) -> (Vec<Arc<Vec<Span>>>, Vec<Span>) {
        let mut chunks = Vec::new();
        let mut tails = Vec::new();
        for shard in &self.shards {
            let buf = shard.lock();
            chunks.extend(buf.chunks.iter().cloned());
            tails.extend(buf.tail.iter().cloned());
        }
        (chunks, tails)
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
            full.chunks.push(Arc::new(full.tail));
        }
        Sealed {
            id: self.next_seal_id.fetch_add(1, Ordering::Relaxed),
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
