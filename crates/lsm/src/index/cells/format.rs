//! The bytes of a file's metrics cells at the end of its sidecar, as
//! docs/FORMAT.md ("Metrics cells") writes them down: a zstd frame per key
//! list and per table, an index frame saying where each is, and a footer.

use std::{path::Path, sync::Arc};

use tracedb_proto::wire::put_varint;

use super::{
    cache::{CacheRef, SectionCache},
    dict::{Dict, ListId},
    CellKey, CellTable, Counts, Family, FileCells, Reading, BUCKET_SECONDS,
};
use crate::{
    error::{Error, Result},
    index::format::{Reader, MAX_BODY_BYTES},
    table::corrupt,
};

mod decode;
mod encode;
mod keys;
mod table;

pub use decode::decode;
#[cfg(test)]
pub(super) use encode::encode_framed;
pub use encode::{encode, encode_laid_out, Layout};
pub(super) use keys::decode_key;
use keys::put_key;
pub use keys::KeyList;
use table::{cut, parse_table, put_frame, select};

/// Cells of a table part, about: a table is written in parts, each holding
/// the cells of a range of keys, so a query reads the parts holding the
/// keys it matches ([`table::key_ranges`]).
const PART_CELLS: usize = 16 * 1024;

/// Cells of a named table's part past which it also ends where the name
/// changes within a service ([`table::key_ranges`]): a service's named
/// seconds hold about a cell a span and every name of it, so a query of one
/// name reads a few of its parts. On the hour of 82.7 M spans framed by the
/// minute ([`NAMED_FRAME_CELLS`]), one name's 0.9 quantile in one service
/// took 147 ms cut by service alone, 141 ms past 16,384 cells, 109 ms past
/// this and 95 ms past 4,096, the cells 1.87, 1.87, 1.91 and 1.98 B a span
/// (docs/BENCHMARKS.md, "Named cells framed by the minute").
const NAMED_PART_CELLS: usize = PART_CELLS / 2;

/// zstd level of the cells' frames. Parts are smaller frames than whole
/// tables and compress worse: on 101 M spans over an hour, 1.84 B a span
/// whole, 2.01 in parts at level 1, 1.96 at this level (docs/BENCHMARKS.md,
/// "An hour of traffic"). zstd inflates about as fast at any level; the
/// higher level's cost is at flush and merge.
const CELLS_ZSTD_LEVEL: i32 = 3;

/// A table's cells of fewer spans than this give each span's duration
/// bucket, not the buckets with their spans ([`table::table_body`]), and
/// its `durations` flag says so. At light traffic most cells count a span
/// or a few, each bucket of one span: on a day at a week's density (165
/// spans a second) the cells took 4.40 B a span so, against 4.85 B with
/// buckets and spans in every cell (3: 4.54 B; 32: 4.43 B;
/// docs/BENCHMARKS.md, "A week of traffic").
pub(super) const LISTED_BELOW: u8 = 16;
/// The largest `durations` flag a table may have.
const MAX_LISTED_BELOW: u8 = 64;

/// The last bytes of a sidecar that ends with cells.
const CELLS_MAGIC: &[u8; 8] = b"TDB-CEL1";
/// Index frame length, index body length, its checksum, magic.
const FOOTER_BYTES: usize = 20;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub(super) fn put_optional(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, 0),
        Some(b) => {
            put_varint(out, 1);
            put_bytes(out, b);
        }
    }
}

/// What a section of the cells holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    Keys(Family),
    /// Family, bucket seconds, whether the cells hold durations.
    Table(Family, u64, bool),
    /// The run the cells belong to (its first file's ID): `holds` when
    /// they count the run's spans (the frame lists its files), else the
    /// file holds no cells ([`Counts`]); `named` when the run's named
    /// cells are summed with the others ([`FileCells::named_in_run`]).
    Run {
        holds: bool,
        run: u64,
        named: bool,
    },
    /// The attributes the attribute cells count; `per_file` when those
    /// cells count the file's own spans even where its unnamed cells count
    /// a run's ([`FileCells::attr_per_file`]).
    Counted {
        per_file: bool,
    },
}

