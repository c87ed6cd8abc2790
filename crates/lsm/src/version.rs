//! Versions: the set of live sorted files per level, and the snapshot a reader
//! holds.
//!
//! A [`Version`] is immutable. A flush, a compaction or a retention pass
//! builds the next one from the current one plus an edit
//! ([`Version::apply`]), writes the edit to the manifest, and swaps the
//! engine's pointer; readers that cloned the old `Arc` keep using the old
//! files. A [`SuperVersion`] is what a reader takes: the sealed buffers not
//! yet flushed plus one version, under one `Arc`, so a reader never waits for
//! a flush or a compaction.
//!
//! Levels:
//! - Level 0 holds flush outputs in flush order. Their trace-ID ranges
//!   overlap (each covers the whole ID space) and they are not partitioned.
//! - Levels 1 and deeper are *time-partitioned*: a file holds spans whose start
//!   times fall in one partition (`start / partition_nanos`). The files of one
//!   (level, partition) form [`SortedRuns`]: within a run, files have disjoint
//!   trace-ID ranges and are sorted by them; runs may overlap each other (each
//!   compaction output is a new run, see `compaction`). A lookup probes at
//!   most one file per run. Retention drops whole partitions' files.
//!
//! Which run a file belongs to is not stored anywhere: it is derived from the
//! files' ID ranges whenever a (level, partition) changes, as the fewest
//! chains of disjoint files ([`SortedRuns::new`]). A tree written when each
//! (level, partition) was one run reads back as one run each.
//!
//! A file is deleted from disk when the last `Arc<TableFile>` goes away after
//! an edit removed it ([`TableFile::mark_obsolete`]); so a snapshot's mmaps stay
//! valid for as long as anyone reads them.

