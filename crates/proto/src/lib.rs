//! Protobuf and gRPC types of tracedb.
//!
//! - [`opentelemetry`]: the OTLP messages (common, resource, trace) and the
//!   `TraceService` client, generated from `proto/` by prost.
//! - [`collector`] and [`query`]: the OTLP collector messages and tracedb's own
//!   `tracedb.query.v1` API (messages and client).
//! - [`codec`]: a tonic codec that hands request bodies over as raw bytes and
//!   sends pre-encoded responses, so the ingest and query paths never build
//!   owned prost trees per span.
//! - [`trace_service_server`] and [`query_service_server`]: the server halves of
//!   both services, wired to [`codec::RawCodec`].
//! - [`jaeger`] and [`trace_reader_server`]/[`dependency_reader_server`]/
//!   [`capabilities_server`]: Jaeger v2's remote-storage API, which Jaeger's `grpc` backend reads through.
//! - [`google::rpc`]: `google.rpc.Status` and `google.rpc.RetryInfo`, the error
//!   model of gRPC status details and of OTLP/HTTP error bodies.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for gRPC server reflection.
//! - [`retry`]: UNAVAILABLE with a `RetryInfo` detail, the gRPC way to say
//!   when to retry.
//! - [`start`]: [`start::StartCell`], the one way anything waits for the
//!   storage engine to open, and [`start::Starting`], what it says meanwhile.
//! - [`tenant`]: tenant IDs, their rules, and the tenants a request names.
//! - [`time`]: Unix nanoseconds as a UTC calendar time, for people.
//! - [`wire`]: the varint writer of the storage engine's own formats and of
//!   tests that build protobuf bytes by hand (`tracedb_query::traces_data`
//!   has a copy of its loop that writes into a `BytesMut`).

pub mod codec;
pub mod retry;
pub mod start;
pub mod tenant;
pub mod time;
pub mod wire;

/// OTLP messages.
pub mod opentelemetry {
    pub mod proto {
        pub mod common {
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.common.v1.rs"
                ));
            }
        }
        pub mod resource {
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.resource.v1.rs"
                ));
            }
        }
        pub mod trace {
            pub mod v1 {
                include!(concat!(env!("OUT_DIR"), "/opentelemetry.proto.trace.v1.rs"));
            }
        }
        pub mod collector {
            pub mod trace {
                pub mod v1 {
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/opentelemetry.proto.collector.trace.v1.rs"
                    ));
                }
            }
        }
    }
}

pub use opentelemetry::proto::{collector, common, resource, trace};

/// tracedb's own API packages.
pub mod tracedb {
    /// The query API (`tracedb.query.v1`).
    pub mod query {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/tracedb.query.v1.rs"));
        }
    }
}

pub use tracedb::query;

/// Jaeger v2 remote storage (`jaeger.storage.v2`) and its structured filter
/// (`jaeger.expression.v1`): messages and clients.
pub mod jaeger {
    pub mod expression {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/jaeger.expression.v1.rs"));
        }
    }
    pub mod storage {
        pub mod v2 {
            include!(concat!(env!("OUT_DIR"), "/jaeger.storage.v2.rs"));
        }
    }
}

/// Server halves of `jaeger.storage.v2.TraceReader`, `DependencyReader` and
/// `Capabilities`; the trace streams send pre-encoded `TracesData`.
pub mod jaeger_storage {
    include!(concat!(
        env!("OUT_DIR"),
        "/raw/jaeger.storage.v2.TraceReader.rs"
    ));
    include!(concat!(
        env!("OUT_DIR"),
        "/raw/jaeger.storage.v2.DependencyReader.rs"
    ));
    include!(concat!(
        env!("OUT_DIR"),
        "/raw/jaeger.storage.v2.Capabilities.rs"
    ));
}
pub use jaeger_storage::{capabilities_server, dependency_reader_server, trace_reader_server};

/// The gRPC error model (`google.rpc.Status`, `google.rpc.RetryInfo`).
pub mod google {
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// Server half of `opentelemetry.proto.collector.trace.v1.TraceService`, taking raw request bytes.
pub mod trace_service {
    include!(concat!(
        env!("OUT_DIR"),
        "/raw/opentelemetry.proto.collector.trace.v1.TraceService.rs"
    ));
}
pub use trace_service::trace_service_server;

/// Server half of `tracedb.query.v1.QueryService`, sending pre-encoded `TracesData`.
pub mod query_service {
    include!(concat!(
        env!("OUT_DIR"),
        "/raw/tracedb.query.v1.QueryService.rs"
    ));
}
pub use query_service::query_service_server;

/// Encoded `FileDescriptorSet` of every `.proto` file above, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
