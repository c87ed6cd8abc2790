//! Building summaries from spans: [`SummaryBuilder`] for a set searched in
//! memory, [`SidecarBuilder`] for a file's sidecar written trace by trace.
//! Both scan the few fields they need off the wire (`wire`), intern strings
//! once per set (`Interner`) and each resource once (`Groups`), and
//! accumulate one trace part at a time (`TraceAcc`).

use std::{borrow::Borrow, sync::Arc};

use super::{
    cells::{CellAttributes, CellsBuilder, FileCells},
    format,
    sidecar::{self, SidecarParts},
    wire, Edge, HashMap, Op, SummarySet, Tag, TagScope, TraceSummary, ValueKind,
    MAX_TAGS_PER_TRACE,
};
use crate::span::{ScopeGroup, Span, TraceId};

/// The service of spans whose resource names none.
const UNKNOWN_SERVICE: &str = "unknown_service";
/// Span fields the builder keeps per trace until the trace is summarized.
struct SpanLink {
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    service: u32,
}

/// One trace part being summarized. Operations and tags are small sets
/// (tags at most [`MAX_TAGS_PER_TRACE`]), kept as vectors: a tree node per
/// set per trace cost more memory than the summaries themselves.
struct TraceAcc {
    start: u64,
    end: u64,
    spans: u32,
    errors: u32,
    /// (start, service, name) of the earliest span without a parent.
    root: Option<(u64, u32, u32)>,
    ops: Vec<Op>,
    tags: Vec<Tag>,
    links: Vec<SpanLink>,
    /// The resources whose tags are already in `tags`.
    groups: Vec<u32>,
}

impl Default for TraceAcc {
    fn default() -> Self {
        TraceAcc {
            start: u64::MAX,
            end: 0,
            spans: 0,
            errors: 0,
            root: None,
            ops: Vec::new(),
            tags: Vec::new(),
            links: Vec::new(),
            groups: Vec::new(),
        }
    }
}

impl TraceAcc {
    /// Empties the part for the next trace, keeping the lists' memory.
    fn reset(&mut self) {
        self.start = u64::MAX;
        self.end = 0;
        self.spans = 0;
        self.errors = 0;
        self.root = None;
        self.ops.clear();
        self.tags.clear();
        self.links.clear();
        self.groups.clear();
    }
}

/// Resource attributes and service of one scope group, scanned once.
struct GroupInfo {
    service: u32,
    tags: Vec<Tag>,
}

/// The resources a builder has scanned. Keyed by the encoded resource, not
/// by the group's address: keeping each `Arc<ScopeGroup>` alive to pin its
/// address pinned the buffer its bytes live in too, and during a compaction
/// that is a whole decompressed block per block read (hundreds of MiB per
/// output file, uncounted by the memory budget).
#[derive(Default)]
struct Groups {
    by_resource: HashMap<Vec<u8>, u32>,
    infos: Vec<GroupInfo>,
}

impl Groups {
    /// The index of `group`'s resource in `infos`, scanning it the first time.
    fn index(&mut self, names: &mut Interner, group: &ScopeGroup) -> u32 {
        let key = group.resource.as_deref().unwrap_or_default();
        if let Some(&i) = self.by_resource.get(key) {
            return i;
        }
        let attrs = key_attrs(group);
        let service = attrs
            .iter()
            .find(|(k, _, kind)| *k == "service.name" && *kind != ValueKind::Unindexed)
            .map_or(UNKNOWN_SERVICE, |(_, v, _)| v.as_ref());
        let service = names.intern(service);
        let tags: Vec<Tag> = attrs
            .iter()
            .map(|(k, v, kind)| Tag {
                scope: TagScope::Resource,
                key: names.intern(k),
                value: names.intern(v),
                kind: *kind,
            })
            .collect();
        let i = self.infos.len() as u32;
        self.infos.push(GroupInfo { service, tags });
        self.by_resource.insert(key.to_vec(), i);
        i
    }
}

/// At most this many distinct encoded attributes are remembered per set
/// being built (see [`Interner::attribute`]); past it, an attribute not
/// remembered is read each time it comes. About 5 MB of keys and values of
/// typical length.
pub(super) const MAX_REMEMBERED_ATTRIBUTES: usize = 1 << 16;

/// An indexed attribute: its key and value in the string table, and the
/// value's type.
pub(super) type InternedAttribute = (u32, u32, ValueKind);