use std::{
    collections::{BTreeMap, HashSet},
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use crate::{
    manifest::{FileEntry, NO_PARTITION},
    memtable::Sealed,
    span::TraceId,
    table::SsTable,
    trash::Trash,
};

/// Deletes obsolete files. `enabled` is turned off when a test abandons an
/// engine to simulate a crash, so the files stay as a crash would leave them.
#[derive(Debug)]
pub struct Janitor {
    pub enabled: AtomicBool,
    /// Where deleted files go to be freed a step at a time; `None` unlinks
    /// them at once.
    pub trash: Option<Arc<Trash>>,
    /// With an object store: where the objects of deleted remote files are
    /// queued for deletion (`engine/cold.rs`).
    pub cold: Option<Arc<ObjectDeletes>>,
}

/// Remote files no live version names any more, whose objects are to be
/// deleted once the bucket's manifest no longer names them either.
#[derive(Debug, Default)]
pub struct ObjectDeletes {
    /// Versions installed so far; a file dropped at count `n` was removed
    /// by an install at or before `n`.
    pub installs: std::sync::atomic::AtomicU64,
    /// (installs when dropped, file ID).
    pub queue: parking_lot::Mutex<Vec<(u64, u64)>>,
}

/// A live sorted file and where it sits in the tree. A move to a deeper level
/// makes a new `TableFile` around the same [`FileHandle`].
#[derive(Debug)]
pub struct TableFile {
    pub id: u64,
    pub level: u32,
    /// See [`FileEntry::partition`].
    pub partition: u64,
    /// See [`FileEntry::remote`].
    pub remote: bool,
    handle: Arc<FileHandle>,
}

/// An open file; deletes it on drop once marked obsolete.
#[derive(Debug)]
pub struct FileHandle {
    table: SsTable,
    obsolete: AtomicBool,
    /// The file has objects in the store, deleted with it.
    uploaded: AtomicBool,
    janitor: Arc<Janitor>,
}

impl TableFile {
    pub fn new(entry: FileEntry, table: SsTable, janitor: Arc<Janitor>) -> Self {
        TableFile {
            id: entry.id,
            level: entry.level,
            partition: entry.partition,
            remote: entry.remote,
            handle: Arc::new(FileHandle {
                table,
                obsolete: AtomicBool::new(false),
                uploaded: AtomicBool::new(entry.remote),
                janitor,
            }),
        }
    }

    /// The same file at another level (a trivial move).
    pub fn moved_to(&self, level: u32) -> TableFile {
        TableFile {
            id: self.id,
            level,
            partition: self.partition,
            remote: self.remote,
            handle: self.handle.clone(),
        }
    }

    /// The same file, uploaded: remote from now on, its objects deleted
    /// with it.
    pub fn uploaded(&self) -> TableFile {
        self.handle.uploaded.store(true, Ordering::Release);
        TableFile {
            remote: true,
            ..self.moved_to(self.level)
        }
    }

    /// The same remote file read through `table` (opened from the object
    /// store) instead: its local copy can then go.
    pub fn reopened(&self, table: SsTable) -> TableFile {
        TableFile {
            id: self.id,
            level: self.level,
            partition: self.partition,
            remote: self.remote,
            handle: Arc::new(FileHandle {
                table,
                obsolete: AtomicBool::new(false),
                uploaded: AtomicBool::new(true),
                janitor: self.handle.janitor.clone(),
            }),
        }
    }

    pub fn table(&self) -> &SsTable {
        &self.handle.table
    }

    pub fn entry(&self) -> FileEntry {
        FileEntry {
            id: self.id,
            level: self.level,
            partition: self.partition,
            file_size: self.table().meta().file_size,
            remote: self.remote,
        }
    }

    pub fn path(&self) -> &Path {
        self.table().path()
    }

    pub fn size(&self) -> u64 {
        self.table().meta().file_size
    }

    /// Called once the manifest no longer names this file: it is deleted when
    /// the last reference drops.
    pub fn mark_obsolete(&self) {
        self.handle.obsolete.store(true, Ordering::Release);
    }

    /// Whether the file may hold spans of `trace_id` within `range`, from
    /// the in-memory ID range, time range and bloom filter; reads no block.
    pub fn may_contain(&self, trace_id: &TraceId, range: TimeRange) -> bool {
        let m = self.table().meta();
        range.overlaps(m.min_time_unix_nano, m.max_time_unix_nano)
            && self.table().may_contain(trace_id)
    }
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) && self.janitor.enabled.load(Ordering::Acquire) {
            let path = self.table.path();
            let trash = self.janitor.trash.as_deref();
            match crate::trash::delete(trash, path) {
                Ok(()) => {
                    tracing::debug!(file = %path.display(), "deleted obsolete file")
                }
                // A remote file's local copy may have gone already.
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && self.table.remote().is_some() => {}
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "deleting obsolete file")
                }
            }
            let sidecar = crate::index::sidecar_path(path);
            match crate::trash::delete(trash, &sidecar) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %sidecar.display(), error = %e, "deleting index sidecar")
                }
            }
            if self.uploaded.load(Ordering::Acquire) {
                self.forget_remote();
            }
        }
    }
}

impl FileHandle {
    /// The local traces of a deleted remote file (its head, its cached
    /// blocks) go; its objects are queued for deletion.
    fn forget_remote(&self) {
        if let Some(remote) = self.table.remote() {
            remote.forget_cached();
        }
        self.queue_object_delete(self.table_id());
    }

    fn table_id(&self) -> Option<u64> {
        let name = self.table.path().file_name()?.to_str()?;
        crate::layout::table_id(name)
    }

    fn queue_object_delete(&self, id: impl Into<Option<u64>>) {
        let Some(id) = id.into() else { return };
        if let Some(tables) = self.table.path().parent() {
            let head = crate::layout::head_path(tables, id);
            if let Err(e) = std::fs::remove_file(&head) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(file = %head.display(), error = %e, "deleting a remote file's head");
                }
            }
        }
        if let Some(deletes) = &self.janitor.cold {
            let at = deletes.installs.load(Ordering::Acquire);
            deletes.queue.lock().push((at, id));
        }
    }
}

/// A closed time interval in Unix nanoseconds; `0` on either side means
/// unbounded. Used for GetTrace time hints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

