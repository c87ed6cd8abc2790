//! Flush: a sealed buffer is published in the super-version (readers keep
//! seeing its spans) and queued; the flusher thread sorts it, writes a
//! level-0 file and its index sidecar, installs the file (the edit in the
//! manifest, then a super-version with the file and without the buffer),
//! gives its bytes back to the memory budget ([`crate::budget`]), and deletes the WAL segments
//! nothing unflushed needs any more.
//!
//! [`FlushQueue`] owns the flush state: the queue of sealed buffers (FIFO,
//! so a `Stop` comes after every buffer queued before it) and the signal
//! that a flush was installed, which [`crate::Engine::flush`] waits on.

use std::{
    borrow::Borrow,
    path::Path,
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::{Condvar, MutexGuard};

use super::{add, Inner};
use crate::{
    error::{Error, Result},
    index::{
        cells::{CellsBuilder, FileCells},
        write_sidecar, SummaryBuilder, SummarySet,
    },
    layout::table_path,
    manifest::{Edit, FileEntry, NO_PARTITION},
    memtable::Sealed,
    sort::sorted_by_trace_id,
    span::Span,
    table::{SsTable, SsTableBuilder, TableMeta, TableOptions},
    version::TableFile,
};

/// How long the flusher waits before retrying a failed flush.
pub(super) const FLUSH_RETRY: Duration = Duration::from_secs(1);
/// How often the flusher looks for buffers past their maximum age.
const AGE_CHECK: Duration = Duration::from_millis(500);

/// What the flusher thread is asked to do.
pub(super) enum Task {
    Flush(Arc<Sealed>),
    Stop,
}

/// Owner of the flush state (see the module docs).
pub(super) struct FlushQueue {
    tx: Sender<Task>,
    /// Signalled whenever a flush installs a new super-version.
    flushed: Condvar,
}

impl FlushQueue {
    /// An empty queue, and the receiving end for the flusher thread.
    pub(super) fn new() -> (FlushQueue, Receiver<Task>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (
            FlushQueue {
                tx,
                flushed: Condvar::new(),
            },
            rx,
        )
    }

    /// Queues a sealed buffer for the flusher.
    pub(super) fn push(&self, sealed: Arc<Sealed>) {
        self.send(Task::Flush(sealed));
    }

    /// Tells the flusher to exit once every buffer queued so far is flushed.
    pub(super) fn stop(&self) {
        self.send(Task::Stop);
    }

    fn send(&self, task: Task) {
        // The receiver lives as long as the flusher thread, which only exits on Stop.
        if self.tx.send(task).is_err() {
            tracing::error!("flusher is gone; sealed buffer stays in memory and in the WAL");
        }
    }

    /// Wakes the threads waiting in [`FlushQueue::wait`].
    fn notify_flushed(&self) {
        self.flushed.notify_all();
    }

    /// Waits (releasing `state`) until a flush is installed or `timeout` passes;
    /// false if the timeout passed.
    pub(super) fn wait<T>(&self, state: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
        !self.flushed.wait_for(state, timeout).timed_out()
    }
}

impl Inner {
    /// Makes a sealed buffer visible to readers, then queues it for flushing.
    /// Called with the shard lock held (see `memtable`).
    pub(super) fn publish(&self, sealed: Sealed) {
        let sealed = Arc::new(sealed);
        self.tree.publish(sealed.clone());
        self.flush.push(sealed);
    }

    /// Body of the flusher thread: flushes queued buffers in order, and
    /// seals buffers past their maximum age every `AGE_CHECK`.
    pub(super) fn run_flusher(&self, rx: Receiver<Task>) {
        loop {
            match rx.recv_timeout(AGE_CHECK) {
                Ok(Task::Flush(sealed)) => self.flush_until_done(&sealed),
                // Everything queued before Stop has been flushed (FIFO channel).
                Ok(Task::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    if !self.write.is_closed() {
                        self.write.memtable.seal_where(false, |s| self.publish(s));
                    }
                }
            }
        }
    }

    fn flush_until_done(&self, sealed: &Arc<Sealed>) {
        loop {
            match self.flush_one(sealed) {
                Ok(()) => return,
                Err(e) => {
                    if self.tree.is_crashed() {
                        return;
                    }
                    self.counters.flush_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, buffer = sealed.id, "flush failed; retrying");
                    if self.write.is_closed() {
                        return;
                    }
                    std::thread::sleep(self.opts.retry_delay(FLUSH_RETRY));
                }
            }
        }
    }

    /// Sorts and writes one sealed buffer as a level-0 file, then installs it.
    /// No lock is held while sorting or writing.
    fn flush_one(&self, sealed: &Arc<Sealed>) -> Result<()> {
        if self.tree.is_crashed() {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let spans = sorted_by_trace_id(sealed.chunks.iter().flat_map(|c| c.iter()));
        let id = self.tree.new_file_id();
        let path = table_path(&self.tables_dir, id);
        let table = TableOptions {
            zstd_level: self.opts.flush_zstd_level,
            ..self.opts.table.clone()
        };
        let (meta, summary, cells) = write_sorted_buffer(&path, table, &spans)?;
        let summary = Arc::new(summary);
        write_sidecar(&path, &summary, self.opts.index_block_parts, cells.as_ref())?;
        self.summary_cache.insert_file(id, summary);
        let entry = FileEntry {
            id,
            level: 0,
            partition: NO_PARTITION,
            file_size: meta.file_size,
            remote: false,
        };
        let installed = SsTable::open(&path).and_then(|table| {
            let file = Arc::new(TableFile::new(entry, table, self.janitor.clone()));
            self.install(
                Edit {
                    next_file_id: self.tree.next_file_id(),
                    removed: Vec::new(),
                    added: vec![entry],
                },
                vec![file],
                Some(sealed.id),
            )
        });
        if let Err(e) = installed {
            self.tree.discard_uninstalled(&[path]);
            return Err(e);
        }
        self.write.budget.release(sealed.bytes);
        self.flush.notify_flushed();
        self.scheduler.flushed();
        add(&self.counters.flushes, 1);
        add(&self.counters.flush_bytes_written, meta.file_size);
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
    pub(super) fn trim_wal(&self) {
        let mut keep_from = self.write.oldest_segment_in_use();
        let snapshot = self.tree.current();
        for sealed in &snapshot.sealed {
            keep_from = keep_from.min(sealed.min_wal_segment);
        }
        match self
            .write
            .wal
            .delete_segments_before(keep_from, Some(&self.trash))
        {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, keep_from, "deleted wal segments"),
            Err(e) => tracing::warn!(error = %e, "deleting wal segments"),
        }
    }
}

/// Writes `spans`, sorted by trace ID, as the sorted file at `path`, and
/// returns the file's metadata, the search-index summary of its traces and
/// its metrics cells (which the caller writes as the file's sidecar).
///
/// One pass, a trace at a time: a buffer's payloads are tens of megabytes
/// in the order requests brought them, so a second pass in trace-ID order
/// would fetch every payload from memory again. Summarized just before its
/// spans go to the builder, a trace's payloads are still in the cache when
/// its block is encoded.
pub fn write_sorted_buffer<S: Borrow<Span>>(
    path: &Path,
    table: TableOptions,
    spans: &[S],
) -> Result<(TableMeta, SummarySet, Option<FileCells>)> {
    let mut cells = CellsBuilder::new(table.cell_attributes.clone());
    let mut builder = SsTableBuilder::create(path, table)?;
    let mut summary = SummaryBuilder::default();
    for trace in spans.chunk_by(|a, b| a.borrow().trace_id == b.borrow().trace_id) {
        summary.add_trace_counted(trace, &mut cells);
        for span in trace {
            builder.add(span.borrow())?;
        }
    }
    let meta = builder.finish()?;
    Ok((meta, summary.finish(), cells.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_hands_buffers_over_in_order_and_stop_last() {
        use crate::{
            memtable::{MemTable, MemTableOptions},
            test_util::{group, span},
        };
        let (queue, rx) = FlushQueue::new();
        let memtable = MemTable::new(MemTableOptions {
            shards: 1,
            flush_bytes: usize::MAX,
            ..MemTableOptions::default()
        });
        let g = group("svc");
        for trace in 1..=2 {
            memtable.append(vec![span(&g, trace, 1, 1_000)], 0, |_| {});
            memtable.seal_where(true, |s| queue.push(Arc::new(s)));
        }
        queue.stop();
        let ids: Vec<Option<u64>> = rx
            .try_iter()
            .map(|task| match task {
                Task::Flush(sealed) => Some(sealed.id),
                Task::Stop => None,
            })
            .collect();
        assert_eq!(ids.len(), 3);
        assert!(ids[0] < ids[1] && ids[0].is_some(), "{ids:?}");
        assert_eq!(ids[2], None, "stop comes last");
        drop(rx);
        // The flusher is gone: queueing logs and does not panic.
        queue.stop();
    }

    #[test]
    fn a_sorted_buffer_is_written_whole_with_the_summary_of_each_trace() {
        use crate::test_util::{group, span};
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (group("a"), group("b"));
        let mut spans = vec![
            span(&a, 7, 1, 100),
            span(&b, 3, 1, 50),
            span(&a, 3, 2, 60),
            span(&b, 7, 2, 120),
            span(&a, 9, 1, 10),
        ];
        crate::sort::sort_by_trace_id(&mut spans);
        let path = dir.path().join("buffer.sst");

        let (meta, summary, _) =
            write_sorted_buffer(&path, TableOptions::default(), &spans).expect("written");

        assert_eq!((meta.span_count, meta.trace_count), (5, 3));
        // What a separate pass over the buffer would have summarized.
        assert_eq!(summary, SummarySet::from_sorted_spans(&spans));
        let counts: Vec<u32> = summary.traces.iter().map(|t| t.span_count).collect();
        assert_eq!(counts, [2, 2, 1]);
        let table = SsTable::open(&path).expect("opens");
        assert_eq!(table.get(&spans[0].trace_id).expect("reads").len(), 2);
    }

    #[test]
    fn a_waiter_wakes_when_a_flush_is_installed() {
        let (queue, _rx) = FlushQueue::new();
        let queue = Arc::new(queue);
        // (the waiter is in `wait`, a flush was installed)
        let state = Arc::new(parking_lot::Mutex::new((false, false)));
        let waiter = {
            let (queue, state) = (queue.clone(), state.clone());
            std::thread::spawn(move || {
                let mut state = state.lock();
                // The lock is released only inside `wait`, so the flush below
                // cannot be installed before this thread waits.
                state.0 = true;
                let woken = queue.wait(&mut state, Duration::from_secs(30));
                (woken, state.1)
            })
        };
        loop {
            let mut state = state.lock();
            if state.0 {
                state.1 = true;
                break;
            }
            drop(state);
            std::thread::sleep(Duration::from_millis(1));
        }
        queue.notify_flushed();
        // parking_lot's Condvar has no spurious wake-ups: only the notify or
        // the timeout ends the wait.
        let (woken, installed) = waiter.join().expect("waiter");
        assert!(
            woken,
            "the waiter slept its 30 s out: notify_flushed woke nobody"
        );
        assert!(installed, "woken before the flush was installed");
    }
}