/// Where one section's zstd frame is, as the cells' index says.
#[derive(Debug, Clone, Copy)]
pub(super) struct Section {
    what: What,
    /// A table's part: the first and last key (inclusive) its cells have.
    /// `None` for a whole table and the other sections.
    keys: Option<(u32, u32)>,
    /// A table's part framed in time: the first and last bucket (inclusive)
    /// its cells have. `None` for a part of every bucket of its table.
    buckets: Option<(u64, u64)>,
    /// Keys or cells it holds.
    count: u64,
    /// A table's cells of fewer spans than this give each span's
    /// duration bucket ([`LISTED_BELOW`]); 1 where none does (sidecars
    /// written before), and for the other sections.
    listed_below: u8,
    /// Bytes from the frame's start to the index frame's start.
    back: u64,
    frame_len: u32,
    body_len: u32,
    crc: u32,
}

/// What a section holds, and a part's ranges of keys and of buckets.
type Placed = (What, Option<(u32, u32)>, Option<(u64, u64)>);

fn counted_body(names: &[Box<[u8]>]) -> Vec<u8> {
    let mut body = Vec::new();
    for n in names {
        put_bytes(&mut body, n);
    }
    body
}

/// The `n` attribute names of a counted section's body, ascending, each a
/// scope byte then a key.
fn parse_counted(path: &Path, body: &[u8], n: u64) -> Result<Vec<Box<[u8]>>> {
    let mut r = Reader {
        path,
        buf: body,
        at: 0,
    };
    let mut names: Vec<Box<[u8]>> = Vec::with_capacity((n as usize).min(body.len()));
    for _ in 0..n {
        let len = r.count(1)?;
        let name = r.bytes(len)?;
        let scoped = matches!(
            name.first(),
            Some(&(super::SPAN_SCOPE | super::RESOURCE_SCOPE))
        );
        if !scoped || len < 2 || names.last().is_some_and(|l| **l >= *name) {
            return Err(r.err("a counted attribute of no scope, or out of order"));
        }
        names.push(name.into());
    }
    if r.at != body.len() {
        return Err(r.err("bytes left over after the counted attributes"));
    }
    Ok(names)
}

fn keys_body(keys: &[CellKey]) -> Vec<u8> {
    let mut body = Vec::new();
    for k in keys {
        put_key(&mut body, k);
    }
    body
}

/// The families whose key lists and tables cells hold, in the order they
/// are written: a file of a run holds its named cells alone (and its
/// attribute ones where written before a run's were added up), or none
/// where the run holds its named cells too; the others hold the unnamed
/// family, the attribute one where they count an attribute, and the
/// any-service one unless written before it.
fn families_of(counts: &Counts, named_in_run: bool, attr: bool, any_service: bool) -> Vec<Family> {
    let in_run = matches!(counts, Counts::InRun { .. });
    let mut families = Vec::with_capacity(4);
    if !(in_run && named_in_run) {
        families.push(Family::Named);
    }
    if !in_run {
        families.push(Family::Unnamed);
    }
    if attr && !(in_run && named_in_run) {
        families.push(Family::Attr);
    }
    if any_service && !in_run {
        families.push(Family::AnyService);
    }
    families
}

/// `frame` inflated to `len` bytes, checked against `crc`.
fn inflate(path: &Path, at: u64, frame: &[u8], len: u32, crc: u32) -> Result<Vec<u8>> {
    if crc32c::crc32c(frame) != crc {
        return Err(corrupt(path, at, "metrics cells checksum mismatch"));
    }
    if len > MAX_BODY_BYTES {
        return Err(corrupt(path, at, "metrics cells over 1 GiB"));
    }
    crate::index::format::inflate(frame, len as usize)
        .ok()
        .filter(|b| b.len() == len as usize)
        .ok_or_else(|| corrupt(path, at, "metrics cells do not inflate to their length"))
}

