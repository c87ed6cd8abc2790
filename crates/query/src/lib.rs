//! tracedb's query side.
//!
//! - [`service`]: `tracedb.query.v1.QueryService/GetTrace`, which asks the storage
//!   engine for a trace and streams it back.
//! - [`traces_data`]: turns stored spans (encoded OTLP bytes plus their resource
//!   and scope) into `TracesData` messages without decoding them.
//! - [`error`]: query errors and their gRPC status codes.

pub mod error;
pub mod service;
pub mod traces_data;

pub use error::{Error, Result};
pub use service::{QueryApi, TraceMessages, PARTIAL_HEADER, PARTIAL_REASON_HEADER};
pub use traces_data::{encode_traces_data, MAX_MESSAGE_BYTES};
