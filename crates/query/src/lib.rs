//! tracedb's query side: three front-ends over one read interface.
//!
//! - [`read`]: the interface, [`read::Reads`] (a trace by ID, search,
//!   services, operations, tag keys and values, dependencies), and its
//!   implementation over this process's storage engine, [`read::LocalReads`].
//!   A trace is answered the same way everywhere: whole, partial (marked,
//!   logged, counted), unreadable, or not found; never an empty success.
//! - [`search`]: TraceQL search, the one search every front end runs: the
//!   index proposes candidates newest first, the query is evaluated on each
//!   candidate's spans, and the search stops at the limit.
//! - [`metrics`]: TraceQL metrics (`| rate()` and the other functions):
//!   the traces with spans in the window, found by the same walk, read whole
//!   and counted into series.
//! - [`tenants`]: which [`read::Reads`] a request gets: the stores of the
//!   tenants it names ([`tenants::ReadsFor`]); every front-end asks it first.
//! - [`fanout`]: [`read::Reads`] over replica groups of storage nodes, for
//!   the query tier: every node asked at once, answers merged.
//! - [`service`]: `tracedb.query.v1.QueryService` (GetTrace, SearchTraces).
//! - [`jaeger`]: Jaeger v2 remote storage (`jaeger.storage.v2.TraceReader`,
//!   `DependencyReader` and `Capabilities`), its structured filter mapped
//!   onto TraceQL.
//! - [`tempo`]: the Grafana Tempo HTTP API (trace by ID, search, tags,
//!   metrics) as an axum router for the server's HTTP port.
//! - [`otlp_json`]: OTLP/JSON encoding of `TracesData`.
//! - [`traces_data`]: turns stored spans (encoded OTLP bytes plus their resource
//!   and scope) into `TracesData` messages without decoding them.
//! - [`cancel`]: a query stops when its caller goes away.
//! - [`error`]: query errors, and the one place they become gRPC status
//!   codes (the gRPC front-ends) and HTTP status codes (the Tempo API).

pub mod cancel;
pub mod error;
pub mod fanout;
pub mod jaeger;
pub mod metrics;
pub mod otlp_json;
pub mod read;
pub mod search;
pub mod service;
pub mod tempo;
pub mod tenants;
pub mod traces_data;

pub use error::{Error, Result};
pub use jaeger::JaegerStorage;
pub use service::{QueryApi, TraceMessages, PARTIAL_HEADER, PARTIAL_REASON_HEADER};
pub use traces_data::{encode_traces_data, MAX_MESSAGE_BYTES};
