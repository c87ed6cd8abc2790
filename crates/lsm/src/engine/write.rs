//! The write path's state: the WAL a write is logged in, the memtable it is
//! buffered in, the memory budget it is admitted by, and the writes between
//! the two, whose WAL segments must outlive them. [`Engine::write`] takes a
//! write through it: admitted, logged, made durable, buffered.
//!
//! The engine's `closed` flag lives here too: `close` sets it under the
//! in-flight lock, so a write either registers before it (and `close` sees
//! it) or is refused.
//!
//! [`Engine::write`]: crate::Engine::write

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use parking_lot::Mutex;

use crate::{
    batch::encode_batch,
    budget::MemoryBudget,
    error::{Error, Result},
    memtable::MemTable,
    span::Span,
    wal::{Wal, WalTicket},
};

pub(super) struct WritePath {
    pub(super) wal: Wal,
    pub(super) memtable: MemTable,
    /// The memory budget this engine's buffered spans count against (shared
    /// with the ingest layer in a server): admission asks it, flushes give
    /// back to it.
    pub(super) budget: Arc<MemoryBudget>,
    /// Requests between WAL append and memtable append, by the lowest WAL
    /// segment they can be in: their segments must not be deleted yet.
    in_flight: Mutex<BTreeMap<u64, usize>>,
    /// The engine is closing (or closed): writes are refused.
    closed: AtomicBool,
}

impl WritePath {
    pub(super) fn new(wal: Wal, memtable: MemTable, budget: Arc<MemoryBudget>) -> WritePath {
        WritePath {
            wal,
            memtable,
            budget,
            in_flight: Mutex::new(BTreeMap::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Whether the engine is closing: background work stops between steps.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Refuses writes from now on, once those that registered first have;
    /// `false` if it was closed already.
    pub(super) fn close(&self) -> bool {
        let _in_flight = self.in_flight.lock();
        !self.closed.swap(true, Ordering::SeqCst)
    }

    /// How many WAL segments hold writes logged but not yet buffered.
    pub(super) fn segments_in_flight(&self) -> usize {
        self.in_flight.lock().len()
    }

    /// The lowest WAL segment a write not yet in a file may be in, as far
    /// as the write path knows (the sealed buffers are the tree's).
    pub(super) fn oldest_segment_in_use(&self) -> u64 {
        let mut oldest = self
            .wal
            .current_segment()
            .min(self.memtable.min_wal_segment());
        if let Some((&segment, _)) = self.in_flight.lock().first_key_value() {
            oldest = oldest.min(segment);
        }
        oldest
    }

    /// Appends the WAL record of `spans`. The in-flight registration is taken
    /// first, with the current segment, which is at most the segment the record
    /// lands in: so that segment cannot be deleted before the spans are buffered.
    pub(super) fn log(&self, spans: &[Span]) -> Result<(WalTicket, InFlight<'_>)> {
        let mut record = Vec::with_capacity(spans.iter().map(|s| s.payload.len() + 48).sum());
        encode_batch(spans, &mut record);
        let segment = self.wal.current_segment();
        {
            let mut in_flight = self.in_flight.lock();
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            *in_flight.entry(segment).or_insert(0) += 1;
        }
        let guard = InFlight {
            write: self,
            segment,
        };
        let ticket = self.wal.append(&record)?;
        Ok((ticket, guard))
    }
}

/// A write between its WAL append and its memtable append: while it lives,
/// its segment is kept.
pub(super) struct InFlight<'a> {
    write: &'a WritePath,
    segment: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut map = self.write.in_flight.lock();
        if let Some(n) = map.get_mut(&self.segment) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.segment);
            }
        }
    }
}
