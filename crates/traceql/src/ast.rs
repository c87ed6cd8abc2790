//! The typed query tree a TraceQL query parses into, checked by
//! [`crate::parse`] before anything runs.
//!
//! A query is a [`Pipeline`]: stages joined by `|`, each turning the list of
//! spansets a trace has so far into another. The first stage is a
//! [`SpansetExpr`]: spanset filters (`{ ... }`) joined by the spanset
//! operators. Inside a filter, a [`FieldExpr`] is evaluated for one span at a
//! time; its conditions all hold on that one span.

use std::fmt;

/// A whole query: the pipeline, its metrics stage if it asks for series
/// rather than traces, and its `with(...)` hints.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub pipeline: Pipeline,
    /// `with(most_recent=true)`: accepted; tracedb always answers the newest
    /// traces first.
    pub most_recent: bool,
    /// `| rate()` and the like after the pipeline: a metrics query, whose
    /// answer is time series of the spans the pipeline matches.
    pub metrics: Option<Box<Metrics>>,
    /// Every hint but `most_recent`, in the order written (later ones win).
    pub hints: Vec<Hint>,
}

/// A `with(name=value)` hint other than `most_recent`: Tempo's sampling
/// and exemplar hints (`sample`, `span_sample`, `trace_sample`,
/// `exemplars`) are accepted; see `Query::hint`.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    pub name: String,
    pub value: Static,
}

impl Query {
    /// The last value given to hint `name`, if any.
    pub fn hint(&self, name: &str) -> Option<&Static> {
        self.hints
            .iter()
            .rev()
            .find(|h| h.name == name)
            .map(|h| &h.value)
    }
}

/// The metrics stage of a query: an aggregation over time of the matched
/// spans, split by `by(...)`, then the second stage's functions in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    pub function: MetricsFn,
    /// `by(a, b)`: one series per distinct tuple of values.
    pub by: Vec<Attribute>,
    /// `| topk(n)`, `| bottomk(n)`, `> 10` after the aggregation.
    pub second: Vec<SecondStage>,
}

impl Metrics {
    /// The fields of the spans the stage reads: the one it measures, if
    /// any, then its `by()` fields (not `compare()`'s filter).
    pub fn fields(&self) -> impl Iterator<Item = &Attribute> {
        use MetricsFn::*;
        let measured = match &self.function {
            MinOverTime(a)
            | MaxOverTime(a)
            | SumOverTime(a)
            | AvgOverTime(a)
            | QuantileOverTime(a, _)
            | HistogramOverTime(a) => Some(a),
            Rate | CountOverTime | Compare { .. } => None,
        };
        measured.into_iter().chain(&self.by)
    }
}

/// The aggregations over time.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsFn {
    /// `rate()`: matching spans per second.
    Rate,
    /// `count_over_time()`: matching spans per interval.
    CountOverTime,
    MinOverTime(Attribute),
    MaxOverTime(Attribute),
    SumOverTime(Attribute),
    AvgOverTime(Attribute),
    /// `quantile_over_time(field, q...)`: one series per quantile.
    QuantileOverTime(Attribute, Vec<f64>),
    /// `histogram_over_time(field)`: one series per power-of-two bucket.
    HistogramOverTime(Attribute),
    /// `compare({ selection }, top, start, end)`: the attribute values of
    /// the selection's spans against the rest's; `start` and `end` (Unix
    /// ns, 0 for the query's own) narrow the selection in time.
    Compare {
        selection: FieldExpr,
        top: usize,
        start_unix_nano: u64,
        end_unix_nano: u64,
    },
}

/// A function applied to the series an aggregation made.
#[derive(Debug, Clone, PartialEq)]
pub enum SecondStage {
    /// `topk(n)`: at each step, the `n` series with the largest values.
    TopK(usize),
    /// `bottomk(n)`: the smallest.
    BottomK(usize),
    /// `> 10`: keeps the samples whose value compares true.
    Filter(CmpOp, f64),
}

/// Stages joined by `|`; never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub stages: Vec<Stage>,
}

/// One stage of a pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    /// Spanset filters and operators. As the first stage it selects spans
    /// of the trace; later, it filters the spans of each spanset (as
    /// `{ cond }`) or combines (`{ a } && { b }` inside a later stage applies
    /// each side to the spanset and combines the results).
    Spansets(SpansetExpr),
    /// `count() > 2`, `avg(duration) > 1s`: keeps the spansets whose
    /// aggregate compares true.
    ScalarFilter(ScalarFilter),
    /// `by(field)`: splits each spanset by the field's value.
    By(FieldExpr),
    /// `select(field, ...)`: the fields to return with each matched span.
    Select(Vec<FieldExpr>),
    /// `coalesce()`: merges every spanset into one.
    Coalesce,
}

