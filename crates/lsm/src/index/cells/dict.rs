//! Cell keys numbered once for every file and query ([`KeyDict`]).
//!
//! A query from cells numbers each source's keys to find the verdict it
//! reached on each (`Counter::id` in the query crate). By span name that is
//! nearly a key per span: about 27 k named keys in each of 47 files on an
//! hour of 85 M spans, hashed and looked up at every query, half of the
//! query's CPU, and reading the key lists a fifth more. A dictionary numbers
//! each distinct key once, and keeps each file's list of numbers, so a
//! query numbers a file's keys without reading its key list.
//!
//! The numbers of one [`Dict`] never change: a query takes the current one
//! when it begins and numbers every source with it. A file's numbers are
//! kept while they fit the dictionary's bound (the others' lists are
//! numbered again at each query); once the keys themselves pass it, the
//! next query is given a new, empty dictionary, and queries still using
//! the old one keep it alive until they end.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{format::decode_key, CellKey, Family, KeyList, Parent};
use crate::index::HashMap;

/// Bytes a key or a file's numbers cost besides their own.
const ENTRY_BYTES: usize = 64;

/// A file's key list, as its numbers are kept: the file, the sidecar's
/// inode, the family, and the list's checksum and length (a rebuilt sidecar
/// is a new file, and a list that differs is never taken for another).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ListId {
    pub(super) file: u64,
    pub(super) inode: u64,
    pub(super) family: Family,
    pub(super) crc: u32,
    pub(super) len: u32,
}

#[derive(Default)]
struct Numbers {
    ids: HashMap<Box<[u8]>, u32>,
    /// Each number's key, as a key list holds it, and its family.
    keys: Vec<(Family, Box<[u8]>)>,
    /// Each number's key without its name, numbered when first asked
    /// (`u32::MAX` until then).
    unnamed: Vec<u32>,
    files: HashMap<ListId, Arc<[u32]>>,
    bytes: usize,
    full: bool,
}

impl Numbers {
    /// The number of the key of `family` whose bytes are `bytes`.
    fn intern(&mut self, family: Family, bytes: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(bytes) {
            return id;
        }
        let id = self.keys.len() as u32;
        self.ids.insert(bytes.into(), id);
        self.keys.push((family, bytes.into()));
        self.unnamed.push(u32::MAX);
        self.bytes += 2 * bytes.len() + ENTRY_BYTES;
        id
    }
}

/// One numbering of cell keys ([`KeyDict::current`]).
pub struct Dict {
    numbers: Mutex<Numbers>,
    bound: usize,
}

impl Dict {
    fn new(bound: usize) -> Dict {
        Dict {
            numbers: Mutex::default(),
            bound,
        }
    }

    /// The numbers of `list`'s keys, in its order; new keys are numbered.
    pub fn number(&self, list: &KeyList<'_>) -> Arc<[u32]> {
        let mut n = self.numbers.lock();
        let n = &mut *n;
        let out: Vec<u32> = (0..list.len())
            .map(|i| n.intern(list.family(), list.bytes(i)))
            .collect();
        n.full |= n.bytes > self.bound;
        out.into()
    }

    /// The number of the key numbered `id` without its name (`id` itself
    /// for a key without one). A query whose conditions read no name
    /// gives a key the verdict it gives the key without its name.
    ///
    /// # Panics
    /// If no key has the number `id` in this dictionary.
    pub fn without_name(&self, id: u32) -> u32 {
        let mut n = self.numbers.lock();
        let at = id as usize;
        if n.unnamed[at] != u32::MAX {
            return n.unnamed[at];
        }
        let unnamed = match &n.keys[at] {
            (Family::Unnamed | Family::Attr, _) => id,
            (family @ (Family::Named | Family::AnyService), bytes) => {
                let key = decode_key(bytes, *family).without_name();
                let list = KeyList::of(&[key], Family::Unnamed);
                n.intern(Family::Unnamed, list.bytes(0))
            }
        };
        n.unnamed[at] = unnamed;
        n.full |= n.bytes > self.bound;
        unnamed
    }

