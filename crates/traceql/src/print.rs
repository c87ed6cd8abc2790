//! Prints a query tree as canonical TraceQL that [`crate::parse`] reads
//! back to the same tree.
//!
//! Parentheses appear only where precedence needs them, and around every
//! operand of a spanset expression that joins parenthesized pipelines (Tempo
//! requires them there). Strings are quoted and escaped, attribute names are
//! quoted when an unquoted name would end early, floats always carry a `.`
//! or an exponent, durations use the largest unit that divides them.
//!
//! Operator chains (`{ a } && { b } && ...`) make trees as deep as they are
//! long; the printer walks a chain of one operator in a loop and recurses
//! only where the operator changes, which needs a parenthesis or a
//! precedence step in the text, so its depth is bounded by the parser's.

use std::fmt::{self, Display, Formatter, Write};

use crate::ast::{
    Aggregate, ArithOp, Attribute, BinaryOp, CmpOp, FieldExpr, Metrics, MetricsFn, Pipeline, Query,
    Relation, ScalarExpr, ScalarFilter, Scope, SecondStage, SpansetExpr, SpansetOp, Stage, Static,
    Structure, UnaryOp,
};
use crate::lexer::is_plain_attribute_name;

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Match => "=~",
            CmpOp::NotMatch => "!~",
        }
    }
}

impl ArithOp {
    pub fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Mod => "%",
            ArithOp::Pow => "^",
        }
    }

    /// Binding strength, shared by field and scalar expressions.
    fn level(self) -> u8 {
        match self {
            ArithOp::Add | ArithOp::Sub => 3,
            ArithOp::Mul | ArithOp::Div | ArithOp::Mod => 5,
            ArithOp::Pow => POW,
        }
    }
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Cmp(op) => op.symbol(),
            BinaryOp::Arith(op) => op.symbol(),
        }
    }
}

impl SpansetOp {
    pub fn symbol(self) -> &'static str {
        use Relation::*;
        use Structure::*;
        match self {
            SpansetOp::And => "&&",
            SpansetOp::Or => "||",
            SpansetOp::Structural(r, s) => match (s, r) {
                (Plain, Child) => ">",
                (Plain, Descendant) => ">>",
                (Plain, Parent) => "<",
                (Plain, Ancestor) => "<<",
                (Plain, Sibling) => "~",
                (Not, Child) => "!>",
                (Not, Descendant) => "!>>",
                (Not, Parent) => "!<",
                (Not, Ancestor) => "!<<",
                (Not, Sibling) => "!~",
                (Union, Child) => "&>",
                (Union, Descendant) => "&>>",
                (Union, Parent) => "&<",
                (Union, Ancestor) => "&<<",
                (Union, Sibling) => "&~",
            },
        }
    }
}

impl Aggregate {
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Avg => "avg",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Sum => "sum",
        }
    }
}

/// Level of an operand that never needs parentheses.
const ATOM: u8 = 10;
/// `^`, the one right-associative level.
const POW: u8 = 6;
/// Prefix `!` and `-`, and negative literals in field expressions.
const PREFIX: u8 = 4;

/// An expression tree printed with infix operators.
trait Infix: Copy {
    fn level(self) -> u8;
    fn split(self) -> Option<(Self, &'static str, Self)>;
    /// Anything that is not a binary operator.
    fn write_leaf(self, f: &mut Formatter<'_>) -> fmt::Result;
}

fn write_infix<T: Infix>(f: &mut Formatter<'_>, e: T) -> fmt::Result {
    if e.split().is_none() {
        return e.write_leaf(f);
    }
    let level = e.level();
    if level == POW {
        // Right-associative: walk the chain down its right side.
        let mut lefts = Vec::new();
        let mut cur = e;
        while let Some((l, op, r)) = cur.split().filter(|_| cur.level() == level) {
            lefts.push((l, op));
            cur = r;
        }
        for (l, op) in lefts {
            write_operand(f, l, l.level() <= level)?;
            write!(f, " {op} ")?;
        }
        write_operand(f, cur, cur.level() < level)
    } else {
        // Left-associative: walk the chain down its left side.
        let mut rights = Vec::new();
        let mut cur = e;
        while let Some((l, op, r)) = cur.split().filter(|_| cur.level() == level) {
            rights.push((op, r));
            cur = l;
        }
        write_operand(f, cur, cur.level() < level)?;
        for (op, r) in rights.into_iter().rev() {
            write!(f, " {op} ")?;
            write_operand(f, r, r.level() <= level)?;
        }
        Ok(())
    }
}

fn write_operand<T: Infix>(f: &mut Formatter<'_>, e: T, parens: bool) -> fmt::Result {
    if parens {
        f.write_char('(')?;
        write_infix(f, e)?;
        f.write_char(')')
    } else {
        write_infix(f, e)
    }
}

#[derive(Clone, Copy)]
struct Field<'a>(&'a FieldExpr);

impl Infix for Field<'_> {
    fn level(self) -> u8 {
        match self.0 {
            FieldExpr::Binary { op, .. } => match op {
                BinaryOp::Or | BinaryOp::And => 1,
                BinaryOp::Cmp(_) => 2,
                BinaryOp::Arith(a) => a.level(),
            },
            FieldExpr::Unary(..) => PREFIX,
            FieldExpr::Static(s) if is_negative(s) => PREFIX,
            _ => ATOM,
        }
    }

