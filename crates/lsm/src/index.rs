//! The search index: a summary of every trace in every sorted file, so that
//! services, operations, tag values, trace search and dependencies are
//! answered without reading span payloads.
//!
//! - A [`SummarySet`] summarizes the spans of one source: a sorted file, a
//!   sealed buffer, or a frozen memtable chunk. It holds one
//!   [`TraceSummary`] per trace in the source (its *part* of the trace: the
//!   spans the source holds) and a string table its summaries point into.
//! - [`SummaryBuilder`] makes one from spans, in any order, with a light wire
//!   scan of the few fields it needs (`wire`).
//! - `sidecar`: a file's set is written next to it as `{id:020}.idx` when a
//!   flush or a compaction writes the file, before the file is installed, and
//!   deleted with it; a missing or damaged sidecar is rebuilt from its file.
//! - [`search`], [`services`], [`operations`], [`dependencies`], [`tags`]:
//!   pure functions over the sets of one snapshot.
//!
//! A trace whose spans lie in several sources (level-0 files, buffers) has
//! one part in each; search merges the parts of a trace before it applies the
//! filters, so a trace matches when its spans together satisfy them: some span
//! of the service, some span of the operation (in that service), every tag on
//! some span or resource, and the trace's start and duration in range.

mod sidecar;
pub mod wire;

use std::{
    borrow::Borrow,
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

pub use sidecar::{
    decode as decode_sidecar, encode as encode_sidecar, read as read_sidecar, remove_orphans,
    remove_sidecar, sidecar_path, write as write_sidecar, SidecarParts,
};

use crate::span::{ScopeGroup, Span, TraceId};

/// Hash maps keyed by strings and IDs from spans, used for every span a
/// flush or compaction summarizes: foldhash (seeded per process) instead of
/// SipHash, which took an eighth of a compaction's CPU time.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The service of spans whose resource names none.
const UNKNOWN_SERVICE: &str = "unknown_service";

/// At most this many distinct (scope, key, value) tags are kept per trace part.
pub const MAX_TAGS_PER_TRACE: usize = 256;

/// Where an indexed attribute came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TagScope {
    Resource = 0,
    Span = 1,
}

/// One operation of a trace part: (service, span name, OTLP span kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Op {
    pub service: u32,
    pub name: u32,
    pub kind: u8,
}

/// One indexed attribute: (scope, key, value), strings by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag {
    pub scope: TagScope,
    pub key: u32,
    pub value: u32,
}

/// Calls from a span of `parent` to a child span of another service, counted
/// where both spans are in the same part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Edge {
    pub parent: u32,
    pub child: u32,
    pub calls: u32,
}

/// What the index knows about one trace's spans in one source. Strings are
/// indices into the set's string table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSummary {
    pub trace_id: TraceId,
    /// Earliest span start.
    pub start_unix_nano: u64,
    /// Latest span end.
    pub end_unix_nano: u64,
    pub span_count: u32,
    pub error_count: u32,
    /// The root span's (service, name), if the root is in this part.
    pub root: Option<(u32, u32)>,
    /// Distinct operations, sorted.
    pub ops: Vec<Op>,
    /// Distinct tags, sorted; at most [`MAX_TAGS_PER_TRACE`].
    pub tags: Vec<Tag>,
    pub edges: Vec<Edge>,
    /// (parent span ID, service) of spans whose parent is not in this part.
    pub orphans: Vec<([u8; 8], u32)>,
}

/// The summaries of one source; see the module docs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SummarySet {
    pub strings: Vec<String>,
    /// Sorted by trace ID.
    pub traces: Vec<TraceSummary>,
    /// Smallest part start and largest part end (0, 0 when empty).
    pub min_time_unix_nano: u64,
    pub max_time_unix_nano: u64,
    lookup: HashMap<String, u32>,
    /// Distinct operations of all parts, sorted (services first).
    operations: Vec<Op>,
}

