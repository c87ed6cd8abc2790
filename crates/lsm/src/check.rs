//! Offline verification of a data directory (`tracedb check DATA_DIR`).
//!
//! [`check_data_dir`] reads every file the engine would read and changes
//! nothing: the manifest record by record; every live sorted file fully
//! (header, footer, index, bloom filter and every data block, through
//! [`SsTable::verify`]); every WAL segment record by record, each record's
//! span batch decoded. Each problem names its file and, where known, the byte
//! offset. It may run on the directory of a stopped server; on a running one
//! it can report files that a flush or compaction changed under it.
//!
//! Damage is split in two. A *problem* is data a reader would refuse or lose:
//! a checksum mismatch, a corrupt block, a live file that is missing or has
//! the wrong size, a damaged record in an older WAL segment, a damaged
//! manifest record followed by more records. A *note* is what a crash
//! normally leaves and the next open tidies up: a torn tail on the newest
//! WAL segment or on the manifest, a `.tmp` file, a `.sst` file the manifest
//! does not name, a quarantined file.

use std::{
    fmt, fs,
    path::{Path, PathBuf},
};

use bytes::Bytes;

use crate::{
    batch::decode_batch,
    error::{Error, Result},
    layout::{self, table_path},
    manifest,
    table::SsTable,
    wal::segment,
};

/// One thing found wrong, with where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: PathBuf,
    /// Byte offset in `file`, when the damage has one.
    pub offset: Option<u64>,
    pub what: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(offset) = self.offset {
            write!(f, " at offset {offset}")?;
        }
        write!(f, ": {}", self.what)
    }
}

/// What [`check_data_dir`] found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Live sorted files verified (every block read).
    pub tables: usize,
    /// Spans in the live sorted files that verified.
    pub table_spans: u64,
    /// Remote files (in the object store, no local copy) whose head read
    /// and whose object's size and footer matched it.
    pub remote_tables: usize,
    /// WAL segments read.
    pub wal_segments: usize,
    /// WAL records whose checksum and span batch were good.
    pub wal_records: u64,
    /// Damage a reader would refuse or lose.
    pub problems: Vec<Finding>,
    /// What a crash normally leaves, tidied up at the next open.
    pub notes: Vec<Finding>,
}

