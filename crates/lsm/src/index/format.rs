//! The on-disk format of an index sidecar, byte by byte as
//! `docs/FORMAT.md` writes it down ("Index sidecar"): its magic and
//! version, the head and digest, the zstd frames of its blocks, how a block
//! body lays out its strings, columns and parts, and how one trace part is
//! written and read. Everything here works on bytes in memory; reading and
//! writing files is `sidecar`'s job, cutting a set into blocks `encode`'s.

use std::{ops::Range, path::Path};

use tracedb_proto::wire::put_varint;

use super::{
    blocks::{self, BlockDigest, Bloom, DigestTag},
    Edge, Op, Tag, TagScope, TraceSummary, ValueKind,
};
use crate::{
    error::{Error, Result},
    span::TraceId,
    table::corrupt,
};

pub(super) const MAGIC: &[u8; 8] = b"TDB-IDX\0";
/// 1: the body as is; 2: the body as one zstd frame, after its length; 3:
/// as 2, with each trace's end as a duration and without its span list; 4:
/// as 3, with each tag's value type; 5: parts in blocks newest first, each
/// its own frame, after a digest of every block (`index::blocks`); 6: as 5,
/// with (service, kind) terms in each block's filter; 7: as 6, with columns
/// of each block's services and of its keys of many values. Other
/// versions are refused, so a store's older sidecars are rebuilt from their
/// files when first read.
pub(super) const VERSION: u32 = 7;
/// zstd level of the digest and blocks: level 1 got within 1% of level 9
/// (trace IDs and times, which hardly compress, are most of the bytes).
pub(super) const ZSTD_LEVEL: i32 = 1;
/// Largest digest or block a reader inflates.
pub(super) const MAX_BODY_BYTES: u32 = 1 << 30;
/// Bytes before the digest's frame: magic, version, frame length, digest
/// length, digest checksum.
pub(super) const HEAD_BYTES: usize = 24;

/// The marker byte of a block's services column, where a key's column has
/// its tags' scope-and-type byte.
pub(super) const SERVICES_COLUMN: u8 = 0xff;

/// A tag's scope-and-type byte, as a part holds it.
pub(super) fn tag_byte(g: &Tag) -> u8 {
    g.scope as u8 | (g.kind as u8) << 4
}

/// A count and that many string places.
pub(super) fn put_places(out: &mut Vec<u8>, places: &[u32]) {
    put_varint(out, places.len() as u64);
    for &p in places {
        put_varint(out, u64::from(p));
    }
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Every string index `part` holds, appended to `out`.
pub(super) fn strings_of(part: &TraceSummary, out: &mut Vec<u32>) {
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
pub(super) fn put_ops_tags_edges(out: &mut Vec<u8>, t: &TraceSummary) {
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
pub(super) struct Reader<'a> {
    pub(super) path: &'a Path,
    pub(super) buf: &'a [u8],
    pub(super) at: usize,
}

impl Reader<'_> {
    #[cold]
    #[inline(never)]
    pub(super) fn err(&self, reason: &str) -> Error {
        corrupt(self.path, self.at as u64, reason)
    }

    #[inline]
    pub(super) fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(self.err("truncated"));
        };
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }

    #[inline]
    pub(super) fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    #[inline]
    pub(super) fn varint(&mut self) -> Result<u64> {
        // Most values (string indices, counts, small numbers) take one byte:
        // that case is inlined into the callers' loops, the rest is not.
        if let Some(&byte) = self.buf.get(self.at) {
            if byte & 0x80 == 0 {
                self.at += 1;
                return Ok(u64::from(byte));
            }
        }
        self.long_varint()
    }

    #[cold]
    #[inline(never)]
    fn long_varint(&mut self) -> Result<u64> {
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
    pub(super) fn count(&mut self, min_bytes: usize) -> Result<usize> {
        let n = self.varint()?;
        let left = (self.buf.len() - self.at) as u64;
        if n.saturating_mul(min_bytes as u64) > left {
            return Err(self.err("count larger than the bytes left"));
        }
        Ok(n as usize)
    }

    #[inline]
    pub(super) fn u32(&mut self) -> Result<u32> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.err("value over 32 bits"))
    }

    /// A length-prefixed UTF-8 string.
    pub(super) fn text(&mut self) -> Result<Box<str>> {
        let len = self.count(1)?;
        let at = self.at;
        let bytes = self.bytes(len)?;
        std::str::from_utf8(bytes)
            .map(Into::into)
            .map_err(|_| corrupt(self.path, at as u64, "string is not UTF-8"))
    }

    /// A string index below `strings`.
    #[inline]
    pub(super) fn string(&mut self, strings: usize) -> Result<u32> {
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
pub(super) fn check_head(path: &Path, head: &[u8]) -> Result<usize> {
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
pub(super) fn parse_digest(
    path: &Path,
    head: &[u8],
    frame: &[u8],
    blocks_len: u64,
) -> Result<Digest> {
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
pub(super) fn digest_of_file(path: &Path, file: &[u8]) -> Result<(Digest, usize)> {
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
pub(super) fn inflate_block(
    path: &Path,
    file: &[u8],
    base: usize,
    d: &BlockDigest,
) -> Result<Vec<u8>> {
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
pub(super) fn inflate(frames: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
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
pub(super) struct BlockBody<'a> {
    /// Checked to be UTF-8 when read ([`BlockBody::text`]): a key's values
    /// read from the columns check only those they give.
    pub(super) strings: Vec<(u32, &'a [u8])>,
    pub(super) columns: Vec<Column>,
    /// Empty when only the head was read.
    pub(super) parts: Vec<Range<usize>>,
    /// Parts in the block.
    pub(super) count: usize,
}

impl<'a> BlockBody<'a> {
    /// The place of `text` in the block's strings.
    pub(super) fn place(&self, text: &str) -> Option<u32> {
        self.strings
            .iter()
            .position(|s| s.1 == text.as_bytes())
            .map(|i| i as u32)
    }

    /// The text of the block's string `i`, in the block at `at`.
    pub(super) fn text(&self, path: &Path, at: u64, i: usize) -> Result<&'a str> {
        std::str::from_utf8(self.strings[i].1).map_err(|_| corrupt(path, at, "string is not UTF-8"))
    }
}

/// A column of a block's body: the services of each part, or the values of
/// each part for one key, in one scope and type.
pub(super) struct Column {
    /// `None`: the services column.
    pub(super) key: Option<(u32, TagScope, ValueKind)>,
    /// Where its bytes lie in the body.
    pub(super) data: Range<usize>,
}

pub(super) fn split_block<'a>(
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
pub(super) fn split_head<'a>(
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
pub(super) fn part_at(
    path: &Path,
    body: &[u8],
    range: Range<usize>,
    ns: usize,
) -> Result<TraceSummary> {
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

/// A tag's scope-and-type byte.
pub(super) fn scope_kind(r: &mut Reader<'_>) -> Result<(TagScope, ValueKind)> {
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
pub(super) fn decode_part(r: &mut Reader<'_>, ns: usize) -> Result<TraceSummary> {
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
