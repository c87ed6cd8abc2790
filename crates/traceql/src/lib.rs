//! TraceQL, the query language of every search in tracedb, with the meaning
//! Grafana Tempo gives it: the same query over the same spans finds the same
//! traces.
//!
//! - [`ast`]: the typed query tree.
//! - [`trace`]: a trace decoded from its stored OTLP bytes ([`Trace`]), the
//!   only thing a query is evaluated on.
//! - [`eval`]: a query compiled once ([`Compiled`]) and evaluated on one
//!   trace at a time: the spansets it matches.
//! - [`prune`]: what a matching trace must contain, for an index to rule out
//!   traces without reading them ([`needs`]); an index only prunes, the
//!   spans decide.
//! - [`arbitrary`]: random traces and queries from the grammar, for the
//!   model tests here and in the crates that search.

pub mod arbitrary;
pub mod ast;
pub mod eval;
#[cfg(test)]
mod model_tests;
pub mod prune;
pub mod trace;

pub use eval::{Compiled, RegexError, Spanset};
pub use prune::{needs, SpanNeed};
pub use trace::{EncodedSpan, Trace};
