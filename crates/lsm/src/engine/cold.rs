//! The engine's side of the cold tier ([`crate::cold`]): the worker thread
//! `tracedb-cold`, whose pass ([`Engine::cold_pass`]) does, in order:
//!
//! 1. renews the lease (and stops writing to the bucket if it was lost);
//! 2. writes the bucket's manifest snapshot if the remote files changed;
//! 3. at the first pass after a start on an existing data directory, lists
//!    `tables/` in the bucket once and deletes the objects no remote file of
//!    the manifest owns (uploads a crash cut short before their edit); a
//!    start that restored from the bucket lists nothing;
//! 4. deletes the objects of dropped remote files that the snapshot in the
//!    bucket no longer names;
//! 5. uploads each file whose newest span ended `cold_after` ago: the file,
//!    then its sidecar, each verified (size, and MD5 against the ETag, or
//!    the bytes read back), then its head written locally, then a manifest
//!    edit marks it remote; a failure leaves it local for the next pass;
//! 6. writes the snapshot again if step 5 changed anything;
//! 7. under `max_local_disk`, drops local copies of remote files, the
//!    oldest spans first: the file is reopened on its head and the bucket,
//!    swapped into the tree (no edit: the manifest already says remote),
//!    and its `.sst` unlinked (readers holding the old map keep it).
//!
//! Passes run one at a time. Nothing here holds a lock readers or writers
//! wait on, beyond the install lock's usual edit and swap.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Instant,
};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::{stats::add, Engine, Inner};
use crate::{
    cold::{self, BlockCache, ColdOptions, Lease, RemoteFile},
    error::{Error, Result},
    layout,
    manifest::ManifestState,
    mmap::Mmap,
    table::{head_bytes, SsTable},
    version::{ObjectDeletes, TableFile},
};

/// The cold tier of an open engine.
pub(super) struct ColdState {
    pub(super) opts: ColdOptions,
    pub(super) cache: Arc<BlockCache>,
    pub(super) lease: Lease,
    pub(super) deletes: Arc<ObjectDeletes>,
    /// The snapshot last written to the bucket.
    written: Mutex<Option<Vec<u8>>>,
    /// Installs the snapshot in the bucket covers.
    covered: AtomicU64,
    /// Whether the start-up listing of orphan objects is done.
    swept: AtomicBool,
    last_renewal: Mutex<Instant>,
    /// One pass at a time.
    pass: Mutex<()>,
    /// Set to stop the worker; its wake-up.
    stop: Mutex<bool>,
    wake: Condvar,
    counters: ColdCounters,
}

#[derive(Default)]
struct ColdCounters {
    uploaded_files: AtomicU64,
    upload_failures: AtomicU64,
    local_copies_dropped: AtomicU64,
    objects_deleted: AtomicU64,
    snapshots: AtomicU64,
}

/// What the cold tier holds and did, for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColdStats {
    /// Requests to the object store.
    pub bucket: cold::BucketStats,
    /// Remote files, their bytes, and those of them with a local copy.
    pub remote_files: usize,
    pub remote_bytes: u64,
    pub local_copies: usize,
    /// Files uploaded and verified, and uploads that failed (retried).
    pub uploaded_files: u64,
    pub upload_failures: u64,
    pub local_copies_dropped: u64,
    pub objects_deleted: u64,
    pub snapshots_written: u64,
    /// Block cache hits and misses, and the bytes it holds.
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_bytes: u64,
    /// Another node holds the lease: this one writes nothing to the bucket.
    pub lease_lost: bool,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColdPass {
    pub uploaded: usize,
    pub failed: usize,
    pub dropped_local: usize,
    pub deleted: usize,
    /// Objects the start-up listing found orphaned and deleted.
    pub orphans: usize,
}

