//! Sections of files' metrics cells kept inflated between queries.
//!
//! A dashboard asks the same metrics queries again every few seconds, and
//! each answer from cells read and inflated the same key lists and table
//! parts of the same files: inflating was about a quarter of the CPU of
//! Drilldown's rate panel on an hour of 85 M spans (docs/BENCHMARKS.md,
//! "Parts kept inflated and read in one pass"). A file never changes, so
//! what a query inflated is kept, bounded in bytes, and the next query
//! parses it from memory.
//!
//! A section is known by its file, the sidecar's inode (a rebuilt sidecar
//! is written to a new file and renamed over the old one, so its sections
//! are never taken for the old one's) and its offset in the sidecar, and a
//! kept body is given only to a reader whose section has the same checksum
//! and length.
//!
//! Past the bound, the least recently used sections go first, but never
//! one used since the query that wants room began: a query reading more
//! than the bound would otherwise push out, one after another, the
//! sections it read first, and every repeat of it would find nothing kept.
//! It keeps what fits instead, and its repeats find that much.
//!
//! Each file's index of sections, parsed and checked, is kept besides
//! (an eighth of the bytes): every query opens every file of its window,
//! and a file's index holds thousands of table parts. The indexes of files
//! no longer live go when the cache is told of them; past their share, a
//! file's index is read again at every query.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{
    dict::{Dict, KeyDict},
    format::Section,
};
use crate::index::HashMap;

/// Bytes an entry costs besides its body.
const ENTRY_BYTES: usize = 96;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    file: u64,
    inode: u64,
    offset: u64,
}

struct Entry {
    body: Arc<Vec<u8>>,
    crc: u32,
    used: u64,
}

#[derive(Default)]
struct Kept {
    entries: HashMap<Key, Entry>,
    bytes: usize,
    clock: u64,
}

/// Inflated cells sections, at most `bound` bytes of them, and the
/// dictionary of cell keys ([`KeyDict`]), which takes half the cache's
/// bytes.
pub struct SectionCache {
    kept: Mutex<Kept>,
    bound: usize,
    dict: KeyDict,
    indexes: Mutex<Indexes>,
    indexes_bound: usize,
}

/// Files' parsed indexes, by file and sidecar inode: where each starts in
/// its sidecar, and its sections.
type KeptIndex = (u64, Arc<[Section]>);

#[derive(Default)]
struct Indexes {
    by_file: HashMap<(u64, u64), KeptIndex>,
    bytes: usize,
}

fn index_bytes(sections: &[Section]) -> usize {
    std::mem::size_of_val(sections) + ENTRY_BYTES
}

/// Where a [`crate::index::cells::CellsFile`] (or a walk of a file's
/// search-index blocks, [`crate::index::FileIndex::block_parts_kept`])
/// keeps what it inflates: the cache, the file's ID and the sidecar's
/// inode, and the turn of the query reading it ([`SectionCache::turn`]).
#[derive(Clone)]
pub struct CacheRef {
    pub(super) cache: Arc<SectionCache>,
    pub(super) file: u64,
    pub(super) inode: u64,
    pub(super) turn: u64,
}

impl CacheRef {
    /// Where file `file`, whose sidecar has inode `inode`, keeps what the
    /// query of turn `turn` inflates.
    pub(crate) fn new(cache: Arc<SectionCache>, file: u64, inode: u64, turn: u64) -> CacheRef {
        CacheRef {
            cache,
            file,
            inode,
            turn,
        }
    }
}

impl SectionCache {
    /// A cache of `bytes` in all.
    pub fn new(bytes: usize) -> SectionCache {
        let dict = bytes / 2;
        let indexes = bytes / 8;
        SectionCache {
            kept: Mutex::default(),
            bound: bytes - dict - indexes,
            dict: KeyDict::new(dict),
            indexes: Mutex::default(),
            indexes_bound: indexes,
        }
    }

