//! The sampler: hands the memory budget ([`tracedb_lsm::budget`]) a sample
//! of the process's resident memory a few times a second (measured by the
//! [`memory::Governor`]), and starts an early flush when the budget says
//! the memtable is worth flushing. It decides nothing itself: the budget
//! counts buffered spans as the engine takes and flushes them, and alone
//! decides what is admitted.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::task::JoinHandle;
use tracedb_lsm::{Engine, MemoryBudget, Stores};

use crate::memory;

/// How often the process's memory is sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Keeps the memory budget's view of the process's memory current, and
/// flushes early when the budget asks for it.
pub(crate) struct Sampler {
    task: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    flush: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl Sampler {
    pub(crate) fn spawn(
        budget: Arc<MemoryBudget>,
        stores: Arc<Stores>,
        governor: Arc<memory::Governor>,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flush: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>> = Arc::default();
        let (task_stop, task_flush) = (stop.clone(), flush.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !task_stop.load(Ordering::Acquire) {
                tick.tick().await;
                let sampled = {
                    let (budget, stores, governor) =
                        (budget.clone(), stores.clone(), governor.clone());
                    tokio::task::spawn_blocking(move || {
                        if let Some(resident) = governor.sample() {
                            budget.set_resident(resident);
                        }
                        // The memtables of every tenant's store count, and
                        // the fullest is flushed.
                        let mut fullest: Option<(usize, Arc<Engine>)> = None;
                        let mut all = 0;
                        for (_, engine) in stores.all() {
                            let bytes = engine.stats().memtable_bytes;
                            all += bytes;
                            if fullest.as_ref().is_none_or(|f| bytes > f.0) {
                                fullest = Some((bytes, engine));
                            }
                        }
                        fullest.filter(|_| budget.wants_early_flush(all))
                    })
                    .await
                };
                let fullest = sampled.ok().flatten();
                let mut running = task_flush.lock().await;
                let idle = running.as_ref().is_none_or(|h| h.is_finished());
                if let Some((_, engine)) =
                    fullest.filter(|_| idle && !task_stop.load(Ordering::Acquire))
                {
                    tracing::debug!(
                        "the memtables fill half the memory budget: flushing the fullest early"
                    );
                    *running = Some(tokio::task::spawn_blocking(move || {
                        if let Err(e) = engine.flush() {
                            tracing::warn!(error = %e, "early flush failed");
                        }
                    }));
                }
            }
        });
        Sampler { task, stop, flush }
    }

    /// Stops sampling and waits (until `deadline`) for an early flush in progress,
    /// which must not overlap the engine's close.
    pub(crate) async fn stop(self, deadline: Instant) {
        self.stop.store(true, Ordering::Release);
        let _ = tokio::time::timeout_at(deadline.into(), self.task).await;
        if let Some(flush) = self.flush.lock().await.take() {
            let _ = tokio::time::timeout_at(deadline.into(), flush).await;
        }
    }
}
