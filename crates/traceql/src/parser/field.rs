//! Field expressions, the conditions inside `{ ... }` and the arguments of
//! aggregates and `by()`, with Tempo's precedence and type rules.
//!
//! Precedence, loosest first (Tempo's `expr.y`): `&&` and `||` together,
//! the comparisons, `+ -`, prefix `!` and `-`, `* / %`, then `^` (the only
//! right-associative one). Because the prefix operators sit between `+` and
//! `*`, `-a * b` is `-(a * b)` and `!a = b` is `(!a) = b`, as in Tempo.
//!
//! Types (Tempo's `ast_validate.go`): attributes have no static type and go
//! with anything; numbers (int, float, duration) mix; `nil` is compared
//! only with `=` and `!=`, and never to an intrinsic with `=`; each operator
//! accepts only some types; a regex is a string literal that must compile.

use regex::RegexBuilder;

use super::{Parser, SCALAR};
use crate::ast::{
    Attribute, BinaryOp, CmpOp, FieldExpr, Intrinsic, Kind, Scope, Static, Status, Type, UnaryOp,
};
use crate::error::Result;
use crate::lexer::{IntrinsicScope, Punct, TokenKind};

/// A field expression being built, with what the checks above it need.
pub(super) struct Operand {
    pub expr: FieldExpr,
    pub ty: Type,
    /// Where the expression starts, for errors about it.
    pub start: usize,
    /// Whether it reads the span (aggregates and `by` need one that does).
    pub refs_span: bool,
    /// A bare `nil`, which only `=` and `!=` may take.
    pub nil: bool,
}

/// Binding strength of the prefix operators: they take everything from
/// `*` up.
const PREFIX_OPERAND: u8 = 5;

fn binary_op(p: Punct) -> Option<(BinaryOp, u8)> {
    use crate::ast::ArithOp::*;
    Some(match p {
        Punct::Or => (BinaryOp::Or, 1),
        Punct::And => (BinaryOp::And, 1),
        Punct::Eq => (BinaryOp::Cmp(CmpOp::Eq), 2),
        Punct::Ne => (BinaryOp::Cmp(CmpOp::Ne), 2),
        Punct::Gt => (BinaryOp::Cmp(CmpOp::Gt), 2),
        Punct::Ge => (BinaryOp::Cmp(CmpOp::Ge), 2),
        Punct::Lt => (BinaryOp::Cmp(CmpOp::Lt), 2),
        Punct::Le => (BinaryOp::Cmp(CmpOp::Le), 2),
        Punct::Re => (BinaryOp::Cmp(CmpOp::Match), 2),
        Punct::NotRe => (BinaryOp::Cmp(CmpOp::NotMatch), 2),
        Punct::Add => (BinaryOp::Arith(Add), 3),
        Punct::Sub => (BinaryOp::Arith(Sub), 3),
        Punct::Mul => (BinaryOp::Arith(Mul), 5),
        Punct::Div => (BinaryOp::Arith(Div), 5),
        Punct::Mod => (BinaryOp::Arith(Mod), 5),
        _ => return None,
    })
}

fn is_numeric(t: Type) -> bool {
    matches!(t, Type::Int | Type::Float | Type::Duration)
}

/// Whether two types may meet at a binary operator (Tempo's
/// `isMatchingOperand`).
fn matching(a: Type, b: Type) -> bool {
    a == Type::Any
        || b == Type::Any
        || a == b
        || (is_numeric(a) && is_numeric(b))
        || a == Type::Nil
        || b == Type::Nil
}

/// Whether `op` takes an operand of type `t` (Tempo's `binaryTypeValid`).
fn op_takes(op: BinaryOp, t: Type) -> bool {
    use CmpOp::*;
    match t {
        Type::Any => true,
        Type::Bool => matches!(op, BinaryOp::And | BinaryOp::Or | BinaryOp::Cmp(Eq | Ne)),
        Type::Int | Type::Float | Type::Duration => {
            matches!(
                op,
                BinaryOp::Arith(_) | BinaryOp::Cmp(Eq | Ne | Gt | Ge | Lt | Le)
            )
        }
        Type::Str => matches!(op, BinaryOp::Cmp(_)),
        Type::Nil | Type::Status | Type::Kind => matches!(op, BinaryOp::Cmp(Eq | Ne)),
    }
}

