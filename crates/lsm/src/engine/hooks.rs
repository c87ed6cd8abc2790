//! The hooks tests use to simulate crashes and stalls ([`Hooks`], set in
//! `EngineOptions::hooks`), and the simulated crashes at the steps of a
//! compaction ([`CrashPoint`]). They exist only with the `test-support`
//! feature; without it each function here is the no-op the engine then
//! calls, so the code that calls them carries no `cfg`.

#[cfg(feature = "test-support")]
use std::fmt;
use std::{path::PathBuf, sync::Arc, time::Duration};

use super::{tree::TreeState, EngineOptions, Inner};
#[cfg(feature = "test-support")]
use crate::error::Error;
use crate::{
    error::Result,
    fault::FaultInjector,
    manifest::{Edit, FileEntry, Manifest},
};

/// The crash point a merge runs with: `Option<CrashPoint>` with the
/// `test-support` feature, and without it a type with one value, no crash.
#[cfg(feature = "test-support")]
pub(super) type CrashAt = Option<CrashPoint>;
/// The crash point a merge runs with: without the `test-support` feature,
/// never one.
#[cfg(not(feature = "test-support"))]
#[derive(Debug, Clone, Copy)]
pub(super) struct CrashAt;

/// No crash: what flushes, moves and retention install with (`Inner::install`).
#[cfg(feature = "test-support")]
pub(super) const NO_CRASH: CrashAt = None;
/// No crash: what flushes, moves and retention install with (`Inner::install`).
#[cfg(not(feature = "test-support"))]
pub(super) const NO_CRASH: CrashAt = CrashAt;

impl EngineOptions {
    /// Pause before retrying a failed flush or compaction.
    pub(super) fn retry_delay(&self, default: Duration) -> Duration {
        #[cfg(feature = "test-support")]
        if let Some(delay) = self.hooks.retry_delay {
            return delay;
        }
        default
    }

    /// The fault injector of the file layer ([`crate::fault`]), if a test set one.
    pub(super) fn fault_injector(&self) -> Option<Arc<FaultInjector>> {
        #[cfg(feature = "test-support")]
        return self.hooks.faults.clone();
        #[cfg(not(feature = "test-support"))]
        None
    }

    /// Called by a merge after its first trace.
    pub(super) fn after_first_trace(&self) -> Option<&(dyn Fn() + Send + Sync)> {
        #[cfg(feature = "test-support")]
        return self.hooks.after_first_trace.as_deref();
        #[cfg(not(feature = "test-support"))]
        None
    }

    /// Called between traces by merges of levels 1 and deeper.
    pub(super) fn between_deeper_traces(&self) -> Option<&(dyn Fn() + Send + Sync)> {
        #[cfg(feature = "test-support")]
        return self.hooks.between_deeper_traces.as_deref();
        #[cfg(not(feature = "test-support"))]
        None
    }

    /// Where merges crash.
    pub(super) fn crash_at(&self) -> CrashAt {
        #[cfg(feature = "test-support")]
        return self.hooks.crash_at;
        #[cfg(not(feature = "test-support"))]
        CrashAt
    }
}

#[cfg(feature = "test-support")]
impl Inner {
    /// [`CrashPoint::BeforeOutputsSynced`]: cuts each output of a merge to
    /// half its length and crashes.
    pub(super) fn crash_before_outputs_synced(
        &self,
        crash: CrashAt,
        outputs: &[(FileEntry, PathBuf)],
    ) -> Result<()> {
        if let Some(point @ CrashPoint::BeforeOutputsSynced) = crash {
            for (entry, path) in outputs {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| Error::io(path, e))?;
                f.set_len(entry.file_size / 2)
                    .map_err(|e| Error::io(path, e))?;
            }
            return Err(self.tree.simulate_crash(point));
        }
        Ok(())
    }
}

#[cfg(feature = "test-support")]
impl TreeState {
    /// Simulates a crash: from now on nothing is written or deleted.
    fn simulate_crash(&self, point: CrashPoint) -> Error {
        tracing::warn!(?point, "simulated crash");
        self.crash();
        Error::SimulatedCrash(point)
    }

    /// [`CrashPoint::TornManifestAppend`] (half the record appended) and
    /// [`CrashPoint::AfterManifestAppend`] (all of it): appends `edit` so and
    /// crashes.
    pub(super) fn crash_in_append(
        &self,
        crash: CrashAt,
        manifest: &mut Manifest,
        edit: &Edit,
    ) -> Result<()> {
        match crash {
            Some(point @ CrashPoint::TornManifestAppend) => {
                let mut full = Vec::new();
                edit.encode(&mut full);
                manifest.append_torn(edit, 8 + full.len() / 2)?;
                Err(self.simulate_crash(point))
            }
            Some(point @ CrashPoint::AfterManifestAppend) => {
                manifest.append(edit)?;
                Err(self.simulate_crash(point))
            }
            _ => Ok(()),
        }
    }

    /// [`CrashPoint::BeforeInputsDeleted`]: crashes once the version is
    /// swapped, before the removed files are marked obsolete.
    pub(super) fn crash_before_inputs_deleted(&self, crash: CrashAt) -> Result<()> {
        if let Some(point @ CrashPoint::BeforeInputsDeleted) = crash {
            return Err(self.simulate_crash(point));
        }
        Ok(())
    }
}

#[cfg(not(feature = "test-support"))]
impl Inner {
    pub(super) fn crash_before_outputs_synced(
        &self,
        _: CrashAt,
        _: &[(FileEntry, PathBuf)],
    ) -> Result<()> {
        Ok(())
    }
}

#[cfg(not(feature = "test-support"))]
impl TreeState {
    pub(super) fn crash_in_append(&self, _: CrashAt, _: &mut Manifest, _: &Edit) -> Result<()> {
        Ok(())
    }

    pub(super) fn crash_before_inputs_deleted(&self, _: CrashAt) -> Result<()> {
        Ok(())
    }
}

/// A step of a compaction at which a test can make the engine "crash": stop
/// writing anything at that point, as a killed process would.
#[cfg(feature = "test-support")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Outputs written but not durable: each is left cut to half its length.
    BeforeOutputsSynced,
    /// The manifest edit is half appended (a torn record).
    TornManifestAppend,
    /// The manifest edit is durable; the new version is not installed.
    AfterManifestAppend,
    /// The new version is installed; the inputs are not deleted.
    BeforeInputsDeleted,
}

/// Test hooks.
#[cfg(feature = "test-support")]
#[derive(Clone, Default)]
pub struct Hooks {
    /// Crash at this step of the next merge compaction.
    pub crash_at: Option<CrashPoint>,
    /// Called by a merge after its first trace; a test can block in it to hold
    /// a merge half done.
    pub after_first_trace: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Makes chosen writes and fsyncs of the WAL, the sorted files and the
    /// manifest fail ([`crate::fault`]).
    pub faults: Option<Arc<FaultInjector>>,
    /// Pause before retrying a failed flush or compaction, instead of 1 s.
    pub retry_delay: Option<Duration>,
    /// Called between traces by merges of levels 1 and deeper; a test can
    /// sleep in it to make such a merge last.
    pub between_deeper_traces: Option<Arc<dyn Fn() + Send + Sync>>,
}

#[cfg(feature = "test-support")]
impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("crash_at", &self.crash_at)
            .field("after_first_trace", &self.after_first_trace.is_some())
            .field("faults", &self.faults.is_some())
            .field("retry_delay", &self.retry_delay)
            .field(
                "between_deeper_traces",
                &self.between_deeper_traces.is_some(),
            )
            .finish()
    }
}
