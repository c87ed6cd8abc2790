//! Runs a merge task: reads the inputs through a [`MergeIterator`] and writes
//! the outputs, each fsynced and renamed into place. Installs nothing: the
//! engine writes the manifest edit and swaps the version afterwards.

use std::{
    collections::{btree_map::Entry, BTreeMap},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{
    error::Result,
    index::{cells::RunCells, remove_sidecar, SidecarBuilder, SidecarParts},
    layout::table_path,
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
    /// Asked between traces; waits while compaction is paused and returns
    /// true when the merge must stop (the engine is closing).
    pub should_stop: &'a (dyn Fn() -> bool + Sync),
    /// Called once after the first trace is written (a test hook).
    pub after_first_trace: Option<&'a (dyn Fn() + Send + Sync)>,
    /// Trace parts per block of the outputs' sidecars.
    pub index_block_parts: usize,
}

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
}

/// One open output per partition, and the unnamed metrics cells of the
/// partition's run so far.
struct Open {
    id: u64,
    path: PathBuf,
    builder: SsTableBuilder,
    /// The search-index sidecar of the same spans, written beside the file.
    summary: SidecarBuilder,
    run: RunCells,
}

/// Merges the task's inputs into new files. `Ok(None)` if it was told to stop;
/// outputs already written are then removed, as they are after an error.
pub fn merge(task: &CompactionTask, ctx: &MergeContext<'_>) -> Result<Option<MergeOutput>> {
    let mut out = MergeOutput {
        bytes_read: task.input_bytes(),
        ..MergeOutput::default()
    };
    let result = merge_into(task, ctx, &mut out);
    match result {
        Ok(true) => Ok(Some(out)),
        Ok(false) | Err(_) => {
            for (_, path) in &out.files {
                let _ = std::fs::remove_file(path);
                remove_sidecar(path);
            }
            result.map(|_| None)
        }
    }
}

fn merge_into(
    task: &CompactionTask,
    ctx: &MergeContext<'_>,
    out: &mut MergeOutput,
) -> Result<bool> {
    let fixed_partition = (task.input_level > 0).then(|| task.inputs[0].partition);
    let mut merger = MergeIterator::new(task.inputs.iter().map(|f| f.table().iter()).collect())?;
    if task.input_level > 0 {
        merger = merger.merged_inputs();
    }
    let mut open: BTreeMap<u64, Open> = BTreeMap::new();
    let mut sidecars: Vec<Sidecar> = task.inputs.iter().map(|_| Sidecar::Unread).collect();
    // A trace's unexpired spans and their partitions, reused from trace to trace.
    let mut kept: Vec<Span> = Vec::new();
    let mut partitions: Vec<u64> = Vec::new();
    let mut first = true;
    while let Some(trace) = merger.next_trace()? {
        if (ctx.should_stop)() {
            return Ok(false);
        }
        out.spans_in += trace.len() as u64;
        let trace_len = trace.len();
        let trace_id = trace[0].trace_id;
        kept.clear();
        partitions.clear();
        for span in trace.drain(..) {
            if span.end_unix_nano < ctx.expire_before {
                out.expired += 1;
                continue;
            }
            partitions.push(
                fixed_partition.unwrap_or_else(|| ctx.opts.partition_of(span.start_unix_nano)),
            );
            kept.push(span);
        }
        let one_partition = partitions.windows(2).all(|w| w[0] == w[1]);
        // A trace that comes whole from one input and stays whole in one
        // output keeps that input's summary of it.
        let reused = match merger.sources() {
            &[i] if kept.len() == trace_len && one_partition => sidecars[i]
                .part(task.inputs[i].path(), &trace_id, trace_len)
                .map(|(parts, part)| (i, parts, part)),
            _ => None,
        };
        if one_partition {
            if let Some(&p) = partitions.first() {
                write_part(&mut open, p, &mut kept, reused, task, ctx, out)?;
            }
        } else {
            // Spans of one trace in several hours: each hour's output gets its
            // own part of the trace.
            let mut by_partition: BTreeMap<u64, Vec<Span>> = BTreeMap::new();
            for (p, span) in partitions.iter().zip(kept.drain(..)) {
                by_partition.entry(*p).or_default().push(span);
            }
            for (p, mut spans) in by_partition {
                write_part(&mut open, p, &mut spans, None, task, ctx, out)?;
            }
        }
        if first {
            first = false;
            if let Some(hook) = ctx.after_first_trace {
                hook();
            }
        }
    }
    out.duplicates = merger.duplicates;
    for (p, slot) in open {
        if slot.builder.span_count() > 0 {
            finish(slot, task, p, out, true)?;
        }
    }
    Ok(true)
}

/// Writes `spans`, one trace's spans in partition `p`, to that partition's
/// output (a new file once the open one is full), with `reused` as their
/// index summary if given; empties `spans`.
fn write_part(
    open: &mut BTreeMap<u64, Open>,
    p: u64,
    spans: &mut Vec<Span>,
    reused: Option<(usize, &SidecarParts, crate::index::TraceSummary)>,
    task: &CompactionTask,
    ctx: &MergeContext<'_>,
    out: &mut MergeOutput,
) -> Result<()> {
    let slot = match open.entry(p) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => e.insert(Open::create(ctx)?),
    };
    if slot.builder.estimated_bytes() >= ctx.opts.target_file_bytes {
        let full = std::mem::replace(slot, Open::create(ctx)?);
        slot.run = finish(full, task, p, out, false)?;
    }
    let before = slot.builder.estimated_bytes();
    match reused {
        Some((input, parts, part)) => {
            slot.summary.add_part(input, parts, part);
            out.parts_reused += 1;
        }
        None => slot.summary.add_trace(spans),
    }
    slot.summary.count(spans);
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
    /// A new output file under a fresh ID, written as it fills.
    fn create(ctx: &MergeContext<'_>) -> Result<Open> {
        let id = ctx.next_file_id.fetch_add(1, Ordering::Relaxed);
        let path = table_path(ctx.tables_dir, id);
        Ok(Open {
            builder: SsTableBuilder::create(&path, ctx.table_opts.clone())?,
            summary: SidecarBuilder::new(ctx.index_block_parts),
            run: RunCells::default(),
            id,
            path,
        })
    }
}

/// Finishes `slot`'s file, `last` of its partition's run (the merge is over)
/// or not (the file is full): its sidecar holds its search index, its named
/// metrics cells and, when it ends the run's sums, the run's unnamed ones.
/// Returns the run's sums, for the partition's next file.
fn finish(
    slot: Open,
    task: &CompactionTask,
    partition: u64,
    out: &mut MergeOutput,
    last: bool,
) -> Result<RunCells> {
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
    let own = summary.take_cells();
    let cells = run.file(id, own, last);
    summary.write_with(&path, cells.as_ref())?;
    out.bytes_written += meta.file_size;
    Ok(run)
}
