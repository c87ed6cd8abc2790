//! Counting a file's spans into cells ([`CellsBuilder`]): each span's
//! record packed into a `u64`, sorted once at the end, and the tables of
//! every family and length added up from them.

use std::borrow::Borrow;

use super::{
    attrs::CellAttributes, duration_bucket, second_of, wire, Cell, CellKey, CellTable, Counts,
    Family, FileCells, HashMap, Parent, BUCKET_SECONDS, MAX_VALUES, MAX_VALUE_BYTES,
    RESOURCE_SCOPE, SPAN_SCOPE,
};
use crate::{index::ValueKind, span::Span};

/// Spans counted per cell, on average, from which the seconds of the
/// attribute keys keep their durations (and a file keeps its any-service
/// family, [`FileCells::thin`]): on 8.7 M spans of
/// 20 s of max ingest the attribute cells took 0.41 B a span with
/// durations (0.11 without), and on 4.5 M spans at a week's 165 a second,
/// where most cells count one span, 2.03 B (0.89 without). Where spans are that few, reading them answers
/// a query of durations at a step of seconds quickly enough.
const SPANS_PER_TIMED_CELL: usize = 4;

/// Any-service seconds of at most this many cells are kept however few
/// spans they count: a few kilobytes a file (the last file of a merge's
/// run holds what is left of its partition, often a few thousand spans a
/// cell or two each).
pub(super) const FEW_CELLS: usize = 4096;

/// Most keys one file's cells of one family hold: a span's cell is packed
/// into 64 bits with its key in 24 of them. A file with more named keys is
/// written without cells; with more attribute keys, without attribute cells.
const MAX_KEYS: usize = 1 << 24;

/// A resource as the builder numbered it: its service's number, and the
/// numbers of its counted attributes' values.
struct Resource {
    service: u32,
    values: Box<[u32]>,
}

/// Counts spans into cells, in any order. Each span costs 8 bytes until
/// [`CellsBuilder::finish`] (its second, key and bucket packed into a
/// `u64`, sorted at the end), and 8 more per counted attribute it carries,
/// so a compaction output's builder holds a known share of its file
/// whatever the spread of its spans' keys.
#[derive(Default)]
pub struct CellsBuilder {
    /// Each key's number, by the numbers of its service and name.
    keys: HashMap<(u32, u32, u32, u32, Parent), u32>,
    /// Distinct services (`None`: no `service.name`) and names, numbered.
    services: Vec<Option<Box<[u8]>>>,
    names: Vec<Box<[u8]>>,
    name_ids: HashMap<Box<[u8]>, u32>,
    /// Per number a caller gave a span's name ([`CellsBuilder::add_scanned`]),
    /// the name's number here (`u32::MAX`: not seen yet).
    by_hint: Vec<u32>,
    /// Per encoded resource, its number in `groups`.
    resources: HashMap<Box<[u8]>, u32>,
    groups: Vec<Resource>,
    /// The last span's group and its resource's number: a request's spans
    /// share one (held, so its address is not reused meanwhile).
    last: Option<(std::sync::Arc<crate::span::ScopeGroup>, u32)>,
    /// Per span: second << 32 | key << 8 | duration exponent (0: none).
    records: Vec<u64>,
    /// A span past what a record holds (a start after 2106, more keys than
    /// [`MAX_KEYS`]): the file gets no cells.
    overflow: bool,
    attrs: Attrs,
}

/// The attribute cells being counted ([`Family::Attr`]).
struct Attrs {
    list: std::sync::Arc<CellAttributes>,
    /// Per scope (span, resource), each encoded `KeyValue`'s number.
    ids: [HashMap<Box<[u8]>, u32>; 2],
    /// Per value number: its attribute (index into the list's names), and
    /// its scope byte then `KeyValue`.
    values: Vec<(u16, Box<[u8]>)>,
    /// Per attribute of the list: its values so far, and whether it was
    /// left out (past [`MAX_VALUES`] values, or a value past
    /// [`MAX_VALUE_BYTES`]).
    per_attr: Vec<(u32, bool)>,
    /// The named keys without their names (service, kind, status,
    /// parent), numbered; and per named key's number, its number here
    /// (`u32::MAX`: not yet).
    unnamed: HashMap<(u32, u32, u32, Parent), u32>,
    unnamed_fields: Vec<(u32, u32, u32, Parent)>,
    of_named: Vec<u32>,
    /// Each key's number, by its unnamed key's number << 32 | its value's
    /// number: a `u64` hashes in a fraction of the time the fields take,
    /// and the map stays small enough for the cache (keyed by named keys
    /// it held ten times more, and missed the cache on most spans).
    keys: HashMap<u64, u32>,
    /// Per key number, its unnamed key's number and its value's.
    key_values: Vec<(u32, u32)>,
    /// As `records`, a key of this family in each.
    records: Vec<u64>,
    /// More keys than [`MAX_KEYS`]: no attribute is counted.
    overflow: bool,
    /// Where a span's attributes are in its payload ([`CellsBuilder::add`]).
    scratch: Vec<(usize, usize)>,
}

