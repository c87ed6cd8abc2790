//! The tracedb server: configuration, start-up, serving and orderly shutdown.
//!
//! - [`config`]: the options of `tracedb serve` (flags, `TRACEDB_*`
//!   variables, a TOML file) and their validation.
//! - [`serve`] (and [`run`], which binds the addresses first) brings the server
//!   up in this order: both listeners bound and answering, health NOT_SERVING;
//!   the storage engine opened (WAL replayed); ingest and queries switched on,
//!   health SERVING. On the gRPC address: the OTLP `TraceService`,
//!   `tracedb.query.v1.QueryService`, Jaeger v2 remote storage
//!   (`jaeger.storage.v2.TraceReader`, `DependencyReader`),
//!   `grpc.health.v1.Health` and reflection.
//!   On the HTTP address: OTLP/HTTP `POST /v1/traces`, [`ops`]'
//!   `GET /metrics` and `GET /ready`, and the Grafana Tempo API
//!   (`tracedb_query::tempo`: `/api/traces`, `/api/v2/traces`, `/api/search`, tags).
//! - On shutdown: ingest refuses new exports and health says NOT_SERVING; both
//!   listeners stop accepting; in-flight requests finish; every buffer is
//!   flushed to files and the WAL closed — all within `--shutdown-timeout-secs`.
//! - [`tls`]: with `--tls-cert` and `--tls-key`, both listeners serve TLS
//!   only: the files are checked at start-up, each listener's TCP connections
//!   are handshaken in their own tasks and handed to tonic and axum finished.
//!   Without them both listeners are plaintext, as before.
//! - [`deferred`]: a gRPC service registered before its engine exists.
//! - [`runtime`]: the tokio runtime of `tracedb serve`, whose threads ask for
//!   short time slices, and the signals that stop the server.
//! - [`cli`]: the command-line clients (`tracedb get`, `search`, `check`),
//!   which talk to a server and are no part of it; `main.rs` only dispatches
//!   to them and to [`run`].

pub mod cli;
pub mod config;
pub mod deferred;
pub mod memory;
pub mod ops;
pub mod runtime;
pub mod tls;

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tonic::codec::CompressionEncoding;
use tracedb_ingest::{GrpcAdmission, Ingest, OtlpSizeStatus, OtlpTraceService};
use tracedb_lsm::Engine;
use tracedb_proto::{
    dependency_reader_server::DependencyReaderServer, query_service_server::QueryServiceServer,
    trace_reader_server::TraceReaderServer, trace_service_server::TraceServiceServer,
};
use tracedb_query::{JaegerStorage, QueryApi};

pub use config::{
    ByteSize, Config, ConfigError, DEFAULT_DATA_DIR, DEFAULT_GRPC_ADDR, DEFAULT_HTTP_ADDR,
};

use crate::{
    deferred::Deferred,
    tls::{HandshakeLog, ServerTls, TlsIncoming},
};

type IngestServer = TraceServiceServer<OtlpTraceService>;
type QueryServer = QueryServiceServer<QueryApi>;
type JaegerTraceServer = TraceReaderServer<JaegerStorage>;
type JaegerDependencyServer = DependencyReaderServer<JaegerStorage>;

/// The query services registered before the engine exists.
#[derive(Clone, Default)]
struct QueryServices {
    query: Deferred<QueryServer>,
    jaeger_traces: Deferred<JaegerTraceServer>,
    jaeger_dependencies: Deferred<JaegerDependencyServer>,
}

/// The two listeners, bound before [`serve`] is called.
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: TcpListener,
}

/// Binds both addresses and runs the server until `shutdown` resolves.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let grpc = TcpListener::bind(config.grpc_addr).await.with_context(|| {
        format!(
            "binding the gRPC address {} (--grpc-addr)",
            config.grpc_addr
        )
    })?;
    let http = TcpListener::bind(config.http_addr).await.with_context(|| {
        format!(
            "binding the HTTP address {} (--http-addr)",
            config.http_addr
        )
    })?;
    serve(config, Listeners { grpc, http }, shutdown).await
}

