//! Start-up: the manifest decides which files are live.
//!
//! 1. Read `MANIFEST` (a torn last record is cut off; see [`crate::manifest`]).
//!    A directory without one is new, or was written before the manifest
//!    existed: its `.sst` files are adopted into level 0.
//! 2. Remove `*.tmp` files (writes a crash interrupted) and every `.sst` file
//!    the manifest does not name: outputs of a compaction whose edit never
//!    became durable, or inputs whose deletion the crash cut short.
//! 3. Open every named file. One that fails its checks (footer, index, bloom
//!    filter) or has another size than the manifest recorded is damaged: it
//!    is moved to `quarantine/` and dropped from the live set, and the engine
//!    serves the rest. A named file that is missing from `tables/` but present
//!    in `quarantine/` was being quarantined when the process stopped: it is
//!    dropped too. One missing from both stops the open with an error rather
//!    than losing data silently.
//!    A remote file (in the object store) opens from its local copy when
//!    there is one, else from its head and the bucket: a missing head or
//!    sidecar is fetched from the bucket. Without an object store, a
//!    manifest naming remote files stops the open.
//! 4. Rewrite the manifest as one edit (dropping the history and any torn tail).

use std::{collections::BTreeMap, fs, path::Path, sync::Arc};

use crate::{
    cold::{self, BlockCache, Bucket, RemoteFile},
    engine::quarantine::move_to_quarantine,
    error::{Error, Result},
    fault::Faults,
    layout::{self, table_path},
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
    remote: Option<&(Bucket, Arc<BlockCache>)>,
) -> Result<Recovered> {
    let on_disk = list_tables(tables_dir)?;
    let max_on_disk = on_disk.keys().next_back().map_or(0, |id| id + 1);
    let manifest_path = layout::manifest_path(dir);
    let read = manifest::read(&manifest_path).map_err(|e| match e.location() {
        Some((_, Some(offset))) if e.is_corruption() => Error::ManifestUnreadable {
            file: manifest_path.clone(),
            offset,
            source: Box::new(e),
        },
        _ => e,
    })?;
    let mut state = match read {
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
                        remote: false,
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
    let mut dropped = Vec::new();
    for entry in state.files.values() {
        let path = table_path(tables_dir, entry.id);
        if entry.remote && !path.exists() {
            let Some((bucket, cache)) = remote else {
                return Err(Error::Corrupt {
                    file: path,
                    offset: 0,
                    reason: "the file is in an object store, and none is configured: start with \
                             the --object-store this data directory was written with"
                        .into(),
                });
            };
            let table = open_remote(tables_dir, entry, bucket, cache)?;
            added.push(Arc::new(TableFile::new(*entry, table, janitor.clone())));
            continue;
        }
        if !path.exists() {
            if table_path(&layout::quarantine_dir(dir), entry.id).exists() {
                tracing::warn!(
                    file = %path.display(),
                    "file was moved to quarantine before the last stop; dropping it from the live set"
                );
                dropped.push(entry.id);
                continue;
            }
            return Err(Error::Corrupt {
                file: path,
                offset: 0,
                reason: "named by the manifest but missing (not in quarantine/ either); \
                         restore the file from a backup, or run `tracedb check` on the data directory"
                    .into(),
            });
        }
        let opened = SsTable::open(&path).and_then(|table| {
            if table.meta().file_size == entry.file_size {
                Ok(table)
            } else {
                Err(Error::Corrupt {
                    file: path.clone(),
                    offset: 0,
                    reason: format!(
                        "manifest records {} bytes, file has {}",
                        entry.file_size,
                        table.meta().file_size
                    ),
                })
            }
        });
        match opened {
            Ok(table) => added.push(Arc::new(TableFile::new(*entry, table, janitor.clone()))),
            Err(e) if e.is_corruption() => {
                let offset = e.location().and_then(|(_, o)| o);
                let dest = move_to_quarantine(dir, &path)?;
                tracing::error!(
                    file = %path.display(),
                    offset,
                    error = %e,
                    moved_to = %dest.display(),
                    "damaged sorted file quarantined at open; the rest of the data is served"
                );
                dropped.push(entry.id);
            }
            Err(e) => return Err(e),
        }
    }
    for id in dropped {
        state.files.remove(&id);
    }
    version = version.apply(&Default::default(), added);
    let manifest = Manifest::create(dir, &state, faults)?;
    Ok(Recovered {
        manifest,
        version,
        next_file_id: state.next_file_id,
    })
}

/// Remote file `entry` opened on its head, fetched from the bucket first
/// when missing, as is its sidecar.
fn open_remote(
    tables_dir: &Path,
    entry: &FileEntry,
    bucket: &Bucket,
    cache: &Arc<BlockCache>,
) -> Result<SsTable> {
    let path = table_path(tables_dir, entry.id);
    let head_path = layout::head_path(tables_dir, entry.id);
    let head = match fs::read(&head_path) {
        Ok(head) => head,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let head = cold::fetch_head(bucket, tables_dir, entry.id, entry.file_size)?;
            cold::write_head(tables_dir, entry.id, &head)?;
            head
        }
        Err(e) => return Err(Error::io(&head_path, e)),
    };
    let sidecar = layout::sidecar_path(&path);
    if !sidecar.exists() {
        if let Some(bytes) = bucket.get(&layout::object_sidecar(entry.id))? {
            fs::write(&sidecar, &bytes).map_err(|e| Error::io(&sidecar, e))?;
        }
    }
    let remote = RemoteFile::new(bucket.clone(), entry.id, cache.clone());
    SsTable::open_remote(&path, &head, entry.file_size, remote).inspect_err(|e| {
        if e.is_corruption() {
            // The head is derived data: the next open fetches it again.
            let _ = fs::remove_file(&head_path);
        }
    })
}

/// Removes the heads of files that are not remote files of the tree.
pub(super) fn remove_orphan_heads(
    tables_dir: &Path,
    remote: &std::collections::HashSet<u64>,
) -> Result<()> {
    for entry in fs::read_dir(tables_dir).map_err(|e| Error::io(tables_dir, e))? {
        let entry = entry.map_err(|e| Error::io(tables_dir, e))?;
        let name = entry.file_name();
        if let Some(id) = layout::head_id(&name.to_string_lossy()) {
            if !remote.contains(&id) {
                let path = entry.path();
                fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            }
        }
    }
    Ok(())
}

/// Every `.sst` file by ID; removes `.tmp` leftovers on the way.
fn list_tables(dir: &Path) -> Result<BTreeMap<u64, std::path::PathBuf>> {
    let mut found = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if layout::is_tmp(&name) {
            tracing::warn!(file = %path.display(), "removing an unfinished file of an interrupted write");
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        } else if let Some(id) = layout::table_id(&name) {
            found.insert(id, path);
        }
    }
    Ok(found)
}