/// The type checks of a binary operator, shared with scalar filters; the
/// result's type.
pub(super) fn check_operands(
    p: &Parser<'_>,
    op: BinaryOp,
    op_at: usize,
    (lt, _lhs_at): (Type, usize),
    (rt, rhs_at): (Type, usize),
) -> Result<Type> {
    if !matching(lt, rt) {
        return Err(p.error_at(
            rhs_at,
            format!(
                "the two sides of \"{}\" have different types: {lt} and {rt}",
                op.symbol()
            ),
        ));
    }
    for t in [lt, rt] {
        if !op_takes(op, t) {
            return Err(p.error_at(
                op_at,
                format!("\"{}\" does not apply to values of type {t}", op.symbol()),
            ));
        }
    }
    Ok(match op {
        BinaryOp::Or | BinaryOp::And | BinaryOp::Cmp(_) => Type::Bool,
        BinaryOp::Arith(_) if lt != Type::Any => lt,
        BinaryOp::Arith(_) => rt,
    })
}

impl Parser<'_> {
    /// A field expression that is a value (not a bare `nil`).
    pub(super) fn field_expr(&mut self) -> Result<Operand> {
        let e = self.field_binary(1)?;
        self.reject_nil(&e)?;
        Ok(e)
    }

    /// The expression of `{ ... }`: a condition, or an attribute whose
    /// truth is known only per span.
    pub(super) fn filter_expr(&mut self) -> Result<FieldExpr> {
        let e = self.field_expr()?;
        if !matches!(e.ty, Type::Bool | Type::Any) {
            return Err(self.error_at(
                e.start,
                format!(
                    "a spanset filter needs a condition (a boolean), but this is of type {}",
                    e.ty
                ),
            ));
        }
        Ok(e.expr)
    }

    fn reject_nil(&self, e: &Operand) -> Result<()> {
        if e.nil {
            return Err(self.error_at(e.start, "nil can only be compared with = or !="));
        }
        Ok(())
    }

    /// Binary operators binding at least as tightly as `min`.
    fn field_binary(&mut self, min: u8) -> Result<Operand> {
        let mut lhs = self.field_power()?;
        while let Some((op, prec)) = self.peek_punct().and_then(binary_op) {
            if prec < min {
                break;
            }
            let op_at = self.bump().start;
            let rhs = self.field_binary(prec + 1)?;
            lhs = self.combine(op, op_at, lhs, rhs)?;
        }
        Ok(lhs)
    }

    /// `a ^ b ^ c` is `a ^ (b ^ c)`; built right to left without recursing
    /// along the chain.
    fn field_power(&mut self) -> Result<Operand> {
        let mut operands = vec![self.field_unary()?];
        let mut ops = Vec::new();
        while self.peek_punct() == Some(Punct::Pow) {
            ops.push(self.bump().start);
            operands.push(self.field_unary()?);
        }
        let mut rhs = operands.pop().expect("one operand more than operators");
        while let (Some(lhs), Some(op_at)) = (operands.pop(), ops.pop()) {
            rhs = self.combine(BinaryOp::Arith(crate::ast::ArithOp::Pow), op_at, lhs, rhs)?;
        }
        Ok(rhs)
    }

    fn field_unary(&mut self) -> Result<Operand> {
        let op = match self.peek_punct() {
            Some(Punct::Not) => UnaryOp::Not,
            Some(Punct::Sub) => UnaryOp::Neg,
            _ => return self.field_primary(),
        };
        let op_at = self.bump().start;
        self.enter(op_at)?;
        let operand = self.field_binary(PREFIX_OPERAND)?;
        self.leave();
        self.reject_nil(&operand)?;
        let ok = match op {
            UnaryOp::Not => matches!(operand.ty, Type::Any | Type::Bool),
            UnaryOp::Neg => operand.ty == Type::Any || is_numeric(operand.ty),
        };
        if !ok {
            let (symbol, wants) = match op {
                UnaryOp::Not => ("!", "a boolean"),
                UnaryOp::Neg => ("-", "a number"),
            };
            return Err(self.error_at(
                op_at,
                format!(
                    "\"{symbol}\" applies to {wants}, not to a value of type {}",
                    operand.ty
                ),
            ));
        }
        // `-1` is the literal -1, as Tempo folds it.
        let folded = match (op, &operand.expr) {
            (UnaryOp::Neg, FieldExpr::Static(Static::Int(i))) => i.checked_neg().map(Static::Int),
            (UnaryOp::Neg, FieldExpr::Static(Static::Float(f))) => Some(Static::Float(-f)),
            (UnaryOp::Neg, FieldExpr::Static(Static::Duration(d))) => {
                d.checked_neg().map(Static::Duration)
            }
            _ => None,
        };
        let expr = match folded {
            Some(s) => FieldExpr::Static(s),
            None => FieldExpr::Unary(op, Box::new(operand.expr)),
        };
        Ok(Operand {
            expr,
            ty: operand.ty,
            start: op_at,
            refs_span: operand.refs_span,
            nil: false,
        })
    }

    fn combine(&self, op: BinaryOp, op_at: usize, lhs: Operand, rhs: Operand) -> Result<Operand> {
        let eq_ne = matches!(op, BinaryOp::Cmp(CmpOp::Eq | CmpOp::Ne));
        for (side, other) in [(&lhs, &rhs), (&rhs, &lhs)] {
            if !side.nil {
                continue;
            }
            if !eq_ne {
                self.reject_nil(side)?;
            }
            if op == BinaryOp::Cmp(CmpOp::Eq) {
                self.check_can_be_nil(other)?;
            }
        }
        let ty = check_operands(self, op, op_at, (lhs.ty, lhs.start), (rhs.ty, rhs.start))?;
        if let BinaryOp::Cmp(CmpOp::Match | CmpOp::NotMatch) = op {
            let FieldExpr::Static(Static::Str(pattern)) = &rhs.expr else {
                return Err(self.error_at(
                    rhs.start,
                    format!(
                        "the right side of \"{}\" must be a string literal (the pattern)",
                        op.symbol()
                    ),
                ));
            };
            compile_regex(pattern).map_err(|e| {
                // The regex crate's message spans lines, with a caret under
                // our anchored copy of the pattern; keep its last word.
                let text = e.to_string();
                let reason = text
                    .lines()
                    .find_map(|l| l.strip_prefix("error: "))
                    .unwrap_or(text.trim());
                self.error_at(rhs.start, format!("invalid regular expression: {reason}"))
            })?;
        }
        Ok(Operand {
            start: lhs.start,
            refs_span: lhs.refs_span || rhs.refs_span,
            nil: false,
            ty,
            expr: FieldExpr::Binary {
                op,
                lhs: Box::new(lhs.expr),
                rhs: Box::new(rhs.expr),
            },
        })
    }

    /// `x = nil` asks whether `x` is missing: never true of an intrinsic
    /// or of `resource.service.name`, which Tempo refuses to ask.
    fn check_can_be_nil(&self, e: &Operand) -> Result<()> {
        let name = match &e.expr {
            FieldExpr::Attribute(Attribute::Intrinsic(i)) => i.name(),
            FieldExpr::Attribute(Attribute::Attr {
                scope: Scope::Resource,
                name,
            }) if name == "service.name" => "resource.service.name",
            _ => return Ok(()),
        };
        Err(self.error_at(
            e.start,
            format!("\"{name} = nil\" is not allowed: {name} is never nil"),
        ))
    }

    /// A literal, an attribute, an intrinsic or a parenthesized expression.
    pub(super) fn field_primary(&mut self) -> Result<Operand> {
        let token = self.peek().clone();
        let literal = |s: Static| Operand {
            ty: s.value_type(),
            nil: s == Static::Nil,
            expr: FieldExpr::Static(s),
            start: token.start,
            refs_span: false,
        };
        let s = match &token.kind {
            TokenKind::Str(s) => Static::Str(s.clone()),
            TokenKind::Int(i) => Static::Int(*i),
            TokenKind::Float(f) => Static::Float(*f),
            TokenKind::Duration(d) => Static::Duration(*d),
            TokenKind::Word(w) => match word_static(w) {
                Some(s) => s,
                None => {
                    let attr = self.attribute_or_intrinsic()?;
                    return Ok(attribute(attr, token.start));
                }
            },
            TokenKind::Attr { .. } | TokenKind::ScopeColon(_) => {
                let attr = self.attribute_or_intrinsic()?;
                return Ok(attribute(attr, token.start));
            }
            TokenKind::Punct(Punct::OpenParen) => {
                self.enter(token.start)?;
                self.bump();
                let mut inner = self.field_binary(1)?;
                self.reject_nil(&inner)?;
                self.expect_close(Punct::CloseParen, &token)?;
                self.leave();
                inner.start = token.start;
                return Ok(inner);
            }
            _ => return Err(self.unexpected("a value, an attribute or an intrinsic")),
        };
        self.bump();
        Ok(literal(s))
    }

    /// `.x`, `span.x`, `span:name` or a short intrinsic such as `duration`.
    pub(super) fn attribute_or_intrinsic(&mut self) -> Result<Attribute> {
        let token = self.peek().clone();
        match token.kind {
            TokenKind::Attr { scope, name } => {
                self.bump();
                Ok(Attribute::Attr { scope, name })
            }
            TokenKind::ScopeColon(scope) => {
                self.bump();
                let found = match self.peek_kind() {
                    TokenKind::Word(w) => scoped_intrinsic(scope, w),
                    _ => None,
                };
                match found {
                    Some(i) => {
                        self.bump();
                        Ok(Attribute::Intrinsic(i))
                    }
                    None => Err(self.unexpected(&format!(
                        "an intrinsic of \"{}:\" ({})",
                        scope.name(),
                        scoped_names(scope)
                    ))),
                }
            }
            TokenKind::Word(ref w) => match short_intrinsic(w) {
                Ok(Some(i)) => {
                    self.bump();
                    Ok(Attribute::Intrinsic(i))
                }
                Ok(None) => {
                    let hint = if matches!(w.as_str(), "count" | "avg" | "min" | "max" | "sum") {
                        format!(" ({SCALAR} is compared after a \"|\")")
                    } else {
                        format!(" (a string is written in quotes: \"{w}\")")
                    };
                    let e = self.unexpected("a value, an attribute or an intrinsic");
                    Err(self.error_at(e.offset, e.message + &hint))
                }
                Err(message) => Err(self.error_at(token.start, message)),
            },
            _ => Err(self.unexpected("an attribute or an intrinsic")),
        }
    }
}