    /// The numbers kept for the key list `list`, if any.
    pub(super) fn file(&self, list: &ListId) -> Option<Arc<[u32]>> {
        self.numbers.lock().files.get(list).cloned()
    }

    /// Keeps `ids` as the numbers of the key list `list`, if they fit the
    /// dictionary's bound. A list that does not fit is numbered again by
    /// each query that reads it; the dictionary is still used (only its
    /// keys growing past the bound has it replaced).
    pub(super) fn keep_file(&self, list: ListId, ids: Arc<[u32]>) {
        let mut n = self.numbers.lock();
        let size = 4 * ids.len() + ENTRY_BYTES;
        if n.full || n.bytes + size > self.bound {
            return;
        }
        if n.files.insert(list, ids).is_none() {
            n.bytes += size;
        }
    }

    /// Forgets the numbers kept for the files `live` refuses.
    fn retain(&self, live: &impl Fn(u64) -> bool) {
        let mut n = self.numbers.lock();
        let Numbers { files, bytes, .. } = &mut *n;
        files.retain(|l, ids| {
            let keep = live(l.file);
            if !keep {
                *bytes -= 4 * ids.len() + ENTRY_BYTES;
            }
            keep
        });
    }

    /// The key numbered `id`.
    ///
    /// # Panics
    /// If no key has that number in this dictionary.
    pub fn key(&self, id: u32) -> CellKey {
        let n = self.numbers.lock();
        let (family, bytes) = &n.keys[id as usize];
        decode_key(bytes, *family)
    }

    /// Whether the key numbered `id` counts root spans (its `parent`, a
    /// key's last byte as its list holds it, is none or zero), without
    /// decoding it.
    ///
    /// # Panics
    /// If no key has that number in this dictionary.
    pub fn is_root(&self, id: u32) -> bool {
        let n = self.numbers.lock();
        n.keys[id as usize].1.last() != Some(&(Parent::Some as u8))
    }

    /// Keys numbered.
    pub fn len(&self) -> usize {
        self.numbers.lock().keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the keys and the files' numbers take.
    pub fn bytes(&self) -> usize {
        self.numbers.lock().bytes
    }
}

/// The current [`Dict`], replaced by an empty one once it is full.
pub struct KeyDict {
    current: Mutex<Arc<Dict>>,
    bound: usize,
}

impl KeyDict {
    pub fn new(bound: usize) -> KeyDict {
        KeyDict {
            current: Mutex::new(Arc::new(Dict::new(bound))),
            bound,
        }
    }

    /// The dictionary a query numbers its sources' keys with.
    pub fn current(&self) -> Arc<Dict> {
        let mut current = self.current.lock();
        if current.numbers.lock().full {
            *current = Arc::new(Dict::new(self.bound));
        }
        current.clone()
    }

    /// Bytes the current dictionary takes.
    pub fn bytes(&self) -> usize {
        self.current.lock().bytes()
    }