/// Whether no two sections of one table share a key and a bucket: its
/// parts' ranges of keys or of buckets lie apart (each part has its own
/// durations flag: a table whose roots alone keep durations has parts with
/// and without), and a whole table is its only section.
fn parts_apart(sections: &[Section]) -> bool {
    const ALL: (u64, u64) = (0, u64::MAX);
    apart(
        sections
            .iter()
            .filter_map(|s| match s.what {
                What::Table(family, seconds, _) => Some((
                    (family as u8, seconds),
                    s.buckets.unwrap_or(ALL),
                    s.keys.map_or(ALL, |(a, b)| (u64::from(a), u64::from(b))),
                )),
                _ => None,
            })
            .collect(),
    )
}

/// A table's part: its table, and its first and last bucket and key.
pub(super) type PartRanges = ((u8, u64), (u64, u64), (u64, u64));

/// Whether no two `parts` of one table share a bucket and a key.
///
/// A sweep over each table's parts by their first bucket, in `n log n` (a
/// file's index has thousands of parts, and is read at every query): the
/// parts whose buckets are still open hold keys apart, so a part's keys
/// meet one of theirs only if they meet those of the last to start at or
/// before its last key.
pub(super) fn apart(mut parts: Vec<PartRanges>) -> bool {
    use std::{
        cmp::Reverse,
        collections::{BTreeMap, BinaryHeap},
    };
    parts.sort_unstable();
    // The open parts' keys (first to last), and when each closes (its last
    // bucket, and its first key).
    let mut open: BTreeMap<u64, u64> = BTreeMap::new();
    let mut ends: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut table = None;
    for (of, (first, last), (from, to)) in parts {
        if table != Some(of) {
            (table, open, ends) = (Some(of), BTreeMap::new(), BinaryHeap::new());
        }
        while let Some(&Reverse((end, key))) = ends.peek() {
            if end >= first {
                break;
            }
            ends.pop();
            open.remove(&key);
        }
        if open
            .range(..=to)
            .next_back()
            .is_some_and(|(_, &end)| end >= from)
        {
            return false;
        }
        open.insert(from, to);
        ends.push(Reverse((last, from)));
    }
    true
}