impl ColdState {
    pub(super) fn new(
        opts: ColdOptions,
        cache: Arc<BlockCache>,
        lease: Lease,
        deletes: Arc<ObjectDeletes>,
        restored: bool,
    ) -> ColdState {
        ColdState {
            opts,
            cache,
            lease,
            deletes,
            written: Mutex::new(None),
            covered: AtomicU64::new(0),
            // A node restored from the bucket lists nothing: orphans the
            // old node left are swept at this node's next start.
            swept: AtomicBool::new(restored),
            last_renewal: Mutex::new(Instant::now()),
            pass: Mutex::new(()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            counters: ColdCounters::default(),
        }
    }

    /// Stops the worker (it finishes its pass first).
    pub(super) fn stop(&self) {
        *self.stop.lock() = true;
        self.wake.notify_all();
    }
}

impl Engine {
    /// Runs one pass of the cold tier now (see `engine/cold.rs`); `None`
    /// without an object store.
    pub fn cold_pass(&self) -> Option<Result<ColdPass>> {
        let cold = self.inner.cold.as_ref()?;
        Some(self.inner.cold_pass(cold))
    }

    /// The cold tier's counters; `None` without an object store.
    pub fn cold_stats(&self) -> Option<ColdStats> {
        let cold = self.inner.cold.as_ref()?;
        let version = self.inner.tree.version();
        let mut stats = ColdStats {
            bucket: cold.opts.bucket.stats(),
            cache_hits: cold.cache.hits.load(Ordering::Relaxed),
            cache_misses: cold.cache.misses.load(Ordering::Relaxed),
            cache_bytes: cold.cache.bytes(),
            lease_lost: cold.lease.is_lost(),
            ..ColdStats::default()
        };
        for f in version.files().filter(|f| f.remote) {
            stats.remote_files += 1;
            stats.remote_bytes += f.size();
            stats.local_copies += usize::from(f.table().remote().is_none());
        }
        let c = &cold.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        stats.uploaded_files = get(&c.uploaded_files);
        stats.upload_failures = get(&c.upload_failures);
        stats.local_copies_dropped = get(&c.local_copies_dropped);
        stats.objects_deleted = get(&c.objects_deleted);
        stats.snapshots_written = get(&c.snapshots);
        Some(stats)
    }
}

impl Inner {
    /// The worker: a pass every `interval` until stopped.
    pub(super) fn run_cold(&self) {
        let Some(cold) = self.cold.as_ref() else {
            return;
        };
        loop {
            if let Err(e) = self.cold_pass(cold) {
                tracing::warn!(error = %e, "object store pass failed; retrying at the next one");
            }
            let mut stop = cold.stop.lock();
            if !*stop {
                // Woken in time to renew the lease, however long the interval.
                let wait = cold.opts.interval.min(cold.lease.renew_every());
                cold.wake.wait_for(&mut stop, wait);
            }
            if *stop {
                break;
            }
        }
        cold.lease.release();
    }

    fn cold_pass(&self, cold: &ColdState) -> Result<ColdPass> {
        let _one = cold.pass.lock();
        let mut pass = ColdPass::default();
        if self.tree.is_crashed() {
            return Ok(pass);
        }
        if !renewed(cold)? {
            return Ok(pass);
        }
        self.write_snapshot(cold)?;
        if !cold.swept.load(Ordering::Acquire) {
            pass.orphans = self.sweep_orphans(cold)?;
            cold.swept.store(true, Ordering::Release);
        }
        pass.deleted = self.delete_objects(cold);
        let cold_after = cold.opts.cold_after.as_nanos() as u64;
        let now = self.opts.clock.now_unix_nano();
        let due: Vec<Arc<TableFile>> = self
            .tree
            .version()
            .files()
            .filter(|f| {
                !f.remote
                    && f.table()
                        .meta()
                        .max_time_unix_nano
                        .saturating_add(cold_after)
                        <= now
            })
            .cloned()
            .collect();
        for file in due {
            // A long run of uploads renews the lease on its way.
            if *cold.stop.lock() || !renewed(cold)? {
                break;
            }
            match self.upload(cold, &file) {
                Ok(true) => pass.uploaded += 1,
                Ok(false) => {}
                Err(e) => {
                    pass.failed += 1;
                    add(&cold.counters.upload_failures, 1);
                    tracing::warn!(file = %file.path().display(), error = %e, "uploading a file to the object store failed; it stays local and is tried again");
                }
            }
        }
        if pass.uploaded > 0 {
            self.write_snapshot(cold)?;
        }
        pass.dropped_local = self.drop_local_copies(cold)?;
        Ok(pass)
    }

