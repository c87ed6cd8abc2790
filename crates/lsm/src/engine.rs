//! The storage engine: the write path (WAL, then memtable) and the read path
//! (memtable, sealed buffers, sorted files) tied together, plus the flusher.
//!
//! Write: a request's spans are encoded into one WAL record and appended to the
//! group-commit buffer; the request waits until an fsync covers it, then appends
//! the spans to a memtable shard. Only then is it acknowledged, so an
//! acknowledged span is on disk and visible to queries.
//!
//! Flush: a sealed buffer is published in the [`Snapshot`] (so readers keep
//! seeing its spans) and sent to the flusher thread over a channel. The flusher
//! sorts it by trace ID, writes a sorted file (fsync, rename), and swaps in a new
//! snapshot that has the file and no longer has the buffer. The snapshot lock is
//! held only for that pointer swap; sorting and writing hold no lock at all.
//!
//! WAL segments are deleted once no buffered span, sealed buffer, or in-flight
//! request still needs them. A crash between writing a file and deleting the
//! segments makes recovery load some spans twice; reads return each
//! (trace ID, span ID) once, so nobody sees the duplicate.
//!
//! Read: spans move memtable -> sealed buffer -> file, each move atomic with
//! respect to the next stage, and a reader looks in that same order (memtable
//! first, then one snapshot of sealed buffers and files). So a span is never
//! missed; at worst it is seen twice and deduplicated.

use std::{
    collections::{BTreeMap, HashSet},
    fs::{self, File},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::{Condvar, Mutex};

use crate::{
    batch::{decode_batch, encode_batch},
    error::{Error, Result},
    memtable::{MemTable, MemTableOptions, Sealed},
    sort::sort_by_trace_id,
    span::{Span, TraceId},
    table::{SsTable, SsTableBuilder, TableOptions},
    wal::{Wal, WalOptions, WalStats},
};

/// How often the flusher looks for buffers past their maximum age.
const AGE_CHECK: Duration = Duration::from_millis(500);
/// How long the flusher waits before retrying a failed flush.
const FLUSH_RETRY: Duration = Duration::from_secs(1);

/// Engine configuration.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub data_dir: PathBuf,
    pub memtable: MemTableOptions,
    pub wal_segment_bytes: u64,
    pub table: TableOptions,
}

impl EngineOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineOptions {
            data_dir: data_dir.into(),
            memtable: MemTableOptions::default(),
            wal_segment_bytes: 64 << 20,
            table: TableOptions::default(),
        }
    }
}

/// What readers see besides the memtable: sealed buffers not yet flushed, and files.
/// Replaced as a whole, never mutated.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub sealed: Vec<Arc<Sealed>>,
    /// Ordered by file ID, oldest first.
    pub tables: Vec<Arc<SsTable>>,
}

/// Counters for operators and tests.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    pub memtable_spans: usize,
    pub memtable_bytes: usize,
    pub sealed_buffers: usize,
    pub tables: usize,
    pub table_bytes: u64,
    pub flushes: u64,
    pub flush_errors: u64,
    pub wal: WalStats,
}

enum Task {
    Flush(Arc<Sealed>),
    Stop,
}

struct Inner {
    tables_dir: PathBuf,
    table_opts: TableOptions,
    wal: Wal,
    memtable: MemTable,
    state: Mutex<Arc<Snapshot>>,
    /// Signalled whenever a flush installs a new snapshot.
    flushed: Condvar,
    flush_tx: Sender<Task>,
    /// Requests between WAL append and memtable append, by the lowest WAL
    /// segment they can be in: their segments must not be deleted yet.
    in_flight: Mutex<BTreeMap<u64, usize>>,
    next_table_id: AtomicU64,
    closed: AtomicBool,
    flushes: AtomicU64,
    flush_errors: AtomicU64,
    /// Held for the engine's lifetime: one process per data directory.
    _lock: File,
}

