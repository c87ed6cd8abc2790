//! The write-ahead log: every accepted batch is made durable here before the
//! client hears "ok", so a crash loses nothing that was acknowledged.
//!
//! # Group commit
//!
//! An fsync costs milliseconds, far more than encoding a record, so records
//! share fsyncs. [`Wal::append`] only frames the payload into an in-memory
//! buffer under a short lock and returns a [`WalTicket`]; it never touches the
//! disk. One sync thread takes the whole buffer, writes it to the segment file,
//! calls `fdatasync`, and then publishes the highest durable log sequence
//! number (LSN). Waiters compare their ticket's LSN against it, async ones
//! through a `tokio::sync::watch`, blocking ones through a condvar. While one
//! fsync runs, new records pile up in the buffer and go out together in the
//! next one, so the fsync rate adapts to the disk, not to the request rate.
//! The sync thread is only woken when the buffer goes from empty to non-empty.
//!
//! LSNs number the records appended since [`Wal::open`], starting at 1; they
//! are not stored on disk.
//!
//! # Failure
//!
//! A failed write or fsync (a full disk, an I/O error) fails every record that
//! was not yet durable: their waiters get [`Error::WalFailed`], which the
//! ingest layer reports as retryable, and none of them was acknowledged. The
//! log then *abandons the segment* and the next append starts a new one; it
//! never writes to the failed segment again. The reason is fsync's contract:
//! after a failed fsync the kernel may have dropped the dirty pages and marked
//! them clean, so a retried fsync on the same file can report success for
//! bytes that never reached the disk (the "fsyncgate" behaviour of Linux).
//! Writing the next records into a fresh file, created, written and fsynced
//! from the copies still in memory, does not depend on those pages. The failed
//! segment is cut back, best effort, to the length its last good fsync
//! covered; if that fails too, its tail is garbage that replay treats as
//! damage in an older segment (logged, the records before it kept). Records
//! written to it but not acknowledged may come back at restart: a client that
//! retried them sends them again, and spans are deduplicated at read.
//!
//! So the log never stays broken: while the disk is full each group commit
//! fails and its writers get a retryable error; once space returns, the next
//! group commit creates a segment and succeeds. Only a panic of the sync
//! thread stops the log for good.
//!
//! # Segments and recovery
//!
//! The log is a directory of numbered segment files (layout in
//! `docs/FORMAT.md`, "Write-ahead log segment"). Appends go to one segment; it
//! is closed when it passes [`WalOptions::segment_bytes`] and the next one
//! starts, so the engine can delete whole segments once their records are in
//! sorted files. A closed segment ends with an end mark, and the mark and the
//! last records are fsynced before the next segment is created; each run of
//! the process starts a fresh segment (and a clean close end-marks the last
//! one), so only the newest segment on disk can end in a torn write.
//!
//! [`Wal::open`] replays every segment in id order. A damaged record at the
//! end of the newest segment is a write the crash interrupted: the file is cut
//! back to the last intact record and replay goes on. A damaged record in an
//! older segment cannot come from a crash (the segment was fsynced whole
//! before its successor existed); it is bit rot or tampering. Replay of that
//! segment stops at the damage, an error is logged, and later segments are
//! still replayed: refusing to start would lose every later record, while the
//! records past the damage in that segment cannot be trusted to be framed
//! right. The file is left untouched for inspection.
//!
//! # Recycled segments
//!
//! An fdatasync after an append must also commit the file's new size and
//! blocks to the file system's journal; one after an overwrite of blocks the
//! file already has commits data alone, and costs about a quarter less (see
//! `docs/decisions/0017-zero-filled-wal-segments.md`). So
//! [`Wal::delete_segments_before`] keeps up to [`MAX_SPARES`] of the segments
//! it removes, the newest, as *spare* files (`{id:020}.wal.spare`, which the
//! segment listing ignores), and the sync thread starts its next segment in a
//! spare when there is one: the new header is written over the old one and
//! fsynced, then the file is renamed to the new segment's name and the
//! directory fsynced, and records overwrite the old ones. Spares left by an
//! earlier run are taken too; [`Wal::close_and_discard`] removes them.
//!
//! The old records after the new segment's end are stale. Each record's
//! checksum is seeded with its segment id, so a stale record fails its check
//! and reads as the end of the segment; the end mark tells a cleanly closed
//! recycled segment from a damaged one (details in `wal/segment.rs`). A
//! crash leaves the newest segment's stale bytes in place; they look like a
//! torn tail and recovery cuts them off, as abandoning a segment after a
//! failed write does.

