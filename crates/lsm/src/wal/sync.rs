//! The sync thread: the only code that writes segment files after `open`.
//!
//! It sleeps until the append buffer is non-empty, takes all of it, writes it,
//! fdatasyncs once, and publishes the last LSN it covered. Everything appended
//! while it was writing goes out in the next round: that is the group commit.
//! On an I/O error it fails every record not yet durable, abandons the
//! segment and goes on; the next batch starts a new segment. See the module
//! docs of [`crate::wal`] for why the failed segment is never written again.
//!
//! It also closes segments: at a rotation, and when the log closes, it writes
//! the segment's end mark and fdatasyncs it, and it starts each new segment,
//! in a spare file when one is waiting.

use std::{path::Path, sync::Arc};

use parking_lot::Mutex;

use super::{
    segment::{self, SegmentWriter, FRAME_LEN, HEADER_LEN},
    Chunk, Counters, FailedRange, Shared,
};
use crate::{
    error::Result,
    fault::{FaultTarget, Faults},
};

/// An fdatasync slower than this is logged at debug level.
const SLOW_SYNC_NANOS: u64 = 20_000_000;

/// Largest buffer kept for reuse; a burst's buffer is dropped rather than
/// pinned for the life of the process.
const SPARE_MAX: usize = 4 << 20;

/// Body of the sync thread. Returns when `close` asked it to stop and the
/// buffer is drained.
pub(super) fn run(shared: &Shared, writer: SegmentWriter) {
    let mut writer = Some(writer);
    // Marks the thread stopped however it ends, so no waiter hangs.
    let _stopped = StoppedOnExit(shared);
    loop {
        let (batch, last_lsn) = {
            let mut st = shared.state.lock();
            while st.pending.is_empty() && !st.stopping {
                shared.has_work.wait(&mut st);
            }
            if st.pending.is_empty() {
                drop(st);
                if let Some(w) = writer.take() {
                    close_last_segment(shared, w);
                }
                return;
            }
            (std::mem::take(&mut st.pending), st.next_lsn - 1)
        };

        let mut durable = None;
        let result = write_batch(shared, &mut writer, &batch, &mut durable);

        let mut st = shared.state.lock();
        if let Some(lsn) = durable {
            st.durable_lsn = lsn;
        }
        match result {
            Ok(()) => {
                st.durable_lsn = last_lsn;
                if let Some(w) = &writer {
                    st.writer_segment = w.id;
                }
                if let Some(mut bytes) = batch.into_iter().next_back().map(|c| c.bytes) {
                    if bytes.capacity() <= SPARE_MAX && st.spare.capacity() == 0 {
                        bytes.clear();
                        st.spare = bytes;
                    }
                }
                shared.publish(&st);
            }
            Err(e) => {
                // Everything not durable fails: the records of this batch and
                // those appended meanwhile. Later appends go to a new segment.
                let first = st.durable_lsn + 1;
                let last = st.next_lsn - 1;
                let abandoned = writer.take();
                tracing::error!(
                    error = %e,
                    segment = abandoned.as_ref().map(|w| w.id),
                    records = last + 1 - first,
                    "write-ahead log write failed; failing the records not yet durable and starting a new segment"
                );
                if let Some(w) = abandoned {
                    w.abandon();
                }
                st.pending.clear();
                let failed_segment = st.segment;
                st.segment += 1;
                st.segment_len = HEADER_LEN;
                if first <= last {
                    std::sync::Arc::make_mut(&mut st.failures).push(FailedRange {
                        first,
                        last,
                        segment: failed_segment,
                        reason: Arc::from(e.to_string()),
                    });
                }
                shared.publish(&st);
            }
        }
    }
}

