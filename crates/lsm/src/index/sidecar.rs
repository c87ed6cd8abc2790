//! The index sidecar of a sorted file: `tables/{id:020}.idx`, the file's
//! [`SummarySet`] (layout in `docs/FORMAT.md`, "Index sidecar").
//!
//! Written to `.idx.tmp`, fsynced and renamed before the file's manifest edit;
//! deleted after its file. Recovery removes `.tmp` files and sidecars whose
//! file is gone ([`remove_orphans`]); a sidecar that is missing or fails its
//! checks is rebuilt from its file by the engine, so the index never
//! disagrees with the spans for long, and never for a file it can read.

use std::{
    collections::HashSet,
    fs,
    io::Write,
    ops::Range,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

use tracedb_proto::wire::put_varint;

use super::{
    blocks::{self, BlockDigest, Bloom, DigestTag, FileIndex},
    Edge, Op, OpNeed, SummarySet, Tag, TagScope, TraceSummary, ValueKind, MAX_TAGS_PER_TRACE,
};
use crate::{
    error::{Error, Result},
    span::TraceId,
    table::corrupt,
    writeback::{Writeback, STEP},
};

const MAGIC: &[u8; 8] = b"TDB-IDX\0";
/// 1: the body as is; 2: the body as one zstd frame, after its length; 3:
/// as 2, with each trace's end as a duration and without its span list; 4:
/// as 3, with each tag's value type; 5: parts in blocks newest first, each
/// its own frame, after a digest of every block (`index::blocks`); 6: as 5,
/// with (service, kind) terms in each block's filter; 7: as 6, with columns
/// of each block's services and of its keys of many values. Other
/// versions are refused, so a store's older sidecars are rebuilt from their
/// files when first read.
const VERSION: u32 = 7;
/// zstd level of the digest and blocks: level 1 got within 1% of level 9
/// (trace IDs and times, which hardly compress, are most of the bytes).
const ZSTD_LEVEL: i32 = 1;
/// Largest digest or block a reader inflates.
const MAX_BODY_BYTES: u32 = 1 << 30;
/// Bytes before the digest's frame: magic, version, frame length, digest
/// length, digest checksum.
const HEAD_BYTES: usize = 24;

pub use crate::layout::sidecar_path;

/// Encodes a set; see `docs/FORMAT.md`.
/// `block_parts`: most parts per block (at least 1).
pub fn encode(set: &SummarySet, block_parts: usize) -> Vec<u8> {
    let mut parts = Vec::with_capacity(set.traces.len() * 96);
    let mut placed = Vec::with_capacity(set.traces.len());
    for t in &set.traces {
        let at = parts.len();
        put_part(&mut parts, t);
        placed.push((t.start_unix_nano, at, parts.len() - at));
    }
    encode_parts(&set.strings, &parts, placed, block_parts)
}

/// A sidecar of `strings` and the parts encoded in `parts` by [`put_part`]
/// at `placed`: (start, offset, length) each, in trace-ID order.
pub(super) fn encode_parts(
    strings: &[String],
    parts: &[u8],
    mut placed: Vec<(u64, usize, usize)>,
    block_parts: usize,
) -> Vec<u8> {
    // Newest first; a stable sort keeps equal starts in trace-ID order.
    placed.sort_by_key(|p| std::cmp::Reverse(p.0));
    let mut hashes: Vec<Option<u64>> = vec![None; strings.len()];
    let mut hash = |id: u32| {
        *hashes[id as usize]
            .get_or_insert_with(|| blocks::text_hash(strings[id as usize].as_bytes()))
    };
    let path = Path::new("(sidecar being written)");
    let mut digests = Vec::new();
    let mut frames: Vec<u8> = Vec::new();
    let mut decoded = Vec::new();
    // A string's place in the table of the block being written.
    let mut local = vec![0u32; strings.len()];
    for block in placed.chunks(block_parts.max(1)) {
        decoded.clear();
        let mut used: Vec<u32> = Vec::new();
        for &(_, at, len) in block {
            let mut r = Reader {
                path,
                buf: &parts[at..at + len],
                at: 0,
            };
            let part =
                decode_part(&mut r, strings.len()).expect("parts encoded by put_part decode");
            strings_of(&part, &mut used);
            decoded.push(part);
        }
        used.sort_unstable();
        used.dedup();
        let mut d = blocks::digest_of(&decoded, &mut hash, |id| strings[id as usize].as_str());
        // The block's parts name its strings by their place in its own
        // table, which keeps the order of the sidecar's.
        for (i, &id) in used.iter().enumerate() {
            local[id as usize] = i as u32;
        }
        let mut encoded = Vec::with_capacity(block.iter().map(|p| p.2).sum::<usize>());
        let mut lens = Vec::with_capacity(block.len());
        for part in &mut decoded {
            remap_part(part, |id| local[id as usize]);
            let at = encoded.len();
            put_part(&mut encoded, part);
            lens.push(encoded.len() - at);
        }
        let mut body = Vec::with_capacity(encoded.len() + 2 * lens.len() + used.len() * 16);
        put_varint(&mut body, used.len() as u64);
        for &id in &used {
            put_varint(&mut body, u64::from(id));
            put_varint(&mut body, strings[id as usize].len() as u64);
            body.extend_from_slice(strings[id as usize].as_bytes());
        }
        put_varint(&mut body, block.len() as u64);
        put_columns(&mut body, &decoded);
        // The head (strings, columns) and the rest (the parts) are two
        // frames one after the other: a key's values inflate the head alone.
        let mut rest = Vec::with_capacity(encoded.len() + 2 * lens.len());
        for len in lens {
            put_varint(&mut rest, len as u64);
        }
        rest.extend_from_slice(&encoded);
        let mut frame =
            zstd::bulk::compress(&body, ZSTD_LEVEL).expect("zstd compresses into memory");
        d.head_len = frame.len() as u32;
        d.head_crc = crc32c::crc32c(&frame);
        frame.extend(zstd::bulk::compress(&rest, ZSTD_LEVEL).expect("zstd compresses into memory"));
        d.offset = frames.len() as u64;
        d.frame_len = frame.len() as u32;
        d.body_len = (body.len() + rest.len()) as u32;
        d.crc = crc32c::crc32c(&frame);
        frames.extend_from_slice(&frame);
        digests.push(d);
    }
    let mut digest = Vec::with_capacity(16 + digests.len() * 64);
    put_varint(&mut digest, strings.len() as u64);
    put_varint(&mut digest, digests.len() as u64);
    for d in &digests {
        digest.extend_from_slice(&d.max_start.to_le_bytes());
        digest.extend_from_slice(&d.min_start.to_le_bytes());
        digest.extend_from_slice(&d.max_end.to_le_bytes());
        put_varint(&mut digest, u64::from(d.parts));
        put_varint(&mut digest, d.offset);
        put_varint(&mut digest, u64::from(d.frame_len));
        put_varint(&mut digest, u64::from(d.body_len));
        digest.extend_from_slice(&d.crc.to_le_bytes());
        put_varint(&mut digest, u64::from(d.head_len));
        digest.extend_from_slice(&d.head_crc.to_le_bytes());
        digest.push(d.kinds);
        digest.push(d.flags);
        put_varint(&mut digest, d.bloom.words().len() as u64);
        for w in d.bloom.words() {
            digest.extend_from_slice(&w.to_le_bytes());
        }
        put_varint(&mut digest, d.tags.len() as u64);
        for t in &d.tags {
            digest.push(t.scope as u8 | (t.kind as u8) << 4);
            put_str(&mut digest, &t.key);
            match &t.values {
                None => put_varint(&mut digest, 0),
                Some(values) => {
                    put_varint(&mut digest, values.len() as u64 + 1);
                    for v in values.iter() {
                        put_str(&mut digest, v);
                    }
                }
            }
        }
    }
    let digest_frame =
        zstd::bulk::compress(&digest, ZSTD_LEVEL).expect("zstd compresses into memory");
    let mut out = Vec::with_capacity(HEAD_BYTES + digest_frame.len() + frames.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(digest_frame.len() as u32).to_le_bytes());
    out.extend_from_slice(&(digest.len() as u32).to_le_bytes());
    let mut crc = crc32c::crc32c(&out[..16]);
    crc = crc32c::crc32c_append(crc, &digest_frame);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&digest_frame);
    out.extend_from_slice(&frames);
    out
}

