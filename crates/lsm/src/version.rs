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
//!   times fall in one partition (`start / partition_nanos`), and within one
//!   (level, partition) the files have disjoint trace-ID ranges and are kept
//!   sorted by them, so a lookup probes at most one file per level and
//!   partition. Retention drops whole partitions' files.
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
};

/// Whether obsolete files may be deleted; turned off when a test abandons an
/// engine to simulate a crash, so the files stay as a crash would leave them.
#[derive(Debug)]
pub struct Janitor {
    pub enabled: AtomicBool,
}

/// A live sorted file and where it sits in the tree. A move to a deeper level
/// makes a new `TableFile` around the same [`FileHandle`].
#[derive(Debug)]
pub struct TableFile {
    pub id: u64,
    pub level: u32,
    /// See [`FileEntry::partition`].
    pub partition: u64,
    handle: Arc<FileHandle>,
}

/// An open file; deletes it on drop once marked obsolete.
#[derive(Debug)]
pub struct FileHandle {
    table: SsTable,
    obsolete: AtomicBool,
    janitor: Arc<Janitor>,
}

impl TableFile {
    pub fn new(entry: FileEntry, table: SsTable, janitor: Arc<Janitor>) -> Self {
        TableFile {
            id: entry.id,
            level: entry.level,
            partition: entry.partition,
            handle: Arc::new(FileHandle {
                table,
                obsolete: AtomicBool::new(false),
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
            handle: self.handle.clone(),
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
            match std::fs::remove_file(path) {
                Ok(()) => {
                    crate::index::remove_sidecar(path);
                    tracing::debug!(file = %path.display(), "deleted obsolete file")
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "deleting obsolete file")
                }
            }
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

/// Files and bytes of one level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelStats {
    pub files: usize,
    pub bytes: u64,
}

/// The live files, per level. Immutable; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct Version {
    /// Level 0, oldest flush first.
    pub l0: Vec<Arc<TableFile>>,
    /// `deeper[i]` is level `i + 1`: partition -> files sorted by trace-ID range.
    pub deeper: Vec<BTreeMap<u64, Vec<Arc<TableFile>>>>,
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

    /// The next version: this one without `removed`, with `added`.
    pub fn apply(&self, removed: &HashSet<u64>, added: Vec<Arc<TableFile>>) -> Version {
        let mut next = Version {
            l0: self
                .l0
                .iter()
                .filter(|f| !removed.contains(&f.id))
                .cloned()
                .collect(),
            deeper: self
                .deeper
                .iter()
                .map(|parts| {
                    parts
                        .iter()
                        .map(|(p, files)| {
                            let kept: Vec<_> = files
                                .iter()
                                .filter(|f| !removed.contains(&f.id))
                                .cloned()
                                .collect();
                            (*p, kept)
                        })
                        .filter(|(_, files)| !files.is_empty())
                        .collect()
                })
                .collect(),
        };
        for file in added {
            next.insert(file);
        }
        next
    }

    fn insert(&mut self, file: Arc<TableFile>) {
        if file.level == 0 || file.partition == NO_PARTITION {
            let at = self.l0.partition_point(|f| f.id < file.id);
            self.l0.insert(at, file);
            return;
        }
        let last = self.deeper.len();
        let level = (file.level as usize).min(last);
        let files = self.deeper[level - 1].entry(file.partition).or_default();
        let min = file.table().meta().min_trace_id;
        let at = files.partition_point(|f| f.table().meta().min_trace_id < min);
        files.insert(at, file);
    }

    /// Every file, level 0 first.
    pub fn files(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.l0
            .iter()
            .chain(self.deeper.iter().flat_map(|p| p.values().flatten()))
    }

    /// Files and bytes per level, level 0 first.
    pub fn level_stats(&self) -> Vec<LevelStats> {
        let mut out = vec![LevelStats {
            files: self.l0.len(),
            bytes: self.l0.iter().map(|f| f.size()).sum(),
        }];
        for parts in &self.deeper {
            let files = parts.values().flatten();
            out.push(LevelStats {
                files: parts.values().map(Vec::len).sum(),
                bytes: files.map(|f| f.size()).sum(),
            });
        }
        out
    }

    /// The files a lookup of `trace_id` within `range` must read, newest level
    /// first, decided from memory alone (ID range, time range, bloom filter).
    /// In levels 1 and deeper a binary search finds the one file per
    /// partition whose ID range can hold the trace.
    pub fn candidates(&self, trace_id: &TraceId, range: TimeRange) -> Vec<&Arc<TableFile>> {
        let mut out: Vec<&Arc<TableFile>> = self
            .l0
            .iter()
            .rev()
            .filter(|f| f.may_contain(trace_id, range))
            .collect();
        for parts in &self.deeper {
            for files in parts.values() {
                let at = files.partition_point(|f| f.table().meta().max_trace_id < *trace_id);
                if let Some(f) = files.get(at) {
                    if f.may_contain(trace_id, range) {
                        out.push(f);
                    }
                }
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
