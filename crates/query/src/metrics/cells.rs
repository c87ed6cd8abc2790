//! A metrics query answered from the stores' metrics cells
//! ([`tracedb_lsm::index::cells`]) instead of their spans: per file and
//! second, the spans of each (service, name, kind, status, has a parent)
//! counted, with their durations' power-of-two buckets; and of each
//! (service, counted attribute's value, kind, status, has a parent).
//!
//! Exact by construction: a query is answered this way only when every
//! field its filters and `by()` read is one a cell key holds, and its grid
//! is of whole seconds (so an interval is a run of whole seconds). A query
//! may read one span or resource attribute besides, if its filters pass
//! only spans carrying it: it adds the attribute cells of the attribute's
//! values, in the files that counted it (a file that did not has the query
//! read the spans). The
//! keys that agree on the fields the query reads are judged once, by the
//! TraceQL evaluator itself, on a span built with exactly those fields:
//! the verdict and the labels are those of every span their cells count,
//! and their sums are added up as one. Spans are read only for exemplars: a few
//! traces from each tenth of the window.

use std::sync::Arc;

use tracedb_lsm::{
    index::{
        cells::{
            display_attribute, CellAttributes, CellKey, CellsView, Dict, Family, Parent, Reading,
            BUCKET_SECONDS, RESOURCE_SCOPE, SPAN_SCOPE,
        },
        SearchQuery,
    },
    CellsError, CellsStats, Engine, TimeRange, TraceId,
};
use tracedb_proto::wire::put_varint;
use tracedb_traceql::{
    analysis::{requires_present, requires_root, span_fields},
    ast::{Attribute, Intrinsic, MetricsFn, Scope},
    metrics::{Grid, MetricsEval},
    trace::{EncodedSpan, Trace},
    Compiled,
};

use super::{series_capped, MetricsRequest, CELL_BYTES};
use crate::{
    cancel::Cancel,
    read::Answer,
    search::{decode, op_needs, RunError},
};

const SEC: u64 = 1_000_000_000;
/// Parts of the window exemplars are looked for in, and candidate traces
/// read in each at most.
const EXEMPLAR_WINDOWS: u64 = 10;
const EXEMPLAR_READS: usize = 4;
/// How much narrower than its part's share of the trace IDs the slice an
/// exemplar walk tries first is: with runs of up to about a hundred files,
/// one or two files of each.
const NARROW_SLICE: u128 = 16;

/// How a query is read from cells: the family of keys and the bucket
/// lengths (seconds, finest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    family: Family,
    levels: &'static [u64],
    durations: bool,
    /// Whether the query's conditions read the span name (else a named
    /// key has the verdict of the key without its name).
    judges_names: bool,
    /// Whether only root spans pass its conditions
    /// ([`requires_root`]): a key of other spans is left out
    /// unjudged.
    roots: bool,
    /// In the attribute family, the attribute the query reads, as files'
    /// cells name the attributes they count (a scope byte, then the key).
    attr: Option<Box<[u8]>>,
    /// The key fields its filters and `by()` read: keys that agree on
    /// them have one verdict and one series.
    reads: KeyReads,
}

/// Which fields of a cell key a query's filters and `by()` read (the
/// attribute, when the plan has one, is always read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct KeyReads {
    parent: bool,
    service: bool,
    name: bool,
    kind: bool,
    status: bool,
}

impl KeyReads {
    fn of<'a>(fields: impl IntoIterator<Item = &'a Attribute>) -> KeyReads {
        let mut reads = KeyReads::default();
        for a in fields {
            match a {
                Attribute::Intrinsic(Intrinsic::NestedSetParent) => reads.parent = true,
                Attribute::Intrinsic(Intrinsic::Name) => reads.name = true,
                Attribute::Intrinsic(Intrinsic::Kind) => reads.kind = true,
                Attribute::Intrinsic(Intrinsic::Status) => reads.status = true,
                Attribute::Attr {
                    scope: Scope::Resource,
                    name,
                } if name == "service.name" => reads.service = true,
                _ => {}
            }
        }
        reads
    }

    /// `key` with the fields not read left empty: what the query's
    /// verdict and labels of `key` depend on.
    fn project(self, key: CellKey) -> CellKey {
        CellKey {
            parent: if self.parent {
                key.parent
            } else {
                Parent::None
            },
            service: key.service.filter(|_| self.service),
            name: key.name.filter(|_| self.name),
            attr: key.attr,
            kind: if self.kind { key.kind } else { 0 },
            status: if self.status { key.status } else { 0 },
        }
    }
}

