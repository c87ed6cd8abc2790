//! The storage engine: the write path (WAL, then memtable), the read path
//! (memtable, sealed buffers, sorted files), and the background work (flush,
//! compaction, retention) tied together.
//!
//! Write: a request is first *admitted* against the memory budget and the
//! level-0 file count; if either is over its limit it is refused at once with
//! [`Error::Backpressure`] (nothing queues). Then its spans are encoded into
//! one WAL record and appended to the group-commit buffer; the request waits
//! until an fsync covers it, then appends the spans to a memtable shard. Only
//! then is it acknowledged, so an acknowledged span is on disk and visible.
//!
//! Flush (`flush`): a sealed buffer is published in the [`SuperVersion`] (so readers
//! keep seeing its spans) and sent to the flusher thread. The flusher sorts it,
//! writes a level-0 file, appends the edit to the manifest (fsync), and swaps
//! in a super-version that has the file and not the buffer.
//!
//! Compaction and retention run on their own threads (`compact`, scheduled
//! by `scheduler`, retention's rule in `retention`); they too end in
//! "manifest edit, then pointer swap" (`tree`, whose `TreeState` is the only
//! code that changes the set of live files). That swap, under the
//! state lock, is all a reader or writer can ever wait for: sorting, merging
//! and writing files happen outside every lock readers or writers take.
//!
//! Read: spans move memtable -> sealed buffer -> file, each move atomic with
//! respect to the next stage, and a reader looks in that same order. A span
//! is never missed; at worst it is seen twice, an exact repeat, and dropped
//! once ([`crate::span::drop_repeats`]).
//!
//! Shutdown ([`Engine::close`]): refuse new writes, seal and flush every
//! buffer, stop compaction (a running merge stops at the next trace and
//! removes its outputs), join the threads, then discard the WAL if every
//! acknowledged span is in a file.

mod cells;
mod cold;
mod compact;
mod flush;
mod hooks;
mod options;
mod quarantine;
mod recovery;
mod retention;
mod scan;
mod scheduler;
mod search;
mod stats;
mod tree;
mod walk;
mod write;

use std::{
    fs::{self, File},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use crossbeam_channel::Receiver;
use parking_lot::Mutex;

pub use cells::{CellsError, CellsStats};
pub use cold::{ColdPass, ColdStats};
pub use flush::write_sorted_buffer;
use flush::{FlushQueue, Task, FLUSH_RETRY};
#[cfg(feature = "test-support")]
pub use hooks::{CrashPoint, Hooks};
pub use options::{Clock, EngineOptions};
use quarantine::Quarantined;
use retention::Retention;
pub use scan::{ScanBuffers, ScanStats};
use scheduler::CompactionScheduler;
pub use search::{SearchSnapshot, TagValues, ValuesLimit};
pub use stats::EngineStats;
use stats::{add, Counters};
use tree::TreeState;
pub use walk::{Candidate, Candidates, WalkStats};
use write::WritePath;

use crate::{
    batch::decode_batch,
    budget::{MemoryBudget, Reservation},
    compaction::RateLimiter,
    error::{Backpressure, Error, Result},
    fault::Faults,
    layout,
    manifest::Edit,
    memtable::{MemTable, Sealed},
    span::{Span, TraceId},
    trash::Trash,
    version::{Janitor, SuperVersion, TableFile, TimeRange, Version},
    wal::{ReplayStats, Wal, WalOptions},
};

/// What [`Engine::lookup_trace`] found.
#[derive(Debug, Clone, Default)]
pub struct TraceLookup {
    /// The spans read, exact repeats dropped, in [`Span::read_order`].
    pub spans: Vec<Span>,
    /// Files that may hold more spans of the trace but could not be read.
    pub skipped: Vec<SkippedFile>,
}

impl TraceLookup {
    /// Whether the spans may be incomplete.
    pub fn is_partial(&self) -> bool {
        !self.skipped.is_empty()
    }
}

/// A file a lookup could not read: damaged, and quarantined unless moving it
/// failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFile {
    pub id: u64,
    /// Where the file is now (in `quarantine/` once moved there).
    pub path: PathBuf,
    /// What was wrong, with the offset where the damage was found, for the
    /// operator reading the response.
    pub reason: String,
}