/// The attribute cells of the default attributes.
impl Default for Attrs {
    fn default() -> Self {
        Attrs::new(std::sync::Arc::default())
    }
}

impl Attrs {
    fn new(list: std::sync::Arc<CellAttributes>) -> Attrs {
        Attrs {
            per_attr: vec![(0, false); list.names().len()],
            list,
            ids: Default::default(),
            values: Vec::new(),
            unnamed: HashMap::default(),
            unnamed_fields: Vec::new(),
            of_named: Vec::new(),
            keys: HashMap::default(),
            key_values: Vec::new(),
            records: Vec::new(),
            overflow: false,
            scratch: Vec::new(),
        }
    }

    /// The number of attribute `a`'s value `kv` (`scope` 0 for a span's,
    /// 1 for a resource's), numbering it if new; `None` once `a` is left out
    /// (this value is past the bounds, or one before it was).
    fn value(&mut self, a: usize, scope: usize, kv: &[u8]) -> Option<u32> {
        if self.per_attr[a].1 {
            return None;
        }
        if let Some(&id) = self.ids[scope].get(kv) {
            return Some(id);
        }
        // A value TraceQL reads as one string, bool, int or double: of any
        // other (an array, a list, bytes, no value), the span's attribute
        // is not what its `KeyValue` alone says.
        let scalar = kv.len() <= MAX_VALUE_BYTES
            && wire::key_value(kv).is_some_and(|(_, _, kind)| kind != ValueKind::Unindexed);
        if !scalar || self.per_attr[a].0 as usize >= MAX_VALUES {
            self.per_attr[a].1 = true;
            return None;
        }
        self.per_attr[a].0 += 1;
        let id = self.values.len() as u32;
        let scope_byte = [SPAN_SCOPE, RESOURCE_SCOPE][scope];
        let value: Box<[u8]> = [&[scope_byte][..], kv].concat().into();
        self.values.push((a as u16, value));
        self.ids[scope].insert(kv.into(), id);
        Some(id)
    }

    /// The values of a resource's counted attributes, each attribute's first.
    fn of_resource(&mut self, resource: &[u8]) -> Box<[u32]> {
        if !self.list.has_resources() {
            return Box::default();
        }
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for kv in wire::resource_attributes(resource) {
            let Some(a) = wire::key_of(kv).and_then(|k| self.list.resource_index(k)) else {
                continue;
            };
            if seen.contains(&a) {
                continue;
            }
            seen.push(a);
            if let Some(v) = self.value(a, 1, kv) {
                out.push(v);
            }
        }
        out.into()
    }

    /// The number of the unnamed key of the named key numbered `named`,
    /// whose fields without its name are `fields`.
    fn unnamed_of(&mut self, named: u32, fields: (u32, u32, u32, Parent)) -> u32 {
        let at = named as usize;
        if let Some(&id) = self.of_named.get(at).filter(|&&id| id != u32::MAX) {
            return id;
        }
        let next = self.unnamed_fields.len() as u32;
        let id = *self.unnamed.entry(fields).or_insert(next);
        if id == next {
            self.unnamed_fields.push(fields);
        }
        if at >= self.of_named.len() {
            self.of_named.resize(at + 1, u32::MAX);
        }
        self.of_named[at] = id;
        id
    }

    /// Counts a span of unnamed key `unnamed` and value `value` in `record`.
    fn add(&mut self, unnamed: u32, value: u32, record: u64) {
        let next = self.keys.len() as u32;
        let id = *self
            .keys
            .entry(u64::from(unnamed) << 32 | u64::from(value))
            .or_insert(next);
        if id == next {
            self.key_values.push((unnamed, value));
        }
        if self.keys.len() > MAX_KEYS {
            self.overflow = true;
            self.records = Vec::new();
            return;
        }
        self.records.push(record | u64::from(id) << 8);
    }
}