    fn split(self) -> Option<(Self, &'static str, Self)> {
        match self.0 {
            FieldExpr::Binary { op, lhs, rhs } => Some((Field(lhs), op.symbol(), Field(rhs))),
            _ => None,
        }
    }

    fn write_leaf(self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            FieldExpr::Static(s) => s.fmt(f),
            FieldExpr::Attribute(a) => a.fmt(f),
            FieldExpr::Unary(op, operand) => {
                f.write_str(match op {
                    UnaryOp::Not => "!",
                    UnaryOp::Neg => "-",
                })?;
                let operand = Field(operand);
                write_operand(f, operand, operand.level() < ATOM)
            }
            FieldExpr::Binary { .. } => write_infix(f, self),
        }
    }
}

/// A literal printed with a leading `-`, which binds like prefix `-`.
fn is_negative(s: &Static) -> bool {
    match s {
        Static::Int(i) => *i < 0 && *i != i64::MIN,
        Static::Float(x) => x.is_sign_negative(),
        Static::Duration(d) => *d < 0,
        _ => false,
    }
}

#[derive(Clone, Copy)]
struct Scalar<'a>(&'a ScalarExpr);

impl Infix for Scalar<'_> {
    fn level(self) -> u8 {
        match self.0 {
            ScalarExpr::Arith { op, .. } => op.level(),
            // `-1` is one token pair in the scalar grammar: never split.
            _ => ATOM,
        }
    }

    fn split(self) -> Option<(Self, &'static str, Self)> {
        match self.0 {
            ScalarExpr::Arith { op, lhs, rhs } => Some((Scalar(lhs), op.symbol(), Scalar(rhs))),
            _ => None,
        }
    }

    fn write_leaf(self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            ScalarExpr::Static(s) => s.fmt(f),
            ScalarExpr::Count => f.write_str("count()"),
            ScalarExpr::Aggregate(a, e) => write!(f, "{}({e})", a.name()),
            ScalarExpr::Arith { .. } => write_infix(f, self),
        }
    }
}

/// A spanset expression; `wrap_filters` puts `{ ... }` operands in
/// parentheses, as Tempo requires beside parenthesized pipelines.
#[derive(Clone, Copy)]
struct Spansets<'a>(&'a SpansetExpr, bool);

impl Infix for Spansets<'_> {
    fn level(self) -> u8 {
        match self.0 {
            SpansetExpr::Binary {
                op: SpansetOp::And | SpansetOp::Or,
                ..
            } => 1,
            SpansetExpr::Binary { .. } => 2,
            _ => ATOM,
        }
    }

    fn split(self) -> Option<(Self, &'static str, Self)> {
        match self.0 {
            SpansetExpr::Binary { op, lhs, rhs } => {
                Some((Spansets(lhs, self.1), op.symbol(), Spansets(rhs, self.1)))
            }
            _ => None,
        }
    }

    fn write_leaf(self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            SpansetExpr::Filter(e) if self.1 => write!(f, "({{ {e} }})"),
            SpansetExpr::Filter(e) => write!(f, "{{ {e} }}"),
            SpansetExpr::Pipeline(p) => write!(f, "({p})"),
            SpansetExpr::Binary { .. } => write_infix(f, self),
        }
    }
}

/// Whether a parenthesized pipeline is among the operands (without
/// recursing: the tree may be deep).
fn joins_pipelines(e: &SpansetExpr) -> bool {
    let mut todo = vec![e];
    while let Some(e) = todo.pop() {
        match e {
            SpansetExpr::Pipeline(_) => return true,
            SpansetExpr::Binary { lhs, rhs, .. } => todo.extend([&**lhs, &**rhs]),
            SpansetExpr::Filter(_) => {}
        }
    }
    false
}

impl Display for Query {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        self.pipeline.fmt(f)?;
        if let Some(m) = &self.metrics {
            write!(f, " | {m}")?;
        }
        if self.most_recent || !self.hints.is_empty() {
            f.write_str(" with(")?;
            if self.most_recent {
                f.write_str("most_recent=true")?;
            }
            for (i, h) in self.hints.iter().enumerate() {
                if i > 0 || self.most_recent {
                    f.write_str(", ")?;
                }
                write!(f, "{}={}", h.name, h.value)?;
            }
            f.write_char(')')?;
        }
        Ok(())
    }
}

