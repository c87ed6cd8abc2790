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
    path::{Path, PathBuf},
};

use tracedb_proto::wire::put_varint;

use super::{Edge, Op, SummarySet, Tag, TagScope, TraceSummary, ValueKind};
use crate::{
    error::{Error, Result},
    span::TraceId,
    table::{check_crc, corrupt},
    writeback::{Writeback, STEP},
};

const MAGIC: &[u8; 8] = b"TDB-IDX\0";
/// 1: the body as is; 2: the body as one zstd frame, after its length; 3:
/// as 2, with each trace's end as a duration and without its span list; 4:
/// as 3, with each tag's value type. Versions before 4 are refused, so a
/// store's older sidecars are rebuilt from their files (with types) when
/// first read.
const VERSION: u32 = 4;
/// zstd level of the body: level 1 got within 1% of level 9 (trace IDs and
/// times, which hardly compress, are most of the bytes).
const ZSTD_LEVEL: i32 = 1;
/// Largest body a reader inflates.
const MAX_BODY_BYTES: u32 = 1 << 30;

/// `tables/{id:020}.sst` -> `tables/{id:020}.idx`.
pub fn sidecar_path(table: &Path) -> PathBuf {
    table.with_extension("idx")
}

/// Encodes a set; see `docs/FORMAT.md`.
pub fn encode(set: &SummarySet) -> Vec<u8> {
    let mut parts = Vec::with_capacity(set.traces.len() * 96);
    for t in &set.traces {
        put_part(&mut parts, t);
    }
    encode_parts(&set.strings, set.traces.len(), &parts)
}

/// A sidecar of `strings` and `count` parts already encoded, in trace-ID
/// order, by [`put_part`]. The body is compressed as it is read, not copied
/// whole first.
fn encode_parts(strings: &[String], count: usize, parts: &[u8]) -> Vec<u8> {
    let head = body_head(strings, count);
    let body_len = head.len() + parts.len();
    let mut out = Vec::with_capacity(32 + body_len / 2);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    // Compressing into memory fails only on allocation failure.
    let mut z = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).expect("zstd encoder");
    z.set_pledged_src_size(Some(body_len as u64))
        .expect("zstd accepts a pledged size before any input");
    z.write_all(&head).expect("zstd compresses into memory");
    z.write_all(parts).expect("zstd compresses into memory");
    let mut out = z.finish().expect("zstd compresses into memory");
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The start of a body: the string table and the count of the parts after it.
fn body_head(strings: &[String], count: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(16 + strings.iter().map(|s| s.len() + 2).sum::<usize>());
    put_varint(&mut head, strings.len() as u64);
    for s in strings {
        put_varint(&mut head, s.len() as u64);
        head.extend_from_slice(s.as_bytes());
    }
    put_varint(&mut head, count as u64);
    head
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
        out.push(o.kind);
    }
    put_varint(out, t.tags.len() as u64);
    for g in &t.tags {
        out.push(g.scope as u8 | (g.kind as u8) << 4);
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

    fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(self.err("truncated"));
        };
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

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
    fn count(&mut self, min_bytes: usize) -> Result<usize> {
        let n = self.varint()?;
        let left = (self.buf.len() - self.at) as u64;
        if n.saturating_mul(min_bytes as u64) > left {
            return Err(self.err("count larger than the bytes left"));
        }
        Ok(n as usize)
    }

    fn u32(&mut self) -> Result<u32> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.err("value over 32 bits"))
    }

    /// A string index below `strings`.
    fn string(&mut self, strings: usize) -> Result<u32> {
        let v = self.u32()?;
        if v as usize >= strings {
            return Err(self.err("string index out of range"));
        }
        Ok(v)
    }
}

/// Decodes a sidecar read from `path`.
pub fn decode(path: &Path, file: &[u8]) -> Result<SummarySet> {
    let mut parts = SidecarParts::from_bytes(path, file)?;
    let strings = (0..parts.strings.len() as u32)
        .map(|i| parts.str(i).to_owned())
        .collect();
    let mut traces = Vec::with_capacity(parts.left);
    while let Some(t) = parts.next_part()? {
        traces.push(t);
    }
    Ok(SummarySet::new(strings, traces))
}

