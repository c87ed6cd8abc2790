//! `opentelemetry.proto.collector.trace.v1.TraceService/Export` over gRPC.
//!
//! The request body arrives as raw bytes (see `tracedb_proto::codec`), already
//! decompressed and bounded by tonic; [`Ingest`] admits, scans and stores it, and
//! [`crate::status`] turns a refusal into the status OTLP prescribes. Spans with
//! invalid IDs are reported through `partial_success` while the rest of the
//! request is stored.

use std::{sync::Arc, time::Instant};

use tonic::{Request, Response, Status};
use tracedb_proto::{
    codec::RawRequest,
    collector::trace::v1::{ExportTracePartialSuccess, ExportTraceServiceResponse},
    tenant::Tenants,
    trace_service_server::TraceService,
};

use crate::{
    export::{tenant_of, Ingest},
    metrics::Protocol,
    scan::ScanOutcome,
    status::grpc_status,
};

/// The OTLP trace receiver over gRPC.
#[derive(Clone)]
pub struct OtlpTraceService {
    ingest: Arc<Ingest>,
}

impl OtlpTraceService {
    pub fn new(ingest: Arc<Ingest>) -> Self {
        OtlpTraceService { ingest }
    }
}

#[tonic::async_trait]
impl TraceService for OtlpTraceService {
    #[tracing::instrument(skip_all, fields(bytes = request.get_ref().0.len()))]
    async fn export(
        &self,
        request: Request<RawRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let started = Instant::now();
        let tenant = tenant_of(request.extensions().get::<Tenants>());
        let body = request.into_inner().0;
        self.ingest
            .metrics()
            .record_bytes(Protocol::Grpc, body.len());
        let result = match &tenant {
            Ok(tenant) => match self.ingest.admit(tenant, body.len()) {
                Ok(permit) => self.ingest.store(tenant, body, permit).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(crate::Error::Tenant(e.clone())),
        };
        self.ingest
            .finish(Protocol::Grpc, tenant.as_ref().ok(), &result, started);
        match result {
            Ok(outcome) => Ok(Response::new(export_response(outcome))),
            Err(e) => Err(grpc_status(&e)),
        }
    }
}

/// OK, with `partial_success` when some spans were rejected.
pub fn export_response(outcome: ScanOutcome) -> ExportTraceServiceResponse {
    let partial_success = (outcome.rejected > 0).then(|| ExportTracePartialSuccess {
        rejected_spans: i64::try_from(outcome.rejected).unwrap_or(i64::MAX),
        error_message: outcome.rejection_message,
    });
    ExportTraceServiceResponse { partial_success }
}
