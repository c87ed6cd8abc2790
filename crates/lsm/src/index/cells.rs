//! Metrics cells: per sorted file, how many spans it holds for each *cell
//! key* (the span's service, name, kind, status code and whether it has a
//! parent) and each time bucket of span start, and how their durations fall
//! into power-of-two buckets. A TraceQL metrics query whose conditions and
//! `by()` read only those fields, counting spans or their durations on a
//! grid of whole seconds, is answered by adding cells instead of reading
//! spans (the query crate decides; docs/ARCHITECTURE.md, "Metrics").
//!
//! A file keeps several [`CellTable`]s: for each *family* (the whole key;
//! the key without the span name, which dashboards' panels mostly ask for
//! and which has far fewer values; the key without the service, for a
//! span name asked of every service; and the attribute keys) cells of 1 s,
//! 1 min and 1 h. A query adds, for each interval of its grid, the coarsest buckets
//! that lie whole inside it and finer ones at its edges; the 1 s cells of
//! the attribute keys hold counts only where they count few spans each
//! (there they are most of the attribute cells' bytes), so a query of
//! durations by attribute over such a file needs a grid of whole minutes,
//! or reads the spans. (The whole key's did too, in sidecars written
//! before every cell of few spans gave its durations in a byte a span.)
//!
//! A key keeps its fields as the span has them on the wire (the service as
//! the resource's encoded `service.name` attribute, the name as its bytes,
//! kind and status code as their numbers), so the query crate can rebuild a
//! span with exactly those fields and let the TraceQL evaluator judge it as
//! it would judge every span of the key.
//!
//! Cells are written at the end of the file's sidecar, after its blocks,
//! each table in parts by ranges of keys, so a query reads the parts of
//! the keys it matches (docs/FORMAT.md, "Metrics cells"): a sidecar
//! without them (written before them) is read as before, and its file's
//! cells are counted from its spans when a query needs them. A merge keeps
//! the unnamed, any-service and attribute cells of the files of a sorted
//! run it writes added up, with one file ([`Counts`], [`RunCells`]).

mod attrs;
mod builder;
mod cache;
mod dict;
mod format;
mod inputs;
mod packed;
mod run;

use super::{wire, HashMap};
use crate::error::Result;

pub use attrs::{
    display as display_attribute, CellAttributes, DEFAULT_ATTRIBUTES, MAX_VALUES, MAX_VALUE_BYTES,
    RESOURCE_SCOPE, SPAN_SCOPE,
};

pub use builder::CellsBuilder;
pub(crate) use cache::CacheRef;
pub use cache::SectionCache;
pub use dict::{Dict, KeyDict};
pub use format::{cells_len, decode, encode, encode_laid_out, CellsFile, KeyList, Layout};
#[cfg(test)]
use format::{encode_framed, LISTED_BELOW};
pub use inputs::{Input, InputSums, NotSummed, MAX_SUMMED_CELLS};
pub use packed::Packed;
pub use run::{RunCells, RUN_CELLS_BYTES};

const NANOS: u64 = 1_000_000_000;
/// The buckets' lengths, seconds, finest first: each divides the next.
pub const BUCKET_SECONDS: [u64; 3] = [1, 60, 3600];

/// Whether a span has a parent, as its `parent_span_id` field says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Parent {
    /// No field, or an empty one: a root span.
    None = 0,
    /// Eight zero bytes.
    Zero = 1,
    /// Any other value.
    Some = 2,
}

/// The fields of the spans a cell counts. Keys sort by parent first, then
/// whether their status is an error, then service (then name, attribute,
/// kind and status): a file's tables are cut into parts by ranges of keys
/// in that order, so a query of root spans, of error spans, or of one
/// service, reads the parts holding them, and a table too light for all
/// its durations keeps those of whole parts ([`CellKey::timed_when_light`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CellKey {
    pub parent: Parent,
    /// The encoded `KeyValue` of the resource's first `service.name`
    /// attribute; `None` when it has none.
    pub service: Option<Box<[u8]>>,
    /// The span's `name`, as stored; `None` in the families without names,
    /// whose cells count spans of every name.
    pub name: Option<Box<[u8]>>,
    /// In the attribute family only: a scope byte ([`SPAN_SCOPE`] or
    /// [`RESOURCE_SCOPE`]) then the encoded `KeyValue` of the span's or its
    /// resource's first attribute of that key, as stored.
    pub attr: Option<Box<[u8]>>,
    pub kind: u32,
    /// `Status.code` (0 when the span has no status).
    pub status: u32,
}

/// `Status.code` of an error (`STATUS_CODE_ERROR`).
pub const STATUS_ERROR: u32 = 2;

