//! Asking the kernel to read a file's bytes ahead of a search that will read
//! them: a cold search opens the newest index block of every file in its
//! window, one after another, and each read waits on the disk in turn.
//! [`will_need`] lets the kernel fetch them all at once while the search
//! goes on; on pages already cached it costs a system call.
//!
//! The call is `posix_fadvise(2)` with `POSIX_FADV_WILLNEED`, which needs
//! `unsafe` (a plain system call on a file descriptor the caller owns). It is
//! advice: a failure is ignored, and the read that follows is what counts.
#![allow(unsafe_code)]

use std::fs::File;

/// Asks the kernel to start reading `len` bytes of `file` from `offset`.
#[cfg(target_os = "linux")]
pub(crate) fn will_need(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: posix_fadvise reads no memory of ours; it only acts on the
    // open descriptor, which `file` keeps alive for the length of the call.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED);
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn will_need(_file: &File, _offset: u64, _len: u64) {}
