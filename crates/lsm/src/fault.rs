//! The file layer every durable write goes through, and the fault injector
//! tests use to make those writes fail.
//!
//! The WAL, the sorted-file builder and the manifest do not call
//! `write_all`/`sync_data`/`sync_all` on a [`File`] directly but through
//! [`Faults`], which is a no-op wrapper unless a [`FaultInjector`] is set.
//! The injector makes the Nth matching write or fsync fail, once or until
//! [`FaultInjector::heal`], with `ENOSPC` (disk full) or `EIO`. A failed write
//! first writes half of its buffer, as a real short write followed by an
//! error would, so the code above must cope with garbage after its last good
//! byte. The cost when no injector is set is one branch per call.
//!
//! Tests reach it through `EngineOptions::hooks`, which only a build with
//! the `test-support` feature has; production code never sets one.

use std::{
    fs::File,
    io::{self, Write},
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Which component a file operation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultTarget {
    Wal,
    Table,
    Manifest,
}

/// The kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    /// `write_all` of a buffer.
    Write,
    /// `fsync`/`fdatasync` of a file or a directory.
    Sync,
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `ENOSPC`: no space left on device.
    NoSpace,
    /// `EIO`: the device reported an I/O error.
    Io,
}

impl FaultKind {
    fn error(self) -> io::Error {
        // Linux errno values; the engine only runs on Linux (flock, fdatasync).
        match self {
            FaultKind::NoSpace => io::Error::from_raw_os_error(28),
            FaultKind::Io => io::Error::from_raw_os_error(5),
        }
    }
}

/// One armed fault: skip `skip` matching operations, then fail `count` of them
/// (`None` = every one until healed).
#[derive(Debug)]
struct Rule {
    target: Option<FaultTarget>,
    op: Option<FaultOp>,
    skip: u64,
    count: Option<u64>,
    kind: FaultKind,
}

impl Rule {
    fn matches(&self, target: FaultTarget, op: FaultOp) -> bool {
        self.target.is_none_or(|t| t == target) && self.op.is_none_or(|o| o == op)
    }
}

/// Makes chosen file operations fail. Shared by `Arc` between a test and the
/// engine it configures.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct FaultInjector {
    rules: Mutex<Vec<Rule>>,
    injected: AtomicU64,
    operations: AtomicU64,
}

impl FaultInjector {
    pub fn new() -> Arc<FaultInjector> {
        Arc::new(FaultInjector::default())
    }

    /// The `n`th (1-based, counted from now) operation matching `target` and
    /// `op` (`None` matches any) fails with `kind`; later ones succeed.
    pub fn fail_nth(
        &self,
        target: Option<FaultTarget>,
        op: Option<FaultOp>,
        n: u64,
        kind: FaultKind,
    ) {
        self.arm(target, op, n, Some(1), kind);
    }

    /// From the `n`th matching operation on, every one fails with `kind`
    /// until [`FaultInjector::heal`]: a disk that filled up.
    pub fn fail_from_nth(
        &self,
        target: Option<FaultTarget>,
        op: Option<FaultOp>,
        n: u64,
        kind: FaultKind,
    ) {
        self.arm(target, op, n, None, kind);
    }

    fn arm(
        &self,
        target: Option<FaultTarget>,
        op: Option<FaultOp>,
        n: u64,
        count: Option<u64>,
        kind: FaultKind,
    ) {
        self.rules.lock().push(Rule {
            target,
            op,
            skip: n.saturating_sub(1),
            count,
            kind,
        });
    }