/// The storage engine. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Engine {
    inner: Arc<Inner>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Opens (or creates) the data directory: loads the sorted files, replays the
    /// WAL into the memtable, and starts the flusher.
    pub fn open(opts: EngineOptions) -> Result<Engine> {
        let dir = &opts.data_dir;
        let tables_dir = dir.join("tables");
        fs::create_dir_all(&tables_dir).map_err(|e| Error::io(&tables_dir, e))?;
        let lock = lock_data_dir(dir)?;
        let (tables, next_table_id) = load_tables(&tables_dir)?;

        let memtable = MemTable::new(opts.memtable.clone());
        let mut replayed_sealed = Vec::new();
        let wal_opts = WalOptions {
            dir: dir.join("wal"),
            segment_bytes: opts.wal_segment_bytes,
        };
        let (wal, replay) = Wal::open(wal_opts, |segment, record| {
            let spans = decode_batch(&record)?;
            memtable.append(spans, segment, |s| replayed_sealed.push(Arc::new(s)));
            Ok(())
        })?;
        tracing::info!(
            tables = tables.len(),
            wal_segments = replay.segments,
            wal_records = replay.records,
            torn_tails = replay.torn_tails,
            "storage opened"
        );

        let (flush_tx, flush_rx) = crossbeam_channel::unbounded();
        let inner = Arc::new(Inner {
            tables_dir,
            table_opts: opts.table.clone(),
            wal,
            memtable,
            state: Mutex::new(Arc::new(Snapshot {
                sealed: replayed_sealed.clone(),
                tables,
            })),
            flushed: Condvar::new(),
            flush_tx,
            in_flight: Mutex::new(BTreeMap::new()),
            next_table_id: AtomicU64::new(next_table_id),
            closed: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            flush_errors: AtomicU64::new(0),
            _lock: lock,
        });
        for sealed in replayed_sealed {
            inner.send(Task::Flush(sealed));
        }
        let worker = inner.clone();
        let flusher = std::thread::Builder::new()
            .name("tracedb-flush".into())
            .spawn(move || worker.run_flusher(flush_rx))
            .map_err(|e| Error::io(&opts.data_dir, e))?;
        Ok(Engine {
            inner,
            flusher: Mutex::new(Some(flusher)),
        })
    }

    /// Makes `spans` durable (WAL fsynced) and visible to reads. Returns once both hold.
    pub async fn write(&self, spans: Vec<Span>) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let (ticket, guard) = self.inner.log(&spans)?;
        self.inner.wal.wait_durable(ticket).await?;
        self.inner
            .memtable
            .append(spans, ticket.segment, |s| self.inner.publish(s));
        drop(guard);
        Ok(())
    }

    /// [`Engine::write`] for threads outside an async runtime.
    pub fn write_blocking(&self, spans: Vec<Span>) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let (ticket, guard) = self.inner.log(&spans)?;
        self.inner.wal.wait_durable_blocking(ticket)?;
        self.inner
            .memtable
            .append(spans, ticket.segment, |s| self.inner.publish(s));
        drop(guard);
        Ok(())
    }

    /// Every stored span of a trace, each (trace ID, span ID) once, ordered by start time.
    pub fn get_trace(&self, trace_id: &TraceId) -> Result<Vec<Span>> {
        let mut spans = Vec::new();
        self.inner.memtable.get(trace_id, &mut spans);
        let snapshot = self.snapshot();
        for sealed in snapshot.sealed.iter().rev() {
            sealed.get(trace_id, &mut spans);
        }
        for table in snapshot.tables.iter().rev() {
            if table.may_contain(trace_id) {
                spans.extend(table.get(trace_id)?);
            }
        }
        // Newest copies came first; keep those.
        let mut seen = HashSet::with_capacity(spans.len());
        spans.retain(|s| seen.insert(s.span_id));
        spans.sort_by_key(|s| s.start_unix_nano);
        Ok(spans)
    }

    /// The current set of sealed buffers and files.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.state.lock().clone()
    }

    /// Seals every buffer and waits until all sealed buffers are in files.
    pub fn flush(&self) -> Result<()> {
        self.inner
            .memtable
            .seal_where(true, |s| self.inner.publish(s));
        let mut state = self.inner.state.lock();
        while !state.sealed.is_empty() {
            if self.inner.flush_errors.load(Ordering::Relaxed) > 0 && self.flusher.lock().is_none()
            {
                return Err(Error::Closed);
            }
            self.inner.flushed.wait_for(&mut state, FLUSH_RETRY);
        }
        Ok(())
    }

    pub fn stats(&self) -> EngineStats {
        let snapshot = self.snapshot();
        let (memtable_spans, memtable_bytes) = self.inner.memtable.usage();
        EngineStats {
            memtable_spans,
            memtable_bytes,
            sealed_buffers: snapshot.sealed.len(),
            tables: snapshot.tables.len(),
            table_bytes: snapshot.tables.iter().map(|t| t.meta().file_size).sum(),
            flushes: self.inner.flushes.load(Ordering::Relaxed),
            flush_errors: self.inner.flush_errors.load(Ordering::Relaxed),
            wal: self.inner.wal.stats(),
        }
    }

    /// Stops taking writes, flushes every buffer to files, deletes the WAL
    /// segments that are no longer needed, and stops the flusher. Idempotent.
    pub fn close(&self) -> Result<()> {
        {
            let _in_flight = self.inner.in_flight.lock();
            if self.inner.closed.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
        }
        self.inner
            .memtable
            .seal_where(true, |s| self.inner.publish(s));
        self.inner.send(Task::Stop);
        if let Some(handle) = self.flusher.lock().take() {
            if handle.join().is_err() {
                tracing::error!("flusher thread panicked");
            }
        }
        let unflushed = self.snapshot().sealed.len()
            + self.inner.memtable.usage().0
            + self.inner.in_flight.lock().len();
        if unflushed == 0 {
            // Every acknowledged span is in a file: the next start replays nothing.
            self.inner.wal.close_and_discard()?;
        } else {
            self.inner.wal.close()?;
            tracing::warn!(
                unflushed,
                "closed with spans not in files; the WAL keeps them"
            );
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!(error = %e, "closing storage");
        }
    }
}