/// Spanset filters combined by the spanset operators.
#[derive(Debug, Clone, PartialEq)]
pub enum SpansetExpr {
    /// `{ expr }`; `{}` is `{ true }`.
    Filter(FieldExpr),
    /// `( pipeline )` used as an operand of a spanset operator.
    Pipeline(Box<Pipeline>),
    Binary {
        op: SpansetOp,
        lhs: Box<SpansetExpr>,
        rhs: Box<SpansetExpr>,
    },
}

/// The operators between spansets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpansetOp {
    /// `&&`: both sides have spans; the answer is both sides' spans.
    And,
    /// `||`: either side's spans.
    Or,
    /// A structural relation, with how its answer is made.
    Structural(Relation, Structure),
}

/// How a span of the right side relates to spans of the left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// `>`: the right span's parent is a left span.
    Child,
    /// `>>`: some ancestor of the right span is a left span.
    Descendant,
    /// `<`: the right span is the parent of a left span.
    Parent,
    /// `<<`: the right span is an ancestor of a left span.
    Ancestor,
    /// `~`: the right span shares its parent with a left span (and is not it).
    Sibling,
}

/// Which spans a structural operator answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structure {
    /// `>` etc.: the right side's spans in the relation.
    Plain,
    /// `!>` etc.: the right side's spans not in the relation.
    Not,
    /// `&>` etc.: the spans of both sides that are in the relation.
    Union,
}

/// `aggregate op value` after a `|`, or any two scalar expressions compared.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarFilter {
    pub op: CmpOp,
    pub lhs: ScalarExpr,
    pub rhs: ScalarExpr,
}

/// A value computed per spanset.
#[derive(Debug, Clone, PartialEq)]
pub enum ScalarExpr {
    Static(Static),
    /// `count()`.
    Count,
    /// `avg(f)`, `min(f)`, `max(f)`, `sum(f)`.
    Aggregate(Aggregate, FieldExpr),
    Arith {
        op: ArithOp,
        lhs: Box<ScalarExpr>,
        rhs: Box<ScalarExpr>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    Avg,
    Min,
    Max,
    Sum,
}

/// An expression evaluated for one span.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldExpr {
    Static(Static),
    Attribute(Attribute),
    /// `!e` (boolean) or `-e` (numeric).
    Unary(UnaryOp, Box<FieldExpr>),
    Binary {
        op: BinaryOp,
        lhs: Box<FieldExpr>,
        rhs: Box<FieldExpr>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Not,
    Neg,
}

/// Operators inside a field expression, loosest first: `||`, `&&`, the
/// comparisons, `+ -`, `* / %`, `^`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Or,
    And,
    Cmp(CmpOp),
    Arith(ArithOp),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    /// `=~`: the whole value matches the regular expression.
    Match,
    /// `!~`: the whole value does not match.
    NotMatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

/// A literal of the query.
#[derive(Debug, Clone, PartialEq)]
pub enum Static {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// Nanoseconds.
    Duration(i64),
    Status(Status),
    Kind(Kind),
}

/// A span's status code (OTLP numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    Unset = 0,
    Ok = 1,
    Error = 2,
}

/// A span's kind (OTLP numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Unspecified = 0,
    Internal = 1,
    Server = 2,
    Client = 3,
    Producer = 4,
    Consumer = 5,
}

/// Where an attribute is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `.name`: the span's attribute, else its resource's.
    Unscoped,
    Resource,
    Span,
    Event,
    Link,
    Instrumentation,
}

/// A field of a span: an attribute, or an intrinsic.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attribute {
    Attr { scope: Scope, name: String },
    Intrinsic(Intrinsic),
}

