//! What lets a search skip most of a sidecar: its parts are kept in blocks
//! of at most [`BLOCK_PARTS`], newest start first, and a small digest
//! describes each block (its times, the span kinds and errors it holds, and
//! a Bloom filter of its services, span names and attributes). A search
//! reads the digest of a file ([`FileIndex`]), walks the blocks newest
//! first, and reads only the blocks whose digest may meet what the query
//! needs ([`NeedTerms`]).
//!
//! Terms are hashed from the strings' bytes with a fixed function
//! ([`text_hash`]), never with a per-process seed: the filters are on disk.

use std::{fs::File, os::unix::fs::FileExt, path::PathBuf};

use super::{OpNeed, SummarySet, TagNeed, TagScope, TraceSummary, ValueKind, MAX_TAGS_PER_TRACE};
use crate::error::Result;

/// Most trace parts in one block of a sidecar. Smaller blocks prune finer
/// but cost more digest bytes and more block reads per answer.
pub const BLOCK_PARTS: usize = 1024;
/// Bits of Bloom filter per distinct term of a block, and probes per term:
/// about 1% false positives.
const BITS_PER_TERM: usize = 10;
const PROBES: u32 = 7;

/// Most values of one attribute a digest lists for a block; a block with
/// more lists the key alone, and its values are read from the block.
pub const DIGEST_VALUES: usize = 64;

/// Block flag: some part has an error span.
pub const FLAG_ERROR: u8 = 1;
/// Block flag: some part's tags were cut at [`MAX_TAGS_PER_TRACE`], so the
/// block may hold any attribute.
pub const FLAG_CAPPED: u8 = 2;

/// Finalizer of splitmix64: spreads every input bit over the output.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// FNV-1a over `bytes`, then splitmix64's finalizer: the hash of a string in
/// every term.
pub fn text_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// The terms a block's filter holds, from the hashes of their strings.
pub mod term {
    use super::mix;

    pub fn service(service: u64) -> u64 {
        mix(service ^ 0x5345_5256_4943_4531)
    }

    pub fn name(name: u64) -> u64 {
        mix(name ^ 0x4e41_4d45_4e41_4d45)
    }

    pub fn op(service: u64, name: u64) -> u64 {
        mix(service.rotate_left(23) ^ name ^ 0x4f50_4f50_4f50_4f50)
    }

    /// A service's spans of one OTLP `SpanKind`.
    pub fn service_kind(service: u64, kind: u8) -> u64 {
        mix(service.rotate_left(17) ^ (u64::from(kind) << 56) ^ 0x4b49_4e44_4b49_4e44)
    }

    /// The service, name, (service, name) or (service, kind) term of an
    /// operation with an error span: `plain` is its term without the error.
    pub fn with_error(plain: u64) -> u64 {
        mix(plain ^ 0x4552_524f_5245_5252)
    }

    /// An attribute kept by value: `scope_kind` is the byte the sidecar
    /// writes for it (scope in the low 4 bits, value type in the high 4).
    pub fn tag(scope_kind: u8, key: u64, value: u64) -> u64 {
        mix(key.rotate_left(29) ^ value ^ (u64::from(scope_kind) << 56) ^ 0x5441_4754_4147_0001)
    }

    /// An attribute whose value the index did not keep.
    pub fn unkept(scope: u8, key: u64) -> u64 {
        mix(key ^ (u64::from(scope) << 56) ^ 0x554e_4b45_5054_0002)
    }
}

/// A Bloom filter of 64-bit term hashes, a power of two bits long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    words: Box<[u64]>,
}

impl Bloom {
    /// A filter holding `terms` (distinct or not).
    pub fn of(terms: &mut Vec<u64>) -> Bloom {
        terms.sort_unstable();
        terms.dedup();
        let bits = (terms.len() * BITS_PER_TERM).next_power_of_two().max(64);
        let mut words = vec![0u64; bits / 64].into_boxed_slice();
        for &t in terms.iter() {
            for bit in Self::bits(t, bits) {
                words[bit / 64] |= 1 << (bit % 64);
            }
        }
        Bloom { words }
    }

    pub fn from_words(words: Box<[u64]>) -> Option<Bloom> {
        (words.len().is_power_of_two()).then_some(Bloom { words })
    }

    pub fn words(&self) -> &[u64] {
        &self.words
    }

    fn bits(t: u64, bits: usize) -> impl Iterator<Item = usize> {
        let step = t.rotate_left(32) | 1;
        (0..PROBES)
            .map(move |i| (t.wrapping_add(u64::from(i).wrapping_mul(step)) as usize) & (bits - 1))
    }

