//! A merge's metrics cells added up from its inputs' cells
//! ([`InputSums`]), instead of counted again from the spans it writes.
//!
//! Each merge used to count every span it wrote into cells, although its
//! inputs' cells had counted the same spans: most of what the cells cost at
//! ingest (docs/BENCHMARKS.md, "Cells added up at merges"). Where every
//! input's cells are readable and, together, count each input's spans once,
//! a merge adds them up instead, per time partition of its outputs, and
//! writes the sums of every family with the last file of each partition's
//! run ([`FileCells::named_in_run`]). Its outputs split the trace IDs, so no
//! input cell belongs to one output file: the run's other files hold no
//! cells.
//!
//! What the sums must not count is taken back out, counted from those
//! spans alone: the spans the merge drops (exact repeats, spans past
//! retention); and, where a merge sorts spans into partitions by their
//! start (level 0), a span starting on a partition's first nanosecond,
//! which its buckets (right-closed) put at the end of the partition before,
//! is moved to its own. The sums of each partition are checked against the
//! spans its files were given before they are written; cells that do not
//! add up are not written, and the run's spans are counted when a query
//! needs them.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use super::{
    builder::roots_timed,
    decode,
    packed::{Packed, Packer},
    run::{attribute_of, merge_durations, sum},
    Cell, CellAttributes, CellKey, CellTable, CellsBuilder, CellsFile, Counts, Family, FileCells,
    HashMap, BUCKET_SECONDS, NANOS,
};
use crate::{layout::sidecar_path, span::Span};

/// Cells the inputs' tables may hold in all (every family and length) for
/// a merge to add them up; past it the merge counts its spans. At 16 Mi a
/// merge of an hour's level-1 runs at max ingest (84 M spans, 57 files,
/// attribute cells included) adds them up, holding less than counting its
/// spans held (338 against 441 MB, docs/BENCHMARKS.md, "Cells added up at
/// merges"); what it holds is counted in its work budget as it reads them.
pub const MAX_SUMMED_CELLS: u64 = 16 << 20;

const FAMILIES: [Family; 4] = [
    Family::Named,
    Family::Unnamed,
    Family::Attr,
    Family::AnyService,
];

/// One input of a merge: its file's ID, the path of its sorted file, and
/// the spans it holds.
pub type Input<'a> = (u64, &'a Path, u64);

/// The cells of a merge's outputs, added up from its inputs' cells per
/// partition of the outputs; see the module docs.
pub struct InputSums {
    attributes: Arc<CellAttributes>,
    /// A partition's length in seconds where the merge sorts spans into
    /// partitions by their start; `None` where every output is in `fixed`.
    split: Option<u64>,
    fixed: u64,
    /// The attributes every input counted that the node still counts.
    counted: Vec<Box<[u8]>>,
    /// Whether every input has any-service cells (a file whose seconds of
    /// that family were light, or written before it, has none): else the
    /// sums leave the family out.
    any_service: bool,
    parts: BTreeMap<u64, PartSums>,
}

/// Cells of tables added to the sums, unpacked, past which they are added
/// up and packed into the sums: packing the sums again for each input's
/// table took most of a merge's time in the cells.
const PENDING_CELLS: usize = 256 * 1024;

/// One family's sums in one partition.
#[derive(Default)]
struct FamilySums {
    keys: Vec<CellKey>,
    ids: HashMap<CellKey, u32>,
    /// Per length of [`BUCKET_SECONDS`].
    tables: [Option<Packed>; 3],
    /// Per length, tables to add to `tables`, and their cells.
    pending: [Vec<CellTable>; 3],
    pending_cells: [usize; 3],
}

/// One partition's sums, and the spans to add to them and take out.
struct PartSums {
    families: [FamilySums; 4],
    plus: Delta,
    minus: Delta,
}

/// Spans counted apart, and how many.
struct Delta {
    cells: CellsBuilder,
    spans: u64,
}

/// Why a merge's inputs' cells cannot be added up: the merge counts the
/// spans it writes instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSummed {
    /// Partitions that are not whole multiples of the buckets.
    Partitions,
    /// An input without cells, or whose cells cannot be read.
    Unreadable,
    /// More than [`MAX_SUMMED_CELLS`] cells in the inputs.
    TooManyCells,
    /// Cells that count an input's spans twice, or not at all.
    NotOnce,
    /// An input whose seconds do not count its spans.
    Uneven,
}

