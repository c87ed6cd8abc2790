//! The index sidecar of a sorted file: `tables/{id:020}.idx`, the file's
//! [`SummarySet`], and the reading and writing of its file: the digest read
//! to open a file's index ([`open_index`]), a block's parts read one at a
//! time ([`BlockParts`]), the whole sidecar read part by part for a
//! compaction ([`SidecarParts`]). The bytes are `format`'s (as
//! `docs/FORMAT.md`, "Index sidecar", writes them down); cutting a set into
//! blocks is `encode`'s, a block's values of a key `block_values`'.
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
    sync::Arc,
};

use super::{
    blocks::FileIndex,
    encode::{encode, encode_parts},
    format::{
        check_head, digest_of_file, inflate_block, parse_digest, part_at, remap_part, split_block,
        HEAD_BYTES,
    },
    SummarySet, TraceSummary,
};
use crate::{
    error::{Error, Result},
    span::TraceId,
    table::corrupt,
    writeback::{Writeback, STEP},
};

pub use crate::layout::sidecar_path;

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
    /// Shared with the cache that keeps it inflated, if one does.
    body: Arc<Vec<u8>>,
    /// Where each string of the block's table lies in `body`.
    strings: Vec<Range<usize>>,
    /// Where each part lies in `body`, in the block's order.
    parts: Vec<Range<usize>>,
}

impl BlockParts {
    /// The parts of block `body`, found at `at` in the sidecar at `path`
    /// (`ns`: strings in its table; `parts`: the digest's count).
    pub(super) fn new(
        path: &Path,
        at: u64,
        body: Arc<Vec<u8>>,
        ns: usize,
        parts: u32,
    ) -> Result<Self> {
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
    let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
    let (size, inode) = (meta.len(), std::os::unix::fs::MetadataExt::ino(&meta));
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
        inode,
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

    /// About the bytes it holds: the blocks read, each part's place and
    /// each block's strings.
    pub fn held_bytes(&self) -> usize {
        self.buf.capacity()
            + self.order.capacity() * std::mem::size_of::<(TraceId, Range<usize>, u32)>()
            + self
                .globals
                .iter()
                .map(|g| g.capacity() * 4 + 24)
                .sum::<usize>()
            + self.strings.capacity() * 16
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

/// Writes the sidecar of the sorted file at `table`: `.tmp` (with paced
/// writeback, as sorted files are written), fsync, rename.
/// The directory is not fsynced: a sidecar lost in a crash is rebuilt.
/// `cells`, when given, are written after the blocks ([`super::cells`]).
pub fn write(
    table: &Path,
    set: &SummarySet,
    block_parts: usize,
    cells: Option<&super::cells::FileCells>,
) -> Result<()> {
    write_file(table, &with_cells(encode(set, block_parts), cells))
}

fn with_cells(mut bytes: Vec<u8>, cells: Option<&super::cells::FileCells>) -> Vec<u8> {
    if let Some(c) = cells {
        bytes.extend_from_slice(&super::cells::encode(c));
    }
    bytes
}

/// [`write`] for a set already encoded part by part (see [`encode_parts`]).
pub(super) fn write_parts(
    table: &Path,
    strings: &[String],
    parts: &[u8],
    placed: Vec<(u64, usize, usize)>,
    block_parts: usize,
    cells: Option<&super::cells::FileCells>,
) -> Result<()> {
    write_file(
        table,
        &with_cells(encode_parts(strings, parts, placed, block_parts), cells),
    )
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
    use crate::index::{
        block_values::*, blocks, format::*, Edge, Op, OpNeed, Tag, TagScope, ValueKind,
    };
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
