//! The engine's background work: the flusher, the compaction threads and
//! retention, and the one way any of them changes the tree, [`Inner::install`]:
//! append the edit to the manifest (fsync), then swap the super-version under
//! the state lock, then mark removed files obsolete (deleted when the last
//! snapshot using them drops).

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::{add, CrashPoint, Inner, Task, FLUSH_RETRY};
use crate::{
    compaction::{self, merge, table_path, CompactionTask, MergeContext, TaskKind},
    error::{Error, Result},
    index::{write_sidecar, SummarySet},
    manifest::{Edit, FileEntry, Manifest, ManifestState, NO_PARTITION},
    memtable::Sealed,
    sort::sorted_by_trace_id,
    table::{SsTable, SsTableBuilder, TableOptions},
    version::{SuperVersion, TableFile, Version},
};

/// How often the flusher looks for buffers past their maximum age.
const AGE_CHECK: Duration = Duration::from_millis(500);
/// Longest a compaction thread sleeps without looking for work.
const COMPACTION_IDLE: Duration = Duration::from_secs(1);
/// Pause after a failed compaction before the next try.
const COMPACTION_RETRY: Duration = Duration::from_secs(1);
/// How often a merge of deeper levels looks for a due merge above it.
const UPPER_CHECK: Duration = Duration::from_millis(100);

impl Inner {
    /// Makes a sealed buffer visible to readers, then queues it for flushing.
    /// Called with the shard lock held (see `memtable`).
    pub(super) fn publish(&self, sealed: Sealed) {
        let sealed = Arc::new(sealed);
        {
            let mut state = self.state.lock();
            let mut sealed_list = state.sealed.clone();
            sealed_list.push(sealed.clone());
            *state = Arc::new(SuperVersion {
                sealed: sealed_list,
                version: state.version.clone(),
            });
        }
        self.send(Task::Flush(sealed));
    }

    pub(super) fn send(&self, task: Task) {
        // The receiver lives as long as the flusher thread, which only exits on Stop.
        if self.flush_tx.send(task).is_err() {
            tracing::error!("flusher is gone; sealed buffer stays in memory and in the WAL");
        }
    }

    pub(super) fn run_flusher(&self, rx: Receiver<Task>) {
        loop {
            match rx.recv_timeout(AGE_CHECK) {
                Ok(Task::Flush(sealed)) => self.flush_until_done(&sealed),
                // Everything queued before Stop has been flushed (FIFO channel).
                Ok(Task::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    if !self.closed.load(Ordering::Acquire) {
                        self.memtable.seal_where(false, |s| self.publish(s));
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
                    if self.crashed.load(Ordering::Acquire) {
                        return;
                    }
                    self.counters.flush_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, buffer = sealed.id, "flush failed; retrying");
                    if self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(self.opts.hooks.retry_delay.unwrap_or(FLUSH_RETRY));
                }
            }
        }
    }