/// The marker byte of a block's services column, where a key's column has
/// its tags' scope-and-type byte.
const SERVICES_COLUMN: u8 = 0xff;

/// Appends a block's columns (`docs/FORMAT.md`): the services of each of its
/// `parts` (strings as places in the block's table), then the values of each
/// part for every key of which one (scope, type) has more values in the
/// block than its digest lists.
fn put_columns(out: &mut Vec<u8>, parts: &[TraceSummary]) {
    let mut column = Vec::with_capacity(parts.len() * 4);
    let mut places = Vec::new();
    let mut services: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
    for (i, p) in parts.iter().enumerate() {
        for o in &p.ops {
            let bits = services
                .entry(o.service)
                .or_insert_with(|| vec![0; parts.len().div_ceil(8)]);
            bits[i / 8] |= 1 << (i % 8);
        }
    }
    for (service, bits) in &services {
        put_varint(&mut column, u64::from(*service));
        column.extend_from_slice(bits);
    }
    let mut distinct: std::collections::BTreeMap<(u32, u8), Vec<u32>> = Default::default();
    for p in parts {
        for g in p.tags.iter().filter(|g| g.kind != ValueKind::Unindexed) {
            distinct
                .entry((g.key, tag_byte(g)))
                .or_default()
                .push(g.value);
        }
    }
    for values in distinct.values_mut() {
        values.sort_unstable();
        values.dedup();
    }
    // The keys with a (scope, type) of too many values to list, and with
    // them every other (scope, type) of the same key.
    let wide: HashSet<u32> = distinct
        .iter()
        .filter(|(_, values)| values.len() > blocks::DIGEST_VALUES)
        .map(|(&(key, _), _)| key)
        .collect();
    // A part that ends before it starts is left out of some windows that
    // hold its start, so its block has no key columns: it is read part by
    // part.
    let backwards = parts.iter().any(|p| p.end_unix_nano < p.start_unix_nano);
    let keys: Vec<(u32, u8)> = distinct
        .keys()
        .filter(|(key, _)| !backwards && wide.contains(key))
        .copied()
        .collect();
    put_varint(out, 1 + keys.len() as u64);
    out.push(SERVICES_COLUMN);
    put_varint(out, column.len() as u64);
    out.extend_from_slice(&column);
    for &(key, byte) in &keys {
        column.clear();
        for p in parts {
            places.clear();
            places.extend(
                p.tags
                    .iter()
                    .filter(|g| g.key == key && tag_byte(g) == byte)
                    .map(|g| g.value),
            );
            places.sort_unstable();
            places.dedup();
            put_places(&mut column, &places);
        }
        out.push(byte);
        put_varint(out, u64::from(key));
        put_varint(out, column.len() as u64);
        out.extend_from_slice(&column);
    }
}

/// A tag's scope-and-type byte, as a part holds it.
fn tag_byte(g: &Tag) -> u8 {
    g.scope as u8 | (g.kind as u8) << 4
}

/// A count and that many string places.
fn put_places(out: &mut Vec<u8>, places: &[u32]) {
    put_varint(out, places.len() as u64);
    for &p in places {
        put_varint(out, u64::from(p));
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Every string index `part` holds, appended to `out`.
fn strings_of(part: &TraceSummary, out: &mut Vec<u32>) {
    if let Some((s, n)) = part.root {
        out.extend([s, n]);
    }
    for o in &part.ops {
        out.extend([o.service, o.name]);
    }
    for g in &part.tags {
        out.extend([g.key, g.value]);
    }
    for e in &part.edges {
        out.extend([e.parent, e.child]);
    }
    out.extend(part.orphans.iter().map(|o| o.1));
}

/// Appends one trace summary, as the `traces` of a body hold it.
pub(super) fn put_part(out: &mut Vec<u8>, t: &TraceSummary) {
    out.extend_from_slice(&t.trace_id.0);
    out.extend_from_slice(&t.start_unix_nano.to_le_bytes());
    put_varint(out, t.end_unix_nano.wrapping_sub(t.start_unix_nano));
    put_varint(out, u64::from(t.span_count));
    put_varint(out, u64::from(t.error_count));
    match t.root {
        None => put_varint(out, 0),
        Some((s, n)) => {
            put_varint(out, u64::from(s) + 1);
            put_varint(out, u64::from(n));
        }
    }
    put_ops_tags_edges(out, t);
    put_varint(out, t.orphans.len() as u64);
    for (id, service) in &t.orphans {
        out.extend_from_slice(id);
        put_varint(out, u64::from(*service));
    }
}

/// A trace summary's operations, tags and edges.
fn put_ops_tags_edges(out: &mut Vec<u8>, t: &TraceSummary) {
    put_varint(out, t.ops.len() as u64);
    for o in &t.ops {
        put_varint(out, u64::from(o.service));
        put_varint(out, u64::from(o.name));
        out.push(o.kind & 0x7f | u8::from(o.error) << 7);
    }
    put_varint(out, t.tags.len() as u64);
    for g in &t.tags {
        out.push(tag_byte(g));
        put_varint(out, u64::from(g.key));
        put_varint(out, u64::from(g.value));
    }
    put_varint(out, t.edges.len() as u64);
    for e in &t.edges {
        put_varint(out, u64::from(e.parent));
        put_varint(out, u64::from(e.child));
        put_varint(out, u64::from(e.calls));
    }
}

/// Reads bytes of a sidecar, refusing anything that does not add up.
struct Reader<'a> {
    path: &'a Path,
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn err(&self, reason: &str) -> Error {
        corrupt(self.path, self.at as u64, reason)
    }

    #[inline]
    fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(self.err("truncated"));
        };
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }

    #[inline]
    fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    #[inline]
    fn varint(&mut self) -> Result<u64> {
        // Most values (string indices, counts, small numbers) take one byte.
        if let Some(&byte) = self.buf.get(self.at) {
            if byte & 0x80 == 0 {
                self.at += 1;
                return Ok(u64::from(byte));
            }
        }
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.bytes(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.err("varint longer than 10 bytes"))
    }

    /// A count of items each at least `min_bytes` long: bounded by what is left.
    #[inline]
    fn count(&mut self, min_bytes: usize) -> Result<usize> {
        let n = self.varint()?;
        let left = (self.buf.len() - self.at) as u64;
        if n.saturating_mul(min_bytes as u64) > left {
            return Err(self.err("count larger than the bytes left"));
        }
        Ok(n as usize)
    }

    #[inline]
    fn u32(&mut self) -> Result<u32> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.err("value over 32 bits"))
    }

    /// A length-prefixed UTF-8 string.
    fn text(&mut self) -> Result<Box<str>> {
        let len = self.count(1)?;
        let at = self.at;
        let bytes = self.bytes(len)?;
        std::str::from_utf8(bytes)
            .map(Into::into)
            .map_err(|_| corrupt(self.path, at as u64, "string is not UTF-8"))
    }

    /// A string index below `strings`.
    #[inline]
    fn string(&mut self, strings: usize) -> Result<u32> {
        let v = self.u32()?;
        if v as usize >= strings {
            return Err(self.err("string index out of range"));
        }
        Ok(v)
    }
}

/// A sidecar's digest, parsed: its string count and block directory.
pub(super) struct Digest {
    pub(super) strings: usize,
    pub(super) blocks: Vec<BlockDigest>,
}

/// Checks the head of a sidecar (its first [`HEAD_BYTES`]) and returns the
/// length of the digest's frame that follows it.
fn check_head(path: &Path, head: &[u8]) -> Result<usize> {
    if head.len() < 12 || &head[..8] != MAGIC {
        return Err(corrupt(path, 0, "not an index sidecar (bad magic)"));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            file: path.to_path_buf(),
            version,
            supported: VERSION,
        });
    }
    if head.len() < HEAD_BYTES {
        return Err(corrupt(path, 12, "truncated"));
    }
    let frame_len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    if frame_len > MAX_BODY_BYTES {
        return Err(corrupt(path, 12, "digest over 1 GiB"));
    }
    Ok(frame_len as usize)
}