/// The string table of a set being built.
#[derive(Default)]
pub(super) struct Interner {
    pub(super) strings: Vec<String>,
    /// Keyed by bytes, so that a string read off the wire is checked to be
    /// UTF-8 only the first time it comes.
    lookup: HashMap<Box<[u8]>, u32>,
    /// Encoded `KeyValue`s already read: their (key, value) in the table, or
    /// `None` if the value is not indexed.
    pub(super) attributes: HashMap<Box<[u8]>, Option<InternedAttribute>>,
}

impl Interner {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.lookup.get(s.as_bytes()) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.lookup.insert(s.as_bytes().into(), id);
        id
    }

    /// [`Interner::intern`] for a string read off the wire: bytes that are
    /// not UTF-8 intern as the empty string.
    fn intern_utf8(&mut self, bytes: &[u8]) -> u32 {
        match self.lookup.get(bytes) {
            Some(&id) => id,
            None => self.intern(std::str::from_utf8(bytes).unwrap_or("")),
        }
    }

    /// The (key, value) of an encoded `KeyValue` in the table, or `None` if
    /// its value is not indexed. The spans of a trace, and of a service,
    /// repeat most attributes byte for byte: a repeat costs one hash of its
    /// encoding instead of a wire scan, two UTF-8 checks, two lookups and, for
    /// a number, rendering it as text.
    pub(super) fn attribute(&mut self, kv: &[u8]) -> Option<InternedAttribute> {
        if let Some(&tag) = self.attributes.get(kv) {
            return tag;
        }
        let tag = wire::key_value(kv).map(|(k, v, kind)| (self.intern(k), self.intern(&v), kind));
        if self.attributes.len() < MAX_REMEMBERED_ATTRIBUTES {
            self.attributes.insert(kv.into(), tag);
        }
        tag
    }
}

/// Builds a [`SummarySet`]; see the module docs.
#[derive(Default)]
pub struct SummaryBuilder {
    names: Interner,
    /// Trace parts still open: spans added one by one, in any order.
    traces: HashMap<TraceId, TraceAcc>,
    /// Trace parts already summarized ([`SummaryBuilder::add_trace`]).
    done: Vec<TraceSummary>,
    groups: Groups,
    scratch: TraceAcc,
}

impl SummaryBuilder {
    /// Adds one span, of a trace whose other spans may come at any time.
    pub fn add(&mut self, span: &Span) {
        let acc = self.traces.entry(span.trace_id).or_default();
        let group = self.groups.index(&mut self.names, &span.group);
        accumulate(
            &mut self.names,
            &self.groups,
            group,
            acc,
            span,
            &mut Vec::new(),
        );
    }

    /// Adds every span the set will hold of one trace (all of `spans` share
    /// one trace ID, and no other call adds it). The trace is summarized at
    /// once, so the builder keeps its compact summary and not its spans'
    /// links: compaction and flush, which see traces whole, build large sets
    /// this way.
    pub fn add_trace<S: Borrow<Span>>(&mut self, spans: &[S]) {
        self.add_trace_to(spans, None);
    }

    /// [`SummaryBuilder::add_trace`], counting the spans into `cells` from
    /// the same scan (as a flush does). `cells` finds names by the
    /// builder's string numbers, checked against their bytes, so it is
    /// quickest kept with one builder for their lives.
    pub fn add_trace_counted<S: Borrow<Span>>(&mut self, spans: &[S], cells: &mut CellsBuilder) {
        self.add_trace_to(spans, Some(cells));
    }

    fn add_trace_to<S: Borrow<Span>>(&mut self, spans: &[S], cells: Option<&mut CellsBuilder>) {
        let Some(first) = spans.first().map(Borrow::borrow) else {
            return;
        };
        debug_assert!(
            !self.traces.contains_key(&first.trace_id),
            "a trace added whole must not also be added span by span"
        );
        self.done.push(summarize_whole(
            &mut self.names,
            &mut self.groups,
            &mut self.scratch,
            spans,
            cells,
        ));
    }

    pub fn is_empty(&self) -> bool {
        self.traces.is_empty() && self.done.is_empty()
    }

    pub fn finish(self) -> SummarySet {
        let mut traces = self.done;
        traces.extend(
            self.traces
                .into_iter()
                .map(|(trace_id, mut acc)| summarize(trace_id, &mut acc)),
        );
        SummarySet::new(self.names.strings, traces)
    }
}

