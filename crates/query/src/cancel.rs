//! Queries whose caller has gone.
//!
//! A search, a metrics query or a read of the index (tag values, services,
//! operations, dependencies) runs on the blocking pool, apart from the
//! request's future. When a client disconnects (a closed HTTP connection, a
//! reset gRPC stream), the server drops that future, but the blocking task
//! would run on to the end: a span-reading query can take minutes, and
//! Grafana abandons its queries each time a user changes the range.
//!
//! So the future holds a [`CancelOnDrop`], and the task checks its
//! [`Cancel`] between units of work (a candidate trace read, a trace
//! scanned, a file's cells counted, a round or set of index blocks): once
//! the future is dropped, the task stops with [`RunError::Cancelled`] and
//! gives its memory back. Stops are counted in
//! `tracedb_queries_cancelled_total`.

use std::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering},
    Arc,
};

use crate::search::RunError;

/// Whether the caller of a running query has gone. Clones share one flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag that is not set.
    pub fn new() -> Self {
        Cancel::default()
    }

    /// Sets the flag: the query stops at its next check.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// The flag itself, for the storage engine's loops.
    pub fn flag(&self) -> &AtomicBool {
        &self.0
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(RunError::Cancelled)` once the flag is set.
    pub fn check(&self) -> Result<(), RunError> {
        if self.is_cancelled() {
            Err(RunError::Cancelled)
        } else {
            Ok(())
        }
    }

    /// A guard that sets the flag when dropped, for the future that awaits
    /// the query (set after the answer came, the flag changes nothing).
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Sets its [`Cancel`] when dropped; see [`Cancel::on_drop`].
#[derive(Debug)]
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

static CANCELLED: AtomicU64 = AtomicU64::new(0);

/// Counts `result` when it is a query stopped for its caller; passes it on.
pub fn counted<T>(result: Result<T, RunError>) -> Result<T, RunError> {
    if matches!(result, Err(RunError::Cancelled)) {
        CANCELLED.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("a query stopped: its caller went away");
    }
    result
}

/// Queries stopped because their caller went away, since the process
/// started.
pub fn cancelled_queries() -> u64 {
    CANCELLED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_cancels() {
        let cancel = Cancel::new();
        let guard = cancel.on_drop();
        assert!(cancel.check().is_ok());
        drop(guard);
        assert!(matches!(cancel.check(), Err(RunError::Cancelled)));
    }
}
