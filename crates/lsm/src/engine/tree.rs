//! [`TreeState`], the one owner of the set of live files: the current
//! [`SuperVersion`], the manifest, the next file ID and the level-0 count.
//! Its methods are the only code that builds and installs a super-version;
//! there are three ways the tree changes:
//!
//! - [`TreeState::publish`]: a sealed buffer joins the super-version (its
//!   spans stay visible until the file that holds them is installed). No
//!   manifest edit: the set of files does not change.
//! - [`TreeState::install`], for flush, compaction and retention: append the
//!   edit to the manifest (fsync), then swap the super-version under the
//!   state lock, then mark removed files obsolete (deleted when the last
//!   snapshot using them drops).
//! - [`Installing::remove_damaged`], for `quarantine`: append the edit that
//!   removes a damaged file and swap in the version without it even when
//!   that append fails (the file is already in `quarantine/`, and the next
//!   open drops it from the live set), marking nothing obsolete (a
//!   quarantined file is never deleted).
//!
//! The install lock (the manifest's mutex, held by an [`Installing`]) is
//! taken first, so edits reach the manifest in the order they are installed.
//!
//! Also here: what happens when an append fails (the manifest is rewritten
//! from the live version, so whether the edit is durable is never left
//! unknown), and removing the files of an edit that was not installed. The
//! simulated crashes of tests are in `hooks`.

