//! Leveled compaction: which files to merge ([`pick`], a pure function over a
//! [`Version`]) and how ([`merge`], which writes the outputs and installs
//! nothing).
//!
//! # Picking
//!
//! 1. Level 0 first: once it holds `l0_trigger_files` files, every level-0 file
//!    is merged (one level-0 task at a time) with the level-1 files of the
//!    partitions those files' time ranges touch (only those whose trace-ID
//!    range overlaps). The outputs are level-1 files split by partition.
//! 2. Otherwise, the (level, partition) whose bytes most exceed its target
//!    (`level_base_bytes × size_ratio^(level − 1)`, per partition) gives up its
//!    oldest file, merged with the overlapping files of the next level in the
//!    same partition. When nothing overlaps, the file is moved down by a
//!    manifest edit alone (no rewrite). The last level has no target.
//!
//! A candidate that would touch a file another task is compacting is skipped,
//! so tasks on different partitions or levels run in parallel.
//!
//! # Merging
//!
//! A [`MergeIterator`] walks the inputs in trace-ID order and yields one trace
//! at a time with every copy of a (trace ID, span ID) but one removed. The
//! spans of a trace that arrived minutes apart (late spans, retried batches)
//! come out adjacent. Spans past retention are dropped on the way. Each trace
//! goes to the builder of its spans' partitions; a builder is finished into a
//! file once it passes `target_file_bytes`, at a trace boundary. Writing is
//! paced by a [`RateLimiter`]. Nothing here holds a lock that ingest or
//! queries wait on.

mod merge;
mod output;
mod rate;

use std::{collections::HashSet, sync::Arc, time::Duration};

pub use merge::MergeIterator;
pub use output::{merge, table_path, MergeContext, MergeOutput};
pub use rate::RateLimiter;

use crate::{
    manifest::NO_PARTITION,
    version::{TableFile, Version},
};

/// Shape of the tree and when to compact.
#[derive(Debug, Clone)]
pub struct CompactionOptions {
    /// Levels, level 0 included (at least 2).
    pub levels: usize,
    /// Level-0 file count that triggers a level-0 compaction.
    pub l0_trigger_files: usize,
    /// Target bytes of level 1 in one partition.
    pub level_base_bytes: u64,
    /// Each level's target is this many times the one above it.
    pub size_ratio: u64,
    /// Compaction outputs are cut at a trace boundary past this size.
    pub target_file_bytes: u64,
    /// Length of a time partition in levels 1 and deeper.
    pub partition: Duration,
}

impl Default for CompactionOptions {
    fn default() -> Self {
        CompactionOptions {
            levels: 5,
            l0_trigger_files: 4,
            level_base_bytes: 256 << 20,
            size_ratio: 10,
            target_file_bytes: 64 << 20,
            partition: Duration::from_secs(3600),
        }
    }
}

impl CompactionOptions {
    pub fn partition_nanos(&self) -> u64 {
        (self.partition.as_nanos() as u64).max(1)
    }

    /// The partition of a span starting at `start_unix_nano`.
    pub fn partition_of(&self, start_unix_nano: u64) -> u64 {
        start_unix_nano / self.partition_nanos()
    }

    /// Target bytes of one partition of `level` (1 or deeper).
    pub fn level_target(&self, level: usize) -> u64 {
        let mut t = self.level_base_bytes.max(1);
        for _ in 1..level {
            t = t.saturating_mul(self.size_ratio.max(2));
        }
        t
    }
}

/// What a task does with its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// Merge the inputs into new files at `output_level`.
    Merge,
    /// One file, nothing overlapping below: change its level in the manifest.
    Move,
}

/// One unit of compaction work.
#[derive(Debug, Clone)]
pub struct CompactionTask {
    pub kind: TaskKind,
    pub input_level: usize,
    pub output_level: usize,
    pub inputs: Vec<Arc<TableFile>>,
}

