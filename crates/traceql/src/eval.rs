//! Evaluation of a query over one decoded [`Trace`].
//!
//! A spanset is a set of span indices of the trace. The first stage of the
//! pipeline starts from every span; a filter `{ e }` keeps the spans for
//! which `e` is true, evaluated on that one span; the spanset operators
//! combine sides over the trace's parent links. Each later stage maps the
//! list of spansets to another, and the trace matches when the list the last
//! stage makes is not empty.
//!
//! Values follow TraceQL's rules:
//! - an attribute a span lacks is `nil`: it equals `nil`, differs from
//!   `nil`, and every other comparison with it is false (`!=` included);
//! - values of different types compare false, but int, float and duration
//!   compare as numbers;
//! - an attribute with several values (an array, or one per event or link
//!   of the span; an unscoped `.name` on the span and on its resource)
//!   satisfies a comparison when one of its values does;
//! - `=~` and `!~` match the whole string (the pattern is anchored), in time
//!   linear in the string (the `regex` crate).

use std::{borrow::Cow, collections::HashMap};

use regex::Regex;

use ops::{aggregate, arith, compare};
pub use value::FieldValue;
use visit::visit_field;
pub use visit::visit_query;

mod ops;
mod value;
mod visit;

use crate::{
    ast::{
        Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, Kind, Pipeline, Query, Relation,
        ScalarExpr, Scope, SpansetExpr, SpansetOp, Stage, Static, Status, Structure, UnaryOp,
    },
    trace::{find, hex, Attributes, SpanData, Trace, Value},
};

/// Most bytes a compiled regular expression may take.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A regular expression of the query, anchored, that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("regular expression {pattern:?}: {source}")]
pub struct RegexError {
    pub pattern: String,
    #[source]
    pub source: regex::Error,
}

/// A query ready to run: its regular expressions compiled once.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub query: Query,
    regexes: HashMap<String, Regex>,
    /// Whether `!= nil` on an attribute Tempo keeps in a column of one type
    /// holds only for a value of that type (TraceQL's meaning, as Tempo
    /// answers it), or for any value (a Jaeger query's `exists`).
    typed_presence: bool,
}

/// One spanset of a matching trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanset {
    /// Indices into [`Trace::spans`], ascending (so in start order).
    pub spans: Vec<usize>,
    /// The `by()` fields that made this spanset, as (field, value) text.
    pub by: Vec<(String, String)>,
}

impl Compiled {
    pub fn new(query: Query) -> Result<Compiled, RegexError> {
        let mut patterns = Vec::new();
        visit_query(&query, &mut |e| {
            if let FieldExpr::Binary {
                op: BinaryOp::Cmp(CmpOp::Match | CmpOp::NotMatch),
                rhs,
                ..
            } = e
            {
                if let FieldExpr::Static(Static::Str(p)) = rhs.as_ref() {
                    patterns.push(p.clone());
                }
            }
        });
        let mut regexes = HashMap::new();
        for pattern in patterns {
            let re = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
                .size_limit(REGEX_SIZE_LIMIT)
                .nest_limit(64)
                .build()
                .map_err(|source| RegexError {
                    pattern: pattern.clone(),
                    source,
                })?;
            regexes.insert(pattern, re);
        }
        Ok(Compiled {
            query,
            regexes,
            typed_presence: true,
        })
    }

    /// The query the nodes of a query tier find candidates with
    /// ([`crate::analysis::relaxed`]), as TraceQL text reads it: where this
    /// query's `!= nil` holds for a value of any type
    /// ([`Compiled::with_presence_of_any_type`]), that on a typed column is
    /// made true, since the text's would hold for the column's type only.
    pub fn relaxed(&self) -> Query {
        crate::analysis::relaxed_with(&self.query, !self.typed_presence)
    }

    /// Whether the query's TraceQL text means what it does: not when its
    /// `!= nil` holds for a value of any type and it has one on an
    /// attribute Tempo keeps in a typed column, which the text would find
    /// for the column's type only.
    pub fn text_means_it(&self) -> bool {
        let mut typed = false;
        visit_query(&self.query, &mut |e| {
            typed |= crate::analysis::typed_presence(e);
        });
        self.typed_presence || !typed
    }