impl CheckReport {
    /// No problems (notes are fine).
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, file: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.problems.push(Finding {
            file: file.to_path_buf(),
            offset,
            what: what.into(),
        });
    }

    fn note(&mut self, file: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.notes.push(Finding {
            file: file.to_path_buf(),
            offset,
            what: what.into(),
        });
    }

    /// A problem from an engine error, located by the error where it can be.
    fn problem_from(&mut self, fallback: &Path, e: &Error) {
        let (file, offset) = e.location().unwrap_or((fallback, None));
        let file = file.to_path_buf();
        self.problem(&file, offset, e.to_string());
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} sorted files ({} spans), {} remote files, {} WAL segments ({} records) checked: {} problems, {} notes",
            self.tables,
            self.table_spans,
            self.remote_tables,
            self.wal_segments,
            self.wal_records,
            self.problems.len(),
            self.notes.len()
        )?;
        for p in &self.problems {
            writeln!(f, "problem: {p}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Verifies every file of the data directory at `dir` without changing any.
/// `Err` only when the directory itself cannot be read; damage in files is
/// reported in the [`CheckReport`].
pub fn check_data_dir(dir: &Path) -> Result<CheckReport> {
    check_data_dir_with(dir, None)
}

/// [`check_data_dir`], with the object store the directory's remote files
/// are in: each one's object is asked for its size and footer, which must
/// match the local head (blocks are not read: that would download the
/// store). Without it, remote files are only noted.
pub fn check_data_dir_with(
    dir: &Path,
    bucket: Option<&crate::cold::Bucket>,
) -> Result<CheckReport> {
    if !dir.is_dir() {
        return Err(Error::io(
            dir,
            std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
        ));
    }
    let mut report = CheckReport::default();
    let tables_dir = layout::tables_dir(dir);
    let on_disk = list_tables(&tables_dir, &mut report)?;

    let manifest_path = layout::manifest_path(dir);
    let mut remote = Vec::new();
    let live: Vec<(u64, Option<u64>)> = match manifest::read(&manifest_path) {
        Ok(Some((state, intact))) => {
            if state.torn_tail {
                report.note(
                    &manifest_path,
                    Some(intact),
                    "torn last record (an interrupted append); cut at the next open",
                );
            }
            remote = state
                .files
                .values()
                .filter(|f| f.remote)
                .map(|f| (f.id, f.file_size))
                .collect();
            state
                .files
                .values()
                .map(|f| (f.id, Some(f.file_size)))
                .collect()
        }
        Ok(None) => {
            if !on_disk.is_empty() {
                report.note(
                    &manifest_path,
                    None,
                    "no manifest: the sorted files are adopted into level 0 at the next open",
                );
            }
            on_disk.iter().map(|&id| (id, None)).collect()
        }
        Err(e) => {
            report.problem_from(&manifest_path, &e);
            // Without a trustworthy live set, check every sorted file present.
            on_disk.iter().map(|&id| (id, None)).collect()
        }
    };

    let quarantine = layout::quarantine_dir(dir);
    for &(id, size) in &live {
        let path = table_path(&tables_dir, id);
        if let Some(&(_, size)) = remote
            .iter()
            .find(|(r, _)| *r == id)
            .filter(|_| !path.exists())
        {
            check_remote(&tables_dir, id, size, bucket, &mut report);
            continue;
        }
        if !path.exists() {
            let parked = table_path(&quarantine, id);
            if parked.exists() {
                report.note(
                    &parked,
                    None,
                    "quarantined; dropped from the manifest at the next open",
                );
            } else {
                report.problem(&path, None, "named by the manifest but missing");
            }
            continue;
        }
        check_table(&path, size, &mut report);
    }
    for id in &on_disk {
        if !live.iter().any(|(l, _)| l == id) {
            report.note(
                &table_path(&tables_dir, *id),
                None,
                "not named by the manifest (left by a crash); removed at the next open",
            );
        }
    }
    if quarantine.is_dir() {
        for entry in fs::read_dir(&quarantine).map_err(|e| Error::io(&quarantine, e))? {
            let entry = entry.map_err(|e| Error::io(&quarantine, e))?;
            report.note(&entry.path(), None, "quarantined file, kept for inspection");
        }
    }

    let wal_dir = layout::wal_dir(dir);
    if wal_dir.is_dir() {
        check_wal(&wal_dir, &mut report)?;
    }
    Ok(report)
}

fn check_table(path: &Path, size: Option<u64>, report: &mut CheckReport) {
    let table = match SsTable::open(path) {
        Ok(t) => t,
        Err(e) => return report.problem_from(path, &e),
    };
    if let Some(size) = size.filter(|&s| s != table.meta().file_size) {
        report.problem(
            path,
            None,
            format!(
                "the manifest records {size} bytes, the file has {}",
                table.meta().file_size
            ),
        );
        return;
    }
    match table.verify() {
        Ok(spans) => {
            report.tables += 1;
            report.table_spans += spans;
        }
        Err(e) => report.problem_from(path, &e),
    }
}

/// A remote file without a local copy: its head, and with `bucket` its
/// object's size and footer.
fn check_remote(
    tables_dir: &Path,
    id: u64,
    size: u64,
    bucket: Option<&crate::cold::Bucket>,
    report: &mut CheckReport,
) {
    let path = table_path(tables_dir, id);
    let head_path = layout::head_path(tables_dir, id);
    let head =
        match fs::read(&head_path) {
            Ok(head) => head,
            Err(_) => return report.note(
                &head_path,
                None,
                "a remote file's head is missing; fetched from the object store at the next open",
            ),
        };
    let Some(bucket) = bucket else {
        return report.note(
            &path,
            None,
            "in the object store; give --object-store to check its object",
        );
    };
    let name = layout::object_table(id);
    match bucket.head(&name) {
        Ok(Some((found, _))) if found == size => {}
        Ok(Some((found, _))) => {
            return report.problem(
                &path,
                None,
                format!(
                    "the manifest records {size} bytes, the object {bucket}/{name} has {found}"
                ),
            )
        }
        Ok(None) => {
            return report.problem(
                &path,
                None,
                format!("the object {bucket}/{name} is missing"),
            )
        }
        Err(e) => return report.problem_from(&path, &e),
    }
    let footer = crate::table::FOOTER_BYTES;
    match bucket.get_range(&name, size.saturating_sub(footer)..size) {
        Ok(bytes) if head.ends_with(&bytes) => {
            let remote = crate::cold::RemoteFile::new(
                bucket.clone(),
                id,
                std::sync::Arc::new(crate::cold::BlockCache::none()),
            );
            match SsTable::open_remote(&path, &head, size, remote) {
                Ok(_) => report.remote_tables += 1,
                Err(e) => report.problem_from(&head_path, &e),
            }
        }
        Ok(_) => report.problem(
            &path,
            Some(size - footer),
            format!("the footer of {bucket}/{name} differs from the local head's"),
        ),
        Err(e) => report.problem_from(&path, &e),
    }
}

/// `.sst` IDs in `tables/`; `.tmp` files are noted.
fn list_tables(dir: &Path, report: &mut CheckReport) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    if !dir.is_dir() {
        return Ok(ids);
    }
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if layout::is_tmp(&name) {
            report.note(
                &entry.path(),
                None,
                "unfinished write of an interrupted flush or compaction; removed at the next open",
            );
        } else if let Some(id) = layout::table_id(&name) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

fn check_wal(dir: &Path, report: &mut CheckReport) -> Result<()> {
    let ids = segment::list_segments(dir)?;
    for (i, &id) in ids.iter().enumerate() {
        let newest = i + 1 == ids.len();
        let path = segment::segment_path(dir, id);
        let mut bad_batch: Option<String> = None;
        let mut records = 0u64;
        let mut decode = |_: u64, payload: Bytes| {
            match decode_batch(&payload) {
                Ok(_) => records += 1,
                Err(e) => {
                    if bad_batch.is_none() {
                        bad_batch = Some(format!("record {records}: {e}"));
                    }
                }
            }
            Ok(())
        };
        let scanned = segment::scan(&path, id, &mut decode);
        report.wal_records += records;
        let (header, outcome) = match scanned {
            Ok(found) => found,
            Err(e) => {
                report.problem_from(&path, &e);
                continue;
            }
        };
        if let segment::Header::Short { len } = header {
            report.note(
                &path,
                Some(0),
                format!("{len} bytes, shorter than a header: an interrupted creation; removed or skipped at open"),
            );
            continue;
        }
        report.wal_segments += 1;
        if let Some(what) = bad_batch {
            report.problem(
                &path,
                None,
                format!("a record passed its checksum but its span batch does not decode: {what}"),
            );
        }
        if let Some(damage) = outcome.damage {
            if newest {
                report.note(
                    &path,
                    Some(damage.offset),
                    format!("torn tail ({}); cut at the next open", damage.reason),
                );
            } else {
                report.problem(
                    &path,
                    Some(damage.offset),
                    format!(
                        "{}; the records from here to the end of this segment are lost",
                        damage.reason
                    ),
                );
            }
        }
    }
    Ok(())
}