    /// Sorts and writes one sealed buffer as a level-0 file, then installs it.
    /// No lock is held while sorting or writing.
    fn flush_one(&self, sealed: &Arc<Sealed>) -> Result<()> {
        if self.crashed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let spans = sorted_by_trace_id(sealed.chunks.iter().flat_map(|c| c.iter()));
        let id = self.next_file_id.fetch_add(1, Ordering::Relaxed);
        let path = table_path(&self.tables_dir, id);
        let table = TableOptions {
            zstd_level: self.opts.flush_zstd_level,
            ..self.opts.table.clone()
        };
        let mut builder = SsTableBuilder::create(&path, table)?;
        for span in &spans {
            builder.add(span)?;
        }
        let meta = builder.finish()?;
        let summary = Arc::new(SummarySet::from_sorted_spans(&spans));
        write_sidecar(&path, &summary)?;
        self.summary_cache.insert_file(id, summary);
        let entry = FileEntry {
            id,
            level: 0,
            partition: NO_PARTITION,
            file_size: meta.file_size,
        };
        let installed = SsTable::open(&path).and_then(|table| {
            let file = Arc::new(TableFile::new(entry, table, self.janitor.clone()));
            self.install(
                Edit {
                    next_file_id: self.next_file_id.load(Ordering::Relaxed),
                    removed: Vec::new(),
                    added: vec![entry],
                },
                vec![file],
                Some(sealed.id),
                None,
            )
        });
        if let Err(e) = installed {
            self.discard_uninstalled(&[path]);
            return Err(e);
        }
        self.mem_bytes.fetch_sub(sealed.bytes, Ordering::AcqRel);
        self.flushed.notify_all();
        self.sched.lock().last_flush = Instant::now();
        self.sched_cv.notify_all();
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
    fn trim_wal(&self) {
        let mut keep_from = self
            .wal
            .current_segment()
            .min(self.memtable.min_wal_segment());
        if let Some((&seg, _)) = self.in_flight.lock().first_key_value() {
            keep_from = keep_from.min(seg);
        }
        let snapshot = self.state.lock().clone();
        for sealed in &snapshot.sealed {
            keep_from = keep_from.min(sealed.min_wal_segment);
        }
        match self
            .wal
            .delete_segments_before(keep_from, Some(&self.trash))
        {
            Ok(0) => {}
            Ok(n) => tracing::debug!(deleted = n, keep_from, "deleted wal segments"),
            Err(e) => tracing::warn!(error = %e, "deleting wal segments"),
        }
    }

    /// Writes `edit` to the manifest, then swaps in the version with `added`
    /// and without `edit.removed` (and without the sealed buffer `flushed`).
    /// `crash` makes a test crash at one of the steps.
    fn install(
        &self,
        edit: Edit,
        added: Vec<Arc<TableFile>>,
        flushed: Option<u64>,
        crash: Option<CrashPoint>,
    ) -> Result<()> {
        let mut manifest = self.manifest.lock();
        if self.crashed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.settle_manifest(&mut manifest)?;
        match crash {
            Some(point @ CrashPoint::TornManifestAppend) => {
                let mut full = Vec::new();
                edit.encode(&mut full);
                manifest.append_torn(&edit, 8 + full.len() / 2)?;
                return Err(self.crash(point));
            }
            Some(point @ CrashPoint::AfterManifestAppend) => {
                manifest.append(&edit)?;
                return Err(self.crash(point));
            }
            _ => self.append_edit(&mut manifest, &edit)?,
        }
        let removed: HashSet<u64> = edit.removed.iter().copied().collect();
        let kept: HashSet<u64> = added.iter().map(|f| f.id).collect();
        let (obsolete, current) = {
            let mut state = self.state.lock();
            let obsolete: Vec<Arc<TableFile>> = state
                .version
                .files()
                .filter(|f| removed.contains(&f.id) && !kept.contains(&f.id))
                .cloned()
                .collect();
            let version = Arc::new(state.version.apply(&removed, added));
            let sealed = state
                .sealed
                .iter()
                .filter(|s| Some(s.id) != flushed)
                .cloned()
                .collect();
            *state = Arc::new(SuperVersion { sealed, version });
            (obsolete, state.clone())
        };
        self.l0_files
            .store(current.version.l0.len(), Ordering::Relaxed);
        self.summary_cache.remove_files(&edit.removed);
        if let Some(point @ CrashPoint::BeforeInputsDeleted) = crash {
            return Err(self.crash(point));
        }
        for f in obsolete {
            f.mark_obsolete();
        }
        if manifest.wants_rewrite() {
            // The edit is installed: a failed compaction of the log must not
            // make the caller believe otherwise. The next install retries it.
            if let Err(e) = self.rewrite_manifest(&mut manifest, &current.version) {
                tracing::error!(error = %e, "rewriting the manifest");
            }
        }
        Ok(())
    }

    /// Rewrites the manifest if an earlier append failed: its edit may or may
    /// not be in the file, and a rewrite from the live version settles it.
    pub(super) fn settle_manifest(&self, manifest: &mut Manifest) -> Result<()> {
        if manifest.is_damaged() {
            let live = self.state.lock().version.clone();
            self.rewrite_manifest(manifest, &live)?;
            tracing::info!("manifest rewritten after an earlier failed append");
        }
        Ok(())
    }

    /// Appends `edit` to a settled manifest. On failure, whether the edit is
    /// durable is unknown: the manifest is rewritten without it, so it
    /// certainly is not; if that fails too, the next edit tries again first.
    pub(super) fn append_edit(&self, manifest: &mut Manifest, edit: &Edit) -> Result<()> {
        self.settle_manifest(manifest)?;
        if let Err(e) = manifest.append(edit) {
            let live = self.state.lock().version.clone();
            if let Err(again) = self.rewrite_manifest(manifest, &live) {
                tracing::error!(error = %again, "rewriting the manifest after a failed append");
            }
            return Err(e);
        }
        Ok(())
    }

    /// Replaces the manifest by one edit naming the files of `version`. On
    /// failure the old one is marked damaged: the rename may have happened,
    /// so appending to the old file could write to an unlinked inode.
    fn rewrite_manifest(&self, manifest: &mut Manifest, version: &Version) -> Result<()> {
        let state = ManifestState {
            files: version.files().map(|f| (f.id, f.entry())).collect(),
            next_file_id: self.next_file_id.load(Ordering::Relaxed),
            torn_tail: false,
        };
        match Manifest::create(&self.opts.data_dir, &state, &self.faults) {
            Ok(fresh) => {
                *manifest = fresh;
                // The new manifest names none of them: they were never installed.
                for path in std::mem::take(&mut *self.orphans.lock()) {
                    if let Err(e) = std::fs::remove_file(&path) {
                        tracing::warn!(file = %path.display(), error = %e, "removing an uninstalled file");
                    }
                }
                Ok(())
            }
            Err(e) => {
                manifest.mark_damaged();
                Err(e)
            }
        }
    }

    /// Removes files written for an edit that was not installed, unless the
    /// manifest is damaged: then the edit may be durable and name them, and
    /// they go once a rewrite has settled the manifest (or at the next open).
    fn discard_uninstalled(&self, paths: &[std::path::PathBuf]) {
        let manifest = self.manifest.lock();
        if self.crashed.load(Ordering::Acquire) {
            return;
        }
        if manifest.is_damaged() {
            self.orphans.lock().extend_from_slice(paths);
            return;
        }
        drop(manifest);
        for path in paths {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!(file = %path.display(), error = %e, "removing an uninstalled file");
            }
        }
    }