    /// The index kept for file `file` whose sidecar has inode `inode`.
    pub(super) fn index(&self, file: u64, inode: u64) -> Option<KeptIndex> {
        self.indexes.lock().by_file.get(&(file, inode)).cloned()
    }

    /// Keeps the index of file `file` whose sidecar has inode `inode`, if
    /// it fits in their share.
    pub(super) fn keep_index(&self, file: u64, inode: u64, start: u64, sections: Arc<[Section]>) {
        let size = index_bytes(&sections);
        let mut kept = self.indexes.lock();
        if kept.bytes + size > self.indexes_bound || kept.by_file.contains_key(&(file, inode)) {
            return;
        }
        kept.bytes += size;
        kept.by_file.insert((file, inode), (start, sections));
    }

    /// The dictionary a query numbers its sources' keys with.
    pub fn dict(&self) -> Arc<Dict> {
        self.dict.current()
    }

    /// A query's turn, taken when it begins: the sections it uses are not
    /// pushed out to make room for the ones it reads later.
    pub fn turn(&self) -> u64 {
        let mut kept = self.kept.lock();
        kept.clock += 1;
        kept.clock
    }

    /// Bytes kept, the current dictionary's included.
    pub fn bytes(&self) -> usize {
        self.sections_bytes() + self.dict_bytes()
    }

    /// Bytes of the sections kept, and of the files' indexes.
    pub fn sections_bytes(&self) -> usize {
        self.kept.lock().bytes + self.indexes.lock().bytes
    }

    /// Bytes of the current dictionary.
    pub fn dict_bytes(&self) -> usize {
        self.dict.bytes()
    }