/// Builds the sidecar of a file written in trace-ID order, encoding each
/// trace's part as it is added: a compaction output's set is written, never
/// searched in memory, and its parts decoded (a few small vectors each) held
/// several times the memory of their encoding until the file was done (about
/// 80 MB per 64 MiB output, uncounted by the memory budget).
pub struct SidecarBuilder {
    /// Parts per block of the sidecar.
    block_parts: usize,
    names: Interner,
    groups: Groups,
    /// The parts encoded one after another, in trace-ID order.
    parts: Vec<u8>,
    /// Each part's (start, offset, length) in `parts`.
    placed: Vec<(u64, usize, usize)>,
    last: Option<TraceId>,
    /// Per input of [`SidecarBuilder::add_part`], the index in `names` of
    /// each of its strings already seen (`u32::MAX`: not yet): a carried-over
    /// part's strings are then looked up, not hashed again.
    remaps: Vec<Vec<u32>>,
    scratch: TraceAcc,
    /// The metrics cells of every span the file holds ([`SidecarBuilder::count`]).
    cells: CellsBuilder,
    /// Whether spans are counted into `cells`: not where a merge adds its
    /// outputs' cells up from its inputs'.
    counts_cells: bool,
}

impl SidecarBuilder {
    /// A builder of sidecars with `block_parts` parts per block.
    pub fn new(block_parts: usize) -> SidecarBuilder {
        SidecarBuilder {
            block_parts,
            names: Interner::default(),
            groups: Groups::default(),
            parts: Vec::new(),
            placed: Vec::new(),
            last: None,
            remaps: Vec::new(),
            scratch: TraceAcc::default(),
            cells: CellsBuilder::default(),
            counts_cells: true,
        }
    }

    /// The builder, counting no metrics cells: the file's are given at
    /// [`SidecarBuilder::write_with`].
    pub fn without_cells(mut self) -> SidecarBuilder {
        self.counts_cells = false;
        self
    }

    /// The builder, counting `attributes` into the file's attribute cells
    /// (a new builder counts the default ones).
    pub fn counting(mut self, attributes: Arc<CellAttributes>) -> SidecarBuilder {
        self.cells = CellsBuilder::new(attributes);
        self
    }

    /// Counts spans the file holds into its metrics cells: those of a trace
    /// whose part was carried over ([`SidecarBuilder::add_part`]);
    /// [`SidecarBuilder::add_trace`] counts the spans it summarizes.
    pub fn count<S: Borrow<Span>>(&mut self, spans: &[S]) {
        if self.counts_cells {
            self.cells.add_all(spans);
        }
    }

    /// Adds every span of one trace; see [`SummaryBuilder::add_trace`].
    /// Traces come in ascending trace-ID order, each once. The spans are
    /// counted into the file's metrics cells from the same scan.
    pub fn add_trace<S: Borrow<Span>>(&mut self, spans: &[S]) {
        if spans.is_empty() {
            return;
        }
        let part = summarize_whole(
            &mut self.names,
            &mut self.groups,
            &mut self.scratch,
            spans,
            self.counts_cells.then_some(&mut self.cells),
        );
        self.push(&part);
    }

    /// Adds a trace part summarized elsewhere: `part`, read from `from`,
    /// stands for every span the file holds of its trace. Its strings are
    /// interned into this table and its lists sorted by the new indices.
    /// Compaction carries the part of a trace that comes whole from one input
    /// file over this way, instead of scanning its spans again. `input`
    /// numbers `from` among the sidecars parts come from: for the life of the
    /// builder, one number always goes with one sidecar.
    pub fn add_part(&mut self, input: usize, from: &SidecarParts, part: TraceSummary) {
        if self.remaps.len() <= input {
            self.remaps.resize_with(input + 1, Vec::new);
        }
        let part = remap(&mut self.names, &mut self.remaps[input], from, part);
        self.push(&part);
    }

    fn push(&mut self, part: &TraceSummary) {
        debug_assert!(
            self.last.is_none_or(|last| last < part.trace_id),
            "parts come in ascending trace-ID order, each once"
        );
        self.last = Some(part.trace_id);
        let at = self.parts.len();
        format::put_part(&mut self.parts, part);
        self.placed
            .push((part.start_unix_nano, at, self.parts.len() - at));
    }

