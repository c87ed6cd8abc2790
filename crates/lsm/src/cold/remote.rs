//! A sorted file in the object store, as a table reads it: data blocks by
//! ranged GETs, through the block cache.

use std::{ops::Range, sync::Arc};

use bytes::Bytes;

use super::{cache::BlockCache, Bucket};
use crate::{error::Result, layout};

/// Where a remote file's blocks come from.
#[derive(Debug, Clone)]
pub struct RemoteFile {
    bucket: Bucket,
    id: u64,
    cache: Arc<BlockCache>,
}

impl RemoteFile {
    pub fn new(bucket: Bucket, id: u64, cache: Arc<BlockCache>) -> Self {
        RemoteFile { bucket, id, cache }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// The block at `range` of the file, given to `decode`: from the cache
    /// when it holds the block and the bytes pass `decode`'s checks (a
    /// cached block that fails them is dropped), else with one ranged GET,
    /// cached once it passed.
    pub fn read_block<T>(
        &self,
        range: Range<u64>,
        decode: impl Fn(&[u8]) -> Result<T>,
    ) -> Result<T> {
        if let Some(bytes) = self.cache.get(self.id, range.start) {
            match decode(&bytes) {
                Ok(t) => return Ok(t),
                Err(e) if e.is_corruption() => {
                    tracing::warn!(file = self.id, offset = range.start, error = %e, "a cached block failed its checks; fetching it again");
                    self.cache.forget(self.id, range.start);
                }
                Err(e) => return Err(e),
            }
        }
        let bytes = self.fetch(range.clone())?;
        let t = decode(&bytes)?;
        self.cache.put(self.id, range.start, &bytes);
        Ok(t)
    }

    /// Drops the file's cached blocks (the file was deleted).
    pub fn forget_cached(&self) {
        self.cache.forget_file(self.id);
    }

    /// Bytes `range` of the file with one ranged GET, not cached.
    pub fn fetch(&self, range: Range<u64>) -> Result<Bytes> {
        self.bucket.get_range(&layout::object_table(self.id), range)
    }
}
