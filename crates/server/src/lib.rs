//! The tracedb server: configuration, start-up, serving and orderly shutdown.
//!
//! [`run`] opens the storage engine on the data directory, serves on the gRPC
//! address the OTLP `TraceService` (ingest), `tracedb.query.v1.QueryService`
//! (queries), `grpc.health.v1.Health` and server reflection, and on shutdown stops
//! accepting, lets in-flight requests finish, then flushes every buffer to files
//! and closes the WAL. [`render`] prints a trace for `tracedb get`.

pub mod render;

use std::{future::Future, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;
use tracedb_ingest::{OtlpSizeStatus, OtlpTraceService};
use tracedb_lsm::{Engine, EngineOptions, MemTableOptions};
use tracedb_proto::{
    query_service_server::QueryServiceServer, trace_service_server::TraceServiceServer,
};
use tracedb_query::QueryApi;

/// Default OTLP gRPC address.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:4317";
/// Default OTLP HTTP address.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:4318";
/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "./tracedb-data";

/// Everything `tracedb serve` can be told.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub grpc_addr: SocketAddr,
    /// Reserved for OTLP/HTTP; accepted and reported, not served yet.
    pub http_addr: SocketAddr,
    /// Largest accepted gRPC message after decompression.
    pub max_message_bytes: usize,
    pub memtable: MemTableOptions,
}

impl Config {
    /// The defaults, on `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Config {
            data_dir: data_dir.into(),
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 4317)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 4318)),
            max_message_bytes: 64 << 20,
            memtable: MemTableOptions::default(),
        }
    }
}

/// Runs the server until `shutdown` resolves, then shuts down in order.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.grpc_addr)
        .await
        .with_context(|| format!("binding the gRPC address {}", config.grpc_addr))?;
    serve(config, listener, shutdown).await
}

/// Accepted connections with Nagle's algorithm off: tonic sets TCP_NODELAY only on
/// sockets it accepts itself, and a streamed response (headers, data, trailers in
/// separate writes) would otherwise wait for the client's delayed ACK, ~40 ms.
fn incoming(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

/// [`run`] on a listener that is already bound.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut engine_opts = EngineOptions::new(&config.data_dir);
    engine_opts.memtable = config.memtable.clone();
    let engine = tokio::task::spawn_blocking(move || Engine::open(engine_opts))
        .await?
        .with_context(|| format!("opening the data directory {}", config.data_dir.display()))?;
    let engine = Arc::new(engine);

    let (health, health_service) = tonic_health::server::health_reporter();
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tracedb_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tracedb_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let ingest = OtlpSizeStatus::new(
        TraceServiceServer::new(OtlpTraceService::new(engine.clone()))
            .accept_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(config.max_message_bytes),
    );
    let query = QueryServiceServer::new(QueryApi::new(engine.clone()))
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    health
        .set_serving::<TraceServiceServer<OtlpTraceService>>()
        .await;
    health.set_serving::<QueryServiceServer<QueryApi>>().await;
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;

    let local = listener.local_addr()?;
    tracing::info!(
        grpc = %local,
        http = %config.http_addr,
        data_dir = %config.data_dir.display(),
        "tracedb listening (grpc: OTLP TraceService, QueryService, health, reflection; http address reserved for OTLP/HTTP)"
    );

    let shutdown_health = health.clone();
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: refusing new requests, finishing in-flight ones");
        shutdown_health
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        shutdown_health
            .set_not_serving::<TraceServiceServer<OtlpTraceService>>()
            .await;
        shutdown_health
            .set_not_serving::<QueryServiceServer<QueryApi>>()
            .await;
    };
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(ingest)
        .add_service(query)
        .serve_with_incoming_shutdown(incoming(listener), shutdown)
        .await
        .context("serving gRPC")?;

    tracing::info!("flushing buffers to files");
    tokio::task::spawn_blocking(move || engine.close())
        .await?
        .context("closing storage")?;
    tracing::info!("shut down cleanly");
    Ok(())
}