impl Ord for CellKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        fn fields(k: &CellKey) -> impl Ord + '_ {
            (
                k.parent,
                k.is_error(),
                &k.service,
                &k.name,
                &k.attr,
                k.kind,
                k.status,
            )
        }
        fields(self).cmp(&fields(other))
    }
}

impl PartialOrd for CellKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl CellKey {
    /// Whether its spans are roots: no parent ID, or one of zeros.
    pub fn is_root(&self) -> bool {
        self.parent != Parent::Some
    }

    /// Whether its spans' status is an error.
    pub fn is_error(&self) -> bool {
        self.status == STATUS_ERROR
    }

    /// Whether its cells keep their durations in a table too light to keep
    /// every cell's (`builder::roots_timed`): root spans' (Traces
    /// Drilldown asks durations by name or attribute of roots) and error
    /// spans' (what an incident asks of one service), each a small share of
    /// the spans.
    pub fn timed_when_light(&self) -> bool {
        self.is_root() || self.is_error()
    }

    fn without_name(&self) -> CellKey {
        CellKey {
            name: None,
            attr: None,
            ..self.clone()
        }
    }

    fn without_service(&self) -> CellKey {
        CellKey {
            service: None,
            ..self.clone()
        }
    }
}

/// Which keys a table's cells have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// The whole key.
    Named = 0,
    /// The key without the span name.
    Unnamed = 1,
    /// The key without the span name, with one counted attribute's value
    /// ([`CellAttributes`]): a span is counted once per counted attribute
    /// it carries.
    Attr = 2,
    /// The key without the service: cells of a span name added up over
    /// every service. Where each name is in many services, its cells count
    /// many spans each where the whole key's count one or two, so a query
    /// of a name that reads no service reads far fewer of them.
    AnyService = 3,
}

/// Whose spans a file's unnamed, any-service and attribute cells count (its
/// named cells always count its own; so do attribute cells written before a
/// run's were summed, [`FileCells::attr_per_file`]).
///
/// The files one merge writes for one time partition form a sorted run:
/// they split the trace IDs, so each covers the partition's every second,
/// and cells per file would repeat each unnamed or attribute (second, key)
/// in every file of the run. A merge adds them up across the run's files
/// instead ([`RunCells`]) and writes them with one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Counts {
    /// The file's own spans.
    #[default]
    Own,
    /// The spans of the files `members` (IDs ascending, this file among
    /// them) of run `run` (the ID of its first file).
    Run { run: u64, members: Vec<u64> },
    /// The file has no unnamed, any-service or attribute cells: its spans
    /// are counted by the file of run `run` whose [`Counts::Run`] lists it.
    InRun { run: u64 },
}

/// One cell: spans of one key whose start falls in one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// The bucket, right-closed: spans starting in
    /// `((bucket - 1) × len, bucket × len]` seconds, `len` its table's.
    pub bucket: u64,
    /// Index into [`FileCells::keys`].
    pub key: u32,
    pub spans: u64,
    /// Where its duration buckets are in its table's `durations` (an
    /// empty range in a table without them).
    pub durations: (u32, u32),
}

/// The cells of one family and bucket length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellTable {
    pub family: Family,
    /// Seconds, one of [`BUCKET_SECONDS`].
    pub seconds: u64,
    /// Whether the cells hold their spans' duration buckets.
    pub has_durations: bool,
    /// With `has_durations`: only the cells of root and error keys
    /// ([`CellKey::timed_when_light`]) hold them, the others counts only (an
    /// attribute table of seconds too light for all its durations, or a
    /// named one read from a sidecar written before the named seconds kept
    /// every duration: `builder::roots_timed`). On disk each part of such a
    /// table says which it is, parts being cut where the keys' parent, or
    /// whether they are errors, changes.
    pub roots_only: bool,
    /// In ascending order of bucket, then key.
    pub cells: Vec<Cell>,
    /// (exponent, spans): spans whose duration `d` (ns, at least 2) has
    /// `2^(exponent-1) < d <= 2^exponent`; a span shorter than 2 ns is in no
    /// bucket, as TraceQL's histograms leave it out.
    pub durations: Vec<(u8, u64)>,
}

impl CellTable {
    /// A table of no cells.
    pub fn empty(family: Family, seconds: u64, has_durations: bool) -> CellTable {
        CellTable {
            family,
            seconds,
            has_durations,
            roots_only: false,
            cells: Vec::new(),
            durations: Vec::new(),
        }
    }

