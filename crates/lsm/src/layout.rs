//! The name of every file and folder of a data directory; no other module
//! spells one. `docs/FORMAT.md` describes each file.
//!
//! ```text
//! DATA_DIR/
//!   LOCK                       held (flock) by the one process using the directory
//!   MANIFEST                   the log of edits to the set of live files (`manifest`)
//!   MANIFEST.tmp               a rewrite of it, before the rename
//!   tables/{id:020}.sst        sorted files (`table`)
//!   tables/{id:020}.idx        each one's search-index sidecar (`index`)
//!   tables/*.tmp               a sorted file or sidecar being written
//!   wal/{id:020}.wal           WAL segments (`wal`)
//!   wal/{id:020}.wal.spare     flushed segments kept for reuse
//!   quarantine/{id:020}.sst    damaged sorted files, kept for inspection
//!   trash/{pid}-{n}-{name}     files being deleted a step at a time (`trash`
//!                              makes each name unique)
//!   tenants/{tenant}/          with tenancy on, each tenant's own store, laid
//!                              out as above (`stores`); the store at the top
//!                              is the tenant `single-tenant`
//!   tenants.deleting/{tenant}/ a tenant's store being deleted
//!   NODE                       this node's ID, for the object store's lease
//!   tables/{id:020}.head       with an object store: a remote file's header,
//!                              block index, bloom filter and footer (`cold`)
//!   cache/                     remote files' blocks, fetched (`cold::cache`)
//! ```
//!
//! In the object store, under the store's prefix (`cold`):
//!
//! ```text
//! PREFIX/
//!   manifest                   the remote files: a manifest of one edit
//!   lease                      which node writes under this prefix, until when
//!   tables/{id:020}.sst        remote sorted files, as on local disk
//!   tables/{id:020}.idx        and their sidecars
//!   tenants.txt                with tenancy on, the tenants, one per line
//!   tenants/{tenant}/          and each tenant's prefix, laid out as above
//! ```

use std::path::{Path, PathBuf};

/// The lock file: one process per data directory.
pub const LOCK: &str = "LOCK";
/// The manifest.
pub const MANIFEST: &str = "MANIFEST";
/// The folder of sorted files and their sidecars.
pub const TABLES_DIR: &str = "tables";
/// The folder of WAL segments.
pub const WAL_DIR: &str = "wal";
/// The folder damaged sorted files are moved to.
pub const QUARANTINE_DIR: &str = "quarantine";
/// The folder of files being deleted.
pub const TRASH_DIR: &str = "trash";
/// The folder of the tenants' stores.
pub const TENANTS_DIR: &str = "tenants";
/// The folder tenants' stores are moved to while they are deleted.
pub const DELETING_TENANTS_DIR: &str = "tenants.deleting";

/// This node's ID.
pub const NODE: &str = "NODE";
/// The folder of cached remote blocks.
pub const CACHE_DIR: &str = "cache";
/// The object holding the remote files' manifest.
pub const OBJECT_MANIFEST: &str = "manifest";
/// The object holding the prefix's lease.
pub const OBJECT_LEASE: &str = "lease";
/// The object naming the tenants with a prefix under the store's.
pub const OBJECT_TENANTS: &str = "tenants.txt";
/// The folder of remote sorted files and sidecars.
pub const OBJECT_TABLES: &str = "tables";

/// File name suffix of sorted files.
pub const TABLE_SUFFIX: &str = ".sst";
/// File name suffix of a remote file's local head.
const HEAD_SUFFIX: &str = ".head";
/// File name suffix of search-index sidecars (`.idx`, as an extension).
const SIDECAR_EXTENSION: &str = "idx";
/// File name suffix of a file being written, before its rename.
pub const TMP_SUFFIX: &str = ".tmp";
/// File name suffix of WAL segments.
pub const SEGMENT_SUFFIX: &str = ".wal";
/// File name suffix of spare WAL files.
pub const SPARE_SUFFIX: &str = ".wal.spare";

pub fn lock_path(data_dir: &Path) -> PathBuf {
    data_dir.join(LOCK)
}

pub fn manifest_path(data_dir: &Path) -> PathBuf {
    data_dir.join(MANIFEST)
}

/// Where a rewrite of the manifest is written before it is renamed over it.
pub fn manifest_tmp_path(data_dir: &Path) -> PathBuf {
    tmp_path(&manifest_path(data_dir))
}

pub fn tables_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(TABLES_DIR)
}

pub fn wal_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(WAL_DIR)
}

pub fn quarantine_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(QUARANTINE_DIR)
}

pub fn trash_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(TRASH_DIR)
}