/// Parses the digest: `head` is the sidecar's first [`HEAD_BYTES`], `frame`
/// the digest's frame after it, `blocks_len` the bytes after the frame.
fn parse_digest(path: &Path, head: &[u8], frame: &[u8], blocks_len: u64) -> Result<Digest> {
    let len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes"));
    let expected = u32::from_le_bytes(head[20..24].try_into().expect("4 bytes"));
    let actual = crc32c::crc32c_append(crc32c::crc32c(&head[..16]), frame);
    if expected != actual {
        return Err(Error::ChecksumMismatch {
            file: path.to_path_buf(),
            offset: 0,
            expected,
            actual,
        });
    }
    if len > MAX_BODY_BYTES {
        return Err(corrupt(path, 16, "digest over 1 GiB"));
    }
    let body = zstd::bulk::decompress(frame, len as usize)
        .ok()
        .filter(|b| b.len() == len as usize)
        .ok_or_else(|| {
            corrupt(
                path,
                HEAD_BYTES as u64,
                "digest does not inflate to its length",
            )
        })?;
    let mut r = Reader {
        path,
        buf: &body,
        at: 0,
    };
    let strings = usize::try_from(r.u32()?).expect("u32 fits");
    let n = r.count(30)?;
    let mut blocks: Vec<BlockDigest> = Vec::with_capacity(n);
    for _ in 0..n {
        let max_start = r.u64()?;
        let min_start = r.u64()?;
        let max_end = r.u64()?;
        let parts = r.u32()?;
        let offset = r.varint()?;
        let frame_len = r.u32()?;
        let body_len = r.u32()?;
        let crc = u32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes"));
        let head_len = r.u32()?;
        let head_crc = u32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes"));
        if head_len == 0 || head_len > frame_len {
            return Err(r.err("block head outside its frames"));
        }
        let kinds = r.bytes(1)?[0];
        let flags = r.bytes(1)?[0];
        let words = r.count(8)?;
        let words: Box<[u64]> = (0..words).map(|_| r.u64()).collect::<Result<_>>()?;
        let bloom =
            Bloom::from_words(words).ok_or_else(|| r.err("filter length is not a power of two"))?;
        let k = r.count(3)?;
        let mut tags = Vec::with_capacity(k);
        for _ in 0..k {
            let (scope, kind) = scope_kind(&mut r)?;
            let key = r.text()?;
            let values = match r.varint()? {
                0 => None,
                n if n as usize > blocks::DIGEST_VALUES + 1 => {
                    return Err(r.err("more values listed than a digest lists"))
                }
                n => Some(
                    (1..n)
                        .map(|_| r.text())
                        .collect::<Result<Box<[Box<str>]>>>()?,
                ),
            };
            tags.push(DigestTag {
                scope,
                kind,
                key,
                values,
            });
        }
        let fits = offset
            .checked_add(u64::from(frame_len))
            .is_some_and(|end| end <= blocks_len);
        if !fits || body_len > MAX_BODY_BYTES || parts == 0 {
            return Err(r.err("block out of the file's bounds or empty"));
        }
        let in_order =
            min_start <= max_start && blocks.last().is_none_or(|prev| prev.min_start >= max_start);
        if !in_order {
            return Err(r.err("blocks out of time order"));
        }
        blocks.push(BlockDigest {
            max_start,
            min_start,
            max_end,
            parts,
            offset,
            frame_len,
            body_len,
            crc,
            head_len,
            head_crc,
            kinds,
            flags,
            bloom,
            tags,
        });
    }
    if r.at != body.len() {
        return Err(r.err("bytes left over after the digest"));
    }
    Ok(Digest { strings, blocks })
}

/// The digest of a whole sidecar held in memory, and where its blocks start.
fn digest_of_file(path: &Path, file: &[u8]) -> Result<(Digest, usize)> {
    let frame_len = check_head(path, file)?;
    let base = HEAD_BYTES + frame_len;
    if file.len() < base {
        return Err(corrupt(path, HEAD_BYTES as u64, "truncated digest"));
    }
    let digest = parse_digest(
        path,
        &file[..HEAD_BYTES],
        &file[HEAD_BYTES..base],
        (file.len() - base) as u64,
    )?;
    Ok((digest, base))
}

/// Block `d` of a sidecar held whole, inflated.
fn inflate_block(path: &Path, file: &[u8], base: usize, d: &BlockDigest) -> Result<Vec<u8>> {
    let at = base + d.offset as usize;
    inflate_frame(path, at as u64, &file[at..at + d.frame_len as usize], d)
}

/// The body of block `d` from its `frame`, found at `at` in the sidecar,
/// checked against the digest's checksum and length.
pub(super) fn inflate_frame(
    path: &Path,
    at: u64,
    frame: &[u8],
    d: &BlockDigest,
) -> Result<Vec<u8>> {
    if crc32c::crc32c(frame) != d.crc {
        return Err(corrupt(path, at, "block checksum mismatch"));
    }
    inflate(frame, d.body_len as usize)
        .ok()
        .filter(|b| b.len() == d.body_len as usize)
        .ok_or_else(|| corrupt(path, at, "block does not inflate to its length"))
}

/// The head of block `d` (its strings and columns) from its first frame,
/// `head` (the digest's `head_len` bytes at `at` in the sidecar), checked
/// against the digest's checksum and inflated.
pub(super) fn inflate_head(path: &Path, at: u64, head: &[u8], d: &BlockDigest) -> Result<Vec<u8>> {
    if crc32c::crc32c(head) != d.head_crc {
        return Err(corrupt(path, at, "block head checksum mismatch"));
    }
    let bad = || corrupt(path, at, "block head does not inflate to its length");
    if zstd::zstd_safe::find_frame_compressed_size(head) != Ok(head.len()) {
        return Err(bad());
    }
    let len = match zstd::zstd_safe::get_frame_content_size(head) {
        Ok(Some(len)) if len <= u64::from(d.body_len) => len as usize,
        _ => return Err(bad()),
    };
    inflate(head, len)
        .ok()
        .filter(|b| b.len() == len)
        .ok_or_else(bad)
}

/// The zstd `frames` inflated into at most `len` bytes, with this thread's
/// context.
fn inflate(frames: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
    INFLATE.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = zstd::bulk::Decompressor::new().ok();
        }
        match cell.as_mut() {
            Some(z) => z.decompress(frames, len),
            None => zstd::bulk::decompress(frames, len),
        }
    })
}

thread_local! {
    // A context per thread: making one for every block read took as long
    // as a small block's inflating.
    static INFLATE: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// A block's body split up: its strings (ascending index, text) and where
/// each part lies in the body.
struct BlockBody<'a> {
    /// Checked to be UTF-8 when read ([`BlockBody::text`]): a key's values
    /// read from the columns check only those they give.
    strings: Vec<(u32, &'a [u8])>,
    columns: Vec<Column>,
    /// Empty when only the head was read.
    parts: Vec<Range<usize>>,
    /// Parts in the block.
    count: usize,
}

impl<'a> BlockBody<'a> {
    /// The place of `text` in the block's strings.
    fn place(&self, text: &str) -> Option<u32> {
        self.strings
            .iter()
            .position(|s| s.1 == text.as_bytes())
            .map(|i| i as u32)
    }

    /// The text of the block's string `i`, in the block at `at`.
    fn text(&self, path: &Path, at: u64, i: usize) -> Result<&'a str> {
        std::str::from_utf8(self.strings[i].1).map_err(|_| corrupt(path, at, "string is not UTF-8"))
    }
}

/// A column of a block's body: the services of each part, or the values of
/// each part for one key, in one scope and type.
struct Column {
    /// `None`: the services column.
    key: Option<(u32, TagScope, ValueKind)>,
    /// Where its bytes lie in the body.
    data: Range<usize>,
}