    /// The metrics cells of the spans counted ([`SidecarBuilder::count`]),
    /// taken: `None` when none were counted (the file's cells are then
    /// counted from its spans when a query needs them).
    /// About the bytes the builder holds: the encoded parts, their places,
    /// the string remaps and the metrics cells counted so far.
    pub fn held_bytes(&self) -> usize {
        self.parts.capacity()
            + self.placed.capacity() * std::mem::size_of::<(u64, usize, usize)>()
            + self.remaps.iter().map(|r| r.capacity() * 4).sum::<usize>()
            + self.cells.held_bytes()
    }

    /// The cells counted, as a file of its own keeps them
    /// ([`CellsBuilder::finish`]).
    pub fn take_cells(&mut self) -> Option<FileCells> {
        let mut cells = self.take_cells_counted(|_| ())?;
        cells.thin();
        Some(cells)
    }

    /// [`SidecarBuilder::take_cells`] before the attribute seconds are
    /// thinned, telling `needs` first the bytes the cells take to finish
    /// beyond what they hold ([`CellsBuilder::finish_counted`]).
    pub fn take_cells_counted(&mut self, needs: impl FnOnce(usize)) -> Option<FileCells> {
        let cells = std::mem::take(&mut self.cells);
        (!cells.is_empty())
            .then(|| cells.finish_counted(needs))
            .flatten()
    }

    /// Writes the sidecar of the sorted file at `table`, with its cells.
    pub fn write(mut self, table: &std::path::Path) -> crate::error::Result<()> {
        let cells = self.take_cells();
        self.write_with(table, cells.as_ref())
    }

    /// Writes the sidecar of the sorted file at `table`, with `cells`.
    pub fn write_with(
        self,
        table: &std::path::Path,
        cells: Option<&FileCells>,
    ) -> crate::error::Result<()> {
        sidecar::write_parts(
            table,
            &self.names.strings,
            &self.parts,
            self.placed,
            self.block_parts,
            cells,
        )
    }
}

/// Summarizes every span of one trace at once, counting each into `cells`
/// (if any) from the same scan of its fields.
/// `acc` is scratch space, reused from trace to trace so that its lists are
/// not allocated again for each.
fn summarize_whole<S: Borrow<Span>>(
    names: &mut Interner,
    groups: &mut Groups,
    acc: &mut TraceAcc,
    spans: &[S],
    mut cells: Option<&mut CellsBuilder>,
) -> TraceSummary {
    acc.reset();
    let mut attributes = Vec::new();
    // Spans of a trace mostly came in one request and share its group: its
    // address (alive while `spans` is borrowed) saves hashing the resource.
    let mut last: Option<(*const ScopeGroup, u32)> = None;
    for span in spans {
        let span = span.borrow();
        let ptr = Arc::as_ptr(&span.group);
        let group = match last {
            Some((p, group)) if p == ptr => group,
            _ => {
                let group = groups.index(names, &span.group);
                last = Some((ptr, group));
                group
            }
        };
        let (fields, name) = accumulate(names, groups, group, acc, span, &mut attributes);
        if let Some(cells) = cells.as_deref_mut() {
            cells.add_scanned(span, &fields, Some(name), &attributes);
        }
    }
    summarize(spans[0].borrow().trace_id, acc)
}

/// `part`, whose strings index `from`'s table, with its strings interned
/// into `names` (`seen` remembers where each of `from`'s strings went) and
/// its lists sorted again by the new indices.
fn remap(
    names: &mut Interner,
    seen: &mut Vec<u32>,
    from: &SidecarParts,
    mut part: TraceSummary,
) -> TraceSummary {
    let s = |id: u32| {
        let i = id as usize;
        if i >= seen.len() {
            seen.resize(i + 1, u32::MAX);
        }
        if seen[i] == u32::MAX {
            seen[i] = names.intern(from.str(id));
        }
        seen[i]
    };
    format::remap_part(&mut part, s);
    part.ops.sort_unstable();
    part.tags.sort_unstable();
    part.edges.sort_unstable();
    part.orphans.sort_unstable();
    part
}

fn key_attrs(group: &ScopeGroup) -> Vec<(&str, std::borrow::Cow<'_, str>, ValueKind)> {
    group
        .resource
        .as_deref()
        .map(wire::scan_resource)
        .unwrap_or_default()
}