/// Spans and duration buckets of one cell being added up.
#[derive(Default)]
struct Acc {
    spans: u64,
    durations: Vec<(u8, u64)>,
}

impl Acc {
    fn add(&mut self, spans: u64, durations: &[(u8, u64)]) {
        self.spans += spans;
        for &(exp, n) in durations {
            match self.durations.binary_search_by_key(&exp, |d| d.0) {
                Ok(at) => self.durations[at].1 += n,
                Err(at) => self.durations.insert(at, (exp, n)),
            }
        }
    }
}

/// A table from cells added up, in order.
fn table_of(
    family: Family,
    seconds: u64,
    has_durations: bool,
    mut cells: Vec<((u64, u32), Acc)>,
) -> CellTable {
    cells.sort_unstable_by_key(|c| c.0);
    let mut t = CellTable {
        family,
        seconds,
        has_durations,
        roots_only: false,
        cells: Vec::with_capacity(cells.len()),
        durations: Vec::new(),
    };
    for ((bucket, key), acc) in cells {
        let from = t.durations.len() as u32;
        if has_durations {
            t.durations.extend(acc.durations);
        }
        t.cells.push(Cell {
            bucket,
            key,
            spans: acc.spans,
            durations: (from, t.durations.len() as u32),
        });
    }
    t
}

/// `t`'s cells (with durations) added up into buckets of `seconds`, keys
/// mapped by `key`.
pub(super) fn coarser(
    t: &CellTable,
    family: Family,
    seconds: u64,
    key: impl Fn(u32) -> u32,
) -> CellTable {
    coarser_of(std::iter::once(t), family, seconds, key)
}

/// [`coarser`] of the cells of several tables of one bucket length (the
/// pieces of one table) together.
pub(super) fn coarser_of<T: Borrow<CellTable>>(
    tables: impl IntoIterator<Item = T>,
    family: Family,
    seconds: u64,
    key: impl Fn(u32) -> u32,
) -> CellTable {
    let mut sums: HashMap<(u64, u32), Acc> = HashMap::default();
    for t in tables {
        let t = t.borrow();
        let per = seconds / t.seconds;
        for c in &t.cells {
            sums.entry((c.bucket.div_ceil(per), key(c.key)))
                .or_default()
                .add(c.spans, t.durations_of(c));
        }
    }
    table_of(family, seconds, true, sums.into_iter().collect())
}

/// The cells and duration buckets sorted `records` make.
fn sizes(records: &[u64]) -> (usize, usize) {
    let (mut cells, mut exps) = (0, 0);
    for same_cell in records.chunk_by(|a, b| a >> 8 == b >> 8) {
        cells += 1;
        exps += same_cell
            .chunk_by(|a, b| a == b)
            .filter(|same_exp| same_exp[0] & 0xff != 0)
            .count();
    }
    (cells, exps)
}

/// The keys `of` makes of the named keys `named` (each once, in order), and
/// per named key the place of its own among them.
fn coarser_keys(named: &[CellKey], of: fn(&CellKey) -> CellKey) -> (Vec<CellKey>, Vec<u32>) {
    let mut keys: Vec<CellKey> = named.iter().map(of).collect();
    keys.sort_unstable();
    keys.dedup();
    let places = named
        .iter()
        .map(|k| {
            let at = keys
                .binary_search(&of(k))
                .expect("every named key's coarser key is listed");
            at as u32
        })
        .collect();
    (keys, places)
}

/// Bytes a table of `cells` cells and `exps` duration buckets takes.
fn table_bytes((cells, exps): (usize, usize)) -> usize {
    cells * std::mem::size_of::<Cell>() + exps * std::mem::size_of::<(u8, u64)>()
}