    /// The duration buckets of `cell`.
    pub fn durations_of(&self, cell: &Cell) -> &[(u8, u64)] {
        &self.durations[cell.durations.0 as usize..cell.durations.1 as usize]
    }

    /// `other`'s cells (a part of the same table) added after these; [`CellTable::sort`] puts them in order.
    pub fn append(&mut self, other: CellTable) {
        let offset = self.durations.len() as u32;
        self.durations.extend(other.durations);
        self.cells.extend(other.cells.into_iter().map(|mut c| {
            c.durations = (c.durations.0 + offset, c.durations.1 + offset);
            c
        }));
    }

    /// The cells in order of bucket then key, and their durations in the
    /// cells' order.
    pub fn sort(&mut self) {
        self.cells.sort_unstable_by_key(|c| (c.bucket, c.key));
        let mut durations = Vec::with_capacity(self.durations.len());
        for c in &mut self.cells {
            let from = durations.len() as u32;
            durations
                .extend_from_slice(&self.durations[c.durations.0 as usize..c.durations.1 as usize]);
            c.durations = (from, durations.len() as u32);
        }
        self.durations = durations;
    }

    /// The cells of buckets `from..=to`.
    pub fn buckets(&self, from: u64, to: u64) -> &[Cell] {
        let lo = self.cells.partition_point(|c| c.bucket < from);
        let hi = self.cells.partition_point(|c| c.bucket <= to);
        &self.cells[lo..hi.max(lo)]
    }
}

/// A file's cells, decoded: what a query adds up. Two are equal when they
/// hold the same keys and tables, whatever the tables' order (they are
/// found by family and length).
#[derive(Debug, Clone, Default)]
pub struct FileCells {
    /// The keys of the named tables' cells, of the unnamed ones', of the
    /// attribute ones' and of the any-service ones' (none in cells written
    /// before that family: a query of it reads the named cells instead).
    pub named: Vec<CellKey>,
    pub unnamed: Vec<CellKey>,
    pub attr: Vec<CellKey>,
    pub any_service: Vec<CellKey>,
    /// The attributes the attribute cells count (their names as
    /// [`CellAttributes::names`] has them), ascending: a span carrying one
    /// of them is in the attribute cells; of any other attribute, nothing
    /// is known.
    pub counted: Vec<Box<[u8]>>,
    pub tables: Vec<CellTable>,
    /// Tables kept packed until they are written (a run's summed seconds),
    /// none of the same family and length as one of `tables`.
    pub packed: Vec<Packed>,
    pub counts: Counts,
    /// The attribute cells count this file's own spans although its
    /// unnamed ones count a run's: they were written before a merge added
    /// up the attribute cells of a run's files as it does the unnamed ones.
    pub attr_per_file: bool,
    /// The named cells are a run's too, as its unnamed ones are: the file
    /// holding the run's cells counts every member's spans in every
    /// family, and the run's other files hold no cells at all (a merge
    /// that added up its inputs' cells: [`InputSums`]).
    pub named_in_run: bool,
}

impl PartialEq for FileCells {
    fn eq(&self, other: &FileCells) -> bool {
        fn tables(c: &FileCells) -> Vec<&CellTable> {
            let mut t: Vec<&CellTable> = c.tables.iter().collect();
            t.sort_by_key(|t| (t.family as u8, t.seconds));
            t
        }
        self.named == other.named
            && self.unnamed == other.unnamed
            && self.attr == other.attr
            && self.any_service == other.any_service
            && self.counted == other.counted
            && tables(self) == tables(other)
            && self.packed == other.packed
            && self.counts == other.counts
            && self.attr_per_file == other.attr_per_file
            && self.named_in_run == other.named_in_run
    }
}

impl Eq for FileCells {}

impl FileCells {
    /// The keys the cells of `family`'s tables number.
    pub fn keys(&self, family: Family) -> &[CellKey] {
        match family {
            Family::Named => &self.named,
            Family::Unnamed => &self.unnamed,
            Family::Attr => &self.attr,
            Family::AnyService => &self.any_service,
        }
    }

    /// Whether the cells have `family`'s tables: cells written before the
    /// any-service family have none of it.
    pub fn has(&self, family: Family) -> bool {
        self.table(family, 1).is_some()
            || self
                .packed
                .iter()
                .any(|p| p.family == family && p.seconds == 1)
    }

    /// The table of `family` with buckets of `seconds`.
    pub fn table(&self, family: Family, seconds: u64) -> Option<&CellTable> {
        self.tables
            .iter()
            .find(|t| t.family == family && t.seconds == seconds)
    }