/// [`run`] on listeners that are already bound.
pub async fn serve(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let grpc_addr = listeners.grpc.local_addr()?;
    let http_addr = listeners.http.local_addr()?;
    // With TLS: the checked configuration and each listener's handshake log.
    let tls = match config.tls_files() {
        Some(files) => {
            let tls = ServerTls::load(files).map_err(|problems| {
                ConfigError::Invalid(problems.iter().map(ToString::to_string).collect())
            })?;
            let log = |listener| Arc::new(HandshakeLog::new(listener));
            Some((tls, log("grpc"), log("http")))
        }
        None => None,
    };
    let tls_mode = match &tls {
        None => "off",
        Some((tls, ..)) if tls.mutual => "mutual",
        Some(_) => "on",
    };

    // Poll the signal from the start, so SIGTERM during start-up is a clean stop.
    let (signal_tx, mut signal_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = signal_tx.send(true);
    });
    // Tells both servers to stop accepting.
    let (stop_tx, stop_rx) = watch::channel(false);

    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let ingest = Ingest::new(config.ingest_options());
    let governor = Arc::new(memory::Governor::new(config.max_memory.as_usize()));
    let engine_cell: Arc<OnceLock<Arc<Engine>>> = Arc::new(OnceLock::new());
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, tonic_health::ServingStatus::NotServing).await;

    let query = QueryServices::default();
    let grpc_incoming = match &tls {
        Some((tls, log, _)) => Incoming::Tls(TlsIncoming::spawn(
            listeners.grpc,
            tls.grpc.clone(),
            log.clone(),
        )?),
        None => Incoming::Tcp(listeners.grpc),
    };
    let grpc_task = spawn_grpc(
        grpc_incoming,
        &config,
        ingest.clone(),
        query.clone(),
        health_service,
        stopped(stop_rx.clone()),
    )?;
    let http_router = tracedb_ingest::http::router(ingest.clone())
        .merge(ops::router(ops::Ops {
            ingest: ingest.clone(),
            engine: engine_cell.clone(),
            memory: governor.clone(),
            tls_handshakes: tls
                .iter()
                .flat_map(|(_, grpc, http)| [grpc.clone(), http.clone()])
                .collect(),
        }))
        .merge(tracedb_query::tempo::router(engine_cell.clone()));
    let http_task = match &tls {
        Some((tls, _, log)) => {
            let incoming = TlsIncoming::spawn(listeners.http, tls.http.clone(), log.clone())?;
            tokio::spawn(async move {
                axum::serve(incoming, http_router)
                    .with_graceful_shutdown(stopped(stop_rx))
                    .await
            })
        }
        None => {
            let listener = axum::serve::ListenerExt::tap_io(listeners.http, |stream| {
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::trace!(error = %e, "setting TCP_NODELAY");
                }
            });
            tokio::spawn(async move {
                axum::serve(listener, http_router)
                    .with_graceful_shutdown(stopped(stop_rx))
                    .await
            })
        }
    };
    tracing::info!(grpc = %grpc_addr, http = %http_addr, tls = %tls_mode, "tracedb starting: opening storage");

    let engine_opts = config.engine_options();
    let opened = tokio::task::spawn_blocking(move || Engine::open(engine_opts))
        .await?
        .with_context(|| format!("opening the data directory {}", config.data_dir.display()));
    let engine = match opened {
        Ok(engine) => Arc::new(engine),
        Err(e) => {
            let _ = stop_tx.send(true);
            let _ = tokio::join!(grpc_task, http_task);
            return Err(e);
        }
    };
    let _ = engine_cell.set(engine.clone());
    query.query.set(
        QueryServiceServer::new(QueryApi::new(engine.clone()))
            .accept_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Gzip),
    );
    let jaeger = JaegerStorage::new(engine.clone());
    query.jaeger_traces.set(
        TraceReaderServer::new(jaeger.clone())
            .accept_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Gzip),
    );
    query
        .jaeger_dependencies
        .set(DependencyReaderServer::new(jaeger));
    ingest.start(engine.clone());
    set_health(&health, tonic_health::ServingStatus::Serving).await;
    let sampler = Sampler::spawn(ingest.clone(), engine.clone(), governor.clone());
    tracing::info!(
        grpc = %grpc_addr,
        http = %http_addr,
        tls = %tls_mode,
        data_dir = %config.data_dir.display(),
        max_memory = %config.max_memory,
        "tracedb listening (grpc: OTLP TraceService, QueryService, Jaeger TraceReader and DependencyReader, health, reflection; http: POST /v1/traces, GET /metrics, GET /ready, Tempo /api)"
    );

    let _ = signal_rx.wait_for(|stop| *stop).await;
    let deadline = Instant::now() + config.shutdown_timeout();
    tracing::info!(
        timeout_secs = config.shutdown_timeout_secs,
        "shutting down: refusing new exports, finishing in-flight ones"
    );
    ingest.shut_down();
    set_health(&health, tonic_health::ServingStatus::NotServing).await;
    let _ = stop_tx.send(true);

    let servers = async {
        let (grpc, http) = tokio::join!(grpc_task, http_task);
        (grpc, http)
    };
    match tokio::time::timeout_at(deadline.into(), servers).await {
        Ok((grpc, http)) => {
            grpc?.context("serving gRPC")?;
            http?.context("serving HTTP")?;
        }
        Err(_) => tracing::warn!(
            "in-flight requests did not finish within the shutdown timeout; closing their connections (none of them was acknowledged)"
        ),
    }

    sampler.stop(deadline).await;
    tracing::info!("flushing buffers to files");
    let close = tokio::task::spawn_blocking(move || engine.close());
    match tokio::time::timeout_at(deadline.into(), close).await {
        Ok(closed) => closed?.context("closing storage")?,
        Err(_) => {
            tracing::warn!(
                "buffers not flushed within the shutdown timeout; exiting anyway: every acknowledged span is in the fsynced WAL and is replayed at the next start"
            );
            return Ok(());
        }
    }
    tracing::info!("shut down cleanly");
    Ok(())
}

