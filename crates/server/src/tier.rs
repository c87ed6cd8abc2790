//! `tracedb query`: the stateless read tier that answers for many storage
//! nodes. It stores nothing and routes nothing: the OpenTelemetry
//! Collector's `load_balancing` exporter puts each trace on one node of each
//! replica group, and this tier asks every node and merges
//! ([`tracedb_query::fanout`]).
//!
//! It serves every read API a node serves, the same way (the same front-ends
//! over [`tracedb_query::read::Reads`]): on the gRPC address
//! `tracedb.query.v1.QueryService`, Jaeger's `TraceReader` and
//! `DependencyReader`, health and reflection; on the HTTP address the Tempo
//! API, the trace viewer (`GET /`, [`crate::ui`]), `GET /metrics` and
//! `GET /ready`. An export sent to it is refused with
//! a message naming the Collector (UNIMPLEMENTED on gRPC, 404 on HTTP), never
//! dropped.
//!
//! Health is SERVING while some replica group answers in full: it lacks no
//! node (see [`tracedb_query::fanout::Group::missing`]) and every node
//! of it says SERVING to a health check (one every [`PROBE_INTERVAL`], each
//! bounded by the node timeout). `/ready` says the same.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get, Router};
use tokio::sync::watch;
use tonic::{transport::Channel, Request, Response, Status};
use tonic_health::{pb::health_client::HealthClient, ServingStatus};
use tracedb_ingest::exposition::{self, family, single, DescriptorEncoder, Kind};
use tracedb_proto::{
    codec::RawRequest, collector::trace::v1::ExportTraceServiceResponse,
    trace_service_server::TraceServiceServer,
};
use tracedb_query::{fanout::NodeReads, read, tenants::TierReads};

use crate::{
    config::TierConfig,
    listen::{Incoming, Listeners, Tls},
    services::{reflection, set_health, QueryServices},
    stopped,
};

/// How often the tier asks each node whether it serves.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// What an export to the tier is told.
pub const NO_INGEST: &str = "tracedb query is the read tier and stores nothing: send spans to the \
OpenTelemetry Collector that routes them to the storage nodes (its load_balancing exporter with \
routing_key: traceID), or to a node's OTLP port";

/// Binds both addresses and runs the tier until `shutdown` resolves.
pub async fn run(
    config: TierConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listeners = Listeners::bind(config.grpc_addr, config.http_addr).await?;
    serve(config, listeners, shutdown).await
}

/// [`run`] on listeners that are already bound.
pub async fn serve(
    config: TierConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let grpc_addr = listeners.grpc.local_addr()?;
    let http_addr = listeners.http.local_addr()?;
    let tls = Tls::load(config.tls_files())?;
    let options = config.fanout();
    let timeout = options.node_timeout;
    let node_tls = config.node_tls()?;
    let nodes = Arc::new(NodeReads::with_channels(
        config.groups(),
        options,
        move |dial| match &node_tls {
            None => Ok(Channel::from_shared(format!("http://{}", dial.addr))
                .map_err(|e| e.to_string())?
                .connect_timeout(timeout)
                .tcp_nodelay(true)
                .connect_lazy()),
            Some(tls) => tls
                .lazy_channel(&format!("https://{}", dial.addr), dial.name, timeout)
                .map_err(|e| e.to_string()),
        },
    )?);
    // The names are resolved before the first answer, then kept fresh.
    nodes.resolve().await;
    let (stop_tx, stop_rx) = watch::channel(false);

    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::NotServing).await;
    let query = QueryServices::default();
    let tenancy = config.tenancy_rule();
    let header = tenancy.as_ref().map(|_| config.tenant_header.as_str());
    query.start_with(Arc::new(TierReads::new(nodes.clone(), header)?));
    let grpc_router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_routes(reflection()?)
        .add_service(health_service)
        .add_service(TraceServiceServer::new(NoIngest));
    let grpc_task = Incoming::grpc(listeners.grpc, tls.as_ref())?.serve_grpc(
        query.clone().add_to(grpc_router, tenancy.clone()),
        stopped(stop_rx.clone()),
    );

    let serving = Arc::new(AtomicBool::new(false));
    let http_router = tracedb_query::tempo::router(query.tempo.clone())
        .layer(axum::middleware::from_fn_with_state(
            tenancy,
            crate::tenancy::scope_http,
        ))
        .merge(
            Router::new()
                .route("/metrics", get(metrics))
                .route("/ready", get(ready))
                .route(
                    "/v1/traces",
                    axum::routing::post(|| async { (StatusCode::NOT_FOUND, NO_INGEST) }),
                )
                .with_state(TierState {
                    nodes: nodes.clone(),
                    serving: serving.clone(),
                }),
        )
        .merge(crate::ui::router());
    let http_task = Incoming::http(listeners.http, tls.as_ref())?
        .serve_http(http_router, stopped(stop_rx.clone()));
    let resolver = tokio::spawn({
        let (nodes, stop) = (nodes.clone(), stopped(stop_rx.clone()));
        async move { nodes.keep_resolving(stop).await }
    });
    let prober = tokio::spawn(probe(
        nodes.clone(),
        health.clone(),
        serving.clone(),
        stop_rx,
    ));
    tracing::info!(
        grpc = %grpc_addr,
        http = %http_addr,
        tls = %Tls::mode(tls.as_ref()),
        node_tls = config.node_tls_ca.is_some(),
        groups = ?config.groups(),
        node_timeout_ms = config.node_timeout_ms,
        "tracedb query listening (grpc: QueryService, Jaeger TraceReader, DependencyReader and Capabilities, health, reflection; http: Tempo /api, the viewer at GET /, GET /metrics, GET /ready)"
    );

    shutdown.await;
    let deadline = Instant::now() + config.shutdown_timeout();
    tracing::info!("shutting down: finishing in-flight reads");
    set_health(&health, ServingStatus::NotServing).await;
    let _ = stop_tx.send(true);
    let _ = prober.await;
    let _ = resolver.await;
    match tokio::time::timeout_at(deadline.into(), async {
        tokio::join!(grpc_task, http_task)
    })
    .await
    {
        Ok((grpc, http)) => {
            grpc?.context("serving gRPC")?;
            http?.context("serving HTTP")?;
        }
        Err(_) => tracing::warn!("in-flight reads did not finish within the shutdown timeout"),
    }
    tracing::info!("shut down cleanly");
    Ok(())
}