fn split_block<'a>(
    path: &'a Path,
    at: u64,
    body: &'a [u8],
    ns: usize,
    parts: u32,
) -> Result<BlockBody<'a>> {
    let (mut block, mut r) = split_head(path, at, body, ns, parts)?;
    // Each part is its length and at least 31 bytes.
    if u64::from(parts) * 32 > (body.len() - r.at) as u64 {
        return Err(corrupt(
            path,
            at + r.at as u64,
            "more parts than the block's bytes hold",
        ));
    }
    let mut lens = Vec::with_capacity(parts as usize);
    for _ in 0..parts {
        let len = r.count(1)?;
        // A part is read for its trace ID and start before it is decoded.
        if len < 24 {
            return Err(r.err("part shorter than its trace ID and start"));
        }
        lens.push(len);
    }
    block.parts.reserve(parts as usize);
    for len in lens {
        let from = r.at;
        r.bytes(len)?;
        block.parts.push(from..r.at);
    }
    if r.at != body.len() {
        return Err(corrupt(
            path,
            at + r.at as u64,
            "bytes left over after the last part",
        ));
    }
    Ok(block)
}

/// The strings and columns of a block, from the start of its `body` (or its
/// head alone), and a reader at the first byte after them.
fn split_head<'a>(
    path: &'a Path,
    at: u64,
    body: &'a [u8],
    ns: usize,
    parts: u32,
) -> Result<(BlockBody<'a>, Reader<'a>)> {
    let err = |r: &Reader<'_>, reason: &str| corrupt(path, at + r.at as u64, reason);
    let mut r = Reader {
        path,
        buf: body,
        at: 0,
    };
    let n = r.count(2)?;
    let mut strings: Vec<(u32, &'a [u8])> = Vec::with_capacity(n);
    for _ in 0..n {
        let id = r.string(ns)?;
        if strings.last().is_some_and(|&(prev, _)| prev >= id) {
            return Err(err(&r, "block strings out of order"));
        }
        let len = r.count(1)?;
        strings.push((id, &body[r.at..r.at + len]));
        r.at += len;
    }
    if r.count(0)? != parts as usize {
        return Err(err(
            &r,
            "block holds another number of parts than its digest says",
        ));
    }
    let mut columns = Vec::new();
    for _ in 0..r.count(2)? {
        let key = if r.buf.get(r.at) == Some(&SERVICES_COLUMN) {
            r.at += 1;
            None
        } else {
            let (scope, kind) = scope_kind(&mut r)?;
            Some((r.string(n)?, scope, kind))
        };
        let len = r.count(1)?;
        let from = r.at;
        r.bytes(len)?;
        columns.push(Column {
            key,
            data: from..r.at,
        });
    }
    let block = BlockBody {
        strings,
        columns,
        parts: Vec::new(),
        count: parts as usize,
    };
    Ok((block, r))
}

/// One part at `range` of a block's `body`, checked to fill it exactly.
fn part_at(path: &Path, body: &[u8], range: Range<usize>, ns: usize) -> Result<TraceSummary> {
    let mut r = Reader {
        path,
        buf: &body[..range.end],
        at: range.start,
    };
    let part = decode_part(&mut r, ns)?;
    if r.at != range.end {
        return Err(r.err("part shorter than its length"));
    }
    Ok(part)
}

/// A block's parts as a set of their own, with the block's strings as its
/// table (`ns`: strings in the sidecar's table, which the block's name).
pub(super) fn decode_block(
    path: &Path,
    at: u64,
    body: &[u8],
    ns: usize,
    parts: u32,
) -> Result<SummarySet> {
    let block = split_block(path, at, body, ns, parts)?;
    let local = block.strings.len();
    let mut traces = Vec::with_capacity(block.parts.len());
    for range in block.parts.iter().cloned() {
        traces.push(part_at(path, body, range, local)?);
    }
    let strings = (0..local)
        .map(|i| block.text(path, at, i).map(str::to_owned))
        .collect::<Result<_>>()?;
    Ok(SummarySet::new(strings, traces))
}

/// A block's parts read one at a time, newest start first (equal starts in
/// trace-ID order): a search that stops after a few parts of a block
/// decodes those alone.
#[derive(Debug)]
pub struct BlockParts {
    path: PathBuf,
    body: Vec<u8>,
    /// Where each string of the block's table lies in `body`.
    strings: Vec<Range<usize>>,
    /// Where each part lies in `body`, in the block's order.
    parts: Vec<Range<usize>>,
}

impl BlockParts {
    /// The parts of block `body`, found at `at` in the sidecar at `path`
    /// (`ns`: strings in its table; `parts`: the digest's count).
    pub(super) fn new(path: &Path, at: u64, body: Vec<u8>, ns: usize, parts: u32) -> Result<Self> {
        let block = split_block(path, at, &body, ns, parts)?;
        let base = body.as_ptr() as usize;
        let strings = block
            .strings
            .iter()
            .map(|s| {
                let from = s.1.as_ptr() as usize - base;
                from..from + s.1.len()
            })
            .collect();
        let parts = block.parts;
        Ok(BlockParts {
            path: path.to_path_buf(),
            body,
            strings,
            parts,
        })
    }

    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Part `i`'s start and trace ID, read without decoding it.
    pub fn start_and_id(&self, i: usize) -> (u64, TraceId) {
        let at = self.parts[i].start;
        let id = self.body[at..at + 16]
            .try_into()
            .expect("a part is over 24 bytes");
        let start = self.body[at + 16..at + 24]
            .try_into()
            .expect("a part is over 24 bytes");
        (u64::from_le_bytes(start), TraceId(id))
    }

    /// Part `i`, its strings named by their place in the block's table.
    pub fn part(&self, i: usize) -> Result<TraceSummary> {
        part_at(
            &self.path,
            &self.body,
            self.parts[i].clone(),
            self.strings.len(),
        )
    }

    /// The place of `text` in the block's table.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.strings
            .iter()
            .position(|r| &self.body[r.clone()] == text.as_bytes())
            .map(|i| i as u32)
    }

    /// About how many heap bytes it holds.
    pub fn heap_bytes(&self) -> usize {
        self.body.capacity() + (self.strings.capacity() + self.parts.capacity()) * 16
    }
}

/// Calls `f` once with each distinct value (and its type) of the attribute
/// `key` (in `scope`, or either) held by a part of a block's `body` that may
/// lie in `start..=end` (0: open) and meets every one of `needs` on its own
/// (as [`super::tag_values`] decides), without building the parts: listing
/// a key's values reads only each part's times, operations and tags, and
/// allocates nothing per part. Values the index does not keep are left out.
#[allow(clippy::too_many_arguments)]
pub(super) fn block_tag_values(
    path: &Path,
    at: u64,
    body: &[u8],
    ns: usize,
    parts: u32,
    scope: Option<TagScope>,
    key: &str,
    (start, end): (u64, u64),
    needs: &[OpNeed],
    f: impl FnMut(&str, ValueKind),
) -> Result<()> {
    let block = split_block(path, at, body, ns, parts)?;
    let local_id = |text: &str| block.place(text);
    let Some(k) = local_id(key) else {
        return Ok(());
    };
    let needs: Vec<LocalNeed<'_>> = needs.iter().map(|n| LocalNeed::new(n, local_id)).collect();
    if needs.iter().any(|n| n.ops.is_some() && n.unknown) {
        return Ok(());
    }
    let local = block.strings.len();
    // Per string of the block, a bit per value type already met.
    let mut met = vec![0u8; local];
    // The part's values of the key, kept until its needs are decided.
    let mut found: Vec<(u32, ValueKind)> = Vec::new();
    // Per need: its operation, and each of its attributes, met by the part.
    let mut op_met = vec![false; needs.len()];
    let mut tag_met: Vec<Vec<bool>> = needs.iter().map(|n| vec![false; n.tags.len()]).collect();
    for range in block.parts.iter().cloned() {
        let mut r = Reader {
            path,
            buf: &body[..range.end],
            at: range.start,
        };
        r.bytes(16)?;
        let first = r.u64()?;
        let last = first.wrapping_add(r.varint()?);
        if (start != 0 && last < start) || (end != 0 && first > end) {
            continue;
        }
        r.u32()?;
        let errors = r.u32()?;
        if errors == 0 && needs.iter().any(|n| n.need.error) {
            continue;
        }
        if r.u32()? != 0 {
            r.string(local)?;
        }
        for (i, n) in needs.iter().enumerate() {
            op_met[i] = n.ops.is_none();
        }
        for _ in 0..r.count(3)? {
            let (service, name) = (r.string(local)?, r.string(local)?);
            let kind = r.bytes(1)?[0] & 0x7f;
            for (i, n) in needs.iter().enumerate() {
                op_met[i] = op_met[i] || n.op_meets(service, name, kind);
            }
        }
        // A part without a need's operation is passed over unread.
        if !op_met.iter().all(|&m| m) {
            continue;
        }
        let count = r.count(3)?;
        // A part whose tags were cut may hold any attribute.
        let cut = count >= MAX_TAGS_PER_TRACE;
        for met in &mut tag_met {
            met.iter_mut().for_each(|m| *m = cut);
        }
        found.clear();
        for _ in 0..count {
            let (s, kind) = scope_kind(&mut r)?;
            let (g, v) = (r.string(local)?, r.string(local)?);
            if g == k && kind != ValueKind::Unindexed && scope.is_none_or(|x| x == s) {
                found.push((v, kind));
            }
            for (n, met) in needs.iter().zip(&mut tag_met) {
                for (t, m) in n.tags.iter().zip(met.iter_mut()) {
                    *m = *m || t.held_by(s, g, v, kind);
                }
            }
        }
        // Errors and operations were checked above: what is left are the
        // attributes.
        if tag_met.iter().all(|met| met.iter().all(|&m| m)) {
            for &(v, kind) in &found {
                met[v as usize] |= 1 << kind as u8;
            }
        }
    }
    each_met(path, at, &block, &met, f)?;
    Ok(())
}