/// The index of the cells whose footer is `footer`, found at `at` (the
/// footer's offset in the sidecar): where the index frame starts, and the
/// sections. `read_at(offset, len)` reads the sidecar's bytes.
fn read_index(
    path: &Path,
    footer: &[u8; FOOTER_BYTES],
    at: u64,
    read_at: &mut dyn FnMut(u64, usize) -> Result<Vec<u8>>,
) -> Result<Option<(u64, Vec<Section>)>> {
    if &footer[12..] != CELLS_MAGIC {
        return Ok(None);
    }
    let word = |i: usize| u32::from_le_bytes(footer[i..i + 4].try_into().expect("4 bytes"));
    let (frame_len, body_len, crc) = (word(0), word(4), word(8));
    let Some(start) = at.checked_sub(u64::from(frame_len)) else {
        return Err(corrupt(path, at, "metrics cells longer than the sidecar"));
    };
    let frame = read_at(start, frame_len as usize)?;
    let body = inflate(path, start, &frame, body_len, crc)?;
    let mut r = Reader {
        path,
        buf: &body,
        at: 0,
    };
    let n = r.count(10)?;
    let mut sections = Vec::with_capacity(n);
    for _ in 0..n {
        let (kind, family) = match r.bytes(2)? {
            [k @ (0 | 1 | 3 | 4), f @ (0..=3)] | [k @ 2, f @ 0] | [k @ 5, f @ 2] => (
                *k,
                match f {
                    0 => Family::Named,
                    1 => Family::Unnamed,
                    2 => Family::Attr,
                    _ => Family::AnyService,
                },
            ),
            _ => return Err(r.err("a cells section of no known kind or family")),
        };
        let seconds = r.varint()?;
        // The run section's flag says also whether the run holds the named
        // cells (2); the others' is 0 or 1.
        let flag = r.bytes(1)?[0];
        // A table's flag says also which of its cells give each span's
        // duration bucket.
        let durations = match (kind, flag) {
            (_, 0) => false,
            (_, 1) | (2, 2 | 3) | (1 | 3 | 4, 2..=MAX_LISTED_BELOW) => true,
            _ => return Err(r.err("a cells section's durations flag is not one it may have")),
        };
        let listed_below = match kind {
            1 | 3 | 4 => flag.max(1),
            _ => 1,
        };
        let keys = match kind {
            3 | 4 => {
                let (first, last) = (small(&mut r)?, small(&mut r)?);
                if first > last {
                    return Err(r.err("a table part's keys end before they start"));
                }
                Some((first, last))
            }
            _ => None,
        };
        let buckets = match kind {
            4 => {
                let first = r.varint()?;
                let last = first
                    .checked_add(r.varint()?)
                    .ok_or_else(|| r.err("a table part's buckets overflow"))?;
                Some((first, last))
            }
            _ => None,
        };
        let what = match kind {
            0 => What::Keys(family),
            2 => What::Run {
                holds: flag & 1 == 1,
                run: seconds,
                named: flag & 2 == 2,
            },
            5 => What::Counted {
                per_file: !durations,
            },
            _ if BUCKET_SECONDS.contains(&seconds) => What::Table(family, seconds, durations),
            _ => return Err(r.err("a cell table of another bucket length")),
        };
        let count = r.varint()?;
        let back = r.varint()?;
        let frame_len = small(&mut r)?;
        let body_len = small(&mut r)?;
        let crc = u32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes"));
        let fits = back
            .checked_sub(u64::from(frame_len))
            .is_some_and(|_| back <= start);
        // A table's parts are checked together, below.
        let again = !matches!(what, What::Table(..))
            && sections.iter().any(|s: &Section| match (s.what, what) {
                (What::Run { .. }, What::Run { .. })
                | (What::Counted { .. }, What::Counted { .. }) => true,
                _ => s.what == what,
            });
        if !fits || again {
            return Err(r.err("a cells section out of the sidecar's bounds, or twice"));
        }
        sections.push(Section {
            what,
            keys,
            buckets,
            count,
            listed_below,
            back,
            frame_len,
            body_len,
            crc,
        });
    }
    if r.at != body.len() {
        return Err(r.err("bytes left over after the metrics cells' index"));
    }
    if !parts_apart(&sections) {
        return Err(r.err("a cells section out of the sidecar's bounds, or twice"));
    }
    let keys_of = |family| {
        sections
            .iter()
            .find(|s| s.what == What::Keys(family))
            .map_or(0, |s| s.count)
    };
    let parts_fit = sections.iter().all(|s| match (s.what, s.keys) {
        (What::Table(family, ..), Some((_, last))) => u64::from(last) < keys_of(family),
        _ => true,
    });
    if !parts_fit {
        return Err(r.err("a table part of keys its family does not have"));
    }
    let unnamed = sections.iter().any(|s| {
        matches!(
            s.what,
            What::Keys(Family::Unnamed | Family::AnyService)
                | What::Table(Family::Unnamed | Family::AnyService, ..)
        )
    });
    let run_ok = sections.iter().all(|s| match s.what {
        What::Run {
            holds: false,
            named: false,
            ..
        } => !unnamed && s.count == 0,
        // The run holds every cell of the file.
        What::Run {
            holds: false,
            named: true,
            ..
        } => s.count == 0 && sections.iter().all(|o| matches!(o.what, What::Run { .. })),
        What::Run { holds: true, .. } => s.count > 0,
        _ => true,
    });
    if !run_ok {
        return Err(
            r.err("a file of a run with unnamed cells of its own, or a run's cells of no file")
        );
    }
    let has = |what| sections.iter().any(|s| s.what == what);
    let counted = sections
        .iter()
        .any(|s| matches!(s.what, What::Counted { .. }));
    if counted != has(What::Keys(Family::Attr)) {
        return Err(r.err("attribute cells without the attributes they count, or the reverse"));
    }
    Ok(Some((start, sections)))
}

pub(super) fn small(r: &mut Reader<'_>) -> Result<u32> {
    let v = r.varint()?;
    u32::try_from(v).map_err(|_| r.err("value over 32 bits"))
}