impl TimeRange {
    /// Everything.
    pub const ALL: TimeRange = TimeRange {
        start_unix_nano: 0,
        end_unix_nano: 0,
    };

    pub fn new(start_unix_nano: u64, end_unix_nano: u64) -> Self {
        TimeRange {
            start_unix_nano,
            end_unix_nano,
        }
    }

    /// Whether `[min, max]` meets this range.
    pub fn overlaps(&self, min: u64, max: u64) -> bool {
        (self.start_unix_nano == 0 || max >= self.start_unix_nano)
            && (self.end_unix_nano == 0 || min <= self.end_unix_nano)
    }
}

/// Files, sorted runs and bytes of one level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelStats {
    pub files: usize,
    /// Sorted runs summed over the level's partitions: the most files of the
    /// level a lookup may have to probe (level 0: every file is a run).
    pub runs: usize,
    pub bytes: u64,
}

/// The files of one (level, partition) in levels 1 and deeper, grouped into
/// sorted runs: the files of a run have disjoint trace-ID ranges and are
/// sorted by them; runs may overlap each other. Immutable.
#[derive(Debug, Clone, Default)]
pub struct SortedRuns {
    runs: Vec<Vec<Arc<TableFile>>>,
}

impl SortedRuns {
    /// Groups `files` into as few runs as their ID ranges allow: files are
    /// taken in order of their smallest ID, each appended to the run whose
    /// last file ends closest below it, or starting a new run when every run
    /// overlaps it. That greedy choice opens a run only where that many files
    /// share an ID, so the run count is the most files any lookup can need.
    pub fn new(mut files: Vec<Arc<TableFile>>) -> Self {
        files.sort_by(|a, b| {
            let (ma, mb) = (a.table().meta(), b.table().meta());
            (ma.min_trace_id, a.id).cmp(&(mb.min_trace_id, b.id))
        });
        let mut runs: Vec<Vec<Arc<TableFile>>> = Vec::new();
        for file in files {
            let min = file.table().meta().min_trace_id;
            let fit = runs
                .iter_mut()
                .filter_map(|run| {
                    let last = run.last().expect("runs are never empty");
                    let max = last.table().meta().max_trace_id;
                    (max < min).then_some((max, run))
                })
                .max_by_key(|(max, _)| *max);
            match fit {
                Some((_, run)) => run.push(file),
                None => runs.push(vec![file]),
            }
        }
        SortedRuns { runs }
    }

    /// The runs, each sorted by trace ID with disjoint files.
    pub fn runs(&self) -> &[Vec<Arc<TableFile>>] {
        &self.runs
    }

    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Every file, run by run.
    pub fn files(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.runs.iter().flatten()
    }

    pub fn file_count(&self) -> usize {
        self.runs.iter().map(Vec::len).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.files().map(|f| f.size()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// In each run, the one file whose ID range can hold `trace_id` (binary
    /// search), if there is one.
    pub fn probe(&self, trace_id: &TraceId) -> impl Iterator<Item = &Arc<TableFile>> + '_ {
        let id = *trace_id;
        self.runs.iter().filter_map(move |run| {
            let at = run.partition_point(|f| f.table().meta().max_trace_id < id);
            run.get(at).filter(|f| f.table().meta().min_trace_id <= id)
        })
    }
}

/// The live files, per level. Immutable; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct Version {
    /// Level 0, oldest flush first.
    pub l0: Vec<Arc<TableFile>>,
    /// `deeper[i]` is level `i + 1`: partition -> its sorted runs.
    pub deeper: Vec<BTreeMap<u64, SortedRuns>>,
}

impl Version {
    /// An empty version with `levels` levels (level 0 included, at least 2).
    pub fn empty(levels: usize) -> Self {
        Version {
            l0: Vec::new(),
            deeper: vec![BTreeMap::new(); levels.max(2) - 1],
        }
    }

    /// Number of levels, level 0 included.
    pub fn levels(&self) -> usize {
        self.deeper.len() + 1
    }