/// Removes one in-flight registration when a write is done (or fails).
struct InFlight<'a> {
    inner: &'a Inner,
    segment: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut map = self.inner.in_flight.lock();
        if let Some(n) = map.get_mut(&self.segment) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.segment);
            }
        }
    }
}

impl Inner {
    /// Appends the WAL record of `spans`. The in-flight registration is taken
    /// first, with the current segment, which is at most the segment the record
    /// lands in: so that segment cannot be deleted before the spans are buffered.
    fn log(&self, spans: &[Span]) -> Result<(crate::wal::WalTicket, InFlight<'_>)> {
        let mut record = Vec::with_capacity(spans.iter().map(|s| s.payload.len() + 48).sum());
        encode_batch(spans, &mut record);
        let segment = self.wal.current_segment();
        {
            // `close` sets `closed` under this lock: a write either registers before
            // it (and `close` sees it) or is refused.
            let mut in_flight = self.in_flight.lock();
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            *in_flight.entry(segment).or_insert(0) += 1;
        }
        let guard = InFlight {
            inner: self,
            segment,
        };
        let ticket = self.wal.append(&record)?;
        Ok((ticket, guard))
    }

    /// Makes a sealed buffer visible to readers, then queues it for flushing.
    /// Called with the shard lock held (see `memtable`).
    fn publish(&self, sealed: Sealed) {
        let sealed = Arc::new(sealed);
        {
            let mut state = self.state.lock();
            let mut next = Snapshot {
                sealed: state.sealed.clone(),
                tables: state.tables.clone(),
            };
            next.sealed.push(sealed.clone());
            *state = Arc::new(next);
        }
        self.send(Task::Flush(sealed));
    }