pub(crate) mod segment;
mod sync;

#[cfg(test)]
mod tests;

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::{
    error::{Error, Result},
    fault::Faults,
    trash::Trash,
};

pub use segment::MAX_RECORD_LEN;
use segment::{
    encode_record, framed_len, list_segments, list_spares, segment_path, spare_path, HEADER_LEN,
};

/// Most spare files kept for reuse: enough for the next rotation or two; each
/// holds a segment's worth of disk space ([`WalOptions::segment_bytes`]).
pub const MAX_SPARES: usize = 2;

/// Where the log lives and when it rotates.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Directory of the segment files; created if missing.
    pub dir: PathBuf,
    /// A segment is closed once it holds this many bytes; a segment may exceed
    /// it by at most one record.
    pub segment_bytes: u64,
    /// Scheduler time slice the sync thread asks for ([`tracedb_sched`]);
    /// every acknowledgement waits on that thread. Zero leaves it the slice
    /// it inherits from the thread that opens the log.
    pub sync_thread_slice: std::time::Duration,
    /// File operations, with faults injected by tests.
    #[doc(hidden)]
    pub faults: Faults,
}

impl WalOptions {
    /// Options for a log in `dir` with 64 MiB segments.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        WalOptions {
            dir: dir.into(),
            segment_bytes: 64 << 20,
            sync_thread_slice: std::time::Duration::ZERO,
            faults: Faults::default(),
        }
    }
}

/// Names one appended record: the segment it is written to and its LSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalTicket {
    pub segment: u64,
    pub lsn: u64,
}

/// What [`Wal::open`] found on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Segments with a valid header that were replayed.
    pub segments: usize,
    /// Records handed to the replay callback.
    pub records: u64,
    /// Payload bytes handed to the replay callback.
    pub bytes: u64,
    /// Newest segments whose torn or damaged tail was cut off.
    pub torn_tails: usize,
    /// Older segments whose replay stopped early at a damaged record.
    pub corrupt_segments: usize,
}

/// Counters since [`Wal::open`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Every fsync and fdatasync issued: segment data, new segment files and
    /// the directory.
    pub fsyncs: u64,
    /// Batches of records made durable by one fdatasync each.
    pub group_commits: u64,
    /// Records accepted by [`Wal::append`].
    pub records: u64,
    /// Bytes written to segment files, headers and framing included.
    pub bytes_written: u64,
    /// Segments started, the one started by `open` included, in a new file or
    /// in a spare one.
    pub segments_created: u64,
    /// Those of `segments_created` that reused a spare file (a flushed
    /// segment) instead of a new file.
    pub segments_recycled: u64,
    /// fdatasyncs of segment data (the group-commit syncs), and the time they
    /// took in total and at most: mean latency is `data_sync_nanos / data_syncs`.
    pub data_syncs: u64,
    pub data_sync_nanos: u64,
    pub data_sync_max_nanos: u64,
}