/// The files of a run, `n` IDs, ascending.
fn parse_members(path: &Path, body: &[u8], n: u64) -> Result<Vec<u64>> {
    let mut r = Reader {
        path,
        buf: body,
        at: 0,
    };
    let mut members = Vec::with_capacity((n as usize).min(body.len()));
    let mut last = 0u64;
    for i in 0..n {
        let step = r.varint()?;
        if i > 0 && step == 0 {
            return Err(r.err("a run's files out of order"));
        }
        last = last
            .checked_add(step)
            .ok_or_else(|| r.err("a run's file ID over 64 bits"))?;
        members.push(last);
    }
    if r.at != body.len() {
        return Err(r.err("bytes left over after a run's files"));
    }
    Ok(members)
}

/// What a file's cells count, from the run section `s` (if any) and its
/// inflated frame.
fn counts_of(path: &Path, run: Option<(Section, Vec<u8>)>) -> Result<Counts> {
    Ok(match run {
        None => Counts::Own,
        Some((s, body)) => match s.what {
            What::Run {
                holds: true, run, ..
            } => Counts::Run {
                run,
                members: parse_members(path, &body, s.count)?,
            },
            What::Run { run, .. } => Counts::InRun { run },
            _ => unreachable!("a run section"),
        },
    })
}

/// The cells at the end of a sidecar, opened: their index read, their key
/// lists and tables read when asked for.
pub struct CellsFile {
    path: std::path::PathBuf,
    file: std::fs::File,
    index_start: u64,
    sections: Arc<[Section]>,
    /// Where inflated sections are kept between queries, if anywhere.
    cache: Option<CacheRef>,
}

impl CellsFile {
    /// The cells of the sidecar of the sorted file at `table`; `None` when
    /// it has none.
    pub fn open(table: &Path) -> Result<Option<CellsFile>> {
        let path = crate::index::sidecar_path(table);
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        Ok(
            index_of(&path, &file)?.map(|(index_start, sections)| CellsFile {
                path,
                file,
                index_start,
                sections,
                cache: None,
            }),
        )
    }

    /// [`CellsFile::open`], as file `file`'s: its index read once and kept
    /// in `cache` (a query opens every file of its window, and a file's
    /// index has thousands of parts to check), and what it inflates kept
    /// there for the query whose turn is `turn` ([`SectionCache::turn`]).
    pub fn open_cached(
        table: &Path,
        cache: &Arc<SectionCache>,
        file: u64,
        turn: u64,
    ) -> Result<Option<CellsFile>> {
        use std::os::unix::fs::MetadataExt;
        let path = crate::index::sidecar_path(table);
        let handle = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let inode = handle.metadata().map_err(|e| Error::io(&path, e))?.ino();
        let (index_start, sections) = match cache.index(file, inode) {
            Some(kept) => kept,
            None => match index_of(&path, &handle)? {
                Some((start, sections)) => {
                    cache.keep_index(file, inode, start, sections.clone());
                    (start, sections)
                }
                None => return Ok(None),
            },
        };
        Ok(Some(CellsFile {
            path,
            file: handle,
            index_start,
            sections,
            cache: Some(CacheRef::new(cache.clone(), file, inode, turn)),
        }))
    }

    /// Section `what`, if the cells have it, kept in the cache if `keep`.
    fn section(&self, what: What, keep: bool) -> Result<Option<(Section, Vec<u8>)>> {
        match self.sections.iter().find(|s| s.what == what) {
            Some(s) => {
                let body =
                    Arc::try_unwrap(self.read(s, keep)?).unwrap_or_else(|kept| (*kept).clone());
                Ok(Some((*s, body)))
            }
            None => Ok(None),
        }
    }

    /// Section `s`'s body, inflated (or as the cache kept it).
    fn body(&self, s: &Section) -> Result<Arc<Vec<u8>>> {
        self.read(s, true)
    }