/// Adds `span`, whose resource is `groups.infos[group]`, to its trace part.
/// `attributes` is scratch space for the span's attributes.
fn accumulate<'a>(
    names: &mut Interner,
    groups: &Groups,
    group: u32,
    acc: &mut TraceAcc,
    span: &'a Span,
    attributes: &mut Vec<&'a [u8]>,
) -> (wire::SpanFields<'a>, u32) {
    let info = &groups.infos[group as usize];
    let service = info.service;
    let f = wire::scan_span(&span.payload, attributes);
    let name = names.intern_utf8(f.name);
    acc.start = acc.start.min(span.start_unix_nano);
    acc.end = acc.end.max(span.end_unix_nano);
    acc.spans += 1;
    acc.errors += u32::from(f.error);
    let parent: Option<[u8; 8]> = f
        .parent_span_id
        .try_into()
        .ok()
        .filter(|p: &[u8; 8]| *p != [0; 8]);
    if parent.is_none() && acc.root.is_none_or(|(t, _, _)| span.start_unix_nano < t) {
        acc.root = Some((span.start_unix_nano, service, name));
    }
    match acc
        .ops
        .iter_mut()
        .find(|o| o.service == service && o.name == name && o.kind == f.kind)
    {
        Some(op) => op.error |= f.error,
        None => acc.ops.push(Op {
            service,
            name,
            kind: f.kind,
            error: f.error,
        }),
    }
    // A resource's tags are the same for every span under it.
    let resource_tags = if acc.groups.contains(&group) {
        &[][..]
    } else {
        acc.groups.push(group);
        &info.tags[..]
    };
    let span_tags = attributes.iter().filter_map(|kv| {
        let (key, value, kind) = names.attribute(kv)?;
        Some(Tag {
            scope: TagScope::Span,
            key,
            value,
            kind,
        })
    });
    for tag in resource_tags.iter().copied().chain(span_tags) {
        if acc.tags.len() >= MAX_TAGS_PER_TRACE {
            break;
        }
        if !acc.tags.contains(&tag) {
            acc.tags.push(tag);
        }
    }
    acc.links.push(SpanLink {
        span_id: span.span_id.0,
        parent,
        service,
    });
    (f, name)
}

/// The summary of a finished trace part. Leaves `acc`'s lists sorted; the
/// summary's own lists are copies of exactly their length.
fn summarize(trace_id: TraceId, acc: &mut TraceAcc) -> TraceSummary {
    // A part has tens of spans: parents are found by binary search, and calls
    // counted by sorting, without a map per trace.
    acc.links.sort_unstable_by_key(|l| l.span_id);
    let mut calls: Vec<(u32, u32)> = Vec::new();
    let mut orphans = Vec::new();
    for link in &acc.links {
        let Some(parent_id) = link.parent else {
            continue;
        };
        match acc.links.binary_search_by_key(&parent_id, |l| l.span_id) {
            Ok(i) if acc.links[i].service != link.service => {
                calls.push((acc.links[i].service, link.service));
            }
            Ok(_) => {}
            Err(_) => orphans.push((parent_id, link.service)),
        }
    }
    calls.sort_unstable();
    let edges: Vec<Edge> = calls
        .chunk_by(|a, b| a == b)
        .map(|same| Edge {
            parent: same[0].0,
            child: same[0].1,
            calls: same.len() as u32,
        })
        .collect();
    orphans.sort_unstable();
    orphans.shrink_to_fit();
    acc.ops.sort_unstable();
    acc.tags.sort_unstable();
    TraceSummary {
        trace_id,
        start_unix_nano: acc.start,
        end_unix_nano: acc.end,
        span_count: acc.spans,
        error_count: acc.errors,
        root: acc.root.map(|(_, s, n)| (s, n)),
        ops: acc.ops.clone(),
        tags: acc.tags.clone(),
        edges,
        orphans,
    }
}

/// The `service.name` of a resource, as the index names it.
pub fn service_name(group: &ScopeGroup) -> String {
    key_attrs(group)
        .iter()
        .find(|(k, _, kind)| *k == "service.name" && *kind != ValueKind::Unindexed)
        .map_or(UNKNOWN_SERVICE, |(_, v, _)| v.as_ref())
        .to_owned()
}