    /// Simulates a crash: from now on nothing is written or deleted.
    fn crash(&self, point: CrashPoint) -> Error {
        tracing::warn!(?point, "simulated crash");
        self.crashed.store(true, Ordering::SeqCst);
        self.janitor.enabled.store(false, Ordering::SeqCst);
        Error::SimulatedCrash(point)
    }

    pub(super) fn set_paused(&self, paused: bool) {
        let mut s = self.sched.lock();
        s.paused = paused;
        self.compaction_paused.store(paused, Ordering::SeqCst);
        self.sched_cv.notify_all();
    }

    pub(super) fn stop_compaction(&self) {
        let mut s = self.sched.lock();
        s.stopping = true;
        self.compaction_stopping.store(true, Ordering::SeqCst);
        self.sched_cv.notify_all();
    }

    /// Asked by a merge between traces: waits while paused; true to stop.
    fn merge_should_stop(&self) -> bool {
        if self.compaction_paused.load(Ordering::Relaxed) {
            let mut s = self.sched.lock();
            while s.paused && !s.stopping {
                self.sched_cv.wait(&mut s);
            }
        }
        self.compaction_stopping.load(Ordering::Relaxed) || self.crashed.load(Ordering::Relaxed)
    }

    /// Body of a compaction thread: pick, run, repeat; apply retention every
    /// `retention_interval`.
    pub(super) fn run_compactor(&self) {
        let mut last_retention = Instant::now();
        loop {
            let task = {
                let mut s = self.sched.lock();
                loop {
                    if s.stopping || self.crashed.load(Ordering::Acquire) {
                        return;
                    }
                    if !s.paused {
                        if last_retention.elapsed() >= self.opts.retention_interval {
                            break None;
                        }
                        let version = self.state.lock().version.clone();
                        // With two threads or more, one is kept for level 0: a
                        // merge of deeper runs can take minutes, and level 0
                        // filling up behind it would stop ingest.
                        let threads = self.opts.compaction_threads;
                        let picked = if threads > 1 && s.deeper_running + 1 >= threads {
                            compaction::pick_level0(&version, &self.opts.compaction, &s.busy)
                        } else {
                            compaction::pick(&version, &self.opts.compaction, &s.busy)
                        }
                        .or_else(|| {
                            // No flush for a while: merge what level 0 holds.
                            let quiet = s.last_flush.elapsed() >= self.opts.compaction.l0_quiet;
                            quiet.then(|| compaction::pick_level0_quiet(&version, &s.busy))?
                        });
                        if let Some(task) = picked {
                            s.claim(&task);
                            break Some(task);
                        }
                    }
                    let wait = self
                        .opts
                        .retention_interval
                        .saturating_sub(last_retention.elapsed())
                        .clamp(Duration::from_millis(10), COMPACTION_IDLE);
                    self.sched_cv.wait_for(&mut s, wait);
                }
            };
            let Some(task) = task else {
                last_retention = Instant::now();
                if let Err(e) = self.apply_retention() {
                    tracing::error!(error = %e, "retention failed");
                }
                continue;
            };
            let result = self.run_task(&task);
            self.finish_task(&task);
            if let Err(e) = result {
                if self.crashed.load(Ordering::Acquire) {
                    return;
                }
                add(&self.counters.compaction_errors, 1);
                tracing::error!(error = %e, "compaction failed; retrying later");
                std::thread::sleep(self.opts.hooks.retry_delay.unwrap_or(COMPACTION_RETRY));
            }
        }
    }