/// The fields TraceQL defines on every span, trace, event, link and scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    /// `name`, `span:name`.
    Name,
    /// `status`, `span:status`.
    Status,
    /// `statusMessage`, `span:statusMessage`.
    StatusMessage,
    /// `kind`, `span:kind`.
    Kind,
    /// `duration`, `span:duration`.
    Duration,
    /// `span:id` (hex).
    SpanId,
    /// `span:parentID` (hex; nil on a root span).
    ParentId,
    /// `span:childCount`.
    ChildCount,
    /// `trace:id` (hex).
    TraceId,
    /// `rootName`, `trace:rootName`.
    RootName,
    /// `rootServiceName`, `trace:rootService`.
    RootServiceName,
    /// `traceDuration`, `trace:duration`.
    TraceDuration,
    /// `event:name`.
    EventName,
    /// `event:timeSinceStart`.
    EventTimeSinceStart,
    /// `link:traceID` (hex).
    LinkTraceId,
    /// `link:spanID` (hex).
    LinkSpanId,
    /// `instrumentation:name`.
    InstrumentationName,
    /// `instrumentation:version`.
    InstrumentationVersion,
    /// `nestedSetLeft`: the span's number on entering it in a depth-first
    /// walk of the trace's tree from 1; 0 for a span outside the tree.
    NestedSetLeft,
    /// `nestedSetRight`: its number on leaving it; 0 outside the tree.
    NestedSetRight,
    /// `nestedSetParent`: its parent's `nestedSetLeft`, -1 on a root span,
    /// 0 outside the tree.
    NestedSetParent,
}

impl Intrinsic {
    /// The static type of the intrinsic's values.
    pub fn value_type(self) -> Type {
        use Intrinsic::*;
        match self {
            Name
            | StatusMessage
            | SpanId
            | ParentId
            | TraceId
            | RootName
            | RootServiceName
            | EventName
            | LinkTraceId
            | LinkSpanId
            | InstrumentationName
            | InstrumentationVersion => Type::Str,
            Status => Type::Status,
            Kind => Type::Kind,
            Duration | TraceDuration | EventTimeSinceStart => Type::Duration,
            ChildCount | NestedSetLeft | NestedSetRight | NestedSetParent => Type::Int,
        }
    }

    /// The name TraceQL gives it in its long form.
    pub fn name(self) -> &'static str {
        use Intrinsic::*;
        match self {
            Name => "span:name",
            Status => "span:status",
            StatusMessage => "span:statusMessage",
            Kind => "span:kind",
            Duration => "span:duration",
            SpanId => "span:id",
            ParentId => "span:parentID",
            ChildCount => "span:childCount",
            TraceId => "trace:id",
            RootName => "trace:rootName",
            RootServiceName => "trace:rootService",
            TraceDuration => "trace:duration",
            EventName => "event:name",
            EventTimeSinceStart => "event:timeSinceStart",
            LinkTraceId => "link:traceID",
            LinkSpanId => "link:spanID",
            InstrumentationName => "instrumentation:name",
            InstrumentationVersion => "instrumentation:version",
            NestedSetLeft => "nestedSetLeft",
            NestedSetRight => "nestedSetRight",
            NestedSetParent => "nestedSetParent",
        }
    }
}

/// The static types of TraceQL. An attribute's type is known only when a
/// span is read ([`Type::Any`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Nil,
    Bool,
    Int,
    Float,
    Str,
    Duration,
    Status,
    Kind,
    Any,
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Type::Nil => "nil",
            Type::Bool => "bool",
            Type::Int => "int",
            Type::Float => "float",
            Type::Str => "string",
            Type::Duration => "duration",
            Type::Status => "status",
            Type::Kind => "kind",
            Type::Any => "attribute",
        })
    }
}

impl Static {
    pub fn value_type(&self) -> Type {
        match self {
            Static::Nil => Type::Nil,
            Static::Bool(_) => Type::Bool,
            Static::Int(_) => Type::Int,
            Static::Float(_) => Type::Float,
            Static::Str(_) => Type::Str,
            Static::Duration(_) => Type::Duration,
            Static::Status(_) => Type::Status,
            Static::Kind(_) => Type::Kind,
        }
    }
}

impl Status {
    pub fn from_code(code: i32) -> Status {
        match code {
            1 => Status::Ok,
            2 => Status::Error,
            _ => Status::Unset,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Unset => "unset",
            Status::Ok => "ok",
            Status::Error => "error",
        }
    }
}

impl Kind {
    pub fn from_code(code: i32) -> Kind {
        match code {
            1 => Kind::Internal,
            2 => Kind::Server,
            3 => Kind::Client,
            4 => Kind::Producer,
            5 => Kind::Consumer,
            _ => Kind::Unspecified,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Unspecified => "unspecified",
            Kind::Internal => "internal",
            Kind::Server => "server",
            Kind::Client => "client",
            Kind::Producer => "producer",
            Kind::Consumer => "consumer",
        }
    }
}