/// The snapshot readers take; the name the vertical slice used.
pub type Snapshot = SuperVersion;

/// Retry hints returned with [`Error::Backpressure`].
const RETRY_MEMORY: Duration = Duration::from_millis(200);
const RETRY_L0: Duration = Duration::from_secs(1);

/// The state every engine thread shares. The write path ([`WritePath`]:
/// WAL, memtable, budget, writes in flight), the tree ([`TreeState`]),
/// flush, compaction scheduling and retention each have an owner holding
/// their own state ([`FlushQueue`], [`CompactionScheduler`], [`Retention`]);
/// the rest is the files' life (quarantine, janitor, trash), the counters,
/// the index cache and the object store.
struct Inner {
    opts: EngineOptions,
    tables_dir: PathBuf,
    /// What a write passes through before it is acknowledged.
    write: WritePath,
    /// The live files: the current super-version, the manifest, the next
    /// file ID, the level-0 count. The only way the tree changes.
    tree: TreeState,
    /// The flush queue and its "flushed" signal.
    flush: FlushQueue,
    /// Files in `quarantine/`: lookups they may have answered are incomplete.
    quarantined: Mutex<Vec<Quarantined>>,
    /// Which files running compactions hold; pause and stop.
    scheduler: CompactionScheduler,
    /// The retention period and when spans are past it.
    retention: Retention,
    /// Caps the bytes compaction writes per second.
    limiter: RateLimiter,
    /// Given to each new file: deletes it once obsolete.
    janitor: Arc<Janitor>,
    /// Frees deleted files a step at a time (WAL segments and, through the
    /// janitor, sorted files).
    trash: Arc<Trash>,
    counters: Counters,
    /// Summaries of files and buffers for the search index.
    summary_cache: search::SummaryCache,
    /// The object store, its lease, block cache and worker's state.
    cold: Option<cold::ColdState>,
    /// Held for the engine's lifetime: one process per data directory.
    _lock: File,
}

/// The storage engine. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Engine {
    inner: Arc<Inner>,
    threads: Mutex<Threads>,
}

#[derive(Default)]
struct Threads {
    flusher: Option<JoinHandle<()>>,
    compactors: Vec<JoinHandle<()>>,
    cold: Option<JoinHandle<()>>,
}

impl Threads {
    /// Starts the flusher (reading `flush_rx`) and the compaction threads.
    fn spawn(inner: &Arc<Inner>, flush_rx: Receiver<Task>) -> Result<Threads> {
        let dir = &inner.opts.data_dir;
        let mut threads = Threads::default();
        let worker = inner.clone();
        threads.flusher = Some(
            tracedb_sched::spawn(
                std::thread::Builder::new().name("tracedb-flush".into()),
                tracedb_sched::Slice::Default,
                move || worker.run_flusher(flush_rx),
            )
            .map_err(|e| Error::io(dir, e))?,
        );
        for i in 0..inner.opts.compaction_threads {
            let worker = inner.clone();
            threads.compactors.push(
                tracedb_sched::spawn(
                    std::thread::Builder::new().name(format!("tracedb-compact-{i}")),
                    tracedb_sched::Slice::Default,
                    move || worker.run_compactor(),
                )
                .map_err(|e| Error::io(dir, e))?,
            );
        }
        if inner.cold.is_some() {
            let worker = inner.clone();
            threads.cold = Some(
                std::thread::Builder::new()
                    .name("tracedb-cold".into())
                    .spawn(move || worker.run_cold())
                    .map_err(|e| Error::io(dir, e))?,
            );
        }
        Ok(threads)
    }
}

