//! Paced deletion of the files the engine no longer needs: WAL segments once
//! flushed, sorted files and their sidecars once compacted away or expired.
//!
//! On a file system that discards (TRIMs) freed blocks, as ext4 mounted with
//! `-o discard` does, unlinking a 64 MiB file makes the next journal commit
//! wait for the discard of all of it, and the WAL's next fdatasync, which must
//! commit the segment's new length, waits with it: 50 to 150 ms on the
//! development machine, taken by every export in flight. [`Trash`] instead
//! renames a file into `{data_dir}/trash` (cheap: no block is freed) and a
//! thread shortens it by [`STEP`] every [`PAUSE`] before unlinking what is
//! left, so no commit holds more than a step of freed blocks. Measured beside
//! a writer fdatasyncing 64 KiB every 7 ms: whole-file unlinks put its p99.9 at
//! 42 ms and its maximum at 147 ms; 4 MiB steps 10 ms apart, 5.1 ms and 6 ms.
//!
//! When more than [`HURRY_BYTES`] wait, or the trash is closing, files go at
//! once: disk space matters more than a tail then. The thread owns no state
//! the engine needs: anything left in the directory after a crash is queued
//! again by the next [`Trash::open`].

use std::{
    fs::{self, File},
    io,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Bytes freed at a time.
pub const STEP: u64 = 4 << 20;

/// Wait between steps: at most 400 MiB/s freed while paced.
pub const PAUSE: Duration = Duration::from_millis(10);

/// Past this many bytes waiting, files are deleted without pauses.
pub const HURRY_BYTES: u64 = 1 << 30;

/// Deletes files a step at a time on a thread of its own; see the module docs.
#[derive(Debug)]
pub struct Trash {
    dir: PathBuf,
    tx: Sender<Job>,
    /// Bytes queued and not yet freed.
    backlog: Arc<AtomicU64>,
    /// Set by [`Trash::close`]: later files are removed at once, by the caller.
    closed: Arc<AtomicBool>,
    /// Makes each name in the trash unique.
    next: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
enum Job {
    Delete(PathBuf, u64),
    Close,
}

impl Trash {
    /// Creates `{data_dir}/trash` if needed, starts the deleting thread, and
    /// queues whatever an earlier run left there.
    pub fn open(data_dir: &Path) -> Result<Arc<Trash>> {
        let dir = crate::layout::trash_dir(data_dir);
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let backlog = Arc::new(AtomicU64::new(0));
        let closed = Arc::new(AtomicBool::new(false));
        let thread = {
            let (backlog, closed) = (backlog.clone(), closed.clone());
            tracedb_sched::spawn(
                std::thread::Builder::new().name("tracedb-trash".into()),
                tracedb_sched::Slice::Default,
                move || run(&rx, &backlog, &closed),
            )
            .map_err(|e| Error::io(&dir, e))?
        };
        let trash = Arc::new(Trash {
            dir,
            tx,
            backlog,
            closed,
            next: AtomicU64::new(0),
            thread: Mutex::new(Some(thread)),
        });
        let mut leftovers = 0;
        for entry in fs::read_dir(&trash.dir).map_err(|e| Error::io(&trash.dir, e))? {
            let entry = entry.map_err(|e| Error::io(&trash.dir, e))?;
            let len = entry.metadata().map_or(0, |m| m.len());
            trash.queue(entry.path(), len);
            leftovers += 1;
        }
        if leftovers > 0 {
            tracing::info!(
                files = leftovers,
                "deleting files an earlier run left in the trash"
            );
        }
        Ok(trash)
    }

    /// Deletes `path`: moves it into the trash now (from then on it is gone
    /// from where it was) and frees its blocks in the background. A file
    /// already gone is not an error. Falls back to unlinking at once when the
    /// trash is closed or the rename fails.
    pub fn delete(&self, path: &Path) -> io::Result<()> {
        if !self.closed.load(Ordering::Acquire) {
            let len = match fs::metadata(path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let name = path.file_name().map_or_else(
                || format!("{n}"),
                |f| format!("{}-{n}-{}", std::process::id(), f.to_string_lossy()),
            );
            let to = self.dir.join(name);
            match fs::rename(path, &to) {
                Ok(()) => {
                    self.queue(to, len);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => {
                    tracing::debug!(file = %path.display(), error = %e, "moving to the trash; deleting at once");
                }
            }
        }
        match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Bytes waiting to be freed (tests only so far; a gauge on /metrics
    /// would be its first user outside them).
    #[cfg(test)]
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog.load(Ordering::Acquire)
    }

    /// Deletes everything still queued without pauses and stops the thread.
    /// Files given to [`Trash::delete`] afterwards are unlinked at once.
    /// Idempotent.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let Some(thread) = self.thread.lock().take() else {
            return;
        };
        // The receiver lives as long as the thread, which is still running.
        let _ = self.tx.send(Job::Close);
        if thread.join().is_err() {
            tracing::error!("trash thread panicked");
        }
    }

    fn queue(&self, path: PathBuf, len: u64) {
        self.backlog.fetch_add(len, Ordering::AcqRel);
        if let Err(e) = self.tx.send(Job::Delete(path, len)) {
            // The thread is gone (closed): delete here.
            if let Job::Delete(path, len) = e.into_inner() {
                let _ = fs::remove_file(&path);
                self.backlog.fetch_sub(len, Ordering::AcqRel);
            }
        }
    }
}

impl Drop for Trash {
    fn drop(&mut self) {
        self.close();
    }
}

/// Unlinks `path` now, or through `trash` when there is one.
pub fn delete(trash: Option<&Trash>, path: &Path) -> io::Result<()> {
    match trash {
        Some(t) => t.delete(path),
        None => fs::remove_file(path),
    }
}

fn run(rx: &Receiver<Job>, backlog: &AtomicU64, closed: &AtomicBool) {
    while let Ok(job) = rx.recv() {
        match job {
            Job::Close => break,
            Job::Delete(path, len) => {
                let hurry = || {
                    closed.load(Ordering::Acquire) || backlog.load(Ordering::Acquire) > HURRY_BYTES
                };
                if let Err(e) = free(&path, hurry) {
                    if e.kind() != io::ErrorKind::NotFound {
                        tracing::warn!(file = %path.display(), error = %e, "deleting a file in the trash");
                    }
                }
                backlog.fetch_sub(len, Ordering::AcqRel);
            }
        }
    }
    for job in rx.try_iter() {
        if let Job::Delete(path, len) = job {
            let _ = fs::remove_file(&path);
            backlog.fetch_sub(len, Ordering::AcqRel);
        }
    }
}

/// Shortens the file at `path` a [`STEP`] at a time, a [`PAUSE`] apart
/// unless `hurry()` says otherwise, then unlinks it.
fn free(path: &Path, hurry: impl Fn() -> bool) -> io::Result<()> {
    {
        let file = File::options().write(true).open(path)?;
        let mut len = file.metadata()?.len();
        while len > STEP && !hurry() {
            len -= STEP;
            file.set_len(len)?;
            std::thread::sleep(PAUSE);
        }
    }
    fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn file(path: &Path, len: u64) {
        let f = File::create(path).expect("create");
        f.set_len(len).expect("set_len");
    }

    /// Waits (bounded) for the trash to empty; false if it never did.
    fn drained(trash: &Trash) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let empty = fs::read_dir(&trash.dir).expect("list").next().is_none();
            if empty && trash.backlog_bytes() == 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn a_deleted_file_leaves_its_place_at_once_and_the_trash_soon() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trash = Trash::open(dir.path()).expect("open");
        let victim = crate::layout::table_path(dir.path(), 7);
        file(&victim, 3 * STEP + 5);
        trash.delete(&victim).expect("delete");
        assert!(
            !victim.exists(),
            "gone from its directory when delete returns"
        );
        assert!(drained(&trash), "the trash empties");
        // Deleting what is not there is not an error.
        trash.delete(&victim).expect("delete again");
    }

    #[test]
    fn leftovers_of_an_earlier_run_are_deleted_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trash_dir = crate::layout::trash_dir(dir.path());
        fs::create_dir_all(&trash_dir).expect("mkdir");
        for i in 0..3 {
            file(
                &trash_dir.join(format!("1-{i}-00000000000000000001.wal")),
                STEP + i,
            );
        }
        let trash = Trash::open(dir.path()).expect("open");
        assert!(drained(&trash), "the leftovers are deleted");
    }

    #[test]
    fn close_deletes_what_is_queued_and_later_deletes_happen_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trash = Trash::open(dir.path()).expect("open");
        for i in 0..4 {
            let p = dir.path().join(format!("f{i}"));
            file(&p, 16 * STEP);
            trash.delete(&p).expect("delete");
        }
        trash.close();
        assert_eq!(
            fs::read_dir(&trash.dir).expect("list").count(),
            0,
            "close leaves nothing queued behind"
        );
        assert_eq!(trash.backlog_bytes(), 0);
        let late = dir.path().join("late");
        file(&late, STEP);
        trash.delete(&late).expect("delete after close");
        assert!(!late.exists());
        trash.close();
    }

    #[test]
    fn a_file_is_freed_a_step_at_a_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f");
        file(&p, 2 * STEP + 1);
        let seen = std::cell::RefCell::new(Vec::new());
        free(&p, || {
            seen.borrow_mut()
                .push(fs::metadata(&p).expect("still there").len());
            false
        })
        .expect("free");
        assert!(!p.exists());
        assert_eq!(*seen.borrow(), vec![2 * STEP + 1, STEP + 1]);
    }
}