    fn send(&self, task: Task) {
        // The receiver lives as long as the flusher thread, which only exits on Stop.
        if self.flush_tx.send(task).is_err() {
            tracing::error!("flusher is gone; sealed buffer stays in memory and in the WAL");
        }
    }

    fn run_flusher(&self, rx: Receiver<Task>) {
        loop {
            match rx.recv_timeout(AGE_CHECK) {
                Ok(Task::Flush(sealed)) => self.flush_until_done(&sealed),
                Ok(Task::Stop) => {
                    // Everything queued before Stop has been flushed (FIFO channel).
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if !self.closed.load(Ordering::Acquire) {
                        self.memtable.seal_where(false, |s| self.publish(s));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    fn flush_until_done(&self, sealed: &Arc<Sealed>) {
        loop {
            match self.flush_one(sealed) {
                Ok(()) => return,
                Err(e) => {
                    self.flush_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, buffer = sealed.id, "flush failed; retrying");
                    if self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(FLUSH_RETRY);
                }
            }
        }
    }

    /// Sorts and writes one sealed buffer, then installs the file. No lock is held
    /// while sorting or writing.
    fn flush_one(&self, sealed: &Arc<Sealed>) -> Result<()> {
        let started = std::time::Instant::now();
        let mut spans = sealed.to_vec();
        sort_by_trace_id(&mut spans);
        let id = self.next_table_id.fetch_add(1, Ordering::Relaxed);
        let path = table_path(&self.tables_dir, id);
        let mut builder = SsTableBuilder::new(self.table_opts.clone());
        for span in &spans {
            builder.add(span)?;
        }
        let meta = builder.finish(&path)?;
        let table = Arc::new(SsTable::open(&path)?);
        {
            let mut state = self.state.lock();
            let mut next = Snapshot {
                sealed: state
                    .sealed
                    .iter()
                    .filter(|s| s.id != sealed.id)
                    .cloned()
                    .collect(),
                tables: state.tables.clone(),
            };
            next.tables.push(table);
            *state = Arc::new(next);
        }
        self.flushed.notify_all();
        self.flushes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            file = %path.display(),
            spans = meta.span_count,
            bytes = meta.file_size,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "flushed buffer"
        );
        self.trim_wal();
        Ok(())
    }

    /// Deletes WAL segments that hold nothing which is not yet in a file.
    fn trim_wal(&self) {
        let mut keep_from = self
            .wal
            .current_segment()
            .min(self.memtable.min_wal_segment());
        if let Some((&seg, _)) = self.in_flight.lock().first_key_value() {
            keep_from = keep_from.min(seg);
        }
        let snapshot = self.state.lock().clone();
        for sealed in &snapshot.sealed {
            keep_from = keep_from.min(sealed.min_wal_segment);
        }
        match self.wal.delete_segments_before(keep_from) {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, keep_from, "deleted wal segments"),
            Err(e) => tracing::warn!(error = %e, "deleting wal segments"),
        }
    }
}

fn table_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.sst"))
}

/// Loads every sorted file, removing leftovers of flushes a crash interrupted.
fn load_tables(dir: &Path) -> Result<(Vec<Arc<SsTable>>, u64)> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".tmp") {
            tracing::warn!(file = %path.display(), "removing unfinished file of an interrupted flush");
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        } else if let Some(id) = name
            .strip_suffix(".sst")
            .and_then(|s| s.parse::<u64>().ok())
        {
            found.push((id, path));
        }
    }
    found.sort();
    let next_id = found.last().map_or(0, |(id, _)| id + 1);
    let tables = found
        .into_iter()
        .map(|(_, path)| SsTable::open(&path).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    Ok((tables, next_id))
}

fn lock_data_dir(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(Error::Locked(dir.to_path_buf())),
        Err(fs::TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}