/// As [`block_tag_values`] for a block every part of which lies in the
/// window and `needs` that each name a service alone, from the block's
/// `head` (its first frame, [`inflate_head`]): the key's columns are read
/// instead of the parts. `false`, with `f` not called, when the block has
/// no column for the key or a need names more than a service.
#[allow(clippy::too_many_arguments)]
pub(super) fn block_column_values(
    path: &Path,
    at: u64,
    head: &[u8],
    ns: usize,
    parts: u32,
    scope: Option<TagScope>,
    key: &str,
    needs: &[OpNeed],
    f: impl FnMut(&str, ValueKind),
) -> Result<bool> {
    let (block, r) = split_head(path, at, head, ns, parts)?;
    if r.at != head.len() {
        return Err(r.err("bytes left over after the block's columns"));
    }
    let local_id = |text: &str| block.place(text);
    let Some(k) = local_id(key) else {
        return Ok(true);
    };
    let needs: Vec<LocalNeed<'_>> = needs.iter().map(|n| LocalNeed::new(n, local_id)).collect();
    let Some(services) = needs
        .iter()
        .map(LocalNeed::service_alone)
        .collect::<Option<Vec<u32>>>()
    else {
        // A service the block lacks is no place in its table.
        if needs.iter().any(|n| n.ops.is_some() && n.unknown) {
            return Ok(true);
        }
        return Ok(false);
    };
    let mut met = vec![0u8; block.strings.len()];
    if !column_values(path, at, head, &block, k, scope, &services, &mut met)? {
        return Ok(false);
    }
    each_met(path, at, &block, &met, f)?;
    Ok(true)
}

/// Calls `f` with each (string, type) of a block (at `at`) set in `met`.
fn each_met(
    path: &Path,
    at: u64,
    block: &BlockBody<'_>,
    met: &[u8],
    mut f: impl FnMut(&str, ValueKind),
) -> Result<()> {
    for (v, &kinds) in met.iter().enumerate().filter(|m| *m.1 != 0) {
        let text = block.text(path, at, v)?;
        for code in 0..8u8 {
            if kinds & (1 << code) != 0 {
                let kind = ValueKind::from_code(code).expect("a code set from a ValueKind");
                f(text, kind);
            }
        }
    }
    Ok(())
}

/// Sets in `met` the values of the key at place `k` (in `scope`, or either)
/// of every part of `block` that has each of `services` (places), read from
/// the block's columns; `false`, with nothing set, when the key has none.
#[allow(clippy::too_many_arguments)]
fn column_values(
    path: &Path,
    at: u64,
    body: &[u8],
    block: &BlockBody<'_>,
    k: u32,
    scope: Option<TagScope>,
    services: &[u32],
    met: &mut [u8],
) -> Result<bool> {
    let reader = |c: &Column| Reader {
        path,
        buf: &body[..c.data.end],
        at: c.data.start,
    };
    if !block
        .columns
        .iter()
        .any(|c| c.key.is_some_and(|(key, ..)| key == k))
    {
        return Ok(false);
    }
    let Some(held) = block.columns.iter().find(|c| c.key.is_none()) else {
        return Err(corrupt(path, at, "block without its services column"));
    };
    let local = block.strings.len();
    // The parts that have every service, a bit each; `None`: all.
    let mut meets: Option<Vec<u8>> = None;
    if !services.is_empty() {
        let bytes = block.count.div_ceil(8);
        let mut r = reader(held);
        let mut found = vec![false; services.len()];
        let mut mask = vec![0xffu8; bytes];
        let mut last = None;
        while r.at < r.buf.len() {
            let service = r.string(local)?;
            if last.is_some_and(|l| l >= service) {
                return Err(r.err("services column out of order"));
            }
            last = Some(service);
            let bits = r.bytes(bytes)?;
            if let Some(i) = services.iter().position(|&s| s == service) {
                found[i] = true;
                mask.iter_mut().zip(bits).for_each(|(m, b)| *m &= b);
            }
        }
        if !found.iter().all(|&f| f) || mask.iter().all(|&m| m == 0) {
            // No part has every service.
            return Ok(true);
        }
        meets = Some(mask);
    }
    let mut columns: Vec<(ValueKind, Reader<'_>)> = block
        .columns
        .iter()
        .filter_map(|c| match c.key {
            Some((key, s, kind))
                if key == k && kind != ValueKind::Unindexed && scope.is_none_or(|x| x == s) =>
            {
                Some((kind, reader(c)))
            }
            _ => None,
        })
        .collect();
    for i in 0..block.count {
        let part_meets = meets
            .as_ref()
            .is_none_or(|m| m[i / 8] & (1 << (i % 8)) != 0);
        for (kind, r) in &mut columns {
            for _ in 0..r.count(1)? {
                let v = r.string(local)?;
                if part_meets {
                    met[v as usize] |= 1 << *kind as u8;
                }
            }
        }
    }
    if let Some((_, r)) = columns.iter().find(|(_, r)| r.at != r.buf.len()) {
        return Err(r.err("column longer than its block's parts"));
    }
    Ok(true)
}

/// A need of a tag-values query with its strings looked up in one block's
/// table, to be checked against the block's parts where they lie.
struct LocalNeed<'a> {
    need: &'a OpNeed,
    /// The (service, name) an operation must have (`None` in either: any);
    /// `None` when the need names no operation.
    ops: Option<(Option<u32>, Option<u32>)>,
    /// A service or name the need names is not in the block: no part meets it.
    unknown: bool,
    tags: Vec<LocalTag<'a>>,
}

/// An attribute a need names, with its key and value looked up.
struct LocalTag<'a> {
    tag: &'a super::TagNeed,
    key: Option<u32>,
    value: Option<u32>,
}

