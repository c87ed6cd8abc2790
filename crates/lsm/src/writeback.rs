//! Paced writeback for the large files flush and compaction write.
//!
//! An fdatasync of the write-ahead log ends with a cache flush that waits for
//! every write the device has queued, whoever issued it. A sorted file written
//! into the page cache and fsynced once at its end queues all of its bytes at
//! that moment, and the WAL's next fsync (so the export that waits on it) sits
//! behind them: tens of milliseconds for a few megabytes on a virtual disk.
//! [`Writeback`] instead asks the kernel to start writing each [`STEP`] as soon
//! as it is written, so the device sees a file's bytes at the pace they are
//! produced and the final fsync finds little left to do. It does not wait for
//! the writes: waiting for each step gives the same export latency and holds
//! flushes up on the disk (`docs/decisions/0012-paced-writeback-and-stepped-deletes.md`).
//!
//! The calls are `sync_file_range(2)`, which is Linux only and needs `unsafe`
//! (it is a plain system call on a file descriptor the caller owns). Elsewhere
//! [`Writeback::wrote`] does nothing and the final fsync does all the work.
#![allow(unsafe_code)]

use std::fs::File;

/// Bytes handed to the kernel at a time.
pub(crate) const STEP: u64 = 1 << 20;

/// Where one file's writeback stands; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Writeback {
    /// Bytes below this have been handed to the kernel for writing.
    queued: u64,
}

impl Writeback {
    /// To be called after each write: once `len` (the bytes written to `file`
    /// so far) has grown by a [`STEP`] since the last hand-off, asks the
    /// kernel to start writing the new bytes.
    pub(crate) fn wrote(&mut self, file: &File, len: u64) -> std::io::Result<()> {
        if len < self.queued + STEP {
            return Ok(());
        }
        start_writing(file, self.queued, len)?;
        self.queued = len;
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn start_writing(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(nbytes)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return Ok(());
    };
    // SAFETY: sync_file_range reads no memory of ours; it only acts on the
    // open descriptor, which `file` keeps alive for the length of the call.
    let rc = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset,
            nbytes,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writing(_file: &File, _from: u64, _to: u64) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn hands_over_whole_steps_and_leaves_the_bytes_as_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let mut file = File::create(&path).expect("create");
        let mut wb = Writeback::default();
        let chunk = vec![7u8; (STEP / 3) as usize + 1];
        let mut len = 0u64;
        let mut handoffs = 0;
        for _ in 0..10 {
            file.write_all(&chunk).expect("write");
            len += chunk.len() as u64;
            let before = wb.queued;
            wb.wrote(&file, len).expect("writeback");
            if wb.queued != before {
                handoffs += 1;
                assert_eq!(wb.queued, len, "a hand-off covers every byte written");
            }
            assert!(len - wb.queued < STEP, "never a whole step left behind");
        }
        assert_eq!(handoffs, 3, "one hand-off per step of {STEP} bytes");
        drop(file);
        let mut back = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut back))
            .expect("read back");
        assert_eq!(back.len() as u64, len);
        assert!(back.iter().all(|&b| b == 7));
    }
}