/// How `req` can be answered from cells, if it can: every field its filters
/// and `by()` read is one a cell key holds (or one span or resource
/// attribute, which its filters pass only spans carrying), its function counts spans or
/// their durations, and its grid's start and step are whole buckets of the
/// finest table it needs.
pub fn plan(req: &MetricsRequest) -> Option<Plan> {
    let g = req.grid;
    // An instant query's interval is closed at its start, which cuts the
    // bucket ending there.
    if g.instant {
        return None;
    }
    let metrics = req.query.query.metrics.as_deref()?;
    let duration = |a: &Attribute| matches!(a, Attribute::Intrinsic(Intrinsic::Duration));
    let durations = match &metrics.function {
        MetricsFn::Rate | MetricsFn::CountOverTime => false,
        MetricsFn::HistogramOverTime(a) | MetricsFn::QuantileOverTime(a, _) if duration(a) => true,
        _ => return None,
    };
    let by_ok = metrics
        .by
        .iter()
        .all(|a| !matches!(a, Attribute::Intrinsic(Intrinsic::NestedSetParent)));
    let fields = span_fields(&req.query.query)?;
    let reads = KeyReads::of(fields.iter().copied().chain(&metrics.by));
    // One attribute at most besides the key's fields, which every span the
    // filters pass carries.
    let mut others = fields
        .iter()
        .copied()
        .chain(&metrics.by)
        .filter(|a| !key_field(a));
    let attr = match others.next() {
        None => None,
        Some(a) => {
            let name = counted_name(a)?;
            if !others.all(|b| b == a) || !requires_present(&req.query.query, a) {
                return None;
            }
            Some(name)
        }
    };
    if !by_ok {
        return None;
    }
    let name = |a: &Attribute| matches!(a, Attribute::Intrinsic(Intrinsic::Name));
    let judges_names = fields.into_iter().any(name);
    let named = judges_names || metrics.by.iter().any(name);
    if named && attr.is_some() {
        // No cell key has both.
        return None;
    }
    // The seconds of the whole key and of the attribute keys hold
    // durations where they count several spans each; a file whose do not
    // has the query read the spans (`Counter::add`).
    let levels: &'static [u64] = &BUCKET_SECONDS[..];
    // The grid's edges are its start plus multiples of the step, and its
    // end: the buckets of a length dividing them never straddle an edge, so
    // no finer bucket is counted (its coarser parent lies whole inside an
    // interval), and finer tables are not read.
    let fits = |len: &u64| {
        let ns = len * SEC;
        g.start.is_multiple_of(ns) && g.step.is_multiple_of(ns) && g.end.is_multiple_of(ns)
    };
    let first = levels.iter().rposition(fits)?;
    let levels = &levels[first..];
    Some(Plan {
        // A name asked of every service is read from the cells of every
        // service added up (a source without them, from its named cells:
        // `Counter::add`).
        family: if named && reads.service {
            Family::Named
        } else if named {
            Family::AnyService
        } else if attr.is_some() {
            Family::Attr
        } else {
            Family::Unnamed
        },
        levels,
        durations,
        judges_names,
        roots: requires_root(&req.query.query),
        attr,
        reads,
    })
}

/// The class of `key` for `req`, if cells can answer it: the key with only
/// the fields `req` reads ([`Counter::class`]).
#[cfg(test)]
pub fn class_of(req: &MetricsRequest, key: CellKey) -> Option<CellKey> {
    Some(plan(req)?.reads.project(key))
}

/// The family of cells [`plan`] reads for `req`, if cells can answer it.
#[cfg(test)]
pub fn family_of(req: &MetricsRequest) -> Option<Family> {
    Some(plan(req)?.family)
}

