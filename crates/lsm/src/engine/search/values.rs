//! The values of a tag key, gathered from the blocks that may hold it
//! ([`Engine::tag_values`](crate::Engine::tag_values)): deduplicated by
//! hash on every reading thread at once ([`ValueSet`]), and bounded by a
//! [`ValuesLimit`].

use std::collections::{BTreeSet, HashMap};

use crate::index::ValueKind;

/// The distinct values of a key read from one block: their texts one after
/// another, each with where it ends, its type and its hash in the answer's
/// [`ValueSet`] (worked out by the thread that read the block).
#[derive(Default)]
pub(super) struct BlockValues {
    text: String,
    ends: Vec<(usize, ValueKind, u64)>,
}

impl BlockValues {
    pub(super) fn push(&mut self, value: &str, kind: ValueKind, hasher: &ValueHasher) {
        self.text.push_str(value);
        self.ends
            .push((self.text.len(), kind, value_hash(hasher, value, kind)));
    }

    pub(super) fn of(
        values: impl IntoIterator<Item = (String, ValueKind)>,
        hasher: &ValueHasher,
    ) -> Self {
        let mut out = BlockValues::default();
        for (v, kind) in values {
            out.push(&v, kind, hasher);
        }
        out
    }

    pub(super) fn each(&self, mut f: impl FnMut(&str, ValueKind, u64)) {
        let mut from = 0;
        for &(to, kind, hash) in &self.ends {
            f(&self.text[from..to], kind, hash);
            from = to;
        }
    }
}

/// How many values [`Engine::tag_values`](crate::Engine::tag_values) gathers before it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuesLimit {
    /// At most this many values; 0 for no limit.
    pub values: usize,
    /// Stop once the values hold this many bytes in all; 0 for no limit.
    pub bytes: usize,
}

impl ValuesLimit {
    pub const NONE: ValuesLimit = ValuesLimit {
        values: 0,
        bytes: 0,
    };
}

/// Values of a key, and whether gathering them stopped at a
/// [`ValuesLimit`] (more may exist).
#[derive(Debug, Clone)]
pub struct TagValues {
    /// At most `limit.values` of them, of at most `limit.bytes` in all
    /// (each when not 0), sorted.
    pub values: BTreeSet<(String, ValueKind)>,
    /// Bytes of the values' text.
    pub bytes: usize,
    /// A limit was reached before every block was read.
    pub stopped: bool,
    limit: ValuesLimit,
    /// The values met so far (`values` once finished), split by their
    /// hashes into a set per thread that adds them.
    seen: Vec<ValueSet>,
    pub(super) hasher: ValueHasher,
}

/// Equal answers: the same values, bytes and mark, under the same limit.
impl PartialEq for TagValues {
    fn eq(&self, other: &Self) -> bool {
        (&self.values, self.bytes, self.stopped, self.limit)
            == (&other.values, other.bytes, other.stopped, other.limit)
            && self.seen == other.seen
    }
}

impl Eq for TagValues {}

impl TagValues {
    /// `threads`: the sets the values are split among.
    pub(super) fn new(limit: ValuesLimit, threads: usize) -> Self {
        let hasher = ValueHasher::default();
        TagValues {
            values: BTreeSet::new(),
            bytes: 0,
            stopped: false,
            limit,
            seen: vec![ValueSet::with_hasher(hasher); threads.max(1)],
            hasher,
        }
    }

    pub(super) fn contains(&self, value: &str, kind: ValueKind) -> bool {
        let hash = value_hash(&self.hasher, value, kind);
        self.seen[set_of(hash, self.seen.len())].find(hash, value, kind)
    }

    pub(super) fn extend(&mut self, values: impl IntoIterator<Item = (String, ValueKind)>) {
        let hasher = self.hasher;
        self.add_round(&[BlockValues::of(values, &hasher)]);
    }

