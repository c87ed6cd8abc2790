//! tracedb's query side.
//!
//! - [`service`]: `tracedb.query.v1.QueryService/GetTrace`, which asks the storage
//!   engine for a trace and streams it back.
//! - [`jaeger`]: Jaeger v2 remote storage (`jaeger.storage.v2.TraceReader`
//!   and `DependencyReader`), answered from the search index and GetTrace.
//! - [`tempo`]: the Grafana Tempo HTTP API (trace by ID, search, tags) as an
//!   axum router for the server's HTTP port.
//! - [`read`]: one trace read the same way for all three: whole, partial
//!   (marked, logged, counted), unreadable, or not found; never an empty success.
//! - [`otlp_json`]: OTLP/JSON encoding of `TracesData`.
//! - [`traces_data`]: turns stored spans (encoded OTLP bytes plus their resource
//!   and scope) into `TracesData` messages without decoding them.
//! - [`error`]: query errors and their gRPC status codes.

pub mod error;
pub mod jaeger;
pub mod otlp_json;
pub mod read;
pub mod service;
pub mod tempo;
pub mod traces_data;

pub use error::{Error, Result};
pub use jaeger::JaegerStorage;
pub use service::{QueryApi, TraceMessages, PARTIAL_HEADER, PARTIAL_REASON_HEADER};
pub use traces_data::{encode_traces_data, MAX_MESSAGE_BYTES};
