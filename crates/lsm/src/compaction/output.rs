//! Runs a merge task a trace at a time ([`Merge`]): reads the inputs through
//! a [`MergeIterator`] and writes the outputs, each fsynced and renamed into
//! place. Installs nothing and decides nothing between traces: the engine
//! drives the steps (it may stop, or run other merges first, between any
//! two), then writes the manifest edit and swaps the version.
//!
//! A merge's memory (its inputs' index sidecars, read whole; its open
//! outputs' summaries and metrics cells; the finishing of those cells) is
//! the largest the server holds besides spans and requests. Given a
//! [`Work`] of the memory budget ([`Merge::count_in`]), a merge counts it
//! there as it goes, and [`Merge::expected_bytes`] is what it is expected
//! to hold at most, before it starts.

use std::{
    collections::{btree_map::Entry, BTreeMap},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{
    budget::Work,
    error::Result,
    index::{
        cells::{CellsFile, Counts, Family, FileCells, InputSums, NotSummed, RunCells},
        remove_sidecar, SidecarBuilder, SidecarParts,
    },
    layout::{sidecar_path, table_path},
    manifest::FileEntry,
    span::Span,
    table::{SsTableBuilder, TableOptions},
};

use super::{CompactionOptions, CompactionTask, MergeIterator, RateLimiter};

/// What a merge needs from the engine.
pub struct MergeContext<'a> {
    pub opts: &'a CompactionOptions,
    pub table_opts: &'a TableOptions,
    pub tables_dir: &'a Path,
    pub next_file_id: &'a AtomicU64,
    pub limiter: &'a RateLimiter,
    /// Spans that end before this (Unix ns) are past retention and dropped.
    pub expire_before: u64,
    /// Called once after the first trace is written (a test hook).
    pub after_first_trace: Option<&'a (dyn Fn() + Send + Sync)>,
    /// Trace parts per block of the outputs' sidecars.
    pub index_block_parts: usize,
}

/// Traces a merge writes between two counts of what it holds.
const COUNT_EVERY: u32 = 1024;

/// What a merge expects to hold per span of its open outputs, besides
/// their sidecar parts: the span's metrics record (8 bytes, 16 at most as
/// the records grow by doubling).
const RECORD_BYTES_PER_SPAN: u64 = 16;

/// What finishing an output's metrics cells takes per cell of its seconds
/// table (a cell and a duration, 48 bytes, twice:
/// [`crate::index::cells::CellsBuilder::finish_counted`]). The inputs' own
/// seconds tables bound how many cells the outputs' have: from a few per
/// thousand spans to every other span, by the spans' services, names and
/// start times.
const FINISH_BYTES_PER_CELL: u64 = 96;

/// The files a merge wrote and what it did.
#[derive(Debug, Default)]
pub struct MergeOutput {
    pub files: Vec<(FileEntry, PathBuf)>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub spans_in: u64,
    pub spans_out: u64,
    pub duplicates: u64,
    pub expired: u64,
    /// Traces whose search-index part was carried over from an input's
    /// sidecar instead of summarized from their spans.
    pub parts_reused: u64,
    /// Why the outputs' metrics cells were counted from their spans; `None`
    /// when they were added up from the inputs' cells ([`InputSums`]).
    pub cells_not_summed: Option<NotSummed>,
    /// What the merge was expected to hold at most when it started, and the
    /// most it held, as counted (in the work [`Merge::start`] was given); 0
    /// when not counted.
    pub memory_expected: usize,
    pub memory_held_at_most: usize,
}

impl MergeOutput {
    /// Whether the outputs' metrics cells were added up from the inputs'
    /// cells instead of counted from their spans.
    pub fn cells_summed(&self) -> bool {
        self.cells_not_summed.is_none()
    }
}

/// One open output per partition, and the partition's run so far.
struct Open {
    id: u64,
    path: PathBuf,
    builder: SsTableBuilder,
    /// The search-index sidecar of the same spans, written beside the file.
    summary: SidecarBuilder,
    run: RunSoFar,
}

