//! The sync thread: the only code that writes segment files after `open`.
//!
//! It sleeps until the append buffer is non-empty, takes all of it, writes it,
//! fdatasyncs once, and publishes the last LSN it covered. Everything appended
//! while it was writing goes out in the next round: that is the group commit.
//! On the first I/O error it poisons the log and exits; see the module docs of
//! [`crate::wal`] for why nothing is retried.

use std::{io::Write, sync::Arc};

use super::{
    segment::{SegmentWriter, HEADER_LEN},
    Chunk, Counters, Shared,
};
use crate::error::{Error, Result};

/// Largest buffer kept for reuse; a burst's buffer is dropped rather than
/// pinned for the life of the process.
const SPARE_MAX: usize = 4 << 20;

/// Body of the sync thread. Returns when `close` asked it to stop and the
/// buffer is drained, or after the first failure.
pub(super) fn run(shared: &Shared, mut writer: SegmentWriter) {
    // Marks the thread stopped however it ends, so no waiter hangs.
    let _stopped = StoppedOnExit(shared);
    loop {
        let (batch, last_lsn) = {
            let mut st = shared.state.lock();
            while st.pending.is_empty() && !st.stopping {
                shared.has_work.wait(&mut st);
            }
            if st.pending.is_empty() {
                return;
            }
            (std::mem::take(&mut st.pending), st.next_lsn - 1)
        };

        let result = write_batch(shared, &mut writer, &batch);

        let mut st = shared.state.lock();
        match result {
            Ok(()) => {
                st.durable_lsn = last_lsn;
                st.writer_segment = writer.id;
                if let Some(mut bytes) = batch.into_iter().next_back().map(|c| c.bytes) {
                    if bytes.capacity() <= SPARE_MAX && st.spare.capacity() == 0 {
                        bytes.clear();
                        st.spare = bytes;
                    }
                }
                shared.publish(&st);
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    segment = writer.id,
                    "write-ahead log write failed; refusing further writes"
                );
                st.failed = Some(Arc::from(e.to_string()));
                st.pending.clear();
                shared.publish(&st);
                return;
            }
        }
    }
}

/// Writes `batch` in order, moving to a new segment where a chunk says so, and
/// fdatasyncs. A finished segment is synced before its successor is created,
/// so only the newest segment on disk can have a torn tail.
fn write_batch(shared: &Shared, writer: &mut SegmentWriter, batch: &[Chunk]) -> Result<()> {
    #[cfg(test)]
    if shared
        .fail_next_batch
        .swap(false, std::sync::atomic::Ordering::SeqCst)
    {
        return Err(Error::io(
            &writer.path,
            std::io::Error::other("injected write failure"),
        ));
    }
    let counters = &shared.counters;
    for chunk in batch {
        if chunk.segment != writer.id {
            sync(counters, writer)?;
            let (next, fsyncs) = SegmentWriter::create(&shared.dir, chunk.segment)?;
            *writer = next;
            Counters::add(&counters.fsyncs, fsyncs);
            Counters::add(&counters.bytes_written, HEADER_LEN);
            Counters::add(&counters.segments_created, 1);
        }
        writer
            .file
            .write_all(&chunk.bytes)
            .map_err(|e| Error::io(&writer.path, e))?;
        writer.unsynced = true;
        Counters::add(&counters.bytes_written, chunk.bytes.len() as u64);
    }
    sync(counters, writer)?;
    Counters::add(&counters.group_commits, 1);
    Ok(())
}

/// fdatasyncs `writer` if anything was written since its last sync.
fn sync(counters: &Counters, writer: &mut SegmentWriter) -> Result<()> {
    if writer.unsynced {
        let started = std::time::Instant::now();
        writer
            .file
            .sync_data()
            .map_err(|e| Error::io(&writer.path, e))?;
        writer.unsynced = false;
        let nanos = started.elapsed().as_nanos() as u64;
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