    /// Section `s`'s body, inflated (or as the cache kept it), and kept in
    /// the cache if `keep`.
    fn read(&self, s: &Section, keep: bool) -> Result<Arc<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        let at = self.index_start - s.back;
        if let Some(c) = &self.cache {
            if let Some(body) = c.cache.get(c, at, s.crc, s.body_len) {
                return Ok(body);
            }
        }
        let mut frame = vec![0u8; s.frame_len as usize];
        self.file
            .read_exact_at(&mut frame, at)
            .map_err(|e| Error::io(&self.path, e))?;
        let body = Arc::new(inflate(&self.path, at, &frame, s.body_len, s.crc)?);
        if let Some(c) = self.cache.as_ref().filter(|_| keep) {
            c.cache.put(c, at, s.crc, body.clone());
        }
        Ok(body)
    }

    /// Whose spans the cells count. A file of a run that holds no cells
    /// ([`Counts::InRun`]) has no keys or tables.
    pub fn counts(&self) -> Result<Counts> {
        let run = self
            .sections
            .iter()
            .find(|s| matches!(s.what, What::Run { .. }))
            .map(|s| s.what);
        let run = match run {
            Some(what) => self.section(what, true)?,
            None => None,
        };
        counts_of(&self.path, run)
    }

    /// Whether the file's named cells are summed over its run as its
    /// unnamed ones are ([`FileCells::named_in_run`]), from the index alone.
    pub fn named_in_run(&self) -> bool {
        self.sections
            .iter()
            .any(|s| matches!(s.what, What::Run { named: true, .. }))
    }

    /// The counted section's place in the index, as found there.
    fn counted_section(&self) -> What {
        self.sections
            .iter()
            .map(|s| s.what)
            .find(|w| matches!(w, What::Counted { .. }))
            .unwrap_or(What::Counted { per_file: false })
    }

    /// Whether the attribute cells count the file's own spans even where
    /// its unnamed cells count a run's ([`FileCells::attr_per_file`]), from
    /// the index alone.
    pub fn attr_per_file(&self) -> bool {
        self.counted_section() == (What::Counted { per_file: true })
    }

    /// The attributes the attribute cells count, ascending (none in cells
    /// without attribute cells).
    pub fn counted(&self) -> Result<Vec<Box<[u8]>>> {
        match self.section(self.counted_section(), true)? {
            Some((s, body)) => parse_counted(&self.path, &body, s.count),
            None => Ok(Vec::new()),
        }
    }

    /// Whether the cells have `family`'s key list, from the index alone:
    /// cells written before the any-service family have none of it.
    pub fn has(&self, family: Family) -> bool {
        self.sections.iter().any(|s| s.what == What::Keys(family))
    }

    /// The bytes of `family`'s key list and tables as stored (their zstd
    /// frames), from the index alone.
    pub fn stored_bytes(&self, family: Family) -> u64 {
        self.sections
            .iter()
            .filter(|s| matches!(s.what, What::Keys(f) | What::Table(f, ..) if f == family))
            .map(|s| u64::from(s.frame_len))
            .sum()
    }

    /// The bytes of `family`'s table with buckets of `seconds` as stored
    /// (its parts' zstd frames), from the index alone.
    pub fn table_bytes(&self, family: Family, seconds: u64) -> u64 {
        self.sections
            .iter()
            .filter(|s| matches!(s.what, What::Table(f, l, _) if f == family && l == seconds))
            .map(|s| u64::from(s.frame_len))
            .sum()
    }

    /// How many sections (key lists, tables and parts, and the others) the
    /// index lists.
    pub fn sections(&self) -> usize {
        self.sections.len()
    }

    /// How many cells `family`'s table with buckets of `seconds` holds (0
    /// when the cells do not have it), from the index alone.
    pub fn cell_count(&self, family: Family, seconds: u64) -> u64 {
        self.sections
            .iter()
            .filter(|s| matches!(s.what, What::Table(f, l, _) if f == family && l == seconds))
            .map(|s| s.count)
            .sum()
    }

    /// The keys `family`'s tables number.
    pub fn keys(&self, family: Family) -> Result<Vec<CellKey>> {
        Ok(self.key_list(family)?.to_keys())
    }

    /// The keys `family`'s tables number, as their list holds them.
    pub fn key_list(&self, family: Family) -> Result<KeyList<'static>> {
        self.read_key_list(family, true)
    }

    /// [`CellsFile::key_list`], the list kept in the cache if `keep`.
    fn read_key_list(&self, family: Family, keep: bool) -> Result<KeyList<'static>> {
        match self.section(What::Keys(family), keep)? {
            Some((s, body)) => KeyList::read(&self.path, body, family, s.count),
            None => Err(corrupt(
                &self.path,
                self.index_start,
                "metrics cells without their keys",
            )),
        }
    }

    /// The numbers `dict` gives `family`'s keys, in their list's order.
    /// When these cells are cached ([`CellsFile::open_cached`]), `dict` keeps
    /// them for this file's list, and the list is not read again.
    pub fn key_ids(&self, family: Family, dict: &Dict) -> Result<Arc<[u32]>> {
        let section = self.sections.iter().find(|s| s.what == What::Keys(family));
        let list = match (&self.cache, section) {
            (Some(c), Some(s)) => Some(ListId {
                file: c.file,
                inode: c.inode,
                family,
                crc: s.crc,
                len: s.body_len,
            }),
            _ => None,
        };
        if let Some(ids) = list.as_ref().and_then(|l| dict.file(l)) {
            return Ok(ids);
        }
        // A list whose numbers the dictionary keeps is not read again, so
        // the section cache does not keep it.
        let ids = dict.number(&self.read_key_list(family, list.is_none())?);
        if let Some(l) = list {
            dict.keep_file(l, ids.clone());
        }
        Ok(ids)
    }

    /// The table of `family` with buckets of `seconds`, if the cells have
    /// it, in pieces: the whole table, or those of its parts that hold a
    /// key `want` marks (all of them without `want`), each in order of
    /// bucket then key, read as `reading` asks. With `want`, a piece holds
    /// the cells of the keys it marks only: the others are stepped over,
    /// as the buckets `reading` leaves out are.
    pub fn table(
        &self,
        family: Family,
        seconds: u64,
        reading: Reading<'_>,
        want: Option<&[bool]>,
    ) -> Result<Option<Vec<CellTable>>> {
        let keys = self
            .sections
            .iter()
            .find(|s| s.what == What::Keys(family))
            .map_or(0, |s| s.count);
        let mut found = false;
        let mut pieces = Vec::new();
        for s in self.sections.iter() {
            if !matches!(s.what, What::Table(f, l, _) if f == family && l == seconds) {
                continue;
            }
            found = true;
            let wanted = match (want, s.keys) {
                (Some(want), Some((first, last))) => want
                    .get(first as usize..=last as usize)
                    .is_none_or(|w| w.contains(&true)),
                _ => true,
            } && s.buckets.is_none_or(|(a, b)| reading.keeps_any(a, b));
            if wanted {
                let body = self.body(s)?;
                pieces.push(parse_table(&self.path, &body, s, keys, reading, want)?);
            }
        }
        Ok(found.then_some(pieces))
    }
}