fn attribute(attr: Attribute, start: usize) -> Operand {
    let ty = match &attr {
        Attribute::Intrinsic(i) => i.value_type(),
        Attribute::Attr { .. } => Type::Any,
    };
    Operand {
        expr: FieldExpr::Attribute(attr),
        ty,
        start,
        refs_span: true,
        nil: false,
    }
}

/// The literal a word spells, if any.
fn word_static(w: &str) -> Option<Static> {
    Some(match w {
        "true" => Static::Bool(true),
        "false" => Static::Bool(false),
        "nil" => Static::Nil,
        "ok" => Static::Status(Status::Ok),
        "error" => Static::Status(Status::Error),
        "unset" => Static::Status(Status::Unset),
        "unspecified" => Static::Kind(Kind::Unspecified),
        "internal" => Static::Kind(Kind::Internal),
        "server" => Static::Kind(Kind::Server),
        "client" => Static::Kind(Kind::Client),
        "producer" => Static::Kind(Kind::Producer),
        "consumer" => Static::Kind(Kind::Consumer),
        "minInt" => Static::Int(i64::MIN),
        "maxInt" => Static::Int(i64::MAX),
        _ => return None,
    })
}

/// The unscoped intrinsic a word names; an error for the ones Tempo knows
/// and tracedb does not run.
fn short_intrinsic(w: &str) -> Result<Option<Intrinsic>, String> {
    Ok(Some(match w {
        "duration" => Intrinsic::Duration,
        "name" => Intrinsic::Name,
        "status" => Intrinsic::Status,
        "statusMessage" => Intrinsic::StatusMessage,
        "kind" => Intrinsic::Kind,
        "rootName" => Intrinsic::RootName,
        "rootServiceName" => Intrinsic::RootServiceName,
        "traceDuration" => Intrinsic::TraceDuration,
        "parent" => {
            return Err(
                "the intrinsic \"parent\" is not supported by tracedb (nor run by Tempo)".into(),
            )
        }
        "nestedSetLeft" => Intrinsic::NestedSetLeft,
        "nestedSetRight" => Intrinsic::NestedSetRight,
        "nestedSetParent" => Intrinsic::NestedSetParent,
        _ => return Ok(None),
    }))
}

