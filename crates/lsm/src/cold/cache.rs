//! The block cache: data blocks of remote files, fetched once and kept on
//! local disk (`DATA_DIR/cache/`) up to a byte cap, least recently used out.
//!
//! A block is a file of its own, `{file:020}-{offset:016x}.blk`, written to
//! a temporary name and renamed, never fsynced: the cache is derived data,
//! emptied at every start. Its bytes are checked by the block's own
//! checksum when read; a cached block that fails it is dropped and fetched
//! again (`remote::RemoteFile::read_block`).

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    path::PathBuf,
    sync::atomic::{AtomicU64, Ordering},
};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// A block: (file ID, offset in the file).
type BlockKey = (u64, u64);

#[derive(Default)]
struct State {
    /// Each block's length and last use.
    blocks: HashMap<BlockKey, (u64, u64)>,
    /// Blocks by last use, oldest first.
    by_use: BTreeMap<u64, BlockKey>,
    bytes: u64,
    tick: u64,
}

/// The cache of one store's remote blocks.
pub struct BlockCache {
    dir: PathBuf,
    cap: u64,
    state: Mutex<State>,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockCache({}, {} bytes)", self.dir.display(), self.cap)
    }
}

impl BlockCache {
    /// An empty cache in `dir` of at most `cap` bytes (0: none kept);
    /// whatever `dir` held is removed.
    pub fn open(dir: PathBuf, cap: u64) -> Result<BlockCache> {
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&dir, e)),
        }
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(BlockCache {
            dir,
            cap,
            state: Mutex::new(State::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// A cache that keeps nothing (and touches no disk).
    pub fn none() -> BlockCache {
        BlockCache {
            dir: PathBuf::new(),
            cap: 0,
            state: Mutex::new(State::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn path(&self, (file, offset): BlockKey) -> PathBuf {
        self.dir.join(format!("{file:020}-{offset:016x}.blk"))
    }

    /// Bytes of the blocks held.
    pub fn bytes(&self) -> u64 {
        self.state.lock().bytes
    }

    /// The cached block at `offset` of file `file`, if held.
    pub fn get(&self, file: u64, offset: u64) -> Option<Vec<u8>> {
        let key = (file, offset);
        {
            let mut s = self.state.lock();
            let Some(&(_, used)) = s.blocks.get(&key) else {
                drop(s);
                self.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            s.tick += 1;
            let tick = s.tick;
            s.by_use.remove(&used);
            s.by_use.insert(tick, key);
            if let Some(entry) = s.blocks.get_mut(&key) {
                entry.1 = tick;
            }
        }
        match fs::read(self.path(key)) {
            Ok(bytes) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(bytes)
            }
            Err(_) => {
                self.forget(file, offset);
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Keeps `bytes` as the block at `offset` of file `file`, dropping the
    /// least recently used blocks past the cap. Failures only cost a later
    /// fetch, so they are logged, not returned.
    pub fn put(&self, file: u64, offset: u64, bytes: &[u8]) {
        let len = bytes.len() as u64;
        if len > self.cap || self.cap == 0 {
            return;
        }
        let key = (file, offset);
        let path = self.path(key);
        let tmp = path.with_extension("tmp");
        if let Err(e) = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, &path)) {
            tracing::warn!(file = %path.display(), error = %e, "caching a remote block");
            let _ = fs::remove_file(&tmp);
            return;
        }
        let evicted = {
            let mut s = self.state.lock();
            s.tick += 1;
            let tick = s.tick;
            if let Some((old_len, used)) = s.blocks.insert(key, (len, tick)) {
                s.by_use.remove(&used);
                s.bytes -= old_len;
            }
            s.by_use.insert(tick, key);
            s.bytes += len;
            let mut evicted = Vec::new();
            while s.bytes > self.cap {
                let Some((_, old)) = s.by_use.pop_first() else {
                    break;
                };
                if let Some((old_len, _)) = s.blocks.remove(&old) {
                    s.bytes -= old_len;
                }
                evicted.push(old);
            }
            evicted
        };
        for old in evicted {
            let _ = fs::remove_file(self.path(old));
        }
    }

    /// Drops the cached block at `offset` of file `file`.
    pub fn forget(&self, file: u64, offset: u64) {
        let key = (file, offset);
        let removed = {
            let mut s = self.state.lock();
            match s.blocks.remove(&key) {
                Some((len, used)) => {
                    s.by_use.remove(&used);
                    s.bytes -= len;
                    true
                }
                None => false,
            }
        };
        if removed {
            let _ = fs::remove_file(self.path(key));
        }
    }

    /// Drops every cached block of file `file` (deleted from the store).
    pub fn forget_file(&self, file: u64) {
        let offsets: Vec<u64> = {
            let s = self.state.lock();
            s.blocks
                .keys()
                .filter(|k| k.0 == file)
                .map(|k| k.1)
                .collect()
        };
        for offset in offsets {
            self.forget(file, offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_blocks_leave_first_and_the_cap_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = BlockCache::open(dir.path().join("cache"), 250).expect("open");
        cache.put(1, 0, &[1; 100]);
        cache.put(1, 100, &[2; 100]);
        assert_eq!(cache.get(1, 0), Some(vec![1; 100]), "1/0 is now the newest");
        cache.put(2, 0, &[3; 100]);
        assert_eq!(cache.bytes(), 200);
        assert_eq!(cache.get(1, 100), None, "the least recently used went");
        assert_eq!(cache.get(1, 0), Some(vec![1; 100]));
        assert_eq!(cache.get(2, 0), Some(vec![3; 100]));
        cache.put(3, 0, &[4; 300]);
        assert_eq!(cache.get(3, 0), None, "a block over the cap is not kept");
        cache.forget_file(1);
        assert_eq!(cache.get(1, 0), None);
        assert_eq!(cache.bytes(), 100);
        let files = fs::read_dir(dir.path().join("cache")).expect("dir").count();
        assert_eq!(files, 1, "only 2/0 is left on disk");
        let reopened = BlockCache::open(dir.path().join("cache"), 250).expect("reopen");
        assert_eq!(reopened.get(2, 0), None, "a start empties the cache");
    }
}