/// The name attribute cells give `a`, if it is a span or resource
/// attribute (`span.<key>`, `resource.<key>`).
fn counted_name(a: &Attribute) -> Option<Box<[u8]>> {
    let Attribute::Attr { scope, name } = a else {
        return None;
    };
    let scope = match scope {
        Scope::Span => SPAN_SCOPE,
        Scope::Resource => RESOURCE_SCOPE,
        _ => return None,
    };
    Some([&[scope][..], name.as_bytes()].concat().into())
}

/// Whether `req` can be answered from cells ([`plan`]), if the files count
/// the attribute it reads (if any).
pub fn answerable(req: &MetricsRequest) -> bool {
    plan(req).is_some()
}

/// The attribute (as TraceQL names it) that `req`, answerable from cells,
/// reads and `attributes` does not count: files written with them have
/// no cells of it, and the query reads spans.
pub fn uncounted(req: &MetricsRequest, attributes: &CellAttributes) -> Option<String> {
    let attr = plan(req)?.attr?;
    (!attributes.names().contains(&attr)).then(|| display_attribute(&attr))
}

/// A field a cell key holds as the span has it. `nestedSetParent` only in
/// the form "is a root" (`< 0`, `= -1`), which is all a per-span query may
/// ask of it.
fn key_field(a: &Attribute) -> bool {
    match a {
        Attribute::Intrinsic(
            Intrinsic::Name | Intrinsic::Kind | Intrinsic::Status | Intrinsic::NestedSetParent,
        ) => true,
        Attribute::Attr {
            scope: Scope::Resource,
            name,
        } => name == "service.name",
        _ => false,
    }
}