impl NotSummed {
    /// The reason as the "compaction done" log line gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            NotSummed::Partitions => "partitions",
            NotSummed::Unreadable => "unreadable",
            NotSummed::TooManyCells => "too_many_cells",
            NotSummed::NotOnce => "not_once",
            NotSummed::Uneven => "uneven",
        }
    }
}

impl InputSums {
    /// The sums of `inputs`' cells for a merge writing its outputs in
    /// partition `fixed`, or (`None`) in the partitions of `partition_nanos`
    /// their spans start in; or why they cannot be added up.
    /// `held` is told the bytes it holds as it reads each input's cells
    /// (the input's sidecar and its cells decoded, beside the sums so far)
    /// and once it is done.
    pub fn of(
        inputs: &[Input<'_>],
        fixed: Option<u64>,
        partition_nanos: u64,
        attributes: Arc<CellAttributes>,
        held: &mut dyn FnMut(usize),
    ) -> Result<InputSums, NotSummed> {
        let split = match fixed {
            Some(_) => None,
            None => {
                let secs = partition_nanos / NANOS;
                let whole = partition_nanos.is_multiple_of(NANOS)
                    && secs > 0
                    && BUCKET_SECONDS.iter().all(|l| secs.is_multiple_of(*l));
                Some(whole.then_some(secs).ok_or(NotSummed::Partitions)?)
            }
        };
        // Which family of which input counts which inputs' spans, from the
        // cells' indexes alone.
        let spans_of: HashMap<u64, u64> = inputs.iter().map(|&(id, _, n)| (id, n)).collect();
        let mut covered: [HashMap<u64, u32>; 4] = Default::default();
        let mut sources: Vec<[Vec<u64>; 4]> = Vec::with_capacity(inputs.len());
        let mut counted: Option<Vec<Box<[u8]>>> = None;
        let mut any_service = true;
        let mut cells = 0u64;
        for &(id, table, _) in inputs {
            let file = CellsFile::open(table)
                .ok()
                .flatten()
                .ok_or(NotSummed::Unreadable)?;
            cells += FAMILIES
                .iter()
                .flat_map(|&f| BUCKET_SECONDS.iter().map(move |&l| (f, l)))
                .map(|(f, l)| file.cell_count(f, l))
                .sum::<u64>();
            if cells > MAX_SUMMED_CELLS {
                return Err(NotSummed::TooManyCells);
            }
            let counts = file.counts().map_err(|_| NotSummed::Unreadable)?;
            let covers: [Vec<u64>; 4] = FAMILIES.map(|family| match (family, &counts) {
                (Family::Named, _) if !file.named_in_run() => vec![id],
                (Family::Attr, _) if file.attr_per_file() => vec![id],
                (_, Counts::Own) => vec![id],
                (_, Counts::Run { members, .. }) => members.clone(),
                (_, Counts::InRun { .. }) => Vec::new(),
            });
            for (family, of) in covers.iter().enumerate() {
                for m in of {
                    *covered[family].entry(*m).or_default() += 1;
                }
            }
            if !covers[3].is_empty() && !file.has(Family::AnyService) {
                any_service = false;
            }
            if !covers[2].is_empty() {
                let theirs = file.counted().map_err(|_| NotSummed::Unreadable)?;
                counted = Some(match counted {
                    None => theirs,
                    Some(c) => c.into_iter().filter(|a| theirs.contains(a)).collect(),
                });
            }
            sources.push(covers);
        }
        // Every input counted once in every family the sums keep, by
        // inputs of the merge.
        if !any_service {
            for covers in &mut sources {
                covers[3].clear();
            }
        }
        let once = covered.iter().take(3 + usize::from(any_service)).all(|c| {
            c.len() == spans_of.len() && c.iter().all(|(m, &n)| n == 1 && spans_of.contains_key(m))
        });
        if !once {
            return Err(NotSummed::NotOnce);
        }
        let mut counted = counted.unwrap_or_default();
        counted.retain(|a| attributes.names().contains(a));
        let mut sums = InputSums {
            attributes,
            split,
            fixed: fixed.unwrap_or(0),
            counted,
            any_service,
            parts: BTreeMap::new(),
        };
        for (&(_, table, _), covers) in inputs.iter().zip(&sources) {
            if covers.iter().all(Vec::is_empty) {
                continue;
            }
            let path = sidecar_path(table);
            let bytes = std::fs::read(&path).map_err(|_| NotSummed::Unreadable)?;
            let file = decode(&path, &bytes)
                .ok()
                .flatten()
                .ok_or(NotSummed::Unreadable)?;
            held(sums.bytes() + bytes.capacity() + file.bytes());
            drop(bytes);
            for (family, of) in covers.iter().enumerate() {
                if of.is_empty() {
                    continue;
                }
                let f = FAMILIES[family];
                let keys = file.keys(f);
                // A family's seconds count each span of the files they
                // cover once (the attribute family once per attribute).
                let spans: u64 = of.iter().map(|m| spans_of[m]).sum();
                let seconds = file
                    .table(f, 1)
                    .map_or(0, |t| t.cells.iter().map(|c| c.spans).sum());
                if f != Family::Attr && seconds != spans {
                    return Err(NotSummed::Uneven);
                }
                let keep: Vec<bool> = keys.iter().map(|k| sums.counts_key(k)).collect();
                for t in file.tables.iter().filter(|t| t.family == f) {
                    sums.add(family, keys, &keep, t);
                }
            }
            // Its tables added, until the input's are dropped.
            held(sums.bytes() + file.bytes());
        }
        held(sums.bytes());
        Ok(sums)
    }

    /// Whether the sums keep a key's cells: every named and unnamed key,
    /// an attribute key of an attribute counted.
    fn counts_key(&self, key: &CellKey) -> bool {
        match &key.attr {
            None => true,
            Some(attr) => {
                attribute_of(attr).is_some_and(|a| self.counted.iter().any(|c| **c == *a))
            }
        }
    }

    /// The partition whose sums a bucket of `len` seconds goes to.
    fn partition_of_bucket(&self, bucket: u64, len: u64) -> u64 {
        match self.split {
            None => self.fixed,
            Some(secs) => bucket.saturating_sub(1).saturating_mul(len) / secs,
        }
    }

    /// The partition a span starting at `start` is in, and the one whose
    /// sums its cells were added to (the partition before, for a span
    /// starting on a partition's first nanosecond).
    fn partitions_of(&self, start: u64) -> (u64, u64) {
        match self.split {
            None => (self.fixed, self.fixed),
            Some(secs) => {
                let p = start / (secs * NANOS);
                let edge = start > 0 && start.is_multiple_of(secs * NANOS);
                (p, if edge { p - 1 } else { p })
            }
        }
    }

    fn part(&mut self, p: u64) -> &mut PartSums {
        let attributes = &self.attributes;
        self.parts
            .entry(p)
            .or_insert_with(|| PartSums::new(attributes))
    }

    /// `t`, a table of `keys` (those `keep` marks), added to the sums of
    /// the partitions its buckets fall in.
    fn add(&mut self, family: usize, keys: &[CellKey], keep: &[bool], t: &CellTable) {
        let Some(len) = BUCKET_SECONDS.iter().position(|&l| l == t.seconds) else {
            return;
        };
        // A light table without a root's or an error's cell keeps no
        // duration (`builder::roots_timed`): it holds the durations of all
        // its roots and errors, as a table of roots' durations does.
        let vacuous = !t.has_durations
            && t.cells
                .iter()
                .all(|c| !keys[c.key as usize].timed_when_light());
        let mut at = 0;
        while at < t.cells.len() {
            let p = self.partition_of_bucket(t.cells[at].bucket, t.seconds);
            let end = at
                + t.cells[at..]
                    .partition_point(|c| self.partition_of_bucket(c.bucket, t.seconds) == p);
            let sums = &mut self.part(p).families[family];
            let mut piece = CellTable {
                roots_only: t.roots_only || vacuous,
                ..CellTable::empty(t.family, t.seconds, t.has_durations || vacuous)
            };
            // Each key numbered once (hashing it took as long as adding).
            let mut ids = vec![u32::MAX; keys.len()];
            for c in t.cells[at..end].iter().filter(|c| keep[c.key as usize]) {
                let key = match ids[c.key as usize] {
                    u32::MAX => {
                        let id = sums.id(&keys[c.key as usize]);
                        ids[c.key as usize] = id;
                        id
                    }
                    id => id,
                };
                let from = piece.durations.len() as u32;
                piece.durations.extend_from_slice(t.durations_of(c));
                piece.cells.push(Cell {
                    key,
                    durations: (from, piece.durations.len() as u32),
                    ..*c
                });
            }
            piece.sort();
            sums.add(len, piece);
            at = end;
        }
    }

    /// A span the merge writes: at level 0, one starting on its
    /// partition's first nanosecond moves from the partition before.
    pub fn written(&mut self, span: &Span) {
        let (p, summed) = self.partitions_of(span.start_unix_nano);
        if p != summed {
            self.part(summed).minus.add(span);
            self.part(p).plus.add(span);
        }
    }

    /// A span the merge drops (a repeat, or past retention): taken out.
    pub fn dropped(&mut self, span: &Span) {
        let (_, summed) = self.partitions_of(span.start_unix_nano);
        self.part(summed).minus.add(span);
    }

    /// About the bytes the sums hold.
    pub fn bytes(&self) -> usize {
        self.parts.values().map(PartSums::bytes).sum()
    }

    /// The cells of partition `p`'s run, to write with its last file:
    /// `members` its files (IDs ascending, the run named by the first),
    /// `spans` the spans the merge wrote to them. `None` when the sums do
    /// not add up to those spans (the run's spans are then counted when a
    /// query needs them).
    pub fn take(&mut self, p: u64, members: Vec<u64>, spans: u64) -> Option<FileCells> {
        let part = self
            .parts
            .remove(&p)
            .unwrap_or_else(|| PartSums::new(&self.attributes));
        let PartSums {
            mut families,
            plus,
            minus,
        } = part;
        let mut counted = self.counted.clone();
        let (plus, minus) = (plus.finish()?, minus.finish()?);
        for delta in [&plus, &minus].into_iter().flatten() {
            // An attribute the spans counted apart left out cannot be
            // added or taken out.
            counted.retain(|a| delta.counted.contains(a));
        }
        for (delta, add) in [(plus, true), (minus, false)] {
            let Some(delta) = delta else { continue };
            for (family, sums) in families.iter_mut().enumerate() {
                if FAMILIES[family] == Family::AnyService && !self.any_service {
                    continue;
                }
                let keys = delta.keys(FAMILIES[family]);
                // Cells of an attribute the inputs' sums left out are not
                // in them to take out.
                let keep: Vec<bool> = keys.iter().map(|k| self.counts_key(k)).collect();
                for t in delta.tables.iter().filter(|t| t.family == FAMILIES[family]) {
                    sums.apply(keys, &keep, t, add)?;
                }
            }
        }
        let [named, unnamed, attr, any_service] = families;
        let (named, mut tables) = named.finish(Family::Named, |_| true);
        let (unnamed, more) = unnamed.finish(Family::Unnamed, |_| true);
        tables.extend(more);
        let (any_service, more) = any_service.finish(Family::AnyService, |_| true);
        if self.any_service {
            tables.extend(more);
        }
        let keeps = |k: &CellKey| {
            k.attr
                .as_deref()
                .and_then(attribute_of)
                .is_some_and(|a| counted.iter().any(|c| **c == *a))
        };
        let (attr, more) = attr.finish(Family::Attr, keeps);
        if !counted.is_empty() {
            tables.extend(more);
        }
        let seconds_spans = |f: Family| {
            tables
                .iter()
                .find(|t| t.family == f && t.seconds == 1)
                .map_or(0, |t| t.cells.iter().map(|c| c.spans).sum::<u64>())
        };
        let whole = [Family::Named, Family::Unnamed, Family::AnyService];
        let kept = |f: &Family| *f != Family::AnyService || self.any_service;
        if whole
            .iter()
            .filter(|f| kept(f))
            .any(|&f| seconds_spans(f) != spans)
        {
            return None;
        }
        // The named seconds keep every duration, as a file's own do, where
        // each input's did: an input's written before they did may have
        // kept only its roots' and errors', and the sums then keep only
        // those (the others' of the other inputs are dropped).
        for t in &mut tables {
            if t.family == Family::Named && t.seconds == 1 && t.has_durations && t.roots_only {
                let whole = std::mem::replace(t, CellTable::empty(Family::Named, 1, false));
                *t = roots_timed(whole, &named);
            }
        }
        let run = members.first().copied()?;
        let one = members.len() == 1;
        let mut cells = FileCells {
            named,
            unnamed,
            attr: if counted.is_empty() { Vec::new() } else { attr },
            any_service: if self.any_service {
                any_service
            } else {
                Vec::new()
            },
            counted,
            tables,
            counts: if one {
                Counts::Own
            } else {
                Counts::Run { run, members }
            },
            named_in_run: !one,
            ..FileCells::default()
        };
        cells.thin();
        Some(cells)
    }
}

impl PartSums {
    fn new(attributes: &Arc<CellAttributes>) -> PartSums {
        let delta = || Delta {
            cells: CellsBuilder::new(attributes.clone()),
            spans: 0,
        };
        PartSums {
            families: Default::default(),
            plus: delta(),
            minus: delta(),
        }
    }