/// The write-ahead log. Cheap to share behind an `Arc`; see the module docs.
pub struct Wal {
    shared: Arc<Shared>,
    /// The sync thread, taken by the first `close`.
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// State shared by the appenders, the waiters and the sync thread.
struct Shared {
    dir: PathBuf,
    segment_bytes: u64,
    state: Mutex<State>,
    /// Signalled when `pending` turns non-empty or `stopping` is set.
    has_work: Condvar,
    /// Signalled whenever `durable_lsn`, `failed` or `stopped` changes.
    progress_changed: Condvar,
    /// The same news as `progress_changed`, for async waiters.
    progress: watch::Sender<Progress>,
    counters: Counters,
    faults: Faults,
    /// Old ids of the spare files ready for reuse, at most [`MAX_SPARES`].
    /// Only ids whose spare name is durable (the directory was fsynced after
    /// the rename) are in it, so that a header written over a spare can never
    /// show up under its old segment name after a crash.
    spares: Mutex<Vec<u64>>,
    /// Held by [`Wal::delete_segments_before`] and [`Wal::close_and_discard`]
    /// throughout, so that two calls cannot both fill the same free spare
    /// slots. The sync thread only takes spares, so it never waits for it.
    trimming: Mutex<()>,
}

/// Everything the state lock guards.
struct State {
    /// Framed records not yet taken by the sync thread, one chunk per segment.
    pending: Vec<Chunk>,
    /// An emptied buffer the sync thread handed back, to avoid reallocating.
    spare: Vec<u8>,
    /// LSN the next append gets.
    next_lsn: u64,
    /// Segment new appends go to.
    segment: u64,
    /// Bytes `segment` will hold once everything pending is written.
    segment_len: u64,
    /// Every record with an LSN up to this one is written and fdatasynced.
    durable_lsn: u64,
    /// Segment the sync thread has open; every segment before it is complete.
    writer_segment: u64,
    /// Records that failed, oldest first; see [`FailedRange`].
    failures: Arc<Vec<FailedRange>>,
    /// Why the log stopped for good (its sync thread panicked), if it did.
    broken: Option<Arc<str>>,
    /// `close` was called: refuse appends, drain, then stop.
    stopping: bool,
    /// The sync thread has exited; nothing more will become durable.
    stopped: bool,
}

/// Framed records bound for one segment.
struct Chunk {
    segment: u64,
    /// LSN of the last record in `bytes`.
    last_lsn: u64,
    bytes: Vec<u8>,
}

/// LSNs `first..=last` whose write or fsync failed. Kept until the segments
/// they were bound for are deleted, so a waiter that wakes late still learns
/// that its record failed even after later records became durable.
#[derive(Debug, Clone)]
struct FailedRange {
    first: u64,
    last: u64,
    /// Highest segment any of the records was bound for.
    segment: u64,
    reason: Arc<str>,
}

/// What the sync thread publishes to waiters.
#[derive(Debug, Clone, Default)]
struct Progress {
    durable_lsn: u64,
    failures: Arc<Vec<FailedRange>>,
    broken: Option<Arc<str>>,
    stopped: bool,
}

impl Progress {
    /// How a wait for `lsn` ends, or `None` while it must go on waiting.
    fn outcome(&self, lsn: u64) -> Option<Result<()>> {
        let at = self.failures.partition_point(|r| r.last < lsn);
        if let Some(r) = self.failures.get(at).filter(|r| r.first <= lsn) {
            Some(Err(Error::WalFailed(r.reason.to_string())))
        } else if lsn <= self.durable_lsn {
            Some(Ok(()))
        } else if let Some(msg) = &self.broken {
            Some(Err(Error::WalFailed(msg.to_string())))
        } else if self.stopped {
            // Only a ticket this log never issued can get here: `close`
            // drains every append before the thread stops.
            Some(Err(Error::Closed))
        } else {
            None
        }
    }
}

impl State {
    fn progress(&self) -> Progress {
        Progress {
            durable_lsn: self.durable_lsn,
            failures: self.failures.clone(),
            broken: self.broken.clone(),
            stopped: self.stopped,
        }
    }
}

#[derive(Default)]
struct Counters {
    fsyncs: AtomicU64,
    group_commits: AtomicU64,
    records: AtomicU64,
    bytes_written: AtomicU64,
    segments_created: AtomicU64,
    segments_recycled: AtomicU64,
    data_syncs: AtomicU64,
    data_sync_nanos: AtomicU64,
    data_sync_max_nanos: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a segment started with `fsyncs` fsyncs, in a spare if `recycled`.
    fn segment_started(&self, fsyncs: u64, recycled: bool) {
        Counters::add(&self.fsyncs, fsyncs);
        Counters::add(&self.bytes_written, HEADER_LEN);
        Counters::add(&self.segments_created, 1);
        Counters::add(&self.segments_recycled, u64::from(recycled));
    }
}

impl Shared {
    /// Tells both kinds of waiters what changed. Called with the state locked,
    /// so the two channels never disagree about the order of events.
    fn publish(&self, state: &State) {
        self.progress.send_replace(state.progress());
        self.progress_changed.notify_all();
    }
}

impl Wal {
    /// Creates `opts.dir` if missing, replays every intact record of every
    /// segment in order through `replay(segment_id, payload)`, cuts a torn
    /// tail off the newest segment, and starts a new segment (the highest
    /// existing id + 1, or 1) for appends, in a spare file an earlier run left
    /// if there is one. See the module docs for how damage is treated. An
    /// error from `replay` stops the open and is returned.
    pub fn open(
        opts: WalOptions,
        mut replay: impl FnMut(u64, Bytes) -> Result<()>,
    ) -> Result<(Wal, ReplayStats)> {
        let dir = opts.dir;
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let ids = list_segments(&dir)?;
        let mut stats = ReplayStats::default();
        for (i, &id) in ids.iter().enumerate() {
            let newest = i + 1 == ids.len();
            let path = segment_path(&dir, id);
            let (header, outcome) = segment::scan(&path, id, &mut replay)?;
            if let segment::Header::Short { len } = header {
                if !newest {
                    // A creation that failed (disk full) and whose clean-up
                    // failed too: no record was ever acknowledged from a
                    // segment before its header was fsynced. Left for the
                    // trim that deletes old segments.
                    tracing::warn!(
                        file = %path.display(),
                        len,
                        "skipping write-ahead log segment shorter than its {HEADER_LEN}-byte header"
                    );
                    continue;
                }
                tracing::warn!(
                    file = %path.display(),
                    len,
                    "removing write-ahead log segment whose creation was interrupted"
                );
                fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                segment::sync_dir(&dir)?;
                continue;
            }
            stats.segments += 1;
            stats.records += outcome.records;
            stats.bytes += outcome.payload_bytes;
            if let Some(damage) = outcome.damage {
                if newest {
                    tracing::warn!(
                        file = %path.display(),
                        offset = damage.offset,
                        reason = %damage.reason,
                        "cutting torn tail off write-ahead log segment"
                    );
                    segment::truncate(&path, outcome.good_len)?;
                    stats.torn_tails += 1;
                } else {
                    tracing::error!(
                        file = %path.display(),
                        offset = damage.offset,
                        reason = %damage.reason,
                        "write-ahead log segment is damaged; records after this offset are lost"
                    );
                    stats.corrupt_segments += 1;
                }
            }
        }

        let first = match ids.last() {
            None => 1,
            Some(&max) => max.checked_add(1).ok_or_else(|| Error::Corrupt {
                file: segment_path(&dir, max),
                offset: 0,
                reason: "no segment id left after this one".into(),
            })?,
        };
        let counters = Counters::default();
        let spares = Mutex::new(open_spares(&dir, &counters)?);
        let faults = opts.faults;
        let (writer, fsyncs, recycled) = sync::start_segment(&dir, first, &faults, &spares)?;
        counters.segment_started(fsyncs, recycled);

        let shared = Arc::new(Shared {
            dir,
            segment_bytes: opts.segment_bytes,
            state: Mutex::new(State {
                pending: Vec::new(),
                spare: Vec::new(),
                next_lsn: 1,
                segment: first,
                segment_len: HEADER_LEN,
                durable_lsn: 0,
                writer_segment: first,
                failures: Arc::default(),
                broken: None,
                stopping: false,
                stopped: false,
            }),
            has_work: Condvar::new(),
            progress_changed: Condvar::new(),
            progress: watch::Sender::new(Progress::default()),
            counters,
            faults,
            spares,
            trimming: Mutex::new(()),
        });
        let thread = {
            let for_thread = shared.clone();
            tracedb_sched::spawn(
                std::thread::Builder::new().name("wal-sync".into()),
                tracedb_sched::Slice::Short(opts.sync_thread_slice),
                move || sync::run(&for_thread, writer),
            )
            .map_err(|e| Error::io(&shared.dir, e))?
        };
        let wal = Wal {
            shared,
            thread: Mutex::new(Some(thread)),
        };
        Ok((wal, stats))
    }