    /// This query with `!= nil` holding for a value of any type on every
    /// attribute, as a Jaeger query's `exists` means it, instead of only
    /// for a value of its column's type on the attributes Tempo keeps in a
    /// typed column (TraceQL's meaning; [`crate::analysis::column_type`]).
    pub fn with_presence_of_any_type(mut self) -> Compiled {
        self.typed_presence = false;
        self
    }

    /// The spansets of `trace` the query answers; empty when it does not match.
    pub fn eval(&self, trace: &Trace) -> Vec<Spanset> {
        if trace.spans.is_empty() {
            return Vec::new();
        }
        let all = Spanset {
            spans: (0..trace.spans.len()).collect(),
            by: Vec::new(),
        };
        Eval {
            trace,
            regexes: &self.regexes,
            typed_presence: self.typed_presence,
        }
        .pipeline(&self.query.pipeline, vec![all])
    }

    /// True when no span can ever match: every stage is a filter, or two
    /// filters joined by an operator, whose condition names no field and is
    /// false (`{ false }`, `{ 1 = 2 }`). Tempo answers a metrics query that
    /// is a no-op with no series at all, not with series of zeros.
    pub fn is_noop(&self) -> bool {
        let empty = Trace {
            trace_id: [0; 16],
            spans: Vec::new(),
            parent: Vec::new(),
            child_count: Vec::new(),
            root: None,
            in_tree: Vec::new(),
            nested: Vec::new(),
            start_unix_nano: 0,
            end_unix_nano: 0,
        };
        let eval = Eval {
            trace: &empty,
            regexes: &self.regexes,
            typed_presence: self.typed_presence,
        };
        let false_filter = |s: &SpansetExpr| {
            let SpansetExpr::Filter(e) = s else {
                return false;
            };
            let mut names_field = false;
            visit_field(e, &mut |x| {
                names_field |= matches!(x, FieldExpr::Attribute(_));
            });
            !names_field && eval.field(e, 0) == Val::Bool(false)
        };
        !self.query.pipeline.stages.is_empty()
            && self.query.pipeline.stages.iter().all(|stage| match stage {
                Stage::Spansets(SpansetExpr::Binary { lhs, rhs, .. }) => {
                    false_filter(lhs) && false_filter(rhs)
                }
                Stage::Spansets(s) => false_filter(s),
                _ => false,
            })
    }

    /// The fields the answer shows for each matched span: those the query's
    /// conditions and `select()` name, each once, in the order they come.
    pub fn shown_fields(&self) -> Vec<Attribute> {
        let mut out: Vec<Attribute> = Vec::new();
        visit_query(&self.query, &mut |e| {
            if let FieldExpr::Attribute(a) = e {
                if !out.contains(a) {
                    out.push(a.clone());
                }
            }
        });
        out
    }

    /// The value of `field` on span `i` of `trace`, as text for the answer,
    /// and its type name; `None` when the span lacks it.
    pub fn field_text(
        &self,
        trace: &Trace,
        i: usize,
        field: &Attribute,
    ) -> Option<(String, &'static str)> {
        let v = Eval {
            trace,
            regexes: &self.regexes,
            typed_presence: self.typed_presence,
        }
        .attribute(field, i);
        shown(&v)
    }
}

/// A value as the answer shows it: text and type.
fn shown(v: &Val<'_>) -> Option<(String, &'static str)> {
    Some(match v {
        Val::Nil => return None,
        Val::Bool(b) => (b.to_string(), "bool"),
        Val::Int(i) => (i.to_string(), "int"),
        Val::Float(f) => (f.to_string(), "float"),
        Val::Str(s) => (s.to_string(), "string"),
        Val::Dur(d) => (format!("{d}ns"), "duration"),
        Val::Status(s) => (s.name().to_owned(), "keyword"),
        Val::Kind(k) => (k.name().to_owned(), "keyword"),
        Val::Many(vs) => {
            let parts: Vec<String> = vs.iter().filter_map(|v| shown(v).map(|s| s.0)).collect();
            (format!("[{}]", parts.join(",")), "array")
        }
    })
}

