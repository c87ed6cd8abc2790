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

impl Deref for Mmap {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}
