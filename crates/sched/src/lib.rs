//! Short scheduler time slices for the threads a client waits on: a crate of
//! its own (libc only) so the server, the engine and the load generator share
//! it without depending on one another.
//!
//! On two cores, an export that has just been fsynced competes for a core with
//! the flush and compaction threads, which run for as long as the kernel lets
//! them. Linux's fair scheduler (EEVDF, 6.6 and later) gives each thread a
//! time slice, by default 0.7 ms × (1 + log2 cores): 1.4 ms on two. Since 6.12
//! a thread may ask for a shorter one through `sched_setattr`'s
//! `sched_runtime`. A shorter slice gives the thread an earlier deadline, so
//! when it wakes it preempts a thread with a long slice instead of waiting for
//! that slice to end. Its share of the CPU (its weight, from its nice value)
//! does not change.
//!
//! [`use_short_slice`] asks for such a slice for the calling thread. The
//! server applies it to its runtime's threads (gRPC and HTTP handlers) and to
//! the WAL's sync thread. Threads inherit their creator's slice, and the
//! engine opens on a request thread, so the flush, compaction and trash
//! threads go back to the default ([`use_default_slice`]); [`spawn`] starts
//! a thread that way and returns once the thread has its slice. On a kernel
//! without custom slices the value is ignored; on other systems the call does
//! nothing. Measured in `docs/decisions/0027-short-time-slices.md`.
//!
//! The `imp` module, two system calls, is the crate's only `unsafe` code.

use std::time::Duration;

/// Shortest and longest slice the kernel accepts.
pub const SLICE_RANGE: (Duration, Duration) =
    (Duration::from_micros(100), Duration::from_millis(100));

/// Asks the scheduler for time slices of `slice` for the calling thread,
/// keeping its policy and nice value. Does nothing for a thread under a
/// real-time or deadline policy (someone chose that on purpose) or when
/// `slice` is zero. `slice` is clamped to [`SLICE_RANGE`].
pub fn use_short_slice(slice: Duration) -> std::io::Result<()> {
    if slice.is_zero() {
        return Ok(());
    }
    let slice = slice.clamp(SLICE_RANGE.0, SLICE_RANGE.1);
    imp::set_runtime(u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX))
}

/// Gives the calling thread the kernel's default slice back. Threads inherit
/// their creator's slice, so a background thread started from a request
/// thread (the engine opens on one) calls this first.
pub fn use_default_slice() {
    if let Err(e) = imp::set_runtime(0) {
        tracing::debug!(error = %e, "could not reset the thread's time slice");
    }
}

/// The slice a thread started by [`spawn`] takes before it runs its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slice {
    /// The kernel's default, whatever the creating thread had.
    Default,
    /// A short slice, as [`use_short_slice`] asks for (zero: the inherited one).
    Short(Duration),
}