use std::{
    collections::HashSet,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use parking_lot::{Mutex, MutexGuard};

use super::{flush::FlushQueue, hooks::CrashAt};
use crate::{
    error::{Error, Result},
    fault::Faults,
    manifest::{Edit, Manifest, ManifestState},
    memtable::Sealed,
    version::{Janitor, SuperVersion, TableFile, Version},
};

/// Owner of the live files (see the module docs).
pub(super) struct TreeState {
    data_dir: PathBuf,
    /// File operations of manifest rewrites (with faults injected by tests).
    faults: Faults,
    /// The current super-version. Locked only to clone or swap the `Arc`.
    current: Mutex<Arc<SuperVersion>>,
    /// The install lock: held while an edit is appended and the version
    /// swapped, so edits reach the manifest in the order they are installed.
    manifest: Mutex<Manifest>,
    /// Files written for edits that failed while the manifest was damaged:
    /// removed by the rewrite that repairs it.
    orphans: Mutex<Vec<PathBuf>>,
    next_file_id: AtomicU64,
    /// Level-0 files in the current version, for admission without a lock.
    l0_files: AtomicUsize,
    /// A simulated crash happened (or `abandon` was called): the tree
    /// changes no more and no file is deleted.
    crashed: AtomicBool,
    /// Deletes the files marked obsolete; off once crashed.
    janitor: Arc<Janitor>,
}

impl TreeState {
    /// The tree recovered at open: `version` as `manifest` records it, with
    /// the buffers the WAL replay sealed.
    pub(super) fn new(
        data_dir: PathBuf,
        faults: Faults,
        janitor: Arc<Janitor>,
        manifest: Manifest,
        next_file_id: u64,
        version: Version,
        sealed: Vec<Arc<Sealed>>,
    ) -> TreeState {
        TreeState {
            data_dir,
            faults,
            l0_files: AtomicUsize::new(version.l0.len()),
            current: Mutex::new(Arc::new(SuperVersion {
                sealed,
                version: Arc::new(version),
            })),
            manifest: Mutex::new(manifest),
            orphans: Mutex::new(Vec::new()),
            next_file_id: AtomicU64::new(next_file_id),
            crashed: AtomicBool::new(false),
            janitor,
        }
    }

    /// The current sealed buffers and files.
    pub(super) fn current(&self) -> Arc<SuperVersion> {
        self.current.lock().clone()
    }

    /// The current files.
    pub(super) fn version(&self) -> Arc<Version> {
        self.current.lock().version.clone()
    }

    /// Level-0 files in the current version; one atomic load.
    pub(super) fn l0_files(&self) -> usize {
        self.l0_files.load(Ordering::Relaxed)
    }

    /// The next file ID not yet given out, as edits record it.
    pub(super) fn next_file_id(&self) -> u64 {
        self.next_file_id.load(Ordering::Relaxed)
    }

    /// Gives out a file ID.
    pub(super) fn new_file_id(&self) -> u64 {
        self.next_file_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The file ID counter, lent to merges, which give out one per output.
    pub(super) fn file_ids(&self) -> &AtomicU64 {
        &self.next_file_id
    }

    /// Whether the tree was frozen by [`TreeState::crash`].
    pub(super) fn is_crashed(&self) -> bool {
        self.crashed.load(Ordering::Acquire)
    }

    /// The crashed flag, for the waits of the compaction scheduler.
    pub(super) fn crashed_flag(&self) -> &AtomicBool {
        &self.crashed
    }

    /// Stops the tree as a crash would: from now on nothing is installed,
    /// written or deleted.
    pub(super) fn crash(&self) {
        self.crashed.store(true, Ordering::SeqCst);
        self.janitor.enabled.store(false, Ordering::SeqCst);
    }

    /// Makes a sealed buffer visible to readers.
    pub(super) fn publish(&self, sealed: Arc<Sealed>) {
        let mut current = self.current.lock();
        let mut sealed_list = current.sealed.clone();
        sealed_list.push(sealed);
        *current = Arc::new(SuperVersion {
            sealed: sealed_list,
            version: current.version.clone(),
        });
    }

    /// Waits until no sealed buffer is left, woken by each installed flush
    /// (`flush`'s signal) and at least every `retry`; `Err(Closed)` once
    /// `give_up` says so, asked before each wait.
    pub(super) fn wait_for_sealed(
        &self,
        flush: &FlushQueue,
        retry: Duration,
        mut give_up: impl FnMut() -> bool,
    ) -> Result<()> {
        let mut current = self.current.lock();
        while !current.sealed.is_empty() {
            if give_up() {
                return Err(Error::Closed);
            }
            flush.wait(&mut current, retry);
        }
        Ok(())
    }

    /// Takes the install lock.
    pub(super) fn lock(&self) -> Installing<'_> {
        Installing {
            tree: self,
            manifest: self.manifest.lock(),
        }
    }

    /// Writes `edit` to the manifest, then swaps in the version with `added`
    /// and without `edit.removed` (and without the sealed buffer `flushed`).
    /// `crash` makes a test crash at one of the steps (see `hooks`).
    pub(super) fn install(
        &self,
        edit: &Edit,
        added: Vec<Arc<TableFile>>,
        flushed: Option<u64>,
        crash: CrashAt,
    ) -> Result<()> {
        let mut installing = self.lock();
        if self.is_crashed() {
            return Err(Error::Closed);
        }
        let manifest = &mut installing.manifest;
        self.settle_manifest(manifest)?;
        self.crash_in_append(crash, manifest, edit)?;
        self.append_edit(manifest, edit)?;
        let removed: HashSet<u64> = edit.removed.iter().copied().collect();
        let kept: HashSet<u64> = added.iter().map(|f| f.id).collect();
        let (obsolete, current) = {
            let mut state = self.current.lock();
            let obsolete: Vec<Arc<TableFile>> = state
                .version
                .files()
                .filter(|f| removed.contains(&f.id) && !kept.contains(&f.id))
                .cloned()
                .collect();
            let version = Arc::new(state.version.apply(&removed, added));
            let sealed = state
                .sealed
                .iter()
                .filter(|s| Some(s.id) != flushed)
                .cloned()
                .collect();
            *state = Arc::new(SuperVersion { sealed, version });
            (obsolete, state.clone())
        };
        self.l0_files
            .store(current.version.l0.len(), Ordering::Relaxed);
        self.count_install();
        self.crash_before_inputs_deleted(crash)?;
        for f in obsolete {
            f.mark_obsolete();
        }
        if manifest.wants_rewrite() {
            // The edit is installed: a failed compaction of the log must not
            // make the caller believe otherwise. The next install retries it.
            if let Err(e) = self.rewrite_manifest(manifest, &current.version) {
                tracing::error!(error = %e, "rewriting the manifest");
            }
        }
        Ok(())
    }

    /// Counts an installed version, for the object store's deletes (a
    /// file dropped after this many installs was removed by one of them).
    fn count_install(&self) {
        if let Some(deletes) = &self.janitor.cold {
            deletes.installs.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Rewrites the manifest if an earlier append failed: its edit may or may
    /// not be in the file, and a rewrite from the live version settles it.
    fn settle_manifest(&self, manifest: &mut Manifest) -> Result<()> {
        if manifest.is_damaged() {
            let live = self.version();
            self.rewrite_manifest(manifest, &live)?;
            tracing::info!("manifest rewritten after an earlier failed append");
        }
        Ok(())
    }

    /// Appends `edit` to a settled manifest. On failure, whether the edit is
    /// durable is unknown: the manifest is rewritten without it, so it
    /// certainly is not; if that fails too, the next edit tries again first.
    fn append_edit(&self, manifest: &mut Manifest, edit: &Edit) -> Result<()> {
        self.settle_manifest(manifest)?;
        if let Err(e) = manifest.append(edit) {
            let live = self.version();
            if let Err(again) = self.rewrite_manifest(manifest, &live) {
                tracing::error!(error = %again, "rewriting the manifest after a failed append");
            }
            return Err(e);
        }
        Ok(())
    }

    /// Replaces the manifest by one edit naming the files of `version`. On
    /// failure the old one is marked damaged: the rename may have happened,
    /// so appending to the old file could write to an unlinked inode.
    fn rewrite_manifest(&self, manifest: &mut Manifest, version: &Version) -> Result<()> {
        let state = ManifestState {
            files: version.files().map(|f| (f.id, f.entry())).collect(),
            next_file_id: self.next_file_id(),
            torn_tail: false,
        };
        match Manifest::create(&self.data_dir, &state, &self.faults) {
            Ok(fresh) => {
                *manifest = fresh;
                // The new manifest names none of them: they were never installed.
                for path in std::mem::take(&mut *self.orphans.lock()) {
                    if let Err(e) = std::fs::remove_file(&path) {
                        tracing::warn!(file = %path.display(), error = %e, "removing an uninstalled file");
                    }
                }
                Ok(())
            }
            Err(e) => {
                manifest.mark_damaged();
                Err(e)
            }
        }
    }

    /// Removes files written for an edit that was not installed, unless the
    /// manifest is damaged: then the edit may be durable and name them, and
    /// they go once a rewrite has settled the manifest (or at the next open).
    pub(super) fn discard_uninstalled(&self, paths: &[PathBuf]) {
        let manifest = self.manifest.lock();
        if self.is_crashed() {
            return;
        }
        if manifest.is_damaged() {
            self.orphans.lock().extend_from_slice(paths);
            return;
        }
        drop(manifest);
        for path in paths {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!(file = %path.display(), error = %e, "removing an uninstalled file");
            }
        }
    }
}

/// The install lock, held: what `quarantine` does between finding a damaged
/// file and taking it out of the tree happens under it.
pub(super) struct Installing<'a> {
    tree: &'a TreeState,
    manifest: MutexGuard<'a, Manifest>,
}

impl Installing<'_> {
    /// Live file `id`, if the current version has it.
    pub(super) fn live_file(&self, id: u64) -> Option<Arc<TableFile>> {
        self.tree
            .current
            .lock()
            .version
            .files()
            .find(|f| f.id == id)
            .cloned()
    }

    /// Takes live file `id`, moved to `quarantine/`, out of the tree: its
    /// edit is appended (a failure is logged: the next open drops the file
    /// from the live set if the manifest still names it), and the version
    /// without it swapped in. Not marked obsolete: nothing may delete it.
    pub(super) fn remove_damaged(&mut self, id: u64) {
        let tree = self.tree;
        let edit = Edit {
            next_file_id: tree.next_file_id(),
            removed: vec![id],
            added: Vec::new(),
        };
        if let Err(e) = tree.append_edit(&mut self.manifest, &edit) {
            // The file is in quarantine/ whatever the manifest says; the next
            // open drops it from the live set if the manifest still names it.
            tracing::error!(error = %e, "recording a quarantine in the manifest");
        }
        let l0 = {
            let mut state = tree.current.lock();
            let version = Arc::new(state.version.apply(&HashSet::from([id]), Vec::new()));
            let l0 = version.l0.len();
            *state = Arc::new(SuperVersion {
                sealed: state.sealed.clone(),
                version,
            });
            l0
        };
        tree.l0_files.store(l0, Ordering::Relaxed);
        tree.count_install();
    }

    /// Marks live file `id` remote, uploaded and verified: its edit is
    /// appended, then the version with it swapped in. `Ok(false)` when the
    /// file is not live any more.
    pub(super) fn mark_uploaded(&mut self, id: u64) -> Result<bool> {
        let tree = self.tree;
        if tree.is_crashed() {
            return Err(Error::Closed);
        }
        let Some(file) = self.live_file(id) else {
            return Ok(false);
        };
        let uploaded = Arc::new(file.uploaded());
        let edit = Edit {
            next_file_id: tree.next_file_id(),
            removed: vec![id],
            added: vec![uploaded.entry()],
        };
        tree.append_edit(&mut self.manifest, &edit)?;
        self.swap(id, uploaded);
        tree.count_install();
        Ok(true)
    }

    /// Swaps live remote file `id` for the same file opened on `table` (its
    /// blocks from the object store); no edit, the manifest already says
    /// remote. `false` when the file is not live any more.
    pub(super) fn reopen(&mut self, id: u64, table: crate::table::SsTable) -> bool {
        match self.live_file(id) {
            Some(file) if file.remote => {
                self.swap(id, Arc::new(file.reopened(table)));
                true
            }
            _ => false,
        }
    }

    /// The current version with file `id` replaced by `file`.
    fn swap(&mut self, id: u64, file: Arc<TableFile>) {
        let mut state = self.tree.current.lock();
        let version = Arc::new(state.version.apply(&HashSet::from([id]), vec![file]));
        *state = Arc::new(SuperVersion {
            sealed: state.sealed.clone(),
            version,
        });
    }
}
