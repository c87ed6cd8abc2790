//! The summary model: a [`SummarySet`] per source, one [`TraceSummary`] per
//! trace part in it, and the string table its summaries point into.

use std::{borrow::Borrow, sync::OnceLock};

use super::{HashMap, HashSet, SummaryBuilder};
use crate::span::{Span, TraceId};

/// At most this many distinct (scope, key, value) tags are kept per trace part.
pub const MAX_TAGS_PER_TRACE: usize = 256;

/// Where an indexed attribute came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TagScope {
    Resource = 0,
    Span = 1,
}

/// One operation of a trace part: (service, span name, OTLP span kind),
/// and whether one of its spans has an error status. A part has one `Op`
/// per (service, name, kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Op {
    pub service: u32,
    pub name: u32,
    pub kind: u8,
    pub error: bool,
}

/// The OTLP type of an indexed attribute value (its text is in the
/// string table): TraceQL compares values by type, and autocomplete lists
/// each value with its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ValueKind {
    #[default]
    Str = 0,
    Bool = 1,
    Int = 2,
    Float = 3,
    /// A value the index does not keep (an array, a key-value list, bytes,
    /// a string longer than 256 bytes or not UTF-8): its text is empty.
    /// Marks that the attribute is there, so that the index never rules out
    /// a trace for lacking a value it did not keep.
    Unindexed = 4,
}

impl ValueKind {
    pub fn from_code(code: u8) -> Option<ValueKind> {
        Some(match code {
            0 => ValueKind::Str,
            1 => ValueKind::Bool,
            2 => ValueKind::Int,
            3 => ValueKind::Float,
            4 => ValueKind::Unindexed,
            _ => return None,
        })
    }

    /// TraceQL's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Str => "string",
            ValueKind::Bool => "bool",
            ValueKind::Int => "int",
            ValueKind::Float => "float",
            ValueKind::Unindexed => "unindexed",
        }
    }
}

/// One indexed attribute: (scope, key, value), strings by index, and the
/// value's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag {
    pub scope: TagScope,
    pub key: u32,
    pub value: u32,
    pub kind: ValueKind,
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
    /// Distinct operations of all parts, sorted (services first): made on
    /// the first call of [`SummarySet::operations`], as only the service and
    /// operation lists ask for them, and a search decoding sidecars should
    /// not pay for them.
    operations: OnceLock<Vec<Op>>,
    /// Indices of `traces`, newest start first: made on the first call of
    /// [`SummarySet::by_start`].
    by_start: OnceLock<Vec<u32>>,
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
        SummarySet {
            strings,
            traces,
            min_time_unix_nano: min,
            max_time_unix_nano: max,
            lookup,
            operations: OnceLock::new(),
            by_start: OnceLock::new(),
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
            + self
                .operations
                .get()
                .map_or(0, |o| o.capacity() * size_of::<Op>())
            + self.by_start.get().map_or(0, |o| o.capacity() * 4)
    }

    /// Indices of the parts in answer order: newest start first, then by
    /// trace ID.
    pub fn by_start(&self) -> &[u32] {
        self.by_start.get_or_init(|| {
            let mut order: Vec<u32> = (0..self.traces.len() as u32).collect();
            // `traces` is in trace-ID order and the sort is stable.
            order.sort_by(|&a, &b| {
                let (a, b) = (&self.traces[a as usize], &self.traces[b as usize]);
                b.start_unix_nano.cmp(&a.start_unix_nano)
            });
            order
        })
    }

    /// Distinct operations of all parts, sorted (services first).
    pub(super) fn operations(&self) -> &[Op] {
        self.operations.get_or_init(|| {
            // A few hundred distinct operations among millions of (part,
            // operation) pairs: hashing each pair costs less than sorting
            // them all.
            let distinct: HashSet<Op> = self
                .traces
                .iter()
                .flat_map(|t| t.ops.iter().copied())
                .collect();
            let mut operations: Vec<Op> = distinct.into_iter().collect();
            operations.sort_unstable();
            operations
        })
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