    fn bytes(&self) -> usize {
        self.families
            .iter()
            .map(|f| {
                f.tables.iter().flatten().map(Packed::bytes).sum::<usize>()
                    + f.keys.len() * 96
                    + f.pending_cells.iter().sum::<usize>() * 48
            })
            .sum::<usize>()
            + self.plus.cells.held_bytes()
            + self.minus.cells.held_bytes()
    }
}

impl Delta {
    fn add(&mut self, span: &Span) {
        self.cells.add(span);
        self.spans += 1;
    }

    /// The spans' cells with every duration (`Some(None)`: no span), or
    /// `None` when they are past what cells hold.
    fn finish(self) -> Option<Option<FileCells>> {
        if self.spans == 0 {
            return Some(None);
        }
        self.cells.finish_counted(|_| ()).map(Some)
    }
}

impl FamilySums {
    /// `key`'s number, numbering it if new.
    fn id(&mut self, key: &CellKey) -> u32 {
        match self.ids.get(key) {
            Some(&id) => id,
            None => {
                let id = self.keys.len() as u32;
                self.keys.push(key.clone());
                self.ids.insert(key.clone(), id);
                id
            }
        }
    }

    /// `t` (in order, numbered as the sums are) added to the sums of
    /// length `len`.
    fn add(&mut self, len: usize, t: CellTable) {
        self.pending_cells[len] += t.cells.len();
        self.pending[len].push(t);
        if self.pending_cells[len] >= PENDING_CELLS {
            self.fold(len);
        }
    }