/// The files of a partition's run written so far: their unnamed and
/// attribute cells' sums where the merge counts its spans, their IDs and
/// the spans they hold where it adds up its inputs' cells.
#[derive(Default)]
struct RunSoFar {
    cells: RunCells,
    members: Vec<u64>,
    spans: u64,
}

/// A merge under way: [`read_trace`](Merge::read_trace) and
/// [`write_trace`](Merge::write_trace) in turn until the inputs are done,
/// then [`finish`](Merge::finish). Dropped before it finishes (stopped, or
/// after an error), it removes the outputs it wrote.
pub struct Merge<'a> {
    task: &'a CompactionTask,
    ctx: &'a MergeContext<'a>,
    merger: MergeIterator<'a>,
    /// Level 1 and deeper keep their partition; level 0's spans go to
    /// theirs by start.
    fixed_partition: Option<u64>,
    open: BTreeMap<u64, Open>,
    sidecars: Vec<Sidecar>,
    /// The trace read last, not yet written.
    trace: Vec<Span>,
    /// The trace's unexpired spans and their partitions, reused from trace
    /// to trace.
    kept: Vec<Span>,
    partitions: Vec<u64>,
    first: bool,
    out: MergeOutput,
    finished: bool,
    /// Where what the merge holds is counted, if anywhere.
    work: Option<Work>,
    /// The outputs' metrics cells, added up from the inputs' where they
    /// can be; `None`: counted from the spans written.
    sums: Option<InputSums>,
    /// Traces written since the last count.
    since_count: u32,
}