impl<'a> LocalNeed<'a> {
    fn new(need: &'a OpNeed, id: impl Fn(&str) -> Option<u32>) -> LocalNeed<'a> {
        let mut unknown = false;
        let mut look = |s: &Option<String>| match s {
            None => None,
            Some(s) => {
                let found = id(s);
                unknown |= found.is_none();
                found
            }
        };
        let (service, name) = (look(&need.service), look(&need.name));
        let names_op = need.service.is_some() || need.name.is_some() || need.kind.is_some();
        LocalNeed {
            need,
            ops: names_op.then_some((service, name)),
            unknown,
            tags: need
                .tags
                .iter()
                .map(|t| LocalTag {
                    tag: t,
                    key: id(&t.key),
                    value: id(&t.value),
                })
                .collect(),
        }
    }

    /// The service (its place) the need names, when it names nothing else.
    fn service_alone(&self) -> Option<u32> {
        match self.ops {
            Some((Some(service), None)) if self.need.names_a_service_alone() => Some(service),
            _ => None,
        }
    }

    /// Whether an operation of a part meets the need's operation.
    fn op_meets(&self, service: u32, name: u32, kind: u8) -> bool {
        let Some((s, n)) = self.ops else {
            return true;
        };
        !self.unknown
            && (self.need.service.is_none() || s == Some(service))
            && (self.need.name.is_none() || n == Some(name))
            && self.need.kind.is_none_or(|k| k == kind)
    }
}

impl LocalTag<'_> {
    /// Whether a part's attribute (scope, key, value, type) may be this one:
    /// a value the index did not keep may be any.
    fn held_by(&self, scope: TagScope, key: u32, value: u32, kind: ValueKind) -> bool {
        self.key == Some(key)
            && self.tag.scope.is_none_or(|s| s == scope)
            && (kind == ValueKind::Unindexed
                || (kind == self.tag.kind && self.value == Some(value)))
    }
}

/// Replaces every string index of `part` by `f` of it (the order of its
/// lists is kept: a caller whose `f` does not keep the order of the indices
/// sorts them again).
pub(super) fn remap_part(part: &mut TraceSummary, mut f: impl FnMut(u32) -> u32) {
    if let Some((s, n)) = &mut part.root {
        *s = f(*s);
        *n = f(*n);
    }
    for o in &mut part.ops {
        o.service = f(o.service);
        o.name = f(o.name);
    }
    for g in &mut part.tags {
        g.key = f(g.key);
        g.value = f(g.value);
    }
    for e in &mut part.edges {
        e.parent = f(e.parent);
        e.child = f(e.child);
    }
    for (_, s) in &mut part.orphans {
        *s = f(*s);
    }
}

/// Decodes a whole sidecar read from `path`.
pub fn decode(path: &Path, file: &[u8]) -> Result<SummarySet> {
    let mut parts = SidecarParts::from_bytes(path, file)?;
    let strings = (0..parts.strings.len() as u32)
        .map(|i| parts.str(i).to_owned())
        .collect();
    let mut traces = Vec::with_capacity(parts.order.len());
    while let Some(t) = parts.next_part()? {
        traces.push(t);
    }
    Ok(SummarySet::new(strings, traces))
}

/// Reads the digest of the sidecar of the sorted file at `table`, keeping
/// the sidecar open to read its blocks.
pub fn open_index(table: &Path) -> Result<FileIndex> {
    let path = sidecar_path(table);
    let file = fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
    let size = file.metadata().map_err(|e| Error::io(&path, e))?.len();
    let mut head = [0u8; HEAD_BYTES];
    let n = (size as usize).min(HEAD_BYTES);
    file.read_exact_at(&mut head[..n], 0)
        .map_err(|e| Error::io(&path, e))?;
    let frame_len = check_head(&path, &head[..n])?;
    let base = (HEAD_BYTES + frame_len) as u64;
    if size < base {
        return Err(corrupt(&path, HEAD_BYTES as u64, "truncated digest"));
    }
    let mut frame = vec![0u8; frame_len];
    file.read_exact_at(&mut frame, HEAD_BYTES as u64)
        .map_err(|e| Error::io(&path, e))?;
    let digest = parse_digest(&path, &head, &frame, size - base)?;
    Ok(FileIndex {
        path,
        file,
        strings: digest.strings,
        blocks: digest.blocks,
        base,
    })
}

/// A sidecar read one trace part at a time, in trace-ID order, with its
/// blocks inflated and checked up front: what a compaction reads to carry
/// the parts of its input files over to its output instead of scanning
/// their spans again. Holds the inflated blocks (strings and parts, a few
/// bytes per span), not decoded summaries.
pub struct SidecarParts {
    path: PathBuf,
    /// The blocks' bodies, one after another.
    buf: Vec<u8>,
    /// Each part's trace ID, bytes in `buf` and block, in trace-ID order.
    order: Vec<(TraceId, Range<usize>, u32)>,
    /// Per block, the sidecar's index of each of its strings.
    globals: Vec<Vec<u32>>,
    /// Parts already decoded.
    next: usize,
    /// (start, length) in `buf` of each string of the table (0, 0 for one
    /// no part uses).
    strings: Vec<(usize, usize)>,
    /// A part read past by [`SidecarParts::find`], returned next.
    peeked: Option<TraceSummary>,
}

impl SidecarParts {
    /// Reads and checks the sidecar of the sorted file at `table`.
    pub fn open(table: &Path) -> Result<SidecarParts> {
        let path = sidecar_path(table);
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        SidecarParts::from_bytes(&path, &bytes)
    }

    fn from_bytes(path: &Path, file: &[u8]) -> Result<SidecarParts> {
        let (digest, base) = digest_of_file(path, file)?;
        let ns = digest.strings;
        let mut buf = Vec::with_capacity(digest.blocks.iter().map(|d| d.body_len as usize).sum());
        let mut strings = vec![(0, 0); ns];
        let mut order = Vec::with_capacity(digest.blocks.iter().map(|d| d.parts as usize).sum());
        let mut globals = Vec::with_capacity(digest.blocks.len());
        for (b, d) in digest.blocks.iter().enumerate() {
            let body = inflate_block(path, file, base, d)?;
            let at = (base as u64) + d.offset;
            let block = split_block(path, at, &body, ns, d.parts)?;
            let shift = buf.len();
            let offset = |s: &str| s.as_ptr() as usize - body.as_ptr() as usize + shift;
            for (i, (id, _)) in block.strings.iter().enumerate() {
                let text = block.text(path, at, i)?;
                strings[*id as usize] = (offset(text), text.len());
            }
            for range in block.parts {
                let id = TraceId(
                    body[range.start..range.start + 16]
                        .try_into()
                        .expect("a part is over 16 bytes"),
                );
                order.push((id, range.start + shift..range.end + shift, b as u32));
            }
            globals.push(block.strings.iter().map(|s| s.0).collect());
            buf.extend_from_slice(&body);
        }
        order.sort_unstable_by_key(|p| p.0);
        if order.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(corrupt(path, 0, "a trace has two parts in one sidecar"));
        }
        Ok(SidecarParts {
            path: path.to_path_buf(),
            buf,
            order,
            globals,
            next: 0,
            strings,
            peeked: None,
        })
    }

    /// String `id` of the table (every index a part holds was checked).
    pub fn str(&self, id: u32) -> &str {
        let (at, len) = self.strings[id as usize];
        std::str::from_utf8(&self.buf[at..at + len]).expect("checked when opened")
    }

    /// The part of `trace_id`, if the sidecar has one, skipping the parts of
    /// smaller trace IDs. Asked in ascending trace-ID order.
    pub fn find(&mut self, trace_id: &TraceId) -> Result<Option<TraceSummary>> {
        loop {
            let part = match self.peeked.take() {
                Some(p) => p,
                None => match self.next_part()? {
                    Some(p) => p,
                    None => return Ok(None),
                },
            };
            match part.trace_id.cmp(trace_id) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Ok(Some(part)),
                std::cmp::Ordering::Greater => {
                    self.peeked = Some(part);
                    return Ok(None);
                }
            }
        }
    }

    /// The next part in trace-ID order; `None` after the last.
    fn next_part(&mut self) -> Result<Option<TraceSummary>> {
        let Some((_, range, block)) = self.order.get(self.next) else {
            return Ok(None);
        };
        let globals = &self.globals[*block as usize];
        let mut part = part_at(&self.path, &self.buf, range.clone(), globals.len())?;
        remap_part(&mut part, |i| globals[i as usize]);
        self.next += 1;
        Ok(Some(part))
    }
}

/// A tag's scope-and-type byte.
fn scope_kind(r: &mut Reader<'_>) -> Result<(TagScope, ValueKind)> {
    let byte = r.bytes(1)?[0];
    let scope = match byte & 0x0f {
        0 => TagScope::Resource,
        1 => TagScope::Span,
        _ => return Err(r.err("unknown tag scope")),
    };
    let kind = ValueKind::from_code(byte >> 4).ok_or_else(|| r.err("unknown value type"))?;
    Ok((scope, kind))
}