/// A value during evaluation.
#[derive(Debug, Clone, PartialEq)]
enum Val<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    /// Nanoseconds.
    Dur(i64),
    Status(Status),
    Kind(Kind),
    /// Several values, any of which may satisfy a comparison.
    Many(Vec<Val<'a>>),
}

impl Val<'_> {
    fn truthy(&self) -> bool {
        match self {
            Val::Bool(b) => *b,
            Val::Many(vs) => vs.iter().any(Val::truthy),
            _ => false,
        }
    }

    /// The value as a number, for comparisons and arithmetic across int,
    /// float and duration.
    fn number(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) => Some(*f),
            Val::Dur(d) => Some(*d as f64),
            _ => None,
        }
    }
}

fn of_static(s: &Static) -> Val<'_> {
    match s {
        Static::Nil => Val::Nil,
        Static::Bool(b) => Val::Bool(*b),
        Static::Int(i) => Val::Int(*i),
        Static::Float(f) => Val::Float(*f),
        Static::Str(s) => Val::Str(Cow::Borrowed(s)),
        Static::Duration(d) => Val::Dur(*d),
        Static::Status(s) => Val::Status(*s),
        Static::Kind(k) => Val::Kind(*k),
    }
}

fn of_value(v: &Value) -> Val<'_> {
    match v {
        Value::Str(s) => Val::Str(Cow::Borrowed(s)),
        Value::Int(i) => Val::Int(*i),
        Value::Float(f) => Val::Float(*f),
        Value::Bool(b) => Val::Bool(*b),
        Value::Array(vs) => Val::Many(vs.iter().map(of_value).collect()),
    }
}

/// The values of `key` in several attribute lists: nil when none has it.
fn gather<'a>(lists: impl Iterator<Item = &'a Attributes>, key: &str) -> Val<'a> {
    let mut found: Vec<Val<'a>> = lists.filter_map(|l| find(l, key)).map(of_value).collect();
    match found.len() {
        0 => Val::Nil,
        1 => found.pop().unwrap_or(Val::Nil),
        _ => Val::Many(found),
    }
}

fn many<'a>(vals: Vec<Val<'a>>) -> Val<'a> {
    if vals.is_empty() {
        Val::Nil
    } else {
        Val::Many(vals)
    }
}

fn nanos(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

struct Eval<'t> {
    trace: &'t Trace,
    regexes: &'t HashMap<String, Regex>,
    /// [`Compiled::typed_presence`].
    typed_presence: bool,
}

/// Whether `span` holds, for attribute `name` of `scope`, a value Tempo
/// keeps in its typed column for it ([`crate::analysis::column_type`]): a
/// value of the column's type, or an array of them. Any other value Tempo
/// keeps in its generic attributes, where the column's name does not find
/// it. `None` for an attribute without such a column, or when `typed` (the
/// query's typed presence) is off.
pub(crate) fn in_typed_column(
    span: &SpanData,
    scope: Scope,
    name: &str,
    typed: bool,
) -> Option<bool> {
    let column = crate::analysis::column_type(scope, name).filter(|_| typed)?;
    let list = match scope {
        Scope::Resource => &span.origin.resource,
        _ => &span.attributes,
    };
    Some(find(list, name).is_some_and(|v| column.holds(v)))
}

impl<'t> Eval<'t> {
    fn pipeline(&self, p: &Pipeline, mut sets: Vec<Spanset>) -> Vec<Spanset> {
        for stage in &p.stages {
            if sets.is_empty() {
                break;
            }
            sets = match stage {
                Stage::Spansets(expr) => sets
                    .into_iter()
                    .filter_map(|ss| {
                        let spans = self.spansets(expr, &ss.spans);
                        (!spans.is_empty()).then_some(Spanset { spans, by: ss.by })
                    })
                    .collect(),
                Stage::ScalarFilter(sf) => sets
                    .into_iter()
                    .filter(|ss| {
                        let l = self.scalar(&sf.lhs, &ss.spans);
                        let r = self.scalar(&sf.rhs, &ss.spans);
                        compare(&l, sf.op, &r, None, false)
                    })
                    .collect(),
                Stage::By(field) => self.by(field, sets),
                Stage::Select(_) => sets,
                Stage::Coalesce => {
                    let mut spans: Vec<usize> = sets.into_iter().flat_map(|s| s.spans).collect();
                    spans.sort_unstable();
                    spans.dedup();
                    vec![Spanset {
                        spans,
                        by: Vec::new(),
                    }]
                }
            };
        }
        sets
    }

