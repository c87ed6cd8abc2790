//! The tracedb server: configuration, start-up, serving and orderly shutdown.
//!
//! [`serve`] (and [`run`], which binds the addresses first) is the list of
//! what the server starts, in this order:
//! 1. Both listeners bound and answering, health NOT_SERVING. On the gRPC
//!    address: the OTLP `TraceService`, `tracedb.query.v1.QueryService`,
//!    Jaeger v2 remote storage (`jaeger.storage.v2.TraceReader`,
//!    `DependencyReader`), `grpc.health.v1.Health` and reflection. On the HTTP
//!    address: OTLP/HTTP `POST /v1/traces`, [`ops`]' `GET /metrics` and
//!    `GET /ready`, and the Grafana Tempo API (`tracedb_query::tempo`:
//!    `/api/traces`, `/api/v2/traces`, `/api/search`, tags), and the trace
//!    viewer that reads it at `GET /` ([`ui`]). `services` builds
//!    both; the query services are [`deferred`] until the engine exists
//!    (like everything that waits for the engine: the Tempo API, `/metrics`'
//!    engine counters and ingest, through `tracedb_proto::start::StartCell`).
//! 2. The storage engine opened (WAL replayed).
//! 3. Ingest and queries switched on, health SERVING; the `sampler` hands the
//!    memory budget (`tracedb_lsm::budget`, which ingest and the engine share)
//!    the process's memory as [`memory`] measures it, and flushes early when
//!    the budget asks.
//! 4. On shutdown: ingest refuses new exports and health says NOT_SERVING;
//!    both listeners stop accepting; in-flight requests finish; every buffer is
//!    flushed to files and the WAL closed — all within
//!    `--shutdown-timeout-secs`.
//!
//! Around it:
//! - [`config`]: the options of `tracedb serve` (flags, `TRACEDB_*`
//!   variables, a TOML file) and their validation.
//! - `listen`: each listener plaintext or TLS, decided in one place. With
//!   `--tls-cert` and `--tls-key` both serve TLS only ([`tls`]): the files are
//!   checked at start-up, each listener's TCP connections are handshaken in
//!   their own tasks and handed to tonic and axum finished. Without them both
//!   listeners are plaintext.
//! - [`runtime`]: the tokio runtime of `tracedb serve`, whose threads ask for
//!   short time slices, and the signals that stop the server.
//! - [`tier`]: `tracedb query`, the read tier over many storage nodes: the
//!   same read services over `tracedb_query::fanout` instead of an engine.
//! - [`cli`]: the command-line clients (`tracedb get`, `search`, `check`),
//!   which talk to a server and are no part of it; `main.rs` only dispatches
//!   to them and to [`run`].

pub mod cli;
pub mod config;
pub mod deferred;
mod listen;
pub mod memory;
pub mod ops;
pub mod overrides;
pub mod runtime;
mod sampler;
mod services;
pub mod tenancy;
pub mod tier;
pub mod tls;
pub mod ui;

use std::{future::Future, sync::Arc, time::Instant};

use anyhow::Context;
use tokio::sync::watch;
use tracedb_ingest::Ingest;
use tracedb_lsm::Stores;
use tracedb_proto::start::StartCell;

pub use config::{
    ByteSize, Config, ConfigError, TierConfig, DEFAULT_DATA_DIR, DEFAULT_GRPC_ADDR,
    DEFAULT_HTTP_ADDR,
};
pub use listen::Listeners;

use crate::{
    listen::{Incoming, Tls},
    overrides::Watch,
    sampler::Sampler,
    services::{grpc_router, http_router, set_health, QueryServices},
    tenancy::Tenancy,
};

/// Binds both addresses and runs the server until `shutdown` resolves.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listeners = Listeners::bind(config.grpc_addr, config.http_addr).await?;
    serve(config, listeners, shutdown).await
}