    /// Writes the bucket's snapshot of the remote files, unless it is the
    /// one written last.
    fn write_snapshot(&self, cold: &ColdState) -> Result<()> {
        // Counted before the version is read: the version is at least as new.
        let installs = cold.deletes.installs.load(Ordering::Acquire);
        let version = self.tree.version();
        let state = ManifestState {
            files: version.files().map(|f| (f.id, f.entry())).collect(),
            next_file_id: self.tree.next_file_id(),
            torn_tail: false,
        };
        let bytes = cold::remote_snapshot(&state);
        let mut written = cold.written.lock();
        let changed = written.as_deref() != Some(&bytes[..]);
        if changed {
            cold.opts
                .bucket
                .put(layout::OBJECT_MANIFEST, Bytes::from(bytes.clone()))?;
            add(&cold.counters.snapshots, 1);
            *written = Some(bytes);
        }
        cold.covered.fetch_max(installs, Ordering::AcqRel);
        Ok(())
    }

    /// Deletes the objects of dropped remote files that the bucket's
    /// snapshot no longer names.
    fn delete_objects(&self, cold: &ColdState) -> usize {
        let covered = cold.covered.load(Ordering::Acquire);
        let due: Vec<u64> = {
            let mut queue = cold.deletes.queue.lock();
            let (due, keep): (Vec<_>, Vec<_>) = queue.drain(..).partition(|(at, _)| *at <= covered);
            *queue = keep;
            due.into_iter().map(|(_, id)| id).collect()
        };
        let mut deleted = 0;
        for id in due {
            let bucket = &cold.opts.bucket;
            let done = bucket
                .delete(&layout::object_table(id))
                .and_then(|()| bucket.delete(&layout::object_sidecar(id)));
            match done {
                Ok(()) => {
                    deleted += 1;
                    add(&cold.counters.objects_deleted, 1);
                }
                Err(e) => {
                    tracing::warn!(file = id, error = %e, "deleting a dropped file's objects failed; retrying at the next pass");
                    cold.deletes.queue.lock().push((covered, id));
                }
            }
        }
        deleted
    }