    fn finish_task(&self, task: &CompactionTask) {
        let mut s = self.sched.lock();
        for f in &task.inputs {
            s.busy.remove(&f.id);
        }
        if task.input_level > 0 {
            s.deeper_running -= 1;
        }
        self.sched_cv.notify_all();
    }

    /// Runs compaction in the calling thread until nothing is left to pick.
    pub(super) fn compact_until_idle(&self) -> Result<usize> {
        let mut done = 0;
        loop {
            let task = {
                let mut s = self.sched.lock();
                loop {
                    if self.closed.load(Ordering::Acquire) || self.crashed.load(Ordering::Acquire) {
                        return Err(Error::Closed);
                    }
                    let version = self.state.lock().version.clone();
                    if let Some(task) = compaction::pick(&version, &self.opts.compaction, &s.busy) {
                        s.claim(&task);
                        break task;
                    }
                    if s.busy.is_empty() {
                        return Ok(done);
                    }
                    self.sched_cv.wait_for(&mut s, COMPACTION_IDLE);
                }
            };
            let result = self.run_task(&task);
            self.finish_task(&task);
            result?;
            done += 1;
        }
    }

    /// Called between traces of a merge whose inputs are at `level` (1 or
    /// deeper): runs a task of a level above it that is due
    /// ([`compaction::pick_above`]), on this thread, before the merge goes
    /// on; a task so run may in turn let one above it go first. A level
    /// stops taking merged runs from above once a partition of it holds
    /// [`compaction::run_cap`] runs no task holds: when every level is
    /// there, writes meet back-pressure as level 0 fills.
    fn upper_inside_deeper_merge(&self, level: usize) {
        let task = {
            let mut s = self.sched.lock();
            if s.paused || s.stopping || self.crashed.load(Ordering::Acquire) {
                return;
            }
            let version = self.state.lock().version.clone();
            let cap = compaction::run_cap(&self.opts.compaction);
            let Some(task) =
                compaction::pick_above(&version, &self.opts.compaction, &s.busy, level, cap)
            else {
                return;
            };
            s.claim(&task);
            task
        };
        add(&self.counters.merges_run_first, 1);
        let result = self.run_task(&task);
        self.finish_task(&task);
        if let Err(e) = result {
            add(&self.counters.compaction_errors, 1);
            tracing::error!(
                error = %e,
                level = task.input_level,
                "compaction inside a deeper merge failed"
            );
        }
    }

