//! The sampler: keeps the memory budget's view of buffered spans and of the
//! process's memory current, and starts an early flush when buffered spans
//! fill half of what the budget admits.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Instant,
};

use tokio::task::JoinHandle;
use tracedb_ingest::Ingest;
use tracedb_lsm::Engine;

use crate::memory;

/// Keeps the memory budget's view of buffered spans and of the process's
/// memory current, and flushes early when buffered spans fill half of what
/// the budget admits.
pub(crate) struct Sampler {
    task: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    flush: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl Sampler {
    pub(crate) fn spawn(
        ingest: Arc<Ingest>,
        engine: Arc<Engine>,
        governor: Arc<memory::Governor>,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flush: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>> = Arc::default();
        let (task_stop, task_flush) = (stop.clone(), flush.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(tracedb_ingest::export::SAMPLE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !task_stop.load(Ordering::Acquire) {
                tick.tick().await;
                let sampled = {
                    let (ingest, engine, governor) =
                        (ingest.clone(), engine.clone(), governor.clone());
                    tokio::task::spawn_blocking(move || {
                        // The budget takes the part of resident memory it
                        // does not count once its buffered figure is fresh.
                        let resident = governor.sample();
                        ingest.sample(&engine, resident)
                    })
                    .await
                };
                let needs_flush = sampled.unwrap_or(false);
                let mut running = task_flush.lock().await;
                let idle = running.as_ref().is_none_or(|h| h.is_finished());
                if needs_flush && idle && !task_stop.load(Ordering::Acquire) {
                    tracing::debug!("buffered spans fill half the memory budget: flushing early");
                    let engine = engine.clone();
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