/// Step 1 of [`Engine::open`]: the data directory locked, its sorted files
/// recovered (see `recovery`), and the files in quarantine listed.
struct DataDir {
    tables_dir: PathBuf,
    lock: File,
    trash: Arc<Trash>,
    janitor: Arc<Janitor>,
    recovered: recovery::Recovered,
    quarantined: Vec<Quarantined>,
    cold: Option<cold::ColdState>,
}

impl DataDir {
    fn open(opts: &EngineOptions, faults: &Faults) -> Result<DataDir> {
        let dir = &opts.data_dir;
        let tables_dir = layout::tables_dir(dir);
        let fresh = !layout::manifest_path(dir).exists();
        fs::create_dir_all(&tables_dir).map_err(|e| Error::io(&tables_dir, e))?;
        let lock = lock_data_dir(dir)?;
        let trash = Trash::open(dir)?;
        // With an object store: the lease first (one node per prefix), then
        // an empty directory restored from the bucket's manifest.
        let cold_start = match &opts.cold {
            None => None,
            Some(c) => {
                let lease = crate::cold::Lease::acquire(
                    &c.bucket,
                    &crate::cold::node_id(dir)?,
                    c.lease_ttl,
                )?;
                let empty = fs::read_dir(&tables_dir)
                    .map_err(|e| Error::io(&tables_dir, e))?
                    .next()
                    .is_none();
                let restored = fresh && empty && crate::cold::restore(&c.bucket, dir)?;
                let cache = Arc::new(crate::cold::BlockCache::open(
                    layout::cache_dir(dir),
                    c.block_cache_bytes,
                )?);
                let deletes = Arc::new(crate::version::ObjectDeletes::default());
                Some((c.clone(), lease, cache, deletes, restored))
            }
        };
        let janitor = Arc::new(Janitor {
            enabled: AtomicBool::new(true),
            trash: Some(trash.clone()),
            cold: cold_start.as_ref().map(|c| c.3.clone()),
        });
        let remote = cold_start
            .as_ref()
            .map(|(c, _, cache, _, _)| (c.bucket.clone(), cache.clone()));
        let recovered = recovery::recover(
            dir,
            &tables_dir,
            opts.compaction.levels,
            &janitor,
            faults,
            remote.as_ref(),
        )?;
        let live = recovered.version.files().map(|f| f.id).collect();
        crate::index::remove_orphans(&tables_dir, &live)?;
        let remote_live: std::collections::HashSet<u64> = recovered
            .version
            .files()
            .filter(|f| f.remote)
            .map(|f| f.id)
            .collect();
        recovery::remove_orphan_heads(&tables_dir, &remote_live)?;
        let cold = cold_start.map(|(c, lease, cache, deletes, restored)| {
            cold::ColdState::new(c, cache, lease, deletes, restored)
        });
        let quarantined = quarantine::list_quarantined(dir)?;
        if !quarantined.is_empty() {
            tracing::warn!(
                files = quarantined.len(),
                dir = %layout::quarantine_dir(dir).display(),
                "damaged sorted files are in quarantine; lookups they may have answered are reported incomplete until they are removed"
            );
        }
        Ok(DataDir {
            tables_dir,
            lock,
            trash,
            janitor,
            recovered,
            quarantined,
            cold,
        })
    }
}

/// Step 2 of [`Engine::open`]: the WAL replayed into a new memtable.
struct Replayed {
    wal: Wal,
    memtable: MemTable,
    /// Buffers the replay filled: published at once and queued for flushing.
    sealed: Vec<Arc<Sealed>>,
    /// Bytes of the replayed spans, counted against the memory budget.
    bytes: usize,
    stats: ReplayStats,
}