/// Starts a thread that takes `slice` first and then runs `f`, and returns
/// only once the thread has taken it. Without the wait, whoever looks at the
/// thread's slice right after the spawn (a test reading `/proc`, an operator)
/// may see its creator's, and so may the first moments of its work when the
/// cores are busy.
pub fn spawn<F, T>(
    builder: std::thread::Builder,
    slice: Slice,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (taken_tx, taken_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let handle = builder.spawn(move || {
        match slice {
            Slice::Default => use_default_slice(),
            Slice::Short(slice) => {
                if let Err(e) = use_short_slice(slice) {
                    let thread = std::thread::current();
                    tracing::warn!(
                        thread = thread.name().unwrap_or("unnamed"),
                        error = %e,
                        "could not shorten the thread's time slice"
                    );
                }
            }
        }
        // The receiver waits below; a send fails only if it is gone.
        let _ = taken_tx.send(());
        f()
    })?;
    // Fails only if the thread ended before sending, and then it ran nothing.
    let _ = taken_rx.recv();
    Ok(handle)
}

/// The calling thread's slice as the kernel reports it, if it reports one
/// (kernels before custom slices report none).
pub fn current_slice() -> Option<Duration> {
    slice_of(0)
}

/// The slice of thread `tid` of any process (0: the calling thread), if the
/// kernel reports one.
pub fn slice_of(tid: u32) -> Option<Duration> {
    imp::get_attr(tid)
        .ok()
        .filter(|a| a.sched_runtime != 0)
        .map(|a| Duration::from_nanos(a.sched_runtime))
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod imp {
    /// `struct sched_attr`, first version (56 bytes), from `sched(7)`.
    #[repr(C)]
    #[derive(Debug, Default)]
    pub(super) struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        pub(super) sched_nice: i32,
        sched_priority: u32,
        pub(super) sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
        sched_util_min: u32,
        sched_util_max: u32,
    }

    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;

    pub(super) fn get_attr(tid: u32) -> std::io::Result<SchedAttr> {
        let mut attr = SchedAttr::default();
        let size = std::mem::size_of::<SchedAttr>() as u32;
        // SAFETY: the kernel writes at most `size` bytes into `attr`, which is
        // a live, properly aligned `repr(C)` value of that size; tid 0 is the
        // calling thread.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                tid,
                &mut attr as *mut SchedAttr,
                size,
                0,
            )
        };
        if rc == 0 {
            Ok(attr)
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Sets `sched_runtime` (0: the default slice) of the calling thread.
    pub(super) fn set_runtime(nanos: u64) -> std::io::Result<()> {
        let mut attr = get_attr(0)?;
        if attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH {
            return Ok(());
        }
        attr.size = std::mem::size_of::<SchedAttr>() as u32;
        attr.sched_flags = 0;
        attr.sched_runtime = nanos;
        // SAFETY: the kernel only reads `attr.size` bytes of `attr`, a live
        // `repr(C)` value; pid 0 is the calling thread.
        let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) struct SchedAttr {
        pub(super) sched_runtime: u64,
    }

    pub(super) fn get_attr(_tid: u32) -> std::io::Result<SchedAttr> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    pub(super) fn set_runtime(_nanos: u64) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Kernels before custom slices (Linux 6.12) report no slice and ignore
    /// the request, so a test has nothing to check there: it says so in a
    /// `skipped:` line on stderr and passes. Written to stderr itself, not
    /// with `eprintln!`, which the test harness swallows when a test passes.
    fn skipped() {
        use std::io::Write as _;
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("a time-slice test");
        let line = format!(
            "skipped: {test}: this kernel reports no time slice (custom slices need Linux 6.12)\n"
        );
        // One write, so the line is not cut by the harness's own output;
        // nothing to do if stderr is gone.
        let _ = std::io::stderr().write_all(line.as_bytes());
    }

    /// Runs `f` on a thread of its own, so the test thread keeps its slice.
    fn on_new_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("thread")
    }

    #[test]
    fn the_slice_asked_for_is_the_one_the_kernel_reports() {
        let (before, after) = on_new_thread(|| {
            let before = current_slice();
            use_short_slice(Duration::from_micros(250)).expect("sched_setattr");
            (before, current_slice())
        });
        if before.is_none() {
            return skipped();
        }
        assert_eq!(after, Some(Duration::from_micros(250)));
    }

    #[test]
    fn out_of_range_slices_are_clamped_and_zero_changes_nothing() {
        let (before, short, zero) = on_new_thread(|| {
            let before = current_slice();
            use_short_slice(Duration::from_nanos(1)).expect("sched_setattr");
            let short = current_slice();
            use_short_slice(Duration::ZERO).expect("zero");
            (before, short, current_slice())
        });
        if before.is_none() {
            return skipped();
        }
        assert_eq!(short, Some(SLICE_RANGE.0));
        assert_eq!(zero, short);
    }

    #[test]
    fn a_thread_started_by_a_short_slice_thread_can_go_back_to_the_default() {
        let (default, inherited, reset) = on_new_thread(|| {
            let default = current_slice();
            use_short_slice(Duration::from_micros(200)).expect("sched_setattr");
            std::thread::spawn(move || {
                let inherited = current_slice();
                use_default_slice();
                (default, inherited, current_slice())
            })
            .join()
            .expect("thread")
        });
        if default.is_none() {
            return skipped();
        }
        assert_eq!(inherited, Some(Duration::from_micros(200)), "inherited");
        assert_eq!(reset, default);
    }

    /// The slice of the thread of this process named `name`. One CI run did
    /// not find a live thread in one listing: `/proc/self/task` is read by
    /// position, and a listing can pass over a thread while other tests'
    /// threads start and end. The thread is looked for again until a
    /// deadline; its slice was taken before `spawn` returned either way.
    fn slice_of_named(name: &str) -> Option<Duration> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            for task in std::fs::read_dir("/proc/self/task").expect("/proc") {
                let task = task.expect("task");
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                if comm.trim() == name {
                    let tid = task.file_name().to_string_lossy().parse().expect("tid");
                    return slice_of(tid);
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no thread named {name}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn spawn_returns_once_the_new_thread_has_its_slice() {
        let (default, short, started_default) = on_new_thread(|| {
            let default = current_slice();
            use_short_slice(Duration::from_micros(200)).expect("sched_setattr");
            // Each thread holds its work until the checks are done, so the
            // slice read is the one taken before the work.
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let (go_tx2, go_rx2) = std::sync::mpsc::channel::<()>();
            let a = spawn(
                std::thread::Builder::new().name("slice-default".into()),
                Slice::Default,
                move || go_rx.recv().ok(),
            )
            .expect("spawn");
            let b = spawn(
                std::thread::Builder::new().name("slice-short".into()),
                Slice::Short(Duration::from_micros(400)),
                move || go_rx2.recv().ok(),
            )
            .expect("spawn");
            let got = (
                default,
                slice_of_named("slice-short"),
                slice_of_named("slice-default"),
            );
            drop((go_tx, go_tx2));
            a.join().expect("thread");
            b.join().expect("thread");
            got
        });
        if default.is_none() {
            return skipped();
        }
        assert_eq!(started_default, default, "default");
        assert_eq!(short, Some(Duration::from_micros(400)), "short");
    }

    #[test]
    #[allow(unsafe_code)]
    fn the_nice_value_is_kept() {
        let nice_after = on_new_thread(|| {
            // SAFETY: plain system calls on the calling thread.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) };
            use_short_slice(Duration::from_micros(300)).expect("sched_setattr");
            imp::get_attr(0).expect("getattr")
        });
        assert_eq!(nice_after.sched_nice, 5);
    }
}