    /// Adds the values of blocks in the walk's order, each set by its own
    /// thread, and stops after the block that reaches the limit: what a
    /// single set adding them one at a time would hold.
    pub(super) fn add_round(&mut self, blocks: &[BlockValues]) {
        if self.stopped || blocks.is_empty() {
            return;
        }
        let parts = self.seen.len();
        // Per set, after each block: its values and the bytes it added.
        let add = |(p, set): (usize, &mut ValueSet)| -> Vec<(usize, usize)> {
            let mut bytes = 0;
            let mut after = Vec::with_capacity(blocks.len());
            for b in blocks {
                b.each(|v, kind, hash| {
                    if set_of(hash, parts) == p && set.insert_hashed(hash, v, kind) {
                        bytes += v.len();
                    }
                });
                after.push((set.len(), bytes));
            }
            after
        };
        let afters: Vec<Vec<(usize, usize)>> = if parts == 1 {
            vec![add((0, &mut self.seen[0]))]
        } else {
            std::thread::scope(|s| {
                let mut sets = self.seen.iter_mut().enumerate();
                let first = sets.next().expect("a set");
                let others: Vec<_> = sets.map(|one| s.spawn(move || add(one))).collect();
                let mut afters = vec![add(first)];
                for other in others {
                    afters.push(other.join().expect("adding values does not panic"));
                }
                afters
            })
        };
        let ValuesLimit { values, bytes } = self.limit;
        for b in 0..blocks.len() {
            let len: usize = afters.iter().map(|a| a[b].0).sum();
            let added: usize = afters.iter().map(|a| a[b].1).sum();
            if (values > 0 && len >= values) || (bytes > 0 && self.bytes + added >= bytes) {
                self.stopped = true;
                self.bytes += added;
                for (set, after) in self.seen.iter_mut().zip(&afters) {
                    set.truncate(after[b].0);
                }
                return;
            }
        }
        self.bytes += afters.iter().map(|a| a[blocks.len() - 1].1).sum::<usize>();
    }

    /// Keeps at most `limit.values` values, of at most `limit.bytes`.
    pub(super) fn finish(&mut self) {
        self.values = std::mem::take(&mut self.seen)
            .into_iter()
            .flat_map(ValueSet::into_sorted)
            .collect();
        let ValuesLimit { values, bytes } = self.limit;
        while (values > 0 && self.values.len() > values) || (bytes > 0 && self.bytes > bytes) {
            match self.values.pop_last() {
                Some((v, _)) => self.bytes -= v.len(),
                None => break,
            }
        }
    }
}

/// Distinct (text, type) pairs, for a listing that looks up every
/// occurrence of a key (3.5 M lookups for 70 k values on a store of 100 M
/// spans): the texts lie one after another in one buffer, and a lookup
/// compares whole 64-bit hashes in a table of numbers before it compares
/// any text, so a value already held costs a probe and one comparison in
/// memory kept close together, where a set of `String`s followed a pointer
/// per comparison.
#[derive(Debug, Clone, Default)]
pub(super) struct ValueSet {
    pub(super) text: String,
    /// Where each value's text ends in `text` (it starts where the one
    /// before ends), and its type; in the order they came.
    pub(super) values: Vec<(usize, ValueKind)>,
    /// Hash of (text, type) to the last value with that hash; `before`
    /// links each value to the one with its hash before it.
    pub(super) table: HashMap<u64, usize, std::hash::BuildHasherDefault<Prehashed>>,
    pub(super) before: Vec<Option<usize>>,
    /// Each value's hash.
    pub(super) hashes: Vec<u64>,
    pub(super) hasher: ValueHasher,
}

/// Which of `sets` holds the values of this hash: neither the low bits a
/// set's table places by nor its top bits.
pub(super) fn set_of(hash: u64, sets: usize) -> usize {
    (hash >> 32) as usize % sets
}

/// What hashes the values of a [`ValueSet`].
pub(super) type ValueHasher = foldhash::fast::RandomState;

/// The hash of a value in a [`ValueSet`] whose hasher is `hasher`.
pub(super) fn value_hash(hasher: &ValueHasher, text: &str, kind: ValueKind) -> u64 {
    use std::hash::BuildHasher;
    hasher.hash_one((text, kind as u8))
}

impl ValueSet {
    pub(super) fn with_hasher(hasher: ValueHasher) -> Self {
        ValueSet {
            hasher,
            ..ValueSet::default()
        }
    }

    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// Keeps the first `len` values added.
    pub(super) fn truncate(&mut self, len: usize) {
        while self.values.len() > len {
            let i = self.values.len() - 1;
            let hash = self.hashes[i];
            match self.before[i] {
                Some(prev) => self.table.insert(hash, prev),
                None => self.table.remove(&hash),
            };
            self.values.pop();
            self.before.pop();
            self.hashes.pop();
        }
        self.text.truncate(self.values.last().map_or(0, |v| v.0));
    }