const SCOPED: &[(IntrinsicScope, &str, Intrinsic)] = &[
    (IntrinsicScope::Span, "name", Intrinsic::Name),
    (IntrinsicScope::Span, "status", Intrinsic::Status),
    (
        IntrinsicScope::Span,
        "statusMessage",
        Intrinsic::StatusMessage,
    ),
    (IntrinsicScope::Span, "kind", Intrinsic::Kind),
    (IntrinsicScope::Span, "duration", Intrinsic::Duration),
    (IntrinsicScope::Span, "id", Intrinsic::SpanId),
    (IntrinsicScope::Span, "parentID", Intrinsic::ParentId),
    (IntrinsicScope::Span, "childCount", Intrinsic::ChildCount),
    (IntrinsicScope::Trace, "id", Intrinsic::TraceId),
    (IntrinsicScope::Trace, "rootName", Intrinsic::RootName),
    (
        IntrinsicScope::Trace,
        "rootService",
        Intrinsic::RootServiceName,
    ),
    (IntrinsicScope::Trace, "duration", Intrinsic::TraceDuration),
    (IntrinsicScope::Event, "name", Intrinsic::EventName),
    (
        IntrinsicScope::Event,
        "timeSinceStart",
        Intrinsic::EventTimeSinceStart,
    ),
    (IntrinsicScope::Link, "traceID", Intrinsic::LinkTraceId),
    (IntrinsicScope::Link, "spanID", Intrinsic::LinkSpanId),
    (
        IntrinsicScope::Instrumentation,
        "name",
        Intrinsic::InstrumentationName,
    ),
    (
        IntrinsicScope::Instrumentation,
        "version",
        Intrinsic::InstrumentationVersion,
    ),
];

fn scoped_intrinsic(scope: IntrinsicScope, w: &str) -> Option<Intrinsic> {
    SCOPED
        .iter()
        .find(|(s, name, _)| *s == scope && *name == w)
        .map(|(_, _, i)| *i)
}

fn scoped_names(scope: IntrinsicScope) -> String {
    let names: Vec<&str> = SCOPED
        .iter()
        .filter(|(s, _, _)| *s == scope)
        .map(|(_, n, _)| *n)
        .collect();
    names.join(", ")
}

/// The regex a `=~` pattern compiles to: anchored, as Tempo matches the
/// whole value, and bounded, as the pattern is the user's.
pub(crate) fn compile_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(1 << 20)
        .nest_limit(64)
        .build()
}
