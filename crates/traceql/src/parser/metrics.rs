//! The metrics stage: `| rate() by(a, b)`, the other aggregations over
//! time, and the second stage after them (`| topk(n)`, `| bottomk(n)`,
//! `> value`), with the argument rules of Tempo's `expr.y` (v3.0.3).
//!
//! ```text
//! metrics := fn "(" args ")" [ "by" "(" attribute ( "," attribute )* ")" ]
//!            ( "|" ( "topk" | "bottomk" ) "(" int ")" | cmp [ "-" ] number )*
//! ```

use super::Parser;
use crate::ast::{Attribute, CmpOp, Metrics, MetricsFn, SecondStage, Static, Type};
use crate::error::Result;
use crate::lexer::{Punct, TokenKind};

/// The aggregations a metrics stage may start with.
pub(super) const FUNCTIONS: &[&str] = &[
    "rate",
    "count_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "avg_over_time",
    "quantile_over_time",
    "histogram_over_time",
    "compare",
];

/// Most quantiles one `quantile_over_time` may ask for (each is a series).
pub const MAX_QUANTILES: usize = 32;

/// Most series `topk`/`bottomk` and `compare` may ask for.
pub const MAX_TOP: i64 = 10_000;

#[cfg(test)]
mod tests;

impl Parser<'_> {
    /// True when the next tokens are `|` and an aggregation's name: the
    /// pipeline ends there and the metrics stage begins.
    pub(super) fn at_metrics(&self) -> bool {
        self.peek_punct() == Some(Punct::Pipe)
            && matches!(
                self.tokens.get(self.pos + 1).map(|t| &t.kind),
                Some(TokenKind::Word(w)) if FUNCTIONS.contains(&w.as_str())
            )
    }

    /// The metrics stage, after its `|`.
    pub(super) fn metrics(&mut self) -> Result<Metrics> {
        let name = match self.peek_kind() {
            TokenKind::Word(w) => w.clone(),
            _ => return Err(self.unexpected("a metrics function such as rate()")),
        };
        self.bump();
        self.expect(Punct::OpenParen, "\"(\"")?;
        let function = match name.as_str() {
            "rate" => MetricsFn::Rate,
            "count_over_time" => MetricsFn::CountOverTime,
            "min_over_time" => MetricsFn::MinOverTime(self.numeric_field(&name)?),
            "max_over_time" => MetricsFn::MaxOverTime(self.numeric_field(&name)?),
            "sum_over_time" => MetricsFn::SumOverTime(self.numeric_field(&name)?),
            "avg_over_time" => MetricsFn::AvgOverTime(self.numeric_field(&name)?),
            "histogram_over_time" => MetricsFn::HistogramOverTime(self.numeric_field(&name)?),
            "quantile_over_time" => {
                let field = self.numeric_field(&name)?;
                let mut qs = Vec::new();
                while self.eat(Punct::Comma) {
                    let at = self.peek().start;
                    let q = match *self.peek_kind() {
                        TokenKind::Int(i) => i as f64,
                        TokenKind::Float(f) => f,
                        _ => return Err(self.unexpected("a quantile between 0 and 1")),
                    };
                    if !(0.0..=1.0).contains(&q) {
                        return Err(
                            self.error_at(at, format!("the quantile {q} is outside [0, 1]"))
                        );
                    }
                    self.bump();
                    qs.push(q);
                    if qs.len() > MAX_QUANTILES {
                        return Err(self.error_at(
                            at,
                            format!("quantile_over_time takes at most {MAX_QUANTILES} quantiles"),
                        ));
                    }
                }
                if qs.is_empty() {
                    return Err(self.unexpected("\",\" and the quantiles to compute"));
                }
                MetricsFn::QuantileOverTime(field, qs)
            }
            "compare" => self.compare()?,
            _ => unreachable!("at_metrics checked the name"),
        };
        self.expect(Punct::CloseParen, "\")\"")?;
        let mut by = Vec::new();
        if self.at_word("by") {
            if matches!(function, MetricsFn::Compare { .. }) {
                return Err(self.unexpected("the end of compare(...)"));
            }
            self.bump();
            self.expect(Punct::OpenParen, "\"(\"")?;
            loop {
                by.push(self.attribute_or_intrinsic()?);
                if !self.eat(Punct::Comma) {
                    break;
                }
            }
            self.expect(Punct::CloseParen, "\",\" or \")\"")?;
        }
        let mut second = Vec::new();
        loop {
            if self.eat(Punct::Pipe) {
                let which = match self.peek_kind() {
                    TokenKind::Word(w) if w == "topk" || w == "bottomk" => w.clone(),
                    _ => return Err(self.unexpected("topk(n) or bottomk(n)")),
                };
                self.bump();
                self.expect(Punct::OpenParen, "\"(\"")?;
                let n = self.count_arg(&which)?;
                self.expect(Punct::CloseParen, "\")\"")?;
                second.push(if which == "topk" {
                    SecondStage::TopK(n)
                } else {
                    SecondStage::BottomK(n)
                });
                continue;
            }
            let op = match self.peek_punct() {
                Some(Punct::Eq) => CmpOp::Eq,
                Some(Punct::Ne) => CmpOp::Ne,
                Some(Punct::Gt) => CmpOp::Gt,
                Some(Punct::Ge) => CmpOp::Ge,
                Some(Punct::Lt) => CmpOp::Lt,
                Some(Punct::Le) => CmpOp::Le,
                _ => break,
            };
            self.bump();
            let negative = self.eat(Punct::Sub);
            let value = match *self.peek_kind() {
                TokenKind::Int(i) => i as f64,
                TokenKind::Float(f) => f,
                // A duration compares as seconds, as the series' values are.
                TokenKind::Duration(ns) => ns as f64 / 1e9,
                _ => return Err(self.unexpected("a number or a duration to compare with")),
            };
            self.bump();
            second.push(SecondStage::Filter(
                op,
                if negative { -value } else { value },
            ));
        }
        Ok(Metrics {
            function,
            by,
            second,
        })
    }

    /// The field of an aggregation that needs numbers: an attribute (its
    /// type is known per span) or an intrinsic of a numeric type.
    fn numeric_field(&mut self, function: &str) -> Result<Attribute> {
        let at = self.peek().start;
        let field = self.attribute_or_intrinsic()?;
        if let Attribute::Intrinsic(i) = &field {
            let ty = i.value_type();
            if !matches!(ty, Type::Int | Type::Float | Type::Duration) {
                return Err(self.error_at(
                    at,
                    format!(
                        "{function} needs a numeric field; {} is of type {ty}",
                        i.name()
                    ),
                ));
            }
        }
        Ok(field)
    }

    /// A positive integer argument of `function`, at most [`MAX_TOP`].
    fn count_arg(&mut self, function: &str) -> Result<usize> {
        let at = self.peek().start;
        match *self.peek_kind() {
            TokenKind::Int(n) if (1..=MAX_TOP).contains(&n) => {
                self.bump();
                Ok(n as usize)
            }
            TokenKind::Int(n) => Err(self.error_at(
                at,
                format!("{function} takes a count from 1 to {MAX_TOP}, not {n}"),
            )),
            _ => Err(self.unexpected(&format!("a count for {function}"))),
        }
    }

    /// `compare({ selection })`, with a count of values and a time range.
    fn compare(&mut self) -> Result<MetricsFn> {
        let open = self.peek().clone();
        if self.peek_punct() != Some(Punct::OpenBrace) {
            return Err(self.unexpected("a spanset filter \"{ ... }\" to compare"));
        }
        self.enter(open.start)?;
        self.bump();
        let selection = if self.peek_punct() == Some(Punct::CloseBrace) {
            crate::ast::FieldExpr::Static(Static::Bool(true))
        } else {
            self.filter_expr()?
        };
        self.expect_close(Punct::CloseBrace, &open)?;
        self.leave();
        let mut top = 10;
        let (mut start, mut end) = (0, 0);
        if self.eat(Punct::Comma) {
            top = self.count_arg("compare")?;
            if self.eat(Punct::Comma) {
                start = self.timestamp_arg()?;
                self.expect(
                    Punct::Comma,
                    "\",\" and the end of the selection's time range",
                )?;
                end = self.timestamp_arg()?;
            }
        }
        Ok(MetricsFn::Compare {
            selection,
            top,
            start_unix_nano: start,
            end_unix_nano: end,
        })
    }

    /// A Unix time in nanoseconds (0: the query's own range).
    fn timestamp_arg(&mut self) -> Result<u64> {
        match *self.peek_kind() {
            TokenKind::Int(n) if n >= 0 => {
                self.bump();
                Ok(n as u64)
            }
            _ => Err(self.unexpected("a time in Unix nanoseconds")),
        }
    }
}