    pub(super) fn hash(&self, text: &str, kind: ValueKind) -> u64 {
        value_hash(&self.hasher, text, kind)
    }

    pub(super) fn get(&self, i: usize) -> (&str, ValueKind) {
        let from = i.checked_sub(1).map_or(0, |p| self.values[p].0);
        let (to, kind) = self.values[i];
        (&self.text[from..to], kind)
    }

    pub(super) fn find(&self, hash: u64, text: &str, kind: ValueKind) -> bool {
        let mut at = self.table.get(&hash).copied();
        while let Some(i) = at {
            if self.get(i) == (text, kind) {
                return true;
            }
            at = self.before[i];
        }
        false
    }

    pub(super) fn contains(&self, text: &str, kind: ValueKind) -> bool {
        self.find(self.hash(text, kind), text, kind)
    }

    /// Adds the value; whether it was not held yet.
    #[cfg(test)]
    pub(super) fn insert(&mut self, text: &str, kind: ValueKind) -> bool {
        self.insert_hashed(self.hash(text, kind), text, kind)
    }

    pub(super) fn insert_hashed(&mut self, hash: u64, text: &str, kind: ValueKind) -> bool {
        if self.find(hash, text, kind) {
            return false;
        }
        self.text.push_str(text);
        self.values.push((self.text.len(), kind));
        let i = self.values.len() - 1;
        self.before.push(self.table.insert(hash, i));
        self.hashes.push(hash);
        true
    }

    pub(super) fn into_sorted(self) -> BTreeSet<(String, ValueKind)> {
        (0..self.len())
            .map(|i| {
                let (text, kind) = self.get(i);
                (text.to_owned(), kind)
            })
            .collect()
    }
}

impl PartialEq for ValueSet {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && (0..self.len()).all(|i| {
                let (text, kind) = self.get(i);
                other.contains(text, kind)
            })
    }
}

impl Eq for ValueSet {}

/// The hasher of a table whose keys are hashes already.
#[derive(Default)]
pub(super) struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_set_holds_each_value_and_type_once_whatever_their_hashes() {
        let mut set = ValueSet::default();
        let values: Vec<(String, ValueKind)> = (0..3000)
            .map(|i| {
                (
                    format!("v{}", i % 1000),
                    [ValueKind::Str, ValueKind::Int][i / 2000],
                )
            })
            .collect();
        let new: Vec<bool> = values.iter().map(|(v, k)| set.insert(v, *k)).collect();
        // "v0" … "v999" as strings, then as ints, each new once.
        assert_eq!(new.iter().filter(|&&n| n).count(), 2000);
        assert!(new[..1000].iter().all(|&n| n) && new[1000..2000].iter().all(|&n| !n));
        assert!(set.contains("v999", ValueKind::Int) && !set.contains("v999", ValueKind::Bool));
        assert!(!set.contains("v1000", ValueKind::Str) && !set.contains("", ValueKind::Str));
        let want: BTreeSet<(String, ValueKind)> = values.into_iter().collect();
        assert_eq!(set.clone().into_sorted(), want);

        // Every value under one hash: told apart by their texts and types.
        let mut same = ValueSet::default();
        for (v, k) in &want {
            assert!(same.insert_hashed(7, v, *k), "{v}");
        }
        for (v, k) in &want {
            assert!(!same.insert_hashed(7, v, *k), "{v} twice");
        }
        assert!(!same.find(7, "v5", ValueKind::Float) && !same.find(8, "v5", ValueKind::Str));
        assert_eq!(same.clone().into_sorted(), want);
        assert_eq!(set, set.clone());

        // Cut back to the first ten added: the rest are gone from the chain
        // of their hash, and can be added again.
        let first: Vec<&(String, ValueKind)> = want.iter().take(10).collect();
        same.truncate(10);
        assert_eq!(same.len(), 10);
        for (i, (v, k)) in want.iter().enumerate() {
            assert_eq!(same.find(7, v, *k), i < 10, "{v} {k:?}");
        }
        assert_eq!(
            same.clone().into_sorted(),
            first.into_iter().cloned().collect()
        );
        let (v, k) = want.iter().nth(10).expect("an 11th");
        assert!(same.insert_hashed(7, v, *k) && same.find(7, v, *k));
    }
}
