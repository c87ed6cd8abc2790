//! TraceQL, the query language of every search in tracedb, with the meaning
//! Grafana Tempo gives it: the same query over the same spans finds the same
//! traces.
//!
//! A query's text goes through [`lexer`] (tokens with their byte ranges),
//! then [`parser`] (recursive descent that type-checks as it builds), and
//! comes out as an [`ast::Query`]; [`print`] turns a tree back into text
//! that parses to the same tree.
//!
//! - [`ast`]: the typed query tree.
//! - `error`: [`ParseError`], with the line and column of what went wrong.
//! - `lexer`: tokens; knows no grammar.
//! - `parser`: [`parse`], with the limits [`MAX_QUERY_BYTES`] and
//!   [`MAX_DEPTH`] that keep hostile queries cheap.
//! - `print`: `Display` for the tree, as canonical TraceQL.
pub mod ast;
mod error;
mod lexer;
mod parser;
mod print;

pub use parser::{parse, ParseError, MAX_DEPTH, MAX_QUERY_BYTES};