    /// Splits each spanset by the value of `field` on its spans.
    fn by(&self, field: &FieldExpr, sets: Vec<Spanset>) -> Vec<Spanset> {
        let label = match field {
            FieldExpr::Attribute(a) => attribute_label(a),
            _ => "by".to_owned(),
        };
        let mut out = Vec::new();
        for ss in sets {
            let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
            for &i in &ss.spans {
                // Spans without the field make a group of their own.
                let text = shown(&self.field(field, i)).map_or_else(|| "nil".to_owned(), |s| s.0);
                match groups.iter_mut().find(|(t, _)| *t == text) {
                    Some((_, spans)) => spans.push(i),
                    None => groups.push((text, vec![i])),
                }
            }
            for (text, spans) in groups {
                let mut by = ss.by.clone();
                by.push((label.clone(), text));
                out.push(Spanset { spans, by });
            }
        }
        out
    }

    /// The spans of `input` the spanset expression selects, ascending.
    fn spansets(&self, expr: &SpansetExpr, input: &[usize]) -> Vec<usize> {
        match expr {
            SpansetExpr::Filter(e) => input
                .iter()
                .copied()
                .filter(|&i| self.field(e, i).truthy())
                .collect(),
            SpansetExpr::Pipeline(p) => {
                let start = Spanset {
                    spans: input.to_vec(),
                    by: Vec::new(),
                };
                let mut spans: Vec<usize> = self
                    .pipeline(p, vec![start])
                    .into_iter()
                    .flat_map(|s| s.spans)
                    .collect();
                spans.sort_unstable();
                spans.dedup();
                spans
            }
            SpansetExpr::Binary { op, lhs, rhs } => {
                let l = self.spansets(lhs, input);
                let r = self.spansets(rhs, input);
                match op {
                    SpansetOp::And if l.is_empty() || r.is_empty() => Vec::new(),
                    SpansetOp::And | SpansetOp::Or => union(&l, &r),
                    SpansetOp::Structural(rel, structure) => {
                        self.structural(*rel, *structure, &l, &r)
                    }
                }
            }
        }
    }

    fn structural(
        &self,
        rel: Relation,
        structure: Structure,
        l: &[usize],
        r: &[usize],
    ) -> Vec<usize> {
        // Relations hold between spans in the tree only.
        let in_tree = &self.trace.in_tree;
        let n = self.trace.spans.len();
        let mut in_l = vec![false; n];
        for &i in l {
            in_l[i] = in_tree[i];
        }
        let mut related = self.related(rel, &in_l);
        for (i, r) in related.iter_mut().enumerate() {
            *r &= in_tree[i];
        }
        match structure {
            Structure::Plain => r.iter().copied().filter(|&i| related[i]).collect(),
            // `!>` answers only spans in the tree: a span outside it has no
            // parent to be compared.
            Structure::Not => r
                .iter()
                .copied()
                .filter(|&i| !related[i] && (rel != Relation::Child || in_tree[i]))
                .collect(),
            Structure::Union => {
                let mut in_r = vec![false; n];
                for &i in r {
                    in_r[i] = in_tree[i];
                }
                let mut back = self.related(reverse(rel), &in_r);
                for (i, b) in back.iter_mut().enumerate() {
                    *b &= in_tree[i];
                }
                let right: Vec<usize> = r.iter().copied().filter(|&i| related[i]).collect();
                let left: Vec<usize> = l.iter().copied().filter(|&i| back[i]).collect();
                if right.is_empty() {
                    Vec::new()
                } else {
                    union(&left, &right)
                }
            }
        }
    }