impl Replayed {
    fn from_wal(opts: &EngineOptions, faults: &Faults) -> Result<Replayed> {
        let memtable = MemTable::new(opts.memtable.clone());
        let mut sealed = Vec::new();
        let mut bytes = 0usize;
        let wal_opts = WalOptions {
            dir: layout::wal_dir(&opts.data_dir),
            segment_bytes: opts.wal_segment_bytes,
            sync_thread_slice: opts.request_thread_slice,
            faults: faults.clone(),
        };
        let (wal, stats) = Wal::open(wal_opts, |segment, record| {
            let spans = decode_batch(&record)?;
            bytes += spans.iter().map(Span::memory_size).sum::<usize>();
            memtable.append(spans, segment, |s| sealed.push(Arc::new(s)));
            Ok(())
        })?;
        Ok(Replayed {
            wal,
            memtable,
            sealed,
            bytes,
            stats,
        })
    }
}

/// Step 3 of [`Engine::open`]: what was found, for the operator.
fn log_opened(dir: &DataDir, replayed: &Replayed) {
    tracing::info!(
        files_per_level = ?level_files(&dir.recovered.version),
        wal_segments = replayed.stats.segments,
        wal_records = replayed.stats.records,
        torn_tails = replayed.stats.torn_tails,
        "storage opened"
    );
}

fn level_files(version: &Version) -> Vec<usize> {
    version.level_stats().iter().map(|l| l.files).collect()
}

impl Engine {
    /// Opens (or creates) the data directory: recovers the files the manifest
    /// names, replays the WAL into the memtable, and starts the flusher and
    /// the compaction threads.
    pub fn open(mut opts: EngineOptions) -> Result<Engine> {
        let faults = Faults::new(opts.fault_injector());
        opts.table.faults = faults.clone();
        let dir = DataDir::open(&opts, &faults)?;
        let replayed = Replayed::from_wal(&opts, &faults)?;
        log_opened(&dir, &replayed);
        let (inner, flush_rx) = Inner::new(opts, faults, dir, replayed);
        let threads = Threads::spawn(&inner, flush_rx)?;
        Ok(Engine {
            inner,
            threads: Mutex::new(threads),
        })
    }

    /// The memory budget the engine's buffered spans count against; reads
    /// that hold much (a search's traces) take their share of it too.
    pub fn memory_budget(&self) -> &Arc<MemoryBudget> {
        &self.inner.write.budget
    }

    /// The attributes the metrics cells of the files this engine writes
    /// count ([`crate::table::TableOptions::cell_attributes`]).
    pub fn cell_attributes(&self) -> &Arc<crate::index::cells::CellAttributes> {
        &self.inner.opts.table.cell_attributes
    }

    /// Threads a query may read or evaluate with at once
    /// ([`EngineOptions::search_threads`]).
    pub fn search_threads(&self) -> usize {
        self.inner.opts.search_threads
    }