/// Resolves once `rx` says stop.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

async fn set_health(
    health: &tonic_health::server::HealthReporter,
    status: tonic_health::ServingStatus,
) {
    health.set_service_status("", status).await;
    health
        .set_service_status(<IngestServer as tonic::server::NamedService>::NAME, status)
        .await;
    health
        .set_service_status(<QueryServer as tonic::server::NamedService>::NAME, status)
        .await;
    health
        .set_service_status(
            <JaegerTraceServer as tonic::server::NamedService>::NAME,
            status,
        )
        .await;
    health
        .set_service_status(
            <JaegerDependencyServer as tonic::server::NamedService>::NAME,
            status,
        )
        .await;
}

/// What the gRPC server accepts connections from.
enum Incoming {
    Tcp(TcpListener),
    Tls(TlsIncoming),
}

fn spawn_grpc(
    incoming: Incoming,
    config: &Config,
    ingest: Arc<Ingest>,
    query: QueryServices,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<JoinHandle<Result<(), tonic::transport::Error>>> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tracedb_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tracedb_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let export = GrpcAdmission::new(
        OtlpSizeStatus::new(
            TraceServiceServer::new(OtlpTraceService::new(ingest.clone()))
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(config.max_message_bytes.as_usize()),
        ),
        ingest,
    );
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(export)
        .add_service(query.query)
        .add_service(query.jaeger_traces)
        .add_service(query.jaeger_dependencies);
    Ok(match incoming {
        Incoming::Tcp(listener) => {
            // Without TCP_NODELAY, small unary answers wait out delayed ACKs
            // (~40 ms). TlsIncoming sets it too.
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            tokio::spawn(router.serve_with_incoming_shutdown(incoming, stop))
        }
        Incoming::Tls(incoming) => {
            tokio::spawn(router.serve_with_incoming_shutdown(incoming, stop))
        }
    })
}

/// Keeps the memory budget's view of buffered spans and of the process's
/// memory current, and flushes early when buffered spans fill half of what
/// the budget admits.
struct Sampler {
    task: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    flush: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl Sampler {
    fn spawn(ingest: Arc<Ingest>, engine: Arc<Engine>, governor: Arc<memory::Governor>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flush: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>> = Arc::default();
        let (task_stop, task_flush) = (stop.clone(), flush.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(tracedb_ingest::export::SAMPLE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !task_stop.load(Ordering::Acquire) {
                tick.tick().await;
                let sampled = {
                    let (ingest, engine, governor) =
                        (ingest.clone(), engine.clone(), governor.clone());
                    tokio::task::spawn_blocking(move || {
                        // The budget takes the part of resident memory it
                        // does not count once its buffered figure is fresh.
                        let resident = governor.sample();
                        ingest.sample(&engine, resident)
                    })
                    .await
                };
                let needs_flush = sampled.unwrap_or(false);
                let mut running = task_flush.lock().await;
                let idle = running.as_ref().is_none_or(|h| h.is_finished());
                if needs_flush && idle && !task_stop.load(Ordering::Acquire) {
                    tracing::debug!("buffered spans fill half the memory budget: flushing early");
                    let engine = engine.clone();
                    *running = Some(tokio::task::spawn_blocking(move || {
                        if let Err(e) = engine.flush() {
                            tracing::warn!(error = %e, "early flush failed");
                        }
                    }));
                }
            }
        });
        Sampler { task, stop, flush }
    }

    /// Stops sampling and waits (until `deadline`) for an early flush in progress,
    /// which must not overlap the engine's close.
    async fn stop(self, deadline: Instant) {
        self.stop.store(true, Ordering::Release);
        let _ = tokio::time::timeout_at(deadline.into(), self.task).await;
        if let Some(flush) = self.flush.lock().await.take() {
            let _ = tokio::time::timeout_at(deadline.into(), flush).await;
        }
    }
}
