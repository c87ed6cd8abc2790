//! The cold tier: sorted files kept in an object store (S3 or one that
//! speaks its API), so a node keeps months of traces with a small local
//! disk, and a new machine takes a dead node's data over from its bucket.
//!
//! - [`bucket`]: the store, its prefix and a blocking API over the
//!   `object_store` crate.
//! - [`cache`]: remote files' data blocks kept on local disk, bounded.
//! - [`remote`]: a remote file as a table reads it.
//! - [`lease`]: one node per prefix.
//!
//! What stays true (the engine's side is `engine/cold.rs`):
//! - The local manifest is the one truth. A file is *remote* once its
//!   upload was verified (size, and the ETag against the file's MD5) and a
//!   manifest edit says so; its local copy may then go, under the local
//!   disk budget, oldest first. Its head (header, block index, bloom
//!   filter, footer) and its sidecar stay on local disk, so lookups and
//!   searches prune without the bucket, and read only candidate blocks with
//!   ranged GETs.
//! - After each change to the remote files, the bucket gets a snapshot of
//!   the manifest naming them (`PREFIX/manifest`). A node started on an
//!   empty data directory restores from it: every remote file's head and
//!   sidecar fetched, nothing listed.
//! - An object is deleted only after a snapshot that no longer names it is
//!   in the bucket, so a restore never meets a missing object. A crash
//!   between an upload and its edit leaves an orphan object, removed by the
//!   listing made at start-up (the only listing of normal operation).

pub mod bucket;
pub mod cache;
pub mod lease;
pub mod remote;

use std::{path::Path, time::Duration};

pub use bucket::{Bucket, BucketConfig, BucketStats};
pub use cache::BlockCache;
pub use lease::Lease;
pub use remote::RemoteFile;

use crate::{
    error::{Error, Result},
    layout,
    manifest::ManifestState,
    table::{head_offset, FOOTER_BYTES},
};

/// The cold tier of one store.
#[derive(Debug, Clone)]
pub struct ColdOptions {
    /// The store's bucket and prefix.
    pub bucket: Bucket,
    /// A file whose newest span ended this long ago is uploaded.
    pub cold_after: Duration,
    /// Local copies of remote files are dropped, oldest first, while the
    /// store's sorted files, heads, sidecars and cached blocks on local disk
    /// take more than this; `None` keeps them.
    pub max_local_disk: Option<u64>,
    /// Bytes of remote blocks cached on local disk (inside
    /// `max_local_disk`).
    pub block_cache_bytes: u64,
    /// How long a lease lasts unless renewed; the worker renews it at a
    /// third of this.
    pub lease_ttl: Duration,
    /// How often the worker looks for files to upload and local copies to
    /// drop.
    pub interval: Duration,
}

impl ColdOptions {
    /// The defaults for `bucket`: upload after an hour, keep local copies,
    /// a 1 GiB block cache, a 60 s lease, a pass every 10 s.
    pub fn new(bucket: Bucket) -> Self {
        ColdOptions {
            bucket,
            cold_after: Duration::from_secs(3600),
            max_local_disk: None,
            block_cache_bytes: 1 << 30,
            lease_ttl: Duration::from_secs(60),
            interval: Duration::from_secs(10),
        }
    }
}

/// Hex MD5 of `bytes`: what S3 gives as the ETag of an object written with
/// one PUT.
pub fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    let digest = Md5::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks an upload of `len` bytes whose MD5 is `md5`: the object's size,
/// and its ETag when the store gives an MD5 one (a plain 32-digit hex; a
/// store that encrypts with KMS or wrote the object in parts gives another
/// kind, and then `verify_bytes` compares the bytes).
pub fn etag_matches(etag: Option<&str>, md5: &str) -> Option<bool> {
    let tag = etag?.trim_matches('"');
    let plain = tag.len() == 32 && tag.bytes().all(|b| b.is_ascii_hexdigit());
    plain.then(|| tag.eq_ignore_ascii_case(md5))
}

/// Writes `head` as remote file `id`'s head in `tables_dir`, durably.
pub fn write_head(tables_dir: &Path, id: u64, head: &[u8]) -> Result<()> {
    let path = layout::head_path(tables_dir, id);
    write_durably(&path, head)
}

fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = layout::tmp_path(path);
    let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    Ok(())
}

/// Fetches remote file `id`'s head from the bucket: its footer, then its
/// header and its bytes from the index on (three ranged GETs).
pub fn fetch_head(bucket: &Bucket, tables_dir: &Path, id: u64, size: u64) -> Result<Vec<u8>> {
    let name = layout::object_table(id);
    let path = layout::table_path(tables_dir, id);
    if size < FOOTER_BYTES {
        return Err(Error::Corrupt {
            file: path,
            offset: 0,
            reason: format!("the manifest gives remote file {id} {size} bytes"),
        });
    }
    let footer = bucket.get_range(&name, size - FOOTER_BYTES..size)?;
    let from = head_offset(&path, &footer)?.min(size);
    let header = bucket.get_range(&name, 0..crate::table::HEADER_BYTES)?;
    let tail = bucket.get_range(&name, from..size)?;
    let mut head = header.to_vec();
    head.extend_from_slice(&tail);
    Ok(head)
}

/// Restores an empty data directory from `bucket`: the manifest snapshot
/// becomes the local manifest, and each remote file's head and sidecar are
/// fetched (eight at a time). `Ok(false)` when the bucket holds no
/// snapshot (a new prefix). Nothing is listed.
pub fn restore(bucket: &Bucket, data_dir: &Path) -> Result<bool> {
    let Some(bytes) = bucket.get(layout::OBJECT_MANIFEST)? else {
        return Ok(false);
    };
    let object = Path::new(layout::OBJECT_MANIFEST);
    let (state, _) = crate::manifest::parse(object, &bytes)?;
    if let Some(f) = state.files.values().find(|f| !f.remote) {
        return Err(Error::Corrupt {
            file: object.to_path_buf(),
            offset: 0,
            reason: format!("the bucket's manifest names file {} as local", f.id),
        });
    }
    let tables = layout::tables_dir(data_dir);
    std::fs::create_dir_all(&tables).map_err(|e| Error::io(&tables, e))?;
    let files: Vec<_> = state.files.values().copied().collect();
    let jobs: Vec<_> = files
        .iter()
        .map(|f| {
            let tables = &tables;
            move || {
                let head = fetch_head(bucket, tables, f.id, f.file_size)?;
                write_head(tables, f.id, &head)?;
                let sidecar = bucket.get(&layout::object_sidecar(f.id))?;
                if let Some(sidecar) = sidecar {
                    let path = layout::sidecar_path(&layout::table_path(tables, f.id));
                    write_durably(&path, &sidecar)?;
                }
                Ok(())
            }
        })
        .collect();
    for r in Bucket::parallel(&jobs, 8) {
        r?;
    }
    write_durably(&layout::manifest_path(data_dir), &bytes)?;
    tracing::info!(
        files = state.files.len(),
        bucket = %bucket,
        "restored the data directory from the object store"
    );
    Ok(true)
}

/// The snapshot of the remote files of `state` the bucket keeps.
pub fn remote_snapshot(state: &ManifestState) -> Vec<u8> {
    let remote = ManifestState {
        files: state
            .files
            .iter()
            .filter(|(_, f)| f.remote)
            .map(|(&id, &f)| (id, f))
            .collect(),
        next_file_id: state.next_file_id,
        torn_tail: false,
    };
    crate::manifest::snapshot_bytes(&remote)
}

/// This node's ID, made at the first start and kept in `DATA_DIR/NODE`:
/// the host name and 32 random hex digits.
pub fn node_id(data_dir: &Path) -> Result<String> {
    let path = layout::node_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&path, e)),
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "node".to_owned());
    let id = format!("{host}/{:016x}{:016x}", random_u64(), random_u64());
    write_durably(&path, id.as_bytes())?;
    Ok(id)
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_compared_only_when_they_are_md5s() {
        let md5 = md5_hex(b"tracedb");
        assert_eq!(md5.len(), 32);
        assert_eq!(etag_matches(Some(&format!("\"{md5}\"")), &md5), Some(true));
        assert_eq!(
            etag_matches(Some("\"00000000000000000000000000000000\""), &md5),
            Some(false)
        );
        assert_eq!(etag_matches(Some("\"abc-2\""), &md5), None);
        assert_eq!(etag_matches(None, &md5), None);
    }
}
