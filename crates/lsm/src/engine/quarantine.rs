//! Quarantine: a sorted file found damaged (a checksum mismatch, a block that
//! does not decode, a footer or index that does not add up) is moved to
//! `DATA_DIR/quarantine/` and taken out of the live tree by a manifest edit.
//! It is never deleted: an operator may want to inspect it or salvage its
//! good blocks. The engine keeps serving every other file.
//!
//! Order, so that a crash at any step loses nothing and deletes nothing:
//! 1. rename the file into `quarantine/`, fsync both directories;
//! 2. append the edit that removes it, then swap in the version without it.
//!
//! A crash between 1 and 2 leaves a manifest naming a file that is no longer
//! in `tables/`; recovery finds it in `quarantine/` and drops it from the live
//! set (see `recovery`). Doing 2 first would be wrong: at the next open the
//! file would be in `tables/` but not named, and recovery removes such files.
//!
//! While a file sits in `quarantine/`, every lookup that it might have
//! answered reports it as skipped ([`crate::TraceLookup::skipped`]): by its
//! trace-ID range and bloom filter when those still read, otherwise every
//! lookup. Removing the file from `quarantine/` (after inspection) ends that.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::Inner;
use crate::{
    error::{Error, Result},
    layout,
    span::TraceId,
    table::SsTable,
};

/// A file in `quarantine/`.
pub(super) struct Quarantined {
    pub id: u64,
    pub path: PathBuf,
    /// Why it was quarantined, for the people reading a partial result.
    pub reason: String,
    /// The file opened again from `quarantine/`, when its footer, index and
    /// bloom filter still read: then only lookups of IDs it may hold are
    /// reported incomplete.
    pub filter: Option<SsTable>,
}

impl Quarantined {
    pub(super) fn may_hold(&self, trace_id: &TraceId) -> bool {
        self.filter.as_ref().is_none_or(|t| t.may_contain(trace_id))
    }

    fn open(id: u64, path: PathBuf, reason: Option<String>) -> Quarantined {
        let (filter, found) = match SsTable::open(&path) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let reason = reason.or(found).unwrap_or_else(|| {
            "quarantined after a read failed: a data block is damaged".to_string()
        });
        Quarantined {
            id,
            path,
            reason,
            filter,
        }
    }
}

/// Moves the sorted file at `path` into `data_dir/quarantine/` durably;
/// returns its new path.
pub(super) fn move_to_quarantine(data_dir: &Path, path: &Path) -> Result<PathBuf> {
    let dir = layout::quarantine_dir(data_dir);
    fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let name = path.file_name().ok_or_else(|| {
        Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"),
        )
    })?;
    let dest = dir.join(name);
    fs::rename(path, &dest).map_err(|e| Error::io(path, e))?;
    sync_dir(&dir)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(dest)
}

fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Every `.sst` file in `data_dir/quarantine/`.
pub(super) fn list_quarantined(data_dir: &Path) -> Result<Vec<Quarantined>> {
    let dir = layout::quarantine_dir(data_dir);
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let name = entry.file_name();
        if let Some(id) = name.to_str().and_then(layout::table_id) {
            out.push(Quarantined::open(id, entry.path(), None));
        }
    }
    out.sort_by_key(|q| q.id);
    Ok(out)
}

impl Inner {
    /// Takes live file `id` out of the tree because reading it failed with
    /// `error` (see the module docs). Returns false if the file could not be
    /// moved: it then stays live, and lookups keep reporting it as skipped.
    pub(super) fn quarantine(&self, id: u64, error: &Error) -> bool {
        let mut installing = self.tree.lock();
        if self.tree.is_crashed() {
            return false;
        }
        let Some(file) = installing.live_file(id) else {
            // Already gone: quarantined by another reader, or compacted away.
            return self.quarantined.lock().iter().any(|q| q.id == id);
        };
        let offset = error.location().and_then(|(_, o)| o);
        if file.table().remote().is_some() {
            tracing::error!(
                file = %file.path().display(),
                offset,
                damage = %error,
                "a remote file's object is damaged; it stays live, and reads it may answer are marked partial"
            );
            return false;
        }
        let dest = match move_to_quarantine(&self.opts.data_dir, file.path()) {
            Ok(dest) => dest,
            Err(e) => {
                tracing::error!(
                    file = %file.path().display(),
                    offset,
                    damage = %error,
                    error = %e,
                    "damaged sorted file could not be moved to quarantine; it stays live"
                );
                return false;
            }
        };
        tracing::error!(
            file = %file.path().display(),
            offset,
            damage = %error,
            moved_to = %dest.display(),
            "damaged sorted file quarantined; the rest of the data is served, lookups it may have answered are reported incomplete"
        );
        installing.remove_damaged(id);
        // Not marked obsolete: nothing may delete it.
        drop(file);
        // Still under the install lock: a reader that finds the file gone
        // finds it here.
        self.quarantined
            .lock()
            .push(Quarantined::open(id, dest, Some(error.to_string())));
        true
    }
}