/// A sidecar read one trace part at a time, in trace-ID order, with its
/// string table checked up front: what a compaction reads to carry the parts
/// of its input files over to its output instead of scanning their spans
/// again. Holds the inflated body (strings and parts, a few bytes per span),
/// not decoded summaries.
pub struct SidecarParts {
    path: PathBuf,
    /// The body: strings, then parts.
    buf: Vec<u8>,
    /// Where the next part starts.
    at: usize,
    /// Parts not yet decoded.
    left: usize,
    /// (start, length) of each string in `buf`, checked UTF-8.
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
        if file.len() < 16 || &file[..8] != MAGIC {
            return Err(corrupt(path, 0, "not an index sidecar (bad magic)"));
        }
        let body = check_crc(path, 0, file)?;
        let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
        let (buf, at) = match version {
            4 => {
                let Some(len) = body.get(12..16) else {
                    return Err(corrupt(path, 12, "truncated"));
                };
                let len = u32::from_le_bytes(len.try_into().expect("4 bytes"));
                if len > MAX_BODY_BYTES {
                    return Err(corrupt(path, 12, "body length over 1 GiB"));
                }
                let inflated = zstd::bulk::decompress(&body[16..], len as usize)
                    .ok()
                    .filter(|b| b.len() == len as usize)
                    .ok_or_else(|| corrupt(path, 16, "body does not inflate to its length"))?;
                (inflated, 0)
            }
            _ => {
                return Err(Error::UnsupportedVersion {
                    file: path.to_path_buf(),
                    version,
                    supported: VERSION,
                })
            }
        };
        let mut r = Reader {
            path,
            buf: &buf,
            at,
        };
        let n = r.count(1)?;
        let mut strings = Vec::with_capacity(n);
        for _ in 0..n {
            let len = r.count(1)?;
            let at = r.at;
            std::str::from_utf8(r.bytes(len)?)
                .map_err(|_| corrupt(path, at as u64, "string is not UTF-8"))?;
            strings.push((at, len));
        }
        let left = r.count(31)?;
        let at = r.at;
        Ok(SidecarParts {
            path: path.to_path_buf(),
            buf,
            at,
            left,
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

    /// The next part; `None` after the last, once the body is checked to end there.
    fn next_part(&mut self) -> Result<Option<TraceSummary>> {
        let mut r = Reader {
            path: &self.path,
            buf: &self.buf,
            at: self.at,
        };
        if self.left == 0 {
            if r.at != r.buf.len() {
                return Err(r.err("bytes left over after the last trace"));
            }
            return Ok(None);
        }
        let part = decode_part(&mut r, self.strings.len())?;
        self.at = r.at;
        self.left -= 1;
        Ok(Some(part))
    }
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
            kind,
        });
    }
    let k = r.count(3)?;
    let mut tags = Vec::with_capacity(k);
    for _ in 0..k {
        let byte = r.bytes(1)?[0];
        let scope = match byte & 0x0f {
            0 => TagScope::Resource,
            1 => TagScope::Span,
            _ => return Err(r.err("unknown tag scope")),
        };
        let kind = ValueKind::from_code(byte >> 4).ok_or_else(|| r.err("unknown value type"))?;
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
pub fn write(table: &Path, set: &SummarySet) -> Result<()> {
    write_file(table, &encode(set))
}

/// [`write`] for a set already encoded part by part (see [`encode_parts`]).
pub(super) fn write_parts(
    table: &Path,
    strings: &[String],
    count: usize,
    parts: &[u8],
) -> Result<()> {
    write_file(table, &encode_parts(strings, count, parts))
}

fn write_file(table: &Path, bytes: &[u8]) -> Result<()> {
    let path = sidecar_path(table);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
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
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".idx"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
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

    fn set() -> SummarySet {
        let g = group("svc");
        let spans: Vec<crate::span::Span> = (0..200u64)
            .map(|i| span(&g, u128::from(i % 13), i, i))
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

    /// `MAGIC`, `version`, then `rest`, with a valid checksum.
    fn framed(version: u32, rest: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(rest);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// A set's body, uncompressed.
    fn encode_body(set: &SummarySet) -> Vec<u8> {
        let mut body = body_head(&set.strings, set.traces.len());
        for t in &set.traces {
            put_part(&mut body, t);
        }
        body
    }

    #[test]
    fn the_body_is_compressed_and_older_versions_are_refused() {
        let set = set();
        assert!(
            set.traces
                .iter()
                .any(|t| !t.orphans.is_empty() && !t.edges.is_empty()),
            "the sample has orphans and edges"
        );
        assert!(
            set.traces
                .iter()
                .any(|t| t.tags.iter().any(|g| g.kind != ValueKind::Str)),
            "the sample has typed tags"
        );
        let body = encode_body(&set);
        let v4 = encode(&set);
        assert!(v4.len() < body.len(), "{} >= {}", v4.len(), body.len());
        let path = Path::new("x.idx");
        assert_eq!(decode(path, &v4).expect("v4 decodes"), set);
        // Versions 1 to 3 have no value types: refused, so the file's
        // sidecar is rebuilt.
        for version in 1..=3 {
            let mut old = v4.clone();
            old[8..12].copy_from_slice(&u32::to_le_bytes(version));
            let at = old.len() - 4;
            let crc = crc32c::crc32c(&old[..at]);
            old[at..].copy_from_slice(&crc.to_le_bytes());
            let err = decode(path, &old).expect_err("an old version");
            assert!(
                matches!(err, Error::UnsupportedVersion { version: v, .. } if v == version),
                "{err}"
            );
        }
    }

    #[test]
    fn a_body_length_that_disagrees_with_the_frame_is_refused() {
        let set = set();
        let body = encode_body(&set);
        let frame = zstd::bulk::compress(&body, ZSTD_LEVEL).expect("compresses");
        let path = Path::new("x.idx");
        for len in [0, body.len() as u32 - 1, body.len() as u32 + 1, u32::MAX] {
            let mut rest = len.to_le_bytes().to_vec();
            rest.extend_from_slice(&frame);
            let err = decode(path, &framed(4, &rest)).expect_err("a wrong length");
            assert!(err.is_corruption(), "{err}");
        }
        let mut rest = (body.len() as u32).to_le_bytes().to_vec();
        rest.extend_from_slice(b"not a zstd frame");
        assert!(decode(path, &framed(4, &rest)).is_err());
        let err = decode(path, &framed(5, &[])).expect_err("version 5");
        assert!(
            matches!(err, Error::UnsupportedVersion { version: 5, .. }),
            "{err}"
        );
    }
}