    /// The tables pending at length `len` added to its sums.
    fn fold(&mut self, len: usize) {
        let pending = std::mem::take(&mut self.pending[len]);
        self.pending_cells[len] = 0;
        let Some(t) = combined(pending) else {
            return;
        };
        self.tables[len] = Some(match self.tables[len].take() {
            None => Packed::of(&t),
            Some(sums) => sum(&sums, &t),
        });
    }

    /// `t`, a table of `keys` (the cells of those `keep` marks), added to
    /// the sums (`add`) or taken out of them; `None` when a cell taken out
    /// is not in them.
    fn apply(&mut self, keys: &[CellKey], keep: &[bool], t: &CellTable, add: bool) -> Option<()> {
        let len = BUCKET_SECONDS.iter().position(|&l| l == t.seconds)?;
        let mut own = CellTable {
            cells: Vec::with_capacity(t.cells.len()),
            ..t.clone()
        };
        for c in t.cells.iter().filter(|c| keep[c.key as usize]) {
            own.cells.push(Cell {
                key: self.id(&keys[c.key as usize]),
                ..*c
            });
        }
        own.sort();
        self.fold(len);
        if add {
            self.add(len, own);
            self.fold(len);
        } else {
            let sums = self.tables[len].take()?;
            self.tables[len] = Some(difference(&sums, &own, &self.keys)?);
        }
        Some(())
    }

