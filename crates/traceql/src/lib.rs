//! TraceQL, the query language of every search in tracedb, with the meaning
//! Grafana Tempo gives it: the same query over the same spans finds the same
//! traces.
//!
//! - [`ast`]: the typed query tree.
pub mod ast;