/// The table of buckets of one second, with durations, sorted `records`
/// make, sized by [`sizes`] (grown by doubling, it was a third of a merge's
/// memory at its peak, 51 of 159 MiB, up to half of it spare).
fn seconds_table(family: Family, records: &[u64], (cells, exps): (usize, usize)) -> CellTable {
    let mut seconds = CellTable {
        family,
        seconds: 1,
        has_durations: true,
        roots_only: false,
        cells: Vec::with_capacity(cells),
        durations: Vec::with_capacity(exps),
    };
    for same_cell in records.chunk_by(|a, b| a >> 8 == b >> 8) {
        let from = seconds.durations.len() as u32;
        for same_exp in same_cell.chunk_by(|a, b| a == b) {
            let exp = (same_exp[0] & 0xff) as u8;
            if exp != 0 {
                seconds.durations.push((exp, same_exp.len() as u64));
            }
        }
        seconds.cells.push(Cell {
            bucket: same_cell[0] >> 32,
            key: (same_cell[0] >> 8 & 0xff_ffff) as u32,
            spans: same_cell.len() as u64,
            durations: (from, seconds.durations.len() as u32),
        });
    }
    seconds
}

/// Whether seconds of `cells` cells counting `spans` spans keep their
/// durations: where they count [`SPANS_PER_TIMED_CELL`] spans a cell.
pub(super) fn timed(cells: usize, spans: u64) -> bool {
    (cells as u64).saturating_mul(SPANS_PER_TIMED_CELL as u64) <= spans
}

/// Whether seconds of `cells` cells counting `spans` spans are light:
/// more than [`FEW_CELLS`] cells, counting fewer than
/// [`SPANS_PER_TIMED_CELL`] spans a cell. The any-service family is left
/// out there (and named seconds written before kept their roots' and
/// errors' durations only).
pub(super) fn light(cells: usize, spans: u64) -> bool {
    cells > FEW_CELLS && !timed(cells, spans)
}

/// `seconds`' durations dropped: the seconds of the attribute keys keep
/// counts only where they count few spans a cell, as they are most of the
/// attribute cells, and their durations most of a cell's bytes.
pub(super) fn counts_only(mut seconds: CellTable) -> CellTable {
    seconds.has_durations = false;
    seconds.durations = Vec::new();
    for c in &mut seconds.cells {
        c.durations = (0, 0);
    }
    seconds
}

/// `seconds` (a named or attribute table) with the durations of root and
/// error keys' cells only ([`CellKey::timed_when_light`]; `keys` its
/// family's): Traces Drilldown asks durations by name or by an attribute of
/// root spans, an incident of one service's errors, each a tenth of the
/// spans or fewer, so keeping theirs costs little where keeping every
/// cell's would double the bytes.
pub(super) fn roots_timed(seconds: CellTable, keys: &[CellKey]) -> CellTable {
    let root = |c: &Cell| keys[c.key as usize].timed_when_light();
    // Of only roots, or none, the table is all timed, or not at all.
    if seconds.cells.iter().all(root) {
        return seconds;
    }
    if !seconds.cells.iter().any(root) {
        return counts_only(seconds);
    }
    let mut out = CellTable {
        roots_only: true,
        cells: Vec::with_capacity(seconds.cells.len()),
        durations: Vec::new(),
        ..CellTable::empty(seconds.family, seconds.seconds, true)
    };
    for c in &seconds.cells {
        let from = out.durations.len() as u32;
        if root(c) {
            out.durations.extend_from_slice(seconds.durations_of(c));
        }
        out.cells.push(Cell {
            durations: (from, out.durations.len() as u32),
            ..*c
        });
    }
    out
}

/// `keys` (each with its number, below `numbers`) sorted, and per number,
/// its key's place in that order (0 for a number no key has).
fn sorted<K: Ord>(keys: Vec<(K, u32)>, numbers: usize) -> (Vec<K>, Vec<u32>) {
    let mut keys = keys;
    keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut renumber = vec![0u32; numbers];
    for (new, (_, old)) in keys.iter().enumerate() {
        renumber[*old as usize] = new as u32;
    }
    (keys.into_iter().map(|k| k.0).collect(), renumber)
}

/// `records` with their keys renumbered by `renumber`, sorted.
fn renumbered(mut records: Vec<u64>, renumber: &[u32]) -> Vec<u64> {
    for r in &mut records {
        let key = renumber[(*r >> 8 & 0xff_ffff) as usize];
        *r = *r & !(0xff_ffff << 8) | u64::from(key) << 8;
    }
    records.sort_unstable();
    records
}

impl CellsBuilder {
    /// A builder counting the attributes of `attributes` into attribute
    /// cells (the [`Default`] builder counts [`super::DEFAULT_ATTRIBUTES`]).
    pub fn new(attributes: std::sync::Arc<CellAttributes>) -> CellsBuilder {
        CellsBuilder {
            attrs: Attrs::new(attributes),
            ..CellsBuilder::default()
        }
    }