impl SummarySet {
    /// A set from its parts (as decoded from a sidecar); builds the lookup table.
    pub fn new(strings: Vec<String>, mut traces: Vec<TraceSummary>) -> SummarySet {
        traces.sort_by_key(|t| t.trace_id);
        let lookup = strings
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i as u32))
            .collect();
        let min = traces.iter().map(|t| t.start_unix_nano).min().unwrap_or(0);
        let max = traces.iter().map(|t| t.end_unix_nano).max().unwrap_or(0);
        let operations: BTreeSet<Op> = traces.iter().flat_map(|t| t.ops.iter().copied()).collect();
        SummarySet {
            strings,
            traces,
            min_time_unix_nano: min,
            max_time_unix_nano: max,
            lookup,
            operations: operations.into_iter().collect(),
        }
    }

    /// About how many heap bytes the set holds (capacities, not lengths),
    /// for the bounded cache of file summaries.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        // A string is stored twice (table and lookup key); a map entry also
        // costs its index and a control byte.
        let strings: usize = self
            .strings
            .iter()
            .map(|s| 2 * (s.capacity() + size_of::<String>()) + 8)
            .sum();
        let traces: usize = self
            .traces
            .iter()
            .map(|t| {
                t.ops.capacity() * size_of::<Op>()
                    + t.tags.capacity() * size_of::<Tag>()
                    + t.edges.capacity() * size_of::<Edge>()
                    + t.orphans.capacity() * size_of::<([u8; 8], u32)>()
            })
            .sum();
        size_of::<SummarySet>()
            + strings
            + self.traces.capacity() * size_of::<TraceSummary>()
            + traces
            + self.operations.capacity() * size_of::<Op>()
    }

    /// Summarizes `spans` (any order).
    pub fn from_spans<'a>(spans: impl IntoIterator<Item = &'a Span>) -> SummarySet {
        let mut b = SummaryBuilder::default();
        for span in spans {
            b.add(span);
        }
        b.finish()
    }

    /// Summarizes `spans` sorted (or at least grouped) by trace ID, one trace
    /// at a time; see [`SummaryBuilder::add_trace`].
    pub fn from_sorted_spans<S: Borrow<Span>>(spans: &[S]) -> SummarySet {
        let mut b = SummaryBuilder::default();
        for trace in spans.chunk_by(|a, b| a.borrow().trace_id == b.borrow().trace_id) {
            b.add_trace(trace);
        }
        b.finish()
    }

    /// The index of `s` in the string table, if the set has it.
    pub fn id(&self, s: &str) -> Option<u32> {
        self.lookup.get(s).copied()
    }

    pub fn str(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", String::as_str)
    }

    /// Whether any part may lie in `[start, end]` (0 = unbounded).
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        !self.traces.is_empty()
            && (start == 0 || self.max_time_unix_nano >= start)
            && (end == 0 || self.min_time_unix_nano <= end)
    }
}

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
            .find(|(k, _)| *k == "service.name")
            .map_or(UNKNOWN_SERVICE, |(_, v)| v.as_ref());
        let service = names.intern(service);
        let tags: Vec<Tag> = attrs
            .iter()
            .map(|(k, v)| Tag {
                scope: TagScope::Resource,
                key: names.intern(k),
                value: names.intern(v),
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
const MAX_REMEMBERED_ATTRIBUTES: usize = 1 << 16;

/// The string table of a set being built.
#[derive(Default)]
struct Interner {
    strings: Vec<String>,
    /// Keyed by bytes, so that a string read off the wire is checked to be
    /// UTF-8 only the first time it comes.
    lookup: HashMap<Box<[u8]>, u32>,
    /// Encoded `KeyValue`s already read: their (key, value) in the table, or
    /// `None` if the value is not indexed.
    attributes: HashMap<Box<[u8]>, Option<(u32, u32)>>,
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
    fn attribute(&mut self, kv: &[u8]) -> Option<(u32, u32)> {
        if let Some(&tag) = self.attributes.get(kv) {
            return tag;
        }
        let tag = wire::key_value(kv).map(|(k, v)| (self.intern(k), self.intern(&v)));
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
#[derive(Default)]
pub struct SidecarBuilder {
    names: Interner,
    groups: Groups,
    /// The encoded `traces` of the body, without their count.
    parts: Vec<u8>,
    count: usize,
    last: Option<TraceId>,
    /// Per input of [`SidecarBuilder::add_part`], the index in `names` of
    /// each of its strings already seen (`u32::MAX`: not yet): a carried-over
    /// part's strings are then looked up, not hashed again.
    remaps: Vec<Vec<u32>>,
    scratch: TraceAcc,
}

impl SidecarBuilder {
    /// Adds every span of one trace; see [`SummaryBuilder::add_trace`].
    /// Traces come in ascending trace-ID order, each once.
    pub fn add_trace<S: Borrow<Span>>(&mut self, spans: &[S]) {
        if spans.is_empty() {
            return;
        }
        let part = summarize_whole(&mut self.names, &mut self.groups, &mut self.scratch, spans);
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
        sidecar::put_part(&mut self.parts, part);
        self.count += 1;
    }

    /// Writes the sidecar of the sorted file at `table`.
    pub fn write(self, table: &std::path::Path) -> crate::error::Result<()> {
        sidecar::write_parts(table, &self.names.strings, self.count, &self.parts)
    }
}

/// Summarizes every span of one trace at once.
/// `acc` is scratch space, reused from trace to trace so that its lists are
/// not allocated again for each.
fn summarize_whole<S: Borrow<Span>>(
    names: &mut Interner,
    groups: &mut Groups,
    acc: &mut TraceAcc,
    spans: &[S],
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
        accumulate(names, groups, group, acc, span, &mut attributes);
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
    let mut s = |id: u32| {
        let i = id as usize;
        if i >= seen.len() {
            seen.resize(i + 1, u32::MAX);
        }
        if seen[i] == u32::MAX {
            seen[i] = names.intern(from.str(id));
        }
        seen[i]
    };
    part.root = part.root.map(|(service, name)| (s(service), s(name)));
    for op in &mut part.ops {
        op.service = s(op.service);
        op.name = s(op.name);
    }
    for tag in &mut part.tags {
        tag.key = s(tag.key);
        tag.value = s(tag.value);
    }
    for edge in &mut part.edges {
        edge.parent = s(edge.parent);
        edge.child = s(edge.child);
    }
    for (_, service) in &mut part.orphans {
        *service = s(*service);
    }
    part.ops.sort_unstable();
    part.tags.sort_unstable();
    part.edges.sort_unstable();
    part.orphans.sort_unstable();
    part
}

fn key_attrs(group: &ScopeGroup) -> Vec<(&str, std::borrow::Cow<'_, str>)> {
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
) {
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
    let op = Op {
        service,
        name,
        kind: f.kind,
    };
    if !acc.ops.contains(&op) {
        acc.ops.push(op);
    }
    // A resource's tags are the same for every span under it.
    let resource_tags = if acc.groups.contains(&group) {
        &[][..]
    } else {
        acc.groups.push(group);
        &info.tags[..]
    };
    let span_tags = attributes.iter().filter_map(|kv| {
        let (key, value) = names.attribute(kv)?;
        Some(Tag {
            scope: TagScope::Span,
            key,
            value,
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

/// What to look for. Empty strings and zeros mean "any".
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    pub service: String,
    /// A span name (of `service`, when one is given).
    pub operation: String,
    /// (key, value) pairs, each on some span or resource of the trace.
    pub tags: Vec<(String, String)>,
    /// The trace's start lies in `[start_min, start_max]` (Unix ns).
    pub start_min: u64,
    pub start_max: u64,
    /// The trace's duration lies in `[duration_min, duration_max]` (ns).
    pub duration_min: u64,
    pub duration_max: u64,
    /// Most traces returned, newest first; 0 means 20.
    pub limit: usize,
}

/// One trace found by [`search`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHit {
    pub trace_id: TraceId,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub span_count: u64,
    pub error_count: u64,
    /// Service and name of the root span, if the trace has one.
    pub root_service: Option<String>,
    pub root_name: Option<String>,
    /// Services of the trace, sorted.
    pub services: Vec<String>,
}

impl TraceHit {
    pub fn duration_nanos(&self) -> u64 {
        self.end_unix_nano.saturating_sub(self.start_unix_nano)
    }
}

/// The parts of one trace: (set index, trace index in the set).
type Parts = Vec<(usize, usize)>;

/// A query's strings resolved in one set's string table, once per query.
struct Resolved {
    /// `None`: the set lacks the string (so none of its parts has it).
    service: Option<u32>,
    operation: Option<u32>,
    tags: Vec<Option<(u32, u32)>>,
}

fn resolve(set: &SummarySet, q: &SearchQuery) -> Resolved {
    Resolved {
        service: set.id(&q.service),
        operation: set.id(&q.operation),
        tags: q
            .tags
            .iter()
            .map(|(k, v)| Some((set.id(k)?, set.id(v)?)))
            .collect(),
    }
}

/// Traces matching `q` in `sets` (the sources of one snapshot), newest first.
/// `expire_before`: parts ending before it are past retention and ignored.
pub fn search(sets: &[Arc<SummarySet>], q: &SearchQuery, expire_before: u64) -> Vec<TraceHit> {
    let limit = if q.limit == 0 { 20 } else { q.limit };
    // A part never starts before its trace, but may start after start_max.
    let in_play: Vec<bool> = sets
        .iter()
        .map(|set| set.overlaps(q.start_min.max(expire_before), 0))
        .collect();
    let resolved: Vec<Resolved> = sets.iter().map(|set| resolve(set, q)).collect();
    // Whether a part has a span of the service (always true without one).
    let has_service = |si: usize, t: &TraceSummary| -> bool {
        q.service.is_empty()
            || resolved[si]
                .service
                .is_some_and(|s| t.ops.iter().any(|o| o.service == s))
    };
    // Pass 1: parts that have the service. Sets are sorted by trace ID, so
    // the rest is sorting and merging, no hashing.
    let mut found: Vec<(TraceId, usize, usize)> = Vec::new();
    for (si, set) in sets.iter().enumerate() {
        if !in_play[si] || (!q.service.is_empty() && resolved[si].service.is_none()) {
            continue;
        }
        for (ti, t) in set.traces.iter().enumerate() {
            if t.end_unix_nano >= expire_before
                && (q.start_max == 0 || t.start_unix_nano <= q.start_max)
                && has_service(si, t)
            {
                found.push((t.trace_id, si, ti));
            }
        }
    }
    found.sort_unstable();
    // Pass 2: the candidates' other parts, which pass 1 skipped.
    if !q.service.is_empty() && !found.is_empty() {
        let mut ids: Vec<TraceId> = found.iter().map(|f| f.0).collect();
        ids.dedup();
        let mut more = Vec::new();
        for (si, set) in sets.iter().enumerate() {
            if !in_play[si] {
                continue;
            }
            let mut i = 0;
            for (ti, t) in set.traces.iter().enumerate() {
                while i < ids.len() && ids[i] < t.trace_id {
                    i += 1;
                }
                if i == ids.len() {
                    break;
                }
                if ids[i] != t.trace_id || t.end_unix_nano < expire_before {
                    continue;
                }
                let in_pass_1 = has_service(si, t)
                    && (q.start_max == 0 || t.start_unix_nano <= q.start_max)
                    && (q.service.is_empty() || resolved[si].service.is_some());
                if !in_pass_1 {
                    more.push((t.trace_id, si, ti));
                }
            }
        }
        if !more.is_empty() {
            found.extend(more);
            found.sort_unstable();
        }
    }

    let mut matches: Vec<(u64, TraceId, Parts)> = Vec::new();
    for group in found.chunk_by(|a, b| a.0 == b.0) {
        let trace_id = group[0].0;
        let parts: Parts = group.iter().map(|&(_, si, ti)| (si, ti)).collect();
        let part = |&(si, ti): &(usize, usize)| &sets[si].traces[ti];
        let start = parts
            .iter()
            .map(|p| part(p).start_unix_nano)
            .min()
            .unwrap_or(0);
        let end = parts
            .iter()
            .map(|p| part(p).end_unix_nano)
            .max()
            .unwrap_or(0);
        let duration = end.saturating_sub(start);
        if (q.start_min != 0 && start < q.start_min)
            || (q.start_max != 0 && start > q.start_max)
            || (q.duration_min != 0 && duration < q.duration_min)
            || (q.duration_max != 0 && duration > q.duration_max)
        {
            continue;
        }
        if !q.operation.is_empty() {
            let found = parts.iter().any(|&(si, ti)| {
                let r = &resolved[si];
                let Some(name) = r.operation else {
                    return false;
                };
                sets[si].traces[ti].ops.iter().any(|o| {
                    o.name == name && (q.service.is_empty() || Some(o.service) == r.service)
                })
            });
            if !found {
                continue;
            }
        }
        let tags_found = (0..q.tags.len()).all(|i| {
            parts.iter().any(|&(si, ti)| {
                let Some((k, v)) = resolved[si].tags[i] else {
                    return false;
                };
                sets[si].traces[ti]
                    .tags
                    .iter()
                    .any(|tag| tag.key == k && tag.value == v)
            })
        });
        if tags_found {
            matches.push((start, trace_id, parts));
        }
    }
    let newest_first =
        |a: &(u64, TraceId, Parts), b: &(u64, TraceId, Parts)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
    if matches.len() > limit {
        matches.select_nth_unstable_by(limit - 1, newest_first);
        matches.truncate(limit);
    }
    matches.sort_by(newest_first);
    matches
        .into_iter()
        .map(|(_, trace_id, parts)| hit(sets, trace_id, &parts))
        .collect()
}

/// Merges the parts of one trace into a [`TraceHit`].
fn hit(sets: &[Arc<SummarySet>], trace_id: TraceId, parts: &[(usize, usize)]) -> TraceHit {
    let mut h = TraceHit {
        trace_id,
        start_unix_nano: u64::MAX,
        end_unix_nano: 0,
        span_count: 0,
        error_count: 0,
        root_service: None,
        root_name: None,
        services: Vec::new(),
    };
    let mut services = BTreeSet::new();
    let mut root_start = u64::MAX;
    for &(si, ti) in parts {
        let set = &sets[si];
        let t = &set.traces[ti];
        h.start_unix_nano = h.start_unix_nano.min(t.start_unix_nano);
        h.end_unix_nano = h.end_unix_nano.max(t.end_unix_nano);
        h.span_count += u64::from(t.span_count);
        h.error_count += u64::from(t.error_count);
        services.extend(t.ops.iter().map(|o| set.str(o.service).to_owned()));
        if let Some((s, n)) = t.root {
            if t.start_unix_nano < root_start {
                root_start = t.start_unix_nano;
                h.root_service = Some(set.str(s).to_owned());
                h.root_name = Some(set.str(n).to_owned());
            }
        }
    }
    h.services = services.into_iter().collect();
    h
}

/// Every service name, sorted.
pub fn services(sets: &[Arc<SummarySet>]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for set in sets {
        let ids: BTreeSet<u32> = set.operations.iter().map(|o| o.service).collect();
        out.extend(ids.into_iter().map(|i| set.str(i).to_owned()));
    }
    out.into_iter().collect()
}

/// The (span name, OTLP kind) pairs of `service`, sorted; only of `kind` if given.
pub fn operations(sets: &[Arc<SummarySet>], service: &str, kind: Option<u8>) -> Vec<(String, u8)> {
    let mut out = BTreeSet::new();
    for set in sets {
        let Some(s) = set.id(service) else { continue };
        let ids: BTreeSet<(u32, u8)> = set
            .operations
            .iter()
            .filter(|o| o.service == s && kind.is_none_or(|k| o.kind == k))
            .map(|o| (o.name, o.kind))
            .collect();
        out.extend(ids.into_iter().map(|(n, k)| (set.str(n).to_owned(), k)));
    }
    out.into_iter().collect()
}

/// Calls between services, (parent, child) -> count, over parts overlapping
/// `[start, end]` (0 = unbounded). A call is a span whose parent span is of
/// another service. Calls within a part are counted in its summary; a span
/// whose parent is in another part of the trace (another file or buffer) is
/// resolved from the trace's spans, which `read_trace` returns: once per such
/// trace, and only for those (they are few once compaction has merged the
/// parts of a trace).
pub fn dependencies<E>(
    sets: &[Arc<SummarySet>],
    start: u64,
    end: u64,
    mut read_trace: impl FnMut(&TraceId) -> Result<Vec<Span>, E>,
) -> Result<BTreeMap<(String, String), u64>, E> {
    let in_window = |t: &TraceSummary| {
        (start == 0 || t.end_unix_nano >= start) && (end == 0 || t.start_unix_nano <= end)
    };
    let mut out = BTreeMap::new();
    let mut pending: BTreeMap<TraceId, Parts> = BTreeMap::new();
    for (si, set) in sets.iter().enumerate() {
        if !set.overlaps(start, end) {
            continue;
        }
        for (ti, t) in set.traces.iter().enumerate() {
            if !in_window(t) {
                continue;
            }
            for e in &t.edges {
                let key = (set.str(e.parent).to_owned(), set.str(e.child).to_owned());
                *out.entry(key).or_default() += u64::from(e.calls);
            }
            if !t.orphans.is_empty() {
                pending.entry(t.trace_id).or_default().push((si, ti));
            }
        }
    }
    let mut services: HashMap<Vec<u8>, String> = HashMap::default();
    for (trace_id, parts) in pending {
        let spans = read_trace(&trace_id)?;
        for span in &spans {
            let resource = span.group.resource.as_deref().unwrap_or_default();
            if !services.contains_key(resource) {
                services.insert(resource.to_vec(), service_name(&span.group));
            }
        }
        let service_of: HashMap<[u8; 8], &str> = spans
            .iter()
            .map(|span| {
                let resource = span.group.resource.as_deref().unwrap_or_default();
                (span.span_id.0, services[resource].as_str())
            })
            .collect();
        for (si, ti) in parts {
            let set = &sets[si];
            for (parent_id, child) in &set.traces[ti].orphans {
                let child = set.str(*child);
                match service_of.get(parent_id) {
                    Some(&parent) if parent != child => {
                        *out.entry((parent.to_owned(), child.to_owned()))
                            .or_default() += 1;
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(out)
}

/// The `service.name` of a resource, as the index names it.
pub fn service_name(group: &ScopeGroup) -> String {
    key_attrs(group)
        .iter()
        .find(|(k, _)| *k == "service.name")
        .map_or(UNKNOWN_SERVICE, |(_, v)| v.as_ref())
        .to_owned()
}

/// Distinct tag keys per scope over parts overlapping `[start, end]`.
pub fn tag_keys(sets: &[Arc<SummarySet>], start: u64, end: u64) -> BTreeSet<(TagScope, String)> {
    let mut out = BTreeSet::new();
    for set in sets {
        if !set.overlaps(start, end) {
            continue;
        }
        let ids: BTreeSet<(TagScope, u32)> = set
            .traces
            .iter()
            .flat_map(|t| t.tags.iter().map(|g| (g.scope, g.key)))
            .collect();
        out.extend(ids.into_iter().map(|(s, k)| (s, set.str(k).to_owned())));
    }
    out
}

/// Distinct values of `key` (in `scope`, or either) over parts overlapping `[start, end]`.
pub fn tag_values(
    sets: &[Arc<SummarySet>],
    scope: Option<TagScope>,
    key: &str,
    start: u64,
    end: u64,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for set in sets {
        let Some(k) = set.id(key) else { continue };
        if !set.overlaps(start, end) {
            continue;
        }
        let ids: BTreeSet<u32> = set
            .traces
            .iter()
            .flat_map(|t| t.tags.iter())
            .filter(|g| g.key == k && scope.is_none_or(|s| g.scope == s))
            .map(|g| g.value)
            .collect();
        out.extend(ids.into_iter().map(|v| set.str(v).to_owned()));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::test_util::{group, span};

    #[test]
    fn summaries_do_not_keep_the_spans_buffers_alive() {
        // A block's spans and groups are slices of one decompressed buffer; a
        // builder that held on to them would pin that buffer until its file is
        // finished.
        let buffer = bytes::Bytes::from(vec![0u8; 4096]);
        let g = Arc::new(ScopeGroup {
            resource: Some(buffer.slice(0..0)),
            resource_schema_url: buffer.slice(0..8),
            scope: None,
            scope_schema_url: bytes::Bytes::new(),
        });
        let mut builder = SummaryBuilder::default();
        let mut s = span(&g, 1, 1, 1);
        s.payload = buffer.slice(8..8);
        builder.add(&s);
        drop((s, g));
        assert!(
            buffer.is_unique(),
            "the summary builder still references the block buffer"
        );
        assert_eq!(builder.finish().traces.len(), 1);
    }

    /// An encoded `Resource` with the attributes `attrs` (string values).
    fn resource(attrs: &[(&str, &str)]) -> Arc<ScopeGroup> {
        fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
            out.push(number << 3 | 2);
            out.push(u8::try_from(bytes.len()).expect("short"));
            out.extend_from_slice(bytes);
        }
        let mut r = Vec::new();
        for (k, v) in attrs {
            let (mut kv, mut any) = (Vec::new(), Vec::new());
            field(&mut any, 1, v.as_bytes());
            field(&mut kv, 1, k.as_bytes());
            field(&mut kv, 2, &any);
            field(&mut r, 1, &kv);
        }
        Arc::new(ScopeGroup {
            resource: Some(r.into()),
            ..ScopeGroup::default()
        })
    }

    #[test]
    fn a_trace_summarized_whole_has_each_spans_own_service_and_resource_tags() {
        let front = resource(&[("service.name", "front"), ("zone", "a")]);
        let back = resource(&[("service.name", "back"), ("zone", "b")]);
        // The same resource behind another Arc, as a second request brings it.
        let back_again = resource(&[("service.name", "back"), ("zone", "b")]);
        let spans = vec![
            span(&front, 1, 1, 10),
            span(&back, 1, 2, 20),
            span(&back, 1, 3, 30),
            span(&front, 1, 4, 40),
            span(&back_again, 1, 5, 50),
        ];
        let whole = SummarySet::from_sorted_spans(&spans);
        assert_eq!(whole, SummarySet::from_spans(&spans));
        let t = &whole.traces[0];
        let services: BTreeSet<&str> = t.ops.iter().map(|o| whole.str(o.service)).collect();
        assert_eq!(services, BTreeSet::from(["back", "front"]));
        let zones: BTreeSet<&str> = t
            .tags
            .iter()
            .filter(|g| whole.str(g.key) == "zone")
            .map(|g| whole.str(g.value))
            .collect();
        assert_eq!(zones, BTreeSet::from(["a", "b"]));
        assert_eq!(t.span_count, 5);
    }

    #[test]
    fn a_sidecar_built_part_by_part_is_the_sidecar_of_the_whole_set() {
        let (a, b) = (group("checkout"), group("payments"));
        let mut spans: Vec<Span> = (0..120u64)
            .map(|i| span(if i % 3 == 0 { &a } else { &b }, u128::from(i % 11), i, i))
            .collect();
        crate::sort::sort_by_trace_id(&mut spans);
        let dir = tempfile::tempdir().expect("tempdir");
        let table = dir.path().join("1.sst");
        let mut builder = SidecarBuilder::default();
        for trace in spans.chunk_by(|x, y| x.trace_id == y.trace_id) {
            builder.add_trace(trace);
        }
        builder.write(&table).expect("written");
        let written = std::fs::read(sidecar_path(&table)).expect("read");
        let whole = SummarySet::from_sorted_spans(&spans);
        assert_eq!(whole.traces.len(), 11);
        // Trace by trace in reused scratch space, as span by span with a
        // fresh part per trace.
        assert_eq!(whole, SummarySet::from_spans(&spans));
        assert_eq!(written, encode_sidecar(&whole));
    }

    #[test]
    fn parts_carried_over_from_several_sidecars_keep_their_own_strings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let front = resource(&[("service.name", "front"), ("zone", "a")]);
        let back = resource(&[("service.name", "back"), ("zone", "b")]);
        // Two inputs whose string tables hold other strings at the same
        // indices: traces 0, 2, 4 of "front" in one, 1, 3, 5 of "back" (and
        // trace 5 also of "db") in the other.
        let input = |first: u128, g: &Arc<ScopeGroup>| -> Vec<Span> {
            (0..3u128)
                .flat_map(|k| {
                    let t = first + 2 * k;
                    [span(g, t, 1, 10), span(g, t, 2, 20)]
                })
                .collect()
        };
        let x = input(0, &front);
        let y: Vec<Span> = input(1, &back)
            .into_iter()
            .chain([span(&resource(&[("service.name", "db")]), 5, 3, 30)])
            .collect();
        let open = |name: &str, spans: &[Span]| {
            let table = dir.path().join(name);
            write_sidecar(&table, &SummarySet::from_sorted_spans(spans)).expect("written");
            SidecarParts::open(&table).expect("opened")
        };
        let mut parts = [open("x.sst", &x), open("y.sst", &y)];
        let mut builder = SidecarBuilder::default();
        for t in 0..6u128 {
            let input = (t % 2) as usize;
            let id = TraceId(t.to_be_bytes());
            let part = parts[input]
                .find(&id)
                .expect("reads")
                .expect("has the trace");
            builder.add_part(input, &parts[input], part);
        }
        let table = dir.path().join("out.sst");
        builder.write(&table).expect("written");
        let mut all: Vec<Span> = x.into_iter().chain(y).collect();
        crate::sort::sort_by_trace_id(&mut all);
        let rebuilt = SummarySet::from_sorted_spans(&all);
        let carried = read_sidecar(&table).expect("reads");
        type Named<'a> = Vec<(BTreeSet<&'a str>, BTreeSet<(&'a str, &'a str)>)>;
        fn named(set: &SummarySet) -> Named<'_> {
            set.traces
                .iter()
                .map(|t| {
                    let ops = t.ops.iter().map(|o| set.str(o.service)).collect();
                    let tags = t
                        .tags
                        .iter()
                        .map(|g| (set.str(g.key), set.str(g.value)))
                        .collect();
                    (ops, tags)
                })
                .collect()
        }
        assert_eq!(named(&carried), named(&rebuilt));
        let services: Vec<Vec<&str>> = named(&carried)
            .into_iter()
            .map(|(ops, _)| ops.into_iter().collect())
            .collect();
        let (f, b): (&[&str], &[&str]) = (&["front"], &["back"]);
        assert_eq!(services, [f, b, f, b, f, &["back", "db"]]);
    }

    /// An encoded `KeyValue`: `key` and an `AnyValue` of field `number`
    /// (1 string, 3 int) holding `value` (bytes, or a varint for an int).
    fn encoded_attribute(key: &str, number: u8, value: &[u8]) -> Vec<u8> {
        fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
            out.push(number << 3 | 2);
            let mut len = bytes.len();
            while len >= 0x80 {
                out.push((len as u8) | 0x80);
                len >>= 7;
            }
            out.push(len as u8);
            out.extend_from_slice(bytes);
        }
        let mut any = Vec::new();
        if number == 3 {
            any.push(3 << 3);
            any.extend_from_slice(value);
        } else {
            field(&mut any, number, value);
        }
        let mut kv = Vec::new();
        field(&mut kv, 1, key.as_bytes());
        field(&mut kv, 2, &any);
        kv
    }

    #[test]
    fn an_attribute_read_again_resolves_as_it_did_the_first_time() {
        let mut names = Interner::default();
        let read = |names: &mut Interner, kv: &[u8]| {
            names.attribute(kv).map(|(k, v)| {
                (
                    names.strings[k as usize].clone(),
                    names.strings[v as usize].clone(),
                )
            })
        };
        let method = encoded_attribute("http.method", 1, b"GET");
        // 200 as a varint: 0xc8 0x01.
        let status = encoded_attribute("http.status_code", 3, &[0xc8, 0x01]);
        let long = encoded_attribute("body", 1, &[b'x'; wire::MAX_VALUE_BYTES + 1]);
        let not_utf8 = encoded_attribute("name", 1, &[0xff, 0xfe]);
        let pair = |k: &str, v: &str| Some((k.to_owned(), v.to_owned()));
        for _ in 0..2 {
            assert_eq!(read(&mut names, &method), pair("http.method", "GET"));
            assert_eq!(read(&mut names, &status), pair("http.status_code", "200"));
            assert_eq!(read(&mut names, &long), None);
            assert_eq!(read(&mut names, &not_utf8), None);
        }
        assert_eq!(names.attributes.len(), 4);
        // Past the limit, attributes are still read right, each time.
        let mut i = 0u32;
        while names.attributes.len() < MAX_REMEMBERED_ATTRIBUTES {
            names.attribute(&encoded_attribute("n", 1, i.to_string().as_bytes()));
            i += 1;
        }
        let past = encoded_attribute("tenant", 1, b"acme");
        for _ in 0..2 {
            assert_eq!(read(&mut names, &past), pair("tenant", "acme"));
        }
        assert_eq!(names.attributes.len(), MAX_REMEMBERED_ATTRIBUTES);
        assert_eq!(read(&mut names, &method), pair("http.method", "GET"));
    }

    #[test]
    fn sidecar_round_trips_and_refuses_damage() {
        let g = group("svc");
        let spans: Vec<Span> = (0..50u64)
            .map(|i| span(&g, u128::from(i % 7), i, i))
            .collect();
        let set = SummarySet::from_spans(&spans);
        assert_eq!(set.traces.len(), 7);
        let bytes = encode_sidecar(&set);
        let path = Path::new("x.idx");
        assert_eq!(decode_sidecar(path, &bytes).expect("decodes"), set);
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode_sidecar(path, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(decode_sidecar(path, &flipped).is_err());
    }
}