    /// These cells with their packed tables unpacked into `tables`.
    pub fn unpacked(mut self) -> FileCells {
        for p in std::mem::take(&mut self.packed) {
            self.tables.push(p.unpacked());
        }
        self
    }

    /// Bytes these cells hold in memory.
    pub fn bytes(&self) -> usize {
        self.packed.iter().map(Packed::bytes).sum::<usize>()
            + self
                .tables
                .iter()
                .map(|t| {
                    t.cells.capacity() * std::mem::size_of::<Cell>() + t.durations.capacity() * 16
                })
                .sum::<usize>()
            + self
                .named
                .iter()
                .chain(&self.unnamed)
                .chain(&self.attr)
                .chain(&self.any_service)
                .map(|k| {
                    64 + k.name.as_ref().map_or(0, |s| s.len())
                        + k.attr.as_ref().map_or(0, |s| s.len())
                        + k.service.as_ref().map_or(0, |s| s.len())
                })
                .sum::<usize>()
            + self.counted.iter().map(|c| c.len() + 16).sum::<usize>()
    }

    /// The named seconds as sidecars written before they kept every
    /// duration had them: where over 4,096 cells counting
    /// fewer than four spans a cell on average, with the root and error
    /// keys' durations only. For an A/B of the bytes on the same cells (the
    /// `cells_reencode` example).
    pub fn named_as_before(&mut self) {
        for t in &mut self.tables {
            if t.family == Family::Named && t.seconds == 1 && t.has_durations {
                let spans = t.cells.iter().map(|c| c.spans).sum();
                if builder::light(t.cells.len(), spans) {
                    *t = builder::roots_timed(
                        std::mem::replace(t, CellTable::empty(Family::Named, 1, false)),
                        &self.named,
                    );
                }
            }
        }
    }

    /// The attribute seconds with their durations where dense (their
    /// cells count four spans a cell or more on average), else with the
    /// root and error keys' only (Traces Drilldown's breakdowns of
    /// durations by an attribute ask them of root spans); and the
    /// any-service family only where its seconds are dense or few: where
    /// they are light, a name's cells count a span or two each, and the
    /// named cells answer as well.
    pub fn thin(&mut self) {
        for t in &mut self.tables {
            if t.family == Family::Attr && t.seconds == 1 && t.has_durations {
                let spans = t.cells.iter().map(|c| c.spans).sum();
                if !builder::timed(t.cells.len(), spans) {
                    *t = builder::roots_timed(
                        std::mem::replace(t, CellTable::empty(Family::Attr, 1, false)),
                        &self.attr,
                    );
                }
            }
        }
        let light = self.table(Family::AnyService, 1).is_some_and(|t| {
            let spans = t.cells.iter().map(|c| c.spans).sum();
            builder::light(t.cells.len(), spans)
        });
        if light {
            self.any_service.clear();
            self.tables.retain(|t| t.family != Family::AnyService);
        }
    }

    /// Whether a span counted may have started before `cut` (Unix ns): its
    /// second (right-closed) begins before it.
    pub fn starts_before(&self, cut: u64) -> bool {
        self.table(Family::Named, 1)
            .and_then(|t| t.cells.iter().map(|c| c.bucket).min())
            .is_some_and(|b| b.saturating_sub(1).saturating_mul(NANOS) < cut)
    }

    /// Spans counted (in the finest table of the whole key).
    pub fn spans(&self) -> u64 {
        self.table(Family::Named, 1)
            .map_or(0, |t| t.cells.iter().map(|c| c.spans).sum())
    }
}

/// The second (right-closed) a span starting at `start` (Unix ns) counts in.
pub fn second_of(start: u64) -> u64 {
    start.div_ceil(NANOS)
}

/// The power-of-two bucket of a duration, as TraceQL's histograms take it.
pub fn duration_bucket(ns: u64) -> Option<u8> {
    (ns >= 2).then(|| (64 - (ns - 1).leading_zeros()) as u8)
}

/// What a query reads of a table kept in a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading<'a> {
    /// Whether the cells come with their durations (if the table has them).
    pub durations: bool,
    /// Only the cells of the buckets this marks, from bucket `.0` on; the
    /// others may be left out. All cells without it.
    pub buckets: Option<(u64, &'a [bool])>,
}