/// One trace part of a body with `ns` strings.
fn decode_part(r: &mut Reader<'_>, ns: usize) -> Result<TraceSummary> {
    let trace_id = TraceId(r.bytes(16)?.try_into().expect("16 bytes"));
    let start_unix_nano = r.u64()?;
    let end_unix_nano = start_unix_nano.wrapping_add(r.varint()?);
    let span_count = r.u32()?;
    let error_count = r.u32()?;
    let root = match r.u32()? {
        0 => None,
        s if (s - 1) as usize >= ns => return Err(r.err("root service out of range")),
        s => Some((s - 1, r.string(ns)?)),
    };
    let k = r.count(3)?;
    let mut ops = Vec::with_capacity(k);
    for _ in 0..k {
        let service = r.string(ns)?;
        let name = r.string(ns)?;
        let kind = r.bytes(1)?[0];
        ops.push(Op {
            service,
            name,
            kind: kind & 0x7f,
            error: kind & 0x80 != 0,
        });
    }
    let k = r.count(3)?;
    let mut tags = Vec::with_capacity(k);
    for _ in 0..k {
        let (scope, kind) = scope_kind(r)?;
        tags.push(Tag {
            scope,
            key: r.string(ns)?,
            value: r.string(ns)?,
            kind,
        });
    }
    let k = r.count(3)?;
    let mut edges = Vec::with_capacity(k);
    for _ in 0..k {
        edges.push(Edge {
            parent: r.string(ns)?,
            child: r.string(ns)?,
            calls: r.u32()?,
        });
    }
    let k = r.count(9)?;
    let mut orphans = Vec::with_capacity(k);
    for _ in 0..k {
        let id: [u8; 8] = r.bytes(8)?.try_into().expect("8 bytes");
        orphans.push((id, r.string(ns)?));
    }
    Ok(TraceSummary {
        trace_id,
        start_unix_nano,
        end_unix_nano,
        span_count,
        error_count,
        root,
        ops,
        tags,
        edges,
        orphans,
    })
}

/// Writes the sidecar of the sorted file at `table`: `.tmp` (with paced
/// writeback, as sorted files are written), fsync, rename.
/// The directory is not fsynced: a sidecar lost in a crash is rebuilt.
pub fn write(table: &Path, set: &SummarySet, block_parts: usize) -> Result<()> {
    write_file(table, &encode(set, block_parts))
}

/// [`write`] for a set already encoded part by part (see [`encode_parts`]).
pub(super) fn write_parts(
    table: &Path,
    strings: &[String],
    parts: &[u8],
    placed: Vec<(u64, usize, usize)>,
    block_parts: usize,
) -> Result<()> {
    write_file(table, &encode_parts(strings, parts, placed, block_parts))
}

fn write_file(table: &Path, bytes: &[u8]) -> Result<()> {
    let path = sidecar_path(table);
    let tmp = crate::layout::tmp_path(&path);
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        let mut writeback = Writeback::default();
        let mut len = 0;
        for step in bytes.chunks(STEP as usize) {
            f.write_all(step)?;
            len += step.len() as u64;
            writeback.wrote(&f, len)?;
        }
        f.sync_all()?;
        fs::rename(&tmp, &path)
    })();
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(&path, e)
    })
}

/// Reads and checks the sidecar of the sorted file at `table`.
pub fn read(table: &Path) -> Result<SummarySet> {
    let path = sidecar_path(table);
    let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
    decode(&path, &bytes)
}

/// Deletes the sidecar of a deleted sorted file (missing is fine).
pub fn remove_sidecar(table: &Path) {
    let path = sidecar_path(table);
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(file = %path.display(), error = %e, "deleting index sidecar"),
    }
}