    /// Frames `payload` into the group-commit buffer and returns its ticket
    /// without waiting for the disk. Fails if the log is closed or broken, or
    /// if the payload is longer than [`MAX_RECORD_LEN`].
    pub fn append(&self, payload: &[u8]) -> Result<WalTicket> {
        if payload.len() > MAX_RECORD_LEN {
            return Err(Error::RecordTooLarge {
                len: payload.len(),
                max: MAX_RECORD_LEN,
            });
        }
        let mut guard = self.shared.state.lock();
        let st = &mut *guard;
        if let Some(msg) = &st.broken {
            return Err(Error::WalFailed(msg.to_string()));
        }
        if st.stopping {
            return Err(Error::Closed);
        }
        if st.segment_len >= self.shared.segment_bytes && st.segment_len > HEADER_LEN {
            st.segment += 1;
            st.segment_len = HEADER_LEN;
        }
        let segment = st.segment;
        let was_idle = st.pending.is_empty();
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        match st.pending.last_mut() {
            Some(chunk) if chunk.segment == segment => {
                encode_record(segment, payload, &mut chunk.bytes);
                chunk.last_lsn = lsn;
            }
            _ => {
                let mut bytes = std::mem::take(&mut st.spare);
                encode_record(segment, payload, &mut bytes);
                st.pending.push(Chunk {
                    segment,
                    last_lsn: lsn,
                    bytes,
                });
            }
        }
        st.segment_len += framed_len(payload.len());
        drop(guard);

        Counters::add(&self.shared.counters.records, 1);
        if was_idle {
            // The sync thread rechecks `pending` under the lock before it
            // sleeps, so it cannot miss this even if it is busy right now.
            self.shared.has_work.notify_one();
        }
        Ok(WalTicket { segment, lsn })
    }