    /// The keys `keep` accepts that have cells, in order, and the tables
    /// numbered by them.
    fn finish(
        mut self,
        family: Family,
        keep: impl Fn(&CellKey) -> bool,
    ) -> (Vec<CellKey>, Vec<CellTable>) {
        for len in 0..BUCKET_SECONDS.len() {
            self.fold(len);
        }
        // A length of no cells has a table of none, as a builder's has (a
        // query takes a missing table for cells it cannot read).
        for (len, t) in self.tables.iter_mut().enumerate() {
            if t.is_none() {
                let empty = CellTable::empty(family, BUCKET_SECONDS[len], true);
                *t = Some(Packed::of(&empty));
            }
        }
        let mut tables: Vec<CellTable> = self
            .tables
            .into_iter()
            .flatten()
            .map(|p| p.unpacked())
            .collect();
        let mut used = vec![false; self.keys.len()];
        for c in tables.iter().flat_map(|t| &t.cells) {
            used[c.key as usize] = true;
        }
        let mut order: Vec<(CellKey, u32)> = self
            .keys
            .into_iter()
            .zip(0..)
            .filter(|(k, id)| used[*id as usize] && keep(k))
            .collect();
        order.sort_unstable();
        let mut renumber = vec![u32::MAX; used.len()];
        for (new, (_, old)) in order.iter().enumerate() {
            renumber[*old as usize] = new as u32;
        }
        for t in &mut tables {
            t.cells.retain_mut(|c| {
                c.key = renumber[c.key as usize];
                c.key != u32::MAX
            });
            t.sort();
        }
        (order.into_iter().map(|(k, _)| k).collect(), tables)
    }
}

/// Tables of one family and length, each in order, added up into one in
/// order (`None` for none): with durations if all have them, of roots only
/// if any is.
fn combined(tables: Vec<CellTable>) -> Option<CellTable> {
    let first = tables.first()?;
    let mut all = CellTable {
        roots_only: tables.iter().any(|t| t.roots_only),
        ..CellTable::empty(
            first.family,
            first.seconds,
            tables.iter().all(|t| t.has_durations),
        )
    };
    for t in tables {
        all.append(t);
    }
    all.sort();
    let mut out = CellTable {
        cells: Vec::with_capacity(all.cells.len()),
        durations: Vec::with_capacity(all.durations.len()),
        ..CellTable::empty(all.family, all.seconds, all.has_durations)
    };
    out.roots_only = all.roots_only;
    let mut durations = Vec::new();
    let mut at = 0;
    while at < all.cells.len() {
        let c = all.cells[at];
        let end = at + all.cells[at..].partition_point(|d| (d.bucket, d.key) == (c.bucket, c.key));
        let spans = all.cells[at..end].iter().map(|d| d.spans).sum();
        durations.clear();
        if out.has_durations {
            for d in &all.cells[at..end] {
                let before = std::mem::take(&mut durations);
                merge_durations(&mut durations, &before, all.durations_of(d));
            }
        }
        let from = out.durations.len() as u32;
        out.durations.extend_from_slice(&durations);
        out.cells.push(Cell {
            spans,
            durations: (from, out.durations.len() as u32),
            ..c
        });
        at = end;
    }
    Some(out)
}

/// `b`'s cells (in order, every one of them in `a`) taken out of `a`, whose
/// keys are `keys`; `None` when `b` has a cell `a` has not, or more spans.
fn difference(a: &Packed, b: &CellTable, keys: &[CellKey]) -> Option<Packed> {
    let mut out = Packer::new(a.family, a.seconds, a.has_durations);
    if a.roots_only {
        out = out.roots_only();
    }
    let timed = |key: u32| !a.roots_only || keys[key as usize].timed_when_light();
    let mut durations = Vec::new();
    let mut j = 0;
    for chunk in a.chunks() {
        for x in &chunk.cells {
            match b.cells.get(j) {
                Some(y) if (y.bucket, y.key) < (x.bucket, x.key) => return None,
                Some(y) if (y.bucket, y.key) == (x.bucket, x.key) => {
                    j += 1;
                    let spans = x.spans.checked_sub(y.spans)?;
                    if spans == 0 {
                        continue;
                    }
                    durations.clear();
                    if a.has_durations && timed(x.key) {
                        take_durations(&mut durations, chunk.durations_of(x), b.durations_of(y))?;
                    }
                    out.push(x.bucket, x.key, spans, &durations);
                }
                _ => out.push(x.bucket, x.key, x.spans, chunk.durations_of(x)),
            }
        }
    }
    (j == b.cells.len()).then(|| out.finish())
}

/// Lists of (exponent, spans) in ascending exponent: `b`'s taken out of
/// `a`'s, into `out`; `None` when `b` has more of an exponent than `a`.
fn take_durations(out: &mut Vec<(u8, u64)>, a: &[(u8, u64)], b: &[(u8, u64)]) -> Option<()> {
    let mut j = 0;
    for &(exp, n) in a {
        let taken = match b.get(j) {
            Some(&(e, _)) if e < exp => return None,
            Some(&(e, m)) if e == exp => {
                j += 1;
                m
            }
            _ => 0,
        };
        let left = n.checked_sub(taken)?;
        if left > 0 {
            out.push((exp, left));
        }
    }
    (j == b.len()).then_some(())
}