    pub fn add_all<S: Borrow<Span>>(&mut self, spans: &[S]) {
        for s in spans {
            self.add(s.borrow());
        }
    }

    /// Counts one span.
    pub fn add(&mut self, span: &Span) {
        if self.overflow {
            return;
        }
        let payload = &span.payload[..];
        if !self.attrs.list.has_spans() {
            self.add_scanned(span, &wire::scan_fields(payload), None, &[]);
            return;
        }
        // Where each attribute is, kept from span to span (a list of
        // slices would be allocated for each).
        let mut at = std::mem::take(&mut self.attrs.scratch);
        at.clear();
        let base = payload.as_ptr() as usize;
        let f = wire::scan_with(payload, |kv| {
            at.push((kv.as_ptr() as usize - base, kv.len()))
        });
        let attributes = at.iter().map(|&(from, len)| &payload[from..from + len]);
        self.add_fields(span, &f, None, attributes);
        self.attrs.scratch = at;
    }

    /// Counts one span whose fields `f` and attributes (each an encoded
    /// `KeyValue`) the caller scanned already (the search-index summary
    /// scans each span it summarizes; a second scan here was most of what
    /// cells cost a flush). `name_hint` is a number the caller gives every
    /// span of the same name for the builder's life (the summary's string
    /// number): a name seen under it is then found by that number, checked
    /// against the bytes, without hashing them.
    pub(crate) fn add_scanned(
        &mut self,
        span: &Span,
        f: &wire::SpanFields,
        name_hint: Option<u32>,
        attributes: &[&[u8]],
    ) {
        self.add_fields(span, f, name_hint, attributes.iter().copied());
    }

