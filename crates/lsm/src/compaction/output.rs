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
    index::{remove_sidecar, write_sidecar, SummaryBuilder},
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
}

pub fn table_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.sst"))
}

/// One open output per partition.
struct Open {
    id: u64,
    path: PathBuf,
    builder: SsTableBuilder,
    /// The search-index summary of the same spans, written beside the file.
    summary: SummaryBuilder,
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
    let mut open: BTreeMap<u64, Open> = BTreeMap::new();
    let mut by_partition: BTreeMap<u64, Vec<Span>> = BTreeMap::new();
    let mut first = true;
    while let Some(trace) = merger.next_trace()? {
        if (ctx.should_stop)() {
            return Ok(false);
        }
        out.spans_in += trace.len() as u64;
        for span in trace {
            if span.end_unix_nano < ctx.expire_before {
                out.expired += 1;
                continue;
            }
            let p = fixed_partition.unwrap_or_else(|| ctx.opts.partition_of(span.start_unix_nano));
            by_partition.entry(p).or_default().push(span);
        }
        for (p, spans) in std::mem::take(&mut by_partition) {
            let slot = match open.entry(p) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(Open::create(ctx)?),
            };
            if slot.builder.estimated_bytes() >= ctx.opts.target_file_bytes {
                let full = std::mem::replace(slot, Open::create(ctx)?);
                finish(full, task, p, out)?;
            }
            let before = slot.builder.estimated_bytes();
            for span in &spans {
                slot.builder.add(span)?;
            }
            slot.summary.add_trace(&spans);
            out.spans_out += spans.len() as u64;
            let wait = ctx
                .limiter
                .take(slot.builder.estimated_bytes().saturating_sub(before));
            if !wait.is_zero() {
                std::thread::sleep(wait);
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
            finish(slot, task, p, out)?;
        }
    }
    Ok(true)
}

impl Open {
    /// A new output file under a fresh ID, written as it fills.
    fn create(ctx: &MergeContext<'_>) -> Result<Open> {
        let id = ctx.next_file_id.fetch_add(1, Ordering::Relaxed);
        let path = table_path(ctx.tables_dir, id);
        Ok(Open {
            builder: SsTableBuilder::create(&path, ctx.table_opts.clone())?,
            summary: SummaryBuilder::default(),
            id,
            path,
        })
    }
}

fn finish(slot: Open, task: &CompactionTask, partition: u64, out: &mut MergeOutput) -> Result<()> {
    let Open {
        id,
        path,
        builder,
        summary,
    } = slot;
    let meta = builder.finish()?;
    // Pushed first, so an error below still removes the file with the others.
    out.files.push((
        FileEntry {
            id,
            level: task.output_level as u32,
            partition,
            file_size: meta.file_size,
        },
        path.clone(),
    ));
    write_sidecar(&path, &summary.finish())?;
    out.bytes_written += meta.file_size;
    Ok(())
}