    /// Whether `t` may be in the filter (false: it is certainly not).
    pub fn may_hold(&self, t: u64) -> bool {
        let bits = self.words.len() * 64;
        Self::bits(t, bits).all(|bit| self.words[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

/// What the digest says of one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDigest {
    /// Latest and earliest part start, latest part end.
    pub max_start: u64,
    pub min_start: u64,
    pub max_end: u64,
    pub parts: u32,
    /// Where its frame is, from the first byte after the digest.
    pub offset: u64,
    pub frame_len: u32,
    pub body_len: u32,
    pub crc: u32,
    /// Bytes of its head's frame, the first of its two, and their CRC-32C.
    pub head_len: u32,
    pub head_crc: u32,
    /// Bit `k` set: some part has a span of OTLP kind `k` (kinds of 8 and
    /// over set every bit).
    pub kinds: u8,
    pub flags: u8,
    pub bloom: Bloom,
    /// Each distinct (scope, type, key) of the block's tags, sorted.
    pub tags: Vec<DigestTag>,
}

/// An attribute key a block holds, and its values when there are few.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DigestTag {
    pub scope: TagScope,
    pub kind: ValueKind,
    pub key: Box<str>,
    /// Its distinct values in the block, sorted; `None` when over
    /// [`DIGEST_VALUES`].
    pub values: Option<Box<[Box<str>]>>,
}

/// The bit of `kind` in [`BlockDigest::kinds`].
pub fn kind_bit(kind: u8) -> u8 {
    if kind < 8 {
        1 << kind
    } else {
        0xff
    }
}

/// A block's digest fields from its parts (in their sidecar order, newest
/// first), the hashes of the set's strings and the strings; the caller fills
/// in where the block is.
pub fn digest_of<'s>(
    parts: &[TraceSummary],
    hash: &mut impl FnMut(u32) -> u64,
    text: impl Fn(u32) -> &'s str,
) -> BlockDigest {
    let mut terms = Vec::with_capacity(parts.len() * 8);
    let mut keys: std::collections::BTreeMap<(TagScope, ValueKind, u32), Vec<u32>> =
        std::collections::BTreeMap::new();
    let mut kinds = 0u8;
    let mut flags = 0u8;
    let mut max_end = 0;
    for p in parts {
        max_end = max_end.max(p.end_unix_nano);
        if p.error_count > 0 {
            flags |= FLAG_ERROR;
        }
        if p.tags.len() >= MAX_TAGS_PER_TRACE {
            flags |= FLAG_CAPPED;
        }
        for o in &p.ops {
            kinds |= kind_bit(o.kind);
            let (s, n) = (hash(o.service), hash(o.name));
            let plain = [
                term::service(s),
                term::name(n),
                term::op(s, n),
                term::service_kind(s, o.kind),
            ];
            terms.extend(plain);
            if o.error {
                terms.extend(plain.map(term::with_error));
            }
        }
        for g in &p.tags {
            let values = keys.entry((g.scope, g.kind, g.key)).or_default();
            if values.len() <= DIGEST_VALUES && !values.contains(&g.value) {
                values.push(g.value);
            }
            let key = hash(g.key);
            terms.push(match g.kind {
                ValueKind::Unindexed => term::unkept(g.scope as u8, key),
                kind => term::tag(g.scope as u8 | (kind as u8) << 4, key, hash(g.value)),
            });
        }
    }
    BlockDigest {
        max_start: parts.first().map_or(0, |p| p.start_unix_nano),
        min_start: parts.last().map_or(0, |p| p.start_unix_nano),
        max_end,
        parts: parts.len() as u32,
        offset: 0,
        frame_len: 0,
        body_len: 0,
        crc: 0,
        head_len: 0,
        head_crc: 0,
        kinds,
        flags,
        bloom: Bloom::of(&mut terms),
        tags: {
            let mut tags: Vec<DigestTag> = keys
                .into_iter()
                .map(|((scope, kind, key), values)| DigestTag {
                    scope,
                    kind,
                    key: text(key).into(),
                    values: (values.len() <= DIGEST_VALUES).then(|| {
                        let mut v: Vec<Box<str>> = values.iter().map(|&v| text(v).into()).collect();
                        v.sort();
                        v.into_boxed_slice()
                    }),
                })
                .collect();
            tags.sort();
            tags
        },
    }
}

/// One need of a query as digest terms: a block may hold a part meeting it
/// only if its digest passes [`NeedTerms::may_meet`].
#[derive(Debug, Clone, Default)]
pub struct NeedTerms {
    /// Each must be in the filter.
    all: Vec<u64>,
    /// Per attribute, one of these must be in the filter (unless the block
    /// has a part whose tags were cut).
    tags: Vec<Vec<u64>>,
    kind: Option<u8>,
    error: bool,
}

impl NeedTerms {
    pub fn new(need: &OpNeed) -> NeedTerms {
        let h = |s: &str| text_hash(s.as_bytes());
        let mut all = Vec::new();
        match (&need.service, &need.name) {
            (Some(s), Some(n)) => all.push(term::op(h(s), h(n))),
            (Some(s), None) => all.push(term::service(h(s))),
            (None, Some(n)) => all.push(term::name(h(n))),
            (None, None) => {}
        }
        if let (Some(s), Some(k)) = (&need.service, need.kind) {
            // One span is of the service and of the kind.
            all.push(term::service_kind(h(s), k));
        }
        if need.error {
            // One span has the operation and the error.
            for t in &mut all {
                *t = term::with_error(*t);
            }
        }
        NeedTerms {
            all,
            tags: need.tags.iter().map(tag_terms).collect(),
            kind: need.kind,
            error: need.error,
        }
    }