    /// The start-up listing: objects under `tables/` that no remote file of
    /// the tree owns are deleted. Runs after a snapshot of the tree is in
    /// the bucket, so none of them is named there either.
    fn sweep_orphans(&self, cold: &ColdState) -> Result<usize> {
        let version = self.tree.version();
        let live: std::collections::HashSet<u64> =
            version.files().filter(|f| f.remote).map(|f| f.id).collect();
        let mut deleted = 0;
        for (name, _) in cold.opts.bucket.list(layout::OBJECT_TABLES)? {
            let orphan = layout::object_id(&name).is_none_or(|id| !live.contains(&id));
            if orphan {
                tracing::info!(
                    object = name,
                    "deleting an object no remote file owns (an upload cut short)"
                );
                cold.opts.bucket.delete(&name)?;
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    /// Uploads `file` and marks it remote; `Ok(false)` when it left the
    /// tree meanwhile (its objects are deleted again).
    fn upload(&self, cold: &ColdState, file: &Arc<TableFile>) -> Result<bool> {
        let bucket = &cold.opts.bucket;
        let path = file.path().to_path_buf();
        // The body is a map of the file, shared with the request: no copy.
        let body = Bytes::from_owner(Mmap::open(&path)?);
        if body.len() as u64 != file.size() {
            return Err(Error::Corrupt {
                file: path,
                offset: 0,
                reason: format!(
                    "{} bytes on disk, {} in the manifest",
                    body.len(),
                    file.size()
                ),
            });
        }
        let name = layout::object_table(file.id);
        put_verified(bucket, &name, body.clone())?;
        let sidecar = layout::sidecar_path(&path);
        match std::fs::read(&sidecar) {
            Ok(bytes) => {
                put_verified(bucket, &layout::object_sidecar(file.id), Bytes::from(bytes))?
            }
            // Rebuilt from the file when missing, there as here.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&sidecar, e)),
        }
        let head = head_bytes(&path, &body)?;
        cold::write_head(&self.tables_dir, file.id, &head)?;
        let marked = {
            let mut installing = self.tree.lock();
            installing.mark_uploaded(file.id)?
        };
        if !marked {
            // Compaction or retention took it out meanwhile: no snapshot
            // ever named these objects.
            let _ = std::fs::remove_file(layout::head_path(&self.tables_dir, file.id));
            bucket.delete(&name)?;
            bucket.delete(&layout::object_sidecar(file.id))?;
            return Ok(false);
        }
        add(&cold.counters.uploaded_files, 1);
        tracing::debug!(file = %path.display(), bytes = body.len(), "uploaded to the object store");
        Ok(true)
    }

    /// Drops local copies of remote files while the store's local disk is
    /// over `max_local_disk`, the oldest spans first.
    fn drop_local_copies(&self, cold: &ColdState) -> Result<usize> {
        let Some(max) = cold.opts.max_local_disk else {
            return Ok(0);
        };
        let version = self.tree.version();
        let mut used = cold.cache.bytes();
        let mut copies = Vec::new();
        for f in version.files() {
            let sidecar = layout::sidecar_path(f.path());
            used += std::fs::metadata(&sidecar).map_or(0, |m| m.len());
            if f.table().remote().is_none() {
                used += f.size();
                if f.remote {
                    copies.push(f.clone());
                }
            } else {
                used += std::fs::metadata(layout::head_path(&self.tables_dir, f.id))
                    .map_or(0, |m| m.len());
            }
        }
        copies.sort_by_key(|f| (f.table().meta().max_time_unix_nano, f.id));
        let mut dropped = 0;
        for f in copies {
            if used <= max {
                break;
            }
            let head_path = layout::head_path(&self.tables_dir, f.id);
            let head = std::fs::read(&head_path).map_err(|e| Error::io(&head_path, e))?;
            let remote = RemoteFile::new(cold.opts.bucket.clone(), f.id, cold.cache.clone());
            let table = SsTable::open_remote(f.path(), &head, f.size(), remote)?;
            let swapped = {
                let mut installing = self.tree.lock();
                installing.reopen(f.id, table)
            };
            if !swapped {
                continue;
            }
            // Readers holding the old map keep its pages until they let go.
            if let Err(e) = std::fs::remove_file(f.path()) {
                tracing::warn!(file = %f.path().display(), error = %e, "removing a local copy");
                continue;
            }
            used = used.saturating_sub(f.size()) + head.len() as u64;
            dropped += 1;
            add(&cold.counters.local_copies_dropped, 1);
        }
        if used > max {
            tracing::warn!(
                used,
                max,
                "local disk over --max-local-disk: the rest is files not yet uploaded, their indexes and heads"
            );
        }
        Ok(dropped)
    }
}

/// Renews the lease when a third of it has passed; `false` once another
/// node holds it (nothing may be written then).
fn renewed(cold: &ColdState) -> Result<bool> {
    if cold.last_renewal.lock().elapsed() >= cold.lease.renew_every() {
        cold.lease.renew()?;
        *cold.last_renewal.lock() = Instant::now();
    }
    Ok(!cold.lease.is_lost())
}

/// Writes object `name` and checks it: its size, and its ETag against the
/// body's MD5 when the store gives an MD5 ETag, else the bytes read back.
fn put_verified(bucket: &cold::Bucket, name: &str, body: Bytes) -> Result<()> {
    let md5 = cold::md5_hex(&body);
    let etag = bucket.put(name, body.clone())?;
    let mismatch = |what: String| Error::Remote {
        op: "verify",
        object: format!("{bucket}/{name}"),
        reason: what,
    };
    match bucket.head(name)? {
        Some((size, _)) if size == body.len() as u64 => {}
        Some((size, _)) => {
            return Err(mismatch(format!(
                "uploaded {} bytes, the store holds {size}",
                body.len()
            )))
        }
        None => return Err(mismatch("the object is missing after its upload".into())),
    }
    match cold::etag_matches(etag.as_deref(), &md5) {
        Some(true) => Ok(()),
        Some(false) => Err(mismatch(format!(
            "ETag {} is not the body's MD5 {md5}",
            etag.unwrap_or_default()
        ))),
        None => {
            let back = bucket
                .get(name)?
                .ok_or_else(|| mismatch("the object is missing after its upload".into()))?;
            if back == body {
                Ok(())
            } else {
                Err(mismatch("the bytes read back differ".into()))
            }
        }
    }
}
