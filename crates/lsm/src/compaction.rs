//! Tiered compaction inside time partitions: which files to merge ([`pick`],
//! a pure function over a [`Version`]) and how ([`Merge`], a trace at a
//! time, which writes the outputs and installs nothing).
//!
//! # Why tiered
//!
//! Trace IDs are random, so every flushed file spans the whole ID space, and
//! so does every run a merge writes. Leveled compaction (merge new data into
//! the one sorted run of the next level) then rewrites the *whole* next level
//! of the partition for every few flushes: 3 GB written per GB flushed at 20
//! million spans, and more as a partition grows. Here a level of a partition
//! instead collects sorted runs, each written once, and merges them together
//! only once it holds `size_ratio` of them: a span is rewritten about once
//! per level it passes through. Lookups pay one bloom-filter probe per run
//! (the run count per level stays below `size_ratio`), which costs no block
//! read for a trace the run does not hold.
//!
//! # Picking
//!
//! 0. A (level, partition) holding [`run_cap`] runs that no task is merging
//!    goes first: under a sustained load level 0 is always due, and a level
//!    below it must not collect runs without end (every run is a probe per
//!    lookup, and the merge that drains it grows).
//! 1. Then level 0: once it holds `l0_trigger_files` files that no task is
//!    merging, they are merged *alone* (no level-1 file is read or
//!    rewritten) into one new sorted run per partition their spans touch, at
//!    level 1. A second level-0 task can start while one runs. The engine
//!    also merges level 0 below the trigger ([`pick_level0_quiet`]) once no
//!    flush has come for `l0_quiet`.
//! 2. Otherwise, the (level, partition) furthest past its trigger, among
//!    levels 1 to the last but one: it holds `size_ratio` runs, or more bytes
//!    than `level_target(level)`. All its files are merged into one new run
//!    at the next level, whose existing runs are left alone. A level holding a
//!    single run (over its byte target) is moved down by a manifest edit
//!    alone. The last level has no trigger: its runs stay until retention.
//!
//! Files that running tasks hold are skipped, so tasks on different levels or
//! partitions, and level-0 tasks, run in parallel. [`pick_level0`] is the
//! first step alone, for a thread kept free for level 0. [`pick_above`] is
//! what a long merge runs first, between two of its traces: the same order,
//! among the levels above the merge's own, into levels below a run cap.
//!
//! # Merging
//!
//! A [`MergeIterator`] walks the inputs in trace-ID order and yields one trace
//! at a time with every copy of a (trace ID, span ID) but one removed. The
//! spans of a trace that arrived minutes apart (late spans, retried batches)
//! come out adjacent. Spans past retention are dropped on the way. Each trace
//! goes to the builder of its spans' partitions; a builder is finished into a
//! file once it passes `target_file_bytes`, at a trace boundary, so the files
//! of one partition's output form one sorted run. Writing is paced by a
//! [`RateLimiter`]. Nothing here holds a lock that ingest or queries wait on.

mod merge;
mod output;
mod rate;

use std::{collections::HashSet, sync::Arc, time::Duration};

pub use merge::MergeIterator;
pub use output::{Merge, MergeContext, MergeOutput};
pub use rate::RateLimiter;

use crate::version::{SortedRuns, TableFile, Version};

/// Shape of the tree and when to compact.
#[derive(Debug, Clone)]
pub struct CompactionOptions {
    /// Levels, level 0 included (at least 2).
    pub levels: usize,
    /// Level-0 file count that triggers a level-0 compaction.
    pub l0_trigger_files: usize,
    /// Level 0 is also merged, however few files it holds (two or more),
    /// once no flush has come for this long: a burst followed by quiet ends
    /// merged and compressed like the rest.
    pub l0_quiet: Duration,
    /// Bytes of level 1 in one partition past which its runs are merged
    /// down, however few they are.
    pub level_base_bytes: u64,
    /// Sorted runs a level of a partition collects before they are merged into
    /// one run of the next level; each level's byte target is also this many
    /// times the one above it.
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
            // 32: a level-0 merge writes level 1's runs of 32 flushes
            // directly, so a span takes one merge to get there
            // (docs/decisions/0022-level-0-trigger-32.md).
            l0_trigger_files: 32,
            l0_quiet: Duration::from_secs(60),
            // Above level 1's 8 runs of 32 flushes: merged by count, not bytes.
            level_base_bytes: 2 << 30,
            // 8: few levels per partition, so few rewrites per span
            // (docs/decisions/0018-size-ratio-8.md).
            size_ratio: 8,
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
            t = t.saturating_mul(self.size_ratio());
        }
        t
    }

    /// Runs a level of a partition holds before they are merged (at least 2).
    pub fn size_ratio(&self) -> u64 {
        self.size_ratio.max(2)
    }
}