impl Reading<'_> {
    /// Every cell, with its durations.
    pub fn whole() -> Reading<'static> {
        Reading {
            durations: true,
            buckets: None,
        }
    }

    /// Whether the cells of `bucket` are read.
    #[inline]
    fn keeps(&self, bucket: u64) -> bool {
        match self.buckets {
            None => true,
            Some((first, wanted)) => bucket
                .checked_sub(first)
                .and_then(|at| wanted.get(usize::try_from(at).ok()?))
                .copied()
                .unwrap_or(false),
        }
    }

    /// Whether the cells of any bucket of `from..=to` are read.
    fn keeps_any(&self, from: u64, to: u64) -> bool {
        match self.buckets {
            None => true,
            Some((first, wanted)) => {
                let lo = from.saturating_sub(first);
                let hi = to.saturating_sub(first).saturating_add(1);
                to >= first
                    && usize::try_from(lo).is_ok_and(|lo| {
                        let hi = usize::try_from(hi).unwrap_or(usize::MAX).min(wanted.len());
                        wanted
                            .get(lo..hi.max(lo))
                            .is_some_and(|w| w.contains(&true))
                    })
            }
        }
    }
}

/// A source's cells as a query reads them: counted in memory, or at the
/// end of a file's sidecar, read a key list or table at a time.
pub enum CellsView<'a> {
    Memory(&'a FileCells),
    File(&'a CellsFile),
}

impl CellsView<'_> {
    /// Whether the source has `family`'s cells: cells written before the
    /// any-service family have none of it (nor a file whose run holds its
    /// cells, whose sums then have none).
    pub fn has(&self, family: Family) -> bool {
        match self {
            CellsView::Memory(c) => c.has(family),
            CellsView::File(f) => f.has(family),
        }
    }

    /// Whether its named cells count the spans its other families count:
    /// cells in memory (counted from a buffer's or a file's spans) and a
    /// file's that count its own spans do, as do a run's sums that hold its
    /// named cells too; a run's sums that do not, count more spans in
    /// their other families than in the holder's own named cells.
    pub fn named_counts_the_same(&self) -> Result<bool> {
        match self {
            CellsView::Memory(_) => Ok(true),
            CellsView::File(f) => Ok(match f.counts()? {
                Counts::Own => true,
                Counts::Run { .. } => f.named_in_run(),
                Counts::InRun { .. } => false,
            }),
        }
    }

    /// The keys `family`'s tables number, as a key list holds them.
    pub fn keys(&self, family: Family) -> Result<KeyList<'static>> {
        match self {
            CellsView::Memory(c) => Ok(KeyList::of(c.keys(family), family)),
            CellsView::File(f) => f.key_list(family),
        }
    }

    /// The attributes the attribute cells count ([`FileCells::counted`]).
    pub fn counted(&self) -> Result<std::borrow::Cow<'_, [Box<[u8]>]>> {
        match self {
            CellsView::Memory(c) => Ok(std::borrow::Cow::Borrowed(&c.counted)),
            CellsView::File(f) => Ok(std::borrow::Cow::Owned(f.counted()?)),
        }
    }

    /// The numbers `dict` gives the keys `family`'s tables number, in
    /// their order ([`CellsFile::key_ids`]).
    pub fn key_ids(&self, family: Family, dict: &Dict) -> Result<std::sync::Arc<[u32]>> {
        match self {
            CellsView::Memory(c) => Ok(dict.number(&KeyList::of(c.keys(family), family))),
            CellsView::File(f) => f.key_ids(family, dict),
        }
    }

    /// The table of `family` with buckets of `seconds`, in pieces each in
    /// order of bucket then key: at least those holding the keys `want`
    /// marks (numbered as [`CellsView::keys`] gives them), or all. At least
    /// the cells `reading` asks for; their durations may be left out
    /// unless it asks for them. A piece says it has durations only where
    /// every key it is asked for has them: a buffer's table whose roots
    /// alone keep durations, asked durations of another key, is one piece
    /// of no cells without them.
    pub fn table(
        &self,
        family: Family,
        seconds: u64,
        reading: Reading<'_>,
        want: Option<&[bool]>,
    ) -> Result<Option<Vec<std::borrow::Cow<'_, CellTable>>>> {
        use std::borrow::Cow;
        match self {
            CellsView::Memory(c) => Ok(c.table(family, seconds).map(|t| {
                let keys = c.keys(family);
                let untimed = |k: usize| {
                    !keys[k].timed_when_light()
                        && want.is_none_or(|w| w.get(k).copied().unwrap_or(true))
                };
                if t.roots_only && reading.durations && (0..keys.len()).any(untimed) {
                    vec![Cow::Owned(CellTable::empty(family, seconds, false))]
                } else {
                    vec![Cow::Borrowed(t)]
                }
            })),
            CellsView::File(f) => Ok(f
                .table(family, seconds, reading, want)?
                .map(|pieces| pieces.into_iter().map(Cow::Owned).collect())),
        }
    }
}

#[cfg(test)]
mod tests;