pub fn tenants_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(TENANTS_DIR)
}

/// The store of `tenant` (a valid tenant ID: a safe folder name).
pub fn tenant_dir(data_dir: &Path, tenant: &str) -> PathBuf {
    tenants_dir(data_dir).join(tenant)
}

/// Where a tenant's store is moved to while it is deleted.
pub fn deleting_tenant_dir(data_dir: &Path, tenant: &str) -> PathBuf {
    data_dir.join(DELETING_TENANTS_DIR).join(tenant)
}

/// The sorted file `id` in `dir` (`tables/` or `quarantine/`).
pub fn table_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}{TABLE_SUFFIX}"))
}

pub fn node_path(data_dir: &Path) -> PathBuf {
    data_dir.join(NODE)
}

pub fn cache_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(CACHE_DIR)
}

/// The local head of remote file `id` in `tables/`.
pub fn head_path(tables_dir: &Path, id: u64) -> PathBuf {
    tables_dir.join(format!("{id:020}{HEAD_SUFFIX}"))
}

/// The ID of a head's name, or `None` for any other name.
pub fn head_id(name: &str) -> Option<u64> {
    name.strip_suffix(HEAD_SUFFIX)?.parse().ok()
}

/// The object of sorted file `id`, under a store's prefix.
pub fn object_table(id: u64) -> String {
    format!("{OBJECT_TABLES}/{id:020}{TABLE_SUFFIX}")
}

/// The object of sorted file `id`'s sidecar.
pub fn object_sidecar(id: u64) -> String {
    format!("{OBJECT_TABLES}/{id:020}.{SIDECAR_EXTENSION}")
}

/// The ID of an object name under `tables/` (a file or its sidecar).
pub fn object_id(name: &str) -> Option<u64> {
    let file = name.strip_prefix(OBJECT_TABLES)?.strip_prefix('/')?;
    table_id(file).or_else(|| sidecar_id(file))
}

/// The ID of a sorted file's name, or `None` for any other name.
pub fn table_id(name: &str) -> Option<u64> {
    name.strip_suffix(TABLE_SUFFIX)?.parse().ok()
}

/// `tables/{id:020}.sst` -> `tables/{id:020}.idx`.
pub fn sidecar_path(table: &Path) -> PathBuf {
    table.with_extension(SIDECAR_EXTENSION)
}

/// The ID of a sidecar's name, or `None` for any other name.
pub fn sidecar_id(name: &str) -> Option<u64> {
    name.strip_suffix(SIDECAR_EXTENSION)?
        .strip_suffix('.')?
        .parse()
        .ok()
}

/// Whether a name is a file being written (removed by recovery).
pub fn is_tmp(name: &str) -> bool {
    name.ends_with(TMP_SUFFIX)
}

/// `path` with `.tmp` appended: where it is written before the rename.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    PathBuf::from(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_other_names_are_not_taken_for_files() {
        let dir = Path::new("/d");
        let table = table_path(&tables_dir(dir), 7);
        assert_eq!(table, Path::new("/d/tables/00000000000000000007.sst"));
        assert_eq!(
            sidecar_path(&table),
            Path::new("/d/tables/00000000000000000007.idx")
        );
        assert_eq!(
            tmp_path(&table),
            Path::new("/d/tables/00000000000000000007.sst.tmp")
        );
        assert_eq!(manifest_tmp_path(dir), Path::new("/d/MANIFEST.tmp"));
        assert_eq!(table_id("00000000000000000007.sst"), Some(7));
        assert_eq!(sidecar_id("00000000000000000007.idx"), Some(7));
        for other in ["7.sst.tmp", "7.idx", "x.sst", "7.wal"] {
            assert_eq!(table_id(other), None, "{other}");
        }
        for other in ["7.idx.tmp", "7.sst", "7idx", "x.idx"] {
            assert_eq!(sidecar_id(other), None, "{other}");
        }
        assert!(is_tmp("00000000000000000007.idx.tmp"));
        assert_eq!(
            head_path(&tables_dir(dir), 7),
            Path::new("/d/tables/00000000000000000007.head")
        );
        assert_eq!(head_id("00000000000000000007.head"), Some(7));
        assert_eq!(object_table(7), "tables/00000000000000000007.sst");
        assert_eq!(object_id(&object_table(7)), Some(7));
        assert_eq!(object_id(&object_sidecar(7)), Some(7));
        for other in [
            "manifest",
            "lease",
            "tables/7.wal",
            "x/00000000000000000007.sst",
        ] {
            assert_eq!(object_id(other), None, "{other}");
        }
    }
}
