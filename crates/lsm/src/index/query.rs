//! What a search asks of the index ([`SearchQuery`], [`OpNeed`], checked
//! one part at a time as a [`ResolvedNeed`]), and the queries over
//! the summary sets of one snapshot: pure functions, each merging the parts
//! a trace has in several sets where it needs to.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use super::{
    service_name, HashMap, SummarySet, TagScope, TraceSummary, ValueKind, MAX_TAGS_PER_TRACE,
};
use crate::span::{Span, TraceId};

/// What a search looks for, as the newest-first walk
/// ([`Engine::candidates`](crate::Engine::candidates)) reads it: a window of
/// trace-part starts and what some span of the trace needs. Zeros mean
/// "any". The rest of a query (its TraceQL) is the caller's to evaluate on
/// the candidates' spans.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    /// Parts starting in `[start_min, start_max]` (Unix ns; `start_max` 0:
    /// no end) propose their traces; a trace starts at or before each of its
    /// parts.
    pub start_min: u64,
    pub start_max: u64,
    /// Only trace parts that end at or after this (Unix ns; 0: any). With
    /// `start_min` 0, the walk proposes every trace with a part that
    /// overlaps `[end_min, start_max]`: a metrics query's window, whose
    /// spans may belong to traces that began before it.
    pub end_min: u64,
    /// Each is met by some one span of the trace (see [`OpNeed`]).
    pub needs: Vec<OpNeed>,
    /// Only traces whose ID lies in `[lo, hi]` (`None`: any). A caller that
    /// wants a few traces of a window, not the newest, reads only the files
    /// of each sorted run that hold the range.
    pub trace_ids: Option<(TraceId, TraceId)>,
}

/// Some span of the trace has this service, name and kind (`None`: any);
/// with `error`, the trace has an error span (the summaries count error spans
/// per part, not per operation). Necessary conditions a query derives from
/// its TraceQL: a trace that fails one cannot match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpNeed {
    pub service: Option<String>,
    pub name: Option<String>,
    pub kind: Option<u8>,
    pub error: bool,
    /// Each is an attribute of the trace (of some span, not necessarily the
    /// one with the operation: the summaries keep attributes per part).
    pub tags: Vec<TagNeed>,
}

/// An attribute with this value (as the index writes it: numbers and bools
/// as text) and type, in this scope. A part rules it out only when its tags
/// are complete (under [`MAX_TAGS_PER_TRACE`]) and hold no value of the key
/// that the index did not keep ([`ValueKind::Unindexed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagNeed {
    /// `None`: either scope.
    pub scope: Option<TagScope>,
    pub key: String,
    pub value: String,
    pub kind: ValueKind,
}

impl OpNeed {
    /// Whether the need names a service and nothing else.
    pub fn names_a_service_alone(&self) -> bool {
        self.service.is_some()
            && self.name.is_none()
            && self.kind.is_none()
            && !self.error
            && self.tags.is_empty()
    }
}

/// One need with its strings looked up in one string table (a summary
/// set's, or a sidecar block's), to check that table's parts one at a time:
/// the span a need describes lies in one part, so a part passes when it
/// alone may meet the whole need. The walk, the tag-value reads of buffers
/// and of blocks all check a need through this.
#[derive(Debug, Clone)]
pub struct ResolvedNeed {
    /// The need names a service, a span name or a kind.
    names_op: bool,
    /// The places of the service and the name it names (`None`: not named).
    service: Option<u32>,
    name: Option<u32>,
    /// A service or name it names is not in the table: no part meets it.
    unknown: bool,
    kind: Option<u8>,
    error: bool,
    /// It names a service and nothing else.
    service_alone: bool,
    tags: Vec<ResolvedTag>,
}

/// An attribute a need names, with its key and value looked up.
#[derive(Debug, Clone)]
pub struct ResolvedTag {
    scope: Option<TagScope>,
    kind: ValueKind,
    key: Option<u32>,
    value: Option<u32>,
}