impl<'a> Merge<'a> {
    /// A merge of `task`'s inputs, counting what it holds in `work` (if
    /// given) from its start: it adds up its inputs' cells here, reading
    /// each input's.
    pub fn start(
        task: &'a CompactionTask,
        ctx: &'a MergeContext<'a>,
        mut work: Option<Work>,
    ) -> Result<Merge<'a>> {
        let mut merger =
            MergeIterator::new(task.inputs.iter().map(|f| f.table().iter()).collect())?;
        if task.input_level > 0 {
            merger = merger.merged_inputs();
        }
        let fixed_partition = (task.input_level > 0).then(|| task.inputs[0].partition);
        let inputs: Vec<_> = task
            .inputs
            .iter()
            .map(|f| (f.id, f.path(), f.table().meta().span_count))
            .collect();
        let mut held_at_most = 0;
        let sums = InputSums::of(
            &inputs,
            fixed_partition,
            ctx.opts.partition_nanos(),
            ctx.table_opts.cell_attributes.clone(),
            &mut |bytes| {
                held_at_most = held_at_most.max(bytes);
                if let Some(work) = &mut work {
                    work.holds(bytes);
                }
            },
        );
        if sums.is_ok() {
            merger = merger.keep_repeats();
        }
        let mut merge = Merge {
            task,
            ctx,
            merger,
            fixed_partition,
            open: BTreeMap::new(),
            sidecars: task.inputs.iter().map(|_| Sidecar::Unread).collect(),
            trace: Vec::new(),
            kept: Vec::new(),
            partitions: Vec::new(),
            first: true,
            out: MergeOutput {
                bytes_read: task.input_bytes(),
                cells_not_summed: sums.as_ref().err().copied(),
                memory_held_at_most: held_at_most,
                ..MergeOutput::default()
            },
            finished: false,
            work: None,
            since_count: 0,
            sums: sums.ok(),
        };
        if let Some(work) = work {
            merge.count_in(work);
        }
        Ok(merge)
    }

    /// About the most a merge of `task` holds, from its inputs alone: the
    /// index sidecars of the inputs it reads at once (it reads one whole
    /// when a trace first needs it and drops it at the input's end: all of
    /// level 0's flushes, which each span the whole ID space, but one file
    /// at a time of each deeper run); and for each partition's open output
    /// (cut at `target_file_bytes`) the same share of the sidecars again for
    /// its parts, `RECORD_BYTES_PER_SPAN` per span for its metrics records
    /// and `FINISH_BYTES_PER_CELL` for the same share of the inputs'
    /// seconds cells. What it holds past that, it counts when it holds it.
    pub fn expected_bytes(task: &CompactionTask, opts: &CompactionOptions) -> usize {
        let sizes: Vec<u64> = task
            .inputs
            .iter()
            .map(|f| std::fs::metadata(sidecar_path(f.path())).map_or(0, |m| m.len()))
            .collect();
        let metas: Vec<_> = task.inputs.iter().map(|f| f.table().meta()).collect();
        let at_once = metas
            .iter()
            .map(|at| {
                let id = at.min_trace_id;
                metas
                    .iter()
                    .zip(&sizes)
                    .filter(|(m, _)| m.min_trace_id <= id && id <= m.max_trace_id)
                    .map(|(_, size)| size)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let cells: u64 = task
            .inputs
            .iter()
            .filter_map(|f| CellsFile::open(f.path()).ok().flatten())
            .map(|c| c.cell_count(Family::Named, 1))
            .sum();
        let sidecars: u64 = sizes.iter().sum();
        let spans: u64 = metas.iter().map(|m| m.span_count).sum();
        let (bytes, max_spans) = (task.input_bytes().max(1), spans.max(1));
        let per_output =
            (u128::from(spans) * u128::from(opts.target_file_bytes) / u128::from(bytes)) as u64;
        let partitions = if task.input_level == 0 {
            let first = metas
                .iter()
                .map(|m| m.min_time_unix_nano)
                .min()
                .unwrap_or(0);
            let last = metas
                .iter()
                .map(|m| m.max_time_unix_nano)
                .max()
                .unwrap_or(0);
            opts.partition_of(last)
                .saturating_sub(opts.partition_of(first))
                .saturating_add(1)
        } else {
            1
        };
        let open = per_output.saturating_mul(partitions).min(spans);
        let share = |of: u64| (u128::from(of) * u128::from(open) / u128::from(max_spans)) as u64;
        (at_once
            + share(sidecars)
            + open * RECORD_BYTES_PER_SPAN
            + share(cells) * FINISH_BYTES_PER_CELL) as usize
    }

    /// Counts what the merge holds in `work` from now on: every
    /// `COUNT_EVERY` traces, and before each output's metrics cells are
    /// finished.
    fn count_in(&mut self, work: Work) {
        self.out.memory_expected = work.expected();
        self.work = Some(work);
        self.count();
    }

    /// About the bytes the merge holds: its inputs' sidecars read so far,
    /// its open outputs' summaries and cells and their runs' summed cells,
    /// its trace buffers.
    pub fn held_bytes(&self) -> usize {
        let inputs: usize = self
            .sidecars
            .iter()
            .map(|s| match s {
                Sidecar::Open(parts) => parts.held_bytes(),
                _ => 0,
            })
            .sum();
        let outputs: usize = self
            .open
            .values()
            .map(|o| o.summary.held_bytes() + o.run.cells.bytes())
            .sum();
        let traces = (self.trace.capacity() + self.kept.capacity()) * std::mem::size_of::<Span>();
        inputs + outputs + traces + self.sums.as_ref().map_or(0, InputSums::bytes)
    }

    fn count(&mut self) {
        let held = self.held_bytes();
        if let Some(work) = &mut self.work {
            work.holds(held);
            self.out.memory_held_at_most = self.out.memory_held_at_most.max(held);
        }
    }

    /// Reads the next trace of the inputs; `false` when they are done.
    pub fn read_trace(&mut self) -> Result<bool> {
        match self.merger.next_trace()? {
            Some(trace) => {
                // The iterator's buffer and ours trade places: no span moves.
                self.trace.clear();
                std::mem::swap(trace, &mut self.trace);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Writes the trace read last to its partitions' outputs.
    pub fn write_trace(&mut self) -> Result<()> {
        let (task, ctx) = (self.task, self.ctx);
        let out = &mut self.out;
        let trace_len = self.trace.len();
        let Some(trace_id) = self.trace.first().map(|s| s.trace_id) else {
            return Ok(());
        };
        out.spans_in += trace_len as u64;
        self.kept.clear();
        self.partitions.clear();
        if let Some(sums) = &mut self.sums {
            for repeat in self.merger.take_repeats() {
                sums.dropped(&repeat);
            }
        }
        for span in self.trace.drain(..) {
            if span.end_unix_nano < ctx.expire_before {
                out.expired += 1;
                if let Some(sums) = &mut self.sums {
                    sums.dropped(&span);
                }
                continue;
            }
            if let Some(sums) = &mut self.sums {
                sums.written(&span);
            }
            self.partitions.push(
                self.fixed_partition
                    .unwrap_or_else(|| ctx.opts.partition_of(span.start_unix_nano)),
            );
            self.kept.push(span);
        }
        let one_partition = self.partitions.windows(2).all(|w| w[0] == w[1]);
        // A trace that comes whole from one input and stays whole in one
        // output keeps that input's summary of it.
        let reused = match self.merger.sources() {
            &[i] if self.kept.len() == trace_len && one_partition => self.sidecars[i]
                .part(task.inputs[i].path(), &trace_id, trace_len)
                .map(|(parts, part)| (i, parts, part)),
            _ => None,
        };
        if one_partition {
            if let Some(&p) = self.partitions.first() {
                write_part(
                    &mut self.open,
                    p,
                    &mut self.kept,
                    reused,
                    (task, ctx),
                    out,
                    (&mut self.work, &mut self.sums),
                )?;
            }
        } else {
            // Spans of one trace in several hours: each hour's output gets its
            // own part of the trace.
            let mut by_partition: BTreeMap<u64, Vec<Span>> = BTreeMap::new();
            for (p, span) in self.partitions.iter().zip(self.kept.drain(..)) {
                by_partition.entry(*p).or_default().push(span);
            }
            for (p, mut spans) in by_partition {
                write_part(
                    &mut self.open,
                    p,
                    &mut spans,
                    None,
                    (task, ctx),
                    out,
                    (&mut self.work, &mut self.sums),
                )?;
            }
        }
        // An input read to its end needs its sidecar no more: the files of
        // one sorted run are read one after another, so a merge of deeper
        // runs holds about one sidecar per run, not one per file.
        for &i in self.merger.sources() {
            if self.merger.is_done(i) {
                self.sidecars[i] = Sidecar::Done;
            }
        }
        self.since_count += 1;
        if self.since_count >= COUNT_EVERY {
            self.since_count = 0;
            self.count();
        }
        if self.first {
            self.first = false;
            if let Some(hook) = ctx.after_first_trace {
                hook();
            }
        }
        Ok(())
    }

    /// Finishes the outputs once every trace is written: the files the
    /// merge wrote and what it did.
    pub fn finish(mut self) -> Result<MergeOutput> {
        self.out.duplicates = self.merger.duplicates;
        self.count();
        for (p, slot) in std::mem::take(&mut self.open) {
            if slot.builder.span_count() > 0 {
                let held = (&mut self.work, &mut self.sums);
                finish(slot, self.task, p, &mut self.out, true, held)?;
            }
        }
        self.finished = true;
        Ok(std::mem::take(&mut self.out))
    }
}

impl Drop for Merge<'_> {
    fn drop(&mut self) {
        if !self.finished {
            for (_, path) in &self.out.files {
                let _ = std::fs::remove_file(path);
                remove_sidecar(path);
            }
        }
    }
}

/// Writes `spans`, one trace's spans in partition `p`, to that partition's
/// output (a new file once the open one is full), with `reused` as their
/// index summary if given; empties `spans`.
fn write_part(
    open: &mut BTreeMap<u64, Open>,
    p: u64,
    spans: &mut Vec<Span>,
    reused: Option<(usize, &SidecarParts, crate::index::TraceSummary)>,
    (task, ctx): (&CompactionTask, &MergeContext<'_>),
    out: &mut MergeOutput,
    (work, sums): (&mut Option<Work>, &mut Option<InputSums>),
) -> Result<()> {
    let counting = sums.is_none();
    let slot = match open.entry(p) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => e.insert(Open::create(ctx, counting)?),
    };
    if slot.builder.estimated_bytes() >= ctx.opts.target_file_bytes {
        let full = std::mem::replace(slot, Open::create(ctx, counting)?);
        slot.run = finish(full, task, p, out, false, (work, sums))?;
    }
    let before = slot.builder.estimated_bytes();
    match reused {
        Some((input, parts, part)) => {
            slot.summary.add_part(input, parts, part);
            slot.summary.count(spans);
            out.parts_reused += 1;
        }
        None => slot.summary.add_trace(spans),
    }
    out.spans_out += spans.len() as u64;
    for span in spans.drain(..) {
        slot.builder.add_owned(span)?;
    }
    let wait = ctx
        .limiter
        .take(slot.builder.estimated_bytes().saturating_sub(before));
    if !wait.is_zero() {
        std::thread::sleep(wait);
    }
    Ok(())
}

/// An input's sidecar, read when a trace first needs it.
enum Sidecar {
    Unread,
    Open(Box<SidecarParts>),
    /// Missing or damaged: its traces are summarized from their spans (the
    /// output's sidecar is then as a rebuild would make it).
    Unusable,
    /// Its input is read to the end.
    Done,
}

impl Sidecar {
    /// The input's part of `trace_id`, if it holds exactly `spans` spans
    /// (fewer kept means duplicates were dropped: the part no longer fits).
    fn part(
        &mut self,
        table: &Path,
        trace_id: &crate::span::TraceId,
        spans: usize,
    ) -> Option<(&SidecarParts, crate::index::TraceSummary)> {
        if let Sidecar::Unread = self {
            *self = match SidecarParts::open(table) {
                Ok(parts) => Sidecar::Open(Box::new(parts)),
                Err(e) => {
                    tracing::warn!(file = %table.display(), error = %e,
                        "compaction input's index sidecar unreadable; summarizing its spans");
                    Sidecar::Unusable
                }
            };
        }
        let Sidecar::Open(parts) = self else {
            return None;
        };
        let found = parts.find(trace_id);
        if let Err(e) = &found {
            tracing::warn!(file = %table.display(), error = %e,
                "compaction input's index sidecar damaged; summarizing its spans");
            *self = Sidecar::Unusable;
            return None;
        }
        let Sidecar::Open(parts) = self else {
            return None;
        };
        match found {
            Ok(Some(part)) if part.span_count as usize == spans => Some((&**parts, part)),
            _ => None,
        }
    }
}

impl Open {
    /// A new output file under a fresh ID, written as it fills, its spans
    /// counted into its metrics cells if `counting`.
    fn create(ctx: &MergeContext<'_>, counting: bool) -> Result<Open> {
        let id = ctx.next_file_id.fetch_add(1, Ordering::Relaxed);
        let path = table_path(ctx.tables_dir, id);
        let summary = SidecarBuilder::new(ctx.index_block_parts);
        Ok(Open {
            builder: SsTableBuilder::create(&path, ctx.table_opts.clone())?,
            summary: if counting {
                summary.counting(ctx.table_opts.cell_attributes.clone())
            } else {
                summary.without_cells()
            },
            run: RunSoFar::default(),
            id,
            path,
        })
    }
}

/// Finishes `slot`'s file, `last` of its partition's run (the merge is over)
/// or not (the file is full): its sidecar holds its search index and its
/// metrics cells. Counted from its spans, those are its named cells and,
/// when it ends the run's sums, the run's unnamed ones; added up from the
/// inputs' (`sums`), the last file holds the run's cells of every family
/// and the others none. Returns the run so far, for the partition's next
/// file. What finishing the cells takes is counted in `work` first, on top
/// of what it last held.
fn finish(
    slot: Open,
    task: &CompactionTask,
    partition: u64,
    out: &mut MergeOutput,
    last: bool,
    (work, sums): (&mut Option<Work>, &mut Option<InputSums>),
) -> Result<RunSoFar> {
    let Open {
        id,
        path,
        builder,
        mut summary,
        mut run,
    } = slot;
    let meta = builder.finish()?;
    // Pushed first, so an error below still removes the file with the others.
    out.files.push((
        FileEntry {
            id,
            level: task.output_level as u32,
            partition,
            file_size: meta.file_size,
            remote: false,
        },
        path.clone(),
    ));
    // What the merge held before, this output's builder included.
    let (before, builder_bytes) = (work.as_ref().map_or(0, Work::held), summary.held_bytes());
    run.members.push(id);
    run.spans += meta.span_count;
    let cells = match sums {
        Some(sums) if last => sums.take(partition, std::mem::take(&mut run.members), run.spans),
        Some(_) => Some(FileCells {
            counts: Counts::InRun {
                run: run.members[0],
            },
            named_in_run: true,
            ..FileCells::default()
        }),
        None => {
            let own = summary.take_cells_counted(|extra| {
                if let Some(work) = work {
                    work.holds(before + extra);
                    out.memory_held_at_most = out.memory_held_at_most.max(before + extra);
                }
            });
            run.cells.file(id, own, last)
        }
    };
    summary.write_with(&path, cells.as_ref())?;
    out.bytes_written += meta.file_size;
    // The output is written and its builder gone: the next output to finish
    // counts from there, not on top of this one's cells.
    if let Some(work) = work {
        work.holds(before.saturating_sub(builder_bytes));
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use std::sync::{atomic::AtomicU64, Arc};

    use super::*;
    use crate::{
        budget::MemoryBudget,
        compaction::{CompactionOptions, RateLimiter, TaskKind},
        test_util::{group, span, table_file},
        version::TableFile,
    };

    /// What a merge's context borrows: default options, file IDs from 3 on,
    /// no pacing.
    struct Env {
        opts: CompactionOptions,
        table_opts: TableOptions,
        next_file_id: AtomicU64,
        limiter: RateLimiter,
    }

    impl Env {
        fn new() -> Env {
            Env {
                opts: CompactionOptions::default(),
                table_opts: TableOptions::default(),
                next_file_id: AtomicU64::new(3),
                limiter: RateLimiter::new(0),
            }
        }

        /// A merge writing into `dir`, dropping nothing as expired.
        fn context<'a>(&'a self, dir: &'a Path) -> MergeContext<'a> {
            MergeContext {
                opts: &self.opts,
                table_opts: &self.table_opts,
                tables_dir: dir,
                next_file_id: &self.next_file_id,
                limiter: &self.limiter,
                expire_before: 0,
                after_first_trace: None,
                index_block_parts: 64,
            }
        }
    }

    /// A sorted file of one span per trace of `traces`, with its sidecar.
    fn indexed_file(dir: &Path, id: u64, level: u32, traces: &[u128]) -> Arc<TableFile> {
        let file = table_file(dir, id, level, 0, traces);
        let g = group("svc");
        let mut sidecar = SidecarBuilder::new(64);
        for (i, &t) in traces.iter().enumerate() {
            let spans = [span(&g, t, i as u64 + 1, 1_000)];
            sidecar.add_trace(&spans);
        }
        sidecar.write(file.path()).expect("sidecar");
        file
    }

    #[test]
    fn a_merge_counts_what_it_holds_as_it_goes_and_gives_it_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let traces = |from: u128| (0..3000u128).map(|i| from + 2 * i).collect::<Vec<_>>();
        let task = CompactionTask {
            kind: TaskKind::Merge,
            input_level: 0,
            output_level: 1,
            inputs: vec![
                table_file(dir.path(), 1, 0, 0, &traces(1)),
                table_file(dir.path(), 2, 0, 0, &traces(2)),
            ],
        };
        let env = Env::new();
        let ctx = env.context(dir.path());
        let budget = MemoryBudget::with_process_limit(1 << 30, 1 << 31, 1 << 20);
        let expected = Merge::expected_bytes(&task, &env.opts);
        assert!(
            expected >= 6000 * RECORD_BYTES_PER_SPAN as usize,
            "{expected}: one output, its cells"
        );
        let mut merge = Merge::start(&task, &ctx, Some(budget.work(expected))).expect("start");
        assert_eq!(
            budget.work_room(),
            expected,
            "room made before anything is read"
        );
        let mut written = 0;
        while merge.read_trace().expect("read") {
            merge.write_trace().expect("write");
            written += 1;
            if written == COUNT_EVERY as usize {
                let held = merge.held_bytes();
                assert!(held > 0);
                assert_eq!(
                    budget.work_held(),
                    held,
                    "counted after {COUNT_EVERY} traces"
                );
            }
        }
        let out = merge.finish().expect("finish");
        assert_eq!(out.spans_out, 6000);
        assert!(out.memory_held_at_most > 0);
        assert_eq!(out.memory_expected, expected);
        assert_eq!(budget.work_held(), 0, "given back");
        assert_eq!(
            budget.work_room(),
            expected.max(out.memory_held_at_most),
            "the most is kept for the next merge"
        );
    }

    /// Adding up its inputs' cells, a merge counts each input's sidecar and
    /// its cells, decoded, while it holds them: before its first trace.
    #[test]
    fn a_merge_counts_its_inputs_cells_while_it_adds_them_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let g = group("svc");
        // A span a second: a cell of each length for each.
        let spread = |id: u64, traces: &[u128]| {
            let file = table_file(dir.path(), id, 1, 0, traces);
            let mut sidecar = SidecarBuilder::new(64);
            for (i, &t) in traces.iter().enumerate() {
                sidecar.add_trace(&[span(&g, t, 1, (id * 5000 + i as u64) * 1_000_000_000)]);
            }
            sidecar.write(file.path()).expect("sidecar");
            file
        };
        let (first, second): (Vec<u128>, Vec<u128>) =
            ((1..=4000).collect(), (4001..=8000).collect());
        let task = CompactionTask {
            kind: TaskKind::Merge,
            input_level: 1,
            output_level: 2,
            inputs: vec![spread(1, &first), spread(2, &second)],
        };
        // The last input's cells, decoded, beside the sums of both.
        let last = {
            let path = crate::layout::sidecar_path(task.inputs[1].path());
            let bytes = std::fs::read(&path).expect("sidecar");
            let cells = crate::index::cells::decode(&path, &bytes)
                .expect("decodes")
                .expect("cells");
            cells.bytes()
        };
        let env = Env::new();
        let ctx = env.context(dir.path());
        let budget = MemoryBudget::with_process_limit(1 << 30, 1 << 31, 1 << 20);
        let merge = Merge::start(&task, &ctx, Some(budget.work(0))).expect("start");
        assert!(merge.out.cells_summed(), "the inputs' cells are added up");
        assert_eq!(merge.out.cells_not_summed, None);
        let peak = merge.held_bytes() + last;
        assert!(
            merge.out.memory_held_at_most >= peak,
            "{} held at most, {peak} with the last input's cells",
            merge.out.memory_held_at_most
        );
        assert!(
            budget.work_room() >= peak,
            "the budget saw it: {}",
            budget.work_room()
        );
    }

    /// A merge that cannot add up its inputs' cells says why: an input
    /// without cells; at level 0, partitions the buckets do not divide.
    #[test]
    fn a_merge_that_counts_its_spans_says_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Env::new();
        let ctx = env.context(dir.path());
        let level0 = |inputs| CompactionTask {
            kind: TaskKind::Merge,
            input_level: 0,
            output_level: 1,
            inputs,
        };
        let bare = level0(vec![
            indexed_file(dir.path(), 1, 0, &[1, 3]),
            table_file(dir.path(), 2, 0, 0, &[2, 4]),
        ]);
        let merge = Merge::start(&bare, &ctx, None).expect("start");
        assert!(!merge.out.cells_summed());
        assert_eq!(merge.out.cells_not_summed, Some(NotSummed::Unreadable));

        let indexed = level0(vec![
            indexed_file(dir.path(), 3, 0, &[1, 3]),
            indexed_file(dir.path(), 4, 0, &[2, 4]),
        ]);
        let merge = Merge::start(&indexed, &ctx, None).expect("start");
        assert_eq!(merge.out.cells_not_summed, None, "both inputs have cells");
        let mut odd = Env::new();
        odd.opts.partition = std::time::Duration::from_secs(90 * 60);
        let ctx = odd.context(dir.path());
        let merge = Merge::start(&indexed, &ctx, None).expect("start");
        assert_eq!(merge.out.cells_not_summed, Some(NotSummed::Partitions));
    }

    #[test]
    fn a_deeper_merge_drops_an_input_sidecar_once_it_has_read_the_input() {
        let dir = tempfile::tempdir().expect("tempdir");
        // One sorted run of two files: the second's traces follow the first's.
        let (first, second): (Vec<u128>, Vec<u128>) = ((1..=500).collect(), (501..=1000).collect());
        let task = CompactionTask {
            kind: TaskKind::Merge,
            input_level: 1,
            output_level: 2,
            inputs: vec![
                indexed_file(dir.path(), 1, 1, &first),
                indexed_file(dir.path(), 2, 1, &second),
            ],
        };
        let env = Env::new();
        let ctx = env.context(dir.path());
        let mut merge = Merge::start(&task, &ctx, None).expect("start");
        let mut written = 0;
        while merge.read_trace().expect("read") {
            merge.write_trace().expect("write");
            written += 1;
            let (a, b) = (&merge.sidecars[0], &merge.sidecars[1]);
            match written {
                499 => assert!(matches!((a, b), (Sidecar::Open(_), Sidecar::Unread))),
                500 | 501 => assert!(
                    matches!(a, Sidecar::Done),
                    "the first file's sidecar goes with its last trace"
                ),
                _ => {}
            }
            if written == 501 {
                assert!(matches!(b, Sidecar::Open(_)));
            }
        }
        let out = merge.finish().expect("finish");
        assert_eq!(out.parts_reused, 1000, "every part carried over");
        assert!(matches!(out.files.len(), 1));
    }

    #[test]
    fn finishing_an_output_counts_its_cells_then_gives_them_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Env::new();
        let ctx = env.context(dir.path());
        let task = CompactionTask {
            kind: TaskKind::Merge,
            input_level: 0,
            output_level: 1,
            inputs: Vec::new(),
        };
        let budget = MemoryBudget::with_process_limit(1 << 30, 1 << 31, 1 << 20);
        let mut work = Some(budget.work(0));
        let mut slot = Open::create(&ctx, true).expect("create");
        let g = group("svc");
        for t in 1..=500u128 {
            let spans = vec![span(&g, t, 1, 1_000 + t as u64 * 1_000_000_000)];
            slot.summary.add_trace(&spans);
            for s in spans {
                slot.builder.add_owned(s).expect("sorted");
            }
        }
        let builder = slot.summary.held_bytes();
        // What the merge last counted, this builder included.
        let before = builder + (1 << 20);
        work.as_mut().expect("work").holds(before);
        let mut out = MergeOutput::default();
        finish(slot, &task, 0, &mut out, true, (&mut work, &mut None)).expect("finished");
        assert!(
            out.memory_held_at_most > before,
            "the cells' finishing counted on top"
        );
        assert_eq!(
            work.as_ref().expect("work").held(),
            before - builder,
            "given back once written, the builder with it"
        );
    }
}