    /// Resolves once the record of `ticket` is written and fdatasynced;
    /// [`Error::WalFailed`] if its write or fsync failed (retryable: later
    /// appends go to a new segment).
    pub async fn wait_durable(&self, ticket: WalTicket) -> Result<()> {
        let mut rx = self.shared.progress.subscribe();
        let progress = rx
            .wait_for(|p| p.outcome(ticket.lsn).is_some())
            .await
            // The sender lives as long as `self`; this cannot happen.
            .map_err(|_| Error::Closed)?;
        progress.outcome(ticket.lsn).unwrap_or(Err(Error::Closed))
    }

    /// [`Wal::wait_durable`] for threads outside an async runtime.
    pub fn wait_durable_blocking(&self, ticket: WalTicket) -> Result<()> {
        let mut st = self.shared.state.lock();
        loop {
            if let Some(outcome) = st.progress().outcome(ticket.lsn) {
                return outcome;
            }
            self.shared.progress_changed.wait(&mut st);
        }
    }

    /// Segment that new appends currently go to.
    pub fn current_segment(&self) -> u64 {
        self.shared.state.lock().segment
    }

    /// Removes the segment files with an id below `segment` and fsyncs the
    /// directory; returns how many were removed. The newest of them are kept
    /// as spares for the sync thread to reuse while fewer than [`MAX_SPARES`]
    /// are waiting (see the module docs); the others are deleted, through
    /// `trash` when given, which frees their blocks in steps (see
    /// the `trash` module). The current segment is never removed, nor is a
    /// segment the sync thread is still writing (after a rotation its last
    /// records may still be in memory); such a segment goes in a later call.
    pub fn delete_segments_before(&self, segment: u64, trash: Option<&Trash>) -> Result<usize> {
        let _trimming = self.shared.trimming.lock();
        let limit = {
            let mut st = self.shared.state.lock();
            let limit = segment.min(st.writer_segment).min(st.segment);
            // Their records' segments are going; so are their waiters (a
            // writer keeps the segment it started in alive until it is done).
            if st.failures.iter().any(|r| r.segment < limit) {
                Arc::make_mut(&mut st.failures).retain(|r| r.segment >= limit);
                self.shared.publish(&st);
            }
            limit
        };
        let dir = &self.shared.dir;
        let going: Vec<u64> = list_segments(dir)?
            .into_iter()
            .filter(|&id| id < limit)
            .collect();
        // Only `trimming` holders add spares, so the room can only grow
        // (the sync thread taking one) until this call adds its own.
        let (room, waiting) = {
            let spares = self.shared.spares.lock();
            (MAX_SPARES.saturating_sub(spares.len()), spares.clone())
        };
        let keep_from = going.len().saturating_sub(room);
        let mut removed = 0;
        let mut spared = Vec::new();
        let mut first_error = None;
        for (i, &id) in going.iter().enumerate() {
            let path = segment_path(dir, id);
            // A spare of this id could only be left from before the log was
            // emptied by hand; never rename over it.
            if i >= keep_from && !waiting.contains(&id) {
                match fs::rename(&path, spare_path(dir, id)) {
                    Ok(()) => {
                        spared.push(id);
                        removed += 1;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => tracing::warn!(
                        file = %path.display(),
                        error = %e,
                        "could not keep a flushed write-ahead log segment as a spare; deleting it"
                    ),
                }
            }
            match crate::trash::delete(trash, &path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    first_error = Some(Error::io(&path, e));
                    break;
                }
            }
        }
        if removed > 0 {
            // On failure the new spares stay out of the list: their names may
            // not be durable. The next open finds them, or
            // `close_and_discard` removes them.
            segment::sync_dir(dir)?;
            Counters::add(&self.shared.counters.fsyncs, 1);
        }
        self.shared.spares.lock().extend(spared);
        match first_error {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    /// Counters since open.
    pub fn stats(&self) -> WalStats {
        let c = &self.shared.counters;
        WalStats {
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            group_commits: c.group_commits.load(Ordering::Relaxed),
            records: c.records.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            segments_created: c.segments_created.load(Ordering::Relaxed),
            segments_recycled: c.segments_recycled.load(Ordering::Relaxed),
            data_syncs: c.data_syncs.load(Ordering::Relaxed),
            data_sync_nanos: c.data_sync_nanos.load(Ordering::Relaxed),
            data_sync_max_nanos: c.data_sync_max_nanos.load(Ordering::Relaxed),
        }
    }

    /// Refuses further appends, writes and fsyncs everything appended so far
    /// (records whose write fails get [`Error::WalFailed`] as usual), closes
    /// the current segment with an end mark, and joins the sync thread.
    /// Calling it again returns the same outcome: `Ok`, or
    /// [`Error::WalFailed`] if the sync thread panicked.
    pub fn close(&self) -> Result<()> {
        // Held across the join so a concurrent `close` returns only after it.
        let mut thread = self.thread.lock();
        if let Some(handle) = thread.take() {
            self.shared.state.lock().stopping = true;
            self.shared.has_work.notify_one();
            if handle.join().is_err() {
                let mut st = self.shared.state.lock();
                st.broken
                    .get_or_insert_with(|| Arc::from("write-ahead log sync thread panicked"));
                self.shared.publish(&st);
            }
        }
        match &self.shared.state.lock().broken {
            Some(msg) => Err(Error::WalFailed(msg.to_string())),
            None => Ok(()),
        }
    }

    /// Closes the log and deletes every segment, the current one included, and
    /// every spare file; returns how many files it deleted. For a clean
    /// shutdown, once the caller has made every record durable elsewhere: the
    /// next start then has nothing to replay, and no write-ahead log file is
    /// left behind.
    pub fn close_and_discard(&self) -> Result<usize> {
        self.close()?;
        let _trimming = self.shared.trimming.lock();
        self.shared.spares.lock().clear();
        let dir = &self.shared.dir;
        let segments = list_segments(dir)?
            .into_iter()
            .map(|id| segment_path(dir, id));
        let spares = list_spares(dir)?.into_iter().map(|id| spare_path(dir, id));
        let mut deleted = 0;
        for path in segments.chain(spares) {
            match fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        segment::sync_dir(dir)?;
        Ok(deleted)
    }
}

/// The spare files an earlier run left in `dir`, at most [`MAX_SPARES`] of
/// them (the newest; any others are deleted). Their names are made durable
/// before any is reused: the run that renamed them may have died before its
/// directory fsync.
fn open_spares(dir: &Path, counters: &Counters) -> Result<Vec<u64>> {
    let mut spares = list_spares(dir)?;
    let extra = spares.len().saturating_sub(MAX_SPARES);
    for id in spares.drain(..extra) {
        let path = spare_path(dir, id);
        if let Err(e) = fs::remove_file(&path) {
            tracing::warn!(file = %path.display(), error = %e, "deleting a surplus write-ahead log spare");
        }
    }
    if !spares.is_empty() || extra > 0 {
        segment::sync_dir(dir)?;
        Counters::add(&counters.fsyncs, 1);
    }
    Ok(spares)
}

impl Drop for Wal {
    fn drop(&mut self) {
        // A failure was logged by the sync thread when it happened.
        let _ = self.close();
    }
}