impl ResolvedNeed {
    /// `need` in a table whose strings `lookup` finds.
    pub fn new(need: &OpNeed, lookup: impl Fn(&str) -> Option<u32>) -> ResolvedNeed {
        let mut unknown = false;
        let mut look = |s: &Option<String>| {
            let found = s.as_deref().and_then(&lookup);
            unknown |= s.is_some() && found.is_none();
            found
        };
        let (service, name) = (look(&need.service), look(&need.name));
        ResolvedNeed {
            names_op: need.service.is_some() || need.name.is_some() || need.kind.is_some(),
            service,
            name,
            unknown,
            kind: need.kind,
            error: need.error,
            service_alone: need.names_a_service_alone(),
            tags: need
                .tags
                .iter()
                .map(|t| ResolvedTag {
                    scope: t.scope,
                    kind: t.kind,
                    key: lookup(&t.key),
                    value: lookup(&t.value),
                })
                .collect(),
        }
    }

    /// `need` in `set`'s strings.
    pub fn in_set(set: &SummarySet, need: &OpNeed) -> ResolvedNeed {
        ResolvedNeed::new(need, |s| set.id(s))
    }

    /// Whether the need names an operation (a service, name or kind).
    pub fn names_op(&self) -> bool {
        self.names_op
    }

    /// Whether no part of the table can meet the need: it names a service
    /// or a span name the table does not hold.
    pub fn met_nowhere(&self) -> bool {
        self.names_op && self.unknown
    }

    /// Whether the need asks for an error span.
    pub fn error(&self) -> bool {
        self.error
    }

    pub fn tags(&self) -> &[ResolvedTag] {
        &self.tags
    }

    /// The service (its place) the need names, when it names nothing else.
    pub fn service_alone(&self) -> Option<u32> {
        match (self.service_alone, self.service) {
            (true, Some(service)) => Some(service),
            _ => None,
        }
    }

    /// Whether an operation (service and name places, kind) is the one the
    /// need names; any is when it names none. Its error is not checked.
    pub fn op_meets(&self, service: u32, name: u32, kind: u8) -> bool {
        !self.names_op
            || (!self.unknown
                && self.service.is_none_or(|s| s == service)
                && self.name.is_none_or(|n| n == name)
                && self.kind.is_none_or(|k| k == kind))
    }

    /// Whether `part` may hold a span meeting the need: one of its
    /// operations is the need's and, if the need asks for an error, has
    /// one; and it may hold each of the need's attributes.
    pub fn passes(&self, part: &TraceSummary) -> bool {
        self.part_may_meet(part, true)
    }

    /// As [`passes`](Self::passes), but the error may be on any span of the
    /// part: the looser rule tag-value suggestions use (the sidecar's
    /// blocks are read the same way).
    pub fn passes_any_error(&self, part: &TraceSummary) -> bool {
        self.part_may_meet(part, false)
    }

    fn part_may_meet(&self, part: &TraceSummary, error_on_op: bool) -> bool {
        if self.error && part.error_count == 0 {
            return false;
        }
        if !self.tags.iter().all(|t| t.may_be_in(part)) {
            return false;
        }
        !self.names_op
            || part.ops.iter().any(|o| {
                self.op_meets(o.service, o.name, o.kind) && (!error_on_op || !self.error || o.error)
            })
    }
}

impl ResolvedTag {
    /// Whether a part's attribute (scope, key, value, type) may be this one:
    /// a value the index did not keep may be any.
    pub fn held_by(&self, scope: TagScope, key: u32, value: u32, kind: ValueKind) -> bool {
        self.key == Some(key)
            && self.scope.is_none_or(|s| s == scope)
            && (kind == ValueKind::Unindexed || (kind == self.kind && self.value == Some(value)))
    }

    /// Whether `part` may hold this attribute: one of its attributes may be
    /// it, or its attributes were cut.
    fn may_be_in(&self, part: &TraceSummary) -> bool {
        part.tags.len() >= MAX_TAGS_PER_TRACE
            || part
                .tags
                .iter()
                .any(|g| self.held_by(g.scope, g.key, g.value, g.kind))
    }
}

/// Every service name, sorted.
pub fn services(sets: &[Arc<SummarySet>]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for set in sets {
        let ids: BTreeSet<u32> = set.operations().iter().map(|o| o.service).collect();
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
            .operations()
            .iter()
            .filter(|o| o.service == s && kind.is_none_or(|k| o.kind == k))
            .map(|o| (o.name, o.kind))
            .collect();
        out.extend(ids.into_iter().map(|(n, k)| (set.str(n).to_owned(), k)));
    }
    out.into_iter().collect()
}