impl Display for Metrics {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.function {
            MetricsFn::Rate => f.write_str("rate()")?,
            MetricsFn::CountOverTime => f.write_str("count_over_time()")?,
            MetricsFn::MinOverTime(a) => write!(f, "min_over_time({a})")?,
            MetricsFn::MaxOverTime(a) => write!(f, "max_over_time({a})")?,
            MetricsFn::SumOverTime(a) => write!(f, "sum_over_time({a})")?,
            MetricsFn::AvgOverTime(a) => write!(f, "avg_over_time({a})")?,
            MetricsFn::HistogramOverTime(a) => write!(f, "histogram_over_time({a})")?,
            MetricsFn::QuantileOverTime(a, qs) => {
                write!(f, "quantile_over_time({a}")?;
                for q in qs {
                    write!(f, ", {q:?}")?;
                }
                f.write_char(')')?;
            }
            MetricsFn::Compare {
                selection,
                top,
                start_unix_nano,
                end_unix_nano,
            } => {
                write!(f, "compare({{ {selection} }}, {top}")?;
                if *start_unix_nano != 0 || *end_unix_nano != 0 {
                    write!(f, ", {start_unix_nano}, {end_unix_nano}")?;
                }
                f.write_char(')')?;
            }
        }
        if !self.by.is_empty() {
            f.write_str(" by(")?;
            for (i, a) in self.by.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                a.fmt(f)?;
            }
            f.write_char(')')?;
        }
        for stage in &self.second {
            match stage {
                SecondStage::TopK(n) => write!(f, " | topk({n})")?,
                SecondStage::BottomK(n) => write!(f, " | bottomk({n})")?,
                SecondStage::Filter(op, v) => write!(f, " {} {v:?}", op.symbol())?,
            }
        }
        Ok(())
    }
}

impl Display for Pipeline {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, stage) in self.stages.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            stage.fmt(f)?;
        }
        Ok(())
    }
}

impl Display for Stage {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Spansets(e) => e.fmt(f),
            Stage::ScalarFilter(s) => s.fmt(f),
            Stage::By(e) => write!(f, "by({e})"),
            Stage::Select(fields) => {
                f.write_str("select(")?;
                for (i, e) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    e.fmt(f)?;
                }
                f.write_char(')')
            }
            Stage::Coalesce => f.write_str("coalesce()"),
        }
    }
}

impl Display for SpansetExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_infix(f, Spansets(self, joins_pipelines(self)))
    }
}

impl Display for ScalarFilter {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_infix(f, Scalar(&self.lhs))?;
        write!(f, " {} ", self.op.symbol())?;
        write_infix(f, Scalar(&self.rhs))
    }
}

impl Display for ScalarExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_infix(f, Scalar(self))
    }
}

impl Display for FieldExpr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_infix(f, Field(self))
    }
}

impl Display for Static {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Static::Nil => f.write_str("nil"),
            Static::Bool(b) => write!(f, "{b}"),
            // Its magnitude is one past the largest literal.
            Static::Int(i64::MIN) => f.write_str("minInt"),
            Static::Int(i) => write!(f, "{i}"),
            // Debug output always reads back as a float: `1.0`, `1e-7`.
            Static::Float(x) => write!(f, "{x:?}"),
            Static::Str(s) => write_quoted(f, s, true),
            Static::Duration(ns) => write_duration(f, *ns),
            Static::Status(s) => f.write_str(s.name()),
            Static::Kind(k) => f.write_str(k.name()),
        }
    }
}

fn write_duration(f: &mut Formatter<'_>, ns: i64) -> fmt::Result {
    const UNITS: &[(i64, &str)] = &[
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ];
    for (scale, unit) in UNITS {
        if ns != 0 && ns % scale == 0 {
            return write!(f, "{}{unit}", ns / scale);
        }
    }
    write!(f, "{ns}ns")
}

/// `s` in double quotes; `full` escapes control characters as a string
/// literal may, otherwise only `"` and `\` (all an attribute name has).
fn write_quoted(f: &mut Formatter<'_>, s: &str, full: bool) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' if full => f.write_str("\\n")?,
            '\t' if full => f.write_str("\\t")?,
            '\r' if full => f.write_str("\\r")?,
            c if full && c.is_control() => write!(f, "\\u{:04x}", u32::from(c))?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl Display for Attribute {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Attribute::Intrinsic(i) => f.write_str(i.name()),
            Attribute::Attr { scope, name } => {
                f.write_str(match scope {
                    Scope::Unscoped => ".",
                    Scope::Resource => "resource.",
                    Scope::Span => "span.",
                    Scope::Event => "event.",
                    Scope::Link => "link.",
                    Scope::Instrumentation => "instrumentation.",
                })?;
                // After a bare `.`, a digit would start a number.
                let digit_first = name.starts_with(|c: char| c.is_ascii_digit());
                if is_plain_attribute_name(name) && !(*scope == Scope::Unscoped && digit_first) {
                    f.write_str(name)
                } else {
                    write_quoted(f, name, false)
                }
            }
        }
    }
}
