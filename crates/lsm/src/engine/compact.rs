//! The compaction threads: each asks the
//! [`CompactionScheduler`](super::scheduler::CompactionScheduler) for the
//! next task, runs it (a trivial move, or a merge that writes new files and
//! installs them in place of its inputs), and applies retention when it is
//! due. [`crate::Engine::compact`] runs the same tasks on the caller's thread.
//!
//! A merge of deeper levels can take minutes: between its traces it lets due
//! merges of the levels above run first ([`Inner::upper_inside_deeper_merge`]),
//! so level 0 does not fill up behind it and stop ingest.
//!
//! A merge counts its memory in the memory budget ([`crate::budget::Work`]):
//! before it starts, what it expects to hold at most, which narrows
//! admission at once; if the process does not leave that room beside the
//! requests and buffered spans it holds, the merge waits for flushes to
//! give it back ([`Inner::wait_for_memory`]), a few seconds at most.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use super::{add, scheduler::Next, Inner};
use crate::{
    compaction::{CompactionTask, Merge, MergeContext, MergeOutput, TaskKind},
    error::{Error, Result},
    manifest::Edit,
    table::SsTable,
    version::{TableFile, Version},
};

/// Pause after a failed compaction before the next try.
const COMPACTION_RETRY: Duration = Duration::from_secs(1);
/// How often a merge of deeper levels looks for a due merge above it.
const UPPER_CHECK: Duration = Duration::from_millis(100);
/// Longest a merge waits for the room it expects to need before it starts
/// anyway: level 0 must not fill up behind a merge that waits.
const MEMORY_WAIT: Duration = Duration::from_secs(5);
/// How often a merge waiting for memory looks again.
const MEMORY_CHECK: Duration = Duration::from_millis(20);

impl Inner {
    fn current_version(&self) -> Arc<Version> {
        self.tree.version()
    }

    /// Body of a compaction thread: pick, run, repeat; apply retention every
    /// `retention_interval`.
    pub(super) fn run_compactor(&self) {
        let mut last_retention = Instant::now();
        loop {
            let due = self.retention.next_due(last_retention);
            let task =
                match self
                    .scheduler
                    .next(|| self.current_version(), self.tree.crashed_flag(), due)
                {
                    Next::Task(task) => task,
                    Next::Retention => {
                        last_retention = Instant::now();
                        if let Err(e) = self.apply_retention() {
                            tracing::error!(error = %e, "retention failed");
                        }
                        continue;
                    }
                    Next::Stop => return,
                };
            let result = self.run_task(&task);
            self.scheduler.finish(&task);
            if let Err(e) = result {
                if self.tree.is_crashed() {
                    return;
                }
                add(&self.counters.compaction_errors, 1);
                tracing::error!(error = %e, "compaction failed; retrying later");
                std::thread::sleep(self.opts.retry_delay(COMPACTION_RETRY));
            }
        }
    }

    /// Runs compaction in the calling thread until nothing is left to pick.
    pub(super) fn compact_until_idle(&self) -> Result<usize> {
        let mut done = 0;
        loop {
            let closed = || self.write.is_closed() || self.tree.is_crashed();
            let task = match self.scheduler.next_now(|| self.current_version(), closed) {
                Ok(Some(task)) => task,
                Ok(None) => return Ok(done),
                Err(()) => return Err(Error::Closed),
            };
            let result = self.run_task(&task);
            self.scheduler.finish(&task);
            result?;
            done += 1;
        }
    }

    /// Called between traces of a merge whose inputs are at `level` (1 or
    /// deeper): runs a task of a level above it that is due
    /// ([`crate::compaction::pick_above`]), on this thread, before the merge goes
    /// on; a task so run may in turn let one above it go first. A level
    /// stops taking merged runs from above once a partition of it holds
    /// [`crate::compaction::run_cap`] runs no task holds: when every level is
    /// there, writes meet back-pressure as level 0 fills.
    fn upper_inside_deeper_merge(&self, level: usize) {
        let Some(task) =
            self.scheduler
                .claim_above(|| self.current_version(), self.tree.crashed_flag(), level)
        else {
            return;
        };
        add(&self.counters.merges_run_first, 1);
        let result = self.run_task(&task);
        self.scheduler.finish(&task);
        if let Err(e) = result {
            add(&self.counters.compaction_errors, 1);
            tracing::error!(
                error = %e,
                level = task.input_level,
                "compaction inside a deeper merge failed"
            );
        }
    }

