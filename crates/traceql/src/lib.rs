//! TraceQL, the query language of every search in tracedb, with the meaning
//! Grafana Tempo gives it: the same query over the same spans finds the same
//! traces.
//!
//! A query's text goes through `lexer` (tokens with their byte ranges),
//! then `parser` (recursive descent that type-checks as it builds), and
//! comes out as an [`ast::Query`]; `print` turns a tree back into text
//! that parses to the same tree. [`eval`] runs it on one trace at a time.
//!
//! - [`ast`]: the typed query tree.
//! - `error`: [`ParseError`], with the line and column of what went wrong.
//! - `lexer`: tokens; knows no grammar.
//! - `parser`: [`parse`], with the limits [`MAX_QUERY_BYTES`] and
//!   [`MAX_DEPTH`] that keep hostile queries cheap.
//! - `print`: `Display` for the tree, as canonical TraceQL.
//! - [`trace`]: a trace decoded from its stored OTLP bytes ([`Trace`]), the
//!   only thing a query is evaluated on.
//! - [`eval`]: a query compiled once ([`Compiled`]) and evaluated on one
//!   trace at a time: the spansets it matches.
//!
//! A query parses to a tree that prints back as canonical TraceQL, and a
//! query that breaks a rule is refused with where and why:
//!
//! ```
//! let query = tracedb_traceql::parse(
//!     r#"{ resource.service.name="checkout" && duration>1s } | rate() by(name)"#,
//! )
//! .expect("a valid query");
//! assert_eq!(
//!     query.to_string(),
//!     r#"{ resource.service.name = "checkout" && span:duration > 1s } | rate() by(span:name)"#,
//! );
//! assert_eq!(tracedb_traceql::parse(&query.to_string()), Ok(query));
//!
//! let refused = tracedb_traceql::parse("{ duration > \"fast\" }").unwrap_err();
//! assert_eq!(
//!     refused.to_string(),
//!     r#"parse error at line 1, column 14: the two sides of ">" have different types: duration and string"#,
//! );
//! ```
//! - [`metrics`]: the metrics stage (`| rate()` and the other functions
//!   over time): the spans the pipeline matches, trace by trace, counted
//!   into time series on a [`metrics::Grid`].
//! - [`analysis`]: what a search makes of a query: the constructs refused
//!   and why, whether every condition holds on one span, the relaxed query
//!   a tier asks its nodes.
//! - [`prune`]: what a matching trace must contain, for an index to rule out
//!   traces without reading them ([`needs`]); an index only prunes, the
//!   spans decide.
//! - `arbitrary` (feature `test-support`): random traces and queries from
//!   the grammar, for the model tests here and in the crates that search.

pub mod analysis;
#[cfg(any(test, feature = "test-support"))]
pub mod arbitrary;
pub mod ast;
mod error;
pub mod eval;
mod lexer;
pub mod metrics;
#[cfg(test)]
mod model_tests;
mod parser;
mod print;
pub mod prune;
pub mod trace;

pub use eval::{Compiled, RegexError, Spanset};
pub use lexer::parse_go_duration;
pub use parser::{
    parse, ParseError, MAX_DEPTH, MAX_OPERATORS, MAX_QUANTILES, MAX_QUERY_BYTES, MAX_TOP,
};
pub use prune::{needs, AttrNeed, LiteralKind, RawNeeds, SpanNeed};
pub use trace::{EncodedSpan, Projection, Trace};