    pub fn may_meet(&self, d: &BlockDigest) -> bool {
        (!self.error || d.flags & FLAG_ERROR != 0)
            && self.kind.is_none_or(|k| d.kinds & kind_bit(k) != 0)
            && self.all.iter().all(|&t| d.bloom.may_hold(t))
            && (d.flags & FLAG_CAPPED != 0
                || self
                    .tags
                    .iter()
                    .all(|alts| alts.iter().any(|&t| d.bloom.may_hold(t))))
    }
}

/// The terms any of which a part holding `t` has in its block's filter.
fn tag_terms(t: &TagNeed) -> Vec<u64> {
    let key = text_hash(t.key.as_bytes());
    let value = text_hash(t.value.as_bytes());
    let scopes: &[TagScope] = match t.scope {
        Some(TagScope::Resource) => &[TagScope::Resource],
        Some(TagScope::Span) => &[TagScope::Span],
        None => &[TagScope::Resource, TagScope::Span],
    };
    scopes
        .iter()
        .flat_map(|&s| {
            [
                term::tag(s as u8 | (t.kind as u8) << 4, key, value),
                term::unkept(s as u8, key),
            ]
        })
        .collect()
}

/// A sidecar's digest, kept in memory while its file is searched: the
/// blocks are read from the sidecar one at a time, when a search needs one.
#[derive(Debug)]
pub struct FileIndex {
    pub(super) path: PathBuf,
    pub(super) file: File,
    /// The sidecar's inode: a rebuilt sidecar is a new file, whose blocks
    /// a cache does not take for the old one's.
    pub(super) inode: u64,
    /// Strings in the sidecar's table (every string index is below it).
    pub(super) strings: usize,
    /// Newest first: each block's parts start no later than the previous
    /// block's.
    pub blocks: Vec<BlockDigest>,
    /// Where the first block's frame starts in the sidecar.
    pub(super) base: u64,
}

impl FileIndex {
    /// Block `i`'s parts as a set of their own (with just the strings they
    /// use); its traces are in trace-ID order, [`SummarySet::by_start`]
    /// gives them newest first.
    pub fn block(&self, i: usize) -> Result<SummarySet> {
        let (at, body) = self.body(i)?;
        super::sidecar::decode_block(&self.path, at, &body, self.strings, self.blocks[i].parts)
    }

    /// Asks the kernel to read block `i` ahead, for a read that will follow.
    pub fn prefetch(&self, i: usize) {
        if let Some(d) = self.blocks.get(i) {
            let len = u64::from(d.frame_len);
            crate::readahead::will_need(&self.file, self.base + d.offset, len);
        }
    }

    /// Block `i`'s parts, to be decoded one at a time.
    pub fn block_parts(&self, i: usize) -> Result<super::sidecar::BlockParts> {
        let (at, body) = self.body(i)?;
        let body = std::sync::Arc::new(body);
        super::sidecar::BlockParts::new(&self.path, at, body, self.strings, self.blocks[i].parts)
    }

    /// [`FileIndex::block_parts`] of file `file`'s index, its body taken
    /// from `cache` when kept there (checked by the digest's checksum and
    /// length), else read and kept, for the query of turn `turn`.
    pub fn block_parts_kept(
        &self,
        i: usize,
        cache: &std::sync::Arc<super::cells::SectionCache>,
        file: u64,
        turn: u64,
    ) -> Result<super::sidecar::BlockParts> {
        let d = &self.blocks[i];
        let at = self.base + d.offset;
        let kept = super::cells::CacheRef::new(cache.clone(), file, self.inode, turn);
        let body = match cache.get(&kept, at, d.crc, d.body_len) {
            Some(body) => body,
            None => {
                let (_, body) = self.body(i)?;
                let body = std::sync::Arc::new(body);
                cache.put(&kept, at, d.crc, body.clone());
                body
            }
        };
        super::sidecar::BlockParts::new(&self.path, at, body, self.strings, d.parts)
    }