    /// Forgets the numbers kept for the files `live` refuses.
    pub fn retain(&self, live: impl Fn(u64) -> bool) {
        self.current.lock().retain(&live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::cells::Parent;

    fn key(service: &str, name: Option<&str>) -> CellKey {
        CellKey {
            parent: Parent::None,
            service: Some(service.as_bytes().into()),
            name: name.map(|n| n.as_bytes().into()),
            attr: None,
            kind: 2,
            status: 0,
        }
    }

    fn list(id: u64, crc: u32) -> ListId {
        ListId {
            file: id,
            inode: 7,
            family: Family::Named,
            crc,
            len: 100,
        }
    }

    /// A key has one number in every list that holds it, and reads back
    /// as itself; the families' keys are numbered apart.
    #[test]
    fn a_key_has_one_number_in_every_list() {
        let dict = KeyDict::new(1 << 20).current();
        let a = [key("a", Some("GET")), key("b", Some("GET"))];
        let b = [
            key("b", Some("GET")),
            key("c", Some("PUT")),
            key("a", Some("GET")),
        ];
        let first = dict.number(&KeyList::of(&a, Family::Named));
        let second = dict.number(&KeyList::of(&b, Family::Named));
        assert_eq!(&*first, &[0, 1]);
        assert_eq!(&*second, &[1, 2, 0]);
        for (ids, keys) in [(&first, &a[..]), (&second, &b[..])] {
            for (&id, k) in ids.iter().zip(keys) {
                assert_eq!(&dict.key(id), k);
            }
        }
        let unnamed = dict.number(&KeyList::of(&[key("a", None)], Family::Unnamed));
        assert_eq!(&*unnamed, &[3]);
        assert_eq!(dict.key(3), key("a", None));
        assert_eq!(dict.len(), 4);
        // Without their names, "a GET" is "a", and "c PUT" a new key.
        assert_eq!(dict.without_name(0), 3);
        assert_eq!(dict.without_name(3), 3);
        let c = dict.without_name(2);
        assert_eq!(dict.key(c), key("c", None));
        assert_eq!(dict.without_name(2), c);
        assert_eq!(dict.len(), 5);
    }

    /// A file's numbers are given back for the same list only, and
    /// forgotten with the file.
    #[test]
    fn a_files_numbers_are_kept_for_its_list() {
        let keys = KeyDict::new(1 << 20);
        let dict = keys.current();
        let ids = dict.number(&KeyList::of(&[key("a", Some("x"))], Family::Named));
        dict.keep_file(list(1, 5), ids.clone());
        assert_eq!(dict.file(&list(1, 5)).as_deref(), Some(&*ids));
        assert!(dict.file(&list(1, 6)).is_none(), "another checksum");
        assert!(dict.file(&list(2, 5)).is_none(), "another file");
        let before = dict.bytes();
        keys.retain(|file| file != 1);
        assert!(dict.file(&list(1, 5)).is_none());
        assert!(dict.bytes() < before);
    }

    /// A file's numbers that do not fit are not kept, and the dictionary,
    /// its keys within the bound, stays the one queries are given.
    #[test]
    fn a_file_that_does_not_fit_is_numbered_again_and_the_dictionary_stays() {
        let keys = KeyDict::new(1_000);
        let dict = keys.current();
        let ids = dict.number(&KeyList::of(&[key("a", Some("x"))], Family::Named));
        let big: Arc<[u32]> = vec![ids[0]; 300].into();
        dict.keep_file(list(1, 1), big);
        assert!(dict.file(&list(1, 1)).is_none());
        dict.keep_file(list(2, 1), ids.clone());
        assert_eq!(dict.file(&list(2, 1)).as_deref(), Some(&*ids));
        assert!(Arc::ptr_eq(&dict, &keys.current()));
    }

    /// Past its bound a dictionary keeps no more files' numbers, and the
    /// next query gets a new one; a query holding the old one still reads
    /// its keys by their numbers.
    #[test]
    fn a_full_dictionary_is_replaced_and_the_old_one_still_reads() {
        let keys = KeyDict::new(2_000);
        let old = keys.current();
        let many: Vec<CellKey> = (0..40)
            .map(|i| key(&format!("service-{i}"), Some("op")))
            .collect();
        let ids = old.number(&KeyList::of(&many, Family::Named));
        old.keep_file(list(1, 1), ids.clone());
        assert!(old.file(&list(1, 1)).is_none(), "kept past the bound");
        let new = keys.current();
        assert!(!Arc::ptr_eq(&old, &new));
        assert!(new.is_empty());
        assert_eq!(old.key(ids[39]), many[39]);
        // A dictionary within its bound is kept.
        let again = keys.current();
        assert!(Arc::ptr_eq(&new, &again));
    }
}