    /// Runs one task to its install.
    fn run_task(&self, task: &CompactionTask) -> Result<()> {
        let started = Instant::now();
        if task.kind == TaskKind::Move {
            let moved: Vec<Arc<TableFile>> = task
                .inputs
                .iter()
                .map(|f| Arc::new(f.moved_to(task.output_level as u32)))
                .collect();
            self.install(
                Edit {
                    next_file_id: self.next_file_id.load(Ordering::Relaxed),
                    removed: task.inputs.iter().map(|f| f.id).collect(),
                    added: moved.iter().map(|f| f.entry()).collect(),
                },
                moved,
                None,
                None,
            )?;
            add(&self.counters.compaction_moves, task.inputs.len() as u64);
            tracing::debug!(
                files = task.inputs.len(),
                to_level = task.output_level,
                "moved a sorted run down"
            );
            return Ok(());
        }
        tracing::info!(
            from_level = task.input_level,
            to_level = task.output_level,
            inputs = task.inputs.len(),
            input_bytes = task.input_bytes(),
            "compaction started"
        );
        // A merge of deeper runs can take minutes; level 0 must not fill up
        // behind it (that stops ingest), so between traces it lets due
        // merges of the levels above run first, checking every UPPER_CHECK.
        let deeper = task.input_level > 0;
        let next_check_ms = AtomicU64::new(0);
        let stop = || {
            if deeper {
                if let Some(hook) = &self.opts.hooks.between_deeper_traces {
                    hook();
                }
                let now_ms = started.elapsed().as_millis() as u64;
                if now_ms >= next_check_ms.load(Ordering::Relaxed) {
                    next_check_ms.store(now_ms + UPPER_CHECK.as_millis() as u64, Ordering::Relaxed);
                    self.upper_inside_deeper_merge(task.input_level);
                }
            }
            self.merge_should_stop()
        };
        let ctx = MergeContext {
            opts: &self.opts.compaction,
            table_opts: &self.opts.table,
            tables_dir: &self.tables_dir,
            next_file_id: &self.next_file_id,
            limiter: &self.limiter,
            expire_before: self.expire_before(),
            should_stop: &stop,
            after_first_trace: self.opts.hooks.after_first_trace.as_deref(),
        };
        let merged = merge(task, &ctx).inspect_err(|e| {
            // A damaged input would fail every retry: take it out of the tree.
            if let Some((path, _)) = e.location().filter(|_| e.is_corruption()) {
                if let Some(input) = task.inputs.iter().find(|f| f.path() == path) {
                    self.quarantine(input.id, e);
                }
            }
        })?;
        let Some(out) = merged else {
            tracing::info!("compaction stopped before it finished; outputs removed");
            return Ok(());
        };
        let crash = self.opts.hooks.crash_at;
        if let Some(point @ CrashPoint::BeforeOutputsSynced) = crash {
            for (entry, path) in &out.files {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| Error::io(path, e))?;
                f.set_len(entry.file_size / 2)
                    .map_err(|e| Error::io(path, e))?;
            }
            return Err(self.crash(point));
        }
        let mut added = Vec::with_capacity(out.files.len());
        for (entry, path) in &out.files {
            match SsTable::open(path) {
                Ok(table) => added.push(Arc::new(TableFile::new(
                    *entry,
                    table,
                    self.janitor.clone(),
                ))),
                Err(e) => {
                    let paths: Vec<_> = out.files.iter().map(|(_, p)| p.clone()).collect();
                    self.discard_uninstalled(&paths);
                    return Err(e);
                }
            }
        }
        let edit = Edit {
            next_file_id: self.next_file_id.load(Ordering::Relaxed),
            removed: task.inputs.iter().map(|f| f.id).collect(),
            added: out.files.iter().map(|(e, _)| *e).collect(),
        };
        if let Err(e) = self.install(edit, added, None, crash) {
            let paths: Vec<_> = out.files.iter().map(|(_, p)| p.clone()).collect();
            self.discard_uninstalled(&paths);
            return Err(e);
        }
        let c = &self.counters;
        add(&c.compactions, 1);
        add(&c.compaction_bytes_read, out.bytes_read);
        add(&c.compaction_bytes_written, out.bytes_written);
        add(&c.compaction_duplicates, out.duplicates);
        add(&c.compaction_index_parts_reused, out.parts_reused);
        add(&c.expired_spans_dropped, out.expired);
        tracing::info!(
            from_level = task.input_level,
            to_level = task.output_level,
            inputs = task.inputs.len(),
            outputs = out.files.len(),
            bytes_read = out.bytes_read,
            bytes_written = out.bytes_written,
            spans = out.spans_out,
            duplicates = out.duplicates,
            expired = out.expired,
            index_parts_reused = out.parts_reused,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compaction done"
        );
        Ok(())
    }

    /// Drops every file whose newest span is past retention, by one manifest
    /// edit. Files in running compactions are left for the next pass.
    pub(super) fn apply_retention(&self) -> Result<usize> {
        let expire_before = self.expire_before();
        if expire_before == 0 {
            return Ok(0);
        }
        let expired: Vec<Arc<TableFile>> = {
            let mut s = self.sched.lock();
            let version = self.state.lock().version.clone();
            let expired: Vec<_> = version
                .files()
                .filter(|f| {
                    !s.busy.contains(&f.id) && f.table().meta().max_time_unix_nano < expire_before
                })
                .cloned()
                .collect();
            s.busy.extend(expired.iter().map(|f| f.id));
            expired
        };
        if expired.is_empty() {
            return Ok(0);
        }
        let bytes: u64 = expired.iter().map(|f| f.size()).sum();
        let task = CompactionTask {
            kind: TaskKind::Merge,
            input_level: 0,
            output_level: 0,
            inputs: expired,
        };
        let result = self.install(
            Edit {
                next_file_id: self.next_file_id.load(Ordering::Relaxed),
                removed: task.inputs.iter().map(|f| f.id).collect(),
                added: Vec::new(),
            },
            Vec::new(),
            None,
            None,
        );
        self.finish_task(&task);
        result?;
        let n = task.inputs.len();
        add(&self.counters.retention_files_dropped, n as u64);
        add(&self.counters.retention_bytes_dropped, bytes);
        tracing::info!(files = n, bytes, expire_before, "retention dropped files");
        Ok(n)
    }
}