/// Where the cells' index of the sidecar `file` (at `path`) starts, and its
/// sections; `None` when it has no cells.
fn index_of(path: &Path, file: &std::fs::File) -> Result<Option<(u64, Arc<[Section]>)>> {
    use std::os::unix::fs::FileExt;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let Some(at) = size.checked_sub(FOOTER_BYTES as u64) else {
        return Ok(None);
    };
    let mut footer = [0u8; FOOTER_BYTES];
    file.read_exact_at(&mut footer, at)
        .map_err(|e| Error::io(path, e))?;
    let mut read_at = |offset: u64, len: usize| {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| Error::io(path, e))?;
        Ok(buf)
    };
    Ok(read_index(path, &footer, at, &mut read_at)?
        .map(|(start, sections)| (start, sections.into())))
}

/// How many bytes at the end of a sidecar's bytes its cells take (0 when
/// it has none), or an error when they fail a check.
pub fn cells_len(path: &Path, file: &[u8]) -> Result<usize> {
    let Some(at) = file.len().checked_sub(FOOTER_BYTES) else {
        return Ok(0);
    };
    let footer: [u8; FOOTER_BYTES] = file[at..].try_into().expect("20 bytes");
    let mut read_at =
        |offset: u64, len: usize| Ok(file[offset as usize..offset as usize + len].to_vec());
    Ok(match read_index(path, &footer, at as u64, &mut read_at)? {
        None => 0,
        Some((index_start, sections)) => {
            let first = sections.iter().map(|s| s.back).max().unwrap_or(0);
            file.len() - (index_start - first) as usize
        }
    })
}