    /// Disarms every fault: space came back.
    pub fn heal(&self) {
        self.rules.lock().clear();
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// Operations seen so far, failed or not.
    pub fn operations(&self) -> u64 {
        self.operations.load(Ordering::SeqCst)
    }

    /// Whether this operation must fail, and how.
    fn check(&self, target: FaultTarget, op: FaultOp) -> Option<FaultKind> {
        self.operations.fetch_add(1, Ordering::SeqCst);
        let mut rules = self.rules.lock();
        let mut fired = None;
        for rule in rules.iter_mut().filter(|r| r.matches(target, op)) {
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            if fired.is_none() {
                fired = Some(rule.kind);
                if let Some(c) = &mut rule.count {
                    *c -= 1;
                }
            }
        }
        rules.retain(|r| r.count != Some(0));
        if fired.is_some() {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        fired
    }
}

/// The file operations of durable writes, with faults injected when a test
/// asks. Cheap to clone; [`Faults::default`] injects nothing.
#[derive(Debug, Clone, Default)]
pub struct Faults(Option<Arc<FaultInjector>>);

impl Faults {
    pub fn new(injector: Option<Arc<FaultInjector>>) -> Faults {
        Faults(injector)
    }

    fn check(&self, target: FaultTarget, op: FaultOp) -> Option<FaultKind> {
        self.0.as_ref().and_then(|i| i.check(target, op))
    }

    /// `file.write_all(buf)`; an injected failure writes half of `buf` first.
    pub(crate) fn write_all(
        &self,
        target: FaultTarget,
        file: &mut File,
        path: &Path,
        buf: &[u8],
    ) -> Result<()> {
        if let Some(kind) = self.check(target, FaultOp::Write) {
            let _ = file.write_all(&buf[..buf.len() / 2]);
            return Err(Error::io(path, kind.error()));
        }
        file.write_all(buf).map_err(|e| Error::io(path, e))
    }

    /// `file.sync_data()`.
    pub(crate) fn sync_data(&self, target: FaultTarget, file: &File, path: &Path) -> Result<()> {
        if let Some(kind) = self.check(target, FaultOp::Sync) {
            return Err(Error::io(path, kind.error()));
        }
        file.sync_data().map_err(|e| Error::io(path, e))
    }

    /// `file.sync_all()`.
    pub(crate) fn sync_all(&self, target: FaultTarget, file: &File, path: &Path) -> Result<()> {
        if let Some(kind) = self.check(target, FaultOp::Sync) {
            return Err(Error::io(path, kind.error()));
        }
        file.sync_all().map_err(|e| Error::io(path, e))
    }

    /// fsyncs directory `dir`, so entries created, renamed or removed in it
    /// survive a crash.
    pub(crate) fn sync_dir(&self, target: FaultTarget, dir: &Path) -> Result<()> {
        let d = File::open(dir).map_err(|e| Error::io(dir, e))?;
        self.sync_all(target, &d, dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_matching_operation_fails_once() {
        let inj = FaultInjector::new();
        inj.fail_nth(
            Some(FaultTarget::Wal),
            Some(FaultOp::Sync),
            2,
            FaultKind::Io,
        );
        let wal = |op| inj.check(FaultTarget::Wal, op);
        assert_eq!(inj.check(FaultTarget::Table, FaultOp::Sync), None);
        assert_eq!(wal(FaultOp::Write), None);
        assert_eq!(wal(FaultOp::Sync), None);
        assert_eq!(wal(FaultOp::Sync), Some(FaultKind::Io));
        assert_eq!(wal(FaultOp::Sync), None);
        assert_eq!(inj.injected(), 1);
        assert_eq!(inj.operations(), 5);
    }

    #[test]
    fn a_full_disk_fails_everything_until_healed_and_writes_half() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let mut file = File::create(&path).expect("create");
        let inj = FaultInjector::new();
        let faults = Faults::new(Some(inj.clone()));
        inj.fail_from_nth(None, None, 1, FaultKind::NoSpace);
        for _ in 0..3 {
            let err = faults
                .write_all(FaultTarget::Manifest, &mut file, &path, b"abcdef")
                .expect_err("disk is full");
            assert!(err.to_string().contains("No space left"), "{err}");
        }
        assert!(faults.sync_data(FaultTarget::Wal, &file, &path).is_err());
        assert_eq!(std::fs::read(&path).expect("read"), b"abcabcabc");
        inj.heal();
        faults
            .write_all(FaultTarget::Manifest, &mut file, &path, b"z")
            .expect("space came back");
        faults
            .sync_data(FaultTarget::Wal, &file, &path)
            .expect("sync");
        assert_eq!(inj.injected(), 4);
    }
}