    /// For every span, whether it stands in `rel` to some span marked in
    /// `from` (`Child`: its parent is marked; `Parent`: it is the parent of
    /// a marked span; and so on).
    fn related(&self, rel: Relation, from: &[bool]) -> Vec<bool> {
        let parent = &self.trace.parent;
        let n = parent.len();
        let mut out = vec![false; n];
        match rel {
            Relation::Child => {
                for i in 0..n {
                    out[i] = parent[i].is_some_and(|p| from[p]);
                }
            }
            Relation::Parent => {
                for i in 0..n {
                    if from[i] {
                        if let Some(p) = parent[i] {
                            out[p] = true;
                        }
                    }
                }
            }
            Relation::Descendant => {
                // Marked spans' descendants: walk each span's ancestors, at
                // most n steps (parent links stored by clients may loop).
                for i in 0..n {
                    let mut at = parent[i];
                    let mut steps = 0;
                    while let Some(p) = at {
                        if from[p] {
                            out[i] = true;
                            break;
                        }
                        steps += 1;
                        if steps > n {
                            break;
                        }
                        at = parent[p];
                    }
                }
            }
            Relation::Ancestor => {
                for i in 0..n {
                    if !from[i] {
                        continue;
                    }
                    let mut at = parent[i];
                    let mut steps = 0;
                    while let Some(p) = at {
                        if out[p] || steps > n {
                            break;
                        }
                        out[p] = true;
                        steps += 1;
                        at = parent[p];
                    }
                }
            }
            Relation::Sibling => {
                // Marked spans per parent; a span is a sibling of a marked
                // span when another marked span shares its parent.
                let mut marked = vec![0u32; n];
                for i in 0..n {
                    if from[i] {
                        if let Some(p) = parent[i] {
                            marked[p] += 1;
                        }
                    }
                }
                for i in 0..n {
                    if let Some(p) = parent[i] {
                        out[i] = marked[p] > u32::from(from[i]);
                    }
                }
            }
        }
        out
    }