    /// Sections kept.
    pub fn len(&self) -> usize {
        self.kept.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the sections, and the numbers of the keys, of the files
    /// `live` refuses.
    pub fn retain(&self, live: impl Fn(u64) -> bool) {
        self.dict.retain(&live);
        let mut indexes = self.indexes.lock();
        let Indexes { by_file, bytes } = &mut *indexes;
        by_file.retain(|&(file, _), (_, sections)| {
            let keep = live(file);
            if !keep {
                *bytes -= index_bytes(sections);
            }
            keep
        });
        drop(indexes);
        let mut kept = self.kept.lock();
        let Kept { entries, bytes, .. } = &mut *kept;
        entries.retain(|k, e| {
            let keep = live(k.file);
            if !keep {
                *bytes -= e.body.len() + ENTRY_BYTES;
            }
            keep
        });
    }

    /// The body kept for the section at `offset` of `at`'s sidecar, if its
    /// checksum is `crc` and its length `len`.
    pub(crate) fn get(
        &self,
        at: &CacheRef,
        offset: u64,
        crc: u32,
        len: u32,
    ) -> Option<Arc<Vec<u8>>> {
        let key = Key {
            file: at.file,
            inode: at.inode,
            offset,
        };
        let mut kept = self.kept.lock();
        kept.clock += 1;
        let now = kept.clock;
        let e = kept.entries.get_mut(&key)?;
        if e.crc != crc || e.body.len() != len as usize {
            return None;
        }
        e.used = now;
        Some(e.body.clone())
    }

    /// Keeps `body`, the section at `offset` of `at`'s sidecar, if it fits
    /// once the sections unused since `at`'s turn are pushed out (least
    /// recently used first) as needed.
    pub(crate) fn put(&self, at: &CacheRef, offset: u64, crc: u32, body: Arc<Vec<u8>>) {
        let size = body.len() + ENTRY_BYTES;
        if size > self.bound {
            return;
        }
        let key = Key {
            file: at.file,
            inode: at.inode,
            offset,
        };
        let mut kept = self.kept.lock();
        if kept.entries.contains_key(&key) {
            return;
        }
        if kept.bytes + size > self.bound {
            let mut old: Vec<(u64, Key, usize)> = kept
                .entries
                .iter()
                .filter(|(_, e)| e.used < at.turn)
                .map(|(k, e)| (e.used, *k, e.body.len() + ENTRY_BYTES))
                .collect();
            let freeable: usize = old.iter().map(|o| o.2).sum();
            if kept.bytes - freeable + size > self.bound {
                return;
            }
            old.sort_unstable_by_key(|o| o.0);
            for (_, k, bytes) in old {
                if kept.bytes + size <= self.bound {
                    break;
                }
                kept.entries.remove(&k);
                kept.bytes -= bytes;
            }
        }
        kept.clock += 1;
        let used = kept.clock;
        kept.bytes += size;
        kept.entries.insert(key, Entry { body, crc, used });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(cache: &Arc<SectionCache>, file: u64, inode: u64, turn: u64) -> CacheRef {
        CacheRef {
            cache: cache.clone(),
            file,
            inode,
            turn,
        }
    }

    fn body(len: usize, byte: u8) -> Arc<Vec<u8>> {
        Arc::new(vec![byte; len])
    }

    /// A kept body is given back for its file, sidecar and offset, and
    /// only to a reader whose section has its checksum and length.
    #[test]
    fn a_kept_section_is_given_only_for_the_same_section() {
        let cache = Arc::new(SectionCache::new(1 << 20));
        let turn = cache.turn();
        let a = at(&cache, 1, 10, turn);
        cache.put(&a, 64, 7, body(100, 1));
        assert_eq!(cache.get(&a, 64, 7, 100).as_deref(), Some(&vec![1; 100]));
        assert!(cache.get(&a, 64, 8, 100).is_none(), "another checksum");
        assert!(cache.get(&a, 64, 7, 99).is_none(), "another length");
        assert!(cache.get(&a, 65, 7, 100).is_none(), "another offset");
        assert!(cache.get(&at(&cache, 2, 10, turn), 64, 7, 100).is_none());
        // A rebuilt sidecar is a new file.
        assert!(cache.get(&at(&cache, 1, 11, turn), 64, 7, 100).is_none());
        assert_eq!(cache.bytes(), 100 + ENTRY_BYTES);
        cache.retain(|file| file != 1);
        assert!(cache.is_empty() && cache.bytes() == 0);
    }

    /// Past the bound, the least recently used sections go first; a query
    /// reading more than the bound keeps what it read first rather than
    /// pushing it out, so its repeat finds that much.
    #[test]
    fn past_its_bound_the_cache_keeps_what_the_query_read_first() {
        let size = 1000;
        // Three sections' room, once the dictionary's half and the
        // indexes' eighth are taken.
        let cache = Arc::new(SectionCache::new(8 * (size + ENTRY_BYTES)));
        // One query reads five sections: the first three are kept.
        let first = at(&cache, 1, 1, cache.turn());
        for offset in 0..5 {
            cache.put(&first, offset, 0, body(size, offset as u8));
        }
        let kept = |r: &CacheRef| {
            (0..5)
                .filter(|&o| cache.get(r, o, 0, size as u32).is_some())
                .count()
        };
        assert_eq!(cache.len(), 3);
        // Its repeat finds them, and again cannot push them out.
        let again = at(&cache, 1, 1, cache.turn());
        assert_eq!(kept(&again), 3);
        cache.put(&again, 3, 0, body(size, 3));
        assert_eq!(kept(&again), 3);
        assert!(cache.get(&again, 3, 0, size as u32).is_none());
        // A later query pushes out the least recently used of them.
        let later = at(&cache, 1, 1, cache.turn());
        assert!(cache.get(&later, 0, 0, size as u32).is_some());
        cache.put(&later, 4, 0, body(size, 4));
        assert!(cache.get(&later, 4, 0, size as u32).is_some());
        assert!(cache.get(&later, 0, 0, size as u32).is_some());
        assert_eq!(cache.len(), 3);
        assert!(cache.bytes() <= 3 * (size + ENTRY_BYTES));
        // A section larger than the bound is never kept.
        cache.put(&at(&cache, 2, 1, cache.turn()), 0, 0, body(4 * size, 9));
        assert!(cache.get(&later, 0, 0, size as u32).is_some());
    }
}
