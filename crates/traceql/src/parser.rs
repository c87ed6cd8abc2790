//! The TraceQL parser: text to a checked [`ast::Query`].
//!
//! Hand-written recursive descent over the tokens of [`crate::lexer`], with
//! precedence climbing for the operators, following the grammar of Tempo's
//! `expr.y` (v3.0.3):
//!
//! ```text
//! query     := pipeline [ "|" metrics ] ( "with" "(" hint ( "," hint )* ")" )*
//! pipeline  := spansets ( "|" stage )*
//! stage     := spansets | scalar cmp scalar | "by" "(" field ")"
//!            | "select" "(" attribute ( "," attribute )* ")" | "coalesce" "(" ")"
//! spansets  := operand ( spanset-op operand )*   -- "&&" "||" loosest, then the structural ones
//! operand   := "{" [ field ] "}" | "(" pipeline ")"
//! ```
//!
//! Field expressions are in [`field`], the metrics stage in [`metrics`]. The parser type-checks as it builds
//! (the rules of Tempo's `ast_validate.go`), bottom-up, so no second pass
//! walks the tree: a query of thousands of `&&` makes a deep tree, and
//! nothing here recurses along it.
//!
//! Hostile input: queries over [`MAX_QUERY_BYTES`] are refused before
//! lexing, and queries of more than [`MAX_OPERATORS`] operators after it;
//! every construct that recurses (braces, parentheses, unary operators)
//! counts its depth and stops at [`MAX_DEPTH`]; every token is looked at a
//! bounded number of times, so parsing is linear.

mod field;
mod metrics;
#[cfg(test)]
mod tests;

pub use metrics::{MAX_QUANTILES, MAX_TOP};

use crate::ast::{
    Aggregate, CmpOp, Hint, Pipeline, Query, Relation, ScalarExpr, ScalarFilter, SpansetExpr,
    SpansetOp, Stage, Static, Structure, Type,
};
pub use crate::error::ParseError;
use crate::error::Result;
use crate::lexer::{self, Punct, Token, TokenKind};

/// The longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 64 * 1024;

/// The deepest nesting accepted: braces, parentheses, unary operators and
/// nested pipelines each count one level.
pub const MAX_DEPTH: usize = 64;
/// Most operators (every symbol but braces, parentheses and commas) a query
/// may hold. Operator chains make trees as deep as they are long, and the
/// evaluator, like dropping a tree, recurses along them: this bounds the
/// depth of every tree a query makes.
pub const MAX_OPERATORS: usize = 1024;

/// Parses and type-checks a TraceQL query.
pub fn parse(text: &str) -> Result<Query> {
    if text.len() > MAX_QUERY_BYTES {
        return Err(ParseError::at(
            text,
            0,
            format!(
                "the query is {} bytes long; at most {MAX_QUERY_BYTES} are accepted",
                text.len()
            ),
        ));
    }
    let (tokens, lex_error) = lexer::tokenize(text);
    let operators = tokens.iter().filter(|t| {
        matches!(&t.kind, TokenKind::Punct(p) if !matches!(
            p,
            Punct::OpenBrace | Punct::CloseBrace | Punct::OpenParen | Punct::CloseParen | Punct::Comma
        ))
    });
    if let Some(past) = operators.clone().nth(MAX_OPERATORS) {
        let parser = Parser {
            text,
            tokens: tokens.clone(),
            pos: 0,
            depth: 0,
            lex_error: None,
        };
        return Err(parser.error_at(
            past.start,
            format!("the query has more than {MAX_OPERATORS} operators"),
        ));
    }
    let mut parser = Parser {
        text,
        tokens,
        pos: 0,
        depth: 0,
        lex_error,
    };
    parser.query()
}

struct Parser<'a> {
    text: &'a str,
    /// Never empty: ends with `Eof` or `Invalid`.
    tokens: Vec<Token>,
    pos: usize,
    /// Current nesting, checked against [`MAX_DEPTH`].
    depth: usize,
    /// The lexer's error, returned when the parser reaches its token.
    lex_error: Option<ParseError>,
}