/// What a task does with its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// Merge the inputs into new files at `output_level`.
    Merge,
    /// One sorted run: change its files' level in the manifest; nothing is
    /// read or written, and the run stays one run at the next level.
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

/// Chooses the next compaction, or `None` when the tree is in shape. Files in
/// `busy` belong to running tasks and are neither taken nor merged into.
pub fn pick(
    version: &Version,
    opts: &CompactionOptions,
    busy: &HashSet<u64>,
) -> Option<CompactionTask> {
    let cap = run_cap(opts);
    pick_deeper_where(version, opts, busy, |level, partition| {
        idle_runs(version, busy, level, Some(partition)) >= cap
    })
    .or_else(|| pick_level0(version, opts, busy))
    .or_else(|| pick_deeper(version, opts, busy))
}

/// Runs a partition of a level holds, besides those being merged, before
/// its merge goes ahead of level 0 and before merges from above stop
/// going into it ([`pick_above`]): 3 × `size_ratio`.
pub fn run_cap(opts: &CompactionOptions) -> usize {
    usize::try_from(opts.size_ratio().saturating_mul(3)).unwrap_or(usize::MAX)
}

/// Step 1 of [`pick`] alone: a level-0 task, if level 0 is over its trigger.
pub fn pick_level0(
    version: &Version,
    opts: &CompactionOptions,
    busy: &HashSet<u64>,
) -> Option<CompactionTask> {
    level0_task(version, busy, opts.l0_trigger_files.max(1))
}

/// A level-0 task of every level-0 file no task holds, if there are two or
/// more: what the engine runs below the trigger once no flush has come for
/// [`CompactionOptions::l0_quiet`].
pub fn pick_level0_quiet(version: &Version, busy: &HashSet<u64>) -> Option<CompactionTask> {
    level0_task(version, busy, 2)
}

/// All level-0 files no task holds into level 1, if there are `min_files`.
fn level0_task(version: &Version, busy: &HashSet<u64>, min_files: usize) -> Option<CompactionTask> {
    let inputs: Vec<Arc<TableFile>> = version
        .l0
        .iter()
        .filter(|f| !busy.contains(&f.id))
        .cloned()
        .collect();
    if inputs.len() < min_files {
        return None;
    }
    Some(CompactionTask {
        kind: TaskKind::Merge,
        input_level: 0,
        output_level: 1,
        inputs,
    })
}

/// A task to run between two traces of a merge whose inputs are at `level`
/// (1 or deeper): the one [`pick`] would choose among the levels above it,
/// provided the level it writes to holds fewer than `max_runs` runs no task
/// holds, in every partition it writes to. Upper levels go first, since
/// level 0 filling up stops ingest; the cap keeps lookups from probing an
/// unbounded number of runs while the deep merge is kept waiting.
pub fn pick_above(
    version: &Version,
    opts: &CompactionOptions,
    busy: &HashSet<u64>,
    level: usize,
    max_runs: usize,
) -> Option<CompactionTask> {
    if level == 0 {
        return None;
    }
    if idle_runs(version, busy, 1, None) < max_runs {
        if let Some(task) = pick_level0(version, opts, busy) {
            return Some(task);
        }
    }
    pick_deeper_where(version, opts, busy, |input_level, partition| {
        input_level < level && idle_runs(version, busy, input_level + 1, Some(partition)) < max_runs
    })
}

/// Runs of files no task holds in `partition` of `level` (1 or deeper), or
/// the most of any partition when `partition` is `None`.
pub fn idle_runs(
    version: &Version,
    busy: &HashSet<u64>,
    level: usize,
    partition: Option<u64>,
) -> usize {
    let Some(parts) = level.checked_sub(1).and_then(|i| version.deeper.get(i)) else {
        return 0;
    };
    let count = |runs: &SortedRuns| idle_part(runs, busy).run_count();
    match partition {
        Some(p) => parts.get(&p).map_or(0, count),
        None => parts.values().map(count).max().unwrap_or(0),
    }
}

