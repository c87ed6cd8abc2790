//! `opentelemetry.proto.collector.trace.v1.TraceService/Export` over gRPC.
//!
//! The request body arrives as raw bytes (see `tracedb_proto::codec`), is scanned
//! and validated without building prost trees, and its valid spans are handed to
//! the storage engine, which returns once they are in an fsynced WAL. Only then
//! does the client get OK. Spans with invalid IDs are reported through
//! `partial_success` while the rest of the request is stored.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tracedb_lsm::Engine;
use tracedb_proto::{
    codec::RawRequest,
    collector::trace::v1::{ExportTracePartialSuccess, ExportTraceServiceResponse},
    trace_service_server::TraceService,
};

use crate::scan::scan_export_request;

/// Typical encoded size of a span, to size the output vector in one allocation.
const TYPICAL_SPAN_BYTES: usize = 128;

/// The OTLP trace receiver over one storage engine.
#[derive(Clone)]
pub struct OtlpTraceService {
    engine: Arc<Engine>,
}

impl OtlpTraceService {
    pub fn new(engine: Arc<Engine>) -> Self {
        OtlpTraceService { engine }
    }
}

#[tonic::async_trait]
impl TraceService for OtlpTraceService {
    #[tracing::instrument(skip_all, fields(bytes = request.get_ref().0.len()))]
    async fn export(
        &self,
        request: Request<RawRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let body = request.into_inner().0;
        let mut spans = Vec::with_capacity(body.len() / TYPICAL_SPAN_BYTES + 1);
        let outcome = scan_export_request(&body, &mut spans).map_err(|e| {
            Status::invalid_argument(format!("malformed ExportTraceServiceRequest: {e}"))
        })?;
        self.engine.write(spans).await.map_err(storage_status)?;
        let partial_success = (outcome.rejected > 0).then(|| ExportTracePartialSuccess {
            rejected_spans: i64::try_from(outcome.rejected).unwrap_or(i64::MAX),
            error_message: outcome.rejection_message,
        });
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success,
        }))
    }
}

/// Storage failures are retryable from the client's point of view: nothing of the
/// request was acknowledged, and the OTLP spec has clients retry UNAVAILABLE.
fn storage_status(e: tracedb_lsm::Error) -> Status {
    tracing::warn!(error = %e, "export not stored");
    Status::unavailable(format!("spans not stored: {e}"))
}
