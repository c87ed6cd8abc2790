//! Start-up: the manifest decides which files are live.
//!
//! 1. Read `MANIFEST` (a torn last record is cut off; see [`crate::manifest`]).
//!    A directory without one is new, or was written before the manifest
//!    existed: its `.sst` files are adopted into level 0.
//! 2. Remove `*.tmp` files (writes a crash interrupted) and every `.sst` file
//!    the manifest does not name: outputs of a compaction whose edit never
//!    became durable, or inputs whose deletion the crash cut short.
//! 3. Open every named file; one that is missing or has another size than the
//!    manifest recorded stops the open with an error rather than losing data
//!    silently.
//! 4. Rewrite the manifest as one edit (dropping the history and any torn tail).

use std::{collections::BTreeMap, fs, path::Path, sync::Arc};

use crate::{
    compaction::table_path,
    error::{Error, Result},
    fault::Faults,
    manifest::{self, FileEntry, Manifest, ManifestState, NO_PARTITION},
    table::SsTable,
    version::{Janitor, TableFile, Version},
};

/// The recovered tree.
pub(super) struct Recovered {
    pub manifest: Manifest,
    pub version: Version,
    pub next_file_id: u64,
}

pub(super) fn recover(
    dir: &Path,
    tables_dir: &Path,
    levels: usize,
    janitor: &Arc<Janitor>,
    faults: &Faults,
) -> Result<Recovered> {
    let on_disk = list_tables(tables_dir)?;
    let max_on_disk = on_disk.keys().next_back().map_or(0, |id| id + 1);
    let mut state = match manifest::read(&dir.join("MANIFEST"))? {
        Some((state, _)) => state,
        None => {
            let mut state = ManifestState::default();
            for (&id, path) in &on_disk {
                let file_size = fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
                state.files.insert(
                    id,
                    FileEntry {
                        id,
                        level: 0,
                        partition: NO_PARTITION,
                        file_size,
                    },
                );
            }
            if !state.files.is_empty() {
                tracing::info!(
                    files = state.files.len(),
                    "no manifest: adopting sorted files into level 0"
                );
            }
            state
        }
    };
    for (id, path) in &on_disk {
        if !state.files.contains_key(id) {
            tracing::warn!(file = %path.display(), "removing a file the manifest does not name");
            fs::remove_file(path).map_err(|e| Error::io(path, e))?;
        }
    }
    state.next_file_id = state.next_file_id.max(max_on_disk);
    let deepest = state
        .files
        .values()
        .map(|f| f.level as usize + 1)
        .max()
        .unwrap_or(0);
    let mut version = Version::empty(levels.max(deepest));
    let mut added = Vec::with_capacity(state.files.len());
    for entry in state.files.values() {
        let path = table_path(tables_dir, entry.id);
        if !path.exists() {
            return Err(Error::Corrupt {
                file: path,
                offset: 0,
                reason: "named by the manifest but missing".into(),
            });
        }
        let table = SsTable::open(&path)?;
        if table.meta().file_size != entry.file_size {
            return Err(Error::Corrupt {
                file: path,
                offset: 0,
                reason: format!(
                    "manifest records {} bytes, file has {}",
                    entry.file_size,
                    table.meta().file_size
                ),
            });
        }
        added.push(Arc::new(TableFile::new(*entry, table, janitor.clone())));
    }
    version = version.apply(&Default::default(), added);
    let manifest = Manifest::create(dir, &state, faults)?;
    Ok(Recovered {
        manifest,
        version,
        next_file_id: state.next_file_id,
    })
}

/// Every `.sst` file by ID; removes `.tmp` leftovers on the way.
fn list_tables(dir: &Path) -> Result<BTreeMap<u64, std::path::PathBuf>> {
    let mut found = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".tmp") {
            tracing::warn!(file = %path.display(), "removing an unfinished file of an interrupted write");
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        } else if let Some(id) = name
            .strip_suffix(".sst")
            .and_then(|s| s.parse::<u64>().ok())
        {
            found.insert(id, path);
        }
    }
    Ok(found)
}