/// The runs of the files in `runs` that no task holds.
fn idle_part(runs: &SortedRuns, busy: &HashSet<u64>) -> SortedRuns {
    SortedRuns::new(
        runs.files()
            .filter(|f| !busy.contains(&f.id))
            .cloned()
            .collect(),
    )
}

/// Step 2 of [`pick`]: the (level, partition) furthest past its trigger.
fn pick_deeper(
    version: &Version,
    opts: &CompactionOptions,
    busy: &HashSet<u64>,
) -> Option<CompactionTask> {
    pick_deeper_where(version, opts, busy, |_, _| true)
}

/// [`pick_deeper`] among the (level, partition) pairs `allowed` accepts.
fn pick_deeper_where(
    version: &Version,
    opts: &CompactionOptions,
    busy: &HashSet<u64>,
    allowed: impl Fn(usize, u64) -> bool,
) -> Option<CompactionTask> {
    let ratio = opts.size_ratio() as f64;
    let mut best: Option<(f64, usize, SortedRuns)> = None;
    for (i, parts) in version.deeper.iter().enumerate() {
        let level = i + 1;
        if level + 1 >= version.levels() {
            break; // the last level has no trigger
        }
        let target = opts.level_target(level) as f64;
        for (&partition, runs) in parts {
            if !allowed(level, partition) {
                continue;
            }
            // A task already merging some of this level leaves the runs
            // that arrived since.
            let idle = idle_part(runs, busy);
            if idle.run_count() == 0 {
                continue;
            }
            let score = (idle.run_count() as f64 / ratio).max(idle.bytes() as f64 / target);
            // Ties go to the upper level (visited first): it is the one
            // lookups probe most and its merges are the cheapest.
            if score >= 1.0 && best.as_ref().is_none_or(|(s, _, _)| score > *s) {
                best = Some((score, level, idle));
            }
        }
    }
    let (_, level, runs) = best?;
    let kind = if runs.run_count() == 1 {
        TaskKind::Move
    } else {
        TaskKind::Merge
    };
    Some(CompactionTask {
        kind,
        input_level: level,
        output_level: level + 1,
        inputs: runs.files().cloned().collect(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{manifest::NO_PARTITION, test_util::table_file};

    /// Four levels, trigger 3 files at level 0, 3 runs a level; byte targets
    /// far away unless a test lowers them.
    fn opts() -> CompactionOptions {
        CompactionOptions {
            levels: 4,
            l0_trigger_files: 3,
            l0_quiet: Duration::from_secs(60),
            level_base_bytes: u64::MAX / 64,
            size_ratio: 3,
            target_file_bytes: 1 << 20,
            partition: Duration::from_secs(10),
        }
    }

    /// A run over the whole ID space, like every run of random trace IDs.
    fn full_range(dir: &Path, id: u64, level: u32, partition: u64) -> Arc<TableFile> {
        table_file(dir, id, level, partition, &[1, 1 << 100, u128::MAX - 1])
    }

    fn version(files: Vec<Arc<TableFile>>) -> Version {
        Version::empty(4).apply(&HashSet::new(), files)
    }

    fn ids(task: &CompactionTask) -> Vec<u64> {
        let mut v: Vec<u64> = task.inputs.iter().map(|f| f.id).collect();
        v.sort();
        v
    }

    #[test]
    fn level_0_is_merged_alone_into_a_new_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut files = vec![full_range(d, 10, 1, 0), full_range(d, 11, 1, 0)];
        files.push(full_range(d, 1, 0, NO_PARTITION));
        files.push(full_range(d, 2, 0, NO_PARTITION));
        let v = version(files.clone());
        assert!(pick(&v, &opts(), &HashSet::new()).is_none(), "2 < 3 files");
        files.push(full_range(d, 3, 0, NO_PARTITION));
        let v = version(files);
        let task = pick(&v, &opts(), &HashSet::new()).expect("level 0 at its trigger");
        assert_eq!(
            (task.kind, task.input_level, task.output_level),
            (TaskKind::Merge, 0, 1)
        );
        // The level-1 runs that overlap every file are not read or rewritten.
        assert_eq!(ids(&task), vec![1, 2, 3]);
    }

    #[test]
    fn a_second_level_0_task_takes_only_files_no_task_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut files: Vec<_> = (1..=5)
            .map(|id| full_range(d, id, 0, NO_PARTITION))
            .collect();
        let busy = HashSet::from([1, 2, 3]);
        assert!(
            pick(&version(files.clone()), &opts(), &busy).is_none(),
            "2 idle"
        );
        files.push(full_range(d, 6, 0, NO_PARTITION));
        let task = pick(&version(files), &opts(), &busy).expect("3 idle files");
        assert_eq!(ids(&task), vec![4, 5, 6]);
        assert_eq!(
            pick_level0(&version(Vec::new()), &opts(), &HashSet::new()).map(|t| t.inputs.len()),
            None
        );
    }

    #[test]
    fn a_quiet_level_0_is_merged_from_two_idle_files_below_its_trigger() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut files = vec![
            full_range(d, 10, 1, 0),
            full_range(d, 1, 0, NO_PARTITION),
            full_range(d, 2, 0, NO_PARTITION),
        ];
        let busy = HashSet::from([2]);
        assert!(
            pick_level0_quiet(&version(files.clone()), &busy).is_none(),
            "one idle file: nothing to merge it with"
        );
        files.push(full_range(d, 3, 0, NO_PARTITION));
        let task = pick_level0_quiet(&version(files.clone()), &busy).expect("two idle files");
        assert_eq!(
            (task.kind, task.input_level, task.output_level),
            (TaskKind::Merge, 0, 1)
        );
        assert_eq!(ids(&task), vec![1, 3]);
        let task = pick_level0_quiet(&version(files), &HashSet::new()).expect("three idle files");
        assert_eq!(ids(&task), vec![1, 2, 3]);
    }

    #[test]
    fn a_level_with_size_ratio_runs_is_merged_into_one_run_below() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        // Level 1 of partition 4: two runs, one of them two disjoint files.
        let mut files = vec![
            table_file(d, 1, 1, 4, &[1, 50]),
            table_file(d, 2, 1, 4, &[60, 90]),
            full_range(d, 3, 1, 4),
            // Level 2 already holds a run of the same partition: left alone.
            full_range(d, 20, 2, 4),
        ];
        assert!(pick(&version(files.clone()), &opts(), &HashSet::new()).is_none());
        files.push(full_range(d, 4, 1, 4));
        let v = version(files);
        assert_eq!(v.deeper[0][&4].run_count(), 3);
        let task = pick(&v, &opts(), &HashSet::new()).expect("3 runs");
        assert_eq!(
            (task.kind, task.input_level, task.output_level),
            (TaskKind::Merge, 1, 2)
        );
        assert_eq!(ids(&task), vec![1, 2, 3, 4]);
        // While that merge runs, nothing else in the partition is due.
        assert!(pick(&v, &opts(), &task.input_ids()).is_none());
    }

    #[test]
    fn the_last_level_collects_runs_without_merging_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let files: Vec<_> = (1..=10).map(|id| full_range(d, id, 3, 0)).collect();
        let v = version(files);
        assert_eq!(v.deeper[2][&0].run_count(), 10);
        assert!(pick(&v, &opts(), &HashSet::new()).is_none());
    }

    #[test]
    fn one_run_over_its_byte_target_moves_down_without_a_rewrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let files = vec![
            table_file(d, 1, 1, 0, &[1, 50]),
            table_file(d, 2, 1, 0, &[60, 90]),
        ];
        let v = version(files);
        let mut o = opts();
        o.level_base_bytes = v.deeper[0][&0].bytes() - 1;
        let task = pick(&v, &o, &HashSet::new()).expect("over its byte target");
        assert_eq!(
            (task.kind, task.input_level, task.output_level),
            (TaskKind::Move, 1, 2)
        );
        assert_eq!(ids(&task), vec![1, 2]);
        // Level 2's target is size_ratio times larger: the run stays there.
        let moved = v.apply(
            &task.input_ids(),
            task.inputs
                .iter()
                .map(|f| Arc::new(f.moved_to(2)))
                .collect(),
        );
        assert!(pick(&moved, &o, &HashSet::new()).is_none());
    }

    #[test]
    fn the_partition_furthest_past_its_trigger_goes_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mut files = Vec::new();
        // Partition 1: 3 runs at level 1 (score 1); partition 2: 5 runs at level 2 (score 5/3).
        for id in 1..=3 {
            files.push(full_range(d, id, 1, 1));
        }
        for id in 11..=15 {
            files.push(full_range(d, id, 2, 2));
        }
        let v = version(files);
        let task = pick(&v, &opts(), &HashSet::new()).expect("both due");
        assert_eq!(
            (task.input_level, ids(&task)),
            (2, vec![11, 12, 13, 14, 15])
        );
        let next = pick(&v, &opts(), &task.input_ids()).expect("the other one");
        assert_eq!((next.input_level, ids(&next)), (1, vec![1, 2, 3]));
    }

    #[test]
    fn inside_a_deep_merge_only_upper_levels_go_first_and_only_below_the_run_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        // Partition 5: level 2 is being merged (files 21-23, busy); level 1
        // holds 3 runs (due); level 0 holds 3 files (due).
        let mut files: Vec<_> = (21..=23).map(|id| full_range(d, id, 2, 5)).collect();
        files.extend((11..=13).map(|id| full_range(d, id, 1, 5)));
        files.extend((1..=3).map(|id| full_range(d, id, 0, NO_PARTITION)));
        let busy: HashSet<u64> = HashSet::from([21, 22, 23]);
        let v = version(files.clone());
        let o = opts();

        // Level 0 first, while level 1 has room.
        let task = pick_above(&v, &o, &busy, 2, 4).expect("level 0 due");
        assert_eq!((task.input_level, ids(&task)), (0, vec![1, 2, 3]));
        // Level 1 at the cap: level 0 waits; level 1 goes down into level 2,
        // whose idle runs (none: its files are the deep merge's) are below it.
        let task = pick_above(&v, &o, &busy, 2, 3).expect("level 1 due");
        assert_eq!((task.input_level, ids(&task)), (1, vec![11, 12, 13]));
        // Nothing at or below the merge's own level is run inside it.
        assert!(pick_above(&v, &o, &busy, 1, 3).is_none());
        assert!(pick_above(&v, &o, &HashSet::new(), 0, 100).is_none());
        // Level 2 holding 3 idle runs besides the busy ones: level 1 waits
        // too, and inside a merge of level 3 those runs of level 2 go first.
        files.extend((31..=33).map(|id| full_range(d, id, 2, 5)));
        let v = version(files);
        assert_eq!(idle_runs(&v, &busy, 2, Some(5)), 3);
        assert_eq!(idle_runs(&v, &busy, 2, Some(6)), 0);
        assert_eq!(idle_runs(&v, &busy, 1, None), 3);
        assert!(pick_above(&v, &o, &busy, 2, 3).is_none());
        let task = pick_above(&v, &o, &busy, 3, 3).expect("level 2 due");
        assert_eq!((task.input_level, ids(&task)), (2, vec![31, 32, 33]));
        assert_eq!(
            pick_above(&v, &o, &busy, 3, 4).map(|t| t.input_level),
            Some(0)
        );
    }

    #[test]
    fn a_level_at_the_run_cap_goes_before_a_due_level_0() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let cap = run_cap(&opts());
        assert_eq!(cap, 9);
        let mut files: Vec<_> = (1..=3)
            .map(|id| full_range(d, id, 0, NO_PARTITION))
            .collect();
        files.extend((11..(11 + cap as u64 - 1)).map(|id| full_range(d, id, 1, 7)));
        let task = pick(&version(files.clone()), &opts(), &HashSet::new()).expect("due");
        assert_eq!(task.input_level, 0, "{} runs: level 0 first", cap - 1);
        files.push(full_range(d, 100, 1, 7));
        let task = pick(&version(files.clone()), &opts(), &HashSet::new()).expect("due");
        assert_eq!((task.input_level, task.inputs.len()), (1, cap));
        // Runs already being merged do not count.
        let busy = HashSet::from([11, 12]);
        let task = pick(&version(files), &opts(), &busy).expect("due");
        assert_eq!(task.input_level, 0);
    }
}