    fn scalar(&self, e: &ScalarExpr, spans: &[usize]) -> Val<'t> {
        match e {
            ScalarExpr::Static(s) => of_static(s).into_owned(),
            ScalarExpr::Count => Val::Int(spans.len() as i64),
            ScalarExpr::Aggregate(agg, field) => {
                let values: Vec<Val<'t>> = spans.iter().map(|&i| self.field(field, i)).collect();
                aggregate(*agg, &values)
            }
            ScalarExpr::Arith { op, lhs, rhs } => {
                arith(*op, &self.scalar(lhs, spans), &self.scalar(rhs, spans))
            }
        }
    }

    /// The value of `e` on span `i`.
    fn field(&self, e: &FieldExpr, i: usize) -> Val<'t> {
        match e {
            FieldExpr::Static(s) => of_static(s).into_owned(),
            FieldExpr::Attribute(a) => self.attribute(a, i),
            FieldExpr::Unary(UnaryOp::Not, inner) => match self.field(inner, i) {
                Val::Bool(b) => Val::Bool(!b),
                _ => Val::Nil,
            },
            FieldExpr::Unary(UnaryOp::Neg, inner) => match self.field(inner, i) {
                Val::Int(v) => Val::Int(v.wrapping_neg()),
                Val::Float(v) => Val::Float(-v),
                Val::Dur(v) => Val::Dur(v.wrapping_neg()),
                _ => Val::Nil,
            },
            FieldExpr::Binary { op, lhs, rhs } => match op {
                BinaryOp::And => {
                    Val::Bool(self.field(lhs, i).truthy() && self.field(rhs, i).truthy())
                }
                BinaryOp::Or => {
                    Val::Bool(self.field(lhs, i).truthy() || self.field(rhs, i).truthy())
                }
                BinaryOp::Arith(op) => arith(*op, &self.field(lhs, i), &self.field(rhs, i)),
                BinaryOp::Cmp(op) => {
                    let nil_literal = |e: &FieldExpr| matches!(e, FieldExpr::Static(Static::Nil));
                    if nil_literal(rhs) || nil_literal(lhs) {
                        let other = if nil_literal(rhs) { lhs } else { rhs };
                        return Val::Bool(match (op, other.as_ref()) {
                            (
                                CmpOp::Eq | CmpOp::Ne,
                                FieldExpr::Attribute(Attribute::Attr { scope, name }),
                            ) => self.nil_check(*scope, name, i, *op == CmpOp::Eq),
                            (CmpOp::Eq, _) => self.field(other, i) == Val::Nil,
                            (CmpOp::Ne, _) => self.field(other, i) != Val::Nil,
                            _ => false,
                        });
                    }
                    let regex = match (op, rhs.as_ref()) {
                        (CmpOp::Match | CmpOp::NotMatch, FieldExpr::Static(Static::Str(p))) => {
                            self.regexes.get(p)
                        }
                        _ => None,
                    };
                    // An attribute compared with a number literal compares
                    // only values of the literal's type: int with int,
                    // float with float.
                    let strict = |a: &FieldExpr, b: &FieldExpr| {
                        matches!(a, FieldExpr::Attribute(Attribute::Attr { .. }))
                            && matches!(b, FieldExpr::Static(Static::Int(_) | Static::Float(_)))
                    };
                    let strict = strict(lhs, rhs) || strict(rhs, lhs);
                    Val::Bool(compare(
                        &self.field(lhs, i),
                        *op,
                        &self.field(rhs, i),
                        regex,
                        strict,
                    ))
                }
            },
        }
    }

    /// `scope.name = nil` (`missing`) or `!= nil` on span `i`: whether some
    /// attribute list of the scope (the span's, its resource's, one per
    /// event or link) that holds attributes lacks the name, or has it.
    fn nil_check(&self, scope: Scope, name: &str, i: usize, missing: bool) -> bool {
        let span = &self.trace.spans[i];
        if let Some(typed) = in_typed_column(span, scope, name, self.typed_presence) {
            return typed != missing;
        }
        let lists: Vec<&Attributes> = match scope {
            Scope::Span => vec![&span.attributes],
            Scope::Resource => vec![&span.origin.resource],
            Scope::Unscoped => {
                // One list: the span's and its resource's together.
                let has = find(&span.attributes, name).is_some()
                    || find(&span.origin.resource, name).is_some();
                return has != missing;
            }
            Scope::Event => span.events.iter().map(|e| &e.attributes).collect(),
            Scope::Link => span.links.iter().map(|l| &l.attributes).collect(),
            Scope::Instrumentation => vec![&span.origin.scope],
        };
        lists
            .iter()
            .filter(|l| !l.is_empty())
            .any(|l| find(l, name).is_some() != missing)
    }

    fn attribute(&self, a: &Attribute, i: usize) -> Val<'t> {
        let trace = self.trace;
        let span: &'t SpanData = &trace.spans[i];
        match a {
            Attribute::Attr { scope, name } => match scope {
                Scope::Span => gather(std::iter::once(&span.attributes), name),
                Scope::Resource => gather(std::iter::once(&span.origin.resource), name),
                // The span's attribute, else its resource's: Tempo 3.0.3's
                // unscoped names reach no event, link or scope attribute.
                Scope::Unscoped => match gather(std::iter::once(&span.attributes), name) {
                    Val::Nil => gather(std::iter::once(&span.origin.resource), name),
                    found => found,
                },
                Scope::Event => gather(span.events.iter().map(|e| &e.attributes), name),
                Scope::Link => gather(span.links.iter().map(|l| &l.attributes), name),
                Scope::Instrumentation => gather(std::iter::once(&span.origin.scope), name),
            },
            Attribute::Intrinsic(x) => self.intrinsic(*x, i),
        }
    }

    fn intrinsic(&self, x: Intrinsic, i: usize) -> Val<'t> {
        let trace = self.trace;
        let span: &'t SpanData = &trace.spans[i];
        let text = |s: &'t str| Val::Str(Cow::Borrowed(s));
        match x {
            Intrinsic::Name => text(&span.name),
            Intrinsic::Status => Val::Status(span.status),
            Intrinsic::StatusMessage => text(&span.status_message),
            Intrinsic::Kind => Val::Kind(span.kind),
            Intrinsic::Duration => Val::Dur(nanos(span.duration_nanos())),
            Intrinsic::SpanId => Val::Str(Cow::Owned(hex(&span.span_id))),
            // A root span's parent ID is the empty string, not nil.
            Intrinsic::ParentId => match span.parent_id {
                Some(p) => Val::Str(Cow::Owned(hex(&p))),
                None => text(""),
            },
            Intrinsic::ChildCount => Val::Int(i64::from(trace.child_count[i])),
            Intrinsic::TraceId => Val::Str(Cow::Owned(hex(&trace.trace_id))),
            // Without a root span, the root's name and service are empty.
            Intrinsic::RootName => text(trace.root_name().unwrap_or("")),
            Intrinsic::RootServiceName => text(trace.root_service().unwrap_or("")),
            Intrinsic::TraceDuration => Val::Dur(nanos(trace.duration_nanos())),
            Intrinsic::EventName => many(span.events.iter().map(|e| text(&e.name)).collect()),
            Intrinsic::EventTimeSinceStart => many(
                span.events
                    .iter()
                    .map(|e| Val::Dur(nanos(e.time_unix_nano.saturating_sub(span.start_unix_nano))))
                    .collect(),
            ),
            Intrinsic::LinkTraceId => many(
                span.links
                    .iter()
                    .map(|l| Val::Str(Cow::Owned(hex(&l.trace_id))))
                    .collect(),
            ),
            Intrinsic::LinkSpanId => many(
                span.links
                    .iter()
                    .map(|l| Val::Str(Cow::Owned(hex(&l.span_id))))
                    .collect(),
            ),
            Intrinsic::InstrumentationName => {
                span.origin.scope_name.as_deref().map_or(Val::Nil, text)
            }
            Intrinsic::InstrumentationVersion => {
                span.origin.scope_version.as_deref().map_or(Val::Nil, text)
            }
            Intrinsic::NestedSetLeft => Val::Int(trace.nested[i].left),
            Intrinsic::NestedSetRight => Val::Int(trace.nested[i].right),
            Intrinsic::NestedSetParent => Val::Int(trace.nested[i].parent),
        }
    }
}

