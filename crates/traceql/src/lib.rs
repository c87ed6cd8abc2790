//! TraceQL, the query language of every search in tracedb, with the meaning
//! Grafana Tempo gives it: the same query over the same spans finds the same
//! traces.
//!
//! - [`ast`]: the typed query tree.
//! - `error`: `ParseError`, with the line and column of what went wrong.
//! - `lexer`: tokens with their byte ranges; knows no grammar (the parser
//!   that uses it comes next).
pub mod ast;
#[allow(dead_code)]
mod error;
#[allow(dead_code)]
mod lexer;