    /// Writes a merge task's outputs a trace at a time. Between two traces
    /// it waits while compaction is paused and stops (`Ok(None)`, outputs
    /// removed) when the engine closes. A merge of deeper runs can take
    /// minutes and level 0 must not fill up behind it (that stops ingest),
    /// so between its traces it also runs due merges of the levels above,
    /// looking every `UPPER_CHECK`.
    fn merge(
        &self,
        task: &CompactionTask,
        ctx: &MergeContext<'_>,
        started: Instant,
    ) -> Result<Option<MergeOutput>> {
        let deeper = task.input_level > 0;
        let mut next_check = Duration::ZERO;
        let work = self
            .write
            .budget
            .work(Merge::expected_bytes(task, ctx.opts));
        self.wait_for_memory();
        let mut merge = Merge::start(task, ctx, Some(work))?;
        while merge.read_trace()? {
            if deeper {
                if let Some(hook) = self.opts.between_deeper_traces() {
                    hook();
                }
                if started.elapsed() >= next_check {
                    next_check = started.elapsed() + UPPER_CHECK;
                    self.upper_inside_deeper_merge(task.input_level);
                }
            }
            if self.scheduler.merge_should_stop(self.tree.crashed_flag()) {
                return Ok(None);
            }
            merge.write_trace()?;
        }
        merge.finish().map(Some)
    }

    /// Waits, [`MEMORY_WAIT`] at most, until the process leaves room for the
    /// background work counted in the budget beside the requests and spans
    /// it holds (see [`crate::budget::MemoryBudget::has_room_for_work`]).
    /// The work counted narrows admission meanwhile, so the room comes back
    /// as flushes give buffered spans' memory back.
    fn wait_for_memory(&self) {
        let budget = &self.write.budget;
        if budget.has_room_for_work() {
            return;
        }
        add(&self.counters.merges_waited_for_memory, 1);
        let until = Instant::now() + MEMORY_WAIT;
        while !budget.has_room_for_work()
            && Instant::now() < until
            && !self.scheduler.merge_should_stop(self.tree.crashed_flag())
        {
            std::thread::sleep(MEMORY_CHECK);
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
                    next_file_id: self.tree.next_file_id(),
                    removed: task.inputs.iter().map(|f| f.id).collect(),
                    added: moved.iter().map(|f| f.entry()).collect(),
                },
                moved,
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
        let ctx = MergeContext {
            opts: &self.opts.compaction,
            table_opts: &self.opts.table,
            tables_dir: &self.tables_dir,
            next_file_id: self.tree.file_ids(),
            limiter: &self.limiter,
            expire_before: self.retention.expire_before(),
            after_first_trace: self.opts.after_first_trace(),
            index_block_parts: self.opts.index_block_parts,
        };
        let merged = self.merge(task, &ctx, started).inspect_err(|e| {
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
        let crash = self.opts.crash_at();
        self.crash_before_outputs_synced(crash, &out.files)?;
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
                    self.tree.discard_uninstalled(&paths);
                    return Err(e);
                }
            }
        }
        let edit = Edit {
            next_file_id: self.tree.next_file_id(),
            removed: task.inputs.iter().map(|f| f.id).collect(),
            added: out.files.iter().map(|(e, _)| *e).collect(),
        };
        if let Err(e) = self.install_merged(edit, added, crash) {
            let paths: Vec<_> = out.files.iter().map(|(_, p)| p.clone()).collect();
            self.tree.discard_uninstalled(&paths);
            return Err(e);
        }
        let c = &self.counters;
        add(&c.compactions, 1);
        add(&c.compaction_bytes_read, out.bytes_read);
        add(&c.compaction_bytes_written, out.bytes_written);
        add(&c.compaction_duplicates, out.duplicates);
        add(&c.compaction_index_parts_reused, out.parts_reused);
        add(&c.compaction_cells_summed, u64::from(out.cells_summed()));
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
            cells_summed = out.cells_summed(),
            cells_not_summed = %out.cells_not_summed.map_or("-", |why| why.as_str()),
            memory_expected = out.memory_expected,
            memory_held_at_most = out.memory_held_at_most,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compaction done"
        );
        Ok(())
    }
}