impl CompactionTask {
    pub fn input_ids(&self) -> HashSet<u64> {
        self.inputs.iter().map(|f| f.id).collect()
    }

    pub fn input_bytes(&self) -> u64 {
        self.inputs.iter().map(|f| f.size()).sum()
    }
}

fn overlaps(a: &TableFile, min: &crate::TraceId, max: &crate::TraceId) -> bool {
    let m = a.table().meta();
    m.min_trace_id <= *max && *min <= m.max_trace_id
}

/// Chooses the next compaction, or `None` when the tree is in shape. Files in
/// `busy` belong to running tasks and are neither taken nor merged into.
pub fn pick(
    version: &Version,
    opts: &CompactionOptions,
    busy: &HashSet<u64>,
) -> Option<CompactionTask> {
    if let Some(task) = pick_l0(version, opts, busy) {
        return Some(task);
    }
    let mut best: Option<(f64, usize, u64)> = None;
    for (i, parts) in version.deeper.iter().enumerate() {
        let level = i + 1;
        if level + 1 >= version.levels() {
            break; // the last level has no target
        }
        let target = opts.level_target(level) as f64;
        for (&p, files) in parts {
            let bytes: u64 = files.iter().map(|f| f.size()).sum();
            let score = bytes as f64 / target;
            if score > 1.0 && best.is_none_or(|(s, _, _)| score > s) {
                best = Some((score, level, p));
            }
        }
    }
    let (_, level, p) = best?;
    let files = &version.deeper[level - 1][&p];
    // Oldest file first: it has waited longest to move down.
    let mut order: Vec<&Arc<TableFile>> = files.iter().collect();
    order.sort_by_key(|f| f.id);
    let below = version.deeper[level].get(&p);
    'candidates: for file in order {
        if busy.contains(&file.id) {
            continue;
        }
        let m = file.table().meta();
        let mut inputs = vec![file.clone()];
        for f in below.into_iter().flatten() {
            if overlaps(f, &m.min_trace_id, &m.max_trace_id) {
                if busy.contains(&f.id) {
                    continue 'candidates;
                }
                inputs.push(f.clone());
            }
        }
        let kind = if inputs.len() == 1 {
            TaskKind::Move
        } else {
            TaskKind::Merge
        };
        return Some(CompactionTask {
            kind,
            input_level: level,
            output_level: level + 1,
            inputs,
        });
    }
    None
}

fn pick_l0(
    version: &Version,
    opts: &CompactionOptions,
    busy: &HashSet<u64>,
) -> Option<CompactionTask> {
    if version.l0.len() < opts.l0_trigger_files.max(1) {
        return None;
    }
    // One level-0 task at a time: two would both write level-1 files over the
    // whole ID range of a partition, and level-1 files of a partition must not
    // overlap.
    if version.l0.iter().any(|f| busy.contains(&f.id)) {
        return None;
    }
    let l0 = version.l0.clone();
    let first = l0.first()?;
    let m = first.table().meta();
    let (mut lo_p, mut hi_p) = (u64::MAX, 0u64);
    let (mut min_id, mut max_id) = (m.min_trace_id, m.max_trace_id);
    for f in &l0 {
        let m = f.table().meta();
        lo_p = lo_p.min(opts.partition_of(m.min_time_unix_nano));
        hi_p = hi_p.max(opts.partition_of(m.max_time_unix_nano));
        min_id = min_id.min(m.min_trace_id);
        max_id = max_id.max(m.max_trace_id);
    }
    let mut inputs = l0;
    for files in version.deeper[0].range(lo_p..=hi_p.min(NO_PARTITION - 1)) {
        for f in files.1 {
            if overlaps(f, &min_id, &max_id) {
                if busy.contains(&f.id) {
                    return None;
                }
                inputs.push(f.clone());
            }
        }
    }
    Some(CompactionTask {
        kind: TaskKind::Merge,
        input_level: 0,
        output_level: 1,
        inputs,
    })
}