/// Writes `batch` in order, moving to a new segment where a chunk says so (or
/// where the previous one was abandoned), and fdatasyncs. A finished segment
/// gets its end mark and is synced before its successor is created, so only
/// the newest segment on disk can have a torn tail, and an older recycled one
/// shows where it ends. `durable` is set to the last LSN made durable
/// on the way when a rotation synced part of the batch before a failure.
fn write_batch(
    shared: &Shared,
    writer: &mut Option<SegmentWriter>,
    batch: &[Chunk],
    durable: &mut Option<u64>,
) -> Result<()> {
    let counters = &shared.counters;
    let mut written = None;
    for chunk in batch {
        let w = match writer {
            Some(w) if w.id == chunk.segment => w,
            _ => {
                if let Some(previous) = writer.as_mut() {
                    write_end_mark(shared, previous)?;
                    sync(shared, previous)?;
                    *durable = written.or(*durable);
                }
                *writer = None;
                let (next, fsyncs, recycled) =
                    start_segment(&shared.dir, chunk.segment, &shared.faults, &shared.spares)?;
                counters.segment_started(fsyncs, recycled);
                writer.insert(next)
            }
        };
        let path = w.path.clone();
        shared
            .faults
            .write_all(FaultTarget::Wal, &mut w.file, &path, &chunk.bytes)?;
        w.unsynced = true;
        w.len += chunk.bytes.len() as u64;
        written = Some(chunk.last_lsn);
        Counters::add(&counters.bytes_written, chunk.bytes.len() as u64);
    }
    if let Some(w) = writer.as_mut() {
        sync(shared, w)?;
    }
    Counters::add(&counters.group_commits, 1);
    Ok(())
}

/// Starts segment `id`: in a spare file if one is waiting in `spares`, else,
/// or if reusing the spare fails (the spare is then removed), in a new file.
/// Returns the writer, the fsyncs it took, and whether it reused a spare.
pub(super) fn start_segment(
    dir: &Path,
    id: u64,
    faults: &Faults,
    spares: &Mutex<Vec<u64>>,
) -> Result<(SegmentWriter, u64, bool)> {
    // Popped before the attempt: a spare that failed is not tried again.
    let spare = spares.lock().pop();
    if let Some(old) = spare {
        let path = segment::spare_path(dir, old);
        match SegmentWriter::recycle(dir, &path, id, faults) {
            Ok((writer, fsyncs)) => return Ok((writer, fsyncs, true)),
            Err(e) => tracing::warn!(
                file = %path.display(),
                segment = id,
                error = %e,
                "could not reuse a spare write-ahead log segment; starting a new file"
            ),
        }
    }
    let (writer, fsyncs) = SegmentWriter::create(dir, id, faults)?;
    Ok((writer, fsyncs, false))
}

/// Appends `writer`'s end mark; the caller fdatasyncs it.
fn write_end_mark(shared: &Shared, writer: &mut SegmentWriter) -> Result<()> {
    let mark = segment::end_mark(writer.id);
    shared
        .faults
        .write_all(FaultTarget::Wal, &mut writer.file, &writer.path, &mark)?;
    writer.unsynced = true;
    writer.len += FRAME_LEN as u64;
    Counters::add(&shared.counters.bytes_written, FRAME_LEN as u64);
    Ok(())
}

/// At a clean close, after the last batch: end-marks the current segment and
/// fdatasyncs it. Every record is durable already, so a failure here fails
/// none; the segment is then cut back to its records, as after a failed write.
fn close_last_segment(shared: &Shared, mut writer: SegmentWriter) {
    let closed = write_end_mark(shared, &mut writer).and_then(|()| sync(shared, &mut writer));
    if let Err(e) = closed {
        tracing::warn!(
            segment = writer.id,
            error = %e,
            "could not write the end mark of the last write-ahead log segment"
        );
        writer.abandon();
    }
}

/// fdatasyncs `writer` if anything was written since its last sync.
fn sync(shared: &Shared, writer: &mut SegmentWriter) -> Result<()> {
    let counters = &shared.counters;
    if writer.unsynced {
        let started = std::time::Instant::now();
        shared
            .faults
            .sync_data(FaultTarget::Wal, &writer.file, &writer.path)?;
        writer.unsynced = false;
        writer.synced_len = writer.len;
        let nanos = started.elapsed().as_nanos() as u64;
        if nanos > SLOW_SYNC_NANOS {
            // Every export in the group waited this long (see docs/BENCHMARKS.md).
            tracing::debug!(ms = nanos / 1_000_000, "slow WAL fdatasync");
        }
        Counters::add(&counters.fsyncs, 1);
        Counters::add(&counters.data_syncs, 1);
        Counters::add(&counters.data_sync_nanos, nanos);
        counters
            .data_sync_max_nanos
            .fetch_max(nanos, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}

struct StoppedOnExit<'a>(&'a Shared);

impl Drop for StoppedOnExit<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.stopped = true;
        self.0.publish(&st);
    }
}
