//! Compaction scheduling: which files running tasks hold, whether compaction
//! is paused or stopping, and the choice of the next task, for the
//! background threads (`compact`), [`crate::Engine::compact`] and retention.
//!
//! [`CompactionScheduler`] owns that state and nothing else: it never reads
//! a file or touches the manifest. Callers hand it the current version; it
//! picks with the pure functions of [`crate::compaction`], marks the task's
//! inputs busy until [`CompactionScheduler::finish`], and wakes waiting
//! threads whenever something they wait for changes (a flush, a finished
//! task, pause, resume, stop).
//!
//! (Not to be confused with `tracedb_sched`, which sets the kernel's time
//! slice of a thread.)

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use parking_lot::{Condvar, Mutex};

use crate::{
    compaction::{self, CompactionOptions, CompactionTask},
    version::{TableFile, Version},
};

/// Longest a compaction thread sleeps without looking for work.
pub(super) const COMPACTION_IDLE: Duration = Duration::from_secs(1);

/// What a background compaction thread does next.
pub(super) enum Next {
    /// Run this task (its inputs are claimed), then call
    /// [`CompactionScheduler::finish`].
    Task(CompactionTask),
    /// Retention is due.
    Retention,
    /// Compaction is stopping (or the engine crashed): the thread exits.
    Stop,
}

/// The scheduling state, under [`CompactionScheduler::state`].
#[derive(Debug)]
struct Schedule {
    /// Files inputs of running tasks (compaction or retention).
    busy: HashSet<u64>,
    /// Running tasks whose inputs are in levels 1 and deeper.
    deeper_running: usize,
    paused: bool,
    stopping: bool,
    /// When the last flush was installed (or the engine opened): level 0
    /// is merged below its trigger once this is `l0_quiet` ago.
    last_flush: Instant,
}

impl Schedule {
    /// Marks a picked task's inputs busy until `finish`.
    fn claim(&mut self, task: &CompactionTask) {
        self.busy.extend(task.inputs.iter().map(|f| f.id));
        if task.input_level > 0 {
            self.deeper_running += 1;
        }
    }
}

/// Owner of compaction scheduling (see the module docs).
pub(super) struct CompactionScheduler {
    opts: CompactionOptions,
    /// Background compaction threads: with two or more, one is kept for
    /// level 0.
    threads: usize,
    state: Mutex<Schedule>,
    /// Signalled on new work for compaction, pause/resume, stop, and when a
    /// task finishes.
    wake: Condvar,
    /// Mirrors of `Schedule::{paused, stopping}` a merge checks per trace
    /// without the lock.
    paused: AtomicBool,
    stopping: AtomicBool,
}

impl CompactionScheduler {
    pub(super) fn new(opts: CompactionOptions, threads: usize) -> Self {
        CompactionScheduler {
            opts,
            threads,
            state: Mutex::new(Schedule {
                busy: HashSet::new(),
                deeper_running: 0,
                paused: false,
                stopping: false,
                last_flush: Instant::now(),
            }),
            wake: Condvar::new(),
            paused: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        }
    }

