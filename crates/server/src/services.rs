//! What the two listeners serve: the gRPC services (OTLP ingest, the query
//! API, Jaeger remote storage, health, reflection) and the HTTP routes
//! (OTLP/HTTP, `/metrics` and `/ready`, the Tempo API, the trace viewer). The query services
//! are registered before the engine exists and answer once it is open.

use std::{sync::Arc, time::Duration};

use tonic::codec::CompressionEncoding;
use tracedb_ingest::{GrpcAdmission, Ingest, OtlpSizeStatus, OtlpTraceService};
use tracedb_lsm::Stores;
use tracedb_proto::{
    capabilities_server::CapabilitiesServer, dependency_reader_server::DependencyReaderServer,
    query_service_server::QueryServiceServer, start::StartCell,
    trace_reader_server::TraceReaderServer, trace_service_server::TraceServiceServer,
};
use tracedb_query::{
    tempo::ReadsCell,
    tenants::{ReadsFor, StoreReads},
    JaegerStorage, QueryApi,
};

use crate::{
    config::Config,
    deferred::Deferred,
    memory, ops,
    overrides::Watch,
    tenancy::{scope_http, Rule, Tenanted},
    tls::HandshakeLog,
    ui,
};

type IngestServer = TraceServiceServer<OtlpTraceService>;
type QueryServer = QueryServiceServer<QueryApi>;
type JaegerTraceServer = TraceReaderServer<JaegerStorage>;
type JaegerDependencyServer = DependencyReaderServer<JaegerStorage>;
type JaegerCapabilitiesServer = CapabilitiesServer<JaegerStorage>;

/// The read services, registered before the store they read exists: the
/// gRPC ones and the Tempo API's cell.
#[derive(Clone, Default)]
pub(crate) struct QueryServices {
    query: Deferred<QueryServer>,
    jaeger_traces: Deferred<JaegerTraceServer>,
    jaeger_dependencies: Deferred<JaegerDependencyServer>,
    jaeger_capabilities: Deferred<JaegerCapabilitiesServer>,
    /// What the Tempo API reads, once set.
    pub(crate) tempo: ReadsCell,
}

impl QueryServices {
    /// Switches the read services on, each request reading the stores of
    /// the tenants it names, through the one read interface every front-end
    /// calls.
    pub(crate) fn start(&self, stores: &Arc<Stores>) {
        self.start_with(Arc::new(StoreReads::new(stores.clone())));
    }

    /// Adds the read services to a gRPC server's routes, each scoped to its
    /// requests' tenants by `tenancy` (`None`: tenancy off).
    pub(crate) fn add_to(
        self,
        router: tonic::transport::server::Router,
        tenancy: Option<Arc<Rule>>,
    ) -> tonic::transport::server::Router {
        router
            .add_service(Tenanted::new(self.query, tenancy.clone()))
            .add_service(Tenanted::new(self.jaeger_traces, tenancy.clone()))
            .add_service(Tenanted::new(self.jaeger_dependencies, tenancy.clone()))
            .add_service(Tenanted::new(self.jaeger_capabilities, tenancy))
    }

    /// Switches the read services on, reading `reads`.
    pub(crate) fn start_with(&self, reads: Arc<dyn ReadsFor>) {
        self.tempo.set(reads.clone());
        self.query.set(
            QueryServiceServer::new(QueryApi::new(reads.clone()))
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip),
        );
        let jaeger = JaegerStorage::new(reads);
        self.jaeger_traces.set(
            TraceReaderServer::new(jaeger.clone())
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip),
        );
        self.jaeger_dependencies
            .set(DependencyReaderServer::new(jaeger.clone()));
        self.jaeger_capabilities
            .set(CapabilitiesServer::new(jaeger));
    }
}

/// Every service's health (and the server's, `""`) set to `status`.
pub(crate) async fn set_health(
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
    health
        .set_service_status(
            <JaegerCapabilitiesServer as tonic::server::NamedService>::NAME,
            status,
        )
        .await;
}

/// The gRPC server's services; the query services answer once started.
pub(crate) fn grpc_router(
    config: &Config,
    ingest: Arc<Ingest>,
    query: QueryServices,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    tenancy: Option<Arc<Rule>>,
) -> anyhow::Result<tonic::transport::server::Router> {
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
        .add_routes(reflection()?)
        .add_service(health_service)
        .add_service(Tenanted::new(export, tenancy.clone()));
    Ok(query.add_to(router, tenancy))
}

/// gRPC server reflection, v1 and v1alpha, over tracedb's services and health.
pub(crate) fn reflection() -> anyhow::Result<tonic::service::Routes> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tracedb_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tracedb_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    Ok(tonic::service::Routes::new(reflection_v1).add_service(reflection_v1alpha))
}

/// The HTTP server's routes: OTLP/HTTP, `/metrics` and `/ready`, the Tempo
/// API, which answers once `tempo` is set, and the trace viewer that reads it.
/// OTLP/HTTP and the Tempo API are scoped to their requests' tenants by
/// `tenancy` (`None`: tenancy off).
pub(crate) fn http_router(
    ingest: &Arc<Ingest>,
    stores: &StartCell<Arc<Stores>>,
    overrides: &StartCell<Option<Arc<Watch>>>,
    tempo: &ReadsCell,
    memory: &Arc<memory::Governor>,
    tls_handshakes: Vec<Arc<HandshakeLog>>,
    tenancy: Option<Arc<Rule>>,
) -> axum::Router {
    let scoped = tracedb_ingest::http::router(ingest.clone())
        .merge(tracedb_query::tempo::router(tempo.clone()))
        .layer(axum::middleware::from_fn_with_state(tenancy, scope_http));
    scoped
        .merge(ops::router(ops::Ops {
            ingest: ingest.clone(),
            stores: stores.clone(),
            overrides: overrides.clone(),
            memory: memory.clone(),
            tls_handshakes,
        }))
        .merge(ui::router())
}