fn bytes_field(out: &mut Vec<u8>, n: u64, b: &[u8]) {
    put_varint(out, n << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A one-span trace whose span has exactly the fields of `key`.
fn key_trace(key: &CellKey) -> Option<Trace> {
    let mut span = Vec::new();
    bytes_field(&mut span, 1, &[1; 16]);
    bytes_field(&mut span, 2, &[2; 8]);
    if let Some(name) = &key.name {
        bytes_field(&mut span, 5, name);
    }
    match key.parent {
        Parent::None => {}
        Parent::Zero => bytes_field(&mut span, 4, &[0; 8]),
        // A parent the trace does not hold: what a per-span query may read
        // of it ("is not a root") is the same as for any other parent.
        Parent::Some => bytes_field(&mut span, 4, &[3; 8]),
    }
    put_varint(&mut span, 6 << 3);
    put_varint(&mut span, u64::from(key.kind));
    put_varint(&mut span, 7 << 3 | 1);
    span.extend_from_slice(&1u64.to_le_bytes());
    put_varint(&mut span, 8 << 3 | 1);
    span.extend_from_slice(&2u64.to_le_bytes());
    if key.status != 0 {
        let mut status = Vec::new();
        put_varint(&mut status, 3 << 3);
        put_varint(&mut status, u64::from(key.status));
        bytes_field(&mut span, 15, &status);
    }
    let attr = key.attr.as_deref().map(|a| a.split_at(1));
    if let Some((&[SPAN_SCOPE], kv)) = attr {
        bytes_field(&mut span, 9, kv);
    }
    let mut resource = key.service.as_ref().map(|kv| {
        let mut r = Vec::new();
        bytes_field(&mut r, 1, kv);
        r
    });
    match attr {
        Some((&[RESOURCE_SCOPE], kv)) => bytes_field(resource.get_or_insert_default(), 1, kv),
        Some((&[SPAN_SCOPE], _)) | None => {}
        // An attribute of no scope this crate builds.
        Some(_) => return None,
    }
    Trace::decode(
        [1; 16],
        [EncodedSpan {
            payload: &span,
            resource: resource.as_deref(),
            scope: None,
        }],
    )
    .ok()
}

type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// Most sums kept in rows (about 32 MiB).
const DENSE_SUMS: usize = 1 << 20;
/// Most buckets of a level whose intervals are looked up in a table (4 MiB).
const MEMO_BUCKETS: u64 = 1 << 20;
/// Spans and their duration buckets, added up.
type Sum = (u64, Vec<(u8, u64)>);

/// Adds up the cells of each source per key and interval, then counts the
/// sums into the evaluator: each key is judged, and its series found, once
/// per interval rather than once per bucket.
struct Counter<'a> {
    query: &'a Compiled,
    grid: Grid,
    /// Only spans starting after this (Unix ns, an edge of the grid) are
    /// counted: the grid's start, or retention's split ([`answer_after`]).
    after: u64,
    plan: Plan,
    /// The numbering of the sources' keys ([`Engine::cells_dict`]).
    dict: Arc<Dict>,
    /// Per number the dictionary gave a key, the number of its class
    /// ([`Counter::class`]) once met (`u32::MAX`: not met).
    local: Vec<u32>,
    /// Per dictionary number of a key without its name, whether keys with
    /// its fields could match ([`Counter::could_match`]), once judged.
    nameless: Vec<Option<bool>>,
    /// The number of each class of keys met ([`Counter::class`]).
    classes: Map<Option<CellKey>, u32>,
    /// Per class number, its one-span trace if the query matches it.
    matched: Vec<Option<Trace>>,
    /// Per class number, whether its span could not be rebuilt (a cell of
    /// it in the grid fails the answer).
    unbuilt: Vec<bool>,
    /// Per matched class number, its row of sums in `dense` (one per
    /// interval), while rows × intervals stay within [`DENSE_SUMS`];
    /// the sums of later keys are in `sums`, by (key number, interval).
    rows: Vec<Option<u32>>,
    dense: Vec<Sum>,
    sums: Map<(u32, u32), Sum>,
    /// Per level of the plan, the interval each of its buckets in the grid
    /// is counted in ([`Counter::counted_at`]; `u32::MAX`: none), from the
    /// first, filled when the level's first table is read (unless it has
    /// [`MEMO_BUCKETS`] buckets or more).
    intervals: Vec<Option<Vec<u32>>>,
    /// The same, whether each bucket is counted at its level.
    counted: Vec<Option<Vec<bool>>>,
    /// The seconds of the minutes counted at the minutes' level (60 to each
    /// of `counted`'s), for sources whose named minutes are left out:
    /// built when the first such source is read.
    minute_seconds: Option<Vec<bool>>,
    /// A key whose span could not be rebuilt, or a source without the
    /// tables the plan reads: the answer cannot be given from cells.
    failed: bool,
    /// A source without the plan's family at all, nor named cells that
    /// could stand in for it (a run's sums written before the any-service
    /// family, or light): the answer is counted again from another.
    missing: bool,
}

impl Counter<'_> {
    /// The interval holding every second of `(lo, hi]` (seconds), if one does.
    fn whole(&self, lo: u64, hi: u64) -> Option<usize> {
        let g = self.grid;
        if lo * SEC < g.start.max(self.after) || hi * SEC > g.end {
            return None;
        }
        let i = g.interval(hi * SEC)?;
        (g.interval(lo * SEC + 1) == Some(i)).then_some(i)
    }

    /// The interval bucket `b` of level `l` is counted in, if it is counted
    /// at that level: it lies whole in one interval, and the bucket of the
    /// next coarser level holding it does not (if that one does, it or a
    /// coarser one holding it is counted instead).
    fn counted_at(&self, l: usize, b: u64) -> Option<usize> {
        let len = self.plan.levels[l];
        let i = self.whole((b - 1) * len, b * len)?;
        match self.plan.levels.get(l + 1) {
            Some(&up) => {
                let parent = (b * len).div_ceil(up);
                match self.whole((parent - 1) * up, parent * up) {
                    Some(_) => None,
                    None => Some(i),
                }
            }
            None => Some(i),
        }
    }

    /// Whether the key the dictionary numbers `global` could match, as the
    /// key without its name says, for a query whose conditions read no
    /// name: when it is left out, so is every key with its fields.
    fn could_match(&mut self, global: u32) -> bool {
        let nameless = self.dict.without_name(global) as usize;
        if nameless >= self.nameless.len() {
            self.nameless.resize(nameless + 1, None);
        }
        *self.nameless[nameless].get_or_insert_with(|| {
            // A key whose span cannot be rebuilt is judged whole.
            key_trace(&self.dict.key(nameless as u32))
                .is_none_or(|t| self.query.eval(&t).iter().any(|s| s.spans.contains(&0)))
        })
    }

    /// The buckets of level `l` that may hold spans of the grid:
    /// `first..=last`.
    fn buckets_of(&self, l: usize) -> (u64, u64) {
        let len = self.plan.levels[l];
        (
            self.grid.start.max(self.after) / SEC / len + 1,
            (self.grid.end / SEC).div_ceil(len),
        )
    }

    /// This query's number for the key the dictionary numbers `global`:
    /// that of its class ([`Counter::class`]), found when first met.
    fn id(&mut self, global: u32) -> u32 {
        let at = global as usize;
        if at >= self.local.len() {
            self.local.resize(at + 1, u32::MAX);
        }
        if self.local[at] != u32::MAX {
            return self.local[at];
        }
        // A key its nameless key's verdict leaves out is not built (most
        // keys of a query of one service), the others are projected on the
        // fields the query reads.
        let nameless_judges = matches!(self.plan.family, Family::Named | Family::AnyService)
            && !self.plan.judges_names;
        let id = if (self.plan.roots && !self.dict.is_root(global))
            || (nameless_judges && !self.could_match(global))
        {
            self.class(None)
        } else {
            let key = self.plan.reads.project(self.dict.key(global));
            self.class(Some(key))
        };
        self.local[at] = id;
        id
    }

    /// The number of the keys whose fields the query reads are those of
    /// `key` (`None`: the keys left out unjudged), judged when first met:
    /// every key of a class has the verdict and the labels of its one-span
    /// trace, and its sums are added up in one row.
    fn class(&mut self, key: Option<CellKey>) -> u32 {
        if let Some(&id) = self.classes.get(&key) {
            return id;
        }
        let id = self.matched.len() as u32;
        match &key {
            None => {
                self.unbuilt.push(false);
                self.matched.push(None);
            }
            Some(k) => {
                let trace = key_trace(k);
                self.unbuilt.push(trace.is_none());
                let verdict =
                    trace.filter(|t| self.query.eval(t).iter().any(|s| s.spans.contains(&0)));
                self.matched.push(verdict);
            }
        }
        self.rows.push(None);
        self.classes.insert(key, id);
        id
    }

    /// Counts one source's cells: its keys are judged, then the parts of
    /// the tables the plan reads that hold keys the query matches are read
    /// before any is counted, so a source that fails to read counts nothing.
    fn add(&mut self, cells: &CellsView<'_>) -> tracedb_lsm::Result<()> {
        if self.failed {
            // The answer is read from spans: the other sources are not.
            return Ok(());
        }
        let family = match self.plan.family {
            f if cells.has(f) => f,
            // A source without the any-service family (light, or written
            // before it) is counted from its named cells where they count
            // the same spans: the query reads no service, so keys that
            // differ by their service alone are one class.
            Family::AnyService if cells.named_counts_the_same()? => Family::Named,
            _ => {
                self.missing = true;
                self.failed = true;
                return Ok(());
            }
        };
        if let Some(attr) = &self.plan.attr {
            // Cells of a file that did not count the attribute say nothing
            // of the spans carrying it.
            if !cells.counted()?.contains(attr) {
                self.failed = true;
                return Ok(());
            }
        }
        let numbers = cells.key_ids(family, &self.dict)?;
        let ids: Vec<u32> = numbers.iter().map(|&g| self.id(g)).collect();
        let want: Vec<bool> = ids
            .iter()
            .map(|&id| self.matched[id as usize].is_some() || self.unbuilt[id as usize])
            .collect();
        let g = self.grid;
        for l in 0..self.plan.levels.len() {
            let (first, last) = self.buckets_of(l);
            if self.intervals[l].is_none() && last - first < MEMO_BUCKETS {
                let of: Vec<u32> = (first..=last)
                    .map(|b| self.counted_at(l, b).map_or(u32::MAX, |i| i as u32))
                    .collect();
                self.counted[l] = Some(of.iter().map(|&i| i != u32::MAX).collect());
                self.intervals[l] = Some(of);
            }
        }
        // Each table read, the plan's level its cells are counted at, and
        // how many of its buckets make one of that level's (1, but for
        // seconds read in place of named minutes left out).
        let mut tables = Vec::with_capacity(self.plan.levels.len());
        let timed = |pieces: &[std::borrow::Cow<'_, tracedb_lsm::index::cells::CellTable>]| {
            pieces
                .iter()
                .all(|t| t.has_durations || !self.plan.durations)
        };
        for (l, &len) in self.plan.levels.iter().enumerate() {
            // Only the cells counted at this level are read.
            let reading = Reading {
                durations: self.plan.durations,
                buckets: self.counted[l]
                    .as_deref()
                    .map(|wanted| (self.buckets_of(l).0, wanted)),
            };
            match cells.table(family, len, reading, Some(&want))? {
                Some(pieces) if timed(&pieces) => {
                    tables.extend(pieces.into_iter().map(|t| (l, 1, t)));
                }
                // Named minutes left out where light: their seconds, which
                // keep every duration there, are read in their place.
                None if family == Family::Named && len == 60 => {
                    if self.minute_seconds.is_none() {
                        self.minute_seconds = self.counted[l].as_deref().map(|minutes| {
                            minutes
                                .iter()
                                .flat_map(|&m| std::iter::repeat_n(m, 60))
                                .collect()
                        });
                    }
                    let reading = Reading {
                        durations: self.plan.durations,
                        buckets: self
                            .minute_seconds
                            .as_deref()
                            .map(|w| ((self.buckets_of(l).0 - 1) * 60 + 1, w)),
                    };
                    match cells.table(family, 1, reading, Some(&want))? {
                        Some(pieces) if timed(&pieces) => {
                            tables.extend(pieces.into_iter().map(|t| (l, 60, t)));
                        }
                        _ => {
                            self.failed = true;
                            return Ok(());
                        }
                    }
                }
                _ => {
                    self.failed = true;
                    return Ok(());
                }
            }
        }
        // Samples per series, the length of a row of sums.
        let n = g.len();
        for (l, per, table) in &tables {
            let (l, per, table) = (*l, *per, &**table);
            let (first, last) = self.buckets_of(l);
            let mut bucket = None;
            for cell in table.buckets((first - 1) * per + 1, last * per) {
                if bucket.is_none_or(|(b, _)| b != cell.bucket) {
                    // The bucket of level `l` holding the cell's.
                    let at = cell.bucket.div_ceil(per);
                    let interval = match &self.intervals[l] {
                        Some(of) => Some(of[(at - first) as usize] as usize)
                            .filter(|&i| i != u32::MAX as usize),
                        None => self.counted_at(l, at),
                    };
                    bucket = Some((cell.bucket, interval));
                }
                let Some((_, Some(interval))) = bucket else {
                    continue;
                };
                let id = ids[cell.key as usize];
                if self.matched[id as usize].is_none() {
                    if self.unbuilt[id as usize] {
                        self.failed = true;
                        return Ok(());
                    }
                    continue;
                }
                let row = match self.rows[id as usize] {
                    Some(r) => Some(r as usize),
                    None if self.dense.len() + n <= DENSE_SUMS => {
                        let r = self.dense.len() / n;
                        self.dense.resize_with(self.dense.len() + n, Sum::default);
                        self.rows[id as usize] = Some(r as u32);
                        Some(r)
                    }
                    None => None,
                };
                let sum = match row {
                    Some(r) => &mut self.dense[r * n + interval],
                    None => self.sums.entry((id, interval as u32)).or_default(),
                };
                sum.0 += cell.spans;
                if self.plan.durations {
                    for &(exp, n) in table.durations_of(cell) {
                        match sum.1.binary_search_by_key(&exp, |b| b.0) {
                            Ok(at) => sum.1[at].1 += n,
                            Err(at) => sum.1.insert(at, (exp, n)),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Bytes the sums hold, for the memory budget.
    fn bytes(&self) -> usize {
        (self.sums.len() + self.dense.len()) * 64
            + self.matched.len() * 128
            + self.classes.len() * 96
            + self.local.len() * 4
            + self.nameless.len() * 2
            + self.minute_seconds.as_ref().map_or(0, Vec::len)
            + self
                .intervals
                .iter()
                .flatten()
                .map(|of| of.len() * 5)
                .sum::<usize>()
    }

    /// The sums counted into `eval`.
    fn into_eval(self, eval: &mut MetricsEval) {
        let n = self.grid.len();
        let mut dense = self.dense;
        let mut sums: Vec<_> = self.sums.into_iter().collect();
        for (id, row) in self.rows.iter().enumerate() {
            if let Some(r) = row {
                let at = *r as usize * n;
                for (interval, sum) in dense[at..at + n].iter_mut().enumerate() {
                    if sum.0 > 0 {
                        sums.push(((id as u32, interval as u32), std::mem::take(sum)));
                    }
                }
            }
        }
        // In one order whatever the hash: the series cap keeps the same ones.
        sums.sort_unstable_by_key(|s| s.0);
        for ((id, interval), (spans, buckets)) in sums {
            if let Some(trace) = &self.matched[id as usize] {
                eval.observe_many(self.query, trace, 0, interval as usize, spans, &buckets);
            }
        }
    }
}

/// Why the cells did not answer a query [`plan`] says they can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// The store cannot give them now: its view moved under every try, or
    /// the window reaches back past retention's cut where some file or
    /// buffer holds spans a read would leave out.
    NotNow,
    /// A source of the window did not count what the query needs: the
    /// attribute, or durations in its seconds.
    NotCounted,
}

/// [`super::run`] from the cells; `Ok(None)` when they cannot answer (the
/// caller reads the spans).
#[cfg(test)]
pub fn run(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
) -> Result<Option<Answer<MetricsEval>>, RunError> {
    Ok(answer(engine, req, cancel)?.ok())
}

/// [`run`], saying why the cells did not answer.
pub fn answer(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
) -> Result<Result<Answer<MetricsEval>, Unanswered>, RunError> {
    answer_after(engine, req, cancel, req.grid.start)
}

/// [`answer`], counting only the spans that start after `after` (Unix ns,
/// an edge of the grid at or after its start): the rest of the window is
/// counted from spans ([`super::run`], at retention's cut).
pub fn answer_after(
    engine: &Engine,
    req: &MetricsRequest,
    cancel: &Cancel,
    after: u64,
) -> Result<Result<Answer<MetricsEval>, Unanswered>, RunError> {
    let budget = engine.memory_budget();
    let mut held = budget.acquire(0).map_err(RunError::Overloaded)?;
    let mut eval = MetricsEval::new(&req.query, req.grid, req.max_series, 0)
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    let Some(mut plan) = plan(req) else {
        return Ok(Err(Unanswered::NotCounted));
    };
    let (counter, stats) = loop {
        let family = plan.family;
        let counted = count(engine, req, plan.clone(), after, &mut held, cancel)?;
        match counted {
            Err(unanswered) => return Ok(Err(unanswered)),
            // A run's sums without the any-service family (light, or
            // written before it) count more spans than the named cells of
            // the file holding them: a query reading no service counts
            // every source's named cells instead.
            Ok((c, _)) if c.missing && family == Family::AnyService => {
                held.shrink(held.bytes());
                plan.family = Family::Named;
            }
            Ok((c, _)) if c.failed => return Ok(Err(Unanswered::NotCounted)),
            Ok(done) => break done,
        }
    };
    let row_bytes = req.grid.len() * CELL_BYTES + 256;
    // The sums are held until they are counted into the series.
    held.grow(counter.bytes()).map_err(RunError::Overloaded)?;
    counter.into_eval(&mut eval);
    held.grow(eval.series_count() * row_bytes)
        .map_err(RunError::Overloaded)?;
    let mut partial: Vec<String> = stats.skipped.iter().map(crate::read::file_reason).collect();
    if req.max_exemplars > 0 {
        eval.adopt_exemplars(exemplars(engine, req, &mut held, &mut partial, cancel)?);
    }
    if eval.series_capped() {
        partial.push(series_capped(req.max_series));
    }
    Ok(Ok(Answer {
        value: eval,
        partial,
    }))
}

/// The cells of the window `req` asks for, after `after`, counted as
/// `plan` says, and what was read.
fn count<'q>(
    engine: &Engine,
    req: &'q MetricsRequest,
    plan: Plan,
    after: u64,
    held: &mut tracedb_lsm::Permit,
    cancel: &Cancel,
) -> Result<Result<(Counter<'q>, CellsStats), Unanswered>, RunError> {
    let family = plan.family;
    let levels = plan.levels.len();
    let mut counter = Counter {
        query: &req.query,
        grid: req.grid,
        after,
        plan,
        dict: engine.cells_dict(),
        local: Vec::new(),
        nameless: Vec::new(),
        classes: Map::default(),
        matched: Vec::new(),
        unbuilt: Vec::new(),
        rows: Vec::new(),
        dense: Vec::new(),
        sums: Map::default(),
        intervals: vec![None; levels],
        counted: vec![None; levels],
        minute_seconds: None,
        failed: false,
        missing: false,
    };
    let range = TimeRange::new(req.grid.start.max(after), req.grid.end);
    let stats = match engine.cells_in(range, family, held, |cells| {
        if cancel.is_cancelled() {
            return Err(CellsError::Stopped);
        }
        counter.add(cells)?;
        Ok(counter.bytes())
    }) {
        Ok(stats) => stats,
        Err(CellsError::Stopped) => return Err(RunError::Cancelled),
        Err(CellsError::NotNow) => return Ok(Err(Unanswered::NotNow)),
        Err(CellsError::Overloaded(e)) => return Err(RunError::Overloaded(e)),
        Err(CellsError::Engine(e)) => return Err(e.into()),
    };
    Ok(Ok((counter, stats)))
}

/// Exemplars for an answer counted from cells: in each tenth of the
/// window, the newest candidate traces (a few at most) read and evaluated.
fn exemplars(
    engine: &Engine,
    req: &MetricsRequest,
    held: &mut tracedb_lsm::Permit,
    partial: &mut Vec<String>,
    cancel: &Cancel,
) -> Result<MetricsEval, RunError> {
    let mut eval = req.evaluator()?;
    let g = req.grid;
    let parts = EXEMPLAR_WINDOWS.min(g.len() as u64).max(1);
    let width = (g.end - g.start).div_ceil(parts);
    let needs = op_needs(tracedb_traceql::needs(&req.query.query));
    let slice = u128::MAX / u128::from(parts);
    for p in 0..parts {
        let from = g.start + p * width;
        let to = (from + width).min(g.end);
        // Any traces of the window do, not the newest: each part first
        // walks a narrow slice of the trace IDs, so that of each sorted run
        // it reads the one or two files holding that slice only; then a
        // slice ten times as wide, and the whole window when those have
        // none.
        let lo = u128::from(p) * slice;
        let hi = if p + 1 == parts {
            u128::MAX
        } else {
            lo + slice - 1
        };
        let narrow = lo + slice / NARROW_SLICE - 1;
        for trace_ids in [Some((lo, narrow)), Some((lo, hi)), None] {
            let index_query = SearchQuery {
                start_max: to,
                end_min: from,
                needs: needs.clone(),
                trace_ids: trace_ids
                    .map(|(lo, hi)| (TraceId(lo.to_be_bytes()), TraceId(hi.to_be_bytes()))),
                ..SearchQuery::default()
            };
            let read = exemplars_of(engine, req, &index_query, &mut eval, held, partial, cancel)?;
            if read > 0 {
                break;
            }
        }
    }
    Ok(eval)
}

/// Reads up to [`EXEMPLAR_READS`] candidates of `index_query` into `eval`;
/// returns how many were read.
fn exemplars_of(
    engine: &Engine,
    req: &MetricsRequest,
    index_query: &SearchQuery,
    eval: &mut MetricsEval,
    held: &mut tracedb_lsm::Permit,
    partial: &mut Vec<String>,
    cancel: &Cancel,
) -> Result<usize, RunError> {
    let mut walk = engine.candidates_kept(index_query)?;
    let mut walk_bytes = 0;
    let mut read = 0;
    while let Some(candidate) =
        crate::search::next_counted(&mut walk, held, &mut walk_bytes, cancel)?
    {
        let (lookup, trace_bytes) =
            crate::search::read_candidate(engine, &candidate, held, partial)?;
        if let Ok(trace) = decode(candidate.trace_id, &lookup.spans) {
            let sets = req.query.eval(&trace);
            if !sets.is_empty() {
                eval.observe(&req.query, &trace, &sets);
            }
        }
        held.shrink(trace_bytes);
        read += 1;
        if read >= EXEMPLAR_READS {
            break;
        }
    }
    held.shrink(walk_bytes);
    Ok(read)
}