    /// The next version: this one without `removed`, with `added`. Only the
    /// (level, partition)s the edit touches have their runs worked out again.
    pub fn apply(&self, removed: &HashSet<u64>, added: Vec<Arc<TableFile>>) -> Version {
        let mut l0: Vec<Arc<TableFile>> = self
            .l0
            .iter()
            .filter(|f| !removed.contains(&f.id))
            .cloned()
            .collect();
        let last = self.deeper.len();
        let mut touched: BTreeMap<(usize, u64), Vec<Arc<TableFile>>> = BTreeMap::new();
        for file in added {
            if file.level == 0 || file.partition == NO_PARTITION {
                let at = l0.partition_point(|f| f.id < file.id);
                l0.insert(at, file);
            } else {
                let level = (file.level as usize).min(last);
                touched
                    .entry((level - 1, file.partition))
                    .or_default()
                    .push(file);
            }
        }
        let mut deeper = vec![BTreeMap::new(); last];
        for (i, parts) in self.deeper.iter().enumerate() {
            for (&p, runs) in parts {
                let added_here = touched.remove(&(i, p));
                if added_here.is_none() && !runs.files().any(|f| removed.contains(&f.id)) {
                    deeper[i].insert(p, runs.clone());
                    continue;
                }
                let mut files: Vec<_> = runs
                    .files()
                    .filter(|f| !removed.contains(&f.id))
                    .cloned()
                    .collect();
                files.extend(added_here.into_iter().flatten());
                if !files.is_empty() {
                    deeper[i].insert(p, SortedRuns::new(files));
                }
            }
        }
        for ((i, p), files) in touched {
            deeper[i].insert(p, SortedRuns::new(files));
        }
        Version { l0, deeper }
    }

    /// Every file, level 0 first.
    pub fn files(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.l0.iter().chain(
            self.deeper
                .iter()
                .flat_map(|parts| parts.values().flat_map(SortedRuns::files)),
        )
    }

    /// Files, runs and bytes per level, level 0 first.
    pub fn level_stats(&self) -> Vec<LevelStats> {
        let mut out = vec![LevelStats {
            files: self.l0.len(),
            runs: self.l0.len(),
            bytes: self.l0.iter().map(|f| f.size()).sum(),
        }];
        for parts in &self.deeper {
            out.push(LevelStats {
                files: parts.values().map(SortedRuns::file_count).sum(),
                runs: parts.values().map(SortedRuns::run_count).sum(),
                bytes: parts.values().map(SortedRuns::bytes).sum(),
            });
        }
        out
    }

    /// The files a lookup of `trace_id` within `range` must read, newest level
    /// first, decided from memory alone (ID range, time range, bloom filter).
    /// In levels 1 and deeper a binary search per sorted run finds the one
    /// file of the run whose ID range can hold the trace.
    pub fn candidates(&self, trace_id: &TraceId, range: TimeRange) -> Vec<&Arc<TableFile>> {
        let mut out: Vec<&Arc<TableFile>> = self
            .l0
            .iter()
            .rev()
            .filter(|f| f.may_contain(trace_id, range))
            .collect();
        for parts in &self.deeper {
            for runs in parts.values() {
                out.extend(
                    runs.probe(trace_id)
                        .filter(|f| f.may_contain(trace_id, range)),
                );
            }
        }
        out
    }
}

/// What a reader holds: sealed buffers not yet in files, and a version.
/// Replaced as a whole, never mutated.
#[derive(Debug, Default)]
pub struct SuperVersion {
    pub sealed: Vec<Arc<Sealed>>,
    pub version: Arc<Version>,
}

