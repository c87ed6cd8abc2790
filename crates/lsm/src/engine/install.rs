//! How flush, compaction and retention change the engine's tree,
//! [`Inner::install`]: append the edit to the manifest (fsync), then swap the
//! super-version under the state lock, then mark removed files obsolete
//! (deleted when the last snapshot using them drops). The manifest lock taken
//! first keeps edits in the manifest in the order they are installed.
//!
//! Two other places swap in a [`SuperVersion`] under the state lock, without
//! coming here: `flush`'s `Inner::publish` adds a sealed buffer (its spans
//! stay visible until the file that holds them is installed), with no
//! manifest edit since the set of files does not change; and `quarantine`
//! appends its own edit and swaps in the version without the damaged file
//! even when that append fails (the file is already in `quarantine/`, and
//! the next open drops it from the live set), marking nothing obsolete (a
//! quarantined file is never deleted).
//!
//! Also here: what happens when an append fails (the manifest is rewritten
//! from the live version, so whether the edit is durable is never left
//! unknown), and removing the files of an edit that was not installed. The
//! simulated crashes of tests are in `hooks`.

use std::{
    collections::HashSet,
    sync::{atomic::Ordering, Arc},
};

use super::{hooks::CrashAt, Inner};
use crate::{
    error::{Error, Result},
    manifest::{Edit, Manifest, ManifestState},
    version::{SuperVersion, TableFile, Version},
};

impl Inner {
    /// Writes `edit` to the manifest, then swaps in the version with `added`
    /// and without `edit.removed` (and without the sealed buffer `flushed`).
    /// `crash` makes a test crash at one of the steps (see `hooks`).
    pub(super) fn install(
        &self,
        edit: Edit,
        added: Vec<Arc<TableFile>>,
        flushed: Option<u64>,
        crash: CrashAt,
    ) -> Result<()> {
        let mut manifest = self.manifest.lock();
        if self.crashed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.settle_manifest(&mut manifest)?;
        self.crash_in_append(crash, &mut manifest, &edit)?;
        self.append_edit(&mut manifest, &edit)?;
        let removed: HashSet<u64> = edit.removed.iter().copied().collect();
        let kept: HashSet<u64> = added.iter().map(|f| f.id).collect();
        let (obsolete, current) = {
            let mut state = self.state.lock();
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
        self.summary_cache.remove_files(&edit.removed);
        self.crash_before_inputs_deleted(crash)?;
        for f in obsolete {
            f.mark_obsolete();
        }
        if manifest.wants_rewrite() {
            // The edit is installed: a failed compaction of the log must not
            // make the caller believe otherwise. The next install retries it.
            if let Err(e) = self.rewrite_manifest(&mut manifest, &current.version) {
                tracing::error!(error = %e, "rewriting the manifest");
            }
        }
        Ok(())
    }

    /// Rewrites the manifest if an earlier append failed: its edit may or may
    /// not be in the file, and a rewrite from the live version settles it.
    pub(super) fn settle_manifest(&self, manifest: &mut Manifest) -> Result<()> {
        if manifest.is_damaged() {
            let live = self.state.lock().version.clone();
            self.rewrite_manifest(manifest, &live)?;
            tracing::info!("manifest rewritten after an earlier failed append");
        }
        Ok(())
    }

    /// Appends `edit` to a settled manifest. On failure, whether the edit is
    /// durable is unknown: the manifest is rewritten without it, so it
    /// certainly is not; if that fails too, the next edit tries again first.
    pub(super) fn append_edit(&self, manifest: &mut Manifest, edit: &Edit) -> Result<()> {
        self.settle_manifest(manifest)?;
        if let Err(e) = manifest.append(edit) {
            let live = self.state.lock().version.clone();
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
        match Manifest::create(&self.opts.data_dir, &state, &self.faults) {
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
    pub(super) fn discard_uninstalled(&self, paths: &[std::path::PathBuf]) {
        let manifest = self.manifest.lock();
        if self.crashed.load(Ordering::Acquire) {
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
