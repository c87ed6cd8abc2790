//! Read-only memory maps of sorted span files, one of the two modules of the
//! crate that need `unsafe` (the other is [`crate::writeback`]).
//!
//! Mapping a file is unsafe because the compiler cannot see other writers: if
//! the bytes under a `&[u8]` changed, or the file shrank, a reader would see a
//! torn value or take a `SIGBUS`. tracedb only maps files that can no longer
//! change: a sorted span file is written under a temporary name, fsynced, and
//! renamed into place, and from then on the engine never opens it for writing
//! or truncates it. Deleting it (after compaction or by retention) unlinks the
//! name only; the kernel keeps the pages of a mapped file until the last
//! mapping goes away, so readers holding a [`Mmap`] keep valid bytes.
#![allow(unsafe_code)]

use std::{fs::File, ops::Deref, path::Path};

use crate::error::{Error, Result};

/// An immutable file mapped read-only into memory.
#[derive(Debug)]
pub(crate) struct Mmap {
    map: memmap2::Mmap,
}

impl Mmap {
    /// Maps the whole of the file at `path`.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the file is a finished, renamed-into-place sorted span file.
        // Nothing in tracedb writes to or truncates such a file, so the mapped
        // bytes cannot change or disappear while this mapping exists; unlinking
        // it leaves the mapping valid (see the module docs). memmap2 maps an
        // empty file as an empty slice.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        Ok(Mmap { map })
    }

    /// The mapped bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.map
    }
}

/// So a map can own the bytes of a [`bytes::Bytes`] (an upload's body).
impl AsRef<[u8]> for Mmap {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Mmap {
    /// Asks the kernel to start reading the pages under `range` from the
    /// disk, for a read that will follow; advice only, so failures are
    /// ignored.
    pub(crate) fn will_need(&self, range: std::ops::Range<usize>) {
        let end = range.end.min(self.map.len());
        if range.start < end {
            let advice = memmap2::Advice::WillNeed;
            if let Err(e) = self
                .map
                .advise_range(advice, range.start, end - range.start)
            {
                tracing::debug!(error = %e, "madvise(WILLNEED) on a sorted file");
            }
        }
    }

    /// Takes the pages under `range` out of the process's resident set: a
    /// scan that has decoded them will not read them again. They stay in the
    /// page cache, and a later read maps them in again. Without this, a
    /// compaction's inputs stayed resident (counted in RSS) until the files
    /// were unmapped, 100-200 MB during a deep merge.
    pub(crate) fn release(&self, range: std::ops::Range<usize>) {
        let end = range.end.min(self.map.len());
        if range.start >= end {
            return;
        }
        // SAFETY: `MADV_DONTNEED` on a read-only file mapping only drops the
        // page-table entries; the next access maps the same file bytes again.
        // The file never changes (module docs), so every `&[u8]` into the map
        // stays valid and reads the same bytes.
        let advised = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                range.start,
                end - range.start,
            )
        };
        if let Err(e) = advised {
            tracing::debug!(error = %e, "madvise(DONTNEED) on a sorted file");
        }
    }
}

impl Deref for Mmap {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident KiB of the mapping that starts at `map`'s first byte, from
    /// `/proc/self/smaps`.
    fn resident_kib(map: &Mmap) -> usize {
        let start = map.as_bytes().as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut ours = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or_default();
            if let Some((from, to)) = first.split_once('-') {
                if let (Ok(from), Ok(_)) = (
                    usize::from_str_radix(from, 16),
                    usize::from_str_radix(to, 16),
                ) {
                    ours = from == start;
                    continue;
                }
            }
            if let Some(kib) = line.strip_prefix("Rss:").filter(|_| ours) {
                return kib
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .expect("kB");
            }
        }
        panic!("mapping not in /proc/self/smaps");
    }

    #[test]
    fn released_pages_leave_the_resident_set_and_read_the_same_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f.sst");
        let bytes: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        let map = Mmap::open(&path).expect("map");
        let sum = |m: &Mmap| m.as_bytes().iter().map(|&b| u64::from(b)).sum::<u64>();
        let expected = bytes.iter().map(|&b| u64::from(b)).sum::<u64>();
        assert_eq!(sum(&map), expected);
        let touched = resident_kib(&map);
        assert!(
            touched >= 7 << 10,
            "{touched} KiB resident after a full read"
        );
        map.release(0..map.len());
        let released = resident_kib(&map);
        assert!(released < 1 << 10, "{released} KiB still resident");
        assert_eq!(sum(&map), expected, "the bytes read back the same");
    }
}