/// What a spanset expression holds, for Tempo's rules on parenthesized
/// pipelines used as operands (`({ a } | count() > 1) && ({ b })`): such an
/// expression must be a whole pipeline by itself, and each of its operands
/// must be in parentheses.
#[derive(Debug, Clone, Copy, Default)]
struct SpansetInfo {
    /// Where the first operand that is a multi-stage pipeline starts.
    pipeline_at: Option<usize>,
    /// Where the first `{ ... }` operand not in parentheses starts.
    bare_filter_at: Option<usize>,
}

impl SpansetInfo {
    fn merge(&mut self, other: SpansetInfo) {
        self.pipeline_at = self.pipeline_at.or(other.pipeline_at);
        self.bare_filter_at = self.bare_filter_at.or(other.bare_filter_at);
    }
}

impl Parser<'_> {
    // ---- tokens ----

    fn peek(&self) -> &Token {
        &self.tokens[self.pos.min(self.tokens.len() - 1)]
    }

    fn peek_kind(&self) -> &TokenKind {
        &self.peek().kind
    }

    fn peek_punct(&self) -> Option<Punct> {
        match self.peek_kind() {
            TokenKind::Punct(p) => Some(*p),
            _ => None,
        }
    }

    fn at_word(&self, word: &str) -> bool {
        matches!(self.peek_kind(), TokenKind::Word(w) if w == word)
    }

    /// Takes the current token; the last one (`Eof`/`Invalid`) stays.
    fn bump(&mut self) -> Token {
        let token = self.peek().clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        token
    }

    fn eat(&mut self, punct: Punct) -> bool {
        if self.peek_punct() == Some(punct) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, punct: Punct, what: &str) -> Result<Token> {
        if self.peek_punct() == Some(punct) {
            Ok(self.bump())
        } else {
            Err(self.unexpected(what))
        }
    }

    /// `)` or `}` closing the opener at `open`.
    fn expect_close(&mut self, punct: Punct, open: &Token) -> Result<()> {
        if self.eat(punct) {
            return Ok(());
        }
        let (close, opener) = if punct == Punct::CloseBrace {
            ("}", "{")
        } else {
            (")", "(")
        };
        let column = ParseError::at(self.text, open.start, "").column;
        let line = ParseError::at(self.text, open.start, "").line;
        let at = if line == self.line_of(self.peek().start) {
            format!("column {column}")
        } else {
            format!("line {line}, column {column}")
        };
        let found = self.peek();
        if found.kind == TokenKind::Invalid {
            return Err(self.unexpected(""));
        }
        Err(self.error_at(
            found.start,
            format!(
                "expected \"{close}\" to close the \"{opener}\" at {at}, found {}",
                self.describe(found)
            ),
        ))
    }

    fn line_of(&self, offset: usize) -> usize {
        ParseError::at(self.text, offset, "").line
    }

    // ---- errors ----

    fn error_at(&self, offset: usize, message: impl Into<String>) -> ParseError {
        ParseError::at(self.text, offset, message)
    }

    /// "expected X after "prev", found "cur"" at the current token; the
    /// lexer's own error if lexing stopped here.
    fn unexpected(&self, expected: &str) -> ParseError {
        let token = self.peek();
        if token.kind == TokenKind::Invalid {
            if let Some(e) = &self.lex_error {
                return e.clone();
            }
        }
        let after = match self.pos.checked_sub(1).map(|i| &self.tokens[i]) {
            Some(prev) => format!(" after {}", self.describe(prev)),
            None => String::new(),
        };
        self.error_at(
            token.start,
            format!("expected {expected}{after}, found {}", self.describe(token)),
        )
    }

    /// A token as the user wrote it, quoted, shortened if long.
    fn describe(&self, token: &Token) -> String {
        let text = &self.text[token.start..token.end];
        let short = if text.chars().count() > 24 {
            let short: String = text.chars().take(20).collect();
            format!("{short}...")
        } else {
            text.to_string()
        };
        match token.kind {
            TokenKind::Eof => "the end of the query".to_string(),
            TokenKind::Str(_) => format!("the string {short}"),
            _ => format!("\"{short}\""),
        }
    }

    fn enter(&mut self, at: usize) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(
                at,
                format!("the query nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    // ---- query and pipelines ----

    fn query(&mut self) -> Result<Query> {
        let (pipeline, _) = self.pipeline()?;
        let metrics = if self.at_metrics() {
            self.bump();
            Some(Box::new(self.metrics()?))
        } else {
            None
        };
        let mut most_recent = false;
        let mut hints = Vec::new();
        while self.at_word("with") {
            self.hints(&mut most_recent, &mut hints)?;
        }
        if *self.peek_kind() != TokenKind::Eof {
            return Err(
                self.unexpected("\"|\", a spanset operator, \"with(...)\" or the end of the query")
            );
        }
        Ok(Query {
            pipeline,
            most_recent,
            metrics,
            hints,
        })
    }

    /// `with(name=value, ...)`: `most_recent`, and Tempo's sampling and
    /// exemplar hints, each checked for a value of its type.
    fn hints(&mut self, most_recent: &mut bool, hints: &mut Vec<Hint>) -> Result<()> {
        self.bump();
        self.expect(Punct::OpenParen, "\"(\"")?;
        loop {
            let name = match self.peek_kind() {
                TokenKind::Word(w) => w.clone(),
                _ => return Err(self.unexpected("a hint name such as most_recent")),
            };
            let name_at = self.bump().start;
            self.expect(Punct::Eq, "\"=\"")?;
            let value_at = self.peek().start;
            let value = self.hint_value()?;
            match (name.as_str(), value) {
                ("most_recent", Static::Bool(b)) => *most_recent = b,
                ("most_recent", v) => {
                    return Err(self.error_at(
                        value_at,
                        format!(
                            "most_recent takes true or false, not a value of type {}",
                            v.value_type()
                        ),
                    ))
                }
                (name @ ("sample" | "span_sample" | "trace_sample" | "exemplars"), value) => {
                    let fraction = |f: f64| (0.0..=1.0).contains(&f);
                    let ok = match (name, &value) {
                        ("sample" | "exemplars", Static::Bool(_)) => true,
                        ("sample" | "span_sample" | "trace_sample", Static::Float(f)) => {
                            fraction(*f)
                        }
                        ("sample" | "span_sample" | "trace_sample", Static::Int(i)) => {
                            (0..=1).contains(i)
                        }
                        ("exemplars", Static::Int(i)) => *i >= 0,
                        _ => false,
                    };
                    if !ok {
                        let wants = match name {
                            "sample" => "true, false or a fraction from 0 to 1",
                            "exemplars" => "true, false or a count",
                            _ => "a fraction from 0 to 1",
                        };
                        return Err(self.error_at(value_at, format!("{name} takes {wants}")));
                    }
                    hints.push(Hint {
                        name: name.to_owned(),
                        value,
                    });
                }
                _ => {
                    return Err(self.error_at(
                        name_at,
                        format!(
                            "the hint \"{name}\" is not supported by tracedb (most_recent, sample, span_sample, trace_sample and exemplars are)"
                        ),
                    ))
                }
            }
            if !self.eat(Punct::Comma) {
                break;
            }
        }
        self.expect(Punct::CloseParen, "\",\" or \")\"")?;
        Ok(())
    }

    fn hint_value(&mut self) -> Result<Static> {
        let operand = self.field_primary()?;
        match operand.expr {
            crate::ast::FieldExpr::Static(s) if !matches!(s, Static::Nil) => Ok(s),
            _ => Err(self.error_at(operand.start, "a hint's value must be a literal")),
        }
    }

    /// A pipeline; its first stage is a spanset expression. The info is
    /// that stage's when it is the only one.
    fn pipeline(&mut self) -> Result<(Pipeline, SpansetInfo)> {
        if !matches!(self.peek_punct(), Some(Punct::OpenBrace | Punct::OpenParen)) {
            return Err(self.unexpected("a spanset filter \"{ ... }\" to start the pipeline"));
        }
        let (first, first_info) = self.spansets()?;
        let mut stages = vec![Stage::Spansets(first)];
        let mut pipeline_at = first_info.pipeline_at;
        while !self.at_metrics() && self.eat(Punct::Pipe) {
            let (stage, info) = self.stage()?;
            stages.push(stage);
            pipeline_at = pipeline_at.or(info.pipeline_at);
        }
        if stages.len() > 1 {
            if let Some(at) = pipeline_at {
                return Err(self.error_at(
                    at,
                    "parenthesized pipelines joined by spanset operators must be the whole query \
                     (they can't be a stage of a pipeline)",
                ));
            }
        }
        let info = if stages.len() == 1 {
            first_info
        } else {
            SpansetInfo::default()
        };
        Ok((Pipeline { stages }, info))
    }

    /// A stage after `|`.
    fn stage(&mut self) -> Result<(Stage, SpansetInfo)> {
        let token = self.peek();
        match &token.kind {
            TokenKind::Punct(Punct::OpenBrace) => {
                let (e, info) = self.spansets()?;
                return Ok((Stage::Spansets(e), info));
            }
            TokenKind::Punct(Punct::OpenParen) => {
                // `((...{` is spansets, `((...count()` is a scalar filter.
                let first = self.tokens[self.pos..]
                    .iter()
                    .find(|t| t.kind != TokenKind::Punct(Punct::OpenParen));
                if first.is_some_and(|t| t.kind == TokenKind::Punct(Punct::OpenBrace)) {
                    let (e, info) = self.spansets()?;
                    return Ok((Stage::Spansets(e), info));
                }
            }
            TokenKind::Word(w) => match w.as_str() {
                "by" => return self.by().map(|s| (s, SpansetInfo::default())),
                "select" => return self.select().map(|s| (s, SpansetInfo::default())),
                "coalesce" => {
                    self.bump();
                    self.expect(Punct::OpenParen, "\"(\"")?;
                    self.expect(Punct::CloseParen, "\")\" (coalesce takes no argument)")?;
                    return Ok((Stage::Coalesce, SpansetInfo::default()));
                }
                "count" | "avg" | "min" | "max" | "sum" => {}
                _ => return Err(self.unexpected(STAGE)),
            },
            TokenKind::Int(_)
            | TokenKind::Float(_)
            | TokenKind::Duration(_)
            | TokenKind::Punct(Punct::Sub) => {}
            _ => return Err(self.unexpected(STAGE)),
        }
        let filter = self.scalar_filter()?;
        Ok((Stage::ScalarFilter(filter), SpansetInfo::default()))
    }

    fn by(&mut self) -> Result<Stage> {
        self.bump();
        self.expect(Punct::OpenParen, "\"(\"")?;
        let arg = self.field_expr()?;
        if !arg.refs_span {
            return Err(self.error_at(
                arg.start,
                "by() needs a field of the span, such as .attr or name",
            ));
        }
        self.expect(Punct::CloseParen, "\")\"")?;
        Ok(Stage::By(arg.expr))
    }

    fn select(&mut self) -> Result<Stage> {
        self.bump();
        self.expect(Punct::OpenParen, "\"(\"")?;
        let mut fields = Vec::new();
        loop {
            let attr = self.attribute_or_intrinsic()?;
            fields.push(crate::ast::FieldExpr::Attribute(attr));
            if !self.eat(Punct::Comma) {
                break;
            }
        }
        self.expect(Punct::CloseParen, "\",\" or \")\"")?;
        Ok(Stage::Select(fields))
    }

    // ---- spanset expressions ----

    /// Operands joined by spanset operators: `&&` and `||` (one level, left
    /// to right, as in Tempo) bind looser than the structural operators.
    fn spansets(&mut self) -> Result<(SpansetExpr, SpansetInfo)> {
        let (mut lhs, mut info) = self.spansets_structural()?;
        while let Some(op) = self.peek_spanset_op().filter(|op| !is_structural(*op)) {
            self.bump();
            let (rhs, rhs_info) = self.spansets_structural()?;
            info.merge(rhs_info);
            lhs = SpansetExpr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        if let (Some(_), Some(bare)) = (info.pipeline_at, info.bare_filter_at) {
            return Err(self.error_at(
                bare,
                "next to a parenthesized pipeline, each operand of a spanset operator must be in \
                 parentheses: write ({ ... })",
            ));
        }
        Ok((lhs, info))
    }

    fn spansets_structural(&mut self) -> Result<(SpansetExpr, SpansetInfo)> {
        let (mut lhs, mut info) = self.spanset_operand()?;
        while let Some(op) = self.peek_spanset_op().filter(|op| is_structural(*op)) {
            self.bump();
            let (rhs, rhs_info) = self.spanset_operand()?;
            info.merge(rhs_info);
            lhs = SpansetExpr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok((lhs, info))
    }

    fn peek_spanset_op(&self) -> Option<SpansetOp> {
        use Relation::*;
        use Structure::*;
        let s = |r, s| Some(SpansetOp::Structural(r, s));
        match self.peek_punct()? {
            Punct::And => Some(SpansetOp::And),
            Punct::Or => Some(SpansetOp::Or),
            Punct::Gt => s(Child, Plain),
            Punct::Desc => s(Descendant, Plain),
            Punct::Lt => s(Parent, Plain),
            Punct::Ance => s(Ancestor, Plain),
            Punct::Tilde => s(Sibling, Plain),
            Punct::NotGt => s(Child, Not),
            Punct::NotDesc => s(Descendant, Not),
            Punct::NotLt => s(Parent, Not),
            Punct::NotAnce => s(Ancestor, Not),
            Punct::NotRe => s(Sibling, Not),
            Punct::AmpGt => s(Child, Union),
            Punct::AmpDesc => s(Descendant, Union),
            Punct::AmpLt => s(Parent, Union),
            Punct::AmpAnce => s(Ancestor, Union),
            Punct::AmpTilde => s(Sibling, Union),
            _ => None,
        }
    }

    /// `{ ... }` or `( pipeline )`; a parenthesized pipeline of one
    /// spanset stage is just that stage's expression.
    fn spanset_operand(&mut self) -> Result<(SpansetExpr, SpansetInfo)> {
        let open = self.peek().clone();
        match self.peek_punct() {
            Some(Punct::OpenBrace) => {
                self.enter(open.start)?;
                self.bump();
                let expr = if self.peek_punct() == Some(Punct::CloseBrace) {
                    crate::ast::FieldExpr::Static(Static::Bool(true))
                } else {
                    self.filter_expr()?
                };
                self.expect_close(Punct::CloseBrace, &open)?;
                self.leave();
                let info = SpansetInfo {
                    pipeline_at: None,
                    bare_filter_at: Some(open.start),
                };
                Ok((SpansetExpr::Filter(expr), info))
            }
            Some(Punct::OpenParen) => {
                self.enter(open.start)?;
                self.bump();
                let (mut pipeline, inner) = self.pipeline()?;
                self.expect_close(Punct::CloseParen, &open)?;
                self.leave();
                if pipeline.stages.len() == 1 {
                    if let Some(Stage::Spansets(e)) = pipeline.stages.pop() {
                        let info = SpansetInfo {
                            pipeline_at: inner.pipeline_at,
                            bare_filter_at: None,
                        };
                        return Ok((e, info));
                    }
                }
                let info = SpansetInfo {
                    pipeline_at: Some(open.start),
                    bare_filter_at: None,
                };
                Ok((SpansetExpr::Pipeline(Box::new(pipeline)), info))
            }
            _ => Err(self.unexpected("a spanset filter \"{ ... }\" or \"(\"")),
        }
    }

    // ---- scalar filters ----

    fn scalar_filter(&mut self) -> Result<ScalarFilter> {
        let start = self.peek().start;
        let lhs = self.scalar(1)?;
        let op = match self.peek_punct() {
            Some(Punct::Eq) => CmpOp::Eq,
            Some(Punct::Ne) => CmpOp::Ne,
            Some(Punct::Lt) => CmpOp::Lt,
            Some(Punct::Le) => CmpOp::Le,
            Some(Punct::Gt) => CmpOp::Gt,
            Some(Punct::Ge) => CmpOp::Ge,
            _ => return Err(self.unexpected("a comparison (=, !=, <, <=, >, >=)")),
        };
        let op_at = self.bump().start;
        let rhs = self.scalar(1)?;
        if !lhs.has_aggregate && !rhs.has_aggregate {
            return Err(self.error_at(
                start,
                "a scalar filter compares an aggregate such as count() or avg(duration)",
            ));
        }
        let bop = crate::ast::BinaryOp::Cmp(op);
        field::check_operands(self, bop, op_at, (lhs.ty, lhs.start), (rhs.ty, rhs.start))?;
        Ok(ScalarFilter {
            op,
            lhs: lhs.expr,
            rhs: rhs.expr,
        })
    }

    /// A scalar expression whose binary operators bind at least as tightly
    /// as `min` (3: `+ -`, 5: `* / %`, 6: `^`, as in field expressions).
    fn scalar(&mut self, min: u8) -> Result<Scalar> {
        let mut lhs = self.scalar_power()?;
        while let Some((op, prec)) = self.peek_punct().and_then(arith_op) {
            if prec < min || op == crate::ast::ArithOp::Pow {
                break;
            }
            let op_at = self.bump().start;
            let rhs = self.scalar(prec + 1)?;
            lhs = self.scalar_arith(op, op_at, lhs, rhs)?;
        }
        Ok(lhs)
    }

    /// `a ^ b ^ c`, right to left, without recursing along the chain.
    fn scalar_power(&mut self) -> Result<Scalar> {
        let mut operands = vec![self.scalar_primary()?];
        let mut ops = Vec::new();
        while self.peek_punct() == Some(Punct::Pow) {
            ops.push(self.bump().start);
            operands.push(self.scalar_primary()?);
        }
        let mut rhs = operands.pop().expect("one operand more than operators");
        while let (Some(lhs), Some(op_at)) = (operands.pop(), ops.pop()) {
            rhs = self.scalar_arith(crate::ast::ArithOp::Pow, op_at, lhs, rhs)?;
        }
        Ok(rhs)
    }

    fn scalar_arith(
        &self,
        op: crate::ast::ArithOp,
        op_at: usize,
        lhs: Scalar,
        rhs: Scalar,
    ) -> Result<Scalar> {
        let bop = crate::ast::BinaryOp::Arith(op);
        let ty = field::check_operands(self, bop, op_at, (lhs.ty, lhs.start), (rhs.ty, rhs.start))?;
        Ok(Scalar {
            start: lhs.start,
            ty,
            has_aggregate: lhs.has_aggregate || rhs.has_aggregate,
            expr: ScalarExpr::Arith {
                op,
                lhs: Box::new(lhs.expr),
                rhs: Box::new(rhs.expr),
            },
        })
    }

    fn scalar_primary(&mut self) -> Result<Scalar> {
        let token = self.peek().clone();
        let literal = |s: Static| Scalar {
            start: token.start,
            ty: s.value_type(),
            has_aggregate: false,
            expr: ScalarExpr::Static(s),
        };
        match &token.kind {
            TokenKind::Int(i) => {
                self.bump();
                Ok(literal(Static::Int(*i)))
            }
            TokenKind::Float(f) => {
                self.bump();
                Ok(literal(Static::Float(*f)))
            }
            TokenKind::Duration(d) => {
                self.bump();
                Ok(literal(Static::Duration(*d)))
            }
            // Tempo's scalar grammar has `-` only before a number.
            TokenKind::Punct(Punct::Sub) => {
                self.bump();
                let s = match self.peek_kind() {
                    TokenKind::Int(i) => Static::Int(-i),
                    TokenKind::Float(f) => Static::Float(-f),
                    TokenKind::Duration(d) => Static::Duration(-d),
                    _ => return Err(self.unexpected("a number")),
                };
                self.bump();
                Ok(literal(s))
            }
            TokenKind::Punct(Punct::OpenParen) => {
                self.enter(token.start)?;
                self.bump();
                let mut inner = self.scalar(1)?;
                self.expect_close(Punct::CloseParen, &token)?;
                self.leave();
                inner.start = token.start;
                Ok(inner)
            }
            TokenKind::Word(w) => {
                let aggregate = match w.as_str() {
                    "count" => None,
                    "avg" => Some(Aggregate::Avg),
                    "min" => Some(Aggregate::Min),
                    "max" => Some(Aggregate::Max),
                    "sum" => Some(Aggregate::Sum),
                    _ => return Err(self.unexpected(SCALAR)),
                };
                let name = w.clone();
                self.bump();
                self.expect(Punct::OpenParen, "\"(\"")?;
                let Some(aggregate) = aggregate else {
                    self.expect(Punct::CloseParen, "\")\" (count takes no argument)")?;
                    return Ok(Scalar {
                        start: token.start,
                        ty: Type::Int,
                        has_aggregate: true,
                        expr: ScalarExpr::Count,
                    });
                };
                let arg = self.field_expr()?;
                if !matches!(arg.ty, Type::Any | Type::Int | Type::Float | Type::Duration) {
                    return Err(self.error_at(
                        arg.start,
                        format!(
                            "{name}() needs a number, but its argument is of type {}",
                            arg.ty
                        ),
                    ));
                }
                if !arg.refs_span {
                    return Err(self.error_at(
                        arg.start,
                        format!("{name}() needs a field of the span, such as duration or .attr"),
                    ));
                }
                self.expect(Punct::CloseParen, "\")\"")?;
                Ok(Scalar {
                    start: token.start,
                    ty: arg.ty,
                    has_aggregate: true,
                    expr: ScalarExpr::Aggregate(aggregate, arg.expr),
                })
            }
            _ => Err(self.unexpected(SCALAR)),
        }
    }
}

const STAGE: &str =
    "a spanset filter, an aggregate such as count(), by(...), select(...) or coalesce()";
const SCALAR: &str = "an aggregate such as count() or avg(duration), or a number";

/// A scalar expression being built, with what its checks need.
struct Scalar {
    expr: ScalarExpr,
    ty: Type,
    start: usize,
    has_aggregate: bool,
}

fn is_structural(op: SpansetOp) -> bool {
    matches!(op, SpansetOp::Structural(..))
}

/// The arithmetic operator a token spells, with its precedence.
fn arith_op(p: Punct) -> Option<(crate::ast::ArithOp, u8)> {
    use crate::ast::ArithOp::*;
    Some(match p {
        Punct::Add => (Add, 3),
        Punct::Sub => (Sub, 3),
        Punct::Mul => (Mul, 5),
        Punct::Div => (Div, 5),
        Punct::Mod => (Mod, 5),
        Punct::Pow => (Pow, 6),
        _ => return None,
    })
}