    /// Block `i`'s place in the sidecar and its body, read and inflated.
    fn body(&self, i: usize) -> Result<(u64, Vec<u8>)> {
        let d = &self.blocks[i];
        let (at, frame) = self.read(i, d.frame_len)?;
        let body = super::format::inflate_frame(&self.path, at, &frame, d)?;
        Ok((at, body))
    }

    /// Block `i`'s place in the sidecar and its first `len` bytes there.
    fn read(&self, i: usize, len: u32) -> Result<(u64, Vec<u8>)> {
        let at = self.base + self.blocks[i].offset;
        let mut bytes = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut bytes, at)
            .map_err(|e| crate::error::Error::io(&self.path, e))?;
        Ok((at, bytes))
    }

    /// The distinct values of the attribute `key` (in `scope`, or either) in
    /// block `i`'s parts that may lie in `window` (start, end; 0: open) and
    /// meet `needs` (as [`super::tag_values`] decides), each given to `f`
    /// with its type; reads the block without building its parts (see
    /// [`FileIndex::block`]).
    pub fn block_tag_values(
        &self,
        i: usize,
        scope: Option<TagScope>,
        key: &str,
        window: (u64, u64),
        needs: &[OpNeed],
        mut f: impl FnMut(&str, ValueKind),
    ) -> Result<()> {
        let d = &self.blocks[i];
        // Every part in the window and needs of a service each: the block's
        // columns may answer, from its head alone.
        let whole = d.min_start >= window.0 && (window.1 == 0 || d.max_start <= window.1);
        if whole && needs.iter().all(OpNeed::names_a_service_alone) {
            let (at, frame) = self.read(i, d.head_len)?;
            let head = super::format::inflate_head(&self.path, at, &frame, d)?;
            if super::block_values::block_column_values(
                &self.path,
                at,
                &head,
                self.strings,
                d.parts,
                scope,
                key,
                needs,
                &mut f,
            )? {
                return Ok(());
            }
        }
        let (at, body) = self.body(i)?;
        super::block_values::block_tag_values(
            &self.path,
            at,
            &body,
            self.strings,
            d.parts,
            scope,
            key,
            window,
            needs,
            f,
        )
    }

    /// About how many heap bytes the digest holds.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<FileIndex>()
            + self
                .blocks
                .iter()
                .map(|b| {
                    std::mem::size_of::<BlockDigest>()
                        + b.bloom.words.len() * 8
                        + b.tags
                            .iter()
                            .map(|t| {
                                std::mem::size_of::<DigestTag>()
                                    + t.key.len()
                                    + t.values.as_ref().map_or(0, |v| {
                                        v.iter().map(|s| s.len() + 16).sum::<usize>()
                                    })
                            })
                            .sum::<usize>()
                })
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bloom_filter_holds_what_was_put_in_and_rejects_most_else() {
        let mut terms: Vec<u64> = (0..1000u64).map(|i| text_hash(&i.to_le_bytes())).collect();
        let bloom = Bloom::of(&mut terms.clone());
        assert!(terms.iter().all(|&t| bloom.may_hold(t)));
        terms.clear();
        let false_positives = (1000..101_000u64)
            .filter(|i| bloom.may_hold(text_hash(&i.to_le_bytes())))
            .count();
        // 10 bits and 7 probes per term: about 1%; 3% leaves room.
        assert!(false_positives < 3_000, "{false_positives} of 100000");
        let empty = Bloom::of(&mut Vec::new());
        assert!(!empty.may_hold(text_hash(b"x")));
    }

    #[test]
    fn the_term_hashes_are_fixed_across_builds_and_processes() {
        // The filters are on disk: these values must never change.
        assert_eq!(text_hash(b""), 0xf52a_15e9_a9b5_e89b);
        assert_eq!(
            term::service(text_hash(b"checkout")),
            term::service(text_hash(b"checkout"))
        );
        assert_ne!(term::service(text_hash(b"a")), term::name(text_hash(b"a")));
        assert_ne!(
            term::tag(0, text_hash(b"k"), text_hash(b"v")),
            term::tag(1, text_hash(b"k"), text_hash(b"v"))
        );
    }
}
