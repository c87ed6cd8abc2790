//! What a search asks of the index ([`SearchQuery`], [`OpNeed`], checked
//! one part at a time by [`PartFilter`] in the walk), and the queries over
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

/// A query's strings resolved in one set's string table, once per query.
struct Resolved {
    /// Per need, (service, name) resolved: `Some(None)` where the need names
    /// no service or name; `None` when the set lacks a string it names.
    needs: Vec<Option<(Option<u32>, Option<u32>)>>,
    /// Per need, per tag need: (key, value) resolved; `None` for the key when
    /// the set lacks it, for the value likewise.
    tag_needs: Vec<Vec<(Option<u32>, Option<u32>)>>,
}

fn resolve(set: &SummarySet, q: &SearchQuery) -> Resolved {
    Resolved {
        needs: q
            .needs
            .iter()
            .map(|n| {
                let id = |s: &Option<String>| match s {
                    None => Some(None),
                    Some(s) => set.id(s).map(Some),
                };
                Some((id(&n.service)?, id(&n.name)?))
            })
            .collect(),
        tag_needs: q
            .needs
            .iter()
            .map(|n| {
                n.tags
                    .iter()
                    .map(|t| (set.id(&t.key), set.id(&t.value)))
                    .collect()
            })
            .collect(),
    }
}

/// Whether a part may hold the attribute `t` (whose key and value resolve
/// to `ids` in the part's set).
fn may_have(part: &TraceSummary, t: &TagNeed, ids: (Option<u32>, Option<u32>)) -> bool {
    if part.tags.len() >= MAX_TAGS_PER_TRACE {
        return true;
    }
    let (Some(key), value) = ids else {
        return false;
    };
    part.tags.iter().any(|g| {
        g.key == key
            && t.scope.is_none_or(|s| g.scope == s)
            && (g.kind == ValueKind::Unindexed || (g.kind == t.kind && Some(g.value) == value))
    })
}

/// Whether some part meets `need` (index `i` of the query's needs).
fn meets(
    sets: &[Arc<SummarySet>],
    resolved: &[Resolved],
    parts: &[(usize, usize)],
    need: &OpNeed,
    i: usize,
) -> bool {
    if need.error
        && !parts
            .iter()
            .any(|&(si, ti)| sets[si].traces[ti].error_count > 0)
    {
        return false;
    }
    for (j, t) in need.tags.iter().enumerate() {
        if !parts
            .iter()
            .any(|&(si, ti)| may_have(&sets[si].traces[ti], t, resolved[si].tag_needs[i][j]))
        {
            return false;
        }
    }
    if need.service.is_none() && need.name.is_none() && need.kind.is_none() {
        return true;
    }
    parts.iter().any(|&(si, ti)| {
        let Some((service, name)) = resolved[si].needs[i] else {
            return false;
        };
        sets[si].traces[ti].ops.iter().any(|o| {
            service.is_none_or(|s| o.service == s)
                && name.is_none_or(|n| o.name == n)
                && need.kind.is_none_or(|k| o.kind == k)
        })
    })
}

/// One need resolved in one set's string table, to check the set's parts
/// one at a time: a part passes when it alone may meet the whole need (the
/// span a need describes lies in one part).
#[derive(Debug, Clone)]
pub struct PartFilter {
    /// (service, name) resolved as in [`Resolved::needs`].
    ops: Option<(Option<u32>, Option<u32>)>,
    tags: Vec<(Option<u32>, Option<u32>)>,
}

impl PartFilter {
    pub fn new(set: &SummarySet, need: &OpNeed) -> PartFilter {
        PartFilter::with(|s| set.id(s), need)
    }

    /// The filter for parts whose strings are found by `lookup`.
    pub fn with(lookup: impl Fn(&str) -> Option<u32>, need: &OpNeed) -> PartFilter {
        let id = |s: &Option<String>| match s {
            None => Some(None),
            Some(s) => lookup(s).map(Some),
        };
        PartFilter {
            ops: id(&need.service).and_then(|s| Some((s, id(&need.name)?))),
            tags: need
                .tags
                .iter()
                .map(|t| (lookup(&t.key), lookup(&t.value)))
                .collect(),
        }
    }

    /// Whether `part` may hold a span meeting `need` (the need this filter
    /// was made for).
    pub fn passes(&self, need: &OpNeed, part: &TraceSummary) -> bool {
        if need.error && part.error_count == 0 {
            return false;
        }
        // The need is one span's: with an error, of an operation with one.
        if !need
            .tags
            .iter()
            .zip(&self.tags)
            .all(|(t, &ids)| may_have(part, t, ids))
        {
            return false;
        }
        if need.service.is_none() && need.name.is_none() && need.kind.is_none() {
            return true;
        }
        let Some((service, name)) = self.ops else {
            return false;
        };
        part.ops.iter().any(|o| {
            service.is_none_or(|s| o.service == s)
                && name.is_none_or(|n| o.name == n)
                && need.kind.is_none_or(|k| o.kind == k)
                && (!need.error || o.error)
        })
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
    let q = SearchQuery {
        needs: needs.to_vec(),
        ..SearchQuery::default()
    };
    for (si, set) in sets.iter().enumerate() {
        let Some(k) = set.id(key) else { continue };
        if !set.overlaps(start, end) {
            continue;
        }
        let resolved = [resolve(set, &q)];
        let one = std::slice::from_ref(&sets[si]);
        let ids: BTreeSet<(u32, ValueKind)> = set
            .traces
            .iter()
            .enumerate()
            .filter(|(ti, t)| {
                (start == 0 || t.end_unix_nano >= start)
                    && (end == 0 || t.start_unix_nano <= end)
                    && needs
                        .iter()
                        .enumerate()
                        .all(|(i, need)| meets(one, &resolved, &[(0, *ti)], need, i))
            })
            .flat_map(|(_, t)| t.tags.iter())
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