    /// [`CellsBuilder::add_scanned`], the attributes in any form.
    fn add_fields<'p>(
        &mut self,
        span: &Span,
        f: &wire::SpanFields,
        name_hint: Option<u32>,
        attributes: impl Iterator<Item = &'p [u8]>,
    ) {
        if self.overflow {
            return;
        }
        let group = match &self.last {
            Some((g, id)) if std::sync::Arc::ptr_eq(g, &span.group) => *id,
            _ => {
                let resource = span.group.resource.as_deref().unwrap_or_default();
                let id = match self.resources.get(resource) {
                    Some(&id) => id,
                    None => {
                        let s = wire::resource_attribute(resource, b"service.name").map(Box::from);
                        let service = match self.services.iter().position(|x| *x == s) {
                            Some(at) => at as u32,
                            None => {
                                self.services.push(s);
                                self.services.len() as u32 - 1
                            }
                        };
                        let values = self.attrs.of_resource(resource);
                        let id = self.groups.len() as u32;
                        self.groups.push(Resource { service, values });
                        self.resources.insert(resource.into(), id);
                        id
                    }
                };
                self.last = Some((span.group.clone(), id));
                id
            }
        };
        let service = self.groups[group as usize].service;
        let hinted = name_hint
            .and_then(|h| self.by_hint.get(h as usize))
            .filter(|&&id| self.names.get(id as usize).is_some_and(|n| **n == *f.name));
        let name = match hinted {
            Some(&id) => id,
            None => {
                let id = self.name_number(f.name);
                if let Some(h) = name_hint {
                    let h = h as usize;
                    if h >= self.by_hint.len() {
                        self.by_hint.resize(h + 1, u32::MAX);
                    }
                    self.by_hint[h] = id;
                }
                id
            }
        };
        let parent = match f.parent_span_id {
            [] => Parent::None,
            [0, 0, 0, 0, 0, 0, 0, 0] => Parent::Zero,
            _ => Parent::Some,
        };
        let next = self.keys.len() as u32;
        let key = *self
            .keys
            .entry((service, name, f.kind_value, f.status, parent))
            .or_insert(next);
        let second = second_of(span.start_unix_nano);
        if self.keys.len() > MAX_KEYS || second > u64::from(u32::MAX) {
            self.overflow = true;
            self.records = Vec::new();
            self.attrs = Attrs::default();
            return;
        }
        let exp =
            duration_bucket(span.end_unix_nano.saturating_sub(span.start_unix_nano)).unwrap_or(0);
        let record = second << 32 | u64::from(exp);
        self.records.push(record | u64::from(key) << 8);
        if self.attrs.overflow || self.attrs.list.is_empty() {
            return;
        }
        let key = self
            .attrs
            .unnamed_of(key, (service, f.kind_value, f.status, parent));
        // The first of each counted attribute the span carries.
        let mut seen = 0u64;
        for kv in attributes {
            let Some(a) = wire::key_of(kv).and_then(|k| self.attrs.list.span_index(k)) else {
                continue;
            };
            if seen & 1 << a != 0 {
                continue;
            }
            seen |= 1 << a;
            if let Some(value) = self.attrs.value(a, 0, kv) {
                self.attrs.add(key, value, record);
            }
        }
        for i in 0..self.groups[group as usize].values.len() {
            let value = self.groups[group as usize].values[i];
            if !self.attrs.per_attr[self.attrs.values[value as usize].0 as usize].1 {
                self.attrs.add(key, value, record);
            }
        }
    }

    /// The number of the name `bytes`, numbering it if new.
    fn name_number(&mut self, bytes: &[u8]) -> u32 {
        match self.name_ids.get(bytes) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u32;
                self.names.push(bytes.into());
                self.name_ids.insert(bytes.into(), id);
                id
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// About the bytes the builder holds: a record per span and per counted
    /// attribute it carries, and the keys, services, names and values (a
    /// compaction counts them in the memory budget).
    pub fn held_bytes(&self) -> usize {
        let strings: usize = self.names.iter().map(|n| 2 * n.len() + 64).sum::<usize>()
            + self
                .services
                .iter()
                .flatten()
                .map(|s| s.len() + 24)
                .sum::<usize>()
            + self.resources.keys().map(|r| r.len() + 40).sum::<usize>()
            + self
                .groups
                .iter()
                .map(|g| 4 * g.values.len() + 32)
                .sum::<usize>()
            + self
                .attrs
                .values
                .iter()
                .map(|v| 2 * v.1.len() + 80)
                .sum::<usize>();
        self.records.capacity() * 8
            + self.keys.capacity() * 40
            + self.by_hint.capacity() * 4
            + self.attrs.records.capacity() * 8
            + self.attrs.keys.capacity() * 40
            + self.attrs.key_values.capacity() * 8
            + self.attrs.of_named.capacity() * 4
            + self.attrs.unnamed.capacity() * 32
            + strings
    }

    /// The cells counted, as a file of its own keeps them (the attribute
    /// seconds with durations only where dense: [`FileCells::thin`]);
    /// `None` past what cells hold (the file's spans are read instead).
    pub fn finish(self) -> Option<FileCells> {
        let mut cells = self.finish_counted(|_| ())?;
        cells.thin();
        Some(cells)
    }

    /// The attribute family's keys, their records (renumbered and sorted)
    /// and the attributes counted: those of the list not left out.
    fn finish_attrs(
        attrs: Attrs,
        services: &[Option<Box<[u8]>>],
    ) -> (Vec<CellKey>, Vec<u64>, Vec<Box<[u8]>>) {
        let Attrs {
            list,
            values,
            per_attr,
            unnamed_fields,
            key_values,
            mut records,
            overflow,
            ..
        } = attrs;
        let mut counted: Vec<Box<[u8]>> = list
            .names()
            .iter()
            .zip(&per_attr)
            .filter(|(_, (_, left_out))| !left_out)
            .map(|(n, _)| n.clone())
            .collect();
        if overflow || counted.is_empty() {
            return (Vec::new(), Vec::new(), Vec::new());
        }
        counted.sort_unstable();
        let left_out = |value: u32| per_attr[values[value as usize].0 as usize].1;
        if per_attr.iter().any(|p| p.1) {
            records.retain(|r| !left_out(key_values[(r >> 8 & 0xff_ffff) as usize].1));
        }
        let kept: Vec<(CellKey, u32)> = key_values
            .iter()
            .zip(0..)
            .filter(|((_, value), _)| !left_out(*value))
            .map(|(&(unnamed, value), id)| {
                let (service, kind, status, parent) = unnamed_fields[unnamed as usize];
                let key = CellKey {
                    service: services[service as usize].clone(),
                    name: None,
                    attr: Some(values[value as usize].1.clone()),
                    kind,
                    status,
                    parent,
                };
                (key, id)
            })
            .collect();
        // No record is left of the keys of an attribute left out.
        let (keys, renumber) = sorted(kept, key_values.len());
        (keys, renumbered(records, &renumber), counted)
    }

    /// [`CellsBuilder::finish`], but with every duration of the attribute
    /// and any-service seconds kept (a merge adds a run's up before it
    /// thins them), telling `needs` first how many bytes it will take
    /// beyond what the builder holds ([`CellsBuilder::held_bytes`]): about
    /// three times the seconds table of the whole key (the unnamed and
    /// any-service seconds are at most its size) and twice the attribute
    /// keys', which it counts exactly before building them (the
    /// coarser tables are added up from them while they are held, and the
    /// records are given back once they are built).
    pub fn finish_counted(self, needs: impl FnOnce(usize)) -> Option<FileCells> {
        if self.overflow {
            return None;
        }
        let (attr, attr_records, counted) = Self::finish_attrs(self.attrs, &self.services);
        let (services, names) = (&self.services, &self.names);
        let named: Vec<(CellKey, u32)> = self
            .keys
            .iter()
            .map(|(&(service, name, kind, status, parent), &id)| {
                let key = CellKey {
                    service: services[service as usize].clone(),
                    name: Some(names[name as usize].clone()),
                    attr: None,
                    kind,
                    status,
                    parent,
                };
                (key, id)
            })
            .collect();
        let n = named.len();
        let (named, renumber) = sorted(named, n);
        let (unnamed, unnamed_of) = coarser_keys(&named, CellKey::without_name);
        let (any_service, any_service_of) = coarser_keys(&named, CellKey::without_service);

        let records = renumbered(self.records, &renumber);
        let (size, attr_size) = (sizes(&records), sizes(&attr_records));
        needs(3 * table_bytes(size) + 2 * table_bytes(attr_size));
        // The whole key by second, with durations: what the others are
        // added up from.
        let seconds = seconds_table(Family::Named, &records, size);
        drop(records);
        let unnamed_seconds = coarser(&seconds, Family::Unnamed, 1, |k| unnamed_of[k as usize]);
        // Every duration kept: they are thinned where light once a run's
        // are added up (`FileCells::thin`).
        let any_seconds = coarser(&seconds, Family::AnyService, 1, |k| {
            any_service_of[k as usize]
        });
        // Each length's tables are added up from the previous length's, read
        // where they lie (copies of the seconds' tables, the largest, once
        // took 40 MiB of a compaction's memory).
        let mut tables: Vec<CellTable> = Vec::with_capacity(3 * BUCKET_SECONDS.len());
        for &len in &BUCKET_SECONDS[1..] {
            let (named_prev, unnamed_prev) = match tables.len() {
                0 => (&seconds, &unnamed_seconds),
                n => (&tables[n - 2], &tables[n - 1]),
            };
            let named = coarser(named_prev, Family::Named, len, |k| k);
            let unnamed = coarser(unnamed_prev, Family::Unnamed, len, |k| k);
            tables.push(named);
            tables.push(unnamed);
        }
        // The whole key's seconds keep every duration, however light: a
        // query of durations by name in one service reads them at any step
        // (a light cell's take a byte a span, `format::LISTED_BELOW`).
        let mut coarse = Vec::with_capacity(BUCKET_SECONDS.len() - 1);
        for &len in &BUCKET_SECONDS[1..] {
            let next = coarser(
                coarse.last().unwrap_or(&any_seconds),
                Family::AnyService,
                len,
                |k| k,
            );
            coarse.push(next);
        }
        tables.insert(0, seconds);
        tables.insert(1, unnamed_seconds);
        tables.push(any_seconds);
        tables.extend(coarse);
        if !counted.is_empty() {
            let seconds = seconds_table(Family::Attr, &attr_records, attr_size);
            drop(attr_records);
            let mut coarse: Vec<CellTable> = Vec::new();
            for &len in &BUCKET_SECONDS[1..] {
                let next = coarser(coarse.last().unwrap_or(&seconds), Family::Attr, len, |k| k);
                coarse.push(next);
            }
            tables.push(seconds);
            tables.extend(coarse);
        }
        Some(FileCells {
            named,
            unnamed,
            attr,
            any_service,
            counted,
            tables,
            packed: Vec::new(),
            counts: Counts::Own,
            attr_per_file: false,
            named_in_run: false,
        })
    }
}
