//! Compiles the `.proto` files with protox (a pure-Rust protobuf compiler), so a fresh machine
//! builds with cargo alone, and writes:
//! - prost message types and tonic clients for every file;
//! - the server halves of `TraceService`, `QueryService` and Jaeger's `TraceReader`,
//!   `DependencyReader` and `Capabilities` through tonic's manual service builder, so their handlers receive and send raw protobuf bytes (see `codec.rs`);
//! - the encoded descriptor set that gRPC server reflection serves.

use std::{env, error::Error, fs, path::PathBuf};

use prost::Message;
use tonic_build::manual::{Builder, Method, Service};

const PROTOS: &[&str] = &[
    "proto/opentelemetry/proto/common/v1/common.proto",
    "proto/opentelemetry/proto/resource/v1/resource.proto",
    "proto/opentelemetry/proto/trace/v1/trace.proto",
    "proto/opentelemetry/proto/collector/trace/v1/trace_service.proto",
    "proto/tracedb/query/v1/query.proto",
    "proto/google/rpc/status.proto",
    "proto/google/rpc/error_details.proto",
    "proto/jaeger/expression/v1/expression.proto",
    "proto/jaeger/storage/v2/trace_storage.proto",
    "proto/jaeger/storage/v2/dependency_storage.proto",
    "proto/jaeger/storage/v2/capabilities.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }

    let descriptors = protox::compile(PROTOS, ["proto"])?;
    fs::write(out_dir.join("descriptors.bin"), descriptors.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(false)
        .bytes(".")
        .compile_fds(descriptors)?;

    let export = Method::builder()
        .name("export")
        .route_name("Export")
        .input_type("crate::codec::RawRequest")
        .output_type("crate::collector::trace::v1::ExportTraceServiceResponse")
        .codec_path("crate::codec::RawCodec")
        .build();
    let trace_service = Service::builder()
        .name("TraceService")
        .package("opentelemetry.proto.collector.trace.v1")
        .method(export)
        .build();
    let get_trace = Method::builder()
        .name("get_trace")
        .route_name("GetTrace")
        .input_type("crate::query::v1::GetTraceRequest")
        .output_type("crate::codec::EncodedMessage")
        .codec_path("crate::codec::RawCodec")
        .server_streaming()
        .build();
    let search_traces = Method::builder()
        .name("search_traces")
        .route_name("SearchTraces")
        .input_type("crate::query::v1::SearchTracesRequest")
        .output_type("crate::query::v1::SearchTracesResponse")
        .codec_path("crate::codec::RawCodec")
        .build();
    let query = |name: &str, route: &str, input: &str, output: &str| {
        Method::builder()
            .name(name)
            .route_name(route)
            .input_type(format!("crate::query::v1::{input}"))
            .output_type(format!("crate::query::v1::{output}"))
            .codec_path("crate::codec::RawCodec")
            .build()
    };
    let query_service = Service::builder()
        .name("QueryService")
        .package("tracedb.query.v1")
        .method(get_trace)
        .method(search_traces)
        .method(query("get_services", "GetServices", "TimeWindow", "Names"))
        .method(query(
            "get_operations",
            "GetOperations",
            "GetOperationsRequest",
            "GetOperationsResponse",
        ))
        .method(query(
            "get_span_names",
            "GetSpanNames",
            "TimeWindow",
            "Names",
        ))
        .method(query(
            "get_tag_keys",
            "GetTagKeys",
            "TimeWindow",
            "GetTagKeysResponse",
        ))
        .method(query(
            "get_tag_values",
            "GetTagValues",
            "GetTagValuesRequest",
            "Names",
        ))
        .method(query(
            "get_dependencies",
            "GetDependencies",
            "TimeWindow",
            "GetDependenciesResponse",
        ))
        .method(query(
            "query_metrics",
            "QueryMetrics",
            "QueryMetricsRequest",
            "QueryMetricsResponse",
        ))
        .build();
    let jaeger = |name: &str, route: &str, input: &str, output: &str, streaming: bool| {
        let m = Method::builder()
            .name(name)
            .route_name(route)
            .input_type(format!("crate::jaeger::storage::v2::{input}"))
            .output_type(output)
            .codec_path("crate::codec::RawCodec");
        if streaming {
            m.server_streaming().build()
        } else {
            m.build()
        }
    };
    let v2 = |t: &str| format!("crate::jaeger::storage::v2::{t}");
    let trace_reader = Service::builder()
        .name("TraceReader")
        .package("jaeger.storage.v2")
        .method(jaeger(
            "get_traces",
            "GetTraces",
            "GetTracesRequest",
            "crate::codec::EncodedMessage",
            true,
        ))
        .method(jaeger(
            "get_services",
            "GetServices",
            "GetServicesRequest",
            &v2("GetServicesResponse"),
            false,
        ))
        .method(jaeger(
            "get_operations",
            "GetOperations",
            "GetOperationsRequest",
            &v2("GetOperationsResponse"),
            false,
        ))
        .method(jaeger(
            "find_traces",
            "FindTraces",
            "FindTracesRequest",
            "crate::codec::EncodedMessage",
            true,
        ))
        .method(jaeger(
            "find_trace_ids",
            "FindTraceIDs",
            "FindTraceIDsRequest",
            &v2("FindTraceIDsResponse"),
            false,
        ))
        .method(jaeger(
            "find_trace_summaries",
            "FindTraceSummaries",
            "FindTraceSummariesRequest",
            &v2("FindTraceSummariesResponse"),
            true,
        ))
        .build();
    let capabilities = Service::builder()
        .name("Capabilities")
        .package("jaeger.storage.v2")
        .method(jaeger(
            "get_capabilities",
            "GetCapabilities",
            "GetCapabilitiesRequest",
            &v2("GetCapabilitiesResponse"),
            false,
        ))
        .build();
    let dependency_reader = Service::builder()
        .name("DependencyReader")
        .package("jaeger.storage.v2")
        .method(jaeger(
            "get_dependencies",
            "GetDependencies",
            "GetDependenciesRequest",
            &v2("GetDependenciesResponse"),
            false,
        ))
        .build();
    fs::create_dir_all(out_dir.join("raw"))?;
    Builder::new()
        .build_client(false)
        .out_dir(out_dir.join("raw"))
        .compile(&[
            trace_service,
            query_service,
            trace_reader,
            dependency_reader,
            capabilities,
        ]);
    Ok(())
}