    /// Makes `spans` durable (WAL fsynced) and visible to reads. Returns once
    /// both hold, or at once with [`Error::Backpressure`] if the engine is
    /// over its memory budget or compaction is behind.
    pub async fn write(&self, spans: Vec<Span>) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let reservation = self.inner.admit(&spans)?;
        let write = &self.inner.write;
        let (ticket, guard) = write.log(&spans)?;
        write.wal.wait_durable(ticket).await?;
        write
            .memtable
            .append(spans, ticket.segment, |s| self.inner.publish(s));
        reservation.keep();
        drop(guard);
        Ok(())
    }

    /// [`Engine::write`] for threads outside an async runtime.
    pub fn write_blocking(&self, spans: Vec<Span>) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let reservation = self.inner.admit(&spans)?;
        let write = &self.inner.write;
        let (ticket, guard) = write.log(&spans)?;
        write.wal.wait_durable_blocking(ticket)?;
        write
            .memtable
            .append(spans, ticket.segment, |s| self.inner.publish(s));
        reservation.keep();
        drop(guard);
        Ok(())
    }

    /// Every stored span of a trace, each (trace ID, span ID) once, ordered by
    /// start time. Spans past retention are not returned. Damaged files are
    /// skipped (and quarantined); [`Engine::lookup_trace`] says whether any was.
    pub fn get_trace(&self, trace_id: &TraceId) -> Result<Vec<Span>> {
        self.get_trace_in(trace_id, TimeRange::ALL)
    }

    /// [`Engine::get_trace`] with a time hint: files whose spans all lie
    /// outside `range` are not read. Spans in memory and in the files read are
    /// all returned, inside the range or not; spans only in skipped files are not.
    pub fn get_trace_in(&self, trace_id: &TraceId, range: TimeRange) -> Result<Vec<Span>> {
        self.lookup_trace(trace_id, range).map(|found| found.spans)
    }

    /// Asks the kernel to read ahead the file blocks that hold the trace's
    /// spans (see [`crate::table::SsTable::prefetch`]): a search calls it
    /// for the next candidates while it reads the current one.
    pub fn prefetch_trace(&self, trace_id: &TraceId) {
        let snapshot = self.snapshot();
        for file in snapshot.version.candidates(trace_id, TimeRange::ALL) {
            file.table().prefetch(trace_id);
        }
    }

    /// [`Engine::get_trace_in`], and the files that may hold spans of the
    /// trace but could not be read: a file that fails its checksums here is
    /// quarantined (see `engine/quarantine.rs`) and reported, and so is every
    /// file already in `quarantine/` that may hold the trace. A non-empty
    /// [`TraceLookup::skipped`] means the spans may be incomplete.
    pub fn lookup_trace(&self, trace_id: &TraceId, range: TimeRange) -> Result<TraceLookup> {
        let c = &self.inner.counters;
        add(&c.lookups, 1);
        let mut spans = Vec::new();
        let mut skipped = Vec::new();
        self.inner.write.memtable.get(trace_id, &mut spans);
        let snapshot = self.snapshot();
        for sealed in snapshot.sealed.iter().rev() {
            sealed.get(trace_id, &mut spans);
        }
        for file in snapshot.version.candidates(trace_id, range) {
            match file.table().lookup(trace_id) {
                Ok((found, blocks)) => {
                    add(&c.lookup_files_read, 1);
                    add(&c.blocks_read, blocks);
                    spans.extend(found);
                }
                Err(e) => {
                    add(&c.lookup_errors, 1);
                    let (_, offset) = e.location().unwrap_or((file.path(), None));
                    tracing::error!(
                        file = %file.path().display(),
                        offset,
                        error = %e,
                        trace_id = %trace_id,
                        "reading a sorted file failed; the trace may be incomplete"
                    );
                    let moved = e.is_corruption() && self.inner.quarantine(file.id, &e);
                    if !moved {
                        skipped.push(SkippedFile {
                            id: file.id,
                            path: file.path().to_path_buf(),
                            reason: e.to_string(),
                        });
                    }
                }
            }
        }
        for q in self.inner.quarantined.lock().iter() {
            if q.may_hold(trace_id) && !skipped.iter().any(|s| s.id == q.id) {
                skipped.push(SkippedFile {
                    id: q.id,
                    path: q.path.clone(),
                    reason: q.reason.clone(),
                });
            }
        }
        let expire_before = self.inner.retention.expire_before();
        spans.retain(|s| s.end_unix_nano >= expire_before);
        crate::span::drop_repeats(&mut spans);
        Ok(TraceLookup { spans, skipped })
    }

    /// Spans that end before this (Unix nanoseconds) are past retention: no
    /// read returns them and retention drops their files. 0 with retention off.
    pub fn expire_before(&self) -> u64 {
        self.inner.retention.expire_before()
    }

    /// The engine's clock (the system clock unless a test set another).
    pub fn now_unix_nano(&self) -> u64 {
        self.inner.opts.clock.now_unix_nano()
    }

    /// The current sealed buffers and files.
    pub fn snapshot(&self) -> Arc<SuperVersion> {
        self.inner.tree.current()
    }

    /// Seals every buffer, waits until all sealed buffers are in files and
    /// deletes the log segments they came from.
    pub fn flush(&self) -> Result<()> {
        self.inner
            .write
            .memtable
            .seal_where(true, |s| self.inner.publish(s));
        self.inner
            .tree
            .wait_for_sealed(&self.inner.flush, FLUSH_RETRY, || {
                self.inner.tree.is_crashed()
                    || (self.inner.write.is_closed() && self.threads.lock().flusher.is_none())
            })?;
        // The flusher trims the log after it installs a file, so the last
        // buffer's segments may still be there when its file is in the
        // tree; trim here too, so what was flushed has left the log.
        self.inner.trim_wal();
        Ok(())
    }

    /// Runs compaction in the calling thread until [`crate::compaction::pick`]
    /// finds nothing to do (waiting for tasks of background threads that
    /// block the next pick). Returns the number of tasks run here.
    pub fn compact(&self) -> Result<usize> {
        self.inner.compact_until_idle()
    }

    /// Applies retention now; returns the number of files dropped.
    pub fn apply_retention(&self) -> Result<usize> {
        self.inner.apply_retention()
    }

    /// Keeps spans for `period` from now on (`None`: everything): reads
    /// leave out what is past it at once, and the background threads drop
    /// its files at their next pass.
    pub fn set_retention(&self, period: Option<std::time::Duration>) {
        self.inner.retention.set(period);
    }

    /// The retention period now; `None` keeps everything.
    pub fn retention(&self) -> Option<std::time::Duration> {
        self.inner.retention.period()
    }

    /// Pauses background compaction: a running merge waits at its next trace.
    pub fn pause_compaction(&self) {
        self.inner.scheduler.set_paused(true);
    }

    pub fn resume_compaction(&self) {
        self.inner.scheduler.set_paused(false);
    }

    /// `Err(Error::Backpressure)` while compaction is so far behind that writes
    /// are refused: lets the ingest layer turn a request away before reading
    /// and scanning its body. One atomic load.
    pub fn check_pressure(&self) -> Result<()> {
        self.inner.l0_pressure()
    }

    /// Bytes of spans this engine holds unflushed: its memtable and sealed
    /// buffers.
    pub fn buffered_bytes(&self) -> usize {
        let sealed: usize = self.snapshot().sealed.iter().map(|b| b.bytes).sum();
        self.inner.write.memtable.usage().1 + sealed
    }

    pub fn stats(&self) -> EngineStats {
        let snapshot = self.snapshot();
        let (memtable_spans, memtable_bytes) = self.inner.write.memtable.usage();
        let levels = snapshot.version.level_stats();
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            memtable_spans,
            memtable_bytes,
            sealed_buffers: snapshot.sealed.len(),
            sealed_spans: snapshot.sealed.iter().map(|s| s.span_count).sum(),
            memory_bytes: self.inner.write.budget.buffered(),
            memory_budget_bytes: self.inner.write.budget.limit(),
            index_cache_bytes: self.inner.summary_cache.file_bytes(),
            cells_sections_bytes: self.inner.summary_cache.cells_files().sections_bytes(),
            cells_dict_bytes: self.inner.summary_cache.cells_files().dict_bytes(),
            tables: levels.iter().map(|l| l.files).sum(),
            table_bytes: levels.iter().map(|l| l.bytes).sum(),
            levels,
            flushes: get(&c.flushes),
            flush_errors: get(&c.flush_errors),
            compactions: get(&c.compactions),
            compaction_moves: get(&c.compaction_moves),
            compaction_errors: get(&c.compaction_errors),
            merges_run_first: get(&c.merges_run_first),
            merges_waited_for_memory: get(&c.merges_waited_for_memory),
            compaction_bytes_read: get(&c.compaction_bytes_read),
            compaction_bytes_written: get(&c.compaction_bytes_written),
            flush_bytes_written: get(&c.flush_bytes_written),
            compaction_duplicates: get(&c.compaction_duplicates),
            compaction_index_parts_reused: get(&c.compaction_index_parts_reused),
            compaction_cells_summed: get(&c.compaction_cells_summed),
            retention_files_dropped: get(&c.retention_files_dropped),
            retention_bytes_dropped: get(&c.retention_bytes_dropped),
            expired_spans_dropped: get(&c.expired_spans_dropped),
            lookups: get(&c.lookups),
            lookup_files_read: get(&c.lookup_files_read),
            blocks_read: get(&c.blocks_read),
            backpressure_rejections: get(&c.backpressure_rejections),
            lookup_errors: get(&c.lookup_errors),
            quarantined_files: self.inner.quarantined.lock().len(),
            wal: self.inner.write.wal.stats(),
        }
    }

    /// Stops taking writes, flushes every buffer to files, stops compaction,
    /// joins the threads, and deletes the WAL segments that are no longer
    /// needed. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.shut_down(false)
    }

    /// Stops the engine as a crash would (feature `test-support`, for
    /// tests): no flush, nothing more written or deleted; acknowledged spans
    /// stay in the WAL. Reopening the directory then exercises recovery.
    #[cfg(feature = "test-support")]
    pub fn abandon(&self) {
        if let Err(e) = self.shut_down(true) {
            tracing::warn!(error = %e, "abandoning storage");
        }
    }

    fn shut_down(&self, crash: bool) -> Result<()> {
        let inner = &self.inner;
        if crash {
            inner.tree.crash();
        }
        if !inner.write.close() {
            return Ok(());
        }
        let crashed = inner.tree.is_crashed();
        if !crashed {
            inner.write.memtable.seal_where(true, |s| inner.publish(s));
        }
        inner.flush.stop();
        let threads = std::mem::take(&mut *self.threads.lock());
        if let Some(handle) = threads.flusher {
            if handle.join().is_err() {
                tracing::error!("flusher thread panicked");
            }
        }
        inner.scheduler.stop();
        for handle in threads.compactors {
            if handle.join().is_err() {
                tracing::error!("compaction thread panicked");
            }
        }
        if let Some(cold) = &inner.cold {
            cold.stop();
        }
        if let Some(handle) = threads.cold {
            if handle.join().is_err() {
                tracing::error!("object store thread panicked");
            }
        }
        // Nothing deletes files in steps from here on: what waits in the
        // trash goes now, and later deletes happen at once.
        inner.trash.close();
        let unflushed = self.snapshot().sealed.len()
            + inner.write.memtable.usage().0
            + inner.write.segments_in_flight();
        if unflushed == 0 && !crashed {
            // Every acknowledged span is in a file: the next start replays nothing.
            inner.write.wal.close_and_discard()?;
        } else {
            inner.write.wal.close()?;
            if !crashed {
                tracing::warn!(
                    unflushed,
                    "closed with spans not in files; the WAL keeps them"
                );
            }
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

impl Inner {
    /// Step 4 of [`Engine::open`]: the shared state over the recovered tree
    /// and the replayed memtable, with the buffers the replay sealed already
    /// queued for the flusher (whose end of the queue is returned).
    fn new(
        opts: EngineOptions,
        faults: Faults,
        dir: DataDir,
        replayed: Replayed,
    ) -> (Arc<Inner>, Receiver<Task>) {
        let (flush, flush_rx) = FlushQueue::new();
        let budget = opts
            .memory_budget
            .clone()
            .unwrap_or_else(|| MemoryBudget::new(opts.memory_budget_bytes));
        budget.hold(replayed.bytes);
        let tree = TreeState::new(
            opts.data_dir.clone(),
            faults,
            dir.janitor.clone(),
            dir.recovered.manifest,
            dir.recovered.next_file_id,
            dir.recovered.version,
            replayed.sealed.clone(),
        );
        let inner = Arc::new(Inner {
            tables_dir: dir.tables_dir,
            write: WritePath::new(replayed.wal, replayed.memtable, budget),
            tree,
            flush,
            quarantined: Mutex::new(dir.quarantined),
            scheduler: CompactionScheduler::new(opts.compaction.clone(), opts.compaction_threads),
            retention: Retention::new(opts.retention, opts.retention_interval, opts.clock.clone()),
            limiter: RateLimiter::new(opts.compaction_bytes_per_sec),
            janitor: dir.janitor,
            trash: dir.trash,
            counters: Counters::default(),
            summary_cache: search::SummaryCache::new(opts.index_cache_bytes),
            cold: dir.cold,
            _lock: dir.lock,
            opts,
        });
        for sealed in replayed.sealed {
            inner.flush.push(sealed);
        }
        (inner, flush_rx)
    }

    /// Installs `edit` ([`TreeState::install`]), then forgets the
    /// search-index summaries of the files it removed: a flush's file
    /// (`flushed`, the sealed buffer it replaces), a move or retention's.
    fn install(&self, edit: Edit, added: Vec<Arc<TableFile>>, flushed: Option<u64>) -> Result<()> {
        self.install_at(edit, added, flushed, hooks::NO_CRASH)
    }

    /// [`Inner::install`] for a merge's outputs, which a test may crash at
    /// one of the steps (`crash`, see `hooks`).
    fn install_merged(
        &self,
        edit: Edit,
        added: Vec<Arc<TableFile>>,
        crash: hooks::CrashAt,
    ) -> Result<()> {
        self.install_at(edit, added, None, crash)
    }

    fn install_at(
        &self,
        edit: Edit,
        added: Vec<Arc<TableFile>>,
        flushed: Option<u64>,
        crash: hooks::CrashAt,
    ) -> Result<()> {
        self.tree.install(&edit, added, flushed, crash)?;
        self.summary_cache.remove_files(&edit.removed);
        Ok(())
    }

    /// Refuses writes while level 0 holds `l0_stop_files` files: compaction is
    /// behind, and more flushes would only make every lookup slower.
    fn l0_pressure(&self) -> Result<()> {
        let files = self.tree.l0_files();
        let limit = self.opts.l0_stop_files;
        if limit > 0 && files >= limit {
            add(&self.counters.backpressure_rejections, 1);
            return Err(Error::Backpressure {
                reason: Backpressure::TooManyL0Files { files, limit },
                retry_after: RETRY_L0,
            });
        }
        Ok(())
    }

    /// Asks the memory budget to take a write (see [`crate::budget`]), after
    /// the level-0 check; a refusal is [`Error::Backpressure`].
    fn admit(&self, spans: &[Span]) -> Result<Reservation<'_>> {
        self.l0_pressure()?;
        let bytes: usize = spans.iter().map(Span::memory_size).sum();
        self.write.budget.reserve(bytes).map_err(|refused| {
            add(&self.counters.backpressure_rejections, 1);
            Error::Backpressure {
                reason: Backpressure::MemoryBudget {
                    used: refused.in_use,
                    budget: refused.limit,
                },
                retry_after: RETRY_MEMORY,
            }
        })
    }
}

pub(crate) fn lock_data_dir(dir: &Path) -> Result<File> {
    let path = layout::lock_path(dir);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    // A lock just released can still be held for a moment: a child process
    // forked by another thread of this process shares the released file's
    // description until it execs. So a held lock is tried again for a while
    // before the directory counts as another process's.
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(fs::TryLockError::WouldBlock) => return Err(Error::Locked(dir.to_path_buf())),
            Err(fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
    }
}

/// How long a held data-directory lock is tried again before the directory
/// counts as another process's.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);