/// Calls between services, (parent, child) -> count, over parts overlapping
/// `[start, end]` (0 = unbounded); see [`Dependencies`].
pub fn dependencies<E>(
    sets: &[Arc<SummarySet>],
    start: u64,
    end: u64,
    read_trace: impl FnMut(&TraceId) -> Result<Vec<Span>, E>,
) -> Result<BTreeMap<(String, String), u64>, E> {
    let mut calls = Dependencies::default();
    for set in sets {
        calls.add(set, start, end);
    }
    calls.finish(read_trace)
}

/// Calls between services counted one summary set at a time: [`add`] each
/// set, then [`finish`]. A call is a span whose parent span is of another
/// service. Calls within a part are counted in its summary. A span whose
/// parent is in another part of the trace (another file or buffer) is kept
/// as (parent span ID, its service) until [`finish`] reads the trace to name
/// the parent's service: once per such trace, and only for those (they are
/// few once compaction has merged the parts of a trace).
///
/// [`add`]: Dependencies::add
/// [`finish`]: Dependencies::finish
#[derive(Debug, Default)]
pub struct Dependencies {
    calls: BTreeMap<(String, String), u64>,
    /// By trace: (parent span ID, service) of spans whose parent is in another part.
    orphans: BTreeMap<TraceId, Vec<([u8; 8], String)>>,
}

impl Dependencies {
    /// Counts the calls of `set`'s parts overlapping `[start, end]` (0 = unbounded).
    pub fn add(&mut self, set: &SummarySet, start: u64, end: u64) {
        if !set.overlaps(start, end) {
            return;
        }
        let mut calls: HashMap<(u32, u32), u64> = HashMap::default();
        for t in &set.traces {
            if (start != 0 && t.end_unix_nano < start) || (end != 0 && t.start_unix_nano > end) {
                continue;
            }
            for e in &t.edges {
                *calls.entry((e.parent, e.child)).or_default() += u64::from(e.calls);
            }
            if !t.orphans.is_empty() {
                let orphans = t
                    .orphans
                    .iter()
                    .map(|(id, service)| (*id, set.str(*service).to_owned()));
                self.orphans.entry(t.trace_id).or_default().extend(orphans);
            }
        }
        for ((parent, child), n) in calls {
            let key = (set.str(parent).to_owned(), set.str(child).to_owned());
            *self.calls.entry(key).or_default() += n;
        }
    }

    /// The counts, with the calls whose parent is in another part named from
    /// the traces `read_trace` returns.
    pub fn finish<E>(
        mut self,
        mut read_trace: impl FnMut(&TraceId) -> Result<Vec<Span>, E>,
    ) -> Result<BTreeMap<(String, String), u64>, E> {
        let mut services: HashMap<Vec<u8>, String> = HashMap::default();
        for (trace_id, orphans) in std::mem::take(&mut self.orphans) {
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
            for (parent_id, child) in &orphans {
                match service_of.get(parent_id) {
                    Some(&parent) if parent != child => {
                        *self
                            .calls
                            .entry((parent.to_owned(), child.clone()))
                            .or_default() += 1;
                    }
                    _ => {}
                }
            }
        }
        Ok(self.calls)
    }
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

/// Distinct values of `key` (in `scope`, or either), with their types, over
/// parts overlapping `[start, end]` that meet `needs` (each part on its own:
/// the suggestions of a query being typed, narrowed by what it already says).
pub fn tag_values(
    sets: &[Arc<SummarySet>],
    scope: Option<TagScope>,
    key: &str,
    start: u64,
    end: u64,
    needs: &[OpNeed],
) -> BTreeSet<(String, ValueKind)> {
    let mut out = BTreeSet::new();
    for set in sets {
        let Some(k) = set.id(key) else { continue };
        if !set.overlaps(start, end) {
            continue;
        }
        let needs: Vec<ResolvedNeed> = needs.iter().map(|n| ResolvedNeed::in_set(set, n)).collect();
        let ids: BTreeSet<(u32, ValueKind)> = set
            .traces
            .iter()
            .filter(|t| {
                (start == 0 || t.end_unix_nano >= start)
                    && (end == 0 || t.start_unix_nano <= end)
                    && needs.iter().all(|n| n.passes_any_error(t))
            })
            .flat_map(|t| t.tags.iter())
            .filter(|g| {
                g.key == k && g.kind != ValueKind::Unindexed && scope.is_none_or(|s| g.scope == s)
            })
            .map(|g| (g.value, g.kind))
            .collect();
        out.extend(
            ids.into_iter()
                .map(|(v, kind)| (set.str(v).to_owned(), kind)),
        );
    }
    out
}