impl Val<'_> {
    fn into_owned(self) -> Val<'static> {
        match self {
            Val::Nil => Val::Nil,
            Val::Bool(b) => Val::Bool(b),
            Val::Int(i) => Val::Int(i),
            Val::Float(f) => Val::Float(f),
            Val::Str(s) => Val::Str(Cow::Owned(s.into_owned())),
            Val::Dur(d) => Val::Dur(d),
            Val::Status(s) => Val::Status(s),
            Val::Kind(k) => Val::Kind(k),
            Val::Many(vs) => Val::Many(vs.into_iter().map(Val::into_owned).collect()),
        }
    }
}

/// How `field` is named in a `by()` answer.
fn attribute_label(a: &Attribute) -> String {
    match a {
        Attribute::Intrinsic(x) => x.name().to_owned(),
        Attribute::Attr { scope, name } => {
            let prefix = match scope {
                Scope::Unscoped => "",
                Scope::Resource => "resource",
                Scope::Span => "span",
                Scope::Event => "event",
                Scope::Link => "link",
                Scope::Instrumentation => "instrumentation",
            };
            format!("{prefix}.{name}")
        }
    }
}

fn reverse(rel: Relation) -> Relation {
    match rel {
        Relation::Child => Relation::Parent,
        Relation::Parent => Relation::Child,
        Relation::Descendant => Relation::Ancestor,
        Relation::Ancestor => Relation::Descendant,
        Relation::Sibling => Relation::Sibling,
    }
}

/// The union of two ascending index lists, ascending.
fn union(a: &[usize], b: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                i += 1;
                j += 1;
                x
            }
            (Some(&x), Some(&y)) if x < y => {
                i += 1;
                x
            }
            (Some(_), Some(&y)) | (None, Some(&y)) => {
                j += 1;
                y
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (None, None) => break,
        };
        out.push(next);
    }
    out
}