/// Deletes sidecars in `tables_dir` whose sorted file is not among `live`
/// (file IDs); returns how many. Run at start-up, after recovery.
pub fn remove_orphans(tables_dir: &Path, live: &HashSet<u64>) -> Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(tables_dir).map_err(|e| Error::io(tables_dir, e))? {
        let entry = entry.map_err(|e| Error::io(tables_dir, e))?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(crate::layout::sidecar_id) else {
            continue;
        };
        if !live.contains(&id) {
            let path = entry.path();
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{group, span};

    /// `traces` traces of `i % traces`, spans starting at `i`.
    fn set(traces: u64) -> SummarySet {
        let g = group("svc");
        let spans: Vec<crate::span::Span> = (0..traces * 3)
            .map(|i| span(&g, u128::from(i % traces), i, i))
            .collect();
        let mut set = SummarySet::from_spans(&spans);
        // These payloads name no parents: give two traces cross-service
        // calls and parents in other parts.
        for t in set.traces.iter_mut().take(2) {
            t.edges.push(Edge {
                parent: 0,
                child: 0,
                calls: 3,
            });
            t.orphans.push(([7; 8], 0));
            t.tags.push(Tag {
                scope: TagScope::Span,
                key: 0,
                value: 0,
                kind: ValueKind::Int,
            });
            t.tags.sort_unstable();
        }
        set
    }

    /// Each part with its strings as text: sets whose tables differ in
    /// strings no part uses compare equal.
    fn texts(set: &SummarySet) -> Vec<String> {
        set.traces
            .iter()
            .map(|t| {
                let s = |id: u32| set.str(id).to_owned();
                format!(
                    "{:?} {} {} {} {} {:?} {:?} {:?} {:?} {:?}",
                    t.trace_id,
                    t.start_unix_nano,
                    t.end_unix_nano,
                    t.span_count,
                    t.error_count,
                    t.root.map(|(a, b)| (s(a), s(b))),
                    t.ops
                        .iter()
                        .map(|o| (s(o.service), s(o.name), o.kind))
                        .collect::<Vec<_>>(),
                    t.tags
                        .iter()
                        .map(|g| (g.scope, s(g.key), s(g.value), g.kind))
                        .collect::<Vec<_>>(),
                    t.edges
                        .iter()
                        .map(|e| (s(e.parent), s(e.child), e.calls))
                        .collect::<Vec<_>>(),
                    t.orphans.iter().map(|o| (o.0, s(o.1))).collect::<Vec<_>>(),
                )
            })
            .collect()
    }

    #[test]
    fn a_sidecar_round_trips_in_blocks_newest_first_and_older_versions_are_refused() {
        let set = set(2_500);
        assert!(
            set.traces
                .iter()
                .any(|t| !t.orphans.is_empty() && !t.edges.is_empty()),
            "the sample has orphans and edges"
        );
        let bytes = encode(&set, blocks::BLOCK_PARTS);
        let path = Path::new("x.idx");
        assert_eq!(texts(&decode(path, &bytes).expect("decodes")), texts(&set));

        let (digest, base) = digest_of_file(path, &bytes).expect("digest");
        assert_eq!(digest.blocks.len(), 3, "2500 parts in blocks of 1024");
        let starts: Vec<(u64, u64)> = digest
            .blocks
            .iter()
            .map(|b| (b.max_start, b.min_start))
            .collect();
        assert!(starts.windows(2).all(|w| w[0].1 >= w[1].0), "{starts:?}");
        assert_eq!(
            starts[0].0,
            set.traces
                .iter()
                .map(|t| t.start_unix_nano)
                .max()
                .expect("parts")
        );
        // Each block decodes alone, with just the strings its parts use.
        let mut all = Vec::new();
        for d in &digest.blocks {
            let body = inflate_block(path, &bytes, base, d).expect("block");
            let block = decode_block(path, 0, &body, digest.strings, d.parts).expect("block");
            assert!(block
                .traces
                .iter()
                .all(|t| t.start_unix_nano >= d.min_start && t.start_unix_nano <= d.max_start));
            all.extend(texts(&block));
        }
        all.sort();
        let mut expected = texts(&set);
        expected.sort();
        assert_eq!(all, expected);

        // Versions 1 to 4 keep no blocks: refused, so the file's sidecar is rebuilt.
        for version in 1..=4u32 {
            let mut old = bytes.clone();
            old[8..12].copy_from_slice(&version.to_le_bytes());
            let err = decode(path, &old).expect_err("an old version");
            assert!(
                matches!(err, Error::UnsupportedVersion { version: v, .. } if v == version),
                "{err}"
            );
        }
    }

    /// `set(traces)` with a `user` of its own on every trace (a block's
    /// too many to list) and a second service on the even ones.
    fn users(traces: u64) -> SummarySet {
        let base = set(traces);
        let mut strings = base.strings.clone();
        let mut id = |text: String| {
            strings.push(text);
            (strings.len() - 1) as u32
        };
        let (user, other) = (id("user".into()), id("other".into()));
        let mut traces = base.traces.clone();
        for (i, t) in traces.iter_mut().enumerate() {
            t.tags.push(Tag {
                scope: TagScope::Span,
                key: user,
                value: id(format!("u{i}")),
                kind: ValueKind::Str,
            });
            t.tags.sort_unstable();
            if i % 2 == 0 {
                t.ops.push(Op {
                    service: other,
                    name: other,
                    kind: 2,
                    error: false,
                });
                t.ops.sort_unstable();
            }
        }
        SummarySet::new(strings, traces)
    }

    /// The values of `user` in the only block of `bytes`, read from its
    /// head's columns when `columns`, else part by part.
    fn block_users(bytes: &[u8], columns: bool, needs: &[OpNeed]) -> Result<Vec<String>> {
        let path = Path::new("x.idx");
        let (digest, base) = digest_of_file(path, bytes)?;
        let d = &digest.blocks[0];
        let mut out = Vec::new();
        let add = |v: &str, _| out.push(v.to_owned());
        if columns {
            let at = base + d.offset as usize;
            let head = inflate_head(path, 0, &bytes[at..at + d.head_len as usize], d)?;
            let (ns, parts) = (digest.strings, d.parts);
            let read = block_column_values(path, 0, &head, ns, parts, None, "user", needs, add)?;
            assert!(read, "the columns answer");
        } else {
            let body = inflate_block(path, bytes, base, d)?;
            let (ns, parts) = (digest.strings, d.parts);
            block_tag_values(path, 0, &body, ns, parts, None, "user", (0, 0), needs, add)?;
        }
        Ok(out)
    }

    /// A column's key (`None`: the services') and where it lies in the body.
    type Placed = (Option<String>, Range<usize>);

    /// The columns of the only block of `bytes`, and its body.
    fn columns(bytes: &[u8]) -> (Vec<Placed>, Vec<u8>) {
        let path = Path::new("x.idx");
        let (digest, base) = digest_of_file(path, bytes).expect("digest");
        let d = &digest.blocks[0];
        let body = inflate_block(path, bytes, base, d).expect("block");
        let block = split_block(path, 0, &body, digest.strings, d.parts).expect("split");
        let columns = block
            .columns
            .iter()
            .map(|c| {
                let key = c
                    .key
                    .map(|k| block.text(path, 0, k.0 as usize).expect("UTF-8").to_owned());
                (key, c.data.clone())
            })
            .collect();
        (columns, body)
    }

    #[test]
    fn a_block_lists_its_many_values_of_a_key_in_a_column_as_its_parts_hold_them() {
        let set = users(300);
        let bytes = encode(&set, blocks::BLOCK_PARTS);
        let keys: Vec<Option<String>> = columns(&bytes).0.into_iter().map(|c| c.0).collect();
        assert_eq!(
            keys,
            [None, Some("user".to_owned())],
            "services, then the key"
        );
        let other = OpNeed {
            service: Some("other".into()),
            ..OpNeed::default()
        };
        for needs in [vec![], vec![other.clone()]] {
            let parts = block_users(&bytes, false, &needs).expect("parts");
            assert_eq!(block_users(&bytes, true, &needs).expect("columns"), parts);
            assert_eq!(parts.len(), if needs.is_empty() { 300 } else { 150 });
        }

        // A part that ends before it starts: no key column.
        let mut backwards = set.clone();
        backwards.traces[7].end_unix_nano = backwards.traces[7].start_unix_nano - 1;
        let bytes = encode(&backwards, blocks::BLOCK_PARTS);
        assert_eq!(columns(&bytes).0.len(), 1, "the services column alone");
        assert_eq!(block_users(&bytes, false, &[]).expect("parts").len(), 300);
    }

    #[test]
    fn a_damaged_column_is_refused() {
        let bytes = encode(&users(300), blocks::BLOCK_PARTS);
        let path = Path::new("x.idx");
        let (digest, _) = digest_of_file(path, &bytes).expect("digest");
        let d = &digest.blocks[0];
        let (columns, body) = columns(&bytes);
        let users = columns[1].1.clone();
        let head = &body[..users.end];
        let read = |head: &[u8]| {
            block_column_values(
                path,
                0,
                head,
                digest.strings,
                d.parts,
                None,
                "user",
                &[],
                |_, _| (),
            )
        };
        assert!(read(head).expect("whole"));
        // The first part's count of users said as none: the column no
        // longer fits the parts.
        let mut bad = head.to_vec();
        assert_eq!(bad[users.start], 1);
        bad[users.start] = 0;
        let err = read(&bad).expect_err("a damaged column");
        assert!(err.is_corruption(), "{err}");
        // A head with the parts after it is refused too.
        let err = read(&body).expect_err("more than a head");
        assert!(err.is_corruption(), "{err}");
        // So is a head frame that does not match its checksum.
        let (_, base) = digest_of_file(path, &bytes).expect("digest");
        let at = base + d.offset as usize;
        let mut frame = bytes[at..at + d.head_len as usize].to_vec();
        inflate_head(path, 0, &frame, d).expect("the head as written");
        frame[3] ^= 0x10;
        let err = inflate_head(path, 0, &frame, d).expect_err("a damaged head");
        assert!(err.is_corruption(), "{err}");
    }

    #[test]
    fn a_damaged_digest_or_block_is_refused() {
        let set = set(1_500);
        let bytes = encode(&set, blocks::BLOCK_PARTS);
        let path = Path::new("x.idx");
        let (digest, base) = digest_of_file(path, &bytes).expect("digest");
        // Every byte of the head and digest is covered by the digest's checksum.
        for at in [12, 16, 20, HEAD_BYTES, base - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(decode(path, &bad).is_err(), "byte {at}");
        }
        // A block's bytes by its own checksum: the digest still reads.
        let mut bad = bytes.clone();
        let at = base + digest.blocks[1].offset as usize + 3;
        bad[at] ^= 0x40;
        assert!(digest_of_file(path, &bad).is_ok());
        let err = decode(path, &bad).expect_err("a damaged block");
        assert!(err.is_corruption(), "{err}");
        // Cut short: the last block is out of the file's bounds.
        let err = decode(path, &bytes[..bytes.len() - 1]).expect_err("truncated");
        assert!(err.is_corruption(), "{err}");
    }

    #[test]
    fn the_parts_of_a_sidecar_come_back_in_trace_id_order_across_blocks() {
        let set = set(2_100);
        let path = Path::new("x.idx");
        let mut parts =
            SidecarParts::from_bytes(path, &encode(&set, blocks::BLOCK_PARTS)).expect("parts");
        let wanted = [1u128, 5, 6, 1_500, 2_099];
        for raw in wanted {
            let id = TraceId(raw.to_be_bytes());
            let part = parts.find(&id).expect("reads").expect("found");
            assert_eq!(part.trace_id, id);
            let original = &set.traces[set
                .traces
                .binary_search_by_key(&id, |t| t.trace_id)
                .expect("in the set")];
            let tags = |t: &TraceSummary, s: &dyn Fn(u32) -> String| -> Vec<(String, String)> {
                t.tags.iter().map(|g| (s(g.key), s(g.value))).collect()
            };
            assert_eq!(
                tags(&part, &|i| parts.str(i).to_owned()),
                tags(original, &|i| set.str(i).to_owned())
            );
            assert_eq!(part.tags.is_empty(), raw >= 2, "traces 0 and 1 have a tag");
            assert_eq!(part.start_unix_nano, original.start_unix_nano);
        }
        assert!(parts
            .find(&TraceId(9_999u128.to_be_bytes()))
            .expect("reads")
            .is_none());
    }
}