    pub(super) fn set_paused(&self, paused: bool) {
        let mut s = self.state.lock();
        s.paused = paused;
        self.paused.store(paused, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// Stops every thread waiting for work; running merges stop at their
    /// next trace.
    pub(super) fn stop(&self) {
        let mut s = self.state.lock();
        s.stopping = true;
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// A flush was installed: level 0 has a new file, and is not quiet.
    pub(super) fn flushed(&self) {
        self.state.lock().last_flush = Instant::now();
        self.wake.notify_all();
    }

    /// Asked by a merge between traces: waits while paused; true to stop
    /// (stopping, or `crashed`).
    pub(super) fn merge_should_stop(&self, crashed: &AtomicBool) -> bool {
        if self.paused.load(Ordering::Relaxed) {
            let mut s = self.state.lock();
            while s.paused && !s.stopping {
                self.wake.wait(&mut s);
            }
        }
        self.stopping.load(Ordering::Relaxed) || crashed.load(Ordering::Relaxed)
    }

    /// Waits for the next thing a background thread should do: a task
    /// picked from `version()` (with two threads or more, one is kept for
    /// level 0: a merge of deeper runs can take minutes, and level 0 filling
    /// up behind it would stop ingest; level 0 is merged below its trigger
    /// once no flush has come for `l0_quiet`), or retention once
    /// `retention_due` has passed.
    pub(super) fn next(
        &self,
        version: impl Fn() -> Arc<Version>,
        crashed: &AtomicBool,
        retention_due: Instant,
    ) -> Next {
        let mut s = self.state.lock();
        loop {
            if s.stopping || crashed.load(Ordering::Acquire) {
                return Next::Stop;
            }
            if !s.paused {
                if Instant::now() >= retention_due {
                    return Next::Retention;
                }
                let version = version();
                let picked = if self.threads > 1 && s.deeper_running + 1 >= self.threads {
                    compaction::pick_level0(&version, &self.opts, &s.busy)
                } else {
                    compaction::pick(&version, &self.opts, &s.busy)
                }
                .or_else(|| {
                    // No flush for a while: merge what level 0 holds.
                    let quiet = s.last_flush.elapsed() >= self.opts.l0_quiet;
                    quiet.then(|| compaction::pick_level0_quiet(&version, &s.busy))?
                });
                if let Some(task) = picked {
                    s.claim(&task);
                    return Next::Task(task);
                }
            }
            let wait = retention_due
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(10), COMPACTION_IDLE);
            self.wake.wait_for(&mut s, wait);
        }
    }

    /// For [`crate::Engine::compact`]: a task picked from `version()`, or,
    /// when there is none, waits for running tasks that may block the next
    /// pick. `Ok(None)` once nothing is picked and nothing runs; `Err(())`
    /// as soon as `closed()` says the engine is closing.
    pub(super) fn next_now(
        &self,
        version: impl Fn() -> Arc<Version>,
        closed: impl Fn() -> bool,
    ) -> Result<Option<CompactionTask>, ()> {
        let mut s = self.state.lock();
        loop {
            if closed() {
                return Err(());
            }
            if let Some(task) = compaction::pick(&version(), &self.opts, &s.busy) {
                s.claim(&task);
                return Ok(Some(task));
            }
            if s.busy.is_empty() {
                return Ok(None);
            }
            self.wake.wait_for(&mut s, COMPACTION_IDLE);
        }
    }

    /// A due task of a level above `level` ([`compaction::pick_above`]),
    /// claimed, for a deeper merge to run first; `None` while paused,
    /// stopping or `crashed`.
    pub(super) fn claim_above(
        &self,
        version: impl Fn() -> Arc<Version>,
        crashed: &AtomicBool,
        level: usize,
    ) -> Option<CompactionTask> {
        let mut s = self.state.lock();
        if s.paused || s.stopping || crashed.load(Ordering::Acquire) {
            return None;
        }
        let cap = compaction::run_cap(&self.opts);
        let task = compaction::pick_above(&version(), &self.opts, &s.busy, level, cap)?;
        s.claim(&task);
        Some(task)
    }

    /// Claims the files `choose` picks among those no task holds (retention's
    /// expired files); give them back with [`CompactionScheduler::finish`].
    pub(super) fn claim_files(
        &self,
        choose: impl FnOnce(&HashSet<u64>) -> Vec<Arc<TableFile>>,
    ) -> Vec<Arc<TableFile>> {
        let mut s = self.state.lock();
        let chosen = choose(&s.busy);
        s.busy.extend(chosen.iter().map(|f| f.id));
        chosen
    }

    /// Gives back the inputs of a task claimed here, done or failed.
    pub(super) fn finish(&self, task: &CompactionTask) {
        let mut s = self.state.lock();
        for f in &task.inputs {
            s.busy.remove(&f.id);
        }
        if task.input_level > 0 {
            s.deeper_running -= 1;
        }
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduler(threads: usize) -> CompactionScheduler {
        CompactionScheduler::new(CompactionOptions::default(), threads)
    }

    #[test]
    fn an_empty_tree_gives_retention_when_due_and_stop_when_stopping() {
        let s = scheduler(1);
        let empty = || Arc::new(Version::empty(CompactionOptions::default().levels));
        let crashed = AtomicBool::new(false);
        assert!(matches!(
            s.next(empty, &crashed, Instant::now()),
            Next::Retention
        ));
        assert!(matches!(s.next_now(empty, || false), Ok(None)));
        assert!(s.next_now(empty, || true).is_err());
        assert!(!s.merge_should_stop(&crashed));
        s.stop();
        assert!(matches!(
            s.next(empty, &crashed, Instant::now()),
            Next::Stop
        ));
        assert!(s.merge_should_stop(&crashed));
        assert!(s.claim_above(empty, &crashed, 1).is_none());
    }

    #[test]
    fn claimed_files_are_not_offered_again_until_finished() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files: Vec<_> = (1..=3u64)
            .map(|id| crate::test_util::table_file(dir.path(), id, 0, 0, &[u128::from(id)]))
            .collect();
        let free = |busy: &HashSet<u64>| -> Vec<Arc<TableFile>> {
            files
                .iter()
                .filter(|f| !busy.contains(&f.id))
                .cloned()
                .collect()
        };
        let ids = |files: &[Arc<TableFile>]| files.iter().map(|f| f.id).collect::<Vec<_>>();
        let s = scheduler(1);
        let first = s.claim_files(|busy| free(busy).into_iter().take(2).collect());
        assert_eq!(ids(&first), [1, 2]);
        assert_eq!(ids(&s.claim_files(free)), [3]);
        assert!(s.claim_files(free).is_empty(), "every file is held");
        s.finish(&CompactionTask {
            kind: compaction::TaskKind::Merge,
            input_level: 0,
            output_level: 0,
            inputs: first,
        });
        assert_eq!(ids(&s.claim_files(free)), [1, 2]);
    }

    #[test]
    fn a_crash_stops_the_threads_and_the_merges() {
        let s = scheduler(2);
        let empty = || Arc::new(Version::empty(CompactionOptions::default().levels));
        let crashed = AtomicBool::new(true);
        let far = Instant::now() + Duration::from_secs(3600);
        assert!(matches!(s.next(empty, &crashed, far), Next::Stop));
        assert!(s.merge_should_stop(&crashed));
    }

    #[test]
    fn paused_compaction_runs_no_retention_until_resumed() {
        let s = Arc::new(scheduler(1));
        s.set_paused(true);
        let waiter = {
            let s = s.clone();
            std::thread::spawn(move || {
                let empty = || Arc::new(Version::empty(CompactionOptions::default().levels));
                matches!(
                    s.next(empty, &AtomicBool::new(false), Instant::now()),
                    Next::Retention
                )
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "paused: nothing runs");
        s.set_paused(false);
        assert!(waiter.join().expect("thread"));
    }
}