/// The OTLP `TraceService` of a tier: every export refused, saying where to send it.
struct NoIngest;

#[tonic::async_trait]
impl tracedb_proto::trace_service_server::TraceService for NoIngest {
    async fn export(
        &self,
        _request: Request<RawRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        Err(Status::unimplemented(NO_INGEST))
    }
}

/// Health checks every node each [`PROBE_INTERVAL`]; SERVING while some
/// group's nodes all serve.
async fn probe(
    nodes: Arc<NodeReads>,
    health: tonic_health::server::HealthReporter,
    serving: Arc<AtomicBool>,
    mut stop: watch::Receiver<bool>,
) {
    let timeout = nodes.node_timeout();
    loop {
        let mut groups_up = Vec::new();
        for group in &nodes.groups().groups {
            let mut checks = tokio::task::JoinSet::new();
            for node in &group.nodes {
                let mut client = HealthClient::new(node.channel());
                checks.spawn(async move {
                    let check = client.check(tonic_health::pb::HealthCheckRequest {
                        service: String::new(),
                    });
                    matches!(
                        tokio::time::timeout(timeout, check).await,
                        Ok(Ok(r)) if r.get_ref().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
                    )
                });
            }
            let mut all = !group.is_missing_nodes();
            while let Some(up) = checks.join_next().await {
                all &= up.unwrap_or(false);
            }
            groups_up.push(all);
        }
        let up = groups_up.iter().any(|&g| g);
        if serving.swap(up, Ordering::AcqRel) != up {
            tracing::info!(groups_up = ?groups_up, serving = up, "node groups answering changed");
            let status = if up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            set_health(&health, status).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(PROBE_INTERVAL) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[derive(Clone)]
struct TierState {
    nodes: Arc<NodeReads>,
    serving: Arc<AtomicBool>,
}

async fn ready(State(state): State<TierState>) -> impl IntoResponse {
    if state.serving.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no replica group has every node answering\n",
        )
    }
}

async fn metrics(State(state): State<TierState>) -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
        render(&state),
    )
}

/// The tier's `/metrics`: per node calls, errors, timeouts and time, and
/// the partial answers per API.
fn render(state: &TierState) -> String {
    let state = state.clone();
    exposition::render(move |out| collect(out, &state))
}

fn collect(out: &mut DescriptorEncoder<'_>, state: &TierState) -> std::fmt::Result {
    single(
        out,
        Kind::Gauge,
        "tracedb_query_serving",
        "1 while some replica group has every node answering health checks.",
        u64::from(state.serving.load(Ordering::Acquire)),
    )?;
    type Stat = fn(&tracedb_query::fanout::NodeStats) -> u64;
    let series: [(&str, &str, Stat); 4] = [
        (
            "tracedb_node_calls_total",
            "Calls to each storage node.",
            |s| s.calls.load(Ordering::Relaxed),
        ),
        (
            "tracedb_node_errors_total",
            "Calls to each node that failed or timed out (NOT_FOUND is an answer).",
            |s| s.errors.load(Ordering::Relaxed),
        ),
        (
            "tracedb_node_timeouts_total",
            "Calls to each node not answered within --node-timeout-ms.",
            |s| s.timeouts.load(Ordering::Relaxed),
        ),
        (
            "tracedb_node_call_microseconds_total",
            "Time each node took to answer, summed (divide by calls for the mean).",
            |s| s.micros.load(Ordering::Relaxed),
        ),
    ];
    let nodes = state.nodes.nodes();
    for (name, help, stat) in series {
        let samples = nodes.iter().map(|node| {
            let labels = [
                ("node", node.addr.to_string()),
                ("group", node.group.to_string()),
            ];
            (labels, stat(node.stats()))
        });
        family(out, Kind::Counter, name, help, samples)?;
    }
    family(
        out,
        Kind::Counter,
        "tracedb_partial_answers_total",
        "Answers sent without some source (a node that did not answer, a damaged file), by read API.",
        read::Api::ALL
            .into_iter()
            .map(|api| ([("api", api.label())], read::partial_answers(api))),
    )
}
