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

use super::{Edge, Op, SummarySet, Tag, TagScope, TraceSummary};
use crate::{
    error::{Error, Result},
    span::TraceId,
    table::{check_crc, corrupt},
};

const MAGIC: &[u8; 8] = b"TDB-IDX\0";
/// 1: the body as is; 2: the body as one zstd frame, after its length.
const VERSION: u32 = 2;
/// zstd level of the body: level 1 gets within 1% of level 9 here (trace
/// and span IDs, which do not compress, are most of the bytes).
const ZSTD_LEVEL: i32 = 1;
/// Largest body a reader inflates.
const MAX_BODY_BYTES: u32 = 1 << 30;

/// `tables/{id:020}.sst` -> `tables/{id:020}.idx`.
pub fn sidecar_path(table: &Path) -> PathBuf {
    table.with_extension("idx")
}

/// Encodes a set; see `docs/FORMAT.md`.
pub fn encode(set: &SummarySet) -> Vec<u8> {
    let body = encode_body(set);
    let mut out = Vec::with_capacity(32 + body.len() / 2);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    // Compressing a buffer in memory fails only on allocation failure.
    let frame = zstd::bulk::compress(&body, ZSTD_LEVEL).expect("zstd compresses a buffer");
    out.extend_from_slice(&frame);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The strings and trace summaries, uncompressed.
fn encode_body(set: &SummarySet) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + set.traces.len() * 96);
    put_varint(&mut out, set.strings.len() as u64);
    for s in &set.strings {
        put_varint(&mut out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
    put_varint(&mut out, set.traces.len() as u64);
    for t in &set.traces {
        out.extend_from_slice(&t.trace_id.0);
        out.extend_from_slice(&t.start_unix_nano.to_le_bytes());
        out.extend_from_slice(&t.end_unix_nano.to_le_bytes());
        put_varint(&mut out, u64::from(t.span_count));
        put_varint(&mut out, u64::from(t.error_count));
        match t.root {
            None => put_varint(&mut out, 0),
            Some((s, n)) => {
                put_varint(&mut out, u64::from(s) + 1);
                put_varint(&mut out, u64::from(n));
            }
        }
        put_varint(&mut out, t.ops.len() as u64);
        for o in &t.ops {
            put_varint(&mut out, u64::from(o.service));
            put_varint(&mut out, u64::from(o.name));
            out.push(o.kind);
        }
        put_varint(&mut out, t.tags.len() as u64);
        for g in &t.tags {
            out.push(g.scope as u8);
            put_varint(&mut out, u64::from(g.key));
            put_varint(&mut out, u64::from(g.value));
        }
        put_varint(&mut out, t.edges.len() as u64);
        for e in &t.edges {
            put_varint(&mut out, u64::from(e.parent));
            put_varint(&mut out, u64::from(e.child));
            put_varint(&mut out, u64::from(e.calls));
        }
        for list in [&t.spans, &t.orphans] {
            put_varint(&mut out, list.len() as u64);
            for (id, service) in list {
                out.extend_from_slice(id);
                put_varint(&mut out, u64::from(*service));
            }
        }
    }
    out
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
    if file.len() < 16 || &file[..8] != MAGIC {
        return Err(corrupt(path, 0, "not an index sidecar (bad magic)"));
    }
    let body = check_crc(path, 0, file)?;
    let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    let inflated;
    let mut r = match version {
        1 => Reader {
            path,
            buf: body,
            at: 12,
        },
        2 => {
            let Some(len) = body.get(12..16) else {
                return Err(corrupt(path, 12, "truncated"));
            };
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes"));
            if len > MAX_BODY_BYTES {
                return Err(corrupt(path, 12, "body length over 1 GiB"));
            }
            inflated = zstd::bulk::decompress(&body[16..], len as usize)
                .ok()
                .filter(|b| b.len() == len as usize)
                .ok_or_else(|| corrupt(path, 16, "body does not inflate to its length"))?;
            Reader {
                path,
                buf: &inflated,
                at: 0,
            }
        }
        _ => {
            return Err(Error::UnsupportedVersion {
                file: path.to_path_buf(),
                version,
                supported: VERSION,
            })
        }
    };
    let n = r.count(1)?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.count(1)?;
        let at = r.at;
        let s = std::str::from_utf8(r.bytes(len)?)
            .map_err(|_| corrupt(path, at as u64, "string is not UTF-8"))?;
        strings.push(s.to_owned());
    }
    let ns = strings.len();
    let n = r.count(40)?;
    let mut traces = Vec::with_capacity(n);
    for _ in 0..n {
        let trace_id = TraceId(r.bytes(16)?.try_into().expect("16 bytes"));
        let start_unix_nano = r.u64()?;
        let end_unix_nano = r.u64()?;
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
            let scope = match r.bytes(1)?[0] {
                0 => TagScope::Resource,
                1 => TagScope::Span,
                _ => return Err(r.err("unknown tag scope")),
            };
            tags.push(Tag {
                scope,
                key: r.string(ns)?,
                value: r.string(ns)?,
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
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let k = r.count(9)?;
            list.reserve(k);
            for _ in 0..k {
                let id: [u8; 8] = r.bytes(8)?.try_into().expect("8 bytes");
                list.push((id, r.string(ns)?));
            }
        }
        let [spans, orphans] = lists;
        traces.push(TraceSummary {
            trace_id,
            start_unix_nano,
            end_unix_nano,
            span_count,
            error_count,
            root,
            ops,
            tags,
            edges,
            spans,
            orphans,
        });
    }
    if r.at != r.buf.len() {
        return Err(r.err("bytes left over after the last trace"));
    }
    Ok(SummarySet::new(strings, traces))
}

/// Writes the sidecar of the sorted file at `table`: `.tmp`, fsync, rename.
/// The directory is not fsynced: a sidecar lost in a crash is rebuilt.
pub fn write(table: &Path, set: &SummarySet) -> Result<()> {
    let path = sidecar_path(table);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let bytes = encode(set);
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
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

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
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
        SummarySet::from_spans(&spans)
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

    #[test]
    fn the_body_is_compressed_and_version_1_sidecars_still_read() {
        let set = set();
        let body = encode_body(&set);
        let v2 = encode(&set);
        assert!(v2.len() < body.len(), "{} >= {}", v2.len(), body.len());
        let path = Path::new("x.idx");
        assert_eq!(decode(path, &v2).expect("v2 decodes"), set);
        assert_eq!(decode(path, &framed(1, &body)).expect("v1 decodes"), set);
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
            let err = decode(path, &framed(2, &rest)).expect_err("a wrong length");
            assert!(err.is_corruption(), "{err}");
        }
        let mut rest = (body.len() as u32).to_le_bytes().to_vec();
        rest.extend_from_slice(b"not a zstd frame");
        assert!(decode(path, &framed(2, &rest)).is_err());
        let err = decode(path, &framed(3, &[])).expect_err("version 3");
        assert!(
            matches!(err, Error::UnsupportedVersion { version: 3, .. }),
            "{err}"
        );
    }
}