impl SuperVersion {
    /// Every live file, level 0 first.
    pub fn tables(&self) -> Vec<Arc<TableFile>> {
        self.version.files().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::table_file;

    fn ids(files: &[Arc<TableFile>]) -> Vec<u64> {
        files.iter().map(|f| f.id).collect()
    }

    #[test]
    fn overlapping_outputs_are_grouped_back_into_their_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        // Run A: files 1, 2, 3 cut at 100 and 200; run B: files 4, 5 cut at 150.
        let files = vec![
            table_file(d, 5, 1, 7, &[160, 290]),
            table_file(d, 1, 1, 7, &[10, 90]),
            table_file(d, 3, 1, 7, &[210, 300]),
            table_file(d, 4, 1, 7, &[5, 140]),
            table_file(d, 2, 1, 7, &[110, 190]),
        ];
        let runs = SortedRuns::new(files);
        assert_eq!(runs.run_count(), 2);
        assert_eq!(runs.file_count(), 5);
        let mut got: Vec<Vec<u64>> = runs.runs().iter().map(|r| ids(r)).collect();
        got.sort();
        assert_eq!(got, vec![vec![1, 2, 3], vec![4, 5]]);
        for run in runs.runs() {
            for w in run.windows(2) {
                assert!(w[0].table().meta().max_trace_id < w[1].table().meta().min_trace_id);
            }
        }
        // One file per run whose range holds the ID, none where no range does.
        let probe = |t: u128| -> Vec<u64> {
            let id = TraceId(t.to_be_bytes());
            let mut v: Vec<u64> = runs.probe(&id).map(|f| f.id).collect();
            v.sort();
            v
        };
        assert_eq!(probe(50), vec![1, 4]);
        assert_eq!(probe(145), vec![2]);
        assert_eq!(probe(3), Vec::<u64>::new());
        assert_eq!(probe(170), vec![2, 5]);
        assert_eq!(probe(295), vec![3]);
        assert_eq!(probe(400), Vec::<u64>::new());
    }

    #[test]
    fn disjoint_files_are_one_run_and_each_full_range_file_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let leveled = SortedRuns::new(vec![
            table_file(d, 1, 1, 0, &[1, 9]),
            table_file(d, 2, 1, 0, &[10, 19]),
            table_file(d, 3, 1, 0, &[20, 29]),
        ]);
        assert_eq!(leveled.run_count(), 1);
        let tiered = SortedRuns::new(
            (10..14)
                .map(|id| table_file(d, id, 1, 0, &[1, 1000]))
                .collect(),
        );
        assert_eq!(tiered.run_count(), 4);
        assert_eq!(tiered.probe(&TraceId(500u128.to_be_bytes())).count(), 4);
    }

    #[test]
    fn apply_regroups_only_what_an_edit_touches_and_lookups_see_every_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let v = Version::empty(4).apply(
            &HashSet::new(),
            vec![
                table_file(d, 1, 1, 5, &[10, 20, 30]),
                table_file(d, 2, 1, 5, &[15, 25]),
                table_file(d, 3, 1, 6, &[10, 30]),
                table_file(d, 4, 0, NO_PARTITION, &[20, 40]),
            ],
        );
        let stats = v.level_stats();
        assert_eq!(
            (stats[0].files, stats[1].files, stats[1].runs),
            (1, 3, 3),
            "{stats:?}"
        );
        let id = TraceId(20u128.to_be_bytes());
        let mut found: Vec<u64> = v
            .candidates(&id, TimeRange::ALL)
            .iter()
            .map(|f| f.id)
            .collect();
        found.sort();
        // Bloom filters are exact enough here: file 3 has no 20, file 2 has no 20.
        assert!(found.contains(&1) && found.contains(&4), "{found:?}");
        // Moving partition 5's runs down keeps them two runs at level 2 and
        // leaves partition 6 as it was (the same Arcs).
        let moved: Vec<Arc<TableFile>> = v.deeper[0][&5]
            .files()
            .map(|f| Arc::new(f.moved_to(2)))
            .collect();
        let next = v.apply(&HashSet::from([1, 2]), moved);
        assert!(!next.deeper[0].contains_key(&5));
        assert_eq!(next.deeper[1][&5].run_count(), 2);
        assert!(Arc::ptr_eq(
            &next.deeper[0][&6].runs()[0][0],
            &v.deeper[0][&6].runs()[0][0]
        ));
        assert_eq!(
            next.files().map(|f| f.id).collect::<HashSet<_>>(),
            HashSet::from([1, 2, 3, 4])
        );
    }
}