/// [`run`] on listeners that are already bound: the steps of the module
/// docs, in that order.
pub async fn serve(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let grpc_addr = listeners.grpc.local_addr()?;
    let http_addr = listeners.http.local_addr()?;
    let tls = Tls::load(config.tls_files())?;
    let tls_mode = Tls::mode(tls.as_ref());

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
    let stores_cell: StartCell<Arc<Stores>> = StartCell::new();
    let overrides_cell: StartCell<Option<Arc<Watch>>> = StartCell::new();
    let tenancy = config.tenancy_rule();
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, tonic_health::ServingStatus::NotServing).await;

    // 1. Both listeners answer, health NOT_SERVING.
    let query = QueryServices::default();
    let grpc_incoming = Incoming::grpc(listeners.grpc, tls.as_ref())?;
    let grpc_task = grpc_incoming.serve_grpc(
        grpc_router(
            &config,
            ingest.clone(),
            query.clone(),
            health_service,
            tenancy.clone(),
        )?,
        stopped(stop_rx.clone()),
    );
    let handshakes = Tls::handshake_logs(tls.as_ref());
    let http_router = http_router(
        &ingest,
        &stores_cell,
        &overrides_cell,
        &query.tempo,
        &governor,
        handshakes,
        tenancy,
    );
    let http_task =
        Incoming::http(listeners.http, tls.as_ref())?.serve_http(http_router, stopped(stop_rx));
    tracing::info!(grpc = %grpc_addr, http = %http_addr, tls = %tls_mode, "tracedb starting: opening storage");

    // 2. The stores open (their WALs are replayed): the single tenant's, and
    // with tenancy every tenant's.
    // They count their buffered spans in the budget ingest admits against.
    let mut engine_opts = config.engine_options();
    engine_opts.memory_budget = Some(ingest.budget().clone());
    engine_opts.cold = match config.cold_options() {
        Ok(cold) => cold,
        Err(e) => {
            let _ = stop_tx.send(true);
            let _ = tokio::join!(grpc_task, http_task);
            return Err(e.context("--object-store"));
        }
    };
    let tenancy_on = config.tenancy != Tenancy::Off;
    let opened = tokio::task::spawn_blocking(move || Stores::open(engine_opts, tenancy_on))
        .await?
        .with_context(|| format!("opening the data directory {}", config.data_dir.display()));
    let stores = match opened {
        Ok(stores) => Arc::new(stores),
        Err(e) => {
            let _ = stop_tx.send(true);
            let _ = tokio::join!(grpc_task, http_task);
            return Err(e);
        }
    };

    // The tenants' limits, before anything is taken.
    let watched = match config.overrides.clone() {
        None => Ok(None),
        Some(path) => {
            let (retention, ingest, stores) = (config.retention.0, ingest.clone(), stores.clone());
            tokio::task::spawn_blocking(move || Watch::start(&path, retention, &ingest, &stores))
                .await?
                .map(Some)
        }
    };
    let overrides = match watched {
        Ok(watch) => watch,
        Err(e) => {
            let _ = stop_tx.send(true);
            let _ = tokio::join!(grpc_task, http_task);
            let _ = tokio::task::spawn_blocking(move || stores.close()).await;
            return Err(anyhow::anyhow!(e));
        }
    };
    let reloader = overrides.clone().map(|watch| {
        let (ingest, stores) = (ingest.clone(), stores.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(overrides::RELOAD_INTERVAL);
            loop {
                tick.tick().await;
                let (watch, ingest, stores) = (watch.clone(), ingest.clone(), stores.clone());
                let _ = tokio::task::spawn_blocking(move || watch.reload(&ingest, &stores)).await;
            }
        })
    });
    overrides_cell.set(overrides);

    // 3. Ingest and queries switched on, health SERVING.
    stores_cell.set(stores.clone());
    query.start(&stores);
    ingest.start(stores.clone());
    set_health(&health, tonic_health::ServingStatus::Serving).await;
    // The search index's digests, read before the first search needs them.
    let warm = stores.clone();
    tokio::task::spawn_blocking(move || {
        let mut files = 0;
        for (tenant, engine) in warm.all() {
            match engine.warm_index() {
                Ok(n) => files += n,
                Err(e) => tracing::warn!(%tenant, error = %e, "reading the search index digests"),
            }
        }
        tracing::info!(files, "search index digests read");
    });
    let sampler = Sampler::spawn(ingest.budget().clone(), stores.clone(), governor.clone());
    tracing::info!(
        grpc = %grpc_addr,
        http = %http_addr,
        tls = %tls_mode,
        data_dir = %config.data_dir.display(),
        max_memory = %config.max_memory,
        "tracedb listening (grpc: OTLP TraceService, QueryService, Jaeger TraceReader, DependencyReader and Capabilities, health, reflection; http: POST /v1/traces, GET /metrics, GET /ready, Tempo /api, the viewer at GET /)"
    );

    // 4. On the signal: refuse exports, stop accepting, finish in-flight
    // requests, flush and close, all before the deadline.
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
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    tracing::info!("flushing buffers to files");
    let close = tokio::task::spawn_blocking(move || stores.close());
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
